"""asv benchmarks of the count, Student-t and ordinal likelihoods: their tilted moments per
site and a parallel EP sweep against the probit one on the same K (``scripts/ep_floor.py
--likelihoods`` prints the same ratio), and the regressor's fit."""
import warnings

import numpy as np

import fastep
from fastep.kernels import RBF
from fastep.likelihoods import NegativeBinomial, OrdinalProbit, Poisson, Probit, StudentT

LIKELIHOODS = ["probit", "poisson", "negative_binomial", "student_t", "ordinal"]


def make_case(name, n, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 3))
    f = np.sin(2.0 * X[:, 0]) + X[:, 1] * X[:, 2]
    counts = rng.poisson(np.exp(f)).astype(float)
    cases = {"probit": (Probit(), np.where(f + rng.standard_normal(n) > 0, 1.0, -1.0)),
             "poisson": (Poisson(), counts),
             "negative_binomial": (NegativeBinomial(2.0), counts),
             "student_t": (StudentT(4.0, 0.3), f + 0.3 * rng.standard_t(4.0, n)),
             "ordinal": (OrdinalProbit([-1.0, 0.0, 1.0]),
                         np.digitize(f + rng.standard_normal(n), [-1.0, 0.0, 1.0]) * 1.0)}
    lik, y = cases[name]
    return X, f, lik, y


def sweeps(K, y, lik, k):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fastep.ep(K, y, lik, max_iter=k, tol=1e-300, check_psd=False)


class TiltedMoments:
    """Tilted moments of 10^5 sites (one compiled batch call)."""

    params = LIKELIHOODS
    param_names = ["likelihood"]

    def setup(self, name):
        _, f, self.lik, self.y = make_case(name, 100_000)
        self.mu, self.var = f, np.full(f.size, 0.5)
        self.lik.tilted(self.y[:10], self.mu[:10], self.var[:10])

    def time_tilted(self, name):
        self.lik.tilted(self.y, self.mu, self.var)


class LikelihoodSweep:
    """Four parallel EP sweeps at n = 2000 (after two), per likelihood."""

    params = (LIKELIHOODS, [2000])
    param_names = ["likelihood", "n"]
    number = 1
    repeat = (1, 5, 30.0)

    def setup(self, name, n):
        X, _, self.lik, self.y = make_case(name, n)
        self.K = RBF(1.0, 1.0)(X)
        self.sites = sweeps(self.K, self.y, self.lik, 2)

    def time_four_sweeps(self, name, n):
        sweeps(self.K, self.y, self.lik, 4)


class RegressorFit:
    """EPGaussianProcessRegressor fit with ML-II (dense, n = 300)."""

    params = ["student_t", "poisson"]
    param_names = ["likelihood"]
    number = 1
    repeat = (1, 3, 60.0)
    timeout = 300

    def setup(self, name):
        X, _, _, self.y = make_case(name, 300)
        self.X = X

    def time_fit(self, name):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fastep.EPGaussianProcessRegressor(likelihood=name).fit(self.X, self.y)
