"""
A count series in O(n): state-space EP
======================================

Yearly sunspot numbers (1700-2008, statsmodels' bundled ``sunspots`` table) are counts
that rise and fall over a cycle of about eleven years, more spread out than a Poisson's.
With one input, time, and a Matern kernel, the GP prior is a linear state-space model and
``EPGaussianProcessRegressor(inference="markov")`` runs EP through a Kalman filter and
smoother: its cost grows like n, not n^3, with the same fixed point as dense EP.

A quarter of the years are held out at random and predicted from the others (filling
gaps in a record); the baseline is what one would do by hand, a straight line between
the neighbouring observed years.
"""

# %%
# The data
# --------
import time

import matplotlib.pyplot as plt
import numpy as np
from statsmodels.datasets import sunspots

from fastep import EPGaussianProcessRegressor
from fastep.kernels import Matern32

data = sunspots.load_pandas().data
years = data["YEAR"].to_numpy(dtype=float)
counts = np.round(data["SUNACTIVITY"].to_numpy()).astype(float)
rng = np.random.default_rng(0)
held_out = rng.uniform(size=years.size) < 0.25
X_train, y_train = years[~held_out, None], counts[~held_out]
X_test, y_test = years[held_out, None], counts[held_out]
print(f"{years.size} years, {held_out.sum()} held out")

# %%
# State-space EP against dense EP
# -------------------------------
# Both fit the same model (negative-binomial counts, a Matern-3/2 kernel of time, ML-II
# of the kernel and the dispersion) and reach the same evidence and kernel.  At 242 years
# both take a fraction of a second; the state-space fit's cost grows linearly with the
# length of the series, dense EP's with its cube (on 10,000 daily counts the state-space
# fit takes about a second, sparse EP with 256 inducing points eight times as long:
# ``python scripts/markov_scaling.py --routes 10000``).
fits = {}
for name, inference in (("state-space", "markov"), ("dense", "ep")):
    start = time.perf_counter()
    model = EPGaussianProcessRegressor(Matern32(1.0, 5.0), likelihood="negative_binomial",
                                       inference=inference, n_inducing=None,
                                       random_state=0).fit(X_train, y_train)
    fits[name] = (model, time.perf_counter() - start)
    print(f"{name:12s} fit {fits[name][1]:5.2f} s  log evidence "
          f"{model.log_marginal_likelihood_value_:9.2f}  {model.kernel_}")
markov = fits["state-space"][0]

# %%
# Held-out years
# --------------
# The posterior median count exp(f) and the line between neighbouring observed years.
median = markov.predict_median(X_test)
line = np.interp(X_test[:, 0], X_train[:, 0], y_train)
for name, guess in (("state-space EP, median", median), ("straight line", line)):
    rmse = np.sqrt(np.mean((guess - y_test) ** 2))
    print(f"{name:24s} RMSE {rmse:6.2f}")
mean, std = markov.predict_latent(X_test, return_std=True)
lpd = markov.likelihood_.log_predictive_density(y_test, mean, std ** 2).mean()
print(f"held-out log predictive density per year: {lpd:.3f}")

# %%
# The fit over time
# -----------------
grid = np.linspace(years.min(), years.max(), 2000)[:, None]
f_mean, f_std = markov.predict_latent(grid, return_std=True)
fig, ax = plt.subplots(figsize=(9, 3.5))
ax.fill_between(grid[:, 0], np.exp(f_mean - 2 * f_std), np.exp(f_mean + 2 * f_std),
                color="C0", alpha=0.25, label="exp(f), 95% band")
ax.plot(grid[:, 0], np.exp(f_mean), color="C0", lw=1, label="exp(f), posterior median")
ax.plot(X_train[:, 0], y_train, ".", color="k", ms=3, label="observed")
ax.plot(X_test[:, 0], y_test, "x", color="C3", ms=4, label="held out")
ax.set_xlabel("year")
ax.set_ylabel("sunspot number")
ax.legend(loc="upper left", fontsize=8, ncol=2)
fig.tight_layout()
plt.show()
