"""Multinomial probit likelihood and its inner EP (Riihimaki, Jylanki & Vehtari 2013, JMLR
14, "Nested expectation propagation for Gaussian process classification with a
multinomial probit likelihood").

With C latent values ``f = (f_1, ..., f_C)`` at a point and an auxiliary ``u ~ N(0, 1)``::

    p(y = c | f) = int N(u | 0, 1) prod_{j != c} Phi(u + f_c - f_j) du
                 = P(c = argmax_j (f_j + e_j)),  e ~ N(0, I_C).

Nested EP approximates each of the C - 1 probit factors of a point by a scalar Gaussian
site in its projection ``s_j = f_c - f_j + u`` (precision ``alpha_j``, shift ``beta_j``)
and runs EP on them inside the point's tilted distribution (the *inner* EP).  Integrating
``u`` out of ``N(u | 0, 1) prod_j exp(-alpha_j s_j^2 / 2 + beta_j s_j)`` gives the site of
the point in f (derived in the module's tests against quadrature)::

    T_i = diag(pi) - pi pi^T / (1^T pi),        b_i = nu - pi (1^T nu) / (1^T pi),

with ``pi_c = 1`` (from u's prior), ``pi_j = alpha_j``, ``nu_c = 0``, ``nu_j = -beta_j``: a
precision of rank C - 1 that ignores a shift common to all classes, as the likelihood
does.  At the fixed point nested EP is EP on the augmented model (f, u) with these
n (C - 1) scalar sites, whose evidence and gradient follow the usual EP formulas
(:mod:`fastep.inference.nested_ep`).

The compiled functions here act on one point (the inner EP, the site terms of the
evidence) and loop over points in parallel, each point owning its row of the outputs.
"""
from __future__ import annotations

import math
import numbers

import numpy as np
from numba import prange
from numpy.typing import ArrayLike
from scipy.special import log_ndtr

from .._checks import float_array, index_array
from .._jit import jit, pjit
from .._numerics import gauss_hermite, log_phi, mills, mills_shift

#: Inner-EP sweeps per point at each outer update (the paper's choice: one, warm-started).
INNER_SWEEPS = 1
#: Inner-EP sweeps of a predictive probability (cold start; converged well before).
PREDICT_SWEEPS = 30


class MultinomialProbit:
    """Multinomial probit likelihood for ``n_classes`` latent functions:
    ``p(y = c | f) = P(c = argmax_j (f_j + e_j))`` with independent standard normal ``e``.

    Used by :class:`fastep.NestedEPClassifier`; nested EP (its inner EP is in this module)
    gives tilted moments, the evidence and the predictive class probabilities.

    Parameters
    ----------
    n_classes : int, default 3
        Number of classes C >= 2.

    Examples
    --------
    >>> import numpy as np
    >>> from fastep.likelihoods import MultinomialProbit
    >>> lik = MultinomialProbit(3)
    >>> p = lik.predict_proba(np.array([[2.0, 0.0, 0.0]]), np.zeros((1, 3, 3)))
    >>> p.shape, bool(abs(p.sum() - 1) < 1e-6), bool(p[0, 0] > 0.8)
    ((1, 3), True, True)
    """

    n_dims = 0
    theta = np.zeros(0)
    bounds = np.zeros((0, 2))
    n_classes: int

    def __init__(self, n_classes: int = 3) -> None:
        if (isinstance(n_classes, bool) or not isinstance(n_classes, numbers.Integral)
                or n_classes < 2):
            raise ValueError(f"n_classes must be an integer >= 2; got {n_classes!r}.")
        self.n_classes = int(n_classes)

    def __repr__(self) -> str:
        return f"MultinomialProbit(n_classes={self.n_classes})"

    def clone_with_theta(self, theta: ArrayLike) -> "MultinomialProbit":
        """A copy (the likelihood has no parameters to set).

        Parameters
        ----------
        theta : array_like of shape (0,)
            Log-parameters; not read (:attr:`n_dims` is 0).
        """
        return MultinomialProbit(self.n_classes)

    def log_prob(self, y: ArrayLike, f: ArrayLike, n_nodes: int = 64) -> np.ndarray:
        """log p(y | f) for labels ``y`` (n,) in 0..C-1 and latent values ``f`` (n, C), by
        Gauss-Hermite quadrature over u with ``n_nodes`` nodes.

        Parameters
        ----------
        y : array_like of shape (n,)
            Integer class labels in 0 .. C-1.
        f : array_like of shape (n, C)
            Latent values of every class at each point.
        n_nodes : int, default 64
            Nodes of the Gauss-Hermite rule over the auxiliary u.
        """
        f = float_array(f, "f", 2, ("n", self.n_classes))
        y = index_array(y, "y", f.shape[0], self.n_classes,
                        "Pass the integer labels 0 .. C-1 of the rows of f.")
        nodes, weights = gauss_hermite(n_nodes)
        fc = f[np.arange(f.shape[0]), y]
        d = fc[:, None] - f                                      # (n, C)
        terms = log_ndtr(nodes[None, :, None] + d[:, None, :])   # (n, K, C)
        terms[np.arange(f.shape[0]), :, y] = 0.0
        return np.log(np.maximum(np.exp(terms.sum(2)) @ weights, 1e-300))

    def predict_proba(self, mean: ArrayLike, cov: ArrayLike) -> np.ndarray:
        """``p(y = c) = int N(f | mean, cov) p(y = c | f) df`` for every row: ``mean`` (m, C),
        ``cov`` (m, C, C); by inner EP to convergence (the normaliser's EP estimate, as the
        paper does), rows renormalised to sum to one.

        Parameters
        ----------
        mean : array_like of shape (m, C)
            Posterior means of the C latent values at each point.
        cov : array_like of shape (m, C, C)
            Their posterior covariance at each point.
        """
        mean = np.ascontiguousarray(mean, dtype=float)
        cov = np.ascontiguousarray(cov, dtype=float)
        out = np.empty(mean.shape)
        predictive_log_z(mean, cov, PREDICT_SWEEPS, out)
        p = np.exp(out - out.max(1, keepdims=True))
        return p / p.sum(1, keepdims=True)


# --- one point: the joint of (f, u) and the inner EP ---------------------------------

@jit
def _u_terms(y, alpha, beta):
    """``(1 + sum alpha, sum beta)`` over the factors j != y: u's precision given f and
    the sum of the sites' shifts."""
    P, sb = 1.0, 0.0
    for j in range(alpha.shape[0]):
        if j != y:
            P += alpha[j]
            sb += beta[j]
    return P, sb


@jit
def _joint(m, V, y, alpha, beta, mg, Vg):
    """Moments ``mg`` (C+1,), ``Vg`` (C+1, C+1) of (f, u) when ``f ~ N(m, V)`` and u given f
    has density prop. to ``N(u | 0, 1) prod_{j != y} exp(-alpha_j s_j^2 / 2 + beta_j s_j)``,
    ``s_j = f_y - f_j + u``: u | f is normal with precision ``P = 1 + sum alpha`` and mean
    ``(sum beta - a^T f) / P``, ``a = sum_j alpha_j (e_y - e_j)``."""
    C = m.shape[0]
    P, sb = _u_terms(y, alpha, beta)
    a = np.zeros(C)
    for j in range(C):
        if j != y:
            a[y] += alpha[j]
            a[j] -= alpha[j]
    am = 0.0
    for r in range(C):
        mg[r] = m[r]
        am += a[r] * m[r]
        va = 0.0
        for c in range(C):
            Vg[r, c] = V[r, c]
            va += V[r, c] * a[c]
        Vg[r, C] = -va / P
        Vg[C, r] = -va / P
    ava = 0.0
    for r in range(C):
        ava += a[r] * Vg[r, C]
    mg[C] = (sb - am) / P
    Vg[C, C] = 1.0 / P - ava / P


@jit
def _project(mg, Vg, y, j, vw):
    """Mean and variance of ``s_j = w^T g``, ``w = e_y - e_j + e_u``; ``vw = Vg w``."""
    C = mg.shape[0] - 1
    for r in range(C + 1):
        vw[r] = Vg[r, y] - Vg[r, j] + Vg[r, C]
    return mg[y] - mg[j] + mg[C], vw[y] - vw[j] + vw[C]


@jit
def _cavity(ms, vs, a, b):
    """Cavity (mean, var) of a projection with marginal (ms, vs) and site (a, b); var <= 0
    for an improper cavity."""
    prec = 1.0 / vs - a
    if prec <= 0.0:
        return 0.0, -1.0
    v = 1.0 / prec
    return v * (ms / vs - b), v


@jit
def _probit_site(mc, vc):
    """log Phi(z) and the site (precision, shift) that matches the moments of
    ``N(s | mc, vc) Phi(s)``, z = mc / sqrt(1 + vc) (R&W eq. 3.82)."""
    c = math.sqrt(1.0 + vc)
    z = mc / c
    r = mills(z)
    d1 = r / c
    d2 = -r * mills_shift(z) / (1.0 + vc)
    den = 1.0 + d2 * vc
    return log_phi(z), -d2 / den, (d1 - mc * d2) / den


@jit
def inner_sweeps(mg, Vg, y, alpha, beta, n_sweeps, vw):
    """``n_sweeps`` sequential inner-EP sweeps over the factors j != y of one point,
    updating its sites (alpha, beta) and the joint (mg, Vg) by rank-one steps."""
    C = mg.shape[0] - 1
    for _ in range(n_sweeps):
        for j in range(C):
            if j == y:
                continue
            ms, vs = _project(mg, Vg, y, j, vw)
            mc, vc = _cavity(ms, vs, alpha[j], beta[j])
            if vc <= 0.0:
                continue
            _, a_new, b_new = _probit_site(mc, vc)
            da, db = a_new - alpha[j], b_new - beta[j]
            alpha[j], beta[j] = a_new, b_new
            den = 1.0 + da * vs
            k = (db - da * ms) / den
            for r in range(C + 1):
                mg[r] += vw[r] * k
            for r in range(C + 1):
                for c in range(C + 1):
                    Vg[r, c] -= da * vw[r] * vw[c] / den


@jit
def _psi(m, v):
    """Log partition of the 1-d Gaussian N(m, v) in natural parameters (no 2 pi term)."""
    return 0.5 * m * m / v + 0.5 * math.log(v)


@jit
def site_terms_one(mg, Vg, y, alpha, beta, vw):
    """``sum_j [log Zhat_j + Psi(cavity_j) - Psi(marginal_j)]`` of one point's scalar sites
    (the site part of the EP evidence); NaN where a cavity is improper."""
    C = mg.shape[0] - 1
    acc = 0.0
    for j in range(C):
        if j == y:
            continue
        ms, vs = _project(mg, Vg, y, j, vw)
        mc, vc = _cavity(ms, vs, alpha[j], beta[j])
        if vc <= 0.0:
            return math.nan
        acc += log_phi(mc / math.sqrt(1.0 + vc)) + _psi(mc, vc) - _psi(ms, vs)
    return acc


@pjit
def update_sites(mean, cov, y, alpha, beta, damping, n_sweeps, new_alpha, new_beta):
    """Outer (parallel) update of every point's inner sites from the posterior marginals
    ``mean`` (n, C), ``cov`` (n, C, C): ``n_sweeps`` inner sweeps from the current sites,
    then a step of ``damping`` towards them, written to ``new_alpha``, ``new_beta``."""
    n, C = mean.shape
    for i in prange(n):
        mg = np.empty(C + 1)
        Vg = np.empty((C + 1, C + 1))
        vw = np.empty(C + 1)
        a = alpha[i].copy()
        b = beta[i].copy()
        _joint(mean[i], cov[i], y[i], a, b, mg, Vg)
        inner_sweeps(mg, Vg, y[i], a, b, n_sweeps, vw)
        for j in range(C):
            new_alpha[i, j] = alpha[i, j] + damping * (a[j] - alpha[i, j])
            new_beta[i, j] = beta[i, j] + damping * (b[j] - beta[i, j])


@pjit
def site_terms(mean, cov, y, alpha, beta, out):
    """:func:`site_terms_one` of every point, with the joint from the posterior marginals;
    also ``-log(1 + sum alpha)/2 + (sum beta)^2 / (2 (1 + sum alpha))``, what integrating u
    out of the point's sites leaves besides its Gaussian site in f."""
    n, C = mean.shape
    for i in prange(n):
        mg = np.empty(C + 1)
        Vg = np.empty((C + 1, C + 1))
        vw = np.empty(C + 1)
        _joint(mean[i], cov[i], y[i], alpha[i], beta[i], mg, Vg)
        P, sb = _u_terms(y[i], alpha[i], beta[i])
        out[i] = site_terms_one(mg, Vg, y[i], alpha[i], beta[i], vw) \
            - 0.5 * math.log(P) + 0.5 * sb * sb / P


@jit
def _cho_solve_small(L, x):
    """``(L L^T)^-1 x`` for a small lower factor L (plain loops: no LAPACK binding to
    compile)."""
    K = x.shape[0]
    z = x.copy()
    for r in range(K):
        for c in range(r):
            z[r] -= L[r, c] * z[c]
        z[r] /= L[r, r]
    for r in range(K - 1, -1, -1):
        for c in range(r + 1, K):
            z[r] -= L[c, r] * z[c]
        z[r] /= L[r, r]
    return z


@jit
def _gauss_part(m0, V0, y, alpha, beta):
    """``log int N(g | m0, V0) prod_{j != y} exp(-alpha_j s_j^2 / 2 + beta_j s_j) dg`` in
    the projections ``s = W^T g`` (mean m, covariance S, possibly singular), with
    ``B = I + A^1/2 S A^1/2`` (positive definite for alpha >= 0)::

        -log|B| / 2 + (mu^T b + b^T m) / 2 - ((S b)^T + m^T) A^1/2 B^-1 A^1/2 m / 2,
        mu = m + S b - S A^1/2 B^-1 A^1/2 (m + S b)

    (the posterior mean of s), written without S^-1."""
    C = m0.shape[0] - 1
    K = C - 1
    m = np.empty(K)
    S = np.empty((K, K))
    sa = np.empty(K)
    b = np.empty(K)
    vw = np.empty(C + 1)
    k = 0
    for j in range(C):
        if j == y:
            continue
        for r in range(C + 1):
            vw[r] = V0[r, y] - V0[r, j] + V0[r, C]
        m[k] = m0[y] - m0[j] + m0[C]
        l = 0
        for i in range(C):
            if i == y:
                continue
            S[k, l] = vw[y] - vw[i] + vw[C]
            l += 1
        sa[k], b[k] = math.sqrt(alpha[j]), beta[j]
        k += 1
    L = np.zeros((K, K))                       # Cholesky factor of B
    out = 0.0
    for r in range(K):
        for c in range(r + 1):
            v = sa[r] * S[r, c] * sa[c] + (1.0 if r == c else 0.0)
            for q in range(c):
                v -= L[r, q] * L[c, q]
            L[r, c] = math.sqrt(v) if r == c else v / L[c, c]
        out -= math.log(L[r, r])
    sb = np.zeros(K)
    for r in range(K):
        for c in range(K):
            sb[r] += S[r, c] * b[c]
    t = sa * _cho_solve_small(L, sa * (m + sb))
    tm = sa * _cho_solve_small(L, sa * m)
    for r in range(K):
        st = 0.0
        for c in range(K):
            st += S[r, c] * t[c]
        mu = m[r] + sb[r] - st
        out += 0.5 * (mu * b[r] + b[r] * m[r]) - 0.5 * (sb[r] + m[r]) * tm[r]
    return out


@pjit
def predictive_log_z(mean, cov, n_sweeps, out):
    """``out[i, c]``: inner EP's estimate of ``log int N(f | mean_i, cov_i) p(y = c | f) df``,
    EP run ``n_sweeps`` sweeps from zero sites."""
    m, C = mean.shape
    for i in prange(m):
        mg = np.empty(C + 1)
        Vg = np.empty((C + 1, C + 1))
        m0 = np.zeros(C + 1)
        V0 = np.zeros((C + 1, C + 1))
        vw = np.empty(C + 1)
        for r in range(C):
            m0[r] = mean[i, r]
            for c in range(C):
                V0[r, c] = cov[i, r, c]
        V0[C, C] = 1.0
        for c in range(C):
            a = np.zeros(C)
            b = np.zeros(C)
            mg[:] = m0
            Vg[:, :] = V0
            inner_sweeps(mg, Vg, c, a, b, n_sweeps, vw)
            out[i, c] = _gauss_part(m0, V0, c, a, b) + site_terms_one(mg, Vg, c, a, b, vw)
