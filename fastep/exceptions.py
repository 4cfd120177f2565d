"""Every exception and warning of fastep's own, in one place.

Each is also importable where users find it: ``fastep.NotPositiveDefiniteError``,
``fastep.DenseMemoryError``, ``fastep.ConvergenceWarning``, ``fastep.EPNumericalWarning``
and ``fastep.cuda.CUDAUnavailableError`` (and from the modules that raised them in 0.2).
Bad arguments are plain ``ValueError`` (or ``TypeError``) naming the argument.
"""
from __future__ import annotations

import numpy as np

__all__ = ["NotPositiveDefiniteError", "DenseMemoryError", "ConvergenceWarning",
           "EPNumericalWarning", "CUDAUnavailableError"]


class NotPositiveDefiniteError(np.linalg.LinAlgError):
    """Raised when a matrix that must be positive definite is not (numerically), with a
    message naming the knob to turn (jitter, noise variance, damping, inducing points).
    A ``numpy.linalg.LinAlgError``, hence a ``ValueError``.

    Examples
    --------
    >>> import numpy as np, fastep
    >>> try:
    ...     fastep.ep(np.zeros((2, 2)), [1.0, -1.0], fastep.likelihoods.Probit())
    ... except fastep.NotPositiveDefiniteError as exc:
    ...     print(isinstance(exc, ValueError))
    True
    """


class DenseMemoryError(MemoryError):
    """Dense inference would need more memory than the machine has; raised before any
    large allocation.  The message says how much, and to use inducing points.

    Examples
    --------
    >>> import numpy as np, fastep
    >>> X = np.zeros((200_000, 2)); y = np.arange(200_000) % 2
    >>> try:                    # dense EP asked for: n_inducing="auto" would go sparse
    ...     fastep.EPGaussianProcessClassifier(n_inducing=None).fit(X, y)
    ... except fastep.DenseMemoryError as exc:
    ...     print(str(exc)[:48])
    dense inference on n = 200000 points needs about
    """


class ConvergenceWarning(UserWarning):
    """EP (or an optimiser) stopped at its iteration budget without meeting ``tol``."""


class EPNumericalWarning(UserWarning):
    """Sites were skipped because their cavity distribution was improper."""


class CUDAUnavailableError(RuntimeError):
    """``device="cuda"`` was asked for but the CUDA stack is not usable here."""
