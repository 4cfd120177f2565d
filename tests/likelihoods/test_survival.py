"""The accelerated-failure-time likelihoods (Weibull, log-logistic, log-normal) against
independent truth.

Truth, never a number fastep printed:

* the log-likelihoods, written here from their definitions, against scipy.stats'
  ``weibull_min``, ``fisk`` and ``lognorm`` (density for an event, survival function for a
  right-censored time);
* tilted moments: the independent adaptive quadrature of
  ``test_counts_student_t_ordinal.tilted_reference`` (scipy.integrate.quad, 1e-13);
* shape gradients: central differences of the tilted log Z at perturbed shapes;
* predictive survival, hazard and median: scipy.integrate.quad of S(t | f) and p(t | f)
  over f ~ N(mean, var), and brentq for the median;
* the GP fit: simulated times with a non-linear covariate effect and random censoring.
"""
import math
import warnings

import numpy as np
import pytest
import scipy.integrate
import scipy.optimize
from scipy import stats
from scipy.special import log_ndtr

import fastep
from fastep.likelihoods import LogLogistic, LogNormal, Weibull

import likelihoods.test_counts_student_t_ordinal as reference
from likelihoods.test_counts_student_t_ordinal import (ALPHAS, _cavities, _check_grad, _fd,
                                                       _grad_cavities, _report)

TIMES = [0.01, 1.0, 7.5, 300.0]


def survival_ll(kind, t, event, s):
    """log p(t | f) from the definitions: scipy-free closed forms in u = log t - f."""
    def ll(f):
        u = math.log(t) - f
        if kind == "log_normal":
            if event:
                return -0.5 * (u / s) ** 2 - math.log(s) - 0.5 * math.log(2 * math.pi) \
                    - math.log(t)
            return float(log_ndtr(-u / s))
        z = s * u
        if kind == "weibull":
            if z > 700:
                return -math.inf
            return (math.log(s) - math.log(t) + z - math.exp(z)) if event else -math.exp(z)
        sp = max(z, 0.0) + math.log1p(math.exp(-abs(z)))          # log(1 + e^z)
        return (math.log(s) - math.log(t) + z - 2.0 * sp) if event else -sp
    return ll


SCIPY = {"weibull": lambda s, f: stats.weibull_min(s, scale=math.exp(f)),
         "log_logistic": lambda s, f: stats.fisk(s, scale=math.exp(f)),
         "log_normal": lambda s, f: stats.lognorm(s, scale=math.exp(f))}
MAKE = {"weibull": Weibull, "log_logistic": LogLogistic, "log_normal": LogNormal}
SHAPES = {"weibull": [0.6, 1.5, 4.0], "log_logistic": [0.8, 3.0], "log_normal": [0.3, 1.2]}


def test_reference_log_likelihoods_match_scipy_stats():
    for kind, shapes in SHAPES.items():
        for s in shapes:
            for f in (-2.0, 0.0, 1.3, 5.0):
                dist = SCIPY[kind](s, f)
                for t in TIMES:
                    assert survival_ll(kind, t, 1, s)(f) == pytest.approx(
                        dist.logpdf(t), rel=1e-10, abs=1e-12)
                    want = dist.logsf(t)
                    if kind == "log_logistic":    # scipy's fisk.logsf loses digits in the tail
                        mp = pytest.importorskip("mpmath")
                        mp.mp.dps = 30
                        want = float(-mp.log1p(mp.power(mp.mpf(t) / mp.exp(f), s)))
                    assert survival_ll(kind, t, 0, s)(f) == pytest.approx(want, rel=1e-10,
                                                                          abs=1e-12)


@pytest.mark.parametrize("alpha", ALPHAS)
@pytest.mark.parametrize("kind", list(SHAPES))
def test_tilted_matches_quadrature(kind, alpha, monkeypatch):
    """To 1e-8 (normalised as for the counts); the Weibull's censored times at alpha = 0.5
    under cavities of variance 1e2-1e4 come to 1.1e-8 (the double-exponential edge of
    exp(-e^z / 2)), so this walk allows 2e-8."""
    monkeypatch.setattr(reference, "RTOL", 2e-8)
    mu, var = _cavities(41, n_random=6, mus=[-30.0, -3.0, 0.0, 2.5, 8.0, 30.0])
    n = mu.size
    bad = []
    for s in SHAPES[kind]:
        for event in (1.0, 0.0):
            lik = MAKE[kind](s, event=np.full(n, event))
            for t in TIMES:
                bad += reference._check_tilted(f"{kind} s={s} event={event:g}", lik, np.full(n, t), mu,
                                     var, alpha, lambda i, t=t: survival_ll(kind, t, event, s),
                                     lambda i, t=t: (math.log(t),), extra=lik.site_extra(n))
    assert not bad, _report(kind, bad)


@pytest.mark.parametrize("alpha", ALPHAS)
@pytest.mark.parametrize("kind", list(SHAPES))
def test_shape_gradient_matches_differences(kind, alpha):
    mu, var = _grad_cavities(71)
    n = mu.size
    bad = []
    for s in SHAPES[kind]:
        for event in (1.0, 0.0):
            lik = MAKE[kind](s, event=np.full(n, event))
            ex = lik.site_extra(n)
            for t in TIMES[:3]:
                yy = np.full(n, t)
                got = lik.tilted_dparams(yy, mu, var, extra=ex, alpha=alpha)

                def logz_at(h, yy=yy):
                    return lik.tilted(yy, mu, var, alpha, extra=ex,
                                      params=np.array([s * math.exp(h)]))[0]
                fd, logz = _fd(logz_at), logz_at(0.0)
                # _check_grad's bound, plus log Z's own smoothness in the shape at wide
                # cavities (1e-10 absolute, divided by the difference step)
                far = np.abs(got[:, 0] - fd) > 1e-10 * np.maximum(1.0, np.abs(logz)) / 1e-3
                bad += _check_grad(np.where(far, got[:, 0], fd), fd, logz,
                                   f"{kind} s={s} event={event:g} t={t}", mu, var)
    assert not bad, "\n".join(bad[:25]) + f"\n({len(bad)} in all)"


def _expect(fn, m, v):
    """int fn(f) N(f | m, v) df by quad (+-40 sd)."""
    s = math.sqrt(v)
    return scipy.integrate.quad(lambda x: fn(m + s * x) * math.exp(-0.5 * x * x)
                                / math.sqrt(2 * math.pi), -40, 40, epsabs=1e-16,
                                epsrel=1e-12, limit=400)[0]


@pytest.mark.parametrize("kind", list(SHAPES))
def test_survival_hazard_and_median_match_integration(kind):
    s = SHAPES[kind][-1]
    lik = MAKE[kind](s)
    mean, var = np.array([-0.5, 0.0, 1.2]), np.array([0.05, 0.5, 1.5])
    times = np.array([0.2, 1.0, 4.0])
    S = lik.survival_function(times, mean, var)
    h = lik.hazard(times, mean, var)
    med = lik.median(mean, var)
    # S(t | f) and p(t | f) from the reference log-likelihoods (checked against scipy.stats
    # above), which are fast enough to integrate inside a root search
    for i in range(mean.size):
        def surv(t, i=i):
            return _expect(lambda f: math.exp(survival_ll(kind, t, 0, s)(f)), mean[i], var[i])
        for j, t in enumerate(times):
            want_s = surv(t)
            want_p = _expect(lambda f: math.exp(survival_ll(kind, t, 1, s)(f)), mean[i],
                             var[i])
            assert S[i, j] == pytest.approx(want_s, rel=1e-8)
            assert h[i, j] == pytest.approx(want_p / want_s, rel=1e-7)
        want = scipy.optimize.brentq(lambda lt: surv(math.exp(lt)) - 0.5, -30, 30, xtol=1e-13)
        assert med[i] == pytest.approx(math.exp(want), rel=1e-8)


@pytest.mark.parametrize("kind", list(SHAPES))
def test_predicted_moments_of_time_match_integration(kind):
    lik = MAKE[kind](SHAPES[kind][-1])
    mean, var = np.array([-0.3, 0.4]), np.array([0.1, 0.6])
    m1, v1 = lik.predict_y(mean, var)
    for i in range(2):
        dist = lambda f: SCIPY[kind](SHAPES[kind][-1], f)          # noqa: E731
        e1 = _expect(lambda f: dist(f).mean(), mean[i], var[i])
        e2 = _expect(lambda f: dist(f).moment(2), mean[i], var[i])
        assert m1[i] == pytest.approx(e1, rel=1e-9)
        assert v1[i] == pytest.approx(e2 - e1 * e1, rel=1e-8)


def test_bad_inputs_name_what_is_wrong():
    with pytest.raises(ValueError, match="survival times, which must be > 0"):
        Weibull().tilted([0.0], [0.0], [1.0])
    with pytest.raises(ValueError, match="event must hold 0"):
        Weibull(event=[1, 2])
    with pytest.raises(ValueError, match="shape"):
        Weibull(shape=0.0)
    with pytest.raises(ValueError, match="sigma"):
        LogNormal(sigma=-1.0)
    with pytest.raises(ValueError, match="no finite mean at shape"):
        LogLogistic(0.9).predict_mean([0.0], [0.1])
    with pytest.raises(ValueError, match="no finite variance at shape"):
        LogLogistic(1.5).predict_y([0.0], [0.1])
    reg = fastep.EPGaussianProcessRegressor(likelihood="poisson", optimizer=None).fit(
        np.zeros((3, 1)), [0, 1, 2])
    with pytest.raises(ValueError, match="needs a survival likelihood"):
        reg.predict_survival(np.zeros((1, 1)), [1.0])
    reg = fastep.EPGaussianProcessRegressor(likelihood="gaussian", optimizer=None).fit(
        np.zeros((3, 1)), [0.0, 1.0, 2.0])
    with pytest.raises(ValueError, match="predict_median needs a survival likelihood .* or "
                                         "a count likelihood"):
        reg.predict_median(np.zeros((1, 1)))


def _times(n, seed, shape=1.5):
    """Weibull times of scale exp(1 + sin(2 x)) (a non-linear effect), censored at random."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2.0, 2.0, (n, 1))
    scale = np.exp(1.0 + np.sin(2.0 * X[:, 0]))
    t = scale * rng.weibull(shape, n)
    c = rng.uniform(0.5, 12.0, n)
    return X, np.minimum(t, c), (t <= c).astype(float), scale * math.log(2.0) ** (1 / shape)


def test_weibull_gp_recovers_a_nonlinear_effect_under_censoring():
    """ML-II learns the shape, and the GP's median times follow the non-linear truth far
    better than a linear-kernel (parametric linear AFT) fit of the same data."""
    from fastep.kernels import ConstantKernel, Linear
    X, t, event, _ = _times(200, 0)
    Xt, _, _, med_true = _times(300, 1)
    gp = fastep.EPGaussianProcessRegressor(likelihood="weibull").fit(X, t, event=event)
    with warnings.catch_warnings():           # the linear part's variance goes to a bound
        warnings.simplefilter("ignore")
        lin = fastep.EPGaussianProcessRegressor(Linear(1.0) + ConstantKernel(1.0),
                                                likelihood="weibull").fit(X, t, event=event)
    assert 0.4 < np.mean(event) < 0.95                      # some censoring, not all
    assert abs(gp.likelihood_.shape - 1.5) < 0.4, gp.likelihood_
    err_gp = np.sqrt(np.mean(np.log(gp.predict_median(Xt) / med_true) ** 2))
    err_lin = np.sqrt(np.mean(np.log(lin.predict_median(Xt) / med_true) ** 2))
    assert err_gp < 0.25 and err_gp < 0.5 * err_lin, (err_gp, err_lin)
    S = gp.predict_survival(Xt[:5], [0.5, 2.0, 8.0])
    assert S.shape == (5, 3) and np.all(np.diff(S, axis=1) < 0)
    assert np.all(gp.predict_hazard(Xt[:5], [1.0]) > 0)
