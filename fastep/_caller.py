"""Where a warning points: the user's line, whatever path of fastep's own calls (and of
scikit-learn's ``fit`` wrapper around an estimator's ``fit``) led to it."""
from __future__ import annotations

import os
import sys

_FASTEP_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _inside(filename):
    """Whether a frame of this file is fastep's own, or scikit-learn's wrapper of fit
    (``sklearn/base.py``, loaded before any estimator runs)."""
    if filename.startswith(_FASTEP_DIR):
        return True
    base = sys.modules.get("sklearn.base")
    return base is not None and filename == getattr(base, "__file__", None)


def user_stacklevel():
    """The ``stacklevel`` of :func:`warnings.warn`, called by the caller of this function,
    that points at the first frame outside fastep (and outside scikit-learn's fit
    wrapper).

    Examples
    --------
    >>> from fastep._caller import user_stacklevel
    >>> user_stacklevel()           # called from outside fastep: the caller's own line
    1
    """
    frame, level = sys._getframe(1), 1
    while frame is not None and _inside(frame.f_code.co_filename):
        frame, level = frame.f_back, level + 1
    return level
