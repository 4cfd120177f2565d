"""Pay Numba's compile cost up front (first run) or load it from the on-disk cache."""
from __future__ import annotations

import logging
import time
import warnings

import numpy as np


def precompile(verbose: bool = False) -> float:
    """Compile (or load from cache) every built-in kernel with a tiny problem, and load
    the estimators (and with them scikit-learn, which ``import fastep`` leaves out).

    Returns the seconds it took.  With a warm cache this takes about 1.5 s on the 2-core
    machine (the estimators' imports are 0.5 s of it), and a first fit of any estimator
    after it takes 1.0-1.8 times a second fit (``python scripts/first_fit.py``); the very
    first call after installation compiles everything (a minute or more).

    Parameters
    ----------
    verbose : bool, default False
        Log the time taken at level INFO on the ``"fastep"`` logger (else at DEBUG).

    Examples
    --------
    >>> import fastep
    >>> seconds = fastep.precompile()
    """
    from .backend import cpu_loops as cpu
    from .inference.ep import ep
    from .inference.sparse_ep import sparse_ep, sparse_ep_gradient
    from .kernels import RBF, Matern12, Matern32, Matern52
    from .kernels.distances import reuse_distances
    from .kernels.gram import HOST
    from .likelihoods import Gaussian, Logistic, Probit, RobustMax

    t0 = time.perf_counter()
    X = np.linspace(0.0, 1.0, 6)[:, None]
    y = np.array([-1.0, -1.0, 1.0, -1.0, 1.0, 1.0])
    for k in (RBF(), Matern12(), Matern32(), Matern52()):
        k.gradient_contract(X, k(X))
        k.gradient_contract(X[:2], k(X[:2], X), X)
        k.input_gradient_contract(X[:2], k(X[:2], X), X)
        with reuse_distances(X, HOST):                  # ML-II's Gram from X's distances
            k.gradient_contract(X, k(X))
    K = RBF()(X)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for loops in (cpu.SERIAL, cpu.PARALLEL):
            saved = cpu.PARALLEL_MIN_N
            cpu.PARALLEL_MIN_N = 0 if loops is cpu.PARALLEL else 10**12
            try:
                for lik, yy in ((Probit(), y), (Logistic(), y), (Gaussian(), y)):
                    for method in ("parallel", "sequential"):
                        r = ep(K, yy, lik, method=method, max_iter=2)
                        r.predict_latent(K, np.diag(K))
                        r.kernel_gradient_weights()
                    rs = sparse_ep(RBF(), X[:3], X, yy, lik, max_iter=2)
                    sparse_ep_gradient(rs, RBF(), X, yy, lik)
            finally:
                cpu.PARALLEL_MIN_N = saved
        Probit().tilted(y, y, np.ones(6), alpha=0.5)
    from .inference.nested_ep import nested_ep, predict_latent
    from .likelihoods import MultinomialProbit
    with warnings.catch_warnings():             # two sweeps: "did not converge", by design
        warnings.simplefilter("ignore")
        res = nested_ep(K, np.array([0, 1, 2, 0, 1, 2]), 3, max_iter=2)   # nested EP's loops
    MultinomialProbit(3).predict_proba(*predict_latent(res.posterior, K[:, :2], np.ones(2)))
    _likelihood_paths()
    from .inference.markov_ep import markov_ep, markov_ep_gradient, markov_predict
    t = np.arange(6.0) + np.array([0.0, 0.3, 0.0, 0.3, 0.0, 0.3])  # irregular: step cache
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for kernel in (Matern32(), Matern12() + Matern52()):   # two states; the generic D
            rm = markov_ep(t, y, kernel, Probit(), max_iter=2)
            markov_ep_gradient(rm, t, y, kernel, Probit())
            markov_predict(rm, t, t[:2] + 0.5, kernel)
    from . import models  # noqa: F401  (the estimators, and scikit-learn with them)
    robust = RobustMax(3)                      # multiclass GWI: S(x, j) and its gradient
    robust.predict_proba(np.zeros((2, 3)), np.ones((2, 3)))
    robust.prob_largest_grad(np.zeros((2, 3)), np.ones((2, 3)), np.array([0, 2]))
    seconds = time.perf_counter() - t0
    logging.getLogger("fastep").log(logging.INFO if verbose else logging.DEBUG,
                                    "fastep kernels ready in %.2f s", seconds)
    return seconds


def _likelihood_paths():
    """Every built-in likelihood's tilted moments (both powers), parameter gradients and
    predictive moments on a few sites, so that no estimator compiles or loads one on its
    first fit (a Weibull fit after ``fastep demo`` took 16 s, later 1.8 s)."""
    from . import likelihoods as fl
    mu, var = np.array([-0.5, 0.3, 1.0]), np.array([0.5, 1.0, 2.0])
    counts, times = np.array([0.0, 2.0, 5.0]), np.array([0.5, 1.0, 3.0])
    cases = [(fl.Probit(), np.array([-1.0, 1.0, 1.0])), (fl.Logistic(), np.array([-1.0, 1.0, 1.0])),
             (fl.Gaussian(), mu), (fl.StudentT(), mu), (fl.Poisson(), counts),
             (fl.NegativeBinomial(), counts), (fl.ZeroInflatedPoisson(), counts),
             (fl.ZeroInflatedNegativeBinomial(), counts), (fl.Binomial(trials=5), counts),
             (fl.Tobit(1.0, lower=-1.0, upper=1.0), np.array([-1.0, 0.2, 1.0])),
             (fl.OrdinalProbit([-0.5, 0.5]), np.array([0.0, 1.0, 2.0])),
             (fl.Weibull(), times), (fl.LogLogistic(), times), (fl.LogNormal(), times)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for lik, y in cases:
            for alpha in ((1.0,) if not lik.power_ep else (1.0, 0.5)):
                lik.tilted(y, mu, var, alpha)
            if lik.n_dims:
                lik.tilted_dparams(y, mu, var)
            if hasattr(lik, "predict_y") and not lik.binary:
                try:
                    lik.predict_y(mu, var)
                except (TypeError, ValueError):        # e.g. Tobit's takes its limits
                    pass
