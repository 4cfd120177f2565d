"""Sparse EP on a Dask cluster (two single-threaded worker processes, as the issue asks)
against the single-process path: the same sites, log Z, gradients and predictions to
1e-9 relative, and the same answer when a worker process is killed during a fit."""
import logging
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

da = pytest.importorskip("dask.array")
distributed = pytest.importorskip("distributed")

from fastep import EPGaussianProcessClassifier  # noqa: E402
from fastep.kernels import RBF  # noqa: E402
from fastep.likelihoods import Probit, Tobit  # noqa: E402
from fastep.likelihoods.annotators import MultiAnnotator  # noqa: E402
from fastep.inference.sparse_ep import sparse_ep, sparse_ep_gradient  # noqa: E402

RTOL = 1e-9


@pytest.fixture(scope="module")
def client():
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                       dashboard_address=None)
    with distributed.Client(cluster) as c:
        yield c
    cluster.close()


def _close(a, b, what):
    a, b = np.asarray(a, float), np.asarray(b, float)
    err = np.max(np.abs(a - b)) / max(np.max(np.abs(a)), 1e-300)
    assert err <= RTOL, f"{what}: relative difference {err:.2e}"


def _problem(kind, n=3000, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-3, 3, (n, 2))
    f = np.sin(1.3 * X[:, 0]) + 0.5 * np.cos(X[:, 1])
    Z = X[rng.choice(n, 15, replace=False)]
    if kind == "probit":
        return X, np.where(f + 0.3 * rng.normal(size=n) > 0, 1.0, -1.0), Probit(), None, Z
    if kind == "censored":
        y = f + 0.3 * rng.normal(size=n)
        lower = np.full(n, -0.4)
        lik = Tobit(0.09, lower=lower, upper=1.0)
        return X, np.clip(y, -0.4, 1.0), lik, lik.limits(n), Z
    truth = f > 0
    sens, spec = np.array([0.9, 0.7, 0.35]), np.array([0.85, 0.6, 0.3])
    labels = np.where(truth[:, None], rng.random((n, 3)) < sens, rng.random((n, 3)) > spec)
    labels = labels.astype(float)
    labels[rng.random((n, 3)) < 0.2] = np.nan
    lik = MultiAnnotator(labels, sens, spec)
    return X, np.ones(n), lik, lik.site_extra(n), Z


@pytest.mark.parametrize("kind", ["probit", "censored", "annotators"])
def test_sparse_ep_on_dask_equals_single_process(client, kind):
    X, y, lik, extra, Z = _problem(kind)
    k = RBF(1.2, [0.9, 1.4])
    run = dict(tol=1e-9, max_iter=300, chunk_size=500, damping=0.8)
    ref = sparse_ep(k, Z, X, y, lik, schedule="parallel", **run)
    Xd, yd = da.from_array(X, chunks=700), da.from_array(y, chunks=700)
    res = sparse_ep(k, Z, Xd, yd, lik, **run)
    assert res.n_iter == ref.n_iter and res.converged
    assert isinstance(res.site_tau, da.Array)          # the sites stay on the workers
    assert res.log_marginal_likelihood == pytest.approx(ref.log_marginal_likelihood,
                                                        rel=RTOL)
    for name in ("site_tau", "site_nu", "mean", "var", "cavity_mean", "cavity_var"):
        _close(getattr(ref, name), getattr(res, name).compute(), name)
    g_ref = sparse_ep_gradient(ref, k, X, y, lik, extra=extra)
    g_res = sparse_ep_gradient(res, k, Xd, yd, lik)
    for what, a, b in zip(("kernel", "Z", "likelihood"), g_ref, g_res):
        if np.size(a):
            _close(a, b, f"gradient in {what}")
    Xt = np.random.default_rng(5).uniform(-3, 3, (900, 2))
    m_ref, v_ref = ref.predict_latent(k, Xt)
    m, v = res.predict_latent(k, da.from_array(Xt, chunks=400))
    _close(m_ref, m.compute(), "predictive mean")
    _close(v_ref, v.compute(), "predictive variance")


def test_warm_start_on_dask_takes_dask_sites(client):
    X, y, lik, _, Z = _problem("probit", n=2000)
    k = RBF(1.2, [0.9, 1.4])
    Xd, yd = da.from_array(X, chunks=600), da.from_array(y, chunks=600)
    first = sparse_ep(k, Z, Xd, yd, lik, tol=1e-9, max_iter=300)
    again = sparse_ep(k, Z, Xd, yd, lik, tol=1e-9, max_iter=300, site_tau=first.site_tau,
                      site_nu=first.site_nu)
    ref = sparse_ep(k, Z, X, y, lik, schedule="parallel", tol=1e-9, max_iter=300,
                    site_tau=first.site_tau.compute(), site_nu=first.site_nu.compute())
    assert again.n_iter <= 3
    assert again.log_marginal_likelihood == pytest.approx(ref.log_marginal_likelihood,
                                                          rel=RTOL)


def _sent(dask_worker):
    return dask_worker.transfer_outgoing_bytes_total


def test_a_sweep_moves_m_by_m_numbers_not_rows(client):
    """Each chunk's tasks run where its rows are: after the first sweep, what the workers
    send per sweep is q(u) and the sums (a few m x m matrices), not a chunk of rows or
    sites (6000 rows: 96 kB of X, 144 kB of sites), which Dask's own placement would move
    to whichever worker is free first."""
    X, y, lik, _, Z = _problem("probit", n=60000, seed=3)
    sent = []
    sparse_ep(RBF(1.2, [0.9, 1.4]), Z, da.from_array(X, chunks=6000),
              da.from_array(y, chunks=6000), lik, tol=1e-9, max_iter=300,
              callback=lambda i, lz: sent.append(sum(client.run(_sent).values())))
    per_sweep = np.diff(sent)
    assert len(per_sweep) >= 4
    assert per_sweep.max() < 20 * 8 * Z.shape[0] ** 2, per_sweep


def test_a_worker_killed_in_the_third_sweep_changes_nothing(client):
    """The scheduler recomputes the lost chunks' sites from their lineage (module docstring
    of fastep.inference.sparse_ep._cluster); the fit ends where the undisturbed one does."""
    X, y, lik, _, Z = _problem("probit", n=60000, seed=3)
    k = RBF(1.2, [0.9, 1.4])
    Xd, yd = da.from_array(X, chunks=6000), da.from_array(y, chunks=6000)
    run = dict(tol=1e-9, max_iter=300)
    calm = sparse_ep(k, Z, Xd, yd, lik, **run)
    killed = []

    def kill_during_third_sweep(sweep, _):
        if sweep != 2:
            return

        def kill():
            time.sleep(0.05)                 # the third sweep's tasks are running
            worker = sorted(client.scheduler_info()["workers"])[0]
            pid = client.run(os.getpid, workers=[worker])[worker]
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
        threading.Thread(target=kill).start()

    hit = sparse_ep(k, Z, Xd, yd, lik, callback=kill_during_third_sweep, **run)
    assert killed, "no worker was killed"
    client.wait_for_workers(2, timeout=60)
    pids = client.run(os.getpid).values()
    assert killed[0] not in pids                       # the worker was replaced
    assert hit.n_iter == calm.n_iter
    assert hit.log_marginal_likelihood == pytest.approx(calm.log_marginal_likelihood,
                                                        rel=RTOL)
    _close(calm.site_tau.compute(), hit.site_tau.compute(), "site_tau")
    _close(calm.site_nu.compute(), hit.site_nu.compute(), "site_nu")


def test_classifier_fits_and_predicts_dask_arrays(client):
    X, y, _, _, _ = _problem("probit", n=2500, seed=7)
    labels = np.where(y > 0, "yes", "no")
    Z = X[:12].copy()
    kw = dict(inducing_points=Z, kernel=RBF(1.0, [1.0, 1.0]), tol=1e-9, method="parallel",
              max_iter_optimizer=15)
    ref = EPGaussianProcessClassifier(**kw).fit(X, labels)
    clf = EPGaussianProcessClassifier(**kw).fit(da.from_array(X, chunks=800),
                                                da.from_array(labels, chunks=800))
    assert list(clf.classes_) == ["no", "yes"]
    _close(ref.kernel_.theta, clf.kernel_.theta, "fitted kernel")
    assert clf.log_marginal_likelihood_value_ == pytest.approx(
        ref.log_marginal_likelihood_value_, rel=1e-7)
    Xt = np.random.default_rng(1).uniform(-3, 3, (700, 2))
    p = clf.predict_proba(da.from_array(Xt, chunks=300))
    assert isinstance(p, da.Array)
    np.testing.assert_allclose(p.compute(), ref.predict_proba(Xt), rtol=1e-6, atol=1e-9)
    assert list(clf.predict(da.from_array(Xt, chunks=300)).compute()) == list(ref.predict(Xt))


def test_dask_input_errors_name_the_fix(client):
    X, y, lik, _, Z = _problem("probit", n=500)
    Xbad = X.copy()
    Xbad[321, 1] = np.nan
    with pytest.raises(ValueError, match="row 321"):
        sparse_ep(RBF(), Z, da.from_array(Xbad, chunks=100), da.from_array(y, chunks=100),
                  lik)
    with pytest.raises(ValueError, match="n_inducing"):
        EPGaussianProcessClassifier(n_inducing=None).fit(da.from_array(X, chunks=100),
                                                         da.from_array(y, chunks=100))
    # the default, n_inducing="auto", runs sparse on a dask X (half the rows at most)
    est = EPGaussianProcessClassifier(optimizer=None).fit(da.from_array(X, chunks=100),
                                                          da.from_array(y, chunks=100))
    assert est.inducing_points_.shape == (250, X.shape[1])


def test_dask_arrays_without_a_client_say_how_to_start_one():
    code = ("import numpy as np, dask.array as da\n"
            "from fastep.kernels import RBF\nfrom fastep.likelihoods import Probit\n"
            "from fastep import sparse_ep\n"
            "X = da.from_array(np.zeros((10, 1)), chunks=5)\n"
            "try:\n    sparse_ep(RBF(), np.zeros((2, 1)), X, da.ones(10, chunks=5), Probit())\n"
            "except ValueError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert "LocalCluster" in out.stdout and "Client(" in out.stdout, out.stderr


def test_import_fastep_does_not_import_dask():
    code = "import sys, fastep; print('dask' in sys.modules, 'distributed' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.stdout.split() == ["False", "False"], out.stderr


def test_censored_and_annotator_estimators_fit_and_predict_dask_arrays(client):
    """Both estimators on dask arrays fit what they fit in this process (kernel fixed, the
    sparse schedule the cluster runs) and predict lazily, chunk by chunk."""
    from fastep import CensoredGPRegressor, MultiAnnotatorGPClassifier
    X, y, _, _, Z = _problem("censored", n=2000, seed=2)
    kw = dict(kernel=RBF(1.2, [0.9, 1.4]), inducing_points=Z, optimizer=None, tol=1e-9,
              method="parallel", lower=-0.4, upper=1.0, noise_variance=0.09)
    ref = CensoredGPRegressor(**kw).fit(X, y)
    est = CensoredGPRegressor(**kw).fit(da.from_array(X, chunks=600),
                                        da.from_array(y, chunks=600))
    assert est.log_marginal_likelihood_value_ == pytest.approx(
        ref.log_marginal_likelihood_value_, rel=RTOL)
    Xt = np.random.default_rng(3).uniform(-3, 3, (500, 2))
    Xtd = da.from_array(Xt, chunks=200)
    for name in ("predict", "predict_latent"):
        a = getattr(ref, name)(Xt, return_std=True)
        b = getattr(est, name)(Xtd, return_std=True)
        for u, v in zip(a, b):
            _close(u, v.compute(), name)
    _close(ref.predict_quantile(Xt, 0.3), est.predict_quantile(Xtd, 0.3).compute(), "quantile")

    X, _, lik, _, Z = _problem("annotators", n=1500, seed=4)
    labels = lik.labels
    kw = dict(kernel=RBF(1.2, [0.9, 1.4]), inducing_points=Z, optimizer=None, tol=1e-8,
              method="parallel", em_tol=1e-6)
    ref = MultiAnnotatorGPClassifier(**kw).fit(X, labels)
    est = MultiAnnotatorGPClassifier(**kw).fit(da.from_array(X, chunks=500), labels)
    _close(ref.sensitivity_, est.sensitivity_, "sensitivities")
    _close(ref.specificity_, est.specificity_, "specificities")
    p = est.predict_proba(Xtd)
    _close(ref.predict_proba(Xt), p.compute(), "class probabilities")
    assert list(est.predict(Xtd).compute()) == list(ref.predict(Xt))


@pytest.mark.parametrize("likelihood", ["poisson", "student_t"])
def test_regressor_fits_and_predicts_dask_arrays(client, likelihood):
    """EPGaussianProcessRegressor on dask arrays: ML-II (Student-t from its two starts)
    reaches the in-process fit, and predictions of y and its log density map over chunks."""
    from fastep import EPGaussianProcessRegressor
    rng = np.random.default_rng(11)
    X = rng.uniform(-3, 3, (1500, 2))
    f = np.sin(1.3 * X[:, 0]) + 0.5 * np.cos(X[:, 1])
    if likelihood == "poisson":
        y, data = rng.poisson(2.0 * np.exp(f)).astype(float), {"exposure": 2.0}
    else:
        y, data = f + 0.2 * rng.standard_t(3, size=X.shape[0]), {}
    # Student-t: robust EP with the kernel fixed (its ML-II tries far-off scales, each a
    # long damped run); its two ML-II starts are compared below
    kw = dict(likelihood=likelihood, kernel=RBF(1.0, [1.0, 1.0]),
              inducing_points=X[:12].copy(), method="parallel", tol=1e-9,
              max_iter_optimizer=4, optimizer="L-BFGS-B" if likelihood == "poisson" else None)
    ref = EPGaussianProcessRegressor(**kw).fit(X, y, **data)
    est = EPGaussianProcessRegressor(**kw).fit(da.from_array(X, chunks=500),
                                               da.from_array(y, chunks=500), **data)
    _close(ref.kernel_.theta, est.kernel_.theta, "fitted kernel")
    if ref.likelihood_.theta.size:                     # Student-t: df and scale
        _close(ref.likelihood_.theta, est.likelihood_.theta, "fitted likelihood")
    assert est.log_marginal_likelihood_value_ == pytest.approx(
        ref.log_marginal_likelihood_value_, rel=1e-7)
    Xt = rng.uniform(-3, 3, (400, 2))
    yt = y[:400]
    Xtd = da.from_array(Xt, chunks=150)
    for a, b in zip(ref.predict(Xt, return_std=True, **data),
                    est.predict(Xtd, return_std=True, **data)):
        assert isinstance(b, da.Array)
        np.testing.assert_allclose(b.compute(), a, rtol=1e-6)
    np.testing.assert_allclose(est.log_predictive_density(Xtd, yt, **data).compute(),
                               ref.log_predictive_density(Xt, yt, **data), rtol=1e-6)
    if likelihood == "poisson":
        with pytest.raises(ValueError, match=r"\['exposure'\] must be scalars"):
            est.predict(Xtd, exposure=np.ones(400))
    else:
        ml2 = EPGaussianProcessRegressor(likelihood="student_t")
        starts = [ml2._likelihood_starts(est.likelihood_, v) for v in (y, da.from_array(y))]
        for a, b in zip(*starts):
            _close(a.theta, b.theta, "Student-t ML-II starts")


def test_staged_ml2_on_dask_equals_staged_ml2_in_process(client, monkeypatch, caplog):
    """ML-II's subsample stages (thresholds lowered so that 1,500 rows have two) on dask
    arrays: the stages' rows (computed into memory) are those of the in-process fit with the
    same random_state, and the fit ends at the same kernel and evidence."""
    from fastep import EPGaussianProcessRegressor
    from fastep.models import _mlii
    monkeypatch.setattr(_mlii, "STAGED_MIN_ROWS", 1000)
    monkeypatch.setattr(_mlii, "STAGE_MIN_ROWS", 20)
    rng = np.random.default_rng(12)
    X = rng.uniform(-3, 3, (1500, 2))
    exposure = 2.0                                     # per-row data: scalars with dask
    y = rng.poisson(exposure * np.exp(np.sin(1.3 * X[:, 0]))).astype(float)
    kw = dict(likelihood="poisson", kernel=RBF(1.0, [1.0, 1.0]), inducing_points=X[:12].copy(),
              method="parallel", tol=1e-9, max_iter_optimizer=6, random_state=3)
    caplog.set_level(logging.INFO, logger="fastep")
    ref = EPGaussianProcessRegressor(**kw).fit(X, y, exposure=exposure)
    est = EPGaussianProcessRegressor(**kw).fit(da.from_array(X, chunks=500),
                                               da.from_array(y, chunks=500),
                                               exposure=exposure)
    stages = [r.getMessage().split(":")[0] for r in caplog.records
              if r.getMessage().startswith("ML-II on a subsample")]
    assert stages == ["ML-II on a subsample of 46 rows", "ML-II on a subsample of 187 rows"] * 2
    _close(ref.kernel_.theta, est.kernel_.theta, "fitted kernel")
    assert est.log_marginal_likelihood_value_ == pytest.approx(
        ref.log_marginal_likelihood_value_, rel=1e-7)


def test_ordinal_classifier_fits_and_predicts_dask_arrays(client, monkeypatch):
    """OrdinalGPClassifier on dask arrays: labels, cut points from the level counts (added
    up on the workers), the same fit and lazily computed level probabilities.  ML-II's
    evaluations run EP at the estimator's tol (1e-9) throughout: at ML-II's looser default
    tolerances a rounding difference can move the sweep that crosses the tolerance, and the
    stopped-early optimiser (max_iter_optimizer=8) then ends elsewhere."""
    from fastep import OrdinalGPClassifier
    from fastep.models import _mlii
    monkeypatch.setattr(_mlii, "LOOSE_EP_TOL", 1e-9)
    rng = np.random.default_rng(5)
    X = rng.uniform(-3, 3, (1500, 2))
    f = np.sin(1.3 * X[:, 0]) + 0.5 * np.cos(X[:, 1]) + 0.3 * rng.normal(size=1500)
    y = np.array(["low", "mid", "top"])[np.digitize(f, [-0.4, 0.5])]  # sorted = level order
    kw = dict(kernel=RBF(1.0, [1.0, 1.0]), inducing_points=X[:12].copy(), method="parallel",
              tol=1e-9, max_iter_optimizer=8)
    ref = OrdinalGPClassifier(**kw).fit(X, y)
    est = OrdinalGPClassifier(**kw).fit(da.from_array(X, chunks=500),
                                        da.from_array(y, chunks=500))
    assert list(est.classes_) == ["low", "mid", "top"]
    _close(ref.cut_points_, est.cut_points_, "cut points")
    _close(ref.kernel_.theta, est.kernel_.theta, "fitted kernel")
    Xt = rng.uniform(-3, 3, (400, 2))
    p = est.predict_proba(da.from_array(Xt, chunks=150))
    assert isinstance(p, da.Array) and p.shape == (400, 3)
    np.testing.assert_allclose(p.compute(), ref.predict_proba(Xt), rtol=1e-6, atol=1e-12)
    assert list(est.predict(da.from_array(Xt, chunks=150)).compute()) == list(ref.predict(Xt))
