"""Scalar log-likelihoods of the built-in likelihoods (``math`` only).

:func:`builtin_log_lik` selects one by an integer *kind*; the Gauss-Hermite
fallback calls it statically, which keeps every compiled kernel cacheable
(Numba cannot cache a kernel that receives a compiled function as a value).
Add a new built-in by giving it a kind here.
"""
from __future__ import annotations

import math

from .._jit import jit
from .._numerics import log_add_exp, log_phi

PROBIT, LOGISTIC, ANNOTATORS = 0, 1, 2


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


@jit("f8(i8, f8, f8[::1], f8, f8[::1])")
def builtin_log_lik(kind, y, extra, f, params):
    """log p(y | f) of the built-in likelihood ``kind``."""
    if kind == PROBIT:
        return probit_log_lik(y, f)
    if kind == LOGISTIC:
        return logistic_log_lik(y, f)
    if kind == ANNOTATORS:
        return annotators_log_lik(extra[0], extra[1], f)
    return math.nan
