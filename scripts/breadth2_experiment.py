"""Issue 34's new models against what a user would reach for, measured in one run.

Zero-inflated counts (``--sections zero_inflated``):

* statsmodels' bundled ``randhie`` (RAND health insurance experiment: ``mdvis``, doctor
  visits, 31% zeros, variance 7x the mean; 9 covariates standardised on the training rows;
  3,000 rows drawn with seed 0, 70/30 split): the GP with Poisson, negative-binomial and
  their zero-inflated likelihoods (sparse, 150 inducing inputs), against statsmodels'
  zero-inflated Poisson and negative-binomial GLMs (linear predictors for the rate and the
  zero probability), scikit-learn's ``PoissonRegressor`` and
  ``HistGradientBoostingRegressor(loss="poisson")`` (the last two: a Poisson pmf at their
  predicted mean).  Metric: held-out mean log predictive density log p(y | x) (higher is
  better), and fit seconds.
* Simulated zero-inflated counts (rate exp(1 + sin(1.5 x)), 35% structural zeros; 300
  training and 2,000 test points): the zero-inflated Poisson GP against the Poisson GP and
  the GBM, the learnt zero probability against the truth.

Survival (``--sections survival``):

* lifelines' bundled ``rossi`` (recidivism of 432 released prisoners: weeks to re-arrest,
  74% right-censored at 52 weeks; 7 covariates standardised on the training rows; 70/30
  split stratified by the event, ``random_state=0``): the GP with the Weibull,
  log-logistic and log-normal AFT likelihoods against lifelines' parametric AFT models of
  the same families (linear in the covariates) and lifelines' Cox proportional-hazards
  model (its score a partial likelihood, not comparable with the densities).  Metrics: held-out mean log-likelihood of
  (time, event) (density for an event, survival for a censored time) and Harrell's
  concordance index of the predicted median.
* Simulated Weibull times with a non-linear covariate effect (scale exp(1 + sin(2 x)),
  shape 1.5, uniform censoring; 200 train / 1000 test): the same comparison, plus the
  root mean squared log error of the predicted median against the true one.

Multiclass (``--sections multiclass``): scikit-learn's bundled digits (10 classes, 1,257
train / 540 test), wine (3, 124 / 54) and iris (3, 105 / 45), features standardised on the
training rows, 70/30 split stratified, ``random_state=0``: nested EP
(:class:`fastep.NestedEPClassifier`) against one-vs-rest EP
(:class:`fastep.EPGaussianProcessClassifier`) and GWI (:class:`fastep.GWIClassifier`),
all with their defaults: fit seconds (ML-II included), held-out log loss and accuracy.

Sweep cost (``--sections sweep``): one parallel EP sweep at n = 4,000 (dense, RBF Gram,
sites near their fixed point) with each new likelihood, against a probit sweep timed in the
same run (median of 5): the ratio the issue bounds by 1.5; and one nested-EP sweep with
the multinomial probit for C = 3 classes at the same n against C probit sweeps, dense and
sparse (200 inducing inputs shared by the classes).

Run ``python scripts/breadth2_experiment.py`` (about 5 minutes on 2 cores).  On a GPU
machine ``--device cuda --sections sweep multiclass`` runs both sections there (the
sparse nested rows stay on the CPU or are left out).
"""
from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
from scipy import stats

import fastep
from fastep.kernels import RBF
from fastep.likelihoods import (LogLogistic, LogNormal, Probit, Weibull,
                                ZeroInflatedNegativeBinomial, ZeroInflatedPoisson)

#: Inducing inputs of the sparse nested-EP rows (multiclass tables above twice this size).
SPARSE_NESTED_M = 200
COUNT_LIKELIHOODS = ("poisson", "negative_binomial", "zero_inflated_poisson",
                     "zero_inflated_negative_binomial")


def _timed(fn):
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def _row(name, seconds, lpd, extra=""):
    print(f"| {name} | {seconds:.1f} | {lpd:.4f} | {extra} |")


def _gp_rows(X, y, Xt, yt, **kw):
    """Each count likelihood's GP: (name, seconds, held-out lpd, learnt likelihood)."""
    out = []
    for name in COUNT_LIKELIHOODS:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            reg, s = _timed(lambda: fastep.EPGaussianProcessRegressor(
                likelihood=name, **kw).fit(X, y))
        out.append((f"fastep GP, {name}", s, float(reg.log_predictive_density(Xt, yt).mean()),
                    repr(reg.likelihood_)))
    return out


def _plugin_poisson(model, X, y, Xt, yt):
    """A point predictor of the mean, scored with the Poisson pmf at its prediction."""
    fitted, s = _timed(lambda: model.fit(X, y))
    mean = np.maximum(fitted.predict(Xt), 1e-12)
    return s, float(stats.poisson.logpmf(yt, mean).mean())


def zero_inflated():
    import statsmodels.api as sm
    from sklearn.ensemble import HistGradientBoostingRegressor
    from sklearn.linear_model import PoissonRegressor
    from sklearn.model_selection import train_test_split
    from sklearn.preprocessing import StandardScaler
    from statsmodels.discrete.count_model import (ZeroInflatedNegativeBinomialP,
                                                  ZeroInflatedPoisson as SmZIP)

    data = sm.datasets.randhie.load_pandas().data
    rows = np.random.default_rng(0).choice(len(data), 3000, replace=False)
    y = data["mdvis"].to_numpy(float)[rows]
    X = data.drop(columns="mdvis").to_numpy(float)[rows]
    X, Xt, y, yt = train_test_split(X, y, test_size=0.3, random_state=0)
    scaler = StandardScaler().fit(X)
    X, Xt = scaler.transform(X), scaler.transform(Xt)
    print(f"\nrandhie (mdvis): {len(y)} train / {len(yt)} test rows, {X.shape[1]} features, "
          f"{np.mean(y == 0):.0%} zeros, mean {y.mean():.2f}, variance {y.var():.1f}\n")
    print("| model | fit s | held-out mean log p(y) | fitted |")
    print("|---|---|---|---|")
    for row in _gp_rows(X, y, Xt, yt, n_inducing=150, random_state=0):
        _row(*row)
    Xc, Xtc = sm.add_constant(X), sm.add_constant(Xt)
    for name, cls in (("statsmodels ZIP GLM", SmZIP),
                      ("statsmodels ZINB GLM", ZeroInflatedNegativeBinomialP)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res, s = _timed(lambda: cls(y, Xc, exog_infl=Xc).fit(method="bfgs", maxiter=2000,
                                                                 disp=0))
            p = res.predict(Xtc, exog_infl=Xtc, which="prob",
                            y_values=np.arange(int(yt.max()) + 1))
        _row(name, s, float(np.mean(np.log(np.maximum(p[np.arange(yt.size),
                                                          yt.astype(int)], 1e-300)))))
    _row("scikit-learn PoissonRegressor (Poisson pmf at its mean)",
         *_plugin_poisson(PoissonRegressor(alpha=1e-4, max_iter=1000), X, y, Xt, yt))
    _row("scikit-learn HistGradientBoosting, Poisson loss (pmf at its mean)",
         *_plugin_poisson(HistGradientBoostingRegressor(loss="poisson", random_state=0),
                          X, y, Xt, yt))

    def simulate(n, seed, pi=0.35):
        rng = np.random.default_rng(seed)
        Xs = rng.uniform(-3.0, 3.0, (n, 1))
        return Xs, (rng.poisson(np.exp(1.0 + np.sin(1.5 * Xs[:, 0])))
                    * (rng.random(n) >= pi)).astype(float)
    Xs, ys = simulate(300, 0)
    Xst, yst = simulate(2000, 1)
    print("\nsimulated zero-inflated counts (35% structural zeros): 300 train / 2000 test\n")
    print("| model | fit s | held-out mean log p(y) | fitted |")
    print("|---|---|---|---|")
    for row in _gp_rows(Xs, ys, Xst, yst):
        _row(*row)
    _row("scikit-learn HistGradientBoosting, Poisson loss (pmf at its mean)",
         *_plugin_poisson(HistGradientBoostingRegressor(loss="poisson", random_state=0),
                          Xs, ys, Xst, yst))


def sweep(n=4000, repeats=5, device="cpu"):
    from fastep.backend import resolve
    be = resolve(device)
    rng = np.random.default_rng(3)
    X = rng.normal(size=(n, 3))
    f = np.sin(X[:, 0]) + 0.5 * X[:, 1]
    kern = RBF(1.0, 1.5)
    K = kern(X)
    K[np.diag_indices(n)] += 1e-6
    Kd = be.asarray(K)                         # on the device once: no transfers timed
    counts = (rng.poisson(np.exp(f)) * (rng.random(n) >= 0.3)).astype(float)
    cases = [("probit", Probit(), np.where(f + rng.normal(size=n) > 0, 1.0, -1.0)),
             ("zero_inflated_poisson", ZeroInflatedPoisson(0.3), counts),
             ("zero_inflated_negative_binomial", ZeroInflatedNegativeBinomial(2.0, 0.3),
              counts),
        ("weibull", Weibull(1.5, event=(rng.random(n) < 0.7) * 1.0), np.exp(f) + 0.1),
        ("log_logistic", LogLogistic(2.5), np.exp(f) + 0.1),
        ("log_normal", LogNormal(0.8), np.exp(f) + 0.1)]
    print(f"\none parallel EP sweep, dense, n = {n} (median of {repeats}; sites from 5 "
          f"sweeps first; device={device})\n")
    print("| likelihood | sweep s | ratio to probit |")
    print("|---|---|---|")
    base = None
    for name, lik, y in cases:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            warm = fastep.ep(Kd, y, lik, method="parallel", max_iter=5, device=device)
            times = []
            for _ in range(repeats):
                _, s = _timed(lambda: fastep.ep(Kd, y, lik, method="parallel", max_iter=1,
                                                site_tau=warm.site_tau, site_nu=warm.site_nu,
                                                device=device))
                times.append(s)
        t = float(np.median(times))
        base = t if base is None else base
        print(f"| {name} | {t:.3f} | {t / base:.2f} |")
    from fastep.inference.nested_ep import nested_ep
    C = 3
    labels = np.argmax(np.column_stack([f, -f, np.zeros(n)]) + rng.normal(size=(n, C)), 1)
    with warnings.catch_warnings():            # the warm-up and the single sweeps stop early
        warnings.simplefilter("ignore")
        warm = nested_ep(Kd, labels, C, max_iter=5, backend=be)
        times = [_timed(lambda: nested_ep(Kd, labels, C, warm.site_tau, warm.site_nu,
                                          max_iter=1, backend=be))[1] for _ in range(repeats)]
    t = float(np.median(times))
    print(f"| multinomial probit, nested EP, C = {C} | {t:.3f} | {t / base:.2f} "
          f"({t / (C * base):.2f} x C probit sweeps) |")
    if device != "cpu":
        return                                 # sparse nested EP runs on the CPU only
    from scipy.linalg import solve_triangular
    from fastep.inference.inducing import cholesky_uu, init_inducing
    Z = init_inducing(X, SPARSE_NESTED_M, 0)
    Phi = solve_triangular(cholesky_uu(kern(Z)), kern(Z, X), lower=True).T
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        warm = nested_ep(Phi, labels, C, max_iter=5, sparse=True)
        times = [_timed(lambda: nested_ep(Phi, labels, C, warm.site_tau, warm.site_nu,
                                          max_iter=1, sparse=True))[1] for _ in range(repeats)]
    t = float(np.median(times))
    print(f"| multinomial probit, sparse nested EP, C = {C}, m = {SPARSE_NESTED_M} | {t:.3f} | "
          f"{t / base:.2f} ({t / (C * base):.2f} x C probit sweeps) |")


def multiclass(device="cpu", tables=("iris", "wine", "digits")):
    from sklearn.datasets import load_digits, load_iris, load_wine
    from sklearn.metrics import accuracy_score, log_loss
    from sklearn.model_selection import train_test_split
    from sklearn.preprocessing import StandardScaler
    print(f"\nmulticlass: nested EP against one-vs-rest EP and GWI (defaults; 70/30 split; "
          f"device={device}; sparse nested EP, CPU only, with device=cpu)\n")
    print("| table | model | fit s | log loss | accuracy |")
    print("|---|---|---|---|---|")
    for name, load in (("iris", load_iris), ("wine", load_wine), ("digits", load_digits)):
        if name not in tables:
            continue
        X, y = load(return_X_y=True)
        X, Xt, y, yt = train_test_split(X, y, test_size=0.3, stratify=y, random_state=0)
        scale = StandardScaler().fit(X)
        X, Xt = scale.transform(X), scale.transform(Xt)
        models = [fastep.NestedEPClassifier(device=device),
                  fastep.EPGaussianProcessClassifier(device=device),
                  fastep.GWIClassifier(random_state=0, device=device)]
        if X.shape[0] > 2 * SPARSE_NESTED_M and device == "cpu":     # a CPU-only model
            models.insert(1, fastep.NestedEPClassifier(n_inducing=SPARSE_NESTED_M,
                                                       random_state=0))
        for model in models:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                _, s = _timed(lambda: model.fit(X, y))
            p = model.predict_proba(Xt)
            label = type(model).__name__ + (f" (n_inducing={model.n_inducing})"
                                            if getattr(model, "n_inducing", None) else "")
            print(f"| {name} | {label} | {s:.1f} | {log_loss(yt, p):.4f} | "
                  f"{accuracy_score(yt, model.classes_[p.argmax(1)]):.3f} |", flush=True)


def _survival_table(X, t, e, Xt, tt, et, true_median=None):
    import pandas as pd
    from lifelines import (CoxPHFitter, LogLogisticAFTFitter, LogNormalAFTFitter,
                           WeibullAFTFitter)
    from lifelines.utils import concordance_index
    print("| model | fit s | held-out mean log-likelihood | concordance | "
          "median log-RMSE | fitted |")
    print("|---|---|---|---|---|---|")

    def report(name, s, ll, median, fitted=""):
        c = concordance_index(tt, median, et)
        err = ("" if true_median is None else
               f"{np.sqrt(np.mean(np.log(median / true_median) ** 2)):.3f}")
        print(f"| {name} | {s:.1f} | {ll:.4f} | {c:.4f} | {err} | {fitted} |")

    for name in ("weibull", "log_logistic", "log_normal"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            reg, s = _timed(lambda: fastep.EPGaussianProcessRegressor(
                likelihood=name).fit(X, t, event=e))
        ll = float(reg.log_predictive_density(Xt, tt, event=et).mean())
        report(f"fastep GP, {name}", s, ll, reg.predict_median(Xt), repr(reg.likelihood_))
    cols = [f"x{j}" for j in range(X.shape[1])]
    train = pd.DataFrame(X, columns=cols).assign(T=t, E=e)
    test = pd.DataFrame(Xt, columns=cols).assign(T=tt, E=et)
    for name, cls in (("Weibull", WeibullAFTFitter), ("log-logistic", LogLogisticAFTFitter),
                      ("log-normal", LogNormalAFTFitter)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model, s = _timed(lambda: cls().fit(train, "T", "E"))
        ll = float(model.score(test, scoring_method="log_likelihood"))
        median = np.asarray(model.predict_median(test[cols]), dtype=float).ravel()
        report(f"lifelines {name} AFT (linear)", s, ll, median)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cox, s = _timed(lambda: CoxPHFitter().fit(train, "T", "E"))
    # Cox leaves the baseline hazard free: its score is a partial likelihood (not comparable
    # with the others' densities), and its ranking is by the partial hazard
    risk = np.asarray(cox.predict_partial_hazard(test[cols]), dtype=float).ravel()
    print(f"| lifelines Cox proportional hazards (linear) | {s:.1f} | partial: "
          f"{float(cox.score(test, scoring_method='log_likelihood')):.4f} | "
          f"{concordance_index(tt, -risk, et):.4f} |  |  |")


def survival():
    from lifelines.datasets import load_rossi
    from sklearn.model_selection import train_test_split
    from sklearn.preprocessing import StandardScaler

    d = load_rossi()
    X = d.drop(columns=["week", "arrest"]).to_numpy(float)
    t, e = d["week"].to_numpy(float), d["arrest"].to_numpy(float)
    X, Xt, t, tt, e, et = train_test_split(X, t, e, test_size=0.3, random_state=0, stratify=e)
    scaler = StandardScaler().fit(X)
    X, Xt = scaler.transform(X), scaler.transform(Xt)
    print(f"\nrossi: {len(t)} train / {len(tt)} test rows, {X.shape[1]} features, "
          f"{1 - e.mean():.0%} censored\n")
    _survival_table(X, t, e, Xt, tt, et)

    def simulate(n, seed, shape=1.5):
        rng = np.random.default_rng(seed)
        Xs = rng.uniform(-2.0, 2.0, (n, 1))
        scale = np.exp(1.0 + np.sin(2.0 * Xs[:, 0]))
        ts = scale * rng.weibull(shape, n)
        c = rng.uniform(0.5, 12.0, n)
        return (Xs, np.minimum(ts, c), (ts <= c).astype(float),
                scale * np.log(2.0) ** (1.0 / shape))
    Xs, ts, es, _ = simulate(200, 0)
    Xst, tst, est, med = simulate(1000, 1)
    print(f"\nsimulated Weibull AFT, non-linear effect: 200 train ({1 - es.mean():.0%} "
          f"censored) / 1000 test\n")
    _survival_table(Xs, ts, es, Xst, tst, est, med)


SECTIONS = {"zero_inflated": zero_inflated, "survival": survival, "multiclass": multiclass,
            "sweep": sweep}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sections", nargs="+", choices=list(SECTIONS), default=list(SECTIONS))
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                    help="where the sweep and multiclass sections run (a GPU machine)")
    ap.add_argument("--tables", nargs="+", choices=["iris", "wine", "digits"],
                    default=["iris", "wine", "digits"], help="the multiclass section's tables")
    args = ap.parse_args(argv)
    for name in args.sections:
        if name == "sweep":
            sweep(device=args.device)
        elif name == "multiclass":
            multiclass(args.device, args.tables)
        else:
            SECTIONS[name]()


if __name__ == "__main__":
    main()
