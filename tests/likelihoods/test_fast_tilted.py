"""The trapezoid fast path of the tilted moments (fastep/likelihoods/_trapezoid.py).

Truth: the adaptive panel quadrature (``panel_moments``, itself held to scipy's and
mpmath's quadrature in test_likelihoods.py, test_counts_student_t_ordinal.py and
test_survival.py), which the fast path must equal to 1e-9 relative or 1e-12 absolute
(log Z, both mu-derivatives and every parameter derivative), on ordinary cavities, on
hypothesis-drawn ones and where the fast path must hand over.
"""
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fastep.likelihoods as fl
from fastep.likelihoods import _scalar as S
from fastep.likelihoods._quadrature import panel_moments, quad_moments

FAST = quad_moments.py_func.__globals__["FAST"]     # the trapezoid rule alone

# name: (kind, target sampler(rng), extra sampler(rng), params)
FAMILIES = {
    "probit": (S.PROBIT, lambda r: r.choice([-1.0, 1.0]), lambda r: [], []),
    "logistic": (S.LOGISTIC, lambda r: r.choice([-1.0, 1.0]), lambda r: [], []),
    "poisson": (S.POISSON, lambda r: float(r.poisson(r.choice([0.3, 3.0, 40.0]))),
                lambda r: [r.normal(scale=0.5)], []),
    "negative_binomial": (S.NEG_BINOMIAL, lambda r: float(r.poisson(r.choice([0.3, 3.0, 40.0]))),
                          lambda r: [r.normal(scale=0.5)], [1.7]),
    "binomial": (S.BINOMIAL, lambda r: float(r.integers(0, 13)), lambda r: [12.0], []),
    "student_t": (S.STUDENT_T, lambda r: r.standard_t(3.0) * 1.5, lambda r: [], [3.0, 0.4]),
    "weibull": (S.WEIBULL, lambda r: math.exp(r.normal()), lambda r: [float(r.integers(0, 2))],
                [1.8]),
    "log_logistic": (S.LOG_LOGISTIC, lambda r: math.exp(r.normal()),
                     lambda r: [float(r.integers(0, 2))], [2.5]),
    "log_normal": (S.LOG_NORMAL, lambda r: math.exp(r.normal()),
                   lambda r: [float(r.integers(0, 2))], [0.6]),
}


def _close(got, ref, var):
    """Equal to 1e-9 relative or 1e-12 absolute; at cavity variances below 1 the
    absolute floor of d1 = E[f - mu] / var and d2 = (Var[f] - var) / var^2 grows as the
    rounding of the tilted mean and variance (1e-15 of sqrt(var) and var) does, as in
    test_likelihoods.py: no double-precision quadrature does better there."""
    got, ref = np.asarray(got[:4], float), np.asarray(ref[:4], float)
    floor = np.array([1e-12, max(1e-12, 1e-14 / math.sqrt(var)), max(1e-12, 1e-14 / var),
                      1e-12])
    return bool(np.all(np.abs(got - ref) <= 1e-9 * np.abs(ref) + floor))


def _compare(kind, y, extra, mu, var, alpha, params):
    """Mismatches of every output (log Z, d1, d2 and each parameter derivative)."""
    bad = []
    for k in [-1] + list(range(len(params))):
        got = quad_moments(kind, y, extra, mu, var, alpha, params, k)
        ref = panel_moments(kind, y, extra, mu, var, alpha, params, k)
        if not _close(got, ref, var):
            bad.append((k, y, extra.tolist(), mu, var, alpha, got, ref))
    return bad


@pytest.mark.parametrize("name", list(FAMILIES))
def test_fast_path_equals_the_panels_on_ordinary_cavities(name):
    kind, target, extra_of, params = FAMILIES[name]
    rng = np.random.default_rng(7)
    params = np.array(params, float)
    bad, fast = [], 0
    n = 300
    for _ in range(n):
        y, extra = float(target(rng)), np.array(extra_of(rng), float)
        mu, var = rng.normal(), rng.uniform(0.2, 2.0)
        alpha = 1.0 if rng.uniform() < 0.7 else 0.5
        bad += _compare(kind, y, extra, mu, var, alpha, params)
        fast += FAST(kind, y, extra, mu, var, alpha, params, -1)[0]
    assert not bad, f"{len(bad)} mismatches, first {bad[:3]}"
    # the point of the fast path: ordinary cavities take it
    assert fast >= 0.95 * n, f"only {fast} of {n} ordinary sites took the fast path"


@settings(max_examples=150, deadline=None, derandomize=True)
@given(st.sampled_from(sorted(FAMILIES)), st.integers(0, 2 ** 31 - 1),
       st.floats(-30.0, 30.0), st.floats(-4.0, 4.0), st.sampled_from([1.0, 0.5]))
def test_fast_path_equals_the_panels_on_generated_cavities(name, seed, mu, log10_var, alpha):
    kind, target, extra_of, params = FAMILIES[name]
    rng = np.random.default_rng(seed)
    y, extra = float(target(rng)), np.array(extra_of(rng), float)
    bad = _compare(kind, y, extra, mu, 10.0 ** log10_var, alpha, np.array(params, float))
    assert not bad, bad


# One cavity per family where the trapezoid rule's premises fail: a tilted density far
# wider than the likelihood's features (the nodes cannot reach its tail within their
# budget) or with a second mode (Student-t).  The fast path must decline there.
DECLINE = [
    ("logistic", S.LOGISTIC, 1.0, [], 0.0, 1e4, []),
    ("probit", S.PROBIT, 1.0, [], 0.0, 1e4, []),
    ("poisson", S.POISSON, 0.0, [0.0], 0.0, 1e4, []),
    ("negative_binomial", S.NEG_BINOMIAL, 100.0, [0.0], -30.0, 1e3, [0.5]),
    ("binomial", S.BINOMIAL, 20.0, [20.0], -100.0, 1e4, []),
    ("student_t bimodal", S.STUDENT_T, 6.0, [], 0.0, 4.0, [1.5, 0.1]),
    ("weibull", S.WEIBULL, 1.0, [1.0], 0.0, 1e4, [3.0]),
    ("log_logistic", S.LOG_LOGISTIC, 1.0, [0.0], 0.0, 1e4, [2.0]),
    ("log_normal", S.LOG_NORMAL, 1.0, [0.0], 0.0, 1e4, [0.3]),
    ("zero_inflated at y = 0", S.ZI_POISSON, 0.0, [0.0], 4.0, 9.0, [0.3]),
]


@pytest.mark.parametrize("case", DECLINE, ids=[c[0] for c in DECLINE])
def test_fast_path_declines_where_its_premises_fail(case):
    _, kind, y, extra, mu, var, params = case
    extra, params = np.array(extra, float), np.array(params, float)
    for alpha in (1.0, 0.5):
        assert not FAST(kind, y, extra, mu, var, alpha, params, -1)[0]
        got = quad_moments(kind, y, extra, mu, var, alpha, params, -1)
        assert got == panel_moments(kind, y, extra, mu, var, alpha, params, -1)


def test_the_estimate_catches_a_step_too_coarse_for_the_likelihood():
    """A CustomLikelihood declares no strip of analyticity: its rule is checked against
    the half-step rule strictly.  A sharp logistic (slope 40) under a unit cavity has
    poles 40x closer to the real axis than the built-in's, and the check must see it."""
    def sharp(y, extra, f, params):
        t = 40.0 * y * f
        return -math.log1p(math.exp(-t)) if t > 0.0 else t - math.log1p(math.exp(t))

    lik = fl.CustomLikelihood(sharp)
    y, mu, var = np.array([1.0, -1.0, 1.0]), np.array([0.0, 0.3, -0.2]), np.ones(3)
    got = np.array(lik.tilted(y, mu, var))
    # the exact tilted moments of a logistic of slope 40 are those of the built-in at
    # cavity (40 mu, 1600 var), mapped back
    ref = np.array(fl.Logistic().tilted(y, 40.0 * mu, 1600.0 * var))
    ref[1] *= 40.0
    ref[2] *= 1600.0
    assert np.allclose(got, ref, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("name", ["logistic", "poisson", "negative_binomial", "binomial"])
def test_closed_form_weight_ratio_equals_the_log_likelihood(name):
    """The trapezoid rule's weights for these families come from a closed-form ratio
    p(y | x + u)^alpha / p(y | x)^alpha (fewer transcendentals); it equals
    exp(alpha (log p(y | x + u) - log p(y | x))) from the log-likelihood itself, and the
    families' sites do take it (not the fallback from log p)."""
    kind, target, extra_of, params = FAMILIES[name]
    rng = np.random.default_rng(3)
    params = np.array(params, float)
    taken = 0
    for _ in range(400):
        y, extra = float(target(rng)), np.array(extra_of(rng), float)
        x, u = rng.normal(scale=3.0), rng.normal(scale=1.0)
        alpha = 1.0 if kind == S.LOGISTIC else rng.choice([1.0, 0.5])
        c = S.builtin_ratio_prep(kind, y, extra, params, alpha, x)
        assert c == c, (name, y, x)                        # the ratio is on offer
        got = S.builtin_lik_ratio(kind, y, extra, params, alpha, c, u, math.exp(u))
        log_ref = alpha * (S.builtin_lik_f(kind, y, extra, x + u, params)
                           - S.builtin_lik_f(kind, y, extra, x, params))
        if log_ref > 700.0:           # beyond float64: the rule takes that node from log p
            assert got == math.inf or got > 1e300, (name, y, x, u)
        elif log_ref < -700.0:
            assert got < 1e-300, (name, y, x, u)
        else:
            assert math.log(got) == pytest.approx(log_ref, rel=1e-10, abs=1e-10), \
                (name, y, x, u)
        taken += 1
    assert taken == 400
    # the logistic at another power, and families without a ratio, fall back to log p
    assert math.isnan(S.builtin_ratio_prep(S.LOGISTIC, 1.0, np.zeros(0), params, 0.5, 0.0))
    assert math.isnan(S.builtin_ratio_prep(S.STUDENT_T, 1.0, np.zeros(0), params, 1.0, 0.0))


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.floats(0.03, 30.0), st.integers(0, 200))
def test_int_power_is_the_power(x, k):
    """The binomial ratio's products (S.int_power) against the correctly rounded power
    (math.pow), within the 2 k ulps the docstring promises."""
    assert math.isclose(S.int_power(x, k), math.pow(x, k), rel_tol=max(2 * k, 1) * 2.3e-16)


@pytest.mark.parametrize("trials", [1.0, 7.0, 64.0, 65.0, 300.0, 12.5])
def test_binomial_ratio_by_products_and_by_logs_equal_the_panels(trials):
    """Whole N up to POWER_MAX_TRIALS at power 1 take the weights by products, the rest
    (65 and 300 trials, 12.5 "trials", power 0.5) by log1p and exp: both equal the panels."""
    rng = np.random.default_rng(int(trials * 10))
    bad = []
    for _ in range(40):
        y = float(rng.integers(0, int(trials) + 1))
        for alpha in (1.0, 0.5):
            bad += _compare(S.BINOMIAL, y, np.array([trials]), rng.normal(scale=2.0),
                            rng.uniform(0.05, 5.0), alpha, np.zeros(0))
    assert not bad, bad[:3]
