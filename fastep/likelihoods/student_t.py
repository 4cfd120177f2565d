"""Student-t noise for robust regression: heavy tails, not log-concave::

    p(y | f) = Gamma((nu+1)/2) / (Gamma(nu/2) sqrt(nu pi) sigma)
               * (1 + (y - f)^2 / (nu sigma^2))^(-(nu+1)/2)

with learnable degrees of freedom nu and scale sigma.  An outlier far from the cavity
gives a tilted density that is wider than the cavity (d2 log Z / d mu2 > 0), i.e. a
negative site precision: the EP engine keeps such sites through its split factorisation,
and runs its robust schedule for this likelihood (``log_concave = False``; see
:func:`fastep.ep`).  Tilted moments and both parameter gradients come from the quadrature
of :mod:`fastep.likelihoods._quadrature` (differentiation under the integral): a
mode-centred trapezoid rule where the tilted density is unimodal, adaptive panels, which
follow both the cavity's and the likelihood's scale, for the bimodal tilted density of an
outlier.
Reference: Jylanki, Vanhatalo & Vehtari (2011), Robust Gaussian process regression with a
Student-t likelihood, JMLR 12.
"""
from __future__ import annotations

from typing import Tuple, Union

import dataclasses
import warnings

import numpy as np
from numpy.typing import ArrayLike

from .._caller import user_stacklevel
from .._theta import ThetaEntry
from .._jit import tilted_function
from ._base import Likelihood
from ._quadrature import QuadratureParams, quad_tilted
from ._scalar import STUDENT_T


@tilted_function
def student_t_tilted(y, extra, mu, var, alpha, params):
    """Panel quadrature of alpha * log St(y | f, nu, sigma); d2 may be positive."""
    return quad_tilted(STUDENT_T, y, extra, mu, var, alpha, params)


class StudentT(QuadratureParams, Likelihood):
    """Student-t observation noise ``y = f + sigma * t_nu`` (robust regression).

    Parameters
    ----------
    df : float, default=4.0
        Degrees of freedom nu > 0 (small: heavy tails; large: nearly Gaussian).
    scale : float, default=1.0
        sigma > 0; the noise variance is sigma^2 nu / (nu - 2) for nu > 2.
    df_bounds : (low, high) or "fixed", default (1.0, 1e3)
        ML-II bounds of nu, or "fixed" (not optimised).  The default keeps df >= 1 (the
        Cauchy): below it the tails have no mean, the posterior of f splits into more
        modes and EP's fixed point becomes fragile (on Neal's function with outliers,
        ML-II that was free to reach df = 0.58 ended at hyperparameters where EP did not
        converge).
    scale_bounds : (low, high) or "fixed", default (1e-4, 1e4)
        ML-II bounds of sigma, or "fixed" (not optimised).

    Examples
    --------
    >>> import numpy as np
    >>> lik = StudentT(df=4.0, scale=0.5)
    >>> lik.log_concave
    False
    >>> mean_y, var_y = lik.predict_y([1.0], [0.0])
    >>> float(mean_y[0]), float(var_y[0])
    (1.0, 0.5)
    """

    param_names = ("df", "scale")
    log_concave = False
    scalar_tilted = staticmethod(student_t_tilted)
    quad_kind = STUDENT_T

    def __init__(self, df: float = 4.0, scale: float = 1.0,
                 df_bounds: Union[Tuple[float, float], str] = (1.0, 1e3),
                 scale_bounds: Union[Tuple[float, float], str] = (1e-4, 1e4)) -> None:
        for name, value in (("df", df), ("scale", scale)):
            try:
                ok = float(value) > 0 and np.isfinite(float(value))
            except (TypeError, ValueError):
                ok = False
            if not ok:
                raise ValueError(f"StudentT {name} must be a positive finite number "
                                 f"(degrees of freedom nu > 0, scale sigma > 0); got "
                                 f"{name}={value!r}.")
        super().__init__(df=df, scale=scale, df_bounds=df_bounds, scale_bounds=scale_bounds)

    def theta_entries(self) -> list[ThetaEntry]:
        """As :meth:`Likelihood.theta_entries`; a df that ML-II leaves at its upper bound
        (and the evidence does not pull back) is said to be what it is, a Gaussian, with
        the cheaper likelihood, rather than a bound to widen.

        Examples
        --------
        >>> [e.name for e in StudentT().theta_entries()]
        ['likelihood df', 'likelihood scale']
        """
        gaussian = ("{owner}: ML-II took the Student-t's df to its upper bound {value:.3g}, "
                    "where the t is a Gaussian: the data look Gaussian (no outliers the t "
                    "needs to discount). likelihood='gaussian' fits the same model at a "
                    "fraction of the cost.")
        return [dataclasses.replace(e, at_upper=gaussian) if e.name == "likelihood df" else e
                for e in super().theta_entries()]

    def predict_mean(self, mean: ArrayLike, var: ArrayLike) -> np.ndarray:
        """E[y] = mean (the t is symmetric about f).

        Parameters
        ----------
        mean, var : array_like of shape (n,)
            Mean and variance of the latent f at each point.
        """
        return np.array(mean, dtype=float)

    def predict_y(self, mean: ArrayLike, var: ArrayLike) -> Tuple[np.ndarray, np.ndarray]:
        """Mean and variance of y given f ~ N(mean, var): (mean, var + sigma^2 nu/(nu-2)).

        For nu <= 2 the Student-t has no finite variance: the variance is inf, and a
        ``UserWarning`` says so (naming ``df`` and how to bound it above 2), since a
        standard deviation is then no summary of the spread of y.

        Parameters
        ----------
        mean, var : array_like of shape (n,)
            Mean and variance of the latent f at each point.
        """
        mean, var = np.asarray(mean, float), np.asarray(var, float)
        nu, s = self.df, self.scale
        if nu > 2.0:
            return mean.copy(), var + s * s * nu / (nu - 2.0)
        warnings.warn(
            f"the Student-t noise has df = {nu:.4g} <= 2, so y has no finite variance and its "
            f"predictive standard deviation is inf. Its spread is the scale "
            f"{s:.4g} (the t's quantiles scale with it); predict_latent gives the latent f's "
            f"finite sd. For a finite variance, bound df above 2: likelihood=StudentT("
            f"df=4, df_bounds=(2.1, 1e3)).", UserWarning, stacklevel=user_stacklevel())
        return mean.copy(), np.full(var.shape, np.inf)
