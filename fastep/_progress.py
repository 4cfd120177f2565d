"""Progress of long fits, read from fastep's logging.

The fits log what a user waits for: ML-II steps and stages (logger ``fastep``, INFO) and
EP sweeps (``fastep.sweeps``, DEBUG).  :class:`FitProgress` turns them into tqdm bars
(``tqdm.auto``, so a notebook gets its widget) where tqdm is installed, else into lines on
stderr; the estimators' ``verbose`` and the command line's fits use it.
"""
from __future__ import annotations

import logging
import sys
from typing import Optional

#: Log messages that count as one step of the learner.
STEP_MESSAGES = ("ML-II step", "GWI L-BFGS-B iteration", "GWI Adam epoch")


def _tqdm(terminal_only):
    """tqdm's bar class (``tqdm.auto`` unless ``terminal_only``, then plain tqdm on a
    terminal only), or None where tqdm is missing (or stderr is not a terminal)."""
    if terminal_only and not sys.stderr.isatty():
        return None
    try:
        if terminal_only:
            from tqdm import tqdm
        else:
            from tqdm.auto import tqdm
    except ImportError:
        return None
    return tqdm


class FitProgress:
    """Show a fit's progress while active (a context manager).

    ``level`` 1: ML-II steps and stages; 2: every EP sweep too.  With tqdm: a bar of steps
    (and one of sweeps) whose postfix is the last message, other messages written above
    them; without: each message as a line ``fastep: ...`` on stderr.  ``terminal_only``
    (the command line): bars on a terminal, nothing in a pipe or a log.  The loggers'
    levels and handlers are restored on exit.

    Examples
    --------
    >>> import numpy as np, fastep
    >>> X = np.linspace(0, 1, 20)[:, None]; y = (X[:, 0] > 0.5).astype(int)
    >>> with FitProgress(1):                               # doctest: +SKIP
    ...     fastep.EPGaussianProcessClassifier().fit(X, y)
    """

    def __init__(self, level: int = 1, terminal_only: bool = False) -> None:
        self.level, self.terminal_only = int(level), terminal_only
        self.handler: Optional[logging.Handler] = None
        self.bars: list = []

    def __enter__(self) -> "FitProgress":
        if self.level < 1:
            return self
        bar = _tqdm(self.terminal_only)
        if bar is None and self.terminal_only:
            return self
        names = {"fastep": logging.INFO}
        if self.level >= 2:
            names["fastep.sweeps"] = logging.DEBUG
        if bar is not None:
            steps = bar(desc="ML-II steps", unit="step", position=0, leave=True)
            sweeps = (bar(desc="EP sweeps", unit="sweep", position=1, leave=True)
                      if self.level >= 2 else None)
            self.bars = [b for b in (steps, sweeps) if b is not None]
            write = bar.write

            class Bars(logging.Handler):
                def emit(self, record):
                    msg = record.getMessage()
                    if record.name == "fastep.sweeps":
                        if sweeps is not None:
                            sweeps.update(1)
                            sweeps.set_postfix_str(msg.split(":", 1)[-1].strip()[:40],
                                                   refresh=False)
                    elif msg.startswith(STEP_MESSAGES):
                        steps.update(1)
                        steps.set_postfix_str(msg.split(":", 1)[-1].strip()[:40],
                                              refresh=False)
                    else:
                        write(f"fastep: {msg}", file=sys.stderr)

            self.handler = Bars()
        else:
            self.handler = logging.StreamHandler(sys.stderr)
            self.handler.setFormatter(logging.Formatter("fastep: %(message)s"))
        handler = self.handler
        self._saved = []
        for name, level in names.items():
            log = logging.getLogger(name)
            self._saved.append((log, log.level, log.propagate))
            log.addHandler(handler)
            if log.getEffectiveLevel() > level:
                log.setLevel(level)
        sweeps_log = logging.getLogger("fastep.sweeps")
        if self.level < 2:                 # not handled here: restored all the same
            self._saved.append((sweeps_log, sweeps_log.level, sweeps_log.propagate))
        else:
            sweeps_log.propagate = False
        return self

    def __exit__(self, *exc) -> None:
        if self.handler is not None:
            for log, level, propagate in reversed(self._saved):
                log.removeHandler(self.handler)
                log.setLevel(level)
                log.propagate = propagate
            self.handler = None
        for b in self.bars:
            b.close()
        self.bars = []
