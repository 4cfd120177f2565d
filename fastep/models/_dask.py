"""What an estimator does with dask arrays: the checks of a dask X and y at ``fit`` and at
prediction (shapes and dtypes; the rows' values are checked on the workers, chunk by
chunk), the sample of rows that places the inducing inputs, and predictions mapped over
the chunks (lazily, on the workers)."""
from __future__ import annotations

from typing import Any, Optional, Tuple, Union

import numpy as np

from ..typing import Array, ArrayLike
from .._dask import is_dask_array
from ._validation import class_labels, validate_X

#: Rows of a dask X sampled to place the inducing inputs (k-means++).
DASK_SAMPLE = 20000


def dask_sample(X, m, rng):
    """The rows of a dask X that k-means++ places ``m`` inducing inputs on, as a NumPy array:
    a random sample of max(DASK_SAMPLE, m) rows (all of them for a smaller X)."""
    if m > X.shape[0]:
        raise ValueError(f"more inducing points ({m}) than data points "
                         f"({X.shape[0]}); use n_inducing <= {X.shape[0]}.")
    if X.shape[0] > max(DASK_SAMPLE, m):     # (else all rows, as for NumPy X)
        X = X[np.sort(rng.choice(X.shape[0], max(DASK_SAMPLE, m), replace=False))]
    return np.asarray(X.compute())


def da_map_rows(fn, *columns, width=None):
    """``fn`` applied chunk by chunk (lazily, on the workers) to dask vectors of one row
    chunking and any other arguments as they are: a dask vector, or with ``width`` a dask
    array of shape (n, width)."""
    import dask.array as da
    if width is None:
        return da.map_blocks(fn, *columns, dtype=float)
    return da.map_blocks(fn, *columns, dtype=float, new_axis=1,
                         chunks=(columns[0].chunks[0], (width,)))


def rows_like(v: Any, X: Any) -> Any:
    """A vector of one entry per row of the dask array ``X`` as a dask array chunked like
    X's rows (a dask ``v`` as it is)."""
    if is_dask_array(v):
        return v
    import dask.array as da
    return da.from_array(v, chunks=(X.chunks[0],))


class DaskInputs:
    """Mixin of the EP estimators: their checks of dask inputs (see the module docstring);
    the estimator has the parameters ``n_inducing``, ``inducing_points`` and ``device``."""

    n_inducing: Union[int, str, None]
    inducing_points: Optional[ArrayLike]
    device: str

    def _dask_fit_data(self, X: Any, y: Any) -> Tuple[Array, Array]:
        """Checks of a dask X and y at ``fit`` (shapes and dtypes; the values of the rows are
        checked on the workers, chunk by chunk): sparse EP on the CPU runs there."""
        cls = type(self).__name__
        if self.n_inducing is None and self.inducing_points is None:
            raise ValueError(f"{cls} fits dask arrays with sparse EP on the cluster; set "
                             f"n_inducing (e.g. n_inducing=256) or inducing_points. Dense EP "
                             f"needs all {X.shape[0]} rows in one process.")
        if self.device != "cpu":
            raise ValueError(f"{cls} with dask arrays runs on the cluster's CPUs; set "
                             f"device='cpu' (got {self.device!r}).")
        if not hasattr(X, "ndim") or X.ndim != 2 or X.dtype.kind not in "biuf":
            raise ValueError(f"X must be a 2-d dask array of numbers (a DataFrame: "
                             f"df.to_dask_array(lengths=True)); got {type(X).__name__} of "
                             f"shape {getattr(X, 'shape', '?')}.")
        if any(np.isnan(c) for c in X.chunks[0]):
            raise ValueError("X has chunks of unknown length (from a DataFrame); use "
                             "df.to_dask_array(lengths=True).")
        if y is not None and not hasattr(y, "ndim"):
            y = np.asarray(y)
        if y is not None and (y.ndim != 1 or y.shape[0] != X.shape[0]):
            raise ValueError(f"y must have one entry per row of X, shape ({X.shape[0]},); "
                             f"got shape {y.shape}.")
        self.n_features_in_ = X.shape[1]
        X = X.astype(np.float64)
        return X.rechunk({1: -1}), y

    def _dask_classes(self, y):
        """The sorted distinct labels of a dask (or NumPy) y of a dask fit, checked as
        scikit-learn checks classification targets; only the labels reach the client."""
        return class_labels(y)

    def _predict_inputs(self, X: ArrayLike) -> Array:
        """X at prediction: scikit-learn's checks, or for a dask X those of its shape (the
        latent predictive of a sparse model maps over its chunks)."""
        if is_dask_array(X):
            return self._dask_predict_data(X)
        return validate_X(self, X, reset=False, dtype=np.float64)

    def _dask_predict_data(self, X):
        """A dask X at prediction, checked against the fitted number of features."""
        if getattr(self, "inducing_points_", None) is None:
            raise ValueError(f"{type(self).__name__} predicts dask arrays with a sparse model "
                             "(fitted with n_inducing or inducing_points); compute X or fit "
                             "with inducing points.")
        if X.ndim != 2 or X.shape[1] != self.n_features_in_:
            raise ValueError(f"X has shape {X.shape}, but {type(self).__name__} was fitted "
                             f"with {self.n_features_in_} features.")
        return X.astype(np.float64).rechunk({1: -1})
