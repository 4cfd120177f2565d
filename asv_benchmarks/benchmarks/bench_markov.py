"""asv benchmarks of state-space EP (fastep.markov_ep): one iteration at n = 10^5 (filter,
smoother, cavities, tilted moments, site update; ``scripts/markov_scaling.py`` prints the
same against its floor and across n), and a regressor fit of a daily count series."""
import warnings

import numpy as np

import fastep
from fastep.kernels import Matern12, Matern32
from fastep.likelihoods import Poisson


def _counts(n, seed=0):
    rng = np.random.default_rng(seed)
    t = np.arange(n, dtype=float)
    f = 0.6 * np.sin(2 * np.pi * t / 365.25) + 0.4 * np.sin(2 * np.pi * t / 7.0) + 1.0
    return t, rng.poisson(np.exp(f)).astype(float)


class MarkovIteration:
    """Four iterations of markov_ep at n = 10^5 (Matern-3/2, Poisson), after one; on a
    daily grid and on jittered days (each step's transition computed once a run)."""

    number = 1
    repeat = (1, 5, 30.0)
    params = ["regular", "irregular"]
    param_names = ["times"]

    def setup(self, times):
        self.t, self.y = _counts(100_000)
        if times == "irregular":
            self.t = self.t + np.random.default_rng(1).uniform(-0.45, 0.45, self.t.size)
        self.kernel, self.lik = Matern32(1.0, 30.0), Poisson()
        fastep.markov_ep(self.t[:1000], self.y[:1000], self.kernel, self.lik, max_iter=1,
                         tol=0.0)

    def time_four_iterations(self, times):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", fastep.ConvergenceWarning)
            fastep.markov_ep(self.t, self.y, self.kernel, self.lik, max_iter=4, tol=0.0)


class MarkovRegressorFit:
    """EPGaussianProcessRegressor(inference='markov') on 10,000 daily counts, ML-II of a
    Matern-3/2 + Matern-1/2 kernel included."""

    number = 1
    repeat = (1, 3, 60.0)
    timeout = 300

    def setup(self):
        t, self.y = _counts(10_000)
        self.X = t[:, None]

    def time_fit(self):
        fastep.EPGaussianProcessRegressor(Matern32(1.0, 30.0) + Matern12(0.3, 3.0),
                                          likelihood="poisson", inference="markov",
                                          random_state=0).fit(self.X, self.y)
