"""Deep AIM (two tied attention layers, T = 2) with output noise at finite width (THEORY 1.1, 1.6;
docs/deep_aim.md, "Output noise"): the output overlaps E_l, the SE fixed point and its checks."""

from __future__ import annotations

import math

import numpy as np
import pytest
from aim_sym.numerics import deep_aim as da
from aim_sym.numerics import deep_aim_noisy as dn
from aim_sym.numerics import wishart
from aim_sym.numerics.records import InputError

FAST = {"m": 7, "scrambles": 6, "sizes": (2**9, 2**11)}
#: the noiseless SE fixed point at alpha = 0.1, c = 1, rho = (0.5, 0.5), shared tokens
#: (numerics.deep_aim_se.fixed_point, 2^11 x 8 points; bars 3.2e-4, 3.7e-4)
NOISELESS = (0.82349, 0.55611)


def _matrix(w1, w2, w3):
    """Symmetric 2 x 2 matrices from whitened coordinates (w1, w2 seen, w3 unseen):
    w1 = (h11 + h22 - 2 h12)/sqrt 8, w2 = (h11 - h22)/2, w3 = (h11 + h22 + 2 h12)/sqrt 8."""
    s = math.sqrt(2.0) * (w1 + w3)
    h12 = (w3 - w1) / math.sqrt(2.0)
    return np.stack([np.stack([(s + 2 * w2) / 2, h12], -1), np.stack([h12, (s - 2 * w2) / 2], -1)],
                    -2)


@pytest.mark.parametrize("skip, beta", [(1.0, 1.0), (0.3, 2.0)])
def test_clean_observations_are_the_model(skip, beta):
    """(s1, s2) = (y11 - y12, y22 - y21) of the literal model y = softmax(A H2 A^T), whatever the
    unseen whitened coordinates of H1 and H2 are."""
    rng = np.random.default_rng(1)
    w = rng.standard_normal((8, 50))
    h1, h2 = _matrix(w[0], w[1], w[2]), _matrix(w[3], w[4], w[5])
    y = da.output(h1, h2, skip=skip, beta=beta)
    s1, s2 = dn.clean_observations(w[0], w[1], w[3], w[4], skip=skip, beta=beta)
    np.testing.assert_allclose(s1, y[:, 0, 0] - y[:, 0, 1], atol=1e-12)
    np.testing.assert_allclose(s2, y[:, 1, 1] - y[:, 1, 0], atol=1e-12)


@pytest.mark.parametrize("rho", [(0.0, 0.0), (0.5, 0.5)])
def test_forms_agree_and_monte_carlo_route(rho):
    """At a finite-width point the variance, mean-square and Nishimori forms of E_l and of the
    cross term E[g_1 . g_2] agree within their bars (THEORY 1.2, Nishimori), and the seeded plain
    Monte Carlo route (iid outer points, the shared tokens' common part drawn explicitly, two
    halves of iid prior draws inside) agrees within 3 combined bars. rho = (0, 0) is the
    small-width law (no common part)."""
    kw = {"q1": 0.6, "q2": 0.9, "V1": 0.9, "V2": 0.6, "Delta": 0.1, "skip": 1.0, "rho": rho}
    r = dn.output_e_noisy(**kw, **FAST)
    mc = dn.output_e_noisy_mc(**kw, samples=3000, inner=2000, batches=10, seed=3)
    for i in (1, 2):
        e = r[f"E{i}"]
        for other in (r[f"mean_square_{i}"], r[f"nishimori_{i}"]):
            assert abs(e.value - other.value) < e.error + other.error, (i, e, other)
        assert abs(e.value - mc[f"E{i}"].value) < 3 * math.hypot(e.error, mc[f"E{i}"].error), \
            (i, e, mc[f"E{i}"])
        if rho == (0.0, 0.0):       # the bar's size at these points (shared: 7-11 %, inner K)
            assert e.error < 0.05 * e.value
    c = r["cross"]
    for other in (r["cross_mean_square"], r["cross_nishimori"]):
        assert abs(c.value - other.value) < c.error + other.error, (c, other)
    assert abs(c.value - mc["E12"].value) < 3 * math.hypot(c.error, mc["E12"].error), (c, mc["E12"])


def test_cross_term_zero_for_independent_tokens_positive_for_shared():
    """E[g_1 . g_2] vanishes without a common part (symmetry (x, b) -> (-x, -b)) and is positive
    with shared tokens (rho = (0.5, 0.5)), on one point set."""
    kw = {"q1": 0.7, "q2": 1.0, "V1": 0.8, "V2": 0.5, "Delta": 0.03, "skip": 1.0, **FAST, "m": 8}
    ind = dn.output_e_noisy(**kw, rho=(0.5, 0.5), design="independent")["cross"]
    sh = dn.output_e_noisy(**kw, rho=(0.5, 0.5))["cross"]
    assert abs(ind.value) < ind.error and sh.value > 3 * sh.error, (ind, sh)


def test_small_width_against_the_deep_aim_monte_carlo():
    """q = 0, V = 1: S_l(Delta) against numerics/deep_aim.py's seeded Monte Carlo of the noisy
    small-width channel (its own inner sampler over (H1, X, Y)), within 3 combined bars."""
    r = dn.small_width_noisy(Delta=0.1, skip=1.0, **FAST)
    mc = da.small_width_overlaps_mc(da.DeepAim(skip=1.0, delta=0.1), samples=2000, inner=2000,
                                    batches=10, seed=5)
    for key in ("S1", "S2"):
        assert abs(r[key].value - mc[key].value) < 3 * math.hypot(r[key].error, mc[key].error), \
            (key, r[key], mc[key])
    assert r["alpha_bar_1"].value == pytest.approx(1 / (2 * r["S1"].value))


def test_information_bounds_and_noise_monotone():
    """S_l(Delta) <= 2 (the unseen whitened coordinate keeps its prior variance) and a garbling
    loses information: S_l(0.3) < S_l(0.1) on the same points."""
    hi = dn.small_width_noisy(Delta=0.1, skip=2.0, **FAST)
    lo = dn.small_width_noisy(Delta=0.3, skip=2.0, **FAST)
    for key in ("S1", "S2"):
        assert 0 < lo[key].value < hi[key].value <= 2.0


@pytest.mark.slow
def test_stationarity_of_psi_out():
    """d Psi_out / d q_l = E_l / 2 along V_l = Q0_l - q_l (THEORY 1.1: stationarity of Phi gives
    the SE's q_hat_l = 2 alpha E_l), central differences (dq = 0.1; dq = 0.05 gives the same to
    1 % of E_l / 2) on one point set, within 3 standard errors of the paired differences plus
    E_l's bar (the tolerance is below half of E_l / 2, so a factor 2 in q_hat fails)."""
    q0, dq, pts = 1.5, 0.1, {"m": 9, "scrambles": 8, "sizes": (2**9, 2**11)}
    base = {"q1": 0.6, "q2": 0.8}
    e = dn.output_e_noisy(**base, V1=q0 - 0.6, V2=q0 - 0.8, Delta=0.2, skip=1.0, **pts)
    for i, key in ((1, "q1"), (2, "q2")):
        vals = []
        for sgn in (1, -1):
            q = dict(base)
            q[key] += sgn * dq
            r = dn.output_e_noisy(**q, V1=q0 - q["q1"], V2=q0 - q["q2"], Delta=0.2, skip=1.0,
                                  **pts)
            vals.append(np.array(r["psi_out"].extra["per_scramble"]))
        d = (vals[0] - vals[1]) / (2 * dq)
        se = d.std(ddof=1) / math.sqrt(d.size)
        half = e[f"E{i}"].value / 2
        assert abs(d.mean() - half) < 3 * se + e[f"E{i}"].error / 2, (i, d.mean(), se, half)
        assert 3 * se + e[f"E{i}"].error / 2 < 0.5 * half


@pytest.mark.parametrize("kw", [{"Delta": 0.0}, {"Delta": -1.0}, {"V1": 0.0}, {"q2": -0.1},
                                {"skip": -1.0}, {"sizes": (2**9, 2**9)}, {"m": 1},
                                {"rho": (0.7, 0.2)}, {"design": "tied"}])
def test_bad_input(kw):
    args = {"q1": 0.5, "q2": 0.5, "V1": 1.0, "V2": 1.0, "Delta": 0.1, "skip": 1.0, **FAST}
    args.update(kw)
    with pytest.raises(InputError):
        dn.output_e_noisy(**args)


def test_fixed_point_bad_input():
    with pytest.raises(InputError):
        dn.fixed_point_noisy(alpha=0.0, rho=(0.5, 0.5), Delta=0.1, skip=1.0)
    with pytest.raises(InputError):
        dn.fixed_point_noisy(alpha=0.1, rho=(0.5, 0.5), Delta=0.1, skip=1.0, init=(0.0, 1.0))
    with pytest.raises(InputError):
        dn.fixed_point_noisy(alpha=0.1, rho=(0.5, 0.5), Delta=0.1, skip=1.0, design="tied")


@pytest.mark.slow
def test_fixed_point_is_self_consistent_and_noise_raises_the_mmse():
    """alpha = 0.1, c = 1, rho = (0.5, 0.5), Delta = 0.1: the fixed point on one seed satisfies
    V_l = mmse_rho(1/(2 alpha E_l)) with E_l from an independent seed (within the bars), and both
    mmses exceed the noiseless ones (shared tokens, docs/deep_aim.md "Shared tokens": NOISELESS
    +- 4e-4)."""
    fp = dn.fixed_point_noisy(alpha=0.1, rho=(0.5, 0.5), Delta=0.1, skip=1.0, m=8, e_gen=False)
    v = [x["mmse"] for x in fp["layers"]]
    e = dn.output_e_noisy(q1=1.5 - v[0], q2=1.5 - v[1], V1=v[0], V2=v[1], Delta=0.1, skip=1.0,
                          m=8, seed=9, rho=(0.5, 0.5))
    jac = np.array(fp["jacobian_eigenvalues"])
    assert fp["stable"] and np.all(np.abs(jac) < 1)
    for i, x in enumerate(fp["layers"]):
        ei = e[f"E{i + 1}"]
        lo = wishart.mmse(1.0 / (0.2 * (ei.value + ei.error)), rho=0.5)
        hi = wishart.mmse(1.0 / (0.2 * (ei.value - ei.error)), rho=0.5)
        assert lo - x["mmse_error"] < x["mmse"] < hi + x["mmse_error"], (i, x, ei)
        assert x["mmse"] - x["mmse_error"] > NOISELESS[i] + 4e-4


def test_fixed_point_small_point_set():
    """On a small point set the fixed point solves V_l = mmse_rho(1/(2 alpha E_l)) with E_l
    recomputed on the same points, lies above the noiseless mmse (shared tokens, NOISELESS at
    alpha = 0.1) and below 1, and e_gen = its clean part + 4 Delta."""
    pts = {"m": 6, "scrambles": 4, "sizes": (2**9, 2**11)}
    fp = dn.fixed_point_noisy(alpha=0.1, rho=(0.5, 0.5), Delta=0.1, skip=1.0, **pts)
    v = [x["mmse"] for x in fp["layers"]]
    e = dn.output_e_noisy(q1=1.5 - v[0], q2=1.5 - v[1], V1=v[0], V2=v[1], Delta=0.1, skip=1.0,
                          **pts, rho=(0.5, 0.5))
    for i, x in enumerate(fp["layers"]):
        assert wishart.mmse(1.0 / (0.2 * e[f"E{i + 1}"].value), rho=0.5) == pytest.approx(
            x["mmse"], abs=1e-6)
        assert NOISELESS[i] + x["mmse_error"] < x["mmse"] < 1.0
        assert x["q"] == pytest.approx(1.5 - x["mmse"])
    assert fp["stable"] and math.isfinite(fp["phi"])
    assert fp["e_gen"] == pytest.approx(fp["e_gen_clean"] + 0.4)
