"""The kernel protocol: log-space hyperparameters, gradients, any backend.  The algebra of
kernels (``+``, ``*``) is :mod:`fastep.kernels.algebra`; the constant, white-noise and
linear kernels :mod:`fastep.kernels.simple`; the stationary ones
:mod:`fastep.kernels.stationary` and :mod:`fastep.kernels.separable`; the scikit-learn
adapter :mod:`fastep.kernels.sklearn_adapter`.

Every kernel is callable like a scikit-learn kernel, ``k(X, Y=None)``, and exposes
``theta`` (log of the free hyperparameters), ``bounds`` (log space, shape
``(n_free, 2)``) and ``clone_with_theta``.  Instead of scikit-learn's ``n x n x p``
gradient tensor, :meth:`Kernel.gradient_contract` returns ``sum_jk G_jk dK_jk/dtheta_p``
computed in compiled code; that is all the evidence gradient ever needs.

Every public method takes ``backend=``: an object with the Gram operations of
:class:`fastep.kernels.gram.HostGram` (``fastep.backend.resolve("cuda")`` is one), on
whose arrays the Gram matrix is built and the contractions run.  ``None`` means the host
(NumPy and the compiled CPU loops).  A kernel class implements the hooks below once, in
terms of those operations, and so runs on every backend::

    _gram(be, X, Y)                  K(X, Y) (Y None: K(X, X)), an array of be
    _diag(be, X)                     k(x_i, x_i)
    _contract_all(be, X, Y, G)       sum G dK/dtheta_p for every parameter entry (host)
    _diag_contract_all(be, X, g)     sum_i g_i dk(x_i, x_i)/dtheta_p (host)
    _input_contract(be, X, Y, G)     d/dX sum G K(X, Y) with Y given (host, shape of X)

and, where ``_uses_gram``, ``_contract_gram(be, X, Y, G, K)``: ``_contract_all`` given
``K = K(X, Y)`` (the stationary kernels, whose derivatives are K times functions of the
inputs: a caller that holds K spares the kernel values).

Over 450 lines: one job, the kernel protocol: the hooks, the public methods over them
(each with its docstring and backend argument) and the hyperparameter records.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Optional, Tuple, Union

import copy

import numpy as np
from numpy.typing import ArrayLike

from .._checks import float_array, parameter_bounds
from .._theta import ThetaEntry, entries_of
from .gram import HOST


#: ``+`` and ``*`` of kernels: filled by :mod:`fastep.kernels.algebra` (which the package
#: imports with this module), so that the protocol does not import the kernels built on it.
_ALGEBRA: Dict[str, Callable[[Any, Any], Any]] = {}


def _as_2d(X: ArrayLike, name: str = "X", backend: Any = None) -> np.ndarray:
    """``X`` as a checked, C-ordered 2-d float array of ``backend`` (host when None); a 1-d
    X is one feature."""
    be = HOST if backend is None else backend
    return float_array(X, name, 2, column=True, xp=be.xp,
                       fix="Pass finite inputs of shape (n_samples, n_features).")


def _inputs(be: Any, X: ArrayLike, Y: Optional[ArrayLike]
            ) -> Tuple[np.ndarray, Optional[np.ndarray]]:
    """Checked X and Y (None: K(X, X)) with the same number of features."""
    X = _as_2d(X, "X", be)
    if Y is None:
        return X, None
    Y = _as_2d(Y, "Y", be)
    if Y.shape[1] != X.shape[1]:
        raise ValueError(f"Y must have the {X.shape[1]} feature(s) of X; got shape "
                         f"{tuple(Y.shape)}.")
    return X, Y


class Hyperparameter:
    """A positive kernel parameter, stored in natural units, optimised in log space.

    Parameters
    ----------
    name : str
        The parameter's name (``"lengthscale"``, ``"variance"``, ...): the keyword of its
        kernel's constructor, used in messages and in :meth:`Kernel.to_dict`.
    value : float or array-like
        The value, > 0 and finite: one number, or a 1-d array of them (one per input
        feature for an ARD lengthscale).
    bounds : (float, float) or "fixed", default (1e-5, 1e5)
        ``(low, high)`` with ``0 < low < high < inf``, in natural units (``theta`` is
        bounded by their logs); ``"fixed"`` keeps the value out of ``theta`` (not
        optimised).
    scalar : bool, default False
        Whether the parameter is one number (a ``ValueError`` for more than one value).

    Examples
    --------
    >>> p = Hyperparameter("lengthscale", [1.0, 2.0], bounds=(1e-3, 1e3))
    >>> p.n_free, p.bounds
    (2, (0.001, 1000.0))
    """

    def __init__(self, name: str, value: Union[float, ArrayLike],
                 bounds: Union[Tuple[float, float], str] = (1e-5, 1e5),
                 scalar: bool = False) -> None:
        try:
            value = np.atleast_1d(np.asarray(value, dtype=float)).copy()
        except (TypeError, ValueError):
            raise ValueError(f"The kernel parameter '{name}' must be a positive number"
                             f"{'' if scalar else ' or a 1-d array of them'}; got "
                             f"{value!r}.") from None
        if value.ndim != 1 or value.size == 0:
            raise ValueError(f"The kernel parameter '{name}' must be a positive number or a "
                             f"1-d array of them; got shape {value.shape}.")
        if scalar and value.size != 1:
            raise ValueError(f"The kernel parameter '{name}' is one number; got {value.size} "
                             f"values {value.tolist()}. Only lengthscales take one value per "
                             f"input column (ARD).")
        if not np.all(np.isfinite(value)) or np.any(value <= 0):
            bad = ~(np.isfinite(value) & (value > 0))
            i = int(np.flatnonzero(bad)[0])
            where = f"{value[i].item()!r}" if value.size == 1 else \
                f"{value[i].item()!r} at index {i} of {value.size}"
            raise ValueError(f"The kernel parameter '{name}' must be positive and finite; "
                             f"got {where}. It is a scale (a lengthscale or variance is "
                             f"often near 1 for standardised data): pass a value > 0.")
        self.name = name
        self.value = value
        self.bounds: Union[str, Tuple[float, float]]
        self.bounds = parameter_bounds(bounds, name)
        self.fixed = self.bounds == "fixed"

    @property
    def n_free(self):
        return 0 if self.fixed else self.value.size

    def __eq__(self, other):
        return (isinstance(other, Hyperparameter) and self.name == other.name
                and np.array_equal(self.value, other.value) and self.bounds == other.bounds)

    __hash__ = object.__hash__


class Kernel:
    """Base class of covariance functions (see the module docstring for the hooks).

    Subclasses define ``_params`` (a list of :class:`Hyperparameter`) and the hooks.

    Examples
    --------
    >>> import numpy as np
    >>> from fastep.kernels import RBF
    >>> k = RBF(variance=2.0, lengthscale=0.5)
    >>> k.theta.round(4).tolist(), k.bounds.shape
    ([0.6931, -0.6931], (2, 2))
    >>> k.clone_with_theta(np.zeros(2)) == RBF()
    True
    """

    _params: list
    # the hooks every kernel defines (see the module docstring)
    _gram: Callable[..., Any]
    _diag: Callable[..., Any]
    _input_contract: Callable[..., Any]
    _contract_all: Callable[..., Any]
    _diag_contract_all: Callable[..., Any]
    #: Whether the kernel contracts from its Gram matrix (``_contract_gram(be, X, Y, G,
    #: K)``, see :meth:`gradient_contract`).
    _uses_gram = False
    _contract_gram: Callable[..., Any]

    # --- hyperparameter plumbing -------------------------------------------------
    def _leaf_params(self):
        return self._params

    @property
    def n_dims(self):
        """Number of free (not fixed) log-hyperparameters."""
        return sum(p.n_free for p in self._leaf_params())

    @property
    def theta(self):
        """Log of the free hyperparameters, flattened."""
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
        """Log-space bounds of ``theta``, shape (n_dims, 2)."""
        b = [np.log(np.tile(p.bounds, (p.value.size, 1)))
             for p in self._leaf_params() if not p.fixed]
        return np.vstack(b) if b else np.zeros((0, 2))

    def clone_with_theta(self, theta: ArrayLike) -> Kernel:
        """A copy with log-hyperparameters ``theta`` (this kernel is not modified).

        Parameters
        ----------
        theta : array-like of shape (n_dims,)
            The log of the free (not fixed) hyperparameters, in the order of
            :attr:`theta`.
        """
        k = copy.deepcopy(self)
        k.theta = theta
        return k

    def theta_entries(self) -> list[ThetaEntry]:
        """How ML-II's messages name, show and bound each entry of :attr:`theta`: by the
        parameter's name (``lengthscale[1]`` for an ARD entry), shown as the parameter
        (theta holds its log), widened or fixed through the kernel's own
        ``<name>_bounds``.

        Examples
        --------
        >>> from fastep.kernels import RBF
        >>> [e.name for e in RBF(1.0, [1.0, 2.0]).theta_entries()]
        ['variance', 'lengthscale[0]', 'lengthscale[1]']
        """
        return [entry for p in self._leaf_params() if not p.fixed for entry in entries_of(
            p.name, p.value.size, f"the kernel's {p.name}=..., {p.name}_bounds=(low, high)",
            f"the kernel's {p.name}=..., {p.name}_bounds='fixed'")]

    def _free_mask(self):
        return np.concatenate([np.full(p.value.size, not p.fixed) for p in self._leaf_params()]
                              ) if self._leaf_params() else np.zeros(0, bool)

    # --- public evaluation --------------------------------------------------------
    def __call__(self, X: ArrayLike, Y: Optional[ArrayLike] = None,
                 backend: Any = None) -> np.ndarray:
        """Gram matrix ``K(X, Y)`` (``K(X, X)`` when Y is None), C-ordered."""
        be = HOST if backend is None else backend
        return self._gram(be, *_inputs(be, X, Y))

    def diag(self, X: ArrayLike, backend: Any = None) -> np.ndarray:
        """``k(x_i, x_i)`` for every row of X.

        Parameters
        ----------
        X : array-like of shape (n, d)
            The inputs (a 1-d X is one feature).
        backend : Backend or None, default None
            Where to compute (an object with the Gram operations of
            :class:`fastep.kernels.gram.HostGram`); None: the host.

        Returns
        -------
        ndarray of shape (n,)
            An array of ``backend``.
        """
        be = HOST if backend is None else backend
        return self._diag(be, _as_2d(X, "X", be))

    def gradient_contract(self, X: ArrayLike, G: ArrayLike, Y: Optional[ArrayLike] = None,
                          backend: Any = None, gram: Optional[ArrayLike] = None) -> np.ndarray:
        """``sum_jk G_jk dK_jk / dtheta_p`` for every free log-hyperparameter (host array).

        ``K = self(X, Y)``; ``G`` is any weight matrix of the shape of ``K``.  ``gram``:
        K itself, where the caller has it; a kernel whose derivatives are its values
        times functions of the inputs (the stationary kernels) then computes no kernel
        value again, the others ignore it.

        Parameters
        ----------
        X : array-like of shape (n, d)
            The first inputs of ``K``.
        G : array-like of shape (n, n2)
            The weights, of the shape of ``K = self(X, Y)`` (n2 = n when Y is None).
        Y : array-like of shape (n2, d) or None, default None
            The second inputs of ``K``; None: ``K(X, X)``.
        backend : Backend or None, default None
            Where to compute (an object with the Gram operations of
            :class:`fastep.kernels.gram.HostGram`); None: the host.
        gram : array-like of shape (n, n2) or None, default None
            ``K = self(X, Y)`` itself, where the caller has it (see above).

        Returns
        -------
        ndarray of shape (n_dims,)
            One entry per free log-hyperparameter, in the order of :attr:`theta`.
        """
        be = HOST if backend is None else backend
        if gram is None or not self._uses_gram:
            X, Y, G = _contract_args(be, X, Y, G)
            full = self._contract_all(be, X, Y, G)
        else:
            # a sum over every entry: as well G^T against K(Y, X) = K^T, which are
            # C-ordered where G and K are F-ordered (so not copied)
            swap = Y is not None and _f_ordered(G)
            A, B, W = _contract_args(be, X, Y, G, transpose=swap)
            K = _weights(be, gram, "gram", _gram_shape(A, B), swap)
            full = (self._contract_gram(be, B, A, W, K) if swap else
                    self._contract_gram(be, A, B, W, K))
        return np.asarray(full, dtype=np.float64)[self._free_mask()]

    def diag_gradient_contract(self, X: ArrayLike, g: ArrayLike,
                               backend: Any = None) -> np.ndarray:
        """``sum_i g_i d k(x_i, x_i) / dtheta_p`` for every free log-hyperparameter.

        Parameters
        ----------
        X : array-like of shape (n, d)
            The inputs.
        g : array-like of shape (n,)
            The weights, one per row of X.
        backend : Backend or None, default None
            Where to compute (an object with the Gram operations of
            :class:`fastep.kernels.gram.HostGram`); None: the host.

        Returns
        -------
        ndarray of shape (n_dims,)
            A host array, in the order of :attr:`theta`.
        """
        be = HOST if backend is None else backend
        X = _as_2d(X, "X", be)
        g = float_array(g, "g", 1, (X.shape[0],), xp=be.xp)
        full = np.asarray(self._diag_contract_all(be, X, g), dtype=np.float64)
        return full[self._free_mask()]

    def input_gradient_contract(self, X: ArrayLike, G: ArrayLike,
                                Y: Optional[ArrayLike] = None,
                                backend: Any = None) -> np.ndarray:
        """``d/dX sum_jk G_jk K_jk`` with ``K = self(X, Y)``, shape of ``X`` (host array).

        With ``Y=None`` both arguments of ``K(X, X)`` move with ``X``.  Used for
        the gradient in inducing inputs.

        Parameters
        ----------
        X : array-like of shape (n, d)
            The inputs the derivative is taken in.
        G : array-like of shape (n, n2)
            The weights, of the shape of ``K = self(X, Y)`` (n2 = n when Y is None).
        Y : array-like of shape (n2, d) or None, default None
            The fixed second inputs of ``K``; None: ``K(X, X)``.
        backend : Backend or None, default None
            Where to compute (an object with the Gram operations of
            :class:`fastep.kernels.gram.HostGram`); None: the host.
        """
        be = HOST if backend is None else backend
        X, Y, G = _contract_args(be, X, Y, G)
        if Y is None:
            return np.asarray(self._input_contract(be, X, X, G + G.T), dtype=np.float64)
        return np.asarray(self._input_contract(be, X, Y, G), dtype=np.float64)

    # --- composition ---------------------------------------------------------------
    def __add__(self, other):
        return _ALGEBRA["+"](self, other)

    __radd__ = __add__

    def __mul__(self, other):
        return _ALGEBRA["*"](self, other)

    __rmul__ = __mul__

    def __repr__(self):
        args = ", ".join(f"{p.name}={_fmt(p.value)}" for p in self._params)
        return f"{type(self).__name__}({args})"

    def __eq__(self, other):
        """Same class and exactly the same parameter values and bounds."""
        return type(self) is type(other) and self._leaf_params() == other._leaf_params()

    __hash__ = object.__hash__

    def is_stationary(self) -> bool:
        return False

    # serialisation (model save/load without pickle)
    def to_dict(self) -> Dict[str, Any]:
        """A JSON-able description (:func:`fastep.kernels.kernel_from_dict` inverts it)."""
        return {"type": type(self).__name__,
                "params": {p.name: p.value.tolist() for p in self._params},
                "bounds": {p.name: p.bounds for p in self._params}}


def _f_ordered(a: Any) -> bool:
    """Whether ``a`` is an F-ordered (not C-ordered) array, NumPy's or CuPy's."""
    flags = getattr(a, "flags", None)
    return bool(getattr(flags, "f_contiguous", False)
                and not getattr(flags, "c_contiguous", True))


def _weights(be: Any, a: ArrayLike, name: str, shape: Tuple[int, int], transpose: bool
             ) -> np.ndarray:
    """``a`` (of the shape of K(X, Y)) checked, or its transpose checked (``transpose``:
    C-ordered where ``a`` is F-ordered, so not copied); a message about a bad ``a``
    speaks of it as given."""
    fix = f"{name} has the shape of K(X, Y)."
    if not transpose:
        return float_array(a, name, 2, shape, xp=be.xp, fix=fix)
    arr: Any = be.xp.asarray(a)
    try:
        return float_array(arr.T, name, 2, shape[::-1], xp=be.xp, fix=fix)
    except ValueError:
        float_array(arr, name, 2, shape, xp=be.xp, fix=fix)   # raises in a's own terms
        raise


def _gram_shape(X: np.ndarray, Y: Optional[np.ndarray]) -> Tuple[int, int]:
    """The shape of K(X, Y) (Y None: K(X, X))."""
    return X.shape[0], X.shape[0] if Y is None else Y.shape[0]


def _contract_args(be: Any, X: ArrayLike, Y: Optional[ArrayLike], G: ArrayLike,
                   transpose: bool = False
                   ) -> Tuple[np.ndarray, Optional[np.ndarray], np.ndarray]:
    """Checked X, Y and G (``transpose``: G^T, see :func:`_weights`)."""
    X, Y = _inputs(be, X, Y)
    return X, Y, _weights(be, G, "G", _gram_shape(X, Y), transpose)


def _fmt(v):
    return f"{v[0]:.4g}" if v.size == 1 else "[" + ", ".join(f"{x:.4g}" for x in v) + "]"


#: The entries of a Parameters section every variance-and-lengthscale kernel shares: a
#: subclass's docstring names them ``{variance}``, ``{lengthscale}`` and ``{bounds}``
#: (:meth:`_VarianceLengthscale.__init_subclass__` writes them in, once, at class creation).
SHARED_PARAMETER_DOCS = {
    "{variance}": """variance : float, default 1.0
        The prior variance ``k(x, x)``, > 0.""",
    "{lengthscale}": """lengthscale : float or array-like of shape (n_features,), default 1.0
        l > 0, in the units of X: one for every feature, or one per feature (ARD).""",
    "{bounds}": """variance_bounds, lengthscale_bounds : (float, float) or "fixed", default (1e-5, 1e5)
        ML-II bounds: ``(low, high)`` in the parameter's own units (one pair for every
        ARD lengthscale), or ``"fixed"`` (not optimised).""",
}


class _VarianceLengthscale(Kernel):
    """A kernel whose first two parameters are a scalar ``variance`` and one lengthscale or
    one per input feature (ARD)."""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        doc = cls.__dict__.get("__doc__")
        if doc:
            for key, text in SHARED_PARAMETER_DOCS.items():
                doc = doc.replace(key, text)
            cls.__doc__ = doc

    @property
    def variance(self):
        return float(self._params[0].value[0])

    @property
    def lengthscale(self):
        ls = self._params[1].value
        return float(ls[0]) if ls.size == 1 else ls.copy()

    def _lengthscales(self, d):
        """One lengthscale per feature of a d-feature X (the scalar repeated), or a
        ``ValueError`` where the ARD count differs from d."""
        ls = self._params[1].value
        if ls.size == 1:
            return np.full(d, float(ls[0]))
        if ls.size != d:
            raise ValueError(f"{type(self).__name__} has {ls.size} ARD lengthscales but X has "
                             f"{d} features; pass one lengthscale per feature or a scalar.")
        return ls.copy()


class _OneParameter(Kernel):
    """A kernel with one scalar parameter (its value is ``self._value``)."""

    @property
    def _value(self):
        return float(self._params[0].value[0])

    def _diag_contract_all(self, be, X, g):
        return [self._value * float(be.xp.sum(g))]

    def _input_contract(self, be, X, Y, G):
        return np.zeros(X.shape)
