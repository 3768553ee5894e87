"""Matrix denoising with a Wishart prior: spectrum, MMSE and mutual information (THEORY 1.1).

Model: Y = S + sqrt(Delta) Z with Z GOE (semicircle of variance 1) and S = W W^T / sqrt(R D),
R = rho D.  The spectrum of S is free Poisson of rate rho and jump 1/sqrt(rho) (mean sqrt(rho),
variance 1, atom 1 - rho at 0 when rho < 1); mu_Delta = mu_S boxplus semicircle(Delta).  With
s = sqrt(kappa) = 1/sqrt(rho) the Stieltjes transform g(z) = int mu(t)/(z - t) dt is the inverse of

    z(g) = sqrt(rho)/(1 - s g) + Delta g + 1/g,

i.e. a root of  s Delta g^3 - (s z + Delta) g^2 + (z + s - 1/s) g - 1 = 0,  and
mu_Delta(x) = Im g(x - i0)/pi.

Numerical method.  Support edges are the critical values z(g_c) of the *physical* real critical
points (roots of the quartic z'(g) = 0 that satisfy the subordination check g_c = G_S(omega_c),
omega_c = z(g_c) - Delta g_c outside supp mu_S).  Each support interval [a, b] is mapped by
x = (a + b)/2 - (b - a)/2 cos(theta), which makes every integrand analytic in theta on [0, pi];
[0, pi] is cut into panels, graded geometrically towards the images of the remaining branch
points (the other critical values: the other interval's edges, complex critical values near a
merging of two intervals), and each panel gets Gauss-Legendre nodes.  The cubic is solved at each
node (in double precision: Cardano's formula in its cancellation-free form for the real root and
Vieta for the complex pair, the companion matrix's eigenvalues where that is not reliable, then
Newton on z(g) - x; at mpmath precision, Newton started from the double-precision root); the
nodes of many Delta are solved in one vectorised pass (:func:`integrals_many`).  Errors are
reported as the difference between two orders.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import mpmath
import numpy as np

from .records import ConvergenceError, Estimate, require

__all__ = [
    "support",
    "density",
    "stieltjes",
    "rie_denoiser",
    "log_potential",
    "log_energy",
    "mmse",
    "mmse_literal",
    "mmse_estimate",
    "mutual_information",
    "mutual_information_estimate",
    "integrals_many",
]

_BASE_PANELS = 4  # equal panels of [0, pi] before grading
_GRADE = 3.0  # geometric ratio of the graded panels
_ORDER_F = 24  # Gauss-Legendre points per panel, double precision
_ORDER_F_LO = 16  # the coarser order used for the error estimate
_GUARD = 10  # extra decimal digits carried by the mpmath path
_REAL_TOL_F = 1e-7  # |Im g_c| / |g_c| below which a critical point counts as real (double)
# Smallest rho of the double-precision integrals (mmse, I, Sigma). mmse ~ 2 rho Delta comes out
# of Delta/(1 + Delta) minus an integral: about log10(1/rho) digits cancel, and the bulk of mass
# rho at x ~ 1/sqrt(rho) is resolved less and less well. Measured against the mpmath route and
# the small-rho expansion 2 rho Delta - rho^2 Delta (1 + Delta) for Delta in [1e-10, 1e8]: at
# rho = 1e-4 at least 6 correct digits; at rho = 1e-5 four, with the error estimate up to 2.4x
# too small; at rho = 1e-8 none (Delta = 0.01: 1.1e-6 for 2e-10), at 1e-12 negative values.
# Below it the mpmath route (dps given) is still exact, but slow (~1 min per point).
RHO_MIN_DOUBLE = 1e-4
# Largest rho of the double-precision integrals: at rho = 1e18 the bars stop covering the
# deviation from the mpmath route (1.6e-15 against 5.6e-16 at Delta = 1), at 1e30 by 25x
# (2.7e-3 against 1.1e-4); up to 1e16 they cover at Delta in [1e-3, 1e4].
RHO_MAX_DOUBLE = 1e16
# Above this Delta the double route takes the large-Delta series instead of the quadrature:
# its quartic's roots lose their digits (ZeroDivisionError at Delta = 1e14 for rho = 0.5, bars
# 4-50x short of the error from Delta ~ 1e17); the series' remainder is below 1e-28 there.
DELTA_SERIES = 1e12
EPS = float(np.finfo(float).eps)


# --------------------------------------------------------------------------------------------
# input checking and small helpers
# --------------------------------------------------------------------------------------------


def _positive(value: Any) -> bool:
    try:
        v = float(value)
    except (TypeError, ValueError):
        return False
    return math.isfinite(v) and v > 0


def _check(rho: Any, delta: Any) -> None:
    require(_positive(rho), "rho", "a finite real number > 0", rho)
    require(_positive(delta), "delta", "a finite real number > 0", delta)


def _check_double(rho: Any) -> None:
    require(RHO_MIN_DOUBLE <= float(rho) <= RHO_MAX_DOUBLE, "rho",
            f"in [{RHO_MIN_DOUBLE:g}, {RHO_MAX_DOUBLE:g}] in double precision (outside: give dps, "
            "the mpmath route)", rho)


def _large_delta(rho: float, delta: float) -> dict:
    """The integrals at large Delta from the series (coefficients read off the mpmath route at
    Delta = 1e6 .. 1e10 for rho in [1e-4, 1e6], where they hold to 6 digits or more):
    mmse = 1 - 1/D + c2/D^2 + c3/D^3 + c4/D^4 + .., c2 = 1 - 1/rho, c3 = 4/rho - 1/rho^2 - 1,
    |c4| <= (1 + 1/rho)^3 (measured); by I-MMSE (dI/dD = -mmse/(4 D^2), I -> 0)
    I = 1/(4D) - 1/(8D^2) + c2/(12 D^3) + c3/(16 D^4) + ..; Sigma = 2 I + log(D)/2 - 1/4
    (THEORY 1.1); mu_Delta = mu_S boxplus semicircle(D) keeps the mean sqrt(rho) and adds D to
    the second moment rho + 1. Remainders: :func:`_large_delta_error`."""
    D, x, k = float(delta), 1.0 / float(delta), 1.0 / float(rho)
    c2, c3 = 1.0 - k, 4.0 * k - k * k - 1.0
    mmse = 1.0 - x + c2 * x * x + c3 * x**3
    mi = 0.25 * x - 0.125 * x * x + c2 / 12.0 * x**3 + c3 / 16.0 * x**4
    return {"mass": 1.0, "mean": math.sqrt(rho), "m2": rho + 1.0 + D, "mmse": mmse,
            "mmse_literal": mmse, "sigma": 2.0 * mi + 0.5 * math.log(D) - 0.25, "mi": mi,
            "nodes": 0}


def _large_delta_error(rho: float, delta: float, key: str) -> float:
    """Bound on the remainder of :func:`_large_delta`: twice the c4 term's bound (the terms
    after it shrink geometrically, by about (1 + 1/rho)/D << 1/2 at D > DELTA_SERIES)."""
    x = 1.0 / float(delta)
    y = (1.0 + 1.0 / float(rho)) * x
    return 2.0 * y**3 * x if key != "mi" else 0.1 * y**3 * x * x


def _check_mmse(value: Any, delta: Any) -> None:
    """0 <= mmse <= Delta/(1 + Delta) (THEORY 1.1, the stable form: Delta/(1 + Delta) minus a
    non-negative integral); a negative value is digits lost to cancellation, never a result."""
    if not value >= 0:
        raise ConvergenceError(f"mmse at Delta = {delta} came out negative: digits lost to "
                               "cancellation", last_iterate=value, residual=None)


def _check_dps(dps: Any) -> int:
    require(
        isinstance(dps, (int, np.integer)) and not isinstance(dps, bool) and 5 <= dps <= 2000,
        "dps",
        "an integer in [5, 2000] (or None for double precision)",
        dps,
    )
    return int(dps)


def _finite_or_raise(value: Any, what: str) -> Any:
    ok = mpmath.isfinite(value) if isinstance(value, (mpmath.mpf, mpmath.mpc)) else None
    if ok is None:
        ok = bool(np.all(np.isfinite(value)))
    if not ok:
        raise ConvergenceError(f"non-finite {what}", last_iterate=value, residual=None)
    return value


@functools.lru_cache(maxsize=64)
def _gl_f(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Gauss-Legendre nodes and weights on [-1, 1] (double)."""
    x, w = np.polynomial.legendre.leggauss(n)
    x.setflags(write=False)
    w.setflags(write=False)
    return x, w


@functools.lru_cache(maxsize=64)
def _gl_mp(n: int, dps: int) -> tuple[tuple, tuple]:
    """Gauss-Legendre nodes and weights on [-1, 1] at ``dps`` digits (Newton from double seeds)."""
    seeds, _ = np.polynomial.legendre.leggauss(n)
    xs: list = []
    ws: list = []
    with mpmath.workdps(dps + 5):
        half_tol = mpmath.mpf(10) ** (-(dps + 8) / 2)

        def legendre(x: Any) -> tuple[Any, Any]:
            p0, p1 = mpmath.mpf(1), x
            for k in range(2, n + 1):
                p0, p1 = p1, ((2 * k - 1) * x * p1 - (k - 1) * p0) / k
            return p1, n * (x * p1 - p0) / (x * x - 1)

        for x0 in seeds[: (n + 1) // 2]:
            x = mpmath.mpf(float(x0))
            for _ in range(60):
                p, dp = legendre(x)
                dx = p / dp
                x -= dx
                if abs(dx) < half_tol:
                    break
            else:
                raise ConvergenceError("Gauss-Legendre nodes", last_iterate=x, residual=dx)
            _, dp = legendre(x)
            xs.append(x)
            ws.append(2 / ((1 - x * x) * dp * dp))
        full_x = [-x for x in xs] + list(reversed(xs[: n // 2]))
        full_w = list(ws) + list(reversed(ws[: n // 2]))
    with mpmath.workdps(dps):
        return tuple(+x for x in full_x), tuple(+w for w in full_w)


_LADDER = (8, 12, 16, 20, 24, 32, 40, 48, 64, 80, 96, 128, 160, 192, 256)


def _panel_order(t0: Any, t1: Any, images: list, digits: float) -> int:
    """Smallest ladder order whose Gauss-Legendre error bound rho^(-2n) beats 10^-digits.

    rho is the Bernstein-ellipse parameter of the nearest singular image in the theta plane.
    """
    c, h = (t0 + t1) / 2, (t1 - t0) / 2
    rho_min = math.inf
    for th in images:
        w = complex((th - c) / h)
        r = w + np.sqrt(w * w - 1)
        rho_min = min(rho_min, max(abs(r), 1.0 / max(abs(r), 1e-300)))
    rho_min = max(rho_min, 1.2)
    need = digits * math.log(10) / (2 * math.log(rho_min)) + 3
    for n in _LADDER:
        if n >= need:
            return n
    return _LADDER[-1]


def _mp_digits(dps: int, coarse: bool = False) -> float:
    """Target digits of the panel orders at ``dps`` (the coarse rule aims at 3/4 of them)."""
    digits = dps + 6.0
    return 0.75 * digits if coarse else digits


# --------------------------------------------------------------------------------------------
# support: critical points of z(g) and the subordination check
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Spectrum:
    rho: Any
    delta: Any
    s: Any  # sqrt(kappa) = 1/sqrt(rho)
    m: Any  # sqrt(rho), the mean of mu_S
    intervals: tuple  # ((a, b, g(a), g(b)), ...) sorted
    crit: tuple  # ((x_c as python complex, edge index or None), ...) for grading


def _z(g: Any, s: Any, m: Any, delta: Any) -> Any:
    return m / (1 - s * g) + delta * g + 1 / g


def _is_physical_edge(g: float, s: float, delta: float) -> bool:
    """Biane's check: g is an edge iff G_S(omega) = g on the physical branch, omega real."""
    m = 1.0 / s
    if g == 0.0 or 1.0 - s * g == 0.0:
        return False
    omega = 1.0 / g + m / (1.0 - s * g)
    lam_lo, lam_hi = m * (1.0 - s) ** 2, m * (1.0 + s) ** 2
    if lam_lo < omega < lam_hi:
        return False
    b = omega + s - m
    disc = max(b * b - 4.0 * s * omega, 0.0)
    sq = math.copysign(math.sqrt(disc), omega - (lam_lo + lam_hi) / 2)
    with np.errstate(divide="ignore", invalid="ignore"):
        phys = np.float64(2.0) / np.float64(b + sq)
        other = np.float64(b + sq) / np.float64(2.0 * s * omega)
    d_phys = abs(phys - g) if np.isfinite(phys) else math.inf
    d_other = abs(other - g) if np.isfinite(other) else math.inf
    return bool(d_phys < d_other)


def _select_edges(entries: list, s: Any, delta: Any) -> list:
    """Edges among the real critical points ``entries`` = [(z(g_c), g_c), ...].

    The largest negative and the smallest positive g_c are always the outer edges (z decreases
    from the pole at g = 0 to them); any other real critical point is an inner edge iff it
    passes Biane's check.  A lone inner candidate (a tangency at round-off level) is dropped.
    """
    neg = [e for e in entries if e[1] < 0]
    pos = [e for e in entries if e[1] > 0]
    outer = []
    if neg:
        outer.append(max(neg, key=lambda e: e[1]))
    if pos:
        outer.append(min(pos, key=lambda e: e[1]))
    inner = [
        e
        for e in entries
        if not any(e is o for o in outer)
        and _is_physical_edge(float(e[1]), float(s), float(delta))
    ]
    if len(inner) % 2:
        inner = []
    return outer + inner


def _quartic_coeffs(rho: Any, delta: Any, s: Any) -> list:
    kappa = 1 / rho
    return [delta * kappa, -2 * delta * s, delta + 1 - kappa, 2 * s, -1]


def _assemble(edges: list, crit_all: list) -> tuple[tuple, tuple]:
    """Pair sorted edges into intervals; tag the critical values that are edges."""
    if len(edges) < 2 or len(edges) % 2:
        raise ConvergenceError(
            "could not identify the support edges", last_iterate=edges, residual=None
        )
    edges.sort(key=lambda e: e[0])
    intervals = tuple(
        (edges[i][0], edges[i + 1][0], edges[i][1], edges[i + 1][1])
        for i in range(0, len(edges), 2)
    )
    tags = {id(e): k for k, e in enumerate(edges)}
    crit = tuple((xc, tags.get(id(e))) for xc, e in crit_all)
    return intervals, crit


def _polish_quartic(r: complex, coeffs: list) -> complex:
    def q(g: complex) -> tuple[complex, complex]:
        p, dp = 0j, 0j
        for c in coeffs:
            dp = dp * g + p
            p = p * g + c
        return p, dp

    p, dp = q(r)
    for _ in range(4):
        if dp == 0:
            break
        rn = r - p / dp
        pn, dpn = q(rn)
        if abs(pn) >= abs(p):
            break
        r, p, dp = rn, pn, dpn
    return r


@functools.lru_cache(maxsize=4096)
def _spectrum_f(rho: float, delta: float) -> _Spectrum:
    s, m = 1.0 / math.sqrt(rho), math.sqrt(rho)
    coeffs = [float(c) for c in _quartic_coeffs(rho, delta, s)]
    roots = [_polish_quartic(complex(r), coeffs) for r in np.roots(coeffs)]
    edges: list = []
    crit_all: list = []
    for r in roots:
        if abs(r.imag) <= _REAL_TOL_F * abs(r):
            g = r.real
            if g == 0 or 1.0 - s * g == 0:  # a pole of z(g), reached by rounding at large
                continue  # Delta (1e14, rho = 0.5): never an edge, nor a critical point
            entry = (float(_z(g, s, m, delta)), g)
            edges.append(entry)
            crit_all.append((entry[0], entry))
        else:
            crit_all.append((complex(_z(r, s, m, delta)), (None, None)))
    intervals, crit = _assemble(_select_edges(edges, s, delta), crit_all)
    return _Spectrum(rho, delta, s, m, intervals, crit)


@functools.lru_cache(maxsize=256)
def _spectrum_mp(rho: Any, delta: Any, dps: int) -> _Spectrum:
    with mpmath.workdps(dps + _GUARD):
        rho_, delta_ = mpmath.mpf(rho), mpmath.mpf(delta)
        s = 1 / mpmath.sqrt(rho_)
        m = mpmath.sqrt(rho_)
        coeffs = _quartic_coeffs(rho_, delta_, s)
        roots = None
        for steps, extra in ((100, 2 * mpmath.mp.prec), (400, 4 * mpmath.mp.prec)):
            try:
                roots = mpmath.polyroots(coeffs, maxsteps=steps, extraprec=extra)
                break
            except mpmath.libmp.NoConvergence:
                continue
        if roots is None:
            raise ConvergenceError("quartic for the support edges", last_iterate=coeffs)
        tol = mpmath.mpf(10) ** (-(dps + _GUARD) // 2 + 2)
        edges: list = []
        crit_all: list = []
        for r in roots:
            r = mpmath.mpc(r)
            if abs(r.imag) <= tol * abs(r):
                g = r.real
                if g == 0 or 1 - s * g == 0:  # a pole of z(g), as in _spectrum_f
                    continue
                entry = (_z(g, s, m, delta_), g)
                edges.append(entry)
                crit_all.append((entry[0], entry))
            else:
                crit_all.append((_z(r, s, m, delta_), (None, None)))
        intervals, crit = _assemble(_select_edges(edges, s, delta_), crit_all)
        return _Spectrum(rho_, delta_, s, m, intervals, crit)


def _spectrum(rho: Any, delta: Any, dps: int | None) -> _Spectrum:
    if dps is None:
        return _spectrum_f(float(rho), float(delta))
    return _spectrum_mp(_mp_key(rho, dps), _mp_key(delta, dps), dps)


def _mp_key(v: Any, dps: int) -> Any:
    with mpmath.workdps(dps + _GUARD):
        return mpmath.mpf(v)


# --------------------------------------------------------------------------------------------
# quadrature nodes on the support
# --------------------------------------------------------------------------------------------


def _singular_images(k: int, sp: _Spectrum, floor: float, mp: bool = False) -> list:
    """Images in the theta plane of interval ``k`` of the branch points other than its own edges.

    Imaginary parts are raised to ``floor`` (grading stops there).  Python complex in double,
    mpc (at the working precision) when ``mp``.
    """
    a, b = sp.intervals[k][0], sp.intervals[k][1]
    mid, half = (a + b) / 2, (b - a) / 2
    two_pi = 2 * mpmath.pi if mp else 2 * math.pi
    out = []
    for xc, tag in sp.crit:
        if tag is not None and tag in (2 * k, 2 * k + 1):
            continue
        if mp:
            theta = mpmath.acos(mpmath.mpc((mid - xc) / half))
            theta = mpmath.mpc(theta.real, max(abs(theta.imag), floor))
        else:
            theta = complex(np.arccos(complex((mid - xc) / half)))
            theta = complex(theta.real, max(abs(theta.imag), floor))
        out.extend((theta, -theta, two_pi - theta))
    return out


def _breakpoints(images: list, tiny: float, mp: bool = False) -> list:
    """Panel ends in theta: equal base panels, graded geometrically towards singular images.

    Ends closer than ``tiny`` are merged.
    """
    pi = +mpmath.pi if mp else math.pi
    width = pi / _BASE_PANELS
    pts = [j * width for j in range(1, _BASE_PANELS)]
    for theta in images:
        tr, d = theta.real, abs(theta.imag)
        step = d
        while step < width:
            pts.extend(t for t in (tr - step, tr + step) if 0 < t < pi)
            step *= _GRADE
    pts = sorted(pts)
    out = [pi * 0]
    for t in pts:
        if t - out[-1] > tiny:
            out.append(t)
    if pi - out[-1] <= tiny:
        out.pop()
    out.append(pi)
    return out


def _floor(digits: float) -> float:
    """Smallest grading distance: a cusp (|t|^(1/3)) left inside it costs ~ floor^(4/3)."""
    return 10.0 ** (-0.75 * digits)


def _panel_nodes_f(sp: _Spectrum, n: int, digits: float) -> tuple[np.ndarray, np.ndarray]:
    """Nodes x and weights w (for dx) on the support, double precision."""
    xi, wi = _gl_f(n)
    xs, ws = [], []
    for k, (a, b, _, _) in enumerate(sp.intervals):
        mid, half = 0.5 * (a + b), 0.5 * (b - a)
        images = _singular_images(k, sp, _floor(digits))
        br = np.asarray(_breakpoints(images, 1e-3 * _floor(digits)), dtype=float)
        c, h = 0.5 * (br[1:] + br[:-1]), 0.5 * (br[1:] - br[:-1])
        theta = (c[:, None] + h[:, None] * xi[None, :]).ravel()
        wt = (h[:, None] * wi[None, :]).ravel()
        xs.append(mid - half * np.cos(theta))
        ws.append(half * np.sin(theta) * wt)
    return np.concatenate(xs), np.concatenate(ws)


@functools.lru_cache(maxsize=512)
def _nodes_f(
    rho: float, delta: float, n: int, digits: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Nodes x, weights w (for dx) and g(x - i0) at the nodes, double precision."""
    sp = _spectrum_f(rho, delta)
    x, w = _panel_nodes_f(sp, n, digits)
    g = _roots_f(x, sp, np.ones(x.shape, dtype=bool))
    for arr in (x, w, g):
        arr.setflags(write=False)
    return x, w, g


def _cubic_roots_f(x: np.ndarray, s: float, delta: float) -> np.ndarray:
    lead = s * delta
    comp = np.zeros((x.size, 3, 3))
    comp[:, 0, 0] = (s * x + delta) / lead
    comp[:, 0, 1] = -(x + s - 1.0 / s) / lead
    comp[:, 0, 2] = 1.0 / lead
    comp[:, 1, 0] = 1.0
    comp[:, 2, 1] = 1.0
    return np.linalg.eigvals(comp)


def _newton_f(g: np.ndarray, x: np.ndarray, s: float, m: float, delta: Any,
              iters: int = 3) -> np.ndarray:
    """Newton's method on z(g) = x (a step is kept only where it lowers |z(g) - x|); ``delta``
    a scalar or one value per point."""
    with np.errstate(all="ignore"):

        def resid(h: np.ndarray) -> np.ndarray:
            return m / (1.0 - s * h) + delta * h + 1.0 / h - x

        f = resid(g)
        for _ in range(iters):
            one = 1.0 - s * g
            df = 1.0 / (one * one) + delta - 1.0 / (g * g)
            gn = g - f / df
            fn = resid(gn)
            better = np.isfinite(fn) & (np.abs(fn) < np.abs(f))
            g = np.where(better, gn, g)
            f = np.where(better, fn, f)
    return g


def _complex_root_f(x: np.ndarray, s: float, delta: float) -> tuple[np.ndarray, np.ndarray]:
    """The root with Im > 0 of the cubic at each x in closed form, and where it is reliable.

    The real root of the cubic by Cardano's formula in its cancellation-free form (the cube
    root of |q|/2 + sqrt(D), the other term by Vieta), polished by two Newton steps; the pair
    from the quadratic factor (sum and product of the roots, Vieta). Unreliable (False): one
    real root only is not certain (D or the pair's Im^2 not > 0), or the real root lies within
    1e-3 |g| of the pair (near a triple root: a cusp of mu_Delta).
    """
    lead = s * delta
    A = -(s * x + delta) / lead  # monic cubic g^3 + A g^2 + B g + C
    B = (x + s - 1.0 / s) / lead
    C = -1.0 / lead
    p = B - A * A / 3.0  # depressed: t^3 + p t + q, g = t - A/3
    q = (2.0 * A * A / 27.0 - B / 3.0) * A + C
    D = (0.5 * q) ** 2 + (p / 3.0) ** 3
    one_real = D > 0
    with np.errstate(all="ignore"):
        u = -np.copysign(np.cbrt(0.5 * np.abs(q) + np.sqrt(np.where(one_real, D, 0.0))), q)
        r = u - p / (3.0 * u) - A / 3.0
        for _ in range(2):
            r = r - (((r + A) * r + B) * r + C) / ((3.0 * r + 2.0 * A) * r + B)
        b = A + r  # the pair: g^2 + b g + c
        c = -C / r
        im2 = c - 0.25 * b * b
        g = -0.5 * b + 1j * np.sqrt(np.where(im2 > 0, im2, 0.0))
        ok = one_real & (im2 > 0) & np.isfinite(g) & (np.abs(r - g) > 1e-3 * np.abs(g))
    return g, ok


def _inside_roots_f(x: np.ndarray, s: float, m: float, delta: Any) -> np.ndarray:
    """g(x - i0) (Im g >= 0) at points x inside the support, ``delta`` a scalar or one value
    per point: the closed form of :func:`_complex_root_f`; where it is not reliable, the
    largest-Im eigenvalue of the companion matrix; then Newton's method on z(g) = x."""
    g, ok = _complex_root_f(x, s, delta)
    bad = ~ok
    if np.any(bad):
        d_bad = delta[bad] if np.ndim(delta) else delta
        roots = _cubic_roots_f(x[bad], s, d_bad)
        g[bad] = roots[np.arange(int(bad.sum())), np.argmax(roots.imag, axis=1)]
    g = _newton_f(g, x, s, m, delta)
    return np.where(g.imag < 0, g.conj(), g)


def _roots_f(x: np.ndarray, sp: _Spectrum, inside: np.ndarray) -> np.ndarray:
    """Physical g(x - i0): largest-Im root inside the support (:func:`_inside_roots_f`), the
    physical real root outside (companion eigenvalues, then Newton's method on z(g) = x)."""
    x = np.asarray(x, dtype=float)
    g = np.zeros(x.shape, dtype=complex)
    if x.size == 0:
        return g
    if np.any(inside):
        g[inside] = _inside_roots_f(x[inside], sp.s, sp.m, sp.delta)
    out = ~inside
    if np.any(out):
        xo = x[out]
        lo = np.empty(xo.shape)
        hi = np.empty(xo.shape)
        iv = sp.intervals
        left, right = xo <= iv[0][0], xo >= iv[-1][1]
        lo[left], hi[left] = iv[0][2], 0.0
        lo[right], hi[right] = 0.0, iv[-1][3]
        for j in range(len(iv) - 1):
            gap = (xo >= iv[j][1]) & (xo <= iv[j + 1][0])
            lo[gap], hi[gap] = iv[j + 1][2], iv[j][3]
        ro = _cubic_roots_f(xo, sp.s, sp.delta)
        re = ro.real
        dist = np.maximum(lo[:, None] - re, 0.0) + np.maximum(re - hi[:, None], 0.0)
        dist = dist + np.abs(ro.imag)
        go = ro[np.arange(xo.size), np.argmin(dist, axis=1)].real.astype(complex)
        g[out] = _newton_f(go, xo, sp.s, sp.m, sp.delta).real
    return g


def _inside(x: np.ndarray, sp: _Spectrum) -> np.ndarray:
    mask = np.zeros(x.shape, dtype=bool)
    for a, b, _, _ in sp.intervals:
        mask |= (x > a) & (x < b)
    return mask


def _nodes_mp(sp: _Spectrum, digits: float, dps: int) -> tuple[list, list, list]:
    """Nodes, dx-weights and g(x - i0) at working precision dps + guard (mpmath).

    Each panel gets the Gauss-Legendre order that its nearest singular image requires for
    ``digits`` correct digits.
    """
    prec_dps = dps + _GUARD
    xs: list = []
    ws: list = []
    with mpmath.workdps(prec_dps):
        for k, (a, b, _, _) in enumerate(sp.intervals):
            mid, half = (a + b) / 2, (b - a) / 2
            images = _singular_images(k, sp, _floor(digits), mp=True)
            br = _breakpoints(images, 1e-3 * _floor(digits), mp=True)
            for t0, t1 in zip(br[:-1], br[1:], strict=True):
                xi, wi = _gl_mp(_panel_order(t0, t1, images, digits), prec_dps)
                c, h = (t0 + t1) / 2, (t1 - t0) / 2
                for u, wu in zip(xi, wi, strict=True):
                    th = c + h * u
                    xs.append(mid - half * mpmath.cos(th))
                    ws.append(half * mpmath.sin(th) * h * wu)
        sp_f = _spectrum_f(float(sp.rho), float(sp.delta))
        xf = np.array([float(x) for x in xs])
        roots = np.sort_complex(_cubic_roots_f(xf, sp_f.s, sp_f.delta))
        dist = np.abs(roots[:, :, None] - roots[:, None, :])
        sep = np.min(np.where(np.eye(3, dtype=bool), np.inf, dist), axis=(1, 2))
        seeds = _roots_f(xf, sp_f, np.ones(xf.shape, dtype=bool))
        # near a (double or triple) root the double seed may sit in the wrong basin
        risky = sep < 1e-4 * np.abs(seeds)
        gs = [
            _polyroot_mp(x, sp, inside=True) if bad else _newton_mp(complex(g0), x, sp, prec_dps)
            for g0, x, bad in zip(seeds, xs, risky, strict=True)
        ]
        gs = [mpmath.conj(g) if g.imag < 0 else g for g in gs]
    return xs, ws, gs


def _newton_mp(g0: complex, x: Any, sp: _Spectrum, prec_dps: int) -> Any:
    s, m, delta = sp.s, sp.m, sp.delta
    g = mpmath.mpc(g0)
    tol = mpmath.mpf(10) ** (-prec_dps + 2)
    for _ in range(12):
        one = 1 - s * g
        f = m / one + delta * g + 1 / g - x
        df = 1 / (one * one) + delta - 1 / (g * g)
        step = f / df
        g -= step
        if abs(step) <= tol * abs(g):
            break
    else:
        g = _polyroot_mp(x, sp, inside=True)
    if g.imag < 0:
        g = mpmath.conj(g)
    return g


def _polyroot_mp(x: Any, sp: _Spectrum, *, inside: bool) -> Any:
    s, delta = sp.s, sp.delta
    coeffs = [s * delta, -(s * x + delta), x + s - 1 / s, -1]
    roots = [mpmath.mpc(r) for r in mpmath.polyroots(coeffs, maxsteps=200, extraprec=400)]
    if inside:
        return max(roots, key=lambda r: r.imag)
    iv = sp.intervals
    if x <= iv[0][0]:
        lo, hi = iv[0][2], 0
    elif x >= iv[-1][1]:
        lo, hi = 0, iv[-1][3]
    else:
        j = max(j for j in range(len(iv)) if iv[j][1] <= x)
        lo, hi = iv[j + 1][2], iv[j][3]

    def dist(r: Any) -> Any:
        return max(lo - r.real, 0) + max(r.real - hi, 0) + abs(r.imag)

    return mpmath.mpc(min(roots, key=dist).real)


# --------------------------------------------------------------------------------------------
# integrals over mu_Delta
# --------------------------------------------------------------------------------------------


def _integrals_batch_f(rho: float, deltas, n: int, digits: float) -> list[dict]:
    """The integrals of :func:`_integrals_f` at many Delta, the roots and integrands of all
    their nodes in one vectorised pass (sums per Delta by segment)."""
    rho = float(rho)
    deltas = np.array([float(d) for d in deltas])
    if not deltas.size:
        return []
    s, m = 1.0 / math.sqrt(rho), math.sqrt(rho)
    xs, ws, n_iv = [], [], []
    for d in deltas:
        sp = _spectrum_f(rho, float(d))
        x_d, w_d = _panel_nodes_f(sp, n, digits)
        xs.append(x_d)
        ws.append(w_d)
        n_iv.append(len(sp.intervals))
    counts = np.array([len(x_d) for x_d in xs])
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    x, w = np.concatenate(xs), np.concatenate(ws)
    delta = np.repeat(deltas, counts)
    g = _inside_roots_f(x, s, m, delta)
    mu = g.imag / math.pi
    wm = w * mu
    c = 1.0 / (2.0 * (1.0 + delta))
    r = g.real - (x - m) * c
    u = s * g
    one = 1.0 - u
    ur = (u / one).real
    log1mu = 0.5 * np.log1p(-2.0 * u.real + (u * u.conj()).real)
    lpot = rho * (1.0 / one).real + rho * log1mu - np.log(np.abs(g))
    lpot = lpot + 0.5 * delta * (g * g).real - rho
    a_term = rho * (ur + log1mu)
    g2 = (g * g.conj()).real
    wq = g2 / (one * one.conj()).real
    with np.errstate(divide="ignore", invalid="ignore"):
        b_term = np.where(wq < 0.5, -0.5 * np.log1p(-wq), -0.5 * np.log(delta * g2))
    sums = np.add.reduceat(np.stack([wm, wm * x, wm * x * x, wm * r * r, wm * mu * mu,
                                     wm * lpot, wm * (a_term + b_term)]), starts, axis=1)
    mass, mean, m2, rr, mu3, sigma, ab = sums
    mmse_v = deltas / (1.0 + deltas) - 4.0 * deltas**2 * rr
    mmse_lit = deltas - (4.0 * math.pi**2 / 3.0) * deltas**2 * mu3
    two_i = ab + mmse_v / (4.0 * deltas)
    cols = {"mass": mass, "mean": mean, "m2": m2, "mmse": mmse_v, "mmse_literal": mmse_lit,
            "sigma": sigma, "mi": 0.5 * two_i}
    for key, val in cols.items():
        _finite_or_raise(val, key)
    return [dict({k: float(v[i]) for k, v in cols.items()}, nodes=int(counts[i]),
                 intervals=n_iv[i]) for i in range(len(deltas))]


@functools.lru_cache(maxsize=4096)
def _integrals_f(rho: float, delta: float, n: int, digits: float) -> dict:
    return _integrals_batch_f(rho, [delta], n, digits)[0]


def integrals_many(deltas, *, rho: float, coarse: bool = False) -> list[dict]:
    """mmse, I (keys "mmse", "mi"), the number of support intervals ("intervals") and the
    moments of mu_Delta at many Delta in double precision, in one vectorised pass (THEORY 1.1);
    ``coarse`` selects the lower order of :func:`mmse_estimate`. Not cached."""
    deltas = np.atleast_1d(np.asarray(deltas, dtype=float))
    for d in deltas:
        _check(rho, d)
    _check_double(rho)
    if coarse:
        return _integrals_batch_f(float(rho), deltas, _ORDER_F_LO, 12.0)
    return _integrals_batch_f(float(rho), deltas, _ORDER_F, 16.0)


@functools.lru_cache(maxsize=256)
def _integrals_mp(rho: Any, delta: Any, digits: float, dps: int) -> dict:
    sp = _spectrum_mp(rho, delta, dps)
    xs, ws, gs = _nodes_mp(sp, digits, dps)
    with mpmath.workdps(dps + _GUARD):
        rho_, delta_, s, m = sp.rho, sp.delta, sp.s, sp.m
        pi = mpmath.pi
        c = 1 / (2 * (1 + delta_))
        acc = dict.fromkeys(("mass", "mean", "m2", "rr", "mu3", "sigma", "ab"), mpmath.mpf(0))
        for x, w, g in zip(xs, ws, gs, strict=True):
            mu = g.imag / pi
            wm = w * mu
            r = g.real - (x - m) * c
            u = s * g
            one = 1 - u
            log1mu = mpmath.log(abs(one))
            lpot = (rho_ / one).real + rho_ * log1mu - mpmath.log(abs(g))
            lpot += delta_ * (g * g).real / 2 - rho_
            g2 = abs(g) ** 2
            wq = g2 / abs(one) ** 2
            b_term = -mpmath.log1p(-wq) / 2 if wq < 0.5 else -mpmath.log(delta_ * g2) / 2
            a_term = rho_ * ((u / one).real + log1mu)
            acc["mass"] += wm
            acc["mean"] += wm * x
            acc["m2"] += wm * x * x
            acc["rr"] += wm * r * r
            acc["mu3"] += wm * mu * mu
            acc["sigma"] += wm * lpot
            acc["ab"] += wm * (a_term + b_term)
        mmse_v = delta_ / (1 + delta_) - 4 * delta_**2 * acc["rr"]
        out = {
            "mass": acc["mass"],
            "mean": acc["mean"],
            "m2": acc["m2"],
            "mmse": mmse_v,
            "mmse_literal": delta_ - 4 * pi**2 / 3 * delta_**2 * acc["mu3"],
            "sigma": acc["sigma"],
            "mi": (acc["ab"] + mmse_v / (4 * delta_)) / 2,
        }
    with mpmath.workdps(dps):
        out = {k: +v for k, v in out.items()}
    out["nodes"] = len(xs)
    for key, val in out.items():
        _finite_or_raise(val, key)
    return out


def _integrals(rho: Any, delta: Any, dps: int | None, *, coarse: bool = False) -> dict:
    _check(rho, delta)
    if dps is None:
        _check_double(rho)
        n, digits = (_ORDER_F_LO, 12.0) if coarse else (_ORDER_F, 16.0)
        out = (_large_delta(float(rho), float(delta)) if float(delta) > DELTA_SERIES
               else _integrals_f(float(rho), float(delta), n, digits))
    else:
        dps = _check_dps(dps)
        digits = _mp_digits(dps, coarse)
        out = _integrals_mp(_mp_key(rho, dps), _mp_key(delta, dps), digits, dps)
    _check_mmse(out["mmse"], delta)
    return out


def _scalar_or_loop(delta: Any, rho: Any, dps: int | None, key: str) -> Any:
    if dps is None and np.ndim(delta) > 0:
        arr = np.asarray(delta, dtype=float)
        return np.array([_integrals(rho, d, None)[key] for d in arr.ravel()]).reshape(arr.shape)
    return _integrals(rho, delta, dps)[key]


# --------------------------------------------------------------------------------------------
# public API
# --------------------------------------------------------------------------------------------


def support(rho: Any, delta: Any, *, dps: int | None = None) -> list[tuple]:
    """Support of mu_Delta as a sorted list of one or two intervals (a, b) (THEORY 1.1).

    Floats in double precision; mpf at ``dps`` digits when ``dps`` is given.
    """
    _check(rho, delta)
    if dps is None:
        return [(a, b) for a, b, _, _ in _spectrum(rho, delta, None).intervals]
    dps = _check_dps(dps)
    sp = _spectrum(rho, delta, dps)
    with mpmath.workdps(dps):
        return [(+a, +b) for a, b, _, _ in sp.intervals]


def stieltjes(x: Any, *, rho: Any, delta: Any, dps: int | None = None) -> Any:
    """g(x - i0) = int mu_Delta(t)/(x - i0 - t) dt (THEORY 1.1).

    Complex with Im g = pi mu_Delta(x) > 0 on the support, real (Im = 0) outside.  Vectorised in
    double precision; with ``dps`` a scalar x gives an mpc.
    """
    _check(rho, delta)
    if dps is not None:
        dps = _check_dps(dps)
        sp = _spectrum(rho, delta, dps)
        with mpmath.workdps(dps + _GUARD):
            xm = mpmath.mpf(x)
            inside = any(a < xm < b for a, b, _, _ in sp.intervals)
            g = _polyroot_mp(xm, sp, inside=inside)
            if inside and g.imag < 0:
                g = mpmath.conj(g)
        with mpmath.workdps(dps):
            return _finite_or_raise(+g, "stieltjes")
    sp = _spectrum(rho, delta, None)
    xa = np.asarray(x, dtype=float)
    flat = xa.ravel()
    g = _roots_f(flat, sp, _inside(flat, sp)).reshape(xa.shape)
    _finite_or_raise(g, "stieltjes")
    return g[()] if g.ndim == 0 else g


def density(x: Any, *, rho: Any, delta: Any, dps: int | None = None) -> Any:
    """mu_Delta(x) = Im g(x - i0)/pi, zero off the support (THEORY 1.1)."""
    g = stieltjes(x, rho=rho, delta=delta, dps=dps)
    if dps is not None:
        with mpmath.workdps(dps):
            return g.imag / mpmath.pi
    return np.imag(g) / math.pi


def rie_denoiser(x: Any, *, rho: Any, delta: Any, dps: int | None = None) -> Any:
    """Optimal rotationally invariant eigenvalue denoiser xi(x) = x - 2 Delta Re g(x).

    (THEORY 1.1; the RIE of S from Y = S + sqrt(Delta) Z.)
    """
    g = stieltjes(x, rho=rho, delta=delta, dps=dps)
    if dps is not None:
        with mpmath.workdps(dps):
            return mpmath.mpf(x) - 2 * mpmath.mpf(delta) * g.real
    return np.asarray(x, dtype=float) - 2.0 * float(delta) * np.real(g)


def log_potential(x: Any, *, rho: Any, delta: Any, dps: int | None = None) -> Any:
    """L(x) = int log|x - y| mu_Delta(y) dy in closed form (THEORY 1.1, by subordination).

    L = Re[rho/(1 - u)] + rho log|1 - u| - log|g| + Delta Re(g^2)/2 - rho, u = g/sqrt(rho),
    g = g(x - i0).
    """
    g = stieltjes(x, rho=rho, delta=delta, dps=dps)
    if dps is not None:
        with mpmath.workdps(dps + _GUARD):
            rho_, delta_ = mpmath.mpf(rho), mpmath.mpf(delta)
            one = 1 - g / mpmath.sqrt(rho_)
            val = (rho_ / one).real + rho_ * mpmath.log(abs(one)) - mpmath.log(abs(g))
            val += delta_ * (g * g).real / 2 - rho_
        with mpmath.workdps(dps):
            return +val
    rho_f, delta_f = float(rho), float(delta)
    one = 1.0 - g / math.sqrt(rho_f)
    val = (rho_f / one).real + rho_f * np.log(np.abs(one)) - np.log(np.abs(g))
    return val + 0.5 * delta_f * (g * g).real - rho_f


def log_energy(delta: Any, *, rho: Any, dps: int | None = None) -> Any:
    """Sigma(mu_Delta) = double integral of log|x - y|, computed as int L(x) mu_Delta(x) dx."""
    return _scalar_or_loop(delta, rho, dps, "sigma")


def mmse(delta: Any, *, rho: Any, dps: int | None = None) -> Any:
    """MMSE of denoising S from S + sqrt(Delta) Z, per the stable form of THEORY 1.1.

    mmse = Delta/(1+Delta) - 4 Delta^2 int (Re g - (x - sqrt(rho))/(2(1+Delta)))^2 mu_Delta dx.
    Float (or array for array ``delta``) in double precision; mpf when ``dps`` is given.
    """
    return _scalar_or_loop(delta, rho, dps, "mmse")


def mmse_literal(delta: Any, *, rho: Any, dps: int | None = None) -> Any:
    """The literal form Delta - (4 pi^2/3) Delta^2 int mu_Delta^3 dx (cross-check; loses digits
    at large Delta) (THEORY 1.1)."""
    return _scalar_or_loop(delta, rho, dps, "mmse_literal")


def mutual_information(delta: Any, *, rho: Any, dps: int | None = None) -> Any:
    """I(Delta) = Sigma(mu_Delta)/2 - log(Delta)/4 + 1/8 per D^2 (THEORY 1.1).

    Evaluated without cancellation: with u = g/sqrt(rho) and the on-support identity
    Delta |g|^2 = 1 - |g|^2/|1 - u|^2,
    2 I = int [rho (Re u/(1-u) + log|1-u|) - log(Delta |g|^2)/2] mu dx + mmse/(4 Delta).
    """
    return _scalar_or_loop(delta, rho, dps, "mi")


def _estimate(delta: Any, rho: Any, dps: int | None, key: str, what: str) -> Estimate:
    fine = _integrals(rho, delta, dps)
    coarse = _integrals(rho, delta, dps, coarse=True)
    if dps is None:
        orders, prec = (_ORDER_F_LO, _ORDER_F), 16
        # the refinement difference, at least the resolution of a double (it can vanish); the
        # mutual information loses digits as Delta grows (measured against the mpmath route at
        # rho = 0.5, 3: up to about 0.1 eps sqrt(Delta) relative at Delta = 1e3 .. 1e12, where
        # the refinement difference fell short of the error by up to 5x)
        if float(delta) > DELTA_SERIES:
            err = 4 * EPS * abs(float(fine[key])) + _large_delta_error(rho, delta, key)
        else:
            floor = (16 + math.sqrt(float(delta)) if key == "mi" else 4) * EPS
            err = max(float(abs(fine[key] - coarse[key])), floor * abs(float(fine[key])))
    else:
        orders, prec = (_mp_digits(int(dps), True), _mp_digits(int(dps))), int(dps)
        with mpmath.workdps(int(dps) + _GUARD):
            err = float(abs(fine[key] - coarse[key]))
    return Estimate(
        value=fine[key],
        error=err,
        method=(
            f"{what}: the large-Delta series (Delta > {DELTA_SERIES:g}; THEORY 1.1, I-MMSE), "
            "error its remainder bound and a few ulps"
            if dps is None and float(delta) > DELTA_SERIES else
            f"{what}: theta-substituted composite Gauss-Legendre, "
            f"{'orders' if dps is None else 'panel orders for digits'} {orders[0]:g}/{orders[1]:g}"
        ),
        precision=prec,
        extra={"rho": rho, "delta": delta, "nodes": fine["nodes"]},
    )


def mmse_estimate(delta: Any, *, rho: Any, dps: int | None = None) -> Estimate:
    """:func:`mmse` with error = |difference between two quadrature orders| (THEORY 1.1)."""
    return _estimate(delta, rho, dps, "mmse", "mmse")


def mutual_information_estimate(delta: Any, *, rho: Any, dps: int | None = None) -> Estimate:
    """:func:`mutual_information` with error = |difference between two quadrature orders|."""
    return _estimate(delta, rho, dps, "mi", "mutual information")


def delta_of_mmse(v: float, *, rho: float) -> float:
    """The noise Delta of the Wishart denoising problem whose mmse is v in (0, 1) (THEORY 1.1:
    mmse(Delta) increases from 0 to 1)."""
    from scipy.optimize import brentq

    require(0 < v < 1, "mmse", "in (0, 1)", v)

    def f(t):
        return float(mmse(math.exp(t), rho=rho)) - v

    return math.exp(brentq(f, -30.0, 30.0, xtol=1e-15, rtol=1e-15))
