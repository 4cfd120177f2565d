"""ML-II of a large sparse classifier with and without the subsample stages (issue 30).

    python scripts/staged_mlii.py --n 100000 --repeats 2
    python scripts/staged_mlii.py --n 1000000 --variants staged     # one of the two only
    python scripts/staged_mlii.py --n 1000000 --variants staged --device cuda   # on a GPU

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
import argparse
import pathlib
import sys
import time

import numpy as np
from scipy.special import log_ndtr

import fastep
from fastep.kernels import RBF
from fastep.models import _mlii

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "asv_benchmarks"))
from benchmarks.bench_mlii import counted_fit, pass_seconds, rff_probit_data  # noqa: E402

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


def fit(X, y, Z, Xt, yt, staged, device):
    _mlii.STAGED_MIN_ROWS = _mlii.STAGE_SHARE * _mlii.STAGE_MIN_ROWS if staged else 10 ** 15
    with Trajectory(X.shape[0], Xt, yt) as trace:
        clf, steps = counted_fit(X, y, RBF(1.0, [1.0] * 4), inducing_points=Z, device=device)
    p = clf.predict_proba(Xt)[:, 1]
    nlpd = -np.mean(np.log(np.clip(np.where(yt == 1, p, 1.0 - p), 1e-300, 1.0)))
    return clf, trace, steps, nlpd


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--variants", nargs="+", choices=["staged", "plain"],
                    default=["staged", "plain"])
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                    help="where the fits and the timed pass run")
    args = ap.parse_args()
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
            clf, trace, steps, nlpd = fit(X, y, Z, Xt, yt, staged, args.device)
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


if __name__ == "__main__":
    main()
