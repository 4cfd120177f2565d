"""Censored GP regression (seed 001): Tobit moments, predictive, EP/Laplace, regressor."""
import numpy as np
import pytest
from scipy import special, stats

from fastep import CensoredGPRegressor
from fastep.kernels import RBF, Matern52
from fastep.likelihoods import Tobit, censored_predictive, censored_quantile
from helpers.data import forrester as _synthetic


S2 = 0.3


def _ldiff(x, y):
    return x + np.log1p(-np.exp(y - x))


def _ref_loglik(kind, y, lo, up):
    s = np.sqrt(S2)
    if kind == "left":
        return lambda f: special.log_ndtr((lo - f) / s)
    if kind == "right":
        return lambda f: special.log_ndtr((f - up) / s)
    if kind == "exact":
        return lambda f: stats.norm.logpdf(y, f, s)

    def interval(f):
        a, b = (lo - f) / s, (up - f) / s
        return np.where(a > 0, _ldiff(special.log_ndtr(-a), special.log_ndtr(-b)),
                        _ldiff(special.log_ndtr(b), special.log_ndtr(a)))
    return interval


@pytest.mark.parametrize("kind", ["left", "right", "exact", "interval"])
@pytest.mark.parametrize("alpha", [1.0, 0.5])
def test_tilted_matches_quadrature(kind, alpha, ref):
    rng = np.random.default_rng({"left": 1, "right": 2, "exact": 3, "interval": 4}[kind])
    lik = Tobit(S2)
    for _ in range(25 if alpha == 1.0 else 8):
        mu, var = rng.uniform(-30, 30), 10 ** rng.uniform(-4, 4)
        lo = rng.uniform(-5, 5)
        up = lo + rng.uniform(0.1, 5)
        y = {"left": lo, "right": up, "exact": 0.5 * (lo + up), "interval": np.nan}[kind]
        got = lik.tilted([y], [mu], [var], alpha=alpha, extra=np.array([[lo, up]]))
        want = ref.tilted_moments_quad(_ref_loglik(kind, y, lo, up), mu, var, alpha)
        floors = (1e-13, 1e-10 / np.sqrt(var), 1e-11 / var)     # see test_likelihoods.py
        for g, w, fl in zip(got, want, floors):
            assert abs(g[0] - w) <= 1e-8 * abs(w) + fl, (kind, mu, var, lo, up, g[0], w)


def test_one_sided_limits_and_infinite_limits_are_finite():
    lik = Tobit(S2, lower=-np.inf, upper=np.inf)
    out = lik.tilted([1.0], [0.0], [1.0], extra=lik.limits(1))
    assert all(np.isfinite(o[0]) for o in out)
    lik = Tobit(S2, lower=0.0)
    for mu in (-40.0, 0.0, 40.0):
        out = lik.tilted([0.0], [mu], [1e-3], extra=lik.limits(1))
        assert all(np.isfinite(o[0]) for o in out)


@pytest.mark.parametrize("lo,up", [(-0.3, 1.2), (-np.inf, 0.4), (0.1, np.inf)])
def test_predictive_moments_match_monte_carlo(lo, up):
    # 10^7 draws of y = clip(f + eps, lo, up): each moment within 3 standard errors
    rng = np.random.default_rng(12345)
    m, v, s2 = 0.35, 0.4, 0.2
    draws = np.clip(rng.normal(m, np.sqrt(v), 10 ** 7) + rng.normal(0, np.sqrt(s2), 10 ** 7),
                    lo, up)
    pred = censored_predictive(m, v, s2, lo, up)
    se_mean = draws.std() / np.sqrt(draws.size)
    assert abs(pred["mean"] - draws.mean()) < 3 * se_mean
    dev2 = (draws - draws.mean()) ** 2
    se_var = dev2.std() / np.sqrt(draws.size)
    assert abs(pred["var"] - draws.var()) < 3 * se_var
    for p, hit in ((pred["p_lower"], draws == lo), (pred["p_upper"], draws == up)):
        se = np.sqrt(max(hit.mean() * (1 - hit.mean()), 1e-12) / draws.size)
        assert abs(p - hit.mean()) < 3 * se + 1e-12
    # and exactly (1e-10) against quadrature of the truncated Gaussian part
    from scipy import integrate
    sd = np.sqrt(v + s2)
    pl = stats.norm.cdf(lo, m, sd)
    pu = stats.norm.sf(up, m, sd)
    mid = [integrate.quad(lambda t: t ** k * stats.norm.pdf(t, m, sd), lo, up,
                          epsabs=1e-13)[0] for k in (1, 2)]
    e1 = (lo * pl if np.isfinite(lo) else 0) + (up * pu if np.isfinite(up) else 0) + mid[0]
    e2 = (lo * lo * pl if np.isfinite(lo) else 0) + (up * up * pu if np.isfinite(up) else 0) \
        + mid[1]
    assert pred["mean"] == pytest.approx(e1, rel=1e-10)
    assert pred["var"] == pytest.approx(e2 - e1 ** 2, rel=1e-9)
    q = censored_quantile(0.3, m, v, s2, lo, up)
    assert abs(np.mean(draws <= q) - 0.3) < 1e-3 or q in (lo, up)


def test_no_censoring_equals_exact_gp_regression(ref):
    X, _, y = _synthetic(0)
    k = Matern52(4.0, 0.3)
    reg = CensoredGPRegressor(k, noise_variance=0.1, optimizer=None, tol=1e-12).fit(X, y)
    Xs = np.linspace(0, 1, 9)[:, None]
    ex = ref.exact_gp_regression(k(X), y, 0.1, K_star=k(X, Xs), k_star_diag=k.diag(Xs))
    mean, std = reg.predict_latent(Xs, return_std=True)
    np.testing.assert_allclose(mean, ex["mean_star"], rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(std ** 2, ex["var_star"], rtol=1e-8, atol=1e-12)
    assert reg.log_marginal_likelihood_value_ == pytest.approx(ex["log_marginal_likelihood"],
                                                               rel=1e-8)
    ym, ys = reg.predict(Xs, return_std=True)        # no limits: y moments = latent + noise
    np.testing.assert_allclose(ym, ex["mean_star"], rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(ys ** 2, ex["var_star"] + 0.1, rtol=1e-8)


def test_gradients_match_finite_differences():
    X, _, y = _synthetic(1)
    yc = np.clip(y, -0.45, 8.0)
    lower = np.full(30, -0.45)
    lower[::5] = -1.0                                  # per-observation limits
    yc = np.maximum(yc, lower)
    reg = CensoredGPRegressor(RBF(3.0, 0.2), noise_variance=0.2, upper=8.0, optimizer=None,
                              tol=1e-12, max_iter=1000).fit(X, yc, lower=lower)
    theta = np.concatenate([reg.kernel_.theta, reg.likelihood_.theta])
    _, grad = reg.log_marginal_likelihood(theta, eval_gradient=True)
    fd = [(reg.log_marginal_likelihood(theta + e) - reg.log_marginal_likelihood(theta - e))
          / 2e-5 for e in np.eye(theta.size) * 1e-5]
    np.testing.assert_allclose(grad, fd, rtol=1e-5)


def test_tobit_beats_clipped_baseline_in_censored_region():
    wins = 0
    for seed in range(10):
        X, f, y = _synthetic(seed)
        yc = np.maximum(y, -0.45)
        grid = np.linspace(0, 1, 400)[:, None]
        fg = (6 * grid[:, 0] - 2) ** 2 * np.sin(2 * (6 * grid[:, 0] - 2))
        region = fg < -0.45
        k = RBF(10.0, 0.15)
        tob = CensoredGPRegressor(k, noise_variance=0.1, lower=-0.45, optimizer=None).fit(X, yc)
        clip = CensoredGPRegressor(k, noise_variance=0.1, optimizer=None).fit(X, yc)
        rmse = [np.sqrt(np.mean((m.predict_latent(grid)[region] - fg[region]) ** 2))
                for m in (tob, clip)]
        wins += rmse[0] < rmse[1]
    assert wins >= 9


def test_ep_posterior_mean_matches_rejection_sampling():
    """Exact posterior by rejection: draw f (and noise) from the GP posterior given the
    uncensored points, keep draws whose censored outputs all fall below the limit."""
    X, _, y = _synthetic(10)
    yc = np.maximum(y, -0.45)
    cens = yc <= -0.45
    k = RBF(64.3, 0.1457)
    grid = np.linspace(0, 1, 60)[:, None]
    Xa = np.vstack([X[~cens], X[cens], grid])
    K = k(Xa) + 1e-8 * np.eye(len(Xa))
    no = int((~cens).sum())
    A = K[:no, :no] + 0.1 * np.eye(no)
    Kx = K[no:, :no]
    mu = Kx @ np.linalg.solve(A, yc[~cens])
    C = K[no:, no:] - Kx @ np.linalg.solve(A, Kx.T)
    L = np.linalg.cholesky(C + 1e-8 * np.eye(len(C)))
    rng = np.random.default_rng(0)
    kept = []
    while sum(len(a) for a in kept) < 3000:
        F = mu[:, None] + L @ rng.standard_normal((len(C), 20000))
        ys = F[: cens.sum()] + np.sqrt(0.1) * rng.standard_normal((cens.sum(), 20000))
        kept.append(F[cens.sum():, np.all(ys <= -0.45, axis=0)].T)
    exact = np.vstack(kept).mean(0)
    tob = CensoredGPRegressor(k, noise_variance=0.1, lower=-0.45, optimizer=None,
                              tol=1e-10, max_iter=1000).fit(X, yc)
    err = np.sqrt(np.mean((tob.predict_latent(grid) - exact) ** 2))
    assert err < 0.25          # MC error ~0.05, EP's own approximation error the rest


def test_bad_input():
    X = np.linspace(0, 1, 5)[:, None]
    y = np.array([0.0, 0.5, 1.0, 0.2, 0.0])
    reg = CensoredGPRegressor(optimizer=None)
    with pytest.raises(ValueError, match="lower must be below upper"):
        reg.fit(X, y, lower=1.0, upper=0.0)
    with pytest.raises(ValueError, match="outside its limits"):
        reg.fit(X, y, lower=0.1)
    with pytest.raises(ValueError, match="NaN"):
        reg.fit(X, y, lower=np.array([0.0, np.nan, 0.0, 0.0, 0.0]))
    with pytest.raises(ValueError, match="interval-censored"):
        reg.fit(X, np.array([np.nan, 0.5, 1.0, 0.2, 0.0]), lower=0.0)
    with pytest.raises(ValueError, match="noise_variance"):
        CensoredGPRegressor(noise_variance=-1.0).fit(X, y)
    with pytest.raises(ValueError, match="'inference' parameter"):
        CensoredGPRegressor(inference="mcmc").fit(X, y)


def test_interval_censoring_and_predict_helpers():
    X = np.linspace(0, 1, 20)[:, None]
    y = np.sin(4 * X[:, 0])
    lo = np.full(20, -np.inf)
    up = np.full(20, np.inf)
    y[3], lo[3], up[3] = np.nan, 0.2, 0.9               # known to lie in (0.2, 0.9)
    reg = CensoredGPRegressor(RBF(1.0, 0.3), noise_variance=0.01, optimizer=None).fit(
        X, y, lower=lo, upper=up)
    assert 0.2 < reg.predict_latent(X[3:4])[0] < 0.9
    pl, pu = reg.predict_censored_proba(X, lower=0.0, upper=0.5)
    assert np.all((pl >= 0) & (pl <= 1) & (pu >= 0) & (pu <= 1))
    lpd = reg.log_predictive_density(X[:5], np.array([0.0, 0.1, 0.2, 0.3, 0.5]), lower=0.0,
                                     upper=0.5)
    assert np.all(np.isfinite(lpd))
    q = reg.predict_quantile(X[:3], 0.9, lower=0.0, upper=0.5)
    assert np.all((q >= 0.0) & (q <= 0.5))
    # per-observation limits of the fit do not carry over to new inputs: asked for
    with pytest.raises(ValueError, match="per-observation lower limits.*pass lower="):
        reg.predict(X[:3])


def test_markov_inference_fits_a_censored_series_as_dense_ep_does(tmp_path):
    """inference='markov' on a series censored below and above: the kernel and noise
    ML-II learns, the evidence and the predictions at held-out times equal dense EP's
    (truth: a different algorithm on the Gram matrix); save/load is exact."""
    import fastep
    from fastep.kernels import Matern32
    rng = np.random.default_rng(11)
    t = np.sort(rng.uniform(0.0, 300.0, 500))
    y = np.clip(np.sin(t / 25.0) + 0.3 * rng.normal(size=t.size), -0.6, 0.8)
    train = rng.uniform(size=t.size) < 0.7
    X = t[:, None]
    fits = {inference: CensoredGPRegressor(Matern32(1.0, 10.0), lower=-0.6, upper=0.8,
                                           inference=inference, n_inducing=None,
                                           tol_optimizer=1e-9).fit(X[train], y[train])
            for inference in ("markov", "ep")}
    markov, dense = fits["markov"], fits["ep"]
    assert markov.result_.__class__.__name__ == "MarkovEPResult"
    np.testing.assert_allclose(markov.kernel_.theta, dense.kernel_.theta, atol=2e-3)
    np.testing.assert_allclose(markov.noise_variance_, dense.noise_variance_, rtol=5e-3)
    np.testing.assert_allclose(markov.log_marginal_likelihood_value_,
                               dense.log_marginal_likelihood_value_, rtol=1e-6)
    np.testing.assert_allclose(markov.predict(X[~train]), dense.predict(X[~train]),
                               atol=5e-3)
    path = tmp_path / "censored_markov.npz"
    fastep.save_model(markov, path)
    np.testing.assert_array_equal(fastep.load_model(path).predict(X[~train]),
                                  markov.predict(X[~train]))
