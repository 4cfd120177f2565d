"""The plots a user of fastep would otherwise write again and again (matplotlib, the
``plot`` extra: ``pip install "fastep[plot]"``).

Every function follows matplotlib's conventions: it draws on ``ax`` (default: the
current Axes, ``plt.gca()``), takes the usual keyword arguments of the artist it draws,
and returns the Axes.

* :func:`latent_band`: the latent posterior mean and a band of ``n_std`` standard
  deviations over one input feature (any estimator with ``predict_latent``).
* :func:`probability_map`: p(y = 1 | x) over a 2-D input, filled contours with the 0.5
  level drawn (a binary classifier's decision regions).
* :func:`calibration`: a reliability diagram, observed frequency against predicted
  probability in bins (binary, or the top label of a multiclass model).
* :func:`annotator_reliabilities`: learnt sensitivity and specificity of each annotator
  of :class:`fastep.MultiAnnotatorGPClassifier`, against true values when known.
* :func:`convergence`: a trace of log Z (EP sweeps, ``result_.history``; or ML-II
  steps) as the distance to its last value, on a log scale.

Examples
--------
>>> import matplotlib
>>> matplotlib.use("Agg")
>>> import matplotlib.pyplot as plt
>>> fig, ax = plt.subplots()
>>> import numpy as np
>>> from fastep import EPGaussianProcessClassifier
>>> from fastep.plot import latent_band
>>> X = np.linspace(-3, 3, 40)[:, None]; y = (np.sin(2 * X[:, 0]) > 0).astype(int)
>>> clf = EPGaussianProcessClassifier(optimizer=None).fit(X, y)
>>> ax = latent_band(clf, np.linspace(-4, 4, 100)[:, None], ax=ax)
>>> len(ax.lines), len(ax.collections)
(1, 1)
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional, Tuple

import numpy as np
from numpy.typing import ArrayLike

if TYPE_CHECKING:                     # matplotlib is an optional extra: imported when drawing
    from matplotlib.axes import Axes

__all__ = ["latent_band", "probability_map", "calibration", "annotator_reliabilities",
           "convergence"]


def _axes(ax: Optional[Axes]) -> Axes:
    """``ax``, or the current Axes; a clear error where matplotlib is missing."""
    try:
        import matplotlib.pyplot as plt
    except ImportError as exc:                        # pragma: no cover - the extra is absent
        raise ImportError("fastep.plot needs matplotlib: pip install \"fastep[plot]\"") from exc
    return plt.gca() if ax is None else ax


def _one_feature(X, name="X"):
    """The grid of a 1-D plot: X of shape (n,) or (n, 1), as (n, 1) and its (n,) values."""
    X = np.asarray(X, dtype=float)
    if X.ndim == 1:
        X = X[:, None]
    if X.ndim != 2 or X.shape[1] != 1:
        raise ValueError(f"{name} must hold one input feature, shape (n,) or (n, 1); got "
                         f"shape {np.shape(X)}. Plot a slice of a wider model by fixing "
                         f"the other features.")
    return X, X[:, 0]


def latent_band(estimator: Any, X: ArrayLike, *, ax: Optional[Axes] = None, n_std: float = 2.0,
                label: Optional[str] = "latent mean", band_label: Optional[str] = None,
                color: Any = None, alpha: float = 0.25, series: Any = None) -> Axes:
    """Latent posterior mean of f(x) and a band of ``n_std`` standard deviations.

    Parameters
    ----------
    estimator : fitted fastep estimator
        One with ``predict_latent(X, return_std=True)`` and one latent function (a binary
        EP classifier, the regressors, the censored, ordinal and crowd models).
    X : array of shape (n,) or (n, 1)
        Inputs of one feature, in the order they are drawn (sort them).
    ax : matplotlib Axes, optional
        Where to draw (default: the current Axes).
    n_std : float, default=2.0
        Half-width of the band in posterior standard deviations (2: about 95%).
    label : str or None, default="latent mean"
        Legend label of the mean's line.
    band_label : str or None, default=None
        Legend label of the band; None: ``"±2 sd"`` for ``n_std=2``.
    color : matplotlib color, optional
        Colour of the line and the band (default: the Axes' next colour).
    alpha : float, default=0.25
        Opacity of the band.
    series : number, optional
        For a state-space model of many series (``inference="markov"`` fitted on X =
        (time, series id)): the id of the series to draw over the times ``X``.

    Returns
    -------
    ax : matplotlib Axes
        With one line (the mean) and one filled band.

    Examples
    --------
    >>> import matplotlib; matplotlib.use("Agg")
    >>> import matplotlib.pyplot as plt; fig = plt.figure()      # a new figure: its Axes
    >>> import numpy as np
    >>> from fastep import EPGaussianProcessRegressor
    >>> from fastep.plot import latent_band
    >>> X = np.linspace(0, 5, 30)[:, None]
    >>> reg = EPGaussianProcessRegressor(likelihood="gaussian", optimizer=None)
    >>> ax = latent_band(reg.fit(X, np.sin(X[:, 0])), np.linspace(0, 6, 80), n_std=2)
    >>> ax.get_ylabel()
    'f(x)'
    """
    ax = _axes(ax)
    X, x = _one_feature(X)
    if series is not None:
        if getattr(estimator, "n_features_in_", None) != 2 or \
                getattr(estimator, "inference", None) != "markov":
            raise ValueError(f"series={series!r} draws one series of a model fitted on "
                             f"(time, series id) columns (inference='markov'); this "
                             f"estimator has {getattr(estimator, 'n_features_in_', '?')} "
                             f"feature(s). Leave series out.")
        X = np.column_stack([x, np.full(x.shape[0], float(series))])
    mean, std = estimator.predict_latent(X, return_std=True)
    if np.ndim(mean) != 1:
        raise ValueError(f"latent_band draws one latent function; this estimator has "
                         f"{np.shape(mean)[1]} (one per class). Draw column j of "
                         f"predict_latent(X, return_std=True) with ax.plot and "
                         f"ax.fill_between.")
    line, = ax.plot(x, mean, label=label, color=color)
    ax.fill_between(x, mean - n_std * std, mean + n_std * std, color=line.get_color(),
                    alpha=alpha, linewidth=0,
                    label=f"\u00b1{n_std:g} sd" if band_label is None else band_label)
    ax.set_xlabel("x")
    ax.set_ylabel("f(x)")
    return ax


def probability_map(estimator: Any, X: ArrayLike, y: Optional[ArrayLike] = None, *,
                    ax: Optional[Axes] = None, resolution: int = 150, margin: float = 0.5,
                    cmap: Any = "RdBu_r", levels: int = 11) -> Axes:
    """p(y = classes_[1] | x) of a binary classifier over the box around a 2-D X, as
    filled contours with the 0.5 level drawn in black (and a colour bar); the points of
    X coloured by ``y`` if given.

    Parameters
    ----------
    estimator : fitted binary classifier with ``predict_proba``
    X : array (n, 2)
        The inputs whose bounding box (widened by ``margin``) is drawn.
    y : array (n,), optional
        Labels of X, as the points' colours.
    ax : matplotlib Axes, optional
        Where to draw (default: the current Axes).
    resolution : int, default=150
        Grid points per axis.
    margin : float, default=0.5
        Added to each side of the box, in units of X.
    cmap : colormap or name, default="RdBu_r"
        Passed to ``contourf`` (and to the points).
    levels : int, default=11
        Number of contour levels, evenly spaced on [0, 1].

    Returns
    -------
    ax : matplotlib Axes

    Examples
    --------
    >>> import matplotlib; matplotlib.use("Agg")
    >>> import matplotlib.pyplot as plt; fig = plt.figure()      # a new figure: its Axes
    >>> import numpy as np
    >>> from fastep import EPGaussianProcessClassifier
    >>> from fastep.plot import probability_map
    >>> X = np.random.default_rng(0).normal(size=(80, 2)); y = (X[:, 0] > X[:, 1]).astype(int)
    >>> clf = EPGaussianProcessClassifier(optimizer=None).fit(X, y)
    >>> ax = probability_map(clf, X, y, resolution=40)
    >>> [float(v) for v in ax.collections[1].levels]      # the decision boundary
    [0.5]
    """
    ax = _axes(ax)
    X = np.asarray(X, dtype=float)
    if X.ndim != 2 or X.shape[1] != 2:
        raise ValueError(f"X must hold two input features, shape (n, 2); got shape "
                         f"{np.shape(X)}.")
    lo, hi = X.min(0) - margin, X.max(0) + margin
    g0, g1 = np.meshgrid(np.linspace(lo[0], hi[0], resolution),
                         np.linspace(lo[1], hi[1], resolution))
    grid = np.column_stack([g0.ravel(), g1.ravel()])
    proba = estimator.predict_proba(grid)
    if proba.shape[1] != 2:
        raise ValueError(f"probability_map draws a binary classifier; this one has "
                         f"{proba.shape[1]} classes. Draw one class's column of "
                         f"predict_proba with ax.contourf instead.")
    p = proba[:, 1].reshape(g0.shape)
    filled = ax.contourf(g0, g1, p, levels=np.linspace(0.0, 1.0, levels), cmap=cmap)
    ax.contour(g0, g1, p, levels=[0.5], colors="k", linewidths=1.5)
    if y is not None:                       # any labels: coloured by their rank
        codes = np.unique(np.asarray(y), return_inverse=True)[1]
        ax.scatter(X[:, 0], X[:, 1], c=codes, cmap=cmap, edgecolors="k", s=20)
    positive = getattr(estimator, "classes_", [0, 1])[1]
    ax.figure.colorbar(filled, ax=ax, label=f"p(y = {positive} | x)")
    return ax


def calibration(y_true: ArrayLike, proba: ArrayLike, *, n_bins: int = 10,
                ax: Optional[Axes] = None, label: Optional[str] = None,
                marker: str = "o") -> Axes:
    """Reliability diagram: the observed frequency of the event in bins of equal width
    of its predicted probability, against the bins' mean prediction (points on the
    diagonal are calibrated).

    Parameters
    ----------
    y_true : array (n,)
        Labels: 0/1 (or -1/+1, or bool) for a binary ``proba`` of shape (n,); class
        indices 0..C-1 for a ``proba`` of shape (n, C), whose top label is checked (the
        event: the most probable class is the true one).
    proba : array (n,) or (n, C)
        Predicted probabilities (``predict_proba``; its column 1 for a binary model).
    n_bins : int, default=10
        Number of bins of equal width on [0, 1].
    ax : matplotlib Axes, optional
        Where to draw (default: the current Axes).
    label : str or None, default=None
        Legend label of the line.
    marker : str, default="o"
        Marker of the line's points.

    Returns
    -------
    ax : matplotlib Axes
        With the diagonal (drawn once per Axes) and one line of at most ``n_bins`` points
        (empty bins left out).

    Examples
    --------
    >>> import matplotlib; matplotlib.use("Agg")
    >>> import matplotlib.pyplot as plt; fig = plt.figure()      # a new figure: its Axes
    >>> import numpy as np
    >>> from fastep.plot import calibration
    >>> rng = np.random.default_rng(0)
    >>> p = rng.uniform(size=1000); y = (rng.uniform(size=1000) < p).astype(int)
    >>> ax = calibration(y, p, n_bins=5, label="calibrated")
    >>> np.round(ax.lines[1].get_ydata(), 1)          # close to the bins' mean p
    array([0.1, 0.3, 0.5, 0.7, 0.9])
    """
    ax = _axes(ax)
    labels, p = np.asarray(y_true), np.asarray(proba, dtype=np.float64)
    if not (isinstance(n_bins, (int, np.integer)) and n_bins >= 1):
        raise ValueError(f"n_bins must be a positive integer; got {n_bins!r}.")
    if p.ndim == 2:
        if labels.shape != (p.shape[0],):
            raise ValueError(f"y_true must have shape ({p.shape[0]},) for proba of "
                             f"shape {p.shape}; got {labels.shape}.")
        if not (labels.dtype.kind in "iu" or (labels.dtype.kind == "f"
                                              and np.all(labels == np.round(labels)))) \
                or labels.min(initial=0) < 0 or labels.max(initial=0) >= p.shape[1]:
            raise ValueError(f"y_true must hold class indices 0..{p.shape[1] - 1} (the "
                             f"columns of proba); map labels with "
                             f"np.searchsorted(estimator.classes_, y).")
        event = np.argmax(p, axis=1) == labels
        p = p.max(axis=1)
    elif p.ndim == 1 and labels.shape == p.shape:
        values = set(np.unique(labels).tolist())
        if not values <= {0, 1} and not values <= {-1, 1}:
            raise ValueError(f"y_true of a binary proba must be 0/1 (or -1/+1, or bool); "
                             f"got the values {sorted(values)[:5]}.")
        event = labels > 0
    else:
        raise ValueError(f"proba must have shape (n,) or (n, C) and y_true shape (n,); "
                         f"got {p.shape} and {labels.shape}.")
    if not np.all((p >= 0.0) & (p <= 1.0)):
        raise ValueError("proba must lie in [0, 1]; pass predict_proba's output.")
    which = np.minimum((p * n_bins).astype(int), n_bins - 1)
    counts = np.bincount(which, minlength=n_bins)
    full = counts > 0
    mean_p = np.bincount(which, weights=p, minlength=n_bins)[full] / counts[full]
    freq = np.bincount(which, weights=event, minlength=n_bins)[full] / counts[full]
    if not any(line.get_gid() == "calibration-diagonal" for line in ax.lines):
        ax.plot([0, 1], [0, 1], color="0.6", linestyle="--", linewidth=1,
                gid="calibration-diagonal")       # once per Axes: several models share it
    ax.plot(mean_p, freq, marker=marker, label=label)
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_xlabel("predicted probability")
    ax.set_ylabel("observed frequency")
    return ax


def annotator_reliabilities(estimator: Any, *,
                            truth: Optional[Tuple[ArrayLike, ArrayLike]] = None,
                            ax: Optional[Axes] = None, width: float = 0.38) -> Axes:
    """Learnt sensitivity and specificity of each annotator as grouped bars, with the
    true values as black marks when known.

    Parameters
    ----------
    estimator : fitted :class:`fastep.MultiAnnotatorGPClassifier`
    truth : (sensitivity, specificity), optional
        True values, arrays of one entry per annotator.
    ax : matplotlib Axes, optional
        Where to draw (default: the current Axes).
    width : float, default=0.38
        Width of each bar.

    Returns
    -------
    ax : matplotlib Axes
        With two bar containers (sensitivity, specificity).

    Examples
    --------
    >>> import matplotlib; matplotlib.use("Agg")
    >>> import matplotlib.pyplot as plt; fig = plt.figure()      # a new figure: its Axes
    >>> import numpy as np
    >>> from fastep import MultiAnnotatorGPClassifier
    >>> from fastep.datasets import simulate_annotators
    >>> from fastep.plot import annotator_reliabilities
    >>> X = np.random.default_rng(0).normal(size=(100, 2)); z = (X[:, 0] > 0).astype(int)
    >>> Y = simulate_annotators(z, [0.9, 0.6], [0.9, 0.6], random_state=0)
    >>> clf = MultiAnnotatorGPClassifier(optimizer=None).fit(X, Y)
    >>> ax = annotator_reliabilities(clf, truth=([0.9, 0.6], [0.9, 0.6]))
    >>> len(ax.containers)
    2
    """
    ax = _axes(ax)
    try:
        learnt = (np.asarray(estimator.sensitivity_), np.asarray(estimator.specificity_))
    except AttributeError:
        raise ValueError("annotator_reliabilities draws a fitted "
                         "MultiAnnotatorGPClassifier (it reads sensitivity_ and "
                         "specificity_); fit it first.") from None
    r = np.arange(learnt[0].size)
    for k, (name, values) in enumerate(zip(("sensitivity", "specificity"), learnt)):
        ax.bar(r + (k - 0.5) * width, values, width, label=name)
        if truth is not None:
            true = np.asarray(truth[k], dtype=float)
            if true.shape != values.shape:
                raise ValueError(f"truth[{k}] must hold one {name} per annotator "
                                 f"({values.size}); got shape {true.shape}.")
            ax.scatter(r + (k - 0.5) * width, true, marker="_", s=300, color="k",
                       zorder=3, label="true" if k == 0 else None)
    ax.set_xticks(r, [f"annotator {i}" for i in r])
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("probability of a right label")
    return ax


def convergence(values: ArrayLike, *, ax: Optional[Axes] = None, label: Optional[str] = None,
                marker: str = ".", xlabel: str = "EP sweep") -> Axes:
    """A trace of log Z as ``|log Z_k - log Z_last|`` against k, on a log scale: EP's
    sweeps (an EP result's ``history``: :attr:`fastep.EPResult.history`,
    ``estimator.result_.history``) or ML-II's evaluations.  The last entry (zero
    distance) is left out.

    Parameters
    ----------
    values : sequence of float
        log Z at each step, the final value last.
    ax : matplotlib Axes, optional
        Where to draw (default: the current Axes).
    label : str or None, default=None
        Legend label of the line.
    marker : str, default="."
        Marker of the line's points.
    xlabel : str, default="EP sweep"
        Label of the x axis (e.g. "ML-II evaluation" for an ML-II trace).

    Returns
    -------
    ax : matplotlib Axes

    Examples
    --------
    >>> import matplotlib; matplotlib.use("Agg")
    >>> import matplotlib.pyplot as plt; fig = plt.figure()      # a new figure: its Axes
    >>> import numpy as np
    >>> import fastep
    >>> from fastep.kernels import RBF
    >>> from fastep.likelihoods import Probit
    >>> X = np.linspace(-2, 2, 50)[:, None]; y = np.sign(X[:, 0] + 0.1)
    >>> res = fastep.ep(RBF()(X), y, Probit(), tol=1e-8)
    >>> ax = convergence(res.history)
    >>> ax.get_yscale()
    'log'
    """
    ax = _axes(ax)
    values = np.asarray(values, dtype=float)
    if values.ndim != 1 or values.size < 2:
        raise ValueError(f"values must be a 1-D sequence of at least 2 log Z values; got "
                         f"shape {values.shape}.")
    if not np.all(np.isfinite(values)):
        raise ValueError(f"values must be finite; entry {int(np.argmin(np.isfinite(values)))} "
                         f"is {values[np.argmin(np.isfinite(values))]} (an ML-II trace "
                         f"records a failed evaluation so: leave it out).")
    gap = np.abs(values[:-1] - values[-1])
    steps = np.arange(gap.size)
    shown = gap > 0                           # log scale: a step that landed exactly drops
    ax.semilogy(steps[shown], gap[shown], marker=marker, label=label)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("|log Z - final log Z|")
    return ax
