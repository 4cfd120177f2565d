"""Saved-model fixtures: one small fit of each estimator kind, saved with
:func:`fastep.save_model` by a given version of fastep, with that version's predictions.

``python tests/helpers/saved_models.py OUTDIR`` writes ``OUTDIR/<case>.npz`` (the model)
and ``OUTDIR/<case>.expected.npz`` (the predictions of the fitted estimator, before
saving) for every case the running fastep has.  It imports only fastep's public names,
so it runs under an old checkout too (``PYTHONPATH=<checkout>``): that is how
``tests/data/saved/0.2`` (v0.2.0, 20a889e) and ``tests/data/saved/0.3-pre62`` (main
before issue 62's template fit) were made.  ``tests/models/test_persistence.py`` loads
each with today's code and asserts the same predictions.
"""
import sys
import warnings
from pathlib import Path

import numpy as np


def _relative_gap(a, b):
    """Largest |a - b| / |b| (0 where both are 0; inf for labels that differ)."""
    try:
        a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    except (TypeError, ValueError):
        return float("inf")
    scale = np.where(b == 0.0, 1.0, np.abs(b))
    return float(np.max(np.abs(a - b) / scale, initial=0.0))


def _data(n=40, d=2, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2.0, 2.0, (n, d))
    f = np.sin(1.5 * X[:, 0]) + 0.5 * X[:, 1]
    return rng, X, f


def cases():
    """``{name: (factory, fit_args, fit_kwargs)}``: each factory builds the estimator from
    today's public names (None where this fastep lacks it)."""
    import fastep
    from fastep.kernels import RBF
    rng, X, f = _data()
    labels = (f + 0.3 * rng.standard_normal(f.size) > 0).astype(int)
    three = np.digitize(f, [-0.5, 0.5])
    counts = rng.poisson(np.exp(0.5 * f)).astype(float)
    y_reg = f + 0.2 * rng.standard_normal(f.size)
    censored = np.clip(y_reg, -0.8, 0.8)
    annot = np.stack([labels, labels, 1 - labels], axis=1)
    annot[::5, 2] = labels[::5]
    get = lambda name: getattr(fastep, name, None)          # noqa: E731
    k = lambda: RBF(1.0, 1.0)                                # noqa: E731
    out = {
        "classifier": (lambda: get("EPGaussianProcessClassifier")(k(), optimizer=None),
                       (X, labels), {}),
        "classifier_mlii": (lambda: get("EPGaussianProcessClassifier")(k()), (X, labels), {}),
        "classifier_3class": (lambda: get("EPGaussianProcessClassifier")(k(), optimizer=None),
                              (X, three), {}),
        "classifier_sparse": (lambda: get("EPGaussianProcessClassifier")(
            k(), optimizer=None, n_inducing=10, random_state=0), (X, labels), {}),
        "regressor_poisson": (lambda: get("EPGaussianProcessRegressor")(
            k(), likelihood="poisson", optimizer=None), (X, counts), {}),
        "regressor_student_t": (lambda: get("EPGaussianProcessRegressor")(
            k(), likelihood="student_t"), (X, y_reg), {}),
        "ordinal": (lambda: get("OrdinalGPClassifier")(k(), optimizer=None), (X, three), {}),
        "censored": (lambda: get("CensoredGPRegressor")(k(), lower=-0.8, upper=0.8,
                                                        optimizer=None), (X, censored), {}),
        "annotators": (lambda: get("MultiAnnotatorGPClassifier")(k(), optimizer=None),
                       (X, annot), {}),
        "sparse_regressor": (lambda: get("SparseGPRegressor")(
            k(), n_inducing=8, random_state=0, optimize_inducing=False), (X, y_reg), {}),
        "gwi": (lambda: get("GWIClassifier")(k(), n_inducing=8, random_state=0,
                                              max_iter=30), (X, three), {}),
        "nested": (lambda: get("NestedEPClassifier")(k(), optimizer=None), (X, three), {}),
    }
    if get("EPGaussianProcessRegressor") is not None and "inference" in \
            get("EPGaussianProcessRegressor")().get_params():
        t = np.sort(rng.uniform(0.0, 20.0, 60))[:, None]
        c = rng.poisson(np.exp(np.sin(t[:, 0]))).astype(float)
        out["markov_poisson"] = (lambda: get("EPGaussianProcessRegressor")(
            likelihood="poisson", inference="markov", optimizer=None), (t, c), {})
    return out


def test_inputs(name):
    """The inputs a case's predictions are taken at (off the training points)."""
    if name.startswith("markov"):
        return np.linspace(-1.0, 22.0, 15)[:, None]
    return np.random.default_rng(7).uniform(-2.5, 2.5, (15, 2))


def predictions(est, Xt):
    """Every prediction the estimator offers at Xt, by method name."""
    out = {}
    for method, kwargs in (("predict", {}), ("predict_proba", {}),
                           ("predict_latent", {"return_std": True})):
        fn = getattr(est, method, None)
        if fn is None:
            continue
        try:
            value = fn(Xt, **kwargs)
        except (TypeError, ValueError, NotImplementedError, AttributeError):
            continue
        for i, v in enumerate(value if isinstance(value, tuple) else (value,)):
            out[f"{method}_{i}"] = np.asarray(v)
    return out


def fitted(name, est, args, kwargs):
    """A case's estimator fitted, and its predictions (warnings silenced)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(*args, **kwargs)
        return est, predictions(est, test_inputs(name))


def make(outdir):
    import fastep
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    for name, (factory, args, kwargs) in cases().items():
        try:
            est = factory()
        except TypeError:                       # this version lacks the estimator
            continue
        est, pred = fitted(name, est, args, kwargs)
        fastep.save_model(est, outdir / f"{name}.npz")
        np.savez(outdir / f"{name}.expected.npz", **pred)
        print(name, sorted(pred))


def refit(outdir):
    """Fit every case again with the running fastep and print whether its predictions
    equal, to the bit, those recorded in ``outdir`` (a behaviour-preserving change:
    ``python tests/helpers/saved_models.py --refit tests/data/saved/0.3-pre62``)."""
    outdir = Path(outdir)
    differ = 0
    for name, (factory, args, kwargs) in cases().items():
        if not (outdir / f"{name}.expected.npz").exists():
            continue
        _, got = fitted(name, factory(), args, kwargs)
        expected = np.load(outdir / f"{name}.expected.npz")
        same = sorted(got) == sorted(expected.files) and all(
            np.array_equal(got[k], expected[k]) for k in expected.files)
        differ += not same
        gap = "" if same or sorted(got) != sorted(expected.files) else "  (largest relative " \
            f"difference {max(_relative_gap(got[k], expected[k]) for k in expected.files):.1e})"
        print(f"{name:22s} {'identical' if same else 'DIFFERENT'}{gap}")
    print("every case identical" if not differ else f"{differ} cases differ")
    return differ


if __name__ == "__main__":
    if sys.argv[1] == "--refit":
        sys.exit(1 if refit(sys.argv[2]) else 0)
    make(sys.argv[1])
