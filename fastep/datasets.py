"""Bundled and offline datasets."""
from __future__ import annotations

import gzip
from importlib import resources

import numpy as np


def load_breast_cancer():
    """Wisconsin Diagnostic Breast Cancer data bundled with fastep.

    569 tumours, 30 real features; target 1 = benign, 0 = malignant.
    Source: UCI Machine Learning Repository (Wolberg, Street & Mangasarian, 1995;
    CC BY 4.0), the same table scikit-learn ships.

    Returns
    -------
    X : ndarray (569, 30)
    y : ndarray (569,) of int
    feature_names : list of str

    Examples
    --------
    >>> X, y, names = load_breast_cancer()
    >>> X.shape, int(y.sum()), names[0]
    ((569, 30), 357, 'mean radius')
    """
    path = resources.files("fastep") / "data" / "breast_cancer.csv.gz"
    with gzip.open(path, "rt") as fh:
        fh.readline()
        names = fh.readline().strip().split(",")
        data = np.loadtxt(fh, delimiter=",")
    return data[:, :-1], data[:, -1].astype(int), names[:-1]


def simulate_annotators(y, sensitivity, specificity, coverage=1.0, random_state=None):
    """Noisy labels from simulated annotators (Rodrigues et al. 2014, §5.1).

    Annotator r reports ``y_ir ~ Bernoulli(alpha_r)`` when the true label is 1 and
    ``Bernoulli(1 - beta_r)`` when it is 0.  With ``coverage < 1`` each annotator labels
    each instance with that probability (NaN otherwise).

    Parameters
    ----------
    y : array (n,) of 0/1 true labels
    sensitivity, specificity : array (R,) in [0, 1]
    coverage : float in (0, 1], default 1.0
    random_state : int, Generator or None

    Returns
    -------
    Y : ndarray (n, R) of 0.0 / 1.0 / NaN

    Examples
    --------
    >>> Y = simulate_annotators([0, 1, 1], [0.9, 0.5], [0.8, 0.5], random_state=0)
    >>> Y.shape
    (3, 2)
    """
    y = np.asarray(y)
    if y.ndim != 1 or not np.all(np.isin(y, (0, 1))):
        raise ValueError("y must be a 1-D array of 0/1 true labels.")
    sens = np.asarray(sensitivity, dtype=float).ravel()
    spec = np.asarray(specificity, dtype=float).ravel()
    if sens.shape != spec.shape:
        raise ValueError(f"sensitivity and specificity must have the same length; got "
                         f"{sens.size} and {spec.size}.")
    for name, v in (("sensitivity", sens), ("specificity", spec)):
        if not np.all((v >= 0) & (v <= 1)):
            raise ValueError(f"{name} must hold probabilities in [0, 1]; got {v.tolist()}.")
    if not 0 < coverage <= 1:
        raise ValueError(f"coverage must be in (0, 1]; got {coverage!r}.")
    rng = np.random.default_rng(random_state)
    u = rng.random((y.size, sens.size))
    p_one = np.where(y[:, None] == 1, sens[None, :], 1.0 - spec[None, :])
    Y = (u < p_one).astype(float)
    if coverage < 1:
        Y[rng.random(Y.shape) >= coverage] = np.nan
    return Y


def split_standardized(X, y, train_fraction=0.7, random_state=None):
    """Random train/test split with features standardised on the training part.

    Returns ``(X_train, X_test, y_train, y_test)`` (the protocol of the demos and
    experiment scripts: a 70/30 split by default).

    Parameters
    ----------
    X : array (n, d)
        Features; each column is centred and scaled by the training rows' mean and
        standard deviation (a constant column is only centred).
    y : array (n,)
        Targets, split along with ``X`` and left as they are.
    train_fraction : float, default 0.7
        Share of the rows in the training part (``int(train_fraction * n)`` rows).
    random_state : int, Generator or None
        Seed of the random permutation.

    Examples
    --------
    >>> import numpy as np
    >>> Xtr, Xte, ytr, yte = split_standardized(np.arange(20.0)[:, None], np.arange(20),
    ...                                         random_state=0)
    >>> Xtr.shape, Xte.shape, abs(round(float(Xtr.mean()), 12))
    ((14, 1), (6, 1), 0.0)
    """
    X = np.asarray(X, dtype=float)
    y = np.asarray(y)
    perm = np.random.default_rng(random_state).permutation(len(y))
    n_train = int(train_fraction * len(y))
    tr, te = perm[:n_train], perm[n_train:]
    mu, sd = X[tr].mean(0), X[tr].std(0)
    sd = np.where(sd > 0, sd, 1.0)
    return (X[tr] - mu) / sd, (X[te] - mu) / sd, y[tr], y[te]
