"""fastep's version: the one place it is written (pyproject.toml reads it from here); and
the environment a measurement ran in (:func:`environment`), which the scripts that
record numbers for the documentation save with them."""
__version__ = "0.3.0.dev0"     # released versions are tagged v0.1.0, v0.2.0


def environment():
    """``{"date", "machine", "cores", "python", "fastep", numpy, scipy, numba,
    scikit-learn, "blas"}`` of this process: what a recorded measurement ran on.  (It
    imports scikit-learn and threadpoolctl where they are installed.)"""
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
        blas = [p for p in threadpool_info() if p["user_api"] == "blas"]
        out["blas"] = (f"{blas[0]['internal_api']} {blas[0]['version']}, "
                       f"{blas[0]['num_threads']} threads") if blas else None
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
