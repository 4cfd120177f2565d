"""The GPU as a user sees it: whether ``device="cuda"`` can run here (:func:`is_available`),
what is missing if not (:func:`require`, :class:`CUDAUnavailableError`), and whether
Numba's CUDA simulator is on.  The GPU code itself (the backend, its kernels and linear
algebra) is :mod:`fastep.backend.cuda`; this module stays where 0.2 put these names.
"""
from ..backend.cuda import CUDAUnavailableError, is_available, require, simulator_enabled

__all__ = ["is_available", "require", "CUDAUnavailableError", "simulator_enabled"]
