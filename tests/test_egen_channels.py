"""The generalisation error of every AIM channel file (THEORY 1.5; issue 15): discrete labels
read as real vectors, Gaussian read-outs y = L h + noise, polyhedral channels.

Independent routes: closed forms (sign channels: 1 - 2 asin(q / Q0) / pi per sign; the
trivariate orthant at tau = 0), seeded Monte Carlo (omega, then h | omega, then y), the
pair-polytope route of numerics/polyhedral_se (no quadrature over omega) and the limits
q = 0 (prior predictive variance) and q -> Q0."""

import json
import math
import os

import numpy as np
import pytest
import sympy as sp
from aim_sym.numerics import egen
from aim_sym.numerics import polyhedral_se as ps

from aim_sym.channel_file import from_file
from aim_sym.channels import discrete, gaussian, h_matrix, hardmax, noisy_hardmax, sign_channel
from aim_sym.models import AIM
from aim_sym.output import derive

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EX = os.path.join(ROOT, "examples", "channels")
SIGN = os.path.join(EX, "sign_similarity.py")
PROJ = os.path.join(EX, "noisy_projection.py")
NOISY_HM = os.path.join(EX, "noisy_hardmax.py")
POLY = os.path.join(EX, "polyhedral", "three_halfspaces.py")
W = np.array([2.0, 1.0, 2.0])  # Var h / V in the order h11, h12, h22


def sign_closed_forms(q, V):
    """(e_gen, e_plugin) of y = sign(f . h) for any form f: with r = q / Q0, the Bayes error is
    1 - 2 asin(r) / pi, the plug-in 4 P(sign differs) = 4 acos(sqrt r) / pi."""
    r = q / (q + V)
    return 1 - 2 * math.asin(r) / math.pi, 4 * math.acos(math.sqrt(r)) / math.pi


def draw(q, V, n, seed):
    rng = np.random.default_rng(seed)
    om = rng.standard_normal((n, 3)) * np.sqrt(q * W)
    return rng, om, om + rng.standard_normal((n, 3)) * np.sqrt(V * W)


def inside(h, tau=1.0):
    return ((h[:, 0] > h[:, 1]) & (h[:, 2] > h[:, 1]) & (h[:, 0] + h[:, 2] > tau)).astype(float)


def mean_se(x):
    return float(x.mean()), float(x.std(ddof=1) / math.sqrt(len(x)))


# ----------------------------------------------------------------------------- discrete labels
def test_sign_similarity_against_closed_forms():
    m = AIM(from_file(SIGN, tokens=2), rho=0.5)
    for q, V in [(0.3, 1.2), (0.9, 0.6), (1.4, 0.1)]:
        d = m.generalisation_error(q=q, V=V, method=True)
        bo, plug = sign_closed_forms(q, V)
        assert abs(d["e_gen"] - bo) <= d["e_gen_error"] + 1e-13 and d["e_gen_error"] < 1e-8
        assert abs(d["e_gen_plugin"] - plug) <= d["e_gen_plugin_error"] < 1e-10
        assert "label" in d["e_gen_method"]


def test_noisy_sign_labels_against_closed_forms():
    # y = sign(h12 - h11) flipped with probability eps: E[y | omega] shrinks by (1 - 2 eps);
    # the plug-in draws its own flip. Each row of noisy hardmax at T = 2 is such a sign with
    # half its squared distances (one-hot rows differ by 2, signs by 4), and there are two
    # rows: egen.hardmax_t2 is this channel's e_gen and plug-in
    h = h_matrix(2)
    eps = sp.Symbol("eps", nonnegative=True)
    up = sp.Heaviside(h[0, 1] - h[0, 0])
    ch = discrete(name="noisy-sign", tokens=2, params={eps: 0.1},
                  likelihood={1: (1 - eps) * up + eps * (1 - up),
                              -1: eps * up + (1 - eps) * (1 - up)})
    m = AIM(ch, rho=0.5)
    for q, V in [(0.5, 1.0), (1.2, 0.3)]:
        bo, plug = egen.hardmax_t2(q=q, V=V, epsilon=0.1)
        d = m.generalisation_error(q=q, V=V)
        assert abs(d["e_gen"] - bo) <= d["e_gen_error"] + 1e-13
        assert abs(d["e_gen_plugin"] - plug) <= d["e_gen_plugin_error"] < 1e-10


def test_tuple_labels_are_vectors():
    # two signs at T = 2: labels (+-1, +-1) are not argmax tuples; ||y - y_hat||^2 splits per
    # sign, each with the closed form above
    h = h_matrix(2)
    ch = sign_channel(name="two-signs", tokens=2, forms=[h[0, 1] - h[0, 0], h[1, 1] - h[0, 1]])
    m = AIM(ch, rho=0.5)
    assert m.egen_channel.readout.shape == (4, 2)
    d = m.generalisation_error(q=0.8, V=0.7)
    bo, plug = sign_closed_forms(0.8, 0.7)
    assert abs(d["e_gen"] - 2 * bo) <= d["e_gen_error"] + 1e-13
    assert abs(d["e_gen_plugin"] - 2 * plug) <= d["e_gen_plugin_error"]


def test_thresholded_sign_against_bivariate_closed_forms():
    """y = sign(h12 - h11 - t): s = h12 - h11 has Var 3 Q0; two draws given omega have
    correlation q / Q0, s(h) and s(omega) correlation sqrt(q / Q0). e_gen = 4 P(y != y') / 2,
    e_plugin = 4 P(y(h) != y(omega)), P(differ) from Phi and Phi2 (the plug-in's steps sit off
    the omega nodes here: it comes from pair polytopes in (h, omega))."""
    from aim_sym.numerics.special_functions import np_phi2
    from scipy.special import ndtr

    h = h_matrix(2)
    t = 0.5
    m = AIM(sign_channel(name="offset", tokens=2, forms=[h[0, 1] - h[0, 0] - t]), rho=0.5)
    for q, V in [(0.3, 1.2), (0.9, 0.6)]:
        Q0 = q + V
        a, ao = -t / math.sqrt(3 * Q0), -t / math.sqrt(3 * q)
        bo = 4 * (ndtr(a) - float(np_phi2(a, a, q / Q0)))
        plug = 4 * (ndtr(a) + ndtr(ao) - 2 * float(np_phi2(a, ao, math.sqrt(q / Q0))))
        d = m.generalisation_error(q=q, V=V, V_error=1e-9, method=True)
        assert abs(d["e_gen"] - bo) <= d["e_gen_error"] + 1e-13 and d["e_gen_error"] < 1e-8
        assert abs(d["e_gen_plugin"] - plug) <= d["e_gen_plugin_error"] < 1e-6
        assert "(h, omega)" in d["e_gen_method"]
    # q = 0: omega = 0 lies off the hyperplane (0 - 0 - t < 0): y(omega) = -1 surely
    d = m.generalisation_error(q=0.0, V=1.5)
    assert abs(d["e_gen_plugin"] - 4 * ndtr(-t / math.sqrt(4.5))) <= d["e_gen_plugin_error"]


def test_sign_similarity_monte_carlo_with_the_engine():
    """omega ~ N(0, q C), h | omega, y = sign(h12 - h11); E[y | omega] = Z_+ - Z_- from the
    compiled channel at m = basis . omega; e_gen within 4 standard errors."""
    ch = from_file(SIGN, tokens=2)
    m = AIM(ch, rho=0.5)
    q, V = 0.7, 0.8
    rng, om, h = draw(q, V, 200_000, seed=11)
    basis = np.array(sp.Matrix(derive(ch).basis).evalf(), dtype=float)
    mm = om @ basis.T
    Z = m.compiled.z_grad(*[mm[:, k] for k in range(mm.shape[1])], V)[:2]
    labels = list(ch.outputs)
    yhat = sum(float(y) * np.broadcast_to(np.asarray(z, float), (len(om),))
               for y, z in zip(labels, Z))
    y = np.sign(h[:, 1] - h[:, 0])
    d = m.generalisation_error(q=q, V=V)
    b, sb = mean_se((y - yhat) ** 2)
    assert abs(d["e_gen"] - b) < 4 * sb + d["e_gen_error"] and sb < 5e-3
    p, spl = mean_se((y - np.sign(om[:, 1] - om[:, 0])) ** 2)
    assert abs(d["e_gen_plugin"] - p) < 4 * spl + d["e_gen_plugin_error"]


def test_argmax_labels_keep_their_one_hot_meaning():
    T = 2
    for ch in (hardmax(tokens=2), noisy_hardmax(tokens=2, epsilon=0.1),
               from_file(NOISY_HM, tokens=2)):
        m = AIM(ch, rho=0.5)
        R = np.zeros((len(ch.outputs), T * T))
        for i, y in enumerate(ch.outputs):
            for a, b in enumerate(y):
                R[i, a * T + b - 1] = 1.0
        assert np.array_equal(m.egen_channel.readout, R)
        eps = dict(m.values).get("epsilon", dict(m.values).get("eps", 0.0))
        for q, V in [(0.5, 1.0), (1.0, 0.5)]:
            direct = egen.generalisation_error(egen.EgenChannel("discrete", T, readout=R),
                                               m.compiled, q=q, V=V, level=-1)
            d = m.generalisation_error(q=q, V=V)
            assert abs(d["e_gen"] - direct.value) <= 1e-12
            assert abs(d["e_gen_error"] - direct.error) <= 1e-12
            bo, _ = egen.hardmax_t2(q=q, V=V, epsilon=eps)
            assert abs(d["e_gen"] - bo) <= d["e_gen_error"] + 1e-12


def test_labels_that_are_not_numbers_keep_null_and_say_why():
    h = h_matrix(2)
    up = sp.Heaviside(h[0, 1] - h[0, 0])
    m = AIM(discrete(name="words", tokens=2, likelihood={"up": up, "down": 1 - up}), rho=0.5)
    d = m.generalisation_error(q=0.7, V=0.8, method=True)
    assert d["e_gen"] is None and d["e_gen_plugin"] is None
    assert "'up' cannot be read as a number" in d["e_gen_method"]
    ragged = discrete(name="ragged", tokens=2, likelihood={(1.0, 2.0): up, 3.0: 1 - up})
    d = AIM(ragged, rho=0.5).generalisation_error(q=0.7, V=0.8, method=True)
    assert d["e_gen"] is None and "different lengths" in d["e_gen_method"]


def test_limits_of_a_discrete_file():
    m = AIM(from_file(SIGN, tokens=2), rho=0.5)
    # q = 0: the prior predictive variance E y^2 - (E y)^2 = 1 (a fair sign); the plug-in
    # compares two independent fair signs (omega = 0 is on the hyperplane: the tie is split)
    d = m.generalisation_error(q=0.0, V=1.5)
    assert abs(d["e_gen"] - 1.0) <= d["e_gen_error"] + 1e-14
    assert abs(d["e_gen_plugin"] - 2.0) <= d["e_gen_plugin_error"] + 1e-14
    # q -> Q0, noiseless: e_gen -> 0 like sqrt(V)
    small = m.generalisation_error(q=1.5 - 1e-4, V=1e-4)
    assert abs(small["e_gen"] - sign_closed_forms(1.5 - 1e-4, 1e-4)[0]) <= small["e_gen_error"]
    assert 0 < small["e_gen"] < 0.02


# ----------------------------------------------------------------------------- Gaussian read-outs
def test_gaussian_readout_is_exact_and_matches_monte_carlo():
    ch = from_file(PROJ, tokens=2)
    m = AIM(ch, rho=0.5)
    L = np.array(sp.Matrix(ch.statistics).evalf(), dtype=float)
    N = np.array(sp.Matrix(ch.noise).subs({s: v for s, v in ch.params}).evalf(), dtype=float)
    q, V = 0.9, 0.6
    d = m.generalisation_error(q=q, V=V, V_error=1e-3, method=True)
    exact = V * float(np.sum(L * L * W)) + float(np.trace(N))
    assert d["e_gen"] == pytest.approx(exact, rel=1e-14)
    assert d["e_gen_plugin"] == pytest.approx(exact + float(np.trace(N)), rel=1e-14)
    # the fixed point's error enters through the exact slope tr(L C L^T)
    assert d["e_gen_error"] >= 2 * float(np.sum(L * L * W)) * 1e-3
    # seeded Monte Carlo: two draws y, y' given omega (E||y - E[y|omega]||^2 = E||y - y'||^2 / 2)
    # and the plug-in y(omega) with its own noise
    n = 1_000_000
    rng, om, h = draw(q, V, n, seed=5)
    h2 = om + rng.standard_normal((n, 3)) * np.sqrt(V * W)
    chol = np.linalg.cholesky(N)
    y1 = h @ L.T + rng.standard_normal((n, 2)) @ chol.T
    y2 = h2 @ L.T + rng.standard_normal((n, 2)) @ chol.T
    y0 = om @ L.T + rng.standard_normal((n, 2)) @ chol.T
    b, sb = mean_se(np.sum((y1 - y2) ** 2, axis=1) / 2)
    p, spl = mean_se(np.sum((y1 - y0) ** 2, axis=1))
    assert abs(d["e_gen"] - b) < 4 * sb and sb < 0.01
    assert abs(d["e_gen_plugin"] - p) < 4 * spl
    # q -> Q0: the noise remains; a noiseless read-out goes to 0
    assert m.generalisation_error(q=1.5, V=0.0)["e_gen"] == pytest.approx(np.trace(N))
    h_ = h_matrix(2)
    clean = AIM(gaussian(name="clean", tokens=2, statistics=[h_[0, 1] - h_[0, 0]]), rho=0.5)
    assert clean.generalisation_error(q=1.5 - 1e-9, V=1e-9)["e_gen"] == pytest.approx(3e-9)


# ----------------------------------------------------------------------------- polyhedral
def test_polyhedral_e_gen_against_the_pair_route_and_monte_carlo():
    """Gauss-Hermite over omega (orders 6 and 8 here: the SE's rule at lower cost) against the
    pair-polytope route and a seeded Monte Carlo of two draws given omega."""
    ch = AIM(from_file(POLY, tokens=2), rho=0.5).polyhedral
    R = np.array([[float(y)] for y in ch.outcomes])
    q, V = 0.5, 1.0
    e = ps.generalisation_error(ch, R, q=q, V=V, orders=(6, 8))
    j = ps.joint_bayes_error(ch, R, q=q, V=V)
    assert abs(e.value - j.value) <= e.error + j.error and e.error < 1e-4 and j.error < 1e-4
    n = 1_000_000
    rng, om, h = draw(q, V, n, seed=7)
    y1 = inside(h)
    y2 = inside(om + rng.standard_normal((n, 3)) * np.sqrt(V * W))
    b, sb = mean_se((y1 - y2) ** 2 / 2)
    assert abs(e.value - b) < 4 * sb + e.error and sb < 5e-4
    p, spl = mean_se((y1 - inside(om)) ** 2)
    assert abs(e.extra["plugin"] - p) < 4 * spl + e.extra["plugin_error"]
    assert e.extra["plugin"] > e.value  # the Bayes predictor is better


def test_polyhedral_limits():
    # q = 0, tau = 0: P(y = 1) is the trivariate orthant of (h11 - h12, h22 - h12, h11 + h22)
    # with correlations 1/3, 1/sqrt 3, 1/sqrt 3; e_gen = P (1 - P), and the plug-in compares
    # y(h) with y(0) = 1 with probability P (the tie at h = 0 split as a Gaussian would)
    P = 1 / 8 + (math.asin(1 / 3) + 2 * math.asin(1 / math.sqrt(3))) / (4 * math.pi)
    ch0 = AIM(from_file(POLY, tokens=2, tau=0), rho=0.5).polyhedral
    e = ps.generalisation_error(ch0, [1.0, 0.0], q=0.0, V=1.5)
    assert abs(e.value - P * (1 - P)) <= e.error and e.error < 1e-9
    assert abs(e.extra["plugin"] - 2 * P * (1 - P)) <= e.extra["plugin_error"]
    # tau = 1: y(0) = 0 (0 + 0 > 1 fails), so e_plugin = P(y = 1); P by seeded Monte Carlo
    ch1 = AIM(from_file(POLY, tokens=2), rho=0.5).polyhedral
    e = ps.generalisation_error(ch1, [1.0, 0.0], q=0.0, V=1.5)
    _, _, h = draw(0.0, 1.5, 1_000_000, seed=3)
    p, sp_ = mean_se(inside(h))
    assert abs(e.value - p * (1 - p)) < 4 * sp_ + e.error
    assert abs(e.extra["plugin"] - p) < 4 * sp_ + e.extra["plugin_error"]
    # q -> Q0 (noiseless): e_gen -> 0 (pair route; the omega rule needs V >= V_MIN)
    small = ps.joint_bayes_error(ch1, [1.0, 0.0], q=1.5 - 1e-3, V=1e-3)
    assert 0 < small.value < 0.01 and small.error < 1e-3


def test_polyhedral_public_path_fills_e_gen(monkeypatch):
    """AIM.generalisation_error routes a polyhedral channel to the polytope engine (orders cut
    to 4 and 6 here for time) and propagates the fixed point's error through the slope."""
    monkeypatch.setattr(ps, "EGEN_ORDERS", (4, 6))
    m = AIM(from_file(POLY, tokens=2), rho=0.5)
    d = m.generalisation_error(q=0.77, V=0.73, V_error=1e-3, method=True)
    j = ps.joint_bayes_error(m.polyhedral, [1.0, 0.0], q=0.77, V=0.73)
    assert abs(d["e_gen"] - j.value) <= d["e_gen_error"] + j.error
    assert d["e_gen_error"] > 2e-3 * 0.03  # the slope (about 0.07) times 2 V_error is in
    assert d["e_gen_plugin"] > d["e_gen"] and "Gauss-Hermite" in d["e_gen_method"]


# ----------------------------------------------------------------------------- command line
def test_cli_se_channel_files_have_numeric_e_gen(run_cli):
    rc, out, err = run_cli(["se", "--channel-file", SIGN, "--rho", "0.5", "--alpha", "0.3",
                            "--json"])
    assert rc == 0, err
    o = json.loads(out)
    assert isinstance(o["e_gen"], float) and isinstance(o["e_gen_error"], float)
    bo, plug = sign_closed_forms(o["q"], o["mmse"])
    assert abs(o["e_gen"] - bo) <= o["e_gen_error"] + 1e-13
    assert abs(o["e_gen_plugin"] - plug) <= o["e_gen_plugin_error"]
    assert all(isinstance(f["e_gen"], float) for f in o["fixed_points"])
    rc, out, err = run_cli(["se", "--channel-file", PROJ, "--rho", "0.5", "--alpha", "0.3",
                            "--json"])
    assert rc == 0, err
    o = json.loads(out)
    # y = L h + noise: V tr(L C L^T) + tr(noise); here L C L^T has trace 4 + 3 = 7
    assert o["e_gen"] == pytest.approx(7 * o["mmse"] + 0.5, rel=1e-13)
    assert o["e_gen_plugin"] == pytest.approx(o["e_gen"] + 0.5, rel=1e-13)


@pytest.mark.slow
def test_cli_se_polyhedral_has_numeric_e_gen(run_cli):
    """aim-sym se on the polyhedral example (~1-2 min): e_gen on the SE's Gauss-Hermite rule
    against the pair-polytope route at the same fixed point."""
    rc, out, err = run_cli(["se", "--channel-file", POLY, "--rho", "0.5", "--alpha", "0.3",
                            "--json"])
    assert rc == 0, err
    o = json.loads(out)
    assert isinstance(o["e_gen"], float) and 0 < o["e_gen_error"] < 1e-4
    ch = AIM(from_file(POLY, tokens=2), rho=0.5).polyhedral
    j = ps.joint_bayes_error(ch, [1.0, 0.0], q=o["q"], V=o["mmse"])
    assert abs(o["e_gen"] - j.value) <= o["e_gen_error"] + j.error
    assert abs(o["e_gen_plugin"] - ps.plugin_error(ch, [1.0, 0.0], q=o["q"],
                                                   V=o["mmse"]).value) <= o["e_gen_plugin_error"]
