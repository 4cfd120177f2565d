"""State-space (Markov) forms of the kernels of one input, time, that have one.

Each kernel here is the covariance of ``H x(t)`` for a linear stochastic differential
equation ``dx = F x dt + L dW`` with stationary state covariance ``P_inf``, so that
``k(dt) = H A(dt) P_inf H^T`` with the transition ``A(dt) = expm(F dt)``, and the process
noise of a step is ``Q(dt) = P_inf - A P_inf A^T``.  The factors, each with A(dt) in
closed form:

* **Matern** of smoothness nu = p + 1/2, p + 1 states (Hartikainen & Sarkka, "Kalman
  filtering and smoothing solutions to temporal Gaussian process regression models", MLSP
  2010): F is the companion matrix of ``(s + lambda)^(p+1)``, ``lambda = sqrt(2 nu) /
  lengthscale``; ``F + lambda I`` is nilpotent, so
  ``A(dt) = exp(-lambda dt) sum_{k <= p} (F + lambda I)^k dt^k / k!`` exactly.
* **Periodic** ``variance exp(-2 sin^2(pi dt / period) / l^2)`` (Solin & Sarkka, "Explicit
  link between periodic covariance functions and state space models", AISTATS 2014): with
  ``w = 2 pi / period`` and ``z = l^-2`` it equals ``variance sum_j q_j^2 cos(j w dt)``,
  ``q_0^2 = I_0(z) e^-z``, ``q_j^2 = 2 I_j(z) e^-z`` (the generating function of the
  modified Bessel functions; exact for the infinite sum).  Truncated at ``order`` J it is
  ``2 J + 1`` states: a constant and J oscillators, A(dt) rotations by ``j w dt``, Q = 0.
  The truncation error is largest at dt = 0, ``variance sum_{j > J} q_j^2``
  (:func:`periodic_truncation_error`), relative to the variance, at the default J = 8:
  4e-9 for l = 1, 3e-14 for l = 2, 9e-5 for l = 0.5 and 1e-2 for l = 0.3 (J = 16 there:
  3e-6); raise ``periodic_order`` for short lengthscales.
* **Constant** ``ConstantKernel(c)``: one state that never moves (an offset).

A **product** of kernels is the Kronecker product of their models (states, A, P_inf and H
multiply; Solin 2016, "Stochastic differential equation methods for spatio-temporal
Gaussian process regression", sec. 4.2), so ``Matern32 * Periodic`` is the
quasi-periodic kernel (a pattern that repeats and drifts); a **sum** is block diagonal,
its H the concatenation.  A product of sums is expanded into a sum of products.
:func:`state_space` turns fastep's kernel objects into the arrays that the compiled filter
of :mod:`fastep.inference.markov_ep` reads; kernels without an exact form (RBF, Linear,
RationalQuadratic, White) are a ``ValueError`` that names the ones to use.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, List, Tuple

import numpy as np
from scipy.special import ive

from .algebra import Product, Sum
from .simple import ConstantKernel
from .separable import Periodic
from .stationary import Matern12, Matern32, Matern52

#: The Matern kernels with an exact state-space form, by their order p (nu = p + 1/2).
MARKOV_ORDERS = {Matern12: 0, Matern32: 1, Matern52: 2}
#: Kinds of factor in :class:`StateSpace` (``kind``).
MATERN, PERIODIC, CONSTANT = 0, 1, 2
#: Harmonics J of a periodic kernel's truncated series unless ``periodic_order`` says.
PERIODIC_ORDER = 8

_MARKOV_NAMES = ("Matern12, Matern32, Matern52, Periodic or ConstantKernel of one input "
                 "(time), or sums and products of them")


@dataclass(frozen=True)
class StateSpace:
    """A sum of products of state-space factors, as the compiled filter reads it.

    Attributes
    ----------
    kind : ndarray of int (f,)
        Each factor's kind: 0 Matern, 1 periodic, 2 constant.
    order : ndarray of int (f,)
        p of a Matern factor (p + 1 states), J of a periodic one (2 J + 1 states), 0.
    rate : ndarray (f,)
        ``lambda = sqrt(2 p + 1) / lengthscale`` of a Matern factor, ``2 pi / period`` of
        a periodic one, 0 for a constant.
    factor_start : ndarray of int (terms + 1,)
        The factors of term k are ``factor_start[k]:factor_start[k + 1]``.
    state_start : ndarray of int (terms + 1,)
        The states of term k are ``state_start[k]:state_start[k + 1]`` (its block).
    pinf : ndarray (D, D)
        Stationary state covariance (block diagonal; the variances are in it).
    h : ndarray (D,)
        The observation row: f(t) = h x(t).
    """

    kind: np.ndarray
    order: np.ndarray
    rate: np.ndarray
    factor_start: np.ndarray
    state_start: np.ndarray
    pinf: np.ndarray
    h: np.ndarray

    @property
    def n_states(self) -> int:
        return int(self.h.shape[0])

    @property
    def arrays(self) -> Tuple[np.ndarray, ...]:
        """The arrays the compiled filter takes, in its order."""
        return (self.kind, self.order, self.rate, self.factor_start, self.state_start,
                self.pinf, self.h)


def periodic_coefficients(lengthscale: float, order: int) -> np.ndarray:
    """``q_j^2``, j = 0..order, of the periodic kernel's cosine series (variance 1):
    ``I_0(z) e^-z`` and ``2 I_j(z) e^-z``, z = lengthscale^-2.

    Parameters
    ----------
    lengthscale : float
        The periodic kernel's lengthscale l > 0 (no units: it divides the sine).
    order : int
        J >= 0, the last harmonic kept.

    Returns
    -------
    ndarray of shape (order + 1,)
        ``q_0^2, ..., q_J^2`` (they sum to 1 as J -> inf).
    """
    z = float(lengthscale) ** -2.0
    q = ive(np.arange(order + 1), z)
    q[1:] *= 2.0
    return q


def periodic_truncation_error(lengthscale: float, order: int) -> float:
    """The periodic kernel's error (relative to its variance) at lag 0 when its cosine
    series stops after ``order`` harmonics: ``1 - sum_{j <= order} q_j^2`` (the largest
    over lags, as every left-out term is largest there).

    Parameters
    ----------
    lengthscale : float
        The periodic kernel's lengthscale l > 0 (no units: it divides the sine).
    order : int
        J >= 0, the harmonics kept.

    Returns
    -------
    float
        The relative error, >= 0 (rounding below 0 is clipped).

    Examples
    --------
    >>> periodic_truncation_error(1.0, 8) < 1e-9, periodic_truncation_error(0.3, 8) > 1e-3
    (True, True)
    """
    tail = 1.0 - float(np.sum(periodic_coefficients(lengthscale, order)))
    return max(tail, 0.0)


def _scalar_lengthscale(kernel):
    ls = np.atleast_1d(np.asarray(kernel.lengthscale, dtype=float))
    if ls.size != 1:
        raise ValueError(f"kernel {kernel!r} has {ls.size} lengthscales; markov_ep models "
                         f"one input, time: give one lengthscale.")
    return float(ls[0])


def _factor(kernel: Any, periodic_order: int):
    """``(kind, order, rate, P_inf, h)`` of one leaf kernel."""
    order = MARKOV_ORDERS.get(type(kernel))
    if order is not None:
        lam = float(np.sqrt(2.0 * order + 1.0) / _scalar_lengthscale(kernel))
        s2, l2 = float(kernel.variance), lam * lam
        P = {0: [[1.0]], 1: [[1.0, 0.0], [0.0, l2]],
             2: [[1.0, 0.0, -l2 / 3.0], [0.0, l2 / 3.0, 0.0], [-l2 / 3.0, 0.0, l2 * l2]]}
        h = np.zeros(order + 1)
        h[0] = 1.0
        return MATERN, order, lam, s2 * np.array(P[order]), h
    if isinstance(kernel, Periodic):
        q = periodic_coefficients(_scalar_lengthscale(kernel), int(periodic_order))
        # harmonics below rounding (a long lengthscale's, which underflow to 0) would
        # make the state covariance singular: they go, changing the kernel by < 1e-16
        J = int(np.flatnonzero(q > 1e-16 * q.sum())[-1])
        q = q[:J + 1]
        diag = np.concatenate([[q[0]], np.repeat(q[1:], 2)])
        h = np.zeros(2 * J + 1)
        h[0::2] = 1.0                   # the constant, then the cosine state of each pair
        return PERIODIC, J, 2.0 * np.pi / kernel.period, \
            float(kernel.variance) * np.diag(diag), h
    if isinstance(kernel, ConstantKernel):
        return CONSTANT, 0, 0.0, np.array([[kernel._value]]), np.ones(1)
    raise ValueError(f"kernel {kernel!r} has no exact state-space form, which markov_ep "
                     f"needs; use {_MARKOV_NAMES}.")


def _terms(kernel: Any, periodic_order: int) -> List[list]:
    """The kernel as a sum of products: a list of terms, each a list of factors."""
    if isinstance(kernel, Sum):
        return _terms(kernel.k1, periodic_order) + _terms(kernel.k2, periodic_order)
    if isinstance(kernel, Product):
        return [a + b for a in _terms(kernel.k1, periodic_order)
                for b in _terms(kernel.k2, periodic_order)]
    return [[_factor(kernel, periodic_order)]]


def state_space(kernel: Any, periodic_order: int = PERIODIC_ORDER) -> StateSpace:
    """The state-space arrays of ``kernel``: Matern12/32/52, Periodic (its cosine series
    to ``periodic_order`` harmonics), ConstantKernel, and sums and products of them.

    Parameters
    ----------
    kernel : Kernel
        A kernel of one input, time, built from those (each Matern or Periodic with one
        lengthscale); any other kernel is a ``ValueError`` that names the ones to use.
    periodic_order : int, default 8
        J >= 1, the harmonics of every Periodic factor's cosine series (2 J + 1 states;
        fewer where the last ones fall below rounding); raise it for short lengthscales
        (:func:`periodic_truncation_error`).

    Returns
    -------
    StateSpace
        The arrays the compiled filter of :mod:`fastep.inference.markov_ep` reads.

    Examples
    --------
    >>> from fastep.kernels import Matern12, Matern32, Periodic
    >>> state_space(Matern12(2.0, 0.5) + Matern32(1.0, 3.0)).n_states
    3
    >>> state_space(Matern32(1.0, 50.0) * Periodic(period=7.0), periodic_order=4).n_states
    18
    """
    if isinstance(periodic_order, bool) or not isinstance(periodic_order, (int, np.integer)) \
            or periodic_order < 1:
        raise ValueError(f"periodic_order must be a positive integer (harmonics of a periodic "
                         f"kernel's series); got {periodic_order!r}.")
    terms = _terms(kernel, periodic_order)
    kind, order, rate, fstart, sstart, blocks, hs = [], [], [], [0], [0], [], []
    for term in terms:
        P, h = np.ones((1, 1)), np.ones(1)
        for k, o, r, Pf, hf in term:
            kind.append(k)
            order.append(o)
            rate.append(r)
            P, h = np.kron(P, Pf), np.kron(h, hf)
        fstart.append(len(kind))
        sstart.append(sstart[-1] + h.size)
        blocks.append(P)
        hs.append(h)
    D = sstart[-1]
    pinf = np.zeros((D, D))
    for b, P in enumerate(blocks):
        pinf[sstart[b]:sstart[b + 1], sstart[b]:sstart[b + 1]] = P
    return StateSpace(np.array(kind, dtype=np.int64), np.array(order, dtype=np.int64),
                      np.array(rate, dtype=float), np.array(fstart, dtype=np.int64),
                      np.array(sstart, dtype=np.int64), pinf, np.concatenate(hs))
