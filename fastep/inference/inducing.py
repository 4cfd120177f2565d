"""Inducing inputs, shared by the collapsed bound (:mod:`fastep.inference.collapsed`) and
sparse Power EP (:mod:`fastep.inference.sparse_ep`): choosing and checking them, the
Cholesky factor of ``K_uu`` with its jitter, and ``dF/dK_uu`` from a gradient in the
whitened projection ``V = L_uu^-1 K_uf``."""
from __future__ import annotations

import numbers
import warnings

import numpy as np
from scipy.linalg import cholesky, solve_triangular

from ..exceptions import NotPositiveDefiniteError


JITTER = 1e-8


def cholesky_uu(K_uu):
    """Cholesky of K_uu with ``JITTER * mean(diag)`` added (inducing inputs may nearly coincide)."""
    m = K_uu.shape[0]
    scale = max(float(np.mean(np.diag(K_uu))), 1e-300)
    try:
        return cholesky(K_uu + JITTER * scale * np.eye(m), lower=True, check_finite=False)
    except np.linalg.LinAlgError:
        raise NotPositiveDefiniteError(
            f"K_uu (the kernel at the inducing inputs) is not positive definite even with "
            f"jitter {JITTER * scale:.3g}; check the kernel's parameters, or use fewer or "
            f"more spread inducing points (n_inducing).") from None


def uu_from_whitened(GVt, L_uu):
    """``dF/dK_uu`` from ``GVt = G V^T``, where ``G = dF/dV`` and ``V = L_uu^-1 K_uf``.

    For any F that depends on V only through ``V^T V`` (rotation invariant) ``G V^T`` is
    symmetric, ``dF/dK_uf = L^-T G`` and ``dF/dK_uu = -1/2 L^-T sym(G V^T) L^-1``.
    ``GVt`` may be summed over chunks of data."""
    S = 0.5 * (GVt + GVt.T)
    T = solve_triangular(L_uu, S, lower=True, trans="T", check_finite=False)
    G_uu = -0.5 * solve_triangular(L_uu, T.T, lower=True, trans="T", check_finite=False)
    return 0.5 * (G_uu + G_uu.T)


def init_inducing(X, n_inducing, random_state=None, max_points=20000):
    """k-means++ seeding plus 10 Lloyd steps (scipy ``kmeans2``) on at most ``max_points``
    rows of X; returns ``(n_inducing, d)`` centres, distinct and inside the data's range."""
    from scipy.cluster.vq import kmeans2
    X = np.asarray(X, dtype=float)
    rng = np.random.default_rng(random_state)
    sub = X if X.shape[0] <= max_points else X[rng.choice(X.shape[0], max_points, replace=False)]
    if n_inducing == sub.shape[0]:
        return sub.copy()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")        # "One of the clusters is empty": reseeded below
        Z, label = kmeans2(sub, n_inducing, iter=10, minit="++", seed=rng)
    empty = np.setdiff1d(np.arange(n_inducing), label)
    if empty.size:                              # put empty centres on unused data points
        Z[empty] = sub[rng.choice(sub.shape[0], empty.size, replace=False)]
    return Z


#: ``n_inducing="auto"`` (the default of the EP estimators) runs dense EP up to this many
#: rows and sparse EP with :data:`AUTO_INDUCING` inducing points above: dense EP costs
#: O(n^3) a sweep and 8 n^2 bytes a matrix (at 3,000 rows a sweep takes about 0.3 s on two
#: cores and a learnt kernel 10-30 s; at 14,133 rows, statsmodels' randhie, a negative
#: binomial fit was killed after 400 s and 8 GB), sparse EP O(n m^2).
AUTO_DENSE_ROWS = 3_000
#: Inducing points of ``n_inducing="auto"`` above :data:`AUTO_DENSE_ROWS` rows (randhie,
#: negative binomial, 14,133 rows: m = 128, 256, 512 fitted in 17, 21, 41 s at held-out log
#: densities -2.1134, -2.1102, -2.1075; ``fastep fit`` uses the same number).
AUTO_INDUCING = 256


def inducing_count(n_inducing, n):
    """The inducing-point count of a fit of ``n`` rows (``inf`` for a dask X, which only
    sparse EP fits): ``n_inducing`` with ``"auto"`` resolved by :data:`AUTO_DENSE_ROWS`
    (None: dense EP; the estimators keep a dask X's count below its rows)."""
    if n_inducing != "auto":
        return n_inducing
    return None if n <= AUTO_DENSE_ROWS else AUTO_INDUCING


def check_inducing(X, n_inducing, inducing_points, random_state=None):
    """Validate ``n_inducing`` / ``inducing_points`` against X and return Z."""
    n, d = X.shape
    if inducing_points is not None:
        Z = np.asarray(inducing_points, dtype=float)
        if Z.ndim != 2 or Z.shape[1] != d:
            raise ValueError(f"inducing_points must have shape (m, {d}) to match X; "
                             f"got shape {Z.shape}.")
        if not np.all(np.isfinite(Z)):
            raise ValueError("inducing_points contains NaN or infinity.")
        m = Z.shape[0]
    else:
        m = n_inducing
        if not isinstance(m, numbers.Integral) or isinstance(m, bool) or m < 1:
            raise ValueError(f"n_inducing must be a positive int; got {m!r}.")
    if m > n:
        raise ValueError(f"more inducing points ({m}) than data points ({n}); use "
                         f"n_inducing <= {n} (or the dense model).")
    if inducing_points is not None:
        return np.array(Z, order="C")          # a copy: the user's array stays theirs
    return init_inducing(X, int(m), random_state)
