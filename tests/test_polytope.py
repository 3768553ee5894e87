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


# ----------------------------------------------------------------------------- far outside (issue 15)
def _mode(a, R):
    """The most likely point of N(0, R) on {x <= a} (active sets), for quadrature break points."""
    m = len(a)
    best, xb = np.inf, None
    for k in range(m + 1):
        for S in itertools.combinations(range(m), k):
            S, T = list(S), [i for i in range(m) if i not in S]
            x = np.zeros(m)
            if S:
                x[S] = a[S]
                x[T] = R[np.ix_(T, S)] @ np.linalg.solve(R[np.ix_(S, S)], a[S])
            if np.all(x <= a + 1e-9 * (1 + np.abs(a))):
                q = x @ np.linalg.solve(R, x)
                if q < best:
                    best, xb = q, x
    return xb


def _mp_phi2_density(a, b, r):
    s2 = 1 - r * r
    return mpmath.exp(-(a * a - 2 * r * a * b + b * b) / (2 * s2)) / (2 * mpmath.pi * mpmath.sqrt(s2))


def _mp_cdf_moments(a, R):
    """X ~ N(0, R), unit variances, m = len(a) <= 3: F = P(X <= a), dF/da, d2F/da2 in mpmath
    (Phi; mp_phi2; for m = 3 a quadrature of mp_phi2 split around the most likely point)."""
    m = len(a)
    A = [mpmath.mpf(float(x)) for x in a]
    Rm = [[mpmath.mpf(float(x)) for x in row] for row in R]
    if m == 1:
        g = [mpmath.npdf(A[0])]
        return mpmath.ncdf(A[0]), g, [[-A[0] * g[0]]]

    def cond(i, j, k):
        rij, rik = Rm[i][j], Rm[i][k]
        sj, sk = mpmath.sqrt(1 - rij ** 2), mpmath.sqrt(1 - rik ** 2)
        return rij, rik, sj, sk, (Rm[j][k] - rij * rik) / (sj * sk)

    if m == 2:
        r = Rm[0][1]
        s = mpmath.sqrt(1 - r * r)
        g = [mpmath.npdf(A[0]) * mpmath.ncdf((A[1] - r * A[0]) / s),
             mpmath.npdf(A[1]) * mpmath.ncdf((A[0] - r * A[1]) / s)]
        off = _mp_phi2_density(A[0], A[1], r)
        return mp_phi2(A[0], A[1], r), g, [[-A[0] * g[0] - r * off, off],
                                           [off, -A[1] * g[1] - r * off]]
    if np.allclose(np.asarray(R, float), np.eye(3), atol=1e-14):  # independent: products
        P = [mpmath.ncdf(x) for x in A]
        p = [mpmath.npdf(x) for x in A]
        F = P[0] * P[1] * P[2]
        g = [p[i] * F / P[i] for i in range(3)]
        H = [[(p[i] * p[j] * F / (P[i] * P[j]) if i != j else -A[i] * g[i]) for j in range(3)]
             for i in range(3)]
        return F, g, H
    rij, rik, sj, sk, rho = cond(0, 1, 2)
    x1 = min(float(_mode(np.asarray(a, float), np.asarray(R, float))[0]), float(a[0]))
    w = max(1.0, float(np.linalg.norm(a)))
    steps = [k * w for k in (-40, -20, -10, -5, -2, -1)] + [-20, -8, -4, -2, -1, -0.5, -0.2, -0.05,
                                                            0, 0.05, 0.2, 0.5, 1, 2, 4, 8, 20]
    pts = sorted({min(x1 + t / w, float(a[0])) for t in steps})
    pts = [mpmath.mpf(p) for p in pts] + ([A[0]] if pts[-1] < float(a[0]) else [])
    F = mpmath.quad(lambda x: mpmath.npdf(x) * mp_phi2((A[1] - rij * x) / sj,
                                                       (A[2] - rik * x) / sk, rho), pts)
    g = []
    for i in range(3):
        j, k = [x for x in range(3) if x != i]
        rij, rik, sj, sk, rho = cond(i, j, k)
        g.append(mpmath.npdf(A[i]) * mp_phi2((A[j] - rij * A[i]) / sj, (A[k] - rik * A[i]) / sk, rho))
    H = [[mpmath.mpf(0)] * 3 for _ in range(3)]
    for i, j in itertools.combinations(range(3), 2):
        k = 3 - i - j
        v = mpmath.matrix([Rm[k][i], Rm[k][j]])
        c2 = mpmath.lu_solve(mpmath.matrix([[1, Rm[i][j]], [Rm[i][j], 1]]), v)
        mu = c2[0] * A[i] + c2[1] * A[j]
        sd = mpmath.sqrt(1 - (c2[0] * v[0] + c2[1] * v[1]))
        H[i][j] = H[j][i] = _mp_phi2_density(A[i], A[j], Rm[i][j]) * mpmath.ncdf((A[k] - mu) / sd)
    for i in range(3):
        H[i][i] = -A[i] * g[i] - sum(Rm[i][j] * H[i][j] for j in range(3) if j != i)
    return F, g, H


def _far_case(A, cov, b, t, rule=pt.DEFAULT_RULE):
    """omega with standardised offsets (b - A omega)_i / s_i = t_i; the engine's moments and the
    mpmath reference (log Z, g_out, dg_out) at 30 digits."""
    A, cov = np.asarray(A, float), np.asarray(cov, float)
    S = A @ cov @ A.T
    s = np.sqrt(np.diag(S))
    om = np.linalg.lstsq(A, b - np.asarray(t, float) * s, rcond=None)[0]
    mo = pt.gaussian_polytope(A=A, b=b, omega=om[None], cov=cov, rule=rule)
    with mpmath.workdps(30):
        m, d = A.shape
        sm = [mpmath.sqrt(mpmath.mpf(S[i, i])) for i in range(m)]
        c = [mpmath.mpf(b[i]) - mpmath.fsum(mpmath.mpf(A[i, k]) * mpmath.mpf(om[k]) for k in range(d))
             for i in range(m)]
        a = [c[i] / sm[i] for i in range(m)]
        F, g, H = _mp_cdf_moments(a, S / np.outer(s, s))
        gout = [-mpmath.fsum(A[i, p] * g[i] / sm[i] for i in range(m)) / F for p in range(d)]
        dg = [[mpmath.fsum(A[i, p] * A[j, q] * H[i][j] / (sm[i] * sm[j]) for i in range(m)
                           for j in range(m)) / F - gout[p] * gout[q] for q in range(d)]
              for p in range(d)]
        ref = (float(mpmath.log(F)), np.array([float(x) for x in gout]),
               np.array([[float(x) for x in row] for row in dg]))
    return mo, ref


def _assert_far(mo, ref, *, z_bar, g_bar, dg_bar):
    """Relative errors within the reported bars, and the bars below the given relative sizes."""
    lz, g, dg = ref
    assert np.isfinite(mo.log_mass[0])
    z_err = abs(math.expm1(mo.log_mass[0] - lz))
    assert z_err <= mo.mass_relative_error[0] <= z_bar
    gs, ds = np.abs(g).max(), np.abs(dg).max()
    assert np.all(np.abs(mo.g_out[0] - g) <= mo.g_out_error[0])
    assert mo.g_out_error[0].max() <= g_bar * gs
    assert np.all(np.abs(mo.dg_out[0] - dg) <= mo.dg_out_error[0])
    assert mo.dg_out_error[0].max() <= dg_bar * ds


_FAR_COV = np.diag([0.7, 1.3, 2.0])
_FAR_A = np.array([[1.0, -2.0, 0.5], [0.4, 1.0, -1.0], [0.3, 0.2, 1.0]])
_FAR_B = np.array([0.3, -0.2, 0.1])


@pytest.mark.parametrize("t", [-10.0, -30.0, -38.0])
def test_far_one_row_keeps_relative_accuracy(t):
    """One half-space t standard deviations away (Phi(-38) ~ 3e-316 is subnormal): log Z, the
    Mills ratio g_out and dg_out against mpmath, relative errors within relative bars (the
    engine used to give Z to 1e-15 absolute only, and g_out = 0 +- 0 at -38)."""
    mo, ref = _far_case(_FAR_A[:1], _FAR_COV, _FAR_B[:1], [t])
    _assert_far(mo, ref, z_bar=1e-11, g_bar=1e-11, dg_bar=1e-7)


@pytest.mark.parametrize("t", [(-10.0, -9.0), (-30.0, -28.0), (-38.0, -37.0), (-30.0, 1.0)])
def test_far_two_rows_keep_relative_accuracy(t):
    """Two correlated half-spaces (rho = -0.71, the wedge ~75 standard deviations away at
    (-30, -28)): log Z, g_out, dg_out against mp_phi2 at 30 digits."""
    mo, ref = _far_case(_FAR_A[:2], _FAR_COV, _FAR_B[:2], t)
    _assert_far(mo, ref, z_bar=1e-9, g_bar=1e-9, dg_bar=1e-4)


@pytest.mark.parametrize("t", [(-10.0, -12.0, -11.0), (-30.0, -29.0, -31.0), (-30.0, 1.0, 0.5)])
def test_far_three_orthogonal_rows_are_a_product(t):
    """Three rows orthogonal after whitening (iterated rule, r = 3): Z = prod Phi(t_i), g_out and
    dg_out from the product's closed forms in mpmath."""
    Q, _ = np.linalg.qr(np.array([[1.0, 0.3, -0.2], [0.2, 1.0, 0.4], [-0.3, 0.1, 1.0]]))
    cov = np.diag([0.5, 1.0, 2.0])
    A = Q.T @ np.diag(1 / np.sqrt(np.diag(cov)))  # A cov A^T = I
    mo, ref = _far_case(A, cov, np.zeros(3), t)
    _assert_far(mo, ref, z_bar=1e-9, g_bar=1e-7, dg_bar=1e-4)
    # and the product closed form for log Z (mpmath.ncdf alone)
    assert abs(mo.log_mass[0] - sum(float(mpmath.log(mpmath.ncdf(x))) for x in t)) <= 1e-9 * abs(
        mo.log_mass[0])


@pytest.mark.slow
@pytest.mark.parametrize("t", [(-10.0, -9.0, -11.0), (-38.0, -37.0, -36.0), (-30.0, 1.0, 0.5)])
def test_far_three_correlated_rows_against_mpmath_quadrature(t):
    """Three correlated half-spaces (iterated rule): mass by an mpmath quadrature of mp_phi2
    split around the most likely point (~30-100 s each)."""
    mo, ref = _far_case(_FAR_A, _FAR_COV, _FAR_B, t)
    _assert_far(mo, ref, z_bar=1e-6, g_bar=1e-6, dg_bar=1e-1)


def test_far_four_orthogonal_rows_by_the_cube_rule():
    """r = 4 (Genz's rule, now in logs): orthogonal rows 35-38 standard deviations away give the
    product of Phi (log Z ~ -2700) and its Mills ratios."""
    Q, _ = np.linalg.qr(np.random.default_rng(1).normal(size=(4, 4)))
    t = np.array([-38.0, -37.0, -36.0, -35.0])
    mo = pt.gaussian_polytope(A=Q.T, b=np.zeros(4), omega=-(Q @ t)[None], cov=np.eye(4), order=1)
    with mpmath.workdps(30):
        lz = float(mpmath.fsum(mpmath.log(mpmath.ncdf(x)) for x in t))
        mills = np.array([float(mpmath.npdf(x) / mpmath.ncdf(x)) for x in t])
    assert abs(math.expm1(mo.log_mass[0] - lz)) <= mo.mass_relative_error[0] <= 1e-10
    g = -(Q @ mills)
    assert np.all(np.abs(mo.g_out[0] - g) <= mo.g_out_error[0])
    assert mo.g_out_error[0].max() <= 1e-8 * np.abs(g).max()


@pytest.mark.slow
def test_far_four_correlated_rows_two_routes():
    """r = 4, rows correlated from -0.94 to 0.73, log Z ~ -7300: the cube rule against the
    iterated rule at rank 4, within their summed bars."""
    A = np.random.default_rng(5).normal(size=(4, 4))
    A /= np.linalg.norm(A, axis=1)[:, None]
    om = -np.linalg.solve(A, np.array([-20.0, -18.0, -22.0, -19.0]))[None]
    cube = pt.gaussian_polytope(A=A, b=np.zeros(4), omega=om, cov=np.eye(4), order=1)
    det = pt.gaussian_polytope(A=A, b=np.zeros(4), omega=om, cov=np.eye(4), order=1,
                               rule=pt.PolytopeRule(nested_max_rank=4, nodes=8, coarse_nodes=6,
                                                    pieces=8))
    bar = cube.mass_relative_error[0] + det.mass_relative_error[0]
    assert abs(math.expm1(cube.log_mass[0] - det.log_mass[0])) <= bar <= 1e-3
    assert np.all(np.abs(cube.g_out - det.g_out) <= cube.g_out_error + det.g_out_error)


# ----------------------------------------------------------------------------- noisy outputs (issue 15)
def _mp_noisy_relu_entry(y, om, s2, De):
    """One entry of y = max(h, 0) + N(0, De), h ~ N(om, s2): log of
    Phi(-om / s) N(y; 0, De) + N(y; om, s2 + De) Phi(mu / tau) and its first two derivatives in om
    (mpmath, 30 digits; mu, tau^2 the mean and variance of h given y without the truncation)."""
    with mpmath.workdps(30):
        y, s2, De = mpmath.mpf(y), mpmath.mpf(s2), mpmath.mpf(De)
        tau = mpmath.sqrt(s2 * De / (s2 + De))

        def lf(w):
            mu = (De * w + s2 * y) / (s2 + De)
            return mpmath.log(mpmath.ncdf(-w / mpmath.sqrt(s2)) * mpmath.npdf(y, 0, mpmath.sqrt(De))
                              + mpmath.npdf(y, w, mpmath.sqrt(s2 + De)) * mpmath.ncdf(mu / tau))

        w = mpmath.mpf(om)
        return float(lf(w)), float(mpmath.diff(lf, w)), float(mpmath.diff(lf, w, 2))


def test_noisy_relu_is_a_product_of_one_dimensional_closed_forms():
    """T = 2 (3 entries, weights 1 + delta_ab, 8 pieces), Delta = 0.3 (1 + delta_ab): with
    diagonal Sigma and Delta, Z_out factorises over entries; log Z, g_out, dg_out against the
    closed form of each factor in mpmath."""
    rng = np.random.default_rng(3)
    w = np.array([2.0, 1.0, 2.0])
    V = 0.6
    De = 0.3 * w
    om = rng.normal(size=(4, 3)) * 0.8
    Y = np.maximum(rng.normal(size=(4, 3)), 0) + rng.normal(size=(4, 3)) * 0.5
    Y[0, 1] = -3.0  # far below the ReLU's range
    out = pt.noisy_channel_z_out(pt.noisy_relu_pieces(3), y=Y, omega=om, cov=V * np.diag(w),
                                 Delta=np.diag(De))
    for n in range(4):
        ref = [_mp_noisy_relu_entry(Y[n, i], om[n, i], V * w[i], De[i]) for i in range(3)]
        lz = sum(r[0] for r in ref)
        g = np.array([r[1] for r in ref])
        dg = np.diag([r[2] for r in ref])
        assert abs(math.expm1(out.log_Z[n] - lz)) <= out.Z_relative_error[n] <= 1e-12
        assert abs(out.Z[n] - math.exp(lz)) <= out.Z_error[n]
        assert np.all(np.abs(out.g[n] - g) <= out.g_error[n] + 1e-15)
        assert np.all(np.abs(out.dg[n] - dg) <= out.dg_error[n] + 1e-15)
        assert out.g_error[n].max() <= 1e-12 and out.dg_error[n].max() <= 1e-11


def _noisy_pieces():
    """Three pieces in d = 3 seen through p = 2 noisy linear statistics: a . h <= 0.3 split by
    e . h <= 0 (two rows each), and a . h > 0.3."""
    a = (1.0, -0.5, 0.4)
    e = (0.3, 1.0, -0.6)
    na, ne = tuple(-x for x in a), tuple(-x for x in e)
    L1 = ((1.0, 0.0, 0.0), (0.0, 1.0, 1.0))
    L2 = ((0.5, 0.0, 1.0), (1.0, -1.0, 0.0))
    L3 = ((0.0, 0.0, 0.0), (0.2, 0.3, -0.4))
    return (pt.NoisyPiece(A=(a, e), b=(0.3, 0.0), L=L1, l=(0.0, 0.1)),
            pt.NoisyPiece(A=(a, ne), b=(0.3, 0.0), L=L2, l=(0.2, 0.0)),
            pt.NoisyPiece(A=(na,), b=(-0.3,), L=L3, l=(-0.1, 0.3)))


_N_COV = np.array([[1.0, 0.3, -0.2], [0.3, 1.2, 0.1], [-0.2, 0.1, 0.8]])
_N_DELTA = np.array([[0.3, 0.1], [0.1, 0.4]])


def test_noisy_channel_g_and_dg_are_derivatives_of_log_z():
    """Richardson differences of log Z against g_out and of g_out against dg_out."""
    pieces = _noisy_pieces()
    om = np.array([0.2, -0.4, 0.3])
    y = np.array([0.5, -0.2])

    def at(x):
        return pt.noisy_channel_z_out(pieces, y=y, omega=x[None], cov=_N_COV, Delta=_N_DELTA)

    base = at(om)
    h = 1e-3
    for k in range(3):
        e = np.zeros(3)
        e[k] = h
        o = {t: at(om + t * e) for t in (-2, -1, 1, 2)}
        d_lz = (8 * (o[1].log_Z - o[-1].log_Z) - (o[2].log_Z - o[-2].log_Z))[0] / (12 * h)
        assert abs(d_lz - base.g[0, k]) <= 1e-8
        d_g = (8 * (o[1].g - o[-1].g) - (o[2].g - o[-2].g))[0] / (12 * h)
        np.testing.assert_allclose(d_g, base.dg[0, :, k], atol=1e-7)
    assert base.g_error.max() <= 1e-9 and base.dg_error.max() <= 1e-8


def test_noisy_channel_seeded_monte_carlo():
    """Z_out = E_h sum_k 1[A_k h <= b_k] N(y; L_k h + l_k, Delta) by 400 000 seeded samples."""
    pieces = _noisy_pieces()
    om = np.array([0.1, 0.3, -0.2])
    y = np.array([0.4, 0.2])
    out = pt.noisy_channel_z_out(pieces, y=y, omega=om, cov=_N_COV, Delta=_N_DELTA)
    rng = np.random.default_rng(2027)
    h = om + rng.normal(size=(400_000, 3)) @ np.linalg.cholesky(_N_COV).T
    Di = np.linalg.inv(_N_DELTA)
    norm = 1 / (2 * math.pi * math.sqrt(np.linalg.det(_N_DELTA)))
    vals = np.zeros(len(h))
    for p in pieces:
        ind = np.all(h @ np.asarray(p.A).T <= np.asarray(p.b), axis=1)
        r = y - h @ np.asarray(p.L).T - np.asarray(p.l)
        vals += ind * norm * np.exp(-0.5 * np.einsum("ni,ij,nj->n", r, Di, r))
    se = vals.std(ddof=1) / math.sqrt(len(vals))
    assert abs(vals.mean() - out.Z[0]) <= 4 * se
    assert out.Z_relative_error[0] <= 1e-10


def test_noisy_channel_small_delta_reproduces_observed_polytope():
    """One piece, y = C h + N(0, delta I): as delta -> 0, Z, g_out, dg_out tend to
    observed_polytope's (the error shrinks in proportion to delta)."""
    A = np.array([[0.3, 1.0, 0.0], [-0.4, 0.2, 1.0]])
    b = np.array([0.2, -0.1])
    C = np.array([[1.0, -0.5, 0.2]])
    y = np.array([0.4])
    om = np.array([[0.1, -0.2, 0.3]])
    ref = pt.observed_polytope(A=A, b=b, C=C, y=y, omega=om, cov=_N_COV)
    piece = pt.NoisyPiece(A=tuple(map(tuple, A)), b=tuple(b), L=tuple(map(tuple, C)), l=(0.0,))
    errs = []
    for delta in (1e-5, 1e-7):
        out = pt.noisy_channel_z_out((piece,), y=y, omega=om, cov=_N_COV, Delta=[[delta]])
        errs.append(max(abs(out.Z[0] / ref.Z[0] - 1), np.abs(out.g - ref.g).max(),
                        np.abs(out.dg - ref.dg).max()))
    assert errs[1] <= 1e-5
    assert errs[1] <= 0.03 * errs[0]


def _nishimori_sample(pieces, om, cov, Delta, n, seed):
    """y drawn from the channel at omega: h ~ N(omega, cov), its piece's L h + l + noise."""
    rng = np.random.default_rng(seed)
    h = om + rng.normal(size=(n, len(om))) @ np.linalg.cholesky(cov).T
    noise = rng.normal(size=(n, len(Delta))) @ np.linalg.cholesky(Delta).T
    Y = np.full((n, len(Delta)), np.nan)
    for p in pieces:
        ind = np.all(h @ np.asarray(p.A).T <= np.asarray(p.b), axis=1)
        Y[ind] = h[ind] @ np.asarray(p.L).T + np.asarray(p.l)
    assert not np.isnan(Y).any()
    return Y + noise


def _assert_nishimori(out):
    """E_y[g] = 0 and E_y[g g^T + dg] = 0 within 4 standard errors (entrywise)."""
    n = out.g.shape[0]
    first = out.g
    second = out.g[:, :, None] * out.g[:, None, :] + out.dg
    for v in (first, second):
        se = v.std(axis=0, ddof=1) / math.sqrt(n)
        assert np.all(np.abs(v.mean(axis=0)) <= 4 * se + 1e-12)


def test_noisy_nishimori_identities_by_monte_carlo_over_y():
    """The three-piece channel at one omega: E_y[g_out] = 0 and E_y[g g^T + dg] = 0 by 6000
    seeded draws of y from the channel."""
    pieces = _noisy_pieces()
    om = np.array([0.2, -0.1, 0.4])
    Y = _nishimori_sample(pieces, om, _N_COV, _N_DELTA, 6000, 11)
    out = pt.noisy_channel_z_out(pieces, y=Y, omega=om, cov=_N_COV, Delta=_N_DELTA)
    assert out.g_error.max() <= 1e-9
    _assert_nishimori(out)


@pytest.mark.slow
def test_noisy_relu_T2_nishimori_by_monte_carlo_over_y():
    """The example: noisy ReLU at T = 2 (8 pieces), Sigma = V (1 + delta_ab), Delta = 0.2 (1 +
    delta_ab), correlated through omega only; 3000 draws of y."""
    w = np.array([2.0, 1.0, 2.0])
    om = np.array([0.3, -0.5, 0.1])
    pieces = pt.noisy_relu_pieces(3)
    cov, Delta = 0.7 * np.diag(w), 0.2 * np.diag(w)
    Y = _nishimori_sample(pieces, om, cov, Delta, 3000, 5)
    _assert_nishimori(pt.noisy_channel_z_out(pieces, y=Y, omega=om, cov=cov, Delta=Delta))


def test_noisy_channel_bad_input():
    pieces = _noisy_pieces()
    with pytest.raises(InputError, match="Delta"):
        pt.noisy_channel_z_out(pieces, y=[0.0, 0.0], omega=np.zeros(3), cov=_N_COV,
                               Delta=[[1.0, 2.0], [2.0, 1.0]])
    with pytest.raises(InputError, match="y"):
        pt.noisy_channel_z_out(pieces, y=[0.0, np.nan], omega=np.zeros(3), cov=_N_COV,
                               Delta=_N_DELTA)
    with pytest.raises(InputError, match="pieces"):
        pt.noisy_channel_z_out((pt.NoisyPiece(A=((1.0,),), b=(0.0,), L=((1.0,),), l=(0.0,)),),
                               y=[0.0, 0.0], omega=np.zeros(3), cov=_N_COV, Delta=_N_DELTA)
    with pytest.raises(InputError, match="cov"):
        pt.noisy_channel_z_out(pieces, y=[0.0, 0.0], omega=np.zeros(3), cov=-_N_COV,
                               Delta=_N_DELTA)
