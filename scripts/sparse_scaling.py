"""Sparse Power EP: time per sweep against n, and accuracy against dense EP as m grows.

(a) Scaling.  Seeded probit data (X uniform on [-2, 2]^3, y = sign(sin(2 x1) + x2 x3 + N(0, 1/4))),
    RBF(1, 1), m inducing points drawn from X, ``sparse_ep(..., tol=1e-4)`` from cold sites.
    Each n runs in its own process so that the peak resident memory is that of the fit.
    Printed per n: sweeps to convergence, total time (compile paid before timing), median
    time per sweep (from the callback's time stamps), peak RSS (of the fit), the time of
    the log Z gradient (``sparse_ep_gradient``, two streamed passes), and the floor: one
    streamed pass of the sweep's rank-k update ``sum_c A_c A_c^T`` (dsyrk over the same chunks of a
    random m x n matrix, on the same threads; a sweep also does a dtrmm of the same flop
    count, so about 2 is the best sweep/floor ratio).  Ratios: sweep/floor and the growth
    of the sweep time from the smallest to the largest n.
    ``--check`` exits 1 unless the largest n converges within 60 s and 4 GiB, and (when
    10^5 and 10^6 are both run) the sweep time grows between 8x and 12x from 10^5 to 10^6.

(b) Accuracy.  n = 2000 of the same data: dense EP against sparse EP with m = 16 ... 256
    (alpha = 1 and 0.5): |log Z_sparse - log Z_dense| / n, the largest difference of the
    predictive probabilities on 1000 test points, and test accuracy.

(c) The collapsed objective of SparseGPRegressor (power alpha = 0.5) with all its gradients at
    n = --collapsed (10^5), m = --m: median time against one threaded K_uf K_uf^T product.

    python scripts/sparse_scaling.py [--sizes 10000 100000 1000000] [--m 256] [--check]

Subcommands, each the method of a section below (``python scripts/sparse_scaling.py
COMMAND --help`` prints it and the options):

    python scripts/sparse_scaling.py passes       # passes to tol: sequential vs parallel schedule
    python scripts/sparse_scaling.py evaluation --parts   # one ML-II evaluation, in passes
    python scripts/sparse_scaling.py dask --memory-limit 0   # on Dask vs the threaded sweep
"""
import argparse
import json
import math
import os
import pathlib
import resource
import statistics
import subprocess
import sys
import time
import warnings

import numpy as np


def make_data(n, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 2, (n, 3))
    f = np.sin(2.0 * X[:, 0]) + X[:, 1] * X[:, 2]
    return X, np.where(f + 0.5 * rng.standard_normal(n) > 0.0, 1.0, -1.0), f


def one_size(n, m, seed=0):
    """Run in a child process: fit, time and measure the floor; print one JSON line."""
    from concurrent.futures import ThreadPoolExecutor

    import numba

    from fastep._linalg import single_threaded_blas, syrk_lower_nogil
    from fastep.inference.sparse_ep import CHUNK, sparse_ep, sparse_ep_gradient
    from fastep.kernels import RBF
    from fastep.likelihoods import Probit

    X, y, _ = make_data(n, seed)
    Z = X[np.random.default_rng(seed + 1).choice(n, m, replace=False)]
    k = RBF(1.0, 1.0)
    warm = sparse_ep(k, Z, X[:2000], y[:2000], Probit(), max_iter=2, tol=1e-300)  # compile
    sparse_ep_gradient(warm, k, X[:2000], y[:2000], Probit())
    stamps = []
    t0 = time.perf_counter()
    res = sparse_ep(k, Z, X, y, Probit(), callback=lambda s, lz: stamps.append(time.perf_counter()))
    total = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20  # KiB -> GiB
    t0 = time.perf_counter()
    sparse_ep_gradient(res, k, X, y, Probit())
    grad = time.perf_counter() - t0
    sweep = statistics.median(np.diff([t0] + stamps)) if stamps else total
    # floor: the sweep's dsyrk alone (its dtrmm costs as much again), over the same chunks
    # on the same threads as the sweep (sparse_ep shares chunks out over numba's thread count)
    A = np.asfortranarray(np.random.default_rng(2).standard_normal((m, CHUNK)))
    n_threads = numba.get_num_threads()
    Ps = [np.zeros((m, m), order="F") for _ in range(n_threads)]

    def part(t):
        for c0 in range(t * CHUNK, n, n_threads * CHUNK):
            syrk_lower_nogil(1.0, A[:, : min(n, c0 + CHUNK) - c0], Ps[t])

    t1 = time.perf_counter()
    with single_threaded_blas(), ThreadPoolExecutor(n_threads) as pool:
        list(pool.map(part, range(n_threads)))
    floor = time.perf_counter() - t1
    print(json.dumps(dict(n=n, m=m, sweeps=res.n_iter, converged=res.converged, total=total,
                          sweep=sweep, floor=floor, peak_gib=peak, grad=grad,
                          acc=float(np.mean(np.sign(res.mean) == y)))))


def scaling(sizes, m):
    rows = []
    for n in sizes:
        out = subprocess.run([sys.executable, __file__, "--child", str(n), "--m", str(m)],
                             capture_output=True, text=True, check=True)
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    print(f"(a) sparse probit EP, d = 3, m = {m}, tol = 1e-4 (each n in a fresh process)")
    print(f"{'n':>9s} {'sweeps':>6s} {'total s':>8s} {'s/sweep':>8s} {'floor s':>8s} "
          f"{'sweep/floor':>11s} {'peak GiB':>8s} {'train acc':>9s} {'grad s':>7s} "
          f"{'grad/sweep':>10s}")
    for r in rows:
        print(f"{r['n']:9d} {r['sweeps']:6d} {r['total']:8.2f} {r['sweep']:8.3f} "
              f"{r['floor']:8.3f} {r['sweep'] / r['floor']:11.2f} {r['peak_gib']:8.2f} "
              f"{r['acc']:9.3f} {r['grad']:7.2f} {r['grad'] / r['sweep']:10.2f}")
    growth = {}
    for a, b in zip(rows, rows[1:]):
        growth[(a["n"], b["n"])] = b["sweep"] / a["sweep"]
        print(f"time per sweep grows {b['sweep'] / a['sweep']:.2f}x from n = {a['n']} to "
              f"n = {b['n']} ({b['n'] / a['n']:.0f}x the data)")
    return rows, growth


def accuracy(ms, n=2000):
    import fastep
    from fastep.inference.sparse_ep import sparse_ep
    from fastep.kernels import RBF
    from fastep.likelihoods import Probit

    X, y, _ = make_data(n + 1000, seed=3)
    X, Xt, y, yt = X[:n], X[n:], y[:n], y[n:]
    k = RBF(1.0, 1.0)
    dense = fastep.ep(k(X), y, Probit())
    mean, var = dense.predict_latent(k(X, Xt), k.diag(Xt))
    p_dense = Probit().predict_proba(mean, var)
    print(f"\n(b) accuracy against dense EP, n = {n}: log Z_dense = "
          f"{dense.log_marginal_likelihood:.3f}, test accuracy {np.mean(np.sign(mean) == yt):.3f}")
    print(f"{'m':>5s} {'alpha':>5s} {'|dlogZ|/n':>10s} {'max|dp|':>8s} {'test acc':>8s}")
    for m in ms:
        Z = X[np.random.default_rng(4).choice(n, m, replace=False)]
        for alpha in (1.0, 0.5):
            res = sparse_ep(k, Z, X, y, Probit(), alpha=alpha)
            ms_, vs = res.predict_latent(k, Xt)
            p = Probit().predict_proba(ms_, vs)
            print(f"{m:5d} {alpha:5.1f} "
                  f"{abs(res.log_marginal_likelihood - dense.log_marginal_likelihood) / n:10.2e} "
                  f"{np.max(np.abs(p - p_dense)):8.4f} {np.mean(np.sign(ms_) == yt):8.3f}")


def collapsed(n, m, repeats=5):
    """The collapsed Power-EP objective (alpha = 0.5) with every gradient, against the
    floor of one threaded ``K_uf K_uf^T`` product (dsyrk) of the same shape."""
    from fastep.inference.collapsed import collapsed_objective, kernel_gradient
    from fastep.kernels import RBF

    X, y, _ = make_data(n, seed=5)
    y = y + 0.1 * np.random.default_rng(6).standard_normal(n)
    Z = X[np.random.default_rng(7).choice(n, m, replace=False)]
    k = RBF(1.0, 1.0)

    def objective():
        st = collapsed_objective(k(Z), k(Z, X), k.diag(X), y, 0.1, 0.5, eval_gradient=True)
        kernel_gradient(k, Z, X, st.grad)

    A = np.random.default_rng(8).standard_normal((m, n))
    objective()                                              # compile the kernel code
    times = {}
    for name, fn in (("objective+gradient", objective), ("floor", lambda: A @ A.T)):
        ts = []
        for _ in range(repeats):
            t = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t)
        times[name] = statistics.median(ts)
    print(f"\n(c) collapsed objective (alpha = 0.5) and its gradients, n = {n}, m = {m}: "
          f"median {times['objective+gradient']:.3f} s, floor (K_uf K_uf^T) "
          f"{times['floor']:.3f} s, ratio {times['objective+gradient'] / times['floor']:.1f}")


def scaling_main(argv=None):
    ap = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    ap.add_argument("--m", type=int, default=256)
    ap.add_argument("--ms", type=int, nargs="+", default=[16, 32, 64, 128, 256])
    ap.add_argument("--collapsed", type=int, default=100_000,
                    help="n for the collapsed-objective timing (0 skips it)")
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--save", metavar="JSON",
                    help="also write table (a) as JSON, with the environment "
                         "(docs/data/sparse_scaling.json: the performance page's figure)")
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        return one_size(args.child, args.m)
    rows, growth = scaling(args.sizes, args.m)
    if args.save:
        from fastep._version import save_record
        save_record(args.save, "sparse_scaling.py", rows, m=args.m)
    accuracy(args.ms)
    if args.collapsed:
        collapsed(args.collapsed, args.m)
    if args.check:
        last = rows[-1]
        ok = last["converged"] and last["total"] <= 60 and last["peak_gib"] <= 4
        g = growth.get((100_000, 1_000_000))
        ok = ok and (g is None or 8 <= g <= 12)
        print("check:", "ok" if ok else "FAILED")
        return 0 if ok else 1


# =========================================================================================
# passes (formerly scripts/sparse_passes.py)
# =========================================================================================
PASSES_DOC = """\
Passes over the data of sparse EP: chunk-sequential against parallel schedule.

Seeded probit data of ``scripts/sparse_scaling.py`` (d = 3), RBF(1, 1), m inducing inputs
drawn from X, both fixed; each n in a fresh process, compilation paid before timing.
Per n and schedule: passes over the data of a converged fit (sweeps + the closing
evaluation pass) at the default tol 1e-4, its seconds, and |log Z / log Z* - 1| against
the parallel fixed point log Z* (tol 1e-10).  Then the fewest passes at which the
sequential schedule's log Z (``max_iter=k``) is within 1e-6 relative of log Z*.

    python scripts/sparse_scaling.py passes [--sizes 100000 1000000] [--m 256]
"""


def passes_one_size(n, m):
    from fastep.exceptions import ConvergenceWarning
    from fastep.inference.sparse_ep import sparse_ep
    from fastep.kernels import RBF
    from fastep.likelihoods import Probit

    X, y, _ = make_data(n)
    Z = X[np.random.default_rng(1).choice(n, m, replace=False)]
    k = RBF(1.0, 1.0)
    warnings.simplefilter("ignore", ConvergenceWarning)
    for s in ("sequential", "parallel"):
        sparse_ep(k, Z, X[:4000], y[:4000], Probit(), max_iter=2, schedule=s)   # compile

    def fit(**kw):
        t0 = time.perf_counter()
        res = sparse_ep(k, Z, X, y, Probit(), **kw)
        return res, time.perf_counter() - t0

    ref, _ = fit(schedule="parallel", tol=1e-10, max_iter=200)
    log_z = ref.log_marginal_likelihood
    out = dict(n=n, m=m, log_z=log_z, rows=[])
    for s in ("sequential", "parallel"):
        res, seconds = fit(schedule=s)
        out["rows"].append(dict(schedule=s, passes=res.n_iter + 1, seconds=seconds,
                                converged=res.converged,
                                rel=abs(res.log_marginal_likelihood / log_z - 1)))
    trace = []
    for k_ in range(1, 20):
        res, seconds = fit(max_iter=k_)
        trace.append(dict(passes=k_ + 1, seconds=seconds,
                          rel=abs(res.log_marginal_likelihood / log_z - 1)))
        if trace[-1]["rel"] <= 1e-6:
            break
    out["trace"] = trace
    return out


def passes_main(argv=None):
    ap = command_parser("passes", PASSES_DOC)
    ap.add_argument("--sizes", type=int, nargs="+", default=[100000, 1000000])
    ap.add_argument("--m", type=int, default=256)
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        print(json.dumps(passes_one_size(a.child, a.m)))
        return
    print(f"sparse probit EP, d = 3, m = {a.m}, tol 1e-4; passes = sweeps + the evaluation pass")
    print(f"{'n':>8s} {'schedule':>10s} {'passes':>6s} {'seconds':>8s} {'|dlogZ|/|logZ*|':>15s}")
    for n in a.sizes:
        out = subprocess.run([sys.executable, __file__, "passes", "--child", str(n), "--m",
                              str(a.m)],
                             capture_output=True, text=True, check=True)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        for row in r["rows"]:
            print(f"{n:8d} {row['schedule']:>10s} {row['passes']:6d} {row['seconds']:8.2f} "
                  f"{row['rel']:15.1e}" + ("" if row["converged"] else "  (not converged)"))
        seq, par = r["rows"]
        hit = r["trace"][-1]
        errors = ", ".join(f"{t['rel']:.0e}" for t in r["trace"])
        print(f"{'':8s} sequential / parallel: passes {seq['passes'] / par['passes']:.2f}, "
              f"seconds {seq['seconds'] / par['seconds']:.2f}; sequential log Z within 1e-6 of "
              f"the fixed point after {hit['passes']} passes ({hit['seconds']:.2f} s; "
              f"relative errors by passes: {errors})", flush=True)


# =========================================================================================
# evaluation (formerly scripts/sparse_evaluation.py)
# =========================================================================================
EVALUATION_DOC = """\
What one ML-II evidence evaluation of a large sparse classifier costs, part by part, in
units of one parallel sparse EP pass timed at the same n in the same run (issue 30).

The measurement is ``evaluation_parts`` of ``asv_benchmarks/benchmarks/bench_mlii.py`` (also
its asv benchmark ``SparseEvaluation``).  Data: the fit-time issue's large-n probit problem
(``rff_probit_data`` there: d = 4, m = 256 inducing inputs drawn from X).
An evaluation as ML-II makes it, near the optimum: EP at kernel B warm-started from the
sites of a converged run at a nearby kernel A (its first pass rebuilds q from those sites
at B), run to tol 1e-4, then the evidence gradient at B.  Printed, each the median of
``--repeats``:

* ``pass``: one parallel sweep, ``(t(6 sweeps) - t(2 sweeps)) / 4`` from a cold start (the
  floor: every sweep reads every row once);
* ``EP``: the warm-started run (its passes: the warm pass, the sweeps, the closing
  evaluation pass, which also takes the gradient's first pass), and the time of the warm
  pass alone (``--parts``);
* ``gradient``: :func:`~fastep.inference.sparse_ep.sparse_ep_gradient` after it, with the
  Gram matrix and first-pass sums the run kept (``keep_gram``, as ML-II does: one pass) and,
  for comparison, without them (two passes, the kernel recomputed);
* ``evaluation``: EP + gradient, in passes.

With ``--fit`` it also fits the default ``EPGaussianProcessClassifier`` (learnt ARD kernel
from RBF(1, [1, 1, 1, 1]); ``--no-stages``: without the subsample stages) and prints its
wall time, evaluations and seconds per evaluation in passes.

    python scripts/sparse_scaling.py evaluation --n 100000 --repeats 3 [--fit] [--parts]
"""


def evaluation_main(argv=None):
    import logging

    import fastep
    from fastep.backend import resolve
    from fastep.kernels import RBF
    from fastep.likelihoods import Probit
    from fastep.models import _mlii

    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "asv_benchmarks"))
    from benchmarks.bench_mlii import (KERNEL_A, _run, counted_fit, evaluation_parts,
                                       rff_probit_data, seconds)

    logging.getLogger("fastep").setLevel(logging.WARNING)
    ap = command_parser("evaluation", EVALUATION_DOC)
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--parts", action="store_true", help="time the warm pass separately")
    ap.add_argument("--fit", action="store_true", help="also time a whole default fit")
    ap.add_argument("--no-stages", action="store_true", help="the fit without subsample stages")
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore", fastep.ConvergenceWarning)
    X, y01 = rff_probit_data(args.n, seed=0)
    y = 2.0 * y01 - 1.0
    Z = X[np.random.default_rng(1).choice(args.n, 256, replace=False)]
    fastep.EPGaussianProcessClassifier(RBF(1.0, [1.0] * 4), inducing_points=Z[:64]).fit(
        X[:2000], y01[:2000])                                    # compile / load the cache
    be = resolve("cpu")
    start = _run.run_sparse_ep(be, KERNEL_A, Z, X, y, Probit(), 1.0, None, 1e-6, 100)
    rounds = [evaluation_parts(X, y, Z, start, args.parts) for _ in range(args.repeats)]
    med = {k: float(np.median([r[k] for r in rounds])) for k in rounds[0]}
    p = med["pass"]
    print(f"n = {args.n:,}, m = 256, d = 4; medians of {args.repeats}")
    print(f"  one parallel pass            {p:8.3f} s   1.00 passes")
    print(f"  EP, warm-started, tol 1e-4   {med['EP']:8.3f} s  {med['EP'] / p:5.2f} passes "
          f"({med['EP sweeps']:.0f} sweeps + warm and closing passes)")
    if args.parts:
        print(f"    of which the warm pass     {med['warm pass']:8.3f} s  "
              f"{med['warm pass'] / p:5.2f} passes")
    print(f"  gradient, kept Gram          {med['gradient']:8.3f} s  {med['gradient'] / p:5.2f}"
          f" passes")
    print(f"  gradient, nothing kept       {med['gradient, kernel recomputed']:8.3f} s  "
          f"{med['gradient, kernel recomputed'] / p:5.2f} passes")
    total = med["EP"] + med["gradient"]
    print(f"  evaluation (EP + gradient)   {total:8.3f} s  {total / p:5.2f} passes")
    if args.fit:
        if args.no_stages:
            _mlii.STAGED_MIN_ROWS = 10 ** 15
        t, (clf, steps) = seconds(lambda: counted_fit(X, y01, RBF(1.0, [1.0] * 4),
                                                      inducing_points=Z))
        full = steps.full_evaluations
        print(f"  default fit: {t:.1f} s, {steps.evaluations} evaluations "
              f"({steps.stage_evaluations} on subsamples), {steps.sweeps} EP sweeps; "
              f"{t / max(1, full) / p:.1f} passes per full-data evaluation (all included); "
              f"kernel {clf.kernel_}")


# =========================================================================================
# dask (formerly scripts/dask_scaling.py)
# =========================================================================================
DASK_DOC = """\
Sparse EP on Dask against the single-process threaded sweep, n in {1e6, 1e7}.

For each n, with m = 256 inducing inputs, d = 3 and the data in a Zarr store:

* single process: the in-memory array, ``sparse_ep(schedule="parallel", gram_cache=0)``
  on this machine's threads (the same algorithm and no Gram cache, as on Dask), timed
  per sweep over ``--single-sweeps`` sweeps;
* Dask: ``LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
  memory_limit=...)``, X and y read from the Zarr store, a converged fit; per sweep the
  seconds and the bytes the workers sent (Dask's own ``transfer_outgoing_bytes_total``),
  and each worker's peak resident memory (``VmHWM``) at the end, beside its memory when
  it holds no data (just started, and after a fit of 4096 rows loaded fastep's kernels).

It prints a table, the ratio of the seconds per sweep (Dask / single process), the
ratio of bytes per sweep between the two n, and a projection of the seconds per sweep
at n = 1e9 on 100 workers from the measured figures (assumptions printed with it).

    python scripts/sparse_scaling.py dask                       # n = 1e6 and 1e7 (about 30 min)
    python scripts/sparse_scaling.py dask --n 1000000 --single-sweeps 2
    python scripts/sparse_scaling.py dask --n 1e5 1e6 1e7 --max-iter 5 \\
        --save docs/data/dask_scaling.json            # + out of core: the docs' figure
    python scripts/sparse_scaling.py dask --fit --n 1e6 # the whole fit, ML-II included
"""


M, D = 256, 3


def make_store(path, n, seed=0, block=2 ** 16):
    """A Zarr group with X (n, 3) and y (n,) in row chunks of ``block``, written chunk by
    chunk (a probit-classification problem)."""
    import zarr
    if os.path.exists(os.path.join(path, "DONE")):
        return
    root = zarr.open_group(path, mode="w")
    make = getattr(root, "create_array", None) or root.create_dataset
    X = make("X", shape=(n, D), chunks=(block, D), dtype="f8")
    y = make("y", shape=(n,), chunks=(block,), dtype="f8")
    rng = np.random.default_rng(seed)
    for c0 in range(0, n, block):
        c1 = min(n, c0 + block)
        x = rng.uniform(-3, 3, (c1 - c0, D))
        f = np.sin(1.5 * x[:, 0]) + 0.5 * np.cos(x[:, 1]) * x[:, 2] / 3
        X[c0:c1] = x
        y[c0:c1] = np.where(f + 0.5 * rng.normal(size=c1 - c0) > 0, 1.0, -1.0)
    open(os.path.join(path, "DONE"), "w").close()


def inducing(path):
    import zarr
    X = zarr.open_group(path, mode="r")["X"]
    return np.ascontiguousarray(X[:M * 40:40])


def single_process(path, sweeps, memmap=False):
    """Median seconds per parallel sweep in this process (threads), X in memory, or
    (``memmap``) out of core: X a memory-mapped ``.npy`` file beside the store, read chunk
    by chunk by each sweep."""
    import zarr
    from fastep import sparse_ep
    from fastep.kernels import RBF
    from fastep.likelihoods import Probit
    root = zarr.open_group(path, mode="r")
    X, y = np.ascontiguousarray(root["X"][:]), np.ascontiguousarray(root["y"][:])
    if memmap:
        npy = os.path.join(path, "X.npy")
        if not os.path.exists(npy):
            np.save(npy, X)
        X = np.load(npy, mmap_mode="r")
    stamps = [time.perf_counter()]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sparse_ep(RBF(1.0, 1.0), inducing(path), X, y, Probit(), schedule="parallel",
                  gram_cache=0, max_iter=sweeps, tol=1e-300,
                  callback=lambda i, lz: stamps.append(time.perf_counter()))
    return float(np.median(np.diff(stamps)[1:] if len(stamps) > 2 else np.diff(stamps)))


def _peak_rss():
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def _rss():
    import psutil
    return psutil.Process().memory_info().rss


def _sent(dask_worker):
    return dask_worker.transfer_outgoing_bytes_total


def on_dask(path, memory_limit, max_iter):
    """A converged fit on a local cluster of 2 single-threaded worker processes."""
    import dask.array as da
    from distributed import Client, LocalCluster
    from fastep import sparse_ep
    from fastep.kernels import RBF
    from fastep.likelihoods import Probit
    cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                           memory_limit=memory_limit, dashboard_address=None)
    client = Client(cluster)
    try:
        X, y = da.from_zarr(path, component="X"), da.from_zarr(path, component="y")
        client.run(lambda: None)                      # workers up
        empty = sorted(client.run(_rss).values())
        marks = []

        small = da.from_zarr(path, component="X")[:4096], da.from_zarr(path, component="y")[:4096]
        with warnings.catch_warnings():               # fastep's kernels loaded on the workers
            warnings.simplefilter("ignore")
            sparse_ep(RBF(1.0, 1.0), inducing(path), *small, Probit(), max_iter=2)
        loaded = sorted(client.run(_rss).values())

        def mark(i=None, lz=None):
            marks.append((time.perf_counter(), sum(client.run(_sent).values())))

        mark()
        res = sparse_ep(RBF(1.0, 1.0), inducing(path), X, y, Probit(), max_iter=max_iter,
                        callback=mark)
        mark()
        t = np.diff([s for s, _ in marks])
        b = np.diff([v for _, v in marks])
        peaks = sorted(client.run(_peak_rss).values())
        # the first interval holds the persist of X and y and the first sweep
        return dict(sweeps=res.n_iter, converged=res.converged,
                    log_z=res.log_marginal_likelihood,
                    s_per_sweep=float(np.median(t[1:-1])) if t.size > 2 else float(t[0]),
                    bytes_per_sweep=float(np.median(b[1:-1])) if b.size > 2 else float(b[0]),
                    total_s=float(np.sum(t)), peak_rss=peaks, empty_rss=empty,
                    loaded_rss=loaded)
    finally:
        client.close()
        cluster.close()


def whole_fit(path, memory_limit):
    """The whole default fit (``EPGaussianProcessClassifier(n_inducing=M)``, ML-II and its
    subsample stages included) in memory and on a local cluster of 2 single-threaded
    worker processes: (seconds in memory, seconds on Dask, largest relative difference of
    the fitted kernels' parameters)."""
    import dask.array as da
    import zarr
    from distributed import Client, LocalCluster
    from fastep import EPGaussianProcessClassifier
    root = zarr.open_group(path, mode="r")
    X, y = np.ascontiguousarray(root["X"][:]), np.ascontiguousarray(root["y"][:])

    def timed(X, y):
        """The fit and its seconds, after a fit of 4,096 rows loaded the compiled code
        (in this process, or on the workers for dask arrays)."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            EPGaussianProcessClassifier(n_inducing=M, random_state=0).fit(X[:4096], y[:4096])
            t0 = time.perf_counter()
            est = EPGaussianProcessClassifier(n_inducing=M, random_state=0).fit(X, y)
            return est, time.perf_counter() - t0

    local, t_local = timed(X, y)
    cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                           memory_limit=memory_limit, dashboard_address=None)
    client = Client(cluster)
    try:
        remote, t_dask = timed(da.from_zarr(path, component="X"),
                               da.from_zarr(path, component="y"))
    finally:
        client.close()
        cluster.close()
    a, b = np.exp(local.kernel_.theta), np.exp(remote.kernel_.theta)
    return t_local, t_dask, float(np.max(np.abs(a - b) / np.abs(a)))


def dask_main(argv=None):
    ap = command_parser("dask", DASK_DOC)
    ap.add_argument("--n", type=float, nargs="+", default=[1e6, 1e7])
    ap.add_argument("--store", default="/tmp/fastep_dask_scaling")
    ap.add_argument("--single-sweeps", type=int, default=4)
    ap.add_argument("--max-iter", type=int, default=100)
    ap.add_argument("--memory-limit-mib", type=float,
                    help="each worker's memory_limit in MiB (overrides --memory-limit)")
    ap.add_argument("--dask-only", action="store_true",
                    help="skip the single-process runs (e.g. a run under a memory limit)")
    ap.add_argument("--memory-limit", type=float, default=0.95,
                    help="each worker's memory_limit as a fraction of the bytes of the data "
                         "at the largest n (X and y)")
    ap.add_argument("--save", metavar="JSON",
                    help="also time the out-of-core sweep (X memory-mapped) and write the "
                         "seconds per sweep of the three as JSON with the environment "
                         "(docs/data/dask_scaling.json: the performance page's figure)")
    ap.add_argument("--fit", action="store_true",
                    help="instead: the whole default classifier fit (ML-II included) in "
                         "memory and on Dask at each n, its time ratio and the fitted "
                         "kernels' largest relative difference")
    args = ap.parse_args(argv)
    if args.fit:
        for n in [int(v) for v in args.n]:
            path = f"{args.store}_{n}.zarr"
            make_store(path, n)
            limit = 0 if args.memory_limit_mib is None else int(args.memory_limit_mib * 2 ** 20)
            t_local, t_dask, gap = whole_fit(path, limit)
            print(f"n = {n:.0e}: whole default fit (m = {M}) in memory {t_local:.1f} s, on "
                  f"Dask {t_dask:.1f} s, ratio {t_dask / t_local:.2f}; fitted kernels differ "
                  f"by {gap:.1e} relative", flush=True)
        return
    rows, saved = [], []
    limit = int(args.memory_limit * max(args.n) * (D + 1) * 8)
    if args.memory_limit_mib is not None:
        limit = int(args.memory_limit_mib * 2 ** 20)
    for n in [int(v) for v in args.n]:
        path = f"{args.store}_{n}.zarr"
        make_store(path, n)
        data_bytes = n * (D + 1) * 8
        single = math.nan if args.dask_only else single_process(path, args.single_sweeps)
        mapped = single_process(path, args.single_sweeps, memmap=True) if args.save else None
        dask_run = on_dask(path, limit, args.max_iter)
        rows.append((n, data_bytes, limit, single, dask_run))
        if mapped is not None:
            saved.append({"n": n, "in_memory": single, "memmap": mapped,
                          "dask": dask_run["s_per_sweep"], "dask_sweeps": dask_run["sweeps"],
                          "bytes_per_sweep": dask_run["bytes_per_sweep"]})
            print(f"n = {n:.0e}: out of core (X memory-mapped) {mapped:.2f} s/sweep, "
                  f"{mapped / single:.2f}x in memory", flush=True)
        print(f"n = {n:.0e}: data {data_bytes / 2**20:.0f} MiB, memory_limit {limit / 2**20:.0f}"
              f" MiB per worker | single process {single:.2f} s/sweep | Dask {dask_run['sweeps']}"
              f" sweeps (converged {dask_run['converged']}), {dask_run['s_per_sweep']:.2f} "
              f"s/sweep, {dask_run['bytes_per_sweep'] / 2**20:.2f} MiB sent per sweep, peak RSS"
              f" per worker {[round(p / 2**20) for p in dask_run['peak_rss']]} MiB (a worker "
              f"holding nothing: {[round(p / 2**20) for p in dask_run['empty_rss']]} MiB "
              f"started, {[round(p / 2**20) for p in dask_run['loaded_rss']]} MiB with "
              f"fastep's kernels loaded), ratio "
              f"Dask/single {dask_run['s_per_sweep'] / single:.2f}", flush=True)
    if args.save:
        from fastep._version import save_record
        save_record(args.save, "sparse_scaling.py dask", saved, m=M, workers=2)
    if len(rows) >= 2:
        b0, b1 = rows[0][4]["bytes_per_sweep"], rows[-1][4]["bytes_per_sweep"]
        print(f"bytes per sweep at n = {rows[-1][0]:.0e} / at n = {rows[0][0]:.0e}: "
              f"{b1 / b0:.3f}")
    if args.dask_only:
        return
    n, _, _, _, run = rows[-1]
    per_row = run["s_per_sweep"] * 2 / n           # worker-seconds per row per sweep
    workers, big = 100, 1e9
    compute = per_row * big / workers
    levels = math.ceil(math.log2(workers))
    reduce_s = 2 * levels * (8 * M * M / 1e9 + 1e-3)   # sums up, q down; 1 GB/s, 1 ms hops
    tasks = 3 * big / 2 ** 18             # sweep, report, sum per chunk of 2^18 rows
    sched = tasks * 2e-4                                # 0.2 ms of scheduler time a task
    print(f"projection n = 1e9 on {workers} workers (1e7 rows each): compute "
          f"{compute:.1f} s (measured {per_row * 1e6:.2f} worker-s per 1e6 rows) + tree "
          f"reduction and broadcast {reduce_s:.3f} s ({levels} levels of {8 * M * M / 2**20:.1f}"
          f" MiB at 1 GB/s, 1 ms a hop) + scheduler {sched:.1f} s ({tasks:.0f} tasks at "
          f"0.2 ms) = {compute + reduce_s + sched:.1f} s per sweep")


# =========================================================================================
# the command line
# =========================================================================================
#: subcommand -> (its entry point, taking the arguments after the subcommand; its method)
COMMANDS = {
    "passes": (passes_main, PASSES_DOC),
    "evaluation": (evaluation_main, EVALUATION_DOC),
    "dask": (dask_main, DASK_DOC),
}
EPILOG = """subcommands (python scripts/sparse_scaling.py COMMAND --help: method, options):
  passes      passes over the data to tol: chunk-sequential against parallel schedule
              (was sparse_passes.py)
  evaluation  one sparse ML-II evaluation, part by part, in passes (was sparse_evaluation.py)
  dask        sparse EP on Dask against the threaded in-process sweep (was dask_scaling.py)"""


def command_parser(command, doc):
    """The argument parser of one subcommand: its method as the description."""
    return argparse.ArgumentParser(prog=f"sparse_scaling.py {command}", description=doc,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in COMMANDS:
        return COMMANDS[argv[0]][0](argv[1:])
    return scaling_main(argv)


if __name__ == "__main__":
    sys.exit(main())
