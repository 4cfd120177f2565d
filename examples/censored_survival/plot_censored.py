"""
Censored regression below a detection limit
===========================================

An instrument that cannot measure below a detection limit reports the limit itself
for every smaller value: the data are *censored*.  Treating those reports as exact
values pulls a regression up towards the limit, and dropping them throws away the
knowledge that the true value was small, which also biases the fit.
:class:`fastep.CensoredGPRegressor` uses the Tobit likelihood instead: a censored
observation contributes the probability P(y* <= limit), not a density.  This example
compares it with both naive fits on data censored at a limit.
"""

import matplotlib.pyplot as plt
import numpy as np

from fastep import CensoredGPRegressor, EPGaussianProcessRegressor
from fastep.kernels import RBF
from fastep.plot import latent_band

# %%
# Data
# ----
#
# A smooth function plus Gaussian noise of standard deviation 0.15 is observed at 120
# points; every value below the detection limit 0.5 is reported as 0.5.  About 40% of
# the points are censored, most of them in the troughs of the function.


def true_f(x):
    return np.sin(x) + 0.1 * x


rng = np.random.default_rng(0)
n, limit = 120, 0.5
X = np.sort(rng.uniform(0.0, 10.0, size=n))[:, None]
y_star = true_f(X[:, 0]) + 0.15 * rng.normal(size=n)     # what a perfect instrument sees
y = np.maximum(y_star, limit)                             # what is reported
censored = y_star <= limit
print(f"{censored.sum()} of {n} observations censored at {limit}")

# %%
# Three fits
# ----------
#
# * the Tobit model, told the limit (``lower=limit``);
# * a GP regressor with Gaussian noise fitted on the reported values, as if the
#   reports at the limit were measurements;
# * the same regressor fitted on the uncensored rows only.
#
# All three fit an RBF kernel and the noise variance by maximising the marginal
# likelihood.  The Gaussian-noise fits use :class:`fastep.EPGaussianProcessRegressor`
# with ``likelihood="gaussian"``, for which EP is exact.

tobit = CensoredGPRegressor(RBF(), lower=limit, noise_variance=0.1).fit(X, y)
clipped = EPGaussianProcessRegressor(RBF(), likelihood="gaussian").fit(X, y)
dropped = EPGaussianProcessRegressor(RBF(), likelihood="gaussian").fit(X[~censored],
                                                                     y[~censored])
print(f"Tobit: kernel {tobit.kernel_}, noise sd {np.sqrt(tobit.noise_variance_):.3f} "
      f"(true 0.15)")

# %%
# The Tobit model's latent mean follows the function below the limit, where it saw no
# value, only the fact that the value was small; its band (two posterior standard
# deviations of f, :func:`fastep.plot.latent_band`) widens there.  The fit on the
# reported values flattens every trough at about the limit.  The fit without the
# censored rows sees only the points that noise lifted above the limit near each
# trough, and interpolates over the gaps between them, too high.

x_grid = np.linspace(0.0, 10.0, 300)[:, None]
fig, ax = plt.subplots(figsize=(10, 5))
latent_band(tobit, x_grid, ax=ax, label="Tobit (CensoredGPRegressor)", color="C0")
ax.plot(x_grid[:, 0], clipped.predict_latent(x_grid), color="C1",
        label="Gaussian, censored values as measured")
ax.plot(x_grid[:, 0], dropped.predict_latent(x_grid), color="C2",
        label="Gaussian, censored rows dropped")
ax.plot(x_grid[:, 0], true_f(x_grid[:, 0]), "k--", linewidth=1.2, label="true f")
ax.scatter(X[~censored, 0], y[~censored], s=14, color="k", zorder=3, label="observed")
ax.scatter(X[censored, 0], y[censored], s=20, marker="v", facecolors="none",
           edgecolors="C3", zorder=3, label="censored (reported at the limit)")
ax.axhline(limit, color="C3", linewidth=0.8, linestyle=":")
ax.set_xlabel("x")
ax.set_ylabel("y, f(x)")
ax.set_title(f"Censored regression, detection limit {limit}")
ax.legend(loc="upper left", fontsize="small", ncol=2)
fig.tight_layout()

# %%
# Error of each mean against the true function over the whole range, and over the
# part where the function lies below the limit:

below = true_f(x_grid[:, 0]) < limit
print(f"\n{'fit':36s} {'RMSE, all':>10s} {'RMSE, f < limit':>16s}")
for name, model in [("Tobit", tobit), ("Gaussian, censored values as measured", clipped),
                    ("Gaussian, censored rows dropped", dropped)]:
    err = model.predict_latent(x_grid) - true_f(x_grid[:, 0])
    print(f"{name:36s} {np.sqrt(np.mean(err ** 2)):10.3f} "
          f"{np.sqrt(np.mean(err[below] ** 2)):16.3f}")

# %%
# Beyond the latent function, the Tobit model predicts the reported value itself:
# ``predict`` gives the mean of the censored output (never below the limit) and
# ``predict_censored_proba`` the probability that a new measurement will be reported
# at the limit.

p_lower, _ = tobit.predict_censored_proba(x_grid)
fig, ax = plt.subplots(figsize=(10, 3))
ax.plot(x_grid[:, 0], p_lower, color="C0")
ax.set_xlabel("x")
ax.set_ylabel("P(y = limit)")
ax.set_ylim(-0.02, 1.02)
ax.set_title("Probability that a new measurement is censored")
fig.tight_layout()

plt.show()
