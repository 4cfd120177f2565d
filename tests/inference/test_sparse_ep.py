"""Sparse Power EP (seed 003, "Thing Two"): exact limits, gradients, the tilted bound.

Truth: dense EP at Z = X (alpha = 1), the collapsed Power-EP objective of
``fastep.inference.collapsed`` (Gaussian likelihood, any alpha), central finite
differences, and the exact probit evidence (a Gaussian orthant probability by
scipy's multivariate normal CDF) for the tilted variational bound.
"""
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numba
import numpy as np
import pytest
from scipy.stats import multivariate_normal

import fastep
from fastep import CensoredGPRegressor, EPGaussianProcessClassifier, MultiAnnotatorGPClassifier
from fastep._linalg import syrk_lower_nogil, trmm_lower_nogil
from fastep.datasets import simulate_annotators
from fastep.inference.bounds import tilted_bound
from fastep.inference.collapsed import collapsed_objective
from fastep.inference.sparse_ep import sparse_ep, sparse_ep_gradient
from fastep.kernels import RBF
from fastep.likelihoods import Gaussian, MultiAnnotator, Probit, Tobit

TIGHT = dict(tol=1e-12, max_iter=3000)


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    X = rng.uniform(-3, 3, (50, 2))
    f = np.sin(X[:, 0]) + 0.5 * X[:, 1]
    yb = np.where(f + 0.3 * rng.normal(size=50) > 0, 1.0, -1.0)
    yt = np.maximum(f + 0.3 * rng.normal(size=50), -0.2)
    return X, f, yb, yt, rng.uniform(-3, 3, (6, 2))


@pytest.mark.parametrize("lik_y", ["probit", "tobit"])
def test_inducing_points_at_the_data_equal_dense_ep(data, lik_y):
    X, _, yb, yt, _ = data
    lik, y = (Probit(), yb) if lik_y == "probit" else (Tobit(0.1, lower=-0.2), yt)
    k = RBF(1.5, 1.1)
    s = sparse_ep(k, X, X, y, lik, **TIGHT)
    d = fastep.ep(k(X), y, lik, **TIGHT)
    assert s.converged and d.converged
    assert s.log_marginal_likelihood == pytest.approx(d.log_marginal_likelihood, abs=1e-6)
    np.testing.assert_allclose(s.mean, d.mean, atol=1e-6)
    np.testing.assert_allclose(s.var, d.var, atol=1e-6)
    Xs = np.array([[0.3, -1.0], [2.5, 2.5]])
    np.testing.assert_allclose(s.predict_latent(k, Xs), d.predict_latent(k(X, Xs), k.diag(Xs)),
                               atol=1e-6)


@pytest.mark.parametrize("alpha", [1.0, 0.5, 0.1])
def test_gaussian_likelihood_fixed_point_is_the_collapsed_objective(data, alpha):
    X, f, _, _, Z = data
    y = f + 0.3 * np.random.default_rng(1).normal(size=f.size)
    k = RBF(1.5, 1.1)
    s = sparse_ep(k, Z, X, y, Gaussian(0.09), alpha=alpha, **TIGHT)
    c = collapsed_objective(k(Z), k(Z, X), k.diag(X), y, 0.09, alpha)
    assert s.log_marginal_likelihood == pytest.approx(c.value, abs=1e-6)


@pytest.mark.parametrize("alpha", [1.0, 0.5])
@pytest.mark.parametrize("lik_y", ["probit", "tobit"])
def test_gradients_match_finite_differences(data, alpha, lik_y):
    X, _, yb, yt, Z = data
    y = yb if lik_y == "probit" else yt

    def make(log_s2):
        return Probit() if lik_y == "probit" else Tobit(np.exp(log_s2), lower=-0.2)

    k = RBF(1.5, [1.1, 0.8])
    run = dict(alpha=alpha, damping=0.5, **TIGHT)

    def F(theta, Zz, log_s2):
        return sparse_ep(k.clone_with_theta(theta), Zz, X, y, make(log_s2),
                         **run).log_marginal_likelihood

    lik = make(np.log(0.1))
    res = sparse_ep(k, Z, X, y, lik, **run)
    # a chunk size that splits the data unevenly exercises the streamed passes
    d_theta, d_Z, d_lik = sparse_ep_gradient(res, k, X, y, lik, chunk_size=17)
    th, ls, h = k.theta, np.log(0.1), 1e-5
    fd_theta = [(F(th + h * e, Z, ls) - F(th - h * e, Z, ls)) / (2 * h) for e in np.eye(th.size)]
    np.testing.assert_allclose(d_theta, fd_theta, rtol=1e-5)
    for i, c in [(0, 0), (3, 1), (5, 0)]:
        E = np.zeros_like(Z)
        E[i, c] = h
        fd = (F(th, Z + E, ls) - F(th, Z - E, ls)) / (2 * h)
        assert d_Z[i, c] == pytest.approx(fd, rel=1e-5, abs=1e-7)
    if lik_y == "tobit":
        fd = (F(th, Z, ls + h) - F(th, Z, ls - h)) / (2 * h)
        assert d_lik[0] == pytest.approx(fd, rel=1e-5)


def test_chunked_and_memory_mapped_data_give_the_same_answer(data, tmp_path):
    X, _, yb, _, Z = data
    k = RBF(1.5, 1.1)
    whole = sparse_ep(k, Z, X, yb, Probit(), **TIGHT)
    path = tmp_path / "X.npy"
    np.save(path, X)
    mm = np.load(path, mmap_mode="r")
    chunked = sparse_ep(k, Z, mm, yb, Probit(), chunk_size=7, **TIGHT)
    assert chunked.log_marginal_likelihood == pytest.approx(whole.log_marginal_likelihood,
                                                            abs=1e-9)
    np.testing.assert_allclose(chunked.mean, whole.mean, atol=1e-9)


def test_threads_share_a_sweep_without_changing_the_answer():
    """Chunks of a sweep run on numba.get_num_threads() Python threads: one thread and three
    must give the same sites, also with negative site precisions (MultiAnnotator is not
    log-concave), with and without the in-memory Gram cache."""
    rng = np.random.default_rng(3)
    X = rng.uniform(-3, 3, (300, 2))
    z = (np.sin(2 * X[:, 0]) + X[:, 1] > 0).astype(int)
    labels = simulate_annotators(z, [0.95, 0.9], [0.9, 0.4], random_state=1).astype(float)
    lik = MultiAnnotator(labels, [0.95, 0.9], [0.9, 0.4])
    Z, k = X[::15], RBF(4.0, 0.7)
    previous = numba.get_num_threads()
    fits = {}
    try:
        for threads in (1, min(3, numba.config.NUMBA_NUM_THREADS)):
            numba.set_num_threads(threads)
            for cache in (0, 2 ** 31):
                fits[threads, cache] = sparse_ep(k, Z, X, np.ones(300), lik, chunk_size=16,
                                                 damping=0.5, gram_cache=cache, **TIGHT)
    finally:
        numba.set_num_threads(previous)
    ref = fits[1, 0]
    assert ref.converged and np.any(ref.site_tau < 0)
    for res in fits.values():
        assert res.n_iter == ref.n_iter
        assert res.log_marginal_likelihood == pytest.approx(ref.log_marginal_likelihood,
                                                            rel=1e-12)
        np.testing.assert_allclose(res.site_tau, ref.site_tau, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(res.mean, ref.mean, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("alpha", [1.0, 0.5])
def test_sequential_and_parallel_schedules_share_the_fixed_point(alpha):
    """The chunk-sequential schedule (q refreshed after every block) converges to the fixed
    point of parallel EP: same sites, log Z and marginals, also with negative site
    precisions (MultiAnnotator, alpha = 1); and its marginals are those of its final q."""
    rng = np.random.default_rng(5)
    X = rng.uniform(-3, 3, (700, 2))
    z = (np.sin(2 * X[:, 0]) + X[:, 1] > 0).astype(int)
    labels = simulate_annotators(z, [0.95, 0.9], [0.9, 0.4], random_state=2).astype(float)
    k, Z = RBF(4.0, 0.7), X[::35]
    cases = [(Probit(), np.where(z == 1, 1.0, -1.0), None),
             (MultiAnnotator(labels, [0.95, 0.9], [0.9, 0.4]), np.ones(700), 0.5)]
    # MultiAnnotator's power tilted function is quadrature, slow at tol 1e-12: alpha 1 only
    for lik, y, damping in cases[:1 if alpha != 1.0 else 2]:
        fits = {s: sparse_ep(k, Z, X, y, lik, alpha=alpha, chunk_size=40, damping=damping,
                             schedule=s, **TIGHT) for s in ("parallel", "sequential")}
        par, seq = fits["parallel"], fits["sequential"]
        assert par.converged and seq.converged
        assert seq.log_marginal_likelihood == pytest.approx(par.log_marginal_likelihood,
                                                            rel=1e-10)
        np.testing.assert_allclose(seq.site_tau, par.site_tau, rtol=1e-7, atol=1e-9)
        np.testing.assert_allclose(seq.site_nu, par.site_nu, rtol=1e-7, atol=1e-9)
        np.testing.assert_allclose(seq.mean, par.mean, atol=1e-8)
        np.testing.assert_allclose(seq.var, par.var, atol=1e-8)
        np.testing.assert_allclose(seq.predict_latent(k, X)[0], seq.mean, atol=1e-10)
        assert len(seq.history) == seq.n_iter + 1
        assert seq.history[-1] == seq.log_marginal_likelihood


def test_sequential_schedule_takes_fewer_passes():
    """Refreshing q after every block reaches tol in fewer passes than parallel EP once the
    data span many blocks (here 40 blocks of 2 x 100 rows, 8000 points, 40 inducing)."""
    rng = np.random.default_rng(6)
    X = rng.uniform(-2, 2, (8000, 3))
    y = np.where(np.sin(2 * X[:, 0]) + X[:, 1] * X[:, 2] + 0.5 * rng.normal(size=8000) > 0,
                 1.0, -1.0)
    k, Z = RBF(1.0, 1.0), X[:40]
    par, seq = (sparse_ep(k, Z, X, y, Probit(), chunk_size=100, schedule=s)
                for s in ("parallel", "sequential"))
    assert par.converged and seq.converged
    assert seq.n_iter <= par.n_iter - 3
    assert seq.log_marginal_likelihood == pytest.approx(par.log_marginal_likelihood,
                                                        rel=1e-6)


def test_estimators_choose_the_schedule(data):
    """method="auto": parallel dense EP, chunk-sequential sparse EP; the sparse schedules
    give the same fit."""
    X, _, yb, _, Z = data
    fits = {m: EPGaussianProcessClassifier(RBF(1.5, 1.1), inducing_points=Z, method=m,
                                           optimizer=None, tol=1e-10, max_iter=500).fit(X, yb)
            for m in ("auto", "parallel", "sequential")}
    assert fits["auto"]._latents[0].config.method == "sequential"
    for m in ("parallel", "sequential"):
        assert fits[m]._latents[0].config.method == m
        assert fits[m].log_marginal_likelihood_value_ == pytest.approx(
            fits["auto"].log_marginal_likelihood_value_, rel=1e-9)
    dense = EPGaussianProcessClassifier(RBF(1.5, 1.1), optimizer=None).fit(X, yb)
    assert dense._latents[0].config.method == "parallel"


def test_sequential_blocks_cover_every_row_once():
    from fastep.inference.sparse_ep._local import FIRST_BLOCK, GROWTH, _blocks, _share
    for n, chunk, growing in [(1, 5, True), (10007, 64, True), (10007, 64, False),
                              (300, 1000, True)]:
        taken = 0
        for c0, c1 in _blocks(n, chunk, growing):
            assert c0 == taken
            if c1 < n:
                assert c1 - c0 == (min(2 * chunk, max(FIRST_BLOCK, int(GROWTH * c0)))
                                   if growing else 2 * chunk)
            for parts in (1, 2, 3, 5):
                shares = _share(c0, c1, parts, chunk)
                ranges = sorted(r for share in shares for r in share)
                assert len(shares) <= parts and all(b - a <= chunk for a, b in ranges)
                assert ranges[0][0] == c0 and ranges[-1][1] == c1
                assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
            taken = c1
        assert taken == n


def test_warnings_name_the_knob_and_point_at_the_caller(data):
    """Dense and sparse EP share SweepControl: a ConvergenceWarning naming max_iter and
    damping, reported at the line that called the driver (not inside fastep)."""
    X, _, yb, _, Z = data
    k = RBF(1.5, 1.1)
    for call in (lambda: sparse_ep(k, Z, X, yb, Probit(), max_iter=1),
                 lambda: fastep.ep(k(X), yb, Probit(), max_iter=1)):
        with pytest.warns(fastep.ConvergenceWarning, match="max_iter=1.*damping") as rec:
            res = call()
        assert not res.converged and res.n_iter == 1 and len(res.history) == 2
        assert all(r.filename == __file__ for r in rec)


def test_threads_share_the_gradient_passes_without_touching_the_likelihood(data):
    """Tobit at alpha = 0.5 takes its noise derivative by finite differences: with two
    threads the likelihood object must stay unchanged and the gradient equal one thread's."""
    X, _, _, yt, Z = data
    lik, k = Tobit(0.1, lower=-0.2), RBF(1.5, 1.1)
    res = sparse_ep(k, Z, X, yt, lik, alpha=0.5, **TIGHT)
    theta0 = lik.theta.copy()
    previous = numba.get_num_threads()
    grads = []
    try:
        for threads in (1, min(2, numba.config.NUMBA_NUM_THREADS)) * 3:
            numba.set_num_threads(threads)
            grads.append(sparse_ep_gradient(res, k, X, yt, lik, chunk_size=5))
    finally:
        numba.set_num_threads(previous)
    np.testing.assert_array_equal(lik.theta, theta0)
    for g in grads[1:]:
        for a, b in zip(g, grads[0]):
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)


def test_sparse_ep_runs_under_the_workqueue_threading_layer(tmp_path):
    """Worker threads never launch Numba parallel kernels concurrently (the workqueue
    layer aborts the process when they do)."""
    code = ("import numpy as np, numba\n"
            "from fastep.inference.sparse_ep import sparse_ep, sparse_ep_gradient\n"
            "from fastep.kernels import RBF\n"
            "from fastep.likelihoods import Probit\n"
            "rng = np.random.default_rng(3)\n"
            "X = rng.uniform(-3, 3, (3000, 2))\n"
            "y = np.where(np.sin(2 * X[:, 0]) + X[:, 1] > 0, 1.0, -1.0)\n"
            "r = sparse_ep(RBF(4.0, 0.7), X[::100], X, y, Probit(), chunk_size=300)\n"
            "sparse_ep_gradient(r, RBF(4.0, 0.7), X, y, Probit(), chunk_size=300)\n"
            "assert numba.threading_layer() == 'workqueue'\n"
            "print('ok', r.converged)\n")
    env = dict(os.environ, NUMBA_THREADING_LAYER="workqueue", NUMBA_NUM_THREADS="2",
               PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "ok True"


def test_gil_free_blas_matches_numpy():
    rng = np.random.default_rng(4)
    L = np.asfortranarray(np.tril(rng.normal(size=(7, 7))))
    B = np.asfortranarray(rng.normal(size=(7, 5)))
    np.testing.assert_allclose(trmm_lower_nogil(L, B.copy(order="F")), L @ B, rtol=1e-13)
    np.testing.assert_allclose(trmm_lower_nogil(L, B.copy(order="F"), trans=True), L.T @ B,
                               rtol=1e-13)
    C = np.asfortranarray(rng.normal(size=(7, 7)))
    A = rng.normal(size=(7, 9))
    for a in (A, np.asfortranarray(A), A[:, ::2]):                 # C, F, strided
        out = syrk_lower_nogil(-0.5, a, C.copy(order="F"))
        np.testing.assert_allclose(np.tril(out), np.tril(C - 0.5 * a @ a.T), rtol=1e-13)
        np.testing.assert_array_equal(np.triu(out, 1), np.triu(C, 1))
    with pytest.raises(ValueError, match="F-contiguous"):
        trmm_lower_nogil(L, np.ascontiguousarray(B))
    with pytest.raises(ValueError, match="7 rows"):
        syrk_lower_nogil(1.0, A.T, C.copy(order="F"))
    with pytest.raises(ValueError, match="square"):
        syrk_lower_nogil(1.0, A, np.zeros((7, 2), order="F"))


def test_points_far_from_every_inducing_point_stay_finite(data):
    X, _, yb, _, Z = data
    X_far = np.vstack([X, [[400.0, 400.0]]])          # K(Z, x) underflows to 0
    res = sparse_ep(RBF(1.5, 1.1), Z, X_far, np.append(yb, 1.0), Probit())
    assert res.converged and res.n_skipped == 0
    assert np.all(np.isfinite(res.mean)) and np.isfinite(res.log_marginal_likelihood)
    assert res.var[-1] == pytest.approx(1.5)               # the prior: nothing links it to u


def test_tilted_bound_never_exceeds_the_exact_evidence():
    """Probit evidence = P(D (f + eps) > 0) = Phi_n(0; D (K + I) D): an orthant probability."""
    rng = np.random.default_rng(2)
    for _ in range(6):
        n = 4
        X = rng.normal(size=(n, 1))
        y = np.where(rng.normal(size=n) > 0, 1.0, -1.0)
        K = RBF(rng.uniform(0.5, 4.0), rng.uniform(0.3, 2.0))(X) + 0.05 * np.eye(n)
        D = np.diag(y)
        exact = np.log(multivariate_normal(np.zeros(n), D @ (K + np.eye(n)) @ D, abseps=1e-10,
                                           releps=1e-10, maxpts=10 ** 7).cdf(np.zeros(n)))
        dense = fastep.ep(K, y, Probit(), tol=1e-10)
        assert dense.log_marginal_likelihood == pytest.approx(exact, abs=0.05)   # EP is close
        assert tilted_bound(K, y, Probit(), dense.cavity_mean, dense.cavity_var) <= exact
        Xz = X[:2]
        sparse = sparse_ep(RBF(1.0, 1.0), Xz, X, y, Probit(), alpha=0.5, tol=1e-10)
        assert tilted_bound(K, y, Probit(), sparse.cavity_mean, sparse.cavity_var) <= exact


def test_estimators_with_inducing_points(data):
    X, f, yb, yt, _ = data
    # Z = X and fixed hyperparameters: sparse estimators equal their dense selves
    k = RBF(1.5, 1.1)
    dense = CensoredGPRegressor(k, noise_variance=0.1, lower=-0.2, optimizer=None,
                                tol=1e-10).fit(X, yt)
    sparse = CensoredGPRegressor(k, noise_variance=0.1, lower=-0.2, optimizer=None,
                                 tol=1e-10, inducing_points=X).fit(X, yt)
    assert sparse.log_marginal_likelihood_value_ == pytest.approx(
        dense.log_marginal_likelihood_value_, abs=1e-6)
    np.testing.assert_allclose(sparse.predict(X[:5], return_std=True),
                               dense.predict(X[:5], return_std=True), atol=1e-6)
    # ML-II moves kernel and inducing inputs (when asked) and never ends below its start
    clf0 = EPGaussianProcessClassifier(n_inducing=8, random_state=0, optimizer=None).fit(X, yb)
    clf = EPGaussianProcessClassifier(n_inducing=8, random_state=0,
                                      optimize_inducing=True).fit(X, yb)
    assert clf.inducing_points_.shape == (8, 2)
    assert not np.allclose(clf.inducing_points_, clf0.inducing_points_)
    fixed = EPGaussianProcessClassifier(n_inducing=8, random_state=0).fit(X, yb)
    np.testing.assert_array_equal(fixed.inducing_points_, clf0.inducing_points_)  # default
    assert clf.log_marginal_likelihood_value_ >= clf0.log_marginal_likelihood_value_ - 1e-8
    assert clf.score(X, yb) > 0.85
    z = (f > 0).astype(int)
    Y = simulate_annotators(z, [0.9, 0.8, 0.7], [0.85, 0.8, 0.7], random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", fastep.ConvergenceWarning)
        ma_d = MultiAnnotatorGPClassifier(k, update_reliabilities=False, tol=1e-10,
                                          optimizer=None).fit(X, Y)
        ma_s = MultiAnnotatorGPClassifier(k, update_reliabilities=False, tol=1e-10,
                                          inducing_points=X, optimizer=None).fit(X, Y)
    np.testing.assert_allclose(ma_s.predict_proba(X[:5]), ma_d.predict_proba(X[:5]), atol=1e-6)


def test_bad_input(data):
    X, _, yb, yt, Z = data
    k = RBF()
    with pytest.raises(ValueError, match="Z must hold between 1 and 50 inducing points"):
        sparse_ep(k, np.vstack([X, X[:1]]), X, yb, Probit())
    for bad_y in (None, yb[:-1], np.column_stack([yb, yb])):
        with pytest.raises(ValueError, match="y must have one entry per row of X"):
            sparse_ep(k, Z, X, bad_y, Probit())
    assert (sparse_ep(k, Z, X, yb[:, None], Probit()).log_marginal_likelihood      # a column
            == sparse_ep(k, Z, X, yb, Probit()).log_marginal_likelihood)
    with pytest.raises(ValueError, match=r"shape \(m, 2\)"):
        sparse_ep(k, Z[:, :1], X, yb, Probit())
    for alpha in (0.0, 1.5, -1.0):
        with pytest.raises(ValueError, match="alpha"):
            sparse_ep(k, Z, X, yb, Probit(), alpha=alpha)
        with pytest.raises(ValueError, match="'power' parameter"):
            EPGaussianProcessClassifier(n_inducing=5, power=alpha).fit(X, yb)
    with pytest.raises(ValueError, match="more inducing points"):
        EPGaussianProcessClassifier(n_inducing=51).fit(X, yb)
    with pytest.raises(ValueError, match="inducing_points must have shape"):
        CensoredGPRegressor(inducing_points=Z[:, :1], lower=-0.2).fit(X, yt)
    with pytest.raises(ValueError, match="'method' parameter"):
        EPGaussianProcessClassifier(n_inducing=5, method="chunked").fit(X, yb)
    with pytest.raises(ValueError, match="inference='ep'"):
        CensoredGPRegressor(n_inducing=5, inference="laplace", lower=-0.2).fit(X, yt)


def test_unusable_warm_start_falls_back_to_a_cold_start(data):
    """Warm-start sites whose inducing precision is not positive definite (here: very
    negative site precisions) give the cold-start answer instead of an error."""
    X, _, yb, _, Z = data
    k = RBF(1.5, 1.1)
    cold = sparse_ep(k, Z, X, yb, Probit(), **TIGHT)
    bad = np.full(X.shape[0], -1e6)
    warm = sparse_ep(k, Z, X, yb, Probit(), site_tau=bad, site_nu=np.zeros(X.shape[0]),
                     **TIGHT)
    assert warm.converged and warm.n_iter == cold.n_iter
    np.testing.assert_array_equal(warm.site_tau, cold.site_tau)
    assert warm.log_marginal_likelihood == cold.log_marginal_likelihood


def test_gradient_passes_fused_and_with_the_results_marginals_match_numpy(data):
    """The first pass taking h_i's marginals from the result (no S V product) and the
    compiled G of the second pass give what the plain NumPy formulas give: the base
    backend's ``gradient_direction`` (NumPy expression) against the CPU's compiled loop,
    serial and parallel, and the first pass with and without the marginals."""
    from fastep.backend import Backend, resolve
    from fastep.inference.sparse_ep._gradient import (gradient_constants, gradient_first,
                                                      gradient_second_constants)
    be = resolve("cpu")
    rng = np.random.default_rng(0)
    m, c = 7, 2500
    V, SV, SUSV = (np.asfortranarray(rng.normal(size=(m, c))) for _ in range(3))
    mv, r = rng.normal(size=m), rng.normal(size=m)
    a, w, b, tau, gd = (rng.normal(size=c) for _ in range(5))
    expected = Backend.gradient_direction(be, V, SV, SUSV.copy(), mv, r, a, w, b, tau, gd)
    for serial in (True, False):
        got = be.gradient_direction(V, SV, SUSV.copy(), mv, r, a, w, b, tau, gd, serial)
        np.testing.assert_allclose(got, expected, rtol=1e-13, atol=1e-13)
    X, _, yb, _, Z = data
    k, lik = RBF(1.5, 1.1), Probit()
    res = sparse_ep(k, Z, X, yb, lik, **TIGHT)
    consts = gradient_constants(be, res, k, lik)
    args = (consts, np.ascontiguousarray(X), lik.encode_targets(yb), np.zeros((len(yb), 0)),
            res.site_tau, res.site_nu)
    plain = gradient_first(*args)
    reused = gradient_first(*args, (res.mean, res.var - res.resid, res.resid))
    for p, q in zip(plain, reused):
        np.testing.assert_allclose(q, p, rtol=1e-9, atol=1e-11)
    gradient_second_constants(consts, *reused)


def test_gradient_without_the_inputs_is_the_same_gradient(data):
    """``inputs=False`` (ML-II with fixed inducing inputs) skips d/dZ and changes nothing
    else."""
    X, _, yb, _, Z = data
    k, lik = RBF(1.5, 1.1), Probit()
    res = sparse_ep(k, Z, X, yb, lik, **TIGHT)
    full = sparse_ep_gradient(res, k, X, yb, lik, chunk_size=7)
    part = sparse_ep_gradient(res, k, X, yb, lik, chunk_size=7, inputs=False)
    assert part[1] is None and full[1].shape == Z.shape
    np.testing.assert_array_equal(part[0], full[0])
    np.testing.assert_array_equal(part[2], full[2])


@pytest.mark.parametrize("power", [1.0, 0.5])
@pytest.mark.parametrize("name", ["probit", "student_t"])
def test_closing_pass_takes_the_gradients_first_pass(data, name, power):
    """With ``keep_gram`` (ML-II's evaluations) a chunk-sequential run's closing pass takes
    the sums of the gradient's first pass (in q's coordinates, :func:`gradient_sums`); the
    gradient from them equals the two-pass gradient and central differences of log Z, and
    is taken once.  The parallel schedule has no closing pass and keeps none."""
    from fastep.backend import resolve
    from fastep.inference.sparse_ep import run_sparse_ep
    from fastep.likelihoods import StudentT
    X, f, yb, _, Z = data
    y, lik = (yb, Probit()) if name == "probit" else (f + 0.2 * np.cos(3 * X[:, 1]),
                                                      StudentT(4.0, 0.3))
    be, k = resolve("cpu"), RBF(1.5, [1.1, 0.8])

    def run(kernel, **kw):
        return run_sparse_ep(be, kernel, Z, X, y, lik, power, None, 1e-12, 3000, chunk_size=7,
                             keep_gram=True, **kw)
    fused = run(k)
    assert fused._first_pass is not None and fused._first_pass[0] is lik
    got = sparse_ep_gradient(fused, k, X, y, lik, chunk_size=7, inputs=False)
    assert fused._first_pass is None and fused._gram is None
    plain = run(k)
    plain._first_pass = None
    want = sparse_ep_gradient(plain, k, X, y, lik, chunk_size=7, inputs=False)
    for a, b in zip(got[::2], want[::2]):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-10)
    h, theta = 1e-5, k.theta
    for i in range(theta.size):
        ends = []
        for sign in (1.0, -1.0):
            kk = k.clone_with_theta(theta + sign * h * np.eye(theta.size)[i])
            ends.append(run(kk).log_marginal_likelihood)
        fd = (ends[0] - ends[1]) / (2 * h)
        assert got[0][i] == pytest.approx(fd, rel=1e-5, abs=1e-6)
    assert run(k, method="parallel")._first_pass is None


@pytest.mark.parametrize("mapped", [False, True])
def test_kept_gram_matrix_gives_the_same_warm_run_and_gradient(data, monkeypatch, mapped):
    """ML-II's evaluations: a warm start's pass fills the Gram cache that the sweeps and the
    gradient then read (``keep_gram``); the run, its log Z and the gradient equal those of
    a run without a cache and a gradient that computes every kernel value.  ``mapped``:
    the cache is mapped at once (:func:`fastep._memory.mapped_empty`, as a large one is)."""
    import mmap
    from fastep import _memory
    from fastep.backend import resolve
    from fastep.inference.sparse_ep import run_sparse_ep
    if mapped:
        monkeypatch.setattr(_memory, "MAPPED_MIN_BYTES", 0)
    X, _, yb, _, Z = data
    k, lik, be = RBF(1.5, 1.1), Probit(), resolve("cpu")
    start = sparse_ep(RBF(1.2, 0.9), Z, X, yb, lik, tol=1e-3)
    runs = {cache: run_sparse_ep(be, k, Z, X, yb, lik, 1.0, None, 1e-10, 500,
                                 site_tau=start.site_tau, site_nu=start.site_nu,
                                 chunk_size=7, gram_cache=cache, keep_gram=True)
            for cache in (0, 2 ** 31)}
    kept, plain = runs[2 ** 31], runs[0]
    assert plain._gram is None and kept._gram.shape == (X.shape[0], Z.shape[0])
    root = kept._gram
    while isinstance(root, np.ndarray):
        root = root.base
    assert (isinstance(root, memoryview) and isinstance(root.obj, mmap.mmap)) == mapped
    np.testing.assert_allclose(kept._gram, k(X, Z), rtol=1e-14)
    assert kept.n_iter == plain.n_iter
    assert kept.log_marginal_likelihood == pytest.approx(plain.log_marginal_likelihood,
                                                         rel=1e-13)
    np.testing.assert_allclose(kept.site_tau, plain.site_tau, rtol=1e-11, atol=1e-14)
    from_gram = sparse_ep_gradient(kept, k, X, yb, lik, chunk_size=7)
    assert kept._gram is None                               # one gradient, then freed
    computed = sparse_ep_gradient(plain, k, X, yb, lik, chunk_size=7)
    for a, b in zip(from_gram[:2], computed[:2]):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-11)
    assert sparse_ep(k, Z, X, yb, lik)._gram is None        # only when asked for
