"""Whole fits of binary GP classifiers on real tables: fastep against scikit-learn,
GPflow and GPy, seconds with each fit's held-out log loss."""
import matplotlib.pyplot as plt
from _record import finish, load

rows, caption = load("comparison")
tables = list(dict.fromkeys(r["table"] for r in rows))
fig, axes = plt.subplots(len(tables), 1, figsize=(7.5, 1.0 + 0.5 * len(rows)),
                         gridspec_kw={"height_ratios": [
                             sum(r["table"] == t for r in rows) for t in tables]})
for ax, table in zip(axes, tables):
    mine = [r for r in rows if r["table"] == table]
    colors = ["C0" if r["method"].startswith("fastep") else "0.6" for r in mine]
    ax.barh(range(len(mine)), [r["seconds"] for r in mine], color=colors)
    ax.set_yticks(range(len(mine)), [r["method"] for r in mine], fontsize=7)
    ax.invert_yaxis()
    ax.set_xscale("log")
    for i, r in enumerate(mine):
        ax.text(r["seconds"], i, f" {r['seconds']:.2f} s ({r['ratio']:.1f}x), log loss "
                f"{r['log_loss']:.3f}", va="center", fontsize=6)
    ax.set_title(f"{table} ({mine[0]['n_train']:,} training rows)", fontsize=9, loc="left")
    ax.set_xlim(right=ax.get_xlim()[1] * 30)
axes[-1].set_xlabel("seconds for the whole fit, hyperparameters included (log scale)")
finish(fig, caption + "; " + ", ".join(f"{k} {v}" for k, v in
                                      load("comparison", extra="peers").items()),
       bottom=0.02)
