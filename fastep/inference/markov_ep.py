"""State-space (Markov) EP: GP models of time in O(n) time and memory.

For a kernel of time with an exact state-space form (Matern-1/2, 3/2, 5/2 and their sums,
:mod:`fastep.kernels.statespace`) the GP prior is a linear Gaussian state-space model,
and parallel EP runs through a Kalman filter and RTS smoother: the sites are Gaussian
pseudo-observations, the smoother gives every marginal q(f_i), and each site is updated
by moment matching against its cavity with the likelihood's compiled tilted moments, as
in fastep's dense parallel EP, whose fixed point and evidence it reproduces (Nickisch,
Solin & Grigorievskiy, "State space Gaussian processes with non-Gaussian likelihood",
ICML 2018; Wilkinson et al., "State space expectation propagation", ICML 2020).  Each
iteration costs O(n D^3) for D states; many independent series (ragged, a series id per
row) share the kernel and are filtered in parallel.

The evidence at the sites is::

    log Z_EP = log int p(f) prod_i t_i(f_i) df + sum_i [log Z_i - log int q_-i(f_i) t_i(f_i) df_i]

with ``t_i(f) = exp(-tau_i f^2 / 2 + nu_i f)``: the first term from the filter, the rest
from the cavities ``q_-i`` and the tilted normalisers ``Z_i``.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from .._checks import float_array
from ..exceptions import ConvergenceWarning
from ..kernels.statespace import state_space
from ._kalman import cavities, filter_smooth, update_sites


@dataclass
class MarkovEPResult:
    """What :func:`markov_ep` returns, in the order of the rows given.

    Attributes
    ----------
    mean, var : ndarray (n,)
        Marginals of the EP posterior of f at the given times.
    site_tau, site_nu : ndarray (n,)
        Site natural parameters.
    cavity_mean, cavity_var : ndarray (n,)
        Cavities at the returned posterior.
    log_marginal_likelihood : float
        log Z_EP at the returned sites (summed over series).
    n_iter : int
        EP iterations (filter, smoother and site update) performed.
    converged : bool
        Whether the largest site change fell below ``tol``.

    Examples
    --------
    >>> import numpy as np
    >>> from fastep.kernels import Matern12
    >>> from fastep.likelihoods import Gaussian
    >>> res = markov_ep(np.arange(3.0), np.zeros(3), Matern12(), Gaussian(1.0))
    >>> res.mean.tolist(), res.converged
    ([0.0, 0.0, 0.0], True)
    """

    mean: np.ndarray
    var: np.ndarray
    site_tau: np.ndarray
    site_nu: np.ndarray
    cavity_mean: np.ndarray
    cavity_var: np.ndarray
    log_marginal_likelihood: float
    n_iter: int
    converged: bool


def _site_normaliser(mu, s, tau, nu):
    """log int N(f | mu, s) exp(-tau f^2 / 2 + nu f) df, elementwise."""
    d = 1.0 + tau * s
    return -0.5 * np.log(d) + (2.0 * nu * mu - tau * mu * mu + nu * nu * s) / (2.0 * d)


def markov_ep(t: Any, y: Any, kernel: Any, likelihood: Any, *, series: Any = None,
              extra: Any = None, damping: float = 0.5, tol: float = 1e-6,
              max_iter: int = 500, site_tau: Any = None,
              site_nu: Any = None) -> MarkovEPResult:
    """Parallel EP for ``f ~ GP(0, kernel)`` over time, ``y_i ~ p(y_i | f(t_i))``, by a
    Kalman filter and RTS smoother in O(n).

    Parameters
    ----------
    t : array-like (n,)
        Times, in any order (sorted here; the results come back in the given order);
        repeated times are allowed.
    y : array-like (n,)
        Targets in the likelihood's encoding (binary likelihoods: -1/+1).
    kernel : fastep kernel
        Matern12, Matern32 or Matern52 of one input, or a sum of them.
    likelihood : fastep.likelihoods.Likelihood
        Any likelihood with scalar tilted moments.
    series : array-like (n,), optional
        A series id per row: independent series sharing the kernel, filtered in parallel;
        the evidence is their sum.
    extra : array-like (n, n_extra), optional
        Per-row data of the likelihood (as for :func:`fastep.ep`).
    damping : float in (0, 1]
        Step in the sites' natural parameters.
    tol : float
        Stop when no site's tau or nu changes by more than ``tol`` (relative to 1 + its
        size).
    max_iter : int
    site_tau, site_nu : array-like (n,), optional
        Starting sites (default zero).

    Returns
    -------
    MarkovEPResult

    Examples
    --------
    >>> import numpy as np
    >>> from fastep.kernels import Matern32
    >>> from fastep.likelihoods import Poisson
    >>> t = np.arange(200.0)
    >>> y = np.random.default_rng(0).poisson(np.exp(np.sin(t / 20))).astype(float)
    >>> res = markov_ep(t, y, Matern32(1.0, 20.0), Poisson())
    >>> res.converged, res.mean.shape
    (True, (200,))
    """
    t = float_array(t, "t", 1, fix="t holds one time per row.")
    n = t.shape[0]
    if n == 0:
        raise ValueError("t is empty: markov_ep needs at least one row.")
    y = likelihood.encode_targets(y)
    if y.shape[0] != n:
        raise ValueError(f"y has {y.shape[0]} rows and t {n}; give one target per time.")
    extra = likelihood.check_extra(extra, n)
    if not (0.0 < damping <= 1.0):
        raise ValueError(f"damping must be in (0, 1]; got {damping!r}.")
    ss = state_space(kernel)
    if series is None:
        order = np.argsort(t, kind="stable")
        starts = np.array([0, n], dtype=np.int64)
    else:
        ids = np.asarray(series)
        if ids.ndim != 1 or ids.shape[0] != n:
            raise ValueError(f"series must hold one id per row ({n}); got shape "
                             f"{ids.shape}.")
        _, codes = np.unique(ids, return_inverse=True)
        order = np.lexsort((t, codes))
        breaks = np.flatnonzero(np.diff(codes[order])) + 1
        starts = np.concatenate([[0], breaks, [n]]).astype(np.int64)
    ts = np.ascontiguousarray(t[order])
    ys = np.ascontiguousarray(y[order])
    es = np.ascontiguousarray(extra[order])
    tau = np.zeros(n) if site_tau is None else float_array(site_tau, "site_tau", 1)[order]
    nu = np.zeros(n) if site_nu is None else float_array(site_nu, "site_nu", 1)[order]
    D = ss.n_states
    mf, Pf = np.empty((n, D)), np.empty((n, D, D))
    mean, var = np.empty(n), np.empty(n)
    log_norm = np.empty(starts.shape[0] - 1)
    clip = bool(getattr(likelihood, "log_concave", True))

    mc, vc, ok = np.empty(n), np.empty(n), np.empty(n, dtype=np.bool_)

    def posterior(tau, nu):
        filter_smooth(ts, tau, nu, starts, ss.order, ss.lam, ss.variance, mf, Pf, mean, var,
                      log_norm)
        cavities(mean, var, tau, nu, ok, mc, vc)
        return ok, mc, vc

    converged, it = False, 0
    change: float = math.inf
    for it in range(1, max_iter + 1):
        ok, mc, vc = posterior(tau, nu)
        idx = np.flatnonzero(ok)
        _, d1, d2 = likelihood.tilted(ys[idx], mc[idx], vc[idx], extra=es[idx])
        new_tau, new_nu = tau.copy(), nu.copy()
        change = update_sites(idx, d1, d2, mc, vc, tau, nu, damping, clip, new_tau, new_nu)
        tau, nu = new_tau, new_nu
        if change < tol:
            converged = True
            break
    ok, mc, vc = posterior(tau, nu)
    log_z = np.zeros(n)
    site = np.zeros(n)
    if ok.any():
        log_z[ok] = likelihood.tilted(ys[ok], mc[ok], vc[ok], extra=es[ok])[0]
        site[ok] = _site_normaliser(mc[ok], vc[ok], tau[ok], nu[ok])
    evidence = float(np.sum(log_norm) + np.sum(log_z - site))
    if not converged:
        warnings.warn(f"markov_ep did not converge in max_iter={max_iter} iterations "
                      f"(largest site change {change:.2e}, tol={tol:g}); raise max_iter or "
                      f"lower damping if the sites oscillate.", ConvergenceWarning,
                      stacklevel=2)
    if not math.isfinite(evidence):
        raise ValueError("markov_ep: the EP evidence is not finite at the returned sites "
                         "(an improper cavity at every update of some site); try a smaller "
                         "damping.")
    inv = np.empty(n, dtype=np.int64)
    inv[order] = np.arange(n)
    return MarkovEPResult(mean[inv].copy(), var[inv].copy(), tau[inv], nu[inv], mc[inv],
                          vc[inv], evidence, it, converged)
