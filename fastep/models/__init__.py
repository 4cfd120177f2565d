"""scikit-learn compatible estimators."""
from .classifier import EPGaussianProcessClassifier

__all__ = ["EPGaussianProcessClassifier"]
