"""EP likelihoods: each supplies a scalar compiled tilted-moment function."""
from ._base import CustomLikelihood, Likelihood, quad_tilted, tilted_batch
from .annotators import MultiAnnotator
from .binary import Logistic, Probit
from .gaussian import Gaussian
from .robustmax import RobustMax
from .tobit import Tobit, censored_predictive, censored_quantile

_TYPES = {c.__name__: c for c in (Gaussian, Probit, Logistic, Tobit)}


def likelihood_from_dict(d):
    """Rebuild a built-in likelihood saved with ``Likelihood.to_dict``."""
    if d["type"] not in _TYPES:
        raise ValueError(f"cannot load likelihood of type {d['type']!r}")
    kw = dict(d["params"])
    kw.update({k: d[k] for k in ("lower", "upper") if k in d})
    kw.update({f"{k}_bounds": (b if isinstance(b, str) else tuple(b))
               for k, b in d["bounds"].items()})
    return _TYPES[d["type"]](**kw)


__all__ = ["MultiAnnotator", "RobustMax", "Tobit", "censored_predictive", "censored_quantile", "Likelihood", "CustomLikelihood", "Gaussian", "Probit", "Logistic", "quad_tilted",
           "tilted_batch", "likelihood_from_dict"]
