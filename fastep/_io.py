"""Save and load fitted classifiers without pickle: one .npz with arrays and a JSON header."""
from __future__ import annotations

import json

import numpy as np

from .inference.ep import posterior_from_sites
from .kernels import kernel_from_dict
from .likelihoods import likelihood_from_dict

FORMAT = "fastep-model-1"


def save_model(model, path):
    """Write a fitted :class:`~fastep.EPGaussianProcessClassifier` to ``path`` (.npz).

    Stored: the constructor parameters, kernel and likelihood parameters (JSON),
    the training inputs, targets and EP sites of every binary problem.
    """
    from .models._sklearn_compat import check_is_fitted
    check_is_fitted(model)
    header = {"format": FORMAT, "class": type(model).__name__,
              "params": {k: v for k, v in model.get_params().items()
                         if k not in ("kernel", "likelihood", "optimizer")
                         and (v is None or isinstance(v, (int, float, str, bool)))},
              "classes": np.asarray(model.classes_).tolist(),
              "n_features_in": int(model.n_features_in_),
              "models": [{"kernel": m.kernel.to_dict(), "likelihood": m.likelihood.to_dict()}
                         for m in model.models_]}
    arrays = {"X": model.models_[0].X}
    for i, m in enumerate(model.models_):
        arrays[f"y_{i}"] = m.y
        arrays[f"tau_{i}"] = m.result.site_tau
        arrays[f"nu_{i}"] = m.result.site_nu
    np.savez(path, header=np.array(json.dumps(header)), **arrays)


def load_model(path):
    """Load a model written by :func:`save_model`; predictions round-trip exactly."""
    from .models.classifier import EPGaussianProcessClassifier, _BinaryModel
    with np.load(path, allow_pickle=False) as f:
        header = json.loads(str(f["header"]))
        if header.get("format") != FORMAT:
            raise ValueError(f"{path} is not a fastep model file (format {header.get('format')!r}).")
        arrays = {k: f[k] for k in f.files}
    # a loaded model predicts on the CPU: its posterior is rebuilt there from the sites
    params = {k: v for k, v in header["params"].items() if k != "device"}
    est = EPGaussianProcessClassifier(optimizer=None, **params)
    est.classes_ = np.array(header["classes"])
    est.n_features_in_ = header["n_features_in"]
    est.models_ = []
    X = arrays["X"]
    for i, spec in enumerate(header["models"]):
        m = _BinaryModel(kernel_from_dict(spec["kernel"]), likelihood_from_dict(spec["likelihood"]),
                         X, arrays[f"y_{i}"], est)
        # Rebuild the posterior from the stored sites: zero further sweeps are needed.
        m.result = posterior_from_sites(m.kernel(X), m.y, m.likelihood, arrays[f"tau_{i}"],
                                        arrays[f"nu_{i}"])
        est.models_.append(m)
    est.kernel_ = est.models_[0].kernel
    est.log_marginal_likelihood_value_ = float(np.mean([m.result.log_marginal_likelihood
                                                        for m in est.models_]))
    est.n_iter_ = 0
    est.converged_ = True
    return est
