"""Multiclass GP classification by nested EP with the multinomial probit likelihood
(Riihimaki, Jylanki & Vehtari 2013): one joint posterior over the C latent functions."""
from __future__ import annotations

import dataclasses
from contextlib import ExitStack
from dataclasses import dataclass
from numbers import Real
from typing import Any, Optional, Union

import numpy as np
from scipy.linalg import solve_triangular
from sklearn.base import ClassifierMixin
from sklearn.utils._param_validation import Interval
from sklearn.utils.validation import check_is_fitted

from ..typing import Array, ArrayLike, ArrayOrStd, HyperpriorLike, KernelLike, \
    OptimizerLike, RandomStateLike
from ..backend import resolve
from ..inference import carry_anderson, nested_ep as nep
from ..inference.inducing import check_inducing, cholesky_uu, inducing_count, uu_from_whitened
from ..kernels import kernel_from_dict
from ..kernels.distances import reuse_distances
from ..likelihoods import MultinomialProbit, multinomial_probit as mp
from ..priors import hyperprior_terms
from ._base import EvidenceMixin, FastepEstimator, FitData, fit_entry, \
    latent_output, shared
from ._mlii import fit_theta
from ._problem import NamedTheta
from ._validation import class_labels, validate_X, validate_X_y

#: n x n float64 matrices alive at the peak of a nested-EP posterior refresh, per class
#: (H_c and G_c) and besides: K, S, M's factor (in the class loop's work matrix), two
#: more of room, and on the GPU (out-of-place Cholesky, einsum temporaries) two more; on
#: the CPU a run's sweeps reuse one set (:func:`~fastep.inference.nested_ep.buffers`).
#: The gradient's peak (K, H, S, M's factor, its weights and three work matrices) is
#: below it.
_PER_CLASS, _BESIDES = 2, 7


def dense_matrices(n_classes):
    """n x n float64 matrices at the peak of dense nested EP with ``n_classes`` classes."""
    return _PER_CLASS * n_classes + _BESIDES


#: Test points per block of :meth:`NestedGP.latent` (its work is C n x block arrays).
_PREDICT_BLOCK = 512


@dataclass(frozen=True)
class NestedGP(NamedTheta):
    """C latent GPs with one kernel and the multinomial probit likelihood at inputs X and
    labels y (0..C-1): the problem :func:`~fastep.models._mlii.maximize_evidence` works on
    (``theta`` is the kernel's log parameters)."""

    X: np.ndarray
    y: np.ndarray
    kernel: object
    n_classes: int
    damping: Optional[float]
    tol: float
    max_iter: int
    Z: Optional[np.ndarray] = None      # inducing inputs shared by the classes (sparse)
    backend: Any = None                 # where dense nested EP runs (None: the CPU)

    @property
    def be(self):
        return resolve("cpu") if self.backend is None else self.backend

    @property
    def theta(self):
        return self.kernel.theta

    @property
    def bounds(self):
        return self.kernel.bounds

    @property
    def theta_entries(self):
        """ML-II's names of theta's entries: the kernel's own (the classes share it)."""
        return self.kernel.theta_entries()

    @property
    def likelihood(self):
        return MultinomialProbit(self.n_classes)

    def with_theta(self, theta):
        return dataclasses.replace(self, kernel=self.kernel.clone_with_theta(theta))

    def rows(self, idx):
        """The same problem on the rows ``idx`` of X (ML-II's subsample stages)."""
        return dataclasses.replace(self, X=self.X[idx], y=self.y[idx])

    def draw(self, rng):
        b = self.bounds
        return rng.uniform(b[:, 0], b[:, 1])

    def reuse(self):
        """ML-II's evaluations share X's squared distances and nested EP's Anderson
        history."""
        stack = ExitStack()
        stack.enter_context(reuse_distances(self.X, self.be))
        stack.enter_context(carry_anderson())
        return stack

    @property
    def sparse(self):
        return self.Z is not None

    def check_memory(self):
        if self.sparse:     # Lambda / its factor, the inverse, its mirror, the last one's
            resolve("cpu").check_dense_memory(self.n_classes * self.Z.shape[0], 4)
        else:
            self.be.check_dense_memory(self.X.shape[0], dense_matrices(self.n_classes))

    def _uu(self):
        """``L_uu`` (the jittered Cholesky factor of K(Z, Z)), sparse problems only."""
        return cholesky_uu(self.kernel(self.Z))

    def _features(self, L_uu, X):
        """``V = L_uu^-1 K(Z, X)`` (m, k): the features ``Phi = V^T`` of the inputs X."""
        return solve_triangular(L_uu, self.kernel(self.Z, X), lower=True, check_finite=False)

    def _prior(self):
        """What nested EP runs on: the Gram matrix, or (sparse) ``(Phi, L_uu, V)``."""
        if not self.sparse:
            return self.kernel(self.X, backend=self.be), None, None
        L_uu = self._uu()
        V = self._features(L_uu, self.X)
        return np.ascontiguousarray(V.T), L_uu, V

    def run(self, sites=None, tol=None, prior=None):
        """Nested EP at the current kernel, warm-started from ``sites = (alpha, beta)``."""
        alpha, beta = sites if sites is not None else (None, None)
        K = (prior or self._prior())[0]
        return nep.nested_ep(K, self.y, self.n_classes, alpha, beta, self.damping,
                             self.tol if tol is None else tol, self.max_iter, self.sparse,
                             self.be)

    def final(self, sites):
        """:meth:`run` from ``sites`` with its posterior in host memory (the fitted
        model's)."""
        result = self.run(sites)
        return dataclasses.replace(result, posterior=result.posterior.on_host(self.be))

    def evidence(self, sites=None, tol=None):
        """``(log Z, d log Z / d theta, result)``, EP run to ``tol`` (None, or anything
        tighter than the problem's own: that one).  Sparse: ``d log Z / d Phi`` chained
        through ``Phi = K_fu L_uu^-T`` (:func:`~fastep.inference.inducing.uu_from_whitened`)
        with Z held fixed."""
        self.check_memory()
        prior = self._prior()
        result = self.run(sites, None if tol is None else max(tol, self.tol), prior)
        if not self.sparse:
            grad = self.kernel.gradient_contract(
                self.X, nep.gradient_weights(result.posterior, self.be), backend=self.be)
            return result.log_marginal_likelihood, grad, result
        Phi, L_uu, V = prior
        G_V = np.ascontiguousarray(nep.sparse_feature_gradient(result.posterior, Phi).T)
        G_uf = solve_triangular(L_uu, G_V, lower=True, trans="T", check_finite=False)
        grad = (self.kernel.gradient_contract(self.Z, uu_from_whitened(G_V @ V.T, L_uu))
                + self.kernel.gradient_contract(self.Z, G_uf, self.X))
        return result.log_marginal_likelihood, grad, result

    def posterior(self, alpha, beta):
        """The posterior at given inner sites (a loaded model's), in host memory."""
        return nep.refresh(self._prior()[0], alpha, beta, self.y, self.sparse,
                           self.be).on_host(self.be)

    def sites_from_marginals(self, mean, cov):
        """Inner sites ``(alpha, beta)`` (n, C) that one undamped outer update makes from no
        site with the marginals ``(mean, cov)`` of f at every row, so as the cavities
        (ML-II's seeds from a subsample's predictive,
        :func:`~fastep.models._mlii.seed_sites`); zero on a row where they are not finite
        with non-negative precisions."""
        n, C = mean.shape
        zero = np.zeros((n, C))
        alpha, beta = np.empty((n, C)), np.empty((n, C))
        mp.update_sites(np.ascontiguousarray(mean, dtype=float),
                        np.ascontiguousarray(cov, dtype=float),
                        np.asarray(self.y, dtype=np.int64), zero, zero, 1.0, mp.INNER_SWEEPS,
                        alpha, beta)
        bad = ~np.all(np.isfinite(alpha) & np.isfinite(beta) & (alpha >= 0.0), axis=1)
        alpha[bad], beta[bad] = 0.0, 0.0
        return alpha, beta

    def latent(self, result, X):
        """Predictive mean (m, C) and covariance (m, C, C) of the latent functions at X
        (host arrays; ``result``'s posterior may be on the GPU, as in ML-II's seeding)."""
        post = result.posterior.on_host(self.be)
        L_uu = self._uu() if self.sparse else None
        parts = []
        for i in range(0, X.shape[0], _PREDICT_BLOCK):
            Xb = X[i:i + _PREDICT_BLOCK]
            if self.sparse:
                parts.append(nep.sparse_predict_latent(
                    post, np.ascontiguousarray(self._features(L_uu, Xb).T),
                    self.kernel.diag(Xb)))
            else:
                parts.append(nep.predict_latent(post, self.kernel(self.X, Xb),
                                                self.kernel.diag(Xb)))
        return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


class NestedEPClassifier(ClassifierMixin, EvidenceMixin, FastepEstimator):
    """Multiclass Gaussian-process classification by nested EP (Riihimaki, Jylanki &
    Vehtari 2013) with the multinomial probit likelihood.

    One latent function per class, ``f_c ~ GP(0, k)`` with a shared kernel, and
    ``p(y = c | f) = P(c = argmax_j (f_j + e_j))``, ``e ~ N(0, I)``.  Unlike one-vs-rest
    (:class:`EPGaussianProcessClassifier`), the classes share one joint posterior, whose
    evidence is maximised over the kernel (MAP-II with ``hyperprior``); the probabilities
    need no renormalising.  Dense, each EP sweep costs about 4 C n^3 flops (C + 1 Cholesky
    factorisations of size n and their solves), on the CPU or (``device="cuda"``) the
    GPU; with ``n_inducing`` the C latent functions share m inducing inputs
    (projected-process prior ``K_fu K_uu^-1 K_uf``) and a sweep costs
    O(C^2 n m^2 + C^3 m^3), linear in n, on the CPU.

    Parameters
    ----------
    kernel : fastep or scikit-learn kernel, default=None
        Prior covariance of every latent function; None means ``RBF()``, with ML-II
        starting the lengthscale at the median distance between rows of X.  Copied, never
        modified: the fitted kernel is ``kernel_``.
    optimizer : "L-BFGS-B", callable or None, default="L-BFGS-B"
        ML-II of the kernel's parameters (warm-started EP at each step); None keeps them.
        From 1,000 rows (dense; sparse from 50,000) L-BFGS-B first runs on random
        subsamples drawn with ``random_state``, as in :class:`EPGaussianProcessClassifier`
        (digits, 1,257 rows: 160 s against 320 s, the same optimum), and the full-data run
        starts from sites seeded from the last subsample's predictive.
    n_restarts_optimizer : int, default=0
        Extra optimiser runs from log-uniform draws inside the bounds.
    max_iter_optimizer : int, default=200
        Most L-BFGS-B iterations of ML-II (a ``ConvergenceWarning`` if they run out).
    tol_optimizer : float or None, default=None
        None: ML-II stops when the objective (log evidence, plus the log hyperprior)
        gained less than 1e-5 nats per row of data over its last two steps (and the gain
        its curvature predicts is below that too).  A float asks for the exact optimum:
        a step that changes the objective by less than this (relative) or a projected
        gradient below ten times it ends ML-II.
    damping : float in (0, 1] or None, default=None
        Step of the parallel outer updates in the inner sites' natural parameters; None is
        adaptive (full steps, shrunk by 0.7 when the sites' change grows).
    tol : float, default=1e-6
        EP stops when no inner site moved by more than this (relative to 1 + abs(site))
        and log Z by less than this (relative).
    max_iter : int, default=200
        Most outer EP sweeps.
    hyperprior : "auto", dict or None, default="auto"
        MAP-II priors on the log kernel parameters (:mod:`fastep.priors`).
    n_inducing : int, "auto" or None, default="auto"
        Sparse nested EP with this many inducing inputs, shared by the classes (k-means++
        on X, then fixed); None is dense; "auto" is dense up to 3,000 rows and 256
        inducing inputs above (as for :class:`EPGaussianProcessClassifier`).
    inducing_points : (m, n_features) array, optional
        The inducing inputs themselves (implies sparse; overrides ``n_inducing``).
    random_state : int, RandomState, Generator or None, default=None
        Seeds the optimiser restarts, the k-means++ choice of inducing inputs and the
        rows of the subsample stages of ML-II (dense from 1,000 rows, sparse from
        50,000; see ``optimizer``).
    device : {"cpu", "cuda"}, default="cpu"
        Where dense nested EP runs: "cuda" puts the Gram matrix, the posterior's C + 1
        factorisations and the evidence gradient on an NVIDIA GPU (needs the ``cuda``
        extra); the per-point inner EP stays on the host.  Sparse nested EP runs on the
        CPU only.  The fitted posterior is kept in host memory, so the model predicts (and
        loads) on the CPU.
    verbose : int, default=0
        Progress of the fit: 1 shows the ML-II steps (and stages), 2 also every EP sweep,
        as tqdm bars where tqdm is installed, else as lines on stderr (fastep's logger,
        which ``logging`` can also configure without this parameter).

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
    kernel_ : kernel
        The fitted kernel.
    likelihood_ : MultinomialProbit
    log_marginal_likelihood_value_ : float
        Nested EP's log evidence at ``kernel_``.
    result_ : fastep.inference.nested_ep.NestedResult
        Sites (``site_tau``: inner precisions, ``site_nu``: inner shifts, (n, C)) and the
        posterior.
    inducing_points_ : (m, n_features) ndarray
        The inducing inputs (sparse only).
    n_iter_ : int
        Outer EP sweeps of the final run.
    converged_ : bool
        Whether the final nested EP run converged.
    n_features_in_ : int

    See Also
    --------
    EPGaussianProcessClassifier : One-vs-rest binary GPs (one kernel per class).
    GWIClassifier : Multiclass Gaussian Wasserstein inference with the robust-max
        likelihood.
    fastep.likelihoods.MultinomialProbit : The likelihood.

    References
    ----------
    J. Riihimaki, P. Jylanki, A. Vehtari (2013), Nested expectation propagation for
    Gaussian process classification with a multinomial probit likelihood, JMLR 14, 75-109.

    Examples
    --------
    >>> import numpy as np
    >>> from fastep import NestedEPClassifier
    >>> rng = np.random.default_rng(0)
    >>> X = np.vstack([rng.normal(c, 0.6, (15, 2)) for c in ([0, 0], [2, 0], [0, 2])])
    >>> y = np.repeat(["a", "b", "c"], 15)
    >>> clf = NestedEPClassifier().fit(X, y)
    >>> p = clf.predict_proba(X[:2])
    >>> p.shape, bool(np.allclose(p.sum(1), 1)), bool(clf.score(X, y) > 0.9)
    ((2, 3), True, True)
    """

    _parameter_constraints = shared(
        "verbose", "kernel", "optimizer", "n_restarts_optimizer", "max_iter_optimizer", "tol_optimizer",
        "damping", "max_iter", "random_state", "hyperprior", "n_inducing",
        "inducing_points", "device", tol=[Interval(Real, 0, None, closed="neither")])

    def __init__(self, kernel: Optional[KernelLike] = None, *,
                 optimizer: OptimizerLike = "L-BFGS-B", n_restarts_optimizer: int = 0,
                 max_iter_optimizer: int = 200, tol_optimizer: Optional[float] = None,
                 damping: Optional[float] = None, tol: float = 1e-6, max_iter: int = 200,
                 hyperprior: HyperpriorLike = "auto", n_inducing: Union[int, str, None] = "auto",
                 inducing_points: Optional[ArrayLike] = None,
                 random_state: RandomStateLike = None, device: str = "cpu",
                 verbose: int = 0) -> None:
        self.kernel = kernel
        self.optimizer = optimizer
        self.n_restarts_optimizer = n_restarts_optimizer
        self.max_iter_optimizer = max_iter_optimizer
        self.tol_optimizer = tol_optimizer
        self.damping = damping
        self.tol = tol
        self.max_iter = max_iter
        self.hyperprior = hyperprior
        self.n_inducing = n_inducing
        self.inducing_points = inducing_points
        self.random_state = random_state
        self.device = device
        self.verbose = verbose

    def _check_device(self, sparse):
        """Sparse nested EP runs on the CPU only (checked before the device is resolved,
        so that the message is about the settings, whatever the machine has)."""
        if sparse and self.device != "cpu":
            raise ValueError(f"NestedEPClassifier runs sparse nested EP on the CPU only; got "
                             f"device={self.device!r} with inducing points. Set "
                             f"device='cpu', or drop n_inducing and inducing_points for "
                             f"dense nested EP on the GPU.")

    def _problem(self, X, y, kernel, n_classes, Z=None, backend=None):
        """The nested EP problem (``backend``: the fit's; None: this estimator's device,
        when a model is loaded)."""
        self._check_device(Z is not None)
        backend = resolve(self.device) if backend is None else backend
        return NestedGP(np.ascontiguousarray(X), np.asarray(y, dtype=np.int64), kernel,
                        int(n_classes), self.damping, float(self.tol), int(self.max_iter), Z,
                        backend)

    @fit_entry
    def fit(self, X: ArrayLike, y: ArrayLike) -> NestedEPClassifier:
        """Fit nested EP (and, with an optimizer, the kernel by MAP-II / ML-II).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,)
            Class labels (two or more classes).

        Returns
        -------
        self
        """
        return self._fit(X, y)

    def _fit_data(self, X, y):
        X, y = validate_X_y(self, X, y, dtype=np.float64, ensure_min_samples=1)
        classes, labels = class_labels(y, return_inverse=True)
        if classes.size < 2:
            raise ValueError(f"NestedEPClassifier requires at least 2 classes in y; got only "
                             f"one class: {classes[0]!r}.")
        m = inducing_count(self.n_inducing, X.shape[0])
        self._check_device(m is not None or self.inducing_points is not None)
        return FitData(X, labels, found={"classes": classes, "n_inducing": m})

    def _fit_model(self, data, backend, rng):
        """MAP-II (ML-II) of the kernel, then nested EP at the fitted kernel."""
        X, labels, classes = data.X, data.y, data.found["classes"]
        m, Z = data.found["n_inducing"], None
        if m is not None or self.inducing_points is not None:
            Z = check_inducing(X, m, self.inducing_points, rng)
        problem = self._problem(X, labels, self._fresh_kernel(X), classes.size, Z, backend)
        problem.check_memory()
        owner = type(self).__name__
        prior = hyperprior_terms(self.hyperprior, problem.theta_names, problem.theta.size,
                                 owner)
        sites = None
        if self.optimizer is not None and problem.theta.size:
            # from 1,000 rows (dense) or 50,000 (sparse) on subsamples first, as the binary
            # estimators do (digits: 78 and 314 rows before the 1,257)
            problem, sites = fit_theta(
                problem, self.optimizer, self.n_restarts_optimizer, rng, None, owner,
                self.max_iter_optimizer, self.tol_optimizer, prior)
        result = problem.final(sites)           # warns if it did not converge
        self._set_fitted(classes, problem, result)

    def _set_fitted(self, classes, problem, result):
        self.classes_ = classes
        self._problem_ = problem
        self.result_ = result
        self._set_model(problem.kernel, problem.likelihood, problem.Z,
                        result.log_marginal_likelihood, result.n_iter, result.converged)

    def _evidence_problems(self):
        return [self._problem_]

    # --- persistence ------------------------------------------------------------------
    def _state(self):
        """Fitted state as header values and arrays (:func:`fastep.save_model`)."""
        p, r = self._problem_, self.result_
        arrays = {"X": p.X, "classes": np.asarray(self.classes_), "labels": p.y,
                  "site_alpha": r.site_tau, "site_beta": r.site_nu}
        meta = {"kernel": p.kernel.to_dict(), "n_iter": int(r.n_iter),
                "converged": bool(r.converged), "sparse": p.sparse}
        if p.sparse:
            arrays["Z"] = p.Z
        return meta, arrays

    def _load_state(self, reader):
        """Inverse of :meth:`_state`: the posterior rebuilt from the saved sites."""
        X = self._loaded_inputs(reader)
        classes = reader.classes()
        n, C = X.shape[0], classes.size
        labels = reader.array("labels", (n,), kind="i")
        if labels.size and (labels.min() < 0 or labels.max() >= C):
            raise ValueError(f"the array 'labels' must hold class indices 0..{C - 1}")
        alpha = reader.array("site_alpha", (n, C))
        beta = reader.array("site_beta", (n, C))
        if np.any(alpha < 0):
            raise ValueError("the array 'site_alpha' holds negative site precisions")
        Z = None
        if "sparse" in reader.meta and reader.value("sparse", bool):
            Z = reader.array("Z", (None, X.shape[1]))
            if not 1 <= Z.shape[0] <= n:
                raise ValueError(f"the array 'Z' must hold between 1 and {n} inducing inputs")
        problem = self._problem(X, labels, kernel_from_dict(reader.value("kernel", dict)), C,
                                Z)
        problem.check_memory()
        post = problem.posterior(alpha, beta)
        result = nep.NestedResult(alpha, beta, post,
                                  nep.log_evidence(post, problem.y, alpha, beta),
                                  reader.value("n_iter", int), reader.value("converged", bool))
        self._set_fitted(classes, problem, result)

    # --- prediction -------------------------------------------------------------------
    def _moments(self, X):
        check_is_fitted(self)
        X = validate_X(self, X, reset=False, dtype=np.float64)
        return self._problem_.latent(self.result_, np.ascontiguousarray(X))

    def predict_latent(self, X: ArrayLike, return_std: bool = False) -> ArrayOrStd:
        """Posterior means (and standard deviations) of the C latent functions at X;
        :meth:`predict_latent_cov` gives the covariances between them.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Inputs to predict at.
        return_std : bool, default=False
            Also return the standard deviations.

        Returns
        -------
        mean : ndarray of shape (n_samples, n_classes)
            One column per class, in the order of ``classes_``.
        std : ndarray of shape (n_samples, n_classes)
            The standard deviations (only with ``return_std=True``).
        """
        mean, cov = self._moments(X)
        return latent_output(mean, np.einsum("icc->ic", cov).copy(), return_std)

    def predict_latent_cov(self, X: ArrayLike) -> tuple:
        """Posterior means and covariances of the latent functions at X (correlated
        through the likelihood).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Inputs to predict at.

        Returns
        -------
        mean : ndarray of shape (n_samples, n_classes)
            The posterior means.
        cov : ndarray of shape (n_samples, n_classes, n_classes)
            The posterior covariance between the classes' functions at each input.
        """
        return self._moments(X)

    def predict_proba(self, X: ArrayLike) -> Array:
        """Class probabilities ``int N(f | m, V) p(y = c | f) df`` (inner EP's estimate of
        each, normalised).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Inputs to predict at.

        Returns
        -------
        ndarray of shape (n_samples, n_classes)
            Columns in the order of ``classes_``.
        """
        mean, cov = self._moments(X)
        return self.likelihood_.predict_proba(mean, cov)

    def predict(self, X: ArrayLike) -> Array:
        """Most probable class.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Inputs to predict at.

        Returns
        -------
        ndarray of shape (n_samples,)
            Labels from ``classes_``.
        """
        proba = self.predict_proba(X)
        return self.classes_[np.argmax(proba, axis=1)]
