"""Every public class and function has a docstring with a runnable Examples section, and
those examples run (doctest)."""
import doctest
import inspect
import warnings

import pytest

import fastep
import fastep.backend
import fastep.cuda
import fastep.datasets
import fastep.inference
import fastep.kernels
import fastep.likelihoods
import fastep.models
import fastep.plot
import fastep.priors
import fastep.typing

#: Warning and error classes say what they mean in one line; they are raised, not used.
NO_EXAMPLE = {"ConvergenceWarning", "EPNumericalWarning", "CUDAUnavailableError"}


def _public():
    out = {}
    for module in (fastep, fastep.kernels, fastep.likelihoods, fastep.inference,
                   fastep.models, fastep.backend, fastep.cuda, fastep.priors, fastep.plot):
        for name in module.__all__:
            obj = getattr(module, name)
            if inspect.isclass(obj) or inspect.isfunction(obj) or callable(obj):
                if not inspect.ismodule(obj):
                    out.setdefault(f"{module.__name__}.{name}", obj)
    for name in ("load_breast_cancer", "split_standardized", "simulate_annotators"):
        out[f"fastep.datasets.{name}"] = getattr(fastep.datasets, name)
    out["fastep.typing"] = fastep.typing       # aliases: the module's docstring shows them
    return out


PUBLIC = _public()


def _doc(obj):
    return getattr(obj, "__doc__", None) or ""


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_has_a_docstring_with_examples(name):
    if name.rpartition(".")[2] in NO_EXAMPLE:
        assert _doc(PUBLIC[name]).strip()
        return
    doc = _doc(PUBLIC[name])
    assert "Examples\n" in doc and ">>>" in doc, f"{name} has no Examples section"


def run_examples(obj, name, module):
    """Run the examples of ``obj``'s own docstring (not its members') as doctests in
    ``module``'s namespace; doctest's summary ``(failed, attempted)``."""
    tests = doctest.DocTestFinder(recurse=False).find(
        obj, name, module=module, globs=dict(vars(module)) if module else {})
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for test in tests:
            runner.run(test)
    return runner.summarize(verbose=False)


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_examples_run(name):
    obj = PUBLIC[name]
    result = run_examples(obj, name, inspect.getmodule(obj))
    assert result.failed == 0, f"{name}: {result.failed} example(s) failed"
