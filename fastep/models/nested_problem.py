"""The nested-EP problem (Riihimaki, Jylanki & Vehtari 2013): the C latent functions'
joint posterior under the multinomial probit, dense or sparse, its evidence and gradient
for ML-II, its predictions and memory; :class:`~fastep.NestedEPClassifier` is the
estimator over it."""
from __future__ import annotations

import dataclasses
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np
from scipy.linalg import solve_triangular

from ..backend import resolve
from ..inference import carry_anderson, nested_ep as nep
from ..inference.inducing import cholesky_uu, uu_from_whitened
from ..kernels.distances import reuse_distances
from ..likelihoods import MultinomialProbit, multinomial_probit as mp
from ._problem import NamedTheta

#: n x n float64 matrices alive at the peak of a nested-EP posterior refresh, per class
#: (H_c and G_c) and besides: K, S, M's factor (in the class loop's work matrix), two
#: more of room, and on the GPU (out-of-place Cholesky, einsum temporaries) two more; on
#: the CPU a run's sweeps reuse one set (:func:`~fastep.inference.nested_ep.buffers`).
#: The gradient's peak (K, H, S, M's factor, its weights and three work matrices) is
#: below it.
_PER_CLASS, _BESIDES = 2, 7


def dense_matrices(n_classes):
    """n x n float64 matrices at the peak of dense nested EP with ``n_classes`` classes."""
    return _PER_CLASS * n_classes + _BESIDES


#: Test points per block of :meth:`NestedGP.latent` (its work is C n x block arrays).
_PREDICT_BLOCK = 512


@dataclass(frozen=True)
class NestedGP(NamedTheta):
    """C latent GPs with one kernel and the multinomial probit likelihood at inputs X and
    labels y (0..C-1): the problem :func:`~fastep.models._mlii.maximize_evidence` works on
    (``theta`` is the kernel's log parameters)."""

    X: np.ndarray
    y: np.ndarray
    kernel: object
    n_classes: int
    damping: Optional[float]
    tol: float
    max_iter: int
    Z: Optional[np.ndarray] = None      # inducing inputs shared by the classes (sparse)
    backend: Any = None                 # where dense nested EP runs (None: the CPU)

    @property
    def be(self):
        return resolve("cpu") if self.backend is None else self.backend

    @property
    def theta(self):
        return self.kernel.theta

    @property
    def bounds(self):
        return self.kernel.bounds

    @property
    def theta_entries(self):
        """ML-II's names of theta's entries: the kernel's own (the classes share it)."""
        return self.kernel.theta_entries()

    @property
    def likelihood(self):
        return MultinomialProbit(self.n_classes)

    def with_theta(self, theta):
        return dataclasses.replace(self, kernel=self.kernel.clone_with_theta(theta))

    def rows(self, idx):
        """The same problem on the rows ``idx`` of X (ML-II's subsample stages)."""
        return dataclasses.replace(self, X=self.X[idx], y=self.y[idx])

    def draw(self, rng):
        b = self.bounds
        return rng.uniform(b[:, 0], b[:, 1])

    def reuse(self):
        """ML-II's evaluations share X's squared distances and nested EP's Anderson
        history."""
        stack = ExitStack()
        stack.enter_context(reuse_distances(self.X, self.be))
        stack.enter_context(carry_anderson())
        return stack

    @property
    def sparse(self):
        return self.Z is not None

    def check_memory(self):
        if self.sparse:     # Lambda / its factor, the inverse, its mirror, the last one's
            resolve("cpu").check_dense_memory(self.n_classes * self.Z.shape[0], 4)
        else:
            self.be.check_dense_memory(self.X.shape[0], dense_matrices(self.n_classes))

    def _uu(self):
        """``L_uu`` (the jittered Cholesky factor of K(Z, Z)), sparse problems only."""
        return cholesky_uu(self.kernel(self.Z))

    def _features(self, L_uu, X):
        """``V = L_uu^-1 K(Z, X)`` (m, k): the features ``Phi = V^T`` of the inputs X."""
        return solve_triangular(L_uu, self.kernel(self.Z, X), lower=True, check_finite=False)

    def _prior(self):
        """What nested EP runs on: the Gram matrix, or (sparse) ``(Phi, L_uu, V)``."""
        if not self.sparse:
            return self.kernel(self.X, backend=self.be), None, None
        L_uu = self._uu()
        V = self._features(L_uu, self.X)
        return np.ascontiguousarray(V.T), L_uu, V

    def run(self, sites=None, tol=None, prior=None):
        """Nested EP at the current kernel, warm-started from ``sites = (alpha, beta)``."""
        alpha, beta = sites if sites is not None else (None, None)
        K = (prior or self._prior())[0]
        return nep.nested_ep(K, self.y, self.n_classes, alpha, beta, self.damping,
                             self.tol if tol is None else tol, self.max_iter, self.sparse,
                             self.be)

    def final(self, sites):
        """:meth:`run` from ``sites`` with its posterior in host memory (the fitted
        model's)."""
        result = self.run(sites)
        return dataclasses.replace(result, posterior=result.posterior.on_host(self.be))

    def evidence(self, sites=None, tol=None):
        """``(log Z, d log Z / d theta, result)``, EP run to ``tol`` (None, or anything
        tighter than the problem's own: that one).  Sparse: ``d log Z / d Phi`` chained
        through ``Phi = K_fu L_uu^-T`` (:func:`~fastep.inference.inducing.uu_from_whitened`)
        with Z held fixed."""
        self.check_memory()
        prior = self._prior()
        result = self.run(sites, None if tol is None else max(tol, self.tol), prior)
        if not self.sparse:
            grad = self.kernel.gradient_contract(
                self.X, nep.gradient_weights(result.posterior, self.be), backend=self.be)
            return result.log_marginal_likelihood, grad, result
        Phi, L_uu, V = prior
        G_V = np.ascontiguousarray(nep.sparse_feature_gradient(result.posterior, Phi).T)
        G_uf = solve_triangular(L_uu, G_V, lower=True, trans="T", check_finite=False)
        grad = (self.kernel.gradient_contract(self.Z, uu_from_whitened(G_V @ V.T, L_uu))
                + self.kernel.gradient_contract(self.Z, G_uf, self.X))
        return result.log_marginal_likelihood, grad, result

    def posterior(self, alpha, beta):
        """The posterior at given inner sites (a loaded model's), in host memory."""
        return nep.refresh(self._prior()[0], alpha, beta, self.y, self.sparse,
                           self.be).on_host(self.be)

    def sites_from_marginals(self, mean, cov):
        """Inner sites ``(alpha, beta)`` (n, C) that one undamped outer update makes from no
        site with the marginals ``(mean, cov)`` of f at every row, so as the cavities
        (ML-II's seeds from a subsample's predictive,
        :func:`~fastep.models._mlii.seed_sites`); zero on a row where they are not finite
        with non-negative precisions."""
        n, C = mean.shape
        zero = np.zeros((n, C))
        alpha, beta = np.empty((n, C)), np.empty((n, C))
        mp.update_sites(np.ascontiguousarray(mean, dtype=float),
                        np.ascontiguousarray(cov, dtype=float),
                        np.asarray(self.y, dtype=np.int64), zero, zero, 1.0, mp.INNER_SWEEPS,
                        alpha, beta)
        bad = ~np.all(np.isfinite(alpha) & np.isfinite(beta) & (alpha >= 0.0), axis=1)
        alpha[bad], beta[bad] = 0.0, 0.0
        return alpha, beta

    def latent(self, result, X):
        """Predictive mean (m, C) and covariance (m, C, C) of the latent functions at X
        (host arrays; ``result``'s posterior may be on the GPU, as in ML-II's seeding)."""
        post = result.posterior.on_host(self.be)
        L_uu = self._uu() if self.sparse else None
        parts = []
        for i in range(0, X.shape[0], _PREDICT_BLOCK):
            Xb = X[i:i + _PREDICT_BLOCK]
            if self.sparse:
                parts.append(nep.sparse_predict_latent(
                    post, np.ascontiguousarray(self._features(L_uu, Xb).T),
                    self.kernel.diag(Xb)))
            else:
                parts.append(nep.predict_latent(post, self.kernel(self.X, Xb),
                                                self.kernel.diag(Xb)))
        return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
