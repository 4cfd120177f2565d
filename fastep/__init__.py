"""fastep: fast, compiled Expectation Propagation for Gaussian-process models.

Public names: the estimators (loaded on first use, see below), the inference functions
:func:`ep`, :func:`sparse_ep` and :func:`markov_ep`, :func:`save_model` / :func:`load_model`,
:func:`precompile`, the modules :mod:`fastep.kernels` and :mod:`fastep.likelihoods`, and
the exceptions and warnings (:mod:`fastep.exceptions`).
"""
from . import exceptions, kernels, likelihoods
from ._precompile import precompile
from ._registry import ESTIMATORS
from .exceptions import (ConvergenceWarning, DenseMemoryError, EPNumericalWarning,
                         NotPositiveDefiniteError)
from .inference import EPResult, MarkovEPResult, SparseEPResult, ep, markov_ep, sparse_ep
from .persistence import load_model, save_model

from ._version import __version__


def __getattr__(name):
    """Estimators load on first use (PEP 562): they import scikit-learn, which would
    otherwise double the time of ``import fastep``."""
    if name in ESTIMATORS:
        from . import models
        return getattr(models, name)
    raise AttributeError(f"module 'fastep' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(ESTIMATORS))


__all__ = ["ep", "sparse_ep", "markov_ep", *ESTIMATORS, "save_model", "load_model", "precompile",
           "EPResult", "SparseEPResult", "MarkovEPResult", "ConvergenceWarning", "EPNumericalWarning",
           "DenseMemoryError", "NotPositiveDefiniteError", "kernels", "likelihoods",
           "exceptions", "__version__"]
