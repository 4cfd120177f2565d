"""EP Gaussian-process classifier with a scikit-learn interface."""
from __future__ import annotations

import copy
import logging
import numbers

import numpy as np

from ..kernels import RBF, as_kernel
from ..likelihoods import Likelihood, Logistic, Probit
from ._engine import Engine, check_device_param, check_sparse_params
from ._mlii import maximize_evidence
from ._sklearn_compat import (BaseEstimator, ClassifierMixin, check_classification_targets,
                              check_is_fitted, validate_data)

_LIKELIHOODS = {"probit": Probit, "logistic": Logistic}
_LOG = logging.getLogger("fastep")


def _check_param(est, name, value, kind, low=None, high=None, options=None):
    """scikit-learn-style parameter validation message."""
    cls = type(est).__name__
    if options is not None:
        if value not in options:
            raise ValueError(f"The '{name}' parameter of {cls} must be one of {options}. "
                             f"Got {value!r} instead.")
        return
    ok = isinstance(value, kind) and not isinstance(value, bool)
    ok = ok and (low is None or value >= low) and (high is None or value <= high)
    if not ok:
        what = "an int" if kind is numbers.Integral else "a float"
        rng = f"[{low}, {'inf' if high is None else high}]"
        raise ValueError(f"The '{name}' parameter of {cls} must be {what} in the range {rng}. "
                         f"Got {value!r} instead.")


class _BinaryModel:
    """One binary EP-GP problem: kernel, likelihood, training inputs, engine and EP result."""

    def __init__(self, kernel, likelihood, X, y_pm, est):
        self.kernel, self.likelihood, self.X, self.y = kernel, likelihood, X, y_pm
        self.est = est
        self.engine = Engine.for_estimator(est, X)
        self.result = None

    def _split(self, theta):
        nk, nl = self.kernel.n_dims, self.likelihood.n_dims
        kernel = self.kernel.clone_with_theta(theta[:nk])
        self.likelihood.theta = theta[nk:nk + nl]
        self.engine.set_extra(theta[nk + nl:])
        return kernel

    def evidence(self, theta, sites=None):
        """(log Z_EP, gradient over kernel, likelihood log-parameters and (sparse) inducing
        inputs, result); ``theta`` without the inducing inputs keeps them fixed."""
        saved = (self.likelihood.theta, self.engine.Z)
        try:
            kernel = self._split(theta)
            res = self.engine.run(kernel, self.y, self.likelihood, sites)
            gk, gl, gz = self.engine.gradient(kernel, self.y, self.likelihood, res)
        finally:
            self.likelihood.theta, self.engine.Z = saved
        moved_z = len(theta) > self.kernel.n_dims + self.likelihood.n_dims
        return res.log_marginal_likelihood, np.concatenate([gk, gl] + [gz] * moved_z), res

    def fit(self, optimize):
        e = self.est
        theta0 = np.concatenate([self.kernel.theta, self.likelihood.theta,
                                 self.engine.extra_theta()])
        if optimize and theta0.size:
            bounds = np.vstack([self.kernel.bounds, self.likelihood.bounds,
                                self.engine.extra_bounds()])
            warm = {}

            def evidence(theta):
                value, grad, res = self.evidence(theta, warm.get("sites"))
                warm["sites"] = (res.site_tau, res.site_nu)
                warm["step"] = warm.get("step", 0) + 1
                _LOG.info("ML-II step %d: log Z_EP = %.4f after %d EP sweeps", warm["step"],
                          value, res.n_iter)
                return value, grad

            theta, _ = maximize_evidence(evidence, theta0, bounds, e.n_restarts_optimizer,
                                         e.random_state, e.optimizer)
            self.kernel = self._split(theta)
        self.result = self.engine.run(self.kernel, self.y, self.likelihood)
        return self

    def latent(self, X):
        return self.engine.latent(self.kernel, self.result, X)

    def proba(self, X):
        mean, var = self.latent(X)
        return self.likelihood.predict_proba(mean, var)


class EPGaussianProcessClassifier(ClassifierMixin, BaseEstimator):
    """Gaussian-process classification by Expectation Propagation.

    Binary problems use one latent GP with a probit (default) or logistic
    likelihood; more than two classes are handled one-vs-rest, as in
    scikit-learn's ``GaussianProcessClassifier``.  Kernel hyperparameters are
    chosen by maximising the EP evidence log Z_EP (type-II maximum likelihood)
    with L-BFGS-B, warm-starting EP from the previous sites at every step.

    Parameters
    ----------
    kernel : fastep or scikit-learn kernel, default=None
        Prior covariance; None means ``RBF(variance=1.0, lengthscale=1.0)``.
        Copied, never modified: the fitted kernel is ``kernel_``.
    likelihood : {"probit", "logistic"} or Likelihood, default="probit"
    method : {"parallel", "sequential"}, default="parallel"
        EP schedule (see :func:`fastep.ep`).
    optimizer : "L-BFGS-B", callable or None, default="L-BFGS-B"
        None keeps the kernel and likelihood parameters fixed.
    n_restarts_optimizer : int, default=0
        Extra optimiser runs from log-uniform draws inside the bounds.
    damping : float in (0, 1], default=None
        EP damping; None means 0.8 (parallel) or 1.0 (sequential).
    tol : float, default=1e-6
        EP convergence tolerance.
    max_iter : int, default=100
        Maximum EP sweeps per run.
    random_state : int, Generator or None
        Seeds the optimiser restarts and the k-means++ choice of inducing points.
    n_inducing : int, optional
        Use sparse Power EP with this many inducing points (k-means++ on X):
        O(n m^2) time, data streamed in chunks (see :func:`fastep.inference.sparse_ep.sparse_ep`).
        The inducing inputs are then fitted by ML-II with the other parameters.
    inducing_points : (m, n_features) array, optional
        Initial inducing inputs (implies sparse EP; overrides ``n_inducing``).
    alpha : float in (0, 1], default=1.0
        Power of sparse Power EP (1 = EP with inducing points; alpha -> 0 approaches VFE).
    device : {"cpu", "cuda"}, default="cpu"
        Where EP runs: "cuda" puts the parallel EP sweeps, the Gram matrices and the
        evidence gradients on an NVIDIA GPU (:mod:`fastep.cuda`; needs the ``cuda`` extra).

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
    kernel_ : kernel
        The fitted kernel (of the first binary problem if one-vs-rest).
    log_marginal_likelihood_value_ : float
        log Z_EP at ``kernel_`` (mean over classes if one-vs-rest).
    inducing_points_ : (m, n_features) ndarray
        Fitted inducing inputs (sparse EP only; of the first binary problem).
    n_iter_ : int
        EP sweeps of the final run (max over classes).
    converged_ : bool
    n_features_in_ : int

    References
    ----------
    Rasmussen & Williams (2006), Gaussian Processes for Machine Learning, §3.6.
    Minka (2001), Expectation Propagation for approximate Bayesian inference.

    Examples
    --------
    >>> import numpy as np
    >>> from fastep import EPGaussianProcessClassifier
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(60, 2)); y = (X[:, 0] > 0).astype(int)
    >>> clf = EPGaussianProcessClassifier(optimizer=None).fit(X, y)
    >>> bool(clf.score(X, y) > 0.9)
    True
    """

    def __init__(self, kernel=None, *, likelihood="probit", method="parallel",
                 optimizer="L-BFGS-B", n_restarts_optimizer=0, damping=None, tol=1e-6,
                 max_iter=100, random_state=None, n_inducing=None, inducing_points=None,
                 alpha=1.0, device="cpu"):
        self.kernel = kernel
        self.device = device
        self.n_inducing = n_inducing
        self.inducing_points = inducing_points
        self.alpha = alpha
        self.likelihood = likelihood
        self.method = method
        self.optimizer = optimizer
        self.n_restarts_optimizer = n_restarts_optimizer
        self.damping = damping
        self.tol = tol
        self.max_iter = max_iter
        self.random_state = random_state

    def _validate_params(self):
        _check_param(self, "method", self.method, None, options=["parallel", "sequential"])
        _check_param(self, "n_restarts_optimizer", self.n_restarts_optimizer, numbers.Integral, 0)
        _check_param(self, "max_iter", self.max_iter, numbers.Integral, 1)
        _check_param(self, "tol", self.tol, numbers.Real, 0.0)
        if self.damping is not None:
            _check_param(self, "damping", self.damping, numbers.Real, 0.0, 1.0)
            if self.damping <= 0:
                raise ValueError("The 'damping' parameter of EPGaussianProcessClassifier must "
                                 f"be in (0, 1]. Got {self.damping!r} instead.")
        if not (self.optimizer is None or self.optimizer == "L-BFGS-B"
                or callable(self.optimizer)):
            raise ValueError("The 'optimizer' parameter of EPGaussianProcessClassifier must be "
                             f"'L-BFGS-B', a callable or None. Got {self.optimizer!r} instead.")
        check_sparse_params(self)
        check_device_param(self)

    def _make_likelihood(self):
        if isinstance(self.likelihood, Likelihood):
            if not self.likelihood.binary:
                raise ValueError("likelihood must be a binary likelihood (y in {-1, +1}); got "
                                 f"{type(self.likelihood).__name__}.")
            return copy.deepcopy(self.likelihood)
        if self.likelihood not in _LIKELIHOODS:
            raise ValueError(f"The 'likelihood' parameter of EPGaussianProcessClassifier must be "
                             f"one of {sorted(_LIKELIHOODS)} or a Likelihood. Got "
                             f"{self.likelihood!r} instead.")
        return _LIKELIHOODS[self.likelihood]()

    def fit(self, X, y):
        """Fit the EP approximation (and, with an optimizer, the hyperparameters)."""
        self._validate_params()
        X, y = validate_data(self, X, y, dtype=np.float64, ensure_min_samples=1)
        check_classification_targets(y)
        self.classes_ = np.unique(y)
        if self.classes_.size < 2:
            raise ValueError(f"EPGaussianProcessClassifier requires at least 2 classes in y; got "
                             f"only one class: {self.classes_[0]!r}.")
        kernel = copy.deepcopy(as_kernel(RBF() if self.kernel is None else self.kernel))
        X = np.ascontiguousarray(X)
        targets = [self.classes_[1]] if self.classes_.size == 2 else list(self.classes_)
        self.models_ = []
        for c in targets:
            y_pm = np.where(y == c, 1.0, -1.0)
            m = _BinaryModel(copy.deepcopy(kernel), self._make_likelihood(), X, y_pm, self)
            self.models_.append(m.fit(self.optimizer is not None))
        self.kernel_ = self.models_[0].kernel
        if self.models_[0].engine.sparse:
            self.inducing_points_ = self.models_[0].engine.Z
        self.log_marginal_likelihood_value_ = float(
            np.mean([m.result.log_marginal_likelihood for m in self.models_]))
        self.n_iter_ = max(m.result.n_iter for m in self.models_)
        self.converged_ = all(m.result.converged for m in self.models_)
        return self

    def log_marginal_likelihood(self, theta=None, eval_gradient=False):
        """log Z_EP at ``theta`` (log kernel, then likelihood, parameters).

        With ``theta=None`` returns ``log_marginal_likelihood_value_``.  With
        ``eval_gradient=True`` also returns the gradient (exact at the EP fixed
        point: ``1/2 tr((b b^T - R) dK/dtheta)`` plus likelihood terms).
        """
        check_is_fitted(self)
        if theta is None:
            if eval_gradient:
                raise ValueError("Gradient can only be evaluated for theta!=None")
            return self.log_marginal_likelihood_value_
        theta = np.asarray(theta, dtype=float)
        vals = [m.evidence(theta) for m in self.models_]
        value = float(np.mean([v[0] for v in vals]))
        if eval_gradient:
            return value, np.mean([v[1] for v in vals], axis=0)
        return value

    def predict_proba(self, X):
        """Class probabilities, shape (n_samples, n_classes)."""
        check_is_fitted(self)
        X = validate_data(self, X, reset=False, dtype=np.float64)
        if len(self.models_) == 1:
            p1 = self.models_[0].proba(X)
            return np.column_stack([1.0 - p1, p1])
        p = np.column_stack([m.proba(X) for m in self.models_])
        p = np.maximum(p, 1e-300)
        return p / p.sum(axis=1, keepdims=True)

    def predict_latent(self, X):
        """Latent mean and variance of f at X (binary problems only)."""
        check_is_fitted(self)
        if len(self.models_) != 1:
            raise ValueError("predict_latent is defined for binary problems only.")
        X = validate_data(self, X, reset=False, dtype=np.float64)
        return self.models_[0].latent(X)

    def predict(self, X):
        """Most probable class."""
        check_is_fitted(self)
        return self.classes_[np.argmax(self.predict_proba(X), axis=1)]
