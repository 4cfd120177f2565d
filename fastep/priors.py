"""Hyperpriors for MAP-II: weakly informative priors on kernel and likelihood parameters.

Type-II maximum likelihood (ML-II) maximises the evidence log p(y | theta) over the log
parameters theta; MAP-II maximises log p(y | theta) + log p(theta) instead, as GPstuff
does by default.  On separable or nearly separable classes the evidence keeps rising,
ever more slowly, as the kernel variance grows (the latent function sharpens towards a
step), so plain ML-II walks to the variance bound at great cost (EP needs more sweeps
there, L-BFGS-B more steps on the flat slope) and returns overconfident probabilities.
A prior on the log variance stops that walk where the evidence has flattened.

A prior here is a density on the *log* parameter (the space ML-II works in), so MAP-II
is invariant to how the parameter is written.  The EP classifier takes ``hyperprior``:
None (plain ML-II), ``"auto"`` (:data:`AUTO`) or a dict from parameter names
(``"variance"``, ``"lengthscale"`` for every ARD entry, ``"lengthscale[2]"`` for one,
``"likelihood df"`` ...) to priors.

Examples
--------
>>> from fastep import EPGaussianProcessClassifier
>>> from fastep.priors import LogNormal
>>> clf = EPGaussianProcessClassifier(hyperprior={"variance": LogNormal(1.0, 2.0),
...                                               "lengthscale": LogNormal(3.0, 1.0)})
"""
from __future__ import annotations

import math
import numbers

from typing import Any, Dict

import numpy as np
from numpy.typing import ArrayLike

__all__ = ["LogNormal", "AUTO"]


class LogNormal:
    """``log theta ~ N(log median, sigma^2)``: a log-normal prior on a positive parameter.

    Parameters
    ----------
    median : float > 0, default 1.0
        The prior median of the parameter.
    sigma : float > 0, default 1.0
        Standard deviation of its log: ``sigma=2`` puts 95% of the prior mass within a
        factor ``exp(3.9) ~ 50`` of the median.

    Examples
    --------
    >>> p = LogNormal(median=1.0, sigma=2.0)
    >>> round(float(p.log_density(0.0)), 4), float(p.log_density_gradient(2.0))
    (-1.6121, -0.5)
    """

    def __init__(self, median: float = 1.0, sigma: float = 1.0) -> None:
        for name, value in (("median", median), ("sigma", sigma)):
            try:
                ok = (not isinstance(value, bool) and isinstance(value, numbers.Real)
                      and 0.0 < float(value) < math.inf)
            except OverflowError:                     # an integer beyond float's range
                ok = False
            if not ok:
                raise ValueError(f"LogNormal's {name} must be a positive finite number; got "
                                 f"{value!r:.40}.")
        self.median, self.sigma = float(median), float(sigma)

    def log_density(self, t: ArrayLike) -> np.ndarray:
        """log p(t) of the log parameter ``t``.

        Parameters
        ----------
        t : float or array_like
            Log of the parameter (a theta entry), elementwise.
        """
        z = (np.asarray(t, dtype=float) - math.log(self.median)) / self.sigma
        return -0.5 * z * z - math.log(self.sigma * math.sqrt(2.0 * math.pi))

    def log_density_gradient(self, t: ArrayLike) -> np.ndarray:
        """d log p(t) / dt.

        Parameters
        ----------
        t : float or array_like
            Log of the parameter (a theta entry), elementwise.
        """
        return -(np.asarray(t, dtype=float) - math.log(self.median)) / self.sigma ** 2

    def to_dict(self) -> Dict[str, Any]:
        return {"type": "LogNormal", "median": self.median, "sigma": self.sigma}

    def __eq__(self, other):
        return isinstance(other, LogNormal) and self.to_dict() == other.to_dict()

    __hash__ = object.__hash__

    def __repr__(self):
        return f"LogNormal(median={self.median:g}, sigma={self.sigma:g})"


def prior_from_dict(spec):
    """The prior a :meth:`LogNormal.to_dict` describes (model files: untrusted input)."""
    if not (isinstance(spec, dict) and spec.get("type") == "LogNormal"
            and set(spec) == {"type", "median", "sigma"}):
        raise ValueError(f"a hyperprior must be described as {{'type': 'LogNormal', "
                         f"'median': ..., 'sigma': ...}}; got {spec!r:.80}")
    return LogNormal(spec["median"], spec["sigma"])


#: ``hyperprior="auto"``: a log-normal prior on the kernel variance with median 1 and
#: sigma 5 (95% of its mass between 5e-5 and 2e4 on standardised inputs).  Chosen on
#: held-out log loss and fit time of scikit-learn's tables (``scripts/fit_time.py``;
#: log loss / seconds, 2-core machine):
#:
#: ============  ===============  ===============  ===============
#: sigma         digits           wine             breast cancer
#: ============  ===============  ===============  ===============
#: None (ML-II)  0.1277 / 377 s   0.0467 / 0.39 s  0.0889 / 0.92 s
#: 5             0.1286 / 275 s   0.0531 / 0.25 s  0.0882 / 1.04 s
#: 3             0.1303 / 231 s   0.0602 / 0.19 s  0.0882 / 0.77 s
#: ============  ===============  ===============  ===============
#:
#: Plain ML-II ends four digits problems and one wine problem at the variance bound
#: 1e5 with a flat-evidence warning; sigma 5 ends none there, within 0.001 of its log
#: loss on digits, and 1.4x sooner.  Lengthscales and likelihood parameters stay free.
AUTO = {"variance": LogNormal(median=1.0, sigma=5.0)}


def _match(name, spec):
    """The prior of the theta entry ``name`` (e.g. ``lengthscale[3]``) in ``spec``."""
    if name in spec:
        return spec[name]
    base = name.split("[", 1)[0]
    return spec.get(base)


def hyperprior_terms(hyperprior, names, size, owner="the estimator"):
    """The ``hyperprior`` parameter of an estimator as a function ``theta -> (log p(theta),
    gradient)`` over a problem's ``theta`` of ``size`` entries, whose first ``len(names)``
    entries are named ``names``; None when no entry has a prior.  A name in an explicit
    dict that matches no entry is an error ("auto" puts its priors where they fit)."""
    spec = _check(hyperprior, owner)
    priors = [(i, _match(name, spec)) for i, name in enumerate(names)]
    priors = [(i, p) for i, p in priors if p is not None]
    if isinstance(hyperprior, dict):
        known = {n.split("[", 1)[0] for n in names} | set(names)
        unknown = sorted(k for k in spec if k not in known)
        if unknown:
            raise ValueError(f"{owner}: the hyperprior names {unknown}, which are not free "
                             f"parameters of this model (they are: {sorted(known)}).")
    if not priors:
        return None

    def terms(theta):
        value, grad = 0.0, np.zeros(size)
        for i, p in priors:
            value += float(p.log_density(theta[i]))
            grad[i] = float(p.log_density_gradient(theta[i]))
        return value, grad
    return terms


def _check(hyperprior, owner):
    """The ``hyperprior`` parameter as a dict {name: prior} (None: {})."""
    if hyperprior is None:
        return {}
    if isinstance(hyperprior, str):
        if hyperprior != "auto":
            raise ValueError(f"The 'hyperprior' parameter of {owner} must be None, 'auto' or "
                             f"a dict from parameter names to priors (e.g. {{'variance': "
                             f"LogNormal(1, 5)}}); got {hyperprior!r}.")
        return dict(AUTO)
    if not isinstance(hyperprior, dict) or not all(
            isinstance(k, str) and isinstance(v, LogNormal) for k, v in hyperprior.items()):
        raise ValueError(f"The 'hyperprior' parameter of {owner} must be None, 'auto' or a "
                         f"dict from parameter names (str) to fastep.priors.LogNormal; got "
                         f"{hyperprior!r:.80}.")
    return dict(hyperprior)

