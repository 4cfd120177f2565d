"""What a user waits for: the whole ``fit`` (ML-II included) on real tables, against what
they would use instead, measured in the same run.

Tables (bundled with scikit-learn and statsmodels; X standardised on the training rows,
70/30 split, stratified for classes, ``random_state=0``):

* breast cancer (2 classes, 398 train), wine (3 classes, 124), digits (10 classes, 1,257):
  ``EPGaussianProcessClassifier`` (defaults; and ``hyperprior=None``, plain ML-II; and
  ``n_jobs=-1``) against scikit-learn's ``GaussianProcessClassifier`` and
  ``HistGradientBoostingClassifier``: fit seconds, held-out log loss, accuracy.
* statsmodels ``randhie`` (doctor visits, counts; 2,000 rows drawn with seed 0, 1,400
  train): Poisson ``EPGaussianProcessRegressor`` against ``HistGradientBoostingRegressor
  (loss="poisson")`` and ``PoissonRegressor``: mean Poisson deviance of the predicted
  mean.
* statsmodels ``randhie`` whole (14,133 train; table ``randhie``): the default negative
  binomial ``EPGaussianProcessRegressor`` (``n_inducing="auto"``: 256 inducing points
  above 3,000 rows) against ``n_inducing`` 128 and 512: fit seconds and held-out mean log
  predictive density.
* statsmodels ``star98`` (pupils above the median out of those tested, per school;
  212 train): binomial ``EPGaussianProcessRegressor`` (default RBF kernel, and Linear +
  RBF) against statsmodels' binomial GLM: RMSE of the predicted share and mean log
  predictive density of the held-out schools' counts.
* statsmodels ``fair`` (affairs, censored at 0; 4,456 train): ``CensoredGPRegressor
  (lower=0, n_inducing=100)``, and dense (variant "fastep CensoredGPRegressor dense"),
  against ``HistGradientBoostingRegressor``: RMSE of the predicted mean of y.

It also prints, for every fastep fit, the ML-II evidence evaluations and the EP sweeps
they ran (on the full data, + those on the subsamples of a staged fit: dense from 1,000
rows, so digits), the time of one full-data evaluation after the first in units of one
EP sweep timed at the same n in the same run, and, with ``--check-evidence``,
the final log evidence of the default fit against one whose ML-II evaluations all ran
EP at the estimator's tight tolerance (relative gap).

Run ``python scripts/fit_time.py`` (all tables, about 12 minutes on 2 cores) or
``--tables breast_cancer wine``.  ``--seeds 0 1 2`` also fits the default classifier with
those ``random_state`` values (the stages' random rows fixed): two versions of fastep
compare seed by seed (``--tables digits --variants --seeds 0 1 2 3 8 9 10``, once with
``PYTHONPATH`` set to a worktree of the other version).  Ratios are fastep / peer in the
same run.

Subcommands, each the method of a section below (``python scripts/fit_time.py COMMAND
--help`` prints it and the options):

    python scripts/fit_time.py normalize-y    # held-out RMSE with and without standardised y
    python scripts/fit_time.py staged --n 1000000 --variants staged   # ML-II's subsample stages
"""
from __future__ import annotations

import argparse
import pathlib
import sys
import time
import warnings

import numpy as np
from scipy.special import log_ndtr
from sklearn.datasets import load_breast_cancer, load_digits, load_wine
from sklearn.ensemble import HistGradientBoostingClassifier, HistGradientBoostingRegressor
from sklearn.gaussian_process import GaussianProcessClassifier
from sklearn.linear_model import PoissonRegressor
from sklearn.metrics import accuracy_score, log_loss, mean_poisson_deviance
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

import fastep
from fastep.kernels import RBF
from fastep.models import _mlii
from fastep.priors import hyperprior_terms

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "asv_benchmarks"))
from benchmarks.bench_mlii import (Steps, counted_fit, pass_seconds,  # noqa: E402
                                   rff_probit_data)

CLASSIFICATION = {"breast_cancer": load_breast_cancer, "wine": load_wine,
                  "digits": load_digits}


def split(X, y, stratify=True):
    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.3, random_state=0,
                                          stratify=y if stratify else None)
    scaler = StandardScaler().fit(Xtr)
    return scaler.transform(Xtr), scaler.transform(Xte), ytr, yte


def timed_fit(est, X, y, **kw):
    """(fitted estimator, seconds, Steps), warnings kept quiet (counted)."""
    with Steps.recording() as log, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t = time.perf_counter()
        est.fit(X, y, **kw)
        seconds = time.perf_counter() - t
    log.n_warnings = len(caught)
    return est, seconds, log


def sweep_seconds(latent, repeats=5):
    """Median seconds of one EP sweep of a fitted problem (``latent``: its data, fitted
    kernel and EP settings, dense or sparse): ``(t(6 sweeps) - t(2 sweeps)) / 4`` from a
    cold start, the Gram matrix and set-up cancelling."""
    def run(k):
        t = time.perf_counter()
        latent.run(tol=1e-300, max_iter=k)
        return time.perf_counter() - t

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run(2)
        return float(np.median([(run(6) - run(2)) / 4.0 for _ in range(repeats)]))


def evaluation_cost(later, latent, what):
    """Print the time of an ML-II evaluation after the first (``later``: seconds, from
    :meth:`Steps.later_seconds`) in sweeps of ``latent``."""
    if later:
        sweep = sweep_seconds(latent)
        print(f"  one {what} sweep {sweep * 1e3:.1f} ms; an ML-II evaluation after the first: "
              f"median {np.median(later) / sweep:.1f} sweeps' worth, mean "
              f"{np.mean(later) / sweep:.1f} (all included)")


def objective(est):
    """MAP-II's objective at each fitted problem: log evidence + log hyperprior."""
    out = []
    for latent, result in zip(est._latents, est.results_):
        terms = hyperprior_terms(est.hyperprior, latent.theta_names, latent.theta.size)
        out.append(result.log_marginal_likelihood
                   + (terms(latent.theta)[0] if terms is not None else 0.0))
    return np.array(out)


#: Every printed row as ``{"table", "fit", "seconds", "metric"}`` (``--save``).
ROWS = []
TABLE = [""]


def row(name, seconds, metric, extra=""):
    print(f"  {name:<44} {seconds:8.2f} s  {metric}  {extra}", flush=True)
    ROWS.append({"table": TABLE[0], "fit": name, "seconds": seconds, "metric": metric})


def classification(table, args):
    X, y = CLASSIFICATION[table](return_X_y=True)
    Xtr, Xte, ytr, yte = split(X, y)
    print(f"\n{table}: {Xtr.shape[0]} train / {Xte.shape[0]} test rows, "
          f"{Xtr.shape[1]} features, {np.unique(y).size} classes", flush=True)
    results = {}

    def report(name, est, seconds, log=None):
        p = est.predict_proba(Xte)
        metric = f"log loss {log_loss(yte, p):.4f}  accuracy {accuracy_score(yte, p.argmax(1)):.4f}"
        extra = ""
        if log is not None:
            extra = f"{log.counts()}, warnings {log.n_warnings}"
            results.setdefault("later", []).extend(log.later_seconds())
        results[name] = seconds
        row(name, seconds, metric, extra)
        return p

    variants = [("fastep default", {}), ("fastep n_jobs=-1", {"n_jobs": -1}),
                ("fastep hyperprior=None (plain ML-II)", {"hyperprior": None})]
    fitted = None
    for name, params in variants:
        if name != "fastep default" and name not in args.variants:
            continue
        est, seconds, log = timed_fit(fastep.EPGaussianProcessClassifier(**params), Xtr, ytr)
        report(name, est, seconds, log)
        fitted = fitted or est
    if args.seeds:
        # the stages draw random rows: fits with fixed random_state compare two versions
        # of fastep seed by seed (PYTHONPATH=<worktree> for the other one)
        times, full = [], 0
        for seed in args.seeds:
            est, t, log = timed_fit(fastep.EPGaussianProcessClassifier(random_state=seed),
                                    Xtr, ytr)
            times.append(t)
            full += log.full_evaluations
            report(f"fastep random_state={seed}", est, t, log)
        print(f"  over random_state {' '.join(str(s) for s in args.seeds)}: median "
              f"{np.median(times):.2f} s, {full} full-data evaluations in all")
    if args.check_evidence:
        loose, _mlii.LOOSE_EP_TOL = _mlii.LOOSE_EP_TOL, fitted.tol
        try:
            ref, seconds, _ = timed_fit(fastep.EPGaussianProcessClassifier(), Xtr, ytr)
        finally:
            _mlii.LOOSE_EP_TOL = loose
        a, b = objective(fitted), objective(ref)
        gap = float(np.max(np.abs(a - b) / np.abs(b)))
        print(f"  final log evidence + log prior (MAP-II's objective) vs ML-II at tight EP "
              f"tolerance throughout: largest relative gap {gap:.2e} over {a.size} problems "
              f"({seconds:.1f} s tight)")
        print("    per problem, default - tight (nats): "
              + ", ".join(f"{d:+.1e}" for d in a - b))
    for name, est in (("scikit-learn GaussianProcessClassifier", GaussianProcessClassifier()),
                      ("HistGradientBoostingClassifier",
                       HistGradientBoostingClassifier(random_state=0))):
        est, seconds, _ = timed_fit(est, Xtr, ytr)
        report(name, est, seconds)
    # one EP sweep at this n with the first problem's fitted kernel
    evaluation_cost(results.get("later", []), fitted._latents[0], "dense EP")
    print(f"  ratio fastep default / HistGradientBoosting: "
          f"{results['fastep default'] / results['HistGradientBoostingClassifier']:.1f}")


def counts(args):
    import statsmodels.api as sm
    d = sm.datasets.randhie.load_pandas().data
    d = d.iloc[np.random.default_rng(0).choice(len(d), 2000, replace=False)]
    y = d["mdvis"].to_numpy(float)
    Xtr, Xte, ytr, yte = split(d.drop(columns="mdvis").to_numpy(float), y, stratify=False)
    print(f"\nrandhie (doctor visits, counts): {Xtr.shape[0]} train / {Xte.shape[0]} test",
          flush=True)
    for name, est in (
            ("fastep EPGaussianProcessRegressor(poisson)",
             fastep.EPGaussianProcessRegressor(likelihood="poisson")),
            ("HistGradientBoostingRegressor(poisson)",
             HistGradientBoostingRegressor(loss="poisson", random_state=0)),
            ("PoissonRegressor", PoissonRegressor())):
        est, seconds, log = timed_fit(est, Xtr, ytr)
        mean = np.maximum(est.predict(Xte), 1e-12)
        extra = ""
        if name.startswith("fastep"):
            extra = log.counts()
        row(name, seconds, f"mean Poisson deviance {mean_poisson_deviance(yte, mean):.4f}",
            extra)
        if name.startswith("fastep"):
            evaluation_cost(log.later_seconds(), est._latent, "dense EP")


def randhie(args):
    import statsmodels.api as sm
    d = sm.datasets.randhie.load_pandas().data
    y = d["mdvis"].to_numpy(float)
    Xtr, Xte, ytr, yte = split(d.drop(columns="mdvis").to_numpy(float), y, stratify=False)
    print(f"\nrandhie whole (doctor visits, negative binomial): {Xtr.shape[0]} train / "
          f"{Xte.shape[0]} test", flush=True)
    for name, m in (("fastep default (n_inducing='auto')", "auto"),
                    ("fastep n_inducing=128", 128), ("fastep n_inducing=512", 512)):
        est, seconds, log = timed_fit(fastep.EPGaussianProcessRegressor(
            likelihood="negative_binomial", n_inducing=m, random_state=0), Xtr, ytr)
        lpd = np.mean(est.log_predictive_density(Xte, yte))
        row(name, seconds, f"log density {lpd:.4f}", log.counts())


def binomial(args):
    import statsmodels.api as sm
    from scipy.stats import binom
    from fastep.kernels import RBF, Linear
    d = sm.datasets.star98.load_pandas()
    succ = d.endog["NABOVE"].to_numpy(float)
    trials = succ + d.endog["NBELOW"].to_numpy(float)
    X = d.exog.to_numpy(float)
    idx = np.arange(succ.size)
    Xtr, Xte, tr, te = split(X, idx, stratify=False)
    print(f"\nstar98 (share above the median per school, binomial): {tr.size} train / "
          f"{te.size} test", flush=True)

    def metrics(p):
        rmse = float(np.sqrt(np.mean((p - succ[te] / trials[te]) ** 2)))
        return f"share RMSE {rmse:.4f}"

    t = time.perf_counter()
    glm = sm.GLM(np.column_stack([succ[tr], trials[tr] - succ[tr]]), sm.add_constant(Xtr),
                 family=sm.families.Binomial()).fit()
    seconds = time.perf_counter() - t
    p = glm.predict(sm.add_constant(Xte))
    row("statsmodels GLM(Binomial)", seconds, metrics(p),
        f"log density {np.mean(binom.logpmf(succ[te], trials[te], p)):.3f}")
    for name, kernel in (("fastep EPGaussianProcessRegressor(binomial)", None),
                         ("fastep ... kernel Linear() + RBF()", Linear() + RBF(1.0, 3.0))):
        est, seconds, log = timed_fit(
            fastep.EPGaussianProcessRegressor(kernel, likelihood="binomial"), Xtr, succ[tr],
            trials=trials[tr])
        p = est.predict(Xte, trials=np.ones(te.size))
        lpd = np.mean(est.log_predictive_density(Xte, succ[te], trials=trials[te]))
        row(name, seconds, metrics(p), f"log density {lpd:.3f}, {log.counts()}")


def censored(args):
    import statsmodels.api as sm
    d = sm.datasets.fair.load_pandas().data
    y = d["affairs"].to_numpy(float)
    Xtr, Xte, ytr, yte = split(d.drop(columns="affairs").to_numpy(float), y, stratify=False)
    print(f"\nfair (affairs, censored at 0): {Xtr.shape[0]} train / {Xte.shape[0]} test",
          flush=True)
    fits = [("fastep CensoredGPRegressor(n_inducing=100)",
             fastep.CensoredGPRegressor(n_inducing=100, random_state=0), {"lower": 0.0}),
            ("fastep CensoredGPRegressor dense",
             fastep.CensoredGPRegressor(random_state=0), {"lower": 0.0}),
            ("HistGradientBoostingRegressor",
             HistGradientBoostingRegressor(random_state=0), {})]
    for name, est, kw in fits:
        if name.endswith("dense") and name not in args.variants:
            continue
        est, seconds, log = timed_fit(est, Xtr, ytr, **kw)
        rmse = float(np.sqrt(np.mean((est.predict(Xte) - yte) ** 2)))
        extra = ""
        if name.startswith("fastep"):
            extra = log.counts()
        row(name, seconds, f"RMSE {rmse:.4f}", extra)
        if name.startswith("fastep"):
            evaluation_cost(log.later_seconds(), est._latent,
                            "dense EP" if name.endswith("dense") else "sparse EP")


def fit_main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n")[0], epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    extra = ["counts", "randhie", "binomial", "censored"]
    parser.add_argument("--tables", nargs="+", default=list(CLASSIFICATION) + extra,
                        choices=list(CLASSIFICATION) + extra)
    parser.add_argument("--variants", nargs="*",
                        default=["fastep n_jobs=-1", "fastep hyperprior=None (plain ML-II)",
                                 "fastep CensoredGPRegressor dense"],
                        help="fastep variants besides the default fit")
    parser.add_argument("--seeds", nargs="*", type=int, default=[],
                        help="also fit the default classifier with these random_state "
                             "values (the subsample stages' rows), and print the median")
    parser.add_argument("--check-evidence", action="store_true",
                        help="also fit with tight EP tolerance throughout ML-II")
    parser.add_argument("--save", metavar="JSON",
                        help="also write every row as JSON, with the environment "
                             "(docs/data/fit_time.json: the performance page's figure)")
    args = parser.parse_args(argv)
    t = time.perf_counter()
    fastep.precompile()
    print(f"fastep {fastep.__version__}: compiled or loaded in {time.perf_counter() - t:.1f} s")
    for table in args.tables:
        TABLE[0] = table
        if table in CLASSIFICATION:
            classification(table, args)
        elif table == "counts":
            counts(args)
        elif table == "binomial":
            binomial(args)
        elif table == "randhie":
            randhie(args)
        else:
            censored(args)
    if args.save:
        from fastep._version import save_record
        save_record(args.save, "fit_time.py", ROWS)


# =========================================================================================
# normalize-y (formerly scripts/normalize_y.py)
# =========================================================================================
NORMALIZE_Y_DOC = """\
Should EPGaussianProcessRegressor standardise y by default?  Held-out RMSE on real
tables whose targets sit far from mean 0 / scale 1.

Tables (70/30 split, ``random_state=0``, X standardised on the training rows):
scikit-learn's ``diabetes`` (442 rows, target mean 152, sd 77); statsmodels' ``engel``
(235 rows: food expenditure from income), ``statecrime`` (51 states: murder rate from
urbanisation, poverty, high-school graduation, single parents) and ``ccard`` (72 rows:
average credit-card expenditure from age, income, income squared, home ownership).

Models: ``EPGaussianProcessRegressor()`` (``normalize_y="auto"``: on for its default
Student-t likelihood), the same with ``normalize_y=False`` (fastep 0.2), scikit-learn's
``LinearRegression`` and ``GaussianProcessRegressor(C * RBF + White, normalize_y=True)``.
Prints RMSE, the ratio to the linear model's, and fit seconds.

    python scripts/fit_time.py normalize-y
"""


def normalize_y_tables():
    import statsmodels.api as sm
    from sklearn.datasets import load_diabetes

    yield "diabetes", *load_diabetes(return_X_y=True)
    engel = sm.datasets.engel.load_pandas().data
    yield "engel", engel[["income"]].to_numpy(), engel["foodexp"].to_numpy()
    crime = sm.datasets.statecrime.load_pandas().data
    yield "statecrime", crime[["urban", "poverty", "hs_grad", "single"]].to_numpy(), \
        crime["murder"].to_numpy()
    card = sm.datasets.ccard.load_pandas().data
    yield "ccard", card[["AGE", "INCOME", "INCOMESQ", "OWNRENT"]].to_numpy(), \
        card["AVGEXP"].to_numpy()


def normalize_y_main(argv=None):
    from sklearn.gaussian_process import GaussianProcessRegressor
    from sklearn.gaussian_process.kernels import RBF, WhiteKernel
    from sklearn.gaussian_process.kernels import ConstantKernel as C
    from sklearn.linear_model import LinearRegression

    command_parser("normalize-y", NORMALIZE_Y_DOC).parse_args(argv)
    models = {
        "fastep default (normalize_y='auto')": lambda: fastep.EPGaussianProcessRegressor(),
        "fastep normalize_y=False (0.2)":
            lambda: fastep.EPGaussianProcessRegressor(normalize_y=False),
        "LinearRegression": LinearRegression,
        "sklearn GPR normalize_y=True": lambda: GaussianProcessRegressor(
            C() * RBF() + WhiteKernel(), normalize_y=True, random_state=0),
    }
    for name, X, y in normalize_y_tables():
        Xtr, Xte, ytr, yte = train_test_split(X.astype(float), y.astype(float),
                                              test_size=0.3, random_state=0)
        scaler = StandardScaler().fit(Xtr)
        Xtr, Xte = scaler.transform(Xtr), scaler.transform(Xte)
        print(f"\n{name}: {len(ytr)} train / {len(yte)} test rows, {X.shape[1]} features, "
              f"y mean {ytr.mean():.3g}, sd {ytr.std():.3g}")
        rows = []
        for label, make in models.items():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                t = time.perf_counter()
                model = make().fit(Xtr, ytr)
                seconds = time.perf_counter() - t
            rows.append((label, float(np.sqrt(np.mean((model.predict(Xte) - yte) ** 2))),
                         seconds))
        linear = dict((r[0], r[1]) for r in rows)["LinearRegression"]
        for label, rmse, seconds in rows:
            print(f"  {label:<38} RMSE {rmse:10.4g}   RMSE / linear {rmse / linear:6.3f}"
                  f"   fit {seconds:6.2f} s", flush=True)

# =========================================================================================
# staged (formerly scripts/staged_mlii.py)
# =========================================================================================
STAGED_DOC = """\
ML-II of a large sparse classifier with and without the subsample stages (issue 30).

    python scripts/fit_time.py staged --n 100000 --repeats 2
    python scripts/fit_time.py staged --n 1000000 --variants staged     # one of the two only
    python scripts/fit_time.py staged --n 1000000 --variants staged --device cuda   # on a GPU

The data are the fit-time issue's large-n probit problem (``rff_probit_data`` of
``asv_benchmarks/benchmarks/bench_mlii.py``: d = 4, ARD, m = 256 inducing inputs drawn from
X and kept fixed, starting kernel RBF(1, [1, 1, 1, 1]); test NLPD on 20,000 rows of another
seed).  Each repeat fits the default ``EPGaussianProcessClassifier`` twice in this process,
in alternating order: with the stages (:func:`fastep.models._mlii.staged_start`, the
default from 50,000 rows: ML-II on subsamples, the curvature on the smallest, a
preconditioned full-data run) and without (``STAGED_MIN_ROWS`` raised past n).

Printed per fit (ConvergenceWarnings silenced, as in the asv benchmark): wall time,
evidence evaluations on the subsamples (with the curvature's) and on the full data, EP
sweeps, the final log evidence (+ log hyperprior), the test NLPD, and when the fit first
reached a test NLPD within 0.001 of its final one: the NLPD of every full-data
evaluation's EP posterior is computed with the clock stopped, and the time is given in
seconds and in parallel passes (one parallel sparse EP sweep at this n, timed in the same
process).  Then the median time ratio and the largest relative difference of the final
objectives (ML-II's promise: 1e-6).
"""


TARGET = 1e-3


class Trajectory:
    """Wraps ``_mlii._evaluate``: after each full-data evaluation, the test NLPD of its EP
    posterior and the fit's seconds so far, not counting these NLPD computations."""

    def __init__(self, n, Xt, yt):
        self.n, self.Xt, self.sign = n, Xt, np.where(yt == 1, 1.0, -1.0)
        self.original = _mlii._evaluate
        self.points, self.paused, self.start = [], 0.0, time.perf_counter()

    def __enter__(self):
        def evaluate(problem, theta, sites, ep_tol=None):
            out = self.original(problem, theta, sites, ep_tol)
            if problem.X.shape[0] == self.n and out[2] is not None and \
                    out[0] != -_mlii._FAILED:
                t = time.perf_counter()
                mean, var = problem.with_theta(theta).latent(out[2], self.Xt)
                nlpd = -np.mean(log_ndtr(self.sign * mean / np.sqrt(1.0 + var)))
                self.points.append((t - self.start - self.paused, nlpd))
                self.paused += time.perf_counter() - t
            return out
        _mlii._evaluate = evaluate
        self.start = time.perf_counter()
        return self

    def __exit__(self, *exc):
        _mlii._evaluate = self.original
        self.seconds = time.perf_counter() - self.start - self.paused

    def reached(self, final):
        """Seconds until an evaluation's NLPD came within TARGET of ``final``."""
        return next((t for t, v in self.points if v - final <= TARGET), self.seconds)


def staged_fit(X, y, Z, Xt, yt, staged, device="cpu"):
    _mlii.STAGED_MIN_ROWS = _mlii.STAGE_SHARE * _mlii.STAGE_MIN_ROWS if staged else 10 ** 15
    with Trajectory(X.shape[0], Xt, yt) as trace:
        clf, steps = counted_fit(X, y, RBF(1.0, [1.0] * 4), inducing_points=Z, device=device)
    p = clf.predict_proba(Xt)[:, 1]
    nlpd = -np.mean(np.log(np.clip(np.where(yt == 1, p, 1.0 - p), 1e-300, 1.0)))
    return clf, trace, steps, nlpd


def staged_main(argv=None):
    ap = command_parser("staged", STAGED_DOC)
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--variants", nargs="+", choices=["staged", "plain"],
                    default=["staged", "plain"])
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                    help="where the fits and the timed pass run")
    args = ap.parse_args(argv)
    X, y = rff_probit_data(args.n, seed=0)
    Xt, yt = rff_probit_data(20_000, seed=1)
    Z = X[np.random.default_rng(1).choice(args.n, 256, replace=False)]
    fastep.EPGaussianProcessClassifier(RBF(1.0, [1.0] * 4), inducing_points=Z[:64],
                                       device=args.device).fit(X[:2000], y[:2000])   # compile
    one_pass = pass_seconds(X, y.astype(float) * 2.0 - 1.0, Z, args.device)
    print(f"n = {args.n:,}: one parallel pass {one_pass:.2f} s (device={args.device})",
          flush=True)
    times = {True: [], False: []}
    objective = []
    for r in range(args.repeats):
        order = (True, False) if r % 2 == 0 else (False, True)
        for staged in (v for v in order if ("staged" if v else "plain") in args.variants):
            clf, trace, steps, nlpd = staged_fit(X, y, Z, Xt, yt, staged, args.device)
            value = clf.log_marginal_likelihood_value_
            objective.append(value)
            times[staged].append(trace.seconds)
            reached = trace.reached(nlpd)
            print(f"{'staged' if staged else 'plain '} n={args.n}: fit {trace.seconds:7.1f} s "
                  f"({trace.seconds / one_pass:.0f} passes), evaluations "
                  f"{steps.stage_evaluations:2d} on subsamples + "
                  f"{steps.full_evaluations:2d} on the full data, EP sweeps "
                  f"{steps.sweeps:3d}, log Z {value:.6f}, test NLPD {nlpd:.5f}, within "
                  f"{TARGET:g} of it after {reached:.1f} s ({reached / one_pass:.0f} passes), "
                  f"{clf.kernel_}", flush=True)
    if not (times[True] and times[False]):
        return
    ratio = np.median(times[False]) / np.median(times[True])
    spread = (max(objective) - min(objective)) / abs(np.median(objective))
    print(f"median fit: plain {np.median(times[False]):.1f} s, staged "
          f"{np.median(times[True]):.1f} s, plain / staged {ratio:.2f}; final log Z spread "
          f"{spread:.1e} (relative)")


# =========================================================================================
# the command line
# =========================================================================================
#: subcommand -> (its entry point, taking the arguments after the subcommand; its method)
COMMANDS = {
    "normalize-y": (normalize_y_main, NORMALIZE_Y_DOC),
    "staged": (staged_main, STAGED_DOC),
}
EPILOG = """subcommands (python scripts/fit_time.py COMMAND --help: method, options):
  normalize-y  EPGaussianProcessRegressor's held-out RMSE with and without standardised y
               (was normalize_y.py)
  staged       large sparse ML-II with and without the subsample stages (was staged_mlii.py)"""


def command_parser(command, doc):
    """The argument parser of one subcommand: its method as the description."""
    return argparse.ArgumentParser(prog=f"fit_time.py {command}", description=doc,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in COMMANDS:
        return COMMANDS[argv[0]][0](argv[1:])
    return fit_main(argv)


if __name__ == "__main__":
    sys.exit(main())
