"""Sparse GP regression with inducing points: VFE (Titsias), FITC and Power EP (collapsed)."""
from __future__ import annotations

import copy
import numbers

import numpy as np

from .._linalg import blas_threads_for
from ..inference import sparse
from ..kernels import RBF, as_kernel
from ._mlii import maximize_evidence
from ._sklearn_compat import BaseEstimator, RegressorMixin, check_is_fitted, validate_data
from .classifier import _LOG, _check_param

_ALPHA = {"vfe": 0.0, "fitc": 1.0}


class SparseGPRegressor(RegressorMixin, BaseEstimator):
    """Gaussian-process regression with m inducing points in O(n m^2) time, O(n m) memory.

    ``method="vfe"`` maximises Titsias' (2009) collapsed bound, ``"fitc"`` the FITC
    evidence and ``"pep"`` the collapsed Power-EP objective of Bui, Yan & Turner (2017)
    with power ``alpha`` (alpha = 1 is FITC, alpha -> 0 is VFE); see
    :func:`fastep.inference.sparse.collapsed_objective`.  The kernel, the noise
    variance and the inducing inputs are fitted by L-BFGS-B with analytic gradients.

    Parameters
    ----------
    kernel : kernel, default=None (``RBF()``); a fastep kernel
    method : {"vfe", "fitc", "pep"}, default="vfe"
    alpha : float in (0, 1], default=0.5
        Power of the "pep" objective (ignored by "vfe" and "fitc").
    noise_variance : float, default=1.0
        Initial (or, with ``optimizer=None``, fixed) Gaussian noise variance.
    n_inducing : int, optional
        Number of inducing points chosen by k-means++ on X (default ``min(100, n)``).
    inducing_points : (m, d) array, optional
        Initial inducing inputs; overrides ``n_inducing``.
    optimize_inducing : bool, default=True
        Also fit the inducing inputs (with ``optimizer`` not None).
    optimizer : "L-BFGS-B", a callable, or None
    n_restarts_optimizer : int, default=0
        Restarts draw the kernel and noise parameters from their bounds; the
        inducing inputs restart from their initial positions.
    random_state : int or None

    Attributes
    ----------
    kernel_, noise_variance_, inducing_points_, log_marginal_likelihood_value_
    (the objective at the optimum), n_features_in_

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> X = rng.uniform(-3, 3, (500, 1))
    >>> y = np.sin(2 * X[:, 0]) + 0.1 * rng.normal(size=500)
    >>> reg = SparseGPRegressor(n_inducing=15, noise_variance=0.1, random_state=0).fit(X, y)
    >>> bool(reg.score(X, y) > 0.95)
    True
    """

    def __init__(self, kernel=None, *, method="vfe", alpha=0.5, noise_variance=1.0,
                 n_inducing=None, inducing_points=None, optimize_inducing=True,
                 optimizer="L-BFGS-B", n_restarts_optimizer=0, random_state=None):
        self.kernel = kernel
        self.method = method
        self.alpha = alpha
        self.noise_variance = noise_variance
        self.n_inducing = n_inducing
        self.inducing_points = inducing_points
        self.optimize_inducing = optimize_inducing
        self.optimizer = optimizer
        self.n_restarts_optimizer = n_restarts_optimizer
        self.random_state = random_state

    @property
    def alpha_(self):
        return _ALPHA.get(self.method, self.alpha)

    def _validate(self):
        _check_param(self, "method", self.method, None, options=["vfe", "fitc", "pep"])
        if self.method == "pep" and not (isinstance(self.alpha, numbers.Real)
                                         and 0.0 < self.alpha <= 1.0):
            raise ValueError("The 'alpha' parameter of SparseGPRegressor must be a float in "
                             f"(0, 1] (1 = FITC; use method='vfe' for alpha -> 0). "
                             f"Got {self.alpha!r} instead.")
        if not (isinstance(self.noise_variance, numbers.Real) and self.noise_variance > 0):
            raise ValueError("The 'noise_variance' parameter of SparseGPRegressor must be a "
                             f"positive float. Got {self.noise_variance!r} instead.")
        _check_param(self, "n_restarts_optimizer", self.n_restarts_optimizer, numbers.Integral, 0)

    def _evaluate(self, kernel, Z, noise, eval_gradient=False):
        return sparse.collapsed_objective(kernel(Z), kernel(Z, self._X), kernel.diag(self._X),
                                          self._y, noise, self.alpha_, eval_gradient)

    def fit(self, X, y):
        """Fit the kernel, noise variance and inducing inputs to (X, y)."""
        self._validate()
        X, y = validate_data(self, X, y, dtype=np.float64, y_numeric=True)
        self._X = np.ascontiguousarray(X)
        self._y = np.asarray(y, dtype=float)
        m = min(100, X.shape[0]) if self.n_inducing is None else self.n_inducing
        Z = sparse.check_inducing(self._X, m, self.inducing_points, self.random_state)
        kernel = copy.deepcopy(as_kernel(RBF() if self.kernel is None else self.kernel))
        noise = float(self.noise_variance)
        # the work is m^2 n flops, that of a dense Cholesky of size (m^2 n)^(1/3)
        with blas_threads_for(int(round((Z.shape[0] ** 2 * X.shape[0]) ** (1 / 3)))):
            if self.optimizer is not None:
                kernel, noise, Z = self._optimize(kernel, noise, Z)
            self.state_ = self._evaluate(kernel, Z, noise)
        self.kernel_, self.noise_variance_, self.inducing_points_ = kernel, noise, Z
        self.log_marginal_likelihood_value_ = self.state_.value
        return self

    def _optimize(self, kernel, noise, Z):
        nk, move_z = kernel.n_dims, bool(self.optimize_inducing)
        lo, hi = self._X.min(0), self._X.max(0)
        span = np.maximum(hi - lo, 1e-12)
        z_bounds = np.tile(np.column_stack([lo - span, hi + span]), (Z.shape[0], 1))
        bounds = np.vstack([kernel.bounds, [[np.log(1e-6), np.log(1e6)]]]
                           + ([z_bounds] if move_z else []))
        theta0 = np.concatenate([kernel.theta, [np.log(noise)]] + ([Z.ravel()] if move_z else []))

        def unpack(theta):
            zz = theta[nk + 1:].reshape(Z.shape) if move_z else Z
            return kernel.clone_with_theta(theta[:nk]), float(np.exp(theta[nk])), zz

        step = [0]

        def evidence(theta):
            k, s2, zz = unpack(theta)
            st = self._evaluate(k, zz, s2, eval_gradient=True)
            d_theta, d_z = sparse.kernel_gradient(k, zz, self._X, st.grad)
            step[0] += 1
            _LOG.info("ML-II step %d: objective %.4f", step[0], st.value)
            parts = [d_theta, [s2 * st.grad.noise_variance]] + ([d_z.ravel()] if move_z else [])
            return st.value, np.concatenate(parts)

        def draw(rng):      # restarts redraw kernel and noise; inducing inputs stay put
            start = theta0.copy()
            start[:nk + 1] = rng.uniform(bounds[:nk + 1, 0], bounds[:nk + 1, 1])
            return start

        theta, _ = maximize_evidence(evidence, theta0, bounds, self.n_restarts_optimizer,
                                     self.random_state, self.optimizer, draw=draw)
        return unpack(theta)

    def predict(self, X, return_std=False):
        """Latent predictive mean (and standard deviation, noise excluded, as in
        scikit-learn's GaussianProcessRegressor) at X."""
        check_is_fitted(self)
        X = validate_data(self, X, reset=False, dtype=np.float64)
        k = self.kernel_
        mean, var = sparse.predict(self.state_, k(self.inducing_points_, X), k.diag(X))
        return (mean, np.sqrt(var)) if return_std else mean

    def log_marginal_likelihood(self, theta=None, eval_gradient=False):
        """The objective at ``theta = [log kernel params, log noise variance]`` (inducing
        inputs fixed at ``inducing_points_``), optionally with its gradient."""
        check_is_fitted(self)
        if theta is None:
            return self.log_marginal_likelihood_value_
        theta = np.asarray(theta, dtype=float)
        nk = self.kernel_.n_dims
        k = self.kernel_.clone_with_theta(theta[:nk])
        s2 = float(np.exp(theta[nk]))
        st = self._evaluate(k, self.inducing_points_, s2, eval_gradient)
        if not eval_gradient:
            return st.value
        d_theta, _ = sparse.kernel_gradient(k, self.inducing_points_, self._X, st.grad)
        return st.value, np.concatenate([d_theta, [s2 * st.grad.noise_variance]])
