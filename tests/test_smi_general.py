"""General SMI channels as data (THEORY 2.1, 2.2, 2.5): spec, compilation, the quadrature engine,
the API and the CLI handlers. Closed form (sign product: F = 8 / pi^2), a seeded Monte Carlo
oracle, the Nishimori identity, the bound lambda_max(F_l) <= n_l (n_l + 1) and channel files."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import sympy as sp
from aim_sym.numerics import smi_general as engine
from aim_sym.numerics.records import InputError

import aim_sym.smi_general_api as api
from aim_sym import cli_smi_general as handlers
from aim_sym import smi_channels as sc
from aim_sym.domains import DomainError

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "channels"
SIGN_FILE = str(EXAMPLES / "smi" / "sign_product.py")
ATTENTION_FILE = str(EXAMPLES / "smi" / "noisy_attention.py")
SMALL_DISCRETE = engine.Orders(inner_log2=13, replicates=8)


def test_sign_product_posterior_covariance_and_F_closed_form():
    # y = sign(z_11 z_12): Cov[z | y = +-1] = [[1, +-2/pi], [+-2/pi, 1]] (E[z1 z2; z1 z2 > 0] =
    # E|z1 z2| / 2 = 1/pi, over P(y) = 1/2), so G = Cov - I has tr G^2 = 8 / pi^2 = F
    cc = api.compiled(sc.sign_product())
    m = engine.q0_moments(cc, engine.Orders(inner_log2=16), seed=3)
    for y, cov in zip(cc.labels, m.cov):
        assert cov[0, 1] == pytest.approx(y * 2 / math.pi, abs=2e-3)
        assert cov[0, 0] == pytest.approx(1.0, abs=2e-3)
    table = api.weak_thresholds(sc.sign_product(), orders=SMALL_DISCRETE)
    (r,) = list(table)
    assert r.details["lambda_error"] < 1e-3
    assert abs(r.details["lambda_max"] - 8 / math.pi ** 2) <= r.details["lambda_error"]
    assert abs(r.value - math.pi ** 2 / 8) <= r.error


def test_sign_product_with_two_rows_has_F_one_half_on_every_mode():
    # P = 2: x = z_1 . z_2 is Laplace(1) (E|x| = 1); by the flips z_p1, z_p2 -> -z_p1, -z_p2 only
    # E[z_p1 z_p2 | y] = y E|x| / 2 = y / 2 survives in G, so F(X) = (M (M - 1) / 4) X = X / 2
    # on all three symmetric modes: alpha_c = 2
    est = engine.stability(api.compiled(sc.sign_product(rows=2)),
                           orders=engine.Orders(inner_log2=15, replicates=8))
    bar = est.lam_all.error
    assert bar < 2e-3
    assert np.abs(est.F_sym - 0.5 * np.eye(3)).max() <= 2 * bar
    assert abs(est.lam_all.value - 0.5) <= bar


def test_noisy_attention_F_agrees_with_a_seeded_monte_carlo_oracle():
    cc = api.compiled(api.builtin_channel("noisy-attention", noise=0.1))
    est = engine.stability(cc, orders=engine.Orders(inner_gh=24))
    mean, se = engine.stability_monte_carlo(cc, samples=3000, seed=11, n_grid=81)
    assert se[0, 0] < 0.05 * mean[0, 0]
    assert abs(mean[0, 0] - est.lam_all.value) <= 4 * se[0, 0] + est.lam_all.error
    assert est.lam_all.error < 1e-4


def test_noisy_attention_refinement_bar_covers_a_much_finer_rule():
    cc = api.compiled(api.builtin_channel("noisy-attention", noise=0.1))
    est = engine.stability(cc, orders=engine.Orders(inner_gh=24))
    fine = engine.stability_data(cc, engine.q0_moments(
        cc, engine.Orders(inner_gh=72, y_per_sd=3.0), seed=0))
    assert abs(est.lam_all.value - fine.lam_all) <= est.lam_all.error


@pytest.mark.parametrize("name", ["noisy-attention", "sign-product"])
def test_nishimori_identity_at_nonzero_Q(name):
    ch = api.builtin_channel(name, **({"noise": 0.2} if name == "noisy-attention" else {}))
    cc = api.compiled(ch)
    orders = (engine.Orders(inner_gh=48) if ch.kind == "noisy"
              else engine.Orders(inner_log2=12))
    for omega in ([0.3, -0.7], [1.1, 0.4]):
        gg, mdg = engine.nishimori(cc, Q=np.array([[0.4]]), omega=np.array(omega), orders=orders)
        assert gg[0, 0] > 1e-3
        assert np.abs(gg - mdg).max() <= 1e-6 * max(1.0, gg[0, 0])


def _bound_cases():
    return [("sign-product", sc.sign_product(), SMALL_DISCRETE),
            ("noisy-attention M=2", api.builtin_channel("noisy-attention", noise=0.05),
             engine.Orders(inner_gh=24)),
            ("noisy-attention M=3", api.builtin_channel("noisy-attention", tokens=3, noise=0.3),
             engine.Orders(inner_gh=10, outer_log2=8, replicates=4)),
            ("sign file", api.smi_channel_from_file(SIGN_FILE), SMALL_DISCRETE),
            ("attention file", api.smi_channel_from_file(ATTENTION_FILE, Delta=0.02),
             engine.Orders(inner_gh=24))]


@pytest.mark.parametrize("label,ch,orders", _bound_cases(), ids=[c[0] for c in _bound_cases()])
def test_bound_lambda_max_at_most_M_times_M_plus_1(label, ch, orders):
    # THEORY 2.2 / issue 14: at Q = 0, lambda_max(F) <= E ||Cov[z | y] - I||_F^2 <= E|z|^4 - M
    # = M (M + 1) for P = 1 (Jensen), for every channel
    est = engine.stability(api.compiled(ch), orders=orders)
    lam, g2 = est.lam_all, est.g_norm_blocks[0]
    assert 0 < lam.value <= g2.value + lam.error + g2.error
    assert g2.value <= ch.M * (ch.M + 1)


def test_noisy_deep_attention_is_block_diagonal_and_bounded():
    ch = api.builtin_channel("noisy-deep-attention", noise=0.1)
    assert ch.layers == ((0,), (1,))
    assert all(sc.flip_symmetric(ch, rows=b) for b in ch.layers)
    est = engine.stability(api.compiled(ch), orders=engine.Orders(inner_gh=8))
    assert est.coupling.value < 1e-10
    for lam, g2 in zip(est.lam_blocks, est.g_norm_blocks):
        assert 0 < lam.value <= g2.value + lam.error + g2.error <= 6 + g2.error
    # the last layer is learned first: its block's eigenvalue is the larger one
    assert est.lam_blocks[1].value > 5 * est.lam_blocks[0].value


def test_channel_file_round_trip_matches_the_builtins():
    file_ch = api.smi_channel_from_file(ATTENTION_FILE, tokens=3, Delta=0.25, beta=1.5)
    builtin = api.builtin_channel("noisy-attention", tokens=3, noise=0.25, beta=1.5)
    z = np.random.default_rng(0).standard_normal((16, 3))
    a, b = api.compiled(file_ch), api.compiled(builtin)
    assert np.allclose(a.forward(z), b.forward(z), rtol=1e-13, atol=1e-15)
    assert a.noise == b.noise == 0.25
    s_file = api.compiled(api.smi_channel_from_file(SIGN_FILE))
    s_builtin = api.compiled(sc.sign_product())
    z = np.random.default_rng(1).standard_normal((64, 2))
    assert np.array_equal(s_file.forward(z), s_builtin.forward(z))
    text = api.derive(file_ch)
    assert "Z_{out}" in text and "g_{out}" in text and "proved" in text


def test_forward_numpy_agrees_with_mpmath():
    cc = api.compiled(api.builtin_channel("noisy-deep-attention", skip=0.5, beta=2.0))
    z = np.random.default_rng(2).standard_normal((3, 4))
    num = cc.forward(z)
    mp = np.array([[float(v) for v in cc.forward_mp(*row)] for row in z])
    assert np.abs(num - mp).max() < 1e-13


def _sign_product_fixed_point(alpha: float) -> float:
    Q = 0.5
    for _ in range(400):
        Q = alpha * _sign_product_e_gg(Q) / (1 + alpha * _sign_product_e_gg(Q))
    return Q


def test_state_evolution_sign_product_below_and_above_pi2_over_8():
    orders = engine.Orders(inner_log2=11, outer_gh=8, replicates=3)
    below = api.fixed_point(sc.sign_product(), alpha=0.6, orders=orders, tol=1e-6)
    above = api.fixed_point(sc.sign_product(), alpha=2.5, orders=orders, tol=1e-5)
    assert below.value[0][0] < 1e-4
    exact = _sign_product_fixed_point(2.5)
    assert exact > 0.5
    assert above.error[0][0] < 0.05
    assert abs(above.value[0][0] - exact) <= above.error[0][0]


def _sign_product_e_gg(Q: float, n: int = 80) -> float:
    """Closed-form route for y = sign(z_11 z_12): with z_m ~ N(omega_m, V), P(y = +1) =
    Phi(a) Phi(b) + Phi(-a) Phi(-b) (a, b = omega / sqrt(V)), so g_out is explicit; E over
    omega ~ N(0, Q I_2) by an 80-node Gauss-Hermite rule per axis."""
    from scipy.stats import norm

    x, w = np.polynomial.hermite_e.hermegauss(n)
    w = w / w.sum()
    s = math.sqrt(1 - Q)
    a, b = np.meshgrid(math.sqrt(Q) * x / s, math.sqrt(Q) * x / s, indexing="ij")
    Zp = norm.cdf(a) * norm.cdf(b) + norm.cdf(-a) * norm.cdf(-b)
    d1 = norm.pdf(a) * (2 * norm.cdf(b) - 1) / s
    d2 = norm.pdf(b) * (2 * norm.cdf(a) - 1) / s
    den = Zp * (1 - Zp)
    total = np.where(den > 1e-300, (d1 ** 2 + d2 ** 2) / np.where(den > 1e-300, den, 1.0), 0.0)
    return float((np.outer(w, w) * total).sum())


def test_se_map_of_sign_product_agrees_with_its_closed_form():
    cc = api.compiled(sc.sign_product())
    exact = _sign_product_e_gg(0.5)
    assert exact == pytest.approx(_sign_product_e_gg(0.5, 40), abs=1e-8)
    est = engine.e_gg_estimate(cc, np.array([[0.5]]),
                               orders=engine.Orders(inner_log2=13, outer_gh=12, replicates=4))
    assert est.spread[0, 0] > 0          # randomised inner rule: the scramblings' spread counts
    assert est.error[0, 0] < 1e-3
    assert abs(est.value[0, 0] - exact) <= est.error[0, 0]


@pytest.mark.slow
def test_se_fixed_point_of_sign_product_agrees_with_its_closed_form():
    Q = _sign_product_fixed_point(2.0)
    r = api.fixed_point(sc.sign_product(), alpha=2.0)
    assert abs(r.value[0][0] - Q) <= r.error[0][0]


def test_weak_threshold_refused_without_zero_mean():
    z = sc.z_matrix(1, 2)
    ch = sc.noisy(name="shifted", P=1, M=2, output=[z[0, 0] + z[0, 1] ** 2], noise=0.1)
    assert not sc.flip_symmetric(ch)
    with pytest.raises(InputError, match="E\\[z \\| y\\] != 0"):
        api.weak_thresholds(ch, orders=engine.Orders(inner_gh=16))


def test_bad_input_is_refused_with_the_parameter_named(tmp_path):
    with pytest.raises(DomainError, match="noise"):
        api.builtin_channel("noisy-attention", noise=0.0)
    with pytest.raises(DomainError, match="tokens"):
        api.builtin_channel("noisy-attention", tokens=9)
    with pytest.raises(InputError, match="skip must be omitted"):
        api.builtin_channel("noisy-attention", skip=1.0)
    with pytest.raises(InputError, match="no such file"):
        api.smi_channel_from_file(str(tmp_path / "missing.py"))
    bad = tmp_path / "bad.py"
    bad.write_text("def channel(tokens):\n    return None\n")
    with pytest.raises(InputError, match="smi_channel"):
        api.smi_channel_from_file(str(bad))
    with pytest.raises(InputError, match="not a parameter"):
        api.smi_channel_from_file(ATTENTION_FILE, gamma=1.0)
    z = sc.z_matrix(1, 2)
    with pytest.raises(InputError, match="unknown symbol"):
        sc.noisy(name="x", P=1, M=2, output=[z[0, 0] * sp.Symbol("w")], noise=0.1)
    with pytest.raises(InputError, match="sum to"):
        sc.discrete(name="x", P=1, M=2, likelihood={1: sp.Heaviside(z[0, 0]), 2: sp.Integer(1)})
    with pytest.raises(DomainError, match="alpha"):
        api.fixed_point(sc.sign_product(), alpha=-1.0)


def test_cli_handlers_return_json_able_dicts():
    kw = {"channel_file": SIGN_FILE, "tokens": 2}
    out = handlers.threshold_weak(kw)
    json.dumps(out)
    (row,) = out["thresholds"]
    assert abs(row["value"] - math.pi ** 2 / 8) <= row["error"]
    assert "Z_{out}" in handlers.derive(kw)["markdown"]
    assert handlers.wants_general({"noise": 0.1}) and not handlers.wants_general({})
    res = handlers.check({"channel": "noisy-attention", "noise": 0.3, "tokens": 2})
    json.dumps(res)
    assert res["passed"], res["checks"]
    with pytest.raises(Exception, match="--param"):
        handlers.channel_from_options({"channel": "sign-product", "param": ("a=1",)})
