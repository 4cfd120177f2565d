"""A model file's feature columns in Python: :class:`TableColumns` and the pipeline that a
model fitted by ``fastep fit`` loads as.

``fastep fit`` reads named columns from a table and, by default, standardises them by
their training means and sds; the model file keeps both.  Loaded in Python, such a file
is a scikit-learn :class:`~sklearn.pipeline.Pipeline` of a :class:`TableColumns` step
(select the columns, then ``(X - mean) / sd``) and the estimator, so that raw tables give
the same predictions as ``fastep predict`` (0.3's first draft loaded the bare estimator,
which predicted 0.5 for every raw row).  The estimators themselves know nothing of tables.
"""
from __future__ import annotations

from typing import Any, Optional, Sequence

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.pipeline import Pipeline

from .._checks import float_array

__all__ = ["TableColumns", "table_model", "table_parts"]


def _column_list(names, most=8):
    shown = ", ".join(map(repr, names[:most]))
    return f"{shown}{f', ... ({len(names)} in all)' if len(names) > most else ''}"


class TableColumns(TransformerMixin, BaseEstimator):
    """Select a table's feature columns and standardise them as ``fastep fit`` did.

    A transformer with nothing to learn: its parameters are what the model file holds.

    Parameters
    ----------
    columns : list of str or None, default=None
        The feature columns' names, in the model's order; a DataFrame (anything with a
        ``columns`` attribute) is read by these names, its other columns ignored.  An
        array is read by position and must have exactly these columns.  ``None``: by
        position only.
    mean, sd : array of shape (n_features,) or None, default=None
        Each column is mapped to ``(x - mean) / sd``; ``None``: taken as it is.

    Examples
    --------
    >>> import numpy as np, pandas as pd
    >>> from fastep.models import TableColumns
    >>> cols = TableColumns(["a", "b"], mean=[1.0, 0.0], sd=[2.0, 1.0])
    >>> cols.transform(pd.DataFrame({"b": [3.0], "a": [5.0], "target": [1]}))
    array([[2., 3.]])
    """

    def __init__(self, columns: Optional[Sequence[str]] = None, mean: Any = None,
                 sd: Any = None) -> None:
        self.columns = columns
        self.mean = mean
        self.sd = sd

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.requires_fit = False
        return tags

    def fit(self, X: Any = None, y: Any = None) -> "TableColumns":
        """Nothing to learn (the parameters are the fitted state); returns self.

        Parameters
        ----------
        X : DataFrame, array-like of shape (n_samples, n_features) or None, default=None
            Ignored.
        y : array-like of shape (n_samples,) or None, default=None
            Ignored.

        Returns
        -------
        self
        """
        return self

    def _width(self):
        if self.columns is not None:
            return len(self.columns)
        return None if self.mean is None else np.shape(self.mean)[0]

    def transform(self, X: Any) -> np.ndarray:
        """The model's feature columns of ``X`` as a float array, standardised.

        Parameters
        ----------
        X : DataFrame or array-like of shape (n_samples, n_columns)
            A table with a ``columns`` attribute (a pandas DataFrame) is read by the
            names in ``columns``, its other columns ignored; an array by position, with
            exactly the model's columns.  NaN and inf pass through.

        Returns
        -------
        ndarray of shape (n_samples, n_features)
            The selected columns, ``(x - mean) / sd`` where ``mean`` is set.
        """
        d = self._width()
        names = getattr(X, "columns", None)
        if self.columns is not None and names is not None:
            names = [str(c) for c in names]
            missing = [c for c in self.columns if c not in names]
            if missing:
                raise ValueError(f"X has no column {_column_list(missing)}, which the model "
                                 f"was fitted on (its columns: {_column_list(list(self.columns))}"
                                 f"); pass a table that has them (other columns are "
                                 f"ignored).")
            twice = [c for c in self.columns if names.count(c) > 1]
            if twice:
                raise ValueError(f"X has more than one column named {_column_list(twice)}; "
                                 f"rename them so that each of the model's columns is found "
                                 f"once.")
            X = X.iloc[:, [names.index(c) for c in self.columns]]
        a = float_array(X, "X", 2, allow_nan=True, allow_inf=True,
                        fix="Pass the raw feature columns, one row a sample.")
        if d is not None and a.shape[1] != d:
            which = (f"the columns {_column_list(list(self.columns))}, in this order"
                     if self.columns is not None else f"{d} columns, in the fitted order")
            raise ValueError(f"X has {a.shape[1]} columns; the model takes {which}. Pass a "
                             f"DataFrame with these names, or an array of exactly these "
                             f"columns.")
        if self.mean is not None:
            a = (a - np.asarray(self.mean, dtype=float)) / np.asarray(self.sd, dtype=float)
        return a


def table_model(estimator: Any, columns: Optional[Sequence[str]] = None, mean: Any = None,
                sd: Any = None) -> Any:
    """``estimator`` behind a :class:`TableColumns` step, as a Pipeline (the estimator
    itself where there is nothing to select or scale)."""
    if columns is None and mean is None:
        return estimator
    return Pipeline([("columns", TableColumns(columns, mean, sd)), ("model", estimator)])


def table_parts(model: Any):
    """``(estimator, TableColumns or None)`` of a bare estimator or of a pipeline made by
    :func:`table_model`; a ValueError for any other pipeline."""
    if isinstance(model, Pipeline):
        steps = model.steps
        if len(steps) == 2 and isinstance(steps[0][1], TableColumns):
            return steps[1][1], steps[0][1]
        raise ValueError(f"save_model saves a fastep estimator, or a Pipeline of a "
                         f"TableColumns step and one (what load_model gives for a model of "
                         f"`fastep fit`); got a Pipeline of "
                         f"{[type(s).__name__ for _, s in steps]}.")
    return model, None
