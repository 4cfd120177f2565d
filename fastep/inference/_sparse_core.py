"""The pieces of sparse Power EP that every way of running it shares (see
:mod:`fastep.inference.sparse_ep` for the algorithm): q(v) (:class:`_InducingPosterior`),
one worker's parallel sweep over chunks of rows (:class:`_SweepPart`), the loop
(:func:`drive`), robust EP's step control, and the two streamed passes of the evidence
gradient.  :mod:`fastep.inference.sparse_ep` runs them in this process (threads or a GPU),
:mod:`fastep.inference.cluster` on a Dask cluster's workers.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np
from scipy.linalg import blas, cho_solve, cholesky, solve_triangular

from .._numerics import predictive_variance
from .._checks import is_dask_array
from .._linalg import trmm_lower_nogil
from ..exceptions import NotPositiveDefiniteError
from ._sweep import SweepControl, backtrack, site_change
from .sparse import uu_from_whitened


@dataclass
class SparseEPResult:
    """Output of :func:`sparse_ep` (NumPy arrays, also after a GPU run).

    Attributes
    ----------
    mean, var : (n,) marginals of f at the training inputs (``var`` includes d_i)
    site_tau, site_nu : (n,) site natural parameters on the projections h_i
    log_marginal_likelihood : float
        The Power-EP approximation of log p(y) at the returned sites.
    n_iter, converged, n_skipped, history : as in :class:`~fastep.EPResult`
    alpha : float
        The power of Power EP.
    cavity_mean, cavity_var : (n,) the cavity of f_i (``var`` includes d_i)
    inducing_points : (m, d)
    resid : (n,) d_i = K_ii - Q_ii, the variance of f_i about its projection h_i

    Examples
    --------
    >>> import numpy as np
    >>> from fastep.kernels import RBF
    >>> from fastep.likelihoods import Probit
    >>> from fastep import sparse_ep
    >>> X = np.linspace(-2, 2, 100)[:, None]; y = np.sign(X[:, 0] + 0.01)
    >>> res = sparse_ep(RBF(), X[::10], X, y, Probit())
    >>> mean, var = res.predict_latent(RBF(), np.array([[-1.0], [1.0]]))
    >>> bool(mean[0] < 0 < mean[1]), res.alpha
    (True, 1.0)
    """

    mean: np.ndarray
    var: np.ndarray
    site_tau: np.ndarray
    site_nu: np.ndarray
    log_marginal_likelihood: float
    n_iter: int
    converged: bool
    n_skipped: int
    cavity_mean: np.ndarray
    cavity_var: np.ndarray
    alpha: float
    inducing_points: np.ndarray
    history: list = field(default_factory=list, repr=False)
    resid: np.ndarray = field(default=None, repr=False)
    _q: "_InducingPosterior" = field(default=None, repr=False)
    _backend: object = field(default=None, repr=False)
    _cluster: object = field(default=None, repr=False)

    def predict_latent(self, kernel, X):
        """Latent predictive mean and variance at X (kernel: the one used in the fit); lazy
        dask arrays, computed chunk by chunk on the workers, when X is a dask array."""
        if is_dask_array(X):
            X = X.astype(np.float64).rechunk({1: -1})
            both = X.map_blocks(_predict_block, self._q, kernel, self.inducing_points,
                                chunks=(X.chunks[0], (2,)), dtype=float)
            return both[:, 0], both[:, 1]
        return self._q.predict(kernel, self.inducing_points, X)


def _predict_block(X, q, kernel, Z):
    """Latent mean and variance of one chunk of rows, as two columns (dask map_blocks)."""
    mean, var = q.predict(kernel, Z, X)
    return np.column_stack([mean, var])


def _precision_factor(P):
    """Lower Cholesky factor of a precision of q(v) (or of its update), or the error that
    names the knob."""
    try:
        return cholesky(P, lower=True, check_finite=False)
    except np.linalg.LinAlgError:
        raise NotPositiveDefiniteError(
            "sparse EP: the inducing-point posterior precision is not positive definite "
            "(negative site precisions); use smaller EP steps, e.g. damping=0.5.") from None


def warm_rows(ctx, n, chunk_size, tau, nu, build):
    """A warm start's pass over rows ``0:n`` of ``ctx`` (:func:`sweep_context`), in chunks:
    d_i into ``ctx.resid`` and (``build``) the sums ``V T V^T``, ``V nu`` that make q from
    the given sites (host arrays).  Run over all n rows in this process, or over one
    chunk's rows on a Dask worker."""
    be, xp = ctx.be, ctx.be.xp
    m = ctx.Z.shape[0]
    P_G, b_G = xp.zeros((m, m), order="F"), xp.zeros(m)
    for c0, c1 in _chunks(n, chunk_size):
        Xc = ctx.rows(c0, c1)
        V = be.trmm_lower(ctx.L_uu_inv, _gram_t(be, ctx.kernel, ctx.Z, Xc))
        ctx.resid[c0:c1] = xp.maximum(ctx.kernel.diag(Xc, backend=be)
                                      - xp.einsum("ij,ij->j", V, V), 0.0)
        if build:
            be.accumulate(P_G, b_G, V, tau[c0:c1], nu[c0:c1])
    return be.to_host(P_G), be.to_host(b_G)


def _sum_parts(be, parts):
    """The workers' sums ``P_G``, ``b_G`` added in a fixed order, on the host."""
    return (be.to_host(parts[0].P_G + sum(part.P_G for part in parts[1:])),
            be.to_host(parts[0].b_G + sum(part.b_G for part in parts[1:])))


class _InducingPosterior:
    """q(v) = N(P^-1 b, P^-1) on the host, rebuilt from chunk sums taken in the previous
    q's coordinates.

    With ``G = R^-1 K_uf`` (``R = L_uu L_P`` of the previous q, whose ``L_P`` is passed as
    ``L_prev``), ``V = L_prev G``, so ``P = I + L_prev (G T G^T) L_prev^T`` and
    ``b = L_prev (G nu)``.  Only well-conditioned factors are multiplied; an
    ill-conditioned ``K_uu`` is never inverted on both sides of a sum.
    """

    def __init__(self, L_uu, L_prev, P_G, b_G):
        m = L_uu.shape[0]
        P = np.eye(m) + L_prev @ P_G @ L_prev.T
        self._set(L_uu, _precision_factor(0.5 * (P + P.T)), L_prev @ b_G)

    @classmethod
    def from_factor(cls, L_uu, L_P, b):
        """q from its precision's Cholesky factor ``L_P`` and ``b`` (a saved model)."""
        q = cls.__new__(cls)
        q._set(L_uu, L_P, b)
        return q

    def _set(self, L_uu, L_P, b, R_inv=None):
        m = L_uu.shape[0]
        self.L_uu, self.L_P, self.b = L_uu, L_P, b
        self.beta = solve_triangular(L_P, b, lower=True, check_finite=False)
        self.m = solve_triangular(L_P, self.beta, lower=True, trans="T", check_finite=False)
        self.w = solve_triangular(L_uu, self.m, lower=True, trans="T", check_finite=False)
        # R^-1 = L_P^-1 L_uu^-1 (lower triangular): dtrmm by R^-1 runs about twice as fast
        # as dtrsm by R in OpenBLAS for these shapes (both m^2 c flops)
        if R_inv is None:
            R_inv = solve_triangular(
                L_P, solve_triangular(L_uu, np.eye(m), lower=True, check_finite=False),
                lower=True, check_finite=False)
        self.R_inv = np.asfortranarray(R_inv)
        self.half_logdet = float(np.sum(np.log(np.diag(L_P))))

    def updated(self, dP_G, db_G):
        """q after adding sites whose sums ``dP_G = G dT G^T``, ``db_G = G d nu`` were taken
        in this q's coordinates (``G = R^-1 K_uf``): ``P + L_P dP_G L_P^T =
        L_P (I + dP_G) L_P^T``, so the new factor is ``L_P chol(I + dP_G)`` (m^3, well
        conditioned whenever the new q is proper) and ``b + L_P db_G``."""
        M = _precision_factor(np.eye(self.L_P.shape[0]) + _symmetrise_lower(dP_G))
        q = _InducingPosterior.__new__(_InducingPosterior)
        q._set(self.L_uu, blas.dtrmm(1.0, self.L_P, M, lower=1), self.b + self.L_P @ db_G,
               R_inv=solve_triangular(M, self.R_inv, lower=True, check_finite=False))
        return q

    @classmethod
    def prior(cls, L_uu):
        m = L_uu.shape[0]
        return cls(L_uu, np.eye(m), np.zeros((m, m)), np.zeros(m))

    def log_z_global(self):
        """1/2 b^T P^-1 b - 1/2 log|P|."""
        return 0.5 * float(self.beta @ self.beta) - self.half_logdet

    def predict(self, kernel, Z, X):
        """Latent predictive mean and variance at X (host)."""
        X = np.ascontiguousarray(X, dtype=float)
        At = kernel(Z, X)
        V = solve_triangular(self.L_uu, At, lower=True, check_finite=False)
        G = trmm_lower_nogil(self.R_inv, np.asfortranarray(At))
        mean, var_h = G.T @ self.beta, np.einsum("ij,ij->j", G, G)
        prior = kernel.diag(X)
        var = prior - np.einsum("ij,ij->j", V, V) + var_h
        return mean, predictive_variance(prior, var)


def _chunks(n, size):
    for c0 in range(0, n, size):
        yield c0, min(n, c0 + size)


def _gram_t(be, kernel, Z, Xc):
    """``K(Z, X_c)`` as an F-ordered backend array (the transpose of ``K(X_c, Z)``)."""
    return be.xp.asfortranarray(kernel(Xc, Z, backend=be).T)


def _symmetrise_lower(P):
    return np.tril(P) + np.tril(P, -1).T


def sweep_context(be, kernel, likelihood, Z, L_uu, X, y, extra, alpha, damping, cold,
                  cache=None):
    """What a parallel sweep over the rows of X reads and writes (``y``, ``extra``: the
    likelihood's encoding, checked): the backend's copies of the data and the per-site
    vectors (marginals, cavities, site terms of log Z and d_i).  Built for all n rows in
    this process, or for one block of rows on a Dask worker."""
    xp, n = be.xp, X.shape[0]
    y_d, extra_d, params = be.site_inputs(likelihood, y, extra)
    return SimpleNamespace(
        be=be, kernel=kernel, Z=xp.ascontiguousarray(be.asarray(Z)), rows=be.rows(X), y=y_d,
        extra=extra_d, cache=cache, cold=cold, params=params,
        tilted=likelihood.scalar_tilted, clip=bool(likelihood.log_concave), alpha=float(alpha),
        damping=damping, resid=xp.empty(n), mean=xp.empty(n), var=xp.empty(n),
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
    P_G: np.ndarray = None
    b_G: np.ndarray = None
    turn: float = None


def drive(sites, L_uu, q, warm, control, schedule, robust):
    """The sparse EP loop, written once over where the sites live (``sites``: this
    process's arrays, :class:`_LocalSites`, or a Dask cluster's chunks,
    :class:`fastep.inference.cluster.ClusterSites`), which run the sweeps as a map over
    chunks of rows and a sum of m x m matrices.  Returns ``(q, ctl, log Z, skipped)`` at
    the final sites, whose marginals ``sites`` keeps from the last (evaluation) pass.
    ``control``: the arguments of :class:`~fastep.inference._sweep.SweepControl`."""
    ctl = SweepControl(*control)
    prior = _InducingPosterior.prior(L_uu)
    if warm:
        P_G, b_G = sites.warm_pass(build=q is None)
        if q is None:
            try:
                q = _InducingPosterior(L_uu, prior.L_P, _symmetrise_lower(P_G), b_G)
            except NotPositiveDefiniteError:      # warm start unusable: start cold
                sites.reset()
                q = prior
    q = prior if q is None else q
    at_prior = q is prior
    sequential = schedule == "sequential" and ctl.max_iter > 0
    if sequential:
        try:
            q = sites.sequential_passes(ctl, q, prior=at_prior)
        except NotPositiveDefiniteError:
            # negative site precisions made a partly updated q improper: parallel EP from
            # a cold start instead (d_i is recomputed in its first sweep)
            sites.reset()
            q, at_prior, sequential = prior, True, False
            ctl = SweepControl(*control)
    while True:
        first = ctl.sweeps == 0
        out = sites.sweep(q, prior=first and at_prior, first=first and not sequential,
                          damping=ctl.damping, sums=not sequential)
        log_ev = q.log_z_global() + out.site_ev
        if sequential:                          # the evaluation pass after the last one
            ctl.history.append(log_ev)
            break
        if ctl.done(log_ev):
            break
        ctl.advance(out.change, turn=out.turn)
        sites.adopt()
        P_G = _symmetrise_lower(out.P_G)
        if robust:
            q = _backtrack(q, P_G, out.b_G, sites.shrink, ctl)
        else:
            q = _InducingPosterior(L_uu, q.L_P, P_G, out.b_G)
    sites.keep_marginals(q, out)
    return q, ctl, log_ev, out.skipped


def _backtrack(q, P_G, b_G, shrink, ctl):
    """Robust sparse EP (:func:`fastep.inference._sweep.backtrack`, as in
    :func:`fastep.inference.ep._backtrack`): q at the proposed sites if its precision is
    positive definite, else at a shorter step.  In the current q's whitened coordinates
    the proposal's precision is ``I + L_P P_G L_P^T`` and the old one ``L_P L_P^T``; both,
    and b, are linear in the sites, so a shorter step blends them."""
    L = q.L_P
    P_new, b_new = np.eye(L.shape[0]) + L @ P_G @ L.T, L @ b_G
    P_old = L @ L.T

    def attempt(step):
        P = step * P_new + (1.0 - step) * P_old
        try:
            L_P = _precision_factor(0.5 * (P + P.T))
        except NotPositiveDefiniteError:
            return None
        return _InducingPosterior.from_factor(q.L_uu, L_P, step * b_new + (1.0 - step) * q.b)

    return backtrack(attempt, shrink, ctl,
                     "robust sparse EP: no step of at least {min_step:g} of the proposed site "
                     "update keeps q(u) proper; add jitter to the kernel or check the "
                     "likelihood parameters.")


def _on_backend(be, q, prior=False):
    """What a sweep reads of q, as backend arrays (``prior``: q is the prior)."""
    return SimpleNamespace(R_inv=be.asarray(q.R_inv), beta=be.asarray(q.beta), prior=prior)


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
        self.P_G, self.b_G = xp.zeros((m, m), order="F"), xp.zeros(m)

    def sweep(self, ctx, q, tau, nu, new_tau, new_nu, first, chunks=None, sums=True):
        """Parallel EP over this part's chunks from ``q``.  With ``chunks`` given (a block of
        the chunk-sequential schedule) the new sites are adopted at once and only their
        change enters the sums; ``sums=False`` (an evaluation pass) skips the sums.  Returns
        ``(sites skipped, largest site change)``."""
        be, xp = ctx.be, ctx.be.xp
        self.P_G[...] = 0.0
        self.b_G[...] = 0.0
        skipped, change = 0, 0.0
        for c0, c1 in self.chunks if chunks is None else chunks:
            sl, At = slice(c0, c1), self.buffer[:, : c1 - c0]
            if ctx.cache is not None and not first:
                xp.copyto(At, ctx.cache[sl].T)
            else:
                Xc = ctx.rows(c0, c1)
                with be.compiled():
                    K = ctx.kernel(Xc, ctx.Z, backend=be)
                    kdiag = ctx.kernel.diag(Xc, backend=be)
                xp.copyto(At, K.T)
                if ctx.cache is not None:
                    ctx.cache[sl] = K
            if first and ctx.cold and not q.prior:
                # d_i = K_ii - |V_i|^2 with V = L_uu^-1 K_uf (q has moved off the prior)
                V = be.trmm_lower(ctx.L_uu_inv, xp.array(At, order="F"))
                ctx.resid[sl] = xp.maximum(kdiag - xp.einsum("ij,ij->j", V, V), 0.0)
            G = be.trmm_lower(q.R_inv, At)
            ctx.mean[sl], ctx.var[sl] = be.projection_marginals(G, q.beta)
            if first and ctx.cold and q.prior:
                ctx.resid[sl] = xp.maximum(kdiag - ctx.var[sl], 0.0)
            skipped += be.power_sites(
                ctx.tilted, ctx.y[sl], ctx.extra[sl], ctx.params, ctx.mean[sl], ctx.var[sl],
                ctx.resid[sl], tau[sl], nu[sl], ctx.alpha, ctx.damping, ctx.clip, new_tau[sl],
                new_nu[sl], ctx.site_ev[sl], ctx.mu_cav[sl], ctx.var_cav[sl],
                serial=self.serial)
            if chunks is None:
                if sums:
                    be.accumulate(self.P_G, self.b_G, G, new_tau[sl], new_nu[sl])
                continue
            change = max(change, site_change(xp, tau[sl], nu[sl], new_tau[sl], new_nu[sl]))
            be.accumulate(self.P_G, self.b_G, G, new_tau[sl] - tau[sl], new_nu[sl] - nu[sl])
            tau[sl], nu[sl] = new_tau[sl], new_nu[sl]
        return skipped, change


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


def _gradient_chunk(c, Xc, y, extra, tau, nu, marginals=None):
    """Per chunk of rows: ``V = L_uu^-1 K(Z, X_c)``, ``S V`` (None with ``marginals``),
    the marginal means and the site-term derivatives.  ``marginals``: the chunk's
    ``(mean, var, resid)`` of h_i from the result's closing evaluation pass at the same
    q (they agree with ``V^T m``, ``diag(V^T S V)`` and ``K_ii - |V_i|^2`` to 1e-12),
    which spares the m x m x c product ``S V``."""
    be, xp = c.be, c.be.xp
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


def gradient_first(c, Xc, y, extra, tau, nu, marginals=None):
    """First pass of the gradient over a chunk: ``(V a, V diag(c) V^T, d/dlog lik)``;
    ``marginals`` as in :func:`_gradient_chunk`."""
    be, xp = c.be, c.be.xp
    V, _, _, (g_mu, g_var, _, g_lik) = _gradient_chunk(c, Xc, y, extra, tau, nu, marginals)
    m = V.shape[0]
    Va, U = xp.zeros(m), xp.zeros((m, m), order="F")
    be.accumulate(U, Va, V, g_var, g_mu)     # a rank-c update of U's lower triangle at least
    return Va, U, be.to_host(g_lik.sum(0))


def gradient_second_constants(c, Va, U, d_lik):
    """``r = S V a`` and ``S U`` for the second pass (in ``c``), from the first pass's sums
    (``U``: the sum of the chunks' lower triangles, made symmetric here, once)."""
    U = c.be.asarray(_symmetrise_lower(c.be.to_host(U)))
    c.r, c.SU, c.d_lik = c.S @ Va, c.S @ U, d_lik


def gradient_second(c, Xc, y, extra, tau, nu):
    """Second pass over a chunk: ``G = dlogZ/dV`` contracted with the kernel derivatives:
    ``(d/dtheta, d/dZ (0 without ``c.inputs``), G V^T)``."""
    be = c.be
    V, SV, mean, (g_mu, g_var, g_d, _) = _gradient_chunk(c, Xc, y, extra, tau, nu)
    w = nu - tau * mean
    G = be.gradient_direction(V, SV, _left_product(c.SU, SV), c.mv, c.r,
                              w + g_mu - tau * (V.T @ c.r), w, 2.0 * g_var - tau, tau, g_d,
                              serial=c.serial)
    GVt = G @ V.T
    G_uf = be.trmm_lower(c.L_inv, G, trans=True)    # L_uu^-T G (in G's storage)
    with be.compiled():
        d_theta = (c.kernel.gradient_contract(c.Z_d, G_uf, Xc, backend=be)
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

