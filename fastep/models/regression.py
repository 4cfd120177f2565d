"""GP regression by EP for any likelihood with a real-valued or count target.

Over 450 lines: one job, the regressor: eleven likelihoods' data, predictions (mean,
median, survival, hazard) and scores, and their numpydoc, about half of it.
"""
from __future__ import annotations

from typing import Any, Dict, Optional, Type, Union
import copy
import warnings

import numpy as np
from sklearn.base import RegressorMixin
from sklearn.metrics import r2_score
from sklearn.utils._param_validation import StrOptions
from sklearn.utils.validation import check_is_fitted

from ..typing import Array, ArrayLike, ArrayOrStd, KernelLike, OptimizerLike, RandomStateLike
from .._caller import user_stacklevel
from .._dask import is_dask_array, scalar_data
from ..likelihoods.counts import LOG_MAX
from ..likelihoods import (Binomial, Gaussian, Likelihood, LogLogistic, LogNormal, NegativeBinomial,
                           OrdinalProbit, Poisson, StudentT, Tobit, Weibull,
                           ZeroInflatedNegativeBinomial, ZeroInflatedPoisson)
from ._base import FitData, SingleLatentEstimator, fit_entry, shared
from ._dask import da_map_rows
from ._state import latent_from_state, latent_state, likelihood_of
from ._validation import same_rows, validate_X, validate_column

#: The likelihoods ``likelihood=`` names.
REGRESSION_LIKELIHOODS: Dict[str, Type[Likelihood]] = {
    "student_t": StudentT, "gaussian": Gaussian, "poisson": Poisson,
    "negative_binomial": NegativeBinomial, "tobit": Tobit,
    "zero_inflated_poisson": ZeroInflatedPoisson,
    "zero_inflated_negative_binomial": ZeroInflatedNegativeBinomial,
    "weibull": Weibull, "log_logistic": LogLogistic, "log_normal": LogNormal,
    "binomial": Binomial}


class EPGaussianProcessRegressor(RegressorMixin, SingleLatentEstimator):
    """Gaussian-process regression by Expectation Propagation, for any EP likelihood of a
    real-valued, count or survival target: robust (Student-t), counts (Poisson, negative
    binomial, and their zero-inflated forms for excess zeros), censored (Tobit), survival
    times with right censoring (Weibull, log-logistic, log-normal accelerated failure time:
    ``fit(X, t, event=e)``, then :meth:`predict_survival`, :meth:`predict_hazard`,
    :meth:`predict_median`) or Gaussian noise.

    ``f ~ GP(0, kernel)``, ``y_i ~ p(y_i | f(x_i))``; EP approximates the posterior of f,
    ML-II fits the kernel and likelihood parameters.  Likelihoods that are not log-concave
    (Student-t, the zero-inflated counts) run robust EP (see :func:`fastep.ep`): dense EP then takes the sequential
    schedule, site by site, as Jylanki, Vanhatalo & Vehtari (2011) recommend for the
    Student-t.

    Parameters
    ----------
    kernel : fastep or scikit-learn kernel, default=None
        Prior covariance; None means ``RBF()``, except that ML-II starts its lengthscale
        at the median distance between rows of X (with ``optimizer=None``: ``RBF()``).
        Copied, never modified: the fitted kernel is ``kernel_``.
    likelihood : {"student_t", "gaussian", "poisson", "negative_binomial", "binomial", "tobit", \
"zero_inflated_poisson", "zero_inflated_negative_binomial", "weibull", "log_logistic", \
"log_normal"} or Likelihood, default="student_t"
        A name (the likelihood with its default parameters) or an instance, whose
        parameters are the starting point of ML-II (or kept, with ``optimizer=None``).
        ``"student_t"`` starts ML-II twice, from a broad scale (the standard deviation
        of y) and a narrow one (a tenth of it), and keeps the higher evidence: the
        Student-t evidence often has one mode that treats outliers as broad noise and a
        higher one that explains them as outliers, and a single start finds the mode
        nearest to it (seen on Neal's function with 15% outliers: log evidence -68.4
        from scale 1, +1.4 from scale 0.1).
    normalize_y : bool or "auto", default="auto"
        Fit to ``(y - mean(y)) / std(y)`` and give every prediction (``predict``,
        ``predict_latent``, the log densities, the LOO ones) back in y's units, as
        scikit-learn's ``GaussianProcessRegressor(normalize_y=True)`` does: the GP's zero
        mean and unit-scale defaults then suit y whatever its offset and scale
        (statsmodels' engel, food expenditure of mean 607 and sd 275 from income: test
        RMSE 718.7 without, 200.6 with, a linear model 187.2; on scikit-learn's diabetes,
        where ML-II's start at the median distance already finds the offset, 55.6 without
        and 56.1 with; ``python scripts/fit_time.py normalize-y``).  ``kernel_``, ``likelihood_`` and the evidence are those of the standardised
        y.  ``"auto"``: on for the likelihoods named ``"student_t"`` and ``"gaussian"``
        (location-scale families, for which the rescaling is exact), off otherwise.
        Counts and censoring limits live in y's own units: ``True`` with a count or Tobit
        likelihood is a ValueError.  With ``True`` and a likelihood instance (or a fixed
        kernel), its parameters are read in the units of the standardised y.
    method : {"auto", "parallel", "sequential"}, default="auto"
        EP schedule.  Dense EP (:func:`fastep.ep`): "auto" is "parallel", except for a
        likelihood that is not log-concave, whose robust EP runs "sequential" where the
        device has it (the CPU); "sequential" runs on the CPU.  Sparse EP
        (:func:`fastep.sparse_ep`'s ``schedule``): "auto" is "sequential", q(u)
        refreshed after every block of rows.
    optimizer : "L-BFGS-B", callable or None, default="L-BFGS-B"
        ML-II of the kernel and likelihood (and inducing input) parameters; a callable
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
        median distance between the times as lengthscale); ``predict`` at new times
        interpolates and forecasts.  "ep": dense or sparse EP over any inputs.
    verbose : int, default=0
        Progress of the fit: 1 shows the ML-II steps (and stages), 2 also every EP sweep,
        as tqdm bars where tqdm is installed, else as lines on stderr (fastep's logger,
        which ``logging`` can also configure without this parameter).

    Attributes
    ----------
    kernel_ : kernel
        The fitted kernel.
    likelihood_ : Likelihood
        The fitted likelihood.
    log_marginal_likelihood_value_ : float
        log Z_EP at ``kernel_`` (of the standardised y under ``normalize_y``).
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
    SparseGPRegressor : Gaussian noise at large n: the collapsed sparse bound, no EP.
    CensoredGPRegressor : Targets censored at known limits (Tobit).
    EPGaussianProcessClassifier : Binary and one-vs-rest classification.
    fastep.likelihoods : The likelihoods ``likelihood=`` takes (counts, Student-t,
        survival, custom).

    Notes
    -----
    Per-observation data of the likelihood go to ``fit`` and ``predict*`` as keywords:
    ``exposure=`` for the count likelihoods (default 1), ``trials=`` for the binomial
    (default 1), ``lower=``/``upper=`` for Tobit (default: the likelihood's own),
    ``event=`` for the survival likelihoods (``fit`` only; default: every time an
    event).  ``loo_log_predictive_density()`` and ``loo_predict()``
    give leave-one-out checks from EP's cavities without refitting.

    Examples
    --------
    >>> import numpy as np
    >>> from fastep import EPGaussianProcessRegressor
    >>> rng = np.random.default_rng(0)
    >>> X = np.linspace(0, 5, 40)[:, None]
    >>> y = rng.poisson(np.exp(np.sin(X[:, 0]) + 1.0))
    >>> reg = EPGaussianProcessRegressor(likelihood="poisson").fit(X, y)
    >>> bool(reg.predict(X[:1])[0] > 0), reg.loo_log_predictive_density().shape
    (True, (40,))
    """

    _parameter_constraints = shared(
        "verbose", "kernel", "method", "optimizer", "n_restarts_optimizer", "max_iter_optimizer",
        "tol_optimizer", "damping", "tol", "max_iter",
        "n_inducing", "inducing_points", "power", "optimize_inducing", "random_state",
        "device", likelihood=[StrOptions(set(REGRESSION_LIKELIHOODS)), Likelihood],
        normalize_y=["boolean", StrOptions({"auto"})],
        inference=[StrOptions({"ep", "markov"})])

    def __init__(self, kernel: Optional[KernelLike] = None, *,
                 likelihood: Union[str, Likelihood] = "student_t",
                 normalize_y: Union[bool, str] = "auto", method: str = "auto",
                 optimizer: OptimizerLike = "L-BFGS-B", n_restarts_optimizer: int = 0,
                 max_iter_optimizer: int = 200, tol_optimizer: Optional[float] = None,
                 damping: Optional[float] = None, tol: float = 1e-6, max_iter: int = 200,
                 n_inducing: Union[int, str, None] = "auto",
                 inducing_points: Optional[ArrayLike] = None,
                 power: float = 1.0, optimize_inducing: bool = False,
                 random_state: RandomStateLike = None, device: str = "cpu",
                 inference: str = "ep", verbose: int = 0) -> None:
        self.kernel = kernel
        self.likelihood = likelihood
        self.normalize_y = normalize_y
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

    #: y's shift and scale under ``normalize_y`` (class defaults: estimators of 0.2)
    _y_shift, _y_scale = 0.0, 1.0

    def _normalizes(self, likelihood):
        """Whether this fit standardises y (``normalize_y``), checked against the
        likelihood."""
        scale_family = isinstance(likelihood, (StudentT, Gaussian)) and \
            not isinstance(likelihood, Tobit)
        if self.normalize_y == "auto":
            return isinstance(self.likelihood, str) and scale_family
        if self.normalize_y and not scale_family:
            raise ValueError(f"normalize_y=True needs a likelihood of real-valued y without "
                             f"limits (Student-t or Gaussian); {type(likelihood).__name__} "
                             f"reads y in its own units (counts, censoring limits). Set "
                             f"normalize_y=False.")
        return bool(self.normalize_y)

    def _make_likelihood(self) -> Likelihood:
        lik = self.likelihood
        if isinstance(lik, str):
            return REGRESSION_LIKELIHOODS[lik]()
        if lik.binary or isinstance(lik, OrdinalProbit) or lik.n_extra and not lik.data_names:
            raise ValueError(f"The 'likelihood' parameter of EPGaussianProcessRegressor must "
                             f"be a likelihood of a real-valued or count target; got "
                             f"{type(lik).__name__}. Use EPGaussianProcessClassifier (binary), "
                             f"OrdinalGPClassifier (ordinal) or MultiAnnotatorGPClassifier.")
        return copy.deepcopy(lik)

    def _data(self, lik: Likelihood, n: int, data: Dict[str, Any]) -> Likelihood:
        """The likelihood with the per-observation data of n points: those given, else
        the constructor likelihood's scalars (per-observation arrays do not carry over)."""
        base = None if isinstance(self.likelihood, str) else self.likelihood
        own = {name: getattr(base, name, None) for name in lik.data_names}
        own = {k: (v if v is None or np.ndim(v) == 0 else None) for k, v in own.items()}
        own.update({k: v for k, v in data.items() if v is not None})
        unknown = {k: v for k, v in data.items() if k not in own}
        return lik.with_data(n, **own, **unknown)      # with_data names what it does not take

    @fit_entry
    def fit(self, X: ArrayLike, y: ArrayLike, **data: ArrayLike) -> EPGaussianProcessRegressor:
        """Fit the kernel, the likelihood parameters and the posterior of f.

        Parameters
        ----------
        X : array-like or dask array of shape (n_samples, n_features)
            Training inputs.  A dask array is fitted by sparse EP on the active Dask
            client's workers (``n_inducing`` not None, ``device="cpu"``, scalar data).
        y : array-like or dask array of shape (n_samples,)
            Targets in the likelihood's terms (counts for Poisson / negative binomial,
            successes for the binomial, times for survival; NaN means interval-censored
            for Tobit).
        **data : scalar or array-like of shape (n_samples,)
            Per-observation data of the likelihood: ``exposure=`` (counts), ``trials=``
            (binomial), ``lower=``, ``upper=`` (Tobit), ``event=`` (survival: 1 an
            event, 0 right-censored).

        Returns
        -------
        self
        """
        return self._fit(X, y, **data)

    def _fit_data(self, X, y, **data):
        if y is None:
            raise ValueError("EPGaussianProcessRegressor requires y to be passed, but the "
                             "target y is None.")
        if is_dask_array(X):     # sparse EP on the Dask client's workers, y checked there
            X, y = self._dask_fit_data(X, y)
            likelihood = self._data(self._make_likelihood(), 1, scalar_data(data))
            y = y.astype(np.float64)
        else:
            X = validate_X(self, X, dtype=np.float64)
            y = validate_column(y, dtype=np.float64, warn=True)  # NaN allowed: Tobit intervals
            same_rows(X, y)
            likelihood = self._data(self._make_likelihood(), X.shape[0], data)
            y = likelihood.encode_targets(y)
        self._y_shift, self._y_scale = 0.0, 1.0
        if self._normalizes(likelihood):
            if is_dask_array(y):
                import dask
                shift, scale = (float(v) for v in dask.compute(y.mean(), y.std()))
            else:
                shift, scale = float(np.mean(y)), float(np.std(y))
            if not (np.isfinite(shift) and np.isfinite(scale)):
                raise ValueError(f"y must be finite to be standardised (normalize_y); its "
                                 f"mean is {shift!r} and its standard deviation {scale!r}. "
                                 f"Remove the rows whose target is NaN or infinite.")
            self._y_shift, self._y_scale = shift, (scale if scale > 0.0 else 1.0)
            y = (y - self._y_shift) / self._y_scale
        return FitData(X, y, likelihood)

    def _fit_problems(self, make, data, rng):
        """ML-II from each of :meth:`_likelihood_starts`, the fit of the highest evidence
        kept, with its warnings (the others' dropped)."""
        best = None
        for start in self._likelihood_starts(data.likelihood, data.y):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                fit = self._fit_latent(make(data.y, start, own_kernel=True), rng)
            if best is None or (fit[1].log_marginal_likelihood
                                > best[0][1].log_marginal_likelihood):
                best = (fit, caught)
        assert best is not None                       # one start at least
        for w in best[1]:                             # the warnings of the fit kept
            warnings.warn(w.message, stacklevel=user_stacklevel())
        return [best[0]]

    def _set_fits(self, data, fits):
        self._set_latent(*fits[0])

    def _likelihood_starts(self, likelihood, y):
        """The likelihoods ML-II starts from: the given one, and for the default
        ``"student_t"`` a broad and a narrow scale (see the class docstring)."""
        if self.likelihood != "student_t" or self.optimizer is None:
            return [likelihood]
        s = float(y.std().compute() if is_dask_array(y) else np.std(y)) or 1.0
        low, high = np.exp(likelihood.bounds[1])
        return [likelihood.clone_with_theta(np.log([likelihood.df,
                                                    np.clip(scale, low, high)]))
                for scale in (s, 0.1 * s)]


    def _state(self):
        """Fitted state as header values and arrays (:func:`fastep.save_model`)."""
        latent = self._latent
        arrays = {"X": latent.X, "y": latent.y}
        meta = latent_state("f_", latent, self.result_, arrays)
        n = latent.X.shape[0]
        for name in latent.likelihood.data_names:
            value = getattr(latent.likelihood, name)
            if value is not None:
                arrays[f"data_{name}"] = np.broadcast_to(np.asarray(value, dtype=float),
                                                         (n,)).copy()
        meta["y_shift"], meta["y_scale"] = self._y_shift, self._y_scale    # normalize_y
        return meta, arrays

    def _load_state(self, reader):
        """Inverse of :meth:`_state` on an estimator built from the saved parameters."""
        X = self._loaded_inputs(reader)
        n = X.shape[0]
        saved = likelihood_of(reader, reader.meta)
        if saved.binary or isinstance(saved, OrdinalProbit):
            raise ValueError(f"the likelihood {type(saved).__name__} is not one of a "
                             "regression")
        data = {name: reader.array(f"data_{name}", (n,), allow_inf=True)
                for name in saved.data_names if f"data_{name}" in reader.arrays}
        likelihood = saved.with_data(n, **data)
        y = likelihood.encode_targets(reader.array("y", (n,), allow_nan=saved.nan_targets))
        config = self._loaded_config(likelihood)
        latent, result = latent_from_state(reader, reader.meta, "f_", X, y, likelihood, config)
        # files of 0.2 have no normalisation (y in its own units)
        shift = reader.value("y_shift", float) if "y_shift" in reader.meta else 0.0
        scale = reader.value("y_scale", float) if "y_scale" in reader.meta else 1.0
        if not scale > 0.0:
            raise ValueError(f"header value 'y_scale' must be positive; got {scale!r}")
        self._y_shift, self._y_scale = float(shift), float(scale)
        self._set_latent(latent, result)


    # --- prediction --------------------------------------------------------------------

    def _predictive_likelihood(self, mean, data):
        """The fitted likelihood with the per-observation data of the predictions at the
        latent ``mean`` (scalars only for a dask one: the same for every chunk).  Data the
        fit was given (not the constructor's likelihood) and the likelihood needs again
        (``predict_data``: a count model's exposure) must be given: a ValueError names it."""
        base = None if isinstance(self.likelihood, str) else self.likelihood
        for name in self.likelihood_.predict_data:
            own = getattr(base, name, None)           # _data keeps a scalar of it only
            if (data.get(name) is None and getattr(self._latent.likelihood, name) is not None
                    and (own is None or np.ndim(own) != 0)):
                raise ValueError(
                    f"this model was fitted with {name}= (per-observation data of its "
                    f"{type(self.likelihood_).__name__} likelihood); pass {name}= for the "
                    f"points to predict too, e.g. {name}=np.ones(len(X)) for a unit {name}.")
        if is_dask_array(mean):
            return self._data(self.likelihood_, 1, scalar_data(data))
        return self._data(self.likelihood_, mean.shape[0], data)

    def predict(self, X: ArrayLike, return_std: bool = False, **data: ArrayLike) -> ArrayOrStd:
        """Mean (and standard deviation) of y itself at X (``exposure=``, ``lower=``,
        ``upper=`` as in ``fit``; defaults: exposure 1, the likelihood's own limits).
        A dask X gives lazy dask arrays, computed chunk by chunk on the workers.

        A count model's mean is that of a log-normal rate, ``exposure exp(m + v / 2)``:
        where the latent variance v is large (far from the training inputs, where it
        returns to the prior's) the mean is dominated by it and a ``UserWarning`` says
        so; :meth:`predict_median` gives the rate's median, ``exposure exp(m)``.

        Parameters
        ----------
        X : array-like or dask array of shape (n_samples, n_features)
            Inputs to predict at; a dask array (of a sparse model, scalar data) gives
            lazy dask arrays.
        return_std : bool, default=False
            Also return the standard deviation of y.
        **data : scalar or array-like of shape (n_samples,)
            Per-observation data of the points, as in :meth:`fit`: ``exposure=``
            (default 1), ``trials=`` (default 1), ``lower=``, ``upper=`` (default: the
            likelihood's own limits).  Data that the fit was given per observation and
            the prediction needs (exposure, trials) must be given again.

        Returns
        -------
        mean : ndarray of shape (n_samples,)
            The predictive mean of y, in y's units.
        std : ndarray of shape (n_samples,)
            Its standard deviation (only with ``return_std=True``).
        """
        mean, std = self._latent_standardised(X)
        lik = self._predictive_likelihood(mean, data)
        a, b = self._y_shift, self._y_scale
        if is_dask_array(mean):
            if not return_std:
                return a + b * da_map_rows(_y_mean_block, mean, std, lik)
            both = da_map_rows(_y_moments_block, mean, std, lik, width=2)
            return a + b * both[:, 0], b * both[:, 1]
        if not return_std:      # E[y] alone: finite where only Var[y] would overflow
            out = a + b * _y_mean_block(mean, std, lik)
        else:
            mean_y, std_y = _y_moments_block(mean, std, lik).T
            out = a + b * mean_y, b * std_y
        if "exposure" in lik.data_names:   # (after the overflow errors, which come first)
            _warn_variance_dominated(std, type(self).__name__)
        return out

    def _latent_standardised(self, X):
        """Latent mean and sd at X in the units the model was fitted in (standardised y
        under ``normalize_y``)."""
        return super().predict_latent(X, return_std=True)

    def predict_survival(self, X: ArrayLike, times: ArrayLike) -> np.ndarray:
        """Survival curves ``S(t | x) = E[S(t | f)]`` (f over its posterior) of a survival
        likelihood at ``times``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Inputs to predict at (a NumPy array, not a dask one).
        times : float or array-like of shape (n_times,)
            Times (> 0) at which to evaluate every curve.

        Returns
        -------
        ndarray of shape (n_samples, n_times)
        """
        lik, mean, var = self._survival_moments(X, "predict_survival")
        return lik.survival_function(times, mean, var)

    def predict_hazard(self, X: ArrayLike, times: ArrayLike) -> np.ndarray:
        """Hazards ``h(t | x) = p(t | x) / S(t | x)`` of a survival likelihood at ``times``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Inputs to predict at (a NumPy array, not a dask one).
        times : float or array-like of shape (n_times,)
            Times (> 0) at which to evaluate every hazard.

        Returns
        -------
        ndarray of shape (n_samples, n_times)
        """
        lik, mean, var = self._survival_moments(X, "predict_hazard")
        return lik.hazard(times, mean, var)

    def predict_median(self, X: ArrayLike, **data: ArrayLike) -> np.ndarray:
        """Medians: of the survival time, where ``S(t | x) = 1/2``, for a survival
        likelihood; of the rate ``exposure exp(f)`` (f's median is its mean), for a count
        likelihood (``exposure=`` as in :meth:`predict`), a point prediction that stays
        steady where the mean is dominated by the latent variance (far from the data).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Inputs to predict at.
        **data : scalar or array-like of shape (n_samples,)
            ``exposure=`` of the points (count likelihoods), as in :meth:`predict`.

        Returns
        -------
        ndarray of shape (n_samples,)
        """
        check_is_fitted(self)
        if not ("exposure" in self.likelihood_.data_names
                or hasattr(self.likelihood_, "survival_function")):
            raise ValueError(f"predict_median needs a survival likelihood (likelihood="
                             f"'weibull', 'log_logistic' or 'log_normal') or a count "
                             f"likelihood ('poisson', 'negative_binomial' and their zero-"
                             f"inflated forms); this model's is "
                             f"{type(self.likelihood_).__name__}.")
        if "exposure" in self.likelihood_.data_names:
            mean, _ = self._latent_standardised(X)
            lik = self._predictive_likelihood(mean, data)
            exposure = lik.site_extra(np.shape(mean)[0])[:, 0]      # log exposure
            return np.exp(np.asarray(mean) + exposure)
        lik, mean, var = self._survival_moments(X, "predict_median")
        return lik.median(mean, var)

    def _survival_moments(self, X, what):
        """The fitted survival likelihood and the latent mean and variance at a NumPy X."""
        check_is_fitted(self)
        if not hasattr(self.likelihood_, "survival_function"):
            raise ValueError(f"{what} needs a survival likelihood (likelihood='weibull', "
                             f"'log_logistic' or 'log_normal'); this model's is "
                             f"{type(self.likelihood_).__name__}.")
        if is_dask_array(X):
            raise ValueError(f"{what} takes a NumPy X; compute the dask array first "
                             f"(X.compute()), or use predict_latent, which stays lazy.")
        mean, std = self._latent_standardised(X)
        return self.likelihood_, mean, std * std

    def predict_latent(self, X: ArrayLike, return_std: bool = False) -> ArrayOrStd:
        """Mean (and standard deviation) of the latent f at X, in y's units (see
        ``normalize_y``); lazy dask arrays for a dask X.

        Parameters
        ----------
        X : array-like or dask array of shape (n_samples, n_features)
            Inputs to predict at; a dask array needs a sparse model.
        return_std : bool, default=False
            Also return the standard deviation of f.

        Returns
        -------
        mean : ndarray of shape (n_samples,)
            Posterior mean of f.
        std : ndarray of shape (n_samples,)
            Posterior standard deviation of f (only with ``return_std=True``).
        """
        mean, std = self._latent_standardised(X)
        mean, std = self._y_shift + self._y_scale * mean, self._y_scale * std
        return (mean, std) if return_std else mean

    def score(self, X: ArrayLike, y: ArrayLike, sample_weight: Optional[ArrayLike] = None,
              **data: ArrayLike) -> float:
        """R^2 of :meth:`predict` (scikit-learn's ``RegressorMixin.score``), with the
        per-observation data of the points (``exposure=``, ``lower=``, ``upper=``) as in
        :meth:`predict`.  Count predictions can be finite but too large to square (far
        from the data, a log-normal rate); R^2 is then formed from scaled sums of squares,
        and a ``ValueError`` says when it lies below -1.8e308.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Test inputs.
        y : array-like of shape (n_samples,)
            True targets.
        sample_weight : array-like of shape (n_samples,), optional
            Weights of the points in R^2.
        **data : scalar or array-like of shape (n_samples,)
            Per-observation data of the points, as in :meth:`fit`: ``exposure=``
            (default 1), ``trials=`` (default 1), ``lower=``, ``upper=`` (default: the
            likelihood's own limits).  Data that the fit was given per observation and
            the prediction needs (exposure, trials) must be given again.

        Returns
        -------
        float
        """
        pred = self.predict(X, return_std=False, **data)
        if not (is_dask_array(pred) or is_dask_array(y)):
            pred, target = np.asarray(pred, float), np.asarray(y, float).ravel()
            if np.max(np.abs(pred), initial=0.0) > 1e100 and np.isfinite(target).all():
                return _r2_of_huge(target, pred, sample_weight)
        return r2_score(y, pred, sample_weight=sample_weight)

    def log_predictive_density(self, X: ArrayLike, y: ArrayLike, **data: ArrayLike) -> Array:
        """log p(y* | data) of observed targets y at X, one value per point (lazily, chunk
        by chunk, for a dask X).

        Parameters
        ----------
        X : array-like or dask array of shape (n_samples, n_features)
            Inputs of the observations; a dask array needs a sparse model and scalar data.
        y : array-like or dask array of shape (n_samples,)
            Observed targets, in y's units and the likelihood's terms.
        **data : scalar or array-like of shape (n_samples,)
            Per-observation data of the points, as in :meth:`fit` (``event=`` too).

        Returns
        -------
        ndarray of shape (n_samples,)
        """
        mean, std = self._latent_standardised(X)
        lik = self._predictive_likelihood(mean, data)
        y = self._standardise(y)
        jacobian = np.log(self._y_scale)              # p(y) = p(y') / scale
        if is_dask_array(mean):
            import dask.array as da
            if not is_dask_array(y):
                y = np.asarray(y)
                y = y[:, 0] if y.ndim == 2 and y.shape[1] == 1 else y
            if y.shape != mean.shape:
                raise ValueError(f"y must have one entry per row of X, shape {mean.shape}; "
                                 f"got shape {y.shape}.")
            blocks = y.rechunk(mean.chunks) if is_dask_array(y) else \
                da.from_array(y, chunks=mean.chunks)
            return da_map_rows(_log_density_block, mean, std, blocks, lik) - jacobian
        return _log_density_block(mean, std, y, lik) - jacobian

    def _standardise(self, y: ArrayLike) -> Array:
        """Targets in the units the model was fitted in (``normalize_y``)."""
        if self._y_shift == 0.0 and self._y_scale == 1.0:
            return y
        y = y if is_dask_array(y) else np.asarray(y, dtype=float)
        return (y - self._y_shift) / self._y_scale

    def _loo(self):
        mean, var = self._latent.loo_cavity(self.result_)
        return (self._latent.loo_log_density(mean, var) - np.log(self._y_scale),
                self._y_shift + self._y_scale * self.likelihood_.predict_mean(mean, var))


def _r2_of_huge(y, pred, sample_weight):
    """R^2 = 1 - SS_res / SS_tot (scikit-learn's, with its answers 1 and 0 when SS_tot
    = 0) for predictions whose squares overflow: each sum of squares is taken over
    residuals divided by their largest magnitude, and the ratio formed in logs."""
    if y.shape != pred.shape:
        raise ValueError(f"y must have one entry per row of X, shape {pred.shape}; got "
                         f"shape {y.shape}.")
    w = np.ones_like(y) if sample_weight is None else np.asarray(sample_weight, float)
    scale = np.max(np.abs(pred))
    res = y / scale - pred / scale                       # |res| <= 2 + |y| / scale
    dev = y - np.average(y, weights=w)

    def log_ss(r):                                       # log sum w r^2, r not all 0
        big = np.max(np.abs(r))
        return 2.0 * np.log(big) + np.log(np.sum(w * (r / big) ** 2))

    if not np.any(res):
        return 1.0
    if not np.any(dev):
        return 0.0
    log_ratio = np.log(scale) * 2.0 + log_ss(res) - log_ss(dev)
    if log_ratio > LOG_MAX:
        raise ValueError(f"R^2 of these predictions is below -1.8e308 (they reach "
                         f"{scale:.3g}, the targets {np.max(np.abs(y)):.3g}): far from "
                         f"the training inputs a count model's predictive mean grows as "
                         f"exp(latent variance / 2). Score on points near the data, or "
                         f"use log_predictive_density.")
    return float(1.0 - np.exp(log_ratio))


#: A count model's latent variance above which its predictive mean, exp(m + v / 2), is
#: dominated by the variance (the mean is e times the median or more).
VARIANCE_DOMINATED = 2.0


def _warn_variance_dominated(std, owner):
    """A ``UserWarning`` where a count model's latent variance at some points exceeds
    :data:`VARIANCE_DOMINATED` (sunspots, fitted on the first 70% of the years, predicted
    the last 30% at an RMSE of 401 against 53.5 for the training mean, without a word)."""
    var = np.asarray(std) ** 2
    far = int(np.count_nonzero(var > VARIANCE_DOMINATED))
    if far:
        warnings.warn(f"{owner}: at {far} of {var.size} points the latent variance exceeds "
                      f"{VARIANCE_DOMINATED:g} (up to {float(var.max()):.3g}; far from the "
                      f"training inputs it returns to the prior's), so the predicted mean of "
                      f"the counts, exposure * exp(mean + variance / 2), is dominated by that "
                      f"variance. predict_median(X) gives exposure * exp(mean), a steadier "
                      f"point prediction; predict_latent gives the latent mean and sd. For "
                      f"forecasts, a kernel with a level (ConstantKernel(c) + the kernel) "
                      f"returns to the counts' level instead of exp(0).",
                      UserWarning, stacklevel=2)


def _y_mean_block(mean, std, likelihood):
    """E[y] at latent moments (a chunk's)."""
    return likelihood.predict_mean(mean, std * std)


def _y_moments_block(mean, std, likelihood):
    """The predictive of y at latent moments (a chunk's): columns mean and std."""
    mean_y, var_y = likelihood.predict_y(mean, std * std)
    return np.column_stack([mean_y, np.sqrt(var_y)])


def _log_density_block(mean, std, y, likelihood):
    """log p(y | data) of one chunk: the tilted normaliser at the latent predictive."""
    return likelihood.log_predictive_density(likelihood.encode_targets(y), mean, std * std)
