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

Subcommands, each the method of a section below (``python scripts/ep_floor.py COMMAND
--help`` prints it and the options):

    python scripts/ep_floor.py large-n --n 16000 --sweeps 3   # dense EP past threaded dpotrf
    python scripts/ep_floor.py damping          # sweeps to tol: this damping rule vs 0.1's
    python scripts/ep_floor.py history --commits 10   # asv's dense EP benchmarks, last commits
"""
import argparse
import math
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import scipy.linalg
import scipy.linalg.lapack

import fastep
from fastep._linalg import cholesky_inverse_inplace
from fastep.datasets import simulate_annotators
from fastep.inference import _sweep
from fastep.kernels import RBF
from fastep.likelihoods import Logistic, MultiAnnotator, Poisson, Probit, StudentT

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


def floor_main(argv=None):
    ap = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter)
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


# =========================================================================================
# large-n (formerly scripts/large_n.py)
# =========================================================================================
LARGE_N_DOC = """\
Dense EP at large n: runs to completion where the bundled OpenBLAS's threaded
``dpotrf`` would crash (n around 16,000 on the 2-core CI machine type).

    python scripts/ep_floor.py large-n --n 16000 --sweeps 3

Prints the time of the Gram matrix, of each EP sweep and the peak memory, and checks
that the result is finite.  fastep factorises matrices above n = 8192 with a blocked
right-looking Cholesky made of LAPACK/BLAS calls on blocks (fastep/_linalg.py).
"""


def large_n_main(argv=None):
    ap = command_parser("large-n", LARGE_N_DOC)
    ap.add_argument("--n", type=int, default=16000)
    ap.add_argument("--sweeps", type=int, default=3)
    args = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    X = rng.normal(size=(args.n, 3))
    y = np.where(X[:, 0] + 0.3 * rng.normal(size=args.n) > 0, 1.0, -1.0)
    t = time.perf_counter()
    K = RBF(lengthscale=1.0)(X)
    print(f"n = {args.n}: Gram matrix {time.perf_counter() - t:.1f} s", flush=True)
    last = [time.perf_counter()]

    def progress(sweep, log_z):
        now = time.perf_counter()
        print(f"  sweep {sweep}: {now - last[0]:.1f} s, log Z_EP = {log_z:.3f}", flush=True)
        last[0] = now

    t = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", fastep.ConvergenceWarning)
        res = fastep.ep(K, y, Probit(), max_iter=args.sweeps, check_psd=False,
                        callback=progress)
    total = time.perf_counter() - t
    finite = all(np.all(np.isfinite(a)) for a in (res.mean, res.var, res.site_tau, res.site_nu))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print(f"EP: {res.n_iter} sweeps in {total:.1f} s, log Z_EP = {res.log_marginal_likelihood:.3f}, "
          f"finite = {finite and np.isfinite(res.log_marginal_likelihood)}, peak RSS {peak:.1f} GiB")


# =========================================================================================
# damping (formerly scripts/damping_sweeps.py)
# =========================================================================================
DAMPING_DOC = """\
Sweeps of adaptive parallel EP: fastep's damping rule against that of fastep 0.1.

fastep 0.1 shrank EP's step by 0.7 whenever the undamped site change grew and never let
it grow back.  The rule now (:class:`fastep.inference._sweep.SweepControl`) also shrinks
a step that swings back slowly, does not shrink one that grows along a steady direction,
and lets a shrunk step grow back after three calm sweeps.  This script counts the sweeps
to tol of dense parallel EP on seeded problems with both rules in the same run (the 0.1
rule re-implemented below, :class:`RuleOf01`) and prints how far apart the two log Z
are.  Sweep counts are deterministic; a sweep costs the same either way.

    python scripts/ep_floor.py damping
"""


ep_module = sys.modules["fastep.inference.ep"]      # fastep.inference.ep is also a function


def problems():
    """(name, K, y, likelihood, tol) of every case."""
    for seed in range(6):
        rng = np.random.default_rng(seed)
        x = rng.uniform(-3, 3, 200)
        f = 0.5 * np.sin(2.7 * x) + 0.4 * x
        y = f + 0.1 * rng.standard_normal(200)
        gross = rng.random(200) < 0.15                      # 15% gross outliers
        y[gross] += rng.standard_normal(gross.sum())
        K = RBF(1.5, 1.0)(x[:, None]) + 1e-8 * np.eye(200)
        yield f"Student-t outliers, seed {seed}", K, y, StudentT(1.2, 0.07), 1e-6
    X, y = make_data(1000)
    for variance in (1.0, 10.0, 100.0):
        K = RBF(variance, 1.0)(X) + 1e-8 * np.eye(1000)
        yield f"probit, variance {variance:g}", K, y, Probit(), 1e-4
        yield f"logistic, variance {variance:g}", K, y, Logistic(), 1e-6
    rng = np.random.default_rng(0)
    X = rng.uniform(-2, 2, (400, 2))
    counts = rng.poisson(np.exp(np.sin(2 * X[:, 0]) + X[:, 1])).astype(float)
    yield "Poisson", RBF(1.0, 1.0)(X) + 1e-8 * np.eye(400), counts, Poisson(), 1e-6
    sens, spec = [0.9, 0.85, 0.8, 0.75, 0.5, 0.5, 0.3, 0.2], [0.85, 0.9, 0.75, 0.8, 0.5, 0.4,
                                                              0.3, 0.25]
    for seed, n in ((0, 600), (1, 300)):            # a crowd with spammers, RBF(60, 1.2)
        rng = np.random.default_rng(seed)
        X = rng.normal(size=(n, 3))
        z = (np.sin(2 * X[:, 0]) + X[:, 1] > 0).astype(int)
        lik = MultiAnnotator(simulate_annotators(z, sens, spec, random_state=seed), sens, spec)
        yield (f"annotators, seed {seed}, n = {n}", RBF(60.0, 1.2)(X) + 1e-6 * np.eye(n),
               np.ones(n), lik, 1e-6)


class RuleOf01(_sweep.SweepControl):
    """fastep 0.1's adaptive damping: x0.7 (to at least 0.1) when the undamped change
    grows; robust EP's backtracking cuts it too; it never grows back."""

    def advance(self, change, damped=True, turn=None):
        if damped:
            raw = change / self.damping
            if self.adaptive and raw > self.last_raw:
                self.damping = max(min(0.1, self.damping), 0.7 * self.damping)
            self.last_raw = raw
            change = raw
        self.change = change
        self.changes.append((change, math.nan, self.settled))
        self.sweeps += 1
        self.prev = self.log_ev


def sweeps(K, y, likelihood, tol, control):
    ep_module.SweepControl = control
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", fastep.ConvergenceWarning)
            return fastep.ep(K, y, likelihood, method="parallel", tol=tol, max_iter=2000)
    finally:
        ep_module.SweepControl = _sweep.SweepControl


def damping_main(argv=None):
    command_parser("damping", DAMPING_DOC).parse_args(argv)
    print("dense parallel EP, adaptive damping: sweeps to tol")
    print(f"{'problem':32s} {'now':>5s} {'0.1':>5s} {'|d log Z|':>10s}")
    totals = [0, 0]
    for name, K, y, lik, tol in problems():
        new = sweeps(K, y, lik, tol, _sweep.SweepControl)
        old = sweeps(K, y, lik, tol, RuleOf01)
        totals[0] += new.n_iter
        totals[1] += old.n_iter
        flag = "" if new.converged and old.converged else "  (not converged)"
        gap = abs(new.log_marginal_likelihood - old.log_marginal_likelihood)
        print(f"{name:32s} {new.n_iter:5d} {old.n_iter:5d} {gap:10.1e}{flag}", flush=True)
    print(f"{'total':32s} {totals[0]:5d} {totals[1]:5d}   ratio {totals[0] / totals[1]:.2f}")


# =========================================================================================
# history (formerly scripts/asv_history.py)
# =========================================================================================
HISTORY_DOC = """\
Performance over the history of the repository, as asv users track it: the asv
benchmarks run on each of the last N commits of a branch (each commit built and installed
into asv's own virtualenv), then published as asv's HTML dashboard.

    pip install ".[bench]"
    python scripts/ep_floor.py history --commits 10     # then: cd asv_benchmarks && asv preview
    python scripts/ep_floor.py history --commits 10 --bench "bench_ep.EPFit"

Results go to ``asv_benchmarks/.asv/results`` (a commit already measured on this machine is
skipped: asv's ``--skip-existing-commits``), the dashboard to ``asv_benchmarks/.asv/html``.
By default it runs a short selection (``--bench``, a regular expression on benchmark names)
in asv's quick mode (one sample each), about a minute and a half per commit on two cores
including the build and the first compilation; ``--bench .`` runs them all.  Time nothing else meanwhile:
the numbers are wall-clock times on this machine.

A regression between two commits is what ``asv continuous`` reports (see the user guide's
performance page)::

    cd asv_benchmarks && asv continuous --factor 1.2 --bench bench_ep.EPFit main HEAD
"""


ROOT = Path(__file__).resolve().parents[1]
ASV_DIR = ROOT / "asv_benchmarks"

#: The default selection: converged dense EP fits (parallel and sequential, n = 500 to
#: 4,000) and the Gram matrices and their gradient contractions.
DEFAULT_BENCH = r"bench_ep\.(EPFit|Kernels)\."


def commits(branch, count):
    """The last ``count`` commits of ``branch`` (first parents), oldest first."""
    out = subprocess.run(["git", "rev-list", "--first-parent", f"--max-count={count}", branch],
                         cwd=ROOT, check=True, capture_output=True, text=True).stdout.split()
    return out[::-1]


def asv(*args):
    cmd = [sys.executable, "-m", "asv", *args]
    print("+ " + " ".join(cmd), flush=True)
    subprocess.run(cmd, cwd=ASV_DIR, check=True)


def history_main(argv=None):
    parser = command_parser("history", HISTORY_DOC)
    parser.add_argument("--commits", type=int, default=10, help="how many commits (default 10)")
    parser.add_argument("--branch", default="HEAD", help="branch or commit to walk back from")
    parser.add_argument("--bench", default=DEFAULT_BENCH,
                        help="benchmarks to run (regular expression; '.' for all)")
    parser.add_argument("--full", action="store_true",
                        help="asv's full sampling instead of --quick (much longer)")
    parser.add_argument("--at", nargs="+", metavar="[LABEL=]REV",
                        help="these commits instead of the last N (e.g. 0.1=v0.1.0 "
                             "0.2=v0.2.0 main=HEAD)")
    parser.add_argument("--save", metavar="JSON",
                        help="also write the measured times of these commits as JSON "
                             "(docs/data/asv_history.json: the performance page's figure)")
    args = parser.parse_args(argv)
    if args.commits < 1:
        parser.error(f"--commits must be at least 1; got {args.commits}")
    labels = {}
    if args.at:
        for entry in args.at:
            label, _, rev = entry.rpartition("=")
            full = subprocess.run(["git", "rev-parse", rev], cwd=ROOT, check=True,
                                  capture_output=True, text=True).stdout.strip()
            labels[full] = label or full[:8]
        hashes = list(labels)
    else:
        hashes = commits(args.branch, args.commits)
    if not (Path.home() / ".asv-machine.json").exists():
        asv("machine", "--yes")
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as fh:
        fh.write("\n".join(hashes) + "\n")
    try:
        asv("run", "--show-stderr", "--skip-existing-commits", "--bench", args.bench,
            *([] if args.full else ["--quick"]), f"HASHFILE:{fh.name}")
    finally:
        os.unlink(fh.name)
    asv("publish")
    if args.save:
        save_history(args.save, hashes, labels)
    print(f"\n{len(hashes)} commits ({hashes[0][:8]}..{hashes[-1][:8]}); dashboard in "
          f"{ASV_DIR / '.asv' / 'html'} (view it with: cd asv_benchmarks && asv preview)")
    return 0


def save_history(path, hashes, labels):
    """The times asv recorded on this machine for ``hashes`` as a record: a row per
    commit, benchmark and parameter combination (seconds; NaN where it failed)."""
    import itertools
    from fastep._version import save_record
    rows = []
    for result in sorted((ASV_DIR / ".asv" / "results").glob("*/*.json")):
        data = json.loads(result.read_text())
        commit = data.get("commit_hash")
        if commit not in hashes:
            continue
        columns = data["result_columns"]
        for bench, entry in data["results"].items():
            got = dict(zip(columns, entry))
            combos = list(itertools.product(*got["params"])) if got["params"] else [()]
            for combo, value in zip(combos, got["result"] or []):
                rows.append({"commit": commit[:8], "label": labels.get(commit, commit[:8]),
                             "order": hashes.index(commit), "date": git_date(commit),
                             "benchmark": bench, "params": [str(p) for p in combo],
                             "seconds": float("nan") if value is None else float(value)})
    rows.sort(key=lambda r: (r["order"], r["benchmark"], r["params"]))
    save_record(path, "ep_floor.py history", rows)
    print(f"{len(rows)} times of {len(hashes)} commits written to {path}")


def git_date(commit):
    return subprocess.run(["git", "log", "-1", "--format=%ad", "--date=short", commit],
                          cwd=ROOT, check=True, capture_output=True, text=True).stdout.strip()


# =========================================================================================
# the command line
# =========================================================================================
#: subcommand -> (its entry point, taking the arguments after the subcommand; its method)
COMMANDS = {
    "large-n": (large_n_main, LARGE_N_DOC),
    "damping": (damping_main, DAMPING_DOC),
    "history": (history_main, HISTORY_DOC),
}
EPILOG = """subcommands (python scripts/ep_floor.py COMMAND --help for the method and options):
  large-n   dense EP at large n, past OpenBLAS's threaded dpotrf (was large_n.py)
  damping   sweeps to tol of adaptive parallel EP: this damping rule against fastep 0.1's
            (was damping_sweeps.py)
  history   the asv benchmarks of dense EP over the last commits (was asv_history.py)"""


def command_parser(command, doc):
    """The argument parser of one subcommand: its method as the description."""
    return argparse.ArgumentParser(prog=f"ep_floor.py {command}", description=doc,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in COMMANDS:
        return COMMANDS[argv[0]][0](argv[1:])
    return floor_main(argv)


if __name__ == "__main__":
    sys.exit(main())
