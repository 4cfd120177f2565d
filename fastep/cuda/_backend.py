"""Array backend of the GPU drivers: CuPy (cuSOLVER / cuBLAS) on a real GPU.

The drivers do their dense algebra through a :class:`Backend` (``xp`` an array
module, plus a lower Cholesky and a triangular solve) and launch the numba kernels
of :mod:`fastep.cuda.kernels` on its arrays.  :func:`numpy_backend` (NumPy and
SciPy, host memory) exists for the CUDA simulator, where CuPy cannot run: with it
the tests drive the whole GPU code path, kernels on the simulator and algebra on the
host, and compare the result with the CPU driver.
"""
from __future__ import annotations

import numpy as np

from .._linalg import NotPositiveDefiniteError


class Backend:
    """Array module ``xp`` with the few dense routines the drivers need."""

    def __init__(self, name, xp, cholesky, solve_triangular, to_host):
        self.name = name
        self.xp = xp
        self._cholesky = cholesky
        self._solve_triangular = solve_triangular
        self._to_host = to_host

    def asarray(self, a, dtype=float):
        """A C-ordered device array (a copy only if needed)."""
        return self.xp.ascontiguousarray(self.xp.asarray(a, dtype=dtype))

    def to_host(self, a):
        return self._to_host(a)

    def site_inputs(self, extra, params):
        """Per-site extras (n, k) and likelihood parameters on the device, each padded to
        at least one column / entry (zero-size device arrays are an edge case of the
        CUDA array interface that no kernel needs: the tilted functions read only the
        columns and parameters their likelihood has)."""
        extra = np.ascontiguousarray(extra, dtype=float)
        if extra.shape[1] == 0:
            extra = np.zeros((extra.shape[0], 1))
        params = np.asarray(params, dtype=float).ravel()
        return self.asarray(extra), self.asarray(params if params.size else np.zeros(1))

    def cholesky(self, a, what):
        """Lower Cholesky factor of the symmetric ``a``; NotPositiveDefiniteError naming
        ``what`` if it fails."""
        try:
            L = self._cholesky(a)
        except np.linalg.LinAlgError:
            L = None
        if L is None or not bool(self.xp.all(self.xp.diagonal(L) > 0.0)):
            raise NotPositiveDefiniteError(f"{what} is not positive definite.")
        return L

    def solve_triangular(self, L, b, trans=0, overwrite_b=False):
        """``L^-1 b`` (``trans=0``) or ``L^-T b`` (``trans=1``) for lower-triangular L."""
        return self._solve_triangular(L, b, lower=True, trans=trans, overwrite_b=overwrite_b,
                                      check_finite=False)


def cupy_backend():
    """CuPy on the current GPU (cuSOLVER potrf, cuBLAS trsm)."""
    import cupy
    import cupyx.scipy.linalg as cla

    import cupyx

    def cholesky(a):
        # CuPy ignores a failed potrf by default (info > 0 leaves part of ``a`` in place,
        # possibly with a positive diagonal): make it raise.
        with cupyx.errstate(linalg="raise"):
            return cupy.linalg.cholesky(a)

    return Backend("cupy", cupy, cholesky, cla.solve_triangular, cupy.asnumpy)


def numpy_backend():
    """NumPy/SciPy stand-in for CuPy (host memory), for the CUDA simulator."""
    from scipy import linalg

    def cholesky(a):
        return linalg.cholesky(a, lower=True, check_finite=False)

    return Backend("numpy", np, cholesky, linalg.solve_triangular, np.asarray)


#: Backend used when none is passed; None means CuPy.  The simulator tests set it to
#: :func:`numpy_backend` (:func:`use_backend`) to drive the estimators end to end.
DEFAULT = None


def use_backend(backend):
    """Make ``backend`` the default of every GPU driver (None restores CuPy)."""
    global DEFAULT
    DEFAULT = backend


def get_backend(backend=None):
    """``backend`` if given, else CuPy after :func:`fastep.cuda.require` has checked the
    driver, numba's CUDA target and CuPy (a clear error names what is missing)."""
    if backend is not None:
        return backend
    if DEFAULT is not None:
        return DEFAULT
    from . import require
    require(need_cupy=True)
    return cupy_backend()
