"""The GPU as a user sees it: whether ``device="cuda"`` can run on this machine
(:func:`is_available`), and, if not, everything that is missing (numba's CUDA target, a
driver with a GPU, CuPy) named in one error (:func:`require`,
:class:`CUDAUnavailableError`), and whether Numba's CUDA simulator is on.  The GPU code
itself (the backend, its kernels and linear algebra) is :mod:`fastep.backend.cuda`, which
asks this module before it starts.  Importing it imports neither numba's CUDA target nor
CuPy."""
from __future__ import annotations

import importlib

from ..exceptions import CUDAUnavailableError

__all__ = ["is_available", "require", "CUDAUnavailableError", "simulator_enabled",
           "cupy_usable"]


def _numba_cuda():
    """(module, None) or (None, reason) for ``numba.cuda``."""
    try:
        from numba import cuda
    except Exception as exc:   # pragma: no cover - numba without a CUDA target
        return None, f"numba.cuda cannot be imported ({type(exc).__name__}: {exc})"
    return cuda, None


def simulator_enabled() -> bool:
    """True when Numba's CUDA simulator is on (``NUMBA_ENABLE_CUDASIM=1``).

    Examples
    --------
    >>> import fastep.cuda
    >>> isinstance(fastep.cuda.simulator_enabled(), bool)
    True
    """
    from numba.core import config
    return bool(getattr(config, "ENABLE_CUDASIM", False))


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


def cupy_usable() -> bool:
    """True when CuPy (with ``cupyx.scipy.linalg``) imports: the dense algebra of
    ``device="cuda"`` needs it; multiclass GWI's robust-max products do not.

    Examples
    --------
    >>> import fastep.cuda
    >>> isinstance(fastep.cuda.cupy_usable(), bool)
    True
    """
    return _cupy_reason() is None


def is_available() -> bool:
    """True when CUDA kernels can run: a GPU with its driver, or the CUDA simulator.

    Examples
    --------
    >>> import fastep.cuda
    >>> device = "cuda" if fastep.cuda.is_available() else "cpu"
    """
    cuda, reason = _numba_cuda()
    return reason is None and _driver_reason(cuda) is None


def require(need_cupy: bool = True) -> None:
    """Raise :class:`CUDAUnavailableError` naming everything that is missing for the
    GPU path: numba's CUDA target (numba-cuda), a CUDA driver with a GPU, CuPy.

    Parameters
    ----------
    need_cupy : bool, default True
        Whether CuPy is required too (it is not checked under the CUDA simulator, which
        uses NumPy instead); False checks only numba's CUDA target and the driver.

    Examples
    --------
    >>> import fastep.cuda
    >>> try:
    ...     fastep.cuda.require()
    ... except fastep.cuda.CUDAUnavailableError as exc:
    ...     reason = str(exc)          # says what to install, or to use device='cpu'
    """
    missing = []
    cuda, reason = _numba_cuda()
    if reason is not None:
        missing.append(reason + "; install numba-cuda (pip install \"fastep[cuda]\")")
    else:
        reason = _driver_reason(cuda)
        if reason is not None:
            missing.append(reason + "; device='cuda' needs an NVIDIA GPU with its driver")
    if need_cupy and not simulator_enabled():       # the simulator uses NumPy instead
        reason = _cupy_reason()
        if reason is not None:
            missing.append(reason)
    if missing:
        raise CUDAUnavailableError(
            "device='cuda' is not usable on this machine: " + "; ".join(missing)
            + ". Use device='cpu' (the default) to run on the CPU.")
