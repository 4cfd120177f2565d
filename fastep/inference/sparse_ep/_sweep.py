"""One parallel sweep of sparse Power EP over chunks of rows, as every way of holding the
sites runs it: what it reads and writes (:func:`sweep_context`), one worker's share of the
chunks (:class:`_SweepPart`), a warm start's pass (:func:`warm_rows`) and what the sweep
reports to the loop (:class:`SweepSums`)."""
from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Optional

import numpy as np

from ..._sites import SiteBuffers
from .._sweep import site_change
from ._posterior import _InducingPosterior, _symmetrise_lower


def warm_rows(ctx, chunks, tau, nu, build, P_G=None, b_G=None):
    """A warm start's pass over the row ranges ``chunks`` of ``ctx`` (:func:`sweep_context`):
    d_i into ``ctx.resid``, ``K(X_c, Z)`` into ``ctx.cache`` where it keeps one (the sweeps
    that follow read it, not the kernel) and (``build``) the sums ``V T V^T``, ``V nu`` that
    make q from the given sites, added to ``P_G``, ``b_G`` (new arrays where None; returned
    on the backend).  Run over one worker's share of the rows in this process, or over one
    chunk's rows on a Dask worker."""
    be, xp = ctx.be, ctx.be.xp
    m = ctx.Z.shape[0]
    P_G = xp.zeros((m, m), order="F") if P_G is None else P_G
    b_G = xp.zeros(m) if b_G is None else b_G
    for c0, c1 in chunks:
        K, kdiag = gram_rows(ctx, c0, c1)
        V = be.trmm_lower(ctx.L_uu_inv, xp.asfortranarray(K.T))
        ctx.resid[c0:c1] = xp.maximum(kdiag - xp.einsum("ij,ij->j", V, V), 0.0)
        if build:
            be.accumulate(P_G, b_G, V, tau[c0:c1], nu[c0:c1])
    return P_G, b_G


def gram_rows(ctx, c0, c1):
    """``(K(X_c, Z), K_ii)`` of rows ``c0:c1`` of ``ctx`` (:func:`sweep_context`), the Gram
    block also written to ``ctx.cache`` where it keeps one."""
    be = ctx.be
    Xc = ctx.rows(c0, c1)
    with be.compiled():
        K = ctx.kernel(Xc, ctx.Z, backend=be)
        kdiag = ctx.kernel.diag(Xc, backend=be)
    if ctx.cache is not None:
        ctx.cache[c0:c1] = K
    return K, kdiag


def _sum_parts(be, parts):
    """The workers' sums ``P_G``, ``b_G`` added in a fixed order, on the host."""
    return (be.to_host(parts[0].P_G + sum(part.P_G for part in parts[1:])),
            be.to_host(parts[0].b_G + sum(part.b_G for part in parts[1:])))


def _chunks(n, size):
    for c0 in range(0, n, size):
        yield c0, min(n, c0 + size)


def _gram_t(be, kernel, Z, Xc):
    """``K(Z, X_c)`` as an F-ordered backend array (the transpose of ``K(X_c, Z)``)."""
    return be.xp.asfortranarray(kernel(Xc, Z, backend=be).T)


def sweep_context(be, kernel, likelihood, Z, L_uu, X, y, extra, alpha, cold,
                  cache=None):
    """What a parallel sweep over the rows of X reads and writes (``y``, ``extra``: the
    likelihood's encoding, checked): the backend's copies of the data and the per-site
    vectors (marginals, cavities, site terms of log Z and d_i); ``cache``: an (n, m) array
    for ``K(X, Z)`` or None, ``cached``: whether it holds it yet (a warm pass or the first
    sweep fills it).  Built for all n rows in this process, or for one block of rows on a
    Dask worker."""
    xp, n = be.xp, X.shape[0]
    return SimpleNamespace(
        be=be, kernel=kernel, Z=xp.ascontiguousarray(be.asarray(Z)), rows=be.rows(X),
        likelihood=likelihood, data=be.site_inputs(likelihood, y, extra), cache=cache,
        cold=cold,
        tilted=likelihood.scalar_tilted, clip=bool(likelihood.log_concave), alpha=float(alpha),
        cached=False, resid=xp.empty(n), mean=xp.empty(n), var=xp.empty(n),
        site_ev=xp.empty(n), mu_cav=xp.empty(n), var_cav=xp.empty(n),
        L_uu_inv=be.asarray(_InducingPosterior.prior(L_uu).R_inv))   # L_uu^-1


@dataclass
class SweepSums:
    """What a parallel sweep reports to the driver: sites skipped, the site terms of log Z
    (over the finite ones), the largest relative site change, and the proposal's sums
    ``P_G = G diag(tau) G^T``, ``b_G = G nu`` (host, lower triangle of P_G at least);
    ``turn``: the cosine of the proposed site step with the last one (:class:`StepTurn`),
    None where the sites are not at hand (a Dask cluster)."""

    skipped: int
    site_ev: float
    change: float
    P_G: Optional[np.ndarray] = None
    b_G: Optional[np.ndarray] = None
    turn: Optional[float] = None


class _SweepPart:
    """One worker's share of a sweep: chunks ``k, k + T, k + 2T, ...`` of the rows, with its
    own Gram buffer and its own sums ``P_G``, ``b_G``.

    Every chunk writes only its own rows of the site arrays.  On the CPU the BLAS-3 work
    (dtrmm, dsyrk) runs without the GIL, so T threads keep T cores busy; the fixed
    assignment of chunks to parts and the fixed order of the final sum keep results
    reproducible.  With T > 1 the site loop is the serial one (the threads are the
    parallelism).  Per chunk::

        G = R^-1 K(Z, X_c),  mean(h_i) = G_i^T beta,  var(h_i) = |G_i|^2,
        sites,  P_G += G diag(tau) G^T,  b_G += G nu
    """

    def __init__(self, be, index, n_workers, n, m, chunk_size):
        xp = be.xp
        self.chunks = list(_chunks(n, chunk_size))[index::n_workers]
        self.serial = n_workers > 1
        self.buffer = xp.empty((m, min(n, chunk_size)), order="F")
        self.spare = None                  # a second such buffer, for a cold first sweep
        self.P_G, self.b_G = xp.zeros((m, m), order="F"), xp.zeros(m)
        self.d_lik = 0.0                   # the gradient terms' d/dlog lik (gradient_sums)

    def sweep(self, ctx, q, tau, nu, new_tau, new_nu, first, damping, chunks=None, sums=True,
              gradient=False):
        """Parallel EP over this part's chunks from ``q``, steps of ``damping``.  With
        ``chunks`` given (a block of the chunk-sequential schedule) the new sites are
        adopted at once and only their change enters the sums; ``sums=False`` (an
        evaluation pass) skips the sums, and ``gradient`` then takes the sums of the
        evidence gradient's first pass in their place (:func:`gradient_sums`).  Returns
        ``(sites skipped, largest site change)``."""
        be, xp = ctx.be, ctx.be.xp
        self.P_G[...] = 0.0
        self.b_G[...] = 0.0
        self.d_lik = 0.0
        skipped, change = 0, 0.0
        for c0, c1 in self.chunks if chunks is None else chunks:
            sl, At = slice(c0, c1), self.buffer[:, : c1 - c0]
            if ctx.cache is not None and (ctx.cached or not first):
                xp.copyto(At, ctx.cache[sl].T)
                if first and ctx.cold:
                    with be.compiled():
                        kdiag = ctx.kernel.diag(ctx.rows(c0, c1), backend=be)
            else:
                K, kdiag = gram_rows(ctx, c0, c1)
                xp.copyto(At, K.T)
            if first and ctx.cold and not q.prior:
                # d_i = K_ii - |V_i|^2 with V = L_uu^-1 K_uf (q has moved off the prior)
                if self.spare is None:
                    self.spare = xp.empty_like(self.buffer, order="F")
                V = self.spare[:, : c1 - c0]
                xp.copyto(V, At)
                V = be.trmm_lower(ctx.L_uu_inv, V)
                ctx.resid[sl] = xp.maximum(kdiag - xp.einsum("ij,ij->j", V, V), 0.0)
            G = be.trmm_lower(q.R_inv, At)
            ctx.mean[sl], ctx.var[sl] = be.projection_marginals(G, q.beta)
            if first and ctx.cold and q.prior:
                ctx.resid[sl] = xp.maximum(kdiag - ctx.var[sl], 0.0)
            bufs = SiteBuffers(ctx.mean, ctx.var, tau, nu, new_tau, new_nu, ctx.site_ev,
                               ctx.mu_cav, ctx.var_cav).rows(sl)
            skipped += be.power_sites(ctx.tilted, ctx.data.rows(sl), bufs, ctx.resid[sl],
                                      ctx.alpha, damping, ctx.clip, serial=self.serial)
            if chunks is None:
                if sums:
                    be.accumulate(self.P_G, self.b_G, G, new_tau[sl], new_nu[sl])
                elif gradient:
                    self.d_lik = self.d_lik + self._gradient_terms(ctx, G, sl, tau, nu)
                continue
            change = max(change, site_change(xp, tau[sl], nu[sl], new_tau[sl], new_nu[sl]))
            be.accumulate(self.P_G, self.b_G, G, new_tau[sl] - tau[sl], new_nu[sl] - nu[sl])
            tau[sl], nu[sl] = new_tau[sl], new_nu[sl]
        return skipped, change

    def _gradient_terms(self, ctx, G, sl, tau, nu):
        """Into ``P_G``, ``b_G``: the chunk's ``G diag(c) G^T`` and ``G a``, with a, c the
        derivatives of its site terms of log Z in the marginal mean and variance of h_i
        (at the marginals just computed); returns their sum of d/dlog(likelihood params).
        Overwrites G."""
        be, data = ctx.be, ctx.data
        with be.compiled():
            g_mu, g_var, _, g_lik = _site_derivatives(
                be, ctx.likelihood, data.y[sl], data.extra[sl], ctx.mean[sl], ctx.var[sl],
                ctx.resid[sl], tau[sl], nu[sl], ctx.alpha)
        be.accumulate(self.P_G, self.b_G, G, g_var, g_mu)
        return be.to_host(g_lik.sum(0))


def gradient_sums(be, parts, L_P):
    """The evidence gradient's first-pass sums ``(V a, V diag(c) V^T, d/dlog lik)``
    (:func:`~fastep.inference.sparse_ep._gradient.gradient_first`, host arrays, the m x m
    one symmetric) from an evaluation pass that took them in q's coordinates
    (:meth:`_SweepPart.sweep` with ``gradient``): there ``G = L_P^-1 V``, so ``V a =
    L_P (G a)`` and ``V diag(c) V^T = L_P (G diag(c) G^T) L_P^T``.  ML-II's evaluations
    thus take their first gradient pass inside EP's closing pass, where G and the
    marginals are at hand, instead of another pass over the data."""
    U_G, a_G = _sum_parts(be, parts)
    U = L_P @ _symmetrise_lower(U_G) @ L_P.T
    d_lik = sum(part.d_lik for part in parts)
    return L_P @ a_G, 0.5 * (U + U.T), np.asarray(d_lik, dtype=float)


def _site_derivatives(be, lik, y, extra, mean, var, resid, tau, nu, alpha):
    """d psi_i / d(mu_i, v_i, d_i) for the site terms psi_i of log Z (module docstring),
    and d psi_i / d log(likelihood params); zero for sites with an improper cavity."""
    xp = be.xp
    sc = 1.0 - alpha * tau * var                     # s of the power_sites loop
    ok = sc > 0
    sc = xp.where(ok, sc, 1.0)
    vc = var / sc
    mc = (mean - alpha * nu * var) / sc
    _, d1, d2 = be.tilted(lik, y, extra, mc, vc + resid, alpha)
    e = 0.5 * (d2 + d1 * d1)                         # d log Z_i / d var (Gaussian convolution)
    quad = alpha * (tau * mean * mean - 2.0 * nu * mean) + alpha * alpha * nu * nu * var
    g_mu = (d1 + alpha * (tau * mean - nu)) / sc
    g_var = ((d1 * alpha * (tau * mean - nu) + e) / (sc * sc) + 0.5 * alpha * tau / sc
             + 0.5 * (alpha * alpha * nu * nu * sc + alpha * tau * quad) / (sc * sc))
    g_lik = (be.tilted_dparams(lik, y, mc, vc + resid, extra, alpha) if lik.n_dims
             else xp.zeros((y.shape[0], 0)))
    z = xp.where(ok, 1.0 / alpha, 0.0)
    return g_mu * z, g_var * z, e * z, g_lik * z[:, None]
