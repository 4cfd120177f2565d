"""
Sparse EP classification with inducing points
=============================================

Dense EP costs ``O(n^3)`` time and ``O(n^2)`` memory per sweep.  With
``n_inducing=m``, :class:`fastep.EPGaussianProcessClassifier` runs sparse Power EP
instead: the latent function is summarised by its values at ``m`` inducing inputs,
chosen by k-means++ on the training inputs, and a sweep costs ``O(n m^2)``.

This example fits the two-moons problem with ``m`` = 8 to 128 inducing points and sets
the held-out log loss and the fit time (ML-II of the kernel included) against the
dense fit's.  A few tens of well-placed inducing points already give the dense
model's predictions on a smooth 2-D problem.
"""

# %%
# Data
# ----
# 3,000 points of two noisy interleaved half-moons: 1,000 to train on (small enough
# for the dense reference fit) and 2,000 to test on.
import time

import matplotlib.pyplot as plt
import numpy as np
from sklearn.datasets import make_moons
from sklearn.metrics import log_loss

from fastep import EPGaussianProcessClassifier
from fastep.plot import probability_map

X, y = make_moons(n_samples=3000, noise=0.3, random_state=0)
X_train, y_train, X_test, y_test = X[:1000], y[:1000], X[1000:], y[1000:]

# %%
# Sparse fits for growing m, and the dense fit
# --------------------------------------------
# Every fit learns the kernel (MAP-II, the default); the inducing inputs stay where
# k-means++ put them (``optimize_inducing=False``, the default).  A small fit first loads
# the compiled code, so that no timing below includes it.


def fit_and_score(**params):
    clf = EPGaussianProcessClassifier(random_state=0, **params)
    start = time.perf_counter()
    clf.fit(X_train, y_train)
    elapsed = time.perf_counter() - start
    return clf, log_loss(y_test, clf.predict_proba(X_test)), elapsed


sizes = [8, 16, 32, 64, 128]
EPGaussianProcessClassifier(n_inducing=8).fit(X_train[:200], y_train[:200])   # warm-up
sparse = {m: fit_and_score(n_inducing=m) for m in sizes}
dense = fit_and_score()
print(f"{'model':<12}{'log loss':>10}{'fit time (s)':>14}  fitted kernel")
for m, (clf, loss, elapsed) in sparse.items():
    print(f"{'m = ' + str(m):<12}{loss:>10.4f}{elapsed:>14.2f}  {clf.kernel_}")
print(f"{'dense':<12}{dense[1]:>10.4f}{dense[2]:>14.2f}  {dense[0].kernel_}")

# %%
# Where the inducing points went, and what they cost
# ---------------------------------------------------
# Left: the predictive probability of the fit with m = 16, with its inducing inputs
# (``inducing_points_``) as crosses: k-means++ spreads them over the data, and 16 of
# them already give the dense fit's held-out log loss.  Right: held-out log loss (left
# axis) and fit time (right axis) against m; the dashed lines are the dense fit.
fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(11, 4.3))
clf16 = sparse[16][0]
probability_map(clf16, X_train, ax=ax0, resolution=100)
shown = np.random.default_rng(0).choice(len(X_train), 300, replace=False)
ax0.scatter(X_train[shown, 0], X_train[shown, 1], c=y_train[shown], cmap="RdBu_r",
            s=8, edgecolors="k", linewidths=0.3, label="training points (300 of 1000)")
Z = clf16.inducing_points_
ax0.scatter(Z[:, 0], Z[:, 1], marker="X", s=110, color="gold", edgecolors="k",
            label=f"{len(Z)} inducing points")
ax0.set_xlabel("$x_1$")
ax0.set_ylabel("$x_2$")
ax0.set_title("p(y = 1 | x), m = 16")
ax0.legend(loc="lower left", fontsize=8)

losses = [sparse[m][1] for m in sizes]
times = [sparse[m][2] for m in sizes]
l0, = ax1.plot(sizes, losses, "o-", color="C0", label="sparse log loss")
l1 = ax1.axhline(dense[1], color="C0", ls="--", label="dense log loss")
ax1.set_xscale("log", base=2)
ax1.set_xticks(sizes, [str(m) for m in sizes])
ax1.set_xlabel("inducing points m")
ax1.set_ylabel("held-out log loss", color="C0")
ax2 = ax1.twinx()
l2, = ax2.plot(sizes, times, "s-", color="C1", label="sparse fit time")
l3 = ax2.axhline(dense[2], color="C1", ls="--", label="dense fit time")
ax2.set_ylim(0, None)
ax2.set_ylabel("fit time (s)", color="C1")
ax1.set_title(f"Sparse EP against dense EP (n = {len(X_train)})")
ax1.legend(handles=[l0, l1, l2, l3], loc="center right")
fig.tight_layout()
plt.show()
