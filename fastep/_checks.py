"""The one check every array passes at the public boundary, before compiled code reads it.

Compiled loops index their arrays without bounds checks, so each array they see must have
the shape, dtype and contiguity they were written for, and (unless NaN or infinity mean
something there) finite values.  :func:`float_array` is that check; a failure is a
``ValueError`` that names the argument, what was expected, what was got and how to fix it.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ._dask import is_dask_array
from .exceptions import DenseMemoryError      # noqa: F401  (its home in 0.2)

__all__ = ["float_array", "all_finite", "index_array", "integer_values", "distinct_values",
           "label_text", "TARGETS_FIX"]


def _describe(value):
    if isinstance(value, np.ndarray) or hasattr(value, "__cuda_array_interface__"):
        return f"an array of dtype {value.dtype} and shape {tuple(value.shape)}"
    return f"{type(value).__name__} {value!r:.60}"


def all_finite(a, xp=np):
    """Whether every entry of ``a`` is finite, without an n-sized temporary in the
    common case (the sum of finite numbers is finite unless it overflows)."""
    if a.size == 0:
        return True
    with np.errstate(over="ignore", invalid="ignore"):
        if bool(xp.isfinite(xp.sum(a))):
            return True
    return bool(xp.all(xp.isfinite(a)))


def _first(mask):
    """The index of the first True entry of a (NumPy or CuPy) mask."""
    mask = mask.get() if hasattr(mask, "get") else np.asarray(mask)
    idx = np.argwhere(mask)[0]
    return int(idx[0]) if idx.size == 1 else tuple(int(i) for i in idx)


def float_array(value: Any, name: str, ndim: int, shape: Any = None, *, allow_nan: bool = False,
                allow_inf: bool = False, positive: bool = False, column: bool = False,
                fix: str = "", xp: Any = np) -> np.ndarray:
    """``value`` as a C-ordered, writable float64 array of ``xp`` (NumPy or CuPy; typed as
    NumPy's, which CuPy's mirrors).

    Parameters
    ----------
    value : array_like
        Real numbers (bool, int and float dtypes; Python objects holding numbers).
    name : str
        The argument's name, for the error message.
    ndim : int
        Required number of dimensions.
    shape : tuple, optional
        Required shape; ``None`` or text entries (a name for the message, e.g. "m") are
        free.
    allow_nan, allow_inf : bool
        Whether NaN / +-infinity are meaningful values here (else they are an error).
    positive : bool
        Whether every value must be > 0.
    column : bool
        Whether a 1-d array is accepted as one column (an (n, 1) array) when ``ndim=2``.
    fix : str
        How to fix a bad value, appended to the message.

    Examples
    --------
    >>> float_array([1, 2], "y", 1)
    array([1., 2.])
    >>> float_array([1.0, float("nan")], "y", 1)
    Traceback (most recent call last):
    ...
    ValueError: y must be finite; got NaN at index 1.
    >>> float_array([[1.0]], "Z", 2, ("m", 3))
    Traceback (most recent call last):
    ...
    ValueError: Z must be an array of shape (m, 3); got shape (1, 1).
    """
    tail = f" {fix}" if fix else ""
    if value is None or isinstance(value, (str, bytes)):
        raise ValueError(f"{name} must be an array of real numbers; got "
                         f"{_describe(value)}.{tail}")
    kind = getattr(getattr(value, "dtype", None), "kind", None)
    if kind is not None and kind not in "biuf" and kind != "O":
        raise ValueError(f"{name} must hold real numbers (bool, int or float); got "
                         f"{_describe(value)}.{tail}")
    try:
        a = xp.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be an array of real numbers; got {_describe(value)} "
                         f"({exc}).{tail}") from None
    if column and ndim == 2 and a.ndim == 1:
        a = a[:, None]
    if a.ndim != ndim or (shape is not None and any(
            isinstance(s, int) and s != g for s, g in zip(shape, a.shape))):
        want = ("shape (" + ", ".join("n" if s is None else str(s) for s in shape) + ")"
                if shape is not None else f"{ndim} dimension(s)")
        raise ValueError(f"{name} must be an array of {want}; got shape {tuple(a.shape)}."
                         f"{tail}")
    if not (allow_nan and allow_inf) and not all_finite(a, xp):
        nan, inf = xp.isnan(a), xp.isinf(a)
        if not allow_nan and bool(xp.any(nan)):
            raise ValueError(f"{name} must be finite; got NaN at index {_first(nan)}.{tail}")
        if not allow_inf and bool(xp.any(inf)):
            raise ValueError(f"{name} must be finite; got infinity at index "
                             f"{_first(inf)}.{tail}")
    if positive and a.size and not bool(xp.all(a > 0)):
        bad = ~(a > 0)
        raise ValueError(f"{name} must be positive; got {float(a[bad].min())!r} at index "
                         f"{_first(bad)}.{tail}")
    if xp is np and not a.flags.writeable:
        return np.array(a, order="C")
    return xp.ascontiguousarray(a)


def index_array(value: Any, name: str, n: int, n_classes: int, fix: str = "") -> np.ndarray:
    """Class indices: an int64 array of shape (n,) with values in [0, n_classes)."""
    tail = f" {fix}" if fix else ""
    a = np.asarray(value)
    if a.shape != (n,) or a.dtype.kind not in "iu":
        raise ValueError(f"{name} must be an integer array of shape ({n},) holding class "
                         f"indices; got {_describe(value)}.{tail}")
    if n and (a.min() < 0 or a.max() >= n_classes):
        raise ValueError(f"{name} must hold class indices in [0, {n_classes}); got values in "
                         f"[{a.min()}, {a.max()}].{tail}")
    return np.ascontiguousarray(a, dtype=np.int64)


def integer_values(value, name, low, high, what, fix, finite_fix):
    """``value`` as a finite float vector of integers in ``[low, high]`` (``high`` None: no
    upper end), or a ``ValueError`` naming the first entry that is not, ``what`` it must
    hold and the ``fix`` (counts, ordinal levels); ``finite_fix`` for NaN or infinity."""
    y = float_array(value, name, 1, fix=finite_fix)
    bad = (y < low) | (y != np.round(y))
    if high is not None:
        bad |= y > high
    if np.any(bad):
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"{name} must hold {what}; {name}[{i}] = {float(y[i])!r}. {fix}")
    return y


def distinct_values(y):
    """The sorted distinct values of a NumPy or dask vector (for a dask one, computed on
    the workers: only the distinct values reach the caller)."""
    if is_dask_array(y):
        import dask.array as da
        return np.asarray(da.unique(y).compute())
    return np.unique(y)


def label_text(label: Any) -> str:
    """A class label as a message shows it: ``'yes'`` or ``3``, not NumPy's
    ``np.str_('yes')`` or ``np.int64(3)``."""
    return repr(label.item() if isinstance(label, np.generic) else label)


#: The fix a message about targets that are not finite gives (every estimator's).
TARGETS_FIX = ("Remove or impute the targets that are not finite (drop those rows of X "
               "and of the targets).")


def parameter_bounds(bounds: Any, name: str) -> Any:
    """ML-II bounds of a positive parameter as given to a kernel or likelihood:
    ``"fixed"`` (the parameter is not optimised), or ``(low, high)`` with
    ``0 < low < high < inf`` in natural units, returned as two floats; anything else is
    a ``ValueError`` naming ``name``'s bounds (a misspelt ``"fixd"`` or ``"free"`` fixed
    the parameter without a word, and a bound of 0 gave ML-II a log bound of -inf)."""
    if isinstance(bounds, str):
        if bounds == "fixed":
            return bounds
        raise ValueError(f"{name}_bounds must be a pair (low, high) or 'fixed'; got the "
                         f"string {bounds!r}. Pass 'fixed' to keep {name} at its value, or "
                         f"(low, high) with 0 < low < high to let ML-II move it.")
    try:
        lo, hi = (float(b) for b in bounds)
    except (TypeError, ValueError):
        raise ValueError(f"{name}_bounds must be a pair (low, high) or 'fixed'; got "
                         f"{bounds!r}.") from None
    if not 0 < lo < hi < np.inf:
        raise ValueError(f"{name}_bounds must satisfy 0 < low < high < inf (bounds of a "
                         f"positive parameter, in its own units; ML-II moves its log); got "
                         f"{bounds!r}.")
    return lo, hi
