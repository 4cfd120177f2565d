"""Generalized variational inference with a Wasserstein-2 regulariser (GWI), multiclass.

Wild, Hu & Sejdinovic (2022) replace the KL divergence of variational inference by
the squared Wasserstein-2 distance between Gaussian measures on L^2(X, rho).  With J
independent prior measures ``P_j = N(m_P, C_k)`` and variational measures ``Q_j`` the
objective is::

    L(Q) = - sum_n E_Q log p(y_n | F_1(x_n), ..., F_J(x_n))  +  sum_j W_2^2(P_j, Q_j)

(``distance="unsquared"`` uses ``W_2 = sqrt(sum_j W_2^2)``, the distance between the
product measures, as the reference code does).  The likelihood is the robust max
(:class:`fastep.likelihoods.RobustMax`).

**Variational measures.** Kernel means and SVGP-like covariances on M inducing inputs
``Z`` taken from the data::

    m_j(x)     = sum_m k(x, z_m) a_jm  (+ w_j . x + b_j if linear=True)
    r_j(x, x') = k(x, x') - k(x, Z) (K_ZZ + delta I)^-1 k(Z, x') + k(x, Z) L_j L_j^T k(Z, x')

``delta`` is a small jitter (relative 1e-6); it keeps the Nystrom residual
``k - k_Z^T (K_ZZ + delta)^-1 k_Z`` strictly positive, so r_j is a valid covariance with
r_j(x, x) > 0 at every x.  The parameters are optimised in *whitened* coordinates, as
in SVGP: with ``K_ZZ + delta I = C C^T`` (Cholesky) and ``v(x) = C^-1 k(Z, x)``::

    a_j = C^-T a~_j,   L_j L_j^T = C^-T L~_j L~_j^T C^-1,
    m_j(x) = v(x)^T a~_j,   r_j(x, x') = k(x, x') - v(x)^T (I - L~_j L~_j^T) v(x'),

with ``L~_j`` lower triangular.  It is the same family of measures (any PSD ``L_j L_j^T``
is reachable), but K_ZZ's conditioning no longer slows the optimiser down; ``L~_j = I`` gives
``r_j = k`` (the prior covariance), ``L~_j = 0`` the Nystrom residual alone.

**The W2 estimator.** For one class, on N training inputs X and N_S inputs X_S
subsampled from them::

    W^2 = 1/N sum_n (m_P(x_n) - m_Q(x_n))^2 + 1/N sum_n k(x_n, x_n) + 1/N sum_n r(x_n, x_n)
          - 2/N_S sum_s sqrt(lambda_s(K_SS^1/2 R_SS K_SS^1/2)),

``K_SS = k(X_S, X_S)``, ``R_SS = r(X_S, X_S)``.  Each term estimates the corresponding
term of ``W_2^2 = ||m_P - m_Q||^2 + tr C_P + tr C_Q - 2 tr (C_P^1/2 C_Q C_P^1/2)^1/2``
under the empirical measure; the last one uses ``lambda(C_Q C_P) ~ lambda(R_SS K_SS) /
N_S^2`` in the symmetric form ``K_SS^1/2 R_SS K_SS^1/2`` (positive semi-definite, so
``eigh`` applies and the eigenvalues are real and non-negative).  With ``X_S = X`` this
is exactly ``1/N`` times the W2^2 between the finite-dimensional Gaussians
``N(m_P(X), k(X, X))`` and ``N(m_Q(X), r(X, X))``; the seed writes the cross term with
``r(X_S, X) k(X, X_S)`` and ``2/sqrt(N N_S)``, which is the same thing at ``X_S = X``
but is not similar to a symmetric matrix otherwise (its eigenvalues can be complex;
the reference code takes their moduli).

Gradients are analytic: ``d sum sqrt(lambda(A)) = 1/2 tr(A^-1/2 dA)``, chained
through ``R_SS = (Nystrom residual) + V_S L~ L~^T V_S^T``; S(x, j) has its own compiled gradient.
"""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import numpy as np
from scipy.linalg import cho_solve, cholesky, eigh, solve_triangular
from scipy.optimize import minimize

from .._linalg import single_threaded_blas
from ..exceptions import NotPositiveDefiniteError
from ..backend import resolve
from ..likelihoods.robustmax import check_moments

JITTER = 1e-6            # relative to the mean prior variance at the inducing inputs
_EIG_FLOOR = 1e-12       # relative: eigenvalues below this (times the largest) count as 0
_LOG = logging.getLogger("fastep")


# --------------------------------------------------------------------------------------
# The W2 estimator
# --------------------------------------------------------------------------------------
def symmetric_eigh(A, what):
    """``eigh(A)`` of a symmetric matrix, robust to bad scaling: the matrix is divided by
    its largest entry first, and when LAPACK's default driver (MRRR) fails the
    divide-and-conquer one is tried; a matrix neither can decompose is a
    :class:`NotPositiveDefiniteError` naming ``what``."""
    scale = float(np.max(np.abs(A), initial=0.0))
    if not np.isfinite(scale):
        raise NotPositiveDefiniteError(f"{what} holds non-finite entries; the kernel "
                                       f"overflows at these inputs (rescale X or bound the "
                                       f"kernel's parameters).")
    scale = scale if scale > 0 else 1.0
    for driver in ("evr", "evd"):
        try:
            lam, V = eigh(A / scale, check_finite=False, driver=driver)
            return lam * scale, V
        except np.linalg.LinAlgError:
            continue
    raise NotPositiveDefiniteError(f"The eigendecomposition of {what} failed (LAPACK did "
                                   f"not converge); the kernel is numerically degenerate at "
                                   f"these inputs (rescale X or bound the kernel's "
                                   f"parameters).")


def sym_sqrt(K):
    """Symmetric square root of a symmetric positive semi-definite matrix (via eigh).

    Tiny negative eigenvalues from rounding are set to zero.
    """
    lam, V = symmetric_eigh(K, "the kernel matrix of the W2 subsample")
    lam = np.maximum(lam, 0.0)
    return (V * np.sqrt(lam)) @ V.T


def _cross_term(K_sqrt, R_ss):
    """``c = sum_s sqrt(lambda_s(K^1/2 R K^1/2))`` and ``dc/dR`` (symmetric).

    ``dc = 1/2 tr(A^-1/2 dA)`` with ``A = K^1/2 R K^1/2``, so
    ``dc/dR = 1/2 K^1/2 A^-1/2 K^1/2``; eigenvalues below ``_EIG_FLOOR`` times the
    largest are treated as zero (no contribution, no gradient).
    """
    A = K_sqrt @ R_ss @ K_sqrt
    A = 0.5 * (A + A.T)
    lam, V = symmetric_eigh(A, "the W2 cross-term matrix")
    keep = lam > _EIG_FLOOR * max(lam[-1], 0.0)
    root = np.sqrt(lam[keep])
    W = K_sqrt @ V[:, keep]
    return float(root.sum()), 0.5 * (W / root) @ W.T


def w2_squared(mean_p, mean_q, k_diag, r_diag, K_ss, R_ss, return_grad=False):
    """The W2^2 estimator between ``P = N(m_P, k)`` and ``Q = N(m_Q, r)`` (see module doc).

    Parameters
    ----------
    mean_p, mean_q : array (N,) or scalar
        Prior and variational means at the N inputs.
    k_diag, r_diag : array (N,)
        Prior and variational variances at the N inputs.
    K_ss, R_ss : array (N_S, N_S)
        Prior and variational covariance matrices at the N_S subsampled inputs.
    return_grad : bool
        Also return ``(dW/dmean_q, dW/dr_diag, dW/dR_ss)``.

    Returns
    -------
    value : float
        ``1/N sum (m_P - m_Q)^2 + 1/N sum k + 1/N sum r - 2/N_S sum sqrt(lambda(K^1/2 R K^1/2))``.
        With ``X_S = X`` this is ``W_2^2(N(m_P, K), N(m_Q, R)) / N``.

    Examples
    --------
    >>> import numpy as np
    >>> K = np.array([[2.0, 0.5], [0.5, 1.0]])
    >>> round(w2_squared(0.0, np.zeros(2), np.diag(K), np.diag(K), K, K), 12)   # P = Q
    0.0
    """
    r_diag = np.asarray(r_diag, dtype=float)
    n = r_diag.shape[0]
    diff = np.asarray(mean_q, dtype=float) - np.asarray(mean_p, dtype=float)
    diff = np.broadcast_to(diff, (n,))
    n_s = np.shape(K_ss)[0]
    cross, dcross = _cross_term(sym_sqrt(np.asarray(K_ss, float)), np.asarray(R_ss, float))
    value = float(diff @ diff / n + np.mean(k_diag) + r_diag.mean() - 2.0 * cross / n_s)
    if not return_grad:
        return value
    return value, 2.0 * diff / n, np.full(n, 1.0 / n), -2.0 * dcross / n_s


# --------------------------------------------------------------------------------------
# Variational measures
# --------------------------------------------------------------------------------------
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


# --------------------------------------------------------------------------------------
# The objective
# --------------------------------------------------------------------------------------
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


# --------------------------------------------------------------------------------------
# Initialisation, optimisers, tempering
# --------------------------------------------------------------------------------------
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


def fit_lbfgs(params, objective, max_iter=300, tol=1e-6, log_every=25):
    """Minimise ``objective(params) -> (value, grad, parts)`` with L-BFGS-B (full batch).

    The stopping test is SciPy's ``ftol``: the relative decrease of the objective in one
    iteration, ``(f_k - f_k+1) / max(|f_k|, |f_k+1|, 1) <= tol`` (the gradient test is
    off: the likelihood term is a sum over the training points, so a gradient tolerance
    would have to scale with n).

    Returns ``(params, n_iter, converged, change)``: ``converged`` is False when the
    budget ran out (``max_iter`` iterations, or SciPy's limit on objective evaluations);
    a stop by ``tol`` or by a line search that cannot improve further counts as
    converged.  ``change`` is the relative decrease of the last iteration (the quantity
    compared with ``tol``; NaN when no iteration was taken), for the caller's
    ``ConvergenceWarning``.
    """
    J, M, d = params.shape
    state = {"it": 0, "f": None, "change": math.nan}

    def fun(theta):
        value, grad, parts = objective(GWIParams.unpack(theta, J, M, d))
        state["last"] = (value, parts)
        if state["f"] is None:                     # the objective at the starting point
            state["f"] = float(value)
        return value, grad.pack()

    def callback(intermediate_result):
        state["it"] += 1
        prev, state["f"] = state["f"], float(intermediate_result.fun)
        state["change"] = (prev - state["f"]) / max(abs(prev), abs(state["f"]), 1.0)
        if state["it"] % log_every == 0:
            value, parts = state["last"]
            _LOG.info("GWI L-BFGS-B iteration %d: objective %.4f (neg. expected log-lik %.4f, "
                      "sum W2^2 %.4f)", state["it"], value, parts["nell"], parts["w2"].sum())

    res = minimize(fun, params.pack(), jac=True, method="L-BFGS-B", callback=callback,
                   options={"maxiter": int(max_iter), "ftol": tol, "gtol": 0.0,
                            "maxcor": 20})
    converged = int(res.status) != 1               # 1: iteration or evaluation limit
    return GWIParams.unpack(res.x, J, M, d), int(res.nit), converged, state["change"]


def fit_adam(params, objective, n, batch_size, n_epochs, learning_rate, rng):
    """Minibatch Adam on ``objective(params, rows, scale)`` (rows drawn without replacement
    within an epoch; ``scale = n / batch size`` makes the likelihood sum unbiased).
    Returns the parameters after ``n_epochs`` epochs."""
    J, M, d = params.shape
    theta = params.pack()
    m1 = np.zeros_like(theta)
    m2 = np.zeros_like(theta)
    b1, b2, eps = 0.9, 0.999, 1e-8
    batch_size = min(int(batch_size), n)
    t = 0
    for epoch in range(1, int(n_epochs) + 1):
        perm = rng.permutation(n)
        total = 0.0
        for start in range(0, n - batch_size + 1, batch_size):
            rows = np.sort(perm[start:start + batch_size])
            value, grad, _ = objective(GWIParams.unpack(theta, J, M, d), rows, n / batch_size)
            g = grad.pack()
            t += 1
            m1 = b1 * m1 + (1 - b1) * g
            m2 = b2 * m2 + (1 - b2) * g * g
            theta = theta - learning_rate * (m1 / (1 - b1 ** t)) / (np.sqrt(m2 / (1 - b2 ** t))
                                                                    + eps)
            total += value
        _LOG.info("GWI Adam epoch %d: mean minibatch objective %.4f", epoch,
                  total / max(1, n // batch_size))
    return GWIParams.unpack(theta, J, M, d)


def tempered_log_loss(log_t, mean, var, y, likelihood, device="cpu"):
    """``-sum_i log p(y_i)`` with every variance scaled by ``T = exp(log_t)``, and its
    derivative in ``log_t``: ``p = eps/(J - 1) + (1 - eps - eps/(J - 1)) S(x, y)``."""
    eps, J = likelihood.epsilon, likelihood.n_classes
    slope = 1.0 - eps - eps / (J - 1)
    t = math.exp(log_t)
    s, _, dv = prob_largest_grad(likelihood, mean, var * t, y, device)
    p = eps / (J - 1) + slope * s
    return float(-np.log(p).sum()), float(-np.sum((slope / p)[:, None] * dv * var) * t)


def temper(mean, var, y, likelihood, bounds=(1e-3, 1e3), device="cpu"):
    """Temperature T (r_j <- T r_j for every class) minimising :func:`tempered_log_loss`
    on (mean, var, y), e.g. a validation split.

    One temperature is shared by all classes: per-class temperatures (the reference
    code's choice) overfit a validation split of a hundred points (in a digits fit they
    raised the test log loss from 0.11 to 0.19).  Returns ``(T, loss_before, loss_after)``
    (summed over the points); T = 1 if tempering does not lower the loss.
    """
    def fun(x):
        value, grad = tempered_log_loss(x[0], mean, var, y, likelihood, device)
        return value, np.array([grad])

    before = fun(np.zeros(1))[0]
    res = minimize(fun, np.zeros(1), jac=True, method="L-BFGS-B",
                   bounds=[(math.log(bounds[0]), math.log(bounds[1]))])
    if not res.fun < before:
        return 1.0, before, before
    return float(math.exp(res.x[0])), before, float(res.fun)
