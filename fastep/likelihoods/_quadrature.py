"""The tilted moments of likelihoods without a closed form.

Two rules, one compiled function (:data:`quad_moments`) per log-likelihood:

* the fast path, a trapezoid rule centred and scaled at the tilted mode
  (:mod:`fastep.likelihoods._trapezoid`; about 30-60 log-likelihood evaluations), taken
  where its premises hold and its error estimate is below 1e-13 relative;
* the reference and fallback, the adaptive panel quadrature below (:func:`_panel_source`,
  several hundred evaluations): the tilted density ``p(y | f)^alpha N(f | mu_cav,
  var_cav)`` is integrated in the log domain, centred at its mode (Newton steps) and
  scaled by its curvature ``s``, then integrated outwards with 10-point Gauss-Legendre
  rules on panels whose widths follow the local slope and curvature of the log integrand
  (at most a few e-folds per panel), until it has fallen 42 below its peak.  A plain
  Gauss-Hermite rule, centred on the cavity or on the mode, fails when the likelihood
  changes on a scale far smaller than the cavity (a step-like logistic under a cavity of
  variance 1e4 loses several per cent); the panels follow both scales.

One source (:func:`_quad_source`) is compiled for each log-likelihood
(:func:`_compile_quad`): the built-in ones (:data:`quad_moments`; :data:`panel_moments` is
the panels alone, the fast path's reference in the tests and ``scripts/tilted_cost.py``),
a :class:`~fastep.likelihoods.CustomLikelihood`'s, and their GPU twins.
"""
from __future__ import annotations

import math
import types as types_module

import numba
import numpy as np
from numba import njit, prange, types

from .._jit import f8, f8_1d, pjit
from ._scalar import (builtin_dlog_lik, builtin_lik_const, builtin_lik_d2, builtin_lik_f,
                      builtin_lik_ratio, builtin_log_lik, builtin_peak, builtin_ratio_prep,
                      builtin_strip)
from ._trapezoid import compile_trapezoid

_LEGENDRE = np.polynomial.legendre.leggauss(10)
# tuples, not arrays: Numba freezes them as constants, so the kernels stay cacheable
_GL_X = tuple(float(v) for v in 0.5 * (_LEGENDRE[0] + 1.0))     # nodes on [0, 1]
_GL_W = tuple(float(v) for v in 0.5 * _LEGENDRE[1])
_DROP = 42.0            # stop once the log integrand is this far below its peak
_MAX_PANELS = 200       # per side


def _panel_source(kind, y, extra, mu, var, alpha, params, k):
    """(log Z, dlogZ/dmu, d2logZ/dmu2, dlogZ/dparams[k]) of
    ``Z = int exp(alpha*LOG_LIK(...)) N(f|mu,var) df``.

    ``LOG_LIK(kind, y, extra, f, params)`` and ``DLOG_LIK(kind, y, extra, f, params, k)``
    (d log p / d params[k]) are *globals* of this source: the built-in version binds them
    to :func:`builtin_log_lik` and :func:`builtin_dlog_lik`;
    :class:`~fastep.likelihoods.CustomLikelihood` recompiles the same source with the
    user's function bound instead.  The parameter
    derivative is ``alpha E_tilted[d log p / d params[k]]`` (differentiation under the
    integral), accumulated on the same nodes; ``k < 0`` skips it (returns 0).
    Moments come from one streaming pass (log-sum-exp with running rescaling,
    weighted moments about the mode), without allocation.
    """
    log_lik = LOG_LIK  # noqa: F821 - bound per compilation, see _compile_quad
    dlog_lik = DLOG_LIK  # noqa: F821
    # A cavity far narrower than the likelihood's features (e.g. a latent with zero prior
    # variance), where the quadrature's (mode - mu) / var would lose every digit: its sd
    # below h / 100 (h = 1e-4 (1 + |mu|)), g = alpha log_lik quadratic on mu +- h (central
    # differences at steps h and h / 2 agree; g' from Richardson's combination of the two,
    # g'' from step h, whose rounding error is the smaller), and the tilted mean within
    # h / 100 of mu.  Then, with c = 1 - var g'', the
    # Gaussian integral of the local quadratic gives log Z = g + var g'^2 / (2 c)
    # - log(c) / 2, d1 = g' / c, d2 = g'' / c.
    h = 1e-4 * (1.0 + abs(mu))
    if var <= 1e-4 * h * h:
        l0 = alpha * log_lik(kind, y, extra, mu, params)
        lp = alpha * log_lik(kind, y, extra, mu + h, params)
        lm = alpha * log_lik(kind, y, extra, mu - h, params)
        lp2 = alpha * log_lik(kind, y, extra, mu + 0.5 * h, params)
        lm2 = alpha * log_lik(kind, y, extra, mu - 0.5 * h, params)
        if (math.isfinite(l0) and math.isfinite(lp) and math.isfinite(lm)
                and math.isfinite(lp2) and math.isfinite(lm2)):
            a1, a2 = (lp - lm) / (2.0 * h), (lp2 - lm2) / h
            b1, b2 = (lp - 2.0 * l0 + lm) / (h * h), 4.0 * (lp2 - 2.0 * l0 + lm2) / (h * h)
            a = (4.0 * a2 - a1) / 3.0
            b = b1
            c = 1.0 - var * b
            if (abs(b1 - b2) <= 1e-4 * abs(b) + 1e-8 / (h * h)
                    and abs(a1 - a2) <= 1e-4 * abs(a) + 1e-8 / h
                    and c >= 0.5 and var * abs(a) <= 0.01 * h * c):
                mg = alpha * dlog_lik(kind, y, extra, mu, params, k) if k >= 0 else 0.0
                return l0 + 0.5 * var * a * a / c - 0.5 * math.log(c), a / c, b / c, mg
    # Local modes of g(f) = alpha*log_lik(f) - (f - mu)^2 / (2 var) by Newton ascent with
    # step halving (every accepted step raises g, so huge curvatures such as exp(f) of a
    # Poisson far from its count cannot make it oscillate), derivatives of log_lik by
    # central differences (they only place the panels).  It starts from the cavity mean
    # and, where LIK_PEAK gives one (likelihoods that are not log-concave), also from the
    # likelihood's own peak: the higher mode centres the panels and the scan on the other
    # mode's side goes on at least past it.
    peak = LIK_PEAK(kind, y, extra, params)  # noqa: F821
    f = mu
    g2 = -1.0 / var
    g_top = -math.inf
    other = math.nan
    for start in range(2):
        x = mu if start == 0 else peak
        if start == 1 and not math.isfinite(peak):
            break
        lx = log_lik(kind, y, extra, x, params)
        gx = alpha * lx - 0.5 * (x - mu) * (x - mu) / var
        c = -1.0 / var
        for _ in range(200):
            h = 1e-4 * (1.0 + abs(x))
            lp = log_lik(kind, y, extra, x + h, params)
            lm = log_lik(kind, y, extra, x - h, params)
            if not (math.isfinite(lp) and math.isfinite(lx) and math.isfinite(lm)):
                c = -1.0 / var
                break
            d = alpha * (lp - lm) / (2.0 * h) - (x - mu) / var
            c = alpha * (lp - 2.0 * lx + lm) / (h * h) - 1.0 / var
            if not c < 0.0:
                c = -1.0 / var
            step = -d / c
            accepted = False
            for _ in range(80):
                xn = x + step
                ln = log_lik(kind, y, extra, xn, params)
                gn = alpha * ln - 0.5 * (xn - mu) * (xn - mu) / var
                if math.isfinite(gn) and not gn < gx:        # gx may be -inf or NaN
                    accepted = True
                    break
                step *= 0.5
            if not accepted:
                break
            x, lx, gx = xn, ln, gn
            if abs(step) <= 1e-12 * (1.0 + abs(x)) or abs(step) * math.sqrt(-c) <= 1e-7:
                break
        if gx > g_top:
            if start == 1:
                other = f
            f = x
            g2 = c
            g_top = gx
        elif start == 1:
            other = x
    s = math.sqrt(-1.0 / g2)
    off = f - mu                      # mode - mu, so f - mu = off + u is cancellation-free
    top = -math.inf
    w_sum = 0.0
    m1 = 0.0
    m2 = 0.0
    mg = 0.0
    # alpha * log_lik at the mode and +- h: the start of each side's first panel
    h = 1e-4 * (1.0 + abs(f))
    mode_p = alpha * log_lik(kind, y, extra, f + h, params)
    mode_0 = alpha * log_lik(kind, y, extra, f, params)
    mode_m = alpha * log_lik(kind, y, extra, f - h, params)
    for side in (1.0, -1.0):
        u0 = 0.0                                                # panel start, f - mode
        width = s
        # the other local mode, if it lies on this side: the scan does not stop before it
        beyond = side * (other - f) if other == other else -1.0
        # alpha * log_lik at the panel start and +- h there (h = 1e-4 (1 + |start|)): the
        # previous panel's end values, which are taken at the same points
        lp, l0, lm, known = mode_p, mode_0, mode_m, True
        for _ in range(_MAX_PANELS):
            # Panel width from the local slope and curvature of the log integrand: it
            # changes by at most ~5 e-folds (slope) or ~4 (curvature) per panel; at most
            # twice the last panel, so widths grow back after a narrow feature (a spike
            # of the likelihood inside a wide cavity).
            fc = f + side * u0
            h = 1e-4 * (1.0 + abs(fc))
            if not known:
                lp = alpha * log_lik(kind, y, extra, fc + h, params)
                l0 = alpha * log_lik(kind, y, extra, fc, params)
                lm = alpha * log_lik(kind, y, extra, fc - h, params)
            dc = off + side * u0
            d1 = side * ((lp - lm) / (2.0 * h) - dc / var)           # slope outwards
            c2 = (lp - 2.0 * l0 + lm) / (h * h) - 1.0 / var
            d2 = abs(c2)
            width = max(s, 2.0 * width)
            if d1 * d1 * width * width > 25.0:
                width = 5.0 / abs(d1)
            if d2 * width * width > 4.0:
                width = 2.0 / math.sqrt(d2)
            # ... and halve it until, at the panel's end, the log integrand is within
            # a quarter e-fold of its local quadratic model and within 8 of its start
            # value, and its curvature has changed little across the panel (catches
            # an edge of the likelihood that the start point cannot see).
            g0 = l0 - 0.5 * dc * dc / var
            known = False
            for _ in range(60):
                fe = f + side * (u0 + width)
                de = off + side * (u0 + width)
                he = 1e-4 * (1.0 + abs(fe))
                le = alpha * log_lik(kind, y, extra, fe, params)
                lep = alpha * log_lik(kind, y, extra, fe + he, params)
                lem = alpha * log_lik(kind, y, extra, fe - he, params)
                ce = (lep + lem - 2.0 * le) / (he * he)
                ge = le - 0.5 * de * de / var
                model = g0 + d1 * width + 0.5 * c2 * width * width
                smooth = abs(ce - 1.0 / var - c2) * width * width <= 0.25
                if ((smooth and abs(ge - model) <= 0.25 and abs(ge - g0) <= 8.0)
                        or not width > 1e-12 * s):
                    lp, l0, lm, known = lep, le, lem, True
                    break
                width *= 0.5
            end_val = -math.inf
            for node in range(len(_GL_X)):
                u = side * (u0 + width * _GL_X[node])              # f - mode
                d = off + u                                     # f - mu
                val = (alpha * log_lik(kind, y, extra, f + u, params)
                       - 0.5 * d * d / var)
                end_val = val
                val += math.log(_GL_W[node] * width)
                if not val > -math.inf:
                    continue
                if val > top:
                    scale = math.exp(top - val)
                    w_sum *= scale
                    m1 *= scale
                    m2 *= scale
                    mg *= scale
                    top = val
                w = math.exp(val - top)
                w_sum += w
                m1 += w * u
                m2 += w * u * u
                if k >= 0:
                    mg += w * dlog_lik(kind, y, extra, f + u, params, k)
            u0 += width
            # what is left beyond is about end value x local width (the panel's, or s)
            if not end_val + math.log(max(s, width)) > top - _DROP and u0 > beyond:
                break
    if not w_sum > 0.0:
        return -math.inf, 0.0, 0.0, 0.0
    log_z = top + math.log(w_sum) - 0.5 * math.log(2.0 * math.pi * var)
    shift = m1 / w_sum
    var_t = max(m2 / w_sum - shift * shift, 0.0)       # a variance, so d2 >= -1/var
    return log_z, (off + shift) / var, (var_t - var) / (var * var), alpha * mg / w_sum


@njit
def _no_dlog_lik(kind, y, extra, f, params, k):
    return 0.0


@njit
def _no_peak(kind, y, extra, params):
    return math.nan


@njit
def _peak_at_target(kind, y, extra, params):
    return y


def _quad_source(kind, y, extra, mu, var, alpha, params, k):
    """The tilted moments as :func:`_panel_source` returns them: the mode-centred
    trapezoid rule of :mod:`fastep.likelihoods._trapezoid` where it accepts the site,
    the panels where it declines."""
    ok, log_z, d1, d2, mg = FAST(kind, y, extra, mu, var, alpha, params, k)  # noqa: F821
    if ok:
        return log_z, d1, d2, mg
    return PANELS(kind, y, extra, mu, var, alpha, params, k)  # noqa: F821


def _bind(source, name, options, **bound):
    glb = dict(source.__globals__, **bound)
    fn = types_module.FunctionType(source.__code__, glb, name)
    fn.__qualname__ = name
    return numba.njit(error_model="numpy", **options)(fn)


def _no_d2_source(kind, y, extra, f, params):
    return LOG_LIK(kind, y, extra, f, params), math.nan, math.nan  # noqa: F821


@njit
def _zero_const(kind, y, extra, params):
    return 0.0


@njit
def _no_strip(kind, y, extra, params):
    return math.nan, math.nan, 1.0


def _compile_quad(log_lik, dlog_lik=_no_dlog_lik, lik_peak=_no_peak, lik_f=None, lik_d2=None,
                  lik_const=None, lik_strip=_no_strip, fast=True, ratio=None, **options):
    """Compile the tilted moments of one log-likelihood: :func:`_panel_source` with
    ``LOG_LIK``, ``DLOG_LIK``, ``LIK_PEAK`` bound to ``log_lik``, ``dlog_lik``, ``lik_peak``
    (``lik_peak(kind, y, extra, params)``: where the likelihood peaks in f, a second start
    for the mode search, or NaN for none), behind the trapezoid fast path
    (:func:`fastep.likelihoods._trapezoid.compile_trapezoid`; ``lik_f``, ``lik_d2``,
    ``lik_const`` split log p into its f-dependent part, with derivatives, and the rest;
    by default all of log p, derivatives by finite differences; ``ratio``: the pair
    ``(ratio_prep, lik_ratio)`` of a closed-form likelihood ratio for the rule's weights,
    or None).  ``fast=False``: the panels alone (the reference)."""
    panels = _bind(_panel_source, "panel_moments", options, LOG_LIK=log_lik,
                   DLOG_LIK=dlog_lik, LIK_PEAK=lik_peak)
    if not fast:
        return panels
    if lik_f is None:
        lik_f = log_lik
        lik_d2 = _bind(_no_d2_source, "lik_d2", options, LOG_LIK=log_lik)
        lik_const = _zero_const
    trap = compile_trapezoid(lik_f, lik_d2, lik_const, dlog_lik, lik_peak, lik_strip,
                             *(ratio or ()), **options)
    return _bind(_quad_source, "quad_moments", options, FAST=trap, PANELS=panels)


#: Tilted moments (and one parameter derivative) of the built-in log-likelihood ``kind``.
quad_moments = _compile_quad(builtin_log_lik, builtin_dlog_lik, builtin_peak,
                             lik_f=builtin_lik_f, lik_d2=builtin_lik_d2,
                             lik_const=builtin_lik_const, lik_strip=builtin_strip,
                             ratio=(builtin_ratio_prep, builtin_lik_ratio), cache=True)
#: The same by the adaptive panels alone: the reference of the fast path.
panel_moments = _compile_quad(builtin_log_lik, builtin_dlog_lik, builtin_peak, fast=False,
                              cache=True)


@njit(cache=True, error_model="numpy")
def quad_tilted(kind, y, extra, mu, var, alpha, params):
    log_z, d1, d2, _ = quad_moments(kind, y, extra, mu, var, alpha, params, -1)
    return log_z, d1, d2


quad_tilted.__doc__ = """Tilted moments of the built-in log-likelihood ``kind`` (see
:mod:`fastep.likelihoods._scalar`) by the panel quadrature described in this module:
``quad_tilted(kind, y, extra, mu, var, alpha, params) -> (log Z, dlogZ/dmu, d2logZ/dmu2)``.

Examples
--------
>>> import numpy as np
>>> from fastep.likelihoods import Probit
>>> from fastep.likelihoods._scalar import PROBIT
>>> quad = quad_tilted(PROBIT, 1.0, np.zeros(0), 0.3, 2.0, 1.0, np.zeros(0))
>>> exact = Probit.scalar_tilted(1.0, np.zeros(0), 0.3, 2.0, 1.0, np.zeros(0))
>>> bool(np.allclose(quad, exact, rtol=1e-10))
True
"""


@pjit(types.void(types.int64, f8_1d, f8[:, ::1], f8_1d, f8_1d, f8, f8_1d, types.int64, f8_1d))
def quad_dparam_batch(kind, y, extra, mu, var, alpha, params, k, out):
    """``out[i] = d log Z_i / d params[k]`` of the built-in likelihood ``kind`` by the panel
    quadrature (``alpha E_tilted[d log p / d params[k]]``); each iteration owns index i."""
    for i in prange(y.shape[0]):
        out[i] = quad_moments(kind, y[i], extra[i], mu[i], var[i], alpha, params, k)[3]


class QuadratureParams:
    """Mixin: ``tilted_dparams`` of a built-in likelihood from :data:`quad_kind`, by
    differentiation under the integral (:func:`quad_dparam_batch`), at any alpha."""

    quad_kind = -1

    def tilted_dparams(self, y, mu_cav, var_cav, extra=None, alpha=1.0):
        """d log Z_i / d log(param) for every free parameter, shape (n, n_dims).

        Parameters
        ----------
        y : float or array_like of shape (n,)
            Targets.
        mu_cav : array_like of shape (n,)
            Cavity means.
        var_cav : float or array_like of shape (n,)
            Cavity variances.
        extra : array_like of shape (n, n_extra) or None, default None
            Per-site extra columns; None: this likelihood's own (``site_extra``).
        alpha : float, default 1.0
            The power of Power EP, in (0, 1].
        """
        y, mu, var = self._site_arrays(y, mu_cav, var_cav)
        n = mu.shape[0]
        extra = self.check_extra(extra, n)
        params = self.params
        out = np.empty((n, self.n_dims))
        col = np.empty(n)
        for j, name in enumerate(self._free()):
            k = self.param_names.index(name)
            quad_dparam_batch(self.quad_kind, y, extra, mu, var, float(alpha), params, k, col)
            out[:, j] = col * params[k]
        return out
