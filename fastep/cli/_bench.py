"""``fastep bench``: one EP sweep against one LAPACK Cholesky of the same n."""
from __future__ import annotations

import time

import numpy as np


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
