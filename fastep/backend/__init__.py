"""Where ``device`` is resolved, once, into the backend every algorithm runs on.

The public entry points (:func:`fastep.ep`, :func:`fastep.sparse_ep`, an estimator's
``fit``) call :func:`resolve` on their ``device`` argument and pass the resulting
:class:`Backend` down; nothing below them looks at ``device`` again.  The algorithms
of :mod:`fastep.inference` are written once over the backend's operations (see
:class:`Backend`), so CPU and GPU differ only in those operations.

* ``"cpu"``: :class:`fastep.backend.cpu.CPUBackend` (NumPy, LAPACK/BLAS, Numba loops).
* ``"cuda"``: :class:`fastep.backend.cuda.CUDABackend` (CuPy and ``numba.cuda``), imported
  on first use; ``import fastep`` never loads it.  Under Numba's CUDA simulator
  (``NUMBA_ENABLE_CUDASIM=1``) its kernels run in the simulator and its dense algebra in
  NumPy/SciPy (CuPy cannot run there), which is how the tests drive the GPU code path on
  machines without a GPU.
"""
from __future__ import annotations

from typing import Optional, Union

from ._base import CHUNK_ROWS, DEVICES, Backend  # noqa: F401  (CHUNK_ROWS: for sparse EP)

__all__ = ["Backend", "resolve", "DEVICES"]


def resolve(device: Union[str, Backend] = "cpu", owner: Optional[str] = None,
            dense_algebra: bool = True) -> Backend:
    """The backend for ``device``: ``"cpu"``, ``"cuda"`` or a :class:`Backend` (returned
    as it is).

    Parameters
    ----------
    device : {"cpu", "cuda"} or Backend, default "cpu"
    owner : str, optional
        Name of the estimator or function asking, for the error message.
    dense_algebra : bool, default=True
        Whether the caller needs the GPU's dense linear algebra (CuPy).  The robust-max
        products of multiclass GWI need numba's CUDA target only.

    Raises
    ------
    ValueError
        ``device`` is not one of the values above.
    fastep.cuda.CUDAUnavailableError
        ``"cuda"`` was asked for and something it needs is missing (the message says
        what: the driver and a GPU, numba-cuda, CuPy).

    Examples
    --------
    >>> from fastep.backend import resolve
    >>> resolve("cpu").name
    'cpu'
    >>> resolve(resolve("cpu")) is resolve("cpu")
    True
    """
    if isinstance(device, Backend):
        return device
    if not isinstance(device, str) or device not in DEVICES:
        where = f"of {owner} " if owner else ""
        raise ValueError(f"The 'device' parameter {where}must be one of {list(DEVICES)}. "
                         f"Got {device!r} instead.")
    if device == "cpu":
        from .cpu import CPU
        return CPU
    from .cuda import cuda_backend
    return cuda_backend(dense_algebra)
