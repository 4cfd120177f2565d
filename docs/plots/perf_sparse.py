"""Sparse EP: one parallel sweep against n, with the BLAS work it cannot avoid (its
``dsyrk`` over the same chunks and threads) and a line of slope one."""
import matplotlib.pyplot as plt
from _record import finish, load

rows, caption = load("sparse_scaling")
n = [r["n"] for r in rows]
fig, ax = plt.subplots(figsize=(6.4, 4.0))
ax.loglog(n, [r["sweep"] for r in rows], "o-", label="fastep: one sparse EP sweep (m = 256)")
ax.loglog(n, [r["floor"] for r in rows], "k--", label="floor: the sweep's dsyrk alone")
ax.loglog(n, [rows[0]["sweep"] * x / n[0] for x in n], ":", color="0.5",
          label="O(n) from the smallest n")
for r in rows:
    ax.annotate(f"{r['sweep'] / r['floor']:.1f}x floor", (r["n"], r["sweep"]),
                textcoords="offset points", xytext=(6, -12), fontsize=8)
ax.set_xlabel("n (training points)")
ax.set_ylabel("seconds per sweep")
ax.set_title("Sparse EP (probit, d = 3): linear in n", fontsize=11)
ax.legend(fontsize=8, loc="upper left")
finish(fig, caption)
