"""Multiple noisy annotators (Rodrigues, Pereira & Ribeiro, ICML 2014).

Each instance has a latent true label z_i with ``p(z_i = 1 | f_i) = Phi(f_i)``, and
annotator r reports y_ir with sensitivity alpha_r = p(y = 1 | z = 1) and specificity
beta_r = p(y = 0 | z = 0).  Summing out z_i gives the per-instance likelihood::

    p(y_i | f_i) = b_i + (a_i - b_i) Phi(f_i) = a_i Phi(f_i) + b_i Phi(-f_i)
    a_i = prod_r alpha_r^y_ir (1 - alpha_r)^(1 - y_ir),  b_i = prod_r (1 - beta_r)^y_ir beta_r^(1 - y_ir)

over the annotators who labelled i.  a_i and b_i are kept in log space (products of
many probabilities underflow).  The likelihood is not log-concave, so EP site
precisions can be negative: the engine then uses its split factorisation (see
:mod:`fastep.inference.ep`).
"""
from __future__ import annotations

from typing import Any, Dict, Optional

import copy
import math

import numpy as np
from numpy.typing import ArrayLike
from scipy.special import ndtr

from .._jit import tilted_function
from .._numerics import log_add_exp, log_phi, mills, mills_shift
from ._base import Likelihood
from ._quadrature import quad_tilted
from ._scalar import ANNOTATORS


@tilted_function
def annotators_tilted(y, extra, mu, var, alpha, params):
    """alpha = 1 (paper, eq. 3-6, supplement typos corrected): with c = sqrt(1 + v),
    z = mu / c, Z = a Phi(z) + b Phi(-z), weights w_a = a Phi(z)/Z, w_b = b Phi(-z)/Z,
    r = (a - b) phi(z) / Z = w_a lambda(z) - w_b lambda(-z)  (lambda = phi/Phi)::

        d log Z / d mu = r / c,   d2 log Z / d mu2 = -r (z + r) / c^2,
        z + r = w_a (z + lambda(z)) - w_b (-z + lambda(-z))   (no cancellation).

    Other alpha: numerical quadrature of alpha * log(a Phi(f) + b Phi(-f))."""
    if alpha != 1.0:
        return quad_tilted(ANNOTATORS, y, extra, mu, var, alpha, params)
    log_a = extra[0]
    log_b = extra[1]
    c = math.sqrt(1.0 + var)
    z = mu / c
    la = log_a + log_phi(z)
    lb = log_b + log_phi(-z)
    log_z = log_add_exp(la, lb)
    if log_z == -math.inf:
        return log_z, 0.0, 0.0
    wa = math.exp(la - log_z)
    wb = math.exp(lb - log_z)
    r = wa * mills(z) - wb * mills(-z)
    zr = wa * mills_shift(z) - wb * mills_shift(-z)
    return log_z, r / c, -r * zr / (c * c)


class MultiAnnotator(Likelihood):
    """Likelihood of an (n, R) matrix of noisy binary labels from R annotators.

    Parameters
    ----------
    labels : array (n, R)
        1 / 0 labels (any two values are mapped by the estimator), NaN = not labelled.
    sensitivity, specificity : array (R,)
        alpha_r and beta_r, each in (0, 1) (1.0 and 0.0 allowed for exact labels).

    ``site_extra`` holds ``(log a_i, log b_i)`` per instance; ``tilted`` ignores ``y``.
    An instance nobody labelled has a = b = 1, i.e. a flat likelihood: it is an
    unlabelled point of the GP.

    Examples
    --------
    >>> import numpy as np
    >>> lik = MultiAnnotator(np.array([[1.0, 0.0], [1.0, np.nan]]), [0.9, 0.6], [0.8, 0.7])
    >>> lik.site_extra(2).shape
    (2, 2)
    """

    log_concave = False
    binary = True
    scalar_tilted = staticmethod(annotators_tilted)
    n_extra = 2                  # (log a_i, log b_i)
    extra_allows_inf = True      # log 0: an exact annotator contradicts one class

    def __init__(self, labels: ArrayLike, sensitivity: ArrayLike,
                 specificity: ArrayLike) -> None:
        super().__init__()
        self.labels = np.asarray(labels, dtype=float)
        if self.labels.ndim != 2:
            raise ValueError(f"labels must be an (n, R) matrix; got shape {self.labels.shape}.")
        ok = np.isnan(self.labels) | (self.labels == 0) | (self.labels == 1)
        if not np.all(ok):
            raise ValueError("labels must hold 0, 1 or NaN (not labelled).")
        self._set_reliabilities(sensitivity, specificity)

    def predict_proba(self, mean: ArrayLike, var: ArrayLike) -> np.ndarray:
        """P(true label = +1) = Phi(mean / sqrt(1 + var)) at f ~ N(mean, var): the
        probit link of the true label (the annotators' labels do not enter a
        prediction; the inherited rule would give the likelihood of the stored labels).

        Parameters
        ----------
        mean, var : array_like of shape (n,)
            Mean and variance of the latent f at each point.

        Examples
        --------
        >>> import numpy as np
        >>> lik = MultiAnnotator(np.array([[1.0]]), [0.9], [0.8])
        >>> float(lik.predict_proba([0.0], [1.0])[0])
        0.5
        """
        mean = np.asarray(mean, dtype=float)
        return ndtr(mean / np.sqrt(1.0 + np.asarray(var, dtype=float)))

    def _set_reliabilities(self, sensitivity, specificity):
        r = self.labels.shape[1]
        sens = np.asarray(sensitivity, dtype=float).reshape(-1)
        spec = np.asarray(specificity, dtype=float).reshape(-1)
        for name, v in (("sensitivity", sens), ("specificity", spec)):
            if v.shape != (r,) or not np.all((v >= 0) & (v <= 1)):
                raise ValueError(f"{name} must be {r} probabilities in [0, 1]; got {v!r}.")
        self.sensitivity, self.specificity = sens, spec
        self._extra = log_ab(self.labels, sens, spec)
        _check_log_ab(self._extra, "the labels' log-likelihoods")

    def with_reliabilities(self, sensitivity: ArrayLike,
                           specificity: ArrayLike) -> MultiAnnotator:
        """A copy with other sensitivities and specificities (the labels are shared; this
        likelihood is not modified).

        Parameters
        ----------
        sensitivity, specificity : array_like of shape (R,)
            alpha_r = p(y = 1 | z = 1) and beta_r = p(y = 0 | z = 0) of each annotator,
            in [0, 1].
        """
        new = copy.copy(self)
        new._values = {}
        new._set_reliabilities(sensitivity, specificity)
        return new

    def encode_targets(self, y: ArrayLike) -> np.ndarray:
        """Ones, one per entry of ``y`` (the labels are in ``extra``; a chunk of rows gets
        its own length).

        Parameters
        ----------
        y : array_like of shape (n, ...) or scalar
            Only its length is read; a scalar stands for all the instances held.
        """
        return np.ones(np.shape(y)[0] if np.ndim(y) else self.labels.shape[0])

    def check_targets(self, y: ArrayLike) -> np.ndarray:
        """Ones: ``y`` is not read (the labels are in ``extra``).

        Parameters
        ----------
        y : array_like of shape (n, ...)
            Only its length is read.
        """
        return np.ones(np.shape(y)[0])

    def rows(self, start: int, stop: int) -> MultiAnnotator:
        """A copy holding the labels of the instances ``start:stop`` only.

        Parameters
        ----------
        start, stop : int
            First instance and one past the last, as in the slice ``start:stop``.
        """
        part = copy.copy(self)
        part.labels, part._extra = self.labels[start:stop], self._extra[start:stop]
        return part

    def site_extra(self, n: int) -> np.ndarray:
        """Per-instance ``(log a_i, log b_i)`` of the labels held, shape (n, 2).

        Parameters
        ----------
        n : int
            Number of sites; must be the number of instances held (a ``ValueError``
            otherwise).
        """
        if n != self._extra.shape[0]:
            raise ValueError(f"MultiAnnotator holds labels for {self._extra.shape[0]} instances; "
                             f"got {n}.")
        return self._extra

    def check_extra(self, extra: Optional[ArrayLike], n: int) -> np.ndarray:
        """Per-site ``(log a_i, log b_i)``, checked: log-probabilities (<= 0), not both
        -inf (labels impossible under either class).

        Parameters
        ----------
        extra : array_like of shape (n, 2) or None
            Per-instance ``(log a_i, log b_i)``; None: those of the labels held
            (:meth:`site_extra`).
        n : int
            Number of instances.
        """
        extra = super().check_extra(extra, n)
        _check_log_ab(extra, "extra")
        return extra

    def to_dict(self) -> Dict[str, Any]:
        """The type only: the labels and reliabilities are arrays, which
        MultiAnnotatorGPClassifier stores beside its other data when it is saved."""
        return {"type": "MultiAnnotator", "n_annotators": int(self.labels.shape[1])}


def _xlogy(x, y):
    """x * log(y) with 0 * log(0) = 0."""
    with np.errstate(divide="ignore"):
        return np.where(x == 0, 0.0, x * np.log(np.where(x == 0, 1.0, y)))


def _check_log_ab(log_ab_, name):
    """Raise unless every row is a pair of log-probabilities, not both -inf."""
    if np.any(log_ab_ > 0):
        i = int(np.argwhere(log_ab_ > 0)[0, 0])
        raise ValueError(f"{name} must hold log-probabilities (<= 0); row {i} is "
                         f"{log_ab_[i].tolist()}.")
    both = np.all(np.isneginf(log_ab_), axis=1)
    if np.any(both):
        i = int(np.flatnonzero(both)[0])
        raise ValueError(f"the labels of instance {i} are impossible under both classes: "
                         "annotators with sensitivity or specificity exactly 1 contradict "
                         "each other there. Use reliabilities below 1, or drop that "
                         "instance's conflicting labels.")


def log_ab(labels, sensitivity, specificity):
    """(n, 2) array of log a_i, log b_i; missing labels contribute nothing."""
    lab = np.nan_to_num(labels, nan=0.0)
    seen = ~np.isnan(labels)
    pos = lab * seen
    neg = (1.0 - lab) * seen
    log_a = (_xlogy(pos, sensitivity[None, :]) + _xlogy(neg, 1.0 - sensitivity[None, :])).sum(1)
    log_b = (_xlogy(pos, 1.0 - specificity[None, :]) + _xlogy(neg, specificity[None, :])).sum(1)
    return np.ascontiguousarray(np.column_stack([log_a, log_b]))
