"""The tilted variational bound (Hensman, Zwiessele & Lawrence 2014, eq. 10).

Given any proper Gaussian "cavities" ``N(f_i | mu_i, v_i)`` (EP's, dense or sparse),
the tilted distributions ``q_i(f_i) = p(y_i | f_i) N(f_i | mu_i, v_i) / Z_i`` define a
factorised ``q(f) = prod_i q_i(f_i)``, and the evidence lower bound of that q is::

    L_TVB = sum_i log Z_i + E_q[log N(f | 0, K)] - sum_i E_q_i[log N(f_i | mu_i, v_i)]

(``log p(y, f) - log q(f) = log p(f) - sum_i log N(f_i | mu_i, v_i) + sum_i log Z_i``),
so ``L_TVB <= log p(y)`` exactly, for every likelihood.  Only the tilted means
``m_i = mu_i + v_i d1_i`` and variances ``s_i = v_i + v_i^2 d2_i`` enter::

    E_q[log N(f | 0, K)] = -1/2 [m^T K^-1 m + sum_i (K^-1)_ii s_i + log|K| + n log 2 pi]
    E_q_i[log N(f_i | mu_i, v_i)] = -1/2 [log(2 pi v_i) + ((m_i - mu_i)^2 + s_i) / v_i]

It needs ``K^-1`` of the exact prior, O(n^3): a certificate for problems where one
Cholesky of K is affordable (it is loose when K is close to singular, since q
ignores the prior correlations).
"""
from __future__ import annotations

import math

import numpy as np
from scipy.linalg import cho_solve, cholesky

from ..likelihoods import check_likelihood


def tilted_bound(K, y, likelihood, cavity_mean, cavity_var, extra=None):
    """L_TVB above for prior covariance K and per-site Gaussian cavities (arrays (n,)).

    Parameters
    ----------
    K : ndarray (n, n)
        Prior covariance, positive definite (add jitter where it is not; the bound is
        then that of the jittered prior).
    y : ndarray (n,)
        Targets in the likelihood's encoding (binary likelihoods: -1/+1).
    likelihood : fastep.likelihoods.Likelihood
    cavity_mean, cavity_var : ndarray (n,)
        Means and variances (all > 0) of the Gaussian cavities, e.g. an EP result's
        ``cavity_mean`` and ``cavity_var``.
    extra : ndarray (n, k), optional
        Per-site extras for the likelihood, as given to EP.

    Returns
    -------
    float
        The bound L_TVB, at most log p(y).

    Examples
    --------
    >>> import numpy as np, fastep
    >>> from fastep.kernels import RBF
    >>> X = np.linspace(-2, 2, 8)[:, None]; y = np.sign(X[:, 0] + 0.1)
    >>> K = RBF(lengthscale=1.0)(X) + 1e-6 * np.eye(8)
    >>> res = fastep.ep(K, y, fastep.likelihoods.Probit())
    >>> bound = tilted_bound(K, y, fastep.likelihoods.Probit(), res.cavity_mean, res.cavity_var)
    >>> bool(bound <= res.log_marginal_likelihood)
    True
    """
    check_likelihood(likelihood)
    K = np.asarray(K, dtype=float)
    mu, v = np.asarray(cavity_mean, dtype=float), np.asarray(cavity_var, dtype=float)
    if not np.all(v > 0):
        raise ValueError("tilted_bound needs proper cavities (cavity_var > 0).")
    y = likelihood.encode_targets(y)
    lz, d1, d2 = likelihood.tilted(y, mu, v, 1.0, extra=extra)
    m = mu + v * d1
    s = np.maximum(v + v * v * d2, 0.0)
    try:
        L = cholesky(K, lower=True, check_finite=False)
    except np.linalg.LinAlgError:
        raise ValueError("tilted_bound: K is not positive definite; add jitter to K "
                         "(e.g. K + 1e-6 * I, which is then the prior the bound refers to).") \
            from None
    n = K.shape[0]
    K_inv_diag = np.diag(cho_solve((L, True), np.eye(n)))
    a = cho_solve((L, True), m)
    prior = -0.5 * (m @ a + K_inv_diag @ s + 2.0 * np.sum(np.log(np.diag(L)))
                    + n * math.log(2.0 * math.pi))
    cavity = -0.5 * np.sum(np.log(2.0 * math.pi * v) + ((m - mu) ** 2 + s) / v)
    return float(np.sum(lz) + prior - cavity)
