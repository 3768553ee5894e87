"""Tests of the both-learned SMI branch (numerics.smi_branches; THEORY 2.1)."""

import math

import numpy as np
import pytest
import smi_mc_oracles
from aim_sym.numerics import smi, smi_fibre
from aim_sym.numerics import smi_branches as sb
from aim_sym.numerics.records import ConvergenceError, InputError

Q_TEST = (0.3, 0.983)            # near the both-learned fixed point at alpha ~ 0.85


def test_off_diagonal_overlap_vanishes_montecarlo():
    # z_2 -> -z_2 leaves y unchanged and flips g_2 but not g_1: K12 = 0 (the plain Monte Carlo
    # route uses no symmetry reduction, so this is a real test)
    mc = smi_mc_oracles.montecarlo_stats(*Q_TEST, samples=600, inner=400, seed=4)
    assert abs(mc["K12"].value) < 4 * mc["K12"].error


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
    A = np.linalg.inv(np.moveaxis(smi_fibre.attention_inverse(z[:, 0], z[:, 1], 1.0, 1.0)[0],
                                  (0, 1), (-2, -1)))
    h = np.einsum("nab,nb->na", A, z[:, 2:])
    j00, j01, j10, j11 = smi_fibre.fibre_jacobian(z[:, 0], z[:, 1], h[:, 0], h[:, 1], 1.0, 1.0)
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
    with pytest.raises(InputError, match="alpha"):
        sb.learned_point(alpha=-0.1)
    with pytest.raises(InputError, match="init"):
        sb.learned_point(alpha=0.8, init=(0.0, 0.98))


def test_learned_point_on_layer2_branch_raises():
    # at alpha = 0.6 < alpha_seq the only fixed point with q2 > 0 has q1 = 0
    with pytest.raises(ConvergenceError):
        sb.learned_point(alpha=0.6, init=(0.05, 0.95),
                         rule=dict(m=6, replicates=2, dz=0.3))


def test_egen_quasi_monte_carlo_against_plain_monte_carlo():
    # THEORY 2.4 plug-in e_gen: scrambled Sobol' replicates vs an independent pseudo-random
    # sample of the same integral (different generator, no low-discrepancy structure)
    q = (0.3754, 0.99056)
    val, err = sb.egen_estimate(*q, skip=1.0, beta=1.0)
    g = np.random.default_rng(17).standard_normal((8, 2**15, 8))
    reps = sb._egen_replicates(*q, g, skip=1.0, beta=1.0)
    mc, se = reps.mean(), reps.std(ddof=1) / np.sqrt(reps.size)
    assert err < 1e-3                                   # the 8D Gauss-Hermite rule gave +-0.03
    assert abs(val - mc) < 4 * np.hypot(se, err / 2)
    assert sb.egen_estimate(1.0, 1.0, skip=1.0, beta=1.0)[0] == 0.0   # omega = z
