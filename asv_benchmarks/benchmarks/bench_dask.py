"""asv benchmarks for sparse EP on Dask (issue 14): a local cluster of two single-threaded
worker processes, as in ``scripts/sparse_scaling.py dask``; skipped when dask is not installed.

``time_three_sweeps``: three parallel sweeps (persisting the data on the workers included);
``track_bytes_per_sweep``: the bytes the workers sent per sweep (Dask's
``transfer_outgoing_bytes_total``), which must not grow with n.
"""
import warnings

import numpy as np

import fastep
from fastep.kernels import RBF
from fastep.likelihoods import Probit

from .bench_sparse import make_data

try:
    import dask.array as da
    from distributed import Client, LocalCluster
except ImportError:                                   # asv skips a benchmark whose
    da = None                                         # setup raises NotImplementedError


def _sent(dask_worker):
    return dask_worker.transfer_outgoing_bytes_total


class DaskSparseEP:
    params = ([100_000, 1_000_000], [64, 256])
    param_names = ["n", "m"]
    number = 1
    repeat = (1, 3, 120.0)
    timeout = 1200

    def setup(self, n, m):
        if da is None:
            raise NotImplementedError("dask is not installed")
        self.cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                    dashboard_address=None)
        self.client = Client(self.cluster)
        X, y, self.Z = make_data(n, m)
        self.X = da.from_array(X, chunks=(max(4096, n // 8), 3))   # persisted by the fit
        self.y = da.from_array(y, chunks=max(4096, n // 8))
        self.run(3)                                   # compile on the workers

    def teardown(self, n, m):
        self.client.close()
        self.cluster.close()

    def run(self, sweeps, callback=None):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", fastep.ConvergenceWarning)
            return fastep.sparse_ep(RBF(1.0, 1.0), self.Z, self.X, self.y, Probit(),
                                    max_iter=sweeps, tol=1e-300, callback=callback)

    def time_three_sweeps(self, n, m):
        self.run(3)

    def track_bytes_per_sweep(self, n, m):
        sent = []
        self.run(8, callback=lambda i, lz: sent.append(sum(self.client.run(_sent).values())))
        return float(np.median(np.diff(sent)[-4:]))     # after the first sweeps' placement

    track_bytes_per_sweep.unit = "bytes"
