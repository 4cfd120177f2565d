"""Type-II maximum likelihood: L-BFGS-B on the log evidence, with restarts."""
from __future__ import annotations

import warnings

import numpy as np
from scipy.optimize import minimize

from .._linalg import NotPositiveDefiniteError
from ..inference.ep import ConvergenceWarning, EPNumericalWarning


def maximize_evidence(evidence, theta0, bounds, n_restarts=0, random_state=None,
                      optimizer="L-BFGS-B", draw=None):
    """Maximise ``evidence(theta) -> (value, gradient)`` over log-hyperparameters.

    Restarts draw ``theta`` uniformly inside ``bounds`` (log space, as in
    scikit-learn's GP estimators), or from ``draw(rng)`` when given.  ``optimizer`` may be "L-BFGS-B" or a callable
    ``optimizer(obj_func, initial_theta, bounds) -> (theta_opt, func_min)`` with
    scikit-learn's convention (``obj_func(theta, eval_gradient=True)`` returns the
    negative evidence and its gradient).  Returns ``(theta, value)``.
    """
    def neg(theta, eval_gradient=True):
        try:
            # trial points far from the optimum may not converge; only the final fit warns
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                warnings.simplefilter("ignore", EPNumericalWarning)
                value, grad = evidence(np.asarray(theta, dtype=float))
        except NotPositiveDefiniteError:
            value, grad = -1e25, np.zeros(len(theta))
        if not np.isfinite(value):
            value, grad = -1e25, np.zeros(len(theta))
        return (-value, -grad) if eval_gradient else -value

    def run(start):
        if callable(optimizer):
            theta, fmin = optimizer(neg, start, bounds)
            return np.asarray(theta, dtype=float), float(fmin)
        res = minimize(neg, start, jac=True, method="L-BFGS-B", bounds=bounds)
        return res.x, float(res.fun)

    rng = np.random.default_rng(random_state)
    best = run(np.asarray(theta0, dtype=float))
    bounds = np.asarray(bounds, dtype=float)
    if n_restarts > 0 and draw is None and not np.all(np.isfinite(bounds)):
        raise ValueError("n_restarts_optimizer > 0 needs finite hyperparameter bounds.")
    for _ in range(int(n_restarts)):
        cand = run(draw(rng) if draw is not None else rng.uniform(bounds[:, 0], bounds[:, 1]))
        if cand[1] < best[1]:
            best = cand
    return best[0], -best[1]
