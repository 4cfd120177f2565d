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
    """Progress bars of a fit on a terminal, fed by fastep's logging: ML-II steps (logger
    ``fastep``, INFO) and EP sweeps (``fastep.sweeps``, DEBUG).  A no-op in a pipe."""

    def __init__(self):
        import logging
        self.bar, self.handler = _tqdm(), None
        if self.bar is None:
            return
        self.steps = self.bar(desc="ML-II steps", unit="step", position=0)
        self.sweeps = self.bar(desc="EP sweeps", unit="sweep", position=1)
        outer = self

        class Handler(logging.Handler):
            def emit(self, record):
                msg = record.getMessage()
                if record.name == "fastep" and not msg.startswith("ML-II step"):
                    return
                bar = outer.sweeps if record.name == "fastep.sweeps" else outer.steps
                bar.update(1)
                bar.set_postfix_str(msg.split(":", 1)[-1].strip()[:40], refresh=False)

        self.handler = Handler()
        for name, level in (("fastep", logging.INFO), ("fastep.sweeps", logging.DEBUG)):
            log = logging.getLogger(name)
            log.addHandler(self.handler)
            log.setLevel(level)
        logging.getLogger("fastep.sweeps").propagate = False

    def close(self):
        if self.handler is None:
            return
        import logging
        for name in ("fastep", "fastep.sweeps"):
            logging.getLogger(name).removeHandler(self.handler)
        logging.getLogger("fastep.sweeps").propagate = True
        self.steps.close()
        self.sweeps.close()
