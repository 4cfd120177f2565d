"""The estimators' checks of their inputs: scikit-learn's ``validate_data`` and
``check_classification_targets`` with fastep's messages (the row and column of the first
non-finite entry, the shape of a 1-d X, the fix).

scikit-learn is imported here, in ``fastep.models``, and nowhere below it: ``import fastep``
loads no scikit-learn until an estimator is used (the engine's own array checks are in
:mod:`fastep._checks`).
"""
from __future__ import annotations

from typing import Any, NoReturn, Tuple

import numpy as np
from numpy.typing import ArrayLike
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import column_or_1d, validate_data

from .._checks import TARGETS_FIX, _first, distinct_values, float_array
from .._dask import is_dask_array

__all__ = ["class_labels", "validate_X", "validate_X_y", "same_rows", "validate_column"]


def class_labels(y, return_inverse=False, name="y"):
    """The sorted distinct class labels of a NumPy or dask vector, checked as scikit-learn
    checks classification targets (``check_classification_targets``), and with
    ``return_inverse`` (NumPy only) each entry's index among them.  Labels of types that
    do not sort together (``["a", 0]``) are a ValueError naming the types."""
    try:
        if is_dask_array(y):
            classes = distinct_values(y)
            check_classification_targets(classes)
            return classes
        check_classification_targets(y)
        return np.unique(y, return_inverse=return_inverse)
    except ValueError as exc:
        _non_finite_targets(exc, y, name)
    except TypeError:
        kinds = sorted({type(v).__name__ for v in np.ravel(np.asarray(y))})
        raise ValueError(f"{name} mixes labels of the types {kinds}, which do not sort "
                         f"into classes; give labels of one type (e.g. {name}.astype(str))."
                         ) from None


def validate_X(estimator: Any, X: ArrayLike, **kwargs: Any) -> np.ndarray:
    """scikit-learn's ``validate_data`` of X alone (typed: the checked array); X that is
    not finite or not 2-d gets fastep's message (:func:`_bad_inputs`)."""
    _no_datetimes(X)
    try:
        return validate_data(estimator, X, **kwargs)
    except ValueError as exc:
        _bad_inputs(exc, X)
        raise


def validate_X_y(estimator: Any, X: ArrayLike, y: ArrayLike,
                 **kwargs: Any) -> Tuple[np.ndarray, np.ndarray]:
    """scikit-learn's ``validate_data`` of X and y (typed: the checked arrays).  Targets
    that are not finite get fastep's message (scikit-learn's names neither the row nor the
    fix): the index of the first, and what to do; so does X (:func:`_bad_inputs`)."""
    _no_datetimes(X)
    try:
        return validate_data(estimator, X, y, **kwargs)
    except ValueError as exc:
        _bad_inputs(exc, X)
        if str(exc).startswith("Found input variables with inconsistent numbers of samples"):
            same_rows(X, y)
        _non_finite_targets(exc, y, "y")


def _no_datetimes(X: Any) -> None:
    """A ValueError for datetime64 or timedelta64 columns in X (an array or a DataFrame):
    scikit-learn's checks turn them into numbers in their own unit (days, seconds, ...),
    so a model fitted on days and asked about seconds would be silently wrong."""
    dtypes = getattr(X, "dtypes", None)              # a DataFrame's, column by column
    if dtypes is None or isinstance(dtypes, np.dtype):
        dtypes = [getattr(X, "dtype", None)]
    if any(getattr(t, "kind", "") in ("M", "m") for t in dtypes):
        raise ValueError("X holds datetime64 or timedelta64 values; fastep reads X as "
                         "numbers, and the unit of a time would be a guess. Convert the "
                         "times to numbers first, e.g. (t - t0) / np.timedelta64(1, 'D') "
                         "for days since t0, the same way at fit and at predict.")


def same_rows(X: Any, y: Any) -> None:
    """A ValueError naming X, y and their row counts unless they have as many rows
    (scikit-learn's ``check_consistent_length`` names neither)."""
    if _rows(X) != _rows(y):
        raise ValueError(f"X and y must have the same number of rows; got {_rows(X)} and "
                         f"{_rows(y)}. Pass the targets of exactly the rows of X.")


def _rows(a: Any) -> Any:
    """The number of rows of an array-like, for a message (``?`` where it has none)."""
    shape = getattr(a, "shape", None)
    if shape is None:
        try:
            shape = np.shape(a)
        except (TypeError, ValueError):
            return "?"
    return shape[0] if len(shape) else "?"


#: The fix a message about inputs that are not finite gives.
INPUTS_FIX = ("Remove or impute those rows (e.g. sklearn.impute.SimpleImputer in a "
              "pipeline before the estimator).")


def _bad_inputs(exc: ValueError, X: Any) -> None:
    """Re-raise scikit-learn's ValueError ``exc`` where it is about X: where X holds NaN
    or infinity, as fastep's message with the row and column of the first such entry and
    the fix; where X is 1-d (or a scalar), naming X, its shape and the two reshapes,
    without scikit-learn's dump of the values; a wrong feature count with the fix.
    Returns where ``exc`` is about something else (y, their lengths)."""
    msg = str(exc)
    if msg.startswith("Input X contains"):
        what = "NaN" if "NaN" in msg else "infinity"
        where = ""
        if not is_dask_array(X):
            a = np.asarray(X)
            if a.dtype.kind in "biuf" and a.ndim == 2:
                bad = np.isnan(a) if what == "NaN" else np.isinf(a)
                if bad.any():
                    row, col = _first(bad)
                    where = f" at row {row}, column {col}"
        raise ValueError(f"X must be finite; got {what}{where}. {INPUTS_FIX}") from None
    if msg.startswith("X has ") and "features, but" in msg:
        raise ValueError(f"{msg.rstrip('.')}. Pass X with the columns the model was fitted "
                         f"on, in the same order.") from None
    if msg.startswith("Expected 2D array"):
        shape = tuple(np.shape(X)) if not is_dask_array(X) else tuple(X.shape)
        kind = "a scalar" if not shape else f"a 1-d array of shape {shape}"
        raise ValueError(f"X must be a 2-d array (n_samples, n_features); got {kind}. "
                         f"Reshape your data: X.reshape(-1, 1) if it is one feature, "
                         f"X.reshape(1, -1) if it is one sample.") from None


def _non_finite_targets(exc: ValueError, y: Any, name: str) -> NoReturn:
    """Re-raise scikit-learn's ValueError ``exc`` about ``y``: where it says the targets hold
    NaN or infinity, as fastep's message, with the index of the first and the fix."""
    if not str(exc).startswith(("Input y contains", "Input contains")):
        raise exc
    if np.asarray(y).dtype.kind in "biuf":
        float_array(y, name, np.ndim(y), fix=TARGETS_FIX)   # raises, naming the index
    raise ValueError(f"{name} must be finite; {exc} {TARGETS_FIX}") from None


def validate_column(y: ArrayLike, **kwargs: Any) -> np.ndarray:
    """scikit-learn's ``column_or_1d`` (typed: the checked 1-d array)."""
    return column_or_1d(y, **kwargs)
