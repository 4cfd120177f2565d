"""GP classification from multiple noisy annotators (Rodrigues, Pereira & Ribeiro, ICML 2014)."""
from __future__ import annotations

import copy
import numbers
import warnings

import numpy as np
from scipy.special import log_ndtr, ndtr

from ..inference.ep import ConvergenceWarning
from ..kernels import RBF, as_kernel
from ..likelihoods.annotators import MultiAnnotator, log_ab
from ._engine import Engine
from ._mlii import maximize_evidence
from ._sklearn_compat import BaseEstimator, ClassifierMixin, check_is_fitted, validate_data
from .classifier import _check_param

_EPS = 1e-6


def _label_matrix(Y, n):
    """Validate an (n, R) label matrix; return (classes, Y01 with NaN for missing)."""
    Y = np.asarray(Y, dtype=object if np.asarray(Y).dtype.kind in "OUS" else float)
    if Y.ndim != 2 or Y.shape[0] != n:
        raise ValueError(f"Y must be an (n_samples, n_annotators) matrix with n_samples = {n} "
                         f"rows (one column per annotator, NaN = not labelled); got shape "
                         f"{Y.shape}.")
    missing = np.array([[v is None or (isinstance(v, float) and np.isnan(v)) for v in row]
                        for row in Y]) if Y.dtype == object else np.isnan(Y)
    values = np.unique(Y[~missing]) if np.any(~missing) else np.array([])
    if values.size != 2:
        raise ValueError(f"Y must hold exactly two label values besides NaN; got "
                         f"{values.size}: {values[:6].tolist()}.")
    Y01 = np.where(missing, np.nan, (Y == values[1]).astype(float))
    empty = np.flatnonzero(np.all(missing, axis=0))
    if empty.size:
        raise ValueError(f"annotator column(s) {empty.tolist()} of Y hold no labels; drop them "
                         "(their sensitivity and specificity cannot be estimated).")
    return values, Y01.astype(float)


def m_step(Y01, p):
    """Closed-form sensitivity and specificity (paper eqs. 8, 10) over labelled items:
    alpha_r = sum_i y_ir p_i / sum_i p_i,  beta_r = sum_i (1 - y_ir)(1 - p_i) / sum_i (1 - p_i),
    kept inside [1e-6, 1 - 1e-6]."""
    seen = ~np.isnan(Y01)
    y = np.nan_to_num(Y01)
    pw = p[:, None] * seen
    qw = (1.0 - p)[:, None] * seen
    sens = (y * pw).sum(0) / np.maximum(pw.sum(0), 1e-300)
    spec = ((1.0 - y) * qw).sum(0) / np.maximum(qw.sum(0), 1e-300)
    return np.clip(sens, _EPS, 1 - _EPS), np.clip(spec, _EPS, 1 - _EPS)


def true_label_posterior(extra, cavity_mean, cavity_var):
    """p(z_i = 1 | data) from the tilted distribution: a_i Phi(eta_i) / Z_i,
    eta_i = mu_-i / sqrt(1 + v_-i) (the natural EP choice; it uses the labels of i
    through a_i, b_i and everything else through the cavity)."""
    eta = cavity_mean / np.sqrt(1.0 + cavity_var)
    la = extra[:, 0] + log_ndtr(eta)
    lb = extra[:, 1] + log_ndtr(-eta)
    return np.exp(la - np.logaddexp(la, lb))


def majority_vote(Y, random_state=None):
    """MV baseline: the most frequent label of each row of Y (NaN = missing); ties and
    rows without labels are broken at random."""
    Y = np.asarray(Y, dtype=float)
    rng = np.random.default_rng(random_state)
    pos = np.nansum(Y == 1, axis=1) if np.all(np.isin(Y[~np.isnan(Y)], (0, 1))) else None
    if pos is None:
        raise ValueError("majority_vote expects labels coded 0/1 with NaN for missing.")
    n_lab = np.sum(~np.isnan(Y), axis=1)
    score = pos - (n_lab - pos)
    tie = score == 0
    return np.where(tie, rng.integers(0, 2, size=len(score)), (score > 0).astype(int))


def concatenate_labels(X, Y):
    """CONC baseline: one (x_i, y_ir) training pair per label given (R times the data)."""
    X = np.asarray(X, dtype=float)
    Y = np.asarray(Y, dtype=float)
    i, r = np.nonzero(~np.isnan(Y))
    return X[i], Y[i, r].astype(int)


class MultiAnnotatorGPClassifier(ClassifierMixin, BaseEstimator):
    """GP classifier trained from several noisy annotators, by EP (GPC-MA).

    The latent true label z_i has ``p(z_i = 1 | f) = Phi(f_i)``; annotator r has a
    sensitivity alpha_r and specificity beta_r.  EP runs on the likelihood
    ``b_i + (a_i - b_i) Phi(f_i)`` (:class:`fastep.likelihoods.MultiAnnotator`),
    interleaved with closed-form updates of alpha and beta every ``em_every`` sweeps
    (or sooner when log Z_EP changes by less than ``em_tol``).  The M-step uses
    ``p(z_i = 1 | data)`` from the tilted distribution, ``a_i Phi(eta_i) / Z_i``
    (:func:`true_label_posterior`).

    Parameters
    ----------
    kernel : kernel, default=None (``RBF()``)
    method : {"parallel", "sequential"}, default="parallel"
    optimizer : "L-BFGS-B" or None, default=None
        ML-II of the kernel between rounds of EM (alpha, beta fixed while optimising).
    em_every : int, default=3
    em_tol : float, default=1e-4
        Reliabilities are re-estimated when |d log Z_EP| < em_tol; EM stops when
        they change by less than em_tol.
    max_em_iter : int, default=200
    sensitivity, specificity : array (R,), optional
        Starting values (default: from soft majority vote).
    update_reliabilities : bool, default=True
        False holds ``sensitivity``/``specificity`` fixed.
    damping : float, default=0.7
        EP damping (the likelihood is not log-concave; some damping is advised).
    tol, max_iter : EP tolerance and sweeps per final run.
    warm_start : bool, default=False
        Start from the previous fit's reliabilities and its EP sites for the rows of X
        it shares (active learning: append new rows and labels, then refit).
    n_inducing, inducing_points, alpha :
        Sparse Power EP with inducing points, as in
        :class:`~fastep.EPGaussianProcessClassifier` (here the inducing inputs stay
        where k-means++ or ``inducing_points`` put them).
    random_state : int or None
        Seeds the k-means++ choice of inducing points.
    device : {"cpu", "cuda"}, default="cpu"
        "cuda" runs EP on an NVIDIA GPU, as in :class:`~fastep.EPGaussianProcessClassifier`.

    Attributes
    ----------
    sensitivity_, specificity_ : ndarray (R,)
    true_label_proba_ : ndarray (n,)
        p(z_i = 1 | data) for the training instances.
    log_marginal_likelihood_value_ : float
    classes_ : ndarray (2,)
    n_iter_ : int
        EP sweeps in total.
    converged_ : bool

    Examples
    --------
    >>> import numpy as np
    >>> from fastep.datasets import simulate_annotators
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(150, 2)); z = (X[:, 0] > 0).astype(int)
    >>> Y = simulate_annotators(z, [0.9, 0.8, 0.6], [0.9, 0.7, 0.6], random_state=0)
    >>> clf = MultiAnnotatorGPClassifier().fit(X, Y)
    >>> bool(clf.score(X, z) > 0.9)
    True
    """

    def __init__(self, kernel=None, *, method="parallel", optimizer=None, em_every=3,
                 em_tol=1e-4, max_em_iter=200, sensitivity=None, specificity=None,
                 update_reliabilities=True, damping=0.7, tol=1e-6, max_iter=200,
                 warm_start=False, n_inducing=None, inducing_points=None, alpha=1.0,
                 random_state=None, device="cpu"):
        self.kernel = kernel
        self.device = device
        self.n_inducing = n_inducing
        self.inducing_points = inducing_points
        self.alpha = alpha
        self.random_state = random_state
        self.method = method
        self.optimizer = optimizer
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

    def _ep(self, kernel, lik, sites, max_iter, tol):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            return self._engine.run(kernel, np.ones(self._engine.X.shape[0]), lik, sites,
                                    max_iter, tol)

    def fit(self, X, Y):
        """Fit from inputs X (n, d) and labels Y (n, R): two values, NaN = not labelled."""
        _check_param(self, "method", self.method, None, options=["parallel", "sequential"])
        _check_param(self, "em_every", self.em_every, numbers.Integral, 1)
        _check_param(self, "max_em_iter", self.max_em_iter, numbers.Integral, 1)
        _check_param(self, "max_iter", self.max_iter, numbers.Integral, 1)
        X = validate_data(self, X, dtype=np.float64)
        self.classes_, Y01 = _label_matrix(Y, X.shape[0])
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
        lik = MultiAnnotator(Y01, sens, spec)
        self._engine = Engine.for_estimator(self, X)
        kernel = copy.deepcopy(as_kernel(RBF() if self.kernel is None else self.kernel))
        sites = None
        old = getattr(self, "_train_X", None)
        if self.warm_start and old is not None and old.shape[1] == X.shape[1]:
            m = min(len(old), n)
            if np.array_equal(old[:m], X[:m]):
                tau = np.zeros(n)
                nu = np.zeros(n)
                tau[:m] = self.result_.site_tau[:m]
                nu[:m] = self.result_.site_nu[:m]
                sites = (tau, nu)
        self.n_iter_ = 0
        rounds = 3 if self.optimizer is not None else 1
        for _ in range(rounds):
            res, sens, spec, em_converged = self._em(kernel, lik, Y01, sens, spec, sites)
            sites = (res.site_tau, res.site_nu)
            if self.optimizer is None:
                break
            theta0 = kernel.theta
            theta = self._optimize_kernel(kernel, X, lik, sites)
            kernel = kernel.clone_with_theta(theta)
            if np.max(np.abs(theta - theta0)) < 1e-3:
                break
        res = self._ep(kernel, lik, sites, self.max_iter, self.tol)
        self.n_iter_ += res.n_iter
        self.kernel_ = kernel
        self.result_ = res
        self._train_X = X
        self._Y01 = Y01
        self.sensitivity_, self.specificity_ = sens, spec
        self.true_label_proba_ = true_label_posterior(lik.site_extra(n), res.cavity_mean,
                                                      res.cavity_var)
        self.log_marginal_likelihood_value_ = res.log_marginal_likelihood
        self.converged_ = bool(res.converged and em_converged)
        if not self.converged_:
            warnings.warn("MultiAnnotatorGPClassifier: EM/EP did not converge; increase "
                          "max_em_iter or max_iter, or lower damping.", ConvergenceWarning,
                          stacklevel=2)
        return self

    def _em(self, kernel, lik, Y01, sens, spec, sites):
        """EP sweeps interleaved with closed-form reliability updates."""
        res = None
        converged = not self.update_reliabilities
        prev = np.inf
        for _ in range(self.max_em_iter if self.update_reliabilities else 1):
            lik.set_reliabilities(sens, spec)
            res = self._ep(kernel, lik, sites, self.em_every, self.em_tol)
            self.n_iter_ += res.n_iter
            sites = (res.site_tau, res.site_nu)
            if not self.update_reliabilities:
                break
            p = true_label_posterior(lik.site_extra(len(Y01)), res.cavity_mean, res.cavity_var)
            new_sens, new_spec = m_step(Y01, p)
            change = max(np.max(np.abs(new_sens - sens)), np.max(np.abs(new_spec - spec)))
            sens, spec = new_sens, new_spec
            if change < self.em_tol and abs(res.log_marginal_likelihood - prev) < self.em_tol * \
                    max(1.0, abs(prev)):
                converged = True
                break
            prev = res.log_marginal_likelihood
        lik.set_reliabilities(sens, spec)
        return res, sens, spec, converged

    def _optimize_kernel(self, kernel, X, lik, sites):
        warm = {"sites": sites}

        def evidence(theta):
            k = kernel.clone_with_theta(theta)
            res = self._ep(k, lik, warm["sites"], self.max_iter, self.tol)
            warm["sites"] = (res.site_tau, res.site_nu)
            g, _, _ = self._engine.gradient(k, np.ones(len(X)), lik, res, with_likelihood=False)
            return res.log_marginal_likelihood, g

        theta, _ = maximize_evidence(evidence, kernel.theta, kernel.bounds, 0, None,
                                     self.optimizer)
        return theta

    # --- prediction ----------------------------------------------------------------
    def predict_latent(self, X):
        """Latent mean and variance of f at X."""
        check_is_fitted(self)
        X = validate_data(self, X, reset=False, dtype=np.float64)
        return self._engine.latent(self.kernel_, self.result_, X)

    def predict_proba(self, X):
        """p(z* = class) for new inputs; the annotator model does not enter prediction."""
        mean, var = self.predict_latent(X)
        p = ndtr(mean / np.sqrt(1.0 + var))
        return np.column_stack([1.0 - p, p])

    def predict(self, X):
        check_is_fitted(self)
        return self.classes_[(self.predict_proba(X)[:, 1] > 0.5).astype(int)]

    # --- active learning -------------------------------------------------------------
    def loo_reliabilities(self):
        """Sensitivity and specificity of each annotator re-estimated with
        p(z_i = 1 | data without annotator r's own labels) (avoids self-reinforcement)."""
        check_is_fitted(self)
        Y01, res = self._Y01, self.result_
        R = Y01.shape[1]
        full = log_ab(Y01, self.sensitivity_, self.specificity_)
        sens, spec = np.empty(R), np.empty(R)
        for r in range(R):
            own = log_ab(Y01[:, [r]], self.sensitivity_[[r]], self.specificity_[[r]])
            p = true_label_posterior(full - own, res.cavity_mean, res.cavity_var)
            s, t = m_step(Y01[:, [r]], p)
            sens[r], spec[r] = s[0], t[0]
        return sens, spec

    def query(self, X_pool, n_queries=1):
        """Instances to label next and, for each, the annotator most likely to be right.

        Instances: smallest |mu| / sqrt(1 + sigma^2) (eq. 11, latent posterior
        N(mu, sigma^2)).  Annotator: argmax_r alpha_r p + beta_r (1 - p) (eq. 12) with
        p = p(z = 1 | x, data) and leave-own-labels-out reliabilities.

        Returns
        -------
        indices : ndarray (n_queries,) of rows of X_pool
        annotators : ndarray (n_queries,) of annotator columns
        """
        _check_param(self, "n_queries", n_queries, numbers.Integral, 1)
        mean, var = self.predict_latent(X_pool)
        if n_queries > mean.size:
            raise ValueError(f"n_queries={n_queries} exceeds the pool size {mean.size}.")
        score = np.abs(mean) / np.sqrt(1.0 + var)
        idx = np.argsort(score, kind="stable")[:n_queries]
        p = ndtr(mean[idx] / np.sqrt(1.0 + var[idx]))
        sens, spec = self.loo_reliabilities()
        right = p[:, None] * sens[None, :] + (1.0 - p[:, None]) * spec[None, :]
        return idx, np.argmax(right, axis=1)
