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
import logging
import os
import threading
import types as types_module

# Numba's OpenMP threading layer spins its idle threads by default; between the
# BLAS calls of an EP sweep they then starve OpenBLAS's threads on the same cores
# (10-100x slowdowns seen on 2 cores).  Passive waiting removes that; set
# OMP_WAIT_POLICY yourself before importing fastep to override.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numba  # noqa: E402
from numba import types  # noqa: E402

_OPTIONS = {"cache": True, "error_model": "numpy"}


_ANNOUNCED = threading.Event()
_COMPILING = threading.RLock()


def _announce_compiling(target):
    """Say once per process (logging, INFO) that kernels are being compiled, when the
    first one missing from the on-disk cache is met: the silence that follows on a
    fresh install is compilation, not a hang."""
    if _ANNOUNCED.is_set():
        return
    try:
        index = target._cache._cache_file._index_path
    except AttributeError:                    # Numba's cache layout changed: stay quiet
        return
    if not os.path.exists(index):
        _ANNOUNCED.set()
        logging.getLogger("fastep.compile").info(
            "compiling fastep's kernels for this machine (first use only; they are cached "
            "on disk for later runs)")


def compile_declared(dispatcher):
    """Compile (or load from the on-disk cache) the signatures a dispatcher was declared
    with, if not done yet; from then on it accepts only those (as an eager
    ``numba.njit(signature)`` does)."""
    target = getattr(dispatcher, "_dispatcher", dispatcher)
    with _COMPILING:          # threads meeting the hook at once wait for the first one
        signatures = vars(target).get("_fastep_signatures")
        if signatures is None:
            return
        _announce_compiling(target)
        for sig in signatures:
            target.compile(sig)
        target.disable_compile()
        del target._fastep_signatures
        vars(target).pop("_compile_for_args", None)      # back to Numba's own


def _lazy(dispatcher, signatures):
    """``dispatcher`` (built without signatures) that compiles ``signatures`` at its first
    call from Python, not at import.  Compiled callers type it by their own argument
    types, as any lazy dispatcher (cached on disk like the rest)."""
    if not signatures:
        return dispatcher
    dispatcher._fastep_signatures = signatures

    def first_call(*args, **kws):          # Numba calls this when no version matches and
        compile_declared(dispatcher)        # then calls what it returns with the arguments
        return dispatcher

    dispatcher._compile_for_args = first_call
    return dispatcher


def _njit(options, args):
    """``numba.njit`` with fastep's options, as ``@jit`` (compiled by argument types at
    the first call) or ``@jit(signature or [signatures])`` (those, at the first call)."""
    if len(args) == 1 and isinstance(args[0], types_module.FunctionType):
        return numba.njit(**options)(args[0])
    sigs = list(args[0]) if args and isinstance(args[0], list) else list(args[:1])
    return lambda fn: _lazy(numba.njit(**options)(fn), sigs)


def jit(*args, **options):
    """Serial compiled function (``cache=True``, IEEE division, no fastmath), used as
    ``@jit`` or ``@jit(signature)``.  Nothing compiles at import: a declared signature
    compiles (or loads from the cache) at the first call."""
    return _njit({**_OPTIONS, **options}, args)


def _parallel_njit(*args, **options):
    return _njit({**_OPTIONS, "parallel": True, **options}, args)


_WORKQUEUE_LOCK = threading.Lock()
_workqueue = None          # whether Numba's threading layer is "workqueue" (None: unknown)


def _serialise_calls():
    """Whether parallel kernels must not run from two Python threads at once: Numba's
    fallback threading layer, "workqueue" (no TBB or OpenMP found), is not thread-safe
    and aborts the process on concurrent launches; TBB and OpenMP are thread-safe."""
    global _workqueue
    if _workqueue is None:
        try:
            _workqueue = numba.threading_layer() == "workqueue"
        except ValueError:                 # no parallel kernel has run yet: be careful
            return True
    return _workqueue


class ParallelKernel:
    """A ``parallel=True`` dispatcher, called from Python only, whose concurrent calls
    from several threads are serialised where the threading layer requires it (see
    :func:`_serialise_calls`); attributes are the dispatcher's."""

    def __init__(self, dispatcher):
        self._dispatcher = dispatcher
        functools.update_wrapper(self, dispatcher.py_func)

    def __call__(self, *args):
        if _serialise_calls():
            with _WORKQUEUE_LOCK:
                return self._dispatcher(*args)
        return self._dispatcher(*args)

    def __getattr__(self, name):
        return getattr(self._dispatcher, name)


def pjit(*args, **options):
    """:func:`jit` with ``parallel=True`` (a :class:`ParallelKernel`); used as ``@pjit`` or
    ``@pjit(signature)``."""
    if len(args) == 1 and not options and isinstance(args[0], types_module.FunctionType):
        return ParallelKernel(_parallel_njit(args[0]))
    decorate = _parallel_njit(*args, **options)
    return lambda fn: ParallelKernel(decorate(fn))

f8 = types.float64
f8_1d = types.float64[::1]

#: Signature of a likelihood's scalar tilted-moment function.
TILTED_SIG = types.UniTuple(f8, 3)(f8, f8_1d, f8, f8, f8, f8_1d)
#: Type of such a function when passed to a compiled kernel.
TiltedFn = types.FunctionType(TILTED_SIG)



def tilted_function(fn):
    """Compile ``fn`` as a scalar tilted-moment function (cached, eager)."""
    return jit(TILTED_SIG)(fn)
