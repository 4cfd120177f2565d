"""Whole fits of binary GP classifiers on real tables: fastep against scikit-learn,
GPflow and GPy, seconds with each fit's held-out log loss."""
from _record import bar_panels, finish, load, record

rows, caption = load("comparison")
fig = bar_panels(rows, "table", lambda r: r["method"],
                 lambda r: f"{r['seconds']:.2f} s ({r['ratio']:.1f}x), log loss "
                           f"{r['log_loss']:.3f}",
                 lambda r: f"{r['table']} ({r['n_train']:,} training rows)",
                 "seconds for the whole fit, hyperparameters included (log scale)", room=30)
peers = record("comparison")["peers"]
finish(fig, caption + "; " + ", ".join(f"{k} {v}" for k, v in peers.items()), bottom=0.02)
