"""Generated inputs at every public entry point: a documented exception or a finite,
valid answer (the promise and the strategies are in tests/helpers/properties.py).

CI runs a short, derandomized profile (``FASTEP_FUZZ_EXAMPLES`` examples per entry
point, default 100: about a minute in all, within the suite's time budget);
``scripts/fuzz.py --examples N`` runs the long one (run it before a release and after a
change to an entry point's validation: 1,500 examples each) and prints a table of
examples and failures per entry point.
"""
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers import properties

PROFILE = settings(max_examples=int(os.environ.get("FASTEP_FUZZ_EXAMPLES", "100")),
                   deadline=None, derandomize=True, database=None,
                   suppress_health_check=list(HealthCheck))


@pytest.mark.parametrize("name", list(properties.ENTRY_POINTS))
def test_entry_point_keeps_its_promise(name):
    prop = properties.ENTRY_POINTS[name]

    @PROFILE
    @given(st.data())
    def run(data):
        prop(data)

    run()


def test_the_checker_catches_what_it_should():
    """The promise checker itself: each kind of broken promise is caught."""
    import numpy as np

    def nan():
        return np.array([1.0, np.nan])

    with pytest.raises(properties.Violation, match="non-finite"):
        properties.finite(properties.call(nan), "out")
    with pytest.raises(properties.Violation, match="undocumented exception"):
        properties.call(lambda: {}["missing"])
    with pytest.raises(properties.Violation, match="foreign exception"):
        properties.call(np.linalg.cholesky, -np.eye(2))
    with pytest.raises(properties.Violation, match="runtime warning"):
        properties.call(lambda: np.log(np.zeros(1)))
    with pytest.raises(properties.Violation, match="probability"):
        properties.probabilities(np.array([[0.3, 0.3]]), "p")
    import fastep
    assert properties.call(fastep.ep, np.eye(2), [1.0, 0.5], fastep.likelihoods.Probit()) \
        is None                                   # fastep's own ValueError: kept


def test_every_estimator_is_fuzzed():
    """The property table covers every estimator of the package's registry."""
    import fastep
    assert set(fastep.ESTIMATORS) <= set(properties.ENTRY_POINTS)
