"""asv benchmarks for fastep: dense EP fits, Gram matrices, prediction, tilted moments,
import time, peak memory and the scikit-learn-style classifier.

Every ``setup`` builds seeded synthetic data (X ~ N(0, I_3), probit labels) and calls the
compiled code once on a small problem, so JIT compilation is never timed.

Run from ``asv_benchmarks/``; against the working tree, without building environments::

    ASV_PYTHONPATH=$(git rev-parse --show-toplevel) asv run --python=same --quick --show-stderr

(asv drops PYTHONPATH; ASV_PYTHONPATH is its replacement.  With fastep installed, e.g.
``pip install -e ..``, leave it out.)  Across commits: ``asv continuous``.
"""
import os
import warnings

import numpy as np

import fastep
from fastep.kernels import RBF
from fastep.likelihoods import Logistic, Probit


def make_data(n, d=3, seed=0):
    """X ~ N(0, I_d); y = sign(f(X) + N(0, 1)) in {-1, +1} (as in scripts/ep_floor.py)."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    f = np.sin(2.0 * X[:, 0]) + X[:, 1] * X[:, 2]
    y = np.where(f + rng.standard_normal(n) > 0.0, 1.0, -1.0)
    return X, y


def fit(K, y, method):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", fastep.ConvergenceWarning)
        return fastep.ep(K, y, Probit(), method=method)


def warm_up():
    """Compile (or load from the numba cache) every kernel a fit and prediction use."""
    X, y = make_data(50, seed=1)
    K = RBF(1.0, 1.0)(X)
    for method in ("parallel", "sequential"):
        fit(K, y, method).predict_latent(K[:, :5], np.ones(5))


class EPFit:
    """Converged dense EP, probit likelihood, fixed RBF(1, 1) hyperparameters."""

    params = (["parallel", "sequential"], [500, 1000, 2000, 4000])
    param_names = ["method", "n"]
    number = 1
    repeat = (1, 5, 30.0)
    timeout = 600

    def setup(self, method, n):
        X, self.y = make_data(n)
        self.K = RBF(1.0, 1.0)(X)
        warm_up()

    def time_fit(self, method, n):
        fit(self.K, self.y, method)


class FactorAndInverse:
    """What a parallel sweep's refresh factors and inverts, B = I + K (RBF(1, 1) on the
    seeded inputs, n x n): fastep's recursive factor-and-invert
    (``fastep._linalg.cholesky_inverse_inplace``) against LAPACK's ``dpotrf`` +
    ``dtrtri`` on the same matrix, in the same run (their ratio is the recursion's gain;
    ``scripts/ep_floor.py`` prints it)."""

    params = ([1000, 2000, 4000],)
    param_names = ["n"]
    number = 1
    repeat = (3, 10, 30.0)

    def setup(self, n):
        X, _ = make_data(n)
        self.B = np.asfortranarray(RBF(1.0, 1.0)(X) + np.eye(n))

    def time_recursive(self, n):
        from fastep._linalg import cholesky_inverse_inplace
        cholesky_inverse_inplace(self.B.copy(order="F"))

    def time_lapack(self, n):
        from scipy.linalg import lapack
        L = lapack.dpotrf(self.B.copy(order="F"), lower=1, overwrite_a=1, clean=0)[0]
        lapack.dtrtri(L, lower=1, overwrite_c=1)


class EPConvergence:
    """Log evidence and sweep count of the fits timed in :class:`EPFit` (computed once)."""

    params = EPFit.params
    param_names = EPFit.param_names
    timeout = 900

    def setup_cache(self):
        out = {}
        for n in self.params[1]:
            X, y = make_data(n)
            K = RBF(1.0, 1.0)(X)
            for method in self.params[0]:
                res = fit(K, y, method)
                out[method, n] = (res.log_marginal_likelihood, res.n_iter)
        return out

    def track_log_marginal_likelihood(self, cache, method, n):
        return cache[method, n][0]

    track_log_marginal_likelihood.unit = "nats"

    def track_sweeps(self, cache, method, n):
        return cache[method, n][1]

    track_sweeps.unit = "sweeps"


class AdaptiveDampingSweeps:
    """Sweeps of adaptive parallel EP where its step must shrink and grow back (fastep
    0.1's rule, which never let it grow back, took 1.5-4x the sweeps on such problems:
    ``scripts/ep_floor.py damping``): Student-t with 15% gross outliers (n = 200) and
    logistic at kernel variance 100."""

    params = (["student-t", "logistic-variance-100"],)
    param_names = ["problem"]
    timeout = 300

    def setup_cache(self):
        from fastep.likelihoods import StudentT
        rng = np.random.default_rng(2)
        x = rng.uniform(-3, 3, 200)
        y = 0.5 * np.sin(2.7 * x) + 0.4 * x + 0.1 * rng.standard_normal(200)
        gross = rng.random(200) < 0.15
        y[gross] += rng.standard_normal(gross.sum())
        X, t = make_data(1000)
        cases = {"student-t": (RBF(1.5, 1.0)(x[:, None]), y, StudentT(1.2, 0.07), 1e-6),
                 "logistic-variance-100": (RBF(100.0, 1.0)(X), t, Logistic(), 1e-6)}
        out = {}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", fastep.ConvergenceWarning)
            for name, (K, y_, lik, tol) in cases.items():
                K = K + 1e-8 * np.eye(K.shape[0])
                out[name] = fastep.ep(K, y_, lik, method="parallel", tol=tol,
                                      max_iter=2000).n_iter
        return out

    def track_sweeps(self, cache, problem):
        return cache[problem]

    track_sweeps.unit = "sweeps"


class Kernels:
    """ARD RBF Gram matrix and the contraction sum_jk G_jk dK_jk/dtheta."""

    params = [1000, 4000]
    param_names = ["n"]

    def setup(self, n):
        self.X, _ = make_data(n)
        self.kernel = RBF(1.0, lengthscale=[0.5, 1.0, 2.0])
        G = np.random.default_rng(2).standard_normal((n, n))
        self.G = G + G.T
        self.kernel.gradient_contract(self.X[:10], self.G[:10, :10])

    def time_gram(self, n):
        self.kernel(self.X)

    def time_gradient_contract(self, n):
        self.kernel.gradient_contract(self.X, self.G)


class Predict:
    """Latent predictive mean and variance at 10,000 test points, n = 2000 training points."""

    timeout = 300

    def setup(self):
        X, y = make_data(2000)
        kernel = RBF(1.0, 1.0)
        warm_up()
        self.res = fit(kernel(X), y, "parallel")
        Xs, _ = make_data(10_000, seed=3)
        self.k_cross = kernel(X, Xs)
        self.k_diag = kernel.diag(Xs)

    def time_predict_latent(self):
        self.res.predict_latent(self.k_cross, self.k_diag)


class Tilted:
    """Vectorised tilted moments: closed-form probit (10^6 sites), Gauss-Hermite logistic (10^5)."""

    def setup(self):
        rng = np.random.default_rng(4)
        self.y = np.where(rng.random(10**6) < 0.5, -1.0, 1.0)
        self.mu = 3.0 * rng.standard_normal(10**6)
        self.var = rng.uniform(0.01, 10.0, 10**6)
        self.probit, self.logistic = Probit(), Logistic()
        self.probit.tilted(self.y[:10], self.mu[:10], self.var[:10])
        self.logistic.tilted(self.y[:10], self.mu[:10], self.var[:10])

    def time_probit_1e6(self):
        self.probit.tilted(self.y, self.mu, self.var)

    def time_logistic_1e5(self):
        self.logistic.tilted(self.y[:10**5], self.mu[:10**5], self.var[:10**5])


def timeraw_import_fastep():
    """``import fastep`` in a fresh interpreter (no JIT work may happen at import).

    The untimed setup puts this fastep first on sys.path (the working tree under
    ``--python=same``, site-packages in an asv virtualenv).
    """
    root = os.path.dirname(os.path.dirname(os.path.abspath(fastep.__file__)))
    return "import fastep", f"import sys; sys.path.insert(0, {root!r})"


def timeraw_first_fit():
    """``import fastep`` and a first classifier fit (kernel learnt, n = 200) in a fresh
    interpreter: what a CLI call or a new worker waits for, the estimators' imports and
    the compiled kernels' cache loads included (the untimed setup fills the cache)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(fastep.__file__)))
    setup = f"import sys; sys.path.insert(0, {root!r})"
    stmt = """
import numpy as np
import fastep
rng = np.random.default_rng(0)
X = rng.normal(size=(200, 2))
y = (X[:, 0] + 0.3 * rng.normal(size=200) > 0).astype(int)
fastep.EPGaussianProcessClassifier().fit(X, y)
"""
    import subprocess
    import sys
    subprocess.run([sys.executable, "-c", setup + "\n" + stmt], check=True)   # cache filled
    return stmt, setup


class PeakMemory:
    """Peak resident memory of a parallel EP fit at n = 2000 (K itself is 32 MB)."""

    timeout = 300

    def setup(self):
        X, self.y = make_data(2000)
        self.K = RBF(1.0, 1.0)(X)
        warm_up()

    def peakmem_parallel_fit(self):
        fit(self.K, self.y, "parallel")


class Classifier:
    """EPGaussianProcessClassifier.fit with fixed hyperparameters (optimizer=None), n = 500."""

    timeout = 300

    def setup(self):
        try:
            from fastep import EPGaussianProcessClassifier
        except ImportError:
            raise NotImplementedError("fastep.EPGaussianProcessClassifier is not available")
        self.X, y = make_data(500)
        self.y = (y > 0).astype(int)
        self.make = lambda: EPGaussianProcessClassifier(RBF(1.0, 1.0), optimizer=None)
        self.make().fit(self.X[:50], self.y[:50])

    def time_fit(self):
        self.make().fit(self.X, self.y)
