"""Numeric kernels of the special functions the derivations produce (THEORY 1.1, 1.4).

The bivariate normal CDF Phi2(a, b; r) in numpy (vectorised, double precision) and in mpmath (any
precision). A numeric leaf module: numpy, scipy and mpmath only, so that the symbolic layer
(``Phi2._eval_evalf`` in :mod:`aim_sym.special`) and the compiled layer (lambdify's modules in
:mod:`aim_sym.codegen`) can both use it without importing each other.
"""

from __future__ import annotations

import mpmath
import numpy as np
from scipy.special import log_ndtr, ndtr

__all__ = ["np_phi2", "np_phi2_kernel", "np_phi2_from_kernel", "mp_phi2"]


def _gl01(n: int) -> tuple[np.ndarray, np.ndarray]:
    x, w = np.polynomial.legendre.leggauss(n)
    return (x + 1) / 2, w / 2


# Gauss-Legendre rules on [0, 1] for the Drezner-Wesolowsky integral of Phi2 (numpy path):
# 12 nodes reach double precision for |r| <= 0.5 (measured against mp_phi2), 24 up to 0.9
_GL_RULES = {12: _gl01(12), 16: _gl01(16), 24: _gl01(24)}


def np_phi2(a, b, r):
    """Bivariate normal CDF, vectorised in a and b:
    Phi2 = Phi(a) Phi(b) + (1/2pi) int_0^{asin r} exp(-(a^2 + b^2 - 2ab sin t) / (2 cos^2 t)) dt.

    Absolute accuracy ~1e-16 for |r| <= 0.9 (24-point Gauss-Legendre on a smooth integrand).
    """
    a = np.clip(np.asarray(a, dtype=float), -40.0, 40.0)
    b = np.clip(np.asarray(b, dtype=float), -40.0, 40.0)
    r = float(r)
    return np_phi2_from_kernel(a, b, r, ndtr(a) * ndtr(b),
                               np_phi2_kernel(a * a + b * b, np.sign(r) * (a * b), abs(r)))


def np_phi2_kernel(ss, p, ar):
    """The integral of :func:`np_phi2` up to its factor sign(r) asin|r| / (2 pi):
    mean over t in [0, asin |r|] of exp(-(ss - 2 p sin t) / (2 cos^2 t)), with ss = a^2 + b^2,
    p = sign(r) a b, ar = |r| (the substitution t -> -t). The four orthants
    Phi2(+-a, +-b; +-r) with sign(r) a b fixed share it (numpy code computes it once)."""
    ar = float(ar)
    if ar > 0.9:
        raise ValueError("np_phi2 is accurate for |r| <= 0.9 only")
    gx, gw = _GL_RULES[12 if ar <= 0.5 else 16 if ar <= 0.75 else 24]
    th = np.arcsin(ar) * gx
    s, c2 = np.sin(th), np.cos(th) ** 2
    ss_ = np.asarray(ss, dtype=float)[..., None]
    p_ = np.asarray(p, dtype=float)[..., None]
    return np.exp(-(ss_ - 2 * p_ * s) / (2 * c2)) @ gw


def np_phi2_from_kernel(a, b, r, head, kernel):
    """Phi2(a, b; r) from head = Phi(a) Phi(b) and :func:`np_phi2_kernel` at (a^2 + b^2,
    sign(r) a b, |r|). In compiled code a, b are not clipped to [-40, 40] in these two
    (:func:`np_phi2` clips them): Phi saturates there, and the kernel is below exp(-400)
    (a^2 + b^2 >= 1600, |r| <= 0.9), next to Phi(a) Phi(b) or the lower-tail rule."""
    a = np.clip(np.asarray(a, dtype=float), -40.0, 40.0)
    b = np.clip(np.asarray(b, dtype=float), -40.0, 40.0)
    r = float(r)
    corr = np.sign(r) * np.arcsin(abs(r)) * kernel / (2 * np.pi)
    out = head + corr
    if r < 0:
        # joint lower tail at negative correlation: the two terms above cancel; integrate the
        # positive representation int_0^inf phi(a - u) Phi((b - r (a - u)) / s) du instead
        # (the main formula keeps ~12 relative digits while a^2 + b^2 <= 40, measured)
        mask = (a < -1.0) & (b < -1.0) & (a * a + b * b > 40.0)
        if np.any(mask):
            out = np.array(out, dtype=float, copy=True)
            aa, bb = np.broadcast_arrays(a, b)
            out[mask] = _lower_tail(aa[mask], bb[mask], r)
    return out


# Gauss-Legendre rules on [0, 1] for the lower-tail integral: 32 nodes agree with 160 to the
# rounding level (~1e-13 relative) for |r| <= 0.5, 64 up to |r| = 0.9 (measured)
_TL_RULES = {32: _gl01(32), 64: _gl01(64)}


def _lower_tail(a, b, r):
    """Phi2(a, b; r) for a, b < -1 and r < 0, to full relative accuracy (positive integrand)."""
    lo = np.minimum(a, b)
    hi = np.maximum(a, b)
    s = np.sqrt(1 - r * r)
    # the integrand's log falls at least like -|lo| u - u^2/2: cut where that reaches -45
    U = lo + np.sqrt(lo * lo + 90.0)
    tl_x, tl_w = _TL_RULES[32 if abs(r) <= 0.5 else 64]
    u = U[:, None] * tl_x
    x = lo[:, None] - u
    logf = -0.5 * x * x - 0.5 * np.log(2 * np.pi) + log_ndtr((hi[:, None] - r * x) / s)
    return U * (np.exp(logf) @ tl_w)


def _plackett(b, lo, hi, d, sb):
    """``(1/2 pi) int_lo^hi exp(g(x)) dx`` and its quadrature error, ``g = -(d + sb
    sin^2(x/2))^2 / (2 sin^2 x) - b^2 / 2``: the integrand of :func:`mp_phi2` in a variable
    measured from ``t = +-pi/2``, free of cancellation there.  ``exp(g)`` is scaled to O(1) by
    its largest value on a coarse grid before the quadrature, whose tolerance is absolute (an
    under-estimate of the maximum is harmless)."""

    def g(x):
        sx = mpmath.sin(x)
        return -(d + sb * mpmath.sin(x / 2) ** 2) ** 2 / (2 * sx * sx) - b * b / 2

    grid = [lo + (hi - lo) * (k + mpmath.mpf(1) / 2) / 16 for k in range(16)]
    gmax = max(g(x) for x in grid + [x for x in (lo, hi) if mpmath.sin(x) != 0])

    def f(x):
        return mpmath.exp(g(x) - gmax) if mpmath.sin(x) != 0 else mpmath.mpf(0)

    val, err = mpmath.quad(f, [lo, hi], error=True)
    scale = mpmath.exp(gmax) / (2 * mpmath.pi)
    return val * scale, err * scale


def mp_phi2(a, b, r):
    """Bivariate normal CDF at the current mpmath precision by tanh-sinh quadrature of
    Plackett's identity dPhi2/dr = phi2 (``f = exp(-(a^2 + b^2 - 2 a b sin t) / (2 cos^2
    t))``, ``t = asin r``), from ``r = 0``: ``Phi(a) Phi(b) + (1/2 pi) int_0^{asin r} f dt``.
    For ``r < 0`` that cancels in the joint lower tail (it lost all digits at
    ``Phi2(-15.2, -19.6; -1/3) ~ 1e-203``, head ~1e-137); where more than 3 digits cancel the
    form from ``r = -1`` is used instead, a sum of two non-negative terms:
    ``max(0, Phi(a) - Phi(-b)) + (1/2 pi) int_{-pi/2}^{asin r} f dt``.  The working precision
    is raised until the digits lost to cancellation and the quadrature's error estimate are
    both below the target."""
    a, b, r = mpmath.mpf(a), mpmath.mpf(b), mpmath.mpf(r)
    if r == 0:
        return mpmath.ncdf(a) * mpmath.ncdf(b)
    if not -1 <= r <= 1:
        raise ValueError(f"Phi2: the correlation r must lie in [-1, 1]; got {r}")
    if abs(r) == 1:       # degenerate: z_2 = +-z_1
        return mpmath.ncdf(min(a, b)) if r > 0 else max(mpmath.ncdf(a) - mpmath.ncdf(-b), 0)
    tol = mpmath.mpf(10) ** (-mpmath.mp.dps - 2)
    extra, lower = 10, False
    for _ in range(8):
        with mpmath.extradps(extra):
            half_pi = mpmath.pi / 2
            if not lower:     # from r = 0, in v = pi/2 - t
                head = mpmath.ncdf(a) * mpmath.ncdf(b)
                lo, hi = sorted((mpmath.acos(r), half_pi))
                integral, qerr = _plackett(b, lo, hi, a - b, 2 * b)
                val = head + integral if r > 0 else head - integral
                lost = 0 if r > 0 else (int(mpmath.log10(head / val)) + 1 if val > 0 else 99)
                lower = lost > 3
            if lower:         # from r = -1, in u = t + pi/2
                pa, pb = mpmath.ncdf(a), mpmath.ncdf(-b)
                head = max(pa - pb, 0)
                integral, qerr = _plackett(b, mpmath.mpf(0), mpmath.acos(-r), a + b, -2 * b)
                val = head + integral
                lost = 0 if head == 0 else max(0, int(mpmath.log10(max(pa, pb) / head)) + 1)
            ok = val > 0 and qerr <= tol * val
        if ok and lost + 5 <= extra:
            return +val
        extra = max(lost, extra) + 10
    raise ArithmeticError(f"Phi2({a}, {b}; {r}) not resolved to the working precision")
