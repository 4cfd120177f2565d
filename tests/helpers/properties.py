"""What every public entry point promises under generated inputs (hypothesis).

The promise: a call either raises an exception of a documented type (``ValueError``,
``TypeError``, fastep's own :class:`fastep.DenseMemoryError`, or scikit-learn's
validation errors, all raised by the checks at fastep's boundary, not from deep inside
NumPy or Numba), or returns outputs that are finite, with probabilities in [0, 1]
summing to 1, variances and standard deviations non-negative and log evidences finite,
and without a NumPy ``RuntimeWarning`` (the usual herald of a NaN).

Each entry point is a function ``prop(data)`` that draws its inputs from ``data``
(``hypothesis.strategies.data()``): extreme scales (inputs 1e-8 to 1e8, lengthscales
1e-4 to 1e4, variances 1e-6 to 1e6, cavities with |mu| up to 1e3 and variances 1e-10
to 1e8), duplicated rows, constant columns, one-example classes, every dtype a user
passes (float32, int, bool, object, text labels), read-only and non-contiguous arrays,
plain lists, and pandas objects when pandas is installed.  A broken promise raises
:class:`Violation`.  ``tests/test_fuzz.py`` runs every entry point with a short profile
in CI; ``scripts/fuzz.py --examples N`` with a long one.
"""
from __future__ import annotations

import contextlib
import io
import json
import math
import os
import re
import tempfile
import warnings

import numpy as np
from hypothesis import strategies as st
from sklearn.base import BaseEstimator

import fastep
from fastep import kernels as fk
from fastep import likelihoods as fl

try:                                               # pandas objects, when pandas is there
    import pandas as pd
except ImportError:                                # pragma: no cover - optional
    pd = None

_FASTEP_DIR = os.path.dirname(fastep.__file__) + os.sep
_VALIDATION = tuple(os.path.join("sklearn", "utils", f) for f in
                    ("validation.py", "_param_validation.py", "multiclass.py"))


#: Words of fastep's internals that must not reach the user of an estimator (its
#: methods name the user's arguments: X, y, kernel, ...): the cavity arguments of the
#: tilted functions, the low-level ``extra``/``params`` arrays, LAPACK and NumPy internals.
INTERNAL_VOICE = re.compile(r"\bvar_cav\b|\bmu_cav\b|shaped like mean|\bextra must\b|"
                            r"\bparams must\b|dpotrf|illegal argument|out of bounds|"
                            r"boolean index|not supported between instances")


class Violation(AssertionError):
    """A broken promise: ``kind`` is one of crash-like exception, non-finite output,
    runtime warning, probability, variance."""

    def __init__(self, kind, detail):
        super().__init__(f"{kind}: {detail}")
        self.kind = kind


# ----------------------------------------------------------------------------------------
# the promise
# ----------------------------------------------------------------------------------------
def _raised_at(exc):
    tb = exc.__traceback__
    while tb.tb_next is not None:
        tb = tb.tb_next
    return tb.tb_frame.f_code.co_filename


#: Outcome of every :func:`call` since the last clear: ``("answer", name)`` or
#: ``("refusal", "ExceptionType: message")``; scripts/fuzz.py counts them.
OUTCOMES = []
#: The latest call, ``[fn, args, kwargs]``: scripts/fuzz.py saves it with a broken promise.
LAST_CALL = []


#: The messages of the warnings of the last call that answered.
LAST_WARNINGS = []


def call(fn, *args, **kwargs):
    """``fn(*args, **kwargs)``, or None when it raised a documented exception from
    fastep's (or scikit-learn's validation's) own checks; anything else is a
    :class:`Violation`."""
    name = getattr(fn, "__qualname__", repr(fn))
    LAST_CALL[:] = [fn, args, kwargs]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            out = fn(*args, **kwargs)
        except (ValueError, TypeError, fastep.DenseMemoryError) as exc:
            where = _raised_at(exc)
            if not (where.startswith(_FASTEP_DIR) or where.endswith(_VALIDATION)):
                raise Violation("foreign exception", f"{type(exc).__name__} raised in {where}: "
                                f"{str(exc)[:300]}") from exc
            if not str(exc).strip():
                raise Violation("empty message", type(exc).__name__) from exc
            if isinstance(getattr(fn, "__self__", None), BaseEstimator) and \
                    INTERNAL_VOICE.search(str(exc)):
                raise Violation("internal message", f"{name}: {type(exc).__name__}: "
                                f"{str(exc)[:300]}") from exc
            OUTCOMES.append(("refusal", f"{name}: {type(exc).__name__}: {str(exc)[:80]}"))
            return None
        except Exception as exc:
            raise Violation("undocumented exception",
                            f"{type(exc).__name__}: {str(exc)[:300]}") from exc
    for w in caught:
        if issubclass(w.category, RuntimeWarning):
            raise Violation("runtime warning", f"{w.message} ({w.filename}:{w.lineno})")
    LAST_WARNINGS[:] = [str(w.message) for w in caught]
    OUTCOMES.append(("answer", name))
    return out


def finite(value, what):
    """Every number in ``value`` (arrays, tuples, scalars) is finite; None (a refusal
    from :func:`call`) has nothing to check."""
    if value is None:
        return
    if isinstance(value, (tuple, list)):
        for i, v in enumerate(value):
            finite(v, f"{what}[{i}]")
        return
    arr = np.asarray(value)
    if arr.dtype.kind in "fc" and not np.all(np.isfinite(arr)):
        raise Violation("non-finite output", f"{what}: {arr.ravel()[:6]}")


def probabilities(p, what, rows_sum_to_one=True):
    p = np.asarray(p, dtype=float)
    finite(p, what)
    if np.any(p < 0) or np.any(p > 1):
        raise Violation("probability", f"{what} outside [0, 1]: {p.min()}, {p.max()}")
    if rows_sum_to_one and p.ndim == 2 and not np.allclose(p.sum(1), 1.0, atol=1e-9):
        raise Violation("probability", f"{what} rows sum to {p.sum(1)[:4]}")


def non_negative(v, what):
    finite(v, what)
    if np.any(np.asarray(v) < 0):
        raise Violation("variance", f"{what} negative: {np.min(v)}")


# ----------------------------------------------------------------------------------------
# inputs
# ----------------------------------------------------------------------------------------
def log_uniform(lo, hi):
    return st.floats(math.log10(lo), math.log10(hi)).map(lambda e: 10.0 ** e)


FORMS = ("plain", "plain", "float32", "int", "object", "list", "readonly", "strided",
         "fortran", "pandas")


def present(data, a, forms=FORMS):
    """``a`` as a user may pass it: another dtype, layout, a list or a pandas object."""
    a = np.asarray(a)
    form = data.draw(st.sampled_from(forms), label="form")
    if form == "float32" and a.dtype.kind == "f":
        return a.astype(np.float32)
    if form == "int" and a.dtype.kind == "f" and np.all(np.abs(a) < 1e15):
        return np.round(a).astype(np.int64)
    if form == "object":
        return a.astype(object)
    if form == "list":
        return a.tolist()
    if form == "readonly":
        b = a.copy()
        b.flags.writeable = False
        return b
    if form == "strided" and a.ndim >= 1:
        b = np.repeat(a, 2, axis=0)[::2]
        return b
    if form == "fortran" and a.ndim == 2:
        return np.asfortranarray(a)
    if form == "pandas" and pd is not None:
        return pd.DataFrame(a) if a.ndim == 2 else pd.Series(a)
    return a


def inputs(data, n, d, name="X"):
    """An (n, d) input matrix at a random scale, with duplicated rows, constant columns,
    occasional non-finite entries (which must be refused) and odd forms."""
    scale = data.draw(log_uniform(1e-8, 1e8), label=f"{name} scale")
    X = np.asarray(data.draw(st.lists(st.floats(-1, 1), min_size=n * d, max_size=n * d),
                             label=name)).reshape(n, d) * scale
    if n > 1 and data.draw(st.booleans(), label=f"{name} duplicate rows"):
        X[n // 2:] = X[:n - n // 2]
    if d > 1 and data.draw(st.booleans(), label=f"{name} constant column"):
        X[:, 0] = scale
    if data.draw(st.integers(0, 7), label=f"{name} row at the origin") == 0:
        X[0] = 0.0                               # a Linear kernel's prior variance is 0 there
    chance = np.random.default_rng(data.draw(st.integers(0, 2 ** 32 - 1))).random()
    if chance < 0.05:                                   # one example in twenty: poisoned
        X.flat[data.draw(st.integers(0, n * d - 1))] = data.draw(
            st.sampled_from([np.nan, np.inf, -np.inf]), label=f"{name} poison")
    return X


def labels(data, n, n_classes):
    """n labels of n_classes classes (some may get one example) as numbers, bools or
    text."""
    rng = np.random.default_rng(data.draw(st.integers(0, 2 ** 32 - 1), label="labels"))
    codes = rng.integers(0, n_classes, n)
    if n >= n_classes and data.draw(st.booleans(), label="every class present"):
        codes[:n_classes] = np.arange(n_classes)      # the last ones may have one example
    kind = data.draw(st.sampled_from(["int", "float", "text", "bool", "object", "mixed"]))
    if kind == "mixed":                          # text and numbers: they do not sort
        return np.array([("c" + str(c)) if c % 2 else int(c) for c in codes], dtype=object)
    if kind == "float":
        return codes.astype(float) * data.draw(st.sampled_from([1.0, 2.0, 2.5])) - 1.0
    if kind == "text":
        return np.array(["class-" + "abcdefg"[c] for c in codes])
    if kind == "bool" and n_classes == 2:
        return codes.astype(bool)
    if kind == "object":
        return np.array(["c" + str(c) for c in codes], dtype=object)
    return codes


def kernel(data, d):
    """A fastep kernel with parameters at extreme scales (possibly ARD, a sum or a
    product)."""
    def one():
        cls = data.draw(st.sampled_from([fk.RBF, fk.Matern12, fk.Matern32, fk.Matern52,
                                         fk.RationalQuadratic, fk.Periodic, "linear", "white",
                                         "constant"]), label="kernel")
        var = data.draw(log_uniform(1e-6, 1e6), label="variance")
        if cls == "linear":
            return fk.Linear(var, variance_bounds=(1e-7, 1e7))
        if cls == "white":
            return fk.WhiteKernel(var, noise_level_bounds=(1e-7, 1e7))
        if cls == "constant":
            return fk.ConstantKernel(var, constant_bounds=(1e-7, 1e7))
        ard = data.draw(st.booleans(), label="ARD") and d > 1
        ls = [data.draw(log_uniform(1e-4, 1e4), label="lengthscale")
              for _ in range(d if ard else 1)]
        shape = {}                     # the rational quadratic's alpha, the period
        if cls is fk.RationalQuadratic:
            shape = {"alpha": data.draw(log_uniform(1e-2, 1e3), label="alpha")}
        elif cls is fk.Periodic:
            shape = {"period": data.draw(log_uniform(1e-3, 1e3), label="period")}
        return cls(var, ls if ard else ls[0], variance_bounds=(1e-7, 1e7),
                   lengthscale_bounds=(1e-5, 1e5), **shape)
    shape = data.draw(st.sampled_from(["ok"] * 8 + ["vector variance", "ARD width"]),
                      label="kernel parameter shapes")
    if shape == "vector variance":               # must be refused by the constructor
        cls = data.draw(st.sampled_from([fk.RBF, fk.Matern32, fk.Linear, fk.ConstantKernel,
                                         fk.WhiteKernel]))
        if call(cls, [1.0, data.draw(log_uniform(1e-3, 1e3))]) is not None:
            raise Violation("message", f"{cls.__name__} accepted a vector variance")
    if shape == "ARD width":                     # fit and predict must refuse it
        return fk.RBF(1.0, np.ones(d + data.draw(st.sampled_from([1, 2]))))
    k = one()
    combine = data.draw(st.sampled_from([None, None, "sum", "product"]), label="combine")
    if combine == "sum":
        k = k + one()
    elif combine == "product":
        k = k * one()
    return k


def _custom_log_lik(y, extra, f, params):          # a stable logistic, written by hand
    z = y * f
    return -math.log1p(math.exp(-z)) if z > 0 else z - math.log1p(math.exp(z))


def _custom_mixture(y, extra, f, params):          # probit with label noise: not concave
    return math.log(0.1 + 0.8 * 0.5 * math.erfc(-y * f / math.sqrt(2.0)))


_CUSTOM = {}


def custom_likelihood(concave):
    if concave not in _CUSTOM:                      # compiled once per process
        _CUSTOM[concave] = fl.CustomLikelihood(
            _custom_log_lik if concave else _custom_mixture, binary=True,
            log_concave=concave)
    return _CUSTOM[concave]


def exposures(data, n):
    """None, a scalar or n positive exposures from 1e-6 to 1e6 (a count model's)."""
    form = data.draw(st.sampled_from([None, "scalar", "array"]), label="exposure")
    if form is None:
        return None
    if form == "scalar":
        return data.draw(log_uniform(1e-6, 1e6))
    return np.asarray(data.draw(st.lists(log_uniform(1e-6, 1e6), min_size=n, max_size=n)))


#: The count likelihoods (their targets are counts, their data an exposure).
COUNT_KINDS = ("poisson", "negative_binomial", "zero_inflated_poisson",
               "zero_inflated_negative_binomial")


def zero_probability(data):
    """A zero-inflated likelihood's pi, from 1e-6 to 1 - 1e-6."""
    return data.draw(st.sampled_from([1e-6, 0.5, 1 - 1e-6]) | st.floats(1e-6, 1 - 1e-6),
                     label="zero_prob")


def likelihood_and_targets(data, n):
    """(likelihood, y, extra) for n sites, y and extra valid for that likelihood."""
    kind = data.draw(st.sampled_from(["probit", "logistic", "gaussian", "tobit", "annotators",
                                      "custom", "custom-mixture", "poisson",
                                      "negative_binomial", "zero_inflated_poisson",
                                      "zero_inflated_negative_binomial", "student_t",
                                      "weibull", "log_logistic", "log_normal",
                                      "binomial"]),
                     label="likelihood")
    rng = np.random.default_rng(data.draw(st.integers(0, 2 ** 32 - 1)))
    sign = np.where(rng.random(n) < 0.5, 1.0, -1.0)
    if kind in ("probit", "logistic"):
        return (fl.Probit() if kind == "probit" else fl.Logistic()), sign, None
    if kind.startswith("custom"):
        return custom_likelihood(kind == "custom"), sign, None
    scale = data.draw(log_uniform(1e-3, 1e3), label="target scale")
    noise = data.draw(log_uniform(1e-6, 1e6), label="noise variance")
    if kind == "gaussian":
        return fl.Gaussian(noise), rng.normal(size=n) * scale, None
    if kind == "student_t":
        df = data.draw(log_uniform(1.0, 1e3), label="df")
        return fl.StudentT(df, math.sqrt(noise)), rng.standard_t(2, size=n) * scale, None
    if kind in ("weibull", "log_logistic", "log_normal"):
        times = np.abs(rng.standard_t(2, size=n)) * scale + 1e-300
        event = data.draw(st.sampled_from([None, "array"]), label="event")
        if event is not None:
            event = (rng.random(n) < 0.7) * 1.0
        shape = data.draw(log_uniform(1e-2, 1e2), label="shape")
        cls = {"weibull": fl.Weibull, "log_logistic": fl.LogLogistic,
               "log_normal": fl.LogNormal}[kind]
        return cls(shape, event=event), times, None
    if kind == "binomial":
        trials = np.minimum(np.ceil(rng.uniform(0, 1, n) * scale * 10.0), 1e6)
        trials = np.maximum(trials, 1.0)
        y = rng.binomial(trials.astype(np.int64), rng.uniform(0, 1, n)).astype(float)
        return fl.Binomial(trials=trials), y, None
    if kind in COUNT_KINDS:
        exposure = exposures(data, n)
        rate = np.minimum(scale * (1.0 if exposure is None else exposure), 1e9)
        y = rng.poisson(np.broadcast_to(rate, (n,))).astype(float)
        if kind == "poisson":
            return fl.Poisson(exposure=exposure), y, None
        if kind == "zero_inflated_poisson":
            return fl.ZeroInflatedPoisson(zero_probability(data), exposure=exposure), \
                y * (rng.random(n) > 0.3), None
        r = data.draw(log_uniform(1e-2, 1e4))
        if kind == "zero_inflated_negative_binomial":
            return fl.ZeroInflatedNegativeBinomial(r, zero_probability(data),
                                                   exposure=exposure), y, None
        return fl.NegativeBinomial(r, exposure=exposure), y, None
    if kind == "tobit":
        lower, upper = -scale, scale
        y = np.clip(rng.normal(size=n) * 2 * scale, lower, upper)
        y[rng.random(n) < 0.2] = np.nan                     # interval-censored
        return fl.Tobit(noise, lower=lower, upper=upper), y, None
    R = data.draw(st.integers(1, 4), label="annotators")
    lab = (rng.random((n, R)) < 0.5).astype(float)
    lab[rng.random((n, R)) < 0.3] = np.nan
    sens = rng.uniform(0.05, 0.99, R)
    spec = rng.uniform(0.05, 0.99, R)
    return fl.MultiAnnotator(lab, sens, spec), np.ones(n), None


# ----------------------------------------------------------------------------------------
# the entry points
# ----------------------------------------------------------------------------------------
def prop_tilted(data):
    """``Likelihood.tilted`` over the whole valid domain (and some invalid inputs)."""
    n = data.draw(st.integers(1, 12), label="n")
    lik, y, extra = likelihood_and_targets(data, n)
    mu = np.asarray(data.draw(st.lists(st.floats(-1e3, 1e3), min_size=n, max_size=n)))
    var = np.asarray(data.draw(st.lists(log_uniform(1e-10, 1e8), min_size=n, max_size=n)))
    alpha = data.draw(st.sampled_from([1.0, 1.0, 0.5, 1e-3]) | st.floats(1e-4, 1.0),
                      label="alpha")
    if np.random.default_rng(data.draw(st.integers(0, 2 ** 32 - 1))).random() < 0.05:
        var = var.copy()                                  # one in twenty: an invalid cavity
        var[0] = data.draw(st.sampled_from([0.0, -1.0, np.nan, np.inf]))
    exact = ("plain", "float32", "object", "list", "readonly", "strided", "pandas")
    mu_seen, var_seen = present(data, mu, exact), present(data, var, exact)
    out = call(lik.tilted, present(data, y), mu_seen, var_seen, alpha, extra=extra)
    if out is None:
        return
    finite(out, "tilted")
    if lik.log_concave:
        d2 = out[2]
        v = np.asarray(var_seen, float)
        bad = (d2 > 0) | (d2 < -(1 + 1e-9) / v)
        if np.any(bad):
            raise Violation("range", f"{type(lik).__name__}: log-concave d2 outside "
                            f"[-1/var, 0] at alpha={alpha}: d2={d2[bad]}, "
                            f"mu={np.asarray(mu_seen, float)[bad]}, var={v[bad]}, "
                            f"y={np.asarray(y)[bad]}")


#: ML-II bounds as users write them: valid pairs, "fixed", and the mistakes (a misspelt
#: string, a zero or negative bound, swapped or infinite ends, None).
BOUNDS = [(1e-3, 1e3), (1e-6, 1e6), "fixed", "free", "fixd", (0.0, 1.0), (-1.0, 1.0),
          (1.0, 1e-3), (1.0, np.inf), None, (1.0,), (np.nan, 1.0)]
#: Bounds that must be refused (the others above are valid).
BAD_BOUNDS = ("free", "fixd", (0.0, 1.0), (-1.0, 1.0), (1.0, 1e-3), (1.0, np.inf), None,
              (1.0,), (np.nan, 1.0))


def prop_likelihood_api(data):
    """The likelihoods' other public methods: construction with any ``*_bounds`` (and a
    kernel's), ``predict_mean`` (a refusal for a classification likelihood),
    ``log_predictive_density`` with explicit ``extra``, the censored predictive with
    absent (None) or infinite limits, and multinomial-probit labels out of range."""
    bounds = data.draw(st.sampled_from(BOUNDS), label="bounds")
    for make in (lambda b: fl.Gaussian(0.5, noise_variance_bounds=b),
                 lambda b: fl.StudentT(4.0, 1.0, df_bounds=b),
                 lambda b: fl.NegativeBinomial(2.0, dispersion_bounds=b),
                 lambda b: fastep.kernels.RBF(1.0, 1.0, lengthscale_bounds=b)):
        made = call(make, bounds)
        if made is not None:
            finite((made.theta, made.bounds), "theta and bounds")
            if any(bounds is b or bounds == b for b in BAD_BOUNDS if type(b) is type(bounds)):
                raise Violation("bounds", f"{bounds!r} was accepted")
    n = data.draw(st.integers(1, 8), label="n")
    lik, y, extra = likelihood_and_targets(data, n)
    mean = np.asarray(data.draw(st.lists(st.floats(-30, 30), min_size=n, max_size=n)))
    var = np.asarray(data.draw(st.lists(log_uniform(1e-8, 1e2), min_size=n, max_size=n)))
    out = call(lik.log_predictive_density, y, mean, var, extra=lik.site_extra(n))
    if out is not None:
        finite(out, "log_predictive_density")
    if hasattr(lik, "predict_y") and not getattr(lik, "binary", False):
        out = call(lik.predict_mean, mean, var)
        if out is not None:
            finite(out, "predict_mean")
    elif call(fl.Likelihood.predict_mean, lik, mean, var) is not None:
        raise Violation("answer", f"{type(lik).__name__}.predict_mean answered")
    limits = [None, -np.inf, np.inf, -1.0, 1.0, np.linspace(-2.0, 0.0, n)]
    lower = data.draw(st.sampled_from(limits[:2] + limits[3:]), label="lower")
    upper = data.draw(st.sampled_from(limits[:1] + limits[2:4]), label="upper")
    pred = call(fl.tobit.censored_predictive, mean, var, 0.5, lower=lower, upper=upper)
    if pred is not None:
        finite(pred["mean"], "censored mean")
        probabilities(np.column_stack([pred["p_lower"], pred["p_upper"]]), "censored",
                      rows_sum_to_one=False)
    C = data.draw(st.integers(2, 4), label="classes")
    labels = np.asarray(data.draw(st.lists(st.integers(-1, C), min_size=n, max_size=n)))
    out = call(fl.MultinomialProbit(C).log_prob, labels, np.zeros((n, C)))
    if out is not None:
        finite(out, "log_prob")
        if labels.min() < 0 or labels.max() >= C:
            raise Violation("answer", f"log_prob answered for labels {labels}")


def prop_robustmax(data):
    """``RobustMax`` probabilities and expected log-likelihood."""
    n = data.draw(st.integers(1, 10))
    J = data.draw(st.integers(2, 5))
    lik = fl.RobustMax(J, epsilon=data.draw(st.floats(1e-6, (J - 1) / J * 0.99)))
    mean = np.asarray(data.draw(st.lists(st.floats(-1e3, 1e3), min_size=n * J,
                                         max_size=n * J))).reshape(n, J)
    var = np.asarray(data.draw(st.lists(log_uniform(1e-10, 1e8), min_size=n * J,
                                        max_size=n * J))).reshape(n, J)
    p = call(lik.predict_proba, present(data, mean), present(data, var))
    if p is not None:
        probabilities(p, "RobustMax.predict_proba")
    y = np.asarray(data.draw(st.lists(st.integers(-1, J), min_size=n, max_size=n)))
    finite(call(lik.expected_log_lik, mean, var, y, return_grad=True), "expected_log_lik")


def prop_kernels(data):
    """Gram matrices, diagonals and the three gradient contractions."""
    n = data.draw(st.integers(1, 12), label="n")
    d = data.draw(st.integers(1, 3), label="d")
    k = kernel(data, d)
    X = inputs(data, n, d)
    Y = inputs(data, data.draw(st.integers(1, 6)), d, "Y") if data.draw(st.booleans()) \
        else None
    if Y is not None and data.draw(st.integers(0, 8)) == 0:
        Y = Y[:, :1] if d > 1 else np.column_stack([Y, Y])       # other feature count
    X = present(data, X)
    K = call(k, X, Y)
    if K is not None:
        X = np.asarray(X, dtype=float)            # what the kernel saw (float32 rounded)
        finite(K, "K")
        if Y is None:
            if not np.allclose(K, K.T, rtol=1e-12, atol=0):
                raise Violation("symmetry", "K(X, X) is not symmetric")
            diag = call(k.diag, X)
            if diag is not None and not np.allclose(diag, np.diagonal(K), rtol=1e-12):
                raise Violation("diag", f"{diag[:3]} vs {np.diagonal(K)[:3]}")
        G = np.random.default_rng(n).normal(size=K.shape)
        for fn in (k.gradient_contract, k.input_gradient_contract):
            finite(call(fn, X, G, Y), fn.__name__)
        finite(call(k.diag_gradient_contract, X, G[:, 0] if Y is None else np.ones(n)),
               "diag_gradient_contract")


def _ep_inputs(data):
    n = data.draw(st.integers(1, 20), label="n")
    d = data.draw(st.integers(1, 2))
    k = kernel(data, d)
    X = inputs(data, n, d)
    lik, y, extra = likelihood_and_targets(data, n)
    return n, k, X, lik, y, extra


def _check_ep_result(res, what):
    finite([res.mean, res.site_tau, res.site_nu, res.log_marginal_likelihood,
            res.cavity_mean, res.cavity_var], what)
    non_negative(res.var, f"{what}.var")


def prop_ep(data):
    """``fastep.ep`` (both methods, every likelihood) and ``ep_gradient``."""
    n, k, X, lik, y, extra = _ep_inputs(data)
    K = call(k, X)
    if K is None:
        return
    if data.draw(st.booleans(), label="jitter"):
        K = K + 1e-6 * np.trace(K) / n * np.eye(n)
    method = data.draw(st.sampled_from(["parallel", "sequential"]))
    damping = data.draw(st.sampled_from([None, 0.5, 1.0]) | st.floats(0.01, 1.0))
    max_iter = data.draw(st.integers(1, 60))
    with_y = present(data, y) if lik.n_extra == 0 or data.draw(st.booleans()) else y
    if data.draw(st.integers(0, 10)) == 0:
        with_y = np.asarray(y)[:, None]
    res = call(fastep.ep, K, with_y, lik, method=method, damping=damping, max_iter=max_iter,
               extra=extra)
    if res is None:
        return
    _check_ep_result(res, "ep")
    from fastep.inference.ep import ep_gradient
    finite(call(ep_gradient, res, k, X, y, lik), "ep_gradient")


def prop_sparse_ep(data):
    """``fastep.sparse_ep`` and ``sparse_ep_gradient``."""
    n, k, X, lik, y, extra = _ep_inputs(data)
    m = data.draw(st.integers(1, max(1, n)), label="m")
    Z = X[np.linspace(0, n - 1, m).astype(int)] if data.draw(st.booleans()) else \
        inputs(data, m, X.shape[1], "Z")
    alpha = data.draw(st.sampled_from([1.0, 0.5]) | st.floats(0.01, 1.0))
    damping = data.draw(st.sampled_from([None, 0.5]))
    res = call(fastep.sparse_ep, k, present(data, Z), present(data, X), y, lik, alpha=alpha,
               damping=damping, max_iter=data.draw(st.integers(1, 60)),
               chunk_size=data.draw(st.sampled_from([None, 1, 3, 7])))
    if res is None:
        return
    _check_ep_result(res, "sparse_ep")
    from fastep.inference.sparse_ep import sparse_ep_gradient
    finite(call(sparse_ep_gradient, res, k, X, y, lik), "sparse_ep_gradient")
    latent = call(res.predict_latent, k, X)
    if latent is not None:
        finite(latent[0], "predict_latent mean")
        non_negative(latent[1], "predict_latent var")


def prop_markov_ep(data):
    """``fastep.markov_ep`` (every likelihood; any kernel, those without a state-space
    form refused), its gradient and its predictions at new times: times at any scale,
    unsorted, repeated or poisoned, series ids or ids of the wrong length."""
    from fastep.inference.markov_ep import markov_ep_gradient, markov_predict
    n = data.draw(st.integers(1, 20), label="n")
    k = kernel(data, 1)
    t = inputs(data, n, 1, "t")[:, 0]
    lik, y, extra = likelihood_and_targets(data, n)
    pick = data.draw(st.sampled_from(["none", "none", "ids", "wrong length"]),
                     label="series")
    series = {"none": None, "ids": np.arange(n) % 3,
              "wrong length": np.zeros(n + 1)}[pick]
    order = data.draw(st.sampled_from([8, 1, 3]), label="periodic_order")
    res = call(fastep.markov_ep, present(data, t, ("plain", "list", "readonly", "strided",
                                                   "float32")),
               y, k, lik, series=series, extra=extra, periodic_order=order,
               damping=data.draw(st.sampled_from([None, 0.5, 1.0])),
               max_iter=data.draw(st.integers(1, 60)))
    if res is None:
        return
    _check_ep_result(res, "markov_ep")
    finite(call(markov_ep_gradient, res, t, y, k, lik, series=series, extra=extra),
           "markov_ep_gradient")
    t_new = np.concatenate([t[:2] + 0.5 * np.abs(t[:2]), [np.max(t) + 1.0]])
    out = call(markov_predict, res, t, t_new, k, series=series,
               series_new=None if series is None else np.array([0, 1, 7])[:t_new.size])
    if out is not None:
        finite(out[0], "markov_predict mean")
        non_negative(out[1], "markov_predict var")


def _sparse_options(data, n):
    if data.draw(st.booleans(), label="sparse"):
        return {"n_inducing": data.draw(st.integers(1, max(1, n))), "random_state": 0,
                "power": data.draw(st.sampled_from([1.0, 0.5]))}
    return {}


def _optimizer(data, n):
    # ML-II on small problems only (it dominates the time of an example)
    return "L-BFGS-B" if n <= 10 and data.draw(st.integers(0, 3)) == 0 else None


def _predict_checks(est, X, classifier, with_score=True):
    pred = call(est.predict, X)
    if pred is not None and np.asarray(pred).dtype.kind in "fc":
        finite(pred, "predict")
    if classifier:
        p = call(est.predict_proba, X)
        if p is not None:
            probabilities(p, "predict_proba")
    lat = call(est.predict_latent, X, return_std=True)
    if lat is not None:
        finite(lat[0], "predict_latent mean")
        non_negative(lat[1], "predict_latent std")
    if with_score and pred is not None and (classifier or len(pred) > 1):   # R^2: 2 samples
        s = call(est.score, X, pred)     # against its own predictions: accuracy 1, R^2 1
        if s is not None:                # (or 0 when the predictions are constant)
            finite(s, "score")
    if hasattr(est, "log_marginal_likelihood"):
        finite(call(est.log_marginal_likelihood), "log_marginal_likelihood")


def prop_classifier(data):
    """``EPGaussianProcessClassifier``: fit, predictions, score, evidence."""
    n = data.draw(st.integers(1, 25), label="n")
    d = data.draw(st.integers(1, 3))
    X = inputs(data, n, d)
    y = labels(data, n, data.draw(st.sampled_from([2, 2, 3, 4, 1])))
    sparse = _sparse_options(data, n)
    est = fastep.EPGaussianProcessClassifier(
        kernel(data, d), likelihood=data.draw(st.sampled_from(["probit", "logistic"])),
        method=data.draw(st.sampled_from(["parallel"] if sparse else
                                         ["parallel", "sequential"])),
        optimizer=_optimizer(data, n), max_iter=data.draw(st.integers(1, 50)), **sparse)
    y = present(data, y)
    if call(est.fit, present(data, X), y) is None:
        return
    Xt = inputs(data, data.draw(st.integers(1, 8)), d, "X_test")
    _predict_checks(est, present(data, Xt), classifier=True)
    s = call(est.score, X, y)
    if s is not None:
        probabilities(s, "score", rows_sum_to_one=False)


def prop_censored(data):
    """``CensoredGPRegressor``: fit with scalar or per-observation limits, every
    prediction method."""
    n = data.draw(st.integers(1, 25), label="n")
    d = data.draw(st.integers(1, 2))
    X = inputs(data, n, d)
    rng = np.random.default_rng(data.draw(st.integers(0, 2 ** 32 - 1)))
    scale = data.draw(log_uniform(1e-3, 1e3))
    lower = data.draw(st.sampled_from([None, -scale, "per-observation"]))
    upper = data.draw(st.sampled_from([None, scale]))
    lo = np.where(rng.random(n) < 0.5, -scale, -np.inf) if lower == "per-observation" \
        else lower
    t = rng.normal(size=n) * 2 * scale
    t = np.maximum(t, -np.inf if lo is None else lo)
    t = np.minimum(t, np.inf if upper is None else upper)
    inference = data.draw(st.sampled_from(["ep", "ep", "laplace"]))
    est = fastep.CensoredGPRegressor(
        kernel(data, d), noise_variance=data.draw(log_uniform(1e-6, 1e6)),
        inference=inference, optimizer=_optimizer(data, n),
        **(_sparse_options(data, n) if inference == "ep" else {}))
    per_obs = isinstance(lo, np.ndarray)
    fit_kw = {"lower": lo, "upper": upper} if per_obs or data.draw(st.booleans()) else {}
    if not fit_kw:
        est.set_params(lower=lo, upper=upper)
    if call(est.fit, present(data, X), present(data, t), **fit_kw) is None:
        return
    m = data.draw(st.integers(1, 8))
    Xt = inputs(data, m, d, "X_test")
    kw = {"lower": np.full(m, -scale), "upper": upper} if per_obs else {}
    _predict_checks(est, Xt, classifier=False)
    for name in ("predict_censored_proba",):
        p = call(getattr(est, name), Xt, **kw)
        if p is not None:
            probabilities(p, name, rows_sum_to_one=False)
            if np.any(np.asarray(p[0]) + np.asarray(p[1]) > 1 + 1e-9):
                raise Violation("probability", f"P(lower) + P(upper) > 1: {p}")
    q = data.draw(st.sampled_from([0.5, 1e-6, 1 - 1e-6, 0.0, 1.0, -0.5, np.nan]))
    finite(call(est.predict_quantile, Xt, q, **kw), "predict_quantile")
    yt = np.clip(rng.normal(size=m) * scale, -scale, scale)
    finite(call(est.log_predictive_density, Xt, yt, **kw), "log_predictive_density")


def prop_regressor(data):
    """``EPGaussianProcessRegressor``: every likelihood (counts with exposures from 1e-6 to
    1e6 and large latent means, Student-t, Gaussian, Tobit), ``normalize_y``, exposure
    given or not at prediction, every prediction method, LOO."""
    n = data.draw(st.integers(1, 20), label="n")
    d = data.draw(st.integers(1, 2))
    X = inputs(data, n, d)
    rng = np.random.default_rng(data.draw(st.integers(0, 2 ** 32 - 1)))
    name = data.draw(st.sampled_from(["student_t", "gaussian", "tobit", "binomial",
                                      *COUNT_KINDS]), label="likelihood")
    scale = data.draw(log_uniform(1e-3, 1e6), label="target scale")
    fit_kw, counts = {}, name in COUNT_KINDS
    if counts:
        exposure = exposures(data, n)
        rate = np.minimum(scale * (1.0 if exposure is None else exposure), 1e12)
        y = rng.poisson(np.broadcast_to(rate, (n,))).astype(float)
        if exposure is not None:
            fit_kw["exposure"] = exposure
    elif name == "binomial":                  # successes out of 1 to 10^6 trials per row
        trials = np.maximum(np.ceil(rng.uniform(0.0, 1.0, n) * min(scale, 1e6)), 1.0)
        if data.draw(st.booleans(), label="trials given"):
            fit_kw["trials"] = trials
        else:
            trials = np.ones(n)
        y = rng.binomial(trials.astype(np.int64), rng.uniform(0.0, 1.0, n)).astype(float)
    else:
        y = rng.standard_t(3, size=n) * scale + data.draw(st.sampled_from([0.0, 152.0, -1e4]))
        if name == "tobit":
            y = np.clip(y, -scale, scale)
    likelihood = fl.Tobit(1.0, lower=-scale, upper=scale) if name == "tobit" else name
    est = fastep.EPGaussianProcessRegressor(
        kernel(data, d), likelihood=likelihood,
        normalize_y=data.draw(st.sampled_from(["auto", True, False])),
        optimizer=_optimizer(data, n), max_iter=data.draw(st.integers(1, 50)),
        **_sparse_options(data, n))
    if call(est.fit, present(data, X), present(data, y), **fit_kw) is None:
        return
    m = data.draw(st.integers(1, 8))
    Xt = inputs(data, m, d, "X_test")
    pick = rng.integers(0, n, m)
    pred_kw = {}
    if "trials" in fit_kw:
        if call(est.predict, Xt) is not None:
            raise Violation("message", "a binomial model fitted with trials= predicted "
                            "without them")
        pred_kw["trials"] = trials[pick]
    if counts and "exposure" in fit_kw and data.draw(st.booleans(), label="exposure again"):
        again = exposures(data, m)
        pred_kw["exposure"] = 1.0 if again is None else again
    elif counts and "exposure" in fit_kw and call(est.predict, Xt) is not None:
        raise Violation("message", "a count model fitted with exposure= predicted without "
                        "one (0.2 assumed 1 without a word)")
    for method in (est.predict, est.predict_latent):
        for return_std in (False, True):
            out = call(method, Xt, return_std=return_std,
                       **(pred_kw if method == est.predict else {}))
            if out is not None:
                if return_std and method == est.predict and np.isinf(out[1]).any():
                    # a Student-t with df <= 2 has no finite variance: inf, said aloud
                    if not any("df" in w and "<= 2" in w for w in LAST_WARNINGS):
                        raise Violation("non-finite output", "predict std inf without a "
                                        "warning naming df")
                    out = (out[0], np.where(np.isinf(out[1]), 0.0, out[1]))
                finite(out, method.__name__)
                if return_std:
                    non_negative(out[1], f"{method.__name__} std")
    yt = y[pick]
    finite(call(est.log_predictive_density, Xt, yt, **pred_kw), "log_predictive_density")
    finite(call(est.loo_log_predictive_density), "loo_log_predictive_density")
    finite(call(est.loo_predict), "loo_predict")
    s = call(est.score, Xt, yt, **pred_kw) if m > 1 else None
    finite(s, "score")
    finite(call(est.log_marginal_likelihood), "log_marginal_likelihood")


def prop_ordinal(data):
    """``OrdinalGPClassifier``: 2 to 5 ordered levels (some with one example), dense and
    sparse, every prediction method."""
    n = data.draw(st.integers(1, 25), label="n")
    d = data.draw(st.integers(1, 2))
    X = inputs(data, n, d)
    y = labels(data, n, data.draw(st.integers(2, 5)))
    est = fastep.OrdinalGPClassifier(
        kernel(data, d), optimizer=_optimizer(data, n),
        max_iter=data.draw(st.integers(1, 50)), **_sparse_options(data, n))
    if call(est.fit, present(data, X), present(data, y)) is None:
        return
    _predict_checks(est, present(data, inputs(data, data.draw(st.integers(1, 8)), d,
                                              "X_test")), classifier=True)
    loo = call(est.loo_log_predictive_density)
    finite(loo, "loo_log_predictive_density")


def prop_annotators(data):
    """``MultiAnnotatorGPClassifier``: label matrices with gaps, one annotator, one class
    per annotator; predictions, LOO reliabilities, queries."""
    n = data.draw(st.integers(1, 20), label="n")
    d = data.draw(st.integers(1, 2))
    X = inputs(data, n, d)
    R = data.draw(st.integers(1, 4), label="R")
    rng = np.random.default_rng(data.draw(st.integers(0, 2 ** 32 - 1)))
    Y = (rng.random((n, R)) < data.draw(st.sampled_from([0.5, 0.3, 0.9, 0.02]))).astype(float)
    Y[rng.random((n, R)) < data.draw(st.sampled_from([0.0, 0.3, 0.8]))] = np.nan
    est = fastep.MultiAnnotatorGPClassifier(
        kernel(data, d), optimizer=_optimizer(data, n), max_em_iter=data.draw(
            st.integers(1, 30)), max_iter=data.draw(st.integers(1, 50)),
        **_sparse_options(data, n))
    if call(est.fit, present(data, X), present(data, Y)) is None:
        return
    finite(est.true_label_proba_, "true_label_proba_")
    _predict_checks(est, inputs(data, data.draw(st.integers(1, 8)), d, "X_test"), True)
    loo = call(est.loo_reliabilities)
    if loo is not None:
        probabilities(np.concatenate(loo), "loo_reliabilities", rows_sum_to_one=False)
    finite(call(est.query, X, n_queries=data.draw(st.integers(0, n + 1))), "query")


def prop_sparse_regression(data):
    """``SparseGPRegressor``: VFE, FITC and Power EP between; evidence at random theta."""
    n = data.draw(st.integers(1, 25), label="n")
    d = data.draw(st.integers(1, 2))
    X = inputs(data, n, d)
    y = np.asarray(data.draw(st.lists(st.floats(-1, 1), min_size=n, max_size=n))) * \
        data.draw(log_uniform(1e-6, 1e6))
    est = fastep.SparseGPRegressor(
        kernel(data, d), power=data.draw(st.sampled_from([0.0, 0.5, 1.0])),
        noise_variance=data.draw(log_uniform(1e-6, 1e6)),
        n_inducing=data.draw(st.integers(1, max(1, n))), random_state=0,
        optimizer=_optimizer(data, n))
    if call(est.fit, present(data, X), present(data, y)) is None:
        return
    _predict_checks(est, inputs(data, data.draw(st.integers(1, 8)), d, "X_test"), False)
    theta = est.kernel_.theta
    size = data.draw(st.sampled_from([theta.size + 1, theta.size + 1, 1]))
    theta = np.asarray(data.draw(st.lists(st.floats(-20, 20), min_size=size, max_size=size)))
    finite(call(est.log_marginal_likelihood, theta, eval_gradient=True),
           "log_marginal_likelihood")


def prop_gwi(data):
    """``GWIClassifier``: small multiclass problems, both solvers."""
    n = data.draw(st.integers(2, 30), label="n")
    d = data.draw(st.integers(1, 2))
    X = inputs(data, n, d)
    y = labels(data, n, data.draw(st.integers(2, 4)))
    est = fastep.GWIClassifier(
        kernel(data, d), n_inducing=data.draw(st.integers(1, n)),
        solver=data.draw(st.sampled_from(["L-BFGS-B", "adam"])),
        max_iter=data.draw(st.integers(1, 30)), n_subsample=data.draw(st.integers(1, 50)),
        linear_mean=data.draw(st.booleans()), random_state=0)
    if call(est.fit, present(data, X), present(data, y)) is None:
        return
    _predict_checks(est, inputs(data, data.draw(st.integers(1, 8)), d, "X_test"), True)


def prop_nested(data):
    """``NestedEPClassifier``: 2 to 4 classes (some with one example), dense or with
    shared inducing inputs (any count, valid or not), ML-II on the smallest, every
    prediction method, the evidence."""
    n = data.draw(st.integers(1, 20), label="n")
    d = data.draw(st.integers(1, 2))
    X = inputs(data, n, d)
    y = labels(data, n, data.draw(st.integers(2, 4)))
    est = fastep.NestedEPClassifier(
        kernel(data, d), optimizer=_optimizer(data, n),
        damping=data.draw(st.sampled_from([None, 1.0, 0.5])),
        max_iter=data.draw(st.integers(1, 50)),
        n_inducing=data.draw(st.one_of(st.none(), st.integers(0, 25))),
        random_state=0)
    if call(est.fit, present(data, X), present(data, y)) is None:
        return
    _predict_checks(est, present(data, inputs(data, data.draw(st.integers(1, 8)), d,
                                              "X_test")), classifier=True)


# --- save / load --------------------------------------------------------------------------
_MODELS = {}


def _saved_models(folder):
    """A few fitted models, saved once per process: (path, estimator, X)."""
    if not _MODELS:
        rng = np.random.default_rng(0)
        X = rng.normal(size=(30, 2))
        y = (X[:, 0] > 0).astype(int)
        Y = np.column_stack([y, 1 - y, y]).astype(float)
        Y[::4, 1] = np.nan
        fits = {
            "dense": fastep.EPGaussianProcessClassifier(optimizer=None).fit(X, y),
            "sparse": fastep.EPGaussianProcessClassifier(n_inducing=6, random_state=0,
                                                         optimizer=None).fit(X, y),
            "censored": fastep.CensoredGPRegressor(noise_variance=0.1, lower=-0.2,
                                                   optimizer=None).fit(
                X, np.maximum(X[:, 1], -0.2)),
            "annotators": fastep.MultiAnnotatorGPClassifier(optimizer=None).fit(X, Y),
            "regression": fastep.SparseGPRegressor(n_inducing=5, random_state=0,
                                                   optimizer=None).fit(X, X[:, 0]),
            "gwi": fastep.GWIClassifier(n_inducing=8, max_iter=5, random_state=0).fit(
                X, np.digitize(X[:, 0], [-0.5, 0.5])),
            "nested": fastep.NestedEPClassifier(optimizer=None).fit(
                X, np.digitize(X[:, 0], [-0.5, 0.5])),
            "nested_sparse": fastep.NestedEPClassifier(optimizer=None, n_inducing=5,
                                                       random_state=0).fit(
                X, np.digitize(X[:, 0], [-0.5, 0.5])),
        }
        for name, est in fits.items():
            path = os.path.join(folder, name + ".npz")
            fastep.save_model(est, path)
            with np.load(path, allow_pickle=False) as f:
                arrays = {k: f[k] for k in f.files}
            _MODELS[name] = (arrays, X)
    return _MODELS


def _mutate_json(data, obj, depth=0):
    """A random edit somewhere in a JSON value."""
    if isinstance(obj, dict) and obj and depth < 6:
        key = data.draw(st.sampled_from(sorted(obj)), label="key")
        if data.draw(st.integers(0, 3)) == 0:
            obj.pop(key)
        else:
            obj[key] = _mutate_json(data, obj[key], depth + 1)
        return obj
    if isinstance(obj, list) and obj and depth < 6:
        i = data.draw(st.integers(0, len(obj) - 1))
        obj[i] = _mutate_json(data, obj[i], depth + 1)
        return obj
    return data.draw(st.sampled_from([None, -1, 0, 1.5, -1e308, "Evil", [], {}, [1, 2],
                                      {"type": "Evil"}, True, "nan", 1e309]), label="value")


def prop_save_load(data):
    """``load_model`` on model files edited at random (header JSON, arrays' values,
    shapes and dtypes, bytes): a ValueError naming the file, or a model whose
    predictions keep every promise."""
    folder = _FOLDER.name
    models = _saved_models(folder)
    name = data.draw(st.sampled_from(sorted(models)), label="model")
    arrays, X = models[name]
    arrays = dict(arrays)
    header = json.loads(str(arrays.pop("header")))
    edit = data.draw(st.sampled_from(["json", "array", "bytes", "none"]), label="edit")
    path = os.path.join(folder, "fuzzed.npz")
    if edit == "json":
        header = _mutate_json(data, header)
    elif edit == "array":
        key = data.draw(st.sampled_from(sorted(arrays)), label="array")
        a = arrays[key]
        how = data.draw(st.sampled_from(["nan", "scale", "shape", "dtype", "empty", "neg"]))
        if how == "nan" and a.dtype.kind == "f" and a.size:
            a = a.copy()
            a.flat[data.draw(st.integers(0, a.size - 1))] = np.nan
        elif how == "scale" and a.dtype.kind == "f":
            a = a * data.draw(st.sampled_from([0.0, -1.0, 1e300, 1e-300]))
        elif how == "shape":
            a = data.draw(st.sampled_from([a.ravel(), a.reshape(a.shape + (1,)),
                                           np.concatenate([a.ravel(), a.ravel()])]))
        elif how == "dtype":
            a = a.astype(data.draw(st.sampled_from([np.int32, np.float32, np.complex128,
                                                    "U3", bool])))
        elif how == "empty":
            a = a.ravel()[:0]
        elif how == "neg" and a.dtype.kind == "f":
            a = -np.abs(a)
        arrays[key] = a
    np.savez(path, header=np.array(json.dumps(header)), **arrays)
    if edit == "bytes":
        raw = bytearray(open(path, "rb").read())
        for _ in range(data.draw(st.integers(1, 4))):
            raw[data.draw(st.integers(0, len(raw) - 1))] ^= 1 << data.draw(st.integers(0, 7))
        if data.draw(st.booleans()):
            raw = raw[:data.draw(st.integers(0, len(raw)))]
        with open(path, "wb") as fh:
            fh.write(bytes(raw))
    try:
        est = fastep.load_model(path)
    except ValueError as exc:
        if path not in str(exc):
            raise Violation("message", f"the error does not name the file: {exc}") from exc
        OUTCOMES.append(("refusal", f"load_model: {str(exc)[len(path):][:80]}"))
        return
    except Exception as exc:
        raise Violation("undocumented exception", f"{type(exc).__name__}: {exc}") from exc
    classifier = hasattr(est, "predict_proba")
    # no score: a file edited to absurd (finite) values predicts absurd numbers, on which
    # scikit-learn's R^2 overflows; the estimators' own properties check score
    _predict_checks(est, X, classifier, with_score=False)


_FOLDER = tempfile.TemporaryDirectory(prefix="fastep-fuzz-")


# --- the command line ---------------------------------------------------------------------
def prop_cli(data):
    """``fastep fit`` / ``fastep predict`` on generated tables: exit status 0 with finite
    probabilities, or 2 with a one-line message; never a traceback."""
    from fastep.cli import main
    folder = _FOLDER.name
    n = data.draw(st.integers(0, 20), label="rows")
    d = data.draw(st.integers(1, 3), label="columns")
    cells = st.one_of(st.floats(-1e6, 1e6).map(lambda v: f"{v:.6g}"),
                      st.sampled_from(["nan", "", "inf", "abc", "1e400", "0", "1"]))
    rows = [[data.draw(cells) if data.draw(st.integers(0, 15)) == 0 else
             f"{v:.6g}" for v in np.random.default_rng(i).normal(size=d)]
            + [str(data.draw(st.integers(0, 2)))] for i in range(n)]
    if n and data.draw(st.integers(0, 8)) == 0:
        rows[0] = rows[0][:-1]                                 # a short row
    text = "\n".join(",".join(r) for r in rows)
    if data.draw(st.booleans()):
        text = ",".join(f"x{j}" for j in range(d)) + ",label\n" + text
    table = os.path.join(folder, "table.csv")
    with open(table, "w") as fh:
        fh.write(text)
    model = os.path.join(folder, "model.out")
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
        rc = call(main, ["fit", table, "-o", model, "--no-optimize", "--max-iter", "20"])
    if rc not in (0, 2) or "Traceback" in stderr.getvalue():
        raise Violation("cli", f"fit: status {rc}: {stderr.getvalue()[-500:]}")
    if rc != 0:
        OUTCOMES[-1] = ("refusal", f"fastep fit: {stderr.getvalue().strip()[-80:]}")
        return
    out = os.path.join(folder, "p.csv")
    with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
        rc = call(main, ["predict", model, table, "-o", out])
    if rc not in (0, 2) or "Traceback" in stderr.getvalue():
        raise Violation("cli", f"predict: status {rc}: {stderr.getvalue()[-500:]}")
    if rc == 0:
        # the probabilities, then the predicted label and the row id
        probabilities(np.loadtxt(out, delimiter=",", ndmin=2, skiprows=1)[:, :-2],
                      "fastep predict")


#: Every entry point, by name (the order of the table ``scripts/fuzz.py`` prints).
ENTRY_POINTS = {
    "Likelihood.tilted": prop_tilted,
    "likelihood methods": prop_likelihood_api,
    "RobustMax": prop_robustmax,
    "kernels": prop_kernels,
    "fastep.ep": prop_ep,
    "fastep.sparse_ep": prop_sparse_ep,
    "fastep.markov_ep": prop_markov_ep,
    "EPGaussianProcessClassifier": prop_classifier,
    "CensoredGPRegressor": prop_censored,
    "EPGaussianProcessRegressor": prop_regressor,
    "OrdinalGPClassifier": prop_ordinal,
    "MultiAnnotatorGPClassifier": prop_annotators,
    "SparseGPRegressor": prop_sparse_regression,
    "GWIClassifier": prop_gwi,
    "NestedEPClassifier": prop_nested,
    "save_model/load_model": prop_save_load,
    "fastep fit/predict": prop_cli,
}
