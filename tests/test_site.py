"""The documentation site's promises that need no build: every code block of its pages
runs as a script, and the API reference lists every public name."""
import importlib
import inspect
import pathlib
import re
import textwrap
import warnings

import numpy as np
import pytest

DOCS = pathlib.Path(__file__).resolve().parents[1] / "docs"
PAGES = sorted(DOCS.rglob("*.md"))
BLOCKS = [(page, i, textwrap.dedent(block)) for page in PAGES      # (a list item's, indented)
          for i, block in enumerate(re.findall(r"```python\n(.*?)```", page.read_text(), re.S))]


@pytest.mark.parametrize("page, i, block", BLOCKS,
                         ids=[f"{p.relative_to(DOCS)}-{i}" for p, i, _ in BLOCKS])
def test_every_code_block_of_the_pages_runs_as_a_script(page, i, block, tmp_path,
                                                         monkeypatch):
    for extra in ("zarr", "pyarrow"):            # the dask extra's file formats
        if extra in block or (extra == "zarr" and "to_zarr" in block):
            pytest.importorskip(extra, reason=f"the block uses {extra} (pip install "
                                              f"'.[dask]')")
    monkeypatch.chdir(tmp_path)                  # blocks that write files write them here
    scope = {"__name__": "__main__"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exec(compile(block, f"{page.name} block {i}", "exec"), scope)
    if "e_new" in block:                          # the counts example predicts finite rates
        rate = scope["reg"].predict(scope["X_new"], exposure=scope["e_new"])
        truth = np.exp(np.sin(2 * scope["X_new"][:, 0]))
        assert np.all(np.isfinite(rate)) and np.max(np.abs(np.log(rate / truth))) < 0.5


#: The modules whose ``__all__`` is public API; the names in them that are modules or
#: constants without a docstring of their own.
PUBLIC = ("fastep", "fastep.kernels", "fastep.likelihoods", "fastep.exceptions",
          "fastep.priors", "fastep.plot", "fastep.models", "fastep.cuda", "fastep.backend",
          "fastep.persistence", "fastep.typing")
MODULES = {"kernels", "likelihoods", "exceptions", "DEVICES", "FORMAT", "VERSION"}


def test_api_reference_lists_every_public_name():
    text = (DOCS / "api.rst").read_text()
    listed = set()
    module = None
    for line in text.splitlines():
        if line.startswith(".. currentmodule::"):
            module = line.split("::")[1].strip()
        elif re.match(r"^   [A-Za-z_]\w*$", line):
            listed.add(f"{module}.{line.strip()}")
    public = {attr for name in PUBLIC for attr in importlib.import_module(name).__all__
              if not attr.startswith("__") and attr not in MODULES}
    missing = public - {entry.rsplit(".", 1)[1] for entry in listed}
    assert not missing, sorted(missing)
    for entry in listed:                         # each listed name exists where it says
        mod, attr = entry.rsplit(".", 1)
        assert hasattr(importlib.import_module(mod), attr), entry


def test_gallery_has_the_examples_the_site_promises():
    """At least ten examples, in sections (a folder each, with a README that titles it),
    each with a title."""
    examples = sorted((DOCS.parent / "examples").glob("*/plot_*.py"))
    assert len(examples) >= 10
    assert not list((DOCS.parent / "examples").glob("plot_*.py"))    # none outside one
    for section in {path.parent for path in examples}:
        head = (section / "README.rst").read_text().splitlines()
        assert len(head) > 2 and set(head[1]) == {"-"}, section.name
    for path in examples:
        head = path.read_text().split('"""')[1].strip().splitlines()
        assert len(head) > 2 and set(head[1]) == {"="}, path.name   # a title, underlined


def _public_callables():
    """(qualified name, function) of every public function of :data:`PUBLIC` and every
    public method (and constructor) of its public classes, exceptions aside."""
    out = {}
    for name in PUBLIC:
        module = importlib.import_module(name)
        for attr in module.__all__:
            obj = getattr(module, attr)
            if inspect.isclass(obj) and not issubclass(obj, BaseException):
                for key, fn in vars(obj).items():
                    if (key == "__init__" or not key.startswith("_")) and \
                            inspect.isfunction(fn):
                        out[f"{obj.__module__}.{obj.__qualname__}.{key}"] = fn
            elif inspect.isfunction(obj):
                out[f"{obj.__module__}.{obj.__qualname__}"] = obj
    return out


def test_public_api_is_annotated():
    """``py.typed`` promises types: every parameter and return of the public callables
    carries an annotation (mypy checks that they hold, in CI)."""
    callables = _public_callables()
    bare = []
    for qualname, fn in callables.items():
        sig = inspect.signature(fn)
        params = [p for n, p in sig.parameters.items() if n not in ("self", "cls")
                  and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
        if sig.return_annotation is inspect.Signature.empty or any(
                p.annotation is inspect.Parameter.empty for p in params):
            bare.append(qualname)
    assert len(callables) > 150, len(callables)          # the walk found the API
    assert not bare, bare
