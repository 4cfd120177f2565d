"""OrdinalGPClassifier: its EP posterior against damped parallel EP with the ordinal
probit's tilted moments by adaptive quadrature (tests/helpers/reference.py), and its class
probabilities against the predictive integrated by quadrature."""
import numpy as np
from scipy import integrate
from scipy.special import log_ndtr, ndtr

from fastep import OrdinalGPClassifier
from fastep.kernels import RBF

CUTS = np.array([-0.6, 0.4, 1.5])


def _log_lik(level):
    """log p(y = level | f) = log(Phi(b_k - f) - Phi(b_{k-1} - f)), written apart from
    fastep's closed form (tail-safe: log Phi of the nearer tail)."""
    lo = -np.inf if level == 0 else CUTS[level - 1]
    hi = np.inf if level == CUTS.size else CUTS[level]

    def log_lik(f):
        if np.isinf(lo):
            return float(log_ndtr(hi - f))
        if np.isinf(hi):
            return float(log_ndtr(f - lo))
        a, b = log_ndtr(hi - f), log_ndtr(lo - f)
        return float(a + np.log1p(-np.exp(b - a)))
    return log_lik


def _problem():
    rng = np.random.default_rng(4)
    X = np.sort(rng.uniform(-2, 2, 24))[:, None]
    f = 1.5 * np.sin(1.5 * X[:, 0]) + 0.4
    y = np.searchsorted(CUTS, f + rng.normal(size=24))        # levels 0..3
    return X, y, RBF(2.0, 0.7)


def test_ep_posterior_matches_reference_ep_by_quadrature(ref):
    X, y, k = _problem()
    assert set(y) == {0, 1, 2, 3}
    clf = OrdinalGPClassifier(k, cut_points=CUTS, optimizer=None, tol=1e-10,
                              max_iter=500).fit(X, y)
    tau, nu, mean, var = ref.ep_parallel_reference_quad(k(X), [_log_lik(v) for v in y],
                                                        damping=0.7, tol=1e-10)
    np.testing.assert_allclose(clf.result_.mean, mean, atol=1e-8)
    np.testing.assert_allclose(clf.result_.var, var, rtol=1e-8)
    np.testing.assert_allclose(clf.cut_points_, CUTS)


def test_class_probabilities_integrate_the_latent_predictive():
    X, y, k = _problem()
    clf = OrdinalGPClassifier(k, cut_points=CUTS, optimizer=None, tol=1e-10).fit(X, y)
    Xs = np.array([[-1.7], [0.0], [0.9], [3.0]])
    proba = clf.predict_proba(Xs)
    mean, std = clf.predict_latent(Xs, return_std=True)
    edges = np.concatenate([[-np.inf], CUTS, [np.inf]])
    for m, s, row in zip(mean, std, proba):
        want = [integrate.quad(lambda f: (ndtr(hi - f) - ndtr(lo - f))
                               * np.exp(-0.5 * ((f - m) / s) ** 2) / (s * np.sqrt(2 * np.pi)),
                               m - 12 * s, m + 12 * s, epsabs=0, epsrel=1e-12)[0]
                for lo, hi in zip(edges[:-1], edges[1:])]
        np.testing.assert_allclose(row, want, rtol=1e-8, atol=1e-12)
    np.testing.assert_array_equal(clf.predict(Xs), np.argmax(proba, axis=1))
