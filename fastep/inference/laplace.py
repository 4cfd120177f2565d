"""Laplace approximation for log-concave likelihoods (R&W Algorithm 3.1 / 5.1 form).

Newton iterations on ``psi(f) = log p(y | f) - f^T K^-1 f / 2`` with
``W = -d2 log p / df2``, ``B = I + W^1/2 K W^1/2 = L L^T``::

    b = W f + d log p / df,   a = b - W^1/2 L^-T L^-1 W^1/2 K b,   f_new = K a

with step halving whenever psi would decrease.  The derivatives of log p come from
the likelihood's tilted function at zero cavity variance (``Z(mu, v=0) = p(y | mu)``),
so any closed-form likelihood (Tobit: second derivatives through stable Mills
ratios) works without extra code.  Approximate evidence:
``log q(y) = psi(f_hat) - sum log diag L``.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from typing import Optional

import numpy as np
from scipy.linalg import cho_solve, solve_triangular

from .._caller import user_stacklevel
from .._numerics import predictive_variance
from .._linalg import blas_threads_for, cholesky_inplace
from ..exceptions import ConvergenceWarning, NotPositiveDefiniteError
from ..likelihoods import check_likelihood
from ._sweep import check_kernel_matrix, check_sweep_controls



def _factor_b(B):
    """Lower Cholesky factor of B = I + W^1/2 K W^1/2 (R&W Algorithm 3.1), or an error
    naming the knob: B fails only when K is not a covariance matrix."""
    try:
        return np.tril(cholesky_inplace(np.asfortranarray(B), "B = I + W^1/2 K W^1/2"))
    except NotPositiveDefiniteError as exc:
        raise NotPositiveDefiniteError(
            "Laplace's Newton step failed: B = I + W^1/2 K W^1/2 is not positive definite, "
            "so K is not a valid covariance matrix. Add jitter to the kernel's diagonal "
            "(e.g. a WhiteKernel(1e-6)) or check K for NaN or negative eigenvalues.") from exc

@dataclass
class LaplaceResult:
    """Mode ``mean`` (f_hat), marginal variances ``var``, evidence and what prediction needs."""

    mean: np.ndarray
    var: np.ndarray
    log_marginal_likelihood: float
    n_iter: int
    converged: bool
    grad_log_lik: np.ndarray
    W: np.ndarray
    _L: Optional[np.ndarray] = field(repr=False, default=None)

    def predict_latent(self, k_cross, k_diag):
        """mean = k*^T d log p(y|f_hat)/df;  var = k** - |L^-1 W^1/2 k*|^2 (R&W 3.21, 3.24)."""
        k_cross = np.asarray(k_cross, dtype=float)
        mean = k_cross.T @ self.grad_log_lik
        v = solve_triangular(self._L, np.sqrt(self.W)[:, None] * k_cross, lower=True,
                             check_finite=False)
        prior = np.asarray(k_diag, dtype=float)
        return mean, predictive_variance(prior, prior - np.einsum("ij,ij->j", v, v))


def laplace(K, y, likelihood, tol=1e-10, max_iter=100, extra=None):
    """Laplace approximation of ``p(f | y)`` for a log-concave likelihood.

    Parameters
    ----------
    K : (n, n) prior covariance; y : targets; likelihood : a log-concave Likelihood
    with a closed-form tilted function (it is evaluated at zero cavity variance).

    Returns
    -------
    LaplaceResult
    """
    check_sweep_controls(1.0, tol, max_iter)
    check_likelihood(likelihood)
    if not likelihood.log_concave:
        raise ValueError(f"Laplace inference needs a log-concave likelihood; "
                         f"{type(likelihood).__name__} is not (use EP).")
    y = likelihood.encode_targets(y)
    K = check_kernel_matrix(K, y.shape[0])
    n = K.shape[0]
    extra = likelihood.check_extra(extra, n)

    tiny = np.full(n, 1e-300)          # "zero" cavity variance: tilted = p(y | f)

    def derivs(f):
        lp, d1, d2 = likelihood.tilted(y, f, tiny, extra=extra)
        return lp, d1, np.minimum(d2, 0.0)

    with blas_threads_for(n, one_pool=True):
        f = np.zeros(n)
        a = np.zeros(n)
        lp, d1, d2 = derivs(f)
        psi = float(lp.sum())
        converged = False
        it = 0
        for it in range(1, max_iter + 1):
            W = -d2
            sw = np.sqrt(W)
            B = np.eye(n) + sw[:, None] * K * sw[None, :]
            L = _factor_b(B)
            b = W * f + d1
            a_new = b - sw * cho_solve((L, True), sw * (K @ b), check_finite=False)
            step = 1.0
            for _ in range(30):
                a_try = a + step * (a_new - a)
                f_try = K @ a_try
                lp_t, d1_t, d2_t = derivs(f_try)
                psi_try = float(lp_t.sum() - 0.5 * a_try @ f_try)
                if psi_try >= psi - 1e-12 * abs(psi):
                    break
                step *= 0.5
            done = abs(psi_try - psi) < tol * max(1.0, abs(psi))
            a, f, psi, lp, d1, d2 = a_try, f_try, psi_try, lp_t, d1_t, d2_t
            if done:
                converged = True
                break
        W = -d2
        sw = np.sqrt(W)
        B = np.eye(n) + sw[:, None] * K * sw[None, :]
        L = _factor_b(B)
        V = solve_triangular(L, sw[:, None] * K, lower=True, check_finite=False)
        var = np.diag(K) - np.einsum("ij,ij->j", V, V)
    if not converged:
        warnings.warn(f"Laplace: Newton did not converge in max_iter={max_iter} steps; "
                      "increase max_iter.", ConvergenceWarning, stacklevel=user_stacklevel())
    log_ml = psi - float(np.sum(np.log(np.diag(L))))
    if not math.isfinite(log_ml):
        raise NotPositiveDefiniteError("Laplace evidence is not finite; check the data/limits.")
    return LaplaceResult(mean=f, var=np.maximum(var, 0.0), log_marginal_likelihood=log_ml,
                         n_iter=it, converged=converged, grad_log_lik=d1, W=W, _L=L)
