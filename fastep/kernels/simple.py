"""Kernels of one scalar parameter: constant, white noise, linear."""
from __future__ import annotations

from typing import Tuple, Union

from ._base import Hyperparameter, _OneParameter


class ConstantKernel(_OneParameter):
    """k(x, x') = constant.

    Parameters
    ----------
    constant : float, default 1.0
        The value of every entry, > 0.
    constant_bounds : (float, float) or "fixed", default (1e-5, 1e5)
        ML-II bounds of ``constant``: ``(low, high)`` in its own units, or ``"fixed"``
        (not optimised).

    Examples
    --------
    >>> import numpy as np
    >>> ConstantKernel(2.0)(np.zeros((2, 1))).tolist()
    [[2.0, 2.0], [2.0, 2.0]]
    """

    def __init__(self, constant: float = 1.0,
                 constant_bounds: Union[Tuple[float, float], str] = (1e-5, 1e5)) -> None:
        self._params = [Hyperparameter("constant", constant, constant_bounds, scalar=True)]

    def _gram(self, be, X, Y):
        return be.xp.full((X.shape[0], X.shape[0] if Y is None else Y.shape[0]), self._value)

    def _diag(self, be, X):
        return be.xp.full(X.shape[0], self._value)

    def _contract_all(self, be, X, Y, G):
        return [self._value * float(be.xp.sum(G))]

    def is_stationary(self) -> bool:
        return True


class WhiteKernel(_OneParameter):
    """k(x, x') = noise_level if x and x' are the same training point (Y is None), else 0.

    Parameters
    ----------
    noise_level : float, default 1.0
        The variance of the independent noise, > 0.
    noise_level_bounds : (float, float) or "fixed", default (1e-5, 1e5)
        ML-II bounds of ``noise_level``: ``(low, high)`` in its own units, or ``"fixed"``
        (not optimised).

    Examples
    --------
    >>> import numpy as np
    >>> WhiteKernel(0.5)(np.zeros((2, 1))).tolist()
    [[0.5, 0.0], [0.0, 0.5]]
    """

    def __init__(self, noise_level: float = 1.0,
                 noise_level_bounds: Union[Tuple[float, float], str] = (1e-5, 1e5)) -> None:
        self._params = [Hyperparameter("noise_level", noise_level, noise_level_bounds,
                                       scalar=True)]

    def _gram(self, be, X, Y):
        if Y is None:
            return be.xp.eye(X.shape[0]) * self._value
        return be.xp.zeros((X.shape[0], Y.shape[0]))

    def _diag(self, be, X):
        return be.xp.full(X.shape[0], self._value)

    def _contract_all(self, be, X, Y, G):
        return [self._value * float(be.xp.trace(G)) if Y is None else 0.0]

    def is_stationary(self) -> bool:
        return True


class Linear(_OneParameter):
    """k(x, x') = variance * x . x' (Bayesian linear regression on the inputs).

    Parameters
    ----------
    variance : float, default 1.0
        The prior variance of the linear weights, > 0.
    variance_bounds : (float, float) or "fixed", default (1e-5, 1e5)
        ML-II bounds of ``variance``: ``(low, high)`` in its own units, or ``"fixed"``
        (not optimised).

    Examples
    --------
    >>> import numpy as np
    >>> Linear(2.0)(np.array([[1.0, 2.0]])).tolist()
    [[10.0]]
    """

    def __init__(self, variance: float = 1.0,
                 variance_bounds: Union[Tuple[float, float], str] = (1e-5, 1e5)) -> None:
        self._params = [Hyperparameter("variance", variance, variance_bounds, scalar=True)]

    def _gram(self, be, X, Y):
        return be.xp.ascontiguousarray(self._value * (X @ (X if Y is None else Y).T))

    def _diag(self, be, X):
        return self._value * be.xp.sum(X * X, axis=1)

    def _contract_all(self, be, X, Y, G):
        return [float(be.xp.vdot(G, self._gram(be, X, Y)))]

    def _diag_contract_all(self, be, X, g):
        return [float(g @ self._diag(be, X))]

    def _input_contract(self, be, X, Y, G):
        return be.to_host(self._value * (G @ Y))
