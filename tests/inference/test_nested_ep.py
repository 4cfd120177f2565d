"""Nested EP with the multinomial probit likelihood against independent truth:

* the posterior, evidence and gradient weights against a dense build of the augmented
  model (f, u) with its scalar sites (``reference.nested_ep_augmented``), which does not
  use the site form in f that fastep derives by integrating u out;
* that site form against quadrature over u;
* two classes against binary probit EP (the multinomial probit with C = 2 is a probit on
  (f_1 - f_2) / sqrt 2);
* the evidence gradient against finite differences of the converged evidence;
* posterior marginals and predictive class probabilities against a Gibbs sampler with data
  augmentation (Albert & Chib 1993: utilities z = f + e, y = argmax z), which shares
  nothing with EP;
* the predictive probabilities and ``log_prob`` against Monte Carlo.

Run with ``-s`` to see the measured errors.
"""
import functools

import numpy as np
import pytest
from scipy import integrate, special

import fastep
from fastep.inference import nested_ep as ne
from fastep.kernels import RBF
from fastep.likelihoods import MultinomialProbit, Probit

from helpers.reference import assert_grad, fd_grad, nested_ep_augmented


def _small(seed=0, n=12, C=3):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2))
    y = rng.integers(0, C, n)
    return X, y, rng.uniform(0.0, 2.0, (n, C)), rng.normal(size=(n, C))


def test_posterior_and_evidence_match_the_augmented_model():
    X, y, alpha, beta = _small()
    K = RBF(variance=2.0, lengthscale=1.0)(X)
    post = ne.posterior(K, alpha, beta, y)
    mean, cov, log_z = nested_ep_augmented(K, y, alpha, beta)
    np.testing.assert_allclose(post.mean, mean, atol=1e-10)
    np.testing.assert_allclose(post.cov, cov, atol=1e-10)
    assert ne.log_evidence(post, y, alpha, beta) == pytest.approx(log_z, rel=1e-10)


def test_site_in_f_is_the_inner_sites_with_u_integrated_out():
    X, y, alpha, beta = _small(1)
    pi, nu = ne.site_precisions(alpha, beta, y)
    rng = np.random.default_rng(2)
    for i in range(4):
        P = pi[i].sum()
        T = np.diag(pi[i]) - np.outer(pi[i], pi[i]) / P
        b = nu[i] - pi[i] * nu[i].sum() / P
        sb = beta[i][np.arange(3) != y[i]].sum()

        def log_site(f):
            def g(u):
                s = f[y[i]] - f + u
                e = -0.5 * alpha[i] * s * s + beta[i] * s
                return np.exp(-0.5 * u * u + e[np.arange(3) != y[i]].sum()) / np.sqrt(2 * np.pi)
            return np.log(integrate.quad(g, -np.inf, np.inf, epsabs=0, epsrel=1e-12)[0])
        for f in rng.normal(size=(3, 3)):
            want = -0.5 * f @ T @ f + b @ f - 0.5 * np.log(P) + 0.5 * sb * sb / P
            assert log_site(f) == pytest.approx(want, abs=1e-10)


def test_gradient_weights_and_predictive_match_dense_algebra():
    X, y, alpha, beta = _small(3)
    k = RBF(variance=1.5, lengthscale=0.8)
    K, n, C = k(X), 12, 3
    post = ne.posterior(K, alpha, beta, y)
    pi, nu = ne.site_precisions(alpha, beta, y)
    T = np.zeros((n * C, n * C))
    bvec = np.zeros(n * C)
    for i in range(n):
        P = pi[i].sum()
        Ti = np.diag(pi[i]) - np.outer(pi[i], pi[i]) / P
        for c in range(C):
            bvec[c * n + i] = nu[i, c] - pi[i, c] * nu[i].sum() / P
            for d in range(C):
                T[c * n + i, d * n + i] = Ti[c, d]
    Kb = np.kron(np.eye(C), K)
    Sigma = np.linalg.inv(np.linalg.inv(Kb) + T)
    a = np.linalg.solve(Kb, Sigma @ bvec)
    R = T - T @ Sigma @ T
    W = 0.5 * sum(np.outer(a[c * n:(c + 1) * n], a[c * n:(c + 1) * n])
                  - R[c * n:(c + 1) * n, c * n:(c + 1) * n] for c in range(C))
    np.testing.assert_allclose(ne.gradient_weights(post), W, atol=1e-10)
    Xs = np.random.default_rng(4).normal(size=(5, 2))
    Ks = np.kron(np.eye(C), k(X, Xs))
    mean, cov = ne.predict_latent(post, k(X, Xs), k.diag(Xs))
    full = np.kron(np.eye(C), k(Xs)) - Ks.T @ R @ Ks
    np.testing.assert_allclose(mean, (Ks.T @ a).reshape(C, 5).T, atol=1e-10)
    for j in range(5):
        np.testing.assert_allclose(cov[j], full[j::5, j::5], atol=1e-10)


def test_two_classes_are_binary_probit_ep():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(40, 2))
    y = (X[:, 0] + 0.5 * rng.normal(size=40) > 0).astype(int)
    k = RBF(variance=3.0, lengthscale=1.0)
    nested = ne.nested_ep(k(X), y, 2, tol=1e-10, max_iter=500)
    binary = fastep.ep(k(X), np.where(y == 0, 1.0, -1.0), Probit(), tol=1e-11)
    assert nested.converged
    assert nested.log_marginal_likelihood == pytest.approx(binary.log_marginal_likelihood,
                                                           rel=1e-8)
    Xs = rng.normal(size=(6, 2))
    m, V = ne.predict_latent(nested.posterior, k(X, Xs), k.diag(Xs))
    mb, vb = binary.predict_latent(k(X, Xs), k.diag(Xs))
    np.testing.assert_allclose(MultinomialProbit(2).predict_proba(m, V)[:, 0],
                               Probit().predict_proba(mb, vb), atol=1e-8)


@pytest.mark.parametrize("ard", [False, True])
def test_evidence_gradient_matches_finite_differences(ard):
    X, y, _, _ = _small(5, n=20)
    k = RBF(variance=2.0, lengthscale=[0.8, 1.3] if ard else 1.0)

    def log_z(theta):
        kk = k.clone_with_theta(theta)
        return ne.nested_ep(kk(X), y, 3, tol=1e-12, max_iter=2000).log_marginal_likelihood
    res = ne.nested_ep(k(X), y, 3, tol=1e-12, max_iter=2000)
    assert res.converged
    grad = k.gradient_contract(X, ne.gradient_weights(res.posterior))
    assert_grad(grad, fd_grad(log_z, k.theta, 1e-4), rtol=1e-5)
    # the converged evidence is the augmented model's at the same sites
    ref = nested_ep_augmented(k(X), y, res.site_tau, res.site_nu)[2]
    assert res.log_marginal_likelihood == pytest.approx(ref, rel=1e-10)


# ---------------------------------------------------------------------------------------
# Sparse: the classes share inducing inputs, f_c = Phi v_c
# ---------------------------------------------------------------------------------------
def test_sparse_posterior_evidence_and_predictive_match_the_weight_space_model():
    X, y, alpha, beta = _small(3, n=14)
    rng = np.random.default_rng(4)
    Phi, Phi_t = rng.normal(size=(14, 5)), rng.normal(size=(4, 5))
    post = ne.sparse_posterior(Phi, alpha, beta, y)
    mean, cov, log_z, t_mean, t_cov = nested_ep_augmented(None, y, alpha, beta, Phi, Phi_t)
    np.testing.assert_allclose(post.mean, mean, atol=1e-10)
    np.testing.assert_allclose(post.cov, cov, atol=1e-10)
    assert ne.log_evidence(post, y, alpha, beta) == pytest.approx(log_z, rel=1e-10)
    off = rng.uniform(0.1, 1.0, 4)              # prior variance off the inducing subspace
    p_mean, p_cov = ne.sparse_predict_latent(post, Phi_t, (Phi_t ** 2).sum(1) + off)
    np.testing.assert_allclose(p_mean, t_mean, atol=1e-10)
    np.testing.assert_allclose(p_cov, t_cov + off[:, None, None] * np.eye(3), atol=1e-10)
    # d log Z / d Phi = 2 W Phi, W the dense gradient weights of K = Phi Phi^T
    W = ne.gradient_weights(ne.posterior(Phi @ Phi.T, alpha, beta, y))
    np.testing.assert_allclose(ne.sparse_feature_gradient(post, Phi), 2.0 * W @ Phi,
                               atol=1e-10)


def nested_problem(X, y, kernel, Z=None, tol=1e-12):
    from fastep.models.nested_problem import NestedGP
    return NestedGP(X, y, kernel, 3, None, tol, 2000, Z)


def test_sparse_evidence_gradient_matches_finite_differences():
    X, y, _, _ = _small(5, n=20)
    problem = nested_problem(X, y, RBF(variance=2.0, lengthscale=[0.8, 1.3]), X[:6] + 0.1)
    log_z, grad, res = problem.evidence()
    assert res.converged
    assert_grad(grad, fd_grad(lambda t: problem.with_theta(t).evidence()[0], problem.theta,
                              1e-4), rtol=1e-5)
    # the converged evidence is the weight-space model's at the same sites
    V = problem._features(problem._uu(), X)
    ref = nested_ep_augmented(None, y, res.site_tau, res.site_nu, V.T)[2]
    assert log_z == pytest.approx(ref, rel=1e-10)


def test_sparse_with_every_input_inducing_is_dense_nested_ep():
    X, y, _, _ = _small(6, n=16)
    k = RBF(variance=1.5, lengthscale=0.9)
    dense, sparse = nested_problem(X, y, k), nested_problem(X, y, k, X.copy())
    (lz_d, g_d, r_d), (lz_s, g_s, r_s) = dense.evidence(), sparse.evidence()
    # K_uu's jitter (1e-8 of its mean diagonal) is the only difference
    assert lz_s == pytest.approx(lz_d, rel=1e-7)
    np.testing.assert_allclose(g_s, g_d, rtol=1e-6)
    Xs = np.random.default_rng(7).normal(size=(5, 2))
    for a, b in zip(dense.latent(r_d, Xs), sparse.latent(r_s, Xs)):
        np.testing.assert_allclose(b, a, atol=1e-6)


# ---------------------------------------------------------------------------------------
# Gibbs sampling with data augmentation: the truth of the n = 60, C = 3 problem
# ---------------------------------------------------------------------------------------
def gibbs_multinomial_probit(K, y, C, n_chains, n_iter, burn, seed, Ks, kss):
    """Albert & Chib's sampler of p(f, z | y): z_i = f_i + e_i with y_i = argmax z_i.
    z | f, y: each z_ij truncated normal (z_iy above the others, the others below z_iy);
    f_c | z_c: GP regression with unit noise.  Returns the per-chain means of f and f^2
    (n_chains, C, n) and the predictive class frequencies at the test inputs (m, C)
    (f* drawn given f, then argmax(f* + e))."""
    rng = np.random.default_rng(seed)
    n = K.shape[0]
    A = np.linalg.solve(K + np.eye(n), K).T                   # K (K + I)^-1
    L = np.linalg.cholesky(K - A @ K + 1e-10 * np.eye(n))
    B = np.linalg.solve(K + 1e-6 * np.eye(n), Ks).T            # f* | f mean weights
    sd = np.sqrt(np.maximum(kss - np.einsum("mn,nm->m", B, Ks), 0.0))
    idx = np.arange(n)
    is_y = np.zeros((C, n), bool)
    is_y[y, idx] = True
    F = np.zeros((n_chains, C, n))
    Z = np.where(is_y, 0.5, -0.5) * np.ones((n_chains, 1, 1))
    s1, s2 = np.zeros_like(F), np.zeros_like(F)
    counts = np.zeros((C, Ks.shape[1]))
    for it in range(burn + n_iter):
        zy = Z[:, y, idx]
        u = rng.uniform(size=F.shape)
        below = F + special.ndtri(u * special.ndtr(zy[:, None, :] - F))
        Z = np.where(is_y, Z, below)
        top = np.where(is_y, -np.inf, Z).max(1)
        fy = F[:, y, idx]
        Z[:, y, idx] = fy - special.ndtri(rng.uniform(size=fy.shape) * special.ndtr(fy - top))
        F = Z @ A.T + rng.standard_normal(F.shape) @ L.T
        if it >= burn:
            s1 += F
            s2 += F * F
            Fs = F @ B.T + rng.standard_normal((n_chains, C, B.shape[0])) * sd
            label = np.argmax(Fs + rng.standard_normal(Fs.shape), axis=1)
            for c in range(C):
                counts[c] += (label == c).sum(0)
    return s1 / n_iter, s2 / n_iter, counts.T / (n_iter * n_chains)


def _mcmc_problem():
    rng = np.random.default_rng(2)
    n, C = 60, 3
    X = np.sort(rng.uniform(0.0, 10.0, n))[:, None]
    k = RBF(variance=1.0, lengthscale=1.5)
    K = k(X)
    L = np.linalg.cholesky(K + 1e-8 * np.eye(n))
    F0 = 1.5 * (L @ rng.standard_normal((n, C))).T
    y = np.argmax(F0 + rng.standard_normal((C, n)), axis=0)
    assert np.all(np.bincount(y, minlength=C) >= 10)
    return X, y, k


@functools.lru_cache(maxsize=None)
def _mcmc():
    X, y, k = _mcmc_problem()
    Xs = np.linspace(-1.0, 11.0, 13)[:, None]
    m1, m2, proba = gibbs_multinomial_probit(k(X), y, 3, 64, 3000, 300, 1, k(X, Xs),
                                             k.diag(Xs))
    mean = m1.mean(0)
    var = (m2 - 2 * mean * m1 + mean * mean).mean(0)
    se = m1.std(0, ddof=1) / np.sqrt(m1.shape[0])
    return mean, var, se, Xs, proba


def test_marginals_and_probabilities_match_gibbs_sampling():
    X, y, k = _mcmc_problem()
    mean, var, se, Xs, proba = _mcmc()
    sd = np.sqrt(var)
    assert np.max(se / sd) < 0.03                       # MC error well below 0.1 sd
    res = ne.nested_ep(k(X), y, 3, tol=1e-9, max_iter=500)
    assert res.converged
    ep_mean = res.posterior.mean.T
    ep_var = np.einsum("icc->ci", res.posterior.cov)
    err_mean = np.max(np.abs(ep_mean - mean) / sd)
    err_var = np.max(np.abs(ep_var / var - 1.0))
    m, V = ne.predict_latent(res.posterior, k(X, Xs), k.diag(Xs))
    err_p = np.max(np.abs(MultinomialProbit(3).predict_proba(m, V) - proba))
    print(f"\nnested EP vs Gibbs (n = 60, C = 3): worst |mean - MCMC| / sd {err_mean:.4f}, "
          f"worst |var / MCMC - 1| {err_var:.4f}, worst class-probability gap {err_p:.4f}")
    assert err_mean < 0.1
    assert err_var < 0.2
    assert err_p < 0.02


def test_predictive_probabilities_and_log_prob_match_monte_carlo():
    rng = np.random.default_rng(7)
    C, m = 4, 6
    mean = rng.normal(size=(m, C))
    A = rng.normal(size=(m, C, C)) * 0.7
    cov = A @ A.transpose(0, 2, 1) + 0.1 * np.eye(C)
    got = MultinomialProbit(C).predict_proba(mean, cov)
    draws = 400_000
    for i in range(m):
        z = rng.multivariate_normal(mean[i], cov[i] + np.eye(C), size=draws)
        freq = np.bincount(np.argmax(z, 1), minlength=C) / draws
        np.testing.assert_allclose(got[i], freq, atol=0.01)
    f = rng.normal(size=(m, C))
    y = rng.integers(0, C, m)
    e = rng.standard_normal((draws, C))
    for i in range(m):
        freq = np.mean(np.argmax(f[i] + e, 1) == y[i])
        assert np.exp(MultinomialProbit(C).log_prob(y[i:i + 1], f[i:i + 1])[0]) == \
            pytest.approx(freq, abs=0.003)


def test_bad_n_classes_is_a_value_error():
    for bad in (1, 2.5, True, "3"):
        with pytest.raises(ValueError, match="n_classes must be an integer >= 2"):
            MultinomialProbit(bad)
