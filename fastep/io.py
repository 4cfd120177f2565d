"""Tables for the ``fastep`` command: CSV, .npy, Parquet and Zarr, by extension.

:func:`read_table` returns the columns a model needs as NumPy arrays (a .npy file is
memory-mapped, so only the columns asked for are read); :func:`iter_rows` streams the
rows of a table in chunks (prediction of inputs larger than memory); :class:`TableWriter`
appends chunks of results to a CSV or .npy file; :func:`read_dask` gives a table as a lazy
dask array whose chunks the workers of a Dask cluster read (``fastep fit --scheduler``).
Parquet needs pyarrow, Zarr zarr and a Dask read of CSV or Parquet dask.dataframe
(``pip install "fastep[dask]"``); none is imported unless such a file is read.

Over 450 lines: one job, the command line's tables: four formats read and written by the
same column and chunk rules.
"""
from __future__ import annotations

import difflib
import os

import numpy as np

FORMATS = (".csv", ".csv.gz", ".npy", ".parquet", ".zarr")


def _extension(path, formats):
    """The one of ``formats`` that ``path`` ends with (any case), or None."""
    p = str(path).lower().rstrip("/")
    return next((ext for ext in formats if p.endswith(ext)), None)


def _open_text(path, mode="rt", **kwargs):
    """``path`` opened as text, through gzip where it ends in .gz (a .csv.gz)."""
    import gzip
    return (gzip.open if str(path).lower().endswith(".gz") else open)(path, mode, **kwargs)


def _kind(path):
    kind = _extension(path, FORMATS)
    if kind is not None:
        return kind
    raise ValueError(f"DATA {path!r}: unknown format; expected one of {', '.join(FORMATS)} "
                     "(by extension).")


def _csv_header(path):
    """``(names or None, width)`` from a CSV's first line: names where it is not all
    numbers.  Read as the csv module reads it (quoted names, as R's ``write.csv`` and
    ``csv.QUOTE_NONNUMERIC`` write them, may hold commas) after a UTF-8 byte-order mark,
    which Excel's "CSV UTF-8" starts with, is dropped.  A table separated by semicolons
    or tabs is a ValueError (:func:`_other_separator`)."""
    import csv
    with _open_text(path, encoding="utf-8-sig", newline="") as fh:
        first, second = fh.readline().strip(), fh.readline().strip()
    cells = [c.strip() for c in next(csv.reader([first]), [""])]
    _other_separator(path, first, second, cells)
    try:
        [float(c) for c in cells if c]
        return None, len(cells)
    except ValueError:
        return cells, len(cells)


def _other_separator(path, first, second, cells):
    """A ValueError, with the pandas line that converts the file, where its first two
    lines read as the same number (more than one) of fields split at ``;`` or a tab, and
    their comma reading gives one field or fields holding that separator (a European
    Excel's CSV: ``x1;x2;y`` over ``0,5;1,5;1``).  Quoted separators count as text."""
    import csv
    for sep, name in ((";", "semicolons"), ("\t", "tabs")):
        width = [len(next(csv.reader([line], delimiter=sep), [])) for line in (first, second)]
        if width[0] < 2 or (second and width[1] != width[0]):
            continue
        if len(cells) > 1 and not any(sep in c for c in cells):
            continue
        decimal = ", decimal=','" if "," in first + second else ""
        raise ValueError(f"DATA {str(path)!r} looks separated by {name}, not commas (its "
                         f"first line: {first[:60]!r}); fastep reads comma-separated values "
                         f"with '.' decimals. Convert it, e.g. with pandas: "
                         f"pd.read_csv({str(path)!r}, sep={sep!r}{decimal}).to_csv("
                         f"'converted.csv', index=False).")


def _npy(path):
    """The .npy table at ``path`` as a read-only memory map, 2-D (a 1-D array is one
    column); a ValueError naming DATA for an array of Python objects or of another
    dimension."""
    with open(path, "rb") as fh:
        magic = fh.read(6)
    if magic != b"\x93NUMPY":
        raise ValueError(f"DATA {path!r} is not a .npy array (np.save writes one).")
    try:
        a = np.load(path, mmap_mode="r")
    except Exception as exc:               # a damaged or truncated file: whatever NumPy says
        if "object" in str(exc).lower() or "pickle" in str(exc).lower():
            raise ValueError(f"DATA {path!r} holds Python objects (dtype object); save a "
                             "numeric array (e.g. np.save(path, X.astype(float))).") from None
        raise ValueError(f"DATA {path!r} is not a readable .npy array "
                         f"({type(exc).__name__}: {exc}).") from None
    if a.ndim not in (1, 2):
        raise ValueError(f"DATA {path!r} is a {a.ndim}-D array of shape {a.shape}; a table is "
                         "2-D (rows x columns): reshape it, e.g. X.reshape(len(X), -1).")
    return a[:, None] if a.ndim == 1 else a


def has_names(path):
    """Whether the table names its columns (a CSV header line, Parquet, a Zarr group),
    rather than :func:`column_names` numbering them."""
    kind = _kind(path)
    if kind in (".csv", ".csv.gz"):
        return _csv_header(path)[0] is not None
    if kind == ".npy":
        return False
    if kind == ".parquet":
        return True
    import zarr
    return not hasattr(zarr.open(path, mode="r"), "shape")


def column_names(path):
    """The table's column names (``"0", "1", ...`` where the file has none).

    Parameters
    ----------
    path : str or path-like
        A .csv, .csv.gz, .npy, .parquet or .zarr table (the format by extension).
    """
    kind = _kind(path)
    if not os.path.exists(path):
        raise ValueError(f"DATA {path!r}: no such file.")
    if kind in (".csv", ".csv.gz"):
        names, width = _csv_header(path)
        return names or [str(i) for i in range(width)]
    if kind == ".npy":
        return [str(i) for i in range(_npy(path).shape[1])]
    if kind == ".parquet":
        import pyarrow.parquet as pq
        return list(pq.read_schema(path).names)
    import zarr
    root = zarr.open(path, mode="r")
    if hasattr(root, "shape"):
        return [str(i) for i in range(root.shape[1] if len(root.shape) == 2 else 1)]
    return sorted(root.array_keys())


def resolve_columns(spec, names, option):
    """Column indices of a comma-separated list of names or 0-based positions; a
    ValueError naming ``option`` and the columns there are when one is missing."""
    out = []
    for item in [s.strip() for s in spec.split(",") if s.strip()]:
        if item in names:
            out.append(names.index(item))
        elif item.lstrip("-").isdigit() and -len(names) <= int(item) < len(names):
            out.append(int(item) % len(names))
        else:
            close = difflib.get_close_matches(item, names, n=3)
            hint = f" Did you mean {' or '.join(map(repr, close))}?" if close else ""
            raise ValueError(f"{option} {item!r}: no such column.{hint} The table has "
                             f"{column_list(names)}.")
    return out


def column_list(names, most=20):
    """``names`` joined for a message: all of them, or the first ``most`` and how many
    more there are."""
    names = [str(n) for n in names]
    more = len(names) - most
    return (f"{len(names)} columns: " if len(names) > 1 else "the column ") + \
        ", ".join(names[:most]) + (f" and {more} more" if more > 0 else "")


def read_table(path, columns=None):
    """The table at ``path`` as a float (n, k) array of the given column indices (all by
    default).  Non-numeric cells are NaN in CSV, and an error in the other formats.

    Parameters
    ----------
    path : str or path-like
        A .csv, .csv.gz, .npy, .parquet or .zarr table (the format by extension).
    columns : list of int, optional
        0-based indices of the columns to read, in the order of the result's columns;
        None reads them all.
    """
    kind = _kind(path)
    if not os.path.exists(path):
        raise ValueError(f"DATA {path!r}: no such file.")
    if kind in (".csv", ".csv.gz"):
        names, width = _csv_header(path)
        data = np.genfromtxt(path, delimiter=",", skip_header=1 if names else 0,
                             usecols=columns, ndmin=2, dtype=float)
        return data.reshape(-1, len(columns) if columns is not None else width)
    if kind == ".npy":
        a = _npy(path)
        return np.asarray(a if columns is None else a[:, columns], dtype=float)
    names = column_names(path)
    use = names if columns is None else [names[i] for i in columns]
    if kind == ".parquet":
        import pyarrow.parquet as pq
        t = pq.read_table(path, columns=use)
        return np.column_stack([t.column(c).to_numpy(zero_copy_only=False).astype(float)
                                for c in use])
    import zarr
    root = zarr.open(path, mode="r")
    if hasattr(root, "shape"):
        a = root[:]
        return np.asarray(a if columns is None else a[:, columns], dtype=float)
    return np.column_stack([np.asarray(root[c][:], dtype=float) for c in use])


def read_text_column(path, column):
    """One column of the table at ``path`` as an array of text (CSV: the cells as written,
    stripped, quotes removed; Parquet: the column's values as text); None for .npy and
    Zarr, which hold numbers only.  For class labels that are words."""
    kind = _kind(path)
    if kind in (".csv", ".csv.gz"):
        import csv
        names, _ = _csv_header(path)
        with _open_text(path, encoding="utf-8-sig", newline="") as fh:
            rows = csv.reader(fh)
            if names:
                next(rows, None)
            return np.array([row[column].strip() if column < len(row) else ""
                             for row in rows if row], dtype=str)
    if kind == ".parquet":
        import pyarrow.parquet as pq
        name = column_names(path)[column]
        values = pq.read_table(path, columns=[name]).column(name).to_pylist()
        return np.array(["" if v is None else str(v) for v in values], dtype=str)
    return None


#: Rows per chunk of :func:`read_dask`.
DASK_CHUNK_ROWS = 2 ** 18


def read_dask(path, columns=None, chunk_rows=DASK_CHUNK_ROWS):
    """The table at ``path`` as a float dask array (n, k) of the given column indices
    (all by default), in chunks of about ``chunk_rows`` rows that the workers read
    themselves: the client reads only the header (a CSV or Parquet table is read once on
    the workers to count its rows), so the workers of a cluster need
    the same path (shared storage).  .npy chunks come from a memory map, Zarr through
    :func:`dask.array.from_zarr`, Parquet and CSV through :mod:`dask.dataframe` (non-numeric
    CSV cells are NaN, as in :func:`read_table`; a .csv.gz is one compressed stream, read
    by one task).

    Parameters
    ----------
    path : str or path-like
        A .csv, .csv.gz, .npy, .parquet or .zarr table (the format by extension); the
        workers read it at the same (absolute) path.
    columns : list of int, optional
        0-based indices of the columns to read, in the order of the result's columns;
        None reads them all.
    chunk_rows : int, default 262144 (2 ** 18, :data:`DASK_CHUNK_ROWS`)
        Rows per chunk of the result (the last one may be shorter).

    Examples
    --------
    >>> import numpy as np, tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "t.npy")
    >>> np.save(path, np.arange(12.0).reshape(6, 2))
    >>> X = read_dask(path, [1], chunk_rows=4)
    >>> X.chunks, X.sum().compute()
    (((4, 2), (1,)), np.float64(36.0))
    """
    kind = _kind(path)
    if not os.path.exists(path):
        raise ValueError(f"DATA {path!r}: no such file.")
    try:
        import dask.array as da
        if kind in (".csv", ".csv.gz", ".parquet"):
            import dask.dataframe as dd
    except ImportError as e:
        raise ValueError(f"reading {path!r} on a Dask cluster needs {e.name}: pip install "
                         "\"fastep[dask]\"") from None
    path = os.path.abspath(path)                  # the workers' working folder may differ
    names = column_names(path)
    columns = list(range(len(names))) if columns is None else list(columns)
    if kind == ".npy":
        import dask
        n = n_rows(path)
        return da.concatenate([
            da.from_delayed(dask.delayed(_npy_rows)(path, start, min(start + chunk_rows, n),
                                                    columns),
                            shape=(min(start + chunk_rows, n) - start, len(columns)),
                            dtype=float)
            for start in range(0, n, chunk_rows)] or [da.zeros((0, len(columns)))])
    if kind == ".zarr":
        import zarr
        if hasattr(zarr.open(path, mode="r"), "shape"):
            a = da.from_zarr(path)
            a = (a[:, None] if a.ndim == 1 else a)[:, columns]
        else:
            parts = [da.from_zarr(path, component=names[i]) for i in columns]
            a = da.concatenate([p if p.ndim == 2 else p[:, None] for p in parts], axis=1)
        return a.astype(float).rechunk((chunk_rows, -1))
    if kind == ".parquet":
        frame = dd.read_parquet(path, columns=[names[i] for i in columns])
    else:
        header, _ = _csv_header(path)
        frame = dd.read_csv(path, header=None, skiprows=1 if header else 0,
                            usecols=columns, dtype=object,
                            blocksize=None if kind == ".csv.gz" else "64MB",
                            compression="gzip" if kind == ".csv.gz" else None)
        frame = frame[columns]            # by position (names as read_table spells them)
        frame = frame.map_partitions(_numeric_frame, meta={c: float for c in frame.columns})
    return frame.to_dask_array(lengths=True).astype(float).rechunk((chunk_rows, -1))


def _npy_rows(path, start, stop, columns):
    """Rows ``start:stop`` of the given columns of a .npy file, through a memory map."""
    return np.asarray(_npy(path)[start:stop][:, columns], dtype=float)


def _numeric_frame(frame):
    """A CSV chunk as floats: cells that are not numbers are NaN."""
    import pandas as pd
    return frame.apply(pd.to_numeric, errors="coerce").astype(float)


def n_rows(path):
    """Rows of the table (without reading it for .npy, Parquet and Zarr)."""
    kind = _kind(path)
    if kind == ".npy":
        return _npy(path).shape[0]
    if kind == ".parquet":
        import pyarrow.parquet as pq
        return pq.ParquetFile(path).metadata.num_rows
    if kind == ".zarr":
        import zarr
        root = zarr.open(path, mode="r")
        return root.shape[0] if hasattr(root, "shape") else root[column_names(path)[0]].shape[0]
    names, _ = _csv_header(path)
    with _open_text(path) as fh:                    # the rows genfromtxt reads: not blank
        return sum(1 for line in fh if line.strip()) - (1 if names else 0)


def iter_rows(path, columns, chunk):
    """Chunks of at most ``chunk`` rows of the given columns, read one at a time: memory
    is O(chunk) whatever the table's size."""
    kind = _kind(path)
    if chunk < 1:
        raise ValueError(f"--chunk must be a positive number of rows; got {chunk}.")
    if kind == ".npy":
        a = _npy(path)
        for start in range(0, a.shape[0], chunk):
            block = a[start:start + chunk]
            yield np.asarray(block if columns is None else block[:, columns], dtype=float)
        return
    if kind in (".csv", ".csv.gz"):
        names, width = _csv_header(path)
        k = width if columns is None else len(columns)
        with _open_text(path) as fh:
            if names:
                fh.readline()
            while True:
                lines = [line for _, line in zip(range(chunk), fh)]
                if not lines:
                    return
                yield np.genfromtxt(lines, delimiter=",", usecols=columns, ndmin=2,
                                    dtype=float).reshape(-1, k)
    if kind == ".parquet":
        import pyarrow.parquet as pq
        names = column_names(path)
        use = names if columns is None else [names[i] for i in columns]
        for batch in pq.ParquetFile(path).iter_batches(batch_size=chunk, columns=use):
            yield np.column_stack([batch.column(i).to_numpy(zero_copy_only=False)
                                   .astype(float) for i in range(len(use))])
        return
    if kind == ".zarr":
        total = n_rows(path)
        import zarr
        root = zarr.open(path, mode="r")
        names = column_names(path)
        for start in range(0, total, chunk):
            if hasattr(root, "shape"):
                block = root[start:start + chunk]
                yield np.asarray(block if columns is None else block[:, columns], dtype=float)
            else:
                use = names if columns is None else [names[i] for i in columns]
                yield np.column_stack([np.asarray(root[c][start:start + chunk], dtype=float)
                                       for c in use])


#: What :class:`TableWriter` writes, by the output's extension.
OUTPUT_FORMATS = (".csv", ".csv.gz", ".npy", ".parquet")


def output_kind(path):
    """The format :class:`TableWriter` writes to ``path`` (by its extension, any case);
    a ValueError naming the ones it writes for any other (``fastep predict -o``)."""
    kind = _extension(path, OUTPUT_FORMATS)
    if kind is not None:
        return kind
    raise ValueError(f"-o {path!r}: cannot tell the output format from its extension; "
                     f"name the file with one of {', '.join(OUTPUT_FORMATS)} (e.g. "
                     f"predictions.csv).")


class TableWriter:
    """Appends chunks of an (n, k) result to a CSV with a header (gzip-compressed for
    .csv.gz), a .npy file (written through a memory map of the final size, so nothing is
    held in memory) or a Parquet file (one row group per chunk; pyarrow), by the path's
    extension (:func:`output_kind`).  ``text`` names columns that hold text (class labels
    that are words), which a .npy file cannot: CSV and Parquet only.  Fewer rows than
    ``n_total`` (rows skipped) are allowed where ``exact`` is False."""

    def __init__(self, path, header, n_total, text=(), exact=True):
        self.path, self.header, self.n_total, self.at = path, list(header), n_total, 0
        self.text = [name in text for name in self.header]
        self.exact = exact
        self.kind = output_kind(path)
        if self.kind == ".npy":
            if any(self.text):
                raise ValueError(f"-o {path!r}: a .npy file holds numbers only, and the "
                                 "predicted labels are text; write .csv or .parquet.")
            self.out = np.lib.format.open_memmap(path, mode="w+", dtype=np.float64,
                                                 shape=(n_total, len(self.header)))
        elif self.kind == ".parquet":
            try:
                import pyarrow as pa
                import pyarrow.parquet as pq
            except ImportError:
                raise ValueError(f"-o {path!r}: writing Parquet needs pyarrow: pip install "
                                 '"fastep[dask]" (or write .csv or .npy).') from None
            self._pa = pa
            self._schema = pa.schema([(name, pa.string() if t else pa.float64())
                                      for name, t in zip(self.header, self.text)])
            self.out = pq.ParquetWriter(path, self._schema)
        else:
            self.out = _open_text(path, "wt")
            self.out.write(",".join(self.header) + "\n")

    def write(self, columns):
        """Append rows given as a list of k columns (text columns as strings) or as an
        (n, k) array of numbers."""
        if isinstance(columns, np.ndarray):
            block = columns.reshape(-1, len(self.header))
            columns = [block[:, j] for j in range(block.shape[1])]
        n = len(columns[0])
        if n == 0:                                   # every row of the chunk left out
            return
        cols = [np.asarray(c, dtype=object if t else float)
                for c, t in zip(columns, self.text)]
        if self.kind == ".npy":
            self.out[self.at:self.at + n] = np.column_stack(cols) if n else 0.0
        elif self.kind == ".parquet":
            self.out.write_table(self._pa.Table.from_arrays(
                [self._pa.array([str(v) for v in c] if t else c)
                 for c, t in zip(cols, self.text)], schema=self._schema))
        elif not any(self.text):
            np.savetxt(self.out, np.column_stack(cols).reshape(n, -1), delimiter=",",
                       fmt="%.17g")
        else:
            import csv
            cells = [[str(v) for v in c] if t else [f"{v:.17g}" for v in c]
                     for c, t in zip(cols, self.text)]
            csv.writer(self.out, lineterminator="\n").writerows(zip(*cells))
        self.at += n

    def close(self):
        if self.at != self.n_total and (self.exact or self.at > self.n_total):
            raise ValueError(f"DATA held {self.at} rows where {self.n_total} were counted; "
                             "check it for blank or broken lines.")
        if self.kind == ".npy":
            self.out.flush()
            if self.at < self.n_total:              # rows skipped: keep the written ones
                kept = np.array(self.out[:self.at])
                del self.out
                np.save(self.path, kept)
            else:
                del self.out
        else:
            self.out.close()
