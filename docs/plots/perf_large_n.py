"""Sparse EP at large n, where the data live: seconds per parallel sweep against n with X
in memory, out of core (a memory-mapped file read chunk by chunk) and on a local Dask
cluster of two worker processes, with a line of slope one."""
import matplotlib.pyplot as plt
from _record import finish, load, record

rows, caption = load("dask_scaling")
m = record("dask_scaling")["m"]
n = [r["n"] for r in rows]
fig, ax = plt.subplots(figsize=(6.4, 4.0))
for key, style, label in (("in_memory", "o-", "in memory (threads)"),
                          ("memmap", "s-", "out of core (X memory-mapped)"),
                          ("dask", "^-", "Dask (2 worker processes, 1 thread each)")):
    ax.loglog(n, [r[key] for r in rows], style, label=label)
ax.loglog(n, [rows[0]["in_memory"] * x / n[0] for x in n], ":", color="0.5",
          label="O(n) from the smallest n")
for r in rows:
    ax.annotate(f"Dask {r['dask'] / r['in_memory']:.2f}x", (r["n"], r["dask"]),
                textcoords="offset points", xytext=(6, 4), fontsize=8)
ax.set_xlim(n[0] / 1.5, n[-1] * 3)
ax.set_xlabel("n (training points)")
ax.set_ylabel("seconds per sweep")
ax.set_title(f"Sparse EP (probit, d = 3, m = {m}): in memory, out of core, on Dask",
             fontsize=10)
ax.legend(fontsize=8, loc="upper left")
finish(fig, caption)
