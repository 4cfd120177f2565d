"""The likelihood contract: the base class and the batch loop of the host's tilted moments
that its :meth:`Likelihood.tilted` runs (the user's own likelihood from a log-density is
:mod:`fastep.likelihoods.custom`).

A likelihood supplies one scalar compiled function, its public attribute
:attr:`Likelihood.scalar_tilted`, with the signature :data:`fastep._jit.TILTED_SIG`::

    scalar_tilted(y, extra, mu_cav, var_cav, alpha, params) -> (log_Z, dlogZ_dmu, d2logZ_dmu2)

with ``Z = int p(y | f)^alpha N(f | mu_cav, var_cav) df``.  The EP engine turns
these three numbers into site updates in one place
(:func:`fastep._sites.site_from_derivatives`); every backend compiles the same function
for its target (the CUDA backend as a device function), so a likelihood knows nothing
of devices or of inference.

Likelihoods without a closed form are integrated by the quadrature of
:mod:`fastep.likelihoods._quadrature` (a mode-centred trapezoid rule, adaptive panels where
it declines).

Over 450 lines: one job, the likelihood contract: the base class's documented interface
and the host's batch loop of tilted moments it runs.
"""
from __future__ import annotations

import copy
import math
import numbers
import warnings
from typing import Any, Dict, Optional, Tuple, Union

import numpy as np
from numpy.typing import ArrayLike
from numba import prange, types

from .._checks import TARGETS_FIX, all_finite, float_array, parameter_bounds
from .._jit import TiltedFn, f8, f8_1d, pjit
from .._numerics import MIN_VARIANCE
from .._theta import ThetaEntry, entries_of


@pjit(types.void(TiltedFn, f8_1d, f8[:, ::1], f8_1d, f8_1d, f8, f8_1d, f8_1d, f8_1d, f8_1d))
def tilted_batch(tilted, y, extra, mu, var, alpha, params, log_z, d1, d2):
    """Apply a scalar tilted function to every site (each iteration owns index i).

    Examples
    --------
    >>> import numpy as np
    >>> from fastep.likelihoods import Probit
    >>> out = np.empty((3, 2))
    >>> tilted_batch(Probit.scalar_tilted, np.ones(2), np.zeros((2, 0)), np.zeros(2),
    ...              np.ones(2), 1.0, np.zeros(0), out[0], out[1], out[2])
    >>> bool(np.allclose(np.exp(out[0]), 0.5))
    True
    """
    for i in prange(y.shape[0]):
        a, b, c = tilted(y[i], extra[i], mu[i], var[i], alpha, params)
        log_z[i] = a
        d1[i] = b
        d2[i] = c


def check_likelihood(likelihood):
    """Raise a clear error for what is not a likelihood object (a name, a class, None) or a
    likelihood without the scalar tilted function."""
    fix = ("(the estimators take names such as likelihood='probit'; the inference "
           "functions take likelihood objects).")
    if isinstance(likelihood, str):
        name = "".join(part.capitalize() for part in likelihood.split("_"))
        example = name if name in _subclass_names(Likelihood) else "Probit"
        raise ValueError(f"likelihood must be a fastep.likelihoods.Likelihood instance; got "
                         f"the string {likelihood!r}. Pass an instance, e.g. "
                         f"fastep.likelihoods.{example}() {fix}")
    if isinstance(likelihood, type):
        raise ValueError(f"likelihood must be a fastep.likelihoods.Likelihood instance; got "
                         f"the class {likelihood.__name__}. Pass an instance: "
                         f"{likelihood.__name__}() {fix}")
    if not hasattr(likelihood, "encode_targets"):
        raise ValueError(f"likelihood must be a fastep.likelihoods.Likelihood instance; got "
                         f"{type(likelihood).__name__} {likelihood!r:.60}. Pass e.g. "
                         f"fastep.likelihoods.Probit() {fix}")
    if getattr(likelihood, "scalar_tilted", None) is None:
        raise ValueError(f"{type(likelihood).__name__} defines no scalar_tilted function, the "
                         "contract between a likelihood and EP (see "
                         "fastep.likelihoods.Likelihood).  Wrap a scalar log-density in "
                         "fastep.likelihoods.CustomLikelihood, or set scalar_tilted to a "
                         "function compiled with fastep._jit.tilted_function.")


def _subclass_names(cls):
    """The names of ``cls``'s subclasses, at any depth."""
    names = set()
    for sub in cls.__subclasses__():
        names |= {sub.__name__} | _subclass_names(sub)
    return names


def check_power(likelihood: Any, alpha: float, name: str = "alpha") -> None:
    """Raise a ValueError if ``likelihood`` cannot run Power EP at ``alpha`` != 1 (its
    :attr:`Likelihood.power_ep` is False), naming the parameter ``name``."""
    if alpha != 1.0 and not getattr(likelihood, "power_ep", True):
        raise ValueError(f"{type(likelihood).__name__} runs EP at power 1 only: at a power "
                         f"below 1 (Power EP) its tilted moments would come from a quadrature "
                         f"that can step over the likelihood's gentle fall at y = 0 (errors up "
                         f"to 1e-2). Got {name}={alpha!r}; use {name}=1.0.")


def _broadcast(value, n, name):
    """``value`` (a scalar or n values) as an array of n values."""
    try:
        return np.broadcast_to(np.asarray(value), (n,))
    except ValueError:
        raise ValueError(f"{name} must be a scalar or have one entry per site ({n}); got "
                         f"shape {np.shape(value)}.") from None


def _warn_legacy_tilted(owner, stacklevel):
    warnings.warn(f"{owner} uses _tilted, the name of fastep < 0.2; the scalar tilted "
                  "function is now the public attribute scalar_tilted.", DeprecationWarning,
                  stacklevel=stacklevel)


class Likelihood:
    """Base class of EP likelihoods.

    Attributes
    ----------
    scalar_tilted : compiled function
        ``scalar_tilted(y, extra, mu_cav, var_cav, alpha, params) -> (log Z, dlogZ/dmu,
        d2logZ/dmu2)`` for one site, ``Z = int p(y | f)^alpha N(f | mu_cav, var_cav) df``
        (compiled with :func:`fastep._jit.tilted_function`, ``math`` only): the contract
        between a likelihood and every EP algorithm and backend.
    param_names : tuple of str
        Positive parameters, optimised in log space (``theta``).
    log_concave : bool
        Whether ``log p(y | f)`` is concave in f (then site precisions are clipped at 0).
    binary : bool
        Whether targets are labels in {-1, +1}.

    Examples
    --------
    >>> import numpy as np
    >>> from fastep.likelihoods import Probit
    >>> log_z, d1, d2 = Probit().scalar_tilted(1.0, np.zeros(0), 0.0, 1.0, 1.0, np.zeros(0))
    >>> round(log_z, 12) == round(float(np.log(0.5)), 12)
    True
    """

    param_names: tuple = ()
    log_concave = True
    binary = False
    scalar_tilted: Any = None
    #: Columns of the per-site ``extra`` array that ``scalar_tilted`` reads.
    n_extra = 0
    #: Whether +-inf in ``extra`` means something (no censoring limit; log 0).
    extra_allows_inf = False
    #: Whether NaN in ``y`` means something (an interval-censored target).
    nan_targets = False
    #: Whether the tilted moments at a power alpha < 1 (sparse Power EP) are computed to
    #: the accuracy of alpha = 1 (:func:`check_power`).
    power_ep = True
    #: Per-observation data an estimator's ``fit`` and ``predict`` pass on (Tobit: lower,
    #: upper limits; counts: exposure), see :meth:`with_data`.
    data_names: tuple = ()
    #: Those of :attr:`data_names` that predictions must be given when the fit was.
    predict_data: tuple = ()

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        legacy = next((k.__dict__["_tilted"] for k in cls.__mro__ if "_tilted" in k.__dict__),
                      None)                       # as stored (a staticmethod stays one)
        if legacy is not None and ("_tilted" in cls.__dict__ or cls.scalar_tilted is None) \
                and "scalar_tilted" not in cls.__dict__:
            _warn_legacy_tilted(cls.__name__, 3)
            cls.scalar_tilted = legacy

    def __setattr__(self, name, value):
        if name == "_tilted":                      # the name of fastep < 0.2
            _warn_legacy_tilted(type(self).__name__, 3)
            name = "scalar_tilted"
        object.__setattr__(self, name, value)

    def __init__(self, **params: Any) -> None:
        self._values = {}
        self._bounds = {}
        for name in self.param_names:
            value = params.pop(name)
            bounds = params.pop(f"{name}_bounds", (1e-6, 1e6))
            value = float(value)
            if not (np.isfinite(value) and value > 0):
                raise ValueError(f"The likelihood parameter '{name}' of {type(self).__name__} "
                                 f"must be positive and finite; got {value!r}.")
            self._values[name] = value
            self._bounds[name] = parameter_bounds(bounds, name)
        if params:
            raise TypeError(f"unexpected arguments {sorted(params)}")

    # --- parameters --------------------------------------------------------------
    @property
    def params(self) -> np.ndarray:
        """Parameter values as the float array passed to compiled code."""
        return np.array([self._values[n] for n in self.param_names], dtype=float)

    def _free(self):
        return [n for n in self.param_names if not (isinstance(self._bounds[n], str))]

    def parameter_bounds(self, name: str) -> Union[str, Tuple[float, float]]:
        """The bounds of parameter ``name`` as given to the constructor (``<name>_bounds``):
        ``"fixed"`` or ``(low, high)``.

        Parameters
        ----------
        name : str
            One of :attr:`param_names`.

        Returns
        -------
        str or tuple of float

        Examples
        --------
        >>> from fastep.likelihoods import Gaussian
        >>> Gaussian(0.5, noise_variance_bounds=(1e-3, 10.0)).parameter_bounds("noise_variance")
        (0.001, 10.0)
        """
        if name not in self._bounds:
            raise ValueError(f"name must be one of {list(self.param_names)}; got {name!r}.")
        return self._bounds[name]

    def memorising_hint(self, y: ArrayLike) -> str:
        """A sentence for ML-II's warning that the fitted kernel makes every training row
        independent of the others (the model memorises the targets), where these targets
        suggest why under this likelihood; "" (the default) where they do not.

        Parameters
        ----------
        y : array-like of shape (n_samples,)
            The training targets, as the likelihood reads them.

        Returns
        -------
        str

        Examples
        --------
        >>> from fastep.likelihoods import Gaussian
        >>> Gaussian().memorising_hint([0.0, 1.0])
        ''
        """
        return ""

    def theta_entries(self) -> list[ThetaEntry]:
        """How ML-II's messages name, show and bound each entry of :attr:`theta`: as
        ``likelihood <name>``, shown as the parameter (theta holds its log), widened or
        fixed through this likelihood's own ``<name>_bounds``.

        Examples
        --------
        >>> from fastep.likelihoods import Gaussian
        >>> [e.name for e in Gaussian(0.5).theta_entries()]
        ['likelihood noise_variance']
        """
        lik = type(self).__name__
        return [entry for n in self._free() for entry in entries_of(
            f"likelihood {n}", 1, f"likelihood={lik}({n}=..., {n}_bounds=(low, high))",
            f"likelihood={lik}({n}=..., {n}_bounds='fixed')")]

    def _checked_theta(self, theta):
        """``theta`` as a float array of shape (n_dims,), or a ``ValueError``."""
        theta = np.atleast_1d(np.asarray(theta, dtype=float))
        if theta.shape != (self.n_dims,):
            raise ValueError(f"theta of {type(self).__name__} must have shape ({self.n_dims},); "
                             f"got {theta.shape}.")
        return theta

    @property
    def theta(self):
        return np.log([self._values[n] for n in self._free()])

    @theta.setter
    def theta(self, theta):
        theta = self._checked_theta(theta)
        for n, t in zip(self._free(), theta):
            self._values[n] = float(np.exp(t))

    def clone_with_theta(self, theta: ArrayLike) -> Likelihood:
        """A copy with log-parameters ``theta`` (this likelihood is not modified).

        Parameters
        ----------
        theta : array_like of shape (n_dims,)
            Logs of the free parameters' values, in the order of :attr:`theta`.
        """
        lik = copy.copy(self)
        lik._values = dict(self._values)
        lik.theta = theta
        return lik

    @property
    def bounds(self):
        return np.log(np.array([self._bounds[n] for n in self._free()], dtype=float)
                      ).reshape(-1, 2)

    @property
    def n_dims(self):
        return len(self._free())

    def __getattr__(self, name):
        values = self.__dict__.get("_values", {})
        if name in values:
            return values[name]
        if name == "_tilted":
            _warn_legacy_tilted(type(self).__name__, 3)
            return self.scalar_tilted
        raise AttributeError(name)

    def __repr__(self):
        args = ", ".join(f"{n}={v:.4g}" for n, v in self._values.items())
        return f"{type(self).__name__}({args})"

    def to_dict(self) -> Dict[str, Any]:
        """JSON-able description: type, parameters, bounds, and the per-observation data
        (:attr:`data_names`) that are scalars or None (a model file stores arrays beside
        its header)."""
        d: Dict[str, Any] = {"type": type(self).__name__, "params": dict(self._values),
             "bounds": dict(self._bounds)}
        for name in self.data_names:
            value = getattr(self, name, None)
            if value is None or np.ndim(value) == 0:
                d[name] = None if value is None else float(value)
        return d

    # --- data --------------------------------------------------------------------
    def rows(self, start: int, stop: int) -> Likelihood:
        """This likelihood for the sites ``start:stop`` only (a chunk of rows on a Dask
        worker): itself, unless it holds per-site data (Tobit's limits).

        Parameters
        ----------
        start, stop : int
            First site and one past the last, as in the slice ``start:stop``.
        """
        return self

    def predict_mean(self, mean: ArrayLike, var: ArrayLike) -> np.ndarray:
        """E[y] given f ~ N(mean, var), per point (the mean of ``predict_y``).

        Parameters
        ----------
        mean, var : array_like of shape (n,)
            Mean and variance of the latent f at each point.
        """
        predict_y = getattr(self, "predict_y", None)
        if predict_y is None:
            raise ValueError(
                f"{type(self).__name__} has no predictive distribution of a real-valued y "
                f"(it is a classification likelihood): its predict_proba(mean, var) gives "
                f"the class probabilities.")
        return predict_y(mean, var)[0]

    def encode_targets(self, y: ArrayLike) -> np.ndarray:
        """Validate targets (a vector, or one column) and return them as the float array
        the compiled code reads.

        Parameters
        ----------
        y : array_like of shape (n,) or (n, 1)
            Targets, as given to an estimator's ``fit``.
        """
        if np.ndim(y) == 2 and np.shape(y)[1] == 1:
            y = np.asarray(y)[:, 0]
        return self.check_targets(y)

    def check_targets(self, y: ArrayLike) -> np.ndarray:
        """The float vector ``y`` checked for the values this likelihood models (what both
        :meth:`encode_targets` and :meth:`tilted` accept).

        Parameters
        ----------
        y : array_like of shape (n,)
            Targets (labels in {-1, +1} for a binary likelihood; NaN only where
            :attr:`nan_targets`).
        """
        y = float_array(y, "y", 1, allow_nan=self.nan_targets,
                        fix=TARGETS_FIX)
        if self.binary and not np.all(np.abs(y) == 1.0):
            bad = np.unique(y[np.abs(y) != 1.0])[:5]
            raise ValueError(f"{type(self).__name__} expects y in {{-1, +1}}; got values "
                             f"{bad.tolist()}. Map the two classes to -1 and +1.")
        return y

    def with_data(self, n: int, **data: Any) -> Likelihood:
        """A copy for n observations with the per-observation data named in
        :attr:`data_names` (a scalar, an array of n values, or None for the default);
        a ``ValueError`` names anything else.

        Parameters
        ----------
        n : int
            Number of observations.
        **data
            The per-observation data by name (e.g. ``exposure=``, ``lower=``); a name
            left out gets None.
        """
        unknown = sorted(set(data) - set(self.data_names))
        if unknown:
            raise ValueError(f"{type(self).__name__} takes no per-observation data "
                             f"{unknown}; it takes {list(self.data_names) or 'none'}.")
        new = copy.copy(self)
        new._values = dict(self._values)
        for name in self.data_names:
            setattr(new, name, data.get(name))
        new.site_extra(n)                        # checks the data now
        return new

    def site_extra(self, n: int) -> np.ndarray:
        """Per-site extra columns read by the tilted function (none by default).

        Parameters
        ----------
        n : int
            Number of sites.

        Returns
        -------
        ndarray of shape (n, n_extra)
        """
        return np.zeros((n, self.n_extra))

    def check_extra(self, extra: Optional[ArrayLike], n: int) -> np.ndarray:
        """``extra`` for n sites, checked (None: :meth:`site_extra`): an (n, n_extra) float
        array, finite unless :attr:`extra_allows_inf`.

        Parameters
        ----------
        extra : array_like of shape (n, n_extra) or None
            Per-site extra columns; None: this likelihood's own (:meth:`site_extra`).
        n : int
            Number of sites.
        """
        if extra is None:
            return self.site_extra(n)
        return float_array(extra, "extra", 2, (n, self.n_extra),
                           allow_inf=self.extra_allows_inf,
                           fix=f"{type(self).__name__} reads {self.n_extra} extra column(s) "
                               f"per site.")

    # --- moments -----------------------------------------------------------------
    def _site_arrays(self, y: ArrayLike, mu_cav: ArrayLike, var_cav: ArrayLike
                     ) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Checked float arrays ``(y, mu_cav, var_cav)`` of one length (y and var_cav may
        be scalars).  A zero variance (f known exactly: a latent with zero prior variance,
        e.g. a linear kernel at x = 0) is raised to ``MIN_VARIANCE``, where the tilted
        moments are those of ``p(y | f = mu)`` to every digit."""
        mu = float_array(np.ravel(mu_cav), "mu_cav", 1)
        n = mu.shape[0]
        var = float_array(_broadcast(var_cav, n, "var_cav"), "var_cav", 1)
        if np.any(var < 0.0):
            i = int(np.flatnonzero(var < 0.0)[0])
            raise ValueError(f"var_cav must be >= 0 (a variance); got {float(var[i])!r} at "
                             f"index {i}.")
        var = np.maximum(var, MIN_VARIANCE)
        return self.check_targets(_broadcast(y, n, "y")), mu, var

    def check_params(self, params: ArrayLike) -> np.ndarray:
        """``params`` (values like :attr:`params`) checked: a float array of their shape,
        positive.

        Parameters
        ----------
        params : array_like of shape (n_params,)
            Parameter values (not their logs), in the order of :attr:`param_names`.
        """
        return float_array(params, "params", 1, (len(self.param_names),), positive=True)

    def tilted(self, y: ArrayLike, mu_cav: ArrayLike, var_cav: ArrayLike, alpha: float = 1.0,
               extra: Optional[ArrayLike] = None, params: Optional[ArrayLike] = None
               ) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Vectorised tilted moments: arrays ``(log_Z, dlogZ_dmu, d2logZ_dmu2)``.

        ``Z_i = int p(y_i | f)^alpha N(f | mu_cav_i, var_cav_i) df``; ``params`` (an
        array like :attr:`params`) evaluates them at other parameter values.

        Parameters
        ----------
        y : float or array_like of shape (n,)
            Targets (a scalar is broadcast to every site).
        mu_cav : array_like of shape (n,)
            Cavity means.
        var_cav : float or array_like of shape (n,)
            Cavity variances, >= 0 (0 is raised to a tiny positive variance).
        alpha : float, default 1.0
            The power of Power EP, in (0, 1] (1: plain EP).
        extra : array_like of shape (n, n_extra) or None, default None
            Per-site extra columns (limits, exposures, ...); None: this likelihood's own
            (:meth:`site_extra`).
        params : array_like of shape (n_params,) or None, default None
            Parameter values like :attr:`params`; None: the current ones.
        """
        y, mu, var = self._site_arrays(y, mu_cav, var_cav)
        n = mu.shape[0]
        if not (isinstance(alpha, numbers.Real) and 0.0 < alpha <= 1.0):
            raise ValueError(f"alpha must be a number in (0, 1]; got {alpha!r}.")
        check_power(self, alpha)
        extra = self.check_extra(extra, n)
        params = self.params if params is None else self.check_params(params)
        check_likelihood(self)
        out = np.empty((3, n))
        tilted_batch(self.scalar_tilted, y, extra, mu, var, float(alpha), params,
                     out[0], out[1], out[2])
        if not all_finite(out):
            i = int(np.argwhere(~np.isfinite(out))[0, 1])
            raise ValueError(
                f"the tilted moments of {type(self).__name__} are not finite at site {i} "
                f"(y = {float(y[i])!r}, mu_cav = {float(mu[i])!r}, var_cav = {float(var[i])!r}, "
                f"alpha = {float(alpha)!r}): "
                f"log Z, d1, d2 = {out[:, i].tolist()}.  The likelihood is numerically zero "
                f"(or not finite) wherever that cavity has mass; for a CustomLikelihood, write "
                f"log_lik in a form that stays finite (e.g. log1p(exp(-x)) as -x + "
                f"log1p(exp(x)) for x < 0).")
        return out[0], out[1], out[2]

    def tilted_dparams(self, y: ArrayLike, mu_cav: ArrayLike, var_cav: ArrayLike,
                       extra: Optional[ArrayLike] = None, alpha: float = 1.0) -> np.ndarray:
        """d log Z_i / d log(param) for every free parameter, shape (n, n_dims).

        Default: central differences in log space (step 1e-5), exact enough for
        evidence gradients; closed forms (at alpha = 1) override it.  The likelihood
        itself is never modified, so threads may share it.

        Parameters
        ----------
        y : float or array_like of shape (n,)
            Targets.
        mu_cav : array_like of shape (n,)
            Cavity means.
        var_cav : float or array_like of shape (n,)
            Cavity variances.
        extra : array_like of shape (n, n_extra) or None, default None
            Per-site extra columns; None: this likelihood's own (:meth:`site_extra`).
        alpha : float, default 1.0
            The power of Power EP, in (0, 1].
        """
        out = []
        free = [self.param_names.index(name) for name in self._free()]
        for k in range(self.n_dims):
            vals = []
            for sgn in (1.0, -1.0):
                p = self.params
                p[free[k]] *= math.exp(sgn * 1e-5)
                vals.append(self.tilted(y, mu_cav, var_cav, alpha, extra=extra, params=p)[0])
            out.append((vals[0] - vals[1]) / 2e-5)
        return np.array(out).T.reshape(np.size(mu_cav), self.n_dims)

    def log_predictive_density(self, y: ArrayLike, mean: ArrayLike, var: ArrayLike,
                               extra: Optional[ArrayLike] = None) -> np.ndarray:
        """log p(y_i) = log int p(y_i | f) N(f | mean_i, var_i) df per point: the tilted
        normaliser at alpha = 1, with ``extra`` or (None) this likelihood's own per-site
        data (all of its sites: one per point).

        Parameters
        ----------
        y : array_like of shape (n,)
            Observed targets.
        mean, var : array_like of shape (n,)
            Mean and variance of the latent f at each point.
        extra : array_like of shape (n, n_extra) or None, default None
            Per-point extra columns; None: this likelihood's own (:meth:`site_extra`).
        """
        return self.tilted(y, mean, var, extra=extra)[0]

    def predict_proba(self, mean: ArrayLike, var: ArrayLike) -> np.ndarray:
        """p(y* = +1 | data) for a binary likelihood.

        Parameters
        ----------
        mean, var : array_like of shape (n,)
            Mean and variance of the latent f at each point.
        """
        if not self.binary:
            raise ValueError(f"{type(self).__name__} is not a binary likelihood.")
        log_z = self.tilted(np.ones_like(np.asarray(mean, float)), mean, var)[0]
        return np.minimum(np.exp(log_z), 1.0)      # quadrature can overshoot 1 by ~1e-15
