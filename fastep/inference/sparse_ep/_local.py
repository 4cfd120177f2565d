"""The sites of a sparse EP run in this process (threads or a GPU), and the
chunk-sequential schedule that only they run."""
from __future__ import annotations

import functools
import math

from .._sweep import StepTurn, halve_towards
from ._loop import ChunkSequentialSites
from ._posterior import _InducingPosterior, _on_backend
from ._sweep import SweepSums, _SweepPart, _sum_parts, gradient_sums, warm_rows


class _LocalSites(ChunkSequentialSites):
    """The sites of a sparse EP run in this process (the backend's arrays, all n), swept
    by the backend's workers: each takes a fixed share of the chunks (:class:`_SweepPart`)
    and the sums are added in a fixed order."""

    def __init__(self, ctx, tau, nu, chunk_size, gradient=False):
        be, xp = ctx.be, ctx.be.xp
        self.ctx, self.tau, self.nu, self.chunk_size = ctx, tau, nu, chunk_size
        self.n, m = tau.shape[0], ctx.Z.shape[0]
        self.new_tau, self.new_nu = xp.empty(self.n), xp.empty(self.n)
        self.turn = StepTurn()
        n_workers = be.n_workers(self.n, m, chunk_size)
        self.parts = [_SweepPart(be, k, n_workers, self.n, m, chunk_size)
                      for k in range(n_workers)]
        # ``gradient``: an evaluation pass also takes the evidence gradient's first-pass
        # sums (``first_pass``, for one :func:`sparse_ep_gradient`; ML-II's evaluations)
        self.gradient, self.first_pass = gradient, None

    def warm_pass(self, build):
        """d_i at the given sites, ``K(X, Z)`` into the Gram cache and (``build``) the sums
        that make q from them: each worker its share of the chunks, as in a sweep."""
        ctx = self.ctx
        for part in self.parts:
            part.P_G[...], part.b_G[...] = 0.0, 0.0
        ctx.be.run_all([functools.partial(warm_rows, ctx, part.chunks, self.tau, self.nu, build,
                                          part.P_G, part.b_G) for part in self.parts])
        ctx.cached = ctx.cache is not None
        return _sum_parts(ctx.be, self.parts)

    def reset(self):
        """A cold start: zero sites, d_i recomputed in the first sweep."""
        self.tau[...], self.nu[...] = 0.0, 0.0
        self.ctx.cold = True
        self.turn = StepTurn()

    def sequential_passes(self, ctl, q, prior):
        return _sequential_passes(self.ctx, ctl, self.parts, q, self.tau, self.nu,
                                  self.new_tau, self.new_nu, self.n, self.chunk_size, prior)

    def sweep(self, q, prior, first, damping, sums=True):
        """Parallel EP proposals for every site from ``q`` (into ``new_tau``, ``new_nu``),
        and the marginals and site terms at the current sites; an evaluation pass
        (``sums=False``) of a run that asked for ``gradient`` also leaves the gradient's
        first-pass sums in ``first_pass``."""
        ctx, be, xp = self.ctx, self.ctx.be, self.ctx.be.xp
        args = (ctx, _on_backend(be, q, prior=prior), self.tau, self.nu, self.new_tau,
                self.new_nu, first, damping)
        gradient = self.gradient and not sums
        skipped = sum(r[0] for r in be.run_all(
            [functools.partial(part.sweep, *args, sums=sums, gradient=gradient)
             for part in self.parts]))
        ok = xp.isfinite(ctx.site_ev)
        out = SweepSums(skipped, float(xp.sum(ctx.site_ev[ok])), math.nan)
        self.first_pass = gradient_sums(be, self.parts, q.L_P) if gradient else None
        if sums:
            out.P_G, out.b_G = _sum_parts(be, self.parts)
            out.change, out.turn = self.turn(xp, self.tau, self.nu, self.new_tau, self.new_nu)
        return out

    def adopt(self):
        """The proposals become the sites."""
        self.tau, self.new_tau = self.new_tau, self.tau
        self.nu, self.new_nu = self.new_nu, self.nu

    def shrink(self):
        """Halve the step of the adopted proposals (robust EP)."""
        halve_towards(self.new_tau, self.new_nu, self.tau, self.nu)()

    def keep_marginals(self, q, out):
        """The last sweep left the marginals at the final sites in ``ctx``."""


# the first pass from the prior takes in blocks of max(FIRST_BLOCK, GROWTH x the rows already
# taken in) rows (chosen by measuring passes to tol at n = 2e5 and 1e6)
FIRST_BLOCK, GROWTH = 16, 0.25


def _blocks(n, chunk_size, growing):
    """Row ranges ``(c0, c1)`` of the blocks of the chunk-sequential schedule: two chunks
    each, whatever the number of workers (the answer does not depend on it); in the first
    pass from the prior (``growing``) a block holds at most GROWTH times the rows already
    taken in, so q has learnt from earlier blocks before a block can overwhelm it (a block
    of parallel updates from a cavity that knows little of the data overshoots)."""
    full, c0 = 2 * chunk_size, 0
    while c0 < n:
        size = min(full, max(FIRST_BLOCK, int(GROWTH * c0))) if growing else full
        yield c0, min(n, c0 + size)
        c0 += size


def _share(c0, c1, n_parts, chunk_size):
    """Rows c0:c1 as ``n_parts`` lists of contiguous ranges of at most ``chunk_size`` rows
    (part k takes ranges k, k + n_parts, ...)."""
    pieces = max(n_parts, -(-(c1 - c0) // chunk_size))
    step = -(-(c1 - c0) // pieces)
    ranges = [(a, min(c1, a + step)) for a in range(c0, c1, step)]
    return [ranges[k::n_parts] for k in range(min(n_parts, len(ranges)))]


def _sequential_passes(ctx, ctl, parts, q, tau, nu, new_tau, new_nu, n, chunk_size, prior):
    """Chunk-sequential EP: the rows are visited in blocks of two chunks; every
    block's sites are updated (damped) from the current q, which is refreshed from their
    change before the next block (rank-``block`` update, :meth:`_InducingPosterior.updated`).
    Each pass is scored like a parallel sweep (largest site change, log Z with every site
    term from the cavity it was updated with); returns q after the last pass.  The fixed
    point is that of parallel EP; the caller ends with an evaluation pass at it."""
    be, xp = ctx.be, ctx.be.xp
    while True:
        first, change = ctl.sweeps == 0, 0.0
        for c0, c1 in _blocks(n, chunk_size, growing=first and prior):
            qd = _on_backend(be, q, prior=prior)
            shares = _share(c0, c1, len(parts), chunk_size)
            used = parts[:len(shares)]
            done = be.run_all([functools.partial(part.sweep, ctx, qd, tau, nu, new_tau, new_nu,
                                                 first, ctl.damping, share)
                               for part, share in zip(used, shares)])
            change = max([change] + [r[1] for r in done])
            P_G, b_G = _sum_parts(be, used)
            q, prior = q.updated(P_G, b_G), False
        ok = xp.isfinite(ctx.site_ev)
        ctl.advance(change)
        if ctl.done(q.log_z_global() + float(xp.sum(ctx.site_ev[ok]))):
            # derived factors recomputed from (L_P, b) as a loaded model does, so a saved
            # model evaluates bit for bit the same
            return _InducingPosterior.from_factor(q.L_uu, q.L_P, q.b)
