"""Sparse EP on Dask against the single-process threaded sweep, n in {1e6, 1e7}.

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

    python scripts/dask_scaling.py                       # n = 1e6 and 1e7 (about 30 min)
    python scripts/dask_scaling.py --n 1000000 --single-sweeps 2
"""
from __future__ import annotations

import argparse
import math
import os
import time
import warnings

import numpy as np

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


def single_process(path, sweeps):
    """Median seconds per parallel sweep in this process (threads), X in memory."""
    import zarr
    from fastep import sparse_ep
    from fastep.kernels import RBF
    from fastep.likelihoods import Probit
    root = zarr.open_group(path, mode="r")
    X, y = np.ascontiguousarray(root["X"][:]), np.ascontiguousarray(root["y"][:])
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


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
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
    args = ap.parse_args()
    rows = []
    limit = int(args.memory_limit * max(args.n) * (D + 1) * 8)
    if args.memory_limit_mib is not None:
        limit = int(args.memory_limit_mib * 2 ** 20)
    for n in [int(v) for v in args.n]:
        path = f"{args.store}_{n}.zarr"
        make_store(path, n)
        data_bytes = n * (D + 1) * 8
        single = math.nan if args.dask_only else single_process(path, args.single_sweeps)
        dask_run = on_dask(path, limit, args.max_iter)
        rows.append((n, data_bytes, limit, single, dask_run))
        print(f"n = {n:.0e}: data {data_bytes / 2**20:.0f} MiB, memory_limit {limit / 2**20:.0f}"
              f" MiB per worker | single process {single:.2f} s/sweep | Dask {dask_run['sweeps']}"
              f" sweeps (converged {dask_run['converged']}), {dask_run['s_per_sweep']:.2f} "
              f"s/sweep, {dask_run['bytes_per_sweep'] / 2**20:.2f} MiB sent per sweep, peak RSS"
              f" per worker {[round(p / 2**20) for p in dask_run['peak_rss']]} MiB (a worker "
              f"holding nothing: {[round(p / 2**20) for p in dask_run['empty_rss']]} MiB "
              f"started, {[round(p / 2**20) for p in dask_run['loaded_rss']]} MiB with "
              f"fastep's kernels loaded), ratio "
              f"Dask/single {dask_run['s_per_sweep'] / single:.2f}", flush=True)
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


if __name__ == "__main__":
    main()
