"""The algebra of kernels: ``k1 + k2`` (:class:`Sum`) and ``k1 * k2`` (:class:`Product`),
their gradients by the sum and product rules; a number in a sum or product is a
:class:`~fastep.kernels.ConstantKernel`, a scikit-learn kernel is wrapped
(:func:`~fastep.kernels.as_kernel`).  Registered as the protocol's ``+`` and ``*``."""
from __future__ import annotations

from typing import Any, Dict
import numbers

import numpy as np

from ._base import _ALGEBRA, Kernel
from .simple import ConstantKernel
from .sklearn_adapter import as_kernel


def _as_kernel_operand(other):
    if isinstance(other, Kernel):
        return other
    if isinstance(other, numbers.Real):
        return ConstantKernel(float(other))
    return as_kernel(other)


class _Composite(Kernel):
    def __init__(self, k1: Kernel, k2: Kernel) -> None:
        self.k1, self.k2 = k1, k2
        self._params = []

    def _leaf_params(self):
        return self.k1._leaf_params() + self.k2._leaf_params()

    def __eq__(self, other):
        return type(self) is type(other) and self.k1 == other.k1 and self.k2 == other.k2

    __hash__ = object.__hash__

    def __repr__(self):
        # a sum inside a product keeps its parentheses: (a + b) * c is not a + b * c
        def part(k):
            return f"({k!r})" if self._op == "*" and isinstance(k, Sum) else repr(k)
        return f"{part(self.k1)} {self._op} {part(self.k2)}"

    def to_dict(self) -> Dict[str, Any]:
        return {"type": type(self).__name__, "k1": self.k1.to_dict(), "k2": self.k2.to_dict()}

    def is_stationary(self) -> bool:
        return self.k1.is_stationary() and self.k2.is_stationary()


class Sum(_Composite):
    """k1 + k2.

    Usually built with ``+`` (a number is a :class:`ConstantKernel`).

    Parameters
    ----------
    k1, k2 : Kernel
        The two kernels added; their free hyperparameters are k1's, then k2's (in
        :attr:`theta`).

    Examples
    --------
    >>> import numpy as np
    >>> from fastep.kernels import RBF, WhiteKernel
    >>> k = RBF() + WhiteKernel(0.1)
    >>> float(k(np.zeros((1, 2)))[0, 0])
    1.1
    """
    _op = "+"

    def _gram(self, be, X, Y):
        return self.k1._gram(be, X, Y) + self.k2._gram(be, X, Y)

    def _diag(self, be, X):
        return self.k1._diag(be, X) + self.k2._diag(be, X)

    def _contract_all(self, be, X, Y, G):
        return np.concatenate([self.k1._contract_all(be, X, Y, G),
                               self.k2._contract_all(be, X, Y, G)])

    def _diag_contract_all(self, be, X, g):
        return np.concatenate([self.k1._diag_contract_all(be, X, g),
                               self.k2._diag_contract_all(be, X, g)])

    def _input_contract(self, be, X, Y, G):
        return self.k1._input_contract(be, X, Y, G) + self.k2._input_contract(be, X, Y, G)


class Product(_Composite):
    """k1 * k2; d(K1 o K2) = dK1 o K2 + K1 o dK2, contracted as (G o K2) with k1.

    Usually built with ``*`` (a number is a :class:`ConstantKernel`).

    Parameters
    ----------
    k1, k2 : Kernel
        The two kernels multiplied elementwise; their free hyperparameters are k1's,
        then k2's (in :attr:`theta`).

    Examples
    --------
    >>> import numpy as np
    >>> from fastep.kernels import Linear, RBF
    >>> k = RBF() * Linear(2.0)
    >>> float(k(np.ones((1, 1)))[0, 0])
    2.0
    """
    _op = "*"

    def _gram(self, be, X, Y):
        return self.k1._gram(be, X, Y) * self.k2._gram(be, X, Y)

    def _diag(self, be, X):
        return self.k1._diag(be, X) * self.k2._diag(be, X)

    def _contract_all(self, be, X, Y, G):
        return np.concatenate([self.k1._contract_all(be, X, Y, G * self.k2._gram(be, X, Y)),
                               self.k2._contract_all(be, X, Y, G * self.k1._gram(be, X, Y))])

    def _diag_contract_all(self, be, X, g):
        return np.concatenate([self.k1._diag_contract_all(be, X, g * self.k2._diag(be, X)),
                               self.k2._diag_contract_all(be, X, g * self.k1._diag(be, X))])

    def _input_contract(self, be, X, Y, G):
        # called with the cross form (Y given); the symmetric case arrives as (X, X, G + G^T)
        return (self.k1._input_contract(be, X, Y, G * self.k2._gram(be, X, Y))
                + self.k2._input_contract(be, X, Y, G * self.k1._gram(be, X, Y)))


_ALGEBRA["+"] = lambda k, other: Sum(k, _as_kernel_operand(other))
_ALGEBRA["*"] = lambda k, other: Product(k, _as_kernel_operand(other))
