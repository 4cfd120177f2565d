"""GP classification from multiple noisy annotators (Rodrigues, Pereira & Ribeiro, ICML
2014): the estimator; the reliabilities' EM and the baselines are in
:mod:`fastep.models._annotator_em`.

Over 450 lines: one job, the multi-annotator estimator: EM with ML-II, LOO
reliabilities, active learning's query and their numpydoc (the EM itself is
:mod:`fastep.models._annotator_em`).
"""
from __future__ import annotations

from typing import Optional, Tuple, Union
import dataclasses
import warnings
from numbers import Integral, Real

import numpy as np
from scipy.special import ndtr
from sklearn.base import ClassifierMixin
from sklearn.utils._param_validation import Interval, validate_parameter_constraints
from sklearn.utils.validation import check_is_fitted

from ..typing import Array, ArrayLike, ArrayOrStd, KernelLike, OptimizerLike, RandomStateLike
from .._caller import user_stacklevel
from .._dask import is_dask_array
from ..exceptions import ConvergenceWarning
from ..likelihoods.annotators import MultiAnnotator, log_ab
from ._annotator_em import (_SweepEM, _label_matrix, _reliability_step, m_step,
                            true_label_posterior)
from ._base import EPEstimator, FitData, fit_entry, latent_output, shared
from ._mlii import maximize_evidence
from ._state import latent_from_state, latent_state
from ._validation import validate_X

class MultiAnnotatorGPClassifier(ClassifierMixin, EPEstimator):
    """GP classifier trained from several noisy annotators, by EP (GPC-MA).

    The latent true label z_i has ``p(z_i = 1 | f) = Phi(f_i)``; annotator r has a
    sensitivity alpha_r and specificity beta_r.  EP runs on the likelihood
    ``b_i + (a_i - b_i) Phi(f_i)`` (:class:`fastep.likelihoods.MultiAnnotator`),
    interleaved with closed-form updates of the reliabilities every ``em_every`` sweeps
    (dense EP: inside its sweep loop, from the cavities each sweep computes anyway; sparse
    EP: between runs of ``em_every`` sweeps).  The M-step uses
    ``p(z_i = 1 | data)`` from the tilted distribution, ``a_i Phi(eta_i) / Z_i``
    (:func:`true_label_posterior`).  With an optimizer, ML-II of the kernel (and inducing
    inputs) runs between rounds of EM, with the reliabilities held fixed.

    Parameters
    ----------
    kernel : fastep or scikit-learn kernel, default=None
        Prior covariance; None means ``RBF()``, except that ML-II starts its lengthscale
        at the median distance between rows of X (with ``optimizer=None``: ``RBF()``).
        Copied, never modified: the fitted kernel is ``kernel_``.
    method : {"auto", "parallel", "sequential"}, default="auto"
        Dense EP's schedule; "auto" runs parallel sweeps and goes on sequentially (CPU)
        if they stall (``fastep.ep(method="auto")``): with a large kernel variance,
        parallel EP on these sites of negative precision can oscillate for hundreds of
        sweeps.  Sparse EP (:func:`fastep.sparse_ep`'s ``schedule``): "auto" is
        "sequential", q(u) refreshed after every block of rows.
    optimizer : "L-BFGS-B", callable or None, default="L-BFGS-B"
        ML-II of the kernel (and inducing input) parameters, run between rounds of EM
        with the reliabilities held fixed (at most three rounds); a callable follows
        scikit-learn's convention; None keeps them fixed.
    n_restarts_optimizer : int, default=0
        Extra optimiser runs from log-uniform draws inside the bounds.
    max_iter_optimizer : int, default=200
        Most L-BFGS-B iterations of each ML-II run (a ``ConvergenceWarning`` if they run
        out).
    tol_optimizer : float or None, default=None
        None: ML-II stops when the log evidence gained less than 1e-5 nats per row of
        data over its last two steps (and the gain its curvature predicts is below that
        too).  A float asks for the exact optimum: a step that changes the log evidence
        by less than this (relative) or a projected gradient below ten times it ends
        ML-II.
    em_every : int, default=1
        EP sweeps between two reliability updates.  Dense EP's one run may take
        ``max_iter + max_em_iter * em_every`` sweeps (the budget of EM rounds and a final
        run).
    em_tol : float, default=1e-4
        EM has converged when an M-step changes no sensitivity or specificity by
        em_tol or more (dense EP converges only then; sparse EP also asks log Z_EP to
        change by less than em_tol between rounds).
    max_em_iter : int, default=200
        Most M-steps (rounds of sparse EP).
    sensitivity, specificity : array-like of shape (n_annotators,), optional
        Starting values, one per column of Y; unless both are given, both start from a
        soft majority vote.  With ``update_reliabilities=False``, the fixed values.
    update_reliabilities : bool, default=True
        False holds ``sensitivity``/``specificity`` fixed.
    damping : float in (0, 1] or None, default=0.9
        EP damping.  The likelihood is not log-concave (site precisions go negative), so
        the default takes slightly damped steps from the start (robust EP shortens any
        step that would make the posterior improper); None is adaptive damping
        (:func:`fastep.ep`), which takes about as many sweeps on the crowds of
        ``scripts/experiments.py annotators-cost``.
    tol : float, default=1e-6
        EP convergence tolerance (change of log Z_EP and of the sites, see
        :func:`fastep.ep`).
    max_iter : int, default=200
        Most EP sweeps per EP run (dense EP's one run adds the EM budget, see
        ``em_every``).
    warm_start : bool, default=False
        Start from the previous fit's reliabilities and its EP sites for the rows of X
        it shares (active learning: append new rows and labels, then refit).
    n_inducing : int, "auto" or None, default="auto"
        Use sparse Power EP with this many inducing points (k-means++ on X), EM between
        runs of ``em_every`` sweeps.  None is dense EP.  "auto": dense EP up to 3,000
        rows, 256 inducing points above; a dask X always runs sparse.
    inducing_points : (m, n_features) array, optional
        Initial inducing inputs (implies sparse EP; overrides ``n_inducing``).
    power : float in (0, 1], default=1.0
        The power alpha of sparse Power EP (1 = EP with inducing points; towards 0 it
        approaches the variational (VFE) solution).  Dense EP has power 1; another value
        needs inducing points.
    optimize_inducing : bool, default=False
        Whether ML-II also moves the inducing inputs (sparse EP with an optimizer).
    random_state : int, RandomState, Generator or None, default=None
        Seeds the optimiser restarts and the k-means++ choice of inducing points.  ML-II
        runs on all rows (no subsample stages).
    device : {"cpu", "cuda"}, default="cpu"
        Where EP runs: "cuda" puts EP's sweeps, the Gram matrices and the evidence
        gradients on an NVIDIA GPU (needs the ``cuda`` extra); a fitted model predicts
        on the device it was fitted on.
    verbose : int, default=0
        Progress of the fit: 1 shows the ML-II steps, 2 also every EP sweep, as tqdm
        bars where tqdm is installed, else as lines on stderr (fastep's logger, which
        ``logging`` can also configure without this parameter).

    Attributes
    ----------
    sensitivity_, specificity_ : ndarray of shape (n_annotators,)
        The fitted sensitivity alpha_r and specificity beta_r of each annotator.
    true_label_proba_ : ndarray of shape (n_samples,)
        p(z_i = 1 | data) for the training instances.
    classes_ : ndarray of shape (2,)
        The two label values of Y.
    kernel_ : kernel
        The fitted kernel.
    likelihood_ : MultiAnnotator
        The likelihood at the fitted reliabilities.
    log_marginal_likelihood_value_ : float
        log Z_EP at ``kernel_``.
    inducing_points_ : (m, n_features) ndarray
        Fitted inducing inputs (sparse EP only).
    result_ : EPResult or SparseEPResult
        The final EP run.
    n_iter_ : int
        EP sweeps in total (EM included, and the run after ML-II).
    converged_ : bool
        Whether EM and the final EP run converged.
    n_features_in_ : int

    See Also
    --------
    EPGaussianProcessClassifier : One trusted label per row.
    fastep.likelihoods.MultiAnnotator : The likelihood of the annotators' labels.
    fastep.models.majority_vote : The baseline of one label per row by vote.

    Examples
    --------
    >>> import numpy as np
    >>> from fastep.datasets import simulate_annotators
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(150, 2)); z = (X[:, 0] > 0).astype(int)
    >>> Y = simulate_annotators(z, [0.9, 0.8, 0.6], [0.9, 0.7, 0.6], random_state=0)
    >>> clf = MultiAnnotatorGPClassifier(optimizer=None).fit(X, Y)
    >>> bool(clf.score(X, z) > 0.9)
    True
    """

    # parallel sweeps that go on sequentially if they stall (see the ``method`` parameter)
    _dense_auto = "auto"
    _parameter_constraints = shared(
        "verbose", "kernel", "method", "optimizer", "n_restarts_optimizer", "max_iter_optimizer",
        "tol_optimizer", "damping", "tol", "max_iter",
        "n_inducing", "inducing_points", "power", "optimize_inducing", "random_state",
        "device", em_every=[Interval(Integral, 1, None, closed="left")],
        em_tol=[Interval(Real, 0, None, closed="neither")],
        max_em_iter=[Interval(Integral, 1, None, closed="left")],
        sensitivity=["array-like", None], specificity=["array-like", None],
        update_reliabilities=["boolean"], warm_start=["boolean"])

    def __init__(self, kernel: Optional[KernelLike] = None, *, method: str = "auto",
                 optimizer: OptimizerLike = "L-BFGS-B", n_restarts_optimizer: int = 0,
                 max_iter_optimizer: int = 200, tol_optimizer: Optional[float] = None,
                 em_every: int = 1,
                 em_tol: float = 1e-4, max_em_iter: int = 200,
                 sensitivity: Optional[ArrayLike] = None,
                 specificity: Optional[ArrayLike] = None, update_reliabilities: bool = True,
                 damping: Optional[float] = 0.9, tol: float = 1e-6, max_iter: int = 200,
                 warm_start: bool = False, n_inducing: Union[int, str, None] = "auto",
                 inducing_points: Optional[ArrayLike] = None, power: float = 1.0,
                 optimize_inducing: bool = False, random_state: RandomStateLike = None,
                 device: str = "cpu",
                 verbose: int = 0) -> None:
        self.kernel = kernel
        self.method = method
        self.optimizer = optimizer
        self.n_restarts_optimizer = n_restarts_optimizer
        self.max_iter_optimizer = max_iter_optimizer
        self.tol_optimizer = tol_optimizer
        self.em_every = em_every
        self.em_tol = em_tol
        self.max_em_iter = max_em_iter
        self.sensitivity = sensitivity
        self.specificity = specificity
        self.update_reliabilities = update_reliabilities
        self.damping = damping
        self.tol = tol
        self.max_iter = max_iter
        self.warm_start = warm_start
        self.n_inducing = n_inducing
        self.inducing_points = inducing_points
        self.power = power
        self.optimize_inducing = optimize_inducing
        self.random_state = random_state
        self.device = device
        self.verbose = verbose

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.classifier_tags.multi_class = False       # the annotator model is binary
        return tags

    @staticmethod
    def _run(latent, sites, tol=None, max_iter=None, outer=None):
        """EP without its own ConvergenceWarning (EM decides; the fit warns once)."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            return latent.run(sites, tol=tol, max_iter=max_iter, outer=outer)

    @fit_entry
    def fit(self, X: ArrayLike, Y: ArrayLike) -> MultiAnnotatorGPClassifier:
        """Fit the reliabilities, the posterior of f (and, with an optimizer, the
        kernel) by EP and EM.

        Parameters
        ----------
        X : array-like or dask array of shape (n_samples, n_features)
            Training inputs.  A dask array is fitted by sparse EP on the active Dask
            client's workers (``n_inducing`` not None, ``device="cpu"``).
        Y : array-like of shape (n_samples, n_annotators) or (n_samples,)
            Labels, one column per annotator: two label values, NaN (or None) where an
            annotator gave no label; a vector is the labels of one annotator.  A dask
            array is computed.

        Returns
        -------
        self
        """
        return self._fit(X, Y)

    def _fit_data(self, X, Y):
        if Y is None:
            raise ValueError("MultiAnnotatorGPClassifier requires y to be passed, but the "
                             "target y is None.")
        if is_dask_array(X):     # sparse EP on the Dask client's workers; labels on the host
            X, _ = self._dask_fit_data(X, None)
            Y = Y.compute() if is_dask_array(Y) else Y
        else:
            X = validate_X(self, X, dtype=np.float64)
        classes, Y01 = _label_matrix(Y, X.shape[0])
        n, R = Y01.shape
        warm = self.warm_start and hasattr(self, "sensitivity_") and \
            self.sensitivity_.shape == (R,)
        if warm:
            sens, spec = self.sensitivity_.copy(), self.specificity_.copy()
        elif self.sensitivity is None or self.specificity is None:
            n_lab = np.sum(~np.isnan(Y01), axis=1)
            soft = np.where(n_lab > 0, np.nansum(Y01, axis=1) / np.maximum(n_lab, 1), 0.5)
            sens, spec = m_step(Y01, soft)
        else:
            sens = np.array(self.sensitivity, dtype=float).reshape(-1)
            spec = np.array(self.specificity, dtype=float).reshape(-1)
        return FitData(X, Y01, found={"classes": classes, "reliabilities": (sens, spec)})

    def _fit_config(self, data, backend):
        """The EP configuration, then the likelihood of the labels (which checks the
        reliabilities), both before any work."""
        config = super()._fit_config(data, backend)
        data.found["likelihood"] = MultiAnnotator(data.y, *data.found["reliabilities"])
        return config

    def _fit_problems(self, make, data, rng):
        """EP and EM of the reliabilities, alternating with ML-II of the kernel (three
        rounds at most; until the kernel stops moving):
        ``(latent, result, sweeps, converged)``."""
        Y01 = data.y
        latent = make(np.ones(Y01.shape[0]), data.found["likelihood"])
        sites = self._warm_sites(latent.X) if self.warm_start else None
        sweeps = 0
        for _ in range(3 if self.optimizer is not None else 1):
            latent, res, em_converged, used = self._em(latent, Y01, sites)
            sweeps += used
            sites = (res.site_tau, res.site_nu)
            if self.optimizer is None:
                break
            theta0 = latent.theta
            with latent.reuse():
                latent, sites = maximize_evidence(
                    latent, self.optimizer, self.n_restarts_optimizer, rng, sites,
                    type(self).__name__, self.max_iter_optimizer, self.tol_optimizer)
            res = None                     # EP at the final kernel below
            if np.max(np.abs(latent.theta - theta0), initial=0.0) < 1e-3:
                break
        if res is None or latent.sparse:   # sparse EM ran EP to em_tol only
            res = self._run(latent, sites)
            sweeps += res.n_iter
        return latent, res, sweeps, bool(res.converged and em_converged)

    def _set_fits(self, data, fits):
        self.classes_ = data.found["classes"]
        self._Y01 = data.y
        self._set_fitted(*fits)
        if not self.converged_:
            warnings.warn("MultiAnnotatorGPClassifier: EM/EP did not converge; increase "
                          "max_em_iter or max_iter, or lower damping.", ConvergenceWarning,
                          stacklevel=user_stacklevel())

    def _set_fitted(self, latent, result, n_iter, converged):
        self._latent = latent
        self.result_ = result
        self._set_model(latent.kernel, latent.likelihood, latent.Z,
                        result.log_marginal_likelihood, n_iter, converged)
        self.sensitivity_ = latent.likelihood.sensitivity
        self.specificity_ = latent.likelihood.specificity
        self.true_label_proba_ = true_label_posterior(
            latent.likelihood.site_extra(latent.X.shape[0]), result.cavity_mean,
            result.cavity_var)

    def _state(self):
        """Fitted state as header values and arrays (:func:`fastep.save_model`)."""
        latent = self._latent
        arrays = {"X": latent.X, "labels": self._Y01, "classes": np.asarray(self.classes_),
                  "sensitivity": self.sensitivity_, "specificity": self.specificity_}
        meta = latent_state("f_", latent, self.result_, arrays)
        meta.update(n_iter_=int(self.n_iter_), converged_=bool(self.converged_))
        return meta, arrays

    def _load_state(self, reader):
        """Inverse of :meth:`_state` on an estimator built from the saved parameters."""
        X = self._loaded_inputs(reader)
        n = X.shape[0]
        Y01 = reader.array("labels", (n, None), allow_nan=True)
        classes = reader.classes(2)
        R = Y01.shape[1]
        likelihood = MultiAnnotator(Y01, reader.array("sensitivity", (R,)),
                                    reader.array("specificity", (R,)))
        config = self._loaded_config()
        latent, result = latent_from_state(reader, reader.meta, "f_", X, np.ones(n), likelihood,
                                           config)
        self.classes_, self._Y01 = classes, Y01
        self._set_fitted(latent, result, reader.value("n_iter_", int),
                         reader.value("converged_", bool))

    def _warm_sites(self, X):
        """The previous fit's sites for the rows of X it shares (a prefix of X)."""
        old = getattr(self, "_latent", None)
        if old is None or old.X.shape[1] != X.shape[1]:
            return None
        m = min(old.X.shape[0], X.shape[0])
        if not np.array_equal(old.X[:m], X[:m]):
            return None
        tau, nu = np.zeros(X.shape[0]), np.zeros(X.shape[0])
        tau[:m] = self.result_.site_tau[:m]
        nu[:m] = self.result_.site_nu[:m]
        return tau, nu

    def _em(self, latent, Y01, sites):
        """EP sweeps interleaved with closed-form reliability updates; returns the latent
        problem with the final reliabilities, the last EP result, whether EM converged and
        the EP sweeps used.  Dense EP runs the M-step inside its sweep loop (one EP run,
        converged at ``tol`` at the final reliabilities); sparse EP alternates runs of
        ``em_every`` sweeps with M-steps."""
        if not latent.sparse:
            steps = self.max_em_iter if self.update_reliabilities else 0
            em = _SweepEM(latent.likelihood, Y01, self.em_every, self.em_tol, steps)
            # the budget of EM rounds of em_every sweeps and of the final run, as before
            res = self._run(latent, sites, max_iter=self.max_iter + steps * self.em_every,
                            outer=em)
            latent = dataclasses.replace(latent, likelihood=em.likelihood)
            return latent, res, em.converged, res.n_iter
        lik = latent.likelihood
        sens, spec = lik.sensitivity, lik.specificity
        converged = not self.update_reliabilities
        prev = np.inf
        used = 0
        for _ in range(self.max_em_iter if self.update_reliabilities else 1):
            latent = dataclasses.replace(latent, likelihood=lik.with_reliabilities(sens, spec))
            res = self._run(latent, sites, self.em_tol, self.em_every)
            used += res.n_iter
            sites = (res.site_tau, res.site_nu)
            if not self.update_reliabilities:
                break
            sens, spec, change = _reliability_step(latent.likelihood, Y01, res.cavity_mean,
                                                   res.cavity_var)
            if change < self.em_tol and abs(res.log_marginal_likelihood - prev) < self.em_tol * \
                    max(1.0, abs(prev)):
                converged = True
                break
            prev = res.log_marginal_likelihood
        latent = dataclasses.replace(latent, likelihood=lik.with_reliabilities(sens, spec))
        return latent, res, converged, used

    # --- prediction ----------------------------------------------------------------
    def _moments(self, X):
        check_is_fitted(self)
        return self._latent.latent(self.result_, self._predict_inputs(X))

    def predict_latent(self, X: ArrayLike, return_std: bool = False) -> ArrayOrStd:
        """Posterior mean (and standard deviation) of the latent f at X.

        Parameters
        ----------
        X : array-like or dask array of shape (n_samples, n_features)
            Inputs to predict at; a dask array (of a sparse model) gives lazy dask arrays.
        return_std : bool, default=False
            Also return the standard deviation of f.

        Returns
        -------
        mean : ndarray of shape (n_samples,)
            Posterior mean of f.
        std : ndarray of shape (n_samples,)
            Posterior standard deviation of f (only with ``return_std=True``).
        """
        mean, var = self._moments(X)
        return latent_output(mean, var, return_std)

    def predict_proba(self, X: ArrayLike) -> Array:
        """p(z* = class) for new inputs; the annotator model does not enter prediction.

        Parameters
        ----------
        X : array-like or dask array of shape (n_samples, n_features)
            Inputs to predict at (a dask array: a lazy result).

        Returns
        -------
        ndarray of shape (n_samples, 2)
            Columns in the order of ``classes_``.
        """
        mean, var = self._moments(X)
        p = ndtr(mean / np.sqrt(1.0 + var))
        if is_dask_array(p):
            import dask.array as da
            return da.stack([1.0 - p, p], axis=1)
        return np.column_stack([1.0 - p, p])

    def _loo(self):
        """LOO density of each instance's labels (all its annotators) and its LOO true
        label."""
        mean, var = self._latent.loo_cavity(self.result_)
        p = ndtr(mean / np.sqrt(1.0 + var))
        return (self._latent.loo_log_density(mean, var),
                self.classes_[(p > 0.5).astype(int)])

    def predict(self, X: ArrayLike) -> Array:
        """Most probable true label.

        Parameters
        ----------
        X : array-like or dask array of shape (n_samples, n_features)
            Inputs to predict at (a dask array: a lazy result).

        Returns
        -------
        ndarray of shape (n_samples,)
            Labels from ``classes_``.
        """
        proba = self.predict_proba(X)
        if is_dask_array(proba):
            return (proba[:, 1] > 0.5).astype(int).map_blocks(self.classes_.take,
                                                              dtype=self.classes_.dtype)
        return self.classes_[(proba[:, 1] > 0.5).astype(int)]

    # --- active learning -------------------------------------------------------------
    def loo_reliabilities(self) -> Tuple[np.ndarray, np.ndarray]:
        """Sensitivity and specificity of each annotator re-estimated with
        p(z_i = 1 | data without annotator r's own labels) (avoids self-reinforcement).

        Returns
        -------
        sensitivity, specificity : ndarray of shape (n_annotators,)
        """
        check_is_fitted(self)
        Y01, res = self._Y01, self.result_
        R = Y01.shape[1]
        sens, spec = np.empty(R), np.empty(R)
        for r in range(R):
            rest = np.arange(R) != r              # the others' labels, never full - own
            others = log_ab(Y01[:, rest], self.sensitivity_[rest], self.specificity_[rest])
            p = true_label_posterior(others, res.cavity_mean, res.cavity_var)
            s, t = m_step(Y01[:, [r]], p)
            sens[r], spec[r] = s[0], t[0]
        return sens, spec

    def query(self, X_pool: ArrayLike, n_queries: int = 1) -> Tuple[np.ndarray, np.ndarray]:
        """Instances to label next and, for each, the annotator most likely to be right.

        Instances: smallest ``|mu| / sqrt(1 + sigma^2)`` (eq. 11, latent posterior
        ``N(mu, sigma^2)``).  Annotator: argmax_r alpha_r p + beta_r (1 - p) (eq. 12) with
        p = p(z = 1 | x, data) and leave-own-labels-out reliabilities.

        Parameters
        ----------
        X_pool : array-like of shape (n_pool, n_features)
            Unlabelled candidate inputs.
        n_queries : int, default=1
            How many instances to choose (at most ``n_pool``).

        Returns
        -------
        indices : ndarray of shape (n_queries,)
            Rows of X_pool, the most uncertain first.
        annotators : ndarray of shape (n_queries,)
            For each, the column of Y of the annotator to ask.
        """
        validate_parameter_constraints({"n_queries": [Interval(Integral, 1, None, closed="left")]},
                                       {"n_queries": n_queries},
                                       caller_name="MultiAnnotatorGPClassifier.query")
        mean, var = self._moments(X_pool)
        if n_queries > mean.size:
            raise ValueError(f"n_queries={n_queries} exceeds the pool size {mean.size}.")
        score = np.abs(mean) / np.sqrt(1.0 + var)
        idx = np.argsort(score, kind="stable")[:n_queries]
        p = ndtr(mean[idx] / np.sqrt(1.0 + var[idx]))
        sens, spec = self.loo_reliabilities()
        right = p[:, None] * sens[None, :] + (1.0 - p[:, None]) * spec[None, :]
        return idx, np.argmax(right, axis=1)
