"""scikit-learn integration without making scikit-learn a hard dependency.

With scikit-learn installed (the ``test`` extra), estimators inherit its base
classes and use its input validation, so they pass ``check_estimator``.
Without it, small stand-ins provide ``get_params``/``set_params``/``score``
and the same validation rules in plain NumPy.
"""
from __future__ import annotations

import inspect

import numpy as np

try:  # pragma: no cover - exercised in both configurations by CI and the quick start
    from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
    from sklearn.exceptions import NotFittedError
    from sklearn.utils.multiclass import check_classification_targets
    from sklearn.utils.validation import check_is_fitted, validate_data
    HAVE_SKLEARN = True
except ImportError:  # pragma: no cover
    HAVE_SKLEARN = False

    class NotFittedError(ValueError, AttributeError):
        """Raised when predict is called before fit."""

    class BaseEstimator:
        @classmethod
        def _get_param_names(cls):
            sig = inspect.signature(cls.__init__)
            return sorted(p for p in sig.parameters if p != "self")

        def get_params(self, deep=True):
            return {k: getattr(self, k) for k in self._get_param_names()}

        def set_params(self, **params):
            for k, v in params.items():
                if k not in self._get_param_names():
                    raise ValueError(f"Invalid parameter {k!r} for {type(self).__name__}.")
                setattr(self, k, v)
            return self

        def __repr__(self):
            args = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items())
            return f"{type(self).__name__}({args})"

    class ClassifierMixin:
        _estimator_type = "classifier"

        def score(self, X, y, sample_weight=None):
            y = np.asarray(y)
            hit = (self.predict(X) == y).astype(float)
            return float(np.average(hit, weights=sample_weight))

    class RegressorMixin:
        _estimator_type = "regressor"

        def score(self, X, y, sample_weight=None):
            y = np.asarray(y, dtype=float)
            r = y - self.predict(X)
            return 1.0 - float(np.sum(r * r) / np.sum((y - y.mean()) ** 2))

    def check_is_fitted(estimator, attributes=None):
        if not any(k.endswith("_") and not k.startswith("__") for k in vars(estimator)):
            raise NotFittedError(f"This {type(estimator).__name__} instance is not fitted yet. "
                                 "Call 'fit' with appropriate arguments before using it.")

    def check_classification_targets(y):
        if y.dtype.kind == "f" and np.any(y != np.round(y)):
            raise ValueError("Unknown label type: continuous. Classification needs discrete "
                             "labels.")

    def validate_data(estimator, X, y=None, reset=True, **kw):
        X = _check_array(X, "X")
        if reset:
            estimator.n_features_in_ = X.shape[1]
        elif X.shape[1] != estimator.n_features_in_:
            raise ValueError(f"X has {X.shape[1]} features, but {type(estimator).__name__} "
                             f"is expecting {estimator.n_features_in_} features as input.")
        if y is None:
            return X
        y = np.asarray(y)
        if y.ndim != 1 or y.shape[0] != X.shape[0]:
            raise ValueError(f"y must be 1-D with one entry per row of X ({X.shape[0]}); got "
                             f"shape {y.shape}.")
        return X, y

    def _check_array(X, name):
        X = np.asarray(X)
        if X.dtype.kind == "c":
            raise ValueError(f"Complex data not supported in {name}.")
        X = X.astype(float)
        if X.ndim != 2:
            raise ValueError(f"Expected 2D array for {name}, got {X.ndim}D array instead; "
                             "reshape your data with X.reshape(-1, 1) for a single feature.")
        if X.shape[0] == 0:
            raise ValueError(f"{name} has 0 samples; at least one is required.")
        if not np.all(np.isfinite(X)):
            raise ValueError(f"Input {name} contains NaN or infinity.")
        return X


__all__ = ["BaseEstimator", "ClassifierMixin", "RegressorMixin", "NotFittedError", "check_is_fitted",
           "check_classification_targets", "validate_data", "HAVE_SKLEARN"]
