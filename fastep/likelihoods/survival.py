"""Survival likelihoods: accelerated-failure-time models with right censoring.

``log T = f(x) + noise``: the latent f is the log time scale, and the noise's law sets the
model (Weibull, log-logistic, log-normal; GPstuff's ``lik_weibull``, ``lik_loglogistic``,
``lik_loggaussian``).  Each observation is a time ``t > 0`` and an event indicator: 1 if
the event was seen at t, 0 if the subject was still event-free at t (right-censored), so
that its likelihood is the survival function ``S(t | f)``.  All three are log-concave in f.
The tilted moments come from the quadrature of
:func:`fastep.likelihoods._quadrature.quad_tilted` (mode-centred trapezoid, panels where it declines) and the shape gradient from the same
quadrature, by differentiation under the integral.

The predictions average over the latent posterior ``f ~ N(mean, var)`` exactly as EP's
tilted moments do: ``S(t | x) = E[S(t | f)]`` is the normaliser of a right-censored
observation at t, and the density ``p(t | x)`` that of an event at t; the hazard is their
ratio, and the median the t where ``S(t | x) = 1/2``.
"""
from __future__ import annotations

import math
from typing import Optional, Tuple, Union

import numpy as np
from numpy.typing import ArrayLike
from scipy.special import gamma as gamma_fn
from scipy.special import log_ndtr

from .._checks import float_array
from .._numerics import LOG_SQRT_2PI, log_phi, mills, mills_shift
from .._jit import tilted_function
from ._base import Likelihood
from ._quadrature import QuadratureParams, quad_tilted
from ._scalar import LOG_LOGISTIC, LOG_NORMAL, WEIBULL


@tilted_function
def weibull_tilted(y, extra, mu, var, alpha, params):
    """Panel quadrature of alpha * log Weibull-AFT(t | f, r) (event or censored)."""
    log_z, d1, d2 = quad_tilted(WEIBULL, y, extra, mu, var, alpha, params)
    return log_z, d1, min(d2, 0.0)                # log-concave: d2 <= 0 (rounding removed)


@tilted_function
def log_logistic_tilted(y, extra, mu, var, alpha, params):
    """Panel quadrature of alpha * log log-logistic-AFT(t | f, r)."""
    log_z, d1, d2 = quad_tilted(LOG_LOGISTIC, y, extra, mu, var, alpha, params)
    return log_z, d1, min(d2, 0.0)


@tilted_function
def log_normal_tilted(y, extra, mu, var, alpha, params):
    """Closed forms where log T = f + N(0, sigma^2) makes them Gaussian, with
    l = log t and c^2 = var + sigma^2 / alpha:

    event, any alpha: N(l | f, sigma^2)^alpha / t^alpha, so (as the Tobit's exact
    observation) log Z = log N(l | mu, c^2) + (1 - alpha)/2 log(2 pi sigma^2)
    - log(alpha)/2 - alpha l, d1 = (l - mu)/c^2, d2 = -1/c^2;
    censored, alpha = 1: S = Phi((f - l)/sigma), so log Z = log Phi(z), z = (mu - l)/c,
    d1 = lambda(z)/c, d2 = -lambda(z)(z + lambda(z))/c^2 (lambda the inverse Mills ratio).
    Censored at alpha < 1: the quadrature of alpha * log Phi((f - l)/sigma)."""
    s2 = params[0] * params[0]
    log_t = math.log(y)
    if extra[0] != 0.0:
        c2 = var + s2 / alpha
        d = log_t - mu
        log_z = (-0.5 * d * d / c2 - LOG_SQRT_2PI - 0.5 * math.log(c2)
                 + (1.0 - alpha) * (LOG_SQRT_2PI + 0.5 * math.log(s2))
                 - 0.5 * math.log(alpha) - alpha * log_t)
        return log_z, d / c2, -1.0 / c2
    if alpha == 1.0:
        c = math.sqrt(var + s2)
        z = (mu - log_t) / c
        lam = mills(z)
        return log_phi(z), lam / c, -lam * mills_shift(z) / (c * c)
    log_z, d1, d2 = quad_tilted(LOG_NORMAL, y, extra, mu, var, alpha, params)
    return log_z, d1, min(d2, 0.0)


def check_events(event, n):
    """Event indicators for n observations (None: every time an event) as a float array
    of 0 (right-censored) and 1 (event seen)."""
    if event is None:
        return np.ones(n)
    e = np.asarray(event)
    if e.dtype == bool:
        e = e.astype(float)
    e = np.full(n, float(e)) if e.ndim == 0 else e
    e = float_array(e, "event", 1, (n,),
                    fix="event is 1 where the event was seen at the time, 0 where the time "
                        "is right-censored (still event-free).")
    if not np.all((e == 0.0) | (e == 1.0)):
        bad = np.unique(e[(e != 0.0) & (e != 1.0)])[:5]
        raise ValueError(f"event must hold 0 (censored) or 1 (event) per observation; got "
                         f"values {bad.tolist()}.")
    return e


class _Survival(QuadratureParams, Likelihood):
    """What the accelerated-failure-time likelihoods share: times, event indicators, the
    predictive survival function, hazard and median."""

    n_extra = 1                   # the event indicator
    #: ``fit(X, t, event=...)`` (default: every time an event); predictions need none.
    data_names = ("event",)

    def _init_event(self, event):
        if event is not None and np.ndim(event) != 0:
            event = np.asarray(event)
        if event is not None:
            check_events(event, np.size(event))
        self.event = event

    def site_extra(self, n: int) -> np.ndarray:
        """The event indicator of each observation (1 where none was given), shape (n, 1).

        Parameters
        ----------
        n : int
            Number of observations.
        """
        return check_events(self.event, n)[:, None].copy()

    def check_targets(self, y: ArrayLike) -> np.ndarray:
        """``y`` checked to hold survival times (finite, > 0), as a float array.

        Parameters
        ----------
        y : array_like of shape (n,)
            Times of the events or of censoring.
        """
        t = float_array(y, "y", 1, fix="Survival times must be finite.")
        if not np.all(t > 0.0):
            i = int(np.flatnonzero(~(t > 0.0))[0])
            raise ValueError(f"y holds survival times, which must be > 0; got {float(t[i])!r} at "
                             f"index {i}. Drop or shift the rows with a time of 0 or less.")
        return t

    def _moments_at(self, times, mean, var, event):
        """log E[p(t | f)] (event 1) or log E[S(t | f)] (event 0), shape (n, T)."""
        mean = np.asarray(mean, dtype=float).ravel()
        var = np.asarray(var, dtype=float).ravel()
        t = self.check_targets(np.atleast_1d(np.asarray(times, dtype=float)).ravel())
        n, k = mean.size, t.size
        out = self.tilted(np.tile(t, n), np.repeat(mean, k), np.repeat(var, k),
                          extra=np.full((n * k, 1), float(event)))[0]
        return out.reshape(n, k)

    def survival_function(self, times: ArrayLike, mean: ArrayLike,
                          var: ArrayLike) -> np.ndarray:
        """``S(t | x) = E[S(t | f)]`` for f ~ N(mean, var) at each time: shape (n, T).

        Parameters
        ----------
        times : float or array_like of shape (T,)
            Times t > 0, the same for every point.
        mean, var : array_like of shape (n,)
            Mean and variance of the latent log time scale f at each point.
        """
        return np.exp(self._moments_at(times, mean, var, 0.0))

    def hazard(self, times: ArrayLike, mean: ArrayLike, var: ArrayLike) -> np.ndarray:
        """``h(t | x) = p(t | x) / S(t | x)`` (both averaged over f): shape (n, T).

        Parameters
        ----------
        times : float or array_like of shape (T,)
            Times t > 0, the same for every point.
        mean, var : array_like of shape (n,)
            Mean and variance of the latent log time scale f at each point.
        """
        return np.exp(self._moments_at(times, mean, var, 1.0)
                      - self._moments_at(times, mean, var, 0.0))

    def median(self, mean: ArrayLike, var: ArrayLike) -> np.ndarray:
        """The t where ``S(t | x) = 1/2``, per point (bisection in log t to 1e-10, from a
        bracket about the latent mean widened until it holds the median).

        Parameters
        ----------
        mean, var : array_like of shape (n,)
            Mean and variance of the latent log time scale f at each point.
        """
        mean = np.asarray(mean, dtype=float).ravel()
        var = np.asarray(var, dtype=float).ravel()
        censored = np.zeros((mean.size, 1))            # S(t | x) is a censored time's Z

        def above(log_t):                              # still more than half event-free
            return self.tilted(np.exp(log_t), mean, var, extra=censored)[0] > math.log(0.5)
        width = 4.0 * np.sqrt(var + 1.0)
        lo, hi = mean - width, mean + width
        for _ in range(60):
            low_ok, high_ok = above(lo), ~above(hi)
            if np.all(low_ok & high_ok):
                break
            lo, hi = np.where(low_ok, lo, lo - width), np.where(high_ok, hi, hi + width)
            width = 2.0 * width
        for _ in range(80):
            mid = 0.5 * (lo + hi)
            up = above(mid)
            lo, hi = np.where(up, mid, lo), np.where(up, hi, mid)
            if np.all(hi - lo < 1e-10 * (1.0 + np.abs(mid))):
                break
        return np.exp(0.5 * (lo + hi))



class Weibull(_Survival):
    """Weibull accelerated-failure-time likelihood: ``S(t | f) = exp(-(t e^-f)^r)``.

    ``f`` is the log time scale (``E[T | f] = e^f Gamma(1 + 1/r)``); ``r`` the shape
    (r > 1: a hazard that rises with time, r < 1: one that falls, r = 1: exponential
    times).  An estimator takes the event indicators in ``fit(X, t, event=...)``.

    Parameters
    ----------
    shape : float, default=1.0
        r > 0, learnt by ML-II unless ``shape_bounds="fixed"``.
    event : array (n,) of 0/1, optional
        1: the event was seen at t; 0: right-censored at t.  Default: every time an event.
    shape_bounds : (low, high) or "fixed", default (1e-2, 1e2)
        ML-II bounds of r, or "fixed" (not optimised).

    Examples
    --------
    >>> import numpy as np
    >>> lik = Weibull(shape=2.0)
    >>> S = lik.survival_function([1.0], [0.0], [0.0])       # f = 0: S(1) = exp(-1)
    >>> round(float(S[0, 0]), 6)
    0.367879
    """

    param_names = ("shape",)
    scalar_tilted = staticmethod(weibull_tilted)
    quad_kind = WEIBULL

    def __init__(self, shape: float = 1.0, event: Optional[ArrayLike] = None,
                 shape_bounds: Union[Tuple[float, float], str] = (1e-2, 1e2)) -> None:
        super().__init__(shape=shape, shape_bounds=shape_bounds)
        self._init_event(event)

    def predict_y(self, mean: ArrayLike, var: ArrayLike) -> Tuple[np.ndarray, np.ndarray]:
        """Mean and variance of T: ``E[T^k] = Gamma(1 + k/r) exp(k mean + k^2 var / 2)``.

        Parameters
        ----------
        mean, var : array_like of shape (n,)
            Mean and variance of the latent log time scale f at each point.
        """
        m, v = np.asarray(mean, float), np.asarray(var, float)
        r = self.shape
        m1 = gamma_fn(1.0 + 1.0 / r) * np.exp(m + 0.5 * v)
        m2 = gamma_fn(1.0 + 2.0 / r) * np.exp(2.0 * m + 2.0 * v)
        return _finite_moments(m1, np.maximum(m2 - m1 * m1, 0.0), "Weibull")


class LogLogistic(_Survival):
    """Log-logistic accelerated-failure-time likelihood: ``S(t | f) = 1 / (1 + (t e^-f)^r)``.

    ``e^f`` is the median time given f; the hazard rises then falls when ``r > 1``.
    ``E[T | f]`` is finite only for r > 1 and its variance for r > 2.

    Parameters
    ----------
    shape : float, default=2.0
        r > 0, learnt by ML-II unless ``shape_bounds="fixed"``.
    event : array (n,) of 0/1, optional
        As for :class:`Weibull`.
    shape_bounds : (low, high) or "fixed", default (1e-2, 1e2)
        ML-II bounds of r, or "fixed" (not optimised).

    Examples
    --------
    >>> lik = LogLogistic(shape=3.0)
    >>> round(float(lik.median([0.0], [0.0])[0]), 8)          # f = 0: median e^0
    1.0
    """

    param_names = ("shape",)
    scalar_tilted = staticmethod(log_logistic_tilted)
    quad_kind = LOG_LOGISTIC

    def __init__(self, shape: float = 2.0, event: Optional[ArrayLike] = None,
                 shape_bounds: Union[Tuple[float, float], str] = (1e-2, 1e2)) -> None:
        super().__init__(shape=shape, shape_bounds=shape_bounds)
        self._init_event(event)

    def _moment(self, k, m, v):
        """E[T^k] = E[e^(k f)] (k pi / r) / sin(k pi / r), finite for k < r only."""
        r = self.shape
        if r <= k:
            raise ValueError(f"a log-logistic time has no finite "
                             f"{'mean' if k == 1 else 'variance'} at shape r = {r:.4g} (the "
                             f"mean needs r > 1, the variance r > 2); predict_median and "
                             f"predict_survival describe T instead, or bound the shape: "
                             f"LogLogistic(shape_bounds=({k + 0.1:g}, 100)).")
        return (k * math.pi / r) / math.sin(k * math.pi / r) * np.exp(k * m + 0.5 * k * k * v)

    def predict_mean(self, mean: ArrayLike, var: ArrayLike) -> np.ndarray:
        """E[T] (needs shape r > 1; a ``ValueError`` otherwise).

        Parameters
        ----------
        mean, var : array_like of shape (n,)
            Mean and variance of the latent log time scale f at each point.
        """
        m1 = self._moment(1, np.asarray(mean, float), np.asarray(var, float))
        return _finite_moments(m1, m1, "LogLogistic")[0]

    def predict_y(self, mean: ArrayLike, var: ArrayLike) -> Tuple[np.ndarray, np.ndarray]:
        """Mean and variance of T (need r > 1 and r > 2; a ``ValueError`` names the shape
        otherwise).

        Parameters
        ----------
        mean, var : array_like of shape (n,)
            Mean and variance of the latent log time scale f at each point.
        """
        m, v = np.asarray(mean, float), np.asarray(var, float)
        m1 = self._moment(1, m, v)
        return _finite_moments(m1, np.maximum(self._moment(2, m, v) - m1 * m1, 0.0),
                               "LogLogistic")


class LogNormal(_Survival):
    """Log-normal accelerated-failure-time likelihood: ``log T ~ N(f, sigma^2)``.

    Parameters
    ----------
    sigma : float, default=1.0
        The sd of log T given f, learnt by ML-II unless ``sigma_bounds="fixed"``.
    event : array (n,) of 0/1, optional
        As for :class:`Weibull`.
    sigma_bounds : (low, high) or "fixed", default (1e-3, 1e2)
        ML-II bounds of sigma, or "fixed" (not optimised).

    Examples
    --------
    >>> lik = LogNormal(sigma=0.5)
    >>> round(float(lik.survival_function([1.0], [0.0], [0.0])[0, 0]), 12)   # at the median
    0.5
    """

    param_names = ("sigma",)
    scalar_tilted = staticmethod(log_normal_tilted)
    quad_kind = LOG_NORMAL

    def __init__(self, sigma: float = 1.0, event: Optional[ArrayLike] = None,
                 sigma_bounds: Union[Tuple[float, float], str] = (1e-3, 1e2)) -> None:
        super().__init__(sigma=sigma, sigma_bounds=sigma_bounds)
        self._init_event(event)

    def tilted_dparams(self, y: ArrayLike, mu_cav: ArrayLike, var_cav: ArrayLike,
                       extra: Optional[ArrayLike] = None, alpha: float = 1.0) -> np.ndarray:
        """d log Z_i / d log(sigma), shape (n, 1) (none if sigma is fixed): the
        derivatives of :func:`log_normal_tilted`'s closed forms (event: ``(d^2/c^4 -
        1/c^2) sigma^2 / alpha + 1 - alpha``; censored at alpha = 1: ``-lambda(z) z
        sigma^2 / c^2``), the quadrature for censored sites at alpha < 1.

        Parameters
        ----------
        y : float or array_like of shape (n,)
            Times t > 0.
        mu_cav : array_like of shape (n,)
            Cavity means.
        var_cav : float or array_like of shape (n,)
            Cavity variances.
        extra : array_like of shape (n, 1) or None, default None
            Per-site event indicators (1: event, 0: right-censored); None: this
            likelihood's own (:meth:`site_extra`).
        alpha : float, default 1.0
            The power of Power EP, in (0, 1].
        """
        y, mu, var = self._site_arrays(y, mu_cav, var_cav)
        ext = self.check_extra(extra, mu.shape[0])
        event = ext[:, 0] != 0.0
        if self.n_dims == 0:
            return np.empty((mu.shape[0], 0))
        if alpha != 1.0 and not event.all():
            out = super().tilted_dparams(y, mu, var, extra=ext, alpha=alpha)
        else:
            out = np.empty((mu.shape[0], 1))
        s2 = self.sigma ** 2
        d = np.log(y) - mu
        c2 = var + s2 / alpha
        out[event, 0] = ((d * d / (c2 * c2) - 1.0 / c2) * s2 / alpha + 1.0 - alpha)[event]
        if alpha == 1.0:
            cens = ~event
            z = -d[cens] / np.sqrt(c2[cens])
            lam = np.exp(-0.5 * z * z - LOG_SQRT_2PI - log_ndtr(z))      # phi / Phi
            out[cens, 0] = -lam * z * s2 / c2[cens]
        return out

    def predict_y(self, mean: ArrayLike, var: ArrayLike) -> Tuple[np.ndarray, np.ndarray]:
        """Mean and variance of T: log T ~ N(mean, var + sigma^2).

        Parameters
        ----------
        mean, var : array_like of shape (n,)
            Mean and variance of the latent log time scale f at each point.
        """
        m, v = np.asarray(mean, float), np.asarray(var, float) + self.sigma ** 2
        m1 = np.exp(m + 0.5 * v)
        return _finite_moments(m1, m1 * m1 * np.expm1(v), "LogNormal")


def _finite_moments(m1, var, name):
    if not (np.all(np.isfinite(m1)) and np.all(np.isfinite(var))):
        raise ValueError(f"the predictive mean or variance of the {name} time overflows "
                         f"float64 at some points (the latent variance is large there); "
                         f"predict_median and predict_survival stay finite.")
    return m1, var
