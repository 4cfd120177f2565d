"""The CPU backend: NumPy arrays, LAPACK/BLAS through SciPy, and compiled Numba loops.

Its fast paths are backend operations, not branches in the algorithms:

* dense factorisations in place (``dpotrf`` on a Fortran view of a C-ordered buffer, the
  blocked Cholesky of :mod:`fastep._linalg` above n = 8192, ``dtrsm`` in place);
* the streamed passes of sparse EP share their chunks of rows among Python threads, each
  calling single-threaded BLAS without the GIL (:func:`fastep._linalg.trmm_lower_nogil`,
  :func:`fastep._linalg.syrk_lower_nogil`);
* the per-site loops below, compiled serial and parallel from one source
  (:class:`KernelSet`): below :data:`PARALLEL_MIN_N` sites the parallel launch costs
  more than it saves, because Numba's and OpenBLAS's thread pools take turns on the same
  cores between the BLAS calls of a sweep.

The scalar site arithmetic the loops call lives in :mod:`fastep._sites`, shared with the
CUDA kernels.
"""
from __future__ import annotations

import math
import os
import threading
import types as types_module
from concurrent.futures import ThreadPoolExecutor

import numba
import numpy as np
from numba import prange, types
from scipy.linalg import blas, cho_solve, lapack

from .._jit import TiltedFn, f8, f8_1d, jit, pjit
from .._linalg import (BLOCK_THRESHOLD, SMALL_N, blas_threads_for, cholesky_inplace,
                       cholesky_inverse_inplace, solve_lower_inplace, syrk_lower_nogil,
                       tri_gram_inplace, trmm_lower_nogil)
from .._sites import (SiteBuffers, SiteData, cavity, damped_site, power_cavity,
                      power_site_evidence, site_from_derivatives, store_site)
from ..exceptions import NotPositiveDefiniteError
from .._memory import mapped_empty
from ..kernels.gram import HostGram
from ..likelihoods import robustmax
from ._base import Backend

i8 = types.int64
b1 = types.boolean

# ---------------------------------------------------------------------------------------
# compiled per-site loops
# ---------------------------------------------------------------------------------------
#: The records of :mod:`fastep._sites` as the compiled loops type them.
SITE_DATA = types.NamedTuple((f8_1d, f8[:, ::1], f8_1d), SiteData)
SITE_BUFFERS = types.NamedUniTuple(f8_1d, len(SiteBuffers._fields), SiteBuffers)


def parallel_sites(tilted, data, bufs, damping, clip):
    """All sites from the same marginals: cavities, tilted log Z at the cavities
    (for the evidence of the *current* sites) and damped proposals, in ``bufs``
    (:class:`fastep._sites.SiteBuffers`).  A site whose cavity variance would be
    non-positive keeps its parameters; the number of such sites is returned.  Each
    iteration owns index i."""
    # field by field: Numba 0.68's parallel loops lose the writes to arrays unpacked from a
    # tuple (``a, b = bufs``) or indexed through it inside the loop (``bufs.a[i] = ...``)
    y, extra, params = data.y, data.extra, data.params
    mean, var, tau, nu = bufs.mean, bufs.var, bufs.tau, bufs.nu
    new_tau, new_nu, log_z = bufs.new_tau, bufs.new_nu, bufs.log_z
    mu_cav, var_cav = bufs.mu_cav, bufs.var_cav
    skipped = 0
    for i in prange(y.shape[0]):
        ok, mc, vc = cavity(mean[i], var[i], tau[i], nu[i])
        if not ok:
            store_site(i, tau[i], nu[i], math.nan, math.nan, math.nan, new_tau, new_nu, log_z,
                       mu_cav, var_cav)
            skipped += 1
            continue
        lz, d1, d2 = tilted(y[i], extra[i], mc, vc, 1.0, params)
        t, n, ok = damped_site(d1, d2, mc, vc, tau[i], nu[i], 1.0, damping, clip)
        if not ok:
            skipped += 1
        store_site(i, t, n, lz, mc, vc, new_tau, new_nu, log_z, mu_cav, var_cav)
    return skipped


@jit(i8(TiltedFn, SITE_DATA, f8[:, ::1], f8_1d, f8_1d, f8_1d, f8, b1, f8_1d, f8_1d))
def sequential_block(tilted, data, cov, mean, tau, nu, damping, clip, dtau, dnu):
    """Sequential EP over one block of sites (``data``), in order.

    ``cov`` (b x b) and ``mean`` (b) are the block's posterior, updated in place
    by a rank-one update after every site::

        Sigma <- Sigma - c s s^T,  mu <- mu + (dnu - dtau mu_i) / (1 + dtau Sigma_ii) s,
        c = dtau / (1 + dtau Sigma_ii),  s = Sigma[:, i]

    ``tau``/``nu`` are updated in place; ``dtau``/``dnu`` receive the total
    change of each site, which the caller applies to the rest of the posterior
    as one rank-b (BLAS-3) update.  Returns the number of skipped sites.
    """
    y, extra, params = data.y, data.extra, data.params
    b = y.shape[0]
    skipped = 0
    col = cov[:, 0].copy()
    for i in range(b):
        dtau[i] = 0.0
        dnu[i] = 0.0
        v = cov[i, i]
        tc = 1.0 / v - tau[i]
        if not tc > 0.0:
            skipped += 1
            continue
        vc = 1.0 / tc
        mc = (mean[i] / v - nu[i]) * vc
        _, d1, d2 = tilted(y[i], extra[i], mc, vc, 1.0, params)
        t, n = site_from_derivatives(d1, d2, mc, vc)
        if clip and t < 0.0:
            t = 0.0
        if not (math.isfinite(t) and math.isfinite(n)):
            skipped += 1
            continue
        t = (1.0 - damping) * tau[i] + damping * t
        n = (1.0 - damping) * nu[i] + damping * n
        dt = t - tau[i]
        dn = n - nu[i]
        den = 1.0 + dt * v
        if not den > 0.0:
            skipped += 1
            continue
        for k in range(b):
            col[k] = cov[k, i]
        c = dt / den
        g = (dn - dt * mean[i]) / den
        for k in range(b):
            ck = c * col[k]
            for j in range(b):
                cov[k, j] -= ck * col[j]
            mean[k] += g * col[k]
        tau[i] = t
        nu[i] = n
        dtau[i] = dt
        dnu[i] = dn
    return skipped


def power_sites(tilted, data, bufs, resid, alpha, damping, clip):
    """Power-EP sites on projections ``h_i`` of an inducing-point posterior (sparse EP).

    ``bufs.mean``/``bufs.var`` are the marginals of ``h_i``; ``f_i = h_i + N(0, resid_i)``.
    The cavity removes ``alpha`` of the site, the tilted is
    ``N(h | cavity) int N(f | h, resid) p(y | f)^alpha df``, and the undamped update is
    ``site <- site^(1 - alpha) * (projected tilted / cavity)``.  ``bufs.log_z`` receives
    each site's share of log Z (:func:`fastep._sites.power_site_evidence`; ``nan`` for a
    skipped site).  Returns the number of skipped sites.  Each iteration owns index i.
    """
    y, extra, params = data.y, data.extra, data.params      # see parallel_sites
    mean, var, tau, nu = bufs.mean, bufs.var, bufs.tau, bufs.nu
    new_tau, new_nu, site_ev = bufs.new_tau, bufs.new_nu, bufs.log_z
    mu_cav, var_cav = bufs.mu_cav, bufs.var_cav
    skipped = 0
    for i in prange(y.shape[0]):
        ok, mc, vc, sc = power_cavity(mean[i], var[i], tau[i], nu[i], alpha)
        if not ok:
            store_site(i, tau[i], nu[i], math.nan, math.nan, math.nan, new_tau, new_nu, site_ev,
                       mu_cav, var_cav)
            skipped += 1
            continue
        lz, d1, d2 = tilted(y[i], extra[i], mc, vc + resid[i], alpha, params)
        t, n, ok = damped_site(d1, d2, mc, vc, tau[i], nu[i], alpha, damping, clip)
        if not ok:
            skipped += 1
        ev = power_site_evidence(lz, sc, mean[i], var[i], tau[i], nu[i], alpha)
        store_site(i, t, n, ev, mc, vc, new_tau, new_nu, site_ev, mu_cav, var_cav)
    return skipped


def build_b(kmat, s, out):
    """out = I + diag(s) K diag(s) (both triangles), out C-ordered."""
    n = kmat.shape[0]
    for i in prange(n):
        si = s[i]
        for j in range(n):
            out[i, j] = si * kmat[i, j] * s[j]
        out[i, i] += 1.0


def scale_columns(kmat, s, out):
    """out[i, j] = K[i, j] * s[j]."""
    n = kmat.shape[0]
    for i in prange(n):
        for j in range(n):
            out[i, j] = kmat[i, j] * s[j]


def gradient_weights(a, s, b):
    """In place: ``a`` holds ``(L L^T)^-1`` in its upper triangle and becomes
    ``G = (b b^T - diag(s) (L L^T)^-1 diag(s)) / 2`` in both triangles."""
    n = s.shape[0]
    for i in prange(n):
        for j in range(i, n):
            a[i, j] = 0.5 * (b[i] * b[j] - s[i] * s[j] * a[i, j])
    for i in prange(n):
        for j in range(i):
            a[i, j] = a[j, i]


def gradient_direction(V, SV, G, mv, r, a, w, b, tau, gd):
    """In place of G (holding S U S V): ``G = mv a^T + r w^T + SV diag(b) - 2 G diag(tau)
    - 2 V diag(gd)``, one pass over m x c arrays (NumPy's expression made eight
    temporaries of that size: 100 ms a chunk of 8,192 rows at m = 256, against 11 ms for
    one of the chunk's m x m x c products)."""
    m, c = G.shape
    for j in prange(c):
        for i in range(m):
            G[i, j] = (mv[i] * a[j] + r[i] * w[j] + SV[i, j] * b[j]
                       - 2.0 * G[i, j] * tau[j] - 2.0 * V[i, j] * gd[j])


def zero_upper(a):
    """a[i, j] = 0 above the diagonal (a F-ordered: column by column)."""
    for j in prange(a.shape[1]):
        for i in range(min(j, a.shape[0])):
            a[i, j] = 0.0


def row_sumsq(a, out):
    """out[i] = sum_j a[i, j]^2."""
    for i in prange(a.shape[0]):
        acc = 0.0
        for j in range(a.shape[1]):
            acc += a[i, j] * a[i, j]
        out[i] = acc


@jit
def evidence_site_terms(log_z, mu_cav, var_cav, mean, var):
    """sum_i [log Z_i + 1/2 log(v_cav/v) + mu_cav^2/(2 v_cav) - mu^2/(2 v)] over the sites
    with a finite log Z_i: the part of log Z_EP that lives on the sites, written without
    1/tau_tilde (R&W eq. 3.65)."""
    acc = 0.0
    for i in range(log_z.shape[0]):
        if math.isfinite(log_z[i]):
            acc += (log_z[i] + 0.5 * math.log(var_cav[i] / var[i])
                    + 0.5 * mu_cav[i] * mu_cav[i] / var_cav[i]
                    - 0.5 * mean[i] * mean[i] / var[i])
    return acc


# an m x 1 (or 1 x c) G is both F- and C-contiguous, and Numba types it as C
@jit([i8(f8[::1, :], f8_1d), i8(f8[:, ::1], f8_1d)], nogil=True)
def split_by_sign(G, tau):
    """The columns of the F-ordered m x c ``G`` reordered in place, those with tau_j >= 0
    first, times sqrt(tau_j), then the others, times sqrt(-tau_j); returns how many come
    first (p), so that ``G diag(tau) G^T = G_+ G_+^T - G_- G_-^T`` with ``G_+ = G[:, :p]``,
    ``G_- = G[:, p:]``: two dsyrk on contiguous blocks for a sum whose weights have both
    signs (the change of sites in a chunk-sequential block, the gradient's d psi / d v),
    without gathering columns into new arrays (whose first touch cost about a third of
    the chunk's dsyrk).  Runs without the GIL, in the streamed passes' worker threads."""
    m, c = G.shape
    t = tau.copy()
    i, j = 0, c - 1
    while True:
        while i <= j and t[i] >= 0.0:
            i += 1
        while i <= j and t[j] < 0.0:
            j -= 1
        if i >= j:
            break
        for r in range(m):
            G[r, i], G[r, j] = G[r, j], G[r, i]
        t[i], t[j] = t[j], t[i]
        i += 1
        j -= 1
    for k in range(c):
        s = math.sqrt(abs(t[k]))
        for r in range(m):
            G[r, k] *= s
    return i


PARALLEL_MIN_N = 2048


def _twin(fn, suffix):
    """``fn`` under another qualified name.  Numba keys its on-disk cache by module,
    qualified name and line, not by the ``parallel`` option, so the serial and parallel
    compilations of one function would share one cache entry (whichever was compiled
    first then served both); the suffix gives each its own."""
    twin = types_module.FunctionType(fn.__code__, fn.__globals__, fn.__name__ + suffix,
                                     fn.__defaults__, fn.__closure__)
    twin.__qualname__ = fn.__qualname__ + suffix
    twin.__doc__ = fn.__doc__
    return twin


class KernelSet:
    """The per-sweep loops, compiled serial (``parallel=False``) or parallel."""

    def __init__(self, parallel):
        wrap = pjit if parallel else jit
        suffix = "_parallel" if parallel else "_serial"
        self.parallel_sites = wrap(i8(TiltedFn, SITE_DATA, SITE_BUFFERS, f8, b1))(
            _twin(parallel_sites, suffix))
        self.power_sites = wrap(i8(TiltedFn, SITE_DATA, SITE_BUFFERS, f8_1d, f8, f8, b1))(
            _twin(power_sites, suffix))
        self.build_b = wrap(_twin(build_b, suffix))
        self.scale_columns = wrap(_twin(scale_columns, suffix))
        self.row_sumsq = wrap(_twin(row_sumsq, suffix))
        self.zero_upper = wrap(_twin(zero_upper, suffix))
        self.gradient_weights = wrap(_twin(gradient_weights, suffix))
        # also run by the worker threads of the streamed passes: without the GIL
        self.gradient_direction = wrap(nogil=True)(_twin(gradient_direction, suffix))


SERIAL = KernelSet(parallel=False)
PARALLEL = KernelSet(parallel=True)


def select(n):
    """Loops for a problem with n sites."""
    return PARALLEL if n >= PARALLEL_MIN_N else SERIAL


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

__all__ = ["CPUBackend", "CPU", "KernelSet", "SERIAL", "PARALLEL", "select", "PARALLEL_MIN_N"]
