"""Nested EP for multiclass GP classification with the multinomial probit likelihood
(Riihimaki, Jylanki & Vehtari 2013, JMLR 14).

C latent functions with independent priors ``f_c ~ GP(0, k)`` (one kernel, shared) at n
points, stacked class by class: the prior covariance is ``blockdiag(K, ..., K)``.  The
sites (:mod:`fastep.likelihoods.multinomial_probit`) have precisions
``T = D - D R P^-1 R^T D`` and shifts ``b = nu - D R P^-1 R^T nu``, ``D = diag(pi)`` (nC),
``R = [I_n; ...; I_n]``, ``P = R^T D R`` (each point's ``1^T pi_i``).  With
``A_c = K^-1 + D_c`` Woodbury's identity gives the posterior from C + 1 Cholesky
factorisations of size n (the paper's O(C n^3))::

    Sigma = A^-1 + E M^-1 E^T,   E_c = A_c^-1 D_c,   M = P - S,   S = sum_c D_c A_c^-1 D_c,
    A_c^-1 = K - V_c^T V_c,      V_c = L_c^-1 D_c^1/2 K,   L_c L_c^T = I + D_c^1/2 K D_c^1/2,

and ``log|I + K T| = sum_c log|L_c L_c^T| + log|M| - sum_i log P_i`` (determinant lemma).
The EP evidence is that of the augmented model (f, u) with its n (C - 1) scalar sites::

    log Z = b^T mu / 2 - log|I + K T| / 2 + sum_i [site terms of point i],

and its gradient at the fixed point is ``1/2 sum_c tr((a_c a_c^T - R_cc) dK/dtheta)`` with
``a = b - T mu`` (= blockdiag(K)^-1 mu) and ``R = T - T Sigma T``, whose class blocks
follow from the same factors (``H_c = D_c A_c^-1 D_c``, ``X_c = H_c - D_c P^-1 S``)::

    R_cc' = T_cc' - [d_cc' H_c - H_c P^-1 D_c' - D_c P^-1 H_c' + D_c P^-1 S P^-1 D_c']
            - X_c M^-1 X_c'^T.

Over 450 lines: one job, nested EP: its sweeps, posterior, evidence and gradient share
the per-class factorisations and are read together.
"""
from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass

import numpy as np
from scipy.linalg import solve_triangular

from scipy.linalg import blas, lapack

from .._numerics import predictive_variance
from .._linalg import cholesky_inplace
from ..backend import resolve
from ..likelihoods import multinomial_probit as mp
from ..exceptions import NotPositiveDefiniteError
from ._anderson import anderson_for
from ._sweep import StepTurn, SweepControl, relative_step
from .ep import ANDERSON, ANDERSON_START

_LOG = logging.getLogger("fastep")


def site_precisions(alpha, beta, y):
    """``(pi, nu)`` (n, C) of the sites in f from the inner sites ``(alpha, beta)``:
    ``pi_c = 1`` and ``nu_c = 0`` at the label c, ``alpha`` and ``-beta`` elsewhere."""
    idx = np.arange(y.size)
    pi, nu = alpha.copy(), -beta
    pi[idx, y], nu[idx, y] = 1.0, 0.0
    return pi, nu


def _sym(xp, lower):
    """The full symmetric matrix from its lower triangle (F-ordered, as BLAS left it)."""
    full = xp.tril(lower)
    full += xp.tril(lower, -1).T
    return full


@dataclass
class NestedPosterior:
    """The factors of the posterior at given sites and what the evidence, the gradient and
    the predictive need (see the module docstring)."""

    pi: np.ndarray          # (n, C)
    P: np.ndarray           # (n,)
    b: np.ndarray           # (n, C)
    H: np.ndarray           # (C, n, n)  D_c A_c^-1 D_c       } arrays of the backend
    S: np.ndarray           # (n, n)                          } that computed them (on
    LM: np.ndarray          # (n, n) lower Cholesky factor    } the GPU with "cuda")
    #                         of M = P - S (F-ordered)
    mean: np.ndarray        # (n, C)
    cov: np.ndarray         # (n, C, C) marginal covariance of f_i
    a: np.ndarray           # (n, C)  blockdiag(K)^-1 mean
    logdet: float           # log|I + K T|

    def on_host(self, backend):
        """This posterior with its n x n factors copied to host memory (for prediction
        and saving; a no-op on the CPU)."""
        return dataclasses.replace(self, H=backend.to_host(self.H),
                                   S=backend.to_host(self.S), LM=backend.to_host(self.LM))


def posterior(K, alpha, beta, y, backend=None, work=None):
    """The posterior of f given the inner sites (``alpha``, ``beta``: (n, C)) on the
    ``backend`` that holds the Gram matrix ``K`` (None: the CPU).  The cubic work, per class
    a Cholesky factorisation and three triangular solves (about 3.3 n^3 flops), runs in
    LAPACK and BLAS (SciPy's on the CPU, other BLAS pools capped; cuSOLVER and cuBLAS on
    the GPU); the per-point site work stays on the host.  ``work``: :func:`buffers` that
    the posterior is made in (an earlier posterior made in them is overwritten), or None
    for new arrays."""
    be = resolve("cpu") if backend is None else backend
    K = be.xp.ascontiguousarray(be.asarray(K), dtype=float)
    with be.threads_for(K.shape[0], one_pool=True):
        return _posterior(be, K, alpha, beta, y, work)


def buffers(n, n_classes, backend=None):
    """The n x n arrays of a dense posterior (:func:`posterior`), for a run of refreshes
    to reuse: ``(B, S, Et, H)``, the class stacks ``(C, n, n)``.  On the CPU a refresh then
    writes into memory it has touched before (at n = 4000, C = 3, first touches of fresh
    arrays cost 1 s of a 6.8 s refresh); B and S are None on a backend whose pooling
    allocator makes fresh arrays free (the GPU's: :meth:`dense_work`)."""
    be = resolve("cpu") if backend is None else backend
    xp = be.xp
    return (*be.dense_work(n), xp.empty((n_classes, n, n)), xp.empty((n_classes, n, n)))


def _posterior(be, K, alpha, beta, y, work=None):
    xp = be.xp
    n, C = alpha.shape
    B, S, Et, H = buffers(n, C, be) if work is None else work
    pi, nu = site_precisions(alpha, beta, y)
    P = pi.sum(1)
    b = nu - pi * (nu.sum(1) / P)[:, None]
    pi_d, b_d = be.asarray(pi), be.asarray(b)
    idx = xp.arange(n)
    # E_c^T = D_c A_c^-1 = D_c^1/2 B_c^-1 D_c^1/2 K, so A_c^-1 = K - K E_c^T.  Each class's
    # n x n arrays are made in place in the storage they keep (on the CPU nothing n x n is
    # allocated or transposed inside the loop: 4 of 10 s at n = 4000, C = 3 went to that):
    # Et[c] is the C-ordered transpose of E_c^T, the F-ordered array that the triangular
    # solves overwrite, and H[c] holds (D_c A_c^-1 D_c)^T, the same symmetric matrix.
    kdiag = xp.diag(K).copy()
    diag_ainv = xp.empty((n, C))
    ainv_b = xp.empty((n, C))
    logdet = -float(np.log(P).sum())
    F = [None] * C                              # E_c^T, F-ordered views of Et on the CPU
    for c in range(C):
        s = xp.sqrt(pi_d[:, c])
        L = be.cholesky(be.build_b(K, s, B), "I + D^1/2 K D^1/2 of nested EP")
        logdet += 2.0 * float(xp.log(xp.diag(L)).sum())
        sk = be.scale_columns(K, s, Et[c]).T      # D^1/2 K (K symmetric), F-ordered
        f = be.solve_lower(L, be.solve_lower(L, sk, overwrite=True), trans=True,
                           overwrite=True)         # B^-1 D^1/2 K
        f *= s[:, None]
        F[c] = f
        xp.multiply(f.T, pi_d[:, c][:, None], out=H[c])
        diag_ainv[:, c] = kdiag - xp.einsum("ij,ij->i", K, f.T)
        ainv_b[:, c] = K @ (b_d[:, c] - f @ b_d[:, c])
        L = None
    S = xp.sum(H, axis=0, out=S)
    M = xp.negative(S, out=B)                   # B of the last class is no longer needed
    M[idx, idx] += be.asarray(P)
    LM = be.cholesky(M, "M = P - S of nested EP")
    del M                                       # (its storage on the CPU; a copy on the GPU)
    logdet += 2.0 * float(xp.log(xp.diag(LM)).sum())
    # mean: A^-1 b + E M^-1 E^T b, E_c = A_c^-1 D_c
    w = be.cho_solve(LM, (pi_d * ainv_b).sum(1))
    mean = ainv_b.copy()
    for c in range(C):
        x = pi_d[:, c] * w
        mean[:, c] += K @ (x - F[c] @ x)
    # marginal blocks: delta diag(A_c^-1) + (G_c^T G_c')_ii, G_c = LM^-1 E_c^T, a column
    # sum per pair of classes (no (n, C, n) copy; 7x faster than a batched matmul at
    # n = 4000, C = 3 on the CPU)
    G = [be.solve_lower(LM, F[c], overwrite=True) for c in range(C)]     # in Et's storage
    F = None
    cov = xp.empty((n, C, C))
    for c in range(C):
        for d in range(c, C):
            cov[:, c, d] = xp.einsum("ij,ij->j", G[c], G[d])
            cov[:, d, c] = cov[:, c, d]
    cov[:, xp.arange(C), xp.arange(C)] += diag_ainv
    mean, cov = be.to_host(mean), be.to_host(cov)
    Tmu = pi * mean - pi * ((pi * mean).sum(1) / P)[:, None]
    return NestedPosterior(pi, P, b, H, S, LM, mean, cov, b - Tmu, logdet)


@dataclass
class SparseNestedPosterior:
    """The posterior of the whitened inducing values ``v = (v_1, ..., v_C)`` (each
    ``v_c ~ N(0, I_m)``, ``f_c = Phi v_c``) at given sites, with the marginals of f, and
    what the evidence and its gradient need (see :func:`sparse_posterior`)."""

    pi: np.ndarray          # (n, C)
    P: np.ndarray           # (n,)
    b: np.ndarray           # (n, C)
    cov_v: np.ndarray       # (C m, C m)  Lambda^-1, class-major blocks
    mean_v: np.ndarray      # (C, m)
    mean: np.ndarray        # (n, C)
    cov: np.ndarray         # (n, C, C) marginal covariance of f_i
    a: np.ndarray           # (n, C)  b - T mean
    logdet: float           # log|I + Phi_C^T T Phi_C| = log|I + K T|

    def on_host(self, backend):
        """Itself: sparse nested EP runs on the CPU."""
        return self


#: Rows per block of the sparse posterior's per-row work (its scratch is C m rows x block).
_SPARSE_BLOCK = 2048


def sparse_posterior(Phi, alpha, beta, y):
    """The posterior at the inner sites (``alpha``, ``beta``: (n, C)) when the prior of
    each latent function is ``f_c = Phi v_c``, ``v_c ~ N(0, I_m)`` (inducing points
    ``Z`` shared by the classes: ``Phi = K_fu L_uu^-T``, so ``Phi Phi^T = K_fu K_uu^-1
    K_uf``, the projected-process prior).  The precision of ``v`` (C m x C m) is::

        Lambda = I + sum_i (I_C (x) phi_i) T_i (I_C (x) phi_i)^T,
        Lambda_cc' = d_cc' (I + Phi^T D_c Phi) - Phi^T diag(pi_c pi_c' / P) Phi,

    its shift ``h_c = Phi^T b_c``; the marginals are ``E f_ic = phi_i^T E v_c`` and
    ``Cov(f_ic, f_ic') = phi_i^T Lambda^-1_cc' phi_i``, and ``log|I + K T| = log|Lambda|``
    (Sylvester), so the evidence is :func:`log_evidence`'s.  O(C^2 n m^2 + C^3 m^3) per
    refresh, against the dense form's O(C n^3)."""
    Phi = np.ascontiguousarray(Phi, dtype=float)
    n, C = alpha.shape
    m = Phi.shape[1]
    pi, nu = site_precisions(alpha, beta, y)
    P = pi.sum(1)
    b = nu - pi * (nu.sum(1) / P)[:, None]
    q = pi / np.sqrt(P)[:, None]
    lam = np.zeros((C * m, C * m), order="F")
    for c in range(C):
        blk = slice(c * m, (c + 1) * m)
        lam[blk, blk] = Phi.T @ (pi[:, c][:, None] * Phi)
    lam[np.diag_indices(C * m)] += 1.0
    for r0 in range(0, n, _SPARSE_BLOCK):      # - sum_i (q_i (x) phi_i)(q_i (x) phi_i)^T
        rows = slice(r0, r0 + _SPARSE_BLOCK)
        om = (q[rows, :, None] * Phi[rows, None, :]).reshape(-1, C * m)
        lam = blas.dsyrk(-1.0, om.T, beta=1.0, c=lam, lower=1, overwrite_c=1)
    L = cholesky_inplace(lam, "the precision of the inducing values of sparse nested EP")
    logdet = 2.0 * float(np.log(np.diag(L)).sum())
    inv, info = lapack.dpotri(L, lower=1, overwrite_c=1)
    if info != 0:
        raise NotPositiveDefiniteError("sparse nested EP: the posterior of the inducing "
                                       "values is numerically singular.")
    cov_v = _sym(np, inv)
    mean_v = (cov_v @ (Phi.T @ b).T.ravel()).reshape(C, m)
    mean = Phi @ mean_v.T
    Tmu = pi * mean - pi * ((pi * mean).sum(1) / P)[:, None]
    return SparseNestedPosterior(pi, P, b, cov_v, mean_v, mean, _projected_cov(Phi, cov_v, C),
                                 b - Tmu, logdet)


def _projected_cov(Phi, cov_v, C):
    """``phi_i^T Lambda^-1_cc' phi_i`` (k, C, C) for every row of ``Phi`` (k, m): the
    blocks c' >= c, by blocks of rows, mirrored."""
    k, m = Phi.shape
    cov = np.empty((k, C, C))
    for r0 in range(0, k, _SPARSE_BLOCK):
        rows = slice(r0, r0 + _SPARSE_BLOCK)
        ph = Phi[rows]
        for c in range(C):
            Y = (ph @ cov_v[c * m:(c + 1) * m, c * m:]).reshape(-1, C - c, m)
            cov[rows, c, c:] = np.einsum("icm,im->ic", Y, ph)
            cov[rows, c + 1:, c] = cov[rows, c, c + 1:]
    return cov


def sparse_feature_gradient(post, Phi):
    """``d log Z / d Phi`` (n, m) at the fixed point: with ``K = Phi Phi^T`` and
    :func:`gradient_weights`' ``W``, ``2 W Phi = sum_c (a_c a_c^T Phi - R_cc Phi)``, where
    ``R = T - T Sigma T`` gives ``R Phi_C = T Phi_C Lambda^-1`` (``Phi_C = I_C (x) Phi``),
    so ``sum_c R_cc Phi = sum_cc' D_cc' Phi Lambda^-1_c'c`` with ``D_cc' = diag(T_i[c,
    c'])`` (one O(C^2 n m^2) pass)."""
    Phi = np.ascontiguousarray(Phi, dtype=float)
    n, C = post.pi.shape
    m = Phi.shape[1]
    pi, P = post.pi, post.P
    grad = post.a @ (post.a.T @ Phi)
    for r0 in range(0, n, _SPARSE_BLOCK):
        rows = slice(r0, r0 + _SPARSE_BLOCK)
        for c in range(C):
            Y = (Phi[rows] @ post.cov_v[c * m:(c + 1) * m]).reshape(-1, C, m)
            dc = -pi[rows] * (pi[rows, c] / P[rows])[:, None]       # D_c'c, c' = 0..C-1
            dc[:, c] += pi[rows, c]
            grad[rows] -= np.einsum("ic,icm->im", dc, Y)
    return grad


def sparse_predict_latent(post, Phi_s, kss):
    """Predictive mean (k, C) and covariance (k, C, C) of f at test points with features
    ``Phi_s = K_*u L_uu^-T`` (k, m) and prior variances ``kss``: the projection's
    ``phi^T Lambda^-1_cc' phi`` plus the prior's variance off the inducing subspace,
    ``kss - abs(phi)^2``, on every class."""
    C = post.mean_v.shape[0]
    mean = Phi_s @ post.mean_v.T
    cov = _projected_cov(Phi_s, post.cov_v, C)
    off = np.maximum(kss - np.einsum("ij,ij->i", Phi_s, Phi_s), 0.0)
    cov[:, np.arange(C), np.arange(C)] += off[:, None]
    return mean, _resolved(cov, kss)          # symmetric by construction (mirrored blocks)


def refresh(K, alpha, beta, y, sparse=False, backend=None, work=None):
    """The posterior at the inner sites: :func:`posterior` of the Gram matrix ``K`` (an
    array of ``backend``), or with ``sparse`` :func:`sparse_posterior` of the features
    ``K = Phi`` (on the CPU)."""
    if sparse:
        return sparse_posterior(K, alpha, beta, y)
    return posterior(K, alpha, beta, y, backend, work)


def log_evidence(post, y, alpha, beta):
    """EP's log evidence at the posterior ``post`` of the sites (alpha, beta)."""
    terms = np.empty(y.size)
    mp.site_terms(post.mean, post.cov, y, alpha, beta, terms)
    return 0.5 * float((post.b * post.mean).sum()) - 0.5 * post.logdet + float(terms.sum())


def gradient_weights(post, backend=None):
    """``W = 1/2 sum_c (a_c a_c^T - R_cc)`` (n, n), an array of the ``backend`` that
    computed ``post`` (None: the CPU): d log Z / d theta = sum(W * dK/dtheta)."""
    be = resolve("cpu") if backend is None else backend
    with be.threads_for(post.S.shape[0], one_pool=True):
        return _gradient_weights(be, post)


def _gradient_weights(be, post):
    xp = be.xp
    n, C = post.pi.shape
    q_host = post.pi / post.P[:, None]
    q = be.asarray(q_host)
    # sum_c X_c M^-1 X_c^T, X_c = H_c - diag(q_c) S (lower triangle, BLAS)
    # X_c made C-ordered, where its row scaling streams, and X_c^T solved in place as its
    # F-ordered transpose (H[c] holds H_c^T: the same symmetric matrix up to rounding)
    W = xp.zeros((n, n), order="F")
    xt = xp.empty((n, n))
    for c in range(C):
        xp.multiply(post.S, q[:, c][:, None], out=xt)
        xp.subtract(post.H[c], xt, out=xt)
        be.add_gram(W, be.solve_lower(post.LM, xt.T, overwrite=True).T)
    xt = None
    W = _sym(xp, W)
    W += post.S                                 # sum_c (T A^-1 T)_cc: sum_c H_c ...
    HQ = post.H[0] * q[:, 0][None, :]           # sum_c H_c diag(q_c), class by class
    for c in range(1, C):
        HQ += post.H[c] * q[:, c][None, :]
    W -= HQ
    W -= HQ.T
    W += post.S * (q @ q.T)                     # ... sum_c diag(q_c) S diag(q_c)
    a = be.asarray(post.a)
    W += a @ a.T                                # sum_c a_c a_c^T
    idx = xp.arange(n)
    W[idx, idx] -= be.asarray((post.pi - post.pi * q_host).sum(1))    # - sum_c T_cc
    W *= 0.5
    return W


def predict_latent(post, Ks, kss):
    """Predictive mean (m, C) and covariance (m, C, C) of f at test points with cross-
    covariance ``Ks`` = K(X, X*) (n, m) and prior variances ``kss`` (m,)."""
    n, C = post.pi.shape
    q = post.pi / post.P[:, None]
    mean = Ks.T @ post.a
    K2 = Ks * Ks
    HK = np.stack([post.H[c] @ Ks for c in range(C)])                 # (C, n, m)
    qK = q.T[:, :, None] * Ks[None]                                   # (C, n, m)
    Y = np.stack([post.S @ qK[c] for c in range(C)])                  # S P^-1 D_c k
    Z = np.stack([solve_triangular(post.LM, HK[c] - Y[c], lower=True, check_finite=False)
                  for c in range(C)])
    # k^T R_cc' k = t1 - t2 - t3
    t1 = -np.einsum("ic,id,im->mcd", post.pi, q, K2, optimize=True)
    t1[:, np.arange(C), np.arange(C)] += (post.pi.T @ K2).T
    t2 = (-np.einsum("cim,dim->mcd", HK, qK, optimize=True)
          - np.einsum("cim,dim->mcd", qK, HK, optimize=True)
          + np.einsum("cim,dim->mcd", qK, Y, optimize=True))
    t2[:, np.arange(C), np.arange(C)] += np.einsum("cim,im->mc", HK, Ks, optimize=True)
    t3 = np.einsum("cim,dim->mcd", Z, Z, optimize=True)
    cov = -(t1 - t2 - t3)
    cov[:, np.arange(C), np.arange(C)] += kss[:, None]
    return mean, _resolved(0.5 * (cov + cov.transpose(0, 2, 1)), kss)


def _resolved(cov, kss):
    """The predictive covariances with eigenvalues that rounding left below the
    resolution of ``prior - explained`` raised to it
    (:func:`fastep._numerics.predictive_variance`'s rule and warning, per eigenvalue)."""
    w, U = np.linalg.eigh(cov)
    fixed = predictive_variance(kss[:, None], w)
    if np.array_equal(fixed, w):
        return cov
    return np.einsum("mij,mj,mkj->mik", U, fixed, U)


@dataclass
class NestedResult:
    """A nested-EP fit: the inner sites, the posterior, log Z and the EP run's record."""

    site_tau: np.ndarray     # alpha (n, C): inner site precisions (warm starts)
    site_nu: np.ndarray      # beta (n, C)
    posterior: NestedPosterior
    log_marginal_likelihood: float
    n_iter: int
    converged: bool
    n_skipped: int = 0


def nested_ep(K, y, n_classes, alpha=None, beta=None, damping=None, tol=1e-6,
              max_iter=200, sparse=False, backend=None):
    """Run nested EP on the Gram matrix ``K`` (n, n) (with ``sparse``: the features ``Phi``
    (n, m) of a prior ``K = Phi Phi^T`` on inducing points, :func:`sparse_posterior`)
    and labels ``y`` (n,) in 0..C-1,
    warm-started from the inner sites ``(alpha, beta)`` (n, C): parallel outer updates of
    every point's sites by :data:`~fastep.likelihoods.multinomial_probit.INNER_SWEEPS`
    inner-EP sweeps from its current ones (the paper's nested schedule), damped and
    stopped as dense EP is (:class:`~fastep.inference._sweep.SweepControl`: log Z and the
    largest relative site change below ``tol``; ``damping`` None is adaptive), and near
    the fixed point accelerated as parallel dense EP is (Anderson, with the history
    carried across ML-II's evaluations inside
    :func:`~fastep.inference._anderson.carry_anderson`).  Dense, ``K`` may be an array of
    the CUDA ``backend``: the posterior's cubic work then runs on the GPU and the sites'
    (O(n C^2) per sweep) on the host."""
    n, C = K.shape[0], int(n_classes)
    y = np.asarray(y, dtype=np.int64)
    alpha = np.zeros((n, C)) if alpha is None else np.array(alpha, dtype=float)
    beta = np.zeros((n, C)) if beta is None else np.array(beta, dtype=float)
    # the dense posteriors of this run in the same memory: each is made once the last
    # is dropped (post = None), and the result's is the last one made
    work = None if sparse else buffers(n, C, backend)
    post = refresh(K, alpha, beta, y, sparse, backend, work)
    log_ev = log_evidence(post, y, alpha, beta)
    warm = bool(np.any(alpha != 0.0) or np.any(beta != 0.0))
    ctl = SweepControl("nested EP", 1.0 if damping is None else float(damping),
                       damping is None, tol, max_iter, min_sweeps=1 if warm else 2)
    turn = StepTurn()
    accel = anderson_for(n * C) if ANDERSON else None
    new_a, new_b = np.empty_like(alpha), np.empty_like(beta)
    while not ctl.done(log_ev):
        mp.update_sites(post.mean, post.cov, y, alpha, beta, ctl.damping, mp.INNER_SWEEPS,
                        new_a, new_b)
        change, cosine = turn(np, alpha.ravel(), beta.ravel(), new_a.ravel(), new_b.ravel())
        used = ctl.damping
        ctl.advance(change, turn=cosine)
        damped = None
        if accel is not None and ctl.change >= ANDERSON_START:
            accel.reset()                      # far from the fixed point: plain steps
        elif accel is not None:
            a, b = accel.step(np, alpha.ravel(), beta.ravel(), new_a.ravel(), new_b.ravel(),
                              used, ctl.damping, np.asarray)
            a = np.maximum(a, 0.0)             # inner sites of a log-concave factor
            if np.all(np.isfinite(a)) and np.all(np.isfinite(b)):
                damped = new_a.copy(), new_b.copy()
                new_a, new_b = a.reshape(n, C), b.reshape(n, C)
                ctl.change = max(ctl.change, float(np.max(np.abs(
                    relative_step(np, alpha.ravel(), beta.ravel(), a, b)))))
            else:
                accel.reset()
        post = None                            # dropped: the next is made in its memory
        try:
            post = refresh(K, new_a, new_b, y, sparse, backend, work)
        except NotPositiveDefiniteError:
            if damped is None:
                raise
            new_a, new_b = damped              # the combined step went too far
            accel.reset()
            post = refresh(K, new_a, new_b, y, sparse, backend, work)
        alpha, beta = new_a.copy(), new_b.copy()
        log_ev = log_evidence(post, y, alpha, beta)
    ctl.warn(0)                                # every inner cavity is proper (alpha >= 0)
    return NestedResult(alpha, beta, post, log_ev, ctl.sweeps, ctl.converged)
