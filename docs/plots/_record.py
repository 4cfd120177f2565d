"""Reading the measurements the performance page plots (``docs/data/*.json``, written by
the ``--save`` option of the scripts in ``scripts/``)."""
import json
import pathlib

DATA = pathlib.Path(__file__).resolve().parents[1] / "data"


def load(name, extra=None):
    """``(rows, caption)`` of ``docs/data/<name>.json``: its rows and a line naming the
    script, the date, the machine and the versions (``extra``: that entry of the record
    instead, e.g. the peers' versions)."""
    record = json.loads((DATA / f"{name}.json").read_text())
    if extra is not None:
        return record[extra]
    env = record["environment"]
    caption = (f"scripts/{record['script']}, {env['date']}, {env['cores']} cores, "
               f"fastep {env['fastep']}, numpy {env['numpy']}, numba {env['numba']}")
    return record["rows"], caption


def finish(fig, caption, bottom=0.03):
    """The figure's footer (the record's ``caption``) and its layout above it."""
    fig.text(0.01, bottom / 3, caption, fontsize=6, color="0.4")
    fig.tight_layout(rect=(0, bottom, 1, 1))
