"""Gaussian polytope moments (numerics/polytope.py; THEORY 1.1, 1.4): closed forms, hardmax at
T = 2 and 3 against the ordered-cone modules, seeded Monte Carlo, finite differences, Nishimori."""

from __future__ import annotations

import itertools
import math

import mpmath
import numpy as np
import pytest
from aim_sym.numerics import hardmax, hardmax_se
from aim_sym.numerics import polytope as pt
from aim_sym.numerics.records import InputError
from aim_sym.numerics.special_functions import mp_phi2
from scipy.special import ndtr


def _phi(x):
    return math.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)


def test_one_half_space_is_the_truncated_normal():
    """m = 1: Z = Phi(t), g = -a phi(t) / (s Phi(t)), dg = -(a a^T / s^2) (t r + r^2), r = phi/Phi."""
    A = np.array([[1.0, -2.0, 0.5]])
    b = np.array([0.3])
    cov = np.diag([0.7, 1.3, 2.0])
    om = np.array([[0.2, -0.1, 0.4], [3.0, -2.0, 0.0]])
    mo = pt.gaussian_polytope(A=A, b=b, omega=om, cov=cov)
    s = math.sqrt(float(A[0] @ cov @ A[0]))
    for n in range(2):
        t = float(b[0] - A[0] @ om[n]) / s
        r = _phi(t) / ndtr(t)
        assert abs(mo.mass[n] - ndtr(t)) <= 1e-15
        np.testing.assert_allclose(mo.g_out[n], -A[0] * r / s, rtol=1e-13, atol=1e-15)
        np.testing.assert_allclose(mo.dg_out[n], -np.outer(A[0], A[0]) / s**2 * (t * r + r * r),
                                   rtol=1e-12, atol=1e-15)
    # the whitened entry point: P(z_1 - 2 z_2 <= 0.5)
    v, e = pt.polytope_mass(B=[[1.0, -2.0]], c=[0.5])
    assert abs(v[0] - ndtr(0.5 / math.sqrt(5.0))) <= 1e-15 and e[0] <= 1e-15
    with pytest.raises(InputError, match="order"):
        _ = pt.gaussian_polytope(A=A, b=b, omega=om, cov=cov, order=0).g_out


@pytest.mark.parametrize("rho", [0.3, -0.6, 0.9, 0.97, -0.995])
def test_two_half_spaces_reproduce_phi2(rho):
    """m = 2: Phi2 at 30 digits (|rho| > 0.9 goes through the iterated rule)."""
    rng = np.random.default_rng(int(1000 * abs(rho)))
    A = np.array([[1.0, 0.0], [rho, math.sqrt(1 - rho**2)]])
    ab = rng.normal(size=(3, 2)) * 1.5
    om = -np.linalg.solve(A, ab.T).T  # c = b - A omega = (a, b)
    mo = pt.gaussian_polytope(A=A, b=[0.0, 0.0], omega=om, cov=np.eye(2), order=0)
    with mpmath.workdps(30):
        exact = np.array([float(mp_phi2(a, b, rho)) for a, b in ab])
    assert np.all(np.abs(mo.mass - exact) <= 1e-14)
    assert np.all(np.abs(mo.mass - exact) <= mo.mass_error)


def test_hardmax_T2_is_the_closed_form_of_hardmax_py():
    """omega = 0, V = 1: P(y) and E[h_ab 1_y] of the ordered-cone recursion (1e-13)."""
    ch = pt.hardmax_channel(2)
    out = pt.channel_z_out(ch, omega=np.zeros((1, 3)), V=1.0)
    W = np.array(ch.weights)
    for k, y in enumerate(out.y):
        ref = hardmax.outcome_moments(y, nodes=128)
        assert abs(out.Z[k, 0] - ref[0]) <= 1e-13
        assert out.Z_error[k, 0] <= 1e-14
        # E[(h - omega) 1_y] = Sigma g Z
        np.testing.assert_allclose(W * out.g[k, 0] * out.Z[k, 0], ref[1:], atol=1e-13)


def test_hardmax_T2_at_random_omega_matches_hardmax_se():
    rng = np.random.default_rng(7)
    om = rng.normal(size=(5, 3)) * 1.2
    V = 0.45
    out = pt.channel_z_out(pt.hardmax_channel(2), omega=om, V=V)
    ref = hardmax_se.z_out(T=2, omega=om, V=V, nodes=400)
    idx = [ref["y"].index(y) for y in out.y]
    np.testing.assert_allclose(out.Z, ref["Z"][idx], atol=1e-13)
    live = ref["Z"][idx] > 1e-8
    assert np.all(np.abs(out.g - ref["g"][idx])[live] <= 1e-9)


def _nishimori(out):
    """sum_y Z (g g^T + dg) (must vanish) and sum_y Z g (must vanish), at each omega."""
    Z, g, dg = out.Z, out.g, out.dg
    first = np.einsum("yn,yni->ni", Z, g)
    second = np.einsum("yn,ynij->nij", Z, g[..., :, None] * g[..., None, :] + dg)
    return first, second


def _three_half_spaces():
    W = np.array([[1.0, 0.4, -0.3], [-0.2, 1.0, 0.5], [0.6, -0.7, 1.0]])
    return pt.sign_pattern_channel(W, thresholds=[0.2, -0.3, 0.1], weights=[1.0, 2.0, 1.5])


def test_sign_pattern_three_half_spaces_identities():
    """r = 3 (iterated rule): sum_y Z = 1, both Nishimori identities, to ~1e-12."""
    ch = _three_half_spaces()
    rng = np.random.default_rng(11)
    om = rng.normal(size=(3, 3))
    out = pt.channel_z_out(ch, omega=om, V=0.8)
    assert np.all(np.abs(out.Z.sum(axis=0) - 1.0) <= 1e-12)
    assert np.all(out.Z_error <= 1e-10)
    # the bars cover the error: a finer rule (24 nodes on 24 pieces) agrees within them
    fine = pt.channel_z_out(ch, omega=om[:1], V=0.8, order=1,
                            rule=pt.PolytopeRule(nodes=24, coarse_nodes=16, pieces=24))
    assert np.all(np.abs(out.Z[:, :1] - fine.Z) <= out.Z_error[:, :1])
    assert np.all(np.abs(out.g[:, :1] - fine.g) <= out.g_error[:, :1])
    first, second = _nishimori(out)
    assert np.abs(first).max() <= 1e-12
    assert np.abs(second).max() <= 1e-12
    assert np.all(out.g_error < 1e-9)
    assert np.all(out.dg_error < 1e-8)


def test_g_and_dg_are_derivatives_of_log_z():
    """Central differences (Richardson) of log Z against g, and of g against dg."""
    ch = _three_half_spaces()
    om = np.array([0.3, -0.5, 0.2])
    V = 0.8
    h = 1e-3
    base = pt.channel_z_out(ch, omega=om[None], V=V)

    def at(x):
        return pt.channel_z_out(ch, omega=x[None], V=V)

    for k in range(3):
        e = np.zeros(3)
        e[k] = 1.0
        outs = {s: at(om + s * h * e) for s in (-2, -1, 1, 2)}
        lz = {s: np.log(o.Z[:, 0]) for s, o in outs.items()}
        d_lz = (8 * (lz[1] - lz[-1]) - (lz[2] - lz[-2])) / (12 * h)
        np.testing.assert_allclose(d_lz, base.g[:, 0, k], rtol=1e-7, atol=1e-8)
        d_g = (8 * (outs[1].g - outs[-1].g) - (outs[2].g - outs[-2].g))[:, 0] / (12 * h)
        np.testing.assert_allclose(d_g, base.dg[:, 0, :, k], rtol=1e-6, atol=1e-7)


def test_seeded_monte_carlo_within_four_standard_errors():
    """Z and the truncated first moment of a 3-half-space piece against 400 000 seeded samples."""
    ch = _three_half_spaces()
    piece = ch.pieces[3]
    om = np.array([0.1, 0.4, -0.2])
    V = 0.8
    cov = V * np.diag(ch.weights)
    mo = pt.gaussian_polytope(A=piece.A, b=piece.b, omega=om[None], cov=cov)
    rng = np.random.default_rng(2026)
    h = om + rng.normal(size=(400_000, 3)) * np.sqrt(np.diag(cov))
    ind = np.all(h @ np.asarray(piece.A).T <= np.asarray(piece.b), axis=1)
    se_z = ind.std(ddof=1) / math.sqrt(len(ind))
    assert abs(ind.mean() - mo.mass[0]) <= 4 * se_z
    first = (h - om) * ind[:, None]
    m1 = cov @ mo.g_out[0] * mo.mass[0]  # E[(h - omega) 1] = Sigma g Z
    se = first.std(axis=0, ddof=1) / math.sqrt(len(ind))
    assert np.all(np.abs(first.mean(axis=0) - m1) <= 4 * se)


def test_more_rows_than_dimensions_two_routes():
    """3D polytope with 5 rows: the iterated rule against the cube rule (Genz + Sobol)."""
    rng = np.random.default_rng(5)
    A = rng.normal(size=(5, 3))
    b = rng.normal(size=5) * 0.3 + 1.0
    om = np.zeros((1, 3))
    det = pt.gaussian_polytope(A=A, b=b, omega=om, cov=np.eye(3), order=0)
    qmc = pt.gaussian_polytope(A=A, b=b, omega=om, cov=np.eye(3), order=0,
                               rule=pt.PolytopeRule(nested_max_rank=2, inner_rank=1))
    assert det.mass_error[0] <= 1e-9
    assert qmc.mass_error[0] <= 1e-3
    assert abs(det.mass[0] - qmc.mass[0]) <= qmc.mass_error[0] + det.mass_error[0]


def test_four_dimensional_orthant_two_routes():
    rng = np.random.default_rng(5)
    A = rng.normal(size=(4, 4))
    b = rng.normal(size=4) * 0.5 + 0.5
    om = np.zeros((1, 4))
    qmc = pt.gaussian_polytope(A=A, b=b, omega=om, cov=np.eye(4), order=0)
    det = pt.gaussian_polytope(A=A, b=b, omega=om, cov=np.eye(4), order=0,
                               rule=pt.PolytopeRule(nested_max_rank=4, nodes=8, coarse_nodes=6,
                                                    pieces=8))
    assert det.mass_error[0] <= 1e-4
    assert abs(det.mass[0] - qmc.mass[0]) <= qmc.mass_error[0] + det.mass_error[0]
    assert qmc.mass_error[0] <= 1e-3


def test_degenerate_rows():
    """A duplicated row, an implied row, an opposite pair and a constant row change nothing."""
    A = np.array([[1.0, 0.5], [-0.3, 1.0]])
    b = np.array([0.4, -0.2])
    om = np.array([[0.1, 0.2], [-1.0, 0.5]])
    cov = np.diag([1.0, 2.0])
    ref = pt.gaussian_polytope(A=A, b=b, omega=om, cov=cov)
    A2 = np.vstack([A, 2 * A[0], A[0] + A[1], [[0.0, 0.0]]])
    b2 = np.concatenate([b, [2 * b[0], b[0] + b[1] + 10.0, 1.0]])
    mo = pt.gaussian_polytope(A=A2, b=b2, omega=om, cov=cov)
    np.testing.assert_allclose(mo.mass, ref.mass, atol=1e-13)
    np.testing.assert_allclose(mo.g_out, ref.g_out, atol=1e-11)
    np.testing.assert_allclose(mo.dg_out, ref.dg_out, atol=1e-10)
    # a constant row that fails empties the polytope
    bad = pt.gaussian_polytope(A=np.vstack([A, [[0.0, 0.0]]]), b=np.append(b, -1.0), omega=om,
                               cov=cov, order=0)
    assert np.all(bad.mass == 0.0)


def test_hardmax_T3_cycle_has_no_mass_and_probabilities_sum_to_one():
    """The cycle y = (1, 2, 0) is a null set; the 27 outcomes sum to 1 (iterated rule where r <= 3
    and the cube rule above: within the summed bars)."""
    ch = pt.hardmax_channel(3)
    om = np.array([[0.3, -0.2, 0.1, 0.5, -0.4, 0.2]])
    cyc = [p for p in ch.pieces if p.y == (1, 2, 0)][0]
    mo = pt.gaussian_polytope(A=cyc.A, b=cyc.b, omega=om, cov=0.7 * np.diag(ch.weights), order=0)
    assert mo.mass[0] <= mo.mass_error[0]
    assert mo.mass_error[0] <= 1e-3


def test_hardmax_T3_matches_hardmax_se_within_bars():
    """Z_out and g_out of three outcomes at a random omega against the ordered-cone sweep."""
    ch = pt.hardmax_channel(3)
    rng = np.random.default_rng(3)
    om = rng.normal(size=(1, 6)) * 0.7
    V = 0.6
    ys = [(0, 1, 2), (1, 1, 1), (2, 0, 2)]
    ref = hardmax_se.outcomes_moments(ys, omega=om, V=V, nodes=200)
    W = np.array(ch.weights)
    cov = V * np.diag(W)
    for k, y in enumerate(ys):
        p = [q for q in ch.pieces if q.y == y][0]
        mo = pt.gaussian_polytope(A=p.A, b=p.b, omega=om, cov=cov, order=1)
        assert abs(mo.mass[0] - ref[k, 0, 0]) <= mo.mass_error[0] + 1e-12
        assert mo.mass_error[0] <= 1e-4
        g_ref = ref[k, 0, 1:] / (ref[k, 0, 0] * W * V)
        assert np.all(np.abs(mo.g_out[0] - g_ref) <= mo.g_out_error[0] + 1e-10)


@pytest.mark.slow
def test_hardmax_T3_whole_channel_identities():
    ch = pt.hardmax_channel(3)
    om = np.array([[0.3, -0.2, 0.1, 0.5, -0.4, 0.2]])
    out = pt.channel_z_out(ch, omega=om, V=0.7)
    assert abs(out.Z.sum() - 1.0) <= out.Z_error.sum()
    first, second = _nishimori(out)
    bar1 = np.einsum("yn,yni->ni", out.Z, out.g_error) + np.einsum(
        "yn,yni->ni", out.Z_error, np.abs(out.g))
    assert np.all(np.abs(first) <= bar1)


def test_channel_pieces_tile_space():
    """The sign-pattern and hardmax tables list every outcome once."""
    ch = pt.hardmax_channel(3)
    assert sorted(ch.outcomes) == sorted(itertools.product(range(3), repeat=3))
    assert all(len(p.A) == 6 for p in ch.pieces)
    assert len(_three_half_spaces().pieces) == 8


@pytest.mark.parametrize("kwargs, name", [
    (dict(A=[[1.0, 0.0]], b=[0.0, 1.0], omega=[0.0, 0.0], cov=np.eye(2)), "b"),
    (dict(A=[[1.0, 0.0]], b=[0.0], omega=[0.0, np.nan], cov=np.eye(2)), "omega"),
    (dict(A=[[1.0, 0.0]], b=[0.0], omega=[0.0, 0.0], cov=[[1.0, 2.0], [2.0, 1.0]]), "cov"),
    (dict(A=[[1.0, np.inf]], b=[0.0], omega=[0.0, 0.0], cov=np.eye(2)), "A"),
])
def test_bad_input_names_the_option(kwargs, name):
    with pytest.raises(InputError, match=name):
        pt.gaussian_polytope(**kwargs)


def test_bad_channel_and_rule():
    with pytest.raises(InputError, match="tokens"):
        pt.hardmax_channel(9)
    with pytest.raises(InputError, match="points"):
        pt.PolytopeRule(points=1000)
    with pytest.raises(InputError, match="V"):
        pt.channel_z_out(pt.hardmax_channel(2), omega=np.zeros((1, 3)), V=-1.0)
    with pytest.raises(InputError, match="weights"):
        pt.PolyhedralChannel(pieces=(pt.Piece(y=(0,), A=((1.0,),), b=(0.0,)),), weights=(0.0,))


def test_relu_is_a_product_of_densities_and_tails():
    """y = max(h, 0), diagonal covariance: Z = prod (N(y_k; omega_k, s_k^2) or Phi(-omega_k / s_k))."""
    rng = np.random.default_rng(1)
    w = np.array([1.0, 2.0, 1.5])
    V = 0.7
    om = rng.normal(size=(6, 3))
    Y = np.maximum(rng.normal(size=(6, 3)), 0.0)
    Y[0] = 0.0
    Y[1] = [0.5, 0.2, 1.0]
    out = pt.relu_z_out(y=Y, omega=om, V=V, weights=w)
    sd = np.sqrt(V * w)
    dens = np.exp(-0.5 * ((Y - om) / sd) ** 2) / (math.sqrt(2 * math.pi) * sd)
    tail = ndtr(-om / sd)
    Z = np.prod(np.where(Y > 0, dens, tail), axis=1)
    mills = np.exp(-0.5 * (om / sd) ** 2) / math.sqrt(2 * math.pi) / tail / sd
    g = np.where(Y > 0, (Y - om) / sd**2, -mills)
    dgd = np.where(Y > 0, -1 / sd**2, mills * (om / sd**2) - mills**2)
    np.testing.assert_allclose(out.Z, Z, rtol=1e-13)
    np.testing.assert_allclose(out.g, g, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(np.diagonal(out.dg, axis1=1, axis2=2), dgd, rtol=1e-11, atol=1e-13)
    assert np.all(np.abs(out.dg - np.einsum("ni,ij->nij", dgd, np.eye(3))) <= 1e-12)


def test_observed_statistic_closed_form_and_differences():
    """One seen statistic and one half-space in 2D (correlated): Z = N(y; C omega, C S C^T)
    Phi((b - mu) / s), the conditional mean mu and sd s of A h given C h = y; then a 3D piece
    with two half-spaces: g and dg against Richardson differences."""
    cov = np.array([[1.0, 0.4], [0.4, 1.5]])
    C = np.array([[1.0, 1.0]])
    A = np.array([[1.0, -0.5]])
    om = np.array([[0.2, -0.3]])
    y = np.array([0.7])
    out = pt.observed_polytope(A=A, b=[0.1], C=C, y=y, omega=om, cov=cov)
    sc = float(C[0] @ cov @ C[0])
    cm = float(C[0] @ om[0])
    kk = float(A[0] @ cov @ C[0]) / sc
    mu = float(A[0] @ om[0]) + kk * (y[0] - cm)
    s = math.sqrt(float(A[0] @ cov @ A[0]) - kk * kk * sc)
    Z = math.exp(-0.5 * (y[0] - cm) ** 2 / sc) / math.sqrt(2 * math.pi * sc) * ndtr((0.1 - mu) / s)
    assert abs(out.Z[0] - Z) <= 1e-14
    cov3 = np.array([[1.0, 0.3, -0.2], [0.3, 1.2, 0.1], [-0.2, 0.1, 0.8]])
    C3 = np.array([[1.0, -0.5, 0.2]])
    A3 = np.array([[0.3, 1.0, 0.0], [-0.4, 0.2, 1.0]])
    b3 = np.array([0.2, -0.1])
    y3 = np.array([0.4])
    om3 = np.array([0.1, -0.2, 0.3])

    def at(x):
        return pt.observed_polytope(A=A3, b=b3, C=C3, y=y3, omega=x[None], cov=cov3)

    base = at(om3)
    h = 1e-3
    for k in range(3):
        e = np.zeros(3)
        e[k] = h
        o = {t: at(om3 + t * e) for t in (-2, -1, 1, 2)}
        lz = {t: math.log(v.Z[0]) for t, v in o.items()}
        assert abs((8 * (lz[1] - lz[-1]) - (lz[2] - lz[-2])) / (12 * h) - base.g[0, k]) <= 1e-8
        d_g = (8 * (o[1].g - o[-1].g) - (o[2].g - o[-2].g))[0] / (12 * h)
        np.testing.assert_allclose(d_g, base.dg[0, :, k], atol=1e-7)
    assert base.g_error.max() <= 1e-10


def test_row_implied_along_an_edge_keeps_the_hessian():
    """A third row implied by two others and touching the polytope only along an edge (found
    by the channel-file work: dg_out was off by 1e-2 under a 1e-14 bar before implied rows were
    dropped): mass, g_out and dg_out equal those of the two-row polytope, and dg_out equals
    central differences of g_out."""
    import numpy as np
    from aim_sym.numerics import polytope as pt

    A = np.array([[-1.0, 1.0, 0.0], [0.0, 1.0, -1.0], [-1.0, 2.0, -1.0]])
    b = np.zeros(3)
    om = np.array([[0.3, -0.2, 0.1]])
    cov = 0.7 * np.eye(3)
    r3 = pt.gaussian_polytope(A=A, b=b, omega=om, cov=cov)
    r2 = pt.gaussian_polytope(A=A[:2], b=b[:2], omega=om, cov=cov)
    assert np.allclose(r3.mass, r2.mass, rtol=0, atol=1e-14)
    assert np.allclose(r3.dg_out, r2.dg_out, rtol=0, atol=1e-12)
    h = 1e-5
    fd = np.stack([(pt.gaussian_polytope(A=A, b=b, omega=om + h * e, cov=cov, order=1).g_out
                    - pt.gaussian_polytope(A=A, b=b, omega=om - h * e, cov=cov, order=1).g_out
                    )[0] / (2 * h) for e in np.eye(3)], axis=1)
    assert np.abs(fd - r3.dg_out[0]).max() < 1e-6
