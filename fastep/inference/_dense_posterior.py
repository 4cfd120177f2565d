"""The dense EP posterior at given sites: its refresh, and what the driver, the evidence and
its gradient read of it (:class:`_Posterior`).

Prior ``f ~ N(0, K)``; sites ``t_i(f_i) ∝ exp(-tau_i f_i^2 / 2 + nu_i f_i)``.

Posterior refresh ("B form", every site precision >= 0)::

    B = I + S^1/2 K S^1/2 = L L^T,   V = L^-1 S^1/2 K,   Sigma = K - V^T V,   mu = Sigma nu

Negative site precisions (likelihoods that are not log-concave) use the *split
form*: the sites with tau >= 0 go through the B form above, giving Sigma_+; the
k sites with tau < 0 enter by Woodbury through the k x k Cholesky factor of
``C = I - U^T Sigma_+ U`` (``U = E_neg diag(sqrt(-tau_neg))``)::

    Sigma = Sigma_+ + Sigma_+ U C^-1 U^T Sigma_+,   log|I + K S| = log|B_+| + log|C|

No square root of a negative number is taken, and ``C`` is positive definite
exactly when the EP posterior is a proper Gaussian (otherwise a clear error).

A parallel sweep reads only the marginals, which the refresh takes from ``L^-1``
(n^3/3 flops more than ``L``) rather than from ``V``: ``var_i = (1 - (B^-1)_ii) /
tau_i`` (with ``K_ii - |V e_i|^2`` where that cancels, :data:`WEAK_SITE`) and ``mu = K
S^1/2 B^-1 w``.  It never needs ``L`` itself: the backend makes ``L^-1`` and ``diag(L)``
(for ``log|B|``) in one pass (``cholesky_inverse``; on the CPU a recursive block
algorithm of ``dtrmm``/``dsyrk`` calls, :func:`fastep._linalg.cholesky_inverse_inplace`).
The sequential schedule keeps ``L`` and ``V`` for its full ``Sigma``.
"""
from __future__ import annotations

from .._numerics import MIN_VARIANCE
from ..exceptions import NotPositiveDefiniteError

#: Where tau_i Sigma_ii = 1 - (B^-1)_ii falls below this, a parallel refresh takes the site's
#: posterior variance as K_ii - |L^-1 S^1/2 K e_i|^2 (n^2 flops per site, in blocks of
#: WEAK_BLOCK columns) rather than (1 - (B^-1)_ii) / tau_i, which loses
#: log10(1 / (tau_i Sigma_ii)) digits to cancellation, on top of the absolute error of
#: (B^-1)_ii itself, which grows with B's condition number (at most 1 + T, T =
#: sum_i tau_i K_ii): WEAK_SITE where T <= WELL_CONDITIONED, else WEAK_SITE_ILL.  (On
#: digits, T is about 1e3 and the variances of the sites in [1e-6, 1e-4) agree with a
#: long-double refresh to 9.3e-10; 164 of its 1,257 sites are in that band at variance
#: 1e5, each an n^2 column of dtrmm more with the bound at 1e-4.)
WEAK_SITE = 1e-6
WEAK_SITE_ILL = 1e-4
#: T above which the refresh keeps the weak sites of WEAK_SITE_ILL ...
WELL_CONDITIONED = 1e4
#: ... and above which it takes L^-1 from LAPACK's dpotrf + dtrtri rather than from the
#: backend's recursive factor-and-invert (``cholesky_inverse(..., recursive=False)``),
#: whose explicit inverses of the diagonal blocks lose more digits on an ill-conditioned
#: B: the absolute error of diag(B^-1) against a long-double reference was 8.5e-15,
#: 2.4e-12, 4.3e-10, 2.4e-7 (dtrtri: 1.0e-14, 1.5e-12, 8.4e-11, 9.6e-9) at T = 2.8e3,
#: 2.7e5, 2.8e7, 2.3e9 (n = 500).
RECURSIVE_MAX_T = 1e6
WEAK_BLOCK = 256


class _Posterior:
    """Posterior N(mu, Sigma) of f given the sites, on the backend ``be``, plus what
    predictions need."""

    def __init__(self, be, K, kdiag, tau, nu, need_cov=False, work=(None, None)):
        xp = be.xp
        n = K.shape[0]
        self.be, self.n, self.K, self.tau = be, n, K, tau
        tau_pos = xp.maximum(tau, 0.0)
        s = xp.sqrt(tau_pos)
        self.s, self.Q, self.cov = s, None, None
        if not (bool(xp.any(tau != 0.0)) or bool(xp.any(nu != 0.0))):   # the prior itself
            if not bool(xp.all(kdiag > MIN_VARIANCE)):
                raise NotPositiveDefiniteError(
                    "K has a zero (or underflowing, below 1e-290) prior variance on its "
                    "diagonal: EP needs every latent value uncertain. Add jitter to the "
                    "kernel diagonal (a WhiteKernel(1e-6)) or rescale the kernel's variance.")
            self.L = self._li = None
            self.var = kdiag.copy()
            self.mean = xp.zeros(n)
            self.half_logdet = 0.0
            self.cov = K.copy() if need_cov else None
            return
        # B (and, on the CPU, the L^-1 made from it) lives in work[0], which an earlier
        # posterior of the same run may hold: a caller builds a new posterior only once it
        # is done with the old one (even where this one fails)
        B = be.build_b(K, s, work[0])
        # Two forms of var_i, each cancelling where the other does not:
        # K_ii - |V e_i|^2 (V = L^-1 S^1/2 K) where Sigma_ii << K_ii (tau_i K_ii large), and
        # (1 - (B^-1)_ii) / tau_i (S^1/2 Sigma S^1/2 = I - B^-1) where tau_i Sigma_ii << 1.
        # Parallel sweeps need only the marginals: B^-1's diagonal from L^-1 (made with
        # the factor, be.cholesky_inverse: n^3/3 flops more, against the n^3 of V), the
        # other form on the sites with tau_i Sigma_ii below WEAK_SITE.
        # The sequential sweeps' full Sigma = K - V^T V needs V (dtrsm) and L, not L^-1.
        what = "B = I + S^1/2 K S^1/2"
        try:
            if need_cov:
                L, li = be.cholesky(B, what), None
                l_diag = xp.diagonal(L)
            else:
                trace = float(xp.sum(tau_pos * kdiag))      # cond(B) <= 1 + trace
                L, (li, l_diag) = None, be.cholesky_inverse(B, what, work[1],
                                                            recursive=trace <= RECURSIVE_MAX_T)
        except NotPositiveDefiniteError as exc:
            raise NotPositiveDefiniteError(
                "EP posterior refresh failed: B = I + S^1/2 K S^1/2 is not positive definite, "
                "so K is not a valid covariance matrix. Add jitter to the kernel's diagonal "
                "(e.g. a WhiteKernel(1e-6)) or check K for NaN/negative eigenvalues.") from exc
        del B
        self.L, self._li = L, li
        self.half_logdet = float(xp.sum(xp.log(l_diag)))
        if need_cov:
            vt = be.solve_lower(L, be.scale_columns(K, s, work[1]).T, overwrite=True).T
            cov = vt @ vt.T
            xp.subtract(K, cov, out=cov)
            var = xp.diagonal(cov).copy()
            other = xp.flatnonzero(tau_pos * kdiag > 1e4)
            if other.size:
                k = int(other.size)
                e = xp.zeros((n, k), order="F")
                e[other, xp.arange(k)] = 1.0
                e = be.solve_lower(L, e, overwrite=True)
                var[other] = (1.0 - xp.einsum("ij,ij->j", e, e)) / tau_pos[other]
        neg = xp.flatnonzero(tau < 0.0)
        if need_cov:
            sigma_neg = cov[:, neg] if neg.size else None           # Sigma_+[:, neg]
        else:
            t_sigma = 1.0 - be.row_sumsq(li.T)                  # tau_i Sigma_ii
            weak = t_sigma < (WEAK_SITE if trace <= WELL_CONDITIONED else WEAK_SITE_ILL)
            var = t_sigma / xp.where(weak, 1.0, tau_pos)
            sigma_neg = None
            if neg.size:
                # Sigma_+[:, neg] for the split form, from X = L^-1 S^1/2 K[:, neg] (the
                # negative sites' own variances need it too: they are weak, s_i = 0): as
                # S^1/2 Sigma_+ = B^-1 S^1/2 K, row i is (L^-T X)_i / s_i (two dtrmm,
                # 2 n^2 k flops); on the weak rows K[i, neg] - (L^-1 S^1/2 K e_i)^T X
                x_neg = be.trmm_lower(li, (K[neg] * s).T)
                var[neg] = kdiag[neg] - xp.einsum("ij,ij->j", x_neg, x_neg)
                sigma_neg = be.trmm_lower(li, xp.array(x_neg, order="F"), trans=True)
                sigma_neg /= xp.where(weak, 1.0, s)[:, None]
                sigma_neg[neg] = K[neg][:, neg] - x_neg.T @ x_neg
                weak[neg] = False                            # done
            other = xp.flatnonzero(weak)
            for b0 in range(0, int(other.size), WEAK_BLOCK):
                cols = other[b0:b0 + WEAK_BLOCK]
                v = be.trmm_lower(li, (K[cols] * s).T)
                var[cols] = kdiag[cols] - xp.einsum("ij,ij->j", v, v)
                if neg.size:
                    sigma_neg[cols] = K[cols][:, neg] - v.T @ x_neg
            x_neg = None                                     # n x k: free it before the split
        if neg.size:
            self._split_form(neg, var, sigma_neg)
            sigma_neg = None                 # Q's own n x k, not it, outlives the split
        self.var = var
        # mu = Sigma nu.  For sites with s > 0, write nu = s * w: then
        # Sigma nu = K S^1/2 B^-1 w (as (K^-1 + S)^-1 = K S^1/2 B^-1 S^-1/2), free of the
        # cancellation between K nu and K S^1/2 B^-1 S^1/2 K nu.  Sites with s = 0 use
        # the plain form.
        pos = s > 0.0
        w = xp.where(pos, nu / xp.where(pos, s, 1.0), 0.0)
        mean = be.sym_matvec(K, s * self._binv(w))
        rest = xp.where(pos, 0.0, nu)
        if bool(xp.any(rest != 0.0)):
            mean += self._sigma_plus(rest)
        if self.Q is not None:
            mean += self.Q @ (self.Q.T @ nu)
        self.mean = mean
        if need_cov:
            if self.Q is not None:
                cov += self.Q @ self.Q.T
            self.cov = cov
        if not bool(xp.all(self.var > MIN_VARIANCE)):
            raise NotPositiveDefiniteError(
                "EP produced non-positive (or underflowing, below 1e-290) posterior "
                "variances; K is numerically singular or indefinite, or its scale "
                "underflows. Add jitter to the kernel diagonal (a WhiteKernel(1e-6)), "
                "rescale the kernel's variance, or take smaller EP steps (e.g. damping=0.5).")

    def _split_form(self, neg, var, sigma_neg):
        """Q with Sigma = Sigma_+ + Q Q^T from ``sigma_neg = Sigma_+[:, neg]`` (overwritten),
        C's log-determinant, and the variances ``var`` raised by diag(Q Q^T)."""
        be, xp = self.be, self.be.xp
        r = xp.sqrt(-self.tau[neg])
        p = sigma_neg
        p *= r
        c = xp.eye(int(neg.size)) - r[:, None] * p[neg, :]
        try:
            lc = be.cholesky(xp.asfortranarray(c), "C = I - U^T Sigma_+ U")
        except NotPositiveDefiniteError as exc:
            raise NotPositiveDefiniteError(
                "EP with negative site precisions reached an improper posterior "
                "(I - U^T Sigma_+ U is not positive definite). Take smaller EP steps "
                "(e.g. damping=0.5).") from exc
        self.Q = xp.ascontiguousarray(be.solve_lower(lc, p.T, overwrite=True).T)
        self.half_logdet += float(xp.sum(xp.log(xp.diagonal(lc))))
        var += xp.einsum("ij,ij->i", self.Q, self.Q)

    @property
    def at_prior(self):
        """True where there are no sites (the posterior is the prior)."""
        return self.L is None and self._li is None

    @property
    def li(self):
        """L^-1 (made on first use where the refresh did not need it)."""
        if self._li is None and self.L is not None:
            self._li = self.be.tri_inverse(self.L)
        return self._li

    def _binv(self, z):
        """B^-1 z = L^-T L^-1 z (for a matrix z by two dtrmm, half the flops of two general
        products: the split form's Sigma_+ columns)."""
        if self._li is None:
            return self.be.cho_solve(self.L, z)
        if z.ndim == 2:
            w = self.be.trmm_lower(self._li, self.be.xp.array(z, order="F"))
            return self.be.trmm_lower(self._li, w, trans=True)
        return self.be.tri_matvec(self._li, self.be.tri_matvec(self._li, z), trans=True)

    def _sigma_plus(self, z):
        """Sigma_+ z (the posterior covariance of the positive sites) for a vector or an
        (n, m) array."""
        return self._sigma_plus_of(self.K @ z)

    def _sigma_plus_of(self, kz):
        """Sigma_+ z = K z - K S^1/2 B^-1 S^1/2 K z from ``kz = K z``."""
        if self.at_prior:
            return kz
        sv = self.s if kz.ndim == 1 else self.s[:, None]
        return kz - self.K @ (sv * self._binv(sv * kz))

    def apply_cov(self, z):
        """Sigma @ z for an (n, m) array."""
        out = self._sigma_plus(z)
        if self.Q is not None:
            out += self.Q @ (self.Q.T @ z)
        return out

    def apply_r(self, z):
        """R @ z with R = (K + S^-1)^-1 = S^1/2 B^-1 S^1/2 (B form) or S - S Sigma S."""
        if self.at_prior:
            return self.be.xp.zeros_like(z)
        if self.Q is None:
            return self.s[:, None] * self._binv(self.s[:, None] * z)
        tz = self.tau[:, None] * z
        return tz - self.tau[:, None] * self.apply_cov(tz)

    def dense_r(self):
        """R as a dense (n, n) array."""
        xp = self.be.xp
        if self.at_prior:
            return xp.zeros((self.n, self.n))
        if self.Q is not None:
            return self.apply_r(xp.eye(self.n))
        return self.be.r_from_tri(self.li, self.s)
