"""Sparse (inducing-point) Power EP for any EP likelihood, streamed over the data.

Inducing inputs Z, ``u = f(Z) ~ N(0, K_uu)``, whitened ``v = L_uu^-1 u ~ N(0, I)``.
Each site acts on the projection ``h_i = E[f_i | u] = V_i^T v`` with
``V = L_uu^-1 K_uf``, and ``f_i = h_i + N(0, d_i)``, ``d_i = K_ii - |V_i|^2``
(Qi, Abdel-Gawad & Minka 2010; Bui, Yan & Turner 2017, power alpha in (0, 1]).
The posterior is ``q(v) = N(m, P^-1)``, ``P = I + V T V^T``, ``m = P^-1 V nu``.

A parallel sweep updates every site from the same q (compiled ``prange`` loop, O(m) per
site once the marginals are known), then rebuilds q.  The chunk-sequential schedule (the
default) refreshes q after every block of two chunks instead, from the change of that
block's sites, ``P += V_b dT V_b^T`` as an update of q's Cholesky factor, so each pass
learns from the blocks before it (online / stochastic EP; Li, Hernandez-Lobato & Turner
2015): same fixed point, about half the passes.
The data are read in chunks of rows; per chunk the work is BLAS-3::

    G = R^-1 K(Z, X_c),  R = L_uu L_P              (compiled Gram, then one dtrmm in place)
    mean(h_i) = G_i^T beta,  var(h_i) = |G_i|^2     (beta = L_P^-1 b)
    P_G += G diag(tau) G^T,  b_G += G nu             (dsyrk / gemv)

and ``P = I + L_P P_G L_P^T``, ``b = L_P b_G`` at the end of the sweep, so memory is
O(chunk m + m^2) plus O(n) site vectors, whatever n is.  ``d_i`` is computed once.

log Z (the Power-EP energy at the current sites, Bui et al. 2017 eq. 19)::

    log Z = 1/2 b^T P^-1 b - 1/2 log|P|
            + (1/alpha) sum_i [log Z_i + 1/2 log(v_-i / v_i) + mu_-i^2/(2 v_-i) - mu_i^2/(2 v_i)]

with ``Z_i = int N(h | mu_-i, v_-i) N(f | h, d_i) p(y_i | f)^alpha``.  At alpha = 1
and Z = X it is dense EP's log Z_EP; with a Gaussian likelihood its fixed point
is the collapsed objective of :mod:`fastep.inference.collapsed`.

The driver and its gradient are written once over a backend (:mod:`fastep.backend`):
a sweep is a map over chunks of rows followed by a sum of m x m matrices.  On the CPU
the chunks are shared among threads that call single-threaded BLAS without the GIL; on
the GPU the data, the sites and the per-site vectors stay on the device and only the
m x m sums come back.  ``q(v)`` (m x m) is refactorised on the host by the same code for
every backend.

The package: the public functions (``_run``), q(v) and the result (``_posterior``), one
sweep over chunks of rows (``_sweep``), the loop over a declared :class:`Sites` protocol
(``_loop``), the sites of this process (``_local``) and of a Dask cluster (``_cluster``),
and the gradient passes (``_gradient``).
"""
from ._loop import ChunkSequentialSites, Sites
from ._posterior import SparseEPResult
from ._run import (CHUNK, GRAM_CACHE, run_sparse_ep, sparse_ep, sparse_ep_gradient,
                   sparse_posterior_from_state)

__all__ = ["sparse_ep", "run_sparse_ep", "sparse_ep_gradient", "sparse_posterior_from_state",
           "SparseEPResult", "Sites", "ChunkSequentialSites", "CHUNK", "GRAM_CACHE"]
