"""Tests of the both-learned SMI branch (numerics.smi_branches; THEORY 2.1)."""

import math

import numpy as np
import pytest
import smi_mc_oracles
from aim_sym.numerics import smi, smi_fibre
from aim_sym.numerics import smi_branches as sb
from aim_sym.numerics import smi_sequential as ss
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
                         rule=(7, 8, 4, 0))


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


# ----------------------------------------------------------------------------- joint-branch kernel
# (the former tests of numerics.smi_learned, pointed at the joint-branch kernel that replaced it)
def _stat(st, k, j=0):
    i = st["names"].index(k)
    return st["value"][j, i], st["t"] * st["se"][j, i] + st["bias"][j, i]


def test_nishimori_identities_small_sample():
    # Nishimori: E tr C_1 = M = 2 (C_1 = E[z_1 z_1^T | .]) and K_l = (M - E tr Cov_l / V_l) / V_l
    st = sb.learned_stats([Q_TEST], rule=(8, 9, 6, 2))
    for k, target in (("trace1", 2.0), ("nishimori1", 0.0), ("nishimori2", 0.0)):
        v, e = _stat(st, k)
        assert abs(v - target) < e


def test_against_plain_montecarlo_small():
    st = sb.learned_stats([Q_TEST], rule=(9, 10, 6, 1))
    mc = smi_mc_oracles.montecarlo_stats(*Q_TEST, samples=1000, inner=400, seed=3)
    for k in ("K1", "K2"):
        v, e = _stat(st, k)
        assert abs(mc[k].value - v) < 4 * mc[k].error + e


def test_common_random_numbers():
    # the same rule gives the same K at the same Q, whichever other points share the call
    a = sb.learned_stats([Q_TEST], rule=(7, 8, 4, 0))
    b = sb.learned_stats([(0.25, 0.98), Q_TEST], rule=(7, 8, 4, 0))
    assert np.allclose(a["per"][:, 0], b["per"][:, 1], rtol=1e-9, atol=0)
    g = sb.normals(6, 3, 0)
    assert g.shape == (3, 64, 8) and np.array_equal(g, sb.normals(6, 3, 0))
    assert not np.allclose(g[0], g[1])


def test_stats_bad_input():
    with pytest.raises(InputError, match="q"):
        sb.learned_stats([(1.0, 0.5)], rule=(6, 6, 4, 0))
    with pytest.raises(InputError, match="replicates"):
        sb.learned_stats([(0.3, 0.5)], rule=(6, 6, 1, 0))
    with pytest.raises(InputError, match="alpha"):
        sb.solve_branch(alpha=1.2)


@pytest.mark.slow
def test_layer2_limit_matches_lattice_engine():
    # q1 -> 0 (1e-4), q2 = 0.92: the deterministic lattice engine (h lattice x sinh rule in
    # omega_2) gives K2 = 19.313; the joint kernel must agree within its bar (+ dK2/dq1 q1)
    ref = ss.branch_stats(0.92, n_w=0.3, dh=1.9, dz=0.2)
    st = sb.learned_stats([(1e-4, 0.92)], rule=(13, 13, 16, 1))
    v, e = _stat(st, "K2")
    assert abs(v - ref["K2"]) < e + 1e-3 * ref["K2"]


@pytest.mark.slow
def test_branch_point_is_a_fixed_point_of_the_montecarlo_map():
    # alpha = 0.85: the SE map evaluated at the solver's Q by plain Monte Carlo (an independent
    # sampler, pseudo-random, mixture proposal) returns Q within the combined errors
    r = sb.solve_branch(alpha=0.85, init=(0.375, 0.9906))
    q = np.array(r["Q"])
    assert r["stable"] and q[0] > 0.2
    mc = smi_mc_oracles.montecarlo_stats(*q, samples=40000, inner=1000, seed=8)
    for ll, k in enumerate(("K1", "K2")):
        qh = 0.85 * mc[k].value
        t = qh / (1 + qh)
        dt = 4 * 0.85 * mc[k].error / (1 + qh) ** 2
        assert abs(t - q[ll]) < dt + r["error"][ll]


# ----------------------------------------------------------------------------- its (skip, beta) range
Q_BETA10 = (0.3, 0.98)           # q2 near the layer-2 point at alpha_seq(c = 1, beta = 10) ~ 0.762


def test_range_refusal_names_the_branch():
    # outside BRANCH_RANGES the both-learned branch is refused in one line naming the option
    with pytest.raises(InputError, match="skip must be in .* both-learned branch"):
        sb.learned_stats([Q_TEST], skip=25.0, rule=(6, 6, 2, 0))
    with pytest.raises(InputError, match="beta must be in .* both-learned branch"):
        sb.learned_point(alpha=0.9, beta=0.05, rule=(6, 6, 2, 0))
    with pytest.raises(InputError, match="beta"):
        sb.learned_stats([Q_TEST], beta=10.5, rule=(6, 6, 2, 0))


def test_nishimori_identities_at_beta_10():
    # the widened corner beta = 10 (sharp softmax): E tr C_1 = M and both Nishimori forms vanish
    st = sb.learned_stats([Q_BETA10], beta=10.0, rule=(8, 9, 6, 2))
    for k, target in (("trace1", 2.0), ("nishimori1", 0.0), ("nishimori2", 0.0)):
        v, e = _stat(st, k)
        assert abs(v - target) < e


@pytest.mark.slow
def test_beta_10_against_plain_montecarlo():
    # the widened corner beta = 10 (BRANCH_RANGES) against the plain Monte Carlo oracle (measured
    # at full size: K1 0.4013 +- 0.0028 against 0.3979 +- 0.0038 (1 SE), K2 63.82 +- 0.40
    # against 63.44 +- 0.40; docs/smi_depth.md)
    st = sb.learned_stats([Q_BETA10], beta=10.0, rule=(11, 12, 8, 1))
    mc = smi_mc_oracles.montecarlo_stats(*Q_BETA10, beta=10.0, samples=6000, inner=600, seed=5)
    for k in ("K1", "K2"):
        v, e = _stat(st, k)
        assert abs(mc[k].value - v) < 4 * mc[k].error + e
