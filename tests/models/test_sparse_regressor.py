"""SparseGPRegressor: the collapsed bound's estimator, against exact GP regression."""
import numpy as np
import pytest

from fastep import SparseGPRegressor
from helpers.data import sparse_regression


@pytest.fixture(scope="module")
def data():
    return sparse_regression()


def test_regressor_with_inducing_points_at_the_data_is_exact_gp(data, ref):
    X, y, _, k = data
    Xs = np.linspace(-3, 3, 6)[:, None] * np.ones((1, 2))
    ex = ref.exact_gp_regression(k(X), y, 0.05, K_star=k(X, Xs), k_star_diag=k.diag(Xs))
    for power in (0.0, 1.0, 0.5):           # VFE, FITC, Power EP
        reg = SparseGPRegressor(k, power=power, noise_variance=0.05, inducing_points=X,
                                optimizer=None).fit(X, y)
        mean, std = reg.predict(Xs, return_std=True)
        assert reg.log_marginal_likelihood_value_ == pytest.approx(
            ex["log_marginal_likelihood"], rel=1e-6)
        np.testing.assert_allclose(mean, ex["mean_star"], atol=1e-6)
        np.testing.assert_allclose(std ** 2, ex["var_star"], atol=1e-6)


def test_regressor_fits_and_gradient_of_public_objective(data):
    X, y, _, _ = data
    reg = SparseGPRegressor(power=0.5, n_inducing=8, noise_variance=0.1,
                            random_state=0).fit(X, y)
    assert reg.inducing_points_.shape == (8, 2)
    assert reg.score(X, y) > 0.9
    # the optimum is a stationary point of the public objective in the kernel and noise
    theta = np.concatenate([reg.kernel_.theta, [np.log(reg.noise_variance_)]])
    value, grad = reg.log_marginal_likelihood(theta, eval_gradient=True)
    assert value == pytest.approx(reg.log_marginal_likelihood_value_, rel=1e-10)
    assert np.max(np.abs(grad)) < 1e-2 * max(1.0, abs(value))
    # ... and optimising never ends below where it started
    start = SparseGPRegressor(power=0.5, n_inducing=8, noise_variance=0.1,
                              random_state=0, optimizer=None).fit(X, y)
    assert reg.log_marginal_likelihood_value_ >= start.log_marginal_likelihood_value_


def test_regressor_bad_input(data):
    X, y, Z, _ = data
    with pytest.raises(ValueError, match="more inducing points"):
        SparseGPRegressor(n_inducing=41).fit(X, y)
    with pytest.raises(ValueError, match=r"inducing_points must have shape \(m, 2\)"):
        SparseGPRegressor(inducing_points=Z[:, :1]).fit(X, y)
    for power in (-0.5, 1.5, np.nan):
        with pytest.raises(ValueError, match="'power' parameter"):
            SparseGPRegressor(power=power).fit(X, y)
    with pytest.raises(ValueError, match="n_inducing"):
        SparseGPRegressor(n_inducing=0).fit(X, y)


