"""Hardmax state evolution at T = 4 by randomised QMC (THEORY 1.1, 1.4): E_hat against the
deterministic T = 3 rule and the q = 0 recursion, against seeded Monte Carlo at T = 4; the SE
fixed points against the T = 3 tabulated curve and against a direct evaluation at the root."""

import math

import pytest
from aim_sym.numerics import hardmax
from aim_sym.numerics import hardmax_se as hs
from aim_sym.numerics import hardmax_t4 as h4
from aim_sym.numerics.records import ConvergenceError, InputError


@pytest.mark.parametrize("r", [0.5, 1.0])
def test_t3_qmc_against_deterministic_rule(r):
    ref = hs.output_e(T=3, q=r, V=1.0)
    e = h4.output_e_qmc(T=3, q=r, V=1.0, points=64, scrambles=8)
    assert abs(e.value - ref.value) <= e.error + ref.error
    assert e.error < 0.03 * ref.value  # a bar the check could fail
    assert abs(e.extra["psi_out"] - ref.extra["psi_out"]) <= (e.extra["psi_out_error"]
                                                              + ref.extra["psi_out_error"])
    # E(q, V) = E_hat(q / V) / V
    e2 = h4.output_e_qmc(T=3, q=2 * r, V=2.0, points=64, scrambles=8)
    assert abs(e2.value - e.value / 2) < 1e-12


def test_t4_q0_is_the_small_width_sum():
    S = hardmax.weak_threshold(4).extra["S"]
    e = h4.output_e_qmc(T=4, q=0.0, V=1.0, points=16, scrambles=4)
    assert abs(e.value - S) <= e.error
    assert e.error < 1e-5


def test_t4_qmc_against_monte_carlo():
    q, V = 0.3, 0.6
    e = h4.output_e_qmc(T=4, q=q, V=V, points=16, scrambles=8)
    mc = hs.monte_carlo_e(T=4, q=q, V=V, samples=1500, seed=11)
    assert abs(e.value - mc.value) <= e.error + 3.5 * mc.error
    assert e.error < 0.05 * e.value
    assert abs(e.extra["mass"] - 1) <= 4 * e.extra["mass_error"] + 1e-9


def test_t3_fixed_point_against_tabulated_curve():
    """The QMC fixed-point machinery at T = 3 (cheap) against the shipped T = 3 table."""
    row = h4.se_curve(T=3, rho=0.5, alphas=[0.05], r_max=2.5, points=128, with_egen=True)[0]
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
        h4.se_curve(T=3, rho=0.5, alphas=[0.5], r_max=2.5, points=16, scrambles=4, nodes=5)


def test_t4_fixed_point_solves_the_se_equation():
    """The root of the interpolated curve against E at the root by fresh scrambles."""
    curves = h4.e_hat_curves(T=4, r_min=0.5, r_max=1.5, nodes=5, points=16, scrambles=4)
    row = h4.se_curve_qmc(rho=0.5, alphas=[0.01], curves=curves, grid_points=30)[0]
    V = row["mmse"]
    e = h4.output_e_qmc(T=4, q=1.5 - V, V=V, points=16, scrambles=4, seed=99)
    alpha = 1 / (2 * hs.delta_of_mmse(V, rho=0.5) * e.value)
    assert abs(alpha - 0.01) <= 0.01 * (e.error / e.value + row["E_hat_error"] / row["E_hat"])
    assert 0.5 < V < 1 and row["error"] > 0 and math.isfinite(row["phi"])


def test_bad_input():
    with pytest.raises(InputError):
        h4.output_e_qmc(T=5, q=1.0, V=1.0)
    with pytest.raises(InputError):
        h4.output_e_qmc(T=4, q=1.0, V=1.0, points=100)
    with pytest.raises(InputError):
        h4.output_e_qmc(T=4, q=-1.0, V=1.0)
    with pytest.raises(InputError):
        h4.e_hat_curves(T=4, r_max=1.0, nodes=6)
    with pytest.raises(InputError):
        h4.se_curve(rho=6.0, alphas=[0.01])
    with pytest.raises(InputError):
        h4.output_e_qmc(T=4, q=1.0, V=1.0, outcomes="some")


@pytest.mark.slow
def test_t4_fixed_point_against_monte_carlo():
    """alpha = 0.02, rho = 0.5: the fixed point's E_hat against seeded Monte Carlo there."""
    curves = h4.e_hat_curves(T=4, r_min=0.5, r_max=1.5, nodes=7, points=128, scrambles=8)
    row = h4.se_curve_qmc(rho=0.5, alphas=[0.02], curves=curves)[0]
    V = row["mmse"]
    mc = hs.monte_carlo_e(T=4, q=1.5 - V, V=V, samples=20000, seed=5)
    assert abs(mc.value * V - row["E_hat"]) <= row["E_hat_error"] + 3.5 * mc.error * V
    assert row["error"] < 0.01
