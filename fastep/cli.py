"""The ``fastep`` command: demo, fit, predict, bench.

    fastep demo                          EP-GP classifier on the bundled breast-cancer data
    fastep demo annotators               the same data labelled by 8 simulated noisy annotators
    fastep demo censored                 Tobit GP regression on outputs censored below a limit
    fastep demo multiclass               GWI multiclass GP classifier on scikit-learn's digits
    fastep fit DATA -o MODEL.npz --model {classifier,multiclass,censored,annotators,regression}
                                         fit on a CSV, .npy, Parquet or Zarr table
    fastep predict MODEL.npz DATA -o P   stream probabilities / moments for new inputs
    fastep bench                         one EP sweep against one LAPACK Cholesky of the same n
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

from . import __version__


def cmd_demo(args):
    if args.which == "annotators":
        return demo_annotators(args)
    if args.which == "censored":
        return demo_censored(args)
    if args.which == "multiclass":
        return demo_multiclass(args)
    import fastep
    from fastep.datasets import load_breast_cancer, split_standardized
    from fastep.kernels import RBF

    t0 = time.perf_counter()
    X, y, _ = load_breast_cancer()
    Xtr, Xte, ytr, yte = split_standardized(X, y, random_state=args.seed)
    t1 = time.perf_counter()
    clf = fastep.EPGaussianProcessClassifier(RBF(variance=1.0, lengthscale=3.0),
                                             method=args.method)
    clf.fit(Xtr, ytr)
    fit_s = time.perf_counter() - t1
    p = clf.predict_proba(Xte)[:, 1]
    acc = float(np.mean((p > 0.5) == (yte == 1)))
    lpd = float(np.mean(np.log(np.where(yte == 1, p, 1.0 - p))))
    print("fastep demo: EP Gaussian-process classifier, Wisconsin breast cancer (bundled)")
    print(f"  train / test           : {len(ytr)} / {len(yte)} (seed {args.seed}), 30 features")
    print(f"  EP method              : {args.method}")
    print(f"  fitted kernel          : {clf.kernel_}")
    print(f"  test accuracy          : {acc:.4f}")
    print(f"  test log pred. density : {lpd:.4f} per point")
    print(f"  log Z_EP (train)       : {clf.log_marginal_likelihood_value_:.4f}")
    print(f"  EP sweeps (final run)  : {clf.n_iter_} (converged: {clf.converged_})")
    print(f"  fit time (ML-II + EP)  : {fit_s:.2f} s")
    _print_compile_note()
    print(f"  total                  : {time.perf_counter() - t0:.2f} s")
    return 0


def demo_annotators(args):
    """GPC-MA on breast cancer with the paper's 8 simulated annotators, against MV."""
    import fastep
    from fastep.datasets import load_breast_cancer, simulate_annotators, split_standardized
    from fastep.kernels import RBF
    from fastep.models.annotators import majority_vote

    X, y, _ = load_breast_cancer()
    Xtr, Xte, ytr, yte = split_standardized(X, y, random_state=args.seed)
    sens = [0.9, 0.9, 0.8, 0.4, 0.3, 0.4, 0.6, 0.5]
    spec = [0.8, 0.9, 0.9, 0.4, 0.5, 0.5, 0.5, 0.4]
    Y = simulate_annotators(ytr, sens, spec, random_state=args.seed)
    kernel = RBF(1.0, np.sqrt(X.shape[1]))
    t = time.perf_counter()
    ma = fastep.MultiAnnotatorGPClassifier(kernel, method=args.method, optimizer=None).fit(Xtr, Y)
    t_ma = time.perf_counter() - t
    t = time.perf_counter()
    mv = fastep.EPGaussianProcessClassifier(kernel, optimizer=None, method=args.method).fit(
        Xtr, majority_vote(Y, random_state=args.seed))
    t_mv = time.perf_counter() - t
    print("fastep demo annotators: GP classification from 8 simulated noisy annotators "
          "(both models with the kernel fixed)")
    print(f"  data                   : breast cancer, {len(ytr)} train / {len(yte)} test")
    print("  annotator   true sens  est. sens  true spec  est. spec")
    for r in range(len(sens)):
        print(f"  {r:9d} {sens[r]:10.2f} {ma.sensitivity_[r]:10.3f} {spec[r]:10.2f} "
              f"{ma.specificity_[r]:10.3f}")
    for name, m, t in (("GPC-MA", ma, t_ma), ("majority vote", mv, t_mv)):
        acc = m.score(Xte, yte)
        print(f"  {name:14s} test accuracy {acc:.4f}   fit {t:.2f} s")
    print(f"  EP sweeps (MA, total)  : {ma.n_iter_}, converged: {ma.converged_}")
    _print_compile_note()
    return 0


def demo_censored(args):
    """Tobit GP on the Forrester function censored below -0.45, against a clipped GP."""
    import fastep
    from fastep.kernels import RBF

    rng = np.random.default_rng(args.seed)

    def f(x):
        return (6 * x - 2) ** 2 * np.sin(2 * (6 * x - 2))

    X = rng.uniform(0, 1, (30, 1))
    y = np.maximum(f(X[:, 0]) + np.sqrt(0.1) * rng.normal(size=30), -0.45)
    grid = np.linspace(0, 1, 400)[:, None]
    region = f(grid[:, 0]) < -0.45
    t = time.perf_counter()
    tob = fastep.CensoredGPRegressor(RBF(10.0, 0.2), noise_variance=0.1, lower=-0.45,
                                     n_restarts_optimizer=2, random_state=0).fit(X, y)
    t_fit = time.perf_counter() - t
    clip = fastep.CensoredGPRegressor(RBF(10.0, 0.2), noise_variance=0.1,
                                      n_restarts_optimizer=2, random_state=0).fit(X, y)
    print("fastep demo censored: GP regression with outputs censored below -0.45")
    print(f"  data                   : f(x) = (6x-2)^2 sin(2(6x-2)), n = 30, "
          f"{int(np.sum(y <= -0.45))} censored")
    for name, m in (("Tobit EP", tob), ("GP on clipped y", clip)):
        rmse = np.sqrt(np.mean((m.predict_latent(grid)[region] - f(grid[region, 0])) ** 2))
        print(f"  {name:16s} latent RMSE where f < -0.45: {rmse:.3f}   kernel {m.kernel_}, "
              f"noise {m.noise_variance_:.3g}")
    p_low = tob.predict_censored_proba(grid[::80])[0]
    print("  P(y = -0.45) at x = " + ", ".join(f"{x:.2f}: {p:.2f}"
                                               for x, p in zip(grid[::80, 0], p_low)))
    print(f"  Tobit fit (ML-II + EP) : {t_fit:.2f} s, log Z_EP {tob.log_marginal_likelihood_value_:.3f}")
    _print_compile_note()
    return 0


def demo_multiclass(args):
    """GWI (robust max, W2 regulariser) on digits (or iris), with the fit's progress."""
    import logging

    import fastep
    from fastep.datasets import split_standardized
    try:
        from sklearn import datasets
    except ImportError:
        raise ValueError("fastep demo multiclass needs scikit-learn for its offline data: "
                         "pip install 'fastep[experiments]'") from None

    X, y = {"digits": datasets.load_digits, "iris": datasets.load_iris}[args.dataset](
        return_X_y=True)
    Xtr, Xte, ytr, yte = split_standardized(X, y, random_state=args.seed)
    logging.basicConfig(level=logging.INFO, format="  %(message)s", stream=sys.stderr)
    t = time.perf_counter()
    clf = fastep.GWIClassifier(random_state=args.seed).fit(Xtr, ytr)
    fit_s = time.perf_counter() - t
    p = clf.predict_proba(Xte)
    nll = -float(np.mean(np.log(p[np.arange(len(yte)), np.searchsorted(clf.classes_, yte)])))
    print(f"fastep demo multiclass: GWI Gaussian-process classifier, {args.dataset} "
          "(scikit-learn, offline)")
    print(f"  train / test           : {len(ytr)} / {len(yte)} (seed {args.seed}), "
          f"{X.shape[1]} features, {len(clf.classes_)} classes")
    print(f"  prior kernel           : {clf.kernel_}, {len(clf.inducing_points_)} inducing inputs")
    print(f"  test accuracy          : {clf.score(Xte, yte):.4f}")
    print(f"  test NLL               : {nll:.4f} per point")
    print(f"  W2^2 per class (mean)  : {float(np.mean(clf.w2_)):.4f}")
    print(f"  temperature            : {clf.temperature_:.3g}")
    print(f"  L-BFGS-B iterations    : {clf.n_iter_}")
    print(f"  fit time               : {fit_s:.2f} s")
    _print_compile_note()
    return 0


#: ``--model`` of ``fastep fit``: the estimator, and what ``fastep predict`` writes.
MODELS = {
    "classifier": ("EPGaussianProcessClassifier", "class probabilities p_<class>"),
    "multiclass": ("GWIClassifier", "class probabilities p_<class>"),
    "censored": ("CensoredGPRegressor", "mean and std of the latent f"),
    "annotators": ("MultiAnnotatorGPClassifier", "class probabilities p_<class>"),
    "regression": ("EPGaussianProcessRegressor", "mean and std of the latent f"),
    "ordinal": ("OrdinalGPClassifier", "class probabilities p_<class>"),
}
#: How many integer labels each classifier kind needs (for messages).
NEEDED_LABELS = {"classifier": "2-20", "multiclass": "2 or more",
                 "ordinal": "3 or more ordered"}
#: Inducing points ``fastep fit`` uses by itself when dense EP would not fit in memory.
AUTO_INDUCING = 256


def _kernel(args, d):
    from fastep import kernels
    cls = {"rbf": kernels.RBF, "matern32": kernels.Matern32,
           "matern52": kernels.Matern52}[args.kernel]
    return cls(1.0, args.lengthscale if args.lengthscale is not None else float(np.sqrt(d)))


def _columns(args, names):
    """(feature columns, target columns) of the table, from --features / --target /
    --annotator-columns (defaults: the last column is the target, the rest features)."""
    from fastep.io import resolve_columns
    if args.model == "annotators":
        if not args.annotator_columns:
            raise ValueError("--model annotators needs --annotator-columns: the columns of "
                             "the annotators' labels (NaN or empty = not labelled).")
        target = resolve_columns(args.annotator_columns, names, "--annotator-columns")
    else:
        target = resolve_columns(args.target or str(len(names) - 1), names, "--target")
    if args.features:
        features = resolve_columns(args.features, names, "--features")
    else:
        features = [i for i in range(len(names)) if i not in target]
    if not features:
        raise ValueError("no feature columns are left; name them with --features.")
    return features, target


def _needs_inducing(n, args):
    """How many inducing points to use: --n-inducing, else AUTO_INDUCING when dense EP's
    n x n matrices would not fit in memory (checked before anything is allocated)."""
    from fastep._checks import DENSE_MLII_MATRICES, check_dense_memory
    from fastep.exceptions import DenseMemoryError
    from fastep._checks import host_memory_available
    if args.n_inducing:
        if args.n_inducing > n:
            raise ValueError(f"--n-inducing {args.n_inducing} is more than the {n} rows; use "
                             f"at most {n}.")
        return args.n_inducing
    try:
        check_dense_memory(n, DENSE_MLII_MATRICES, host_memory_available())
        return None
    except DenseMemoryError:
        print(f"fastep fit: dense EP on {n} rows needs about "
              f"{DENSE_MLII_MATRICES * 8 * n * n / 2 ** 30:.0f} GiB; using "
              f"{AUTO_INDUCING} inducing points instead (set --n-inducing to choose)",
              file=sys.stderr)
        return AUTO_INDUCING


def _estimator(args, d, m):
    import fastep
    kw = {"random_state": args.seed}
    if args.model != "multiclass":
        kw["optimizer"] = None if args.no_optimize else "L-BFGS-B"
    if args.max_iter is not None:          # EP sweeps; GWI's optimiser iterations
        kw["max_iter"] = args.max_iter
    if m:
        kw["n_inducing"] = m
    kernel = _kernel(args, d)
    if args.model == "censored":
        return fastep.CensoredGPRegressor(kernel, lower=args.lower, upper=args.upper, **kw)
    if args.model == "regression":
        return fastep.EPGaussianProcessRegressor(kernel, likelihood=args.likelihood, **kw)
    if args.model == "multiclass":
        return fastep.GWIClassifier(kernel, **{**kw, "n_inducing": m or min(100, args.n_rows)})
    cls = getattr(fastep, MODELS[args.model][0])
    return cls(kernel, **kw)


def _targets(args, T):
    """The target columns checked for the model (labels, limits, annotators).  Dask
    columns (``--scheduler``) are checked by summaries computed on the cluster: the
    distinct labels, counts of bad rows."""
    from fastep._checks import distinct_values
    if args.model == "annotators":          # the label matrix stays on the client (EM)
        return T.compute() if hasattr(T, "compute") else T
    y = T[:, 0]
    if args.model in ("classifier", "multiclass", "ordinal"):
        labels = distinct_values(y)
        if not np.all(np.isfinite(labels)):
            raise ValueError(f"--target: {int(np.sum(~np.isfinite(y)))} rows have no finite "
                             "label (empty, not a number or infinite); drop them or choose "
                             "another column.")
        if np.all(labels == np.round(labels)):
            y = y.astype(np.int64)            # integer labels keep their names (p_1, not p_1.0)
        k = labels.size
        if y.dtype.kind == "f" or k < 2 or (args.model == "classifier" and k > 20) or \
                (args.model == "ordinal" and k < 3):
            raise ValueError(f"--target holds {k} distinct value(s)"
                             f"{' that are not integers' * (y.dtype.kind == 'f')}; --model "
                             f"{args.model} needs "
                             f"{NEEDED_LABELS[args.model]} "
                             "integer class labels. Is it the label column?")
    if args.model == "censored" and args.lower is not None and args.upper is not None \
            and args.lower >= args.upper:
        raise ValueError(f"--lower {args.lower} must be below --upper {args.upper}.")
    if args.model == "censored":
        lo = -np.inf if args.lower is None else args.lower
        up = np.inf if args.upper is None else args.upper
        bad = int(np.sum((y < lo) | (y > up)))
        if bad:
            raise ValueError(f"{bad} targets lie outside [--lower {lo}, --upper {up}]: "
                             "censored values are recorded at the limit; check the limits.")
    return y


def _check_features(X, names):
    """Every feature cell a number (for dask columns: the first bad row, found on the
    cluster); ``names`` of X's columns, for the message."""
    bad = ~np.isfinite(X)
    rows = bad.any(axis=1)
    found, i = rows.any(), rows.argmax()
    if hasattr(bad, "compute"):                     # one pass over the dask columns
        import dask
        found, i = dask.compute(found, i)
    if found:
        raise ValueError(f"DATA: {_bad_cell(bad[i], i, names)}; drop such rows or choose "
                         "the columns with --features.")


def _bad_cell(bad_row, i, names):
    """Where the first empty or non-numeric cell of a row is, in words."""
    bad_row = np.asarray(bad_row.compute() if hasattr(bad_row, "compute") else bad_row)
    j = int(np.argmax(bad_row))
    return (f"data row {i} (0-based, not counting a header line), column {names[j]!r}, "
            "holds an empty, non-numeric or infinite cell")


def _check_output(path):
    """Fail before any work where ``-o`` cannot be written: a folder that does not exist,
    or a folder given as the file."""
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path) or str(path).endswith(("/", os.sep)):
        raise ValueError(f"-o {path!r} is a folder; give a file name in it, e.g. "
                         f"{os.path.join(path, 'model.npz')!r}.")
    if not os.path.isdir(folder):
        raise ValueError(f"-o {path!r}: the folder {folder!r} does not exist; create it "
                         "first (mkdir -p).")


def _named(path, names):
    """The column names of the table if it has them (a header), else None."""
    from fastep.io import has_names
    return list(names) if has_names(path) else None


def cmd_fit(args):
    import fastep
    from fastep.io import column_names, read_dask, read_table

    _check_output(args.output)
    names = column_names(args.data)
    features, target = _columns(args, names)
    if args.scheduler:
        if args.model == "multiclass":
            raise ValueError("--scheduler runs sparse EP on Dask for --model classifier, "
                             "censored, annotators or regression; --model multiclass fits in "
                             "this process (drop --scheduler).")
        client = _connect(args.scheduler)    # the workers read DATA, chunk by chunk, once
        X, T = client.persist([read_dask(args.data, features), read_dask(args.data, target)])
    else:
        X, T = read_table(args.data, features), read_table(args.data, target)
    _check_features(X, [names[j] for j in features])
    args.n_rows = X.shape[0]
    y = _targets(args, T)
    m = _needs_inducing(X.shape[0], args)
    if args.scheduler and not m:
        m = AUTO_INDUCING if X.shape[0] > AUTO_INDUCING else max(1, X.shape[0] // 2)
        print(f"fastep fit: --scheduler runs sparse EP; using {m} inducing points (set "
              "--n-inducing to choose)", file=sys.stderr)
    est = _estimator(args, X.shape[1], m)
    print(f"fastep fit: {MODELS[args.model][0]} on {X.shape[0]} rows, {X.shape[1]} features"
          f"{f', {m} inducing points' if m else ''}"
          f"{f' on the Dask cluster at {args.scheduler}' if args.scheduler else ''}",
          file=sys.stderr)
    t0 = time.perf_counter()
    progress = _FitProgress()
    try:
        est.fit(X, y)
    finally:
        progress.close()
    named = _named(args.data, names)
    if named is not None:
        fitted = [named[j] for j in features]
        if len(set(fitted)) == len(fitted) and all(fitted):
            est.feature_columns_ = fitted     # fastep predict finds them by name
        else:
            print("fastep fit: the feature columns' names are blank or repeated, so the model "
                  "keeps none: fastep predict will need a table of exactly its features, in "
                  "order, or --features.", file=sys.stderr)
    fastep.save_model(est, args.output)
    lz = getattr(est, "log_marginal_likelihood_value_", None)
    print(f"fitted in {time.perf_counter() - t0:.2f} s"
          f"{f', log evidence {lz:.4f}' if lz is not None else ''}; saved {args.output}",
          file=sys.stderr)
    return 0


def _connect(address):
    """A ``distributed.Client`` of the Dask scheduler at ``address`` (``--scheduler``),
    made the default for what follows."""
    try:
        from distributed import Client
    except ImportError:
        raise ValueError("--scheduler needs dask: pip install \"fastep[dask]\"") from None
    return Client(address)


def cmd_predict(args):
    from fastep import load_model
    from fastep.io import TableWriter, column_names, iter_rows, n_rows
    from fastep.likelihoods import NegativeBinomial, Poisson

    _check_output(args.output)
    est = load_model(args.model)
    d = est.n_features_in_
    names = column_names(args.data)
    columns = _predict_columns(args, est, names)
    if len(columns) != d:
        raise ValueError(f"the model was fitted on {d} features; --features names "
                         f"{len(columns)}.")
    classes = getattr(est, "classes_", None)
    if classes is not None:
        header = [f"p_{c}" for c in classes]
        predict = est.predict_proba
    elif hasattr(est, "predict_censored_proba") and np.ndim(est.lower_) == 0 \
            and np.ndim(est.upper_) == 0:
        # censored: the latent f, the censored y, its probabilities at the limits and
        # its quartiles
        header = ["mean", "std", "y_mean", "y_std", "p_lower", "p_upper", "y_q25", "y_q50",
                  "y_q75"]

        def predict(Xc):
            mean, std = est.predict_latent(Xc, return_std=True)
            y_mean, y_std = est.predict(Xc, return_std=True)
            quartiles = [est.predict_quantile(Xc, q) for q in (0.25, 0.5, 0.75)]
            return np.column_stack([mean, std, y_mean, y_std,
                                    *est.predict_censored_proba(Xc), *quartiles])
    elif _counts_without_exposure(est, Poisson, NegativeBinomial):
        header = ["mean", "std", "y_mean"]          # counts: the latent log rate and E[y]

        def predict(Xc):
            mean, std = est.predict_latent(Xc, return_std=True)
            return np.column_stack([mean, std, est.predict(Xc)])
    else:
        header = ["mean", "std"]

        def predict(Xc):
            mean, std = est.predict_latent(Xc, return_std=True)
            return np.column_stack([mean, std])
    total = n_rows(args.data)
    writer = TableWriter(args.output, header, total)
    done = 0
    for block in _progress(iter_rows(args.data, columns, args.chunk), total, args.chunk,
                           "predict"):
        if not np.all(np.isfinite(block)):
            k = int(np.argwhere(~np.isfinite(block))[0, 0])
            where = _bad_cell(~np.isfinite(block[k]), done + k, [names[j] for j in columns])
            raise ValueError(f"DATA: {where}.")
        writer.write(predict(block))
        done += block.shape[0]
    writer.close()
    print(f"wrote {done} rows ({', '.join(header)}) to {args.output}", file=sys.stderr)
    return 0


def _counts_without_exposure(est, *counts):
    """Whether ``est`` is a count model that predicts E[y] without per-observation
    exposures (one fitted in Python with ``exposure=`` needs them, which the command line
    cannot give: it writes the latent mean and sd only)."""
    if not isinstance(getattr(est, "likelihood_", None), counts):
        return False
    try:
        est.predict(np.zeros((1, est.n_features_in_)))
    except ValueError:
        return False
    return True


def _predict_columns(args, est, names):
    """DATA's feature columns for ``fastep predict``: --features, else the columns named
    as the model's features (a model fitted on a table with a header), else, for tables
    without names, all of DATA's columns when there are exactly as many as the model's
    features (positions are a guess only when nothing else is possible)."""
    from fastep.io import resolve_columns
    if args.features:
        return resolve_columns(args.features, names, "--features")
    d, fitted = est.n_features_in_, getattr(est, "feature_columns_", None)
    named = _named(args.data, names)
    if fitted is not None and named is not None:
        missing = [f for f in fitted if f not in named]
        if missing:
            raise ValueError(f"DATA has no column {', '.join(map(repr, missing[:5]))}, "
                             f"which the model was fitted on (its features: "
                             f"{', '.join(map(str, fitted[:20]))}); name DATA's feature "
                             "columns, in the model's order, with --features.")
        twice = [f for f in fitted if named.count(f) > 1]
        if twice:
            raise ValueError(f"DATA has more than one column named "
                             f"{', '.join(map(repr, twice[:5]))}; name DATA's feature columns, "
                             "in the model's order, with --features (0-based positions).")
        return [named.index(f) for f in fitted]
    if len(names) != d:
        have = "named" if named is not None else "unnamed"
        raise ValueError(f"the model was fitted on {d} features; DATA has {len(names)} "
                         f"{have} columns. Name the feature columns, in the order the model "
                         "was fitted on, with --features.")
    return list(range(d))


def _tqdm():
    """tqdm's progress bar class when stderr is a terminal and tqdm is installed, else
    None (quiet in pipes and logs)."""
    if not sys.stderr.isatty():
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm


def _progress(chunks, total, size, what):
    """A progress bar over the chunks on a terminal; the chunks as they are elsewhere."""
    bar = _tqdm()
    if bar is None:
        return chunks
    return bar(chunks, total=-(-total // size), desc=f"fastep {what}", unit="chunk")


class _FitProgress:
    """Progress bars of a fit on a terminal, fed by fastep's logging: ML-II steps (logger
    ``fastep``, INFO) and EP sweeps (``fastep.sweeps``, DEBUG).  A no-op in a pipe."""

    def __init__(self):
        import logging
        self.bar, self.handler = _tqdm(), None
        if self.bar is None:
            return
        self.steps = self.bar(desc="ML-II steps", unit="step", position=0)
        self.sweeps = self.bar(desc="EP sweeps", unit="sweep", position=1)
        outer = self

        class Handler(logging.Handler):
            def emit(self, record):
                msg = record.getMessage()
                if record.name == "fastep" and not msg.startswith("ML-II step"):
                    return
                bar = outer.sweeps if record.name == "fastep.sweeps" else outer.steps
                bar.update(1)
                bar.set_postfix_str(msg.split(":", 1)[-1].strip()[:40], refresh=False)

        self.handler = Handler()
        for name, level in (("fastep", logging.INFO), ("fastep.sweeps", logging.DEBUG)):
            log = logging.getLogger(name)
            log.addHandler(self.handler)
            log.setLevel(level)
        logging.getLogger("fastep.sweeps").propagate = False

    def close(self):
        if self.handler is None:
            return
        import logging
        for name in ("fastep", "fastep.sweeps"):
            logging.getLogger(name).removeHandler(self.handler)
        logging.getLogger("fastep.sweeps").propagate = True
        self.steps.close()
        self.sweeps.close()


def cmd_bench(args):
    import scipy.linalg as sl

    import fastep
    from fastep.kernels import RBF
    from fastep.likelihoods import Probit
    import warnings

    fastep.precompile()
    rng = np.random.default_rng(0)
    X = rng.normal(size=(args.n, 3))
    y = np.where(X[:, 0] + 0.3 * rng.normal(size=args.n) > 0, 1.0, -1.0)
    K = RBF()(X)

    def med(f, r=3):
        ts = []
        for _ in range(r):
            t = time.perf_counter()
            f()
            ts.append(time.perf_counter() - t)
        return float(np.median(ts))

    floor = med(lambda: sl.cholesky(K + np.eye(args.n), lower=True))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t6 = med(lambda: fastep.ep(K, y, Probit(), max_iter=6, tol=1e-300, check_psd=False))
        t2 = med(lambda: fastep.ep(K, y, Probit(), max_iter=2, tol=1e-300, check_psd=False))
    sweep = (t6 - t2) / 4
    print(f"n = {args.n}: one parallel EP sweep {sweep * 1e3:.1f} ms, one LAPACK Cholesky "
          f"{floor * 1e3:.1f} ms, ratio {sweep / floor:.2f}")
    return 0


def _print_compile_note():
    from fastep._jit import _ANNOUNCED
    if _ANNOUNCED.is_set():
        print("  (this first run compiled fastep's kernels; later runs load them from the "
              "cache)")


def _show_compile_notice():
    """Print fastep's one-time "compiling" notice (a fresh install compiles its kernels
    on first use) on stderr, whatever the logging configuration."""
    import logging
    log = logging.getLogger("fastep.compile")
    if not any(getattr(h, "_fastep_notice", False) for h in log.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("fastep: %(message)s ..."))
        handler._fastep_notice = True
        log.addHandler(handler)
        log.setLevel(logging.INFO)


def _positive(kind):
    """An argparse type: a positive int or a positive finite float."""
    def parse(text):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a positive {kind.__name__}; got "
                                             f"{text!r}") from None
        if not (value > 0 and np.isfinite(value)):
            raise argparse.ArgumentTypeError(f"must be positive; got {text}")
        return value
    parse.__name__ = f"positive {kind.__name__}"
    return parse


def main(argv=None):
    parser = argparse.ArgumentParser(prog="fastep", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"fastep {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("demo", help="fit the EP classifier on bundled data and report")
    p.add_argument("which", nargs="?", default="classifier",
                   choices=["classifier", "annotators", "censored", "multiclass"])
    p.add_argument("--dataset", choices=["digits", "iris"], default="digits",
                   help="data of the multiclass demo")
    p.add_argument("--method", choices=["auto", "parallel", "sequential"], default="auto",
                   help="dense EP schedule (the estimators' 'method')")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=cmd_demo)
    p = sub.add_parser("fit", help="fit a model on a table (CSV, .npy, Parquet, Zarr)")
    p.add_argument("data", help="table: .csv, .csv.gz, .npy, .parquet or .zarr")
    p.add_argument("-o", "--output", required=True, help="model file (.npz)")
    p.add_argument("--model", choices=sorted(MODELS), default="classifier")
    p.add_argument("--target", help="label / target column (name or 0-based index; "
                   "default: the last column)")
    p.add_argument("--features", help="comma-separated feature columns (default: the rest)")
    p.add_argument("--annotator-columns", help="annotators: the columns of their labels")
    p.add_argument("--lower", type=float, help="censored: lower censoring limit")
    p.add_argument("--upper", type=float, help="censored: upper censoring limit")
    p.add_argument("--likelihood", default="student_t",
                   choices=["student_t", "gaussian", "poisson", "negative_binomial"],
                   help="regression: the noise model (poisson, negative_binomial: counts; "
                   "predict then also writes y_mean, E[y])")
    p.add_argument("--kernel", choices=["rbf", "matern32", "matern52"], default="rbf")
    p.add_argument("--lengthscale", type=_positive(float),
                   help="initial lengthscale (default sqrt(d))")
    p.add_argument("--n-inducing", type=_positive(int),
                   help="sparse EP with this many inducing points "
                   f"(default: dense, or {AUTO_INDUCING} when dense EP would not fit in "
                   "memory)")
    p.add_argument("--max-iter", type=_positive(int),
                   help="most EP sweeps (default: the estimator's, 100 or 200); multiclass: "
                   "most iterations of GWI's optimiser (default 200)")
    p.add_argument("--no-optimize", action="store_true", help="keep the kernel fixed")
    p.add_argument("--scheduler", help="run on the Dask scheduler at this address")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=cmd_fit)
    p = sub.add_parser("predict", help="stream predictions for a table, chunk by chunk")
    p.add_argument("model")
    p.add_argument("data")
    p.add_argument("-o", "--output", required=True, help="CSV or .npy output")
    p.add_argument("--features", help="comma-separated feature columns (default: the "
                   "columns named as the model's features; for a table without a header, "
                   "all its columns, which must be as many as the model's)")
    p.add_argument("--chunk", type=_positive(int), default=100000, help="rows per chunk")
    p.set_defaults(func=cmd_predict)
    p = sub.add_parser("bench", help="EP sweep time against one Cholesky")
    p.add_argument("-n", type=_positive(int), default=2000)
    p.set_defaults(func=cmd_bench)
    args = parser.parse_args(argv)
    _show_compile_notice()
    try:
        return args.func(args)
    except (ValueError, TypeError, OSError, MemoryError) as exc:
        print(f"fastep {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
