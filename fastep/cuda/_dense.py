"""Dense parallel EP on the GPU: the twin of :func:`fastep.inference.ep.ep`.

K, the targets, the per-site extras and the sites live on the device for the whole
run; a sweep is one launch of the parallel-sites kernel (cavities, tilted moments,
damped proposals: :func:`fastep.cuda.kernels.parallel_sites`), then the posterior
refresh of :class:`fastep.inference.ep._Posterior` written with CuPy: B form
``B = I + S^1/2 K S^1/2 = L L^T`` (cuSOLVER potrf), ``V = L^-1 S^1/2 K`` (cuBLAS
trsm), the cancellation-free mean and the variances of dominant sites, and the split
(Woodbury) form for negative site precisions.  Only scalars (log Z, the site change,
the skipped count) come back to the host per sweep.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._linalg import NotPositiveDefiniteError
from ..inference.ep import (EPResult, SweepControl, check_kernel_matrix, check_sweep_controls,
                            initial_sites)
from . import kernels as ck
from ._backend import get_backend


class _DevicePosterior:
    """Posterior N(mu, Sigma) of f on the device (see ``ep._Posterior`` for the maths)."""

    def __init__(self, be, K, tau, nu, kdiag):
        xp = be.xp
        n = K.shape[0]
        self.be, self.n, self.K, self.tau = be, n, K, tau
        tau_pos = xp.maximum(tau, 0.0)
        s = xp.sqrt(tau_pos)
        self.s = s
        self.Q = None
        if not (bool(xp.any(tau != 0.0)) or bool(xp.any(nu != 0.0))):   # the prior itself
            self.L, self.vt = None, None
            self.var = kdiag.copy()
            self.mean = xp.zeros(n)
            self.half_logdet = 0.0
            return
        B = xp.empty((n, n))
        ck.build_b(K, s, B)
        try:
            L = be.cholesky(B, "B = I + S^1/2 K S^1/2")
        except NotPositiveDefiniteError as exc:
            raise NotPositiveDefiniteError(
                "EP posterior refresh failed: B = I + S^1/2 K S^1/2 is not positive definite, "
                "so K is not a valid covariance matrix. Add jitter to the kernel's diagonal "
                "(e.g. a WhiteKernel(1e-6)) or check K for NaN/negative eigenvalues.") from exc
        del B
        w2 = xp.empty((n, n))
        ck.scale_columns(K, s, w2)                         # K S^1/2; its transpose is S^1/2 K
        w2 = be.solve_triangular(L, w2.T, overwrite_b=True).T   # V^T, V = L^-1 S^1/2 K
        self.L, self.vt = L, w2
        var = xp.empty(n)
        ck.row_sumsq(w2, var)
        var = kdiag - var
        strong = xp.flatnonzero(tau_pos * kdiag > 1e4)
        if strong.size:
            e = xp.zeros((n, int(strong.size)))
            e[strong, xp.arange(int(strong.size))] = 1.0
            e = be.solve_triangular(L, e)
            var[strong] = (1.0 - xp.sum(e * e, axis=0)) / tau_pos[strong]
        self.half_logdet = float(xp.sum(xp.log(xp.diagonal(L))))
        self.neg = xp.flatnonzero(tau < 0.0)
        if self.neg.size:
            self._split_form(var)
        self.var = var
        pos = s > 0.0
        w = xp.where(pos, nu / xp.where(pos, s, 1.0), 0.0)
        mean = w2 @ be.solve_triangular(L, w)
        rest = xp.where(pos, 0.0, nu)
        if bool(xp.any(rest != 0.0)):
            mean += K @ rest - w2 @ (w2.T @ rest)
        if self.Q is not None:
            mean += self.Q @ (self.Q.T @ nu)
        self.mean = mean
        if not bool(xp.all(var > 0.0)):
            raise NotPositiveDefiniteError(
                "EP produced non-positive posterior variances; K is numerically singular "
                "or indefinite. Add jitter to the kernel diagonal (a WhiteKernel(1e-6)) or "
                "take smaller EP steps (e.g. damping=0.5).")

    def _split_form(self, var):
        xp, be, neg = self.be.xp, self.be, self.neg
        r = xp.sqrt(-self.tau[neg])
        p = self.K[:, neg] - self.vt @ self.vt[neg, :].T
        p *= r
        c = xp.eye(int(neg.size)) - r[:, None] * p[neg, :]
        try:
            lc = be.cholesky(c, "C = I - U^T Sigma_+ U")    # reads the lower triangle
        except NotPositiveDefiniteError as exc:
            raise NotPositiveDefiniteError(
                "EP with negative site precisions reached an improper posterior "
                "(I - U^T Sigma_+ U is not positive definite). Take smaller EP steps "
                "(e.g. damping=0.5).") from exc
        self.Q = xp.ascontiguousarray(be.solve_triangular(lc, p.T).T)
        self.half_logdet += float(xp.sum(xp.log(xp.diagonal(lc))))
        var += xp.sum(self.Q * self.Q, axis=1)

    def apply_cov(self, z):
        """Sigma @ z for an (n, m) device array."""
        out = self.K @ z
        if self.vt is not None:
            out -= self.vt @ (self.vt.T @ z)
        if self.Q is not None:
            out += self.Q @ (self.Q.T @ z)
        return out

    def apply_r(self, z):
        """R @ z, R = (K + S^-1)^-1 = S^1/2 B^-1 S^1/2 (B form) or S - S Sigma S."""
        if self.L is None:
            return self.be.xp.zeros_like(z)
        if self.Q is None:
            sz = self.s[:, None] * z
            t = self.be.solve_triangular(self.L, sz)
            return self.s[:, None] * self.be.solve_triangular(self.L, t, trans=1)
        tz = self.tau[:, None] * z
        return tz - self.tau[:, None] * self.apply_cov(tz)

    def dense_r(self):
        """R as a dense (n, n) device array."""
        xp = self.be.xp
        if self.L is None:
            return xp.zeros((self.n, self.n))
        if self.Q is not None:
            return self.apply_r(xp.eye(self.n))
        li = self.be.solve_triangular(self.L, xp.eye(self.n), overwrite_b=True)
        inv = li.T @ li
        del li
        inv *= self.s[:, None]
        inv *= self.s[None, :]
        return inv


@dataclass
class DeviceEPResult(EPResult):
    """:class:`~fastep.EPResult` of the GPU driver: the arrays are NumPy (host) arrays;
    the posterior, for predictions and evidence gradients, stays on the device."""

    def predict_latent(self, k_cross, k_diag):
        """Latent predictive mean and variance (host arrays) at test points; ``k_cross``
        (n_train, m) and ``k_diag`` (m,) may be host or device arrays."""
        post = self._posterior
        be, xp = post.be, post.be.xp
        kc = be.asarray(k_cross)
        mean = kc.T @ be.asarray(self.b)
        var = be.asarray(k_diag) - xp.sum(kc * post.apply_r(kc), axis=0)
        return be.to_host(mean), np.maximum(be.to_host(var), 0.0)

    def kernel_gradient_weights(self):
        """G = (b b^T - R) / 2 as a device array (contract it with
        :func:`fastep.cuda.gradient_contract`)."""
        post = self._posterior
        g = post.dense_r()
        b = post.be.asarray(self.b)
        g *= -0.5
        g += 0.5 * (b[:, None] * b[None, :])
        return g


def _check_covariance(be, K, name="K"):
    """Device twin of ``ep.check_covariance``."""
    xp = be.xp
    n = K.shape[0]
    asym = float(xp.max(xp.abs(K - K.T))) if n <= 8192 else 0.0
    scale = max(float(xp.max(xp.abs(xp.diagonal(K)))), 1e-300)
    if asym > 1e-8 * scale:
        raise ValueError(f"{name} must be symmetric; max |{name} - {name}^T| = {asym:.3g}.")
    a = K + (1e-8 * scale) * xp.eye(n)
    try:
        be.cholesky(a, name)
    except NotPositiveDefiniteError:
        raise ValueError(f"{name} is not positive semi-definite (its Cholesky factorisation "
                         f"fails even with 1e-8 * max(diag) jitter). Pass a valid covariance "
                         f"matrix, e.g. add jitter: {name} + 1e-6 * I.") from None


def _validate_device_k(be, K, y, method, damping, tol, max_iter):
    """The checks of ``ep._validate`` for a K that may already live on the device."""
    K = be.asarray(K)
    check_kernel_matrix(K, y, be.xp)
    if method != "parallel":
        raise ValueError(f"device='cuda' runs parallel EP only; got method={method!r}. Use "
                         "method='parallel', or device='cpu' for sequential EP.")
    check_sweep_controls(damping, tol, max_iter)
    return K


def _site_change(xp, tau0, nu0, tau1, nu1):
    return float(max(float(xp.max(xp.abs(tau1 - tau0) / (1.0 + xp.abs(tau0)))),
                     float(xp.max(xp.abs(nu1 - nu0) / (1.0 + xp.abs(nu0))))))


def ep(K, y, likelihood, method="parallel", damping=None, tol=1e-4, max_iter=100,
       site_tau=None, site_nu=None, extra=None, check_psd=True, callback=None, backend=None):
    """Dense parallel EP on the GPU; arguments and result as :func:`fastep.ep`.

    ``K`` may be a host (NumPy) or device (CuPy) array; the returned
    :class:`DeviceEPResult` holds host arrays.  ``backend`` is for tests
    (:func:`fastep.cuda._backend.numpy_backend` under the CUDA simulator).
    """
    be = get_backend(backend)
    xp = be.xp
    adaptive = damping is None
    damping = 1.0 if damping is None else damping
    K = _validate_device_k(be, K, y, method, damping, tol, max_iter)
    n = K.shape[0]
    if check_psd:
        _check_covariance(be, K)
    y = be.asarray(likelihood.encode_targets(y))
    extra, params = be.site_inputs(likelihood.site_extra(n) if extra is None else extra,
                                   likelihood.params)
    tilted = likelihood._tilted
    clip = bool(likelihood.log_concave)
    kdiag = xp.ascontiguousarray(xp.diagonal(K))

    tau, nu = (be.asarray(a) for a in initial_sites(site_tau, site_nu, n, clip))
    try:
        post = _DevicePosterior(be, K, tau, nu, kdiag)
    except NotPositiveDefiniteError:
        if not bool(xp.any(tau != 0.0)):
            raise
        tau, nu = xp.zeros(n), xp.zeros(n)
        post = _DevicePosterior(be, K, tau, nu, kdiag)

    new_tau, new_nu = xp.empty(n), xp.empty(n)
    log_z, mu_cav, var_cav = xp.empty(n), xp.empty(n), xp.empty(n)
    counter = xp.zeros(1, dtype=np.int64)
    ctl = SweepControl("EP", damping, adaptive, tol, max_iter, callback)
    while True:
        counter[...] = 0
        ck.parallel_sites(tilted, y, extra, params, post.mean, post.var, tau, nu, ctl.damping,
                          clip, new_tau, new_nu, log_z, mu_cav, var_cav, counter)
        skipped = int(counter[0])
        ok = xp.isfinite(log_z)
        terms = (log_z + 0.5 * xp.log(var_cav / post.var) + 0.5 * mu_cav * mu_cav / var_cav
                 - 0.5 * post.mean * post.mean / post.var)
        log_ev = (float(xp.sum(xp.where(ok, terms, 0.0))) + 0.5 * float(nu @ post.mean)
                  - post.half_logdet)
        if ctl.done(log_ev):
            break
        ctl.advance(_site_change(xp, tau, nu, new_tau, new_nu))
        tau, new_tau = new_tau, tau
        nu, new_nu = new_nu, nu
        post = None                                   # free the old factors first
        post = _DevicePosterior(be, K, tau, nu, kdiag)

    mu_cav, var_cav = ctl.finish(ok, mu_cav, var_cav, post.mean, post.var, xp)
    host = be.to_host
    return DeviceEPResult(mean=host(post.mean).copy(), var=host(post.var).copy(),
                          site_tau=host(tau).copy(), site_nu=host(nu).copy(),
                          log_marginal_likelihood=float(log_ev), n_iter=ctl.sweeps,
                          converged=ctl.converged, n_skipped=int(skipped),
                          cavity_mean=host(mu_cav).copy(), cavity_var=host(var_cav).copy(),
                          method="parallel", history=ctl.history, _posterior=post)
