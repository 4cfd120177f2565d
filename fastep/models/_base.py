"""What every fastep estimator shares.

* **Declarative parameters.**  :data:`SHARED_PARAMETERS` holds the constraints of the
  parameters several estimators have; each estimator's ``_parameter_constraints`` picks
  from it, and scikit-learn's validation (run once, by ``_fit_context``, when ``fit``
  starts) gives every error in one voice: "The 'max_iter' parameter of
  EPGaussianProcessClassifier must be an int in the range [1, inf). Got 0 instead."
* **One meaning per name** (the user guide's "Choosing a model" page lists them).  For
  the EP estimators ``method``, ``damping``, ``tol`` and ``max_iter`` steer EP itself;
  ``optimizer`` and ``n_restarts_optimizer`` the type-II maximum likelihood (ML-II) of
  kernel, likelihood and inducing inputs; ``n_inducing``, ``inducing_points``,
  ``power`` and ``optimize_inducing`` sparse Power EP; ``device`` where it all runs.
* **All or nothing.**  Every ``fit`` is wrapped by :func:`fit_entry`: an exception
  (bad input, numerical trouble, Ctrl-C) leaves the estimator exactly as it was.
* **One fit recipe** (:meth:`FastepEstimator._fit`, which every estimator's ``fit``
  calls): the data checked and read (:meth:`~FastepEstimator._fit_data`), ``device``
  resolved once, the configuration checked (:meth:`~FastepEstimator._fit_config`: for
  the EP estimators an immutable :class:`~fastep.models._latent.EPConfig`), the random
  generator made, then the model fitted (:meth:`~FastepEstimator._fit_model`).
  :class:`EPEstimator`'s ``_fit_model`` is the EP recipe: the kernel and inducing inputs (:meth:`~EPEstimator._problem`), the latent problems the estimator
  makes from them (:meth:`~EPEstimator._problems`), each fitted with the one ML-II loop
  (:func:`~fastep.models._mlii.fit_theta`), and the fitted attributes set from the
  fitted problems (:meth:`~EPEstimator._set_fits`).  An estimator supplies only those
  hooks; the EP estimators keep their problems and EP results for prediction and for
  :func:`fastep.save_model`.

Over 450 lines: one job, what every estimator shares: the parameter table, the fit
recipe and its hooks, the EP recipe, LOO and the evidence at another theta.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple, Union
import dataclasses
import copy
import functools
import logging
import warnings
from numbers import Integral, Real

import numpy as np
from sklearn.base import BaseEstimator, _fit_context, clone
from sklearn.utils.validation import check_is_fitted
from sklearn.gaussian_process.kernels import Kernel as SklearnKernelBase
from sklearn.utils._param_validation import Interval, StrOptions

from ..typing import Array, ArrayLike, ArrayOrStd
from .._dask import is_dask_array
from .._caller import user_stacklevel
from .._progress import FitProgress
from ..kernels import RBF, Kernel, Matern32, as_kernel
from ..backend import resolve
from ..inference.inducing import AUTO_DENSE_ROWS, check_inducing, inducing_count
from ..likelihoods import check_power
from ..priors import hyperprior_terms
from ._dask import DaskInputs, dask_sample
from ._jobs import JOBS_MIN_ROWS, _fit_one, _with_posterior, in_process, run_jobs
from ._latent import EPConfig, LatentGP, MarkovGP
from ._mlii import at_bounds, fit_theta

_LOG = logging.getLogger("fastep")


def fit_rows(X):
    """The row count ``n_inducing="auto"`` reads: X's, or inf for a dask X."""
    return float("inf") if is_dask_array(X) else X.shape[0]


def fit_entry(fit):
    """Decorate an estimator's ``fit``: scikit-learn's parameter validation (once), and
    all-or-nothing state, so that an exception during the fit (a bad input, numerical
    trouble, KeyboardInterrupt) leaves the estimator as it was before the call."""
    validated = _fit_context(prefer_skip_nested_validation=True)(fit)

    @functools.wraps(fit)
    def wrapper(self, *args, **kwargs):
        before = dict(self.__dict__)
        verbose = getattr(self, "verbose", 0)
        level = int(verbose) if isinstance(verbose, Integral) else 0
        try:
            with FitProgress(level):
                return validated(self, *args, **kwargs)
        except BaseException:
            self.__dict__.clear()
            self.__dict__.update(before)
            raise
    return wrapper


#: Constraints of the parameters that several estimators share (one meaning each).
SHARED_PARAMETERS = {
    "kernel": [None, Kernel, SklearnKernelBase],
    "method": [StrOptions({"auto", "parallel", "sequential"})],
    "damping": [Interval(Real, 0, 1, closed="right"), None],
    "tol": [Interval(Real, 0, None, closed="neither")],
    "max_iter": [Interval(Integral, 1, None, closed="left")],
    "optimizer": [StrOptions({"L-BFGS-B"}), callable, None],
    "n_restarts_optimizer": [Interval(Integral, 0, None, closed="left")],
    "max_iter_optimizer": [Interval(Integral, 1, None, closed="left")],
    "tol_optimizer": [Interval(Real, 0, None, closed="neither"), None],
    "n_inducing": [Interval(Integral, 1, None, closed="left"), StrOptions({"auto"}), None],
    "inducing_points": ["array-like", None],
    "power": [Interval(Real, 0, 1, closed="right")],
    "optimize_inducing": ["boolean"],
    "random_state": ["random_state", np.random.Generator],
    "device": [StrOptions({"cpu", "cuda"})],
    "hyperprior": [None, StrOptions({"auto"}), dict],
    "verbose": [Interval(Integral, 0, None, closed="left"), "boolean"],
    "n_jobs": [Interval(Integral, None, -1, closed="right"),
               Interval(Integral, 1, None, closed="left"), None],
}


def shared(*names, **more):
    """``_parameter_constraints`` from the shared table plus estimator-specific ones."""
    out = {name: SHARED_PARAMETERS[name] for name in names}
    out.update(more)
    return out


def as_generator(random_state):
    """A NumPy Generator from what scikit-learn accepts as ``random_state`` (None, an int,
    a RandomState) or a Generator (used as it is)."""
    if isinstance(random_state, np.random.Generator):
        return random_state
    if isinstance(random_state, np.random.RandomState):
        return np.random.default_rng(random_state.randint(np.iinfo(np.int32).max))
    return np.random.default_rng(random_state)


def median_heuristic(X, rng=None, max_points=500):
    """Median pairwise Euclidean distance between distinct rows of X (the median
    heuristic for a lengthscale), from at most ``max_points`` rows: drawn with ``rng``, or
    evenly spaced without one (the rows of a dask X computed); 1 where no two rows differ."""
    n = X.shape[0]
    if n > max_points:
        idx = (rng.choice(n, max_points, replace=False) if rng is not None else
               np.unique(np.linspace(0, n - 1, max_points).astype(int)))
        X = X[idx]
    X = np.asarray(X.compute() if is_dask_array(X) else X, dtype=float)
    sq = np.einsum("ij,ij->i", X, X)
    d2 = sq[:, None] + sq[None, :] - 2.0 * X @ X.T
    d = np.sqrt(np.maximum(d2[np.triu_indices(X.shape[0], 1)], 0.0))
    d = d[d > 0]
    return float(np.median(d)) if d.size else 1.0


def fresh_kernel(kernel, X=None):
    """A private copy of the ``kernel`` parameter.  None: ``RBF()``, and where ML-II will
    learn it from the training inputs ``X``, ``RBF(1, median distance between rows of
    X)`` (:func:`median_heuristic`, clipped to the lengthscale's bounds): ML-II then starts at
    the data's scale.  From ``RBF(1, 1)`` on scikit-learn's digits (64 standardised
    features, median distance 9.8) the kernel is nearly diagonal, and ML-II spent its
    first steps finding the scale (``scripts/fit_time.py``: 141 evaluations against 132
    over the ten one-vs-rest problems, to the same held-out log loss)."""
    if kernel is None and X is not None:
        lo, hi = np.exp(RBF().bounds[1])
        return RBF(1.0, float(np.clip(median_heuristic(X), lo, hi)))
    return copy.deepcopy(as_kernel(RBF() if kernel is None else kernel))


def latent_output(mean: Array, var: Array, return_std: bool) -> ArrayOrStd:
    """``mean`` or ``(mean, std)``: the return convention of every ``predict_latent``."""
    return (mean, np.sqrt(var)) if return_std else mean


@dataclasses.dataclass
class FitData:
    """What :meth:`FastepEstimator._fit_data` read from a fit's inputs.

    ``X``, ``y``: the checked training data (a dask X stays lazy); ``likelihood``: the
    likelihood the EP configuration checks (power, schedule), None where it does not
    check one; ``rows``: the row count ``n_inducing="auto"`` reads (None: X's,
    :func:`fit_rows`); ``found``: what else the estimator read from the data and sets as
    fitted attributes (classes, limits, annotator labels)."""

    X: Any
    y: Any
    likelihood: Any = None
    rows: Optional[float] = None
    found: Dict[str, Any] = dataclasses.field(default_factory=dict)


class FastepEstimator(BaseEstimator):
    """The base of all eight estimators: scikit-learn's conventions (parameters in
    ``__init__``, checked once by :func:`fit_entry`), the one fit recipe (:meth:`_fit`)
    and the fitted attributes they all have, set in one place (:meth:`_set_model`), in
    ``fit`` and when a model is loaded."""

    #: ``resolve``'s ``dense_algebra``: whether the device must run dense factorisations
    _dense_algebra = True

    def _fit(self, X, y, **data):
        """The fit every estimator's ``fit`` runs: the inputs checked and read
        (:meth:`_fit_data`), ``device`` resolved once (before any work, so that a missing
        GPU is reported before the fit starts), the configuration checked
        (:meth:`_fit_config`), a NumPy Generator from ``random_state`` (after every check,
        so that a fit refused leaves a user's RandomState untouched), then
        :meth:`_fit_model`.  Returns self."""
        fit_data = self._fit_data(X, y, **data)
        device = getattr(self, "device", None)          # the collapsed regressor has none
        backend = (None if device is None else
                   resolve(device, type(self).__name__, dense_algebra=self._dense_algebra))
        config = self._fit_config(fit_data, backend)
        self._fit_model(fit_data, config, as_generator(self.random_state))
        return self

    def _fit_data(self, X, y, **data) -> FitData:
        """Check a fit's inputs and read from them what the fit needs (a hook)."""
        raise NotImplementedError

    def _fit_config(self, data: FitData, backend):
        """The configuration :meth:`_fit_model` runs with, checked: here the backend (None
        for an estimator without ``device``); the EP estimators' immutable EP
        configuration."""
        return backend

    def _fit_model(self, data: FitData, config, rng) -> None:
        """Fit the model to checked data with the configuration of :meth:`_fit_config`
        and set the fitted attributes (a hook)."""
        raise NotImplementedError

    def _fresh_kernel(self, X):
        """:func:`fresh_kernel` of the ``kernel`` parameter for a fit on X: the default
        kernel starts at X's scale where ML-II learns it (``optimizer`` set)."""
        learnt = getattr(self, "optimizer", None) is not None
        return fresh_kernel(self.kernel, X if learnt else None)

    def _loaded_inputs(self, reader):
        """The saved training inputs X (n, d) of a model being loaded (a
        :class:`~fastep.models._state.StateReader`), ``n_features_in_`` set from them."""
        X = reader.array("X", (None, None))
        self.n_features_in_ = X.shape[1]
        return X

    def _set_model(self, kernel, likelihood=None, inducing_points=None, log_evidence=None,
                   n_iter=None, converged=None):
        """``kernel_``, ``likelihood_``, ``inducing_points_`` (None: a dense model, which
        has none, also after refitting a sparse one), ``log_marginal_likelihood_value_``
        (where the model has an evidence), ``n_iter_`` and ``converged_``; an argument left
        None (other than ``inducing_points``) sets nothing."""
        self.kernel_ = kernel
        if likelihood is not None:
            self.likelihood_ = likelihood
        if inducing_points is not None:
            self.inducing_points_ = inducing_points
        else:
            self.__dict__.pop("inducing_points_", None)
        if log_evidence is not None:
            self.log_marginal_likelihood_value_ = float(log_evidence)
        if n_iter is not None:
            self.n_iter_ = int(n_iter)
        if converged is not None:
            self.converged_ = bool(converged)


class EvidenceMixin:
    """``log_marginal_likelihood(theta, eval_gradient)`` of every estimator with an
    evidence, written once over the fitted problems that :meth:`_evidence_problems` gives
    (one per latent GP; their ``with_theta(theta).evidence()``)."""

    log_marginal_likelihood_value_: float

    def _evidence_problems(self):
        """The fitted problems whose evidence is averaged."""
        return [self._latent]

    def log_marginal_likelihood(self, theta: Optional[ArrayLike] = None,
                                eval_gradient: bool = False
                                ) -> Union[float, Tuple[float, np.ndarray]]:
        """Approximate log evidence at ``theta``, averaged over the fitted problems
        (one-vs-rest: the classes'); optionally with its gradient (for EP exact at the
        fixed point: ``1/2 tr((b b^T - R) dK/dtheta)`` plus the likelihood's terms).

        Parameters
        ----------
        theta : array-like of shape (n_params,) or None, default=None
            Where to evaluate it, in the fitted problems' order: the log kernel
            parameters (``kernel_.theta``), the likelihood's parameters
            (``likelihood_.theta``), then the inducing inputs where ML-II moves them
            (``optimize_inducing``).  :class:`~fastep.SparseGPRegressor`: the log kernel
            parameters and the log noise variance, the inducing inputs held at
            ``inducing_points_``; :class:`~fastep.NestedEPClassifier`: the log kernel
            parameters.  None gives ``log_marginal_likelihood_value_``, as
            scikit-learn's Gaussian-process estimators do.
        eval_gradient : bool, default=False
            Also return the gradient with respect to ``theta`` (needs a ``theta``).

        Returns
        -------
        log_likelihood : float
            The approximate log evidence (mean over the problems).
        log_likelihood_gradient : ndarray of shape (n_params,)
            Its gradient at ``theta`` (only with ``eval_gradient=True``).
        """
        check_is_fitted(self)
        if theta is None:
            if eval_gradient:
                raise ValueError("Gradient can only be evaluated for theta!=None")
            return self.log_marginal_likelihood_value_
        vals = [p.with_theta(theta).evidence() for p in self._evidence_problems()]
        value = float(np.mean([v[0] for v in vals]))
        return (value, np.mean([v[1] for v in vals], axis=0)) if eval_gradient else value


class EPEstimator(EvidenceMixin, DaskInputs, FastepEstimator):
    """Base of the estimators that run EP on latent GPs (see the module docstring)."""

    def _problem(self, X, rng):
        """``(problem class, kernel, inducing inputs)`` of a fit on X: state-space EP
        (:class:`~fastep.models._latent.MarkovGP`) where ``inference="markov"`` (X a
        column of times, and optionally a second of series ids, in memory; the kernel
        parameter or ``Matern32`` with the median distance between the times as
        lengthscale, as the RBF default; no inducing inputs), else dense or sparse EP."""
        if getattr(self, "inference", "ep") != "markov":
            Z = self._inducing_inputs(X, rng)
            if Z is not None and X.shape[1] == 1 and self.n_inducing == "auto" \
                    and self.inducing_points is None and hasattr(self, "inference"):
                warnings.warn(f"{type(self).__name__}: X is one column of {X.shape[0]} "
                              f"rows, so the default fit is sparse EP with {Z.shape[0]} "
                              f"inducing points; inference='markov' (state-space EP, with "
                              f"a Matern kernel of that column, e.g. time) is exact in "
                              f"O(n). Set n_inducing to keep sparse EP without this "
                              f"warning.", UserWarning, stacklevel=user_stacklevel())
            return LatentGP, self._fresh_kernel(X), Z
        if is_dask_array(X):
            raise ValueError("inference='markov' runs in memory (O(n)): X must be a NumPy "
                             "array of times, not a dask array.")
        if X.shape[1] not in (1, 2):
            raise ValueError(f"inference='markov' models one input, time: X must have one "
                             f"column (times) or two (times, then a series id); got "
                             f"{X.shape[1]}. Use inference='ep' for several inputs.")
        ignored = []
        if getattr(self, "n_inducing", None) not in ("auto", None):
            ignored.append(f"n_inducing={self.n_inducing!r}")
        if getattr(self, "inducing_points", None) is not None:
            ignored.append("inducing_points")
        if getattr(self, "power", 1.0) != 1.0:
            ignored.append(f"power={self.power!r}")
        if ignored:
            raise ValueError(f"inference='markov' runs full EP on every time, without "
                             f"inducing points or a power below 1; got {', '.join(ignored)}. "
                             f"Leave them at their defaults, or use inference='ep'.")
        if X.shape[1] == 2:
            n_series = np.unique(X[:, 1]).size
            if n_series > X.shape[0] // 2:
                warnings.warn(f"{type(self).__name__}: inference='markov' reads X's second "
                              f"column as series ids, and it holds {n_series} ids for "
                              f"{X.shape[0]} rows: most series have one row, which the "
                              f"model cannot link to any other. If that column is a "
                              f"feature, use inference='ep'.", UserWarning,
                              stacklevel=user_stacklevel())
        if self.kernel is not None:
            return MarkovGP, self._fresh_kernel(X), None
        scale = median_heuristic(X[:, :1])
        return MarkovGP, Matern32(1.0, float(np.clip(scale, 1e-5, 1e5))), None

    #: what ``method="auto"`` means for dense EP (a :func:`fastep.ep` method)
    _dense_auto = "parallel"

    def _sparse_for(self, n):
        """Whether a fit of n rows runs sparse EP (None: not known, a loaded model)."""
        if self.inducing_points is not None:
            return True
        if n is None and self.n_inducing == "auto":
            return None
        return inducing_count(self.n_inducing, n) is not None

    def _ep_config(self, backend, likelihood=None, n=None):
        """The immutable EP configuration of this fit (in ``fit`` and when loading); checks
        the parameters that only make sense together (sparse EP with its power; the
        schedule, "auto" resolved: ``_dense_auto`` for dense EP (:func:`fastep.ep`'s
        "auto" is parallel sweeps that go on sequentially if they stall), chunk-sequential
        sparse EP; dense EP for a ``likelihood`` that is not log-concave is robust EP's
        sequential schedule where the backend runs it).  ``n``: the fit's rows, which
        ``n_inducing="auto"`` reads (None when loading: the fit checked the power)."""
        cls = type(self).__name__
        sparse = self._sparse_for(n)
        if sparse is False and self.power != 1.0:
            raise ValueError(f"The 'power' parameter of {cls} is the power of sparse Power EP "
                             f"and needs inducing points; dense EP has power 1. Got "
                             f"power={self.power!r} without n_inducing or inducing_points: set "
                             f"one of them, or power=1.0.")
        if likelihood is not None:
            check_power(likelihood, self.power, "power")
        method = self.method
        if method == "auto":
            robust = likelihood is not None and not likelihood.log_concave
            method = ("sequential" if sparse or (robust and "sequential" in backend.ep_methods)
                      else self._dense_auto)
        if not sparse and method != "auto" and method not in backend.ep_methods:
            raise ValueError(f"{cls} with device={backend.name!r} runs "
                             f"{' or '.join(backend.ep_methods)} dense EP only; set "
                             f"method='parallel' (got {self.method!r}), or device='cpu'.")
        return EPConfig(backend=backend, method=method, damping=self.damping, tol=self.tol,
                        max_iter=self.max_iter, power=float(self.power),
                        optimize_inducing=bool(self.optimize_inducing))

    def _inducing_inputs(self, X, rng):
        """The starting inducing inputs (``inducing_points``, or k-means++ on X; on a
        random sample of :data:`~fastep.models._dask.DASK_SAMPLE` rows of a dask X), or None
        for dense EP."""
        m = inducing_count(self.n_inducing, fit_rows(X))
        if m is None and self.inducing_points is None:
            return None
        if self.n_inducing == "auto" and self.inducing_points is None:
            m = min(m, max(1, X.shape[0] // 2))      # a dask X of few rows
            _LOG.info("%s: n_inducing='auto' on %d rows: sparse EP with %d inducing points "
                      "(dense up to %d rows; set n_inducing to choose)", type(self).__name__,
                      X.shape[0], m, AUTO_DENSE_ROWS)
        if is_dask_array(X):
            X = dask_sample(X, m or 0, rng)
        return check_inducing(X, m, self.inducing_points, rng)

    def loo_log_predictive_density(self) -> np.ndarray:
        """Leave-one-out log predictive density of every training point, from EP's
        cavities at the fixed point, without refitting: ``log p(y_i | y_(-i)) ~ log int
        p(y_i | f) q_(-i)(f) df``, where the cavity ``q_(-i)`` (the posterior without site
        i) is EP's approximation of ``p(f_i | y_(-i))`` (Opper & Winther 2000; GPstuff's
        ``gp_loopred``).  Sparse EP removes the whole site from its marginal.

        Returns
        -------
        ndarray of shape (n_samples,)

        Examples
        --------
        >>> import numpy as np
        >>> from fastep import EPGaussianProcessClassifier
        >>> X = np.linspace(-2, 2, 30)[:, None]; y = (X[:, 0] > 0).astype(int)
        >>> clf = EPGaussianProcessClassifier(optimizer=None).fit(X, y)
        >>> lpd = clf.loo_log_predictive_density()
        >>> lpd.shape, bool(np.all(lpd < 0))
        ((30,), True)
        """
        check_is_fitted(self)
        return self._loo()[0]

    def loo_predict(self) -> np.ndarray:
        """Leave-one-out predictions of the training points from EP's cavities (see
        :meth:`loo_log_predictive_density`), in the form ``predict`` gives: labels for a
        classifier, the mean of y for a regressor.

        Returns
        -------
        ndarray of shape (n_samples,)
        """
        check_is_fitted(self)
        return self._loo()[1]

    def _loo(self):
        """(LOO log predictive densities, LOO predictions) of the training points (a hook
        of each estimator that offers leave-one-out)."""
        raise NotImplementedError(f"{type(self).__name__} does not implement leave-one-out "
                                  f"predictions (its _loo hook).")

    def _fit_config(self, data, backend):
        """The EP configuration of this fit (:meth:`_ep_config`), from the likelihood and
        row count the data gave."""
        return self._ep_config(backend, data.likelihood,
                               n=fit_rows(data.X) if data.rows is None else data.rows)

    def _fit_model(self, data, config, rng):
        """The EP recipe (see the module docstring): the kernel and inducing inputs, the
        estimator's latent problems, each fitted (:meth:`_fit_problems`), then the fitted
        attributes (:meth:`_set_fits`)."""
        X = data.X if is_dask_array(data.X) else np.ascontiguousarray(data.X)
        problem, kernel, Z = self._problem(X, rng)

        def make(y, likelihood, own_kernel=False):
            """One latent problem of this fit: its targets and likelihood (``own_kernel``:
            on a copy of the starting kernel, not the one the fit's problems share)."""
            return problem(X, y, copy.deepcopy(kernel) if own_kernel else kernel,
                           likelihood, config, Z)

        self._set_fits(data, self._fit_problems(make, data, rng))

    def _fit_problems(self, make, data, rng):
        """Make this fit's latent problems and fit them (ML-II and the final EP run):
        ``[(latent, result), ...]`` from :meth:`_problems`, by :meth:`_fit_latents`.  An
        estimator whose fit is more than that (several starts; EM) overrides this."""
        return self._fit_latents(self._problems(make, data), rng)

    def _problems(self, make, data) -> List[Any]:
        """The latent problems of a fit, each ``make(y, likelihood)`` (a hook)."""
        raise NotImplementedError

    def _set_fits(self, data, fits) -> None:
        """The fitted attributes from the fitted problems (a hook)."""
        raise NotImplementedError

    def _loaded_config(self, likelihood=None):
        """The EP configuration of a model being loaded (on the CPU, the device it was
        fitted on aside: a saved model predicts on any machine)."""
        return self._ep_config(resolve("cpu"), likelihood)

    def _fit_latent(self, latent, rng, sites=None):
        """ML-II (MAP-II with ``hyperprior``; when ``optimizer`` is set) and the final EP
        run at the configured tolerance: ``(latent, result)``."""
        owner = type(self).__name__
        # checked on every fit (also one without ML-II, which save_model must describe)
        prior = hyperprior_terms(getattr(self, "hyperprior", None), latent.theta_names,
                                 latent.theta.size, owner)
        if self.optimizer is not None and latent.theta.size:
            latent.check_memory()
            # no stages where ML-II moves the inducing inputs: theta is then large (m x d
            # entries) and its optimum one of many local ones, which the stages would change
            latent, sites = fit_theta(
                latent, self.optimizer, self.n_restarts_optimizer, rng, sites, owner,
                self.max_iter_optimizer, self.tol_optimizer, prior,
                stages=latent.subsample_stages and not (latent.sparse
                                                        and latent.config.optimize_inducing))
        # outside reuse(): the posterior kept is the one load_model rebuilds, to the bit
        return latent, latent.run(sites)

    def _fit_latents(self, latents, rng):
        """Fit independent problems (one-vs-rest): the first from the given parameters,
        the others starting ML-II from the first's fitted ones (the classes of one table
        share their scales; this halves their L-BFGS-B steps), ``n_jobs`` at a time in
        worker processes, each with BLAS and Numba capped at its share of the cores
        (in this process below ``JOBS_MIN_ROWS`` rows).  Returns ``[(latent, result),
        ...]`` in the order given."""
        first = self._fit_latent(latents[0], rng)
        rest = latents[1:]
        if not rest:
            return [first]
        if self.optimizer is not None and first[0].theta.size:
            # a parameter the first problem left at a bound (a flat evidence) starts
            # where it was given: from a plateau L-BFGS-B would not move
            theta = first[0].theta
            at_lo, at_hi = at_bounds(theta, first[0].bounds)
            rest = [latent.with_theta(np.where(at_lo | at_hi, latent.theta, theta))
                    for latent in rest]
        seeds = rng.integers(2 ** 63, size=len(rest))
        worker = clone(self)                     # the parameters, none of the fitted state
        local = (rest[0].X.shape[0] < JOBS_MIN_ROWS or is_dask_array(rest[0].X)
                 or rest[0].config.backend.name != "cpu")
        n_jobs = getattr(self, "n_jobs", None)
        strip = not in_process(n_jobs, len(rest), local)    # results sent between processes
        fits = run_jobs(_fit_one, [(worker, latent, seed, strip)
                                   for latent, seed in zip(rest, seeds)], n_jobs, local=local)
        return [first] + [(latent, _with_posterior(latent, result)) for latent, result in fits]


class SingleLatentEstimator(EPEstimator):
    """An EP estimator of one latent GP (``self._latent``, its final result ``result_``):
    the fitted attributes, the evidence at another theta and the latent predictive they
    share."""

    def _set_latent(self, latent, result):
        """The fitted attributes every single-latent estimator has."""
        self._latent = latent
        self.result_ = result
        self._set_model(latent.kernel, latent.likelihood, latent.Z,
                        result.log_marginal_likelihood, result.n_iter, result.converged)

    def predict_latent(self, X: ArrayLike, return_std: bool = False) -> ArrayOrStd:
        """Mean (and standard deviation) of the latent f at X (lazy dask arrays, computed
        chunk by chunk on the workers, for a dask X).

        Parameters
        ----------
        X : array-like or dask array of shape (n_samples, n_features)
            Inputs to predict at; a dask array needs a sparse model (fitted with
            inducing points).
        return_std : bool, default=False
            Also return the standard deviation of f.

        Returns
        -------
        mean : ndarray of shape (n_samples,)
            Posterior mean of f.
        std : ndarray of shape (n_samples,)
            Posterior standard deviation of f (only with ``return_std=True``).
        """
        check_is_fitted(self)
        X = self._predict_inputs(X)
        mean, var = self._latent.latent(self.result_, X)
        return latent_output(mean, var, return_std)
