"""Kernels whose Gram matrix and gradient contractions are matrix products of per-input
features: the rational quadratic and the periodic kernel.

Both are written with the backend's array module ``be.xp`` only (NumPy on the host, CuPy
on a GPU), so they run on every backend without compiled loops of their own: every
pairwise sum ``sum_jk W_jk f(x_j) g(y_k)`` that their gradients need is ``f(X)^T (W
g(Y))``, a GEMM.  ``W = G o (dK / d k-shape)`` folds the caller's weights in first, so no
``n x m x d`` array is formed.

Rational quadratic (ARD lengthscales l_d, ``alpha``)::

    k = variance * (1 + r^2 / (2 alpha))^-alpha,   r^2 = sum_d ((x_d - y_d) / l_d)^2

with ``r^2 = |x/l|^2 + |y/l|^2 - 2 (x/l).(y/l)`` (clipped at 0; exactly 0 on the
diagonal of ``K(X, X)``).  Periodic (the exp-sine-squared of MacKay 1998, per input
dimension; ARD lengthscales, one period p)::

    k = variance * exp(-2 sum_d sin^2(pi (x_d - y_d) / p) / l_d^2)

with ``sin(a - b) = sin a cos b - cos a sin b`` expanding each square into three products.
In one dimension both equal scikit-learn's ``RationalQuadratic`` and ``ExpSineSquared``
(times the variance).
"""
from __future__ import annotations

import math
from typing import Union

import numpy as np
from numpy.typing import ArrayLike

from ._base import Hyperparameter, _VarianceLengthscale
from .distances import reused_distances
from .gram import HostGram

Bounds = Union[tuple, str]


class _Separable(_VarianceLengthscale):
    """Shared plumbing: variance first, then ARD (or one) lengthscales, then the kernel's
    own shape parameter."""

    def _fold_lengthscales(self, per_dim):
        """The per-dimension lengthscale gradient, summed to one entry for one lengthscale."""
        per_dim = np.asarray(per_dim, dtype=float)
        return per_dim if self._params[1].value.size > 1 else np.array([per_dim.sum()])

    def _diag(self, be, X):
        return be.xp.full(X.shape[0], self.variance)

    def _diag_contract_all(self, be, X, g):
        return np.concatenate([[self.variance * float(be.xp.sum(g))],
                               np.zeros(self._params[1].value.size + 1)])

    def is_stationary(self) -> bool:
        return True


def _symmetric_nonnegative(xp, q, symmetric):
    """A matrix of pairwise sums of squares formed by matrix products: clipped at 0 (it
    cancels to -1e-16 for near-equal inputs), and for K(X, X) exactly symmetric with a zero
    diagonal (the products round differently on either side of it)."""
    q = xp.maximum(q, 0.0)
    if symmetric:
        q = 0.5 * (q + q.T)
        xp.fill_diagonal(q, 0.0)
    return q


def _pair_sum(be, W, FX, GY):
    """``sum_jk W_jk FX_jd GY_kd`` for every column d (a host vector)."""
    return np.asarray(be.to_host(be.xp.sum(FX * (W @ GY), axis=0)), dtype=float)


class RationalQuadratic(_Separable):
    """Rational quadratic kernel, ``variance * (1 + r^2 / (2 alpha))^-alpha``: a scale
    mixture of RBF kernels whose lengthscales follow a gamma distribution of shape
    ``alpha`` (Rasmussen & Williams 2006, eq. 4.19); ``alpha`` -> inf is the RBF.

    Parameters
    ----------
    {variance}
    {lengthscale}
    alpha : float, default 1.0
        The shape, > 0 (small: many scales at once).
    {bounds}
    alpha_bounds : (low, high) or "fixed", default (1e-3, 1e4)
        ML-II bounds of ``alpha``, likewise.

    Examples
    --------
    >>> import numpy as np
    >>> k = RationalQuadratic(variance=2.0, lengthscale=1.0, alpha=0.5)
    >>> round(float(k(np.array([[0.0]]), np.array([[1.0]]))[0, 0]), 6)    # 2 / sqrt(2)
    1.414214
    """

    def __init__(self, variance: float = 1.0, lengthscale: Union[float, ArrayLike] = 1.0,
                 alpha: float = 1.0, variance_bounds: Bounds = (1e-5, 1e5),
                 lengthscale_bounds: Bounds = (1e-5, 1e5),
                 alpha_bounds: Bounds = (1e-3, 1e4)) -> None:
        self._params = [Hyperparameter("variance", variance, variance_bounds, scalar=True),
                        Hyperparameter("lengthscale", lengthscale, lengthscale_bounds),
                        Hyperparameter("alpha", alpha, alpha_bounds, scalar=True)]

    @property
    def alpha(self):
        return float(self._params[2].value[0])

    def _scaled(self, be, X, Y):
        inv = be.asarray(1.0 / self._lengthscales(X.shape[1]))
        xs = X * inv
        return xs, (xs if Y is None else Y * inv)

    def _r2(self, be, X, Y):
        """Scaled squared distances: from X's, where ML-II reuses them
        (:mod:`.distances`; one lengthscale, the host), else by one GEMM."""
        xp = be.xp
        ls = self._params[1].value
        if (Y is None or Y is X) and ls.size == 1 and isinstance(be, HostGram):
            D = reused_distances(X)
            if D is not None:
                return D / float(ls[0]) ** 2
        xs, ys = self._scaled(be, X, Y)
        r2 = (xp.sum(xs * xs, axis=1)[:, None] + xp.sum(ys * ys, axis=1)[None, :]
              - 2.0 * (xs @ ys.T))
        return _symmetric_nonnegative(xp, r2, Y is None)

    def _gram(self, be, X, Y):
        r2 = self._r2(be, X, Y)
        return be.xp.ascontiguousarray(self.variance * (1.0 + r2 / (2.0 * self.alpha))
                                       ** -self.alpha)

    def _contract_all(self, be, X, Y, G):
        """d/d log variance: K; d/d log l_d: variance u^(-alpha-1) t_d^2 (t = (x - y) / l,
        u = 1 + r^2 / (2 alpha)); d/d log alpha: K (alpha (u - 1) / u - alpha log u)."""
        xp, a = be.xp, self.alpha
        r2 = self._r2(be, X, Y)
        u = 1.0 + r2 / (2.0 * a)
        K = self.variance * u ** -a
        W = G * (K / u)                                       # G o variance u^(-alpha-1)
        if self._params[1].value.size == 1:                   # sum_d t_d^2 = r^2
            d_ls = np.array([float(xp.vdot(W, r2))])
        else:
            xs, ys = self._scaled(be, X, Y)
            rows, cols = xp.sum(W, axis=1), xp.sum(W, axis=0)
            d_ls = (np.asarray(be.to_host(rows @ (xs * xs) + cols @ (ys * ys)), dtype=float)
                    - 2.0 * _pair_sum(be, W, xs, ys))
        d_alpha = float(xp.sum(G * K * (a * (u - 1.0) / u - a * xp.log(u))))
        return np.concatenate([[float(xp.vdot(G, K))], d_ls, [d_alpha]])

    def _input_contract(self, be, X, Y, G):
        """dk/dx_c = -variance u^(-alpha-1) (x_c - y_c) / l_c^2."""
        xp = be.xp
        u = 1.0 + self._r2(be, X, Y) / (2.0 * self.alpha)
        W = G * (self.variance * u ** (-self.alpha - 1.0))
        inv2 = be.asarray(self._lengthscales(X.shape[1]) ** -2.0)
        out = -(xp.sum(W, axis=1)[:, None] * X - W @ Y) * inv2
        return np.asarray(be.to_host(out), dtype=float)


class Periodic(_Separable):
    """Periodic kernel, ``variance * exp(-2 sum_d sin^2(pi (x_d - y_d) / period) / l_d^2)``
    (MacKay 1998; scikit-learn's ``ExpSineSquared`` in one dimension): functions that
    repeat with the same ``period`` along every input, ``lengthscale`` setting how smooth
    one period is.  Multiply it by an RBF for a pattern that repeats and drifts.

    Parameters
    ----------
    {variance}
    lengthscale : float or array-like of shape (n_features,), default 1.0
        l > 0, relative to the sine (no units: it divides ``sin(pi (x_d - y_d) / p)``):
        one for every feature, or one per feature (ARD).
    period : float, default 1.0
        p > 0, in the units of X (the same along every feature).
    {bounds}
    period_bounds : (low, high) or "fixed", default (1e-5, 1e5)
        ML-II bounds of ``period``, likewise.

    Examples
    --------
    >>> import numpy as np
    >>> k = Periodic(period=2.0)
    >>> X = np.array([[0.0], [2.0], [1.0]])
    >>> K = k(X)
    >>> round(float(K[0, 1]), 12), round(float(K[0, 2]), 6)     # a period apart; half
    (1.0, 0.135335)
    """

    def __init__(self, variance: float = 1.0, lengthscale: Union[float, ArrayLike] = 1.0,
                 period: float = 1.0, variance_bounds: Bounds = (1e-5, 1e5),
                 lengthscale_bounds: Bounds = (1e-5, 1e5),
                 period_bounds: Bounds = (1e-5, 1e5)) -> None:
        self._params = [Hyperparameter("variance", variance, variance_bounds, scalar=True),
                        Hyperparameter("lengthscale", lengthscale, lengthscale_bounds),
                        Hyperparameter("period", period, period_bounds, scalar=True)]

    @property
    def period(self):
        return float(self._params[2].value[0])

    def _features(self, be, X, Y):
        """sin, cos of pi x / p for X and Y (Y None: X's), and 1 / l^2."""
        xp = be.xp
        w = math.pi / self.period
        sx, cx = xp.sin(w * X), xp.cos(w * X)
        sy, cy = (sx, cx) if Y is None else (xp.sin(w * Y), xp.cos(w * Y))
        return sx, cx, sy, cy, be.asarray(self._lengthscales(X.shape[1]) ** -2.0)

    def _gram_of(self, be, features, symmetric):
        """K from :meth:`_features`: variance exp(-2 q), q_jk = sum_d sin^2(pi (x_jd -
        y_kd) / p) / l_d^2 (>= 0; 0 on K(X, X)'s diagonal)."""
        xp = be.xp
        sx, cx, sy, cy, inv2 = features
        q = ((sx * sx * inv2) @ (cy * cy).T + (cx * cx * inv2) @ (sy * sy).T
             - 2.0 * (sx * cx * inv2) @ (sy * cy).T)
        return self.variance * xp.exp(-2.0 * _symmetric_nonnegative(xp, q, symmetric))

    def _gram(self, be, X, Y):
        return be.xp.ascontiguousarray(self._gram_of(be, self._features(be, X, Y), Y is None))

    def _contract_all(self, be, X, Y, G):
        """d/d log variance: K; d/d log l_d: 4 K sin^2(a_d - b_d) / l_d^2; d/d log p:
        2 K sum_d (a_d - b_d) sin(2 (a_d - b_d)) / l_d^2, with a = pi x / p, b = pi y / p."""
        xp = be.xp
        features = self._features(be, X, Y)
        K = self._gram_of(be, features, Y is None)
        W = G * K
        sx, cx, sy, cy, inv2 = features
        Yv = X if Y is None else Y
        sin2 = (_pair_sum(be, W, sx * sx, cy * cy) + _pair_sum(be, W, cx * cx, sy * sy)
                - 2.0 * _pair_sum(be, W, sx * cx, sy * cy))       # sum W sin^2(a - b), per d
        inv2_host = np.asarray(be.to_host(inv2), dtype=float)
        w = math.pi / self.period
        a, b = w * X, w * Yv
        s2x, c2x = 2.0 * sx * cx, cx * cx - sx * sx                 # sin 2a, cos 2a
        s2y, c2y = 2.0 * sy * cy, cy * cy - sy * sy
        # (a - b) sin(2a - 2b) = a s2a c2b - a c2a s2b - b s2a c2b + b c2a s2b
        period_terms = (_pair_sum(be, W, a * s2x, c2y) - _pair_sum(be, W, a * c2x, s2y)
                        - _pair_sum(be, W, s2x, b * c2y) + _pair_sum(be, W, c2x, b * s2y))
        return np.concatenate([[float(xp.vdot(G, K))],
                               self._fold_lengthscales(4.0 * sin2 * inv2_host),
                               [2.0 * float(period_terms @ inv2_host)]])

    def _input_contract(self, be, X, Y, G):
        """dk/dx_c = -2 K (pi / p) sin(2 (a_c - b_c)) / l_c^2."""
        features = self._features(be, X, Y)
        W = G * self._gram_of(be, features, Y is None)
        sx, cx, sy, cy, inv2 = features
        s2x, c2x = 2.0 * sx * cx, cx * cx - sx * sx
        s2y, c2y = 2.0 * sy * cy, cy * cy - sy * sy
        out = -2.0 * (math.pi / self.period) * inv2 * (s2x * (W @ c2y) - c2x * (W @ s2y))
        return np.asarray(be.to_host(out), dtype=float)
