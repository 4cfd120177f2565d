"""How an estimator runs EP: dense on K(X, X), or sparse Power EP with inducing points.

The estimators (classifier, multi-annotator, censored) talk to an :class:`Engine`
only, so ``n_inducing=`` / ``inducing_points=`` switch any of them to the O(n m^2)
streamed algorithm of :mod:`fastep.inference.sparse_ep` without other changes.
In the sparse case the inducing inputs join the ML-II parameters (after the kernel
and likelihood parameters), with their exact gradient.
"""
from __future__ import annotations

import numbers

import numpy as np

from ..inference.ep import check_device, ep
from ..inference.sparse import check_inducing
from ..inference.sparse_ep import sparse_ep, sparse_ep_gradient


def check_sparse_params(est):
    """Validate ``n_inducing``, ``inducing_points`` and ``alpha`` of an estimator."""
    cls = type(est).__name__
    if est.n_inducing is None and est.inducing_points is None:
        return False
    if not (isinstance(est.alpha, numbers.Real) and 0.0 < est.alpha <= 1.0):
        raise ValueError(f"The 'alpha' parameter of {cls} must be a float in (0, 1] (the "
                         f"Power-EP power; 1 is EP). Got {est.alpha!r} instead.")
    if getattr(est, "method", "parallel") != "parallel":
        raise ValueError(f"{cls} with inducing points runs parallel (sparse) EP only; set "
                         f"method='parallel' (got {est.method!r}).")
    return True


def check_device_param(est):
    """Validate an estimator's ``device`` ("cpu" or "cuda"; "cuda" runs parallel EP)."""
    cls = type(est).__name__
    device = check_device(getattr(est, "device", "cpu"), cls)
    if device == "cuda" and getattr(est, "method", "parallel") != "parallel":
        raise ValueError(f"{cls} with device='cuda' runs parallel EP only; set "
                         f"method='parallel' (got {est.method!r}).")
    return device


class Engine:
    """Dense EP (``Z is None``) or sparse Power EP with inducing inputs ``Z``, on the
    CPU or (``device="cuda"``) on the GPU through :mod:`fastep.cuda`."""

    def __init__(self, X, est, Z=None, alpha=1.0, device="cpu"):
        self.X, self.est, self.Z, self.alpha = X, est, Z, float(alpha)
        self.device = device
        if device == "cuda":
            from .. import cuda
            cuda.require()
            self._cuda = cuda

    @classmethod
    def for_estimator(cls, est, X):
        device = check_device_param(est)
        if not check_sparse_params(est):
            return cls(X, est, device=device)
        Z = check_inducing(X, est.n_inducing, est.inducing_points, est.random_state)
        return cls(X, est, Z, est.alpha, device=device)

    @property
    def sparse(self):
        return self.Z is not None

    # inducing inputs as extra ML-II parameters
    def extra_theta(self):
        return self.Z.ravel().copy() if self.sparse else np.zeros(0)

    def extra_bounds(self):
        if not self.sparse:
            return np.zeros((0, 2))
        lo, hi = self.X.min(0), self.X.max(0)
        span = np.maximum(hi - lo, 1e-12)
        return np.tile(np.column_stack([lo - span, hi + span]), (self.Z.shape[0], 1))

    def set_extra(self, vec):
        if self.sparse and len(vec):
            self.Z = np.ascontiguousarray(np.reshape(vec, self.Z.shape))

    def run(self, kernel, y, lik, sites=None, max_iter=None, tol=None, extra=None):
        e = self.est
        tau, nu = sites if sites is not None else (None, None)
        max_iter = e.max_iter if max_iter is None else max_iter
        tol = e.tol if tol is None else tol
        if self.sparse:
            return sparse_ep(kernel, self.Z, self.X, y, lik, alpha=self.alpha, damping=e.damping,
                             tol=tol, max_iter=max_iter, site_tau=tau, site_nu=nu, extra=extra,
                             device=self.device)
        K = self._cuda.gram(kernel, self.X) if self.device == "cuda" else kernel(self.X)
        return ep(K, y, lik, method=e.method, damping=e.damping, tol=tol,
                  max_iter=max_iter, site_tau=tau, site_nu=nu, extra=extra, check_psd=False,
                  device=self.device)

    def gradient(self, kernel, y, lik, res, extra=None, with_likelihood=True):
        """(d/dtheta kernel, d/dlog likelihood params, d/dZ flattened) of log Z at res."""
        if self.sparse:
            gk, gz, gl = sparse_ep_gradient(res, kernel, self.X, y, lik, extra)
            return gk, (gl if with_likelihood else np.zeros(0)), gz.ravel()
        weights = res.kernel_gradient_weights()
        gk = (self._cuda.gradient_contract(kernel, self.X, weights) if self.device == "cuda"
              else kernel.gradient_contract(self.X, weights))
        gl = (lik.tilted_dparams(y, res.cavity_mean, res.cavity_var, extra).sum(0)
              if with_likelihood and lik.n_dims else np.zeros(0))
        return gk, gl, np.zeros(0)

    def latent(self, kernel, res, Xs):
        """Latent predictive mean and variance at Xs."""
        if self.sparse:
            return res.predict_latent(kernel, Xs)
        if self.device == "cuda":
            return res.predict_latent(self._cuda.gram(kernel, self.X, Xs), kernel.diag(Xs))
        return res.predict_latent(kernel(self.X, Xs), kernel.diag(Xs))
