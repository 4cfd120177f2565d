"""Stationary kernels: RBF (squared exponential) and the Matern family, ARD capable."""
from __future__ import annotations

import numpy as np

from . import _gram
from ._base import Hyperparameter, Kernel, _as_2d


class _Stationary(Kernel):
    _kind = -1

    def __init__(self, variance=1.0, lengthscale=1.0, variance_bounds=(1e-5, 1e5),
                 lengthscale_bounds=(1e-5, 1e5)):
        self._params = [Hyperparameter("variance", variance, variance_bounds),
                        Hyperparameter("lengthscale", lengthscale, lengthscale_bounds)]

    @property
    def variance(self):
        return float(self._params[0].value[0])

    @property
    def lengthscale(self):
        ls = self._params[1].value
        return float(ls[0]) if ls.size == 1 else ls.copy()

    def _inv_ls(self, d):
        ls = self._params[1].value
        if ls.size == 1:
            return np.full(d, 1.0 / ls[0])
        if ls.size != d:
            raise ValueError(f"{type(self).__name__} has {ls.size} ARD lengthscales but X has "
                             f"{d} features; pass one lengthscale per feature or a scalar.")
        return 1.0 / ls

    def __call__(self, X, Y=None):
        X = _as_2d(X)
        Y = None if Y is None else _as_2d(Y, "Y")
        return _gram.gram(X, Y, self._inv_ls(X.shape[1]), self.variance, self._kind)

    def diag(self, X):
        return np.full(_as_2d(X).shape[0], self.variance)

    def _contract_all(self, X, Y, G):
        out = _gram.contract(X, X if Y is None else Y, self._inv_ls(X.shape[1]), self.variance,
                             self._kind, G)
        if self._params[1].value.size == 1:
            return np.array([out[0], out[1:].sum()])
        return out

    def _diag_contract_all(self, X, g):
        return np.concatenate([[self.variance * g.sum()], np.zeros(self._params[1].value.size)])

    def _input_contract(self, X, Y, G):
        return _gram.input_contract(X, Y, self._inv_ls(X.shape[1]), self.variance, self._kind, G)

    def is_stationary(self):
        return True


class RBF(_Stationary):
    """Squared exponential kernel, ``variance * exp(-r^2 / 2)``.

    ``lengthscale`` may be a scalar or one value per feature (ARD).

    Examples
    --------
    >>> import numpy as np
    >>> K = RBF(variance=2.0, lengthscale=0.5)(np.zeros((3, 1)))
    >>> K.tolist()[0]
    [2.0, 2.0, 2.0]
    """
    _kind = _gram.RBF


class Matern12(_Stationary):
    """Matern 1/2 (exponential) kernel, ``variance * exp(-r)``."""
    _kind = _gram.MATERN12


class Matern32(_Stationary):
    """Matern 3/2 kernel, ``variance * (1 + sqrt(3) r) exp(-sqrt(3) r)``."""
    _kind = _gram.MATERN32


class Matern52(_Stationary):
    """Matern 5/2 kernel, ``variance * (1 + sqrt(5) r + 5 r^2 / 3) exp(-sqrt(5) r)``."""
    _kind = _gram.MATERN52
