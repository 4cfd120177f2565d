"""The posterior of sparse Power EP: q(v) over the whitened inducing values
(:class:`_InducingPosterior`, host arrays) and the result of a run (:class:`SparseEPResult`)."""
from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import TYPE_CHECKING, Optional, Tuple

import numpy as np
from numpy.typing import ArrayLike
from scipy.linalg import blas, cholesky, solve_triangular

from ..._dask import is_dask_array
from ..._linalg import trmm_lower_nogil
from ..._numerics import predictive_variance
from ...exceptions import NotPositiveDefiniteError
from .._result import EPResultBase

if TYPE_CHECKING:                                       # pragma: no cover
    from ...typing import Array
    from ...kernels import Kernel


@dataclass
class SparseEPResult(EPResultBase):
    """Output of :func:`sparse_ep` (NumPy arrays, also after a GPU run; the fields of
    :class:`~fastep.inference._result.EPResultBase` and those below).

    Attributes
    ----------
    mean, var : ndarray (n,)
        Marginals of f at the training inputs (``var`` includes d_i).
    site_tau, site_nu : ndarray (n,)
        Site natural parameters on the projections h_i.
    log_marginal_likelihood : float
        The Power-EP approximation of log p(y) at the returned sites.
    n_iter : int
        Sweeps performed (as in :class:`~fastep.EPResult`).
    converged : bool
        Whether the convergence rule was met within ``max_iter`` sweeps.
    n_skipped : int
        Site updates skipped in the last sweep (improper cavity).
    cavity_mean, cavity_var : ndarray (n,)
        The cavity of f_i (``cavity_var`` includes d_i).
    alpha : float
        The power of Power EP.
    inducing_points : ndarray (m, d)
        The inducing inputs Z.
    history : list of float, default []
        log Z after every sweep, as in :class:`~fastep.EPResult`.
    resid : ndarray (n,) or None, default None
        d_i = K_ii - Q_ii, the variance of f_i about its projection h_i.

    Examples
    --------
    >>> import numpy as np
    >>> from fastep.kernels import RBF
    >>> from fastep.likelihoods import Probit
    >>> from fastep import sparse_ep
    >>> X = np.linspace(-2, 2, 100)[:, None]; y = np.sign(X[:, 0] + 0.01)
    >>> res = sparse_ep(RBF(), X[::10], X, y, Probit())
    >>> mean, var = res.predict_latent(RBF(), np.array([[-1.0], [1.0]]))
    >>> bool(mean[0] < 0 < mean[1]), res.alpha
    (True, 1.0)
    """

    alpha: float
    inducing_points: np.ndarray
    history: list = field(default_factory=list, repr=False)
    resid: Optional[np.ndarray] = field(default=None, repr=False)
    _q: Optional["_InducingPosterior"] = field(default=None, repr=False)
    _backend: object = field(default=None, repr=False)
    _cluster: object = field(default=None, repr=False)
    #: ``K(X, Z)`` at the run's kernel, kept for one :func:`sparse_ep_gradient`, which drops
    #: it (``run_sparse_ep(keep_gram=True)``, as ML-II's evaluations ask; None otherwise)
    _gram: Optional[Array] = field(default=None, repr=False)
    #: ``(likelihood, V a, V diag(c) V^T, d/dlog lik)``: the gradient's first pass, taken in
    #: the closing pass of a chunk-sequential run with ``keep_gram`` (None otherwise)
    _first_pass: Optional[tuple] = field(default=None, repr=False)

    @property
    def q_factors(self) -> Tuple[np.ndarray, np.ndarray]:
        """``(L_P, b)``: the lower Cholesky factor of q(u)'s precision and its shift, in
        the whitened coordinates of ``L_uu`` (what a saved model stores; ``q(u)`` follows
        from them and the kernel at the inducing points)."""
        if self._q is None:
            raise ValueError("this SparseEPResult carries no q(u) (it was built without "
                             "one); take the result of sparse_ep or of a fitted estimator.")
        return self._q.L_P, self._q.b

    def predict_latent(self, kernel: Kernel, X: ArrayLike) -> Tuple[Array, Array]:
        """Latent predictive mean and variance at X (kernel: the one used in the fit); lazy
        dask arrays, computed chunk by chunk on the workers, when X is a dask array.

        Parameters
        ----------
        kernel : Kernel
            The kernel of the fit, at the hyperparameters of the fit.
        X : array-like of shape (n_test, d)
            Test inputs (NumPy or a dask array).

        Returns
        -------
        mean, var : ndarray (n_test,)
            Host arrays (lazy dask arrays for a dask X).
        """
        if self._q is None:
            raise ValueError("this SparseEPResult carries no posterior of the inducing "
                             "values (it was copied without one); predict with the estimator "
                             "that fitted it.")
        if is_dask_array(X):
            rows = X.astype(np.float64).rechunk({1: -1})
            both = rows.map_blocks(_predict_block, self._q, kernel, self.inducing_points,
                                   chunks=(rows.chunks[0], (2,)), dtype=float)
            return both[:, 0], both[:, 1]
        return self._q.predict(kernel, self.inducing_points, X)


def _predict_block(X, q, kernel, Z):
    """Latent mean and variance of one chunk of rows, as two columns (dask map_blocks)."""
    mean, var = q.predict(kernel, Z, X)
    return np.column_stack([mean, var])


def _precision_factor(P):
    """Lower Cholesky factor of a precision of q(v) (or of its update), or the error that
    names the knob."""
    try:
        return cholesky(P, lower=True, check_finite=False)
    except np.linalg.LinAlgError:
        raise NotPositiveDefiniteError(
            "sparse EP: the inducing-point posterior precision is not positive definite "
            "(negative site precisions); use smaller EP steps, e.g. damping=0.5.") from None


class _InducingPosterior:
    """q(v) = N(P^-1 b, P^-1) on the host, rebuilt from chunk sums taken in the previous
    q's coordinates.

    With ``G = R^-1 K_uf`` (``R = L_uu L_P`` of the previous q, whose ``L_P`` is passed as
    ``L_prev``), ``V = L_prev G``, so ``P = I + L_prev (G T G^T) L_prev^T`` and
    ``b = L_prev (G nu)``.  Only well-conditioned factors are multiplied; an
    ill-conditioned ``K_uu`` is never inverted on both sides of a sum.
    """

    def __init__(self, L_uu, L_prev, P_G, b_G):
        m = L_uu.shape[0]
        P = np.eye(m) + L_prev @ P_G @ L_prev.T
        self._set(L_uu, _precision_factor(0.5 * (P + P.T)), L_prev @ b_G)

    @classmethod
    def from_factor(cls, L_uu, L_P, b):
        """q from its precision's Cholesky factor ``L_P`` and ``b`` (a saved model)."""
        q = cls.__new__(cls)
        q._set(L_uu, L_P, b)
        return q

    def _set(self, L_uu, L_P, b, R_inv=None):
        m = L_uu.shape[0]
        self.L_uu, self.L_P, self.b = L_uu, L_P, b
        self.beta = solve_triangular(L_P, b, lower=True, check_finite=False)
        self.m = solve_triangular(L_P, self.beta, lower=True, trans="T", check_finite=False)
        self.w = solve_triangular(L_uu, self.m, lower=True, trans="T", check_finite=False)
        # R^-1 = L_P^-1 L_uu^-1 (lower triangular): dtrmm by R^-1 runs about twice as fast
        # as dtrsm by R in OpenBLAS for these shapes (both m^2 c flops)
        if R_inv is None:
            R_inv = solve_triangular(
                L_P, solve_triangular(L_uu, np.eye(m), lower=True, check_finite=False),
                lower=True, check_finite=False)
        self.R_inv = np.asfortranarray(R_inv)
        self.half_logdet = float(np.sum(np.log(np.diag(L_P))))

    def updated(self, dP_G, db_G):
        """q after adding sites whose sums ``dP_G = G dT G^T``, ``db_G = G d nu`` were taken
        in this q's coordinates (``G = R^-1 K_uf``): ``P + L_P dP_G L_P^T =
        L_P (I + dP_G) L_P^T``, so the new factor is ``L_P chol(I + dP_G)`` (m^3, well
        conditioned whenever the new q is proper) and ``b + L_P db_G``."""
        M = _precision_factor(np.eye(self.L_P.shape[0]) + _symmetrise_lower(dP_G))
        q = _InducingPosterior.__new__(_InducingPosterior)
        q._set(self.L_uu, blas.dtrmm(1.0, self.L_P, M, lower=1), self.b + self.L_P @ db_G,
               R_inv=solve_triangular(M, self.R_inv, lower=True, check_finite=False))
        return q

    @classmethod
    def prior(cls, L_uu):
        m = L_uu.shape[0]
        return cls(L_uu, np.eye(m), np.zeros((m, m)), np.zeros(m))

    def log_z_global(self):
        """1/2 b^T P^-1 b - 1/2 log|P|."""
        return 0.5 * float(self.beta @ self.beta) - self.half_logdet

    def predict(self, kernel, Z, X):
        """Latent predictive mean and variance at X (host)."""
        X = np.ascontiguousarray(X, dtype=float)
        At = kernel(Z, X)
        V = solve_triangular(self.L_uu, At, lower=True, check_finite=False)
        G = trmm_lower_nogil(self.R_inv, np.asfortranarray(At))
        mean, var_h = G.T @ self.beta, np.einsum("ij,ij->j", G, G)
        prior = kernel.diag(X)
        var = prior - np.einsum("ij,ij->j", V, V) + var_h
        return mean, predictive_variance(prior, var)


def _symmetrise_lower(P):
    return np.tril(P) + np.tril(P, -1).T


def _on_backend(be, q, prior=False):
    """What a sweep reads of q, as backend arrays (``prior``: q is the prior)."""
    return SimpleNamespace(R_inv=be.asarray(q.R_inv), beta=be.asarray(q.beta), prior=prior)
