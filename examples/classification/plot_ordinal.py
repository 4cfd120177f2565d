"""
Ordinal labels with a GP and EP
===============================

Ordered labels such as ratings ("poor" < "fair" < "good" ...) carry more information
than unordered classes: a model should know that level 1 sits between levels 0 and 2.
:class:`fastep.OrdinalGPClassifier` places one latent Gaussian process ``f(x)`` under
the labels and cuts its real line into levels with learnt *cut points*
``b_0 < b_1 < ... < b_{K-2}``: ``p(y = k | f) = Phi(b_k - f) - Phi(b_{k-1} - f)``
(ordinal probit, unit noise).  EP approximates the posterior of ``f`` and ML-II fits the
kernel and the cut points together.

Here a 1-D latent function plus unit Gaussian noise is binned into five levels, so the
data follow the model exactly and the learnt cut points can be set against the true
thresholds.
"""

# %%
# Data: a latent function binned into five levels
# ------------------------------------------------
# The noise has unit variance, the same scale as the model's probit noise, so the
# latent function and the thresholds are identifiable, not only up to a scale.
import matplotlib.pyplot as plt
import numpy as np

from fastep import OrdinalGPClassifier
from fastep.plot import latent_band

rng = np.random.default_rng(0)
n = 200
X = np.sort(rng.uniform(-4.0, 4.0, n))[:, None]


def f_true(x):
    return 3.5 * np.sin(0.9 * x) + 0.4 * x


thresholds = np.array([-2.5, -0.8, 0.8, 2.5])
y = np.digitize(f_true(X[:, 0]) + rng.normal(size=n), thresholds)   # levels 0..4
print("labels per level:", np.bincount(y))

# %%
# Fit
# ---
# The cut points start from the label frequencies and move with the kernel's
# variance and length-scale under ML-II.
clf = OrdinalGPClassifier(random_state=0).fit(X, y)
print("fitted kernel:     ", clf.kernel_)
print("learnt cut points: ", np.round(clf.cut_points_, 2))
print("true thresholds:   ", thresholds)
print(f"log Z_EP = {clf.log_marginal_likelihood_value_:.2f}")

X_test = np.linspace(-4.0, 4.0, 400)[:, None]
y_test = np.digitize(f_true(X_test[:, 0]) + rng.normal(size=400), thresholds)
pred = clf.predict(X_test)
print(f"held-out accuracy {np.mean(pred == y_test):.3f}, "
      f"mean absolute error {np.mean(np.abs(pred - y_test)):.3f} levels")

# %%
# Latent function and cut points
# ------------------------------
# The latent posterior (mean and two standard deviations) follows the true function;
# the horizontal lines are the learnt cut points (solid) and the true thresholds
# (dotted).  A label is the band between two cut points that ``f`` plus unit noise
# falls into.
fig, ax = plt.subplots(figsize=(7, 4))
latent_band(clf, X_test, ax=ax, label="posterior mean of f")
ax.plot(X_test[:, 0], f_true(X_test[:, 0]), "k--", lw=1, label="true f")
for j, (b, t) in enumerate(zip(clf.cut_points_, thresholds)):
    ax.axhline(b, color="C3", lw=1, label="learnt cut points" if j == 0 else None)
    ax.axhline(t, color="C3", lw=1, ls=":", label="true thresholds" if j == 0 else None)
ax.set_title("Ordinal GP: latent function and cut points")
ax.legend(loc="upper left", fontsize=8, ncol=2)
fig.tight_layout()

# %%
# Level probabilities over x
# --------------------------
# ``predict_proba`` gives ``P(y = k | x)`` for every level; stacked, they fill the unit
# interval.  Each training label is drawn as a tick in the middle of its own level's
# band: a tick in a thin band is a label the model finds unlikely at that x, one that
# the noise carried across a cut point.
proba = clf.predict_proba(X_test)
cum = np.column_stack([np.zeros(len(X_test)), np.cumsum(proba, axis=1)])
colors = plt.cm.viridis(np.linspace(0.1, 0.9, clf.classes_.size))
fig, ax = plt.subplots(figsize=(7, 4))
for k, level in enumerate(clf.classes_):
    ax.fill_between(X_test[:, 0], cum[:, k], cum[:, k + 1], color=colors[k], alpha=0.8,
                    linewidth=0, label=f"level {level}")
mid = 0.5 * (cum[:, :-1] + cum[:, 1:])                   # the middle of each band
rows = np.searchsorted(X_test[:, 0], X[:, 0]).clip(0, len(X_test) - 1)
ax.scatter(X[:, 0], mid[rows, y], marker="|", color="k", s=30, label="training labels")
ax.set_xlim(X_test[0, 0], X_test[-1, 0])
ax.set_ylim(0, 1)
ax.set_xlabel("x")
ax.set_ylabel("cumulative P(y = level | x)")
ax.set_title("Predicted level probabilities (stacked)")
ax.legend(loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8)
fig.tight_layout()
plt.show()
