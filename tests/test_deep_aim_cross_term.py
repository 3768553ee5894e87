"""The neglected cross-overlap q'_12 of the two-layer AIM SE (shared tokens) in e_gen and Phi:
the e_gen law at a cross-overlap against nested Monte Carlo on the matrices, stationarity of Psi_out
in q'_12 (the gradient behind delta Phi = q_hat_12 q'_12 / 4), and the first-order e_gen shift
against a direct difference (docs/deep_aim.md section 4, "Shared tokens"; THEORY 1.1, 1.5, 1.6)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from aim_sym.numerics import deep_aim_se as ds
from aim_sym.numerics.records import InputError

MODEL = ds.DeepAimSE(skip=1.0, rho1=0.5, rho2=0.5)


def test_e_gen_at_a_cross_overlap_against_matrices():
    """e_gen(q'_12 = 0.4) - e_gen(-0.4) by RQMC (whitened statistics) against paired nested Monte
    Carlo on the matrices (entrywise correlated fluctuations and deviations, ten seeds, common
    random numbers within a seed); q12 = 0 is the SE's law exactly; out-of-range q12 refused."""
    q1, q2 = 0.9, 1.1
    base = ds.generalisation_error(MODEL, q1=q1, q2=q2, m=12)
    zero = ds.generalisation_error(MODEL, q1=q1, q2=q2, m=12, q12=0.0)
    assert zero["e_gen"].value == base["e_gen"].value
    normals = ds._sobol_normals(12, 8, 0, d=12)
    d_rqmc = ds._egen_sums(MODEL, q1, q2, normals, q12=0.4) - ds._egen_sums(
        MODEL, q1, q2, normals, q12=-0.4)
    diffs = []
    for seed in range(10):
        up, dn = (ds.generalisation_error_mc(MODEL, q1=q1, q2=q2, outer=3000, inner=32,
                                             seed=seed, q12=x) for x in (0.4, -0.4))
        diffs.append([up[k].value - dn[k].value for k in ("e_gen", "e_gen_plugin")])
    diffs = np.array(diffs)
    for j in range(2):
        mc, mc_se = diffs[:, j].mean(), diffs[:, j].std(ddof=1) / math.sqrt(len(diffs))
        rq, rq_se = d_rqmc[:, j].mean(), d_rqmc[:, j].std(ddof=1) / math.sqrt(len(d_rqmc))
        assert abs(mc - rq) < 4 * math.hypot(mc_se, rq_se), (j, mc, mc_se, rq, rq_se)
        assert mc < -5 * mc_se          # the cross-overlap lowers e_gen (teeth)
    for bad in (0.5, float("nan")):     # (q1 - rho1)(q2 - rho2) = 0.24 < 0.25
        with pytest.raises(InputError):
            ds.generalisation_error(MODEL, q1=q1, q2=q2, q12=bad)


def test_psi_out_is_stationary_in_the_cross_overlap():
    """d Psi_out / d q'_12 = E[g_1 . g_2] (q_hat_12 = 2 alpha E[g_1 . g_2] is stationarity of Phi
    in q'_12 with the 2 x 2 term -q'_12 q_hat_12 / 2): central difference of the RQMC Psi_out at
    the exact output side with a cross-overlap (one point set) against the cross term at q'_12 = 0.
    A relation dPsi/dq'_12 = 2 E[g_1 . g_2] would be 3.8 standard errors off and fail; half of it
    only 1.6 (the check guards the factor upwards)."""
    q1, q2, d = 1.0, 1.2, 0.05
    normals = ds._sobol_normals(9, 8, 1)
    e12 = ds._matrix_sums(MODEL, q1, q2, 0.0, 0.35, normals)[:, 2]
    dpsi = (ds._matrix_sums(MODEL, q1, q2, d, 0.35, normals)[:, 3]
            - ds._matrix_sums(MODEL, q1, q2, -d, 0.35, normals)[:, 3]) / (2 * d)
    se = dpsi.std(ddof=1) / math.sqrt(dpsi.size)
    assert abs(dpsi.mean() - e12.mean()) < 2.5 * se + 3 * e12.std(ddof=1) / math.sqrt(e12.size)
    assert dpsi.mean() > 2 * se and e12.mean() > 10 * e12.std(ddof=1) / math.sqrt(e12.size)


def test_output_effect_is_first_order_and_phi_is_second_order():
    """cross_overlap_output_effect on a constructed point (delta mmse, q12 and loop gain given):
    the linear e_gen shift against a direct difference e_gen(q - s delta mmse, s q12) - e_gen(q, 0)
    on the same points (s = 1/(1 - gain)); delta Phi = q_hat_12 q12 s / 4 exactly."""
    layers = [{"q": 0.6765, "mmse": 0.8235}, {"q": 0.9439, "mmse": 0.5561}]
    co = {"delta_mmse": [-0.01, -0.02], "delta_mmse_error": [0.001, 0.002], "loop_gain": 0.2,
          "q12": 0.05, "q12_error": 0.002}
    fp = {"alpha": 0.1, "layers": layers, "perfect_recovery": False, "q_hat_12": 0.008,
          "q_hat_12_error": 2.4e-4, "cross_overlap": co}
    o = ds.cross_overlap_output_effect(MODEL, fp=fp)
    s = 1 / (1 - 0.2)
    shifted = ds.generalisation_error(MODEL, q1=0.6765 + 0.01 * s, q2=0.9439 + 0.02 * s,
                                      q12=0.05 * s)
    base = ds.generalisation_error(MODEL, q1=0.6765, q2=0.9439)
    for k in ("e_gen", "e_gen_plugin"):
        direct = shifted[k].value - base[k].value
        assert abs(o[f"delta_{k}"] - direct) < o[f"delta_{k}_error"], (k, o, direct)
        assert direct < -3 * o[f"delta_{k}_error"]
        assert o[f"{k}_term"] == pytest.approx(abs(o[f"delta_{k}"]) + o[f"delta_{k}_error"])
    assert o["delta_phi"] == pytest.approx(0.008 * 0.05 * s / 4, rel=1e-12)
    with pytest.raises(InputError):
        ds.cross_overlap_output_effect(MODEL, fp={**fp, "cross_overlap": None})


def test_cross_overlap_term_near_the_uninformed_point():
    """Near q = rho (small alpha) the q'_12 step shrinks with sqrt((q1 - rho1)(q2 - rho2)), so
    the term is computed (and small) instead of leaving the law's range; at q = rho exactly it is
    0 (no cross-overlap fits the shared-token law there)."""
    layers = [{"q": 0.505, "q_error": 1e-4, "mmse": 0.995, "mmse_error": 1e-4, "q_hat": 0.01},
              {"q": 0.51, "q_error": 1e-4, "mmse": 0.99, "mmse_error": 1e-4, "q_hat": 0.02}]
    fp = {"alpha": 0.005, "layers": layers, "perfect_recovery": False, "q_hat_12": 1e-4,
          "q_hat_12_error": 2e-5, "jacobian": [[0.01, 0.0], [0.0, 0.02]], "e_gen_error": 6e-4,
          "e_gen_plugin_error": 6e-4, "phi_error": 5e-4}
    out = ds.add_cross_overlap_term(MODEL, fp, m=6, scrambles=4)
    co = out["cross_overlap"]
    assert ds._cross_step(MODEL, fp) == pytest.approx(0.2 * math.sqrt(0.005 * 0.01))
    assert all(0 < t < 1e-5 for t in co["term"]) and 0 < co["e_gen_term"] < 1e-4
    at_rho = [{**x, "q": 0.5} for x in layers]
    out = ds.add_cross_overlap_term(MODEL, {**fp, "layers": at_rho}, m=6, scrambles=4)
    assert out["cross_overlap"]["term"] == [0.0, 0.0] and out["e_gen_error"] == 6e-4
