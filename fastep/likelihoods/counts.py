"""Count likelihoods with a log link: Poisson and negative binomial, and their
zero-inflated forms.

``mu_i = exposure_i * exp(f_i)``, targets are counts 0, 1, 2, ...::

    Poisson:            p(y | f) = mu^y e^-mu / y!
    negative binomial:  p(y | f) = Gamma(y + r) / (Gamma(r) y!) (r / (r + mu))^r (mu / (r + mu))^y

(NB2: variance mu + mu^2 / r; r -> inf is the Poisson).  Both are log-concave in f.  A
zero-inflated form adds structural zeros with probability pi (Lambert 1992; GPstuff's
``lik_zinegbin``)::

    p(y | f) = pi [y = 0] + (1 - pi) p_count(y | f)

which is not log-concave in f at y = 0 (it falls from 1 to pi as the rate grows), so EP
runs with robust updates there, as for the Student-t.  The
tilted moments have no closed form (the Poisson-lognormal integral): they come from the
quadrature of :func:`fastep.likelihoods._quadrature.quad_tilted` (mode-centred trapezoid,
adaptive panels where it declines), which follows the likelihood's own scale (counts up to 1e4 and beyond), and the dispersion gradient from
the same quadrature, by differentiation under the integral.  ``site_extra`` holds
``log exposure_i``.

Over 450 lines: one job, the log-link count likelihoods: Poisson, negative binomial and
their zero-inflated forms share data handling, starts and predictions.
"""
from __future__ import annotations

import math
import numbers
from typing import Any, List, Optional, Tuple, Union

import numpy as np
from numpy.typing import ArrayLike

from .._checks import float_array, integer_values
from .._jit import jit, tilted_function
from .._numerics import log_add_exp
from ._base import Likelihood, tilted_batch
from ._quadrature import QuadratureParams, quad_dparam_batch, quad_tilted
from ._scalar import NEG_BINOMIAL, POISSON, ZI_NEG_BINOMIAL, ZI_POISSON


@tilted_function
def poisson_tilted(y, extra, mu, var, alpha, params):
    """Panel quadrature of alpha * log Poisson(y | exp(f + log exposure))."""
    log_z, d1, d2 = quad_tilted(POISSON, y, extra, mu, var, alpha, params)
    return log_z, d1, min(d2, 0.0)                # log-concave: d2 <= 0 (rounding removed)


@tilted_function
def neg_binomial_tilted(y, extra, mu, var, alpha, params):
    """Panel quadrature of alpha * log NB(y | exp(f + log exposure), r)."""
    log_z, d1, d2 = quad_tilted(NEG_BINOMIAL, y, extra, mu, var, alpha, params)
    return log_z, d1, min(d2, 0.0)


@jit("UniTuple(f8, 3)(i8, i8, f8, f8[::1], f8, f8, f8, f8[::1], f8)")
def zero_inflated_moments(count_kind, kind, y, extra, mu, var, alpha, params, pi):
    """Tilted moments of a zero-inflated count likelihood from its count process's.

    y > 0: ``((1 - pi) p(y | f))^alpha``, so log Z = alpha log(1 - pi) + log Z_count and
    the same (d1, d2).  y = 0 at alpha = 1: a two-component mixture, ``Z = pi + (1 - pi)
    Z_count`` (the first component the cavity itself): with ``w = (1 - pi) Z_count / Z``,
    ``d1 = w d1_count`` and ``d2 = w d2_count + w (1 - w) d1_count^2`` (the mixture's
    variance).  Exact up to the count quadrature, which is log-concave and accurate; the
    zero-inflated likelihood itself falls gently (by log(1 / pi)) over a few units of f,
    a feature the panels of a wide cavity can step over.  y = 0 at alpha < 1 (Power EP)
    has no such split: the panel quadrature of the likelihood ``kind`` itself."""
    if y != 0.0:
        log_z, d1, d2 = quad_tilted(count_kind, y, extra, mu, var, alpha, params)
        return alpha * math.log1p(-pi) + log_z, d1, min(d2, 0.0)
    if alpha != 1.0:
        return quad_tilted(kind, y, extra, mu, var, alpha, params)
    log_zc, d1c, d2c = quad_tilted(count_kind, y, extra, mu, var, 1.0, params)
    d2c = min(d2c, 0.0)
    a = math.log(pi)
    b = math.log1p(-pi) + log_zc
    log_z = log_add_exp(a, b)
    w = math.exp(b - log_z)
    return log_z, w * d1c, w * d2c + w * (1.0 - w) * d1c * d1c


@tilted_function
def zi_poisson_tilted(y, extra, mu, var, alpha, params):
    """alpha * log ZIP(y | exp(f + log exposure), pi) (:func:`zero_inflated_moments`);
    d2 may be positive (not log-concave at y = 0)."""
    return zero_inflated_moments(POISSON, ZI_POISSON, y, extra, mu, var, alpha, params,
                                 params[0])


@tilted_function
def zi_neg_binomial_tilted(y, extra, mu, var, alpha, params):
    """alpha * log ZINB(y | exp(f + log exposure), r, pi) (:func:`zero_inflated_moments`)."""
    return zero_inflated_moments(NEG_BINOMIAL, ZI_NEG_BINOMIAL, y, extra, mu, var, alpha,
                                 params, params[1])


def check_counts(y, name="y"):
    """``y`` as a float array of non-negative integer counts, or a ``ValueError``."""
    return integer_values(y, name, 0, None, "counts (integers >= 0) for a count likelihood",
                          "Round or drop the values that are not counts, or use a likelihood "
                          "for real-valued targets.", "Counts must be finite.")


def check_exposure(exposure, n):
    """Per-observation exposures (None: 1) as a float array of n positive values."""
    if exposure is None:
        return np.ones(n)
    e = np.asarray(exposure, dtype=float)
    e = np.full(n, float(e)) if e.ndim == 0 else e
    e = float_array(e, "exposure", 1, (n,), positive=True,
                    fix="exposure is the positive multiplier of the rate (time, area, "
                        "population) of each observation.")
    return e


class _CountLikelihood(Likelihood):
    """What the Poisson and negative-binomial likelihoods share: targets, exposure,
    predictive moments of y."""

    n_extra = 1                  # log exposure_i
    #: Per-observation arrays that ``fit``/``predict`` of an estimator may pass.
    data_names = ("exposure",)
    #: Those a prediction must be given again when the fit was given them: the rate of a
    #: new point scales with its own exposure, and no default is right for it.
    predict_data = ("exposure",)

    def _init_exposure(self, exposure):
        if exposure is not None:
            if not isinstance(exposure, numbers.Real):
                exposure = np.asarray(exposure, dtype=float)
            check_exposure(exposure, np.size(exposure))      # positive and finite, now
        self.exposure = exposure

    def site_extra(self, n):
        """``log exposure_i`` of each observation (0 where none was given), shape (n, 1).

        Parameters
        ----------
        n : int
            Number of observations.
        """
        return np.log(check_exposure(self.exposure, n))[:, None].copy()

    def check_targets(self, y):
        """``y`` checked to hold counts (integers >= 0), as a float array.

        Parameters
        ----------
        y : array_like of shape (n,)
            Counts.
        """
        return check_counts(y)

    def _log_rate_moments(self, mean, var, exposure):
        """``log E[mu]`` and ``log(Var[mu] / E[mu]^2) = log expm1(var)`` of the rate
        ``mu = e exp(f)``, f ~ N(mean, var) (log-normal: ``E[mu] = e exp(mean + var / 2)``,
        ``Var[mu] = E[mu]^2 expm1(var)``), so that no moment is formed before it is known
        to be finite and ``E[mu^2] - E[mu]^2`` never cancels."""
        mean, var = np.asarray(mean, float), np.asarray(var, float)
        e = check_exposure(self.exposure if exposure is None else exposure,
                           mean.size).reshape(mean.shape)
        log_m1 = np.log(e) + mean + 0.5 * var
        with np.errstate(divide="ignore"):             # var = 0: Var[mu] = 0
            log_rel = np.where(var > 1.0, var + np.log1p(-np.exp(-np.maximum(var, 1.0))),
                               np.log(np.expm1(np.minimum(var, 1.0))))
        return log_m1, log_rel, mean, var

    def _log_var_terms(self, log_m1, log_rel, var):
        """Logs of the terms of Var[y] (per point); a subclass adds its own."""
        raise NotImplementedError

    def _log_kept(self) -> float:
        """log of the probability that y comes from the count process (0: always;
        the zero-inflated forms' log(1 - pi))."""
        return 0.0

    def predict_mean(self, mean, var, exposure=None):
        """E[y] = E[mu] given f ~ N(mean, var), per point; a ``ValueError`` where it
        overflows float64.

        Parameters
        ----------
        mean, var : array_like of shape (n,)
            Mean and variance of the latent log rate f at each point.
        exposure : float or array_like of shape (n,), optional
            Exposure of each point; None: this likelihood's own (1 if it has none).
        """
        log_m1, _, m, v = self._log_rate_moments(mean, var, exposure)
        return _exp_finite(log_m1 + self._log_kept(), "mean", m, v)

    def log_predictive_density(self, y, mean, var, extra=None):
        """log p(y_i) per point (:meth:`Likelihood.log_predictive_density`); where it is
        not finite in float64 because the rate exp(f) overflows over the latent
        predictive's mass, the ``ValueError`` of :meth:`predict_mean`.

        Parameters
        ----------
        y : array_like of shape (n,)
            Observed counts.
        mean, var : array_like of shape (n,)
            Mean and variance of the latent log rate f at each point.
        extra : array_like of shape (n, n_extra) or None, default None
            Per-point extra columns (the log exposures); None: this likelihood's own.
        """
        try:
            return super().log_predictive_density(y, mean, var, extra)
        except ValueError:
            if extra is None:            # the overflow diagnosis knows its own exposures
                self.predict_mean(mean, np.maximum(var, 0.0))
            raise

    def predict_y(self, mean, var, exposure=None):
        """Mean and variance of y given f ~ N(mean, var), per point; a ``ValueError``
        where either overflows float64.

        Parameters
        ----------
        mean, var : array_like of shape (n,)
            Mean and variance of the latent log rate f at each point.
        exposure : float or array_like of shape (n,), optional
            Exposure of each point; None: this likelihood's own (1 if it has none).
        """
        log_m1, log_rel, m, v = self._log_rate_moments(mean, var, exposure)
        log_var = np.logaddexp.reduce(self._log_var_terms(log_m1, log_rel, v), axis=0)
        return (_exp_finite(log_m1 + self._log_kept(), "mean", m, v),
                _exp_finite(log_var, "variance", m, v))


#: log of the largest float64
LOG_MAX = float(np.log(np.finfo(float).max))


def _exp_finite(log_value, what, mean, var):
    """exp(log_value), or a ValueError naming the first point where it overflows."""
    big = np.flatnonzero(np.ravel(log_value) > LOG_MAX)
    if big.size:
        i = int(big[0])
        raise ValueError(
            f"the predictive {what} of the counts overflows float64 at {big.size} point(s), "
            f"the first at index {i} (log of it {float(np.ravel(log_value)[i]):.4g} > "
            f"{LOG_MAX:.1f}; latent mean {float(np.ravel(mean)[i]):.4g}, latent variance "
            f"{float(np.ravel(var)[i]):.4g}): the rate exp(f) is log-normal and its moments "
            f"grow as exp(variance). Such points lie far from the training inputs or the "
            f"kernel variance is large; predict_latent gives the mean and standard deviation "
            f"of the log rate f, which stay finite.")
    return np.exp(log_value)


class Poisson(QuadratureParams, _CountLikelihood):
    """Poisson counts with a log link: ``y ~ Poisson(exposure * exp(f))``.

    Parameters
    ----------
    exposure : float or array (n,), optional
        Multiplier of the rate per observation (default 1); an estimator takes it in
        ``fit(X, y, exposure=...)``.

    Examples
    --------
    >>> import numpy as np
    >>> lik = Poisson()
    >>> mean_y, var_y = lik.predict_y([0.0], [0.0])
    >>> float(mean_y[0]), float(var_y[0])
    (1.0, 1.0)
    """

    scalar_tilted = staticmethod(poisson_tilted)
    quad_kind = POISSON

    def __init__(self, exposure: Optional[ArrayLike] = None) -> None:
        super().__init__()
        self._init_exposure(exposure)

    def _log_var_terms(self, log_m1, log_rel, var):
        """Var[y] = E[mu] + Var[mu] (mu log-normal)."""
        return [log_m1, 2.0 * log_m1 + log_rel]

    def memorising_hint(self, y: ArrayLike) -> str:
        """Over-dispersed counts (variance at least :data:`OVERDISPERSED` times the mean,
        exposures aside): a Poisson GP can only explain the excess variance by a latent
        that follows every row, and a negative binomial models it.

        Parameters
        ----------
        y : array-like of shape (n_samples,)
            The counts.

        Returns
        -------
        str
            The sentence, or "" for counts no more dispersed than that.

        Examples
        --------
        >>> Poisson().memorising_hint([0.0, 0.0, 1.0, 9.0])[:36]
        'The counts vary 5.7 times as much as'
        """
        y = np.asarray(y, dtype=float)
        mean, var = float(np.mean(y)), float(np.var(y))
        if not (mean > 0.0 and var >= OVERDISPERSED * mean):
            return ""
        return (f"The counts vary {var / mean:.1f} times as much as a Poisson variable of "
                f"their mean ({mean:.3g}): over-dispersed counts, which "
                f"likelihood='negative_binomial' models (its dispersion learnt by ML-II) "
                f"instead of a latent function that follows every row.")


#: Variance / mean of the counts from which a memorising Poisson fit suggests the negative
#: binomial (:meth:`Poisson.memorising_hint`).
OVERDISPERSED = 2.0


class NegativeBinomial(QuadratureParams, _CountLikelihood):
    """Negative-binomial counts (NB2) with a log link and a learnable dispersion r.

    ``E[y | f] = mu = exposure * exp(f)``, ``Var[y | f] = mu + mu^2 / r``.

    Parameters
    ----------
    dispersion : float, default=1.0
        r > 0 (large r: nearly Poisson).  Learnt by ML-II unless
        ``dispersion_bounds="fixed"``.
    exposure : float or array (n,), optional
        As for :class:`Poisson`.
    dispersion_bounds : (low, high) or "fixed", default (1e-3, 1e6)
        Bounds of r in ML-II (which searches log r between log low and log high);
        "fixed" keeps r at ``dispersion``.

    Examples
    --------
    >>> lik = NegativeBinomial(dispersion=2.0)
    >>> mean_y, var_y = lik.predict_y([0.0], [0.0])
    >>> float(mean_y[0]), float(var_y[0])
    (1.0, 1.5)
    """

    param_names = ("dispersion",)
    scalar_tilted = staticmethod(neg_binomial_tilted)
    quad_kind = NEG_BINOMIAL

    def __init__(self, dispersion: float = 1.0, exposure: Optional[ArrayLike] = None,
                 dispersion_bounds: Union[Tuple[float, float], str] = (1e-3, 1e6)) -> None:
        super().__init__(dispersion=dispersion, dispersion_bounds=dispersion_bounds)
        self._init_exposure(exposure)

    def _log_var_terms(self, log_m1, log_rel, var):
        """Var[y] = E[mu + mu^2 / r] + Var[mu], E[mu^2] = E[mu]^2 exp(var)."""
        return [log_m1, 2.0 * log_m1 + var - np.log(self.dispersion), 2.0 * log_m1 + log_rel]


def _check_zero_prob(zero_prob, bounds):
    """``zero_prob`` and its ML-II bounds checked: a probability strictly between 0 and 1,
    and ``"fixed"`` or (low, high) with 0 < low < high < 1."""
    try:
        ok = 0.0 < float(zero_prob) < 1.0
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ValueError(f"zero_prob must be a probability strictly between 0 and 1 (the share "
                         f"of structural zeros); got zero_prob={zero_prob!r}.")
    if isinstance(bounds, str) and bounds == "fixed":
        return
    try:
        lo, hi = (float(b) for b in bounds)
        ok = 0.0 < lo < hi < 1.0
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ValueError(f"zero_prob_bounds must be 'fixed' or (low, high) with 0 < low < high "
                         f"< 1 (probabilities); got zero_prob_bounds={bounds!r}.")


class _ZeroInflated(QuadratureParams, _CountLikelihood):
    """What the zero-inflated count likelihoods share: the zero probability pi (the last
    parameter), the count process's kind (:attr:`count_kind`), the (1 - pi) share of the
    mean, and the parameter gradients."""

    log_concave = False
    power_ep = False
    #: the count process: its kind in :mod:`fastep.likelihoods._scalar` and its tilted
    #: function (which reads the count's parameters first in ``params``)
    count_kind = -1
    count_tilted: Any = None

    def _log_kept(self) -> float:
        return math.log1p(-self.zero_prob)

    def tilted_dparams(self, y: ArrayLike, mu_cav: ArrayLike, var_cav: ArrayLike,
                       extra: Optional[ArrayLike] = None, alpha: float = 1.0) -> np.ndarray:
        """d log Z_i / d log(param) for every free parameter, shape (n, n_dims).

        From the count process's tilted log Z_count and its derivatives, as
        :func:`zero_inflated_moments` splits log Z (at alpha = 1, :func:`check_power`):
        y > 0, ``d/dpi = -1 / (1 - pi)`` and a count parameter's as the count process's;
        y = 0, ``d/dpi = (1 - Z_count) / Z`` and a count parameter's times ``w = (1 - pi)
        Z_count / Z``.

        Parameters
        ----------
        y : float or array_like of shape (n,)
            Counts.
        mu_cav : array_like of shape (n,)
            Cavity means.
        var_cav : float or array_like of shape (n,)
            Cavity variances.
        extra : array_like of shape (n, 1) or None, default None
            Per-site ``log exposure_i``; None: this likelihood's own (:meth:`site_extra`).
        alpha : float, default 1.0
            The power of Power EP; only 1 is accepted (a ``ValueError`` otherwise).
        """
        y, mu, var = self._site_arrays(y, mu_cav, var_cav)
        n = mu.shape[0]
        extra = self.check_extra(extra, n)
        alpha = float(alpha)
        params = self.params
        pi = float(params[-1])
        log_z = self.tilted(y, mu, var, alpha, extra=extra)[0]      # (refuses alpha < 1)
        count = np.empty((3, n))                   # the count process's tilted moments
        tilted_batch(self.count_tilted, y, extra, mu, var, alpha, params, count[0], count[1],
                     count[2])
        log_zc = count[0]
        zero = y == 0.0                  # log Z there lies in [log pi, 0]: no overflow
        raw = np.empty((n, params.size))
        raw[:, -1] = -alpha / (1.0 - pi)                              # pi
        raw[zero, -1] = -np.expm1(log_zc[zero]) * np.exp(-log_z[zero])
        share = np.exp(np.log1p(-pi) + log_zc[zero] - log_z[zero])
        col = np.empty(n)
        for k in range(params.size - 1):                              # the count's own
            quad_dparam_batch(self.count_kind, y, extra, mu, var, alpha, params, k, col)
            col[zero] *= share
            raw[:, k] = col
        free = [self.param_names.index(name) for name in self._free()]
        return raw[:, free] * params[free]


class ZeroInflatedPoisson(_ZeroInflated):
    """Zero-inflated Poisson counts: ``y = 0`` with probability ``zero_prob`` (a structural
    zero), else ``y ~ Poisson(exposure * exp(f))`` (Lambert 1992).

    ``p(y | f) = pi [y = 0] + (1 - pi) Poisson(y | mu)``; ``E[y | f] = (1 - pi) mu``,
    ``Var[y | f] = (1 - pi) mu (1 + pi mu)``.  Not log-concave at y = 0: EP runs robust
    updates, as for :class:`StudentT`.

    Parameters
    ----------
    zero_prob : float in (0, 1), default=0.1
        pi, learnt by ML-II unless ``zero_prob_bounds="fixed"``.
    exposure : float or array (n,), optional
        As for :class:`Poisson`.
    zero_prob_bounds : (low, high) in (0, 1), or "fixed", default (1e-4, 0.99)
        Bounds of pi in ML-II; "fixed" keeps pi at ``zero_prob``.

    Examples
    --------
    >>> lik = ZeroInflatedPoisson(zero_prob=0.25)
    >>> mean_y, var_y = lik.predict_y([0.0], [0.0])        # mu = 1
    >>> float(mean_y[0]), float(var_y[0])
    (0.75, 0.9375)
    """

    param_names = ("zero_prob",)
    scalar_tilted = staticmethod(zi_poisson_tilted)
    quad_kind = ZI_POISSON
    count_kind = POISSON
    count_tilted = staticmethod(poisson_tilted)

    def __init__(self, zero_prob: float = 0.1, exposure: Optional[ArrayLike] = None,
                 zero_prob_bounds: Union[Tuple[float, float], str] = (1e-4, 0.99)) -> None:
        _check_zero_prob(zero_prob, zero_prob_bounds)
        super().__init__(zero_prob=zero_prob, zero_prob_bounds=zero_prob_bounds)
        self._init_exposure(exposure)

    def _log_var_terms(self, log_m1, log_rel, var) -> List[np.ndarray]:
        """Var[y] = (1 - pi) E[mu] + (1 - pi) E[mu]^2 (expm1(var) + pi)."""
        keep = self._log_kept()
        return [keep + log_m1,
                keep + 2.0 * log_m1 + np.logaddexp(log_rel, math.log(self.zero_prob))]


class ZeroInflatedNegativeBinomial(_ZeroInflated):
    """Zero-inflated negative-binomial counts (NB2): ``y = 0`` with probability
    ``zero_prob``, else ``y ~ NB(mean exposure * exp(f), dispersion r)`` (GPstuff's
    ``lik_zinegbin``).

    ``E[y | f] = (1 - pi) mu``, ``Var[y | f] = (1 - pi) mu (1 + mu / r + pi mu)``.  Not
    log-concave at y = 0: EP runs robust updates.

    Parameters
    ----------
    dispersion : float, default=1.0
        r > 0, as for :class:`NegativeBinomial`.
    zero_prob : float in (0, 1), default=0.1
        pi, learnt by ML-II unless ``zero_prob_bounds="fixed"``.
    exposure : float or array (n,), optional
        As for :class:`Poisson`.
    dispersion_bounds : (low, high) or "fixed", default (1e-3, 1e6)
        ML-II bounds of r, as for :class:`NegativeBinomial`.
    zero_prob_bounds : (low, high) in (0, 1), or "fixed", default (1e-4, 0.99)
        ML-II bounds of pi, as for :class:`ZeroInflatedPoisson`.

    Examples
    --------
    >>> lik = ZeroInflatedNegativeBinomial(dispersion=2.0, zero_prob=0.25)
    >>> mean_y, var_y = lik.predict_y([0.0], [0.0])        # mu = 1
    >>> float(mean_y[0]), float(var_y[0])
    (0.75, 1.3125)
    """

    param_names = ("dispersion", "zero_prob")
    scalar_tilted = staticmethod(zi_neg_binomial_tilted)
    quad_kind = ZI_NEG_BINOMIAL
    count_kind = NEG_BINOMIAL
    count_tilted = staticmethod(neg_binomial_tilted)

    def __init__(self, dispersion: float = 1.0, zero_prob: float = 0.1,
                 exposure: Optional[ArrayLike] = None,
                 dispersion_bounds: Union[Tuple[float, float], str] = (1e-3, 1e6),
                 zero_prob_bounds: Union[Tuple[float, float], str] = (1e-4, 0.99)) -> None:
        _check_zero_prob(zero_prob, zero_prob_bounds)
        super().__init__(dispersion=dispersion, zero_prob=zero_prob,
                         dispersion_bounds=dispersion_bounds, zero_prob_bounds=zero_prob_bounds)
        self._init_exposure(exposure)

    def _log_var_terms(self, log_m1, log_rel, var) -> List[np.ndarray]:
        """Var[y] = (1 - pi) E[mu] + (1 - pi) E[mu]^2 (expm1(var) + exp(var) / r + pi)."""
        keep = self._log_kept()
        excess = np.logaddexp.reduce([log_rel, var - math.log(self.dispersion),
                                      np.full(np.shape(var), math.log(self.zero_prob))],
                                     axis=0)
        return [keep + log_m1, keep + 2.0 * log_m1 + excess]
