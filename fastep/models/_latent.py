"""One latent GP with an EP likelihood, as an immutable problem the estimators fit.

An estimator builds, in ``fit``, an :class:`EPConfig` (how EP runs) and one or more
:class:`LatentGP` (data, kernel, likelihood, inducing inputs).  Both are immutable:
moving hyperparameters makes a new problem (:meth:`LatentGP.with_theta`), so no kernel
or likelihood object is ever modified, and nothing points back at the estimator.  The
ML-II loop (:func:`fastep.models._mlii.fit_theta`) works on any problem of the protocol
:class:`fastep.models._problem.StagedProblem`, which these are.
"""
from __future__ import annotations

import dataclasses
from contextlib import ExitStack, nullcontext
from dataclasses import dataclass

import numpy as np

from .._dask import is_dask_array
from .._memory import DENSE_EP_MATRICES, DENSE_MLII_MATRICES
from .._sites import SiteBuffers
from ..backend import Backend, resolve
from ..inference.ep import ep_gradient, run_ep
from ..inference import carry_anderson
from ..kernels.distances import reuse_distances
from ..inference.laplace import laplace
from ..inference.sparse_ep import run_sparse_ep, sparse_ep_gradient
from ..inference.markov_ep import markov_ep, markov_ep_gradient, markov_predict
from ._problem import NamedTheta


#: Bytes of one block of the cross-covariance in :meth:`LatentGP.latent`.
PREDICT_BLOCK_BYTES = 2 ** 27


@dataclass(frozen=True)
class EPConfig:
    """How EP runs during one fit, built from the estimator's parameters in ``fit``.

    Attributes
    ----------
    backend : Backend
        Where EP runs (``device`` resolved once, in ``fit``).
    method : {"parallel", "sequential", "auto"}
        The schedule of dense EP (:func:`fastep.ep`'s ``method``), or of sparse EP
        (``sparse_ep``'s ``schedule``).
    damping : float or None
        None: adaptive (see :func:`fastep.ep`).
    tol : float
        EP convergence tolerance.
    max_iter : int
        Most EP sweeps per EP run.
    power : float
        Power of sparse Power EP, the ``alpha`` of :func:`fastep.sparse_ep` (dense EP is 1).
    optimize_inducing : bool
        Whether ML-II moves the inducing inputs (sparse EP).
    """

    backend: Backend
    method: str = "parallel"
    damping: float | None = None
    tol: float = 1e-6
    max_iter: int = 100
    power: float = 1.0
    optimize_inducing: bool = True


def inducing_bounds(X, m):
    """Box of the inducing inputs in ML-II: the data's range widened by its span."""
    lo, hi = X.min(0), X.max(0)
    if is_dask_array(X):
        import dask
        lo, hi = dask.compute(lo, hi)
    span = np.maximum(hi - lo, 1e-12)
    return np.tile(np.column_stack([lo - span, hi + span]), (m, 1))


@dataclass(frozen=True)
class LatentGP(NamedTheta):
    """``f ~ GP(0, kernel)`` at inputs X, targets y (the likelihood's encoding), dense EP
    (``Z is None``) or sparse Power EP with inducing inputs Z.

    ``theta`` stacks the log kernel parameters, the log likelihood parameters and (sparse,
    ``config.optimize_inducing``) the inducing inputs.
    """

    X: np.ndarray
    y: np.ndarray
    kernel: object
    likelihood: object
    config: EPConfig
    Z: np.ndarray | None = None

    @property
    def sparse(self):
        return self.Z is not None

    #: Whether ML-II's subsample stages (random rows first) suit this problem.
    subsample_stages = True

    @property
    def _moves_z(self):
        return self.sparse and self.config.optimize_inducing

    # --- parameters -----------------------------------------------------------------
    @property
    def theta(self):
        parts = [self.kernel.theta, self.likelihood.theta]
        return np.concatenate(parts + ([self.Z.ravel()] if self._moves_z else []))

    @property
    def bounds(self):
        parts = [self.kernel.bounds, self.likelihood.bounds]
        if self._moves_z:
            parts.append(inducing_bounds(self.X, self.Z.shape[0]))
        return np.vstack(parts)

    @property
    def theta_entries(self):
        """How ML-II's messages name, show and bound the kernel and likelihood entries of
        ``theta`` (the kernel's and the likelihood's own ``theta_entries()``)."""
        return self.kernel.theta_entries() + self.likelihood.theta_entries()

    @property
    def n_hyper(self):
        """Number of kernel and likelihood entries at the start of ``theta``."""
        return self.kernel.n_dims + self.likelihood.n_dims

    def with_theta(self, theta):
        """The same problem at ``theta`` (a new object; kernel and likelihood are copies)."""
        theta = np.asarray(theta, dtype=float)
        nk, nh = self.kernel.n_dims, self.n_hyper
        expected = self.theta.size
        if theta.shape != (expected,):
            raise ValueError(f"theta must have {expected} entries (log kernel parameters, log "
                             f"likelihood parameters{', inducing inputs' * self._moves_z}); "
                             f"got shape {theta.shape}.")
        changes = {"kernel": self.kernel.clone_with_theta(theta[:nk]),
                   "likelihood": self.likelihood.clone_with_theta(theta[nk:nh])}
        if self._moves_z:
            changes["Z"] = np.ascontiguousarray(theta[nh:].reshape(self.Z.shape))
        return dataclasses.replace(self, **changes)

    def rows(self, idx):
        """The same problem on the rows ``idx`` (sorted) of X, in memory (a dask X's rows
        are computed): the targets and the likelihood's per-observation data (exposures,
        censoring limits, ...) taken with them."""
        # a likelihood's per-row data are its data_names, by the contract of with_data
        lik, n = self.likelihood, self.X.shape[0]
        if lik.data_names:
            data = {}
            for name in lik.data_names:
                value = getattr(lik, name)
                data[name] = (np.asarray(value)[idx] if np.ndim(value) and
                              np.shape(value)[0] == n else value)
            lik = lik.with_data(len(idx), **data)
        return dataclasses.replace(self, X=np.ascontiguousarray(self.X[idx], dtype=float),
                                   y=np.asarray(self.y[idx], dtype=float), likelihood=lik)

    def draw(self, rng):
        """A restart point: kernel and likelihood parameters uniform in their (log)
        bounds, inducing inputs where they are."""
        theta, bounds = self.theta, self.bounds
        nh = self.n_hyper
        theta[:nh] = rng.uniform(bounds[:nh, 0], bounds[:nh, 1])
        return theta

    # --- inference ------------------------------------------------------------------
    def reuse(self):
        """A block in which the evaluations of ML-II share what does not change with
        theta, or changes little: X's squared distances (dense EP on the host,
        :func:`fastep.kernels.distances.reuse_distances`) and parallel EP's Anderson
        history (:func:`fastep.inference._anderson.carry_anderson`)."""
        if self.sparse or is_dask_array(self.X):
            return nullcontext()
        stack = ExitStack()
        stack.enter_context(reuse_distances(self.X, self.config.backend))
        stack.enter_context(carry_anderson())
        return stack

    def run(self, sites=None, tol=None, max_iter=None, outer=None, keep_gram=False):
        """EP at the current parameters (warm-started from ``sites = (tau, nu)``); ``outer``
        is an outer update of the likelihood data run inside dense EP's sweep loop
        (:func:`fastep.ep`); ``keep_gram``: a sparse result keeps ``K(X, Z)`` (and the
        gradient's first-pass sums, taken in EP's closing pass) for one
        :meth:`gradient`.  The EP parameters were checked by the estimator's ``fit``:
        this runs :func:`~fastep.inference.ep.run_ep` and
        :func:`~fastep.inference.sparse_ep.run_sparse_ep`, which do not check them again."""
        c = self.config
        tau, nu = sites if sites is not None else (None, None)
        tol = c.tol if tol is None else tol
        max_iter = c.max_iter if max_iter is None else max_iter
        if self.sparse:
            if outer is not None:
                raise ValueError("an outer update inside the sweep loop needs dense EP.")
            return run_sparse_ep(c.backend, self.kernel, self.Z, self.X, self.y,
                                 self.likelihood, power=c.power, damping=c.damping, tol=tol,
                                 max_iter=max_iter, site_tau=tau, site_nu=nu,
                                 method=c.method, keep_gram=keep_gram)
        c.backend.check_dense_memory(self.X.shape[0], DENSE_EP_MATRICES)
        K = self.kernel(self.X, backend=c.backend)
        return run_ep(c.backend, K, self.y, self.likelihood, c.method, c.damping, tol, max_iter,
                      site_tau=tau, site_nu=nu, outer=outer)

    def gradient(self, result):
        """d log Z / d theta at ``result`` (its fixed point), aligned with ``theta``."""
        if self.sparse:
            gk, gz, gl = sparse_ep_gradient(result, self.kernel, self.X, self.y,
                                            self.likelihood, inputs=self._moves_z)
            gz = [gz.ravel()] if self._moves_z else []
        else:
            gk, gl = ep_gradient(result, self.kernel, self.X, self.y, self.likelihood)
            gz = []
        return np.concatenate([gk, gl] + gz)

    def check_memory(self):
        """A :class:`~fastep.exceptions.DenseMemoryError` where dense ML-II's matrices
        would not fit (before any work: also before the subsample stages)."""
        if not self.sparse:
            self.config.backend.check_dense_memory(self.X.shape[0], DENSE_MLII_MATRICES)

    def evidence(self, sites=None, tol=None):
        """``(log Z, its gradient in theta, the EP result)``, EP run to ``tol`` (None, or
        anything tighter than the configured tolerance: that one)."""
        self.check_memory()
        result = self.run(sites, tol=None if tol is None else max(tol, self.config.tol),
                          keep_gram=True)
        return result.log_marginal_likelihood, self.gradient(result), result

    def loo_cavity(self, result):
        """EP's leave-one-out posterior of every f_i: ``(mean, var)`` of the cavity, the
        posterior with site i removed (at the fixed point, the EP approximation of
        p(f_i | y_-i); Opper & Winther 2000, GPstuff's ``gp_loopred``).  Sparse Power EP
        removes the whole site (not alpha of it) from the marginal of h_i, then adds
        d_i = K_ii - Q_ii; an improper cavity falls back to the marginal."""
        if not self.sparse:
            return result.cavity_mean, result.cavity_var
        var_h = result.var - result.resid
        s = 1.0 - result.site_tau * var_h
        ok = s > 0.0
        safe = np.where(ok, s, 1.0)
        mean = np.where(ok, (result.mean - result.site_nu * var_h) / safe, result.mean)
        return mean, np.where(ok, var_h / safe, var_h) + result.resid

    def loo_log_density(self, mean, var):
        """log p(y_i | y_-i) ~ log int p(y_i | f) N(f | mean_i, var_i) df for every point,
        given the LOO cavity ``(mean, var)`` of :meth:`loo_cavity`."""
        return self.likelihood.log_predictive_density(self.y, mean, var)

    def sites_from_marginals(self, mean, var):
        """Sites ``(tau, nu)`` that one undamped EP update (the CPU's parallel site loop)
        makes from no site with the marginals ``(mean, var)`` of f at every row, so as
        the cavities (ML-II's seeds from a subsample's predictive,
        :func:`~fastep.models._mlii.seed_sites`); zero where that is not a finite
        non-negative precision.  None where the likelihood has no scalar tilted moments."""
        lik, n = self.likelihood, self.X.shape[0]
        if getattr(lik, "scalar_tilted", None) is None:
            return None
        cpu = resolve("cpu")
        data = cpu.site_inputs(lik, lik.encode_targets(self.y), lik.site_extra(n))
        bufs = SiteBuffers(np.ascontiguousarray(mean, dtype=float),
                           np.ascontiguousarray(var, dtype=float), np.zeros(n), np.zeros(n),
                           *(np.empty(n) for _ in range(5)))
        cpu.parallel_sites(lik.scalar_tilted, data, bufs, 1.0, bool(lik.log_concave))
        tau, nu = bufs.new_tau, bufs.new_nu
        bad = ~(np.isfinite(tau) & np.isfinite(nu) & (tau >= 0.0))
        tau[bad], nu[bad] = 0.0, 0.0
        return tau, nu

    def latent(self, result, X):
        """Latent predictive mean and variance at X (host arrays), in blocks of rows whose
        cross-covariance with the training (or inducing) inputs stays under 128 MiB."""
        if is_dask_array(X):                    # lazily, chunk by chunk on the workers
            return result.predict_latent(self.kernel, X)
        width = self.Z.shape[0] if self.sparse else self.X.shape[0]
        rows = max(1, PREDICT_BLOCK_BYTES // (8 * width))
        if X.shape[0] <= rows:
            return self._latent_block(result, X)
        parts = [self._latent_block(result, X[i:i + rows]) for i in range(0, X.shape[0], rows)]
        return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])

    def _latent_block(self, result, X):
        if self.sparse:
            return result.predict_latent(self.kernel, X)
        be = self.config.backend
        return result.predict_latent(self.kernel(self.X, X, backend=be), self.kernel.diag(X))


@dataclass(frozen=True)
class LaplaceGP(LatentGP):
    """The same problem under the Laplace approximation (dense, CPU; log-concave
    likelihoods).  Its evidence gradient is by central differences in theta (step 1e-5),
    which costs 2 p extra Newton fits per evaluation."""

    def run(self, sites=None, tol=None, max_iter=None, keep_gram=False):
        """The Laplace fit at the current parameters (``sites``, ``tol``, ``keep_gram``:
        ignored, for the interface of :meth:`LatentGP.run`)."""
        self.config.backend.check_dense_memory(self.X.shape[0], DENSE_EP_MATRICES)
        return laplace(self.kernel(self.X), self.y, self.likelihood,
                       max_iter=self.config.max_iter if max_iter is None else max_iter)

    def gradient(self, result):
        theta = self.theta
        grad = np.empty(theta.size)
        for i in range(theta.size):
            step = np.zeros(theta.size)
            step[i] = 1e-5
            grad[i] = (self.with_theta(theta + step).run().log_marginal_likelihood
                       - self.with_theta(theta - step).run().log_marginal_likelihood) / 2e-5
        return grad

    def _latent_block(self, result, X):
        return result.predict_latent(self.kernel(self.X, X), self.kernel.diag(X))


@dataclass(frozen=True)
class MarkovGP(LatentGP):
    """The same problem by state-space EP (:func:`fastep.inference.markov_ep`): X is a
    column of times, and optionally a second column of series ids (independent series
    sharing the kernel, filtered in parallel; a new id at prediction is a series with no
    data: the prior), the kernel one of time with a state-space form; O(n) time and
    memory, so neither the memory checks of dense EP nor inducing inputs apply, nor
    ML-II's subsample stages: random rows of a series are a coarser series, which cannot
    see its short scales (a weekly cycle of daily counts), and the full evaluation is
    cheap."""

    subsample_stages = False

    def reuse(self):
        return nullcontext()

    def check_memory(self):
        """Nothing to check: the filter's memory is O(n)."""

    @staticmethod
    def _series(X):
        """The series ids of X's rows (its second column), or None: one series."""
        return X[:, 1] if X.shape[1] == 2 else None

    def run(self, sites=None, tol=None, max_iter=None, outer=None, keep_gram=False):
        """State-space EP at the current parameters (``outer``, ``keep_gram``: not used)."""
        c = self.config
        tau, nu = sites if sites is not None else (None, None)
        n = self.X.shape[0]
        return markov_ep(self.X[:, 0], self.y, self.kernel, self.likelihood,
                         series=self._series(self.X), extra=self.likelihood.site_extra(n),
                         damping=c.damping,
                         tol=c.tol if tol is None else tol,
                         max_iter=c.max_iter if max_iter is None else max_iter,
                         site_tau=tau, site_nu=nu)

    def gradient(self, result):
        gk, gl = markov_ep_gradient(result, self.X[:, 0], self.y, self.kernel, self.likelihood,
                                    series=self._series(self.X),
                                    extra=self.likelihood.site_extra(self.X.shape[0]))
        return np.concatenate([gk, gl])

    def latent(self, result, X):
        """Latent predictive mean and variance at X: one filter-and-smoother pass over
        the training and new times together (O(n + len(X)); no blocks of rows)."""
        if X.shape[1] != self.X.shape[1]:
            raise ValueError(f"X must have the {self.X.shape[1]} column(s) of the training "
                             f"data (times{', series ids' if self.X.shape[1] == 2 else ''}); "
                             f"got {X.shape[1]}.")
        return markov_predict(result, self.X[:, 0], X[:, 0], self.kernel,
                              series=self._series(self.X), series_new=self._series(X))
