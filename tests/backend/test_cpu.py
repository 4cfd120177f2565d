"""The CPU backend's dense operations (fastep.backend.cpu) against NumPy's and SciPy's
formulas, with and without the reused work buffers, on sizes either side of the blocked
paths; and its errors."""
import numpy as np
import pytest
import scipy.linalg as sl

import fastep
from fastep.backend import resolve

CPU = resolve("cpu")


def _spd(n, seed):
    A = np.random.default_rng(seed).normal(size=(n, n))
    return A @ A.T / n + np.eye(n)


@pytest.mark.parametrize("n", [5, 300, 700])
def test_cholesky_solves_and_inverses_equal_the_dense_formulas(n):
    a = _spd(n, n)
    L = CPU.cholesky(np.array(a, order="F"), "a")
    np.testing.assert_allclose(np.tril(L), np.linalg.cholesky(a), rtol=1e-10, atol=1e-12)
    Lt = np.tril(L)
    B = np.random.default_rng(1).normal(size=(n, 3))
    np.testing.assert_allclose(CPU.solve_lower(L, B.copy()),
                               sl.solve_triangular(Lt, B, lower=True), rtol=1e-9, atol=1e-11)
    np.testing.assert_allclose(CPU.solve_lower(L, B.copy(), trans=True),
                               sl.solve_triangular(Lt, B, lower=True, trans="T"),
                               rtol=1e-9, atol=1e-11)
    np.testing.assert_allclose(CPU.cho_solve(L, B.copy()), np.linalg.solve(a, B),
                               rtol=1e-9, atol=1e-11)
    for out in (None, CPU.dense_work(n)[0]):
        li = CPU.tri_inverse(L, out=out)
        np.testing.assert_allclose(li, np.linalg.inv(Lt), rtol=1e-9, atol=1e-11)
        np.testing.assert_array_equal(np.triu(li, 1), 0.0)
        np.testing.assert_allclose(CPU.inverse_from_tri(li.copy(order="K")), np.linalg.inv(a),
                                   rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("n", [1, 5, 128, 129, 300, 701])
@pytest.mark.parametrize("order", ["C", "F"])
def test_cholesky_inverse_equals_the_inverse_of_numpys_factor(n, order):
    """The fused factor-and-invert (a recursion of dtrmm/dsyrk above 128 rows) against
    NumPy's Cholesky and inverse, on sizes at and either side of the recursion's leaf, in
    both memory orders; the buffer given is overwritten and returned."""
    a = _spd(n, n + 1)
    buf = np.array(a, order=order)
    li, l_diag = CPU.cholesky_inverse(buf, "a")
    L = np.linalg.cholesky(a)
    np.testing.assert_allclose(li, np.linalg.inv(L), rtol=1e-9, atol=1e-11)
    np.testing.assert_array_equal(np.triu(li, 1), 0.0)
    np.testing.assert_allclose(l_diag, np.diagonal(L), rtol=1e-12)
    assert np.shares_memory(li, buf)
    # the routine itself leaves the strict upper triangle (the backend zeroes it)
    from fastep._linalg import cholesky_inverse_inplace
    f = np.asfortranarray(a + np.triu(np.full((n, n), 7.0), 1))
    cholesky_inverse_inplace(f)
    np.testing.assert_array_equal(np.triu(f, 1), np.triu(a, 1) + np.triu(np.full((n, n), 7.0), 1))
    assert cholesky_inverse_inplace(np.zeros((0, 0), order="F")).shape == (0,)


@pytest.mark.parametrize("n", [1, 128, 129, 301])
def test_tri_gram_is_lt_l_in_the_lower_triangle_and_leaves_the_upper(n):
    """fastep._linalg.tri_gram_inplace (dlauum's job, recursive above 128 rows) against
    NumPy's L^T L; the strict upper triangle is not touched."""
    from fastep._linalg import tri_gram_inplace
    rng = np.random.default_rng(n)
    a = np.asfortranarray(rng.normal(size=(n, n)))
    L = np.tril(a)
    upper = np.triu(a, 1).copy()
    out = tri_gram_inplace(a)
    assert out is a
    np.testing.assert_allclose(np.tril(a), np.tril(L.T @ L), rtol=1e-10, atol=1e-10)
    np.testing.assert_array_equal(np.triu(a, 1), upper)
    with pytest.raises(ValueError, match="F-contiguous"):
        tri_gram_inplace(np.ascontiguousarray(np.eye(3)[:, :2]))


def test_cholesky_inverse_not_recursive_is_lapacks_pair():
    """``recursive=False`` (what the dense refresh asks for where B may be ill-conditioned)
    gives exactly dpotrf + dtrtri."""
    a = _spd(300, 9)
    L = sl.cholesky(a, lower=True)
    li, l_diag = CPU.cholesky_inverse(np.array(a, order="F"), "a", recursive=False)
    np.testing.assert_array_equal(li, np.tril(sl.lapack.dtrtri(L, lower=1)[0]))
    np.testing.assert_array_equal(l_diag, np.diagonal(L))


def test_tri_and_sym_matvecs_equal_the_dense_products():
    rng = np.random.default_rng(4)
    n = 50
    L = np.asfortranarray(np.tril(rng.normal(size=(n, n))))
    K = _spd(n, 5)
    z = rng.normal(size=n)
    np.testing.assert_allclose(CPU.tri_matvec(L, z), L @ z, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(CPU.tri_matvec(L, z, trans=True), L.T @ z, rtol=1e-12,
                               atol=1e-12)
    for k in (K, np.asfortranarray(K)):
        np.testing.assert_allclose(CPU.sym_matvec(k, z), K @ z, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("n", [6, 400])
def test_gradient_weights_are_half_of_b_b_minus_r(n):
    """G = (b b^T - diag(s) B^-1 diag(s)) / 2 from L^-1, B = L L^T."""
    rng = np.random.default_rng(n)
    a, s, b = _spd(n, 7), rng.uniform(0.1, 2.0, n), rng.normal(size=n)
    li = CPU.tri_inverse(CPU.cholesky(np.array(a, order="F"), "B"))
    want = 0.5 * (np.outer(b, b) - s[:, None] * np.linalg.inv(a) * s[None, :])
    np.testing.assert_allclose(CPU.gradient_weights(li, s, b), want, rtol=1e-9, atol=1e-11)


def test_rank_updates_and_products_equal_the_dense_formulas():
    rng = np.random.default_rng(2)
    m, c = 9, 40
    L = np.asfortranarray(np.tril(rng.normal(size=(m, m))) + 4 * np.eye(m))
    G = np.asfortranarray(rng.normal(size=(m, c)))
    np.testing.assert_allclose(CPU.trmm_lower(L, G.copy(order="F")), L @ G, rtol=1e-12)
    np.testing.assert_allclose(CPU.trmm_lower(L, G.copy(order="F"), trans=True), L.T @ G,
                               rtol=1e-12)
    tau, nu = rng.uniform(0, 1, c), rng.normal(size=c)
    P, b = np.zeros((m, m), order="F"), np.zeros(m)
    CPU.accumulate(P, b, G.copy(order="F"), tau, nu)
    np.testing.assert_allclose(np.tril(P), np.tril(G @ np.diag(tau) @ G.T), rtol=1e-12)
    np.testing.assert_allclose(b, G @ nu, rtol=1e-12)
    K, s = _spd(12, 3), rng.uniform(0.5, 2, 12)
    np.testing.assert_allclose(CPU.build_b(K, s), np.eye(12) + np.diag(s) @ K @ np.diag(s),
                               rtol=1e-12)
    mean, var = CPU.projection_marginals(G, nu[:m])
    np.testing.assert_allclose(mean, G.T @ nu[:m], rtol=1e-12)
    np.testing.assert_allclose(var, np.sum(G * G, axis=0), rtol=1e-12)


@pytest.mark.parametrize("signs", ["mixed", "negative", "zeros", "c_ordered", "read_only"])
def test_a_rank_update_with_weights_of_both_signs_equals_the_dense_formula(signs):
    """``accumulate`` with some weights negative (a chunk-sequential block's change of
    sites, the gradient's d psi / d v) splits G's columns by sign in place
    (:func:`fastep.backend.cpu_loops.split_by_sign`) for two dsyrk."""
    rng = np.random.default_rng(3)
    m, c = 7, 53
    G = rng.normal(size=(m, c))
    tau = {"mixed": rng.normal(size=c), "negative": -rng.uniform(0.1, 1, c),
           "zeros": np.where(rng.random(c) < 0.5, 0.0, rng.normal(size=c)),
           "c_ordered": rng.normal(size=c), "read_only": rng.normal(size=c)}[signs]
    tau.flags.writeable = signs != "read_only"
    nu = rng.normal(size=c)
    P, b = np.tril(rng.normal(size=(m, m))).copy(order="F"), rng.normal(size=m)
    want_P, want_b = np.tril(P + G @ np.diag(tau) @ G.T), b + G @ nu
    CPU.accumulate(P, b, G.copy(order="C" if signs == "c_ordered" else "F"), tau, nu)
    np.testing.assert_allclose(np.tril(P), want_P, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(b, want_b, rtol=1e-12, atol=1e-12)


def test_a_matrix_that_is_not_positive_definite_is_named():
    with pytest.raises(fastep.NotPositiveDefiniteError, match="the test matrix"):
        CPU.cholesky(np.array([[1.0, 2.0], [2.0, 1.0]], order="F"), "the test matrix")
    # the fused factor-and-invert names it, and the pivot, also deep in its recursion
    a = _spd(300, 2)
    a[250, 250] = -1.0
    with pytest.raises(fastep.NotPositiveDefiniteError, match=r"the test matrix .*pivot 251"):
        CPU.cholesky_inverse(np.array(a, order="F"), "the test matrix")


@pytest.mark.parametrize("loop", ["parallel_sites", "power_sites"])
def test_serial_and_parallel_site_loops_write_every_site_alike(loop):
    """The site loops compiled serial and parallel (above ``PARALLEL_MIN_N`` sites) write the
    same values to every site of the records, and the cavities and log Z_i they write are
    the probit's closed forms (Numba 0.68's parallel loops silently dropped the writes to
    arrays unpacked from a tuple: the parallel loop left every output untouched)."""
    from scipy.special import log_ndtr

    from fastep._sites import SiteBuffers
    from fastep.backend.cpu_loops import PARALLEL, PARALLEL_MIN_N, SERIAL
    from fastep.likelihoods import Probit
    lik, rng, n = Probit(), np.random.default_rng(3), PARALLEL_MIN_N + 501
    y = np.sign(rng.normal(size=n))
    mean, var = rng.normal(size=n), rng.uniform(0.5, 2.0, n)
    tau, nu = rng.uniform(0.0, 0.3, n), 0.1 * rng.normal(size=n)
    tau[:7] = 1.0 / var[:7] + 1.0                      # improper cavities: skipped
    resid = rng.uniform(0.0, 0.1, n)
    data = CPU.site_inputs(lik, y, np.zeros((n, 0)))
    written = []
    for loops in (SERIAL, PARALLEL):
        bufs = SiteBuffers(mean, var, tau, nu, *(np.full(n, -7.0) for _ in range(5)))
        if loop == "parallel_sites":
            skipped = loops.parallel_sites(lik.scalar_tilted, data, bufs, 0.7, True)
        else:
            skipped = loops.power_sites(lik.scalar_tilted, data, bufs, resid, 1.0, 0.7, True)
        assert skipped == 7
        written.append(np.array(bufs[4:]))
    np.testing.assert_array_equal(written[0], written[1])
    new_tau, new_nu, log_z, mu_cav, var_cav = written[1]
    ok = slice(7, None)
    assert np.all(np.isnan(log_z[:7])) and np.all(new_tau[:7] == tau[:7])
    v_cav = 1.0 / (1.0 / var - tau)
    m_cav = v_cav * (mean / var - nu)
    np.testing.assert_allclose(var_cav[ok], v_cav[ok], rtol=1e-12)
    np.testing.assert_allclose(mu_cav[ok], m_cav[ok], rtol=1e-10, atol=1e-12)
    if loop == "parallel_sites":
        np.testing.assert_allclose(log_z[ok], log_ndtr(y * m_cav / np.sqrt(1.0 + v_cav))[ok],
                                   rtol=1e-12)
