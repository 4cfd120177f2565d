"""The evidence gradient of sparse Power EP as two streamed passes over chunks of rows
(:func:`fastep.inference.sparse_ep.sparse_ep_gradient`; on a Dask cluster, the same
passes as maps over its chunks).  After a chunk-sequential run in ML-II the first pass
was taken in EP's closing pass (:func:`~fastep.inference.sparse_ep._sweep.gradient_sums`),
and only the second runs here."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
from scipy.linalg import cho_solve, solve_triangular

from ..inducing import uu_from_whitened
from ._posterior import _symmetrise_lower
from ._sweep import _gram_t, _site_derivatives


def _add_all(parts):
    """The element-wise sum of tuples of arrays, in order."""
    total = None
    for part in parts:
        total = list(part) if total is None else [a + b for a, b in zip(total, part)]
    return total


def gradient_constants(be, result, kernel, likelihood, inputs=True, serial=True):
    """What both passes of :func:`sparse_ep_gradient` read (backend arrays of m or m x m
    numbers): ``m`` and ``S = P^-1`` of q(v), ``L_uu^-1``, Z; whether d/dZ is wanted
    (``inputs``) and whether the passes run in worker threads (``serial`` loops)."""
    q, Z = result._q, result.inducing_points
    m = Z.shape[0]
    S = cho_solve((q.L_P, True), np.eye(m), check_finite=False)
    L_inv = np.asfortranarray(solve_triangular(q.L_uu, np.eye(m), lower=True,
                                               check_finite=False))
    return SimpleNamespace(be=be, kernel=kernel, likelihood=likelihood, alpha=result.alpha,
                           L_uu=q.L_uu, Z=Z, Z_d=be.xp.ascontiguousarray(be.asarray(Z)),
                           mv=be.asarray(q.m), S=be.asarray(S), L_inv=be.asarray(L_inv),
                           inputs=bool(inputs), serial=bool(serial))


def _gradient_chunk(c, Xc, y, extra, tau, nu, marginals=None, gram=None):
    """Per chunk of rows: ``V = L_uu^-1 K(Z, X_c)``, ``S V`` (None with ``marginals``),
    the marginal means and the site-term derivatives.  ``marginals``: the chunk's
    ``(mean, var, resid)`` of h_i from the result's closing evaluation pass at the same
    q (they agree with ``V^T m``, ``diag(V^T S V)`` and ``K_ii - |V_i|^2`` to 1e-12),
    which spares the m x m x c product ``S V``; ``gram``: the chunk's ``K(X_c, Z)`` as
    the EP run kept it (else computed here)."""
    be, xp = c.be, c.be.xp
    if gram is not None:
        At = xp.array(gram.T, order="F")
        if marginals is None:
            with be.compiled():
                kdiag = c.kernel.diag(Xc, backend=be)
    else:
        with be.compiled():
            At, kdiag = _gram_t(be, c.kernel, c.Z_d, Xc), c.kernel.diag(Xc, backend=be)
    V = be.trmm_lower(c.L_inv, At)
    if marginals is None:
        mean = V.T @ c.mv
        SV = _left_product(c.S, V)
        var = xp.einsum("ij,ij->j", V, SV)
        resid = xp.maximum(kdiag - xp.einsum("ij,ij->j", V, V), 0.0)
    else:
        (mean, var, resid), SV = marginals, None
    with be.compiled():
        g = _site_derivatives(be, c.likelihood, y, extra, mean, var, resid, tau, nu, c.alpha)
    return V, SV, mean, g


def _left_product(A, V):
    """``A V`` for an m x m A and an F-ordered m x c V, F-ordered (as ``(V^T A^T)^T``), so
    that the chunk's m x c arrays share one layout."""
    return (V.T @ A.T).T


def gradient_first(c, Xc, y, extra, tau, nu, marginals=None, gram=None):
    """First pass of the gradient over a chunk: ``(V a, V diag(c) V^T, d/dlog lik)``;
    ``marginals`` and ``gram`` as in :func:`_gradient_chunk`."""
    be, xp = c.be, c.be.xp
    V, _, _, (g_mu, g_var, _, g_lik) = _gradient_chunk(c, Xc, y, extra, tau, nu, marginals,
                                                       gram)
    m = V.shape[0]
    Va, U = xp.zeros(m), xp.zeros((m, m), order="F")
    be.accumulate(U, Va, V, g_var, g_mu)     # a rank-c update of U's lower triangle at least
    return Va, U, be.to_host(g_lik.sum(0))


def gradient_second_constants(c, Va, U, d_lik):
    """``r = S V a`` and ``S U`` for the second pass (in ``c``), from the first pass's sums
    (``U``: the sum of the chunks' lower triangles, made symmetric here, once)."""
    U = c.be.asarray(_symmetrise_lower(c.be.to_host(U)))
    c.r, c.SU, c.d_lik = c.S @ Va, c.S @ U, d_lik


def gradient_second(c, Xc, y, extra, tau, nu, gram=None):
    """Second pass over a chunk: ``G = dlogZ/dV`` contracted with the kernel derivatives:
    ``(d/dtheta, d/dZ (0 without ``c.inputs``), G V^T)``; ``gram`` as in
    :func:`_gradient_chunk`."""
    be = c.be
    V, SV, mean, (g_mu, g_var, g_d, _) = _gradient_chunk(c, Xc, y, extra, tau, nu, gram=gram)
    w = nu - tau * mean
    G = be.gradient_direction(V, SV, _left_product(c.SU, SV), c.mv, c.r,
                              w + g_mu - tau * (V.T @ c.r), w, 2.0 * g_var - tau, tau, g_d,
                              serial=c.serial)
    GVt = G @ V.T
    G_uf = be.trmm_lower(c.L_inv, G, trans=True)    # L_uu^-T G (in G's storage)
    with be.compiled():
        # with the kept K(X_c, Z), a stationary kernel contracts without its exponentials
        d_theta = (c.kernel.gradient_contract(c.Z_d, G_uf, Xc, backend=be,
                                              gram=None if gram is None else gram.T)
                   + c.kernel.diag_gradient_contract(Xc, g_d, backend=be))
        d_Z = (c.kernel.input_gradient_contract(c.Z_d, G_uf, Xc, backend=be)
               if c.inputs else 0.0)
    return d_theta, d_Z, GVt


def gradient_finish(c, d_theta, d_Z, GVt):
    """The gradient from the second pass's sums and the m x m terms of K_uu."""
    G_uu = uu_from_whitened(c.be.to_host(GVt), c.L_uu)
    d_theta = d_theta + c.kernel.gradient_contract(c.Z, G_uu)
    d_Z = d_Z + c.kernel.input_gradient_contract(c.Z, G_uu) if c.inputs else None
    return d_theta, d_Z, c.d_lik
