"""asv benchmarks of the CUDA backend (device="cuda"); skipped without a usable GPU.

Every ``setup`` raises NotImplementedError (asv's "skip") unless a CUDA GPU, numba's CUDA
target and CuPy are usable (``fastep.backend.resolve("cuda")``; the CUDA simulator does
not count).  Data as in bench_ep.py; the first call in ``setup`` compiles the kernels, so
JIT time is never timed.  Every timed call ends with its results on the host (the
drivers return NumPy arrays) or with an explicit device synchronisation.
"""
import warnings

import numpy as np

import fastep
from fastep.kernels import RBF
from fastep.likelihoods import Logistic, Probit



def make_data(n, d=3, seed=0):
    """X ~ N(0, I_d); y = sign(f(X) + N(0, 1)) in {-1, +1} (as in bench_ep.py)."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    f = np.sin(2.0 * X[:, 0]) + X[:, 1] * X[:, 2]
    return X, np.where(f + rng.standard_normal(n) > 0.0, 1.0, -1.0)


def _gpu():
    """The CUDA backend (CuPy), or NotImplementedError: asv then skips the benchmark."""
    try:
        import fastep.cuda as fc
        from fastep.backend import resolve
        if fc.simulator_enabled():
            raise NotImplementedError("the CUDA simulator is not a GPU")
        return resolve("cuda")
    except NotImplementedError:
        raise
    except Exception as exc:
        raise NotImplementedError(f"no usable CUDA GPU: {exc}") from None


def _sync(be):
    be.xp.cuda.Device().synchronize()


def _ep(be, K, y, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", fastep.ConvergenceWarning)
        return fastep.ep(K, y, Probit(), check_psd=False, device=be, **kw)


class GPUDenseEP:
    """Dense parallel EP on the GPU: converged fit and one sweep, and the cuSOLVER floor."""

    params = [2000, 8000, 20000]
    param_names = ["n"]
    number = 1
    repeat = (1, 3, 60.0)
    timeout = 900

    def setup(self, n):
        self.be = _gpu()
        X, self.y = make_data(n)
        self.K = RBF(1.0, 1.0)(X, backend=self.be)
        self.A = self.K + self.be.xp.eye(n)
        _ep(self.be, self.K, self.y, max_iter=2)

    def time_fit(self, n):
        _ep(self.be, self.K, self.y)

    def time_two_sweeps(self, n):
        _ep(self.be, self.K, self.y, max_iter=2, tol=1e-300)

    def time_cholesky_floor(self, n):
        self.be.cholesky(self.A, "K + I")
        _sync(self.be)


class GPUSparseEP:
    """Sparse Power EP on the GPU, m = 256 inducing points, converged fit."""

    params = [100_000, 1_000_000]
    param_names = ["n"]
    number = 1
    repeat = (1, 3, 60.0)
    timeout = 900

    def setup(self, n):
        self.be = _gpu()
        self.X, self.y = make_data(n)
        self.Z = self.X[np.linspace(0, n - 1, 256).astype(int)]
        fastep.sparse_ep(RBF(1.0, 1.0), self.Z, self.X[:1000], self.y[:1000], Probit(),
                         max_iter=2, device=self.be)

    def time_fit(self, n):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", fastep.ConvergenceWarning)
            fastep.sparse_ep(RBF(1.0, 1.0), self.Z, self.X, self.y, Probit(), device=self.be)


class GPUKernels:
    """Gram matrix and gradient contraction (ARD RBF), tilted moments on the device."""

    params = [4000, 16000]
    param_names = ["n"]
    timeout = 600

    def setup(self, n):
        self.be = _gpu()
        xp = self.be.xp
        X, _ = make_data(n)
        self.X = self.be.asarray(X)
        self.kernel = RBF(1.0, lengthscale=[0.5, 1.0, 2.0])
        self.G = xp.asarray(np.random.default_rng(2).standard_normal((n, n)))
        self.kernel.gradient_contract(self.X[:10], self.G[:10, :10], backend=self.be)
        rng = np.random.default_rng(4)
        m = 10**6
        self.t_args = [self.be.asarray(a) for a in (np.where(rng.random(m) < 0.5, -1.0, 1.0),
                                                     np.zeros((m, 1)),
                                                     3.0 * rng.standard_normal(m),
                                                     rng.uniform(0.01, 10.0, m))]
        self.out = [xp.empty(m) for _ in range(3)]
        self.lik_params = self.be.asarray(np.zeros(1))
        self.probit, self.logistic = Probit(), Logistic()
        for lik in (self.probit, self.logistic):
            self._tilted(lik, 10)

    def _tilted(self, lik, m):
        from fastep.backend.cuda import kernels as ck
        y, extra, mu, var = (a[:m] for a in self.t_args)
        ck.tilted_batch(lik.scalar_tilted, y, extra, mu, var, 1.0, self.lik_params,
                        *(o[:m] for o in self.out))
        _sync(self.be)

    def time_gram(self, n):
        self.kernel(self.X, backend=self.be)
        _sync(self.be)

    def time_gradient_contract(self, n):
        self.kernel.gradient_contract(self.X, self.G, backend=self.be)

    def time_probit_tilted_1e6(self, n):
        self._tilted(self.probit, 10**6)

    def time_logistic_tilted_1e6(self, n):
        self._tilted(self.logistic, 10**6)


class GPURobustMax:
    """Robust-max Gauss-Hermite products on the device: S(x, j) for every class, and
    S(x_i, y_i) with its gradient; n points, J = 10 classes, 20 nodes (bench_gwi.py has
    the CPU twin at n = 10^5)."""

    params = [10**5, 10**6]
    param_names = ["n"]
    timeout = 600

    def setup(self, n):
        self.be = _gpu()
        from fastep._numerics import gauss_hermite
        from fastep.backend.cuda import kernels as ck
        xp, J, rng = self.be.xp, 10, np.random.default_rng(5)
        self.ck = ck
        self.args = [self.be.asarray(a) for a in (rng.normal(0.0, 2.0, (n, J)),
                                                   rng.uniform(0.1, 3.0, (n, J)),
                                                   *gauss_hermite(20))]
        self.labels = self.be.xp.asarray(rng.integers(0, J, n), dtype=np.int64)
        self.out = xp.empty((n, J))
        self.grad = [xp.empty(n), xp.empty((n, J)), xp.empty((n, J))]
        self.time_prob_largest(n)
        self.time_prob_largest_grad(n)

    def time_prob_largest(self, n):
        self.ck.prob_largest_all(*self.args, self.out)
        _sync(self.be)

    def time_prob_largest_grad(self, n):
        mean, var, nodes, weights = self.args
        self.ck.prob_largest_grad(mean, var, self.labels, nodes, weights, *self.grad)
        _sync(self.be)
