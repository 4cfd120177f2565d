"""Tobit EP fits at n in {1000, 4000} with 30% of the outputs censored."""
import warnings

import numpy as np

import fastep
from fastep.kernels import RBF
from fastep.likelihoods import Tobit


class TobitEP:
    params = [1000, 4000]
    param_names = ["n"]
    timeout = 300

    def setup(self, n):
        rng = np.random.default_rng(0)
        X = rng.normal(size=(n, 3))
        f = np.sin(2 * X[:, 0]) + 0.5 * X[:, 1]
        y = f + 0.3 * rng.normal(size=n)
        self.limit = np.quantile(y, 0.3)
        self.y = np.maximum(y, self.limit)
        self.K = RBF(1.0, 1.0)(X)
        self.lik = Tobit(0.09, lower=self.limit)
        fastep.precompile()
        fastep.ep(self.K[:50, :50], self.y[:50], Tobit(0.09, lower=self.limit), max_iter=2)

    def _fit(self):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return fastep.ep(self.K, self.y, self.lik, check_psd=False)

    def time_fit(self, n):
        self._fit()

    def track_sweeps(self, n):
        return self._fit().n_iter

    track_sweeps.unit = "sweeps"
