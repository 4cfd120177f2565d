"""Censored Gaussian (Tobit) likelihood, Groot & Lucas (2012), and its predictive.

Observation model: ``y* = f + eps``, ``eps ~ N(0, sigma^2)``, recorded as
``y = lower`` if ``y* <= lower``, ``y = upper`` if ``y* >= upper``, else ``y = y*``::

    p(y | f) = Phi((lower - f)/sigma)     y <= lower        (left-censored)
             = N(y | f, sigma^2)           lower < y < upper (observed)
             = Phi((f - upper)/sigma)     y >= upper        (right-censored)
             = Phi((upper - f)/sigma) - Phi((lower - f)/sigma)   y = NaN (interval)

Limits are per observation (``site_extra`` holds ``(lower_i, upper_i)``), +-inf allowed.
"""
from __future__ import annotations

import math

import numpy as np
from scipy.special import log_ndtr, ndtr, ndtri

from .._jit import tilted_function
from .._numerics import LOG_SQRT_2PI, log_diff_exp, log_phi, mills, mills_shift
from ._base import Likelihood, quad_tilted
from ._scalar import TOBIT


@tilted_function
def tobit_tilted(y, extra, mu, var, alpha, params):
    """alpha = 1, with c = sqrt(v + sigma^2):
    left  z = (l - mu)/c: log Z = log Phi(z), d1 = -lambda(z)/c, d2 = -lambda(z)(z + lambda(z))/c^2
    right z = (mu - u)/c: log Z = log Phi(z), d1 = +lambda(z)/c, d2 as above
    exact: log Z = log N(y | mu, c^2), d1 = (y - mu)/c^2, d2 = -1/c^2
    interval [l, u]: Z = Phi(b) - Phi(a); d1 = -(phi(b) - phi(a))/(c Z);
                     d2 = -(b phi(b) - a phi(a))/(c^2 Z) - d1^2.
    Other alpha: numerical quadrature of alpha * log p(y | f)."""
    if alpha != 1.0:
        return quad_tilted(TOBIT, y, extra, mu, var, alpha, params)
    lower = extra[0]
    upper = extra[1]
    c2 = var + params[0]
    c = math.sqrt(c2)
    if y != y:
        a = (lower - mu) / c
        b = (upper - mu) / c
        if a > 0.0:                                   # both limits above: use the upper tail
            log_z = log_diff_exp(log_phi(-a), log_phi(-b))
        else:
            log_z = log_diff_exp(log_phi(b), log_phi(a))
        pa = math.exp(-0.5 * a * a - LOG_SQRT_2PI - log_z) if a > -math.inf else 0.0
        pb = math.exp(-0.5 * b * b - LOG_SQRT_2PI - log_z) if b < math.inf else 0.0
        d1 = -(pb - pa) / c
        tb = b * pb if b < math.inf else 0.0
        ta = a * pa if a > -math.inf else 0.0
        return log_z, d1, -(tb - ta) / c2 - d1 * d1
    if y <= lower:
        z = (lower - mu) / c
        r = mills(z)
        return log_phi(z), -r / c, -r * mills_shift(z) / c2
    if y >= upper:
        z = (mu - upper) / c
        r = mills(z)
        return log_phi(z), r / c, -r * mills_shift(z) / c2
    d = y - mu
    return -0.5 * d * d / c2 - LOG_SQRT_2PI - 0.5 * math.log(c2), d / c2, -1.0 / c2


def _limits(value, n, name):
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


def check_limits(lower, upper, n):
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
                         f"lower = {lower[i]!r} >= upper = {upper[i]!r}.")
    return lower, upper


def check_censored_data(y, lower, upper):
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
        raise ValueError(f"y[{i}] = {y[i]!r} lies outside its limits [{lower[i]}, {upper[i]}]; "
                         "a censored observation is recorded at the limit it crossed.")
    return y, lower, upper


class Tobit(Likelihood):
    """Censored Gaussian noise with per-observation lower/upper limits.

    Parameters
    ----------
    noise_variance : float
        sigma^2 of the uncensored noise.
    lower, upper : float or array (n,), optional
        Limits; None means -inf / +inf.  Arrays must match the targets passed to EP.

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

    def __init__(self, noise_variance=1.0, lower=None, upper=None,
                 noise_variance_bounds=(1e-6, 1e6)):
        super().__init__(noise_variance=noise_variance,
                         noise_variance_bounds=noise_variance_bounds)
        self.lower, self.upper = lower, upper

    def limits(self, n):
        """(n, 2) array of (lower_i, upper_i)."""
        return np.ascontiguousarray(np.column_stack([_limits(self.lower, n, "lower"),
                                                     _limits(self.upper, n, "upper")]))

    site_extra = limits

    def encode_targets(self, y):
        y = np.asarray(y, dtype=float).reshape(-1)
        ex = self.limits(y.size)
        y, _, _ = check_censored_data(y, ex[:, 0], ex[:, 1])
        return np.ascontiguousarray(y)

    def to_dict(self):
        """JSON-able description; per-observation limits (arrays) are left out (a model
        file stores them as arrays beside its data)."""
        d = super().to_dict()
        for key in ("lower", "upper"):
            value = getattr(self, key)
            if value is None or np.ndim(value) == 0:
                d[key] = None if value is None else float(value)
        return d

    def tilted_dparams(self, y, mu_cav, var_cav, extra=None, alpha=1.0):
        """d log Z_i / d log sigma^2 at the cavities (closed form; c^2 = v + sigma^2)."""
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
                a, b = (lo - mu) / c, (up - mu) / c
                logz = np.where(a > 0, np.log(ndtr(-a) - ndtr(-b)), np.log(ndtr(b) - ndtr(a)))
                ta = np.where(np.isfinite(a), a * np.exp(-0.5 * a * a - logz), 0.0)
                tb = np.where(np.isfinite(b), b * np.exp(-0.5 * b * b - logz), 0.0)
                out = np.where(inter, -(tb - ta) / np.sqrt(2 * np.pi) / (2 * c2), out)
        return (out * self.noise_variance).reshape(-1, 1)[:, : self.n_dims]


def censored_predictive(mean, var, noise_variance, lower=-np.inf, upper=np.inf):
    """Moments of a censored output y = clip(f + eps, lower, upper), f ~ N(mean, var).

    With s = sqrt(var + sigma^2), a = (l - m)/s, b = (u - m)/s, P = Phi(b) - Phi(a):

        P(y = l) = Phi(a),  P(y = u) = 1 - Phi(b) = Phi(-b)
        E[y]   = l Phi(a) + u Phi(-b) + m P + s (phi(a) - phi(b))
        E[y^2] = l^2 Phi(a) + u^2 Phi(-b) + (m^2 + s^2) P + 2 m s (phi(a) - phi(b))
                 + s^2 (a phi(a) - b phi(b))

    (derived from the truncated-normal moments; infinite limits contribute 0, not NaN).

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
        # second moment about the mean m for stability: E[(y - m)^2]
        dl = np.where(np.isfinite(lo), (lo - m) ** 2 * pa, 0.0)
        du = np.where(np.isfinite(up), (up - m) ** 2 * pb, 0.0)
    e2c = dl + du + s2 * inside + s2 * (aphia - bphib)
    var_y = np.maximum(e2c - (e1 - m) ** 2, 0.0)
    return {"p_lower": pa, "p_upper": pb, "mean": e1, "var": var_y}


def censored_quantile(q, mean, var, noise_variance, lower=-np.inf, upper=np.inf):
    """q-quantile of y = clip(f + eps, lower, upper): the clipped Gaussian quantile.

    Examples
    --------
    >>> float(censored_quantile(0.5, [0.3], [1.0], 0.0, lower=0.0, upper=1.0)[0])
    0.3
    >>> float(censored_quantile(0.01, [0.3], [1.0], 0.0, lower=0.0)[0])
    0.0
    """
    s = np.sqrt(np.asarray(var, dtype=float) + noise_variance)
    return np.clip(np.asarray(mean, dtype=float) + s * ndtri(q), lower, upper)
