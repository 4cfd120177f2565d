"""Runs every GPU kernel, and every algorithm with device="cuda", on seeded inputs; saves
inputs and outputs.

Run by ``tests/backend/test_cuda.py`` in a subprocess, on a real GPU when there is one, else
under Numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1`` must be set before numba is
imported, hence the subprocess).  This script only *runs* the GPU code: the CPU
twins are computed, and compared, by the tests in the pytest process.  Under the simulator
``device="cuda"`` resolves to the CUDA backend with NumPy/SciPy standing in for CuPy
(:func:`fastep.backend.cuda.linalg.host_algebra`), so the drivers run the GPU code path end to end.

    python tests/helpers/cuda_checks.py OUT.npz          # kernels and drivers
    python tests/helpers/cuda_checks.py OUT.npz --jobs 14   # in 14 processes (a GPU machine)
    python tests/helpers/cuda_checks.py --ptx            # compile every kernel to PTX (needs NVVM)

Launch sizes are tiny under the simulator (a few threads that each walk a
grid-stride loop over many elements): fast, and the loops really do stride.
"""
from __future__ import annotations

import math
import sys
import time
import warnings

import numpy as np

N_SITES = 40
N_QUAD = 16           # sites for likelihoods integrated by panel quadrature (slow in Python)
#: Likelihoods whose tilted moments are the panel quadrature at every alpha.
QUAD_LIKS = ("logistic", "custom", "poisson", "neg_binomial", "zi_poisson", "zi_neg_binomial",
             "student_t", "weibull", "log_logistic", "log_normal")
#: Likelihoods whose log-density calls math.lgamma.
LGAMMA_LIKS = ("poisson", "neg_binomial", "zi_poisson", "zi_neg_binomial", "student_t")
KINDS = (0, 1, 2, 3)  # RBF, Matern12, Matern32, Matern52


def log_lik_custom(y, extra, f, params):
    """A user likelihood for CustomLikelihood: Student-t-like heavy tail, math only."""
    r = (y - f) / params[0]
    return -2.0 * math.log1p(0.25 * r * r) - math.log(params[0])


def likelihoods(n, rng):
    """(name, likelihood, y, extra) for every likelihood, with extreme-cavity data."""
    from fastep.likelihoods import (CustomLikelihood, Gaussian, Logistic, MultiAnnotator,
                                    NegativeBinomial, OrdinalProbit, Poisson, Probit,
                                    StudentT, Tobit, Weibull, LogLogistic, LogNormal,
                                    ZeroInflatedNegativeBinomial, ZeroInflatedPoisson)
    from fastep.likelihoods.tobit import check_censored_data
    pm = rng.choice([-1.0, 1.0], n)
    out = [("probit", Probit(), pm), ("logistic", Logistic(), pm),
           ("gaussian", Gaussian(0.3), rng.normal(0.0, 10.0, n))]
    lower = np.where(rng.random(n) < 0.8, rng.normal(-1.0, 3.0, n), -np.inf)
    base = np.where(np.isfinite(lower), lower, rng.normal(1.0, 3.0, n))
    upper = np.where(rng.random(n) < 0.8, base + np.abs(rng.normal(3.0, 3.0, n)) + 0.1, np.inf)
    lo_f, up_f = np.isfinite(lower), np.isfinite(upper)
    exact = np.where(lo_f & up_f, 0.5 * (np.where(lo_f, lower, 0) + np.where(up_f, upper, 0)),
                     np.where(lo_f, lower + 1.0, np.where(up_f, upper - 1.0, 0.0)))
    kind = rng.integers(0, 4, n)          # 0 left, 1 right, 2 exact, 3 interval
    y = np.where((kind == 0) & lo_f, lower, np.where((kind == 1) & up_f, upper, exact))
    y = np.where((kind == 3) & lo_f & up_f, np.nan, y)
    check_censored_data(y, lower, upper)
    out.append(("tobit", Tobit(0.2, lower=lower, upper=upper), y))
    labels = np.where(rng.random((n, 4)) < 0.3, np.nan, (rng.random((n, 4)) < 0.5) * 1.0)
    out.append(("annotators", MultiAnnotator(labels, [0.9, 0.7, 0.6, 0.99],
                                             [0.8, 0.65, 0.55, 1.0]), np.ones(n)))
    out.append(("custom", CustomLikelihood(log_lik_custom, params={"scale": 0.7}),
                rng.normal(0.0, 5.0, n)))
    counts = np.floor(10.0 ** rng.uniform(0.0, 4.0, n)) * (rng.random(n) < 0.8)
    out.append(("poisson", Poisson(exposure=rng.uniform(0.5, 2.0, n)), counts))
    out.append(("neg_binomial", NegativeBinomial(2.5), counts))
    out.append(("zi_poisson", ZeroInflatedPoisson(0.2, exposure=rng.uniform(0.5, 2.0, n)),
                counts))
    out.append(("zi_neg_binomial", ZeroInflatedNegativeBinomial(2.5, 0.4), counts))
    times = 10.0 ** rng.uniform(-2.0, 2.0, n)
    event = (rng.random(n) < 0.7) * 1.0
    out.append(("weibull", Weibull(1.7, event=event), times))
    out.append(("log_logistic", LogLogistic(2.5, event=event), times))
    out.append(("log_normal", LogNormal(0.8, event=event), times))
    out.append(("student_t", StudentT(3.0, 0.4), rng.normal(0.0, 10.0, n)))
    out.append(("ordinal", OrdinalProbit([-1.0, 0.3, 2.0]), rng.integers(0, 4, n) * 1.0))
    return [(name, lik, yy, lik.site_extra(n)) for name, lik, yy in out]


def _extreme_cavities(rng, n):
    return rng.uniform(-30.0, 30.0, n), 10.0 ** rng.uniform(-4.0, 4.0, n)


def likelihood_names():
    return [name for name, *_ in likelihoods(8, np.random.default_rng(1))]


def run_likelihood_kernels(res, index, only):
    """The three kernels of likelihood ``only`` (its tilted moments, parallel-EP and
    Power-EP sites) on seeded extreme inputs; ``index`` seeds them.  One likelihood's
    kernels compile on their own, so a GPU machine's cores compile likelihoods in parallel
    (``--jobs``)."""
    from fastep.backend.cuda import kernels as ck
    from fastep._sites import SiteBuffers, SiteData
    rng = np.random.default_rng([11, index])
    cases = [c for c in likelihoods(N_SITES, np.random.default_rng(1)) if c[0] == only]

    def n_for(name):
        return N_QUAD if name in QUAD_LIKS else N_SITES

    # tilted moments, at alpha = 1 (closed forms) and alpha = 0.5 (panel quadrature)
    for alpha in (1.0, 0.5):
        for name, lik, y, extra in cases:
            n = n_for(name) if alpha == 1.0 else N_QUAD
            mu, var = _extreme_cavities(rng, n)
            y, extra = y[:n].copy(), np.ascontiguousarray(extra[:n])
            out = np.full((3, n), np.nan)
            ck.tilted_batch(lik.scalar_tilted, y, extra, mu, var, alpha, lik.params,
                            out[0], out[1], out[2])
            key = f"tilted/{name}/{alpha}"
            res.update({f"{key}/mu": mu, f"{key}/var": var, f"{key}/out": out})

    # parallel EP sites (alpha = 1) and Power-EP sites (alpha = 1 and 0.5)
    for name, lik, y, extra in cases:
        n = n_for(name)
        y, extra = y[:n].copy(), np.ascontiguousarray(extra[:n])
        mc, vc = _extreme_cavities(rng, n)
        tau = rng.normal(0.0, 1.0, n) * 10.0 ** rng.uniform(-3, 2, n)
        nu = rng.normal(0.0, 3.0, n)
        bad = rng.random(n) < 0.15                       # improper cavities: skipped
        bad[0] = True                                    # at least one
        tau = np.where(bad, np.abs(tau) + 0.1, tau)
        with np.errstate(divide="ignore"):
            var = np.where(bad, 2.0 / tau, 1.0 / (1.0 / vc + tau))
        var = np.where((var > 0) & np.isfinite(var), var, 1.0)
        mean = var * (mc / vc + nu)
        for clip in (True, False):
            outs = [np.full(n, np.nan) for _ in range(5)]
            counter = np.zeros(1, dtype=np.int64)
            ck.parallel_sites(lik.scalar_tilted, SiteData(y, extra, lik.params),
                              SiteBuffers(mean, var, tau, nu, *outs), 0.7, clip, counter)
            key = f"sites/{name}/{clip}"
            res.update({f"{key}/mean": mean, f"{key}/var": var, f"{key}/tau": tau,
                        f"{key}/nu": nu, f"{key}/out": np.array(outs),
                        f"{key}/skipped": counter.copy()})
        resid = 10.0 ** rng.uniform(-6, 1, n)
        pvar = 10.0 ** rng.uniform(-6, 2, n)
        pmean = rng.uniform(-20.0, 20.0, n)
        for alpha in (1.0, 0.5):
            if alpha != 1.0 and name in QUAD_LIKS:
                n2 = N_QUAD // 2
            else:
                n2 = n
            outs = [np.full(n2, np.nan) for _ in range(5)]
            counter = np.zeros(1, dtype=np.int64)
            sl = slice(0, n2)
            ck.power_sites(lik.scalar_tilted,
                           SiteData(y[sl], np.ascontiguousarray(extra[sl]), lik.params),
                           SiteBuffers(pmean[sl], pvar[sl], tau[sl], nu[sl], *outs), resid[sl],
                           alpha, 0.6, lik.log_concave, counter)
            key = f"power/{name}/{alpha}"
            res.update({f"{key}/mean": pmean[sl], f"{key}/var": pvar[sl],
                        f"{key}/resid": resid[sl], f"{key}/tau": tau[sl], f"{key}/nu": nu[sl],
                        f"{key}/out": np.array(outs), f"{key}/skipped": counter.copy()})


def run_fixed_kernels(res, rng):
    """The kernels that do not depend on a likelihood: dense covariance work, sparse
    marginals, stationary Gram matrices and contractions."""
    from fastep.backend.cuda import kernels as ck
    # dense covariance work
    n = 40
    A = rng.normal(size=(n, n))
    K = A @ A.T / n
    s = np.sqrt(np.abs(rng.normal(size=n))) * (rng.random(n) < 0.8)
    b, sc, rs = np.empty((n, n)), np.empty((n, n)), np.empty(n)
    ck.build_b(K, s, b)
    ck.scale_columns(K, s, sc)
    ck.row_sumsq(A, rs)
    cs = np.empty(n)
    ck.col_sumsq(A, cs)
    res.update({"dense/K": K, "dense/s": s, "dense/A": A, "dense/build_b": b,
                "dense/scale_columns": sc, "dense/row_sumsq": rs, "dense/col_sumsq": cs})

    # sparse EP: per-site marginals of the projections
    m, c = 7, 45
    G = np.asfortranarray(rng.normal(size=(m, c)))
    beta = rng.normal(size=m)
    mean, var = np.empty(c), np.empty(c)
    ck.projection_marginals(G, beta, mean, var)
    res.update({"marg/G": G, "marg/beta": beta, "marg/mean": mean, "marg/var": var})

    # stationary Gram matrices and contractions, every kind, ARD
    x1, x2 = rng.normal(size=(23, 3)), rng.normal(size=(19, 3))
    inv_ls = 1.0 / np.array([0.5, 1.3, 2.0])
    g = rng.normal(size=(23, 19))
    g[rng.random(g.shape) < 0.1] = 0.0
    res.update({"gram/x1": x1, "gram/x2": x2, "gram/inv_ls": inv_ls, "gram/g": g})
    for kind in KINDS:
        cross, sym = np.empty((23, 19)), np.empty((23, 23))
        ck.stationary_gram(x1, x2, inv_ls, 1.7, kind, cross)
        ck.stationary_gram(x1, x1, inv_ls, 1.7, kind, sym)
        cols = np.empty((19, 4))
        ck.stationary_contract(x1, x2, inv_ls, 1.7, kind, g, cols)
        dx = np.empty((23, 3))
        ck.stationary_input_contract(x1, x2, inv_ls, 1.7, kind, np.ascontiguousarray(g.T), dx)
        from_gram = np.empty((19, 4))             # the contraction given K (the one above)
        ck.stationary_gram_contract(x1, x2, inv_ls, kind, g, cross, from_gram)
        res.update({f"gram/{kind}/cross": cross, f"gram/{kind}/sym": sym,
                    f"gram/{kind}/contract": cols, f"gram/{kind}/input": dx,
                    f"gram/{kind}/from_gram": from_gram})


def robustmax_inputs(rng):
    """(mean, var, labels) for J = 2 and 10, extreme moments included: means +-30,
    variances 1e-6 ... 1e3, and near-ties between classes."""
    out = []
    for J in (2, 10):
        n = 9
        mean = rng.uniform(-30.0, 30.0, (n, J)) * (rng.random((n, J)) < 0.7)
        mean[0] = 0.5                                    # an exact tie
        var = 10.0 ** rng.uniform(-6.0, 3.0, (n, J))
        out.append((J, mean, var, rng.integers(0, J, n)))
    return out


def run_robustmax(res, rng):
    from fastep._numerics import gauss_hermite
    from fastep.backend.cuda import kernels as ck
    nodes, weights = (np.array(a) for a in gauss_hermite(20))
    for J, mean, var, labels in robustmax_inputs(rng):
        out = np.full((mean.shape[0], J), np.nan)
        ck.prob_largest_all(mean, var, nodes, weights, out)
        grads = [np.full(mean.shape[0], np.nan), np.full((mean.shape[0], J), np.nan),
                 np.full((mean.shape[0], J), np.nan)]
        ck.prob_largest_grad(mean, var, labels, nodes, weights, *grads)
        key = f"robustmax/{J}"
        res.update({f"{key}/mean": mean, f"{key}/var": var, f"{key}/labels": labels,
                    f"{key}/all": out, f"{key}/s": grads[0], f"{key}/dm": grads[1],
                    f"{key}/dv": grads[2]})


def gwi_problem():
    rng = np.random.default_rng(5)
    X = rng.normal(size=(24, 2))
    y = np.digitize(X[:, 0] + 0.3 * X[:, 1], [-0.5, 0.5])   # 3 classes
    return X, y


def run_gwi(res):
    """GWIClassifier(device='cuda'): the robust-max products on the GPU, a short fit."""
    from fastep import GWIClassifier
    X, y = gwi_problem()
    clf = GWIClassifier(n_inducing=6, max_iter=4, random_state=0, device="cuda").fit(X, y)
    res["gwi/proba"] = clf.predict_proba(X[:5] + 0.1)


def composite_kernels():
    from fastep.kernels import (RBF, ConstantKernel, Linear, Matern12, Matern32, Matern52,
                                Periodic, RationalQuadratic, WhiteKernel)
    return {"rbf_ard": RBF(1.3, [0.7, 1.4]),
            "rq_ard": RationalQuadratic(1.2, [0.8, 1.5], 0.7),
            "periodic_x_rbf": Periodic(0.9, [1.1, 0.7], 1.6) * RBF(1.0, 2.0),
            "sum": Matern32(0.8, 0.9) + WhiteKernel(0.1) + ConstantKernel(0.5),
            "product": Matern52(1.1, [1.0, 0.6]) * Linear(0.4),
            "m12_fixed": Matern12(1.0, 0.8, variance_bounds="fixed")}


def run_gram_api(res, backend, rng):
    """Every kernel's Gram matrix and contractions through its ``backend=`` methods."""
    X, Y = rng.normal(size=(21, 2)), rng.normal(size=(13, 2))
    G, Gc = rng.normal(size=(21, 21)), rng.normal(size=(21, 13))
    res.update({"api/X": X, "api/Y": Y, "api/G": G, "api/Gc": Gc})
    for name, k in composite_kernels().items():
        res[f"api/{name}/K"] = backend.to_host(k(X, backend=backend))
        res[f"api/{name}/Kxy"] = backend.to_host(k(X, Y, backend=backend))
        res[f"api/{name}/diag"] = backend.to_host(k.diag(X, backend=backend))
        res[f"api/{name}/dK"] = k.gradient_contract(X, G, backend=backend)
        res[f"api/{name}/dKxy"] = k.gradient_contract(X, Gc, Y, backend=backend)
        # given K itself (sparse EP's gradient passes the K(X, Z) its run kept), as a device
        # array, and F-ordered as that pass's weights are
        K_d = k(X, Y, backend=backend)
        res[f"api/{name}/dKxy_gram"] = k.gradient_contract(X, Gc, Y, backend=backend, gram=K_d)
        res[f"api/{name}/dKxy_gram_f"] = k.gradient_contract(
            X, backend.asarray(np.asfortranarray(Gc)), Y, backend=backend,
            gram=backend.xp.asfortranarray(K_d))
        res[f"api/{name}/dZ"] = k.input_gradient_contract(Y, Gc.T, X, backend=backend)
        res[f"api/{name}/ddiag"] = k.diag_gradient_contract(X, G[0], backend=backend)


def driver_problems():
    """(name, K, y, likelihood, kwargs) for the dense driver; seeded."""
    from fastep.kernels import RBF
    from fastep.likelihoods import (Gaussian, MultiAnnotator, Poisson, Probit, StudentT, Tobit,
                                    ZeroInflatedPoisson)
    rng = np.random.default_rng(7)
    n = 20
    X = rng.normal(size=(n, 2))
    K = RBF(2.0, 0.9)(X) + 1e-6 * np.eye(n)
    f = np.sin(2 * X[:, 0])
    pm = np.where(f + 0.3 * rng.normal(size=n) > 0, 1.0, -1.0)
    ycens = np.maximum(f + 0.1 * rng.normal(size=n), -0.3)
    labels = np.where(rng.random((n, 3)) < 0.75, (pm[:, None] > 0) * 1.0,
                      (pm[:, None] < 0) * 1.0)
    labels[rng.random((n, 3)) < 0.2] = np.nan
    counts = rng.poisson(np.exp(f + 0.5)) * 1.0
    y_out = f + 0.05 * rng.normal(size=n)
    y_out[::6] += 4.0                                     # outliers: negative sites
    return X, [("probit", K, pm, Probit(), {}),
               ("poisson", K, counts, Poisson(), {}),
               ("zero_inflated_poisson", K, counts * (rng.random(n) > 0.3),
                ZeroInflatedPoisson(0.3), {}),
               ("student_t", K, y_out, StudentT(4.0, 0.1), {}),
               ("gaussian", K, f, Gaussian(0.05), {}),
               ("tobit", K, ycens, Tobit(0.01, lower=-0.3), {"damping": 0.8}),
               ("annotators", K, np.ones(n),
                MultiAnnotator(labels, [0.9, 0.6, 0.55], [0.85, 0.6, 0.5]), {"damping": 0.5})]


def sparse_problems():
    from fastep.kernels import RBF
    from fastep.likelihoods import Gaussian, Probit, StudentT
    rng = np.random.default_rng(8)
    n = 30
    X = rng.uniform(-2, 2, (n, 1))
    pm = np.where(np.sin(2 * X[:, 0]) > 0, 1.0, -1.0)
    Z = np.linspace(-2, 2, 6)[:, None]
    return X, Z, [("probit", RBF(2.0, 0.7), pm, Probit(), {"alpha": 1.0}),
                  ("gaussian", RBF(1.0, 0.7), np.sin(2 * X[:, 0]), Gaussian(0.1),
                   {"alpha": 0.5}),
                  ("student_t", RBF(1.0, 0.7), np.sin(2 * X[:, 0]) + 3.0 * (np.arange(n) % 7 == 0),
                   StudentT(4.0, 0.1), {"alpha": 1.0})]


def run_drivers(res, only=None):
    """fastep.ep and sparse_ep with device='cuda', predictions and evidence gradients
    (``only``: the problems of that name alone)."""
    import fastep
    from fastep.inference import ep_gradient, sparse_ep, sparse_ep_gradient
    from fastep.kernels import RBF
    X, problems = driver_problems()
    kernel = RBF(2.0, 0.9)
    for name, K, y, lik, kw in problems:
        if only not in (None, name):
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            r = fastep.ep(K, y, lik, device="cuda", **kw)
        Xs = X[:5] + 0.1
        pm, pv = r.predict_latent(kernel(X, Xs), np.full(5, 2.0))
        d_kernel, d_lik = ep_gradient(r, kernel, X, y, lik)
        res.update({f"ep/{name}/mean": r.mean, f"ep/{name}/var": r.var,
                    f"ep/{name}/tau": r.site_tau, f"ep/{name}/nu": r.site_nu,
                    f"ep/{name}/logz": np.array([r.log_marginal_likelihood]),
                    f"ep/{name}/n_iter": np.array([r.n_iter]),
                    f"ep/{name}/cav": np.array([r.cavity_mean, r.cavity_var]),
                    f"ep/{name}/pred": np.array([pm, pv]),
                    f"ep/{name}/grad": np.concatenate([d_kernel, d_lik])})
    X, Z, problems = sparse_problems()
    for name, kernel, y, lik, kw in problems:
        if only not in (None, name):
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            r = sparse_ep(kernel, Z, X, y, lik, chunk_size=16, device="cuda", **kw)
        pm, pv = r.predict_latent(kernel, X[:5] + 0.05)
        g = sparse_ep_gradient(r, kernel, X, y, lik, chunk_size=16)
        res.update({f"sparse/{name}/mean": r.mean, f"sparse/{name}/var": r.var,
                    f"sparse/{name}/tau": r.site_tau, f"sparse/{name}/nu": r.site_nu,
                    f"sparse/{name}/logz": np.array([r.log_marginal_likelihood]),
                    f"sparse/{name}/n_iter": np.array([r.n_iter]),
                    f"sparse/{name}/cav": np.array([r.cavity_mean, r.cavity_var]),
                    f"sparse/{name}/pred": np.array([pm, pv]),
                    f"sparse/{name}/grad": np.concatenate([g[0], g[1].ravel(), g[2]])})


def estimator_problem():
    rng = np.random.default_rng(9)
    X = rng.normal(size=(20, 2))
    y = (X[:, 0] + 0.5 * X[:, 1] > 0).astype(int)
    return X, y


def estimators():
    """(name, estimator, targets) fitted with device='cpu' and device='cuda' and compared."""
    from fastep import (CensoredGPRegressor, EPGaussianProcessClassifier,
                        MultiAnnotatorGPClassifier, NestedEPClassifier)
    from fastep.datasets import simulate_annotators
    from fastep.kernels import RBF
    X, y = estimator_problem()
    Y = simulate_annotators(y, [0.9, 0.7, 0.6], [0.8, 0.7, 0.55], random_state=3)
    noise = 0.1 * np.random.default_rng(10).normal(size=X.shape[0])
    t = np.maximum(np.sin(2 * X[:, 0]) + 0.1 * X[:, 1] + noise, -0.3)
    return X, [
        ("dense", EPGaussianProcessClassifier(RBF(1.5, 0.8), optimizer=None, tol=1e-10), y),
        ("sparse", EPGaussianProcessClassifier(RBF(1.5, 0.8), optimizer=None, tol=1e-10,
                                               inducing_points=X[::4]), y),
        ("mlii", EPGaussianProcessClassifier(RBF(1.5, 0.8), inducing_points=X[::4],
                                             optimize_inducing=True, max_iter=200), y),
        ("censored", CensoredGPRegressor(RBF(1.0, 0.8), noise_variance=0.05, lower=-0.3,
                                         max_iter=300), t),
        ("annotators", MultiAnnotatorGPClassifier(RBF(1.5, 0.8), optimizer=None, tol=1e-10,
                                                  max_iter=500, method="parallel"), Y),
        ("annotators-sparse", MultiAnnotatorGPClassifier(RBF(1.5, 0.8), optimizer=None,
                                                         tol=1e-10, max_iter=500,
                                                         inducing_points=X[::4]), Y),
        ("one-vs-rest", EPGaussianProcessClassifier(RBF(1.5, 0.8), optimizer=None, tol=1e-10),
         np.digitize(X[:, 0] + 0.5 * X[:, 1], [-0.4, 0.4])),
        ("nested", NestedEPClassifier(RBF(1.5, 0.8), tol=1e-10, max_iter_optimizer=20),
         np.digitize(X[:, 0] + 0.5 * X[:, 1], [-0.4, 0.4]))]


def probe_theta(est):
    """A fixed point of the ML-II parameter space, from the constructor's starting values
    (not the fitted ones), to compare the evidence and its gradient at: log kernel
    parameters, log noise variance (censored), the inducing inputs (if given) + 0.05."""
    parts = [est.kernel.theta]
    if hasattr(est, "noise_variance"):
        parts.append([np.log(est.noise_variance)])
    if est.inducing_points is not None and est.optimize_inducing:
        parts.append(np.asarray(est.inducing_points).ravel())
    return np.concatenate(parts) + 0.05


def run_estimators(res, only=None):
    """Estimators fitted with device='cuda' (ML-II included), saved and loaded on the CPU
    (``only``: that one alone)."""
    import os
    import tempfile

    from fastep import load_model, save_model
    X, cases = estimators()
    Xs = X[:6] + 0.1
    for name, est, targets in cases:
        if only not in (None, name):
            continue
        est.set_params(device="cuda")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            est.fit(X, targets)
        theta = est.kernel_.theta
        res[f"est/{name}/theta"] = theta
        res[f"est/{name}/lml"] = np.array([est.log_marginal_likelihood_value_])
        res[f"est/{name}/n_iter"] = np.array([est.n_iter_])
        res[f"est/{name}/latent"] = np.array(est.predict_latent(Xs, return_std=True))
        with tempfile.TemporaryDirectory() as tmp:   # saved from the GPU, loaded on the CPU
            save_model(est, os.path.join(tmp, "model.npz"))
            loaded = load_model(os.path.join(tmp, "model.npz"))
        res[f"est/{name}/loaded"] = np.array(loaded.predict_latent(Xs, return_std=True))
        if est.optimizer is not None:
            value, grad = est.log_marginal_likelihood(probe_theta(est), eval_gradient=True)
            res[f"est/{name}/probe"] = np.concatenate([[value], grad])
        res[f"est/{name}/loaded_device"] = np.array([loaded.device])


def run_messages(res):
    """device='cuda' with a bad method: the error names the knob."""
    import fastep
    from fastep.likelihoods import Probit
    try:
        fastep.ep(np.eye(3), np.ones(3), Probit(), method="sequential", device="cuda")
        res["msg/sequential"] = np.array(["(no error)"])
    except Exception as exc:
        res["msg/sequential"] = np.array([f"{type(exc).__name__}: {exc}"])


def units():
    """The independent pieces of the checks, in the order a single process runs them:
    one per likelihood's kernels, then the rest (each seeded on its own)."""
    drivers = sorted({p[0] for p in driver_problems()[1] + sparse_problems()[2]})
    return ([f"kernels/{name}" for name in likelihood_names()]
            + ["kernels/fixed", "robustmax", "gram"]
            + [f"drivers/{name}" for name in drivers]
            + [f"estimators/{case[0]}" for case in estimators()[1]] + ["gwi"])


def run_unit(unit):
    """Run one unit of :func:`units` in this process; its outputs as a dict."""
    import fastep.cuda as fc
    from fastep.backend import resolve
    from fastep.backend.cuda import kernels as ck
    if fc.simulator_enabled():
        ck.THREADS_PER_BLOCK, ck.THREADS_2D, ck.MAX_BLOCKS = 4, 2, 2
    res = {}
    group, _, name = unit.partition("/")
    if group == "kernels" and name != "fixed":
        run_likelihood_kernels(res, likelihood_names().index(name), name)
    elif group == "drivers":
        run_drivers(res, name)
    elif group == "estimators":
        run_estimators(res, name)
    else:
        run = {"kernels/fixed": lambda: run_fixed_kernels(res, np.random.default_rng(0)),
               "robustmax": lambda: run_robustmax(res, np.random.default_rng(20)),
               "gram": lambda: run_gram_api(res, resolve("cuda"), np.random.default_rng(21)),
               "gwi": lambda: run_gwi(res)}
        run[unit]()
    return res


def main(path, jobs=1):
    """Run every unit and save the outputs to ``path`` after each one (a run stopped by a
    time limit keeps what it finished).  ``jobs`` > 1 runs the units in that many spawned
    processes: on a GPU, compiling every likelihood's kernels one after another takes
    several minutes (each kernel inlines its likelihood's quadrature).  A unit that fails
    prints its traceback and the others go on; the exit status is then 1."""
    import traceback

    import fastep.cuda as fc
    from fastep.backend import resolve
    res = {"meta/simulator": np.array([fc.simulator_enabled()])}
    run_messages(res)                       # before anything resolves device="cuda"
    res["meta/algebra"] = np.array([resolve("cuda")._la.name])
    t0, failed = time.perf_counter(), []

    def record(unit, outputs):
        try:
            res.update(outputs())
        except Exception:
            traceback.print_exc()
            failed.append(unit)
            return
        np.savez(path, **res)
        print(f"cuda_checks: {unit} done at {time.perf_counter() - t0:.1f} s", flush=True)

    if jobs <= 1:
        for unit in units():
            record(unit, lambda: run_unit(unit))
    else:
        import concurrent.futures as cf
        import multiprocessing
        pool = cf.ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn"))
        try:
            futures = {pool.submit(run_unit, unit): unit for unit in units()}
            for f in cf.as_completed(futures):
                record(futures[f], f.result)
        finally:
            pool.shutdown(cancel_futures=True)
    if failed:
        print(f"cuda_checks: failed: {', '.join(failed)}", file=sys.stderr)
        sys.exit(1)


def compile_ptx(cc=(9, 0)):
    """Compile every kernel (all likelihoods) to PTX without a GPU: catches code that the
    simulator runs but the CUDA target cannot compile.  Needs NVVM (CUDA_HOME)."""
    import types as pytypes

    import numba.cuda.dispatcher as dispatcher
    from numba import cuda
    from numba import types as nt
    dispatcher.get_current_device = lambda: pytypes.SimpleNamespace(compute_capability=cc)
    from fastep._sites import SiteBuffers
    from fastep.backend.cuda import kernels as ck
    f8, b1 = nt.float64, nt.boolean
    a1, a2, a2a, i8 = nt.float64[::1], nt.float64[:, ::1], nt.float64[:, :], nt.int64[::1]
    i8s = nt.int64
    records = (a1, a2, a1) + (a1,) * len(SiteBuffers._fields)      # SiteData, SiteBuffers
    sigs = {"tilted": (a1, a2, a1, a1, f8, a1, a1, a1, a1),
            "sites": records + (f8, b1, i8),
            "power": records + (a1, f8, f8, b1, i8)}
    done = []
    for name, lik, _, _ in likelihoods(8, np.random.default_rng(0)):
        for kname, kern in zip(("tilted", "sites", "power"),
                               ck._per_likelihood(lik.scalar_tilted)):
            cuda.compile_ptx(kern.py_func, sigs[kname], cc=cc)
            done.append(f"{kname}/{name}")
    fixed = {"_build_b_kernel": (a2, a1, a2), "_scale_columns_kernel": (a2, a1, a2),
             "_col_sumsq_kernel": (a2a, a1), "_projection_marginals_kernel": (a2a, a1, a1, a1),
             "_stationary_gram_kernel": (a2, a2, a1, f8, i8s, a2),
             "_stationary_contract_kernel": (a2, a2, a1, f8, i8s, a2a, a2),
             "_stationary_gram_contract_kernel": (a2, a2, a1, i8s, a2a, a2a, a2),
             "_stationary_input_contract_kernel": (a2, a2, a1, f8, i8s, a2a, a2),
             "_prob_largest_all_kernel": (a2, a2, a1, a1, a2),
             "_prob_largest_grad_kernel": (a2, a2, i8, a1, a1, a1, a2, a2)}
    for kname, sig in fixed.items():
        cuda.compile_ptx(getattr(ck, kname).py_func, sig, cc=cc)
        done.append(kname)
    print("PTX OK:", len(done), "kernels:", ", ".join(done))


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", nargs="?", help="the .npz the outputs go to")
    ap.add_argument("--jobs", type=int, default=1, help="worker processes (a GPU machine)")
    ap.add_argument("--ptx", action="store_true", help="compile every kernel to PTX only")
    args = ap.parse_args()
    if args.ptx:
        compile_ptx()
    elif args.out is None:
        ap.error("give the output file OUT.npz (or --ptx)")
    else:
        main(args.out, args.jobs)
