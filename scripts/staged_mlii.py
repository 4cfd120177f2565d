"""ML-II of a large sparse classifier with and without the subsample stages (issue 30).

    python scripts/staged_mlii.py --n 100000 --repeats 2

The data are the fit-time issue's large-n probit problem (``rff_probit_data`` of
``asv_benchmarks/benchmarks/bench_mlii.py``: d = 4, ARD, m = 256 inducing inputs drawn from
X and kept fixed, starting kernel RBF(1, [1, 1, 1, 1]); test NLPD on 20,000 rows of another
seed).  Each repeat fits the default ``EPGaussianProcessClassifier`` twice in this process,
in alternating order: with the stages (:func:`fastep.models._mlii.staged_start`; the
default from 50,000 to 400,000 rows, forced on here at any n from 50,000) and without
(``STAGED_MIN_ROWS`` raised past n).
Printed per fit (ConvergenceWarnings silenced, as in the asv benchmark): wall time, evidence
evaluations on the subsamples and on the full data, EP sweeps, the final log evidence (+ log
hyperprior) and the test NLPD; then the median time
ratio and the largest relative difference of the final objectives (ML-II's promise: 1e-6).
"""
import argparse
import pathlib
import sys
import time

import numpy as np

import fastep
from fastep.kernels import RBF
from fastep.models import _mlii

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "asv_benchmarks"))
from benchmarks.bench_mlii import counted_fit, rff_probit_data  # noqa: E402


def fit(X, y, Z, staged):
    _mlii.STAGED_MIN_ROWS = 50_000 if staged else 10 ** 15
    _mlii.STAGED_MAX_ROWS = 10 ** 15 if staged else 10 ** 16
    t = time.perf_counter()
    clf, steps = counted_fit(X, y, RBF(1.0, [1.0] * 4), inducing_points=Z)
    return clf, time.perf_counter() - t, steps


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--repeats", type=int, default=1)
    args = ap.parse_args()
    X, y = rff_probit_data(args.n, seed=0)
    Xt, yt = rff_probit_data(20_000, seed=1)
    Z = X[np.random.default_rng(1).choice(args.n, 256, replace=False)]
    fastep.EPGaussianProcessClassifier(RBF(1.0, [1.0] * 4), inducing_points=Z[:64]).fit(
        X[:2000], y[:2000])                                      # compile / load the cache
    times = {True: [], False: []}
    objective = []
    for r in range(args.repeats):
        for staged in ((True, False) if r % 2 == 0 else (False, True)):
            clf, seconds, steps = fit(X, y, Z, staged)
            p = clf.predict_proba(Xt)[:, 1]
            p = np.clip(np.where(yt == 1, p, 1.0 - p), 1e-300, 1.0)
            value = clf.log_marginal_likelihood_value_
            objective.append(value)
            times[staged].append(seconds)
            print(f"{'staged' if staged else 'plain '} n={args.n}: fit {seconds:7.1f} s, "
                  f"evaluations {steps.stage_evaluations:2d} on subsamples + "
                  f"{steps.evaluations - steps.stage_evaluations:2d} on the full data, EP sweeps "
                  f"{steps.sweeps:3d}, log Z {value:.6f}, test NLPD {-np.mean(np.log(p)):.5f}, "
                  f"{clf.kernel_}", flush=True)
    ratio = np.median(times[False]) / np.median(times[True])
    spread = (max(objective) - min(objective)) / abs(np.median(objective))
    print(f"median fit: plain {np.median(times[False]):.1f} s, staged "
          f"{np.median(times[True]):.1f} s, plain / staged {ratio:.2f}; final log Z spread "
          f"{spread:.1e} (relative)")


if __name__ == "__main__":
    main()
