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
