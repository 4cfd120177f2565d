"""scikit-learn compatible estimators."""
from .annotators import MultiAnnotatorGPClassifier, concatenate_labels, majority_vote
from .censored import CensoredGPRegressor
from .classifier import EPGaussianProcessClassifier
from .gwi import GWIClassifier
from .ordinal import OrdinalGPClassifier
from .regression import EPGaussianProcessRegressor
from .sparse import SparseGPRegressor

__all__ = ["EPGaussianProcessRegressor", "OrdinalGPClassifier",
           "CensoredGPRegressor", "EPGaussianProcessClassifier", "MultiAnnotatorGPClassifier",
           "GWIClassifier", "SparseGPRegressor", "majority_vote",
           "concatenate_labels"]
