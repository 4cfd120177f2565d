"""State-space (Markov) forms of the kernels of one input, time, that have one.

A Matern kernel of smoothness nu = p + 1/2 is the covariance of the first coordinate of a
linear stochastic differential equation ``dx = F x dt + L dW`` with p + 1 states
(Hartikainen & Sarkka, "Kalman filtering and smoothing solutions to temporal Gaussian
process regression models", MLSP 2010): F is the companion matrix of
``(s + lambda)^(p+1)``, ``lambda = sqrt(2 nu) / lengthscale``, and the stationary state
covariance ``P_inf`` makes ``k(dt) = H expm(F dt) P_inf H^T``.  Since ``F + lambda I`` is
nilpotent, the transition over a step dt is exact and cheap::

    A(dt) = exp(-lambda dt) sum_{k <= p} (F + lambda I)^k dt^k / k!,
    Q(dt) = P_inf - A(dt) P_inf A(dt)^T.

A sum of such kernels is the block-diagonal model of its terms (H the concatenation of
theirs).  :func:`state_space` turns fastep's kernel objects into the arrays that the
compiled filter of :mod:`fastep.inference.markov_ep` reads; the kernels without an exact
form are a ``ValueError`` that names the ones to use.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, List, Tuple

import numpy as np

from .stationary import Matern12, Matern32, Matern52

#: The Matern kernels with an exact state-space form, by their order p (nu = p + 1/2).
MARKOV_ORDERS = {Matern12: 0, Matern32: 1, Matern52: 2}


@dataclass(frozen=True)
class StateSpace:
    """A sum of Matern components as the compiled filter reads it.

    Attributes
    ----------
    order : ndarray of int (c,)
        p of each component (its states: p + 1).
    lam : ndarray (c,)
        ``sqrt(2 p + 1) / lengthscale`` of each component.
    variance : ndarray (c,)
        Each component's variance.
    """

    order: np.ndarray
    lam: np.ndarray
    variance: np.ndarray

    @property
    def n_states(self) -> int:
        return int(np.sum(self.order + 1))


def _components(kernel: Any) -> List[Tuple[int, float, float]]:
    from ._base import Sum
    if isinstance(kernel, Sum):
        return _components(kernel.k1) + _components(kernel.k2)
    order = MARKOV_ORDERS.get(type(kernel))
    if order is None:
        raise ValueError(
            f"kernel {kernel!r} has no exact state-space form, which markov_ep needs; use "
            f"Matern12, Matern32 or Matern52 of one input (time), or a sum of them.")
    ls = np.atleast_1d(np.asarray(kernel.lengthscale, dtype=float))
    if ls.size != 1:
        raise ValueError(f"kernel {kernel!r} has {ls.size} lengthscales; markov_ep models "
                         f"one input, time: give one lengthscale.")
    return [(order, float(np.sqrt(2.0 * order + 1.0) / ls[0]), float(kernel.variance))]


def state_space(kernel: Any) -> StateSpace:
    """The state-space arrays of ``kernel`` (a Matern kernel or a sum of them).

    Examples
    --------
    >>> from fastep.kernels import Matern12, Matern32
    >>> ss = state_space(Matern12(2.0, 0.5) + Matern32(1.0, 3.0))
    >>> ss.order.tolist(), ss.n_states
    ([0, 1], 3)
    """
    comps = _components(kernel)
    return StateSpace(np.array([c[0] for c in comps], dtype=np.int64),
                      np.array([c[1] for c in comps]), np.array([c[2] for c in comps]))
