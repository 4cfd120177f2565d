"""Sweeps of adaptive parallel EP with and without the regrowth of a shrunk step.

Adaptive damping (``damping=None``) shrinks EP's step by 0.7 when the undamped site
change grows and, since round 2, divides it by 0.7 again (up to 1) after a sweep whose
change fell by 10% or more (:class:`fastep.inference._sweep.SweepControl`).  This script
counts the sweeps to tol of dense parallel EP on seeded problems, in the same run with
regrowth and without it (``DAMPING_REGROW`` set to infinity), and checks that both
reach the same log Z.  Sweep counts are deterministic; a sweep costs the same either way.

    python scripts/damping_sweeps.py
"""
import math
import os
import sys
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ep_floor import make_data  # noqa: E402

import fastep  # noqa: E402
from fastep.inference import _sweep  # noqa: E402
from fastep.kernels import RBF  # noqa: E402
from fastep.likelihoods import Logistic, Poisson, Probit, StudentT  # noqa: E402


def problems():
    """(name, K, y, likelihood, tol) of every case."""
    for seed in range(6):
        rng = np.random.default_rng(seed)
        x = rng.uniform(-3, 3, 200)
        f = 0.5 * np.sin(2.7 * x) + 0.4 * x
        y = f + 0.1 * rng.standard_normal(200)
        gross = rng.random(200) < 0.15                      # 15% gross outliers
        y[gross] += rng.standard_normal(gross.sum())
        K = RBF(1.5, 1.0)(x[:, None]) + 1e-8 * np.eye(200)
        yield f"Student-t outliers, seed {seed}", K, y, StudentT(1.2, 0.07), 1e-6
    X, y = make_data(1000)
    for variance in (1.0, 10.0, 100.0):
        K = RBF(variance, 1.0)(X) + 1e-8 * np.eye(1000)
        yield f"probit, variance {variance:g}", K, y, Probit(), 1e-4
        yield f"logistic, variance {variance:g}", K, y, Logistic(), 1e-6
    rng = np.random.default_rng(0)
    X = rng.uniform(-2, 2, (400, 2))
    counts = rng.poisson(np.exp(np.sin(2 * X[:, 0]) + X[:, 1])).astype(float)
    yield "Poisson", RBF(1.0, 1.0)(X) + 1e-8 * np.eye(400), counts, Poisson(), 1e-6


def sweeps(K, y, likelihood, tol, regrow):
    _sweep.DAMPING_REGROW = regrow
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", fastep.ConvergenceWarning)
        res = fastep.ep(K, y, likelihood, method="parallel", tol=tol, max_iter=2000)
    return res


def main():
    default = _sweep.DAMPING_REGROW
    print("dense parallel EP, adaptive damping: sweeps to tol")
    print(f"{'problem':32s} {'regrowth':>9s} {'without':>8s} {'|d log Z|':>10s}")
    totals = [0, 0]
    try:
        for name, K, y, lik, tol in problems():
            new, old = sweeps(K, y, lik, tol, default), sweeps(K, y, lik, tol, math.inf)
            totals[0] += new.n_iter
            totals[1] += old.n_iter
            flag = "" if new.converged and old.converged else "  (not converged)"
            gap = abs(new.log_marginal_likelihood - old.log_marginal_likelihood)
            print(f"{name:32s} {new.n_iter:9d} {old.n_iter:8d} {gap:10.1e}{flag}", flush=True)
    finally:
        _sweep.DAMPING_REGROW = default
    print(f"{'total':32s} {totals[0]:9d} {totals[1]:8d}   ratio {totals[0] / totals[1]:.2f}")


if __name__ == "__main__":
    main()
