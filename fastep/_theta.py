"""How one entry of an ML-II problem's ``theta`` is named, shown and bounded in messages
(:class:`ThetaEntry`): kernels and likelihoods describe their own parameters with it
(``theta_entries()``), so that ML-II's warnings about bounds need no knowledge of any
parameter's name."""
from __future__ import annotations

import math
from dataclasses import dataclass

#: How ``theta`` relates to the value a message shows, and what a 10x wider bound is.
SCALES = ("log", "plain", "signed")


@dataclass(frozen=True)
class ThetaEntry:
    """One entry of ``theta``, as ML-II's messages name it.

    Parameters
    ----------
    name : str
        The name messages use (``"lengthscale[1]"``, ``"likelihood df"``).
    widen : str
        How to widen its bounds (the hint of a "widen the bounds" warning).
    fix : str
        How to fix its value (the hint of a "the evidence is flat there" warning).
    scale : {'log', 'plain', 'signed'}, default 'log'
        ``'log'``: theta is the log of the value shown, and a 10x wider bound is ln 10
        further; ``'plain'``: theta is shown as it is (a log itself, such as an ordinal
        log gap), ln 10 further; ``'signed'``: theta is the value, of either sign, and a
        10x wider bound is ``9 |bound|`` further.
    at_upper : str or None, default None
        The warning where ML-II leaves it at its upper bound and the evidence does not
        pull it further, in place of the bound warning (``{owner}`` and ``{value}`` are
        filled in): a limit that is a model of its own, such as a Student-t's df at
        infinity, a Gaussian.

    Examples
    --------
    >>> entry = ThetaEntry("lengthscale", "lengthscale_bounds=(low, high)",
    ...                    "lengthscale_bounds='fixed'")
    >>> value, step, log = entry.shown(0.0)
    >>> float(value), round(step, 4), log
    (1.0, 2.3026, 'log ')
    """

    name: str
    widen: str
    fix: str
    scale: str = "log"
    at_upper: str | None = None

    def __post_init__(self):
        if self.scale not in SCALES:
            raise ValueError(f"scale must be one of {SCALES}; got {self.scale!r}.")

    def shown(self, edge: float) -> tuple[float, float, str]:
        """``(the value a message shows, theta's step to a 10x wider bound, "log " or
        "")`` at theta = ``edge``."""
        if self.scale == "log":
            return math.exp(edge), math.log(10.0), "log "
        if self.scale == "signed":
            return edge, 9.0 * abs(edge), ""
        return edge, math.log(10.0), ""


def entries_of(name, size, widen, fix, **kwargs):
    """The :class:`ThetaEntry` of each of the ``size`` entries of one parameter (named
    ``name``, or ``name[j]`` where it has several), sharing the hints ``widen`` and
    ``fix`` (and ``kwargs``)."""
    names = [name] if size == 1 else [f"{name}[{j}]" for j in range(size)]
    return [ThetaEntry(label, widen, fix, **kwargs) for label in names]
