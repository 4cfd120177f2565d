"""The fast path of the tilted moments: a trapezoid rule centred and scaled at the mode.

For a tilted density ``exp(g(f))``, ``g = alpha log p(y | f) - (f - mu)^2 / (2 var)``, that
is unimodal and smooth on the scale ``s = (-g''(mode))^(-1/2)``, the trapezoid rule on
the nodes ``mode + j h s`` (j = 0, +-1, ..., out to a drop of :data:`DROP` below the
peak) converges geometrically in 1/h: for an integrand analytic in a strip of half-width
``d`` about the real line its error is ``O(exp(-2 pi d / (h s)))`` (Trefethen & Weideman,
"The exponentially convergent trapezoidal rule", SIAM Review 2014).  So the rule with
step 2h, which is the even nodes of the rule with step h and costs nothing more, has
about the square root of the error of the step-h rule: where the two agree to
:data:`TOL` (Z, the mean and second moment about the mode, and the parameter
derivative), the step-h rule is taken (error about TOL^2).  Where they do not, the
midpoints are added once (step h / 2, checked against step h).

The rule *declines* (returns ``ok = False``, and :mod:`fastep.likelihoods._quadrature`
hands the site to its adaptive panels) where its premises fail: no strictly concave
mode found by Newton's method, a log integrand that is not decreasing away from the
mode on the nodes, a tail that has not dropped by :data:`DROP` within
:data:`MAX_NODES` nodes, a second mode at the likelihood's own peak (``LIK_PEAK``) that
the nodes do not resolve, a cavity too narrow for the mode arithmetic, or two rules
that still disagree after the refinement.  About 35-60 evaluations of the
log-likelihood instead of the panels' several hundred; where the likelihood has a
closed-form ratio ``p(y | x + u)^alpha / p(y | x)^alpha`` (``RATIO_PREP``,
``LIK_RATIO``: the logistic, Poisson, negative binomial and binomial,
:func:`fastep.likelihoods._scalar.builtin_lik_ratio`), the nodes' weights come from it and
from a recurrence for the Gaussian factor, without the exp of log p (the logistic's site
0.51 -> 0.19 us, 8.1x -> 3.4x probit; ``scripts/tilted_cost.py``).

``LIK_F(kind, y, extra, f, params)`` is the f-dependent part of log p (the rest,
``LIK_CONST(kind, y, extra, params)``, is added once), ``LIK_D2`` gives it with its first
two derivatives in f (NaN derivatives: finite differences are taken), ``DLOG_LIK`` the
derivative in ``params[k]`` and ``LIK_PEAK`` where the likelihood peaks (NaN: it is
log-concave); all are globals bound per compilation (:func:`compile_trapezoid`).
"""
from __future__ import annotations

import math
import types as types_module

import numba

#: Largest node spacing, in units of the mode's scale s.  The Gaussian factor alone leaves
#: the step-h rule an error of about exp(-2 pi^2 / h^2) (3e-35 here) and the step-2h rule
#: of the check exp(-pi^2 / (2 h^2)) (3e-9); at 0.63 (3e-22 and 4e-6) the check's
#: difference, times the likelihood's q, failed TOL on 72% of negative-binomial sites
#: and 36% of Poisson ones, which then ran the midpoints too: 0.63 -> 0.5 costs 20% more
#: nodes and removes nearly all of those (``scripts/tilted_cost.py``, 2026-12-07).
H = 0.5
#: Node spacing where the likelihood's strip of analyticity is unknown (checked strictly).
H_UNKNOWN = 0.5
#: The nodes go out until the log integrand is this far below its peak (e^-32 ~ 1e-14).
DROP = 32.0
#: ... as a weight relative to the peak's.
W_DROP = math.exp(-DROP)
#: At most this many nodes a side (the tail must drop by DROP within MAX_NODES steps).
MAX_NODES = 120
#: The step is chosen for an error of about exp(-BUDGET) of the peak's share (e^-40 ~
#: 4e-18: a margin over TOL for the constant of the estimate, so that the refinement is
#: rarely needed; at e^-36 the check asked for the midpoints on 97% of Student-t sites,
#: 49% of log-logistic and 19-21% of Poisson and Weibull ones, each costing as much again
#: as the rule).
BUDGET = 40.0
#: Largest accepted error estimate, relative (to Z, s, s^2, E|d log p / d param|).
TOL = 1e-13


def _trapezoid_source(kind, y, extra, mu, var, alpha, params, k):
    """(ok, log Z, dlogZ/dmu, d2logZ/dmu2, dlogZ/dparams[k]) by the mode-centred
    trapezoid rule; ``ok`` False where the rule declines (see the module)."""
    lik_f = LIK_F  # noqa: F821 - bound per compilation, see compile_trapezoid
    lik_d2 = LIK_D2  # noqa: F821
    dlog_lik = DLOG_LIK  # noqa: F821
    fail = (False, 0.0, 0.0, 0.0, 0.0)
    if not (var > 0.0 and math.isfinite(var) and math.isfinite(mu)):
        return fail
    # a cavity far narrower than the likelihood's features: the panels' own branch
    if var <= 1e-8 * (1.0 + abs(mu)) * (1.0 + abs(mu)):
        return fail
    # Newton ascent on g from the cavity mean, step halving keeps every step uphill
    x = mu
    lx, l1, l2 = lik_d2(kind, y, extra, x, params)
    gx = alpha * lx
    c = -1.0 / var
    done = False
    for _ in range(100):
        if not math.isfinite(lx):
            return fail
        if l1 != l1:                                   # no analytic derivatives
            hd = 1e-4 * (1.0 + abs(x))
            lp = lik_f(kind, y, extra, x + hd, params)
            lm = lik_f(kind, y, extra, x - hd, params)
            l1 = (lp - lm) / (2.0 * hd)
            l2 = (lp - 2.0 * lx + lm) / (hd * hd)
        d = alpha * l1 - (x - mu) / var
        c = alpha * l2 - 1.0 / var
        step = -d / c if c < 0.0 else d * var
        if c < 0.0 and abs(step) * math.sqrt(-c) <= 1e-5:
            # within 1e-5 s of the mode: the Newton step lands within ~1e-10 s of it (the
            # nodes only need a centre near the mode; the moments do not depend on it)
            x += step
            lx, l1, l2 = lik_d2(kind, y, extra, x, params)
            gx = alpha * lx - 0.5 * (x - mu) * (x - mu) / var
            if l1 == l1:
                c = alpha * l2 - 1.0 / var
            done = math.isfinite(gx)
            break
        accepted = False
        for _ in range(60):
            xn = x + step
            ln, l1n, l2n = lik_d2(kind, y, extra, xn, params)
            gn = alpha * ln - 0.5 * (xn - mu) * (xn - mu) / var
            if math.isfinite(gn) and gn >= gx:
                accepted = True
                break
            step *= 0.5
        if not accepted:
            break
        x, lx, l1, l2, gx = xn, ln, l1n, l2n, gn
    if not (done and c < 0.0):
        return fail
    s = math.sqrt(-1.0 / c)
    off = x - mu
    top = gx
    # The step from the strip |Im f| < d where log p is analytic: the error of the rule
    # with step hs is about exp(omega - 2 pi d / hs), omega the log integrand (relative
    # to the peak) at the singularity's real part c plus the Gaussian's growth d^2/(2 var)
    # towards it; the step-2h rule's error is then the step-h rule's times
    # q = exp(-pi d / hs), which turns the difference of the two rules into an estimate of
    # the step-h rule's error.  Unknown d: the difference itself is the estimate.
    strip, cs, order = LIK_STRIP(kind, y, extra, params)  # noqa: F821
    hs = H_UNKNOWN * s
    q = 1.0
    if strip == math.inf:
        hs = H * s
        q = 0.0
    elif strip > 0.0:
        omega = 0.0
        if cs == cs:
            dcs = cs - mu
            omega = (alpha * lik_f(kind, y, extra, cs, params) - 0.5 * dcs * dcs / var - top
                     + 0.5 * strip * strip / var)
            omega = min(max(omega, -BUDGET + 5.0), 10.0)
        hs = min(H * s, 2.0 * math.pi * strip / (BUDGET + omega))
        # a pole of order p adds a factor (2 pi d / h)^(p - 1) to the error, so halving
        # the step gains 2^(p - 1) less (at most 2^16 counted: beyond, the pole is far in
        # units of h and its share negligible)
        q = math.exp(-math.pi * strip / hs
                     + min(max(alpha * order - 1.0, 0.0), 16.0) * math.log(2.0))
    # sums over all nodes (step h) and over the even ones (step 2h): weight, u, u^2,
    # the parameter derivative and its absolute value (the scale of its check)
    gk = dlog_lik(kind, y, extra, x, params, k) if k >= 0 else 0.0
    a0, a1, a2, ag, aa = 1.0, 0.0, 0.0, gk, abs(gk)
    e0, e1, e2, eg = 1.0, 0.0, 0.0, gk
    # the weights exp(v) without an exp of log p where the likelihood has a closed-form
    # ratio p(y | x + u)^alpha / p(y | x)^alpha (RATIO_PREP not NaN): the ratio times the
    # Gaussian factor exp(-(2 off u + u^2) / (2 var)), which a recurrence of two products
    # per node gives (the factor's largest value, exp(off^2 / (2 var)), is kept far from
    # overflow); e^u by a recurrence too.  A weight outside [0, 1] (an overflow of one
    # factor) is taken again from v.
    c_prep = RATIO_PREP(kind, y, extra, params, alpha, x)  # noqa: F821
    fast = c_prep == c_prep and off * off < 1200.0 * var
    g_q = g_q2 = e_step = 1.0          # (q is the error estimate's factor, above)
    if fast:
        g_q = math.exp(-0.5 * hs * hs / var)
        g_q2 = g_q * g_q
        e_step = math.exp(hs)
    lo = 0
    hi = 0
    for side in (1, -1):
        prev = 1.0
        gauss, grow, eu = 1.0, 1.0, 1.0
        eu_step = e_step if side == 1 else 1.0 / e_step
        if fast:
            grow = math.exp(-side * off * hs / var) * g_q
        j = 1
        while True:
            if j > MAX_NODES:
                return fail
            u = side * j * hs
            w = -1.0
            if fast:
                gauss *= grow
                grow *= g_q2
                eu *= eu_step
                w = LIK_RATIO(kind, y, extra, params, alpha, c_prep, u, eu) * gauss  # noqa: F821
            if not (0.0 <= w <= 1.0 + 1e-9):
                dc = off + u
                v = alpha * lik_f(kind, y, extra, x + u, params) - 0.5 * dc * dc / var - top
                if v != v:
                    return fail
                w = math.exp(v)
            if w > prev * (1.0 + 1e-9):
                return fail
            gk = dlog_lik(kind, y, extra, x + u, params, k) if k >= 0 else 0.0
            a0 += w
            a1 += w * u
            a2 += w * u * u
            ag += w * gk
            aa += w * abs(gk)
            if j % 2 == 0:
                e0 += w
                e1 += w * u
                e2 += w * u * u
                eg += w * gk
            if w < W_DROP:
                break
            prev = w
            j += 1
        if side == 1:
            hi = j
        else:
            lo = j
    # the likelihood's own peak (not log-concave): resolved by the nodes, or negligible
    peak = LIK_PEAK(kind, y, extra, params)  # noqa: F821
    if math.isfinite(peak):
        up = (peak - x) / hs
        dp = peak - mu
        vp = alpha * lik_f(kind, y, extra, peak, params) - 0.5 * dp * dp / var - top
        if -lo < up < hi:
            jl = math.floor(up)
            ul, ur = jl * hs, (jl + 1.0) * hs
            vl = (alpha * lik_f(kind, y, extra, x + ul, params)
                  - 0.5 * (off + ul) * (off + ul) / var - top)
            vr = (alpha * lik_f(kind, y, extra, x + ur, params)
                  - 0.5 * (off + ur) * (off + ur) / var - top)
            if not vp <= max(vl, vr) + 0.05:
                return fail
        elif not vp < -DROP:
            return fail
    # the step-h rule's error estimate; once more with the midpoints (step h / 2) if it
    # is too large
    step_w = hs
    for level in range(2):
        # (q = 0: an entire log p, whose step-2h error is about the step-h error's
        # square root at most; the difference times itself bounds it)
        qe = q if q > 0.0 else abs(a0 - 2.0 * e0) / a0
        if (abs(a0 - 2.0 * e0) * qe <= TOL * a0
                and abs(a1 / a0 - e1 / e0) * qe <= TOL * s
                and abs(a2 / a0 - e2 / e0) * qe <= TOL * s * s
                and abs(ag / a0 - eg / e0) * qe <= TOL * (aa / a0) + 1e-300):
            break
        if level == 1:
            return fail
        b0, b1, b2, bg, ba = 0.0, 0.0, 0.0, 0.0, 0.0
        for jj in range(-lo, hi):
            u = (jj + 0.5) * hs
            dc = off + u
            v = alpha * lik_f(kind, y, extra, x + u, params) - 0.5 * dc * dc / var - top
            if v != v or v > 1e-9:
                return fail
            w = math.exp(v)
            gk = dlog_lik(kind, y, extra, x + u, params, k) if k >= 0 else 0.0
            b0 += w
            b1 += w * u
            b2 += w * u * u
            bg += w * gk
            ba += w * abs(gk)
        # the old step-h sums become the check ("e", in half-step units: 2e0 ~ a0)
        e0, e1, e2, eg = a0, a1, a2, ag
        a0, a1, a2, ag, aa = a0 + b0, a1 + b1, a2 + b2, ag + bg, aa + ba
        step_w = 0.5 * hs
        q = q * q
    shift = a1 / a0
    var_t = max(a2 / a0 - shift * shift, 0.0)
    log_z = (top + alpha * LIK_CONST(kind, y, extra, params)  # noqa: F821
             + math.log(a0 * step_w) - 0.5 * math.log(2.0 * math.pi * var))
    return (True, log_z, (off + shift) / var, (var_t - var) / (var * var),
            alpha * ag / a0)


@numba.njit
def _no_ratio_prep(kind, y, extra, params, alpha, x):
    return math.nan


@numba.njit
def _no_ratio(kind, y, extra, params, alpha, c, u, eu):
    return math.nan


def compile_trapezoid(lik_f, lik_d2, lik_const, dlog_lik, lik_peak, lik_strip,
                      ratio_prep=_no_ratio_prep, lik_ratio=_no_ratio, **options):
    """Compile :func:`_trapezoid_source` with its globals bound to these functions
    (``ratio_prep`` and ``lik_ratio``: the likelihood's closed-form ratio of the weights,
    as :func:`fastep.likelihoods._scalar.builtin_lik_ratio`; by default none)."""
    glb = dict(_trapezoid_source.__globals__, LIK_F=lik_f, LIK_D2=lik_d2,
               LIK_CONST=lik_const, DLOG_LIK=dlog_lik, LIK_PEAK=lik_peak,
               LIK_STRIP=lik_strip, RATIO_PREP=ratio_prep, LIK_RATIO=lik_ratio)
    fn = types_module.FunctionType(_trapezoid_source.__code__, glb, "trapezoid_moments")
    fn.__qualname__ = "trapezoid_moments"
    return numba.njit(error_model="numpy", **options)(fn)
