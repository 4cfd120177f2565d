"""State-space EP: the time of one EP iteration per point against n (flat: O(n)), and
the filter-smoother pass plus the tilted moments alone (the floor)."""
import matplotlib.pyplot as plt
from _record import finish, load

rows, caption = load("markov_scaling")
n = [r["n"] for r in rows]
fig, ax = plt.subplots(figsize=(6.4, 4.0))
ax.semilogx(n, [1e6 * r["iteration"] / r["n"] for r in rows], "o-",
            label="fastep: one state-space EP iteration")
ax.semilogx(n, [1e6 * r["floor"] / r["n"] for r in rows], "k--",
            label="floor: one filter-smoother pass + tilted moments")
ax.set_ylim(0, 1.3 * max(1e6 * r["iteration"] / r["n"] for r in rows))
ax.set_xlabel("n (time points of one series)")
ax.set_ylabel("microseconds per point")
ax.set_title("State-space EP (Poisson, Matern-3/2): constant cost per point", fontsize=11)
ax.legend(fontsize=8, loc="lower left")
finish(fig, caption)
