"""Channel files with three or more half-spaces in one term (THEORY 1.4; docs/polyhedral.md):
the symbolic side (aim_sym/output.py, aim_sym/polyhedral.py), the numeric output side
(numerics/polyhedral_se.py) and the public paths (AIM, aim-sym check / threshold / derive).

Independent routes: a third half-space implied by the other two must reproduce the closed-form
two-half-space channel (Phi2); at tau = 0 the trivariate orthant probability and its face
masses are closed forms (asin); seeded Monte Carlo of Z, of E_hat at q = 0 and of E(q, V).
"""

import json
import os

import mpmath as mp
import numpy as np
import pytest
import sympy as sp
from aim_sym.numerics import polyhedral_se as ps

from aim_sym.channel_file import from_file
from aim_sym.channels import discrete, h_matrix
from aim_sym.codegen import compile_expr
from aim_sym.models import AIM
from aim_sym.output import derive
from aim_sym.polyhedral import polyhedral_arrays
from aim_sym.symbols import V
from aim_sym.thresholds import small_width_weak

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(ROOT, "examples", "channels", "polyhedral", "three_halfspaces.py")
W = np.array([2.0, 1.0, 2.0])  # Var h / V in the order h11, h12, h22


def two_or_three(extra: int):
    """y = 1 iff h11 > h12 and h22 > h12 (closed form, Phi2); with ``extra`` = 1 the implied
    h11 + h22 - 2 h12 + 1 > 0 (strict slack), 2 the implied h11 + h22 - 2 h12 > 0 (touching)."""
    h = h_matrix(2)
    H = sp.Heaviside
    inside = H(h[0, 0] - h[0, 1]) * H(h[1, 1] - h[0, 1])
    if extra == 1:
        inside *= H(h[0, 0] + h[1, 1] - 2 * h[0, 1] + 1)
    elif extra == 2:
        inside *= H(h[0, 0] + h[1, 1] - 2 * h[0, 1])
    return discrete(name=f"implied-{extra}", tokens=2, likelihood={1: inside, 0: 1 - inside})


def test_derivation_is_polyhedral_and_arrays_follow_the_events():
    ch = from_file(EXAMPLE, tokens=2)
    d = derive(ch)
    assert d.is_polyhedral and d.Z_out == () and len(d.polyhedral) == 2
    assert [len(ev.forms) for ev in d.polyhedral[0]] == [3]
    assert not derive(two_or_three(0)).is_polyhedral  # two half-spaces: closed forms as before
    a = polyhedral_arrays(ch, {"tau": 1})
    (w, A, b), = a["terms"][0]
    assert w == 1.0
    # 1[f . h + o > 0] -> A h <= b with A = -f, b = o; check at a point inside and one outside
    for hpt, inside in (((2.0, 0.0, 1.5), True), ((2.0, 0.0, -1.0), False)):
        assert bool(np.all(np.asarray(A) @ hpt < np.asarray(b))) is inside
    assert [t[0] for t in a["terms"][1]] == [1.0, -1.0] and a["terms"][1][0][1] == ()
    assert a["weights"] == (2.0, 1.0, 2.0) and len(a["basis"]) == 3


@pytest.mark.parametrize("extra", [1, 2])
def test_implied_half_space_equals_the_closed_form_channel(extra):
    closed, poly = two_or_three(0), AIM(two_or_three(extra))
    d = derive(closed)
    args = list(d.omega) + [V]
    Zf = compile_expr(list(d.Z_out), args)
    gf = compile_expr([list(g) for g in d.g_out], args)
    dgf = compile_expr([[list(r) for r in dg.tolist()] for dg in d.dg_out], args)
    omega = np.random.default_rng(3).standard_normal((4, 3)) * 0.8
    out = ps.z_out(poly.polyhedral, omega=omega, V=0.7, order=2)
    for n, om in enumerate(omega):
        Z = np.array(Zf(*om, 0.7), dtype=float)
        g = np.array(gf(*om, 0.7), dtype=float)
        dg = np.array(dgf(*om, 0.7), dtype=float)
        assert np.all(np.abs(out.Z[:, n] - Z) <= out.Z_error[:, n] + 1e-15)
        assert np.all(np.abs(out.g[:, n] - g) <= out.g_error[:, n] + 1e-13)
        assert np.all(np.abs(out.dg[:, n] - dg) <= out.dg_error[:, n] + 1e-12)
        assert np.max(np.abs(out.Z[:, n] - Z)) < 1e-12
        assert np.max(np.abs(out.g[:, n] - g)) < 1e-11
    exact = float(small_width_weak(closed, digits=30).value)
    r = poly.threshold("weak", small_width=True)
    assert abs(r.details["value_float"] - exact) <= r.error + 1e-15 and r.error < 1e-12


def test_redundant_rows_are_dropped_and_the_engine_agrees_without_dropping():
    """The slack implied row is dropped (polytope.irredundant_rows, inside the engine): three
    rows give the same Z, g_out, dg_out as two rows (Phi2); an empty polytope is detected."""
    from aim_sym.numerics import polytope as pt

    A2 = ((-1.0, 1.0, 0.0), (0.0, 1.0, -1.0))
    A3, b3 = A2 + ((-1.0, 2.0, -1.0),), (0.0, 0.0, 1.0)
    om = np.random.default_rng(4).standard_normal((3, 3)) * 0.8
    assert pt.irredundant_rows(np.array(A3), np.array(b3)) == ([0, 1], False)
    empty = pt.irredundant_rows(np.array([[1.0, 0.0, 0.0], [-1.0, 0.0, 0.0]]),
                                np.array([-1.0, -1.0]))
    assert empty == ([], True)
    e = pt.gaussian_polytope(A=((1.0, 0.0, 0.0), (-1.0, 0.0, 0.0)), b=(-1.0, -1.0), omega=om,
                             cov=0.7 * np.diag(W))
    assert np.all(e.mass == 0) and np.all(e.dg_out == 0)
    cov = 0.7 * np.diag(W)
    two = pt.gaussian_polytope(A=A2, b=(0.0, 0.0), omega=om, cov=cov)
    three = pt.gaussian_polytope(A=A3, b=b3, omega=om, cov=cov)
    assert np.max(np.abs(two.mass - three.mass)) < 1e-13
    assert np.max(np.abs(two.g_out - three.g_out)) < 1e-12
    assert np.max(np.abs(two.dg_out - three.dg_out)) < 1e-11


def trivariate_threshold(dps: int = 30):
    """alpha_bar_c of the example at tau = 0 in closed form: the cone X = F h > 0 has
    P = 1/8 + (asin r12 + asin r13 + asin r23) / (4 pi), and dP/dmu_i = density of X_i at 0
    times the bivariate orthant 1/4 + asin(r_jk|i) / (2 pi) of the other two (THEORY 1.4)."""
    with mp.workdps(dps):
        F = mp.matrix([[1, -1, 0], [0, -1, 1], [1, 0, 1]])
        C = mp.diag([2, 1, 2])
        M = F * C * F.T
        P = mp.mpf(1) / 8 + sum(mp.asin(M[i, j] / mp.sqrt(M[i, i] * M[j, j]))
                                for i, j in ((0, 1), (0, 2), (1, 2))) / (4 * mp.pi)
        dmu = []
        for i in range(3):
            j, k = (x for x in range(3) if x != i)
            cjk = M[j, k] - M[j, i] * M[i, k] / M[i, i]
            vj, vk = M[j, j] - M[j, i] ** 2 / M[i, i], M[k, k] - M[k, i] ** 2 / M[i, i]
            dmu.append((mp.mpf(1) / 4 + mp.asin(cjk / mp.sqrt(vj * vk)) / (2 * mp.pi))
                       / mp.sqrt(2 * mp.pi * M[i, i]))
        dZ = F.T * mp.matrix(dmu)
        E = sum(C[k, k] * dZ[k] ** 2 for k in range(3)) * (1 / P + 1 / (1 - P))
        return 1 / (2 * E)


def test_threshold_at_tau_zero_against_the_trivariate_closed_form():
    exact = trivariate_threshold()
    r = AIM(from_file(EXAMPLE, tokens=2, tau=0)).threshold("weak", small_width=True)
    dev = abs(r.details["value_float"] - float(exact))
    assert dev <= r.error and r.error < 1e-12
    assert r.value == mp.nstr(exact, 15, strip_zeros=False)[:len(r.value)] or dev < 1e-14


def test_z_and_threshold_at_tau_one_against_seeded_monte_carlo():
    m = AIM(from_file(EXAMPLE, tokens=2))  # tau = 1 (the file's default)
    rng = np.random.default_rng(11)
    N = 1_000_000
    # Z_out(y = 1) at one omega, V = 0.8
    om = np.array([0.3, -0.2, 0.5])
    h = om + np.sqrt(0.8 * W) * rng.standard_normal((N, 3))
    hit = (h[:, 0] > h[:, 1]) & (h[:, 2] > h[:, 1]) & (h[:, 0] + h[:, 2] > 1)
    out = ps.z_out(m.polyhedral, omega=om, V=0.8, order=1)
    p, se = hit.mean(), hit.std() / np.sqrt(N)
    assert abs(out.Z[0, 0] - p) < 4 * se and out.Z_error[0, 0] < 1e-12
    # alpha_bar_c = 1 / (2 S), S = sum_y sum_k E[h_k 1_y]^2 / (P(y) w_k) at omega = 0, V = 1
    h = np.sqrt(W) * rng.standard_normal((N, 3))
    y = (h[:, 0] > h[:, 1]) & (h[:, 2] > h[:, 1]) & (h[:, 0] + h[:, 2] > 1)
    vals = []
    for idx in np.array_split(np.arange(N), 20):
        s = sum(((h[idx] * mask[:, None]).mean(axis=0) ** 2 / W).sum() / mask.mean()
                for mask in (y[idx], ~y[idx]))
        vals.append(1 / (2 * s))
    mc, mc_se = np.mean(vals), np.std(vals, ddof=1) / np.sqrt(len(vals))
    r = m.threshold("weak", small_width=True)
    assert abs(r.details["value_float"] - mc) < 4 * mc_se and r.error < 1e-12


def test_output_expectation_against_monte_carlo_over_omega():
    """E(q, V) by tensor Gauss-Hermite (V >= q: geometric convergence) against the mean of the
    same integrand at seeded omega ~ N(0, q C) drawn in all of R^3 (not through the basis)."""
    ch = AIM(from_file(EXAMPLE, tokens=2)).polyhedral
    q, Vv = 0.3, 0.9
    E, psi = ps.output_estimate(ch, q=q, V=Vv, orders=(6, 8), rule=ps.FAST_RULE)
    assert E.error < 1e-5 and psi.error < 1e-5
    omega = np.sqrt(q * W) * np.random.default_rng(5).standard_normal((600, 3))
    out = ps.z_out(ch, omega=omega, V=Vv, order=1, rule=ps.FAST_RULE)
    e_node = (np.einsum("ynk,k->yn", out.dZ ** 2, W) / out.Z).sum(axis=0)
    mc, se = e_node.mean(), e_node.std(ddof=1) / np.sqrt(len(e_node))
    assert abs(E.value - mc) < 4 * se + E.error
    assert se < 0.05 * E.value  # the comparison can fail


@pytest.mark.slow  # ~15-27 s: kept out of the default run (10-minute budget)
def test_face_rule_at_small_V_against_monte_carlo_over_omega():
    """V << q (q, V = 1.4, 0.1), where tensor Gauss-Hermite over omega converges slowly: the
    face rule (face coordinates z = F omega with unit width per face; coarse steps here to stay
    fast) against the mean of the same integrand at seeded omega ~ N(0, q C) drawn in R^3."""
    ch = AIM(from_file(EXAMPLE, tokens=2)).polyhedral
    F, c = ps.face_frame(ch)
    assert np.allclose(np.diag(F @ np.diag(W) @ F.T), 1) and np.allclose(sorted(c), [0, 0, 0.5])
    q, Vv = 1.4, 0.1
    E, psi = ps.face_estimate(ch, q=q, V=Vv, steps=(1.5, 1.25))
    assert 0 < E.error < 0.05 * E.value and psi.error < 0.01
    omega = np.sqrt(q * W) * np.random.default_rng(7).standard_normal((3000, 3))
    out = ps.z_out(ch, omega=omega, V=Vv, order=1, rule=ps.FAST_RULE)
    ok = out.Z > 1e3 * out.Z_error  # far outside, Z loses relative accuracy
    e_node = np.where(ok, np.einsum("ynk,k->yn", out.dZ ** 2, W) / np.where(ok, out.Z, 1.0),
                      0.0).sum(axis=0)
    mc, se = e_node.mean(), e_node.std(ddof=1) / np.sqrt(len(e_node))
    assert abs(E.value - mc) < 4 * se + E.error
    assert se < 0.04 * E.value  # the comparison can fail


def test_three_token_orthant_of_off_diagonals_is_seven_pi_over_twelve():
    """T = 3, y = 1 iff h12, h13, h23 > 0 (three independent entries): Z_1 = 1/8 at omega = 0,
    dZ_1/domega_ab = phi(0)/4 on those entries, E = 3/(32 pi) (8 + 8/7) = 6/(7 pi), hence
    alpha_bar_c = 7 pi / 12 (THEORY 1.2)."""
    h = h_matrix(3)
    H = sp.Heaviside
    e = H(h[0, 1]) * H(h[0, 2]) * H(h[1, 2])
    m = AIM(discrete(name="orthant-3", tokens=3, likelihood={1: e, 0: 1 - e}))
    r = m.threshold("weak", small_width=True)
    assert abs(r.details["value_float"] - 7 * np.pi / 12) <= r.error + 1e-15 and r.error < 1e-12
    assert all(row["passed"] for row in m.check())


# ----------------------------------------------------------------------------- command line
def test_cli_check_threshold_derive_and_refusals(run_cli):
    rc, out, err = run_cli(["check", "--channel-file", EXAMPLE])
    assert rc == 0 and "all checks passed" in out and out.count("PASS") == 10, (out, err)
    rc, out, err = run_cli(["threshold", "weak", "--small-width", "--channel-file", EXAMPLE,
                            "--json"])
    assert rc == 0, err
    o = json.loads(out)
    api = AIM(from_file(EXAMPLE, tokens=2)).threshold("weak", small_width=True)
    assert o["value"] == api.value and o["error"] < 1e-12 and o["digits"] == 15
    rc, out, err = run_cli(["derive", "--channel-file", EXAMPLE])
    assert rc == 0 and "[integral]" in out and "h_11 + h_22 - tau > 0" in out
    for args in (["se", "--alpha", "0.3", "--digits", "20"],
                 ["curve", "--alphas", "0.1:0.2:2", "--tol", "1e-6"],
                 ["threshold", "weak", "--small-width", "--certified"],
                 ["derive", "--format", "latex"]):
        rc, out, err = run_cli([*args, "--channel-file", EXAMPLE])
        assert rc == 2 and "polyhedral" in err and err.count("\n") == 1, (args, err)


@pytest.mark.slow  # ~15-27 s: kept out of the default run (10-minute budget)
def test_se_below_the_served_error_exits_3(run_cli):
    """At alpha = 50 the fixed point has V < V_MIN, where the omega rule is not trusted."""
    rc, out, err = run_cli(["se", "--channel-file", EXAMPLE, "--alpha", "50"])
    assert rc == 3 and "below" in err, err


@pytest.mark.slow
def test_se_fixed_point_against_the_sinh_trapezoid_rule(run_cli):
    """aim-sym se (Gauss-Hermite 12/16 over omega, about a minute) against the SE map evaluated
    at its V with the sinh-trapezoid rule of numerics/gauss.py (level -1, 2e4 nodes)."""
    from aim_sym.numerics import wishart
    from aim_sym.numerics.gauss import gaussian_grid

    rc, out, err = run_cli(["se", "--channel-file", EXAMPLE, "--alpha", "0.3", "--json"])
    assert rc == 0, err
    o = json.loads(out)
    ch = AIM(from_file(EXAMPLE, tokens=2)).polyhedral
    Vv, alpha = o["mmse"], 0.3
    q = 1.5 - Vv
    L = np.asarray(ch.basis)
    C = np.diag(W)
    S = L @ C @ L.T
    m, w, pruned = gaussian_grid(q * S, np.sqrt(Vv * np.diag(S)), -1)
    # omega = E[omega | L omega = m] = C L^T S^-1 m, written column-wise (the engine writes it
    # row-wise; a transposed solve there once gave omega the wrong law, and this test copied it)
    omega = (C @ L.T @ np.linalg.inv(S) @ m.T).T
    assert np.allclose(omega @ L.T, m, atol=1e-10)
    res = ps.z_out(ch, omega=omega, V=Vv, order=1, rule=ps.FAST_RULE)
    ok = res.Z > 0  # nodes far in the tail where an outcome's mass underflows carry no weight
    terms = np.where(ok, np.einsum("ynk,k->yn", res.dZ ** 2, W) / np.where(ok, res.Z, 1.0), 0.0)
    E = float(terms.sum(axis=0) @ w)
    residual = float(wishart.mmse(1 / (2 * alpha * E), rho=0.5)) - Vv
    slope = o["fixed_points"][0]["slope"]
    assert abs(residual) / abs(1 - slope) <= o["error"] and o["error"] < 1e-5
    assert o["fixed_points"][0]["bayes_optimal"] and o["fixed_points"][0]["stable"]


@pytest.mark.slow
def test_se_fixed_point_below_v_gh_against_monte_carlo_over_omega():
    """alpha = 1.5, rho = 0.5: the fixed point lies below V_GH = 0.35, where the SE uses the face
    rule (scan, Brent on step 1.0, Newton on 0.8; a few minutes). The SE map at its V with E by
    seeded Monte Carlo over omega ~ N(0, q C) in R^3 (the engine per sample, 20000 samples)
    vanishes within the fixed point's error plus 4 standard errors, propagated."""
    from aim_sym.numerics import wishart

    ch = AIM(from_file(EXAMPLE, tokens=2)).polyhedral
    alpha, rho = 1.5, 0.5
    (fp,) = ps.fixed_points(ch, alpha=alpha, rho=rho)
    Vv = fp["mmse"]
    assert ps.V_MIN < Vv < ps.V_GH and fp["rule"].startswith("face") and fp["stable"]
    assert fp["error"] < 1e-3
    rng = np.random.default_rng(17)
    vals = []
    for _ in range(10):
        omega = np.sqrt((1 + rho - Vv) * W) * rng.standard_normal((2000, 3))
        out = ps.z_out(ch, omega=omega, V=Vv, order=1, rule=ps.FAST_RULE)
        ok = out.Z > 1e3 * out.Z_error
        vals.append(np.where(ok, np.einsum("ynk,k->yn", out.dZ ** 2, W)
                             / np.where(ok, out.Z, 1.0), 0.0).sum(axis=0))
    e = np.concatenate(vals)
    E, se = e.mean(), e.std(ddof=1) / np.sqrt(len(e))

    def res(x):
        return float(wishart.mmse(1.0 / (2 * alpha * x), rho=rho)) - Vv

    band = max(abs(res(E + 4 * se) - res(E)), abs(res(E - 4 * se) - res(E)))
    slope = fp["slope"]
    assert abs(res(E)) / abs(1 - slope) <= fp["error"] + band / abs(1 - slope)
    assert se < 0.02 * E  # the comparison can fail


def test_state_evolution_refuses_a_tolerance_it_cannot_honour():
    """tol is not silently ignored for a polyhedral channel: refused before any quadrature."""
    from aim_sym.domains import DomainError

    m = AIM(from_file(EXAMPLE, tokens=2), rho=0.5)
    with pytest.raises(DomainError, match="tol must be omitted for a polyhedral channel"):
        m.state_evolution(alpha=0.3, tol=1e-6)
    with pytest.raises(DomainError, match="tol must be omitted for a polyhedral channel"):
        m.curve(alphas=[0.1, 0.2], tol=1e-6)
    with pytest.raises(Exception, match="method must be omitted"):
        m.curve(alphas=[0.1, 0.2], method="per-alpha")


@pytest.mark.slow
def test_curve_rows_are_the_state_evolution_and_say_where_it_stops(tmp_path):
    """curve over a polyhedral channel: the row at alpha = 0.3 is the state evolution's fixed
    point; alpha = 50 lies below V_MIN and gets a note (CLI, CSV; ~2 min)."""
    import csv
    import subprocess
    import sys

    out = tmp_path / "poly.csv"
    p = subprocess.run([sys.executable, "-m", "aim_sym", "curve", "--channel-file", EXAMPLE,
                        "--rho", "0.5", "--alphas", "0.3:50:2", "--out", str(out)],
                       capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr
    rows = list(csv.DictReader(out.open()))
    se = AIM(from_file(EXAMPLE, tokens=2), rho=0.5).state_evolution(alpha=0.3)
    assert abs(float(rows[0]["mmse"]) - se.value) <= 1e-12
    assert rows[1]["mmse"] == "" and "beyond the resolved range" in rows[1]["note"]
