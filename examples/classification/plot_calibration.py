"""
Calibration: EP against the Laplace approximation
=================================================

A classifier's probabilities are *calibrated* when, among the cases it gives
probability p, a fraction p really are positive.  For a Gaussian-process classifier
the approximation of the posterior matters here: the Laplace approximation
(scikit-learn's :class:`~sklearn.gaussian_process.GaussianProcessClassifier`) centres a
Gaussian at the posterior mode, while Expectation Propagation
(:class:`fastep.EPGaussianProcessClassifier`) matches its moments, and was found the
more accurate of the two for GP classification by Kuss & Rasmussen (2005) and Nickisch
& Rasmussen (2008).  This example fits both on the Wisconsin breast-cancer table
bundled with scikit-learn and compares their held-out reliability diagrams, log loss
and Brier score.
"""

import time

import matplotlib.pyplot as plt
import numpy as np
from sklearn.datasets import load_breast_cancer
from sklearn.gaussian_process import GaussianProcessClassifier
from sklearn.gaussian_process.kernels import RBF as SkRBF
from sklearn.gaussian_process.kernels import ConstantKernel
from sklearn.metrics import accuracy_score, brier_score_loss, log_loss
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler
from threadpoolctl import threadpool_limits

from fastep import EPGaussianProcessClassifier
from fastep.kernels import RBF
from fastep.plot import calibration

# %%
# Data
# ----
#
# 569 tumours with 30 features; the target is 1 for benign and 0 for malignant.  We hold
# out 30% (stratified), and standardise the features on the training part.

X, y = load_breast_cancer(return_X_y=True)
X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.3, stratify=y,
                                                    random_state=0)
scaler = StandardScaler().fit(X_train)
X_train, X_test = scaler.transform(X_train), scaler.transform(X_test)
print(f"{len(y_train)} training and {len(y_test)} test rows, "
      f"{X.shape[1]} features")

# %%
# Three models
# ------------
#
# All three use an isotropic RBF kernel times a variance, start from variance 1 and
# lengthscale 1, and fit both by maximising the approximate marginal likelihood
# (``hyperprior=None`` turns off fastep's default weak prior on the variance, so that
# both libraries do plain type-II maximum likelihood).  scikit-learn's classifier uses
# the logistic link, so besides fastep's default probit link we also fit EP with the
# logistic link: that pair differs only in the approximation, Laplace or EP.
#
# The matrices here are small (398 rows), and a fit makes many short BLAS calls, for
# which a second BLAS thread costs more in synchronisation than it gains; on a busy
# machine the difference can be tenfold.  We therefore run the three fits with one BLAS
# thread (:func:`threadpoolctl.threadpool_limits`, installed with scikit-learn).

models = {
    "EP, probit": EPGaussianProcessClassifier(RBF(), hyperprior=None, random_state=0),
    "EP, logistic": EPGaussianProcessClassifier(RBF(), likelihood="logistic",
                                                hyperprior=None, random_state=0),
    "Laplace (scikit-learn)": GaussianProcessClassifier(ConstantKernel(1.0) * SkRBF(1.0),
                                                        random_state=0),
}
proba = {}
for name, model in models.items():
    start = time.perf_counter()
    with threadpool_limits(limits=1, user_api="blas"):
        model.fit(X_train, y_train)
    seconds = time.perf_counter() - start
    proba[name] = model.predict_proba(X_test)[:, 1]
    print(f"{name:24s} fit in {seconds:5.2f} s, kernel {model.kernel_}")

# %%
# Held-out scores
# ---------------
#
# Log loss (the negative mean log predictive probability of the true label) and the
# Brier score (the mean squared error of the probability) are both proper scoring
# rules: lower is better, and both reward calibration as well as accuracy.  On this
# split EP has the lower log loss and Brier score with either link; since the EP and
# Laplace fits with the logistic link share the model, the gap comes from the
# approximation, not the link.

print(f"\n{'model':24s} {'log loss':>9s} {'Brier':>7s} {'accuracy':>9s}")
for name, p in proba.items():
    print(f"{name:24s} {log_loss(y_test, p):9.4f} {brier_score_loss(y_test, p):7.4f} "
          f"{accuracy_score(y_test, p > 0.5):9.3f}")

# %%
# Reliability diagrams
# --------------------
#
# :func:`fastep.plot.calibration` bins the test cases by predicted probability and
# plots the observed fraction of benign tumours in each bin against the bin's mean
# prediction; a calibrated model stays on the diagonal.  This problem is easy, so most
# predictions are close to 0 or 1 (right panel) and the middle bins hold only a few
# cases each: read the diagram together with the histogram.

fig, (ax_cal, ax_hist) = plt.subplots(1, 2, figsize=(11, 4.5))
markers = {"EP, probit": "o", "EP, logistic": "s", "Laplace (scikit-learn)": "^"}
for name, p in proba.items():
    calibration(y_test, p, n_bins=5, ax=ax_cal, label=name, marker=markers[name])
ax_cal.set_title("Reliability diagram (test set, 5 bins)")
ax_cal.legend(loc="upper left")

bins = np.linspace(0.0, 1.0, 11)
ax_hist.hist(list(proba.values()), bins=bins, label=list(proba.keys()))
ax_hist.set_xlabel("predicted probability of benign")
ax_hist.set_ylabel("test cases")
ax_hist.set_title("Distribution of the predictions")
ax_hist.legend(loc="upper center")
fig.tight_layout()

plt.show()
