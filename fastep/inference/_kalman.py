"""Compiled Kalman filter and RTS smoother of a state-space GP prior
(:mod:`fastep.kernels.statespace`: block diagonal, one block per term, each the Kronecker
product of its Matern, periodic and constant factors, observed through ``f = H x``), with
EP sites as Gaussian pseudo-observations (:mod:`fastep.inference.markov_ep`).

Site i, ``exp(-tau_i f^2 / 2 + nu_i f)``, updates the predicted state N(m, P) with
``s = H P H^T``, ``d = 1 + tau s`` and ``g = P H^T``::

    m <- m + g (nu - tau H m) / d,      P <- P - tau g g^T / d,

and contributes ``-log(d) / 2 + (2 nu H m - tau (H m)^2 + nu^2 s) / (2 d)`` to the log of
``int p(f) prod_i site_i(f_i) df`` (a site with tau = nu = 0 contributes nothing).  The
backward pass recomputes each step's prediction instead of storing it (memory: the
filtered means and covariances, n (D + D^2) numbers, and on irregular times each step's
transition, 2 n D^2 more).  Independent series (ragged, given by their start offsets) run
in parallel, one ``prange`` iteration each.  The transitions A(dt), Q(dt) come from
:mod:`fastep.inference._transitions`; a model of two states (a Matern-3/2, the commonest)
predicts and smooths in scalars.
"""
from __future__ import annotations

import math

import numpy as np
from numba import prange

from .._jit import jit, pjit
from .._sites import cavity, damped_site
from ._transitions import BLAS_STATES, _held, _sandwich_add, _slot


@jit
def _solve(M, B, X, W):
    """X = M^-1 B for a D x D M (Gaussian elimination with partial pivoting, LAPACK's
    from :data:`BLAS_STATES` states; W: scratch copy of M)."""
    D = M.shape[0]
    if D >= BLAS_STATES:
        X[:, :] = np.linalg.solve(M, B)
        return
    for r in range(D):
        for q in range(D):
            W[r, q] = M[r, q]
            X[r, q] = B[r, q]
    for c in range(D):
        p = c
        for r in range(c + 1, D):
            if abs(W[r, c]) > abs(W[p, c]):
                p = r
        if p != c:
            for q in range(D):
                W[c, q], W[p, q] = W[p, q], W[c, q]
                X[c, q], X[p, q] = X[p, q], X[c, q]
        for r in range(c + 1, D):
            f = W[r, c] / W[c, c]
            for q in range(c, D):
                W[r, q] -= f * W[c, q]
            for q in range(D):
                X[r, q] -= f * X[c, q]
    for r in range(D - 1, -1, -1):
        for q in range(D):
            acc = X[r, q]
            for x in range(r + 1, D):
                acc -= W[r, x] * X[x, q]
            X[r, q] = acc / W[r, r]


@jit
def _series(t, tau, nu, kind, order, rate, fstart, sstart, Pinf, h, mf, Pf, mean, var,
            smooth, As_all, Qs_all):
    """Filter and (``smooth``) smooth one series (sorted times t); returns the log
    normaliser log int p(f) prod_i site_i(f_i) df and (``smooth``) writes the filtered
    moments into mf, Pf and the marginals into mean, var (the filter alone reads only
    mf's width D: one row will do).  The transitions come from ``As_all[i], Qs_all[i]``
    (the step into row i, :func:`~fastep.inference._transitions.step_transitions`)
    where those hold a row per point; else the last two distinct steps' are kept
    (:func:`~fastep.inference._transitions._slot`), so a regular grid computes one, and
    a grid with every k-th point held out (steps 1 and 2 in turn) two, not one per
    point."""
    n = t.shape[0]
    D = mf.shape[1]
    cached = As_all.shape[0] == n
    As, Qs = np.zeros((2, D, D)), np.zeros((2, D, D))
    dts = np.full(2, math.nan)
    used = 1
    W1, W2, L, P = np.zeros((D, D)), np.zeros((D, D)), np.zeros((D, D)), Pinf.copy()
    W3 = np.zeros((D, D))
    m, mp, g = np.zeros(D), np.zeros(D), np.zeros(D)
    log_norm = 0.0
    for i in range(n):
        if i > 0:
            if cached:
                A, Q = As_all[i], Qs_all[i]
            else:
                dt = t[i] - t[i - 1]
                k = _held(dt, dts)
                used = k if k >= 0 else _slot(dt, dts, used, As, Qs, kind, order, rate,
                                              fstart, sstart, Pinf, W1, W2, W3)
                A, Q = As[used], Qs[used]
            if D == 2:
                _predict2(A, Q, m, P)
            else:
                for r in range(D):
                    acc = 0.0
                    for x in range(D):
                        acc += A[r, x] * m[x]
                    mp[r] = acc
                m[:] = mp
                _sandwich_add(A, P, W1, P, Q, 1.0, 0, D)
        # g = P H^T, s = H P H^T, hm = H m
        hm = _h_vec(m, h)
        for r in range(D):
            acc = 0.0
            for x in range(D):
                acc += P[r, x] * h[x]
            g[r] = acc
        s = _h_vec(g, h)
        d = 1.0 + tau[i] * s
        # d < 0 is a valid intermediate step where a site of negative precision (a
        # Student-t outlier) outweighs the prediction from the earlier points alone; the
        # product of all the steps' factors, and so the log normaliser, stays right
        log_norm += -0.5 * math.log(abs(d)) + (2.0 * nu[i] * hm - tau[i] * hm * hm
                                               + nu[i] * nu[i] * s) / (2.0 * d)
        step = (nu[i] - tau[i] * hm) / d
        shrink = tau[i] / d
        for r in range(D):
            m[r] += g[r] * step
        for r in range(D):
            for q in range(r + 1):
                v = P[r, q] - g[r] * g[q] * shrink
                P[r, q] = v
                P[q, r] = v
        if smooth:                 # (the filter alone keeps nothing per point)
            mf[i] = m
            Pf[i] = P
    if not smooth:
        return log_norm
    # RTS smoother, backwards: G = Pf A^T Pp^-1 from Pp G^T = A Pf
    ms, Ps = mf[n - 1].copy(), Pf[n - 1].copy()
    mean[n - 1] = _h_vec(ms, h)
    var[n - 1] = _h_mat(Ps, h)
    B, Gt, Pp, Dm = np.zeros((D, D)), np.zeros((D, D)), np.zeros((D, D)), np.zeros((D, D))
    G = np.zeros((D, D))
    for i in range(n - 2, -1, -1):
        if cached:
            A, Q = As_all[i + 1], Qs_all[i + 1]
        else:
            dt = t[i + 1] - t[i]
            k = _held(dt, dts)
            used = k if k >= 0 else _slot(dt, dts, used, As, Qs, kind, order, rate, fstart,
                                          sstart, Pinf, W1, W2, W3)
            A, Q = As[used], Qs[used]
        if D == 2:
            _rts_step2(A, Q, mf, Pf, i, ms, Ps)
            mean[i] = h[0] * ms[0] + h[1] * ms[1]
            var[i] = h[0] * h[0] * Ps[0, 0] + 2.0 * h[0] * h[1] * Ps[0, 1] + \
                h[1] * h[1] * Ps[1, 1]
            continue
        Pfi = Pf[i]
        # mp = A mf_i; B = A Pf_i and Pp = B A^T + Q (the sandwich's W is B)
        for r in range(D):
            acc = 0.0
            for x in range(D):
                acc += A[r, x] * mf[i, x]
            mp[r] = acc
        _sandwich_add(A, Pfi, B, Pp, Q, 1.0, 0, D)
        # Gt = Pp^-1 B by Gaussian elimination with partial pivoting: Pp can be
        # indefinite after a site of negative precision (see the filter)
        _solve(Pp, B, Gt, L)
        # ms = mf + G (ms - mp); Ps = Pf + G (Ps - Pp) G^T
        for r in range(D):
            g[r] = ms[r] - mp[r]
        for r in range(D):
            acc = mf[i, r]
            for x in range(D):
                acc += Gt[x, r] * g[x]
            ms[r] = acc
        # Ps = Pf + G (Ps - Pp) G^T
        for r in range(D):
            for q in range(D):
                Dm[r, q] = Ps[r, q] - Pp[r, q]
                G[r, q] = Gt[q, r]
        _sandwich_add(G, Dm, W1, Ps, Pfi, 1.0, 0, D)
        mean[i] = _h_vec(ms, h)
        var[i] = _h_mat(Ps, h)
    return log_norm


@jit(inline="always")
def _predict2(A, Q, m, P):
    """The filter's prediction ``m <- A m``, ``P <- A P A^T + Q`` for a model of two
    states, in scalars (as :func:`_rts_step2`): the arithmetic of ``_sandwich_add``'s
    two-state block, inlined here because that call, not inlined, cost more than it
    (filter 0.09 -> 0.04 us a point at n = 10^5; inlining ``_sandwich_add`` itself gained
    less and added 3 s of compilation)."""
    a00, a01, a10, a11 = A[0, 0], A[0, 1], A[1, 0], A[1, 1]
    m0, m1 = m[0], m[1]
    m[0] = a00 * m0 + a01 * m1
    m[1] = a10 * m0 + a11 * m1
    p00, p01, p11 = P[0, 0], P[0, 1], P[1, 1]
    w00 = a00 * p00 + a01 * p01
    w01 = a00 * p01 + a01 * p11
    w10 = a10 * p00 + a11 * p01
    w11 = a10 * p01 + a11 * p11
    o10 = Q[1, 0] + w10 * a00 + w11 * a01
    P[0, 0] = Q[0, 0] + w00 * a00 + w01 * a01
    P[1, 0] = o10
    P[0, 1] = o10
    P[1, 1] = Q[1, 1] + w10 * a10 + w11 * a11


@jit(inline="always")
def _rts_step2(A, Q, mf, Pf, i, ms, Ps):
    """The smoother's step (as in :func:`_series`) for a model of two states, in scalars:
    ``ms, Ps`` (the smoothed moments at i + 1) become those at i.  The generic step's
    loops and calls cost more than its arithmetic at D = 2 (the Matern-3/2 model:
    0.21 -> 0.02-0.05 us a point at n = 10^5)."""
    a00, a01, a10, a11 = A[0, 0], A[0, 1], A[1, 0], A[1, 1]
    f00, f01, f11 = Pf[i, 0, 0], Pf[i, 0, 1], Pf[i, 1, 1]
    # B = A Pf_i, Pp = B A^T + Q, mp = A mf_i
    b00 = a00 * f00 + a01 * f01
    b01 = a00 * f01 + a01 * f11
    b10 = a10 * f00 + a11 * f01
    b11 = a10 * f01 + a11 * f11
    p00 = b00 * a00 + b01 * a01 + Q[0, 0]
    p01 = b10 * a00 + b11 * a01 + Q[1, 0]
    p11 = b10 * a10 + b11 * a11 + Q[1, 1]
    m0, m1 = mf[i, 0], mf[i, 1]
    e0 = ms[0] - (a00 * m0 + a01 * m1)
    e1 = ms[1] - (a10 * m0 + a11 * m1)
    # G^T = Pp^-1 B (Cramer's rule; Pp may be indefinite, see the filter)
    det = p00 * p11 - p01 * p01
    g00 = (p11 * b00 - p01 * b10) / det
    g10 = (p11 * b01 - p01 * b11) / det
    g01 = (p00 * b10 - p01 * b00) / det
    g11 = (p00 * b11 - p01 * b01) / det
    ms[0] = m0 + g00 * e0 + g01 * e1
    ms[1] = m1 + g10 * e0 + g11 * e1
    # Ps = Pf_i + G (Ps - Pp) G^T
    d00, d01, d11 = Ps[0, 0] - p00, Ps[0, 1] - p01, Ps[1, 1] - p11
    w00 = g00 * d00 + g01 * d01
    w01 = g00 * d01 + g01 * d11
    w10 = g10 * d00 + g11 * d01
    w11 = g10 * d01 + g11 * d11
    s01 = f01 + w00 * g10 + w01 * g11
    Ps[0, 0] = f00 + w00 * g00 + w01 * g01
    Ps[0, 1] = s01
    Ps[1, 0] = s01
    Ps[1, 1] = f11 + w10 * g10 + w11 * g11


@jit
def _h_vec(m, h):
    """h m."""
    acc = 0.0
    for r in range(h.shape[0]):
        acc += h[r] * m[r]
    return acc


@jit
def _h_mat(P, h):
    """h P h^T."""
    acc = 0.0
    for r in range(h.shape[0]):
        if h[r] != 0.0:
            for q in range(h.shape[0]):
                acc += h[r] * P[r, q] * h[q]
    return acc


@pjit
def filter_smooth(t, tau, nu, starts, kind, order, rate, fstart, sstart, Pinf, h, mf, Pf,
                  mean, var, log_norm, smooth, As, Qs):
    """Every series ``starts[j]:starts[j + 1]`` of the sorted times ``t`` filtered and
    (``smooth``) smoothed, one prange iteration each, writing only its own rows;
    ``log_norm[j]`` its log normaliser.  ``As, Qs``: every step's transition
    (:func:`~fastep.inference._transitions.step_transitions`), or empty (computed as
    the filter goes)."""
    for j in prange(starts.shape[0] - 1):
        a = starts[j]
        b = starts[j + 1]
        # (empty As, Qs slice to empty: the series computes its own)
        log_norm[j] = _series(t[a:b], tau[a:b], nu[a:b], kind, order, rate, fstart, sstart,
                              Pinf, h, mf[a:b], Pf[a:b], mean[a:b], var[a:b], smooth,
                              As[a:b], Qs[a:b])


@pjit
def log_norms(t, tau, nu, starts, kind, order, rates, fstart, sstart, Pinfs, hs, mf, Pf,
              mean, var, log_norm):
    """The filter's log normaliser of every series at K parameter settings (``rates``,
    ``Pinfs``, ``hs`` stacked along a first axis of K; the factor layout shared), one
    prange iteration per (setting, series) pair: ``log_norm[k, j]``, no smoothing (the
    width-only buffers ``mf``, ``Pf``, ``mean``, ``var`` are one row each).  The central
    differences of the evidence gradient run their 2p filters in parallel this way, where
    one long series alone runs on one core."""
    S = starts.shape[0] - 1
    for job in prange(rates.shape[0] * S):
        k = job // S
        j = job - k * S
        a = starts[j]
        b = starts[j + 1]
        log_norm[k, j] = _series(t[a:b], tau[a:b], nu[a:b], kind, order, rates[k], fstart,
                                 sstart, Pinfs[k], hs[k], mf, Pf, mean, var, False,
                                 Pf[0:0], Pf[0:0])

@pjit
def cavities(mean, var, tau, nu, ok, mc, vc):
    """Each site removed from its marginal (:func:`fastep._sites.cavity`); ``ok[i]`` False
    where the cavity is improper (the site is then kept as it is)."""
    for i in prange(mean.shape[0]):
        good, m, v = cavity(mean[i], var[i], tau[i], nu[i])
        ok[i] = good
        mc[i] = m
        vc[i] = v


@pjit
def update_sites(idx, d1, d2, mc, vc, tau, nu, damping, clip, new_tau, new_nu):
    """The damped EP update (:func:`fastep._sites.damped_site`, power 1) of the sites
    ``idx`` from their tilted derivatives; returns the largest change of tau or nu
    relative to 1 + its size."""
    change = 0.0
    for j in prange(idx.shape[0]):
        i = idx[j]
        t, n, _ = damped_site(d1[j], d2[j], mc[i], vc[i], tau[i], nu[i], 1.0, damping, clip)
        new_tau[i] = t
        new_nu[i] = n
        step = max(abs(t - tau[i]) / (1.0 + abs(tau[i])), abs(n - nu[i]) / (1.0 + abs(nu[i])))
        change = max(change, step)
    return change
