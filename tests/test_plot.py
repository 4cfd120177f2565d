"""fastep.plot under matplotlib's Agg backend: each plot holds the artists and the data
it promises (computed here independently), takes ``ax=`` and returns it."""
import numpy as np
import pytest

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from sklearn.calibration import calibration_curve  # noqa: E402

from fastep import EPGaussianProcessClassifier, MultiAnnotatorGPClassifier  # noqa: E402
from fastep import plot  # noqa: E402
from fastep.datasets import simulate_annotators  # noqa: E402
from fastep.kernels import RBF  # noqa: E402


@pytest.fixture
def ax():
    fig, ax = plt.subplots()
    yield ax
    plt.close(fig)


@pytest.fixture(scope="module")
def binary_1d():
    X = np.linspace(-3, 3, 40)[:, None]
    y = (np.sin(2 * X[:, 0]) > 0).astype(int)
    return EPGaussianProcessClassifier(RBF(2.0, 0.7), optimizer=None).fit(X, y), X, y


def test_latent_band_draws_the_mean_and_a_band_of_n_std(ax, binary_1d):
    clf, _, _ = binary_1d
    grid = np.linspace(-4, 4, 50)
    assert plot.latent_band(clf, grid, ax=ax, n_std=3.0) is ax
    mean, std = clf.predict_latent(grid[:, None], return_std=True)
    line, = ax.lines
    np.testing.assert_array_equal(line.get_xdata(), grid)
    np.testing.assert_allclose(line.get_ydata(), mean)
    band, = ax.collections
    ys = np.concatenate([p.vertices[:, 1] for p in band.get_paths()])
    np.testing.assert_allclose([ys.min(), ys.max()],
                               [np.min(mean - 3 * std), np.max(mean + 3 * std)], rtol=1e-12)


def test_latent_band_refuses_two_features_and_several_latent_functions(ax, binary_1d):
    with pytest.raises(ValueError, match="one input feature"):
        plot.latent_band(binary_1d[0], np.zeros((5, 2)), ax=ax)
    X = np.linspace(-3, 3, 30)[:, None]
    three = EPGaussianProcessClassifier(optimizer=None).fit(X, np.digitize(X[:, 0], [-1, 1]))
    with pytest.raises(ValueError, match="one latent function; this estimator has 3"):
        plot.latent_band(three, X, ax=ax)


def test_latent_band_draws_one_series_of_a_state_space_panel(ax, binary_1d):
    """series= draws the band of one series of a model fitted on (time, series id): the
    same numbers as predict_latent on those columns; refused for a model of one column."""
    from fastep import EPGaussianProcessRegressor
    from fastep.kernels import Matern32
    t = np.tile(np.arange(40.0), 2)
    ids = np.repeat([0.0, 5.0], 40)
    y = np.where(ids == 0.0, np.sin(t / 5.0), np.cos(t / 5.0))
    reg = EPGaussianProcessRegressor(Matern32(1.0, 5.0), likelihood="gaussian",
                                     inference="markov", optimizer=None).fit(np.c_[t, ids], y)
    grid = np.linspace(0.0, 45.0, 30)
    plot.latent_band(reg, grid, ax=ax, series=5.0)
    mean = reg.predict_latent(np.c_[grid, np.full(30, 5.0)])
    np.testing.assert_allclose(ax.lines[0].get_ydata(), mean)
    assert not np.allclose(mean, reg.predict_latent(np.c_[grid, np.zeros(30)]))
    with pytest.raises(ValueError, match="series=1 draws one series"):
        plot.latent_band(binary_1d[0], grid, ax=ax, series=1)
    dense = EPGaussianProcessRegressor(Matern32(1.0, 5.0), likelihood="gaussian",
                                       optimizer=None).fit(np.c_[t, ids], y)
    with pytest.raises(ValueError, match="series=5.0 draws one series"):
        plot.latent_band(dense, grid, ax=ax, series=5.0)     # two features, not a panel


def test_probability_map_contours_p_and_the_half_level(ax):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 2))
    y = (X[:, 0] + X[:, 1] > 0).astype(int)
    clf = EPGaussianProcessClassifier(RBF(1.0, 1.0), optimizer=None).fit(X, y)
    assert plot.probability_map(clf, X, y, ax=ax, resolution=30) is ax
    filled, half, points = ax.collections[0], ax.collections[1], ax.collections[2]
    assert list(half.levels) == [0.5]
    np.testing.assert_allclose(filled.levels, np.linspace(0, 1, 11))
    np.testing.assert_array_equal(points.get_offsets(), X)
    # the 0.5 contour lies where the classifier's p crosses 0.5
    path = np.concatenate([p.vertices for p in half.get_paths()])
    p = clf.predict_proba(path)[:, 1]
    assert np.max(np.abs(p - 0.5)) < 0.05
    # and the filled levels are p(y = 1), not p(y = 0): the points of the highest band
    # drawn are where the classifier gives class 1 at least that band's probability
    k = max(i for i, q in enumerate(filled.get_paths()) if len(q.vertices))
    assert filled.levels[k] >= 0.6
    band = filled.get_paths()[k].vertices
    assert np.all(clf.predict_proba(band)[:, 1] >= filled.levels[k] - 0.05)
    assert ax.figure.axes[-1].get_ylabel() == "p(y = 1 | x)"


def test_probability_map_takes_string_labels(ax):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 2))
    y = np.where(X[:, 0] > 0, "yes", "no")
    clf = EPGaussianProcessClassifier(RBF(1.0, 1.0), optimizer=None).fit(X, y)
    plot.probability_map(clf, X, y, ax=ax, resolution=20)
    assert ax.figure.axes[-1].get_ylabel() == "p(y = yes | x)"
    np.testing.assert_array_equal(ax.collections[-1].get_array(), (y == "yes").astype(int))


def test_calibration_matches_scikit_learns_curve(ax):
    rng = np.random.default_rng(1)
    proba = rng.uniform(size=2000)
    y = (rng.uniform(size=2000) < proba ** 1.5).astype(int)
    assert plot.calibration(y, proba, n_bins=8, ax=ax, label="m") is ax
    diagonal, line = ax.lines
    freq, mean_p = calibration_curve(y, proba, n_bins=8, strategy="uniform")
    np.testing.assert_allclose(line.get_xdata(), mean_p, rtol=1e-12)
    np.testing.assert_allclose(line.get_ydata(), freq, rtol=1e-12)
    np.testing.assert_array_equal(diagonal.get_xdata(), [0, 1])
    plot.calibration(y, 1 - proba, n_bins=8, ax=ax, label="another model")
    assert len(ax.lines) == 3                    # a second model, no second diagonal


def test_calibration_of_the_top_label(ax):
    proba = np.array([[0.7, 0.2, 0.1], [0.1, 0.8, 0.1], [0.3, 0.3, 0.4], [0.05, 0.9, 0.05]])
    y = np.array([0, 0, 2, 1])
    plot.calibration(y, proba, n_bins=2, ax=ax)
    line = ax.lines[1]
    # bin [0, 0.5): 0.4 (right); bin [0.5, 1]: 0.7 (right), 0.8 (wrong), 0.9 (right)
    np.testing.assert_allclose(line.get_xdata(), [0.4, 0.8])
    np.testing.assert_allclose(line.get_ydata(), [1.0, 2 / 3])
    with pytest.raises(ValueError, match="y_true must have shape"):
        plot.calibration(y[:3], proba, ax=ax)
    with pytest.raises(ValueError, match="class indices 0..2"):
        plot.calibration(y + 1, proba, ax=ax)             # labels 1..3, not indices
    with pytest.raises(ValueError, match="n_bins must be a positive integer"):
        plot.calibration(y, proba, n_bins=0, ax=ax)


def test_calibration_of_minus_one_plus_one_labels_equals_zero_one(ax):
    rng = np.random.default_rng(2)
    proba = rng.uniform(size=500)
    y01 = (rng.uniform(size=500) < proba).astype(int)
    plot.calibration(y01, proba, ax=ax)
    plot.calibration(2 * y01 - 1, proba, ax=ax)
    np.testing.assert_array_equal(ax.lines[1].get_ydata(), ax.lines[2].get_ydata())
    with pytest.raises(ValueError, match="0/1"):
        plot.calibration(y01 + 1, proba, ax=ax)


def test_annotator_reliabilities_draws_the_fitted_values_and_the_truth(ax):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(120, 2))
    z = (X[:, 0] > 0).astype(int)
    sens, spec = [0.9, 0.7, 0.6], [0.85, 0.75, 0.6]
    Y = simulate_annotators(z, sens, spec, random_state=0)
    ma = MultiAnnotatorGPClassifier(optimizer=None).fit(X, Y)
    assert plot.annotator_reliabilities(ma, truth=(sens, spec), ax=ax) is ax
    bars = ax.containers
    assert len(bars) == 2
    np.testing.assert_allclose([b.get_height() for b in bars[0]], ma.sensitivity_)
    np.testing.assert_allclose([b.get_height() for b in bars[1]], ma.specificity_)
    marks = [c for c in ax.collections if c.get_offsets().shape[0] == 3]
    np.testing.assert_allclose(marks[0].get_offsets()[:, 1], sens)
    np.testing.assert_allclose(marks[1].get_offsets()[:, 1], spec)
    with pytest.raises(ValueError, match="MultiAnnotatorGPClassifier"):
        plot.annotator_reliabilities(EPGaussianProcessClassifier(), ax=ax)


def test_convergence_draws_the_distance_to_the_last_value_on_a_log_scale(ax):
    values = [-50.0, -41.0, -40.1, -40.01, -40.0]
    assert plot.convergence(values, ax=ax) is ax
    line, = ax.lines
    np.testing.assert_array_equal(line.get_xdata(), [0, 1, 2, 3])
    np.testing.assert_allclose(line.get_ydata(), [10.0, 1.0, 0.1, 0.01])
    assert ax.get_yscale() == "log"
    with pytest.raises(ValueError, match="at least 2 log Z values"):
        plot.convergence([1.0], ax=ax)
    with pytest.raises(ValueError, match="entry 1 is -inf"):
        plot.convergence([1.0, -np.inf, 0.5], ax=ax)


def test_plots_draw_on_the_current_axes_by_default(binary_1d):
    fig = plt.figure()
    try:
        assert plot.convergence([2.0, 1.0]) is plt.gca()
    finally:
        plt.close(fig)
