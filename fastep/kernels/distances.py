"""Squared distances of the training inputs, computed once per ML-II run.

An isotropic stationary kernel (one lengthscale: ``RBF(v, l)``, the default of every
estimator) has ``K(X, X) = v g(D / l^2)`` with ``D_ij = |x_i - x_j|^2``, and its gradient
contractions need only D too.  ML-II builds that Gram matrix and contracts its gradient
at every evidence evaluation on the same X: n^2 d work each, about a fifth of an
evaluation at n = 1,257, d = 64 (digits).  Within :func:`reuse_distances`, D is computed
at the first use (the same n^2 d) and every later Gram matrix or contraction on that X
costs n^2.  Host backends only, and only where one more n x n matrix fits in memory.
"""
from __future__ import annotations

import contextvars
from contextlib import contextmanager

import numpy as np

from .._memory import DENSE_MLII_MATRICES, host_memory_available
from .gram import HostGram, squared_distances

_ACTIVE = contextvars.ContextVar("fastep_reused_distances", default=None)


class _Reused:
    def __init__(self, X):
        self.X, self.D = X, None


@contextmanager
def reuse_distances(X, backend):
    """Within the block, isotropic stationary kernels evaluated on this very array X
    (``kernel(X)``, ``kernel.gradient_contract(X, G)``) on the host take its squared
    distances from one computation.  A no-op where ``backend`` is not the host's or one
    more n x n float64 matrix than ML-II's would not fit in memory."""
    n = X.shape[0]
    available = host_memory_available()
    if (not isinstance(backend, HostGram) or not isinstance(X, np.ndarray)
            or (available is not None and (DENSE_MLII_MATRICES + 1) * 8 * n * n > available)):
        yield
        return
    token = _ACTIVE.set(_Reused(X))
    try:
        yield
    finally:
        _ACTIVE.reset(token)


def reused_distances(X):
    """The squared distances of X when a :func:`reuse_distances` block holds X (computed
    now if not yet), else None."""
    reused = _ACTIVE.get()
    if reused is None or X is not reused.X:
        return None
    if reused.D is None:
        reused.D = np.empty((X.shape[0], X.shape[0]))
        squared_distances(X, reused.D)
    return reused.D
