"""Type-II maximum likelihood: the one loop of every estimator that learns its kernel by
ML-II (all but :class:`fastep.GWIClassifier`, whose prior kernel stays fixed).

It maximises a problem's evidence over ``problem.theta`` (log kernel and likelihood
parameters, and inducing inputs where they move) with L-BFGS-B or a user optimiser,
warm-starting EP at every evaluation from the sites of the previous one, with optional
restarts from ``problem.draw(rng)``.  It talks to a problem only through the protocol of
:mod:`fastep.models._problem` (:class:`~fastep.models._problem.EvidenceProblem` for the
optimiser, :class:`~fastep.models._problem.StagedProblem` for the subsample stages), and
knows no parameter by name: each entry of theta says how it is named, shown and bounded
(:class:`fastep._theta.ThetaEntry`, from the kernel's and likelihood's
``theta_entries()``).

Over 450 lines: one job, the ML-II loop: the optimiser, its restarts, the subsample
stages, the stopping rule and the messages about bounds and gradients.
"""
from __future__ import annotations

import logging
import warnings

import numpy as np
from scipy.optimize import OptimizeResult, minimize

from .._caller import user_stacklevel
from ..exceptions import ConvergenceWarning, EPNumericalWarning, NotPositiveDefiniteError

_LOG = logging.getLogger("fastep")
_FAILED = 1e25          # -log Z of a trial point where EP or a factorisation failed


#: Default budget of the L-BFGS-B run (``max_iter_optimizer`` of the estimators), and
#: its relative tolerance where ``tol_optimizer`` is not given (with the rule in nats per
#: row below), or ``tol_optimizer``'s value that asks for the exact optimum as in 0.2.
MAX_ITER = 200
TOL = 1e-6
#: ML-II's default stopping tolerance in nats per row of data (``tol_optimizer=None``):
#: it stops where the objective (log evidence + log hyperprior) gained less than
#: ``TOL_ROW * n`` over its last two steps and (preconditioned) the gain its curvature
#: predicts is below that too.  A relative tolerance asks a million-row evidence for
#: sub-nat changes that move no prediction (see :func:`maximize_evidence`).
TOL_ROW = 1e-5

#: EP tolerance of ML-II's evaluations before the optimiser has made progress, and the
#: factor on its last relative gain that sets the tolerance afterwards (see
#: :func:`maximize_evidence`).
LOOSE_EP_TOL = 1e-3
EP_TOL_GAIN = 0.1

#: ML-II goes on at the optimum's scale when its |log Z| is below the start's by this
#: factor (see :func:`maximize_evidence`).
RESCALE = 2.0


#: Sparse: the largest stage has at most 1/STAGE_SHARE of the rows (it costs at most that
#: share of a full-data evaluation) ...
STAGE_SHARE = 8
#: ... and at most this many rows (a stage's rows are copied into memory, a dask array's
#: too; the issue's n = 10^6 problem's optimum on 62,500 rows is within 0.001 of the full
#: data's test NLPD, and stages of 15,625 and 62,500 rather than 15,625 and 125,000 rows
#: reached it after 17-20 passes in seven fits against 20-25 in four, the fits as long,
#: 2026-11-28) ...
STAGE_MAX_ROWS = 62_500
#: ... and each stage 1/STAGE_GROWTH of the next.
STAGE_GROWTH = 4
#: No stage has fewer rows than this.
STAGE_MIN_ROWS = 6_250
#: Sparse problems of at least this many rows start ML-II from the optimum of random
#: subsamples (:func:`subsample_stages`).
STAGED_MIN_ROWS = STAGE_SHARE * STAGE_MIN_ROWS
#: Dense problems (O(n^3) a sweep) of at least this many rows stage too, on subsamples
#: that grow by :data:`DENSE_STAGE_GROWTH` from at least :data:`DENSE_STAGE_MIN_ROWS`
#: rows: a stage of n/4 rows costs 1/64 of the full data's sweep.
DENSE_STAGED_MIN_ROWS = 1_000
DENSE_STAGE_GROWTH = 4
DENSE_STAGE_MIN_ROWS = 64
#: Relative tolerance of the stages' L-BFGS-B runs (they only choose the start).
STAGE_TOL = 1e-4
#: A preconditioned run stops at an iterate where the gain its curvature predicts (the
#: Newton decrement) is below this share of ``tol`` (relative; :func:`_newton_run`) ...
DECREMENT_SHARE = 0.1
#: ... once its last step gained less than this many times ``tol`` (relative).
SETTLED_GAIN = 100.0
#: Half-width of the box of the preconditioned coordinates u (:func:`maximize_evidence`):
#: finite, so that L-BFGS-B takes the whole first step; in u the optimum is about the
#: Newton decrement away, far inside.
U_BOX = 1e6


def subsample_stages(n, dense=False):
    """Row counts of the subsamples ML-II runs on before the full data (smallest first).
    Sparse: the largest ``min(n / 8, 62,500)`` (:data:`STAGE_SHARE`,
    :data:`STAGE_MAX_ROWS`), each earlier one a quarter of the next, none below
    :data:`STAGE_MIN_ROWS` rows, and none for fewer than :data:`STAGED_MIN_ROWS` rows
    (n = 10^5: 12,500; 10^6: 15,625 and 62,500).  Dense (``dense``): ``n / 4^k`` down to
    :data:`DENSE_STAGE_MIN_ROWS` rows, none below :data:`DENSE_STAGED_MIN_ROWS`."""
    if dense:
        growth, low, size, least = (DENSE_STAGE_GROWTH, DENSE_STAGE_MIN_ROWS,
                                    n // DENSE_STAGE_GROWTH, DENSE_STAGED_MIN_ROWS)
    else:
        growth, low, size, least = (STAGE_GROWTH, STAGE_MIN_ROWS,
                                    min(n // STAGE_SHARE, STAGE_MAX_ROWS), STAGED_MIN_ROWS)
    if n < least:
        return []
    sizes = []
    while size >= low:
        sizes.append(size)
        size //= growth
    return sizes[::-1]


def fit_theta(problem, optimizer, n_restarts, rng, sites, owner, max_iter, tol, prior,
              stages=True):
    """ML-II (MAP-II with ``prior``) of ``problem`` as an estimator's ``fit`` runs it:
    from the optimum of the subsample stages (:func:`staged_start`, with its curvature as
    preconditioner) where ``stages`` allows them and they apply (L-BFGS-B, no warm-start
    ``sites``, :func:`subsample_stages` not empty), then :func:`maximize_evidence` on all
    rows within ``problem.reuse()``.  Returns ``(problem at the optimum, its sites)``."""
    precondition = None
    if (stages and sites is None and optimizer == "L-BFGS-B"
            and subsample_stages(problem.X.shape[0], dense=not problem.sparse)):
        problem, precondition, sites = staged_start(problem, optimizer, rng, owner,
                                                    max_iter, prior)
    with problem.reuse():
        return maximize_evidence(problem, optimizer, n_restarts, rng, sites, owner, max_iter,
                                 tol, prior, precondition)


def staged_start(problem, optimizer, rng, owner, max_iter, prior):
    """A start for ML-II on a large problem (sparse from 50,000 rows, dense from 1,000),
    and a preconditioner for it: the optimum of ML-II on random subsamples of its rows,
    grown stage by stage (:func:`subsample_stages`; each stage starts from the last one's
    optimum, with a loose :data:`STAGE_TOL`; a parameter a stage leaves at a bound goes
    on from where it was, as the full data's optimum may be inside and L-BFGS-B does not
    leave a flat bound), and the curvature of log Z per row (:func:`curvature`; not for
    more than :data:`CURVATURE_MAX_PARAMS` parameters): at the first stage's optimum
    (sparse; where its evaluations failed, the next stage's), at every stage's (dense; the
    last one that succeeded is kept), with which the later stages and the caller's
    full-data run are preconditioned (:func:`maximize_evidence`).

    At n = 10^5 and more an evidence evaluation costs many EP passes over the data, and
    ML-II from a poor start takes 15-25 of them; on a subsample of 1/8 of the rows the same
    walk costs 1/8 as much (dense EP, O(n^3): a stage of n/4 rows costs 1/64).  log Z is
    a sum over rows (plus terms that do not grow with n), so its Hessian per row is about
    the same on a subsample as on the whole: with it the full-data run's first L-BFGS-B
    step is a Newton step, and the run (the caller's, to the estimator's own tolerance,
    so that the returned evidence is the full data's optimum) takes few evaluations.  Warnings of the stages (a parameter at a bound, the
    iteration budget) are left to the full-data run.  Returns ``(problem at the last
    stage's optimum, the Hessian per row or None, EP sites for the full data's first
    evaluation or None)``.  The sites, dense only, are the last stage's own on its rows
    and on the others those one EP update gives from its predictive (:func:`seed_sites`):
    the full data's first dense EP then starts near its fixed point (digits: 8-15 sweeps
    instead of 13-22 cold).  Sparse EP's cold start needs no more sweeps than a seeded one
    (n = 10^5: 4 either way), so it starts cold."""
    n = problem.X.shape[0]
    theta, hessian, sub, sites, idx = problem.theta, None, None, None, None
    sizes = subsample_stages(n, dense=not problem.sparse)
    _LOG.info("ML-II on subsamples of %s rows first, then on all %d",
              ", ".join(str(k) for k in sizes), n)
    bounds = np.asarray(problem.bounds, dtype=float)
    for size in sizes:
        idx = np.sort(rng.choice(n, size, replace=False))
        sub = problem.rows(idx).with_theta(theta)
        with warnings.catch_warnings(), sub.reuse():
            warnings.simplefilter("ignore", ConvergenceWarning)
            sub, sites = maximize_evidence(sub, optimizer, 0, rng, None, owner, max_iter,
                                           STAGE_TOL, prior, hessian)
            # sparse: on the first stage only (a later one's evaluations cost up to 1/8
            # of the full data's); dense: on every stage (the last, n/4 rows, costs 1/64),
            # the full-data run preconditioned by the last (fewer evaluations on digits)
            if theta.size <= CURVATURE_MAX_PARAMS and (hessian is None or not problem.sparse):
                found = curvature(sub, sites)
                hessian = hessian if found is None else found
        at_lo, at_hi = at_bounds(sub.theta, bounds)
        theta = np.where(at_lo | at_hi, theta, sub.theta)
        _LOG.info("ML-II on a subsample of %d rows: theta %s", size,
                  np.array2string(theta, precision=3))
    problem = problem.with_theta(theta)
    seeded = None if sub is None or problem.sparse else seed_sites(problem, sub, sites, idx)
    return problem, hessian, seeded


def seed_sites(problem, sub, sites, idx):
    """EP sites for all rows of ``problem`` from a fit of its rows ``idx`` (``sub``,
    warm-started from its ``sites``, at its own theta): those sites on the rows ``idx``;
    on the others what one undamped EP update gives with ``sub``'s latent predictive as
    the marginal, so as the cavity (the problem's ``sites_from_marginals``: scalar sites
    ``(tau, nu)``, or nested EP's inner sites ``(alpha, beta)`` per point and class).
    None for data outside memory (dask), where the fit failed, or for a problem without
    sites (Laplace)."""
    seeds_from = getattr(problem, "sites_from_marginals", None)
    if sites is None or seeds_from is None or not isinstance(problem.X, np.ndarray):
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            warnings.simplefilter("ignore", EPNumericalWarning)
            result = sub.run(sites)
            seeds = seeds_from(*sub.latent(result, problem.X))
    except (NotPositiveDefiniteError, ValueError, FloatingPointError):
        return None
    if seeds is None:
        return None
    tau, nu = seeds
    tau[idx], nu[idx] = result.site_tau, result.site_nu
    return tau, nu


#: Step in theta (log parameters) of the finite differences of :func:`curvature`.
CURVATURE_STEP = 1e-2
#: The stages estimate the curvature for at most this many parameters (it costs one
#: evaluation per parameter, plus one; an ARD kernel on many features runs without it).
CURVATURE_MAX_PARAMS = 16


def _difference_step(value, bounds, step):
    """A finite-difference step from ``value`` that stays inside ``bounds`` (forward if
    it fits, else backward, else the longer of the two that fit; None: none does)."""
    up, down = bounds[1] - value, value - bounds[0]
    h = step if up >= step else -step if down >= step else up if up >= down else -down
    return None if abs(h) < 1e-8 else h


def _hessian_fd(gradient, theta, bounds, step):
    """The Hessian of a function whose ``gradient(t)`` is given, at theta, by forward
    differences (symmetrised); None where a step or a gradient failed."""
    g0 = gradient(theta)
    if g0 is None:
        return None
    hess = np.empty((theta.size, theta.size))
    for i in range(theta.size):
        h = _difference_step(theta[i], bounds[i], step)
        if h is None:
            return None
        t = theta.copy()
        t[i] += h
        g = gradient(t)
        if g is None:
            return None
        hess[:, i] = (g - g0) / h
    hess = 0.5 * (hess + hess.T)
    return hess if np.all(np.isfinite(hess)) else None


def curvature(problem, sites, step=CURVATURE_STEP):
    """The Hessian of ``-log Z`` per row of data at ``problem.theta``, by forward
    differences of the evidence gradient (``theta.size + 1`` evaluations, EP warm-started
    from ``sites``, cold where that fails, and run to the problem's tolerance); None where
    an evaluation failed.  :func:`maximize_evidence` takes it as ``precondition``."""
    theta, bounds = problem.theta, np.asarray(problem.bounds, dtype=float)

    def gradient(t):
        value, grad, result = _evaluate(problem, t, sites)
        _LOG.info("ML-II step (curvature): log evidence %.4f%s", value, _sweeps(result))
        return None if value == -_FAILED else -grad

    hess = _hessian_fd(gradient, theta, bounds, step)
    return None if hess is None else hess / problem.X.shape[0]


def newton_frame(hessian, problem, theta, scale, prior=None, step=CURVATURE_STEP):
    """``C`` with ``C C^T = H^-1``, H the Hessian of ``-(log Z + log p(theta)) / scale``
    on ``problem``'s rows estimated from ``hessian``, that of -log Z per row
    (:func:`curvature`, on a subsample): ``H = (n hessian + H_prior) / scale``, the
    prior's by differences of its gradient at theta.  Saddle-free: H's eigenvalues are
    taken in absolute value, and those below 1e-4 of the largest raised to it (a flat
    direction gets long, not unbounded, steps).  None where H is zero or not finite."""
    H = problem.X.shape[0] * np.asarray(hessian, dtype=float)
    if prior is not None:
        bounds = np.asarray(problem.bounds, dtype=float)
        H_prior = _hessian_fd(lambda t: -prior(t)[1], theta, bounds, step)
        if H_prior is None:
            return None
        H = H + H_prior
    w, vecs = np.linalg.eigh(H / scale)
    w = np.abs(w)
    if not np.all(np.isfinite(w)) or w.max() <= 0.0:
        return None
    return vecs / np.sqrt(np.maximum(w, 1e-4 * w.max()))


def _evaluate(problem, theta, sites, ep_tol=None):
    """``(log Z, gradient, result)`` at theta from the given warm-start sites (cold where
    that fails), EP run to ``ep_tol`` (None: the problem's own tolerance); a failed
    evaluation (EP broke down, a non-finite value, or sites left out, whose log Z is not
    comparable) gives ``(-_FAILED, 0, result)``."""
    value, grad, result = _evaluate_from(problem, theta, sites, ep_tol)
    if value == -_FAILED and sites is not None:
        value, grad, result = _evaluate_from(problem, theta, None, ep_tol)
    return value, grad, result


def _sweeps(result):
    """' after N EP sweeps' for a log line about an evaluation (empty without a count)."""
    return f" after {result.n_iter} EP sweeps" if hasattr(result, "n_iter") else ""


def _evaluate_from(problem, theta, sites, ep_tol):
    """:func:`_evaluate` from these sites only."""
    try:
        # trial points far from the optimum may not converge; only the final fit warns
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            warnings.simplefilter("ignore", EPNumericalWarning)
            value, grad, result = problem.with_theta(theta).evidence(sites, tol=ep_tol)
    except NotPositiveDefiniteError:
        return -_FAILED, np.zeros(theta.size), None
    if not (np.isfinite(value) and np.all(np.isfinite(grad))) or \
            getattr(result, "n_skipped", 0):
        return -_FAILED, np.zeros(theta.size), result
    return value, grad, result


def _lbfgsb(objective, x0, bounds, options, stop):
    """SciPy's L-BFGS-B on ``objective`` (value and gradient), ended early at an accepted
    iterate where ``stop(point, accepted)`` says so: ``point`` is ``(x, value, gradient)``
    of the last evaluation, ``accepted`` the list of those at the iterates accepted
    before it (the start first; None where not known).  Its result, with ``settled``
    True where ``stop`` ended it."""
    state = {"point": None, "accepted": [], "nit": 0, "nfev": 0, "settled": False}

    def fun(x):
        value, grad = objective(x)
        state["point"] = (x.copy(), value, grad)
        if state["nfev"] == 0:
            state["accepted"].append(state["point"])
        state["nfev"] += 1
        return value, grad

    def callback(xk):
        state["nit"] += 1
        point = state["point"]
        if not np.array_equal(point[0], xk):          # not the last point evaluated
            state["accepted"].append(None)
            return
        if stop(point, state["accepted"]):
            state["settled"] = True
            raise StopIteration     # SciPy >= 1.11 ends the run; 1.10 lets it through
        state["accepted"].append(point)

    try:
        res = minimize(fun, x0, jac=True, method="L-BFGS-B", bounds=bounds, options=options,
                       callback=callback)
    except StopIteration:
        if not state["settled"]:
            raise
    if not state["settled"]:
        res.settled = False
        return res
    x, f, g = state["point"]
    return OptimizeResult(x=x, fun=f, jac=g, nit=state["nit"], nfev=state["nfev"], status=0,
                          success=True, settled=True,
                          message="the gain over the last steps is below the tolerance")


def _row_rule(gain_tol, scale):
    """``stop`` of :func:`_lbfgsb` for a run without curvature: the last two accepted
    steps gained less than ``gain_tol`` nats together (None: never)."""
    def stop(point, accepted):
        if gain_tol is None or len(accepted) < 2 or accepted[-2] is None:
            return False
        return (accepted[-2][1] - point[1]) * scale < gain_tol
    return stop


def _newton_run(neg, theta, C, scale, bounds, options, tol, gain_tol=None):
    """L-BFGS-B in the coordinates ``u`` of ``theta + C u`` (clipped to ``bounds``, the
    clipped entries' gradient dropped), the objective ``neg / scale``; its result (``x``
    in u).

    As the objective's Hessian in u is about I, the gain still to come at an iterate is
    about ``|g_u|^2 / 2`` (the Newton decrement), divided by the curvature along the last
    step, ``s^T (g_u - g_u') / s^T s``, where that is below 1 (the objective flatter than
    C says).  The run also stops where that gain is below :data:`DECREMENT_SHARE` times
    ``tol`` (relative, as L-BFGS-B's ``ftol``) and the last step gained less than
    :data:`SETTLED_GAIN` times ``tol`` (C is not trusted far from the optimum): the
    ``ftol`` rule needs a step that gains nothing, an evaluation more.  C comes from a
    subsample's curvature, which on digits' classes was up to 4x too steep in the flat
    log variance; the share leaves a factor 10 on top of the correction.  On digits
    (``random_state`` 0-3, 8-10) this took 478 full-data evaluations instead of 509, the
    same objectives to 1e-7 (relative).  With ``gain_tol`` (nats: ML-II's rule in nats
    per row) both the last gain and the predicted one are held to it instead."""
    def in_u(u):
        t = theta + C @ u
        inside = np.clip(t, bounds[:, 0], bounds[:, 1])
        value, grad = neg(inside)
        return value / scale, (C.T @ np.where(inside == t, grad, 0.0)) / scale

    def settled(point, accepted):
        before = accepted[-1]
        if before is None:
            return False
        u, f, g = point
        # the curvature along the last step, which is 1 where C is right: below 1 the
        # objective is flatter than C says and the gain to come larger than |g|^2 / 2
        step, change = u - before[0], g - before[2]
        along = float(step @ change) / max(float(step @ step), 1e-300)
        size = max(abs(f), 1.0)
        predicted = 0.5 * float(g @ g) / min(max(along, 1e-3), 1.0)
        if gain_tol is not None:
            return before[1] - f < gain_tol / scale and predicted < gain_tol / scale
        return (before[1] - f < SETTLED_GAIN * tol * size
                and predicted < DECREMENT_SHARE * tol * size)

    u_bounds = [(-U_BOX, U_BOX)] * theta.size
    res = _lbfgsb(in_u, np.zeros_like(theta), u_bounds, options, settled)
    if res.settled:
        res.message = "the gain the curvature predicts is below the tolerance"
    return res


def maximize_evidence(problem, optimizer="L-BFGS-B", n_restarts=0, rng=None, sites=None,
                      owner="the estimator", max_iter=MAX_ITER, tol=None, prior=None,
                      precondition=None, tol_row=None):
    """Maximise ``problem.evidence`` (plus ``prior``: MAP-II) over ``problem.theta``.

    **EP tolerance that follows the optimiser.**  An evaluation far from the optimum
    needs log Z only to the precision of the step the optimiser is about to take.  log
    Z_EP is stationary in the sites at EP's fixed point (it is the EP free energy), so
    sites within ``t`` (relative) of it give log Z within about ``t^2`` and the gradient
    within about ``t``.  EP runs to ``LOOSE_EP_TOL`` until the optimiser has improved
    the objective once, then to ``EP_TOL_GAIN`` times the last relative improvement,
    never tighter than the problem's own tolerance.  Looser rules (``t`` from the
    square root of the gain, or a floor of 1e-4) cost fewer sweeps per evaluation but,
    through the gradient's error, up to twice the evaluations, and end up to 2e-4
    (relative) short of the evidence's optimum.  The caller's final EP run at the
    returned theta, at the problem's tolerance, certifies the evidence.

    **Stopping in nats per row** (``tol=None``, the estimators' default
    ``tol_optimizer``): the run stops at an iterate where the objective gained less than
    ``tol_row * n`` nats over the last two steps (n rows of data) or, preconditioned, in
    the last step with the gain the curvature predicts for the next below that too.  The
    evidence is a sum over rows, so this asks each row for the same precision whatever
    n: at n = 10^6 the last five of nine full-data L-BFGS-B steps (45 s each) moved log Z
    by 6 nats, 6e-6 a row, and no prediction.  L-BFGS-B's own relative rules (below, at
    :data:`TOL`) still apply.  A number ``tol`` asks for the exact optimum as before:

    L-BFGS-B minimises ``-log Z / s`` with ``s = 1 + |log Z|`` at the start, so that its
    two stopping rules are relative: the evidence changed by less than ``tol`` (relative)
    in a step, or the largest projected gradient entry fell below ``tol`` times 10 (in
    units of ``s``).  Where it stops at a ``|log Z|`` below ``s / RESCALE`` (a start far
    from the optimum: digits' first problem starts at log Z = -868 and ends at -43), the
    run goes on from there with ``s`` from the optimum, so that the rules are relative to
    the evidence found, not to the start's (with the start's, that problem ended 3.4e-4
    nats, 7.9e-6 relative, from where ML-II at tight EP tolerance ended).  A run that
    used up ``max_iter`` iterations, or ends with a kernel or likelihood parameter at one
    of its bounds, gives a ``ConvergenceWarning``.

    Parameters
    ----------
    problem : see the module docstring
    optimizer : "L-BFGS-B" or callable
        A callable follows scikit-learn's convention: ``optimizer(obj_func, initial_theta,
        bounds) -> (theta_opt, func_min)``, where ``obj_func(theta, eval_gradient=True)``
        returns the negative evidence and its gradient.
    n_restarts : int
        Extra runs from ``problem.draw(rng)`` (needs finite bounds).
    rng : numpy.random.Generator
    sites : (tau, nu), optional
        EP sites to start the first evaluation from.
    owner : str
        Who asks (for messages).
    max_iter : int
        Most L-BFGS-B iterations per run (``max_iter_optimizer``).
    tol : float or None
        Relative tolerance of the stopping rules above (``tol_optimizer``); None: stop by
        ``tol_row``.
    tol_row : float, optional
        Nats per row of the default stopping rule (used where ``tol`` is None; None:
        :data:`TOL_ROW`).
    prior : callable, optional
        ``prior(theta) -> (log p(theta), gradient)`` (:func:`fastep.priors.hyperprior_terms`):
        maximise log Z + log p(theta) instead of log Z.
    precondition : (p, p) array, optional
        The Hessian of -log Z per row (:func:`curvature`, on a subsample): the first run
        is in coordinates u where the objective's Hessian is about I
        (:func:`newton_frame`), then in theta where it stopped abnormally or at a bound.
        Its stopping rules are those above, the gradient's in u, and one more: the gain
        the curvature predicts is below a tenth of ``tol`` (:func:`_newton_run`).

    Returns
    -------
    problem : the problem at the best theta found
    sites : (tau, nu) or None
        A warm start for the final EP run: the sites computed at the returned theta (else
        those of the best evaluation of the best run; the given ``sites`` if no
        evaluation succeeded).
    """
    _check_start(problem, owner)
    warm = {"sites": sites, "theta": None, "grad": None, "step": 0, "best": None,
            "ep_tol": LOOSE_EP_TOL}
    tol_row = TOL_ROW if tol_row is None else tol_row
    gain_tol = None if tol is not None else float(tol_row) * problem.X.shape[0]
    asked, tol = tol, TOL if tol is None else tol

    def neg(theta, eval_gradient=True):
        theta = np.asarray(theta, dtype=float)
        last = warm.get("last")
        if last is not None and np.array_equal(last[0], theta):     # asked again
            return (last[1], last[2]) if eval_gradient else last[1]
        # warm start from the sites of the best evaluation so far: a line search's trial
        # point is near it, while the last evaluation may be a wild first step whose
        # sites lead EP with a non-log-concave likelihood to a poor fixed point
        start = warm["sites"] if warm["best"] is None else warm["best"][2]
        value, grad, result = _evaluate(problem, theta, start, warm["ep_tol"])
        if value != -_FAILED and prior is not None:
            log_p, d_log_p = prior(theta)
            value, grad = value + log_p, grad + d_log_p
        if value != -_FAILED:
            if warm["best"] is not None and value > warm["best"][0]:
                gain = (value - warm["best"][0]) / (1.0 + abs(value))
                warm["ep_tol"] = min(LOOSE_EP_TOL, EP_TOL_GAIN * gain)
            if hasattr(result, "site_tau"):
                warm["sites"] = (result.site_tau, result.site_nu)
            warm["theta"], warm["grad"] = theta.copy(), grad
            if warm["best"] is None or value > warm["best"][0]:
                warm["best"] = (value, warm["theta"], warm["sites"], grad)
        warm["step"] += 1
        _LOG.info("ML-II step %d: log %s %.4f%s", warm["step"],
                  "evidence" if prior is None else "evidence + log prior", value,
                  _sweeps(result))
        out, out_grad = -value, -grad
        if value == -_FAILED and warm["best"] is not None:
            # EP failed here: a bowl about the best point, above it, whose slope points
            # back to it, so that the line search shortens the step (a flat huge value
            # made L-BFGS-B abandon the search at the first failure)
            best_value, best_theta = warm["best"][0], warm["best"][1]
            gap = theta - best_theta
            height = 1.0 + abs(best_value)
            out = -best_value + height * (1.0 + 0.5 * float(gap @ gap))
            out_grad = height * gap
        warm["last"] = (theta.copy(), out, out_grad)
        return (out, out_grad) if eval_gradient else out

    bounds = np.asarray(problem.bounds, dtype=float)

    def run(start, precond=None):
        """One optimiser run: (theta, -log evidence, the sites at theta, the gradient of
        log evidence there or None)."""
        warm["best"], warm["ep_tol"] = None, LOOSE_EP_TOL
        if callable(optimizer):
            theta, fmin = optimizer(neg, start, bounds)
            theta, fmin = np.asarray(theta, dtype=float), float(fmin)
        else:
            start_value = abs(neg(start, eval_gradient=False))     # served again below
            scale = 1.0 + (start_value if start_value < _FAILED else 0.0)
            theta, nit, nfev = start, 0, 0
            # with ``precondition``, a first run in u, theta = start + C u (clipped to the
            # bounds, the clipped entries' gradient dropped), C C^T an estimate of the
            # inverse Hessian (:func:`newton_frame`); u's box is finite, so that
            # L-BFGS-B's first step is the whole negative gradient, a Newton step.  Then
            # the usual runs in theta where it stopped abnormally or ended at a bound.
            C = None if precond is None else newton_frame(precond, problem, start, scale,
                                                          prior)
            while True:
                options = {"maxiter": int(max_iter) - nit, "maxfun": 4 * int(max_iter) - nfev,
                           "ftol": float(tol), "gtol": 10.0 * float(tol)}
                if C is None:
                    res = _lbfgsb(lambda t, s=scale: tuple(v / s for v in neg(t)), theta,
                                  bounds, options, _row_rule(gain_tol, scale))
                    x = res.x
                else:
                    res = _newton_run(neg, theta, C, scale, bounds, options, tol, gain_tol)
                    x = np.clip(theta + C @ res.x, bounds[:, 0], bounds[:, 1])
                nit, nfev = nit + res.nit, nfev + res.nfev
                theta, fmin = x, float(res.fun) * scale
                if C is not None:
                    C = None
                    if abs(fmin) < _FAILED and res.status != 1 and (
                            res.status != 0 or np.any(at_bounds(x, bounds))):
                        continue                          # the polish, in theta
                if res.settled and gain_tol is not None:
                    break                                 # settled in nats per row
                end = 1.0 + abs(fmin)
                # a start far from the optimum (|log Z| there RESCALE times the optimum's
                # or more) made the relative rules loose: go on at the optimum's scale
                if res.status != 0 or abs(fmin) >= _FAILED or RESCALE * end > scale \
                        or nit >= max_iter:
                    break
                scale = end
            if res.status == 1:                  # the iteration or evaluation budget
                warnings.warn(
                    f"{owner}: ML-II stopped after {nit} L-BFGS-B iterations "
                    f"({nfev} evidence evaluations) before the evidence converged "
                    f"(max_iter_optimizer={max_iter}, tol_optimizer={asked}); increase "
                    f"max_iter_optimizer{' or tol_optimizer' if asked is not None else ''}.",
                    ConvergenceWarning,
                    stacklevel=user_stacklevel())
        if warm["theta"] is not None and np.array_equal(warm["theta"], theta):
            return theta, fmin, warm["sites"], warm["grad"]
        # the optimiser returned an earlier point (a grid, a line search that backed off)
        if warm["best"] is None:
            return theta, fmin, warm["sites"], None
        best = warm["best"]
        return theta, fmin, best[2], best[3] if np.array_equal(best[1], theta) else None

    best = run(problem.theta, precondition)
    if n_restarts > 0 and not np.all(np.isfinite(bounds)):
        raise ValueError(f"n_restarts_optimizer > 0 needs finite hyperparameter bounds; "
                         f"{owner} has infinite ones.")
    for _ in range(int(n_restarts)):
        cand = run(problem.draw(rng))
        if cand[1] < best[1]:
            best = cand
    problem = problem.with_theta(best[0])
    degenerate = _warn_degenerate_kernel(problem, owner)
    _warn_at_bounds(problem, best[0], bounds, owner, best[3], degenerate)
    return problem, best[2]


#: A parameter within this of a bound, in its log (0.1%), ended at the bound: on a flat
#: evidence L-BFGS-B may stop a hair short of it.
AT_BOUND = 1e-3

#: A parameter at a bound is "flat" there when a 10x wider bound would raise the log
#: evidence by less than this, to first order (|d log Z / d log theta| x ln 10).
FLAT_GAIN = 0.1


def at_bounds(theta, bounds):
    """``(at lower, at upper)``: boolean masks of the entries of ``theta`` within
    :data:`AT_BOUND` of their finite lower or upper bound (``bounds``: (p, 2))."""
    bounds = np.asarray(bounds, dtype=float)
    return (np.abs(theta - bounds[:, 0]) <= AT_BOUND,
            np.abs(theta - bounds[:, 1]) <= AT_BOUND)


def _bound_hints(entries, fixed):
    """Where to change the bounds of the parameters of ``entries``
    (:class:`~fastep._theta.ThetaEntry`, as the kernel or likelihood describes them): how
    to widen them, or with ``fixed`` how to fix them (one hint where several entries
    share it)."""
    return "; ".join(dict.fromkeys(e.fix if fixed else e.widen for e in entries))


def _entries(problem):
    """The problem's :class:`~fastep._theta.ThetaEntry` list (empty where it names no
    entry of theta: a stand-in problem)."""
    return list(getattr(problem, "theta_entries", ()))


def _check_start(problem, owner):
    """A ValueError where a kernel or likelihood parameter starts ML-II outside its bounds:
    L-BFGS-B would start on the bound, and where the evidence is flat there (a lengthscale
    of 1e8 on standardised inputs: a constant kernel) it stays, fitting the majority
    class with no word but a bound warning."""
    theta, bounds = problem.theta, np.asarray(problem.bounds, dtype=float)
    for i, entry in enumerate(_entries(problem)):
        lo, hi = bounds[i]
        if lo - AT_BOUND <= theta[i] <= hi + AT_BOUND:
            continue
        value, low, high = (entry.shown(t)[0] for t in (theta[i], lo, hi))
        raise ValueError(f"{owner}: ML-II would start with {entry.name} = {value:.3g}, "
                         f"outside its bounds [{low:.3g}, {high:.3g}], and L-BFGS-B would "
                         f"start it on the bound. Give a starting value inside the bounds, "
                         f"or widen them ({_bound_hints([entry], fixed=False)}).")


#: The nearest rows of a fitted kernel are "independent" below this correlation (the
#: median over rows), and the kernel "constant" over the data above 1 - this (the least
#: correlation between any two rows of a sample): see :func:`_warn_degenerate_kernel`.
DEGENERATE_CORRELATION = 1e-2
CONSTANT_GAP = 1e-6
#: Rows of X the check samples.
DEGENERATE_SAMPLE = 400


def _warn_degenerate_kernel(problem, owner):
    """A ``ConvergenceWarning`` where the fitted kernel makes the model degenerate on its
    own training inputs: ``"independent"`` where a row's nearest neighbour (in the
    kernel's correlation) is correlated below :data:`DEGENERATE_CORRELATION` for the
    median row (a lengthscale far below the rows' spacing: every row its own, the
    predictions between them the prior's), ``"constant"`` where every two rows are
    correlated above ``1 - CONSTANT_GAP`` (a lengthscale far above the data's spread:
    every input the same prediction).  Checked on a sample of
    :data:`DEGENERATE_SAMPLE` distinct rows of an in-memory X; returns the kind or None."""
    X, kernel = getattr(problem, "X", None), getattr(problem, "kernel", None)
    if not isinstance(X, np.ndarray) or kernel is None or X.shape[0] < 3:
        return None
    rows = np.unique(X, axis=0) if X.shape[0] <= 4 * DEGENERATE_SAMPLE else X
    if rows.shape[0] > DEGENERATE_SAMPLE:
        rows = rows[np.random.default_rng(0).choice(rows.shape[0], DEGENERATE_SAMPLE,
                                                   replace=False)]
    if rows.shape[0] < 3:
        return None
    try:
        K = np.asarray(kernel(rows), dtype=float)
    except Exception:            # a kernel that cannot be evaluated here: no check
        return None
    d = np.sqrt(np.clip(np.diag(K), 1e-300, None))
    C = K / d[:, None] / d[None, :]
    np.fill_diagonal(C, np.nan)
    if not np.all(np.isfinite(C[~np.isnan(C)])):
        return None
    nearest = np.nanmax(C, axis=1)
    if np.median(nearest) < DEGENERATE_CORRELATION:
        warnings.warn(f"{owner}: the fitted kernel {kernel} correlates a training row with "
                      f"its nearest neighbour by {np.median(nearest):.2g} (median over rows): "
                      f"each row is nearly independent of the others, so the model "
                      f"memorises the training targets and predicts the prior's mean between "
                      f"them (a lengthscale far below the rows' spacing). "
                      f"{_memorising_hint(problem)}Standardise X, or bound the lengthscale "
                      f"below by about the rows' spacing (lengthscale_bounds=(low, high)).",
                      ConvergenceWarning, stacklevel=user_stacklevel())
        return "independent"
    if np.nanmin(C) > 1.0 - CONSTANT_GAP:
        warnings.warn(f"{owner}: the fitted kernel {kernel} correlates every two training "
                      f"rows by more than {1.0 - CONSTANT_GAP}: it is constant over the data, "
                      f"so every input gets the same prediction (a lengthscale far above the "
                      f"data's spread). Start ML-II from a lengthscale near the distances "
                      f"between rows (kernel=None does: their median), and standardise X.",
                      ConvergenceWarning, stacklevel=user_stacklevel())
        return "constant"
    return None


def _memorising_hint(problem):
    """The likelihood's reason for a memorising fit, from its targets (its
    ``memorising_hint``), followed by a space; "" where it has none."""
    likelihood, y = getattr(problem, "likelihood", None), getattr(problem, "y", None)
    hint = getattr(likelihood, "memorising_hint", None)
    if hint is None or not isinstance(y, np.ndarray):
        return ""
    text = hint(y)
    return text + " " if text else ""


def _warn_at_bounds(problem, theta, bounds, owner, grad=None, degenerate=None):
    """A ``ConvergenceWarning`` naming the kernel or likelihood parameters that ended at
    one of their bounds.  With the gradient of log evidence there (``grad``, in
    ``theta``), it tells a parameter the evidence still pulls outwards (widen the bound)
    from one where it has flattened out (an asymptote: the data do not determine the
    parameter, and no bound will) and from one where it rises inwards (the optimiser
    stopped early).  A parameter whose upper bound is a model of its own (its entry's
    ``at_upper``: a Student-t's df, a Gaussian) and that the evidence does not pull
    further gets that message instead, as a ``UserWarning``.  Where the fitted kernel is
    ``degenerate`` (:func:`_warn_degenerate_kernel` said so) a flat bound is not offered
    as a fit to keep.  Parameters are named, shown and hinted at as their
    :class:`~fastep._theta.ThetaEntry` (``problem.theta_entries``) says."""
    pulled, flat, inward, limits = [], [], [], []
    at_lo, at_hi = at_bounds(theta, bounds)
    for i, entry in enumerate(_entries(problem)):
        lo, hi = bounds[i]
        for side, edge, outward, at in (("lower", lo, -1.0, at_lo[i]),
                                        ("upper", hi, 1.0, at_hi[i])):
            if not at:
                continue
            value, wider, log = entry.shown(edge)
            if side == "upper" and entry.at_upper is not None and (
                    grad is None or grad[i] * wider > -FLAT_GAIN):
                limits.append(entry.at_upper.format(owner=owner, value=value))
                continue
            hit = f"{entry.name} at its {side} bound {value:.3g}"
            gain = None if grad is None else outward * grad[i] * wider
            slope = "" if grad is None else \
                f" (d log evidence / d {log}{entry.name} = {grad[i]:.2g})"
            if gain is None or gain >= FLAT_GAIN:
                pulled.append((hit, entry))
            elif gain > -FLAT_GAIN:
                flat.append((hit + slope, entry))
            else:
                inward.append(hit + slope)
    for message in limits:
        warnings.warn(message, UserWarning, stacklevel=user_stacklevel())
    if pulled:
        warnings.warn(f"{owner}: ML-II ended with {', '.join(h for h, _ in pulled)}; the "
                      f"evidence increases beyond it. Widen the bounds "
                      f"({_bound_hints([e for _, e in pulled], fixed=False)}) or rescale "
                      f"X / y.", ConvergenceWarning, stacklevel=user_stacklevel())
    if flat:
        warnings.warn(f"{owner}: ML-II ended with {', '.join(h for h, _ in flat)}; the "
                      f"evidence is flat there (a 10x wider bound would raise it by less than "
                      f"{FLAT_GAIN:g}), so the data do not determine the parameter and a wider "
                      f"bound would not help. Fix it at a value you believe "
                      f"({_bound_hints([e for _, e in flat], fixed=True)})"
                      f"{' or keep the fit as it is' if degenerate is None else ''}.",
                      ConvergenceWarning, stacklevel=user_stacklevel())
    if inward:
        warnings.warn(f"{owner}: ML-II ended with {', '.join(inward)}, where the evidence "
                      f"rises away from the bound: the optimiser stopped before the "
                      f"optimum. Raise max_iter_optimizer, or check a custom optimizer.",
                      ConvergenceWarning, stacklevel=user_stacklevel())
