"""The EM of the annotators' reliabilities and its two baselines (Rodrigues, Pereira &
Ribeiro, ICML 2014): the label matrix checked, the closed-form M-step (eqs. 8, 10), the
true-label posterior from EP's cavities, EM inside dense EP's sweeps; majority vote
and concatenated labels, the paper's MV and CONC baselines.
:class:`~fastep.MultiAnnotatorGPClassifier` runs them."""
from __future__ import annotations

from typing import Tuple

import numpy as np
from scipy.special import log_ndtr

from ..typing import ArrayLike, RandomStateLike
from .._dask import is_dask_array
from ._validation import class_labels

_EPS = 1e-6


def _label_matrix(Y, n):
    """Validate an (n, R) label matrix (a vector: one annotator); return (classes, Y01 with
    NaN for missing)."""
    Y = np.asarray(Y, dtype=object if np.asarray(Y).dtype.kind in "OUS" else float)
    if Y.ndim == 1:
        Y = Y[:, None]
    if Y.ndim != 2 or Y.shape[0] != n:
        raise ValueError(f"Y must be an (n_samples, n_annotators) matrix with n_samples = {n} "
                         f"rows (one column per annotator, NaN = not labelled); got shape "
                         f"{Y.shape}.")
    missing = np.array([[v is None or (isinstance(v, float) and np.isnan(v)) for v in row]
                        for row in Y]) if Y.dtype == object else np.isnan(Y)
    if Y.dtype != object and np.any(np.isinf(Y)):
        raise ValueError("Y holds infinite values; it must hold two label values (one per "
                         "class), NaN where an annotator gave no label.")
    values = class_labels(Y[~missing], name="Y") if np.any(~missing) else np.array([])
    if values.size != 2:
        raise ValueError(f"Only binary classification is supported: Y must hold exactly two "
                         f"label values besides NaN (one per class); got {values.size} "
                         f"class(es): {values[:6].tolist()}.")
    Y01 = np.where(missing, np.nan, (Y == values[1]).astype(float))
    empty = np.flatnonzero(np.all(missing, axis=0))
    if empty.size:
        raise ValueError(f"annotator column(s) {empty.tolist()} of Y hold no labels; drop them "
                         "(their sensitivity and specificity cannot be estimated).")
    return values, Y01.astype(float)


def _on_host(*arrays):
    """NumPy arrays of ``arrays``, dask ones computed together (EM of a fit on Dask)."""
    if any(is_dask_array(a) for a in arrays):
        import dask
        arrays = dask.compute(*arrays)
    return tuple(np.asarray(a) for a in arrays)


def m_step(Y01, p):
    """Closed-form sensitivity and specificity (paper eqs. 8, 10) over labelled items:
    alpha_r = sum_i y_ir p_i / sum_i p_i,  beta_r = sum_i (1 - y_ir)(1 - p_i) / sum_i (1 - p_i),
    kept inside [1e-6, 1 - 1e-6]."""
    seen = ~np.isnan(Y01)
    y = np.nan_to_num(Y01)
    pw = p[:, None] * seen
    qw = (1.0 - p)[:, None] * seen
    sens = (y * pw).sum(0) / np.maximum(pw.sum(0), 1e-300)
    spec = ((1.0 - y) * qw).sum(0) / np.maximum(qw.sum(0), 1e-300)
    return np.clip(sens, _EPS, 1 - _EPS), np.clip(spec, _EPS, 1 - _EPS)


def true_label_posterior(extra, cavity_mean, cavity_var):
    """p(z_i = 1 | data) from the tilted distribution: a_i Phi(eta_i) / Z_i,
    eta_i = mu_-i / sqrt(1 + v_-i) (the natural EP choice; it uses the labels of i
    through a_i, b_i and everything else through the cavity)."""
    eta = cavity_mean / np.sqrt(1.0 + cavity_var)
    la = extra[:, 0] + log_ndtr(eta)
    lb = extra[:, 1] + log_ndtr(-eta)
    return np.exp(la - np.logaddexp(la, lb))


def majority_vote(Y: ArrayLike, random_state: RandomStateLike = None) -> np.ndarray:
    """MV baseline: the most frequent label of each row of Y (NaN = missing); ties and
    rows without labels are broken at random.

    Parameters
    ----------
    Y : array-like of shape (n_samples, n_annotators)
        Labels coded 0/1, one column per annotator, NaN where an annotator gave none.
    random_state : int, RandomState, Generator or None, default=None
        Seeds the draws that break ties.

    Returns
    -------
    ndarray of shape (n_samples,)
        The majority label of each row, 0 or 1.

    Examples
    --------
    >>> import numpy as np
    >>> majority_vote(np.array([[1, 1, 0], [0, np.nan, 0]])).tolist()
    [1, 0]
    """
    Y = np.asarray(Y, dtype=float)
    rng = np.random.default_rng(random_state)
    pos = np.nansum(Y == 1, axis=1) if np.all(np.isin(Y[~np.isnan(Y)], (0, 1))) else None
    if pos is None:
        raise ValueError("majority_vote expects labels coded 0/1 with NaN for missing.")
    n_lab = np.sum(~np.isnan(Y), axis=1)
    score = pos - (n_lab - pos)
    tie = score == 0
    return np.where(tie, rng.integers(0, 2, size=len(score)), (score > 0).astype(int))


def concatenate_labels(X: ArrayLike, Y: ArrayLike) -> Tuple[np.ndarray, np.ndarray]:
    """CONC baseline: one (x_i, y_ir) training pair per label given (R times the data).

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features)
        Inputs.
    Y : array-like of shape (n_samples, n_annotators)
        Labels coded as numbers, one column per annotator, NaN where an annotator gave
        none.

    Returns
    -------
    X_concat : ndarray of shape (n_labels, n_features)
        The row of X of each label given, row by row, then annotator by annotator.
    y_concat : ndarray of shape (n_labels,)
        The labels, as integers.

    Examples
    --------
    >>> import numpy as np
    >>> Xc, yc = concatenate_labels(np.array([[0.0], [1.0]]), np.array([[1, 0], [np.nan, 1]]))
    >>> Xc.ravel().tolist(), yc.tolist()
    ([0.0, 0.0, 1.0], [1, 0, 1])
    """
    X = np.asarray(X, dtype=float)
    Y = np.asarray(Y, dtype=float)
    i, r = np.nonzero(~np.isnan(Y))
    return X[i], Y[i, r].astype(int)


def _reliability_step(likelihood, Y01, cavity_mean, cavity_var):
    """One M-step from EP's cavities (:func:`true_label_posterior`, :func:`m_step`):
    the new sensitivities and specificities (on the host) and the largest change."""
    p = true_label_posterior(likelihood.site_extra(len(Y01)), cavity_mean, cavity_var)
    sens, spec = _on_host(*m_step(Y01, p))
    change = max(np.max(np.abs(sens - likelihood.sensitivity)),
                 np.max(np.abs(spec - likelihood.specificity)))
    return sens, spec, change


class _SweepEM:
    """EM for the reliabilities inside dense EP's sweep loop (the ``outer`` of
    :func:`fastep.ep`): every ``every`` sweeps, the M-step (:func:`m_step`) from the
    true-label posterior at the current cavities; a step that moves a sensitivity or
    specificity by ``tol`` or more is proposed as new ``(log a_i, log b_i)``.  EP cannot
    converge until a step moves less than ``tol``, and at most ``max_steps`` steps are
    adopted.  No refresh of the posterior is spent on EM: the new data enter the next
    sweep's site updates."""

    def __init__(self, likelihood, Y01, every, tol, max_steps):
        self.likelihood, self.Y01 = likelihood, Y01
        self.every, self.tol, self.max_steps = every, tol, max_steps
        self.steps, self.pending = 0, None
        self.converged = max_steps == 0

    def propose(self, sweep, cavity_mean, cavity_var):
        """``(new (log a_i, log b_i) or None, whether EM has settled)``."""
        if self.steps >= self.max_steps:
            return None, True
        if sweep % self.every:             # no M-step this sweep
            return None, self.converged
        sens, spec, change = _reliability_step(self.likelihood, self.Y01, cavity_mean,
                                               cavity_var)
        self.converged = change < self.tol
        if self.converged:
            return None, True
        self.pending = self.likelihood.with_reliabilities(sens, spec)
        return self.pending.site_extra(len(self.Y01)), False

    def accept(self):
        self.steps += 1
        self.likelihood = self.pending
