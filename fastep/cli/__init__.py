"""The ``fastep`` command: demo, fit, predict, info, bench.

    fastep demo                          EP-GP classifier on the bundled breast-cancer data
    fastep demo annotators               the same data labelled by 8 simulated noisy annotators
    fastep demo censored                 Tobit GP regression on outputs censored below a limit
    fastep demo multiclass               GWI multiclass GP classifier on scikit-learn's digits
    fastep fit DATA -o MODEL.npz --model {classifier,multiclass,nested,censored,annotators,
                                          regression,ordinal}
                                         fit on a CSV, .npy, Parquet or Zarr table
                                         (multiclass: GWI; nested: nested EP)
    fastep predict MODEL.npz DATA -o P   stream probabilities / moments for new inputs
                                         (and the predicted label, and each row's id)
    fastep info MODEL.npz                what a saved model holds
    fastep bench                         one EP sweep against one LAPACK Cholesky of the same n
"""
# The parser is here (its description, ``fastep --help``, is the docstring above); each
# command is a module (_demos, _fit, _predict, _info, _bench), with the checks of tables and paths
# they share (_tables) and the progress bars (_progress); reading and writing tables is
# fastep.io.
from __future__ import annotations

import argparse
import sys
import warnings

import numpy as np

from .. import __version__
from ..models.regression import REGRESSION_LIKELIHOODS
from ._bench import cmd_bench
from ._demos import cmd_demo
from ._fit import AUTO_INDUCING, MODELS, cmd_fit
from ._info import cmd_info
from ._predict import cmd_predict


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


#: Optional packages a command may import: (the extra that installs it, what needs it).
OPTIONAL_MODULES = {"pyarrow": ("dask", "a Parquet table"), "zarr": ("dask", "a Zarr table"),
                    "dask": ("dask", "--scheduler (or a Dask read)"),
                    "distributed": ("dask", "--scheduler")}


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
    p.add_argument("--lower", type=float, help="censored (and regression with "
                   "--likelihood tobit): lower censoring limit")
    p.add_argument("--upper", type=float, help="censored (and regression with "
                   "--likelihood tobit): upper censoring limit")
    p.add_argument("--lower-column", help="the column of each row's lower limit (in place of "
                   "--lower; empty or -inf: none)")
    p.add_argument("--upper-column", help="the column of each row's upper limit (in place of "
                   "--upper; empty or inf: none)")
    p.add_argument("--exposure", help="regression with counts: the column of each row's "
                   "exposure (e.g. years at risk); predict then needs it too")
    p.add_argument("--trials", help="regression with --likelihood binomial: the column of "
                   "each row's number of trials (the target counts its successes; default "
                   "1); predict writes the success probability p, and y_mean with --trials")
    p.add_argument("--event", help="regression with survival times (--likelihood weibull, "
                   "log_logistic, log_normal): the column of each row's event indicator, 1 "
                   "for an event at the time, 0 for a right-censored time (default: all "
                   "events); predict writes the median time")
    p.add_argument("--likelihood", default="student_t", choices=list(REGRESSION_LIKELIHOODS),
                   help="regression: the noise model (poisson, negative_binomial and their "
                   "zero_inflated_ forms: counts, for which predict also writes y_mean, "
                   "E[y]; binomial: successes out of --trials; weibull, log_logistic, log_normal: survival times, with --event, "
                   "for which predict also writes t_median; tobit: censored at --lower / "
                   "--upper or the limit columns)")
    p.add_argument("--kernel", choices=["rbf", "matern32", "matern52"],
                   help="the kernel (default rbf; with --inference markov matern32, and rbf, "
                   "which has no state-space form, is refused)")
    p.add_argument("--inference", choices=["ep", "markov"], default="ep",
                   help="markov: state-space EP in O(n) over one feature column, time, and "
                   "optionally a second, a series id (--features TIME[,SERIES]; --model "
                   "classifier, ordinal, regression or censored; kernel matern32 unless "
                   "--kernel matern52)")
    p.add_argument("--lengthscale", type=_positive(float),
                   help="initial lengthscale (default sqrt(d); multiclass: GWIClassifier's "
                   "median distance), in units of the columns' sds unless --no-standardize")
    p.add_argument("--n-inducing", type=_positive(int),
                   help="sparse EP with this many inducing points "
                   f"(default: dense, or {AUTO_INDUCING} when dense EP would not fit in "
                   "memory)")
    p.add_argument("--max-iter", type=_positive(int),
                   help="most EP sweeps (default: the estimator's, 100 or 200); multiclass: "
                   "most iterations of GWI's optimiser (default 200)")
    p.add_argument("--no-optimize", action="store_true", help="keep the kernel fixed")
    p.add_argument("--standardize", action=argparse.BooleanOptionalAction, default=True,
                   help="fit on the feature columns standardised to mean 0 and sd 1 (the "
                   "default: the model file keeps each column's mean and sd, and fastep "
                   "predict applies them), or on the raw columns (e.g. coordinates in one "
                   "unit whose spreads differ on purpose)")
    p.add_argument("--scheduler", help="run on the Dask scheduler at this address")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=cmd_fit)
    p = sub.add_parser("predict", help="stream predictions for a table, chunk by chunk")
    p.add_argument("model")
    p.add_argument("data")
    p.add_argument("-o", "--output", required=True,
                   help="output file, its format by its extension: .csv, .csv.gz, .npy or "
                   ".parquet")
    p.add_argument("--features", help="comma-separated feature columns (default: the "
                   "columns named as the model's features; for a table without a header, "
                   "all its columns, which must be as many as the model's)")
    p.add_argument("--exposure", help="a count model fitted with --exposure: the column of "
                   "each row's exposure, for E[y] (y_mean)")
    p.add_argument("--trials", help="a binomial model: the column of each row's number of "
                   "trials, for E[y] (y_mean; p, the success probability, is always written)")
    p.add_argument("--lower-column", help="a censored model fitted with limit columns: the "
                   "column of each row's lower limit")
    p.add_argument("--upper-column", help="the same for the upper limit")
    p.add_argument("--missing", choices=("error", "skip", "mark"), default="error",
                   help="rows with an empty, non-numeric or infinite feature cell: error "
                   "(the default: stop and say where), skip (leave them out; the row "
                   "column says which rows were written) or mark (write them with empty "
                   "predictions)")
    p.add_argument("--chunk", type=_positive(int), default=100000, help="rows per chunk")
    p.set_defaults(func=cmd_predict)
    p = sub.add_parser("info", help="what a saved model holds: estimator, kernel, "
                       "likelihood, training size, features, fastep version")
    p.add_argument("model")
    p.set_defaults(func=cmd_info)
    p = sub.add_parser("bench", help="EP sweep time against one Cholesky")
    p.add_argument("-n", type=_positive(int), default=2000)
    p.set_defaults(func=cmd_bench)
    args = parser.parse_args(argv)
    _show_compile_notice()

    def show(message, category, filename, lineno, file=None, line=None):
        # a command's warnings in its own voice, not Python's "path:line: Category" form
        print(f"fastep {args.command}: warning: {message}", file=sys.stderr)

    try:
        with warnings.catch_warnings():
            warnings.showwarning = show
            return args.func(args)
    except ModuleNotFoundError as exc:
        extra = OPTIONAL_MODULES.get((exc.name or "").split(".")[0])
        if extra is None:
            raise
        print(f"fastep {args.command}: error: {extra[1]} needs {exc.name.split('.')[0]}, "
              f"which is not installed: pip install \"fastep[{extra[0]}]\".", file=sys.stderr)
        return 2
    except (ValueError, TypeError, OSError, MemoryError) as exc:
        print(f"fastep {args.command}: error: {exc}", file=sys.stderr)
        return 2
