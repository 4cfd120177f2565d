"""Multi-annotator GP classification (seed 000)."""
import warnings

import numpy as np
import pytest
from sklearn.base import clone
from scipy import special

from fastep import EPGaussianProcessClassifier, MultiAnnotatorGPClassifier
from fastep.datasets import simulate_annotators
from fastep.kernels import RBF
from fastep.likelihoods import MultiAnnotator
from fastep.models import concatenate_labels, majority_vote


SENS = [0.9, 0.9, 0.8, 0.4, 0.3, 0.4, 0.6, 0.5]
SPEC = [0.8, 0.9, 0.9, 0.4, 0.5, 0.5, 0.5, 0.4]


def _cases(rng, n):
    """Random (log a, log b, mu, var) including a << b, a >> b and logs down to -700."""
    out = []
    for k in range(n):
        la, lb = -rng.uniform(0, 20, size=2) * rng.choice([1.0, 30.0], size=2)
        if k % 6 == 0:
            la = -700.0
        if k % 6 == 1:
            lb = -700.0
        out.append((la, lb, rng.uniform(-30, 30), 10 ** rng.uniform(-4, 4)))
    return out


@pytest.mark.parametrize("alpha", [1.0, 0.5])
def test_tilted_matches_quadrature(alpha, ref):
    rng = np.random.default_rng(7)
    lik = MultiAnnotator(np.ones((1, 1)), [0.9], [0.9])
    for la, lb, mu, var in _cases(rng, 60 if alpha == 1.0 else 20):
        got = lik.tilted(1.0, [mu], [var], alpha=alpha, extra=np.array([[la, lb]]))
        want = ref.tilted_moments_quad(
            lambda f: np.logaddexp(la + special.log_ndtr(f), lb + special.log_ndtr(-f)),
            mu, var, alpha)
        floors = (1e-13, 1e-10 / np.sqrt(var), 1e-11 / var)   # see test_likelihoods.py
        for g, w, fl in zip(got, want, floors):
            assert abs(g[0] - w) <= 1e-8 * abs(w) + fl, (la, lb, mu, var, g[0], w)


def test_r1_exact_annotator_equals_probit():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 2))
    z = (X[:, 0] + 0.3 * rng.normal(size=60) > 0).astype(int)
    kernel = RBF(1.5, 0.8)
    ma = MultiAnnotatorGPClassifier(kernel, sensitivity=[1.0], specificity=[1.0],
                                    update_reliabilities=False, tol=1e-12, max_iter=1000,
                                    damping=0.8, optimizer=None).fit(X, z[:, None])
    pr = EPGaussianProcessClassifier(kernel, optimizer=None, tol=1e-12, max_iter=1000).fit(X, z)
    assert ma.log_marginal_likelihood_value_ == pytest.approx(pr.log_marginal_likelihood_value_,
                                                              rel=1e-8, abs=1e-8)
    Xs = rng.normal(size=(20, 2))
    np.testing.assert_allclose(ma.predict_proba(Xs), pr.predict_proba(Xs), rtol=1e-8, atol=1e-10)


@pytest.fixture(scope="module")
def simulated():
    rng = np.random.default_rng(1)
    n = 1200
    X = rng.normal(size=(n, 2))
    z = (np.sin(2 * X[:, 0]) + X[:, 1] > 0).astype(int)
    Y = simulate_annotators(z, SENS, SPEC, random_state=2)
    return X, z, Y


def test_reliabilities_match_empirical_rates(simulated):
    X, z, Y = simulated
    clf = MultiAnnotatorGPClassifier(RBF(1.0, 0.7), optimizer=None).fit(X, Y)
    emp_sens = np.array([np.mean(Y[z == 1, r] == 1) for r in range(Y.shape[1])])
    emp_spec = np.array([np.mean(Y[z == 0, r] == 0) for r in range(Y.shape[1])])
    assert np.max(np.abs(clf.sensitivity_ - emp_sens)) < 0.05
    assert np.max(np.abs(clf.specificity_ - emp_spec)) < 0.05
    assert clf.converged_
    assert np.all((clf.true_label_proba_ >= 0) & (clf.true_label_proba_ <= 1))
    assert np.mean((clf.true_label_proba_ > 0.5) == z) > 0.95


def test_negative_site_precisions_occur_and_are_handled(simulated):
    X, z, Y = simulated
    clf = MultiAnnotatorGPClassifier(RBF(1.0, 0.7), optimizer=None).fit(X[:400], Y[:400])
    res = clf.result_
    assert res.site_tau.min() < 0            # the likelihood is not log-concave
    K = clf.kernel_(X[:400])
    # independent dense posterior: Sigma = (K^-1 + S)^-1 = (I + K S)^-1 K (LU, no Cholesky)
    sigma = np.linalg.solve(np.eye(400) + K * res.site_tau[None, :], K)
    np.testing.assert_allclose(res.var, np.diag(sigma), rtol=1e-7, atol=1e-10)
    np.testing.assert_allclose(res.mean, sigma @ res.site_nu, rtol=1e-7, atol=1e-9)


def test_em_inside_the_sweep_loop_reaches_the_em_fixed_point(simulated):
    """Dense GPC-MA runs its M-steps inside EP's sweep loop.  Its result must be a fixed
    point of both: plain EP at the fitted reliabilities (cold start) gives the same
    evidence and marginals, an M-step from that run's cavities gives the same
    reliabilities, and sparse GPC-MA with every input an inducing input (the same model,
    EM in rounds between EP runs) finds the same reliabilities."""
    from fastep import ep
    from fastep.models._annotator_em import m_step, true_label_posterior
    X, z, Y = simulated
    X, Y = X[:250], Y[:250]
    kernel = RBF(1.0, 0.7)
    tight = dict(optimizer=None, tol=1e-10, em_tol=1e-9, max_iter=500, max_em_iter=500)
    clf = MultiAnnotatorGPClassifier(kernel, **tight).fit(X, Y)
    assert clf.converged_
    lik = MultiAnnotator(Y, clf.sensitivity_, clf.specificity_)
    plain = ep(kernel(X), np.ones(len(X)), lik, damping=0.8, tol=1e-12, max_iter=1000)
    assert plain.log_marginal_likelihood == pytest.approx(clf.log_marginal_likelihood_value_,
                                                          rel=1e-9)
    np.testing.assert_allclose(clf.result_.mean, plain.mean, rtol=1e-6, atol=1e-8)
    p = true_label_posterior(lik.site_extra(len(X)), plain.cavity_mean, plain.cavity_var)
    sens, spec = m_step(Y, p)
    np.testing.assert_allclose(clf.sensitivity_, sens, atol=1e-8)
    np.testing.assert_allclose(clf.specificity_, spec, atol=1e-8)
    rounds = MultiAnnotatorGPClassifier(kernel, inducing_points=X, method="parallel",
                                        **tight).fit(X, Y)
    np.testing.assert_allclose(rounds.sensitivity_, clf.sensitivity_, atol=1e-6)
    np.testing.assert_allclose(rounds.specificity_, clf.specificity_, atol=1e-6)


@pytest.mark.parametrize("seed", range(4))
def test_em_inside_the_loop_stops_at_sites_made_with_the_final_reliabilities(seed):
    """After an M-step is adopted, EP must sweep once more with the new data before it
    may report convergence: one undamped EP sweep from the returned sites at the reported
    reliabilities moves them by less than ``tol`` (the convergence rule's site change).
    Stopping right after an adoption left changes of about 7 tol here."""
    from fastep import ep
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(40, 2))
    z = (np.sin(2 * X[:, 0]) + X[:, 1] > 0).astype(int)
    Y = simulate_annotators(z, SENS, SPEC, random_state=seed)
    kernel, tol = RBF(1.0, 0.7), 1e-4
    clf = MultiAnnotatorGPClassifier(kernel, optimizer=None, tol=tol).fit(X, Y)
    res = clf.result_
    lik = MultiAnnotator(Y, clf.sensitivity_, clf.specificity_)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        step = ep(kernel(X), np.ones(40), lik, damping=1.0, max_iter=1, tol=tol,
                  site_tau=res.site_tau, site_nu=res.site_nu)
    change = max(np.max(np.abs(step.site_tau - res.site_tau) / (1 + np.abs(res.site_tau))),
                 np.max(np.abs(step.site_nu - res.site_nu) / (1 + np.abs(res.site_nu))))
    assert clf.converged_ and change < tol


def test_active_learning_query(simulated):
    X, z, Y = simulated
    clf = MultiAnnotatorGPClassifier(RBF(1.0, 0.7), optimizer=None).fit(X[:300], Y[:300])
    idx, who = clf.query(X[300:], n_queries=5)
    mean, std = clf.predict_latent(X[300:], return_std=True)
    var = std ** 2
    score = np.abs(mean) / np.sqrt(1 + var)
    assert set(idx) == set(np.argsort(score)[:5])
    sens, spec = clf.loo_reliabilities()
    p = special.ndtr(mean[idx] / np.sqrt(1 + var[idx]))
    right = p[:, None] * sens + (1 - p[:, None]) * spec
    np.testing.assert_array_equal(who, right.argmax(1))
    # reliable annotators (0, 1, 2) are the ones asked
    assert set(who) <= {0, 1, 2}
    # adding labels and refitting warm-starts EP: fewer sweeps than a cold fit
    Y2 = np.full((305, Y.shape[1]), np.nan)
    Y2[:300] = Y[:300]
    for i, r in zip(idx, who):
        Y2[300 + list(idx).index(i), r] = Y[300 + i, r]
    X2 = np.vstack([X[:300], X[300 + idx]])
    cold = MultiAnnotatorGPClassifier(RBF(1.0, 0.7), optimizer=None).fit(X2, Y2)
    clf.set_params(warm_start=True)
    warm = clf.fit(X2, Y2)
    assert warm.n_iter_ < cold.n_iter_
    assert warm.log_marginal_likelihood_value_ == pytest.approx(
        cold.log_marginal_likelihood_value_, rel=1e-4)


def test_baselines_and_simulator():
    Y = np.array([[1, 1, 0], [0, 0, np.nan], [1, 0, np.nan]], dtype=float)
    mv = majority_vote(Y, random_state=0)
    assert mv[0] == 1 and mv[1] == 0 and mv[2] in (0, 1)
    Xc, yc = concatenate_labels(np.arange(3.0)[:, None], Y)
    assert Xc.shape == (7, 1) and list(yc) == [1, 1, 0, 0, 0, 1, 0]
    z = np.random.default_rng(0).integers(0, 2, 20000)
    S = simulate_annotators(z, [0.9, 0.3], [0.6, 0.8], coverage=0.5, random_state=0)
    assert abs(np.mean(np.isnan(S)) - 0.5) < 0.01
    s0 = S[:, 0][z == 1]
    assert abs(np.nanmean(s0) - 0.9) < 0.02
    with pytest.raises(ValueError, match="coverage"):
        simulate_annotators(z, [0.9], [0.9], coverage=0.0)


def test_bad_input():
    X = np.random.default_rng(0).normal(size=(10, 2))
    Y = simulate_annotators(np.arange(10) % 2, [0.9, 0.8], [0.9, 0.8], random_state=0)
    clf = MultiAnnotatorGPClassifier()
    with pytest.raises(ValueError, match="n_samples"):
        clf.fit(X, Y[:5])
    with pytest.raises(ValueError, match="n_annotators"):
        clf.fit(X, Y[:, :, None])
    # a vector is the labels of one annotator
    one = MultiAnnotatorGPClassifier(RBF(1.0, 1.0), optimizer=None)
    np.testing.assert_array_equal(one.fit(X, Y[:, 0]).predict_proba(X),
                                  clone(one).fit(X, Y[:, [0]]).predict_proba(X))
    assert one.sensitivity_.shape == (1,)
    bad = Y.copy()
    bad[0, 0] = 2.0
    with pytest.raises(ValueError, match="two label values"):
        clf.fit(X, bad)
    bad[0, 0] = np.inf
    with warnings.catch_warnings():
        warnings.simplefilter("error")                # no RuntimeWarning from a cast
        with pytest.raises(ValueError, match="infinite values"):
            clf.fit(X, bad)
    empty = Y.copy()
    empty[:, 1] = np.nan
    with pytest.raises(ValueError, match=r"annotator column\(s\) \[1\]"):
        clf.fit(X, empty)
    # documented: an instance nobody labelled has a flat likelihood (a = b = 1)
    unl = Y.copy()
    unl[3] = np.nan
    fit = MultiAnnotatorGPClassifier(RBF(1.0, 1.0), optimizer=None).fit(X, unl)
    assert np.all(fit.result_._posterior is not None)
    lik = MultiAnnotator(np.nan_to_num(unl, nan=0.0) * 0 + unl, fit.sensitivity_,
                         fit.specificity_)
    assert np.all(lik.site_extra(10)[3] == 0.0)
    assert np.isfinite(fit.log_marginal_likelihood_value_)
