"""
Counts with exposure: a Poisson Gaussian process
================================================

Counts of events are often collected over unequal *exposures*: claims per policy held
for a different number of years, cases per region of a different population.  The
quantity of interest is the rate, and a row with exposure e has
``y ~ Poisson(e * rate(x))``.  :class:`fastep.EPGaussianProcessRegressor` with
``likelihood="poisson"`` puts a Gaussian process on the log rate, ``rate(x) =
exp(f(x))``, and takes the exposure of each row as ``fit(X, y, exposure=e)``.  This
example recovers a smooth rate from counts of varying exposure, with its uncertainty,
and compares it with two scikit-learn Poisson models.
"""

import matplotlib.pyplot as plt
import numpy as np
from sklearn.ensemble import HistGradientBoostingRegressor
from sklearn.linear_model import PoissonRegressor
from sklearn.metrics import mean_poisson_deviance
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import SplineTransformer
from threadpoolctl import threadpool_limits

from fastep import EPGaussianProcessRegressor
from fastep.kernels import RBF

# %%
# Data
# ----
#
# 300 rows with a covariate x in [0, 10] and an exposure between 0.2 and 3; the counts
# are Poisson with mean ``exposure * rate(x)``.  A further 2000 rows, drawn the same
# way, are held out for scoring.


def true_rate(x):
    return 3.0 * np.exp(0.8 * np.sin(x / 1.5) + 0.3 * np.cos(1.3 * x))


rng = np.random.default_rng(0)


def simulate(n):
    x = rng.uniform(0.0, 10.0, size=(n, 1))
    exposure = rng.uniform(0.2, 3.0, size=n)
    return x, exposure, rng.poisson(exposure * true_rate(x[:, 0]))


X, exposure, y = simulate(300)
X_test, exposure_test, y_test = simulate(2000)

# %%
# The Poisson GP
# --------------
#
# The exposure enters the likelihood as an offset of the log rate, ``log e + f(x)``; it
# is a keyword of ``fit`` because it belongs to each row, like y.  The kernel is fitted
# by maximising the EP evidence.

gp = EPGaussianProcessRegressor(RBF(), likelihood="poisson").fit(X, y, exposure=exposure)
print(f"Poisson GP: kernel {gp.kernel_}, log Z_EP {gp.log_marginal_likelihood_value_:.1f}")

# %%
# A model fitted with an exposure needs one again to predict: ``predict(X, exposure=e)``
# is the expected count of a row with exposure e, so with ``exposure=1`` it is the
# expected rate, E[exp(f(x))].  The posterior of the rate is log-normal, and its 95%
# interval is ``exp(mean of f +- 2 sd of f)`` from ``predict_latent``.

x_grid = np.linspace(0.0, 10.0, 300)[:, None]
unit = np.ones(len(x_grid))
rate_mean = gp.predict(x_grid, exposure=unit)
f_mean, f_std = gp.predict_latent(x_grid, return_std=True)
rate_low, rate_high = np.exp(f_mean - 2.0 * f_std), np.exp(f_mean + 2.0 * f_std)

# %%
# Two scikit-learn baselines
# --------------------------
#
# scikit-learn's Poisson models take the exposure the usual GLM way: the target is the
# observed rate ``y / e`` and each row is weighted by its exposure.  We fit a Poisson
# GLM on a cubic spline basis of x (a smooth curve, but its flexibility is set by hand
# through the number of knots), and gradient-boosted trees with the Poisson loss.  On
# 300 rows one thread is enough for both, and a single thread avoids the cost of
# synchronising BLAS and OpenMP threads, which is large on a busy machine
# (:func:`threadpoolctl.threadpool_limits`, installed with scikit-learn).

glm = make_pipeline(SplineTransformer(n_knots=12, degree=3),
                    PoissonRegressor(alpha=1e-4, max_iter=1000))
trees = HistGradientBoostingRegressor(loss="poisson", max_iter=100, random_state=0)
with threadpool_limits(limits=1):
    glm.fit(X, y / exposure, poissonregressor__sample_weight=exposure)
    trees.fit(X, y / exposure, sample_weight=exposure)

# %%
# The figure shows the observed rates ``y / e`` (the larger the point, the larger its
# exposure, and the more it says about the rate), the true rate, the GP's expected rate
# with its 95% band, and the two baselines.

fig, ax = plt.subplots(figsize=(10, 5))
ax.scatter(X[:, 0], y / exposure, s=8 * exposure, color="0.6", alpha=0.7,
           label="observed y / exposure (size: exposure)")
ax.fill_between(x_grid[:, 0], rate_low, rate_high, color="C0", alpha=0.25, linewidth=0,
                label="Poisson GP, 95% interval")
ax.plot(x_grid[:, 0], rate_mean, color="C0", label="Poisson GP, E[rate]")
ax.plot(x_grid[:, 0], glm.predict(x_grid), color="C1", label="spline Poisson GLM")
ax.plot(x_grid[:, 0], trees.predict(x_grid), color="C2",
        label="gradient boosting, Poisson loss")
ax.plot(x_grid[:, 0], true_rate(x_grid[:, 0]), "k--", linewidth=1.2, label="true rate")
ax.set_ylim(0.0, 13.0)
ax.set_xlabel("x")
ax.set_ylabel("rate (events per unit exposure)")
ax.set_title("Poisson regression with exposure")
ax.legend(loc="upper right", fontsize="small", ncol=2)
fig.tight_layout()

# %%
# Held-out scores
# ---------------
#
# The mean Poisson deviance of the predicted rates on the held-out rows (weighted by
# exposure, which makes it the deviance of the counts up to a constant), and the error
# of each rate against the true one.  The GP is the closest to the truth, without any
# tuning of its smoothness by hand.

print(f"\n{'model':34s} {'test deviance':>13s} {'RMSE vs true rate':>18s}")
models = {
    "Poisson GP (fastep)": gp.predict(X_test, exposure=np.ones(len(X_test))),
    "spline Poisson GLM": glm.predict(X_test),
    "gradient boosting, Poisson loss": trees.predict(X_test),
}
for name, rate in models.items():
    deviance = mean_poisson_deviance(y_test / exposure_test, rate,
                                     sample_weight=exposure_test)
    rmse = np.sqrt(np.mean((rate - true_rate(X_test[:, 0])) ** 2))
    print(f"{name:34s} {deviance:13.4f} {rmse:18.3f}")

# %%
# Over-dispersion
# ---------------
#
# Real counts often vary more than a Poisson allows.  ``likelihood="negative_binomial"``
# has ``Var[y] = mu + mu^2 / r`` with a dispersion r fitted with the kernel (large r:
# nearly Poisson).  On these Poisson data r comes out large, so that the extra
# variance ``mu^2 / r`` is under a third of the Poisson variance ``mu`` even at the
# largest expected count, and much less at typical ones; the kernel is almost the
# Poisson fit's.  (r stays finite: with 300 rows the data cannot rule out a little
# over-dispersion.)

nb = EPGaussianProcessRegressor(RBF(), likelihood="negative_binomial").fit(
    X, y, exposure=exposure)
r = nb.likelihood_.dispersion
mu_max = nb.predict(X, exposure=exposure).max()
print(f"\nnegative binomial GP: dispersion r = {r:.1f}, kernel {nb.kernel_}")
print(f"largest expected count {mu_max:.1f}: extra variance mu^2 / r is "
      f"{mu_max / r:.0%} of mu")

plt.show()
