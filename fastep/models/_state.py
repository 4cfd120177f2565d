"""Fitted state to and from plain data (JSON-able values and NumPy arrays), for
:func:`fastep.save_model` and :func:`fastep.load_model`.

A model file is untrusted input: :class:`StateReader` checks every array's presence,
dtype, shape and finiteness, and every header value's type, before anything reaches
compiled code; what it rejects becomes a ``ValueError`` that names the field.
"""
from __future__ import annotations

import numbers

import numpy as np

from ..inference.ep import posterior_from_sites
from ..inference.sparse_ep import sparse_posterior_from_state
from ..kernels import kernel_from_dict
from ..likelihoods import likelihood_from_dict
from ._latent import LatentGP, MarkovGP


class StateReader:
    """Validated access to the header values and arrays of a model file."""

    def __init__(self, meta, arrays):
        self.meta, self.arrays = meta, arrays

    def value(self, key, kind, where=None):
        """Header value ``key`` of ``where`` (default: the estimator's state), of the Python
        type ``kind`` (bool, int, float, str, list, dict)."""
        where = self.meta if where is None else where
        if not isinstance(where, dict) or key not in where:
            raise ValueError(f"the header has no {key!r}")
        v = where[key]
        ok = {bool: lambda x: isinstance(x, bool),
              int: lambda x: isinstance(x, numbers.Integral) and not isinstance(x, bool),
              float: lambda x: isinstance(x, numbers.Real) and not isinstance(x, bool)
              and np.isfinite(x),
              str: lambda x: isinstance(x, str), list: lambda x: isinstance(x, list),
              dict: lambda x: isinstance(x, dict)}[kind](v)
        if not ok:
            raise ValueError(f"header value {key!r} must be {kind.__name__}; got {v!r:.60}")
        return v

    def array(self, name, shape, kind="f", allow_nan=False, allow_inf=False, any_dtype=False):
        """Array ``name`` of the given shape (None matches any length): float64 (kind "f")
        without NaN or infinity unless allowed, int64 (kind "i"), or any dtype of numbers or
        text (``any_dtype``)."""
        if name not in self.arrays:
            raise ValueError(f"the array {name!r} is missing")
        a = self.arrays[name]
        if any_dtype:
            ok = a.dtype.kind in "biufUS"
        else:
            ok = a.dtype == (np.float64 if kind == "f" else np.int64)
        if not ok:
            raise ValueError(f"the array {name!r} has dtype {a.dtype}; expected "
                             f"{'numbers or text' if any_dtype else np.dtype(kind + '8')}")
        if a.ndim != len(shape) or any(s is not None and s != t for s, t in zip(shape, a.shape)):
            want = "(" + ", ".join("n" if s is None else str(s) for s in shape) + ")"
            raise ValueError(f"the array {name!r} has shape {a.shape}; expected {want}")
        if kind == "f" and not any_dtype:
            if not allow_nan and np.any(np.isnan(a)):
                raise ValueError(f"the array {name!r} holds NaN")
            if not allow_inf and np.any(np.isinf(a)):
                raise ValueError(f"the array {name!r} holds infinity")
        return a                       # as stored (its memory order is part of exactness)

    def classes(self, count=None):
        """The class labels: distinct, sorted, finite when numbers, at least two (exactly
        ``count`` if given)."""
        classes = self.array("classes", (None,) if count is None else (count,),
                             any_dtype=True)
        if classes.dtype.kind == "f" and not np.all(np.isfinite(classes)):
            raise ValueError("the array 'classes' holds NaN or infinity")
        if classes.dtype.kind == "f" and not np.all(classes == np.round(classes)):
            raise ValueError("the array 'classes' holds non-integer numbers (a fit takes "
                             "integer, boolean or text labels)")
        if classes.size < 2 or not np.array_equal(np.unique(classes), classes):
            raise ValueError("the array 'classes' must hold at least two distinct sorted "
                             "labels")
        return classes


def latent_state(prefix, latent, result, arrays):
    """Header values of one fitted latent GP; its arrays go into ``arrays``."""
    arrays[f"{prefix}tau"] = np.asarray(result.site_tau, dtype=float)
    arrays[f"{prefix}nu"] = np.asarray(result.site_nu, dtype=float)
    if latent.sparse:
        arrays[f"{prefix}Z"] = latent.Z
        arrays[f"{prefix}L_P"], arrays[f"{prefix}b"] = result.q_factors
    meta = {"kernel": latent.kernel.to_dict(), "likelihood": latent.likelihood.to_dict(),
            "sparse": latent.sparse, "n_iter": int(result.n_iter),
            "converged": bool(result.converged)}
    if isinstance(latent, MarkovGP):
        meta["markov"] = True
    return meta


def latent_from_state(reader, meta, prefix, X, y, likelihood, config):
    """``(LatentGP, result)`` of a saved latent GP, its posterior rebuilt on the CPU from
    the stored sites (dense) or the stored q(u) (sparse) exactly as fitted."""
    kernel = kernel_from_dict(reader.value("kernel", dict, meta))
    n = X.shape[0]
    tau = reader.array(f"{prefix}tau", (n,))
    nu = reader.array(f"{prefix}nu", (n,))
    if reader.value("sparse", bool, meta):
        Z = reader.array(f"{prefix}Z", (None, X.shape[1]))
        m = Z.shape[0]
        if not 1 <= m <= n:
            raise ValueError(f"the array {prefix + 'Z'!r} must hold between 1 and {n} inducing "
                             f"inputs; got {m}")
        L_P = reader.array(f"{prefix}L_P", (m, m))     # only its lower triangle is read
        if not np.all(np.diag(L_P) > 0):
            raise ValueError(f"the array {prefix + 'L_P'!r} is not a Cholesky factor (its "
                             "diagonal must be positive)")
        b = reader.array(f"{prefix}b", (m,))
        latent = LatentGP(X, y, kernel, likelihood, config, Z)
        result = sparse_posterior_from_state(kernel, Z, X, y, likelihood, config.power, tau, nu,
                                             L_P, b)
    elif meta.get("markov", False):               # state-space EP: the filter at the sites
        if X.shape[1] not in (1, 2):
            raise ValueError("a state-space model (header value 'markov') needs a column of "
                             f"times and at most one of series ids; the stored X has "
                             f"{X.shape[1]}")
        latent = MarkovGP(X, y, kernel, likelihood, config)
        result = latent.run((tau, nu), max_iter=0)
    else:
        latent = LatentGP(X, y, kernel, likelihood, config)
        result = posterior_from_sites(kernel(X), y, likelihood, tau, nu)
    if not (np.isfinite(result.log_marginal_likelihood) and np.all(np.isfinite(result.mean))
            and np.all(np.isfinite(result.var))):
        raise ValueError(f"the stored posterior (arrays {prefix + 'tau'!r}, "
                         f"{prefix + 'nu'!r}{', L_P, b' if latent.sparse else ''}) is not "
                         "finite at the training inputs: its values are out of range")
    result.n_iter = reader.value("n_iter", int, meta)
    result.converged = reader.value("converged", bool, meta)
    return latent, result


def likelihood_of(reader, meta):
    """The built-in likelihood a header describes."""
    return likelihood_from_dict(reader.value("likelihood", dict, meta))
