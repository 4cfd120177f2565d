"""Scalar special functions of fastep._numerics against independent truth (SciPy).

Truth used here:
* log Phi: scipy.special.log_ndtr.
* Mills ratio phi/Phi: exp(norm.logpdf - log_ndtr), and, in the lower tail, the scaled
  complementary error function: Phi(z) = 0.5 erfcx(-z/sqrt2) exp(-z^2/2), hence
  mills(z) = sqrt(2/pi) / erfcx(-z/sqrt2) with no cancellation for z < 0.
* mills_shift = z + mills: d/dz mills(z) = -mills(z) (z + mills(z)), checked against a
  central finite difference of the reference Mills ratio.
* Gauss-Hermite: the even moments of N(0, 1), E[x^2k] = (2k - 1)!!.
"""
import math

import numpy as np
import pytest
import scipy.special as sc
from scipy.stats import norm

from fastep._numerics import gauss_hermite, log_phi, mills, mills_shift

Z = np.linspace(-40.0, 40.0, 4001)


def _vec(fn, z):
    return np.array([fn(float(v)) for v in z])


def _mills_ref(z):
    return np.exp(norm.logpdf(z) - sc.log_ndtr(z))


def _mills_erfcx(z):
    return math.sqrt(2.0 / math.pi) / sc.erfcx(-np.asarray(z) / math.sqrt(2.0))


def test_log_phi_matches_log_ndtr():
    ref = sc.log_ndtr(Z)
    got = _vec(log_phi, Z)
    nz = ref != 0.0
    assert nz.sum() > 3800  # log_ndtr != 0 up to z ~ 37.6
    # log Phi(z) for z > ~37 is subnormal/zero: compare those on an absolute floor
    np.testing.assert_allclose(got[nz], ref[nz], rtol=1e-12, atol=1e-300)
    assert np.all(np.abs(got[~nz]) <= 1e-300)


def test_mills_matches_scipy():
    ref = _mills_ref(Z)
    got = _vec(mills, Z)
    # phi(40) underflows to 0 in both: relative check with a tiny absolute floor
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-300)
    neg = Z < 0
    np.testing.assert_allclose(got[neg], _mills_erfcx(Z[neg]), rtol=1e-12)


def test_mills_shift_against_erfcx_and_derivative_identity():
    got = _vec(mills_shift, Z)
    assert np.all(got > 0)  # z + mills(z) > 0 for every z (log Phi is strictly concave)
    # lower tail: z + sqrt(2/pi)/erfcx(-z/sqrt2) loses ~z^2 eps to cancellation (<1e-12 here)
    neg = Z < -5
    ref_tail = Z[neg] + _mills_erfcx(Z[neg])
    np.testing.assert_allclose(got[neg], ref_tail, rtol=1e-9)
    rest = ~neg
    np.testing.assert_allclose(got[rest], Z[rest] + _mills_ref(Z[rest]), rtol=1e-9)

    # d2 log Phi / dz2 = d mills / dz = -mills * mills_shift, against a central FD of the
    # reference Mills ratio (erfcx form where z < 0, log-form elsewhere); stop at z = 30
    # where mills ~ 1e-197 is still a normal number.
    zz = np.linspace(-40.0, 30.0, 701)

    def ref_m(v):
        return np.where(v < 0, _mills_erfcx(np.minimum(v, 0)), _mills_ref(v))

    h = 1e-5  # relative truncation error ~ (h z)^2 / 6 <= 2e-8 at z = 30
    fd = (ref_m(zz + h) - ref_m(zz - h)) / (2 * h)
    d2 = -_vec(mills, zz) * _vec(mills_shift, zz)
    np.testing.assert_allclose(d2, fd, rtol=1e-6)


@pytest.mark.parametrize("z", [60.0, 1e300, math.inf])
def test_upper_tail_far_out(z):
    # Phi(z) = 1 to double precision: log Phi = 0, mills = phi/Phi underflows to 0
    lp, m, s = log_phi(z), mills(z), mills_shift(z)
    assert -1e-300 <= lp <= 0.0
    assert 0.0 <= m <= 1e-300
    assert s == z


@pytest.mark.parametrize("z", [-60.0, -1e4, -1e8, -1e300])
def test_lower_tail_far_out(z):
    lp, m, s = log_phi(z), mills(z), mills_shift(z)
    # with x = -z: mills = x + 1/x - 2/x^3 + ..., z + mills = (1/x)(1 - 2/x^2 + ...)
    if z == -60.0:
        assert m == pytest.approx(float(_mills_erfcx(z)), rel=1e-12)
        assert s == pytest.approx(z + float(_mills_erfcx(z)), rel=1e-9)
    else:
        x = -z  # asymptotic series, next terms O(x^-5) relative to the leading one
        assert m == pytest.approx(x + 1.0 / x, rel=1e-14)
        assert s == pytest.approx((1.0 / x) * (1.0 - 2.0 / (x * x)), rel=1e-14)
    if abs(z) < 1e150:
        assert lp == pytest.approx(float(sc.log_ndtr(z)), rel=1e-12)
    else:
        # log Phi(-1e300) ~ -5e599 is not representable: -inf, never NaN
        assert lp == -math.inf


def test_minus_infinity():
    assert log_phi(-math.inf) == -math.inf
    assert mills(-math.inf) == math.inf
    assert mills_shift(-math.inf) == 0.0


def test_nan_in_nan_out():
    for fn in (log_phi, mills, mills_shift):
        assert math.isnan(fn(math.nan))


@pytest.mark.parametrize("n", [1, 2, 5, 20, 40])
def test_gauss_hermite_moments(n):
    x, w = gauss_hermite(n)
    assert x.shape == w.shape == (n,)
    assert np.all(w > 0)
    for k in range(0, n + 1):
        if 2 * k > 2 * n - 1:
            break
        exact = float(sc.factorial2(2 * k - 1)) if k > 0 else 1.0
        assert w @ x ** (2 * k) == pytest.approx(exact, rel=1e-10)
        if 2 * k + 1 <= 2 * n - 1:
            assert abs(w @ x ** (2 * k + 1)) <= 1e-10 * max(1.0, exact)


@pytest.mark.parametrize("n", [0, -1, -10])
def test_gauss_hermite_rejects_nonpositive(n):
    with pytest.raises(ValueError):
        gauss_hermite(n)
