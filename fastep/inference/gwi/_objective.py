"""GWI's variational measures in whitened coordinates and its objective (expected
log-likelihood plus W2), with analytic gradients (see :mod:`fastep.inference.gwi`)."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.linalg import cho_solve, cholesky, solve_triangular

from ..._linalg import single_threaded_blas
from ...backend import resolve
from ...exceptions import NotPositiveDefiniteError
from ...likelihoods.robustmax import check_moments
from ._w2 import _cross_term, sym_sqrt


JITTER = 1e-6            # relative to the mean prior variance at the inducing inputs


@dataclass
class GWIFactors:
    """Matrices of a set of inputs that no variational parameter changes.

    ``V = k(X, Z) C^-T`` (row i is the whitened ``v(x_i)``), ``kxx = k(x, x)`` and
    ``resid = kxx - |v(x)|^2``, the Nystrom residual variance (> 0).
    """

    V: np.ndarray
    kxx: np.ndarray
    resid: np.ndarray


def inducing_cholesky(kernel, Z):
    """``C`` with ``C C^T = K_ZZ + delta I``, ``delta = JITTER * mean(diag K_ZZ)``.

    Computed with single-threaded BLAS/LAPACK whatever the caller's thread limits:
    threaded OpenBLAS ``dpotrf`` splits the work differently and so rounds differently
    (2e-14 apart at M = 200), and ``C`` must be the same bits in ``fit`` (which runs
    single-threaded) and in :func:`fastep.load_model` (which recomputes it from the saved
    kernel and inducing inputs), so that a loaded model predicts exactly as the fitted
    one did.  It is one O(M^3) factorisation per fit or load.
    """
    with single_threaded_blas():
        K = kernel(Z)
        delta = JITTER * max(float(np.mean(np.diag(K))), 1e-300)
        try:
            return cholesky(K + delta * np.eye(K.shape[0]), lower=True, check_finite=False)
        except np.linalg.LinAlgError as exc:
            raise NotPositiveDefiniteError(
                f"The kernel {kernel!r} is not positive definite on the inducing inputs even "
                f"with jitter {delta:.3g}; check the kernel's parameters or use fewer "
                f"inducing points (n_inducing).") from exc


def gwi_factors(kernel, X, Z, C):
    """:class:`GWIFactors` of inputs ``X`` (n, d), inducing inputs ``Z`` (M, d) and
    ``C`` from :func:`inducing_cholesky`."""
    V = solve_triangular(C, kernel(Z, X), lower=True, check_finite=False).T
    kxx = np.asarray(kernel.diag(X), dtype=float)
    # floor relative to the largest prior variance: a kernel that vanishes at a point
    # (Linear at the origin) must not leave a variance that underflows there
    resid = np.maximum(kxx - np.einsum("ij,ij->i", V, V),
                       1e-12 * max(float(np.max(kxx, initial=0.0)), 1e-280))
    return GWIFactors(V=np.ascontiguousarray(V), kxx=kxx, resid=resid)


@dataclass
class GWIParams:
    """Whitened variational parameters of the J measures: ``a`` (J, M), ``L`` (J, M, M)
    lower triangular, and for a linear mean term ``W`` (J, d) and ``b`` (J,) (else None)."""

    a: np.ndarray
    L: np.ndarray
    W: np.ndarray | None = None
    b: np.ndarray | None = None

    @property
    def shape(self):
        J, M = self.a.shape
        return J, M, (None if self.W is None else self.W.shape[1])

    def pack(self):
        """Flat parameter vector: a, the lower triangles of L, then W and b."""
        J, M, _ = self.shape
        rows, cols = np.tril_indices(M)
        parts = [self.a.ravel(), self.L[:, rows, cols].ravel()]
        if self.W is not None:
            parts += [self.W.ravel(), self.b]
        return np.concatenate(parts)

    @classmethod
    def unpack(cls, theta, J, M, d=None):
        """Inverse of :meth:`pack` (``d`` = number of features if there is a linear term)."""
        rows, cols = np.tril_indices(M)
        k = J * M
        a = theta[:k].reshape(J, M)
        L = np.zeros((J, M, M))
        L[:, rows, cols] = theta[k:k + J * rows.size].reshape(J, rows.size)
        k += J * rows.size
        if d is None:
            return cls(a, L)
        W = theta[k:k + J * d].reshape(J, d)
        return cls(a, L, W, theta[k + J * d:k + J * d + J].copy())


def variational_moments(params, V, resid, X=None):
    """Means ``m_j(x)`` and variances ``r_j(x, x)`` from whitened features ``V`` (n, M).

    Returns ``(mean (n, J), var (n, J), U (J, n, M))`` with ``U_j = V L_j``, so
    ``var_j = resid + |U_j|^2`` row-wise.
    """
    mean = V @ params.a.T
    if params.W is not None:
        mean += X @ params.W.T + params.b
    U = np.matmul(V[None, :, :], params.L)
    var = resid[:, None] + np.einsum("jnm,jnm->nj", U, U)
    return mean, var, U


@dataclass
class Subsample:
    """The N_S inputs of the cross term: ``K_sqrt = k(X_S, X_S)^1/2``, the Nystrom
    residual covariance ``resid = k(X_S, X_S) - V_S V_S^T`` and the whitened ``V_S``."""

    K_sqrt: np.ndarray
    resid: np.ndarray
    V: np.ndarray


def subsample(kernel, X, factors, idx):
    """:class:`Subsample` for the training rows ``idx``."""
    K = kernel(X[idx])
    V = factors.V[idx]
    return Subsample(K_sqrt=sym_sqrt(K), resid=K - V @ V.T, V=V)


def prob_largest_grad(likelihood, mean, var, y, device="cpu"):
    """``(S, dS/dmean, dS/dvar)`` of the robust-max S(x_i, y_i), computed on the backend of
    ``device`` (the likelihood's scalar Gauss-Hermite code, compiled for that target)."""
    mean, var = check_moments(mean, var, likelihood.n_classes)
    y = likelihood.check_labels(y, mean.shape[0])
    return resolve(device, dense_algebra=False).prob_largest_grad(mean, var, y,
                                                                  *likelihood.nodes)


def predict_proba(likelihood, mean, var, device="cpu"):
    """Robust-max class probabilities (``likelihood.predict_proba``) with S on the backend
    of ``device``."""
    mean, var = check_moments(mean, var, likelihood.n_classes)
    return likelihood.proba_from_prob(resolve(device, dense_algebra=False).prob_largest(
        mean, var, *likelihood.nodes))


def gwi_objective(params, factors, sub, X, y, likelihood, prior_mean=0.0, squared=True,
                  rows=None, scale=1.0, device="cpu"):
    """Objective (see module doc), its gradient (a :class:`GWIParams`) and its parts.

    ``rows`` selects a minibatch of the training rows (default all); the likelihood sum
    is multiplied by ``scale`` (N / batch size for an unbiased minibatch estimate) and
    the W2 averages are taken over the batch.  ``device`` (or a backend) says where the
    robust-max Gauss-Hermite products run.

    Returns ``(value, grad, parts)`` with ``parts = {"nell": ..., "w2": array (J,)}``.
    """
    V, resid, kxx = factors.V, factors.resid, factors.kxx
    if rows is not None:
        V, resid, kxx, y = V[rows], resid[rows], kxx[rows], y[rows]
        X = None if X is None else X[rows]
    n = V.shape[0]
    J = params.a.shape[0]
    mean, var, U = variational_moments(params, V, resid, X)
    ell, g_m, g_v = likelihood.expected_log_lik_from_prob(
        *prob_largest_grad(likelihood, mean, var, y, device), return_grad=True)
    nell = -scale * ell
    g_m *= -scale
    g_v *= -scale

    # W2^2 per class, with its gradient pieces
    diff = mean - prior_mean
    U_s = np.matmul(sub.V[None, :, :], params.L)                   # (J, N_S, M)
    n_s = sub.V.shape[0]
    w2 = np.empty(J)
    dR = np.empty((J, n_s, n_s))
    for j in range(J):
        cross, dcross = _cross_term(sub.K_sqrt, sub.resid + U_s[j] @ U_s[j].T)
        w2[j] = diff[:, j] @ diff[:, j] / n + kxx.mean() + var[:, j].mean() - 2.0 * cross / n_s
        dR[j] = -2.0 * dcross / n_s
    if squared:
        reg, coef = float(w2.sum()), 1.0
    else:
        total = max(float(w2.sum()), 1e-300)
        reg, coef = math.sqrt(total), 0.5 / math.sqrt(total)
    g_m += coef * 2.0 * diff / n
    g_v += coef / n

    # chain rule to the parameters
    g_a = g_m.T @ V
    # var_j = resid + rows of |V L_j|^2: dL_j = 2 V^T diag(g_v_j) U_j;  R_SS: 2 V_S^T dR_j U_s_j
    g_L = 2.0 * np.matmul(V.T[None, :, :], g_v.T[:, :, None] * U)
    g_L += 2.0 * coef * np.matmul(sub.V.T[None, :, :], np.matmul(dR, U_s))
    g_L = np.tril(g_L)
    grad = GWIParams(g_a, g_L)
    if params.W is not None:
        grad.W = g_m.T @ X
        grad.b = g_m.sum(axis=0)
    return nell + reg, grad, {"nell": nell, "w2": w2}


def initial_params(factors, y, n_classes, linear_dim=None, noise=1.0, target_scale=3.0):
    """Starting point: sparse GP regression (Titsias 2009) with noise variance ``noise``
    on the targets ``target_scale * (one_hot(y) - 1/J)``.

    In whitened form ``a~_j = (V^T V + noise I)^-1 V^T t_j`` and every
    ``L~ L~^T = (I + V^T V / noise)^-1`` (the reference code initialises L this way;
    its means are neural networks, fastep's start at the regression fit).
    """
    M = factors.V.shape[1]
    V = factors.V
    B = np.eye(M) + V.T @ V / noise
    L_b = cholesky(B, lower=True, check_finite=False)
    B_inv = cho_solve((L_b, True), np.eye(M), check_finite=False)
    L0 = cholesky(0.5 * (B_inv + B_inv.T), lower=True, check_finite=False)
    T = target_scale * ((y[:, None] == np.arange(n_classes)) - 1.0 / n_classes)
    a = (cho_solve((L_b, True), V.T @ T, check_finite=False) / noise).T
    params = GWIParams(np.ascontiguousarray(a), np.repeat(L0[None], n_classes, axis=0))
    if linear_dim is not None:
        params.W = np.zeros((n_classes, linear_dim))
        params.b = np.zeros(n_classes)
    return params
