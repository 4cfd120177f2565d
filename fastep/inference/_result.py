"""What every EP run returns, dense (:class:`fastep.EPResult`) or sparse
(:class:`fastep.SparseEPResult`): the marginals and sites at the training inputs, the
evidence, the cavities and how the sweeps went."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class EPResultBase:
    """The fields both EP results share (NumPy arrays, also after a GPU run; dask arrays
    after a run on a Dask cluster).

    Attributes
    ----------
    mean, var : ndarray (n,)
        Marginals of the EP posterior of f at the training inputs.
    site_tau, site_nu : ndarray (n,)
        Site natural parameters (precision, precision times mean).
    log_marginal_likelihood : float
        The EP approximation of log p(y) at the returned sites.
    n_iter : int
        Sweeps performed.
    converged : bool
        Whether the convergence rule was met within ``max_iter`` sweeps.
    n_skipped : int
        Site updates skipped in the last sweep (improper cavity).
    cavity_mean, cavity_var : ndarray (n,)
        Cavity moments at the returned posterior (used for likelihood gradients and
        leave-one-out predictions).
    """

    mean: np.ndarray
    var: np.ndarray
    site_tau: np.ndarray
    site_nu: np.ndarray
    log_marginal_likelihood: float
    n_iter: int
    converged: bool
    n_skipped: int
    cavity_mean: np.ndarray
    cavity_var: np.ndarray
