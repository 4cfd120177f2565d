"""fastep's speed over its releases: asv's times of the dense EP fits and of the Gram
matrix at each measured commit (asv's own results on one machine, quick mode: one
sample each), one line per benchmark."""
import math

import matplotlib.pyplot as plt
from _record import finish, load

rows, caption = load("asv_history")
commits = sorted({(r["order"], r["label"], r["date"]) for r in rows})
WANTED = [("bench_ep.EPFit.time_fit", ["parallel", "1000"], "dense EP fit, parallel, n = 1,000"),
          ("bench_ep.EPFit.time_fit", ["parallel", "4000"], "dense EP fit, parallel, n = 4,000"),
          ("bench_ep.EPFit.time_fit", ["sequential", "2000"], "dense EP fit, sequential, n = 2,000"),
          ("bench_ep.Kernels.time_gram", ["4000"], "RBF Gram matrix, n = 4,000"),
          ("bench_ep.Kernels.time_gradient_contract", ["4000"],
           "RBF gradient contraction, n = 4,000")]


def seconds(bench, params, order):
    for r in rows:
        if (r["benchmark"] == bench and [p.strip("'") for p in r["params"]] == params
                and r["order"] == order):
            return r["seconds"]
    return math.nan


fig, ax = plt.subplots(figsize=(7.0, 5.0))
x = list(range(len(commits)))
for bench, params, label in WANTED:
    y = [seconds(bench, params, order) for order, _, _ in commits]
    if all(math.isnan(v) for v in y):
        continue
    last = next((v for v in reversed(y) if not math.isnan(v)), math.nan)
    first = next((v for v in y if not math.isnan(v)), math.nan)
    ax.semilogy(x, y, "o-", label=f"{label} (first / main: {first / last:.1f}x)")
ax.set_xticks(x, [f"{label}\n{date}" for _, label, date in commits], fontsize=8)
ax.set_ylabel("seconds (asv, quick mode)")
ax.set_title("fastep over its releases: the same benchmarks at each commit", fontsize=11)
ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2)
finish(fig, caption)
