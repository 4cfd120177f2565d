"""Covariance functions (see :mod:`fastep.kernels._base` for the protocol)."""
from ._base import (ConstantKernel, Hyperparameter, Kernel, Linear, Product, SklearnKernel, Sum,
                    WhiteKernel, as_kernel)
from .stationary import RBF, Matern12, Matern32, Matern52

Constant = ConstantKernel
White = WhiteKernel

_TYPES = {c.__name__: c for c in (RBF, Matern12, Matern32, Matern52, Linear, ConstantKernel,
                                  WhiteKernel)}


def kernel_from_dict(d):
    """Rebuild a kernel saved with ``Kernel.to_dict`` (used by model save/load)."""
    if d["type"] in ("Sum", "Product"):
        k1, k2 = kernel_from_dict(d["k1"]), kernel_from_dict(d["k2"])
        return Sum(k1, k2) if d["type"] == "Sum" else Product(k1, k2)
    cls = _TYPES[d["type"]]
    kw = {name: v for name, v in d["params"].items()}
    kw.update({f"{name}_bounds": (b if isinstance(b, str) else tuple(b))
               for name, b in d["bounds"].items()})
    return cls(**kw)


__all__ = ["Kernel", "RBF", "Matern12", "Matern32", "Matern52", "Linear", "ConstantKernel",
           "Constant", "WhiteKernel", "White", "Sum", "Product", "SklearnKernel", "as_kernel",
           "Hyperparameter", "kernel_from_dict"]
