"""Sparsemax attention at T = 2 (THEORY 1.4): the small-width threshold against its two limits
(softmax as beta -> 0, hardmax as beta -> infinity), two quadrature routes and seeded Monte Carlo,
normalisation of the y-measure, Nishimori at q != 0, and g_out against finite differences of
log Z_out at 40 digits."""

import math

import mpmath
import numpy as np
import pytest
from aim_sym.numerics import sparsemax as sm
from aim_sym.numerics.records import InputError

from aim_sym.sparsemax import compile_sparsemax, derive, pieces


@pytest.fixture(scope="module")
def cs():
    return compile_sparsemax("numpy")


@pytest.fixture(scope="module")
def cm():
    return compile_sparsemax("mpmath")


def hardmax_T2() -> float:
    A = math.asin(1.0 / 3.0)
    return 3 * (math.pi**2 - 4 * A**2) / (8 * (3 * math.pi - 2 * A))


def test_nine_pieces_and_saturated_pieces_are_orthant_probabilities():
    ps = pieces()
    assert len(ps) == 9
    assert sorted(len(p.interior) for p in ps) == [0] * 4 + [1] * 4 + [2]
    assert sum(str(d.z).startswith("Phi2") for d in derive()) == 4


@pytest.mark.parametrize("omega,V,beta", [((0.3, -0.2, 0.5), 0.7, 1.5),
                                          ((1.2, 0.4, -0.9), 0.3, 4.0),
                                          ((0.1, 0.0, 0.2), 1.3, 0.4)])
def test_normalisation_and_nishimori_pointwise(cs, omega, V, beta):
    """sum over pieces (and the interior integrals, y-measure) of Z = 1 and of
    Z (g g^T + dg/domega) = 0, at omega != 0 (THEORY 1.2)."""
    o = sm.output_moments(cs, omega=omega, V=V, beta=beta)
    assert abs(o["mass"] - 1) < 1e-13
    assert np.abs(o["ggT"]).max() > 0.3          # the identity is not trivially 0 = 0
    assert np.abs(o["ggT"] + o["dg"]).max() < 1e-12
    # every piece carries mass here: the check reaches all nine
    assert min(v["mass"] for v in o["pieces"].values()) > 1e-4


def test_g_out_is_the_derivative_of_log_z_at_40_digits(cm):
    with mpmath.workdps(40):
        for p in cm.pieces:
            x = (mpmath.mpf("0.13") if 0 in p.interior else 0,
                 mpmath.mpf("-0.21") if 1 in p.interior else 0)
            args = [x[0], x[1], *(mpmath.mpf(s) for s in ("0.3", "-0.2", "0.5", "0.7", "1.5"))]
            g, dg = p.g(*args), p.dg(*args)
            for k in range(3):
                def log_z(t, k=k, p=p, args=args):
                    a = list(args)
                    a[2 + k] = t
                    return p.log_z(*a)

                assert abs(mpmath.diff(log_z, args[2 + k]) - g[k]) < mpmath.mpf(10) ** -32
                for j in range(3):
                    def g_k(t, k=k, j=j, p=p, args=args):
                        a = list(args)
                        a[2 + j] = t
                        return p.g(*a)[k]

                    assert abs(mpmath.diff(g_k, args[2 + j]) - dg[k][j]) < mpmath.mpf(10) ** -32


@pytest.mark.parametrize("beta", [0.3, 1.0, 10.0])
def test_threshold_two_precisions_and_double_rules_agree(cs, cm, beta):
    mp = sm.weak_threshold_mp(cm, beta=beta, dps=20)
    d = sm.weak_threshold(cs, beta=beta)
    assert mp.error < 1e-18
    assert abs(float(mp.value) - d.value) <= d.error + mp.error
    assert d.error < 1e-14
    assert abs(float(mp.extra["mass"]) - 1) < 1e-19
    # between the two limits, strictly
    assert 0.25 < d.value < hardmax_T2()


@pytest.mark.parametrize("beta", [1e-6, 1e8])
def test_threshold_at_extreme_beta(cs, cm, beta):
    """The ends of the accepted range: both routes agree within their bars and sit at the
    limits (softmax 1/4 within 1e-30 at beta = 1e-6; hardmax within 1e-8 / beta at 1e8)."""
    mp = sm.weak_threshold_mp(cm, beta=beta, dps=20)
    d = sm.weak_threshold(cs, beta=beta)
    assert abs(float(mp.value) - d.value) <= d.error + mp.error
    a = mpmath.mpf(mp.value)
    if beta < 1:
        assert 0 <= a - mpmath.mpf(1) / 4 < 1e-30
    else:
        assert 0 < hardmax_T2() - float(a) < 2e-9 + d.error


@pytest.mark.parametrize("beta", [0.5, 2.0])
def test_threshold_against_seeded_monte_carlo(cs, beta):
    s = sm.small_width_s(cs, beta=beta)
    mc = sm.monte_carlo_s(cs, beta=beta, n=400_000, seed=7)
    assert abs(mc.value - s.value) < 4 * mc.error
    assert mc.error < 3e-3


def test_small_beta_limit_is_softmax(cm):
    """beta -> 0: both rows interior with probability -> 1, alpha_bar_c -> 1/4 from above,
    alpha_bar_c - 1/4 ~ K beta^3 exp(-1/(6 beta^2)), K = 27 sqrt 3 / (16 sqrt(2 pi))."""
    K = 27 * math.sqrt(3) / (16 * math.sqrt(2 * math.pi))
    prev = None
    for beta in (0.1, 0.12, 0.15):
        a = mpmath.mpf(sm.weak_threshold_mp(cm, beta=beta, dps=20).value)
        ratio = float((a - mpmath.mpf(1) / 4) / (beta**3 * mpmath.exp(-1 / (6 * beta**2))))
        assert 0.6 * K < ratio < K
        if prev is not None:
            assert ratio < prev            # approaching K from below as beta decreases
        prev = ratio


def test_large_beta_limit_is_hardmax(cm):
    """beta -> infinity: alpha_bar_c -> hardmax's closed form like c / beta, c = 0.19254..."""
    h = hardmax_T2()
    c = [beta * (h - float(sm.weak_threshold_mp(cm, beta=beta, dps=20).value))
         for beta in (1e3, 1e4, 1e5)]
    assert all(0.19 < x < 0.193 for x in c)
    assert abs(c[2] - c[1]) < abs(c[1] - c[0]) / 5


def test_bad_input_is_refused(cs, cm):
    with pytest.raises(InputError, match="beta"):
        sm.weak_threshold(cs, beta=0.0)
    with pytest.raises(InputError, match="beta"):
        sm.weak_threshold_mp(cm, beta=float("nan"))
    with pytest.raises(InputError, match="V"):
        sm.output_moments(cs, omega=(0, 0, 0), V=-1.0, beta=1.0)


@pytest.mark.parametrize("m0,m1,V,beta", [(0.3, -0.5, 0.7, 1.5), (1.0, 2.0, 0.2, 0.5),
                                          (-0.4, 0.1, 0.05, 3.0)])
def test_vectorised_s_matches_the_generic_two_dimensional_route(cs, m0, m1, V, beta):
    """S(m) of the SE (mid-mid piece by the conditional reduction, one window per node) against
    output_moments (the mid-mid piece by a 2D product rule on the lambdified g_out)."""
    S, mass = sm.s_of_m(cs, m0=[m0, 0.0], m1=[m1, 0.0], V=V, beta=beta)
    o = sm.output_moments(cs, omega=(m0, 0.0, m1), V=V, beta=beta)
    assert abs(S[0] - o["S"]) < 1e-13 * o["S"]
    assert np.all(np.abs(mass - 1) < 1e-13)


def test_se_small_beta_is_softmax_closed_form(cs):
    """beta -> 0 at finite rho: E(q, V) = 2 / V, so alpha(V) = V / (4 Delta(V)) (THEORY 1.2,
    q_hat = (T^2 + T - 2) alpha / V at T = 2), through the whole traced SE."""
    rows = sm.se_curve_traced(cs, rho=0.5, beta=1e-3, mmses=[0.3], level=0)
    for r in rows:
        # the error bar covers the true error, and is small
        assert abs(r["E"] - 2 / r["mmse"]) <= r["E_error"] < 1e-7 * r["E"]
        assert abs(r["alpha"] - r["mmse"] * r["q_hat"] / 4) <= r["alpha_error"] < 1e-7 * r["alpha"]
    # at beta = 1 the same V needs more samples (information lost to saturation)
    r1 = sm.se_curve_traced(cs, rho=0.5, beta=1.0, mmses=[0.3], level=-1)[0]
    assert r1["alpha"] > rows[0]["alpha"] * 1.1


def test_output_side_at_finite_q_against_seeded_monte_carlo(cs):
    """E(q, V) of the SE (trapezoid over m, windows over d) against Monte Carlo over omega and h."""
    mc = sm.monte_carlo_e(cs, q=1.0, V=0.5, beta=1.0, n=400_000, seed=5)
    e = sm.output_e_estimate(cs, q=1.0, V=0.5, beta=1.0, level=-1)
    assert e.error < 0.1 * mc.error          # the comparison resolves the Monte Carlo error
    assert abs(mc.value - e.value) < 4 * mc.error + e.error
    assert mc.error < 2e-3 * e.value


def test_prior_inversion_reproduces_the_softmax_reference_point():
    """THEORY 1.3: softmax, rho = 0.5, T = 2 has mmse 0.941191595679965 at alpha =
    1.324458823529412e-2; the traced SE's alpha(V) = V / (4 Delta(V)) gives it back."""
    v = 0.941191595679965
    alpha = v / (4 * sm.delta_of_mmse(v, rho=0.5))
    assert abs(alpha - 1.324458823529412e-2) < 1e-13
    with pytest.raises(InputError, match="mmse"):
        sm.delta_of_mmse(1.5, rho=0.5)


@pytest.mark.slow
def test_fixed_point_at_given_alpha_inverts_the_traced_curve(cs):
    """se_fixed_points (Brent on alpha(V) - alpha) returns the V that the traced curve mapped to
    this alpha; it is stable (alpha(V) decreasing) and unique here (~45 s)."""
    V = 0.45
    a = sm.alpha_of_mmse(cs, rho=0.5, beta=2.0, V=V)
    fps = sm.se_fixed_points(cs, alpha=a.value, rho=0.5, beta=2.0)
    assert len(fps) == 1 and fps[0]["stable"]
    assert abs(fps[0]["mmse"] - V) <= fps[0]["error"] + 1e-12
    assert fps[0]["error"] < 1e-6


def test_threshold_api_bar_covers_the_many_digit_value():
    """The public wrapper (aim_sym.thresholds): the double-precision value's bar, which adds the
    rounding of the printed digits, covers the 30-digit mpmath value."""
    from aim_sym.thresholds import sparsemax_small_width_weak

    lo = sparsemax_small_width_weak(beta=2.0)
    hi = sparsemax_small_width_weak(beta=2.0, digits=30)
    assert abs(float(lo.value) - float(hi.value)) <= lo.error
    assert hi.error < 1e-28
    assert 0.25 < float(hi.value) < 0.4034106290375993    # between its two limits


def test_cli_sparsemax_threshold_and_refusals(run_cli):
    import json

    rc, out, err = run_cli(["threshold", "weak", "--channel", "sparsemax", "--small-width",
                            "--beta", "10", "--json"])
    assert rc == 0, err
    assert abs(float(json.loads(out)["value"]) - 0.3854545302146669405) < 1e-14
    for args, opt in ((["--tokens", "4"], "--tokens"), (["--beta", "0"], "--beta"),
                      (["--certified"], "--certified"), (["--tokens", "3", "--digits", "9"],
                                                         "--digits")):
        rc, _, err = run_cli(["threshold", "weak", "--channel", "sparsemax", "--small-width",
                              *args])
        assert rc == 2 and opt in err and len(err.strip().splitlines()) == 1
    rc, _, err = run_cli(["curve", "--channel", "sparsemax", "--alphas", "0:1:3"])
    assert rc == 2 and "--alphas" in err and len(err.strip().splitlines()) == 1


def test_perfect_recovery_counting_and_the_limits(cs):
    """alpha_PR (parameter counting) tends to softmax's (2 rho - rho^2)/4 as beta -> 0 and grows
    without bound towards hardmax (no perfect recovery); the traced alpha(V) approaches it from
    below as V -> 0 (E V -> r from above, the saturated rows adding O(sqrt V))."""
    from scipy.special import erf

    rho = 0.5
    assert abs(sm.perfect_recovery_alpha(rho=rho, beta=1e-9) - (2 * rho - rho**2) / 4) < 1e-12
    assert sm.perfect_recovery_alpha(rho=3.0, beta=1e-9) == pytest.approx(0.25, abs=1e-12)
    assert sm.perfect_recovery_alpha(rho=rho, beta=1e3) > 100
    a_pr = sm.perfect_recovery_alpha(rho=rho, beta=1.0)
    r = 2 * erf(1 / math.sqrt(6 * (1 + rho)))
    ev = []
    for V in (0.02, 0.01):
        row = sm.se_curve_traced(cs, rho=rho, beta=1.0, mmses=[V], level=0)[0]
        assert row["alpha"] + row["alpha_error"] < a_pr
        ev.append(row["E"] * V)
    assert ev[0] > ev[1] > r
    # E V - r falls like sqrt(V): the ratio of the excesses is sqrt(2) within 10%
    assert (ev[0] - r) / (ev[1] - r) == pytest.approx(math.sqrt(2), rel=0.1)


@pytest.mark.slow  # ~15-27 s: kept out of the default run (10-minute budget)
def test_se_beyond_the_traced_grid_reports_perfect_recovery_or_a_bracket(run_cli):
    """`se --channel sparsemax` at rho = 0.5: alpha >= alpha_PR = 0.517 gives mmse = 0, and
    alpha(0.01) < alpha < alpha_PR a fixed point bracketed in (0, 0.01) (was: exit 3)."""
    import json

    rc, out, err = run_cli(["se", "--channel", "sparsemax", "--alpha", "0.6", "--json"])
    assert rc == 0, err
    (fp,) = json.loads(out)["fixed_points"]
    assert fp["mmse"] == 0.0 and "perfect recovery" in fp["method"]
    rc, out, err = run_cli(["se", "--channel", "sparsemax", "--alpha", "0.46", "--json"])
    assert rc == 0, err
    (fp,) = json.loads(out)["fixed_points"]
    assert fp["mmse"] - fp["error"] >= 0 and fp["mmse"] + fp["error"] <= 0.01


def _egen_monte_carlo(cs, q, V, beta, n=400_000, seed=1):
    """Seeded Monte Carlo of e_gen and the plug-in (THEORY 1.5) from the channel's definition:
    m ~ N(0, 3 q), d | m ~ N(m, 3 V), y = clip((1 + beta d) / 2, 0, 1), predictor E[y | m] from
    the compiled row moments; returns (e_gen, se, plug-in, se)."""
    rng = np.random.default_rng(seed)
    m = rng.normal(0, math.sqrt(3 * q), n)
    d = m + rng.normal(0, math.sqrt(3 * V), n)
    y = np.clip((1 + beta * d) / 2, 0, 1)
    y_hat = np.asarray(cs.row_moments(m, V, beta)[1]) * np.ones(n)
    r, p = 4 * (y - y_hat) ** 2, 4 * (y - np.clip((1 + beta * m) / 2, 0, 1)) ** 2
    return r.mean(), r.std() / math.sqrt(n), p.mean(), p.std() / math.sqrt(n)


@pytest.mark.parametrize("q,V,beta", [(0.7, 0.8, 1.0), (1.4, 0.1, 2.0), (1.0, 0.5, 100.0)])
def test_egen_against_seeded_monte_carlo(cs, q, V, beta):
    """beta = 100: the plug-in's integrand has a feature of width 1/beta in m, which a rule in m
    scaled by sqrt(V) stepped over (0.7510, with a refinement bar of order 1e-10, against
    0.7785 +- 0.0025 by Monte Carlo)."""
    e = sm.generalisation_error(cs, q=q, V=V, beta=beta)
    mc, se, mcp, sep = _egen_monte_carlo(cs, q, V, beta)
    assert abs(e.value - mc) < 4 * se + e.error
    assert abs(e.extra["plugin"] - mcp) < 4 * sep + e.extra["plugin_error"]
    assert e.error < 1e-12 and e.value < e.extra["plugin"]


def test_egen_closed_forms_and_limits(cs):
    """Small beta (no clipping within 1000 sd): y is linear, e_gen = 4 (beta/2)^2 3 V exactly;
    q = 0: e_gen = plug-in = the prior predictive variance 4 Var[y], d ~ N(0, 3 Q0) (by mpmath
    quadrature); V -> 0: e_gen -> 0."""
    e = sm.generalisation_error(cs, q=0.3, V=1.2, beta=1e-3)
    assert abs(e.value - 3e-6 * 1.2) < 1e-15 + e.error
    Q0, beta = 1.5, 1.5
    e0 = sm.generalisation_error(cs, q=0.0, V=Q0, beta=beta)
    sd = mpmath.sqrt(3 * Q0)

    def moment(k):
        return mpmath.quad(lambda x: min(max((1 + beta * x) / 2, 0), 1) ** k
                           * mpmath.npdf(x, 0, sd), [-mpmath.inf, -1 / beta, 1 / beta, mpmath.inf])

    prior = 4 * (moment(2) - moment(1) ** 2)
    assert abs(e0.value - float(prior)) < 1e-14 + e0.error
    assert e0.value == e0.extra["plugin"]
    tiny = sm.generalisation_error(cs, q=Q0 - 1e-6, V=1e-6, beta=beta)
    assert tiny.value < 1e-3 and tiny.error < 1e-12


def test_cli_sparsemax_derive_and_refusals(run_cli):
    rc, out, err = run_cli(["derive", "--channel", "sparsemax", "--tokens", "3"])
    assert rc == 0 and "343 pieces in 70 classes" in out
    for args, opt in ((["curve", "--tokens", "4", "--alphas", "0.1:1:2"], "--tokens"),
                      (["se", "--tokens", "4", "--alpha", "0.1"], "--tokens"),
                      (["check", "--rho", "0.2"], "--rho"),
                      (["derive", "--tokens", "5"], "--tokens"),
                      (["se", "--alpha", "0.3", "--beta", "-1"], "--beta")):
        rc, _, err = run_cli([args[0], "--channel", "sparsemax", *args[1:]])
        assert rc == 2 and opt in err and len(err.strip().splitlines()) == 1


@pytest.mark.slow
def test_cli_sparsemax_se_curve_check(run_cli, tmp_path):
    """About a minute on an idle machine (each alpha scans the traced SE)."""
    import csv
    import json

    rc, out, err = run_cli(["se", "--channel", "sparsemax", "--alpha", "0.3", "--json"])
    assert rc == 0, err
    o = json.loads(out)
    assert 0 < o["e_gen"] < o["e_gen_plugin"] and o["e_gen_error"] < 1e-5
    path = tmp_path / "c.csv"
    rc, out, err = run_cli(["curve", "--channel", "sparsemax", "--alphas", "0.1:0.3:2",
                            "--beta", "2", "--out", str(path)])
    assert rc == 0, err
    rows = list(csv.DictReader(path.open()))
    assert len(rows) == 2 and float(rows[1]["mmse"]) < float(rows[0]["mmse"])
    assert float(rows[1]["e_gen"]) < float(rows[0]["e_gen"])
    rc, out, err = run_cli(["check", "--channel", "sparsemax", "--beta", "3", "--json"])
    assert rc == 0, err
    assert json.loads(out)["passed"] and len(json.loads(out)["checks"]) == 8
    rc, out, err = run_cli(["check", "--channel", "sparsemax", "--tokens", "3", "--json"])
    assert rc == 0, err
    assert json.loads(out)["passed"] and len(json.loads(out)["checks"]) == 3


@pytest.mark.parametrize("q,beta", [(0.7, 1.0), pytest.param(1.2, 2.0, marks=pytest.mark.slow)])
def test_free_entropy_is_stationary(cs, q, beta):
    """dPhi/dq = 0 at q_hat = 2 alpha E (THEORY 1.1) means dPsi_out/dq = E / 2 along
    V = Q0 - q: Psi_out (sum_y Z log Z, its own integrand) against E (the squared scores), by a
    central difference of step 2e-4 (truncation ~1e-8 relative at these points)."""
    Q0, h = 1.5, 2e-4

    def est(x):
        return sm.output_e_estimate(cs, q=x, V=Q0 - x, beta=beta, level=0)

    e = est(q)
    slope = (est(q + h).extra["psi_out"] - est(q - h).extra["psi_out"]) / (2 * h)
    assert abs(slope - e.value / 2) < 1e-6 * e.value
    assert e.extra["psi_out_error"] < 1e-8     # level 0 of the rule: its bar here is 4e-10


@pytest.mark.slow
def test_se_fixed_point_carries_phi_and_the_flag(cs):
    (fp,) = sm.se_fixed_points(cs, alpha=0.3, rho=0.5, beta=1.0)
    assert fp["bayes_optimal"] and fp["stable"]
    # phi at the fixed point is the stationary value: the traced row at that mmse agrees
    row = sm.se_curve_traced(cs, rho=0.5, beta=1.0, mmses=[fp["mmse"]])[0]
    assert abs(row["phi"] - fp["phi"]) < 1e-6


@pytest.mark.slow
def test_cli_sparsemax_threshold_three_tokens(run_cli):
    """T = 3 through the command line (randomised QMC, ~20 s): between softmax's 1/10 and
    hardmax's value, and within the bars of the docs' table at beta = 100 (8 x 2^15 points there,
    8 x 2^12 here)."""
    import json

    rc, out, err = run_cli(["threshold", "weak", "--channel", "sparsemax", "--small-width",
                            "--tokens", "3", "--beta", "100", "--json"])
    assert rc == 0, err
    o = json.loads(out)
    assert 0.1 < float(o["value"]) < o["hardmax"]
    assert abs(float(o["value"]) - 0.1743646) < o["error"] + 1.4e-5


def test_api_object_validates_and_serves():
    """aim_sym.Sparsemax: bad input raises a one-line error naming the option; T = 2 threshold
    and sheet through the object equal the module functions."""
    import aim_sym as am
    from aim_sym.thresholds import sparsemax_small_width_weak

    with pytest.raises(am.DomainError, match="beta"):
        am.Sparsemax(beta=-1.0)
    with pytest.raises(am.DomainError, match="rho"):
        am.Sparsemax(rho=0.0)
    with pytest.raises(InputError, match="tokens"):
        am.Sparsemax(tokens=4)
    m = am.Sparsemax(beta=2.0)
    assert m.threshold().value == sparsemax_small_width_weak(beta=2.0).value
    assert "343 pieces" in am.Sparsemax(tokens=3).derive()
    with pytest.raises(am.DomainError, match="alpha"):
        am.Sparsemax(tokens=3).state_evolution(alpha=-0.3)
    with pytest.raises(InputError, match="kind"):
        m.threshold("perfect")


@pytest.mark.slow
def test_api_state_evolution_and_curve_agree():
    import aim_sym as am

    m = am.Sparsemax(beta=2.0, rho=0.5)
    r = m.state_evolution(alpha=0.3)
    assert r.details["fixed_points"][0]["bayes_optimal"]
    row = m.curve(alphas=[0.3]).rows()[0]
    assert row["mmse"] == r.value and row["e_gen"] == r.details["e_gen"]
    assert r.to_frame() is not None


@pytest.mark.slow
def test_cli_sparsemax_three_tokens_se_and_curve(run_cli, tmp_path):
    """se and curve --tokens 3 (about 1 minute): the command's fixed point is the numeric
    module's (numerics/sparsemax_t3_se.py), the curve's row at the same alpha agrees within the
    bars, and every row carries e_gen with its bar below the plug-in error."""
    import csv
    import json

    from aim_sym.numerics import sparsemax_t3_se as s3

    rc, out, err = run_cli(["se", "--channel", "sparsemax", "--tokens", "3", "--alpha", "0.03",
                            "--json"])
    assert rc == 0, err
    o = json.loads(out)
    ref = s3.se_fixed_points_t3(alpha=0.03, rho=0.5, beta=1.0)
    assert o["mmse"] == next(f for f in ref if f["bayes_optimal"])["mmse"]
    assert o["e_gen"] < o["e_gen_plugin"]
    path = tmp_path / "c.csv"
    rc, out, err = run_cli(["curve", "--channel", "sparsemax", "--tokens", "3", "--alphas",
                            "0.01:0.03:2", "--out", str(path)])
    assert rc == 0, err
    rows = list(csv.DictReader(path.open()))
    assert [float(r["alpha"]) for r in rows] == [0.01, 0.03]
    last = rows[-1]
    assert abs(float(last["mmse"]) - o["mmse"]) <= float(last["mmse_error"]) + o["error"]
    assert float(rows[0]["mmse"]) > float(rows[1]["mmse"])
