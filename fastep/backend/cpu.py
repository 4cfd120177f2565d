"""The CPU backend: NumPy arrays, LAPACK/BLAS through SciPy, and compiled Numba loops.

Its fast paths are backend operations, not branches in the algorithms:

* dense factorisations in place (``dpotrf`` on a Fortran view of a C-ordered buffer, the
  blocked Cholesky of :mod:`fastep._linalg` above n = 8192, ``dtrsm`` in place);
* the streamed passes of sparse EP share their chunks of rows among Python threads, each
  calling single-threaded BLAS without the GIL (:func:`fastep._linalg.trmm_lower_nogil`,
  :func:`fastep._linalg.syrk_lower_nogil`);
* the per-site loops of :mod:`fastep.backend.cpu_loops`, compiled serial and parallel
  from one source, the parallel ones from :data:`~fastep.backend.cpu_loops.PARALLEL_MIN_N`
  sites.
"""
from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numba
import numpy as np
from scipy.linalg import blas, cho_solve, lapack

from .._linalg import (BLOCK_THRESHOLD, SMALL_N, blas_threads_for, cholesky_inplace,
                       cholesky_inverse_inplace, solve_lower_inplace, syrk_lower_nogil,
                       tri_gram_inplace, trmm_lower_nogil)
from .._sites import SiteData
from ..exceptions import NotPositiveDefiniteError
from .._memory import mapped_empty
from ..kernels.gram import HostGram
from ..likelihoods import robustmax
from ._base import Backend
from .cpu_loops import SERIAL, evidence_site_terms, select, sequential_block, split_by_sign

# ---------------------------------------------------------------------------------------
# worker threads of the streamed passes
# ---------------------------------------------------------------------------------------
# One pool for the process (threads are reused, so Numba/OpenMP thread teams are not
# created anew per call), reset in a forked child.  Compiled Numba code that may run in
# parallel (Gram matrices, contractions, tilted moments) is entered by one worker at a time
# (_COMPILED): Numba's workqueue layer aborts on concurrent parallel launches, and each
# launch already uses every Numba thread.
_POOL: list = []
_COMPILED = threading.Lock()
os.register_at_fork(after_in_child=_POOL.clear)


def _in_threads(jobs):
    """Run the zero-argument callables ``jobs`` on the worker pool (the first one in this
    thread), each with this thread's Numba thread count; results in order."""
    if len(jobs) == 1:
        return [jobs[0]()]
    if not _POOL:
        _POOL.append(ThreadPoolExecutor(max(2, numba.config.NUMBA_NUM_THREADS),
                                        thread_name_prefix="fastep-sparse"))
    threads = numba.get_num_threads()

    def run(job):
        numba.set_num_threads(threads)              # Numba's setting is per thread
        return job()
    futures = [_POOL[0].submit(run, job) for job in jobs[1:]]
    first = jobs[0]()
    return [first] + [f.result() for f in futures]


def _read_rows(X):
    def rows(c0, c1):
        """Rows c0:c1 of X as a C-contiguous float array (X may be a memmap)."""
        return np.ascontiguousarray(X[c0:c1], dtype=float)
    return rows


class CPUBackend(HostGram, Backend):
    """NumPy, SciPy's LAPACK/BLAS and Numba loops (see the module docstring).

    Examples
    --------
    >>> from fastep.backend import resolve
    >>> be = resolve("cpu")
    >>> be.name, be.ep_methods
    ('cpu', ('parallel', 'sequential'))
    """

    name = "cpu"
    xp = np
    ep_methods = ("parallel", "sequential")

    # arrays: asarray / to_host come from HostGram

    # --- execution ------------------------------------------------------------------
    def threads_for(self, n, one_pool=False):
        return blas_threads_for(n, one_pool)

    def compiled(self):
        return _COMPILED

    def n_workers(self, n, m, chunk_size):
        """Numba's thread count while BLAS runs single-threaded (m below SMALL_N: threaded
        OpenBLAS is slower on m x chunk blocks), else 1 (threaded BLAS does the work)."""
        return max(1, min(numba.get_num_threads() if m < SMALL_N else 1, -(-n // chunk_size)))

    def run_all(self, jobs):
        return _in_threads(jobs)

    # --- dense linear algebra ---------------------------------------------------------
    def dense_work(self, n):
        """Reused buffers: a sweep then allocates (and page-faults) nothing n x n."""
        return np.empty((n, n)), np.empty((n, n))

    @staticmethod
    def _fortran_symmetric(a):
        """The symmetric ``a`` as an F-ordered array LAPACK may overwrite: itself, its
        transpose (the same matrix) where it is C-ordered, else an F-ordered copy."""
        if a.flags.f_contiguous:
            return a
        return a.T if a.flags.c_contiguous else np.asfortranarray(a)

    def cholesky(self, a, what):
        return cholesky_inplace(self._fortran_symmetric(a), what)

    def solve_lower(self, L, B, trans=False, overwrite=False):
        vector = B.ndim == 1
        B2 = B[:, None] if vector else B
        if not (overwrite and B2.flags.f_contiguous and B2.flags.writeable):
            B2 = np.array(B2, dtype=float, order="F")
        out = solve_lower_inplace(L, B2, trans)
        return out[:, 0] if vector else out

    def cho_solve(self, L, B):
        return cho_solve((L, True), B, check_finite=False)

    def tri_inverse(self, L, out=None):
        n = L.shape[0]
        if n > BLOCK_THRESHOLD:         # where dpotrf is blocked (_linalg): no threaded dtrtri
            return super().tri_inverse(L, out)
        if out is None:
            f = np.empty((n, n), order="F")
        else:
            f = out.T if out.flags.c_contiguous else out
        np.copyto(f, L)
        f, info = lapack.dtrtri(f, lower=1, overwrite_c=1)
        if info != 0:  # pragma: no cover - L comes from a successful Cholesky
            raise NotPositiveDefiniteError(f"dtrtri failed (info {info}): L is singular.")
        select(n).zero_upper(f)
        return f

    def cholesky_inverse(self, a, what, out=None, recursive=True):
        n = a.shape[0]
        if n > BLOCK_THRESHOLD or not recursive:   # above: where dpotrf is blocked (_linalg)
            return super().cholesky_inverse(a, what, out)
        f = self._fortran_symmetric(a)
        diag = cholesky_inverse_inplace(f, what)
        select(n).zero_upper(f)
        return f, diag

    @staticmethod
    def _inverse_upper(li):
        """``L^-T L^-1`` (:func:`fastep._linalg.tri_gram_inplace`, on a copy of ``li``) in
        the upper triangle of a C-ordered array."""
        return tri_gram_inplace(li.copy(order="F")).T

    def inverse_from_tri(self, li):
        inv = np.triu(self._inverse_upper(li))
        return inv + np.triu(inv, 1).T

    def gradient_weights(self, li, s, b):
        out = self._inverse_upper(li)
        select(s.shape[0]).gradient_weights(out, np.ascontiguousarray(s, dtype=float),
                                            np.ascontiguousarray(b, dtype=float))
        return out

    def trmm_lower(self, L, B, trans=False):
        return trmm_lower_nogil(L, B, trans)

    # Matrix-vector products of the dense refresh in SciPy's BLAS, whose pool runs its
    # factorisations (NumPy's is held to one thread there, one_blas_pool): dtrmv reads
    # half of L, and both run threaded (n = 1,257: 0.22 ms for L^T L z against 0.87 ms,
    # 0.18 ms for K z against 0.44 ms).
    def tri_matvec(self, L, z, trans=False):
        if not L.flags.f_contiguous:
            return super().tri_matvec(L, z, trans)
        return blas.dtrmv(L, z, lower=1, trans=int(trans))

    def sym_matvec(self, K, z):
        if K.flags.c_contiguous:
            return blas.dgemv(1.0, K.T, z)            # symmetric: K^T = K, F-ordered
        return blas.dgemv(1.0, K, z) if K.flags.f_contiguous else K @ z

    def gradient_direction(self, V, SV, SUSV, mv, r, a, w, b, tau, gd, serial=False):
        loops = SERIAL if serial else select(V.shape[1])
        loops.gradient_direction(V, SV, SUSV, mv, r, a, w, b, tau, gd)
        return SUSV

    def add_gram(self, C, A):
        syrk_lower_nogil(1.0, A, C)             # the lower triangle (dsyrk)

    def accumulate(self, P, b, G, tau, nu):
        b += G @ nu
        if not G.flags.f_contiguous:
            G = np.asfortranarray(G)
        tau = np.require(tau, np.float64, ("C", "W"))      # the compiled split's type
        split = split_by_sign(G, tau)
        syrk_lower_nogil(1.0, G[:, :split], P)
        if split < G.shape[1]:
            syrk_lower_nogil(-1.0, G[:, split:], P)

    # --- EP site loops --------------------------------------------------------------
    def site_inputs(self, likelihood, y, extra):
        # the compiled loops take writeable C-ordered float64 arrays: a read-only input (a
        # memmap, a pandas column) is copied here, once
        return SiteData(*(np.require(a, dtype=np.float64, requirements=("C", "W"))
                          for a in (y, extra, likelihood.params)))

    def parallel_sites(self, tilted, data, bufs, damping, clip):
        return select(data.y.shape[0]).parallel_sites(tilted, data, bufs, damping, clip)

    def power_sites(self, tilted, data, bufs, resid, alpha, damping, clip, serial=False):
        loops = SERIAL if serial else select(data.y.shape[0])
        return loops.power_sites(tilted, data, bufs, resid, alpha, damping, clip)

    def sequential_block(self, tilted, data, cov, mean, tau, nu, damping, clip, dtau, dnu):
        """Sequential EP over one block of sites (:func:`sequential_block`)."""
        return sequential_block(tilted, data, cov, mean, tau, nu, damping, clip, dtau, dnu)

    def evidence_site_terms(self, log_z, mu_cav, var_cav, mean, var):
        return evidence_site_terms(log_z, mu_cav, var_cav, mean, var)

    def build_b(self, K, s, out=None):
        out = np.empty(K.shape) if out is None else out
        select(K.shape[0]).build_b(K, s, out)
        return out

    def scale_columns(self, K, s, out=None):
        out = np.empty(K.shape) if out is None else out
        select(K.shape[0]).scale_columns(K, s, out)
        return out

    def row_sumsq(self, a, out=None):
        out = np.empty(a.shape[0]) if out is None else out
        select(a.shape[0]).row_sumsq(a, out)
        return out

    def projection_marginals(self, G, beta):
        return G.T @ beta, np.einsum("ij,ij->j", G, G)

    def tilted(self, likelihood, y, extra, mu, var, alpha):
        return likelihood.tilted(y, mu, var, alpha, extra=extra)

    def tilted_dparams(self, likelihood, y, mu, var, extra, alpha):
        return likelihood.tilted_dparams(y, mu, var, extra, alpha)

    # --- robust max -----------------------------------------------------------------
    def prob_largest(self, mean, var, nodes, weights):
        out = np.empty_like(mean)
        robustmax.prob_largest_all(mean, var, nodes, weights, out)
        return out

    def prob_largest_grad(self, mean, var, labels, nodes, weights):
        s, dm, dv = np.empty(mean.shape[0]), np.empty_like(mean), np.empty_like(mean)
        robustmax.prob_largest_grad(mean, var, labels, nodes, weights, s, dm, dv)
        return s, dm, dv

    # --- data -----------------------------------------------------------------------
    def rows(self, X):
        return _read_rows(X)

    def gram_cache(self, X, n, m, budget):
        """In memory only for an in-memory ndarray X (not a memmap) whose ``8 n m`` bytes
        fit the budget."""
        if type(X) is not np.ndarray or 8 * n * m > budget:
            return None
        return mapped_empty((n, m))


    def __reduce__(self):
        return _cpu_backend, ()


def _cpu_backend():
    """The one CPU backend of the process (what a pickled one becomes)."""
    return CPU


CPU = CPUBackend()

__all__ = ["CPUBackend", "CPU"]
