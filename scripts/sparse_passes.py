"""Passes over the data of sparse EP: chunk-sequential against parallel schedule.

Seeded probit data of ``scripts/sparse_scaling.py`` (d = 3), RBF(1, 1), m inducing inputs
drawn from X, both fixed; each n in a fresh process, compilation paid before timing.
Per n and schedule: passes over the data of a converged fit (sweeps + the closing
evaluation pass) at the default tol 1e-4, its seconds, and |log Z / log Z* - 1| against
the parallel fixed point log Z* (tol 1e-10).  Then the fewest passes at which the
sequential schedule's log Z (``max_iter=k``) is within 1e-6 relative of log Z*.

    python scripts/sparse_passes.py [--sizes 100000 1000000] [--m 256]
"""
import argparse
import json
import os
import subprocess
import sys
import time
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sparse_scaling import make_data  # noqa: E402


def one_size(n, m):
    from fastep.exceptions import ConvergenceWarning
    from fastep.inference.sparse_ep import sparse_ep
    from fastep.kernels import RBF
    from fastep.likelihoods import Probit

    X, y, _ = make_data(n)
    Z = X[np.random.default_rng(1).choice(n, m, replace=False)]
    k = RBF(1.0, 1.0)
    warnings.simplefilter("ignore", ConvergenceWarning)
    for s in ("sequential", "parallel"):
        sparse_ep(k, Z, X[:4000], y[:4000], Probit(), max_iter=2, schedule=s)   # compile

    def fit(**kw):
        t0 = time.perf_counter()
        res = sparse_ep(k, Z, X, y, Probit(), **kw)
        return res, time.perf_counter() - t0

    ref, _ = fit(schedule="parallel", tol=1e-10, max_iter=200)
    log_z = ref.log_marginal_likelihood
    out = dict(n=n, m=m, log_z=log_z, rows=[])
    for s in ("sequential", "parallel"):
        res, seconds = fit(schedule=s)
        out["rows"].append(dict(schedule=s, passes=res.n_iter + 1, seconds=seconds,
                                converged=res.converged,
                                rel=abs(res.log_marginal_likelihood / log_z - 1)))
    trace = []
    for k_ in range(1, 20):
        res, seconds = fit(max_iter=k_)
        trace.append(dict(passes=k_ + 1, seconds=seconds,
                          rel=abs(res.log_marginal_likelihood / log_z - 1)))
        if trace[-1]["rel"] <= 1e-6:
            break
    out["trace"] = trace
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[100000, 1000000])
    ap.add_argument("--m", type=int, default=256)
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        print(json.dumps(one_size(a.child, a.m)))
        return
    print(f"sparse probit EP, d = 3, m = {a.m}, tol 1e-4; passes = sweeps + the evaluation pass")
    print(f"{'n':>8s} {'schedule':>10s} {'passes':>6s} {'seconds':>8s} {'|dlogZ|/|logZ*|':>15s}")
    for n in a.sizes:
        out = subprocess.run([sys.executable, __file__, "--child", str(n), "--m", str(a.m)],
                             capture_output=True, text=True, check=True)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        for row in r["rows"]:
            print(f"{n:8d} {row['schedule']:>10s} {row['passes']:6d} {row['seconds']:8.2f} "
                  f"{row['rel']:15.1e}" + ("" if row["converged"] else "  (not converged)"))
        seq, par = r["rows"]
        hit = r["trace"][-1]
        errors = ", ".join(f"{t['rel']:.0e}" for t in r["trace"])
        print(f"{'':8s} sequential / parallel: passes {seq['passes'] / par['passes']:.2f}, "
              f"seconds {seq['seconds'] / par['seconds']:.2f}; sequential log Z within 1e-6 of "
              f"the fixed point after {hit['passes']} passes ({hit['seconds']:.2f} s; "
              f"relative errors by passes: {errors})", flush=True)


if __name__ == "__main__":
    main()
