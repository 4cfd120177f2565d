"""ML-II as the user waits for it: hyperpriors (MAP-II), the EP tolerance that follows the
optimiser, warm starts, and one-vs-rest problems in worker processes."""
import logging
import warnings

import numpy as np
import pytest
from scipy import stats

import fastep
from fastep import EPGaussianProcessClassifier, load_model, save_model
from fastep.inference import ConvergenceWarning
from fastep.kernels import RBF
from fastep.likelihoods import Probit
from fastep.models import _mlii
from fastep.priors import AUTO, LogNormal, hyperprior_terms


@pytest.fixture(scope="module")
def three_classes():
    rng = np.random.default_rng(5)
    centers = np.array([[0.0, 0.0], [2.0, 0.0], [0.0, 2.0]])
    X = np.vstack([c + 0.8 * rng.normal(size=(40, 2)) for c in centers])
    return X, np.repeat(["a", "b", "c"], 40)


def test_lognormal_is_a_normal_on_the_log_parameter():
    p = LogNormal(median=3.0, sigma=0.7)
    t = np.linspace(-2.0, 4.0, 7)
    np.testing.assert_allclose(p.log_density(t), stats.norm(np.log(3.0), 0.7).logpdf(t),
                               rtol=1e-13)
    h = 1e-6
    fd = (p.log_density(t + h) - p.log_density(t - h)) / (2 * h)
    np.testing.assert_allclose(p.log_density_gradient(t), fd, rtol=1e-7)


def test_hyperprior_terms_match_names_and_reject_unknown_ones():
    names = ["variance", "lengthscale[0]", "lengthscale[1]"]
    terms = hyperprior_terms({"lengthscale": LogNormal(2.0, 1.0)}, names, 5)
    theta = np.array([0.3, 0.1, -0.2, 7.0, 8.0])
    value, grad = terms(theta)
    ref = LogNormal(2.0, 1.0)
    assert value == pytest.approx(float(ref.log_density(0.1) + ref.log_density(-0.2)))
    np.testing.assert_allclose(grad, [0.0, ref.log_density_gradient(0.1),
                                      ref.log_density_gradient(-0.2), 0.0, 0.0])
    assert hyperprior_terms(None, names, 3) is None
    assert hyperprior_terms("auto", ["lengthscale"], 1) is None       # no variance: no prior
    with pytest.raises(ValueError, match="hyperprior names \\['noise'\\]"):
        hyperprior_terms({"noise": LogNormal()}, names, 3)


@pytest.mark.parametrize("bad", ["map", {"variance": (1.0, 2.0)}, 3.0])
def test_bad_hyperprior_is_a_clear_error(bad):
    X = np.linspace(-1, 1, 20)[:, None]
    y = (X[:, 0] > 0).astype(int)
    with pytest.raises(ValueError, match="hyperprior"):
        EPGaussianProcessClassifier(hyperprior=bad).fit(X, y)
    with pytest.raises(ValueError, match="hyperprior"):              # also without ML-II
        EPGaussianProcessClassifier(hyperprior=bad, optimizer=None).fit(X, y)
    with pytest.raises(ValueError, match="n_jobs"):
        EPGaussianProcessClassifier(n_jobs=0).fit(X, y)
    with pytest.raises(ValueError, match="median"):
        LogNormal(median=0.0)
    with pytest.raises(ValueError, match="sigma"):
        LogNormal(sigma=10 ** 400)                 # beyond float's range: no OverflowError


def test_map_ii_stops_the_variance_walk_on_separable_classes():
    """Noiseless labels: the evidence keeps rising with the kernel variance (plain ML-II ends
    at the bound with a flat-evidence warning); the default prior stops it, where the
    gradient of log evidence + log prior vanishes (finite differences of EP's log Z)."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 2))
    y = (X[:, 0] + X[:, 1] > 0).astype(int)
    with pytest.warns(ConvergenceWarning, match="flat"):
        ml = EPGaussianProcessClassifier(hyperprior=None).fit(X, y)
    assert ml.kernel_.variance > 0.99e5
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        mp = EPGaussianProcessClassifier(tol=1e-10).fit(X, y)
    assert mp.kernel_.variance < 1e3
    theta = mp.kernel_.theta
    h = 1e-4
    fd = np.array([(mp.log_marginal_likelihood(theta + e) - mp.log_marginal_likelihood(theta - e))
                   / (2 * h) for e in np.eye(2) * h])
    prior = np.array([AUTO["variance"].log_density_gradient(theta[0]), 0.0])
    scale = np.abs(fd).max() + np.abs(prior).max()
    assert np.abs(fd + prior).max() < 2e-3 * scale


def test_warm_started_ep_at_its_fixed_point_stops_after_one_sweep():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(80, 2))
    y = np.sign(X[:, 0] + 0.3 * rng.normal(size=80))
    K = RBF(variance=2.0)(X)
    cold = fastep.ep(K, y, Probit(), tol=1e-9)
    assert cold.n_iter >= 2
    warm = fastep.ep(K, y, Probit(), tol=1e-6, site_tau=cold.site_tau, site_nu=cold.site_nu)
    assert warm.n_iter == 1 and warm.converged
    assert warm.log_marginal_likelihood == pytest.approx(cold.log_marginal_likelihood, rel=1e-9)
    # a warm start away from the fixed point still runs until the sites settle
    moved = fastep.ep(RBF(variance=4.0)(X), y, Probit(), tol=1e-8, site_tau=cold.site_tau,
                      site_nu=cold.site_nu)
    assert moved.n_iter > 1


class _Evaluations(logging.Handler):
    def __init__(self):
        super().__init__(logging.INFO)
        self.n = 0

    def emit(self, record):
        self.n += "ML-II step" in record.getMessage()


def _fit_counting(est, X, y):
    handler, logger = _Evaluations(), logging.getLogger("fastep")
    logger.addHandler(handler)
    level = logger.level
    logger.setLevel(logging.INFO)
    try:
        est.fit(X, y)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    return est, handler.n


def test_loose_ep_during_ml2_ends_at_the_evidence_of_tight_ep(monkeypatch):
    """The EP tolerance that follows the optimiser returns the evidence of ML-II run at
    the estimator's tolerance throughout (relative gap below 1e-6)."""
    rng = np.random.default_rng(2)
    X = rng.normal(size=(150, 3))
    y = (np.sin(2 * X[:, 0]) + X[:, 1] + 0.3 * rng.normal(size=150) > 0).astype(int)
    fast, n_fast = _fit_counting(EPGaussianProcessClassifier(hyperprior=None), X, y)
    monkeypatch.setattr(_mlii, "LOOSE_EP_TOL", 1e-6)
    tight, n_tight = _fit_counting(EPGaussianProcessClassifier(hyperprior=None), X, y)
    a, b = fast.log_marginal_likelihood_value_, tight.log_marginal_likelihood_value_
    assert abs(a - b) < 1e-6 * abs(b)
    assert n_fast > 0 and n_tight > 0


def test_one_vs_rest_in_workers_matches_in_process_and_forwards_warnings(three_classes,
                                                                       monkeypatch):
    from fastep.models import _base
    monkeypatch.setattr(_base, "JOBS_MIN_ROWS", 0)          # workers even for 120 rows
    X, y = three_classes
    serial = EPGaussianProcessClassifier(random_state=0).fit(X, y)
    workers = EPGaussianProcessClassifier(random_state=0, n_jobs=2).fit(X, y)
    for a, b in zip(serial._latents, workers._latents):
        np.testing.assert_allclose(a.theta, b.theta, rtol=1e-6)
    np.testing.assert_allclose(serial.predict_proba(X), workers.predict_proba(X), atol=1e-8)
    # an ML-II budget of one step warns in every problem, also in the workers
    with pytest.warns(ConvergenceWarning) as caught:
        EPGaussianProcessClassifier(max_iter_optimizer=1, n_jobs=2).fit(X, y)
    budget = [w for w in caught if "max_iter_optimizer=1" in str(w.message)]
    assert len(budget) == 3


def test_hyperprior_dict_round_trips_through_save_and_load(tmp_path, three_classes):
    X, y = three_classes
    prior = {"variance": LogNormal(2.0, 1.5), "lengthscale": LogNormal(1.0, 1.0)}
    clf = EPGaussianProcessClassifier(hyperprior=prior, optimizer=None).fit(X, y)
    save_model(clf, tmp_path / "m.npz")
    back = load_model(tmp_path / "m.npz")
    assert back.hyperprior == prior
    np.testing.assert_array_equal(back.predict_proba(X), clf.predict_proba(X))


class _Bowl:
    """A stand-in ML-II problem: log Z(theta) = -(c + a |theta - t0|^2 (1 + |theta|^2 / 4)),
    smooth, known maximum c at t0; no EP (the evidence and gradient are exact)."""

    def __init__(self, theta, c=10.0, a=50.0):
        self.theta, self.c, self.a = np.asarray(theta, float), c, a
        self.t0 = np.array([0.3, -0.2])
        self.bounds = np.array([[-20.0, 20.0]] * 2)

    def with_theta(self, theta):
        return _Bowl(theta, self.c, self.a)

    def evidence(self, sites=None, tol=None):
        d, q = self.theta - self.t0, 1.0 + self.theta @ self.theta / 4
        value = -(self.c + self.a * (d @ d) * q)
        grad = -self.a * (2 * d * q + (d @ d) * self.theta / 2)
        return value, grad, None


def test_a_start_far_from_the_optimum_does_not_loosen_the_relative_tolerance():
    """ML-II's stopping rules are relative to the evidence: a start whose |log Z| is 10^4
    times the optimum's must end as close (relative to the optimum's log Z) as a start
    near it.  Before the rescale, the start's scale let L-BFGS-B stop once a step gained
    less than 1e-6 of the start's |log Z|."""
    tol = 1e-6
    ends = []
    for start in ([12.0, -9.0], [0.35, -0.25]):
        problem, _ = _mlii.maximize_evidence(_Bowl(start), tol=tol)
        ends.append(problem.evidence()[0])
    far, near = ends
    assert abs(_Bowl([12.0, -9.0]).evidence()[0]) > 1e4 * 10
    assert abs(far - (-10.0)) <= 10 * tol * 10.0, far
    assert abs(near - (-10.0)) <= 10 * tol * 10.0, near


def test_sparse_subsample_stages_end_at_an_eighth_of_the_rows_or_62500():
    assert _mlii.subsample_stages(49_999) == []
    assert _mlii.subsample_stages(50_000) == [6_250]
    assert _mlii.subsample_stages(100_000) == [12_500]
    assert _mlii.subsample_stages(199_999) == [24_999]
    assert _mlii.subsample_stages(200_000) == [6_250, 25_000]
    assert _mlii.subsample_stages(399_999) == [12_499, 49_999]
    assert _mlii.subsample_stages(499_999) == [15_624, 62_499]
    assert _mlii.subsample_stages(500_000) == [15_625, 62_500]
    assert _mlii.subsample_stages(1_000_000) == [15_625, 62_500]
    assert _mlii.subsample_stages(10_000_000) == [15_625, 62_500]


def test_dense_subsample_stages_grow_by_four_from_1000_rows():
    assert _mlii.subsample_stages(999, dense=True) == []
    assert _mlii.subsample_stages(1_000, dense=True) == [250]
    assert _mlii.subsample_stages(1_257, dense=True) == [78, 314]      # digits
    assert _mlii.subsample_stages(5_000, dense=True) == [78, 312, 1_250]


def test_seeded_sites_are_one_ep_update_from_the_subsample_predictive():
    """seed_sites against a dense NumPy predictive and quadrature tilted moments: on the
    subsample's rows its sites, on the others tau = 1/v_hat - 1/v, nu = m_hat/v_hat - m/v
    from the tilted moments of Phi(y f) N(f | m, v), (m, v) the subsample's predictive."""
    from scipy import integrate
    from fastep.models._latent import EPConfig, LatentGP
    from fastep.backend import resolve
    rng = np.random.default_rng(3)
    X = rng.normal(size=(120, 2))
    y = np.where(np.sin(2.0 * X[:, 0]) + 0.3 * rng.normal(size=120) > 0, 1.0, -1.0)
    kernel = RBF(2.0, 0.8)
    problem = LatentGP(X, y, kernel, Probit(), EPConfig(resolve("cpu", "test")))
    idx = np.sort(rng.choice(120, 40, replace=False))
    sub = problem.rows(idx)
    first = sub.run()
    stage_sites = (first.site_tau, first.site_nu)
    assert _mlii.seed_sites(problem, sub, None, idx) is None      # no sites: no seeds
    tau, nu = _mlii.seed_sites(problem, sub, stage_sites, idx)
    fit = sub.run(stage_sites)                 # the warm run seed_sites makes, repeated
    np.testing.assert_array_equal(tau[idx], fit.site_tau)
    np.testing.assert_array_equal(nu[idx], fit.site_nu)
    K, Ks = kernel(X[idx]), kernel(X[idx], X)
    A = K + np.diag(1.0 / fit.site_tau)                 # probit sites: tau > 0
    m = Ks.T @ np.linalg.solve(A, fit.site_nu / fit.site_tau)
    v = kernel.diag(X) - np.einsum("ij,ij->j", Ks, np.linalg.solve(A, Ks))
    rest = np.setdiff1d(np.arange(120), idx)
    for i in rest[:25]:
        sd = np.sqrt(v[i])
        w = lambda f, k: f ** k * stats.norm.cdf(y[i] * f) * stats.norm.pdf(f, m[i], sd)
        z0, z1, z2 = (integrate.quad(w, m[i] - 12 * sd, m[i] + 12 * sd, args=(k,),
                                     epsabs=0, epsrel=1e-12)[0] for k in range(3))
        mean, var = z1 / z0, z2 / z0 - (z1 / z0) ** 2
        assert tau[i] == pytest.approx(1.0 / var - 1.0 / v[i], rel=1e-6)
        assert nu[i] == pytest.approx(mean / var - m[i] / v[i], rel=1e-6, abs=1e-9)


class _Quadratic:
    """A stand-in ML-II problem on ``rows`` rows with a known, strongly correlated Hessian:
    log Z(theta) = -(rows / 8) (c + (theta - t0)^T A (theta - t0) / 2), a sum over rows."""

    A = np.array([[400.0, 150.0], [150.0, 60.0]])      # condition number about 120
    t0 = np.array([0.3, -0.2])

    def __init__(self, theta, rows=8, log=None, bounds=((-20.0, 20.0), (-20.0, 20.0))):
        self.theta, self.rows, self.log = np.asarray(theta, float), rows, log
        self.bounds, self.X, self.c = np.array(bounds), np.empty((rows, 0)), 1000.0

    def with_theta(self, theta):
        return type(self)(theta, self.rows, self.log, self.bounds)

    def evidence(self, sites=None, tol=None):
        if self.log is not None:
            self.log.append(self.theta.copy())
        d, k = self.theta - self.t0, self.rows / 8
        return -k * (self.c + 0.5 * d @ self.A @ d), -k * self.A @ d, None


def _quadratic_prior(theta):
    P = np.array([[30.0, 0.0], [0.0, 10.0]])
    return -0.5 * theta @ P @ theta, -P @ theta


def test_curvature_per_row_carries_to_more_rows_and_its_run_starts_with_a_newton_step():
    """``curvature`` on one row is the Hessian of -log Z per row (forward differences are
    exact on a quadratic); ML-II on eight rows preconditioned by it takes the Newton step
    of the eight rows' objective first, with and without a hyperprior, and so lands on
    the optimum at its second evaluation, where plain L-BFGS-B walks the valley."""
    hess = _mlii.curvature(_Quadratic([1.0, 1.0], rows=1), None)
    np.testing.assert_allclose(hess, _Quadratic.A / 8, rtol=1e-6)
    for prior, P in ((None, 0.0), (_quadratic_prior, np.diag([30.0, 10.0]))):
        start = _Quadratic([1.0, 1.0])
        scale = 1.0 + abs(start.evidence()[0] + (prior(start.theta)[0] if prior else 0.0))
        C = _mlii.newton_frame(hess, start, start.theta, scale, prior)
        np.testing.assert_allclose(np.linalg.inv(C @ C.T), (_Quadratic.A + P) / scale,
                                   rtol=1e-6)
        optimum = np.linalg.solve(_Quadratic.A + P, _Quadratic.A @ _Quadratic.t0)
        runs = {}
        for name, precondition in (("newton", hess), ("plain", None)):
            log = []
            problem, _ = _mlii.maximize_evidence(_Quadratic([1.0, 1.0], log=log),
                                                 prior=prior, precondition=precondition)
            np.testing.assert_allclose(problem.theta, optimum, atol=1e-4)
            runs[name] = log
        np.testing.assert_allclose(runs["newton"][1], optimum, atol=1e-9)
        assert len(runs["newton"]) <= 3 < len(runs["plain"])


def test_newton_frame_is_saddle_free_and_gives_flat_directions_long_steps():
    """Eigenvalues in absolute value, those below 1e-4 of the largest raised to it; None
    without curvature."""
    one = _Quadratic([0.0, 0.0], rows=1)
    for H, used in ((np.diag([100.0, 1e-9]), np.diag([100.0, 1e-2])),
                    (np.diag([-5.0, -1.0]), np.diag([5.0, 1.0]))):
        C = _mlii.newton_frame(H, one, one.theta, 1.0)
        np.testing.assert_allclose(np.linalg.inv(C @ C.T), used, rtol=1e-6)
    assert _mlii.newton_frame(np.zeros((2, 2)), one, one.theta, 1.0) is None


def test_preconditioned_run_with_its_optimum_past_a_bound_ends_on_the_bound():
    """The optimum's first entry lies past its upper bound 0.1: the preconditioned run
    (theta clipped, the clipped entry's gradient dropped) and the polish in theta end at
    the constrained optimum, theta_0 = 0.1 and theta_1 = t0_1 - A_10 / A_11 (0.1 - t0_0)."""
    bounds = ((-20.0, 0.1), (-20.0, 20.0))
    hess = _mlii.curvature(_Quadratic([0.0, 0.0], rows=1), None)
    problem, _ = _mlii.maximize_evidence(_Quadratic([0.0, 0.0], bounds=bounds),
                                         precondition=hess)
    A, t0 = _Quadratic.A, _Quadratic.t0
    np.testing.assert_allclose(problem.theta, [0.1, t0[1] - A[1, 0] / A[1, 1] * (0.1 - t0[0])],
                               atol=1e-4)


class _Quartic(_Quadratic):
    """:class:`_Quadratic` plus ``-(rows / 8) q (theta_0 - t0_0)^4``: its Hessian at the
    start (where :func:`curvature` takes it) is steeper than at the optimum, as a
    subsample's was on digits' flat log variance."""

    q = 200.0

    def evidence(self, sites=None, tol=None):
        value, grad, _ = super().evidence(sites, tol)
        d, k = self.theta[0] - self.t0[0], self.rows / 8
        grad = grad.copy()
        grad[0] -= 4.0 * k * self.q * d ** 3
        return value - k * self.q * d ** 4, grad, None


@pytest.mark.parametrize("steeper", [1.0, 30.0])
def test_preconditioned_run_stops_where_the_predicted_gain_is_below_tol(monkeypatch, steeper):
    """A preconditioned run stops at the iterate where the gain still to come, as the
    curvature (corrected by the curvature along the last step) predicts, is below a tenth
    of ``tol``, within ``tol`` (relative) of the optimum (found here by Newton's method on
    the exact derivatives) and never after the ``ftol`` rule alone would stop.  With a
    curvature 30x too steep (a gain predicted 30x too small; the start's is 4x too steep
    already) the correction along the last step keeps the stop within ``tol``, and the
    rule saves the evaluation of a step that gains nothing."""
    def newton_optimum(p):
        t = p.theta.copy()
        for _ in range(100):
            d, k = t - p.t0, p.rows / 8
            g = -k * (p.A @ d) - np.array([4.0 * k * p.q * d[0] ** 3, 0.0])
            H = -k * p.A - np.diag([12.0 * k * p.q * d[0] ** 2, 0.0])
            t = t - np.linalg.solve(H, g)
        return p.with_theta(t).evidence()[0]

    best = newton_optimum(_Quartic([1.0, 1.0]))
    hess = steeper * _mlii.curvature(_Quartic([1.0, 1.0], rows=1), None)
    counts = {}
    for rule in ("decrement", "ftol only"):
        if rule == "ftol only":
            monkeypatch.setattr(_mlii, "DECREMENT_SHARE", 0.0)
        log = []
        problem, _ = _mlii.maximize_evidence(_Quartic([1.0, 1.0], log=log),
                                             precondition=hess, tol=1e-6)
        value = problem.evidence()[0]
        assert best - value <= 1e-6 * abs(best)
        counts[rule] = len(log)
    assert counts["decrement"] <= counts["ftol only"] - (steeper > 1.0)


@pytest.mark.parametrize("likelihood", ["probit", "poisson"])
def test_staged_ml2_ends_at_the_optimum_of_ml2_on_the_full_data(monkeypatch, likelihood):
    """ML-II started from subsample optima (lowered thresholds, so that a small problem has
    two stages) ends where ML-II from the given start ends: the same final evidence (1e-6
    relative, both to the exact optimum: tol_optimizer) and about the same kernel.  The Poisson case has per-row exposures, which the stages take
    with their rows; stage warnings are not shown."""
    rng = np.random.default_rng(4)
    n = 2400
    X = rng.normal(size=(n, 2))
    f = np.sin(1.5 * X[:, 0]) + 0.5 * X[:, 1]
    Z = X[rng.choice(n, 24, replace=False)]
    if likelihood == "probit":
        y = (f + 0.5 * rng.normal(size=n) > 0).astype(int)
        make = lambda: EPGaussianProcessClassifier(RBF(1.0, [1.0, 1.0]), inducing_points=Z,
                                                   random_state=0, tol_optimizer=1e-6)
        data = {}
    else:
        exposure = rng.uniform(0.5, 3.0, n)
        y = rng.poisson(exposure * np.exp(f))
        make = lambda: fastep.EPGaussianProcessRegressor(
            RBF(1.0, [1.0, 1.0]), likelihood="poisson", inducing_points=Z, random_state=0,
            tol_optimizer=1e-6)
        data = {"exposure": exposure}
    plain = make().fit(X, y, **data)
    monkeypatch.setattr(_mlii, "STAGED_MIN_ROWS", 1000)
    monkeypatch.setattr(_mlii, "STAGE_MIN_ROWS", 30)
    assert _mlii.subsample_stages(n) == [75, 300]
    seen, hessians = [], []
    real = _mlii.maximize_evidence

    def spy(problem, *args, **kwargs):
        seen.append(problem.X.shape[0])
        hessians.append(args[8] if len(args) > 8 else kwargs.get("precondition"))
        if data and problem.X.shape[0] < n:            # the exposures went with the rows
            assert problem.likelihood.exposure.shape == (problem.X.shape[0],)
        return real(problem, *args, **kwargs)
    monkeypatch.setattr(_mlii, "maximize_evidence", spy)     # fit_theta's, the stages'
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        staged = make().fit(X, y, **data)
    assert seen == [75, 300, n]
    # the first stage's curvature preconditions the second stage and the full data
    assert hessians[0] is None and hessians[1] is not None and hessians[2] is hessians[1]
    seen.clear()                           # not where ML-II moves the inducing inputs
    make().set_params(optimize_inducing=True, max_iter_optimizer=3).fit(X, y, **data)
    assert seen == [n]
    a, b = staged.log_marginal_likelihood_value_, plain.log_marginal_likelihood_value_
    assert abs(a - b) <= 1e-6 * abs(b)
    # the evidence is flat along some directions: the parameters agree less closely
    np.testing.assert_allclose(staged.kernel_.theta, plain.kernel_.theta, atol=0.05)


def test_staged_dense_ml2_ends_at_the_optimum_of_ml2_on_the_full_data(monkeypatch):
    """Dense ML-II from 1,000 rows runs on subsamples of n/16 and n/4 rows first, each
    stage's curvature preconditioning the next run (the last stage's the full data's,
    whose first EP starts from the seeded sites), and ends where ML-II from the given
    start ends (1e-6 relative)."""
    rng = np.random.default_rng(5)
    n = 1200
    X = rng.normal(size=(n, 2))
    y = (np.sin(1.5 * X[:, 0]) + 0.5 * X[:, 1] + 0.5 * rng.normal(size=n) > 0).astype(int)
    make = lambda: EPGaussianProcessClassifier(RBF(1.0, 1.0), random_state=0)
    staged_rows = _mlii.subsample_stages(n, dense=True)
    assert staged_rows == [75, 300]
    monkeypatch.setattr(_mlii, "DENSE_STAGED_MIN_ROWS", n + 1)
    plain = make().fit(X, y)
    monkeypatch.setattr(_mlii, "DENSE_STAGED_MIN_ROWS", 1000)
    seen = []
    real = _mlii.maximize_evidence

    def spy(problem, *args, **kwargs):
        seen.append((problem.X.shape[0], args[3], args[8] if len(args) > 8 else
                     kwargs.get("precondition")))
        return real(problem, *args, **kwargs)
    monkeypatch.setattr(_mlii, "maximize_evidence", spy)     # fit_theta's, the stages'
    staged = make().fit(X, y)
    assert [rows for rows, _, _ in seen] == [75, 300, n]
    (_, _, h0), (_, _, h1), (_, sites, h2) = seen
    assert h0 is None and h1 is not None and h2 is not None and h2 is not h1
    assert sites is not None and sites[0].shape == (n,)
    a, b = staged.log_marginal_likelihood_value_, plain.log_marginal_likelihood_value_
    assert abs(a - b) <= 1e-6 * abs(b)
    np.testing.assert_allclose(staged.kernel_.theta, plain.kernel_.theta, atol=0.02)


def test_default_kernel_starts_ml_ii_at_the_median_distance(three_classes):
    """kernel=None: ML-II starts from RBF(1, median distance between rows of X) (scipy's
    pdist, all rows here), the same for every estimator that learns its kernel; with
    optimizer=None the kernel is RBF() as given."""
    from scipy.spatial.distance import pdist
    X, labels = three_classes
    y = (labels == "a").astype(int)
    starts = []

    def record(obj, theta, bounds):                 # a user optimiser that stays put
        starts.append(np.exp(theta))
        return theta, obj(theta, eval_gradient=False)
    median = np.median(pdist(X))
    for est in (EPGaussianProcessClassifier(optimizer=record),
                fastep.EPGaussianProcessRegressor(likelihood="gaussian", optimizer=record),
                fastep.NestedEPClassifier(optimizer=record)):
        target = labels if isinstance(est, fastep.NestedEPClassifier) else y
        fitted = est.fit(X, target)
        assert starts[-1][:2] == pytest.approx([1.0, median], rel=1e-12)
        assert fitted.kernel_.lengthscale == pytest.approx(median, rel=1e-12)
    fixed = EPGaussianProcessClassifier(optimizer=None).fit(X, y)
    assert fixed.kernel_.lengthscale == 1.0 and fixed.kernel_.variance == 1.0


def test_median_heuristic_of_few_rows_many_rows_duplicates_and_dask():
    from scipy.spatial.distance import pdist
    from fastep.models._base import median_heuristic
    rng = np.random.default_rng(0)
    X = rng.normal(size=(1200, 3))
    rows = X[np.unique(np.linspace(0, 1199, 500).astype(int))]
    assert median_heuristic(X) == pytest.approx(np.median(pdist(rows)), rel=1e-10)
    assert median_heuristic(X[:40]) == pytest.approx(np.median(pdist(X[:40])), rel=1e-10)
    assert median_heuristic(np.ones((5, 2))) == 1.0
    da = pytest.importorskip("dask.array")
    assert median_heuristic(da.from_array(X, chunks=300)) == pytest.approx(
        median_heuristic(X), rel=1e-12)


def test_a_bound_warning_shows_each_parameter_in_its_own_units():
    """theta is the log of a kernel's variance (the warning shows e^theta and d/d log),
    holds an ordinal log gap as the log its name says, and the first ordinal cut point as
    it is, of either sign (the warning showed e^30 = 1.07e13 for a cut point at 30, and
    judged it flat by a ln 10 step of a parameter that is not a log)."""
    from types import SimpleNamespace
    from fastep.likelihoods import OrdinalProbit
    from fastep.models._mlii import _warn_at_bounds
    from fastep.likelihoods.ordinal import FIRST_CUT_BOUNDS, LOG_GAP_BOUNDS
    from fastep._theta import ThetaEntry
    problem = SimpleNamespace(theta_entries=[
        ThetaEntry("variance", "the kernel's variance=..., variance_bounds=(low, high)",
                   "the kernel's variance=..., variance_bounds='fixed'")]
        + OrdinalProbit([0.0, 1.0]).theta_entries())
    bounds = np.array([np.log([1e-5, 1e5]), FIRST_CUT_BOUNDS, LOG_GAP_BOUNDS])
    theta = bounds[:, 1].copy()
    # outward slopes: flat for the variance (0.01 ln 10 < 0.1) and the log gap, pulling
    # for the cut point (0.001 x 9 x 30 = 0.27 >= 0.1: the bound moved to 300)
    grad = np.array([0.01, 0.001, 0.01])
    with pytest.warns(ConvergenceWarning) as record:
        _warn_at_bounds(problem, theta, bounds, "OrdinalGPClassifier", grad)
    pulled, flat = (str(r.message) for r in record)
    assert "likelihood cut_points[0] at its upper bound 30;" in pulled
    assert "increases beyond it" in pulled
    assert "variance at its upper bound 1e+05 (d log evidence / d log variance = 0.01)" in flat
    assert (f"likelihood log gap[1] at its upper bound {np.log(1e4):.3g} "
            "(d log evidence / d likelihood log gap[1] = 0.01)") in flat
    assert "OrdinalProbit(cut_points=..., fixed=True)" in flat      # not "log gap=..."
    assert "log gap=" not in flat and flat.count("OrdinalProbit(") == 1
    theta[1] = FIRST_CUT_BOUNDS[0]                     # at -30, pulled below it: flat
    with pytest.warns(ConvergenceWarning, match=r"cut_points\[0\] at its lower bound -30 "
                      r"\(d log evidence / d likelihood cut_points\[0\] = -0\.0001\)"):
        _warn_at_bounds(problem, theta, bounds, "OrdinalGPClassifier",
                        np.array([0.01, -1e-4, 0.01]))


class _FlatValley(_Quadratic):
    """A stand-in ML-II problem with a flat direction, as a log variance often is:
    log Z = -(rows / 8) (c + q d_0^4 + 30 d_1^2), d = theta - t0, with c = 4 (half a nat
    per row at the optimum, as a probit table: a relative tolerance of 1e-6 asks it for
    5e-7 nats per row).  Its optimum, -(rows / 8) c at t0, is known; along d_0 a
    quasi-Newton method gains less at each step, as ML-II does near a flat optimum."""

    q = 50.0

    def __init__(self, theta, rows=8, log=None, bounds=((-20.0, 20.0), (-20.0, 20.0))):
        super().__init__(theta, rows, log, bounds)
        self.c = 4.0

    def evidence(self, sites=None, tol=None):
        if self.log is not None:
            self.log.append(self.theta.copy())
        d, k = self.theta - self.t0, self.rows / 8
        value = -k * (self.c + self.q * d[0] ** 4 + 30.0 * d[1] ** 2)
        return value, -k * np.array([4.0 * self.q * d[0] ** 3, 60.0 * d[1]]), None


@pytest.mark.parametrize("rows", [8, 800_000])
@pytest.mark.parametrize("preconditioned", [False, True])
def test_ml2_stops_in_nats_per_row(rows, preconditioned):
    """With ``tol=None`` (the estimators' default ``tol_optimizer``) ML-II ends within
    ``TOL_ROW`` nats per row of the known optimum, whatever the number of rows; on
    800,000 rows it takes fewer evaluations than the relative rule (``tol=1e-6``, which
    asks the evidence there for 0.4 nats) and ends within that rule's promise too."""
    hess = _mlii.curvature(_FlatValley([1.0, 0.0], rows=1), None) if preconditioned else None
    best = -rows / 8 * 4.0
    counts, ends = {}, {}
    for tol in (None, 1e-6):
        log = []
        problem, _ = _mlii.maximize_evidence(_FlatValley([1.0, 0.0], rows=rows, log=log),
                                             tol=tol, precondition=hess)
        counts[tol], ends[tol] = len(log), problem.evidence()[0]
    assert 0.0 <= best - ends[None] <= _mlii.TOL_ROW * rows, (best, ends[None])
    assert best - ends[1e-6] <= 10 * 1e-6 * abs(best)
    if rows > 1000:
        assert counts[None] < counts[1e-6], counts


def test_default_ml2_ends_within_its_promise_of_a_slow_reference(monkeypatch):
    """The estimator's default ML-II (``tol_optimizer=None``) ends within ``TOL_ROW`` nats
    per row of the ML-II optimum that a slow reference finds: Nelder-Mead on the log
    evidence of ``fastep.ep`` run to 1e-10 (no gradient, none of ML-II's machinery); with
    ``TOL_ROW`` raised to 1e-3 it stops sooner and within that promise; with
    ``tol_optimizer=1e-12`` and EP to 1e-10 it ends at the reference's optimum."""
    from scipy.optimize import minimize
    rng = np.random.default_rng(7)
    n = 120
    X = rng.uniform(-3.0, 3.0, (n, 1))
    y = (np.sin(1.5 * X[:, 0]) + 0.4 * rng.normal(size=n) > 0).astype(int)
    sign = 2.0 * y - 1.0

    def neg_log_z(theta):
        K = RBF(np.exp(theta[0]), np.exp(theta[1]))(X)
        return -fastep.ep(K, sign, Probit(), tol=1e-10, max_iter=1000).log_marginal_likelihood

    ref = minimize(neg_log_z, np.log([1.0, 1.0]), method="Nelder-Mead",
                   options={"xatol": 1e-9, "fatol": 1e-12, "maxiter": 4000})
    best = -ref.fun
    counts, default = {}, _mlii.TOL_ROW
    for tol_row in (default, 1e-3):
        monkeypatch.setattr(_mlii, "TOL_ROW", tol_row)
        clf, counts[tol_row] = _fit_counting(
            EPGaussianProcessClassifier(RBF(), hyperprior=None, tol=1e-10), X, y)
        got = clf.log_marginal_likelihood_value_
        assert got <= best + 1e-9 and best - got <= tol_row * n, (tol_row, best, got)
    assert counts[1e-3] < counts[default]
    tight = EPGaussianProcessClassifier(RBF(), hyperprior=None, tol=1e-10,
                                        tol_optimizer=1e-12).fit(X, y)
    assert tight.log_marginal_likelihood_value_ == pytest.approx(best, rel=1e-9, abs=1e-9)
    np.testing.assert_allclose(tight.kernel_.theta, ref.x, atol=1e-4)


def test_a_start_outside_the_bounds_is_refused_before_any_work():
    """0.3's first draft: RBF(lengthscale=1e8) on standardised inputs (bound 1e5) started
    ML-II on the bound, where the evidence is flat, and predicted the majority class with
    a bound warning that offered to keep the fit.  Now a ValueError names the parameter,
    its value, the bounds and the fix; inside the bounds it fits."""
    from fastep.datasets import load_breast_cancer
    X, y, _ = load_breast_cancer()
    X = (X - X.mean(0)) / X.std(0)
    with pytest.raises(ValueError, match=r"lengthscale = 1e\+08, outside its bounds "
                                         r"\[1e-05, 1e\+05\].*lengthscale_bounds"):
        EPGaussianProcessClassifier(RBF(lengthscale=1e8)).fit(X, y)
    with pytest.raises(ValueError, match=r"likelihood df = 0.5, outside its bounds"):
        fastep.EPGaussianProcessRegressor(
            likelihood=fastep.likelihoods.StudentT(df=0.5, df_bounds=(1.0, 100.0))).fit(
            X[:50], X[:50, 0])
    EPGaussianProcessClassifier(RBF(lengthscale=1e8), optimizer=None).fit(X[:50], y[:50])


@pytest.mark.parametrize("lengthscale, kind", [(1e-4, "nearly independent"),
                                               (9e4, "constant over the data")])
def test_a_degenerate_fitted_kernel_warns_and_is_not_offered_as_a_fit(lengthscale, kind):
    """A lengthscale far below the rows' spacing (every row its own: the Poisson fit on
    sunspots learnt 8.4e-4 in standardised units without a word) or far above the data's
    spread (a constant kernel: the majority class) warns; the bound warning then does not
    say "keep the fit as it is".  Truth: the RBF's correlations computed here."""
    rng = np.random.default_rng(3)
    X = rng.normal(size=(60, 2))
    y = (X[:, 0] + 0.3 * rng.normal(size=60) > 0).astype(int)
    d2 = ((X[:, None, :] - X[None, :, :]) ** 2).sum(-1)
    corr = np.exp(-0.5 * d2 / lengthscale ** 2)
    np.fill_diagonal(corr, np.nan)
    assert (np.nanmedian(np.nanmax(corr, 1)) < 1e-2) == (kind == "nearly independent")
    assert (np.nanmin(corr) > 1 - 1e-6) == (kind == "constant over the data")
    kernel = RBF(1.0, lengthscale, lengthscale_bounds=(1e-5, 1e5))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        EPGaussianProcessClassifier(kernel, hyperprior=None).fit(X, y)
    text = " ".join(str(w.message) for w in caught)
    assert kind.split()[0] in text or kind in text, text
    assert "keep the fit as it is" not in text


@pytest.mark.parametrize("dispersed", [True, False])
def test_a_memorising_poisson_fit_of_over_dispersed_counts_suggests_the_negative_binomial(
        dispersed):
    """A Poisson fit whose kernel leaves every row independent (statsmodels' randhie
    visits, variance 6x the mean, ended so) says that the counts are over-dispersed and
    names likelihood='negative_binomial'; counts as dispersed as a Poisson's do not get the
    sentence.  Truth: the counts' variance and mean computed here."""
    from types import SimpleNamespace

    from fastep.likelihoods import Poisson
    from fastep.models._mlii import _warn_degenerate_kernel
    rng = np.random.default_rng(0)
    X = rng.normal(size=(80, 3))
    mean = np.full(80, 2.5)
    y = (rng.poisson(rng.gamma(0.4, mean / 0.4)) if dispersed else rng.poisson(mean))
    y = y.astype(float)
    assert (y.var() / y.mean() >= 2.0) == dispersed
    problem = SimpleNamespace(X=X, y=y, kernel=RBF(1.0, 1e-4), likelihood=Poisson())
    with pytest.warns(fastep.ConvergenceWarning, match="nearly independent") as caught:
        assert _warn_degenerate_kernel(problem, "EPGaussianProcessRegressor") == "independent"
    text = " ".join(str(w.message) for w in caught)
    assert ("likelihood='negative_binomial'" in text) == dispersed, text
    assert ("over-dispersed" in text) == dispersed
