"""Count likelihoods with a log link: Poisson and negative binomial.

``mu_i = exposure_i * exp(f_i)``, targets are counts 0, 1, 2, ...::

    Poisson:            p(y | f) = mu^y e^-mu / y!
    negative binomial:  p(y | f) = Gamma(y + r) / (Gamma(r) y!) (r / (r + mu))^r (mu / (r + mu))^y

(NB2: variance mu + mu^2 / r; r -> inf is the Poisson).  Both are log-concave in f.  The
tilted moments have no closed form (the Poisson-lognormal integral): they come from the
panel quadrature of :func:`fastep.likelihoods._quadrature.quad_tilted`, which follows the
likelihood's own scale (counts up to 1e4 and beyond), and the dispersion gradient from
the same quadrature, by differentiation under the integral.  ``site_extra`` holds
``log exposure_i``.
"""
from __future__ import annotations

from typing import Optional, Tuple, Union

import numbers

import numpy as np
from numpy.typing import ArrayLike

from .._checks import float_array, integer_values
from .._jit import tilted_function
from ._base import Likelihood
from ._quadrature import QuadratureParams, quad_tilted
from ._scalar import NEG_BINOMIAL, POISSON


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
        return np.log(check_exposure(self.exposure, n))[:, None].copy()

    def check_targets(self, y):
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

    def predict_mean(self, mean, var, exposure=None):
        """E[y] = E[mu] given f ~ N(mean, var), per point; a ``ValueError`` where it
        overflows float64."""
        log_m1, _, m, v = self._log_rate_moments(mean, var, exposure)
        return _exp_finite(log_m1, "mean", m, v)

    def log_predictive_density(self, y, mean, var):
        """log p(y_i) per point (:meth:`Likelihood.log_predictive_density`); where it is
        not finite in float64 because the rate exp(f) overflows over the latent
        predictive's mass, the ``ValueError`` of :meth:`predict_mean`."""
        try:
            return super().log_predictive_density(y, mean, var)
        except ValueError:
            self.predict_mean(mean, np.maximum(var, 0.0))
            raise

    def predict_y(self, mean, var, exposure=None):
        """Mean and variance of y given f ~ N(mean, var), per point; a ``ValueError``
        where either overflows float64."""
        log_m1, log_rel, m, v = self._log_rate_moments(mean, var, exposure)
        log_var = np.logaddexp.reduce(self._log_var_terms(log_m1, log_rel, v), axis=0)
        return (_exp_finite(log_m1, "mean", m, v), _exp_finite(log_var, "variance", m, v))


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

