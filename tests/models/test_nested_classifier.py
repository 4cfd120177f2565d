"""NestedEPClassifier: the estimator around nested EP (the method itself is tested against
MCMC and dense references in tests/inference/test_nested_ep.py)."""
import os
import warnings

import numpy as np
import pytest
from sklearn.gaussian_process.kernels import RBF as SklearnRBF

import fastep
from fastep import NestedEPClassifier
from fastep.inference import nested_ep as ne
from fastep.kernels import RBF


def _blobs(n=15, seed=0):
    rng = np.random.default_rng(seed)
    X = np.vstack([rng.normal(c, 0.6, (n, 2)) for c in ([0, 0], [3, 0], [0, 3])])
    return X, np.repeat(["a", "b", "c"], n)


def test_fit_predicts_normalised_probabilities_and_correlated_latents():
    X, y = _blobs()
    clf = NestedEPClassifier().fit(X, y)
    p = clf.predict_proba(X)
    assert p.shape == (45, 3) and np.allclose(p.sum(1), 1.0) and np.all(p > 0)
    assert clf.score(X, y) > 0.9
    assert list(clf.predict(X[:3])) == list(clf.classes_[p[:3].argmax(1)])
    mean, cov = clf.predict_latent_cov(X[:5])
    assert mean.shape == (5, 3) and cov.shape == (5, 3, 3)
    assert np.all(np.linalg.eigvalsh(cov) > 0)
    m2, sd = clf.predict_latent(X[:5], return_std=True)
    np.testing.assert_array_equal(mean, m2)
    np.testing.assert_allclose(sd ** 2, np.einsum("icc->ic", cov))
    assert clf.converged_ and clf.likelihood_.n_classes == 3


def test_map_ii_raises_the_objective_and_ends_where_its_gradient_vanishes():
    # (with hyperprior=None these separable blobs walk the variance to ~1e5, where EP
    # converges no further than ~1e-9 and log Z wobbles at 1e-6: the prior keeps it sane)
    from fastep.priors import hyperprior_terms
    X, y = _blobs(seed=1)
    start = NestedEPClassifier(optimizer=None).fit(X, y)
    fit = NestedEPClassifier(tol=1e-10, max_iter=1000).fit(X, y)
    prior = hyperprior_terms("auto", ["variance", "lengthscale"], 2)
    theta0, theta = start.kernel_.theta, fit.kernel_.theta
    assert fit.log_marginal_likelihood_value_ + prior(theta)[0] > \
        start.log_marginal_likelihood_value_ + prior(theta0)[0]
    value, grad = fit.log_marginal_likelihood(theta, eval_gradient=True)
    assert value == pytest.approx(fit.log_marginal_likelihood_value_, rel=1e-8)
    assert np.max(np.abs(grad + prior(theta)[1])) < 1e-3 * abs(value)


def test_staged_map_ii_runs_on_subsamples_and_ends_at_the_same_optimum(monkeypatch, caplog):
    """From DENSE_STAGED_MIN_ROWS rows (lowered here to 200) MAP-II first runs on a
    subsample of n/4 rows, then on all rows preconditioned by its curvature,
    as the binary estimators do; it ends at the optimum of MAP-II on all rows alone (the
    MAP objective within 1e-6, relative).  The full-data run starts from seeded inner
    sites (the stage's on its rows, one outer update from its predictive on the others),
    from which nested EP reaches the cold start's fixed point in fewer sweeps."""
    import logging
    from fastep.models import _mlii
    from fastep.priors import hyperprior_terms
    rng = np.random.default_rng(0)
    X = np.vstack([rng.normal(c, 0.9, (100, 2)) for c in ([0, 0], [2, 0], [0, 2])])
    y = np.repeat([0, 1, 2], 100)
    prior = hyperprior_terms("auto", ["variance", "lengthscale"], 2)

    def objective(clf):
        return clf.log_marginal_likelihood_value_ + prior(clf.kernel_.theta)[0]
    monkeypatch.setattr(_mlii, "DENSE_STAGED_MIN_ROWS", 10 ** 9)
    plain = NestedEPClassifier(random_state=0).fit(X, y)
    monkeypatch.setattr(_mlii, "DENSE_STAGED_MIN_ROWS", 200)
    seeded = []
    real = _mlii.seed_sites
    monkeypatch.setattr(_mlii, "seed_sites", lambda *a: seeded.append(real(*a)) or seeded[-1])
    caplog.set_level(logging.INFO, logger="fastep")
    staged = NestedEPClassifier(random_state=0).fit(X, y)
    assert [r.getMessage().split(":")[0] for r in caplog.records
            if r.getMessage().startswith("ML-II on a subsample")] == \
        ["ML-II on a subsample of 75 rows"]
    assert objective(staged) == pytest.approx(objective(plain), rel=1e-6)
    assert len(seeded) == 1 and seeded[0] is not None
    alpha, beta = seeded[0]
    assert alpha.shape == beta.shape == (300, 3) and np.all(alpha >= 0.0)
    label = (np.arange(300), y)
    assert np.all(alpha[label] == 0.0) and np.all(beta[label] == 0.0)   # no site at a label
    assert np.count_nonzero(np.any(alpha != 0.0, axis=1)) == 300
    problem = staged._problem_
    K = problem.kernel(X)
    cold = ne.nested_ep(K, y, 3)
    warm = ne.nested_ep(K, y, 3, alpha, beta)
    assert warm.converged and cold.converged
    assert warm.log_marginal_likelihood == pytest.approx(cold.log_marginal_likelihood,
                                                         rel=1e-6)
    assert warm.n_iter < cold.n_iter


def test_sparse_fit_shares_inducing_inputs_and_matches_the_dense_fit():
    X, y = _blobs(n=40, seed=2)
    # the exact ML-II optimum of each (tol_optimizer): two fits compared to 1e-4
    dense = NestedEPClassifier(tol_optimizer=1e-6).fit(X, y)
    sparse = NestedEPClassifier(n_inducing=25, random_state=0, tol_optimizer=1e-6).fit(X, y)
    assert sparse.inducing_points_.shape == (25, 2) and sparse.converged_
    Xs = np.random.default_rng(3).uniform(-1.0, 4.0, (30, 2))
    # 25 inducing inputs on three blobs in 2-d: the projection loses little (measured
    # 3e-4 and 1.4e-6; with 5 inducing inputs the probabilities differ by 0.4)
    assert np.max(np.abs(sparse.predict_proba(Xs) - dense.predict_proba(Xs))) < 3e-3
    assert sparse.log_marginal_likelihood_value_ == pytest.approx(
        dense.log_marginal_likelihood_value_, rel=1e-4)
    Z = sparse.inducing_points_[:5]
    given = NestedEPClassifier(inducing_points=Z, optimizer=None).fit(X, y)
    np.testing.assert_array_equal(given.inducing_points_, Z)
    with pytest.raises(ValueError, match="n_inducing <= 120"):
        NestedEPClassifier(n_inducing=500).fit(X, y)
    with pytest.raises(ValueError, match=r"shape \(m, 2\)"):
        NestedEPClassifier(inducing_points=Z[:, :1]).fit(X, y)


def test_a_scikit_learn_kernel_is_fitted_through_the_adapter():
    X, y = _blobs(seed=4)
    clf = NestedEPClassifier(SklearnRBF(1.0)).fit(X, y)
    assert clf.score(X, y) > 0.9
    assert clf.kernel_.theta[0] != np.log(1.0)                 # ML-II moved it


def test_save_and_load_give_the_same_predictions(tmp_path):
    X, y = _blobs(seed=2)
    clf = NestedEPClassifier(RBF(1.0, [1.0, 1.5]), max_iter_optimizer=5).fit(X, y)
    path = os.path.join(tmp_path, "nested.npz")
    fastep.save_model(clf, path)
    back = fastep.load_model(path)
    np.testing.assert_array_equal(back.predict_proba(X), clf.predict_proba(X))
    assert back.log_marginal_likelihood_value_ == clf.log_marginal_likelihood_value_


def test_unconverged_ep_warns_naming_max_iter():
    X, y = _blobs(seed=3)
    with pytest.warns(fastep.ConvergenceWarning, match="max_iter=1"):
        NestedEPClassifier(optimizer=None, max_iter=1).fit(X, y)


def test_bad_inputs_are_value_errors():
    X, y = _blobs()
    with pytest.raises(ValueError, match="at least 2 classes"):
        NestedEPClassifier().fit(X, np.zeros(45))
    with pytest.raises(ValueError, match="damping"):
        NestedEPClassifier(damping=0.0).fit(X, y)
    clf = NestedEPClassifier(optimizer=None).fit(X, y)
    with pytest.raises(ValueError, match="features"):
        clf.predict_proba(X[:, :1])
    # sparse nested EP on the GPU: the settings named, with or without a GPU here
    with pytest.raises(ValueError, match="device='cpu', or drop n_inducing"):
        NestedEPClassifier(n_inducing=5, device="cuda").fit(X, y)
    with pytest.raises(ValueError, match="device"):
        NestedEPClassifier(device="tpu").fit(X, y)


def test_a_damaged_model_file_is_refused(tmp_path):
    X, y = _blobs()
    clf = NestedEPClassifier(optimizer=None).fit(X, y)
    path = os.path.join(tmp_path, "m.npz")
    fastep.save_model(clf, path)
    with np.load(path) as f:
        arrays = dict(f)
    arrays["site_alpha"] = -arrays["site_alpha"] - 1.0
    bad = os.path.join(tmp_path, "bad.npz")
    np.savez(bad, **arrays)
    with pytest.raises(ValueError, match="negative site precisions"):
        fastep.load_model(bad)


def test_evaluations_warm_start_from_the_last_sites():
    # a warm start at the converged sites is a fixed point: one sweep, the same evidence
    X, y = _blobs()
    K = RBF()(X)
    labels = np.repeat([0, 1, 2], 15)
    cold = ne.nested_ep(K, labels, 3, tol=1e-9, max_iter=500)
    warm = ne.nested_ep(K, labels, 3, cold.site_tau, cold.site_nu, tol=1e-6)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert warm.n_iter <= 2 and warm.converged
    assert warm.log_marginal_likelihood == pytest.approx(cold.log_marginal_likelihood,
                                                         rel=1e-9)
