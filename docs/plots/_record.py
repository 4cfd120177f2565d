"""Reading the measurements the performance page plots (``docs/data/*.json``, written by
the ``--save`` option of the scripts in ``scripts/``)."""
import json
import pathlib

DATA = pathlib.Path(__file__).resolve().parents[1] / "data"


def record(name):
    """The whole record ``docs/data/<name>.json`` (its rows, environment and extras)."""
    return json.loads((DATA / f"{name}.json").read_text())


def load(name):
    """``(rows, caption)`` of ``docs/data/<name>.json``: its rows and a line naming the
    script, the date, the machine and the versions."""
    rec = record(name)
    env = rec["environment"]
    caption = (f"scripts/{rec['script']}, {env['date']}, {env['cores']} cores, "
               f"fastep {env['fastep']}, numpy {env['numpy']}, numba {env['numba']}")
    return rec["rows"], caption


def finish(fig, caption, bottom=0.03):
    """The figure's footer (the record's ``caption``) and its layout above it."""
    fig.text(0.01, bottom / 3, caption, fontsize=6, color="0.4")
    fig.tight_layout(rect=(0, bottom, 1, 1))


def bar_panels(rows, group, label, note, title, xlabel, room=12):
    """One panel of horizontal bars of ``row["seconds"]`` (log scale) per value of
    ``row[group]`` (in order of first appearance), a bar per row labelled ``label(row)``
    and annotated ``note(row)``; fastep's rows (``label`` starting "fastep") in colour.
    Returns the figure."""
    import matplotlib.pyplot as plt
    groups = list(dict.fromkeys(r[group] for r in rows))
    sizes = [sum(r[group] == g for r in rows) for g in groups]
    fig, axes = plt.subplots(len(groups), 1, figsize=(7.5, 1.0 + 0.55 * len(rows)),
                             gridspec_kw={"height_ratios": sizes}, squeeze=False)
    for ax, g in zip(axes[:, 0], groups):
        mine = [r for r in rows if r[group] == g]
        names = [label(r) for r in mine]
        ax.barh(range(len(mine)), [r["seconds"] for r in mine],
                color=["C0" if name.startswith("fastep") else "0.6" for name in names])
        ax.set_yticks(range(len(mine)), names, fontsize=7)
        ax.invert_yaxis()
        ax.set_xscale("log")
        for i, r in enumerate(mine):
            ax.text(r["seconds"], i, " " + note(r), va="center", fontsize=6)
        ax.set_title(title(mine[0]), fontsize=9, loc="left")
        ax.set_xlim(right=ax.get_xlim()[1] * room)
    axes[-1, 0].set_xlabel(xlabel)
    return fig
