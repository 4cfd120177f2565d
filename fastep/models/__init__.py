"""scikit-learn compatible estimators."""
from .annotators import MultiAnnotatorGPClassifier, concatenate_labels, majority_vote
from .censored import CensoredGPRegressor
from .classifier import EPGaussianProcessClassifier
from .gwi import GWIClassifier
from .sparse import SparseGPRegressor

__all__ = ["CensoredGPRegressor", "EPGaussianProcessClassifier", "MultiAnnotatorGPClassifier",
           "GWIClassifier", "SparseGPRegressor", "majority_vote",
           "concatenate_labels"]
