"""Scalar special functions for EP, written with ``math`` only.

The same Python source compiles as CPU ``njit`` functions (here) and as CUDA
device functions (:mod:`fastep.backend.cuda`), so there is one copy of the maths.

* ``log_phi(z)  = log Phi(z)``                     (log of the standard normal CDF)
* ``mills(z)    = phi(z) / Phi(z) = d log Phi / dz``  (inverse Mills ratio)
* ``mills_shift(z) = z + mills(z)`` so that ``d2 log Phi / dz2 = -mills(z) * mills_shift(z)``

All three are accurate to about 1e-14 relative on ``z`` in ``[-40, 40]`` and
finite far beyond it.  In the lower tail (``z < -5``) they use Laplace's
continued fraction for the Mills ratio,
``Phi(-x)/phi(x) = 1/(x + 1/(x + 2/(x + 3/(x + ...))))``, so that
``z + mills(z)`` is obtained from the tail of the fraction without the
catastrophic cancellation of ``z + phi/Phi`` (see Abramowitz & Stegun 26.2.14).
"""
from __future__ import annotations

import math

import numpy as np

from ._caller import user_stacklevel
from ._jit import jit

LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)
SQRT_HALF = math.sqrt(0.5)
#: Smallest variance fastep computes with: below it 1/var overflows (and derivatives in
#: var, log(var_a / var_b) lose every digit); EP refuses such variances, robust-max
#: moments are raised to it.
MIN_VARIANCE = 1e-290
_TAIL = -5.0          # below this z the continued fraction is used
_CF_TERMS = 120       # enough for 1e-16 at x = 5; converges faster further out


@jit("f8(f8)")
def cf_tail(x):
    """c(x) = 1/(x + 2/(x + 3/(x + ...))), evaluated bottom-up; meant for x >= 5."""
    c = 0.0
    for k in range(_CF_TERMS, 1, -1):
        c = k / (x + c)
    return 1.0 / (x + c)


@jit("f8(f8)")
def log_phi(z):
    """log Phi(z), the log of the standard normal CDF."""
    if z > 0.0:
        return math.log1p(-0.5 * math.erfc(z * SQRT_HALF))
    if z > _TAIL:
        return math.log(0.5 * math.erfc(-z * SQRT_HALF))
    if z != z:
        return z
    x = -z
    # Phi(z) = phi(x) / (x + c(x))
    return -0.5 * x * x - LOG_SQRT_2PI - math.log(x + cf_tail(x))


@jit("f8(f8)")
def mills(z):
    """phi(z) / Phi(z) = d log Phi(z) / dz (the inverse Mills ratio)."""
    if z > _TAIL:
        return math.exp(-0.5 * z * z - LOG_SQRT_2PI - log_phi(z))
    if z != z:
        return z
    x = -z
    return x + cf_tail(x)


@jit("f8(f8)")
def mills_shift(z):
    """z + phi(z)/Phi(z), so d2 log Phi / dz2 = -mills(z) * mills_shift(z) < 0."""
    if z > _TAIL:
        return z + mills(z)
    if z != z:
        return z
    return cf_tail(-z)


@jit("f8(f8, f8)")
def log_add_exp(a, b):
    """log(exp(a) + exp(b)) without overflow."""
    if a < b:
        a, b = b, a
    if b == -math.inf:
        return a
    return a + math.log1p(math.exp(b - a))


@jit("f8(f8, f8)")
def log_diff_exp(a, b):
    """log(exp(a) - exp(b)) for a >= b, without overflow or cancellation."""
    if b == -math.inf:
        return a
    d = b - a
    if d > -0.6931471805599453:
        return a + math.log(-math.expm1(d))
    return a + math.log1p(-math.exp(d))


@jit("f8(f8)")
def digamma(x):
    """psi(x) = d log Gamma(x) / dx for x > 0: the recurrence psi(x) = psi(x + 1) - 1/x up
    to x >= 10, then the asymptotic series
    ``log x - 1/(2x) - sum_k B_2k / (2k x^2k)`` (Abramowitz & Stegun 6.3.18), 1e-15."""
    acc = 0.0
    while x < 10.0:
        acc -= 1.0 / x
        x += 1.0
    r = 1.0 / (x * x)
    series = r * (1.0 / 12.0 - r * (1.0 / 120.0 - r * (1.0 / 252.0 - r * (
        1.0 / 240.0 - r * (1.0 / 132.0 - r * (691.0 / 32760.0 - r / 12.0))))))
    return acc + math.log(x) - 0.5 / x - series


_GH_CACHE: dict[int, tuple[np.ndarray, np.ndarray]] = {}


def gauss_hermite(n_points: int) -> tuple[np.ndarray, np.ndarray]:
    """Nodes ``x`` and weights ``w`` with ``sum(w * g(x)) ~= E[g(X)]``, ``X ~ N(0, 1)``.

    Probabilists' Gauss-Hermite rule (exact for polynomials of degree
    ``2 * n_points - 1``), weights normalised to sum to one.  Results are
    cached and returned read-only.

    Examples
    --------
    >>> x, w = gauss_hermite(20)
    >>> round(float(w @ x**2), 12)
    1.0
    """
    n_points = int(n_points)
    if n_points < 1:
        raise ValueError(f"n_points must be a positive integer; got {n_points}.")
    if n_points not in _GH_CACHE:
        x, w = np.polynomial.hermite_e.hermegauss(n_points)
        w = w / w.sum()
        x.flags.writeable = False
        w.flags.writeable = False
        _GH_CACHE[n_points] = (x, w)
    return _GH_CACHE[n_points]


#: A predictive variance written as ``prior - explained`` keeps no digit once it falls
#: below this many rounding units of the prior variance.
VARIANCE_RESOLUTION = 16.0 * np.finfo(float).eps


def predictive_variance(prior, var, xp=np):
    """The latent predictive variance ``var`` (computed as the prior variance ``prior``
    minus what the data explain) with the points where rounding left no digit, i.e.
    ``var < VARIANCE_RESOLUTION * prior``, raised to that resolution and an
    ``EPNumericalWarning`` saying so, instead of a silent 0 (or a negative value): it
    happens when the prior variance exceeds the posterior's by about 1e14 or more."""
    prior = xp.broadcast_to(xp.asarray(prior, dtype=float), var.shape)
    floor = VARIANCE_RESOLUTION * prior
    lost = var < floor
    if bool(xp.any(lost & (prior > 0.0))):
        import warnings

        from .exceptions import EPNumericalWarning
        k = int(xp.sum(lost))
        warnings.warn(
            f"the predictive variance at {k} point(s) is below the resolution of "
            f"prior - explained (prior variance up to {float(xp.max(prior[lost])):.3g}): it "
            f"is reported as {VARIANCE_RESOLUTION:.1e} x the prior variance. Scale the "
            f"kernel variance (or the targets, normalize_y=True) so that prior and "
            f"posterior variances are within about 1e14 of each other.",
            EPNumericalWarning, stacklevel=user_stacklevel())
    return xp.maximum(var, floor)
