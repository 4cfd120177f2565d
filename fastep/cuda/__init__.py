"""Optional CUDA path: the EP hot loops on an NVIDIA GPU through ``numba.cuda``.

Nothing here is imported by ``import fastep``; ``fastep.ep(..., device="cuda")``
and the estimators' ``device="cuda"`` import it on first use.  What runs on the GPU:

* the scalar tilted-moment functions of every likelihood, compiled as CUDA device
  functions from the *same Python source* as their CPU ``njit`` versions
  (:func:`fastep.cuda.kernels.device_function`), so there is one copy of the maths;
* per-site parallel EP and Power-EP updates, Gram matrices and their gradient
  contractions, the per-site marginals of sparse EP and the robust-max Gauss-Hermite
  products of multiclass GWI (:mod:`fastep.cuda.kernels`, each kernel beside its CPU
  twin's name; ``RobustMax(device="cuda")`` and ``GWIClassifier(device="cuda")``);
* dense factorisations through CuPy (cuSOLVER / cuBLAS): the dense parallel EP
  driver :func:`fastep.cuda.ep` and the sparse Power-EP driver
  :func:`fastep.cuda.sparse_ep` keep the data and sites on the device across sweeps.

Install with ``pip install "fastep[cuda]"`` (numba-cuda[cu12] and cupy-cuda12x).  The
kernels also run under Numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``, set
before numba is imported), which is how the test-suite compares every kernel
with its CPU twin on machines without a GPU.
"""
from __future__ import annotations

import importlib

__all__ = ["is_available", "require", "CUDAUnavailableError", "simulator_enabled", "ep",
           "sparse_ep", "gram", "gradient_contract", "prob_largest", "prob_largest_grad",
           "kernels"]


class CUDAUnavailableError(RuntimeError):
    """``device="cuda"`` was asked for but the CUDA stack is not usable here."""


def _numba_cuda():
    """(module, None) or (None, reason) for ``numba.cuda``."""
    try:
        from numba import cuda
    except Exception as exc:   # pragma: no cover - numba without a CUDA target
        return None, f"numba.cuda cannot be imported ({type(exc).__name__}: {exc})"
    return cuda, None


def simulator_enabled() -> bool:
    """True when Numba's CUDA simulator is on (``NUMBA_ENABLE_CUDASIM=1``)."""
    from numba.core import config
    return bool(config.ENABLE_CUDASIM)


def _driver_reason(cuda):
    if simulator_enabled():
        return None
    try:
        if cuda.is_available():
            return None
    except Exception as exc:   # pragma: no cover - defensive
        return f"numba.cuda.is_available() failed ({exc})"
    try:
        from numba.cuda.cudadrv import driver
        driver.driver.cuInit           # raises the driver's own explanation
    except Exception as exc:
        text = " ".join(str(exc).split()).rstrip(" :")
        return f"no usable CUDA driver or GPU ({text})"
    return "no CUDA-capable GPU was found (numba.cuda.is_available() is False)"


def _cupy_reason():
    try:
        importlib.import_module("cupy")
        importlib.import_module("cupyx.scipy.linalg")
    except Exception as exc:
        return (f"CuPy is not importable ({type(exc).__name__}: {exc}); install cupy-cuda12x "
                "(the 'cuda' extra: pip install \"fastep[cuda]\")")
    return None


def _test_backend_set():
    import sys
    mod = sys.modules.get("fastep.cuda._backend")
    return mod is not None and mod.DEFAULT is not None


def is_available() -> bool:
    """True when CUDA kernels can run: a GPU with its driver, or the CUDA simulator."""
    cuda, reason = _numba_cuda()
    return reason is None and _driver_reason(cuda) is None


def require(need_cupy: bool = True) -> None:
    """Raise :class:`CUDAUnavailableError` naming everything that is missing for the
    GPU path: numba's CUDA target (numba-cuda), a CUDA driver with a GPU, CuPy."""
    missing = []
    cuda, reason = _numba_cuda()
    if reason is not None:
        missing.append(reason + "; install numba-cuda (pip install \"fastep[cuda]\")")
    else:
        reason = _driver_reason(cuda)
        if reason is not None:
            missing.append(reason + "; device='cuda' needs an NVIDIA GPU with its driver")
    if need_cupy and not _test_backend_set():
        reason = _cupy_reason()
        if reason is not None:
            missing.append(reason)
    if missing:
        raise CUDAUnavailableError(
            "device='cuda' is not usable on this machine: " + "; ".join(missing)
            + ". Use device='cpu' (the default) to run on the CPU.")


# submodules have private names so that importing them never shadows these functions
_LAZY = {"ep": ("fastep.cuda._dense", "ep"), "sparse_ep": ("fastep.cuda._sparse", "sparse_ep"),
         "gram": ("fastep.cuda._gram", "gram"),
         "gradient_contract": ("fastep.cuda._gram", "gradient_contract"),
         "prob_largest": ("fastep.cuda._multiclass", "prob_largest"),
         "prob_largest_grad": ("fastep.cuda._multiclass", "prob_largest_grad"),
         "kernels": ("fastep.cuda.kernels", None)}


def __getattr__(name):
    if name in _LAZY:
        module, attr = _LAZY[name]
        mod = importlib.import_module(module)
        return mod if attr is None else getattr(mod, attr)
    raise AttributeError(f"module 'fastep.cuda' has no attribute {name!r}")
