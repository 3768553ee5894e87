"""The neglected cross-overlap q'_12 of the two-layer AIM SE (shared tokens) in e_gen and Phi:
the e_gen law at a cross-overlap against nested Monte Carlo on the matrices, stationarity of Psi_out
in q'_12 (the gradient behind delta Phi = q_hat_12 q'_12 / 4), and the first-order e_gen shift
against a direct difference (docs/deep_aim.md section 4, "Shared tokens"; THEORY 1.1, 1.5, 1.6)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from aim_sym.numerics import deep_aim_noisy as dn
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
    assert ds.cross_step(MODEL, fp) == pytest.approx(0.2 * math.sqrt(0.005 * 0.01))
    assert all(0 < t < 1e-5 for t in co["term"]) and 0 < co["e_gen_term"] < 1e-4
    at_rho = [{**x, "q": 0.5} for x in layers]
    out = ds.add_cross_overlap_term(MODEL, {**fp, "layers": at_rho}, m=6, scrambles=4)
    assert out["cross_overlap"]["term"] == [0.0, 0.0] and out["e_gen_error"] == 6e-4


# ---------------------------------------------------------------- with output noise (deep_aim_noisy)

NOISY = {"q1": 1.0, "q2": 1.2, "V1": 0.5, "V2": 0.3, "Delta": 0.03, "skip": 1.0, "beta": 1.0,
         "m": 8, "scrambles": 8, "seed": 1, "sizes": (2**9, 2**11), "cross": 0.5}


def _bar(arr, i):
    """Mean over scrambles of column i on the finest size, and its bar (COVERAGE standard
    errors + the inner-size difference), as the engine reports it."""
    f, c = arr[-1, :, i], arr[0, :, i]
    return f.mean(), dn.COVERAGE * f.std(ddof=1) / math.sqrt(f.size) + abs(f.mean() - c.mean())


def test_noisy_output_side_at_a_cross_overlap():
    """The noisy output side at a cross-overlap q'_12 (rho = (0.5, 0.5), Delta = 0.03): at
    q12 = 0 it is the SE's (E_1, E_2, E[g_1 . g_2], Psi_out of _output_sums on the same points,
    to rounding); at q12 = +-0.1 the variance, mean-square and Nishimori forms of G = E[g g^T]
    agree within their bars (the inner posterior uses the deviations' correlation -q12 of the
    outer law), and G_12 moves with q12 by many paired standard errors (dG_12/dq'_12 ~ 0.8)."""
    zero = dn._cross_sums(**NOISY, q12=0.0)
    se_kw = {k: v for k, v in NOISY.items() if k not in ("V1", "V2")}
    ref = dn._output_sums(**{**se_kw, "V1": NOISY["V1"], "V2": NOISY["V2"]})
    np.testing.assert_allclose(zero[..., :4], ref[..., [0, 1, 7, 6]], rtol=1e-10, atol=1e-12)
    shifted = {}
    for q12 in (0.1, -0.1):
        s = shifted[q12] = dn._cross_sums(**NOISY, q12=q12)
        for var, ms, ni in ((0, 4, 7), (1, 5, 8), (2, 6, 9)):
            (v, ve), (a, ae), (b, be) = _bar(s, var), _bar(s, ms), _bar(s, ni)
            assert abs(v - a) < ve + ae and abs(v - b) < ve + be, (q12, var, v, ve, a, ae, b, be)
    d = shifted[0.1][-1, :, 2] - shifted[-0.1][-1, :, 2]
    assert d.mean() > 10 * d.std(ddof=1) / math.sqrt(d.size), d
    with pytest.raises(InputError):      # |q12| >= sqrt(V1 V2): no positive deviation law
        dn._cross_sums(**NOISY, q12=0.4)


def test_noisy_cross_overlap_term_in_the_bars():
    """fixed_point_noisy with shared tokens adds the cross-overlap term to the mmse, q, e_gen and
    Phi bars (positive, finite, exactly the reported terms, loop gain in (0, 0.8)); with
    independent tokens the term is 0 (q_hat_12 = 0 by symmetry) and the bars are untouched."""
    pts = {"m": 6, "scrambles": 4, "sizes": (2**9, 2**11)}
    kw = {"alpha": 0.3, "rho": (0.5, 0.5), "Delta": 0.1, "skip": 1.0}
    base = dn.fixed_point_noisy(**kw, **pts, cross_term=False)
    assert "cross_overlap" not in base
    out = dn.add_cross_overlap_term_noisy(base, rho=(0.5, 0.5), design="shared", seed=0, **pts)
    co = out["cross_overlap"]
    assert 0 < co["loop_gain"] < 0.8 and co["trusted"]
    assert co["q12"] == pytest.approx(base["q_hat_12"] * base["layers"][0]["mmse"]
                                      * base["layers"][1]["mmse"])
    for x, y, t in zip(base["layers"], out["layers"], co["term"]):
        assert 0 < t < 0.1 * x["mmse"] and math.isfinite(t)
        assert y["mmse_error"] == pytest.approx(x["mmse_error"] + t, rel=1e-12)
        assert y["q_error"] == pytest.approx(x["q_error"] + t, rel=1e-12)
        assert y["mmse"] == x["mmse"]
    for key in ("e_gen_error", "e_gen_clean_error"):
        assert out[key] == pytest.approx(base[key] + co["e_gen_term"], rel=1e-12)
    assert co["e_gen_term"] > 0 and out["phi_error"] > base["phi_error"]
    ind = dn.fixed_point_noisy(**kw, **pts, design="independent")
    ind0 = dn.fixed_point_noisy(**kw, **pts, design="independent", cross_term=False)
    assert ind["cross_overlap"]["term"] == [0.0, 0.0]
    assert [x["mmse_error"] for x in ind["layers"]] == [x["mmse_error"] for x in ind0["layers"]]
    assert ind["e_gen_error"] == ind0["e_gen_error"] and ind["phi_error"] == ind0["phi_error"]


@pytest.mark.slow
def test_noisy_q_hat_12_against_plain_monte_carlo():
    """q_hat_12 = 2 alpha E[g_1 . g_2] of the noisy engine (RQMC, variance form) at one (q, V)
    with shared tokens (rho = (2, 2): a strong common part; Delta = 0.3) against seeded plain
    Monte Carlo (iid truths with the common token part drawn explicitly, two halves of iid prior
    draws inside), within 3 combined bars. The Monte Carlo is many standard errors from 0, and
    the tolerance is below its value: an engine without the cross term (0) fails."""
    alpha = 0.3
    kw = {"q1": 2.3, "q2": 2.6, "V1": 0.7, "V2": 0.4, "Delta": 0.3, "skip": 1.0, "rho": (2.0, 2.0)}
    e = dn.output_e_noisy(**kw, m=11, sizes=(2**9, 2**11))["cross"]
    mc = dn.output_e_noisy_mc(**kw, samples=16_000, inner=2000, batches=16, seed=21)["E12"]
    q_hat_12, ref = (2 * alpha * e.value, 2 * alpha * e.error), (2 * alpha * mc.value,
                                                                2 * alpha * mc.error)
    tol = 3 * math.hypot(q_hat_12[1], ref[1])
    assert abs(q_hat_12[0] - ref[0]) < tol, (e, mc)
    assert mc.value > 6 * mc.error and tol < ref[0], (e, mc)
