"""The whole fit (ML-II included) on real tables against what a user would fit instead,
with each fit's held-out metric."""
import matplotlib.pyplot as plt
from _record import finish, load

rows, caption = load("fit_time")
tables = list(dict.fromkeys(r["table"] for r in rows))
fig, axes = plt.subplots(len(tables), 1, figsize=(7.5, 1.0 + 0.55 * len(rows)),
                         gridspec_kw={"height_ratios": [
                             sum(r["table"] == t for r in rows) for t in tables]})
for ax, table in zip(axes, tables):
    mine = [r for r in rows if r["table"] == table]
    names = [r["fit"].replace("EPGaussianProcess", "EPGP") for r in mine]
    colors = ["C0" if r["fit"].startswith("fastep") else "0.6" for r in mine]
    ax.barh(range(len(mine)), [r["seconds"] for r in mine], color=colors)
    ax.set_yticks(range(len(mine)), names, fontsize=7)
    ax.invert_yaxis()
    ax.set_xscale("log")
    for i, r in enumerate(mine):
        ax.text(r["seconds"], i, f" {r['seconds']:.2f} s, {r['metric']}", va="center",
                fontsize=6)
    ax.set_title(table, fontsize=9, loc="left")
    ax.set_xlim(right=ax.get_xlim()[1] * 12)
axes[-1].set_xlabel("seconds (log scale)")
finish(fig, caption, bottom=0.02)
