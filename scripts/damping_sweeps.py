"""Sweeps of adaptive parallel EP: fastep's damping rule against that of fastep 0.1.

fastep 0.1 shrank EP's step by 0.7 whenever the undamped site change grew and never let
it grow back.  The rule now (:class:`fastep.inference._sweep.SweepControl`) also shrinks
a step that swings back slowly, does not shrink one that grows along a steady direction,
and lets a shrunk step grow back after three calm sweeps.  This script counts the sweeps
to tol of dense parallel EP on seeded problems with both rules in the same run (the 0.1
rule re-implemented below, :class:`RuleOf01`) and prints how far apart the two log Z
are.  Sweep counts are deterministic; a sweep costs the same either way.

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

ep_module = sys.modules["fastep.inference.ep"]      # fastep.inference.ep is also a function
from fastep.kernels import RBF  # noqa: E402
from fastep.datasets import simulate_annotators  # noqa: E402
from fastep.likelihoods import Logistic, MultiAnnotator, Poisson, Probit, StudentT  # noqa: E402


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
    sens, spec = [0.9, 0.85, 0.8, 0.75, 0.5, 0.5, 0.3, 0.2], [0.85, 0.9, 0.75, 0.8, 0.5, 0.4,
                                                              0.3, 0.25]
    for seed, n in ((0, 600), (1, 300)):            # a crowd with spammers, RBF(60, 1.2)
        rng = np.random.default_rng(seed)
        X = rng.normal(size=(n, 3))
        z = (np.sin(2 * X[:, 0]) + X[:, 1] > 0).astype(int)
        lik = MultiAnnotator(simulate_annotators(z, sens, spec, random_state=seed), sens, spec)
        yield (f"annotators, seed {seed}, n = {n}", RBF(60.0, 1.2)(X) + 1e-6 * np.eye(n),
               np.ones(n), lik, 1e-6)


class RuleOf01(_sweep.SweepControl):
    """fastep 0.1's adaptive damping: x0.7 (to at least 0.1) when the undamped change
    grows; robust EP's backtracking cuts it too; it never grows back."""

    def advance(self, change, damped=True, turn=None):
        if damped:
            raw = change / self.damping
            if self.adaptive and raw > self.last_raw:
                self.damping = max(min(0.1, self.damping), 0.7 * self.damping)
            self.last_raw = raw
            change = raw
        self.change = change
        self.changes.append((change, math.nan, self.settled))
        self.sweeps += 1
        self.prev = self.log_ev


def sweeps(K, y, likelihood, tol, control):
    ep_module.SweepControl = control
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", fastep.ConvergenceWarning)
            return fastep.ep(K, y, likelihood, method="parallel", tol=tol, max_iter=2000)
    finally:
        ep_module.SweepControl = _sweep.SweepControl


def main():
    print("dense parallel EP, adaptive damping: sweeps to tol")
    print(f"{'problem':32s} {'now':>5s} {'0.1':>5s} {'|d log Z|':>10s}")
    totals = [0, 0]
    for name, K, y, lik, tol in problems():
        new = sweeps(K, y, lik, tol, _sweep.SweepControl)
        old = sweeps(K, y, lik, tol, RuleOf01)
        totals[0] += new.n_iter
        totals[1] += old.n_iter
        flag = "" if new.converged and old.converged else "  (not converged)"
        gap = abs(new.log_marginal_likelihood - old.log_marginal_likelihood)
        print(f"{name:32s} {new.n_iter:5d} {old.n_iter:5d} {gap:10.1e}{flag}", flush=True)
    print(f"{'total':32s} {totals[0]:5d} {totals[1]:5d}   ratio {totals[0] / totals[1]:.2f}")


if __name__ == "__main__":
    main()
