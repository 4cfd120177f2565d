"""GPU (fastep.cuda) against CPU and against the cuSOLVER floor, printed as a table.

Seeded synthetic probit data, X ~ N(0, I_3), y = sign(sin(2 x_1) + x_2 x_3 + N(0, 1)),
kernel RBF(variance=1, lengthscale=1) (+ 1e-6 jitter for dense EP).  Rows:

* dense parallel EP, n in --dense (default 10k, 20k, 40k): a converged fit
  (``fastep.ep(K, y, Probit(), device=...)``, tol 1e-4, K already built on each device),
  one sweep ``(t(max_iter=6) - t(max_iter=2)) / 4``, and the floor: cuSOLVER Cholesky of
  K + I of the same n (``cupy.linalg.cholesky``), also with the n x n triangular solve
  of one posterior refresh (cuBLAS trsm); ratio sweep / Cholesky floor;
* sparse Power EP (alpha = 1), n in --sparse (default 1e6, 1e7), m = --m (256) inducing
  points on a grid of data rows: a converged fit;
* Gauss-Hermite products of the multiclass robust-max likelihood, n = --gh (1e6),
  J = 10, 20 nodes: S(x, j) for every class ("GH S(x,j)") and S(x_i, y_i) with its
  gradient ("GH grad"), kernel time on device arrays against the parallel CPU loops
  (columns "GPU fit s" and "CPU fit s").

CPU timings run only up to --cpu-max-dense / --cpu-max-sparse (they take minutes beyond).
GPU times are wall-clock with the device synchronised (every driver returns host arrays).
Acceptance targets of the issue: dense EP n = 40,000 <= 30 s, sparse n = 1e7 (m = 256)
<= 60 s on one H100, a sweep <= 2x the Cholesky floor.

    python scripts/gpu_bench.py [--dense 10000 20000 40000] [--sparse 1000000 10000000]
    NUMBA_ENABLE_CUDASIM=1 python scripts/gpu_bench.py --smoke   # code path only, tiny n
"""
import argparse
import statistics
import sys
import time
import warnings

import numpy as np

import fastep
from fastep.kernels import RBF
from fastep.likelihoods import Probit


def make_data(n, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 3))
    f = np.sin(2.0 * X[:, 0]) + X[:, 1] * X[:, 2]
    return X, np.where(f + rng.standard_normal(n) > 0.0, 1.0, -1.0)


def timed(fn, repeats=1):
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def quiet(fn):
    def run():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return fn()
    return run


class GPU:
    """The device side: the CUDA backend, with CuPy on a GPU or NumPy under the simulator
    (--smoke)."""

    def __init__(self, smoke):
        import fastep.cuda as fc
        from fastep.backend import resolve
        if smoke and not fc.simulator_enabled():
            sys.exit("--smoke needs NUMBA_ENABLE_CUDASIM=1 (set before Python starts)")
        self.be = resolve("cuda")
        self.name = self.be._la.name

    def sync(self):
        if self.name == "cupy":
            self.be.xp.cuda.Device().synchronize()

    def floor(self, Kd):
        xp, n = self.be.xp, Kd.shape[0]
        A = Kd + xp.eye(n)

        def chol():
            self.be.cholesky(A, "K + I")
            self.sync()

        def chol_trsm():
            L = self.be.cholesky(A, "K + I")
            self.be.solve_lower(L, Kd)
            self.sync()
        return chol, chol_trsm


def dense_row(gpu, n, cpu_max, repeats):
    """One table row; a function, so that the device matrices are freed on return."""
    X, y = make_data(n)
    lik = Probit()
    Kd = RBF(1.0, 1.0)(X, backend=gpu.be)
    Kd += 1e-6 * gpu.be.xp.eye(n)
    gpu.sync()

    def gpu_run(max_iter, tol=1e-4):
        return quiet(lambda: fastep.ep(Kd, y, lik, max_iter=max_iter, tol=tol,
                                       check_psd=False, device=gpu.be))
    gpu_run(2)()                                       # compile / warm up
    res = gpu_run(100)()
    t_fit = timed(gpu_run(100), repeats)
    t2, t6 = timed(gpu_run(2, 1e-300), repeats), timed(gpu_run(6, 1e-300), repeats)
    sweep = (t6 - t2) / 4
    chol, chol_trsm = gpu.floor(Kd)
    chol()
    f_chol, f_ref = timed(chol, repeats), timed(chol_trsm, repeats)
    cpu_fit = cpu_sweep = float("nan")
    if n <= cpu_max:
        K = RBF(1.0, 1.0)(X) + 1e-6 * np.eye(n)

        def cpu_run(max_iter, tol=1e-4):
            return quiet(lambda: fastep.ep(K, y, lik, max_iter=max_iter, tol=tol,
                                           check_psd=False))
        cpu_run(2)()
        cpu_fit = timed(cpu_run(100), repeats)
        cpu_sweep = (timed(cpu_run(6, 1e-300), repeats) - timed(cpu_run(2, 1e-300), repeats)) / 4
    return ("dense EP", n, "-", res.n_iter, t_fit, sweep, cpu_fit, cpu_sweep, f_chol, f_ref,
            sweep / f_chol)


def dense_rows(gpu, sizes, cpu_max, repeats):
    return [dense_row(gpu, n, cpu_max, repeats) for n in sizes]


def sparse_rows(gpu, sizes, m, cpu_max, repeats):
    rows = []
    for n in sizes:
        X, y = make_data(n)
        Z = X[np.linspace(0, n - 1, m).astype(int)]
        kernel, lik = RBF(1.0, 1.0), Probit()

        def gpu_run():
            return quiet(lambda: fastep.sparse_ep(kernel, Z, X, y, lik, device=gpu.be))()
        res = gpu_run()
        t_fit = timed(gpu_run, repeats)
        cpu_fit = float("nan")
        if n <= cpu_max:
            cpu_fit = timed(quiet(lambda: fastep.sparse_ep(kernel, Z, X, y, lik)), repeats)
        rows.append(("sparse EP", n, m, res.n_iter, t_fit, t_fit / max(res.n_iter, 1), cpu_fit,
                     float("nan"), float("nan"), float("nan"), float("nan")))
    return rows


def gh_rows(gpu, n, J, cpu_max, repeats):
    """Robust-max S(x, j) for all classes, and S(x_i, y_i) with its gradient: the CUDA
    kernels on device arrays against the compiled parallel CPU loops (20 nodes)."""
    from numba import cuda

    from fastep._numerics import gauss_hermite
    from fastep.cuda import kernels as ck
    from fastep.likelihoods import robustmax as rm
    rng = np.random.default_rng(0)
    mean, var = rng.normal(0.0, 2.0, (n, J)), rng.uniform(0.1, 3.0, (n, J))
    labels = rng.integers(0, J, n)
    nodes, weights = (np.array(a) for a in gauss_hermite(20))
    d_mean, d_var, d_nodes, d_weights, d_labels = (
        cuda.to_device(a) for a in (mean, var, nodes, weights, labels))
    out, s, dm, dv = (cuda.device_array(shape) for shape in ((n, J), n, (n, J), (n, J)))

    def gpu_all():
        ck.prob_largest_all(d_mean, d_var, d_nodes, d_weights, out)
        cuda.synchronize()

    def gpu_grad():
        ck.prob_largest_grad(d_mean, d_var, d_labels, d_nodes, d_weights, s, dm, dv)
        cuda.synchronize()

    h_out, h_s, h_dm, h_dv = np.empty((n, J)), np.empty(n), np.empty((n, J)), np.empty((n, J))
    rows = []
    for task, gpu_fn, cpu_fn in (
            ("GH S(x,j)", gpu_all, lambda: rm.prob_largest_all(mean, var, nodes, weights, h_out)),
            ("GH grad", gpu_grad, lambda: rm.prob_largest_grad(mean, var, labels, nodes,
                                                               weights, h_s, h_dm, h_dv))):
        gpu_fn()                                       # compile / warm up
        t_gpu = timed(gpu_fn, repeats)
        t_cpu = float("nan")
        if n <= cpu_max:
            cpu_fn()
            t_cpu = timed(cpu_fn, repeats)
        rows.append((task, n, J, "-", t_gpu, float("nan"), t_cpu, float("nan"), float("nan"),
                     float("nan"), float("nan")))
    return rows


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dense", type=int, nargs="*", default=[10_000, 20_000, 40_000])
    p.add_argument("--sparse", type=int, nargs="*", default=[1_000_000, 10_000_000])
    p.add_argument("--m", type=int, default=256)
    p.add_argument("--cpu-max-dense", type=int, default=10_000)
    p.add_argument("--cpu-max-sparse", type=int, default=1_000_000)
    p.add_argument("--gh", type=int, default=1_000_000, help="points for the GH products")
    p.add_argument("--cpu-max-gh", type=int, default=1_000_000)
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--smoke", action="store_true",
                   help="tiny sizes under the CUDA simulator: checks the script, times nothing")
    a = p.parse_args(argv)
    if a.smoke:
        a.dense, a.sparse, a.m = [48], [300], 8
        a.cpu_max_dense, a.cpu_max_sparse, a.gh, a.cpu_max_gh = 48, 300, 30, 30
        from fastep.cuda import kernels as ck
        ck.THREADS_PER_BLOCK, ck.THREADS_2D, ck.MAX_BLOCKS = 4, 2, 2
    gpu = GPU(a.smoke)
    rows = dense_rows(gpu, a.dense, a.cpu_max_dense, a.repeats)
    rows += sparse_rows(gpu, a.sparse, a.m, a.cpu_max_sparse, a.repeats)
    rows += gh_rows(gpu, a.gh, 10, a.cpu_max_gh, a.repeats)
    head = ("task", "n", "m/J", "sweeps", "GPU fit s", "GPU sweep s", "CPU fit s",
            "CPU sweep s", "chol floor s", "chol+trsm s", "sweep/floor")
    print(f"backend: cuda with {gpu.name} algebra"
          + (" (simulator: times mean nothing)" if a.smoke else ""))
    print(" | ".join(f"{h:>11}" for h in head))
    for r in rows:
        print(" | ".join(f"{v:>11.4g}" if isinstance(v, float) else f"{v!s:>11}" for v in r))


if __name__ == "__main__":
    main()
