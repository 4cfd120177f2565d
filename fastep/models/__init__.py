"""scikit-learn compatible estimators."""
from ._annotator_em import concatenate_labels, majority_vote
from .annotators import MultiAnnotatorGPClassifier
from .censored import CensoredGPRegressor
from .classifier import EPGaussianProcessClassifier
from .columns import TableColumns
from .gwi import GWIClassifier
from .nested import NestedEPClassifier
from .ordinal import OrdinalGPClassifier
from .regression import EPGaussianProcessRegressor
from .sparse import SparseGPRegressor

from .._registry import ESTIMATORS
from ._state import StateReader  # noqa: F401  (what persistence hands a loader)

__all__ = [*ESTIMATORS, "TableColumns", "majority_vote", "concatenate_labels"]
