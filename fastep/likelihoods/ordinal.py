"""Ordinal probit likelihood: K ordered levels from one latent f (Chu & Ghahramani 2005).

With cut points ``b_0 < b_1 < ... < b_{K-2}`` (``b_{-1} = -inf``, ``b_{K-1} = +inf``) and
unit probit noise (its scale is the kernel's, so it is not a parameter)::

    p(y = k | f) = Phi(b_k - f) - Phi(b_{k-1} - f)

Closed-form tilted moments at alpha = 1: with c = sqrt(1 + v), the tilted normaliser is
``Phi((b_k - mu)/c) - Phi((b_{k-1} - mu)/c)``, an interval probability whose derivatives
in mu come from :func:`fastep.likelihoods.tobit.interval_moments` (tail-safe); the two
end levels are a probit.  Other alpha: the panel quadrature.  Log-concave.

The cut points are learnt in an unconstrained parameterisation,
``theta = [b_0, log(b_1 - b_0), ..., log(b_{K-2} - b_{K-3})]``, which keeps them ordered.
"""
from __future__ import annotations

from typing import Any, Dict, Optional

import math

import numpy as np
from numpy.typing import ArrayLike
from scipy.special import ndtr

from .._checks import float_array, integer_values
from .._jit import tilted_function
from .._numerics import LOG_SQRT_2PI, log_phi, mills, mills_shift
from .._theta import ThetaEntry
from ._base import Likelihood
from ._quadrature import quad_dparam_batch, quad_tilted
from ._scalar import ORDINAL, ordinal_limits
from .tobit import interval_moments

#: ML-II bounds of the first cut point and of the log gaps between cut points.
FIRST_CUT_BOUNDS = (-30.0, 30.0)
LOG_GAP_BOUNDS = (math.log(1e-4), math.log(1e4))


@tilted_function
def ordinal_tilted(y, extra, mu, var, alpha, params):
    """alpha = 1, c = sqrt(1 + v): level 0: log Phi(z), z = (b_0 - mu)/c, d1 = -lambda(z)/c,
    d2 = -lambda(z)(z + lambda(z))/c^2; top level: the same with z = (mu - b_{K-2})/c and
    d1 = +lambda(z)/c; between: interval moments of [(b_{k-1} - mu)/c, (b_k - mu)/c].
    Other alpha: panel quadrature."""
    if alpha != 1.0:
        log_z, d1, d2 = quad_tilted(ORDINAL, y, extra, mu, var, alpha, params)
        return log_z, d1, min(d2, 0.0)            # log-concave: d2 <= 0 (rounding removed)
    lower, upper = ordinal_limits(y, params)
    c2 = 1.0 + var
    c = math.sqrt(c2)
    if lower == -math.inf:
        z = (upper - mu) / c
        r = mills(z)
        return log_phi(z), -r / c, -r * mills_shift(z) / c2
    if upper == math.inf:
        z = (mu - lower) / c
        r = mills(z)
        return log_phi(z), r / c, -r * mills_shift(z) / c2
    log_z, d1, d2 = interval_moments((lower - mu) / c, (upper - mu) / c)
    return log_z, d1 / c, d2 / c2


def check_levels(y, n_levels, name="y"):
    """``y`` as a float array of integer levels 0 .. n_levels - 1, or a ``ValueError``."""
    return integer_values(y, name, 0, n_levels - 1,
                          f"integer levels 0 .. {n_levels - 1} of the {n_levels}-level ordinal "
                          f"likelihood", "Map the ordered categories to 0 .. K-1 "
                          "(OrdinalGPClassifier does).", "Ordinal labels must be finite.")


def check_cut_points(cut_points):
    cuts = float_array(np.ravel(cut_points), "cut_points", 1,
                       fix="K ordered levels need K - 1 finite cut points.")
    if cuts.size < 1 or np.any(np.diff(cuts) <= 0):
        raise ValueError(f"cut_points must be at least one strictly increasing number (K "
                         f"levels need K - 1 cut points); got {cuts.tolist()[:8]}.")
    return cuts


class OrdinalProbit(Likelihood):
    """Ordered levels 0 .. K-1 from one latent GP and K - 1 learnable cut points.

    Parameters
    ----------
    cut_points : array (K - 1,)
        Strictly increasing cut points b_0 < ... < b_{K-2}.
    fixed : bool, default=False
        Keep the cut points fixed during ML-II.

    Examples
    --------
    >>> lik = OrdinalProbit([-1.0, 1.0])            # three levels
    >>> p = lik.predict_proba([0.0], [0.0])
    >>> p.shape, round(float(p.sum()), 12)
    ((1, 3), 1.0)
    """

    scalar_tilted = staticmethod(ordinal_tilted)

    def __init__(self, cut_points: ArrayLike, fixed: bool = False) -> None:
        super().__init__()
        self.cut_points = check_cut_points(cut_points)
        self.fixed = bool(fixed)

    @property
    def n_levels(self):
        return self.cut_points.size + 1

    # --- parameters: theta = [b_0, log gaps] -------------------------------------------
    @property
    def params(self):
        return self.cut_points.copy()

    def _free(self):
        if self.fixed:
            return []
        return ["cut_points[0]"] + [f"log gap[{j}]" for j in range(1, self.cut_points.size)]

    @property
    def n_dims(self):
        return len(self._free())

    def theta_entries(self) -> list[ThetaEntry]:
        """ML-II's names of :attr:`theta`'s entries: the first cut point, held as it is
        (of either sign), then the log gaps, held as the logs they are; their scale is
        the kernel variance's, so that is what to widen (or fix the cut points).

        Examples
        --------
        >>> [e.name for e in OrdinalProbit([0.0, 1.0]).theta_entries()]
        ['likelihood cut_points[0]', 'likelihood log gap[1]']
        """
        widen = "the kernel variance, which sets the cut points' scale"
        fix = "OrdinalProbit(cut_points=..., fixed=True)"
        return [ThetaEntry(f"likelihood {name}", widen, fix,
                           scale="signed" if j == 0 else "plain")
                for j, name in enumerate(self._free())]

    @property
    def theta(self):
        if self.fixed:
            return np.zeros(0)
        b = self.cut_points
        return np.concatenate([b[:1], np.log(np.diff(b))])

    @theta.setter
    def theta(self, theta):
        theta = self._checked_theta(theta)
        if theta.size:
            self.cut_points = theta[0] + np.concatenate([[0.0], np.cumsum(np.exp(theta[1:]))])

    @property
    def bounds(self):
        if self.fixed:
            return np.zeros((0, 2))
        return np.array([FIRST_CUT_BOUNDS] + [LOG_GAP_BOUNDS] * (self.cut_points.size - 1))

    def __repr__(self):
        return f"OrdinalProbit(cut_points={np.round(self.cut_points, 4).tolist()})"

    def check_params(self, params: ArrayLike) -> np.ndarray:
        """Raw cut points (the values :attr:`params` holds), checked and of this
        likelihood's number of levels.

        Parameters
        ----------
        params : array_like of shape (K - 1,)
            Strictly increasing cut points.
        """
        cuts = check_cut_points(params)
        if cuts.size != self.cut_points.size:
            raise ValueError(f"params of this {self.n_levels}-level OrdinalProbit must be "
                             f"{self.cut_points.size} cut points; got {cuts.size}.")
        return cuts

    def to_dict(self) -> Dict[str, Any]:
        return {"type": "OrdinalProbit", "cut_points": self.cut_points.tolist(),
                "fixed": self.fixed}

    # --- data -------------------------------------------------------------------------
    def check_targets(self, y: ArrayLike) -> np.ndarray:
        """``y`` checked to hold integer levels 0 .. K-1, as a float array.

        Parameters
        ----------
        y : array_like of shape (n,)
            Levels.
        """
        # the compiled code indexes the cut points by the label: checked wherever y enters
        return check_levels(y, self.n_levels)

    def tilted_dparams(self, y: ArrayLike, mu_cav: ArrayLike, var_cav: ArrayLike,
                       extra: Optional[ArrayLike] = None, alpha: float = 1.0) -> np.ndarray:
        """d log Z_i / d theta (theta = [b_0, log gaps]), shape (n, n_dims): closed form
        at alpha = 1 (d log Z / d b_k = phi(B)/(c Z), d / d b_{k-1} = -phi(A)/(c Z)),
        differentiation under the integral otherwise.

        Parameters
        ----------
        y : float or array_like of shape (n,)
            Levels 0 .. K-1.
        mu_cav : array_like of shape (n,)
            Cavity means.
        var_cav : float or array_like of shape (n,)
            Cavity variances.
        extra : array_like of shape (n, 0) or None, default None
            Not read (the ordinal likelihood has no per-site data).
        alpha : float, default 1.0
            The power of Power EP, in (0, 1].
        """
        y, mu, var = self._site_arrays(y, mu_cav, var_cav)
        n = mu.shape[0]
        cuts = self.cut_points
        n_cuts = cuts.size
        g_cut = np.zeros((n, n_cuts))
        if alpha == 1.0:
            c = np.sqrt(1.0 + var)
            k = y.astype(np.int64)
            lo = np.where(k > 0, cuts[np.maximum(k - 1, 0)], -np.inf)
            up = np.where(k < n_cuts, cuts[np.minimum(k, n_cuts - 1)], np.inf)
            log_z = self.tilted(y, mu, var)[0]
            with np.errstate(invalid="ignore", over="ignore"):
                zb, za = (up - mu) / c, (lo - mu) / c
                pb = np.where(np.isfinite(zb), np.exp(-0.5 * zb * zb - LOG_SQRT_2PI - log_z)
                              / c, 0.0)
                pa = np.where(np.isfinite(za), np.exp(-0.5 * za * za - LOG_SQRT_2PI - log_z)
                              / c, 0.0)
            rows = np.arange(n)
            has_up, has_lo = k < n_cuts, k > 0
            g_cut[rows[has_up], k[has_up]] += pb[has_up]
            g_cut[rows[has_lo], k[has_lo] - 1] -= pa[has_lo]
        else:
            extra = np.zeros((n, 0))
            col = np.empty(n)
            for j in range(n_cuts):
                quad_dparam_batch(ORDINAL, y, extra, mu, var, float(alpha), cuts, j, col)
                g_cut[:, j] = col
        if self.fixed:
            return np.zeros((n, 0))
        # chain rule: b_j = theta_0 + sum_{1 <= i <= j} exp(theta_i)
        tail = np.cumsum(g_cut[:, ::-1], axis=1)[:, ::-1]       # sum_{j >= i} g_j
        gaps = np.diff(cuts)
        return np.column_stack([tail[:, 0], tail[:, 1:] * gaps[None, :]])

    # --- prediction -------------------------------------------------------------------
    def predict_proba(self, mean: ArrayLike, var: ArrayLike) -> np.ndarray:
        """P(y = k) for k = 0 .. K-1 given f ~ N(mean, var), shape (n, K):
        Phi((b_k - mean)/c) - Phi((b_{k-1} - mean)/c), c = sqrt(1 + var).

        Parameters
        ----------
        mean, var : array_like of shape (n,)
            Mean and variance of the latent f at each point.
        """
        mean = np.asarray(mean, float).reshape(-1, 1)
        c = np.sqrt(1.0 + np.asarray(var, float).reshape(-1, 1))
        edges = np.concatenate([[-np.inf], self.cut_points, [np.inf]])
        a, b = (edges[:-1] - mean) / c, (edges[1:] - mean) / c
        # the upper tail is written as Phi(-a) - Phi(-b) where a > 0 (no cancellation)
        p = np.where(a > 0, ndtr(-a) - ndtr(-b), ndtr(b) - ndtr(a))
        p = np.maximum(p, 0.0)
        return p / p.sum(axis=1, keepdims=True)

    def log_predictive_density(self, y: ArrayLike, mean: ArrayLike, var: ArrayLike,
                               extra: Optional[ArrayLike] = None) -> np.ndarray:
        """log p(y_i) = log P(y = y_i) given f ~ N(mean_i, var_i), per point.

        Parameters
        ----------
        y : array_like of shape (n,)
            Observed levels 0 .. K-1.
        mean, var : array_like of shape (n,)
            Mean and variance of the latent f at each point.
        extra : array_like of shape (n, 0) or None, default None
            Not read (the ordinal likelihood has no per-site data).
        """
        return self.tilted(np.ravel(y), mean, var)[0]


