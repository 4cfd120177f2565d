"""Binomial counts: ``y`` successes out of ``trials`` with a logit link.

::

    p(y | f) = C(N, y) sigma(f)^y sigma(-f)^(N - y),   sigma(f) = 1 / (1 + e^-f)

the likelihood of a binomial GLM with a GP in place of the linear predictor (e.g. the
share of pupils above a test's median in each school, statsmodels' ``star98``).  It is
log-concave in f.  The tilted moments have no closed form: they come from the
quadrature of :func:`fastep.likelihoods._quadrature.quad_tilted` (as the counts' do), and
so do the predictive moments, ``E[sigma(f)]`` and ``E[sigma(f)^2]`` being the tilted
normalisers of one success in one trial and two in two.  ``site_extra`` holds ``N_i``.
"""
from __future__ import annotations

import numbers
from typing import Optional, Tuple

import numpy as np
from numpy.typing import ArrayLike

from .._checks import float_array, integer_values
from .._jit import tilted_function
from ._base import Likelihood
from ._quadrature import quad_tilted
from ._scalar import BINOMIAL


@tilted_function
def binomial_tilted(y, extra, mu, var, alpha, params):
    """Panel quadrature of alpha * log Binomial(y | N = extra[0], sigma(f))."""
    log_z, d1, d2 = quad_tilted(BINOMIAL, y, extra, mu, var, alpha, params)
    return log_z, d1, min(d2, 0.0)                # log-concave: d2 <= 0 (rounding removed)


def check_trials(trials, n):
    """Per-observation trial counts (None: 1) as a float array of n integers >= 1."""
    if trials is None:
        return np.ones(n)
    t = np.asarray(trials, dtype=float)
    t = np.full(n, float(t)) if t.ndim == 0 else t
    t = float_array(t, "trials", 1, (n,),
                    fix="trials is the number of trials of each observation (its successes "
                        "are y).")
    return integer_values(t, "trials", 1, None, "whole numbers of trials (integers >= 1)",
                          "Pass each row's number of trials, y its successes.",
                          "trials must be finite.")


class Binomial(Likelihood):
    """Binomial counts with a logit link: ``y ~ Binomial(trials, sigma(f))``.

    ``E[y | f] = N sigma(f)``, ``Var[y | f] = N sigma(f) sigma(-f)``; with ``trials=1``
    (the default) a Bernoulli label in {0, 1}.  An estimator takes the trials per row in
    ``fit(X, y, trials=...)`` and again in its predictions (``predict(X, trials=1)``
    gives the success probability E[sigma(f)]).

    Parameters
    ----------
    trials : int or array (n,), optional
        Number of trials of each observation (default 1); y counts its successes.

    Examples
    --------
    >>> lik = Binomial()
    >>> mean_y, var_y = lik.predict_y([0.0], [0.0], trials=10)
    >>> float(mean_y[0]), float(var_y[0])
    (5.0, 2.5)
    """

    scalar_tilted = staticmethod(binomial_tilted)
    n_extra = 1                  # N_i
    data_names = ("trials",)
    predict_data = ("trials",)

    def __init__(self, trials: Optional[ArrayLike] = None) -> None:
        super().__init__()
        if trials is not None:
            if not isinstance(trials, numbers.Real):
                trials = np.asarray(trials, dtype=float)
            check_trials(trials, np.size(trials))
        self.trials = trials

    def site_extra(self, n: int) -> np.ndarray:
        """The trials ``N_i`` of each observation (1 where none were given), shape (n, 1).

        Parameters
        ----------
        n : int
            Number of observations.
        """
        return check_trials(self.trials, n)[:, None].copy()

    def check_targets(self, y: ArrayLike) -> np.ndarray:
        """``y`` checked to hold success counts (integers >= 0), as a float array.

        Parameters
        ----------
        y : array_like of shape (n,)
            Successes of each observation.
        """
        return integer_values(y, "y", 0, None, "success counts (integers >= 0) for a "
                              "binomial likelihood", "Pass the number of successes of each "
                              "row (and trials= its trials).", "Counts must be finite.")

    def encode_targets(self, y: ArrayLike) -> np.ndarray:
        """Success counts checked, none above its observation's trials.

        Parameters
        ----------
        y : array_like of shape (n,) or (n, 1)
            Successes of each observation (out of this likelihood's ``trials``).
        """
        y = super().encode_targets(y)
        trials = self.site_extra(y.shape[0])[:, 0]
        over = np.flatnonzero(y > trials)
        if over.size:
            i = int(over[0])
            raise ValueError(f"y must count successes out of trials; y[{i}] = {y[i]:g} "
                             f"exceeds its trials {trials[i]:g}. Pass trials= (per row) with "
                             f"fit, or check that y holds successes, not proportions.")
        return y

    def _success_moments(self, mean, var):
        """``(E[sigma(f)], E[sigma(f)^2])`` for f ~ N(mean, var) per point: the tilted
        normalisers of one success in one trial and of two in two."""
        mean = np.ravel(np.asarray(mean, dtype=float))
        var = np.ravel(np.asarray(var, dtype=float))
        n = mean.shape[0]
        p1 = np.exp(self.tilted(np.ones(n), mean, var, extra=np.ones((n, 1)))[0])
        p2 = np.exp(self.tilted(np.full(n, 2.0), mean, var, extra=np.full((n, 1), 2.0))[0])
        return np.minimum(p1, 1.0), np.minimum(p2, p1)

    def predict_mean(self, mean: ArrayLike, var: ArrayLike,
                     trials: Optional[ArrayLike] = None) -> np.ndarray:
        """E[y] = N E[sigma(f)] given f ~ N(mean, var), per point.

        Parameters
        ----------
        mean, var : array_like of shape (n,)
            Mean and variance of the latent f at each point.
        trials : int or array_like of shape (n,) or None, default None
            Trials N of each point; None: this likelihood's own (1 if it has none).
        """
        return self.predict_y(mean, var, trials)[0]

    def predict_y(self, mean: ArrayLike, var: ArrayLike,
                  trials: Optional[ArrayLike] = None) -> Tuple[np.ndarray, np.ndarray]:
        """Mean and variance of y given f ~ N(mean, var), per point:
        ``E[y] = N p1``, ``Var[y] = N (p1 - p2) + N^2 (p2 - p1^2)`` with ``p1 =
        E[sigma(f)]``, ``p2 = E[sigma(f)^2]`` (the binomial's own variance averaged, plus
        the spread of its mean).

        Parameters
        ----------
        mean, var : array_like of shape (n,)
            Mean and variance of the latent f at each point.
        trials : int or array_like of shape (n,) or None, default None
            Trials N of each point; None: this likelihood's own (1 if it has none).
        """
        shape = np.shape(mean)
        p1, p2 = self._success_moments(mean, var)
        N = check_trials(self.trials if trials is None else trials, p1.shape[0])
        var_y = N * (p1 - p2) + N * N * np.maximum(p2 - p1 * p1, 0.0)
        return (N * p1).reshape(shape), var_y.reshape(shape)
