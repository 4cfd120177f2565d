"""What every EP driver shares: argument checks, starting sites, the convergence rule,
adaptive damping and the warnings.  Written over an array module ``xp`` (NumPy or
CuPy), so the one dense and the one sparse driver use it on every backend."""
from __future__ import annotations

import logging
import math
import numbers
import warnings

import numpy as np

from .._caller import user_stacklevel
from .._checks import float_array
from ..exceptions import ConvergenceWarning, EPNumericalWarning, NotPositiveDefiniteError


#: Every EP sweep is logged here at DEBUG level (``fastep fit`` turns it into a progress
#: bar on a terminal); nothing is formatted unless a handler asks for it.
SWEEP_LOG = logging.getLogger("fastep.sweeps")

#: Smallest fraction of a proposed step that robust EP tries before giving up.
MIN_STEP = 2.0 ** -12

#: Adaptive damping's factor on an oscillating sweep, and its inverse when a shrunk step
#: grows back (:meth:`SweepControl.advance`).
DAMPING_SHRINK = 0.7

#: A shrunk step grows back only after this many sweeps without a shrink, each of whose
#: site steps kept the direction of the one before (cosine above :data:`REGROW_TURN`).
REGROW_CALM = 3
REGROW_TURN = 0.0

#: Sweeps over which :meth:`SweepControl.stalled` asks the site change to halve.
STALL_WINDOW = 5


def backtrack(attempt, shrink, ctl, failure):
    """Robust EP's inner loop, shared by dense and sparse EP (every way of running it):
    ``attempt(step)`` returns the posterior at the proposed sites (a fraction ``step`` of
    the way from the old ones), or None when it is not proper; on None ``shrink()`` halves
    the step of the proposed sites (wherever they live) and the step is tried again.  A
    shorter step than 1 also shrinks the damping of later sweeps (``ctl``; it may grow
    back, :meth:`SweepControl.advance`).  Below
    :data:`MIN_STEP` it raises :class:`NotPositiveDefiniteError` with the message
    ``failure``.

    This keeps every iterate proper, in the spirit of the damping control of GPstuff's
    robust EP (Jylanki, Vanhatalo & Vehtari 2011, section 4)."""
    step = 1.0
    while True:
        post = attempt(step)
        if post is not None:
            if step < 1.0:
                ctl.shrink(step, floor=MIN_STEP)
            return post
        step *= 0.5
        if step < MIN_STEP:
            raise NotPositiveDefiniteError(failure.format(min_step=MIN_STEP))
        shrink()


def halve_towards(old_tau, old_nu, tau, nu):
    """``shrink`` of :func:`backtrack` for sites held in arrays: halve, in place, the step
    of ``tau, nu`` from ``old_tau, old_nu``."""
    def shrink():
        tau[...] = 0.5 * (old_tau + tau)
        nu[...] = 0.5 * (old_nu + nu)
    return shrink


def damping_rule(damping, adaptive_schedule=True):
    """What ``damping`` means to every EP driver: ``(first step, adaptive)``.  None is
    adaptive damping (:class:`SweepControl`) starting from a full step, where the schedule
    adapts (dense EP's sequential sweeps do not: they take full steps); a number is that
    fixed step."""
    return (1.0 if damping is None else damping), (damping is None and adaptive_schedule)


def check_sweep_controls(damping, tol, max_iter):
    """Raise ValueError unless damping is in (0, 1], tol > 0 and max_iter is an int >= 1."""
    if not (isinstance(damping, numbers.Real) and 0.0 < damping <= 1.0):
        raise ValueError(f"damping must be a float in (0, 1] (None: adaptive); got "
                         f"{damping!r}.")
    if not (isinstance(tol, numbers.Real) and tol > 0):
        raise ValueError(f"tol must be a positive float; got {tol!r}.")
    if (isinstance(max_iter, bool) or not isinstance(max_iter, numbers.Integral)
            or max_iter < 1):
        raise ValueError(f"max_iter must be an integer >= 1 (a number of sweeps); got "
                         f"{max_iter!r}.")


def check_kernel_matrix(K, n_targets, xp=np):
    """K as a checked C-ordered float ``xp`` array: square, finite, non-empty, with a row
    per target."""
    K = float_array(K, "K", 2, xp=xp, fix="Pass a finite (n, n) covariance matrix (check "
                    "the kernel hyperparameters and X).")
    if K.shape[0] != K.shape[1]:
        raise ValueError(f"K must be a square (n, n) covariance matrix; got shape {K.shape}.")
    n = K.shape[0]
    if n == 0:
        raise ValueError("K is empty; EP needs at least one observation.")
    if n_targets != n:
        raise ValueError(f"y has {n_targets} entries but K is {n} x {n}; they must describe "
                         "the same observations.")
    return K


def initial_sites(site_tau, site_nu, n, clip=False):
    """Starting sites ``(tau, nu)`` as new host float arrays: zeros (cold start) or the
    given warm-start values, checked; ``clip`` drops negative precisions (log-concave
    sites)."""
    if site_tau is None and site_nu is None:
        return np.zeros(n), np.zeros(n)
    if site_tau is None or site_nu is None:
        raise ValueError("site_tau and site_nu go together: pass both (a warm start) or "
                         "neither (a cold start).")
    fix = "Pass the site_tau and site_nu of an earlier result for the same data."
    tau = float_array(np.ravel(site_tau), "site_tau", 1, (n,), fix=fix)
    nu = float_array(np.ravel(site_nu), "site_nu", 1, (n,), fix=fix)
    return (np.maximum(tau, 0.0) if clip else tau.copy()), nu.copy()


def relative_step(xp, tau0, nu0, tau1, nu1):
    """The site step ``(tau0, nu0) -> (tau1, nu1)`` relative to the old sites, as one
    vector ``(d tau / (1 + |tau|), d nu / (1 + |nu|))``."""
    return xp.concatenate(((tau1 - tau0) / (1.0 + xp.abs(tau0)),
                           (nu1 - nu0) / (1.0 + xp.abs(nu0))))


def site_change(xp, tau0, nu0, tau1, nu1):
    """The largest relative site change ``max(|d tau| / (1 + |tau|), |d nu| / (1 + |nu|))``."""
    return float(xp.max(xp.abs(relative_step(xp, tau0, nu0, tau1, nu1))))


def fill_cavities(ok, mu_cav, var_cav, mean, var, xp=np):
    """Cavities of the sites left out (``~ok``: improper cavity) replaced by the marginals;
    returns ``(mu_cav, var_cav, number left out)``."""
    n_bad = int(xp.count_nonzero(~ok))
    if n_bad:
        mu_cav = xp.where(ok, mu_cav, mean)
        var_cav = xp.where(ok, var_cav, var)
    return mu_cav, var_cav, n_bad


class SweepControl:
    """Convergence bookkeeping shared by every EP driver (dense and sparse, every backend).

    EP has converged when, after at least ``min_sweeps`` sweeps, log Z changed by less
    than ``tol * max(1, |log Z|)`` and the largest relative site change is below ``tol``.
    A cold start needs two (its first sweep moves every site from zero); a warm start may
    stop after one whose update moved no site by more than ``tol`` (the given sites were a
    fixed point to that tolerance), which halves the cost of an ML-II evaluation near the
    optimum.
    Adaptive damping, read along one eigenvector of the damped iteration
    ``x <- x + d (T x - x)`` (eigenvalue lambda of T), where the undamped change falls by
    ``rho = |1 + d (lambda - 1)|`` per sweep and successive steps have cosine ``turn``
    (+1: monotone, -1: swinging back):

    * the step starts at 1 and shrinks by :data:`DAMPING_SHRINK` (to at least 0.1) when
      the undamped change grows (``rho > 1``), or when the step swings back while the
      change falls by less than half (``turn * rho < -0.5``: ``1 + d (lambda - 1) <
      -0.5``, where a smaller step converges faster);
    * a step shrunk by adaptive damping or by robust EP's backtracking grows back by
      ``1 / DAMPING_SHRINK``, up to the given damping (1 when adaptive), once
      :data:`REGROW_CALM` sweeps in a row kept their direction and shrank the change
      (``0 < 1 + d (lambda - 1) < 1``: the step ``d / 0.7`` still converges there), and
      again after each further run of such sweeps; a growth undone in the next sweep
      lengthens the runs by :data:`REGROW_CALM` (so a step that swings between a size
      that converges and one that does not spends ever fewer sweeps at the latter).

    fastep 0.1 never let a shrunk step grow back, so one oscillating sweep slowed every
    later one (``scripts/ep_floor.py damping`` compares the two rules).  Without ``turn``
    (chunk-sequential sparse EP, a Dask cluster) a shrunk step stays shrunk.

    Use::

        ctl = SweepControl("EP", damping, adaptive, tol, max_iter, callback)
        while True:
            ...sites and log_ev from the current posterior...
            if ctl.done(log_ev):
                break
            ctl.advance(site_change)        # the damped change of this sweep's sites
            ...adopt the new sites, rebuild the posterior...
        mu_cav, var_cav = ctl.finish(ok, mu_cav, var_cav, mean, var, xp)
    """

    def __init__(self, what, damping, adaptive, tol, max_iter, callback=None, min_sweeps=2):
        self.what, self.damping, self.adaptive = what, damping, adaptive
        self.min_sweeps = min_sweeps
        self.ceiling, self.calm, self.calm_needed, self.grown_at = damping, 0, REGROW_CALM, None
        self.tol, self.max_iter, self.callback = tol, max_iter, callback
        self.prev = self.log_ev = math.nan
        self.change = self.last_raw = math.inf
        self.history, self.sweeps, self.converged = [], 0, False
        self.changes, self.settled = [], True

    def restarted(self):
        """A fresh control with this one's settings (a run that starts over)."""
        return SweepControl(self.what, self.ceiling, self.adaptive, self.tol, self.max_iter,
                            self.callback, self.min_sweeps)

    def done(self, log_ev, settled=True):
        """Record the current sweep's log Z; True when the loop is to stop.  (With
        ``max_iter=0`` the loop only evaluates given sites: nothing is to converge.)
        ``settled=False``: an outer update (e.g. EM of likelihood data) still moves, so EP
        has not converged yet."""
        self.log_ev, self.settled = log_ev, settled
        self.history.append(log_ev)
        if SWEEP_LOG.isEnabledFor(logging.DEBUG):
            SWEEP_LOG.debug("%s sweep %d: log Z %.6f", self.what, self.sweeps, log_ev)
        if self.callback is not None and self.sweeps:
            self.callback(self.sweeps, log_ev)
        if self.max_iter == 0 or (
                settled and self.sweeps >= self.min_sweeps
                and abs(log_ev - self.prev) < self.tol * max(1.0, abs(log_ev))
                and self.change < self.tol):
            self.converged = True
        return self.converged or self.sweeps >= self.max_iter

    def advance(self, change, damped=True, turn=None):
        """Count a sweep whose sites moved by ``change`` (``damped``: a parallel step
        scaled by the current damping, whose undamped size drives adaptive damping);
        ``turn``: the cosine between this sweep's site step and the last one's
        (:class:`StepTurn`), which regrowth and :meth:`stalled` read."""
        if damped:
            raw = change / self.damping
            change = raw
            swung_back = (turn is not None and self.last_raw > 0
                          and turn * raw < -0.5 * self.last_raw)
            kept = turn is not None and turn > REGROW_TURN and raw < self.last_raw
            self.calm = self.calm + 1 if kept else 0
            if self.adaptive and (raw > self.last_raw or swung_back):
                self.shrink(DAMPING_SHRINK, floor=min(0.1, self.damping))
            elif self.calm >= self.calm_needed and self.damping < self.ceiling:
                # one growth per run of calm sweeps: each is seen before the next
                self.damping = min(self.ceiling, self.damping / DAMPING_SHRINK)
                self.calm, self.grown_at = 0, self.sweeps
            self.last_raw = raw
        self.change = change
        self.changes.append((change, math.nan if turn is None else turn, self.settled))
        self.sweeps += 1
        self.prev = self.log_ev

    def shrink(self, factor, floor):
        """Multiply the damping by ``factor``, to at least ``floor``, and restart the count
        of calm sweeps before it may grow back; a shrink in the sweep after a growth (the
        growth failed) makes the next growth wait :data:`REGROW_CALM` calm sweeps more."""
        self.damping = max(floor, factor * self.damping)
        self.calm = 0
        if self.grown_at is not None and self.sweeps - self.grown_at <= 1:
            self.calm_needed += REGROW_CALM
            self.grown_at = None

    def stalled(self, window=STALL_WINDOW):
        """True when EP gets nowhere: the largest site change of the last sweep is above
        ``tol`` and more than half that of ``window`` sweeps before (a contraction slower than
        ``2^(-1/window)`` per sweep; at least ``2 window`` sweeps since the last True).
        While an outer update moved in the last ``window`` sweeps, the site step must also
        have turned back (negative cosine with the step before) at least once: steps that
        keep their direction there are the outer update (e.g. EM) drifting the sites, slow
        but not stalled.  A True starts the watch afresh (the caller acts on it)."""
        c = self.changes
        if (len(c) >= 2 * window and c[-1][0] > max(self.tol, 0.5 * c[-1 - window][0])
                and (all(settled for _, _, settled in c[-window:])
                     or any(turn < 0 for _, turn, _ in c[-window:]))):
            self.changes = []
            return True
        return False

    def finish(self, ok, mu_cav, var_cav, mean, var, xp=np):
        """End of the loop: cavities of the sites left out (``~ok``, improper cavity) are
        replaced by the marginals, and the warnings are given (:meth:`warn`).  Returns
        ``(mu_cav, var_cav)``; ``xp`` is the array module (NumPy or CuPy)."""
        mu_cav, var_cav, n_bad = fill_cavities(ok, mu_cav, var_cav, mean, var, xp)
        self.warn(n_bad)
        return mu_cav, var_cav

    def warn(self, n_bad):
        """Warn about sites left out (improper cavities) and about non-convergence,
        naming the knob to turn, at the first line outside fastep that led here (the
        user's call of fastep.ep, sparse_ep or an estimator's fit)."""
        if not n_bad and self.converged:
            return
        stacklevel = user_stacklevel()
        if n_bad:
            warnings.warn(f"{self.what}: {n_bad} site(s) have an improper cavity (negative "
                          "variance) and were left out of the update and of log Z; take smaller "
                          "EP steps (e.g. damping=0.5).", EPNumericalWarning,
                          stacklevel=stacklevel)
        if not self.converged:
            warnings.warn(f"{self.what} did not converge in max_iter={self.max_iter} sweeps "
                          f"(last change of log Z {abs(self.log_ev - self.prev):.2e}, largest "
                          f"site change {self.change:.2e}, tol={self.tol:g}). Increase "
                          f"max_iter, or use a smaller damping (now {self.damping:g}) if EP "
                          "oscillates.", ConvergenceWarning, stacklevel=stacklevel)


class StepTurn:
    """The cosine between successive relative site steps (:func:`relative_step`): near -1
    when EP swings back and forth."""

    def __init__(self):
        self.last = None

    def __call__(self, xp, tau0, nu0, tau1, nu1):
        """``(change, turn)`` of the step ``(tau0, nu0) -> (tau1, nu1)``: its largest
        relative entry (:func:`site_change`, from the same vector) and its cosine with the
        step before (None for the first step, or a zero step)."""
        step = relative_step(xp, tau0, nu0, tau1, nu1)
        change = float(xp.max(xp.abs(step)))
        last, self.last = self.last, step
        if last is None:
            return change, None
        size = float(xp.linalg.norm(step)) * float(xp.linalg.norm(last))
        return change, (float(step @ last) / size if size > 0 else None)
