"""Route A of the SMI engine (deep tied attention, L = 2, M = 2; THEORY 2.1): outer expectations
at ``Q = diag(q1, q2)`` by tensor Gauss-Hermite rules in ``omega_1``, ``omega_2``, ``h`` and the
fibre coordinate ``z_1`` (coordinates and conventions: :mod:`aim_sym.numerics.smi`).

Accurate while the posterior is broad (small q2) and the skip c is not small (its Gauss-Hermite
rules in h and z_1 miss the width-c ridge of the density of h); used for the identity checks
(:func:`layer2_stats`) and as the test oracle of the small-q2 layer-2 points (served by the
lattice since 2026-11-26: docs/smi_small_skip.md).
:func:`q0_sums`: the moments at ``Q = 0`` on any rules, for the weak thresholds and ``E log
Z_out`` at ``Q = 0``: on the rotated rules of :mod:`aim_sym.numerics.smi_fibre`
(:func:`q0_rotated`, right at every c) or on tensor Gauss-Hermite rules (:func:`q0_gauss_hermite`,
c >= 0.5 only).
"""

from __future__ import annotations

import math

import numpy as np

from .records import require
from .smi_fibre import (
    attention_inverse,
    fibre_point,
    fibre_quadratics,
    graded_omega_rule,
    grid2,
    ratio_grid2,
    rotated_h_rule,
    rotated_z1_rule,
)

SIGMA_H = 2.7
CHUNK = 3_000_000  # elements per (outer x inner) block


def _omega_rule(n, q):
    """Rule (w0, w1, w) for omega_l ~ N(0, q I), half plane w0 > 0: the node 0 at q = 0, else
    :func:`aim_sym.numerics.smi_fibre.graded_omega_rule` (n a pair) or Gauss-Hermite order n."""
    if not q > 0:
        return np.zeros(1), np.zeros(1), np.ones(1)
    if isinstance(n, tuple):
        return graded_omega_rule(n, q)
    return grid2(n, math.sqrt(q), True)


def stats(q1, q2, *, c, beta, n_w1, n_w2, n_h, n_z, want_psi=False, sigma_h=SIGMA_H):
    """Outer expectations at Q = diag(q1, q2) by quadrature (module docstring of
    :mod:`aim_sym.numerics.smi`).

    ``n_w1``, ``n_w2`` may be pairs, selecting the graded rule
    :func:`aim_sym.numerics.smi_fibre.graded_omega_rule` for omega_1, omega_2.
    Returns a dict with ``K1 = E sum_m g_1m^2``, ``K2 = E sum_m g_2m^2``,
    ``K12 = E sum_m g_1m g_2m`` (only meaningful at q1 = 0: its integrand is odd under
    ``omega_2 -> -omega_2``, which the halved omega_2 and h grids assume even; the exact K12 is 0,
    see :func:`aim_sym.numerics.smi_branches.learned_stats`),
    ``mu1 = E ||Cov[z_1 | y, omega] - I||_F^2`` (meaningful at q1 = 0: the sequential stability
    coefficient), ``psi = E log Z_out`` and ``mass`` (should be 1).
    ``sigma_h``: scale of the Gauss-Hermite h rule (the default 2.7 is coarse in h at c = 0.5;
    docs/smi_small_skip.md, last section).
    """
    v1, v2 = 1.0 - q1, 1.0 - q2
    *xz, wz = grid2(n_z, 1.0, False)
    o10, o11, ow1 = _omega_rule(n_w1, q1)
    o20, o21, ow2 = _omega_rule(n_w2, q2)
    require(1.0 <= sigma_h <= 4.0, "sigma_h", "in [1, 4]", sigma_h)
    h0, h1, wh = ratio_grid2(n_h, sigma_h)
    # outer (omega_2, h) points
    O0 = np.repeat(o20, h0.size)
    O1 = np.repeat(o21, h0.size)
    H0 = np.tile(h0, o20.size)
    H1 = np.tile(h1, o20.size)
    Wout2 = np.repeat(ow2, h0.size) * np.tile(wh, o20.size)
    acc = dict(mass=0.0, K1=0.0, K2=0.0, K12=0.0, mu1=0.0, psi=0.0, trcov2=0.0)
    sq = math.sqrt(v1)
    for a, (w10, w11) in enumerate(zip(o10, o11, strict=True)):
        z0 = w10 + sq * xz[0]
        z1 = w11 + sq * xz[1]
        Ai, det = attention_inverse(z0, z1, c, beta)
        wi = wz / det / (2 * math.pi * v2)
        B, Y, _ = fibre_quadratics(Ai)       # h^T B h, omega_2^T Ai h
        Mz = np.stack([wi, wi * z0, wi * z1, wi * z0 * z0, wi * z0 * z1, wi * z1 * z1]).T
        Ma = (wi * Y).T                                          # (N_in, 4)
        Mb = (wi * B).T                                          # (N_in, 3): |A^-1 h|^2
        step = max(1, CHUNK // z0.size)
        for s0 in range(0, H0.size, step):
            sl = slice(s0, s0 + step)
            hh = np.stack([H0[sl] ** 2, H0[sl] * H1[sl], H1[sl] ** 2]).T
            oh = np.stack([O0[sl] * H0[sl], O0[sl] * H1[sl], O1[sl] * H0[sl], O1[sl] * H1[sl]]).T
            base = -(hh @ B + (O0[sl] ** 2 + O1[sl] ** 2)[:, None]) / (2 * v2)
            x = (oh @ Y) / v2
            ep = np.exp(base + x)
            em = np.exp(base - x)
            Sp = ep + em
            Dm = ep - em
            m = Sp @ Mz                                  # (n, 6)
            d = Dm @ Ma                                  # (n, 4): sum w (e+ - e-) Ai_ab
            n2 = ((Sp @ Mb) * hh).sum(1)                 # sum w (e+ + e-) |z_2|^2
            Z = m[:, 0]
            Zs = np.where(Z > 0, Z, 1.0)
            E1 = m[:, 1:3] / Zs[:, None]
            S1 = m[:, 3:6] / Zs[:, None]
            E2 = np.stack(fibre_point(d.T.reshape(2, 2, -1), H0[sl], H1[sl]), 1) / Zs[:, None]
            g1 = (E1 - np.array([w10, w11])) / v1
            g2 = (E2 - np.stack([O0[sl], O1[sl]], axis=1)) / v2
            C00 = S1[:, 0] - E1[:, 0] ** 2 - 1
            C01 = S1[:, 1] - E1[:, 0] * E1[:, 1]
            C11 = S1[:, 2] - E1[:, 1] ** 2 - 1
            W = ow1[a] * Wout2[sl] * Z / 2
            acc["mass"] += W.sum()
            acc["K1"] += W @ (g1 ** 2).sum(1)
            acc["K2"] += W @ (g2 ** 2).sum(1)
            acc["K12"] += W @ (g1 * g2).sum(1)
            acc["mu1"] += W @ (C00**2 + 2 * C01**2 + C11**2)
            acc["trcov2"] += W @ (n2 / Zs - (E2**2).sum(1))
            if want_psi:
                acc["psi"] += W @ np.log(Zs)
    return acc


def layer2_stats(q2, order, *, c, beta, want_psi=False):
    """:func:`stats` on the layer-2 branch ``Q = diag(0, q2)`` at ``order = (n_omega2, n_h,
    n_z)``."""
    return stats(0.0, q2, c=c, beta=beta, n_w1=2, n_w2=order[0], n_h=order[1], n_z=order[2],
                 want_psi=want_psi)


def q0_sums(zrule, hrule, *, c, beta):
    """At Q = 0: lambda_l = E_y ||Cov[z_l | y] - I||_F^2 (the diagonal of F), lambda_12 =
    E_y <Cov[z_1|y] - I, Cov[z_2|y] - I>_F (the off-diagonal mode), the cross block
    E_y ||Cov[z_1, z_2 | y]||_F^2 (zero: F is block diagonal), the mass and ``psi = E log Z_out``
    (``Z_out`` of the pair {h, -h}, the convention of route A), from a rule
    ``zrule = (z0, z1, w)`` for z_1 ~ N(0, I) and ``hrule = (h0, h1, w)`` for ``int dh`` over
    integrands even in h (THEORY 2.2, 2.3)."""
    xz0, xz1, wz = zrule
    Ai, det = attention_inverse(xz0, xz1, c, beta)
    wi = wz / det / (2 * math.pi)
    B, _, K = fibre_quadratics(Ai)       # z_2 z_2^T = Ai h h^T Ai^T: K, quadratic in h
    Mz = np.stack([wi, wi * xz0 * xz0, wi * xz0 * xz1, wi * xz1 * xz1] + [wi * k for k in K]).T
    h0, h1, wh = hrule
    acc = np.zeros(6)
    step = max(1, CHUNK // xz0.size)
    for s0 in range(0, h0.size, step):
        sl = slice(s0, s0 + step)
        hh = np.stack([h0[sl] ** 2, h0[sl] * h1[sl], h1[sl] ** 2]).T
        with np.errstate(under="ignore"):
            E = np.exp(-0.5 * (hh @ B))
        m = E @ Mz
        Z = m[:, 0]
        Zs = np.where(Z > 0, Z, 1.0)     # Z underflows to 0 only far out, where W = 0 too
        C1 = m[:, 1:4] / Zs[:, None]
        C2 = np.stack([(m[:, 4 + 3 * j: 7 + 3 * j] * hh).sum(1) for j in range(3)], 1) / Zs[:, None]
        G1 = C1 - np.array([1.0, 0.0, 1.0])
        G2 = C2 - np.array([1.0, 0.0, 1.0])
        W = wh[sl] * Z
        fro = np.array([1.0, 2.0, 1.0])
        acc += np.array([W.sum(), W @ ((G1**2) @ fro), W @ ((G2**2) @ fro),
                         W @ ((G1 * G2) @ fro), 0.0, W @ np.log(2.0 * Zs)])
    # cross block Cov[z_1, z_2 | y] = sum_s s (...) = 0 exactly in the symmetric rule
    return dict(mass=acc[0], lam1=acc[1], lam2=acc[2], lam12=acc[3], cross=acc[4],
                psi=acc[5])


def q0_gauss_hermite(n_h, n_z, *, c, beta):
    """:func:`q0_sums` on tensor Gauss-Hermite rules (z_1: order n_z; h: order n_h, ratio to
    N(h; 0, SIGMA_H^2 I) on the half plane h_0 > 0).  Accurate for skip c >= 0.5 only: at small c
    the integrands have features of width sqrt(c) in z_1 and c in h that these rules never see
    (:func:`q0_rotated` resolves them)."""
    return q0_sums(grid2(n_z, 1.0, False), ratio_grid2(n_h, SIGMA_H), c=c, beta=beta)


def q0_rotated(order, *, c, beta):
    """:func:`q0_sums` on the rotated rules of :mod:`aim_sym.numerics.smi_fibre` (``order =
    (n_hs, dt_h, n_s, dt_z)``): sinh-mapped trapezoids in the difference coordinates resolve
    kappa(z_1) = det A / (1 + c) -> c (width sqrt(2 c / beta) in z_1, c in h) at every skip."""
    n_hs, dt_h, n_s, dt_z = order
    return q0_sums(rotated_z1_rule(n_s, dt_z, c, beta), rotated_h_rule(n_hs, dt_h, c),
                   c=c, beta=beta)
