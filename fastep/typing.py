"""Type aliases of fastep's annotations (PEP 484; ``fastep`` ships ``py.typed``), for a
user's own annotations and for reading signatures.

Arrays a user passes in are NumPy's ``numpy.typing.ArrayLike`` (re-exported here); an
estimator's outputs are :data:`Array`: a NumPy array, or a lazy Dask array where ``X`` was
one (dask is an optional extra, so a type checker sees a Dask array as ``Any``).

Examples
--------
>>> import numpy as np
>>> from fastep import EPGaussianProcessClassifier
>>> from fastep.typing import Array, ArrayLike
>>> def fit_and_predict(X: ArrayLike, y: ArrayLike) -> Array:
...     return EPGaussianProcessClassifier(optimizer=None).fit(X, y).predict_proba(X)
>>> X = np.linspace(-1, 1, 10)[:, None]
>>> fit_and_predict(X, (X[:, 0] > 0).astype(int)).shape
(10, 2)
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Dict, Tuple, Union

import numpy as np
from numpy.typing import ArrayLike as ArrayLike      # re-exported: what fastep reads

if TYPE_CHECKING:                                       # pragma: no cover
    import dask.array
    from sklearn.gaussian_process.kernels import Kernel as SklearnKernelBase

    from .kernels import Kernel

__all__ = ["Array", "ArrayOrStd", "KernelLike", "RandomStateLike", "OptimizerLike",
           "HyperpriorLike"]

#: What an estimator returns: a NumPy array, or a Dask array for Dask input.
Array = Union[np.ndarray, "dask.array.Array"]

#: ``predict(X, return_std=...)``: the mean, or ``(mean, std)`` with ``return_std=True``.
ArrayOrStd = Union[Array, Tuple[Array, Array]]

#: A fastep kernel, or a scikit-learn one (run through :class:`fastep.kernels.SklearnKernel`).
KernelLike = Union["Kernel", "SklearnKernelBase"]

#: scikit-learn's ``random_state`` (None, an int, a RandomState) or a NumPy Generator.
RandomStateLike = Union[None, int, np.random.RandomState, np.random.Generator]

#: ``"L-BFGS-B"``, None (keep the kernel as given), or scikit-learn's optimiser callable
#: ``optimizer(obj_func, initial_theta, bounds) -> (theta_opt, func_min)``.
OptimizerLike = Union[str, None, Callable[..., Tuple[Any, float]]]

#: ``"auto"``, None (plain ML-II) or ``{parameter name: prior}``.
HyperpriorLike = Union[str, None, Dict[str, Any]]

