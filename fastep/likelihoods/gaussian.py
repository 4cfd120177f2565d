"""Gaussian likelihood p(y | f) = N(y | f, noise_variance): EP is then exact."""
from __future__ import annotations

from typing import Optional, Tuple, Union

import math

import numpy as np
from numpy.typing import ArrayLike

from .._jit import tilted_function
from .._numerics import LOG_SQRT_2PI
from ._base import Likelihood


@tilted_function
def gaussian_tilted(y, extra, mu, var, alpha, params):
    """int N(y|f,s2)^a N(f|mu,v) df = (2 pi s2)^((1-a)/2) a^(-1/2) N(y | mu, v + s2/a)."""
    s2 = params[0]
    s = var + s2 / alpha
    r = y - mu
    log_z = (0.5 * (1.0 - alpha) * math.log(2.0 * math.pi * s2) - 0.5 * math.log(alpha)
             - LOG_SQRT_2PI - 0.5 * math.log(s) - 0.5 * r * r / s)
    return log_z, r / s, -1.0 / s


class Gaussian(Likelihood):
    """Gaussian noise, ``y = f + eps``, ``eps ~ N(0, noise_variance)``.

    With this likelihood EP is exact: it reproduces GP regression.

    Parameters
    ----------
    noise_variance : float, default 1.0
        The noise variance sigma^2 > 0, learnt by ML-II unless
        ``noise_variance_bounds="fixed"``.
    noise_variance_bounds : (low, high) or "fixed", default (1e-6, 1e6)
        Bounds of sigma^2 in ML-II (which searches log sigma^2 between log low and
        log high); "fixed" keeps it at ``noise_variance``.

    Examples
    --------
    >>> lik = Gaussian(noise_variance=0.1)
    >>> logz, d1, d2 = lik.tilted([1.0], [0.0], [0.9])
    >>> float(d2[0])
    -1.0
    """

    param_names = ("noise_variance",)
    scalar_tilted = staticmethod(gaussian_tilted)

    def __init__(self, noise_variance: float = 1.0,
                 noise_variance_bounds: Union[Tuple[float, float], str] = (1e-6, 1e6)) -> None:
        super().__init__(noise_variance=noise_variance,
                         noise_variance_bounds=noise_variance_bounds)

    def predict_y(self, mean: ArrayLike, var: ArrayLike) -> Tuple[np.ndarray, np.ndarray]:
        """Mean and variance of y given f ~ N(mean, var): (mean, var + noise_variance).

        Parameters
        ----------
        mean, var : array_like of shape (n,)
            Mean and variance of the latent f at each point.
        """
        return np.array(mean, float), np.asarray(var, float) + self.noise_variance

    def tilted_dparams(self, y: ArrayLike, mu_cav: ArrayLike, var_cav: ArrayLike,
                       extra: Optional[ArrayLike] = None, alpha: float = 1.0) -> np.ndarray:
        """d log Z / d log s2 = s2 * ((y - mu)^2 / s^2 - 1 / s) / 2, s = v + s2 (at
        alpha = 1; central differences otherwise), shape (n, n_dims).

        Parameters
        ----------
        y : float or array_like of shape (n,)
            Targets.
        mu_cav : array_like of shape (n,)
            Cavity means.
        var_cav : float or array_like of shape (n,)
            Cavity variances.
        extra : array_like of shape (n, 0) or None, default None
            Not read (the Gaussian has no per-site data).
        alpha : float, default 1.0
            The power of Power EP, in (0, 1].
        """
        if alpha != 1.0:
            return super().tilted_dparams(y, mu_cav, var_cav, extra, alpha)
        s2 = self.noise_variance
        s = np.asarray(var_cav, float) + s2
        r = np.asarray(y, float) - np.asarray(mu_cav, float)
        out = 0.5 * s2 * (r * r / (s * s) - 1.0 / s)
        return out.reshape(-1, 1)[:, : self.n_dims]
