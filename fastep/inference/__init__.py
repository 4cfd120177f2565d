"""Inference algorithms: pure functions over arrays, each written once over a backend."""
from ..exceptions import ConvergenceWarning, EPNumericalWarning
from .ep import EPResult, ep, ep_gradient
from .markov_ep import MarkovEPResult, markov_ep, markov_ep_gradient, markov_predict
from .sparse_ep import SparseEPResult, sparse_ep, sparse_ep_gradient

# for the estimators' ML-II loop (fastep.models), not part of the public API
from ._anderson import carry_anderson  # noqa: E402,F401

__all__ = ["ep", "ep_gradient", "EPResult", "sparse_ep", "sparse_ep_gradient", "SparseEPResult",
           "markov_ep", "markov_ep_gradient", "markov_predict", "MarkovEPResult",
           "ConvergenceWarning", "EPNumericalWarning"]
