"""The ``fastep`` command: demo, fit, predict, bench.

    fastep demo                          EP-GP classifier on the bundled breast-cancer data
    fastep demo annotators               the same data labelled by 8 simulated noisy annotators
    fastep demo censored                 Tobit GP regression on outputs censored below a limit
    fastep demo multiclass               GWI multiclass GP classifier on scikit-learn's digits
    fastep fit DATA -o MODEL.npz         fit a classifier on a CSV or .npy file (last column = label)
    fastep predict MODEL.npz DATA -o P   class probabilities for new inputs
    fastep bench                         one EP sweep against one LAPACK Cholesky of the same n
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np


def _load_table(path, has_target):
    if path.endswith(".npy"):
        data = np.load(path, allow_pickle=False)
    else:
        with open(path) as fh:
            first = fh.readline()
        skip = 0 if _is_numeric_row(first) else 1
        data = np.loadtxt(path, delimiter=",", skiprows=skip, ndmin=2)
    data = np.asarray(data, dtype=float)
    if data.ndim != 2:
        raise SystemExit(f"fastep: {path}: expected a 2-D table, got shape {data.shape}")
    if has_target:
        return data[:, :-1], data[:, -1]
    return data, None


def _is_numeric_row(line):
    try:
        [float(v) for v in line.strip().split(",") if v.strip()]
        return True
    except ValueError:
        return False


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


def cmd_fit(args):
    import fastep
    from fastep.kernels import RBF

    import logging
    logging.basicConfig(level=logging.INFO, format="  %(message)s", stream=sys.stderr)
    X, y = _load_table(args.data, has_target=True)
    print(f"fastep fit: {X.shape[0]} rows, {X.shape[1]} features, "
          f"{len(np.unique(y))} classes", file=sys.stderr)
    clf = fastep.EPGaussianProcessClassifier(
        RBF(lengthscale=args.lengthscale), method=args.method,
        optimizer=None if args.no_optimize else "L-BFGS-B", max_iter=args.max_iter)
    t0 = time.perf_counter()
    clf.fit(X, y)
    fastep.save_model(clf, args.output)
    print(f"fitted in {time.perf_counter() - t0:.2f} s: kernel {clf.kernel_}, log Z_EP "
          f"{clf.log_marginal_likelihood_value_:.4f}, sweeps {clf.n_iter_}; saved {args.output}",
          file=sys.stderr)
    return 0


def cmd_predict(args):
    from fastep import load_model

    clf = load_model(args.model)
    X, _ = _load_table(args.data, has_target=args.has_target)
    out = []
    step = max(1, args.chunk)
    for start in range(0, X.shape[0], step):
        out.append(clf.predict_proba(X[start:start + step]))
        if X.shape[0] > step:
            print(f"  predicted {min(start + step, X.shape[0])}/{X.shape[0]}", file=sys.stderr)
    proba = np.vstack(out)
    header = ",".join(f"p_{c}" for c in clf.classes_)
    if args.output.endswith(".npy"):
        np.save(args.output, proba)
    else:
        np.savetxt(args.output, proba, delimiter=",", header=header, comments="")
    print(f"wrote {proba.shape[0]} rows to {args.output}", file=sys.stderr)
    return 0


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


def main(argv=None):
    parser = argparse.ArgumentParser(prog="fastep", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("demo", help="fit the EP classifier on bundled data and report")
    p.add_argument("which", nargs="?", default="classifier",
                   choices=["classifier", "annotators", "censored", "multiclass"])
    p.add_argument("--dataset", choices=["digits", "iris"], default="digits",
                   help="data of the multiclass demo")
    p.add_argument("--method", choices=["parallel", "sequential"], default="parallel")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=cmd_demo)
    p = sub.add_parser("fit", help="fit a classifier on a CSV/.npy table (last column = label)")
    p.add_argument("data")
    p.add_argument("-o", "--output", required=True, help="model file (.npz)")
    p.add_argument("--method", choices=["parallel", "sequential"], default="parallel")
    p.add_argument("--lengthscale", type=float, default=1.0)
    p.add_argument("--max-iter", type=int, default=100)
    p.add_argument("--no-optimize", action="store_true", help="keep the kernel fixed")
    p.set_defaults(func=cmd_fit)
    p = sub.add_parser("predict", help="class probabilities for a CSV/.npy table")
    p.add_argument("model")
    p.add_argument("data")
    p.add_argument("-o", "--output", required=True, help="CSV or .npy output")
    p.add_argument("--has-target", action="store_true", help="the last column is a label")
    p.add_argument("--chunk", type=int, default=100000)
    p.set_defaults(func=cmd_predict)
    p = sub.add_parser("bench", help="EP sweep time against one Cholesky")
    p.add_argument("-n", type=int, default=2000)
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
