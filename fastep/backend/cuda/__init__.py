"""The GPU, in one place: the CUDA backend (CuPy arrays and dense algebra, ``numba.cuda``
kernels), its kernels, its linear algebra and the check that a GPU is usable.

Nothing here is imported by ``import fastep``.  ``device="cuda"`` resolves to
:class:`CUDABackend`, which runs the algorithms of :mod:`fastep.inference` (written once
for every target) with:

* the kernels of :mod:`fastep.backend.cuda.kernels`: the scalar tilted-moment functions of
  every likelihood and the scalar site arithmetic of :mod:`fastep._sites`, compiled as
  device functions from the *same Python source* as their CPU versions
  (:func:`fastep.backend.cuda.kernels.device_function`); per-site parallel EP and
  Power-EP updates, Gram matrices and their gradient contractions, the per-site marginals
  of sparse EP and the robust-max Gauss-Hermite products of multiclass GWI;
* dense factorisations through CuPy (cuSOLVER / cuBLAS), :mod:`fastep.backend.cuda.linalg`;
* the check that a GPU is usable, :func:`fastep.cuda.require`, before anything starts.

Every algorithm runs here unchanged; what differs from the CPU is only the operations
below.  Data, sites and factors stay on the device across sweeps; per sweep only
scalars (log Z, the site change, the skipped count) and, in sparse EP, the m x m sums
come back to the host.

Install with ``pip install "fastep[cuda]"`` (numba-cuda[cu12] and cupy-cuda12x).  The
kernels also run under Numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``, set before
numba is imported), where the algebra is the NumPy/SciPy stand-in of
:func:`fastep.backend.cuda.linalg.host_algebra`: that is how the test-suite compares the
GPU code path with the CPU on machines without a GPU.
"""
from __future__ import annotations

import numpy as np

from ..._sites import SiteData
from ...cuda import cupy_usable, require, simulator_enabled
from ...exceptions import NotPositiveDefiniteError
from .._base import Backend

__all__ = ["CUDABackend", "cuda_backend"]

_INSTANCES: dict = {}


def cuda_backend(dense_algebra=True):
    """The CUDA backend (one per process), after :func:`fastep.cuda.require` has checked
    the driver, numba's CUDA target and, when ``dense_algebra``, CuPy.  Without
    ``dense_algebra`` (robust-max products only) CuPy is optional: the few array
    operations then run on the host."""
    from . import linalg
    require(need_cupy=dense_algebra)
    simulated = simulator_enabled()
    key = (dense_algebra, simulated)
    if key not in _INSTANCES:
        if simulated or (not dense_algebra and not cupy_usable()):
            algebra = linalg.host_algebra()
        else:
            algebra = linalg.cupy_algebra()
        _INSTANCES[key] = CUDABackend(algebra, dense_algebra)
    return _INSTANCES[key]


class CUDABackend(Backend):
    """CuPy and numba.cuda kernels (see the module docstring).

    Examples
    --------
    >>> from fastep.backend import resolve          # doctest: +SKIP
    >>> be = resolve("cuda")                         # doctest: +SKIP
    >>> be.name, be.ep_methods                       # doctest: +SKIP
    ('cuda', ('parallel',))
    """

    name = "cuda"
    ep_methods = ("parallel",)

    def __init__(self, algebra, dense_algebra=True):
        from . import kernels
        self._ck = kernels
        self._la = algebra
        self.xp = algebra.xp
        self.dense_algebra = dense_algebra

    def __reduce__(self):
        return cuda_backend, (self.dense_algebra,)

    def chunk_rows(self, m):
        """Large chunks: a chunk costs about a dozen launches, so a sweep over 10^7 rows in
        chunks of 8192 was launch-bound (1.8 s per sweep on an H100 against 0.05 s of
        arithmetic); 2^25 / m rows keep the m x rows buffers near 256 MiB."""
        return max(8192, 2 ** 25 // max(m, 1))

    @property
    def memory_name(self):
        return "this machine" if self.xp is np else "the GPU"

    def memory_available(self):
        """Free device memory plus what CuPy's pool holds unused (host memory under the
        simulator)."""
        if self.xp is np:
            return super().memory_available()
        free, _ = self.xp.cuda.runtime.memGetInfo()
        return int(free) + int(self.xp.get_default_memory_pool().free_bytes())

    # --- arrays ---------------------------------------------------------------------
    def asarray(self, a):
        return self.xp.asarray(a, dtype=self.xp.float64)

    def to_host(self, a):
        return np.asarray(self._la.to_host(a))

    def _empty(self, shape):
        return self.xp.empty(shape)

    # --- dense linear algebra ---------------------------------------------------------
    def cholesky(self, a, what):
        try:
            L = self._la.cholesky(a)
        except np.linalg.LinAlgError:
            L = None
        if L is None or not bool(self.xp.all(self.xp.diagonal(L) > 0.0)):
            raise NotPositiveDefiniteError(f"{what} is not positive definite.")
        return L

    def solve_lower(self, L, B, trans=False, overwrite=False):
        return self._la.solve_triangular(L, B, lower=True, trans=int(trans),
                                         overwrite_b=overwrite, check_finite=False)

    def trmm_lower(self, L, B, trans=False):
        return (L.T if trans else L) @ B

    def accumulate(self, P, b, G, tau, nu):
        b += G @ nu
        P += (G * tau[None, :]) @ G.T

    # --- EP site loops --------------------------------------------------------------
    def site_inputs(self, likelihood, y, extra):
        # zero-size device arrays are an edge case of the CUDA array interface that no
        # kernel needs: extras and parameters are padded to at least one column / entry
        # (a tilted function reads only the columns and parameters its likelihood has)
        extra = np.ascontiguousarray(self.to_host(extra), dtype=float)
        if extra.shape[1] == 0:
            extra = np.zeros((extra.shape[0], 1))
        params = np.asarray(likelihood.params, dtype=float).ravel()
        xp = self.xp
        return SiteData(xp.ascontiguousarray(self.asarray(y)),
                        xp.ascontiguousarray(self.asarray(extra)),
                        self.asarray(params if params.size else np.zeros(1)))

    def _counter(self):
        return self.xp.zeros(1, dtype=np.int64)

    def parallel_sites(self, tilted, data, bufs, damping, clip):
        skipped = self._counter()
        self._ck.parallel_sites(tilted, data, bufs, damping, clip, skipped)
        return int(skipped[0])

    def power_sites(self, tilted, data, bufs, resid, alpha, damping, clip, serial=False):
        skipped = self._counter()
        self._ck.power_sites(tilted, data, bufs, resid, alpha, damping, clip, skipped)
        return int(skipped[0])

    def build_b(self, K, s, out=None):
        out = self._empty(K.shape) if out is None else out
        self._ck.build_b(K, s, out)
        return out

    def scale_columns(self, K, s, out=None):
        out = self._empty(K.shape) if out is None else out
        self._ck.scale_columns(K, s, out)
        return out

    def row_sumsq(self, a, out=None):
        out = self._empty(a.shape[0]) if out is None else out
        self._ck.row_sumsq(a, out)
        return out

    def projection_marginals(self, G, beta):
        mean, var = self._empty(G.shape[1]), self._empty(G.shape[1])
        self._ck.projection_marginals(G, beta, mean, var)
        return mean, var

    def tilted(self, likelihood, y, extra, mu, var, alpha):
        params = np.asarray(likelihood.params, dtype=float).ravel()
        params = self.asarray(params if params.size else np.zeros(1))
        out = [self._empty(mu.shape[0]) for _ in range(3)]
        self._ck.tilted_batch(likelihood.scalar_tilted, y, extra, self.xp.ascontiguousarray(mu),
                              self.xp.ascontiguousarray(var), alpha, params, *out)
        return tuple(out)

    def tilted_dparams(self, likelihood, y, mu, var, extra, alpha):
        # likelihood-parameter derivatives are host code (closed forms in NumPy, or
        # finite differences of the tilted function): one round trip per chunk, in the
        # gradient only, never inside a sweep
        host = self.to_host
        extra = host(extra)[:, :likelihood.n_extra]          # without site_inputs' padding
        return self.asarray(likelihood.tilted_dparams(host(y), host(mu), host(var), extra,
                                                      alpha))

    # --- robust max (host arrays in and out; CuPy optional) ---------------------------
    def _to_device(self, a, dtype=np.float64):
        """A device copy: through CuPy's pool when CuPy is there (one allocator for the
        process: numba's own allocations failed on an H100 while CuPy's pool held memory
        freed by an earlier fit), else a numba device array (robust max without CuPy)."""
        a = np.ascontiguousarray(a, dtype=dtype)
        if self._la.name == "cupy":
            return self.xp.asarray(a)
        from numba import cuda
        return cuda.to_device(a)

    def _device_empty(self, shape):
        if self._la.name == "cupy":
            return self.xp.empty(shape)
        from numba import cuda
        return cuda.device_array(shape)

    def _host(self, a):
        return self.to_host(a) if self._la.name == "cupy" else a.copy_to_host()

    def prob_largest(self, mean, var, nodes, weights):
        args = [self._to_device(a) for a in (mean, var, nodes, weights)]
        out = self._device_empty(np.shape(mean))
        self._ck.prob_largest_all(*args, out)
        return self._host(out)

    def prob_largest_grad(self, mean, var, labels, nodes, weights):
        d_mean, d_var, d_nodes, d_weights = (self._to_device(a)
                                             for a in (mean, var, nodes, weights))
        d_labels = self._to_device(labels, np.int64)
        s, dm, dv = (self._device_empty(np.shape(labels)), self._device_empty(np.shape(mean)),
                     self._device_empty(np.shape(mean)))
        self._ck.prob_largest_grad(d_mean, d_var, d_labels, d_nodes, d_weights, s, dm, dv)
        return self._host(s), self._host(dm), self._host(dv)

    # --- Gram operations (the protocol of fastep.kernels.gram.HostGram) ---------------
    def stationary_gram(self, x1, x2, inv_ls, variance, kind):
        x2 = x1 if x2 is None else x2
        out = self._empty((x1.shape[0], x2.shape[0]))
        self._ck.stationary_gram(x1, x2, inv_ls, variance, kind, out)
        return out

    def stationary_contract(self, x1, x2, inv_ls, variance, kind, g):
        x2 = x1 if x2 is None else x2
        cols = self._empty((x2.shape[0], 1 + x1.shape[1]))
        self._ck.stationary_contract(x1, x2, inv_ls, variance, kind, g, cols)
        return self.to_host(self.xp.sum(cols, axis=0))

    def stationary_gram_contract(self, x1, x2, inv_ls, kind, g, k):
        cols = self._empty((x2.shape[0], 1 + x1.shape[1]))
        self._ck.stationary_gram_contract(x1, x2, inv_ls, kind, g, k, cols)
        return self.to_host(self.xp.sum(cols, axis=0))

    def stationary_input_contract(self, x1, x2, inv_ls, variance, kind, g):
        out = self._empty(x1.shape)
        self._ck.stationary_input_contract(x1, x2, inv_ls, variance, kind,
                                           self.xp.ascontiguousarray(g.T), out)
        return self.to_host(out)

    # --- data -----------------------------------------------------------------------
    def rows(self, X):
        """X is copied to the device whole (O(n d) memory)."""
        Xd = self.xp.ascontiguousarray(self.asarray(np.asarray(X) if not hasattr(
            X, "__cuda_array_interface__") else X))

        def rows(c0, c1):
            return Xd[c0:c1]
        return rows

    def gram_cache(self, X, n, m, budget):
        return self._empty((n, m)) if 8 * n * m <= budget else None
