"""A scikit-learn kernel as a fastep kernel (:class:`SklearnKernel`, evaluated on the
host), and :func:`as_kernel`, which accepts either."""
from __future__ import annotations

from typing import Any, Dict, Optional

import numpy as np
from numpy.typing import ArrayLike

from .._theta import ThetaEntry
from ._base import Kernel, _as_2d
from .gram import HOST


class SklearnKernel(Kernel):
    """Adapter for a scikit-learn kernel object (evaluated on the host).

    Its gradient is contracted from scikit-learn's ``(n, n, p)`` tensor, so it
    needs ``p`` times the memory of the Gram matrix; prefer fastep's own
    kernels for large n.  Models with it cannot be saved (it is not described by
    parameters alone).

    Parameters
    ----------
    kernel : sklearn.gaussian_process.kernels.Kernel
        The scikit-learn kernel (its ``theta``, ``bounds`` and ``clone_with_theta`` become
        this kernel's).

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.gaussian_process.kernels import RBF as SkRBF
    >>> k = SklearnKernel(SkRBF(1.0))
    >>> float(k(np.zeros((1, 1)))[0, 0])
    1.0
    """

    def __init__(self, kernel: Any) -> None:
        shape, expected = np.shape(kernel.bounds), (kernel.n_dims, 2)
        if shape != expected:
            # scikit-learn itself fails later with "too many values to unpack"
            raise ValueError(
                f"kernel: the scikit-learn kernel {kernel!r} has hyperparameter bounds of "
                f"shape {shape}; expected {expected}, one (low, high) pair per "
                f"hyperparameter. A list of per-feature values passed as a *_bounds "
                f"argument is the usual cause (scikit-learn's RBF(1.0, [1.0] * 4) sets "
                f"length_scale_bounds): pass RBF(length_scale=[1.0] * 4), or use "
                f"fastep.kernels.RBF(variance, lengthscale).")
        self.kernel = kernel
        self._params = []

    def theta_entries(self) -> list[ThetaEntry]:
        """ML-II's names of :attr:`theta`'s entries (``kernel theta[i]``): their bounds
        are the scikit-learn kernel's own.

        Examples
        --------
        >>> from sklearn.gaussian_process.kernels import RBF as SkRBF
        >>> [e.name for e in SklearnKernel(SkRBF(1.0)).theta_entries()]
        ['kernel theta[0]']
        """
        hint = "the scikit-learn kernel's own bounds"
        return [ThetaEntry(f"kernel theta[{i}]", hint, hint) for i in range(self.n_dims)]

    def __eq__(self, other):
        return type(self) is type(other) and self.kernel == other.kernel

    __hash__ = object.__hash__

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

    def _gram(self, be, X, Y):
        K = self.kernel(be.to_host(X), None if Y is None else be.to_host(Y))
        return be.xp.ascontiguousarray(be.asarray(K))

    def _diag(self, be, X):
        return be.asarray(self.kernel.diag(be.to_host(X)))

    def gradient_contract(self, X: ArrayLike, G: ArrayLike, Y: Optional[ArrayLike] = None,
                          backend: Any = None, gram: Optional[ArrayLike] = None) -> np.ndarray:
        """``sum_jk G_jk dK_jk / dtheta_p`` for every log-hyperparameter, from
        scikit-learn's ``(n, n, p)`` gradient tensor (only for ``K(X, X)``).

        Parameters
        ----------
        X : array-like of shape (n, d)
            The inputs of ``K = self(X)``.
        G : array-like of shape (n, n)
            The weights.
        Y : array-like or None, default None
            Must be None: a ``ValueError`` otherwise (scikit-learn gives gradients only
            for ``K(X, X)``).
        backend : Backend or None, default None
            Whose arrays ``X`` and ``G`` are (the contraction runs on the host); None: the
            host.
        gram : array-like or None, default None
            Ignored (scikit-learn evaluates ``K`` with its gradient).

        Returns
        -------
        ndarray of shape (n_dims,)
        """
        if Y is not None:
            raise ValueError(_SKLEARN_SPARSE)
        be = HOST if backend is None else backend
        _, dK = self.kernel(be.to_host(_as_2d(X, "X", be)), eval_gradient=True)
        return np.einsum("ij,ijp->p", be.to_host(G), dK)

    def diag_gradient_contract(self, X: ArrayLike, g: ArrayLike,
                               backend: Any = None) -> np.ndarray:
        """Not available: raises ``ValueError`` (the inducing-point models that call it
        need a fastep kernel).

        Parameters
        ----------
        X : array-like of shape (n, d)
            The inputs.
        g : array-like of shape (n,)
            The weights, one per row of X.
        backend : Backend or None, default None
            Where the computation would run; None: the host.
        """
        raise ValueError(_SKLEARN_SPARSE)

    def input_gradient_contract(self, X: ArrayLike, G: ArrayLike,
                                Y: Optional[ArrayLike] = None,
                                backend: Any = None) -> np.ndarray:
        """Not available: raises ``ValueError`` (the inducing-point models that call it
        need a fastep kernel).

        Parameters
        ----------
        X : array-like of shape (n, d)
            The inputs the derivative would be taken in.
        G : array-like of shape (n, n2)
            The weights, of the shape of ``K(X, Y)``.
        Y : array-like of shape (n2, d) or None, default None
            The second inputs; None: ``K(X, X)``.
        backend : Backend or None, default None
            Where the computation would run; None: the host.
        """
        raise ValueError(_SKLEARN_SPARSE)

    def is_stationary(self) -> bool:
        return self.kernel.is_stationary()

    def __repr__(self):
        return f"SklearnKernel({self.kernel!r})"

    def to_dict(self) -> Dict[str, Any]:
        raise ValueError("models with a scikit-learn kernel cannot be saved without pickle; "
                         "use an equivalent fastep kernel (fastep.kernels) to save the model.")


_SKLEARN_SPARSE = ("scikit-learn kernels give gradients only for K(X, X); inducing-point "
                   "models need a fastep kernel (fastep.kernels: RBF, Matern32, ...).")


def as_kernel(kernel: Any) -> Kernel:
    """Return a fastep kernel for ``kernel`` (fastep or scikit-learn kernel object).

    Parameters
    ----------
    kernel : Kernel or sklearn.gaussian_process.kernels.Kernel
        A fastep kernel (returned as is) or a scikit-learn kernel (wrapped in a
        :class:`SklearnKernel`); anything else raises ``ValueError``.

    Examples
    --------
    >>> from fastep.kernels import RBF
    >>> as_kernel(RBF()) == RBF()
    True
    """
    if isinstance(kernel, Kernel):
        return kernel
    if all(hasattr(kernel, a) for a in ("theta", "bounds", "clone_with_theta", "diag")):
        return SklearnKernel(kernel)
    raise ValueError(f"kernel must be a fastep.kernels.Kernel or a scikit-learn kernel; "
                     f"got {type(kernel).__name__}.")
