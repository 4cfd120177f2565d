"""What one ML-II evidence evaluation of a large sparse classifier costs, part by part, in
units of one parallel sparse EP pass timed at the same n in the same run (issue 30).

The measurement is ``evaluation_parts`` of ``asv_benchmarks/benchmarks/bench_mlii.py`` (also
its asv benchmark ``SparseEvaluation``).  Data: the fit-time issue's large-n probit problem
(``rff_probit_data`` there: d = 4, m = 256 inducing inputs drawn from X).
An evaluation as ML-II makes it, near the optimum: EP at kernel B warm-started from the
sites of a converged run at a nearby kernel A (its first pass rebuilds q from those sites
at B), run to tol 1e-4, then the evidence gradient at B.  Printed, each the median of
``--repeats``:

* ``pass``: one parallel sweep, ``(t(6 sweeps) - t(2 sweeps)) / 4`` from a cold start (the
  floor: every sweep reads every row once);
* ``EP``: the warm-started run (its passes: the warm pass, the sweeps, the closing
  evaluation pass, which also takes the gradient's first pass), and the time of the warm
  pass alone (``--parts``);
* ``gradient``: :func:`~fastep.inference.sparse_ep.sparse_ep_gradient` after it, with the
  Gram matrix and first-pass sums the run kept (``keep_gram``, as ML-II does: one pass) and,
  for comparison, without them (two passes, the kernel recomputed);
* ``evaluation``: EP + gradient, in passes.

With ``--fit`` it also fits the default ``EPGaussianProcessClassifier`` (learnt ARD kernel
from RBF(1, [1, 1, 1, 1]); ``--no-stages``: without the subsample stages) and prints its
wall time, evaluations and seconds per evaluation in passes.

    python scripts/sparse_evaluation.py --n 100000 --repeats 3 [--fit] [--parts]
"""
import argparse
import logging
import pathlib
import sys
import warnings

import numpy as np

import fastep
from fastep.backend import resolve
from fastep.kernels import RBF
from fastep.likelihoods import Probit
from fastep.models import _mlii

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "asv_benchmarks"))
from benchmarks.bench_mlii import (KERNEL_A, _run, counted_fit, evaluation_parts,  # noqa: E402
                                   rff_probit_data, seconds)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--parts", action="store_true", help="time the warm pass separately")
    ap.add_argument("--fit", action="store_true", help="also time a whole default fit")
    ap.add_argument("--no-stages", action="store_true", help="the fit without subsample stages")
    args = ap.parse_args()
    warnings.simplefilter("ignore", fastep.ConvergenceWarning)
    X, y01 = rff_probit_data(args.n, seed=0)
    y = 2.0 * y01 - 1.0
    Z = X[np.random.default_rng(1).choice(args.n, 256, replace=False)]
    fastep.EPGaussianProcessClassifier(RBF(1.0, [1.0] * 4), inducing_points=Z[:64]).fit(
        X[:2000], y01[:2000])                                    # compile / load the cache
    be = resolve("cpu")
    start = _run.run_sparse_ep(be, KERNEL_A, Z, X, y, Probit(), 1.0, None, 1e-6, 100)
    rounds = [evaluation_parts(X, y, Z, start, args.parts) for _ in range(args.repeats)]
    med = {k: float(np.median([r[k] for r in rounds])) for k in rounds[0]}
    p = med["pass"]
    print(f"n = {args.n:,}, m = 256, d = 4; medians of {args.repeats}")
    print(f"  one parallel pass            {p:8.3f} s   1.00 passes")
    print(f"  EP, warm-started, tol 1e-4   {med['EP']:8.3f} s  {med['EP'] / p:5.2f} passes "
          f"({med['EP sweeps']:.0f} sweeps + warm and closing passes)")
    if args.parts:
        print(f"    of which the warm pass     {med['warm pass']:8.3f} s  "
              f"{med['warm pass'] / p:5.2f} passes")
    print(f"  gradient, kept Gram          {med['gradient']:8.3f} s  {med['gradient'] / p:5.2f}"
          f" passes")
    print(f"  gradient, nothing kept       {med['gradient, kernel recomputed']:8.3f} s  "
          f"{med['gradient, kernel recomputed'] / p:5.2f} passes")
    total = med["EP"] + med["gradient"]
    print(f"  evaluation (EP + gradient)   {total:8.3f} s  {total / p:5.2f} passes")
    if args.fit:
        if args.no_stages:
            _mlii.STAGED_MIN_ROWS = 10 ** 15
        t, (clf, steps) = seconds(lambda: counted_fit(X, y01, RBF(1.0, [1.0] * 4),
                                                      inducing_points=Z))
        full = steps.full_evaluations
        print(f"  default fit: {t:.1f} s, {steps.evaluations} evaluations "
              f"({steps.stage_evaluations} on subsamples), {steps.sweeps} EP sweeps; "
              f"{t / max(1, full) / p:.1f} passes per full-data evaluation (all included); "
              f"kernel {clf.kernel_}")


if __name__ == "__main__":
    logging.getLogger("fastep").setLevel(logging.WARNING)
    main()
