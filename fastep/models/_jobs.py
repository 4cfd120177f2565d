"""Independent problems in parallel (scikit-learn's ``n_jobs`` convention), and the
one-vs-rest problem a worker fits.

One-vs-rest problems, restarts and other independent fits run in joblib's worker
processes (loky).  Each worker gets ``cores // n_jobs`` threads for BLAS and for Numba's
parallel loops, so that two levels of parallelism never oversubscribe the machine, and
the warnings a worker raises (``ConvergenceWarning`` of ML-II, say) and its records on
the ``fastep`` logger are given again in the calling process once the jobs are done.
"""
from __future__ import annotations

import logging
import warnings

import numpy as np
from joblib import Parallel, cpu_count, delayed, effective_n_jobs

from .._caller import user_stacklevel
from ..inference.ep import EPResult, posterior_from_sites

#: The logger whose records (ML-II steps, EP sweeps) workers send back.
LOGGER = "fastep"


def in_process(n_jobs, n, local=False):
    """Whether :func:`run_jobs` runs ``n`` jobs in this process (no worker processes)."""
    return local or min(effective_n_jobs(n_jobs), n) <= 1


def run_jobs(fn, jobs, n_jobs, local=False):
    """``[fn(*args) for args in jobs]``, ``n_jobs`` at a time (None: 1, -1: every core;
    ``local``: always in this process, e.g. for a GPU that workers would share)."""
    if in_process(n_jobs, len(jobs), local):
        return [fn(*args) for args in jobs]
    workers = min(effective_n_jobs(n_jobs), len(jobs))
    threads = max(1, cpu_count() // workers)
    level = logging.getLogger(LOGGER).getEffectiveLevel()
    out = Parallel(n_jobs=workers, backend="loky", inner_max_num_threads=threads)(
        delayed(_capped)(fn, threads, level, args) for args in jobs)
    for _, caught, records in out:
        for record in records:                     # in job order, after the jobs
            logging.getLogger(record.name).handle(record)
        for message, category in caught:
            warnings.warn(message, category, stacklevel=user_stacklevel())
    return [result for result, _, _ in out]


class _Records(logging.Handler):
    """Keeps a worker's log records for the calling process."""

    def __init__(self):
        super().__init__()
        self.records = []

    def emit(self, record):
        record.msg, record.args = record.getMessage(), None     # plain, picklable
        record.exc_info = record.exc_text = None
        self.records.append(record)


def _capped(fn, threads, level, args):
    """A worker's job: ``fn(*args)`` with BLAS and Numba at ``threads`` threads and the
    ``fastep`` logger at the caller's ``level``; returns ``(result, [(warning message,
    category), ...], [log record, ...])``."""
    import numba
    from threadpoolctl import threadpool_limits
    numba.set_num_threads(max(1, min(threads, numba.config.NUMBA_NUM_THREADS)))
    logger, keep = logging.getLogger(LOGGER), _Records()
    logger.setLevel(level)
    logger.addHandler(keep)
    try:
        with threadpool_limits(threads), warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result = fn(*args)
    finally:
        logger.removeHandler(keep)
    return result, [(str(w.message), w.category) for w in caught], keep.records


#: Problems of fewer rows than this stay in the calling process whatever ``n_jobs`` says:
#: starting a worker (a process that imports fastep and loads its compiled loops, about a
#: second) costs more than they do (wine, 124 rows, 3 classes: 0.27 s in process, 2.2 s
#: with n_jobs=-1; ``scripts/fit_time.py``).
JOBS_MIN_ROWS = 1000


def _fit_one(estimator, latent, seed, strip):
    """One problem of :meth:`EPEstimator._fit_latents`: ``(latent, result)``; with
    ``strip`` (a worker process's job) a dense result without its posterior factors
    (three n x n arrays, rebuilt from the sites by :func:`_with_posterior` rather than
    sent between processes)."""
    latent, result = estimator._fit_latent(latent, np.random.default_rng(seed))
    if strip and isinstance(result, EPResult):
        result = result.without_factors()
    return latent, result


def _with_posterior(latent, result):
    """``result`` with its dense posterior factors rebuilt from its sites, as
    :func:`fastep.load_model` rebuilds them (no-op when it has them), on the backend the
    problem runs on (its predictions read the factors there)."""
    if not isinstance(result, EPResult) or result.factored:
        return result
    be = latent.config.backend
    rebuilt = posterior_from_sites(latent.kernel(latent.X, backend=be), latent.y,
                                   latent.likelihood, result.site_tau, result.site_nu,
                                   device=be)
    return result.with_factors_of(rebuilt)
