"""fastep: fast, compiled Expectation Propagation for Gaussian-process models."""
from . import kernels, likelihoods
from .inference import ConvergenceWarning, EPNumericalWarning, EPResult, ep
from .models import (CensoredGPRegressor, EPGaussianProcessClassifier,
                     MultiAnnotatorGPClassifier)
from ._precompile import precompile

__version__ = "0.1.0"

__all__ = ["ep", "CensoredGPRegressor", "EPGaussianProcessClassifier", "MultiAnnotatorGPClassifier", "precompile", "EPResult", "ConvergenceWarning", "EPNumericalWarning", "kernels",
           "likelihoods", "__version__"]
