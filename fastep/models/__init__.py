"""scikit-learn compatible estimators."""
from .annotators import MultiAnnotatorGPClassifier, concatenate_labels, majority_vote
from .classifier import EPGaussianProcessClassifier

__all__ = ["EPGaussianProcessClassifier", "MultiAnnotatorGPClassifier", "majority_vote",
           "concatenate_labels"]
