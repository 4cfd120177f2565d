"""Sparse (inducing-point) Power EP for any EP likelihood, streamed over the data.

Inducing inputs Z, ``u = f(Z) ~ N(0, K_uu)``, whitened ``v = L_uu^-1 u ~ N(0, I)``.
Each site acts on the projection ``h_i = E[f_i | u] = V_i^T v`` with
``V = L_uu^-1 K_uf``, and ``f_i = h_i + N(0, d_i)``, ``d_i = K_ii - |V_i|^2``
(Qi, Abdel-Gawad & Minka 2010; Bui, Yan & Turner 2017, power alpha in (0, 1]).
The posterior is ``q(v) = N(m, P^-1)``, ``P = I + V T V^T``, ``m = P^-1 V nu``.

A sweep is parallel EP: every site is updated from the same q (compiled
``prange`` loop, O(m) per site once the marginals are known), then q is rebuilt.
The data are read in chunks of rows; per chunk the work is BLAS-3::

    G = R^-1 K(Z, X_c),  R = L_uu L_P              (compiled Gram, then one dtrmm in place)
    mean(h_i) = G_i^T beta,  var(h_i) = |G_i|^2     (beta = L_P^-1 b)
    P_G += G diag(tau) G^T,  b_G += G nu             (dsyrk / gemv)

and ``P = I + L_P P_G L_P^T``, ``b = L_P b_G`` at the end of the sweep, so memory is
O(chunk m + m^2) plus O(n) site vectors, whatever n is.  ``d_i`` is computed once.

log Z (the Power-EP energy at the current sites, Bui et al. 2017 eq. 19)::

    log Z = 1/2 b^T P^-1 b - 1/2 log|P|
            + (1/alpha) sum_i [log Z_i + 1/2 log(v_-i / v_i) + mu_-i^2/(2 v_-i) - mu_i^2/(2 v_i)]

with ``Z_i = int N(h | mu_-i, v_-i) N(f | h, d_i) p(y_i | f)^alpha``.  At alpha = 1
and Z = X it is dense EP's log Z_EP; with a Gaussian likelihood its fixed point
is the collapsed objective of :mod:`fastep.inference.sparse`.
"""
from __future__ import annotations

import functools
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from types import SimpleNamespace

import numba
import numpy as np
from scipy.linalg import cho_solve, cholesky, solve_triangular

from . import _ep_kernels as kern
from .._linalg import (SMALL_N, NotPositiveDefiniteError, blas_threads_for, syrk_lower_nogil,
                       trmm_lower_nogil)
from .ep import SweepControl, _site_change, check_device, check_sweep_controls, initial_sites
from .sparse import cholesky_uu, uu_from_whitened

CHUNK = 8192
GRAM_CACHE = 2 ** 31


@dataclass
class SparseEPResult:
    """Output of :func:`sparse_ep`.

    Attributes
    ----------
    mean, var : (n,) marginals of f at the training inputs (``var`` includes d_i)
    site_tau, site_nu : (n,) site natural parameters on the projections h_i
    log_marginal_likelihood : float
        The Power-EP approximation of log p(y) at the returned sites.
    n_iter, converged, n_skipped, alpha, history : as in :class:`~fastep.EPResult`
    cavity_mean, cavity_var : (n,) the cavity of f_i (``var`` includes d_i)
    inducing_points : (m, d)
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
    _q: "_InducingPosterior" = field(default=None, repr=False)

    def predict_latent(self, kernel, X):
        """Latent predictive mean and variance at X (kernel: the one used in the fit)."""
        return self._q.predict(kernel, self.inducing_points, X)


class _InducingPosterior:
    """q(v) = N(P^-1 b, P^-1), rebuilt from chunk sums taken in the previous q's coordinates.

    With ``G = R^-1 K_uf`` (``R = L_uu L_P`` of the previous q, whose ``L_P`` is passed as
    ``L_prev``), ``V = L_prev G``, so ``P = I + L_prev (G T G^T) L_prev^T`` and
    ``b = L_prev (G nu)``.  Only well-conditioned factors are multiplied; an
    ill-conditioned ``K_uu`` is never inverted on both sides of a sum.
    """

    def __init__(self, L_uu, L_prev, P_G, b_G):
        m = L_uu.shape[0]
        P = np.eye(m) + L_prev @ P_G @ L_prev.T
        self.L_uu = L_uu
        try:
            self.L_P = cholesky(0.5 * (P + P.T), lower=True, check_finite=False)
        except np.linalg.LinAlgError:
            raise NotPositiveDefiniteError(
                "sparse EP: the inducing-point posterior precision is not positive definite "
                "(negative site precisions); use smaller EP steps, e.g. damping=0.5.") from None
        self.b = L_prev @ b_G
        self.beta = solve_triangular(self.L_P, self.b, lower=True, check_finite=False)
        self.m = solve_triangular(self.L_P, self.beta, lower=True, trans="T", check_finite=False)
        self.w = solve_triangular(L_uu, self.m, lower=True, trans="T", check_finite=False)
        # R^-1 = L_P^-1 L_uu^-1 (lower triangular): dtrmm by R^-1 runs about twice as fast
        # as dtrsm by R in OpenBLAS for these shapes (both m^2 c flops)
        self.R_inv = np.asfortranarray(solve_triangular(
            self.L_P, solve_triangular(L_uu, np.eye(m), lower=True, check_finite=False),
            lower=True, check_finite=False))
        self.half_logdet = float(np.sum(np.log(np.diag(self.L_P))))

    @classmethod
    def prior(cls, L_uu):
        m = L_uu.shape[0]
        return cls(L_uu, np.eye(m), np.zeros((m, m)), np.zeros(m))

    def log_z_global(self):
        """1/2 b^T P^-1 b - 1/2 log|P|."""
        return 0.5 * float(self.beta @ self.beta) - self.half_logdet

    def marginals(self, At):
        """``G = R^-1 K(Z, X_c)`` (in place over ``At``, m x c F order) and the mean
        ``G^T beta`` and variance ``|G_i|^2`` of each h_i."""
        G = trmm_lower_nogil(self.R_inv, At)
        return G, G.T @ self.beta, np.einsum("ij,ij->j", G, G)

    def predict(self, kernel, Z, X):
        X = np.ascontiguousarray(X, dtype=float)
        At = kernel(Z, X)
        V = solve_triangular(self.L_uu, At, lower=True, check_finite=False)
        _, mean, var_h = self.marginals(np.asfortranarray(At))
        var = kernel.diag(X) - np.einsum("ij,ij->j", V, V) + var_h
        return mean, np.maximum(var, 0.0)


def _chunks(n, size):
    for c0 in range(0, n, size):
        yield c0, min(n, c0 + size)


def _read(X, c0, c1):
    """Rows c0:c1 of X as a C-contiguous float array (X may be a memmap or h5py dataset)."""
    return np.ascontiguousarray(X[c0:c1], dtype=float)


def _gram_t(kernel, Z, Xc):
    """``K(Z, X_c)`` as a writeable F-ordered array (the transpose of ``K(X_c, Z)``)."""
    A = kernel(Xc, Z).T
    return A if A.flags.f_contiguous and A.flags.writeable else np.array(A, order="F")


def _accumulate(P, b, G, tau, nu):
    """P += G diag(tau) G^T (lower triangle, dsyrk), b += G nu.  Overwrites G."""
    b += G @ nu
    if np.all(tau >= 0):
        G *= np.sqrt(tau)
        syrk_lower_nogil(1.0, G, P)
        return
    for sign, part in ((1.0, tau > 0), (-1.0, tau < 0)):
        if np.any(part):
            syrk_lower_nogil(sign, G[:, part] * np.sqrt(sign * tau[part]), P)


def _symmetrise_lower(P):
    return np.tril(P) + np.tril(P, -1).T


def _validate(kernel, Z, X, y, alpha, damping, tol, max_iter, chunk_size):
    if not (isinstance(alpha, (int, float)) and 0.0 < alpha <= 1.0):
        raise ValueError(f"alpha must be in (0, 1] (1 = EP with a FITC-style posterior); "
                         f"got {alpha!r}.")
    check_sweep_controls(damping, tol, max_iter)
    if int(chunk_size) != chunk_size or chunk_size < 1:
        raise ValueError(f"chunk_size must be a positive integer; got {chunk_size!r}.")
    Z = np.ascontiguousarray(Z, dtype=float)
    if X.ndim != 2 or Z.ndim != 2 or Z.shape[1] != X.shape[1]:
        raise ValueError(f"inducing points must have shape (m, {X.shape[1]}) to match X; got "
                         f"shape {Z.shape}.")
    if Z.shape[0] > X.shape[0]:
        raise ValueError(f"more inducing points ({Z.shape[0]}) than data points "
                         f"({X.shape[0]}); use at most {X.shape[0]}.")
    shape = np.shape(y)
    if len(shape) != 1 or shape[0] != X.shape[0]:
        raise ValueError(f"y must have one entry per row of X, shape ({X.shape[0]},); got "
                         f"shape {shape}.")
    return Z


def sparse_ep(kernel, Z, X, y, likelihood, alpha=1.0, damping=None, tol=1e-4, max_iter=100,
              site_tau=None, site_nu=None, extra=None, chunk_size=CHUNK, callback=None,
              device="cpu", gram_cache=GRAM_CACHE):
    """Power EP with inducing points Z (see the module docstring).

    Parameters
    ----------
    kernel : fastep kernel
    Z : (m, d) inducing inputs
    X : (n, d) array-like supporting row slices (ndarray, ``np.memmap``, h5py dataset):
        read ``chunk_size`` rows at a time
    y : (n,) targets in the likelihood's encoding
    likelihood : fastep.likelihoods.Likelihood
    alpha : float in (0, 1]
        Power: 1 is EP (FITC-EP), alpha -> 0 approaches the variational (VFE) solution.
    damping, tol, max_iter, site_tau, site_nu, extra, callback :
        as in :func:`fastep.ep` (adaptive damping when ``damping`` is None).
    chunk_size : int
        Rows of X per block; memory is O(chunk_size m + m^2) plus the Gram cache.
    gram_cache : int, default 2 GiB
        Bytes allowed for keeping ``K(X, Z)`` between sweeps (it is fixed during a run;
        recomputing it is about a third of a sweep).  Used when X is an in-memory
        ndarray (not a memmap) and ``8 n m`` fits; 0 streams everything.
    device : {"cpu", "cuda"}, default="cpu"
        "cuda" runs the sweeps on an NVIDIA GPU (:func:`fastep.cuda.sparse_ep`; X is
        copied to the device whole).

    Returns
    -------
    SparseEPResult

    Examples
    --------
    >>> import numpy as np
    >>> from fastep.kernels import RBF
    >>> from fastep.likelihoods import Probit
    >>> X = np.linspace(-3, 3, 500)[:, None]
    >>> y = np.where(np.sin(2 * X[:, 0]) > 0, 1.0, -1.0)
    >>> res = sparse_ep(RBF(4.0, 0.5), np.linspace(-3, 3, 20)[:, None], X, y, Probit())
    >>> bool(res.converged), float(np.mean(np.sign(res.mean) == y))
    (True, 1.0)
    """
    if check_device(device) == "cuda":
        from .. import cuda
        cuda.require()
        return cuda.sparse_ep(kernel, Z, X, y, likelihood, alpha=alpha, damping=damping, tol=tol,
                              max_iter=max_iter, site_tau=site_tau, site_nu=site_nu, extra=extra,
                              chunk_size=chunk_size, callback=callback)
    adaptive = damping is None
    damping = 1.0 if damping is None else damping
    Xv = X if hasattr(X, "shape") and len(X.shape) == 2 else np.asarray(X, dtype=float)
    Z = _validate(kernel, Z, Xv, y, alpha, damping, tol, max_iter, chunk_size)
    n, m = Xv.shape[0], Z.shape[0]
    y = likelihood.encode_targets(y)
    extra = likelihood.site_extra(n) if extra is None else np.ascontiguousarray(extra, float)
    L_uu = cholesky_uu(kernel(Z))
    cache = None
    if type(Xv) is np.ndarray and 8 * n * m <= gram_cache:
        cache = np.empty((n, m))                          # rows K(x_i, Z), filled in sweep 0
    # BLAS calls here are m x chunk blocks: OpenBLAS threads slow them down (measured 1.7x
    # on 2 cores beside Numba's pool), so below m = 1024 they run single-threaded and the
    # chunks of a sweep are shared out over Python threads instead (see _SweepPart)
    n_threads = _n_threads(n, m, chunk_size)
    with blas_threads_for(m):
        return _sparse_ep(kernel, Z, Xv, y, likelihood, alpha, damping, adaptive, tol, max_iter,
                          site_tau, site_nu, extra, chunk_size, callback, n, m, L_uu, cache,
                          n_threads)


def _n_threads(n, m, chunk_size):
    """Python threads sharing the chunks of a streamed pass: numba's thread count while
    BLAS runs single-threaded (m below SMALL_N), else 1 (threaded BLAS does the work)."""
    return max(1, min(numba.get_num_threads() if m < SMALL_N else 1, -(-n // chunk_size)))


# Worker threads of the streamed passes.  One pool for the process (threads are reused,
# so Numba/OpenMP thread teams are not created anew per call), reset in a forked child.
# Compiled Numba kernels that may run in parallel (Gram matrices, contractions, tilted
# moments) are entered by one worker at a time (_COMPILED): Numba's workqueue layer aborts
# on concurrent parallel launches, and each launch already uses every Numba thread.
_POOL = []
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


def _map_chunks(n_threads, chunks, work):
    """``[work(part) for part]`` where part k is chunks k, k + T, ... (T = n_threads), in
    threads; the fixed split and order keep sums reproducible."""
    return _in_threads([functools.partial(work, chunks[k::n_threads])
                        for k in range(n_threads)])


class _SweepPart:
    """One thread's share of a sweep: chunks ``k, k + T, k + 2T, ...`` of the rows, with its
    own Gram buffer and its own sums ``P_G``, ``b_G``.

    Every chunk writes only its own rows of the site arrays; the BLAS-3 work (dtrmm,
    dsyrk) runs without the GIL, so T threads keep T cores busy.  The fixed assignment of
    chunks to parts and the fixed order of the final sum keep results reproducible.
    With T > 1 the site kernel is the serial one (the threads are the parallelism).
    """

    def __init__(self, index, n_threads, n, m, chunk_size):
        self.chunks = list(_chunks(n, chunk_size))[index::n_threads]
        self.kset = kern.select(min(n, chunk_size)) if n_threads == 1 else kern.SERIAL
        self.buffer = np.empty((m, min(n, chunk_size)), order="F")
        self.P_G, self.b_G = np.zeros((m, m), order="F"), np.zeros(m)

    def sweep(self, ctx, q, tau, nu, new_tau, new_nu, first):
        self.P_G[...] = 0.0
        self.b_G[...] = 0.0
        skipped = 0
        for c0, c1 in self.chunks:
            sl, At = slice(c0, c1), self.buffer[:, : c1 - c0]
            if ctx.cache is not None and not first:
                np.copyto(At, ctx.cache[sl].T)
            else:
                Xc = _read(ctx.X, c0, c1)
                with _COMPILED:
                    K = ctx.kernel(Xc, ctx.Z)
                    kdiag = ctx.kernel.diag(Xc)
                np.copyto(At, K.T)
                if ctx.cache is not None:
                    ctx.cache[sl] = K
            G, ctx.mean[sl], ctx.var[sl] = q.marginals(At)
            if first and ctx.cold:
                ctx.resid[sl] = np.maximum(kdiag - ctx.var[sl], 0.0)
            skipped += self.kset.power_sites(
                ctx.tilted, ctx.y[sl], ctx.extra[sl], ctx.params, ctx.mean[sl], ctx.var[sl],
                ctx.resid[sl], tau[sl], nu[sl], ctx.alpha, ctx.damping, ctx.clip, new_tau[sl],
                new_nu[sl], ctx.site_ev[sl], ctx.mu_cav[sl], ctx.var_cav[sl])
            _accumulate(self.P_G, self.b_G, G, new_tau[sl], new_nu[sl])
        return skipped


def _sparse_ep(kernel, Z, Xv, y, likelihood, alpha, damping, adaptive, tol, max_iter, site_tau,
               site_nu, extra, chunk_size, callback, n, m, L_uu, cache, n_threads):
    tau, nu = initial_sites(site_tau, site_nu, n)
    new_tau, new_nu = np.empty(n), np.empty(n)
    # d_i = K_ii - |V_i|^2: from a cold start it is K_ii - var(h_i) in the first sweep (q is
    # the prior there); a warm start needs one extra pass, which also builds q from the sites
    warm = bool(np.any(tau) or np.any(nu))
    ctx = SimpleNamespace(
        kernel=kernel, Z=Z, X=Xv, y=y, extra=extra, cache=cache, cold=not warm,
        params=likelihood.params, tilted=likelihood._tilted, clip=bool(likelihood.log_concave),
        alpha=float(alpha), damping=damping, resid=np.empty(n), mean=np.empty(n),
        var=np.empty(n), site_ev=np.empty(n), mu_cav=np.empty(n), var_cav=np.empty(n))
    parts = [_SweepPart(k, n_threads, n, m, chunk_size) for k in range(n_threads)]
    q = _InducingPosterior.prior(L_uu)
    if warm:
        P_G, b_G = np.zeros((m, m), order="F"), np.zeros(m)
        for c0, c1 in _chunks(n, chunk_size):
            Xc = _read(Xv, c0, c1)
            V, _, var0 = q.marginals(_gram_t(kernel, Z, Xc))   # the prior's G is V
            ctx.resid[c0:c1] = np.maximum(kernel.diag(Xc) - var0, 0.0)
            _accumulate(P_G, b_G, V, tau[c0:c1], nu[c0:c1])
        q = _InducingPosterior(L_uu, q.L_P, _symmetrise_lower(P_G), b_G)

    ctl = SweepControl("sparse EP", damping, adaptive, tol, max_iter, callback)
    while True:
        ctx.damping = ctl.damping
        args = (ctx, q, tau, nu, new_tau, new_nu, ctl.sweeps == 0)
        skipped = sum(_in_threads([functools.partial(part.sweep, *args) for part in parts]))
        P_G = parts[0].P_G + sum(part.P_G for part in parts[1:])
        b_G = parts[0].b_G + sum(part.b_G for part in parts[1:])
        ok = np.isfinite(ctx.site_ev)
        log_ev = q.log_z_global() + float(np.sum(ctx.site_ev[ok]))
        if ctl.done(log_ev):
            break
        ctl.advance(_site_change(tau, nu, new_tau, new_nu))
        tau, new_tau = new_tau, tau
        nu, new_nu = new_nu, nu
        q = _InducingPosterior(L_uu, q.L_P, _symmetrise_lower(P_G), b_G)

    mean, var, resid = ctx.mean, ctx.var, ctx.resid
    mu_cav, var_cav = ctl.finish(ok, ctx.mu_cav, ctx.var_cav, mean, var)
    return SparseEPResult(mean=mean, var=var + resid, site_tau=tau, site_nu=nu,
                          log_marginal_likelihood=float(log_ev), n_iter=ctl.sweeps,
                          converged=ctl.converged, n_skipped=int(skipped), cavity_mean=mu_cav,
                          cavity_var=var_cav + resid, alpha=float(alpha), inducing_points=Z,
                          history=ctl.history, _q=q)


def _site_derivatives(lik, y, extra, mean, var, resid, tau, nu, alpha):
    """d psi_i / d(mu_i, v_i, d_i) for the site terms psi_i of log Z (module docstring),
    and d psi_i / d log(likelihood params); zero for sites with an improper cavity."""
    sc = 1.0 - alpha * tau * var                     # s of the power_sites kernel
    ok = sc > 0
    sc = np.where(ok, sc, 1.0)
    vc = var / sc
    mc = (mean - alpha * nu * var) / sc
    _, d1, d2 = lik.tilted(y, mc, vc + resid, alpha, extra=extra)
    e = 0.5 * (d2 + d1 * d1)                         # d log Z_i / d var (Gaussian convolution)
    quad = alpha * (tau * mean * mean - 2.0 * nu * mean) + alpha * alpha * nu * nu * var
    g_mu = (d1 + alpha * (tau * mean - nu)) / sc
    g_var = ((d1 * alpha * (tau * mean - nu) + e) / (sc * sc) + 0.5 * alpha * tau / sc
             + 0.5 * (alpha * alpha * nu * nu * sc + alpha * tau * quad) / (sc * sc))
    g_lik = (lik.tilted_dparams(y, mc, vc + resid, extra, alpha) if lik.n_dims
             else np.zeros((y.size, 0)))
    z = np.where(ok, 1.0 / alpha, 0.0)
    return g_mu * z, g_var * z, e * z, g_lik * z[:, None]


def sparse_ep_gradient(result, kernel, X, y, likelihood, extra=None, chunk_size=CHUNK):
    """Gradient of ``result.log_marginal_likelihood`` at its (fixed-point) sites.

    At a Power-EP fixed point log Z is stationary in the sites, so its total
    derivative is the partial one with sites held fixed.  Returns
    ``(d/dtheta kernel, d/dZ, d/dlog likelihood params)``.  Two streamed passes:
    the first collects ``V a`` and ``U = V diag(c) V^T`` (a, c: derivatives of the
    site terms in the marginal mean and variance), the second forms
    ``G = dlogZ/dV`` per chunk and contracts it with the kernel derivatives.  The
    chunks of each pass are shared out over threads as in :func:`sparse_ep`.
    """
    q, Z, alpha = result._q, result.inducing_points, result.alpha
    Xv = X if hasattr(X, "shape") and len(X.shape) == 2 else np.asarray(X, dtype=float)
    n, m = Xv.shape[0], Z.shape[0]
    y = likelihood.encode_targets(y)
    extra = likelihood.site_extra(n) if extra is None else np.ascontiguousarray(extra, float)
    tau, nu = result.site_tau, result.site_nu
    L_uu, mv = q.L_uu, q.m
    S = cho_solve((q.L_P, True), np.eye(m), check_finite=False)
    L_inv = np.asfortranarray(solve_triangular(L_uu, np.eye(m), lower=True, check_finite=False))
    chunks = list(_chunks(n, chunk_size))
    n_threads = _n_threads(n, m, chunk_size)

    def chunk(c0, c1):
        Xc = _read(Xv, c0, c1)
        with _COMPILED:
            At, kdiag = _gram_t(kernel, Z, Xc), kernel.diag(Xc)
        V = trmm_lower_nogil(L_inv, At)                   # L_uu^-1 K(Z, X_c)
        mean = V.T @ mv
        SV = S @ V
        var = np.einsum("ij,ij->j", V, SV)
        resid = np.maximum(kdiag - np.einsum("ij,ij->j", V, V), 0.0)
        sl = slice(c0, c1)
        with _COMPILED:
            g = _site_derivatives(likelihood, y[sl], extra[sl], mean, var, resid, tau[sl],
                                  nu[sl], alpha)
        return Xc, V, SV, mean, g

    def first_pass(part):
        Va, U, d_lik = np.zeros(m), np.zeros((m, m)), np.zeros(likelihood.n_dims)
        for c0, c1 in part:
            _, V, _, _, (g_mu, g_var, _, g_lik) = chunk(c0, c1)
            Va += V @ g_mu
            U += (V * g_var) @ V.T
            d_lik += g_lik.sum(0)
        return Va, U, d_lik

    def second_pass(part):
        d_theta, d_Z, GVt = np.zeros(kernel.n_dims), np.zeros(Z.shape), np.zeros((m, m))
        for c0, c1 in part:
            Xc, V, SV, mean, (g_mu, g_var, g_d, _) = chunk(c0, c1)
            t, s = tau[c0:c1], nu[c0:c1]
            w = s - t * mean
            G = np.asfortranarray(
                np.outer(mv, w + g_mu - t * (V.T @ r)) + np.outer(r, w)
                + SV * (2.0 * g_var - t) - 2.0 * (SU @ SV) * t - 2.0 * V * g_d)
            GVt += G @ V.T
            G_uf = trmm_lower_nogil(L_inv, G, trans=True)   # L_uu^-T G
            with _COMPILED:
                d_theta += (kernel.gradient_contract(Z, G_uf, Xc)
                            + kernel.diag_gradient_contract(Xc, g_d))
                d_Z += kernel.input_gradient_contract(Z, G_uf, Xc)
        return d_theta, d_Z, GVt

    with blas_threads_for(m):
        Va, U, d_lik = (sum(parts) for parts in zip(*_map_chunks(n_threads, chunks, first_pass)))
        r = S @ Va
        SU = S @ U
        d_theta, d_Z, GVt = (sum(parts) for parts in
                             zip(*_map_chunks(n_threads, chunks, second_pass)))
    G_uu = uu_from_whitened(GVt, L_uu)
    d_theta = d_theta + kernel.gradient_contract(Z, G_uu)
    d_Z = d_Z + kernel.input_gradient_contract(Z, G_uu)
    return d_theta, d_Z, d_lik
