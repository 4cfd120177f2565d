"""Multi-annotator GP classification (GPC-MA): fit time at n in {500, 2000}, R = 8."""
import warnings

import numpy as np

import fastep
from fastep.datasets import simulate_annotators
from fastep.kernels import RBF

SENS = [0.9, 0.9, 0.8, 0.4, 0.3, 0.4, 0.6, 0.5]
SPEC = [0.8, 0.9, 0.9, 0.4, 0.5, 0.5, 0.5, 0.4]


class MultiAnnotatorFit:
    params = [500, 2000]
    param_names = ["n"]
    timeout = 300

    def setup(self, n):
        rng = np.random.default_rng(0)
        self.X = rng.normal(size=(n, 3))
        z = (np.sin(2 * self.X[:, 0]) + self.X[:, 1] > 0).astype(int)
        self.Y = simulate_annotators(z, SENS, SPEC, random_state=0)
        self.z = z
        fastep.precompile()

    def _fit(self):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return fastep.MultiAnnotatorGPClassifier(RBF(1.0, 1.0), optimizer=None).fit(
                self.X, self.Y)

    def time_fit(self, n):
        self._fit()

    def time_probit_fit_same_data(self, n):
        fastep.EPGaussianProcessClassifier(RBF(1.0, 1.0), optimizer=None).fit(self.X, self.z)

    def track_sweeps(self, n):
        return self._fit().n_iter_

    track_sweeps.unit = "sweeps"
