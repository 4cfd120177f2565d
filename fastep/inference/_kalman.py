"""Compiled Kalman filter and RTS smoother of a sum of Matern state-space models, with EP
sites as Gaussian pseudo-observations (:mod:`fastep.inference.markov_ep`).

The model is block diagonal, one block of p + 1 states per component
(:mod:`fastep.kernels.statespace`), observed through the sum of the blocks' first states.
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


@jit
def _nilpotent(order, lam, D):
    """Block-diagonal N = F + lambda I of the components (F the companion matrix of
    (s + lambda)^(p+1), so N^(p+1) = 0 in each block)."""
    N = np.zeros((D, D))
    at = 0
    for c in range(order.shape[0]):
        k = order[c] + 1
        ll = lam[c]
        for r in range(k - 1):
            N[at + r, at + r + 1] = 1.0
        binom = 1.0
        for j in range(k):                   # last row: -C(k, j) lambda^(k - j)
            N[at + k - 1, at + j] -= binom * ll ** (k - j)
            binom = binom * (k - j) / (j + 1)
        for r in range(k):
            N[at + r, at + r] += ll
        at += k
    return N


@jit
def _pinf(order, lam, variance, D):
    """Block-diagonal stationary covariance of the components (Matern of order p)."""
    P = np.zeros((D, D))
    at = 0
    for c in range(order.shape[0]):
        p = order[c]
        ll = lam[c]
        s2 = variance[c]
        P[at, at] = s2
        if p == 1:
            P[at + 1, at + 1] = s2 * ll * ll
        elif p == 2:
            P[at + 1, at + 1] = s2 * ll * ll / 3.0
            P[at, at + 2] = -s2 * ll * ll / 3.0
            P[at + 2, at] = -s2 * ll * ll / 3.0
            P[at + 2, at + 2] = s2 * ll ** 4
        at += p + 1
    return P


@jit
def _transition(dt, order, lam, N, Pinf, A, Q, W1, W2):
    """Write A(dt) = blockdiag(exp(-lambda_c dt) sum_j N_c^j dt^j / j!) into A and
    Q(dt) = Pinf - A Pinf A^T into Q (W1, W2: D x D scratch)."""
    D = A.shape[0]
    A[:, :] = 0.0
    at = 0
    for c in range(order.shape[0]):
        k = order[c] + 1
        for r in range(k):
            for q in range(k):
                W1[r, q] = 1.0 if r == q else 0.0
                A[at + r, at + q] = W1[r, q]
        for j in range(1, k):
            for r in range(k):
                for q in range(k):
                    acc = 0.0
                    for x in range(k):
                        acc += W1[r, x] * N[at + x, at + q]
                    W2[r, q] = acc * dt / j
            for r in range(k):
                for q in range(k):
                    W1[r, q] = W2[r, q]
                    A[at + r, at + q] += W2[r, q]
        e = math.exp(-lam[c] * dt)
        for r in range(k):
            for q in range(k):
                A[at + r, at + q] *= e
        at += k
    _sandwich(A, Pinf, W1, Q)
    for r in range(D):
        for q in range(D):
            Q[r, q] = Pinf[r, q] - Q[r, q]


@jit
def _sandwich(A, P, W, out):
    """out = A P A^T (W: scratch)."""
    D = A.shape[0]
    for r in range(D):
        for q in range(D):
            acc = 0.0
            for x in range(D):
                acc += A[r, x] * P[x, q]
            W[r, q] = acc
    for r in range(D):
        for q in range(r + 1):
            acc = 0.0
            for x in range(D):
                acc += W[r, x] * A[q, x]
            out[r, q] = acc
            out[q, r] = acc


@jit
def _solve(M, B, X, W):
    """X = M^-1 B for a D x D M (Gaussian elimination with partial pivoting; W: scratch
    copy of M)."""
    D = M.shape[0]
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
def _series(t, tau, nu, order, lam, variance, mf, Pf, mean, var, smooth):
    """Filter and (``smooth``) smooth one series (sorted times t); returns the log
    normaliser log int p(f) prod_i site_i(f_i) df and writes the marginals into mean,
    var.  The transition is recomputed only where the step dt changes (a regular grid
    computes it once)."""
    n = t.shape[0]
    D = mf.shape[1]
    N = _nilpotent(order, lam, D)
    Pinf = _pinf(order, lam, variance, D)
    nc = order.shape[0]
    first = np.zeros(nc, dtype=np.int64)          # H: the first state of each component
    at = 0
    for c in range(nc):
        first[c] = at
        at += order[c] + 1
    A, Q = np.zeros((D, D)), np.zeros((D, D))
    W1, W2, L, P = np.zeros((D, D)), np.zeros((D, D)), np.zeros((D, D)), Pinf.copy()
    m, mp, g = np.zeros(D), np.zeros(D), np.zeros(D)
    last = math.nan
    log_norm = 0.0
    for i in range(n):
        if i > 0:
            dt = t[i] - t[i - 1]
            if dt != last:
                _transition(dt, order, lam, N, Pinf, A, Q, W1, W2)
                last = dt
            for r in range(D):
                acc = 0.0
                for x in range(D):
                    acc += A[r, x] * m[x]
                mp[r] = acc
            m[:] = mp
            _sandwich(A, P, W1, W2)
            for r in range(D):
                for q in range(D):
                    P[r, q] = W2[r, q] + Q[r, q]
        # g = P H^T, s = H P H^T, hm = H m
        hm = 0.0
        for c in range(nc):
            hm += m[first[c]]
        for r in range(D):
            acc = 0.0
            for c in range(nc):
                acc += P[r, first[c]]
            g[r] = acc
        s = 0.0
        for c in range(nc):
            s += g[first[c]]
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
            mf[i, r] = m[r]
        for r in range(D):
            for q in range(r + 1):
                v = P[r, q] - g[r] * g[q] * shrink
                P[r, q] = v
                P[q, r] = v
        Pf[i] = P
    if not smooth:
        return log_norm
    # RTS smoother, backwards: G = Pf A^T Pp^-1 from Pp G^T = A Pf (Cholesky of Pp)
    ms, Ps = mf[n - 1].copy(), Pf[n - 1].copy()
    mean[n - 1] = _h_vec(ms, first)
    var[n - 1] = _h_mat(Ps, first)
    last = math.nan
    B, Gt, Pp, Dm = np.zeros((D, D)), np.zeros((D, D)), np.zeros((D, D)), np.zeros((D, D))
    G = np.zeros((D, D))
    for i in range(n - 2, -1, -1):
        dt = t[i + 1] - t[i]
        if dt != last:
            _transition(dt, order, lam, N, Pinf, A, Q, W1, W2)
            last = dt
        Pfi = Pf[i]
        # mp = A mf_i; B = A Pf_i and Pp = B A^T + Q (the sandwich's scratch is B)
        for r in range(D):
            acc = 0.0
            for x in range(D):
                acc += A[r, x] * mf[i, x]
            mp[r] = acc
        _sandwich(A, Pfi, B, Pp)
        for r in range(D):
            for q in range(D):
                Pp[r, q] += Q[r, q]
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
        _sandwich(G, Dm, W1, Ps)
        for r in range(D):
            for q in range(D):
                Ps[r, q] += Pfi[r, q]
        mean[i] = _h_vec(ms, first)
        var[i] = _h_mat(Ps, first)
    return log_norm


@jit
def _h_vec(m, first):
    acc = 0.0
    for c in range(first.shape[0]):
        acc += m[first[c]]
    return acc


@jit
def _h_mat(P, first):
    acc = 0.0
    for c in range(first.shape[0]):
        for e in range(first.shape[0]):
            acc += P[first[c], first[e]]
    return acc


@pjit
def filter_smooth(t, tau, nu, starts, order, lam, variance, mf, Pf, mean, var, log_norm,
                  smooth=True):
    """Every series ``starts[j]:starts[j + 1]`` of the sorted times ``t`` filtered and
    (``smooth``) smoothed, one prange iteration each, writing only its own rows;
    ``log_norm[j]`` its log normaliser."""
    for j in prange(starts.shape[0] - 1):
        a = starts[j]
        b = starts[j + 1]
        log_norm[j] = _series(t[a:b], tau[a:b], nu[a:b], order, lam, variance,
                              mf[a:b], Pf[a:b], mean[a:b], var[a:b], smooth)


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
