"""The names of fastep's estimators, written once: the package's lazy attributes and
``__all__``, :mod:`fastep.models`, :mod:`fastep.persistence` and the tests read them
(no import of the estimators, which pull in scikit-learn, is needed to know them)."""

ESTIMATORS = ("EPGaussianProcessClassifier", "EPGaussianProcessRegressor",
              "OrdinalGPClassifier", "CensoredGPRegressor", "MultiAnnotatorGPClassifier",
              "SparseGPRegressor", "GWIClassifier", "NestedEPClassifier")
