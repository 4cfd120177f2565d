"""Binary classification likelihoods, y in {-1, +1}: probit and logistic."""
from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike

from .._jit import tilted_function
from .._numerics import log_phi, mills, mills_shift
from ._base import Likelihood
from ._quadrature import quad_tilted
from ._scalar import LOGISTIC, PROBIT


@tilted_function
def probit_tilted(y, extra, mu, var, alpha, params):
    """alpha = 1: Z = Phi(z), z = y mu / sqrt(1 + v) (R&W eq. 3.82);
    d log Z/d mu = y r/sqrt(1+v), d2 = -r (z + r)/(1+v), r = phi(z)/Phi(z).
    Other alpha: panel quadrature on alpha * log Phi(y f)."""
    if alpha != 1.0:
        log_z, d1, d2 = quad_tilted(PROBIT, y, extra, mu, var, alpha, params)
        return log_z, d1, min(d2, 0.0)            # log-concave: d2 <= 0 (rounding removed)
    c = math.sqrt(1.0 + var)
    z = y * mu / c
    r = mills(z)
    return log_phi(z), y * r / c, -r * mills_shift(z) / (1.0 + var)


@tilted_function
def logistic_tilted(y, extra, mu, var, alpha, params):
    """No closed form: panel quadrature on alpha * log sigma(y f)."""
    log_z, d1, d2 = quad_tilted(LOGISTIC, y, extra, mu, var, alpha, params)
    return log_z, d1, min(d2, 0.0)                # log-concave: d2 <= 0 (rounding removed)


class Probit(Likelihood):
    """Probit likelihood ``p(y | f) = Phi(y f)``, y in {-1, +1} (closed-form moments).

    Examples
    --------
    >>> float(Probit().predict_proba([0.0], [3.0])[0])
    0.5
    """

    binary = True
    scalar_tilted = staticmethod(probit_tilted)

    def predict_proba(self, mean: ArrayLike, var: ArrayLike) -> np.ndarray:
        """p(y* = +1) = Phi(mean / sqrt(1 + var)).

        Parameters
        ----------
        mean, var : array_like of shape (n,)
            Mean and variance of the latent f at each point.
        """
        from scipy.special import ndtr
        return ndtr(np.asarray(mean, float) / np.sqrt(1.0 + np.asarray(var, float)))


class Logistic(Likelihood):
    """Logistic likelihood ``p(y | f) = 1 / (1 + exp(-y f))``, y in {-1, +1}.

    No closed form exists: the tilted moments come from the quadrature of
    :func:`fastep.likelihoods._quadrature.quad_tilted`: a trapezoid rule centred and scaled at
    the tilted mode (its step from the logistic's poles at +-i pi), handing over to adaptive
    Gauss-Legendre panels where its checks fail (a cavity of variance 1e4 under the step).

    Examples
    --------
    >>> round(float(Logistic().predict_proba([0.0], [1.0])[0]), 10)
    0.5
    """

    binary = True
    scalar_tilted = staticmethod(logistic_tilted)
