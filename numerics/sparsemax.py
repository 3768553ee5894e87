"""Sparsemax attention at T = 2: output-side expectations, the small-width weak-recovery threshold
and the state evolution (THEORY 1.1, 1.2, 1.4).

Receives the compiled pieces of :func:`aim_sym.sparsemax.compile_sparsemax` (duck-typed: each
piece has ``rows``, ``interior`` and callables ``z, log_z, g, dg`` of (x_0, x_1, omega_00,
omega_01, omega_11, V, beta)); never imports sympy. Z_out is a density in the y-measure; the
interior rows are integrated over their observed d_a in (-1/beta, 1/beta) with dy = beta/2 dd.

* :func:`output_moments`: at one omega, sum over pieces (and the interior integrals) of Z, Z g^T W g,
  Z g g^T and Z dg/domega by composite Gauss-Legendre rules on the window |d - m| <= L sd;
* :func:`weak_threshold`: alpha_bar_c = 1 / (2 S), S = E_{q=0}[sum (1 + delta_ab) g_ab^2] at V = 1,
  in double precision (two rules) or in mpmath (two working precisions, tanh-sinh);
* :func:`monte_carlo_s`: the same S by seeded Monte Carlo over h (an independent route);
* :func:`se_curve_traced`: the SE at finite rho, q_hat = 2 alpha E(q, V) with the Wishart
  prior's mmse (:mod:`aim_sym.numerics.wishart`), traced by V = mmse: alpha(V) in closed form.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence

import mpmath
import numpy as np
from scipy.special import erfc, ndtr

from . import wishart
from .gauss import TAIL_MASS, gaussian_grid
from .records import ConvergenceError, Estimate, mean_estimate, require
from .wishart import delta_of_mmse

#: cut of the interior window, in standard deviations of d_a, for the double-precision rules
TAIL_SD = 10.0
#: panel width of the mpmath route, in sd of d_a
PANEL_SD = 3
#: weights (1 + delta_ab) of (g_00, g_01, g_11)
WEIGHTS = np.array([2.0, 1.0, 2.0])
#: the channel's largest inverse temperature accepted (beyond it hardmax is within 1e-13)
BETA_MAX = 1e8


def _check(beta: float, V: float) -> None:
    require(np.isfinite(beta) and 0 < beta <= BETA_MAX, "beta", f"finite, in (0, {BETA_MAX:g}]",
            beta)
    require(np.isfinite(V) and V > 0, "V", "finite > 0", V)


def _gl(n: int) -> tuple[np.ndarray, np.ndarray]:
    return np.polynomial.legendre.leggauss(n)


def _panels(lo: float, hi: float, width: float, nodes: int) -> tuple[np.ndarray, np.ndarray]:
    """Composite Gauss-Legendre nodes and weights on [lo, hi], panels no wider than ``width``."""
    if hi <= lo:
        return np.zeros(0), np.zeros(0)
    k = max(1, math.ceil((hi - lo) / width))
    gx, gw = _gl(nodes)
    edges = np.linspace(lo, hi, k + 1)
    half = np.diff(edges) / 2
    mid = (edges[1:] + edges[:-1]) / 2
    return (mid[:, None] + half[:, None] * gx).ravel(), (half[:, None] * gw).ravel()


def _window(m: float, sd: float, b: float, L: float) -> tuple[float, float]:
    return max(-b, m - L * sd), min(b, m + L * sd)


def _eval_piece(p, x0, x1, omega, V, beta, n):
    """Z, g (3 x n), dg (3 x 3 x n) of one piece at n points, with Z = 0 where it underflows."""
    args = (x0, x1, *omega, V, beta)
    with np.errstate(all="ignore"):
        z = np.broadcast_to(np.asarray(p.z(*args), dtype=float), (n,))
        g = np.stack([np.broadcast_to(np.asarray(v, dtype=float), (n,)) for v in p.g(*args)])
        dg = np.stack([np.stack([np.broadcast_to(np.asarray(v, dtype=float), (n,)) for v in row])
                       for row in p.dg(*args)])
    ok = (z > 0) & np.all(np.isfinite(g), axis=0) & np.all(np.isfinite(dg), axis=(0, 1))
    return np.where(ok, z, 0.0), np.where(ok, g, 0.0), np.where(ok, dg, 0.0)


def output_moments(cs, *, omega: Sequence[float], V: float, beta: float, nodes: int = 16,
                   tail_sd: float = TAIL_SD) -> dict:
    """At one omega = (omega_00, omega_01, omega_11): the mass sum_y Z (= 1), S = sum_y Z g^T W g,
    sum_y Z g g^T and sum_y Z dg (3 x 3), each a sum over the nine pieces, the interior rows
    integrated by composite Gauss-Legendre rules (``nodes`` per panel of width sd/2) on
    |d_a - m_a| <= tail_sd sd, sd = sqrt(3 V) (THEORY 1.1, 1.4)."""
    _check(beta, V)
    omega = tuple(float(w) for w in omega)
    m = (omega[0] - omega[1], omega[2] - omega[1])
    sd, b = math.sqrt(3 * V), 1.0 / beta
    jac = beta / 2
    out = {"mass": 0.0, "S": 0.0, "ggT": np.zeros((3, 3)), "dg": np.zeros((3, 3)), "pieces": {}}
    for p in cs.pieces:
        if not p.interior:
            x0 = x1 = np.zeros(1)
            w = np.ones(1)
        elif len(p.interior) == 1:
            a = p.interior[0]
            xs, w = _panels(*_window(m[a], sd, b, tail_sd), sd / 2, nodes)
            w = w * jac
            x0, x1 = (xs, np.zeros_like(xs)) if a == 0 else (np.zeros_like(xs), xs)
        else:
            u0, v0 = _panels(*_window(m[0], sd, b, tail_sd), sd / 2, nodes)
            u1, v1 = _panels(*_window(m[1], sd, b, tail_sd), sd / 2, nodes)
            x0, x1 = (g.ravel() for g in np.meshgrid(u0, u1, indexing="ij"))
            w = np.outer(v0, v1).ravel() * jac * jac
        n = w.size
        if n == 0:
            continue
        z, g, dg = _eval_piece(p, x0, x1, omega, V, beta, n)
        zw = z * w
        s = float(zw @ np.einsum("kn,k->n", g * g, WEIGHTS))
        out["mass"] += float(zw.sum())
        out["S"] += s
        out["ggT"] += np.einsum("n,in,jn->ij", zw, g, g)
        out["dg"] += np.einsum("n,ijn->ij", zw, dg)
        out["pieces"]["-".join(p.rows)] = {"mass": float(zw.sum()), "S": s}
    return out


def _tail_bound(tail_sd: float) -> float:
    """Gaussian mass outside |d - m| <= tail_sd sd, per row (times 2 rows), times a bound on the
    integrand's scale (the scores are O(tail_sd / sd))."""
    return 2 * float(erfc(tail_sd / math.sqrt(2))) * (tail_sd**2 + 4)


# ----------------------------------------------------------------------------- small width
def small_width_s(cs, *, beta: float, nodes: int = 16) -> Estimate:
    """S = E_{q=0}[sum (1 + delta_ab) g_ab^2] at V = 1, omega = 0 (THEORY 1.2), double precision
    by :func:`s_of_m` (the mid-mid piece reduced to one dimension: a 2D product rule loses ~1e-14
    to rounding over its 10^6 nodes): error = |rule(nodes) - rule(nodes + 8)| + |mass - 1| S +
    the window's tail bound + 16 eps S (rounding)."""
    _check(beta, 1.0)
    a, _ = s_of_m(cs, m0=0.0, m1=0.0, V=1.0, beta=beta, nodes=nodes)
    c, mass = s_of_m(cs, m0=0.0, m1=0.0, V=1.0, beta=beta, nodes=nodes + 8)
    S, mass = float(c[0]), float(mass[0])
    err = (abs(S - float(a[0])) + abs(mass - 1.0) * S + _tail_bound(TAIL_SD)
           + 16 * np.finfo(float).eps * S)
    return Estimate(S, err, f"composite Gauss-Legendre, {nodes} and {nodes + 8} nodes per "
                    "panel", extra={"mass": mass})


def _interior_s_mp(beta, V, lo_hi_panels) -> mpmath.mpf:
    """The mid-mid piece of S at omega = 0 in mpmath: there g^T W g = z^T C0^-1 z / V^2
    (g = A^T (V C0)^-1 z and A W A^T = C0), so with z_1 = z_0/3 + sqrt(8V/3) u,
    S_mm = (1/V) int dz0 phi_{3V}(z0) [z0^2/(3V) P(u in I) + E(u^2; u in I)],
    I = ((-b - z0/3) / sdc, (b - z0/3) / sdc), E(u^2; [l, h]) = Phi(h) - Phi(l) + l phi(l) - h phi(h)."""
    b = 1 / beta
    sd, sdc = mpmath.sqrt(3 * V), mpmath.sqrt(mpmath.mpf(8) / 3 * V)

    def f(z0):
        lo, hi = (-b - z0 / 3) / sdc, (b - z0 / 3) / sdc
        P = mpmath.ncdf(hi) - mpmath.ncdf(lo)
        u2 = P + lo * mpmath.npdf(lo) - hi * mpmath.npdf(hi)
        return mpmath.npdf(z0 / sd) / sd * (z0 * z0 / (3 * V) * P + u2)

    return mpmath.quad(f, lo_hi_panels) / V


def _mp_s(cs_mp, beta, dps: int) -> tuple[mpmath.mpf, mpmath.mpf, dict]:
    """S at q = 0 and sum_y Z (their mpmath values) at ``dps`` digits: the 4 saturated pieces at a
    point, the 4 one-interior pieces by tanh-sinh over panels of the window |d| < L sqrt 3,
    L^2 = 2 ln(10) (dps + 8), and the mid-mid piece by :func:`_interior_s_mp`."""
    with mpmath.workdps(dps):
        beta = mpmath.mpf(beta)
        V, b, jac = mpmath.mpf(1), 1 / mpmath.mpf(beta), mpmath.mpf(beta) / 2
        L = mpmath.sqrt(2 * mpmath.log(10) * (dps + 8))
        sd = mpmath.sqrt(3)
        lo, hi = max(-b, -L * sd), min(b, L * sd)
        k = int(mpmath.ceil((hi - lo) / (PANEL_SD * sd)))
        edges = [lo + (hi - lo) * i / k for i in range(k + 1)]
        W = (2, 1, 2)
        S, mass, parts = mpmath.mpf(0), mpmath.mpf(0), {}
        for p in cs_mp.pieces:
            name = "-".join(p.rows)
            if not p.interior:
                z = p.z(0, 0, 0, 0, 0, V, beta)
                g = p.g(0, 0, 0, 0, 0, V, beta)
                s = z * sum(w * gi * gi for w, gi in zip(W, g))
                mz = z
            elif len(p.interior) == 1:
                a = p.interior[0]

                def at(x, a=a):
                    return (x, 0) if a == 0 else (0, x)

                def fs(x, p=p, at=at):
                    args = (*at(x), 0, 0, 0, V, beta)
                    z = p.z(*args)
                    if z == 0:
                        return mpmath.mpf(0)
                    return z * sum(w * gi * gi for w, gi in zip(W, p.g(*args)))

                s = jac * mpmath.quad(fs, edges)
                mz = jac * mpmath.quad(lambda x, p=p, at=at: p.z(*at(x), 0, 0, 0, V, beta), edges)
            else:
                s = _interior_s_mp(beta, V, edges)
                c = sd * mpmath.sqrt(mpmath.mpf(8) / 9)   # sd of d_1 given d_0
                mz = mpmath.quad(lambda x, c=c: mpmath.npdf(x / sd) / sd
                                 * (mpmath.ncdf((b - x / 3) / c) - mpmath.ncdf((-b - x / 3) / c)),
                                 edges)
            S += s
            mass += mz
            parts[name] = s
        return S, mass, parts


def weak_threshold_mp(cs_mp, *, beta, dps: int = 20) -> Estimate:
    """alpha_bar_c(beta) = 1 / (2 S) to ``dps`` digits (THEORY 1.2, 1.4) from mpmath at dps + 5
    and dps + 15 working digits: error = their difference plus |sum_y Z - 1| at the finer one
    (the window's cut is below 10^-(dps + 8) and moves with the precision)."""
    require(isinstance(dps, int) and 5 <= dps <= 60, "dps", "an integer in 5..60", dps)
    try:
        beta_f = float(beta)
    except (TypeError, ValueError):
        beta_f = float("nan")
    require(np.isfinite(beta_f) and 0 < beta_f <= BETA_MAX, "beta",
            f"finite, in (0, {BETA_MAX:g}]", beta)
    t0 = time.perf_counter()
    (s1, _, _), (s2, m2, parts) = _mp_s(cs_mp, beta, dps + 5), _mp_s(cs_mp, beta, dps + 15)
    with mpmath.workdps(dps + 15):
        a1, a2 = 1 / (2 * s1), 1 / (2 * s2)
        err = abs(a2 - a1) + abs(m2 - 1) * a2
        err = max(err, mpmath.mpf(10) ** (-(dps + 3)))
        return Estimate(mpmath.nstr(a2, dps), float(err),
                        "mpmath tanh-sinh at two working precisions", precision=dps,
                        extra={"S": mpmath.nstr(s2, dps), "mass": mpmath.nstr(m2, dps),
                               "seconds": time.perf_counter() - t0,
                               "pieces": {k: float(v) for k, v in parts.items()}})


def weak_threshold(cs, *, beta: float, nodes: int = 16) -> Estimate:
    """alpha_bar_c(beta) = 1 / (2 S) in double precision (:func:`small_width_s`)."""
    t0 = time.perf_counter()
    s = small_width_s(cs, beta=beta, nodes=nodes)
    a = 1.0 / (2 * s.value)
    return Estimate(a, a * s.error / s.value, s.method,
                    extra={"S": s.value, "S_error": s.error, "seconds": time.perf_counter() - t0})


def sample_outputs(*, beta: float, n: int, seed: int, q: float = 0.0, V: float = 1.0):
    """n draws of omega_ab = sqrt((1 + delta_ab) q) eta_ab and h = omega + sqrt((1 + delta_ab) V)
    xi (THEORY 1.1): omega (3 x n), the pieces' row labels (2 x n: 0 low, 1 mid, 2 high) and
    d = (d_0, d_1) (the outputs are y_aa = clip((1 + beta d_a) / 2, 0, 1))."""
    rng = np.random.default_rng(seed)
    scale = np.sqrt(np.array([2.0, 1.0, 2.0]))[:, None]
    omega = math.sqrt(q) * scale * rng.standard_normal((3, n))
    h = omega + math.sqrt(V) * scale * rng.standard_normal((3, n))
    d = np.stack([h[0] - h[1], h[2] - h[1]])
    lab = np.where(beta * d <= -1, 0, np.where(beta * d >= 1, 2, 1))
    return omega, lab, d


def monte_carlo_e(cs, *, beta: float, q: float = 0.0, V: float = 1.0, n: int = 1_000_000,
                  seed: int = 2026, batches: int = 8) -> Estimate:
    """E(q, V) = E[sum (1 + delta_ab) g_ab^2] by seeded Monte Carlo over omega and h (THEORY
    1.1): y = the sparsemax rows of h, g_out from the compiled pieces at (y, omega); error = the
    standard error over all draws. An independent route to :func:`small_width_s` (q = 0, V = 1)
    and :func:`output_e`: no quadrature, no piece probabilities, no window."""
    _check(beta, V)
    require(np.isfinite(q) and q >= 0, "q", "finite >= 0", q)
    require(n >= 1000, "n", ">= 1000", n)
    names = ("low", "mid", "high")
    vals = []
    for k in range(batches):
        omega, lab, d = sample_outputs(beta=beta, n=n // batches, seed=seed + k, q=q, V=V)
        v = np.zeros(lab.shape[1])
        for p in cs.pieces:
            sel = (lab[0] == names.index(p.rows[0])) & (lab[1] == names.index(p.rows[1]))
            if not np.any(sel):
                continue
            cnt = int(sel.sum())
            x0 = d[0, sel] if 0 in p.interior else np.zeros(cnt)
            x1 = d[1, sel] if 1 in p.interior else np.zeros(cnt)
            _, g, _ = _eval_piece(p, x0, x1, tuple(omega[:, sel]), V, beta, cnt)
            v[sel] = np.einsum("kn,k->n", g * g, WEIGHTS)
        vals.append(v)
    v = np.concatenate(vals)
    return mean_estimate(v, f"seeded Monte Carlo, {v.size} draws, seed {seed}")


def monte_carlo_s(cs, *, beta: float, n: int = 1_000_000, seed: int = 2026,
                  batches: int = 8) -> Estimate:
    """S at q = 0, V = 1 by :func:`monte_carlo_e`."""
    return monte_carlo_e(cs, beta=beta, n=n, seed=seed, batches=batches)


# ----------------------------------------------------------------------------- finite rho
def _reference_panels(panels: int, nodes: int) -> tuple[np.ndarray, np.ndarray]:
    """Composite Gauss-Legendre rule on [0, 1]: ``panels`` equal panels of ``nodes`` nodes."""
    gx, gw = _gl(nodes)
    mid = (np.arange(panels) + 0.5) / panels
    return (mid[:, None] + gx / (2 * panels)).ravel(), np.tile(gw / (2 * panels), panels)


def s_of_m(cs, *, m0, m1, V: float, beta: float, nodes: int = 16,
           tail_sd: float = TAIL_SD, with_psi: bool = False):
    """S(m) = sum_y Z g^T W g and sum_y Z at many means m = (m_0, m_1) of d at once (vectorised),
    and with ``with_psi`` also sum_y Z log Z (Psi_out's integrand, THEORY 1.1; Z in the y-measure):
    the saturated pieces at a point, the one-interior pieces on each node's window
    |d_a - m_a| <= tail_sd sd (2 tail_sd panels of width <= sd, ``nodes`` each), the mid-mid piece
    by the conditional reduction of :func:`_interior_s_mp` (g^T W g = z^T C0^-1 z / V^2)."""
    _check(beta, V)
    m0, m1 = np.atleast_1d(np.asarray(m0, dtype=float)), np.atleast_1d(np.asarray(m1, dtype=float))
    N = m0.size
    sd, sdc, b = math.sqrt(3 * V), math.sqrt(8 * V / 3), 1.0 / beta
    t, wt = _reference_panels(int(math.ceil(2 * tail_sd)), nodes)
    ms = (m0, m1)
    win = []
    for a in (0, 1):
        lo = np.maximum(-b, ms[a] - tail_sd * sd)
        hi = np.minimum(b, ms[a] + tail_sd * sd)
        width = np.maximum(hi - lo, 0.0)
        win.append((lo[:, None] + width[:, None] * t, width[:, None] * wt))
    S, mass, psi = np.zeros(N), np.zeros(N), np.zeros(N)
    zero = np.zeros(N)
    for p in cs.pieces:
        if len(p.interior) == 2:
            continue
        if not p.interior:
            z, g, _ = _eval_piece(p, zero, zero, (m0, zero, m1), V, beta, N)
            S += z * np.einsum("kn,k->n", g * g, WEIGHTS)
            mass += z
            if with_psi:
                psi += _z_log_z(p, z, (zero, zero, m0, zero, m1, V, beta))
            continue
        a = p.interior[0]
        x, w = win[a]
        M = x.size
        other = np.zeros(M)
        x0, x1 = (x.ravel(), other) if a == 0 else (other, x.ravel())
        om = (np.repeat(m0, x.shape[1]), np.zeros(M), np.repeat(m1, x.shape[1]))
        z, g, _ = _eval_piece(p, x0, x1, om, V, beta, M)
        zw = (z * (w.ravel() * beta / 2)).reshape(x.shape)
        S += (zw * np.einsum("kn,k->n", g * g, WEIGHTS).reshape(x.shape)).sum(axis=1)
        mass += zw.sum(axis=1)
        if with_psi:
            zl = _z_log_z(p, z, (x0, x1, *om, V, beta)) / np.where(z > 0, z, 1.0)
            psi += (zw * zl.reshape(x.shape)).sum(axis=1)
    # mid-mid: d_0 on its window, d_1 given d_0 in closed form
    x, w = win[0]
    z0 = x - m0[:, None]
    c = m1[:, None] + z0 / 3
    lo, hi = (-b - c) / sdc, (b - c) / sdc
    with np.errstate(all="ignore"):
        P = ndtr(hi) - ndtr(lo)
        P = np.where(P > 0, P, ndtr(-lo) - ndtr(-hi))
        u2 = P + np.where(np.isfinite(lo), lo * _npdf(lo), 0) - np.where(np.isfinite(hi),
                                                                       hi * _npdf(hi), 0)
    dens = _npdf(z0 / sd) / sd * w
    S += (dens * (z0 * z0 / (3 * V) * P + u2)).sum(axis=1) / V
    mass += (dens * P).sum(axis=1)
    if not with_psi:
        return S, mass
    # log Z = 2 log(2/beta) - log(2 pi sqrt(8) V) - z0^2 / (6 V) - u^2 / 2 on the mid-mid piece
    # (u: d_1's standardised deviation given d_0; the closed form of aim_sym.sparsemax's piece)
    const = 2 * math.log(2 / beta) - math.log(2 * math.pi * math.sqrt(8) * V)
    psi += (dens * ((const - z0 * z0 / (6 * V)) * P - u2 / 2)).sum(axis=1)
    return S, mass, psi


def _z_log_z(p, z: np.ndarray, args: tuple) -> np.ndarray:
    """Z log Z of one piece from its compiled log Z (0 where Z underflows)."""
    with np.errstate(all="ignore"):
        lz = np.broadcast_to(np.asarray(p.log_z(*args), dtype=float), z.shape)
        return np.where((z > 0) & np.isfinite(lz), z * lz, 0.0)


def _npdf(x):
    return np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)


def output_e(cs, *, q: float, V: float, beta: float, level: int = 0,
             nodes: int = 12) -> tuple[float, float, float, float]:
    """E(q, V) = E_omega sum_y Z g^T W g (THEORY 1.1), the largest |sum_y Z - 1| met, the
    bound on the Gaussian mass cut off and Psi_out(q, V) = E_omega sum_y Z log Z (Z in the
    y-measure). The output side depends on omega only through
    m = (omega_00 - omega_01, omega_11 - omega_01) ~ N(0, q C0): the sinh-mapped trapezoid rule
    of :func:`aim_sym.numerics.gauss.gaussian_grid` at ``level``, scale sqrt(3 V) (the width of
    the integrand's features, at m_a = +-1/beta)."""
    require(np.isfinite(q) and q >= 0, "q", "finite >= 0", q)
    if q == 0:
        S, mass, psi = s_of_m(cs, m0=0.0, m1=0.0, V=V, beta=beta, nodes=nodes, with_psi=True)
        return float(S[0]), float(abs(mass[0] - 1)), 0.0, float(psi[0])
    m, w, pruned = gaussian_grid(q * np.array([[3.0, 1.0], [1.0, 3.0]]),
                                 np.full(2, math.sqrt(3 * V)), level)
    S, mass, psi = s_of_m(cs, m0=m[:, 0], m1=m[:, 1], V=V, beta=beta, nodes=nodes, with_psi=True)
    return (float(w @ S), float(np.max(np.abs(mass - 1))), (TAIL_MASS + pruned) * float(S.max()),
            float(w @ psi))


def output_e_estimate(cs, *, q: float, V: float, beta: float, level: int = 0) -> Estimate:
    """E(q, V) at ``level``; error = |E(level) - E(level - 1)| + |mass - 1| E + the cut;
    ``extra``: Psi_out and its error (the same two levels)."""
    e0, _, _, p0 = output_e(cs, q=q, V=V, beta=beta, level=level - 1)
    e1, dm, tail, p1 = output_e(cs, q=q, V=V, beta=beta, level=level)
    return Estimate(e1, abs(e1 - e0) + dm * e1 + tail,
                    f"sinh-trapezoid over m (levels {level - 1}, {level}), Gauss-Legendre windows",
                    extra={"psi_out": p1, "psi_out_error": abs(p1 - p0) + dm * (1 + abs(p1))
                           + tail})


#: Gauss-Legendre nodes per panel of the e_gen rule (fine, coarse) and the cut in sd of m
EGEN_NODES, EGEN_CUT_SD = (12, 8), 9.0
#: most panels of the e_gen rule (V down to ~1e-7 at q ~ 1)
EGEN_MAX_PANELS = 200_000


def _egen_rule(q: float, V: float, beta: float) -> tuple[np.ndarray, float]:
    """Panel edges for m ~ N(0, 3 q): breakpoints at m = +-1/beta (the kinks of y(m)), panels
    no wider than half the narrowest feature (sqrt(3 V): the smoothing by d | m; 2/beta: the
    window), and the Gaussian mass beyond the cut."""
    sd = math.sqrt(3.0 * q)
    width = 0.5 * min(math.sqrt(3.0 * V), 2.0 / beta, sd)
    lo, hi = -EGEN_CUT_SD * sd, EGEN_CUT_SD * sd
    cuts = sorted({lo, hi, *(c for c in (-1.0 / beta, 1.0 / beta) if lo < c < hi)})
    edges = [np.linspace(a, b, max(1, math.ceil((b - a) / width)) + 1) for a, b in
             zip(cuts[:-1], cuts[1:])]
    edges = np.unique(np.concatenate(edges))
    require(len(edges) <= EGEN_MAX_PANELS, "V", f"large enough that e_gen needs at most "
            f"{EGEN_MAX_PANELS} panels (sqrt(V) >~ 2e-5 sqrt(q))", V)
    return edges, float(erfc(EGEN_CUT_SD / math.sqrt(2.0)))


def _egen_at(cs, q: float, V: float, beta: float, nodes: int) -> tuple[float, float]:
    """(e_gen, plug-in) by composite Gauss-Legendre over one row's m ~ N(0, 3 q)."""
    if q == 0:
        m, w = np.zeros(1), np.ones(1)
    else:
        edges, _ = _egen_rule(q, V, beta)
        gx, gw = _gl(nodes)
        half = np.diff(edges) / 2
        mid = (edges[1:] + edges[:-1]) / 2
        m = (mid[:, None] + half[:, None] * gx[None, :]).ravel()
        w = (half[:, None] * gw[None, :]).ravel() * np.exp(-m * m / (6.0 * q)) / math.sqrt(
            6.0 * math.pi * q)
    y_mean, e1, e2 = (np.asarray(x, dtype=float) * np.ones_like(m)
                      for x in cs.row_moments(m, V, beta))
    var = np.maximum(e2 - e1 * e1, 0.0)
    plug = np.maximum(e2 - 2 * y_mean * e1 + y_mean * y_mean, 0.0)
    # y is 2 x 2 with y_ab = 1 - y_aa: each row contributes twice its diagonal entry's error
    return 4.0 * float(w @ var), 4.0 * float(w @ plug)


def generalisation_error(cs, *, q: float, V: float, beta: float) -> Estimate:
    """Bayes-optimal e_gen = E_omega E_{h|omega} ||y(h) - E[y | omega]||_F^2 at the SE's (q, V)
    (THEORY 1.5), with the plug-in error E ||y(h) - y(omega)||_F^2 in ``extra["plugin"]``.

    Rows are independent given omega and y_ab = 1 - y_aa, so e_gen = 4 E_m Var[y_aa | m] with
    m = omega_aa - omega_ab ~ N(0, 3 q) and d_a | m ~ N(m, 3 V); the row moments are the
    compiled closed forms of :func:`aim_sym.sparsemax.row_output_moments`. The m-integral is
    composite Gauss-Legendre with breakpoints at m = +-1/beta and panels no wider than half the
    narrowest feature (:func:`_egen_rule`: a rule that cannot step over the features, unlike a
    Gauss-Hermite rule in m at large beta); error = the difference of 12 and 8 nodes per panel
    + the Gaussian mass beyond 9 sd (times the bound 4 on both integrands) + 1e-15 (rounding of
    the closed forms, |y| <= 1)."""
    require(np.isfinite(q) and q >= 0, "q", "finite >= 0", q)
    _check(beta, V)
    fine, fine_plug = _egen_at(cs, q, V, beta, EGEN_NODES[0])
    coarse, coarse_plug = _egen_at(cs, q, V, beta, EGEN_NODES[1])
    cut = 4.0 * _egen_rule(q, V, beta)[1] if q > 0 else 0.0
    return Estimate(fine, abs(fine - coarse) + cut + 1e-15,
                    f"closed-form row moments, composite Gauss-Legendre over m ({EGEN_NODES[0]} "
                    f"and {EGEN_NODES[1]} nodes per panel, breakpoints at +-1/beta)",
                    extra={"plugin": fine_plug,
                           "plugin_error": abs(fine_plug - coarse_plug) + cut + 1e-15})


def traced_rows(e_of, *, rho: float, mmses: Sequence[float]) -> list[dict]:
    """The SE traced by the error V = mmse for any output side (THEORY 1.1): every V in ``mmses``
    is a fixed point at alpha(V) = q_hat / (2 E(Q0 - V, V)), q_hat = 1 / Delta(V),
    mmse(Delta(V)) = V (the Wishart prior, inverted). ``e_of(q, V)`` returns E as an
    :class:`Estimate`; where its ``extra`` has ``psi_out`` the row also carries phi =
    -q q_hat/4 + q_hat Q0/4 - I(Delta) + alpha Psi_out. The error of alpha is its relative error
    from E plus the prior's inversion."""
    require(np.isfinite(rho) and rho > 0, "rho", "finite > 0", rho)
    rows = []
    Q0 = 1.0 + rho
    for v in mmses:
        v = float(v)
        t0 = time.perf_counter()
        delta = delta_of_mmse(v, rho=rho)
        e = e_of(Q0 - v, v)
        alpha = 1.0 / (2 * delta * e.value)
        prior = wishart.mmse_estimate(delta, rho=rho).error
        dmdd = (float(wishart.mmse(delta * 1.001, rho=rho))
                - float(wishart.mmse(delta * 0.999, rho=rho))) / (0.002 * delta)
        err = alpha * (e.error / e.value + prior / max(dmdd * delta, 1e-300))
        row = {"alpha": alpha, "alpha_error": err, "mmse": v, "q": Q0 - v,
               "q_hat": 1.0 / delta, "E": e.value, "E_error": e.error}
        if "psi_out" in e.extra:
            psi = e.extra["psi_out"]
            row.update({"psi_out": psi, "psi_out_error": e.extra["psi_out_error"],
                        "phi": (-(Q0 - v) / (4 * delta) + Q0 / (4 * delta)
                                - float(wishart.mutual_information(delta, rho=rho))
                                + alpha * psi)})
        rows.append({**row, "seconds": time.perf_counter() - t0})
    return rows


def se_curve_traced(cs, *, rho: float, beta: float, mmses: Sequence[float],
                    level: int = 0) -> list[dict]:
    """The T = 2 SE traced by V = mmse (:func:`traced_rows` on :func:`output_e_estimate`); where
    alpha(V) is not monotone several fixed points share an alpha (:func:`se_fixed_points`
    flags the Bayes-optimal one by phi)."""
    return traced_rows(lambda q, V: output_e_estimate(cs, q=q, V=V, beta=beta, level=level),
                       rho=rho, mmses=mmses)


def alpha_of_mmse(cs, *, rho: float, beta: float, V: float, level: int = 0) -> Estimate:
    """alpha(V) = 1 / (2 Delta(V) E(Q0 - V, V)): the sample ratio at which V is an SE fixed point
    (one row of :func:`se_curve_traced`)."""
    r = se_curve_traced(cs, rho=rho, beta=beta, mmses=[V], level=level)[0]
    return Estimate(r["alpha"], r["alpha_error"], "traced SE", extra=r)


def perfect_recovery_alpha(*, rho: float, beta: float) -> float:
    """alpha_PR of noiseless sparsemax at T = 2 by parameter counting (THEORY 1.2's argument):
    as V -> 0 each interior row (|beta (h_aa - h_ab)| < 1, h_aa - h_ab ~ N(0, 3 Q0)) reveals one
    linear form, E(q, V) V -> r = 2 erf(1 / (beta sqrt(6 Q0))) (saturated rows add O(sqrt V)),
    and mmse(Delta)/Delta -> 2 rho - rho^2 (rho <= 1) or 1 (rho >= 1), so alpha_PR is that over 2 r."""
    from scipy.special import erf

    Q0 = 1.0 + rho
    r = 2.0 * float(erf(1.0 / (beta * math.sqrt(6.0 * Q0))))
    return (2.0 * rho - rho * rho if rho <= 1.0 else 1.0) / (2.0 * r)


def se_fixed_points(cs, *, alpha: float, rho: float, beta: float,
                    grid: Sequence[float] = (0.01, 0.02, 0.05, 0.1, 0.2, 0.35, 0.5, 0.65, 0.8,
                                             0.9, 0.97, 0.995),
                    xtol: float = 1e-9) -> list[dict]:
    """All SE fixed points V = mmse at sample ratio ``alpha`` (THEORY 1.1): sign changes of
    alpha(V) - alpha on ``grid`` (trapezoid level -1), each root solved by Brent's method at
    level 0; error = xtol plus alpha's own bar over |d alpha / dV|. Rows: mmse, error, q, q_hat,
    stable (alpha(V) decreasing: the SE map's slope is below 1 there), method.

    Below the grid (V < grid[0]) the rules lose accuracy (features of width sqrt V); there
    alpha(V) -> alpha_PR (:func:`perfect_recovery_alpha`) as V -> 0, so for alpha >= alpha_PR the
    fixed point is V = 0 (perfect recovery), and for alpha(grid[0]) < alpha < alpha_PR one fixed
    point lies in (0, grid[0]): reported as the bracket's midpoint with its half-width as error."""
    from scipy.optimize import brentq

    require(np.isfinite(alpha) and alpha > 0, "alpha", "finite > 0", alpha)
    require(np.isfinite(rho) and rho > 0, "rho", "finite > 0", rho)
    _check(beta, 1.0)
    vals = [alpha_of_mmse(cs, rho=rho, beta=beta, V=v, level=-1).value - alpha for v in grid]
    out = []
    a_pr = perfect_recovery_alpha(rho=rho, beta=beta)
    v_min = float(grid[0])
    if alpha >= a_pr:
        out.append({"mmse": 0.0, "error": 0.0, "q": 1.0 + rho, "q_hat": None,
                    "stable": True, "method": f"perfect recovery: alpha >= alpha_PR = {a_pr:.12g} "
                    "(parameter counting)"})
    elif alpha_of_mmse(cs, rho=rho, beta=beta, V=v_min).value < alpha:
        out.append({"mmse": v_min / 2, "error": v_min / 2, "q": 1.0 + rho - v_min / 2,
                    "q_hat": None, "stable": True,
                    "method": f"bracket (0, {v_min:g}): alpha({v_min:g}) < alpha < alpha_PR = "
                    f"{a_pr:.12g}; below V = {v_min:g} the rules are not resolved"})
    for (v0, f0), (v1, f1) in zip(zip(grid, vals), zip(grid[1:], vals[1:])):
        if f0 * f1 > 0:
            continue
        v = brentq(lambda x: alpha_of_mmse(cs, rho=rho, beta=beta, V=x).value - alpha,
                   v0, v1, xtol=xtol, rtol=1e-13)
        e = alpha_of_mmse(cs, rho=rho, beta=beta, V=v)
        dv = 1e-4 * v
        slope = (alpha_of_mmse(cs, rho=rho, beta=beta, V=v + dv).value
                 - alpha_of_mmse(cs, rho=rho, beta=beta, V=v - dv).value) / (2 * dv)
        Q0, q_hat = 1.0 + rho, e.extra["q_hat"]
        phi = (-(Q0 - v) * q_hat / 4 + Q0 * q_hat / 4
               - float(wishart.mutual_information(1 / q_hat, rho=rho)) + alpha * e.extra["psi_out"])
        out.append({"mmse": v, "error": xtol + e.error / max(abs(slope), 1e-12),
                    "q": 1.0 + rho - v, "q_hat": q_hat, "stable": bool(slope < 0),
                    "d_alpha_d_mmse": slope, "phi": phi,
                    "method": "root of alpha(V) - alpha (Brent)"})
    if not out:
        raise ConvergenceError("no SE fixed point in the mmse grid", last_iterate=alpha,
                               residual=vals)
    return flag_bayes_optimal([{**f, **egen_at_fixed_point(cs, mmse=f["mmse"], error=f["error"],
                                                            rho=rho, beta=beta)} for f in out])


def flag_bayes_optimal(fps: list[dict]) -> list[dict]:
    """``bayes_optimal``: the stable fixed point of largest free entropy phi (THEORY 1.1).
    Perfect recovery (mmse = 0, listed only for alpha >= alpha_PR) wins: for a noiseless channel
    phi -> +infinity as V -> 0 exactly when alpha > alpha_PR (the output's log-density gains
    (alpha r / 2) log(1/V), the prior loses (2 rho - rho^2)/4 log(1/V)). A point bracketed
    below the traced grid has no phi: it is flagged only when it is the only stable one, and
    otherwise none is."""
    stable = [f for f in fps if f["stable"]]
    pr = [f for f in stable if f["mmse"] == 0.0 and f["error"] == 0.0]
    finite = [f for f in stable if f.get("phi") is not None]
    if pr:
        best = pr[0]
    elif len(stable) == 1:
        best = stable[0]
    elif len(finite) == len(stable) and finite:
        best = max(finite, key=lambda f: f["phi"])
    else:
        best = None
    return [{**f, "bayes_optimal": f is best} for f in fps]


def egen_at_fixed_point(cs, *, mmse: float, error: float, rho: float, beta: float) -> dict:
    """e_gen and the plug-in error (THEORY 1.5) at an SE fixed point V = mmse +- error, q = Q0 - V:
    the rule's bar (:func:`generalisation_error`) plus the change over V +- error (both ends
    evaluated, so the bar holds for a non-linear e_gen(V) too). At V = 0 (perfect recovery of a
    noiseless channel) both are 0."""
    Q0 = 1.0 + rho
    keys = ("e_gen", "e_gen_error", "e_gen_plugin", "e_gen_plugin_error")
    if mmse <= 0 and error <= 0:
        return dict.fromkeys(keys, 0.0)
    at = {}
    for v in (mmse, mmse - error, mmse + error):
        v = min(max(v, 0.0), Q0)
        at[v] = ((0.0, 0.0, 0.0, 0.0) if v == 0 else
                 (lambda e: (e.value, e.error, e.extra["plugin"], e.extra["plugin_error"]))(
                     generalisation_error(cs, q=Q0 - v, V=v, beta=beta)))
    mid = at[min(max(mmse, 0.0), Q0)]
    spread = [max(abs(a[i] - mid[i]) + a[i + 1] for a in at.values()) for i in (0, 2)]
    return {"e_gen": mid[0], "e_gen_error": mid[1] + spread[0],
            "e_gen_plugin": mid[2], "e_gen_plugin_error": mid[3] + spread[1]}


#: the omegas of the identity checks: every piece carries mass at each (tests/test_sparsemax.py)
CHECK_OMEGAS = ((0.3, -0.2, 0.5), (1.2, 0.4, -0.9), (0.1, 0.0, 0.2))


def run_checks(cs, cm, *, beta: float, V: float = 0.7) -> list[dict]:
    """The identity checks of the T = 2 channel (THEORY 1.2), each a dict (name, passed, detail):
    sum_y Z_out = 1 and Nishimori sum_y Z (g g^T + dg) = 0 at three omegas (double precision,
    the rules of :func:`output_moments`), and every piece's g_out and dg_out against mpmath
    finite differences of log Z_out and g_out at 40 digits (``cm``: the mpmath compilation)."""
    _check(beta, V)
    out = []
    for omega in CHECK_OMEGAS:
        o = output_moments(cs, omega=omega, V=V, beta=beta)
        mass = abs(o["mass"] - 1)
        nish = float(np.abs(o["ggT"] + o["dg"]).max())
        out.append({"name": f"sum_y Z_out = 1 at omega = {omega}", "passed": bool(mass < 1e-12),
                    "detail": f"|sum - 1| = {mass:.1e} (tolerance 1e-12)"})
        out.append({"name": f"Nishimori sum_y Z (g g^T + dg) = 0 at omega = {omega}",
                    "passed": bool(nish < 1e-11),
                    "detail": f"max entry {nish:.1e} (tolerance 1e-11; entries of sum Z g g^T "
                              f"up to {float(np.abs(o['ggT']).max()):.2f})"})
    worst_g = worst_dg = mpmath.mpf(0)
    with mpmath.workdps(40):
        omega = [mpmath.mpf(s) for s in ("0.3", "-0.2", "0.5")]
        rest = [mpmath.mpf(V), mpmath.mpf(beta)]
        for p in cm.pieces:
            x = [mpmath.mpf("0.13") if 0 in p.interior else 0,
                 mpmath.mpf("-0.21") if 1 in p.interior else 0]
            args = x + omega + rest
            g, dg = p.g(*args), p.dg(*args)
            for k in range(3):
                def moved(t, j, f, a=args):
                    b = list(a)
                    b[2 + j] = t
                    return f(*b)

                fd = mpmath.diff(lambda t, k=k, p=p: moved(t, k, p.log_z), args[2 + k])
                worst_g = max(worst_g, abs(fd - g[k]))
                for j in range(3):
                    fd = mpmath.diff(lambda t, k=k, j=j, p=p: moved(t, j, p.g)[k], args[2 + j])
                    worst_dg = max(worst_dg, abs(fd - dg[k][j]))
    for name, worst in (("g_out = d log Z_out / d omega", worst_g),
                        ("dg_out = d g_out / d omega", worst_dg)):
        out.append({"name": f"{name} (9 pieces, mpmath finite differences at 40 digits)",
                    "passed": bool(worst < mpmath.mpf(10) ** -30),
                    "detail": f"largest deviation {float(worst):.1e} (tolerance 1e-30)"})
    return out
