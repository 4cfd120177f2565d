"""GP regression with censored targets (Tobit likelihood; Groot & Lucas 2012).

Over 450 lines: one job, the censored regressor: half of it is its numpydoc (every
parameter, examples) and the censored predictive methods it documents.
"""
from __future__ import annotations

from typing import Optional, Tuple, Union
from numbers import Real

import numpy as np
from sklearn.base import RegressorMixin
from sklearn.utils._param_validation import Interval, StrOptions

from ..typing import Array, ArrayLike, ArrayOrStd, KernelLike, OptimizerLike, RandomStateLike
from .._dask import is_dask_array, scalar_data
from ..likelihoods.tobit import (Tobit, censored_predictive, censored_quantile,
                                 check_censored_data, check_limits)
from ._base import FitData, SingleLatentEstimator, fit_entry, shared
from ._dask import da_map_rows
from ..kernels import kernel_from_dict
from ._latent import LaplaceGP
from ._state import latent_from_state, latent_state, likelihood_of
from ._validation import same_rows, validate_X, validate_column


def _limit(value):
    """A limit as remembered for prediction: None (also for an infinite scalar: no limit),
    a float, or (per observation) an array."""
    if value is None:
        return None
    arr = np.asarray(value, dtype=float)
    if arr.ndim:
        return arr.copy()
    return float(arr) if np.isfinite(arr) else None


class CensoredGPRegressor(RegressorMixin, SingleLatentEstimator):
    """Gaussian-process regression with censored outputs (Tobit likelihood).

    ``y* = f(x) + eps``, ``eps ~ N(0, noise_variance)``, observed as ``lower`` when
    ``y* <= lower`` and ``upper`` when ``y* >= upper``.  Inference by EP (default) or
    Laplace; kernel and noise variance by ML-II.

    Parameters
    ----------
    kernel : fastep or scikit-learn kernel, default=None
        Prior covariance; None means ``RBF()``, except that ML-II starts its lengthscale
        at the median distance between rows of X (with ``optimizer=None``: ``RBF()``).
        Copied, never modified: the fitted kernel is ``kernel_``.
    noise_variance : float, default=1.0
        Initial (or, with ``optimizer=None``, fixed) variance of the uncensored noise.
    lower, upper : float or None, default=None
        Scalar limits (None: no limit); per-observation limits go to ``fit``.
    inference : {"ep", "laplace", "markov"}, default="ep"
        The approximation; Laplace runs dense, on the CPU, with numerical ML-II gradients;
        "markov" is state-space EP (:func:`fastep.markov_ep`) in O(n) over X's column of
        times (and optionally a second column of series ids), as in
        :class:`~fastep.EPGaussianProcessRegressor`.  Sparse EP and ``device="cuda"``
        need "ep".
    method : {"auto", "parallel", "sequential"}, default="auto"
        EP schedule.  Dense EP (:func:`fastep.ep`): "auto" is "parallel"; "sequential"
        runs on the CPU.  Sparse EP (:func:`fastep.sparse_ep`'s ``schedule``): "auto" is
        "sequential", q(u) refreshed after every block of rows.
    optimizer : "L-BFGS-B", callable or None, default="L-BFGS-B"
        ML-II of the kernel, the noise variance (and the inducing inputs); a callable
        follows scikit-learn's convention; None keeps them fixed.
    n_restarts_optimizer : int, default=0
        Extra optimiser runs from log-uniform draws inside the bounds.
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
    max_iter : int, default=200
        Most EP sweeps per EP run (Laplace: Newton iterations).
    n_inducing : int, "auto" or None, default="auto"
        Use sparse Power EP with this many inducing points (k-means++ on X):
        O(n m^2) time, data streamed in chunks (see :func:`fastep.sparse_ep`).  None is
        dense EP.  "auto": dense EP up to 3,000 rows, 256 inducing points above (Laplace:
        dense, with "auto" or None); a dask X always runs sparse.
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
        rows of the subsample stages of ML-II at large n (dense EP and Laplace from 1,000
        rows, sparse EP from 50,000; see the user guide).
    device : {"cpu", "cuda"}, default="cpu"
        Where EP runs: "cuda" puts parallel EP's sweeps, the Gram matrices and the evidence
        gradients (dense and sparse) on an NVIDIA GPU (needs the ``cuda`` extra); a fitted
        model predicts on the device it was fitted on.
    verbose : int, default=0
        Progress of the fit: 1 shows the ML-II steps (and stages), 2 also every EP sweep,
        as tqdm bars where tqdm is installed, else as lines on stderr (fastep's logger,
        which ``logging`` can also configure without this parameter).

    Attributes
    ----------
    kernel_ : kernel
        The fitted kernel.
    likelihood_ : Tobit
        The fitted likelihood (:class:`~fastep.likelihoods.Tobit`, with the limits of
        the fit).
    noise_variance_ : float
        The fitted variance of the uncensored noise.
    log_marginal_likelihood_value_ : float
        The log evidence (EP's or Laplace's) at ``kernel_``.
    inducing_points_ : (m, n_features) ndarray
        Fitted inducing inputs (sparse EP only).
    result_ : EPResult, SparseEPResult, MarkovEPResult or LaplaceResult
        The final EP or Laplace run.
    n_iter_ : int
        EP sweeps (Laplace: Newton iterations) of the final run.
    converged_ : bool
        Whether the final run converged.
    n_features_in_ : int
    lower_, upper_ : float, ndarray or None
        The limits of the fit.  Scalars are used by ``predict*`` unless other limits are
        given there; per-observation limits must be given again for new inputs.

    See Also
    --------
    EPGaussianProcessRegressor : Survival times with Weibull, log-logistic or
        log-normal likelihoods (right-censoring by an event indicator), and other
        non-Gaussian targets.
    fastep.likelihoods.Tobit : The likelihood.
    OrdinalGPClassifier : Targets known only as ordered levels.

    Examples
    --------
    >>> import numpy as np
    >>> X = np.linspace(0, 1, 30)[:, None]
    >>> y = np.maximum(np.sin(6 * X[:, 0]), -0.5)
    >>> reg = CensoredGPRegressor(lower=-0.5, noise_variance=0.01, optimizer=None).fit(X, y)
    >>> bool(reg.predict_latent(X).min() < -0.5)       # recovers f below the limit
    True
    >>> bool(reg.predict(X).min() >= -0.5)             # the censored output cannot
    True
    """

    _parameter_constraints = shared(
        "verbose", "kernel", "method", "optimizer", "n_restarts_optimizer", "max_iter_optimizer",
        "tol_optimizer", "damping", "tol", "max_iter",
        "n_inducing", "inducing_points", "power", "optimize_inducing", "random_state",
        "device", noise_variance=[Interval(Real, 0, None, closed="neither")],
        lower=[Real, None], upper=[Real, None], inference=[StrOptions({"ep", "laplace", "markov"})])

    def __init__(self, kernel: Optional[KernelLike] = None, *, noise_variance: float = 1.0,
                 lower: Optional[float] = None, upper: Optional[float] = None,
                 inference: str = "ep", method: str = "auto",
                 optimizer: OptimizerLike = "L-BFGS-B", n_restarts_optimizer: int = 0,
                 max_iter_optimizer: int = 200, tol_optimizer: Optional[float] = None,
                 damping: Optional[float] = None, tol: float = 1e-6, max_iter: int = 200,
                 n_inducing: Union[int, str, None] = "auto",
                 inducing_points: Optional[ArrayLike] = None,
                 power: float = 1.0, optimize_inducing: bool = False,
                 random_state: RandomStateLike = None, device: str = "cpu",
                 verbose: int = 0) -> None:
        self.kernel = kernel
        self.noise_variance = noise_variance
        self.lower = lower
        self.upper = upper
        self.inference = inference
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
        self.verbose = verbose

    @fit_entry
    def fit(self, X: ArrayLike, y: ArrayLike, lower: Optional[ArrayLike] = None,
            upper: Optional[ArrayLike] = None) -> CensoredGPRegressor:
        """Fit the kernel, the noise variance and the posterior of f.

        Parameters
        ----------
        X : array-like or dask array of shape (n_samples, n_features)
            Training inputs.  A dask array is fitted by sparse EP on the active Dask
            client's workers (``n_inducing`` not None, ``device="cpu"``, scalar limits).
        y : array-like or dask array of shape (n_samples,)
            Targets; a value at a limit is censored there (a value beyond it is an
            error: a censored observation is recorded at its limit); NaN means
            interval-censored between finite limits.
        lower, upper : float or array-like of shape (n_samples,), optional
            Limits for this data (-inf / inf: none); they override the constructor's.

        Returns
        -------
        self
        """
        return self._fit(X, y, lower=lower, upper=upper)

    def _fit_data(self, X, y, lower=None, upper=None):
        if y is None:
            raise ValueError("CensoredGPRegressor requires y to be passed, but the target y "
                             "is None.")
        lo = self.lower if lower is None else lower
        up = self.upper if upper is None else upper
        if is_dask_array(X):         # sparse EP on the Dask client's workers
            X, y = self._dask_fit_data(X, y)
            scalar_data({"lower": lo, "upper": up})
            check_limits(lo, up, 1)
            lo_arr, up_arr = lo, up          # y is checked against them chunk by chunk
        else:
            X = validate_X(self, X, dtype=np.float64)
            y = validate_column(y, dtype=np.float64, warn=True)  # NaN allowed: interval-censored
            same_rows(X, y)
            y, lo_arr, up_arr = check_censored_data(y, lo, up)
        laplace = self.inference == "laplace"
        if laplace and (self.device != "cpu" or self.n_inducing not in (None, "auto")
                        or self.inducing_points is not None):
            raise ValueError("inference='laplace' runs dense on the CPU: inducing points "
                             "(n_inducing / inducing_points) and device='cuda' need "
                             f"inference='ep'; got inference={self.inference!r}.")
        # the EP configuration checks no likelihood here (as before issue 62); Laplace: dense
        return FitData(X, y, rows=0 if laplace else None,
                       found={"limits": (lo_arr, up_arr), "lower": _limit(lo),
                              "upper": _limit(up)})

    def _problem(self, X, rng):
        if self.inference == "laplace":
            return LaplaceGP, self._fresh_kernel(X), None
        return super()._problem(X, rng)

    def _problems(self, make, data):
        """One latent problem under the Tobit likelihood of the fit's limits."""
        lo, up = data.found["limits"]
        return [make(data.y, Tobit(self.noise_variance, lower=lo, upper=up))]

    def _set_fits(self, data, fits):
        self._set_fitted(*fits[0], data.found["lower"], data.found["upper"])

    def _set_fitted(self, latent, result, lower, upper):
        self._set_latent(latent, result)
        self.lower_, self.upper_ = lower, upper
        self.noise_variance_ = latent.likelihood.noise_variance

    def _state(self):
        """Fitted state as header values and arrays (:func:`fastep.save_model`)."""
        latent = self._latent
        arrays = {"X": latent.X, "y": latent.y,
                  "limits": latent.likelihood.limits(latent.X.shape[0])}
        if isinstance(latent, LaplaceGP):        # refitted on load (Newton from zero)
            meta = {"kernel": latent.kernel.to_dict(), "likelihood": latent.likelihood.to_dict()}
        else:
            meta = latent_state("f_", latent, self.result_, arrays)
        for name in ("lower_", "upper_"):
            value = getattr(self, name)
            if isinstance(value, np.ndarray):
                arrays[name] = value
                meta[name] = "array"
            else:
                meta[name] = value
        return meta, arrays

    def _load_state(self, reader):
        """Inverse of :meth:`_state` on an estimator built from the saved parameters."""
        X = self._loaded_inputs(reader)
        n = X.shape[0]
        limits = reader.array("limits", (n, 2), allow_inf=True)
        y, lo, up = check_censored_data(reader.array("y", (n,), allow_nan=True), limits[:, 0],
                                        limits[:, 1])
        saved = likelihood_of(reader, reader.meta)
        if not isinstance(saved, Tobit):
            raise ValueError(f"the likelihood must be Tobit; got {type(saved).__name__}")
        likelihood = Tobit(saved.noise_variance, lower=lo, upper=up,
                           noise_variance_bounds=saved.parameter_bounds("noise_variance"))
        config = self._loaded_config()
        if self.inference == "laplace":
            kernel = kernel_from_dict(reader.value("kernel", dict))
            latent = LaplaceGP(X, y, kernel, likelihood, config)
            result = latent.run()
        else:
            latent, result = latent_from_state(reader, reader.meta, "f_", X, y, likelihood,
                                               config)
        limits_fit = []
        for name in ("lower_", "upper_"):
            value = reader.meta.get(name)
            if value == "array":
                value = reader.array(name, (n,), allow_inf=True)
            elif value is not None:
                value = reader.value(name, float)
            limits_fit.append(value)
        self._set_fitted(latent, result, *limits_fit)


    # --- prediction --------------------------------------------------------------------

    def _limits(self, n, lower, upper):
        """The limits for n predictions: those given, else the fit's scalar ones."""
        out = []
        for name, given, fitted in (("lower", lower, self.lower_), ("upper", upper, self.upper_)):
            value = fitted if given is None else given
            if isinstance(value, np.ndarray) and given is None:
                raise ValueError(f"This model was fitted with per-observation {name} limits, "
                                 f"which do not carry over to new inputs; pass {name}= (a "
                                 f"scalar or an array of length {n}) to this method, or use "
                                 f"predict_latent for the uncensored f.")
            out.append(value)
        return check_limits(*out, n)

    def _on_chunks(self, X, lower, upper, what, q=None):
        """``what`` of the censored predictive at a dask X (:func:`_censored_block`),
        lazily, chunk by chunk on the workers (scalar limits)."""
        mean, std = self.predict_latent(X, return_std=True)
        lo, up = (fitted if given is None else given for given, fitted in
                  ((lower, self.lower_), (upper, self.upper_)))
        scalar_data({"lower": lo, "upper": up})
        return da_map_rows(_censored_block, mean, std, lo, up, self.noise_variance_, what, q)

    def _predictive(self, X, lower, upper):
        mean, std = self.predict_latent(X, return_std=True)
        lo, up = self._limits(mean.shape[0], lower, upper)
        return censored_predictive(mean, std ** 2, self.noise_variance_, lo, up), mean, std, lo, up

    def predict(self, X: ArrayLike, return_std: bool = False,
                lower: Optional[ArrayLike] = None, upper: Optional[ArrayLike] = None
                ) -> ArrayOrStd:
        """Mean (and std) of the *censored* output y at X (limits: those of ``fit`` when
        scalar, or ``lower``/``upper`` given here; lazy dask arrays for a dask X).

        Parameters
        ----------
        X : array-like or dask array of shape (n_samples, n_features)
            Inputs to predict at; a dask array (of a sparse model, scalar limits) gives
            lazy dask arrays, computed chunk by chunk on the workers.
        return_std : bool, default=False
            Also return the standard deviation of y.
        lower, upper : float or array-like of shape (n_samples,), optional
            Limits of these points; default: the fit's, when scalar (per-observation
            limits of the fit must be given again for new inputs).

        Returns
        -------
        mean : ndarray of shape (n_samples,)
            The mean of the censored y.
        std : ndarray of shape (n_samples,)
            Its standard deviation (only with ``return_std=True``).
        """
        if is_dask_array(X):
            mean = self._on_chunks(X, lower, upper, "mean")
            return (mean, self._on_chunks(X, lower, upper, "std")) if return_std else mean
        pred = self._predictive(X, lower, upper)[0]
        return (pred["mean"], np.sqrt(pred["var"])) if return_std else pred["mean"]

    def predict_censored_proba(self, X: ArrayLike, lower: Optional[ArrayLike] = None,
                               upper: Optional[ArrayLike] = None) -> Tuple[Array, Array]:
        """Probabilities that y is censored at X, at its lower and at its upper limit.

        Parameters
        ----------
        X : array-like or dask array of shape (n_samples, n_features)
            Inputs to predict at (a dask array: lazy results, as in :meth:`predict`).
        lower, upper : float or array-like of shape (n_samples,), optional
            Limits of these points; default: the fit's, when scalar (per-observation
            limits of the fit must be given again for new inputs).

        Returns
        -------
        p_lower, p_upper : ndarray of shape (n_samples,)
            P(y = lower) and P(y = upper).
        """
        if is_dask_array(X):
            return (self._on_chunks(X, lower, upper, "p_lower"),
                    self._on_chunks(X, lower, upper, "p_upper"))
        pred = self._predictive(X, lower, upper)[0]
        return pred["p_lower"], pred["p_upper"]

    def predict_quantile(self, X: ArrayLike, q: float, lower: Optional[ArrayLike] = None,
                         upper: Optional[ArrayLike] = None) -> Array:
        """q-quantile of the censored output y at X.

        Parameters
        ----------
        X : array-like or dask array of shape (n_samples, n_features)
            Inputs to predict at (a dask array: a lazy result, as in :meth:`predict`).
        q : float
            The probability level, strictly between 0 and 1 (the median: 0.5).
        lower, upper : float or array-like of shape (n_samples,), optional
            Limits of these points; default: the fit's, when scalar (per-observation
            limits of the fit must be given again for new inputs).

        Returns
        -------
        ndarray of shape (n_samples,)
        """
        if is_dask_array(X):
            return self._on_chunks(X, lower, upper, "quantile", q)
        _, mean, std, lo, up = self._predictive(X, lower, upper)
        return censored_quantile(q, mean, std ** 2, self.noise_variance_, lo, up)

    def _loo(self):
        """LOO density of each (possibly censored) target and the LOO mean of the
        censored y at the fit's limits; Laplace has no cavities."""
        if isinstance(self._latent, LaplaceGP):
            raise ValueError("leave-one-out from cavities needs inference='ep'; Laplace has "
                             "no cavity distributions.")
        mean, var = self._latent.loo_cavity(self.result_)
        return (self._latent.loo_log_density(mean, var),
                self._latent.likelihood.predict_mean(mean, var))

    def log_predictive_density(self, X: ArrayLike, y: ArrayLike,
                               lower: Optional[ArrayLike] = None,
                               upper: Optional[ArrayLike] = None) -> Array:
        """log p(y | data) of observed, possibly censored, values at X.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Inputs of the observations.
        y : array-like of shape (n_samples,)
            Observed values, censored ones at their limit (NaN: interval-censored).
        lower, upper : float or array-like of shape (n_samples,), optional
            Limits of these points; default: the fit's, when scalar (per-observation
            limits of the fit must be given again for new inputs).

        Returns
        -------
        ndarray of shape (n_samples,)
            One log density per point (of a censored value: the log probability of its
            censoring).
        """
        _, mean, std, lo, up = self._predictive(X, lower, upper)
        y, lo, up = check_censored_data(np.asarray(y, dtype=float), lo, up)
        lik = Tobit(self.noise_variance_, lower=lo, upper=up)
        return lik.log_predictive_density(y, mean, std ** 2)


def _censored_block(mean, std, lower, upper, noise_variance, what, q=None):
    """One chunk of the censored predictive: ``what`` in mean, std, p_lower, p_upper,
    quantile (level q)."""
    lo, up = check_limits(lower, upper, mean.shape[0])
    if what == "quantile":
        return censored_quantile(q, mean, std * std, noise_variance, lo, up)
    pred = censored_predictive(mean, std * std, noise_variance, lo, up)
    return np.sqrt(pred["var"]) if what == "std" else pred[what]
