"""The robust-max likelihood of multiclass GWI (seed 002): S(x, j) against Monte Carlo (10^6
draws), adaptive quadrature (tests/helpers/reference.py) and the two-class closed form
Phi((m0 - m1) / sqrt(v0 + v1)); its gradients against five-point finite differences."""
import numpy as np
import pytest
from scipy.special import ndtr

from fastep.likelihoods import RobustMax
from helpers.reference import assert_grad, fd_grad

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
def test_S_converges_to_quadrature(mean, var, ref):
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


def test_standard_deviations_not_variances(ref):
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
