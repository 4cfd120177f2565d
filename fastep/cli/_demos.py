"""``fastep demo``: each model of the library on bundled or simulated data."""
from __future__ import annotations

import sys
import time

import numpy as np


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
    from fastep.models import majority_vote

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


def _print_compile_note():
    from fastep._jit import _ANNOUNCED
    if _ANNOUNCED.is_set():
        print("  (this first run compiled fastep's kernels; later runs load them from the "
              "cache)")
