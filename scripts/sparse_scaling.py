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
"""
import argparse
import json
import resource
import statistics
import subprocess
import sys
import time

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


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
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
    args = ap.parse_args()
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


if __name__ == "__main__":
    sys.exit(main())
