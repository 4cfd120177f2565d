"""Sparse GP regression with inducing points: VFE (Titsias), FITC and Power EP (collapsed)."""
from __future__ import annotations

from typing import Optional
import dataclasses
from dataclasses import dataclass
from numbers import Real

import numpy as np
from sklearn.base import RegressorMixin
from sklearn.utils._param_validation import Interval
from sklearn.utils.validation import check_is_fitted

from ..typing import ArrayLike, ArrayOrStd, KernelLike, OptimizerLike, RandomStateLike
from .._linalg import blas_threads_for
from .._theta import ThetaEntry
from ..inference import collapsed
from ..inference.inducing import check_inducing
from ..kernels import kernel_from_dict
from ._base import (EvidenceMixin, FastepEstimator, FitData, fit_entry, latent_output,
                    shared)
from ._latent import inducing_bounds
from ._mlii import maximize_evidence
from ._problem import NamedTheta
from ._validation import validate_X, validate_X_y

NOISE_BOUNDS = (1e-6, 1e6)


@dataclass(frozen=True)
class CollapsedSparseGP(NamedTheta):
    """The collapsed Power-EP objective as an ML-II problem: ``theta`` = [log kernel
    parameters, log noise variance, inducing inputs (when they move)]."""

    X: np.ndarray
    y: np.ndarray
    kernel: object
    noise_variance: float
    Z: np.ndarray
    alpha: float
    optimize_inducing: bool = True

    @property
    def theta(self):
        parts = [self.kernel.theta, [np.log(self.noise_variance)]]
        return np.concatenate(parts + ([self.Z.ravel()] if self.optimize_inducing else []))

    @property
    def theta_entries(self):
        """ML-II's names of theta's entries: the kernel's, then the noise variance, whose
        bounds are fixed (:data:`NOISE_BOUNDS`)."""
        noise = ThetaEntry("noise_variance", "noise_variance=... of the estimator, or "
                           "rescale y; its bounds are fixed", "a fixed noise variance: "
                           "optimizer=None with noise_variance=...")
        return self.kernel.theta_entries() + [noise]

    @property
    def bounds(self):
        parts = [self.kernel.bounds, np.log([NOISE_BOUNDS])]
        if self.optimize_inducing:
            parts.append(inducing_bounds(self.X, self.Z.shape[0]))
        return np.vstack(parts)

    def with_theta(self, theta):
        theta = np.asarray(theta, dtype=float)
        nk = self.kernel.n_dims
        if theta.shape != self.theta.shape:
            raise ValueError(f"theta must have {self.theta.size} entries (log kernel "
                             f"parameters, log noise variance"
                             f"{', inducing inputs' * self.optimize_inducing}); got shape "
                             f"{theta.shape}.")
        changes = {"kernel": self.kernel.clone_with_theta(theta[:nk]),
                   "noise_variance": float(np.exp(theta[nk]))}
        if self.optimize_inducing:
            changes["Z"] = np.ascontiguousarray(theta[nk + 1:].reshape(self.Z.shape))
        return dataclasses.replace(self, **changes)

    def draw(self, rng):
        theta, bounds = self.theta, self.bounds
        nh = self.kernel.n_dims + 1
        theta[:nh] = rng.uniform(bounds[:nh, 0], bounds[:nh, 1])
        return theta

    def state(self, eval_gradient=False):
        k = self.kernel
        return collapsed.collapsed_objective(k(self.Z), k(self.Z, self.X), k.diag(self.X),
                                             self.y, self.noise_variance, self.alpha,
                                             eval_gradient)

    def evidence(self, sites=None, tol=None):
        """``(objective, gradient, state)``: exact (no sites, no EP tolerance)."""
        st = self.state(eval_gradient=True)
        d_theta, d_z = collapsed.kernel_gradient(self.kernel, self.Z, self.X, st.grad)
        parts = [d_theta, [self.noise_variance * st.grad.noise_variance]]
        return st.value, np.concatenate(parts + ([d_z.ravel()] if self.optimize_inducing
                                                 else [])), st


class SparseGPRegressor(EvidenceMixin, RegressorMixin, FastepEstimator):
    """Gaussian-process regression with m inducing points in O(n m^2) time, O(n m) memory.

    Maximises the collapsed Power-EP objective of Bui, Yan & Turner (2017) with power
    alpha (``power``; see :func:`fastep.inference.collapsed.collapsed_objective`): ``power=0``
    is Titsias' (2009) variational bound (VFE), ``power=1`` the FITC evidence.  The kernel,
    the noise variance and the inducing inputs are fitted by L-BFGS-B with analytic
    gradients.

    Parameters
    ----------
    kernel : kernel, default=None
        ``RBF()``; ML-II starts its lengthscale at the median distance between rows
        of X (with ``optimizer=None``: ``RBF()``); a fastep kernel.
    power : float in [0, 1], default=0.0
        The power alpha: 0 is VFE, 1 is FITC, in between Power EP (the same meaning as in
        the EP estimators, where a power towards 0 approaches VFE).
    noise_variance : float, default=1.0
        Initial (or, with ``optimizer=None``, fixed) Gaussian noise variance.
    n_inducing : int, optional
        Number of inducing points chosen by k-means++ on X (default ``min(100, n)``).
    inducing_points : (m, d) array, optional
        Initial inducing inputs; overrides ``n_inducing``.
    optimize_inducing : bool, default=True
        Whether ML-II also moves the inducing inputs.
    optimizer : "L-BFGS-B", a callable, or None, default="L-BFGS-B"
        ML-II of the kernel, noise variance and inducing inputs; None keeps them fixed.
    n_restarts_optimizer : int, default=0
        Restarts draw the kernel and noise parameters from their bounds; the
        inducing inputs restart from their initial positions.
    max_iter_optimizer : int, default=200
        Most L-BFGS-B iterations of ML-II (a ``ConvergenceWarning`` if they run out).
    tol_optimizer : float or None, default=None
        None: ML-II stops when the objective (the collapsed bound)
        gained less than 1e-5 nats per row of data over its last two steps (and the gain
        its curvature predicts is below that too), a precision that asks a large table
        for no change that moves a prediction.  A float asks for the exact optimum: a
        step that changes the objective by less than this (relative) or a projected
        gradient below ten times it ends ML-II (0.2's rule; 1e-6 was its default).
    random_state : int, RandomState, Generator or None, default=None
        Seeds the k-means++ choice of inducing points and the restarts.
    verbose : int, default=0
        Progress of the fit: 1 (or more) shows the ML-II steps (the objective is exact:
        no EP sweeps), as tqdm bars where tqdm is installed, else as lines on stderr
        (fastep's logger, which ``logging`` can also configure without this parameter).

    Attributes
    ----------
    kernel_ : kernel
        The fitted kernel.
    noise_variance_ : float
        The fitted noise variance.
    inducing_points_ : ndarray of shape (m, n_features)
        The fitted inducing inputs.
    log_marginal_likelihood_value_ : float
        The objective at the optimum.
    n_features_in_ : int

    See Also
    --------
    EPGaussianProcessRegressor : Non-Gaussian likelihoods, and inducing points with EP
        (``inducing_points=``, ``n_inducing=``).
    fastep.sparse_ep : Sparse Power EP as a function.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> X = rng.uniform(-3, 3, (500, 1))
    >>> y = np.sin(2 * X[:, 0]) + 0.1 * rng.normal(size=500)
    >>> reg = SparseGPRegressor(n_inducing=15, noise_variance=0.1, random_state=0).fit(X, y)
    >>> bool(reg.score(X, y) > 0.95)
    True
    """

    _parameter_constraints = shared(
        "verbose", "kernel", "optimizer", "n_restarts_optimizer", "max_iter_optimizer",
        "tol_optimizer", "n_inducing", "inducing_points",
        "optimize_inducing", "random_state",
        power=[Interval(Real, 0, 1, closed="both")],
        noise_variance=[Interval(Real, 0, None, closed="neither")])

    def __init__(self, kernel: Optional[KernelLike] = None, *, power: float = 0.0,
                 noise_variance: float = 1.0, n_inducing: Optional[int] = None,
                 inducing_points: Optional[ArrayLike] = None, optimize_inducing: bool = True,
                 optimizer: OptimizerLike = "L-BFGS-B", n_restarts_optimizer: int = 0,
                 max_iter_optimizer: int = 200, tol_optimizer: Optional[float] = None,
                 random_state: RandomStateLike = None,
                 verbose: int = 0) -> None:
        self.kernel = kernel
        self.power = power
        self.noise_variance = noise_variance
        self.n_inducing = n_inducing
        self.inducing_points = inducing_points
        self.optimize_inducing = optimize_inducing
        self.optimizer = optimizer
        self.n_restarts_optimizer = n_restarts_optimizer
        self.max_iter_optimizer = max_iter_optimizer
        self.tol_optimizer = tol_optimizer
        self.random_state = random_state
        self.verbose = verbose

    @fit_entry
    def fit(self, X: ArrayLike, y: ArrayLike) -> SparseGPRegressor:
        """Fit the kernel, noise variance and inducing inputs to (X, y).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Training inputs.
        y : array-like of shape (n_samples,)
            Real targets.

        Returns
        -------
        self
        """
        return self._fit(X, y)

    def _fit_data(self, X, y):
        X, y = validate_X_y(self, X, y, dtype=np.float64, y_numeric=True)
        return FitData(np.ascontiguousarray(X), np.asarray(y, dtype=float))

    def _fit_model(self, data, backend, rng):
        """The collapsed bound's maximum over kernel, noise and inducing inputs (no
        device: it runs on the CPU)."""
        X, y = data.X, data.y
        m = min(100, X.shape[0]) if self.n_inducing is None else self.n_inducing
        Z = check_inducing(X, m, self.inducing_points, rng)
        problem = CollapsedSparseGP(X, y, self._fresh_kernel(X),
                                    float(self.noise_variance), Z, float(self.power),
                                    bool(self.optimize_inducing))
        # the work is m^2 n flops, that of a dense Cholesky of size (m^2 n)^(1/3)
        with blas_threads_for(int(round((Z.shape[0] ** 2 * X.shape[0]) ** (1 / 3)))):
            if self.optimizer is not None:
                problem, _ = maximize_evidence(problem, self.optimizer,
                                               self.n_restarts_optimizer, rng,
                                               owner=type(self).__name__,
                                               max_iter=self.max_iter_optimizer,
                                               tol=self.tol_optimizer)
            self._set_fitted(problem, problem.state())

    def _set_fitted(self, problem, state):
        if not np.isfinite(state.value):
            raise ValueError(f"The collapsed objective is not finite at these data (|y| up to "
                             f"{float(np.max(np.abs(problem.y), initial=0.0)):.3g}, noise "
                             f"variance {problem.noise_variance:.3g}): rescale y.")
        self._problem = problem
        self.state_ = state
        self._set_model(problem.kernel, inducing_points=problem.Z, log_evidence=state.value)
        self.noise_variance_ = problem.noise_variance

    def _state(self):
        """Fitted state as header values and arrays (:func:`fastep.save_model`)."""
        p = self._problem
        return ({"kernel": p.kernel.to_dict(), "noise_variance": p.noise_variance},
                {"X": p.X, "y": p.y, "Z": p.Z})

    def _load_state(self, reader):
        """Inverse of :meth:`_state`: the objective's factors are recomputed exactly."""
        X = self._loaded_inputs(reader)
        n, d = X.shape
        y = reader.array("y", (n,))
        Z = reader.array("Z", (None, d))
        if not 1 <= Z.shape[0] <= n:
            raise ValueError(f"the array 'Z' must hold between 1 and {n} inducing inputs")
        noise = reader.value("noise_variance", float)
        if not noise > 0:
            raise ValueError(f"noise_variance must be positive; got {noise!r}")
        problem = CollapsedSparseGP(X, y, kernel_from_dict(reader.value("kernel", dict)), noise,
                                    Z, float(self.power), bool(self.optimize_inducing))
        self._set_fitted(problem, problem.state())

    def predict_latent(self, X: ArrayLike, return_std: bool = False) -> ArrayOrStd:
        """Mean (and standard deviation) of the latent f at X.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Inputs to predict at.
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
        X = validate_X(self, X, reset=False, dtype=np.float64)
        k = self.kernel_
        mean, var = collapsed.predict(self.state_, k(self.inducing_points_, X), k.diag(X))
        return latent_output(mean, var, return_std)

    def predict(self, X: ArrayLike, return_std: bool = False) -> ArrayOrStd:
        """Predictive mean (and standard deviation of the latent f, noise excluded, as in
        scikit-learn's GaussianProcessRegressor) at X: :meth:`predict_latent`.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Inputs to predict at.
        return_std : bool, default=False
            Also return the standard deviation of f (noise excluded).

        Returns
        -------
        mean : ndarray of shape (n_samples,)
            Predictive mean.
        std : ndarray of shape (n_samples,)
            Standard deviation of f (only with ``return_std=True``).
        """
        return self.predict_latent(X, return_std)

    def _evidence_problems(self):
        """The collapsed objective with the inducing inputs fixed at ``inducing_points_``
        (``theta = [log kernel params, log noise variance]``)."""
        return [dataclasses.replace(self._problem, optimize_inducing=False)]
