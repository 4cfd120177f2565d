"""Multiclass GWI (seed 002): robust-max S(x, j), the W2 estimator, gradients, the classifier.

Truth: Monte Carlo (10^6 draws) and adaptive quadrature (tests/reference.py) for S(x, j),
the closed form Phi((m0 - m1) / sqrt(v0 + v1)) for two classes, scipy.linalg.sqrtm for the
exact W2 between Gaussians, five-point central finite differences for every gradient, explicit
matrix inverses for the variational moments, and a bounded scalar minimiser for tempering.
"""

import warnings

import numpy as np
import pytest
from scipy.optimize import minimize_scalar
from scipy.special import ndtr

import fastep
from fastep import GWIClassifier
from fastep.inference import gwi
from fastep.kernels import RBF
from fastep.likelihoods import RobustMax

import reference as ref


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


# ----------------------------------------------------------------------------------------
# S(x, j) and the robust-max likelihood
# ----------------------------------------------------------------------------------------
MOMENTS = [  # (means, variances): variance ratios up to 4, where 20 nodes are accurate
    ([0.3, -0.2, 0.5], [0.5, 1.0, 0.8]),
    ([1.0, 0.0, -0.5, 0.7, 0.2], [0.3, 1.2, 0.6, 0.9, 0.4]),
    (np.linspace(-1.0, 1.0, 10), np.linspace(0.4, 1.6, 10)),
]


@pytest.mark.parametrize("mean,var", MOMENTS, ids=["J3", "J5", "J10"])
def test_S_matches_monte_carlo(mean, var):
    mean, var = np.asarray(mean, float), np.asarray(var, float)
    J = mean.size
    S = RobustMax(J).prob_largest(mean[None], var[None])[0]
    rng = np.random.default_rng(20)
    n = 10 ** 6
    hits = np.bincount(np.argmax(mean + np.sqrt(var) * rng.standard_normal((n, J)), axis=1),
                       minlength=J) / n
    se = np.sqrt(hits * (1 - hits) / n)
    assert np.all(np.abs(S - hits) < 3 * se), (S - hits) / se


@pytest.mark.parametrize("mean,var", MOMENTS[:2], ids=["J3", "J5"])
def test_S_converges_to_quadrature(mean, var):
    # the rule converges to adaptive quadrature (20 nodes: 1e-4 at a variance ratio of 4)
    mean, var = np.asarray(mean, float), np.asarray(var, float)
    truth = [ref.prob_largest_quad(mean, var, j) for j in range(mean.size)]
    S20 = RobustMax(mean.size).prob_largest(mean[None], var[None])[0]
    S100 = RobustMax(mean.size, n_nodes=100).prob_largest(mean[None], var[None])[0]
    np.testing.assert_allclose(S20, truth, rtol=0, atol=3e-4)
    np.testing.assert_allclose(S100, truth, rtol=0, atol=1e-11)


def test_S_two_classes_closed_form():
    m = np.array([[0.3, -0.4], [2.0, 1.0], [-5.0, 3.0], [0.0, 0.0]])
    v = np.array([[0.5, 0.7], [0.4, 1.0], [1.0, 0.5], [1e-4, 1e-4]])
    S = RobustMax(2).prob_largest(m, v)
    np.testing.assert_allclose(S[:, 0], ndtr((m[:, 0] - m[:, 1]) / np.sqrt(v.sum(1))), atol=1e-9)


def test_standard_deviations_not_variances():
    # the reference code's slip (variances where S needs standard deviations) changes S
    mean, var = np.array([[0.8, 0.0, 0.3]]), np.array([[0.25, 4.0, 2.0]])
    S = RobustMax(3, n_nodes=60).prob_largest(mean, var)[0, 0]
    assert S == pytest.approx(ref.prob_largest_quad(mean[0], var[0], 0), abs=1e-9)
    assert abs(S - ref.prob_largest_quad(mean[0], var[0] ** 2, 0)) > 0.02


def test_predict_proba_sums_to_one():
    rng = np.random.default_rng(1)
    m = 3 * rng.normal(size=(2000, 10))
    v = rng.uniform(0.05, 3.0, (2000, 10))
    lik = RobustMax(10, epsilon=0.01)
    p = lik.predict_proba(m, v)
    assert np.max(np.abs(p.sum(1) - 1.0)) < 1e-10
    assert np.all(p >= 0.01 / 9 - 1e-15) and np.all(p <= 0.99 + 1e-15)
    # before renormalisation the sums are off by the quadrature error, small when the
    # classes' standard deviations differ by at most 2x (GWI fits on digits: median 1.8x)
    v = rng.uniform(0.5, 2.0, (2000, 10))
    assert np.max(np.abs(lik.prob_largest(m, v).sum(1) - 1.0)) < 1e-3


def test_S_gradient_matches_finite_differences():
    rng = np.random.default_rng(2)
    J, n = 4, 6
    mean = rng.normal(size=(n, J)) * 1.5
    mean[0] = [6.0, -2.0, 0.0, 1.0]            # confident point, label in the tail
    var = rng.uniform(0.3, 1.5, (n, J))
    y = np.array([0, 1, 2, 3, 1, 0])
    lik = RobustMax(J)
    s, dm, dv = lik.prob_largest_grad(mean, var, y)
    np.testing.assert_allclose(s, lik.prob_largest(mean, var)[np.arange(n), y], rtol=1e-13)
    for i in range(n):
        f_m = lambda x: lik.prob_largest_grad(x.reshape(1, J), var[i:i + 1], y[i:i + 1])[0][0]
        f_v = lambda x: lik.prob_largest_grad(mean[i:i + 1], x.reshape(1, J), y[i:i + 1])[0][0]
        assert_grad(dm[i], fd_grad(f_m, mean[i], 1e-3))
        assert_grad(dv[i], fd_grad(f_v, var[i], 1e-4))


def test_expected_log_lik_and_gradient():
    rng = np.random.default_rng(3)
    J, n = 3, 5
    mean, var = rng.normal(size=(n, J)), rng.uniform(0.2, 1.0, (n, J))
    y = rng.integers(0, J, n)
    lik = RobustMax(J, epsilon=0.05)
    S = lik.prob_largest(mean, var)[np.arange(n), y]
    value, gm, gv = lik.expected_log_lik(mean, var, y, return_grad=True)
    assert value == pytest.approx(np.sum(S * np.log(0.95) + (1 - S) * np.log(0.05 / 2)),
                                  rel=1e-13)
    f_m = lambda x: lik.expected_log_lik(x.reshape(n, J), var, y)
    f_v = lambda x: lik.expected_log_lik(mean, x.reshape(n, J), y)
    assert_grad(gm.ravel(), fd_grad(f_m, mean.ravel(), 1e-3))
    assert_grad(gv.ravel(), fd_grad(f_v, var.ravel(), 1e-4))


# ----------------------------------------------------------------------------------------
# The W2 estimator
# ----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def gaussians():
    rng = np.random.default_rng(4)
    X = rng.normal(size=(25, 2))
    K = RBF(1.5, 0.8)(X) + 1e-8 * np.eye(25)
    A = rng.normal(size=(25, 25))
    R = A @ A.T / 25 + 0.05 * np.eye(25)
    return K, R, rng.normal(size=25)


def test_w2_estimator_is_exact_w2_over_n_at_full_sample(gaussians):
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


# ----------------------------------------------------------------------------------------
# The GWI objective
# ----------------------------------------------------------------------------------------
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


def test_moments_match_dense_formula(problem):
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


# ----------------------------------------------------------------------------------------
# The classifier
# ----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def iris():
    from sklearn.datasets import load_iris
    from fastep.datasets import split_standardized
    X, y = load_iris(return_X_y=True)
    return split_standardized(X, np.array(["setosa", "versicolor", "virginica"])[y],
                              random_state=0)


@pytest.mark.filterwarnings("ignore::fastep.ConvergenceWarning")   # max_iter is a budget
def test_iris_fit_and_fitted_state(iris):
    Xtr, Xte, ytr, yte = iris
    clf = GWIClassifier(random_state=0).fit(Xtr, ytr)
    assert clf.score(Xte, yte) >= 0.9
    p = clf.predict_proba(Xte)
    assert p.shape == (len(yte), 3) and np.max(np.abs(p.sum(1) - 1)) < 1e-10
    assert list(clf.classes_) == ["setosa", "versicolor", "virginica"]
    # predict_latent is the dense formula with the exported (paper) parameters, tempered
    K_zz = clf.kernel_(clf.inducing_points_)
    delta = gwi.JITTER * np.mean(np.diag(K_zz))
    mean, std = clf.predict_latent(Xte, return_std=True)
    var = std ** 2
    for j in range(3):
        m_ref, v_ref = ref.svgp_moments_dense(
            clf.kernel_.diag(Xte), clf.kernel_(Xte, clf.inducing_points_), K_zz, delta,
            clf.mean_weights_[j], clf.covariance_factors_[j])
        np.testing.assert_allclose(mean[:, j], m_ref + Xte @ clf.coef_[j] + clf.intercept_[j],
                                   rtol=1e-8, atol=1e-10)
        # cond(K_ZZ + delta I) is about 6e7 here: the explicit inverse in the reference is
        # accurate to about cond * 1e-16 * k(x, x) ~ 2e-8 absolute
        np.testing.assert_allclose(var[:, j], clf.temperature_ * v_ref, rtol=1e-6, atol=1e-7)
    assert clf.n_iter_ >= 1 and np.all(np.isfinite(clf.w2_))


@pytest.mark.filterwarnings("ignore::fastep.ConvergenceWarning")   # max_iter is a budget
def test_adam_and_unsquared_variants(iris):
    Xtr, Xte, ytr, yte = iris
    a = GWIClassifier(solver="adam", max_iter=40, batch_size=32, learning_rate=0.02,
                      random_state=0).fit(Xtr, ytr)
    assert a.score(Xte, yte) >= 0.85
    u = GWIClassifier(distance="unsquared", linear_mean=False, validation_fraction=0.0,
                      random_state=0).fit(Xtr, ytr)
    assert u.score(Xte, yte) >= 0.85 and u.temperature_ == 1.0
    assert np.all(u.coef_ == 0.0)


@pytest.mark.filterwarnings("ignore::fastep.ConvergenceWarning")   # max_iter is a budget
def test_tempering(iris):
    Xtr, Xte, ytr, yte = iris
    clf = GWIClassifier(validation_fraction=0.3, random_state=1).fit(Xtr, ytr)
    assert clf.temperature_ != 1.0 and clf.score(Xte, yte) >= 0.9
    # separable blobs, a huge prior variance and one iteration: every validation point is
    # right with tiny margins, so the loss falls all the way to T's lower bound -> warned
    rng = np.random.default_rng(0)
    X = np.vstack([rng.normal(c, 0.3, (30, 2)) for c in ([0, 0], [4, 0], [0, 4])])
    with pytest.warns(UserWarning, match="sits at its bound.*validation_fraction"):
        c = GWIClassifier(RBF(1e4, 1.0), max_iter=1, linear_mean=False, validation_fraction=0.2,
                          random_state=0).fit(X, np.repeat([0, 1, 2], 30))
    assert c.temperature_ == pytest.approx(1e-3)


def test_budget_exhausted_warns_naming_max_iter(iris):
    # issue 31: L-BFGS-B stopped at max_iter with converged_=False and no warning
    Xtr, _, ytr, _ = iris
    with pytest.warns(fastep.ConvergenceWarning, match=r"max_iter=3 iterations.*tol=1e-06.*"
                                                       r"raise max_iter, or tol"):
        clf = GWIClassifier(n_inducing=20, max_iter=3, random_state=0).fit(Xtr, ytr)
    assert clf.n_iter_ == 3 and not clf.converged_
    # a stop by tol is converged and silent
    with warnings.catch_warnings():
        warnings.simplefilter("error", fastep.ConvergenceWarning)
        clf = GWIClassifier(n_inducing=20, tol=1e-2, random_state=0).fit(Xtr, ytr)
    assert clf.converged_ and clf.n_iter_ < clf.max_iter


def test_save_load_round_trip_is_exact(tmp_path):
    # issue 31: load_model recomputed C = chol(K_ZZ + delta I) with threaded BLAS while fit
    # computed it single-threaded; from M ~ 150 on (two cores) OpenBLAS's threaded dpotrf
    # rounds differently and predict_proba differed by 1e-14 .. 1e-12
    from sklearn.datasets import load_digits
    from fastep.datasets import split_standardized
    X, y = load_digits(return_X_y=True)
    Xtr, Xte, ytr, _ = split_standardized(X[:500], y[:500], random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", fastep.ConvergenceWarning)
        clf = GWIClassifier(n_inducing=150, max_iter=5, validation_fraction=0.1,
                            random_state=0).fit(Xtr, ytr)
    path = tmp_path / "gwi.npz"
    fastep.save_model(clf, path)
    back = fastep.load_model(path)
    assert np.array_equal(back.predict_proba(Xte), clf.predict_proba(Xte))
    for a, b in zip(back.predict_latent(Xte, return_std=True),
                    clf.predict_latent(Xte, return_std=True)):
        assert np.array_equal(a, b)
    assert np.array_equal(back._C, clf._C)


def test_bad_input_messages(iris):
    Xtr, _, ytr, _ = iris
    with pytest.raises(ValueError, match="at least 2 classes"):
        GWIClassifier().fit(Xtr, np.zeros(len(Xtr)))
    for eps in (0.0, 1.0, -0.1, 1.5):
        with pytest.raises(ValueError, match=r"'epsilon' parameter.*range \(0.0, 1.0\)"):
            GWIClassifier(epsilon=eps).fit(Xtr, ytr)
    with pytest.raises(ValueError, match="'n_inducing' parameter.*at most.*Got 200"):
        GWIClassifier(n_inducing=200).fit(Xtr, ytr)
    with pytest.raises(ValueError, match="'n_inducing'.*validation_fraction=0.1.*\\(95\\)"):
        GWIClassifier(n_inducing=100, validation_fraction=0.1).fit(Xtr, ytr)
    with pytest.raises(ValueError, match="'solver' parameter"):
        GWIClassifier(solver="sgd").fit(Xtr, ytr)
    with pytest.raises(ValueError, match="n_classes"):
        RobustMax(1)
    with pytest.raises(ValueError, match="epsilon"):
        RobustMax(3, epsilon=1.0)
    with pytest.raises(ValueError, match=r"\(J - 1\)/J"):
        RobustMax(3, epsilon=0.7)
    with pytest.raises(ValueError, match="var must be positive"):
        RobustMax(3).prob_largest(np.zeros((1, 3)), np.array([[1.0, 0.0, 1.0]]))
    with pytest.raises(ValueError, match="class indices"):
        RobustMax(3).prob_largest_grad(np.zeros((1, 3)), np.ones((1, 3)), np.array([3]))


def test_lazy_export():
    assert fastep.GWIClassifier is GWIClassifier
    assert "GWIClassifier" in fastep.__all__ and "RobustMax" in fastep.likelihoods.__all__


def test_cli_demo_multiclass():
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "-m", "fastep.cli", "demo", "multiclass", "--dataset",
                        "iris"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    acc = float(next(l for l in r.stdout.splitlines() if "test accuracy" in l).split(":")[1])
    assert acc > 0.9
    assert "L-BFGS-B iteration 25" in r.stderr          # progress of the fit
