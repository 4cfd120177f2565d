"""``fastep fit``: the model chosen by ``--model`` fitted on a table and saved."""
from __future__ import annotations

import contextlib
import sys
import time

import numpy as np

from ..models.nested_problem import dense_matrices
from ..models.regression import REGRESSION_LIKELIHOODS
from ._progress import _FitProgress
from ._tables import (ROW_DATA, _check_features, _check_output, _connect, _named,
                      _row_data_specs, _row_values)


#: ``--model`` of ``fastep fit``: the estimator, and what ``fastep predict`` writes.
MODELS = {
    "classifier": ("EPGaussianProcessClassifier", "class probabilities p_<class>"),
    "multiclass": ("GWIClassifier", "class probabilities p_<class>"),
    "nested": ("NestedEPClassifier", "class probabilities p_<class>"),
    "censored": ("CensoredGPRegressor", "mean and std of the latent f"),
    "annotators": ("MultiAnnotatorGPClassifier", "class probabilities p_<class>"),
    "regression": ("EPGaussianProcessRegressor", "mean and std of the latent f"),
    "ordinal": ("OrdinalGPClassifier", "class probabilities p_<class>"),
}


#: How many integer labels each classifier kind needs (for messages).
NEEDED_LABELS = {"classifier": "2-20", "multiclass": "2 or more", "nested": "2 or more",
                 "ordinal": "3 or more ordered"}


#: Inducing points ``fastep fit`` uses by itself when dense EP would not fit in memory
#: (the estimators' ``n_inducing="auto"`` count).
from fastep.inference.inducing import AUTO_INDUCING  # noqa: E402

#: The regression likelihoods of counts (they take a per-row exposure).
COUNT_LIKELIHOODS = tuple(name for name, lik in REGRESSION_LIKELIHOODS.items()
                          if "exposure" in lik.data_names)
#: The regression likelihoods of survival times (they take a per-row event indicator).
SURVIVAL_LIKELIHOODS = tuple(name for name, lik in REGRESSION_LIKELIHOODS.items()
                             if "event" in lik.data_names)


def _kernel(args, d):
    from fastep import kernels
    cls = {"rbf": kernels.RBF, "matern32": kernels.Matern32,
           "matern52": kernels.Matern52}[args.kernel]
    return cls(1.0, args.lengthscale if args.lengthscale is not None else float(np.sqrt(d)))


def _row_data_columns(args, names):
    """The table's per-row data columns, ``{keyword: column index}``, checked against the
    model they are given to."""
    from fastep.io import resolve_columns
    given = _row_data_specs(args)
    counts = args.model == "regression" and args.likelihood in COUNT_LIKELIHOODS
    censored = args.model == "censored" or (args.model == "regression"
                                             and args.likelihood == "tobit")
    for key in ("lower", "upper"):
        if getattr(args, key) is not None and not censored:
            raise ValueError(f"--{key} applies to --model censored and to --model regression "
                             f"with --likelihood tobit.")
    survival = args.model == "regression" and args.likelihood in SURVIVAL_LIKELIHOODS
    if "event" in given and not survival:
        raise ValueError(f"--event applies to --model regression with a survival likelihood "
                         f"(--likelihood {', '.join(SURVIVAL_LIKELIHOODS)}).")
    if "trials" in given and not (args.model == "regression" and args.likelihood == "binomial"):
        raise ValueError("--trials applies to --model regression with --likelihood binomial.")
    if "exposure" in given and not counts:
        raise ValueError(f"--exposure applies to --model regression with a count likelihood "
                         f"(--likelihood {', '.join(COUNT_LIKELIHOODS)}).")
    for key in ("lower", "upper"):
        if key in given and not censored:
            raise ValueError(f"{ROW_DATA[key]} applies to --model censored and to --model "
                             f"regression with --likelihood tobit.")
        if key in given and getattr(args, key) is not None:
            raise ValueError(f"give --{key} (one limit for every row) or {ROW_DATA[key]} (a "
                             f"limit per row), not both.")
    if censored and not (given.keys() & {"lower", "upper"} or args.lower is not None
                         or args.upper is not None):
        what = ("--model censored" if args.model == "censored" else "--likelihood tobit")
        raise ValueError(f"{what} needs a censoring limit: --lower / --upper, or "
                         "--lower-column / --upper-column.")
    if given and args.scheduler:
        raise ValueError(f"{', '.join(ROW_DATA[k] for k in given)}: per-row data columns are "
                         "read in this process; drop --scheduler (on a cluster, limits, "
                         "exposure and trials are scalars).")
    return {key: resolve_columns(spec, names, ROW_DATA[key])[0] for key, spec in given.items()}


def _row_data(args, names, columns):
    """The per-row data of the fit: ``{keyword: array or scalar}`` for the estimator's
    ``fit`` (limits from --lower / --upper for regression with tobit)."""
    from fastep.io import read_table
    data = {key: _row_values(key, read_table(args.data, [j])[:, 0])
            for key, j in columns.items()}
    for key in ("lower", "upper"):
        if key not in data and args.model == "regression" and getattr(args, key) is not None:
            data[key] = getattr(args, key)
    return data


def _columns(args, names, data_columns=()):
    """(feature columns, target columns) of the table, from --features / --target /
    --annotator-columns (defaults: the last column is the target, the rest, less the
    per-row data columns, features)."""
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
        features = [i for i in range(len(names)) if i not in target
                    and i not in data_columns]
    if not features:
        raise ValueError("no feature columns are left; name them with --features.")
    return features, target


def _needs_inducing(n, args, n_matrices=None):
    """How many inducing points to use: --n-inducing, else AUTO_INDUCING when dense EP's
    ``n_matrices`` (None: ML-II's) n x n matrices would not fit in memory (checked before
    anything is allocated)."""
    from fastep._memory import DENSE_MLII_MATRICES, check_dense_memory
    from fastep.exceptions import DenseMemoryError
    from fastep._memory import host_memory_available
    if args.n_inducing:
        if args.n_inducing > n:
            raise ValueError(f"--n-inducing {args.n_inducing} is more than the {n} rows; use "
                             f"at most {n}.")
        return args.n_inducing
    try:
        n_matrices = DENSE_MLII_MATRICES if n_matrices is None else n_matrices
        check_dense_memory(n, n_matrices, host_memory_available())
        return None
    except DenseMemoryError:
        print(f"fastep fit: dense EP on {n} rows needs about "
              f"{n_matrices * 8 * n * n / 2 ** 30:.0f} GiB; using "
              f"{AUTO_INDUCING} inducing points instead (set --n-inducing to choose)",
              file=sys.stderr)
        return AUTO_INDUCING


def _markov(args, d):
    """Whether the fit runs state-space EP (``--inference markov``), checked: one feature
    column (time) or two (time, then a series id), an estimator that takes it, in
    memory."""
    if getattr(args, "inference", "ep") != "markov":
        return False
    if args.model not in ("classifier", "ordinal", "regression", "censored"):
        raise ValueError(f"--inference markov applies to --model classifier, ordinal, "
                         f"regression or censored; got --model {args.model}.")
    if d not in (1, 2):
        raise ValueError(f"--inference markov models one feature column, time, and "
                         f"optionally a second, a series id; got {d}. Name them with "
                         f"--features TIME[,SERIES].")
    if args.scheduler or args.n_inducing:
        raise ValueError("--inference markov runs in memory without inducing points; drop "
                         "--scheduler and --n-inducing.")
    return True


def _estimator(args, d, m):
    import fastep
    kw = {"random_state": args.seed}
    chosen = args.kernel is not None
    if getattr(args, "inference", "ep") == "markov":
        kw["inference"] = "markov"
        if args.kernel == "rbf":
            raise ValueError("--kernel rbf has no state-space form, which --inference markov "
                             "needs: use --kernel matern32 (the default there) or matern52.")
        args.kernel = args.kernel or "matern32"
    args.kernel = args.kernel or "rbf"
    if args.model != "multiclass":
        kw["optimizer"] = None if args.no_optimize else "L-BFGS-B"
    if args.max_iter is not None:          # EP sweeps; GWI's optimiser iterations
        kw["max_iter"] = args.max_iter
    if m:
        kw["n_inducing"] = m
    # a state-space model's kernel is of time alone (a second column is a series id)
    kernel = _kernel(args, 1 if kw.get("inference") == "markov" else d)
    if args.model == "censored":
        return fastep.CensoredGPRegressor(kernel, lower=args.lower, upper=args.upper, **kw)
    if args.model == "regression":
        return fastep.EPGaussianProcessRegressor(kernel, likelihood=args.likelihood, **kw)
    if args.model == "multiclass":
        # GWIClassifier's own defaults (RBF(4, median distance), min(200, n) inducing
        # inputs) unless a kernel or lengthscale is chosen: on wine, log loss 0.058
        # against 0.183 with RBF(1, sqrt(d)) and 100 inducing inputs
        if not chosen and args.lengthscale is None:
            kernel = None
        return fastep.GWIClassifier(kernel, **kw)
    cls = getattr(fastep, MODELS[args.model][0])
    return cls(kernel, **kw)


def _text_labels(args, y):
    """Class labels that are words ("benign", "malignant"), read as text where the target
    column of a CSV or Parquet table is not all numbers; None where it is (or the table
    holds numbers only, or is read on a cluster).  An empty label is a ValueError naming
    its row."""
    from fastep.io import read_text_column, resolve_columns
    if getattr(args, "scheduler", None) or hasattr(y, "compute") or np.all(np.isfinite(y)):
        return None
    from fastep.io import column_names
    names = column_names(args.data)
    column = resolve_columns(args.target or str(len(names) - 1), names, "--target")[0]
    text = read_text_column(args.data, column)
    if text is None or text.shape[0] != y.shape[0]:
        return None
    empty = np.flatnonzero(text == "")
    if empty.size:
        raise ValueError(f"--target: {empty.size} of {text.size} rows have an empty label "
                         f"(the first is row {int(empty[0])} of DATA); drop those rows or "
                         f"fill their labels.")
    k = np.unique(text).size
    if k < 2 or (args.model == "classifier" and k > 20):
        raise ValueError(f"--target holds {k} distinct label(s); --model {args.model} needs "
                         f"{NEEDED_LABELS[args.model]} class labels. Is it the label column?")
    return text


def _targets(args, T):
    """The target columns checked for the model (labels, limits, annotators).  Dask
    columns (``--scheduler``) are checked by summaries computed on the cluster: the
    distinct labels, counts of bad rows."""
    from fastep._checks import distinct_values
    if args.model == "annotators":          # the label matrix stays on the client (EM)
        return T.compute() if hasattr(T, "compute") else T
    y = T[:, 0]
    if args.model in ("classifier", "multiclass", "nested", "ordinal"):
        labels = distinct_values(y)
        text = _text_labels(args, y) if args.model != "ordinal" else None
        if text is not None:
            return text
        if not np.all(np.isfinite(labels)):
            bad, n = int(np.sum(~np.isfinite(y))), int(y.shape[0])
            if bad == n:
                raise ValueError(f"--target: none of the {n} rows holds a number (text "
                                 "labels, or an empty column); ordinal levels, and labels "
                                 "in .npy or Zarr tables or on a cluster, are integers: map "
                                 "text labels to 0, 1, ... in the table (or fit in Python, "
                                 "whose estimators take text labels), or choose another "
                                 "column.")
            raise ValueError(f"--target: {bad} of {n} rows have no finite label (empty, "
                             "not a number or infinite); drop them or choose another "
                             "column.")
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
    if args.model in ("censored", "regression") and args.lower is not None \
            and args.upper is not None and args.lower >= args.upper:
        raise ValueError(f"--lower {args.lower} must be below --upper {args.upper}.")
    if args.model == "censored":
        lo = -np.inf if args.lower is None else args.lower
        up = np.inf if args.upper is None else args.upper
        bad = int(np.sum((y < lo) | (y > up)))
        if bad:
            raise ValueError(f"{bad} targets lie outside [--lower {lo}, --upper {up}]: "
                             "censored values are recorded at the limit; check the limits.")
    return y


def cmd_fit(args):
    """``fastep fit``: read the table, fit the model, save it.  A client opened for
    ``--scheduler`` is closed when the fit ends (a call of :func:`fastep.cli.main` in
    a Python process leaves no default client behind)."""
    with contextlib.ExitStack() as stack:
        return _fit_table(args, stack)


def _standardisation(X):
    """``(mean, sd)`` of each feature column of X (a NumPy or dask array; sd 1 where a
    column is constant), which ``fastep fit`` standardises by: a GP kernel with one
    lengthscale otherwise follows the columns of the largest spread (breast cancer's
    areas, in the hundreds, against its smoothness, in thousandths: test accuracy 0.930
    raw, 0.959 standardised)."""
    with np.errstate(over="ignore", invalid="ignore"):
        mean, sd = X.mean(axis=0), X.std(axis=0)
        if not isinstance(mean, np.ndarray):             # dask: computed on the workers
            import dask
            mean, sd = dask.compute(mean, sd)
    mean, sd = np.asarray(mean, dtype=float), np.asarray(sd, dtype=float)
    if not (np.all(np.isfinite(mean)) and np.all(np.isfinite(sd))):
        j = int(np.flatnonzero(~(np.isfinite(mean) & np.isfinite(sd)))[0])
        raise ValueError(f"feature column {j}: its mean or sd overflows a float (values "
                         f"near 1e154 or beyond), so it cannot be standardised; rescale it, "
                         f"or fit the raw columns with --no-standardize.")
    # a constant column's sd is rounding (0.1 a hundred times: 2.8e-17), not a scale
    return mean, np.where(sd > 1e-12 * np.abs(mean), sd, 1.0)


def _fit_table(args, stack):
    """:func:`cmd_fit` within ``stack``, which closes what it opens."""
    import fastep
    from fastep.io import column_names, read_dask, read_table

    _check_output(args.output, args.data)
    names = column_names(args.data)
    data_columns = _row_data_columns(args, names)
    features, target = _columns(args, names, set(data_columns.values()))
    named = _named(args.data, names)
    blank = [j for j in features if named is not None and not named[j].strip()]
    if blank:
        raise ValueError(f"feature column {blank[0]} has no name in DATA's header (a row "
                         f"index, as pandas' to_csv writes by default?), and a model must "
                         f"find its features by name when it predicts; write the table "
                         f"with index=False, or choose the feature columns with --features.")
    if args.scheduler:
        if args.model in ("multiclass", "nested"):
            raise ValueError(f"--scheduler runs sparse EP on Dask for --model classifier, "
                             f"censored, annotators or regression; --model {args.model} fits "
                             f"in this process (drop --scheduler).")
        client = stack.enter_context(_connect(args.scheduler))  # workers read DATA, once
        X, T = client.persist([read_dask(args.data, features), read_dask(args.data, target)])
    else:
        X, T = read_table(args.data, features), read_table(args.data, target)
    _check_features(X, [names[j] for j in features])
    args.n_rows = X.shape[0]
    scaling = _standardisation(X) if args.standardize else None
    if scaling is not None:
        X = (X - scaling[0]) / scaling[1]
    y = _targets(args, T)
    data = _row_data(args, names, data_columns)
    markov = _markov(args, X.shape[1])
    m = None if markov else _needs_inducing(X.shape[0], args, dense_matrices(
        np.unique(y).size) if args.model == "nested" else None)
    if args.scheduler and not m:
        m = AUTO_INDUCING if X.shape[0] > AUTO_INDUCING else max(1, X.shape[0] // 2)
        print(f"fastep fit: --scheduler runs sparse EP; using {m} inducing points (set "
              "--n-inducing to choose)", file=sys.stderr)
    est = _estimator(args, X.shape[1], m)
    print(f"fastep fit: {MODELS[args.model][0]} on {X.shape[0]} rows, {X.shape[1]} features"
          f"{' (standardised)' if scaling is not None else ''}"
          f"{f', {m} inducing points' if m else ''}"
          f"{f' on the Dask cluster at {args.scheduler}' if args.scheduler else ''}",
          file=sys.stderr)
    t0 = time.perf_counter()
    progress = _FitProgress()
    try:
        est.fit(X, y, **data)
    finally:
        progress.close()
    fitted = None
    if named is not None:
        fitted = [named[j] for j in features]
        if len(set(fitted)) != len(fitted):
            fitted = None
            print("fastep fit: the feature columns' names are repeated, so the model keeps "
                  "none: fastep predict will need a table of exactly its features, in order, "
                  "or --features.", file=sys.stderr)
    # the model file keeps the columns (found by name) and their scaling, which fastep
    # predict and the Pipeline that load_model gives in Python apply
    from fastep.models.columns import table_model
    fastep.save_model(table_model(est, fitted, *(scaling or (None, None))), args.output)
    lz = getattr(est, "log_marginal_likelihood_value_", None)
    print(f"fitted in {time.perf_counter() - t0:.2f} s"
          f"{f', log evidence {lz:.4f}' if lz is not None else ''}; saved {args.output}",
          file=sys.stderr)
    return 0
