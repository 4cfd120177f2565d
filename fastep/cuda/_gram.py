"""Gram matrices, diagonals and gradient contractions of fastep kernels on the GPU.

Mirrors :mod:`fastep.kernels` kernel by kernel: stationary kernels (RBF, Matern
1/2, 3/2, 5/2; ARD) run the CUDA twins of the compiled CPU loops
(:mod:`fastep.cuda.kernels`); constant, white and linear kernels are one array
expression each; sums and products recurse exactly as ``Sum``/``Product`` do on the
CPU.  A scikit-learn kernel has no GPU form: it is evaluated on the host and copied.
"""
from __future__ import annotations

import numpy as np

from ..kernels._base import (ConstantKernel, Linear, Product, SklearnKernel, Sum, WhiteKernel,
                             as_kernel)
from ..kernels.stationary import _Stationary
from . import kernels as ck
from ._backend import get_backend


def _dev(be, a):
    return None if a is None else be.asarray(a)


def _inv_ls(be, kernel, d):
    return be.asarray(kernel._inv_ls(d))


def gram(kernel, X, Y=None, backend=None):
    """``kernel(X, Y)`` as a C-ordered device array (X, Y: host or device arrays)."""
    be = get_backend(backend)
    kernel = as_kernel(kernel)
    X = be.asarray(X)
    X = X[:, None] if X.ndim == 1 else X
    Y = _dev(be, Y)
    if Y is not None and Y.ndim == 1:
        Y = Y[:, None]
    return _gram(be, kernel, X, Y)


def _gram(be, k, X, Y):
    xp = be.xp
    n2 = X.shape[0] if Y is None else Y.shape[0]
    if isinstance(k, _Stationary):
        out = xp.empty((X.shape[0], n2))
        ck.stationary_gram(X, X if Y is None else Y, _inv_ls(be, k, X.shape[1]), k.variance,
                           k._kind, out)
        return out
    if isinstance(k, Sum):
        return _gram(be, k.k1, X, Y) + _gram(be, k.k2, X, Y)
    if isinstance(k, Product):
        return _gram(be, k.k1, X, Y) * _gram(be, k.k2, X, Y)
    if isinstance(k, ConstantKernel):
        return xp.full((X.shape[0], n2), float(k._params[0].value[0]))
    if isinstance(k, WhiteKernel):
        if Y is None:
            return xp.eye(X.shape[0]) * float(k._params[0].value[0])
        return xp.zeros((X.shape[0], n2))
    if isinstance(k, Linear):
        return xp.ascontiguousarray(float(k._params[0].value[0]) * (X @ (X if Y is None else Y).T))
    host = k(be.to_host(X), None if Y is None else be.to_host(Y))     # SklearnKernel, others
    return be.asarray(host)


def diag(kernel, X, backend=None):
    """``kernel.diag(X)`` as a device array."""
    be = get_backend(backend)
    X = be.asarray(X)
    return _diag(be, as_kernel(kernel), X[:, None] if X.ndim == 1 else X)


def _diag(be, k, X):
    xp = be.xp
    if isinstance(k, Sum):
        return _diag(be, k.k1, X) + _diag(be, k.k2, X)
    if isinstance(k, Product):
        return _diag(be, k.k1, X) * _diag(be, k.k2, X)
    if isinstance(k, _Stationary):
        return xp.full(X.shape[0], k.variance)
    if isinstance(k, (ConstantKernel, WhiteKernel)):
        return xp.full(X.shape[0], float(k._params[0].value[0]))
    if isinstance(k, Linear):
        return float(k._params[0].value[0]) * xp.sum(X * X, axis=1)
    return be.asarray(k.diag(be.to_host(X)))


def gradient_contract(kernel, X, G, Y=None, backend=None):
    """``sum_jk G_jk dK_jk / dtheta_p`` for every free log-hyperparameter (host array),
    the GPU twin of :meth:`fastep.kernels.Kernel.gradient_contract`; ``G`` may be a
    device array (e.g. the dense EP weights ``(b b^T - R) / 2``)."""
    be = get_backend(backend)
    kernel = as_kernel(kernel)
    if isinstance(kernel, SklearnKernel):
        return kernel.gradient_contract(be.to_host(X), be.to_host(G),
                                        None if Y is None else be.to_host(Y))
    X = be.asarray(X)
    X = X[:, None] if X.ndim == 1 else X
    Y = _dev(be, Y)
    if Y is not None and Y.ndim == 1:
        Y = Y[:, None]
    G = be.asarray(G)
    shape = (X.shape[0], X.shape[0] if Y is None else Y.shape[0])
    if G.shape != shape:
        raise ValueError(f"G must have the shape of K(X, Y), {shape}; got {G.shape}.")
    full = np.asarray(_contract_all(be, kernel, X, Y, G), dtype=float)
    return full[kernel._free_mask()]


def _contract_all(be, k, X, Y, G):
    xp = be.xp
    if isinstance(k, _Stationary):
        x2 = X if Y is None else Y
        cols = xp.empty((x2.shape[0], 1 + X.shape[1]))
        ck.stationary_contract(X, x2, _inv_ls(be, k, X.shape[1]), k.variance, k._kind, G, cols)
        out = be.to_host(xp.sum(cols, axis=0))
        if k._params[1].value.size == 1:
            return np.array([out[0], out[1:].sum()])
        return out
    if isinstance(k, Sum):
        return np.concatenate([_contract_all(be, k.k1, X, Y, G), _contract_all(be, k.k2, X, Y, G)])
    if isinstance(k, Product):
        return np.concatenate([_contract_all(be, k.k1, X, Y, G * _gram(be, k.k2, X, Y)),
                               _contract_all(be, k.k2, X, Y, G * _gram(be, k.k1, X, Y))])
    if isinstance(k, ConstantKernel):
        return [float(k._params[0].value[0]) * float(xp.sum(G))]
    if isinstance(k, WhiteKernel):
        return [float(k._params[0].value[0]) * float(xp.trace(G)) if Y is None else 0.0]
    if isinstance(k, Linear):
        return [float(xp.sum(G * _gram(be, k, X, Y)))]
    return k._contract_all(be.to_host(X), None if Y is None else be.to_host(Y), be.to_host(G))
