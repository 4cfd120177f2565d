"""Save and load fitted estimators without pickle.

A model file is one ``.npz`` archive (written with NumPy, read with
``allow_pickle=False``): the entry ``header`` is JSON with the format name and version,
the estimator's class and constructor parameters and its fitted state's scalar values;
every other entry is an array of that state (training inputs, EP sites, the inducing
posterior ...).  Loading validates each field before any array reaches compiled code and
rebuilds the posterior on the CPU from what was stored, so predictions round-trip exactly
(bit for bit) for a model fitted on the CPU; a model fitted with ``device="cuda"`` loads
and predicts on the CPU, equal to its GPU predictions to rounding (1e-10 on an H100).
Writing is atomic: a temporary file in the same folder, flushed and renamed over the
target.

Over 450 lines: one job, the model file: its format, the checks of an untrusted file and
the layouts of every version read back.
"""
from __future__ import annotations

import json
import numbers
import os
import secrets
import zipfile
from typing import Any, Dict, Union

import numpy as np

from ._registry import ESTIMATORS
from ._version import __version__

FORMAT = "fastep-model"
VERSION = 2
#: The format version of a file that holds 'feature_scaling' (``fastep fit``'s standardised
#: columns): fastep 0.2, which reads version 2 and would ignore the field, refuses it.
SCALED_VERSION = 3

__all__ = ["save_model", "load_model", "describe_model", "FORMAT", "VERSION"]


def _estimator_classes():
    from . import models
    return {name: getattr(models, name) for name in ESTIMATORS}


def _params_to_header(est, arrays):
    """Constructor parameters as JSON values; objects are described (kernels, likelihoods)
    and arrays stored beside the header."""
    from .kernels import Kernel
    from .likelihoods import Likelihood
    from .priors import LogNormal
    out = {}
    for name, value in est.get_params(deep=False).items():
        if value is None or isinstance(value, (bool, str)):
            out[name] = value
        elif isinstance(value, np.bool_):
            out[name] = bool(value)
        elif isinstance(value, numbers.Integral):
            out[name] = int(value)
        elif isinstance(value, numbers.Real):
            out[name] = float(value) if np.isfinite(value) else {"float": repr(float(value))}
        elif isinstance(value, Kernel):
            out[name] = {"kernel": value.to_dict()}
        elif isinstance(value, Likelihood):
            out[name] = {"likelihood": value.to_dict()}
        elif isinstance(value, dict) and all(isinstance(p, LogNormal) for p in value.values()):
            out[name] = {"priors": {str(k): p.to_dict() for k, p in value.items()}}
        elif callable(value) or isinstance(value, (np.random.RandomState, np.random.Generator)):
            out[name] = None        # a custom optimizer or a generator: not data; refits use
        else:                       # the defaults' behaviour (None)
            try:
                arrays[f"param:{name}"] = np.asarray(value, dtype=float)
            except (TypeError, ValueError):
                raise ValueError(f"cannot save the {name!r} parameter of "
                                 f"{type(est).__name__} ({type(value).__name__}) without "
                                 f"pickle; set it to a number, a string or an array.") from None
            out[name] = {"array": f"param:{name}"}
    return out


def _params_from_header(params, arrays):
    from .kernels import kernel_from_dict
    from .likelihoods import likelihood_from_dict
    from .priors import prior_from_dict
    if not isinstance(params, dict):
        raise ValueError("the header's 'params' must be a dict")
    out = {}
    for name, value in params.items():
        if isinstance(value, dict) and set(value) == {"kernel"}:
            value = kernel_from_dict(value["kernel"])
        elif isinstance(value, dict) and set(value) == {"likelihood"}:
            value = likelihood_from_dict(value["likelihood"])
        elif isinstance(value, dict) and set(value) == {"priors"}:
            if not isinstance(value["priors"], dict):
                raise ValueError(f"the parameter {name!r} must map names to priors")
            value = {str(k): prior_from_dict(p) for k, p in value["priors"].items()}
        elif isinstance(value, dict) and set(value) == {"float"}:
            if value["float"] not in ("inf", "-inf", "nan"):
                raise ValueError(f"the parameter {name!r} has an invalid value {value!r:.60}")
            value = float(value["float"])
        elif isinstance(value, dict) and set(value) == {"array"}:
            key = value["array"]
            if not isinstance(key, str) or key not in arrays or arrays[key].dtype != np.float64:
                raise ValueError(f"the parameter {name!r} refers to a missing or non-float "
                                 f"array {key!r}")
            value = arrays[key]
        elif not (value is None or isinstance(value, (bool, str, numbers.Real))):
            raise ValueError(f"the parameter {name!r} has an invalid value {value!r:.60}")
        out[name] = value
    return out


def save_model(estimator: Any, path: Union[str, "os.PathLike[str]"]) -> None:
    """Write a fitted fastep estimator to ``path`` (an ``.npz`` archive, no pickle).

    Every estimator can be saved: :class:`~fastep.EPGaussianProcessClassifier`,
    :class:`~fastep.EPGaussianProcessRegressor`, :class:`~fastep.OrdinalGPClassifier`,
    :class:`~fastep.CensoredGPRegressor`, :class:`~fastep.MultiAnnotatorGPClassifier`,
    :class:`~fastep.SparseGPRegressor`, :class:`~fastep.GWIClassifier` and
    :class:`~fastep.NestedEPClassifier`, dense or sparse, fitted on any device; so can a
    Pipeline of a :class:`~fastep.models.TableColumns` step and an estimator (what
    :func:`load_model` gives for a model of ``fastep fit``), whose columns and scaling the
    file keeps.  The file is written to exactly ``path`` (no suffix is
    added), atomically: a process killed while saving leaves an earlier file at ``path``
    intact.  Models with a scikit-learn kernel or a :class:`~fastep.likelihoods.CustomLikelihood`
    hold Python objects and cannot be saved this way (pickle or joblib keep them).

    Parameters
    ----------
    estimator : fitted fastep estimator, or Pipeline of TableColumns and one
        The model to save.  A custom optimizer or a ``random_state`` Generator (or
        RandomState) is saved as None.
    path : str or path-like
        The file to write (replaced if it exists).

    Returns
    -------
    None

    Raises
    ------
    ValueError
        ``estimator`` is not a fastep estimator (or such a Pipeline), is not fitted
        (scikit-learn's ``NotFittedError``), or holds values that cannot be saved
        without pickle.

    Examples
    --------
    >>> import numpy as np, os, tempfile, fastep
    >>> X = np.linspace(-2, 2, 30)[:, None]; y = (X[:, 0] > 0).astype(int)
    >>> clf = fastep.EPGaussianProcessClassifier(optimizer=None).fit(X, y)
    >>> path = os.path.join(tempfile.mkdtemp(), "model.npz")
    >>> fastep.save_model(clf, path)
    >>> bool(np.array_equal(fastep.load_model(path).predict_proba(X), clf.predict_proba(X)))
    True
    """
    from sklearn.utils.validation import check_is_fitted

    from .models.columns import table_parts
    estimator, columns = table_parts(estimator)
    name = type(estimator).__name__
    if name not in ESTIMATORS:
        raise ValueError(f"save_model saves fastep estimators {list(ESTIMATORS)}; got {name}.")
    check_is_fitted(estimator)
    arrays: Dict[str, Any] = {}
    params = _params_to_header(estimator, arrays)
    state, state_arrays = estimator._state()
    if set(arrays) & set(state_arrays):            # pragma: no cover - names are distinct
        raise RuntimeError("parameter and state arrays collide")
    arrays.update({k: _plain(np.asarray(v)) for k, v in state_arrays.items()})
    for key, a in arrays.items():
        if a.dtype == object:
            raise ValueError(f"cannot save {name}: {key!r} holds Python objects (e.g. class "
                             "labels of mixed types); use numbers or strings.")
    header = {"format": FORMAT, "version": VERSION, "class": name, "params": params,
              "state": state, "fastep": __version__}
    if columns is not None and columns.columns is not None:   # the columns `fastep fit` read
        names = [str(v) for v in columns.columns]
        if len(names) != estimator.n_features_in_:
            raise ValueError(f"cannot save the pipeline: its TableColumns names {len(names)} "
                             f"columns and {name} takes {estimator.n_features_in_}.")
        header["feature_columns"] = names
    if columns is not None and (columns.mean is not None or columns.sd is not None):
        try:                               # their mean and sd, which `fastep fit` fitted on
            header["feature_scaling"] = {key: np.asarray(a, dtype=float).tolist()
                                         for key, a in (("mean", columns.mean),
                                                        ("sd", columns.sd))}
            _feature_scaling(header["feature_scaling"], estimator.n_features_in_)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"cannot save the pipeline: TableColumns' mean and sd must be "
                             f"two arrays of {estimator.n_features_in_} finite numbers, the "
                             f"sds positive ({exc}); set both to None for a model that takes "
                             f"raw features.") from None
        header["version"] = SCALED_VERSION
    path = os.fspath(path)
    tmp, fd = _temporary_beside(path)
    try:
        with os.fdopen(fd, "wb") as fh:
            np.savez(fh, header=np.array(json.dumps(header, allow_nan=False)), **arrays)
            fh.flush()
            os.fsync(fh.fileno())
        _keep_mode(path, tmp)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _temporary_beside(path):
    """A new file in the folder of ``path``: ``(its path, an open descriptor)``.  Created
    with mode 0666 so the system applies the umask, as for any new file."""
    folder = os.path.dirname(os.path.abspath(path))
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
    while True:
        tmp = os.path.join(folder, f".fastep-{secrets.token_hex(8)}.tmp")
        try:
            return tmp, os.open(tmp, flags, 0o666)
        except FileExistsError:                    # pragma: no cover - 2^-64 chance
            continue


def _keep_mode(path, tmp):
    """Give ``tmp`` the permissions of the file it replaces, if there is one."""
    try:
        mode = os.stat(path).st_mode & 0o777
    except OSError:
        return
    os.chmod(tmp, mode)


def _plain(a):
    """Text labels held as Python objects (a pandas column) as a NumPy text array."""
    if a.dtype == object and a.size and all(isinstance(v, str) for v in a.ravel()):
        return a.astype(str)
    return a


def load_model(path: Union[str, "os.PathLike[str]"]) -> Any:
    """Load a model written by :func:`save_model`; predictions round-trip exactly.

    The model predicts on the CPU (``device="cpu"``), whatever device it was fitted on.
    A model of ``fastep fit``, which keeps the table's feature columns and (by default)
    their training means and sds, loads as a scikit-learn Pipeline of a
    :class:`~fastep.models.TableColumns` step and the estimator: its ``predict`` and
    ``predict_proba`` take the raw table, a DataFrame by column names or an array of
    exactly those columns in order, as ``fastep predict`` does.  The estimator alone is
    ``model[-1]``, and ``model[-1].predict_latent(model[0].transform(X))`` its other
    predictions.

    Parameters
    ----------
    path : str or path-like
        A file written by :func:`save_model` (or ``fastep fit -o``).

    Returns
    -------
    estimator or Pipeline
        The fitted estimator, or for a model of ``fastep fit`` with feature columns or
        scaling, a Pipeline of a :class:`~fastep.models.TableColumns` step and it.

    Raises
    ------
    FileNotFoundError
        There is no file at ``path``.
    ValueError
        The file is not a fastep model file, has another format or version, is
        truncated, or holds a field that is missing, of the wrong type or shape, or out
        of range; the message names the file and the field.

    Examples
    --------
    >>> import numpy as np, os, tempfile, fastep
    >>> X = np.linspace(0, 1, 20)[:, None]
    >>> reg = fastep.SparseGPRegressor(n_inducing=5, random_state=0).fit(X, np.sin(6 * X[:, 0]))
    >>> path = os.path.join(tempfile.mkdtemp(), "regressor.npz")
    >>> fastep.save_model(reg, path)
    >>> back = fastep.load_model(path)
    >>> type(back).__name__, bool((back.predict(X) == reg.predict(X)).all())
    ('SparseGPRegressor', True)
    """
    return _read(path)[0]


def _read(path):
    """The checked estimator of a model file, with the file's header and arrays."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: no such model file")
    if not zipfile.is_zipfile(path):
        raise ValueError(f"{path} is not a readable fastep model file: it is not an .npz "
                         "archive (fastep.save_model and `fastep fit -o` write one).")
    try:
        f = np.load(path, allow_pickle=False)
        if not isinstance(f, np.lib.npyio.NpzFile):
            raise ValueError("it is a single array, not an .npz archive")
        with f:
            arrays = {k: f[k] for k in f.files}
        odd = sorted(k for k, v in arrays.items() if not isinstance(v, np.ndarray))
        if odd:
            raise ValueError(f"its member(s) {odd[:3]} are not NumPy arrays")
    except Exception as exc:     # whatever NumPy and zipfile raise on a damaged archive
        # (ValueError, OSError, EOFError, BadZipFile, zlib.error, tokenize's TokenError
        # and SyntaxError from a damaged array header, ...)
        raise ValueError(f"{path} is not a readable fastep model file "
                         f"({type(exc).__name__}: {exc})") from None
    header = arrays.pop("header", None)
    try:
        if header is None or header.dtype.kind != "U" or header.ndim != 0:
            raise ValueError("it has no text 'header' entry")
        header = json.loads(str(header))
        if not isinstance(header, dict):
            raise ValueError("its header is not a JSON object")
    except ValueError as exc:
        raise ValueError(f"{path} is not a fastep model file: {str(exc)[:200]}") from None
    except RecursionError:
        raise ValueError(f"{path} is not a fastep model file: its header is nested too "
                         f"deeply") from None
    if header.get("format") == "fastep-model-1":
        raise ValueError(f"{path} was written by fastep 0.1, whose model format this fastep "
                         f"does not read; fit the model again and save it with "
                         f"fastep.save_model.")
    if header.get("format") != FORMAT:
        raise ValueError(f"{path} is not a fastep model file (format "
                         f"{header.get('format')!r:.40}; expected {FORMAT!r}).")
    if header.get("version") not in (VERSION, SCALED_VERSION):
        raise ValueError(f"{path} holds a fastep model of format version "
                         f"{header.get('version')!r:.20}; this fastep reads versions {VERSION} "
                         f"and {SCALED_VERSION}. Save the model again with this version of "
                         f"fastep.")
    name = header.get("class")
    classes = _estimator_classes()
    if not isinstance(name, str) or name not in classes:
        raise ValueError(f"{path}: unknown estimator class {name!r:.60}; a fastep model file "
                         f"holds one of {list(classes)}.")
    from .models import StateReader
    try:
        params = _params_from_header(header.get("params"), arrays)
        if "hyperprior" not in params and "hyperprior" in classes[name]().get_params():
            params["hyperprior"] = None            # saved before MAP-II: plain ML-II
        if "normalize_y" not in params and "normalize_y" in classes[name]().get_params():
            params["normalize_y"] = False          # saved before normalize_y: y as it was
        if "device" in params:
            params["device"] = "cpu"               # a loaded model predicts on the CPU
        est = classes[name](**params)
        est._validate_params()
        state = header.get("state")
        if not isinstance(state, dict):
            raise ValueError("the header's 'state' must be a dict")
        with np.errstate(all="ignore"):            # out-of-range values: checked below
            est._load_state(StateReader(state, arrays))
        names = header.get("feature_columns")
        if names is not None:
            if not (isinstance(names, list) and all(isinstance(v, str) for v in names)
                    and len(names) == est.n_features_in_):
                raise ValueError(f"'feature_columns' must be {est.n_features_in_} strings")
        scaling = header.get("feature_scaling")
        if (scaling is not None) != (header["version"] == SCALED_VERSION):
            raise ValueError(f"a file of format version {header['version']} "
                             f"{'holds no' if scaling is None else 'cannot hold'} "
                             f"'feature_scaling'")
        mean = sd = None
        if scaling is not None:
            mean, sd = _feature_scaling(scaling, est.n_features_in_)
        from .models.columns import table_model
        est = table_model(est, names, mean, sd)
    except (ValueError, TypeError, KeyError, IndexError, RecursionError,
            np.linalg.LinAlgError) as exc:
        raise ValueError(f"{path}: not a valid {name} model file: {str(exc)[:300]}") from None
    return est, header, arrays


def _feature_scaling(scaling, d):
    """``(mean, sd)`` arrays from a header's 'feature_scaling', checked."""
    if not (isinstance(scaling, dict) and set(scaling) == {"mean", "sd"}):
        raise ValueError("'feature_scaling' must be an object with 'mean' and 'sd'")
    d = int(d)
    out = []
    for key in ("mean", "sd"):
        values = scaling[key]
        if not (isinstance(values, list) and len(values) == d and all(
                isinstance(v, numbers.Real) and not isinstance(v, bool) for v in values)):
            raise ValueError(f"'feature_scaling' {key!r} must be {d} numbers")
        out.append(np.array(values, dtype=float))
    if not (np.all(np.isfinite(out[0])) and np.all(np.isfinite(out[1]))
            and np.all(out[1] > 0.0)):
        raise ValueError("'feature_scaling' must hold finite means and positive sds")
    return out[0], out[1]


def describe_model(path: Union[str, "os.PathLike[str]"]) -> Dict[str, Any]:
    """What a model file holds, after :func:`load_model` has checked all of it: a dict of
    printable values (``fastep info MODEL`` prints it).

    Parameters
    ----------
    path : str or path-like
        A file written by :func:`save_model` (or ``fastep fit -o``).

    Returns
    -------
    dict
        Printable values by name: the estimator's class, the fastep version that saved
        it, its kernel and likelihood, the training rows, the features (and the feature
        columns and scaling of a model of ``fastep fit``), the classes, the number of
        inducing points and the log evidence, where the model has them.

    Raises
    ------
    FileNotFoundError, ValueError
        As for :func:`load_model`.

    Examples
    --------
    >>> import numpy as np, os, tempfile, fastep
    >>> X = np.linspace(0, 1, 20)[:, None]; y = (X[:, 0] > 0.5).astype(int)
    >>> path = os.path.join(tempfile.mkdtemp(), "m.npz")
    >>> fastep.save_model(fastep.EPGaussianProcessClassifier(optimizer=None).fit(X, y), path)
    >>> info = fastep.persistence.describe_model(path)
    >>> info["estimator"], info["training rows"], info["classes"]
    ('EPGaussianProcessClassifier', 20, [0, 1])
    """
    model, header, arrays = _read(path)           # the whole file checked
    from .models.columns import table_parts
    est, columns = table_parts(model)
    rows = arrays["X"].shape[0] if "X" in arrays else None
    saved_by = header.get("fastep")
    ok = isinstance(saved_by, str) and len(saved_by) <= 40 and saved_by.isprintable()
    out: Dict[str, Any] = {
        "file": os.fspath(path), "estimator": header["class"],
        "saved by": f"fastep {saved_by}" if ok else "not recorded (saved before fastep 0.3)",
        "format version": header["version"]}
    problems = (header.get("state") or {}).get("problems") or []
    classes = getattr(est, "classes_", None)
    if len(problems) > 1 and classes is not None:   # one-vs-rest: a kernel per class
        from .kernels import kernel_from_dict
        out["kernel"] = [f"class {c} vs rest: {kernel_from_dict(meta['kernel'])}"
                         for c, meta in zip(classes, problems)]
    else:
        out["kernel"] = str(est.kernel_)
    out["likelihood"] = str(getattr(est, "likelihood_", "Gaussian noise"))
    if getattr(est, "noise_variance_", None) is not None:
        out["noise variance"] = float(est.noise_variance_)
    out["training rows"] = (rows if rows is not None
                            else "not stored (the model keeps its inducing inputs only)")
    out["features"] = est.n_features_in_
    names = None if columns is None else columns.columns
    if names is not None:
        out["feature columns"] = list(names)
    scaling = None if columns is None or columns.mean is None else (columns.mean, columns.sd)
    if scaling is not None:
        out["feature scaling"] = ("standardised (each column's training mean and sd), which "
                                  "`fastep predict` and the loaded Pipeline apply")
        out["feature means"] = [float(f"{v:.6g}") for v in scaling[0]]
        out["feature sds"] = [float(f"{v:.6g}") for v in scaling[1]]
    if classes is not None:
        out["classes"] = [c.item() if hasattr(c, "item") else c for c in classes]
    if getattr(est, "inducing_points_", None) is not None:
        out["inducing points"] = int(est.inducing_points_.shape[0])
    if hasattr(est, "log_marginal_likelihood_value_"):
        what = ("log evidence" if header["class"] != "SparseGPRegressor"
                else "collapsed bound")
        value = f"{float(est.log_marginal_likelihood_value_):.6g}"
        out[what] = value + (f" (mean over {len(problems)} problems)" if len(problems) > 1
                             else "")
    return out
