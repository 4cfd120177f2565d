"""The scalar arithmetic of one EP site update, written once for every target.

These functions use ``math`` only.  They are compiled for the CPU with ``numba.njit``
and called by the CPU site loops of :mod:`fastep.backend.cpu`; the CUDA kernels of
:mod:`fastep.backend.cuda.kernels` compile the same Python source as device functions.  So both
targets run one copy of the site maths.

The site update comes from the derivatives of log Z, in GPML's form, which never forms
the tilted variance by subtraction.  With cavity variance ``v``, ``d1 = dlogZ/dmu`` and
``d2 = d2logZ/dmu2``::

    tau_new = -d2 / (1 + d2 v)        nu_new = (d1 - mu_cav d2) / (1 + d2 v)
"""
from __future__ import annotations

import math
from typing import Any, NamedTuple

from numba import types

from ._jit import jit

b1 = types.boolean


class SiteData(NamedTuple):
    """What the site loops read of the data, in a backend's arrays (``Backend.site_inputs``
    makes it): targets ``y`` (n), per-site extras ``extra`` (n, k: censoring limits,
    exposures, event indicators ...) and the likelihood's parameters ``params``."""

    y: Any
    extra: Any
    params: Any

    def rows(self, sl: slice) -> "SiteData":
        """The sites ``sl`` (a slice: views, no copy); the parameters are shared."""
        return SiteData(self.y[sl], self.extra[sl], self.params)


class SiteBuffers(NamedTuple):
    """The per-site arrays of one parallel (Power-)EP update (``Backend.parallel_sites``,
    ``Backend.power_sites``): the marginals ``mean``/``var`` and the sites ``tau``/``nu``
    read, the damped proposals ``new_tau``/``new_nu``, the evidence terms ``log_z`` and
    the cavities ``mu_cav``/``var_cav`` written.  For the dense loop ``log_z`` receives
    the tilted log Z_i; for the Power-EP loop each site's share of log Z
    (:func:`power_site_evidence`).  Every array has one entry per site."""

    mean: Any
    var: Any
    tau: Any
    nu: Any
    new_tau: Any
    new_nu: Any
    log_z: Any
    mu_cav: Any
    var_cav: Any

    def rows(self, sl: slice) -> "SiteBuffers":
        """The sites ``sl`` of every array (a slice: views, no copy)."""
        return SiteBuffers(*(a[sl] for a in self))


@jit("UniTuple(f8, 2)(f8, f8, f8, f8)")
def site_from_derivatives(d1, d2, mu_cav, var_cav):
    """The one place where tilted-moment derivatives become site parameters."""
    den = 1.0 + d2 * var_cav
    return -d2 / den, (d1 - mu_cav * d2) / den


@jit("Tuple((b1, f8, f8))(f8, f8, f8, f8)")
def cavity(mean, var, tau, nu):
    """(ok, mu_cav, var_cav): remove a site from its marginal; ok is False when the
    cavity precision 1/var - tau is not positive (the site is then skipped)."""
    tc = 1.0 / var - tau
    if not tc > 0.0:
        return False, math.nan, math.nan
    vc = 1.0 / tc
    return True, (mean / var - nu) * vc, vc


@jit("Tuple((b1, f8, f8, f8))(f8, f8, f8, f8, f8)")
def power_cavity(mean, var, tau, nu, alpha):
    """(ok, mu_cav, var_cav, s) removing alpha of a site, s = 1 - alpha tau v: written
    without 1/v (projections of points far from the inducing inputs have v -> 0)."""
    sc = 1.0 - alpha * tau * var
    if not sc > 0.0:
        return False, math.nan, math.nan, sc
    return True, (mean - alpha * nu * var) / sc, var / sc, sc


@jit("Tuple((f8, f8, b1))(f8, f8, f8, f8, f8, f8, f8, f8, b1)")
def damped_site(d1, d2, mu_cav, var_cav, tau, nu, alpha, damping, clip):
    """(tau_new, nu_new, ok): the damped (Power-)EP proposal from the tilted derivatives;
    site <- site^(1 - alpha) * (projected tilted / cavity), clipped at tau >= 0 for
    log-concave likelihoods.  A non-finite proposal keeps the site (ok = False)."""
    t, n = site_from_derivatives(d1, d2, mu_cav, var_cav)
    t += (1.0 - alpha) * tau
    n += (1.0 - alpha) * nu
    if clip and t < 0.0:
        t = 0.0
    ok = math.isfinite(t) and math.isfinite(n)
    if not ok:
        t = tau
        n = nu
    return (1.0 - damping) * tau + damping * t, (1.0 - damping) * nu + damping * n, ok


@jit("f8(f8, f8, f8, f8, f8, f8, f8)")
def power_site_evidence(log_z, sc, mean, var, tau, nu, alpha):
    """A site's share of the Power-EP log Z::

        (1/alpha) [log Z_i + 1/2 log(v_-i / v_i) + mu_-i^2 / (2 v_-i) - mu_i^2 / (2 v_i)]
      = (1/alpha) [log Z_i - 1/2 log s + (alpha (tau mu^2 - 2 nu mu) + alpha^2 nu^2 v) / (2 s)]
    """
    quad = alpha * (tau * mean * mean - 2.0 * nu * mean) + alpha * alpha * nu * nu * var
    return (log_z - 0.5 * math.log(sc) + 0.5 * quad / sc) / alpha


@jit(inline="always")
def store_site(i, t, n, ev, mc, vc, new_tau, new_nu, site_ev, mu_cav, var_cav):
    """Write site i's new parameters, its evidence term and its cavity (NaN evidence and
    cavity for a skipped site)."""
    new_tau[i] = t
    new_nu[i] = n
    site_ev[i] = ev
    mu_cav[i] = mc
    var_cav[i] = vc
