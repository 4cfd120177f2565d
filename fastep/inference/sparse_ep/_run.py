"""The public functions of sparse EP: arguments checked once, then the run in this
process or on a Dask cluster, a saved model's posterior, and the evidence gradient."""
from __future__ import annotations

import functools
import numbers
from typing import Any, Callable, Optional

import numpy as np
from numpy.typing import ArrayLike

from ..._checks import all_finite, float_array
from ..._dask import is_dask_array
from ...backend import CHUNK_ROWS, resolve
from ...likelihoods import check_likelihood, check_power
from .._sweep import SweepControl, check_sweep_controls, damping_rule, initial_sites
from ..inducing import cholesky_uu
from ._gradient import (_add_all, gradient_constants, gradient_finish, gradient_first,
                        gradient_second, gradient_second_constants)
from ._local import _LocalSites
from ._loop import drive
from ._posterior import SparseEPResult, _InducingPosterior
from ._sweep import _chunks, sweep_context


CHUNK = CHUNK_ROWS


GRAM_CACHE = 2 ** 31


def check_controls(alpha, damping, tol, max_iter, schedule):
    """Raise ValueError unless the power ``alpha`` is in (0, 1], the sweep controls are
    valid (:func:`~fastep.inference._sweep.check_sweep_controls`) and ``schedule`` is one
    of sparse EP's."""
    if not (isinstance(alpha, (int, float)) and 0.0 < alpha <= 1.0):
        raise ValueError(f"alpha must be in (0, 1] (1 = EP with a FITC-style posterior); "
                         f"got {alpha!r}.")
    check_sweep_controls(damping, tol, max_iter)
    if schedule not in ("sequential", "parallel"):
        raise ValueError(f"schedule must be 'sequential' or 'parallel'; got {schedule!r}.")


def _validate(Z, X, y, chunk_size, xp=np):
    """The data of a sparse EP run checked: X, Z, y and the chunk size; Z as a checked
    array.  ``xp=None``: a dask X, whose rows are checked on the workers."""
    if chunk_size is not None and (isinstance(chunk_size, bool)
                                   or not isinstance(chunk_size, numbers.Integral)
                                   or chunk_size < 1):
        raise ValueError(f"chunk_size must be a positive integer; got {chunk_size!r}.")
    if len(X.shape) != 2 or X.shape[0] == 0:
        raise ValueError(f"X must be a non-empty 2-D array (n_samples, n_features); got "
                         f"shape {tuple(X.shape)}.")
    Z = float_array(Z, "Z", 2, ("m", X.shape[1]), column=X.shape[1] == 1,
                    fix="Z holds the inducing inputs, one row per inducing point, with the "
                        "columns of X.")
    if not 1 <= Z.shape[0] <= X.shape[0]:
        raise ValueError(f"Z must hold between 1 and {X.shape[0]} inducing points (the rows "
                         f"of X); got {Z.shape[0]}.")
    shape = np.shape(y)
    if len(shape) == 2 and shape[1] == 1:
        shape = shape[:1]
    if len(shape) != 1 or shape[0] != X.shape[0]:
        raise ValueError(f"y must have one entry per row of X, shape ({X.shape[0]},); got "
                         f"shape {np.shape(y)}.")
    if xp is not None:                      # a dask X is checked chunk by chunk, on the workers
        _check_rows_finite(X, xp)
    return Z


def _check_rows_finite(X, xp, block=CHUNK_ROWS * 8):
    """Raise unless every entry of X is finite; X (possibly a memory map or a device
    array of module ``xp``) is read block by block, never copied whole."""
    for start in range(0, X.shape[0], block):
        rows = X[start:start + block]
        if not all_finite(rows, xp):
            bad = ~xp.isfinite(rows)
            i = start + int(np.argwhere(bad.get() if hasattr(bad, "get") else bad)[0, 0])
            raise ValueError(f"X must be finite; row {i} holds NaN or infinity. Remove or "
                             f"impute those rows.")


def _rows_of(X):
    """X itself when it is a 2-d array of numbers with row slices (ndarray, np.memmap,
    h5py dataset, CuPy), else X as a checked float array."""
    if hasattr(X, "shape") and len(X.shape) == 2 and hasattr(X, "dtype"):
        if X.dtype.kind not in "biuf":
            raise ValueError(f"X must hold real numbers; got dtype {X.dtype}.")
        return X
    return float_array(X, "X", 2)


def sparse_ep(kernel: Any, Z: ArrayLike, X: Any, y: Any, likelihood: Any, alpha: float = 1.0,
              damping: Optional[float] = None, tol: float = 1e-4, max_iter: int = 100,
              site_tau: Optional[ArrayLike] = None, site_nu: Optional[ArrayLike] = None,
              extra: Optional[ArrayLike] = None, chunk_size: Optional[int] = None,
              callback: Optional[Callable[[int, float], Any]] = None, device: str = "cpu",
              gram_cache: float = GRAM_CACHE, schedule: str = "sequential",
              robust: Optional[bool] = None) -> SparseEPResult:
    """Power EP with inducing points Z (see the module docstring).

    Parameters
    ----------
    kernel : fastep.kernels.Kernel
        The prior covariance function of f.
    Z : array-like (m, d)
        Inducing inputs, one row per inducing point, with the columns of X (1 <= m <= n).
    X : array-like (n, d)
        Training inputs, any 2-d array with row slices (ndarray, ``np.memmap``, h5py
        dataset, CuPy, a dask array for a run on a Dask cluster): read ``chunk_size``
        rows at a time.
    y : array-like (n,)
        Targets in the likelihood's encoding (binary likelihoods: -1/+1).
    likelihood : fastep.likelihoods.Likelihood
        The likelihood of every site (it must support the power ``alpha`` when below 1).
    alpha : float in (0, 1], default 1.0
        Power: 1 is EP (FITC-EP), alpha -> 0 approaches the variational (VFE) solution.
    damping : float in (0, 1] or None, default None
        Step in natural parameters (1 = full EP update), as in :func:`fastep.ep`; None:
        adaptive damping starting from a full step (a shrunk step grows back only in the
        parallel schedule, and not on a Dask cluster).
    tol : float, default 1e-4
        Convergence tolerance on the change of log Z and the largest relative site change,
        as in :func:`fastep.ep`.
    max_iter : int, default 100
        Maximum number of sweeps; a :class:`ConvergenceWarning` is issued if hit.
    site_tau, site_nu : array-like (n,) or None, default None
        Warm-start sites on the projections h_i (e.g. those of an earlier result for the
        same data); both or neither.
    extra : array-like (n, k) or None, default None
        Per-site extras for the likelihood (default: ``likelihood.site_extra(n)``).
    chunk_size : int, optional
        Rows of X per block; memory is O(chunk_size m + m^2) plus the Gram cache.  None:
        the backend's choice (8192 on the CPU, about 2^25 / m on a GPU, whose sweeps are
        launch-bound with small chunks).
    callback : callable or None, default None
        Called as ``callback(sweep, log_Z)`` after every sweep (progress reporting).
    device : {"cpu", "cuda"}, default="cpu"
        Where the sweeps run (:func:`fastep.backend.resolve`); with "cuda" X is copied
        to the device whole.
    gram_cache : float, default 2147483648 (2 GiB)
        Bytes allowed for keeping ``K(X, Z)`` between sweeps (it is fixed during a run;
        recomputing it is about a third of a sweep).  On the CPU it is used when X is an
        in-memory ndarray (not a memmap) and ``8 n m`` fits; 0 streams everything.
    schedule : {"sequential", "parallel"}, default="sequential"
        "parallel": every site is updated from the same q, then q is rebuilt (one refresh
        of q per pass).  "sequential": q is refreshed after every block of two chunks, so
        each pass uses what the earlier blocks learnt (online / stochastic EP style;
        about half the passes at large n); the fixed point, the convergence rule and the
        damping are the same, and the answer does not depend on the number of threads.
        Either way the result ends with an evaluation pass at the final sites
        (``n_iter + 1`` passes over the data in all).
    robust : bool, optional
        Robust EP (default: when the likelihood is not log-concave): a parallel step
        that makes q(u) improper is halved until it is proper, as in :func:`fastep.ep`;
        the chunk-sequential schedule falls back to it when a block's update would make
        q(u) improper.

    Returns
    -------
    SparseEPResult

    Examples
    --------
    >>> import numpy as np
    >>> from fastep.kernels import RBF
    >>> from fastep.likelihoods import Probit
    >>> X = np.linspace(-3, 3, 500)[:, None]
    >>> y = np.where(np.sin(2 * X[:, 0]) > 0, 1.0, -1.0)
    >>> res = sparse_ep(RBF(4.0, 0.5), np.linspace(-3, 3, 20)[:, None], X, y, Probit())
    >>> bool(res.converged), float(np.mean(np.sign(res.mean) == y))
    (True, 1.0)
    """
    be = resolve(device, "sparse_ep")
    check_controls(alpha, damping_rule(damping)[0], tol, max_iter, schedule)
    check_likelihood(likelihood)
    check_power(likelihood, alpha)
    return run_sparse_ep(be, kernel, Z, X, y, likelihood, alpha, damping, tol, max_iter,
                         site_tau, site_nu, extra, chunk_size, callback, gram_cache, schedule,
                         robust)


def run_sparse_ep(backend, kernel, Z, X, y, likelihood, power, damping, tol, max_iter,
                  site_tau=None, site_nu=None, extra=None, chunk_size=None, callback=None,
                  gram_cache=GRAM_CACHE, method="sequential", robust=None, keep_gram=False):
    """:func:`sparse_ep` on ``backend`` (resolved) with its parameters checked, by
    :func:`sparse_ep` or by an estimator's ``fit`` (scikit-learn's constraints), where they
    are checked once, under the estimators' names: ``power`` is the power ``alpha`` of
    Power EP, ``method`` the ``schedule``.  The data (Z, X, y, sites, chunk size) are
    checked here.  ``keep_gram``: the result keeps the run's Gram cache ``K(X, Z)`` (where
    it had one) for one :func:`sparse_ep_gradient` at the run's kernel and rows, which then
    computes no kernel values and drops it; a chunk-sequential run's closing pass also
    takes that gradient's first pass (its sums, kept with the result for this
    ``likelihood``), so the gradient makes one pass over the data instead of two."""
    be, alpha, schedule = backend, power, method
    damping, adaptive = damping_rule(damping)
    robust = (not likelihood.log_concave) if robust is None else robust
    if is_dask_array(X):
        Z = _validate(Z, X, y, chunk_size, xp=None)
        if be.xp is not np:                 # the workers run the host (NumPy) code
            raise ValueError(f"sparse_ep with a dask array X runs on the Dask cluster's "
                             f"CPUs; got device={be.name!r}. Use device='cpu' or a NumPy X.")
        check_likelihood(likelihood)
        from ._cluster import sparse_ep_on_cluster
        return sparse_ep_on_cluster(kernel, Z, X, y, likelihood, alpha, damping, adaptive, tol,
                                    max_iter, site_tau, site_nu, extra,
                                    chunk_size or CHUNK_ROWS, callback, robust)
    Xv = _rows_of(X)
    Z = _validate(Z, Xv, y, chunk_size, be.xp if hasattr(Xv, "__cuda_array_interface__") else np)
    chunk_size = be.chunk_rows(Z.shape[0]) if chunk_size is None else chunk_size
    with be.threads_for(Z.shape[0]):
        return _sparse_ep(be, kernel, Z, Xv, y, likelihood, alpha, damping, adaptive, tol,
                          max_iter, site_tau, site_nu, extra, chunk_size, callback, gram_cache,
                          schedule=schedule, robust=robust, keep_gram=keep_gram)


def _sparse_ep(be, kernel, Z, Xv, y, likelihood, alpha, damping, adaptive, tol, max_iter,
               site_tau, site_nu, extra, chunk_size, callback, gram_cache=0, q=None,
               schedule="parallel", robust=False, keep_gram=False):
    """The driver in this process (arguments checked).  With ``q`` given (a saved model's
    posterior) and ``max_iter=0`` it only evaluates: marginals, cavities and log Z at the
    given sites."""
    xp = be.xp
    n, m = Xv.shape[0], Z.shape[0]
    check_likelihood(likelihood)
    y = likelihood.encode_targets(y)
    extra = likelihood.check_extra(extra, n)
    tau, nu = (be.asarray(a) for a in initial_sites(site_tau, site_nu, n))
    # d_i = K_ii - |V_i|^2: from a cold start it is K_ii - var(h_i) in the first sweep (q is
    # the prior there); a warm start needs one extra pass, which also builds q from the sites
    warm = q is not None or bool(xp.any(tau != 0.0)) or bool(xp.any(nu != 0.0))
    L_uu = cholesky_uu(kernel(Z))
    ctx = sweep_context(be, kernel, likelihood, Z, L_uu, Xv, y, extra, alpha, cold=not warm,
                        cache=be.gram_cache(Xv, n, m, gram_cache))
    sites = _LocalSites(ctx, tau, nu, chunk_size, gradient=keep_gram)
    ctl = SweepControl("sparse EP", damping, adaptive, tol, max_iter, callback)
    q, ctl, log_ev, skipped = drive(sites, L_uu, q, warm, ctl, schedule, robust)
    mean, var, resid = ctx.mean, ctx.var, ctx.resid
    mu_cav, var_cav = ctl.finish(xp.isfinite(ctx.site_ev), ctx.mu_cav, ctx.var_cav, mean, var,
                                 xp)
    host = be.to_host
    return SparseEPResult(mean=host(mean), var=host(var + resid), site_tau=host(sites.tau),
                          site_nu=host(sites.nu), log_marginal_likelihood=float(log_ev),
                          n_iter=ctl.sweeps, converged=ctl.converged, n_skipped=int(skipped),
                          cavity_mean=host(mu_cav), cavity_var=host(var_cav + resid),
                          alpha=float(alpha), inducing_points=Z, history=ctl.history,
                          resid=host(resid), _q=q, _backend=be,
                          _gram=ctx.cache if keep_gram else None,
                          _first_pass=(None if sites.first_pass is None else
                                       (likelihood, *sites.first_pass)))


def sparse_posterior_from_state(kernel, Z, X, y, likelihood, alpha, site_tau, site_nu, L_P, b,
                                extra=None, chunk_size=CHUNK):
    """The sparse EP result of a saved model: ``q(v)`` from its factor ``L_P`` and ``b``
    exactly as fitted, and one pass over X for the marginals, cavities and log Z at the
    given sites (no sweep).  Host only (a loaded model predicts on the CPU)."""
    be = resolve("cpu")
    Xv = _rows_of(X)
    Z = np.ascontiguousarray(Z, dtype=float)
    # under the fit's BLAS threading (single-threaded below SMALL_N rows), as the run's
    # own factors were made: threaded OpenBLAS rounds differently (m = 256: predictions
    # 1.8e-13 apart at n = 2,000, 5.7e-10 at 10^5, where the promise is exactly)
    with be.threads_for(Z.shape[0]):
        L_uu = cholesky_uu(kernel(Z))
        q = _InducingPosterior.from_factor(L_uu, np.asarray(L_P, float), np.asarray(b, float))
        return _sparse_ep(be, kernel, Z, Xv, y, likelihood, alpha, 1.0, False, 1.0, 0,
                          site_tau, site_nu, extra, chunk_size, None, q=q)


def sparse_ep_gradient(result, kernel, X, y, likelihood, extra=None, chunk_size=None,
                       inputs=True):
    """Gradient of ``result.log_marginal_likelihood`` at its (fixed-point) sites.

    At a Power-EP fixed point log Z is stationary in the sites, so its total
    derivative is the partial one with sites held fixed.  Returns
    ``(d/dtheta kernel, d/dZ, d/dlog likelihood params)``; ``inputs=False`` skips the
    contraction for d/dZ (None then), which ML-II with fixed inducing inputs never reads
    (a fifth of the gradient at n = 10^5, m = 256, d = 4).  Two streamed passes on the
    backend that ran EP: the first collects ``V a`` and ``U = V diag(c) V^T`` (a, c:
    derivatives of the site terms in the marginal mean and variance), the second forms
    ``G = dlogZ/dV`` per chunk and contracts it with the kernel derivatives.  The chunks
    of each pass are shared among the backend's workers as in :func:`sparse_ep`.  A
    result of ``run_sparse_ep(keep_gram=True)`` with the chunk-sequential schedule carries
    the first pass's sums from its closing pass (for the likelihood it ran with): then
    only the second pass runs.

    Parameters
    ----------
    result : SparseEPResult
        The output of :func:`sparse_ep`, ideally converged.
    kernel : fastep.kernels.Kernel
        The kernel of the run; the gradient is for its free log-hyperparameters.
    X : array-like (n, d)
        The n training inputs of ``result`` (any 2-d array with row slices, as for
        :func:`sparse_ep`).  After a run on a Dask cluster the workers' data and chunks
        are used, and ``X``, ``y``, ``extra`` and ``chunk_size`` are not read.
    y : array-like (n,)
        Targets in the likelihood's encoding, as given to :func:`sparse_ep`.
    likelihood : fastep.likelihoods.Likelihood
    extra : array-like (n, k), optional
        Per-site extras for the likelihood, as given to :func:`sparse_ep`.
    chunk_size : int, optional
        Rows of X per block of the two passes; None: the backend's choice, as in
        :func:`sparse_ep`.
    inputs : bool, default True
        Whether to compute the gradient for the inducing inputs Z (None otherwise).

    Returns
    -------
    d_kernel : ndarray (kernel.n_dims,)
        Gradient for the kernel's free log-hyperparameters.
    d_Z : ndarray (m, d) or None
        Gradient for the inducing inputs (None with ``inputs=False``).
    d_likelihood : ndarray (likelihood.n_dims,)
        Gradient for the likelihood's free log-parameters.

    Examples
    --------
    >>> import numpy as np
    >>> from fastep.kernels import RBF
    >>> from fastep.likelihoods import Probit
    >>> X = np.linspace(-3, 3, 200)[:, None]; y = np.sign(np.sin(X[:, 0]) + 0.01)
    >>> Z = np.linspace(-3, 3, 8)[:, None]
    >>> res = sparse_ep(RBF(), Z, X, y, Probit(), tol=1e-8)
    >>> d_kernel, d_Z, d_lik = sparse_ep_gradient(res, RBF(), X, y, Probit())
    >>> d_kernel.shape, d_Z.shape, d_lik.shape
    ((2,), (8, 1), (0,))
    """
    check_likelihood(likelihood)
    if result._cluster is not None:                     # fitted on a Dask cluster
        return result._cluster.gradient(result, kernel, likelihood, inputs)
    be = resolve(result._backend or "cpu")
    Xv = _rows_of(X)
    if Xv.shape[0] != result.site_tau.size:
        raise ValueError(f"X must hold the {result.site_tau.size} training inputs of the EP "
                         f"result; got shape {tuple(Xv.shape)}.")
    _validate(result.inducing_points, Xv, y, chunk_size,
              be.xp if hasattr(Xv, "__cuda_array_interface__") else np)
    n, m = Xv.shape[0], result.inducing_points.shape[0]
    chunk_size = be.chunk_rows(m) if chunk_size is None else chunk_size
    y = likelihood.encode_targets(y)
    extra = likelihood.check_extra(extra, n)
    y_d, extra_d, _ = be.site_inputs(likelihood, y, extra)
    tau, nu = be.asarray(result.site_tau), be.asarray(result.site_nu)
    rows = be.rows(Xv)
    chunks = list(_chunks(n, chunk_size))
    n_workers = be.n_workers(n, m, chunk_size)
    # with several workers the compiled loops run in their threads: the serial ones
    c = gradient_constants(be, result, kernel, likelihood, inputs, serial=n_workers > 1)
    # h_i's marginals at q from the result's closing pass (spares S V in the first pass)
    marginals = tuple(be.asarray(a) for a in (result.mean, result.var - result.resid,
                                              result.resid))

    # K(X, Z) from the EP run at the same kernel, where it kept it (ML-II's evaluations),
    # and the first pass's sums where its closing pass took them for this likelihood
    gram = result._gram if result._gram is not None and result._gram.shape == (n, m) else None
    first = result._first_pass
    first = first[1:] if first is not None and first[0] is likelihood else None

    def in_parts(pass_, *per_site):
        """``sum_k pass_(chunks k, k + T, ...)`` over the backend's T workers, in order;
        ``per_site``: more per-site vectors for ``pass_``, sliced to the chunk."""
        def work(part):
            return _add_all(pass_(c, rows(c0, c1), y_d[c0:c1], extra_d[c0:c1], tau[c0:c1],
                                  nu[c0:c1], *[tuple(a[c0:c1] for a in v) for v in per_site],
                                  gram=None if gram is None else gram[c0:c1])
                            for c0, c1 in part)
        jobs = [functools.partial(work, chunks[k::n_workers]) for k in range(n_workers)]
        return _add_all(be.run_all(jobs))

    with be.threads_for(m):
        Va, U, d_lik = in_parts(gradient_first, marginals) if first is None else first
        gradient_second_constants(c, be.asarray(Va), U, d_lik)
        out = gradient_finish(c, *in_parts(gradient_second))
    result._gram = result._first_pass = None    # kept for one gradient: n x m numbers freed
    return out
