"""Generalized variational inference with a Wasserstein-2 regulariser (GWI), multiclass.

Wild, Hu & Sejdinovic (2022) replace the KL divergence of variational inference by
the squared Wasserstein-2 distance between Gaussian measures on L^2(X, rho).  With J
independent prior measures ``P_j = N(m_P, C_k)`` and variational measures ``Q_j`` the
objective is::

    L(Q) = - sum_n E_Q log p(y_n | F_1(x_n), ..., F_J(x_n))  +  sum_j W_2^2(P_j, Q_j)

(``distance="unsquared"`` uses ``W_2 = sqrt(sum_j W_2^2)``, the distance between the
product measures, as the reference code does).  The likelihood is the robust max
(:class:`fastep.likelihoods.RobustMax`).

**Variational measures.** Kernel means and SVGP-like covariances on M inducing inputs
``Z`` taken from the data::

    m_j(x)     = sum_m k(x, z_m) a_jm  (+ w_j . x + b_j if linear=True)
    r_j(x, x') = k(x, x') - k(x, Z) (K_ZZ + delta I)^-1 k(Z, x') + k(x, Z) L_j L_j^T k(Z, x')

``delta`` is a small jitter (relative 1e-6); it keeps the Nystrom residual
``k - k_Z^T (K_ZZ + delta)^-1 k_Z`` strictly positive, so r_j is a valid covariance with
r_j(x, x) > 0 at every x.  The parameters are optimised in *whitened* coordinates, as
in SVGP: with ``K_ZZ + delta I = C C^T`` (Cholesky) and ``v(x) = C^-1 k(Z, x)``::

    a_j = C^-T a~_j,   L_j L_j^T = C^-T L~_j L~_j^T C^-1,
    m_j(x) = v(x)^T a~_j,   r_j(x, x') = k(x, x') - v(x)^T (I - L~_j L~_j^T) v(x'),

with ``L~_j`` lower triangular.  It is the same family of measures (any PSD ``L_j L_j^T``
is reachable), but K_ZZ's conditioning no longer slows the optimiser down; ``L~_j = I`` gives
``r_j = k`` (the prior covariance), ``L~_j = 0`` the Nystrom residual alone.

**The W2 estimator.** For one class, on N training inputs X and N_S inputs X_S
subsampled from them::

    W^2 = 1/N sum_n (m_P(x_n) - m_Q(x_n))^2 + 1/N sum_n k(x_n, x_n) + 1/N sum_n r(x_n, x_n)
          - 2/N_S sum_s sqrt(lambda_s(K_SS^1/2 R_SS K_SS^1/2)),

``K_SS = k(X_S, X_S)``, ``R_SS = r(X_S, X_S)``.  Each term estimates the corresponding
term of ``W_2^2 = ||m_P - m_Q||^2 + tr C_P + tr C_Q - 2 tr (C_P^1/2 C_Q C_P^1/2)^1/2``
under the empirical measure; the last one uses ``lambda(C_Q C_P) ~ lambda(R_SS K_SS) /
N_S^2`` in the symmetric form ``K_SS^1/2 R_SS K_SS^1/2`` (positive semi-definite, so
``eigh`` applies and the eigenvalues are real and non-negative).  With ``X_S = X`` this
is exactly ``1/N`` times the W2^2 between the finite-dimensional Gaussians
``N(m_P(X), k(X, X))`` and ``N(m_Q(X), r(X, X))``; the seed writes the cross term with
``r(X_S, X) k(X, X_S)`` and ``2/sqrt(N N_S)``, which is the same thing at ``X_S = X``
but is not similar to a symmetric matrix otherwise (its eigenvalues can be complex;
the reference code takes their moduli).

Gradients are analytic: ``d sum sqrt(lambda(A)) = 1/2 tr(A^-1/2 dA)``, chained
through ``R_SS = (Nystrom residual) + V_S L~ L~^T V_S^T``; S(x, j) has its own compiled gradient.

The package: the W2 estimator (``_w2``), the variational measures and the objective
(``_objective``), its two optimisers (``_optimizers``) and the tempering of the predictive
(``_temper``).
"""
from ._objective import (JITTER, GWIFactors, GWIParams, Subsample, gwi_factors, gwi_objective,
                         inducing_cholesky, initial_params, predict_proba, prob_largest_grad,
                         subsample, variational_moments)
from ._optimizers import fit_adam, fit_lbfgs
from ._temper import temper, tempered_log_loss
from ._w2 import sym_sqrt, symmetric_eigh, w2_squared

__all__ = ["JITTER", "GWIFactors", "GWIParams", "Subsample", "gwi_factors", "gwi_objective",
           "inducing_cholesky", "initial_params", "predict_proba", "prob_largest_grad",
           "subsample", "variational_moments", "fit_adam", "fit_lbfgs", "temper",
           "tempered_log_loss", "sym_sqrt", "symmetric_eigh", "w2_squared"]
