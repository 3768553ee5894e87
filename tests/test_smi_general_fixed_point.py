"""General SMI channels at an SE fixed point (THEORY 1.5, 2.1, 2.4): e_gen (Bayes-optimal and
plug-in), the free entropy phi and its stationarity, the curve over alpha (API and CLI).
Independent routes: closed forms of y = sign(z_11 z_12), a seeded Monte Carlo of e_gen for noisy
attention, finite differences of Psi_out against Q_hat / (2 alpha)."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest
from aim_sym.numerics import smi_general as engine
from click.testing import CliRunner
from scipy.stats import norm

import aim_sym.smi_general_api as api
from aim_sym import smi_channels as sc
from aim_sym.cli import cli

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "channels"
SIGN_FILE = str(EXAMPLES / "smi" / "sign_product.py")
SMALL_SIGN = engine.Orders(inner_log2=11, outer_gh=8, replicates=2)


# ----------------------------------------------------------------------------- closed forms
def sign_e_gen(Q: float) -> float:
    """y = sign(z_11 z_12): E[sign z_m | omega_m] = 2 Phi(omega_m / sqrt V) - 1, whose square has
    mean (2 / pi) arcsin Q; the two tokens are independent: e_gen = 1 - ((2 / pi) arcsin Q)^2."""
    return 1 - (2 / math.pi * math.asin(Q)) ** 2


def sign_e_plugin(Q: float) -> float:
    """corr(z_m, omega_m) = sqrt Q, so P(sign z_m != sign omega_m) = p = arccos(sqrt Q) / pi and
    the product's sign flips with probability 2 p (1 - p): e_plugin = 4 * 2 p (1 - p)."""
    p = math.acos(math.sqrt(Q)) / math.pi
    return 8 * p * (1 - p)


def sign_mutual_information(Q: float, n: int = 200) -> float:
    """I(y; omega) = log 2 - E H((1 + m_1 m_2) / 2), m = 2 Phi(omega / sqrt V) - 1, by an n^2
    Gauss-Hermite rule (the integrand is analytic for Q < 1)."""
    x, w = np.polynomial.hermite_e.hermegauss(n)
    w = w / w.sum()
    m = 2 * norm.cdf(math.sqrt(Q / (1 - Q)) * x) - 1
    p = (1 + np.outer(m, m)) / 2

    def xlogx(t):
        return np.where(t > 0, t * np.log(np.where(t > 0, t, 1.0)), 0.0)

    return float((np.outer(w, w) * (xlogx(p) + xlogx(1 - p))).sum()) + math.log(2)


def sign_fixed_point(alpha: float) -> float:
    """The learned SE fixed point of y = sign(z_11 z_12) from the closed-form E[g g^T]
    (tests/test_smi_general.py), by a bracketing root search (alpha > pi^2 / 8)."""
    from scipy.optimize import brentq
    from test_smi_general import _sign_product_e_gg

    def gap(Q):
        qh = alpha * _sign_product_e_gg(Q, 160)      # 1e-7 from 320 nodes at alpha = 2.5
        return Q - qh / (1 + qh)

    return brentq(gap, 0.05, 0.999, xtol=1e-13)


def test_functionals_of_sign_product_agree_with_closed_forms():
    cc = api.compiled(sc.sign_product())
    for Q in (0.3, 0.64):
        vals = [engine.functionals(cc, np.array([[Q]]), engine.se_rules(cc, o, 0))
                for o in (engine.Orders(inner_log2=12, outer_gh=10),
                          engine.Orders(inner_log2=14, outer_gh=16))]
        fine = vals[1]
        # Bayes-optimal e_gen and the mutual information: 1e-4 at these rules (outer-rule bound)
        assert abs(fine["e_gen"] - sign_e_gen(Q)) < 1e-4
        assert abs(fine["psi"] - sign_mutual_information(Q)) < 1e-4
        assert abs(fine["e_gen"] - sign_e_gen(Q)) <= 2 * abs(fine["e_gen"] - vals[0]["e_gen"])
        # the plug-in's integrand steps: scrambled Sobol over (xi, u), 2^18 points, whose spread
        # over 8 scramblings is 8e-4 here
        assert abs(fine["e_plugin"] - sign_e_plugin(Q)) < 6e-3
    assert sign_mutual_information(0.64) == pytest.approx(sign_mutual_information(0.64, 100),
                                                          abs=1e-11)


def test_functionals_limits_at_Q_zero():
    # Q -> 0: e_gen is the prior predictive variance (1 for y = +-1 of mean 0), the plug-in is
    # twice it (independent draws), Psi_out(Q) - Psi_out(0) -> 0
    cc = api.compiled(sc.sign_product())
    f = engine.functionals(cc, np.array([[1e-6]]), engine.se_rules(cc, SMALL_SIGN, 0))
    assert f["e_gen"] == pytest.approx(1.0, abs=1e-8)
    assert f["e_plugin"] == pytest.approx(2.0, abs=1e-2)
    assert abs(f["psi"]) < 1e-8


# ----------------------------------------------------------------------------- Monte Carlo
def _noisy_e_gen_monte_carlo(cc, Q: float, *, samples: int, inner: int, seed: int):
    """Seeded Monte Carlo of e_gen and e_plugin (THEORY 4.6) for a P = 1 noisy channel at overlap
    Q: omega ~ N(0, Q I_M), z = omega + sqrt(1 - Q) u, y = g(z) + sqrt(Delta) xi. Unbiased:
    ||E[y | omega]||^2 is the product of two independent iid inner means; the plug-in compares y
    with g(omega) plus independent noise. Returns (e_gen, se, e_plugin, se)."""
    rng = np.random.default_rng(seed)
    M, K, Delta = cc.M, cc.K, cc.noise
    omega = math.sqrt(Q) * rng.standard_normal((samples, M))
    V = 1 - Q
    y = (cc.forward(omega + math.sqrt(V) * rng.standard_normal((samples, M)))
         + math.sqrt(Delta) * rng.standard_normal((samples, K)))
    means = []
    for _ in range(2):
        u = rng.standard_normal((samples, inner, M))
        G = cc.forward((omega[:, None, :] + math.sqrt(V) * u).reshape(-1, M))
        means.append(G.reshape(samples, inner, K).mean(1))
    x = (y ** 2).sum(1) - (means[0] * means[1]).sum(1)
    y_hat = cc.forward(omega) + math.sqrt(Delta) * rng.standard_normal((samples, K))
    xp = ((y - y_hat) ** 2).sum(1)
    n = math.sqrt(samples)
    return x.mean(), x.std(ddof=1) / n, xp.mean(), xp.std(ddof=1) / n


def test_e_gen_of_noisy_attention_at_a_fixed_point_agrees_with_monte_carlo():
    ch = api.builtin_channel("noisy-attention", noise=0.1)
    orders = engine.Orders(inner_gh=10, outer_gh=5, y_per_sd=0.5)
    r = api.fixed_point(ch, alpha=2.0, orders=orders, tol=1e-6)
    Q = r.value[0][0]
    assert 0.3 < Q < 0.7                        # learned, not the trivial point
    d = r.details
    e, se, ep, sep = _noisy_e_gen_monte_carlo(api.compiled(ch), Q, samples=30000, inner=32,
                                              seed=5)
    assert se < 3e-3 and sep < 4e-3
    assert abs(d["e_gen"] - e) <= d["e_gen_error"] + 4 * se
    assert abs(d["e_gen_plugin"] - ep) <= d["e_gen_plugin_error"] + 4 * sep
    # the bars are not vacuous: the two estimators differ by more than both
    assert d["e_gen_plugin"] - d["e_gen"] > d["e_gen_error"] + d["e_gen_plugin_error"]
    # noise floor: e_gen >= K Delta, e_plugin >= 2 K Delta
    assert d["e_gen"] > 2 * 0.1 and d["e_gen_plugin"] > 4 * 0.1


# ----------------------------------------------------------------------------- phi
@pytest.mark.parametrize("name", ["sign-product", "noisy-attention"])
def test_stationarity_dpsi_dQ_equals_half_E_gg(name):
    # THEORY 2.1 / 4.3: dPhi/dQ = 0 at a fixed point <=> dPsi_out/dQ = Q_hat / (2 alpha)
    # = E[sum_m g_m g_m^T] / 2 at every Q; on a quadrature rule it holds up to the rule's
    # error, bounded here by the change between two rule sizes
    ch = sc.sign_product() if name == "sign-product" else api.builtin_channel(
        "noisy-attention", noise=0.1)
    cc = api.compiled(ch)
    levels = ((engine.Orders(inner_log2=12, outer_gh=10), engine.Orders(inner_log2=14,
                                                                         outer_gh=16))
              if ch.kind == "discrete" else
              (engine.Orders(inner_gh=12, outer_gh=6, y_per_sd=0.75),
               engine.Orders(inner_gh=18, outer_gh=9, y_per_sd=1.0)))
    for Q in (0.2, 0.5):
        (fd0, h0), (fd1, h1) = [engine.stationarity(cc, Q=np.array([[Q]]), direction=np.eye(1),
                                                    rules=engine.se_rules(cc, o, 0))
                                for o in levels]
        assert h1 > 0.05
        assert abs(fd1 - h1) <= 2 * (abs(fd1 - fd0) + abs(h1 - h0)) + 1e-6
        assert abs(fd1 - h1) < 0.01 * h1


def test_phi_of_sign_product_is_stationary_at_the_fixed_point_and_matches_closed_form():
    # at the closed-form fixed point (Q, Q_hat = Q / (1 - Q)) of alpha = 2.5: dPhi/dQ = 0 by
    # central differences of the engine's Psi_out, and Phi against its closed form
    cc = api.compiled(sc.sign_product())
    alpha = 2.5
    q = sign_fixed_point(alpha)
    qh = q / (1 - q)
    exact = -q * qh / 2 + qh / 2 - math.log1p(qh) / 2 + alpha * sign_mutual_information(q)
    assert exact > 0
    phis = []
    # omega rule 24^2: at Q ~ 0.8 a 12^2 rule leaves dPsi/dQ 15% off Q_hat / (2 alpha)
    for o in (engine.Orders(inner_log2=12, outer_gh=16), engine.Orders(inner_log2=12,
                                                                       outer_gh=24)):
        rules = engine.se_rules(cc, o, 0)

        def phi(x, rules=rules):
            psi = engine.functionals(cc, np.array([[x]]), rules)["psi"]
            return engine.free_entropy(Q=np.array([[x]]), Q_hat=np.array([[qh]]), alpha=alpha,
                                       psi=psi)

        phis.append(phi(q))
    h = 1e-3
    slope = (phi(q + h) - phi(q - h)) / (2 * h)
    assert abs(slope) < 0.01 * qh / 2             # against each term's slope Q_hat / 2
    assert abs(phis[1] - exact) <= 2 * abs(phis[1] - phis[0]) + 1e-6
    assert abs(phis[1] - exact) < 1e-3
    assert engine.free_entropy(Q=np.zeros((1, 1)), Q_hat=np.zeros((1, 1)), alpha=alpha,
                               psi=0.0) == 0.0


@pytest.mark.slow
def test_fixed_points_flags_largest_phi_and_bars_cover_the_closed_forms():
    table = api.fixed_points(sc.sign_product(), alpha=2.5, orders=SMALL_SIGN, tol=1e-6)
    rows = list(table)
    assert sum(r.details["largest_phi"] for r in rows) == 1
    best = next(r for r in rows if r.details["largest_phi"])
    assert sorted(sum((r.details["starts"] for r in rows), [])) == ["informed", "uninformed"]
    d = best.details
    Q = sign_fixed_point(2.5)
    assert abs(best.value[0][0] - Q) <= best.error[0][0]
    assert abs(d["e_gen"] - sign_e_gen(Q)) <= d["e_gen_error"]
    assert abs(d["e_gen_plugin"] - sign_e_plugin(Q)) <= d["e_gen_plugin_error"]
    qh = Q / (1 - Q)
    exact = -Q * qh / 2 + qh / 2 - math.log1p(qh) / 2 + 2.5 * sign_mutual_information(Q)
    assert exact > 0 and abs(d["phi"] - exact) <= d["phi_error"]
    json.dumps(table.to_dict())


# ----------------------------------------------------------------------------- curve
def test_api_curve_warm_start_and_rows():
    # alpha = 2, 2.5 > pi^2 / 8: learned; the second alpha is warm-started from the first's Q
    # (Q = 0 below the threshold: the CLI test)
    calls = []
    table = api.curve(sc.sign_product(), alphas=[2.0, 2.5], orders=SMALL_SIGN, tol=1e-6,
                      informed=False, progress=lambda *a: calls.append(a))
    rows = list(table)
    assert [c[:2] for c in calls] == [(1, 2), (2, 2)]
    assert rows[0]["start"] == "uninformed" and rows[1]["start"] == "uninformed (warm)"
    assert rows[1]["Q_11"] > rows[0]["Q_11"] > 0.6
    assert rows[1]["e_gen"] < rows[0]["e_gen"]
    cold = api.fixed_point(sc.sign_product(), alpha=2.5, orders=SMALL_SIGN, tol=1e-6)
    assert abs(cold.value[0][0] - rows[1]["Q_11"]) <= cold.error[0][0] + rows[1]["Q_11_error"]


def test_cli_curve_channel_file_two_alphas(tmp_path):
    out, plot = tmp_path / "c.csv", tmp_path / "c.png"
    res = CliRunner().invoke(cli, ["curve", "--model", "smi", "--channel-file", SIGN_FILE,
                                   "--alphas", "0.5:0.8:2", "--out", str(out), "--plot",
                                   str(plot), "--json"])
    assert res.exit_code == 0, res.output
    assert "[1/2] alpha = 0.5 done" in res.output and "[2/2] alpha = 0.8 done" in res.output
    rows = list(csv.DictReader(out.open()))
    assert [float(r["alpha"]) for r in rows] == [0.5, 0.8]
    for r in rows:           # below pi^2 / 8: the trivial point, its e_gen and phi exact
        assert float(r["Q_11"]) < 1e-4
        assert abs(float(r["e_gen"]) - 1) <= float(r["e_gen_error"]) + 1e-6
        assert abs(float(r["phi"])) <= float(r["phi_error"])
    assert plot.stat().st_size > 1000
    bad = CliRunner().invoke(cli, ["curve", "--model", "smi", "--channel-file", SIGN_FILE,
                                   "--alphas", "0.5:0.8:2", "--tol", "1e-6"])
    assert "--tol must be used only with --model aim" in str(bad.exception)


@pytest.mark.slow
def test_cli_curve_and_se_channel_file_learned_point():
    res = CliRunner().invoke(cli, ["curve", "--model", "smi", "--channel-file", SIGN_FILE,
                                   "--alphas", "0.6:2.5:2", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output[res.output.index("{"):])
    r = out["rows"][1]
    Q = sign_fixed_point(2.5)
    assert abs(r["Q_11"] - Q) <= r["Q_11_error"]
    assert abs(r["e_gen"] - sign_e_gen(Q)) <= r["e_gen_error"]
    se = CliRunner().invoke(cli, ["se", "--model", "smi", "--channel-file", SIGN_FILE,
                                  "--alpha", "2.5", "--json"])
    assert se.exit_code == 0, se.output
    o = json.loads(se.output[se.output.index("{"):])
    assert o["largest_phi"] and abs(o["e_gen"] - sign_e_gen(Q)) <= o["e_gen_error"]
