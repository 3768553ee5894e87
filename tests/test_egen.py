"""Generalisation error at the SE fixed point (THEORY 1.5): closed forms, seeded Monte Carlo,
limits, and the columns of se / curve."""

import itertools
import json
import math

import numpy as np
import pytest
from aim_sym.numerics import egen
from aim_sym.numerics import hardmax as hm

from aim_sym.channels import builtin, hardmax, noisy_hardmax, sign_channel
from aim_sym.models import AIM
from aim_sym.symbols import h_matrix


def softmax_rows(x, beta):
    z = np.exp(beta * (x - x.max(axis=1, keepdims=True)))
    return z / z.sum(axis=1, keepdims=True)


def monte_carlo_softmax(T, beta, q, V, *, n=200_000, seed=0):
    """(e_gen, se, plug-in, se) by sampling one row (diagonal variance doubled) and two
    independent h given omega: e_gen = T E[||s(h)||^2 - s(h) . s(h')]."""
    rng = np.random.default_rng(seed)
    var = np.array([2.0] + [1.0] * (T - 1))
    om = rng.standard_normal((n, T)) * np.sqrt(var * q)
    h1 = om + rng.standard_normal((n, T)) * np.sqrt(var * V)
    h2 = om + rng.standard_normal((n, T)) * np.sqrt(var * V)
    s1, s2, s0 = softmax_rows(h1, beta), softmax_rows(h2, beta), softmax_rows(om, beta)
    bo = T * ((s1 * s1).sum(1) - (s1 * s2).sum(1))
    pl = T * ((s1 - s0) ** 2).sum(1)
    return bo.mean(), bo.std() / math.sqrt(n), pl.mean(), pl.std() / math.sqrt(n)


@pytest.mark.parametrize("T,beta,q,V", [(2, 1.0, 0.5, 1.0), (3, 2.0, 1.2, 0.3),
                                        (4, 0.7, 0.5, 1.0), (3, 1.0, 0.0, 1.0)])
def test_softmax_against_monte_carlo(T, beta, q, V):
    e = egen.softmax(T=T, beta=beta, q=q, V=V)
    b, sb, p, sp_ = monte_carlo_softmax(T, beta, q, V, seed=T)
    assert e.error < 1e-6 and e.extra["plugin_error"] < 1e-6
    assert abs(e.value - b) < 4 * sb
    assert abs(e.extra["plugin"] - p) < 4 * sp_
    assert e.extra["plugin"] >= e.value - e.error  # the Bayes-optimal predictor is better


def test_softmax_bar_covers_a_finer_rule(monkeypatch):
    e = egen.softmax(T=3, beta=1.5, q=0.9, V=0.6)
    monkeypatch.setattr(egen, "SOFTMAX_STEPS", (0.25, 0.125))
    monkeypatch.setitem(egen._GH_NODES, 0.125, 64)
    egen._row_overlap.cache_clear()
    fine = egen.softmax(T=3, beta=1.5, q=0.9, V=0.6)
    egen._row_overlap.cache_clear()
    assert abs(fine.value - e.value) <= e.error
    assert abs(fine.extra["plugin"] - e.extra["plugin"]) <= e.extra["plugin_error"]


def _argmax_readout(ch):
    T = ch.tokens
    R = np.zeros((len(ch.outputs), T * T))
    for i, y in enumerate(ch.outputs):
        for a, b in enumerate(y):
            R[i, a * T + b - 1] = 1
    return R


@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_discrete_quadrature_against_T2_closed_forms(eps):
    ch = hardmax(tokens=2) if eps == 0 else noisy_hardmax(tokens=2, epsilon=eps)
    m = AIM(ch, rho=0.5)
    for q, V in [(0.5, 1.0), (1.0, 0.5), (1.4, 0.1)]:
        e = egen.discrete(m.compiled, _argmax_readout(ch), q=q, V=V, level=-1)
        bo, plug = egen.hardmax_t2(q=q, V=V, epsilon=eps)
        assert abs(e.value - bo) <= max(e.error, 1e-13)
        assert abs(e.extra["plugin"] - plug) <= e.extra["plugin_error"]
        assert e.extra["plugin_error"] < 5e-3


def test_hardmax_q0_against_the_cone_recursion_marginals():
    # e_gen at q = 0 from P(y_a = b) of the ordered-cone recursion (all 27 outcomes, T = 3)
    T = 3
    marg = np.zeros((T, T))
    for y in itertools.product(range(T), repeat=T):
        p = hm.outcome_moments(y, nodes=96)[0]
        for a, b in enumerate(y):
            marg[a, b] += p
    assert abs(egen.hardmax_q0(T) - (T - np.sum(marg**2))) < 1e-13
    assert abs(egen.hardmax_q0(2) - 1.0) < 1e-14  # each row a fair coin


def test_limits_alpha_zero_and_perfect_recovery():
    for name, kw in [("softmax", {"beta": 1.0}), ("hardmax", {}), ("linear", {})]:
        m = AIM(builtin(name, tokens=2, **kw), rho=0.5)
        r = m.state_evolution(alpha=0.0)  # q = rho: the prior predictive variance
        d = r.details
        if name == "hardmax":
            assert abs(d["e_gen"] - egen.hardmax_t2(q=0.5, V=1.0)[0]) <= d["e_gen_error"] + 1e-13
        elif name == "linear":
            assert d["e_gen"] == pytest.approx(6.0, abs=1e-14)
        else:
            b, sb, _, _ = monte_carlo_softmax(2, 1.0, 0.5, 1.0, seed=3)
            assert abs(d["e_gen"] - b) < 4 * sb
        # noiseless: e_gen -> 0 as q -> Q0
        small = m.generalisation_error(q=1.5 - 1e-4, V=1e-4)["e_gen"]
        assert 0 <= small < 0.03
    noisy = AIM(noisy_hardmax(tokens=2, epsilon=0.1), rho=0.5)
    assert noisy.generalisation_error(q=1.5 - 1e-6, V=1e-6)["e_gen"] == pytest.approx(
        4 * 0.1 * 0.9, abs=2e-3)  # the channel's own noise remains
    lin = AIM(builtin("linear-noisy", tokens=2, delta_out=0.5), rho=0.5)
    assert lin.generalisation_error(q=1.0, V=0.5)["e_gen"] == pytest.approx(6.0, abs=1e-14)


@pytest.mark.parametrize("name,kw,alphas", [("hardmax", {}, [0.05, 0.15, 0.3]),
                                            ("softmax", {"beta": 2.0}, [0.02, 0.06, 0.1])])
def test_e_gen_decreases_along_the_curve(name, kw, alphas):
    m = AIM(builtin(name, tokens=2, **kw), rho=0.5)
    rows = [dict(r) for r in m.curve(alphas=alphas, tol=1e-8)]
    e = [r["e_gen"] for r in rows]
    assert all(a > b for a, b in zip(e, e[1:]))
    assert all(r["e_gen_error"] < 1e-6 for r in rows)


def test_sign_channel_has_e_gen_by_the_arcsine_law():
    """y = sign(h12) in {+1, -1}: y and a fresh y' given the same omega are signs of two Gaussians
    of correlation q/(q + V), so E[y_hat^2] = (2/pi) asin(q/(q + V)) (issue 15: every channel)."""
    H = h_matrix(2)
    ch = sign_channel(name="sgn", tokens=2, forms=[H[0, 1]])
    m = AIM(ch, rho=0.5)
    out = m.generalisation_error(q=0.7, V=0.8)
    exact = 1 - 2 / math.pi * math.asin(0.7 / 1.5)
    assert out["e_gen"] == pytest.approx(exact, abs=max(4 * out["e_gen_error"], 1e-12))
    assert out["e_gen_error"] < 1e-6




def test_cli_se_json_and_curve_csv(tmp_path, run_cli):
    rc, out, err = run_cli(["se", "--channel", "hardmax", "--tokens", "2", "--rho", "0.5", "--alpha",
                        "0.1", "--json"])
    assert rc == 0, err
    out = json.loads(out)
    bo, plug = egen.hardmax_t2(q=out["q"], V=out["mmse"])
    assert abs(out["e_gen"] - bo) <= out["e_gen_error"] + 1e-12
    assert abs(out["e_gen_plugin"] - plug) <= out["e_gen_plugin_error"]
    assert all("e_gen" in f for f in out["fixed_points"])
    csv = tmp_path / "c.csv"
    rc, _, err = run_cli(["curve", "--channel", "linear", "--tokens", "2", "--rho", "0.5",
                      "--alphas", "0.02:0.06:3", "--out", str(csv)])
    assert rc == 0, err
    lines = csv.read_text().splitlines()
    head = lines[0].split(",")
    assert "e_gen" in head and "e_gen_error" in head
    for line in lines[1:]:
        row = dict(zip(head, line.split(",")))
        assert float(row["e_gen"]) == pytest.approx(6 * float(row["mmse"]), rel=1e-13)


def test_amp_test_error_estimator_is_unbiased():
    # S_hat = S: omega = h. Noiseless linear y = h with V > 0: the draws' mean differs from h
    # by noise only, and the finite-draw correction makes the Bayes estimate unbiased for 0
    from aim_sym.numerics import amp as amp_mod

    T, D = 2, 30
    rng = np.random.default_rng(4)
    S = amp_mod.sample_target(D, 0.5, rng)
    w = np.array([2.0, 1.0, 2.0])

    def draw_y(h, rng):
        Y = np.empty((h.shape[0], T, T))
        for k, (a, b) in enumerate([(0, 0), (0, 1), (1, 1)]):
            Y[:, a, b] = Y[:, b, a] = h[:, k]
        return Y.reshape(h.shape[0], T * T)

    r = amp_mod.test_error(draw_y, S=S, S_hat=S, V=0.3, weights=w, tokens=T, n_test=4000,
                           draws=8, rng=rng)
    assert abs(r["bayes"]) < 4 * r["bayes_stderr"]
    assert r["plugin"] == 0.0
    # the prior mean as estimate (V = 1): the test error is the prior predictive T(T+1) = 6
    r = amp_mod.test_error(draw_y, S=S, S_hat=math.sqrt(0.5) * np.eye(D), V=1.0, weights=w,
                           tokens=T, n_test=4000, draws=8, rng=rng)
    err2 = float(np.sum((S - math.sqrt(0.5) * np.eye(D)) ** 2) / D)  # finite-D "V"
    assert abs(r["bayes"] - 6 * err2) < 4 * r["bayes_stderr"]


def test_cli_amp_reports_test_error_beside_se(run_cli):
    rc, out, err = run_cli(["amp", "--channel", "hardmax", "--tokens", "2", "--rho", "0.5",
                        "--alpha", "0.2", "--dim", "40", "--seeds", "2", "--max-iter", "30",
                        "--json"])
    assert rc == 0, err
    out = json.loads(out)
    for k in ("test_error", "test_error_stderr", "test_error_plugin", "e_gen_se",
              "e_gen_se_error", "e_gen_se_plugin"):
        assert isinstance(out[k], float) and out[k] >= 0, k
    # the SE e_gen at the SE prediction is the T = 2 closed form
    q = 1.5 - out["se_prediction"]
    assert abs(out["e_gen_se"] - egen.hardmax_t2(q=q, V=out["se_prediction"])[0]) < 1e-8
