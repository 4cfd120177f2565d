"""The backend contract: the operations where a CPU and a GPU differ.

Every algorithm of :mod:`fastep.inference` is written once, over a :class:`Backend`.  The
backend supplies the array module, the dense linear algebra, the compiled site loops,
the Gram matrices of kernels, and the way a streamed pass shares its chunks of data
among workers.  Two backends exist: :class:`fastep.backend.cpu.CPUBackend` (NumPy,
LAPACK/BLAS and Numba loops) and :class:`fastep.backend.cuda.CUDABackend` (CuPy and
``numba.cuda`` kernels).  A new target implements this class and runs every algorithm.

Over 450 lines: one job, the backend contract: each operation a CPU and a GPU do
differently, documented once for both.
"""
from __future__ import annotations

import abc
import contextlib
from typing import (TYPE_CHECKING, Any, Callable, ContextManager, List, Optional, Sequence,
                    Tuple)

import numpy as np

from .._memory import check_dense_memory, host_memory_available
from .._sites import SiteBuffers, SiteData

if TYPE_CHECKING:                                       # pragma: no cover
    from ..likelihoods import Likelihood

#: An array of a backend's array module (``Backend.xp``: NumPy or CuPy).
XArray = Any

#: The values of ``device`` that :func:`fastep.backend.resolve` accepts.
DEVICES = ("cpu", "cuda")
#: Rows per chunk of a streamed pass on the CPU: an m x 8192 block stays in cache.
CHUNK_ROWS = 8192


class Backend(abc.ABC):
    """Operations an algorithm needs from its target (see the module docstring).

    Attributes
    ----------
    name : str
        ``"cpu"`` or ``"cuda"``: the ``device`` value that resolves to this backend.
    xp : module
        The array module (NumPy or CuPy).  Element-wise work in the algorithms uses it.
    ep_methods : tuple of str
        EP schedules this backend runs (``"parallel"``, ``"sequential"``).

    Notes
    -----
    A backend pickles as the factory that makes it (``__reduce__``), so a fitted estimator
    travels to a worker process (joblib) and finds its backend there.

    Array arguments are this backend's arrays (``xp`` arrays).  Lower-triangular
    factors returned by :meth:`cholesky` may hold stale values above the diagonal: every
    consumer reads the lower triangle only.  Results that leave an algorithm (an
    ``EPResult``) are host (NumPy) arrays; :meth:`to_host` makes them.

    Examples
    --------
    >>> import numpy as np
    >>> from fastep.backend import resolve
    >>> be = resolve("cpu")
    >>> L = be.cholesky(np.array([[4.0, 2.0], [2.0, 5.0]]), "A")
    >>> be.to_host(be.cho_solve(L, np.array([[4.0], [2.0]]))).ravel().round(12).tolist()
    [1.0, 0.0]
    """

    name = "?"
    xp: Any = None
    ep_methods: tuple = ("parallel",)

    def __repr__(self):
        return f"<fastep backend {self.name!r}>"

    def check_dense_memory(self, n: int, n_matrices: int) -> None:
        """Raise :class:`fastep.DenseMemoryError` unless ``n_matrices`` n x n float64
        matrices fit in this target's free memory (before allocating any of them).

        Parameters
        ----------
        n : int
            The order of the matrices.
        n_matrices : int
            How many of them the algorithm holds at once.
        """
        check_dense_memory(n, n_matrices, self.memory_available(), self.memory_name)

    def memory_available(self) -> Optional[int]:
        """Bytes still free for arrays on this target (None: unknown)."""
        return host_memory_available()

    memory_name = "this machine"

    # --- arrays ---------------------------------------------------------------------
    @abc.abstractmethod
    def asarray(self, a: XArray) -> XArray:
        """``a`` as a float64 array of this backend (no copy if it already is one).

        Parameters
        ----------
        a : array-like
            A host (NumPy) or device array, or anything NumPy converts.
        """
        raise NotImplementedError

    @abc.abstractmethod
    def to_host(self, a: XArray) -> np.ndarray:
        """``a`` as a NumPy array.

        Parameters
        ----------
        a : array
            An array of this backend (a NumPy array is returned as is).
        """
        raise NotImplementedError

    # --- execution ------------------------------------------------------------------
    def threads_for(self, n: int, one_pool: bool = False) -> ContextManager[Any]:
        """Context manager choosing the threading for dense work of size n (``one_pool``:
        work whose cubic part is LAPACK, see :func:`fastep._linalg.one_blas_pool`).

        Parameters
        ----------
        n : int
            The size of the work: the order of its matrices (m for sparse EP's m x m work).
        one_pool : bool, default False
            Whether only SciPy's LAPACK/BLAS pool is to run threaded (EP's dense loops).
        """
        return contextlib.nullcontext()

    def compiled(self) -> ContextManager[Any]:
        """Context manager around compiled parallel code called from worker threads."""
        return contextlib.nullcontext()

    def n_workers(self, n: int, m: int, chunk_size: int) -> int:
        """How many workers share the chunks of a streamed pass over n rows.

        Parameters
        ----------
        n : int
            Rows of data in the pass.
        m : int
            The number of inducing inputs.
        chunk_size : int
            Rows per chunk.
        """
        return 1

    def chunk_rows(self, m: int) -> int:
        """Rows of data per chunk of a streamed pass with m inducing inputs (the default of
        ``chunk_size``).

        Parameters
        ----------
        m : int
            The number of inducing inputs.
        """
        return CHUNK_ROWS

    def run_all(self, jobs: Sequence[Callable[[], Any]]) -> List[Any]:
        """Run zero-argument callables (one per worker); their results in order.

        Parameters
        ----------
        jobs : sequence of callable
            The callables, each taking no argument.
        """
        return [job() for job in jobs]

    # --- dense linear algebra ---------------------------------------------------------
    def dense_work(self, n: int) -> Tuple[Optional[XArray], Optional[XArray]]:
        """Two (n, n) buffers that dense EP reuses across sweeps, or ``(None, None)`` to
        let each operation allocate (a pooling allocator makes that free).

        Parameters
        ----------
        n : int
            The number of sites (the order of the buffers).
        """
        return None, None

    @abc.abstractmethod
    def cholesky(self, a: XArray, what: str) -> XArray:
        """Lower Cholesky factor of the symmetric positive definite ``a`` (whose storage
        may be overwritten); :class:`~fastep.exceptions.NotPositiveDefiniteError` naming
        ``what`` if it is not positive definite.

        Parameters
        ----------
        a : array (n, n)
            The symmetric positive definite matrix, both triangles stored (which one is
            read depends on the layout: the CPU factors a C-ordered ``a`` through its
            transpose, reading its upper triangle).
        what : str
            What ``a`` is, for the error message (e.g. ``"B = I + S^1/2 K S^1/2"``).
        """
        raise NotImplementedError

    @abc.abstractmethod
    def solve_lower(self, L: XArray, B: XArray, trans: bool = False,
                    overwrite: bool = False) -> XArray:
        """``L^-1 B`` (or ``L^-T B``) for lower-triangular L; B 1-d or 2-d.

        Parameters
        ----------
        L : array (n, n)
            Lower-triangular (its strict upper triangle is not read).
        B : array (n,) or (n, k)
            The right-hand side(s).
        trans : bool, default False
            Solve with ``L^T`` instead of ``L``.
        overwrite : bool, default False
            Whether B's storage may hold the result (used where its layout allows).
        """
        raise NotImplementedError

    def cho_solve(self, L: XArray, B: XArray) -> XArray:
        """``(L L^T)^-1 B``.

        Parameters
        ----------
        L : array (n, n)
            A lower Cholesky factor (from :meth:`cholesky`).
        B : array (n,) or (n, k)
            The right-hand side(s).
        """
        return self.solve_lower(L, self.solve_lower(L, B), trans=True, overwrite=True)

    def tri_inverse(self, L: XArray, out: Optional[XArray] = None) -> XArray:
        """``L^-1`` of the lower-triangular ``L`` (whose strict upper triangle is not
        read), zero above the diagonal; ``out`` an (n, n) buffer it may use.

        Parameters
        ----------
        L : array (n, n)
            Lower-triangular, nonsingular.
        out : array (n, n) or None, default None
            A buffer the result may be written to (None: a new array).
        """
        n = L.shape[0]
        if out is None:
            eye = self.xp.eye(n).T                       # F-ordered: solved in place
        else:
            eye = out.T if out.flags.c_contiguous else out
            eye[...] = 0.0
            self.xp.fill_diagonal(eye, 1.0)
        return self.solve_lower(L, eye, overwrite=True)

    def cholesky_inverse(self, a: XArray, what: str, out: Optional[XArray] = None,
                         recursive: bool = True) -> Tuple[XArray, XArray]:
        """``(L^-1, diag(L))`` of the Cholesky factor ``a = L L^T`` of the SPD ``a``
        (whose storage may be overwritten; as in :meth:`cholesky`, both triangles stored),
        ``L^-1`` zero above the diagonal: what a parallel EP refresh needs
        (:mod:`fastep.inference._dense_posterior`), not ``L``.  ``out``: an (n, n) buffer
        it may use.  ``recursive=False``: the factorisation and the triangular inverse one
        after the other, where a backend has a faster recursive form of both together (the
        CPU's) that is less accurate on an ill-conditioned ``a``.  Raises
        :class:`~fastep.exceptions.NotPositiveDefiniteError` naming ``what``.

        Parameters
        ----------
        a : array (n, n)
            The symmetric positive definite matrix (both triangles; may be overwritten).
        what : str
            What ``a`` is, for the error message.
        out : array (n, n) or None, default None
            A buffer ``L^-1`` may be written to (None: a new array or ``a``'s storage).
        recursive : bool, default True
            Allow the backend's recursive form (see above).
        """
        L = self.cholesky(a, what)
        return self.tri_inverse(L, out), self.xp.diagonal(L).copy()

    def inverse_from_tri(self, li: XArray) -> XArray:
        """``(L L^T)^-1 = L^-T L^-1`` as a full symmetric matrix, from ``li = L^-1``.

        Parameters
        ----------
        li : array (n, n)
            ``L^-1``, lower-triangular (zero above the diagonal).
        """
        return li.T @ li

    def r_from_tri(self, li: XArray, s: XArray) -> XArray:
        """``R = diag(s) (L L^T)^-1 diag(s)`` (dense EP's ``(K + S^-1)^-1`` in the B form,
        ``s = S^1/2``) as a full symmetric matrix, from ``li = L^-1``.

        Parameters
        ----------
        li : array (n, n)
            ``L^-1`` of the Cholesky factor L of ``B = I + diag(s) K diag(s)``, zero above
            the diagonal.
        s : array (n,)
            ``S^1/2``: the square roots of the site precisions.
        """
        r = self.inverse_from_tri(li)
        r *= s[:, None]
        r *= s[None, :]
        return r

    def gradient_weights(self, li: XArray, s: XArray, b: XArray) -> XArray:
        """``G = (b b^T - R) / 2`` with ``R`` of :meth:`r_from_tri`, as a full symmetric
        matrix: the weights of dense EP's evidence gradient (B form).

        Parameters
        ----------
        li : array (n, n)
            ``L^-1`` as in :meth:`r_from_tri`.
        s : array (n,)
            ``S^1/2``: the square roots of the site precisions.
        b : array (n,)
            ``b = (K + S^-1)^-1 mu_tilde = nu - tau * mean`` (:attr:`fastep.EPResult.b`).
        """
        return self.weights_from_r(self.r_from_tri(li, s), b)

    def weights_from_r(self, r: XArray, b: XArray) -> XArray:
        """``(b b^T - R) / 2`` in the storage of ``R = (K + S^-1)^-1`` (any form of it).

        Parameters
        ----------
        r : array (n, n)
            ``R``, full symmetric (overwritten with the result).
        b : array (n,)
            ``b = nu - tau * mean`` (:attr:`fastep.EPResult.b`).
        """
        r *= -0.5
        r += 0.5 * self.xp.outer(b, b)
        return r

    @abc.abstractmethod
    def trmm_lower(self, L: XArray, B: XArray, trans: bool = False) -> XArray:
        """``L B`` (or ``L^T B``) for lower-triangular L; may overwrite B (F-ordered).

        Parameters
        ----------
        L : array (m, m)
            Lower-triangular (its strict upper triangle is not read).
        B : array (m, c)
            The matrix multiplied (F-ordered: its storage may hold the result).
        trans : bool, default False
            Multiply by ``L^T`` instead of ``L``.
        """
        raise NotImplementedError

    def tri_matvec(self, L: XArray, z: XArray, trans: bool = False) -> XArray:
        """``L z`` (or ``L^T z``) for lower-triangular L (zero above the diagonal) and a
        vector z.

        Parameters
        ----------
        L : array (n, n)
            Lower-triangular, zero above the diagonal.
        z : array (n,)
            The vector.
        trans : bool, default False
            Multiply by ``L^T`` instead of ``L``.
        """
        return L.T @ z if trans else L @ z

    def sym_matvec(self, K: XArray, z: XArray) -> XArray:
        """``K z`` for a symmetric K and a vector z.

        Parameters
        ----------
        K : array (n, n)
            Symmetric (both triangles stored).
        z : array (n,)
            The vector.
        """
        return K @ z

    def add_gram(self, C: XArray, A: XArray) -> None:
        """``C += A A^T`` (the lower triangle at least).

        Parameters
        ----------
        C : array (m, m)
            Updated in place.
        A : array (m, c)
            The factor.
        """
        C += A @ A.T

    @abc.abstractmethod
    def accumulate(self, P: XArray, b: XArray, G: XArray, tau: XArray, nu: XArray) -> None:
        """``P += G diag(tau) G^T`` (the lower triangle at least) and ``b += G nu``; may
        overwrite G.

        Parameters
        ----------
        P : array (m, m)
            Updated in place (a precision sum of sparse EP).
        b : array (m,)
            Updated in place.
        G : array (m, c)
            One column per site of the chunk (its storage may be overwritten).
        tau : array (c,)
            Weights of the rank-c update (site precisions or their changes: either sign).
        nu : array (c,)
            Weights of ``G nu`` (site precision-means or their changes).
        """
        raise NotImplementedError

    def gradient_direction(self, V: XArray, SV: XArray, SUSV: XArray, mv: XArray, r: XArray,
                           a: XArray, w: XArray, b: XArray, tau: XArray, gd: XArray,
                           serial: bool = False) -> XArray:
        """``G = mv a^T + r w^T + SV diag(b) - 2 SUSV diag(tau) - 2 V diag(gd)`` (m x c
        arrays of one chunk), in the storage of ``SUSV``: d log Z / dV of sparse EP's
        gradient (:func:`fastep.inference.sparse_ep._gradient.gradient_second`).

        Parameters
        ----------
        V : array (m, c)
            ``L_uu^-1 K(Z, X_c)``: the chunk's whitened cross-covariances.
        SV : array (m, c)
            ``S V``, S the covariance of q(v).
        SUSV : array (m, c)
            ``S U S V`` (U the first pass's ``V diag(c) V^T``); overwritten with G.
        mv : array (m,)
            The mean of q(v).
        r : array (m,)
            ``S V a`` of the first pass.
        a, w, b, tau, gd : array (c,)
            Per-site weights of the chunk's columns in the formula above (``tau``: the site
            precisions).
        serial : bool, default False
            Run the serial compiled loop (called from a worker thread of a streamed pass).
        """
        xp = self.xp
        SUSV *= -2.0 * tau
        SUSV += xp.outer(mv, a) + xp.outer(r, w) + SV * b - 2.0 * V * gd
        return SUSV

    # --- EP site loops --------------------------------------------------------------
    @abc.abstractmethod
    def site_inputs(self, likelihood: Likelihood, y: XArray, extra: XArray) -> SiteData:
        """Targets, per-site extras (n, k) and likelihood parameters as this backend's
        arrays, in the form the site loops read.

        Parameters
        ----------
        likelihood : fastep.likelihoods.Likelihood
            Whose parameters (``likelihood.params``) the loops read.
        y : array (n,)
            Targets in the likelihood's encoding.
        extra : array (n, k)
            Per-site extras of the likelihood (k may be 0).
        """
        raise NotImplementedError

    @abc.abstractmethod
    def parallel_sites(self, tilted: Any, data: SiteData, bufs: SiteBuffers, damping: float,
                       clip: bool) -> int:
        """Parallel EP proposals for every site from the same marginals, into ``bufs`` (see
        :func:`fastep.backend.cpu_loops.parallel_sites`); returns the number of skipped sites.

        Parameters
        ----------
        tilted : compiled function
            The likelihood's scalar tilted moments (:attr:`Likelihood.scalar_tilted`).
        data : SiteData
            Targets, extras and parameters (:meth:`site_inputs`).
        bufs : SiteBuffers
            The marginals and sites read, the proposals, log Z_i and cavities written.
        damping : float
            Step in natural parameters, in (0, 1].
        clip : bool
            Clip proposed site precisions at 0 (log-concave likelihoods).
        """
        raise NotImplementedError

    @abc.abstractmethod
    def power_sites(self, tilted: Any, data: SiteData, bufs: SiteBuffers, resid: XArray,
                    alpha: float, damping: float, clip: bool, serial: bool = False) -> int:
        """Power-EP proposals on projections, into ``bufs`` (see
        :func:`fastep.backend.cpu_loops.power_sites`); returns the number of skipped sites.

        Parameters
        ----------
        tilted : compiled function
            The likelihood's scalar tilted moments (:attr:`Likelihood.scalar_tilted`).
        data : SiteData
            Targets, extras and parameters of the sites (:meth:`site_inputs`).
        bufs : SiteBuffers
            The marginals of the projections h_i and the sites read; the proposals, each
            site's share of log Z and the cavities written.
        resid : array (n,)
            ``d_i = K_ii - Q_ii``: the variance of f_i about h_i.
        alpha : float
            The power, in (0, 1].
        damping : float
            Step in natural parameters, in (0, 1].
        clip : bool
            Clip proposed site precisions at 0 (log-concave likelihoods).
        serial : bool, default False
            Run the serial compiled loop (called from a worker thread of a streamed pass).
        """
        raise NotImplementedError

    def evidence_site_terms(self, log_z: XArray, mu_cav: XArray, var_cav: XArray, mean: XArray,
                            var: XArray) -> float:
        """The sites' share of log Z_EP, over the sites with a finite log Z_i.

        Parameters
        ----------
        log_z : array (n,)
            The tilted log Z_i at the cavities (non-finite: a skipped site).
        mu_cav, var_cav : array (n,)
            The cavity moments.
        mean, var : array (n,)
            The marginals of the posterior.
        """
        xp = self.xp
        terms = (log_z + 0.5 * xp.log(var_cav / var) + 0.5 * mu_cav * mu_cav / var_cav
                 - 0.5 * mean * mean / var)
        return float(xp.sum(xp.where(xp.isfinite(log_z), terms, 0.0)))

    @abc.abstractmethod
    def build_b(self, K: XArray, s: XArray, out: Optional[XArray] = None) -> XArray:
        """``I + diag(s) K diag(s)``.

        Parameters
        ----------
        K : array (n, n)
            The prior covariance.
        s : array (n,)
            ``S^1/2``: the square roots of the site precisions.
        out : array (n, n) or None, default None
            A C-ordered buffer for the result (None: a new array).
        """
        raise NotImplementedError

    @abc.abstractmethod
    def scale_columns(self, K: XArray, s: XArray, out: Optional[XArray] = None) -> XArray:
        """``K diag(s)``.

        Parameters
        ----------
        K : array (n, n)
            The matrix scaled.
        s : array (n,)
            One factor per column.
        out : array (n, n) or None, default None
            A C-ordered buffer for the result (None: a new array).
        """
        raise NotImplementedError

    @abc.abstractmethod
    def row_sumsq(self, a: XArray, out: Optional[XArray] = None) -> XArray:
        """Row sums of squares of ``a``.

        Parameters
        ----------
        a : array (n, k)
            The matrix.
        out : array (n,) or None, default None
            A buffer for the result (None: a new array).
        """
        raise NotImplementedError

    def projection_marginals(self, G: XArray, beta: XArray) -> Tuple[XArray, XArray]:
        """``(G^T beta, column sums of squares of G)``: the per-site marginals of sparse EP.

        Parameters
        ----------
        G : array (m, c)
            ``R^-1 K(Z, X_c)`` of the chunk (R = L_uu L_P of q(v)).
        beta : array (m,)
            ``L_P^-1 b`` of q(v).
        """
        xp = self.xp
        return G.T @ beta, xp.sum(G * G, axis=0)

    @abc.abstractmethod
    def tilted(self, likelihood: Likelihood, y: XArray, extra: XArray, mu: XArray, var: XArray,
               alpha: float) -> Tuple[XArray, XArray, XArray]:
        """The likelihood's tilted moments ``(log Z, dlogZ/dmu, d2logZ/dmu2)`` per site.

        Parameters
        ----------
        likelihood : fastep.likelihoods.Likelihood
            The likelihood.
        y : array (n,)
            Targets in the likelihood's encoding.
        extra : array (n, k)
            Per-site extras of the likelihood.
        mu, var : array (n,)
            Cavity means and variances.
        alpha : float
            The power of the likelihood in the tilted distribution (1: EP).
        """
        raise NotImplementedError

    def tilted_dparams(self, likelihood: Likelihood, y: XArray, mu: XArray, var: XArray,
                       extra: XArray, alpha: float) -> XArray:
        """``d log Z_i / d log(likelihood parameters)``, shape (n, n_dims).

        Parameters
        ----------
        likelihood : fastep.likelihoods.Likelihood
            The likelihood.
        y : array (n,)
            Targets in the likelihood's encoding.
        mu, var : array (n,)
            Cavity means and variances.
        extra : array (n, k)
            Per-site extras of the likelihood.
        alpha : float
            The power of the likelihood in the tilted distribution (1: EP).
        """
        raise NotImplementedError

    # --- robust-max Gauss-Hermite products (host arrays in and out) -------------------
    @abc.abstractmethod
    def prob_largest(self, mean: XArray, var: XArray, nodes: XArray,
                     weights: XArray) -> np.ndarray:
        """S(x_i, j) for every row and class (:mod:`fastep.likelihoods.robustmax`).

        Parameters
        ----------
        mean, var : ndarray (n, J)
            Latent means and variances of the J classes (C-ordered host arrays).
        nodes, weights : ndarray (k,)
            The Gauss-Hermite rule (the likelihood's ``nodes``).
        """
        raise NotImplementedError

    def prob_largest_grad(self, mean: XArray, var: XArray, labels: XArray, nodes: XArray,
                          weights: XArray) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(S, dS/dmean, dS/dvar)`` of S(x_i, labels[i]).

        Parameters
        ----------
        mean, var : ndarray (n, J)
            Latent means and variances of the J classes (C-ordered host arrays).
        labels : ndarray (n,)
            Class indices in [0, J) (int64).
        nodes, weights : ndarray (k,)
            The Gauss-Hermite rule (the likelihood's ``nodes``).
        """
        raise NotImplementedError

    # --- data for streamed passes ------------------------------------------------------
    @abc.abstractmethod
    def rows(self, X: XArray) -> Callable[[int, int], XArray]:
        """A row source for streamed passes over X (``source(c0, c1)`` returns rows c0:c1
        as a C-ordered array of this backend).

        Parameters
        ----------
        X : array-like (n, d)
            The inputs: any 2-d array with row slices (ndarray, ``np.memmap``, h5py dataset,
            an array of this backend).
        """
        raise NotImplementedError

    def gram_cache(self, X: XArray, n: int, m: int, budget: float) -> Optional[XArray]:
        """An (n, m) array to keep ``K(X, Z)`` between sweeps, or None.

        Parameters
        ----------
        X : array-like (n, d)
            The inputs (a memory map gets no cache on the CPU).
        n : int
            Rows of X.
        m : int
            The number of inducing inputs.
        budget : float
            Bytes allowed for the cache (``gram_cache`` of :func:`fastep.sparse_ep`).
        """
        return None
