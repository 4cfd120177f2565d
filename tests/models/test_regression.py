"""EPGaussianProcessRegressor: y normalised for location-scale likelihoods, robust
Student-t, counts with exposure, and what it says where an answer would not be finite."""
import math
import warnings

import numpy as np
import pytest

import fastep
from fastep.kernels import RBF


def test_normalize_y_is_the_fit_on_standardised_targets_in_y_units():
    # truth: the model fitted by hand to (y - m) / s, its outputs mapped back to y's units
    rng = np.random.default_rng(3)
    X = rng.uniform(-3, 3, (60, 1))
    y = 150.0 + 80.0 * np.sin(X[:, 0]) + 8.0 * rng.standard_t(4, size=60)
    Xt = np.linspace(-3, 3, 25)[:, None]
    yt = 150.0 + 80.0 * np.sin(Xt[:, 0])
    m, s = y.mean(), y.std()
    auto = fastep.EPGaussianProcessRegressor().fit(X, y)              # normalize_y="auto"
    by_hand = fastep.EPGaussianProcessRegressor(normalize_y=False).fit(X, (y - m) / s)
    mean, std = auto.predict(Xt, return_std=True)
    ref_mean, ref_std = by_hand.predict(Xt, return_std=True)
    np.testing.assert_allclose(mean, m + s * ref_mean, rtol=1e-10)
    np.testing.assert_allclose(std, s * ref_std, rtol=1e-10)
    f, fs = auto.predict_latent(Xt, return_std=True)
    rf, rfs = by_hand.predict_latent(Xt, return_std=True)
    np.testing.assert_allclose([f, fs], [m + s * rf, s * rfs], rtol=1e-10)
    np.testing.assert_allclose(auto.log_predictive_density(Xt, yt),
                               by_hand.log_predictive_density(Xt, (yt - m) / s) - np.log(s),
                               rtol=1e-10)
    np.testing.assert_allclose(auto.loo_predict(), m + s * by_hand.loo_predict(), rtol=1e-10)
    np.testing.assert_allclose(auto.loo_log_predictive_density(),
                               by_hand.loo_log_predictive_density() - np.log(s), rtol=1e-10)
    # 0.2 (no normalisation, ML-II from RBF(1, 1)): the zero-mean GP spent its variance on
    # the offset, at a local optimum 100 nats below the one that ML-II from the default
    # kernel's start (lengthscale at the median distance) finds on the same raw targets
    raw = fastep.EPGaussianProcessRegressor(RBF(), normalize_y=False).fit(X, y)
    rmse = lambda p: float(np.sqrt(np.mean((p - yt) ** 2)))       # noqa: E731
    assert rmse(mean) < 0.5 * rmse(raw.predict(Xt))
    raw_median_start = fastep.EPGaussianProcessRegressor(normalize_y=False).fit(X, y)
    assert raw_median_start.log_marginal_likelihood_value_ > \
        raw.log_marginal_likelihood_value_ + 50.0
    with pytest.raises(ValueError, match="normalize_y=True needs a likelihood"):
        fastep.EPGaussianProcessRegressor(likelihood="poisson", normalize_y=True).fit(
            X, np.round(np.abs(y)))


def test_student_t_with_df_at_most_2_says_why_its_std_is_infinite():
    rng = np.random.default_rng(0)
    X = rng.uniform(-2, 2, (30, 1))
    y = np.sin(X[:, 0]) + 0.1 * rng.standard_cauchy(30)
    model = fastep.EPGaussianProcessRegressor(
        likelihood=fastep.likelihoods.StudentT(df=1.5, scale=0.1, df_bounds="fixed"),
        optimizer=None, normalize_y=False).fit(X, y)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert np.isfinite(model.predict(X)).all()          # the mean alone: no warning
    with pytest.warns(UserWarning, match=r"df = 1.5 <= 2.*df_bounds=\(2.1"):
        _, std = model.predict(X, return_std=True)
    assert np.all(np.isinf(std))


def test_count_regressor_far_from_the_data_says_why_not_inf():
    X = np.linspace(0, 1, 10)[:, None]
    y = np.arange(10) % 3
    model = fastep.EPGaussianProcessRegressor(RBF(variance=1e4), likelihood="poisson",
                                              optimizer=None).fit(X, y)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ValueError, match="overflows float64"):
            model.predict(np.array([[50.0]]), return_std=True)
        with pytest.raises(ValueError, match="overflows float64"):
            model.score(np.array([[50.0]]), [1.0])
        mean, std = model.predict(np.array([[0.5]]), return_std=True)
        assert np.isfinite(mean).all() and np.isfinite(std).all()


def test_count_regressor_scores_and_densities_beyond_float64_are_errors_or_exact():
    """Found by fuzzing 0.3: log p(y*) at a rate past float64 was -inf with an internal
    message (mu_cav), and R^2 of finite predictions near 1e195 overflowed in
    scikit-learn's squares."""
    X = np.linspace(0, 1, 10)[:, None]
    y = np.arange(10) % 3
    model = fastep.EPGaussianProcessRegressor(RBF(variance=900.0), likelihood="poisson",
                                              optimizer=None, normalize_y=False).fit(X, y)
    far = np.array([[0.5], [50.0]])
    with pytest.warns(UserWarning, match="dominated by that variance"):
        model.predict(far)                  # said aloud: the mean is the variance's
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.filterwarnings("ignore", message=".*dominated by that variance")
        huge = model.predict(far)
        assert np.isfinite(huge).all() and huge[1] > 1e190
        with pytest.raises(ValueError, match="below -1.8e308"):
            model.score(far, [1.0, 2.0])
        # R^2 against targets as large as the predictions: the ratio of sums of squares
        # as scikit-learn forms it, on values scaled down by hand
        target = huge * np.array([1.5, 0.5])
        from sklearn.metrics import r2_score
        assert model.score(far, target) == pytest.approx(
            r2_score(target / 1e190, huge / 1e190), rel=1e-12)
        big = fastep.EPGaussianProcessRegressor(RBF(variance=1e5), likelihood="poisson",
                                                optimizer=None, normalize_y=False)
        big.fit(X, y)
        # far from the data E[y] overflows (latent variance 1e5) but p(y) does not
        dens = big.log_predictive_density(far, [382.0, 1.0])
        assert np.isfinite(dens).all() and np.all(dens < 0)
        # the one log-density of LOO, predictions and the censored model: the LOO
        # cavity of a fuzzed fit had mean 1043 at a count of 8.9e6
        with pytest.raises(ValueError, match="overflows float64"):
            fastep.likelihoods.Poisson().log_predictive_density([8854927.0], [1043.3],
                                                                [8.6e-7])
        # the negative binomial's p(y) is representable there: with dispersion r = 1,
        # p(y | f) = (mu / (1 + mu))^y / (1 + mu) -> exp(-f) as mu = e^f grows, so
        # log p(y) = log E[exp(-f)] = -m + v / 2
        nb = fastep.likelihoods.NegativeBinomial().log_predictive_density(
            [8854927.0], [1043.3], [8.6e-7])
        assert nb[0] == pytest.approx(-1043.3 + 4.3e-7, abs=1e-8)
        for lik in (fastep.likelihoods.Poisson(), fastep.likelihoods.NegativeBinomial()):
            near = lik.log_predictive_density([3.0], [1.0], [0.5])
            assert np.isfinite(near).all()
        # a large latent variance makes E[rate] overflow but not p(y): p(0) = E[exp(-e^f)]
        # for f ~ N(0, 1500) is about 1/2 (adaptive quadrature, split where exp(-e^f)
        # falls from 1 to 0, as the truth)
        from scipy import integrate, stats
        def integrand(f):
            return math.exp(-math.exp(f)) * stats.norm.pdf(f, 0.0, math.sqrt(1500.0))
        truth = math.log(sum(integrate.quad(integrand, a, b, epsabs=0, epsrel=1e-12,
                                            limit=500)[0]
                             for a, b in ((-400, -40), (-40, 40), (40, 400))))
        got = fastep.likelihoods.Poisson().log_predictive_density([0.0], [0.0], [1500.0])
        assert got[0] == pytest.approx(truth, abs=1e-6)
        # exact predictions above 1e100: R^2 = 1, as scikit-learn gives
        exact = model.predict(far)
        assert model.score(far, exact) == 1.0


def test_count_model_fitted_with_exposure_needs_it_to_predict():
    rng = np.random.default_rng(0)
    X = rng.uniform(0, 1, (30, 1))
    exposure = rng.uniform(1, 5, 30)
    y = rng.poisson(exposure * np.exp(np.sin(3 * X[:, 0])))
    model = fastep.EPGaussianProcessRegressor(likelihood="poisson", optimizer=None).fit(
        X, y, exposure=exposure)
    for call in (lambda: model.predict(X), lambda: model.predict(X, return_std=True),
                 lambda: model.score(X, y), lambda: model.log_predictive_density(X, y)):
        with pytest.raises(ValueError, match="fitted with exposure=.*pass exposure="):
            call()
    doubled = model.predict(X, exposure=2 * exposure)
    np.testing.assert_allclose(doubled, 2 * model.predict(X, exposure=exposure), rtol=1e-12)
    assert model.score(X, y, exposure=exposure) > 0.0
    # an array of exposures given to the constructor does not carry over to new points
    arrays = fastep.EPGaussianProcessRegressor(
        likelihood=fastep.likelihoods.Poisson(exposure=np.full(30, 3.0)),
        optimizer=None).fit(X, y, exposure=exposure)
    with pytest.raises(ValueError, match="pass exposure="):
        arrays.predict(X[:3])
    # a scalar exposure of the constructor's likelihood is the model's own default
    own = fastep.EPGaussianProcessRegressor(likelihood=fastep.likelihoods.Poisson(exposure=2.0),
                                            optimizer=None).fit(X, y)
    assert np.isfinite(own.predict(X)).all()


def _zero_inflated_counts(n, seed, pi=0.35):
    """Counts of rate exp(1 + sin(1.5 x)) with a share pi of structural zeros."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(-3.0, 3.0, (n, 1))
    y = rng.poisson(np.exp(1.0 + np.sin(1.5 * X[:, 0]))) * (rng.random(n) >= pi)
    return X, y.astype(float)


def test_zero_inflated_poisson_learns_the_zeros_and_predicts_better_than_poisson():
    """On zero-inflated counts, ML-II finds the share of structural zeros, and the held-out
    log predictive density beats the Poisson GP's (the issue's acceptance; measured: ZIP
    -1.71, Poisson -2.19 per point)."""
    X, y = _zero_inflated_counts(300, 0)
    Xt, yt = _zero_inflated_counts(2000, 1)
    zip_ = fastep.EPGaussianProcessRegressor(likelihood="zero_inflated_poisson").fit(X, y)
    poisson = fastep.EPGaussianProcessRegressor(likelihood="poisson").fit(X, y)
    assert abs(zip_.likelihood_.zero_prob - 0.35) < 0.08
    lpd_zip = zip_.log_predictive_density(Xt, yt).mean()
    lpd_poisson = poisson.log_predictive_density(Xt, yt).mean()
    assert lpd_zip > lpd_poisson + 0.2, (lpd_zip, lpd_poisson)
    # E[y] = (1 - pi) E[rate]: the held-out counts' mean within its sampling error
    assert abs(zip_.predict(Xt).mean() - yt.mean()) < 4 * yt.std() / np.sqrt(yt.size)


@pytest.mark.parametrize("name", ["zero_inflated_poisson", "zero_inflated_negative_binomial"])
def test_zero_inflated_evidence_gradient_matches_differences(name):
    """d log Z_EP / d theta (kernel and likelihood parameters, the zero probability
    included) against central differences of the converged EP evidence."""
    X, y = _zero_inflated_counts(60, 2)
    reg = fastep.EPGaussianProcessRegressor(likelihood=name, optimizer=None, tol=1e-10,
                                            max_iter=500).fit(X, y)
    theta = np.concatenate([reg.kernel_.theta, reg.likelihood_.theta])
    value, grad = reg.log_marginal_likelihood(theta, eval_gradient=True)
    h = 1e-5
    for j in range(theta.size):
        e = np.zeros(theta.size)
        e[j] = h
        fd = (reg.log_marginal_likelihood(theta + e)
              - reg.log_marginal_likelihood(theta - e)) / (2 * h)
        assert grad[j] == pytest.approx(fd, rel=1e-5, abs=1e-6), (j, grad[j], fd)


def _binomial_glm_data(n=40, seed=11):
    """A binomial GLM: design [1, x1, x2], trials 1-29, y ~ Binomial(N, sigma(A beta))."""
    from scipy.special import expit
    rng = np.random.default_rng(seed)
    A = np.column_stack([np.ones(n), rng.normal(size=(n, 2))])
    N = rng.integers(1, 30, n).astype(float)
    y = rng.binomial(N.astype(int), expit(A @ np.array([-0.5, 1.0, -0.7]))).astype(float)
    return A, N, y, np.column_stack([np.ones(5), rng.normal(size=(5, 2))])


def test_binomial_regression_equals_the_bayesian_glm_by_importance_sampling(tmp_path):
    """``likelihood="binomial"`` with a linear kernel of variance v is the Bayesian binomial
    GLM with beta ~ N(0, v I): its EP posterior of f at new inputs and its log evidence
    equal those of 400,000 importance samples of beta (a Student-t proposal at the
    posterior mode; Monte Carlo error about 0.002 sd and 1e-3 nats), to 1% of a posterior
    sd and 5e-3 nats (EP's evidence is itself approximate: 2.5e-3 nats low here).  The model saves and loads, and asks for ``trials=`` again at prediction."""
    from scipy import stats
    from scipy.special import gammaln, log_expit, logsumexp
    from fastep.kernels import Linear
    A, N, y, At = _binomial_glm_data()
    v = 4.0
    reg = fastep.EPGaussianProcessRegressor(Linear(variance=v), likelihood="binomial",
                                            optimizer=None, tol=1e-10).fit(A, y, trials=N)
    mean, std = reg.predict_latent(At, return_std=True)
    log_c = float(np.sum(gammaln(N + 1) - gammaln(y + 1) - gammaln(N - y + 1)))

    def log_joint(b):
        f = b @ A.T
        return (log_c + (y * log_expit(f) + (N - y) * log_expit(-f)).sum(-1)
                + stats.multivariate_normal(np.zeros(3), v * np.eye(3)).logpdf(b))
    b = np.zeros(3)
    for _ in range(50):                             # Newton to the posterior mode
        p = 1.0 / (1.0 + np.exp(-(A @ b)))
        H = -(A.T * (N * p * (1 - p))) @ A - np.eye(3) / v
        b = b - np.linalg.solve(H, A.T @ (y - N * p) - b / v)
    proposal = stats.multivariate_t(loc=b, shape=1.5 * np.linalg.inv(-H), df=5)
    S = proposal.rvs(size=400_000, random_state=1)
    log_w = log_joint(S) - proposal.logpdf(S)
    w = np.exp(log_w - log_w.max())
    w /= w.sum()
    f = S @ At.T
    true_mean = w @ f
    true_std = np.sqrt(w @ (f - true_mean) ** 2)
    np.testing.assert_allclose(mean, true_mean, atol=0.01 * true_std.min())
    np.testing.assert_allclose(std, true_std, rtol=0.02)
    assert reg.log_marginal_likelihood_value_ == pytest.approx(
        logsumexp(log_w) - np.log(S.shape[0]), abs=5e-3)
    p = reg.predict(At, trials=np.ones(5))          # the success probability E[sigma(f)]
    assert np.all((p > 0) & (p < 1))
    np.testing.assert_allclose(reg.predict(At, trials=np.full(5, 10.0)), 10 * p, rtol=1e-12)
    with pytest.raises(ValueError, match="pass trials= for the points to predict too"):
        reg.predict(At)
    fastep.save_model(reg, tmp_path / "b.npz")
    back = fastep.load_model(tmp_path / "b.npz")
    np.testing.assert_array_equal(back.predict(At, trials=np.ones(5)), p)
    with pytest.raises(ValueError, match=r"exceeds its trials"):
        fastep.EPGaussianProcessRegressor(likelihood="binomial").fit(A, y + 30, trials=N)


def test_count_predictions_far_from_the_data_warn_and_offer_the_median():
    """Far from the training inputs a count model's latent variance returns to the
    prior's, and the mean of the log-normal rate, exp(m + v / 2), is dominated by it
    (sunspots fitted on the first 70% of the years predicted the last 30% at an RMSE of
    401 against 53.5 for the training mean, without a word): predict warns there and not
    near the data, and predict_median gives the rate's median, exp(m) times the
    exposure (truth: the median of exp(m + sd z) over standard normal quantiles)."""
    rng = np.random.default_rng(3)
    X = rng.uniform(0.0, 1.0, (40, 1))
    y = rng.poisson(np.exp(1.0 + np.sin(4 * X[:, 0])))
    reg = fastep.EPGaussianProcessRegressor(RBF(4.0, 0.3), likelihood="poisson",
                                            optimizer=None).fit(X, y)
    near, far = np.array([[0.5]]), np.array([[6.0]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        reg.predict(near)
    with pytest.warns(UserWarning, match="dominated by that variance.*predict_median.*"
                                         r"ConstantKernel\(c\)"):
        reg.predict(far)
    m, s = reg.predict_latent(far, return_std=True)
    z = np.sort(np.random.default_rng(0).normal(size=200_001))
    assert reg.predict_median(far)[0] == pytest.approx(np.median(np.exp(m[0] + s[0] * z)),
                                                       rel=1e-2)
    np.testing.assert_allclose(reg.predict_median(near, exposure=np.array([3.0])),
                               3.0 * reg.predict_median(near), rtol=1e-12)


def _custom_binomial(y, extra, f, params):
    """log Binomial(y | extra[0] trials, sigma(f)), written as a user would (module level:
    a pickled CustomLikelihood keeps its function by reference)."""
    n = extra[0]
    lp = -math.log1p(math.exp(-f)) if f > 0 else f - math.log1p(math.exp(f))
    lq = -math.log1p(math.exp(f)) if f < 0 else -f - math.log1p(math.exp(-f))
    return (math.lgamma(n + 1) - math.lgamma(y + 1) - math.lgamma(n - y + 1)
            + y * lp + (n - y) * lq)


def test_custom_likelihood_with_per_row_data_fits_as_the_builtin():
    from fastep import EPGaussianProcessRegressor
    """A CustomLikelihood that reads per-row data (a binomial's trials, n_extra=1) was
    refused by the regressor (issue 60); given as extra= it fits as the built-in Binomial
    with trials= does (truth: that independent implementation), is a clear error without
    its data or at predict, and survives pickling with its data."""
    import math
    import pickle
    from fastep.likelihoods import CustomLikelihood

    rng = np.random.default_rng(0)
    X = rng.normal(size=(80, 1))
    trials = rng.integers(1, 10, 80).astype(float)
    y = rng.binomial(trials.astype(int), 1 / (1 + np.exp(-X[:, 0]))).astype(float)
    lik = CustomLikelihood(_custom_binomial, n_extra=1)
    with pytest.raises(ValueError, match="reads 1 extra column.*extra="):
        EPGaussianProcessRegressor(likelihood=lik).fit(X, y)
    est = EPGaussianProcessRegressor(likelihood=lik).fit(X, y, extra=trials)
    ref = EPGaussianProcessRegressor(likelihood="binomial").fit(X, y, trials=trials)
    np.testing.assert_allclose(est.kernel_.theta, ref.kernel_.theta, rtol=1e-6)
    np.testing.assert_allclose(est.log_marginal_likelihood_value_,
                               ref.log_marginal_likelihood_value_, rtol=1e-9)
    np.testing.assert_allclose(est.predict_latent(X[:5]), ref.predict_latent(X[:5]),
                               rtol=1e-6, atol=1e-9)
    with pytest.raises(ValueError, match="predict_latent"):
        est.predict(X[:5], extra=trials[:5])
    again = pickle.loads(pickle.dumps(est))
    np.testing.assert_array_equal(again.predict_latent(X[:5]), est.predict_latent(X[:5]))


def test_markov_inference_fits_a_count_series_as_dense_ep_does(tmp_path):
    """inference='markov' (state-space EP, O(n)) learns the kernel of a count series to
    the optimum dense EP's ML-II finds (truth: the dense fit, a different algorithm), its
    predictions at held-out times agree, save/load is exact, and inputs it cannot model
    are a clear error."""
    from fastep import EPGaussianProcessRegressor
    from fastep.kernels import Matern32
    rng = np.random.default_rng(5)
    t = np.arange(700.0)
    y = rng.poisson(np.exp(0.8 * np.sin(t / 40.0) + 0.4 * np.sin(t / 9.0))).astype(float)
    train = rng.uniform(size=t.size) < 0.7
    X = t[:, None]
    fits = {inference: EPGaussianProcessRegressor(
        Matern32(1.0, 10.0), likelihood="poisson", inference=inference, n_inducing=None,
        tol_optimizer=1e-9).fit(X[train], y[train]) for inference in ("markov", "ep")}
    markov, dense = fits["markov"], fits["ep"]
    np.testing.assert_allclose(markov.kernel_.theta, dense.kernel_.theta, atol=2e-3)
    np.testing.assert_allclose(markov.log_marginal_likelihood_value_,
                               dense.log_marginal_likelihood_value_, rtol=1e-6)
    m1, s1 = markov.predict_latent(X[~train], return_std=True)
    m2, s2 = dense.predict_latent(X[~train], return_std=True)
    np.testing.assert_allclose(m1, m2, atol=5e-3)
    np.testing.assert_allclose(s1, s2, atol=5e-3)
    path = tmp_path / "markov.npz"
    fastep.save_model(markov, path)
    again = fastep.load_model(path)
    np.testing.assert_array_equal(again.predict(X[~train]), markov.predict(X[~train]))
    with pytest.raises(ValueError, match="one column"):
        EPGaussianProcessRegressor(Matern32(), likelihood="poisson",
                                   inference="markov").fit(np.c_[t, t, t], y)
    with pytest.raises(ValueError, match="no exact state-space form"):
        EPGaussianProcessRegressor(RBF(), likelihood="poisson", inference="markov",
                                   optimizer=None).fit(X, y)


def test_markov_inference_learns_one_kernel_for_many_series(tmp_path):
    """X = (time, series id): independent series sharing a learnt quasi-periodic kernel.
    Truth: fastep's dense EP on each series alone (its own Gram matrix), whose evidences
    summed equal the fit's evidence at the learnt kernel and are lower at every nearby
    kernel (the fit is the optimum of that sum); a series' predictions equal those of a
    fit of that series alone at the same kernel, and a new id gets the prior."""
    from fastep import EPGaussianProcessRegressor
    from fastep.kernels import Matern32, Periodic
    from fastep.likelihoods import Poisson
    rng = np.random.default_rng(9)
    parts = []
    for j, n in enumerate((160, 90, 230)):
        t = np.sort(rng.choice(400, n, replace=False)).astype(float)
        f = 0.7 * np.sin(2 * np.pi * t / 7.0 + j) + 0.5 * np.sin(t / 60.0 + 2 * j)
        parts.append((t, np.full(n, float(j)), rng.poisson(np.exp(f)).astype(float)))
    X = np.concatenate([np.c_[t, s] for t, s, _ in parts])
    y = np.concatenate([p[2] for p in parts])
    perm = rng.permutation(y.size)
    kernel = Matern32(1.0, 100.0) * Periodic(1.0, 1.0, 7.0, period_bounds="fixed")
    est = EPGaussianProcessRegressor(kernel, likelihood="poisson", inference="markov",
                                     tol=1e-10,
                                     tol_optimizer=1e-10).fit(X[perm], y[perm])

    def dense_evidence(k):
        return sum(fastep.ep(k(t[:, None]), yy, Poisson(), tol=1e-12,
                             max_iter=2000).log_marginal_likelihood for t, _, yy in parts)

    fitted = est.kernel_
    best = dense_evidence(fitted)
    np.testing.assert_allclose(best, est.log_marginal_likelihood_value_, rtol=1e-6)
    for j in range(fitted.theta.size):
        for h in (-0.05, 0.05):
            theta = fitted.theta.copy()
            theta[j] += h
            moved = dense_evidence(fitted.clone_with_theta(theta))
            assert moved < best + 1e-6, (j, h, moved, best)
    t1, _, y1 = parts[1]
    alone = EPGaussianProcessRegressor(fitted, likelihood="poisson", inference="markov",
                                       optimizer=None, tol=1e-10).fit(t1[:, None], y1)
    t_new = np.array([3.5, 100.5, 401.0])
    np.testing.assert_allclose(est.predict_latent(np.c_[t_new, np.ones(3)]),
                               alone.predict_latent(t_new[:, None]), rtol=1e-6, atol=1e-8)
    mean, std = est.predict_latent(np.c_[t_new, np.full(3, 7.0)], return_std=True)
    np.testing.assert_allclose(mean, 0.0, atol=1e-12)
    np.testing.assert_allclose(std ** 2, fitted(np.zeros((1, 1)))[0, 0], rtol=1e-6)
    # a second column that is no series id (most ids one row) is said to be one
    with pytest.warns(UserWarning, match="most series have one row"):
        EPGaussianProcessRegressor(Matern32(), likelihood="poisson", inference="markov",
                                   optimizer=None).fit(np.c_[X[:, 0], rng.normal(size=y.size)],
                                                       y)
    # a constant id column on standardised days (the review's reproducer): fits as the
    # one-column model does (its warm starts once made the posterior improper)
    d = np.arange(100.0)
    z = np.sin(d / 9) + 0.1 * np.random.default_rng(0).normal(size=100)
    days = (d - d.mean()) / d.std()
    two = EPGaussianProcessRegressor(Matern32(1, 1.414), inference="markov").fit(
        np.c_[days, np.zeros(100)], z)
    one = EPGaussianProcessRegressor(Matern32(1, 1.414), inference="markov").fit(
        days[:, None], z)
    np.testing.assert_allclose(two.log_marginal_likelihood_value_,
                               one.log_marginal_likelihood_value_, rtol=1e-8)
    path = tmp_path / "panel.npz"
    fastep.save_model(est, path)
    np.testing.assert_array_equal(fastep.load_model(path).predict(X[:9]), est.predict(X[:9]))
