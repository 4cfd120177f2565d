"""asv benchmarks for ML-II fits (type-II maximum likelihood of the kernel), dense and
sparse, with the default optimizer: time, and ``track_`` of the evidence evaluations and
the EP sweeps they took (from the estimators' "ML-II step" log records).

Data as in ``scripts/mlii_convergence.py``: X ~ N(0, I_3), noisy labels of a smooth f.
"""
import logging
import warnings

import numpy as np

import fastep
from fastep.kernels import RBF


def make_data(n, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    f = np.sin(2.0 * X[:, 0]) + 0.5 * X[:, 1] - 0.3 * X[:, 2] ** 2
    return X, (f + 0.3 * rng.normal(size=n) > 0).astype(int)


class _Steps(logging.Handler):
    """Counts ML-II evaluations and the EP sweeps they report."""

    def __init__(self):
        super().__init__()
        self.evaluations = self.sweeps = 0

    def emit(self, record):
        msg = record.getMessage()
        if msg.startswith("ML-II step"):
            self.evaluations += 1
            if "after" in msg:
                self.sweeps += int(msg.split("after ")[1].split()[0])


def fit(X, y, **params):
    log = logging.getLogger("fastep")
    steps, level = _Steps(), log.level
    log.addHandler(steps)
    log.setLevel(logging.INFO)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", fastep.ConvergenceWarning)
            fastep.EPGaussianProcessClassifier(RBF(), **params).fit(X, y)
    finally:
        log.removeHandler(steps)
        log.setLevel(level)
    return steps


class MLIIFit:
    """A classifier fit with ML-II: dense at n = 500, sparse (m = 64) at n = 3000."""

    params = (["dense-500", "sparse-3000-m64"],)
    param_names = ["problem"]
    number = 1
    repeat = (1, 3, 60.0)
    timeout = 900

    def setup(self, problem):
        kind, n = problem.split("-")[:2]
        self.X, self.y = make_data(int(n))
        self.params = {"n_inducing": 64, "random_state": 0} if kind == "sparse" else {}
        fit(self.X[:100], self.y[:100], **self.params)          # compile / load the cache

    def time_fit(self, problem):
        fit(self.X, self.y, **self.params)

    def track_evaluations(self, problem):
        return fit(self.X, self.y, **self.params).evaluations

    def track_sweeps(self, problem):
        return fit(self.X, self.y, **self.params).sweeps
