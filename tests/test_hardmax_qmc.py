"""Hardmax state evolution at T = 3, 4, 5 by randomised QMC (THEORY 1.1, 1.4, 1.5): the winner
kernel against the off-diagonal recursion; E_hat against the deterministic T = 3 rule and the
q = 0 recursion (T = 4, 5), against seeded Monte Carlo; the SE fixed points against the T = 3
tabulated curve and against a direct evaluation at the root; e_gen by QMC against closed forms."""

import math

import numpy as np
import pytest
from aim_sym.numerics import egen, hardmax
from aim_sym.numerics import hardmax_qmc as hq
from aim_sym.numerics import hardmax_se as hs
from aim_sym.numerics.records import ConvergenceError, InputError


@pytest.mark.parametrize("r", [0.5, pytest.param(1.0, marks=pytest.mark.slow)])
def test_t3_qmc_against_deterministic_rule(r):
    ref = hs.output_e(T=3, q=r, V=1.0)
    e = hq.output_e_qmc(T=3, q=r, V=1.0, points=64, scrambles=8)
    assert abs(e.value - ref.value) <= e.error + ref.error
    assert e.error < 0.03 * ref.value  # a bar the check could fail
    assert abs(e.extra["psi_out"] - ref.extra["psi_out"]) <= (e.extra["psi_out_error"]
                                                              + ref.extra["psi_out_error"])
    # E(q, V) = E_hat(q / V) / V
    e2 = hq.output_e_qmc(T=3, q=2 * r, V=2.0, points=64, scrambles=8)
    assert abs(e2.value - e.value / 2) < 1e-12


def test_t4_q0_is_the_small_width_sum():
    S = hardmax.weak_threshold(4).extra["S"]
    e = hq.output_e_qmc(T=4, q=0.0, V=1.0, points=16, scrambles=4)
    assert abs(e.value - S) <= e.error
    assert e.error < 1e-5


def test_t4_qmc_against_monte_carlo():
    q, V = 0.3, 0.6
    e = hq.output_e_qmc(T=4, q=q, V=V, points=16, scrambles=8)
    mc = hs.monte_carlo_e(T=4, q=q, V=V, samples=1500, seed=11)
    assert abs(e.value - mc.value) <= e.error + 3.5 * mc.error
    assert e.error < 0.05 * e.value
    assert abs(e.extra["mass"] - 1) <= 4 * e.extra["mass_error"] + 1e-9


def test_t3_fixed_point_against_tabulated_curve():
    """The QMC fixed-point machinery at T = 3 (cheap) against the shipped T = 3 table."""
    row = hq.se_curve(T=3, rho=0.5, alphas=[0.05], r_max=2.5, points=128, with_egen=True)[0]
    ref = hs.se_curve_tabulated(rho=0.5, alphas=[0.05], table=hs.t3_table())[0]
    assert abs(row["mmse"] - ref["mmse"]) <= row["error"] + ref["error"]
    assert row["error"] < 0.02
    assert row["stable"] and row["bayes_optimal"]
    assert abs(row["psi_out"] - ref["psi_out"]) <= row["psi_out_error"] + ref["psi_out_error"]
    # e_gen at the root against e_gen at the table's root (its mmse bar propagated)
    v, dv = ref["mmse"], ref["error"]
    g = hs.generalisation_error(T=3, q=1.5 - v, V=v)
    g_end = hs.generalisation_error(T=3, q=1.5 - v - dv, V=v + dv)
    assert abs(row["e_gen"] - g.value) <= row["e_gen_error"] + g.error + abs(g_end.value - g.value)
    assert row["e_gen_error"] < 0.01
    # an alpha beyond the curves' range fails
    with pytest.raises(ConvergenceError):
        hq.se_curve(T=3, rho=0.5, alphas=[0.5], r_max=2.5, points=16, scrambles=4, nodes=5)


def test_t4_fixed_point_solves_the_se_equation():
    """The root of the interpolated curve against E at the root by fresh scrambles."""
    curves = hq.e_hat_curves(T=4, r_min=0.5, r_max=1.5, nodes=5, points=16, scrambles=4)
    row = hq.se_curve_qmc(rho=0.5, alphas=[0.01], curves=curves, grid_points=30)[0]
    V = row["mmse"]
    e = hq.output_e_qmc(T=4, q=1.5 - V, V=V, points=16, scrambles=4, seed=99)
    alpha = 1 / (2 * hs.delta_of_mmse(V, rho=0.5) * e.value)
    assert abs(alpha - 0.01) <= 0.01 * (e.error / e.value + row["E_hat_error"] / row["E_hat"])
    assert 0.5 < V < 1 and row["error"] > 0 and math.isfinite(row["phi"])


def test_bad_input():
    with pytest.raises(InputError):
        hq.output_e_qmc(T=6, q=1.0, V=1.0)
    with pytest.raises(InputError):
        hq.output_e_qmc(T=4, q=1.0, V=1.0, points=100)
    with pytest.raises(InputError):
        hq.output_e_qmc(T=4, q=-1.0, V=1.0)
    with pytest.raises(InputError):
        hq.e_hat_curves(T=4, r_max=1.0, nodes=6)
    with pytest.raises(InputError):
        hq.se_curve(rho=6.0, alphas=[0.01])
    with pytest.raises(InputError):
        hq.output_e_qmc(T=4, q=1.0, V=1.0, outcomes="some")


@pytest.mark.slow
def test_t4_fixed_point_against_monte_carlo():
    """alpha = 0.02, rho = 0.5: the fixed point's E_hat against seeded Monte Carlo there."""
    curves = hq.e_hat_curves(T=4, r_min=0.5, r_max=1.5, nodes=7, points=128, scrambles=8)
    row = hq.se_curve_qmc(rho=0.5, alphas=[0.02], curves=curves)[0]
    V = row["mmse"]
    mc = hs.monte_carlo_e(T=4, q=1.5 - V, V=V, samples=20000, seed=5)
    assert abs(mc.value * V - row["E_hat"]) <= row["E_hat_error"] + 3.5 * mc.error * V
    assert row["error"] < 0.01


@pytest.mark.parametrize("T", [3, 4, 5])
def test_winner_kernel_against_the_off_diagonal_recursion(T):
    """Z_y and the centred moments of the row-winner recursion equal the generic 2^(T(T-1)/2)
    subset recursion (T = 5: 1024 subsets, a handful of outcomes)."""
    rng = np.random.default_rng(3)
    om = 0.7 * rng.standard_normal((2, T * (T + 1) // 2))
    ys = [y for y, _ in hardmax.outcome_orbits(T)]
    ys = ys if T < 5 else ys[::9] + [tuple(range(5)), (1, 0, 0, 0, 0), (1, 0, 3, 2, 2)]
    ref = hq.moments(T, ys, om, nodes=120, kernel="recursion")
    new = hq.moments(T, ys, om, nodes=120)
    assert np.max(np.abs(new - ref)) < 1e-9
    assert np.max(np.abs(ref[:, :, 0])) > 0.01


def test_t5_winner_kernel_identities():
    """T = 5, every one of the 3125 outcomes: sum_y Z = 1 and sum_y E[(h - omega) 1_y] = 0."""
    rng = np.random.default_rng(4)
    om = rng.standard_normal((1, 15))
    mom = hq.moments(5, hs.all_outcomes(5), om, nodes=160)
    assert abs(mom[:, 0, 0].sum() - 1) < 1e-10
    assert np.max(np.abs(mom[:, 0, 1:].sum(axis=0))) < 1e-9
    p = hq.orbit_probabilities(5)
    assert len(p) == 47 and abs(p.sum() - 1) < 1e-10


def test_t5_q0_is_the_small_width_sum():
    """The fast T = 5 check: E(0, 1) = S(5) of the off-diagonal ordered-cone recursion at
    q = 0 (hardmax.py), within the bar (at q = 0 only the sweep's error remains)."""
    S = hardmax.small_width_sum(5, nodes=96)["S"]  # 3e-10 from weak_threshold(5)'s S
    e = hq.output_e_qmc(T=5, q=0.0, V=1.0, points=16, scrambles=4, estimator="orbits")
    assert abs(e.value - S) <= e.error
    assert e.error < 5e-4
    # the default estimator (y drawn per point) carries its sampling bar
    d = hq.output_e_qmc(T=5, q=0.0, V=1.0, points=256, scrambles=4)
    assert abs(d.value - S) <= d.error
    assert d.error < 0.05 * S


def test_drawn_terms_are_equivariant():
    """|g_y(omega)|_W^2 and log Z_y(omega) at a drawn y equal those of its orbit representative
    at the permuted omega (T = 4, 5; same sweep nodes)."""
    rng = np.random.default_rng(0)
    for T in (4, 5):
        n = T * (T + 1) // 2
        W = hs.weights(T)
        om = rng.standard_normal((12, n))
        xi = rng.standard_normal((12, n)) * np.sqrt(W)
        e, psi = hq.drawn_terms(T, om, xi, nodes=120)
        H = np.zeros((12, T, T))
        for k, (a, b) in enumerate(hardmax.pairs(T)):
            H[:, a, b] = H[:, b, a] = om[:, k] + xi[:, k]
        for i, y in enumerate(np.argmax(H, axis=2)):
            m = hq.moments(T, [tuple(int(c) for c in y)], om[i:i + 1], nodes=120)[0, 0]
            assert abs((m[1:] ** 2 / W).sum() / m[0] ** 2 - e[i]) < 1e-10 * e[i]
            assert abs(math.log(m[0]) - psi[i]) < 1e-10


@pytest.mark.slow
def test_t5_qmc_against_other_estimators():
    """E at T = 5, r = 1 by QMC with y drawn (default), against the orbit sum at each omega (a
    different estimator) and seeded plain Monte Carlo on the off-diagonal recursion (a different
    kernel and generator)."""
    q, V = 0.6, 0.6
    e = hq.output_e_qmc(T=5, q=q, V=V, points=1024, scrambles=8)
    orb = hq.output_e_qmc(T=5, q=q, V=V, points=32, scrambles=8, estimator="orbits")
    mc = hq.monte_carlo_e(T=5, q=q, V=V, samples=150, seed=11, kernel="recursion")
    assert abs(e.value - orb.value) <= e.error + orb.error
    assert abs(e.value - mc.value) <= e.error + 4 * mc.error
    assert e.error < 0.01 * e.value


def test_egen_qmc_against_closed_forms():
    g = hq.generalisation_error_qmc(T=5, q=0.0, V=1.0, points=64, scrambles=4)
    assert abs(g.value - egen.hardmax_q0(5)) <= g.error
    ref = hs.generalisation_error(T=3, q=0.5, V=1.0)
    g3 = hq.generalisation_error_qmc(T=3, q=0.5, V=1.0, points=256, scrambles=8)
    assert abs(g3.value - ref.value) <= g3.error + ref.error
    assert g3.error < 2e-3


@pytest.mark.slow
def test_t5_fixed_point_solves_the_se_equation():
    """T = 5 at low points: the root of the interpolated curve against E at the root by fresh
    scrambles, and e_gen there."""
    curves = hq.e_hat_curves(T=5, r_min=0.5, r_max=1.0, nodes=5, points=256, scrambles=4)
    row = hq.se_curve_qmc(rho=0.5, alphas=[0.005], curves=curves, grid_points=30,
                          with_egen=True)[0]
    V = row["mmse"]
    e = hq.output_e_qmc(T=5, q=1.5 - V, V=V, points=256, scrambles=4, seed=99)
    alpha = 1 / (2 * hs.delta_of_mmse(V, rho=0.5) * e.value)
    assert abs(alpha - 0.005) <= 0.005 * (e.error / e.value + row["E_hat_error"] / row["E_hat"])
    assert 0.5 < V < 1 and row["error"] > 0 and row["stable"] and row["bayes_optimal"]
    g = hq.generalisation_error_qmc(T=5, q=1.5 - V, V=V, points=256, scrambles=4)
    assert abs(row["e_gen"] - g.value) <= row["e_gen_error"] + g.error


def test_cli_hardmax_qmc_refusals(run_cli):
    """`se --channel hardmax`: T = 6, rho beyond the curves and (T = 5) an alpha whose fixed
    point lies beyond q/V = 5 are refused with one line naming the allowed range, exit 2."""
    for args, opt in ((["--tokens", "6"], "--tokens"), (["--tokens", "5", "--rho", "6"], "--rho"),
                      (["--tokens", "5", "--rho", "0.5", "--alpha", "0.5"], "--alpha")):
        argv = ["se", "--channel", "hardmax", "--alpha", "0.03", *args]
        rc, _, err = run_cli(argv)
        assert rc == 2 and opt in err and len(err.strip().splitlines()) == 1, (args, err)
    assert "q/V = 5" in err and "in (0, 0.08" in err
    rc, _, err = run_cli(["curve", "--channel", "hardmax", "--tokens", "6", "--alphas",
                          "0.01:0.02:2"])
    assert rc == 2 and "--tokens" in err


@pytest.mark.slow
def test_cli_hardmax_t5_se(run_cli):
    """`se --channel hardmax --tokens 5`: one Bayes-optimal fixed point with mmse, phi, e_gen
    and their bars; E_hat at the root against seeded plain Monte Carlo (~3 minutes)."""
    import json

    rc, out, err = run_cli(["se", "--channel", "hardmax", "--tokens", "5", "--rho", "0.5",
                            "--alpha", "0.03", "--json"])
    assert rc == 0, err
    o = json.loads(out)
    best = [f for f in o["fixed_points"] if f["bayes_optimal"]]
    assert len(best) == 1 and best[0]["stable"]
    f = best[0]
    assert 0 < f["error"] < 0.01 and 0 < f["e_gen_error"] < 0.02
    assert o["mmse"] == f["mmse"]  # the headline is the flagged fixed point
    # the root solves the SE: mmse = mmse_Wishart(1 / q_hat), q_hat = 2 alpha E_hat(r) / V, with
    # r = q / V, q = Q0 - V; the E_hat bar propagated through the prior's mmse
    from aim_sym.numerics import wishart

    V, alpha = f["mmse"], 0.03
    assert f["r"] == pytest.approx((1.5 - V) / V, rel=1e-9)

    def prior(e_hat):
        return float(wishart.mmse(V / (2 * alpha * e_hat), rho=0.5))

    slope = abs(prior(f["E_hat"] + f["E_hat_error"]) - prior(f["E_hat"]))
    assert abs(prior(f["E_hat"]) - V) <= f["error"] + slope
    mc = hq.monte_carlo_e(T=5, q=f["r"], V=1.0, samples=4000, seed=7)
    assert abs(mc.value - f["E_hat"]) <= f["E_hat_error"] + 4 * mc.error
    g = hq.generalisation_error_qmc(T=5, q=1.5 - f["mmse"], V=f["mmse"], seed=5)
    assert abs(g.value - f["e_gen"]) <= f["e_gen_error"] + g.error


@pytest.mark.slow
def test_t5_identity_checks_pass():
    """`check --channel hardmax --tokens 5` (hq.run_checks): every identity holds at T = 5 by the
    winner kernel."""
    rows = hq.run_checks(T=5)
    assert [r["name"] for r in rows] == [
        "normalisation", "nishimori (first)", "g_out . d = d log Z_out / d omega along d",
        "nishimori (second, along d)", "omega = 0, V = 1 against the q = 0 recursion"]
    assert all(r["passed"] for r in rows), rows


@pytest.mark.slow
def test_t5_identity_checks_can_fail():
    """A wrong g (scaled by 1 + 1e-4) fails the T = 5 derivative row."""
    orig = hq._z_out_t

    def scaled(T, omega, V, nodes):
        Z, G = orig(T, omega, V, nodes)
        return Z, G * (1 + 1e-4)

    hq._z_out_t = scaled
    try:
        bad = {r["name"]: r["passed"] for r in hq.run_checks(T=5)}
    finally:
        hq._z_out_t = orig
    assert not bad["g_out . d = d log Z_out / d omega along d"]
    assert not bad["nishimori (first)"] or not bad["nishimori (second, along d)"]


def test_cli_check_hardmax_tokens_range(run_cli):
    """`check --channel hardmax --tokens 6` is refused in one line naming 2..5."""
    rc, _, err = run_cli(["check", "--channel", "hardmax", "--tokens", "6"])
    assert rc == 2 and "2..5" in err and len(err.strip().splitlines()) == 1, err
