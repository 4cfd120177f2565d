"""
Convergence of EP sweeps and of ML-II
=====================================

Two loops run inside every fastep fit: EP's sweeps over the sites at fixed
hyperparameters, and, around them, type-II maximum likelihood (ML-II), which moves the
kernel parameters to maximise EP's approximation of the log evidence, log Z_EP.  This
example draws how fast each approaches its final value, with
:func:`fastep.plot.convergence` (``|log Z_k - log Z_final|`` on a log scale).

* EP: :func:`fastep.ep` records log Z_EP after every sweep in ``result.history``.  We
  compare the parallel and the sequential schedule with fixed and adaptive damping, on
  a moderate and on a large kernel variance (the large one couples the sites strongly,
  which is where undamped parallel EP can oscillate).
* ML-II: the estimators log every evidence evaluation on the ``"fastep"`` logger at
  INFO level; a :class:`logging.Handler` collects them.
"""

# %%
# EP sweeps at a fixed kernel
# ---------------------------
import logging
import warnings

import matplotlib.pyplot as plt
import numpy as np

import fastep
from fastep import ConvergenceWarning, EPGaussianProcessClassifier
from fastep.kernels import RBF
from fastep.likelihoods import Probit
from fastep.plot import convergence

rng = np.random.default_rng(0)
n = 300
X = rng.normal(size=(n, 2))
y = np.where(np.sin(2 * X[:, 0]) + X[:, 1] + 0.3 * rng.normal(size=n) > 0, 1.0, -1.0)

# (method, damping): damping=None is the adaptive rule of parallel EP (full steps,
# shrunk when EP oscillates); sequential EP takes full steps by default.
schedules = [("parallel", None), ("parallel", 1.0), ("parallel", 0.5),
             ("sequential", 1.0), ("sequential", 0.5)]

# %%
# We run EP to a tight tolerance (1e-10) so that the traces are long enough to read.
# With variance 100, undamped parallel EP (damping=1.0) does not converge: it swings
# between two states and uses up its 100 sweeps.  ``fastep.ep`` then warns with a
# ``ConvergenceWarning``; here we expect it, so we silence it and print
# ``result.converged`` instead.
fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
for ax, variance in zip(axes, [1.0, 100.0]):
    K = RBF(variance=variance, lengthscale=1.0)(X)
    print(f"kernel variance {variance:g}:")
    for method, damping in schedules:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            res = fastep.ep(K, y, Probit(), method=method, damping=damping, tol=1e-10,
                            max_iter=100)
        name = f"{method}, damping {'adaptive' if damping is None else damping}"
        print(f"  {name:<30} {res.n_iter:>3} sweeps, converged={res.converged}, "
              f"log Z_EP = {res.log_marginal_likelihood:.6f}")
        convergence(res.history, ax=ax, label=name)
    ax.set_title(f"EP sweeps, RBF kernel variance {variance:g} (n = {n})")
axes[0].legend(loc="upper right", fontsize=8)
fig.tight_layout()

# %%
# Sequential EP needs the fewest sweeps, but each of its sweeps updates the sites one
# by one; a parallel sweep updates them all at once from one factorisation, so
# parallel EP is usually faster per sweep.  At variance 1 the adaptive rule never has
# to shrink the step, so its curve lies under the one of damping 1.0.  Halving the
# step (damping 0.5) costs both schedules many sweeps where full steps are stable, and
# is what saves parallel EP at the large variance; the adaptive rule shrinks the step
# only once EP starts to oscillate.

# %%
# ML-II steps through the ``"fastep"`` logger
# -------------------------------------------
# Every evidence evaluation of ML-II is logged as ``"ML-II step %d: log %s %.4f%s"``;
# the record's ``args`` hold the step number, the quantity's name, its value and a
# note on the EP sweeps.  A handler keeps the values.  We use ``hyperprior=None``
# (plain ML-II) so that the quantity is the log evidence itself; with the default
# hyperprior the records carry "evidence + log prior".  The evaluations include the
# line-search trials of L-BFGS-B, so the trace need not fall monotonically.


class EvidenceTrace(logging.Handler):
    """Collects the value of every ML-II evaluation logged by fastep."""

    def __init__(self):
        super().__init__(level=logging.INFO)
        self.values = []

    def emit(self, record):
        if record.msg.startswith("ML-II step"):
            self.values.append(record.args[2])


logger = logging.getLogger("fastep")
logger.setLevel(logging.INFO)
trace = EvidenceTrace()
logger.addHandler(trace)

fig, ax = plt.subplots(figsize=(6.5, 4.2))
for lengthscale in [0.1, 10.0]:
    trace.values = []
    clf = EPGaussianProcessClassifier(RBF(lengthscale=lengthscale), hyperprior=None,
                                      random_state=0).fit(X, (y > 0).astype(int))
    # an evaluation where EP failed is logged with a huge negative value: leave it out
    values = [v for v in trace.values if v > -1e20]
    print(f"start lengthscale {lengthscale:g}: {len(values)} evaluations, "
          f"final log evidence {clf.log_marginal_likelihood_value_:.6f}, {clf.kernel_}")
    convergence(values, ax=ax, label=f"start: lengthscale {lengthscale:g}",
                xlabel="ML-II evaluation")
logger.removeHandler(trace)
logger.setLevel(logging.NOTSET)
ax.set_title("ML-II of an EP classifier from two starts")
ax.legend(loc="upper right")
fig.tight_layout()
plt.show()

# %%
# Both starts end at the same kernel and evidence in about a dozen evaluations.  Each
# evaluation warm-starts EP from the sites of the best evaluation so far, so none of
# them needs more than a handful of sweeps.
