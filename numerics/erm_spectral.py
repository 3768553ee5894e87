"""Spectral part of the ERM state evolution for one tied attention layer (THEORY 3).

mu_delta = mu_S0 boxplus semicircle of variance delta^2 (delta is a standard deviation here; the
cubic of THEORY 1.1 with Delta = delta^2 and rho = kappa0).  The ERM needs

    J(delta, eps) = int_eps^inf (x - eps)^2 dmu_delta,
    d_eps J = -2 int_eps^inf (x - eps) dmu_delta,
    d_delta J = 4 delta int_eps^inf (x - eps) Re g(x) mu_delta(x) dx,

the last from the free heat equation: with t = delta^2, d_t g + g d_z g = 0, hence for any f
d_t int f dmu_t = int f'(x) Re g(x - i0) mu_t(x) dx (checked in the tests against a
high-precision finite difference), and the rank mu_delta((eps, inf)).

Quadrature: each support interval [a, b] is mapped by x = (a + b)/2 - (b - a)/2 cos(theta) (the
square-root edges become analytic), the theta range is cut at the image of eps (the kink of
(x - eps)_+^2 becomes a panel end), panels are graded towards the other branch points exactly
as in :mod:`numerics.wishart`, and each panel gets Gauss-Legendre nodes.  The error is the
difference between two orders (double precision) or two digit targets (mpmath).

The learned spectrum (THEORY 3): S_hat has the law of eta ReLU(S0 + delta Z - eps I), so its
eigenvalues lam = eta (x - eps) for x > eps have density mu_delta(eps + lam/eta)/eta, plus an atom
1 - rank at 0; singular values s = sqrt(lam) have density (2 s/eta) mu_delta(eps + s^2/eta).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import mpmath
import numpy as np

from .records import Estimate, require
from .wishart import (
    RHO_MIN_DOUBLE,
    _breakpoints,
    _floor,
    _gl_f,
    _gl_mp,
    _inside_roots_f,
    _newton_mp,
    _panel_order,
    _singular_images,
    _spectrum_f,
    _spectrum_mp,
    density,
)

__all__ = [
    "SpectralIntegrals",
    "spectral_integrals",
    "spectral_estimate",
    "learned_eigenvalue_density",
    "learned_singular_density",
]

_ORDER = 24  # Gauss-Legendre points per panel (double)
_ORDER_LO = 16  # the coarser order of the error estimate
_GUARD = 10  # extra digits of the mpmath route


@dataclass(frozen=True)
class SpectralIntegrals:
    """J, its exact derivatives and the rank at one (delta, eps) (THEORY 3)."""

    J: Any
    dJ_ddelta: Any
    dJ_deps: Any
    rank: Any
    first: Any  # int_eps (x - eps) dmu_delta = -d_eps J / 2


def _check(kappa0: Any, delta: Any, eps: Any) -> None:
    for name, v in (("kappa0", kappa0), ("delta", delta)):
        require(_finite(v) and float(v) > 0, name, "a finite real number > 0", v)
    require(_finite(eps), "eps", "a finite real number", eps)


def _finite(v: Any) -> bool:
    try:
        return math.isfinite(float(v))
    except (TypeError, ValueError):
        return False


def _theta_panels(a: Any, b: Any, eps: Any, images: list, tiny: float, mp: bool) -> list:
    """Panel ends in theta for [max(a, eps), b] under x = mid - half cos(theta)."""
    br = _breakpoints(images, tiny, mp=mp)
    if eps <= a:
        return br
    mid, half = (a + b) / 2, (b - a) / 2
    acos = mpmath.acos if mp else math.acos
    t_eps = acos(max(min((mid - eps) / half, 1), -1))
    return [t_eps] + [t for t in br if t > t_eps + tiny]


def _nodes_f(kappa0: float, delta: float, eps: float, n: int,
             digits: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    sp = _spectrum_f(kappa0, delta * delta)
    xi, wi = _gl_f(n)
    xs, ws = [np.zeros(0)], [np.zeros(0)]
    for k, (a, b, _, _) in enumerate(sp.intervals):
        if b <= eps:
            continue
        mid, half = 0.5 * (a + b), 0.5 * (b - a)
        images = _singular_images(k, sp, _floor(digits))
        br = np.asarray(_theta_panels(a, b, eps, images, 1e-3 * _floor(digits), False))
        c, h = 0.5 * (br[1:] + br[:-1]), 0.5 * (br[1:] - br[:-1])
        theta = (c[:, None] + h[:, None] * xi[None, :]).ravel()
        wt = (h[:, None] * wi[None, :]).ravel()
        xs.append(mid - half * np.cos(theta))
        ws.append(half * np.sin(theta) * wt)
    x, w = np.concatenate(xs), np.concatenate(ws)
    g = _inside_roots_f(x, sp.s, sp.m, delta * delta) if x.size else x.astype(complex)
    return x, w, g


@functools.lru_cache(maxsize=8192)
def _integrals_f(kappa0: float, delta: float, eps: float, n: int, digits: float) -> tuple:
    x, w, g = _nodes_f(kappa0, delta, eps, n, digits)
    mu = g.imag / math.pi
    wm = w * mu
    t = x - eps
    i0, i1, i2, ir = wm.sum(), (wm * t).sum(), (wm * t * t).sum(), (wm * t * g.real).sum()
    return (float(i2), float(4 * delta * ir), float(-2 * i1), float(i0), float(i1))


def _integrals_mp(kappa0: Any, delta: Any, eps: Any, digits: float, dps: int) -> tuple:
    prec = dps + _GUARD
    with mpmath.workdps(prec):
        k0, d, e = mpmath.mpf(kappa0), mpmath.mpf(delta), mpmath.mpf(eps)
        sp = _spectrum_mp(k0, d * d, dps)
        sp_f = _spectrum_f(float(kappa0), float(delta) ** 2)
        acc = [mpmath.mpf(0)] * 4
        for k, (a, b, _, _) in enumerate(sp.intervals):
            if b <= e:
                continue
            mid, half = (a + b) / 2, (b - a) / 2
            images = _singular_images(k, sp, _floor(digits), mp=True)
            br = _theta_panels(a, b, e, images, 1e-3 * _floor(digits), True)
            for t0, t1 in zip(br[:-1], br[1:], strict=True):
                xi, wi = _gl_mp(_panel_order(t0, t1, images, digits), prec)
                c, h = (t0 + t1) / 2, (t1 - t0) / 2
                xs = [mid - half * mpmath.cos(c + h * u) for u in xi]
                seeds = _inside_roots_f(np.array([float(x) for x in xs]), sp_f.s, sp_f.m,
                                        float(delta) ** 2)
                for x, u, wu, g0 in zip(xs, xi, wi, seeds, strict=True):
                    g = _newton_mp(complex(g0), x, sp, prec)
                    wm = half * mpmath.sin(c + h * u) * h * wu * g.imag / mpmath.pi
                    t = x - e
                    acc[0] += wm
                    acc[1] += wm * t
                    acc[2] += wm * t * t
                    acc[3] += wm * t * g.real
        i0, i1, i2, ir = acc
        out = (i2, 4 * d * ir, -2 * i1, i0, i1)
    with mpmath.workdps(dps):
        return tuple(+v for v in out)


def spectral_integrals(*, kappa0: Any, delta: Any, eps: Any, dps: int | None = None,
                       coarse: bool = False) -> SpectralIntegrals:
    """J(delta, eps), d_delta J, d_eps J (exact, THEORY 3), rank = mu_delta((eps, inf)).

    Floats in double precision (``kappa0`` >= 1e-4); mpf at ``dps`` digits.  ``coarse`` selects
    the lower rule used for the error estimate (mpmath: two thirds of the digits, both in the
    panel orders and in the working precision, so that the difference bounds the error).
    """
    _check(kappa0, delta, eps)
    if dps is None:
        require(float(kappa0) >= RHO_MIN_DOUBLE, "kappa0",
                f">= {RHO_MIN_DOUBLE:g} in double precision (smaller: give dps)", kappa0)
        n, digits = (_ORDER_LO, 12.0) if coarse else (_ORDER, 16.0)
        vals = _integrals_f(float(kappa0), float(delta), float(eps), n, digits)
    else:
        require(isinstance(dps, int) and 10 <= dps <= 200, "dps", "an integer in [10, 200]", dps)
        if coarse:  # the coarse route: two thirds of the digits, in rules and in precision
            dps = max(10, (2 * dps) // 3)
        vals = _integrals_mp(kappa0, delta, eps, dps + 6.0, dps)
    return SpectralIntegrals(*vals)


def spectral_estimate(*, kappa0: Any, delta: Any, eps: Any,
                      dps: int | None = None) -> dict[str, Estimate]:
    """:func:`spectral_integrals` with error bars: |difference of two rules| (THEORY 3)."""
    fine = spectral_integrals(kappa0=kappa0, delta=delta, eps=eps, dps=dps)
    coarse = spectral_integrals(kappa0=kappa0, delta=delta, eps=eps, dps=dps, coarse=True)
    method = ("theta-substituted composite Gauss-Legendre cut at eps, "
              + (f"orders {_ORDER_LO}/{_ORDER}" if dps is None else f"digit targets at dps {dps}"))
    out = {}
    for key in ("J", "dJ_ddelta", "dJ_deps", "rank"):
        v, c = getattr(fine, key), getattr(coarse, key)
        out[key] = Estimate(value=v, error=float(abs(v - c)), method=method,
                            precision=16 if dps is None else int(dps),
                            extra={"kappa0": kappa0, "delta": delta, "eps": eps})
    return out


def learned_eigenvalue_density(lam: Any, *, kappa0: float, delta: float, eps: float,
                               eta: float) -> np.ndarray:
    """Density of the non-zero eigenvalues of S_hat ~ eta ReLU(S0 + delta Z - eps I) (THEORY 3);
    the atom 1 - rank at 0 is not included.  Zero for lam <= 0."""
    _check(kappa0, delta, eps)
    require(_finite(eta) and eta > 0, "eta", "a finite real number > 0", eta)
    lam = np.asarray(lam, dtype=float)
    pos = lam > 0
    out = np.zeros(lam.shape)
    if np.any(pos):
        out[pos] = density(eps + lam[pos] / eta, rho=kappa0, delta=delta * delta) / eta
    return out


def learned_singular_density(s: Any, *, kappa0: float, delta: float, eps: float,
                             eta: float) -> np.ndarray:
    """Density of s = sqrt(lam) over the non-zero eigenvalues lam of S_hat (THEORY 3):
    (2 s/eta) mu_delta(eps + s^2/eta)."""
    s = np.asarray(s, dtype=float)
    return 2 * s * learned_eigenvalue_density(s * s, kappa0=kappa0, delta=delta, eps=eps,
                                              eta=eta)
