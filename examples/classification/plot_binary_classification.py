"""
Binary classification with EP
=============================

:class:`fastep.EPGaussianProcessClassifier` puts a Gaussian-process prior on a latent
function f(x) and squashes it through a probit link, p(y = 1 | x) = Phi(f(x)).
Expectation Propagation approximates the posterior of f by a Gaussian, and the kernel's
variance and lengthscale are fitted by maximising the EP evidence.  This example shows
the two views of a fitted model: the latent function with its uncertainty on a 1-D
toy problem, and the decision regions on a 2-D problem.
"""

import matplotlib.pyplot as plt
import numpy as np
from scipy.stats import norm
from sklearn.datasets import make_moons

from fastep import EPGaussianProcessClassifier
from fastep.kernels import RBF
from fastep.plot import latent_band, probability_map

# %%
# A 1-D toy problem
# -----------------
#
# The class is 1 where ``sin(2x)`` plus a little noise is positive.  Near the class
# boundaries the labels are mixed, and the classifier should be unsure there.

rng = np.random.default_rng(0)
X = rng.uniform(-3.0, 3.0, size=(80, 1))
y = (np.sin(2.0 * X[:, 0]) + 0.4 * rng.normal(size=80) > 0).astype(int)

clf = EPGaussianProcessClassifier(RBF(), random_state=0).fit(X, y)
print(f"fitted kernel: {clf.kernel_}")
print(f"log Z_EP at the fitted kernel: {clf.log_marginal_likelihood_value_:.2f}")

# %%
# The left panel shows the predictive probability p(y = 1 | x) with the training labels
# and, for comparison, the true p(y = 1 | x) of the simulation
# (``Phi(sin(2x) / 0.4)``).  The right panel shows the latent posterior: the mean of f
# and a band of two standard deviations (:func:`fastep.plot.latent_band`).  The band
# widens beyond the data, at ``|x| > 3``, where the prediction falls back towards 0.5.

x_grid = np.linspace(-4.0, 4.0, 300)[:, None]
fig, (ax_p, ax_f) = plt.subplots(1, 2, figsize=(11, 4))

ax_p.plot(x_grid[:, 0], clf.predict_proba(x_grid)[:, 1], label="EP predictive")
ax_p.plot(x_grid[:, 0], norm.cdf(np.sin(2.0 * x_grid[:, 0]) / 0.4), "k--", linewidth=1,
          label="true p(y = 1 | x)")
ax_p.scatter(X[:, 0], y, c=y, cmap="RdBu_r", edgecolors="k", s=18, zorder=3,
             label="training labels")
ax_p.set_xlabel("x")
ax_p.set_ylabel("p(y = 1 | x)")
ax_p.set_title("Predictive probability")
ax_p.legend(loc="lower left", fontsize="small")

latent_band(clf, x_grid, ax=ax_f, label="posterior mean of f")
ax_f.axhline(0.0, color="0.5", linewidth=0.8)
ax_f.set_title("Latent function with a 2-sd band")
ax_f.legend(loc="lower left", fontsize="small")
fig.tight_layout()

# %%
# Two dimensions: the two moons
# -----------------------------
#
# The same classifier on 200 points of scikit-learn's ``make_moons``, with one
# lengthscale per input.  The filled contours of :func:`fastep.plot.probability_map`
# are p(y = 1 | x); the black line is the 0.5 level, i.e. the decision boundary.
# Away from the data the colours fade towards white: the latent variance grows and the
# predictive probability moves back towards 0.5.

X2, y2 = make_moons(n_samples=200, noise=0.25, random_state=0)
clf2 = EPGaussianProcessClassifier(RBF(lengthscale=[1.0, 1.0]), random_state=0).fit(X2, y2)
print(f"moons: fitted kernel {clf2.kernel_}, training accuracy "
      f"{clf2.score(X2, y2):.3f}")

fig, ax = plt.subplots(figsize=(6.5, 5))
probability_map(clf2, X2, y2, ax=ax, margin=1.0)
ax.set_xlabel("$x_1$")
ax.set_ylabel("$x_2$")
ax.set_title("EP-GPC on two moons: p(y = 1 | x) and decision boundary")
fig.tight_layout()

plt.show()
