"""The protocol between ML-II (:mod:`fastep.models._mlii`) and the problems it fits.

An estimator builds one or more problems in ``fit`` (:class:`~fastep.models._latent.LatentGP`
and its Laplace and state-space variants, :class:`~fastep.models.nested_problem.NestedGP`, the
collapsed sparse regression problem of :class:`~fastep.SparseGPRegressor`); ML-II reads
and moves them only through :class:`EvidenceProblem`.  A problem is immutable: moving
``theta`` makes a new one (:meth:`EvidenceProblem.with_theta`).  Its parameters say how
they are named, shown and bounded in messages (:attr:`EvidenceProblem.theta_entries`,
from the kernel's and the likelihood's own ``theta_entries()``), so ML-II knows no
parameter by name.
"""
from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any, Protocol, runtime_checkable

import numpy as np

from .._theta import ThetaEntry


@runtime_checkable
class EvidenceProblem(Protocol):
    """What ML-II's optimiser (:func:`~fastep.models._mlii.maximize_evidence`) asks of a
    problem.

    Attributes
    ----------
    X : array-like of shape (n_samples, ...)
        Its rows of data (ML-II's stopping rule is in nats per row).
    """

    X: Any

    @property
    def theta(self) -> np.ndarray:
        """The free parameters ML-II moves (log kernel and likelihood parameters, ...)."""

    @property
    def bounds(self) -> np.ndarray:
        """Bounds of ``theta``, shape (p, 2)."""

    @property
    def theta_entries(self) -> list[ThetaEntry]:
        """How messages name, show and bound the kernel and likelihood entries at the
        start of ``theta`` (entries after them, such as inducing inputs, are not named)."""

    @property
    def theta_names(self) -> list[str]:
        """The names of :attr:`theta_entries` (what a hyperprior's keys match)."""

    def with_theta(self, theta: np.ndarray) -> EvidenceProblem:
        """The same problem at ``theta`` (a new object)."""

    def evidence(self, sites: Any = None, tol: float | None = None
                 ) -> tuple[float, np.ndarray, Any]:
        """``(log Z, d log Z / d theta, result)``: inference warm-started from ``sites``
        and run to ``tol`` (None: the problem's own)."""

    def draw(self, rng: np.random.Generator) -> np.ndarray:
        """A restart point for ``n_restarts_optimizer``."""


@runtime_checkable
class StagedProblem(EvidenceProblem, Protocol):
    """What the whole of ML-II (:func:`~fastep.models._mlii.fit_theta`: the subsample
    stages, the seeds of their sites, the final run) asks of a problem besides
    :class:`EvidenceProblem`.

    Whether the stages suit a problem is its estimator's choice (``fit_theta(...,
    stages=...)``); optionally a problem has ``sites_from_marginals(mean, var)``, the
    sites one EP update makes from given marginals (the seeds of a dense problem's first
    full-data run, :func:`~fastep.models._mlii.seed_sites`).
    """

    @property
    def sparse(self) -> bool:
        """Whether its inference is sparse (inducing inputs): the stages' sizes and
        preconditioning differ for dense problems."""

    def with_theta(self, theta: np.ndarray) -> StagedProblem:
        """The same problem at ``theta`` (a new object)."""

    def run(self, sites: Any = None, tol: float | None = None) -> Any:
        """Inference at the current ``theta`` from ``sites``, to ``tol`` (None: the
        problem's own, at which the final run certifies the returned evidence)."""

    def latent(self, result: Any, X: Any) -> tuple[np.ndarray, np.ndarray]:
        """The latent predictive ``(mean, var)`` at X of the fit ``result``."""

    def rows(self, idx: np.ndarray) -> StagedProblem:
        """The same problem on the rows ``idx`` (sorted) of its data (a subsample
        stage)."""

    def reuse(self) -> AbstractContextManager[Any]:
        """A block in which ML-II's evaluations share what does not change with theta."""


class NamedTheta:
    """``theta_names`` of a problem derived from its ``theta_entries`` (one place for
    it: the problems inherit it)."""

    @property
    def theta_names(self) -> list[str]:
        """The names of ``theta_entries`` (what a hyperprior's keys match)."""
        return [entry.name for entry in self.theta_entries]  # type: ignore[attr-defined]
