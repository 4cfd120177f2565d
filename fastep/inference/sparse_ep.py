"""Sparse (inducing-point) Power EP for any EP likelihood, streamed over the data.

Inducing inputs Z, ``u = f(Z) ~ N(0, K_uu)``, whitened ``v = L_uu^-1 u ~ N(0, I)``.
Each site acts on the projection ``h_i = E[f_i | u] = V_i^T v`` with
``V = L_uu^-1 K_uf``, and ``f_i = h_i + N(0, d_i)``, ``d_i = K_ii - |V_i|^2``
(Qi, Abdel-Gawad & Minka 2010; Bui, Yan & Turner 2017, power alpha in (0, 1]).
The posterior is ``q(v) = N(m, P^-1)``, ``P = I + V T V^T``, ``m = P^-1 V nu``.

A parallel sweep updates every site from the same q (compiled ``prange`` loop, O(m) per
site once the marginals are known), then rebuilds q.  The chunk-sequential schedule (the
default) refreshes q after every block of two chunks instead, from the change of that
block's sites, ``P += V_b dT V_b^T`` as an update of q's Cholesky factor, so each pass
learns from the blocks before it (online / stochastic EP; Li, Hernandez-Lobato & Turner
2015): same fixed point, about half the passes.
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

The driver and its gradient are written once over a backend (:mod:`fastep.backend`):
a sweep is a map over chunks of rows followed by a sum of m x m matrices.  On the CPU
the chunks are shared among threads that call single-threaded BLAS without the GIL; on
the GPU the data, the sites and the per-site vectors stay on the device and only the
m x m sums come back.  ``q(v)`` (m x m) is refactorised on the host by the same code for
every backend.
"""
from __future__ import annotations

import functools
import numbers
from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np
from scipy.linalg import blas, cho_solve, cholesky, solve_triangular

from .._checks import all_finite, float_array
from .._linalg import NotPositiveDefiniteError, trmm_lower_nogil
from ..backend import resolve
from ..likelihoods._base import check_likelihood
from ..backend._base import CHUNK_ROWS
from ._sweep import (SweepControl, backtrack, check_sweep_controls, initial_sites,
                     site_change)
from .sparse import cholesky_uu, uu_from_whitened

CHUNK = CHUNK_ROWS
GRAM_CACHE = 2 ** 31

__all__ = ["sparse_ep", "sparse_ep_gradient", "SparseEPResult", "CHUNK", "GRAM_CACHE"]


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

    def predict_latent(self, kernel, X):
        """Latent predictive mean and variance at X (kernel: the one used in the fit)."""
        return self._q.predict(kernel, self.inducing_points, X)


def _precision_factor(P):
    """Lower Cholesky factor of a precision of q(v) (or of its update), or the error that
    names the knob."""
    try:
        return cholesky(P, lower=True, check_finite=False)
    except np.linalg.LinAlgError:
        raise NotPositiveDefiniteError(
            "sparse EP: the inducing-point posterior precision is not positive definite "
            "(negative site precisions); use smaller EP steps, e.g. damping=0.5.") from None


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
        var = kernel.diag(X) - np.einsum("ij,ij->j", V, V) + var_h
        return mean, np.maximum(var, 0.0)


def _chunks(n, size):
    for c0 in range(0, n, size):
        yield c0, min(n, c0 + size)


def _gram_t(be, kernel, Z, Xc):
    """``K(Z, X_c)`` as an F-ordered backend array (the transpose of ``K(X_c, Z)``)."""
    return be.xp.asfortranarray(kernel(Xc, Z, backend=be).T)


def _symmetrise_lower(P):
    return np.tril(P) + np.tril(P, -1).T


def _validate(Z, X, y, alpha, damping, tol, max_iter, chunk_size, xp=np):
    if not (isinstance(alpha, (int, float)) and 0.0 < alpha <= 1.0):
        raise ValueError(f"alpha must be in (0, 1] (1 = EP with a FITC-style posterior); "
                         f"got {alpha!r}.")
    check_sweep_controls(damping, tol, max_iter)
    if chunk_size is not None and (isinstance(chunk_size, bool)
                                   or not isinstance(chunk_size, numbers.Integral)
                                   or chunk_size < 1):
        raise ValueError(f"chunk_size must be a positive integer; got {chunk_size!r}.")
    if len(X.shape) != 2 or X.shape[0] == 0:
        raise ValueError(f"X must be a non-empty 2-D array (n_samples, n_features); got "
                         f"shape {tuple(X.shape)}.")
    Z = float_array(Z, "Z", 2, ("m", X.shape[1]), column=X.shape[1] == 1,
                    fix="Z holds the inducing inputs, one row per inducing point, with the "
                        "columns of X.")
    if not 1 <= Z.shape[0] <= X.shape[0]:
        raise ValueError(f"Z must hold between 1 and {X.shape[0]} inducing points (the rows "
                         f"of X); got {Z.shape[0]}.")
    shape = np.shape(y)
    if len(shape) == 2 and shape[1] == 1:
        shape = shape[:1]
    if len(shape) != 1 or shape[0] != X.shape[0]:
        raise ValueError(f"y must have one entry per row of X, shape ({X.shape[0]},); got "
                         f"shape {np.shape(y)}.")
    _check_rows_finite(X, xp)
    return Z


def _check_rows_finite(X, xp, block=CHUNK_ROWS * 8):
    """Raise unless every entry of X is finite; X (possibly a memory map or a device
    array of module ``xp``) is read block by block, never copied whole."""
    for start in range(0, X.shape[0], block):
        rows = X[start:start + block]
        if not all_finite(rows, xp):
            bad = ~xp.isfinite(rows)
            i = start + int(np.argwhere(bad.get() if hasattr(bad, "get") else bad)[0, 0])
            raise ValueError(f"X must be finite; row {i} holds NaN or infinity. Remove or "
                             f"impute those rows.")


def _rows_of(X):
    """X itself when it is a 2-d array of numbers with row slices (ndarray, np.memmap,
    h5py dataset, CuPy), else X as a checked float array."""
    if hasattr(X, "shape") and len(X.shape) == 2 and hasattr(X, "dtype"):
        if X.dtype.kind not in "biuf":
            raise ValueError(f"X must hold real numbers; got dtype {X.dtype}.")
        return X
    return float_array(X, "X", 2)


def sparse_ep(kernel, Z, X, y, likelihood, alpha=1.0, damping=None, tol=1e-4, max_iter=100,
              site_tau=None, site_nu=None, extra=None, chunk_size=None, callback=None,
              device="cpu", gram_cache=GRAM_CACHE, schedule="sequential", robust=None):
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
    chunk_size : int, optional
        Rows of X per block; memory is O(chunk_size m + m^2) plus the Gram cache.  None:
        the backend's choice (8192 on the CPU, about 2^25 / m on a GPU, whose sweeps are
        launch-bound with small chunks).
    device : {"cpu", "cuda"}, default="cpu"
        Where the sweeps run (:func:`fastep.backend.resolve`); with "cuda" X is copied
        to the device whole.
    gram_cache : int, default 2 GiB
        Bytes allowed for keeping ``K(X, Z)`` between sweeps (it is fixed during a run;
        recomputing it is about a third of a sweep).  On the CPU it is used when X is an
        in-memory ndarray (not a memmap) and ``8 n m`` fits; 0 streams everything.

    schedule : {"sequential", "parallel"}, default="sequential"
        "parallel": every site is updated from the same q, then q is rebuilt (one refresh
        of q per pass).  "sequential": q is refreshed after every block of two chunks, so
        each pass uses what the earlier blocks learnt (online / stochastic EP style;
        about half the passes at large n); the fixed point, the convergence rule and the
        damping are the same, and the answer does not depend on the number of threads.
        Either way the result ends with an evaluation pass at the final sites
        (``n_iter + 1`` passes over the data in all).
    robust : bool, optional
        Robust EP (default: when the likelihood is not log-concave): a parallel step
        that makes q(u) improper is halved until it is proper, as in :func:`fastep.ep`;
        the chunk-sequential schedule falls back to it when a block's update would make
        q(u) improper.

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
    be = resolve(device, "sparse_ep")
    adaptive = damping is None
    damping = 1.0 if damping is None else damping
    Xv = _rows_of(X)
    Z = _validate(Z, Xv, y, alpha, damping, tol, max_iter, chunk_size,
                  be.xp if hasattr(Xv, "__cuda_array_interface__") else np)
    if schedule not in ("sequential", "parallel"):
        raise ValueError(f"schedule must be 'sequential' or 'parallel'; got {schedule!r}.")
    chunk_size = be.chunk_rows(Z.shape[0]) if chunk_size is None else chunk_size
    with be.threads_for(Z.shape[0]):
        return _sparse_ep(be, kernel, Z, Xv, y, likelihood, alpha, damping, adaptive, tol,
                          max_iter, site_tau, site_nu, extra, chunk_size, callback, gram_cache,
                          schedule=schedule,
                          robust=(not likelihood.log_concave) if robust is None else robust)


def _sparse_ep(be, kernel, Z, Xv, y, likelihood, alpha, damping, adaptive, tol, max_iter,
               site_tau, site_nu, extra, chunk_size, callback, gram_cache=0, q=None,
               schedule="parallel", robust=False):
    """The driver (arguments checked).  With ``q`` given (a saved model's posterior) and
    ``max_iter=0`` it only evaluates: marginals, cavities and log Z at the given sites."""
    xp = be.xp
    n, m = Xv.shape[0], Z.shape[0]
    check_likelihood(likelihood)
    y = likelihood.encode_targets(y)
    extra = likelihood.check_extra(extra, n)
    y_d, extra_d, params = be.site_inputs(likelihood, y, extra)
    L_uu = cholesky_uu(kernel(Z))
    tau, nu = (be.asarray(a) for a in initial_sites(site_tau, site_nu, n))
    new_tau, new_nu = xp.empty(n), xp.empty(n)
    # d_i = K_ii - |V_i|^2: from a cold start it is K_ii - var(h_i) in the first sweep (q is
    # the prior there); a warm start needs one extra pass, which also builds q from the sites
    warm = q is not None or bool(xp.any(tau != 0.0)) or bool(xp.any(nu != 0.0))
    ctx = SimpleNamespace(
        be=be, kernel=kernel, Z=xp.ascontiguousarray(be.asarray(Z)), rows=be.rows(Xv), y=y_d,
        extra=extra_d, cache=be.gram_cache(Xv, n, m, gram_cache), cold=not warm,
        params=params, tilted=likelihood.scalar_tilted, clip=bool(likelihood.log_concave),
        alpha=float(alpha), damping=damping, resid=xp.empty(n), mean=xp.empty(n),
        var=xp.empty(n), site_ev=xp.empty(n), mu_cav=xp.empty(n), var_cav=xp.empty(n))
    n_workers = be.n_workers(n, m, chunk_size)
    parts = [_SweepPart(be, k, n_workers, n, m, chunk_size) for k in range(n_workers)]
    prior = _InducingPosterior.prior(L_uu)
    ctx.L_uu_inv = be.asarray(prior.R_inv)                   # L_uu^-1: the prior's G is V
    q = prior if q is None and not warm else q
    if warm:
        P_G, b_G = xp.zeros((m, m), order="F"), xp.zeros(m)
        for c0, c1 in _chunks(n, chunk_size):
            Xc = ctx.rows(c0, c1)
            V = be.trmm_lower(ctx.L_uu_inv, _gram_t(be, kernel, ctx.Z, Xc))
            ctx.resid[c0:c1] = xp.maximum(kernel.diag(Xc, backend=be)
                                          - xp.einsum("ij,ij->j", V, V), 0.0)
            if q is None:
                be.accumulate(P_G, b_G, V, tau[c0:c1], nu[c0:c1])
        if q is None:
            try:
                q = _InducingPosterior(L_uu, prior.L_P, _symmetrise_lower(be.to_host(P_G)),
                                       be.to_host(b_G))
            except NotPositiveDefiniteError:      # warm start unusable: start cold
                tau, nu, q = xp.zeros(n), xp.zeros(n), prior
    at_prior = q is prior
    ctl = SweepControl("sparse EP", damping, adaptive, tol, max_iter, callback)
    sequential = schedule == "sequential" and max_iter > 0
    if sequential:
        try:
            q = _sequential_passes(ctx, ctl, parts, q, tau, nu, new_tau, new_nu, n,
                                   chunk_size, prior=at_prior)
        except NotPositiveDefiniteError:
            # negative site precisions made a partly updated q improper: parallel EP from
            # a cold start instead (d_i is recomputed in its first sweep)
            tau[...], nu[...] = 0.0, 0.0
            q, at_prior, sequential, ctx.cold = prior, True, False, True
            ctl = SweepControl("sparse EP", damping, adaptive, tol, max_iter, callback)
    while True:
        ctx.damping = ctl.damping
        args = (ctx, _on_backend(be, q, prior=ctl.sweeps == 0 and at_prior), tau, nu,
                new_tau, new_nu, ctl.sweeps == 0 and not sequential)
        skipped = sum(r[0] for r in be.run_all(
            [functools.partial(part.sweep, *args, sums=not sequential) for part in parts]))
        ok = xp.isfinite(ctx.site_ev)
        log_ev = q.log_z_global() + float(xp.sum(ctx.site_ev[ok]))
        if sequential:                          # the evaluation pass after the last one
            ctl.history.append(log_ev)
            break
        if ctl.done(log_ev):
            break
        P_G, b_G = _sum_parts(be, parts)
        ctl.advance(site_change(xp, tau, nu, new_tau, new_nu))
        tau, new_tau = new_tau, tau
        nu, new_nu = new_nu, nu
        if robust:
            q = _backtrack(q, _symmetrise_lower(P_G), b_G, new_tau, new_nu, tau, nu, ctl)
        else:
            q = _InducingPosterior(L_uu, q.L_P, _symmetrise_lower(P_G), b_G)

    mean, var, resid = ctx.mean, ctx.var, ctx.resid
    mu_cav, var_cav = ctl.finish(ok, ctx.mu_cav, ctx.var_cav, mean, var, xp)
    host = be.to_host
    return SparseEPResult(mean=host(mean), var=host(var + resid), site_tau=host(tau),
                          site_nu=host(nu), log_marginal_likelihood=float(log_ev),
                          n_iter=ctl.sweeps, converged=ctl.converged, n_skipped=int(skipped),
                          cavity_mean=host(mu_cav), cavity_var=host(var_cav + resid),
                          alpha=float(alpha), inducing_points=Z, history=ctl.history,
                          resid=host(resid), _q=q,
                          _backend=be)


def _backtrack(q, P_G, b_G, old_tau, old_nu, tau, nu, ctl):
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

    return backtrack(attempt, old_tau, old_nu, tau, nu, ctl,
                     "robust sparse EP: no step of at least {min_step:g} of the proposed site "
                     "update keeps q(u) proper; add jitter to the kernel or check the "
                     "likelihood parameters.")


def _on_backend(be, q, prior=False):
    """What a sweep reads of q, as backend arrays (``prior``: q is the prior)."""
    return SimpleNamespace(R_inv=be.asarray(q.R_inv), beta=be.asarray(q.beta), prior=prior)


# the first pass from the prior takes in blocks of max(FIRST_BLOCK, GROWTH x the rows already
# taken in) rows (chosen by measuring passes to tol at n = 2e5 and 1e6)
FIRST_BLOCK, GROWTH = 16, 0.25


def _blocks(n, chunk_size, growing):
    """Row ranges ``(c0, c1)`` of the blocks of the chunk-sequential schedule: two chunks
    each, whatever the number of workers (the answer does not depend on it); in the first
    pass from the prior (``growing``) a block holds at most GROWTH times the rows already
    taken in, so q has learnt from earlier blocks before a block can overwhelm it (a block
    of parallel updates from a cavity that knows little of the data overshoots)."""
    full, c0 = 2 * chunk_size, 0
    while c0 < n:
        size = min(full, max(FIRST_BLOCK, int(GROWTH * c0))) if growing else full
        yield c0, min(n, c0 + size)
        c0 += size


def _share(c0, c1, n_parts, chunk_size):
    """Rows c0:c1 as ``n_parts`` lists of contiguous ranges of at most ``chunk_size`` rows
    (part k takes ranges k, k + n_parts, ...)."""
    pieces = max(n_parts, -(-(c1 - c0) // chunk_size))
    step = -(-(c1 - c0) // pieces)
    ranges = [(a, min(c1, a + step)) for a in range(c0, c1, step)]
    return [ranges[k::n_parts] for k in range(min(n_parts, len(ranges)))]


def _sequential_passes(ctx, ctl, parts, q, tau, nu, new_tau, new_nu, n, chunk_size, prior):
    """Chunk-sequential EP: the rows are visited in blocks of two chunks; every
    block's sites are updated (damped) from the current q, which is refreshed from their
    change before the next block (rank-``block`` update, :meth:`_InducingPosterior.updated`).
    Each pass is scored like a parallel sweep (largest site change, log Z with every site
    term from the cavity it was updated with); returns q after the last pass.  The fixed
    point is that of parallel EP; the caller ends with an evaluation pass at it."""
    be, xp = ctx.be, ctx.be.xp
    while True:
        ctx.damping = ctl.damping
        first, change = ctl.sweeps == 0, 0.0
        for c0, c1 in _blocks(n, chunk_size, growing=first and prior):
            qd = _on_backend(be, q, prior=prior)
            shares = _share(c0, c1, len(parts), chunk_size)
            used = parts[:len(shares)]
            done = be.run_all([functools.partial(part.sweep, ctx, qd, tau, nu, new_tau, new_nu,
                                                 first, share)
                               for part, share in zip(used, shares)])
            change = max([change] + [r[1] for r in done])
            P_G, b_G = _sum_parts(be, used)
            q, prior = q.updated(P_G, b_G), False
        ok = xp.isfinite(ctx.site_ev)
        ctl.advance(change)
        if ctl.done(q.log_z_global() + float(xp.sum(ctx.site_ev[ok]))):
            # derived factors recomputed from (L_P, b) as a loaded model does, so a saved
            # model evaluates bit for bit the same
            return _InducingPosterior.from_factor(q.L_uu, q.L_P, q.b)


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


def sparse_posterior_from_state(kernel, Z, X, y, likelihood, alpha, site_tau, site_nu, L_P, b,
                                extra=None, chunk_size=CHUNK):
    """The sparse EP result of a saved model: ``q(v)`` from its factor ``L_P`` and ``b``
    exactly as fitted, and one pass over X for the marginals, cavities and log Z at the
    given sites (no sweep).  Host only (a loaded model predicts on the CPU)."""
    be = resolve("cpu")
    Xv = _rows_of(X)
    Z = np.ascontiguousarray(Z, dtype=float)
    L_uu = cholesky_uu(kernel(Z))
    q = _InducingPosterior.from_factor(L_uu, np.asarray(L_P, float), np.asarray(b, float))
    with be.threads_for(Z.shape[0]):
        return _sparse_ep(be, kernel, Z, Xv, y, likelihood, alpha, 1.0, False, 1.0, 0,
                          site_tau, site_nu, extra, chunk_size, None, q=q)


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


def sparse_ep_gradient(result, kernel, X, y, likelihood, extra=None, chunk_size=None):
    """Gradient of ``result.log_marginal_likelihood`` at its (fixed-point) sites.

    At a Power-EP fixed point log Z is stationary in the sites, so its total
    derivative is the partial one with sites held fixed.  Returns
    ``(d/dtheta kernel, d/dZ, d/dlog likelihood params)``.  Two streamed passes on the
    backend that ran EP: the first collects ``V a`` and ``U = V diag(c) V^T`` (a, c:
    derivatives of the site terms in the marginal mean and variance), the second forms
    ``G = dlogZ/dV`` per chunk and contracts it with the kernel derivatives.  The chunks
    of each pass are shared among the backend's workers as in :func:`sparse_ep`.

    Examples
    --------
    >>> import numpy as np
    >>> from fastep.kernels import RBF
    >>> from fastep.likelihoods import Probit
    >>> X = np.linspace(-3, 3, 200)[:, None]; y = np.sign(np.sin(X[:, 0]) + 0.01)
    >>> Z = np.linspace(-3, 3, 8)[:, None]
    >>> res = sparse_ep(RBF(), Z, X, y, Probit(), tol=1e-8)
    >>> d_kernel, d_Z, d_lik = sparse_ep_gradient(res, RBF(), X, y, Probit())
    >>> d_kernel.shape, d_Z.shape, d_lik.shape
    ((2,), (8, 1), (0,))
    """
    be = resolve(result._backend or "cpu")
    xp = be.xp
    q, Z, alpha = result._q, result.inducing_points, result.alpha
    Xv = _rows_of(X)
    if Xv.shape[0] != result.site_tau.size:
        raise ValueError(f"X must hold the {result.site_tau.size} training inputs of the EP "
                         f"result; got shape {tuple(Xv.shape)}.")
    _validate(Z, Xv, y, alpha, 1.0, 1.0, 1, chunk_size,
              be.xp if hasattr(Xv, "__cuda_array_interface__") else np)
    n, m = Xv.shape[0], Z.shape[0]
    chunk_size = be.chunk_rows(m) if chunk_size is None else chunk_size
    y = likelihood.encode_targets(y)
    extra = likelihood.check_extra(extra, n)
    y_d, extra_d, _ = be.site_inputs(likelihood, y, extra)
    tau, nu = be.asarray(result.site_tau), be.asarray(result.site_nu)
    L_uu = q.L_uu
    mv = be.asarray(q.m)
    S = be.asarray(cho_solve((q.L_P, True), np.eye(m), check_finite=False))
    L_inv = be.asarray(np.asfortranarray(solve_triangular(L_uu, np.eye(m), lower=True,
                                                          check_finite=False)))
    Z_d = xp.ascontiguousarray(be.asarray(Z))
    rows = be.rows(Xv)
    chunks = list(_chunks(n, chunk_size))
    n_workers = be.n_workers(n, m, chunk_size)

    def chunk(c0, c1):
        Xc = rows(c0, c1)
        with be.compiled():
            At, kdiag = _gram_t(be, kernel, Z_d, Xc), kernel.diag(Xc, backend=be)
        V = be.trmm_lower(L_inv, At)                      # L_uu^-1 K(Z, X_c)
        mean = V.T @ mv
        SV = S @ V
        var = xp.einsum("ij,ij->j", V, SV)
        resid = xp.maximum(kdiag - xp.einsum("ij,ij->j", V, V), 0.0)
        sl = slice(c0, c1)
        with be.compiled():
            g = _site_derivatives(be, likelihood, y_d[sl], extra_d[sl], mean, var, resid,
                                  tau[sl], nu[sl], alpha)
        return Xc, V, SV, mean, g

    def first_pass(part):
        Va, U, d_lik = xp.zeros(m), xp.zeros((m, m)), np.zeros(likelihood.n_dims)
        for c0, c1 in part:
            _, V, _, _, (g_mu, g_var, _, g_lik) = chunk(c0, c1)
            Va += V @ g_mu
            U += (V * g_var) @ V.T
            d_lik += be.to_host(g_lik.sum(0))
        return Va, U, d_lik

    def second_pass(part):
        d_theta, d_Z, GVt = np.zeros(kernel.n_dims), np.zeros(Z.shape), xp.zeros((m, m))
        for c0, c1 in part:
            Xc, V, SV, mean, (g_mu, g_var, g_d, _) = chunk(c0, c1)
            t, s = tau[c0:c1], nu[c0:c1]
            w = s - t * mean
            G = xp.asfortranarray(
                xp.outer(mv, w + g_mu - t * (V.T @ r)) + xp.outer(r, w)
                + SV * (2.0 * g_var - t) - 2.0 * (SU @ SV) * t - 2.0 * V * g_d)
            GVt += G @ V.T
            G_uf = be.trmm_lower(L_inv, G, trans=True)    # L_uu^-T G
            with be.compiled():
                d_theta += (kernel.gradient_contract(Z_d, G_uf, Xc, backend=be)
                            + kernel.diag_gradient_contract(Xc, g_d, backend=be))
                d_Z += kernel.input_gradient_contract(Z_d, G_uf, Xc, backend=be)
        return d_theta, d_Z, GVt

    def in_parts(work):
        """``sum_k work(chunks k, k + T, ...)`` over the backend's T workers, in order."""
        jobs = [functools.partial(work, chunks[k::n_workers]) for k in range(n_workers)]
        return (sum(parts) for parts in zip(*be.run_all(jobs)))

    with be.threads_for(m):
        Va, U, d_lik = in_parts(first_pass)
        r = S @ Va
        SU = S @ U
        d_theta, d_Z, GVt = in_parts(second_pass)
    G_uu = uu_from_whitened(be.to_host(GVt), L_uu)
    d_theta = d_theta + kernel.gradient_contract(Z, G_uu)
    d_Z = d_Z + kernel.input_gradient_contract(Z, G_uu)
    return d_theta, d_Z, d_lik
