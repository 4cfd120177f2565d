"""Dense EP at large n: runs to completion where the bundled OpenBLAS's threaded
``dpotrf`` would crash (n around 16,000 on the 2-core CI machine type).

    python scripts/large_n.py --n 16000 --sweeps 3

Prints the time of the Gram matrix, of each EP sweep and the peak memory, and checks
that the result is finite.  fastep factorises matrices above n = 8192 with a blocked
right-looking Cholesky made of LAPACK/BLAS calls on blocks (fastep/_linalg.py).
"""
import argparse
import resource
import time
import warnings

import numpy as np

import fastep
from fastep.kernels import RBF
from fastep.likelihoods import Probit


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=16000)
    ap.add_argument("--sweeps", type=int, default=3)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    X = rng.normal(size=(args.n, 3))
    y = np.where(X[:, 0] + 0.3 * rng.normal(size=args.n) > 0, 1.0, -1.0)
    t = time.perf_counter()
    K = RBF(lengthscale=1.0)(X)
    print(f"n = {args.n}: Gram matrix {time.perf_counter() - t:.1f} s", flush=True)
    last = [time.perf_counter()]

    def progress(sweep, log_z):
        now = time.perf_counter()
        print(f"  sweep {sweep}: {now - last[0]:.1f} s, log Z_EP = {log_z:.3f}", flush=True)
        last[0] = now

    t = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", fastep.ConvergenceWarning)
        res = fastep.ep(K, y, Probit(), max_iter=args.sweeps, check_psd=False,
                        callback=progress)
    total = time.perf_counter() - t
    finite = all(np.all(np.isfinite(a)) for a in (res.mean, res.var, res.site_tau, res.site_nu))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print(f"EP: {res.n_iter} sweeps in {total:.1f} s, log Z_EP = {res.log_marginal_likelihood:.3f}, "
          f"finite = {finite and np.isfinite(res.log_marginal_likelihood)}, peak RSS {peak:.1f} GiB")


if __name__ == "__main__":
    main()
