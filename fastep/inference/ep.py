"""Dense Expectation Propagation for latent Gaussian models (Rasmussen & Williams §3.6).

Prior ``f ~ N(0, K)``; sites ``t_i(f_i) ∝ exp(-tau_i f_i^2 / 2 + nu_i f_i)``.

Posterior refresh ("B form", every site precision >= 0)::

    B = I + S^1/2 K S^1/2 = L L^T,   V = L^-1 S^1/2 K,   Sigma = K - V^T V,   mu = Sigma nu

Negative site precisions (likelihoods that are not log-concave) use the *split
form*: the sites with tau >= 0 go through the B form above, giving Sigma_+; the
k sites with tau < 0 enter by Woodbury through the k x k Cholesky factor of
``C = I - U^T Sigma_+ U`` (``U = E_neg diag(sqrt(-tau_neg))``)::

    Sigma = Sigma_+ + Sigma_+ U C^-1 U^T Sigma_+,   log|I + K S| = log|B_+| + log|C|

No square root of a negative number is taken, and ``C`` is positive definite
exactly when the EP posterior is a proper Gaussian (otherwise a clear error).

Log evidence (R&W eq. 3.65, written without ``1 / tau`` so tau -> 0 is safe)::

    log Z_EP = sum_i [log Z_i + 1/2 log(v_-i / v_i) + mu_-i^2 / (2 v_-i) - mu_i^2 / (2 v_i)]
               + 1/2 nu^T mu - 1/2 log|B|

with the cavities ``(mu_-i, v_-i)`` recomputed from the refreshed posterior.
Its gradient for kernel parameters at the fixed point is
``1/2 tr((b b^T - R) dK)``, ``b = nu - tau * mu``, ``R = (K + S^-1)^-1``.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field

import numpy as np
from scipy.linalg import cho_solve, lapack

from .._linalg import (NotPositiveDefiniteError, blas_threads_for, cholesky_inplace,
                       solve_lower_inplace)
from . import _ep_kernels as kern

SEQUENTIAL_BLOCK = 256


class ConvergenceWarning(UserWarning):
    """EP stopped at ``max_iter`` sweeps without meeting ``tol``."""


class EPNumericalWarning(UserWarning):
    """Sites were skipped because their cavity distribution was improper."""


class _Posterior:
    """Posterior N(mu, Sigma) of f given the sites, plus what predictions need."""

    def __init__(self, K, tau, nu, need_cov=False, work=None):
        n = K.shape[0]
        self.n = n
        self.K = K
        self.tau = tau
        w1, w2 = work if work is not None else (np.empty((n, n)), np.empty((n, n)))
        ks = kern.select(n)
        tau_pos = np.maximum(tau, 0.0)
        s = np.sqrt(tau_pos)
        if not (np.any(tau) or np.any(nu)):            # sites at zero: the prior itself
            self._prior(K, w1, w2, s, need_cov)
            return
        ks.build_b(K, s, w1)
        try:
            L = cholesky_inplace(w1.T, "B = I + S^1/2 K S^1/2")
        except NotPositiveDefiniteError as exc:
            raise NotPositiveDefiniteError(
                "EP posterior refresh failed: B = I + S^1/2 K S^1/2 is not positive definite, "
                "so K is not a valid covariance matrix. Add jitter to the kernel's diagonal "
                "(e.g. a WhiteKernel(1e-6)) or check K for NaN/negative eigenvalues.") from exc
        ks.scale_columns(K, s, w2)
        solve_lower_inplace(L, w2.T)          # w2.T = V = L^-1 S^1/2 K, so w2 = V^T
        self.L, self.s, self.vt = L, s, w2
        var = np.empty(n)
        ks.row_sumsq(w2, var)
        kdiag = np.diag(K)
        var = kdiag - var
        # Sites that dominate their prior (tau K_ii >> 1, e.g. nearly noise-free
        # regression): K_ii - |V e_i|^2 cancels; use var_i = (1 - (B^-1)_ii) / tau_i there.
        strong = np.flatnonzero(tau_pos * kdiag > 1e4)
        if strong.size:
            e = np.zeros((n, strong.size), order="F")
            e[strong, np.arange(strong.size)] = 1.0
            solve_lower_inplace(L, e)
            var[strong] = (1.0 - np.einsum("ij,ij->j", e, e)) / tau_pos[strong]
        self.half_logdet = float(np.sum(np.log(np.diagonal(L))))
        self.neg = np.flatnonzero(tau < 0.0)
        self.Q = None
        if self.neg.size:
            self._split_form(var)
        self.var = var
        # mu = Sigma nu.  For sites with s > 0, write nu = s * w: then
        # K nu - V^T V nu = V^T L^-1 w exactly (B - S^1/2 K S^1/2 = I), free of the
        # cancellation between K nu and V^T V nu.  Sites with s = 0 use the plain form.
        pos = s > 0.0
        w = np.zeros(n)
        w[pos] = nu[pos] / s[pos]
        mean = w2 @ solve_lower_inplace(L, w[:, None].copy(order="F"))[:, 0]
        rest = np.where(pos, 0.0, nu)
        if np.any(rest):
            mean += K @ rest - w2 @ (w2.T @ rest)
        if self.Q is not None:
            mean += self.Q @ (self.Q.T @ nu)
        self.mean = mean
        self.cov = None
        if need_cov:
            cov = np.matmul(w2, w2.T)
            np.subtract(K, cov, out=cov)
            if self.Q is not None:
                cov += self.Q @ self.Q.T
            self.cov = cov
        if np.any(~(self.var > 0.0)):
            raise NotPositiveDefiniteError(
                "EP produced non-positive posterior variances; K is numerically singular "
                "or indefinite. Add jitter to the kernel diagonal (a WhiteKernel(1e-6)) or "
                "take smaller EP steps (e.g. damping=0.5).")

    def _prior(self, K, w1, w2, s, need_cov):
        w1[...] = 0.0
        np.fill_diagonal(w1, 1.0)
        w2[...] = 0.0
        self.L, self.s, self.vt = w1.T, s, w2
        self.var = np.diag(K).copy()
        self.mean = np.zeros(self.n)
        self.half_logdet = 0.0
        self.neg = np.zeros(0, dtype=int)
        self.Q = None
        self.cov = K.copy() if need_cov else None

    def _split_form(self, var):
        neg = self.neg
        r = np.sqrt(-self.tau[neg])
        p = self.K[:, neg] - self.vt @ self.vt[neg, :].T      # Sigma_+[:, neg]
        p *= r
        c = np.eye(neg.size) - r[:, None] * p[neg, :]
        try:
            lc = cholesky_inplace(np.asfortranarray(c), "C = I - U^T Sigma_+ U")
        except NotPositiveDefiniteError as exc:
            raise NotPositiveDefiniteError(
                "EP with negative site precisions reached an improper posterior "
                "(I - U^T Sigma_+ U is not positive definite). Take smaller EP steps "
                "(e.g. damping=0.5).") from exc
        lc = np.tril(lc)
        self.Q = np.ascontiguousarray(solve_lower_inplace(lc, np.asfortranarray(p.T)).T)
        self.half_logdet += float(np.sum(np.log(np.diagonal(lc))))
        var += np.einsum("ij,ij->i", self.Q, self.Q)

    def apply_cov(self, z):
        """Sigma @ z for an (n, m) array."""
        out = self.K @ z - self.vt @ (self.vt.T @ z)
        if self.Q is not None:
            out += self.Q @ (self.Q.T @ z)
        return out

    def apply_r(self, z):
        """R @ z with R = (K + S^-1)^-1 = S^1/2 B^-1 S^1/2 (B form) or S - S Sigma S."""
        if self.Q is None:
            sz = self.s[:, None] * z
            return self.s[:, None] * cho_solve((self.L, True), sz, check_finite=False)
        tz = self.tau[:, None] * z
        return tz - self.tau[:, None] * self.apply_cov(tz)

    def dense_r(self):
        """R as a dense (n, n) array."""
        if self.Q is not None:
            return self.apply_r(np.eye(self.n))
        inv, info = lapack.dpotri(self.L.copy(order="F"), lower=1)
        inv = np.tril(inv)
        inv = inv + np.tril(inv, -1).T
        return self.s[:, None] * inv * self.s[None, :]


@dataclass
class EPResult:
    """Output of :func:`ep`: the EP posterior at the training inputs and its evidence.

    Attributes
    ----------
    mean, var : ndarray (n,)
        Marginals of the EP posterior of f.
    site_tau, site_nu : ndarray (n,)
        Site natural parameters (precision, precision times mean).
    log_marginal_likelihood : float
        log Z_EP at the returned sites.
    n_iter : int
        Sweeps performed.
    converged : bool
    n_skipped : int
        Site updates skipped in the last sweep (improper cavity).
    cavity_mean, cavity_var : ndarray (n,)
        Cavity moments at the returned posterior (used for likelihood gradients).
    """

    mean: np.ndarray
    var: np.ndarray
    site_tau: np.ndarray
    site_nu: np.ndarray
    log_marginal_likelihood: float
    n_iter: int
    converged: bool
    n_skipped: int
    cavity_mean: np.ndarray
    cavity_var: np.ndarray
    method: str
    history: list = field(default_factory=list, repr=False)
    _posterior: _Posterior = field(default=None, repr=False)

    @property
    def b(self):
        """b = (K + S^-1)^-1 mu_tilde = nu - tau * mean; predictive mean is k*^T b."""
        return self.site_nu - self.site_tau * self.mean

    def predict_latent(self, k_cross, k_diag):
        """Latent predictive mean and variance at test points.

        ``k_cross``: (n_train, m) cross-covariance; ``k_diag``: (m,) prior variances.
        mean = k*^T b, var = k** - k*^T (K + S^-1)^-1 k*  (R&W eqs. 3.60, 3.61).
        """
        k_cross = np.asarray(k_cross, dtype=float)
        with blas_threads_for(k_cross.shape[0]):
            mean = k_cross.T @ self.b
            var = np.asarray(k_diag, dtype=float) - np.einsum(
                "ij,ij->j", k_cross, self._posterior.apply_r(k_cross))
        return mean, np.maximum(var, 0.0)

    def kernel_gradient_weights(self):
        """G = (b b^T - R) / 2, so that d log Z_EP / d theta = sum(G * dK/dtheta)."""
        with blas_threads_for(self.mean.shape[0]):
            g = self._posterior.dense_r()
        b = self.b
        g *= -0.5
        g += 0.5 * np.outer(b, b)
        return g


def check_kernel_matrix(K, y, xp=np):
    """Raise ValueError unless K (an ``xp`` array) is square, finite, non-empty and has a
    row per entry of y."""
    if K.ndim != 2 or K.shape[0] != K.shape[1]:
        raise ValueError(f"K must be a square (n, n) covariance matrix; got shape {K.shape}.")
    if not bool(xp.all(xp.isfinite(K))):
        raise ValueError("K contains NaN or infinity; check the kernel hyperparameters and X.")
    n = K.shape[0]
    if n == 0:
        raise ValueError("K is empty; EP needs at least one observation.")
    if np.asarray(y).shape[0] != n:
        raise ValueError(f"y has {np.asarray(y).shape[0]} entries but K is {n} x {n}; "
                         "they must describe the same observations.")


def check_sweep_controls(damping, tol, max_iter):
    """Raise ValueError unless damping is in (0, 1], tol > 0 and max_iter >= 1."""
    if not (0.0 < damping <= 1.0):
        raise ValueError(f"damping must be in (0, 1]; got {damping!r}.")
    if not tol > 0:
        raise ValueError(f"tol must be positive; got {tol!r}.")
    if int(max_iter) != max_iter or max_iter < 1:
        raise ValueError(f"max_iter must be an integer >= 1; got {max_iter!r}.")


def _validate(K, y, method, damping, tol, max_iter):
    K = np.asarray(K, dtype=float)
    check_kernel_matrix(K, y)
    if method not in ("parallel", "sequential"):
        raise ValueError(f"method must be 'parallel' or 'sequential'; got {method!r}.")
    check_sweep_controls(damping, tol, max_iter)
    return np.ascontiguousarray(K)


def check_device(device, owner=None):
    """Validate a ``device`` argument ("cpu" or "cuda") and return it."""
    if device not in ("cpu", "cuda"):
        where = f"of {owner} " if owner else ""
        raise ValueError(f"The 'device' parameter {where}must be one of ['cpu', 'cuda']. "
                         f"Got {device!r} instead.")
    return device


def check_covariance(K, name="K"):
    """Raise ValueError unless K is symmetric positive semi-definite (to rounding)."""
    asym = np.max(np.abs(K - K.T)) if K.shape[0] <= 8192 else 0.0
    scale = max(float(np.max(np.abs(np.diag(K)))), 1e-300)
    if asym > 1e-8 * scale:
        raise ValueError(f"{name} must be symmetric; max |{name} - {name}^T| = {asym:.3g}.")
    a = np.array(K, order="F")
    a[np.diag_indices_from(a)] += 1e-8 * scale
    try:
        cholesky_inplace(a, name)
    except NotPositiveDefiniteError:
        raise ValueError(f"{name} is not positive semi-definite (its Cholesky factorisation "
                         f"fails even with 1e-8 * max(diag) jitter). Pass a valid covariance "
                         f"matrix, e.g. add jitter: {name} + 1e-6 * I.") from None


def ep(K, y, likelihood, method="parallel", damping=None, tol=1e-4, max_iter=100,
       site_tau=None, site_nu=None, extra=None, check_psd=True, callback=None, device="cpu"):
    """Run Expectation Propagation for ``f ~ N(0, K)``, ``y_i ~ p(y_i | f_i)``.

    Parameters
    ----------
    K : ndarray (n, n)
        Prior covariance (symmetric positive semi-definite).
    y : ndarray (n,)
        Targets in the likelihood's encoding (binary likelihoods: -1/+1).
    likelihood : fastep.likelihoods.Likelihood
    method : {"parallel", "sequential"}
        Parallel EP updates all sites from the same marginals (compiled
        ``prange`` loop) then refreshes the posterior with one Cholesky of B;
        sequential EP updates sites one at a time with rank-one updates applied
        in delayed blocks of 256 sites (BLAS-3), then refreshes from scratch.
    damping : float in (0, 1], optional
        Step in natural parameters (1 = full EP update).  Default: sequential 1.0;
        parallel starts at 1.0 and multiplies the step by 0.7 (down to 0.1) whenever the
        undamped site change grows from one sweep to the next (oscillation).
    tol : float, default 1e-4
        Converged when the change of log Z_EP (relative to max(1, |log Z_EP|)) and the
        largest relative (undamped) site change
        ``|d tau| / (1 + |tau|)``, ``|d nu| / (1 + |nu|)`` both fall below ``tol``
        (after at least 2 sweeps).
    max_iter : int
        Maximum number of sweeps; a :class:`ConvergenceWarning` is issued if hit.
    site_tau, site_nu : ndarray (n,), optional
        Warm start (e.g. the sites of a previous fit).
    extra : ndarray (n, k), optional
        Per-site extras for the likelihood (default: ``likelihood.site_extra(n)``).
    check_psd : bool
        Verify that K is positive semi-definite first (one extra Cholesky).
    callback : callable, optional
        Called as ``callback(sweep, log_Z)`` after every sweep (progress reporting).
    device : {"cpu", "cuda"}, default="cpu"
        "cuda" runs parallel EP on an NVIDIA GPU (:func:`fastep.cuda.ep`; needs the
        ``cuda`` extra: numba-cuda and CuPy).  ``K`` may then be a CuPy array.

    Returns
    -------
    EPResult

    Examples
    --------
    >>> import numpy as np, fastep
    >>> from fastep.kernels import RBF
    >>> X = np.linspace(-2, 2, 20)[:, None]
    >>> y = np.where(X[:, 0] > 0, 1.0, -1.0)
    >>> res = fastep.ep(RBF(lengthscale=1.0)(X), y, fastep.likelihoods.Probit())
    >>> bool(res.converged), bool(res.mean[-1] > 0)
    (True, True)
    """
    if check_device(device) == "cuda":
        if method != "parallel":
            raise ValueError(f"device='cuda' runs parallel EP only; got method={method!r}. "
                             "Use method='parallel', or device='cpu' for sequential EP.")
        from .. import cuda
        cuda.require()
        return cuda.ep(K, y, likelihood, method=method, damping=damping, tol=tol,
                       max_iter=max_iter, site_tau=site_tau, site_nu=site_nu, extra=extra,
                       check_psd=check_psd, callback=callback)
    adaptive = damping is None and method == "parallel"
    if damping is None:
        damping = 1.0
    K = _validate(K, y, method, damping, tol, max_iter)
    with blas_threads_for(K.shape[0]):
        return _ep(K, y, likelihood, method, damping, adaptive, tol, max_iter, site_tau, site_nu,
                   extra, check_psd, callback)


def _ep(K, y, likelihood, method, damping, adaptive, tol, max_iter, site_tau, site_nu, extra,
        check_psd, callback):
    n = K.shape[0]
    if check_psd:
        check_covariance(K)
    y = likelihood.encode_targets(y)
    extra = likelihood.site_extra(n) if extra is None else np.ascontiguousarray(extra, float)
    params = likelihood.params
    tilted = likelihood._tilted
    clip = bool(likelihood.log_concave)
    work = (np.empty((n, n)), np.empty((n, n)))

    tau, nu = initial_sites(site_tau, site_nu, n, clip)
    need_cov = method == "sequential"
    try:
        post = _Posterior(K, tau, nu, need_cov, work)
    except NotPositiveDefiniteError:
        if not np.any(tau):
            raise
        tau, nu = np.zeros(n), np.zeros(n)            # warm start unusable: start cold
        post = _Posterior(K, tau, nu, need_cov, work)

    new_tau, new_nu = np.empty(n), np.empty(n)
    log_z, mu_cav, var_cav = np.empty(n), np.empty(n), np.empty(n)
    ctl = SweepControl("EP", damping, adaptive, tol, max_iter, callback)
    while True:
        skipped, ok, log_ev = _evaluate(tilted, y, extra, params, post, tau, nu, ctl.damping,
                                        clip, new_tau, new_nu, log_z, mu_cav, var_cav)
        if ctl.done(log_ev):
            break
        if method == "parallel":
            ctl.advance(_site_change(tau, nu, new_tau, new_nu))
            tau, new_tau = new_tau, tau
            nu, new_nu = new_nu, nu
        else:
            old_tau, old_nu = tau.copy(), nu.copy()
            skipped = _sequential_sweep(tilted, y, extra, params, post, tau, nu, ctl.damping,
                                        clip)
            ctl.advance(_site_change(old_tau, old_nu, tau, nu), damped=False)
        post = _Posterior(K, tau, nu, need_cov, work)

    mu_cav, var_cav = ctl.finish(ok, mu_cav, var_cav, post.mean, post.var)
    if post.cov is not None:
        post.cov = None                               # not needed after the sweeps
    post.vt = post.vt.copy() if post.vt is work[1] else post.vt
    return EPResult(mean=post.mean, var=post.var, site_tau=tau, site_nu=nu,
                    log_marginal_likelihood=float(log_ev), n_iter=ctl.sweeps,
                    converged=ctl.converged, n_skipped=int(skipped), cavity_mean=mu_cav.copy(),
                    cavity_var=var_cav.copy(), method=method, history=ctl.history,
                    _posterior=post)


def _evaluate(tilted, y, extra, params, post, tau, nu, damping, clip, new_tau, new_nu, log_z,
              mu_cav, var_cav):
    """Cavities and tilted log Z at the current posterior, log Z_EP of the current
    sites, and (as a by-product) damped parallel proposals for every site."""
    skipped = kern.select(y.shape[0]).parallel_sites(
        tilted, y, extra, params, post.mean, post.var, tau, nu, damping, clip, new_tau, new_nu,
        log_z, mu_cav, var_cav)
    ok = np.isfinite(log_z)
    log_ev = (kern.evidence_site_terms(log_z[ok], mu_cav[ok], var_cav[ok], post.mean[ok],
                                       post.var[ok])
              + 0.5 * float(nu @ post.mean) - post.half_logdet)
    return skipped, ok, log_ev


def posterior_from_sites(K, y, likelihood, site_tau, site_nu, extra=None):
    """The EP posterior and log Z_EP for *given* sites, without any sweep.

    Used to restore a saved model: the result equals the one the sites came from.
    """
    K = _validate(K, y, "parallel", 1.0, 1.0, 1)
    n = K.shape[0]
    y = likelihood.encode_targets(y)
    extra = likelihood.site_extra(n) if extra is None else np.ascontiguousarray(extra, float)
    tau = np.array(site_tau, dtype=float)
    nu = np.array(site_nu, dtype=float)
    post = _Posterior(K, tau, nu)
    buf = [np.empty(n) for _ in range(5)]
    skipped, _, log_ev = _evaluate(likelihood._tilted, y, extra, likelihood.params, post, tau,
                                   nu, 1.0, bool(likelihood.log_concave), *buf)
    return EPResult(mean=post.mean, var=post.var, site_tau=tau, site_nu=nu,
                    log_marginal_likelihood=float(log_ev), n_iter=0, converged=True,
                    n_skipped=int(skipped), cavity_mean=buf[3], cavity_var=buf[4],
                    method="parallel", history=[log_ev], _posterior=post)


def initial_sites(site_tau, site_nu, n, clip=False):
    """Starting sites ``(tau, nu)`` as new float arrays: zeros (cold start) or the given
    warm-start values, checked; ``clip`` drops negative precisions (log-concave sites)."""
    if site_tau is None and site_nu is None:
        return np.zeros(n), np.zeros(n)
    tau = np.array(site_tau, dtype=float).ravel()
    nu = np.array(site_nu, dtype=float).ravel()
    if tau.shape != (n,) or nu.shape != (n,) or not (np.all(np.isfinite(tau))
                                                    and np.all(np.isfinite(nu))):
        raise ValueError(f"site_tau and site_nu must be finite arrays of shape ({n},).")
    return (np.maximum(tau, 0.0) if clip else tau), nu


class SweepControl:
    """Convergence bookkeeping shared by every EP driver (dense and sparse, CPU and GPU).

    EP has converged when, after at least two sweeps, log Z changed by less than
    ``tol * max(1, |log Z|)`` and the largest relative site change is below ``tol``.
    With adaptive damping the step starts at 1 and shrinks by 0.7 (to at least 0.1)
    whenever the undamped site change grows from one sweep to the next.

    Use::

        ctl = SweepControl("EP", damping, adaptive, tol, max_iter, callback)
        while True:
            ...sites and log_ev from the current posterior...
            if ctl.done(log_ev):
                break
            ctl.advance(site_change)        # the damped change of this sweep's sites
            ...adopt the new sites, rebuild the posterior...
        ctl.warn(n_bad)
    """

    def __init__(self, what, damping, adaptive, tol, max_iter, callback=None):
        self.what, self.damping, self.adaptive = what, damping, adaptive
        self.tol, self.max_iter, self.callback = tol, max_iter, callback
        self.prev = self.log_ev = math.nan
        self.change = self.last_raw = math.inf
        self.history, self.sweeps, self.converged = [], 0, False

    def done(self, log_ev):
        """Record the current sweep's log Z; True when the loop is to stop."""
        self.log_ev = log_ev
        self.history.append(log_ev)
        if self.callback is not None and self.sweeps:
            self.callback(self.sweeps, log_ev)
        if (self.sweeps >= 2 and abs(log_ev - self.prev) < self.tol * max(1.0, abs(log_ev))
                and self.change < self.tol):
            self.converged = True
        return self.converged or self.sweeps >= self.max_iter

    def advance(self, change, damped=True):
        """Count a sweep whose sites moved by ``change`` (``damped``: a parallel step
        scaled by the current damping, whose undamped size drives adaptive damping)."""
        if damped:
            raw = change / self.damping
            change = raw
            if self.adaptive and raw > self.last_raw:
                self.damping = max(0.1, 0.7 * self.damping)
            self.last_raw = raw
        self.change = change
        self.sweeps += 1
        self.prev = self.log_ev

    def finish(self, ok, mu_cav, var_cav, mean, var, xp=np, stacklevel=3):
        """End of the loop: cavities of the sites left out (``~ok``, improper cavity) are
        replaced by the marginals, and the warnings are given (:meth:`warn`).  Returns
        ``(mu_cav, var_cav)``; ``xp`` is the array module (NumPy or CuPy)."""
        n_bad = int(xp.count_nonzero(~ok))
        if n_bad:
            mu_cav = xp.where(ok, mu_cav, mean)
            var_cav = xp.where(ok, var_cav, var)
        self.warn(n_bad, stacklevel + 1)
        return mu_cav, var_cav

    def warn(self, n_bad, stacklevel=3):
        """Warn about sites left out (improper cavities) and about non-convergence,
        naming the knob to turn; ``stacklevel`` counts from the caller of this method."""
        if n_bad:
            warnings.warn(f"{self.what}: {n_bad} site(s) have an improper cavity (negative "
                          "variance) and were left out of the update and of log Z; take smaller "
                          "EP steps (e.g. damping=0.5).", EPNumericalWarning,
                          stacklevel=stacklevel + 1)
        if not self.converged:
            warnings.warn(f"{self.what} did not converge in max_iter={self.max_iter} sweeps "
                          f"(last change of log Z {abs(self.log_ev - self.prev):.2e}, largest "
                          f"site change {self.change:.2e}, tol={self.tol:g}). Increase "
                          f"max_iter, or use a smaller damping (now {self.damping:g}) if EP "
                          "oscillates.", ConvergenceWarning, stacklevel=stacklevel + 1)


def _site_change(tau0, nu0, tau1, nu1):
    return float(max(np.max(np.abs(tau1 - tau0) / (1.0 + np.abs(tau0))),
                     np.max(np.abs(nu1 - nu0) / (1.0 + np.abs(nu0)))))


def _sequential_sweep(tilted, y, extra, params, post, tau, nu, damping, clip,
                      block=SEQUENTIAL_BLOCK):
    """One sequential sweep in natural order with delayed rank-b updates.

    Within a block the b x b posterior is updated site by site; the block's net
    change (dtau, dnu) then reaches the rest of the posterior at once:
    ``Sigma_TT -= Sigma_TB M Sigma_BT``, ``M = D (I + Sigma_BB D)^-1``, ``D = diag(dtau)``,
    and ``mu_T += Sigma_TB (dnu - M (mu_B + Sigma_BB dnu))``.  Only the trailing
    part T (sites after the block) is kept current, as in a right-looking Cholesky.
    """
    cov, mean = post.cov, post.mean.copy()
    n = y.shape[0]
    skipped = 0
    dtau, dnu = np.empty(block), np.empty(block)
    for b0 in range(0, n, block):
        b1 = min(n, b0 + block)
        nb = b1 - b0
        s0 = cov[b0:b1, b0:b1].copy()
        m0 = mean[b0:b1].copy()
        sb, mb = s0.copy(), m0.copy()
        skipped += kern.sequential_block(tilted, y[b0:b1], extra[b0:b1], params, sb, mb,
                                         tau[b0:b1], nu[b0:b1], damping, clip,
                                         dtau[:nb], dnu[:nb])
        if b1 == n or not (np.any(dtau[:nb]) or np.any(dnu[:nb])):
            continue
        d = dtau[:nb]
        m = np.linalg.solve(np.eye(nb) + d[:, None] * s0, np.diag(d))
        m = 0.5 * (m + m.T)
        g = dnu[:nb] - m @ (m0 + s0 @ dnu[:nb])
        p = cov[b1:, b0:b1]
        cov[b1:, b1:] -= (p @ m) @ p.T
        mean[b1:] += p @ g
    return skipped
