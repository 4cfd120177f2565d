"""Covariance functions: log-space hyperparameters, composition, gradients.

Every kernel is callable like a scikit-learn kernel, ``k(X, Y=None)``, and
exposes ``theta`` (log of the free hyperparameters), ``bounds`` (log space,
shape ``(n_free, 2)``) and ``clone_with_theta``.  Instead of scikit-learn's
``n x n x p`` gradient tensor, :meth:`Kernel.gradient_contract` returns
``sum_jk G_jk dK_jk/dtheta_p`` computed in compiled code; that is all the
evidence gradient ever needs.
"""
from __future__ import annotations

import copy
import numbers

import numpy as np


def _as_2d(X, name="X"):
    X = np.asarray(X, dtype=float)
    if X.ndim == 1:
        X = X[:, None]
    if X.ndim != 2:
        raise ValueError(f"{name} must be a 2-D array of shape (n_samples, n_features); "
                         f"got an array with shape {X.shape}.")
    return np.ascontiguousarray(X)


class Hyperparameter:
    """A positive kernel parameter, stored in natural units, optimised in log space."""

    def __init__(self, name, value, bounds=(1e-5, 1e5)):
        value = np.atleast_1d(np.asarray(value, dtype=float)).copy()
        if not np.all(np.isfinite(value)) or np.any(value <= 0):
            raise ValueError(f"The kernel parameter '{name}' must be positive and finite; "
                             f"got {value.tolist() if value.size > 1 else value[0]!r}.")
        self.name = name
        self.value = value
        self.fixed = isinstance(bounds, str) and bounds == "fixed"
        if not self.fixed:
            lo, hi = (float(b) for b in bounds)
            if not 0 < lo < hi:
                raise ValueError(f"bounds of '{name}' must satisfy 0 < low < high; got {bounds!r}.")
            self.bounds = (lo, hi)
        else:
            self.bounds = "fixed"

    @property
    def n_free(self):
        return 0 if self.fixed else self.value.size


class Kernel:
    """Base class.  Subclasses define ``_params`` (list of :class:`Hyperparameter`),
    ``__call__``, ``diag``, ``_contract_all(X, Y, G)`` (contraction for *every*
    parameter entry, fixed ones included; ``Y is None`` means ``K(X, X)``),
    ``_diag_contract_all(X, g)`` and ``_input_contract(X, Y, G)`` (see
    :meth:`input_gradient_contract`)."""

    _params: list

    # --- hyperparameter plumbing -------------------------------------------------
    def _leaf_params(self):
        return self._params

    @property
    def hyperparameter_names(self):
        return [p.name + (f"_{i}" if p.value.size > 1 else "")
                for p in self._leaf_params() if not p.fixed for i in range(p.value.size)]

    @property
    def n_dims(self):
        return sum(p.n_free for p in self._leaf_params())

    @property
    def theta(self):
        free = [np.log(p.value) for p in self._leaf_params() if not p.fixed]
        return np.concatenate(free) if free else np.zeros(0)

    @theta.setter
    def theta(self, theta):
        theta = np.asarray(theta, dtype=float)
        if theta.shape != (self.n_dims,):
            raise ValueError(f"theta must have shape ({self.n_dims},); got {theta.shape}.")
        k = 0
        for p in self._leaf_params():
            if not p.fixed:
                p.value = np.exp(theta[k:k + p.value.size])
                k += p.value.size

    @property
    def bounds(self):
        b = [np.log(np.tile(p.bounds, (p.value.size, 1)))
             for p in self._leaf_params() if not p.fixed]
        return np.vstack(b) if b else np.zeros((0, 2))

    def clone_with_theta(self, theta):
        k = copy.deepcopy(self)
        k.theta = theta
        return k

    def _free_mask(self):
        return np.concatenate([np.full(p.value.size, not p.fixed) for p in self._leaf_params()]
                              ) if self._leaf_params() else np.zeros(0, bool)

    def gradient_contract(self, X, G, Y=None):
        """``sum_jk G_jk dK_jk / dtheta_p`` for every free log-hyperparameter.

        ``K = self(X, Y)``; ``G`` is any weight matrix of the shape of ``K``.
        """
        X, Y, G = _contract_args(X, Y, G)
        full = np.asarray(self._contract_all(X, Y, G), dtype=float)
        return full[self._free_mask()]

    def diag_gradient_contract(self, X, g):
        """``sum_i g_i d k(x_i, x_i) / dtheta_p`` for every free log-hyperparameter."""
        X = _as_2d(X)
        full = np.asarray(self._diag_contract_all(X, np.asarray(g, dtype=float)), dtype=float)
        return full[self._free_mask()]

    def input_gradient_contract(self, X, G, Y=None):
        """``d/dX sum_jk G_jk K_jk`` with ``K = self(X, Y)``, shape of ``X``.

        With ``Y=None`` both arguments of ``K(X, X)`` move with ``X``.  Used for
        the gradient in inducing inputs.
        """
        X, Y, G = _contract_args(X, Y, G)
        if Y is None:
            return np.asarray(self._input_contract(X, X, G + G.T), dtype=float)
        return np.asarray(self._input_contract(X, Y, G), dtype=float)

    # --- composition ---------------------------------------------------------------
    def __add__(self, other):
        return Sum(self, _as_kernel_operand(other))

    __radd__ = __add__

    def __mul__(self, other):
        return Product(self, _as_kernel_operand(other))

    __rmul__ = __mul__

    def __repr__(self):
        args = ", ".join(f"{p.name}={_fmt(p.value)}" for p in self._params)
        return f"{type(self).__name__}({args})"

    def __eq__(self, other):
        return type(self) is type(other) and repr(self) == repr(other)

    __hash__ = object.__hash__

    def is_stationary(self):
        return False

    # serialisation (model save/load without pickle)
    def to_dict(self):
        return {"type": type(self).__name__,
                "params": {p.name: p.value.tolist() for p in self._params},
                "bounds": {p.name: p.bounds for p in self._params}}


def _contract_args(X, Y, G):
    X = _as_2d(X)
    Y = None if Y is None else _as_2d(Y, "Y")
    G = np.ascontiguousarray(G, dtype=float)
    shape = (X.shape[0], X.shape[0] if Y is None else Y.shape[0])
    if G.shape != shape:
        raise ValueError(f"G must have the shape of K(X, Y), {shape}; got {G.shape}.")
    return X, Y, G


def _fmt(v):
    return f"{v[0]:.4g}" if v.size == 1 else "[" + ", ".join(f"{x:.4g}" for x in v) + "]"


def _as_kernel_operand(other):
    if isinstance(other, Kernel):
        return other
    if isinstance(other, numbers.Real):
        return ConstantKernel(float(other))
    return as_kernel(other)


class _Composite(Kernel):
    def __init__(self, k1, k2):
        self.k1, self.k2 = k1, k2
        self._params = []

    def _leaf_params(self):
        return self.k1._leaf_params() + self.k2._leaf_params()

    def __repr__(self):
        return f"{self.k1!r} {self._op} {self.k2!r}"

    def to_dict(self):
        return {"type": type(self).__name__, "k1": self.k1.to_dict(), "k2": self.k2.to_dict()}


class Sum(_Composite):
    """k1 + k2."""
    _op = "+"

    def __call__(self, X, Y=None):
        return self.k1(X, Y) + self.k2(X, Y)

    def diag(self, X):
        return self.k1.diag(X) + self.k2.diag(X)

    def _contract_all(self, X, Y, G):
        return np.concatenate([self.k1._contract_all(X, Y, G), self.k2._contract_all(X, Y, G)])

    def _diag_contract_all(self, X, g):
        return np.concatenate([self.k1._diag_contract_all(X, g), self.k2._diag_contract_all(X, g)])

    def _input_contract(self, X, Y, G):
        return self.k1._input_contract(X, Y, G) + self.k2._input_contract(X, Y, G)

    def is_stationary(self):
        return self.k1.is_stationary() and self.k2.is_stationary()


class Product(_Composite):
    """k1 * k2; d(K1 o K2) = dK1 o K2 + K1 o dK2, contracted as (G o K2) with k1."""
    _op = "*"

    def __call__(self, X, Y=None):
        return self.k1(X, Y) * self.k2(X, Y)

    def diag(self, X):
        return self.k1.diag(X) * self.k2.diag(X)

    def _contract_all(self, X, Y, G):
        return np.concatenate([self.k1._contract_all(X, Y, G * self.k2(X, Y)),
                               self.k2._contract_all(X, Y, G * self.k1(X, Y))])

    def _diag_contract_all(self, X, g):
        return np.concatenate([self.k1._diag_contract_all(X, g * self.k2.diag(X)),
                               self.k2._diag_contract_all(X, g * self.k1.diag(X))])

    def _input_contract(self, X, Y, G):
        # called with the cross form (Y given); the symmetric case arrives as (X, X, G + G^T)
        return (self.k1._input_contract(X, Y, G * self.k2(X, Y))
                + self.k2._input_contract(X, Y, G * self.k1(X, Y)))

    def is_stationary(self):
        return self.k1.is_stationary() and self.k2.is_stationary()


class ConstantKernel(Kernel):
    """k(x, x') = constant."""

    def __init__(self, constant=1.0, constant_bounds=(1e-5, 1e5)):
        self._params = [Hyperparameter("constant", constant, constant_bounds)]

    def __call__(self, X, Y=None):
        X = _as_2d(X)
        m = X.shape[0] if Y is None else _as_2d(Y, "Y").shape[0]
        return np.full((X.shape[0], m), self._params[0].value[0])

    def diag(self, X):
        return np.full(_as_2d(X).shape[0], self._params[0].value[0])

    def _contract_all(self, X, Y, G):
        return [self._params[0].value[0] * G.sum()]

    def _diag_contract_all(self, X, g):
        return [self._params[0].value[0] * g.sum()]

    def _input_contract(self, X, Y, G):
        return np.zeros(X.shape)

    def is_stationary(self):
        return True


class WhiteKernel(Kernel):
    """k(x, x') = noise_level if x and x' are the same training point (Y is None), else 0."""

    def __init__(self, noise_level=1.0, noise_level_bounds=(1e-5, 1e5)):
        self._params = [Hyperparameter("noise_level", noise_level, noise_level_bounds)]

    def __call__(self, X, Y=None):
        X = _as_2d(X)
        if Y is None:
            return np.eye(X.shape[0]) * self._params[0].value[0]
        return np.zeros((X.shape[0], _as_2d(Y, "Y").shape[0]))

    def diag(self, X):
        return np.full(_as_2d(X).shape[0], self._params[0].value[0])

    def _contract_all(self, X, Y, G):
        return [self._params[0].value[0] * np.trace(G) if Y is None else 0.0]

    def _diag_contract_all(self, X, g):
        return [self._params[0].value[0] * g.sum()]

    def _input_contract(self, X, Y, G):
        return np.zeros(X.shape)

    def is_stationary(self):
        return True


class Linear(Kernel):
    """k(x, x') = variance * x . x' (Bayesian linear regression on the inputs)."""

    def __init__(self, variance=1.0, variance_bounds=(1e-5, 1e5)):
        self._params = [Hyperparameter("variance", variance, variance_bounds)]

    def __call__(self, X, Y=None):
        X = _as_2d(X)
        Y = X if Y is None else _as_2d(Y, "Y")
        return self._params[0].value[0] * (X @ Y.T)

    def diag(self, X):
        X = _as_2d(X)
        return self._params[0].value[0] * np.einsum("ij,ij->i", X, X)

    def _contract_all(self, X, Y, G):
        return [float(np.vdot(G, self(X, Y)))]

    def _diag_contract_all(self, X, g):
        return [float(g @ self.diag(X))]

    def _input_contract(self, X, Y, G):
        return self._params[0].value[0] * (G @ Y)


class SklearnKernel(Kernel):
    """Adapter for a scikit-learn kernel object.

    Its gradient is contracted from scikit-learn's ``(n, n, p)`` tensor, so it
    needs ``p`` times the memory of the Gram matrix; prefer fastep's own
    kernels for large n.
    """

    def __init__(self, kernel):
        self.kernel = kernel
        self._params = []

    @property
    def hyperparameter_names(self):
        return [h.name for h in self.kernel.hyperparameters if not h.fixed]

    @property
    def n_dims(self):
        return self.kernel.n_dims

    @property
    def theta(self):
        return self.kernel.theta

    @theta.setter
    def theta(self, theta):
        self.kernel = self.kernel.clone_with_theta(np.asarray(theta, dtype=float))

    @property
    def bounds(self):
        return self.kernel.bounds

    def __call__(self, X, Y=None):
        return np.ascontiguousarray(self.kernel(_as_2d(X), None if Y is None else _as_2d(Y, "Y")))

    def diag(self, X):
        return self.kernel.diag(_as_2d(X))

    def gradient_contract(self, X, G, Y=None):
        if Y is not None:
            raise ValueError(_SKLEARN_SPARSE)
        _, dK = self.kernel(_as_2d(X), eval_gradient=True)
        return np.einsum("ij,ijp->p", G, dK)

    def diag_gradient_contract(self, X, g):
        raise ValueError(_SKLEARN_SPARSE)

    def input_gradient_contract(self, X, G, Y=None):
        raise ValueError(_SKLEARN_SPARSE)

    def is_stationary(self):
        return self.kernel.is_stationary()

    def __repr__(self):
        return f"SklearnKernel({self.kernel!r})"

    def to_dict(self):
        raise ValueError("models with a scikit-learn kernel cannot be saved without pickle; "
                         "use an equivalent fastep kernel (fastep.kernels) to save the model.")


_SKLEARN_SPARSE = ("scikit-learn kernels give gradients only for K(X, X); inducing-point "
                   "models need a fastep kernel (fastep.kernels: RBF, Matern32, ...).")


def as_kernel(kernel):
    """Return a fastep kernel for ``kernel`` (fastep or scikit-learn kernel object)."""
    if isinstance(kernel, Kernel):
        return kernel
    if all(hasattr(kernel, a) for a in ("theta", "bounds", "clone_with_theta", "diag")):
        return SklearnKernel(kernel)
    raise ValueError(f"kernel must be a fastep.kernels.Kernel or a scikit-learn kernel; "
                     f"got {type(kernel).__name__}.")
