"""Robust-max multiclass likelihood (Hernandez-Lobato et al. 2011; GPflow's ``RobustMax``).

With J latent functions ``f = (f_1, ..., f_J)`` and label noise ``epsilon``::

    p(y = j | f) = 1 - epsilon           if j = argmax_l f_l
                 = epsilon / (J - 1)     otherwise.

Under independent Gaussian marginals ``f_l(x) ~ N(m_l, v_l)`` everything follows
from the probability that class j has the largest latent value,

    S(x, j) = E_{u ~ N(0, 1)} [ prod_{l != j} Phi((m_j + sqrt(v_j) u - m_l) / sqrt(v_l)) ]
            ~= sum_k w_k prod_{l != j} Phi((m_j + sqrt(v_j) x_k - m_l) / sqrt(v_l)),

a one-dimensional Gauss-Hermite rule with probabilists' nodes ``x_k`` and weights
``w_k`` summing to one (``fastep._numerics.gauss_hermite``).  This is the seed's
``1/sqrt(pi) sum_i w_i prod Phi((sqrt(2 r_j) xi_i + m_j - m_l) / sqrt(r_l))`` with
``x = sqrt(2) xi``.  Note the *standard deviations* ``sqrt(v)``: the GWI reference
code puts the variances there, which is a different (wrong) number.

* expected log-likelihood: ``E log p(y = j | f) = S log(1 - eps) + (1 - S) log(eps / (J - 1))``
* predictive class probability: ``p(y* = j) = (1 - eps) S(x*, j) + eps / (J - 1) (1 - S(x*, j))``

The hot loop (points x classes x nodes) runs in compiled parallel code; each
point owns its output row.
"""
from __future__ import annotations

from typing import Any, Dict, Tuple, Union

import math
import numbers

import numpy as np
from numpy.typing import ArrayLike
from numba import prange

from .._checks import float_array, index_array
from .._jit import jit, pjit
from .._numerics import SQRT_HALF as _SQRT_HALF
from .._numerics import MIN_VARIANCE, gauss_hermite

_TINY = 1e-18             # node terms below this are dropped (S is a probability)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


@jit
def prob_largest_one(mean, var, i, j, nodes, weights):
    """S(x_i, j) by Gauss-Hermite (scalar; shared by the CPU kernels and their GPU twins)."""
    sj = math.sqrt(var[i, j])
    mj = mean[i, j]
    acc = 0.0
    for k in range(nodes.shape[0]):
        t = mj + sj * nodes[k]
        p = weights[k]
        for l in range(mean.shape[1]):
            if l != j:
                p *= 0.5 * math.erfc((mean[i, l] - t) / math.sqrt(var[i, l]) * _SQRT_HALF)
                if p < _TINY:
                    break
        if p >= _TINY:
            acc += p
    return acc


@jit
def prob_largest_grad_one(mean, var, i, j, nodes, weights, scratch, ds_dmean, ds_dvar):
    """S(x_i, j) and its gradient in row i of the means and variances (written to row i
    of ``ds_dmean``, ``ds_dvar``); ``scratch`` has length >= 2J.

    With ``t_k = m_j + s_j x_k``, ``z_kl = (t_k - m_l) / s_l``, ``P_k = prod_{l != j} Phi(z_kl)``
    and ``c_kl = w_k P_k phi(z_kl) / Phi(z_kl) / s_l`` (s = standard deviation)::

        dS/dm_l = -sum_k c_kl            dS/dm_j = sum_{k, l != j} c_kl
        dS/ds_l = -sum_k c_kl z_kl       dS/ds_j = sum_{k, l != j} c_kl x_k

    and ``dS/dv = dS/ds / (2 s)``.  Node terms below 1e-18 are dropped: S and its
    gradient are accurate in absolute terms (S is a probability), which is all the
    expected log-likelihood needs.
    """
    J = mean.shape[1]
    for l in range(J):
        ds_dmean[i, l] = 0.0
        ds_dvar[i, l] = 0.0
        scratch[J + l] = math.sqrt(var[i, l])          # standard deviations; cdf in [0, J)
    sj = scratch[J + j]
    mj = mean[i, j]
    acc = 0.0
    ds_j = 0.0
    for k in range(nodes.shape[0]):
        t = mj + sj * nodes[k]
        p = weights[k]
        for l in range(J):
            if l != j:
                scratch[l] = 0.5 * math.erfc((mean[i, l] - t) / scratch[J + l] * _SQRT_HALF)
                p *= scratch[l]
        if p < _TINY:
            continue
        acc += p
        for l in range(J):
            if l != j:
                sl = scratch[J + l]
                z = (t - mean[i, l]) / sl
                c = p * math.exp(-0.5 * z * z) * _INV_SQRT_2PI / (scratch[l] * sl)
                ds_dmean[i, l] -= c
                ds_dmean[i, j] += c
                ds_dvar[i, l] -= c * z / (2.0 * sl)
                ds_j += c * nodes[k]
    ds_dvar[i, j] = ds_j / (2.0 * sj)
    return acc


@pjit
def prob_largest_all(mean, var, nodes, weights, out):
    """out[i, j] = S(x_i, j) for every point i and class j (value only)."""
    n, J = mean.shape
    for i in prange(n):
        for j in range(J):
            out[i, j] = prob_largest_one(mean, var, i, j, nodes, weights)


@pjit
def prob_largest_grad(mean, var, labels, nodes, weights, s, ds_dmean, ds_dvar):
    """S(x_i, labels[i]) and its gradient in every mean and variance of point i
    (:func:`prob_largest_grad_one`); row i of every output is owned by point i."""
    for i in prange(mean.shape[0]):
        scratch = np.empty(2 * mean.shape[1])
        s[i] = prob_largest_grad_one(mean, var, i, labels[i], nodes, weights, scratch, ds_dmean,
                                     ds_dvar)


def check_moments(mean: ArrayLike, var: ArrayLike,
                  n_classes: int) -> Tuple[np.ndarray, np.ndarray]:
    """Validate latent moments of shape (n, n_classes): C-ordered float arrays, the
    variances a new array with those below ``MIN_VARIANCE`` (:mod:`fastep._numerics`)
    raised to it (a point mass, to working precision)."""
    mean = float_array(mean, "mean", 2, (None, n_classes),
                       fix="One column per class: the latent means at each point.")
    var = float_array(var, "var", 2, mean.shape, positive=True,
                      fix="Variances (not standard deviations), shaped like mean.")
    var = var.clip(MIN_VARIANCE, None)
    return mean, var


#: :meth:`RobustMax.expected_log_lik`'s value, or with ``return_grad`` the value and its
#: gradients in the latent means and variances.
ExpectedLogLik = Union[float, Tuple[float, np.ndarray, np.ndarray]]


class RobustMax:
    """Robust-max likelihood for ``n_classes`` latent GPs, integrated by Gauss-Hermite.

    Parameters
    ----------
    n_classes : int >= 2
    epsilon : float in (0, (J - 1) / J), default=0.01
        Probability of a label other than the argmax (spread uniformly over the other
        J - 1 classes).  Wild, Hu & Sejdinovic (2022) use 0.01.
    n_nodes : int, default=20
        Gauss-Hermite nodes for S(x, j).

    Notes
    -----
    The methods here run the compiled CPU loops :func:`prob_largest_all` and
    :func:`prob_largest_grad`.  Their scalar parts, :func:`prob_largest_one` and
    :func:`prob_largest_grad_one`, are this likelihood's contract with the backends: the
    CUDA backend compiles them as device functions (``GWIClassifier(device="cuda")``) and
    combines its S with :meth:`expected_log_lik_from_prob` and :meth:`proba_from_prob`.

    References
    ----------
    D. Hernandez-Lobato, J. M. Hernandez-Lobato, P. Dupont (2011), Robust multi-class
    Gaussian process classification, NIPS.  V. D. Wild, R. Hu, D. Sejdinovic (2022),
    Generalized variational inference in function spaces, NeurIPS, appendix A.6.

    Examples
    --------
    >>> import numpy as np
    >>> lik = RobustMax(3, epsilon=0.01)
    >>> p = lik.predict_proba(np.array([[2.0, 0.0, 0.0]]), np.ones((1, 3)))
    >>> bool(p.argmax() == 0), round(float(p.sum()), 12)
    (True, 1.0)
    """

    n_classes: int
    epsilon: float
    n_nodes: int

    def __init__(self, n_classes: int, epsilon: float = 0.01, n_nodes: int = 20) -> None:
        if (not isinstance(n_classes, numbers.Integral) or isinstance(n_classes, bool)
                or n_classes < 2):
            raise ValueError(f"n_classes must be an integer >= 2 (robust-max needs at least two "
                             f"classes); got {n_classes!r}.")
        if not isinstance(epsilon, numbers.Real) or not 0.0 < epsilon < 1.0:
            raise ValueError(f"epsilon must be a float in the open interval (0, 1); got "
                             f"{epsilon!r}.")
        if epsilon >= (n_classes - 1) / n_classes:
            raise ValueError(f"epsilon must be below (J - 1)/J = {(n_classes - 1) / n_classes:.4g} "
                             f"for J = {n_classes} classes (otherwise a label is more likely to "
                             f"differ from the argmax than to equal it); got {epsilon!r}.")
        if (not isinstance(n_nodes, numbers.Integral) or isinstance(n_nodes, bool)
                or n_nodes < 1):
            raise ValueError(f"n_nodes must be a positive integer; got {n_nodes!r}.")
        self.n_classes = int(n_classes)
        self.epsilon = float(epsilon)
        self.n_nodes = int(n_nodes)

    @property
    def log_hit(self):
        """log(1 - epsilon): log p(y | f) when y is the argmax."""
        return math.log1p(-self.epsilon)

    @property
    def log_miss(self):
        """log(epsilon / (J - 1)): log p(y | f) otherwise."""
        return math.log(self.epsilon / (self.n_classes - 1))

    @property
    def nodes(self):
        """``(nodes, weights)`` of the probabilists' Gauss-Hermite rule used for S."""
        return gauss_hermite(self.n_nodes)

    def prob_largest(self, mean: ArrayLike, var: ArrayLike) -> np.ndarray:
        """S(x, j) for every row and class: array of shape (n, J).

        ``mean`` and ``var`` (variances, > 0) have shape (n, J).  The rows of S sum to
        one up to the quadrature error (see :meth:`predict_proba`).

        Parameters
        ----------
        mean : array_like of shape (n, J)
            Latent means of every class at each point.
        var : array_like of shape (n, J)
            Their latent variances (> 0; not standard deviations).
        """
        mean, var = check_moments(mean, var, self.n_classes)
        out = np.empty_like(mean)
        prob_largest_all(mean, var, *self.nodes, out)
        return out

    def prob_largest_grad(self, mean: ArrayLike, var: ArrayLike,
                          y: ArrayLike) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(S, dS/dmean, dS/dvar)`` of S(x_i, y_i) for integer labels ``y`` in [0, J).

        Parameters
        ----------
        mean : array_like of shape (n, J)
            Latent means of every class at each point.
        var : array_like of shape (n, J)
            Their latent variances (> 0; not standard deviations).
        y : array_like of shape (n,)
            Integer class labels in [0, J).

        Returns
        -------
        s : ndarray of shape (n,)
        ds_dmean, ds_dvar : ndarray of shape (n, J)
        """
        mean, var = check_moments(mean, var, self.n_classes)
        y = self.check_labels(y, mean.shape[0])
        s = np.empty(mean.shape[0])
        dm = np.empty_like(mean)
        dv = np.empty_like(mean)
        prob_largest_grad(mean, var, y, *self.nodes, s, dm, dv)
        return s, dm, dv

    def check_labels(self, y: ArrayLike, n: int) -> np.ndarray:
        """Validate class indices ``y`` for n rows; an int64 C-ordered array.

        Parameters
        ----------
        y : array_like of shape (n,)
            Integer class labels in [0, J).
        n : int
            Number of rows ``y`` must have.
        """
        return index_array(y, "y", n, self.n_classes)

    def expected_log_lik(self, mean: ArrayLike, var: ArrayLike, y: ArrayLike,
                         return_grad: bool = False) -> ExpectedLogLik:
        """``sum_i E_q log p(y_i | f(x_i))`` (and its gradients in mean and var if asked).

        ``E log p(y | f) = S log(1 - eps) + (1 - S) log(eps / (J - 1))``, S = S(x, y).

        Parameters
        ----------
        mean : array_like of shape (n, J)
            Latent means of every class at each point.
        var : array_like of shape (n, J)
            Their latent variances (> 0; not standard deviations).
        y : array_like of shape (n,)
            Integer class labels in [0, J).
        return_grad : bool, default False
            Also return the gradients in ``mean`` and ``var`` (arrays of shape (n, J)).
        """
        return self.expected_log_lik_from_prob(*self.prob_largest_grad(mean, var, y),
                                               return_grad=return_grad)

    def expected_log_lik_from_prob(self, s: np.ndarray, ds_dmean: np.ndarray,
                                   ds_dvar: np.ndarray,
                                   return_grad: bool = False) -> ExpectedLogLik:
        """:meth:`expected_log_lik` from ``(S, dS/dmean, dS/dvar)`` computed elsewhere.

        Parameters
        ----------
        s : ndarray of shape (n,)
            S(x_i, y_i) of each point's label (:meth:`prob_largest_grad`).
        ds_dmean, ds_dvar : ndarray of shape (n, J)
            Its gradients in the latent means and variances.
        return_grad : bool, default False
            Also return the gradients of the expected log-likelihood (shape (n, J)).
        """
        gain = self.log_hit - self.log_miss
        value = float(s.size * self.log_miss + gain * s.sum())
        if return_grad:
            return value, gain * ds_dmean, gain * ds_dvar
        return value

    def predict_proba(self, mean: ArrayLike, var: ArrayLike) -> np.ndarray:
        """p(y* = j) = (1 - eps) S_j + eps/(J - 1) (1 - S_j), shape (n, J).

        Gauss-Hermite does not make ``sum_j S(x, j)`` exactly one (each S_j is a
        separate integral); S is renormalised over classes first, so every row of the
        result sums to one to rounding.

        Parameters
        ----------
        mean : array_like of shape (n, J)
            Latent means of every class at each point.
        var : array_like of shape (n, J)
            Their latent variances (> 0; not standard deviations).
        """
        return self.proba_from_prob(self.prob_largest(mean, var))

    def proba_from_prob(self, s: np.ndarray) -> np.ndarray:
        """:meth:`predict_proba` from S(x, j) (shape (n, J)) computed elsewhere.

        Parameters
        ----------
        s : ndarray of shape (n, J)
            S(x_i, j) for every point and class (:meth:`prob_largest`).
        """
        s = s / s.sum(axis=1, keepdims=True)
        eps = self.epsilon
        return (1.0 - eps) * s + eps / (self.n_classes - 1) * (1.0 - s)

    def to_dict(self) -> Dict[str, Any]:
        """A JSON-able description (:func:`fastep.likelihoods.likelihood_from_dict`)."""
        return {"type": "RobustMax", "n_classes": self.n_classes, "epsilon": self.epsilon,
                "n_nodes": self.n_nodes}

    def __repr__(self):
        return f"RobustMax(n_classes={self.n_classes}, epsilon={self.epsilon:g})"
