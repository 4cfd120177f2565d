"""Progress bars of the command line (tqdm on a terminal; nothing in a pipe or a log)."""
from __future__ import annotations

import sys


def _tqdm():
    """tqdm's progress bar class when stderr is a terminal and tqdm is installed, else
    None (quiet in pipes and logs)."""
    if not sys.stderr.isatty():
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm


def _progress(chunks, total, size, what):
    """A progress bar over the chunks on a terminal; the chunks as they are elsewhere."""
    bar = _tqdm()
    if bar is None:
        return chunks
    return bar(chunks, total=-(-total // size), desc=f"fastep {what}", unit="chunk")


class _FitProgress:
    """Progress bars of a fit on a terminal (ML-II steps and EP sweeps, from fastep's
    logging: :class:`fastep._progress.FitProgress`); a no-op in a pipe."""

    def __init__(self):
        from .._progress import FitProgress
        self.progress = FitProgress(2, terminal_only=True).__enter__()

    def close(self):
        self.progress.__exit__(None, None, None)
