"""The contract every estimator shares: scikit-learn conformance (all seven estimators,
here), one meaning per
parameter name, one validation path, ``predict_latent``, fitted attributes, random
states, cloning, pickling in worker processes, and no mutation of what the user passed."""
import copy
import pathlib
import re
import warnings

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.model_selection import GridSearchCV
from sklearn.utils.estimator_checks import parametrize_with_checks

import fastep
from fastep import (CensoredGPRegressor, EPGaussianProcessClassifier,
                    EPGaussianProcessRegressor, GWIClassifier, MultiAnnotatorGPClassifier,
                    NestedEPClassifier, OrdinalGPClassifier, SparseGPRegressor)
from fastep.datasets import simulate_annotators
from fastep.kernels import RBF
from fastep.likelihoods import Logistic

#: Every estimator, from the package's one registry
ALL = tuple(getattr(fastep, name) for name in fastep.ESTIMATORS)
EP = (EPGaussianProcessClassifier, CensoredGPRegressor, MultiAnnotatorGPClassifier,
      EPGaussianProcessRegressor, OrdinalGPClassifier)

#: The label matrix (n, R) of MultiAnnotatorGPClassifier is its target; a vector is read
#: as one annotator's labels.  This check passes a column (n, 1) and expects the warning a
#: vector-target estimator gives; for this estimator (n, 1) is one annotator, not a typo.
ANNOTATOR_EXPECTED = {
    "check_supervised_y_2d": "the target is a label matrix (n, R): a column (n, 1) is the "
                             "labels of one annotator, not a vector given as a column",
}


@parametrize_with_checks([EPGaussianProcessClassifier(optimizer=None),
                          EPGaussianProcessClassifier(method="sequential", max_iter=30),
                          CensoredGPRegressor(optimizer=None),
                          CensoredGPRegressor(max_iter=50),
                          MultiAnnotatorGPClassifier(optimizer=None, max_em_iter=20),
                          SparseGPRegressor(n_inducing=None),
                          GWIClassifier(max_iter=20, random_state=0),
                          EPGaussianProcessRegressor(optimizer=None),
                          EPGaussianProcessRegressor(likelihood="gaussian", max_iter=50),
                          OrdinalGPClassifier(optimizer=None),
                          OrdinalGPClassifier(max_iter=50),
                          NestedEPClassifier(optimizer=None)],
                         expected_failed_checks=lambda est: ANNOTATOR_EXPECTED if isinstance(
                             est, MultiAnnotatorGPClassifier) else {})
def test_sklearn_compatible(estimator, check):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", fastep.ConvergenceWarning)
        check(estimator)


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(4)
    X = rng.normal(size=(50, 2))
    f = np.sin(2 * X[:, 0]) + 0.5 * X[:, 1]
    return {
        EPGaussianProcessClassifier: (X, (f > 0).astype(int)),
        CensoredGPRegressor: (X, np.maximum(f + 0.1 * rng.normal(size=50), -0.3)),
        MultiAnnotatorGPClassifier: (X, simulate_annotators((f > 0).astype(int), [0.9, 0.7],
                                                            [0.8, 0.7], random_state=0)),
        SparseGPRegressor: (X, f + 0.1 * rng.normal(size=50)),
        GWIClassifier: (X, np.digitize(f, [-0.5, 0.5])),
        EPGaussianProcessRegressor: (X, f + 0.1 * rng.standard_t(3, size=50)),
        OrdinalGPClassifier: (X, np.digitize(f, [-0.5, 0.5])),
        NestedEPClassifier: (X, np.digitize(f, [-0.5, 0.5])),
    }


def _quick(cls, **kw):
    extra = {"n_inducing": 10, "max_iter": 20} if cls is GWIClassifier else {}
    if cls is SparseGPRegressor:
        extra = {"n_inducing": 10}
    return cls(**{**extra, **kw})


@pytest.mark.parametrize("cls", ALL)
def test_predict_latent_returns_mean_or_mean_and_std(cls, data):
    X, y = data[cls]
    est = _quick(cls, random_state=0).fit(X, y)
    mean = est.predict_latent(X[:7])
    mean2, std = est.predict_latent(X[:7], return_std=True)
    np.testing.assert_array_equal(mean, mean2)
    assert isinstance(mean, np.ndarray) and mean.shape == std.shape
    assert mean.shape[0] == 7 and np.all(std > 0)


@pytest.mark.parametrize("cls", EP)
@pytest.mark.parametrize("sparse", [False, True])
def test_every_ep_estimator_has_the_fitted_attributes(cls, sparse, data):
    X, y = data[cls]
    est = cls(optimizer=None, **({"n_inducing": 10, "random_state": 0} if sparse else {}))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", fastep.ConvergenceWarning)
        est.fit(X, y)
    assert est.kernel_ == RBF() and est.kernel_ is not est.kernel
    assert np.isfinite(est.log_marginal_likelihood_value_)
    assert isinstance(est.n_iter_, int) and est.n_iter_ >= 2
    assert isinstance(est.converged_, bool)
    assert hasattr(est, "likelihood_")
    assert hasattr(est, "inducing_points_") == sparse
    if sparse:
        assert est.inducing_points_.shape == (10, 2)


@pytest.mark.parametrize("cls", [c for c in ALL if c is not GWIClassifier])
def test_every_estimator_with_an_evidence_gives_it_and_its_gradient_at_any_theta(cls, data):
    """``log_marginal_likelihood(theta, eval_gradient)`` on every estimator with an
    evidence (GWI has none): its value at the fitted theta is the fitted one, and its
    gradient matches central differences of the values (EP run tight)."""
    X, y = data[cls]
    tight = {} if cls is SparseGPRegressor else {"tol": 1e-10, "max_iter": 500}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", fastep.ConvergenceWarning)
        est = _quick(cls, random_state=0, optimizer=None, **tight).fit(X, y)
    problem = est._evidence_problems()[0]
    theta = problem.theta
    value, grad = est.log_marginal_likelihood(theta, eval_gradient=True)
    assert value == pytest.approx(est.log_marginal_likelihood_value_, rel=1e-8, abs=1e-8)
    assert est.log_marginal_likelihood() == est.log_marginal_likelihood_value_
    h = 1e-5
    fd = [(est.log_marginal_likelihood(theta + h * e) - est.log_marginal_likelihood(theta - h * e))
          / (2 * h) for e in np.eye(theta.size)]
    np.testing.assert_allclose(grad, fd, rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match="theta!=None"):
        est.log_marginal_likelihood(eval_gradient=True)


def test_all_estimators_share_one_base():
    """One base for the seven (their common fitted attributes set in one place), and an
    evidence wherever the model has one: every estimator but GWI's (whose objective is a
    Wasserstein bound, not an evidence)."""
    from fastep.models._base import FastepEstimator
    assert all(issubclass(cls, FastepEstimator) for cls in ALL), ALL
    with_evidence = {cls.__name__ for cls in ALL if hasattr(cls, "log_marginal_likelihood")}
    assert with_evidence == set(fastep.ESTIMATORS) - {"GWIClassifier"}


@pytest.mark.parametrize("cls", ALL)
@pytest.mark.parametrize("seed", [None, 3, np.random.RandomState(3), np.random.default_rng(3)])
def test_random_state_accepts_what_scikit_learn_accepts(cls, seed, data):
    X, y = data[cls]
    est = _quick(cls, random_state=seed)
    if cls in EP:
        est.set_params(n_inducing=8, optimizer=None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", fastep.ConvergenceWarning)
        est.fit(X, y)
    if isinstance(seed, int):               # reproducible
        again = clone(est).fit(X, y)
        np.testing.assert_array_equal(again.predict_latent(X), est.predict_latent(X))


@pytest.mark.parametrize("cls", ALL)
def test_one_validation_path_and_voice(cls, data):
    """Shared parameters fail with scikit-learn's message, the same for every estimator."""
    X, y = data[cls]
    names = set(cls().get_params())
    cases = {"tol": 0, "max_iter": 0, "n_restarts_optimizer": -1, "damping": 0.0,
             "n_inducing": 0, "power": 1.5, "device": "gpu", "method": "fast",
             "random_state": "seed", "optimizer": "sgd"}
    for name, bad in cases.items():
        if name not in names:
            continue
        with pytest.raises(ValueError, match=rf"^The '{name}' parameter of {cls.__name__} "
                                             rf"must be .* Got {re.escape(repr(bad))} instead"):
            cls(**{name: bad}).fit(X, y)


def test_max_iter_inf_is_a_clear_error():
    X, y = np.arange(6.0)[:, None], [0, 1, 0, 1, 0, 1]
    with pytest.raises(ValueError, match="'max_iter' parameter .* Got inf instead"):
        EPGaussianProcessClassifier(max_iter=np.inf).fit(X, y)
    with pytest.raises(ValueError, match="max_iter must be an integer"):
        fastep.ep(np.eye(3), np.ones(3), fastep.likelihoods.Probit(), max_iter=np.inf)


@pytest.mark.parametrize("cls", EP)
def test_power_without_inducing_points_is_refused(cls, data):
    X, y = data[cls]
    with pytest.raises(ValueError, match="'power' parameter .* needs inducing points"):
        cls(power=0.5).fit(X, y)


@pytest.mark.parametrize("cls", ALL)
def test_clone_and_grid_search_in_worker_processes(cls, data):
    X, y = data[cls]
    est = _quick(cls, random_state=0)
    if cls in EP:
        est.set_params(optimizer=None)
    assert clone(est).get_params() == est.get_params()
    if cls is MultiAnnotatorGPClassifier:      # its score needs true labels, not Y
        return
    grid = {"kernel": [RBF(1.0, 0.5), RBF(1.0, 2.0)]}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", fastep.ConvergenceWarning)
        search = GridSearchCV(est, grid, cv=2, n_jobs=2).fit(X, y)
    assert search.best_estimator_.kernel in grid["kernel"]
    np.testing.assert_array_equal(search.predict(X), search.best_estimator_.predict(X))


@pytest.mark.parametrize("cls", EP + (SparseGPRegressor,))
def test_the_kernel_and_likelihood_passed_are_never_modified(cls, data):
    X, y = data[cls]
    kernel = RBF(1.3, 0.7)
    kw = {"likelihood": Logistic()} if cls is EPGaussianProcessClassifier else {}
    before = copy.deepcopy((kernel, kw))
    est = cls(kernel, **kw, **({"n_inducing": 10} if cls is SparseGPRegressor else {}))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", fastep.ConvergenceWarning)
        est.fit(X, y)
    assert kernel == before[0] and est.kernel_ != kernel           # ML-II moved a copy
    if kw:
        assert kw["likelihood"].__dict__ == before[1]["likelihood"].__dict__


def test_censored_limits_of_fit_are_remembered(data):
    X, t = data[CensoredGPRegressor]
    reg = CensoredGPRegressor(noise_variance=0.05, optimizer=None).fit(X, t, lower=-0.3)
    Xs = X[:10] + 0.3
    np.testing.assert_array_equal(reg.predict(Xs), reg.predict(Xs, lower=-0.3))
    assert not np.allclose(reg.predict(Xs), reg.predict(Xs, lower=-np.inf))
    assert np.all(reg.predict(Xs) >= -0.3)
    np.testing.assert_array_equal(reg.predict_censored_proba(Xs)[0],
                                  reg.predict_censored_proba(Xs, lower=-0.3)[0])
    assert reg.lower_ == -0.3 and reg.upper_ is None


def test_docs_table_lists_every_parameter_and_fitted_attribute():
    text = (pathlib.Path(__file__).resolve().parents[2] / "docs" / "user_guide"
            / "choosing_a_model.md").read_text()
    table = text[text.index("| parameter | meaning |"):text.index("Every estimator has")]
    listed = set(re.findall(r"`(\w+)`", table))
    shared = {name for cls in ALL for name in cls().get_params()
              if sum(name in c().get_params() for c in ALL) >= 2}
    assert not shared - listed, shared - listed
    for attr in ("kernel_", "log_marginal_likelihood_value_", "n_iter_", "converged_",
                 "inducing_points_"):
        assert attr in listed


class _MarkedProblem:
    """A one-parameter ML-II problem whose 'sites' record the theta they were computed at;
    the evidence is -(theta - 1)^2."""

    X = np.zeros((4, 1))                     # the rows of data (ML-II's rule per row)

    def __init__(self, theta=3.0):
        self.theta = np.array([theta])
        self.bounds = [(-10.0, 10.0)]

    def with_theta(self, theta):
        return _MarkedProblem(float(np.asarray(theta)[0]))

    def draw(self, rng):
        return rng.uniform(-10, 10, 1)

    def evidence(self, sites, tol=None):
        t = float(self.theta[0])
        result = type("R", (), {"site_tau": np.full(2, t), "site_nu": np.zeros(2),
                                "n_iter": 1})()
        return -(t - 1.0) ** 2, np.array([-2.0 * (t - 1.0)]), result


def test_ml2_warm_start_sites_belong_to_the_returned_theta():
    """A grid optimiser returns its best point, not its last evaluation: the sites handed
    to the final EP run are those computed at the returned theta (also across restarts)."""
    from fastep.models._mlii import maximize_evidence

    def grid(obj, start, bounds):
        values = {t: obj(np.array([t]), eval_gradient=False) for t in (5.0, 1.0, 3.0, 7.0)}
        best = min(values, key=values.get)
        return np.array([best]), values[best]

    problem, sites = maximize_evidence(_MarkedProblem(), grid)
    assert problem.theta[0] == 1.0 and np.all(sites[0] == 1.0)
    problem, sites = maximize_evidence(_MarkedProblem(), "L-BFGS-B", n_restarts=3,
                                       rng=np.random.default_rng(0))
    assert np.all(sites[0] == problem.theta[0])
    assert problem.theta[0] == pytest.approx(1.0, abs=1e-5)


def test_ep_parameters_are_checked_once_at_the_boundary(monkeypatch):
    """``device``, ``method``, ``damping``, ``tol``, ``max_iter`` and ``power`` are checked
    once, by the estimator's ``fit`` (scikit-learn's constraints; ``device`` is resolved
    there, once): below it dense and sparse EP run without checking them again, under the
    estimators' names (``run_ep``, ``run_sparse_ep``).  The public fastep.ep and
    fastep.sparse_ep check them for their own callers (the counters see those checks)."""
    import sys
    calls = []
    checks = [(sys.modules["fastep.inference.ep"], ("check_method", "check_sweep_controls")),
              (sys.modules["fastep.inference.sparse_ep._run"], ("check_controls",
                                                               "check_sweep_controls"))]
    for module, names in checks:
        for name in names:
            real = getattr(module, name)
            monkeypatch.setattr(module, name, lambda *a, _n=name, _f=real, **k:
                                (calls.append(_n), _f(*a, **k))[1])
    resolved = []
    real_resolve = fastep.backend.resolve
    for module in list(sys.modules.values()):
        if getattr(module, "__name__", "").startswith("fastep") and \
                getattr(module, "resolve", None) is real_resolve:
            # a name is checked; a Backend already resolved passes through unchecked
            monkeypatch.setattr(module, "resolve", lambda *a, **k: (
                resolved.append(a[:1]) if isinstance(a[0], str) else None,
                real_resolve(*a, **k))[1])
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 2))
    y = (X[:, 0] > 0).astype(int)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        EPGaussianProcessClassifier(max_iter_optimizer=3).fit(X, y)
        assert calls == [] and resolved == [("cpu",)], (calls, resolved)
        del resolved[:]
        EPGaussianProcessClassifier(n_inducing=8, power=0.5, random_state=0,
                                    max_iter_optimizer=3).fit(X, y)
        assert calls == [] and resolved == [("cpu",)], (calls, resolved)
    K = fastep.kernels.RBF()(X)
    fastep.ep(K, 2.0 * y - 1, fastep.likelihoods.Probit())
    fastep.sparse_ep(fastep.kernels.RBF(), X[:5], X, 2.0 * y - 1, fastep.likelihoods.Probit())
    assert calls == ["check_method", "check_sweep_controls", "check_controls",
                     "check_sweep_controls"], calls


def test_convergence_warnings_point_at_the_users_fit_call():
    """ML-II's, EM's, Laplace's and GWI's ConvergenceWarnings name the line of the user's
    ``fit`` (not fastep's, nor scikit-learn's fit wrapper or Pipeline), also when the
    regressor replays the warnings of its best start."""
    import inspect
    import warnings

    from fastep import (EPGaussianProcessClassifier, EPGaussianProcessRegressor,
                        GWIClassifier, MultiAnnotatorGPClassifier)
    from fastep.datasets import simulate_annotators
    from fastep.exceptions import ConvergenceWarning
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 2))
    z = (X[:, 0] > 0).astype(int)
    Y = simulate_annotators(z, [0.9, 0.8], [0.9, 0.8], random_state=0)
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    from fastep import CensoredGPRegressor
    robust = EPGaussianProcessRegressor(likelihood="student_t", max_iter_optimizer=1)
    pipe = make_pipeline(StandardScaler(), EPGaussianProcessClassifier(max_iter_optimizer=1))
    laplace = CensoredGPRegressor(inference="laplace", max_iter=1, optimizer=None)
    fits = [lambda: EPGaussianProcessClassifier(max_iter_optimizer=1).fit(X, z),
            lambda: pipe.fit(X, z),
            lambda: laplace.fit(X, np.maximum(X[:, 0], 0.0), lower=0.0),
            lambda: MultiAnnotatorGPClassifier(max_iter=2, max_em_iter=1).fit(X, Y),
            lambda: robust.fit(X, X[:, 0]),
            lambda: GWIClassifier(max_iter=2, n_inducing=5).fit(X, z)]
    for fit in fits:
        line = inspect.getsourcelines(fit)[1]
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            fit()
        ours = [w for w in caught if issubclass(w.category, ConvergenceWarning)]
        assert ours
        for w in ours:
            assert (w.filename, w.lineno) == (__file__, line), (w.filename, w.lineno,
                                                                 str(w.message)[:60])
