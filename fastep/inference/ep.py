"""Dense Expectation Propagation for latent Gaussian models (Rasmussen & Williams §3.6).

The posterior and its refresh (the B form, the split form for negative site precisions)
are :mod:`fastep.inference._dense_posterior`.

Log evidence (R&W eq. 3.65, written without ``1 / tau`` so tau -> 0 is safe)::

    log Z_EP = sum_i [log Z_i + 1/2 log(v_-i / v_i) + mu_-i^2 / (2 v_-i) - mu_i^2 / (2 v_i)]
               + 1/2 nu^T mu - 1/2 log|B|

with the cavities ``(mu_-i, v_-i)`` recomputed from the refreshed posterior.
Its gradient for kernel parameters at the fixed point is
``1/2 tr((b b^T - R) dK)``, ``b = nu - tau * mu``, ``R = (K + S^-1)^-1``
(:func:`ep_gradient`).

The driver is written once over a backend (:mod:`fastep.backend`): on the CPU the
factorisations run in place on reused buffers (LAPACK), on the GPU through CuPy, and
the per-site loops are the backend's compiled loops.

Over 450 lines: one job, the dense EP driver: the parallel and sequential schedules,
robust EP's fallbacks and the result object's documented methods.
"""
from __future__ import annotations

import contextlib
import logging
import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Tuple

import numpy as np
from numpy.typing import ArrayLike

from .._memory import DENSE_EP_MATRICES
from .._numerics import predictive_variance
from .._sites import SiteBuffers
from ..backend import resolve
from ..exceptions import ConvergenceWarning, EPNumericalWarning, NotPositiveDefiniteError
from ..likelihoods import Likelihood, check_likelihood
from ._dense_posterior import _Posterior
from ._result import EPResultBase
from ._anderson import anderson_for
from ._sweep import (StepTurn, SweepControl, backtrack, check_kernel_matrix,
                     check_sweep_controls, damping_rule, fill_cavities, halve_towards,
                     initial_sites, site_change)

SEQUENTIAL_BLOCK = 256

#: Anderson acceleration of parallel EP (:class:`fastep.inference._anderson.Anderson`), once
#: the largest relative site change of a sweep is below ``ANDERSON_START``: farther from
#: the fixed point the update is too far from linear for past steps to predict it
ANDERSON = True
ANDERSON_START = 1e-2


#: method="auto"'s schedule switches (DEBUG; not on ``fastep.sweeps``, which counts sweeps)
LOG = logging.getLogger(__name__)

#: method="auto" halves the damping of its sequential sweeps while they stall, down to this
#: (or to the given damping, if smaller)
MIN_SEQUENTIAL_DAMPING = 0.05
METHODS = ("parallel", "sequential", "auto")

__all__ = ["ep", "EPResult", "ep_gradient", "posterior_from_sites", "check_covariance",
           "ConvergenceWarning", "EPNumericalWarning"]


@dataclass
class EPResult(EPResultBase):
    """Output of :func:`ep`: the EP posterior at the training inputs and its evidence
    (the fields of :class:`~fastep.inference._result.EPResultBase` and those below).

    All arrays are NumPy arrays (also after a GPU run).

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
        Whether the convergence rule of :func:`ep` was met within ``max_iter`` sweeps.
    n_skipped : int
        Site updates skipped in the last sweep (improper cavity).
    cavity_mean, cavity_var : ndarray (n,)
        Cavity moments at the returned posterior (used for likelihood gradients).
    method : str
        The EP schedule of the last sweeps, ``"parallel"`` or ``"sequential"``
        (``method="auto"`` reports the one it ended with).
    history : list of float, default []
        log Z_EP after every sweep (the first entry is that of the starting sites).

    Examples
    --------
    >>> import numpy as np, fastep
    >>> from fastep.kernels import RBF
    >>> X = np.linspace(-1, 1, 8)[:, None]
    >>> res = fastep.ep(RBF()(X), np.sign(X[:, 0] + 0.01), fastep.likelihoods.Probit())
    >>> res.method, len(res.history) == res.n_iter + 1, res.mean.shape
    ('parallel', True, (8,))
    """

    method: str
    history: list = field(default_factory=list, repr=False)
    _posterior: Optional[_Posterior] = field(default=None, repr=False)

    def _post(self) -> _Posterior:
        """The posterior factorisation EP ended with (results sent between processes
        travel without it and get it back where they are used)."""
        if self._posterior is None:
            raise ValueError("this EPResult carries no posterior factorisation (it was copied "
                             "without one); predict with the estimator that fitted it.")
        return self._posterior

    @property
    def factored(self) -> bool:
        """Whether the result holds the posterior's factorisation (what its predictions
        read), or travels without it (:meth:`without_factors`)."""
        return self._posterior is not None

    def without_factors(self) -> "EPResult":
        """This result without the posterior's n x n factors: what a worker process sends
        back (the factors are rebuilt from the sites where the result is used,
        :meth:`with_factors_of`).

        Examples
        --------
        >>> import numpy as np, fastep
        >>> res = fastep.ep(np.eye(3), np.array([1.0, -1.0, 1.0]), fastep.likelihoods.Probit())
        >>> res.factored, res.without_factors().factored
        (True, False)
        """
        return dataclasses.replace(self, _posterior=None)

    def with_factors_of(self, other: "EPResult") -> "EPResult":
        """This result with the posterior factors of ``other``, a result at the same sites
        (e.g. :func:`posterior_from_sites` of them).

        Parameters
        ----------
        other : EPResult
            A result at this one's sites that holds its factors.

        Returns
        -------
        EPResult
        """
        return dataclasses.replace(self, _posterior=other._posterior)

    @property
    def b(self):
        """b = (K + S^-1)^-1 mu_tilde = nu - tau * mean; predictive mean is k*^T b."""
        return self.site_nu - self.site_tau * self.mean

    def predict_latent(self, k_cross: ArrayLike, k_diag: ArrayLike
                       ) -> Tuple[np.ndarray, np.ndarray]:
        """Latent predictive mean and variance at test points (host arrays).

        mean = k*^T b, var = k** - k*^T (K + S^-1)^-1 k*  (R&W eqs. 3.60, 3.61).

        Parameters
        ----------
        k_cross : array-like of shape (n_train, m)
            The cross-covariance ``K(X_train, X_test)`` of the m test points (on the host
            or on the backend that ran EP).
        k_diag : array-like of shape (m,)
            The prior variances ``k(x*, x*)`` of the test points (likewise).

        Returns
        -------
        mean, var : ndarray (m,)
        """
        post = self._post()
        be = post.be
        kx = be.asarray(k_cross)
        with be.threads_for(kx.shape[0], one_pool=post.Q is None):
            mean = kx.T @ be.asarray(self.b)
            prior = be.asarray(k_diag)
            var = prior - be.xp.einsum("ij,ij->j", kx, post.apply_r(kx))
        return be.to_host(mean), predictive_variance(be.to_host(prior), be.to_host(var))

    def kernel_gradient_weights(self) -> np.ndarray:
        """G = (b b^T - R) / 2, so that d log Z_EP / d theta = sum(G * dK/dtheta); an array
        of the backend that ran EP."""
        post = self._post()
        be = post.be
        with be.threads_for(self.mean.shape[0], one_pool=post.Q is None):
            b = be.asarray(self.b)
            if post.Q is None and not post.at_prior:            # B form: one pass
                return be.gradient_weights(post.li, post.s, b)
            return be.weights_from_r(post.dense_r(), b)


def check_covariance(K, name="K", device="cpu"):
    """Raise ValueError unless K is symmetric positive semi-definite (to rounding)."""
    be = resolve(device)
    xp = be.xp
    K = be.asarray(K)
    n = K.shape[0]
    asym = float(xp.max(xp.abs(K - K.T))) if n <= 8192 else 0.0
    scale = max(float(xp.max(xp.abs(xp.diagonal(K)))), 1e-300)
    if asym > 1e-8 * scale:
        raise ValueError(f"{name} must be symmetric; max |{name} - {name}^T| = {asym:.3g}.")
    a = xp.array(K, order="F")
    idx = xp.arange(n)
    a[idx, idx] += 1e-8 * scale
    try:
        be.cholesky(a, name)
    except NotPositiveDefiniteError:
        raise ValueError(f"{name} is not positive semi-definite (its Cholesky factorisation "
                         f"fails even with 1e-8 * max(diag) jitter). Pass a valid covariance "
                         f"matrix, e.g. add jitter: {name} + 1e-6 * I.") from None


def check_method(method, be):
    """Raise ValueError unless ``method`` is a dense EP schedule that backend ``be`` runs."""
    if method not in METHODS:
        raise ValueError(f"method must be 'parallel', 'sequential' or 'auto'; got "
                         f"{method!r}.")
    if method != "auto" and method not in be.ep_methods:
        raise ValueError(f"device={be.name!r} runs {' or '.join(be.ep_methods)} EP only; got "
                         f"method={method!r}. Use method='parallel', or device='cpu' for "
                         f"{method} EP.")


def _prepare(be, K, y, likelihood, extra):
    """Checked data: K (a C-ordered backend array), encoded targets and the site inputs."""
    check_likelihood(likelihood)
    y = likelihood.encode_targets(y)
    K = check_kernel_matrix(K, y.shape[0], be.xp)
    n = K.shape[0]
    be.check_dense_memory(n, DENSE_EP_MATRICES - 1)          # K exists already
    extra = likelihood.check_extra(extra, n)
    return K, be.site_inputs(likelihood, y, extra)


def ep(K: ArrayLike, y: ArrayLike, likelihood: Likelihood, method: str = "parallel",
       damping: Optional[float] = None, tol: float = 1e-4, max_iter: int = 100,
       site_tau: Optional[ArrayLike] = None, site_nu: Optional[ArrayLike] = None,
       extra: Optional[ArrayLike] = None, check_psd: bool = True,
       callback: Optional[Callable[[int, float], Any]] = None, device: str = "cpu",
       robust: Optional[bool] = None, outer: Any = None) -> EPResult:
    """Run Expectation Propagation for ``f ~ N(0, K)``, ``y_i ~ p(y_i | f_i)``.

    Parameters
    ----------
    K : ndarray (n, n)
        Prior covariance (symmetric positive semi-definite); with ``device="cuda"`` it may
        be a CuPy array.
    y : ndarray (n,)
        Targets in the likelihood's encoding (binary likelihoods: -1/+1).
    likelihood : fastep.likelihoods.Likelihood
    method : {"parallel", "sequential", "auto"}, default "parallel"
        Parallel EP updates all sites from the same marginals (compiled
        ``prange`` loop) then refreshes the posterior with one Cholesky of B;
        sequential EP updates sites one at a time with rank-one updates applied
        in delayed blocks of 256 sites (BLAS-3), then refreshes from scratch
        (CPU only).  "auto" runs parallel sweeps and goes on with sequential ones
        (on the CPU, at the given damping) once the largest site change fails to halve
        over 5 sweeps (while ``outer`` moves, the sites must also have swung back:
        :meth:`SweepControl.stalled`), and halves their damping (down to 0.05) each
        time they stall in turn: parallel EP with sites of negative precision in a
        strongly coupled prior (e.g. annotators, large kernel variance) can oscillate for
        hundreds of sweeps where sequential EP settles in a few tens.
    damping : float in (0, 1], optional
        Step in natural parameters (1 = full EP update).  None (the default) means
        1.0 for sequential EP; for parallel EP (and "auto") it is adaptive: the step starts
        at 1.0, is multiplied by 0.7 (down to 0.1) when the undamped site change grows
        or the sites swing back without the change halving, and is divided by 0.7 again
        (up to 1) once per run of three sweeps that kept their direction and shrank the
        change (:class:`SweepControl <fastep.inference._sweep.SweepControl>`); "auto"'s
        sequential sweeps start again at the given damping (1.0 for None).
    tol : float, default 1e-4
        Converged when the change of log Z_EP (relative to ``max(1, |log Z_EP|)``) and the
        largest relative (undamped) site change
        ``|d tau| / (1 + |tau|)``, ``|d nu| / (1 + |nu|)`` both fall below ``tol``
        (after at least 2 sweeps from a cold start, 1 from warm-start sites).
    max_iter : int, default 100
        Maximum number of sweeps; a :class:`ConvergenceWarning` is issued if hit.
    site_tau, site_nu : ndarray (n,), optional
        Warm start (e.g. the sites of a previous fit).
    extra : ndarray (n, k), optional
        Per-site extras for the likelihood (default: ``likelihood.site_extra(n)``).
    check_psd : bool, default True
        Verify that K is positive semi-definite first (one extra Cholesky).
    callback : callable, optional
        Called as ``callback(sweep, log_Z)`` after every sweep (progress reporting).
    device : {"cpu", "cuda"}, default="cpu"
        Where EP runs (:func:`fastep.backend.resolve`); "cuda" needs the ``cuda``
        extra (numba-cuda and CuPy) and runs parallel EP.
    robust : bool, optional
        Robust parallel EP (default: when the likelihood is not log-concave, e.g.
        Student-t or multiple annotators): a proposed step that makes the posterior
        improper, or the cavity of any site improper, is halved until neither happens,
        and later sweeps start from the smaller damping (which grows back to the given
        one once EP settles).  Every iterate is then a proper
        Gaussian with proper cavities, and the fixed point is that of plain EP (plain EP
        stops with an error at an improper posterior).  Sequential EP is unaffected.
    outer : object, optional
        An outer fixed-point update of the likelihood's per-site data run inside the sweep
        loop (e.g. EM for the reliabilities of annotators): after every evaluation
        ``outer.propose(sweep, mu_cav, var_cav)`` (host arrays, the cavities at the
        current posterior) returns ``(new extra (n, k) or None, settled)``; a new
        ``extra`` is adopted, and ``outer.accept()`` called, only when the loop goes on.
        EP converges only once ``outer`` has settled and a whole sweep has run with the
        last adopted ``extra``, and the result is that of the last adopted ``extra``.

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
    be = resolve(device, "fastep.ep")
    check_method(method, be)
    check_sweep_controls(damping_rule(damping)[0], tol, max_iter)
    return run_ep(be, K, y, likelihood, method, damping, tol, max_iter, site_tau, site_nu,
                  extra, check_psd, callback, robust, outer)


def run_ep(backend, K, y, likelihood, method, damping, tol, max_iter, site_tau=None,
           site_nu=None, extra=None, check_psd=False, callback=None, robust=None, outer=None):
    """:func:`ep` on ``backend`` (resolved) with its parameters ``method``, ``damping``,
    ``tol`` and ``max_iter`` already checked, by :func:`ep` or by an estimator's ``fit``
    (scikit-learn's constraints), where they are checked once; the data (K, y, sites,
    extra) are checked here."""
    be = backend
    damping, adaptive = damping_rule(damping, method in ("parallel", "auto"))
    K, inputs = _prepare(be, K, y, likelihood, extra)
    robust = (not likelihood.log_concave) if robust is None else bool(robust)
    # parallel sweeps run NumPy's matrix-vector products beside SciPy's threaded LAPACK
    # (one_pool), the negative-site form too (its n x k work is SciPy's dtrmm: with both
    # pools threaded a zero-inflated Poisson sweep at n = 4,000 took 1.8-2.0x a probit
    # sweep, with one 1.1-1.6x); sequential sweeps' rank-b updates are NumPy matrix
    # products, kept threaded
    with be.threads_for(K.shape[0]), contextlib.ExitStack() as parallel_only:
        if method != "sequential":
            parallel_only.enter_context(be.threads_for(K.shape[0], one_pool=True))
        return _ep(be, K, inputs, likelihood, method, damping, adaptive, tol, max_iter, site_tau,
                   site_nu, check_psd, callback, robust, outer, parallel_only)


def _ep(be, K, inputs, likelihood, method, damping, adaptive, tol, max_iter, site_tau, site_nu,
        check_psd, callback, robust=False, outer=None, parallel_only=None):
    xp = be.xp
    n = K.shape[0]
    if check_psd:
        check_covariance(K, device=be)
    data = inputs
    tilted = likelihood.scalar_tilted
    clip = bool(likelihood.log_concave)
    kdiag = xp.ascontiguousarray(xp.diagonal(K))
    work = be.dense_work(n)

    tau, nu = (be.asarray(a) for a in initial_sites(site_tau, site_nu, n, clip))
    switch = method == "auto" and "sequential" in be.ep_methods     # parallel until stalled
    method = "parallel" if method == "auto" else method
    need_cov = method == "sequential"
    turn = StepTurn()
    try:
        post = _Posterior(be, K, kdiag, tau, nu, need_cov, work)
        if robust and method == "parallel" and not bool(xp.all(_proper_cavities(post, tau))):
            raise NotPositiveDefiniteError("a warm start with improper cavities")
    except NotPositiveDefiniteError:
        if not bool(xp.any(tau != 0.0)):
            raise
        tau, nu = xp.zeros(n), xp.zeros(n)            # warm start unusable: start cold
        post = _Posterior(be, K, kdiag, tau, nu, need_cov, work)

    new_tau, new_nu = xp.empty(n), xp.empty(n)
    log_z, mu_cav, var_cav = xp.empty(n), xp.empty(n), xp.empty(n)
    warm = bool(xp.any(tau != 0.0)) or bool(xp.any(nu != 0.0))
    ctl = SweepControl("EP", damping, adaptive, tol, max_iter, callback,
                       min_sweeps=1 if warm else 2)
    # Anderson acceleration where every site stays a proper factor (log-concave: tau >= 0)
    accel = (anderson_for(n) if ANDERSON and method == "parallel" and clip and not robust
             and outer is None else None)
    proposal, settled, adopted = None, True, False
    while True:
        skipped, ok, log_ev = _evaluate(be, tilted, data, post, tau, nu, ctl.damping, clip,
                                        (new_tau, new_nu, log_z, mu_cav, var_cav))
        if outer is not None:
            proposal, settled = outer.propose(
                ctl.sweeps, *(be.to_host(a) for a in fill_cavities(ok, mu_cav, var_cav,
                                                                   post.mean, post.var, xp)[:2]))
            # the sweep after an adoption still moved sites made with the old data
            settled = settled and not adopted
        if ctl.done(log_ev, settled=settled):
            break
        adopted = proposal is not None
        if adopted:
            data = be.site_inputs(likelihood, data.y, likelihood.check_extra(proposal, n))
            outer.accept()
        damped = None
        if method == "parallel":
            change, cosine = turn(xp, tau, nu, new_tau, new_nu)
            used = ctl.damping
            ctl.advance(change, turn=cosine)
            if accel is not None and ctl.change >= ANDERSON_START:
                accel.reset()                  # far from the fixed point: plain steps
            elif accel is not None:
                damped = new_tau.copy(), new_nu.copy()
                a_tau, a_nu = accel.step(xp, tau, nu, new_tau, new_nu, used, ctl.damping,
                                         be.to_host)
                a_tau = xp.maximum(a_tau, 0.0)
                if bool(xp.all(xp.isfinite(a_tau))) and bool(xp.all(xp.isfinite(a_nu))):
                    # converged means: this sweep's residual and the step taken both small
                    ctl.change = max(ctl.change, site_change(xp, tau, nu, a_tau, a_nu))
                    new_tau[:], new_nu[:] = a_tau, a_nu
                else:
                    accel.reset()
                    damped = None
            tau, new_tau = new_tau, tau
            nu, new_nu = new_nu, nu
        else:
            old_tau, old_nu = tau.copy(), nu.copy()
            skipped = _sequential_sweep(be, tilted, data, post, tau, nu, ctl.damping, clip)
            # a damped sequential sweep moves each site by about damping x its EP update
            change, cosine = turn(xp, old_tau, old_nu, tau, nu)
            ctl.advance(change / ctl.damping, damped=False, turn=cosine if switch else None)
        post = None                                   # free the old factors first
        if robust and method == "parallel":
            post = _backtrack(be, K, kdiag, new_tau, new_nu, tau, nu, work, ctl)
        elif damped is not None:
            try:
                post = _Posterior(be, K, kdiag, tau, nu, need_cov, work)
            except NotPositiveDefiniteError:           # the combined step went too far:
                tau[:], nu[:] = damped                 # the damped one, and start afresh
                accel.reset()
                post = _Posterior(be, K, kdiag, tau, nu, need_cov, work)
        else:
            post = _Posterior(be, K, kdiag, tau, nu, need_cov, work)
        if switch and ctl.stalled():
            if method == "parallel":
                # sequential steps keep q proper without robust EP's shortening: they
                # start at the given damping, however far backtracking had cut it
                LOG.debug("EP sweep %d: parallel EP stalled, going on sequentially",
                          ctl.sweeps)
                method, need_cov, post = "sequential", True, None
                if parallel_only is not None:
                    parallel_only.close()
                post = _Posterior(be, K, kdiag, tau, nu, need_cov, work)
                ctl.damping = damping
            else:
                LOG.debug("EP sweep %d: sequential EP stalled, halving the damping",
                          ctl.sweeps)
                ctl.damping = max(min(MIN_SEQUENTIAL_DAMPING, ctl.damping), 0.5 * ctl.damping)

    if need_cov:
        # the result in the form of a parallel refresh, which posterior_from_sites (a
        # loaded model) rebuilds: the sequential refresh's marginals differ in rounding
        post = None
        post = _Posterior(be, K, kdiag, tau, nu, False, work)
        skipped, ok, log_ev = _evaluate(be, tilted, data, post, tau, nu, ctl.damping, clip,
                                        (new_tau, new_nu, log_z, mu_cav, var_cav))
        ctl.history[-1] = log_ev
    mu_cav, var_cav = ctl.finish(ok, mu_cav, var_cav, post.mean, post.var, xp)
    return _result(be, post, tau, nu, log_ev, ctl.sweeps, ctl.converged, skipped, mu_cav,
                   var_cav, method, ctl.history)


def _proper_cavities(post, tau):
    """Whether every cavity of ``post`` (whose sites have precisions ``tau``) is proper."""
    return 1.0 / post.var - tau > 0.0


def _backtrack(be, K, kdiag, old_tau, old_nu, tau, nu, work, ctl):
    """Robust parallel EP (:func:`fastep.inference._sweep.backtrack`): the posterior at
    the proposed sites ``tau, nu`` if it is proper with a proper cavity at every site,
    else at a shorter step from ``old_*``.  Plain parallel EP stops with an error at an
    improper posterior and skips sites with an improper cavity."""
    xp = be.xp

    def attempt(step):                    # the sites in tau, nu are already the step's
        try:
            post = _Posterior(be, K, kdiag, tau, nu, False, work)
        except NotPositiveDefiniteError:
            return None
        return post if bool(xp.all(_proper_cavities(post, tau))) else None

    return backtrack(attempt, halve_towards(old_tau, old_nu, tau, nu), ctl,
                     "robust EP: no step of at least {min_step:g} of the proposed site update "
                     "keeps the posterior and its cavities proper; the kernel matrix may be "
                     "near singular (add jitter, e.g. a WhiteKernel(1e-6)) or the likelihood "
                     "parameters far from the data (e.g. a Student-t scale far too small).")


def _result(be, post, tau, nu, log_ev, sweeps, converged, skipped, mu_cav, var_cav, method,
            history):
    host = be.to_host
    return EPResult(mean=host(post.mean), var=host(post.var), site_tau=host(tau),
                    site_nu=host(nu), log_marginal_likelihood=float(log_ev), n_iter=sweeps,
                    converged=converged, n_skipped=int(skipped), cavity_mean=host(mu_cav),
                    cavity_var=host(var_cav), method=method, history=history, _posterior=post)


def _evaluate(be, tilted, data, post, tau, nu, damping, clip, out):
    """Cavities and tilted log Z at the current posterior, log Z_EP of the current
    sites, and (as a by-product) damped parallel proposals for every site; ``out`` holds
    the arrays written, the last five fields of :class:`fastep._sites.SiteBuffers`
    (proposals, log Z_i, cavities)."""
    bufs = SiteBuffers(post.mean, post.var, tau, nu, *out)
    skipped = be.parallel_sites(tilted, data, bufs, damping, clip)
    ok = be.xp.isfinite(bufs.log_z)
    log_ev = (be.evidence_site_terms(bufs.log_z, bufs.mu_cav, bufs.var_cav, post.mean, post.var)
              + 0.5 * float(nu @ post.mean) - post.half_logdet)
    return skipped, ok, log_ev


def posterior_from_sites(K, y, likelihood, site_tau, site_nu, extra=None, device="cpu"):
    """The EP posterior and log Z_EP for *given* sites, without any sweep.

    Used to restore a saved model: the result equals the one the sites came from.

    Examples
    --------
    >>> import numpy as np, fastep
    >>> from fastep.kernels import RBF
    >>> X = np.linspace(-2, 2, 10)[:, None]; y = np.sign(X[:, 0] + 0.1)
    >>> K, lik = RBF()(X), fastep.likelihoods.Probit()
    >>> res = fastep.ep(K, y, lik)
    >>> same = posterior_from_sites(K, y, lik, res.site_tau, res.site_nu)
    >>> bool(same.log_marginal_likelihood == res.log_marginal_likelihood)
    True
    """
    be = resolve(device, "posterior_from_sites")
    K, data = _prepare(be, K, y, likelihood, extra)
    xp = be.xp
    n = K.shape[0]
    tau, nu = (be.asarray(a) for a in initial_sites(site_tau, site_nu, n))
    with be.threads_for(n, one_pool=bool(xp.all(tau >= 0.0))):      # see ep()
        post = _Posterior(be, K, xp.ascontiguousarray(xp.diagonal(K)), tau, nu)
        buf = [xp.empty(n) for _ in range(5)]
        skipped, ok, log_ev = _evaluate(be, likelihood.scalar_tilted, data, post, tau, nu, 1.0,
                                        bool(likelihood.log_concave), buf)
    mu_cav, var_cav, _ = fill_cavities(ok, buf[3], buf[4], post.mean, post.var, xp)
    return _result(be, post, tau, nu, log_ev, 0, True, skipped, mu_cav, var_cav, "parallel",
                   [log_ev])


def ep_gradient(result, kernel, X, y, likelihood, extra=None, with_likelihood=True):
    """Gradient of ``result.log_marginal_likelihood`` at its (fixed-point) sites.

    Returns ``(d/dtheta kernel, d/dlog likelihood parameters)``: the kernel part is
    ``1/2 tr((b b^T - R) dK/dtheta)`` contracted on the backend that ran EP; the
    likelihood part is ``sum_i d log Z_i / d log psi`` at the cavities.

    Parameters
    ----------
    result : EPResult
        The output of :func:`ep` (with its posterior factorisation), ideally converged.
    kernel : fastep.kernels.Kernel
        The kernel whose Gram matrix at ``X`` was EP's ``K``.
    X : array-like (n, d)
        The n training inputs of ``result``.
    y : ndarray (n,)
        Targets in the likelihood's encoding (binary likelihoods: -1/+1), as given to EP.
    likelihood : fastep.likelihoods.Likelihood
    extra : ndarray (n, k), optional
        Per-site extras for the likelihood, as given to EP.
    with_likelihood : bool, default True
        Whether to compute the likelihood part (otherwise an empty array).

    Returns
    -------
    d_kernel : ndarray (kernel.n_dims,)
        Gradient for the kernel's free log-hyperparameters.
    d_likelihood : ndarray (likelihood.n_dims,)
        Gradient for the likelihood's free log-parameters (empty without them or with
        ``with_likelihood=False``).

    Examples
    --------
    >>> import numpy as np, fastep
    >>> from fastep.kernels import RBF
    >>> X = np.linspace(-2, 2, 10)[:, None]; y = np.sign(X[:, 0] + 0.1)
    >>> k, lik = RBF(), fastep.likelihoods.Probit()
    >>> d_kernel, d_lik = ep_gradient(fastep.ep(k(X), y, lik, tol=1e-8), k, X, y, lik)
    >>> d_kernel.shape, d_lik.shape
    ((2,), (0,))
    """
    check_likelihood(likelihood)
    be = result._posterior.be
    if np.shape(X)[:1] != result.site_tau.shape:
        raise ValueError(f"X must hold the {result.site_tau.size} training inputs of the EP "
                         f"result; got shape {np.shape(X)}.")
    d_theta = kernel.gradient_contract(X, result.kernel_gradient_weights(), backend=be)
    if not (with_likelihood and likelihood.n_dims):
        return d_theta, np.zeros(0)
    y = likelihood.encode_targets(y)
    return d_theta, likelihood.tilted_dparams(y, result.cavity_mean, result.cavity_var,
                                              extra).sum(0)


def _sequential_sweep(be, tilted, data, post, tau, nu, damping, clip, block=SEQUENTIAL_BLOCK):
    """One sequential sweep in natural order with delayed rank-b updates.

    Within a block the b x b posterior is updated site by site; the block's net
    change (dtau, dnu) then reaches the rest of the posterior at once:
    ``Sigma_TT -= Sigma_TB M Sigma_BT``, ``M = D (I + Sigma_BB D)^-1``, ``D = diag(dtau)``,
    and ``mu_T += Sigma_TB (dnu - M (mu_B + Sigma_BB dnu))``.  Only the trailing
    part T (sites after the block) is kept current, as in a right-looking Cholesky.
    """
    xp = be.xp
    cov, mean = post.cov, post.mean.copy()
    n = data.y.shape[0]
    skipped = 0
    dtau, dnu = xp.empty(block), xp.empty(block)
    for b0 in range(0, n, block):
        b1 = min(n, b0 + block)
        nb = b1 - b0
        s0 = cov[b0:b1, b0:b1].copy()
        m0 = mean[b0:b1].copy()
        sb, mb = s0.copy(), m0.copy()
        skipped += be.sequential_block(tilted, data.rows(slice(b0, b1)), sb, mb, tau[b0:b1],
                                       nu[b0:b1], damping, clip, dtau[:nb], dnu[:nb])
        if b1 == n or not (bool(xp.any(dtau[:nb])) or bool(xp.any(dnu[:nb]))):
            continue
        d = dtau[:nb]
        m = xp.linalg.solve(xp.eye(nb) + d[:, None] * s0, xp.diag(d))
        m = 0.5 * (m + m.T)
        g = dnu[:nb] - m @ (m0 + s0 @ dnu[:nb])
        p = cov[b1:, b0:b1]
        cov[b1:, b1:] -= (p @ m) @ p.T
        mean[b1:] += p @ g
    return skipped
