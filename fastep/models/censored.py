"""GP regression with censored targets (Tobit likelihood; Groot & Lucas 2012)."""
from __future__ import annotations

import copy
import numbers

import numpy as np

from ..inference.laplace import laplace
from ..kernels import RBF, as_kernel
from ..likelihoods.tobit import Tobit, censored_predictive, censored_quantile, check_censored_data
from ._engine import Engine
from ._mlii import maximize_evidence
from ._sklearn_compat import BaseEstimator, RegressorMixin, check_is_fitted, validate_data
from .classifier import _check_param


class CensoredGPRegressor(RegressorMixin, BaseEstimator):
    """Gaussian-process regression with censored outputs (Tobit likelihood).

    ``y* = f(x) + eps``, ``eps ~ N(0, noise_variance)``, observed as ``lower`` when
    ``y* <= lower`` and ``upper`` when ``y* >= upper``.  Inference by EP (default) or
    Laplace; kernel and noise variance by ML-II.

    Parameters
    ----------
    kernel : kernel, default=None (``RBF()``)
    noise_variance : float, default=1.0
    lower, upper : float, optional
        Scalar limits (per-observation limits go to ``fit``).
    inference : {"ep", "laplace"}, default="ep"
    optimizer : "L-BFGS-B" or None, default="L-BFGS-B"
        ML-II of the kernel and noise variance (analytic gradients for EP; numerical
        for Laplace).
    n_restarts_optimizer, random_state, method, damping, tol, max_iter : as in
        :class:`~fastep.EPGaussianProcessClassifier`.
    n_inducing, inducing_points, alpha :
        Sparse Power EP with inducing points (fitted by ML-II with the kernel and noise),
        as in :class:`~fastep.EPGaussianProcessClassifier`; needs ``inference="ep"``.
    device : {"cpu", "cuda"}, default="cpu"
        "cuda" runs EP on an NVIDIA GPU, as in :class:`~fastep.EPGaussianProcessClassifier`;
        needs ``inference="ep"``.

    Attributes
    ----------
    kernel_, noise_variance_, log_marginal_likelihood_value_, n_iter_, converged_,
    n_features_in_, inducing_points_ (sparse EP only)

    Examples
    --------
    >>> import numpy as np
    >>> X = np.linspace(0, 1, 30)[:, None]
    >>> y = np.maximum(np.sin(6 * X[:, 0]), -0.5)
    >>> reg = CensoredGPRegressor(lower=-0.5, noise_variance=0.01, optimizer=None).fit(X, y)
    >>> bool(reg.predict_latent(X)[0].min() < -0.5)       # recovers f below the limit
    True
    """

    def __init__(self, kernel=None, *, noise_variance=1.0, lower=None, upper=None,
                 inference="ep", optimizer="L-BFGS-B", n_restarts_optimizer=0,
                 random_state=None, method="parallel", damping=None, tol=1e-6, max_iter=200,
                 n_inducing=None, inducing_points=None, alpha=1.0, device="cpu"):
        self.kernel = kernel
        self.device = device
        self.n_inducing = n_inducing
        self.inducing_points = inducing_points
        self.alpha = alpha
        self.noise_variance = noise_variance
        self.lower = lower
        self.upper = upper
        self.inference = inference
        self.optimizer = optimizer
        self.n_restarts_optimizer = n_restarts_optimizer
        self.random_state = random_state
        self.method = method
        self.damping = damping
        self.tol = tol
        self.max_iter = max_iter

    def _infer(self, kernel, lik, sites=None):
        if self.inference == "laplace":
            return laplace(kernel(self._X), self._y, lik, max_iter=self.max_iter)
        return self._engine.run(kernel, self._y, lik, sites)

    def fit(self, X, y, lower=None, upper=None):
        """Fit; ``lower``/``upper`` (scalars or per-observation arrays) override the
        constructor's limits.  y at or beyond a limit is censored there; NaN in y
        means interval-censored between finite limits."""
        _check_param(self, "inference", self.inference, None, options=["ep", "laplace"])
        _check_param(self, "method", self.method, None, options=["parallel", "sequential"])
        _check_param(self, "max_iter", self.max_iter, numbers.Integral, 1)
        if not (isinstance(self.noise_variance, numbers.Real) and self.noise_variance > 0):
            raise ValueError("The 'noise_variance' parameter of CensoredGPRegressor must be a "
                             f"positive float. Got {self.noise_variance!r} instead.")
        X = validate_data(self, X, dtype=np.float64)
        y_arr = np.asarray(y, dtype=float).reshape(-1)
        if y_arr.shape[0] != X.shape[0]:
            raise ValueError(f"y has {y_arr.shape[0]} entries but X has {X.shape[0]} rows.")
        lo = self.lower if lower is None else lower
        up = self.upper if upper is None else upper
        y_arr, lo, up = check_censored_data(y_arr, lo, up)
        self._X, self._y = np.ascontiguousarray(X), y_arr
        if self.device != "cpu" and self.inference != "ep":
            raise ValueError("device='cuda' runs EP only; set inference='ep' (got "
                             f"inference={self.inference!r}) or device='cpu'.")
        self._engine = Engine.for_estimator(self, self._X)
        if self._engine.sparse and self.inference != "ep":
            raise ValueError("inducing points (n_inducing / inducing_points) need "
                             f"inference='ep'; got inference={self.inference!r}.")
        self.lower_, self.upper_ = lo, up
        kernel = copy.deepcopy(as_kernel(RBF() if self.kernel is None else self.kernel))
        lik = Tobit(self.noise_variance, lower=lo, upper=up)
        if self.optimizer is not None:
            kernel, lik = self._optimize(kernel, lik)
        self.result_ = self._infer(kernel, lik)
        self.kernel_, self.likelihood_ = kernel, lik
        if self._engine.sparse:
            self.inducing_points_ = self._engine.Z
        self.noise_variance_ = lik.noise_variance
        self.log_marginal_likelihood_value_ = self.result_.log_marginal_likelihood
        self.n_iter_ = self.result_.n_iter
        self.converged_ = self.result_.converged
        return self

    def _split(self, theta, kernel, lik):
        """theta = [log kernel params, log noise variance, (sparse) inducing inputs]."""
        nk = kernel.n_dims
        k = kernel.clone_with_theta(theta[:nk])
        lk = copy.deepcopy(lik)
        lk.theta = theta[nk:nk + lik.n_dims]
        self._engine.set_extra(theta[nk + lik.n_dims:])
        return k, lk

    def log_marginal_likelihood(self, theta=None, eval_gradient=False):
        """Approximate log evidence at theta = [log kernel params, log noise variance]."""
        check_is_fitted(self)
        if theta is None:
            return self.log_marginal_likelihood_value_
        theta = np.asarray(theta, dtype=float)
        k, lk = self._split(theta, self.kernel_, self.likelihood_)
        res = self._infer(k, lk)
        if not eval_gradient:
            return res.log_marginal_likelihood
        if self.inference != "ep":
            raise ValueError("eval_gradient=True is available with inference='ep' only.")
        return res.log_marginal_likelihood, self._gradient(k, lk, res)

    def _gradient(self, k, lk, res, with_z=False):
        gk, gl, gz = self._engine.gradient(k, self._y, lk, res)
        return np.concatenate([gk, gl] + [gz] * with_z)

    def _optimize(self, kernel, lik):
        theta0 = np.concatenate([kernel.theta, lik.theta, self._engine.extra_theta()])
        bounds = np.vstack([kernel.bounds, lik.bounds, self._engine.extra_bounds()])
        warm = {}

        def evidence(theta):
            k, lk = self._split(theta, kernel, lik)
            if self.inference == "laplace":
                value = laplace(k(self._X), self._y, lk, max_iter=self.max_iter
                                ).log_marginal_likelihood
                grad = np.empty(theta.size)
                for i in range(theta.size):      # numerical gradient (documented)
                    e = np.zeros(theta.size)
                    e[i] = 1e-5
                    k2, l2 = self._split(theta + e, kernel, lik)
                    k3, l3 = self._split(theta - e, kernel, lik)
                    grad[i] = (laplace(k2(self._X), self._y, l2).log_marginal_likelihood
                               - laplace(k3(self._X), self._y, l3).log_marginal_likelihood
                               ) / 2e-5
                return value, grad
            res = self._infer(k, lk, warm.get("sites"))
            warm["sites"] = (res.site_tau, res.site_nu)
            return res.log_marginal_likelihood, self._gradient(k, lk, res, with_z=True)

        theta, _ = maximize_evidence(evidence, theta0, bounds, self.n_restarts_optimizer,
                                     self.random_state, self.optimizer)
        return self._split(theta, kernel, lik)

    # --- prediction --------------------------------------------------------------------
    def predict_latent(self, X, return_std=False):
        """Mean (and standard deviation) of the latent f at X."""
        check_is_fitted(self)
        X = validate_data(self, X, reset=False, dtype=np.float64)
        if self.inference == "laplace":
            mean, var = self.result_.predict_latent(self.kernel_(self._X, X), self.kernel_.diag(X))
        else:
            mean, var = self._engine.latent(self.kernel_, self.result_, X)
        return (mean, np.sqrt(var)) if return_std else mean

    def _predictive(self, X, lower, upper):
        mean, std = self.predict_latent(X, return_std=True)
        lo = self.lower if lower is None else lower
        up = self.upper if upper is None else upper
        lo = -np.inf if lo is None else lo
        up = np.inf if up is None else up
        return mean, std, lo, up

    def predict(self, X, return_std=False, lower=None, upper=None):
        """Mean (and std) of the *censored* output y at X (limits: the constructor's,
        or ``lower``/``upper`` given here)."""
        mean, std, lo, up = self._predictive(X, lower, upper)
        pred = censored_predictive(mean, std ** 2, self.noise_variance_, lo, up)
        return (pred["mean"], np.sqrt(pred["var"])) if return_std else pred["mean"]

    def predict_censored_proba(self, X, lower=None, upper=None):
        """(P(y = lower), P(y = upper)) at X, each of shape (n,)."""
        mean, std, lo, up = self._predictive(X, lower, upper)
        pred = censored_predictive(mean, std ** 2, self.noise_variance_, lo, up)
        return pred["p_lower"], pred["p_upper"]

    def predict_quantile(self, X, q, lower=None, upper=None):
        """q-quantile of the censored output y at X."""
        mean, std, lo, up = self._predictive(X, lower, upper)
        return censored_quantile(q, mean, std ** 2, self.noise_variance_, lo, up)

    def log_predictive_density(self, X, y, lower=None, upper=None):
        """log p(y | data) of observed, possibly censored, values at X."""
        mean, std, lo, up = self._predictive(X, lower, upper)
        y = np.asarray(y, dtype=float)
        lik = Tobit(self.noise_variance_, lower=lo, upper=up)
        y, lo_a, up_a = check_censored_data(y, lo, up)
        return lik.tilted(y, mean, np.maximum(std ** 2, 1e-300),
                          extra=np.column_stack([lo_a, up_a]))[0]
