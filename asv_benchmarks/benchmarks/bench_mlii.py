"""asv benchmarks for ML-II fits (type-II maximum likelihood of the kernel), dense and
sparse, with the default optimizer: time, and ``track_`` of the evidence evaluations and
the EP sweeps they took (from the estimators' "ML-II step" log records).

Data as in ``scripts/mlii_convergence.py``: X ~ N(0, I_3), noisy labels of a smooth f.
"""
import contextlib
import functools
import importlib
import inspect
import logging
import re
import time
import warnings

import numpy as np

import fastep
from fastep.backend import resolve
from fastep.kernels import RBF
from fastep.likelihoods import Probit


def make_data(n, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    f = np.sin(2.0 * X[:, 0]) + 0.5 * X[:, 1] - 0.3 * X[:, 2] ** 2
    return X, (f + 0.3 * rng.normal(size=n) > 0).astype(int)


class Steps(logging.Handler):
    """Counts ML-II evaluations and the EP sweeps they report, from the ``fastep``
    logger's "ML-II step" records.  Those on the subsamples of a staged fit
    (``fastep.models._mlii.staged_start``: from its "ML-II on subsamples of ..." record to
    the one of its last subsample, curvature evaluations included) count also as
    ``stage_evaluations`` and ``stage_sweeps``; the others, on the full data, are kept
    as ``full``: (step, sweeps, time) tuples (the records of ``n_jobs`` worker processes
    come back one job after another, ``fastep.models._jobs``)."""

    STAGES = re.compile(r"ML-II on subsamples of ([\d, ]+) rows first")

    def __init__(self):
        super().__init__(logging.INFO)
        self.evaluations = self.sweeps = self.stage_evaluations = self.stage_sweeps = 0
        self.full, self._last_stage = [], None

    def emit(self, record):
        msg = record.getMessage()
        m = self.STAGES.match(msg)
        if m:
            self._last_stage = f"ML-II on a subsample of {m.group(1).split(', ')[-1]} rows"
        elif self._last_stage and msg.startswith(self._last_stage):
            self._last_stage = None
        elif msg.startswith("ML-II step"):
            sweeps = int(msg.split("after ")[1].split()[0]) if "after" in msg else 0
            self.evaluations += 1
            self.sweeps += sweeps
            if self._last_stage:
                self.stage_evaluations += 1
                self.stage_sweeps += sweeps
            else:
                step = msg.split()[2].rstrip(":")
                self.full.append((int(step) if step.isdigit() else 0, sweeps,
                                  record.created))

    @classmethod
    @contextlib.contextmanager
    def recording(cls):
        """A new counter on the ``fastep`` logger (at INFO) for the block."""
        log, steps = logging.getLogger("fastep"), cls()
        level = log.level
        log.addHandler(steps)
        log.setLevel(logging.INFO)
        try:
            yield steps
        finally:
            log.removeHandler(steps)
            log.setLevel(level)

    @property
    def full_evaluations(self):
        return self.evaluations - self.stage_evaluations

    @property
    def full_sweeps(self):
        return self.sweeps - self.stage_sweeps

    def full_data(self):
        """(evaluations on the full data, their EP sweeps per evaluation)."""
        return self.full_evaluations, self.full_sweeps / max(1, self.full_evaluations)

    def later_seconds(self):
        """Seconds of each full-data evaluation after the first of its run (from the
        record before it)."""
        return [b[2] - a[2] for a, b in zip(self.full, self.full[1:]) if b[0] > 1]

    def counts(self):
        """"evaluations N [+ M on subsamples], EP sweeps S [+ T]" for a report line."""
        n, sweeps = self.full_evaluations, self.full_sweeps
        if not self.stage_evaluations:
            return f"evaluations {n}, EP sweeps {sweeps}"
        return (f"evaluations {n} + {self.stage_evaluations} on subsamples, EP sweeps "
                f"{sweeps} + {self.stage_sweeps}")


def counted_fit(X, y, kernel=None, **params):
    """``(fitted EPGaussianProcessClassifier, Steps)``, ConvergenceWarnings silenced."""
    with Steps.recording() as steps, warnings.catch_warnings():
        warnings.simplefilter("ignore", fastep.ConvergenceWarning)
        clf = fastep.EPGaussianProcessClassifier(kernel, **params).fit(X, y)
    return clf, steps


def fit(X, y, **params):
    return counted_fit(X, y, RBF(), **params)[1]


class _Counts:
    """``track_`` of one cached fit's (evaluations on the full data, their sweeps per
    evaluation, quality, evaluations on subsamples): the subsample stages' evaluations,
    each a small fraction of one on the full data, apart (:meth:`Steps.full_data`;
    before 0.3's dense stages and the sparse fit's tracks of 2026-11-27 they counted in
    ``track_evaluations``)."""

    def track_evaluations(self, counts):
        return counts[0]

    def track_sweeps_per_evaluation(self, counts):
        return counts[1]

    def track_subsample_evaluations(self, counts):
        return counts[3]


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
    evidence evaluations, the EP sweeps per evaluation, and the held-out log loss in
    :class:`DigitsFitCounts` (``scripts/fit_time.py`` compares against scikit-learn and
    gradient boosting)."""

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
        return counted_fit(self.Xtr, self.ytr, n_jobs=n_jobs)

    def time_fit(self, n_jobs):
        self._fit(n_jobs)


class DigitsFitCounts(_Counts):
    """The counts and the held-out log loss of :class:`DigitsFit`'s default (serial) fit,
    from one fit (``setup_cache``)."""

    timeout = 1800

    def setup_cache(self):
        bench = DigitsFit()
        bench.setup(None)
        clf, steps = bench._fit(None)
        from sklearn.metrics import log_loss
        return steps.full_data() + (log_loss(bench.yte, clf.predict_proba(bench.Xte)),
                                    steps.stage_evaluations)

    def track_log_loss(self, counts):
        return counts[2]

def rff_probit_data(n, seed, n_features=2000):
    """The large-n problem of the fit-time issue: X ~ N(0, I_4); f drawn from GP(0, 2.0
    RBF(lengthscales (0.6, 1.2, 2.5, 10))) by ``n_features`` random Fourier features (their
    frequencies and phases from seed 12345, so that every seed's rows share one f);
    y = sign(f + N(0, 1)) in {0, 1}."""
    feats = np.random.default_rng(12345)
    omega = feats.normal(size=(n_features, 4)) / np.array([0.6, 1.2, 2.5, 10.0])
    phase = feats.uniform(0.0, 2.0 * np.pi, n_features)
    weights = feats.normal(size=n_features)
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 4))
    f = np.empty(n)
    for i in range(0, n, 20000):                      # 20000 x 2000 blocks (320 MB)
        f[i:i + 20000] = np.sqrt(2.0 * 2.0 / n_features) * (
            np.cos(X[i:i + 20000] @ omega.T + phase) @ weights)
    return X, (f + rng.normal(size=n) > 0).astype(int)


class LargeNFit:
    """The default sparse classifier fit with a learnt ARD kernel at n = 10^5 (m = 256
    inducing inputs drawn from X and kept fixed, starting kernel RBF(1, [1, 1, 1, 1])):
    its time (:class:`LargeNFitCounts` tracks its evidence evaluations, EP sweeps per
    evaluation and test NLPD on 20,000 rows of another seed)."""

    params = ([100_000],)
    param_names = ["n"]
    number = 1
    repeat = (1, 1, 1800.0)
    timeout = 3600

    def setup(self, n):
        self.X, self.y = rff_probit_data(n, seed=0)
        self.Xt, self.yt = rff_probit_data(20000, seed=1)
        self.Z = self.X[np.random.default_rng(1).choice(n, 256, replace=False)]
        self._fit(self.X[:2000], self.y[:2000], self.Z[:64])    # compile / load the cache

    def _fit(self, X, y, Z):
        return counted_fit(X, y, RBF(1.0, [1.0, 1.0, 1.0, 1.0]), inducing_points=Z)

    def time_fit(self, n):
        self._fit(self.X, self.y, self.Z)



class LargeNFitCounts(_Counts):
    """The counts and the test NLPD of :class:`LargeNFit`, from one fit (``setup_cache``)."""

    timeout = 3600

    def setup_cache(self):
        bench = LargeNFit()
        bench.setup(100_000)
        clf, steps = bench._fit(bench.X, bench.y, bench.Z)
        p = clf.predict_proba(bench.Xt)[:, 1]
        p = np.clip(np.where(bench.yt == 1, p, 1.0 - p), 1e-300, 1.0)
        return steps.full_data() + (float(-np.mean(np.log(p))), steps.stage_evaluations)

    def track_test_nlpd(self, counts):
        return counts[2]


# --- one sparse ML-II evaluation, part by part (scripts/sparse_scaling.py evaluation) -------
_run = importlib.import_module("fastep.inference.sparse_ep._run")
_local = importlib.import_module("fastep.inference.sparse_ep._local")

KERNEL_A = RBF(4.25, [0.728, 1.251, 2.543, 15.78])      # near the optimum at n >= 10^5
KERNEL_B = RBF(4.30, [0.740, 1.260, 2.500, 15.00])


def seconds(fn):
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def pass_seconds(X, y, Z, device="cpu"):
    """Seconds of one parallel sparse EP pass over ``(X, y)`` with inducing inputs ``Z``
    (probit, ``KERNEL_B``) on ``device``: (6 sweeps - 2 sweeps) / 4, so that the Gram
    cache's first pass and the setup cancel."""
    be = resolve(device)

    def run(sweeps):                 # a fixed number of sweeps: not converged, on purpose
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", fastep.ConvergenceWarning)
            return _run.run_sparse_ep(be, KERNEL_B, Z, X, y, Probit(), 1.0, None, 1e-12,
                                      sweeps, method="parallel")
    t2, _ = seconds(lambda: run(2))
    t6, _ = seconds(lambda: run(6))
    return (t6 - t2) / 4


def evaluation_parts(X, y, Z, start, parts=False):
    """Seconds of one sparse ML-II evaluation's parts at ``KERNEL_B`` warm-started from
    ``start`` (a converged result at ``KERNEL_A``), and of one parallel pass at the same n
    (``scripts/sparse_scaling.py evaluation`` prints them; ``parts``: also time the warm pass)."""
    be, lik = resolve("cpu"), Probit()

    def run(kernel, sweeps, tol=1e-12, **kw):
        return _run.run_sparse_ep(be, kernel, Z, X, y, lik, 1.0, None, tol, sweeps, **kw)
    one_pass = pass_seconds(X, y, Z)
    warm = []
    if parts:                                    # time the warm pass inside the run
        original = _local._LocalSites.warm_pass

        @functools.wraps(original)
        def timed(self, build):
            t, out = seconds(lambda: original(self, build))
            warm.append(t)
            return out
        _local._LocalSites.warm_pass = timed
    # keep_gram as ML-II asks for it (absent before it existed: the script also runs there)
    keep = {"keep_gram": True} if "keep_gram" in inspect.signature(
        _run.run_sparse_ep).parameters else {}
    try:
        t_ep, res = seconds(lambda: run(KERNEL_B, 100, tol=1e-4, site_tau=start.site_tau,
                                        site_nu=start.site_nu, **keep))
    finally:
        if parts:
            _local._LocalSites.warm_pass = original
    grad = functools.partial(_run.sparse_ep_gradient, res, KERNEL_B, X, y, lik, inputs=False)
    t_kept, _ = seconds(grad)
    res._gram = res._first_pass = None           # (the gradient drops them itself now)
    t_computed, _ = seconds(grad)
    return {"pass": one_pass, "EP": t_ep, "EP sweeps": res.n_iter,
            "warm pass": warm[0] if warm else np.nan, "gradient": t_kept,
            "gradient, kernel recomputed": t_computed}


class SparseEvaluation:
    """One ML-II evidence evaluation of the large-n problem at n = 10^5 (m = 256), near the
    optimum, in parallel passes timed in the same run: EP warm-started from a nearby
    kernel's sites plus the gradient (:func:`evaluation_parts`)."""

    timeout = 1800

    def setup_cache(self):
        X, y01 = rff_probit_data(100_000, seed=0)
        y = 2.0 * y01 - 1.0
        Z = X[np.random.default_rng(1).choice(X.shape[0], 256, replace=False)]
        start = _run.run_sparse_ep(resolve("cpu"), KERNEL_A, Z, X, y, Probit(), 1.0, None,
                                   1e-6, 100)
        return evaluation_parts(X, y, Z, start)

    def track_evaluation_passes(self, parts):
        return (parts["EP"] + parts["gradient"]) / parts["pass"]

    def track_gradient_passes(self, parts):
        return parts["gradient"] / parts["pass"]
