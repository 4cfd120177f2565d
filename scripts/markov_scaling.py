"""State-space EP in O(n): one EP iteration's time per point against its floor.

For n in ``--sizes`` (Poisson counts on a regular daily grid, f drawn from a Matern-3/2
with lengthscale 30; ``--irregular`` jitters the times), this prints the median over
``--repeats`` of one :func:`fastep.inference.markov_ep.markov_ep` iteration (filter,
smoother, cavities, tilted moments, site update: ``(t(max_iter=4) - t(max_iter=1)) /
3``), per point, and its floor measured in the same run: one Kalman filter + RTS smoother
pass at the same n and state size (the compiled ``filter_smooth`` alone, fixed sites, reading
the steps' transitions that ``markov_ep`` computes once a run where the times are
irregular, :func:`fastep.inference._transitions.step_cache`, made before the clock as there)
plus one vectorised ``likelihood.tilted`` of the n sites; then the ratio iteration / floor and
the spread of the per-point times across n (``--check``: ratio at most 3, spread at most
1.3), the process's peak memory and ``markov_ep``'s own peak allocation at the largest n
(``--check``: under 3 GB at 10^7).

``--panel`` times one EP iteration (as above) on 1,000 series of 1,000 points (a series
id per row) with all threads and with one (``numba.set_num_threads``), and on one series
of 10^6 points, and prints the ratios (the panel's series are filtered in parallel); then
the same with the kernel learnt: the whole ``EPGaussianProcessRegressor(Matern32(1, 10),
likelihood="poisson", inference="markov").fit`` (ML-II included) on the panel (X = time,
series id; each series its own phase of the same two cycles) and on one series of 10^6
points, and the panel's fit on one thread (``--check``: panel at most 2x the series, one
thread at least 1.6x all).

``--routes N`` fits a daily count series of N days (a yearly and a weekly cycle and a
trend, Poisson; every third day held out) with ``EPGaussianProcessRegressor(
likelihood="poisson")`` three ways, ML-II included: ``inference="markov"`` (kernel
Matern32 + Matern12), sparse EP with 256 inducing points (the same kernel) and, up to
3,000 days, dense EP; each route's compiled code is loaded by a fit of 100 days first (a
process's first fit pays the loading of Numba's cache, and the routes share kernels);
it prints each fit's time, its held-out log predictive density and the sparse /
state-space time ratio (``--check``: at least 10, at a density no worse).

``--bayesnewton PYTHON`` runs the peer, BayesNewton's ``MarkovExpectationPropagationGP``
(Matern32 with the same variance and lengthscale, its ``Poisson`` likelihood, EP power 1,
undamped, Gauss-Hermite moments with ``--cubature`` points), in the Python of its own
environment (``--build-bayesnewton DIR`` makes one: bayesnewton 1.3.4, jax and jaxlib
0.4.13, objax 1.7.0, numpy 1.26, and what they import), on the data of ``--sizes``
(regular, and with ``--irregular`` jittered times), handed over in a temporary ``.npz``:
one of its EP iterations (``model.inference``, jitted by objax; compiled before the clock
starts) per point, fastep's in the same run, the ratio, and the largest difference of the
two posteriors' marginal means and standard deviations after both ran to convergence
(``--check``: ratio at least 3, marginals within 1e-5).

    python scripts/markov_scaling.py [--sizes 100000 1000000 10000000] [--repeats 3]
                                     [--routes 10000] [--panel] [--check]
    python scripts/markov_scaling.py --build-bayesnewton .bayesnewton
    python scripts/markov_scaling.py --bayesnewton .bayesnewton/bin/python [--irregular]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

import numpy as np

BAYESNEWTON = ["bayesnewton==1.3.4", "jax==0.4.13", "jaxlib==0.4.13", "objax==1.7.0",
               "numpy==1.26.4", "scipy<1.12", "numba<0.60", "six"]
#: Matern32 of the timing runs (f's lengthscale is about 30 days; see :func:`data`)
VARIANCE, LENGTHSCALE = 1.0, 30.0


def bayesnewton_child(path, cubature, repeats):
    """In BayesNewton's environment: its EP iteration's median seconds on the data at
    ``path``, and its marginals after iterating to convergence (as JSON on stdout)."""
    import bayesnewton
    import objax
    d = np.load(path)
    t, y = d["t"], d["y"]
    model = bayesnewton.models.MarkovExpectationPropagationGP(
        kernel=bayesnewton.kernels.Matern32(variance=VARIANCE, lengthscale=LENGTHSCALE),
        likelihood=bayesnewton.likelihoods.Poisson(), X=t, Y=y)
    cub = bayesnewton.cubature.GaussHermite(num_cub_points=cubature)
    step = objax.Jit(objax.Function(lambda: model.inference(lr=1.0, power=1.0, cubature=cub),
                                    model.vars()))
    step()[1][0].block_until_ready()                         # compile
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        step()[1][0].block_until_ready()
        times.append(time.perf_counter() - t0)
    for it in range(500):
        (_, (d1, d2)) = step()
        if max(float(d1), float(d2)) < 1e-12:
            break
    mean = np.asarray(model.posterior_mean.value).ravel()
    var = np.asarray(model.posterior_variance.value).ravel()
    out = path + ".out.npz"
    np.savez(out, mean=mean, var=var)
    print(json.dumps({"seconds": statistics.median(times), "iterations": it + 1,
                      "marginals": out}))


if __name__ == "__main__" and "--bayesnewton-child" in sys.argv:
    _, _, _path, _cub, _rep = sys.argv
    bayesnewton_child(_path, int(_cub), int(_rep))
    sys.exit(0)

import fastep  # noqa: E402
from fastep.inference._kalman import filter_smooth  # noqa: E402
from fastep.inference._transitions import step_cache  # noqa: E402
from fastep.inference.markov_ep import markov_ep  # noqa: E402
from fastep.kernels import Matern32  # noqa: E402
from fastep.kernels.statespace import state_space  # noqa: E402
from fastep.likelihoods import Poisson  # noqa: E402


def data(n, irregular, seed=0):
    rng = np.random.default_rng(seed)
    t = np.arange(n, dtype=float)
    if irregular:
        t += rng.uniform(-0.45, 0.45, n)
    # a smooth rate without an O(n^2) draw: a few sinusoids
    f = 0.8 * np.sin(t / 30.0) + 0.5 * np.sin(t / 7.3 + 1.0)
    return t, rng.poisson(np.exp(f)).astype(float)


def iteration_seconds(t, y, kernel, lik, repeats, **kw):
    """Median seconds of one markov_ep iteration: (4 iterations - 1) / 3."""
    times = []
    for _ in range(repeats):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", fastep.ConvergenceWarning)
            t0 = time.perf_counter()
            markov_ep(t, y, kernel, lik, max_iter=1, tol=0.0, **kw)
            t1 = time.perf_counter()
            markov_ep(t, y, kernel, lik, max_iter=4, tol=0.0, **kw)
            times.append(((time.perf_counter() - t1) - (t1 - t0)) / 3.0)
    return statistics.median(times)


def panel_times(repeats):
    """(one series of 10^6, panel on one thread, panel on all threads): median seconds
    of one EP iteration."""
    import numba
    kernel, lik = Matern32(1.0, 30.0), Poisson()
    t, y = data(1_000_000, False)
    ids = np.repeat(np.arange(1000), 1000)
    tp = np.tile(np.arange(1000.0), 1000)

    one = iteration_seconds(t, y, kernel, lik, repeats)
    panel = iteration_seconds(tp, y, kernel, lik, repeats, series=ids)
    threads = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        panel1 = iteration_seconds(tp, y, kernel, lik, repeats, series=ids)
    finally:
        numba.set_num_threads(threads)
    return one, panel1, panel


def against_bayesnewton(python, sizes, irregular, cubature, repeats):
    """Per size: (fastep's and BayesNewton's seconds per EP iteration, the largest
    differences of the converged marginal means and standard deviations)."""
    kernel, lik = Matern32(VARIANCE, LENGTHSCALE), Poisson()
    rows = []
    for n in sizes:
        t, y = data(n, irregular)
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "data.npz")
            np.savez(path, t=t, y=y)
            run = subprocess.run([python, os.path.abspath(__file__), "--bayesnewton-child",
                                  path, str(cubature), str(repeats)],
                                 capture_output=True, text=True)
            if run.returncode:
                sys.exit(f"BayesNewton failed:\n{run.stderr[-4000:]}")
            peer = json.loads(run.stdout.strip().splitlines()[-1])
            theirs = np.load(peer["marginals"])
            mean_bn, sd_bn = theirs["mean"], np.sqrt(theirs["var"])
        ours = iteration_seconds(t, y, kernel, lik, repeats)
        res = markov_ep(t, y, kernel, lik, tol=1e-12, max_iter=1000)
        rows.append((n, ours, peer["seconds"], peer["iterations"], res.n_iter,
                     float(np.max(np.abs(res.mean - mean_bn))),
                     float(np.max(np.abs(np.sqrt(res.var) - sd_bn)))))
    return rows


def panel_fits():
    """Seconds of the whole learnt-kernel fit: (one series of 10^6, panel on one thread,
    panel on all threads), and the panel's fitted kernel."""
    import numba
    from fastep import EPGaussianProcessRegressor
    rng = np.random.default_rng(0)
    tp = np.tile(np.arange(1000.0), 1000)
    ids = np.repeat(np.arange(1000.0), 1000)
    phase = rng.uniform(0.0, 2.0 * np.pi, 1000)[ids.astype(int)]
    yp = rng.poisson(np.exp(0.8 * np.sin(tp / 30.0 + phase)
                            + 0.5 * np.sin(tp / 7.3 + 1.0))).astype(float)
    t, y = data(1_000_000, False)

    def fit(X, yy):
        est = EPGaussianProcessRegressor(Matern32(1.0, 10.0), likelihood="poisson",
                                         inference="markov")
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", fastep.ConvergenceWarning)
            est.fit(X, yy)
        return time.perf_counter() - t0, est.kernel_

    one, _ = fit(t[:, None], y)
    panel, kernel = fit(np.c_[tp, ids], yp)
    threads = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        panel1, _ = fit(np.c_[tp, ids], yp)
    finally:
        numba.set_num_threads(threads)
    return one, panel1, panel, kernel


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
    # each route's compiled code loaded (from Numba's cache) before any clock starts: the
    # first fit in a process pays it, and would otherwise charge the kernels the routes
    # share (the Poisson moments, the Gram, ML-II) to whichever route ran first
    for kw in runs.values():
        small = dict(kw, n_inducing=32) if kw.get("n_inducing") else kw
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            EPGaussianProcessRegressor(Matern32(1.0, 30.0) + Matern12(0.3, 3.0),
                                       likelihood="poisson", random_state=0,
                                       **small).fit(X[:300:3], y[:300:3])
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
    ap.add_argument("--save", metavar="JSON",
                    help="also write the per-point table as JSON, with the environment "
                         "(docs/data/markov_scaling.json: the performance page's figure)")
    ap.add_argument("--bayesnewton", metavar="PYTHON",
                    help="the python of BayesNewton's environment: time it against fastep")
    ap.add_argument("--cubature", type=int, default=40,
                    help="Gauss-Hermite points of BayesNewton's moments")
    ap.add_argument("--build-bayesnewton", metavar="DIR",
                    help="create BayesNewton's environment in DIR")
    args = ap.parse_args(argv)
    bad = False
    if args.build_bayesnewton:
        subprocess.run([sys.executable, "-m", "venv", args.build_bayesnewton], check=True)
        pip = os.path.join(args.build_bayesnewton, "bin", "pip")
        subprocess.run([pip, "install", "-q", "--upgrade", "pip"], check=True)
        subprocess.run([pip, "install", "-q"] + BAYESNEWTON, check=True)
        print(f"BayesNewton environment: {os.path.join(args.build_bayesnewton, 'bin', 'python')}")
        return 0
    if args.bayesnewton:
        kind = "irregular" if args.irregular else "regular"
        print(f"Poisson, Matern32({VARIANCE:g}, {LENGTHSCALE:g}), {kind} times: one EP "
              f"iteration, fastep against BayesNewton (Gauss-Hermite, {args.cubature} points)")
        print(f"{'n':>11s} {'fastep us/pt':>12s} {'BN us/pt':>9s} {'BN/fastep':>9s} "
              f"{'iters BN':>8s} {'fastep':>6s} {'|d mean|':>9s} {'|d sd|':>9s}")
        for n, ours, theirs, it_bn, it_f, dm, ds in against_bayesnewton(
                args.bayesnewton, args.sizes, args.irregular, args.cubature, args.repeats):
            print(f"{n:11,d} {1e6 * ours / n:12.3f} {1e6 * theirs / n:9.3f} "
                  f"{theirs / ours:9.2f} {it_bn:8d} {it_f:6d} {dm:9.1e} {ds:9.1e}",
                  flush=True)
            bad |= theirs / ours < 3.0 or max(dm, ds) > 1e-5
        return 1 if (args.check and bad) else 0
    if args.panel:
        one, panel1, panel = panel_times(args.repeats)
        print(f"one EP iteration: one series of 10^6 points {one:.3f} s; 1,000 series of "
              f"1,000 points {panel:.3f} s (one thread {panel1:.3f} s): panel / series "
              f"{panel / one:.2f}, one thread / all threads {panel1 / panel:.2f}")
        one, panel1, panel, kernel = panel_fits()
        print(f"whole fit, kernel learnt: one series of 10^6 points {one:.1f} s; 1,000 series "
              f"of 1,000 points {panel:.1f} s (one thread {panel1:.1f} s): panel / series "
              f"{panel / one:.2f}, one thread / all threads {panel1 / panel:.2f}; {kernel}")
        bad |= panel / one > 2.0 or panel1 / panel < 1.6
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
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", fastep.ConvergenceWarning)
        markov_ep(t, y, kernel, lik, max_iter=2)                  # compile
    per_point, rows = [], []
    print(f"{'n':>11s} {'iteration':>10s} {'floor':>10s} {'us/point':>9s} {'ratio':>6s}")
    for n in args.sizes:
        t, y = data(n, args.irregular)
        iters, floors = [], []
        for _ in range(args.repeats):
            iters.append(iteration_seconds(t, y, kernel, lik, 1))
            D = ss.n_states
            tau, nu = np.full(n, 0.5), np.zeros(n)
            mf, Pf = np.empty((n, D)), np.empty((n, D, D))
            mean, var, ln = np.empty(n), np.empty(n), np.empty(1)
            starts = np.array([0, n], dtype=np.int64)
            cache = step_cache(t, starts, ss)           # as markov_ep, once a run
            t3 = time.perf_counter()
            filter_smooth(t, tau, nu, starts, *ss.arrays, mf, Pf, mean, var, ln, True, *cache)
            lik.tilted(y, mean, var)
            floors.append(time.perf_counter() - t3)
            del mf, Pf
        it, fl = statistics.median(iters), statistics.median(floors)
        per_point.append(it / n)
        rows.append({"n": n, "iteration": it, "floor": fl})
        ratio = it / fl
        bad |= ratio > 3.0
        print(f"{n:11,d} {it:9.3f}s {fl:9.3f}s {1e6 * it / n:9.3f} {ratio:6.2f}")
    spread = max(per_point) / min(per_point)
    print(f"time per point, largest / smallest over n: {spread:.2f}")
    if args.save:
        from fastep._version import save_record
        save_record(args.save, "markov_scaling.py", rows, irregular=args.irregular,
                    kernel=repr(kernel), likelihood="Poisson")
    import resource
    import tracemalloc
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20
    print(f"peak resident memory of this process: {peak:.2f} GB (the data and the floor's "
          f"buffers included)")
    # markov_ep's own memory at the largest n: NumPy reports its allocations to tracemalloc
    tracemalloc.start()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", fastep.ConvergenceWarning)
        markov_ep(t, y, kernel, lik, max_iter=2, tol=0.0)
    own = tracemalloc.get_traced_memory()[1] / 2 ** 30
    tracemalloc.stop()
    print(f"markov_ep's peak allocation at n = {t.size:,}: {own:.2f} GB "
          f"({own * 2 ** 30 / t.size:.0f} bytes a point)")
    bad |= spread > 1.3 or (t.size >= 10_000_000 and own > 3.0)
    return 1 if (args.check and bad) else 0


if __name__ == "__main__":
    sys.exit(main())
