"""Scalar log-likelihoods of the built-in likelihoods (``math`` only).

:func:`builtin_log_lik` selects one by an integer *kind*; the panel-quadrature
fallback calls it statically, which keeps every compiled kernel cacheable
(Numba cannot cache a kernel that receives a compiled function as a value).
Add a new built-in by giving it a kind here.
"""
from __future__ import annotations

import math

from .._jit import jit
from .._numerics import LOG_SQRT_2PI, log_add_exp, log_diff_exp, log_phi

PROBIT, LOGISTIC, ANNOTATORS, TOBIT = 0, 1, 2, 3


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
    return math.nan
