"""The Gram protocol of kernels (:class:`HostGram`, which every backend implements), its
host implementation, and the scalar shapes of stationary kernels that the CPU loops here
and their GPU twins (:mod:`fastep.backend.cuda.kernels`) compile from one source.

A stationary kernel here is ``k(x, x') = variance * g(r)`` with
``r^2 = sum_d ((x_d - x'_d) / l_d)^2``.  For every shape ``g`` we also need
``h`` with ``dk/d log l_d = variance * h(r) * ((x_d - x'_d) / l_d)^2``:

============  ==========================================  =====================================
kind          g(r)                                        h(r)
============  ==========================================  =====================================
RBF (0)       exp(-r^2/2)                                 exp(-r^2/2)
Matern12 (1)  exp(-r)                                     exp(-r)/r  (0 at r = 0)
Matern32 (2)  (1 + sqrt3 r) exp(-sqrt3 r)                  3 exp(-sqrt3 r)
Matern52 (3)  (1 + sqrt5 r + 5 r^2/3) exp(-sqrt5 r)        5/3 (1 + sqrt5 r) exp(-sqrt5 r)
============  ==========================================  =====================================

Gradients are contracted with a weight matrix ``G`` inside the compiled loop,
``out_p = sum_jk G_jk dK_jk / d theta_p``, so no ``n x n x p`` tensor is formed.
"""
from __future__ import annotations

import math

import numpy as np
from numba import prange

from .._jit import jit, pjit

RBF, MATERN12, MATERN32, MATERN52 = 0, 1, 2, 3
_SQRT3 = math.sqrt(3.0)
_SQRT5 = math.sqrt(5.0)


@jit("f8(i8, f8)")
def shape(kind, r2):
    """g(r) for the given kind, as a function of r^2."""
    if kind == RBF:
        return math.exp(-0.5 * r2)
    r = math.sqrt(r2)
    if kind == MATERN12:
        return math.exp(-r)
    if kind == MATERN32:
        return (1.0 + _SQRT3 * r) * math.exp(-_SQRT3 * r)
    return (1.0 + _SQRT5 * r + (5.0 / 3.0) * r2) * math.exp(-_SQRT5 * r)


@jit("f8(i8, f8)")
def shape_grad(kind, r2):
    """h(r) such that dk/d log l_d = variance * h(r) * scaled_diff_d^2."""
    if kind == RBF:
        return math.exp(-0.5 * r2)
    r = math.sqrt(r2)
    if kind == MATERN12:
        return math.exp(-r) / r if r > 0.0 else 0.0
    if kind == MATERN32:
        return 3.0 * math.exp(-_SQRT3 * r)
    return (5.0 / 3.0) * (1.0 + _SQRT5 * r) * math.exp(-_SQRT5 * r)


@jit("f8(i8, f8)")
def shape_ratio(kind, r2):
    """h(r) / g(r), so that dk/d log l_d = k * (h / g)(r) * scaled_diff_d^2: a contraction
    given K needs no exponential (0 at r = 0 for Matern12, whose scaled differences are 0
    there)."""
    if kind == RBF:
        return 1.0
    r = math.sqrt(r2)
    if kind == MATERN12:
        return 1.0 / r if r > 0.0 else 0.0
    if kind == MATERN32:
        return 3.0 / (1.0 + _SQRT3 * r)
    return (5.0 / 3.0) * (1.0 + _SQRT5 * r) / (1.0 + _SQRT5 * r + (5.0 / 3.0) * r2)


@jit(inline="always")
def scaled_sqdist(x1, i, x2, j, inv_ls):
    """r^2 = sum_d ((x1[i, d] - x2[j, d]) / l_d)^2 (shared by the CPU loops and their GPU
    twins)."""
    r2 = 0.0
    for c in range(x1.shape[1]):
        t = (x1[i, c] - x2[j, c]) * inv_ls[c]
        r2 += t * t
    return r2


@pjit
def stationary_gram(x1, x2, inv_ls, variance, kind, symmetric, out):
    """out[i, j] = variance * g(r(x1_i, x2_j)); symmetric=True mirrors j < i."""
    n1 = x1.shape[0]
    n2 = x2.shape[0]
    for i in prange(n1):
        stop = i + 1 if symmetric else n2
        for j in range(stop):
            r2 = scaled_sqdist(x1, i, x2, j, inv_ls)
            out[i, j] = variance * shape(kind, r2)
    if symmetric:
        for i in prange(n1):
            for j in range(i + 1, n2):
                out[i, j] = out[j, i]


@jit(inline="always")
def contract_one(xa, a, xb, g, inv_ls, variance, kind, out):
    """One row of the contraction with ``G`` (``g[a, b]``): ``out[a, 0] = sum_b G_ab K_ab``
    (d/d log variance) and ``out[a, 1 + c] = sum_b G_ab dK_ab / d log l_c``, for
    ``K_ab = k(xa_a, xb_b)``.  Shared by the CPU loop (a row of x1 per iteration) and its
    GPU twin (a column of G per thread: ``xa = x2``, ``g = G^T``)."""
    acc0 = 0.0
    for c in range(xa.shape[1]):
        out[a, 1 + c] = 0.0
    for b in range(xb.shape[0]):
        gab = g[a, b]
        if gab == 0.0:
            continue
        r2 = scaled_sqdist(xa, a, xb, b, inv_ls)
        acc0 += gab * variance * shape(kind, r2)
        hg = gab * variance * shape_grad(kind, r2)
        for c in range(xa.shape[1]):
            t = (xa[a, c] - xb[b, c]) * inv_ls[c]
            out[a, 1 + c] += hg * t * t
    out[a, 0] = acc0


@jit(inline="always")
def gram_contract_one(xa, a, xb, g, k, inv_ls, kind, out):
    """:func:`contract_one` given the kernel values (``k[a, b] = K_ab``): ``out[a, 0] =
    sum_b G_ab K_ab``, ``out[a, 1 + c] = sum_b G_ab K_ab (h / g)(r) t_c^2``
    (:func:`shape_ratio`), with no kernel value computed again.  Shared by the CPU loop
    and its GPU twin (``xa = x2``, ``g = G^T``, ``k = K^T``)."""
    for c in range(xa.shape[1]):
        out[a, 1 + c] = 0.0
    acc0 = 0.0
    for b in range(xb.shape[0]):
        w = g[a, b] * k[a, b]
        if w == 0.0:
            continue
        acc0 += w
        if kind != RBF:
            w *= shape_ratio(kind, scaled_sqdist(xa, a, xb, b, inv_ls))
        for c in range(xa.shape[1]):
            t = (xa[a, c] - xb[b, c]) * inv_ls[c]
            out[a, 1 + c] += w * t * t
    out[a, 0] = acc0


@jit(inline="always")
def input_contract_one(x1, i, x2, g, inv_ls, variance, kind, out):
    """``out[i, c] = sum_j G_ij dK(x1_i, x2_j)/dx1_ic`` for one row i (shared by the CPU
    loop and its GPU twin), using dk/dx1_c = -variance h(r) t_c / l_c with
    t_c = (x1_c - x2_c) / l_c (dk/dr^2 = -variance h / 2)."""
    for c in range(x1.shape[1]):
        out[i, c] = 0.0
    for j in range(x2.shape[0]):
        gij = g[i, j]
        if gij == 0.0:
            continue
        r2 = scaled_sqdist(x1, i, x2, j, inv_ls)
        hg = gij * variance * shape_grad(kind, r2)
        for c in range(x1.shape[1]):
            out[i, c] -= hg * (x1[i, c] - x2[j, c]) * inv_ls[c] * inv_ls[c]


@pjit
def stationary_contract(x1, x2, inv_ls, variance, kind, g, out_rows):
    """Row-wise contraction (:func:`contract_one`): out_rows[i, 0] = sum_j G_ij K_ij,
    out_rows[i, 1 + c] = sum_j G_ij dK_ij/d log l_c.  Each row owns its output."""
    for i in prange(x1.shape[0]):
        contract_one(x1, i, x2, g, inv_ls, variance, kind, out_rows)


@pjit
def stationary_gram_contract(x1, x2, inv_ls, kind, g, k, out_rows):
    """Row-wise contraction given ``k = K(x1, x2)`` (:func:`gram_contract_one`).  Each row
    owns its output."""
    for i in prange(x1.shape[0]):
        gram_contract_one(x1, i, x2, g, k, inv_ls, kind, out_rows)


@pjit
def stationary_input_contract(x1, x2, inv_ls, variance, kind, g, out):
    """out[i, c] = sum_j G_ij dK(x1_i, x2_j)/dx1_ic (:func:`input_contract_one`)."""
    for i in prange(x1.shape[0]):
        input_contract_one(x1, i, x2, g, inv_ls, variance, kind, out)


@pjit
def squared_distances(x, out):
    """out[i, j] = sum_c (x[i, c] - x[j, c])^2 for every pair of rows (both triangles)."""
    n, d = x.shape
    for i in prange(n):
        for j in range(i + 1):
            r2 = 0.0
            for c in range(d):
                t = x[i, c] - x[j, c]
                r2 += t * t
            out[i, j] = r2
    for i in prange(n):
        for j in range(i + 1, n):
            out[i, j] = out[j, i]


@pjit
def isotropic_gram(d2, inv_ls2, variance, kind, out):
    """out = variance * g(r) with r^2 = d2 * inv_ls2 (one lengthscale, distances given)."""
    n = d2.shape[0]
    for i in prange(n):
        for j in range(i + 1):
            out[i, j] = variance * shape(kind, d2[i, j] * inv_ls2)
    for i in prange(n):
        for j in range(i + 1, n):
            out[i, j] = out[j, i]


@pjit
def isotropic_contract(d2, inv_ls2, variance, kind, g, out_rows):
    """Row-wise contraction with one lengthscale: out_rows[i, 0] = sum_j G_ij K_ij,
    out_rows[i, 1] = sum_j G_ij dK_ij / d log l = sum_j G_ij variance h(r) r^2."""
    n = d2.shape[0]
    for i in prange(n):
        acc0 = 0.0
        acc1 = 0.0
        for j in range(n):
            gij = g[i, j]
            if gij == 0.0:
                continue
            r2 = d2[i, j] * inv_ls2
            acc0 += gij * variance * shape(kind, r2)
            acc1 += gij * variance * shape_grad(kind, r2) * r2
        out_rows[i, 0] = acc0
        out_rows[i, 1] = acc1


class HostGram:
    """The Gram operations of kernels on the host: NumPy arrays and the compiled loops above.

    A kernel computes its Gram matrix, diagonal and gradient contractions through an
    object of this protocol, given as ``backend=``; this class is the host implementation
    (and the default), which :class:`fastep.backend.cpu.CPUBackend` extends.  A backend
    for another target provides the same attributes:

    ``xp``
        array module; ``asarray(a)`` converts to it, ``to_host(a)`` back to NumPy;
    ``stationary_gram(x1, x2, inv_ls, variance, kind)``
        ``variance * g(r(x1_i, x2_j))`` (``x2=None``: x1 against itself);
    ``stationary_contract(x1, x2, inv_ls, variance, kind, G)``
        host vector ``[sum G dK/dlog variance, sum G dK/dlog l_1, ...]``;
    ``stationary_gram_contract(x1, x2, inv_ls, kind, G, K)``
        the same, given ``K = K(x1, x2)`` (no kernel value computed again);
    ``stationary_input_contract(x1, x2, inv_ls, variance, kind, G)``
        host array ``d/dx1 sum G K(x1, x2)`` (shape of x1);
    ``isotropic_gram(D, inv_l, variance, kind)``, ``isotropic_contract(D, inv_l,
    variance, kind, G)``
        the same for one lengthscale, from squared distances ``D`` already computed
        (:mod:`fastep.kernels.distances`; the host only).
    """

    xp = np

    def asarray(self, a):
        return np.asarray(a, dtype=np.float64)

    def to_host(self, a):
        return np.asarray(a)

    def stationary_gram(self, x1, x2, inv_ls, variance, kind):
        symmetric = x2 is None
        x2 = x1 if symmetric else x2
        out = np.empty((x1.shape[0], x2.shape[0]))
        stationary_gram(x1, x2, inv_ls, float(variance), kind, symmetric, out)
        return out

    def stationary_contract(self, x1, x2, inv_ls, variance, kind, g):
        rows = np.empty((x1.shape[0], 1 + x1.shape[1]))
        stationary_contract(x1, x1 if x2 is None else x2, inv_ls, float(variance), kind,
                            np.ascontiguousarray(g, dtype=float), rows)
        return rows.sum(axis=0)

    def isotropic_gram(self, d2, inv_ls, variance, kind):
        out = np.empty(d2.shape)
        isotropic_gram(d2, float(inv_ls) ** 2, float(variance), kind, out)
        return out

    def isotropic_contract(self, d2, inv_ls, variance, kind, g):
        rows = np.empty((d2.shape[0], 2))
        isotropic_contract(d2, float(inv_ls) ** 2, float(variance), kind,
                           np.ascontiguousarray(g, dtype=float), rows)
        return rows.sum(axis=0)

    def stationary_gram_contract(self, x1, x2, inv_ls, kind, g, k):
        rows = np.empty((x1.shape[0], 1 + x1.shape[1]))
        stationary_gram_contract(x1, x2, inv_ls, kind, np.ascontiguousarray(g, dtype=float),
                                 np.ascontiguousarray(k, dtype=float), rows)
        return rows.sum(axis=0)

    def stationary_input_contract(self, x1, x2, inv_ls, variance, kind, g):
        out = np.empty(x1.shape)
        stationary_input_contract(x1, x2, inv_ls, float(variance), kind,
                                  np.ascontiguousarray(g, dtype=float), out)
        return out


#: The host Gram operations: the default ``backend`` of every kernel method.
HOST = HostGram()
