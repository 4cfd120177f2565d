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


class DigitsFit:
    """What a user waits for on a real table: ``EPGaussianProcessClassifier()`` on
    scikit-learn's digits (standardised, 70/30 stratified split, ``random_state=0``: 1,257
    rows, 10 one-vs-rest problems), serial and with ``n_jobs=-1``; ``track_`` of the
    evidence evaluations, the EP sweeps per evaluation, and the held-out log loss
    (``scripts/fit_time.py`` compares against scikit-learn and gradient boosting)."""

    params = ([None, -1],)
    param_names = ["n_jobs"]
    number = 1
    repeat = (1, 2, 600.0)
    timeout = 1800

    def setup(self, n_jobs):
        from sklearn.datasets import load_digits
        from sklearn.model_selection import train_test_split
        from sklearn.preprocessing import StandardScaler
        X, y = load_digits(return_X_y=True)
        Xtr, Xte, self.ytr, self.yte = train_test_split(X, y, test_size=0.3, stratify=y,
                                                        random_state=0)
        scaler = StandardScaler().fit(Xtr)
        self.Xtr, self.Xte = scaler.transform(Xtr), scaler.transform(Xte)
        fit(self.Xtr[:100], self.ytr[:100] % 2)                # compile / load the cache

    def _fit(self, n_jobs):
        log = logging.getLogger("fastep")
        steps, level = _Steps(), log.level
        log.addHandler(steps)
        log.setLevel(logging.INFO)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", fastep.ConvergenceWarning)
                clf = fastep.EPGaussianProcessClassifier(n_jobs=n_jobs).fit(self.Xtr, self.ytr)
        finally:
            log.removeHandler(steps)
            log.setLevel(level)
        return clf, steps

    def time_fit(self, n_jobs):
        self._fit(n_jobs)

    def track_evaluations(self, n_jobs):
        return self._fit(n_jobs)[1].evaluations

    def track_sweeps_per_evaluation(self, n_jobs):
        steps = self._fit(n_jobs)[1]
        return steps.sweeps / max(1, steps.evaluations)

    def track_log_loss(self, n_jobs):
        from sklearn.metrics import log_loss
        return log_loss(self.yte, self._fit(n_jobs)[0].predict_proba(self.Xte))
