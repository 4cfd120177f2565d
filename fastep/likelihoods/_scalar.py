"""Scalar log-likelihoods of the built-in likelihoods (``math`` only).

:func:`builtin_log_lik` selects one by an integer *kind*; the panel-quadrature
fallback calls it statically, which keeps every compiled kernel cacheable
(Numba cannot cache a kernel that receives a compiled function as a value).
Add a new built-in by giving it a kind here.

Over 450 lines: one job, the built-in scalar log-likelihoods in compiled code, selected
by kind, which must sit in one module for Numba to cache the kernels that call them
statically.
"""
from __future__ import annotations

import math

from .._jit import jit
from .._numerics import LOG_SQRT_2PI, digamma, log_add_exp, log_diff_exp, log_phi, mills, mills_shift

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


@jit("f8(f8)")
def sigmoid(z):
    """1 / (1 + exp(-z)), overflow-free."""
    if z >= 0.0:
        return 1.0 / (1.0 + math.exp(-z))
    e = math.exp(z)
    return e / (1.0 + e)


@jit("f8(i8, f8, f8[::1], f8[::1])")
def builtin_lik_const(kind, y, extra, params):
    """The part of log p(y | f) of ``kind`` that does not depend on f (see
    :func:`builtin_lik_d2`): added once to log Z instead of at every node."""
    if kind == POISSON:
        return y * extra[0] - math.lgamma(y + 1.0)
    if kind == NEG_BINOMIAL:
        r = params[0]
        return log_rising(r, y) - math.lgamma(y + 1.0) + r * math.log(r) + y * extra[0]
    if kind == BINOMIAL:
        n = extra[0]
        if y < 0.0 or y > n:
            return 0.0
        return math.lgamma(n + 1.0) - math.lgamma(y + 1.0) - math.lgamma(n - y + 1.0)
    if kind == STUDENT_T:
        nu, sigma = params[0], params[1]
        return (math.lgamma(0.5 * (nu + 1.0)) - math.lgamma(0.5 * nu)
                - 0.5 * math.log(nu * math.pi) - math.log(sigma))
    if kind == WEIBULL or kind == LOG_LOGISTIC:
        return math.log(params[0]) - math.log(y) if extra[0] != 0.0 else 0.0
    if kind == LOG_NORMAL:
        return -math.log(params[0]) - LOG_SQRT_2PI - math.log(y) if extra[0] != 0.0 else 0.0
    return 0.0


@jit("UniTuple(f8, 3)(i8, f8, f8[::1], f8, f8[::1])")
def builtin_lik_d2(kind, y, extra, f, params):
    """(l(f), l'(f), l''(f)) for the f-dependent part l = log p(y | f) - const of the
    built-in likelihood ``kind`` (const: :func:`builtin_lik_const`); NaN derivatives for
    the kinds without them here (finite differences are taken).  With u = log t - f and
    z = r u for the survival models, mu = exp(f + log exposure) for the counts::

        logistic      log sigma(y f)                 y sigma(-y f), -sigma(f) sigma(-f)
        Poisson       y f - mu                       y - mu, -mu
        neg. binomial y f - (r + y) log(r + mu)      y - (r + y) t, -(r + y) t (1 - t),
                                                     t = mu / (r + mu)
        binomial      y log s(f) + (N - y) log s(-f) y - N s(f), -N s(f) s(-f)
        Student-t     -(nu + 1)/2 log(1 + q^2/nu), q = (y - f) / sigma
        Weibull       z - e^z (event), -e^z          ... (d/df = -r d/dz)
    """
    if kind == LOGISTIC:
        s = sigmoid(y * f)
        return logistic_log_lik(y, f), y * (1.0 - s), -s * (1.0 - s)
    if kind == POISSON:
        eta = f + extra[0]
        if eta > 709.0:
            return -math.inf, math.nan, math.nan
        m = math.exp(eta)
        return y * f - m, y - m, -m
    if kind == NEG_BINOMIAL:
        r = params[0]
        eta = f + extra[0]
        log_rm = log_add_exp(math.log(r), eta)
        t = math.exp(eta - log_rm)
        return y * f - (r + y) * log_rm, y - (r + y) * t, -(r + y) * t * (1.0 - t)
    if kind == BINOMIAL:
        n = extra[0]
        if y < 0.0 or y > n:
            return -math.inf, math.nan, math.nan
        s = sigmoid(f)
        out = 0.0
        if y > 0.0:
            out += y * logistic_log_lik(1.0, f)
        if n > y:
            out += (n - y) * logistic_log_lik(-1.0, f)
        return out, y - n * s, -n * s * (1.0 - s)
    if kind == STUDENT_T:
        nu, sigma = params[0], params[1]
        q = (y - f) / sigma
        den = nu + q * q
        return (-0.5 * (nu + 1.0) * math.log1p(q * q / nu), (nu + 1.0) * q / (sigma * den),
                -(nu + 1.0) * (nu - q * q) / (sigma * sigma * den * den))
    if kind == WEIBULL or kind == LOG_LOGISTIC or kind == LOG_NORMAL:
        r = params[0]
        u = math.log(y) - f
        event = extra[0] != 0.0
        if kind == LOG_NORMAL:
            if event:
                return -0.5 * (u / r) * (u / r), u / (r * r), -1.0 / (r * r)
            a = -u / r
            m = mills(a)
            return log_phi(a), m / r, -m * mills_shift(a) / (r * r)
        z = r * u
        if kind == WEIBULL:
            if z > 700.0:
                return -math.inf, math.nan, math.nan
            e = math.exp(z)
            if event:
                return z - e, -r * (1.0 - e), -r * r * e
            return -e, r * e, -r * r * e
        s = sigmoid(z)
        if event:
            return z - 2.0 * softplus(z), -r * (1.0 - 2.0 * s), -2.0 * r * r * s * (1.0 - s)
        return -softplus(z), r * s, -r * r * s * (1.0 - s)
    return builtin_log_lik(kind, y, extra, f, params), math.nan, math.nan


@jit("f8(i8, f8, f8[::1], f8, f8[::1])")
def builtin_lik_f(kind, y, extra, f, params):
    """The f-dependent part of log p(y | f): the first value of :func:`builtin_lik_d2`,
    without the derivatives."""
    if kind == LOGISTIC:
        return logistic_log_lik(y, f)
    if kind == POISSON:
        eta = f + extra[0]
        return y * f - math.exp(eta) if eta <= 709.0 else -math.inf
    if kind == NEG_BINOMIAL:
        r = params[0]
        return y * f - (r + y) * log_add_exp(math.log(r), f + extra[0])
    if kind == STUDENT_T:
        q = (y - f) / params[1]
        return -0.5 * (params[0] + 1.0) * math.log1p(q * q / params[0])
    if kind == WEIBULL or kind == LOG_LOGISTIC or kind == LOG_NORMAL \
            or kind == BINOMIAL:
        return builtin_lik_d2(kind, y, extra, f, params)[0]
    return builtin_log_lik(kind, y, extra, f, params)


@jit("UniTuple(f8, 3)(i8, f8, f8[::1], f8[::1])")
def builtin_strip(kind, y, extra, params):
    """(d, c, p): log p(y | f) of ``kind`` is analytic for |Im f| < d, its nearest
    singularity has real part c (NaN: unknown) and p(y | f) blows up there like a pole of
    order p (1 where it does not); d NaN where not declared here, inf where log p is
    entire with at most Gaussian growth.  The trapezoid rule's step and its error
    estimate follow from them (:mod:`fastep.likelihoods._trapezoid`)::

        logistic, binomial  poles of sigma(f) at f = +-i pi             d = pi, c = 0,
                                                                        p = 1, N trials
        neg. binomial       r + exp(f + log exposure) = 0               d = pi, p = r + y,
                                                                        c = log r - log exposure
        Poisson, Weibull    exp(f) grows without bound for |Im f| > pi/2 d = pi / (2 r)
        log-logistic        softplus(r (log t - f)) singular at pi i    d = pi / r, c = log t,
                                                                        p = 2 (event)
        Student-t           1 + (y - f)^2 / (nu sigma^2) = 0            d = sigma sqrt(nu), c = y,
                                                                        p = (nu + 1) / 2
        log-normal, probit  event: Gaussian in f (entire); censored (and log Phi(y f)):
                            the zeros of Phi(a) nearest the real axis, a = 1.916 +- 2.816 i
    """
    if kind == LOGISTIC:
        return math.pi, 0.0, 1.0
    if kind == BINOMIAL:
        return math.pi, 0.0, max(extra[0], 1.0)
    if kind == PROBIT:
        return 2.816, 1.916 * y, 1.0
    if kind == NEG_BINOMIAL:
        return math.pi, math.log(params[0]) - extra[0], params[0] + y
    if kind == POISSON:
        return 0.5 * math.pi, math.nan, 1.0
    if kind == WEIBULL:
        return 0.5 * math.pi / params[0], math.nan, 1.0
    if kind == LOG_LOGISTIC:
        return math.pi / params[0], math.log(y), 2.0 if extra[0] != 0.0 else 1.0
    if kind == STUDENT_T:
        return params[1] * math.sqrt(params[0]), y, 0.5 * (params[0] + 1.0)
    if kind == LOG_NORMAL:
        if extra[0] != 0.0:
            return math.inf, math.nan, 1.0
        return 2.816 * params[0], math.log(y) + 1.916 * params[0], 1.0
    return math.nan, math.nan, 1.0


@jit("f8(i8, f8, f8[::1], f8[::1], f8, f8)")
def builtin_ratio_prep(kind, y, extra, params, alpha, x):
    """The per-site constant of :func:`builtin_lik_ratio` at the mode x, or NaN where
    ``kind`` has no closed-form ratio (or not at this power, or the constant is out of
    float64's comfortable range): e^(-y x) for the logistic, the mean e^(x + log E) of
    the Poisson and negative binomial, e^x for the binomial."""
    if kind == LOGISTIC and alpha == 1.0:
        a = -y * x
    elif kind == POISSON or kind == NEG_BINOMIAL:
        a = x + extra[0]
    elif kind == BINOMIAL:
        a = x
    else:
        return math.nan
    return math.exp(a) if -690.0 < a < 690.0 else math.nan


#: The binomial's ratio by products (:func:`int_power`) up to this many trials.
POWER_MAX_TRIALS = 64.0


@jit("f8(f8, i8)")
def int_power(x, k):
    """``x ** k`` for an integer ``k >= 0`` by repeated squaring (at most 2 log2 k
    products, each rounding once: a relative error below ``2 k`` ulps)."""
    out = 1.0
    while k > 0:
        if k & 1:
            out *= x
        x *= x
        k >>= 1
    return out


@jit("f8(i8, f8, f8[::1], f8[::1], f8, f8, f8, f8)")
def builtin_lik_ratio(kind, y, extra, params, alpha, c, u, eu):
    """``p(y | x + u)^alpha / p(y | x)^alpha`` from the per-site constant ``c`` of
    :func:`builtin_ratio_prep` and ``eu = e^u`` (the trapezoid rule keeps it by a
    recurrence over its nodes): one exp (Poisson) or exp and log1p (negative binomial,
    binomial) instead of log p's two or three transcendentals and the exp of the sum,
    and none at all for the logistic::

        logistic (alpha 1)  (1 + c) / (1 + c e^(-y u)),            c = e^(-y x)
        Poisson             exp(alpha (y u - c (e^u - 1))),        c = e^(x + log E)
        neg. binomial       exp(alpha (y u - (r + y) log1p(c (e^u - 1) / (r + c))))
        binomial            exp(alpha (y u - N log1p(c (e^u - 1) / (1 + c)))), c = e^x

    The binomial at power 1 with whole y and N <= :data:`POWER_MAX_TRIALS` (the usual
    case): ``e^(y u) ((1 + c) / (1 + c e^u))^N`` by products (:func:`int_power`), without
    a transcendental (binomial site 0.64 -> 0.4 us, ``scripts/tilted_cost.py``).
    """
    if kind == BINOMIAL and alpha == 1.0 and extra[0] <= POWER_MAX_TRIALS \
            and y == math.floor(y) and extra[0] == math.floor(extra[0]) and y >= 0.0:
        # (an overflow of e^(y u) against an underflow of the other factor gives NaN or
        # inf, which the rule takes as "leave this node to log p")
        return int_power(eu, int(y)) * int_power((1.0 + c) / (1.0 + c * eu), int(extra[0]))
    if kind == LOGISTIC:                 # (e^u underflowing to 0: the ratio is 0)
        return (1.0 + c) / (1.0 + (c * eu if y < 0.0 else c / eu if eu > 0.0 else math.inf))
    d = c * (eu - 1.0)
    if kind == POISSON:
        a = alpha * (y * u - d)
    else:
        # log1p's argument > -1 in exact arithmetic; where rounding (e^u underflowing, a
        # c far above r or 1) takes it to -1 the node is left to log p (NaN)
        z = d / (params[0] + c) if kind == NEG_BINOMIAL else d / (1.0 + c)
        if not z > -1.0:
            return math.nan
        a = alpha * (y * u - (params[0] + y if kind == NEG_BINOMIAL else extra[0])
                     * math.log1p(z))
    # beyond float64 the node is left to log p (inf), without an overflow exception
    return math.exp(a) if a < 700.0 else math.inf
