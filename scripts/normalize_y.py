"""Should EPGaussianProcessRegressor standardise y by default?  Held-out RMSE on real
tables whose targets sit far from mean 0 / scale 1.

Tables (70/30 split, ``random_state=0``, X standardised on the training rows):
scikit-learn's ``diabetes`` (442 rows, target mean 152, sd 77); statsmodels' ``engel``
(235 rows: food expenditure from income), ``statecrime`` (51 states: murder rate from
urbanisation, poverty, high-school graduation, single parents) and ``ccard`` (72 rows:
average credit-card expenditure from age, income, income squared, home ownership).

Models: ``EPGaussianProcessRegressor()`` (``normalize_y="auto"``: on for its default
Student-t likelihood), the same with ``normalize_y=False`` (fastep 0.2), scikit-learn's
``LinearRegression`` and ``GaussianProcessRegressor(C * RBF + White, normalize_y=True)``.
Prints RMSE, the ratio to the linear model's, and fit seconds.

    python scripts/normalize_y.py
"""
import time
import warnings

import numpy as np
import statsmodels.api as sm
from sklearn.datasets import load_diabetes
from sklearn.gaussian_process import GaussianProcessRegressor
from sklearn.gaussian_process.kernels import RBF, WhiteKernel
from sklearn.gaussian_process.kernels import ConstantKernel as C
from sklearn.linear_model import LinearRegression
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

import fastep


def tables():
    yield "diabetes", *load_diabetes(return_X_y=True)
    engel = sm.datasets.engel.load_pandas().data
    yield "engel", engel[["income"]].to_numpy(), engel["foodexp"].to_numpy()
    crime = sm.datasets.statecrime.load_pandas().data
    yield "statecrime", crime[["urban", "poverty", "hs_grad", "single"]].to_numpy(), \
        crime["murder"].to_numpy()
    card = sm.datasets.ccard.load_pandas().data
    yield "ccard", card[["AGE", "INCOME", "INCOMESQ", "OWNRENT"]].to_numpy(), \
        card["AVGEXP"].to_numpy()


def main():
    models = {
        "fastep default (normalize_y='auto')": lambda: fastep.EPGaussianProcessRegressor(),
        "fastep normalize_y=False (0.2)":
            lambda: fastep.EPGaussianProcessRegressor(normalize_y=False),
        "LinearRegression": LinearRegression,
        "sklearn GPR normalize_y=True": lambda: GaussianProcessRegressor(
            C() * RBF() + WhiteKernel(), normalize_y=True, random_state=0),
    }
    for name, X, y in tables():
        Xtr, Xte, ytr, yte = train_test_split(X.astype(float), y.astype(float),
                                              test_size=0.3, random_state=0)
        scaler = StandardScaler().fit(Xtr)
        Xtr, Xte = scaler.transform(Xtr), scaler.transform(Xte)
        print(f"\n{name}: {len(ytr)} train / {len(yte)} test rows, {X.shape[1]} features, "
              f"y mean {ytr.mean():.3g}, sd {ytr.std():.3g}")
        rows = []
        for label, make in models.items():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                t = time.perf_counter()
                model = make().fit(Xtr, ytr)
                seconds = time.perf_counter() - t
            rows.append((label, float(np.sqrt(np.mean((model.predict(Xte) - yte) ** 2))),
                         seconds))
        linear = dict((r[0], r[1]) for r in rows)["LinearRegression"]
        for label, rmse, seconds in rows:
            print(f"  {label:<38} RMSE {rmse:10.4g}   RMSE / linear {rmse / linear:6.3f}"
                  f"   fit {seconds:6.2f} s", flush=True)

if __name__ == "__main__":
    main()
