"""Hardmax at any (omega, V) and its state evolution (THEORY 1.1, 1.4, 1.5): the output side
against finite differences, Nishimori, the q = 0 recursion of hardmax.py and the T = 2 compiled
channel; the omega rule against seeded Monte Carlo; e_gen against the T = 2 closed form."""

import math

import numpy as np
import pytest
from aim_sym.numerics import egen, hardmax, wishart
from aim_sym.numerics import hardmax_se as hs
from aim_sym.numerics.records import ConvergenceError, InputError

RNG = np.random.default_rng(20261125)
OMEGA3 = RNG.standard_normal((4, 6)) * np.sqrt(hs.weights(3)) * 1.2


def test_q0_reproduces_small_width_sum():
    S = hardmax.weak_threshold(3)
    e = hs.output_e(T=3, q=0.0, V=1.0)
    assert abs(e.value - S.extra["S"]) <= e.error + 1e-13
    assert e.error < 1e-7  # the default sweep (3 nodes per unit) is good to ~1e-8
    fine = hs.output_e(T=3, q=0.0, V=1.0, nodes=160)
    assert abs(fine.value - S.extra["S"]) < 1e-12
    # the scale invariance: E(0, V) = S / V
    e2 = hs.output_e(T=3, q=0.0, V=0.25)
    assert abs(e2.value - 4 * S.extra["S"]) <= 4 * e.error + 1e-12


@pytest.mark.parametrize("T", [2, 3, 4])
def test_probabilities_sum_to_one_and_first_nishimori(T):
    n = T * (T + 1) // 2
    om = RNG.standard_normal((2, n)) * np.sqrt(hs.weights(T))
    out = hs.z_out(T=T, omega=om, V=0.6, nodes=140)
    assert np.max(np.abs(out["Z"].sum(axis=0) - 1)) < 1e-12
    coarse = hs.z_out(T=T, omega=om, V=0.6)
    assert np.max(np.abs(coarse["Z"].sum(axis=0) - 1)) < 1e-7
    assert np.all(out["Z"] >= -1e-15)
    # sum_y Z_y g_y = sum_y grad Z_y = 0
    assert np.max(np.abs(np.einsum("yn,ynk->nk", out["Z"], out["g"]))) < 1e-8
    # the shift invariance: sum_ab g_ab = 0 for every y (grad Z is orthogonal to 1)
    zg = out["Z"][..., None] * out["g"]
    assert np.max(np.abs(zg.sum(axis=2))) < 1e-9


def test_t3_kernel_matches_generic_recursion():
    ys = hs.all_outcomes(3)
    a = hs.outcomes_moments(ys, omega=OMEGA3, V=0.8, fast=False)
    b = hs.outcomes_moments(ys, omega=OMEGA3, V=0.8, fast=True)
    assert np.max(np.abs(a - b)) < 1e-14


def test_omega_zero_matches_q0_recursion_moments():
    # hardmax.py's E[h_ab 1_y] at omega = 0, V = 1 (an independent implementation)
    for y, _ in hardmax.outcome_orbits(3)[:4]:
        ref = hardmax.outcome_moments(y, nodes=128)
        got = hs.outcome_moments(y, omega=np.zeros((1, 6)), V=1.0, nodes=96)[0]
        assert np.max(np.abs(got - ref)) < 1e-12


def _log_z(y, om, V):
    return math.log(hs.outcome_moments(y, omega=om[None, :], V=V, nodes=120)[0, 0])


@pytest.mark.parametrize("y", [(0, 1, 2), (1, 1, 1), (0, 0, 1), (2, 0, 2)])
def test_g_out_is_the_gradient_of_log_z(y):
    om, V = OMEGA3[0], 0.7
    mom = hs.outcome_moments(y, omega=om[None, :], V=V, nodes=120)[0]
    g = mom[1:] / mom[0] / (hs.weights(3) * V)
    fd, coarse = np.zeros(6), np.zeros(6)
    for k in range(6):
        e = np.zeros(6)
        e[k] = 1.0

        def d(h, k=k, e=e):
            return (_log_z(y, om + h * e, V) - _log_z(y, om - h * e, V)) / (2 * h)

        fd[k] = (4 * d(5e-4) - d(1e-3)) / 3  # Richardson on two step sizes
        coarse[k] = d(0.3)
    assert np.max(np.abs(fd - g)) < 1e-7
    assert np.max(np.abs(coarse - g)) > 1e-4  # a crude difference is visibly off


def test_second_nishimori_identity():
    """sum_y Z (g g^T + dg/domega) = sum_y grad grad Z_y = 0, traced with W = (1 + delta): the
    Jacobian by central differences of g_out."""
    om, V = OMEGA3[1], 0.9
    W = hs.weights(3)
    base = hs.z_out(T=3, omega=om[None, :], V=V)
    Z, g = base["Z"][:, 0], base["g"][:, 0]
    trace_dg = np.zeros(len(Z))
    h = 1e-4
    for k in range(6):
        e = np.zeros(6)
        e[k] = h
        gp = hs.z_out(T=3, omega=(om + e)[None, :], V=V)["g"][:, 0, k]
        gm = hs.z_out(T=3, omega=(om - e)[None, :], V=V)["g"][:, 0, k]
        trace_dg += W[k] * (gp - gm) / (2 * h)
    gg = (W * g * g).sum(axis=1)
    assert abs(float(Z @ (gg + trace_dg))) < 1e-6
    assert float(Z @ gg) > 0.5  # the identity is not trivially 0 = 0


def test_t2_matches_compiled_channel():
    from aim_sym.numerics import aim_se

    from aim_sym.channels import hardmax as hardmax_channel
    from aim_sym.compiled import compile_channel

    cc = compile_channel(hardmax_channel(2))
    for q, V in ((0.3, 0.9), (1.0, 0.5)):
        e = hs.output_e(T=2, q=q, V=V)
        E, P = aim_se.output_estimate(cc, q=q, V=V, level=1)
        assert abs(e.value - E.value) <= e.error + E.error
        assert abs(e.extra["psi_out"] - P.value) <= e.extra["psi_out_error"] + P.error
        assert e.error < 1e-7


def test_psi_out_stationarity_t2():
    """E = 2 d Psi_out / dq at fixed Q0 (the SE is the free entropy's stationarity, THEORY 1.1)."""
    Q0, q, dq = 1.5, 0.7, 1e-3

    def psi(x):
        return hs.output_e(T=2, q=x, V=Q0 - x).extra["psi_out"]

    slope = (psi(q + dq) - psi(q - dq)) / (2 * dq)
    e = hs.output_e(T=2, q=q, V=Q0 - q)
    assert abs(2 * slope - e.value) < 1e-5 * e.value


def test_egen_t2_closed_form_and_q0():
    for q, V in ((0.3, 0.9), (1.4, 0.1)):
        g = hs.generalisation_error(T=2, q=q, V=V)
        ref, _ = egen.hardmax_t2(q=q, V=V)
        assert abs(g.value - ref) <= g.error + 1e-14
        assert g.error < 1e-10
    g3 = hs.generalisation_error(T=3, q=0.0, V=1.0)
    assert abs(g3.value - egen.hardmax_q0(3)) < 1e-12
    # e_gen decreases from the prior predictive value as q grows
    g3b = hs.generalisation_error(T=3, q=1.0, V=0.5)
    assert g3b.value < g3.value - 0.5


def test_monte_carlo_agrees_small_ratio():
    q, V = 0.3, 1.0
    e = hs.output_e(T=3, q=q, V=V)
    m = hs.monte_carlo_e(T=3, q=q, V=V, samples=20000, seed=7)
    assert abs(e.value - m.value) < 4 * m.error + e.error
    assert e.error < 1e-6


def test_rule_refuses_large_ratio():
    with pytest.raises(ConvergenceError):
        hs.output_e(T=3, q=1.4, V=0.1)


@pytest.mark.parametrize("kw", [dict(T=6, q=0.1, V=1.0), dict(T=3, q=-1.0, V=1.0),
                                dict(T=3, q=0.1, V=0.0), dict(T=3, q=float("nan"), V=1.0)])
def test_bad_input(kw):
    with pytest.raises(InputError):
        hs.output_e(**kw)


def test_bad_omega_shape():
    with pytest.raises(InputError):
        hs.outcome_moments((0, 1, 2), omega=np.zeros((2, 5)))
    with pytest.raises(InputError):
        hs.outcome_moments((0, 3, 2), omega=np.zeros((2, 6)))


def test_traced_point_is_a_fixed_point_t2():
    """A traced row (alpha, V) satisfies V = mmse(1 / (2 alpha E)) with the Wishart prior."""
    rho = 0.5
    row = hs.se_curve_traced(T=2, rho=rho, mmses=[0.6])[0]
    q_hat = 2 * row["alpha"] * row["E"]
    assert abs(float(wishart.mmse(1 / q_hat, rho=rho)) - 0.6) < 1e-9
    assert row["e_gen"] < egen.hardmax_q0(2)


@pytest.mark.slow
def test_monte_carlo_agrees_t3_two_points():
    for q, V in ((0.5, 1.0), (0.75, 0.75)):
        e = hs.output_e(T=3, q=q, V=V)
        m = hs.monte_carlo_e(T=3, q=q, V=V, samples=200000, seed=11)
        assert abs(e.value - m.value) < 4 * m.error + e.error


@pytest.mark.slow
def test_fixed_points_t3():
    rho = 0.5
    fps = hs.se_fixed_points(T=3, alpha=0.03, rho=rho, grid=[0.6, 0.75, 0.9, 0.99])
    assert len(fps) == 1 and fps[0]["bayes_optimal"] and fps[0]["stable"]
    f = fps[0]
    q_hat = 2 * f["alpha"] * f["E"]
    assert abs(float(wishart.mmse(1 / q_hat, rho=rho)) - f["mmse"]) < 2 * f["error"] + 1e-9
    assert f["error"] < 1e-6


def test_interpolant_in_r_t2():
    """E_hat(r) through 13 Chebyshev nodes against direct evaluations, within its bar."""
    it = hs.e_hat_interpolant(T=2, r_max=2.0, nodes=13)
    for r in (0.1, 0.77, 1.99):
        d = hs.output_e(T=2, q=r, V=1.0)
        assert abs(float(it["value"](r)) - d.value) <= float(it["error"](r)) + d.error
        assert float(it["error"](r)) < 1e-5
    rows = hs.se_curve_interpolated(T=2, rho=0.5, mmses=[0.9, 0.6])
    direct = hs.se_curve_traced(T=2, rho=0.5, mmses=[0.6], with_egen=False)[0]
    assert abs(rows[1]["alpha"] - direct["alpha"]) <= rows[1]["alpha_error"] + direct[
        "alpha_error"]


def test_t4_output_side_monte_carlo_at_q0():
    """T = 4 (generic recursion): Monte Carlo over h of |g|_W^2 at omega = 0 against S(4) of the
    q = 0 recursion; e_gen at q = 0 against its closed form."""
    S = hardmax.weak_threshold(4).extra["S"]
    m = hs.monte_carlo_e(T=4, q=0.0, V=1.0, samples=2000, seed=5)
    assert abs(m.value - S) < 4 * m.error
    assert m.error < 0.02
    g = hs.generalisation_error(T=4, q=0.0, V=1.0)
    assert abs(g.value - egen.hardmax_q0(4)) < 1e-12


def test_cli_hardmax_t3_se_refusals(run_cli):
    """`se --channel hardmax --tokens 3`: options the channel has not, and T = 4, are refused with
    one line and exit 2 (before any quadrature)."""
    for args, opt in ((["--epsilon", "0.1"], "--epsilon"), (["--beta", "2"], "--beta"),
                      (["--tokens", "6"], "--tokens"), (["--digits", "20"], "--digits"),
                      (["--tokens", "4", "--rho", "6"], "--rho"),
                      (["--alpha", "0"], "--alpha")):
        argv = ["se", "--channel", "hardmax", "--tokens", "3", "--alpha", "0.03", *args]
        rc, _, err = run_cli(argv)
        assert rc == 2 and opt in err and len(err.strip().splitlines()) == 1, (args, err)


@pytest.mark.slow
def test_cli_hardmax_t3_se_fixed_point_and_range(run_cli):
    """The CLI reports the API's fixed point (flagged Bayes-optimal, with phi and e_gen), and an
    alpha whose fixed point lies below the resolved mmse range exits 3 saying so (~2 min)."""
    import json

    rc, out, err = run_cli(["se", "--channel", "hardmax", "--tokens", "3", "--rho", "0.5",
                            "--alpha", "0.03", "--json"])
    assert rc == 0, err
    o = json.loads(out)
    (fp,) = o["fixed_points"]
    assert fp["bayes_optimal"] and fp["stable"] and o["mmse"] == fp["mmse"]
    row = hs.se_curve_traced(T=3, rho=0.5, mmses=[fp["mmse"]])[0]
    assert abs(row["alpha"] - 0.03) <= row["alpha_error"] + abs(fp["d_alpha_d_mmse"]) * fp["error"]
    # below Q0/3 at rho >= 4/9 the fixed point comes from the E_hat table; at rho = 0.3 the
    # direct range ends there and the command exits 3 saying so
    rc, out, err = run_cli(["se", "--channel", "hardmax", "--tokens", "3", "--alpha", "0.2",
                            "--json"])
    assert rc == 0, err
    (fp,) = json.loads(out)["fixed_points"]
    assert fp["method"].startswith("E_hat table") and fp["mmse"] < 0.5 and fp["bayes_optimal"]
    rc, _, err = run_cli(["se", "--channel", "hardmax", "--tokens", "3", "--rho", "0.3",
                          "--alpha", "0.3"])
    assert rc == 3 and "mmse >= 0.4333" in err


def test_cli_check_hardmax_t3(run_cli):
    """`check --channel hardmax --tokens 3`: five identity checks, all passing; T = 6 refused."""
    import json

    rc, out, err = run_cli(["check", "--channel", "hardmax", "--tokens", "3", "--json"])
    assert rc == 0, err
    o = json.loads(out)
    assert o["passed"] and len(o["checks"]) == 5
    rc, _, err = run_cli(["check", "--channel", "hardmax", "--tokens", "6"])
    assert rc == 2 and "--tokens" in err


def test_checks_detect_a_wrong_g_out(monkeypatch):
    """The finite-difference check fails when g_out is off by 1e-5 (it can fail)."""
    real = hs.z_out

    def biased(**kw):
        out = real(**kw)
        return {**out, "g": out["g"] + 1e-5}

    monkeypatch.setattr(hs, "z_out", biased)
    rows = {r["name"]: r for r in hs.run_checks(T=3)}
    assert not rows["g_out = d log Z_out / d omega"]["passed"]


def test_cli_hardmax_t3_curve_refusals(run_cli):
    base = ["curve", "--channel", "hardmax", "--tokens", "3", "--alphas", "0.01:0.03:2"]
    for args, opt in ((["--tol", "1e-3"], "--tol"), (["--beta", "2"], "--beta"),
                      (["--plot", "x.txt"], "--plot"), (["--method", "per-alpha"], "--method"),
                      (["--rho", "0"], "--rho")):
        rc, _, err = run_cli(base + args)
        assert rc == 2 and opt in err and len(err.strip().splitlines()) == 1, (args, err)
    rc, _, err = run_cli(["curve", "--channel", "hardmax", "--tokens", "3", "--alphas", "0:0.03:2"])
    assert rc == 2 and "--alphas" in err


@pytest.mark.slow
def test_cli_hardmax_t3_curve_rows(run_cli, tmp_path):
    """Two-point curves: rho = 0.3 (direct route) gives the Bayes-optimal fixed point at the
    first alpha and an empty row with its note beyond the resolved range; rho = 0.5 (the E_hat
    table) gives both, the first within the bars of the direct route's value (~3 min)."""
    import csv

    out = tmp_path / "h3.csv"
    rc, _, err = run_cli(["curve", "--channel", "hardmax", "--tokens", "3", "--rho", "0.3",
                          "--alphas", "0.03:0.3:2", "--out", str(out)])
    assert rc == 0, err
    rows = list(csv.DictReader(out.open()))
    assert abs(float(rows[0]["alpha"]) - 0.03) < 1e-15 and float(rows[0]["mmse"]) > 0.4333
    assert rows[1]["mmse"] == "" and "beyond the resolved range" in rows[1]["note"]
    rc, _, err = run_cli(["curve", "--channel", "hardmax", "--tokens", "3", "--rho", "0.5",
                          "--alphas", "0.03:0.5:2", "--out", str(out)])
    assert rc == 0, err
    rows = list(csv.DictReader(out.open()))
    direct = hs.se_fixed_points(T=3, alpha=0.03, rho=0.5)[0]
    m, e = float(rows[0]["mmse"]), float(rows[0]["mmse_error"])
    assert abs(m - direct["mmse"]) <= e + direct["error"]
    assert float(rows[1]["mmse"]) < 0.5 and float(rows[1]["e_gen"]) > 0
    assert rows[1]["method"].startswith("E_hat table")


#: E_hat(r) at T = 3 between the table's nodes by the direct rule (r, E_hat, bar): the tensor
#: Gauss-Hermite rule continued to k + 4, k + 6, k + 8 nodes per axis (hs._tensor_node: r = 0.75,
#: (10, 12, 14); r = 1.4, (13, 15, 17)); recomputed by the slow test below
T3_DIRECT = ((0.75, 2.2629470017352964, 7.7e-8), (1.4, 1.96824469370602, 8.4e-7))


def test_lagrange_abs_sum_is_the_propagated_node_error():
    n = 9
    x = np.cos(np.pi * np.arange(n) / (n - 1))
    xs = np.array([-1.0, -0.93, 0.1, x[3], 0.77, 1.0])
    eps = RNG.random(n)
    basis = np.array([np.polynomial.chebyshev.Chebyshev.fit(x, np.eye(n)[k], n - 1,
                                                            domain=[-1, 1])(xs)
                      for k in range(n)]).T
    assert np.allclose(hs._lagrange_abs_sum(x, xs, eps), np.abs(basis) @ eps, atol=1e-13)
    # at most the largest bar times the Lebesgue constant
    fine = np.linspace(-1, 1, 2001)
    assert hs._lagrange_abs_sum(x, fine, np.ones(n)).max() <= 2 / np.pi * math.log(n) + 1


def test_t3_table_against_the_direct_rule():
    """The shipped 33-node T = 3 table (T3_TABLE_NODES) between its nodes against the continued
    tensor rule (stored, T3_DIRECT), within the sum of both bars; the table's bar is not vacuous
    and is the node bar at a node."""
    tab = hs.t3_table()
    assert len(tab["r_nodes"]) == 32 == len(hs.T3_TABLE_NODES)
    for r, E, bar in T3_DIRECT:
        v, e = float(tab["value"](r)), float(tab["error"](r))
        assert abs(v - E) <= e + bar, (r, v, E, e, bar)
        assert e < 1.5e-6 * v, (r, e)  # measured: 2.9e-7, 7.8e-7 relative
    for k in (3, 16, 27):
        r = float(tab["r_nodes"][k])
        assert abs(float(tab["value"](r)) - hs.T3_TABLE_NODES[k][0]) < 1e-12
        assert float(tab["error"](r)) >= hs.T3_TABLE_NODES[k][1] * (1 - 1e-9)


def test_t3_tabulated_curve_bars_below_1e_6():
    """Issue 15: the T = 3 curve at rho = 0.5 and 32 alphas in [0.01, 3] from the shipped table,
    one stable fixed point each with an mmse bar below 1e-6; the 17-node table through every
    other node agrees with it within its own, wider bars."""
    alphas = np.geomspace(0.01, 3.0, 32)
    rows = hs.se_curve_tabulated(rho=0.5, alphas=alphas, table=hs.t3_table())
    assert all(r["n_fixed_points"] == 1 and r["stable"] for r in rows)
    bars = np.array([r["error"] for r in rows])
    assert bars.max() < 1e-6, bars.max()
    half = hs.e_hat_table(T=3, nodes=17, node_values=hs.T3_TABLE_NODES[::2])
    coarse = hs.se_curve_tabulated(rho=0.5, alphas=alphas, table=half)
    for r, c in zip(rows, coarse):
        assert abs(r["mmse"] - c["mmse"]) <= r["error"] + c["error"], (r["alpha"], r, c)


@pytest.mark.slow
def test_t3_direct_values_recomputed():
    """The stored direct values T3_DIRECT recomputed (~1 minute of CPU)."""
    for r, E, bar in T3_DIRECT:
        v, e, _, _ = hs._tensor_node(r)
        assert abs(v - E) < 1e-12 * E and e <= bar * (1 + 1e-6)


@pytest.mark.slow
def test_t3_table_node_recomputed():
    """Node 17 of the shipped table (r = 2.185, new in the 33-node set, the chamber rule at steps
    0.3, 0.25, 0.2) recomputed (~3 minutes of CPU)."""
    tab = hs.t3_table()
    r = float(tab["r_nodes"][17])
    E, E_err, P, P_err = hs.table_node(T=3, r=r)
    ref = hs.T3_TABLE_NODES[17]
    assert abs(E - ref[0]) <= 1e-12 * E and abs(P - ref[2]) <= 1e-12 * abs(P)
    assert E_err <= ref[1] * (1 + 1e-9) and E_err < 1e-7


@pytest.mark.slow
def test_t3_chamber_node_against_tensor_node():
    """Independent routes at r = 1.2447 (node 14): the chamber rule of the table (steps 0.3,
    0.25, 0.2) against the continued tensor Gauss-Hermite rule, within both bars (~3 minutes)."""
    r = float(hs.t3_table()["r_nodes"][14])
    c = hs._chamber_node(r)
    t = hs._tensor_node(r)
    assert abs(c[0] - t[0]) <= c[1] + t[1] and abs(c[2] - t[2]) <= c[3] + t[3]
    assert c[1] < 1e-7 < t[1]  # the chamber rule is the tighter one here


# ----------------------------------------------------------------------------- large r
def test_kappa_two_rules_and_quad():
    from scipy.integrate import quad
    from scipy.special import log_ndtr

    k = hs.hyperplane_kappa()
    assert abs(k - hs.hyperplane_kappa(nodes=600, half_width=35.0)) < 1e-12

    def f(x):
        return math.exp(-x * x - math.log(2 * math.pi) - log_ndtr(x) - log_ndtr(-x))

    ref = sum(quad(f, a, b, epsabs=1e-14, epsrel=1e-12, limit=200)[0]
              for a, b in ((-40, -8), (-8, 0), (0, 8), (8, 40)))
    assert abs(k - ref) < 1e-12
    assert abs(hs.e_hat_leading(3) - 4.5 * k / math.sqrt(2 * math.pi)) < 1e-15


def test_t2_adapted_rule_matches_tensor_rule():
    for q, V in ((1.0, 1.0), (0.5, 0.1)):
        a = hs.output_e_t2_adapted(q=q, V=V)
        b = hs.output_e(T=2, q=q, V=V, rule="tensor")
        assert abs(a.value - b.value) <= a.error + b.error
        assert abs(a.extra["psi_out"] - b.extra["psi_out"]) <= (a.extra["psi_out_error"]
                                                                + b.extra["psi_out_error"])
        assert a.error < 1e-8 * a.value
    # small r: the map's unit follows the density; r -> 0 gives S(2) = 1 / (2 alpha_bar_c)
    A = math.asin(1 / 3)
    S2 = 4 * (3 * math.pi - 2 * A) / (3 * (math.pi ** 2 - 4 * A ** 2))
    small = hs.output_e_t2_adapted(q=1e-6, V=1.0)
    assert small.error < 1e-9 and 1e-7 < S2 - small.value < 1e-6  # slope dE_hat/dr ~ -0.45
    # beyond the tensor rule's range output_e takes the adapted route
    c = hs.output_e(T=2, q=1.4, V=0.1)
    assert "wall-adapted" in c.method and c.error < 1e-8 * c.value


def test_t2_adapted_rule_against_compiled_channel_beyond_tensor_range():
    from aim_sym.numerics import aim_se

    from aim_sym.channels import hardmax as hardmax_channel
    from aim_sym.compiled import compile_channel

    cc = compile_channel(hardmax_channel(2))
    q, V = 1.4, 0.1  # r = 14 > max_ratio(2)
    a = hs.output_e_t2_adapted(q=q, V=V)
    E, P = aim_se.output_estimate(cc, q=q, V=V, level=1)
    assert abs(a.value - E.value) <= a.error + E.error
    assert abs(a.extra["psi_out"] - P.value) <= a.extra["psi_out_error"] + P.error


def test_t2_large_r_leading_term():
    """sqrt(r) E_hat(r) -> c0 with a correction d(r) / sqrt(r), d(r) converging (next order)."""
    c0 = hs.e_hat_leading(2)
    G = {}
    for r in (1e4, 1e5, 1e6):
        e = hs.output_e_t2_adapted(q=r, V=1.0)
        assert e.error < 1e-9 * e.value
        G[r] = e.value * math.sqrt(r)
    d = {r: (G[r] - c0) * math.sqrt(r) for r in G}
    assert abs(G[1e6] - c0) < 1e-4 * c0
    assert abs(d[1e6] - d[1e5]) < abs(d[1e5] - d[1e4])
    assert abs(d[1e6]) < 0.1 * c0  # the r^-1 term is small against the leading one


@pytest.mark.slow
def test_t3_large_r_leading_term_monte_carlo():
    r = 2000.0
    m = hs.monte_carlo_e(T=3, q=r, V=1.0, samples=20000, seed=11)
    c0 = hs.e_hat_leading(3)
    # next order ~ 1 / r: below 3e-3 of the leading term here, far below the MC error
    assert abs(m.value - c0 / math.sqrt(r)) < 4 * m.error
    assert m.error < 0.06 * m.value


def test_t2_fixed_points_to_large_alpha_against_compiled_channel():
    """T = 2 SE fixed points up to alpha = 3 (r = q / V ~ 135) on the wall-adapted rule; at the
    largest alpha the fixed-point equation is re-checked with the compiled channel's E."""
    from aim_sym.numerics import aim_se

    from aim_sym.channels import hardmax as hardmax_channel
    from aim_sym.compiled import compile_channel

    rho = 0.5
    rows = hs.se_curve_fixed_points(T=2, rho=rho, alphas=[0.05, 3.0])
    assert [r["n_fixed_points"] for r in rows] == [1, 1]
    assert rows[0]["mmse"] > rows[1]["mmse"]
    f = rows[1]
    assert f["q"] / f["mmse"] > 100 and f["error"] < 1e-7
    cc = compile_channel(hardmax_channel(2))
    E, _ = aim_se.output_estimate(cc, q=f["q"], V=f["mmse"], level=1)
    mmse = float(wishart.mmse(1 / (2 * f["alpha"] * E.value), rho=rho))
    assert abs(E.value - hs.output_e(T=2, q=f["q"], V=f["mmse"]).value) < 1e-8 * E.value
    assert abs(mmse - f["mmse"]) < f["error"] + 1e-9


def test_t3_diagonal_tensor_kernel_matches_z_out():
    rng = np.random.default_rng(5)
    mu3 = rng.standard_normal(3) * 2
    nus = [rng.standard_normal(3) * 3 for _ in range(3)]
    F, P, Z = hs._t3_diagonal_tensor(mu3, nus, 60)
    om = np.array([[a, mu3[0], mu3[1], b, mu3[2], c]
                   for a in nus[0] for b in nus[1] for c in nus[2]])
    out = hs.z_out(T=3, omega=om, V=1.0, nodes=60)
    ref = np.einsum("yn,ynk,k->n", out["Z"], out["g"] ** 2, hs.weights(3))
    psi = (out["Z"] * np.log(np.where(out["Z"] > 0, out["Z"], 1.0))).sum(axis=0)
    assert np.max(np.abs(ref - F.ravel())) < 1e-13
    assert np.max(np.abs(psi - P.ravel())) < 1e-13
    assert np.max(np.abs(Z - 1)) < 1e-9


def test_e_hat_table_t2_and_tabulated_curve():
    """The s = 1 / sqrt(r) table at T = 2 against direct evaluations, and the tabulated SE
    against the direct fixed-point search, each within the two bars."""
    n = 9
    sk = 0.75 * (1 + np.cos(np.pi * np.arange(n - 1) / (n - 1)))
    vals = []
    for s in sk:
        e = hs.output_e_t2_adapted(q=float(1 / s ** 2), V=1.0, step=0.3)
        vals.append((e.value, e.error, e.extra["psi_out"], e.extra["psi_out_error"]))
    tab = hs.e_hat_table(T=2, nodes=n, node_values=vals)
    rs = np.array([20.0, 1e4])
    ref = [hs.output_e_t2_adapted(q=float(r), V=1.0, step=0.3) for r in rs]
    dev = np.abs(tab["value"](rs) - [e.value for e in ref])
    assert np.all(dev <= tab["error"](rs) + [e.error for e in ref])
    assert np.all(tab["error"](rs) < 1e-3 * tab["value"](rs))
    a = hs.se_curve_tabulated(rho=0.5, alphas=[3.0], table=tab)[0]
    assert a["n_fixed_points"] == 1 and a["bayes_optimal"] and a["error"] < 1e-4
    # the fixed-point equation with E from the direct rule at the tabulated mmse
    e = hs.output_e_t2_adapted(q=1.5 - a["mmse"], V=a["mmse"], step=0.3)
    mmse = float(wishart.mmse(1 / (2 * 3.0 * e.value), rho=0.5))
    # mmse(Delta) ~ (2 rho - rho^2) Delta here: a relative change of E moves mmse by as much
    assert abs(mmse - a["mmse"]) <= 2 * a["mmse"] * (a["E_error"] + e.error) / a["E"]
    with pytest.raises(InputError):
        tab["value"](0.1)  # below the table's range r >= 1 / s_max^2


@pytest.mark.slow
def test_t3_adapted_rule_against_tensor_rule_and_monte_carlo():
    a = hs.output_e_t3_adapted(q=0.75, V=0.75)
    b = hs.output_e(T=3, q=0.75, V=0.75)
    assert abs(a.value - b.value) <= a.error + b.error and a.error < 1e-4
    c = hs.output_e_t3_adapted(q=50.0, V=1.0)
    m = hs.monte_carlo_e(T=3, q=50.0, V=1.0, samples=20000, seed=5)
    assert abs(c.value - m.value) < 4 * m.error + c.error and c.error < 1e-4 * c.value


def test_curve_egen_rows_match_the_per_row_route():
    """The curve's e_gen (one evaluation per row on two processes, slope from the neighbouring
    rows) equals the per-row route's value exactly, and its bar covers the rule's bar plus the
    mmse error's share measured by the per-row route's one-sided difference."""
    from aim_sym.cli_aim_channels import EGEN_STEP, hardmax_egen_row, hardmax_egen_rows

    rows = hs.se_curve_tabulated(rho=0.5, alphas=[0.05, 0.1, 0.15], table=hs.t3_table())
    pooled = hardmax_egen_rows(rows, 0.5)
    for r, p in zip(rows, pooled):
        single = hardmax_egen_row(r, 0.5)
        assert p["e_gen"] == single["e_gen"]
        rule = hs.generalisation_error(T=3, q=r["q"], V=r["mmse"], step=EGEN_STEP).error
        share = single["e_gen_error"] - rule     # >= the one-sided slope x mmse error
        assert p["e_gen_error"] >= rule + 0.5 * max(share - rule, 0.0)
    assert hardmax_egen_rows(rows[:1], 0.5) == [hardmax_egen_row(rows[0], 0.5)]
