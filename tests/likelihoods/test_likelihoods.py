"""Likelihood tilted moments against adaptive quadrature (tests/helpers/reference.py) and closed forms.

Truth: ``reference.tilted_moments_quad`` (scipy.integrate.quad on the tilted integrand),
scipy.special.log_ndtr / scipy.stats.norm for closed forms, central finite differences of
closed forms for parameter derivatives, and scipy.integrate.quad for predictive
probabilities.
"""
import math

import numpy as np
import pytest
import scipy.integrate
import scipy.special as sc
from scipy.stats import norm

import fastep.likelihoods as fl
from fastep.likelihoods import Gaussian, CustomLikelihood, Logistic, Probit, Tobit

NOISE = 0.3
MUS = [-30.0, -3.0, 0.0, 1.5, 30.0]
VARS = np.logspace(-4.0, 4.0, 5)       # 1e-4 ... 1e4


def _probit_ll(y):
    return lambda f: sc.log_ndtr(y * f)


def _logistic_ll(y):
    return lambda f: -np.logaddexp(0.0, -y * f)


def _gaussian_ll(y):
    return lambda f: norm.logpdf(y, loc=f, scale=math.sqrt(NOISE))


TRIALS = 7.0


def _binomial_ll(y):
    """log Binomial(y | 7, sigma(f)), from scipy's log-sigmoid and log-binomial coefficient."""
    log_c = sc.gammaln(TRIALS + 1) - sc.gammaln(y + 1) - sc.gammaln(TRIALS - y + 1)
    return lambda f: log_c + y * -np.logaddexp(0.0, -f) + (TRIALS - y) * -np.logaddexp(0.0, f)


# (name, likelihood factory, reference log-likelihood factory, alpha, targets, rtol)
# Closed forms and the numerical fallback (quad_tilted: Gauss-Legendre panels, used by
# Logistic and by Probit at alpha != 1) are all held to 1e-8.
CASES = [
    ("probit-a1", Probit, _probit_ll, 1.0, [-1.0, 1.0], 1e-8),
    ("probit-a0.5", Probit, _probit_ll, 0.5, [-1.0, 1.0], 1e-8),
    ("logistic-a1", Logistic, _logistic_ll, 1.0, [-1.0, 1.0], 1e-8),
    ("logistic-a0.5", Logistic, _logistic_ll, 0.5, [-1.0, 1.0], 1e-8),
    # (quadrature is slowest here: one real target per alpha)
    ("gaussian-a1", lambda: Gaussian(NOISE), _gaussian_ll, 1.0, [-1.3], 1e-8),
    ("gaussian-a0.5", lambda: Gaussian(NOISE), _gaussian_ll, 0.5, [2.0], 1e-8),
    ("binomial-a1", lambda: fl.Binomial(trials=TRIALS), _binomial_ll, 1.0, [0.0, 3.0, 7.0],
     1e-8),
    ("binomial-a0.5", lambda: fl.Binomial(trials=TRIALS), _binomial_ll, 0.5, [2.0], 1e-8),
]


def test_cases_cover_every_builtin_likelihood():
    covered = {type(make()) for _, make, _, _, _, _ in CASES}
    # Tobit needs per-site limits: its quadrature walk is test_censored.py's
    # test_tilted_matches_quadrature (left, right, exact and interval sites, both alphas).
    covered.add(fl.Tobit)
    # the count (zero-inflated included) and Student-t likelihoods (and OrdinalProbit) have
    # their own walk against an independent adaptive quadrature in
    # test_counts_student_t_ordinal.py
    covered |= {fl.Poisson, fl.NegativeBinomial, fl.ZeroInflatedPoisson,
                fl.ZeroInflatedNegativeBinomial, fl.StudentT}
    # the survival likelihoods: test_survival.py's walk, against the same quadrature
    covered |= {fl.Weibull, fl.LogLogistic, fl.LogNormal}
    assert set(fl._TYPES.values()) <= covered


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_tilted_matches_quadrature(case, ref):
    name, make, ll, alpha, targets, rtol = case
    lik = make()
    bad = []
    for y in targets:
        for mu in MUS:
            mu_arr = np.full(VARS.size, mu)
            got = lik.tilted(y, mu_arr, VARS, alpha)
            for k, var in enumerate(VARS):
                r = ref.tilted_moments_quad(ll(y), mu, var, alpha)
                a = (got[0][k], got[1][k], got[2][k])
                # Absolute floors, because the quadrature reference itself is not exact there:
                # log Z: quad's relative accuracy (1e-13) becomes absolute near log Z = 0;
                # d1 = E_t[x]/s and d2 = (Var_t[x] - 1)/var are formed from moments in the
                # standardised variable x (accurate to ~1e-11), which the 1/sqrt(var) and
                # 1/var factors amplify at tiny cavity variances.
                floors = (1e-13, 1e-10 / math.sqrt(var), 1e-11 / var)
                for j, what in enumerate(("logZ", "d1", "d2")):
                    if not abs(a[j] - r[j]) <= rtol * abs(r[j]) + floors[j]:
                        bad.append(f"{what} y={y} mu={mu} var={var:g}: got {a[j]!r}, "
                                   f"quadrature {r[j]!r}")
    assert not bad, f"{name}: {len(bad)} mismatches:\n" + "\n".join(bad)


def test_logistic_symmetry_wide_cavity():
    # sigma(f) + sigma(-f) = 1 and N(0, v) is symmetric, so Z = 1/2 exactly for mu = 0
    # and any cavity variance.
    var = np.array([1e-4, 1e-2, 1.0, 10.0, 1e2, 1e4])
    logz = Logistic().tilted(1.0, np.zeros(var.size), var)[0]
    np.testing.assert_allclose(logz, math.log(0.5), rtol=1e-8)


def _probit_by_hand(y, extra, f, params):
    return math.log(0.5 * math.erfc(-y * f / math.sqrt(2.0)))


def _scaled_probit(y, extra, f, params):
    return math.log(0.5 * math.erfc(-y * f / (params[0] * math.sqrt(2.0))))


@pytest.fixture(scope="module")
def hand_probit():
    return CustomLikelihood(_probit_by_hand, binary=True)


@pytest.fixture(scope="module")
def scaled_probit():
    return CustomLikelihood(_scaled_probit, params={"s": 0.7}, binary=True)


def test_gauss_hermite_user_likelihood_equals_probit(hand_probit):
    mu = np.repeat(np.linspace(-3.0, 3.0, 7), 4)
    var = np.tile([0.1, 0.5, 1.0, 2.0], 7)
    for y in (-1.0, 1.0):
        got = hand_probit.tilted(y, mu, var)
        exp = Probit().tilted(y, mu, var)
        # and both against the textbook closed form (R&W eq. 3.58)
        z = y * mu / np.sqrt(1 + var)
        np.testing.assert_allclose(exp[0], sc.log_ndtr(z), rtol=1e-12)
        for j in range(3):
            np.testing.assert_allclose(got[j], exp[j], rtol=1e-8, atol=1e-12)


def test_gaussian_tilted_dparams_equals_fd():
    lik = Gaussian(NOISE)
    y = np.linspace(-2.0, 2.0, 9)
    mu = np.linspace(1.0, -1.5, 9)
    var = np.logspace(-3, 2, 9)
    got = lik.tilted_dparams(y, mu, var)
    assert got.shape == (9, 1)
    h = 1e-5

    def logz(log_s2):
        return norm.logpdf(y, loc=mu, scale=np.sqrt(var + math.exp(log_s2)))

    fd = (logz(math.log(NOISE) + h) - logz(math.log(NOISE) - h)) / (2 * h)
    np.testing.assert_allclose(got[:, 0], fd, rtol=1e-7, atol=1e-10)
    # also against the likelihood's own log Z at perturbed noise (alpha = 1)
    fd2 = (Gaussian(NOISE * math.exp(h)).tilted(y, mu, var)[0]
           - Gaussian(NOISE * math.exp(-h)).tilted(y, mu, var)[0]) / (2 * h)
    np.testing.assert_allclose(got[:, 0], fd2, rtol=1e-6, atol=1e-9)



def test_tobit_tilted_dparams_equals_fd_in_every_branch_and_far_tails():
    """Tobit's closed-form d log Z / d log sigma^2 against central differences of log Z
    computed with mpmath (50 digits): observed, left-, right- and interval-censored sites,
    cavities near the limits and thousands of standard deviations away (0.1's interval
    branch returned NaN there)."""
    mp = pytest.importorskip("mpmath")
    mp.mp.dps = 50
    noise = 0.3
    lo, up = -1.0, 2.0
    y = np.array([0.5, lo, up, np.nan, np.nan, np.nan, np.nan, lo, up])
    mu = np.array([0.2, -0.5, 2.5, 0.1, -300.0, 500.0, 1.9, 40.0, -40.0])
    var = np.array([0.5, 1e-3, 2.0, 0.7, 1e-2, 3.0, 1e-6, 0.1, 0.1])
    got = Tobit(noise, lower=lo, upper=up).tilted_dparams(y, mu, var)[:, 0]

    def log_z(i, log_s2):
        c = mp.sqrt(mp.mpf(var[i]) + mp.exp(log_s2))
        m = mp.mpf(mu[i])
        if np.isnan(y[i]):                 # upper tails when above: no 1 - 1 at 50 digits
            a, b = (lo - m) / c, (up - m) / c
            return mp.log(mp.ncdf(-a) - mp.ncdf(-b) if a > 0 else mp.ncdf(b) - mp.ncdf(a))
        if y[i] <= lo:
            return mp.log(mp.ncdf((lo - m) / c))
        if y[i] >= up:
            return mp.log(mp.ncdf((m - up) / c))
        return mp.log(mp.npdf(mp.mpf(y[i]), m, c))

    h = mp.mpf("1e-15")
    for i in range(y.size):
        t = mp.log(noise)
        fd = (log_z(i, t + h) - log_z(i, t - h)) / (2 * h)
        assert got[i] == pytest.approx(float(fd), rel=1e-9, abs=1e-12), i

def test_base_class_fd_tilted_dparams(scaled_probit):
    lik = scaled_probit
    s = 0.7
    assert lik.n_dims == 1
    np.testing.assert_allclose(lik.theta, [math.log(s)])
    mu = np.repeat(np.linspace(-3.0, 3.0, 7), 4)
    var = np.tile([0.1, 0.5, 1.0, 2.0], 7)
    y = np.where(np.arange(mu.size) % 2 == 0, 1.0, -1.0)
    got = lik.tilted_dparams(y, mu, var)
    assert got.shape == (mu.size, 1)
    np.testing.assert_allclose(lik.theta, [math.log(s)])    # parameters restored

    # int Phi(y f / s) N(f | mu, v) df = Phi(y mu / sqrt(s^2 + v)): FD of that in log s
    def logz(log_s):
        return sc.log_ndtr(y * mu / np.sqrt(math.exp(2 * log_s) + var))

    h = 1e-5
    fd = (logz(math.log(s) + h) - logz(math.log(s) - h)) / (2 * h)
    np.testing.assert_allclose(got[:, 0], fd, rtol=1e-6, atol=1e-7)
    # analytic: d log Phi(z)/d log s = mills(z) * (-z s^2 / (s^2 + v))
    z = y * mu / np.sqrt(s * s + var)
    exact = np.exp(norm.logpdf(z) - sc.log_ndtr(z)) * (-z * s * s / (s * s + var))
    np.testing.assert_allclose(got[:, 0], exact, rtol=1e-6, atol=1e-7)


def test_fd_tilted_dparams_never_modifies_the_likelihood():
    """Threads share a likelihood (sparse EP's gradient passes): finite differences in the
    parameters must not write them, even for a moment.  A reader thread checks every
    tilted evaluation while the main thread takes parameter derivatives."""
    import threading
    lik = fl.Tobit(0.1, lower=-0.2)
    y, mu, var = np.array([-0.2, 0.3, 1.0]), np.array([0.0, 0.1, 0.5]), np.array([0.5, 1, 2])
    expected = lik.tilted(y, mu, var, alpha=0.5)[0]
    values = dict(lik._values)
    stop, changed = threading.Event(), []

    def reader():
        while not stop.is_set():
            if not np.array_equal(lik.tilted(y, mu, var, alpha=0.5)[0], expected):
                changed.append(1)
    thread = threading.Thread(target=reader)
    thread.start()
    try:
        for _ in range(1000):
            lik.tilted_dparams(y, mu, var, alpha=0.5)      # alpha < 1: finite differences
    finally:
        stop.set()
        thread.join()
    assert not changed and lik._values == values


MEANS = np.array([-8.0, -1.0, 0.0, 0.4, 2.5, 6.0])
PVARS = np.array([1e-3, 0.5, 3.0, 30.0])


def _quad_proba(lik_fn, m, v):
    s = math.sqrt(v)
    val = scipy.integrate.quad(lambda x: lik_fn(m + s * x) * norm.pdf(x), -40, 40,
                               points=sorted({-m / s, 0.0}) if abs(m / s) < 40 else [0.0],
                               epsabs=1e-15, epsrel=1e-13, limit=500)[0]
    return val


def test_predict_proba_probit():
    m, v = np.meshgrid(MEANS, PVARS)
    m, v = m.ravel(), v.ravel()
    p = Probit().predict_proba(m, v)
    exp = np.array([_quad_proba(sc.ndtr, a, b) for a, b in zip(m, v)])
    np.testing.assert_allclose(p, exp, rtol=1e-9, atol=1e-14)
    np.testing.assert_allclose(p, sc.ndtr(m / np.sqrt(1 + v)), rtol=1e-12)


def test_predict_proba_logistic():
    m, v = np.meshgrid(MEANS, PVARS)
    m, v = m.ravel(), v.ravel()
    p = Logistic().predict_proba(m, v)
    exp = np.array([_quad_proba(sc.expit, a, b) for a, b in zip(m, v)])
    np.testing.assert_allclose(p, exp, rtol=1e-8, atol=1e-14)


@pytest.mark.parametrize("make", [Probit, Logistic])
def test_predict_proba_in_unit_interval(make):
    m = np.array([-1e3, -50.0, -5.0, 0.0, 5.0, 50.0, 1e3])
    for v in (1e-8, 1.0, 1e4, 1e8):
        p = make().predict_proba(m, np.full(m.size, v))
        assert np.all(np.isfinite(p))
        assert np.all((p >= 0.0) & (p <= 1.0))
        assert np.all(np.diff(p) >= 0)            # increasing in the mean
    np.testing.assert_allclose(make().predict_proba([0.0], [2.0]), 0.5, rtol=1e-10)


def test_predict_proba_rejects_non_binary():
    with pytest.raises(ValueError):
        Gaussian(1.0).predict_proba([0.0], [1.0])


@pytest.mark.parametrize("make", [Probit, Logistic])
def test_encode_targets_binary(make):
    lik = make()
    np.testing.assert_array_equal(lik.encode_targets([1, -1, 1]), [1.0, -1.0, 1.0])
    for bad in ([1.0, np.nan], [1.0, 0.0], [0, 1], [1.0, 2.0], [1.0, -0.5], [np.inf, 1.0]):
        with pytest.raises(ValueError):
            lik.encode_targets(bad)


def test_encode_targets_gaussian():
    lik = Gaussian(1.0)
    np.testing.assert_array_equal(lik.encode_targets([0.3, -2.0]), [0.3, -2.0])
    for bad in ([1.0, np.nan], [np.inf, 0.0]):
        with pytest.raises(ValueError):
            lik.encode_targets(bad)


def test_invalid_likelihood_parameters():
    for value in (0.0, -1.0, np.nan, np.inf):
        with pytest.raises(ValueError, match="noise_variance"):
            Gaussian(value)
    with pytest.raises(ValueError, match="var_cav must be >= 0"):
        Probit().tilted(1.0, [0.0], [-1e-3])
    # a zero cavity variance is a point: log Phi(0), and the derivatives of log Phi at 0
    np.testing.assert_allclose([v[0] for v in Probit().tilted(1.0, [0.0], [0.0])],
                               [math.log(0.5), math.sqrt(2 / math.pi), -2 / math.pi],
                               rtol=1e-12)


def test_legacy_tilted_attribute_still_works_with_a_deprecation_warning():
    """A subclass written for fastep < 0.2 (``_tilted``) keeps working: a
    DeprecationWarning at class creation, and EP gives what the public name gives."""
    import fastep
    from fastep.likelihoods.binary import probit_tilted
    with pytest.warns(DeprecationWarning, match="scalar_tilted"):
        class OldProbit(Probit):
            _tilted = staticmethod(probit_tilted)
    assert OldProbit.scalar_tilted is probit_tilted

    class Mixin:                                   # a legacy mixin holding _tilted
        _tilted = staticmethod(probit_tilted)
    with pytest.warns(DeprecationWarning):
        class Mixed(Mixin, fl.Likelihood):
            binary = True
    assert Mixed.scalar_tilted is probit_tilted

    class Instance(fl.Likelihood):                 # 0.1's CustomLikelihood set it in __init__
        binary = True

        def __init__(self):
            super().__init__()
            self._tilted = probit_tilted
    with pytest.warns(DeprecationWarning):
        inst = Instance()
    assert inst.scalar_tilted is probit_tilted
    with pytest.warns(DeprecationWarning):
        assert Probit()._tilted is Probit.scalar_tilted
    K = np.array([[1.0, 0.5], [0.5, 1.0]])
    y = np.array([1.0, -1.0])
    for legacy in (OldProbit(), Mixed(), inst):
        assert (fastep.ep(K, y, legacy).log_marginal_likelihood
                == fastep.ep(K, y, Probit()).log_marginal_likelihood)


def test_a_likelihood_without_a_tilted_function_is_a_clear_error():
    import fastep

    class Incomplete(fl.Likelihood):
        pass
    X = np.linspace(-1, 1, 4)[:, None]
    for call in (lambda: fastep.ep(np.eye(4), np.ones(4), Incomplete()),
                 lambda: fastep.sparse_ep(fastep.kernels.RBF(), X[:2], X, np.ones(4),
                                          Incomplete())):
        with pytest.raises(ValueError, match="Incomplete defines no scalar_tilted"):
            call()


def test_tobit_interval_moments_match_high_precision_everywhere():
    """The truncated-normal moments behind interval-censored Tobit sites, against mpmath
    at 350 digits, for intervals from 1e-12 to 1e4 wide placed up to 1e5 standard
    deviations from the cavity mean (both tails, straddling, half-infinite)."""
    mp = pytest.importorskip("mpmath")
    from fastep.likelihoods.tobit import interval_moments
    mp.mp.dps = 350

    def truth(a, b):
        a, b = mp.mpf(a), mp.mpf(b)
        z = mp.ncdf(-a) - mp.ncdf(-b) if a > 0 else mp.ncdf(b) - mp.ncdf(a)
        pa = mp.npdf(a) / z if mp.isfinite(a) else 0
        pb = mp.npdf(b) / z if mp.isfinite(b) else 0
        ta = a * pa if mp.isfinite(a) else 0
        tb = b * pb if mp.isfinite(b) else 0
        return float(mp.log(z)), float(pa - pb), float(ta - tb - (pa - pb) ** 2)

    rng = np.random.default_rng(3)
    cases = [(1e4, np.inf), (-np.inf, -1e4), (-np.inf, np.inf), (-1e-9, 1e-9), (2.0, np.inf),
             (15201.58066055732, 15201.580664357789), (-5.0, -4.9999999)]
    for _ in range(300):
        a = rng.normal() * 10 ** rng.uniform(-3, 5)
        b = a + 10 ** rng.uniform(-12, 4)
        if b > a:                                 # (a width below a's spacing rounds away)
            cases.append((a, b))
    for a, b in cases:
        got, want = interval_moments(a, b), truth(a, b)
        assert got[0] == pytest.approx(want[0], rel=1e-12, abs=1e-12), (a, b)
        assert got[1] == pytest.approx(want[1], rel=1e-12, abs=1e-12), (a, b)
        assert got[2] == pytest.approx(want[2], abs=1e-11), (a, b)
        assert -1.0 <= got[2] <= 0.0


def _probit_by_hand(y, extra, f, params):
    return math.log(0.5 * math.erfc(-y * f / math.sqrt(2.0)))


def test_a_custom_likelihood_pickled_by_0_3_still_loads():
    """fastep 0.2/0.3 kept CustomLikelihood in ``likelihoods._base`` and pickled it as a
    call of ``fastep.likelihoods._base._rebuild_custom``; such a pickle (made here by
    renaming the module in a protocol-0 pickle of today's) loads to the same likelihood."""
    import pickle

    from fastep.likelihoods import CustomLikelihood
    lik = CustomLikelihood(_probit_by_hand, binary=True)
    today = pickle.dumps(lik, protocol=0)
    assert b"fastep.likelihoods.custom\n_rebuild_custom" in today
    old = today.replace(b"fastep.likelihoods.custom\n", b"fastep.likelihoods._base\n")
    back = pickle.loads(old)
    assert type(back) is CustomLikelihood
    np.testing.assert_array_equal(back.predict_proba([0.3, -1.0], [1.0, 2.0]),
                                  lik.predict_proba([0.3, -1.0], [1.0, 2.0]))


def test_binomial_of_one_trial_is_the_logistic_likelihood():
    """Binomial(y | 1, sigma(f)) is Logistic's p(y' | f) with y' = 2 y - 1: the same tilted
    moments (one panel quadrature against another), and its predictive moments are those
    of the success probability's own quadrature: E[y] = N E[sigma], Var[y] = N E[sigma
    sigma(-f)] + N^2 Var[sigma] (truth: scipy.integrate.quad)."""
    mu = np.array([-3.0, 0.0, 1.5, 4.0])
    var = np.array([0.1, 1.0, 10.0, 1e3])
    for y in (0.0, 1.0):
        got = fl.Binomial().tilted(np.full(4, y), mu, var)
        want = Logistic().tilted(np.full(4, 2 * y - 1), mu, var)
        for a, b in zip(got, want):
            np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-13)
    N = np.array([1.0, 5.0, 40.0, 1e4])
    mean_y, var_y = fl.Binomial().predict_y(mu, var, trials=N)
    for k in range(4):
        s = math.sqrt(var[k])
        dens = lambda f: norm.pdf(f, mu[k], s)                           # noqa: E731
        sig = lambda f: sc.expit(f)                                       # noqa: E731
        lim = (mu[k] - 12 * s, mu[k] + 12 * s)
        p1 = scipy.integrate.quad(lambda f: sig(f) * dens(f), *lim, limit=400,
                                  points=[0.0])[0]
        p2 = scipy.integrate.quad(lambda f: sig(f) ** 2 * dens(f), *lim, limit=400,
                                  points=[0.0])[0]
        assert mean_y[k] == pytest.approx(N[k] * p1, rel=1e-8)
        assert var_y[k] == pytest.approx(N[k] * (p1 - p2) + N[k] ** 2 * (p2 - p1 * p1),
                                         rel=1e-6)


def test_binomial_targets_and_trials_are_checked():
    lik = fl.Binomial(trials=[3, 5])
    with pytest.raises(ValueError, match=r"y\[1\] = 6 exceeds its trials 5"):
        lik.with_data(2, trials=[3, 5]).encode_targets([1, 6])
    with pytest.raises(ValueError, match="trials must hold whole numbers of trials"):
        fl.Binomial(trials=[2.5, 3])
    with pytest.raises(ValueError, match="success counts"):
        fl.Binomial().encode_targets([0.5])


def test_multi_annotator_predicts_the_true_label_by_its_probit_link():
    """P(true label = +1) at f ~ N(m, v) is Phi(m / sqrt(1 + v)) (quadrature), whatever
    the annotators said (the base class's rule gave the stored labels' likelihood)."""
    lik = fl.MultiAnnotator(np.array([[1.0, 0.0], [0.0, 0.0]]), [0.9, 0.6], [0.8, 0.7])
    m, v = np.array([0.3, -1.2]), np.array([0.5, 2.0])
    truth = [scipy.integrate.quad(lambda f: norm.cdf(f) * norm.pdf(f, m[i], math.sqrt(v[i])),
                                  -30, 30)[0] for i in range(2)]
    np.testing.assert_allclose(lik.predict_proba(m, v), truth, rtol=1e-9)


def test_count_densities_take_extra_and_report_its_own_errors():
    """The count likelihoods' log_predictive_density with explicit extra (log exposures)
    equals the likelihood holding those exposures; a wrong extra is reported as itself,
    not as the held exposures' shape."""
    y, m, v = np.array([1.0, 3.0, 0.0]), np.array([0.1, 0.8, -0.5]), np.array([0.3, 0.2, 1.0])
    e = np.array([0.5, 2.0, 1.0])
    held = fl.Poisson(exposure=e).log_predictive_density(y, m, v)
    given = fl.Poisson(exposure=np.ones(5)).log_predictive_density(
        y, m, v, extra=np.log(e)[:, None])
    np.testing.assert_allclose(given, held, rtol=1e-12)
    with pytest.raises(ValueError, match="extra") as info:
        fl.Poisson(exposure=np.ones(5)).log_predictive_density(y, m, v, extra=np.zeros((3, 2)))
    assert "exposure must" not in str(info.value)


def test_censored_predictions_take_none_for_an_absent_limit():
    from fastep.likelihoods.tobit import censored_predictive, censored_quantile
    none = censored_predictive([0.2], [0.5], 0.5, lower=None, upper=None)
    inf = censored_predictive([0.2], [0.5], 0.5)
    for key in ("mean", "var", "p_lower", "p_upper"):
        np.testing.assert_allclose(none[key], inf[key], rtol=1e-15)
    assert float(censored_quantile(0.5, [0.2], [0.5], 0.5, lower=None, upper=None)[0]) == \
        pytest.approx(0.2, rel=1e-12)
