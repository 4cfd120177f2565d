"""fastep.io: the tables fastep reads and writes (CSV, .npy, Parquet, Zarr), in this process
and, chunk by chunk, on a Dask cluster's workers."""
import numpy as np
import pytest


def test_read_dask_reads_what_read_table_reads(tmp_path, monkeypatch, in_process_dask):
    """fastep.io.read_dask (the workers' reader of --scheduler) against read_table on the
    layouts a user has: headers with spaces, quotes or repeated names, no header, gzip,
    Parquet, Zarr arrays and groups (a 2-d member beside a 1-d one), a 1-d .npy, and a
    relative path (the tasks must not depend on the working folder)."""
    pytest.importorskip("dask.dataframe")
    from fastep.io import read_dask, read_table
    A = np.random.default_rng(0).normal(size=(50, 3))
    A[7, 1] = np.nan
    rows = "\n".join(",".join("" if np.isnan(v) else repr(v) for v in r) for r in A) + "\n"
    layouts = {"spaced.csv": "x1, x2, y\n", "quoted.csv": '"a","b","y"\n',
               "twice.csv": "a,a,y\n", "bare.csv": ""}
    for name, header in layouts.items():
        (tmp_path / name).write_text(header + rows)
    import gzip
    with gzip.open(tmp_path / "z.csv.gz", "wt") as fh:
        fh.write("a,b,c\n" + rows)
    np.save(tmp_path / "one.npy", A[:, 0])
    files = [*layouts, "z.csv.gz", "one.npy"]
    try:
        import pandas as pd
        pd.DataFrame(A, columns=list("abc")).to_parquet(tmp_path / "t.parquet")
        files.append("t.parquet")
    except ImportError:
        pass
    try:
        import zarr
        zarr.save_array(str(tmp_path / "a.zarr"), A)
        g = zarr.open_group(str(tmp_path / "g.zarr"), mode="w")
        g.create_array("X", data=A[:, :2])
        g.create_array("y", data=A[:, 2])
        files += ["a.zarr", "g.zarr"]
    except ImportError:
        pass
    monkeypatch.chdir(tmp_path)
    for name in files:
        columns = [0] if name == "one.npy" else [1, 0] if name == "g.zarr" else [2, 0]
        got = read_dask(name, columns, chunk_rows=16)
        assert got.chunks[0][0] == 16, name
        monkeypatch.chdir("/")                        # a worker elsewhere
        np.testing.assert_array_equal(got.compute(), read_table(tmp_path / name, columns),
                                      err_msg=name)
        monkeypatch.chdir(tmp_path)


def test_column_lists_in_messages_say_how_many_they_leave_out():
    """A missing --target among 32 columns: the near match first, then the first 20 names
    and how many more (0.3 cut the list at 20 with no count, hiding the near match)."""
    from fastep.io import column_list, resolve_columns
    names = ["mean radius", "diagnosis"] + [f"c{i}" for i in range(30)]
    assert column_list(names).startswith("32 columns: mean radius, diagnosis, c0")
    assert column_list(names).endswith("c17 and 12 more")
    assert column_list(["a"]) == "the column a"
    with pytest.raises(ValueError, match=r"--target 'diagnosys': no such column\. Did you "
                                         r"mean 'diagnosis'\? The table has 32 columns: "):
        resolve_columns("diagnosys", names, "--target")
