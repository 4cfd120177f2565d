"""Slow, dense, obviously-correct reference implementations used as truth in tests.

Everything here is written directly from the equations of

    C. E. Rasmussen and C. K. I. Williams, "Gaussian Processes for Machine
    Learning", MIT Press, 2006 (R&W), sections 2.2 and 3.6,

using only numpy, scipy and math.  Nothing here is fast: all linear algebra is
dense O(n^3) and everything is recomputed from scratch where that makes the
code easier to trust.  These functions must never import from ``fastep``.

Functions
---------
exact_gp_regression            R&W eqs. 2.25, 2.26, 2.30 (Algorithm 2.1)
ep_probit_reference            R&W Algorithm 3.5 (sequential EP, probit)
ep_probit_parallel_reference   parallel (damped) EP, same fixed point
ep_log_evidence_from_sites     R&W eqs. 3.65 / 3.73-3.74 for arbitrary sites
tilted_moments_quad            log Z and its mu-derivatives by adaptive quadrature
log_ndtr_ref                   log Phi(z) (scipy.special.log_ndtr)
probit_tilted_moments          closed-form probit tilted moments, R&W eq. 3.58
gaussian_w2_squared            W2^2 between two Gaussians on R^n (scipy.linalg.sqrtm)
prob_largest_quad              P(f_j = max_l f_l) for independent Gaussians, adaptive quadrature
svgp_moments_dense             GWI/SVGP-style means and variances by explicit inverses
nested_ep_augmented            multinomial probit EP in the augmented space (f, u), dense
"""

import math
import warnings

import numpy as np
import scipy.integrate
import scipy.linalg
import scipy.optimize
import scipy.special
import scipy.stats

__all__ = [
    "exact_gp_regression",
    "ep_probit_reference",
    "ep_probit_parallel_reference",
    "ep_log_evidence_from_sites",
    "tilted_moments_quad",
    "log_ndtr_ref",
    "probit_tilted_moments",
    "probit_log_Z_tilted",
    "gaussian_w2_squared",
    "prob_largest_quad",
    "svgp_moments_dense",
    "nested_ep_augmented",
]

LOG_2PI = math.log(2.0 * math.pi)


# ---------------------------------------------------------------------------
# Scalar helpers
# ---------------------------------------------------------------------------
def log_ndtr_ref(z):
    """log Phi(z), with Phi the standard normal CDF (scipy.special.log_ndtr)."""
    return scipy.special.log_ndtr(z)


def _phi_over_Phi(z):
    """Stable inverse Mills ratio N(z)/Phi(z) = exp(log N(z) - log Phi(z))."""
    return np.exp(scipy.stats.norm.logpdf(z) - scipy.special.log_ndtr(z))


def probit_log_Z_tilted(y, cav_mean, cav_var):
    """log Z_i = log Phi(z_i), z_i = y_i mu_-i / sqrt(1 + sigma^2_-i)  (R&W eq. 3.58)."""
    y = np.asarray(y, dtype=float)
    cav_mean = np.asarray(cav_mean, dtype=float)
    cav_var = np.asarray(cav_var, dtype=float)
    z = y * cav_mean / np.sqrt(1.0 + cav_var)
    return scipy.special.log_ndtr(z)


def probit_tilted_moments(y, cav_mean, cav_var):
    """Closed-form moments of the probit tilted distribution, R&W eq. 3.58.

    For q(f) proportional to Phi(y f) N(f | mu_-, s2_-), with
    z = y mu_- / sqrt(1 + s2_-) and r = N(z)/Phi(z):

        log Z   = log Phi(z)
        mu_hat  = mu_- + y s2_- r / sqrt(1 + s2_-)
        s2_hat  = s2_- - s2_-^2 r (z + r) / (1 + s2_-)

    Returns (log_Z, mu_hat, s2_hat).
    """
    y = np.asarray(y, dtype=float)
    m = np.asarray(cav_mean, dtype=float)
    v = np.asarray(cav_var, dtype=float)
    sq = np.sqrt(1.0 + v)
    z = y * m / sq
    r = _phi_over_Phi(z)
    log_Z = scipy.special.log_ndtr(z)
    mu_hat = m + y * v * r / sq
    s2_hat = v - v * v * r * (z + r) / (1.0 + v)
    return log_Z, mu_hat, s2_hat


# ---------------------------------------------------------------------------
# 1. Exact GP regression (Gaussian likelihood)
# ---------------------------------------------------------------------------
def exact_gp_regression(K, y, noise_var, K_star=None, k_star_diag=None):
    """Exact GP regression with Gaussian noise, R&W section 2.2 / Algorithm 2.1.

    With A = K + s2 I (s2 = noise_var):

        mean      = K A^-1 y                         (eq. 2.25 at the training inputs)
        var       = diag(K - K A^-1 K)               (eq. 2.26 at the training inputs)
        log_marginal_likelihood
                  = -1/2 y^T A^-1 y - 1/2 log|A| - n/2 log 2 pi     (eq. 2.30)

    and, if K_star (n x m, train x test) and k_star_diag (m,) are given,

        mean_star = K_star^T A^-1 y                  (eq. 2.25)
        var_star  = k_star_diag - diag(K_star^T A^-1 K_star)   (eq. 2.26)

    All variances are of the latent f (noise-free).
    """
    K = np.asarray(K, dtype=float)
    y = np.asarray(y, dtype=float)
    n = K.shape[0]
    A = K + noise_var * np.eye(n)
    L = np.linalg.cholesky(A)
    # alpha = A^-1 y via two triangular solves
    alpha = scipy.linalg.solve_triangular(
        L.T, scipy.linalg.solve_triangular(L, y, lower=True), lower=False
    )
    V = scipy.linalg.solve_triangular(L, K, lower=True)  # L^-1 K
    out = {
        "mean": K @ alpha,
        "var": np.diag(K) - np.sum(V * V, axis=0),
        "log_marginal_likelihood": float(
            -0.5 * y @ alpha - np.sum(np.log(np.diag(L))) - 0.5 * n * LOG_2PI
        ),
    }
    if K_star is not None:
        K_star = np.asarray(K_star, dtype=float)
        W = scipy.linalg.solve_triangular(L, K_star, lower=True)  # L^-1 K_*
        out["mean_star"] = K_star.T @ alpha
        if k_star_diag is not None:
            out["var_star"] = np.asarray(k_star_diag, dtype=float) - np.sum(W * W, axis=0)
    return out


# ---------------------------------------------------------------------------
# EP posterior from site parameters
# ---------------------------------------------------------------------------
def _posterior_from_sites(K, site_tau, site_nu):
    """Sigma = (K^-1 + S)^-1 and mu = Sigma nu, with S = diag(site_tau).

    Computed as in R&W Algorithm 3.5 (lines 'recompute approximate posterior'):
        B = I + S^1/2 K S^1/2,  L = chol(B),  V = L^-1 S^1/2 K,
        Sigma = K - V^T V  (= K - K S^1/2 B^-1 S^1/2 K),  mu = Sigma nu.
    Returns (Sigma, mu, L).
    """
    n = K.shape[0]
    s_half = np.sqrt(site_tau)
    B = np.eye(n) + s_half[:, None] * K * s_half[None, :]
    L = np.linalg.cholesky(B)
    V = scipy.linalg.solve_triangular(L, s_half[:, None] * K, lower=True)
    Sigma = K - V.T @ V
    mu = Sigma @ site_nu
    return Sigma, mu, L


def ep_log_evidence_from_sites(K, site_tau, site_nu, log_Z_tilted_fn):
    """EP approximation log Z_EP to the log marginal likelihood, R&W eq. 3.65.

    The posterior (Sigma, mu) is recomputed from the sites, and the cavities
    from its marginals (R&W eq. 3.56):
        tau_-i = 1/Sigma_ii - tau~_i,   nu_-i = mu_i/Sigma_ii - nu~_i,
        mu_-i = nu_-i / tau_-i,         s2_-i = 1 / tau_-i.
    ``log_Z_tilted_fn(cav_mean, cav_var)`` must return the vector of
    log Z^_i (the log normalisers of the tilted distributions, eq. 3.57).

    Eq. 3.65 written in the numerically stable form of R&W eqs. 3.73-3.74
    (valid also for site_tau = 0), as an explicit sum of terms:

        log Z_EP = sum_i log Z^_i                                       (T1)
                 + 1/2 sum_i log(1 + tau~_i / tau_-i)                    (T2)
                 - sum_i log L_ii     ( = -1/2 log|B| )                  (T3)
                 + 1/2 nu~^T (Sigma - (T_- + S~)^-1) nu~                 (T4)
                 + 1/2 mu_-^T T_- (T_- + S~)^-1 (S~ mu_- - 2 nu~)        (T5)

    with T_- = diag(tau_-), S~ = diag(tau~), B = I + S~^1/2 K S~^1/2 = L L^T.
    (T2 + T3 are eq. 3.73's "-1/2 log|K + S~^-1| + 1/2 sum log(s2_-i + s2~_i)";
    T4 + T5 are eq. 3.74, the two quadratic terms of eq. 3.65.)
    """
    K = np.asarray(K, dtype=float)
    tau = np.asarray(site_tau, dtype=float)
    nu = np.asarray(site_nu, dtype=float)
    Sigma, mu, L = _posterior_from_sites(K, tau, nu)
    var = np.diag(Sigma)
    tau_cav = 1.0 / var - tau
    nu_cav = mu / var - nu
    cav_var = 1.0 / tau_cav
    cav_mean = nu_cav / tau_cav

    T1 = np.sum(log_Z_tilted_fn(cav_mean, cav_var))
    T2 = 0.5 * np.sum(np.log1p(tau / tau_cav))
    T3 = -np.sum(np.log(np.diag(L)))
    T4 = 0.5 * (nu @ (Sigma @ nu) - np.sum(nu * nu / (tau_cav + tau)))
    T5 = 0.5 * np.sum(cav_mean * tau_cav / (tau_cav + tau) * (tau * cav_mean - 2.0 * nu))
    return float(T1 + T2 + T3 + T4 + T5)


def _ep_result(K, y, site_tau, site_nu, n_sweeps, converged):
    Sigma, mu, _ = _posterior_from_sites(K, site_tau, site_nu)
    log_Z = ep_log_evidence_from_sites(
        K, site_tau, site_nu, lambda m, v: probit_log_Z_tilted(y, m, v)
    )
    return {
        "mean": mu,
        "var": np.diag(Sigma).copy(),
        "site_tau": site_tau.copy(),
        "site_nu": site_nu.copy(),
        "log_marginal_likelihood": log_Z,
        "n_sweeps": n_sweeps,
        "converged": converged,
    }


# ---------------------------------------------------------------------------
# 2. Sequential EP, probit likelihood (R&W Algorithm 3.5)
# ---------------------------------------------------------------------------
def ep_probit_reference(K, y, tol=1e-12, max_sweeps=500, order=None):
    """Sequential EP for the probit likelihood p(y|f) = Phi(y f), R&W Algorithm 3.5.

    Sites t~_i(f_i) = Z~_i N(f_i | nu~_i/tau~_i, 1/tau~_i); start from
    tau~ = nu~ = 0, Sigma = K, mu = 0.  For each site i (in ``order``, a
    permutation of 0..n-1, or natural order), each sweep:

        cavity (eq. 3.56):  tau_-i = 1/Sigma_ii - tau~_i,  nu_-i = mu_i/Sigma_ii - nu~_i
        tilted moments (eq. 3.58): mu^_i, s2^_i
        site update (eq. 3.59):  tau~_i <- 1/s2^_i - tau_-i   (clipped at >= 0)
                                 nu~_i  <- mu^_i/s2^_i - nu_-i
        rank-one update (eq. 3.70):
            Sigma <- Sigma - dtau / (1 + dtau Sigma_ii) s_i s_i^T,  s_i = Sigma[:, i]
            mu <- Sigma nu~

    After each sweep Sigma and mu are recomputed from scratch (R&W Alg. 3.5):
    Sigma = K - K S^1/2 B^-1 S^1/2 K, B = I + S^1/2 K S^1/2, mu = Sigma nu~.
    Stops when the largest change of any site tau~ or nu~ over a sweep is
    < tol (after at least 2 sweeps).  log Z_EP from eqs. 3.65 / 3.73-3.74
    (see ``ep_log_evidence_from_sites``).

    Returns dict: mean, var, site_tau, site_nu, log_marginal_likelihood,
    n_sweeps, converged.
    """
    K = np.array(K, dtype=float)
    y = np.asarray(y, dtype=float)
    n = K.shape[0]
    idx = np.arange(n) if order is None else np.asarray(order, dtype=int)
    site_tau = np.zeros(n)
    site_nu = np.zeros(n)
    Sigma = K.copy()
    mu = np.zeros(n)

    converged = False
    sweeps = 0
    while sweeps < max_sweeps:
        sweeps += 1
        tau_old = site_tau.copy()
        nu_old = site_nu.copy()
        for i in idx:
            tau_cav = 1.0 / Sigma[i, i] - site_tau[i]
            nu_cav = mu[i] / Sigma[i, i] - site_nu[i]
            _, mu_hat, s2_hat = probit_tilted_moments(y[i], nu_cav / tau_cav, 1.0 / tau_cav)
            tau_new = max(1.0 / s2_hat - tau_cav, 0.0)
            dtau = tau_new - site_tau[i]
            site_tau[i] = tau_new
            site_nu[i] = mu_hat / s2_hat - nu_cav
            s_i = Sigma[:, i].copy()
            Sigma = Sigma - (dtau / (1.0 + dtau * s_i[i])) * np.outer(s_i, s_i)
            mu = Sigma @ site_nu
        Sigma, mu, _ = _posterior_from_sites(K, site_tau, site_nu)
        delta = max(np.max(np.abs(site_tau - tau_old)), np.max(np.abs(site_nu - nu_old)))
        if sweeps >= 2 and delta < tol:
            converged = True
            break
    return _ep_result(K, y, site_tau, site_nu, sweeps, converged)


# ---------------------------------------------------------------------------
# 3. Parallel (damped) EP, probit likelihood
# ---------------------------------------------------------------------------
def ep_probit_parallel_reference(K, y, damping=0.5, tol=1e-12, max_sweeps=2000):
    """Parallel EP for the probit likelihood, damped in the natural parameters.

    Each sweep, all sites are updated from the *same* posterior marginals:
        cavities from (mu_i, Sigma_ii) (R&W eq. 3.56), tilted moments (eq. 3.58),
        proposals tau*_i = 1/s2^_i - tau_-i (clipped >= 0), nu*_i = mu^_i/s2^_i - nu_-i
        (eq. 3.59), then
            tau~ <- (1 - d) tau~ + d tau*,   nu~ <- (1 - d) nu~ + d nu*
    and the posterior is recomputed from scratch.  The fixed points are the
    same as those of sequential EP (every site satisfies eq. 3.59 exactly
    given its cavity).  Stops when the largest change in any site parameter
    over a sweep is < tol (after at least 2 sweeps).
    """
    K = np.array(K, dtype=float)
    y = np.asarray(y, dtype=float)
    n = K.shape[0]
    d = float(damping)
    site_tau = np.zeros(n)
    site_nu = np.zeros(n)

    converged = False
    sweeps = 0
    while sweeps < max_sweeps:
        sweeps += 1
        Sigma, mu, _ = _posterior_from_sites(K, site_tau, site_nu)
        var = np.diag(Sigma)
        tau_cav = 1.0 / var - site_tau
        nu_cav = mu / var - site_nu
        _, mu_hat, s2_hat = probit_tilted_moments(y, nu_cav / tau_cav, 1.0 / tau_cav)
        tau_prop = np.maximum(1.0 / s2_hat - tau_cav, 0.0)
        nu_prop = mu_hat / s2_hat - nu_cav
        tau_new = (1.0 - d) * site_tau + d * tau_prop
        nu_new = (1.0 - d) * site_nu + d * nu_prop
        delta = max(np.max(np.abs(tau_new - site_tau)), np.max(np.abs(nu_new - site_nu)))
        site_tau, site_nu = tau_new, nu_new
        if sweeps >= 2 and delta < tol:
            converged = True
            break
    return _ep_result(K, y, site_tau, site_nu, sweeps, converged)


def ep_parallel_reference_quad(K, log_liks, damping=0.5, tol=1e-10, max_sweeps=2000):
    """Damped parallel EP for any likelihood, site i's tilted moments by adaptive quadrature
    of ``log_liks[i]`` (:func:`tilted_moments_quad`), the posterior by the dense formulas
    of :func:`_posterior_from_sites`, as :func:`ep_probit_parallel_reference` does for the
    probit: ``mu^ = mu_-i + v_-i d1``, ``s2^ = v_-i + v_-i^2 d2`` (R&W eq. 3.58),
    proposals ``1/s2^ - tau_-i`` and ``mu^/s2^ - nu_-i`` (eq. 3.59), damped.  Slow (n
    quadratures a sweep): for tens of points.  Returns ``(site_tau, site_nu, mu, var)``."""
    K = np.array(K, dtype=float)
    n = K.shape[0]
    site_tau, site_nu = np.zeros(n), np.zeros(n)
    for sweep in range(1, max_sweeps + 1):
        Sigma, mu, _ = _posterior_from_sites(K, site_tau, site_nu)
        var = np.diag(Sigma)
        tau_cav, nu_cav = 1.0 / var - site_tau, mu / var - site_nu
        v_c, m_c = 1.0 / tau_cav, nu_cav / tau_cav
        moments = np.array([tilted_moments_quad(log_liks[i], m_c[i], v_c[i])
                            for i in range(n)])
        mu_hat = m_c + v_c * moments[:, 1]
        s2_hat = v_c + v_c ** 2 * moments[:, 2]
        tau_new = (1.0 - damping) * site_tau + damping * np.maximum(1.0 / s2_hat - tau_cav,
                                                                    0.0)
        nu_new = (1.0 - damping) * site_nu + damping * (mu_hat / s2_hat - nu_cav)
        delta = max(np.max(np.abs(tau_new - site_tau)), np.max(np.abs(nu_new - site_nu)))
        site_tau, site_nu = tau_new, nu_new
        if sweep >= 2 and delta < tol:
            break
    else:
        raise RuntimeError(f"reference EP did not converge in {max_sweeps} sweeps")
    Sigma, mu, _ = _posterior_from_sites(K, site_tau, site_nu)
    return site_tau, site_nu, mu, np.diag(Sigma)


# ---------------------------------------------------------------------------
# 4. Tilted moments by adaptive quadrature
# ---------------------------------------------------------------------------
_QUAD_KW = dict(epsabs=0.0, epsrel=1e-13, limit=500)
_LOG_DROP = 80.0  # integrate where the log integrand is within this of its max


def tilted_moments_quad(log_lik, mu, var, alpha=1.0):
    """log Z and its first two mu-derivatives by adaptive quadrature.

        Z(mu, var) = int exp(alpha log_lik(f)) N(f | mu, var) df      (R&W eq. 3.57
                                                                       with power alpha)
        d1 = d log Z / d mu     = E_t[f - mu] / var
        d2 = d^2 log Z / d mu^2 = Var_t[f] / var^2 - 1 / var

    (the usual Gaussian-prior identities, cf. R&W eq. 3.58 and its derivation),
    where E_t, Var_t are under the tilted density
    q(f) proportional to exp(alpha log_lik(f)) N(f | mu, var).

    Method.  Substitute f = mu + s x (s = sqrt(var)), so that
        Z = int exp(h(x)) dx,  h(x) = alpha log_lik(mu + s x) - x^2/2 - log(2 pi)/2.
    The mode x0 of h is found with scipy.optimize (Brent), a width s_x =
    min(1, (-h''(x0))^-1/2) is estimated by finite differences, and the
    integration limits are found by stepping out from x0 (doubling steps,
    starting at s_x) until h has dropped by more than 80 below h(x0); this
    covers truncated/skewed shapes whose width is not set by the curvature at
    the mode.  The range is split at x0 and at x0 +- s_x 4^k, and every piece
    is integrated with scipy.integrate.quad (epsabs=0, epsrel=1e-13,
    limit=500) on exp(h(x) - h(x0)) (h(x0) factored out, so Z never
    underflows).  E_t[x] is computed as x0 + E_t[x - x0], and Var_t[x] as
    E_t[(x - m)^2] with m the tilted mean, to avoid cancellation.  Then
        d1 = E_t[x] / s,   d2 = (Var_t[x] - 1) / var.

    ``log_lik`` is a python callable of f (called with scalars).
    Returns (log_Z, d1, d2) as floats.
    """
    mu = float(mu)
    var = float(var)
    alpha = float(alpha)
    s = math.sqrt(var)

    def h(x):
        with np.errstate(all="ignore"):
            val = alpha * float(log_lik(mu + s * x)) - 0.5 * x * x - 0.5 * LOG_2PI
        if math.isnan(val):
            return -math.inf
        return val

    # --- mode of h (Brent, downhill bracket search from around x = 0) ---
    res = scipy.optimize.minimize_scalar(
        lambda x: -h(x) if np.isfinite(h(x)) else 1e300,
        bracket=(-1.0, 1.0),
        method="brent",
        options={"xtol": 1e-12, "maxiter": 10000},
    )
    x0 = float(res.x)
    # make sure we did not end up somewhere silly
    for cand in (0.0,):
        if h(cand) > h(x0):
            x0 = cand
    h0 = h(x0)
    if not np.isfinite(h0):
        raise ValueError("log integrand is not finite at its mode")

    # --- width from curvature, capped at the prior width 1 ---
    s_x = 1.0
    for _ in range(3):
        dx = 1e-3 * s_x
        c = -(h(x0 + dx) - 2.0 * h0 + h(x0 - dx)) / (dx * dx)
        s_new = min(1.0, 1.0 / math.sqrt(c)) if c > 0 and np.isfinite(c) else 1.0
        if abs(s_new - s_x) <= 1e-2 * s_x:
            s_x = s_new
            break
        s_x = s_new

    # --- limits: step out until the log integrand has dropped by _LOG_DROP ---
    def find_limit(direction):
        dist = s_x
        while h(x0 + direction * dist) > h0 - _LOG_DROP:
            dist *= 2.0
            if dist > 1e6:
                break
        return x0 + direction * dist

    lo = find_limit(-1.0)
    hi = find_limit(+1.0)

    # breakpoints: x0, x0 +- s_x 4^k inside (lo, hi)
    pts = [x0]
    k = 1.0
    while s_x * k < max(x0 - lo, hi - x0):
        for p in (x0 - s_x * k, x0 + s_x * k):
            if lo < p < hi:
                pts.append(p)
        k *= 4.0
    pts = np.unique(np.array([lo, hi] + pts))

    def integrate(fn):
        total = 0.0
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", scipy.integrate.IntegrationWarning)
            for a, b in zip(pts[:-1], pts[1:]):
                total += scipy.integrate.quad(fn, a, b, **_QUAD_KW)[0]
        return total

    def w(x):
        return math.exp(h(x) - h0)

    Z0 = integrate(w)
    log_Z = h0 + math.log(Z0)
    m_off = integrate(lambda x: (x - x0) * w(x)) / Z0
    mean_x = x0 + m_off
    var_x = integrate(lambda x: (x - mean_x) ** 2 * w(x)) / Z0

    d1 = mean_x / s
    d2 = (var_x - 1.0) / var
    return float(log_Z), float(d1), float(d2)


# ---------------------------------------------------------------------------
# Multiclass GWI (Wild, Hu & Sejdinovic 2022)
# ---------------------------------------------------------------------------
def gaussian_w2_squared(m1, K1, m2, K2):
    """W_2^2(N(m1, K1), N(m2, K2)) = |m1 - m2|^2 + tr K1 + tr K2 - 2 tr (K1^1/2 K2 K1^1/2)^1/2
    (Gelbrich / Dowson & Landau), with matrix square roots from scipy.linalg.sqrtm."""
    root = scipy.linalg.sqrtm(K1)
    cross = scipy.linalg.sqrtm(root @ K2 @ root)
    d = np.asarray(m1, float) - np.asarray(m2, float)
    return float(d @ d + np.trace(K1) + np.trace(K2) - 2.0 * np.trace(cross).real)


def prob_largest_quad(mean, var, j):
    """P(f_j > f_l for all l != j) for independent f_l ~ N(mean_l, var_l):
    int phi(u) prod_{l != j} Phi((mean_j + sd_j u - mean_l) / sd_l) du by scipy quad."""
    mean = np.asarray(mean, float)
    sd = np.sqrt(np.asarray(var, float))
    others = [l for l in range(mean.size) if l != j]

    def integrand(u):
        t = mean[j] + sd[j] * u
        return scipy.stats.norm.pdf(u) * np.prod(scipy.special.ndtr((t - mean[others]) / sd[others]))

    val, _ = scipy.integrate.quad(integrand, -40.0, 40.0, points=[0.0], epsabs=1e-14,
                                  epsrel=1e-12, limit=500)
    return val


def svgp_moments_dense(k_diag, K_xz, K_zz, delta, a, L):
    """m(x) = k(x, Z) a and r(x, x) = k(x, x) - k(x, Z) (K_ZZ + delta I)^-1 k(Z, x)
    + k(x, Z) L L^T k(Z, x), with explicit matrix inverses (one class)."""
    inv = np.linalg.inv(K_zz + delta * np.eye(K_zz.shape[0]))
    mean = K_xz @ a
    var = k_diag - np.einsum("ij,jk,ik->i", K_xz, inv, K_xz) + np.sum((K_xz @ L) ** 2, axis=1)
    return mean, var


# ---------------------------------------------------------------------------
# Multinomial probit EP in the augmented space
# ---------------------------------------------------------------------------
def nested_ep_augmented(K, y, alpha, beta, Phi=None, Phi_test=None):
    """The Gaussian approximation of the multinomial probit GP given scalar sites, built
    in the augmented space g = (f_1..f_C stacked class by class, u_1..u_n) with the prior
    N(0, blockdiag(K, ..., K, I_n)) and, for every point i and class j != y_i, a site
    exp(-alpha_ij s^2 / 2 + beta_ij s) on s = f_i,y - f_i,j + u_i (Riihimaki et al. 2013).

    With ``Phi`` (n, m) the latent functions are f_c = Phi v_c and g = (v_1..v_C, u) with
    the prior N(0, I) (the weight-space form of K = Phi Phi^T, for inducing points; K is
    then ignored); ``Phi_test`` (k, m) adds the predictive mean (k, C) and covariance
    (k, C, C) of Phi_test v to the return value.

    Returns (mean of f (n, C), covariance blocks of f_i (n, C, C), EP log evidence
    log int p0 prod t~ + sum [log Phi(m_/sqrt(1+v_)) + Psi(cavity) - Psi(marginal)])."""
    n, C = alpha.shape
    if Phi is None:
        load, prior_f = np.eye(n), np.kron(np.eye(C), K)
    else:
        load, prior_f = Phi, np.eye(C * Phi.shape[1])
    r = load.shape[1]                   # latent coordinates per class
    A = np.zeros((n * C + n, r * C + n))
    A[:n * C, :r * C] = np.kron(np.eye(C), load)      # f (and u) from the state g
    A[n * C:, r * C:] = np.eye(n)
    N = r * C + n
    prior = np.zeros((N, N))
    prior[:r * C, :r * C] = prior_f
    prior[r * C:, r * C:] = np.eye(n)
    W, a, b = [], [], []
    for i in range(n):
        for j in range(C):
            if j != y[i]:
                w = np.zeros(n * C + n)
                w[y[i] * n + i] += 1.0
                w[j * n + i] -= 1.0
                w[n * C + i] += 1.0
                W.append(A.T @ w)
                a.append(alpha[i, j])
                b.append(beta[i, j])
    W, a, b = np.array(W).T, np.array(a), np.array(b)
    prec = np.linalg.inv(prior) + (W * a) @ W.T
    Sigma = np.linalg.inv(prec)
    eta = W @ b
    mu = Sigma @ eta
    log_z = 0.5 * mu @ eta + 0.5 * (np.linalg.slogdet(Sigma)[1] - np.linalg.slogdet(prior)[1])
    for k in range(W.shape[1]):
        ms, vs = W[:, k] @ mu, W[:, k] @ Sigma @ W[:, k]
        vc = 1.0 / (1.0 / vs - a[k])
        mc = vc * (ms / vs - b[k])
        psi = lambda m, v: 0.5 * m * m / v + 0.5 * math.log(v)       # noqa: E731
        log_z += log_ndtr_ref(mc / math.sqrt(1.0 + vc)) + psi(mc, vc) - psi(ms, vs)
    f_mu, f_cov = A @ mu, A @ Sigma @ A.T
    mean = f_mu[:n * C].reshape(C, n).T
    cov = np.array([[[f_cov[c * n + i, d * n + i] for d in range(C)] for c in range(C)]
                    for i in range(n)])
    if Phi_test is None:
        return mean, cov, float(log_z)
    At = np.kron(np.eye(C), Phi_test)
    k = Phi_test.shape[0]
    t_mu, t_cov = At @ mu[:r * C], At @ Sigma[:r * C, :r * C] @ At.T
    t_cov = np.array([[[t_cov[c * k + i, d * k + i] for d in range(C)] for c in range(C)]
                      for i in range(k)])
    return mean, cov, float(log_z), t_mu.reshape(C, k).T, t_cov


# ---------------------------------------------------------------------------
# Finite differences
# ---------------------------------------------------------------------------
def fd_grad(f, x, h):
    """Five-point central differences of a scalar function of a vector (step h per entry)."""
    g = np.empty(x.size)
    for i in range(x.size):
        e = np.zeros(x.size)
        e[i] = h
        g[i] = (-f(x + 2 * e) + 8 * f(x + e) - 8 * f(x - e) + f(x - 2 * e)) / (12 * h)
    return g


def assert_grad(g, fd, rtol=1e-5):
    """Entry-wise relative agreement; entries far below the largest are held to rtol * max."""
    np.testing.assert_allclose(g, fd, rtol=rtol, atol=rtol * np.max(np.abs(fd)))
