"""Small simulated data sets that several test folders use."""
import numpy as np


def forrester(seed, n=30):
    """``(X, f, y)``: n inputs uniform on [0, 1], Forrester's function f and y = f plus noise
    of variance 0.1 (the censored and Laplace tests censor y)."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(0, 1, (n, 1))
    f = (6 * X[:, 0] - 2) ** 2 * np.sin(2 * (6 * X[:, 0] - 2))
    return X, f, f + np.sqrt(0.1) * rng.normal(size=n)


def sparse_regression(seed=0):
    """``(X, y, Z, kernel)``: 40 points in [-3, 3]^2, y = sin(x_1) plus noise of sd 0.1,
    7 inducing inputs drawn apart from X, RBF(1.3, 0.9) (the collapsed bound's tests and
    SparseGPRegressor's)."""
    from fastep.kernels import RBF
    rng = np.random.default_rng(seed)
    X = rng.uniform(-3, 3, (40, 2))
    y = np.sin(X[:, 0]) + 0.1 * rng.normal(size=40)
    Z = rng.uniform(-3, 3, (7, 2))
    return X, y, Z, RBF(1.3, 0.9)
