"""Deep AIM, two tied attention layers at T = 2 (THEORY 1.6): the fibre reduction, the Jacobian,
the integrability behaviour at det A = 0, and the per-layer small-width quantities S_l by two
routes (docs/deep_aim.md)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from aim_sym.numerics.deep_aim import (
    INNER_RULES,
    DeepAim,
    attention_matrix,
    congruence_jacobian,
    layer1_weights,
    output,
    posterior_means,
    small_width_overlaps,
    small_width_overlaps_mc,
    statistics,
    statistics_from_output,
    z_out_cutoff,
)
from aim_sym.numerics.records import InputError


def _sym(rng: np.random.Generator, n: int) -> np.ndarray:
    """n symmetric 2 x 2 matrices with Var h_ab = 1 + delta_ab."""
    g = rng.standard_normal((n, 2, 2))
    return (g + np.swapaxes(g, 1, 2)) / math.sqrt(2.0)


def _seen(h1: np.ndarray, h2: np.ndarray):
    d1, d2 = h1[:, 0, 0] - h1[:, 0, 1], h1[:, 1, 1] - h1[:, 0, 1]
    x = h2[:, 0, 0] + h2[:, 1, 1] - 2.0 * h2[:, 0, 1]
    y = h2[:, 0, 0] - h2[:, 1, 1]
    return (d1 + d2) / math.sqrt(8.0), (d1 - d2) / 2.0, x, y


@pytest.mark.parametrize("skip", [0.0, 0.4, 1.0, 2.5])
def test_reduced_statistics_match_the_model(skip):
    """y = softmax(A H2 A^T) is equivalent to z = (mu^2 X, mu((1 + c) Y + kappa X))."""
    rng = np.random.default_rng(3)
    h1, h2 = _sym(rng, 200), _sym(rng, 200)
    z = statistics_from_output(output(h1, h2, skip=skip, beta=1.3), beta=1.3)
    zz = statistics(*_seen(h1, h2), skip=skip, beta=1.3)
    np.testing.assert_allclose(z[0], zz[0], rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(z[1], zz[1], rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("skip", [0.3, 1.0, 2.0])
def test_determinant_jacobian_and_fibre(skip):
    """det A = (1 + c) mu; H -> A H A^T has Jacobian det(A)^3 = det(A)^(T+1); y is unchanged
    along M + t 1 1^T and along H2 + t v v^T, v = A^-1 1."""
    rng = np.random.default_rng(5)
    h1, h2 = _sym(rng, 20), _sym(rng, 20)
    xi1, xi2, _, _ = _seen(h1, h2)
    mu, _ = layer1_weights(xi1, xi2, skip=skip, beta=1.0)
    for k in range(20):
        a = attention_matrix(h1[k], skip=skip, beta=1.0)
        det = np.linalg.det(a)
        assert det == pytest.approx((1.0 + skip) * mu[k], rel=1e-12, abs=1e-14)
        assert np.linalg.det(congruence_jacobian(a)) == pytest.approx(det**3, rel=1e-10, abs=1e-14)
        v = np.linalg.solve(a, np.ones(2))
        y0 = output(h1[k], h2[k], skip=skip, beta=1.0)
        y1 = output(h1[k], h2[k] + 0.7 * np.outer(v, v), skip=skip, beta=1.0)
        np.testing.assert_allclose(y0, y1, atol=1e-12)
        # a direction off the fibre changes y
        y2 = output(h1[k], h2[k] + 0.7 * np.eye(2), skip=skip, beta=1.0)
        assert np.abs(y2 - y0).max() > 1e-6


@pytest.mark.parametrize("rule,skip,h", [("tanh-sinh-mu", 0.5, 0.1), ("tanh-sinh-mu", 2.0, 0.1),
                                         ("trapezoid-xi", 0.5, 0.35)])
def test_inner_rules_integrate_the_prior(rule, skip, h):
    """The inner rules reproduce H1's seen prior: mass 1, mean 0, unit variances."""
    mu, kappa, xi1, xi2, wt = INNER_RULES[rule](h, skip, 1.0)
    assert wt.sum() == pytest.approx(1.0, abs=1e-5)
    assert wt @ xi1 == pytest.approx(0.0, abs=1e-5)
    assert wt @ xi1**2 == pytest.approx(1.0, abs=1e-5)
    assert wt @ xi2**2 == pytest.approx(1.0, abs=1e-5)
    assert np.all(np.abs(mu - skip) < 1.0) and np.all(np.abs(kappa) < 1.0)


def test_no_skip_hides_layer_one():
    """skip = 0: z | H1 is N(0, Sigma(mu, kappa)) with Sigma invariant under (mu, kappa) ->
    (-mu, -kappa), which is H1's seen part -> its negative; so E[xi|y] = 0 and E[Y|y] = 0 for every
    y (S_1 = 0) while E[X|y] != 0. At skip = 0.5 the symmetry is gone."""
    z1, z2 = np.array([0.3, -1.2, 2.0]), np.array([0.5, 0.1, -3.0])
    m0 = posterior_means(z1, z2, skip=0.0, beta=1.0, h_in=0.2)
    for k in ("xi1", "xi2", "y"):
        assert np.abs(m0[k]).max() < 1e-8
    assert np.abs(m0["x"]).min() > 0.1
    m5 = posterior_means(z1, z2, skip=0.5, beta=1.0, h_in=0.2)
    assert np.abs(m5["xi1"]).min() > 0.1


def test_z_out_near_the_singular_set():
    """skip < 1: Z_out(z) at generic z ignores a cutoff |det A| < eps; at z = 0 it grows like
    eps^-2 (non-integrable |mu|^-3 on the line mu = 0); skip = 1: Z_out(0) is finite."""
    m = DeepAim(skip=0.5)
    generic = [z_out_cutoff(0.5, 0.3, model=m, cutoff=e, h_in=0.2) for e in (1e-2, 1e-6, 0.0)]
    assert generic[0] == pytest.approx(generic[2], rel=1e-10)
    assert generic[1] == pytest.approx(generic[2], rel=1e-10)
    # two decades of eps per factor 1e4 (the cutoff between two nodes costs a few per cent)
    z0 = [z_out_cutoff(0.0, 0.0, model=m, cutoff=e, h_in=0.2) for e in (1e-3, 1e-5, 1e-7)]
    assert math.log10(z0[1] / z0[0]) == pytest.approx(4.0, abs=0.05)
    assert math.log10(z0[2] / z0[1]) == pytest.approx(4.0, abs=0.05)
    finite = [z_out_cutoff(0.0, 0.0, model=DeepAim(skip=1.0), cutoff=0.0, h_in=h) for h in (0.2, 0.1)]
    assert math.isfinite(finite[0]) and finite[0] == pytest.approx(finite[1], rel=1e-6)


def test_small_width_overlaps_two_routes_skip_2():
    """S_l by the fibre quadrature: mass 1, E_y E[xi1|y] = 0, bound S_l <= 2, two inner rules agree,
    and a seeded Monte Carlo lands within 4 standard errors."""
    m = DeepAim(skip=2.0)
    q = small_width_overlaps(m, steps=((0.1, 0.5), (0.06, 0.35)))
    assert q["mass"].value == pytest.approx(1.0, abs=max(1e-6, 10 * q["mass"].error))
    assert abs(q["mean_xi1"].value) < 1e-6
    assert q["S1"].error < 1e-4 and q["S2"].error < 1e-4
    assert 0.0 < q["S1"].value < 2.0 and 0.0 < q["S2"].value <= 2.0
    r = small_width_overlaps(m, steps=((0.08, 0.25), (0.06, 0.2)), rule="tanh-sinh-mu")
    for k in ("S1", "S2"):
        assert abs(r[k].value - q[k].value) < 1e-5 + r[k].error + q[k].error
    mc = small_width_overlaps_mc(m, samples=8000, inner=1000, batches=16, seed=2)
    for k in ("S1", "S2"):
        assert abs(mc[k].value - q[k].value) < 4.0 * mc[k].error
    assert abs(mc["mean_xi1"].value) < 4.0 * mc["mean_xi1"].error
    assert q["alpha_bar_2"].value == pytest.approx(1.0 / (2.0 * q["S2"].value))


def test_large_skip_is_the_one_layer_softmax():
    """skip -> infinity: A ~ c I, layer 2 becomes the one-layer softmax (S_2 -> 2, alpha_bar = 1/4)
    and layer 1 is lost (S_1 -> 0 like 1/c^2)."""
    q10 = small_width_overlaps(DeepAim(skip=10.0), steps=((0.1, 0.5), (0.08, 0.5)))
    q5 = small_width_overlaps(DeepAim(skip=5.0), steps=((0.1, 0.5), (0.08, 0.5)))
    assert 2.0 - q10["S2"].value < 0.02 and 2.0 - q10["S2"].value < 2.0 - q5["S2"].value
    assert q10["S1"].value < 0.03 and q10["S1"].value < q5["S1"].value / 3.0


def test_bad_input():
    with pytest.raises(InputError):
        DeepAim(skip=-0.5)
    with pytest.raises(InputError):
        DeepAim(skip=1.0, beta=0.0)
    with pytest.raises(InputError):
        DeepAim(skip=1.0, delta=-1.0)
    with pytest.raises(InputError):
        small_width_overlaps(DeepAim(skip=1.0, delta=0.1))
    with pytest.raises(InputError):
        small_width_overlaps(DeepAim(skip=1.0), rule="simpson")
    with pytest.raises(InputError):
        small_width_overlaps_mc(DeepAim(skip=1.0), samples=1)


@pytest.mark.slow
def test_small_width_overlaps_singular_skip():
    """skip = 0.5 (det A vanishes on a line): the graded fibre quadrature converges and agrees with
    the seeded Monte Carlo; output noise lowers S_l (a garbling of y)."""
    m = DeepAim(skip=0.5)
    q = small_width_overlaps(m, steps=((0.08, 0.25), (0.06, 0.2)))
    assert q["S1"].error < 1e-4 and q["S2"].error < 1e-3
    mc = small_width_overlaps_mc(m, samples=20000, inner=2000, seed=4)
    for k in ("S1", "S2"):
        assert abs(mc[k].value - q[k].value) < 4.0 * mc[k].error + q[k].error
    noisy = small_width_overlaps_mc(DeepAim(skip=0.5, delta=0.1), samples=10000, inner=4000, seed=4)
    for k in ("S1", "S2"):
        assert noisy[k].value + 4.0 * noisy[k].error < q[k].value
