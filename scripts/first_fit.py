"""Import time and first-fit time in a fresh process (warm Numba cache).

    python scripts/first_fit.py          # run twice: the first run may fill the cache

Prints the seconds of ``import fastep`` and of the first
``EPGaussianProcessClassifier(optimizer=None).fit`` and ``fastep.ep`` at n = 200,
each measured in a new interpreter, median of 5.
"""
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


def main():
    runs = [tuple(map(float, subprocess.run([sys.executable, "-c", CODE], capture_output=True,
                                            text=True, check=True).stdout.split()))
            for _ in range(5)]
    imp = statistics.median(r[0] for r in runs)
    fit = statistics.median(r[1] for r in runs)
    print(f"import fastep: {imp:.2f} s (target <= 0.6); first classifier fit at n = 200: "
          f"{fit:.2f} s (target <= 2), median of 5 fresh processes")


if __name__ == "__main__":
    main()
