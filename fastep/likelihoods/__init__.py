"""EP likelihoods: each supplies a scalar compiled tilted-moment function, except
:class:`RobustMax` (the multiclass likelihood of GWI, which needs expected log-likelihoods
rather than tilted moments) and :class:`MultinomialProbit` (the multiclass likelihood of
nested EP, whose tilted moments come from an inner EP over C - 1 probit factors)."""
import math
import numbers
from typing import Any, Dict, Union


from . import _base
from ._base import Likelihood, check_likelihood, check_power  # noqa: F401 (for EP)
from .custom import CustomLikelihood, _rebuild_custom
from .annotators import MultiAnnotator
from .binary import Logistic, Probit
from .binomial import Binomial
from .counts import (NegativeBinomial, Poisson, ZeroInflatedNegativeBinomial,
                     ZeroInflatedPoisson)
from .gaussian import Gaussian
from .multinomial_probit import MultinomialProbit
from .ordinal import OrdinalProbit
from .robustmax import RobustMax
from .student_t import StudentT
from .survival import LogLogistic, LogNormal, Weibull
from .tobit import Tobit, censored_predictive, censored_quantile

_TYPES = {c.__name__: c for c in (Gaussian, Probit, Logistic, Tobit, Poisson,
                                   NegativeBinomial, ZeroInflatedPoisson,
                                   ZeroInflatedNegativeBinomial, StudentT, Weibull, LogLogistic,
                                   LogNormal, Binomial)}


def _positive_number(v: Any) -> bool:
    """Whether ``v`` is a real number (not a bool), finite and positive as a float."""
    if not isinstance(v, numbers.Real) or isinstance(v, bool):
        return False
    try:
        f = float(v)
    except OverflowError:                        # an integer beyond float's range
        return False
    return math.isfinite(f) and f > 0


def likelihood_from_dict(d: Any) -> Union[Likelihood, RobustMax]:
    """Rebuild a built-in likelihood from its ``to_dict()``; a ``ValueError`` says what is
    wrong with a description that does not describe one (model files are untrusted).

    Parameters
    ----------
    d : dict
        A description as ``to_dict()`` writes it: ``"type"`` and, by type,
        ``"params"`` and ``"bounds"`` (with any scalar per-observation data),
        ``"cut_points"`` (and ``"fixed"``) or ``"n_classes"``, ``"epsilon"`` and
        ``"n_nodes"``; anything else is a ``ValueError``.

    Examples
    --------
    >>> lik = likelihood_from_dict(Tobit(0.5, lower=0.0).to_dict())
    >>> lik.noise_variance, lik.lower
    (0.5, 0.0)
    """
    if not isinstance(d, dict) or not isinstance(d.get("type"), str):
        raise ValueError(f"a likelihood description must be a dict with a 'type'; got "
                         f"{d!r:.80}.")
    kind = d["type"]
    fields = {"OrdinalProbit": ("cut_points",), "RobustMax": ("n_classes", "epsilon", "n_nodes")
              }.get(kind, ("params", "bounds") if kind in _TYPES else ())
    missing = [f for f in fields if f not in d]
    if missing:                    # e.g. the type of another likelihood's description
        raise ValueError(f"the {kind} likelihood description has no {missing}: it holds "
                         f"{sorted(k for k in d if k != 'type')}, which do not describe a "
                         f"{kind}.")
    if kind == "OrdinalProbit":
        try:
            return OrdinalProbit(d["cut_points"], bool(d.get("fixed", False)))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"invalid OrdinalProbit description: {exc}") from None
    if kind == "RobustMax":
        try:
            return RobustMax(d["n_classes"], d["epsilon"], d["n_nodes"])
        except ValueError as exc:
            raise ValueError(f"invalid RobustMax description: {exc}") from None
    if kind not in _TYPES:
        raise ValueError(f"unknown likelihood type {kind!r}; the ones a model file can hold "
                         f"are {sorted(_TYPES) + ['OrdinalProbit', 'RobustMax']}.")
    cls = _TYPES[kind]
    params, bounds = d.get("params"), d.get("bounds")
    if not (isinstance(params, dict) and isinstance(bounds, dict)
            and set(params) == set(cls.param_names) and set(bounds) == set(cls.param_names)):
        raise ValueError(f"the {kind} likelihood has parameters {list(cls.param_names)}; the "
                         f"description gives {params!r:.80} with bounds {bounds!r:.80}.")
    kw: Dict[str, Any] = {}
    for name in cls.param_names:
        value, b = params[name], bounds[name]
        if not isinstance(value, numbers.Real) or isinstance(value, bool):
            raise ValueError(f"the {kind} parameter {name!r} must be a number; got {value!r}.")
        if not (b == "fixed" or (isinstance(b, (list, tuple)) and len(b) == 2
                                 and all(_positive_number(v) for v in b) and b[0] < b[1])):
            raise ValueError(f"the bounds of the {kind} parameter {name!r} must be 'fixed' or "
                             f"0 < low < high; got {b!r}.")
        kw[name] = value
        kw[f"{name}_bounds"] = b if b == "fixed" else tuple(b)
    for key in cls.data_names:
        if key in d:
            value = d[key]
            if value is not None and not (isinstance(value, numbers.Real)
                                          and not isinstance(value, bool)):
                raise ValueError(f"the {kind} {key} must be a number or None in a model "
                                 f"description; got {value!r:.80}.")
            kw[key] = value
    try:
        return cls(**kw)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"invalid {kind} likelihood description: {exc}") from None


# a CustomLikelihood pickled by fastep 0.2/0.3 names its rebuilder in ``_base``, where the
# class lived: it is found there still (assigned, so that _base does not import custom)
setattr(_base, "_rebuild_custom", _rebuild_custom)

__all__ = ["Poisson", "NegativeBinomial", "Binomial", "ZeroInflatedPoisson",
           "ZeroInflatedNegativeBinomial",
           "StudentT", "Weibull", "LogLogistic", "LogNormal", "OrdinalProbit",
           "MultiAnnotator", "RobustMax", "MultinomialProbit", "Tobit", "censored_predictive", "censored_quantile",
           "Likelihood", "CustomLikelihood", "Gaussian", "Probit", "Logistic",
           "likelihood_from_dict"]
