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
"""
from __future__ import annotations

import argparse
import pathlib
import sys
import time
import warnings

import numpy as np
from sklearn.datasets import load_breast_cancer, load_digits, load_wine
from sklearn.ensemble import HistGradientBoostingClassifier, HistGradientBoostingRegressor
from sklearn.gaussian_process import GaussianProcessClassifier
from sklearn.linear_model import PoissonRegressor
from sklearn.metrics import accuracy_score, log_loss, mean_poisson_deviance
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

import fastep
from fastep.models import _mlii
from fastep.priors import hyperprior_terms

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "asv_benchmarks"))
from benchmarks.bench_mlii import Steps  # noqa: E402

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


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
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
    args = parser.parse_args()
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


if __name__ == "__main__":
    main()
