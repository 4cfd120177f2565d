"""The discrete-time transitions of a state-space GP prior (:mod:`fastep.kernels.statespace`):
for a step dt, ``A(dt) = exp(F dt)`` in closed form per factor (Kronecker products within
a term, blocks across terms) and ``Q(dt) = P_inf - A P_inf A^T``; the small dense
products the Kalman filter shares with them; and, for irregular times, every step's
transition computed once a run, in parallel, for the filter and smoother of
:mod:`fastep.inference._kalman` to read.
"""
from __future__ import annotations

import math

import numpy as np
from numba import prange

from .._jit import jit, pjit

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


@jit(inline="always")
def _held(dt, dts):
    """The slot already holding the step ``dt`` (0 or 1), or -1.  The filter asks this
    before it calls :func:`_slot`: that call, with 14 array arguments, cost about 100 ns
    a point, two thirds of a regular grid's filter (inlining all of it kept half)."""
    if dts[0] == dt:
        return 0
    if dts[1] == dt:
        return 1
    return -1


@jit
def _slot(dt, dts, used, As, Qs, kind, order, rate, fstart, sstart, Pinf, W1, W2, W3):
    """The slot (0 or 1) of ``As``, ``Qs`` holding A(dt), Q(dt): one already holding
    them (``dts``: their steps; :func:`_held`), else the one not ``used`` last,
    recomputed."""
    k = _held(dt, dts)
    if k >= 0:
        return k
    k = 1 - used
    _transition(dt, kind, order, rate, fstart, sstart, Pinf, As[k], Qs[k], W1, W2, W3)
    dts[k] = dt
    return k


#: Rows of the step transitions one prange task writes (one set of scratch arrays each).
TRANSITION_BLOCK = 4096


@pjit
def step_transitions(t, first, kind, order, rate, fstart, sstart, Pinf, As, Qs):
    """``As[i], Qs[i]`` = A(dt), Q(dt) of the step dt = t[i] - t[i - 1] into every row
    that does not start a series (``first[i]`` False; As and Qs zeros on entry, as
    :func:`_transition` needs), in parallel blocks of rows, each writing only its own:
    the filter and the smoother then read them instead of recomputing them at every
    point of every EP iteration where the steps differ (irregular times)."""
    n = t.shape[0]
    D = Pinf.shape[0]
    for blk in prange((n + TRANSITION_BLOCK - 1) // TRANSITION_BLOCK):
        W1, W2, W3 = np.zeros((D, D)), np.zeros((D, D)), np.zeros((D, D))
        for i in range(blk * TRANSITION_BLOCK, min(n, (blk + 1) * TRANSITION_BLOCK)):
            if not first[i]:
                _transition(t[i] - t[i - 1], kind, order, rate, fstart, sstart, Pinf, As[i],
                            Qs[i], W1, W2, W3)


@jit
def slot_misses(t, first):
    """How many transitions the filter's two slots (:func:`_slot`, empty at the start of
    each series) would compute in one pass: 1 or 2 for a regular grid, about n for
    irregular times."""
    d0 = d1 = math.nan
    used = 1
    misses = 0
    for i in range(t.shape[0]):
        if first[i]:
            d0 = d1 = math.nan
            used = 1
            continue
        dt = t[i] - t[i - 1]
        if dt == d0:
            used = 0
        elif dt == d1:
            used = 1
        else:
            misses += 1
            used = 1 - used
            if used == 0:
                d0 = dt
            else:
                d1 = dt
    return misses


#: The transitions of irregular steps are computed once a run where they take at most
#: this many bytes (two D x D matrices a row: 64 bytes for a Matern-3/2, 1 GiB at 1.7e7
#: rows), not at every point of every filter and smoother pass.
TRANSITION_CACHE_BYTES = 2 ** 30


def step_cache(ts, starts, ss):
    """``(As, Qs)``: every step's A(dt) and Q(dt) (:func:`step_transitions`, in
    parallel) where the steps are irregular (the filter's two slots would compute more
    than n / 8 of them) and fit :data:`TRANSITION_CACHE_BYTES`; else two empty arrays
    (the filter computes its one or two distinct steps itself).  ``ss``: the
    :class:`~fastep.kernels.statespace.StateSpace` of the run; ``starts``: where each
    series starts (and n).  On jittered days a Matern-3/2 filter and smoother pass took
    0.95 us a point recomputing them, 0.31 reading them (n = 10^5, before the two-state
    steps of :mod:`fastep.inference._kalman`)."""
    n, D = ts.shape[0], ss.n_states
    first = np.zeros(n, dtype=np.bool_)
    first[starts[:-1]] = True
    if 16 * n * D * D > TRANSITION_CACHE_BYTES or slot_misses(ts, first) <= n // 8:
        return np.zeros((0, D, D)), np.zeros((0, D, D))
    As, Qs = np.zeros((n, D, D)), np.zeros((n, D, D))
    step_transitions(ts, first, *ss.arrays[:6], As, Qs)
    return As, Qs
