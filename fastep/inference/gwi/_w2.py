"""The W2 estimator between a prior and a variational measure of one class, and the
symmetric eigen-decompositions it rests on (see :mod:`fastep.inference.gwi`)."""
from __future__ import annotations

import numpy as np
from scipy.linalg import eigh

from ...exceptions import NotPositiveDefiniteError


_EIG_FLOOR = 1e-12       # relative: eigenvalues below this (times the largest) count as 0


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
    >>> bool(abs(w2_squared(0.0, np.zeros(2), np.diag(K), np.diag(K), K, K)) < 1e-12)  # P = Q
    True
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
