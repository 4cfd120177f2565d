"""Cost of GPC-MA against a plain probit EP fit on the same inputs (fixed kernel).

    python scripts/annotators_cost.py --n 2000 --repeats 3

Prints the median fit time of MultiAnnotatorGPClassifier (R = 8 simulated annotators,
EM for the reliabilities included) and of EPGaussianProcessClassifier(optimizer=None)
on the true labels, in the same process, and their ratio.
"""
import argparse
import time
import warnings

import numpy as np

import fastep
from fastep.datasets import simulate_annotators
from fastep.kernels import RBF

SENS = [0.9, 0.9, 0.8, 0.4, 0.3, 0.4, 0.6, 0.5]
SPEC = [0.8, 0.9, 0.9, 0.4, 0.5, 0.5, 0.5, 0.4]


def median_time(fit, repeats):
    ts = []
    for _ in range(repeats):
        t = time.perf_counter()
        model = fit()
        ts.append(time.perf_counter() - t)
    return float(np.median(ts)), model


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    fastep.precompile()
    rng = np.random.default_rng(0)
    X = rng.normal(size=(args.n, 3))
    z = (np.sin(2 * X[:, 0]) + X[:, 1] > 0).astype(int)
    Y = simulate_annotators(z, SENS, SPEC, random_state=0)
    kernel = RBF(1.0, 1.0)
    warnings.simplefilter("ignore")
    t_ma, ma = median_time(lambda: fastep.MultiAnnotatorGPClassifier(
        kernel, optimizer=None).fit(X, Y), args.repeats)
    t_pr, pr = median_time(lambda: fastep.EPGaussianProcessClassifier(
        kernel, optimizer=None).fit(X, z), args.repeats)
    print(f"n = {args.n}, R = 8: GPC-MA fit {t_ma:.2f} s ({ma.n_iter_} sweeps), probit EP fit "
          f"{t_pr:.2f} s ({pr.n_iter_} sweeps), ratio {t_ma / t_pr:.2f} (target <= 3)")


if __name__ == "__main__":
    main()
