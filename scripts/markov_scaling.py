"""State-space EP in O(n): one EP iteration's time per point against its floor.

For n in ``--sizes`` (Poisson counts on a regular daily grid, f drawn from a Matern-3/2
with lengthscale 30; ``--irregular`` jitters the times), this prints the median over
``--repeats`` of one :func:`fastep.inference.markov_ep.markov_ep` iteration (filter,
smoother, cavities, tilted moments, site update: ``(t(max_iter=4) - t(max_iter=1)) /
3``), per point, and its floor measured in the same run: one Kalman filter + RTS smoother
pass at the same n and state size (the compiled ``filter_smooth`` alone, fixed sites) plus
one vectorised ``likelihood.tilted`` of the n sites; then the ratio iteration / floor and
the spread of the per-point times across n (``--check``: ratio at most 3, spread at most
1.3), and the process's peak memory.

``--panel`` times one EP iteration (as above) on 1,000 series of 1,000 points (a series
id per row) with all threads and with one (``numba.set_num_threads``), and on one series
of 10^6 points, and prints the ratios (the panel's series are filtered in parallel).

``--routes N`` fits a daily count series of N days (a yearly and a weekly cycle and a
trend, Poisson; every third day held out) with ``EPGaussianProcessRegressor(
likelihood="poisson")`` three ways, ML-II included: ``inference="markov"`` (kernel
Matern32 + Matern12), sparse EP with 256 inducing points (the same kernel) and, up to
3,000 days, dense EP; it prints each fit's time, its held-out log predictive density and
the sparse / state-space time ratio (``--check``: at least 10, at a density no worse).

    python scripts/markov_scaling.py [--sizes 100000 1000000 10000000] [--repeats 3]
                                     [--routes 10000] [--check]
"""
import argparse
import statistics
import sys
import time
import warnings

import numpy as np

import fastep
from fastep.inference._kalman import filter_smooth
from fastep.inference.markov_ep import markov_ep
from fastep.kernels import Matern32
from fastep.kernels.statespace import state_space
from fastep.likelihoods import Poisson


def data(n, irregular, seed=0):
    rng = np.random.default_rng(seed)
    t = np.arange(n, dtype=float)
    if irregular:
        t += rng.uniform(-0.45, 0.45, n)
    # a smooth rate without an O(n^2) draw: a few sinusoids
    f = 0.8 * np.sin(t / 30.0) + 0.5 * np.sin(t / 7.3 + 1.0)
    return t, rng.poisson(np.exp(f)).astype(float)


def panel_times(repeats):
    """(one series of 10^6, panel on one thread, panel on all threads): median seconds
    of one EP iteration."""
    import numba
    kernel, lik = Matern32(1.0, 30.0), Poisson()
    t, y = data(1_000_000, False)
    ids = np.repeat(np.arange(1000), 1000)
    tp = np.tile(np.arange(1000.0), 1000)

    def iteration(**kw):
        times = []
        for _ in range(repeats):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", fastep.ConvergenceWarning)
                t0 = time.perf_counter()
                markov_ep(kw["t"], y, kernel, lik, series=kw.get("series"), max_iter=1, tol=0.0)
                t1 = time.perf_counter()
                markov_ep(kw["t"], y, kernel, lik, series=kw.get("series"), max_iter=4,
                          tol=0.0)
                times.append(((time.perf_counter() - t1) - (t1 - t0)) / 3.0)
        return statistics.median(times)

    one = iteration(t=t)
    panel = iteration(t=tp, series=ids)
    threads = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        panel1 = iteration(t=tp, series=ids)
    finally:
        numba.set_num_threads(threads)
    return one, panel1, panel


def routes(n, seed=0):
    """{route: (seconds, held-out mean log predictive density)} on N daily counts."""
    from fastep import EPGaussianProcessRegressor
    from fastep.kernels import Matern12
    rng = np.random.default_rng(seed)
    t = np.arange(n, dtype=float)
    f = (0.6 * np.sin(2 * np.pi * t / 365.25) + 0.4 * np.sin(2 * np.pi * t / 7.0)
         + 0.5 * t / n + 1.0)
    y = rng.poisson(np.exp(f)).astype(float)
    test = np.arange(n) % 3 == 2
    X = t[:, None]
    out = {}
    runs = {"state-space": dict(inference="markov"), "sparse m=256": dict(n_inducing=256)}
    if n <= 3000:
        runs["dense"] = dict(n_inducing=None)
    for name, kw in runs.items():
        kernel = Matern32(1.0, 30.0) + Matern12(0.3, 3.0)
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            est = EPGaussianProcessRegressor(kernel, likelihood="poisson", random_state=0,
                                             **kw).fit(X[~test], y[~test])
        sec = time.perf_counter() - t0
        mean, std = est.predict_latent(X[test], return_std=True)
        lpd = float(np.mean(est.likelihood_.log_predictive_density(y[test], mean, std ** 2)))
        out[name] = (sec, lpd, est.kernel_, est.log_marginal_likelihood_value_)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--irregular", action="store_true")
    ap.add_argument("--routes", type=int, default=0, metavar="N")
    ap.add_argument("--panel", action="store_true")
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args(argv)
    bad = False
    if args.panel:
        one, panel1, panel = panel_times(args.repeats)
        print(f"one EP iteration: one series of 10^6 points {one:.3f} s; 1,000 series of "
              f"1,000 points {panel:.3f} s (one thread {panel1:.3f} s): panel / series "
              f"{panel / one:.2f}, one thread / all threads {panel1 / panel:.2f}")
    if args.routes:
        res = routes(args.routes)
        print(f"daily counts, {args.routes:,} days (every third held out):")
        for name, (sec, lpd, kernel, evidence) in res.items():
            print(f"  {name:14s} {sec:8.2f} s   held-out log density {lpd:.4f}   "
                  f"log evidence {evidence:.2f}   {kernel}")
        ratio = res["sparse m=256"][0] / res["state-space"][0]
        print(f"  sparse / state-space time: {ratio:.1f}x")
        bad |= ratio < 10 or res["state-space"][1] < res["sparse m=256"][1] - 1e-3
    kernel, lik = Matern32(1.0, 30.0), Poisson()
    ss = state_space(kernel)
    t, y = data(2000, args.irregular)
    markov_ep(t, y, kernel, lik, max_iter=2)                      # compile
    per_point = []
    print(f"{'n':>11s} {'iteration':>10s} {'floor':>10s} {'us/point':>9s} {'ratio':>6s}")
    for n in args.sizes:
        t, y = data(n, args.irregular)
        iters, floors = [], []
        for _ in range(args.repeats):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", fastep.ConvergenceWarning)
                t0 = time.perf_counter()
                markov_ep(t, y, kernel, lik, max_iter=1, tol=0.0)
                t1 = time.perf_counter()
                markov_ep(t, y, kernel, lik, max_iter=4, tol=0.0)
                t2 = time.perf_counter()
            iters.append(((t2 - t1) - (t1 - t0)) / 3.0)
            D = ss.n_states
            tau, nu = np.full(n, 0.5), np.zeros(n)
            mf, Pf = np.empty((n, D)), np.empty((n, D, D))
            mean, var, ln = np.empty(n), np.empty(n), np.empty(1)
            starts = np.array([0, n], dtype=np.int64)
            t3 = time.perf_counter()
            filter_smooth(t, tau, nu, starts, ss.order, ss.lam, ss.variance, mf, Pf, mean,
                          var, ln, True)
            lik.tilted(y, mean, var)
            floors.append(time.perf_counter() - t3)
            del mf, Pf
        it, fl = statistics.median(iters), statistics.median(floors)
        per_point.append(it / n)
        ratio = it / fl
        bad |= ratio > 3.0
        print(f"{n:11,d} {it:9.3f}s {fl:9.3f}s {1e6 * it / n:9.3f} {ratio:6.2f}")
    spread = max(per_point) / min(per_point)
    print(f"time per point, largest / smallest over n: {spread:.2f}")
    import resource
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20
    print(f"peak resident memory of this process: {peak:.2f} GB")
    bad |= spread > 1.3
    return 1 if (args.check and bad) else 0


if __name__ == "__main__":
    sys.exit(main())
