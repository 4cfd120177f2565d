"""Dask arrays at fastep's boundary: telling one apart without importing dask, and the
per-observation data a fit on chunks can take."""
from __future__ import annotations

from typing import Any, TypeGuard

import numpy as np


def is_dask_array(a: object) -> TypeGuard[Any]:
    """Whether ``a`` is a ``dask.array.Array`` (or dask collection with a shape), told
    without importing dask (for a type checker, a true answer makes ``a`` a dask array,
    which is untyped here: dask is an optional extra)."""
    return type(a).__module__.split(".")[0] == "dask" and hasattr(a, "shape") \
        and hasattr(a, "__dask_graph__")


def scalar_data(data):
    """Per-observation data (name -> value) of a fit or prediction on dask arrays, which
    every chunk reads alike: scalars (or None) only, else a ValueError naming the arrays."""
    arrays = sorted(k for k, v in data.items() if v is not None and np.ndim(v))
    if arrays:
        raise ValueError(f"With a dask X the per-observation data {arrays} must be scalars "
                         f"(the same for every row); got arrays. Give per-row values with "
                         f"a NumPy X.")
    return data
