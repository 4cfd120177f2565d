"""What every test folder shares (tests/ mirrors fastep/: inference, kernels, likelihoods,
models, backend, cli; the tests of package-wide promises at the top).

The helpers are the package ``tests/helpers`` (on the path by pytest's ``pythonpath``
setting in pyproject.toml): slow dense references of the algorithms, the fuzzing promise
and its strategies, the GPU checks' script.  Tests take the references as the fixture
``ref``.
"""
import pytest

from helpers import reference


@pytest.fixture(scope="session")
def ref():
    """:mod:`helpers.reference`: slow dense NumPy references (R&W's sequential EP, adaptive
    quadrature of tilted moments, exact GP regression, ...)."""
    return reference


@pytest.fixture
def in_process_dask():
    """Dask computations of a test run in this process (not on a client an earlier test
    left as the default); a --scheduler test connects its own."""
    try:
        import dask
    except ImportError:
        yield
        return
    with dask.config.set(scheduler="sync"):
        yield


def pytest_collection_modifyitems(config, items):
    """Order tests/backend/test_cuda.py's tests: last in a plain session (their subprocess,
    started at collection by :func:`pytest_collection_finish`, runs beside the others);
    first under pytest-xdist, whose workers collect in this order and are handed files in
    it, so that one worker waits on the subprocess (one core, 2-4 minutes under the
    simulator) while the other runs the rest, instead of a 2-core machine ending on it
    with one core idle."""
    cuda = [item for item in items if hasattr(getattr(item, "module", None), "start_early")]
    if cuda:
        rest = [item for item in items if item not in cuda]
        items[:] = cuda + rest if hasattr(config, "workerinput") else rest + cuda


def pytest_collection_finish(session):
    """In a plain (not pytest-xdist) session that will run GPU checks' tests, start their
    subprocess (1-2 minutes under the simulator) as soon as the tests are collected and
    selected, so that it runs beside the other tests instead of holding up its own.  Under
    xdist the other worker goes on meanwhile anyway."""
    config = session.config
    if hasattr(config, "workerinput") or config.option.collectonly:
        return
    for item in session.items:
        if hasattr(getattr(item, "module", None), "start_early"):
            item.module.start_early()
            config.add_cleanup(item.module.stop_early)   # killed if still running at exit
            return
