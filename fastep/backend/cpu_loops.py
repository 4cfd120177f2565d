"""The CPU backend's compiled per-site loops: parallel and power EP site updates, the
sequential block, the evidence's site terms and the column and row operations of a sweep,
compiled serial and parallel from one source (:class:`KernelSet`; :func:`select` picks by
the number of sites: below :data:`PARALLEL_MIN_N` the parallel launch costs more than it
saves, because Numba's and OpenBLAS's thread pools take turns on the same cores between the
BLAS calls of a sweep).  The scalar site arithmetic they call lives in
:mod:`fastep._sites`, shared with the CUDA kernels; :class:`fastep.backend.cpu.CPUBackend`
runs them.
"""
from __future__ import annotations

import math
import types as types_module

from numba import prange, types

from .._jit import TiltedFn, f8, f8_1d, jit, pjit
from .._sites import (SiteBuffers, SiteData, cavity, damped_site, power_cavity,
                      power_site_evidence, site_from_derivatives, store_site)

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
        # without the GIL: sparse EP's worker threads run the serial loop each on its own
        # chunks' rows, and a likelihood without a closed form makes it most of a sweep
        self.power_sites = wrap(i8(TiltedFn, SITE_DATA, SITE_BUFFERS, f8_1d, f8, f8, b1),
                                nogil=True)(_twin(power_sites, suffix))
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


__all__ = ["KernelSet", "SERIAL", "PARALLEL", "select", "PARALLEL_MIN_N", "sequential_block",
           "evidence_site_terms", "split_by_sign"]
