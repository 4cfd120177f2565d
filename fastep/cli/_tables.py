"""What ``fastep fit`` and ``fastep predict`` check of the user's tables and output paths,
and the Dask client they may connect to."""
from __future__ import annotations

import os

import numpy as np


def _check_features(X, names):
    """Every feature cell a number (for dask columns: the first bad row, found on the
    cluster); ``names`` of X's columns, for the message."""
    bad = ~np.isfinite(X)
    rows = bad.any(axis=1)
    found, i = rows.any(), rows.argmax()
    if hasattr(bad, "compute"):                     # one pass over the dask columns
        import dask
        found, i = dask.compute(found, i)
    if found:
        raise ValueError(f"DATA: {_bad_cell(bad[i], i, names)}; drop such rows or choose "
                         "the columns with --features.")


def _bad_cell(bad_row, i, names):
    """Where the first empty or non-numeric cell of a row is, in words."""
    bad_row = np.asarray(bad_row.compute() if hasattr(bad_row, "compute") else bad_row)
    j = int(np.argmax(bad_row))
    return (f"data row {i} (0-based, not counting a header line), column {names[j]!r}, "
            "holds an empty, non-numeric or infinite cell")


def _check_output(path, *inputs):
    """Fail before any work where ``-o`` cannot be written: a folder that does not exist,
    a folder given as the file, or one of the command's ``inputs`` (it would be
    overwritten, and a table emptied before it is read)."""
    folder = os.path.dirname(os.path.abspath(path))
    for given in inputs:
        if os.path.realpath(path) == os.path.realpath(given):
            raise ValueError(f"-o {path!r} is the command's input {given!r}, which writing "
                             f"would overwrite; give another output file.")
    if os.path.isdir(path) or str(path).endswith(("/", os.sep)):
        raise ValueError(f"-o {path!r} is a folder; give a file name in it, e.g. "
                         f"{os.path.join(path, 'model.npz')!r}.")
    if not os.path.isdir(folder):
        raise ValueError(f"-o {path!r}: the folder {folder!r} does not exist; create it "
                         "first (mkdir -p).")


def _named(path, names):
    """The column names of the table if it has them (a header), else None."""
    from fastep.io import has_names
    return list(names) if has_names(path) else None


def _connect(address):
    """A ``distributed.Client`` of the Dask scheduler at ``address`` (``--scheduler``),
    made the default for what follows."""
    try:
        from distributed import Client
    except ImportError:
        raise ValueError("--scheduler needs dask: pip install \"fastep[dask]\"") from None
    return Client(address)


#: Per-row data a table's columns can give (``fastep fit`` and ``fastep predict``): the
#: keyword of the estimator's fit / predict, and its command-line option.
ROW_DATA = {"exposure": "--exposure", "lower": "--lower-column", "upper": "--upper-column",
            "event": "--event", "trials": "--trials"}


def _row_data_specs(args):
    """``{keyword: column spec}`` of the per-row data options given on the command line."""
    specs = {key: getattr(args, option[2:].replace("-", "_"), None)   # (predict: no --event)
             for key, option in ROW_DATA.items()}
    return {key: spec for key, spec in specs.items() if spec}


def _row_values(key, values):
    """A column of per-row data as the estimator takes it: an empty limit cell (NaN) is no
    limit on that row (-inf below, +inf above)."""
    if key in ("exposure", "event", "trials"):
        return values
    return np.where(np.isnan(values), -np.inf if key == "lower" else np.inf, values)
