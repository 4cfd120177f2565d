"""State-space EP (fastep.inference.markov_ep) against independent truth.

Gaussian likelihood: dense GP regression by NumPy's solve (posterior mean, variance, log
marginal likelihood); other likelihoods: fastep's dense parallel EP with the Gram matrix of
the same kernel, at convergence (a different algorithm: O(n^3) Cholesky refreshes).
"""
import numpy as np
import pytest

import fastep
from fastep.inference.markov_ep import markov_ep
from fastep.kernels import RBF, ConstantKernel, Matern12, Matern32, Matern52, Periodic
from fastep.kernels.statespace import periodic_truncation_error, state_space
from fastep.likelihoods import Gaussian, Poisson, Probit, StudentT

KERNELS = {
    "matern12": Matern12(1.3, 2.0),
    "matern32": Matern32(0.7, 3.0),
    "matern52": Matern52(1.1, 4.0),
    "sum": Matern12(0.5, 1.0) + Matern52(1.0, 6.0) + Matern32(0.3, 0.5),
    "product": Matern32(0.7, 3.0) * Matern12(1.5, 8.0),
    "quasi_periodic": Matern32(1.0, 20.0) * Periodic(1.0, 1.5, 6.0) + Matern12(0.2, 1.0),
    "periodic_offset": Periodic(0.8, 2.0, 11.0) + ConstantKernel(0.6),
}


def _gp_regression(K, y, noise):
    """Dense GP regression with noise variance ``noise``: mean, variance, log p(y)."""
    n = y.shape[0]
    C = K + noise * np.eye(n)
    L = np.linalg.cholesky(C)
    alpha = np.linalg.solve(C, y)
    mean = K @ alpha
    var = np.diag(K) - np.einsum("ij,ji->i", K, np.linalg.solve(C, K))
    log_ml = -0.5 * y @ alpha - np.log(np.diag(L)).sum() - 0.5 * n * np.log(2 * np.pi)
    return mean, var, log_ml


@pytest.mark.parametrize("times", ["irregular", "grid"])
@pytest.mark.parametrize("name", list(KERNELS))
def test_gaussian_likelihood_is_dense_gp_regression(name, times):
    # irregular times: every step's transition computed once a run (step_cache); a grid
    # with every third point held out: the filter's two slots (steps 1 and 2)
    kernel = KERNELS[name]
    rng = np.random.default_rng(0)
    if times == "irregular":
        t = rng.uniform(0.0, 50.0, 300)                 # irregular, unsorted
    else:
        t = rng.permutation(np.flatnonzero(np.arange(450) % 3 != 2) * 0.25)
    t[7] = t[8]                                          # and one time repeated
    y = np.sin(t / 5.0) + 0.5 * rng.normal(size=t.size)
    res = markov_ep(t, y, kernel, Gaussian(0.3), damping=1.0, tol=1e-12)
    mean, var, log_ml = _gp_regression(kernel(t[:, None]), y, 0.3)
    np.testing.assert_allclose(res.mean, mean, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(res.var, var, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(res.log_marginal_likelihood, log_ml, rtol=1e-10)
    assert res.converged


@pytest.mark.parametrize("case", ["probit", "poisson", "student_t"])
def test_non_gaussian_equals_dense_parallel_ep(case):
    rng = np.random.default_rng(1)
    n = 500
    t = rng.uniform(0.0, 100.0, n)
    kernel = Matern32(1.0, 5.0)
    K = kernel(t[:, None])
    f = np.linalg.cholesky(K + 1e-8 * np.eye(n)) @ rng.normal(size=n)
    lik, y = {"probit": (Probit(), np.where(f + rng.normal(size=n) > 0, 1.0, -1.0)),
              "poisson": (Poisson(), rng.poisson(np.exp(f)).astype(float)),
              "student_t": (StudentT(4.0, 0.3), f + 0.3 * rng.standard_t(4.0, n))}[case]
    res = markov_ep(t, y, kernel, lik, tol=1e-11, max_iter=3000)
    dense = fastep.ep(K, y, lik, tol=1e-13, max_iter=3000)
    assert res.converged and dense.converged
    np.testing.assert_allclose(res.mean, dense.mean, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(res.var, dense.var, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(res.log_marginal_likelihood, dense.log_marginal_likelihood,
                               rtol=1e-8)
    np.testing.assert_allclose(res.site_tau, dense.site_tau, rtol=1e-5, atol=1e-7)


def test_many_series_are_independent_and_their_evidences_add():
    """Three series of different lengths, rows shuffled together, with a series id: the
    same marginals as each series alone, and the sum of their evidences."""
    rng = np.random.default_rng(2)
    kernel, lik = Matern52(1.0, 3.0), Poisson()
    parts = []
    for j, n in enumerate((50, 120, 7)):
        t = np.sort(rng.uniform(0.0, 30.0, n))
        parts.append((t, rng.poisson(np.exp(np.sin(t / 4.0 + j))).astype(float)))
    t = np.concatenate([p[0] for p in parts])
    y = np.concatenate([p[1] for p in parts])
    ids = np.repeat(["a", "b", "c"], [p[0].size for p in parts])
    perm = rng.permutation(t.size)
    together = markov_ep(t[perm], y[perm], kernel, lik, series=ids[perm], tol=1e-12)
    alone = [markov_ep(tp, yp, kernel, lik, tol=1e-12) for tp, yp in parts]
    inv = np.argsort(perm)
    np.testing.assert_allclose(together.mean[inv], np.concatenate([a.mean for a in alone]),
                               rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(together.log_marginal_likelihood,
                               sum(a.log_marginal_likelihood for a in alone), rtol=1e-10)


def _transition(ss, dt):
    from fastep.inference import _transitions
    D = ss.n_states
    A, Q = np.zeros((D, D)), np.zeros((D, D))
    _transitions._transition(dt, *ss.arrays[:5], ss.pinf, A, Q,
                             *(np.zeros((D, D)) for _ in range(3)))
    return A, Q


def test_state_space_form_reproduces_the_kernel():
    """h A(dt) P_inf h^T is the kernel at lag dt (the kernel objects' own Gram matrix),
    A(dt) is scipy's expm of the generator found from A over a small step, and P_inf is
    stationary (Q(dt) = P_inf - A P_inf A^T positive semi-definite)."""
    import scipy.linalg
    for kernel in KERNELS.values():
        ss = state_space(kernel)
        A_small, _ = _transition(ss, 1e-3)
        F = scipy.linalg.logm(A_small).real / 1e-3
        for dt in (0.0, 0.3, 2.0, 7.5):
            A, Q = _transition(ss, dt)
            k = kernel(np.array([[0.0]]), np.array([[dt]]))[0, 0]
            np.testing.assert_allclose(ss.h @ A @ ss.pinf @ ss.h, k, rtol=1e-10, atol=1e-12)
            np.testing.assert_allclose(A, scipy.linalg.expm(F * dt), rtol=1e-6, atol=1e-8)
            assert np.linalg.eigvalsh(Q).min() > -1e-10


@pytest.mark.parametrize("lengthscale", [2.0, 1.0, 0.5, 0.3])
def test_periodic_series_converges_to_the_periodic_kernel(lengthscale):
    """The truncated cosine series against the exact periodic kernel over a period of
    lags: the error shrinks with the order, is largest at lag 0 and equals
    periodic_truncation_error there; the posterior of a Gaussian regression follows."""
    kernel = Periodic(1.0, lengthscale, 5.0)
    lags = np.linspace(0.0, 5.0, 41)
    exact = kernel(np.zeros((1, 1)), lags[:, None])[0]
    errors = []
    for order in (2, 4, 8, 16, 32):
        ss = state_space(kernel, periodic_order=order)
        approx = np.array([ss.h @ _transition(ss, dt)[0] @ ss.pinf @ ss.h for dt in lags])
        err = np.abs(approx - exact)
        errors.append(err.max())
        np.testing.assert_allclose(err.max(), periodic_truncation_error(lengthscale, order),
                                   rtol=1e-6, atol=1e-14)
        assert err.max() <= err[0] + 1e-14
    assert all(b <= a for a, b in zip(errors, errors[1:]))
    assert errors[-1] < 1e-12
    rng = np.random.default_rng(4)
    t = rng.uniform(0.0, 30.0, 120)
    y = np.sin(2 * np.pi * t / 5.0) + 0.3 * rng.normal(size=t.size)
    mean, _, log_ml = _gp_regression(kernel(t[:, None]), y, 0.1)
    res = markov_ep(t, y, kernel, Gaussian(0.1), damping=1.0, tol=1e-12, periodic_order=32)
    np.testing.assert_allclose(res.mean, mean, rtol=1e-7, atol=1e-8)
    np.testing.assert_allclose(res.log_marginal_likelihood, log_ml, rtol=1e-9)


def test_bad_input_is_a_clear_error():
    t, y = np.arange(5.0), np.ones(5)
    with pytest.raises(ValueError, match="Matern12, Matern32, Matern52, Periodic"):
        markov_ep(t, y, RBF(1.0, 1.0), Gaussian(0.1))
    with pytest.raises(ValueError, match="no exact state-space form"):
        markov_ep(t, y, Matern32() * RBF(), Gaussian(0.1))
    with pytest.raises(ValueError, match="periodic_order must be a positive integer"):
        markov_ep(t, y, Periodic(), Gaussian(0.1), periodic_order=0)
    bad = t.copy()
    bad[2] = np.nan
    with pytest.raises(ValueError, match="t"):
        markov_ep(bad, y, Matern32(), Gaussian(0.1))
    with pytest.raises(ValueError, match="series must hold one id per row"):
        markov_ep(t, y, Matern32(), Gaussian(0.1), series=[0, 1])
    with pytest.raises(ValueError, match="one target per time"):
        markov_ep(t, y[:4], Matern32(), Gaussian(0.1))
    with pytest.raises(ValueError, match="one lengthscale"):
        markov_ep(t, y, Matern32(1.0, [1.0, 2.0]), Gaussian(0.1))


def test_gradient_equals_differences_of_the_converged_evidence():
    """markov_ep_gradient against central differences of log Z_EP re-converged at each
    perturbed parameter (kernel: log variance and log lengthscale of two components;
    likelihood: the negative binomial's log dispersion)."""
    from fastep.inference.markov_ep import markov_ep_gradient
    from fastep.likelihoods import NegativeBinomial
    rng = np.random.default_rng(3)
    t = rng.uniform(0.0, 100.0, 300)
    y = rng.poisson(np.exp(np.sin(t / 10.0))).astype(float)
    kernel, lik = Matern12(0.7, 3.0) + Matern52(0.5, 20.0), NegativeBinomial(3.0)
    res = markov_ep(t, y, kernel, lik, tol=1e-12, max_iter=5000)
    d_kernel, d_lik = markov_ep_gradient(res, t, y, kernel, lik)

    def evidence(k, lk):
        return markov_ep(t, y, k, lk, tol=1e-13, max_iter=5000, site_tau=res.site_tau,
                         site_nu=res.site_nu).log_marginal_likelihood

    h = 1e-4
    theta = kernel.theta
    for j in range(theta.size):
        up, down = theta.copy(), theta.copy()
        up[j] += h
        down[j] -= h
        fd = (evidence(kernel.clone_with_theta(up), lik)
              - evidence(kernel.clone_with_theta(down), lik)) / (2 * h)
        np.testing.assert_allclose(d_kernel[j], fd, rtol=1e-5, atol=1e-7)
    log_r = np.log(lik.params[:1])
    fd = (evidence(kernel, lik.clone_with_theta(log_r + h))
          - evidence(kernel, lik.clone_with_theta(log_r - h))) / (2 * h)
    np.testing.assert_allclose(d_lik[0], fd, rtol=1e-5, atol=1e-7)


def test_predictions_at_new_times_are_the_dense_gp_posterior():
    """markov_predict at new times (between, before and after the data, and at a
    training time) equals dense GP regression's predictive mean and variance of f."""
    from fastep.inference.markov_ep import markov_predict
    rng = np.random.default_rng(4)
    t = rng.uniform(0.0, 20.0, 80)
    y = np.cos(t / 3.0) + 0.3 * rng.normal(size=t.size)
    kernel = Matern32(1.2, 2.5) + Matern12(0.2, 0.7)
    res = markov_ep(t, y, kernel, Gaussian(0.1), damping=1.0, tol=1e-13)
    t_new = np.array([-3.0, 0.5, 7.25, t[3], 19.9, 40.0])
    mean, var = markov_predict(res, t, t_new, kernel)
    C = kernel(t[:, None]) + 0.1 * np.eye(t.size)
    Ks = kernel(t_new[:, None], t[:, None])
    np.testing.assert_allclose(mean, Ks @ np.linalg.solve(C, y), rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(var, kernel.diag(t_new[:, None]) -
                               np.einsum("ij,ji->i", Ks, np.linalg.solve(C, Ks.T)),
                               rtol=1e-8, atol=1e-10)


def test_a_site_of_negative_precision_at_the_start_of_a_series():
    """A Student-t outlier at the first time gives a site whose negative precision
    outweighs the prior variance there (an intermediate filter step with 1 + tau s < 0):
    a valid EP fixed point, which the filter must carry (it raised 'not finite'); truth:
    dense parallel EP."""
    t = np.arange(30.0)
    y = np.zeros(30)
    y[0] = 4.0
    kernel, lik = Matern32(16.0, 20.0), StudentT(3.0, 0.3)
    res = markov_ep(t, y, kernel, lik, tol=1e-11, max_iter=3000)
    dense = fastep.ep(kernel(t[:, None]), y, lik, tol=1e-13, max_iter=3000)
    np.testing.assert_allclose(res.log_marginal_likelihood, dense.log_marginal_likelihood,
                               rtol=1e-8)
    np.testing.assert_allclose(res.mean, dense.mean, rtol=1e-6, atol=1e-8)
    # the dense fixed point's sites, given in either order at repeated times
    again = markov_ep(t, y, kernel, lik, max_iter=0, site_tau=dense.site_tau,
                      site_nu=dense.site_nu)
    np.testing.assert_allclose(again.mean, dense.mean, rtol=1e-8, atol=1e-10)
    with pytest.raises(ValueError, match="site_tau"):
        markov_ep(t, y, kernel, lik, site_tau=np.zeros(31), site_nu=np.zeros(31))


def _outlier_series():
    rng = np.random.default_rng(3)
    t = np.sort(rng.uniform(0.0, 30.0, 80))
    t = np.concatenate([t, t[:6]])
    rng.shuffle(t)
    y = np.sin(t) + 0.1 * rng.normal(size=t.size)
    y[rng.choice(t.size, 10, replace=False)] += rng.choice([-8.0, 8.0], 10)
    return t, y


@pytest.mark.filterwarnings("ignore::fastep.EPNumericalWarning")
def test_likelihood_gradient_leaves_out_the_sites_the_evidence_leaves_out():
    """With a site left out (improper cavity), d log Z / d log(likelihood parameters)
    equals central differences of the evidence at the same sites (max_iter=0), which
    leaves that site out too (review finding: the gradient summed it in)."""
    from fastep.inference.markov_ep import markov_ep_gradient
    t, y = _outlier_series()
    kernel = Matern32(1.0, 20.0) * Periodic(1.0, 1.0, 2 * np.pi)
    lik = StudentT(3.0, 0.05)
    with pytest.warns(fastep.EPNumericalWarning):
        res = markov_ep(t, y, kernel, lik, damping=0.5, tol=1e-11, max_iter=3000)
    assert res.n_skipped >= 1
    _, d_lik = markov_ep_gradient(res, t, y, kernel, lik)
    theta, h, fd = np.asarray(lik.theta), 1e-5, []
    for j in range(theta.size):
        up, down = theta.copy(), theta.copy()
        up[j] += h
        down[j] -= h
        at = [markov_ep(t, y, kernel, lik.clone_with_theta(v), max_iter=0,
                        site_tau=res.site_tau, site_nu=res.site_nu).log_marginal_likelihood
              for v in (up, down)]
        fd.append((at[0] - at[1]) / (2 * h))
    np.testing.assert_allclose(d_lik, fd, rtol=1e-5, atol=1e-5)


def test_long_periodic_lengthscales_at_high_orders_stay_exact():
    """Harmonics whose coefficients underflow (lengthscale 1e5, order 30) no longer make
    the state covariance singular (review finding: LAPACK raised inside the filter); the
    posterior equals dense GP regression."""
    rng = np.random.default_rng(0)
    t = np.sort(rng.uniform(0.0, 10.0, 30))
    y = np.sin(t) + 0.1 * rng.normal(size=t.size)
    for ls, order in ((1e5, 30), (1e3, 45), (100.0, 60)):
        kernel = Periodic(1.0, ls, 3.0) + Matern32(0.5, 2.0)
        res = markov_ep(t, y, kernel, Gaussian(0.1), damping=1.0, tol=1e-12,
                        periodic_order=order)
        mean, _, log_ml = _gp_regression(kernel(t[:, None]), y, 0.1)
        np.testing.assert_allclose(res.mean, mean, rtol=1e-7, atol=1e-8)
        np.testing.assert_allclose(res.log_marginal_likelihood, log_ml, rtol=1e-9)


@pytest.mark.filterwarnings("ignore::fastep.EPNumericalWarning")
def test_warm_start_from_sites_that_make_the_posterior_improper_starts_afresh():
    """Sites of another kernel that make this one's posterior improper (ML-II's warm
    start) give way to a cold start, not to a non-finite evidence (review finding)."""
    t, y = _outlier_series()
    lik = StudentT(3.0, 0.05)
    kernel = Matern32(1.0, 3.0)
    bad_tau = np.full(t.size, -50.0)
    res = markov_ep(t, y, kernel, lik, damping=0.5, tol=1e-10, max_iter=3000,
                    site_tau=bad_tau, site_nu=np.zeros(t.size))
    cold = markov_ep(t, y, kernel, lik, damping=0.5, tol=1e-10, max_iter=3000)
    np.testing.assert_allclose(res.log_marginal_likelihood, cold.log_marginal_likelihood,
                               rtol=1e-8)


def test_series_ids_that_do_not_sort_or_are_nan_are_clear_errors():
    t, y = np.arange(5.0), np.ones(5)
    with pytest.raises(ValueError, match="numbers or strings that sort"):
        markov_ep(t, y, Matern32(), Gaussian(0.1), series=[None, 1, None, 1, 1])
    with pytest.raises(ValueError, match="NaN or infinite ids"):
        markov_ep(t, y, Matern32(), Gaussian(0.1), series=[0.0, np.nan, 1.0, 1.0, 0.0])


@pytest.mark.parametrize("series", [None, np.repeat([0, 1, 2], 200)])
def test_gradient_filters_in_parallel_equal_one_after_another(series):
    """The evidence gradient's 2p filters run at once (a prange over settings and series,
    the filter keeping nothing per point): the same numbers, to the bit, as the central
    differences of the smoothing filter run one setting after another."""
    import sys

    from fastep.inference.markov_ep import markov_ep_gradient
    module = sys.modules["fastep.inference.markov_ep"]
    rng = np.random.default_rng(3)
    t = np.sort(rng.uniform(0.0, 100.0, 600))
    y = rng.poisson(np.exp(np.sin(t / 8.0))).astype(float)
    kernel = Matern32(1.0, 5.0) + Matern12(0.3, 2.0)
    res = markov_ep(t, y, kernel, Poisson(), series=series)
    parallel = markov_ep_gradient(res, t, y, kernel, Poisson(), series=series)[0]
    order, starts = module._arrange(t, series)
    ts, tau, nu = (np.ascontiguousarray(v[order]) for v in (t, res.site_tau, res.site_nu))
    step, theta = 1e-5, kernel.theta
    serial = [(module._log_norm(ts, tau, nu, starts, kernel.clone_with_theta(
                   theta + step * np.eye(theta.size)[j]), res.periodic_order, smooth=True)[0]
               - module._log_norm(ts, tau, nu, starts, kernel.clone_with_theta(
                   theta - step * np.eye(theta.size)[j]), res.periodic_order, smooth=True)[0]) / (2 * step)
              for j in range(theta.size)]
    np.testing.assert_array_equal(parallel, serial)


def test_step_transitions_read_or_computed_give_the_same_filter():
    """Irregular times, three series and a repeated time: the filter and smoother reading
    every step's transition (computed once, in parallel blocks) equal those computing
    them as they go, to the bit; the cache is taken where the filter's two slots would
    compute most steps, and the slots' count starts again with every series."""
    from fastep.inference._kalman import filter_smooth
    from fastep.inference._transitions import slot_misses, step_cache
    from fastep.kernels.statespace import state_space
    rng = np.random.default_rng(3)
    n = 9000                                      # (more than two blocks of rows)
    t = np.sort(rng.uniform(0.0, 900.0, n))
    t[100] = t[101]
    starts = np.array([0, 2500, 2501, n], dtype=np.int64)   # one series of a single point
    tau, nu = rng.uniform(-0.05, 2.0, n), rng.normal(size=n)
    first = np.zeros(n, dtype=bool)
    first[starts[:-1]] = True
    for kernel in (Matern32(1.0, 30.0), Matern52(0.7, 10.0) + Matern12(0.2, 2.0)):
        ss = state_space(kernel)
        D = ss.n_states
        outs = []
        for cache in (step_cache(t, starts, ss), (np.zeros((0, D, D)),) * 2):
            mf, Pf = np.empty((n, D)), np.empty((n, D, D))
            mean, var, ln = np.empty(n), np.empty(n), np.empty(3)
            filter_smooth(t, tau, nu, starts, *ss.arrays, mf, Pf, mean, var, ln, True, *cache)
            outs.append((mean, var, ln))
        assert step_cache(t, starts, ss)[0].shape == (n, D, D)
        for a, b in zip(*outs):
            np.testing.assert_array_equal(a, b)
    grid = np.tile(np.arange(4.0), 250)           # 250 series of 4 days: a step each
    first = np.arange(1000) % 4 == 0
    assert slot_misses(grid, first) == 250
    assert slot_misses(np.arange(1000.0), np.arange(1000) == 0) == 1
