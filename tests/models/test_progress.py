"""``verbose``: a long Python fit shows its progress (it printed nothing before), as tqdm
bars where tqdm is installed, else as lines on stderr, and leaves logging as it found it."""
import logging

import numpy as np
import pytest

import fastep
import fastep._progress as progress


def _data(n=150, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2))
    return X, (X[:, 0] + 0.3 * rng.normal(size=n) > 0).astype(int)


def _state():
    return [(log.level, log.propagate, list(log.handlers))
            for log in (logging.getLogger("fastep"), logging.getLogger("fastep.sweeps"))]


@pytest.mark.parametrize("make", [
    lambda v: fastep.EPGaussianProcessClassifier(verbose=v),
    lambda v: fastep.EPGaussianProcessRegressor(likelihood="poisson", verbose=v),
    lambda v: fastep.GWIClassifier(n_inducing=10, max_iter=5, verbose=v),
], ids=["classifier", "regressor", "gwi"])
def test_verbose_prints_the_steps_without_tqdm(make, capsys, monkeypatch):
    monkeypatch.setattr(progress, "_tqdm", lambda terminal_only: None)
    X, y = _data()
    if "Regressor" in type(make(0)).__name__:
        y = np.random.default_rng(1).poisson(np.exp(X[:, 0])).astype(float)
    before = _state()
    make(0).fit(X, y)
    assert capsys.readouterr().err == ""                     # quiet by default
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        make(2).fit(X, y)
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert any(line.startswith("fastep: ML-II step") or line.startswith("fastep: GWI")
               for line in lines), err[-500:]
    if "GWI" not in type(make(0)).__name__:
        assert any("sweep" in line for line in lines)        # verbose=2: the EP sweeps too
    assert _state() == before


def test_verbose_shows_tqdm_bars(capsys):
    pytest.importorskip("tqdm")
    X, y = _data()
    before = _state()
    fastep.EPGaussianProcessClassifier(verbose=1).fit(X, y)
    err = capsys.readouterr().err
    assert "ML-II steps" in err and "EP sweeps" not in err
    assert _state() == before


def test_verbose_is_checked():
    X, y = _data(40)
    with pytest.raises(ValueError, match="verbose"):
        fastep.EPGaussianProcessClassifier(verbose=-1).fit(X, y)
    with pytest.raises(ValueError, match="verbose"):
        fastep.EPGaussianProcessClassifier(verbose="loud").fit(X, y)


def test_verbose_restores_a_propagate_the_user_set():
    X, y = _data(60)
    sweeps = logging.getLogger("fastep.sweeps")
    sweeps.propagate = False
    try:
        fastep.EPGaussianProcessClassifier(verbose=1).fit(X, y)
        assert sweeps.propagate is False
    finally:
        sweeps.propagate = True
