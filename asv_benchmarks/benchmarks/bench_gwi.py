"""Multiclass GWI: the Gauss-Hermite S(x, j) kernel and a GWIClassifier fit on digits.

``RobustMaxKernel`` times the compiled products over points x classes x nodes at
n = 10^5 points, J = 10 classes and 20 Gauss-Hermite nodes: S(x, j) for every class (the
predictive probabilities) and S(x, y) with its gradient in all means and variances (the
training objective's hot loop).  ``GWIDigitsFit`` fits ``fastep.GWIClassifier()`` (its
defaults) on a 70/30 split of scikit-learn's digits and tracks the test accuracy and NLL.
"""
import numpy as np

import fastep
from fastep.likelihoods import RobustMax


class RobustMaxKernel:
    params = [10 ** 5]
    param_names = ["n"]
    timeout = 300

    def setup(self, n):
        rng = np.random.default_rng(0)
        J = 10
        self.mean = 2.0 * rng.standard_normal((n, J))
        self.var = rng.uniform(0.3, 1.5, (n, J))
        self.y = rng.integers(0, J, n)
        self.lik = RobustMax(J, n_nodes=20)
        fastep.precompile()

    def time_prob_largest_all_classes(self, n):
        self.lik.prob_largest(self.mean, self.var)

    def time_prob_largest_label_with_gradient(self, n):
        self.lik.prob_largest_grad(self.mean, self.var, self.y)


class GWIDigitsFit:
    number = 1
    repeat = (1, 3, 120.0)
    timeout = 600

    def setup(self):
        from sklearn.datasets import load_digits
        from fastep.datasets import split_standardized
        X, y = load_digits(return_X_y=True)
        self.Xtr, self.Xte, self.ytr, self.yte = split_standardized(X, y, random_state=0)
        fastep.precompile()

    def _fit(self):
        return fastep.GWIClassifier(random_state=0).fit(self.Xtr, self.ytr)

    def time_fit(self):
        self._fit()

    def track_test_accuracy(self):
        return self._fit().score(self.Xte, self.yte)

    def track_test_nll(self):
        p = self._fit().predict_proba(self.Xte)
        return float(-np.mean(np.log(p[np.arange(self.yte.size), self.yte])))

    track_test_accuracy.unit = "fraction"
    track_test_nll.unit = "nats per point"
