"""Kernels against scikit-learn's equivalents and finite differences.

Truth: scikit-learn's kernels (an independent implementation of the same formulas) for the
Gram matrices (the periodic kernel, a product over input dimensions, as the product of
scikit-learn's one-dimensional ``ExpSineSquared`` on each column; the ARD rational
quadratic, which scikit-learn lacks, as scikit-learn's on inputs divided by the
lengthscales), and central finite differences of sum(G * K(theta)) in log-theta space for
``gradient_contract``.
"""
import numpy as np
import pytest
from sklearn.gaussian_process import kernels as sk

from fastep.kernels import (RBF, ConstantKernel, Linear, Matern12, Matern32, Matern52, Periodic,
                            Product, RationalQuadratic, SklearnKernel, Sum, WhiteKernel,
                            as_kernel)

D = 3
RNG = np.random.default_rng(1234)
X = RNG.normal(size=(9, D))
Y = RNG.normal(size=(5, D))
ARD = [0.7, 1.3, 2.1]


def _sk_const(c):
    return sk.ConstantKernel(c, constant_value_bounds="fixed")


class _Columns:
    """A kernel made of scikit-learn kernels applied to scaled or single input columns:
    ``variance * prod_d k_d(X[:, d] / s_d, Y[:, d] / s_d)`` (``per_column``) or
    ``variance * k(X / s, Y / s)``."""

    def __init__(self, variance, kernels, scale=1.0, per_column=True):
        self.variance, self.kernels, self.per_column = variance, kernels, per_column
        self.scale = np.asarray(scale, dtype=float)

    def __call__(self, A, B=None):
        A = A / self.scale
        B = A if B is None else B / self.scale
        if not self.per_column:
            return self.variance * self.kernels[0](A, B)
        out = self.variance * np.ones((A.shape[0], B.shape[0]))
        for d, k in enumerate(self.kernels):
            out *= k(A[:, [d]], B[:, [d]])
        return out

    def diag(self, A):
        return np.diag(self(A))


# (fastep kernel factory, equivalent scikit-learn kernel or None)
CASES = {
    "rbf_iso": (lambda: RBF(variance=1.7, lengthscale=0.9),
                lambda: _sk_const(1.7) * sk.RBF(0.9)),
    "rbf_ard": (lambda: RBF(variance=0.6, lengthscale=ARD),
                lambda: _sk_const(0.6) * sk.RBF(ARD)),
    "m12_iso": (lambda: Matern12(variance=1.3, lengthscale=1.1),
                lambda: _sk_const(1.3) * sk.Matern(1.1, nu=0.5)),
    "m12_ard": (lambda: Matern12(variance=0.8, lengthscale=ARD),
                lambda: _sk_const(0.8) * sk.Matern(ARD, nu=0.5)),
    "m32_iso": (lambda: Matern32(variance=2.2, lengthscale=0.8),
                lambda: _sk_const(2.2) * sk.Matern(0.8, nu=1.5)),
    "m32_ard": (lambda: Matern32(variance=0.9, lengthscale=ARD),
                lambda: _sk_const(0.9) * sk.Matern(ARD, nu=1.5)),
    "m52_iso": (lambda: Matern52(variance=1.1, lengthscale=1.4),
                lambda: _sk_const(1.1) * sk.Matern(1.4, nu=2.5)),
    "m52_ard": (lambda: Matern52(variance=1.9, lengthscale=ARD),
                lambda: _sk_const(1.9) * sk.Matern(ARD, nu=2.5)),
    "linear": (lambda: Linear(variance=0.7),
               lambda: _sk_const(0.7) * sk.DotProduct(sigma_0=0.0, sigma_0_bounds="fixed")),
    "constant": (lambda: ConstantKernel(2.5), lambda: sk.ConstantKernel(2.5)),
    "white": (lambda: WhiteKernel(0.3), lambda: sk.WhiteKernel(0.3)),
    "sum": (lambda: RBF(1.2, ARD) + WhiteKernel(0.1),
            lambda: _sk_const(1.2) * sk.RBF(ARD) + sk.WhiteKernel(0.1)),
    "product": (lambda: Matern32(1.5, 0.9) * Linear(0.4),
                lambda: (_sk_const(1.5) * sk.Matern(0.9, nu=1.5))
                * (_sk_const(0.4) * sk.DotProduct(sigma_0=0.0, sigma_0_bounds="fixed"))),
    "rq_iso": (lambda: RationalQuadratic(variance=1.4, lengthscale=0.9, alpha=0.6),
               lambda: _sk_const(1.4) * sk.RationalQuadratic(0.9, 0.6)),
    "rq_ard": (lambda: RationalQuadratic(variance=0.8, lengthscale=ARD, alpha=2.5),
               lambda: _Columns(0.8, [sk.RationalQuadratic(1.0, 2.5)], ARD, per_column=False)),
    "periodic_one_lengthscale": (lambda: Periodic(variance=1.3, lengthscale=0.8, period=1.7),
                     lambda: _Columns(1.3, [sk.ExpSineSquared(0.8, 1.7)] * D)),
    "periodic_ard": (lambda: Periodic(variance=0.7, lengthscale=ARD, period=2.2),
                     lambda: _Columns(0.7, [sk.ExpSineSquared(ls, 2.2) for ls in ARD])),
    "periodic_x_rbf": (lambda: Periodic(1.0, 1.1, 1.5) * RBF(1.0, 2.0), None),
    "nested": (lambda: (ConstantKernel(0.8) * Matern52(1.0, ARD) + Linear(0.2)) * RBF(1.3, 2.0)
               + WhiteKernel(0.05), None),
    "sum_scalar": (lambda: 2.0 * Matern12(1.0, 0.6) + RBF(0.5, 1.5),
                   lambda: _sk_const(2.0) * sk.Matern(0.6, nu=0.5) + _sk_const(0.5) * sk.RBF(1.5)),
}


def test_cases_cover_every_kernel_class():
    from fastep import kernels as fk
    seen = set()

    def walk(k):
        seen.add(type(k))
        if isinstance(k, (Sum, Product)):
            walk(k.k1)
            walk(k.k2)

    for make, _ in CASES.values():
        walk(make())
    assert set(fk._TYPES.values()) | {Sum, Product} <= seen


@pytest.mark.parametrize("name", list(CASES))
def test_gram_matches_sklearn_and_diag(name):
    make, make_sk = CASES[name]
    k = make()
    K = k(X)
    assert K.shape == (9, 9)
    np.testing.assert_allclose(K, K.T, rtol=0, atol=1e-14)
    np.testing.assert_allclose(k.diag(X), np.diag(K), rtol=1e-14, atol=1e-15)
    if make_sk is not None:
        ks = make_sk()
        np.testing.assert_allclose(K, ks(X), rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(k(X, Y), ks(X, Y), rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(k.diag(X), ks.diag(X), rtol=1e-12, atol=1e-14)


def _fd_contract(k, X, G, h=1e-5):
    theta = k.theta
    out = np.empty(theta.size)
    for p in range(theta.size):
        tp, tm = theta.copy(), theta.copy()
        tp[p] += h
        tm[p] -= h
        out[p] = (np.sum(G * k.clone_with_theta(tp)(X)) - np.sum(G * k.clone_with_theta(tm)(X))) \
            / (2 * h)
    return out


@pytest.mark.parametrize("name", list(CASES))
def test_gradient_contract_matches_fd(name):
    k = CASES[name][0]()
    G = np.random.default_rng(7).normal(size=(9, 9))
    got = k.gradient_contract(X, G)
    assert got.shape == (k.n_dims,) == k.theta.shape
    fd = _fd_contract(k, X, G)
    # central differences: truncation ~h^2, rounding ~1e-16 * sum|G K| / h
    scale = np.sum(np.abs(G * k(X)))
    np.testing.assert_allclose(got, fd, rtol=1e-6, atol=1e-9 * scale)


@pytest.mark.parametrize("name", list(CASES))
def test_gram_and_gradient_from_reused_distances(name):
    """Inside ``reuse_distances`` (ML-II), an isotropic kernel's Gram and contraction come
    from X's squared distances, computed once: the same K as scikit-learn's, the same
    gradient as finite differences; other kernels and other inputs are untouched."""
    from fastep.kernels.distances import reuse_distances, reused_distances
    from fastep.kernels.gram import HOST
    from scipy.spatial.distance import cdist
    make, make_sk = CASES[name]
    k = make()
    G = np.random.default_rng(7).normal(size=(9, 9))
    outside = k(X), k.gradient_contract(X, G)
    with reuse_distances(X, HOST):
        K, got = k(X), k.gradient_contract(X, G)
        from fastep.kernels import distances
        iso = name.endswith("_iso") or name in ("product", "nested", "sum_scalar",
                                                "periodic_x_rbf")
        assert (distances._ACTIVE.get().D is not None) == iso     # one lengthscale inside
        fd = _fd_contract(k, X, G)
        np.testing.assert_allclose(reused_distances(X), cdist(X, X, "sqeuclidean"),
                                   rtol=1e-13, atol=1e-14)
        assert reused_distances(X.copy()) is None          # another array: no reuse
        np.testing.assert_array_equal(k(X, Y), make()(X, Y))
    if make_sk is not None:
        np.testing.assert_allclose(K, make_sk()(X), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(K, outside[0], rtol=1e-13, atol=1e-15)
    scale = np.sum(np.abs(G * K))
    np.testing.assert_allclose(got, fd, rtol=1e-6, atol=1e-9 * scale)
    np.testing.assert_allclose(got, outside[1], rtol=1e-12, atol=1e-13 * scale)
    assert reused_distances(X) is None                      # the block has ended


@pytest.mark.parametrize("name", list(CASES))
def test_cross_and_diag_gradient_contract_match_fd(name):
    """K(X, Y) and diag K(X): the contractions inducing-point models need; also given K
    itself (``gram``, as sparse EP's gradient passes the K(X, Z) its run kept; the
    stationary kernels then compute no kernel value), in both memory orders, with a row
    of Y equal to one of X (r = 0, where Matern12's h / g is 1/r)."""
    k = CASES[name][0]()
    rng = np.random.default_rng(8)
    Yr = np.vstack([Y, X[2]])
    G, g = rng.normal(size=(9, 6)), rng.normal(size=9)
    h = 1e-5
    fd_cross, fd_diag = np.empty(k.n_dims), np.empty(k.n_dims)
    for p in range(k.n_dims):
        tp, tm = k.theta.copy(), k.theta.copy()
        tp[p] += h
        tm[p] -= h
        kp, km = k.clone_with_theta(tp), k.clone_with_theta(tm)
        fd_cross[p] = np.sum(G * (kp(X, Yr) - km(X, Yr))) / (2 * h)
        fd_diag[p] = g @ (kp.diag(X) - km.diag(X)) / (2 * h)
    np.testing.assert_allclose(k.gradient_contract(X, G, Yr), fd_cross, rtol=1e-6, atol=1e-9)
    K = k(X, Yr)
    for order in ("C", "F"):
        got = k.gradient_contract(X, np.asarray(G, order=order), Yr,
                                  gram=np.asarray(K, order=order))
        np.testing.assert_allclose(got, fd_cross, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(k.diag_gradient_contract(X, g), fd_diag, rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("name", list(CASES))
def test_input_gradient_contract_matches_fd(name):
    """d/dX sum G * K(X, Y), and of sum G * K(X, X) where both arguments move."""
    k = CASES[name][0]()
    rng = np.random.default_rng(9)
    Gc, Gs = rng.normal(size=(9, 5)), rng.normal(size=(9, 9))
    h = 1e-6
    fd_c, fd_s = np.empty(X.shape), np.empty(X.shape)
    for i in range(X.shape[0]):
        for c in range(D):
            Xp, Xm = X.copy(), X.copy()
            Xp[i, c] += h
            Xm[i, c] -= h
            fd_c[i, c] = np.sum(Gc * (k(Xp, Y) - k(Xm, Y))) / (2 * h)
            # WhiteKernel(X, X) is a function of point identity, not of the input values
            fd_s[i, c] = np.sum(Gs * (k(Xp, Xp) - k(Xm, Xm))) / (2 * h)
    np.testing.assert_allclose(k.input_gradient_contract(X, Gc, Y), fd_c, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(k.input_gradient_contract(X, Gs), fd_s, rtol=1e-6, atol=1e-7)


def test_sklearn_kernel_refuses_inducing_point_gradients():
    k = SklearnKernel(sk.RBF(1.0))
    for call in (lambda: k.gradient_contract(X, np.ones((9, 5)), Y),
                 lambda: k.diag_gradient_contract(X, np.ones(9)),
                 lambda: k.input_gradient_contract(X, np.ones((9, 9)))):
        with pytest.raises(ValueError, match="fastep kernel"):
            call()


@pytest.mark.parametrize("name", ["rbf_ard", "m32_iso", "sum", "product", "nested"])
def test_theta_bounds_clone_round_trip(name):
    k = CASES[name][0]()
    K0 = k(X)
    theta = k.theta
    assert theta.shape == (k.n_dims,)
    b = k.bounds
    assert b.shape == (k.n_dims, 2)
    # default bounds (1e-5, 1e5) in log space
    np.testing.assert_allclose(b, np.tile(np.log([1e-5, 1e5]), (k.n_dims, 1)))
    same = k.clone_with_theta(theta)
    np.testing.assert_array_equal(same.theta, theta)
    np.testing.assert_allclose(same(X), K0, rtol=1e-14)
    new = theta + np.linspace(-0.3, 0.4, theta.size)
    k2 = k.clone_with_theta(new)
    np.testing.assert_allclose(k2.theta, new, rtol=1e-14)
    np.testing.assert_array_equal(k.theta, theta)      # the original is untouched
    np.testing.assert_allclose(k(X), K0, rtol=0)
    assert not np.allclose(k2(X), K0)
    # setting theta in place equals cloning
    k.theta = new
    np.testing.assert_allclose(k(X), k2(X), rtol=1e-14)
    with pytest.raises(ValueError):
        k.theta = np.zeros(theta.size + 1)


def test_theta_maps_to_parameters_in_log_space():
    k = RBF(variance=2.0, lengthscale=ARD, variance_bounds=(1e-2, 1e3))
    np.testing.assert_allclose(k.theta, np.log([2.0] + ARD))
    np.testing.assert_allclose(k.bounds[0], np.log([1e-2, 1e3]))
    k2 = k.clone_with_theta(np.log([3.0, 1.0, 1.0, 1.0]))
    # variance 3, unit lengthscales: compare with the closed form
    d2 = np.sum((X[:, None, :] - X[None, :, :]) ** 2, axis=-1)
    np.testing.assert_allclose(k2(X), 3.0 * np.exp(-0.5 * d2), rtol=1e-13)


def test_fixed_bounds_remove_parameter():
    free = RBF(variance=2.0, lengthscale=ARD)
    fixed = RBF(variance=2.0, lengthscale=ARD, variance_bounds="fixed")
    assert fixed.n_dims == free.n_dims - 1 == 3
    np.testing.assert_allclose(fixed.theta, np.log(ARD))
    assert fixed.bounds.shape == (3, 2)
    np.testing.assert_allclose(fixed(X), free(X), rtol=0)
    G = np.random.default_rng(3).normal(size=(9, 9))
    np.testing.assert_allclose(fixed.gradient_contract(X, G), free.gradient_contract(X, G)[1:],
                               rtol=1e-14)
    np.testing.assert_allclose(fixed.gradient_contract(X, G), _fd_contract(fixed, X, G), rtol=1e-6)
    # a new theta leaves the fixed variance alone
    k2 = fixed.clone_with_theta(np.zeros(3))
    np.testing.assert_allclose(np.diag(k2(X)), 2.0)
    # in a composite kernel, too
    s = fixed + WhiteKernel(0.1, noise_level_bounds="fixed")
    assert s.n_dims == 3
    np.testing.assert_allclose(s.gradient_contract(X, G), _fd_contract(s, X, G), rtol=1e-6)
    all_fixed = ConstantKernel(1.0, constant_bounds="fixed")
    assert all_fixed.n_dims == 0 and all_fixed.theta.shape == (0,)
    assert all_fixed.gradient_contract(X, G).shape == (0,)


def test_sklearn_kernel_adapter():
    ks = sk.ConstantKernel(1.4) * sk.Matern([0.8, 1.2, 1.9], nu=1.5) + sk.WhiteKernel(0.2)
    k = as_kernel(ks)
    assert isinstance(k, SklearnKernel)
    np.testing.assert_allclose(k(X), ks(X), rtol=1e-14)
    np.testing.assert_allclose(k(X, Y), ks(X, Y), rtol=1e-14)
    np.testing.assert_allclose(k.diag(X), np.diag(ks(X)), rtol=1e-14)
    np.testing.assert_allclose(k.theta, ks.theta)
    np.testing.assert_allclose(k.bounds, ks.bounds)
    G = np.random.default_rng(11).normal(size=(9, 9))
    np.testing.assert_allclose(k.gradient_contract(X, G), _fd_contract(k, X, G), rtol=1e-6)
    # equals the native fastep kernel's contraction
    native = ConstantKernel(1.4) * Matern32(1.0, [0.8, 1.2, 1.9], variance_bounds="fixed") \
        + WhiteKernel(0.2)
    np.testing.assert_allclose(native(X), ks(X), rtol=1e-12)
    np.testing.assert_allclose(native.gradient_contract(X, G), k.gradient_contract(X, G),
                               rtol=1e-9)
    # composes with fastep kernels
    mixed = k + RBF(0.5, 1.0)
    np.testing.assert_allclose(mixed(X), ks(X) + RBF(0.5, 1.0)(X), rtol=1e-14)
    assert as_kernel(native) is native
    with pytest.raises(ValueError):
        as_kernel("rbf")


@pytest.mark.parametrize("cls,kw,pname", [
    (RBF, {"lengthscale": -1.0}, "lengthscale"),
    (RBF, {"lengthscale": 0.0}, "lengthscale"),
    (RBF, {"variance": 0.0}, "variance"),
    (Matern12, {"variance": -2.0}, "variance"),
    (Matern32, {"lengthscale": [1.0, 0.0, 2.0]}, "lengthscale"),
    (Matern52, {"lengthscale": np.nan}, "lengthscale"),
    (Linear, {"variance": -1.0}, "variance"),
    (ConstantKernel, {"constant": 0.0}, "constant"),
    (WhiteKernel, {"noise_level": -0.1}, "noise_level"),
    (Periodic, {"period": 0.0}, "period"),
    (Periodic, {"period": -2.0}, "period"),
    (Periodic, {"lengthscale": [1.0, -1.0]}, "lengthscale"),
    (RationalQuadratic, {"alpha": 0.0}, "alpha"),
    (RationalQuadratic, {"alpha": [1.0, 2.0]}, "alpha"),
])
def test_invalid_parameters_raise(cls, kw, pname):
    with pytest.raises(ValueError, match=pname):
        cls(**kw)


@pytest.mark.parametrize("cls", [RBF, Matern12, Matern32, Matern52, RationalQuadratic, Periodic])
def test_ard_lengthscale_count_mismatch(cls):
    k = cls(lengthscale=[1.0, 2.0])
    with pytest.raises(ValueError, match="lengthscale"):
        k(X)
    with pytest.raises(ValueError, match="lengthscale"):
        k.gradient_contract(X, np.eye(9))


@pytest.mark.parametrize("make", [lambda: RationalQuadratic(1.2, ARD, 0.7, alpha_bounds="fixed"),
                                  lambda: Periodic(0.9, [1.1, 0.7, 2.0], 1.6) * RBF(1.0, 2.0)])
def test_new_kernels_round_trip_through_their_description(make):
    from fastep.kernels import kernel_from_dict
    k = make()
    again = kernel_from_dict(k.to_dict())
    assert again == k
    np.testing.assert_array_equal(again(X, Y), k(X, Y))


def test_periodic_kernel_learns_the_period():
    """ML-II on noisy samples of a function of period 2 finds the period (started at 1.8)."""
    import fastep
    rng = np.random.default_rng(0)
    x = np.sort(rng.uniform(0.0, 10.0, 80))[:, None]
    y = np.sin(np.pi * x[:, 0]) + 0.5 * np.cos(2 * np.pi * x[:, 0]) + 0.1 * rng.normal(size=80)
    reg = fastep.EPGaussianProcessRegressor(Periodic(1.0, 1.0, 1.8),
                                            likelihood="gaussian").fit(x, y)
    assert abs(reg.kernel_.period - 2.0) < 0.02, reg.kernel_


@pytest.mark.parametrize("kernel", [RationalQuadratic(1.0, [0.8, 1.3], 1.5),
                                    Periodic(1.0, [0.9, 1.2], 2.5)], ids=["rq", "periodic"])
def test_sparse_evidence_gradient_with_moving_inducing_inputs(kernel):
    """Sparse EP's evidence gradient in the kernel parameters and the inducing inputs (the
    kernels' input contraction) against central differences."""
    import fastep
    rng = np.random.default_rng(3)
    X2 = rng.normal(size=(40, 2))
    y = (np.sin(2 * X2[:, 0]) + X2[:, 1] > 0).astype(int)
    clf = fastep.EPGaussianProcessClassifier(kernel, n_inducing=6, optimize_inducing=True,
                                             optimizer=None, random_state=0, tol=1e-10,
                                             max_iter=500).fit(X2, y)
    theta = np.concatenate([clf.kernel_.theta, clf.inducing_points_.ravel()])
    value, grad = clf.log_marginal_likelihood(theta, eval_gradient=True)
    h = 1e-5
    fd = np.array([(clf.log_marginal_likelihood(theta + h * e)
                    - clf.log_marginal_likelihood(theta - h * e)) / (2 * h)
                   for e in np.eye(theta.size)])
    np.testing.assert_allclose(grad, fd, rtol=1e-4, atol=1e-6)


def test_sklearn_kernel_with_per_feature_bounds_names_the_cause():
    """scikit-learn's RBF(1.0, [1.0] * 4) takes the list as length_scale_bounds: its bounds
    are (1, 4), and scikit-learn's own estimators fail with "too many values to unpack".
    Wrapping it names the kernel argument, the shape and the fix."""
    import fastep
    with pytest.raises(ValueError, match=r"kernel: .*shape \(1, 4\).*expected \(1, 2\)"
                       r".*length_scale=\[1.0\] \* 4"):
        as_kernel(sk.RBF(1.0, [1.0] * 4))
    Xc = RNG.normal(size=(20, 4))
    with pytest.raises(ValueError, match="length_scale_bounds"):
        fastep.EPGaussianProcessClassifier(sk.RBF(1.0, [1.0] * 4)).fit(Xc, Xc[:, 0] > 0)


@pytest.mark.parametrize("order", ["C", "F"])
def test_gradient_contract_given_gram_checks_it_as_given(order):
    """A bad ``gram`` (or G, X, Y) is named as the caller passed it, also where an
    F-ordered G makes the contraction run on the transposes."""
    k = RBF(1.2, ARD)
    G = np.asarray(np.random.default_rng(3).normal(size=(9, 5)), order=order)
    K = k(X, Y)
    with pytest.raises(ValueError, match=r"gram must be an array of shape \(9, 5\); got shape "
                                         r"\(5, 9\)"):
        k.gradient_contract(X, G, Y, gram=K.T)
    bad = K.copy()
    bad[1, 3] = np.nan
    with pytest.raises(ValueError, match=r"gram must be finite; got NaN at index \(1, 3\)"):
        k.gradient_contract(X, G, Y, gram=bad)
    with pytest.raises(ValueError, match=r"Y must have the 3 feature"):
        k.gradient_contract(X, G, Y[:, :2], gram=K)
