"""The shared SMI fibre kernel (numerics/smi_fibre.py, THEORY 2.3, 2.5) and the shared Monte Carlo
sampler of the oracles (tests/smi_mc_oracles.py): identities each piece must satisfy."""

import math

import numpy as np
import pytest
import smi_mc_oracles
from aim_sym.numerics import smi_fibre


@pytest.mark.parametrize("c, beta", [(1.0, 1.0), (0.1, 2.5), (3.0, 0.4)])
def test_fibre_point_inverts_attention_image(c, beta):
    rng = np.random.default_rng(1)
    z1, z2 = 2 * rng.standard_normal((2, 50, 2))
    h0, h1 = smi_fibre.attention_image(z1[:, 0], z1[:, 1], z2[:, 0], z2[:, 1], c, beta)
    Ai, det = smi_fibre.attention_inverse(z1[:, 0], z1[:, 1], c, beta)
    u, w = smi_fibre.fibre_point(Ai, h0, h1)
    assert np.max(np.abs(u - z2[:, 0]) + np.abs(w - z2[:, 1])) < 1e-12
    A = smi_fibre.attention_matrix(z1[:, 0], z1[:, 1], c, beta)
    assert np.allclose(np.linalg.det(A), det, rtol=1e-12)
    assert np.all(det >= c * (1 + c) * (1 - 1e-12))          # THEORY 2.3: det A >= c (1 + c)


def test_fibre_quadratics_match_the_fibre_point():
    rng = np.random.default_rng(2)
    z0, z1, h0, h1, o0, o1 = rng.standard_normal((6, 40))
    Ai, _ = smi_fibre.attention_inverse(z0, z1, 0.7, 1.3)
    u, w = smi_fibre.fibre_point(Ai, h0, h1)
    B, Y, K = smi_fibre.fibre_quadratics(Ai)
    hh = np.stack([h0 * h0, h0 * h1, h1 * h1])
    assert np.allclose((B * hh).sum(0), u * u + w * w, rtol=1e-13)
    assert np.allclose((Y * np.stack([o0 * h0, o0 * h1, o1 * h0, o1 * h1])).sum(0),
                       o0 * u + o1 * w, rtol=1e-12, atol=1e-13)
    for j, zz in enumerate((u * u, u * w, w * w)):
        assert np.allclose((np.stack(K[3 * j:3 * j + 3]) * hh).sum(0), zz, rtol=1e-12,
                           atol=1e-13)


def test_inverse_columns_is_the_fibre_at_every_depth():
    rng = np.random.default_rng(3)
    z = rng.standard_normal((6, 30))
    # L = 2: the columns are A(z_1)^{-1}, the Jacobian 1/det A
    Mi, jac = smi_fibre.inverse_columns([z[0], z[1]], 2, 0.5, 1.0)
    Ai, det = smi_fibre.attention_inverse(z[0], z[1], 0.5, 1.0)
    assert np.allclose(np.array(Mi), Ai, rtol=1e-12, atol=1e-14)
    assert np.allclose(jac, 1 / det, rtol=1e-12)
    # L = 3: the fibre point through h = g(z) returns the last layer's z_3
    h0, h1 = smi_fibre.functions(3)["forward"](*z, 0.5, 1.0)[:2]
    Mi, jac = smi_fibre.inverse_columns(list(z[:4]), 3, 0.5, 1.0)
    u, w = smi_fibre.fibre_point(Mi, h0, h1)
    assert np.max(np.abs(u - z[4]) + np.abs(w - z[5])) < 1e-11
    assert np.all(jac > 0)


def test_gauss_newton_precision_is_i_over_v1_plus_jtj_over_v2():
    rng = np.random.default_rng(4)
    J = rng.standard_normal((25, 2, 2))
    j = (J[:, 0, 0], J[:, 0, 1], J[:, 1, 0], J[:, 1, 1])
    P00, P01, P11 = smi_fibre.gauss_newton_precision(j, 0.6, 0.03)
    P = np.eye(2) / 0.6 + np.einsum("nai,naj->nij", J, J) / 0.03
    assert np.allclose(np.stack([P00, P01, P11]), [P[:, 0, 0], P[:, 0, 1], P[:, 1, 1]],
                       rtol=1e-13)


def test_gauss_hermite_rules():
    x, W = smi_fibre.gh(6)
    assert abs(W.sum() - 1) < 1e-14
    assert abs(W @ x**2 - 1) < 1e-13 and abs(W @ x**4 - 3) < 1e-13 and abs(W @ x**3) < 1e-14
    # ratio rule: int dh exp(-|h|^2 / (2 s^2)) = 2 pi s^2 (even integrand, half plane doubled)
    h0, h1, wh = smi_fibre.ratio_grid2(40, 2.7)
    assert np.all(h0 > 0)
    got = wh @ np.exp(-(h0**2 + h1**2) / (2 * 1.5**2))
    assert abs(got / (2 * math.pi * 1.5**2) - 1) < 1e-10


def test_montecarlo_oracles_share_the_sampler_and_agree():
    """At q1 = 0 both oracles estimate K2 on the same branch with independent draws: they must
    agree within their standard errors (4 SE); at L = 2 and 3 the columns of the depth-general
    sampler obey the Nishimori identity within 4 SE."""
    a = smi_mc_oracles.montecarlo_branch(0.8, samples=400, inner=200, seed=1)["K2"]
    b = smi_mc_oracles.montecarlo_stats(0.0, 0.8, samples=400, inner=200, seed=2)["K2"]
    assert abs(a.value - b.value) < 4 * math.hypot(a.error, b.error)
    assert a.error < 0.1 * a.value
    for layers in (2, 3):
        mc = smi_mc_oracles.montecarlo_branch(0.6, layers=layers, samples=300, inner=200, seed=3)
        assert abs(mc["nishimori"].value) < 4 * mc["nishimori"].error
        assert mc[f"K{layers}"].value > 0 and abs(mc["K1"].value) < 4 * mc["K1"].error
