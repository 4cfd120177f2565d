"""Multiclass GP classification: GWI (Wild, Hu & Sejdinovic 2022) against one-vs-rest GPs.

    python scripts/multiclass_experiment.py [--datasets digits iris wine] [--seeds 1]
        [--timing-repeats 3] [--plot multiclass_reliability.png] [--no-ood] [--ep-ml2]

One seed takes about 10 minutes on two cores, most of it scikit-learn's ML-II on digits.

Data ship offline with scikit-learn (digits 1797 x 64 with 10 classes, iris 150 x 4,
wine 178 x 13; 3 classes each).  For each dataset and seed: a 70/30 random split with
features standardised on the training part (``fastep.datasets.split_standardized``), then

* GWI      ``fastep.GWIClassifier()`` with its defaults: robust max (epsilon 0.01), 200
           inducing inputs, kernel and linear mean, RBF(4, median heuristic) prior, W2^2,
           200 L-BFGS-B iterations, no tempering;
* GWI-T    the same with ``validation_fraction=0.1``: 10% of the training data held out
           to temper the variational covariances;
* sk-OvR   scikit-learn's ``GaussianProcessClassifier`` (Laplace, one-vs-rest), kernel
           ``ConstantKernel(4) * RBF(median heuristic)`` optimised by ML-II;
* EP-OvR   ``fastep.EPGaussianProcessClassifier`` (probit EP, one-vs-rest) with GWI's prior
           kernel ``RBF(4, median heuristic)`` kept fixed (``optimizer=None``): on digits
           ML-II drives the kernel variance to its upper bound (1e5) and takes about
           three minutes per class; ``--ep-ml2`` runs it anyway.

Printed per method: test accuracy, negative log-likelihood (NLL, nats per point),
expected calibration error (ECE, 15 equal-width bins of the top-class probability) and
fit time.  Out-of-distribution proxy: every method is trained on digits 0-4 and scored by
the AUROC of its predictive entropy for telling test digits 5-9 (OOD) from test digits 0-4.
``--timing-repeats`` refits GWI on the first digits split and prints the median fit time.
A reliability diagram (digits, first seed) is written when matplotlib is installed.
"""
import argparse
import time
import warnings

import numpy as np

import fastep
from fastep.datasets import split_standardized
from fastep.kernels import RBF
from fastep.models._base import median_heuristic

N_BINS = 15


def load(name):
    from sklearn import datasets
    loader = {"digits": datasets.load_digits, "iris": datasets.load_iris,
              "wine": datasets.load_wine}[name]
    return loader(return_X_y=True)


def make_models(Xtr, seed, ep_ml2=False):
    ls = median_heuristic(Xtr, np.random.default_rng(seed))
    from sklearn.gaussian_process import GaussianProcessClassifier
    from sklearn.gaussian_process.kernels import RBF as SkRBF, ConstantKernel
    return {
        "GWI": lambda: fastep.GWIClassifier(random_state=seed),
        "GWI-T": lambda: fastep.GWIClassifier(validation_fraction=0.1, random_state=seed),
        "sk-OvR": lambda: GaussianProcessClassifier(ConstantKernel(4.0) * SkRBF(ls),
                                                    random_state=seed),
        "EP-OvR": lambda: fastep.EPGaussianProcessClassifier(
            RBF(4.0, ls), optimizer="L-BFGS-B" if ep_ml2 else None),
    }


def ece(p, y):
    """Expected calibration error of the top-class probability (equal-width bins)."""
    conf = p.max(1)
    hit = (p.argmax(1) == y).astype(float)
    bins = np.minimum((conf * N_BINS).astype(int), N_BINS - 1)
    total = 0.0
    for b in range(N_BINS):
        m = bins == b
        if m.any():
            total += m.mean() * abs(hit[m].mean() - conf[m].mean())
    return total


def reliability(p, y):
    conf = p.max(1)
    hit = (p.argmax(1) == y).astype(float)
    bins = np.minimum((conf * N_BINS).astype(int), N_BINS - 1)
    rows = [(conf[bins == b].mean(), hit[bins == b].mean(), int((bins == b).sum()))
            for b in range(N_BINS) if np.any(bins == b)]
    return np.array(rows)


def entropy(p):
    return -np.sum(p * np.log(np.maximum(p, 1e-300)), axis=1)


def auroc(score, label):
    """Area under the ROC curve (Mann-Whitney U), ties counted half; label 1 = positive."""
    from scipy.stats import rankdata
    r = rankdata(score)
    n1 = int(label.sum())
    n0 = label.size - n1
    return (r[label == 1].sum() - n1 * (n1 + 1) / 2) / (n1 * n0)


def fit_predict(make, Xtr, ytr, Xte):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t = time.perf_counter()
        model = make().fit(Xtr, ytr)
        seconds = time.perf_counter() - t
        return model.predict_proba(Xte), seconds


def evaluate(datasets, seeds, ep_ml2):
    results, curves = {}, {}
    for name in datasets:
        X, y = load(name)
        for seed in range(seeds):
            Xtr, Xte, ytr, yte = split_standardized(X, y, random_state=seed)
            for method, make in make_models(Xtr, seed, ep_ml2).items():
                p, seconds = fit_predict(make, Xtr, ytr, Xte)
                nll = -np.mean(np.log(np.maximum(p[np.arange(yte.size), yte], 1e-300)))
                row = [np.mean(p.argmax(1) == yte), nll, ece(p, yte), seconds]
                results.setdefault((name, method), []).append(row)
                if name == "digits" and seed == 0:
                    curves[method] = reliability(p, yte)
                print(f"  {name:6s} seed {seed} {method:7s} acc {row[0]:.4f}  NLL {row[1]:.4f}  "
                      f"ECE {row[2]:.4f}  fit {row[3]:6.1f} s", flush=True)
    return results, curves


def ood(ep_ml2, seed=0):
    X, y = load("digits")
    Xtr, Xte, ytr, yte = split_standardized(X, y, random_state=seed)
    keep = ytr < 5
    out = {}
    for method, make in make_models(Xtr[keep], seed, ep_ml2).items():
        p, _ = fit_predict(make, Xtr[keep], ytr[keep], Xte)
        out[method] = auroc(entropy(p), (yte >= 5).astype(int))
    return out


def timing(repeats, seed=0):
    X, y = load("digits")
    Xtr, _, ytr, _ = split_standardized(X, y, random_state=seed)
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fastep.GWIClassifier(random_state=seed).fit(Xtr, ytr)
        times.append(time.perf_counter() - t)
    return times


def plot(curves, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"(matplotlib not installed: no reliability diagram written to {path})")
        return
    fig, ax = plt.subplots(figsize=(4.5, 4.5))
    ax.plot([0, 1], [0, 1], color="0.7", lw=1)
    for method, c in curves.items():             # marker area ~ number of points in the bin
        line, = ax.plot(c[:, 0], c[:, 1], lw=1, label=method)
        ax.scatter(c[:, 0], c[:, 1], s=4 + 2 * np.sqrt(c[:, 2]), color=line.get_color())
    ax.set_xlabel("confidence (top-class probability)")
    ax.set_ylabel("accuracy")
    ax.set_title("digits, test split (seed 0)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"reliability diagram written to {path}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", nargs="+", default=["digits", "iris", "wine"],
                    choices=["digits", "iris", "wine"])
    ap.add_argument("--seeds", type=int, default=1)
    ap.add_argument("--timing-repeats", type=int, default=3)
    ap.add_argument("--plot", default="multiclass_reliability.png")
    ap.add_argument("--no-ood", action="store_true")
    ap.add_argument("--ep-ml2", action="store_true", help="ML-II for EP-OvR (slow)")
    args = ap.parse_args()
    fastep.precompile()
    print(f"Multiclass GP classification, 70/30 splits, {args.seeds} seed(s)")
    results, curves = evaluate(args.datasets, args.seeds, args.ep_ml2)

    print("\nTable 1: test metrics (mean +- sd over seeds)")
    print(f"{'dataset':8s} {'method':8s} {'accuracy':>16s} {'NLL':>16s} {'ECE':>16s} "
          f"{'fit s':>8s}")
    for (name, method), rows in results.items():
        r = np.array(rows)
        cell = [f"{m:.4f} +- {s:.4f}" for m, s in zip(r.mean(0)[:3], r.std(0)[:3])]
        print(f"{name:8s} {method:8s} {cell[0]:>16s} {cell[1]:>16s} {cell[2]:>16s} "
              f"{np.median(r[:, 3]):8.1f}")

    if not args.no_ood:
        print("\nTable 2: OOD proxy, trained on digits 0-4: AUROC of predictive entropy, "
              "test 5-9 vs 0-4")
        for method, value in ood(args.ep_ml2).items():
            print(f"  {method:8s} {value:.4f}")

    if args.timing_repeats > 0:
        times = timing(args.timing_repeats)
        print(f"\nGWI fit on digits (1257 training points, seed 0): median "
              f"{np.median(times):.1f} s over {len(times)} fits "
              f"({', '.join(f'{t:.1f}' for t in times)})")
    if "digits" in args.datasets and args.plot:
        plot(curves, args.plot)


if __name__ == "__main__":
    main()
