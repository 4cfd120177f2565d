"""Import time and first-fit time in a fresh process (warm Numba cache).

    python scripts/first_fit.py          # run twice: the first run may fill the cache

Prints the seconds of ``import fastep`` and of the first
``EPGaussianProcessClassifier(optimizer=None).fit`` and ``fastep.ep`` at n = 200,
each measured in a new interpreter, median of 5; then, for each estimator, its first fit
after ``fastep.precompile()`` against its second, in a fresh process each.
"""
import argparse
import statistics
import subprocess
import sys

CODE = """
import time
t0 = time.perf_counter()
import fastep
t1 = time.perf_counter()
import numpy as np
from fastep.kernels import RBF
rng = np.random.default_rng(0)
X = rng.normal(size=(200, 3))
y = np.where(X[:, 0] + 0.3 * rng.normal(size=200) > 0, 1, 0)
t2 = time.perf_counter()
fastep.EPGaussianProcessClassifier(RBF(), optimizer=None).fit(X, y)
t3 = time.perf_counter()
print(t1 - t0, t3 - t2)
"""


AFTER_PRECOMPILE = """
import sys, time, warnings
import numpy as np
warnings.simplefilter("ignore")
import fastep
fastep.precompile()
rng = np.random.default_rng(0)
X = rng.normal(size=(100, 2))
t = np.exp(X[:, 0] + 0.3 * rng.normal(size=100)); event = (rng.random(100) < 0.7) * 1.0
three = np.digitize(X[:, 0], [-0.5, 0.5])
fits = {
    "classifier": lambda: fastep.EPGaussianProcessClassifier().fit(X, X[:, 0] > 0),
    "poisson": lambda: fastep.EPGaussianProcessRegressor(likelihood="poisson").fit(
        X, np.round(t)),
    "binomial": lambda: fastep.EPGaussianProcessRegressor(likelihood="binomial").fit(
        X, (X[:, 0] > 0) * 1.0),
    "weibull": lambda: fastep.EPGaussianProcessRegressor(likelihood="weibull").fit(
        X, t, event=event),
    "ordinal": lambda: fastep.OrdinalGPClassifier().fit(X, three),
    "censored": lambda: fastep.CensoredGPRegressor().fit(X, np.maximum(X[:, 0], 0.0),
                                                         lower=0.0),
    "nested": lambda: fastep.NestedEPClassifier().fit(X, three),
    "annotators": lambda: fastep.MultiAnnotatorGPClassifier().fit(
        X, np.column_stack([X[:, 0] > 0, X[:, 0] > 0.2]).astype(float)),
    "gwi": lambda: fastep.GWIClassifier().fit(X, three),
}
fit = fits[sys.argv[1]]
a = time.perf_counter(); fit(); b = time.perf_counter(); fit(); c = time.perf_counter()
print(b - a, c - b)
"""


def after_precompile():
    """Each estimator's first fit after ``fastep.precompile()`` against its second, in a
    fresh process each (the target: at most 2x)."""
    worst = 0.0
    for name in ("classifier", "poisson", "binomial", "weibull", "ordinal", "censored",
                 "nested", "annotators", "gwi"):
        first, second = map(float, subprocess.run(
            [sys.executable, "-c", AFTER_PRECOMPILE, name], capture_output=True, text=True,
            check=True).stdout.split())
        worst = max(worst, first / second)
        print(f"  {name:<11} first fit after precompile {first:6.2f} s, second {second:6.2f} s,"
              f" ratio {first / second:4.1f}")
    print(f"largest ratio {worst:.1f} (target <= 2)")


def main(argv=None):
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args(argv)
    runs = [tuple(map(float, subprocess.run([sys.executable, "-c", CODE], capture_output=True,
                                            text=True, check=True).stdout.split()))
            for _ in range(5)]
    imp = statistics.median(r[0] for r in runs)
    fit = statistics.median(r[1] for r in runs)
    print(f"import fastep: {imp:.2f} s (target <= 0.6); first classifier fit at n = 200: "
          f"{fit:.2f} s (target <= 2), median of 5 fresh processes")
    after_precompile()


if __name__ == "__main__":
    main()
