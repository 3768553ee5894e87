"""Weak thresholds of deep attention away from c = 1, beta = 1 (numerics/smi_weak.py, issue 14;
THEORY 2.2, 2.5; docs/smi_depth.md, "Ranges"): the default rule of every validated (L, M, c,
beta) against the seeded model-sampled Monte Carlo route of tests/smi_mc_oracles.py (h sampled
from the model, iid prior samples of the free rows, block U-statistic), which shares neither
the quadrature's outer rule nor its Sobol inner sets nor its plain ratio."""

import math

import numpy as np
import pytest
import smi_mc_oracles
from aim_sym.numerics import smi_weak
from scipy import stats

# validated combinations (layers, tokens, skip, beta) beyond c = 1, beta = 1 (benchmark:
# benchmarks/smi_weak_ranges.py)
VALIDATED = [(4, 2, 2.0, 1.0), (4, 2, 4.0, 1.0), (4, 2, 1.0, 0.25), (4, 2, 1.0, 2.0),
             (4, 2, 0.5, 2.0), (2, 3, 2.0, 1.0), (2, 3, 4.0, 1.0), (2, 3, 1.0, 2.0),
             (2, 3, 1.0, 0.25), (3, 3, 2.0, 1.0), (3, 3, 4.0, 1.0), (3, 3, 1.0, 2.0),
             (3, 3, 1.0, 0.25)]


def quadrature_se(F: dict, *, layers: int, tokens: int, replicates: int | None = None) -> dict:
    """Standard-error equivalent of each bar of :func:`smi_weak.stability`: bar / t(0.995, R - 1)
    for the Sobol rules (R replicates; the default of :data:`smi_weak.RAY` unless given), bar /
    2.58 for the Gauss-Hermite refinements (L = 2)."""
    if replicates is None and (layers, tokens) in smi_weak.RAY:
        replicates = smi_weak.RAY[(layers, tokens)][1]
    t = stats.t.ppf(smi_weak.COVERAGE, replicates - 1) if replicates else stats.norm.ppf(0.995)
    return {l: F[f"lam{l}"].error / t for l in range(1, layers + 1)}


def assert_agrees(layers, tokens, skip, beta, *, rule=None, log2_outer=11, log2_inner=15,
                  block=4096, replicates=16, seed=7, bound=3.5, precision=(0.02, 0.05)):
    """Identities of the quadrature (mass = 1, E tr C_l = M within their bars) and every layer's
    lambda_l within ``bound`` combined standard errors of the model-sampled route."""
    F = smi_weak.stability(layers=layers, tokens=tokens, skip=skip, beta=beta, **(rule or {}))
    assert abs(F["mass"].value - 1.0) <= F["mass"].error < 1e-3
    for l in range(1, layers + 1):
        tr = F[f"trace{l}"]
        assert abs(tr.value - tokens) <= tr.error < 0.01 * tokens
    se_q = quadrature_se(F, layers=layers, tokens=tokens,
                         replicates=(rule or {}).get("replicates"))
    ms = smi_mc_oracles.model_sampled_lambdas(layers=layers, tokens=tokens, skip=skip, beta=beta,
                                              log2_outer=log2_outer, log2_inner=log2_inner,
                                              block=block, replicates=replicates, seed=seed)
    devs = []
    for l in range(1, layers + 1):
        v, (m, se) = F[f"lam{l}"].value, ms[f"lam{l}"]
        assert F[f"lam{l}"].error < precision[0] * v and se < precision[1] * m   # both resolve it
        devs.append((m - v) / math.hypot(se, se_q[l]))
    assert np.all(np.abs(devs) <= bound), devs
    return F, ms


def test_four_layers_at_skip_4_agree_with_the_model_sampled_route():
    # a cheap rule (ray 8 x 2^10) and a small model-sampled run (8 x 2^10 h, 2^13 inner, blocks
    # of 2048); ~1.5 s unloaded
    rule = dict(rule="ray", log2n=10, replicates=8, seed=2)
    F, _ = assert_agrees(4, 2, 4.0, 1.0, rule=rule, log2_outer=10, log2_inner=13, block=2048,
                         replicates=8, seed=3, precision=(0.05, 0.1))
    lam = [F[f"lam{l}"].value for l in range(1, 5)]
    bar = [F[f"lam{l}"].error for l in range(1, 5)]
    # at c = 4 the last layer is learned first, and of the shallower layers layer 2 (at c = 1:
    # layer 1), beyond the bars (alpha_l = 1 / lambda_l: 46.75, 37.30, 44.23, 0.18397 by the
    # default rule, benchmarks/smi_weak_ranges.py)
    assert lam[3] > 100 * max(lam[:3])
    assert lam[1] - bar[1] > max(lam[0] + bar[0], lam[2] + bar[2])


@pytest.mark.slow
@pytest.mark.parametrize("layers,tokens,skip,beta", VALIDATED)
def test_default_rule_agrees_with_the_model_sampled_route(layers, tokens, skip, beta):
    assert_agrees(layers, tokens, skip, beta)


@pytest.mark.slow
def test_plain_monte_carlo_confirms_a_sequential_root_at_skip_2():
    # the branch kernel off c = 1 (L = 2, M = 3, c = 2; a cheap rule, ~30 s): layer 1's root q2*
    # and alpha_seq,1 checked by the seeded plain Monte Carlo of tests/test_smi_branch_qmc.py at
    # that q2 (~50 s): r_1 = mu_1 - (1 - q) K_2 / q vanishes and mu_1 = 1 / alpha_seq,1 within
    # the kernel's bars + 3.5 of the oracle's standard errors (its ratio bias removed by the 1/k
    # law, 2 x halves - quarters of the same draws)
    from aim_sym.numerics import smi_branch_qmc
    from test_smi_branch_qmc import plain_branch_mc

    (r1,) = smi_branch_qmc.sequential_thresholds_qmc(layers=2, tokens=3, skip=2.0,
                                                     log2_outer=11, log2_inner=13, replicates=8)
    q = r1["q2"]
    assert r1["layer"] == 1 and r1["first"] and r1["error"] < 0.05 * r1["value"]
    m2, m4 = (plain_branch_mc(q, layers=2, tokens=3, skip=2.0, samples=4000, inner=2048,
                              seed=11, blocks=b) for b in (2, 4))
    mc = 2 * m2 - m4
    se = lambda x: x.std(ddof=1) / math.sqrt(len(x))  # noqa: E731
    res = mc[:, 0] - (1 - q) / q * mc[:, 1]
    slope = abs(r1["slope_r"]) / (1 - q)                 # d r_1 / d q
    assert abs(res.mean()) <= 3.5 * se(res) + slope * r1["q2_error"]
    mu, mu_bar = 1 / r1["value"], r1["error"] / r1["value"] ** 2
    assert abs(mc[:, 0].mean() - mu) <= 3.5 * se(mc[:, 0]) + mu_bar
    assert se(mc[:, 0]) < 0.05 * mu
