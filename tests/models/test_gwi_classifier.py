"""GWIClassifier (seed 002): the fit on iris and its fitted state, the Adam and unsquared
variants, tempering, the iteration budget, save/load, bad input, the CLI demo."""

import warnings

import numpy as np
import pytest

import fastep
from fastep import GWIClassifier
from fastep.inference import gwi
from fastep.kernels import RBF
from fastep.likelihoods import RobustMax


@pytest.fixture(scope="module")
def iris():
    from sklearn.datasets import load_iris
    from fastep.datasets import split_standardized
    X, y = load_iris(return_X_y=True)
    return split_standardized(X, np.array(["setosa", "versicolor", "virginica"])[y],
                              random_state=0)


def test_iris_fit_and_fitted_state(iris, ref):
    Xtr, Xte, ytr, yte = iris
    with warnings.catch_warnings():                 # the defaults converge (issue 60)
        warnings.simplefilter("error", fastep.ConvergenceWarning)
        clf = GWIClassifier(random_state=0).fit(Xtr, ytr)
    assert clf.converged_
    assert clf.score(Xte, yte) >= 0.9
    p = clf.predict_proba(Xte)
    assert p.shape == (len(yte), 3) and np.max(np.abs(p.sum(1) - 1)) < 1e-10
    assert list(clf.classes_) == ["setosa", "versicolor", "virginica"]
    # predict_latent is the dense formula with the exported (paper) parameters, tempered
    K_zz = clf.kernel_(clf.inducing_points_)
    delta = gwi.JITTER * np.mean(np.diag(K_zz))
    mean, std = clf.predict_latent(Xte, return_std=True)
    var = std ** 2
    for j in range(3):
        m_ref, v_ref = ref.svgp_moments_dense(
            clf.kernel_.diag(Xte), clf.kernel_(Xte, clf.inducing_points_), K_zz, delta,
            clf.mean_weights_[j], clf.covariance_factors_[j])
        np.testing.assert_allclose(mean[:, j], m_ref + Xte @ clf.coef_[j] + clf.intercept_[j],
                                   rtol=1e-8, atol=1e-10)
        # cond(K_ZZ + delta I) is about 6e7 here: the explicit inverse in the reference is
        # accurate to about cond * 1e-16 * k(x, x) ~ 2e-8 absolute
        np.testing.assert_allclose(var[:, j], clf.temperature_ * v_ref, rtol=1e-6, atol=1e-7)
    assert clf.n_iter_ >= 1 and np.all(np.isfinite(clf.w2_))


@pytest.mark.filterwarnings("ignore::fastep.ConvergenceWarning")   # max_iter is a budget
def test_adam_and_unsquared_variants(iris):
    Xtr, Xte, ytr, yte = iris
    a = GWIClassifier(solver="adam", max_iter=40, batch_size=32, learning_rate=0.02,
                      random_state=0).fit(Xtr, ytr)
    assert a.score(Xte, yte) >= 0.85
    u = GWIClassifier(distance="unsquared", linear_mean=False, validation_fraction=0.0,
                      random_state=0).fit(Xtr, ytr)
    assert u.score(Xte, yte) >= 0.85 and u.temperature_ == 1.0
    assert np.all(u.coef_ == 0.0)


@pytest.mark.filterwarnings("ignore::fastep.ConvergenceWarning")   # max_iter is a budget
def test_tempering(iris):
    Xtr, Xte, ytr, yte = iris
    clf = GWIClassifier(validation_fraction=0.3, random_state=1).fit(Xtr, ytr)
    assert clf.temperature_ != 1.0 and clf.score(Xte, yte) >= 0.9
    # separable blobs, a huge prior variance and one iteration: every validation point is
    # right with tiny margins, so the loss falls all the way to T's lower bound -> warned
    rng = np.random.default_rng(0)
    X = np.vstack([rng.normal(c, 0.3, (30, 2)) for c in ([0, 0], [4, 0], [0, 4])])
    with pytest.warns(UserWarning, match="sits at its bound.*validation_fraction"):
        c = GWIClassifier(RBF(1e4, 1.0), max_iter=1, linear_mean=False, validation_fraction=0.2,
                          random_state=0).fit(X, np.repeat([0, 1, 2], 30))
    assert c.temperature_ == pytest.approx(1e-3)


def test_budget_exhausted_warns_naming_max_iter(iris):
    # issue 31: L-BFGS-B stopped at max_iter with converged_=False and no warning
    Xtr, _, ytr, _ = iris
    with pytest.warns(fastep.ConvergenceWarning, match=r"max_iter=3 iterations.*tol=0.0002.*"
                                                       r"Raise max_iter, or tol"):
        clf = GWIClassifier(n_inducing=20, max_iter=3, random_state=0).fit(Xtr, ytr)
    assert clf.n_iter_ == 3 and not clf.converged_
    # a stop by tol is converged and silent
    with warnings.catch_warnings():
        warnings.simplefilter("error", fastep.ConvergenceWarning)
        clf = GWIClassifier(n_inducing=20, tol=1e-2, random_state=0).fit(Xtr, ytr)
    assert clf.converged_ and clf.n_iter_ < 1000


@pytest.mark.parametrize("load", ["load_wine", "load_breast_cancer"])
def test_the_defaults_converge_on_bundled_tables(load):
    """GWIClassifier's defaults stopped at max_iter=200 with a ConvergenceWarning on every
    bundled table (issue 60); the averaged stopping rule ends them first."""
    import sklearn.datasets
    from fastep.datasets import split_standardized
    X, y = getattr(sklearn.datasets, load)(return_X_y=True)
    Xtr, Xte, ytr, yte = split_standardized(X, y, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", fastep.ConvergenceWarning)
        clf = GWIClassifier(random_state=0).fit(Xtr, ytr)
    assert clf.converged_ and clf.score(Xte, yte) > 0.9


def test_save_load_round_trip_is_exact(tmp_path):
    # issue 31: load_model recomputed C = chol(K_ZZ + delta I) with threaded BLAS while fit
    # computed it single-threaded; from M ~ 150 on (two cores) OpenBLAS's threaded dpotrf
    # rounds differently and predict_proba differed by 1e-14 .. 1e-12
    from sklearn.datasets import load_digits
    from fastep.datasets import split_standardized
    X, y = load_digits(return_X_y=True)
    Xtr, Xte, ytr, _ = split_standardized(X[:500], y[:500], random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", fastep.ConvergenceWarning)
        clf = GWIClassifier(n_inducing=150, max_iter=5, validation_fraction=0.1,
                            random_state=0).fit(Xtr, ytr)
    path = tmp_path / "gwi.npz"
    fastep.save_model(clf, path)
    back = fastep.load_model(path)
    assert np.array_equal(back.predict_proba(Xte), clf.predict_proba(Xte))
    for a, b in zip(back.predict_latent(Xte, return_std=True),
                    clf.predict_latent(Xte, return_std=True)):
        assert np.array_equal(a, b)
    assert np.array_equal(back._C, clf._C)


def test_bad_input_messages(iris):
    Xtr, _, ytr, _ = iris
    with pytest.raises(ValueError, match="at least 2 classes"):
        GWIClassifier().fit(Xtr, np.zeros(len(Xtr)))
    for eps in (0.0, 1.0, -0.1, 1.5):
        with pytest.raises(ValueError, match=r"'epsilon' parameter.*range \(0.0, 1.0\)"):
            GWIClassifier(epsilon=eps).fit(Xtr, ytr)
    with pytest.raises(ValueError, match="'n_inducing' parameter.*at most.*Got 200"):
        GWIClassifier(n_inducing=200).fit(Xtr, ytr)
    with pytest.raises(ValueError, match="'n_inducing'.*validation_fraction=0.1.*\\(95\\)"):
        GWIClassifier(n_inducing=100, validation_fraction=0.1).fit(Xtr, ytr)
    with pytest.raises(ValueError, match="'solver' parameter"):
        GWIClassifier(solver="sgd").fit(Xtr, ytr)
    with pytest.raises(ValueError, match="n_classes"):
        RobustMax(1)
    with pytest.raises(ValueError, match="epsilon"):
        RobustMax(3, epsilon=1.0)
    with pytest.raises(ValueError, match=r"\(J - 1\)/J"):
        RobustMax(3, epsilon=0.7)
    with pytest.raises(ValueError, match="var must be positive"):
        RobustMax(3).prob_largest(np.zeros((1, 3)), np.array([[1.0, 0.0, 1.0]]))
    with pytest.raises(ValueError, match="class indices"):
        RobustMax(3).prob_largest_grad(np.zeros((1, 3)), np.ones((1, 3)), np.array([3]))


def test_lazy_export():
    assert fastep.GWIClassifier is GWIClassifier
    assert "GWIClassifier" in fastep.__all__ and "RobustMax" in fastep.likelihoods.__all__


def test_cli_demo_multiclass():
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "-m", "fastep.cli", "demo", "multiclass", "--dataset",
                        "iris"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    acc = float(next(l for l in r.stdout.splitlines() if "test accuracy" in l).split(":")[1])
    assert acc > 0.9
    assert "L-BFGS-B iteration 25" in r.stderr          # progress of the fit
