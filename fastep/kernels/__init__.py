"""Covariance functions (see :mod:`fastep.kernels._base` for the protocol, and its
docstring for where each kind of kernel lives)."""
from __future__ import annotations

from typing import Any

from ._base import Hyperparameter, Kernel
from .algebra import Product, Sum
from .simple import ConstantKernel, Linear, WhiteKernel
from .sklearn_adapter import SklearnKernel, as_kernel
from . import _base

# Pickles made before the protocol was split from the kernels built on it (0.2 and 0.3
# until issue 62) name these classes in fastep.kernels._base: they resolve there still.
for _moved in (Sum, Product, ConstantKernel, WhiteKernel, Linear, SklearnKernel):
    setattr(_base, _moved.__name__, _moved)
del _moved
from .separable import Periodic, RationalQuadratic
from .stationary import RBF, Matern12, Matern32, Matern52

Constant = ConstantKernel
White = WhiteKernel

_TYPES = {c.__name__: c for c in (RBF, Matern12, Matern32, Matern52, RationalQuadratic,
                                  Periodic, Linear, ConstantKernel, WhiteKernel)}
_MAX_DEPTH = 32


def kernel_from_dict(d: Any, _depth: int = 0) -> Kernel:
    """Rebuild a kernel from :meth:`Kernel.to_dict`; a ``ValueError`` says what is wrong
    with a description that does not describe a fastep kernel (model files are untrusted).

    Parameters
    ----------
    d : dict
        A kernel description as :meth:`Kernel.to_dict` writes it: ``{"type": name,
        "params": {...}, "bounds": {...}}``, or ``{"type": "Sum" or "Product", "k1": ...,
        "k2": ...}`` (nested at most 32 levels deep).

    Returns
    -------
    Kernel
        The kernel it describes.

    Examples
    --------
    >>> from fastep.kernels import RBF, WhiteKernel
    >>> k = RBF(2.0, [1.0, 3.0]) + WhiteKernel(0.1)
    >>> kernel_from_dict(k.to_dict()) == k
    True
    """
    if not isinstance(d, dict) or not isinstance(d.get("type"), str):
        raise ValueError(f"a kernel description must be a dict with a 'type'; got {d!r:.80}.")
    kind = d["type"]
    if kind in ("Sum", "Product"):
        if _depth > _MAX_DEPTH:
            raise ValueError(f"kernel description nested deeper than {_MAX_DEPTH} levels.")
        k1 = kernel_from_dict(d.get("k1"), _depth + 1)
        k2 = kernel_from_dict(d.get("k2"), _depth + 1)
        return Sum(k1, k2) if kind == "Sum" else Product(k1, k2)
    if kind not in _TYPES:
        raise ValueError(f"unknown kernel type {kind!r}; fastep kernels are "
                         f"{sorted(_TYPES) + ['Sum', 'Product']}.")
    params, bounds = d.get("params"), d.get("bounds")
    if not (isinstance(params, dict) and isinstance(bounds, dict)):
        raise ValueError(f"the {kind} kernel description needs 'params' and 'bounds' dicts.")
    names = [p.name for p in _TYPES[kind]()._params]
    if set(params) != set(names) or set(bounds) != set(names):
        raise ValueError(f"the {kind} kernel has parameters {names}; the description gives "
                         f"{sorted(params)} with bounds for {sorted(bounds)}.")
    kw = dict(params)
    kw.update({f"{name}_bounds": (b if isinstance(b, str) else tuple(b)) if isinstance(
        b, (str, list, tuple)) else b for name, b in bounds.items()})
    try:
        return _TYPES[kind](**kw)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"invalid {kind} kernel description: {exc}") from None


__all__ = ["Kernel", "RBF", "Matern12", "Matern32", "Matern52", "RationalQuadratic", "Periodic",
           "Linear", "ConstantKernel",
           "Constant", "WhiteKernel", "White", "Sum", "Product", "SklearnKernel", "as_kernel",
           "Hyperparameter", "kernel_from_dict"]
