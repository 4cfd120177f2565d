"""Every public callable's docstring says what its signature says: each parameter in a
numpydoc ``Parameters`` section (a constructor's in its class's docstring), each
documented default equal to the signature's, each plain type (``bool``, ``int``,
``float``, ``str``, ``None``) of an annotation named in the documented type; and every
example in a public method's docstring runs (the classes' and functions' own run in
``test_docs.py``)."""
import ast
import importlib
import inspect
import re
import sys

import pytest
from numpydoc.docscrape import NumpyDocString

from test_docs import run_examples
from test_site import DOCS, PUBLIC, _public_callables


def _api_reference():
    """{module: [names]} of the API reference (``docs/api.rst``: each name listed under a
    ``currentmodule``)."""
    out, module = {}, None
    for line in (DOCS / "api.rst").read_text().splitlines():
        if line.startswith(".. currentmodule::"):
            module = line.split("::")[1].strip()
        elif module and re.match(r"^   [A-Za-z_]\w*$", line):
            out.setdefault(module, []).append(line.strip())
    return out


def _with_inherited():
    """:func:`test_site._public_callables` plus every function and class the API
    reference lists (``docs/api.rst``), with the public methods the classes define or
    inherit from fastep's own base classes (scikit-learn's left to scikit-learn), each
    under the class that defines it."""
    out = dict(_public_callables())
    classes = [getattr(importlib.import_module(name), attr) for name in PUBLIC
               for attr in importlib.import_module(name).__all__]
    for module, names in _api_reference().items():
        for attr in names:
            obj = getattr(importlib.import_module(module), attr)
            if inspect.isfunction(obj) and obj.__module__.startswith("fastep"):
                out.setdefault(f"{obj.__module__}.{obj.__qualname__}", obj)
            classes.append(obj)
    for cls in classes:
        if not inspect.isclass(cls) or issubclass(cls, BaseException):
            continue
        for base in cls.__mro__:
            if not base.__module__.startswith("fastep"):
                continue
            for key, fn in vars(base).items():
                if ((key == "__init__" or not key.startswith("_")) and inspect.isfunction(fn)
                        and fn.__module__.startswith("fastep")):
                    # a constructor is documented by the class it builds
                    owner = cls if key == "__init__" else base
                    out.setdefault(f"{owner.__module__}.{owner.__qualname__}.{key}", fn)
    return out


CALLABLES = _with_inherited()


def _owner_doc(qualname, fn):
    """The docstring that documents ``fn``'s parameters: a constructor's class's."""
    if qualname.endswith(".__init__"):
        module, cls = qualname[:-len(".__init__")].rsplit(".", 1)
        return inspect.getdoc(getattr(importlib.import_module(module), cls)) or ""
    return inspect.getdoc(fn) or ""


def _documented(qualname, fn):
    """{parameter name: documented type} of the numpydoc Parameters section (and, for
    the constructor a dataclass writes, of the Attributes section: its fields)."""
    out = {}
    doc = NumpyDocString(_owner_doc(qualname, fn))
    generated = qualname.endswith(".__init__") and fn.__code__.co_filename == "<string>"
    for p in doc["Parameters"] + (doc["Attributes"] if generated else []):
        for name in p.name.split(","):
            out[name.strip().lstrip("*")] = p.type
    return out


def _signature_params(fn):
    """The parameters a caller passes by name (no self, *args, **kwargs, or private
    ``_name``)."""
    return [p for name, p in inspect.signature(fn).parameters.items()
            if name not in ("self", "cls") and not name.startswith("_")
            and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]


#: ``default 1e-4`` / ``default=1e-4`` / ``default: 1e-4`` at the end of a type line
#: (a tuple in parentheses too), optionally followed by a parenthetical remark.
DEFAULT = re.compile(r"default[=:]?\s*(?P<value>\([^()]*\)|[^()]+?)\s*(\(.*\))?$")


def _same(text, value):
    """Whether the documented default ``text`` is the signature's default ``value``."""
    try:
        written = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text in (repr(value), str(value))
    if isinstance(value, bool) or isinstance(written, bool):
        return written is value
    return written == value and type(written) is not str or written == value


#: The plain types an annotation names, and the words that name them in a docstring.
PLAIN = {"bool": ("bool",), "int": ("int",), "float": ("float",),
         "str": ("str", "{", "'", '"'), "None": ("None", "optional")}


def _plain_members(annotation):
    """The plain types among the top-level members of an annotation (a string, as
    ``from __future__ import annotations`` leaves it, or a type)."""
    if annotation is inspect.Parameter.empty:
        return []
    text = annotation if isinstance(annotation, str) else getattr(
        annotation, "__name__", str(annotation))
    members = [m.strip() for m in text.split("|")]
    if text.startswith("Optional["):
        members = [text[len("Optional["):-1].strip(), "None"]
    return [m for m in members if m in PLAIN]


def _problems(qualname, fn):
    documented = _documented(qualname, fn)
    out = []
    for p in _signature_params(fn):
        if repr(p.default) == "<factory>":        # a dataclass field's default_factory
            p = p.replace(default=inspect.Parameter.empty)
            factory = True
        else:
            factory = False
        if p.name not in documented:
            out.append(f"{p.name}: not in the Parameters section")
            continue
        kind = documented[p.name]
        match = DEFAULT.search(kind)
        if match and p.default is not inspect.Parameter.empty and not _same(
                match["value"], p.default):
            out.append(f"{p.name}: documented default {match['value']!r}, signature "
                       f"{p.default!r}")
        if match and p.default is inspect.Parameter.empty and not factory:
            out.append(f"{p.name}: documented default {match['value']!r}, but it is "
                       f"required")
        if not match and p.default not in (inspect.Parameter.empty, None):
            out.append(f"{p.name}: its default {p.default!r} is not documented "
                       f"('{kind}, default ...')")
        for plain in _plain_members(p.annotation):
            if not any(word in kind for word in PLAIN[plain]):
                out.append(f"{p.name}: annotated {plain}, documented as {kind!r}")
    return out


@pytest.mark.parametrize("qualname", sorted(CALLABLES))
def test_docstring_matches_signature(qualname):
    problems = _problems(qualname, CALLABLES[qualname])
    assert not problems, f"{qualname}: " + "; ".join(problems)


def test_the_check_catches_what_it_should():
    """The checker itself on a wrong docstring (a missing parameter, a wrong default, a
    wrong type): each is found."""
    def f(a: int, b: float = 1e-4, c: bool = False, d: str | None = None):
        """Parameters
        ----------
        a : float
        b : float, default 1e-3
        d : str, default None
        """
    found = _problems("f", f)
    assert DEFAULT.search("(float, float), default (1e-5, 1e5)")["value"] == "(1e-5, 1e5)"
    assert DEFAULT.search("float, default 2147483648 (2 GiB)")["value"] == "2147483648"
    assert any(s.startswith("a: annotated int") for s in found)
    assert any(s.startswith("b: documented default '1e-3'") for s in found)
    assert any(s.startswith("c: not in") for s in found)
    assert not any(s.startswith("d:") for s in found)


#: Public methods with examples (the classes' and functions' own: ``test_docs.py``).
METHODS = sorted(q for q, fn in CALLABLES.items()
                 if "." in fn.__qualname__ and ">>>" in (fn.__doc__ or ""))


@pytest.mark.parametrize("qualname", METHODS)
def test_method_examples_run(qualname):
    fn = CALLABLES[qualname]
    result = run_examples(fn, qualname, sys.modules[fn.__module__])
    assert result.attempted > 0 and result.failed == 0, \
        f"{qualname}: {result.failed} of {result.attempted} example(s) failed"


def _resolve(name, module):
    """The object a See Also entry names: fastep's public names, a module's own, or a
    dotted path from an importable package."""
    import fastep
    for scope in (fastep, module):
        if hasattr(scope, name):
            return getattr(scope, name)
    head, _, attr = name.rpartition(".")
    return getattr(importlib.import_module(head), attr)


@pytest.mark.parametrize("estimator", importlib.import_module("fastep").ESTIMATORS)
def test_every_estimator_points_to_its_neighbours(estimator):
    """Each estimator's page has a See Also section (the estimators to use instead, the
    likelihood or function behind it), and every name in it exists."""
    import fastep
    cls = getattr(fastep, estimator)
    entries = NumpyDocString(inspect.getdoc(cls))["See Also"]
    assert entries, f"{estimator} has no See Also section"
    for names, _ in entries:
        for name, _ in names:
            assert _resolve(name, sys.modules[cls.__module__]) is not None, name
