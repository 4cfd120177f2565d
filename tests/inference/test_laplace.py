"""The Laplace approximation (fastep.inference.laplace), the censored model's alternative
to EP: its mode against EP's, and a failure that names the knob."""
import warnings

import numpy as np
import pytest
from scipy import special, stats

import fastep
from fastep import CensoredGPRegressor
from fastep.kernels import RBF
from fastep.likelihoods import Tobit
from helpers.data import forrester


def test_laplace_failure_names_the_knob():
    from fastep.inference.laplace import laplace
    K = np.array([[1.0, 2.0], [2.0, 1.0]])              # not a covariance matrix
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(fastep.NotPositiveDefiniteError, match="WhiteKernel"):
            laplace(K, [1.0, -1.0], Tobit(0.01))


def test_laplace_matches_mode_and_ep_is_close():
    X, _, y = forrester(2)
    yc = np.maximum(y, -0.45)
    k = RBF(10.0, 0.15)
    la = CensoredGPRegressor(k, noise_variance=0.1, lower=-0.45, inference="laplace",
                             optimizer=None).fit(X, yc)
    # the Laplace mode is a stationary point of log p(y|f) - f^T K^-1 f / 2: f = K dlogp/df
    s = np.sqrt(0.1)
    f = la.result_.mean
    cens = yc <= -0.45
    d1 = np.where(cens, -np.exp(stats.norm.logpdf((-0.45 - f) / s)
                                - special.log_ndtr((-0.45 - f) / s)) / s, (yc - f) / 0.1)
    np.testing.assert_allclose(f, k(X) @ d1, rtol=1e-6, atol=1e-6)
    ep_ = CensoredGPRegressor(k, noise_variance=0.1, lower=-0.45, optimizer=None).fit(X, yc)
    Xs = np.linspace(0, 1, 50)[:, None]
    assert np.max(np.abs(ep_.predict_latent(Xs) - la.predict_latent(Xs))) < 0.5
