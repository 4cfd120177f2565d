"""The two optimisers of GWI's objective: full-batch L-BFGS and minibatch Adam."""
from __future__ import annotations

import logging
import math

import numpy as np
from scipy.optimize import minimize

from ._objective import GWIParams


_LOG = logging.getLogger("fastep")


#: Iterations over which fit_lbfgs averages the objective's relative decrease.
WINDOW = 10


def fit_lbfgs(params, objective, max_iter=1000, tol=2e-4, log_every=1):
    """Minimise ``objective(params) -> (value, grad, parts)`` with L-BFGS-B (full batch).

    The stopping test: the objective's relative decrease per iteration, averaged over the
    last :data:`WINDOW` iterations, ``(f_k-W - f_k) / (W max(|f_k|, 1)) <= tol`` (one
    iteration's decrease, SciPy's ``ftol``, jumps by orders of magnitude from one
    iteration to the next, so a single small step ended or failed to end a fit at
    random).  The gradient test is off: the likelihood term is a sum over the training
    points, so a gradient tolerance would have to scale with n.

    Returns ``(params, n_iter, converged, change)``: ``converged`` is False when the
    budget ran out (``max_iter`` iterations, or SciPy's limit on objective evaluations);
    a stop by ``tol`` or by a line search that cannot improve further counts as
    converged.  ``change`` is the last averaged relative decrease (the quantity compared
    with ``tol``; NaN before :data:`WINDOW` iterations), for the caller's
    ``ConvergenceWarning``.
    """
    J, M, d = params.shape
    state = {"it": 0, "f": [], "change": math.nan, "stopped": False, "x": None}

    def fun(theta):
        value, grad, parts = objective(GWIParams.unpack(theta, J, M, d))
        state["last"] = (value, parts)
        if not state["f"]:                         # the objective at the starting point
            state["f"].append(float(value))
        return value, grad.pack()

    def callback(intermediate_result):
        state["it"] += 1
        f = state["f"]
        f.append(float(intermediate_result.fun))
        state["x"] = np.array(intermediate_result.x)
        if len(f) > WINDOW:
            state["change"] = (f[-WINDOW - 1] - f[-1]) / (WINDOW * max(abs(f[-1]), 1.0))
        if state["it"] % log_every == 0:
            value, parts = state["last"]
            _LOG.info("GWI L-BFGS-B iteration %d: objective %.4f (neg. expected log-lik %.4f, "
                      "sum W2^2 %.4f)", state["it"], value, parts["nell"], parts["w2"].sum())
        if state["change"] <= tol:
            state["stopped"] = True
            raise StopIteration

    res = minimize(fun, params.pack(), jac=True, method="L-BFGS-B", callback=callback,
                   options={"maxiter": int(max_iter), "ftol": 0.0, "gtol": 0.0,
                            "maxcor": 20})
    x = state["x"] if state["stopped"] else res.x
    converged = state["stopped"] or int(res.status) != 1     # 1: iteration/evaluation limit
    return GWIParams.unpack(x, J, M, d), int(state["it"]), converged, state["change"]


def fit_adam(params, objective, n, batch_size, n_epochs, learning_rate, rng):
    """Minibatch Adam on ``objective(params, rows, scale)`` (rows drawn without replacement
    within an epoch; ``scale = n / batch size`` makes the likelihood sum unbiased).
    Returns the parameters after ``n_epochs`` epochs."""
    J, M, d = params.shape
    theta = params.pack()
    m1 = np.zeros_like(theta)
    m2 = np.zeros_like(theta)
    b1, b2, eps = 0.9, 0.999, 1e-8
    batch_size = min(int(batch_size), n)
    t = 0
    for epoch in range(1, int(n_epochs) + 1):
        perm = rng.permutation(n)
        total = 0.0
        for start in range(0, n - batch_size + 1, batch_size):
            rows = np.sort(perm[start:start + batch_size])
            value, grad, _ = objective(GWIParams.unpack(theta, J, M, d), rows, n / batch_size)
            g = grad.pack()
            t += 1
            m1 = b1 * m1 + (1 - b1) * g
            m2 = b2 * m2 + (1 - b2) * g * g
            theta = theta - learning_rate * (m1 / (1 - b1 ** t)) / (np.sqrt(m2 / (1 - b2 ** t))
                                                                    + eps)
            total += value
        _LOG.info("GWI Adam epoch %d: mean minibatch objective %.4f", epoch,
                  total / max(1, n // batch_size))
    return GWIParams.unpack(theta, J, M, d)
