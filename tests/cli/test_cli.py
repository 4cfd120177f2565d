"""The batch CLI for every model: fit, save, predict round trips on CSV, .npy, Parquet
and Zarr tables, and bad input that names the option to fix."""
import warnings

import numpy as np
import pytest

import fastep
from fastep import load_model
from fastep.cli import main
from fastep.models.columns import table_parts

N = 160


def _load(path):
    """A model file that ``fastep fit`` wrote, and a function that standardises X as that
    fit standardised its feature columns (the identity for one fitted on raw columns)."""
    est, table = table_parts(load_model(path))
    mean, sd = (0.0, 1.0) if table is None or table.mean is None else (table.mean, table.sd)
    return est, lambda X: (np.asarray(X, dtype=float) - mean) / sd


def _predictions(path, classes=None):
    """The prediction columns of ``fastep predict``'s output, after checking the columns
    that close every row: the predicted label (a classifier's: the class of the largest
    probability) and the row's 0-based position in DATA."""
    path = str(path)
    a = np.load(path) if path.endswith(".npy") else np.loadtxt(path, delimiter=",",
                                                              skiprows=1, ndmin=2)
    np.testing.assert_array_equal(a[:, -1], np.arange(a.shape[0]))
    a = a[:, :-1]
    if classes is not None:
        np.testing.assert_array_equal(a[:, -1], np.asarray(classes)[np.argmax(a[:, :-1], 1)])
        a = a[:, :-1]
    return a


def _columns(path):
    """The TableColumns step of a model file that ``fastep fit`` wrote (None: none)."""
    return table_parts(load_model(path))[1]


def _table(tmp_path, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(N, 2))
    f = np.sin(2 * X[:, 0]) + X[:, 1]
    cols = {"x1": X[:, 0], "x2": X[:, 1], "label": (f > 0).astype(float),
            "cls3": np.digitize(f, [-0.7, 0.7]).astype(float),
            "ycens": np.clip(f + 0.2 * rng.normal(size=N), -0.5, None),
            "yreg": f + 0.1 * rng.normal(size=N),
            "count": rng.poisson(np.exp(0.5 * f)).astype(float),
            "time": np.exp(0.5 * f) * rng.weibull(1.5, N),
            "event": (rng.random(N) < 0.7).astype(float)}
    A = np.where(rng.random((N, 3)) < 0.8, cols["label"][:, None], 1 - cols["label"][:, None])
    A[rng.random((N, 3)) < 0.2] = np.nan
    for r in range(3):
        cols[f"a{r}"] = A[:, r]
    path = tmp_path / "train.csv"
    with open(path, "w") as fh:
        fh.write(",".join(cols) + "\n")
        for i in range(N):
            fh.write(",".join("" if np.isnan(c[i]) else repr(float(c[i]))
                              for c in cols.values()) + "\n")
    Xt = rng.normal(size=(250, 2))
    np.save(tmp_path / "test.npy", Xt)
    return path, cols, Xt


KINDS = {
    "classifier": ["--target", "label"],
    "ordinal": ["--target", "cls3"],
    "counts": ["--model", "regression", "--target", "count", "--likelihood", "poisson"],
    "multiclass": ["--target", "cls3"],
    "nested": ["--target", "cls3"],
    "censored": ["--target", "ycens", "--lower", "-0.5"],
    "regression": ["--target", "yreg", "--likelihood", "gaussian"],
    "robust": ["--model", "regression", "--target", "yreg", "--likelihood", "student_t"],
    "negative_binomial": ["--model", "regression", "--target", "count", "--likelihood",
                          "negative_binomial"],
    "zero_inflated_poisson": ["--model", "regression", "--target", "count", "--likelihood",
                              "zero_inflated_poisson"],
    "zero_inflated_negative_binomial": ["--model", "regression", "--target", "count",
                                        "--likelihood", "zero_inflated_negative_binomial"],
    "annotators": ["--annotator-columns", "a0,a1,a2"],
    "weibull": ["--model", "regression", "--target", "time", "--likelihood", "weibull",
                "--event", "event"],
}


COUNTS = ("counts", "negative_binomial", "zero_inflated_poisson",
          "zero_inflated_negative_binomial")


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_fit_save_predict_round_trip(tmp_path, kind, capsys):
    train, cols, Xt = _table(tmp_path)
    model, out = tmp_path / "m.npz", tmp_path / "p.npy"
    model_kind = [] if kind in COUNTS + ("robust", "weibull") else ["--model", kind]
    assert main(["fit", str(train), "-o", str(model), *model_kind, "--features",
                 "x1,x2", "--no-optimize", *KINDS[kind]]) == 0
    assert main(["predict", str(model), str(tmp_path / "test.npy"), "-o", str(out),
                 "--chunk", "64"]) == 0
    pipe = load_model(model)          # fitted on standardised columns (fit's default)
    est, table = table_parts(pipe)
    train_X = np.column_stack([cols["x1"], cols["x2"]])
    mean, sd = table.mean, table.sd
    np.testing.assert_allclose(mean, train_X.mean(0), rtol=1e-12)
    np.testing.assert_allclose(sd, train_X.std(0), rtol=1e-12)
    Xt = (Xt - mean) / sd
    got = _predictions(out, getattr(est, "classes_", None))
    capsys.readouterr()
    assert main(["info", str(model)]) == 0          # what the file holds, in words
    info = dict(line.split(":", 1) for line in capsys.readouterr().out.splitlines()
                if not line.startswith(" "))
    info = {k: v.strip() for k, v in info.items()}
    assert info["estimator"] == type(est).__name__
    assert info["saved by"] == f"fastep {fastep.__version__}"
    assert info["kernel"] == str(est.kernel_) and info["features"] == "2"
    assert info["feature columns"] == "x1, x2"
    assert info["feature scaling"].startswith("standardised (each column")
    assert info["training rows"] == (str(N) if kind != "multiclass" else
                                     "not stored (the model keeps its inducing inputs only)")
    if hasattr(est, "classes_"):
        assert info["classes"] == ", ".join(str(c) for c in est.classes_)
    if hasattr(est, "classes_"):
        np.testing.assert_allclose(got, est.predict_proba(Xt), rtol=1e-10, atol=1e-14)
        assert got.shape[1] == len(est.classes_)
    else:
        mean, std = est.predict_latent(Xt, return_std=True)
        np.testing.assert_allclose(got[:, :2], np.column_stack([mean, std]), rtol=1e-10)
        if kind in COUNTS:                           # and E[y]
            np.testing.assert_allclose(got[:, 2], est.predict(Xt), rtol=1e-10)
            assert got.shape[1] == 3
        if kind == "weibull":                        # and the median time
            np.testing.assert_allclose(got[:, 2], est.predict_median(Xt), rtol=1e-10)
            np.testing.assert_allclose(est.likelihood_.event, cols["event"])
            assert got.shape[1] == 3
        if kind == "censored":                       # the censored y as well
            y_mean, y_std = est.predict(Xt, return_std=True)
            np.testing.assert_allclose(got[:, 2:4], np.column_stack([y_mean, y_std]),
                                       rtol=1e-10)
            np.testing.assert_allclose(got[:, 4], est.predict_censored_proba(Xt)[0],
                                       rtol=1e-10)
            np.testing.assert_allclose(got[:, 7], est.predict_quantile(Xt, 0.5), rtol=1e-10)
            assert np.all(got[:, 6] <= got[:, 7]) and np.all(got[:, 7] <= got[:, 8])
    if kind == "classifier":        # the same model predicts a CSV input to a CSV output
        csv_out = tmp_path / "p.csv"
        assert main(["predict", str(model), str(train), "-o", str(csv_out)]) == 0
        header = csv_out.read_text().splitlines()[0]
        assert header == "p_0,p_1,label,row"
        np.testing.assert_allclose(_predictions(csv_out, [0, 1]),
                                   est.predict_proba((train_X - mean) / sd), rtol=1e-8)


@pytest.mark.parametrize("fmt", ["parquet", "zarr"])
def test_parquet_and_zarr_tables(tmp_path, fmt):
    train, cols, Xt = _table(tmp_path)
    path = tmp_path / f"train.{fmt}"
    if fmt == "parquet":
        pa = pytest.importorskip("pyarrow")
        import pyarrow.parquet as pq
        pq.write_table(pa.table({k: cols[k] for k in ("x1", "x2", "label")}), path)
    else:
        zarr = pytest.importorskip("zarr")
        root = zarr.open_group(str(path), mode="w")
        for k in ("x1", "x2", "label"):
            root.create_array(k, data=cols[k]) if hasattr(root, "create_array") else \
                root.array(k, cols[k])
    model, out = tmp_path / "m.npz", tmp_path / "p.csv"
    assert main(["fit", str(path), "-o", str(model), "--target", "label",
                 "--no-optimize"]) == 0
    assert main(["predict", str(model), str(path), "-o", str(out), "--features",
                 "x1,x2"]) == 0
    X = np.column_stack([cols["x1"], cols["x2"]])
    est, scaled = _load(model)
    np.testing.assert_allclose(_predictions(out, est.classes_),
                               est.predict_proba(scaled(X)), rtol=1e-8)


BAD = [
    ("classifier", ["--target", "nope"], "--target 'nope': no such column"),
    ("classifier", ["--target", "labl"], "--target 'labl': no such column. Did you mean "
                                         "'label'\\?"),
    ("classifier", ["--target", "yreg"], "--target holds"),
    ("multiclass", ["--target", "x1", "--features", "x2"], "--target holds"),
    ("nested", ["--target", "x1", "--features", "x2"], "--target holds"),
    ("censored", ["--target", "ycens", "--lower", "0.5", "--upper", "0.1"], "--lower 0.5 must"),
    ("censored", ["--target", "ycens", "--lower", "0.0"], "outside \\[--lower"),
    ("annotators", [], "--annotator-columns"),
    ("annotators", ["--annotator-columns", "a0,zz"], "--annotator-columns 'zz'"),
    ("regression", ["--target", "yreg", "--features", "x1,missing"], "--features 'missing'"),
    ("regression", ["--target", "yreg", "--n-inducing", "100000"], "--n-inducing"),
]


@pytest.mark.parametrize("kind,extra,message", BAD)
def test_bad_input_names_the_option(tmp_path, capsys, kind, extra, message):
    train, _, _ = _table(tmp_path)
    features = [] if "--features" in extra else ["--features", "x1,x2"]
    code = main(["fit", str(train), "-o", str(tmp_path / "m.npz"), "--model", kind,
                 "--no-optimize", *features, *extra])
    assert code == 2
    err = capsys.readouterr().err
    assert "error" in err
    import re
    assert re.search(message, err), err
    assert not (tmp_path / "m.npz").exists()


def test_a_table_too_big_for_dense_ep_gets_inducing_points_before_any_allocation(
        tmp_path, capsys, monkeypatch):
    """At 60,000 rows dense EP needs tens of GiB: fit says it uses inducing points and
    never builds an n x n matrix (the memory check runs before the estimator exists)."""
    import fastep.cli._fit as cli      # the fit command's module
    rng = np.random.default_rng(0)
    n = 60000
    X = rng.normal(size=(n, 2))
    table = np.column_stack([X, (X[:, 0] > 0).astype(float)])
    np.save(tmp_path / "big.npy", table)
    seen = {}
    real = cli._estimator

    def spy(args, d, m):
        seen["m"] = m
        est = real(args, d, m)
        est.set_params(max_iter=3)
        return est
    monkeypatch.setattr(cli, "_estimator", spy)
    monkeypatch.setattr(cli, "AUTO_INDUCING", 16)
    import fastep._memory
    monkeypatch.setattr(fastep._memory, "host_memory_available", lambda: 24 * 2 ** 30)
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert main(["fit", str(tmp_path / "big.npy"), "-o", str(tmp_path / "m.npz"),
                     "--no-optimize"]) == 0
    assert seen["m"] == 16
    assert "inducing points instead" in capsys.readouterr().err


def test_progress_bars_on_a_terminal_and_quiet_in_a_pipe(tmp_path, monkeypatch, capsys):
    """On a terminal the fit shows ML-II steps and EP sweeps and predict its chunks (tqdm);
    in a pipe (pytest's captured stderr is not a terminal) nothing but the summary."""
    pytest.importorskip("tqdm")
    import sys
    train, _, _ = _table(tmp_path)
    args = ["fit", str(train), "-o", str(tmp_path / "m.npz"), "--target", "label",
            "--features", "x1,x2"]
    assert main(args) == 0
    quiet = capsys.readouterr().err
    assert "ML-II steps" not in quiet and "EP sweeps" not in quiet
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    assert main(args) == 0
    assert main(["predict", str(tmp_path / "m.npz"), str(tmp_path / "test.npy"), "-o",
                 str(tmp_path / "p.npy"), "--chunk", "50"]) == 0
    shown = capsys.readouterr().err
    assert "ML-II steps" in shown and "EP sweeps" in shown and "fastep predict" in shown


def _assert_no_client_left(distributed):
    """``fastep fit --scheduler`` closed the clients it opened: none is left as the default,
    for a later dask computation in this process to find without a scheduler."""
    with pytest.raises(ValueError):
        distributed.default_client()


def test_fit_on_a_dask_scheduler(tmp_path):
    """``--scheduler ADDRESS`` fits sparse EP on that cluster; the saved model predicts
    as the same fit in this process does."""
    distributed = pytest.importorskip("distributed")
    pytest.importorskip("dask.dataframe")       # the workers read a CSV through it
    train, cols, Xt = _table(tmp_path)
    args = ["--target", "label", "--features", "x1,x2", "--n-inducing", "10",
            "--no-optimize"]
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster:
        assert main(["fit", str(train), "-o", str(tmp_path / "d.npz"), "--scheduler",
                     cluster.scheduler_address, *args]) == 0
        _assert_no_client_left(distributed)
    assert main(["fit", str(train), "-o", str(tmp_path / "s.npz"), *args]) == 0
    (a, sa), (b, sb) = _load(tmp_path / "d.npz"), _load(tmp_path / "s.npz")
    np.testing.assert_allclose(a.inducing_points_, b.inducing_points_)
    np.testing.assert_allclose(a.predict_proba(sa(Xt)), b.predict_proba(sb(Xt)), rtol=1e-6)


@pytest.mark.parametrize("kind", ["regression", "censored", "annotators"])
def test_scheduler_workers_read_the_table(tmp_path, capsys, kind):
    """With ``--scheduler`` the client reads only the header: the workers read the rows
    (a .npy here) chunk by chunk, and the fit is the one made in this process."""
    distributed = pytest.importorskip("distributed")
    train, cols, Xt = _table(tmp_path)
    names = list(cols)
    np.save(tmp_path / "train.npy", np.column_stack(list(cols.values())))
    positional = {"--target": lambda v: str(names.index(v)),
                  "--annotator-columns": lambda v: ",".join(str(names.index(c))
                                                            for c in v.split(","))}
    spec = KINDS[kind]
    args = [a if i % 2 == 0 or spec[i - 1] not in positional else positional[spec[i - 1]](a)
            for i, a in enumerate(spec)]
    args += ["--model", kind, "--features", "0,1", "--n-inducing", "10", "--no-optimize"]
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster:
        assert main(["fit", str(tmp_path / "train.npy"), "-o", str(tmp_path / "d.npz"),
                     "--scheduler", cluster.scheduler_address, *args]) == 0
        if kind == "censored":            # the checks of the targets, summed on the cluster
            assert main(["fit", str(tmp_path / "train.npy"), "-o", str(tmp_path / "e.npz"),
                         "--scheduler", cluster.scheduler_address, *args,
                         "--upper", "0.2"]) == 2
            assert "outside [--lower -0.5, --upper 0.2]" in capsys.readouterr().err
        _assert_no_client_left(distributed)
    assert main(["fit", str(tmp_path / "train.npy"), "-o", str(tmp_path / "s.npz"),
                 *args]) == 0
    (a, sa), (b, sb) = _load(tmp_path / "d.npz"), _load(tmp_path / "s.npz")
    # the cluster runs the parallel schedule, this process the chunk-sequential one: the
    # same fixed point, each to EP's tolerance (tol=1e-6); the cluster's column means and
    # sds (dask's sums) equal this process's to rounding
    ta, tb = _columns(tmp_path / "d.npz"), _columns(tmp_path / "s.npz")
    np.testing.assert_allclose([ta.mean, ta.sd], [tb.mean, tb.sd], rtol=1e-12)
    np.testing.assert_allclose(a.predict_latent(sa(Xt)), b.predict_latent(sb(Xt)), atol=1e-4)


def test_scheduler_feature_and_label_checks_on_dask_columns(in_process_dask):
    """The checks fit runs on the cluster's columns name the row and the option."""
    da = pytest.importorskip("dask.array")
    from fastep.cli._fit import _targets
    from fastep.cli._tables import _check_features
    X = np.ones((40, 2))
    X[23, 1] = np.nan
    with pytest.raises(ValueError, match="data row 23 .*column 'b'"):
        _check_features(da.from_array(X, chunks=10), ["a", "b"])
    args = type("Args", (), {"model": "classifier", "lower": None, "upper": None})()
    T = da.from_array(np.r_[np.zeros(20), np.ones(19), np.inf][:, None], chunks=10)
    with pytest.raises(ValueError, match="1 of 40 rows have no finite label"):
        _targets(args, T)
    # text labels read as NaN in every row: said so, with the fix
    T = da.from_array(np.full((40, 1), np.nan), chunks=10)
    with pytest.raises(ValueError, match="none of the 40 rows holds a number .*text labels.*"
                                         "map text labels to 0, 1"):
        _targets(args, T)


def test_version_is_the_installed_distributions(capsys):
    """``fastep --version`` prints the version pip installed (the package metadata), not
    a second copy of it."""
    from importlib.metadata import version
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.strip() == f"fastep {version('fastep')}"


def _fit_classifier(tmp_path, *extra):
    train, cols, _ = _table(tmp_path)
    model = tmp_path / "m.npz"
    assert main(["fit", str(train), "-o", str(model), "--target", "label", "--features",
                 "x1,x2", "--no-optimize", *extra]) == 0
    return model, cols


def test_fit_standardises_the_features_unless_told_not_to(tmp_path, capsys):
    """By default ``fastep fit`` fits on the feature columns standardised by their
    training means and sds (numpy's), which the model file keeps and ``fastep predict``
    applies: the same model as scikit-learn's ``StandardScaler`` and the estimator in
    Python.  ``--no-standardize`` fits the raw columns and keeps no scaling."""
    from sklearn.preprocessing import StandardScaler
    rng = np.random.default_rng(7)
    X = rng.normal(size=(120, 2)) * [1000.0, 0.001] + [5e4, -2.0]    # scales 10^6 apart
    y = (np.sin((X[:, 0] - 5e4) / 700.0) + (X[:, 1] + 2.0) / 0.001 > 0).astype(float)
    X = np.column_stack([X, np.full(120, 0.1)])      # constant: its sd is rounding, not 0
    path, out = tmp_path / "t.csv", tmp_path / "p.csv"
    _write_csv(path, {"area": X[:, 0], "smoothness": X[:, 1], "c": X[:, 2], "label": y})
    assert main(["fit", str(path), "-o", str(tmp_path / "s.npz"), "--no-optimize"]) == 0
    est, _ = _load(tmp_path / "s.npz")
    table = _columns(tmp_path / "s.npz")
    scaler = StandardScaler().fit(X)
    np.testing.assert_allclose(table.mean, scaler.mean_, rtol=1e-12)
    np.testing.assert_allclose(table.sd, scaler.scale_, rtol=1e-12)
    assert table.sd[2] == 1.0 and scaler.scale_[2] == 1.0
    python = fastep.EPGaussianProcessClassifier(fastep.kernels.RBF(1.0, np.sqrt(3.0)),
                                                optimizer=None).fit(scaler.transform(X), y)
    assert main(["predict", str(tmp_path / "s.npz"), str(path), "-o", str(out)]) == 0
    np.testing.assert_allclose(_predictions(out, python.classes_),
                               python.predict_proba(scaler.transform(X)), rtol=1e-6)
    assert main(["fit", str(path), "-o", str(tmp_path / "r.npz"), "--no-optimize",
                 "--no-standardize"]) == 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        raw, table = table_parts(load_model(tmp_path / "r.npz"))
    assert table.mean is None and table.columns == ["area", "smoothness", "c"]
    assert main(["predict", str(tmp_path / "r.npz"), str(path), "-o", str(out)]) == 0
    np.testing.assert_allclose(_predictions(out, raw.classes_),
                               raw.predict_proba(X), rtol=1e-8)
    capsys.readouterr()
    assert main(["info", str(tmp_path / "r.npz")]) == 0
    assert "feature scaling" not in capsys.readouterr().out
    _write_csv(path, {"a": np.r_[1e200, -1e200, 1e200], "label": np.r_[0.0, 1.0, 0.0]})
    assert main(["fit", str(path), "-o", str(tmp_path / "o.npz"), "--no-optimize"]) == 2
    assert "overflows a float" in capsys.readouterr().err


def test_predict_matches_columns_by_name(tmp_path, capsys):
    """A model fitted on a table with a header predicts another table by its column
    names, whatever their order or what stands beside them; a missing feature, or a
    table without names whose width is not the model's, is an error naming the fix."""
    model, cols = _fit_classifier(tmp_path)
    est, scaled = _load(model)
    expected = est.predict_proba(scaled(np.column_stack([cols["x1"], cols["x2"]])))
    assert _columns(model).columns == ["x1", "x2"]
    for order in (["x2", "x1"], ["label", "x1", "x2"], ["yreg", "x2", "label", "x1"]):
        path, out = tmp_path / "shuffled.csv", tmp_path / "p.csv"
        np.savetxt(path, np.column_stack([cols[c] for c in order]), delimiter=",",
                   header=",".join(order), comments="")
        assert main(["predict", str(model), str(path), "-o", str(out)]) == 0
        np.testing.assert_allclose(_predictions(out, est.classes_), expected, rtol=1e-10)
    np.savetxt(path, np.column_stack([cols["x1"], cols["label"]]), delimiter=",",
               header="x1,label", comments="")
    assert main(["predict", str(model), str(path), "-o", str(out)]) == 2
    assert "no column 'x2', which the model was fitted on" in capsys.readouterr().err
    np.savetxt(path, np.column_stack([cols["x2"], cols["x1"], cols["x2"]]), delimiter=",",
               header="x2,x1,x2", comments="")
    assert main(["predict", str(model), str(path), "-o", str(out)]) == 2
    assert "more than one column named 'x2'" in capsys.readouterr().err
    np.save(tmp_path / "three.npy", np.column_stack([cols["label"], cols["x1"], cols["x2"]]))
    assert main(["predict", str(model), str(tmp_path / "three.npy"), "-o", str(out)]) == 2
    assert "DATA has 3 unnamed columns" in capsys.readouterr().err


@pytest.mark.parametrize("option,value", [("--n-inducing", "0"), ("--lengthscale", "0"),
                                          ("--max-iter", "-1"), ("--lengthscale", "nan")])
def test_invalid_fit_options_are_refused_before_any_work(tmp_path, capsys, option, value):
    train, _, _ = _table(tmp_path)
    with pytest.raises(SystemExit) as exit_:
        main(["fit", str(train), "-o", str(tmp_path / "m.npz"), "--target", "label",
              option, value])
    assert exit_.value.code == 2
    assert f"argument {option}" in capsys.readouterr().err


def test_max_iter_and_inducing_points_reach_the_multiclass_model(tmp_path):
    train, _, _ = _table(tmp_path)
    model = tmp_path / "m.npz"
    assert main(["fit", str(train), "-o", str(model), "--model", "multiclass", "--target",
                 "cls3", "--features", "x1,x2", "--max-iter", "7", "--n-inducing", "12"]) == 0
    est, _ = _load(model)
    assert est.max_iter == 7 and est.n_inducing == 12


def test_the_command_line_never_writes_over_its_inputs_nor_fits_a_nameless_column(
        tmp_path, capsys):
    """``-o`` naming the command's table or model is refused before anything is written
    (predict used to empty its own input table); a feature column with a blank header name
    (a row index that pandas' ``to_csv`` writes) is refused at fit, since the model could
    not find it by name (predict then mapped another table's columns by position); a
    Parquet table without pyarrow names the extra to install."""
    import sys
    model, cols = _fit_classifier(tmp_path)
    train = tmp_path / "train.csv"
    before = {p: p.read_bytes() for p in (train, model)}
    for argv in (["fit", str(train), "-o", str(train), "--target", "label"],
                 ["predict", str(model), str(train), "-o", str(train)],
                 ["predict", str(model), str(train), "-o", str(model)]):
        assert main(argv) == 2, argv
        assert "which writing would overwrite" in capsys.readouterr().err
    assert {p: p.read_bytes() for p in (train, model)} == before
    indexed = tmp_path / "indexed.csv"
    _write_csv(indexed, {"": np.arange(N, dtype=float), "x1": cols["x1"], "x2": cols["x2"],
                         "label": cols["label"]})
    assert main(["fit", str(indexed), "-o", str(tmp_path / "i.npz"), "--target",
                 "label"]) == 2
    assert "feature column 0 has no name" in capsys.readouterr().err
    assert main(["fit", str(indexed), "-o", str(tmp_path / "i.npz"), "--target", "label",
                 "--features", "x1,x2", "--no-optimize"]) == 0
    parquet = tmp_path / "t.parquet"
    parquet.write_bytes(b"PAR1")
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(sys.modules, "pyarrow", None)        # as if not installed
        assert main(["fit", str(parquet), "-o", str(tmp_path / "p.npz")]) == 2
    assert 'pip install "fastep[dask]"' in capsys.readouterr().err


def test_quoted_header_names_and_a_byte_order_mark_are_read_as_names(tmp_path):
    """A header as R's ``write.csv`` or ``csv.QUOTE_NONNUMERIC`` writes it (quoted names,
    one with a comma) after Excel's UTF-8 byte-order mark: the names are the unquoted
    text, and predict finds them by name in a table without the mark, in another order."""
    import csv
    rng = np.random.default_rng(0)
    X = rng.normal(size=(80, 2))
    y = (X[:, 0] + 0.3 * rng.normal(size=80) > 0).astype(float)
    train, test, out = tmp_path / "q.csv", tmp_path / "r.csv", tmp_path / "p.csv"
    with open(train, "w", encoding="utf-8-sig", newline="") as fh:
        w = csv.writer(fh, quoting=csv.QUOTE_NONNUMERIC)
        w.writerow(["mean radius", "area, worst", "label"])
        w.writerows(np.column_stack([X, y]).tolist())
    with open(test, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["label", "area, worst", "mean radius"])
        w.writerows(np.column_stack([y, X[:, 1], X[:, 0]]).tolist())
    assert main(["fit", str(train), "-o", str(tmp_path / "m.npz"), "--target", "label",
                 "--no-optimize"]) == 0
    est, scaled = _load(tmp_path / "m.npz")
    assert _columns(tmp_path / "m.npz").columns == ["mean radius", "area, worst"]
    assert main(["predict", str(tmp_path / "m.npz"), str(test), "-o", str(out)]) == 0
    np.testing.assert_allclose(_predictions(out, est.classes_),
                               est.predict_proba(scaled(X)), rtol=1e-8)


@pytest.mark.parametrize("sep,name,point", [(";", "semicolons", ","), (";", "semicolons", "."),
                                            ("\t", "tabs", ".")])
def test_a_table_separated_by_semicolons_or_tabs_is_named_so(tmp_path, capsys, sep, name,
                                                            point):
    """A CSV written with another separator (a European Excel's ``;`` with decimal commas)
    reads as one column, or as columns split at its decimal commas; the command line says
    which separator it saw and gives the pandas line that converts it (which converts it),
    not that the target column is missing.  A one-column table whose name holds a ``;``
    is a table."""
    import pandas as pd
    from fastep.io import _csv_header
    table = tmp_path / "t.csv"
    rows = [sep.join(["0.5", "1.5", "1"]).replace(".", point),
            sep.join(["-0.5", "1.25", "0"]).replace(".", point)] * 10
    table.write_text(sep.join(["x1", "x2", "label"]) + "\n" + "\n".join(rows) + "\n")
    assert main(["fit", str(table), "-o", str(tmp_path / "m.npz"), "--target", "label"]) == 2
    err = capsys.readouterr().err
    assert f"looks separated by {name}" in err and f"sep={sep!r}" in err, err
    assert ("decimal=','" in err) == (point == ","), err
    assert not (tmp_path / "m.npz").exists()
    converted = pd.read_csv(table, sep=sep, decimal=",") if point == "," else \
        pd.read_csv(table, sep=sep)
    converted.to_csv(tmp_path / "c.csv", index=False)
    assert main(["fit", str(tmp_path / "c.csv"), "-o", str(tmp_path / "m.npz"), "--target",
                 "label", "--no-optimize"]) == 0
    one = tmp_path / "one.csv"
    one.write_text('"dose;mg"\n0.5\n0.7\n')
    assert _csv_header(one) == (["dose;mg"], 1)


def test_multiclass_takes_gwis_defaults_unless_a_kernel_is_chosen(tmp_path):
    """``--model multiclass`` fits ``GWIClassifier``'s own default kernel (the median
    heuristic) and inducing inputs, unless ``--kernel`` or ``--lengthscale`` is given."""
    train, _, _ = _table(tmp_path)
    model = tmp_path / "m.npz"
    assert main(["fit", str(train), "-o", str(model), "--model", "multiclass", "--target",
                 "cls3", "--features", "x1,x2", "--max-iter", "5"]) == 0
    est, _ = _load(model)
    assert est.kernel is None and est.n_inducing is None
    assert main(["fit", str(train), "-o", str(model), "--model", "multiclass", "--target",
                 "cls3", "--features", "x1,x2", "--max-iter", "5", "--lengthscale", "2"]) == 0
    est, _ = _load(model)
    assert est.kernel.lengthscale == 2.0


def test_repeated_header_names_are_not_kept(tmp_path, capsys):
    """A table whose feature columns share a name gives a model without names, which then
    predicts only a table of exactly its features (no first-match guess)."""
    rng = np.random.default_rng(0)
    A = rng.normal(size=(60, 2))
    path, model, out = tmp_path / "dup.csv", tmp_path / "m.npz", tmp_path / "p.csv"
    np.savetxt(path, np.column_stack([A, (A[:, 1] > 0)]), delimiter=",", header="x,x,y",
               comments="")
    assert main(["fit", str(path), "-o", str(model), "--no-optimize"]) == 0
    assert "names are repeated" in capsys.readouterr().err
    est, scaled = _load(model)
    assert _columns(model).columns is None
    assert main(["predict", str(model), str(path), "-o", str(out)]) == 2
    assert "DATA has 3 named columns" in capsys.readouterr().err
    assert main(["predict", str(model), str(path), "-o", str(out), "--features", "0,1"]) == 0
    np.testing.assert_allclose(_predictions(out, est.classes_),
                               est.predict_proba(scaled(A)), rtol=1e-10)


def test_counts_fitted_with_exposure_predict_the_latent_only(tmp_path, capsys):
    import fastep
    rng = np.random.default_rng(0)
    X = rng.normal(size=(80, 1))
    reg = fastep.EPGaussianProcessRegressor(likelihood="poisson", optimizer=None).fit(
        X, rng.poisson(2.0, size=80), exposure=rng.uniform(0.5, 2, size=80))
    fastep.save_model(reg, tmp_path / "m.npz")
    np.save(tmp_path / "X.npy", X)
    assert main(["predict", str(tmp_path / "m.npz"), str(tmp_path / "X.npy"), "-o",
                 str(tmp_path / "p.csv")]) == 0
    assert (tmp_path / "p.csv").read_text().splitlines()[0] == "mean,std,row"


def test_unwritable_output_fails_before_the_fit(tmp_path, capsys, monkeypatch):
    """-o into a folder that does not exist, or naming a folder, fails at once (the fit
    is never started) and names the user's path, not a temporary file."""
    import fastep
    train, _, _ = _table(tmp_path)
    monkeypatch.setattr(fastep.EPGaussianProcessClassifier, "fit",
                        lambda *a, **k: pytest.fail("the fit ran"))
    for out, message in ((tmp_path / "nodir" / "m.npz", "does not exist; create it"),
                         (tmp_path, "is a folder"), (f"{tmp_path}/newdir/", "is a folder")):
        assert main(["fit", str(train), "-o", str(out), "--target", "label"]) == 2
        err = capsys.readouterr().err
        assert message in err and str(out) in err and ".tmp" not in err


def test_bad_tables_and_model_files_are_named(tmp_path, capsys):
    model, cols = _fit_classifier(tmp_path)
    out = str(tmp_path / "p.csv")
    np.save(tmp_path / "obj.npy", np.array([[1, "a"], [2, "b"]], dtype=object))
    np.save(tmp_path / "cube.npy", np.zeros((4, 2, 2)))
    (tmp_path / "model.txt").write_text("not a model\n")
    (tmp_path / "zip.npy").write_bytes(model.read_bytes())
    (tmp_path / "empty.npy").write_bytes(b"")
    (tmp_path / "bad.csv").write_text("x1,x2\n0.1,0.2\n0.3,\n")
    cases = [
        (["predict", str(model), str(tmp_path / "obj.npy"), "-o", out], "Python objects"),
        (["predict", str(model), str(tmp_path / "cube.npy"), "-o", out], "3-D array"),
        (["predict", str(model), str(tmp_path / "zip.npy"), "-o", out], "not a .npy array"),
        (["fit", str(tmp_path / "empty.npy"), "-o", str(tmp_path / "n.npz")],
         "not a .npy array"),
        (["fit", str(tmp_path / "cube.npy"), "-o", str(tmp_path / "n.npz")], "3-D array"),
        (["predict", str(tmp_path / "model.txt"), str(tmp_path / "bad.csv"), "-o", out],
         "not an .npz archive"),
        (["info", str(tmp_path / "model.txt")], "model.txt is not a readable fastep model"),
        (["info", str(tmp_path / "nosuch.npz")], "no such model file"),
        (["predict", str(model), str(tmp_path / "bad.csv"), "-o", out],
         "data row 1 .*column 'x2'"),
        (["fit", str(tmp_path / "nosuch.csv"), "-o", str(tmp_path / "n.npz")],
         "no such file"),
    ]
    import re
    for argv, message in cases:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert re.search(message, err) and "allow_pickle" not in err, (argv, err)
    with pytest.raises(SystemExit):
        main(["predict", str(model), str(tmp_path / "bad.csv"), "-o", out, "--chunk", "0"])
    assert "argument --chunk" in capsys.readouterr().err


def _write_csv(path, cols):
    with open(path, "w") as fh:
        fh.write(",".join(cols) + "\n")
        n = len(next(iter(cols.values())))
        for i in range(n):
            fh.write(",".join("" if np.isnan(c[i]) else repr(float(c[i]))
                              for c in cols.values()) + "\n")


def test_per_row_exposure_and_limits_from_columns(tmp_path, capsys):
    """--exposure and --lower-column / --upper-column: read per row at fit and at predict,
    left out of the default features, and the predictions are the library's with the same
    per-row data; regression takes --likelihood tobit."""
    import fastep
    rng = np.random.default_rng(3)
    n = 120
    X_raw = rng.normal(size=(n, 2))
    X = X_raw
    f = np.sin(2 * X[:, 0]) + 0.5 * X[:, 1]
    expo = rng.uniform(0.5, 3.0, size=n)
    lo = np.where(rng.random(n) < 0.5, -0.4, np.nan)       # empty cell: no limit
    y_cens = np.maximum(f + 0.1 * rng.normal(size=n), np.nan_to_num(lo, nan=-np.inf))
    cols = {"x1": X[:, 0], "expo": expo, "x2": X[:, 1], "lo": lo,
            "count": rng.poisson(expo * np.exp(0.5 * f)).astype(float), "y": y_cens,
            "yc": np.maximum(f + 0.1 * rng.normal(size=n), -0.4)}
    train, counts_only = tmp_path / "t.csv", tmp_path / "c.csv"
    _write_csv(train, cols)
    _write_csv(counts_only, {k: cols[k] for k in ("x1", "expo", "x2", "count")})
    lower = np.where(np.isnan(lo), -np.inf, lo)
    runs = {
        "counts": (["--model", "regression", "--likelihood", "poisson", "--target", "count",
                    "--exposure", "expo", "--features", "x1,x2"], ["--exposure", "expo"]),
        "counts, default features": (["--model", "regression", "--likelihood", "poisson",
                                      "--target", "count", "--exposure", "expo"],
                                     ["--exposure", "expo"]),
        "censored": (["--model", "censored", "--target", "y", "--lower-column", "lo",
                      "--features", "x1,x2"], ["--lower-column", "lo"]),
        "tobit": (["--model", "regression", "--likelihood", "tobit", "--target", "yc",
                   "--lower", "-0.4", "--features", "x1,x2"], []),
    }
    for name, (fit_args, predict_args) in runs.items():
        model, out = tmp_path / "m.npz", tmp_path / "p.npy"
        table = counts_only if name == "counts, default features" else train
        assert main(["fit", str(table), "-o", str(model), "--no-optimize", *fit_args]) == 0, name
        assert main(["predict", str(model), str(table), "-o", str(out), *predict_args]) == 0
        (est, scaled), got = _load(model), _predictions(out)
        assert est.n_features_in_ == 2 and _columns(model).columns == ["x1", "x2"], name
        X = scaled(X_raw)
        mean, std = est.predict_latent(X, return_std=True)
        np.testing.assert_allclose(got[:, :2], np.column_stack([mean, std]), rtol=1e-10)
        if name.startswith("counts"):
            np.testing.assert_allclose(got[:, 2], est.predict(X, exposure=expo), rtol=1e-10)
            wrong = est.predict(X, exposure=np.ones(n))
            assert np.max(np.abs(got[:, 2] / wrong - expo)) < 1e-8      # E[y] scales with it
        if name == "censored":
            np.testing.assert_allclose(got[:, 2], est.predict(X, lower=lower), rtol=1e-10)
            np.testing.assert_allclose(got[:, 4], est.predict_censored_proba(X, lower=lower)[0],
                                       rtol=1e-10)
            assert np.all(got[np.isnan(lo), 4] == 0)        # no limit: never at it
        if name == "tobit":
            assert isinstance(est.likelihood_, fastep.likelihoods.Tobit)
    capsys.readouterr()
    bad = [
        (["--target", "count", "--exposure", "expo"], "--exposure applies to --model regression"),
        (["--model", "regression", "--likelihood", "tobit", "--target", "y"],
         "--likelihood tobit needs a censoring limit"),
        (["--model", "censored", "--target", "y"], "--model censored needs a censoring limit"),
        (["--model", "censored", "--target", "y", "--lower", "0", "--lower-column", "lo"],
         "not both"),
        (["--target", "count", "--lower", "0"], "--lower applies to --model censored"),
        (["--model", "censored", "--target", "y", "--lower-column", "nope"],
         "--lower-column 'nope'"),
    ]
    for fit_args, message in bad:
        assert main(["fit", str(train), "-o", str(tmp_path / "b.npz"), *fit_args]) == 2
        assert message in capsys.readouterr().err, message
    assert main(["predict", str(tmp_path / "m.npz"), str(train), "-o", str(tmp_path / "q.csv"),
                 "--exposure", "expo"]) == 2
    assert "--exposure applies to a count model" in capsys.readouterr().err


def test_info_lists_each_one_vs_rest_kernel_and_flags_unrecorded_versions(tmp_path, capsys):
    import json
    import zipfile
    rng = np.random.default_rng(0)
    X = rng.normal(size=(90, 2))
    clf = fastep.EPGaussianProcessClassifier().fit(X, np.digitize(X[:, 0], [-0.5, 0.5]))
    model = tmp_path / "m.npz"
    fastep.save_model(clf, model)
    capsys.readouterr()
    assert main(["info", str(model)]) == 0
    out = capsys.readouterr().out
    for c, latent in zip(clf.classes_, clf._latents):
        assert f"class {c} vs rest: {latent.kernel}" in out
    assert "(mean over 3 problems)" in out
    # a header without the version (fastep 0.2), or with a value that is not a short
    # printable string, is reported as not recorded, never printed as it is
    for value in (None, "0.2\n\x1b[31mred", {"evil": [1, 2]}):
        with np.load(model) as f:
            arrays = {k: f[k] for k in f.files}
        header = json.loads(str(arrays.pop("header")))
        header.pop("fastep")
        if value is not None:
            header["fastep"] = value
        path = tmp_path / "edited.npz"
        np.savez(path, header=np.array(json.dumps(header)), **arrays)
        assert zipfile.is_zipfile(path)
        assert main(["info", str(path)]) == 0
        out = capsys.readouterr().out
        assert "saved by:        not recorded (saved before fastep 0.3)" in out
        assert "\x1b" not in out and "evil" not in out


def test_event_column_applies_to_survival_likelihoods_only(tmp_path, capsys):
    train, _, _ = _table(tmp_path)
    code = main(["fit", str(train), "-o", str(tmp_path / "m.npz"), "--model", "regression",
                 "--target", "count", "--likelihood", "poisson", "--event", "event",
                 "--features", "x1,x2", "--no-optimize"])
    assert code != 0
    assert "--event applies to --model regression with a survival likelihood" in \
        capsys.readouterr().err


def test_a_commands_warnings_are_printed_in_its_own_voice(monkeypatch, capsys, tmp_path):
    """0.3 printed a fit's ConvergenceWarning in Python's form, with the script's path and
    line ("/venv/bin/fastep:8: ConvergenceWarning: ...") and the source line after it."""
    import warnings

    import fastep.cli as cli

    def warns(args):
        warnings.warn("ML-II ended at a bound", fastep.ConvergenceWarning)
        return 0

    monkeypatch.setattr(cli, "cmd_fit", warns)
    assert cli.main(["fit", str(tmp_path / "t.csv"), "-o", str(tmp_path / "m.npz")]) == 0
    err = capsys.readouterr().err
    assert "fastep fit: warning: ML-II ended at a bound" in err
    assert "ConvergenceWarning" not in err and "warnings.warn" not in err


def test_predict_writes_the_format_its_output_extension_names(tmp_path, capsys):
    """-o .csv, .csv.gz, .npy and (with pyarrow) .parquet hold the same predictions (read
    back by pandas and NumPy, not by fastep), written in chunks; any other extension is
    refused before the model is read (a .parquet or .csv.gz used to get plain CSV), and
    .parquet without pyarrow names the extra to install."""
    import sys
    pd = pytest.importorskip("pandas")
    train, _, _ = _table(tmp_path)
    model = tmp_path / "m.npz"
    assert main(["fit", str(train), "-o", str(model), "--target", "label", "--features",
                 "x1,x2", "--no-optimize"]) == 0
    data = str(tmp_path / "test.npy")
    import importlib.util
    exts = [".npy", ".csv", ".csv.gz"] + [".parquet"] * bool(importlib.util.find_spec("pyarrow"))
    outs = {ext: tmp_path / f"p{ext}" for ext in exts}
    for out in outs.values():
        assert main(["predict", str(model), data, "-o", str(out), "--chunk", "64"]) == 0
    ref = np.load(outs[".npy"])
    assert ref.shape == (250, 4)
    read = {".csv": lambda path: pd.read_csv(path, float_precision="round_trip"),
            ".parquet": pd.read_parquet}
    for ext in exts[1:]:
        frame = read.get(ext, read[".csv"])(outs[ext])
        assert list(frame.columns) == ["p_0", "p_1", "label", "row"]
        np.testing.assert_array_equal(frame.to_numpy(), ref)      # %.17g round-trips
    with open(outs[".csv.gz"], "rb") as fh:
        assert fh.read(2) == b"\x1f\x8b"                          # gzip's magic number
    capsys.readouterr()
    for bad in ("p.zarr", "p.txt", "predictions"):
        assert main(["predict", str(tmp_path / "missing.npz"), data, "-o",
                     str(tmp_path / bad)]) == 2
        err = capsys.readouterr().err
        assert "cannot tell the output format" in err and ".parquet" in err
        assert not (tmp_path / bad).exists()
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(sys.modules, "pyarrow", None)        # as if not installed
        assert main(["predict", str(model), data, "-o", str(tmp_path / "q.parquet")]) == 2
    assert 'pip install "fastep[dask]"' in capsys.readouterr().err


def test_binomial_regression_takes_trials_from_a_column(tmp_path, capsys):
    """--likelihood binomial with --trials: the trials column is per-row data (not a
    feature) at fit and at predict, predict writes the latent logit, the success
    probability p and y_mean = trials p, equal to the library's predictions from the
    model file; --trials is refused for another likelihood."""
    rng = np.random.default_rng(2)
    n = 60
    x1, x2 = rng.normal(size=n), rng.normal(size=n)
    trials = rng.integers(1, 20, n).astype(float)
    y = rng.binomial(trials.astype(int), 1 / (1 + np.exp(-(x1 - 0.5 * x2)))).astype(float)
    path, model, out = tmp_path / "t.csv", tmp_path / "m.npz", tmp_path / "p.npy"
    _write_csv(path, {"x1": x1, "x2": x2, "trials": trials, "passed": y})
    assert main(["fit", str(path), "-o", str(model), "--model", "regression",
                 "--likelihood", "binomial", "--trials", "trials", "--target", "passed",
                 "--no-optimize"]) == 0
    assert main(["predict", str(model), str(path), "-o", str(out), "--trials", "trials"]) == 0
    est, scaled = _load(model)
    assert est.n_features_in_ == 2 and _columns(model).columns == ["x1", "x2"]
    X = scaled(np.column_stack([x1, x2]))
    got = _predictions(out)
    mean, std = est.predict_latent(X, return_std=True)
    p = est.predict(X, trials=np.ones(n))
    np.testing.assert_allclose(got, np.column_stack([mean, std, p, trials * p]), rtol=1e-10)
    capsys.readouterr()
    assert main(["fit", str(path), "-o", str(model), "--model", "regression",
                 "--likelihood", "poisson", "--trials", "trials", "--target", "passed"]) == 2
    assert "--trials applies to --model regression with --likelihood binomial" in \
        capsys.readouterr().err


def test_text_labels_are_read_as_classes(tmp_path, capsys):
    """A CSV whose label column holds words ("benign", "malignant") fits as Python does
    with the same labels (it was refused: the command line read numbers only); the model
    predicts those labels from a DataFrame in Python, and an empty label names its row."""
    import pandas as pd
    rng = np.random.default_rng(4)
    X = rng.normal(size=(80, 2))
    words = np.where(X[:, 0] + 0.3 * rng.normal(size=80) > 0, "benign", "malignant")
    frame = pd.DataFrame({"a": X[:, 0], "b": X[:, 1], "diagnosis": words})
    path, model, out = tmp_path / "t.csv", tmp_path / "m.npz", tmp_path / "p.csv"
    frame.to_csv(path, index=False)
    assert main(["fit", str(path), "-o", str(model), "--no-optimize"]) == 0
    assert main(["predict", str(model), str(path), "-o", str(out)]) == 0
    got = pd.read_csv(out)
    assert list(got.columns) == ["p_benign", "p_malignant", "label", "row"]
    pipe = load_model(model)
    python = fastep.EPGaussianProcessClassifier(fastep.kernels.RBF(1.0, np.sqrt(2.0)),
                                                optimizer=None).fit(
        (X - X.mean(0)) / X.std(0), words)
    Xs = (X - X.mean(0)) / X.std(0)
    np.testing.assert_allclose(got[["p_benign", "p_malignant"]].to_numpy(),
                               python.predict_proba(Xs), rtol=1e-10)
    assert list(got["label"]) == list(python.predict(Xs))          # the words themselves
    assert list(got["row"]) == list(range(80))
    assert list(pipe.predict(frame)) == list(python.predict(Xs))
    # a .npy output holds numbers only: the text labels are a clear error before any work
    capsys.readouterr()
    assert main(["predict", str(model), str(path), "-o", str(tmp_path / "p.npy")]) == 2
    assert "write .csv or .parquet" in capsys.readouterr().err
    frame.loc[7, "diagnosis"] = ""
    frame.to_csv(path, index=False)
    capsys.readouterr()
    assert main(["fit", str(path), "-o", str(model), "--no-optimize"]) == 2
    assert "empty label (the first is row 7 of DATA)" in capsys.readouterr().err


def test_predict_skips_or_marks_rows_with_empty_cells(tmp_path, capsys):
    """One empty feature cell stopped the whole ``fastep predict``; it still does by
    default (naming the row and the two options), ``--missing skip`` leaves such rows out
    (the row column says which were written) and ``--missing mark`` writes them with
    empty predictions, the other rows as without the empty ones."""
    import pandas as pd
    model, cols = _fit_classifier(tmp_path)
    est, scaled = _load(model)
    X = np.column_stack([cols["x1"], cols["x2"]])[:40].copy()
    X[[3, 17], [0, 1]] = np.nan
    path = tmp_path / "holes.csv"
    frame = pd.DataFrame({"x1": X[:, 0], "x2": X[:, 1]})
    frame.to_csv(path, index=False)                     # NaN is written as an empty cell
    assert ",," in path.read_text() or "\n," in path.read_text()
    out = tmp_path / "p.csv"
    capsys.readouterr()
    assert main(["predict", str(model), str(path), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert "data row 3" in err and "--missing skip" in err and "--missing mark" in err
    good = np.isfinite(X).all(axis=1)
    expected = est.predict_proba(scaled(X[good]))
    assert main(["predict", str(model), str(path), "-o", str(out), "--missing", "skip"]) == 0
    got = pd.read_csv(out)
    assert list(got["row"]) == list(np.flatnonzero(good))
    np.testing.assert_allclose(got[["p_0", "p_1"]].to_numpy(), expected, rtol=1e-10)
    assert "2 with an empty cell left out" in capsys.readouterr().err
    for ext in (".csv", ".npy"):
        out = tmp_path / f"m{ext}"
        assert main(["predict", str(model), str(path), "-o", str(out), "--missing",
                     "mark"]) == 0
        got = np.load(out) if ext == ".npy" else pd.read_csv(out).to_numpy()
        assert got.shape == (40, 4)
        np.testing.assert_array_equal(got[:, -1], np.arange(40))
        assert np.isnan(got[~good, :3]).all()
        np.testing.assert_allclose(got[good, :2], expected, rtol=1e-10)
        np.testing.assert_array_equal(got[good, 2], est.classes_[np.argmax(expected, 1)])
    out = tmp_path / "s.npy"                    # skip into a .npy: the file holds the rest
    assert main(["predict", str(model), str(path), "-o", str(out), "--missing", "skip"]) == 0
    got = np.load(out)
    assert got.shape == (38, 4)
    np.testing.assert_array_equal(got[:, -1], np.flatnonzero(good))


def test_fit_a_count_series_with_state_space_ep(tmp_path, capsys):
    """``--inference markov`` fits a count series over its time column by state-space EP
    (the model file predicts it back as the same fit in Python does), and refuses what it
    cannot model, before any work."""
    import fastep
    rng = np.random.default_rng(7)
    day = np.arange(400.0)
    counts = rng.poisson(np.exp(np.sin(day / 30.0))).astype(float)
    path, model, out = tmp_path / "s.csv", tmp_path / "s.npz", tmp_path / "p.csv"
    np.savetxt(path, np.column_stack([day, counts]), delimiter=",", header="day,count",
               comments="")
    assert main(["fit", str(path), "-o", str(model), "--model", "regression", "--likelihood",
                 "poisson", "--target", "count", "--features", "day", "--inference",
                 "markov"]) == 0
    est, scaled = _load(model)
    assert est.inference == "markov"
    assert main(["predict", str(model), str(path), "-o", str(out)]) == 0
    got = _predictions(out)
    mean, std = est.predict_latent(scaled(day[:, None]), return_std=True)
    np.testing.assert_allclose(got[:, :2], np.column_stack([mean, std]), rtol=1e-10)
    capsys.readouterr()
    assert main(["fit", str(path), "-o", str(model), "--model", "multiclass",
                 "--inference", "markov"]) == 2
    assert "--inference markov applies to" in capsys.readouterr().err
    # two series in one table: time and a series id, one kernel; each series' predictions
    # are those of the Python fit on the same columns
    store = np.repeat([1.0, 2.0], 200)
    np.savetxt(path, np.column_stack([day, store, counts]), delimiter=",",
               header="day,store,count", comments="")
    assert main(["fit", str(path), "-o", str(model), "--model", "regression", "--likelihood",
                 "poisson", "--target", "count", "--features", "day,store", "--inference",
                 "markov"]) == 0
    est, scaled = _load(model)
    assert main(["predict", str(model), str(path), "-o", str(out)]) == 0
    mean = est.predict_latent(scaled(np.column_stack([day, store])))
    np.testing.assert_allclose(_predictions(out)[:, 0], mean, rtol=1e-10)
    np.savetxt(path, np.column_stack([day, day, day, counts]), delimiter=",",
               header="day,day2,day3,count", comments="")
    assert main(["fit", str(path), "-o", str(model), "--model", "regression", "--likelihood",
                 "poisson", "--target", "count", "--inference", "markov"]) == 2
    assert "one feature column, time" in capsys.readouterr().err
    # an explicit --kernel rbf has no state-space form: refused, not silently a Matern
    assert main(["fit", str(path), "-o", str(model), "--model", "regression", "--likelihood",
                 "poisson", "--target", "count", "--features", "day", "--inference",
                 "markov", "--kernel", "rbf"]) == 2
    assert "--kernel rbf has no state-space form" in capsys.readouterr().err


def test_skip_survives_a_chunk_whose_rows_are_all_left_out(tmp_path):
    """--missing skip with a chunk of only empty rows (trailing blank rows of a
    spreadsheet, a small --chunk): the chunk writes nothing, the rest is written."""
    import pandas as pd
    model, cols = _fit_classifier(tmp_path)
    X = np.column_stack([cols["x1"], cols["x2"]])[:8].copy()
    X[2:4] = np.nan                                  # rows 2 and 3: the second chunk of 2
    path, out = tmp_path / "holes.csv", tmp_path / "p.csv"
    pd.DataFrame({"x1": X[:, 0], "x2": X[:, 1]}).to_csv(path, index=False)
    assert main(["predict", str(model), str(path), "-o", str(out), "--missing", "skip",
                 "--chunk", "2"]) == 0
    assert list(pd.read_csv(out)["row"]) == [0, 1, 4, 5, 6, 7]
