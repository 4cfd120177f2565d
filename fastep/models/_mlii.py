"""Type-II maximum likelihood: the one loop every estimator uses.

It maximises a problem's evidence over ``problem.theta`` (log kernel and likelihood
parameters, and inducing inputs where they move) with L-BFGS-B or a user optimiser,
warm-starting EP at every evaluation from the sites of the previous one, with optional
restarts from ``problem.draw(rng)``.  A problem is any object with ``theta``, ``bounds``,
``with_theta(theta)``, ``evidence(sites) -> (value, gradient, result)`` and
``draw(rng)`` (:class:`fastep.models._latent.LatentGP` and the collapsed sparse
regression problem of :class:`fastep.SparseGPRegressor`).
"""
from __future__ import annotations

import logging
import warnings

import numpy as np
from scipy.optimize import minimize

from .._linalg import NotPositiveDefiniteError
from ..inference import ConvergenceWarning, EPNumericalWarning

_LOG = logging.getLogger("fastep")
_FAILED = 1e25          # -log Z of a trial point where EP or a factorisation failed


def maximize_evidence(problem, optimizer="L-BFGS-B", n_restarts=0, rng=None, sites=None,
                      owner="the estimator"):
    """Maximise ``problem.evidence`` over ``problem.theta``.

    Parameters
    ----------
    problem : see the module docstring
    optimizer : "L-BFGS-B" or callable
        A callable follows scikit-learn's convention: ``optimizer(obj_func, initial_theta,
        bounds) -> (theta_opt, func_min)``, where ``obj_func(theta, eval_gradient=True)``
        returns the negative evidence and its gradient.
    n_restarts : int
        Extra runs from ``problem.draw(rng)`` (needs finite bounds).
    rng : numpy.random.Generator
    sites : (tau, nu), optional
        EP sites to start the first evaluation from.
    owner : str
        Who asks (for messages).

    Returns
    -------
    problem : the problem at the best theta found
    sites : (tau, nu) or None
        A warm start for the final EP run: the sites computed at the returned theta (else
        those of the best evaluation of the best run; the given ``sites`` if no
        evaluation succeeded).
    """
    warm = {"sites": sites, "theta": None, "step": 0, "best": None}

    def neg(theta, eval_gradient=True):
        theta = np.asarray(theta, dtype=float)
        try:
            # trial points far from the optimum may not converge; only the final fit warns
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                warnings.simplefilter("ignore", EPNumericalWarning)
                value, grad, result = problem.with_theta(theta).evidence(warm["sites"])
        except NotPositiveDefiniteError:
            value, grad, result = -_FAILED, np.zeros(theta.size), None
        if not (np.isfinite(value) and np.all(np.isfinite(grad))):
            value, grad = -_FAILED, np.zeros(theta.size)
        elif hasattr(result, "site_tau"):
            warm["sites"], warm["theta"] = (result.site_tau, result.site_nu), theta.copy()
            if warm["best"] is None or value > warm["best"][0]:
                warm["best"] = (value, warm["theta"], warm["sites"])
        warm["step"] += 1
        _LOG.info("ML-II step %d: log evidence %.4f%s", warm["step"], value,
                  f" after {result.n_iter} EP sweeps" if hasattr(result, "n_iter") else "")
        return (-value, -grad) if eval_gradient else -value

    bounds = np.asarray(problem.bounds, dtype=float)

    def run(start):
        """One optimiser run: (theta, -log evidence, the sites at theta)."""
        warm["best"] = None
        if callable(optimizer):
            theta, fmin = optimizer(neg, start, bounds)
            theta, fmin = np.asarray(theta, dtype=float), float(fmin)
        else:
            res = minimize(neg, start, jac=True, method="L-BFGS-B", bounds=bounds)
            theta, fmin = res.x, float(res.fun)
        if warm["theta"] is not None and np.array_equal(warm["theta"], theta):
            return theta, fmin, warm["sites"]
        # the optimiser returned an earlier point (a grid, a line search that backed off)
        return theta, fmin, warm["sites"] if warm["best"] is None else warm["best"][2]

    best = run(problem.theta)
    if n_restarts > 0 and not np.all(np.isfinite(bounds)):
        raise ValueError(f"n_restarts_optimizer > 0 needs finite hyperparameter bounds; "
                         f"{owner} has infinite ones.")
    for _ in range(int(n_restarts)):
        cand = run(problem.draw(rng))
        if cand[1] < best[1]:
            best = cand
    return problem.with_theta(best[0]), best[2]
