"""Dense linear algebra on LAPACK/BLAS, with a blocked Cholesky for large n.

Why a blocked Cholesky: the OpenBLAS that NumPy/SciPy wheels bundle crashes
(segmentation fault) inside its *threaded* ``dpotrf`` for matrices around
n = 16,000 on some machines, while smaller factorisations and the level-3
BLAS routines are fine.  :func:`cholesky_inplace` therefore factorises
matrices above :data:`BLOCK_THRESHOLD` as a right-looking blocked algorithm
whose pieces are all LAPACK/BLAS calls of moderate size: ``dpotrf`` on
diagonal blocks of at most :data:`BLOCK_SIZE`, ``dtrsm`` on the panel below,
and a symmetric rank-k update (``P @ P.T``, which NumPy sends to ``dsyrk``)
of the trailing matrix.  The flop count is the same as one ``dpotrf``.

Threads: small problems (n < :data:`SMALL_N`) run with single-threaded BLAS.
Threads gain little there, and when the cores are oversubscribed (other busy
processes, parallel batch jobs) OpenBLAS's spinning threads make small calls
10-100x slower (measured on the 2-core CI machine type while a test suite ran
beside it: a 400 x 400 ``dpotrf`` took 0.5 s instead of 0.8 ms).  Larger problems
keep the BLAS threading the user configured.
"""
from __future__ import annotations

import contextlib
import ctypes
import functools

import numpy as np
from scipy.linalg import blas, lapack

from .exceptions import NotPositiveDefiniteError

try:
    from threadpoolctl import ThreadpoolController
except ImportError:  # pragma: no cover - a core dependency, but degrade gracefully
    ThreadpoolController = None

_CONTROLLER: list = []


def _controller():
    """The process's threadpoolctl controller (made once; None without threadpoolctl)."""
    if ThreadpoolController is None:
        return None
    if not _CONTROLLER:
        _CONTROLLER.append(ThreadpoolController())
    return _CONTROLLER[0]


def single_threaded_blas():
    """Context manager limiting the BLAS/LAPACK thread pools to one thread."""
    if _controller() is None:
        return contextlib.nullcontext()
    return _controller().limit(limits=1, user_api="blas")

BLOCK_THRESHOLD = 8192
BLOCK_SIZE = 2048


#: Below this size the whole EP loop runs with single-threaded BLAS (see above).
SMALL_N = 1024


def blas_threads_for(n, one_pool=False):
    """Context manager choosing the BLAS threading for a problem of size n.

    ``one_pool``: for dense work whose cubic part is SciPy's LAPACK/BLAS (EP's and
    Laplace's loops), cap every *other* BLAS library to one thread, so that only SciPy's
    pool runs threaded (:func:`one_blas_pool`).  Not above :data:`BLOCK_THRESHOLD`, where
    the blocked Cholesky's trailing updates are NumPy matrix products.
    """
    if n < SMALL_N:
        return single_threaded_blas()
    if one_pool and n <= BLOCK_THRESHOLD:
        return one_blas_pool()
    return contextlib.nullcontext()


@functools.lru_cache(maxsize=1)          # the libraries loaded with NumPy and SciPy
def _other_blas():
    """threadpoolctl controllers of the BLAS libraries loaded beside SciPy's own, or None.

    NumPy's and SciPy's wheels each bundle an OpenBLAS; fastep's factorisations and
    triangular solves run in SciPy's, its matrix-vector products in NumPy's.
    """
    import os

    import scipy
    if _controller() is None:
        return None
    libs = _controller().select(user_api="blas")
    root = os.path.realpath(os.path.dirname(scipy.__file__))   # scipy/ and scipy.libs/
    other = [c.filepath for c in libs.lib_controllers
             if not os.path.realpath(c.filepath).startswith(root)]
    if not other or len(other) == len(libs.lib_controllers):   # one shared, or unknown
        return None
    return _controller().select(filepath=other)


def one_blas_pool():
    """Context manager capping the BLAS libraries other than SciPy's to one thread.

    An idle OpenBLAS thread spins for a while (about 0.1 s) before it sleeps.  When two
    OpenBLAS libraries take turns, as NumPy's matrix-vector products and SciPy's
    ``dpotrf``/``dtrsm`` do in every EP sweep, each one's spinning threads hold the cores
    the other one's threads need: a dense EP sweep at n = 1,257 took 100-120 ms with both
    threaded and 60 ms with NumPy's capped (2 cores; ``scripts/ep_floor.py``).
    """
    other = _other_blas()
    return contextlib.nullcontext() if other is None else other.limit(limits=1)


def _potrf(a, what):
    c, info = lapack.dpotrf(a, lower=1, overwrite_a=1, clean=0)
    if info > 0:
        raise NotPositiveDefiniteError(
            f"{what} is not positive definite (Cholesky failed at pivot {info}).")
    if info < 0:  # pragma: no cover - argument error inside LAPACK
        raise ValueError(f"dpotrf: illegal argument {-info}")
    return c


def cholesky_inplace(a: np.ndarray, what: str = "the matrix") -> np.ndarray:
    """Lower Cholesky factor of the F-contiguous SPD matrix ``a``, in place.

    Only the lower triangle of ``a`` is read; on return it holds ``L`` with
    ``a = L L^T`` (the strict upper triangle is left untouched).  Raises
    :class:`NotPositiveDefiniteError` naming ``what`` on failure.
    """
    if not a.flags.f_contiguous:
        raise ValueError("cholesky_inplace needs an F-contiguous array")
    n = a.shape[0]
    if n <= BLOCK_THRESHOLD:
        c = _potrf(a, what)
        if c is not a:  # pragma: no cover - f2py copied despite F order
            a[...] = c
        return a
    for k in range(0, n, BLOCK_SIZE):
        e = min(k + BLOCK_SIZE, n)
        d = np.asfortranarray(a[k:e, k:e])
        d = _potrf(d, what)
        a[k:e, k:e] = d
        if e == n:
            break
        panel = blas.dtrsm(1.0, d, np.asfortranarray(a[e:, k:e]), side=1, lower=1,
                           trans_a=1, overwrite_b=1)
        a[e:, k:e] = panel
        a[e:, e:] -= panel @ panel.T
    return a


def solve_lower_inplace(l: np.ndarray, b: np.ndarray, trans: bool = False) -> np.ndarray:
    """Solve ``L X = B`` (or ``L^T X = B``) in place for F-contiguous ``B``."""
    out = blas.dtrsm(1.0, l, b, side=0, lower=1, trans_a=int(trans), overwrite_b=1)
    if out is not b:  # pragma: no cover
        b[...] = out
    return b


# --- level-3 BLAS without the GIL --------------------------------------------------------
# SciPy's f2py BLAS wrappers hold the GIL, so two Python threads calling them run one after
# the other.  The same Fortran routines reached through SciPy's Cython BLAS table and a
# ctypes function pointer release it (ctypes drops the GIL around foreign calls), so chunks
# of a streamed sweep can run on several cores with single-threaded BLAS each.
_VP = ctypes.c_void_p
_NOGIL: dict = {}


def _blas_fn(name, n_args, module="scipy.linalg.cython_blas"):
    """SciPy's BLAS (or, with ``module="scipy.linalg.cython_lapack"``, LAPACK) routine
    ``name`` of ``n_args`` pointer arguments as a ctypes function (made once)."""
    if (module, name) not in _NOGIL:
        from numba.extending import get_cython_function_address
        proto = ctypes.CFUNCTYPE(None, *([_VP] * n_args))
        _NOGIL[module, name] = proto(get_cython_function_address(module, name))
    return _NOGIL[module, name]


def _ints(*values):
    return [ctypes.byref(ctypes.c_int(v)) for v in values]


def _check_f64(what, a, writeable=True):
    if (a.dtype != np.float64 or a.ndim != 2 or not a.flags.f_contiguous
            or (writeable and not a.flags.writeable)):
        raise ValueError(f"{what} must be a {'writeable ' if writeable else ''}F-contiguous "
                         f"2-d float64 array")


def trmm_lower_nogil(L, B, trans=False):
    """``B <- L B`` (or ``L^T B`` with ``trans``) in place (dtrmm) for lower-triangular ``L``
    (m x m) and ``B`` (m x c), both F-contiguous float64, without holding the GIL."""
    _check_f64("L", L, writeable=False)
    _check_f64("B", B)
    m, c = B.shape
    if L.shape != (m, m):
        raise ValueError(f"L must be ({m}, {m}); got {L.shape}")
    if m and c:
        one = ctypes.c_double(1.0)
        mm, cc, lda, ldb = _ints(m, c, m, m)
        _blas_fn("dtrmm", 11)(b"L", b"L", b"T" if trans else b"N", b"N", mm, cc,
                              ctypes.byref(one), L.ctypes.data, lda, B.ctypes.data, ldb)
    return B


#: Blocks of at most this many rows are factorised and inverted by LAPACK itself in
#: :func:`cholesky_inverse_inplace`.
INVERSE_LEAF = 128
_LAPACK = "scipy.linalg.cython_lapack"


def cholesky_inverse_inplace(a, what="the matrix"):
    """``L^-1`` of the Cholesky factor ``L`` of the F-contiguous SPD matrix ``a``, in place:
    on return ``a``'s lower triangle holds ``L^-1`` (its strict upper triangle is left as
    it was); returns ``diag(L)``.

    The recursive block algorithm (Toledo 1997 for the factorisation; the block inverse of
    LAPACK's ``dtrtri``), fused: with ``a = [[A11, .], [A21, A22]]``, invert the factor of
    ``A11`` (recursively, giving ``M11 = L11^-1``), then ``L21 = A21 M11^T`` (``dtrmm``),
    ``A22 <- A22 - L21 L21^T`` (``dsyrk``), invert the factor of ``A22`` (``M22``), and
    ``L^-1``'s lower-left block ``-M22 L21 M11`` (two ``dtrmm``).  The flops are those of
    ``dpotrf`` + ``dtrtri`` (2/3 n^3), but almost all of them in ``dtrmm``/``dsyrk`` on
    half-size blocks, which OpenBLAS runs near its matrix-product speed: at n = 1,257 on
    2 cores 13.4 ms against 9.4 + 11.1 ms (one thread: 20.7 against 15.5 + 22.4 ms;
    ``scripts/ep_floor.py``).  Blocks of at most :data:`INVERSE_LEAF` rows go to
    ``dpotrf`` and ``dtrtri``.  Raises :class:`NotPositiveDefiniteError` naming ``what``
    where ``a`` is not positive definite (``a`` is then overwritten in part).

    Accuracy: the products with explicit inverses lose more digits than ``dtrtri``'s
    triangular solves where ``a`` is ill-conditioned (the absolute error of
    ``diag(a^-1)`` for EP's B at condition numbers 7e2, 4e4, 4e6, 4e8: 8.5e-15, 2.4e-12,
    4.3e-10, 2.4e-7, against 1.0e-14, 1.5e-12, 8.4e-11, 9.6e-9); the dense EP refresh
    uses it only where B's condition number is at most about 1e6
    (:data:`fastep.inference._dense_posterior.RECURSIVE_MAX_T`).
    """
    p = _Blocks(a)
    diag = np.empty(p.n)
    _cholesky_inverse_block(p, 0, p.n, diag, what)
    return diag


def tri_gram_inplace(a):
    """``L^T L`` of the lower-triangular ``L`` held in the F-contiguous ``a``'s lower
    triangle, in place there (LAPACK's ``dlauum``; the strict upper triangle is left as it
    was): with ``L^-1`` in ``a``, ``(L L^T)^-1``.  Recursive like
    :func:`cholesky_inverse_inplace`: with ``L = [[L11, 0], [L21, L22]]``, ``L^T L`` has
    ``L11^T L11 + L21^T L21`` (recursion, then ``dsyrk``), ``L22^T L21`` (``dtrmm``) and
    ``L22^T L22`` (recursion); n = 1,257 on 2 cores: 8.2 ms against ``dlauum``'s 11.3 ms.
    Returns ``a``."""
    p = _Blocks(a)
    _tri_gram_block(p, 0, p.n)
    return a


class _Blocks:
    """A square F-contiguous float64 array (checked) for in-place LAPACK/BLAS calls on its
    blocks: ``at(i, j)``, the address of entry (i, j), and ``ld``, its leading dimension."""

    def __init__(self, a):
        _check_f64("a", a)
        self.n = a.shape[0]
        if a.shape != (self.n, self.n):
            raise ValueError(f"a must be square; got shape {a.shape}")
        self.a, self.base = a, a.ctypes.data
        self.ld = ctypes.byref(ctypes.c_int(max(1, self.n)))   # LAPACK's lda >= 1

    def at(self, i, j):
        return _VP(self.base + 8 * (i + j * self.n))


_ONE, _MINUS_ONE = ctypes.byref(ctypes.c_double(1.0)), ctypes.byref(ctypes.c_double(-1.0))


def _cholesky_inverse_block(p, lo, hi, diag, what):
    """:func:`cholesky_inverse_inplace` of the block ``[lo:hi, lo:hi]`` of ``p``
    (:class:`_Blocks`; its Schur complement already formed there)."""
    m, at, ld = hi - lo, p.at, p.ld
    if m == 0:
        return
    if m <= INVERSE_LEAF:
        info = ctypes.c_int(0)
        mm = ctypes.byref(ctypes.c_int(m))
        _blas_fn("dpotrf", 5, _LAPACK)(b"L", mm, at(lo, lo), ld, ctypes.byref(info))
        if info.value < 0:  # pragma: no cover - an argument error inside LAPACK
            raise ValueError(f"dpotrf: illegal argument {-info.value}")
        if info.value > 0:
            raise NotPositiveDefiniteError(
                f"{what} is not positive definite (Cholesky failed at pivot "
                f"{lo + info.value}).")
        diag[lo:hi] = np.diagonal(p.a)[lo:hi]
        _blas_fn("dtrtri", 6, _LAPACK)(b"L", b"N", mm, at(lo, lo), ld, ctypes.byref(info))
        if info.value != 0:  # pragma: no cover - a successful Cholesky factor is regular
            raise NotPositiveDefiniteError(f"dtrtri failed (info {info.value}) on {what}.")
        return
    h = lo + m // 2
    _cholesky_inverse_block(p, lo, h, diag, what)             # a11 -> M11
    rows, cols = _ints(hi - h, h - lo)
    trmm = _blas_fn("dtrmm", 11)
    # L21 = A21 L11^-T = A21 M11^T
    trmm(b"R", b"L", b"T", b"N", rows, cols, _ONE, at(lo, lo), ld, at(h, lo), ld)
    _blas_fn("dsyrk", 10)(b"L", b"N", rows, cols, _MINUS_ONE, at(h, lo), ld, _ONE,
                          at(h, h), ld)
    _cholesky_inverse_block(p, h, hi, diag, what)             # a22 -> M22
    # (L^-1)21 = -M22 L21 M11
    trmm(b"R", b"L", b"N", b"N", rows, cols, _ONE, at(lo, lo), ld, at(h, lo), ld)
    trmm(b"L", b"L", b"N", b"N", rows, cols, _MINUS_ONE, at(h, h), ld, at(h, lo), ld)


def _tri_gram_block(p, lo, hi):
    """:func:`tri_gram_inplace` of the block ``[lo:hi, lo:hi]`` of ``p``."""
    m, at, ld = hi - lo, p.at, p.ld
    if m == 0:
        return
    if m <= INVERSE_LEAF:
        info = ctypes.c_int(0)
        _blas_fn("dlauum", 5, _LAPACK)(b"L", ctypes.byref(ctypes.c_int(m)), at(lo, lo), ld,
                                       ctypes.byref(info))
        return
    h = lo + m // 2
    _tri_gram_block(p, lo, h)                                 # L11^T L11
    rows, cols = _ints(hi - h, h - lo)
    _blas_fn("dsyrk", 10)(b"L", b"T", cols, rows, _ONE, at(h, lo), ld, _ONE, at(lo, lo), ld)
    _blas_fn("dtrmm", 11)(b"L", b"L", b"T", b"N", rows, cols, _ONE, at(h, h), ld,
                          at(h, lo), ld)                      # L22^T L21
    _tri_gram_block(p, h, hi)


def syrk_lower_nogil(alpha, A, C):
    """``C <- C + alpha A A^T`` on the lower triangle of ``C`` (m x m, F-contiguous) for
    ``A`` (m x k, C- or F-contiguous float64), without holding the GIL."""
    _check_f64("C", C)
    m = C.shape[0]
    if C.shape != (m, m):
        raise ValueError(f"C must be square; got shape {C.shape}")
    if A.dtype != np.float64 or A.ndim != 2 or A.shape[0] != m:
        raise ValueError(f"A must be a float64 array with {m} rows; got {A.dtype} {A.shape}")
    if A.flags.f_contiguous:
        trans, lda = b"N", m
    elif A.flags.c_contiguous:                  # A^T is F-contiguous (k x m): C += A^T^T A^T
        trans, lda = b"T", A.shape[1]
    else:
        A = np.asfortranarray(A)
        trans, lda = b"N", m
    k = A.shape[1]
    if m and k:
        a, one = ctypes.c_double(alpha), ctypes.c_double(1.0)
        mm, kk, la, lc = _ints(m, k, max(lda, 1), m)
        _blas_fn("dsyrk", 10)(b"L", trans, mm, kk, ctypes.byref(a), A.ctypes.data, la,
                              ctypes.byref(one), C.ctypes.data, lc)
    return C
