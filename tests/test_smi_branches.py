"""Tests of the both-learned SMI branch (numerics.smi_branches; THEORY 2.1)."""

import math

import numpy as np
import pytest

from numerics import smi
from numerics import smi_branches as sb
from numerics.records import ConvergenceError, InputError

TINY = (4, 3, (2, 6), 2, 4, 4)   # cheap order for the default run
Q_TEST = (0.3, 0.983)            # near the both-learned fixed point at alpha ~ 0.85


def test_off_diagonal_overlap_vanishes():
    # z_2 -> -z_2 leaves y unchanged and flips g_2 but not g_1: K12 = 0.  Its integrand is odd
    # under each layer's sign flip, so only the full (unhalved) grids can show it.
    o = (4, 2, (2, 4), 2, 4, 4)
    full = sb.branch_stats(*Q_TEST, order=o, half=False)
    half = sb.branch_stats(*Q_TEST, order=o)
    assert abs(full["K12"]) < 1e-12 * math.sqrt(full["K1"] * full["K2"])
    assert abs(full["K1"] - half["K1"]) < 1e-10 * half["K1"]     # even integrands: halving ok
    assert abs(full["K2"] - half["K2"]) < 1e-10 * half["K2"]
    mc = sb.montecarlo_stats(*Q_TEST, samples=600, inner=400, seed=4)
    assert abs(mc["K12"].value) < 4 * mc["K12"].error


def test_branch_stats_against_montecarlo_small():
    s = sb.branch_stats(*Q_TEST, order=TINY)
    mc = sb.montecarlo_stats(*Q_TEST, samples=1000, inner=400, seed=3)
    for k in ("K1", "K2"):
        # 4 standard errors plus the tiny order's quadrature error (its Nishimori gap, x2)
        tol = 4 * mc[k].error + 2 * abs(s[k] - s["N" + k[1]])
        assert abs(mc[k].value - s[k]) < tol


def test_nishimori_and_mass_on_branch():
    # inner rule with 6 x 6 nodes per component: measured gaps 1.5% (K1) and 0.4% (K2)
    s = sb.branch_stats(*Q_TEST, order=(4, 3, (2, 6), 2, 6, 6))
    assert abs(s["weight"] - 1) < 1e-12
    assert abs(s["K1"] - s["N1"]) < 0.03 * s["K1"]
    assert abs(s["K2"] - s["N2"]) < 0.01 * s["K2"]


def test_layer2_limit_has_no_layer1_signal():
    s = sb.branch_stats(0.0, 0.9, order=TINY)
    assert abs(s["K1"]) < 1e-12 * s["K2"]       # E[z_1 | y, omega] = 0 at q1 = 0 (sign symmetry)


def test_free_entropy_bookkeeping():
    # d phi / d qhat_l = 0 at q_l = qhat_l / (1 + qhat_l); phi(0) = 0
    qh = np.array([0.8, 40.0])
    q = qh / (1 + qh)
    for k in range(2):
        e = np.zeros(2)
        e[k] = 1e-6 * qh[k]
        d = (sb.free_entropy(q, qh + e, 0.8, 0.1, 0.0) - sb.free_entropy(q, qh - e, 0.8, 0.1, 0.0))
        assert abs(d) < 1e-9
    assert sb.free_entropy([0, 0], [0, 0], 0.7, -1.3, -1.3) == 0.0


def _rec(branch, stable, phi, q):
    return dict(alpha=0.8, Q=list(q), Q_hat=[1.0, 1.0], error=[0.0, 0.0], e_gen=0.1,
                e_gen_error=0.0, phi=phi, phi_error=0.0, branch=branch, stable=stable,
                eigenvalue=0.5 if stable else 1.5, note="")


def test_fixed_point_picks_stable_largest_phi(monkeypatch):
    monkeypatch.setattr(smi, "layer2_point",
                        lambda **kw: _rec("layer 2 (q1 = 0)", False, 0.5, (0, 0.97)))
    monkeypatch.setattr(sb, "learned_point",
                        lambda **kw: _rec("both learned", True, 0.2, (0.3, 0.98)))
    assert smi.fixed_point(alpha=0.8)["branch"] == "both learned"
    monkeypatch.setattr(smi, "layer2_point",
                        lambda **kw: _rec("layer 2 (q1 = 0)", True, 0.5, (0, 0.97)))
    assert smi.fixed_point(alpha=0.6)["branch"] == "layer 2 (q1 = 0)"


def test_perfect_recovery_analysis():
    pr = sb.perfect_recovery()
    r = pr["ratio"]
    assert 0 < pr["a"] < 1 and abs(pr["ratio_multiplier"]) < 1     # Q = I stable for alpha > 1
    k = sb.recovery_kappa(r)
    assert abs(k["kappa1"] + k["kappa2"] - 2) < 1e-14
    # independent: Monte Carlo of kappa_1(r*) = 1 (seeded, 4 standard errors)
    rng = np.random.default_rng(7)
    z = rng.standard_normal((200_000, 4))
    A = np.linalg.inv(np.moveaxis(smi._attention_inverse(z[:, 0], z[:, 1], 1.0, 1.0)[0],
                                  (0, 1), (-2, -1)))
    h = np.einsum("nab,nb->na", A, z[:, 2:])
    j00, j01, j10, j11 = smi._fibre_jacobian(z[:, 0], z[:, 1], h[:, 0], h[:, 1], 1.0, 1.0)
    tr = j00**2 + j01**2 + j10**2 + j11**2
    dt = (j00 * j11 - j01 * j10) ** 2
    v = (r * tr + 2 * r * r * dt) / (1 + r * tr + r * r * dt)     # tr[rJ'J (I + rJ'J)^-1]
    se = v.std() / math.sqrt(v.size)
    assert abs(v.mean() - 1) < 4 * se + pr["a"] * pr["ratio_error"] / r
    rec = sb.recovery_point(alpha=1.2)
    assert rec["Q"] == [1.0, 1.0] and rec["stable"] and rec["e_gen"] == 0.0
    r1 = sb.recovery_point(alpha=1.0)
    assert not r1["stable"] and "alpha = 1" in r1["note"]       # marginal at alpha = 1
    with pytest.raises(InputError, match="alpha"):
        sb.recovery_point(alpha=0.9)


def test_bad_input():
    with pytest.raises(InputError, match="q1"):
        sb.branch_stats(1.0, 0.5, order=TINY)
    with pytest.raises(InputError, match="init"):
        sb.solve_learned(alpha=0.8, init=(0.0, 0.98))
    with pytest.raises(InputError, match="alpha"):
        sb.solve_learned(alpha=-0.1)


def test_newton_on_layer2_branch_raises():
    # at alpha = 0.5 < alpha_seq the only fixed point with q2 > 0 has q1 = 0
    with pytest.raises(ConvergenceError):
        sb.solve_learned(alpha=0.5, init=(0.05, 0.95), orders=(TINY, TINY), max_iter=3)


@pytest.mark.slow
def test_learned_fixed_point_satisfies_refined_se():
    r = sb.solve_learned(alpha=0.85, init=(0.3, 0.983))
    q = np.array(r["Q"])
    assert r["stable"] and q[0] > 0.05
    s = sb.branch_stats(*q, order=sb.LEARNED_ORDERS[1])
    qh = 0.85 * np.array([s["K1"], s["K2"]])
    T = qh / (1 + qh)
    # the map's residual is within the reported error (which also carries the Nishimori gap)
    assert np.all(np.abs(T - q) <= np.array(r["error"]))


@pytest.mark.slow
def test_branch_stats_against_montecarlo():
    s = sb.branch_stats(*Q_TEST, order=sb.LEARNED_ORDERS[1])
    mc = sb.montecarlo_stats(*Q_TEST, samples=8000, inner=2000, seed=1)
    for k in ("K1", "K2"):
        assert abs(mc[k].value - s[k]) < 4 * mc[k].error + abs(s[k] - s["N" + k[1]])
