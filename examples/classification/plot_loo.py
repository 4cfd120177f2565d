"""
Leave-one-out predictions from EP's cavities
============================================

Leaving out training point ``i`` and refitting gives the leave-one-out (LOO)
predictive ``p(y_i | y_-i)``, a measure of fit that needs no test set, at the price
of ``n`` refits.  EP gets it almost for free: at its fixed point the *cavity*
``q_-i(f_i)``, the posterior with site ``i`` removed, is EP's own approximation of
``p(f_i | y_-i)``, so ``log p(y_i | y_-i) ~ log int p(y_i | f) q_-i(f) df`` (Opper &
Winther 2000).  :meth:`~fastep.EPGaussianProcessClassifier.loo_log_predictive_density`
returns it for every training point from one fit.

Here the cavity LOO of a 50-point classifier is set against 50 actual refits, each
without one point and with the kernel held fixed (a refit with ML-II would also move
the kernel, which the cavity does not).
"""

# %%
# Data and one fit
# ----------------
# A 2-D problem with a curved boundary and some flipped labels: the points on the
# wrong side of the boundary are the ones a model predicts worst when they are left
# out.
import time

import matplotlib.pyplot as plt
import numpy as np

from fastep import EPGaussianProcessClassifier

rng = np.random.default_rng(1)
n = 50
X = rng.uniform(-2.0, 2.0, size=(n, 2))
y = (np.sin(1.5 * X[:, 0]) + 0.8 * X[:, 1] + 0.4 * rng.normal(size=n) > 0).astype(int)

# ML-II once, then keep that kernel for every fit below.
kernel = EPGaussianProcessClassifier(random_state=0).fit(X, y).kernel_
print("kernel:", kernel)

start = time.perf_counter()
clf = EPGaussianProcessClassifier(kernel, optimizer=None).fit(X, y)
loo_cavity = clf.loo_log_predictive_density()          # log p(y_i | y_-i), shape (n,)
time_cavity = time.perf_counter() - start

# %%
# The same by refitting n times
# -----------------------------
# Each refit drops one point, runs EP to convergence at the same kernel, and predicts
# the point it left out.
start = time.perf_counter()
loo_refit = np.empty(n)
for i in range(n):
    keep = np.arange(n) != i
    model = EPGaussianProcessClassifier(kernel, optimizer=None).fit(X[keep], y[keep])
    loo_refit[i] = np.log(model.predict_proba(X[i:i + 1])[0, y[i]])
time_refit = time.perf_counter() - start

print(f"sum of LOO log predictive densities: cavities {loo_cavity.sum():.4f}, "
      f"refits {loo_refit.sum():.4f}")
print(f"largest difference for one point: {np.max(np.abs(loo_cavity - loo_refit)):.2e}")
print(f"time: cavities {time_cavity:.3f} s (one fit), refits {time_refit:.3f} s "
      f"({n} fits)")

# %%
# Point by point
# --------------
# The points lie on the diagonal: the cavity of the full fit and the posterior of the
# refit without the point agree closely.  They are not identical: a refit lets EP move
# the other sites once point ``i`` is gone, the cavity keeps them as they were fitted
# with point ``i`` present.  The gap is largest for the point the rest of the data
# contradict most (bottom left, a label on the wrong side of the boundary): there the
# cavity is a little more optimistic than the refit, by about 0.2 nats.  For the
# well-predicted points the gap is negligible.
wrong = np.exp(loo_cavity) < 0.5
fig, ax = plt.subplots(figsize=(5.5, 5))
lo = min(loo_cavity.min(), loo_refit.min()) - 0.2
ax.plot([lo, 0.05], [lo, 0.05], color="0.6", ls="--", lw=1, label="y = x")
ax.scatter(loo_refit[~wrong], loo_cavity[~wrong], color="C0",
           label="p(y_i | y_-i) > 0.5")
ax.scatter(loo_refit[wrong], loo_cavity[wrong], color="C3", marker="D",
           label="p(y_i | y_-i) < 0.5")
ax.set_xlim(lo, 0.05)
ax.set_ylim(lo, 0.05)
ax.set_aspect("equal")
ax.set_xlabel("log p(y_i | y_-i), refit without point i")
ax.set_ylabel("log p(y_i | y_-i), EP cavity of the full fit")
ax.set_title(f"LOO predictive of {n} training points")
ax.legend(loc="upper left")
fig.tight_layout()
plt.show()
