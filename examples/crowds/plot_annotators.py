"""
Learning from a crowd of noisy annotators
=========================================

When labels come from several annotators of unknown and unequal skill, a majority vote
gives every annotator the same weight, however poor.
:class:`fastep.MultiAnnotatorGPClassifier` (Rodrigues, Pereira & Ribeiro, 2014) treats
the true label as hidden: a Gaussian-process classifier models it, and each annotator
has a sensitivity (the probability of labelling a positive as 1) and a specificity (of
labelling a negative as 0), learnt together with the classifier by EP and EM.  This
example learns these reliabilities from a simulated crowd, compares the result with
majority voting, and then uses the model's :meth:`~fastep.MultiAnnotatorGPClassifier.query`
method to choose which instance to label next and by whom (active learning).
"""

import matplotlib.pyplot as plt
import numpy as np
from sklearn.datasets import make_moons

from fastep import EPGaussianProcessClassifier, MultiAnnotatorGPClassifier
from fastep.datasets import simulate_annotators
from fastep.kernels import RBF
from fastep.plot import annotator_reliabilities

# %%
# A simulated crowd
# -----------------
#
# Two hundred points of the two-moons problem, with their true labels ``z``, are
# labelled by five annotators: two good ones, one mediocre, and two who are little
# better than a coin (annotator 4 is slightly worse than a coin on negatives).  A
# separate set of 1000 points, with true labels, measures held-out accuracy.

X, z = make_moons(n_samples=200, noise=0.25, random_state=1)
X_test, z_test = make_moons(n_samples=1000, noise=0.25, random_state=2)

true_sensitivity = np.array([0.95, 0.85, 0.70, 0.55, 0.50])
true_specificity = np.array([0.90, 0.80, 0.65, 0.50, 0.45])
Y = simulate_annotators(z, true_sensitivity, true_specificity, random_state=0)
print(f"labels: {Y.shape[0]} instances x {Y.shape[1]} annotators")

# %%
# Fit the crowd model
# -------------------
#
# ``Y`` holds one column per annotator (NaN would mark a missing label).  The kernel is
# fitted by maximising the EP evidence between rounds of EM.

crowd = MultiAnnotatorGPClassifier(RBF(), random_state=0).fit(X, Y)
print(f"fitted kernel: {crowd.kernel_}")
print("learnt sensitivity:", np.round(crowd.sensitivity_, 2))
print("learnt specificity:", np.round(crowd.specificity_, 2))

# %%
# The learnt reliabilities (bars) lie close to the truth (black marks), though the model
# saw no true label: :func:`fastep.plot.annotator_reliabilities` draws both.

fig, ax = plt.subplots(figsize=(7, 4))
annotator_reliabilities(crowd, truth=(true_sensitivity, true_specificity), ax=ax)
ax.set_xlabel("annotator")
ax.set_title("Annotator reliabilities: learnt (bars) and true (marks)")
ax.legend(loc="upper right", fontsize="small")
fig.tight_layout()

# %%
# Against majority voting
# -----------------------
#
# The majority vote of five annotators is never a tie.  We compare it on the training
# instances with the crowd model's posterior of the true label
# (``true_label_proba_``), and on the test points with an EP classifier trained on the
# majority-vote labels.  The two near-random annotators pull the vote towards noise;
# the crowd model learns that their labels carry almost no information and gives them
# almost no weight.

majority = (np.nanmean(Y, axis=1) > 0.5).astype(int)
on_votes = EPGaussianProcessClassifier(RBF(), random_state=0).fit(X, majority)

print(f"{'accuracy':30s} {'training labels':>16s} {'test':>6s}")
print(f"{'majority vote + EP classifier':30s} {np.mean(majority == z):16.3f} "
      f"{on_votes.score(X_test, z_test):6.3f}")
print(f"{'crowd model':30s} {np.mean((crowd.true_label_proba_ > 0.5) == z):16.3f} "
      f"{crowd.score(X_test, z_test):6.3f}")

# %%
# Active learning
# ---------------
#
# Labels cost money, so we start small: 10 instances labelled by every annotator.  In
# each round the model asks for five more labels, and ``query`` answers two questions
# at once: which instances of the unlabelled pool are most uncertain (smallest
# ``|mu| / sqrt(1 + sigma^2)`` of the latent posterior), and which annotator is most
# likely to label each of them correctly.  The new rows, with a label in the chosen
# annotator's column and NaN elsewhere, are appended to the training set, and the model
# is refitted with ``warm_start=True``, which starts EP from the previous sites and
# reliabilities.
#
# The baseline asks random annotators about random instances.  With ten to seventy
# instances the evidence says little about the kernel (ML-II can walk the variance to a
# bound), so both strategies keep a fixed kernel near the one found above
# (``optimizer=None``): the comparison is then about the choice of labels alone.  Each
# strategy is repeated from five random starting sets, and the curves are the means.

kernel = RBF(variance=10.0, lengthscale=0.8)
n_start, n_rounds, per_round = 10, 12, 5


def active_learning(strategy, seed):
    """Held-out accuracy after each round; ``strategy`` is "query" or "random"."""
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(z))
    X_lab, Y_lab = X[order[:n_start]], Y[order[:n_start]]
    pool = order[n_start:]
    model = MultiAnnotatorGPClassifier(kernel, optimizer=None, warm_start=True)
    model.fit(X_lab, Y_lab)
    n_labels, accuracy = [np.sum(~np.isnan(Y_lab))], [model.score(X_test, z_test)]
    for _ in range(n_rounds):
        if strategy == "query":
            picked, who = model.query(X[pool], n_queries=per_round)
        else:
            picked = rng.choice(len(pool), size=per_round, replace=False)
            who = rng.integers(0, Y.shape[1], size=per_round)
        rows = pool[picked]
        new = np.full((per_round, Y.shape[1]), np.nan)
        new[np.arange(per_round), who] = Y[rows, who]      # only the asked annotator
        X_lab, Y_lab = np.vstack([X_lab, X[rows]]), np.vstack([Y_lab, new])
        pool = np.delete(pool, picked)
        model.fit(X_lab, Y_lab)
        n_labels.append(np.sum(~np.isnan(Y_lab)))
        accuracy.append(model.score(X_test, z_test))
    return np.array(n_labels), np.array(accuracy)


curves = {}
for strategy in ("query", "random"):
    runs = [active_learning(strategy, seed) for seed in range(5)]
    curves[strategy] = (runs[0][0], np.mean([acc for _, acc in runs], axis=0))
    print(f"{strategy:6s}: held-out accuracy {curves[strategy][1][0]:.3f} -> "
          f"{curves[strategy][1][-1]:.3f} with {curves[strategy][0][-1]} labels")

# %%
# Asking the right annotator about the uncertain instances raises the accuracy much
# faster than random requests: the queried labels come mostly from the best annotator,
# and fall near the decision boundary, where they are informative.  Random requests
# can even lower the accuracy at first: two in five go to the two near-random
# annotators, whose reliabilities are still poorly known after ten instances.

fig, ax = plt.subplots(figsize=(7, 4))
labels = {"query": "query(): uncertain instance, best annotator",
          "random": "random instance, random annotator"}
for strategy, (n_labels, accuracy) in curves.items():
    ax.plot(n_labels, accuracy, marker="o", label=labels[strategy])
ax.set_xlabel("number of labels")
ax.set_ylabel("held-out accuracy (mean of 5 runs)")
ax.set_title("Active learning with a crowd of annotators")
ax.set_ylim(bottom=0.6)
ax.legend(loc="lower right")
fig.tight_layout()

plt.show()
