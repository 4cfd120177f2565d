"""Bundled and offline datasets."""
from __future__ import annotations

import gzip
from importlib import resources

import numpy as np


def load_breast_cancer():
    """Wisconsin Diagnostic Breast Cancer data bundled with fastep.

    569 tumours, 30 real features; target 1 = benign, 0 = malignant.
    Source: UCI Machine Learning Repository (Wolberg, Street & Mangasarian, 1995;
    CC BY 4.0), the same table scikit-learn ships.

    Returns
    -------
    X : ndarray (569, 30)
    y : ndarray (569,) of int
    feature_names : list of str
    """
    path = resources.files("fastep") / "data" / "breast_cancer.csv.gz"
    with gzip.open(path, "rt") as fh:
        fh.readline()
        names = fh.readline().strip().split(",")
        data = np.loadtxt(fh, delimiter=",")
    return data[:, :-1], data[:, -1].astype(int), names[:-1]
