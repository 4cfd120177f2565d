"""Inference algorithms: pure functions over arrays."""
from .ep import ConvergenceWarning, EPNumericalWarning, EPResult, ep

__all__ = ["ep", "EPResult", "ConvergenceWarning", "EPNumericalWarning"]
