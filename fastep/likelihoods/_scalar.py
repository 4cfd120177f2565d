"""Scalar log-likelihoods of the built-in likelihoods (``math`` only).

:func:`builtin_log_lik` selects one by an integer *kind*; the panel-quadrature
fallback calls it statically, which keeps every compiled kernel cacheable
(Numba cannot cache a kernel that receives a compiled function as a value).
Add a new built-in by giving it a kind here.
"""
from __future__ import annotations

import math

from .._jit import jit
from .._numerics import LOG_SQRT_2PI, digamma, log_add_exp, log_diff_exp, log_phi

(PROBIT, LOGISTIC, ANNOTATORS, TOBIT, POISSON, NEG_BINOMIAL, STUDENT_T, ORDINAL, ZI_POISSON,
 ZI_NEG_BINOMIAL, WEIBULL, LOG_LOGISTIC, LOG_NORMAL, BINOMIAL) = range(14)
#: Below this count, Gamma(y + r) / Gamma(r) is summed term by term (no cancellation).
_SMALL_COUNT = 32


@jit("f8(f8, f8)")
def probit_log_lik(y, f):
    """log Phi(y f)."""
    return log_phi(y * f)


@jit("f8(f8, f8)")
def logistic_log_lik(y, f):
    """log sigma(y f) = -log(1 + exp(-y f)), overflow-free."""
    t = y * f
    if t > 0.0:
        return -math.log1p(math.exp(-t))
    return t - math.log1p(math.exp(t))


@jit("f8(f8, f8, f8)")
def annotators_log_lik(log_a, log_b, f):
    """log(b + (a - b) Phi(f)) = log(a Phi(f) + b Phi(-f)), a and b given in log space."""
    return log_add_exp(log_a + log_phi(f), log_b + log_phi(-f))


@jit("f8(f8, f8, f8, f8, f8)")
def tobit_log_lik(y, lower, upper, f, sigma):
    """log p(y | f) of the Tobit model: y observed exactly (lower < y < upper) has density
    N(y | f, sigma^2); y <= lower means y* <= lower, y >= upper means y* >= upper; y NaN
    means lower < y* < upper (interval censoring)."""
    if y != y:
        b = (upper - f) / sigma
        a = (lower - f) / sigma
        if a > 0.0:
            return log_diff_exp(log_phi(-a), log_phi(-b))
        return log_diff_exp(log_phi(b), log_phi(a))
    if y <= lower:
        return log_phi((lower - f) / sigma)
    if y >= upper:
        return log_phi((f - upper) / sigma)
    r = (y - f) / sigma
    return -0.5 * r * r - LOG_SQRT_2PI - math.log(sigma)


@jit("f8(f8, f8, f8)")
def poisson_log_lik(y, log_exposure, f):
    """log Poisson(y | exp(f + log_exposure)) = y eta - exp(eta) - log y!  (-inf where
    exp(eta) overflows: a rate past 1e304 gives any count probability 0)."""
    eta = f + log_exposure
    if eta > 709.0:
        return -math.inf
    return y * eta - math.exp(eta) - math.lgamma(y + 1.0)


@jit("f8(f8, f8, f8)")
def binomial_log_lik(y, trials, f):
    """log Binomial(y | trials, sigma(f)) = log C(trials, y) + y log sigma(f)
    + (trials - y) log sigma(-f) (logit link); -inf for y outside 0..trials."""
    if y < 0.0 or y > trials:
        return -math.inf
    log_c = math.lgamma(trials + 1.0) - math.lgamma(y + 1.0) - math.lgamma(trials - y + 1.0)
    out = log_c
    if y > 0.0:
        out += y * logistic_log_lik(1.0, f)
    if trials > y:
        out += (trials - y) * logistic_log_lik(-1.0, f)
    return out


@jit("f8(f8, f8)")
def log_rising(r, y):
    """log Gamma(y + r) - log Gamma(r) for a count y (term by term for small y)."""
    if y <= _SMALL_COUNT:
        acc = 0.0
        for j in range(int(y)):
            acc += math.log(r + j)
        return acc
    return math.lgamma(y + r) - math.lgamma(r)


@jit("f8(f8, f8)")
def digamma_rising(r, y):
    """psi(y + r) - psi(r), d/dr of :func:`log_rising`."""
    if y <= _SMALL_COUNT:
        acc = 0.0
        for j in range(int(y)):
            acc += 1.0 / (r + j)
        return acc
    return digamma(y + r) - digamma(r)


@jit("f8(f8, f8, f8, f8)")
def neg_binomial_log_lik(y, log_exposure, f, r):
    """log NB(y | mean mu = exp(f + log_exposure), dispersion r): variance mu + mu^2 / r,
    ``log Gamma(y + r) - log Gamma(r) - log y! + r log(r / (r + mu)) + y log(mu / (r + mu))``
    (the logs as log-sum-exps: no overflow for large mu)."""
    eta = f + log_exposure
    log_r = math.log(r)
    log_rm = log_add_exp(log_r, eta)                       # log(r + mu)
    return (log_rising(r, y) - math.lgamma(y + 1.0) + r * (log_r - log_rm)
            + y * (eta - log_rm))


@jit("f8(f8, f8, f8, f8)")
def neg_binomial_dlog_lik(y, log_exposure, f, r):
    """d/dr of :func:`neg_binomial_log_lik`:
    psi(y + r) - psi(r) + log(r / (r + mu)) + (mu - y) / (r + mu)."""
    eta = f + log_exposure
    log_r = math.log(r)
    log_rm = log_add_exp(log_r, eta)
    t = math.exp(log_r - log_rm)                           # r / (r + mu)
    return digamma_rising(r, y) + (log_r - log_rm) + (1.0 - t) - y * math.exp(-log_rm)


@jit("f8(f8, f8, f8)")
def zero_inflated_log_lik(y, log_count, pi):
    """log of ``pi [y = 0] + (1 - pi) p(y)`` from ``log_count = log p(y)`` of the count
    process and the zero probability ``pi`` (a structural zero)."""
    if y == 0.0:
        return log_add_exp(math.log(pi), math.log1p(-pi) + log_count)
    return math.log1p(-pi) + log_count


@jit("f8(f8, f8, f8)")
def zero_inflated_edge(log_exposure, pi, r):
    """Where ``(1 - pi) p(0 | f) = pi`` (the edge of the plateau of the zero-inflated
    likelihood of y = 0, whose tilted density may have a second mode there): a start of
    the quadrature's mode search; NaN where pi >= 1/2 (no edge).  ``r``: the negative
    binomial's dispersion, inf for the Poisson (p(0) = exp(-mu), else (r / (r + mu))^r)."""
    odds = math.log1p(-pi) - math.log(pi)                  # log((1 - pi) / pi)
    if not odds > 0.0:
        return math.nan
    rate = odds if r == math.inf else r * math.expm1(odds / r)
    return math.log(rate) - log_exposure


@jit("f8(f8)")
def softplus(z):
    """log(1 + exp(z)), overflow-free."""
    if z > 0.0:
        return z + math.log1p(math.exp(-z))
    return math.log1p(math.exp(z))


@jit("f8(i8, f8, f8, f8, f8)")
def survival_log_lik(kind, t, event, f, s):
    """log p(t | f) of an accelerated-failure-time model, log T = f + noise: the density
    at t for an event (``event`` 1), the survival function S(t | f) for a right-censored
    time (``event`` 0).  With u = log t - f and z = r u (``s`` the shape r; for the
    log-normal the noise sd sigma)::

        Weibull        event: log r - log t + z - e^z            censored: -e^z
        log-logistic   event: log r - log t + z - 2 log(1 + e^z) censored: -log(1 + e^z)
        log-normal     event: log N(u | 0, sigma^2) - log t      censored: log Phi(-u / sigma)
    """
    u = math.log(t) - f
    if kind == LOG_NORMAL:
        if event != 0.0:
            r = u / s
            return -0.5 * r * r - math.log(s) - LOG_SQRT_2PI - math.log(t)
        return log_phi(-u / s)
    z = s * u
    if kind == WEIBULL:
        if z > 700.0:
            return -math.inf
        if event != 0.0:
            return math.log(s) - math.log(t) + z - math.exp(z)
        return -math.exp(z)
    if event != 0.0:
        return math.log(s) - math.log(t) + z - 2.0 * softplus(z)
    return -softplus(z)


@jit("f8(i8, f8, f8, f8, f8)")
def survival_dlog_lik(kind, t, event, f, s):
    """d/ds of :func:`survival_log_lik` (the shape r; the log-normal's sigma)."""
    u = math.log(t) - f
    if kind == LOG_NORMAL:
        if event != 0.0:
            return u * u / (s * s * s) - 1.0 / s
        a = -u / s                                      # d log Phi(a) / d sigma
        return math.exp(-0.5 * a * a - LOG_SQRT_2PI - log_phi(a)) * (u / (s * s))
    z = s * u
    if kind == WEIBULL:
        if z > 700.0:
            return 0.0
        if event != 0.0:
            return 1.0 / s + u - u * math.exp(z)
        return -u * math.exp(z)
    sig = 1.0 / (1.0 + math.exp(-z)) if z > -700.0 else 0.0     # logistic(z)
    if event != 0.0:
        return 1.0 / s + u - 2.0 * u * sig
    return -u * sig


@jit("f8(f8, f8, f8, f8)")
def student_t_log_lik(y, f, nu, sigma):
    """log St(y | f, nu, sigma) = log Gamma((nu+1)/2) - log Gamma(nu/2) - 1/2 log(nu pi)
    - log sigma - (nu+1)/2 log(1 + r^2 / nu),  r = (y - f) / sigma."""
    r = (y - f) / sigma
    return (math.lgamma(0.5 * (nu + 1.0)) - math.lgamma(0.5 * nu)
            - 0.5 * math.log(nu * math.pi) - math.log(sigma)
            - 0.5 * (nu + 1.0) * math.log1p(r * r / nu))


@jit("f8(f8, f8, f8, f8, i8)")
def student_t_dlog_lik(y, f, nu, sigma, k):
    """d/dnu (k = 0) or d/dsigma (k = 1) of :func:`student_t_log_lik`."""
    r = (y - f) / sigma
    q = r * r / nu
    w = q / (1.0 + q)                                       # r^2 / (nu + r^2)
    if k == 0:
        return 0.5 * (digamma(0.5 * (nu + 1.0)) - digamma(0.5 * nu) - 1.0 / nu
                      - math.log1p(q) + (nu + 1.0) * w / nu)
    return ((nu + 1.0) * w - 1.0) / sigma


@jit("UniTuple(f8, 2)(f8, f8[::1])")
def ordinal_limits(y, cuts):
    """(lower, upper) cut points of level y (0 .. K-1); -inf / +inf at the ends."""
    k = int(y)
    lower = cuts[k - 1] if k > 0 else -math.inf
    upper = cuts[k] if k < cuts.shape[0] else math.inf
    return lower, upper


@jit("f8(f8, f8)")
def log_interval(a, b):
    """log(Phi(b) - Phi(a)) for a < b, without cancellation in either tail."""
    if a > 0.0:
        return log_diff_exp(log_phi(-a), log_phi(-b))
    return log_diff_exp(log_phi(b), log_phi(a))


@jit("f8(f8, f8, f8[::1])")
def ordinal_log_lik(y, f, cuts):
    """log p(y = k | f) = log(Phi(b_k - f) - Phi(b_{k-1} - f)) (ordinal probit, unit noise)."""
    lower, upper = ordinal_limits(y, cuts)
    return log_interval(lower - f, upper - f)


@jit("f8(f8, f8, f8[::1], i8)")
def ordinal_dlog_lik(y, f, cuts, j):
    """d/d b_j of :func:`ordinal_log_lik`: phi(b_k - f) / P for j = k, -phi(b_{k-1} - f) / P
    for j = k - 1, else 0."""
    lower, upper = ordinal_limits(y, cuts)
    k = int(y)
    if j != k and j != k - 1:
        return 0.0
    lp = log_interval(lower - f, upper - f)
    if j == k:
        d = upper - f
        return math.exp(-0.5 * d * d - LOG_SQRT_2PI - lp)
    d = lower - f
    return -math.exp(-0.5 * d * d - LOG_SQRT_2PI - lp)


@jit("f8(i8, f8, f8[::1], f8, f8[::1])")
def builtin_log_lik(kind, y, extra, f, params):
    """log p(y | f) of the built-in likelihood ``kind``."""
    if kind == PROBIT:
        return probit_log_lik(y, f)
    if kind == LOGISTIC:
        return logistic_log_lik(y, f)
    if kind == ANNOTATORS:
        return annotators_log_lik(extra[0], extra[1], f)
    if kind == TOBIT:
        return tobit_log_lik(y, extra[0], extra[1], f, math.sqrt(params[0]))
    if kind == POISSON:
        return poisson_log_lik(y, extra[0], f)
    if kind == NEG_BINOMIAL:
        return neg_binomial_log_lik(y, extra[0], f, params[0])
    if kind == STUDENT_T:
        return student_t_log_lik(y, f, params[0], params[1])
    if kind == ORDINAL:
        return ordinal_log_lik(y, f, params)
    if kind == WEIBULL or kind == LOG_LOGISTIC or kind == LOG_NORMAL:
        return survival_log_lik(kind, y, extra[0], f, params[0])
    if kind == ZI_POISSON:
        return zero_inflated_log_lik(y, poisson_log_lik(y, extra[0], f), params[0])
    if kind == ZI_NEG_BINOMIAL:
        return zero_inflated_log_lik(y, neg_binomial_log_lik(y, extra[0], f, params[0]),
                                     params[1])
    if kind == BINOMIAL:
        return binomial_log_lik(y, extra[0], f)
    return math.nan


@jit("f8(i8, f8, f8[::1], f8, f8[::1], i8)")
def builtin_dlog_lik(kind, y, extra, f, params, k):
    """d log p(y | f) / d params[k] of the built-in likelihood ``kind`` (0 where it has no
    closed form here: its class differentiates log Z otherwise; the zero-inflated counts
    from their count process's, see :class:`fastep.likelihoods.counts._ZeroInflated`)."""
    if kind == NEG_BINOMIAL:
        return neg_binomial_dlog_lik(y, extra[0], f, params[0])
    if kind == STUDENT_T:
        return student_t_dlog_lik(y, f, params[0], params[1], k)
    if kind == ORDINAL:
        return ordinal_dlog_lik(y, f, params, k)
    if kind == WEIBULL or kind == LOG_LOGISTIC or kind == LOG_NORMAL:
        return survival_dlog_lik(kind, y, extra[0], f, params[0])
    return 0.0


@jit("f8(i8, f8, f8[::1], f8[::1])")
def builtin_peak(kind, y, extra, params):
    """Where log p(y | f) of the built-in likelihood ``kind`` peaks in f, if it is not
    log-concave (a second start for the quadrature's mode search); NaN otherwise."""
    if kind == STUDENT_T:
        return y
    if kind == ZI_POISSON and y == 0.0:
        return zero_inflated_edge(extra[0], params[0], math.inf)
    if kind == ZI_NEG_BINOMIAL and y == 0.0:
        return zero_inflated_edge(extra[0], params[1], params[0])
    return math.nan
