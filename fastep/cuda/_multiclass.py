"""Robust-max Gauss-Hermite products on the GPU (host arrays in, host arrays out).

``RobustMax(device="cuda")`` calls these: S(x, j) for every point and class, and
S(x_i, y_i) with its gradient, by the CUDA twins of the compiled CPU loops
(:mod:`fastep.cuda.kernels`), which share their scalar code with the CPU.  No dense
algebra is involved, so numba's own device arrays suffice (CuPy is not needed).
"""
from __future__ import annotations

import numpy as np
from numba import cuda

from . import kernels as ck


def _to_device(*arrays, dtype=float):
    return [cuda.to_device(np.array(a, dtype=dtype, order="C")) for a in arrays]


def prob_largest(mean, var, nodes, weights):
    """S(x_i, j) for every row i and class j, shape (n, J)."""
    d_in = _to_device(mean, var, nodes, weights)
    out = cuda.device_array(np.shape(mean))
    ck.prob_largest_all(*d_in, out)
    return out.copy_to_host()


def prob_largest_grad(mean, var, labels, nodes, weights):
    """``(S, dS/dmean, dS/dvar)`` of S(x_i, labels[i])."""
    d_mean, d_var, d_nodes, d_weights = _to_device(mean, var, nodes, weights)
    (d_labels,) = _to_device(labels, dtype=np.int64)
    s, dm, dv = (cuda.device_array(np.shape(labels)), cuda.device_array(np.shape(mean)),
                 cuda.device_array(np.shape(mean)))
    ck.prob_largest_grad(d_mean, d_var, d_labels, d_nodes, d_weights, s, dm, dv)
    return s.copy_to_host(), dm.copy_to_host(), dv.copy_to_host()
