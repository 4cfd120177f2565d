"""The whole fit (ML-II included) on real tables against what a user would fit instead,
with each fit's held-out metric."""
from _record import bar_panels, finish, load

rows, caption = load("fit_time")
fig = bar_panels(rows, "table", lambda r: r["fit"].replace("EPGaussianProcess", "EPGP"),
                 lambda r: f"{r['seconds']:.2f} s, {r['metric']}", lambda r: r["table"],
                 "seconds (log scale)")
finish(fig, caption, bottom=0.02)
