"""Small simulated data sets that several test folders use."""
import numpy as np


def forrester(seed, n=30):
    """``(X, f, y)``: n inputs uniform on [0, 1], Forrester's function f and y = f plus noise
    of variance 0.1 (the censored and Laplace tests censor y)."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(0, 1, (n, 1))
    f = (6 * X[:, 0] - 2) ** 2 * np.sin(2 * (6 * X[:, 0] - 2))
    return X, f, f + np.sqrt(0.1) * rng.normal(size=n)
