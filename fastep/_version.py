"""fastep's version: the one place it is written (pyproject.toml reads it from here); and
the environment a measurement ran in (:func:`environment`), which the scripts that
record numbers for the documentation save with them."""
__version__ = "0.3.0.dev0"     # released versions are tagged v0.1.0, v0.2.0


def environment():
    """``{"date", "machine", "cores", "python", "fastep", numpy, scipy, numba,
    scikit-learn, "blas"}`` of this process: what a recorded measurement ran on (every
    BLAS loaded, with its library: NumPy and SciPy may each bring their own).  It
    imports scikit-learn and threadpoolctl where they are installed."""
    import datetime
    import importlib
    import os
    import platform

    out = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
           "machine": f"{platform.system()} {platform.machine()} {platform.processor()}".strip(),
           "cores": os.cpu_count(), "python": platform.python_version(),
           "fastep": __version__}
    for name, module in (("numpy", "numpy"), ("scipy", "scipy"), ("numba", "numba"),
                         ("scikit-learn", "sklearn")):
        try:
            out[name] = importlib.import_module(module).__version__
        except ImportError:
            out[name] = None
    try:
        from threadpoolctl import threadpool_info
        out["blas"] = [f"{p['internal_api']} {p['version']} ({os.path.basename(p['filepath'])}"
                       f", {p['num_threads']} threads)"
                       for p in threadpool_info() if p["user_api"] == "blas"] or None
    except ImportError:
        out["blas"] = None
    return out


def save_record(path, script, rows, **extra):
    """Write a measurement as JSON to ``path``: ``{"script", "environment", "rows",
    **extra}`` (``rows``: a list of dicts of plain numbers and strings)."""
    import json
    import sys
    with open(path, "w") as fh:
        json.dump({"script": script, "command": " ".join(sys.argv),
                   "environment": environment(), "rows": rows, **extra}, fh, indent=1)
