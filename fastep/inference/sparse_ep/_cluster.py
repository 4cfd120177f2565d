"""Sparse Power EP on a Dask cluster: the sites live on the workers, next to their rows.

This is one more way to hold the sites of :func:`fastep.sparse_ep` and run its sweeps;
the loop itself (:func:`fastep.inference.sparse_ep._loop.drive`), the per-chunk sweep
(``_SweepPart``), q(u) and the gradient passes are the ones every backend runs.  With X
a row-chunked ``dask.array`` (from Parquet, Zarr, .npy or memory), on the active
``distributed.Client``:

* X, y (and the likelihood's extra columns) are persisted on the workers, chunk by chunk;
  each chunk's sites ``tau, nu`` and ``d_i`` are created by a task that reads that chunk,
  so they stay on the worker that holds the rows and are never gathered to the client.
* A parallel sweep is one task per chunk: parallel EP from the broadcast q(u) over the
  chunk's rows (in sub-chunks of 8192 rows, BLAS-3), returning the new sites (kept on the
  worker) and the chunk's m x m sums ``G diag(tau) G^T``, ``G nu``.  The sums are added
  on each worker first, then across workers: per sweep about ``(workers + 1) 8 m^2``
  bytes cross the network, whatever n is.  The client refactorises q(u) (m x m) and
  submits it for the next sweep.
* The chunk-sequential schedule would be a round trip per block of rows; on a cluster
  sparse EP runs the parallel schedule (the same fixed point).
* **Fault tolerance by recomputation.**  Every chunk's sites are the output of a chain of
  tasks (one per sweep) whose inputs are the chunk's data and each sweep's q(u), itself a
  task holding its m x m numbers.  If a worker dies, the scheduler recomputes the lost
  chunks' chains from their lineage on the workers left; every task is deterministic
  (single-threaded compiled loops, fixed summation order within a chunk), so the fit
  ends at the same answer.  No checkpoint files are needed, and lost work is at most
  one chain of sweeps per lost chunk (cheap next to a fit's wall clock).

Examples
--------
A local cluster of two single-threaded worker processes::

    from distributed import Client, LocalCluster
    import dask.array as da
    cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True)
    client = Client(cluster)
    X = da.from_zarr("data.zarr", component="X")     # (n, d), chunked by rows
    y = da.from_zarr("data.zarr", component="y")
    res = fastep.sparse_ep(RBF(), Z, X, y, Probit())  # runs on the client's cluster

Connect to a scheduler elsewhere with ``Client("tcp://scheduler:8786")`` instead.

Over 450 lines: one job, sparse EP's sites on Dask workers: the worker-side chunk state,
its failure handling and the client side that drives it.
"""
from __future__ import annotations

import asyncio
import contextlib
import math
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np

import dask
import dask.array as da
from dask.core import flatten
from dask.sizeof import sizeof
from distributed import Future, get_client, wait

from ...backend.cpu import CPU
from .._sweep import SweepControl, site_change
from ..inducing import cholesky_uu
from ._gradient import (_add_all, gradient_constants, gradient_finish, gradient_first,
                        gradient_second, gradient_second_constants)
from ._loop import Sites, drive
from ._posterior import SparseEPResult, _on_backend, _symmetrise_lower
from ._sweep import SweepSums, _SweepPart, _chunks, _sum_parts, sweep_context, warm_rows

#: Rows per dask chunk when the caller's X has a single chunk (or none).
DEFAULT_BLOCK_ROWS = 2 ** 18
#: Fewest rows of a chunk made to give every worker a share.
MIN_BLOCK_ROWS = 4096


def client_or_error(owner="fastep"):
    """The active ``distributed.Client``, or a ValueError saying how to start one."""
    try:
        return get_client()
    except ValueError:
        raise ValueError(
            f"{owner} got dask arrays but no distributed.Client is active. Start one first: "
            "`from distributed import Client, LocalCluster; client = Client(LocalCluster("
            "n_workers=2, threads_per_worker=1))` on this machine, or "
            "`Client('tcp://scheduler:8786')` for a cluster elsewhere.") from None


def as_row_chunked(a, name, n=None, row_chunks=None, ndim=None, min_chunks=1):
    """``a`` (dask array, NumPy array) as a float64 dask array chunked by rows only (the
    row chunks of X when given; else at least ``min_chunks`` chunks of at least
    MIN_BLOCK_ROWS rows where there are enough rows, so every worker gets a share), with
    its shape checked."""
    if not hasattr(a, "dask"):
        a = np.asarray(a)
        a = da.from_array(a, chunks=(row_chunks or DEFAULT_BLOCK_ROWS,) + a.shape[1:])
    if ndim is not None and a.ndim != ndim:
        raise ValueError(f"{name} must be a {ndim}-d array; got shape {a.shape}.")
    if any(math.isnan(c) for c in a.chunks[0]):
        raise ValueError(f"{name} has chunks of unknown length (a dask array from a "
                         f"DataFrame); use df.to_dask_array(lengths=True).")
    if n is not None and a.shape[0] != n:
        raise ValueError(f"{name} must have one row per row of X ({n}); got shape "
                         f"{a.shape}.")
    if a.dtype.kind not in "biuf":
        raise ValueError(f"{name} must hold real numbers; got dtype {a.dtype}.")
    a = a.astype(np.float64)
    rest = {i: -1 for i in range(1, a.ndim)}
    if row_chunks is not None:
        return a.rechunk((row_chunks,) + tuple(-1 for _ in range(1, a.ndim)))
    want = min(min_chunks, max(1, a.shape[0] // MIN_BLOCK_ROWS))
    if a.numblocks[0] < want or (a.numblocks[0] == 1 and a.shape[0] > DEFAULT_BLOCK_ROWS):
        size = min(DEFAULT_BLOCK_ROWS, -(-a.shape[0] // want))
        return a.rechunk({0: size, **rest})
    return a.rechunk(rest) if rest else a


def _block_futures(client, a):
    """``a`` persisted on the workers: one future per row chunk, in row order."""
    a = client.persist(a)
    return a, [Future(key, client) for key in flatten(a.__dask_keys__())]


def _on(worker):
    """Submit options that place a task on ``worker`` (None: anywhere), loosely."""
    return {"workers": [worker], "allow_other_workers": True} if worker else {}


def _colocated(client, blocks, anchors):
    """Futures of ``blocks``, each on the worker that holds the same chunk of ``anchors``
    (a copy moved there once where Dask put it elsewhere): a chunk's rows, targets and
    sites are then read by one task on one worker, sweep after sweep, without transfers."""
    wait(list(blocks) + list(anchors))
    who = client.who_has(list(blocks) + list(anchors))
    out = []
    for block, anchor in zip(blocks, anchors):
        home = who.get(anchor.key) or ()
        if not home or home[0] in (who.get(block.key) or ()):
            out.append(block)
        else:
            out.append(client.submit(_identity, block, pure=False, **_on(home[0])))
    return out


@dataclass
class _BlockSites:
    """The sites of one chunk of rows (on a worker): ``tau, nu`` and ``d_i`` (None before
    the first sweep of a cold start); ``marginals``: the chunk's per-site vectors from an
    evaluation pass."""

    tau: np.ndarray
    nu: np.ndarray
    resid: np.ndarray | None
    marginals: dict | None = None


@dataclass
class _Broadcast:
    """What a sweep's tasks read of q(v): ``R^-1`` (m x m) and ``beta`` (m)."""

    R_inv: np.ndarray
    beta: np.ndarray


def _nbytes(*arrays):
    return int(sum(a.nbytes for a in arrays if isinstance(a, np.ndarray)))


# Dask sizes what it holds and moves with ``sizeof`` (its memory manager spills by it, and
# its transfer accounting counts it); objects it does not know count as a few dozen bytes
@sizeof.register(_BlockSites)
def _sizeof_sites(s):
    return _nbytes(s.tau, s.nu, s.resid, *(s.marginals or {}).values())


@sizeof.register(_Broadcast)
def _sizeof_broadcast(b):
    return _nbytes(b.R_inv, b.beta)


@sizeof.register(SweepSums)
def _sizeof_sums(s):
    return _nbytes(s.P_G, s.b_G) + 32


def _sites_from(y, tau, nu):
    """A chunk's starting sites (zeros, or given), made where its targets ``y`` are."""
    tau = np.zeros(y.shape[0]) if tau is None else np.array(tau, dtype=float)
    nu = np.zeros(y.shape[0]) if nu is None else np.array(nu, dtype=float)
    return _BlockSites(tau, nu, None)


def _encoded(const, X, y, extra, offset):
    """The chunk's data, checked at the boundary of the compiled code: finite X (the
    global row of the first bad entry named), y in the likelihood's encoding, extra."""
    if not np.all(np.isfinite(X)):
        i = offset + int(np.argwhere(~np.isfinite(X))[0, 0])
        raise ValueError(f"X must be finite; row {i} holds NaN or infinity. Remove or impute "
                         "those rows.")
    lik = const.likelihood.rows(offset, offset + X.shape[0])
    return lik.encode_targets(y), lik.check_extra(extra, X.shape[0])


def _context(const, X, y, extra, offset, cold, resid):
    y, extra = _encoded(const, X, y, extra, offset)
    ctx = sweep_context(CPU, const.kernel, const.likelihood, const.Z, const.L_uu, X, y,
                        extra, const.alpha, cold)
    if resid is not None:
        ctx.resid[...] = resid
    return ctx


def _sweep_block(const, state, X, y, extra, offset, q, first, prior, damping, evaluate):
    """One chunk's share of a parallel sweep (the ``_SweepPart`` every backend runs, over
    the chunk's rows with the serial site loop): new sites and the chunk's sums, or, in
    an evaluation pass, the marginals at the current sites."""
    n_rows, m = X.shape[0], const.Z.shape[0]
    ctx = _context(const, X, y, extra, offset, cold=state.resid is None, resid=state.resid)
    part = _SweepPart(CPU, 0, 1, n_rows, m, const.chunk_size)
    part.serial = True                       # one thread per worker: no nested threads
    new_tau, new_nu = np.empty(n_rows), np.empty(n_rows)
    skipped, _ = part.sweep(ctx, _on_backend(CPU, q, prior=prior), state.tau, state.nu,
                            new_tau, new_nu, first, damping, sums=not evaluate)
    ok = np.isfinite(ctx.site_ev)
    out = SweepSums(int(skipped), float(np.sum(ctx.site_ev[ok])), math.nan)
    if evaluate:
        marginals = {k: getattr(ctx, k).copy() for k in
                     ("mean", "var", "mu_cav", "var_cav", "site_ev")}
        return _BlockSites(state.tau, state.nu, ctx.resid, marginals), out
    out.P_G, out.b_G = part.P_G, part.b_G
    out.change = site_change(np, state.tau, state.nu, new_tau, new_nu)
    return _BlockSites(new_tau, new_nu, ctx.resid), out


def _warm_block(const, state, X, y, extra, offset, build):
    """d_i of a chunk at given sites and (``build``) their sums in the prior's coordinates
    (:func:`~fastep.inference.sparse_ep._sweep.warm_rows` over the chunk's rows)."""
    ctx = _context(const, X, y, extra, offset, cold=False, resid=None)
    P_G, b_G = warm_rows(ctx, _chunks(X.shape[0], const.chunk_size), state.tau, state.nu,
                         build)
    return _BlockSites(state.tau, state.nu, ctx.resid), SweepSums(0, 0.0, 0.0, P_G, b_G)


def _halve(old, new):
    """Robust EP: half the step from ``old``'s sites to ``new``'s."""
    return _BlockSites(0.5 * (old.tau + new.tau), 0.5 * (old.nu + new.nu), new.resid)


def _zero(state):
    return _BlockSites(np.zeros_like(state.tau), np.zeros_like(state.nu), None)


def _first(pair):
    return pair[0]


def _second(pair):
    return pair[1]


def _add_second(*pairs):
    """The sum of the reports of ``(sites, report)`` pairs (one task per worker, no
    task per chunk to pick the report out first)."""
    return _add(*(p[1] for p in pairs))


def _field(state, name):
    if name in ("tau", "nu", "resid"):
        return getattr(state, name)
    return state.marginals[name]


def _gradient_block(const, state, X, y, extra, offset, c, pass_):
    y, extra = _encoded(const, X, y, extra, offset)
    y_d, extra_d, _ = CPU.site_inputs(const.likelihood, y, extra)
    return _add_all(pass_(c, np.ascontiguousarray(X[c0:c1]), y_d[c0:c1],
                              extra_d[c0:c1], state.tau[c0:c1], state.nu[c0:c1])
                        for c0, c1 in _chunks(X.shape[0], const.chunk_size))


def _add(*parts):
    """Sum of the chunks' reports, in the order given: :class:`SweepSums` (sites skipped
    and site terms added, the largest change kept) or tuples of arrays."""
    if isinstance(parts[0], SweepSums):
        sums = (None, None) if parts[0].P_G is None else _sum_parts(CPU, parts)
        return SweepSums(sum(p.skipped for p in parts), sum(p.site_ev for p in parts),
                         max(p.change for p in parts), *sums)
    return _add_all(parts)


def _identity(value):
    return value


async def _pause_stealing(dask_scheduler):
    """Stop the scheduler's work stealing; whether it was running."""
    stealing = dask_scheduler.extensions.get("stealing")
    if stealing is None or "stealing" not in dask_scheduler.periodic_callbacks:
        return False
    await stealing.stop()
    return True


async def _resume_stealing(dask_scheduler):
    started = dask_scheduler.extensions["stealing"].start()
    if asyncio.iscoroutine(started):            # a coroutine in newer distributed
        await started


@contextlib.contextmanager
def stealing_paused(client):
    """Dask's work stealing off while sparse EP runs: a stolen chunk task drags the chunk's
    rows and sites to another worker (a few MB each, more with n), where the sweep's tasks
    are already balanced by construction (one per chunk, placed with their data).  It is
    turned back on afterwards.  A worker that dies still has its tasks rescheduled (that
    is not stealing)."""
    paused = client.run_on_scheduler(_pause_stealing)
    try:
        yield
    finally:
        if paused:
            client.run_on_scheduler(_resume_stealing)


class ClusterSites(Sites):
    """The sites of a sparse EP run held on a Dask cluster's workers, chunk by chunk (see
    the module docstring); it implements the :class:`~fastep.inference.sparse_ep._loop.Sites`
    protocol that :func:`~fastep.inference.sparse_ep._loop.drive` calls."""

    def __init__(self, client, kernel, likelihood, Z, L_uu, X, y, extra, alpha, tau, nu,
                 chunk_size):
        self.client = client
        self.n = X.shape[0]
        workers = len(client.scheduler_info().get("workers", {})) or 1
        X = as_row_chunked(X, "X", ndim=2, min_chunks=2 * workers)
        rows = X.chunks[0]
        self.offsets = np.concatenate([[0], np.cumsum(rows)[:-1]]).astype(int).tolist()
        self.rows = rows
        self.X, self.x_blocks = _block_futures(client, X)
        _, self.y_blocks = _block_futures(client, as_row_chunked(y, "y", self.n, rows, 1))
        self.y_blocks = _colocated(client, self.y_blocks, self.x_blocks)
        # where each chunk lives, asked once: its tasks are placed there, and their reports
        # summed there, sweep after sweep (a scheduler round trip per call saved)
        who = client.who_has(self.x_blocks)
        self.homes = [(who.get(f.key) or (None,))[0] for f in self.x_blocks]
        # extra=None: each chunk takes its columns from Likelihood.rows() on its worker
        if extra is not None:
            extra = as_row_chunked(extra, "extra", self.n, rows, 2)
            self.extra_blocks = _colocated(client, _block_futures(client, extra)[1],
                                           self.x_blocks)
        else:
            self.extra_blocks = [None] * len(rows)
        self.const = client.submit(_identity, SimpleNamespace(
            kernel=kernel, likelihood=likelihood, Z=Z, L_uu=L_uu, alpha=float(alpha),
            chunk_size=chunk_size), pure=False)
        if tau is None:
            self.states = self._per_chunk(_sites_from, ((yb, None, None)
                                                        for yb in self.y_blocks))
        else:
            tb, nb = (_colocated(client, _block_futures(client, as_row_chunked(
                v, name, self.n, rows, 1))[1], self.x_blocks)
                for v, name in ((tau, "site_tau"), (nu, "site_nu")))
            self.states = self._per_chunk(_sites_from, zip(self.y_blocks, tb, nb))
        self.proposals = self.previous = None

    # --- the map and the reduction -------------------------------------------------
    def _map(self, fn, *args):
        """One task per chunk, ``fn(const, state, X, y, extra, offset, *args)``: placed
        where the chunk's sites and rows are."""
        return self._per_chunk(fn, ((self.const, st, x, y, e, o, *args) for st, x, y, e, o in
                                    zip(self.states, self.x_blocks, self.y_blocks,
                                        self.extra_blocks, self.offsets)))

    def _per_chunk(self, fn, arg_rows):
        """``fn(*args)`` for each chunk's row of ``arg_rows``, on the worker that holds the
        chunk's rows.  Dask alone would run a task where it could start soonest and move
        the chunk (megabytes) there, sweep after sweep; the restriction is loose, so if
        that worker dies another one takes over (and recomputes what it lost)."""
        return [self.client.submit(fn, *args, pure=False, **_on(home))
                for home, args in zip(self.homes, arg_rows)]

    def _reduce(self, futures, add=_add):
        """Sum the chunks' reports (``add`` of their futures): on each chunk's home worker
        first (in chunk order), then across workers (in the order of their first chunk);
        the result on the client.  The futures are grouped by the workers their tasks were
        placed on, without waiting for them or asking the scheduler where they ended."""
        groups = {}
        for f, home in zip(futures, self.homes):
            groups.setdefault(home or "", []).append(f)
        partials = [self.client.submit(add, *g, pure=False, **_on(w))
                    for w, g in groups.items()]
        if len(partials) == 1:
            return partials[0].result()
        return _add(*self.client.gather(partials))      # m x m numbers each: added here

    def _q(self, q):
        """q(v)'s m x m numbers as a task the workers read (recomputable: its value is in
        the task itself)."""
        return self.client.submit(_identity, _Broadcast(q.R_inv, q.beta), pure=False)

    # --- what drive() calls --------------------------------------------------------
    def _split(self, pairs):
        """``(sites, report)`` tasks split into the chunks' sites (kept on their workers)
        and their reports (summed, then released), so a chunk's m x m sums do not stay in
        memory with its sites."""
        sites = self._per_chunk(_first, ((p,) for p in pairs))
        return sites, self._reduce(pairs, add=_add_second)

    def warm_pass(self, build):
        self.states, out = self._split(self._map(_warm_block, build))
        return _symmetrise_lower(out.P_G), out.b_G

    def reset(self):
        self.states = self._per_chunk(_zero, ((s,) for s in self.states))

    def sweep(self, q, prior, first, damping, sums=True, evaluate=False):
        self.proposals, out = self._split(
            self._map(_sweep_block, self._q(q), first, prior, damping, evaluate))
        return out

    def adopt(self):
        self.previous, self.states = self.states, self.proposals

    def shrink(self):
        self.states = self._per_chunk(_halve, zip(self.previous, self.states))

    def keep_marginals(self, q, out):
        """An evaluation pass at the final sites (the marginals are not kept in every
        sweep, to keep the workers' memory at a few vectors per site)."""
        self.sweep(q, prior=False, first=False, damping=1.0, evaluate=True)
        self.states = self.proposals

    def array(self, name):
        """A per-site vector of the final pass as a dask array (its chunks stay put)."""
        return da.concatenate([
            da.from_delayed(dask.delayed(_field)(s, name), shape=(r,), dtype=float)
            for s, r in zip(self.states, self.rows)])

    def gradient(self, result, kernel, likelihood, inputs=True):
        """:func:`~fastep.inference.sparse_ep.sparse_ep_gradient` on the cluster: its two
        passes as maps over the chunks (at the result's sites) and sums."""
        c = gradient_constants(CPU, result, kernel, likelihood, inputs)
        with stealing_paused(self.client):
            c_f = self.client.submit(_identity, c, pure=False)
            first = self._reduce(self._map(_gradient_block, c_f, gradient_first))
            gradient_second_constants(c, *first)
            c_f = self.client.submit(_identity, c, pure=False)
            sums = self._reduce(self._map(_gradient_block, c_f, gradient_second))
        return gradient_finish(c, *sums)


def sparse_ep_on_cluster(kernel, Z, X, y, likelihood, alpha, damping, adaptive, tol, max_iter,
                         site_tau, site_nu, extra, chunk_size, callback, robust):
    """:func:`fastep.sparse_ep` with X a dask array (arguments checked there): the sweeps
    run on the active client's workers; the per-site vectors of the result are dask arrays
    whose chunks stay there."""
    client = client_or_error("sparse_ep")
    L_uu = cholesky_uu(kernel(Z))
    with stealing_paused(client):
        sites = ClusterSites(client, kernel, likelihood, Z, L_uu, X, y, extra, alpha, site_tau,
                             site_nu, chunk_size)
        ctl = SweepControl("sparse EP", damping, adaptive, tol, max_iter, callback)
        q, ctl, log_ev, skipped = drive(sites, L_uu, None, site_tau is not None, ctl,
                                        "parallel", robust)
    mean, var, resid = sites.array("mean"), sites.array("var"), sites.array("resid")
    ok = da.isfinite(sites.array("site_ev"))
    mu_cav, var_cav = ctl.finish(ok, sites.array("mu_cav"), sites.array("var_cav"), mean, var,
                                 da)
    return SparseEPResult(
        mean=mean, var=var + resid, site_tau=sites.array("tau"), site_nu=sites.array("nu"),
        log_marginal_likelihood=float(log_ev), n_iter=ctl.sweeps, converged=ctl.converged,
        n_skipped=int(skipped), cavity_mean=mu_cav, cavity_var=var_cav + resid,
        alpha=float(alpha), inducing_points=Z, history=ctl.history, resid=resid, _q=q,
        _backend=CPU, _cluster=sites)
