"""Sphinx configuration of fastep's documentation site.

Build (from the repository root, after ``pip install ".[docs]"``)::

    python -m sphinx -W --keep-going -b html docs docs/_build/html

``FASTEP_DOCS_GALLERY=0`` builds every page but does not run the gallery's examples
(CI does so to stay within its time).
"""
import os
import re
import sys
import warnings
from pathlib import Path

import fastep

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "docs"))

project = "fastep"
author = "the fastep developers"
copyright = "2026, the fastep developers"
release = fastep.__version__
version = ".".join(release.split(".")[:2])

templates_path = ["_templates"]
extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.intersphinx",
    "sphinx.ext.mathjax",
    "sphinx.ext.viewcode",
    "numpydoc",
    "myst_parser",
    "sphinx_gallery.gen_gallery",
    "matplotlib.sphinxext.plot_directive",
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
exclude_patterns = ["_build"] + [f"auto_examples/{where}*.{kind}" for where in ("", "*/")
                                  for kind in ("ipynb", "py", "zip", "json", "md5", "pickle")]
myst_enable_extensions = ["dollarmath", "colon_fence"]
myst_heading_anchors = 3

# --- figures of recorded measurements (docs/plots/*.py read docs/data/*.json, which the
# scripts' --save writes): drawn at build time, nothing measured during the build
plot_basedir = str(ROOT / "docs")
plot_formats = [("png", 110)]
plot_html_show_source_link = False
plot_html_show_formats = False
plot_include_source = False

# --- API reference: numpydoc renders the docstrings, autosummary makes one page a name
autosummary_generate = True
# Class pages list their methods, inherited ones included (fit, predict, score, ...), but
# not scikit-learn's metadata-routing setters, which fastep's estimators do not use.
autodoc_default_options = {
    "exclude-members": ", ".join(["get_metadata_routing"] + [f"set_{m}_request" for m in (
        "fit", "predict", "predict_proba", "score", "transform", "partial_fit",
        "predict_log_proba", "decision_function", "inverse_transform")]),
}


def _plain_sklearn_refs(app, what, name, obj, options, lines):
    """Methods inherited from scikit-learn (``score``, ``get_params``, ``set_output``)
    bring their docstrings' :ref: roles, whose labels live in scikit-learn's own site:
    keep their text, without the link."""
    if not getattr(obj, "__module__", "").startswith("sklearn"):
        return
    for i, line in enumerate(lines):
        line = re.sub(r":ref:`([^`<]+?)\s*<[^`>]+>`", r"\1", line)
        lines[i] = re.sub(r":ref:`([^`]+)`", r"\1", line)
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False

# --- Links to the libraries fastep works beside (intersphinx, docs/inventories.py).  Each
# inventory is read from docs/_inventories/<name>.inv where `python docs/inventories.py`
# saved one, else from the web; a library whose inventory is in neither place (an offline
# build without saved copies) is left out, and its names stay plain text rather than
# failing -W.  FASTEP_DOCS_OFFLINE=1 skips the web.
from inventories import LIBRARIES, SAVED, reachable  # noqa: E402

intersphinx_mapping = {}
for _name, _url in LIBRARIES.items():
    if (SAVED / f"{_name}.inv").exists():
        intersphinx_mapping[_name] = (_url, str(SAVED / f"{_name}.inv"))
    elif os.environ.get("FASTEP_DOCS_OFFLINE") != "1" and reachable(_url):
        intersphinx_mapping[_name] = (_url, None)
    else:
        print(f"fastep docs: no inventory of {_name} (offline); its names stay plain text")
intersphinx_timeout = 5

# --- The gallery: examples/<section>/plot_*.py, run at build time
sphinx_gallery_conf = {
    "examples_dirs": str(ROOT / "examples"),
    "gallery_dirs": "auto_examples",
    "filename_pattern": r"/plot_",
    "plot_gallery": os.environ.get("FASTEP_DOCS_GALLERY", "1") != "0",
    "subsection_order": [f"../examples/{section}" for section in (
        "classification", "regression_counts", "censored_survival", "time_series",
        "large_n", "crowds", "multiclass")],
    "within_subsection_order": "FileNameSortKey",
    "remove_config_comments": True,
    "matplotlib_animations": False,
    "capture_repr": ("_repr_html_",),
    "image_scrapers": ("matplotlib",),
    "show_memory": False,
    "abort_on_example_error": True,
    # "Examples using X" on each API page (the minigallery of the autosummary templates)
    "doc_module": ("fastep",),
    "backreferences_dir": "api/backreferences",
    "reference_url": {"fastep": None},
}
# examples run in this process: quiet warnings that are not the examples' own
warnings.filterwarnings("ignore", message="Matplotlib is currently using agg")

# --- HTML
html_theme = "pydata_sphinx_theme"
html_static_path = ["_static"]
html_css_files = ["fastep.css"]
html_title = f"fastep {release}"
html_theme_options = {
    "navbar_align": "left",
    "show_toc_level": 2,
    "navigation_with_keys": False,
    "footer_start": ["copyright"],
    "footer_end": ["sphinx-version"],
}
html_context = {"default_mode": "light"}
html_show_sourcelink = False


def setup(app):
    app.connect("autodoc-process-docstring", _plain_sklearn_refs)
