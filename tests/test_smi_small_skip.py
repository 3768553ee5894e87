"""Deep attention at small skip c (THEORY 2.2, 2.3; issue 14): det A(z_1) >= c (1 + c) -> 0 where
the softmax rows coincide, a feature of width sqrt(2 c / beta) in z_1 and c in h.  The weak
thresholds must be right at every accepted c, and every quantity whose rules do not resolve
the feature must refuse c below its validated floor."""

import json
import sys

import pytest
import smi_mc_oracles
from aim_sym.numerics import smi, smi_route_a, smi_sequential, smi_weak
from aim_sym.numerics.records import InputError
from click.testing import CliRunner

from aim_sym.cli import cli, main

# At Q = 0 with M = 2 tokens, E tr C = M for C = Cov[z_l | y] and tr C^2 <= E[|z_l|^4 | y]
# (Jensen), so lambda_l = E ||C - I||_F^2 <= E |z_l|^4 - M = M (M + 1) = 6: alpha_l >= 1/6.
LAMBDA_BOUND = 6.0


@pytest.mark.parametrize("c", [1e-4, 1e-2, 0.1, 1.0, 10.0])
def test_weak_bound_and_mass_two_layers(c):
    F = smi.stability_matrix(skip=c)
    assert abs(F["mass"].value - 1.0) < 1e-9
    for k in ("lam1", "lam2"):
        assert 0 < F[k].value + F[k].error <= LAMBDA_BOUND
        assert F[k].error < 1e-7 * F[k].value
    assert F["cross"].value == 0.0


def test_weak_thresholds_keep_their_values_at_c_1():
    F = smi.stability_matrix(skip=1.0)
    a2, e2 = 1 / F["lam2"].value, F["lam2"].error / F["lam2"].value ** 2
    a1, e1 = 1 / F["lam1"].value, F["lam1"].error / F["lam1"].value ** 2
    # the earlier Gauss-Hermite engine: 0.18547784060 +- 1.9e-10, 6.1569365552 +- 1.5e-8
    assert abs(a2 - 0.18547784060) < 1.9e-10 + e2 and e2 < 1e-10
    assert abs(a1 - 6.1569365552) < 1.5e-8 + e1 and e1 < 1e-8


def test_rotated_rules_agree_with_gauss_hermite_where_it_converges():
    # c = 1: the old tensor Gauss-Hermite rule is converged (mass 1, 1e-9 agreement)
    a = smi_route_a.q0_gauss_hermite(96, 128, c=1.0, beta=1.0)
    b = smi_route_a.q0_rotated((96, 0.125, 96, 0.125), c=1.0, beta=1.0)
    for k in ("lam1", "lam2"):
        assert abs(a[k] - b[k]) < 1e-8 * b[k]


def test_gauss_hermite_rule_misses_the_small_skip_feature():
    # the defect: at c = 0.01 the old rule's mass is off by a factor ~4 and lambda_2 exceeds
    # the bound; the rotated rule has mass 1
    old = smi_route_a.q0_gauss_hermite(72, 96, c=0.01, beta=1.0)
    new = smi_route_a.q0_rotated((80, 0.15, 80, 0.15), c=0.01, beta=1.0)
    assert abs(old["mass"] - 1) > 1.0 and old["lam2"] > LAMBDA_BOUND
    assert abs(new["mass"] - 1) < 1e-9 and new["lam2"] < LAMBDA_BOUND


@pytest.mark.parametrize("c", [0.1, 0.01])
def test_weak_agrees_with_montecarlo_at_small_skip(c):
    F = smi.stability_matrix(skip=c)
    mc = smi_mc_oracles.montecarlo_stability(skip=c, samples=3000, inner=1000, seed=5)
    for k in ("lam1", "lam2"):
        # 4 standard errors plus the O(1/inner) ratio bias of self-normalised sampling (~1%)
        assert abs(mc[k].value - F[k].value) < 4 * mc[k].error + 0.01 * F[k].value + F[k].error


def test_three_layer_bound_at_the_floor():
    F = smi_weak.stability(layers=3, skip=smi_weak.SKIP_RANGE[0], rule="qmc", log2n=12,
                           replicates=8)
    assert abs(F["mass"].value - 1) <= F["mass"].error < 5e-4
    for layer in (1, 2, 3):
        lam = F[f"lam{layer}"]
        assert 0 < lam.value and lam.value + lam.error <= LAMBDA_BOUND
        assert abs(F[f"trace{layer}"].value - 2) <= F[f"trace{layer}"].error   # E tr C_l = M


def test_tail_estimate_distrusts_a_sign_change():
    # 8.7017, 8.6862, 8.6875 (the L = 3 layer-2 threshold of the retired Gauss-Hermite engine at
    # inner orders 16, 20, 24): not a geometric tail; the bar must cover the whole spread
    v, e = smi_weak._tail([8.7017, 8.6862, 8.6875])
    assert e >= abs(8.7017 - 8.6875)


def test_refusals_name_skip_and_the_range():
    cases = [
        (lambda: smi.weak_thresholds(skip=1e-5, sequential=False), "1e-05"),
        (lambda: smi.weak_thresholds(skip=0.1), ">= 0.5"),
        (lambda: smi.fixed_point(alpha=0.5, skip=0.2), ">= 0.5"),
        (lambda: smi.se_curve(alphas=[0.5], skip=0.2), ">= 0.5"),
        (lambda: smi_sequential.sequential_threshold(skip=0.2), ">= 0.5"),
        (lambda: smi_weak.stability(layers=3, skip=0.3), "in [0.5, 4]"),
        (lambda: smi_weak.stability(layers=2, skip=0.05), "in [0.5, 4]"),
        (lambda: smi_mc_oracles.montecarlo_lambdas(layers=3, skip=0.3), "in [0.5, 4]"),
        (lambda: smi_sequential.sequential_thresholds(layers=3, skip=0.5), ">= 1"),
    ]
    for call, allowed in cases:
        with pytest.raises(InputError, match="^skip must be ") as e:
            call()
        assert allowed in str(e.value) and "\n" not in str(e.value)


def test_cli_small_skip_weak_and_refusal(monkeypatch, capsys):
    res = CliRunner().invoke(cli, ["threshold", "weak", "--model", "smi", "--layers", "2",
                                   "--skip", "0.01", "--no-sequential", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output[res.output.index("{"):])
    th = {t["layer"]: t for t in out["thresholds"]}
    assert th[2]["value"] >= 1 / LAMBDA_BOUND and th[1]["value"] >= 1 / LAMBDA_BOUND
    monkeypatch.setattr(sys, "argv", ["aim-sym", "threshold", "weak", "--model", "smi",
                                      "--layers", "2", "--skip", "0.01", "--json"])
    with pytest.raises(SystemExit) as e:
        main()
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1 and "skip must be >= 0.5" in err


@pytest.mark.slow
@pytest.mark.parametrize("c", [1e-4, 1e-3, 0.2])
def test_weak_agrees_with_large_montecarlo(c):
    F = smi.stability_matrix(skip=c)
    mc = smi_mc_oracles.montecarlo_stability(skip=c, samples=20000, inner=2000, seed=9)
    for k in ("lam1", "lam2"):
        assert abs(mc[k].value - F[k].value) < 4 * mc[k].error + 0.005 * F[k].value


# L = 3 at the floor c = 0.5 by the retired Gauss-Hermite engine (numerics/smi_deep.py, inner
# orders 24, 28, 32; benchmarks/RESULTS.md): alpha = 2.39755 +- 0.0020, 7.2175 +- 0.014,
# 0.22959 +- 5.7e-4 (layers 1, 2, 3)
L3_FLOOR_REFERENCE = {1: (2.39755, 0.0020), 2: (7.2175, 0.014), 3: (0.22959, 5.7e-4)}


@pytest.mark.slow
def test_three_layers_at_the_floor_agree_with_montecarlo_and_the_earlier_engine():
    out = smi_weak.weak_thresholds(layers=3, skip=0.5)
    for r in out:
        v, e = L3_FLOOR_REFERENCE[r["layer"]]
        assert abs(r["value"] - v) <= r["error"] + e, (r, v, e)
    mc = smi_mc_oracles.montecarlo_lambdas(layers=3, skip=0.5, samples=1500, inner=4096, seed=2)
    for r in out:
        m, se = mc[f"lam{r['layer']}"]
        assert abs(m - r["lam"]) < 4 * se + r["lam_error"]
