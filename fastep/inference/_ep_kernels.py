"""Compiled hot loops of dense EP.

Site update from the derivatives of log Z (GPML's form, which never forms the
tilted variance by subtraction): with cavity variance ``v`` and
``d1 = dlogZ/dmu``, ``d2 = d2logZ/dmu2``::

    tau_new = -d2 / (1 + d2 v)        nu_new = (d1 - mu_cav d2) / (1 + d2 v)

Every ``prange`` kernel is compiled twice from one source, serial and parallel
(:class:`KernelSet`): below :data:`PARALLEL_MIN_N` sites the parallel launch
costs more than it saves, because Numba's and OpenBLAS's thread pools take turns
on the same cores between the BLAS calls of a sweep.
"""
from __future__ import annotations

import math

from numba import prange, types

from .._jit import TiltedFn, f8, f8_1d, jit, pjit

i8 = types.int64
b1 = types.boolean


@jit("UniTuple(f8, 2)(f8, f8, f8, f8)")
def site_from_derivatives(d1, d2, mu_cav, var_cav):
    """The one place where tilted-moment derivatives become site parameters."""
    den = 1.0 + d2 * var_cav
    return -d2 / den, (d1 - mu_cav * d2) / den


# The scalar steps of a site update below are shared by the CPU loops in this module
# and the CUDA kernels of fastep.cuda (compiled from this same source as device
# functions), so both targets run one copy of the site arithmetic.

@jit("Tuple((b1, f8, f8))(f8, f8, f8, f8)")
def cavity(mean, var, tau, nu):
    """(ok, mu_cav, var_cav): remove a site from its marginal; ok is False when the
    cavity precision 1/var - tau is not positive (the site is then skipped)."""
    tc = 1.0 / var - tau
    if not tc > 0.0:
        return False, math.nan, math.nan
    vc = 1.0 / tc
    return True, (mean / var - nu) * vc, vc


@jit("Tuple((b1, f8, f8, f8))(f8, f8, f8, f8, f8)")
def power_cavity(mean, var, tau, nu, alpha):
    """(ok, mu_cav, var_cav, s) removing alpha of a site, s = 1 - alpha tau v: written
    without 1/v (projections of points far from the inducing inputs have v -> 0)."""
    sc = 1.0 - alpha * tau * var
    if not sc > 0.0:
        return False, math.nan, math.nan, sc
    return True, (mean - alpha * nu * var) / sc, var / sc, sc


@jit("Tuple((f8, f8, b1))(f8, f8, f8, f8, f8, f8, f8, f8, b1)")
def damped_site(d1, d2, mu_cav, var_cav, tau, nu, alpha, damping, clip):
    """(tau_new, nu_new, ok): the damped (Power-)EP proposal from the tilted derivatives;
    site <- site^(1 - alpha) * (projected tilted / cavity), clipped at tau >= 0 for
    log-concave likelihoods.  A non-finite proposal keeps the site (ok = False)."""
    t, n = site_from_derivatives(d1, d2, mu_cav, var_cav)
    t += (1.0 - alpha) * tau
    n += (1.0 - alpha) * nu
    if clip and t < 0.0:
        t = 0.0
    ok = math.isfinite(t) and math.isfinite(n)
    if not ok:
        t = tau
        n = nu
    return (1.0 - damping) * tau + damping * t, (1.0 - damping) * nu + damping * n, ok


@jit("f8(f8, f8, f8, f8, f8, f8, f8)")
def power_site_evidence(log_z, sc, mean, var, tau, nu, alpha):
    """A site's share of the Power-EP log Z (see :func:`power_sites`)."""
    quad = alpha * (tau * mean * mean - 2.0 * nu * mean) + alpha * alpha * nu * nu * var
    return (log_z - 0.5 * math.log(sc) + 0.5 * quad / sc) / alpha


@jit(inline="always")
def store_site(i, t, n, ev, mc, vc, new_tau, new_nu, site_ev, mu_cav, var_cav):
    """Write site i's new parameters, its evidence term and its cavity (NaN evidence and
    cavity for a skipped site); shared by the CPU kernels and their GPU twins."""
    new_tau[i] = t
    new_nu[i] = n
    site_ev[i] = ev
    mu_cav[i] = mc
    var_cav[i] = vc


_PARALLEL_SITES_SIG = i8(TiltedFn, f8_1d, f8[:, ::1], f8_1d, f8_1d, f8_1d, f8_1d, f8_1d, f8, b1,
                        f8_1d, f8_1d, f8_1d, f8_1d, f8_1d)


def parallel_sites(tilted, y, extra, params, mean, var, tau, nu, damping, clip,
                   new_tau, new_nu, log_z, mu_cav, var_cav):
    """All sites from the same marginals: cavities, tilted log Z at the cavities
    (for the evidence of the *current* sites) and damped proposals.
    A site whose cavity variance would be non-positive keeps its parameters;
    the number of such sites is returned.  Each iteration owns index i."""
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


@jit(i8(TiltedFn, f8_1d, f8[:, ::1], f8_1d, f8[:, ::1], f8_1d, f8_1d, f8_1d, f8, b1,
        f8_1d, f8_1d))
def sequential_block(tilted, y, extra, params, cov, mean, tau, nu, damping, clip,
                     dtau, dnu):
    """Sequential EP over one block of sites, in order.

    ``cov`` (b x b) and ``mean`` (b) are the block's posterior, updated in place
    by a rank-one update after every site::

        Sigma <- Sigma - c s s^T,  mu <- mu + (dnu - dtau mu_i) / (1 + dtau Sigma_ii) s,
        c = dtau / (1 + dtau Sigma_ii),  s = Sigma[:, i]

    ``tau``/``nu`` are updated in place; ``dtau``/``dnu`` receive the total
    change of each site, which the caller applies to the rest of the posterior
    as one rank-b (BLAS-3) update.  Returns the number of skipped sites.
    """
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


_POWER_SITES_SIG = i8(TiltedFn, f8_1d, f8[:, ::1], f8_1d, f8_1d, f8_1d, f8_1d, f8_1d, f8_1d, f8,
                     f8, b1, f8_1d, f8_1d, f8_1d, f8_1d, f8_1d)


def power_sites(tilted, y, extra, params, mean, var, resid, tau, nu, alpha, damping, clip,
                new_tau, new_nu, site_ev, mu_cav, var_cav):
    """Power-EP sites on projections ``h_i`` of an inducing-point posterior (sparse EP).

    ``mean``/``var`` are the marginals of ``h_i``; ``f_i = h_i + N(0, resid_i)``.
    The cavity removes ``alpha`` of the site, the tilted is
    ``N(h | cavity) int N(f | h, resid) p(y | f)^alpha df``, and the undamped update is
    ``site <- site^(1 - alpha) * (projected tilted / cavity)``.  ``site_ev`` receives
    each site's share of log Z (``nan`` for a skipped site)::

        (1/alpha) [log Z_i + 1/2 log(v_-i / v_i) + mu_-i^2 / (2 v_-i) - mu_i^2 / (2 v_i)]
      = (1/alpha) [log Z_i - 1/2 log s + (alpha (tau mu^2 - 2 nu mu) + alpha^2 nu^2 v) / (2 s)]

    Returns the number of skipped sites.  Each iteration owns index i.
    """
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


def row_sumsq(a, out):
    """out[i] = sum_j a[i, j]^2."""
    for i in prange(a.shape[0]):
        acc = 0.0
        for j in range(a.shape[1]):
            acc += a[i, j] * a[i, j]
        out[i] = acc


@jit
def evidence_site_terms(log_z, mu_cav, var_cav, mean, var):
    """sum_i [log Z_i + 1/2 log(v_cav/v) + mu_cav^2/(2 v_cav) - mu^2/(2 v)]: the part of
    log Z_EP that lives on the sites, written without 1/tau_tilde (R&W eq. 3.65)."""
    acc = 0.0
    for i in range(log_z.shape[0]):
        acc += (log_z[i] + 0.5 * math.log(var_cav[i] / var[i])
                + 0.5 * mu_cav[i] * mu_cav[i] / var_cav[i] - 0.5 * mean[i] * mean[i] / var[i])
    return acc


PARALLEL_MIN_N = 2048


class KernelSet:
    """The per-sweep kernels, compiled serial (``parallel=False``) or parallel."""

    def __init__(self, parallel):
        wrap = pjit if parallel else jit
        self.parallel_sites = wrap(_PARALLEL_SITES_SIG)(parallel_sites)
        self.power_sites = wrap(_POWER_SITES_SIG)(power_sites)
        self.build_b = wrap(build_b)
        self.scale_columns = wrap(scale_columns)
        self.row_sumsq = wrap(row_sumsq)


SERIAL = KernelSet(parallel=False)
PARALLEL = KernelSet(parallel=True)


def select(n):
    """Kernels for a problem with n sites."""
    return PARALLEL if n >= PARALLEL_MIN_N else SERIAL
