"""Collapsed sparse GP regression objectives: VFE (Titsias 2009), FITC and Power EP.

With inducing inputs Z, ``Q_ff = K_fu K_uu^-1 K_uf``, ``d_i = K_ii - Q_ii`` and power
alpha in (0, 1], the collapsed Power-EP objective of Bui, Yan & Turner (2017) is::

    F_alpha = log N(y | 0, Q_ff + alpha D + s2 I) - (1 - alpha) / (2 alpha) sum_i log(1 + alpha d_i / s2)

alpha = 1 gives FITC's log marginal likelihood; alpha -> 0 gives Titsias' bound
``log N(y | 0, Q_ff + s2 I) - sum_i d_i / (2 s2)`` (the seed notes drop the 1/s2 on
the trace term; this is the correct form).  Everything costs O(n m^2) time and
O(n m) memory through ``Lambda = alpha D + s2 I`` and ``B = I + V Lambda^-1 V^T``,
``V = L_uu^-1 K_uf``::

    log|Q + Lambda| = sum log Lambda + log|B|,
    y^T (Q + Lambda)^-1 y = y^T Lambda^-1 y - |L_B^-1 V Lambda^-1 y|^2.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.linalg import blas, cho_solve, cholesky, solve_triangular

from .._numerics import predictive_variance
from ..exceptions import NotPositiveDefiniteError
from .inducing import cholesky_uu, uu_from_whitened


@dataclass
class SparseState:
    """Shared factors of one evaluation, consumed by the objective and predictions."""

    L_uu: np.ndarray
    L_B: np.ndarray
    lam: np.ndarray
    beta: np.ndarray          # L_B^-1 V Lambda^-1 y
    value: float
    grad: "SparseGradient | None" = None


@dataclass
class SparseGradient:
    """dF/dK_uu, dF/dK_uf, dF/d diag(K_ff), dF/d noise_variance (K_uu jitter held fixed)."""

    K_uu: np.ndarray
    K_uf: np.ndarray
    kff_diag: np.ndarray
    noise_variance: float


def _right_solve_t(L, A, trans, overwrite=False):
    """``L^-1 A`` (``trans``) or ``L^-T A`` for lower ``L`` and C-ordered ``A`` (m x n), as
    the transpose of ``A^T L^-T`` / ``A^T L^-1`` (dtrsm from the right on the Fortran-ordered
    ``A^T``); a C-ordered result."""
    At = A.T
    copied = not At.flags.f_contiguous
    if copied:
        At = np.asfortranarray(At)
    out = blas.dtrsm(1.0, L, At, side=1, lower=1, trans_a=int(trans),
                     overwrite_b=int(overwrite or copied))
    return out.T


def collapsed_objective(K_uu, K_uf, kff_diag, y, noise_variance, alpha, eval_gradient=False):
    """F_alpha above (``alpha=0`` means the VFE limit) and the factors for prediction.

    Parameters
    ----------
    K_uu : (m, m), K_uf : (m, n), kff_diag : (n,), y : (n,)
    noise_variance : float > 0
    alpha : float in [0, 1]
    eval_gradient : bool
        Also return :class:`SparseGradient` in ``state.grad``.  With
        ``Sigma = Q + Lambda``, ``a = Sigma^-1 y``, ``W = a a^T - Sigma^-1`` and
        ``g_i = alpha W_ii / 2 - (1 - alpha) / (2 lambda_i)`` (the weight of d_i),
        ``dF = 1/2 tr((W - 2 diag g) dQ) + g . d diag(K_ff) + g_s ds2``; every term
        is formed in O(n m^2) through ``V Sigma^-1 = B^-1 V Lambda^-1``.

    Returns
    -------
    SparseState
    """
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be in [0, 1] (0 = VFE, 1 = FITC); got {alpha!r}.")
    if not noise_variance > 0:
        raise ValueError(f"noise_variance must be positive; got {noise_variance!r}.")
    m, n = K_uf.shape
    L_uu = cholesky_uu(K_uu)
    # K_uf is C-ordered (m x n): its transpose is Fortran-ordered, so triangular solves
    # from the right on K_uf^T need no reordering copy (solve_triangular on K_uf would make
    # one); an explicit L_uu^-1 would be faster still but loses digits when K_uu is
    # ill-conditioned.  B^-1 (m x m, well conditioned) is applied as a product.
    V = _right_solve_t(L_uu, K_uf, trans=True)                     # L_uu^-1 K_uf
    d = np.maximum(kff_diag - np.einsum("ij,ij->j", V, V), 0.0)
    lam = alpha * d + noise_variance
    Vl = V / lam
    try:
        L_B = cholesky(np.eye(m) + Vl @ V.T, lower=True, check_finite=False)
    except np.linalg.LinAlgError:
        raise NotPositiveDefiniteError(
            f"The collapsed sparse objective is numerically singular at these parameters: "
            f"noise_variance={noise_variance:.3g} is tiny against the kernel's variance (up to "
            f"{float(np.max(kff_diag, initial=0.0)):.3g}). Raise noise_variance (or its lower "
            f"bound) or rescale y.") from None
    beta = solve_triangular(L_B, Vl @ y, lower=True, check_finite=False)
    quad = float(y @ (y / lam) - beta @ beta)
    logdet = float(np.sum(np.log(lam)) + 2.0 * np.sum(np.log(np.diag(L_B))))
    value = -0.5 * (quad + logdet + n * math.log(2.0 * math.pi))
    if alpha > 0.0:
        value -= (1.0 - alpha) / (2.0 * alpha) * float(np.sum(np.log1p(alpha * d / noise_variance)))
    else:
        value -= 0.5 * float(np.sum(d)) / noise_variance
    state = SparseState(L_uu=L_uu, L_B=L_B, lam=lam, beta=beta, value=value)
    if eval_gradient:
        a = (y - V.T @ solve_triangular(L_B, beta, lower=True, trans="T", check_finite=False)) / lam
        B_inv = cho_solve((L_B, True), np.eye(m), check_finite=False)
        G_V = B_inv @ Vl                                   # V Sigma^-1 = B^-1 V Lambda^-1
        W_diag = a * a - (1.0 / lam - np.einsum("ij,ij->j", Vl, G_V))
        g = 0.5 * alpha * W_diag - 0.5 * (1.0 - alpha) / lam
        # G_V = dF/dV = (V a) a^T - V Sigma^-1 - 2 V diag(g), formed in place
        np.negative(G_V, out=G_V)
        G_V -= V * (2.0 * g)
        G_V += np.multiply.outer(V @ a, a)
        G_uu = uu_from_whitened(G_V @ V.T, L_uu)
        G_uf = _right_solve_t(L_uu, G_V, trans=False, overwrite=True)   # L_uu^-T G_V
        g_noise = 0.5 * float(W_diag.sum()) + 0.5 * (1.0 - alpha) * float(
            np.sum(d / lam)) / noise_variance
        state.grad = SparseGradient(K_uu=G_uu, K_uf=G_uf, kff_diag=g, noise_variance=g_noise)
    return state


def kernel_gradient(kernel, Z, X, grad):
    """Chain a :class:`SparseGradient` (or any object with ``K_uu``, ``K_uf``,
    ``kff_diag``) through the kernel: ``(d/dtheta, d/dZ)``."""
    d_theta = (kernel.gradient_contract(Z, grad.K_uu) + kernel.gradient_contract(Z, grad.K_uf, X)
               + kernel.diag_gradient_contract(X, grad.kff_diag))
    d_Z = kernel.input_gradient_contract(Z, grad.K_uu) + kernel.input_gradient_contract(
        Z, grad.K_uf, X)
    return d_theta, d_Z


def predict(state, K_us, kss_diag):
    """Latent predictive mean and variance at test points (K_us: (m, n*)).

    mean = K_*u L_uu^-T L_B^-T beta;  var = k_** - |L_uu^-1 K_u*|^2 + |L_B^-1 L_uu^-1 K_u*|^2.
    """
    W = solve_triangular(state.L_uu, K_us, lower=True, check_finite=False)
    G = solve_triangular(state.L_B, W, lower=True, check_finite=False)
    mean = G.T @ state.beta
    var = kss_diag - np.einsum("ij,ij->j", W, W) + np.einsum("ij,ij->j", G, G)
    return mean, predictive_variance(kss_diag, var)
