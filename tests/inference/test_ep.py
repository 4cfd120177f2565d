"""Dense EP (fastep.ep) against independent truth.

Truth: exact GP regression (EP is exact for a Gaussian likelihood), the slow NumPy
sequential EP of R&W Algorithm 3.5 (tests/helpers/reference.py), central finite differences of
log Z_EP, adaptive quadrature of the tilted moments, a dense inverse for the posterior
from the sites, and closed forms (n = 1, independent sites).
"""
import contextlib
import math
import warnings

import numpy as np
import pytest
import scipy.special as sc

import fastep
from fastep.inference.ep import posterior_from_sites
from fastep.kernels import RBF, Matern32
from fastep.likelihoods import Gaussian, CustomLikelihood, Logistic, Probit

METHODS = ["parallel", "sequential"]
TIGHT = dict(tol=1e-10, max_iter=1000)


def _data(n, d=2, seed=0, flip=0.3):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = np.where(X[:, 0] + flip * rng.normal(size=n) > 0, 1.0, -1.0)
    return X, y


def _ep_quiet(*args, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("error", fastep.ConvergenceWarning)
        return fastep.ep(*args, **kw)


# --------------------------------------------------------------------------------------
# Gaussian likelihood: EP is exact GP regression
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("method", METHODS)
def test_gaussian_likelihood_is_exact_regression(method, ref):
    rng = np.random.default_rng(5)
    X = rng.uniform(-3, 3, size=(40, 1))
    Xs = np.linspace(-4, 4, 15)[:, None]
    y = np.sin(2 * X[:, 0]) + 0.2 * rng.normal(size=40)
    kern = RBF(variance=1.3, lengthscale=0.7)
    K, Ks = kern(X), kern(X, Xs)
    s2 = 0.05
    exact = ref.exact_gp_regression(K, y, s2, K_star=Ks, k_star_diag=kern.diag(Xs))
    res = _ep_quiet(K, y, Gaussian(s2), method=method, **TIGHT)
    assert res.converged
    np.testing.assert_allclose(res.mean, exact["mean"], rtol=1e-8, atol=1e-12)
    np.testing.assert_allclose(res.var, exact["var"], rtol=1e-8)
    assert res.log_marginal_likelihood == pytest.approx(exact["log_marginal_likelihood"],
                                                        rel=1e-8)
    # sites of the Gaussian likelihood are the likelihood itself: tau = 1/s2, nu = y/s2
    np.testing.assert_allclose(res.site_tau, 1.0 / s2, rtol=1e-8)
    np.testing.assert_allclose(res.site_nu, y / s2, rtol=1e-8, atol=1e-10)
    mean_s, var_s = res.predict_latent(Ks, kern.diag(Xs))
    np.testing.assert_allclose(mean_s, exact["mean_star"], rtol=1e-8, atol=1e-12)
    np.testing.assert_allclose(var_s, exact["var_star"], rtol=1e-8, atol=1e-14)


# --------------------------------------------------------------------------------------
# Probit EP against the slow reference (R&W Algorithm 3.5)
# --------------------------------------------------------------------------------------
@pytest.fixture(scope="module", params=[40, 260], ids=["n40", "n260"])
def probit_problem(request, ref):
    n = request.param
    X, y = _data(n, seed=n)
    K = RBF(variance=2.0, lengthscale=1.0)(X)
    if n > 256:          # the sequential engine works in blocks of 256 sites
        K += 1e-8 * np.eye(n)
    r = ref.ep_probit_reference(K, y, tol=1e-11)
    assert r["converged"]
    results = {m: _ep_quiet(K, y, Probit(), method=m, **TIGHT) for m in METHODS}
    return K, y, r, results


def _close(a, b, what):
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-9, err_msg=what)


@pytest.mark.parametrize("method", METHODS)
def test_probit_matches_reference(probit_problem, method, ref):
    K, y, r, results = probit_problem
    res = results[method]
    assert res.converged and res.method == method
    for key in ("mean", "var", "site_tau", "site_nu"):
        _close(getattr(res, key), r[key], key)
    assert res.log_marginal_likelihood == pytest.approx(r["log_marginal_likelihood"], rel=1e-6)
    # the evidence formula applied to fastep's own sites (independent code path)
    lz = ref.ep_log_evidence_from_sites(K, res.site_tau, res.site_nu,
                                        lambda m, v: ref.probit_log_Z_tilted(y, m, v))
    assert res.log_marginal_likelihood == pytest.approx(lz, rel=1e-9)
    # cavities are those of the returned posterior (R&W eq. 3.56)
    tau_c = 1.0 / res.var - res.site_tau
    np.testing.assert_allclose(res.cavity_var, 1.0 / tau_c, rtol=1e-9)
    np.testing.assert_allclose(res.cavity_mean, (res.mean / res.var - res.site_nu) / tau_c,
                               rtol=1e-8, atol=1e-10)


def test_probit_methods_same_fixed_point(probit_problem):
    _, _, _, results = probit_problem
    a, b = results["parallel"], results["sequential"]
    for key in ("mean", "var", "site_tau", "site_nu"):
        np.testing.assert_allclose(getattr(a, key), getattr(b, key), rtol=1e-7, atol=1e-9,
                                   err_msg=key)
    assert a.log_marginal_likelihood == pytest.approx(b.log_marginal_likelihood, rel=1e-9)


# --------------------------------------------------------------------------------------
# Gradients of log Z_EP
# --------------------------------------------------------------------------------------
KERNELS = {
    "rbf_ard": lambda: RBF(1.5, [0.8, 1.6]),
    "matern32": lambda: Matern32(1.2, 0.9),
    "sum": lambda: RBF(1.0, 1.0) + Matern32(0.5, [0.5, 2.0]),
}
GRAD = dict(method="sequential", tol=1e-12, max_iter=1000)


@pytest.mark.parametrize("n", [30, 2100])          # the serial and the parallel loop
def test_gradient_weights_are_half_of_bb_minus_r(n):
    """The evidence gradient's weights (b b^T - R) / 2, R = (K + S^-1)^-1, formed in one
    pass from the Cholesky factor of B, against NumPy's dense inverse."""
    X, y = _data(n, seed=5)
    K = RBF(1.3, 0.7)(X) + 1e-6 * np.eye(n)
    res = fastep.ep(K, y, Probit(), max_iter=3)
    assert np.all(res.site_tau > 0) and res._posterior.Q is None
    R = np.linalg.inv(K + np.diag(1.0 / res.site_tau))
    want = 0.5 * (np.outer(res.b, res.b) - R)
    got = res.kernel_gradient_weights()
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-9 * np.abs(want).max())
    np.testing.assert_array_equal(got, got.T)


@pytest.mark.parametrize("lik_cls", [Probit, Logistic])
@pytest.mark.parametrize("kname", list(KERNELS))
def test_kernel_gradient_matches_fd(kname, lik_cls):
    X, y = _data(25, seed=3)
    kern, lik = KERNELS[kname](), lik_cls()
    res = _ep_quiet(kern(X), y, lik, **GRAD)
    grad = kern.gradient_contract(X, res.kernel_gradient_weights())
    theta, h = kern.theta, 1e-4
    fd = np.empty(theta.size)
    for p in range(theta.size):
        lz = []
        for sgn in (1, -1):
            t = theta.copy()
            t[p] += sgn * h
            lz.append(_ep_quiet(kern.clone_with_theta(t)(X), y, lik, **GRAD)
                      .log_marginal_likelihood)
        fd[p] = (lz[0] - lz[1]) / (2 * h)
    np.testing.assert_allclose(grad, fd, rtol=1e-5, atol=1e-7)


def test_gaussian_noise_gradient_matches_fd(ref):
    rng = np.random.default_rng(8)
    X = rng.uniform(-2, 2, size=(30, 1))
    y = np.cos(X[:, 0]) + 0.3 * rng.normal(size=30)
    K = Matern32(1.1, 0.8)(X)
    s2, h = 0.2, 1e-4
    res = _ep_quiet(K, y, Gaussian(s2), **TIGHT)
    grad = float(np.sum(Gaussian(s2).tilted_dparams(y, res.cavity_mean, res.cavity_var)))

    def lz_ep(log_s2):
        return _ep_quiet(K, y, Gaussian(math.exp(log_s2)), **TIGHT).log_marginal_likelihood

    def lz_exact(log_s2):
        return ref.exact_gp_regression(K, y, math.exp(log_s2))["log_marginal_likelihood"]

    for lz in (lz_ep, lz_exact):
        fd = (lz(math.log(s2) + h) - lz(math.log(s2) - h)) / (2 * h)
        assert grad == pytest.approx(fd, rel=1e-5)


# --------------------------------------------------------------------------------------
# Robustness
# --------------------------------------------------------------------------------------
def _assert_finite(res):
    for key in ("mean", "var", "site_tau", "site_nu", "cavity_mean", "cavity_var"):
        assert np.all(np.isfinite(getattr(res, key))), key
    assert np.all(res.var > 0)
    assert np.isfinite(res.log_marginal_likelihood)


@pytest.mark.parametrize("method", METHODS)
def test_independent_sites_huge_variance(method):
    # points 100 lengthscales apart: K = 1600 I exactly, so every site is an n = 1 problem
    # with Z_i = Phi(0) = 1/2 for either label.
    X = np.arange(6)[:, None] * 100.0
    K = RBF(1600.0, 1.0)(X)
    np.testing.assert_array_equal(K, 1600.0 * np.eye(6))
    y = np.array([1.0, 1.0, -1.0, 1.0, -1.0, -1.0])
    res = _ep_quiet(K, y, Probit(), method=method, **TIGHT)
    _assert_finite(res)
    assert res.log_marginal_likelihood == pytest.approx(6 * math.log(0.5), rel=1e-12)
    # exact posterior moments of Phi(y f) N(f | 0, k) (R&W eq. 3.58 with z = 0)
    k, r0 = 1600.0, math.sqrt(2.0 / math.pi)
    np.testing.assert_allclose(res.mean, y * k * r0 / math.sqrt(1 + k), rtol=1e-8)
    np.testing.assert_allclose(res.var, k - k * k * r0 * r0 / (1 + k), rtol=1e-8)


@pytest.mark.parametrize("method", METHODS)
def test_logistic_independent_sites_wide_prior(method):
    # sigma(f) + sigma(-f) = 1 and N(0, k) is symmetric: Z_i = 1/2 exactly for any k, so
    # log Z_EP = n log(1/2) (one independent site per point).
    for k in (1.0, 25.0, 1600.0):
        K = k * np.eye(4)
        res = _ep_quiet(K, np.array([1.0, -1.0, 1.0, 1.0]), Logistic(), method=method, **TIGHT)
        _assert_finite(res)
        assert res.log_marginal_likelihood == pytest.approx(4 * math.log(0.5), rel=1e-8), k


@pytest.mark.parametrize("method", METHODS)
def test_margins_of_40_standard_deviations(method, ref):
    # A tight cluster under a huge prior variance (1600), warm-started from sites that all
    # push f to about -200: the first cavities sit 40+ likelihood standard deviations from
    # the decision boundary (|z| >= 40, z = y mu_cav / sqrt(1 + v_cav)), most of them on
    # the wrong side.  EP must stay finite and still reach the fixed point of the
    # reference (which starts cold).
    rng = np.random.default_rng(2)
    n = 12
    X = rng.normal(size=(n, 1)) * 0.05
    K = RBF(1600.0, 1.0)(X) + 1e-6 * np.eye(n)
    y = np.ones(n)
    y[[2, 7]] = -1.0
    tau0 = np.full(n, 0.05)
    nu0 = -200.0 * tau0
    # the initial cavities, computed here with the B form (R&W Algorithm 3.5)
    Sigma, mu, _ = ref._posterior_from_sites(K, tau0, nu0)
    v = np.diag(Sigma)
    tc = 1.0 / v - tau0
    z0 = y * ((mu / v - nu0) / tc) / np.sqrt(1.0 + 1.0 / tc)
    assert np.abs(z0).min() >= 40.0 and z0.min() <= -40.0
    r = ref.ep_probit_reference(K, y, tol=1e-11)
    res = _ep_quiet(K, y, Probit(), method=method, site_tau=tau0, site_nu=nu0, **TIGHT)
    _assert_finite(res)
    np.testing.assert_allclose(res.mean, r["mean"], rtol=1e-6)
    np.testing.assert_allclose(res.var, r["var"], rtol=1e-6)
    assert res.log_marginal_likelihood == pytest.approx(r["log_marginal_likelihood"], rel=1e-6)


@pytest.mark.parametrize("method", METHODS)
def test_duplicated_inputs_singular_gram(method, ref):
    X, _ = _data(10, seed=4)
    X = np.vstack([X, X[:4], X[:2]])                  # 16 points, 10 distinct
    K = RBF(2.0, 1.0)(X)
    assert np.linalg.matrix_rank(K) <= 10
    rng = np.random.default_rng(4)
    y = np.where(rng.normal(size=16) > 0, 1.0, -1.0)  # duplicates may even disagree
    res = _ep_quiet(K, y, Probit(), method=method, **TIGHT)
    _assert_finite(res)
    r = ref.ep_probit_reference(K, y, tol=1e-11)
    np.testing.assert_allclose(res.mean, r["mean"], rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(res.var, r["var"], rtol=1e-6)
    assert res.log_marginal_likelihood == pytest.approx(r["log_marginal_likelihood"], rel=1e-6)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("k", [1e-8, 0.3, 1600.0, 1e8])
def test_single_site_is_exact(method, k):
    for y in (1.0, -1.0):
        res = _ep_quiet(np.array([[k]]), np.array([y]), Probit(), method=method, **TIGHT)
        _assert_finite(res)
        # Z = int Phi(y f) N(f | 0, k) df = Phi(0) = 1/2, exactly, for any k
        assert abs(res.log_marginal_likelihood - math.log(0.5)) <= 1e-14
        r0 = math.sqrt(2.0 / math.pi)
        # (moments: the convergence test on sites is absolute for tiny site precisions
        # ~1/k, so only ~1e-6 is promised at k = 1e8)
        assert res.mean[0] == pytest.approx(y * k * r0 / math.sqrt(1 + k), rel=1e-6)
        assert res.var[0] == pytest.approx(k - k * k * r0 * r0 / (1 + k), rel=1e-6)


# --------------------------------------------------------------------------------------
# Input validation
# --------------------------------------------------------------------------------------
def _good():
    X, y = _data(5, seed=9)
    return RBF(1.0, 1.0)(X), y


@pytest.mark.parametrize("bad", ["nan", "inf"])
def test_non_finite_kernel(bad):
    K, y = _good()
    K[1, 2] = K[2, 1] = float(bad)
    with pytest.raises(ValueError, match="K"):
        fastep.ep(K, y, Probit())


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_non_finite_targets(bad):
    K, y = _good()
    y[3] = bad
    with pytest.raises(ValueError, match="y"):
        fastep.ep(K, y, Probit())
    with pytest.raises(ValueError, match="y"):
        fastep.ep(K, y, Gaussian(1.0))


def test_mismatched_lengths():
    K, y = _good()
    with pytest.raises(ValueError, match="y"):
        fastep.ep(K, y[:-1], Probit())
    with pytest.raises(ValueError, match="K"):
        fastep.ep(K[:, :-1], y, Probit())


@pytest.mark.parametrize("labels", [[0, 1, 0, 1, 1], [1, 2, 1, 2, 1], [1, -1, 1, 0.5, -1]])
def test_bad_labels(labels):
    K, _ = _good()
    with pytest.raises(ValueError, match="-1"):
        fastep.ep(K, np.array(labels, float), Probit())


def test_not_positive_definite():
    with pytest.raises(ValueError, match="positive"):
        fastep.ep(np.array([[1.0, 2.0], [2.0, 1.0]]), np.array([1.0, -1.0]), Probit())


def test_not_symmetric():
    K = np.array([[1.0, 0.5, 0.0], [0.1, 1.0, 0.0], [0.0, 0.0, 1.0]])
    with pytest.raises(ValueError, match="symmetric"):
        fastep.ep(K, np.array([1.0, -1.0, 1.0]), Probit())


@pytest.mark.parametrize("kw,name", [
    ({"method": "foo"}, "method"),
    ({"damping": 0.0}, "damping"),
    ({"damping": 1.5}, "damping"),
    ({"damping": -0.5}, "damping"),
    ({"max_iter": 0}, "max_iter"),
    ({"max_iter": 2.5}, "max_iter"),
    ({"tol": 0.0}, "tol"),
])
def test_bad_arguments_named(kw, name):
    K, y = _good()
    with pytest.raises(ValueError, match=name):
        fastep.ep(K, y, Probit(), **kw)


def test_a_likelihood_name_class_or_none_gets_told_to_pass_an_instance():
    """The estimators take names (``likelihood="probit"``), the inference functions take
    objects: a name, a class or None there is told so (the name's own class suggested),
    before any work, in every entry point that takes a likelihood."""
    from fastep.inference import ep_gradient, sparse_ep_gradient
    from fastep.inference.bounds import tilted_bound
    from fastep.inference.laplace import laplace
    K, y = _good()
    n = y.size
    X = np.arange(float(n))[:, None]
    dense, sparse = fastep.ep(K, y, Probit()), fastep.sparse_ep(RBF(), X[:2], X, y, Probit())
    runs = [lambda lik: fastep.ep(K, y, lik), lambda lik: laplace(K, y, lik),
            lambda lik: fastep.sparse_ep(RBF(), X[:2], X, y, lik),
            lambda lik: ep_gradient(dense, RBF(), X, y, lik),
            lambda lik: sparse_ep_gradient(sparse, RBF(), X, y, lik),
            lambda lik: tilted_bound(K, y, lik, np.zeros(n), np.ones(n))]
    for lik, said in [("probit", r"string 'probit'.*Probit\(\)"),
                      ("student_t", r"string 'student_t'.*StudentT\(\)"),
                      (Probit, r"the class Probit.*Probit\(\)"), (None, "got NoneType")]:
        for run in runs:
            with pytest.raises(ValueError, match="likelihood must be .*" + said):
                run(lik)


@pytest.mark.parametrize("method", METHODS)
def test_max_iter_warning(method):
    X, y = _data(20, seed=6)
    K = RBF(2.0, 1.0)(X)
    with pytest.warns(fastep.ConvergenceWarning, match="max_iter"):
        res = fastep.ep(K, y, Probit(), method=method, tol=1e-10, max_iter=1)
    assert not res.converged
    assert res.n_iter == 1
    _assert_finite(res)


# --------------------------------------------------------------------------------------
# Warm start
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("lik_cls", [Probit, Logistic])
@pytest.mark.parametrize("method", METHODS)
def test_warm_start(method, lik_cls):
    X, y = _data(30, seed=7)
    K = RBF(1.5, 0.9)(X)
    cold = _ep_quiet(K, y, lik_cls(), method=method, **TIGHT)
    assert cold.n_iter > 3
    warm = _ep_quiet(K, y, lik_cls(), method=method, site_tau=cold.site_tau,
                     site_nu=cold.site_nu, **TIGHT)
    assert warm.converged and warm.n_iter <= 3
    assert warm.log_marginal_likelihood == pytest.approx(cold.log_marginal_likelihood,
                                                         rel=1e-10)
    np.testing.assert_allclose(warm.mean, cold.mean, rtol=1e-8, atol=1e-10)


# --------------------------------------------------------------------------------------
# Non-log-concave likelihood: negative site precisions
# --------------------------------------------------------------------------------------
A_MIX, B_MIX = 0.8, 0.2     # p(y | f) = b + (a - b) Phi(y f): a probit with label noise


def _mixture_log_lik(y, extra, f, params):
    return math.log(0.2 + 0.6 * 0.5 * math.erfc(-y * f / math.sqrt(2.0)))


@pytest.fixture(scope="module")
def mixture():
    return CustomLikelihood(_mixture_log_lik, log_concave=False, binary=True)


@pytest.fixture(scope="module")
def mislabelled():
    X = np.linspace(-3, 3, 24)[:, None]
    y = np.where(X[:, 0] > 0, 1.0, -1.0)
    y[[4, 18, 20]] *= -1                         # mislabelled points in confident regions
    K = RBF(variance=9.0, lengthscale=2.0)(X) + 1e-3 * np.eye(24)
    return K, y


@pytest.mark.parametrize("method", METHODS)
def test_negative_site_precisions_fixed_point(mixture, mislabelled, method, ref):
    K, y = mislabelled
    res = _ep_quiet(K, y, mixture, method=method, **TIGHT)
    assert res.converged
    _assert_finite(res)
    assert res.site_tau.min() < 0             # the fixture really exercises tau < 0
    assert res.n_skipped == 0
    # 1. posterior from the sites, by a dense inverse
    Sigma = np.linalg.inv(np.linalg.inv(K) + np.diag(res.site_tau))
    np.testing.assert_allclose(res.mean, Sigma @ res.site_nu, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(res.var, np.diag(Sigma), rtol=1e-8)
    # 2. EP fixed point: every posterior marginal equals the tilted moments at its cavity
    for i in range(y.size):
        yi = y[i]
        mc, vc = res.cavity_mean[i], res.cavity_var[i]
        _, d1, d2 = ref.tilted_moments_quad(
            lambda f: np.log(B_MIX + (A_MIX - B_MIX) * sc.ndtr(yi * f)), mc, vc)
        assert res.mean[i] == pytest.approx(mc + vc * d1, rel=1e-6, abs=1e-6), i
        assert res.var[i] == pytest.approx(vc + vc * vc * d2, rel=1e-6), i


def test_negative_site_precisions_methods_agree(mixture, mislabelled):
    K, y = mislabelled
    a = _ep_quiet(K, y, mixture, method="parallel", **TIGHT)
    b = _ep_quiet(K, y, mixture, method="sequential", **TIGHT)
    np.testing.assert_allclose(a.site_tau, b.site_tau, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(a.site_nu, b.site_nu, rtol=1e-6, atol=1e-8)
    assert a.log_marginal_likelihood == pytest.approx(b.log_marginal_likelihood, rel=1e-8)


def test_posterior_from_sites_fills_improper_cavities_with_marginals():
    """Sites whose cavity is improper (here: the other site's precision is negative enough
    that prior x site 2 is not normalisable) get the posterior marginal as cavity, as in
    a sweep, never NaN.  Truth: the dense inverse of K^-1 + T."""
    K = np.array([[1.0, 0.99], [0.99, 1.0]])
    tau, nu = np.array([5.0, -1.2]), np.array([0.5, 0.0])
    cav_prec = np.linalg.inv(K)
    cav_prec[1, 1] += tau[1]                      # prior x site 2 for f_1: indefinite
    assert np.linalg.eigvalsh(cav_prec).min() < 0
    res = posterior_from_sites(K, np.array([1.0, -1.0]), Probit(), tau, nu)
    Sigma = np.linalg.inv(np.linalg.inv(K) + np.diag(tau))
    mu = Sigma @ nu
    assert np.all(np.isfinite(res.cavity_mean)) and np.all(np.isfinite(res.cavity_var))
    assert res.cavity_var[0] == pytest.approx(Sigma[0, 0], rel=1e-12)
    assert res.cavity_mean[0] == pytest.approx(mu[0], rel=1e-12)
    # site 2's cavity is proper: precision 1/Sigma_22 - tau_2
    assert res.cavity_var[1] == pytest.approx(1 / (1 / Sigma[1, 1] - tau[1]), rel=1e-10)


def _student_t_outliers(seed=1, n=100):
    """Neal's function with 15% gross outliers under a narrow Student-t: parallel EP's full
    steps make the posterior improper here (seed 1, found by trying seeds 0-5)."""
    from fastep.likelihoods import StudentT
    rng = np.random.default_rng(seed)
    x = rng.uniform(-3, 3, n)
    f = 0.3 + 0.4 * x + 0.5 * np.sin(2.7 * x) + 1.1 / (1.0 + x * x)
    y = f + 0.1 * rng.standard_normal(n)
    bad = rng.random(n) < 0.15
    y[bad] = f[bad] + rng.standard_normal(bad.sum())
    return x[:, None], y, StudentT(1.2, 0.07)


def test_robust_ep_starts_cold_from_a_warm_start_with_an_improper_cavity():
    """Warm-start sites (e.g. from another kernel during ML-II) can give a proper posterior
    with an improper cavity: two almost identical inputs with site precisions +3 and -2
    under a unit prior leave the first site a cavity precision of about 1 - 2 < 0.  No
    shorter step from there is proper, so robust EP must start cold (as it does when the
    warm posterior itself is improper) and reach the cold start's fixed point."""
    from fastep.kernels import RBF
    from fastep.likelihoods import MultiAnnotator
    rng = np.random.default_rng(3)
    X = np.vstack([[0.0], [1e-3], rng.uniform(3, 9, size=(18, 1))])
    labels = (rng.random((20, 3)) < 0.7).astype(float)
    lik = MultiAnnotator(labels, [0.8, 0.7, 0.6], [0.8, 0.7, 0.6])
    K = RBF(1.0, 1.0)(X) + 1e-8 * np.eye(20)
    tau, nu = np.zeros(20), np.zeros(20)
    tau[:2] = 3.0, -2.0
    var = np.diag(np.linalg.inv(np.linalg.inv(K) + np.diag(tau)))
    assert np.all(var > 0) and 1.0 / var[0] - tau[0] < 0     # the premise
    # small steps, so that no proposal from the warm start can leave the improper region
    opts = dict(damping=0.05, tol=1e-10, max_iter=5000)
    cold = fastep.ep(K, np.ones(20), lik, **opts)
    warm = fastep.ep(K, np.ones(20), lik, site_tau=tau, site_nu=nu, **opts)
    assert warm.converged and cold.converged
    assert warm.log_marginal_likelihood == pytest.approx(cold.log_marginal_likelihood, abs=1e-8)
    np.testing.assert_allclose(warm.mean, cold.mean, atol=1e-7)


def _spammer_crowd(n, d, seed, variance, lengthscale):
    """Labels of 8 annotators, half at or below chance, for the boundary
    sin(2 x0) + x1 > 0 of X ~ N(0, I_d): ``(K of RBF(variance, lengthscale), likelihood)``;
    EP's sites get negative precisions, and parallel EP can oscillate."""
    from fastep.datasets import simulate_annotators
    from fastep.likelihoods import MultiAnnotator
    sens = [0.9, 0.85, 0.8, 0.75, 0.5, 0.5, 0.3, 0.2]
    spec = [0.85, 0.9, 0.75, 0.8, 0.5, 0.4, 0.3, 0.25]
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    z = (np.sin(2 * X[:, 0]) + X[:, 1] > 0).astype(int)
    lik = MultiAnnotator(simulate_annotators(z, sens, spec, random_state=seed), sens, spec)
    return RBF(variance, lengthscale)(X) + 1e-6 * np.eye(n), lik


def test_auto_schedule_goes_on_sequentially_when_parallel_ep_stalls():
    """Annotator sites (negative precisions) under a large kernel variance: damped
    parallel EP oscillates for over a hundred sweeps.  method="auto" must notice the stall,
    go on with sequential sweeps and stop at the same fixed point, which two independent
    routes give: parallel EP run to tol 1e-10 and sequential EP from a cold start.  Where
    parallel EP does not stall, "auto" is parallel EP, sweep for sweep."""
    K, lik = _spammer_crowd(60, 2, 1, 100.0, 1.0)
    opts = dict(damping=0.9, tol=1e-10, max_iter=2000)
    par = fastep.ep(K, np.ones(60), lik, method="parallel", **opts)
    seq = fastep.ep(K, np.ones(60), lik, method="sequential", **opts)
    auto = fastep.ep(K, np.ones(60), lik, method="auto", **opts)
    assert par.converged and seq.converged and auto.converged
    assert par.n_iter > 100                            # the premise: parallel EP crawls
    assert auto.method == "sequential" and auto.n_iter < par.n_iter / 2
    for other in (par, seq):
        np.testing.assert_allclose(auto.mean, other.mean, atol=1e-7)
        np.testing.assert_allclose(auto.var, other.var, rtol=1e-6)
        assert auto.log_marginal_likelihood == pytest.approx(other.log_marginal_likelihood,
                                                             abs=1e-7)
    easy, _ = _spammer_crowd(60, 2, 1, 1.0, 1.0)
    a = fastep.ep(easy, np.ones(60), lik, method="auto", **opts)
    b = fastep.ep(easy, np.ones(60), lik, method="parallel", **opts)
    assert a.method == "parallel" and a.n_iter == b.n_iter
    np.testing.assert_array_equal(a.site_tau, b.site_tau)


def test_auto_schedule_halves_the_damping_of_sequential_sweeps_that_stall(caplog):
    """A crowd with spammers (n = 600, RBF(60, 1.2)): at damping 0.9 neither parallel nor
    sequential EP converges in 1000 sweeps (measured when this test was written).
    method="auto" must go on sequentially, halve the damping once those sweeps stall too,
    and stop at the fixed point that parallel EP at damping 0.3 reaches on its own."""
    import logging
    K, lik = _spammer_crowd(600, 3, 0, 60.0, 1.2)
    with caplog.at_level(logging.DEBUG, logger="fastep.inference.ep"):
        auto = fastep.ep(K, np.ones(600), lik, method="auto", damping=0.9, tol=1e-10,
                         max_iter=300)
    messages = [r.getMessage() for r in caplog.records]
    assert any("going on sequentially" in m for m in messages)
    assert any("halving the damping" in m for m in messages)
    ref_ = fastep.ep(K, np.ones(600), lik, method="parallel", damping=0.3, tol=1e-10,
                     max_iter=1000)
    assert auto.converged and ref_.converged and auto.n_skipped == ref_.n_skipped == 0
    np.testing.assert_allclose(auto.mean, ref_.mean, atol=1e-7)
    np.testing.assert_allclose(auto.var, ref_.var, rtol=1e-6)
    assert auto.log_marginal_likelihood == pytest.approx(ref_.log_marginal_likelihood, abs=1e-7)


def test_damped_sequential_ep_converges_by_its_undamped_site_change(ref):
    """Converged at tol means one more undamped EP update would move no site by more than
    tol: checked with the reference probit moments (R&W 3.58) at the returned posterior.
    A rule on the damped change (step damping x update) would stop about 1/damping times
    too early (about 9e-6 here at damping 0.1)."""
    rng = np.random.default_rng(3)
    X = rng.normal(size=(80, 2))
    y = np.where(np.sin(2 * X[:, 0]) + X[:, 1] + 0.3 * rng.normal(size=80) > 0, 1.0, -1.0)
    K = RBF(4.0, 1.0)(X) + 1e-8 * np.eye(80)
    tol = 1e-6
    res = fastep.ep(K, y, Probit(), method="sequential", damping=0.1, tol=tol, max_iter=5000)
    assert res.converged
    cav_var = 1.0 / (1.0 / res.var - res.site_tau)
    cav_mean = cav_var * (res.mean / res.var - res.site_nu)
    _, m_t, v_t = ref.probit_tilted_moments(y, cav_mean, cav_var)
    tau, nu = 1.0 / v_t - 1.0 / cav_var, m_t / v_t - cav_mean / cav_var
    assert np.max(np.abs(tau - res.site_tau) / (1.0 + np.abs(res.site_tau))) < tol
    assert np.max(np.abs(nu - res.site_nu) / (1.0 + np.abs(res.site_nu))) < tol


def test_adaptive_damping_grows_back_after_an_oscillating_sweep():
    """Student-t with outliers (dense n = 200, sparse n = 1000): adaptive parallel EP
    shrinks its step on an oscillating sweep; when the step never grew back, it crawled at
    damping 0.1 (161 dense and 187 sparse sweeps, measured on that rule).  It must now
    converge in far fewer sweeps, to the fixed point of the sequential schedules.  And
    regrowth must not undo a needed shrink: on a crowd with spammers a rule that regrew
    after any 10% fall cycled between damping 0.35 and 1 (55 sweeps here, and no
    convergence in 1000 at n = 600), where never regrowing took 23."""
    kernel = RBF(1.5, 1.0)
    X, y, lik = _student_t_outliers(seed=1, n=200)
    K = kernel(X) + 1e-8 * np.eye(200)
    par = fastep.ep(K, y, lik, method="parallel", tol=1e-6, max_iter=500)
    seq = fastep.ep(K, y, lik, method="sequential", tol=1e-8, max_iter=500)
    assert par.converged and seq.converged and par.n_iter <= 80
    np.testing.assert_allclose(par.mean, seq.mean, atol=1e-5)
    assert par.log_marginal_likelihood == pytest.approx(seq.log_marginal_likelihood, abs=1e-5)

    X, y, lik = _student_t_outliers(seed=1, n=1000)
    Z = np.linspace(-3, 3, 30)[:, None]
    par = fastep.sparse_ep(kernel, Z, X, y, lik, schedule="parallel", tol=1e-6, max_iter=500)
    chunked = fastep.sparse_ep(kernel, Z, X, y, lik, schedule="sequential", tol=1e-7,
                               max_iter=500)
    assert par.converged and chunked.converged and par.n_iter <= 100
    np.testing.assert_allclose(par.mean, chunked.mean, atol=1e-5)
    assert par.log_marginal_likelihood == pytest.approx(chunked.log_marginal_likelihood,
                                                        abs=1e-5)

    K, lik = _spammer_crowd(300, 3, 1, 60.0, 1.2)
    par = fastep.ep(K, np.ones(300), lik, method="parallel", tol=1e-6, max_iter=500)
    ref_ = fastep.ep(K, np.ones(300), lik, method="parallel", damping=0.3, tol=1e-9,
                     max_iter=2000)
    assert par.converged and ref_.converged and par.n_iter <= 30
    np.testing.assert_allclose(par.mean, ref_.mean, atol=1e-4)


def test_robust_parallel_ep_converges_where_plain_ep_fails_to_the_same_fixed_point():
    """Robust EP (step halving) against two independent routes to EP's fixed point: the
    sequential schedule (dense) and the chunk-sequential schedule (sparse)."""
    from fastep.kernels import RBF
    X, y, lik = _student_t_outliers()
    kernel = RBF(1.5, 1.0)
    K = kernel(X) + 1e-8 * np.eye(X.shape[0])
    with pytest.raises(fastep.NotPositiveDefiniteError):
        fastep.ep(K, y, lik, method="parallel", robust=False, tol=1e-8, max_iter=300)
    robust = fastep.ep(K, y, lik, method="parallel", tol=1e-8, max_iter=300)
    seq = fastep.ep(K, y, lik, method="sequential", tol=1e-10, max_iter=300)
    assert robust.converged and seq.converged
    np.testing.assert_allclose(robust.mean, seq.mean, atol=1e-8)
    np.testing.assert_allclose(robust.var, seq.var, rtol=1e-7)
    assert abs(robust.log_marginal_likelihood - seq.log_marginal_likelihood) < 1e-8

    Z = X[::5]
    with pytest.raises(fastep.NotPositiveDefiniteError):
        fastep.sparse_ep(kernel, Z, X, y, lik, schedule="parallel", robust=False, tol=1e-8,
                         max_iter=300)
    sp = fastep.sparse_ep(kernel, Z, X, y, lik, schedule="parallel", tol=1e-8, max_iter=300)
    chunked = fastep.sparse_ep(kernel, Z, X, y, lik, schedule="sequential", tol=1e-8,
                               max_iter=300, chunk_size=16)
    assert sp.converged and chunked.converged
    assert chunked.n_iter < sp.n_iter              # its own route (no fallback to parallel)
    np.testing.assert_allclose(sp.mean, chunked.mean, atol=1e-8)
    assert abs(sp.log_marginal_likelihood - chunked.log_marginal_likelihood) < 1e-8


def test_one_blas_pool_caps_only_the_other_blas_libraries():
    """Dense EP's loop runs SciPy's LAPACK threaded and every other BLAS (NumPy's own
    OpenBLAS in the wheels) on one thread; with one shared library nothing changes."""
    from threadpoolctl import threadpool_info

    from fastep import _linalg

    def threads():
        return {d["filepath"]: d["num_threads"] for d in threadpool_info()
                if d["user_api"] == "blas"}

    before = threads()
    other = _linalg._other_blas()
    with _linalg.blas_threads_for(_linalg.SMALL_N, one_pool=True):
        inside = threads()
    assert threads() == before
    capped = set() if other is None else {c.filepath for c in other.lib_controllers}
    for path, n in inside.items():
        assert n == (1 if path in capped else before[path])
    if len(before) > 1 and other is not None:
        assert 0 < len(capped) < len(before)
        scipy_own = [p for p in before if "scipy.libs" in p or "scipy/" in p]
        for path in scipy_own:                    # SciPy's own library keeps its threads
            assert inside[path] == before[path]
    with _linalg.blas_threads_for(_linalg.SMALL_N - 1, one_pool=True):
        assert set(threads().values()) == {1}


def test_carried_anderson_history_saves_sweeps_along_an_ml2_path():
    """Inside ``carry_anderson()`` (ML-II's evaluations of one problem) each parallel EP
    run starts with the Anderson differences of the runs before it: along a path of small
    kernel steps, each warm-started from the last sites, fewer sweeps in all, and the same
    fixed points as fresh runs (to the tolerance; the tight reference is a separate run).
    A run of another size in the block, and runs after it, start fresh."""
    from fastep.inference._anderson import Anderson, anderson_for, carry_anderson
    rng = np.random.default_rng(0)
    X = rng.normal(size=(150, 3))
    y = np.where(X[:, 0] + 0.5 * X[:, 1] > 0, 1.0, -1.0)
    steps = np.random.default_rng(1).normal(size=(8, 2)) * 0.01
    theta0 = np.log([300.0, 2.0])
    start = fastep.ep(RBF(300.0, 2.0)(X), y, Probit(), tol=1e-10, max_iter=500)

    def path(carry):
        theta, r, sweeps = theta0, start, 0
        with carry_anderson() if carry else contextlib.nullcontext():
            for step in steps:
                theta = theta + step
                r = fastep.ep(RBF(*np.exp(theta))(X), y, Probit(), tol=1e-4, max_iter=500,
                              site_tau=r.site_tau, site_nu=r.site_nu)
                assert r.converged
                sweeps += r.n_iter
        return r, sweeps

    (fresh, plain), (carried, fewer) = path(False), path(True)
    assert fewer < 0.8 * plain
    truth = fastep.ep(RBF(*np.exp(theta0 + steps.sum(0)))(X), y, Probit(), tol=1e-11,
                      max_iter=500)
    for r in (fresh, carried):
        assert r.log_marginal_likelihood == pytest.approx(truth.log_marginal_likelihood,
                                                          rel=1e-6)
    with carry_anderson():
        a = anderson_for(150)
        a.dx, a.df = [np.ones(300)], [np.ones(300)]
        assert anderson_for(150) is a and len(a.dx) == 1 and a.x is None
        assert anderson_for(40) is a and a.dx == []
    assert type(anderson_for(150)) is Anderson and anderson_for(150) is not a


def test_anderson_acceleration_reaches_the_same_fixed_point_in_fewer_sweeps(monkeypatch):
    """Parallel EP with Anderson acceleration (the default) against plain damped steps:
    the same sites and log Z_EP (to the tolerance), and fewer sweeps on a strongly coupled
    problem (separable classes, a large kernel variance: parallel EP swings and creeps
    there), cold and warm-started from a neighbouring kernel's sites."""
    import sys
    ep_module = sys.modules["fastep.inference.ep"]
    rng = np.random.default_rng(0)
    X = rng.normal(size=(150, 3))
    y = np.where(X[:, 0] + 0.5 * X[:, 1] > 0, 1.0, -1.0)
    K0, K1 = RBF(300.0, 2.0)(X), RBF(330.0, 2.1)(X)
    runs = {}
    for accelerate in (False, True):
        monkeypatch.setattr(ep_module, "ANDERSON", accelerate)
        cold = fastep.ep(K0, y, Probit(), tol=1e-8, max_iter=500)
        warm = fastep.ep(K1, y, Probit(), tol=1e-8, max_iter=500, site_tau=cold.site_tau,
                         site_nu=cold.site_nu)
        runs[accelerate] = cold, warm
    for plain, fast in zip(runs[False], runs[True]):
        assert plain.converged and fast.converged
        assert fast.log_marginal_likelihood == pytest.approx(plain.log_marginal_likelihood,
                                                             rel=1e-9)
        np.testing.assert_allclose(fast.site_tau, plain.site_tau, rtol=1e-5, atol=1e-7)
        assert fast.n_iter < plain.n_iter


def _extreme_sites(case, rng):
    """(K, tau, nu): ``scatter``, sites whose tau_i K_ii span 1e-14 .. 1e8 with a zero and
    a negative precision; ``clusters``, near-duplicate inputs, one strong site per cluster
    pinning its neighbours (tau_i K_ii ~ 1e-4..1 but tau_i Sigma_ii ~ 1e-10);
    ``negatives``, a third of the sites negative (the split form's Sigma_+[:, neg] read
    from rows of strong, weak and zero sites alike), the posterior still proper."""
    if case == "negatives":
        n = 24
        X = rng.normal(size=(n, 2))
        K = RBF(4.0, 1.0)(X) + 1e-6 * np.eye(n)
        tau = 10.0 ** rng.uniform(-8, 3, n)
        tau[1] = 0.0
        tau[::3] = -10.0 ** rng.uniform(-3, -1, 8)
        nu = rng.normal(size=n) * np.maximum(np.abs(tau), 1e-3)
        assert np.linalg.eigvalsh(np.linalg.inv(K) + np.diag(tau)).min() > 0   # proper
        return K, tau, nu
    if case == "scatter":
        n = 14
        X = rng.normal(size=(n, 2))
        K = RBF(50.0, 1.5)(X) + 1e-6 * np.eye(n)
        tau = np.array([1e-16, 1e-12, 1e-9, 1e-6, 3e-6, 1e-4, 0.02, 0.5, 1.0, 30.0, 1e3, 1e6,
                        0.0, -1e-4]) / 50.0
        nu = rng.normal(size=n) * np.maximum(tau, 1e-3)
        nu[12] = 0.7
        return K, tau, nu
    centres = rng.normal(size=(4, 2)) * 3.0
    X = np.repeat(centres, 4, axis=0) + 1e-4 * rng.normal(size=(16, 2))
    K = RBF(1.0, 1.0)(X) + 1e-9 * np.eye(16)
    tau = 10.0 ** rng.uniform(-4, 0, 16)
    tau[::4] = 1e6
    return K, tau, rng.normal(size=16) * tau


@pytest.mark.parametrize("case", ["scatter", "clusters", "negatives"])
@pytest.mark.parametrize("need_cov", [False, True], ids=["parallel", "sequential"])
def test_posterior_marginals_at_extreme_site_precisions_match_40_digits(need_cov, case):
    """The posterior refresh's two forms of var_i (K_ii - |V e_i|^2 and
    (1 - (B^-1)_ii) / tau_i, each used where the other cancels) and its mean, against
    Sigma = K (I + S K)^-1, mu = Sigma nu solved by mpmath at 40 digits (sites from
    :func:`_extreme_sites`).  ``need_cov``: the sequential sweeps' refresh (full Sigma
    from V) or the parallel sweeps' (L^-1, marginals only)."""
    mp = pytest.importorskip("mpmath")
    mp.mp.dps = 40
    from fastep.inference._dense_posterior import _Posterior
    K, tau, nu = _extreme_sites(case, np.random.default_rng(3))
    n = K.shape[0]
    be = fastep.backend.resolve("cpu")
    post = _Posterior(be, K, np.diag(K).copy(), tau, nu, need_cov)
    Km = mp.matrix(K.tolist())
    Sigma = Km * (mp.eye(n) + mp.diag(tau.tolist()) * Km) ** -1
    mu = Sigma * mp.matrix(nu.tolist())
    want_var = np.array([float(Sigma[i, i]) for i in range(n)])
    want_mu = np.array([float(mu[i]) for i in range(n)])
    np.testing.assert_allclose(post.var, want_var, rtol=1e-9)
    np.testing.assert_allclose(post.mean, want_mu, rtol=1e-7,
                               atol=1e-10 * float(np.abs(want_mu).max()))
    if need_cov:
        want_cov = np.array([[float(Sigma[i, j]) for j in range(n)] for i in range(n)])
        np.testing.assert_allclose(post.cov, want_cov, atol=1e-9 * float(np.abs(want_cov).max()))


def _long_double_marginals(K, tau):
    """Posterior variances diag((K^-1 + S)^-1) from a Cholesky factor of B = I + S^1/2 K
    S^1/2 and its inverse computed in long double (np.longdouble, 64-bit mantissa on
    x86): (1 - (B^-1)_ii) / tau_i where tau_i Sigma_ii >= 1e-3, else K_ii - |L^-1 S^1/2 K
    e_i|^2, each where it keeps its digits."""
    n = K.shape[0]
    s = np.sqrt(tau).astype(np.longdouble)
    Kl = K.astype(np.longdouble)
    A = np.eye(n, dtype=np.longdouble) + s[:, None] * Kl * s[None, :]
    L = np.zeros_like(A)
    for j in range(n):
        L[j, j] = np.sqrt(A[j, j])
        L[j + 1:, j] = A[j + 1:, j] / L[j, j]
        A[j + 1:, j + 1:] -= np.outer(L[j + 1:, j], L[j + 1:, j])
    li = np.zeros_like(A)
    for i in range(n):
        row = -L[i, :i] @ li[:i, :]
        row[i] += 1.0
        li[i, :] = row / L[i, i]
    t = 1.0 - (li ** 2).sum(0)
    v = li @ (s[:, None] * Kl)
    var = np.where(t >= 1e-3, t / tau.astype(np.longdouble), np.diagonal(Kl) - (v ** 2).sum(0))
    return var.astype(float), t.astype(float)


@pytest.mark.parametrize("scale, rtol", [(1e2, 3e-9), (1e4, 5e-10), (1e8, 3e-5)])
def test_parallel_refresh_above_the_recursion_leaf_matches_a_long_double_refresh(scale, rtol):
    """The parallel refresh at n = 300 (the CPU's recursive factor-and-invert, and its
    LAPACK fallback) against a long-double one, with site precisions over 8 decades on a
    smooth kernel: sum_i tau_i K_ii about 1.5e3 (recursive; the variance form (1 -
    (B^-1)_ii) / tau_i from tau_i Sigma_ii = 1e-6), 1.5e5 (recursive; from 1e-4) and
    1.5e9 (dpotrf + dtrtri; from 1e-4).  The tolerances are 5-10 times the largest relative
    errors measured (3.6e-10, 5.0e-11, 6.0e-6; B's condition number is up to about
    4e8), and below those of the recursive form with the 1e-6 bound throughout
    (3.6e-10, 9.3e-10, 6.8e-5), which fails the last two."""
    from fastep.inference import _dense_posterior as dp
    rng = np.random.default_rng(0)
    n = 300
    x = np.sort(rng.uniform(0, 10, n))
    K = np.exp(-0.5 * (x[:, None] - x[None, :]) ** 2 / 0.25) + 1e-10 * np.eye(n)
    tau = 10.0 ** rng.uniform(-8, 0, n) * scale
    nu = rng.normal(size=n) * tau
    trace = float(tau @ np.diag(K))
    regime = ("recursive, 1e-6" if trace <= dp.WELL_CONDITIONED else
              "recursive, 1e-4" if trace <= dp.RECURSIVE_MAX_T else "lapack, 1e-4")
    assert regime == {1e2: "recursive, 1e-6", 1e4: "recursive, 1e-4",
                      1e8: "lapack, 1e-4"}[scale]
    be = fastep.backend.resolve("cpu")
    post = dp._Posterior(be, K, np.diag(K).copy(), tau, nu, False, be.dense_work(n))
    want, t = _long_double_marginals(K, tau)
    assert np.sum((t > 1e-6) & (t < 1e-4)) >= 10        # the band the bound moved over
    np.testing.assert_allclose(post.var, want, rtol=rtol)


