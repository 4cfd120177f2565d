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
filtered means and covariances, n (D + D^2) numbers).  Independent series (ragged, given
by their start offsets) run in parallel, one ``prange`` iteration each.
"""
from __future__ import annotations

import math

import numpy as np
from numba import prange

from .._jit import jit, pjit
from .._sites import cavity, damped_site

#: Models of at least this many states multiply and solve by BLAS and LAPACK (np.dot,
#: np.linalg.solve: an allocation per step, repaid from about this size on).
BLAS_STATES = 16


@jit
def _factor_transition(kind, order, rate, dt, out, at):
    """Write the factor's transition A(dt) (:mod:`fastep.kernels.statespace`) into
    ``out[at:at + k, at:at + k]`` and return k: a Matern's ``exp(-lambda dt) sum_j N^j
    dt^j / j!`` (N = F + lambda I, nilpotent; written out for p = 0, 1, 2), a periodic's
    rotations by ``j w dt``, a constant's 1."""
    if kind == 0:
        ll = rate
        e = math.exp(-ll * dt)
        if order == 0:
            out[at, at] = e
            return 1
        x = ll * dt
        if order == 1:                          # N = [[l, 1], [-l^2, -l]]
            out[at, at] = e * (1.0 + x)
            out[at, at + 1] = e * dt
            out[at + 1, at] = -e * ll * x
            out[at + 1, at + 1] = e * (1.0 - x)
            return 2
        # order 2: N = [[l, 1, 0], [0, l, 1], [-l^3, -3 l^2, -2 l]],
        # A = e (I + N dt + N^2 dt^2 / 2)
        h = 0.5 * dt * dt
        l2 = ll * ll
        l3 = l2 * ll
        out[at, at] = e * (1.0 + x + l2 * h)
        out[at, at + 1] = e * (dt + 2.0 * ll * h)
        out[at, at + 2] = e * h
        out[at + 1, at] = e * (-l3 * h)
        out[at + 1, at + 1] = e * (1.0 + x - 2.0 * l2 * h)
        out[at + 1, at + 2] = e * (dt - ll * h)
        out[at + 2, at] = e * (-l3 * dt + l2 * l2 * h)
        out[at + 2, at + 1] = e * (-3.0 * l2 * dt + 2.0 * l3 * h)
        out[at + 2, at + 2] = e * (1.0 - 2.0 * x + l2 * h)
        return 3
    if kind == 1:
        k = 2 * order + 1
        for r in range(k):
            for q in range(k):
                out[at + r, at + q] = 0.0
        out[at, at] = 1.0
        for j in range(1, order + 1):
            a = j * rate * dt
            c, s = math.cos(a), math.sin(a)
            i = at + 2 * j - 1
            out[i, i] = c
            out[i, i + 1] = -s
            out[i + 1, i] = s
            out[i + 1, i + 1] = c
        return k
    out[at, at] = 1.0
    return 1


@jit
def _transition(dt, kind, order, rate, fstart, sstart, Pinf, A, Q, W1, W2, W3):
    """Write A(dt) into A (block diagonal: each term's block the Kronecker product of its
    factors' transitions) and Q(dt) = Pinf - A Pinf A^T into Q, block by block (W1..W3:
    D x D scratch).  Only the blocks are written: A and Q must start as zeros."""
    for b in range(fstart.shape[0] - 1):
        a0 = sstart[b]
        a1 = sstart[b + 1]
        if fstart[b + 1] - fstart[b] == 1:      # one factor: straight into its block
            f = fstart[b]
            _factor_transition(kind[f], order[f], rate[f], dt, A, a0)
        else:
            size = 1
            W1[0, 0] = 1.0
            for f in range(fstart[b], fstart[b + 1]):
                k = _factor_transition(kind[f], order[f], rate[f], dt, W3, 0)
                # W2 = kron(W1[:size, :size], W3[:k, :k])
                for r in range(size):
                    for q in range(size):
                        v = W1[r, q]
                        for a in range(k):
                            for c in range(k):
                                W2[r * k + a, q * k + c] = v * W3[a, c]
                size *= k
                for r in range(size):
                    for q in range(size):
                        W1[r, q] = W2[r, q]
            for r in range(size):
                for q in range(size):
                    A[a0 + r, a0 + q] = W1[r, q]
        # the block of Q: Pinf - A Pinf A^T
        _sandwich_add(A, Pinf, W1, Q, Pinf, -1.0, a0, a1 - a0)


@jit
def _sandwich_add(A, P, W, out, base, sign, a0, k):
    """``out = base + sign A P A^T`` on the block ``a0:a0 + k`` (symmetric P and base),
    with ``W = A P`` there; ``out`` may be P or base.  Blocks of one to three states,
    the common Matern ones, are written out (loops of a few turns cost more than their
    arithmetic)."""
    if k == 1:
        a = A[a0, a0]
        W[a0, a0] = a * P[a0, a0]
        out[a0, a0] = base[a0, a0] + sign * a * W[a0, a0]
        return
    if k == 2:
        i = a0
        j = a0 + 1
        a00, a01, a10, a11 = A[i, i], A[i, j], A[j, i], A[j, j]
        p00, p01, p10, p11 = P[i, i], P[i, j], P[j, i], P[j, j]
        w00 = a00 * p00 + a01 * p10
        w01 = a00 * p01 + a01 * p11
        w10 = a10 * p00 + a11 * p10
        w11 = a10 * p01 + a11 * p11
        W[i, i], W[i, j], W[j, i], W[j, j] = w00, w01, w10, w11
        o00 = base[i, i] + sign * (w00 * a00 + w01 * a01)
        o10 = base[j, i] + sign * (w10 * a00 + w11 * a01)
        o11 = base[j, j] + sign * (w10 * a10 + w11 * a11)
        out[i, i] = o00
        out[j, i] = o10
        out[i, j] = o10
        out[j, j] = o11
        return
    if k == 3:
        i, j, m = a0, a0 + 1, a0 + 2
        a00, a01, a02 = A[i, i], A[i, j], A[i, m]
        a10, a11, a12 = A[j, i], A[j, j], A[j, m]
        a20, a21, a22 = A[m, i], A[m, j], A[m, m]
        p00, p01, p02 = P[i, i], P[i, j], P[i, m]
        p11, p12, p22 = P[j, j], P[j, m], P[m, m]
        w00 = a00 * p00 + a01 * p01 + a02 * p02
        w01 = a00 * p01 + a01 * p11 + a02 * p12
        w02 = a00 * p02 + a01 * p12 + a02 * p22
        w10 = a10 * p00 + a11 * p01 + a12 * p02
        w11 = a10 * p01 + a11 * p11 + a12 * p12
        w12 = a10 * p02 + a11 * p12 + a12 * p22
        w20 = a20 * p00 + a21 * p01 + a22 * p02
        w21 = a20 * p01 + a21 * p11 + a22 * p12
        w22 = a20 * p02 + a21 * p12 + a22 * p22
        W[i, i], W[i, j], W[i, m] = w00, w01, w02
        W[j, i], W[j, j], W[j, m] = w10, w11, w12
        W[m, i], W[m, j], W[m, m] = w20, w21, w22
        o00 = base[i, i] + sign * (w00 * a00 + w01 * a01 + w02 * a02)
        o10 = base[j, i] + sign * (w10 * a00 + w11 * a01 + w12 * a02)
        o20 = base[m, i] + sign * (w20 * a00 + w21 * a01 + w22 * a02)
        o11 = base[j, j] + sign * (w10 * a10 + w11 * a11 + w12 * a12)
        o21 = base[m, j] + sign * (w20 * a10 + w21 * a11 + w22 * a12)
        o22 = base[m, m] + sign * (w20 * a20 + w21 * a21 + w22 * a22)
        out[i, i], out[j, j], out[m, m] = o00, o11, o22
        out[j, i], out[i, j] = o10, o10
        out[m, i], out[i, m] = o20, o20
        out[m, j], out[j, m] = o21, o21
        return
    if a0 == 0 and k == A.shape[0] and k >= BLAS_STATES:
        # a large whole model (a periodic kernel's harmonics, products): BLAS products
        W[:, :] = np.dot(A, P)
        AW = np.dot(W, A.T)
        for r in range(k):
            for q in range(r + 1):
                v = base[r, q] + sign * 0.5 * (AW[r, q] + AW[q, r])
                out[r, q] = v
                out[q, r] = v
        return
    for r in range(a0, a0 + k):
        for q in range(a0, a0 + k):
            acc = 0.0
            for x in range(a0, a0 + k):
                acc += A[r, x] * P[x, q]
            W[r, q] = acc
    for r in range(a0, a0 + k):
        for q in range(a0, r + 1):
            acc = 0.0
            for x in range(a0, a0 + k):
                acc += W[r, x] * A[q, x]
            v = base[r, q] + sign * acc
            out[r, q] = v
            out[q, r] = v


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
def _slot(dt, dts, used, As, Qs, kind, order, rate, fstart, sstart, Pinf, W1, W2, W3):
    """The slot (0 or 1) of ``As``, ``Qs`` holding A(dt), Q(dt): one already holding
    them (``dts``: their steps), else the one not ``used`` last, recomputed."""
    if dts[0] == dt:
        return 0
    if dts[1] == dt:
        return 1
    k = 1 - used
    _transition(dt, kind, order, rate, fstart, sstart, Pinf, As[k], Qs[k], W1, W2, W3)
    dts[k] = dt
    return k


@jit
def _series(t, tau, nu, kind, order, rate, fstart, sstart, Pinf, h, mf, Pf, mean, var,
            smooth):
    """Filter and (``smooth``) smooth one series (sorted times t); returns the log
    normaliser log int p(f) prod_i site_i(f_i) df and (``smooth``) writes the filtered
    moments into mf, Pf and the marginals into mean, var (the filter alone reads only
    mf's width D: one row will do).  The transitions of the last two distinct steps dt are kept (:func:`_slot`), so
    a regular grid computes one, and a grid with every k-th point held out (steps 1 and
    2 in turn) two, not one per point."""
    n = t.shape[0]
    D = mf.shape[1]
    As, Qs = np.zeros((2, D, D)), np.zeros((2, D, D))
    dts = np.full(2, math.nan)
    used = 1
    W1, W2, L, P = np.zeros((D, D)), np.zeros((D, D)), np.zeros((D, D)), Pinf.copy()
    W3 = np.zeros((D, D))
    m, mp, g = np.zeros(D), np.zeros(D), np.zeros(D)
    log_norm = 0.0
    for i in range(n):
        if i > 0:
            used = _slot(t[i] - t[i - 1], dts, used, As, Qs, kind, order, rate, fstart,
                         sstart, Pinf, W1, W2, W3)
            A, Q = As[used], Qs[used]
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
    # RTS smoother, backwards: G = Pf A^T Pp^-1 from Pp G^T = A Pf (Cholesky of Pp)
    ms, Ps = mf[n - 1].copy(), Pf[n - 1].copy()
    mean[n - 1] = _h_vec(ms, h)
    var[n - 1] = _h_mat(Ps, h)
    B, Gt, Pp, Dm = np.zeros((D, D)), np.zeros((D, D)), np.zeros((D, D)), np.zeros((D, D))
    G = np.zeros((D, D))
    for i in range(n - 2, -1, -1):
        used = _slot(t[i + 1] - t[i], dts, used, As, Qs, kind, order, rate, fstart, sstart,
                     Pinf, W1, W2, W3)
        A, Q = As[used], Qs[used]
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
                  mean, var, log_norm, smooth=True):
    """Every series ``starts[j]:starts[j + 1]`` of the sorted times ``t`` filtered and
    (``smooth``) smoothed, one prange iteration each, writing only its own rows;
    ``log_norm[j]`` its log normaliser."""
    for j in prange(starts.shape[0] - 1):
        a = starts[j]
        b = starts[j + 1]
        log_norm[j] = _series(t[a:b], tau[a:b], nu[a:b], kind, order, rate, fstart, sstart,
                              Pinf, h, mf[a:b], Pf[a:b], mean[a:b], var[a:b], smooth)


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
                                 sstart, Pinfs[k], hs[k], mf, Pf, mean, var, False)

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
