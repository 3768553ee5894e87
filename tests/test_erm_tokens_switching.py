"""The T >= 3 ERM SE map is piecewise smooth (THEORY 3; docs/erm.md, T = 3 threshold section):
at each QMC node the prox's global minimiser can switch branch, and a single-replicate map then
jumps by O(1/nodes).  Where the branch roots straddle the switching surface the map has no exact
fixed point; the chord iteration (numerics.erm_se.chord_iterate) settles into a cycle whose
segment holds the generalised root."""

from __future__ import annotations

import math

import numpy as np
import pytest
from aim_sym.numerics import erm_output_tokens as E
from aim_sym.numerics import erm_se as S
from aim_sym.numerics.erm_thresholds import interpolation_threshold
from aim_sym.numerics.records import ConvergenceError

# a contraction G(x) = x + A (x - c) (eigenvalues of I + A inside the unit disc) with a jump j of
# F = G - x across the plane n . x = s: the shape measured at alpha = 1.2 alpha_interp(3)
A = np.array([[-0.89, -0.81, -0.28], [0.35, -2.10, -0.18], [0.04, 0.11, -1.26]])
N_PLANE = np.array([-0.3, 1.0, -0.5])
JUMP = np.array([2.3e-4, 1.2e-4, 3.4e-4])


def _piecewise(c: np.ndarray, s: float):
    def residual(x: np.ndarray) -> tuple[np.ndarray, None]:
        return A @ (x - c) + JUMP * (N_PLANE @ x > s), None
    return residual


def _generalised_root(c: np.ndarray, s: float) -> np.ndarray:
    """The point x = c - theta A^-1 j on the plane: (1 - theta) F_L(x) + theta F_R(x) = 0."""
    u = np.linalg.solve(A, JUMP)
    theta = (N_PLANE @ c - s) / (N_PLANE @ u)
    assert 0 < theta < 1
    return c - theta * u


def test_chord_iterate_reaches_a_root_on_its_own_side():
    c = np.array([0.6, 0.3, 4.5])
    res = _piecewise(c, s=N_PLANE @ c + 1e-3)  # c lies on the left side: a true root
    x, its, r, _, cycle = S.chord_iterate(res, c + 0.01, 1.1 * A, tol=1e-12)
    assert not cycle and r < 1e-12
    assert np.max(np.abs(x - c)) < 1e-11


@pytest.mark.parametrize("scale", [1.0, 0.8, 1.25])
def test_chord_iterate_cycles_across_a_jump_around_the_generalised_root(scale):
    """The branch roots straddle the plane: no root; the chord iteration (exact or 20-25 % off
    Jacobian) settles into a cycle whose points straddle the plane and whose mean is within the
    cycle's width of the generalised root."""
    c = np.array([0.6, 0.3, 4.5])
    u = np.linalg.solve(A, JUMP)
    s = N_PLANE @ c - 0.4 * (N_PLANE @ u)  # x_L = c on the right side, x_R = c - u on the left
    x, its, r, _, cycle = S.chord_iterate(_piecewise(c, s), c + 0.05, scale * A, tol=1e-13,
                                          max_iter=200)
    pts = np.array([p for p, _ in cycle])
    assert len(pts) >= 2
    side = pts @ N_PLANE > s
    assert side.any() and not side.all()
    width = pts.max(axis=0) - pts.min(axis=0)
    root = _generalised_root(c, s)
    assert np.all(np.abs(pts.mean(axis=0) - root) <= width)
    if scale == 1.0:  # the exact Jacobian: the cycle is the two branch roots
        want = np.array(sorted([tuple(c), tuple(c - u)]))
        assert np.max(np.abs(np.array(sorted(map(tuple, pts))) - want)) < 1e-12


def test_chord_iterate_names_a_failure():
    with pytest.raises(ConvergenceError):
        S.chord_iterate(lambda x: (np.array([1.0, 0.0, 0.0]) + 0 * x, None), np.zeros(3),
                        np.eye(3), max_iter=5)


def test_width_of_an_exact_fixed_point_is_zero():
    fp = S.ChordFixedPoint(params=(1.0, 0.5, 2.0, 0.1, 0.2, 0.3), iterations=3, residual=0.0)
    assert np.all(fp.width() == 0)
    cyc = S.ChordFixedPoint(params=fp.params, iterations=3, residual=1e-4,
                            ends=((1.0, 0.5, 2.0, 0.1, 0.2, 0.3), (1.1, 0.4, 2.0, 0.1, 0.25, 0.3)))
    assert cyc.width() == pytest.approx([0.1, 0.1, 0, 0, 0.05, 0])


# the pooled fixed point at alpha = 1.2 alpha_interp(3), lambda = 1e-3, seed 0 (a start only)
_POOLED = (1.833568378763186, 1.335395997733988, 93.09592478691995)


@pytest.mark.slow
def test_T3_replicate_map_jumps_at_one_node_above_the_threshold():
    """alpha = 1.2 alpha_interp(3), lambda = 1e-3, seed 0, replicate 6 (2048 nodes): the damped
    Anderson iteration stalls; the chord iteration settles into a 2-cycle whose points have F of
    opposite sign in every coordinate, and along the segment between them exactly one node's
    proximal minimiser jumps (by O(1)) while every other moves continuously."""
    a_int = float(interpolation_threshold(kappa0=0.5, Delta=0.5, tokens=3, dps=None).value)
    p = S.ERMParams(alpha=1.2 * a_int, kappa0=0.5, Delta=0.5, lam=1e-3, tokens=3)
    r = 6
    with pytest.raises(ConvergenceError):
        S.fixed_point(p, q=_POOLED[0], m=_POOLED[1], sigma=_POOLED[2], replicate=r, tol=1e-9,
                      max_iter=40)
    jac = S.map_jacobian(p, q=_POOLED[0], m=_POOLED[1], sigma=_POOLED[2], replicate=r)
    fp = S.chord_fixed_point(p, q=_POOLED[0], m=_POOLED[1], sigma=_POOLED[2], jacobian=jac,
                             replicate=r)
    assert len(fp.ends) == 2
    xa, xb = (S._to_x(*e[:3]) for e in fp.ends)
    Fa = S._map_residual(p, xa, prior=None, replicate=r)[0]
    Fb = S._map_residual(p, xb, prior=None, replicate=r)[0]
    assert np.all(Fa * Fb < 0)
    geo = E.geometry(3)
    xi = E.gaussian_points(2 * (geo.n - 1), p.qmc_points, p.qmc_replicates, p.qmc_seed)[r]

    def prox(x):
        q, m, sigma = S._from_x(x)
        ell, om = E._fields(xi, q=q, m=m, Q0n=p.Q0n)
        return E.prox_step(om, ell, tokens=3, sigma=sigma)[0]

    lo, hi = 0.0, 1.0  # bisect for the jump of F along the segment
    d_lo, d_hi = prox(xa), prox(xb)
    for _ in range(16):
        mid = 0.5 * (lo + hi)
        d_mid = prox(xa + mid * (xb - xa))
        if np.max(np.linalg.norm(d_mid - d_lo, axis=1)) > 0.1:
            hi, d_hi = mid, d_mid
        else:
            lo, d_lo = mid, d_mid
    move = np.linalg.norm(d_hi - d_lo, axis=1)
    assert np.sum(move > 0.1) == 1
    assert np.sort(move)[-2] < 1e-3 * math.sqrt(xi.shape[1])
