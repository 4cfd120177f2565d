"""The collapsed sparse regression bound (seed 003; fastep.inference.collapsed): its exact
limits against dense references, its gradients against finite differences."""
import numpy as np
import pytest
from scipy.stats import multivariate_normal

from fastep.inference.collapsed import collapsed_objective, kernel_gradient, predict
from fastep.kernels import RBF, Matern32
from helpers.data import sparse_regression


@pytest.fixture(scope="module")
def data():
    return sparse_regression()


@pytest.mark.parametrize("alpha", [0.0, 0.5, 1.0])
def test_inducing_points_at_the_data_give_exact_regression(data, alpha, ref):
    X, y, _, k = data
    st = collapsed_objective(k(X), k(X), k.diag(X), y, 0.05, alpha)
    Xs = np.linspace(-3, 3, 5)[:, None] * np.ones((1, 2))
    ex = ref.exact_gp_regression(k(X), y, 0.05, K_star=k(X, Xs), k_star_diag=k.diag(Xs))
    assert st.value == pytest.approx(ex["log_marginal_likelihood"], rel=1e-6)
    mean, var = predict(st, k(X, Xs), k.diag(Xs))
    # K_uu carries 1e-8 * mean(diag) jitter, and K(X, X) is ill-conditioned: 1e-6 absolute
    np.testing.assert_allclose(mean, ex["mean_star"], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(var, ex["var_star"], rtol=1e-6, atol=1e-6)


def test_alpha_one_is_fitc_and_alpha_to_zero_is_titsias(data):
    X, y, Z, k = data
    Kuu, Kuf, kd, s2 = k(Z), k(Z, X), k.diag(X), 0.05
    Q = Kuf.T @ np.linalg.solve(Kuu, Kuf)
    d = kd - np.diag(Q)
    fitc = multivariate_normal(np.zeros(40), Q + np.diag(d) + s2 * np.eye(40)).logpdf(y)
    titsias = multivariate_normal(np.zeros(40), Q + s2 * np.eye(40)).logpdf(y) - d.sum() / (2 * s2)
    assert collapsed_objective(Kuu, Kuf, kd, y, s2, 1.0).value == pytest.approx(fitc, rel=1e-6)
    assert collapsed_objective(Kuu, Kuf, kd, y, s2, 0.0).value == pytest.approx(titsias, rel=1e-6)
    assert collapsed_objective(Kuu, Kuf, kd, y, s2, 1e-10).value == pytest.approx(titsias, rel=1e-6)
    # the bound sits below the exact evidence, FITC and power EP in between need not
    exact = multivariate_normal(np.zeros(40), k(X) + s2 * np.eye(40)).logpdf(y)
    assert titsias <= exact


def test_bad_alpha_and_noise(data):
    X, y, Z, k = data
    with pytest.raises(ValueError, match="alpha"):
        collapsed_objective(k(Z), k(Z, X), k.diag(X), y, 0.05, 1.5)
    with pytest.raises(ValueError, match="noise_variance"):
        collapsed_objective(k(Z), k(Z, X), k.diag(X), y, -1.0, 0.5)


@pytest.mark.parametrize("alpha", [0.0, 0.5, 1.0])
@pytest.mark.parametrize("kernel", [RBF(1.3, [0.9, 1.4]), Matern32(0.8, 1.1)])
def test_collapsed_gradients_match_finite_differences(data, alpha, kernel):
    X, y, Z, _ = data
    s2 = 0.05

    def F(theta, Zz, noise):
        k = kernel.clone_with_theta(theta)
        return collapsed_objective(k(Zz), k(Zz, X), k.diag(X), y, noise, alpha).value

    st = collapsed_objective(kernel(Z), kernel(Z, X), kernel.diag(X), y, s2, alpha,
                             eval_gradient=True)
    d_theta, d_Z = kernel_gradient(kernel, Z, X, st.grad)
    th, h = kernel.theta, 1e-6
    fd_theta = [(F(th + h * e, Z, s2) - F(th - h * e, Z, s2)) / (2 * h) for e in np.eye(th.size)]
    fd_Z = np.zeros_like(Z)
    for i in range(Z.shape[0]):
        for c in range(Z.shape[1]):
            E = np.zeros_like(Z)
            E[i, c] = h
            fd_Z[i, c] = (F(th, Z + E, s2) - F(th, Z - E, s2)) / (2 * h)
    fd_s2 = (F(th, Z, s2 * (1 + 1e-6)) - F(th, Z, s2 * (1 - 1e-6))) / (2e-6 * s2)
    np.testing.assert_allclose(d_theta, fd_theta, rtol=1e-5)
    np.testing.assert_allclose(d_Z, fd_Z, rtol=1e-5, atol=1e-5 * np.abs(fd_Z).max())
    assert st.grad.noise_variance == pytest.approx(fd_s2, rel=1e-5)


def test_old_module_name_is_gone():
    """``fastep.inference.sparse`` (0.2's name of ``fastep.inference.collapsed`` and
    ``fastep.inference.inducing``) was removed in 0.3 (CHANGELOG)."""
    import importlib
    import sys

    sys.modules.pop("fastep.inference.sparse", None)
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("fastep.inference.sparse")
