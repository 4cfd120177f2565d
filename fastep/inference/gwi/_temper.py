"""Tempering of GWI's predictive: the temperature of the latent variances that minimises
the training log loss."""
from __future__ import annotations

import math

import numpy as np
from scipy.optimize import minimize

from ._objective import prob_largest_grad


def tempered_log_loss(log_t, mean, var, y, likelihood, device="cpu"):
    """``-sum_i log p(y_i)`` with every variance scaled by ``T = exp(log_t)``, and its
    derivative in ``log_t``: ``p = eps/(J - 1) + (1 - eps - eps/(J - 1)) S(x, y)``."""
    eps, J = likelihood.epsilon, likelihood.n_classes
    slope = 1.0 - eps - eps / (J - 1)
    t = math.exp(log_t)
    s, _, dv = prob_largest_grad(likelihood, mean, var * t, y, device)
    p = eps / (J - 1) + slope * s
    return float(-np.log(p).sum()), float(-np.sum((slope / p)[:, None] * dv * var) * t)


def temper(mean, var, y, likelihood, bounds=(1e-3, 1e3), device="cpu"):
    """Temperature T (r_j <- T r_j for every class) minimising :func:`tempered_log_loss`
    on (mean, var, y), e.g. a validation split.

    One temperature is shared by all classes: per-class temperatures (the reference
    code's choice) overfit a validation split of a hundred points (in a digits fit they
    raised the test log loss from 0.11 to 0.19).  Returns ``(T, loss_before, loss_after)``
    (summed over the points); T = 1 if tempering does not lower the loss.
    """
    def fun(x):
        value, grad = tempered_log_loss(x[0], mean, var, y, likelihood, device)
        return value, np.array([grad])

    before = fun(np.zeros(1))[0]
    res = minimize(fun, np.zeros(1), jac=True, method="L-BFGS-B",
                   bounds=[(math.log(bounds[0]), math.log(bounds[1]))])
    if not res.fun < before:
        return 1.0, before, before
    return float(math.exp(res.x[0])), before, float(res.fun)
