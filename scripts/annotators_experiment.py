"""Multi-annotator GP classification: the protocol of Rodrigues, Pereira & Ribeiro (2014).

    python scripts/annotators_experiment.py --repeats 10 [--datasets breast wine] [--plot al.png]

For each dataset: 70/30 random splits; 8 simulated annotators with the paper's
sensitivities [0.9, 0.9, 0.8, 0.4, 0.3, 0.4, 0.6, 0.5] and specificities
[0.8, 0.9, 0.9, 0.4, 0.5, 0.5, 0.5, 0.4]; probit EP-GPC trained on the true labels
(GOLD), on all (x, y_r) pairs (CONC), on majority votes (MV), and GPC-MA.  Prints
Table 1 (train/test accuracy and AUC, mean over repeats) and Table 2 (fit times),
then an active-learning curve (random; instance by eq. 11 with a random annotator;
instance and annotator by eqs. 11-12), saved as PNG when matplotlib is installed.

Datasets ship offline: scikit-learn's breast-cancer (bundled with fastep too) and
wine (class 0 vs rest).  Features are standardised on the training split; the
kernel is an isotropic RBF with variance 1 and length-scale sqrt(d) (fixed), as the
paper's UCI runs give no optimisation details.
"""
import argparse
import time
import warnings

import numpy as np

from fastep import EPGaussianProcessClassifier, MultiAnnotatorGPClassifier
from fastep.datasets import load_breast_cancer, simulate_annotators, split_standardized
from fastep.kernels import RBF
from fastep.models.annotators import concatenate_labels, majority_vote

SENS = [0.9, 0.9, 0.8, 0.4, 0.3, 0.4, 0.6, 0.5]
SPEC = [0.8, 0.9, 0.9, 0.4, 0.5, 0.5, 0.5, 0.4]


def load(name):
    if name == "breast":
        X, y, _ = load_breast_cancer()
        return X, y
    from sklearn.datasets import load_wine
    X, y = load_wine(return_X_y=True)
    return X, (y == 0).astype(int)


def auc(score, y):
    """Area under the ROC curve (Mann-Whitney), ties counted half."""
    from scipy.stats import rankdata
    r = rankdata(score)
    n1 = y.sum()
    n0 = len(y) - n1
    return (r[y == 1].sum() - n1 * (n1 + 1) / 2) / (n1 * n0)


def evaluate(p_train, y_train, p_test, y_test):
    return [np.mean((p_train > 0.5) == y_train), auc(p_train, y_train),
            np.mean((p_test > 0.5) == y_test), auc(p_test, y_test)]


def one_split(X, y, seed):
    Xtr, Xte, ytr, yte = split_standardized(X, y, random_state=seed)
    Y = simulate_annotators(ytr, SENS, SPEC, random_state=seed)
    kernel = RBF(1.0, np.sqrt(X.shape[1]))
    res, times = {}, {}
    fits = {
        "GOLD": lambda: EPGaussianProcessClassifier(kernel, optimizer=None).fit(Xtr, ytr),
        "CONC": lambda: EPGaussianProcessClassifier(kernel, optimizer=None).fit(
            *concatenate_labels(Xtr, Y)),
        "MV": lambda: EPGaussianProcessClassifier(kernel, optimizer=None).fit(
            Xtr, majority_vote(Y, random_state=seed)),
        "MA": lambda: MultiAnnotatorGPClassifier(kernel, optimizer=None).fit(Xtr, Y),
    }
    for name, fit in fits.items():
        t = time.perf_counter()
        model = fit()
        times[name] = time.perf_counter() - t
        res[name] = evaluate(model.predict_proba(Xtr)[:, 1], ytr,
                             model.predict_proba(Xte)[:, 1], yte)
    return res, times


def active_learning(X, y, seed, n_start=60, n_rounds=12, batch=10):
    """Test AUC after each round of queries, for the three strategies."""
    Xtr, Xte, ytr, yte = split_standardized(X, y, random_state=seed)
    ntr = len(ytr)
    Yfull = simulate_annotators(ytr, SENS, SPEC, random_state=seed)
    kernel = RBF(1.0, np.sqrt(X.shape[1]))
    curves = {}
    for strategy in ("random", "instance", "instance+annotator"):
        srng = np.random.default_rng(seed + 1)
        labelled = list(srng.choice(ntr, n_start, replace=False))
        Y = np.full((ntr, len(SENS)), np.nan)
        Y[labelled] = Yfull[labelled]                   # the start set: every annotator
        pool = [i for i in range(ntr) if i not in set(labelled)]
        clf = MultiAnnotatorGPClassifier(kernel, warm_start=True, optimizer=None)
        aucs = []
        for _ in range(n_rounds + 1):
            rows = sorted(set(labelled))
            clf.fit(Xtr[rows], Y[rows])
            aucs.append(auc(clf.predict_proba(Xte)[:, 1], yte))
            if strategy == "random":
                pick = list(srng.choice(len(pool), batch, replace=False))
                who = srng.integers(0, len(SENS), batch)
            else:
                pick, who = clf.query(Xtr[pool], n_queries=batch)
                if strategy == "instance":
                    who = srng.integers(0, len(SENS), batch)
            for j, r in zip(pick, who):
                i = pool[j]
                Y[i, r] = Yfull[i, r]
                labelled.append(i)
            pool = [i for k, i in enumerate(pool) if k not in set(pick)]
        curves[strategy] = aucs
    return curves


def main():
    ap = argparse.ArgumentParser(description="Rodrigues et al. (2014) protocol with fastep")
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--datasets", nargs="+", default=["breast", "wine"])
    ap.add_argument("--al-repeats", type=int, default=3)
    ap.add_argument("--plot", default="annotators_active_learning.png")
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    print("Table 1: mean over %d splits (70/30), 8 simulated annotators" % args.repeats)
    print(f"{'dataset':10s} {'method':6s} {'train Acc':>13s} {'train AUC':>13s} "
          f"{'test Acc':>13s} {'test AUC':>13s}")
    all_times = {}
    for name in args.datasets:
        X, y = load(name)
        runs = [one_split(X, y, seed) for seed in range(args.repeats)]
        for m in ("GOLD", "CONC", "MV", "MA"):
            vals = np.array([r[0][m] for r in runs])
            mean, sd = vals.mean(0), vals.std(0)
            print(f"{name:10s} {m:6s} " + " ".join(f"{a:.3f} ± {s:.3f}".rjust(13)
                                                  for a, s in zip(mean, sd)))
        all_times[name] = {m: np.mean([r[1][m] for r in runs]) for m in ("GOLD", "CONC", "MV",
                                                                          "MA")}
    print("\nTable 2: mean fit time in seconds")
    print(f"{'dataset':10s} " + " ".join(f"{m:>8s}" for m in ("GOLD", "CONC", "MV", "MA")) +
          "   MA/MV")
    for name, t in all_times.items():
        print(f"{name:10s} " + " ".join(f"{t[m]:8.3f}" for m in ("GOLD", "CONC", "MV", "MA")) +
              f"   {t['MA'] / t['MV']:5.2f}")
    X, y = load(args.datasets[0])
    curves = [active_learning(X, y, seed) for seed in range(args.al_repeats)]
    mean = {k: np.mean([c[k] for c in curves], axis=0) for k in curves[0]}
    print(f"\nActive learning on {args.datasets[0]}: test AUC after each round of 10 queries "
          f"(mean of {args.al_repeats})")
    print("round " + " ".join(f"{k:>18s}" for k in mean))
    for i in range(len(next(iter(mean.values())))):
        print(f"{i:5d} " + " ".join(f"{mean[k][i]:18.4f}" for k in mean))
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(matplotlib not installed: no plot)")
        return
    fig, ax = plt.subplots(figsize=(5, 3.5))
    for k, v in mean.items():
        ax.plot(np.arange(len(v)) * 10, v, marker="o", label=k)
    ax.set_xlabel("queries")
    ax.set_ylabel("test AUC")
    ax.set_title(f"GPC-MA active learning ({args.datasets[0]})")
    ax.legend()
    fig.tight_layout()
    fig.savefig(args.plot, dpi=120)
    print(f"saved {args.plot}")


if __name__ == "__main__":
    main()
