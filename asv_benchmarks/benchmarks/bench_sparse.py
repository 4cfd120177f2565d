"""asv benchmarks for sparse GPs (issue 5): sparse Power EP sweeps and the collapsed bound.

Data as in ``scripts/sparse_scaling.py``: X uniform on [-2, 2]^3, probit labels, RBF(1, 1),
m inducing points drawn from X.  ``setup`` compiles on a small problem first.
"""
import warnings

import numpy as np

import fastep
from fastep.inference.collapsed import collapsed_objective, kernel_gradient
from fastep.inference.sparse_ep import sparse_ep, sparse_ep_gradient
from fastep.kernels import RBF
from fastep.likelihoods import Probit


def make_data(n, m, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 2, (n, 3))
    f = np.sin(2.0 * X[:, 0]) + X[:, 1] * X[:, 2]
    y = np.where(f + 0.5 * rng.standard_normal(n) > 0.0, 1.0, -1.0)
    return X, y, X[rng.choice(n, m, replace=False)]


def run(X, y, Z, max_iter=100, tol=1e-4, schedule="sequential"):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", fastep.ConvergenceWarning)
        return sparse_ep(RBF(1.0, 1.0), Z, X, y, Probit(), max_iter=max_iter, tol=tol,
                         schedule=schedule)


class SparseEPSweeps:
    """Three sweeps of sparse probit EP (cold start; the first also computes d_i), each
    schedule."""

    params = ([10_000, 100_000, 1_000_000], [64, 256], ["sequential", "parallel"])
    param_names = ["n", "m", "schedule"]
    number = 1
    repeat = (1, 3, 60.0)
    timeout = 900

    def setup(self, n, m, schedule):
        self.X, self.y, self.Z = make_data(n, m)
        run(self.X[:500], self.y[:500], self.Z[:20], max_iter=2, schedule=schedule)

    def time_three_sweeps(self, n, m, schedule):
        run(self.X, self.y, self.Z, max_iter=3, tol=1e-300, schedule=schedule)

    def peakmem_three_sweeps(self, n, m, schedule):
        run(self.X, self.y, self.Z, max_iter=3, tol=1e-300, schedule=schedule)


class SparseEPConverged:
    """A converged sparse probit EP fit (tol 1e-4) and its log Z gradient, each schedule;
    ``track_passes``: passes over the data (sweeps + the evaluation pass)."""

    params = ([10_000, 100_000], [64, 256], ["sequential", "parallel"])
    param_names = ["n", "m", "schedule"]
    number = 1
    repeat = (1, 3, 60.0)
    timeout = 900

    def setup(self, n, m, schedule):
        self.X, self.y, self.Z = make_data(n, m)
        self.res = run(self.X, self.y, self.Z, schedule=schedule)

    def time_fit(self, n, m, schedule):
        run(self.X, self.y, self.Z, schedule=schedule)

    def time_gradient(self, n, m, schedule):
        sparse_ep_gradient(self.res, RBF(1.0, 1.0), self.X, self.y, Probit())

    def track_sweeps(self, n, m, schedule):
        return self.res.n_iter

    def track_passes(self, n, m, schedule):
        return self.res.n_iter + 1


class CollapsedBound:
    """Titsias' collapsed bound (alpha -> 0) and Power EP (alpha = 0.5) with all gradients."""

    params = ([10_000, 100_000], [64, 256], [0.0, 0.5])
    param_names = ["n", "m", "alpha"]
    number = 1
    repeat = (1, 5, 30.0)

    def setup(self, n, m, alpha):
        self.X, y, self.Z = make_data(n, m)
        self.y = y + 0.1 * np.random.default_rng(1).standard_normal(n)
        self.k = RBF(1.0, 1.0)

    def time_objective_and_gradient(self, n, m, alpha):
        k = self.k
        st = collapsed_objective(k(self.Z), k(self.Z, self.X), k.diag(self.X), self.y, 0.1,
                                 alpha, eval_gradient=True)
        kernel_gradient(k, self.Z, self.X, st.grad)
