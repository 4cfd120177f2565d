"""Stationary kernels: RBF (squared exponential) and the Matern family, ARD capable."""
from __future__ import annotations

from typing import Tuple, Union

import numpy as np
from numpy.typing import ArrayLike

from . import gram
from ._base import Hyperparameter, _VarianceLengthscale
from .distances import reused_distances


class _Stationary(_VarianceLengthscale):
    """``variance * g(r)``, ``r^2 = sum_d ((x_d - x'_d) / l_d)^2``; ``g`` is selected by the
    class's ``_kind`` in the compiled loops of :mod:`fastep.kernels.gram` (and their GPU
    twins), which the backend's ``stationary_*`` operations run."""

    _kind = -1

    def __init__(self, variance: float = 1.0, lengthscale: Union[float, ArrayLike] = 1.0,
                 variance_bounds: Union[Tuple[float, float], str] = (1e-5, 1e5),
                 lengthscale_bounds: Union[Tuple[float, float], str] = (1e-5, 1e5)) -> None:
        self._params = [Hyperparameter("variance", variance, variance_bounds, scalar=True),
                        Hyperparameter("lengthscale", lengthscale, lengthscale_bounds)]

    def _inv_ls(self, d):
        return 1.0 / self._lengthscales(d)

    def _args(self, be, X):
        return be.asarray(self._inv_ls(X.shape[1])), self.variance, self._kind

    def _distances(self, be, X, Y):
        """X's squared distances when they are being reused (:mod:`.distances`) on the
        host and this kernel has one lengthscale, else None."""
        if ((Y is None or Y is X) and self._params[1].value.size == 1
                and isinstance(be, gram.HostGram)):
            return reused_distances(X)
        return None

    def _gram(self, be, X, Y):
        D = self._distances(be, X, Y)
        if D is not None:
            return be.isotropic_gram(D, 1.0 / self._params[1].value[0], self.variance,
                                     self._kind)
        return be.stationary_gram(X, Y, *self._args(be, X))

    def _diag(self, be, X):
        return be.xp.full(X.shape[0], self.variance)

    _uses_gram = True

    def _contract_all(self, be, X, Y, G):
        D = self._distances(be, X, Y)
        if D is not None:
            return np.asarray(be.isotropic_contract(D, 1.0 / self._params[1].value[0],
                                                    self.variance, self._kind, G), dtype=float)
        return self._per_parameter(be.stationary_contract(X, Y, *self._args(be, X), G))

    def _contract_gram(self, be, X, Y, G, K):
        """The contraction given ``K = self(X, Y)``: dK/d log variance = K and dK/d log l_d
        = K (h / g)(r) t_d^2 (:func:`fastep.kernels.gram.shape_ratio`), no exponential."""
        inv_ls, _, kind = self._args(be, X)
        return self._per_parameter(be.stationary_gram_contract(
            X, X if Y is None else Y, inv_ls, kind, G, K))

    def _per_parameter(self, out):
        """The contraction per feature ``[variance, l_1, ..., l_d]`` per parameter entry
        (one lengthscale: the features' sum)."""
        out = np.asarray(out, dtype=float)
        if self._params[1].value.size == 1:
            return np.array([out[0], out[1:].sum()])
        return out

    def _diag_contract_all(self, be, X, g):
        return np.concatenate([[self.variance * float(be.xp.sum(g))],
                               np.zeros(self._params[1].value.size)])

    def _input_contract(self, be, X, Y, G):
        return be.stationary_input_contract(X, Y, *self._args(be, X), G)

    def is_stationary(self) -> bool:
        return True


class RBF(_Stationary):
    """Squared exponential kernel, ``variance * exp(-r^2 / 2)``.

    ``lengthscale`` may be a scalar or one value per feature (ARD).

    Parameters
    ----------
    {variance}
    {lengthscale}
    {bounds}

    Examples
    --------
    >>> import numpy as np
    >>> K = RBF(variance=2.0, lengthscale=0.5)(np.zeros((3, 1)))
    >>> K.tolist()[0]
    [2.0, 2.0, 2.0]
    """
    _kind = gram.RBF


class Matern12(_Stationary):
    """Matern 1/2 (exponential) kernel, ``variance * exp(-r)``.

    Parameters
    ----------
    {variance}
    {lengthscale}
    {bounds}

    Examples
    --------
    >>> import numpy as np
    >>> round(float(Matern12(lengthscale=1.0)(np.array([[0.0]]), np.array([[1.0]]))[0, 0]), 6)
    0.367879
    """
    _kind = gram.MATERN12


class Matern32(_Stationary):
    """Matern 3/2 kernel, ``variance * (1 + sqrt(3) r) exp(-sqrt(3) r)``.

    Parameters
    ----------
    {variance}
    {lengthscale}
    {bounds}

    Examples
    --------
    >>> import numpy as np
    >>> Matern32(variance=2.0)(np.zeros((1, 2))).tolist()
    [[2.0]]
    """
    _kind = gram.MATERN32


class Matern52(_Stationary):
    """Matern 5/2 kernel, ``variance * (1 + sqrt(5) r + 5 r^2 / 3) exp(-sqrt(5) r)``.

    Parameters
    ----------
    {variance}
    {lengthscale}
    {bounds}

    Examples
    --------
    >>> import numpy as np
    >>> Matern52(variance=3.0)(np.zeros((1, 2))).tolist()
    [[3.0]]
    """
    _kind = gram.MATERN52
