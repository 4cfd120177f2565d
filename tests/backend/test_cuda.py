"""The CUDA path: every GPU kernel against its CPU twin, and every algorithm run with
``device="cuda"`` (the same driver code over the CUDA backend) against ``device="cpu"``.

The GPU code runs in a subprocess (``tests/helpers/cuda_checks.py``): on a real GPU when one is
usable, else under Numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1`` must be set before
numba is imported, so it cannot be switched on inside this process without changing
every other test).  The subprocess saves its inputs and outputs; the CPU side is
computed *here* and compared.

Tolerance: 1e-12 relative.  Where the twins sum in a different order (a dot product in
BLAS against a loop) the error is relative to the sum of the magnitudes of the terms
(the condition of the sum), stated at each such test.  End to end (EP runs, gradients,
fitted estimators) the error is relative to the largest magnitude of the quantity
(``assert_end_to_end``): 1e-12 under the simulator; on a GPU, whose BLAS and cuSOLVER
sum in other orders through every sweep, 1e-10.
"""
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

import fastep
from helpers import cuda_checks as cc
from fastep._sites import SiteBuffers, SiteData
from fastep.backend import cpu as kern
from fastep.inference import ep_gradient, sparse_ep, sparse_ep_gradient
from fastep.kernels import gram as host_gram
from fastep.likelihoods._base import tilted_batch

ROOT = Path(__file__).resolve().parents[2]              # the checkout, for PYTHONPATH
HELPERS = Path(__file__).resolve().parents[1] / "helpers"
RTOL = 1e-12


def _gpu_usable_here():
    """A real GPU with its driver (checked without importing numba.cuda's simulator)."""
    try:
        import fastep.cuda as fc
        return fc.is_available() and not fc.simulator_enabled()
    except Exception:
        return False


def _start_checks(tmp, mode):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT), str(HELPERS), os.environ.get("PYTHONPATH", "")]), **_env_for(mode))
    out = Path(tmp) / "cuda_checks.npz"
    # on a GPU the kernels' compilation (minutes in one process) is spread over the cores
    jobs = ["--jobs", str(len(os.sched_getaffinity(0)))] if mode == "gpu" else []
    # a session of its own: _kill stops its worker processes too
    proc = subprocess.Popen([sys.executable, str(HELPERS / "cuda_checks.py"), str(out), *jobs],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    return proc, out


#: The checks' subprocess, started when the tests are collected (:func:`start_early`, from
#: tests/conftest.py) so that it runs beside the tests before this module's (it takes
#: 1-2 minutes under the simulator); (mode, process, output path) or None.
_EARLY = {}


def _kill(proc):
    """Kill the checks and the worker processes they started (their process group)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _mode():
    return "gpu" if _gpu_usable_here() else "simulator"


def _env_for(mode):
    return {} if mode == "gpu" else {"NUMBA_ENABLE_CUDASIM": "1"}


def start_early():
    """Start the GPU checks now (at collection) unless a saved run is named."""
    if os.environ.get("FASTEP_CUDA_CHECKS") or _EARLY:
        return
    mode = _mode()
    tmp = tempfile.mkdtemp(prefix="fastep-cuda-checks-")
    _EARLY.update(mode=mode, tmp=tmp, run=_start_checks(tmp, mode))


def stop_early():
    """Kill the early run if it is still going (a session that never needed it)."""
    if _EARLY:
        proc = _EARLY["run"][0]
        if proc.poll() is None:
            _kill(proc)
        proc.communicate()
        shutil.rmtree(_EARLY["tmp"], ignore_errors=True)
        _EARLY.clear()


class _Saved(dict):
    """A saved run's outputs: a run stopped part-way (cuda_checks saves after each stage)
    skips the tests of the stages it did not reach."""

    def __missing__(self, key):
        pytest.skip(f"{key!r} is not in the saved GPU run (FASTEP_CUDA_CHECKS): its stage "
                    f"did not finish there")


@pytest.fixture(scope="module")
def gpu(tmp_path_factory):
    """Outputs of the GPU code: on a real GPU if usable, else under the CUDA simulator; or
    read from the file that ``FASTEP_CUDA_CHECKS`` names (a GPU machine's run of
    ``tests/helpers/cuda_checks.py``, compared here with the CPU)."""
    saved = os.environ.get("FASTEP_CUDA_CHECKS")
    if saved:           # the outputs of `python tests/helpers/cuda_checks.py OUT` run elsewhere
        data = _Saved(np.load(saved))
        data["meta/mode"] = "simulator" if bool(data["meta/simulator"][0]) else "gpu"
        return data
    if _EARLY:
        mode, (proc, out) = _EARLY["mode"], _EARLY["run"]
    else:
        mode = _mode()
        proc, out = _start_checks(tmp_path_factory.mktemp("cuda"), mode)
    try:
        stdout, stderr = proc.communicate(timeout=600)
    except subprocess.TimeoutExpired:
        _kill(proc)
        stdout, stderr = proc.communicate()
    if proc.returncode != 0:
        probe = subprocess.run([sys.executable, "-c", "from numba import cuda; "
                                "assert cuda.is_available()"], capture_output=True,
                               env=dict(os.environ, NUMBA_ENABLE_CUDASIM="1"))
        if probe.returncode != 0:
            pytest.skip("neither a CUDA GPU nor Numba's CUDA simulator is usable here: "
                        + (probe.stderr.decode().strip().splitlines() or ["?"])[-1])
        raise AssertionError(f"GPU checks failed ({mode}):\n{stdout}\n{stderr}")
    data = dict(np.load(out))
    data["meta/mode"] = mode
    return data


def assert_end_to_end(gpu, gpu_value, cpu_value, what="", sim_tol=1e-12):
    """max |GPU - CPU| <= tol * max |CPU| (a norm-wise relative error): ``sim_tol`` under
    the simulator, 1e-10 on a GPU."""
    g, c = np.asarray(gpu_value, float), np.asarray(cpu_value, float)
    assert g.shape == c.shape
    tol = sim_tol if gpu["meta/mode"] == "simulator" else 1e-10
    err = float(np.max(np.abs(g - c)))
    scale = max(float(np.max(np.abs(c))), 1e-300)
    assert err <= tol * scale, f"{what}: relative error {err / scale:.3g}"


def assert_cavities(gpu, gpu_cav, mu_cav, var_cav, mean, var, tau, nu):
    """Cavities are compared in natural parameters, relative to the terms they are the
    difference of: ``1/v_cav = 1/v - tau`` and ``mu_cav/v_cav = mu/v - nu``.  For a site
    that dominates its prior (1/v ~ tau) that difference cancels, so a last-bit change of
    v moves the cavity itself far more (3e-12 relative seen for Tobit with noise 0.01)."""
    g_prec, g_lin = 1.0 / gpu_cav[1], gpu_cav[0] / gpu_cav[1]
    tol = 1e-12 if gpu["meta/mode"] == "simulator" else 1e-10
    scale_prec = 1.0 / var + np.abs(tau)
    scale_lin = np.abs(mean / var) + np.abs(nu)
    assert np.all(np.abs(g_prec - 1.0 / var_cav) <= tol * scale_prec)
    assert np.all(np.abs(g_lin - mu_cav / var_cav) <= tol * np.max(scale_lin))


def _quadrature(name, alpha=1.0):
    """Whether a likelihood's tilted moments come from the adaptive panel quadrature."""
    return name in cc.QUAD_LIKS or (alpha != 1.0 and name != "gaussian")


def assert_kernel_twin(gpu, gpu_value, cpu_value, quadrature, name=""):
    """A per-site kernel against its CPU twin.

    Under the simulator (the CPU's own math library) element-wise to 1e-12, except for
    the likelihoods that call ``lgamma`` (:data:`cuda_checks.LGAMMA_LIKS`): CPython's
    ``math.lgamma``, which the simulator runs, is CPython's own code, not the C library's
    that Numba compiles (1e-13 relative apart near 8000, seen), so those are compared
    norm-wise as on a GPU.  On a GPU, CUDA's libdevice rounds exp, log and erfc
    differently in the last bit, which far tails and cancellations amplify element-wise
    (seen on an H100: d2 of -2.4e-12 against -3.7e-12 where that output reaches 8e-3),
    and in the adaptive panel quadrature a last-bit change can move a panel boundary; so
    each output is compared norm-wise (error relative to its largest magnitude): 1e-11
    for closed forms (largest seen 1.8e-12), 1e-8 for quadrature, the quadrature's own
    accuracy, which its tests against independent quadrature allow (largest seen on an
    H100: 1.1e-9, a log-normal event site 30 cavity sds from the event time, where the
    exact conjugate answer has the CPU's nu 1.7e-9 and the GPU's 9.1e-9 off: two
    approximations, each within its accuracy).  NaN and infinity must appear in the
    same places."""
    if gpu["meta/mode"] == "simulator" and name not in cc.LGAMMA_LIKS:
        return assert_twin(gpu_value, cpu_value)
    g = np.atleast_2d(np.asarray(gpu_value, float))
    c = np.atleast_2d(np.asarray(cpu_value, float))
    assert g.shape == c.shape
    np.testing.assert_array_equal(np.isnan(g), np.isnan(c))
    np.testing.assert_array_equal(np.isinf(g), np.isinf(c))
    tol = 1e-8 if quadrature else 1e-11
    for gr, cr in zip(g, c):
        fin = np.isfinite(cr)
        if fin.any():
            err, top = np.max(np.abs(gr[fin] - cr[fin])), np.max(np.abs(cr[fin]))
            assert err <= tol * top, f"norm-wise error {err / top:.3g}"


def assert_twin(gpu_value, cpu_value, rtol=RTOL, scale=None):
    """Equal to rtol relative (to |cpu| or to ``scale``, the size of the summed terms),
    NaN where the CPU twin has NaN."""
    g, c = np.asarray(gpu_value, float), np.asarray(cpu_value, float)
    assert g.shape == c.shape
    np.testing.assert_array_equal(np.isnan(g), np.isnan(c))
    ok = ~np.isnan(c)
    np.testing.assert_array_equal(np.isinf(g[ok]), np.isinf(c[ok]))
    fin = ok & np.isfinite(c)
    np.testing.assert_array_equal(g[ok & ~fin], c[ok & ~fin])
    ref = np.abs(c[fin]) if scale is None else np.broadcast_to(scale, c.shape)[fin]
    err = np.abs(g[fin] - c[fin])
    worst = np.max(err / np.maximum(ref, 1e-300), initial=0.0)
    assert np.all(err <= rtol * ref), f"max relative error {worst:.3g}"


LIKS = {name: (lik, y, extra) for name, lik, y, extra in
        cc.likelihoods(cc.N_SITES, np.random.default_rng(1))}


# ---------------------------------------------------------------------------------------
# likelihoods: tilted moments, parallel sites, Power-EP sites
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("alpha", [1.0, 0.5])
@pytest.mark.parametrize("name", list(LIKS))
def test_tilted_moments_equal_cpu(gpu, name, alpha):
    """Extreme cavities: |mu| up to 30, var from 1e-4 to 1e4; alpha = 0.5 is the panel
    quadrature for every likelihood but the Gaussian."""
    lik, y, extra = LIKS[name]
    key = f"tilted/{name}/{alpha}"
    mu, var = gpu[f"{key}/mu"], gpu[f"{key}/var"]
    n = mu.size
    out = np.empty((3, n))
    tilted_batch(lik.scalar_tilted, y[:n].copy(), np.ascontiguousarray(extra[:n]), mu, var, alpha,
                 lik.params, out[0], out[1], out[2])
    assert np.all(np.isfinite(out))
    assert_kernel_twin(gpu, gpu[f"{key}/out"], out, _quadrature(name, alpha), name)


@pytest.mark.parametrize("clip", [True, False])
@pytest.mark.parametrize("name", list(LIKS))
def test_parallel_sites_equal_cpu(gpu, name, clip):
    lik, y, extra = LIKS[name]
    key = f"sites/{name}/{clip}"
    mean, var, tau, nu = (gpu[f"{key}/{k}"] for k in ("mean", "var", "tau", "nu"))
    n = mean.size
    outs = [np.empty(n) for _ in range(5)]
    skipped = kern.SERIAL.parallel_sites(
        lik.scalar_tilted, SiteData(y[:n].copy(), np.ascontiguousarray(extra[:n]), lik.params),
        SiteBuffers(mean, var, tau, nu, *outs), 0.7, clip)
    assert skipped > 0                         # the improper cavities were exercised
    assert int(gpu[f"{key}/skipped"][0]) == skipped
    assert_kernel_twin(gpu, gpu[f"{key}/out"], np.array(outs), _quadrature(name), name)


@pytest.mark.parametrize("alpha", [1.0, 0.5])
@pytest.mark.parametrize("name", list(LIKS))
def test_power_sites_equal_cpu(gpu, name, alpha):
    lik, y, extra = LIKS[name]
    key = f"power/{name}/{alpha}"
    mean, var, resid, tau, nu = (gpu[f"{key}/{k}"] for k in ("mean", "var", "resid", "tau", "nu"))
    n = mean.size
    outs = [np.empty(n) for _ in range(5)]
    skipped = kern.SERIAL.power_sites(
        lik.scalar_tilted, SiteData(y[:n].copy(), np.ascontiguousarray(extra[:n]), lik.params),
        SiteBuffers(mean, var, tau, nu, *outs), resid, alpha, 0.6, lik.log_concave)
    assert int(gpu[f"{key}/skipped"][0]) == skipped
    assert_kernel_twin(gpu, gpu[f"{key}/out"], np.array(outs), _quadrature(name, alpha),
                       name)


def test_device_functions_call_no_cpu_code():
    """Every retargeted function reaches only device functions (under the simulator a CPU
    dispatcher would run silently; on a GPU it would not compile)."""
    from numba.core.registry import CPUDispatcher

    from fastep.backend.cuda import kernels as ck
    for name, (lik, _, _) in LIKS.items():
        ck._per_likelihood(lik.scalar_tilted)
    assert len(ck._DEVICE) >= 10
    for dev in ck._DEVICE.values():
        py = getattr(dev, "py_func", None) or dev.fn
        names = [py.__globals__.get(n) for n in py.__code__.co_names]
        cells = [c.cell_contents for c in (py.__closure__ or ())]
        assert not any(isinstance(v, CPUDispatcher) for v in names + cells), py.__name__


# ---------------------------------------------------------------------------------------
# covariance work, sparse marginals, Gram matrices
# ---------------------------------------------------------------------------------------
def test_dense_covariance_kernels_equal_cpu(gpu):
    K, s, A = gpu["dense/K"], gpu["dense/s"], gpu["dense/A"]
    n = K.shape[0]
    b, sc, rs = np.empty((n, n)), np.empty((n, n)), np.empty(n)
    kern.SERIAL.build_b(K, s, b)
    kern.SERIAL.scale_columns(K, s, sc)
    kern.SERIAL.row_sumsq(A, rs)
    assert_twin(gpu["dense/build_b"], b)
    assert_twin(gpu["dense/scale_columns"], sc)
    assert_twin(gpu["dense/row_sumsq"], rs)
    kern.SERIAL.row_sumsq(np.ascontiguousarray(A.T), rs)
    assert_twin(gpu["dense/col_sumsq"], rs)


def test_sparse_marginals_equal_cpu(gpu):
    """Against the CPU backend's ``projection_marginals`` (G^T beta by BLAS): the mean is a
    dot product summed in another order, so its error is relative to sum_k |g_k beta_k|."""
    G, beta = gpu["marg/G"], gpu["marg/beta"]
    mean, var = kern.CPU.projection_marginals(G, beta)
    assert_twin(gpu["marg/mean"], mean, scale=np.abs(G).T @ np.abs(beta))
    assert_twin(gpu["marg/var"], var)


@pytest.mark.parametrize("kind", cc.KINDS)
def test_stationary_gram_and_contractions_equal_cpu(gpu, kind):
    x1, x2, inv_ls, g = (gpu[f"gram/{k}"] for k in ("x1", "x2", "inv_ls", "g"))
    cross, sym = np.empty((x1.shape[0], x2.shape[0])), np.empty((x1.shape[0],) * 2)
    host_gram.stationary_gram(x1, x2, inv_ls, 1.7, kind, False, cross)
    host_gram.stationary_gram(x1, x1, inv_ls, 1.7, kind, True, sym)
    assert_twin(gpu[f"gram/{kind}/cross"], cross)
    assert_twin(gpu[f"gram/{kind}/sym"], sym)
    # the GPU kernel owns columns: it equals the CPU kernel with the roles swapped
    rows = np.empty((x2.shape[0], 1 + x2.shape[1]))
    host_gram.stationary_contract(x2, x1, inv_ls, 1.7, kind, np.ascontiguousarray(g.T), rows)
    assert_twin(gpu[f"gram/{kind}/contract"], rows)
    K = gpu[f"gram/{kind}/cross"]                  # the contraction given K, as the GPU had it
    host_gram.stationary_gram_contract(x2, x1, inv_ls, kind, np.ascontiguousarray(g.T),
                                       np.ascontiguousarray(K.T), rows)
    assert_twin(gpu[f"gram/{kind}/from_gram"], rows)
    dx = np.empty(x1.shape)
    host_gram.stationary_input_contract(x1, x2, inv_ls, 1.7, kind, g, dx)
    assert_twin(gpu[f"gram/{kind}/input"], dx)


@pytest.mark.parametrize("name", list(cc.composite_kernels()))
def test_every_kernel_on_the_cuda_backend_equals_cpu(gpu, name):
    """Each kernel's own backend methods (Gram, diagonal, the three contractions, the
    contraction given K) for sums, products, linear, constant, white, ARD and fixed
    parameters.  The contraction totals
    are sums over many terms of both signs, summed per column on the GPU and per row on
    the CPU: error relative to the contraction of |G| (the same sum, terms positive)."""
    k = cc.composite_kernels()[name]
    X, Y, G, Gc = (gpu[f"api/{v}"] for v in ("X", "Y", "G", "Gc"))
    assert_twin(gpu[f"api/{name}/K"], k(X))
    assert_twin(gpu[f"api/{name}/Kxy"], k(X, Y))
    assert_twin(gpu[f"api/{name}/diag"], k.diag(X))
    assert_twin(gpu[f"api/{name}/dK"], k.gradient_contract(X, G),
                scale=np.abs(k.gradient_contract(X, np.abs(G))) + 1e-300)
    for key in ("dKxy", "dKxy_gram", "dKxy_gram_f"):         # the last two given K itself
        assert_twin(gpu[f"api/{name}/{key}"], k.gradient_contract(X, Gc, Y),
                    scale=np.abs(k.gradient_contract(X, np.abs(Gc), Y)) + 1e-300)
    dz = k.input_gradient_contract(Y, Gc.T, X)
    assert_twin(gpu[f"api/{name}/dZ"], dz, scale=np.max(np.abs(dz)) + 1e-300)
    assert_twin(gpu[f"api/{name}/ddiag"], k.diag_gradient_contract(X, G[0]),
                scale=np.abs(k.diag_gradient_contract(X, np.abs(G[0]))) + 1e-300)


# ---------------------------------------------------------------------------------------
# drivers: the whole GPU code path (CuPy, or its NumPy stand-in under the simulator)
# ---------------------------------------------------------------------------------------
DENSE = {name: (K, y, lik, kw) for name, K, y, lik, kw in cc.driver_problems()[1]}


@pytest.mark.parametrize("name", list(DENSE))
def test_dense_ep_on_cuda_equals_cpu(gpu, name):
    """fastep.ep with device='cuda' (the one driver over the CUDA backend) against
    device='cpu': the same sweeps, sites, evidence, cavities, predictions and evidence
    gradient, including the split form for negative site precisions (annotators)."""
    import warnings
    from fastep.kernels import RBF
    K, y, lik, kw = DENSE[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = fastep.ep(K, y, lik, **kw)
    key = f"ep/{name}"
    if name == "annotators":
        assert np.any(r.site_tau < 0)
    assert int(gpu[f"{key}/n_iter"][0]) == r.n_iter
    X = cc.driver_problems()[0]
    kernel = RBF(2.0, 0.9)
    kc = kernel(X, X[:5] + 0.1)
    pm, pv = r.predict_latent(kc, np.full(5, 2.0))
    d_kernel, d_lik = ep_gradient(r, kernel, X, y, lik)
    # the likelihood-parameter gradient of an lgamma likelihood sums quadrature terms of
    # lgamma, which the simulator takes from CPython (not libm): 1.8e-12 of max |grad| seen
    # for the Student-t in a fresh environment
    for field, value in (("mean", r.mean), ("var", r.var), ("tau", r.site_tau),
                         ("nu", r.site_nu), ("logz", [r.log_marginal_likelihood]),
                         ("grad", np.concatenate([d_kernel, d_lik]))):
        loose = field == "grad" and name in cc.LGAMMA_LIKS
        assert_end_to_end(gpu, gpu[f"{key}/{field}"], value, field,
                          sim_tol=1e-11 if loose else 1e-12)
    # predictions k*^T b and k** - k*^T R k*: relative to the sum of the magnitudes of
    # their terms (with negative or very precise sites, R has entries far above the
    # result, 8e-10 of max |pred| seen apart for Student-t under the simulator)
    tol = 1e-12 if gpu["meta/mode"] == "simulator" else 1e-10
    abs_r = np.abs(r._posterior.dense_r())
    assert_twin(gpu[f"{key}/pred"][0], pm, tol, np.abs(kc).T @ np.abs(r.b))
    assert_twin(gpu[f"{key}/pred"][1], pv, tol,
                2.0 + np.einsum("ij,ij->j", np.abs(kc), abs_r @ np.abs(kc)))
    assert_cavities(gpu, gpu[f"{key}/cav"], r.cavity_mean, r.cavity_var, r.mean, r.var,
                    r.site_tau, r.site_nu)


@pytest.mark.parametrize("i", range(len(cc.sparse_problems()[2])))
def test_sparse_ep_on_cuda_equals_cpu(gpu, i):
    """sparse_ep and its gradient with device='cuda' against device='cpu'."""
    import warnings
    X, Z, problems = cc.sparse_problems()
    name, kernel, y, lik, kw = problems[i]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = sparse_ep(kernel, Z, X, y, lik, chunk_size=16, **kw)
    g = sparse_ep_gradient(r, kernel, X, y, lik, chunk_size=16)
    key = f"sparse/{name}"
    assert int(gpu[f"{key}/n_iter"][0]) == r.n_iter
    n_exact = g[0].size + g[1].size
    for field, value in (("mean", r.mean), ("var", r.var), ("tau", r.site_tau),
                         ("nu", r.site_nu), ("logz", [r.log_marginal_likelihood]),
                         ("cav", [r.cavity_mean, r.cavity_var]),
                         ("pred", r.predict_latent(kernel, X[:5] + 0.05))):
        assert_end_to_end(gpu, gpu[f"{key}/{field}"], value, field)
    # kernel and inducing-input gradients to 1e-12; a likelihood-parameter gradient at
    # alpha < 1 is a central difference (step 1e-5) of the tilted log Z, whose own noise is
    # ~1e-11: the CPU with chunk_size=7 instead of 16 differs from itself by 3.4e-11 there
    grad = gpu[f"{key}/grad"]
    assert_end_to_end(gpu, grad[:n_exact], np.concatenate([g[0], g[1].ravel()]))
    np.testing.assert_allclose(grad[n_exact:], g[2], rtol=1e-9)


@pytest.mark.parametrize("name", ["dense", "sparse", "mlii", "censored", "annotators",
                                  "annotators-sparse", "one-vs-rest", "nested"])
def test_estimators_on_cuda_equal_cpu(gpu, name):
    """Estimator fits with device='cuda' against device='cpu'; the GPU model, saved and
    loaded on the CPU, predicts the same.

    With fixed hyperparameters (dense and sparse; the annotators' EM included; three
    one-vs-rest problems, whose posteriors after the first are rebuilt from their sites)
    the whole fit agrees to 1e-12.  With
    ML-II (kernel and inducing inputs; censored regression with the noise; nested EP's
    multiclass posterior, whose C + 1 factorisations run on the GPU) what the
    optimiser sees, the evidence and its gradient at a given theta, agrees to 1e-12; the
    optimum itself is defined only to the optimiser's tolerance (L-BFGS-B stops on a
    relative change of about 2e-9), so 1e-12 differences in the gradient move it by
    ~1e-5: it is compared at that tolerance."""
    import warnings
    X, cases = cc.estimators()
    _, est, targets = next(c for c in cases if c[0] == name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(X, targets)
    key = f"est/{name}"
    latent = np.array(est.predict_latent(X[:6] + 0.1, return_std=True))
    assert str(gpu[f"{key}/loaded_device"][0]) == "cpu"
    if est.optimizer is None:
        assert int(gpu[f"{key}/n_iter"][0]) == est.n_iter_
        assert_end_to_end(gpu, gpu[f"{key}/lml"], [est.log_marginal_likelihood_value_])
        assert_end_to_end(gpu, gpu[f"{key}/latent"], latent)
        assert_end_to_end(gpu, gpu[f"{key}/loaded"], latent)
        return
    value, grad = est.log_marginal_likelihood(cc.probe_theta(est), eval_gradient=True)
    assert_end_to_end(gpu, gpu[f"{key}/probe"], np.concatenate([[value], grad]))
    np.testing.assert_allclose(gpu[f"{key}/lml"], [est.log_marginal_likelihood_value_],
                               rtol=1e-7)
    np.testing.assert_allclose(gpu[f"{key}/latent"], latent, rtol=1e-3, atol=1e-4)
    assert_end_to_end(gpu, gpu[f"{key}/loaded"], gpu[f"{key}/latent"])
    if name == "censored":
        assert est.noise_variance_ > 1e-3      # noisy targets: a well-posed test problem


@pytest.mark.parametrize("J", [2, 10])
def test_robustmax_gauss_hermite_equals_cpu(gpu, J):
    """S(x, j) for every class and S(x_i, y_i) with its gradient, extreme moments included."""
    from fastep._numerics import gauss_hermite
    from fastep.likelihoods import robustmax as rm
    key = f"robustmax/{J}"
    mean, var, labels = gpu[f"{key}/mean"], gpu[f"{key}/var"], gpu[f"{key}/labels"]
    nodes, weights = gauss_hermite(20)
    out = np.empty(mean.shape)
    rm.prob_largest_all(mean, var, nodes, weights, out)
    assert_kernel_twin(gpu, gpu[f"{key}/all"].ravel(), out.ravel(), False)
    s, dm, dv = np.empty(mean.shape[0]), np.empty(mean.shape), np.empty(mean.shape)
    rm.prob_largest_grad(mean, var, labels.astype(np.int64), nodes, weights, s, dm, dv)
    assert_kernel_twin(gpu, gpu[f"{key}/s"], s, False)
    if gpu["meta/mode"] == "simulator":
        for got, want in ((gpu[f"{key}/dm"], dm), (gpu[f"{key}/dv"], dv)):
            assert_twin(got, want)
    else:
        # the gradient is a sum over nodes and classes of terms of both signs that cancel
        # (to 0 exactly at a tie of means, where S = 1/2 for every variance): relative to
        # the sum of the magnitudes of its terms (seen on an H200: dS/dv 3.4e-19 on the
        # CPU and -7.6e-20 on the GPU, where the terms reach 1e-1 and the largest
        # gradient entry is 1.2e-9)
        scale_m, scale_v = _robustmax_term_sizes(mean, var, labels, nodes, weights)
        assert_twin(gpu[f"{key}/dm"], dm, 1e-11, scale_m)
        assert_twin(gpu[f"{key}/dv"], dv, 1e-11, scale_v)
    assert np.any(out > 0.999) and np.any((out > 1e-3) & (out < 0.999))   # not all 0/1


def _robustmax_term_sizes(mean, var, labels, nodes, weights):
    """Sums of |term| of dS/dm and dS/dv (``robustmax.prob_largest_grad_one``'s sums,
    every node kept), per point and class, in NumPy."""
    from scipy.special import log_ndtr
    n, J = mean.shape
    sd = np.sqrt(var)
    size_m, size_v = np.zeros((n, J)), np.zeros((n, J))
    for i in range(n):
        j = int(labels[i])
        t = mean[i, j] + sd[i, j] * nodes                          # (K,)
        others = [l for l in range(J) if l != j]
        z = (t[:, None] - mean[i, others]) / sd[i, others]         # (K, J-1)
        log_p = np.log(weights) + log_ndtr(z).sum(1)
        c = np.exp(log_p[:, None] - 0.5 * z * z - log_ndtr(z)) / np.sqrt(2 * np.pi) \
            / sd[i, others]
        size_m[i, others] = np.abs(c).sum(0)
        size_m[i, j] = np.abs(c).sum()
        size_v[i, others] = np.abs(c * z).sum(0) / (2 * sd[i, others])
        size_v[i, j] = np.abs(c * nodes[:, None]).sum() / (2 * sd[i, j])
    return size_m, size_v


def test_gwi_classifier_device_cuda_equals_cpu(gpu):
    from fastep import GWIClassifier
    X, y = cc.gwi_problem()
    clf = GWIClassifier(n_inducing=6, max_iter=4, random_state=0).fit(X, y)
    assert_end_to_end(gpu, gpu["gwi/proba"], clf.predict_proba(X[:5] + 0.1))


# ---------------------------------------------------------------------------------------
# errors: what is missing, and bad arguments
# ---------------------------------------------------------------------------------------
def test_sequential_on_cuda_names_the_knob(gpu):
    msg = str(gpu["msg/sequential"][0])
    assert msg.startswith("ValueError") and "method='parallel'" in msg and "device='cpu'" in msg


def test_error_names_driver_and_cupy_without_gpu():
    import fastep.cuda as fc
    from fastep.cuda import _cupy_reason
    from fastep.likelihoods import Probit
    if _gpu_usable_here():
        pytest.skip("a CUDA GPU is usable on this machine")
    for call in (lambda: fastep.ep(np.eye(3), np.ones(3), Probit(), device="cuda"),
                 lambda: fastep.EPGaussianProcessClassifier(device="cuda").fit(
                     np.arange(6.0)[:, None], [0, 1, 0, 1, 0, 1])):
        with pytest.raises(fc.CUDAUnavailableError) as info:
            call()
        msg = str(info.value)
        assert "driver" in msg and "GPU" in msg
        if _cupy_reason() is not None:
            assert "CuPy" in msg and "cupy-cuda12x" in msg
        assert "device='cpu'" in msg
    # the robust-max products need no CuPy: the error names only the driver
    with pytest.raises(fc.CUDAUnavailableError, match="driver") as info:
        fastep.GWIClassifier(device="cuda", max_iter=2).fit(np.arange(6.0)[:, None],
                                                            [0, 1, 2, 0, 1, 2])
    assert "CuPy" not in str(info.value)
    assert not fc.is_available()


def test_bad_device_and_method_are_value_errors():
    from fastep import CensoredGPRegressor, EPGaussianProcessClassifier
    from fastep.inference.sparse_ep import sparse_ep
    from fastep.kernels import RBF
    from fastep.likelihoods import Probit
    X, y = np.arange(6.0)[:, None], np.array([0, 1, 0, 1, 0, 1])
    with pytest.raises(ValueError, match="'device' parameter of fastep.ep must be one of"):
        fastep.ep(np.eye(3), np.ones(3), Probit(), device="gpu")
    with pytest.raises(ValueError, match="'device' parameter of GWIClassifier"):
        fastep.GWIClassifier(device="gpu").fit(X, y)
    with pytest.raises(TypeError):
        fastep.likelihoods.RobustMax(3, device="cuda")         # likelihoods know no device
    with pytest.raises(ValueError, match="'device' parameter of sparse_ep must be one of"):
        sparse_ep(RBF(), X[:2], X, np.ones(6), Probit(), device="tpu")
    with pytest.raises(ValueError, match="'device' parameter of EPGaussianProcessClassifier"):
        EPGaussianProcessClassifier(device="gpu").fit(X, y)
    with pytest.raises(ValueError, match="inference='ep'"):
        CensoredGPRegressor(device="cuda", inference="laplace").fit(X, np.arange(6.0))
    with pytest.raises(ValueError, match="'device' parameter of sparse_ep must be one of"):
        fastep.sparse_ep(RBF(), X[:2], X, np.ones(6), Probit(), device="gpu")


def test_import_fastep_does_not_import_cuda():
    code = ("import sys, fastep; fastep.EPGaussianProcessClassifier; "
            "bad = [m for m in sys.modules if m.startswith('fastep.cuda') or m == 'numba.cuda'"
            " or m.startswith('cupy') or m.startswith('fastep.backend.cuda')]; assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True, env=dict(
        os.environ, PYTHONPATH=str(ROOT)))


def _nvvm_home():
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if home and (Path(home) / "nvvm").is_dir():
        return home
    try:
        import nvidia.cuda_nvcc as nv           # pip install nvidia-cuda-nvcc-cu12
        return str(Path(list(nv.__path__)[0]))
    except Exception:
        return None


def _numba_cuda_package():
    """The ``numba-cuda`` package (the CUDA target fastep's ``cuda`` extra installs): the
    CUDA target built into Numba 0.68 fails to type the likelihood kernels for PTX
    ("Signature mismatch"), although it runs them under the simulator."""
    try:
        import numba_cuda  # noqa: F401
        return True
    except ImportError:
        return False


@pytest.mark.skipif(_nvvm_home() is None or not _numba_cuda_package(),
                    reason="numba-cuda and NVVM needed (pip install numba-cuda "
                    "nvidia-cuda-nvcc-cu12 nvidia-cuda-nvrtc-cu12): cannot compile the kernels "
                    "to PTX")
def test_every_kernel_compiles_to_ptx():
    """The simulator runs any Python; this compiles every kernel, every likelihood's
    (panel quadrature included), for a real GPU (sm_90) without one."""
    env = dict(os.environ, CUDA_HOME=_nvvm_home(), PYTHONPATH=os.pathsep.join(
        [str(ROOT), str(HELPERS), os.environ.get("PYTHONPATH", "")]))
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    proc = subprocess.run([sys.executable, str(HELPERS / "cuda_checks.py"), "--ptx"], env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "PTX OK" in proc.stdout
