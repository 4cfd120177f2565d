"""
Robust regression with a Student-t likelihood
=============================================

A Gaussian-noise model must explain every point, so a few gross outliers pull the fit
towards them and inflate the noise estimate, which widens the uncertainty everywhere.
A Student-t noise model has heavy tails: it can call a point an outlier and discount
it.  The price is a posterior that is neither Gaussian nor log-concave, which is
where EP comes in: :class:`fastep.EPGaussianProcessRegressor` with
``likelihood="student_t"`` runs robust EP (sequential site updates, with steps that
keep the posterior proper) and fits the degrees of freedom and the scale of the noise
with the kernel.  This example compares it with the Gaussian likelihood on data with
10% gross outliers.
"""

import matplotlib.pyplot as plt
import numpy as np

from fastep import EPGaussianProcessRegressor
from fastep.kernels import RBF
from fastep.plot import latent_band

# %%
# Data
# ----
#
# 100 points of a smooth function with Gaussian noise of standard deviation 0.2; ten of
# them, chosen at random, are moved up or down by 1 to 2.5, i.e. by 5 to 12 noise
# standard deviations.


def true_f(x):
    return np.sin(3.0 * x) + 0.5 * x


rng = np.random.default_rng(0)
n = 100
X = np.sort(rng.uniform(-2.0, 2.0, size=n))[:, None]
y = true_f(X[:, 0]) + 0.2 * rng.normal(size=n)
outliers = rng.choice(n, size=n // 10, replace=False)
y[outliers] += rng.choice([-1.0, 1.0], size=outliers.size) * rng.uniform(1.0, 2.5,
                                                                            outliers.size)

# %%
# Two fits
# --------
#
# Both models fit an RBF kernel and their noise parameters by maximising the EP
# evidence (for the Gaussian likelihood EP is exact).  For these two likelihoods the
# regressor standardises y before fitting (``normalize_y="auto"``), and its predictions
# are in y's units.  For the Student-t, ML-II starts from a broad and a narrow noise
# scale and keeps the better of the two fits.

student = EPGaussianProcessRegressor(RBF(), likelihood="student_t").fit(X, y)
gaussian = EPGaussianProcessRegressor(RBF(), likelihood="gaussian").fit(X, y)

# %%
# The learnt likelihoods.  ``likelihood_`` holds the parameters for the standardised y,
# so we multiply the scales by the standard deviation of y to read them in y's units.
# The Student-t finds very heavy tails (few degrees of freedom, close to the Cauchy's
# 1) and a scale of the order of the inliers' noise, while the Gaussian noise absorbs
# the outliers and comes out three times larger than the inliers' 0.2.

y_sd = np.std(y)
t_lik, g_lik = student.likelihood_, gaussian.likelihood_
print(f"Student-t: df = {t_lik.df:.2f}, scale = {t_lik.scale * y_sd:.3f} "
      f"(kernel {student.kernel_})")
print(f"Gaussian:  noise sd = {np.sqrt(g_lik.noise_variance) * y_sd:.3f} "
      f"(kernel {gaussian.kernel_})")
print("true inlier noise sd = 0.200")

# %%
# Both fits' latent means with bands of two posterior standard deviations
# (:func:`fastep.plot.latent_band`).  The Gaussian fit bends towards the outliers and
# its band is wider; the Student-t fit follows the true function through them.

x_grid = np.linspace(-2.0, 2.0, 300)[:, None]
fig, ax = plt.subplots(figsize=(10, 5))
latent_band(gaussian, x_grid, ax=ax, label="Gaussian likelihood", color="C1")
latent_band(student, x_grid, ax=ax, label="Student-t likelihood", color="C0")
ax.plot(x_grid[:, 0], true_f(x_grid[:, 0]), "k--", linewidth=1.2, label="true f")
inlier = np.ones(n, dtype=bool)
inlier[outliers] = False
ax.scatter(X[inlier, 0], y[inlier], s=12, color="k", zorder=3, label="data")
ax.scatter(X[outliers, 0], y[outliers], s=40, marker="x", color="C3", zorder=3,
           label="outliers")
ax.set_ylabel("y, f(x)")
ax.set_title("GP regression with 10% outliers: Student-t against Gaussian noise")
ax.legend(loc="upper left", fontsize="small", ncol=2)
fig.tight_layout()

# %%
# The error of each latent mean against the true function:

for name, model in (("Student-t", student), ("Gaussian", gaussian)):
    err = model.predict_latent(x_grid) - true_f(x_grid[:, 0])
    print(f"{name:9s} RMSE of the latent mean: {np.sqrt(np.mean(err ** 2)):.3f}")

plt.show()
