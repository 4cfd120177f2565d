"""Sparse (inducing-point) Power EP on the GPU: the twin of
:func:`fastep.inference.sparse_ep.sparse_ep`.

X, the targets, the extras and every per-site vector live on the device for the
whole run (O(n d + n) memory); per chunk of rows a sweep computes on the device::

    A^T = K(Z, X_c)                          (Gram kernel, m x c)
    G = R^-1 A^T,  R = L_uu L_P              (cuBLAS gemm by the triangular R^-1)
    mean_i = a_i . w,  var_i = |g_i|^2       (per-site marginals kernel)
    sites                                     (Power-EP sites kernel)
    P_G += G diag(tau) G^T,  b_G += G nu     (cuBLAS gemm, in the previous q's coordinates)

and only the m x m sums come back to the host, where the inducing-point posterior
``q(v)`` is refactorised by the CPU code itself (``sparse_ep._InducingPosterior``),
so the returned :class:`~fastep.inference.sparse_ep.SparseEPResult` predicts and
differentiates (``sparse_ep_gradient``) exactly like a CPU result.
"""
from __future__ import annotations


import numpy as np

from ..inference.ep import SweepControl, initial_sites
from ..inference.sparse import cholesky_uu
from ..inference.sparse_ep import (CHUNK, SparseEPResult, _chunks, _InducingPosterior,
                                   _symmetrise_lower, _validate)
from . import kernels as ck
from ._backend import get_backend
from ._dense import _site_change
from ._gram import _diag, _gram


def sparse_ep(kernel, Z, X, y, likelihood, alpha=1.0, damping=None, tol=1e-4, max_iter=100,
              site_tau=None, site_nu=None, extra=None, chunk_size=CHUNK, callback=None,
              backend=None):
    """Sparse Power EP with the sweeps on the GPU; arguments and result as
    :func:`fastep.inference.sparse_ep.sparse_ep` (X is copied to the device whole)."""
    be = get_backend(backend)
    xp = be.xp
    adaptive = damping is None
    damping = 1.0 if damping is None else damping
    Xh = np.ascontiguousarray(X, dtype=float)
    Z = _validate(kernel, Z, Xh, y, alpha, damping, tol, max_iter, chunk_size)
    n, m = Xh.shape[0], Z.shape[0]
    y = be.asarray(likelihood.encode_targets(y))
    extra, params = be.site_inputs(likelihood.site_extra(n) if extra is None else extra,
                                   likelihood.params)
    tilted = likelihood._tilted
    clip = bool(likelihood.log_concave)
    L_uu = cholesky_uu(kernel(Z))
    L_uu_d = be.asarray(L_uu)
    Xd, Zd = be.asarray(Xh), be.asarray(Z)

    tau, nu = (be.asarray(a) for a in initial_sites(site_tau, site_nu, n))
    resid, mean, var = xp.empty(n), xp.empty(n), xp.empty(n)
    new_tau, new_nu = xp.empty(n), xp.empty(n)
    site_ev, mu_cav, var_cav = xp.empty(n), xp.empty(n), xp.empty(n)
    counter = xp.zeros(1, dtype=np.int64)

    def accumulate(P_G, b_G, G, t, v):
        b_G += G @ v
        P_G += (G * t[None, :]) @ G.T

    P_G, b_G = xp.zeros((m, m)), xp.zeros(m)
    warm = bool(xp.any(tau != 0.0))
    for c0, c1 in _chunks(n, chunk_size):
        Xc = Xd[c0:c1]
        At = _gram(be, kernel, Zd, Xc)                       # K(Z, X_c), m x c
        V = be.solve_triangular(L_uu_d, At)
        resid[c0:c1] = xp.maximum(_diag(be, kernel, Xc) - xp.sum(V * V, axis=0), 0.0)
        if warm:
            accumulate(P_G, b_G, V, tau[c0:c1], nu[c0:c1])   # the prior's G is V
    q = _InducingPosterior(L_uu, np.eye(m), _symmetrise_lower(be.to_host(P_G)),
                           be.to_host(b_G))

    ctl = SweepControl("sparse EP", damping, adaptive, tol, max_iter, callback)
    while True:
        P_G[...] = 0.0
        b_G[...] = 0.0
        counter[...] = 0
        w_d, R_inv_d = be.asarray(q.w), be.asarray(q.R_inv)
        for c0, c1 in _chunks(n, chunk_size):
            At = _gram(be, kernel, Zd, Xd[c0:c1])
            G = R_inv_d @ At
            sl = slice(c0, c1)
            ck.projection_marginals(At, w_d, G, mean[sl], var[sl])
            ck.power_sites(tilted, y[sl], extra[sl], params, mean[sl], var[sl], resid[sl],
                           tau[sl], nu[sl], alpha, ctl.damping, clip, new_tau[sl], new_nu[sl],
                           site_ev[sl], mu_cav[sl], var_cav[sl], counter)
            accumulate(P_G, b_G, G, new_tau[sl], new_nu[sl])
        skipped = int(counter[0])
        ok = xp.isfinite(site_ev)
        log_ev = q.log_z_global() + float(xp.sum(xp.where(ok, site_ev, 0.0)))
        if ctl.done(log_ev):
            break
        ctl.advance(_site_change(xp, tau, nu, new_tau, new_nu))
        tau, new_tau = new_tau, tau
        nu, new_nu = new_nu, nu
        q = _InducingPosterior(L_uu, q.L_P, _symmetrise_lower(be.to_host(P_G)),
                               be.to_host(b_G))

    mu_cav, var_cav = ctl.finish(ok, mu_cav, var_cav, mean, var, xp)
    host = be.to_host
    return SparseEPResult(mean=host(mean).copy(), var=host(var + resid).copy(),
                          site_tau=host(tau).copy(), site_nu=host(nu).copy(),
                          log_marginal_likelihood=float(log_ev), n_iter=ctl.sweeps,
                          converged=ctl.converged, n_skipped=int(skipped),
                          cavity_mean=host(mu_cav).copy(), cavity_var=host(var_cav + resid).copy(),
                          alpha=float(alpha), inducing_points=Z, history=ctl.history, _q=q)
