"""Dense linear algebra of the CUDA backend: CuPy (cuSOLVER, cuBLAS) on a GPU.

:func:`cupy_algebra` is the real thing.  :func:`host_algebra` is its stand-in under
Numba's CUDA simulator, where CuPy cannot run: NumPy arrays and SciPy's LAPACK, so that
the tests drive the whole GPU code path (kernels in the simulator, algebra on the host).
"""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np


def cupy_algebra():
    """``xp`` = CuPy; Cholesky by cuSOLVER ``potrf`` (raising on failure), triangular
    solves by cuBLAS ``trsm``."""
    import cupy
    import cupyx
    import cupyx.scipy.linalg as cla

    def cholesky(a):
        # CuPy ignores a failed potrf by default (info > 0 leaves part of ``a`` in place,
        # possibly with a positive diagonal): make it raise.
        with cupyx.errstate(linalg="raise"):
            return cupy.linalg.cholesky(a)

    return SimpleNamespace(name="cupy", xp=cupy, cholesky=cholesky,
                           solve_triangular=cla.solve_triangular, to_host=cupy.asnumpy)


def host_algebra():
    """NumPy/SciPy stand-in for :func:`cupy_algebra` (host memory; the CUDA simulator)."""
    from scipy import linalg

    def cholesky(a):
        return linalg.cholesky(a, lower=True, check_finite=False)

    return SimpleNamespace(name="numpy", xp=np, cholesky=cholesky,
                           solve_triangular=linalg.solve_triangular, to_host=np.asarray)
