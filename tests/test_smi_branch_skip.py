"""The model-sampled branch kernel (numerics/smi_branch_qmc.py) away from skip c = 1 (issue 14;
docs/smi_branch_skip.md, THEORY 2.2): against the deterministic L = 2 lattice
(numerics/smi_sequential.py, numerics/smi.py) at c = 0.5 and 2, and at L = 3, c = 0.5 (where the
lattice refuses c < 1) against the seeded Monte Carlo of tests/smi_mc_oracles.py."""

import math

import pytest
from aim_sym.numerics import smi, smi_sequential
from aim_sym.numerics import smi_branch_qmc as bq
from smi_mc_oracles import montecarlo_branch

# two consecutive rungs of the L = 2 lattice ladder (tau, dh / sqrt V, dz): coarse, refined
RUNGS = (smi_sequential.SEQ_LADDER[1], smi_sequential.SEQ_LADDER[2])


def lattice_stats(q: float, c: float) -> dict:
    """mu1, K2, r1 of the lattice at the refined rung, each with the rung change as its bar."""
    a, b = (smi_sequential.branch_stats(q, c=c, n_w=o[0], dh=o[1], dz=o[2]) for o in RUNGS)
    r = {k: (st["mu1"] - (1 - q) * st["K2"] / q) for k, st in (("a", a), ("b", b))}
    return {"mu1": (b["mu1"], abs(b["mu1"] - a["mu1"])), "K2": (b["K2"], abs(b["K2"] - a["K2"])),
            "r1": (r["b"], abs(r["b"] - r["a"]))}


@pytest.mark.parametrize("c,q", [(2.0, 0.99), (0.5, 0.945)])
def test_branch_statistics_away_from_unit_skip_match_the_lattice(c, q):
    # near each skip's sequential root: mu_1, K_2 and the residual r_1 of the kernel (a cheap
    # rule, 99% bars) against the lattice; the same kernel at c = 1 is excluded (the check
    # sees the skip)
    kw = dict(layers=2, tokens=2, log2_outer=10, log2_inner=11, replicates=8, seed=5)
    st = bq.branch_stats_qmc(q, skip=c, **kw)
    ref = lattice_stats(q, c)
    for k in ("mu1", "K2", "r1"):
        v, e = ref[k]
        assert abs(st[k]["value"] - v) <= st[k]["error"] + e, k
    assert st["mu1"]["error"] < 0.05 * st["mu1"]["value"]
    at1 = bq.branch_stats_qmc(q, skip=1.0, **kw)
    for k in ("mu1", "K2", "r1"):
        assert abs(at1[k]["value"] - ref[k][0]) > at1[k]["error"] + ref[k][1], k


@pytest.mark.slow
def test_sequential_threshold_at_skip_2_matches_the_lattice():
    # the L = 2 sequential threshold and its root q2* (0.98975 at c = 2 against 0.97365 at
    # c = 1: the root is what moves with c) by a cheap kernel rule against the lattice ladder
    # (~8 s with OPENBLAS_NUM_THREADS=1; a threaded BLAS on 2 loaded cores made it ~35 s)
    (r,) = bq.sequential_thresholds_qmc(layers=2, tokens=2, skip=2.0, log2_outer=10,
                                        log2_inner=11, replicates=8, scan_rule=(9, 10, 8),
                                        scan=(0.95, 0.98, 0.99, 0.995, 0.998))
    d = smi_sequential.sequential_threshold(skip=2.0, digits=3)
    assert abs(r["value"] - d["value"]) <= r["error"] + d["error"]
    assert abs(r["q2"] - d["q2"]) <= r["q2_error"] + d["q2_error"]
    assert r["error"] < 0.03 and r["q2_error"] < 1e-3
    checks = r["checks"]
    assert abs(checks["trace1"][0] - 2) <= checks["trace1"][1]


@pytest.mark.slow
@pytest.mark.parametrize("c", [0.5, 2.0])
def test_sequential_threshold_default_rule_matches_the_lattice(c):
    # the command's rule (16 x 2^12 x 2^13) against the ladder at digits 4 (~60 s each)
    (r,) = bq.sequential_thresholds_qmc(layers=2, tokens=2, skip=c, seed=1)
    d = smi_sequential.sequential_threshold(skip=c, digits=4)
    assert abs(r["value"] - d["value"]) <= r["error"] + d["error"]
    assert abs(r["q2"] - d["q2"]) <= r["q2_error"] + d["q2_error"]
    assert r["error"] < 0.01


@pytest.mark.slow
def test_branch_fixed_point_at_skip_2_matches_the_lattice_se():
    # the layer-2 branch point at alpha = 0.5, c = 2 and layer 1's eigenvalue alpha mu_1
    r = bq.branch_fixed_point(alpha=0.5, layers=2, tokens=2, skip=2.0, log2_outer=11,
                               log2_inner=12, replicates=8)
    ref = smi.layer2_point(alpha=0.5, skip=2.0)
    assert abs(r["q2"] - ref["Q"][1]) <= r["q2_error"] + ref["error"][1]
    st = r["stability"][1]
    assert st["stable"] is True and ref["stable"]
    assert abs(st["eigenvalue"] - ref["eigenvalue"]) <= st["error"]


@pytest.mark.slow
def test_branch_fixed_point_at_skip_half_against_the_refined_lattice():
    # at c = 0.5, alpha = 0.5 smi.layer2_point's fixed orders are not converged (its q2 is off
    # beyond its bar: docs/smi_branch_skip.md), so the kernel's root is checked against the
    # lattice at ladder rungs 5 -> 6: at the kernel's q2, q2 / (1 - q2) = alpha K_2 and layer
    # 1's eigenvalue alpha mu_1, within the kernel's bars + the rung change
    alpha = 0.5
    r = bq.branch_fixed_point(alpha=alpha, layers=2, tokens=2, skip=0.5, log2_outer=11,
                               log2_inner=12, replicates=8)
    q = r["q2"]
    a, b = (smi_sequential.branch_stats(q, c=0.5, n_w=o[0], dh=o[1], dz=o[2], workers=2)
            for o in smi_sequential.SEQ_LADDER[4:6])
    assert abs(q / (1 - q) - alpha * b["K2"]) <= r["q_hat2_error"] + alpha * abs(b["K2"] - a["K2"])
    st = r["stability"][1]
    assert st["stable"] is True
    assert abs(st["eigenvalue"] - alpha * b["mu1"]) <= st["error"] + alpha * abs(b["mu1"] - a["mu1"])
    assert r["q2_error"] < 0.02            # ill-conditioned here: d(q/(1-q) - alpha K_2)/dq = 1.7


@pytest.mark.slow
def test_l3_sequential_thresholds_at_skip_half_against_monte_carlo():
    # no lattice at L = 3 below c = 1: at each of the kernel's roots q3* the oracle's mu_l
    # equals 1 / alpha_l and its residual r_l vanishes (3.5 of its standard errors + the
    # kernel's bars carried over)
    out = bq.sequential_thresholds_qmc(layers=3, tokens=2, skip=0.5, log2_outer=11,
                                       log2_inner=13, replicates=8)
    for r in out:
        l, q = r["layer"], r["q3"]
        mc = montecarlo_branch(q, layers=3, skip=0.5, samples=3000, inner=1000, seed=13)
        mu, res = mc[f"mu{l}"], mc[f"resid{l}"]
        slope = abs(r["slope_r"]) / (1 - q)
        assert abs(res.value) <= 3.5 * res.error + slope * r["q3_error"], l
        assert abs(mu.value - 1 / r["value"]) <= 3.5 * mu.error + r["error"] / r["value"] ** 2, l
        assert math.isfinite(r["value"]) and r["error"] < 0.05 * r["value"]


@pytest.mark.slow
def test_layer2_point_below_unit_skip_climbs_the_ladder():
    """smi.layer2_point at c = 0.5, alpha = 0.5 (before the ladder: 0.71586 +- 0.025, 1.7 of its
    bars off): its bar covers q2 = 0.67256 +- 1.6e-4, the lattice at rungs (0.28, 0.85, 0.17) ->
    (0.25, 0.7, 0.16) (docs/smi_branch_skip.md; the branch kernel gives 0.67203 +- 0.004), and
    the fixed pair of orders alone would not."""
    r = smi.layer2_point(alpha=0.5, skip=0.5)
    ref, ref_err = 0.67256, 1.6e-4
    assert abs(r["Q"][1] - ref) <= r["error"][1] + ref_err, r
    assert "raised" in r["note"]
    old = smi.LAYER2_LADDER_BELOW
    try:
        smi.LAYER2_LADDER_BELOW = 0.0   # the fixed pair (rungs 3, 4) only
        fixed = smi.layer2_point(alpha=0.5, skip=0.5)
    finally:
        smi.LAYER2_LADDER_BELOW = old
    assert abs(fixed["Q"][1] - ref) > fixed["error"][1] + ref_err
