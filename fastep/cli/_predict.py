"""``fastep predict``: a saved model's predictions for a table, streamed in chunks."""
from __future__ import annotations

import sys

import numpy as np

from ._progress import _progress
from ._tables import ROW_DATA, _bad_cell, _check_output, _named, _row_data_specs, _row_values


def cmd_predict(args):
    from fastep.io import TableWriter, column_names, iter_rows, n_rows, output_kind
    from fastep.persistence import _read
    _check_output(args.output, args.model, args.data)
    output_kind(args.output)                    # a format it writes, before any work
    from fastep.models.columns import table_parts
    est, table = table_parts(_read(args.model)[0])
    scaling = None if table is None or table.mean is None else (table.mean, table.sd)
    fitted = None if table is None else table.columns
    d = est.n_features_in_
    names = column_names(args.data)
    columns = _predict_columns(args, est.n_features_in_, fitted, names)
    if len(columns) != d:
        raise ValueError(f"the model was fitted on {d} features; --features names "
                         f"{len(columns)}.")
    data_columns = _row_data_columns(args, est, names)
    keys = list(data_columns)
    classes = getattr(est, "classes_", None)
    if classes is not None:
        header = [f"p_{c}" for c in classes]
        predict = est.predict_proba
    elif hasattr(est, "predict_censored_proba") and (
            keys or (np.ndim(est.lower_) == 0 and np.ndim(est.upper_) == 0)):
        # censored: the latent f, the censored y, its probabilities at the limits and
        # its quartiles (at the rows' own limits where the model was fitted with them)
        header = ["mean", "std", "y_mean", "y_std", "p_lower", "p_upper", "y_q25", "y_q50",
                  "y_q75"]

        def predict(Xc, **limits):
            mean, std = est.predict_latent(Xc, return_std=True)
            y_mean, y_std = est.predict(Xc, return_std=True, **limits)
            quartiles = [est.predict_quantile(Xc, q, **limits) for q in (0.25, 0.5, 0.75)]
            return np.column_stack([mean, std, y_mean, y_std,
                                    *est.predict_censored_proba(Xc, **limits), *quartiles])
    elif hasattr(getattr(est, "likelihood_", None), "survival_function"):
        header = ["mean", "std", "t_median"]        # survival: the log time scale, median

        def predict(Xc):
            mean, std = est.predict_latent(Xc, return_std=True)
            return np.column_stack([mean, std, est.predict_median(Xc)])
    elif _is_binomial(est):
        # binomial: the latent logit, the success probability E[sigma(f)], and E[y] for
        # the rows' own trials where they are given
        header = ["mean", "std", "p"] + (["y_mean"] if "trials" in keys else [])

        def predict(Xc, **trials):
            mean, std = est.predict_latent(Xc, return_std=True)
            cols = [mean, std, est.predict(Xc, trials=np.ones(Xc.shape[0]))]
            if trials:
                cols.append(est.predict(Xc, **trials))
            return np.column_stack(cols)
    elif "exposure" in keys or _counts_without_exposure(est):
        header = ["mean", "std", "y_mean"]          # counts: the latent log rate and E[y]

        def predict(Xc, **exposure):
            mean, std = est.predict_latent(Xc, return_std=True)
            return np.column_stack([mean, std, est.predict(Xc, **exposure)])
    else:
        header = ["mean", "std"]

        def predict(Xc):
            mean, std = est.predict_latent(Xc, return_std=True)
            return np.column_stack([mean, std])
    # the predicted class (classifiers) and the row's 0-based position in DATA close
    # every output row, after the columns of earlier versions (which keep their places)
    text = ()
    if classes is not None:
        header.append("label")
        if np.asarray(classes).dtype.kind not in "biuf":
            text = ("label",)
    header.append("row")
    total = n_rows(args.data)
    missing = getattr(args, "missing", "error")
    writer = TableWriter(args.output, header, total, text=text, exact=missing != "skip")
    done = 0
    read = columns + [data_columns[k] for k in keys]
    for block in _progress(iter_rows(args.data, read, args.chunk), total, args.chunk,
                           "predict"):
        block, extra = block[:, :d], block[:, d:]
        rows = np.arange(done, done + block.shape[0])
        done += block.shape[0]
        good = np.isfinite(block).all(axis=1)
        if not good.all() and missing == "error":
            k = int(np.argmin(good))
            where = _bad_cell(~np.isfinite(block[k]), rows[k], [names[j] for j in columns])
            raise ValueError(f"DATA: {where}; --missing skip leaves such rows out, "
                             "--missing mark writes them with empty predictions.")
        keep = good if missing == "skip" else np.ones(block.shape[0], bool)
        out = np.full((int(keep.sum()), len(header) - 1 - (classes is not None)), np.nan)
        use = good[keep]
        if use.any():
            Xc = block[good]
            if scaling is not None:             # as `fastep fit` standardised the columns
                Xc = (Xc - scaling[0]) / scaling[1]
            data = {key: _row_values(key, extra[good, i]) for i, key in enumerate(keys)}
            out[use] = predict(Xc, **data)
        cols = [out[:, j] for j in range(out.shape[1])]
        if classes is not None:
            label = np.empty(out.shape[0], dtype=object if text else float)
            label[:] = "" if text else np.nan
            if use.any():
                label[use] = np.asarray(classes)[np.argmax(out[use], axis=1)]
            cols.append(label)
        cols.append(rows[keep].astype(float))
        writer.write(cols)
    writer.close()
    left = f" ({done - writer.at} with an empty cell left out)" if writer.at < done else ""
    print(f"wrote {writer.at} rows{left} ({', '.join(header)}) to {args.output}",
          file=sys.stderr)
    return 0


def _row_data_columns(args, est, names):
    """DATA's per-row data columns (--exposure, --lower-column, --upper-column) as
    ``{keyword of predict: column index}``, checked against the model."""
    from fastep.io import resolve_columns
    out = {}
    for key, spec in _row_data_specs(args).items():
        option = ROW_DATA[key]
        if key == "exposure" and not _is_counts(est):
            raise ValueError("--exposure applies to a count model (Poisson or negative "
                             "binomial regression, or their zero-inflated forms).")
        if key == "trials" and not _is_binomial(est):
            raise ValueError("--trials applies to a binomial model (--likelihood binomial).")
        if key in ("lower", "upper") and not hasattr(est, "predict_censored_proba"):
            raise ValueError(f"{option} applies to a censored model (--model censored).")
        out[key] = resolve_columns(spec, names, option)[0]
    return out


def _is_binomial(est):
    """Whether ``est`` is a binomial model (its likelihood takes per-row trials)."""
    return "trials" in getattr(getattr(est, "likelihood_", None), "data_names", ())


def _is_counts(est):
    """Whether ``est`` is a count model (its likelihood takes a per-row exposure)."""
    return "exposure" in getattr(getattr(est, "likelihood_", None), "data_names", ())


def _counts_without_exposure(est):
    """Whether ``est`` is a count model that predicts E[y] without per-observation
    exposures (one fitted in Python with ``exposure=`` needs them, which the command line
    cannot give: it writes the latent mean and sd only)."""
    if not _is_counts(est):
        return False
    try:
        est.predict(np.zeros((1, est.n_features_in_)))
    except ValueError:
        return False
    return True


def _predict_columns(args, d, fitted, names):
    """DATA's feature columns for ``fastep predict``: --features, else the columns named
    as the model's features (a model fitted on a table with a header), else, for tables
    without names, all of DATA's columns when there are exactly as many as the model's
    features (positions are a guess only when nothing else is possible)."""
    from fastep.io import column_list, resolve_columns
    if args.features:
        return resolve_columns(args.features, names, "--features")
    named = _named(args.data, names)
    if fitted is not None and named is not None:
        missing = [f for f in fitted if f not in named]
        if missing:
            raise ValueError(f"DATA has no column {', '.join(map(repr, missing[:5]))}"
                             f"{f' (and {len(missing) - 5} more)' if len(missing) > 5 else ''}"
                             f", which the model was fitted on (its {column_list(fitted)}); "
                             "name DATA's feature columns, in the model's order, with "
                             "--features.")
        twice = [f for f in fitted if named.count(f) > 1]
        if twice:
            raise ValueError(f"DATA has more than one column named "
                             f"{', '.join(map(repr, twice[:5]))}; name DATA's feature columns, "
                             "in the model's order, with --features (0-based positions).")
        return [named.index(f) for f in fitted]
    if len(names) != d:
        have = "named" if named is not None else "unnamed"
        raise ValueError(f"the model was fitted on {d} features; DATA has {len(names)} "
                         f"{have} columns. Name the feature columns, in the order the model "
                         "was fitted on, with --features.")
    return list(range(d))
