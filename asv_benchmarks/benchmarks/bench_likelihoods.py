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


def best_seconds(fn, repeats=5):
    """The shortest of ``repeats`` timed calls of ``fn`` (for ratios taken in one setup)."""
    import time
    best = np.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


class TiltedOverProbit:
    """Per-site cost of the tilted moments over probit's, on the same 20,000 ordinary
    cavities (means N(0, 1), variances U(0.2, 2)), best of five each, in one setup:
    the fast path's ratio (``scripts/tilted_cost.py`` prints the whole table)."""

    params = ["logistic", "poisson", "negative_binomial", "binomial", "student_t",
              "weibull", "log_logistic", "log_normal"]
    param_names = ["likelihood"]
    number = 1
    repeat = (1, 3, 30.0)

    def setup(self, name):
        from fastep import likelihoods as fl
        rng = np.random.default_rng(3)
        n = 20_000
        f, self.mu, self.var = rng.standard_normal(n), rng.standard_normal(n), \
            rng.uniform(0.2, 2.0, n)
        sign = np.where(rng.uniform(size=n) < 1.0 / (1.0 + np.exp(-f)), 1.0, -1.0)
        counts = rng.poisson(np.exp(f)).astype(float)
        times = np.exp(f + 0.7 * rng.gumbel(size=n))
        event = (rng.uniform(size=n) < 0.7).astype(float)[:, None]
        trials = np.full((n, 1), 10.0)
        cases = {"logistic": (fl.Logistic(), sign, None),
                 "poisson": (fl.Poisson(), counts, None),
                 "negative_binomial": (fl.NegativeBinomial(2.0), counts, None),
                 "binomial": (fl.Binomial(), np.minimum(counts, 10.0), trials),
                 "student_t": (fl.StudentT(4.0, 0.5), f + 0.5 * rng.standard_t(4.0, n), None),
                 "weibull": (fl.Weibull(1.5), times, event),
                 "log_logistic": (fl.LogLogistic(2.0), times, event),
                 "log_normal": (fl.LogNormal(0.7), times, event)}
        self.lik, self.y, self.extra = cases[name]
        self.probit, self.sign = fl.Probit(), sign
        self.lik.tilted(self.y, self.mu, self.var, extra=self.extra)
        self.probit.tilted(sign, self.mu, self.var)

    def time_tilted(self, name):
        self.lik.tilted(self.y, self.mu, self.var, extra=self.extra)

    def track_ratio_to_probit(self, name):
        mine = best_seconds(lambda: self.lik.tilted(self.y, self.mu, self.var, extra=self.extra))
        return mine / best_seconds(lambda: self.probit.tilted(self.sign, self.mu, self.var))

    track_ratio_to_probit.unit = "ratio"


class SparseSweepOverProbit:
    """One parallel sparse EP sweep (n = 100,000, m = 128, the worker threads sharing the
    chunks) of a likelihood without a closed form over a probit one, in one setup
    (``scripts/tilted_cost.py --sweep`` prints the same; the serial site loop lost the GIL
    in 0.3: Poisson 1.56x -> 1.40x)."""

    params = ["logistic", "poisson"]
    param_names = ["likelihood"]
    number = 1
    repeat = (1, 3, 60.0)
    timeout = 300

    def setup(self, name):
        from fastep import likelihoods as fl
        rng = np.random.default_rng(0)
        n, m = 100_000, 128
        self.X = rng.standard_normal((n, 4))
        f = np.sin(self.X[:, 0]) + 0.5 * self.X[:, 1] * self.X[:, 2]
        self.Z = self.X[rng.choice(n, m, replace=False)]
        probit = (fl.Probit(), np.where(f + rng.standard_normal(n) > 0, 1.0, -1.0))
        other = {"logistic": (fl.Logistic(), np.where(
                     rng.uniform(size=n) < 1 / (1 + np.exp(-f)), 1.0, -1.0)),
                 "poisson": (fl.Poisson(), rng.poisson(np.exp(f)).astype(float))}[name]
        self.cases = (probit, other)
        for lik, y in self.cases:
            self._run(lik, y, 1)

    def _run(self, lik, y, iters):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", fastep.ConvergenceWarning)
            fastep.sparse_ep(RBF(1.0, 1.0), self.Z, self.X, y, lik, max_iter=iters,
                             tol=1e-300, schedule="parallel")

    def _sweep(self, lik, y):
        """Seconds of one sweep: three runs' less one run's, over two."""
        return (best_seconds(lambda: self._run(lik, y, 3), 3)
                - best_seconds(lambda: self._run(lik, y, 1), 3)) / 2.0

    def track_ratio_to_probit(self, name):
        (probit, y_p), (lik, y) = self.cases
        return self._sweep(lik, y) / self._sweep(probit, y_p)

    track_ratio_to_probit.unit = "ratio"
