"""Censored Gaussian (Tobit) likelihood, Groot & Lucas (2012), and its predictive.

Observation model: ``y* = f + eps``, ``eps ~ N(0, sigma^2)``, recorded as
``y = lower`` if ``y* <= lower``, ``y = upper`` if ``y* >= upper``, else ``y = y*``::

    p(y | f) = Phi((lower - f)/sigma)     y <= lower        (left-censored)
             = N(y | f, sigma^2)           lower < y < upper (observed)
             = Phi((f - upper)/sigma)     y >= upper        (right-censored)
             = Phi((upper - f)/sigma) - Phi((lower - f)/sigma)   y = NaN (interval)

Limits are per observation (``site_extra`` holds ``(lower_i, upper_i)``), +-inf allowed.

Over 450 lines: one job, the Tobit likelihood: its closed-form tilted moments for each
censoring case and the censored predictive (mean, quantiles) they share.
"""
from __future__ import annotations

from typing import Dict, Optional, Tuple, Union

import copy

import math

import numpy as np
from numpy.typing import ArrayLike
from scipy.special import log_ndtr, ndtr, ndtri

from .._checks import float_array
from .._jit import jit, tilted_function
from .._numerics import LOG_SQRT_2PI, log_diff_exp, log_phi, mills, mills_shift
from ._base import Likelihood
from ._quadrature import quad_tilted
from ._scalar import TOBIT


_GL_T, _GL_W = np.polynomial.legendre.leggauss(16)


@jit("UniTuple(f8, 3)(f8, f8)")
def interval_moments(a, b):
    """log Z, d log Z / dm and d2 log Z / dm2 of ``Z(m) = Phi(b - m) - Phi(a - m)`` at m = 0
    (a < b), i.e. minus the mean and the variance minus 1 of N(0, 1) truncated to [a, b].

    An interval on one side of 0 is reflected to the upper side (a > 0) and written with
    upper tails, Z = Phi(-a) (1 - q), q = Phi(-b) / Phi(-a), and the inverse Mills ratios
    m_a = lambda(-a), s_a = m_a - a (likewise for b):

        d1 = (m_a - q m_b) / (1 - q),
        d2 = -(m_a s_a + q^2 m_b s_b - q (m_a s_b + m_b s_a + (b - a)(m_a - m_b))) / (1 - q)^2,

    whose leading terms carry no cancellation far in a tail (the direct form
    ``(a phi(a) - b phi(b)) / Z - d1^2`` loses everything there).  A narrow interval,
    ``w (|a| + w) <= 1`` with w = b - a, where Phi(b) - Phi(a) itself cancels, is
    integrated directly: Z = phi(a) int_0^w exp(-a t - t^2/2) dt and the first two moments
    of t by 16-point Gauss-Legendre (the integrand varies by at most e^1.5 there).
    d2 is kept in [-1, 0]."""
    w = b - a
    if w * (abs(a) + w) <= 1.0:
        m0 = m1 = m2 = 0.0
        for k in range(_GL_T.shape[0]):
            t = 0.5 * w * (_GL_T[k] + 1.0)
            g = _GL_W[k] * math.exp(-a * t - 0.5 * t * t)
            m0 += g
            m1 += g * t
            m2 += g * t * t
        mean_t = m1 / m0
        var_t = max(m2 / m0 - mean_t * mean_t, 0.0)
        log_z = -0.5 * a * a - LOG_SQRT_2PI + math.log(0.5 * w * m0)
        return log_z, a + mean_t, min(var_t - 1.0, 0.0)
    sign = 1.0
    if b < 0.0:                                   # reflect: m -> -m, [a, b] -> [-b, -a]
        a, b, sign = -b, -a, -1.0
    if a > 0.0:
        log_pa = log_phi(-a)
        if log_pa == -math.inf:                   # a beyond ~1e154: Z underflows in log
            return -math.inf, sign * a, -1.0
        log_q = log_phi(-b) - log_pa
        q = math.exp(log_q)
        one_q = -math.expm1(log_q)
        log_z = log_pa + math.log(one_q)
        ma, sa = mills(-a), mills_shift(-a)
        if q > 0.0:
            mb, sb = mills(-b), mills_shift(-b)
            d1 = (ma - q * mb) / one_q
            d2 = -(ma * sa + q * q * mb * sb
                   - q * (ma * sb + mb * sa + (b - a) * (ma - mb))) / (one_q * one_q)
        else:
            d1, d2 = ma, -ma * sa
        return log_z, sign * d1, min(max(d2, -1.0), 0.0)
    # a <= 0 <= b: Z >= Phi(b) - Phi(0) + Phi(0) - Phi(a) has no cancellation
    log_z = log_diff_exp(log_phi(b), log_phi(a))
    pa = math.exp(-0.5 * a * a - LOG_SQRT_2PI - log_z) if a > -math.inf else 0.0
    pb = math.exp(-0.5 * b * b - LOG_SQRT_2PI - log_z) if b < math.inf else 0.0
    d1 = sign * (pa - pb)
    tb = b * pb if b < math.inf else 0.0
    ta = a * pa if a > -math.inf else 0.0
    return log_z, d1, min(max(ta - tb - (pa - pb) * (pa - pb), -1.0), 0.0)


@jit("f8[:](f8[:], f8[:])")
def interval_second_moment(a, b):
    """E[z^2] - 1 of N(0, 1) truncated to [a_i, b_i], elementwise (from
    :func:`interval_moments`: d2 + d1^2, no cancellation far in a tail)."""
    out = np.empty(a.shape[0])
    for i in range(a.shape[0]):
        _, d1, d2 = interval_moments(a[i], b[i])
        out[i] = d2 + d1 * d1
    return out


#: Censored sites at a Power-EP power below 1 with a cavity variance below this times the
#: noise variance take the local Gaussian integral (:func:`tobit_tilted`).
POINT_CAVITY = 1e-16


@tilted_function
def tobit_tilted(y, extra, mu, var, alpha, params):
    """Tilted moments of the Tobit likelihood.  At alpha = 1, with c = sqrt(v + sigma^2)::

        left  z = (l - mu)/c: log Z = log Phi(z), d1 = -lambda(z)/c,
                              d2 = -lambda(z)(z + lambda(z))/c^2
        right z = (mu - u)/c: log Z = log Phi(z), d1 = +lambda(z)/c, d2 as above
        exact: log Z = log N(y | mu, c^2), d1 = (y - mu)/c^2, d2 = -1/c^2
        interval [l, u]: Z = Phi(b) - Phi(a); d1 = -(phi(b) - phi(a))/(c Z);
                         d2 = -(b phi(b) - a phi(a))/(c^2 Z) - d1^2.

    Exact observations at any alpha: N(y | f, s^2)^alpha = (2 pi s^2)^((1 - alpha)/2)
    alpha^(-1/2) N(y | f, s^2 / alpha), so log Z gains (1 - alpha)/2 log(2 pi s^2)
    - log(alpha)/2 and c^2 = v + s^2 / alpha.  Other alpha, censored: numerical
    quadrature of alpha * log p(y | f)."""
    lower = extra[0]
    upper = extra[1]
    if lower < y < upper:                          # observed (NaN compares false)
        c2 = var + params[0] / alpha
        d = y - mu
        log_z = (-0.5 * d * d / c2 - LOG_SQRT_2PI - 0.5 * math.log(c2)
                 + (1.0 - alpha) * (LOG_SQRT_2PI + 0.5 * math.log(params[0]))
                 - 0.5 * math.log(alpha))
        return log_z, d / c2, -1.0 / c2
    if alpha != 1.0 and var > POINT_CAVITY * params[0]:
        log_z, d1, d2 = quad_tilted(TOBIT, y, extra, mu, var, alpha, params)
        return log_z, d1, min(d2, 0.0)            # log-concave: d2 <= 0 (rounding removed)
    if alpha != 1.0:
        # a cavity far narrower than the noise: g = alpha log p(y | f) is quadratic over
        # it to working precision, and int exp(g) N(f | mu, v) df is the local Gaussian
        # integral with g's derivatives at mu in closed form
        sigma = math.sqrt(params[0])
        if y != y:
            g, g1, g2 = interval_moments((lower - mu) / sigma, (upper - mu) / sigma)
        elif y <= lower:
            z = (lower - mu) / sigma
            r = mills(z)
            g, g1, g2 = log_phi(z), -r, -r * mills_shift(z)
        else:
            z = (mu - upper) / sigma
            r = mills(z)
            g, g1, g2 = log_phi(z), r, -r * mills_shift(z)
        g, g1, g2 = alpha * g, alpha * g1 / sigma, alpha * g2 / params[0]
        curv = 1.0 - var * g2
        return (g + var * g1 * g1 / (2.0 * curv) - 0.5 * math.log(curv), g1 / curv,
                min(g2 / curv, 0.0))
    c2 = var + params[0]
    c = math.sqrt(c2)
    if y != y:
        log_z, d1, d2 = interval_moments((lower - mu) / c, (upper - mu) / c)
        return log_z, d1 / c, d2 / c2
    if y <= lower:
        z = (lower - mu) / c
        r = mills(z)
        return log_phi(z), -r / c, -r * mills_shift(z) / c2
    z = (mu - upper) / c                          # y >= upper
    r = mills(z)
    return log_phi(z), r / c, -r * mills_shift(z) / c2


def _limits(value: Optional[ArrayLike], n: int, name: str) -> np.ndarray:
    if value is None:
        return np.full(n, -np.inf if name == "lower" else np.inf)
    arr = np.asarray(value, dtype=float)
    arr = np.full(n, float(arr)) if arr.ndim == 0 else arr.reshape(-1)
    if arr.shape != (n,):
        raise ValueError(f"{name} must be a scalar or an array of length {n}; got shape "
                         f"{np.shape(value)}.")
    if np.any(np.isnan(arr)):
        raise ValueError(f"{name} contains NaN; use -inf/+inf for 'no limit'.")
    return arr


def check_limits(lower: Optional[ArrayLike], upper: Optional[ArrayLike],
                 n: int) -> Tuple[np.ndarray, np.ndarray]:
    """Limits for n observations as float arrays (None: no limit), lower below upper.

    Examples
    --------
    >>> check_limits(0.0, None, 2)
    (array([0., 0.]), array([inf, inf]))
    """
    lower, upper = _limits(lower, n, "lower"), _limits(upper, n, "upper")
    if np.any(lower >= upper):
        i = int(np.flatnonzero(lower >= upper)[0])
        raise ValueError(f"lower must be below upper for every observation; at index {i} "
                         f"lower = {float(lower[i])!r} >= upper = {float(upper[i])!r}.")
    return lower, upper


def check_censored_data(y: ArrayLike, lower: Optional[ArrayLike], upper: Optional[ArrayLike]
                        ) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Validate targets and limits; returns float arrays (y, lower, upper).

    NaN in y means "interval-censored between lower and upper" and needs finite limits.
    """
    y = np.asarray(y, dtype=float).reshape(-1)
    lower, upper = check_limits(lower, upper, y.size)
    if np.any(np.isinf(y)):
        raise ValueError("y contains infinity; censored values are recorded at their limit.")
    nan = np.isnan(y)
    if np.any(nan & ~(np.isfinite(lower) & np.isfinite(upper))):
        i = int(np.flatnonzero(nan & ~(np.isfinite(lower) & np.isfinite(upper)))[0])
        raise ValueError(f"y[{i}] is NaN, which means interval-censored, but its limits are "
                         f"not both finite (lower = {lower[i]}, upper = {upper[i]}).")
    out = ~nan & ((y < lower) | (y > upper))
    if np.any(out):
        i = int(np.flatnonzero(out)[0])
        raise ValueError(f"y[{i}] = {float(y[i]):g} lies outside its limits "
                         f"[{float(lower[i]):g}, {float(upper[i]):g}]; a censored observation "
                         "is recorded at the limit it crossed.")
    return y, lower, upper


class Tobit(Likelihood):
    """Censored Gaussian noise with per-observation lower/upper limits.

    Parameters
    ----------
    noise_variance : float, default 1.0
        sigma^2 of the uncensored noise.
    lower, upper : float or array (n,), optional
        Limits; None means -inf / +inf.  Arrays must match the targets passed to EP.
    noise_variance_bounds : (low, high) or "fixed", default (1e-6, 1e6)
        Bounds of sigma^2 in ML-II (which searches log sigma^2 between log low and
        log high); "fixed" keeps it at ``noise_variance``.

    Examples
    --------
    >>> import numpy as np
    >>> lik = Tobit(0.1, lower=0.0)
    >>> logz, d1, d2 = lik.tilted([0.0, 1.5], [0.2, 1.0], [1.0, 1.0],
    ...                           extra=lik.limits(2))
    >>> bool(d1[0] < 0)        # a left-censored point pulls the mean down
    True
    """

    param_names = ("noise_variance",)
    scalar_tilted = staticmethod(tobit_tilted)
    n_extra = 2                  # (lower_i, upper_i)
    extra_allows_inf = True      # +-inf: no limit
    nan_targets = True           # NaN: interval-censored between the limits
    data_names = ("lower", "upper")

    def __init__(self, noise_variance: float = 1.0, lower: Optional[ArrayLike] = None,
                 upper: Optional[ArrayLike] = None,
                 noise_variance_bounds: Union[Tuple[float, float], str] = (1e-6, 1e6)) -> None:
        super().__init__(noise_variance=noise_variance,
                         noise_variance_bounds=noise_variance_bounds)
        self.lower, self.upper = lower, upper

    def limits(self, n: int) -> np.ndarray:
        """(n, 2) array of (lower_i, upper_i).

        Parameters
        ----------
        n : int
            Number of sites; array limits must have n entries (scalars are broadcast,
            None is -inf / +inf).
        """
        return np.ascontiguousarray(np.column_stack([_limits(self.lower, n, "lower"),
                                                     _limits(self.upper, n, "upper")]))

    site_extra = limits

    def rows(self, start: int, stop: int) -> Tobit:
        """A copy with the limits of the sites ``start:stop`` (scalars stay scalars).

        Parameters
        ----------
        start, stop : int
            First site and one past the last, as in the slice ``start:stop``.
        """
        part = copy.copy(self)
        part.lower, part.upper = (v if v is None or np.ndim(v) == 0 else
                                  np.asarray(v)[start:stop] for v in (self.lower, self.upper))
        return part

    def check_extra(self, extra: Optional[ArrayLike], n: int) -> np.ndarray:
        """Per-site limits ``(lower_i, upper_i)``, checked: lower below upper, no NaN.

        Parameters
        ----------
        extra : array_like of shape (n, 2) or None
            Per-site ``(lower_i, upper_i)`` (+-inf: no limit); None: this likelihood's
            own (:meth:`limits`).
        n : int
            Number of sites.
        """
        extra = super().check_extra(extra, n)
        check_limits(extra[:, 0], extra[:, 1], n)
        return extra

    def encode_targets(self, y: ArrayLike) -> np.ndarray:
        """Targets checked against this likelihood's limits: each inside its limits
        (a censored one at the limit it crossed), NaN (interval-censored) only between
        finite limits.

        Parameters
        ----------
        y : array_like of shape (n,) or (n, 1)
            Targets; NaN marks an interval-censored observation.
        """
        y = super().encode_targets(y)
        ex = self.limits(y.size)
        y, _, _ = check_censored_data(y, ex[:, 0], ex[:, 1])
        return np.ascontiguousarray(y)

    def predict_y(self, mean: ArrayLike, var: ArrayLike) -> Tuple[np.ndarray, np.ndarray]:
        """Mean and variance of the censored y given f ~ N(mean, var) at this likelihood's
        limits (:func:`censored_predictive`).

        Parameters
        ----------
        mean, var : array_like of shape (n,)
            Mean and variance of the latent f at each point.
        """
        n = np.size(mean)
        ex = self.limits(n)
        pred = censored_predictive(mean, var, self.noise_variance, ex[:, 0], ex[:, 1])
        return pred["mean"], pred["var"]

    def tilted_dparams(self, y: ArrayLike, mu_cav: ArrayLike, var_cav: ArrayLike,
                       extra: Optional[ArrayLike] = None, alpha: float = 1.0) -> np.ndarray:
        """d log Z_i / d log sigma^2 at the cavities (closed form at alpha = 1, c^2 = v +
        sigma^2; central differences otherwise), shape (n, n_dims).

        Parameters
        ----------
        y : array_like of shape (n,)
            Targets (NaN: interval-censored).
        mu_cav : array_like of shape (n,)
            Cavity means.
        var_cav : float or array_like of shape (n,)
            Cavity variances.
        extra : array_like of shape (n, 2) or None, default None
            Per-site ``(lower_i, upper_i)``; None: this likelihood's own (:meth:`limits`).
        alpha : float, default 1.0
            The power of Power EP, in (0, 1].
        """
        if alpha != 1.0:
            return super().tilted_dparams(y, mu_cav, var_cav, extra, alpha)
        y = np.asarray(y, dtype=float)
        mu = np.asarray(mu_cav, dtype=float)
        c2 = np.asarray(var_cav, dtype=float) + self.noise_variance
        c = np.sqrt(c2)
        ex = self.limits(y.size) if extra is None else np.asarray(extra, dtype=float)
        lo, up = ex[:, 0], ex[:, 1]
        out = np.empty(y.size)
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            left = y <= lo
            right = y >= up
            inter = np.isnan(y)
            exact = ~(left | right | inter)
            z = np.where(left, (lo - mu) / c, (mu - up) / c)
            lam = np.exp(-0.5 * z * z - 0.5 * np.log(2 * np.pi) - log_ndtr(z))
            # d log Phi(z) / d c2 = lambda(z) * (-z / (2 c2)) (both censored branches)
            out = np.where(left | right, -lam * z / (2 * c2), 0.0)
            r = y - mu
            out = np.where(exact, 0.5 * (r * r / (c2 * c2) - 1.0 / c2), out)
        if np.any(inter):
            # d log Z / d c^2 = (E[z^2] - 1) / (2 c^2) over N(0, 1) truncated to [a, b],
            # with E[z^2] - 1 = d2 + d1^2 from the tail-safe interval moments
            c2i = c2[inter]
            out[inter] = interval_second_moment(
                (lo[inter] - mu[inter]) / c[inter], (up[inter] - mu[inter]) / c[inter]) / (2 * c2i)
        return (out * self.noise_variance).reshape(-1, 1)[:, : self.n_dims]


def _no_limit_is_infinite(lower, upper):
    """Censoring limits with None (no limit) as -inf / inf."""
    return (-np.inf if lower is None else lower), (np.inf if upper is None else upper)


def censored_predictive(mean: ArrayLike, var: ArrayLike, noise_variance: float,
                        lower: Optional[ArrayLike] = -np.inf,
                        upper: Optional[ArrayLike] = np.inf) -> Dict[str, np.ndarray]:
    """Moments of a censored output y = clip(f + eps, lower, upper), f ~ N(mean, var).

    With s = sqrt(var + sigma^2), a = (l - m)/s, b = (u - m)/s, P = Phi(b) - Phi(a)::

        P(y = l) = Phi(a),  P(y = u) = 1 - Phi(b) = Phi(-b)
        E[y]   = l Phi(a) + u Phi(-b) + m P + s (phi(a) - phi(b))
        E[y^2] = l^2 Phi(a) + u^2 Phi(-b) + (m^2 + s^2) P + 2 m s (phi(a) - phi(b))
                 + s^2 (a phi(a) - b phi(b))

    (derived from the truncated-normal moments; infinite limits contribute 0, not NaN).

    Parameters
    ----------
    mean, var : array_like of shape (n,)
        Mean and variance of the latent f at each point.
    noise_variance : float
        sigma^2 of the uncensored noise.
    lower : float or array_like of shape (n,) or None, default -inf
        Lower limit of each point (-inf or None: none).
    upper : float or array_like of shape (n,) or None, default inf
        Upper limit of each point (inf or None: none).

    Returns
    -------
    dict with ``p_lower``, ``p_upper``, ``mean``, ``var`` (arrays).

    Examples
    --------
    >>> pred = censored_predictive([0.0], [0.5], 0.5, lower=0.0)
    >>> float(pred["p_lower"][0]), bool(pred["mean"][0] > 0)
    (0.5, True)
    """
    m = np.asarray(mean, dtype=float)
    s2 = np.asarray(var, dtype=float) + noise_variance
    s = np.sqrt(s2)
    lower, upper = _no_limit_is_infinite(lower, upper)
    lo = np.broadcast_to(np.asarray(lower, dtype=float), m.shape)
    up = np.broadcast_to(np.asarray(upper, dtype=float), m.shape)
    with np.errstate(invalid="ignore", over="ignore"):
        a = (lo - m) / s
        b = (up - m) / s
        pa, pb = ndtr(a), ndtr(-b)
        inside = ndtr(b) - ndtr(a)
        inside = np.where(a > 0, ndtr(-a) - ndtr(-b), inside)
        phia = np.exp(-0.5 * a * a) / math.sqrt(2 * math.pi)
        phib = np.exp(-0.5 * b * b) / math.sqrt(2 * math.pi)
        lo_term = np.where(np.isfinite(lo), lo * pa, 0.0)
        up_term = np.where(np.isfinite(up), up * pb, 0.0)
        aphia = np.where(np.isfinite(a), a * phia, 0.0)
        bphib = np.where(np.isfinite(b), b * phib, 0.0)
        e1 = lo_term + up_term + m * inside + s * (phia - phib)
        # the variance about e1 as a mixture (point masses at the limits, the truncated
        # normal between), each part only where its weight is not zero: the moments about
        # m, E[(y - m)^2] - (e1 - m)^2, cancel (and overflow) when a limit carries all mass
        # far from m
        some = inside > 0.0
        shift = np.where(some, (phia - phib) / np.where(some, inside, 1.0), 0.0)
        var_in = s2 * np.clip(1.0 + np.where(some, (aphia - bphib) / np.where(some, inside, 1.0),
                                             0.0) - shift * shift, 0.0, 1.0)
        var_y = (np.where(pa > 0.0, pa * (lo - e1) ** 2, 0.0)
                 + np.where(pb > 0.0, pb * (up - e1) ** 2, 0.0)
                 + np.where(some, inside * (var_in + (m + s * shift - e1) ** 2), 0.0))
    return {"p_lower": pa, "p_upper": pb, "mean": e1, "var": var_y}


def censored_quantile(q: ArrayLike, mean: ArrayLike, var: ArrayLike, noise_variance: float,
                      lower: Optional[ArrayLike] = -np.inf,
                      upper: Optional[ArrayLike] = np.inf) -> np.ndarray:
    """q-quantile of y = clip(f + eps, lower, upper): the clipped Gaussian quantile.

    Parameters
    ----------
    q : float or array_like
        Probability levels, strictly between 0 and 1 (broadcast against ``mean``).
    mean, var : array_like of shape (n,)
        Mean and variance of the latent f at each point.
    noise_variance : float
        sigma^2 of the uncensored noise.
    lower : float or array_like of shape (n,) or None, default -inf
        Lower limit of each point (-inf or None: none).
    upper : float or array_like of shape (n,) or None, default inf
        Upper limit of each point (inf or None: none).

    Examples
    --------
    >>> float(censored_quantile(0.5, [0.3], [1.0], 0.0, lower=0.0, upper=1.0)[0])
    0.3
    >>> float(censored_quantile(0.01, [0.3], [1.0], 0.0, lower=0.0)[0])
    0.0
    """
    q = float_array(np.ravel(q), "q", 1).reshape(np.shape(q))
    if not np.all((q > 0.0) & (q < 1.0)):
        raise ValueError(f"q must be a probability level strictly between 0 and 1 (the "
                         f"0.1-quantile is q=0.1); got {q.ravel()[:4].tolist()}.")
    s = np.sqrt(np.asarray(var, dtype=float) + noise_variance)
    lower, upper = _no_limit_is_infinite(lower, upper)
    return np.clip(np.asarray(mean, dtype=float) + s * ndtri(q), lower, upper)
