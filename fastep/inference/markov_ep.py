"""State-space (Markov) EP: GP models of time in O(n) time and memory.

For a kernel of time with an exact state-space form (Matern-1/2, 3/2, 5/2, periodic,
constant, and their sums and products, :mod:`fastep.kernels.statespace`) the GP prior is
a linear Gaussian state-space model, and parallel EP runs through a Kalman filter and RTS
smoother: the sites are Gaussian
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
from typing import Any, Optional, Tuple

import numpy as np

from .._checks import float_array
from ..exceptions import ConvergenceWarning, EPNumericalWarning
from ..kernels.statespace import PERIODIC_ORDER, state_space
from ._kalman import cavities, filter_smooth, log_norms, update_sites
from ._transitions import step_cache
from ._sweep import fill_cavities


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
    periodic_order : int, default 8
        Harmonics of a periodic kernel's series in the run (gradient and prediction use
        the same).
    n_skipped : int, default 0
        Sites left out at the end (an improper cavity; their cavities are the marginals).

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
    periodic_order: int = PERIODIC_ORDER
    n_skipped: int = 0


def _arrange(t, series):
    """(order, starts): the rows sorted by series, then time, and where each series
    starts in that order (with n at the end)."""
    n = t.shape[0]
    if series is None:
        return np.argsort(t, kind="stable"), np.array([0, n], dtype=np.int64)
    ids = np.asarray(series)
    if ids.ndim != 1 or ids.shape[0] != n:
        raise ValueError(f"series must hold one id per row ({n}); got shape {ids.shape}.")
    if ids.dtype.kind == "f" and not np.all(np.isfinite(ids)):
        raise ValueError("series holds NaN or infinite ids; give every row the id of its "
                         "series.")
    try:
        _, codes = np.unique(ids, return_inverse=True)
    except TypeError:
        raise ValueError(f"series ids must be numbers or strings that sort (of one kind, "
                         f"no None); got {ids[:5].tolist()}...") from None
    order = np.lexsort((t, codes))
    breaks = np.flatnonzero(np.diff(codes[order])) + 1
    return order, np.concatenate([[0], breaks, [n]]).astype(np.int64)


def _log_norm(ts, tau, nu, starts, kernel, periodic_order, smooth=False):
    """The filter's log int p(f) prod_i t_i(f_i) df (and the marginals, ``smooth``)."""
    ss = state_space(kernel, periodic_order)
    n, D = ts.shape[0], ss.n_states
    mf, Pf = np.empty((n, D)), np.empty((n, D, D))
    mean, var = np.empty(n), np.empty(n)
    log_norm = np.empty(starts.shape[0] - 1)
    none = np.zeros((0, D, D))          # (one pass: the transitions computed as it goes)
    filter_smooth(ts, tau, nu, starts, *ss.arrays, mf, Pf, mean, var, log_norm, smooth,
                  none, none)
    return float(np.sum(log_norm)), mean, var


def _central_differences(ts, tau, nu, starts, kernel, theta, step, order):
    """``d log N / d theta`` of the filter's log normaliser at fixed sites by central
    differences of ``step`` in each entry of theta: the 2p filters at once
    (:func:`fastep.inference._kalman.log_norms`, a prange over settings and series).  The
    settings differ in their numbers only (rates, P_inf, H): the factor layout follows
    from the kernel's structure, which theta does not change."""
    settings = [state_space(kernel.clone_with_theta(theta + sign * step * unit), order)
                for unit in np.eye(theta.shape[0]) for sign in (1.0, -1.0)]
    kind, order_, _, fstart, sstart, _, _ = settings[0].arrays
    D = settings[0].n_states
    rates, pinfs, hs = (np.ascontiguousarray([ss.arrays[i] for ss in settings])
                        for i in (2, 5, 6))
    out = np.empty((len(settings), starts.shape[0] - 1))
    log_norms(ts, tau, nu, starts, kind, order_, rates, fstart, sstart, pinfs, hs,
              np.empty((1, D)), np.empty((1, D, D)), np.empty(1), np.empty(1), out)
    values = out.sum(axis=1)
    return (values[0::2] - values[1::2]) / (2.0 * step)


def _site_normaliser(mu, s, tau, nu):
    """log int N(f | mu, s) exp(-tau f^2 / 2 + nu f) df, elementwise."""
    d = 1.0 + tau * s
    return -0.5 * np.log(d) + (2.0 * nu * mu - tau * mu * mu + nu * nu * s) / (2.0 * d)


def markov_ep(t: Any, y: Any, kernel: Any, likelihood: Any, *, series: Any = None,
              extra: Any = None, damping: Optional[float] = None, tol: float = 1e-6,
              max_iter: int = 500, site_tau: Any = None, site_nu: Any = None,
              periodic_order: int = PERIODIC_ORDER) -> MarkovEPResult:
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
        Matern12, Matern32, Matern52, Periodic or ConstantKernel of one input, or sums
        and products of them (``Matern32 * Periodic``: quasi-periodic);
        :func:`fastep.kernels.statespace.state_space`.
    likelihood : fastep.likelihoods.Likelihood
        Any likelihood with scalar tilted moments.
    series : array-like (n,), optional
        A series id per row: independent series sharing the kernel, filtered in parallel;
        the evidence is their sum.
    extra : array-like (n, n_extra), optional
        Per-row data of the likelihood (as for :func:`fastep.ep`).
    damping : float in (0, 1], optional
        Step in the sites' natural parameters.  None (the default): adaptive, full steps
        at first (half steps for a likelihood that is not log-concave), halved (down to
        0.05) each time the largest site change fails to shrink (parallel EP
        oscillating) or a step makes the posterior improper (then undone).
    tol : float, default 1e-06
        Stop when no site's tau or nu changes by more than ``tol`` (relative to 1 + its
        size).
    max_iter : int, default 500
        At most this many iterations (0: the posterior and evidence of the given sites).
    site_tau, site_nu : array-like (n,), optional
        Starting sites (default zero).
    periodic_order : int, default=8
        Harmonics of a periodic kernel's cosine series (2 per harmonic, + 1 states; the
        truncation error is
        :func:`~fastep.kernels.statespace.periodic_truncation_error`).

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
    if damping is not None and not (0.0 < damping <= 1.0):
        raise ValueError(f"damping must be in (0, 1]; got {damping!r}.")
    adaptive = damping is None
    step = 1.0 if damping is None else float(damping)
    ss = state_space(kernel, periodic_order)
    order, starts = _arrange(t, series)
    ts = np.ascontiguousarray(t[order])
    ys = np.ascontiguousarray(y[order])
    es = np.ascontiguousarray(extra[order])
    tau = np.zeros(n) if site_tau is None else \
        float_array(site_tau, "site_tau", 1, (n,), fix="one site per row.")[order]
    nu = np.zeros(n) if site_nu is None else \
        float_array(site_nu, "site_nu", 1, (n,), fix="one site per row.")[order]
    D = ss.n_states
    mf, Pf = np.empty((n, D)), np.empty((n, D, D))
    mean, var = np.empty(n), np.empty(n)
    log_norm = np.empty(starts.shape[0] - 1)
    clip = bool(getattr(likelihood, "log_concave", True))

    mc, vc, ok = np.empty(n), np.empty(n), np.empty(n, dtype=np.bool_)
    As, Qs = step_cache(ts, starts, ss)

    def posterior(tau, nu):
        filter_smooth(ts, tau, nu, starts, *ss.arrays, mf, Pf, mean, var, log_norm, True,
                      As, Qs)
        cavities(mean, var, tau, nu, ok, mc, vc)
        return ok, mc, vc

    def proper():
        return bool(np.all(var > 0.0) and np.all(np.isfinite(mean)))

    converged, it = False, 0
    change: float = math.inf
    if adaptive and not clip:
        step = 0.5              # sites of negative precision: half steps from the start
    last = None
    for it in range(1, max_iter + 1):
        ok, mc, vc = posterior(tau, nu)
        if last is None and not proper() and (np.any(tau != 0.0) or np.any(nu != 0.0)):
            # warm-start sites (another kernel's, in ML-II) that make this posterior
            # improper: start from no sites instead
            tau, nu = np.zeros(n), np.zeros(n)
            ok, mc, vc = posterior(tau, nu)
        if last is not None and not proper():
            # the step made the posterior improper (sites of negative precision): back to
            # the last sites, with half the step
            if not step > 0.05:
                break
            tau, nu = last
            step = max(0.5 * step, 0.05)
            ok, mc, vc = posterior(tau, nu)
        last = (tau, nu)
        idx = np.flatnonzero(ok)
        sel = slice(None) if idx.shape[0] == n else idx    # (views where all are proper)
        _, d1, d2 = likelihood.tilted(ys[sel], mc[sel], vc[sel], extra=es[sel])
        new_tau, new_nu = tau.copy(), nu.copy()
        previous = change
        change = update_sites(idx, d1, d2, mc, vc, tau, nu, step, clip, new_tau, new_nu)
        tau, nu = new_tau, new_nu
        if change < tol:
            converged = True
            break
        if adaptive and change >= previous and step > 0.05:
            step = max(0.5 * step, 0.05)
    last = _ = d1 = d2 = None        # (the loop's, freed before the evidence: memory)
    idx = np.empty(0, dtype=np.int64)
    ok, mc, vc = posterior(tau, nu)
    sel = slice(None) if ok.all() else ok               # (views where all are proper)
    terms = np.sum(likelihood.tilted(ys[sel], mc[sel], vc[sel], extra=es[sel])[0]
                   - _site_normaliser(mc[sel], vc[sel], tau[sel], nu[sel])) if ok.any() else 0.0
    evidence = float(np.sum(log_norm) + terms)
    change = change if max_iter > 0 else math.nan
    if not converged and max_iter > 0:
        warnings.warn(f"markov_ep did not converge in max_iter={max_iter} iterations "
                      f"(largest site change {change:.2e}, tol={tol:g}); raise max_iter or "
                      f"lower damping if the sites oscillate.", ConvergenceWarning,
                      stacklevel=2)
    if not math.isfinite(evidence):
        raise ValueError("markov_ep: the EP evidence is not finite at the returned sites "
                         "(an improper cavity at every update of some site); try a smaller "
                         "damping.")
    # sites whose cavity is improper (1 / var - tau <= 0, in rounding where a site's
    # precision dwarfs the prior's) were left out of the update and of log Z, as in
    # fastep.ep: their cavities are the marginals, and a warning says so
    mc, vc, n_bad = fill_cavities(ok, mc, vc, mean, var)
    if n_bad:
        warnings.warn(f"markov_ep: {n_bad} site(s) have an improper cavity (negative "
                      f"variance) and were left out of the update and of log Z; "
                      + (f"take smaller EP steps (a damping below {step:g})." if step > 0.05
                         else "such a site's precision dwarfs the prior's, and the "
                              "filter's marginal variance lost the digits its cavity "
                              "needs."), EPNumericalWarning, stacklevel=2)
    inv = np.empty(n, dtype=np.int64)
    inv[order] = np.arange(n)
    return MarkovEPResult(mean[inv].copy(), var[inv].copy(), tau[inv], nu[inv], mc[inv],
                          vc[inv], evidence, it, converged, int(periodic_order), n_bad)


def markov_ep_gradient(result: MarkovEPResult, t: Any, y: Any, kernel: Any, likelihood: Any,
                       *, series: Any = None, extra: Any = None,
                       step: float = 1e-5) -> Tuple[np.ndarray, np.ndarray]:
    """Gradient of ``result.log_marginal_likelihood`` at its (fixed-point) sites, as
    :func:`fastep.inference.ep_gradient` returns it: ``(d/d kernel.theta, d/d log
    likelihood parameters)``.

    At EP's fixed point the kernel part is the gradient of ``log int p(f | theta)
    prod_i t_i(f_i) df`` with the sites held (Seeger 2005, "Expectation propagation for
    exponential families"), here the Kalman filter's exact log normaliser, differentiated
    by central differences of step ``step`` in each log-parameter (two O(n) filter passes
    per parameter; the filter is a smooth closed form, so the difference is accurate to
    about step^2); the likelihood part is ``sum_i d log Z_i / d log psi`` at the
    cavities.

    Parameters
    ----------
    result : MarkovEPResult
        The output of :func:`markov_ep`, ideally converged.
    t : array-like (n,)
        The training times of ``result``, in the order given to :func:`markov_ep`.
    y : array-like (n,)
        Targets in the likelihood's encoding, as given to :func:`markov_ep`.
    kernel : fastep kernel
        The kernel of the run (a state-space one, as for :func:`markov_ep`); the
        gradient is for its ``theta`` (the free log-hyperparameters).
    likelihood : fastep.likelihoods.Likelihood
    series : array-like (n,), optional
        The series id per row, as given to :func:`markov_ep`.
    extra : array-like (n, n_extra), optional
        Per-row data of the likelihood, as given to :func:`markov_ep`.
    step : float, default 1e-05
        Step of the central differences, in each log-hyperparameter.

    Returns
    -------
    d_kernel : ndarray (kernel.n_dims,)
        Gradient for the kernel's free log-hyperparameters.
    d_likelihood : ndarray (likelihood.n_dims,)
        Gradient for the likelihood's free log-parameters (empty without them).

    Examples
    --------
    >>> import numpy as np
    >>> from fastep.kernels import Matern32
    >>> from fastep.likelihoods import Poisson
    >>> t = np.arange(100.0); y = np.ones(100)
    >>> res = markov_ep(t, y, Matern32(1.0, 10.0), Poisson(), tol=1e-10)
    >>> d_kernel, d_lik = markov_ep_gradient(res, t, y, Matern32(1.0, 10.0), Poisson())
    >>> d_kernel.shape, d_lik.shape
    ((2,), (0,))
    """
    t = float_array(t, "t", 1, fix="t holds one time per row.")
    n = t.shape[0]
    if result.site_tau.shape != (n,):
        raise ValueError(f"t must hold the {result.site_tau.size} times of the EP result; "
                         f"got {n}.")
    order, starts = _arrange(t, series)
    ts = np.ascontiguousarray(t[order])
    tau = np.ascontiguousarray(result.site_tau[order])
    nu = np.ascontiguousarray(result.site_nu[order])
    theta = np.asarray(kernel.theta, dtype=float)
    d_theta = _central_differences(ts, tau, nu, starts, kernel, theta, step,
                                   result.periodic_order)
    if not likelihood.n_dims:
        return d_theta, np.zeros(0)
    y = likelihood.encode_targets(y)
    # the sites the evidence left out (an improper cavity, by the rule markov_ep used)
    # stay out here
    ok, scratch = np.empty(n, dtype=np.bool_), np.empty(n)
    cavities(result.mean, result.var, result.site_tau, result.site_nu, ok, scratch, scratch)
    d_lik = likelihood.tilted_dparams(y[ok], result.cavity_mean[ok], result.cavity_var[ok],
                                      extra=None if extra is None else
                                      likelihood.check_extra(extra, n)[ok]).sum(0)
    return d_theta, d_lik


def markov_predict(result: MarkovEPResult, t: Any, t_new: Any, kernel: Any, *,
                   series: Any = None, series_new: Any = None
                   ) -> Tuple[np.ndarray, np.ndarray]:
    """Posterior mean and variance of f at the times ``t_new`` (interpolation between
    the training times, forecasts beyond them), from the sites of ``result`` at ``t``:
    the new times join the filter as sites that carry no information (O(n + n_new)).
    ``series_new`` says which series each new time belongs to (with ``series``).

    Parameters
    ----------
    result : MarkovEPResult
        The output of :func:`markov_ep`.
    t : array-like (n,)
        The training times of ``result``, in the order given to :func:`markov_ep`.
    t_new : array-like (m,)
        The times to predict at, in any order.
    kernel : fastep kernel
        The kernel of the run (a state-space one, as for :func:`markov_ep`).
    series : array-like (n,), optional
        The series id per training row, as given to :func:`markov_ep`; given together
        with ``series_new``.
    series_new : array-like (m,), optional
        The series id of each new time (a series absent from ``series`` gets the prior).

    Returns
    -------
    mean, var : ndarray (m,)
        Posterior mean and variance of f at ``t_new``, in the order given.

    Examples
    --------
    >>> import numpy as np
    >>> from fastep.kernels import Matern12
    >>> from fastep.likelihoods import Gaussian
    >>> t = np.array([0.0, 1.0]); res = markov_ep(t, np.array([1.0, 1.0]), Matern12(),
    ...                                           Gaussian(0.01), tol=1e-12)
    >>> mean, var = markov_predict(res, t, [0.5, 50.0], Matern12())
    >>> bool(0.5 < mean[0] < 1.0), bool(abs(mean[1]) < 1e-6 and abs(var[1] - 1.0) < 1e-6)
    (True, True)
    """
    t = float_array(t, "t", 1, fix="t holds one time per row.")
    t_new = float_array(t_new, "t_new", 1, fix="t_new holds one time per row.")
    n, m = t.shape[0], t_new.shape[0]
    if result.site_tau.shape != (n,):
        raise ValueError(f"t must hold the {result.site_tau.size} times of the EP result; "
                         f"got {n}.")
    if (series is None) != (series_new is None):
        raise ValueError("give series and series_new together (the series of the "
                         "training times and of the new ones), or neither.")
    both = np.concatenate([t, t_new])
    ids = None if series is None else np.concatenate([np.asarray(series),
                                                      np.asarray(series_new)])
    if ids is not None and ids.shape[0] != n + m:
        raise ValueError(f"series must hold {n} ids and series_new {m}; got "
                         f"{np.asarray(series).shape[0]} and "
                         f"{np.asarray(series_new).shape[0]}.")
    order, starts = _arrange(both, ids)
    tau = np.concatenate([result.site_tau, np.zeros(m)])[order]
    nu = np.concatenate([result.site_nu, np.zeros(m)])[order]
    _, mean, var = _log_norm(np.ascontiguousarray(both[order]), np.ascontiguousarray(tau),
                             np.ascontiguousarray(nu), starts, kernel, result.periodic_order,
                             smooth=True)
    inv = np.empty(n + m, dtype=np.int64)
    inv[order] = np.arange(n + m)
    return mean[inv][n:].copy(), var[inv][n:].copy()
