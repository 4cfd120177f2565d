"""GWI's inference (seed 002; fastep.inference.gwi): the W2 estimator against the exact W2
between Gaussians (scipy.linalg.sqrtm), the objective's gradients against five-point
finite differences, the variational moments against explicit matrix inverses, and the
tempering against a bounded scalar minimiser."""
import numpy as np
import pytest
from scipy.optimize import minimize_scalar

from fastep.inference import gwi
from fastep.kernels import RBF
from fastep.likelihoods import RobustMax
from helpers.reference import assert_grad, fd_grad


@pytest.fixture(scope="module")
def gaussians():
    rng = np.random.default_rng(4)
    X = rng.normal(size=(25, 2))
    K = RBF(1.5, 0.8)(X) + 1e-8 * np.eye(25)
    A = rng.normal(size=(25, 25))
    R = A @ A.T / 25 + 0.05 * np.eye(25)
    return K, R, rng.normal(size=25)


def test_w2_estimator_is_exact_w2_over_n_at_full_sample(gaussians, ref):
    K, R, m_q = gaussians
    n = K.shape[0]
    exact = ref.gaussian_w2_squared(np.full(n, 0.3), K, m_q, R)
    est = gwi.w2_squared(0.3, m_q, np.diag(K), np.diag(R), K, R)
    assert est == pytest.approx(exact / n, rel=1e-10)
    assert gwi.w2_squared(0.0, np.zeros(n), np.diag(K), np.diag(K), K, K) == pytest.approx(
        0.0, abs=1e-10)


def test_w2_estimator_gradient(gaussians):
    K, R, m_q = gaussians
    n = K.shape[0]
    _, g_m, g_r, g_R = gwi.w2_squared(0.3, m_q, np.diag(K), np.diag(R), K, R, return_grad=True)
    assert_grad(g_m, fd_grad(lambda x: gwi.w2_squared(0.3, x, np.diag(K), np.diag(R), K, R),
                             m_q, 1e-3))
    assert_grad(g_r, fd_grad(lambda x: gwi.w2_squared(0.3, m_q, np.diag(K), x, K, R),
                             np.diag(R).copy(), 1e-3))
    # symmetric perturbations R + t (E_ij + E_ji): derivative 2 G_ij off the diagonal
    iu = np.triu_indices(n)

    def sym(x):
        S = np.zeros((n, n))
        S[iu] = x
        return S + np.triu(S, 1).T

    f = lambda x: gwi.w2_squared(0.3, m_q, np.diag(K), np.diag(R), K, sym(x))
    scale = np.where(iu[0] == iu[1], 1.0, 2.0)
    assert_grad(scale * g_R[iu], fd_grad(f, R[iu], 1e-4))


@pytest.fixture(scope="module")
def problem():
    rng = np.random.default_rng(5)
    N, D, J, M, NS = 30, 2, 3, 6, 8
    X = rng.normal(size=(N, D))
    y = rng.integers(0, J, N)
    k = RBF(1.3, 0.8)
    Z = X[rng.choice(N, M, replace=False)]
    C = gwi.inducing_cholesky(k, Z)
    f = gwi.gwi_factors(k, X, Z, C)
    sub = gwi.subsample(k, X, f, rng.choice(N, NS, replace=False))
    p = gwi.initial_params(f, y, J, linear_dim=D)
    p.a += rng.normal(size=p.a.shape)
    p.W += 0.3 * rng.normal(size=p.W.shape)
    p.b += rng.normal(size=J)
    p.L += 0.3 * np.tril(rng.normal(size=p.L.shape))
    return dict(X=X, y=y, k=k, Z=Z, C=C, f=f, sub=sub, p=p, J=J, M=M, D=D)


@pytest.mark.parametrize("squared", [True, False], ids=["W2^2", "W2"])
def test_objective_gradient_matches_finite_differences(problem, squared):
    P = problem
    lik = RobustMax(P["J"])

    def value(theta):
        q = gwi.GWIParams.unpack(theta, P["J"], P["M"], P["D"])
        return gwi.gwi_objective(q, P["f"], P["sub"], P["X"], P["y"], lik, 0.1, squared)[0]

    v, grad, parts = gwi.gwi_objective(P["p"], P["f"], P["sub"], P["X"], P["y"], lik, 0.1,
                                       squared)
    reg = parts["w2"].sum() if squared else np.sqrt(parts["w2"].sum())
    assert v == pytest.approx(parts["nell"] + reg, rel=1e-14)
    theta = P["p"].pack()
    assert_grad(grad.pack(), fd_grad(value, theta, 1e-4))


def test_minibatch_objective_is_scaled_likelihood(problem):
    P = problem
    lik = RobustMax(P["J"])
    rows = np.arange(0, 30, 3)
    v, _, parts = gwi.gwi_objective(P["p"], P["f"], P["sub"], P["X"], P["y"], lik, rows=rows,
                                    scale=3.0)
    mean, var, _ = gwi.variational_moments(P["p"], P["f"].V[rows], P["f"].resid[rows],
                                           P["X"][rows])
    assert parts["nell"] == pytest.approx(-3.0 * lik.expected_log_lik(mean, var, P["y"][rows]),
                                          rel=1e-13)


def test_moments_match_dense_formula(problem, ref):
    # whitened parameters <-> the paper's a_j, L_j (explicit inverse of K_ZZ + delta I)
    P = problem
    k, Z, C, p, X = P["k"], P["Z"], P["C"], P["p"], P["X"]
    mean, var, _ = gwi.variational_moments(p, P["f"].V, P["f"].resid, X)
    K_zz = k(Z)
    delta = gwi.JITTER * np.mean(np.diag(K_zz))
    Cinv_T = np.linalg.inv(C).T
    for j in range(P["J"]):
        m_ref, v_ref = ref.svgp_moments_dense(k.diag(X), k(X, Z), K_zz, delta, Cinv_T @ p.a[j],
                                              Cinv_T @ p.L[j])
        np.testing.assert_allclose(mean[:, j], m_ref + X @ p.W[j] + p.b[j], rtol=1e-9,
                                   atol=1e-12)
        np.testing.assert_allclose(var[:, j], v_ref, rtol=1e-9, atol=1e-12)


def test_temper_minimises_log_loss():
    rng = np.random.default_rng(6)
    J, n = 4, 200
    y = rng.integers(0, J, n)
    mean = rng.normal(size=(n, J)) + 1.5 * (y[:, None] == np.arange(J))
    var = rng.uniform(0.05, 0.3, (n, J))
    lik = RobustMax(J)
    T, before, after = gwi.temper(mean, var, y, lik)

    def loss(log_t):
        S = lik.prob_largest(mean, var * np.exp(log_t))[np.arange(n), y]
        return -np.sum(np.log(0.01 / 3 + (1 - 0.01 - 0.01 / 3) * S))

    best = minimize_scalar(loss, bounds=(np.log(1e-3), np.log(1e3)), method="bounded",
                           options={"xatol": 1e-8})
    assert np.log(T) == pytest.approx(best.x, abs=1e-4)
    assert after == pytest.approx(loss(np.log(T)), rel=1e-12) and after < before
    value, grad = gwi.tempered_log_loss(0.3, mean, var, y, lik)
    assert value == pytest.approx(loss(0.3), rel=1e-13)
    assert_grad(np.array([grad]), fd_grad(lambda x: gwi.tempered_log_loss(x[0], mean, var, y,
                                                                            lik)[0],
                                          np.array([0.3]), 1e-3))
