"""CUDA kernels, each the GPU twin of a CPU loop of the same name.

One copy of the maths
---------------------
The scalar functions of fastep (``log_phi``, ``mills``, the likelihoods'
``scalar_tilted``, the panel quadrature, the site arithmetic of :mod:`fastep._sites`,
the Gram shapes ...) are
written with ``math`` only and compiled for the CPU with ``numba.njit``.
:func:`device_function` compiles the *same Python source* (the dispatcher's
``py_func``) a second time with ``numba.cuda.jit(device=True)``; every compiled
function it calls, found among its globals or closure cells, is retargeted the same
way first (this generalises :func:`fastep.likelihoods._quadrature._compile_quad`, which
re-binds a global of one source).  So a likelihood written for the CPU runs on the
GPU unchanged, :class:`~fastep.likelihoods.CustomLikelihood` included, as long as
its scalar code uses ``math`` only.

Only the loops differ between the targets: a CPU kernel is a ``prange`` loop, its
GPU twin a grid-stride loop (``cuda.grid``/``cuda.gridsize``) over the same scalar
calls.  CUDA kernels cannot take a function as an argument, so the kernels that call
a likelihood are built per tilted function by a small factory and cached
(:func:`_per_likelihood`).

Adding a kernel (as done for the robust-max Gauss-Hermite products): write the
scalar part once in the CPU module, build its device twin here with
:func:`device_function`, add a grid-stride ``@cuda.jit`` kernel and a launcher named
like the CPU function, and add the pair to ``tests/helpers/cuda_checks.py``.

Launch sizes come from :data:`THREADS_PER_BLOCK` / :data:`THREADS_2D`
(the tests shrink them so that the simulator stays fast).
"""
from __future__ import annotations

import math
import types as pytypes

from numba import cuda, float64
from numba.core.registry import CPUDispatcher

from ..._sites import cavity, damped_site, power_cavity, power_site_evidence, store_site
from ...kernels.gram import (contract_one, gram_contract_one, input_contract_one,
                              scaled_sqdist, shape)
from ...likelihoods import robustmax as _rm

#: Threads per block of 1-D kernels, and the side of a 2-D block.
THREADS_PER_BLOCK = 256
THREADS_2D = 16
#: Cap on blocks per launch (grid-stride loops cover the rest).
MAX_BLOCKS = 65535

_DEVICE: dict = {}


def _is_cpu_function(obj):
    return isinstance(obj, CPUDispatcher)


def device_function(fn):
    """A CUDA device function compiled from the Python source of ``fn``.

    ``fn`` is an ``numba.njit`` dispatcher (or a plain Python function) written with
    ``math`` only.  Compiled functions it calls, through its globals or its closure,
    are replaced by their own device versions; results are cached per ``fn``.
    """
    if fn in _DEVICE:
        return _DEVICE[fn]
    py = getattr(fn, "py_func", fn)
    glb = dict(py.__globals__)
    for name in py.__code__.co_names:
        if _is_cpu_function(glb.get(name)):
            glb[name] = device_function(glb[name])
    closure = None
    if py.__closure__:
        closure = tuple(pytypes.CellType(device_function(c.cell_contents)
                                         if _is_cpu_function(c.cell_contents)
                                         else c.cell_contents) for c in py.__closure__)
    twin = pytypes.FunctionType(py.__code__, glb, py.__name__, py.__defaults__, closure)
    twin.__qualname__ = py.__qualname__
    twin.__doc__ = py.__doc__
    dev = cuda.jit(device=True)(twin)
    _DEVICE[fn] = dev
    return dev


def _launch_1d(n):
    blocks = max(1, min(MAX_BLOCKS, -(-n // THREADS_PER_BLOCK)))
    return blocks, THREADS_PER_BLOCK


def _launch_2d(n1, n2):
    t = THREADS_2D
    return ((max(1, min(MAX_BLOCKS, -(-n2 // t))), max(1, min(MAX_BLOCKS, -(-n1 // t)))),
            (t, t))


# ---------------------------------------------------------------------------------------
# per-likelihood kernels: tilted moments, parallel EP sites, Power-EP sites
# ---------------------------------------------------------------------------------------
_PER_LIK: dict = {}


def _per_likelihood(tilted_cpu):
    """The kernels that call one likelihood's tilted function, compiled once per function."""
    if tilted_cpu in _PER_LIK:
        return _PER_LIK[tilted_cpu]
    tilted = device_function(tilted_cpu)
    d_cavity = device_function(cavity)
    d_power_cavity = device_function(power_cavity)
    d_damped = device_function(damped_site)
    d_evidence = device_function(power_site_evidence)
    d_store = device_function(store_site)

    @cuda.jit
    def tilted_batch_kernel(y, extra, mu, var, alpha, params, log_z, d1, d2):
        start, stride = cuda.grid(1), cuda.gridsize(1)
        for i in range(start, y.shape[0], stride):
            a, b, c = tilted(y[i], extra[i], mu[i], var[i], alpha, params)
            log_z[i] = a
            d1[i] = b
            d2[i] = c

    # the arguments are the fields of fastep._sites.SiteData and SiteBuffers in order (the
    # launchers below pass the records expanded), then the scalars and the counter
    @cuda.jit
    def parallel_sites_kernel(y, extra, params, mean, var, tau, nu, new_tau, new_nu, log_z,
                              mu_cav, var_cav, damping, clip, skipped):
        start, stride = cuda.grid(1), cuda.gridsize(1)
        for i in range(start, y.shape[0], stride):
            ok, mc, vc = d_cavity(mean[i], var[i], tau[i], nu[i])
            if not ok:
                d_store(i, tau[i], nu[i], math.nan, math.nan, math.nan, new_tau, new_nu, log_z,
                        mu_cav, var_cav)
                cuda.atomic.add(skipped, 0, 1)
                continue
            lz, d1, d2 = tilted(y[i], extra[i], mc, vc, 1.0, params)
            t, n, ok = d_damped(d1, d2, mc, vc, tau[i], nu[i], 1.0, damping, clip)
            if not ok:
                cuda.atomic.add(skipped, 0, 1)
            d_store(i, t, n, lz, mc, vc, new_tau, new_nu, log_z, mu_cav, var_cav)

    @cuda.jit
    def power_sites_kernel(y, extra, params, mean, var, tau, nu, new_tau, new_nu, site_ev,
                           mu_cav, var_cav, resid, alpha, damping, clip, skipped):
        start, stride = cuda.grid(1), cuda.gridsize(1)
        for i in range(start, y.shape[0], stride):
            ok, mc, vc, sc = d_power_cavity(mean[i], var[i], tau[i], nu[i], alpha)
            if not ok:
                d_store(i, tau[i], nu[i], math.nan, math.nan, math.nan, new_tau, new_nu,
                        site_ev, mu_cav, var_cav)
                cuda.atomic.add(skipped, 0, 1)
                continue
            lz, d1, d2 = tilted(y[i], extra[i], mc, vc + resid[i], alpha, params)
            t, n, ok = d_damped(d1, d2, mc, vc, tau[i], nu[i], alpha, damping, clip)
            if not ok:
                cuda.atomic.add(skipped, 0, 1)
            ev = d_evidence(lz, sc, mean[i], var[i], tau[i], nu[i], alpha)
            d_store(i, t, n, ev, mc, vc, new_tau, new_nu, site_ev, mu_cav, var_cav)

    out = _PER_LIK[tilted_cpu] = (tilted_batch_kernel, parallel_sites_kernel, power_sites_kernel)
    return out


def tilted_batch(tilted, y, extra, mu, var, alpha, params, log_z, d1, d2):
    """GPU twin of :func:`fastep.likelihoods._base.tilted_batch` (``tilted``: the CPU
    tilted function, ``likelihood.scalar_tilted``; arrays on the device)."""
    k = _per_likelihood(tilted)[0]
    k[_launch_1d(y.shape[0])](y, extra, mu, var, float(alpha), params, log_z, d1, d2)


def parallel_sites(tilted, data, bufs, damping, clip, skipped):
    """GPU twin of :func:`fastep.backend.cpu_loops.parallel_sites` (``data``, ``bufs``: the
    records :class:`fastep._sites.SiteData` and :class:`~fastep._sites.SiteBuffers` of
    device arrays); the number of skipped sites is *added* to ``skipped[0]`` (a 1-element
    int64 device array)."""
    k = _per_likelihood(tilted)[1]
    k[_launch_1d(data.y.shape[0])](*data, *bufs, float(damping), bool(clip), skipped)


def power_sites(tilted, data, bufs, resid, alpha, damping, clip, skipped):
    """GPU twin of :func:`fastep.backend.cpu_loops.power_sites` (the records and ``skipped`` as
    in :func:`parallel_sites`)."""
    k = _per_likelihood(tilted)[2]
    k[_launch_1d(data.y.shape[0])](*data, *bufs, resid, float(alpha), float(damping),
                                   bool(clip), skipped)


# ---------------------------------------------------------------------------------------
# dense EP covariance work (twins of fastep.backend.cpu)
# ---------------------------------------------------------------------------------------
@cuda.jit
def _build_b_kernel(kmat, s, out):
    c0, r0 = cuda.grid(2)
    cs, rs = cuda.gridsize(2)
    n = kmat.shape[0]
    for i in range(r0, n, rs):
        for j in range(c0, n, cs):
            v = s[i] * kmat[i, j] * s[j]
            if i == j:
                v += 1.0
            out[i, j] = v


def build_b(kmat, s, out):
    """out = I + diag(s) K diag(s)."""
    _build_b_kernel[_launch_2d(*kmat.shape)](kmat, s, out)


@cuda.jit
def _scale_columns_kernel(kmat, s, out):
    c0, r0 = cuda.grid(2)
    cs, rs = cuda.gridsize(2)
    for i in range(r0, kmat.shape[0], rs):
        for j in range(c0, kmat.shape[1], cs):
            out[i, j] = kmat[i, j] * s[j]


def scale_columns(kmat, s, out):
    """out[i, j] = K[i, j] * s[j]."""
    _scale_columns_kernel[_launch_2d(*kmat.shape)](kmat, s, out)


@cuda.jit
def _col_sumsq_kernel(a, out):
    start, stride = cuda.grid(1), cuda.gridsize(1)
    for j in range(start, a.shape[1], stride):
        acc = 0.0
        for i in range(a.shape[0]):
            acc += a[i, j] * a[i, j]
        out[j] = acc


def col_sumsq(a, out):
    """out[j] = sum_i a[i, j]^2; a thread owns a column, so a warp reads contiguous memory
    when ``a`` is C-ordered.  (The dense driver's row sums of V^T reach this as the
    F-ordered ``V``, whose reads are strided across a warp; on an H100 at n = 40,000 the
    whole sweep still costs 1.06 x the Cholesky-plus-solve floor.)"""
    _col_sumsq_kernel[_launch_1d(a.shape[1])](a, out)


def row_sumsq(a, out):
    """out[i] = sum_j a[i, j]^2 (twin of the CPU kernel; ``col_sumsq`` of ``a.T``)."""
    col_sumsq(a.T, out)


# ---------------------------------------------------------------------------------------
# sparse EP: per-site marginals of the projections h_i
# ---------------------------------------------------------------------------------------
@cuda.jit
def _projection_marginals_kernel(g, beta, mean, var):
    start, stride = cuda.grid(1), cuda.gridsize(1)
    m = g.shape[0]
    for j in range(start, g.shape[1], stride):
        mu = 0.0
        v = 0.0
        for k in range(m):
            gk = g[k, j]
            mu += gk * beta[k]
            v += gk * gk
        mean[j] = mu
        var[j] = v


def projection_marginals(g, beta, mean, var):
    """Per-site marginals of sparse EP: ``mean_j = g_j . beta`` and ``var_j = |g_j|^2``
    for the columns of ``g = R^-1 K(Z, X_c)`` (a thread owns a column)."""
    _projection_marginals_kernel[_launch_1d(g.shape[1])](g, beta, mean, var)


# ---------------------------------------------------------------------------------------
# stationary Gram matrices and gradient contractions (twins of fastep.kernels.gram)
# ---------------------------------------------------------------------------------------
_d_shape = device_function(shape)
_d_sqdist = device_function(scaled_sqdist)
_d_contract_one = device_function(contract_one)
_d_gram_contract_one = device_function(gram_contract_one)
_d_input_contract_one = device_function(input_contract_one)


@cuda.jit
def _stationary_gram_kernel(x1, x2, inv_ls, variance, kind, out):
    c0, r0 = cuda.grid(2)
    cs, rs = cuda.gridsize(2)
    for i in range(r0, x1.shape[0], rs):
        for j in range(c0, x2.shape[0], cs):
            r2 = _d_sqdist(x1, i, x2, j, inv_ls)
            out[i, j] = variance * _d_shape(kind, r2)


def stationary_gram(x1, x2, inv_ls, variance, kind, out):
    """out[i, j] = variance * g(r(x1_i, x2_j)) (twin of ``gram.stationary_gram``; the
    symmetric case is computed in full: both triangles hold the same bits)."""
    _stationary_gram_kernel[_launch_2d(x1.shape[0], x2.shape[0])](
        x1, x2, inv_ls, float(variance), int(kind), out)


@cuda.jit
def _stationary_contract_kernel(x1, x2, inv_ls, variance, kind, gt, out_cols):
    start, stride = cuda.grid(1), cuda.gridsize(1)
    for j in range(start, x2.shape[0], stride):
        _d_contract_one(x2, j, x1, gt, inv_ls, variance, kind, out_cols)


def stationary_contract(x1, x2, inv_ls, variance, kind, g, out_cols):
    """Column-wise contraction: ``out_cols[j, 0] = sum_i G_ij K_ij`` (d/d log variance),
    ``out_cols[j, 1 + c] = sum_i G_ij dK_ij / d log l_c`` (``gram.contract_one`` of
    ``x2``'s row j against x1 with ``G^T``: the CPU loop's rows, for ``x2, x1, G^T``).  A
    thread owns a column of G, so a warp reads contiguous memory."""
    _stationary_contract_kernel[_launch_1d(x2.shape[0])](
        x1, x2, inv_ls, float(variance), int(kind), g.T, out_cols)


@cuda.jit
def _stationary_gram_contract_kernel(x1, x2, inv_ls, kind, gt, kt, out_cols):
    start, stride = cuda.grid(1), cuda.gridsize(1)
    for j in range(start, x2.shape[0], stride):
        _d_gram_contract_one(x2, j, x1, gt, kt, inv_ls, kind, out_cols)


def stationary_gram_contract(x1, x2, inv_ls, kind, g, k, out_cols):
    """:func:`stationary_contract` given ``k = K(x1, x2)`` (``gram.gram_contract_one`` of
    ``x2``'s row j against x1 with ``G^T`` and ``K^T``); a thread owns a column of G."""
    _stationary_gram_contract_kernel[_launch_1d(x2.shape[0])](
        x1, x2, inv_ls, int(kind), g.T, k.T, out_cols)


@cuda.jit
def _stationary_input_contract_kernel(x1, x2, inv_ls, variance, kind, g, out):
    start, stride = cuda.grid(1), cuda.gridsize(1)
    for i in range(start, x1.shape[0], stride):
        _d_input_contract_one(x1, i, x2, g, inv_ls, variance, kind, out)


def stationary_input_contract(x1, x2, inv_ls, variance, kind, gt, out):
    """out[i, c] = sum_j G_ij dK(x1_i, x2_j)/dx1_ic (``gram.input_contract_one`` per row,
    as the CPU loop); takes ``gt = G^T`` (C order) so that a warp reads contiguous memory."""
    _stationary_input_contract_kernel[_launch_1d(x1.shape[0])](
        x1, x2, inv_ls, float(variance), int(kind), gt.T, out)


# ---------------------------------------------------------------------------------------
# robust-max Gauss-Hermite products (twins of fastep.likelihoods.robustmax)
# ---------------------------------------------------------------------------------------
#: Most classes the gradient kernel supports (its per-thread scratch is a local array).
MAX_CLASSES = 256
_SCRATCH = 2 * MAX_CLASSES       # a global, so that numba sees a compile-time constant
_d_prob_largest_one = device_function(_rm.prob_largest_one)
_d_prob_largest_grad_one = device_function(_rm.prob_largest_grad_one)


@cuda.jit
def _prob_largest_all_kernel(mean, var, nodes, weights, out):
    start, stride = cuda.grid(1), cuda.gridsize(1)
    n, J = mean.shape
    for t in range(start, n * J, stride):           # a thread owns one (point, class) pair
        i = t // J
        j = t - i * J
        out[i, j] = _d_prob_largest_one(mean, var, i, j, nodes, weights)


def prob_largest_all(mean, var, nodes, weights, out):
    """out[i, j] = S(x_i, j) (twin of ``robustmax.prob_largest_all``)."""
    _prob_largest_all_kernel[_launch_1d(mean.shape[0] * mean.shape[1])](
        mean, var, nodes, weights, out)


@cuda.jit
def _prob_largest_grad_kernel(mean, var, labels, nodes, weights, s, ds_dmean, ds_dvar):
    scratch = cuda.local.array(_SCRATCH, float64)
    start, stride = cuda.grid(1), cuda.gridsize(1)
    for i in range(start, mean.shape[0], stride):   # a thread owns row i of every output
        s[i] = _d_prob_largest_grad_one(mean, var, i, labels[i], nodes, weights, scratch,
                                        ds_dmean, ds_dvar)


def prob_largest_grad(mean, var, labels, nodes, weights, s, ds_dmean, ds_dvar):
    """S(x_i, labels[i]) and its gradient (twin of ``robustmax.prob_largest_grad``)."""
    if mean.shape[1] > MAX_CLASSES:
        raise ValueError(f"the GPU robust-max gradient supports at most {MAX_CLASSES} classes; "
                         f"got {mean.shape[1]}. Use device='cpu'.")
    _prob_largest_grad_kernel[_launch_1d(mean.shape[0])](
        mean, var, labels, nodes, weights, s, ds_dmean, ds_dvar)
