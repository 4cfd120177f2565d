"""Multiclass GP classification by nested EP with the multinomial probit likelihood
(Riihimaki, Jylanki & Vehtari 2013): one joint posterior over the C latent functions.
The estimator; its problem is :mod:`fastep.models.nested_problem`."""
from __future__ import annotations

from numbers import Real
from typing import Optional, Union

import numpy as np
from sklearn.base import ClassifierMixin
from sklearn.utils._param_validation import Interval
from sklearn.utils.validation import check_is_fitted

from ..typing import Array, ArrayLike, ArrayOrStd, HyperpriorLike, KernelLike, \
    OptimizerLike, RandomStateLike
from ..backend import resolve
from ..inference import nested_ep as nep
from ..inference.inducing import check_inducing, inducing_count
from ..kernels import kernel_from_dict
from ..priors import hyperprior_terms
from ._base import EvidenceMixin, FastepEstimator, FitData, fit_entry, \
    latent_output, shared
from ._mlii import fit_theta
from .nested_problem import NestedGP
from ._validation import class_labels, validate_X, validate_X_y

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
