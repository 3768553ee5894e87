"""Sparsemax attention at T = 3, finite rho (THEORY 1.1, 1.5; docs/sparsemax.md, "State evolution
at finite rho (T = 3)"): the SE fixed points, e_gen and phi of numerics/sparsemax_t3_se against
the softmax limit (THEORY 1.2-1.3 closed forms at beta -> 0), plain Monte Carlo without common
random numbers or control variates, the T = 2 closed-form route, and another seed."""

import math

import numpy as np
import pytest
from aim_sym.numerics import sparsemax_t3 as t3
from aim_sym.numerics import sparsemax_t3_se as se
from aim_sym.numerics.records import InputError

TINY = 1e-3
#: THEORY 1.3: softmax, rho = 0.5, T = 3 (alpha, mmse)
SOFTMAX_T3 = ((1.324458823529412e-2, 0.831594784439699), (5.156784313725489e-3, 0.942911511551250))


def test_support_masks_are_the_sparsemax_supports():
    h = np.sqrt(t3.WEIGHTS) * np.random.default_rng(4).standard_normal((20000, 6))
    for beta in (0.2, 1.0, 7.0):
        ref = t3.patterns_of(t3.sparsemax_rows(h, beta=beta))
        assert np.array_equal(se.support_masks(h, beta=beta), ref)
        if beta == 1.0:
            assert len(np.unique(ref[:, 0])) == 7      # every support of a row is met


def test_posterior_draws_have_the_output_of_h():
    rng = np.random.default_rng(8)
    q, V, beta = 0.8, 0.7, 1.0
    om = np.sqrt(q * t3.WEIGHTS) * rng.standard_normal((400, 6))
    h = om + np.sqrt(V * t3.WEIGHTS) * rng.standard_normal((400, 6))
    hp = se._posterior_crn(h, om, beta=beta, V=V, key=(1, 2, 3))
    assert np.allclose(t3.sparsemax_rows(hp, beta=beta), t3.sparsemax_rows(h, beta=beta),
                       atol=1e-12)
    assert np.max(np.abs(hp - h)) > 0.5            # a draw, not h itself
    # the same key gives the same draws (common random numbers)
    assert np.array_equal(hp, se._posterior_crn(h, om, beta=beta, V=V, key=(1, 2, 3)))


def test_free_diagonal_means_are_the_truncated_means():
    # row 0's diagonal given everything else and row 0's support, by seeded rejection
    rng = np.random.default_rng(12)
    V, beta = 0.7, 1.0
    om = np.array([0.3, -0.2, 0.4, 0.1, -0.5, 0.2])
    seen = set()
    for _ in range(200):
        h = om + np.sqrt(V * t3.WEIGHTS) * rng.standard_normal(6)
        mk = int(se.support_masks(h[None], beta=beta)[0, 0])
        if mk in seen:
            continue
        seen.add(mk)
        rb = se._free_diagonal_means(h[None], om[None], se.support_masks(h[None], beta=beta),
                                     beta=beta, V=V)[0]
        assert np.array_equal(rb[[1, 2, 4]], h[[1, 2, 4]])     # off-diagonals kept
        if mk & 1 and mk != 1:
            assert rb[0] == h[0]                   # fixed by u and the observed delta
            continue
        x = np.repeat(h[None], 200000, axis=0)
        x[:, 0] = om[0] + np.sqrt(2 * V) * rng.standard_normal(200000)
        keep = x[se.support_masks(x, beta=beta)[:, 0] == mk, 0]
        assert abs(keep.mean() - rb[0]) < 4 * keep.std() / np.sqrt(keep.size)
    assert {1, 2, 4, 6} <= seen


def test_e_is_five_over_v_in_the_softmax_limit():
    # every row keeps its full support: y fixes h up to the common shift, E = 5 / V exactly
    e = se.e_crn(q=0.8, V=0.7, beta=TINY, n=1024)
    assert abs(e.value - 5 / 0.7) < 1e-12 and e.error < 1e-12


def test_e_against_plain_monte_carlo():
    # independent route: t3.monte_carlo_e (its own sampler, no common random numbers, no
    # control variate, the shift direction not projected out), another seed
    q, V, beta = 1.0, 0.5, 1.0
    e = se.e_crn(q=q, V=V, beta=beta, n=16384, seed=3)
    mc = t3.monte_carlo_e(q=q, V=V, beta=beta, n=20000, seed=17, draws=1)
    assert abs(e.value - mc.value) <= e.error + 3 * mc.error
    assert e.extra["standard_error"] < mc.error    # the reductions pay


def test_e_is_smooth_in_v_with_common_random_numbers():
    a = se.e_crn(q=0.8, V=0.7, beta=1.0, n=4096)
    b = se.e_crn(q=0.8 - 1e-4, V=0.7 + 1e-4, beta=1.0, n=4096)
    c = se.e_crn(q=0.8, V=0.7, beta=1.0, n=4096, seed=7)
    assert abs(a.value - b.value) < 0.05 * a.error      # nearly the same draws
    assert abs(a.value - c.value) > abs(a.value - b.value)


@pytest.mark.parametrize("alpha,mmse", SOFTMAX_T3)
def test_fixed_points_reach_theory_softmax_points(alpha, mmse):
    fps = se.se_fixed_points_t3(alpha=alpha, rho=0.5, beta=TINY, n=512, bracket_n=512,
                                xtol=1e-13, egen_n=2000, psi_n=128)
    assert len(fps) == 1
    f = fps[0]
    assert f["stable"] and f["bayes_optimal"] and f["d_alpha_d_mmse"] < 0
    assert abs(f["mmse"] - mmse) < 1e-11 and f["error"] < 1e-11
    # softmax: q_hat = 10 alpha / V
    assert f["q_hat"] == pytest.approx(10 * alpha / mmse, rel=1e-10)
    # e_gen = plug-in = 8 beta^2 V without clipping (3 rows, 8/3 each)
    exact = 8 * TINY ** 2 * mmse
    assert abs(f["e_gen"] - exact) <= f["e_gen_error"]
    assert abs(f["e_gen_plugin"] - exact) <= f["e_gen_plugin_error"]
    assert f["e_gen_error"] < 0.05 * exact


def test_perfect_recovery_alpha_limits():
    # softmax: (2 rho - rho^2) / (T^2 + T - 2) (THEORY 1.2)
    a = se.perfect_recovery_alpha_t3(rho=0.5, beta=TINY, n=2000)
    assert abs(a.value - 0.075) < 1e-12 + a.error and a.error < 1e-3
    # a larger beta saturates more rows: fewer statistics, a larger alpha_PR
    b = se.perfect_recovery_alpha_t3(rho=0.5, beta=1.0, n=20000)
    assert b.value - b.error > a.value + a.error
    # r lies between hardmax's 0 (no statistic) and softmax's 5
    assert 0 < b.extra["r"] < 5


def test_small_v_approaches_the_parameter_count():
    # V E(Q0 - V, V) -> r like sqrt(V) (saturated rows): quartering V halves V E - r
    pr = se.perfect_recovery_alpha_t3(rho=0.5, beta=1.0, n=100000)
    r = pr.extra["r"]
    ev = [se.e_crn(q=1.5 - v, V=v, beta=1.0, n=32768) for v in (0.02, 0.005)]
    gap = [e.value * v - r for e, v in zip(ev, (0.02, 0.005))]
    assert gap[0] > gap[1] > 0
    assert abs(gap[0] - 2 * gap[1]) <= ev[0].error * 0.02 + 2 * ev[1].error * 0.005 + 3 * pr.extra[
        "r_error"]


def test_psi_out_softmax_closed_form():
    # all rows full: Z_out = N(C h; C omega, V C W C^T) with 5 statistics, so
    # E log Z = -5/2 log(2 pi) - 1/2 log det(V C W C^T) - 5/2 at every q
    V = 0.6
    C = t3.statistic_matrix((7, 7, 7))
    exact = (-2.5 * math.log(2 * math.pi) - 0.5 * np.linalg.slogdet(V * (C * t3.WEIGHTS) @ C.T)[1]
             - 2.5)
    for q in (0.0, 0.9):
        p = se.psi_out_t3(q=q, V=V, beta=TINY, n=2000, seed=5)
        assert abs(p.value - exact) <= p.error
        assert p.error < 0.2


def test_egen_softmax_limit_and_t2_normalisation():
    # T = 3: 8 beta^2 V; T = 2: 3 beta^2 V (the T = 2 code's closed form, docs/sparsemax.md)
    for tokens, k in ((3, 8.0), (2, 3.0)):
        e = se.generalisation_error_t3(q=0.9, V=0.4, beta=TINY, n=4000, tokens=tokens)
        exact = k * TINY ** 2 * 0.4
        assert abs(e.value - exact) <= e.error and e.error < 0.05 * exact
        assert abs(e.extra["plugin"] - exact) <= e.extra["plugin_error"]
    # q = 0: omega = 0 and y(omega) is uniform; e_gen < plug-in at q > 0 (Bayes is better)
    e = se.generalisation_error_t3(q=1.0, V=0.5, beta=1.0, n=4000)
    assert e.value + e.error < e.extra["plugin"] - e.extra["plugin_error"]


def test_egen_at_perfect_recovery_is_zero():
    d = se.egen_at_fixed_point_t3(mmse=0.0, error=0.0, rho=0.5, beta=1.0)
    assert d == {"e_gen": 0.0, "e_gen_error": 0.0, "e_gen_plugin": 0.0,
                 "e_gen_plugin_error": 0.0}


def test_se_curve_reuses_the_curve_and_reports_progress():
    seen = []
    rows = se.se_curve_t3(alphas=[5.156784313725489e-3, 1.324458823529412e-2], rho=0.5,
                          beta=TINY, n=512, bracket_n=512, egen_n=500, psi_n=64,
                          progress=seen.append)
    assert [r["alpha"] for r in rows] == [5.156784313725489e-3, 1.324458823529412e-2]
    assert rows[0]["fixed_points"][0]["mmse"] > rows[1]["fixed_points"][0]["mmse"]
    assert any("fixed point" in s for s in seen) and all(isinstance(s, str) for s in seen)


@pytest.mark.parametrize("call", [
    lambda: se.se_fixed_points_t3(alpha=0.0, rho=0.5, beta=1.0),
    lambda: se.se_fixed_points_t3(alpha=0.03, rho=-1.0, beta=1.0),
    lambda: se.se_fixed_points_t3(alpha=0.03, rho=0.5, beta=0.0),
    lambda: se.se_fixed_points_t3(alpha=0.03, rho=0.5, beta=1.0, grid=(0.5, 0.2)),
    lambda: se.se_fixed_points_t3(alpha=0.03, rho=0.5, beta=1.0, n=1000, bracket_n=2000),
    lambda: se.se_fixed_points_t3(alpha=0.03, rho=0.5, beta=1.0, xtol=0.5),
    lambda: se.e_crn(q=0.5, V=-1.0, beta=1.0),
    lambda: se.e_crn(q=0.5, V=0.5, beta=1.0, n=10),
    lambda: se.generalisation_error_t3(q=0.5, V=0.5, beta=1.0, tokens=4),
    lambda: se.generalisation_error_t3(q=0.5, V=0.5, beta=1.0, draws=1),
    lambda: se.psi_out_t3(q=-0.1, V=0.5, beta=1.0),
    lambda: se.perfect_recovery_alpha_t3(rho=0.0, beta=1.0),
    lambda: se.se_curve_t3(alphas=[], rho=0.5, beta=1.0),
])
def test_bad_input(call):
    with pytest.raises(InputError):
        call()


# ----------------------------------------------------------------------------- slow
@pytest.mark.slow
def test_egen_against_the_t2_closed_form_route():
    from aim_sym.numerics import sparsemax as t2

    from aim_sym.sparsemax import compile_sparsemax

    cs = compile_sparsemax("numpy")
    for q, V, beta in ((1.0, 0.5, 1.0), (0.5, 0.3, 3.0), (1.2, 0.3, 0.4)):
        ref = t2.generalisation_error(cs, q=q, V=V, beta=beta)
        e = se.generalisation_error_t3(q=q, V=V, beta=beta, tokens=2, n=20000, seed=11)
        assert abs(e.value - ref.value) <= e.error + ref.error
        assert abs(e.extra["plugin"] - ref.extra["plugin"]) <= (e.extra["plugin_error"]
                                                                 + ref.extra["plugin_error"])


@pytest.mark.slow
def test_fixed_point_bar_covers_another_seed_and_plain_monte_carlo():
    # rho = 0.5, beta = 1, alpha = 0.03 (docs/sparsemax.md): two seeds agree within the sum of
    # their bars; at the root, plain Monte Carlo's E gives back alpha within its error
    kw = {"alpha": 0.03, "rho": 0.5, "beta": 1.0, "n": 32768, "bracket_n": 4096,
          "egen_n": 4000, "psi_n": 256}
    a = se.se_fixed_points_t3(seed=1, **kw)
    b = se.se_fixed_points_t3(seed=2, **kw)
    assert len(a) == len(b) == 1
    assert abs(a[0]["mmse"] - b[0]["mmse"]) <= a[0]["error"] + b[0]["error"]
    assert abs(a[0]["e_gen"] - b[0]["e_gen"]) <= a[0]["e_gen_error"] + b[0]["e_gen_error"]
    V = a[0]["mmse"]
    mc = t3.monte_carlo_e(q=1.5 - V, V=V, beta=1.0, n=40000, seed=23, draws=1)
    assert abs(mc.value - a[0]["E"]) <= 3 * mc.error + a[0]["E_error"]


@pytest.mark.slow
def test_psi_out_is_stationary_along_the_error():
    # THEORY 1.1: dPsi_out/dq = E/2 along V = Q0 - q. Paired draws of log Z at q +- h (the same
    # omega and h normals) against the mean of E/2 over the step (Simpson, E by e_crn)
    Q0, beta, V, step = 1.5, 1.0, 0.714, 0.1
    z = np.random.default_rng([31, 4]).standard_normal((2048, 12))
    lz = []
    for v in (V + step, V - step):
        om = np.sqrt((Q0 - v) * t3.WEIGHTS) * z[:, :6]
        h = om + np.sqrt(v * t3.WEIGHTS) * z[:, 6:]
        lz.append(t3.z_out(t3.sparsemax_rows(h, beta=beta), omega=om, V=v, beta=beta,
                           rule=se.PSI_RULE).log_z)
    d = (lz[1] - lz[0]) / (2 * step)
    es = [se.e_crn(q=Q0 - v, V=v, beta=beta, n=16384) for v in (V + step, V, V - step)]
    half_e = (es[0].value + 4 * es[1].value + es[2].value) / 12
    bar = (es[0].error + 4 * es[1].error + es[2].error) / 12
    assert abs(d.mean() - half_e) <= 3 * d.std(ddof=1) / math.sqrt(d.size) + bar
