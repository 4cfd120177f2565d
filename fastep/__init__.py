"""fastep: fast, compiled Expectation Propagation for Gaussian-process models."""
from . import kernels, likelihoods
from .inference import ConvergenceWarning, EPNumericalWarning, EPResult, ep
from ._precompile import precompile

__version__ = "0.1.0"

_ESTIMATORS = ("CensoredGPRegressor", "EPGaussianProcessClassifier", "MultiAnnotatorGPClassifier",
               "SparseGPRegressor", "GWIClassifier")


def __getattr__(name):
    """Estimators load on first use (PEP 562): they import scikit-learn when it is
    installed, which would otherwise double the time of ``import fastep``."""
    if name in _ESTIMATORS:
        from . import models
        return getattr(models, name)
    raise AttributeError(f"module 'fastep' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_ESTIMATORS))

__all__ = ["ep", "CensoredGPRegressor", "EPGaussianProcessClassifier",
           "MultiAnnotatorGPClassifier", "SparseGPRegressor", "GWIClassifier", "precompile",
           "EPResult", "ConvergenceWarning",
           "EPNumericalWarning", "kernels", "likelihoods", "__version__"]
