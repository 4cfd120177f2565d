"""
A seasonal forecast in O(n): Mauna Loa CO2
==========================================

Monthly means of the atmospheric CO2 concentration at Mauna Loa (1958-2001,
statsmodels' bundled ``co2`` table, weekly readings averaged by month) rise year after
year and swing with the seasons.  A GP of time with a kernel that has a state-space form
models both: a smooth trend (``Matern32``), a yearly cycle (``Periodic`` with its period
fixed at one year, turned into a state-space model by its cosine series) and short-term
wiggles (``Matern12``).  ``EPGaussianProcessRegressor(inference="markov")`` runs it
through a Kalman filter and smoother, O(n) in the length of the record.

The last four years are held out and forecast from the years before.  The baseline is
what a forecaster reaches for first: the seasonal naive forecast with drift (each month
as in the last observed year, plus the last year's rise per year ahead).
"""

# %%
# The data
# --------
import time

import matplotlib.pyplot as plt
import numpy as np
from statsmodels.datasets import co2

from fastep import EPGaussianProcessRegressor
from fastep.kernels import Matern12, Matern32, Periodic
from fastep.plot import latent_band

monthly = co2.load_pandas().data["co2"].resample("MS").mean().dropna()
years = (monthly.index.year + (monthly.index.month - 1) / 12.0).to_numpy(dtype=float)
ppm = monthly.to_numpy()
held_out = years >= years[-1] - 4.0 + 1e-9
X_train, y_train = years[~held_out, None], ppm[~held_out]
X_test, y_test = years[held_out, None], ppm[held_out]
print(f"{years.size} months, the last {held_out.sum()} held out")

# %%
# The fit
# -------
# ML-II learns every variance and lengthscale and the noise (the targets are
# standardised first, ``normalize_y="auto"``); the period stays one year.
kernel = (Matern32(100.0, 20.0) + Periodic(5.0, 1.0, 1.0, period_bounds="fixed")
          + Matern12(0.1, 0.5))
start = time.perf_counter()
model = EPGaussianProcessRegressor(kernel, likelihood="gaussian",
                                   inference="markov").fit(X_train, y_train)
print(f"fit in {time.perf_counter() - start:.1f} s: {model.kernel_}")

# %%
# The forecast against the seasonal naive one
# -------------------------------------------
mean, std = model.predict(X_test, return_std=True)
last, rise = y_train[-12:], y_train[-12:].mean() - y_train[-24:-12].mean()
naive = np.concatenate([last + rise * (k + 1) for k in range(4)])[:y_test.size]
for name, guess in (("state-space GP", mean), ("seasonal naive with drift", naive)):
    print(f"{name:26s} RMSE {np.sqrt(np.mean((guess - y_test) ** 2)):.2f} ppm")
inside = np.mean(np.abs(y_test - mean) <= 1.96 * std)
print(f"held-out months inside the GP's 95% predictive interval: {inside:.0%}")

# %%
# The record and the forecast
# ---------------------------
# The band is the latent function's (f, the concentration without the measurement
# noise), two posterior standard deviations wide; it widens as the forecast runs on.
fig, ax = plt.subplots(figsize=(9, 3.5))
grid = np.linspace(1990.0, years[-1] + 0.5, 800)
latent_band(model, grid, ax=ax, label="GP mean", band_label="GP, ±2 sd")
ax.plot(X_train[:, 0], y_train, ".", color="k", ms=3, label="observed")
ax.plot(X_test[:, 0], y_test, "x", color="C3", ms=4, label="held out")
ax.plot(X_test[:, 0], naive, color="C2", lw=1, label="seasonal naive with drift")
ax.set_xlim(1990.0, years[-1] + 0.5)
ax.set_ylim(350.0, 375.0)
ax.set_xlabel("year")
ax.set_ylabel("CO2 (ppm)")
ax.legend(loc="upper left", fontsize=8)
plt.tight_layout()
plt.show()
