"""How close is dense EP to the cost of the linear algebra it cannot avoid?

For each n, on seeded synthetic probit data (X ~ N(0, I_3), y = sign(f(X) + N(0, 1)),
K = RBF(variance=1, lengthscale=1)(X), nothing added to K), this prints the median over
``--repeats`` interleaved runs, all in one process, of

* one parallel / one sequential EP sweep: ``(t(max_iter=6) - t(max_iter=2)) / 4`` of
  ``fastep.ep(K, y, Probit(), method=m, tol=1e-300, check_psd=False)``;
* a converged fixed-hyperparameter fit: ``EPGaussianProcessClassifier(RBF(1, 1),
  optimizer=None, tol=1e-4, n_inducing=None).fit(X, y)`` (dense at every n: the default
  goes sparse above 3,000 rows), i.e. input validation, Gram matrix, all sweeps and the
  evidence (the estimator-to-estimator comparison with scikit-learn below);
* the floor: ``L = scipy.linalg.cholesky(K + I, lower=True)`` plus
  ``scipy.linalg.lapack.dtrtri(L, lower=1)`` (L^-1), the LAPACK work of one posterior
  refresh of a parallel sweep, timed with the BLAS threads as configured and with one
  thread (threadpoolctl); the faster of the two is the floor;
* fastep's own factor-and-invert, :func:`fastep._linalg.cholesky_inverse_inplace` on a
  copy of ``K + I`` (the same flops as the floor, in a recursion of ``dtrmm``/``dsyrk``
  calls that OpenBLAS runs faster than ``dpotrf`` + ``dtrtri``; what a parallel sweep's
  refresh has run since 0.3), with the BLAS threads as configured ("fused"), and its
  ratio to the floor.  (Up to 0.3 the refresh
  formed V = L^-1 S^1/2 K, and the floor had ``solve_triangular(L, K)``, n x n right-hand
  side, in place of ``dtrtri``: about 1.5x this floor at n = 4,000.  A sequential sweep
  still forms V, so its limit below is the old 3 x that floor, 4.5 x this one);
* scikit-learn's Laplace ``GaussianProcessClassifier(RBF(1.0), optimizer=None).fit(X, y)``;

and the ratios sweep/floor, seq sweep/floor, fit/floor and fit/sklearn.  JIT compilation is
paid before timing.  ``--likelihoods`` adds, per n, one parallel sweep (same K, same
definition) for each of the other likelihoods on targets drawn from the same f (Poisson
and negative-binomial counts with rate exp(f), Student-t, 4-level ordinal) and its ratio
to the probit sweep, interleaved with it.  ``--check`` exits 1 if, at the largest n,
parallel sweep/floor > 1.3, sequential sweep/floor > 4.5 or fit/floor > 8 (a report for
humans, not a test).

    python scripts/ep_floor.py [--sizes 1000 2000 4000] [--repeats 5] [--check] [--likelihoods]
"""
import argparse
import os
import statistics
import sys
import time
import warnings

import numpy as np
import scipy.linalg
import scipy.linalg.lapack

import fastep
from fastep._linalg import cholesky_inverse_inplace
from fastep.kernels import RBF
from fastep.likelihoods import Probit

LIMITS = {"par/floor": 1.3, "seq/floor": 4.5, "fit/floor": 8.0}


def make_data(n, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 3))
    f = np.sin(2.0 * X[:, 0]) + X[:, 1] * X[:, 2]
    y = np.where(f + rng.standard_normal(n) > 0.0, 1.0, -1.0)
    return X, y


def run_ep(K, y, method, max_iter):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", fastep.ConvergenceWarning)
        return fastep.ep(K, y, Probit(), method=method, max_iter=max_iter, tol=1e-300,
                         check_psd=False)


def other_likelihoods(n, seed=0):
    """(name, likelihood, targets) of the likelihoods --likelihoods compares with probit."""
    from fastep.likelihoods import NegativeBinomial, OrdinalProbit, Poisson, StudentT
    X, y = make_data(n, seed)
    rng = np.random.default_rng(seed + 1)
    f = np.sin(2.0 * X[:, 0]) + X[:, 1] * X[:, 2]
    counts = rng.poisson(np.exp(f)).astype(float)
    return X, [("probit", Probit(), y), ("poisson", Poisson(), counts),
               ("neg-binomial", NegativeBinomial(2.0), counts),
               ("ordinal K=4", OrdinalProbit([-1.0, 0.0, 1.0]),
                np.digitize(f + rng.standard_normal(n), [-1.0, 0.0, 1.0]).astype(float)),
               ("student-t", StudentT(4.0, 0.3), f + 0.3 * rng.standard_t(4.0, n))]


def likelihood_sweeps(n, repeats):
    """Median parallel-sweep seconds per likelihood, interleaved."""
    X, cases = other_likelihoods(n)
    K = RBF(1.0, 1.0)(X)

    def run(lik, y, k):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fastep.ep(K, y, lik, method="parallel", max_iter=k, tol=1e-300, check_psd=False)

    for _, lik, y in cases:                                   # JIT warm-up
        run(lik, y[:n], 2)
    times = {name: [] for name, _, _ in cases}
    for _ in range(repeats):
        for name, lik, y in cases:
            t = []
            for k in (2, 6):
                t0 = time.perf_counter()
                run(lik, y, k)
                t.append(time.perf_counter() - t0)
            times[name].append((t[1] - t[0]) / 4)
    return {name: statistics.median(v) for name, v in times.items()}


def sklearn_fit():
    try:
        from sklearn.gaussian_process import GaussianProcessClassifier
        from sklearn.gaussian_process.kernels import RBF as SkRBF
    except ImportError:
        return None
    return lambda X, y: GaussianProcessClassifier(kernel=SkRBF(1.0), optimizer=None).fit(X, y)


def measure(n, repeats, skl):
    """Median seconds of each task; tasks are interleaved so load drift hits all alike."""
    X, y = make_data(n)
    K = RBF(1.0, 1.0)(X)
    A = K + np.eye(n)

    def floor():
        L = scipy.linalg.cholesky(A, lower=True, check_finite=False)
        scipy.linalg.lapack.dtrtri(L, lower=1)

    def floor_1thread():
        from threadpoolctl import threadpool_limits
        with threadpool_limits(1, user_api="blas"):
            floor()

    def fused():
        cholesky_inverse_inplace(np.array(A, order="F"))

    tasks = {"floor_mt": floor, "floor_1t": floor_1thread, "fused": fused,
             "fit": lambda: fastep.EPGaussianProcessClassifier(
                 RBF(1.0, 1.0), optimizer=None, tol=1e-4, n_inducing=None).fit(X, y)}
    for m in ("parallel", "sequential"):
        for k in (2, 6):
            tasks[m, k] = lambda m=m, k=k: run_ep(K, y, m, k)
    if skl is not None:
        tasks["sklearn"] = lambda: skl(X, y)
    times = {name: [] for name in tasks}
    for _ in range(repeats):
        for name, fn in tasks.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    med = {name: statistics.median(t) for name, t in times.items()}
    # the floor is the faster of the two BLAS settings: on small VMs the threaded
    # OpenBLAS dpotrf is pathologically slow, and that must not flatter the ratios
    med["floor"] = min(med["floor_mt"], med["floor_1t"])
    for m in ("parallel", "sequential"):
        med[m] = (med[m, 6] - med[m, 2]) / 4
    med["sweeps"] = fastep.ep(K, y, Probit()).n_iter
    return med


def machine_info():
    lines = [f"cores: {os.cpu_count()}; load average {os.getloadavg()[0]:.2f}"]
    try:
        from threadpoolctl import threadpool_info
        for p in threadpool_info():
            if p["user_api"] == "blas":
                owner = os.path.basename(os.path.dirname(p["filepath"]))
                lines.append(f"BLAS ({owner}): {p['internal_api']} {p['version']}, "
                             f"{p.get('threading_layer')}, {p['num_threads']} threads, "
                             f"{p.get('architecture')}")
    except ImportError:
        lines.append("BLAS (numpy): " + np.__config__.CONFIG["Build Dependencies"]["blas"]["name"])
    return lines


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 2000, 4000])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--likelihoods", action="store_true",
                    help="also time a parallel sweep of every other likelihood against probit")
    ap.add_argument("--check", action="store_true",
                    help=f"exit 1 if a ratio at the largest n exceeds its limit {LIMITS}")
    ap.add_argument("--save", metavar="JSON",
                    help="also write the table (seconds) as JSON, with the environment "
                         "(docs/data/ep_floor.json: the performance page's figure)")
    args = ap.parse_args(argv)

    import numba
    X, y = make_data(100, seed=1)
    for method in ("parallel", "sequential"):             # JIT warm-up
        fastep.ep(RBF(1.0, 1.0)(X), y, Probit(), method=method)
    skl = sklearn_fit()
    print("\n".join(machine_info()))
    print(f"numba {numba.__version__} ({numba.get_num_threads()} threads, "
          f"{numba.threading_layer()}), numpy {np.__version__}, scipy {scipy.__version__}")
    print("floor = scipy.linalg.cholesky(K + I, lower=True) + scipy.linalg.lapack.dtrtri(L, "
          "lower=1), measured in this process with the\n"
          "        BLAS threads as configured and with one thread; the faster of the two\n"
          "fused = fastep._linalg.cholesky_inverse_inplace(K + I) (the same flops), threads "
          "as configured")
    print(f"times in ms, median of {args.repeats} interleaved runs; "
          "sweep = (t[max_iter=6] - t[max_iter=2]) / 4; fit = classifier fit (Gram + EP)")
    cols = ["n", "par sweep", "seq sweep", "fit", "sweeps", "floor(mt)", "floor(1t)", "fused",
            "sklearn", "par/floor", "seq/floor", "fit/floor", "fit/sklearn", "fused/floor"]
    print("".join(f"{c:>12}" for c in cols))

    rows = []
    for n in sorted(args.sizes):
        t = measure(n, args.repeats, skl)
        rows.append({"n": n, **{k: float(v) for k, v in t.items() if isinstance(k, str)}})
        ratios = {"par/floor": t["parallel"] / t["floor"],
                  "seq/floor": t["sequential"] / t["floor"], "fit/floor": t["fit"] / t["floor"]}
        ms = [f"{1e3 * t[k]:12.1f}" for k in ("parallel", "sequential", "fit")]
        sk = (f"{1e3 * t['sklearn']:12.1f}", f"{t['fit'] / t['sklearn']:12.2f}") \
            if "sklearn" in t else (f"{'n/a':>12}",) * 2
        print(f"{n:12d}" + "".join(ms) + f"{t['sweeps']:12d}{1e3 * t['floor_mt']:12.1f}"
              f"{1e3 * t['floor_1t']:12.1f}{1e3 * t['fused']:12.1f}" + sk[0]
              + "".join(f"{r:12.2f}" for r in ratios.values()) + sk[1]
              + f"{t['fused'] / t['floor']:12.2f}", flush=True)

    if args.save:
        from fastep._version import save_record
        save_record(args.save, "ep_floor.py", rows, repeats=args.repeats)

    if args.likelihoods:
        print("\none parallel EP sweep per likelihood (ms, median of interleaved runs) and its "
              "ratio to the probit sweep on the same K")
        for n in sorted(args.sizes):
            t = likelihood_sweeps(n, args.repeats)
            print(f"n = {n}: " + "; ".join(f"{name} {1e3 * v:.1f} ({v / t['probit']:.2f}x)"
                                           for name, v in t.items()), flush=True)

    if args.check:
        bad = [f"{k} = {v:.2f} > {LIMITS[k]}" for k, v in ratios.items() if v > LIMITS[k]]
        print(f"check at n={n}: " + ("; ".join(bad) if bad else "ok"))
        return 1 if bad else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
