"""Ordinal regression: a GP classifier for ordered labels (ordinal probit likelihood)."""
from __future__ import annotations

from typing import Optional, Union
import numpy as np
from scipy.special import ndtri
from sklearn.base import ClassifierMixin
from sklearn.utils._param_validation import StrOptions
from sklearn.utils.validation import check_is_fitted

from ..typing import Array, ArrayLike, KernelLike, OptimizerLike, RandomStateLike
from .._checks import label_text
from .._dask import is_dask_array
from ..likelihoods import OrdinalProbit
from ._base import FitData, SingleLatentEstimator, fit_entry, shared
from ._dask import da_map_rows, rows_like
from ._state import latent_from_state, latent_state, likelihood_of
from ._validation import class_labels, validate_X_y


def initial_cut_points(counts):
    """Cut points that reproduce the label frequencies ``counts`` (one per level) under
    the prior f ~ N(0, 1) with unit probit noise: ``sqrt(2) Phi^-1(cumulative frequency)``,
    kept strictly increasing."""
    counts = np.asarray(counts, dtype=float)
    cum = np.clip(np.cumsum(counts)[:-1] / counts.sum(), 1e-3, 1.0 - 1e-3)
    cuts = np.sqrt(2.0) * ndtri(cum)
    for j in range(1, cuts.size):
        cuts[j] = max(cuts[j], cuts[j - 1] + 1e-2)
    return cuts


def _levels_block(labels, classes):
    """The level (index in the sorted ``classes``) of each label of a chunk, as floats."""
    return np.searchsorted(classes, labels).astype(float)


class OrdinalGPClassifier(ClassifierMixin, SingleLatentEstimator):
    """Gaussian-process ordinal regression by EP (Chu & Ghahramani 2005).

    The sorted distinct labels are the ordered levels 0 .. K-1 (integers 0..K-1, or any
    labels whose sort order is the level order); one latent GP f and K - 1 cut points
    give ``p(y = k | f) = Phi(b_k - f) - Phi(b_{k-1} - f)``
    (:class:`~fastep.likelihoods.OrdinalProbit`).  ML-II fits the kernel and the cut
    points.

    Parameters
    ----------
    kernel : fastep or scikit-learn kernel, default=None
        Prior covariance; None means ``RBF()``, except that ML-II starts its lengthscale
        at the median distance between rows of X (with ``optimizer=None``: ``RBF()``).
        Copied, never modified: the fitted kernel is ``kernel_``.
    cut_points : array of shape (K - 1,), optional
        Starting (with ``optimizer=None``: fixed) cut points; default from the label
        frequencies.
    method : {"auto", "parallel", "sequential"}, default="auto"
        EP schedule.  Dense EP (:func:`fastep.ep`): "auto" is "parallel"; "sequential"
        runs on the CPU.  Sparse EP (:func:`fastep.sparse_ep`'s ``schedule``): "auto" is
        "sequential", q(u) refreshed after every block of rows.
    optimizer : "L-BFGS-B", callable or None, default="L-BFGS-B"
        ML-II of the kernel, the cut points (and the inducing inputs); a callable follows
        scikit-learn's convention; None keeps them fixed.
    n_restarts_optimizer : int, default=0
        Extra optimiser runs from random starts inside the bounds.
    max_iter_optimizer : int, default=200
        Most L-BFGS-B iterations of ML-II (a ``ConvergenceWarning`` if they run out).
    tol_optimizer : float or None, default=None
        None: ML-II stops when the log evidence gained less than 1e-5 nats per row of
        data over its last two steps (and the gain its curvature predicts is below that
        too).  A float asks for the exact optimum: a step that changes the log evidence
        by less than this (relative) or a projected gradient below ten times it ends
        ML-II.
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
        dense EP.  "auto": dense EP up to 3,000 rows, 256 inducing points above; a dask X
        always runs sparse.
    inducing_points : (m, n_features) array, optional
        Initial inducing inputs (implies sparse EP; overrides ``n_inducing``).
    power : float in (0, 1], default=1.0
        The power alpha of sparse Power EP (1 = EP with inducing points; towards 0 it
        approaches the variational (VFE) solution).  Dense EP has power 1; another value
        needs inducing points.
    optimize_inducing : bool, default=False
        Whether ML-II also moves the inducing inputs (sparse EP with an optimizer).
    random_state : int, RandomState, Generator or None, default=None
        Seeds the optimiser restarts, the k-means++ choice of inducing points and the
        rows of the subsample stages of ML-II at large n (dense EP from 1,000 rows, sparse
        EP from 50,000; see the user guide).
    device : {"cpu", "cuda"}, default="cpu"
        Where EP runs: "cuda" puts parallel EP's sweeps, the Gram matrices and the evidence
        gradients (dense and sparse) on an NVIDIA GPU (needs the ``cuda`` extra); a fitted
        model predicts on the device it was fitted on.
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
    classes_ : ndarray of shape (K,)
        The ordered levels.
    cut_points_ : ndarray of shape (K - 1,)
        The fitted cut points.
    kernel_ : kernel
        The fitted kernel.
    likelihood_ : OrdinalProbit
        The fitted likelihood.
    log_marginal_likelihood_value_ : float
        log Z_EP at ``kernel_``.
    inducing_points_ : (m, n_features) ndarray
        Fitted inducing inputs (sparse EP only).
    result_ : EPResult, SparseEPResult or MarkovEPResult
        The final EP run.
    n_iter_ : int
        EP sweeps of the final run.
    converged_ : bool
        Whether the final EP run converged.
    n_features_in_ : int

    See Also
    --------
    EPGaussianProcessClassifier : Unordered classes (one-vs-rest).
    fastep.likelihoods.OrdinalProbit : The likelihood, with its cut points.
    CensoredGPRegressor : Continuous targets known only beyond a limit.

    Examples
    --------
    >>> import numpy as np
    >>> from fastep import OrdinalGPClassifier
    >>> X = np.linspace(-2, 2, 60)[:, None]
    >>> y = np.digitize(X[:, 0], [-0.7, 0.7])            # levels 0, 1, 2
    >>> clf = OrdinalGPClassifier().fit(X, y)
    >>> clf.predict_proba(X[:2]).shape, bool(clf.score(X, y) > 0.9)
    ((2, 3), True)
    """

    _parameter_constraints = shared(
        "verbose", "kernel", "method", "optimizer", "n_restarts_optimizer", "max_iter_optimizer",
        "tol_optimizer", "damping", "tol", "max_iter",
        "n_inducing", "inducing_points", "power", "optimize_inducing", "random_state",
        "device", cut_points=["array-like", None],
        inference=[StrOptions({"ep", "markov"})])

    def __init__(self, kernel: Optional[KernelLike] = None, *,
                 cut_points: Optional[ArrayLike] = None, method: str = "auto",
                 optimizer: OptimizerLike = "L-BFGS-B", n_restarts_optimizer: int = 0,
                 max_iter_optimizer: int = 200, tol_optimizer: Optional[float] = None,
                 damping: Optional[float] = None, tol: float = 1e-6, max_iter: int = 100,
                 n_inducing: Union[int, str, None] = "auto",
                 inducing_points: Optional[ArrayLike] = None,
                 power: float = 1.0, optimize_inducing: bool = False,
                 random_state: RandomStateLike = None, device: str = "cpu", inference: str = "ep",
                 verbose: int = 0) -> None:
        self.kernel = kernel
        self.cut_points = cut_points
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
        self.inference = inference
        self.verbose = verbose

    @fit_entry
    def fit(self, X: ArrayLike, y: ArrayLike) -> OrdinalGPClassifier:
        """Fit the kernel, the cut points and the posterior of f.

        Parameters
        ----------
        X : array-like or dask array of shape (n_samples, n_features)
            Training inputs.  A dask array is fitted by sparse EP on the active Dask
            client's workers (``n_inducing`` not None, ``device="cpu"``).
        y : array-like or dask array of shape (n_samples,)
            Ordered labels (two or more levels; their sort order is the level order).

        Returns
        -------
        self
        """
        return self._fit(X, y)

    def _fit_data(self, X, y):
        if is_dask_array(X):             # sparse EP on the active Dask client's workers
            import dask.array as da
            X, y = self._dask_fit_data(X, y)
            classes = self._dask_classes(y)
            levels = rows_like(y, X).map_blocks(_levels_block, classes, dtype=float)
            counts = da.bincount(levels.astype(np.int64), minlength=classes.size).compute()
        else:
            X, y = validate_X_y(self, X, y, dtype=np.float64, ensure_min_samples=1)
            classes, levels = class_labels(y, return_inverse=True)
            levels = levels.astype(float)
            counts = np.bincount(levels.astype(np.int64), minlength=classes.size)
        if classes.size < 2:
            raise ValueError(f"OrdinalGPClassifier requires at least 2 classes (ordered "
                             f"levels) in y; got only one class, {label_text(classes[0])}. "
                             f"Fit on data with examples of every level.")
        if self.cut_points is None:
            cuts = initial_cut_points(counts)
        else:
            cuts = np.asarray(self.cut_points, dtype=float).ravel()
            if cuts.size != classes.size - 1:
                raise ValueError(f"cut_points must hold K - 1 = {classes.size - 1} values for "
                                 f"the {classes.size} levels in y; got {cuts.size}.")
        return FitData(X, levels, OrdinalProbit(cuts), found={"classes": classes})

    def _problems(self, make, data):
        """One latent problem: the levels 0..K-1 under the ordinal probit."""
        return [make(data.y, data.likelihood)]

    def _set_fits(self, data, fits):
        self.classes_ = data.found["classes"]
        self._set_fitted(*fits[0])

    def _set_fitted(self, latent, result):
        self._set_latent(latent, result)
        self.cut_points_ = latent.likelihood.cut_points.copy()

    def _state(self):
        latent = self._latent
        arrays = {"X": latent.X, "y": latent.y, "classes": np.asarray(self.classes_)}
        return latent_state("f_", latent, self.result_, arrays), arrays

    def _load_state(self, reader):
        X = self._loaded_inputs(reader)
        n = X.shape[0]
        classes = reader.classes()
        likelihood = likelihood_of(reader, reader.meta)
        if not isinstance(likelihood, OrdinalProbit):
            raise ValueError(f"the likelihood must be an OrdinalProbit; got {likelihood!r}")
        if likelihood.n_levels != classes.size:
            raise ValueError(f"the array 'classes' holds {classes.size} labels but the "
                             f"OrdinalProbit likelihood has {likelihood.n_levels - 1} cut "
                             f"points ({likelihood.n_levels} levels); the two must agree")
        y = likelihood.encode_targets(reader.array("y", (n,)))
        config = self._loaded_config(likelihood)
        latent, result = latent_from_state(reader, reader.meta, "f_", X, y, likelihood, config)
        self.classes_ = classes
        self._set_fitted(latent, result)



    def predict_proba(self, X: ArrayLike) -> Array:
        """P(y = level k) for every level (a lazy dask array, computed chunk by chunk,
        for a dask X).

        Parameters
        ----------
        X : array-like or dask array of shape (n_samples, n_features)
            Inputs to predict at; a dask array needs a sparse model.

        Returns
        -------
        ndarray of shape (n_samples, K)
            Columns in the order of ``classes_``.
        """
        mean, std = self.predict_latent(X, return_std=True)
        if is_dask_array(mean):
            return da_map_rows(self.likelihood_.predict_proba, mean, std ** 2,
                               width=self.classes_.size)
        return self.likelihood_.predict_proba(mean, std ** 2)

    def predict(self, X: ArrayLike) -> Array:
        """The most probable level.

        Parameters
        ----------
        X : array-like or dask array of shape (n_samples, n_features)
            Inputs to predict at (a dask array: a lazy result).

        Returns
        -------
        ndarray of shape (n_samples,)
            Levels from ``classes_``.
        """
        check_is_fitted(self)
        proba = self.predict_proba(X)
        if is_dask_array(proba):
            return proba.argmax(axis=1).map_blocks(self.classes_.take,
                                                   dtype=self.classes_.dtype)
        return self.classes_[np.argmax(proba, axis=1)]

    def _loo(self):
        mean, var = self._latent.loo_cavity(self.result_)
        proba = self.likelihood_.predict_proba(mean, var)
        return self._latent.loo_log_density(mean, var), self.classes_[np.argmax(proba, 1)]
