"""Per-site cost and accuracy of every built-in likelihood's tilted moments.

Ordinary cavities (the issue's): 20,000 sites, cavity means N(0, 1), variances U(0.2, 2),
targets drawn from each likelihood at a latent N(0, 1).  For each likelihood this prints
the per-site time of ``likelihood.tilted`` (the parallel batch, best of ``--repeats``)
and its ratio to Probit's, measured in the same run, then the largest relative error
(``|a - b| / max(|b|, 1e-3)``) of log Z, its two mu-derivatives and each parameter's
``tilted_dparams`` against the adaptive panel quadrature
(:data:`fastep.likelihoods._quadrature.panel_moments`, the reference the fast path hands
over to), on the ordinary cavities and on an adversarial set (cavity variance 1e4 under
a steep logistic, counts of 10^4, zero-inflation near 0 and 1, Student-t with df 1.5 and
outliers, censored survival times far in the tails).  ``--check`` exits 1 if a
likelihood costs over 5x Probit or an error exceeds 1e-9.

``--sweep N`` adds one parallel sparse EP sweep at n = N (m = 128 inducing points from X,
d = 4, RBF(1, 1); ``(t(max_iter=5) - t(max_iter=1)) / 4`` of ``fastep.sparse_ep(...,
schedule="parallel", tol=1e-300)``, median of ``--repeats``) for probit, logistic and
Poisson targets drawn from the same latent, interleaved, with the ratios to probit's
(``--check``: at most 1.5).

    python scripts/tilted_cost.py [--n 20000] [--repeats 5] [--sweep 100000] [--check]
"""
import argparse
import sys
import time
import warnings

import numpy as np
from numba import njit, prange

import fastep.likelihoods as fl
from fastep.likelihoods import _scalar as S

LIMIT_COST = 5.0
LIMIT_ERR = 1e-9
LIMIT_SWEEP = 1.5


def ordinary(n, seed=0):
    """{name: (likelihood, y, extra or None, mu, var, kind or None)} on ordinary cavities."""
    rng = np.random.default_rng(seed)
    f = rng.standard_normal(n)
    mu = rng.standard_normal(n)
    var = rng.uniform(0.2, 2.0, n)
    sign = np.where(rng.uniform(size=n) < 1.0 / (1.0 + np.exp(-f)), 1.0, -1.0)
    counts = rng.poisson(np.exp(f)).astype(float)
    nb = rng.negative_binomial(2.0, 2.0 / (2.0 + np.exp(f))).astype(float)
    zi = np.where(rng.uniform(size=n) < 0.3, 0.0, counts)
    times = np.exp(f + rng.gumbel(size=n) * 0.7)
    event = (rng.uniform(size=n) < 0.7).astype(float)[:, None]
    trials = rng.integers(1, 20, n).astype(float)
    succ = rng.binomial(trials.astype(int), 1.0 / (1.0 + np.exp(-f))).astype(float)
    levels = np.digitize(f + rng.standard_normal(n), [-1.0, 0.0, 1.0]).astype(float)
    zero = np.zeros((n, 1))
    return {
        "Probit": (fl.Probit(), sign, None, S.PROBIT),
        "Gaussian": (fl.Gaussian(0.5), f + rng.standard_normal(n), None, None),
        "Tobit": (fl.Tobit(0.5, lower=0.0), np.maximum(f, 0.0), None, None),
        "OrdinalProbit": (fl.OrdinalProbit([-1.0, 0.0, 1.0]), levels, None, S.ORDINAL),
        "Logistic": (fl.Logistic(), sign, None, S.LOGISTIC),
        "StudentT": (fl.StudentT(df=4.0, scale=0.5), f + 0.5 * rng.standard_t(4.0, n), None,
                     S.STUDENT_T),
        "Poisson": (fl.Poisson(), counts, zero, S.POISSON),
        "NegativeBinomial": (fl.NegativeBinomial(2.0), nb, zero, S.NEG_BINOMIAL),
        "ZeroInflatedPoisson": (fl.ZeroInflatedPoisson(0.3), zi, zero, S.ZI_POISSON),
        "ZeroInflatedNegativeBinomial": (fl.ZeroInflatedNegativeBinomial(2.0, 0.3), zi,
                                         zero, S.ZI_NEG_BINOMIAL),
        "Binomial": (fl.Binomial(), succ, trials[:, None], S.BINOMIAL),
        "Weibull": (fl.Weibull(1.5), times, event, S.WEIBULL),
        "LogLogistic": (fl.LogLogistic(2.0), times, event, S.LOG_LOGISTIC),
        "LogNormal": (fl.LogNormal(0.7), times, event, S.LOG_NORMAL),
    }, mu, var


def adversarial():
    """[(name, likelihood, y, extra, mu, var)]: the hard cavities of the issue."""
    out = []
    v = np.array([1e4, 1e4, 1e3, 50.0, 1e4, 1.0])
    m = np.array([0.0, 30.0, -100.0, 5.0, -300.0, 0.0])
    out.append(("Logistic wide", fl.Logistic(), np.array([1.0, -1.0, 1.0, -1.0, 1.0, 1.0]),
                None, m, v))
    out.append(("Poisson 1e4", fl.Poisson(), np.array([1e4, 1e4, 0.0, 3e4, 1e4, 0.0]),
                np.zeros((6, 1)), np.array([9.2, 0.0, 9.0, 5.0, 12.0, -5.0]),
                np.array([0.01, 4.0, 1e2, 1.0, 0.5, 30.0])))
    out.append(("NegativeBinomial 1e4", fl.NegativeBinomial(0.5),
                np.array([1e4, 0.0, 3.0, 1e3]), np.zeros((4, 1)),
                np.array([9.0, 5.0, -4.0, 0.0]), np.array([1.0, 10.0, 1e3, 4.0])))
    for pi in (1e-6, 0.5, 0.999):
        out.append((f"ZeroInflatedPoisson pi={pi:g}", fl.ZeroInflatedPoisson(pi),
                    np.array([0.0, 0.0, 0.0, 4.0]), np.zeros((4, 1)),
                    np.array([0.0, 3.0, -2.0, 1.0]), np.array([1.0, 4.0, 25.0, 2.0])))
        out.append((f"ZeroInflatedNegativeBinomial pi={pi:g}",
                    fl.ZeroInflatedNegativeBinomial(1.5, pi), np.array([0.0, 0.0, 7.0]),
                    np.zeros((3, 1)), np.array([0.0, 3.0, 1.0]), np.array([1.0, 9.0, 2.0])))
    out.append(("StudentT df=1.5 outliers", fl.StudentT(df=1.5, scale=0.1),
                np.array([0.0, 8.0, -20.0, 3.0, 50.0]), None,
                np.array([0.0, 0.0, 0.0, 0.5, 0.0]), np.array([1.0, 1.0, 4.0, 0.01, 100.0])))
    for lik in (fl.Weibull(3.0), fl.LogLogistic(4.0), fl.LogNormal(0.3)):
        out.append((f"{type(lik).__name__} tails", lik,
                    np.array([1e-4, 1e4, 1.0, 1e-3, 50.0]),
                    np.array([[0.0], [0.0], [1.0], [1.0], [1.0]]),
                    np.array([5.0, -5.0, 0.0, 3.0, -2.0]), np.array([1.0, 4.0, 100.0, 0.5, 9.0])))
    return out


@njit(parallel=True, cache=True)
def _panel_batch(kind, y, extra, mu, var, alpha, params, k, out):
    for i in prange(y.shape[0]):
        r = panel_moments(kind, y[i], extra[i], mu[i], var[i], alpha, params, k)
        for j in range(4):
            out[i, j] = r[j]


try:                          # the reference; absent before 0.3 (--sweep still runs there)
    from fastep.likelihoods._quadrature import panel_moments
except ImportError:           # pragma: no cover
    panel_moments = None


def _kind(lik):
    return {fl.Probit: S.PROBIT, fl.Logistic: S.LOGISTIC, fl.StudentT: S.STUDENT_T,
            fl.Poisson: S.POISSON, fl.NegativeBinomial: S.NEG_BINOMIAL,
            fl.ZeroInflatedPoisson: S.ZI_POISSON,
            fl.ZeroInflatedNegativeBinomial: S.ZI_NEG_BINOMIAL, fl.Binomial: S.BINOMIAL,
            fl.Weibull: S.WEIBULL, fl.LogLogistic: S.LOG_LOGISTIC,
            fl.LogNormal: S.LOG_NORMAL, fl.OrdinalProbit: S.ORDINAL}.get(type(lik))


def errors(lik, y, extra, mu, var, alpha=1.0):
    """Largest relative error of (log Z, d1, d2, each parameter gradient) against the
    panels; None for a likelihood with a closed form (nothing to compare)."""
    kind = _kind(lik)
    if kind is None:
        return None
    n = y.shape[0]
    ext = np.zeros((n, 0)) if extra is None else np.ascontiguousarray(extra, dtype=float)
    got = np.array(lik.tilted(y, mu, var, alpha, extra=extra))
    ref = np.empty((n, 4))
    params = np.asarray(lik.params, dtype=float)
    _panel_batch(kind, y, ext, mu, var, alpha, params, -1, ref)
    count_kind = getattr(lik, "count_kind", -1)
    if count_kind >= 0:
        # zero-inflated: the exact split of the class (a count site, or at y = 0 the
        # mixture of the cavity and the count's tilted density), on the panels' moments
        pi = params[-1]
        cnt = np.empty((n, 4))
        _panel_batch(count_kind, y, ext, mu, var, alpha, params, -1, cnt)
        zero = y == 0.0
        ref[~zero, 0] = alpha * np.log1p(-pi) + cnt[~zero, 0]
        ref[~zero, 1:3] = cnt[~zero, 1:3]
        b = np.log1p(-pi) + cnt[zero, 0]
        lz = np.logaddexp(np.log(pi), b)
        w = np.exp(b - lz)
        ref[zero, 0] = lz
        ref[zero, 1] = w * cnt[zero, 1]
        ref[zero, 2] = w * cnt[zero, 2] + w * (1 - w) * cnt[zero, 1] ** 2
    errs = [np.max(np.abs(got[j] - ref[:, j]) / np.maximum(np.abs(ref[:, j]), 1e-3))
            for j in range(3)]
    # (the zero-inflated parameter gradients come from their count process's, checked
    # with it; the panels of the zero-inflated kinds have none of their own)
    if lik.n_dims and getattr(lik, "quad_kind", -2) == kind and count_kind < 0:
        gd = lik.tilted_dparams(y, mu, var, extra=extra, alpha=alpha)
        names = list(lik.param_names)
        for j, name in enumerate(lik._free()):
            k = names.index(name)
            _panel_batch(kind, y, ext, mu, var, alpha, params, k, ref)
            r = ref[:, 3] * params[k]
            errs.append(np.max(np.abs(gd[:, j] - r) / np.maximum(np.abs(r), 1e-3)))
    return max(errs)


def per_site(lik, y, extra, mu, var, repeats):
    lik.tilted(y[:10], mu[:10], var[:10], extra=None if extra is None else extra[:10])
    best = np.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        lik.tilted(y, mu, var, extra=extra)
        best = min(best, time.perf_counter() - t0)
    return best / y.shape[0]


def sweeps(n, repeats, m=128, seed=0):
    """{name: median seconds of one parallel sparse sweep} at n rows."""
    import statistics

    import fastep
    from fastep.kernels import RBF
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 4))
    f = np.sin(X[:, 0]) + 0.5 * X[:, 1] * X[:, 2]
    Z = X[rng.choice(n, m, replace=False)]
    problems = {
        "Probit": (fl.Probit(), np.where(f + rng.standard_normal(n) > 0, 1.0, -1.0), None),
        "Logistic": (fl.Logistic(), np.where(rng.uniform(size=n) < 1 / (1 + np.exp(-f)),
                                             1.0, -1.0), None),
        "Poisson": (fl.Poisson(), rng.poisson(np.exp(f)).astype(float), None),
    }
    kernel = RBF(1.0, 1.0)

    def run(lik, y, extra, iters):
        t0 = time.perf_counter()
        with warnings.catch_warnings():           # max_iter is the point: no convergence
            warnings.simplefilter("ignore", fastep.ConvergenceWarning)
            fastep.sparse_ep(kernel, Z, X, y, lik, extra=extra, max_iter=iters,
                             tol=1e-300, schedule="parallel")
        return time.perf_counter() - t0

    for lik, y, extra in problems.values():                # compile and warm
        run(lik, y, extra, 1)
    times: dict = {name: [] for name in problems}
    for _ in range(repeats):
        for name, (lik, y, extra) in problems.items():
            times[name].append((run(lik, y, extra, 5) - run(lik, y, extra, 1)) / 4.0)
    return {name: statistics.median(t) for name, t in times.items()}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--sweep", type=int, default=0, metavar="N")
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args(argv)
    table, mu, var = ordinary(args.n)
    bad = []
    costs = {name: per_site(lik, y, extra, mu, var, args.repeats)
             for name, (lik, y, extra, _) in table.items()}
    probit = costs["Probit"]
    print(f"{'likelihood':30s} {'us/site':>9s} {'x probit':>9s} {'max rel err':>12s}")
    for name, (lik, y, extra, _) in table.items():
        err = errors(lik, y, extra, mu, var)
        ratio = costs[name] / probit
        print(f"{name:30s} {1e6 * costs[name]:9.3f} {ratio:9.2f} "
              f"{'closed form' if err is None else f'{err:12.2e}':>12s}")
        if ratio > LIMIT_COST or (err is not None and err > LIMIT_ERR):
            bad.append(name)
    print("\nadversarial cavities (alpha 1 and 0.5): max relative error against the panels")
    for name, lik, y, extra, m, v in adversarial():
        alphas = (1.0,) if getattr(lik, "count_kind", -1) >= 0 else (1.0, 0.5)
        err = max(errors(lik, y, extra, m, v, alpha) for alpha in alphas)
        print(f"{name:40s} {err:12.2e}")
        if err > LIMIT_ERR:
            bad.append(name)
    if args.sweep:
        t = sweeps(args.sweep, args.repeats)
        print(f"\none parallel sparse sweep, n = {args.sweep:,}, m = 128 (median of "
              f"{args.repeats}):")
        for name, sec in t.items():
            ratio = sec / t["Probit"]
            print(f"{name:10s} {sec:8.3f} s {ratio:6.2f} x probit")
            if ratio > LIMIT_SWEEP:
                bad.append(f"{name} sweep")
    if args.check and bad:
        print("over the limits:", ", ".join(bad))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
