"""EP Gaussian-process classifier with a scikit-learn interface."""
from __future__ import annotations

from typing import Optional, Union
import copy

import numpy as np
from sklearn.base import ClassifierMixin
from sklearn.utils._param_validation import StrOptions
from sklearn.utils.validation import check_is_fitted

from ..typing import (Array, ArrayLike, ArrayOrStd, HyperpriorLike, KernelLike,
                       OptimizerLike, RandomStateLike)
from .._checks import label_text
from .._dask import is_dask_array
from ..likelihoods import Likelihood, Logistic, Probit
from ._base import EPEstimator, FitData, fit_entry, latent_output, shared
from ._state import latent_from_state, latent_state, likelihood_of
from ._validation import class_labels, validate_X_y

_LIKELIHOODS = {"probit": Probit, "logistic": Logistic}


class EPGaussianProcessClassifier(ClassifierMixin, EPEstimator):
    """Gaussian-process classification by Expectation Propagation.

    Binary problems use one latent GP with a probit (default) or logistic
    likelihood; more than two classes are handled one-vs-rest, as in
    scikit-learn's ``GaussianProcessClassifier``.  Kernel hyperparameters are
    chosen by maximising the EP evidence log Z_EP plus a weakly informative log
    hyperprior (MAP-II; ``hyperprior=None``: type-II maximum likelihood) with
    L-BFGS-B, warm-starting EP from the previous sites at every step.

    Parameters
    ----------
    kernel : fastep or scikit-learn kernel, default=None
        Prior covariance; None means ``RBF(variance=1.0, lengthscale=1.0)``, except that
        ML-II starts the lengthscale at the median distance between rows of X.
        Copied, never modified: the fitted kernel is ``kernel_``.
    likelihood : {"probit", "logistic"} or Likelihood, default="probit"
        A binary likelihood (labels are mapped to -1 / +1).
    method : {"auto", "parallel", "sequential"}, default="auto"
        EP schedule.  Dense EP (:func:`fastep.ep`): "auto" is "parallel"; "sequential"
        runs on the CPU.  Sparse EP (:func:`fastep.sparse_ep`'s ``schedule``): "auto" is
        "sequential", q(u) refreshed after every block of rows (about half the passes).
    optimizer : "L-BFGS-B", callable or None, default="L-BFGS-B"
        ML-II of the kernel (and likelihood, and inducing input) parameters; a callable
        follows scikit-learn's convention; None keeps them fixed.
    n_restarts_optimizer : int, default=0
        Extra optimiser runs from log-uniform draws inside the bounds.
    max_iter_optimizer : int, default=200
        Most L-BFGS-B iterations of ML-II (a ``ConvergenceWarning`` if they run out).
    tol_optimizer : float or None, default=None
        None: ML-II stops when the objective (log evidence, plus the log hyperprior)
        gained less than 1e-5 nats per row of data over its last two steps (and the gain
        its curvature predicts is below that too), a precision that asks a large table
        for no change that moves a prediction.  A float asks for the exact optimum: a
        step that changes the objective by less than this (relative) or a projected
        gradient below ten times it ends ML-II (0.2's rule; 1e-6 was its default).
    damping : float in (0, 1] or None, default=None
        EP step in natural parameters; None is adaptive: parallel EP starts at full steps
        and shrinks them by 0.7 when EP oscillates (growing back once it settles),
        sequential EP takes full steps.
    tol : float, default=1e-6
        EP convergence tolerance (change of log Z_EP and of the sites, see
        :func:`fastep.ep`).
    max_iter : int, default=100
        Most EP sweeps per EP run.
    n_inducing : int, "auto" or None, default="auto"
        Use sparse Power EP with this many inducing points (k-means++ on X):
        O(n m^2) time, data streamed in chunks (see :func:`fastep.sparse_ep`).  None is
        dense EP (O(n^3) a sweep, 8 n^2 bytes a matrix).  "auto": dense EP up to 3,000
        rows, 256 inducing points above (``fastep.models._base.AUTO_DENSE_ROWS`` and
        ``AUTO_INDUCING``; on statsmodels' randhie, 14,133 rows, a negative-binomial fit
        took 21 s at a held-out log density 0.003 below that of 512 points, 41 s); a dask
        X always runs sparse.
    inducing_points : (m, n_features) array, optional
        Initial inducing inputs (implies sparse EP; overrides ``n_inducing``).
    power : float in (0, 1], default=1.0
        The power alpha of sparse Power EP (1 = EP with inducing points; towards 0 it
        approaches the variational (VFE) solution).  Dense EP has power 1; another value
        needs inducing points.
    optimize_inducing : bool, default=False
        Whether ML-II also moves the inducing inputs (sparse EP with an optimizer).  Off
        by default: at power 1 moving them inflates the evidence past the dense GP's
        (FITC's overfitting) and takes 20x the evaluations, for a worse test NLL
        (``scripts/mlii_convergence.py``); k-means++ inputs kept fixed do better.
    random_state : int, RandomState, Generator or None, default=None
        Seeds the optimiser restarts, the k-means++ choice of inducing points and the
        rows of the subsample stages of ML-II at large n (dense EP from 1,000 rows, sparse
        EP from 50,000; see the user guide).
    device : {"cpu", "cuda"}, default="cpu"
        Where EP runs: "cuda" puts parallel EP's sweeps, the Gram matrices and the evidence
        gradients (dense and sparse) on an NVIDIA GPU (needs the ``cuda`` extra); a fitted
        model predicts on the device it was fitted on.
    hyperprior : "auto", dict or None, default="auto"
        MAP-II: a prior on the log kernel (and likelihood) parameters added to the log
        evidence (:mod:`fastep.priors`).  "auto" is a log-normal prior on the kernel
        variance (median 1, sigma 5), which stops the walk of the variance towards its
        bound on separable classes; a dict maps parameter names (``"variance"``,
        ``"lengthscale"``) to :class:`fastep.priors.LogNormal`; None is plain ML-II.
    n_jobs : int or None, default=None
        One-vs-rest problems after the first fitted in this many worker processes (-1:
        every core; None: in this process), each with BLAS and Numba capped at its share
        of the cores; problems under 1,000 rows stay in this process (a worker costs
        about a second to start).  The problems after the first start ML-II from the
        first one's fitted parameters.
    inference : {"ep", "markov"}, default="ep"
        "markov": state-space EP (:func:`fastep.markov_ep`) over X's column of times (and
        an optional second column of series ids: independent series, one kernel), in
        O(n) time and memory (no inducing points), for Matern, Periodic and constant
        kernels of time and their sums and products (default ``Matern32`` with the
        median distance between the times as lengthscale).  "ep": dense or sparse EP.
    verbose : int, default=0
        Progress of the fit: 1 shows the ML-II steps (and stages), 2 also every EP sweep,
        as tqdm bars where tqdm is installed, else as lines on stderr (fastep's logger,
        which ``logging`` can also configure without this parameter).

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
    kernel_ : kernel
        The fitted kernel (of the first binary problem if one-vs-rest).
    likelihood_ : Likelihood
        The likelihood used (of the first binary problem if one-vs-rest).
    log_marginal_likelihood_value_ : float
        log Z_EP at ``kernel_`` (mean over classes if one-vs-rest).
    inducing_points_ : (m, n_features) ndarray
        Fitted inducing inputs (sparse EP only; of the first binary problem).
    results_ : list of EPResult or SparseEPResult
        The final EP run of each binary problem (sites, marginals at the training inputs).
    n_iter_ : int
        EP sweeps of the final run (max over classes).
    converged_ : bool
        Whether the final EP run of every binary problem converged.
    n_features_in_ : int

    See Also
    --------
    NestedEPClassifier : Multiclass EP with the classes' latent functions coupled by a
        multinomial-probit likelihood (one-vs-rest here fits one binary GP per class).
    GWIClassifier : Multiclass Gaussian Wasserstein inference with the robust-max
        likelihood.
    OrdinalGPClassifier : Ordered classes (one latent function and cut points).
    MultiAnnotatorGPClassifier : Binary labels from several annotators of unknown
        reliability.
    fastep.ep : Dense EP on a given Gram matrix, as a function.
    sklearn.gaussian_process.GaussianProcessClassifier : scikit-learn's Laplace
        approximation (logistic link).

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
    >>> clf.predict_latent(X[:2], return_std=True)[1].shape
    (2,)
    """

    _parameter_constraints = shared(
        "verbose", "kernel", "method", "optimizer", "n_restarts_optimizer", "max_iter_optimizer",
        "tol_optimizer", "damping", "tol", "max_iter",
        "n_inducing", "inducing_points", "power", "optimize_inducing", "random_state",
        "device", "hyperprior", "n_jobs",
        likelihood=[StrOptions(set(_LIKELIHOODS)), Likelihood],
        inference=[StrOptions({"ep", "markov"})])

    def __init__(self, kernel: Optional[KernelLike] = None, *,
                 likelihood: Union[str, Likelihood] = "probit", method: str = "auto",
                 optimizer: OptimizerLike = "L-BFGS-B", n_restarts_optimizer: int = 0,
                 max_iter_optimizer: int = 200, tol_optimizer: Optional[float] = None,
                 damping: Optional[float] = None, tol: float = 1e-6, max_iter: int = 100,
                 n_inducing: Union[int, str, None] = "auto",
                 inducing_points: Optional[ArrayLike] = None,
                 power: float = 1.0, optimize_inducing: bool = False,
                 random_state: RandomStateLike = None, device: str = "cpu",
                 hyperprior: HyperpriorLike = "auto", n_jobs: Optional[int] = None, inference: str = "ep",
                 verbose: int = 0) -> None:
        self.kernel = kernel
        self.likelihood = likelihood
        self.method = method
        self.optimizer = optimizer
        self.n_restarts_optimizer = n_restarts_optimizer
        self.max_iter_optimizer = max_iter_optimizer
        self.tol_optimizer = tol_optimizer
        self.damping = damping
        self.tol = tol
        self.max_iter = max_iter
        self.n_inducing = n_inducing
        self.inducing_points = inducing_points
        self.power = power
        self.optimize_inducing = optimize_inducing
        self.random_state = random_state
        self.device = device
        self.hyperprior = hyperprior
        self.n_jobs = n_jobs
        self.inference = inference
        self.verbose = verbose

    def _make_likelihood(self) -> Likelihood:
        if isinstance(self.likelihood, Likelihood):
            if not self.likelihood.binary:
                raise ValueError(f"The 'likelihood' parameter of EPGaussianProcessClassifier "
                                 f"must be a binary likelihood (y in {{-1, +1}}); got "
                                 f"{type(self.likelihood).__name__}.")
            return copy.deepcopy(self.likelihood)
        return _LIKELIHOODS[self.likelihood]()

    @fit_entry
    def fit(self, X: ArrayLike, y: ArrayLike) -> EPGaussianProcessClassifier:
        """Fit the EP approximation (and, with an optimizer, the hyperparameters).

        Parameters
        ----------
        X : array-like or dask array of shape (n_samples, n_features)
            Training inputs.  A dask array is fitted by sparse EP on the active Dask
            client's workers (``n_inducing`` not None, ``device="cpu"``).
        y : array-like or dask array of shape (n_samples,)
            Class labels (two or more classes).

        Returns
        -------
        self
        """
        return self._fit(X, y)

    def _fit_data(self, X, y):
        if is_dask_array(X):             # sparse EP on the active Dask client's workers
            X, y = self._dask_fit_data(X, y)
            classes = self._dask_classes(y)
        else:
            X, y = validate_X_y(self, X, y, dtype=np.float64, ensure_min_samples=1)
            classes = class_labels(y)
        if classes.size < 2:
            raise ValueError(f"EPGaussianProcessClassifier requires at least 2 classes in y; "
                             f"got only one class, {label_text(classes[0])}. Fit on data "
                             f"with examples of every class.")
        return FitData(X, y, found={"classes": classes})

    def _problems(self, make, data):
        """One binary problem per class (one-vs-rest; one problem for two classes)."""
        classes = data.found["classes"]
        likelihood = self._make_likelihood()
        targets = [classes[1]] if classes.size == 2 else list(classes)
        return [make(np.where(data.y == c, 1.0, -1.0), likelihood) for c in targets]

    def _set_fits(self, data, fits):
        self._set_fitted(data.found["classes"], [f[0] for f in fits], [f[1] for f in fits])

    def _set_fitted(self, classes, latents, results):
        """Fitted attributes from the binary problems and their EP results (also used by
        :func:`fastep.load_model`)."""
        self.classes_ = classes
        self._latents = latents
        self.results_ = results
        self._set_model(latents[0].kernel, latents[0].likelihood, latents[0].Z,
                        np.mean([r.log_marginal_likelihood for r in results]),
                        max(r.n_iter for r in results), all(r.converged for r in results))

    def _state(self):
        """Fitted state as header values and arrays (:func:`fastep.save_model`)."""
        arrays = {"X": self._latents[0].X, "classes": np.asarray(self.classes_)}
        problems = []
        for i, (latent, result) in enumerate(zip(self._latents, self.results_)):
            arrays[f"y_{i}"] = latent.y
            problems.append(latent_state(f"p{i}_", latent, result, arrays))
        return {"problems": problems}, arrays

    def _load_state(self, reader):
        """Inverse of :meth:`_state` on an estimator built from the saved parameters."""
        X = self._loaded_inputs(reader)
        classes = reader.classes()
        problems = reader.value("problems", list)
        if len(problems) != (1 if classes.size == 2 else classes.size):
            raise ValueError(f"{classes.size} classes need "
                             f"{1 if classes.size == 2 else classes.size} binary problems; the "
                             f"header has {len(problems)}")
        config = self._loaded_config()
        fits = []
        for i, meta in enumerate(problems):
            likelihood = likelihood_of(reader, meta)
            if not likelihood.binary:
                raise ValueError(f"problem {i} has the likelihood "
                                 f"{type(likelihood).__name__}, which is not binary")
            y = reader.array(f"y_{i}", (X.shape[0],))
            fits.append(latent_from_state(reader, meta, f"p{i}_", X, y, likelihood, config))
        self._set_fitted(classes, [f[0] for f in fits], [f[1] for f in fits])

    def _evidence_problems(self):
        return self._latents

    def _latent_moments(self, X):
        check_is_fitted(self)
        X = self._predict_inputs(X)
        moments = [latent.latent(result, X) for latent, result in zip(self._latents,
                                                                       self.results_)]
        return [m[0] for m in moments], [m[1] for m in moments]

    def predict_latent(self, X: ArrayLike, return_std: bool = False) -> ArrayOrStd:
        """Posterior mean (and standard deviation) of the latent function(s) at X.

        Parameters
        ----------
        X : array-like or dask array of shape (n_samples, n_features)
            Inputs to predict at; a dask array (of a sparse model) gives lazy dask arrays,
            computed chunk by chunk on the workers.
        return_std : bool, default=False
            Also return the standard deviations.

        Returns
        -------
        mean : ndarray of shape (n_samples,) or (n_samples, n_classes)
            Shape (n_samples,) for two classes, (n_samples, n_classes) (one column per
            one-vs-rest problem) for more.
        std : ndarray of the same shape
            The standard deviations (only with ``return_std=True``).
        """
        means, variances = self._latent_moments(X)
        if len(means) == 1:
            return latent_output(means[0], variances[0], return_std)
        if is_dask_array(means[0]):
            import dask.array as da
            return latent_output(da.stack(means, axis=1), da.stack(variances, axis=1),
                                 return_std)
        return latent_output(np.column_stack(means), np.column_stack(variances), return_std)

    def predict_proba(self, X: ArrayLike) -> Array:
        """Class probabilities.

        Parameters
        ----------
        X : array-like or dask array of shape (n_samples, n_features)
            Inputs to predict at (a dask array: a lazy result, as in
            :meth:`predict_latent`).

        Returns
        -------
        ndarray of shape (n_samples, n_classes)
            Columns in the order of ``classes_``; one-vs-rest probabilities normalised
            to sum to 1.
        """
        return self._proba(*self._latent_moments(X))

    def _proba(self, means, variances):
        """Class probabilities from the latent moments of each binary problem (a lazy dask
        array, computed chunk by chunk, for dask moments)."""
        if is_dask_array(means[0]):
            import dask.array as da
            p = da.stack([da.map_blocks(latent.likelihood.predict_proba, m, v, dtype=float)
                          for latent, m, v in zip(self._latents, means, variances)], axis=1)
            stack = da.stack
        else:
            p = np.column_stack([latent.likelihood.predict_proba(m, v)
                                 for latent, m, v in zip(self._latents, means, variances)])
            stack = np.column_stack
        if p.shape[1] == 1:
            return stack([1.0 - p[:, 0], p[:, 0]], **({"axis": 1} if stack is not
                                                       np.column_stack else {}))
        p = np.maximum(p, 1e-300)
        return p / p.sum(axis=1, keepdims=True)

    def predict(self, X: ArrayLike) -> Array:
        """Most probable class.

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
            return proba.argmax(axis=1).map_blocks(self.classes_.take,
                                                   dtype=self.classes_.dtype)
        return self.classes_[np.argmax(proba, axis=1)]

    def _loo(self):
        cavities = [latent.loo_cavity(r) for latent, r in zip(self._latents, self.results_)]
        if len(self._latents) == 1:
            lpd = self._latents[0].loo_log_density(*cavities[0])
            proba = self._proba([cavities[0][0]], [cavities[0][1]])
        else:                  # one-vs-rest: the normalised probability of the true class
            proba = self._proba([c[0] for c in cavities], [c[1] for c in cavities])
            true = np.argmax(np.column_stack([lat.y for lat in self._latents]), axis=1)
            lpd = np.log(proba[np.arange(true.size), true])
        return lpd, self.classes_[np.argmax(proba, axis=1)]
