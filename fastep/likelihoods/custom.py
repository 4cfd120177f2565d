"""The user's own likelihood from a scalar log-density (:class:`CustomLikelihood`),
integrated by the quadrature of :mod:`fastep.likelihoods._quadrature` and compiled
for every target from the user's Python source."""
from __future__ import annotations

import numbers
from typing import Any, Callable, Dict, Optional

from numpy.typing import ArrayLike

import numba
import numpy as np
from numba import njit

from .._jit import TILTED_SIG
from ._base import Likelihood
from .._checks import float_array
from ._quadrature import _compile_quad, _no_peak, _peak_at_target


class CustomLikelihood(Likelihood):
    """A user likelihood from a scalar log-density, integrated numerically
    (:func:`fastep.likelihoods._quadrature.quad_tilted`).

    Parameters
    ----------
    log_lik : callable
        ``log_lik(y, extra, f, params) -> float`` written with ``math`` only
        (``extra`` and ``params`` are float arrays); it is compiled with Numba.
    params : dict, optional
        Positive parameters, passed to ``log_lik`` as a float array in order.
    log_concave : bool, default True
        Whether ``log_lik`` is concave in ``f`` (then site precisions are clipped at 0).
    binary : bool, default False
        Whether targets are labels in {-1, +1}.
    n_extra : int, default=0
        Columns of the per-site ``extra`` array that ``log_lik`` reads as ``extra[0] ...
        extra[n_extra - 1]`` (trials, exposures, limits: any per-row data): passed as
        ``extra=`` to :func:`fastep.ep`, or to an estimator's ``fit`` and ``predict``
        (an array of shape (n_samples, n_extra); a vector where n_extra is 1); it is
        checked to have exactly these columns.

    Raises
    ------
    TypeError
        ``log_lik`` cannot be compiled by Numba (the message says why).

    Notes
    -----
    The tilted function is a closure over your ``log_lik``, compiled once per
    instance (Numba cannot cache closures on disk), so creating one costs a compile
    of a few seconds; built-in likelihoods are cached.  ``log_lik`` runs as compiled
    code: it must not read ``extra`` beyond ``n_extra`` columns.

    Examples
    --------
    >>> import math
    >>> def log_lik(y, extra, f, params):      # probit written by hand
    ...     return math.log(0.5 * math.erfc(-y * f / math.sqrt(2.0)))
    >>> lik = CustomLikelihood(log_lik, binary=True)
    >>> float(round(lik.predict_proba([0.0], [1.0])[0], 6))
    0.5
    """

    def __init__(self, log_lik: Callable[..., float], params: Optional[Dict[str, float]] = None,
                 log_concave: bool = True, binary: bool = False, n_extra: int = 0) -> None:
        if not callable(log_lik):
            raise TypeError(f"log_lik must be a function log_lik(y, extra, f, params) -> "
                            f"float; got {type(log_lik).__name__}.")
        if isinstance(n_extra, bool) or not isinstance(n_extra, numbers.Integral) \
                or n_extra < 0:
            raise ValueError(f"n_extra must be an integer >= 0; got {n_extra!r}.")
        params = dict(params or {})
        self.param_names = tuple(params)
        self.log_concave = bool(log_concave)
        self.binary = bool(binary)
        self.n_extra = int(n_extra)
        # per-row data of an estimator's fit or predict (with_data), when log_lik reads some
        self.data_names = ("extra",) if self.n_extra else ()
        self.predict_data = self.data_names
        self.extra: Any = None
        super().__init__(**params)
        self.log_lik = log_lik if hasattr(log_lik, "compile") else njit(log_lik)
        user = self.log_lik

        @njit
        def bound(kind, y, extra, f, p):
            return user(y, extra, f, p)

        # not log-concave: the tilted density may have a second mode near the
        # likelihood's peak, assumed at f = y (as for location likelihoods)
        core = _compile_quad(bound, lik_peak=_no_peak if self.log_concave else _peak_at_target)
        concave = self.log_concave
        try:
            @njit(TILTED_SIG, error_model="numpy")
            def scalar_tilted(y, extra, mu, var, alpha, p):
                log_z, d1, d2, _ = core(-1, y, extra, mu, var, alpha, p, -1)
                # log-concave: tilted variance <= cavity variance, so d2 <= 0 up to the
                # quadrature's rounding, which is removed here
                return log_z, d1, min(d2, 0.0) if concave else d2
        except (numba.core.errors.NumbaError, numba.core.errors.UnsupportedBytecodeError) \
                as exc:
            noise = ("Failed in", "File ", "During", "<source", "^")
            lines = [ln.strip() for ln in str(exc).splitlines()
                     if ln.strip() and not ln.strip().startswith(noise)]
            first = (lines[0] if lines else type(exc).__name__)[:300]
            raise TypeError(f"log_lik could not be compiled by Numba: {first}  Write it as "
                            f"log_lik(y, extra, f, params) -> float with the math module "
                            f"only (imports at module level, no Python objects).") from None

        self.scalar_tilted = scalar_tilted

    def site_extra(self, n: int) -> np.ndarray:
        """The per-row data given to the estimator (:meth:`with_data`), checked: (n,
        n_extra); none is an error where ``log_lik`` reads some.

        Parameters
        ----------
        n : int
            Number of rows.
        """
        if not self.n_extra:
            return np.zeros((n, 0))
        if self.extra is None:
            raise ValueError(f"this CustomLikelihood reads {self.n_extra} extra column(s) "
                             f"per row (n_extra={self.n_extra}); pass them as extra=, an "
                             f"array of shape (n_samples, {self.n_extra}), to the "
                             f"estimator's fit and predict (or to fastep.ep).")
        extra: Any = self.extra if hasattr(self.extra, "compute") else \
            np.asarray(self.extra, dtype=np.float64)
        if self.n_extra == 1 and np.ndim(extra) == 1:
            extra = extra.reshape(-1, 1)
        return float_array(extra, "extra", 2, (n, self.n_extra),
                           fix=f"the likelihood reads {self.n_extra} extra column(s) per row.")

    def predict_y(self, mean: ArrayLike, var: ArrayLike) -> Any:
        """Not available: ``log_lik`` gives p(y | f) at the observed y only, not the
        distribution of y (its mean and variance).

        Parameters
        ----------
        mean, var : array_like of shape (n,)
            Mean and variance of the latent f at each point (not used: a ``ValueError``
            is raised).
        """
        raise ValueError("a CustomLikelihood gives p(y | f) at observed targets only, not "
                         "the mean and variance of y: use predict_latent for the latent f "
                         "(and map it to y's scale yourself), or a built-in likelihood.")

    def rows(self, start: int, stop: int) -> "CustomLikelihood":
        """This likelihood for the rows ``start:stop`` (their per-row data only).

        Parameters
        ----------
        start, stop : int
            First row and one past the last, as in the slice ``start:stop``.
        """
        if self.extra is None or not self.n_extra:
            return self
        new = self.__copy__()
        new.extra = self.site_extra(np.shape(self.extra)[0])[start:stop]
        return new

    def __copy__(self):
        # the compiled functions are immutable: copies share them (no recompilation)
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        return new

    def __deepcopy__(self, memo):
        new = self.__copy__()
        new._values, new._bounds = dict(self._values), dict(self._bounds)
        return new

    def __reduce__(self):
        # pickled as the user's Python function and the parameters; compiled anew on load
        return (_rebuild_custom, (getattr(self.log_lik, "py_func", self.log_lik),
                                  dict(self._values), dict(self._bounds), self.log_concave,
                                  self.binary, self.n_extra, self.extra))

    def to_dict(self) -> Dict[str, Any]:
        raise ValueError("a CustomLikelihood is Python code and cannot be saved without "
                         "pickle; save_model supports fastep's built-in likelihoods (pickle or "
                         "joblib keep a model with a custom likelihood).")


def _rebuild_custom(log_lik, values, bounds, log_concave, binary, n_extra=0, extra=None):
    lik = CustomLikelihood(log_lik, params=values, log_concave=log_concave, binary=binary,
                           n_extra=n_extra)
    lik._bounds = dict(bounds)
    lik.extra = extra
    return lik


