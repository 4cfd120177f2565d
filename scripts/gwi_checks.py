"""Print the numerical checks of multiclass GWI against independent truth.

    python scripts/gwi_checks.py

* S(x, j) (20 Gauss-Hermite nodes) against Monte Carlo with 10^6 draws: largest |z| score;
* predictive probabilities: largest |row sum - 1| over 2000 random points, J = 10;
* every analytic gradient against five-point central finite differences: largest relative
  error (entries below 1e-5 of the largest held to that absolute level) for S(x, y) in the
  means and variances, the W2 estimator in m_Q, diag r and R_SS, the whole objective
  (W2^2 and W2) in every variational parameter, and the tempering loss;
* the W2 estimator with X_S = X against W_2^2 / N from scipy.linalg.sqrtm.

tests/inference/test_gwi.py and tests/likelihoods/test_robustmax.py assert the same
properties; this prints the numbers.
"""
import pathlib
import sys

import numpy as np
import scipy.linalg as sl

from fastep.inference import gwi
from fastep.kernels import RBF
from fastep.likelihoods import RobustMax


sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tests"))
from helpers.reference import fd_grad as fd  # noqa: E402  (five-point central differences)


def rel_err(g, ref):
    floor = 1e-5 * np.max(np.abs(ref))
    return float(np.max(np.abs(g - ref) / np.maximum(np.abs(ref), floor)))


def main():
    rng = np.random.default_rng(0)
    # S(x, j) against Monte Carlo
    z_max = 0.0
    for J in (3, 5, 10):
        mean, var = rng.normal(size=J), rng.uniform(0.4, 1.6, J)
        S = RobustMax(J).prob_largest(mean[None], var[None])[0]
        draws = mean + np.sqrt(var) * rng.standard_normal((10 ** 6, J))
        hits = np.bincount(draws.argmax(1), minlength=J) / 1e6
        z_max = max(z_max, float(np.max(np.abs(S - hits) / np.sqrt(hits * (1 - hits) / 1e6))))
    print(f"S(x, j) vs Monte Carlo (10^6 draws, J = 3, 5, 10): max |z| = {z_max:.2f}")

    lik = RobustMax(10)
    p = lik.predict_proba(3 * rng.normal(size=(2000, 10)), rng.uniform(0.05, 3.0, (2000, 10)))
    print(f"predict_proba rows: max |sum - 1| = {np.max(np.abs(p.sum(1) - 1)):.2e}")

    # gradients of S(x, y)
    J = 4
    mean, var = 1.5 * rng.normal(size=(5, J)), rng.uniform(0.3, 1.5, (5, J))
    y = rng.integers(0, J, 5)
    lik = RobustMax(J)
    _, dm, dv = lik.prob_largest_grad(mean, var, y)
    e_m = max(rel_err(dm[i], fd(lambda x: lik.prob_largest_grad(
        x[None], var[i:i + 1], y[i:i + 1])[0][0], mean[i], 1e-3)) for i in range(5))
    e_v = max(rel_err(dv[i], fd(lambda x: lik.prob_largest_grad(
        mean[i:i + 1], x[None], y[i:i + 1])[0][0], var[i], 1e-4)) for i in range(5))
    print(f"dS/dmean, dS/dvar vs finite differences: max rel. error {e_m:.1e}, {e_v:.1e}")

    # W2 estimator: exact at X_S = X, and its gradients
    X = rng.normal(size=(25, 2))
    K = RBF(1.5, 0.8)(X) + 1e-8 * np.eye(25)
    A = rng.normal(size=(25, 25))
    R = A @ A.T / 25 + 0.05 * np.eye(25)
    m_q = rng.normal(size=25)
    root = sl.sqrtm(K)
    exact = (np.sum((m_q - 0.3) ** 2) + np.trace(K) + np.trace(R)
             - 2 * np.trace(sl.sqrtm(root @ R @ root)).real) / 25
    est, g_m, g_r, g_R = gwi.w2_squared(0.3, m_q, np.diag(K), np.diag(R), K, R, True)
    print(f"W2 estimator (X_S = X) vs sqrtm W2^2 / N: {est:.12f} vs {exact:.12f}, rel. error "
          f"{abs(est - exact) / exact:.1e}")
    iu = np.triu_indices(25)

    def sym(x):
        S = np.zeros((25, 25))
        S[iu] = x
        return S + np.triu(S, 1).T

    errs = [rel_err(g_m, fd(lambda x: gwi.w2_squared(0.3, x, np.diag(K), np.diag(R), K, R),
                            m_q, 1e-3)),
            rel_err(g_r, fd(lambda x: gwi.w2_squared(0.3, m_q, np.diag(K), x, K, R),
                            np.diag(R).copy(), 1e-3)),
            rel_err(np.where(iu[0] == iu[1], 1.0, 2.0) * g_R[iu],
                    fd(lambda x: gwi.w2_squared(0.3, m_q, np.diag(K), np.diag(R), K, sym(x)),
                       R[iu], 1e-4))]
    print("W2 estimator gradients (m_Q, diag r, R_SS) vs finite differences: max rel. error "
          + ", ".join(f"{e:.1e}" for e in errs))

    # the whole objective
    N, D, J, M = 30, 2, 3, 6
    X = rng.normal(size=(N, D))
    y = rng.integers(0, J, N)
    k = RBF(1.3, 0.8)
    Z = X[rng.choice(N, M, replace=False)]
    f = gwi.gwi_factors(k, X, Z, gwi.inducing_cholesky(k, Z))
    sub = gwi.subsample(k, X, f, rng.choice(N, 8, replace=False))
    p = gwi.initial_params(f, y, J, linear_dim=D)
    p.a += rng.normal(size=p.a.shape)
    p.L += 0.3 * np.tril(rng.normal(size=p.L.shape))
    p.W += 0.3 * rng.normal(size=p.W.shape)
    lik = RobustMax(J)
    for squared in (True, False):
        def value(theta):
            q = gwi.GWIParams.unpack(theta, J, M, D)
            return gwi.gwi_objective(q, f, sub, X, y, lik, 0.1, squared)[0]
        g = gwi.gwi_objective(p, f, sub, X, y, lik, 0.1, squared)[1].pack()
        print(f"objective ({'W2^2' if squared else 'W2'}) gradient in all {g.size} variational "
              f"parameters vs finite differences: max rel. error "
              f"{rel_err(g, fd(value, p.pack(), 1e-4)):.1e}")

    # tempering loss gradient (scalar log T)
    n = 200
    y = rng.integers(0, 4, n)
    mean = rng.normal(size=(n, 4)) + 1.5 * (y[:, None] == np.arange(4))
    var = rng.uniform(0.05, 0.3, (n, 4))
    lik = RobustMax(4)
    _, g = gwi.tempered_log_loss(0.3, mean, var, y, lik)
    num = fd(lambda x: gwi.tempered_log_loss(x[0], mean, var, y, lik)[0], np.array([0.3]), 1e-3)
    print(f"tempering loss d/dlog T vs finite differences: rel. error "
          f"{rel_err(np.array([g]), num):.1e}")

if __name__ == "__main__":
    main()
