"""Cost of GPC-MA against a plain probit EP fit on the same inputs (fixed kernel), for
three simulated crowds of R = 8 annotators.

    python scripts/annotators_cost.py --n 2000 --repeats 3

For each crowd it prints the median fit time of MultiAnnotatorGPClassifier (EM for the
reliabilities included) and of EPGaussianProcessClassifier(optimizer=None) on the true
labels, in the same process, their sweeps and the ratio (issue 18's target: at most 2).
The crowds: "mixed" (sensitivities 0.3-0.9, some below chance), "experts" (all
reliable) and "spammers" (half the annotators at or below chance).

    python scripts/annotators_cost.py --n 1000 --variances 10 100 1000

also fits every crowd with larger kernel variances (where ML-II goes on such data), once
with method="parallel" and once with the default method="auto" (parallel sweeps that go
on sequentially once they stall), and prints sweeps, seconds and the time ratio.
"""
import argparse
import time
import warnings

import numpy as np

import fastep
from fastep.datasets import simulate_annotators
from fastep.kernels import RBF

CROWDS = {
    "mixed": ([0.9, 0.9, 0.8, 0.4, 0.3, 0.4, 0.6, 0.5],
              [0.8, 0.9, 0.9, 0.4, 0.5, 0.5, 0.5, 0.4]),
    "experts": ([0.95, 0.9, 0.9, 0.85, 0.85, 0.8, 0.8, 0.75],
                [0.9, 0.95, 0.85, 0.9, 0.8, 0.85, 0.75, 0.8]),
    "spammers": ([0.9, 0.85, 0.8, 0.75, 0.5, 0.5, 0.3, 0.2],
                 [0.85, 0.9, 0.75, 0.8, 0.5, 0.4, 0.3, 0.25]),
}


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
    ap.add_argument("--variances", type=float, nargs="*", default=[],
                    help="also compare method='parallel' and 'auto' at these kernel variances")
    args = ap.parse_args()
    fastep.precompile()
    rng = np.random.default_rng(0)
    X = rng.normal(size=(args.n, 3))
    z = (np.sin(2 * X[:, 0]) + X[:, 1] > 0).astype(int)
    kernel = RBF(1.0, 1.0)
    warnings.simplefilter("ignore")
    t_pr, pr = median_time(lambda: fastep.EPGaussianProcessClassifier(
        kernel, optimizer=None).fit(X, z), args.repeats)
    ratios = []
    for name, (sens, spec) in CROWDS.items():
        Y = simulate_annotators(z, sens, spec, random_state=0)
        t_ma, ma = median_time(lambda: fastep.MultiAnnotatorGPClassifier(
            kernel, optimizer=None).fit(X, Y), args.repeats)
        ratios.append(t_ma / t_pr)
        print(f"n = {args.n}, R = 8, crowd {name:9s}: GPC-MA fit {t_ma:.2f} s "
              f"({ma.n_iter_} sweeps), probit EP fit {t_pr:.2f} s ({pr.n_iter_} sweeps), "
              f"ratio {t_ma / t_pr:.2f}", flush=True)
    print(f"largest ratio {max(ratios):.2f} (target <= 2)")
    for variance in args.variances:
        for name, (sens, spec) in CROWDS.items():
            Y = simulate_annotators(z, sens, spec, random_state=0)
            row = {}
            for method in ("parallel", "auto"):
                t = time.perf_counter()
                ma = fastep.MultiAnnotatorGPClassifier(RBF(variance, 1.0), optimizer=None,
                                                       method=method).fit(X, Y)
                row[method] = (time.perf_counter() - t, ma)
            (t_par, par), (t_auto, auto) = row["parallel"], row["auto"]

            def cell(ma):
                return f"{ma.n_iter_:3d} sweeps{'' if ma.converged_ else ' (not converged)'}"
            print(f"kernel variance {variance:g}, crowd {name:9s}: parallel {t_par:6.2f} s "
                  f"{cell(par)}, auto {t_auto:6.2f} s {cell(auto)} ({auto.result_.method} at "
                  f"the end), time auto / parallel {t_auto / t_par:.2f}", flush=True)


if __name__ == "__main__":
    main()
