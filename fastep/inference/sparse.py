"""Deprecated alias of :mod:`fastep.inference.collapsed` (the collapsed sparse regression
bound; the inducing-point helpers are in :mod:`fastep.inference.inducing`), kept so that
code written for fastep 0.2 still imports; it will be removed in 0.4."""
import warnings

from .collapsed import SparseGradient, SparseState, collapsed_objective, kernel_gradient, predict
from .inducing import JITTER, check_inducing, cholesky_uu, init_inducing, uu_from_whitened

__all__ = ["collapsed_objective", "kernel_gradient", "predict", "SparseState", "SparseGradient",
           "JITTER", "check_inducing", "cholesky_uu", "init_inducing", "uu_from_whitened"]

warnings.warn("fastep.inference.sparse is now fastep.inference.collapsed (the inducing-point "
              "helpers: fastep.inference.inducing); the old name will be removed in fastep 0.4.",
              FutureWarning, stacklevel=2)
