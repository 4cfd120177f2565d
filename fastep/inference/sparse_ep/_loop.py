"""The sparse EP loop, written once over where the sites live (:class:`Sites`: this
process's arrays, or a Dask cluster's chunks), and robust EP's step control on q(v)."""
from __future__ import annotations

import abc

import numpy as np

from ...exceptions import NotPositiveDefiniteError
from .._sweep import backtrack
from ._posterior import _InducingPosterior, _precision_factor, _symmetrise_lower


class Sites(abc.ABC):
    """Where the sites of a sparse EP run live, and how a sweep over them runs: the
    protocol :func:`drive` calls.  Two hold them: this process's arrays
    (:class:`~fastep.inference.sparse_ep._local._LocalSites`) and a Dask cluster's chunks
    (:class:`~fastep.inference.sparse_ep._cluster.ClusterSites`).  A sweep is a map over
    chunks of rows (:class:`~fastep.inference.sparse_ep._sweep._SweepPart`) and a sum
    of their m x m reports (:class:`~fastep.inference.sparse_ep._sweep.SweepSums`)."""

    @abc.abstractmethod
    def warm_pass(self, build):
        """A warm start's pass at the given sites: d_i for every site, and (``build``)
        the sums ``(P_G, b_G)`` that make q(v) from them (host arrays)."""

    @abc.abstractmethod
    def reset(self):
        """Start cold: zero sites, d_i recomputed in the first sweep."""

    @abc.abstractmethod
    def sweep(self, q, prior, first, damping, sums=True):
        """Parallel EP from ``q`` (``prior``: q is the prior) with steps of ``damping``:
        the proposed sites kept aside, a :class:`SweepSums` returned (``sums=False``, an
        evaluation pass: without the m x m sums of q, though this process's sites may take
        the gradient's first-pass sums there, :class:`_LocalSites`)."""

    @abc.abstractmethod
    def adopt(self):
        """The last sweep's proposals become the sites."""

    @abc.abstractmethod
    def shrink(self):
        """Halve the step of the adopted proposals from the sites before them (robust
        EP's backtracking)."""

    @abc.abstractmethod
    def keep_marginals(self, q, out):
        """Leave the marginals, cavities and site terms at the final sites and ``q`` where
        the result reads them (``out``: the last sweep's report)."""


class ChunkSequentialSites(Sites):
    """Sites that also run the chunk-sequential schedule (q refreshed after every block of
    rows); on a cluster that would be a round trip per block, so there sparse EP runs the
    parallel schedule only."""

    @abc.abstractmethod
    def sequential_passes(self, ctl, q, prior):
        """Chunk-sequential passes from ``q`` until ``ctl`` (a :class:`SweepControl`) says
        done; returns q after the last one."""


def drive(sites, L_uu, q, warm, ctl, schedule, robust):
    """The sparse EP loop, written once over where the sites live (``sites``, a
    :class:`Sites`), which run the sweeps as a map over chunks of rows and a sum of m x m
    matrices; ``ctl``: the run's :class:`~fastep.inference._sweep.SweepControl`, fresh.
    Returns ``(q, ctl, log Z, skipped)`` at the final sites, whose marginals ``sites``
    keeps from the last (evaluation) pass."""
    if schedule == "sequential" and not isinstance(sites, ChunkSequentialSites):
        raise ValueError(f"{type(sites).__name__} runs the parallel schedule only; got "
                         f"schedule={schedule!r}.")
    prior = _InducingPosterior.prior(L_uu)
    if warm:
        P_G, b_G = sites.warm_pass(build=q is None)
        if q is None:
            try:
                q = _InducingPosterior(L_uu, prior.L_P, _symmetrise_lower(P_G), b_G)
            except NotPositiveDefiniteError:      # warm start unusable: start cold
                sites.reset()
                q = prior
    q = prior if q is None else q
    at_prior = q is prior
    sequential = schedule == "sequential" and ctl.max_iter > 0
    if sequential:
        try:
            q = sites.sequential_passes(ctl, q, prior=at_prior)
        except NotPositiveDefiniteError:
            # negative site precisions made a partly updated q improper: parallel EP from
            # a cold start instead (d_i is recomputed in its first sweep)
            sites.reset()
            q, at_prior, sequential = prior, True, False
            ctl = ctl.restarted()
    while True:
        first = ctl.sweeps == 0
        out = sites.sweep(q, prior=first and at_prior, first=first and not sequential,
                          damping=ctl.damping, sums=not sequential)
        log_ev = q.log_z_global() + out.site_ev
        if sequential:                          # the evaluation pass after the last one
            ctl.history.append(log_ev)
            break
        if ctl.done(log_ev):
            break
        ctl.advance(out.change, turn=out.turn)
        sites.adopt()
        P_G = _symmetrise_lower(out.P_G)
        if robust:
            q = _backtrack(q, P_G, out.b_G, sites.shrink, ctl)
        else:
            q = _InducingPosterior(L_uu, q.L_P, P_G, out.b_G)
    sites.keep_marginals(q, out)
    return q, ctl, log_ev, out.skipped


def _backtrack(q, P_G, b_G, shrink, ctl):
    """Robust sparse EP (:func:`fastep.inference._sweep.backtrack`, as in
    :func:`fastep.inference.ep._backtrack`): q at the proposed sites if its precision is
    positive definite, else at a shorter step.  In the current q's whitened coordinates
    the proposal's precision is ``I + L_P P_G L_P^T`` and the old one ``L_P L_P^T``; both,
    and b, are linear in the sites, so a shorter step blends them."""
    L = q.L_P
    P_new, b_new = np.eye(L.shape[0]) + L @ P_G @ L.T, L @ b_G
    P_old = L @ L.T

    def attempt(step):
        P = step * P_new + (1.0 - step) * P_old
        try:
            L_P = _precision_factor(0.5 * (P + P.T))
        except NotPositiveDefiniteError:
            return None
        return _InducingPosterior.from_factor(q.L_uu, L_P, step * b_new + (1.0 - step) * q.b)

    return backtrack(attempt, shrink, ctl,
                     "robust sparse EP: no step of at least {min_step:g} of the proposed site "
                     "update keeps q(u) proper; add jitter to the kernel or check the "
                     "likelihood parameters.")
