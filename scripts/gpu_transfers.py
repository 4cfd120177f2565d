"""Device-to-host copies of EP on the GPU: is any n-sized array copied inside a sweep?

Runs dense EP (n = --dense) and sparse EP (n = --sparse, m = --m) with device="cuda",
once with max_iter = 2 and once with max_iter = 6 sweeps (tol = 1e-300, so both run all
their sweeps), and counts the device-to-host copies of each run by size, two ways:

* CUPTI, through PyTorch's profiler (``torch.profiler``, CUDA activity): it records every
  CUDA memcpy of the process whatever library issued it (CuPy, numba.cuda), the trace
  that Nsight Systems reads;
* the backend: every array fastep's CUDA backend hands to the host passes through
  ``CUDABackend.to_host``, which is counted.

A copy of at least 8 n bytes (one float64 per data point) whose count grows with the
number of sweeps would be a copy inside a sweep; the result's arrays are copied once,
after the last sweep, whatever the count of sweeps.

    python scripts/gpu_transfers.py [--dense 20000] [--sparse 1000000] [--m 256]
"""
import argparse
import collections
import json
import os
import tempfile
import warnings

import numpy as np

import fastep
from fastep.backend import resolve
from fastep.kernels import RBF
from fastep.likelihoods import Probit


def make_data(n, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 3))
    f = np.sin(2.0 * X[:, 0]) + X[:, 1] * X[:, 2]
    return X, np.where(f + rng.standard_normal(n) > 0.0, 1.0, -1.0)


def cupti_copies(fn):
    """Sizes (bytes) of the device-to-host memcpys CUPTI saw while ``fn`` ran, or None."""
    try:
        import torch
        from torch.profiler import ProfilerActivity, profile
    except ImportError:
        return None
    torch.cuda.init()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
    path = os.path.join(tempfile.mkdtemp(), "trace.json")
    prof.export_chrome_trace(path)
    with open(path) as fh:
        events = json.load(fh).get("traceEvents", [])
    return [int(e.get("args", {}).get("bytes", 0)) for e in events
            if "Memcpy DtoH" in str(e.get("name", ""))]


def backend_copies(be, fn):
    """Sizes (bytes) of the arrays passed through ``be.to_host`` while ``fn`` ran."""
    seen = []
    original = be.to_host

    def counting(a):
        out = original(a)
        seen.append(int(out.nbytes))
        return out
    be.to_host = counting
    try:
        fn()
    finally:
        del be.to_host
    return seen


def audit(name, n, run, be):
    print(f"{name}, n = {n}:")
    big = {}
    for sweeps in (2, 6):
        def call():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                run(sweeps)
        call()                                               # compile / warm up
        for how, sizes in (("CUPTI", cupti_copies(call)),
                           ("backend", backend_copies(be, call))):
            if sizes is None:
                print(f"  {sweeps} sweeps, {how}: not available (no torch.profiler)")
                continue
            n_big = sum(s >= 8 * n for s in sizes)
            big[how, sweeps] = n_big
            hist = collections.Counter(sizes)
            top = ", ".join(f"{b} B x {c}" for b, c in sorted(hist.items(), reverse=True)[:6])
            print(f"  {sweeps} sweeps, {how}: {len(sizes)} device-to-host copies, {n_big} of "
                  f">= 8n = {8 * n} bytes; largest: {top}")
    for how in ("CUPTI", "backend"):
        if (how, 2) in big:
            verdict = "none inside a sweep" if big[how, 2] == big[how, 6] else \
                "COPIES GROW WITH SWEEPS"
            print(f"  {how}: n-sized copies with 2 sweeps {big[how, 2]}, with 6 sweeps "
                  f"{big[how, 6]}: {verdict}")
    return all(big[how, 2] == big[how, 6] for how in ("CUPTI", "backend") if (how, 2) in big)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dense", type=int, default=20_000)
    ap.add_argument("--sparse", type=int, default=1_000_000)
    ap.add_argument("--m", type=int, default=256)
    a = ap.parse_args()
    be = resolve("cuda")
    X, y = make_data(a.dense)
    K = RBF()(X, backend=be)
    K += 1e-6 * be.xp.eye(a.dense)
    ok = audit("dense EP", a.dense, lambda s: fastep.ep(K, y, Probit(), max_iter=s, tol=1e-300,
                                                         check_psd=False, device=be), be)
    X, y = make_data(a.sparse)
    Z = X[np.linspace(0, a.sparse - 1, a.m).astype(int)]
    ok &= audit("sparse EP", a.sparse, lambda s: fastep.sparse_ep(
        RBF(), Z, X, y, Probit(), max_iter=s, tol=1e-300, device=be), be)
    print("check: ok" if ok else "check: FAILED")


if __name__ == "__main__":
    main()
