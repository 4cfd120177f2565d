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
from scipy.linalg import cholesky, solve_triangular

JITTER = 1e-8


@dataclass
class SparseState:
    """Shared factors of one evaluation, consumed by the objective and predictions."""

    L_uu: np.ndarray
    L_B: np.ndarray
    lam: np.ndarray
    beta: np.ndarray          # L_B^-1 V Lambda^-1 y
    value: float


def collapsed_objective(K_uu, K_uf, kff_diag, y, noise_variance, alpha):
    """F_alpha above (``alpha=0`` means the VFE limit) and the factors for prediction.

    Parameters
    ----------
    K_uu : (m, m), K_uf : (m, n), kff_diag : (n,), y : (n,)
    noise_variance : float > 0
    alpha : float in [0, 1]

    Returns
    -------
    SparseState
    """
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be in [0, 1] (0 = VFE, 1 = FITC); got {alpha!r}.")
    if not noise_variance > 0:
        raise ValueError(f"noise_variance must be positive; got {noise_variance!r}.")
    m, n = K_uf.shape
    scale = max(float(np.mean(np.diag(K_uu))), 1e-300)
    L_uu = cholesky(K_uu + JITTER * scale * np.eye(m), lower=True, check_finite=False)
    V = solve_triangular(L_uu, K_uf, lower=True, check_finite=False)
    d = np.maximum(kff_diag - np.einsum("ij,ij->j", V, V), 0.0)
    lam = alpha * d + noise_variance
    Vl = V / lam
    L_B = cholesky(np.eye(m) + Vl @ V.T, lower=True, check_finite=False)
    beta = solve_triangular(L_B, Vl @ y, lower=True, check_finite=False)
    quad = float(y @ (y / lam) - beta @ beta)
    logdet = float(np.sum(np.log(lam)) + 2.0 * np.sum(np.log(np.diag(L_B))))
    value = -0.5 * (quad + logdet + n * math.log(2.0 * math.pi))
    if alpha > 0.0:
        value -= (1.0 - alpha) / (2.0 * alpha) * float(np.sum(np.log1p(alpha * d / noise_variance)))
    else:
        value -= 0.5 * float(np.sum(d)) / noise_variance
    return SparseState(L_uu=L_uu, L_B=L_B, lam=lam, beta=beta, value=value)


def predict(state, K_us, kss_diag):
    """Latent predictive mean and variance at test points (K_us: (m, n*)).

    mean = K_*u L_uu^-T L_B^-T beta;  var = k_** - |L_uu^-1 K_u*|^2 + |L_B^-1 L_uu^-1 K_u*|^2.
    """
    W = solve_triangular(state.L_uu, K_us, lower=True, check_finite=False)
    G = solve_triangular(state.L_B, W, lower=True, check_finite=False)
    mean = G.T @ state.beta
    var = kss_diag - np.einsum("ij,ij->j", W, W) + np.einsum("ij,ij->j", G, G)
    return mean, np.maximum(var, 0.0)
