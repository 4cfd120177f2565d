"""ML-II that converges: sparse and dense EP classifiers with the default optimizer.

Prints, for each fit: seconds, evidence evaluations (EP runs; "N+M": N on the full data,
M on the subsamples of a staged fit, ``fastep.models._mlii.staged_start``), the log
evidence reached, and (``--reference``) the log evidence reached with a 10x larger
budget and a 100x tighter tolerance, with the relative gap.  The acceptance checks
(``--check``):

* n = 3000, ``n_inducing=64``: the sparse fit takes at most the time of the dense fit;
* n = 60000, ``n_inducing=100``: the sparse fit converges within 120 s;
* each evidence within 0.1% of the reference run's.

Usage::

    python scripts/mlii_convergence.py --check            # both sizes, with references
    python scripts/mlii_convergence.py --sizes 3000       # one size
"""
from __future__ import annotations

import argparse
import pathlib
import sys
import time
import warnings

import numpy as np

import fastep
from fastep.kernels import RBF

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "asv_benchmarks"))
from benchmarks.bench_mlii import Steps  # noqa: E402


def data(n, d=3, seed=0):
    """A smooth, noisy binary problem in d standardised inputs."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    f = np.sin(2.0 * X[:, 0]) + 0.5 * X[:, 1] - 0.3 * X[:, 2] ** 2
    y = (f + 0.3 * rng.normal(size=n) > 0).astype(int)
    return X, y


def fit(X, y, **params):
    """(seconds, evaluations (on the full data, "+N" on subsamples), log evidence,
    warnings, estimator) of one classifier fit."""
    with Steps.recording() as counter, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", fastep.ConvergenceWarning)
        t = time.perf_counter()
        est = fastep.EPGaussianProcessClassifier(RBF(), **params).fit(X, y)
        seconds = time.perf_counter() - t
    notes = [str(w.message)[:160] for w in caught
             if issubclass(w.category, fastep.ConvergenceWarning)]
    full, staged = counter.full_evaluations, counter.stage_evaluations
    evals = f"{full}+{staged}" if staged else str(full)
    return seconds, evals, float(est.log_marginal_likelihood_value_), notes, est


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[3000, 60000])
    parser.add_argument("--no-reference", action="store_true",
                        help="skip the 10x-budget reference fits")
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args(argv)
    fastep.precompile()
    inducing = {3000: 64, 60000: 100}
    ok = True
    print(f"{'n':>6} {'fit':>16} {'seconds':>8} {'evals':>7} {'log evidence':>14} "
          f"{'reference':>14} {'rel. gap':>9}")
    for n in args.sizes:
        X, y = data(n)
        m = inducing.get(n, 100)
        rows = [("sparse m=%d" % m, {"n_inducing": m, "random_state": 0})]
        if n <= 5000:
            rows.append(("dense", {}))
        seconds = {}
        for name, params in rows:
            s, evals, lml, notes, est = fit(X, y, **params)
            seconds[name] = s
            ref = gap = float("nan")
            if not args.no_reference:
                _, _, ref, _, _ = fit(X, y, max_iter_optimizer=2000, tol_optimizer=1e-8,
                                      **params)
                gap = abs(lml - ref) / abs(ref)
                ok &= gap <= 1e-3
            print(f"{n:>6} {name:>16} {s:>8.2f} {evals:>7} {lml:>14.4f} {ref:>14.4f} "
                  f"{gap:>9.2e}")
            for note in notes:
                print(f"{'':>8}warning: {note}")
        if "dense" in seconds:
            sparse = [v for k, v in seconds.items() if k.startswith("sparse")][0]
            ratio = sparse / seconds["dense"]
            print(f"{'':>8}sparse / dense time: {ratio:.2f} (at most 1)")
            ok &= ratio <= 1.0
        if n == 60000:
            sparse = [v for k, v in seconds.items() if k.startswith("sparse")][0]
            ok &= sparse <= 120.0
            print(f"{'':>8}sparse fit: {sparse:.1f} s (at most 120)")
    if args.check:
        print("check:", "ok" if ok else "FAILED")
        return 0 if ok else 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
