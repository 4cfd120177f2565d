"""Dense EP against its floor: one parallel sweep, a whole fixed-kernel fit and
scikit-learn's Laplace fit, against the LAPACK work a sweep cannot avoid."""
import matplotlib.pyplot as plt
from _record import finish, load

rows, caption = load("ep_floor")
n = [r["n"] for r in rows]
fig, ax = plt.subplots(figsize=(6.4, 4.0))
for key, label, style in (("floor", "floor: Cholesky + triangular inverse (LAPACK)", "k--"),
                          ("parallel", "fastep: one parallel EP sweep", "o-"),
                          ("fit", "fastep: whole fit, kernel fixed", "s-"),
                          ("sklearn", "scikit-learn GaussianProcessClassifier fit", "^-")):
    if all(key in r for r in rows):
        ax.loglog(n, [r[key] for r in rows], style, label=label)
last = rows[-1]
ax.annotate(f"sweep / floor = {last['parallel'] / last['floor']:.2f}",
            (n[-1], last["parallel"]), textcoords="offset points", xytext=(-120, 12))
ax.set_xlabel("n (training points)")
ax.set_ylabel("seconds")
ax.set_title("Dense EP (probit, RBF kernel)", fontsize=11)
ax.legend(fontsize=8, loc="upper left")
finish(fig, caption)
