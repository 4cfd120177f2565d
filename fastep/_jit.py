"""The one place that spells fastep's Numba options and shared signatures.

Every compiled kernel in fastep is built with :func:`jit` (serial) or
:func:`pjit` (``parallel=True``): ``cache=True`` so a warm process never
recompiles, ``error_model="numpy"`` so division follows IEEE semantics
(no Python exceptions inside hot loops) and *no* ``fastmath``: EP lives in
the tails of the normal CDF where reassociation and flush-to-zero are not
harmless.

Likelihoods plug into the EP engine through one scalar function type,
:data:`TILTED_SIG`::

    tilted(y, extra, mu_cav, var_cav, alpha, params) -> (log_Z, dlogZ_dmu, d2logZ_dmu2)

Kernels take the function as a first-class ``FunctionType`` argument, which
Numba can cache (a plain dispatcher argument would defeat the on-disk cache).
"""
from __future__ import annotations

import functools
import os

# Numba's OpenMP threading layer spins its idle threads by default; between the
# BLAS calls of an EP sweep they then starve OpenBLAS's threads on the same cores
# (10-100x slowdowns seen on 2 cores).  Passive waiting removes that; set
# OMP_WAIT_POLICY yourself before importing fastep to override.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numba  # noqa: E402
from numba import types  # noqa: E402

jit = functools.partial(numba.njit, cache=True, error_model="numpy")
pjit = functools.partial(numba.njit, cache=True, error_model="numpy", parallel=True)

f8 = types.float64
f8_1d = types.float64[::1]

#: Signature of a likelihood's scalar tilted-moment function.
TILTED_SIG = types.UniTuple(f8, 3)(f8, f8_1d, f8, f8, f8, f8_1d)
#: Type of such a function when passed to a compiled kernel.
TiltedFn = types.FunctionType(TILTED_SIG)



def tilted_function(fn):
    """Compile ``fn`` as a scalar tilted-moment function (cached, eager)."""
    return jit(TILTED_SIG)(fn)
