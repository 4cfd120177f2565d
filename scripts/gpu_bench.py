"""GPU (device="cuda") against CPU and against the cuSOLVER floor, printed as a table.

Seeded synthetic probit data, X ~ N(0, I_3), y = sign(sin(2 x_1) + x_2 x_3 + N(0, 1)),
kernel RBF(variance=1, lengthscale=1) (+ 1e-6 jitter for dense EP).  Rows:

* dense parallel EP, n in --dense (default 10k, 20k, 40k): a converged fit
  (``fastep.ep(K, y, Probit(), device=...)``, tol 1e-4, K already built on each device),
  one sweep ``(t(max_iter=6) - t(max_iter=2)) / 4``, and the floor: cuSOLVER Cholesky of
  K + I of the same n (``chol``) and that plus the n x n triangular solve of one posterior
  refresh (``chol+trsm``, cuBLAS trsm); ratio sweep / (chol+trsm);
* sparse Power EP (alpha = 1), n in --sparse (default 1e6, 1e7), m = --m (256) inducing
  points on a grid of data rows: a converged fit (``fastep.sparse_ep(..., device=...)``);
* Gauss-Hermite products of the multiclass robust-max likelihood, n = --gh (1e6), J = 10,
  20 nodes: S(x, j) for every class and S(x_i, y_i) with its gradient, as kernels on
  device arrays ("kernel") and as the whole backend call with host arrays in and out,
  transfers included ("call", what GWIClassifier(device="cuda") runs), against the
  compiled parallel CPU loops.

CPU timings use --cpu-threads Numba and BLAS threads (default: all; the acceptance
targets compare against 2) and run only up to --cpu-max-dense / --cpu-max-sparse.
GPU times are wall-clock with the device synchronised (every driver returns host arrays).
Acceptance targets: dense EP n = 40,000 <= 30 s and a sweep <= 1.5 x (chol+trsm); sparse
n = 1e7 (m = 256) <= 20 s; robust-max products >= 20 x the 2-core CPU time.

    python scripts/gpu_bench.py [--dense ...] [--sparse ...] [--cpu-threads 2] [--json F]
    NUMBA_ENABLE_CUDASIM=1 python scripts/gpu_bench.py --smoke   # code path only, tiny n

Subcommand (``python scripts/gpu_bench.py transfers --help`` prints its method, the
section below, and its options):

    python scripts/gpu_bench.py transfers [--dense 20000] [--sparse 1000000]   # D2H copies
"""
import argparse
import collections
import json
import os
import statistics
import sys
import tempfile
import time
import warnings

import numpy as np

import fastep
from fastep.backend import resolve
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

    def release(self):
        """Give the memory CuPy's pool holds back to the device (between table rows)."""
        if self.name == "cupy":
            self.be.xp.get_default_memory_pool().free_all_blocks()

    def sync(self):
        if self.name == "cupy":
            self.be.xp.cuda.Device().synchronize()

    def floor(self, Kd):
        xp, n = self.be.xp, Kd.shape[0]
        A = Kd + xp.eye(n)

        def chol():
            self.be.cholesky(A, "K + I")
            self.sync()

        def chol_trsm():              # as a posterior refresh: the solve in place, F order
            L = self.be.cholesky(A, "K + I")
            self.be.solve_lower(L, xp.asfortranarray(Kd), overwrite=True)
            self.sync()
        return chol, chol_trsm


def dense_row(gpu, n, cpu_max, repeats):
    """One table row; a function, so that the device matrices are freed on return."""
    X, y = make_data(n)
    lik = Probit()
    sweeps = t_fit = sweep = f_chol = f_ref = NAN
    if gpu is not None:
        gpu.release()
        Kd = RBF(1.0, 1.0)(X, backend=gpu.be)
        Kd += 1e-6 * gpu.be.xp.eye(n)
        gpu.sync()

        def gpu_run(max_iter, tol=1e-4):
            return quiet(lambda: fastep.ep(Kd, y, lik, max_iter=max_iter, tol=tol,
                                           check_psd=False, device=gpu.be))
        gpu_run(2)()                                   # compile / warm up
        sweeps = gpu_run(100)().n_iter                 # (the result's factors are freed)
        t_fit = timed(gpu_run(100), repeats)
        t2, t6 = timed(gpu_run(2, 1e-300), repeats), timed(gpu_run(6, 1e-300), repeats)
        sweep = (t6 - t2) / 4
        chol, chol_trsm = gpu.floor(Kd)
        chol()
        f_chol, f_ref = timed(chol, repeats), timed(chol_trsm, repeats)
    cpu_fit = cpu_sweep = NAN
    if n <= cpu_max:
        K = RBF(1.0, 1.0)(X) + 1e-6 * np.eye(n)

        def cpu_run(max_iter, tol=1e-4):
            return quiet(lambda: fastep.ep(K, y, lik, max_iter=max_iter, tol=tol,
                                           check_psd=False))
        cpu_run(2)()
        sweeps = cpu_run(100)().n_iter if gpu is None else sweeps
        cpu_fit = timed(cpu_run(100), repeats)
        cpu_sweep = (timed(cpu_run(6, 1e-300), repeats) - timed(cpu_run(2, 1e-300), repeats)) / 4
    return show(("dense EP", n, "-", sweeps, t_fit, sweep, cpu_fit, cpu_sweep, f_chol, f_ref,
                 sweep / f_ref, cpu_fit / t_fit))


def dense_rows(gpu, sizes, cpu_max, repeats):
    return [dense_row(gpu, n, cpu_max, repeats) for n in sizes]


def sparse_rows(gpu, sizes, m, cpu_max, repeats):
    rows = []
    for n in sizes:
        X, y = make_data(n)
        Z = X[np.linspace(0, n - 1, m).astype(int)]
        kernel, lik = RBF(1.0, 1.0), Probit()
        res, t_fit = None, NAN
        if gpu is not None:
            gpu.release()

            def gpu_run():
                return quiet(lambda: fastep.sparse_ep(kernel, Z, X, y, lik, device=gpu.be))()
            res = gpu_run()
            t_fit = timed(gpu_run, repeats)
        cpu_fit = NAN
        if n <= cpu_max:
            def cpu_run():
                return quiet(lambda: fastep.sparse_ep(kernel, Z, X, y, lik))()
            res = cpu_run() if res is None else res
            cpu_fit = timed(cpu_run, repeats)
        if res is None:                        # CPU only, and n above --cpu-max-sparse
            continue
        rows.append(show(("sparse EP", n, m, res.n_iter, t_fit, t_fit / max(res.n_iter, 1),
                          cpu_fit, NAN, NAN, NAN, NAN, cpu_fit / t_fit)))
    return rows


def gh_rows(gpu, n, J, cpu_max, repeats):
    """Robust-max S(x, j) for all classes, and S(x_i, y_i) with its gradient: the CUDA
    kernels on device arrays, and the backend's whole call (host arrays in and out), against
    the compiled parallel CPU loops (20 nodes)."""
    from fastep._numerics import gauss_hermite
    from fastep.backend import resolve
    rng = np.random.default_rng(0)
    mean, var = rng.normal(0.0, 2.0, (n, J)), rng.uniform(0.1, 3.0, (n, J))
    labels = rng.integers(0, J, n)
    nodes, weights = (np.array(a) for a in gauss_hermite(20))
    cpu = resolve("cpu")
    cases = [("GH S", lambda: cpu.prob_largest(mean, var, nodes, weights)),
             ("GH grad", lambda: cpu.prob_largest_grad(mean, var, labels, nodes, weights))]
    gpu_fns = {}
    if gpu is not None:
        from numba import cuda

        from fastep.backend.cuda import kernels as ck
        gpu.release()
        be = gpu.be
        d_mean, d_var, d_nodes, d_weights = (be._to_device(a) for a in (mean, var, nodes,
                                                                       weights))
        d_labels = be._to_device(labels, np.int64)
        out, s, dm, dv = (be._device_empty(shape) for shape in ((n, J), n, (n, J), (n, J)))

        def kernel_all():
            ck.prob_largest_all(d_mean, d_var, d_nodes, d_weights, out)
            cuda.synchronize()

        def kernel_grad():
            ck.prob_largest_grad(d_mean, d_var, d_labels, d_nodes, d_weights, s, dm, dv)
            cuda.synchronize()
        gpu_fns = {"GH S": (kernel_all, lambda: be.prob_largest(mean, var, nodes, weights)),
                   "GH grad": (kernel_grad, lambda: be.prob_largest_grad(mean, var, labels,
                                                                         nodes, weights))}
    rows = []
    for task, cpu_fn in cases:
        t_cpu = NAN
        if n <= cpu_max:
            cpu_fn()
            t_cpu = timed(cpu_fn, repeats)
        for variant, gpu_fn in zip(("kernel", "call"), gpu_fns.get(task, (None, None))):
            t_gpu = NAN
            if gpu_fn is not None:
                gpu_fn()                               # compile / warm up
                t_gpu = timed(gpu_fn, repeats)
            rows.append(show((f"{task} {variant}", n, J, "-", t_gpu, NAN, t_cpu, NAN, NAN, NAN,
                              NAN, t_cpu / t_gpu)))
    return rows


NAN = float("nan")
HEAD = ("task", "n", "m/J", "sweeps", "GPU fit s", "GPU sweep s", "CPU fit s", "CPU sweep s",
        "chol s", "chol+trsm s", "sweep/floor", "CPU/GPU")


def show(row):
    """Print a table row as soon as it is measured (a later failure keeps it)."""
    print(" | ".join(f"{v:>11.4g}" if isinstance(v, float) else f"{v!s:>11}" for v in row),
          flush=True)
    return row


def environment(gpu):
    """Lines describing the GPU, its driver and the software versions."""
    import numba
    import scipy
    lines = [f"numpy {np.__version__}, scipy {scipy.__version__}, numba {numba.__version__}"]
    if gpu is None:
        return lines
    try:
        from importlib.metadata import version
        lines[0] += f", numba-cuda {version('numba-cuda')}"
    except Exception:
        pass
    if gpu.name == "cupy":
        import cupy
        rt = cupy.cuda.runtime
        props = rt.getDeviceProperties(0)
        lines.append(f"GPU: {props['name'].decode()}, {props['multiProcessorCount']} SMs, "
                     f"{props['totalGlobalMem'] / 2**30:.0f} GiB; driver API "
                     f"{rt.driverGetVersion()}, CUDA runtime {rt.runtimeGetVersion()}, "
                     f"CuPy {cupy.__version__}")
        try:
            import subprocess
            smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version",
                                  "--format=csv,noheader"], capture_output=True, text=True)
            lines.append(f"nvidia-smi: {smi.stdout.strip()}")
        except OSError:
            pass
    return lines


def bench_main(argv=None):
    p = argparse.ArgumentParser(
        description=__doc__.split("\n")[0], epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dense", type=int, nargs="*", default=[10_000, 20_000, 40_000])
    p.add_argument("--sparse", type=int, nargs="*", default=[1_000_000, 10_000_000])
    p.add_argument("--m", type=int, default=256)
    p.add_argument("--cpu-max-dense", type=int, default=10_000)
    p.add_argument("--cpu-max-sparse", type=int, default=1_000_000)
    p.add_argument("--gh", type=int, default=1_000_000, help="points for the GH products")
    p.add_argument("--cpu-max-gh", type=int, default=1_000_000)
    p.add_argument("--cpu-threads", type=int, default=None,
                   help="Numba and BLAS threads for the CPU timings (default: all)")
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--json", default=None, help="also write the rows to this JSON file")
    p.add_argument("--smoke", action="store_true",
                   help="tiny sizes under the CUDA simulator: checks the script, times nothing")
    p.add_argument("--cpu-only", action="store_true",
                   help="the CPU columns alone (no GPU needed), e.g. on the 2-core machine")
    a = p.parse_args(argv)
    if a.smoke:
        a.dense, a.sparse, a.m = [48], [300], 8
        a.cpu_max_dense, a.cpu_max_sparse, a.gh, a.cpu_max_gh = 48, 300, 30, 30
        from fastep.backend.cuda import kernels as ck
        ck.THREADS_PER_BLOCK, ck.THREADS_2D, ck.MAX_BLOCKS = 4, 2, 2
    if a.cpu_threads:
        import numba
        from threadpoolctl import threadpool_limits
        numba.set_num_threads(a.cpu_threads)
        threadpool_limits(a.cpu_threads)
    gpu = None if a.cpu_only else GPU(a.smoke)
    import os
    print("\n".join(environment(gpu)))
    print(f"backend: {'none (CPU only)' if gpu is None else f'cuda with {gpu.name} algebra'}; "
          f"CPU timings on "
          f"{a.cpu_threads or os.cpu_count()} threads"
          + (" (simulator: times mean nothing)" if a.smoke else ""))
    print(" | ".join(f"{h:>11}" for h in HEAD), flush=True)
    rows = dense_rows(gpu, a.dense, a.cpu_max_dense, a.repeats)
    rows += sparse_rows(gpu, a.sparse, a.m, a.cpu_max_sparse, a.repeats)
    rows += gh_rows(gpu, a.gh, 10, a.cpu_max_gh, a.repeats)
    head = HEAD
    if a.json:
        import json
        with open(a.json, "w") as fh:
            json.dump({"environment": environment(gpu), "columns": head,
                       "rows": [[v if not isinstance(v, float) or v == v else None for v in r]
                                for r in rows]}, fh, indent=1)


# =========================================================================================
# transfers (formerly scripts/gpu_transfers.py)
# =========================================================================================
TRANSFERS_DOC = """\
Device-to-host copies of EP on the GPU: is any n-sized array copied inside a sweep?

Runs dense EP (n = --dense) and sparse EP (n = --sparse, m = --m) with device="cuda",
once with max_iter = 2 and once with max_iter = 6 sweeps (tol = 1e-300, so both run all
their sweeps), and counts the device-to-host copies of each run by size, two ways:

* CUPTI, through PyTorch's profiler (``torch.profiler``, CUDA activity): it records every
  CUDA memcpy of the process whatever library issued it (CuPy, numba.cuda), the trace
  that Nsight Systems reads;
* the backend: every array fastep's CUDA backend hands to the host passes through
  ``CUDABackend.to_host``, which is counted.

A copy of at least 8 n bytes (one float64 per data point) whose count grows with the
number of sweeps would be a copy inside a sweep; the result's arrays are copied once,
after the last sweep, whatever the count of sweeps.

    python scripts/gpu_bench.py transfers [--dense 20000] [--sparse 1000000] [--m 256]
"""


def cupti_copies(fn):
    """Sizes (bytes) of the device-to-host memcpys CUPTI saw while ``fn`` ran, or None."""
    try:
        import torch
        from torch.profiler import ProfilerActivity, profile
    except ImportError:
        return None
    torch.cuda.init()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
    path = os.path.join(tempfile.mkdtemp(), "trace.json")
    prof.export_chrome_trace(path)
    with open(path) as fh:
        events = json.load(fh).get("traceEvents", [])
    return [int(e.get("args", {}).get("bytes", 0)) for e in events
            if "Memcpy DtoH" in str(e.get("name", ""))]


def backend_copies(be, fn):
    """Sizes (bytes) of the arrays passed through ``be.to_host`` while ``fn`` ran."""
    seen = []
    original = be.to_host

    def counting(a):
        out = original(a)
        seen.append(int(out.nbytes))
        return out
    be.to_host = counting
    try:
        fn()
    finally:
        del be.to_host
    return seen


def audit(name, n, run, be):
    print(f"{name}, n = {n}:")
    big = {}
    for sweeps in (2, 6):
        def call():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                run(sweeps)
        call()                                               # compile / warm up
        for how, sizes in (("CUPTI", cupti_copies(call)),
                           ("backend", backend_copies(be, call))):
            if sizes is None:
                print(f"  {sweeps} sweeps, {how}: not available (no torch.profiler)")
                continue
            n_big = sum(s >= 8 * n for s in sizes)
            big[how, sweeps] = n_big
            hist = collections.Counter(sizes)
            top = ", ".join(f"{b} B x {c}" for b, c in sorted(hist.items(), reverse=True)[:6])
            print(f"  {sweeps} sweeps, {how}: {len(sizes)} device-to-host copies, {n_big} of "
                  f">= 8n = {8 * n} bytes; largest: {top}")
    for how in ("CUPTI", "backend"):
        if (how, 2) in big:
            verdict = "none inside a sweep" if big[how, 2] == big[how, 6] else \
                "COPIES GROW WITH SWEEPS"
            print(f"  {how}: n-sized copies with 2 sweeps {big[how, 2]}, with 6 sweeps "
                  f"{big[how, 6]}: {verdict}")
    return all(big[how, 2] == big[how, 6] for how in ("CUPTI", "backend") if (how, 2) in big)


def transfers_main(argv=None):
    ap = command_parser("transfers", TRANSFERS_DOC)
    ap.add_argument("--dense", type=int, default=20_000)
    ap.add_argument("--sparse", type=int, default=1_000_000)
    ap.add_argument("--m", type=int, default=256)
    a = ap.parse_args(argv)
    be = resolve("cuda")
    X, y = make_data(a.dense)
    K = RBF()(X, backend=be)
    K += 1e-6 * be.xp.eye(a.dense)
    ok = audit("dense EP", a.dense, lambda s: fastep.ep(K, y, Probit(), max_iter=s, tol=1e-300,
                                                         check_psd=False, device=be), be)
    X, y = make_data(a.sparse)
    Z = X[np.linspace(0, a.sparse - 1, a.m).astype(int)]
    ok &= audit("sparse EP", a.sparse, lambda s: fastep.sparse_ep(
        RBF(), Z, X, y, Probit(), max_iter=s, tol=1e-300, device=be), be)
    print("check: ok" if ok else "check: FAILED")


# =========================================================================================
# the command line
# =========================================================================================
#: subcommand -> (its entry point, taking the arguments after the subcommand; its method)
COMMANDS = {
    "transfers": (transfers_main, TRANSFERS_DOC),
}
EPILOG = """subcommand (python scripts/gpu_bench.py transfers --help: method, options):
  transfers  device-to-host copies inside a GPU sweep, counted by CUPTI and by the backend
             (was gpu_transfers.py)"""


def command_parser(command, doc):
    """The argument parser of one subcommand: its method as the description."""
    return argparse.ArgumentParser(prog=f"gpu_bench.py {command}", description=doc,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in COMMANDS:
        return COMMANDS[argv[0]][0](argv[1:])
    return bench_main(argv)


if __name__ == "__main__":
    sys.exit(main())
