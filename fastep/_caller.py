"""Where a warning points: the user's line, whatever path of fastep's own calls (and of
scikit-learn's or joblib's: a fit wrapper, a Pipeline, a grid search) led to it."""
from __future__ import annotations

import os
import sys

_FASTEP_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _package_dir(name):
    """The folder of an imported package (None if it is not imported: then no frame can
    be in it)."""
    module = sys.modules.get(name)
    path = getattr(module, "__file__", None)
    return None if path is None else os.path.dirname(os.path.abspath(path)) + os.sep


def _inside(filename):
    """Whether a frame of this file is fastep's own, or scikit-learn's or joblib's (the
    layers between a user's ``search.fit(X, y)`` and fastep's fit)."""
    if filename.startswith(_FASTEP_DIR):
        return True
    for name in ("sklearn", "joblib"):
        folder = _package_dir(name)
        if folder is not None and filename.startswith(folder):
            return True
    return False


def user_stacklevel():
    """The ``stacklevel`` of :func:`warnings.warn`, called by the caller of this function,
    that points at the first frame outside fastep, scikit-learn and joblib.

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
