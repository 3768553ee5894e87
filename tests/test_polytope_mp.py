"""Gaussian polytope moments and the polyhedral small-width threshold in mpmath
(numerics/polytope_mp.py; THEORY 1.2, 1.4; docs/polyhedral.md).

Independent routes: the trivariate orthant and its facets in closed form (asin); hardmax at T = 2
written as four two-row pieces against its closed-form threshold; the example channel against
the double-precision engine (polyhedral_se.weak_threshold) and against a homotopy from the
orthant, P(b) = P(0) + int_0^b3 dP/dc3 dc3, whose integrand is a facet density times a bivariate
normal CDF by Plackett's identity (special_functions.mp_phi2), with mpmath.quad.
"""

import os

import mpmath
import numpy as np
import pytest
from aim_sym.numerics import polyhedral_se as ps
from aim_sym.numerics import polytope_mp as pm
from aim_sym.numerics.records import InputError
from aim_sym.numerics.special_functions import mp_phi2

from aim_sym.channel_file import from_file
from aim_sym.polyhedral import polyhedral_arrays

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(ROOT, "examples", "channels", "polyhedral", "three_halfspaces.py")
ROWS = ((-1.0, 1.0, 0.0), (0.0, 1.0, -1.0), (-1.0, 0.0, -1.0))  # the example's y = 1 polytope
WEIGHTS = (2.0, 1.0, 2.0)


def _example(tau: float) -> ps.PolyhedralOutput:
    a = polyhedral_arrays(from_file(EXAMPLE, tokens=2), {"tau": tau})
    return ps.PolyhedralOutput(
        outcomes=a["outcomes"], weights=a["weights"], basis=a["basis"], name=a["name"],
        terms=tuple(tuple(ps.Term(w, A, b) for w, A, b in ts) for ts in a["terms"]))


def _orthant(r12, r13, r23):
    """P(X <= 0) for a trivariate normal with these correlations, and dP/dc_i (unit variances):
    phi(0) (1/4 + asin(rho_jk.i) / (2 pi)), rho_jk.i the partial correlation."""
    r = {(0, 1): r12, (0, 2): r13, (1, 2): r23}
    c = lambda i, j: r[(min(i, j), max(i, j))]  # noqa: E731
    P = mpmath.mpf(1) / 8 + (mpmath.asin(r12) + mpmath.asin(r13) + mpmath.asin(r23)) / (4 * mpmath.pi)
    grad = []
    for i in range(3):
        j, k = (m for m in range(3) if m != i)
        rho = (c(j, k) - c(i, j) * c(i, k)) / mpmath.sqrt((1 - c(i, j) ** 2) * (1 - c(i, k) ** 2))
        grad.append(mpmath.npdf(0) * (mpmath.mpf(1) / 4 + mpmath.asin(rho) / (2 * mpmath.pi)))
    return P, grad


def _homotopy_moments(A, b, cov):
    """P(A h <= b) and dP/dmean, h ~ N(0, cov), for three independent rows, at the current
    precision: the orthant closed form at c = 0, then mpmath.quad over s in [0, 1] of
    sum_i c_i dP/dc_i(s c) (the polytope {X <= s c} is a translated orthant: analytic in s), each
    dP/dc_i = N(x_i; 0, G_ii) Phi2(conditional) by Plackett's identity (mp_phi2)."""
    Am = mpmath.matrix(A)
    G = Am * mpmath.matrix(cov) * Am.T
    c = [mpmath.mpf(x) for x in b]

    def facet(i, x):
        j, k = (m for m in range(3) if m != i)
        vj = G[j, j] - G[j, i] ** 2 / G[i, i]
        vk = G[k, k] - G[k, i] ** 2 / G[i, i]
        cjk = G[j, k] - G[j, i] * G[k, i] / G[i, i]
        p2 = mp_phi2((x[j] - G[j, i] / G[i, i] * x[i]) / mpmath.sqrt(vj),
                     (x[k] - G[k, i] / G[i, i] * x[i]) / mpmath.sqrt(vk), cjk / mpmath.sqrt(vj * vk))
        return mpmath.npdf(x[i], 0, mpmath.sqrt(G[i, i])) * p2

    r = [[G[i, j] / mpmath.sqrt(G[i, i] * G[j, j]) for j in range(3)] for i in range(3)]
    P0, _ = _orthant(r[0][1], r[0][2], r[1][2])
    P = P0 + mpmath.quad(lambda s: mpmath.fsum(c[i] * facet(i, [s * x for x in c])
                                               for i in range(3)), [0, 1])
    dPdc = [facet(i, c) for i in range(3)]
    return P, [-mpmath.fsum(Am[i, k] * dPdc[i] for i in range(3)) for k in range(3)]


def _homotopy_alpha(tau, dps: int):
    """alpha_bar_c of the example (y = 1: one polytope of three independent rows; y = 0 its
    complement) from :func:`_homotopy_moments`."""
    with mpmath.workdps(dps + 10):
        P, g = _homotopy_moments([list(r) for r in ROWS], [0, 0, -mpmath.mpf(tau)],
                                 [[WEIGHTS[i] if i == j else 0 for j in range(3)]
                                  for i in range(3)])
        E = mpmath.fsum(WEIGHTS[k] * g[k] ** 2 for k in range(3)) * (1 / P + 1 / (1 - P))
        return 1 / (2 * E)


def _hardmax_t2() -> ps.PolyhedralOutput:
    """Hardmax at T = 2 as four pieces (argmax of row 1: h11 vs h12, of row 2: h12 vs h22)."""
    pieces = {(0, 1): ((-1, 1, 0), (0, 1, -1)), (0, 0): ((-1, 1, 0), (0, -1, 1)),
              (1, 1): ((1, -1, 0), (0, 1, -1)), (1, 0): ((1, -1, 0), (0, -1, 1))}
    return ps.PolyhedralOutput(
        outcomes=tuple(pieces), weights=WEIGHTS, basis=(),
        terms=tuple((ps.Term(1.0, tuple(tuple(float(x) for x in r) for r in A), (0.0, 0.0)),)
                    for A in pieces.values()))


def test_trivariate_orthant_and_facets_to_30_digits():
    r12, r13, r23 = "0.3", "-0.4", "0.5"
    cov = [[1, r12, r13], [r12, 1, r23], [r13, r23, 1]]
    mo = pm.polytope_moments_mp([[-1, 0, 0], [0, -1, 0], [0, 0, -1]], [0, 0, 0], cov, dps=30)
    with mpmath.workdps(50):
        P, grad = _orthant(*(mpmath.mpf(x) for x in (r12, r13, r23)))
        assert mo.rank == 3
        assert abs(mo.mass - P) <= mo.mass_error <= mpmath.mpf("1e-31")
        for g, ge, ex in zip(mo.grad, mo.grad_error, grad):  # dP/dmean_i = dP/dc_i here
            assert abs(g - ex) <= ge <= mpmath.mpf("1e-30")


def test_hardmax_t2_as_pieces_matches_its_closed_form_to_30_digits():
    est = pm.weak_threshold_mp(_hardmax_t2(), dps=30)
    with mpmath.workdps(50):
        A = mpmath.asin(mpmath.mpf(1) / 3)
        exact = 3 * (mpmath.pi ** 2 - 4 * A ** 2) / (8 * (3 * mpmath.pi - 2 * A))
        assert abs(mpmath.mpf(est.value) - exact) <= est.error <= 1e-30
        assert abs(mpmath.mpf(est.extra["unrounded"]) - exact) <= est.extra["error_unrounded"]
        assert est.extra["error_unrounded"] <= 1e-32
    assert est.precision == 30 and est.extra["polytopes"] == 4


def test_example_matches_the_double_engine_and_the_homotopy_route():
    ch = _example(1.0)
    est = pm.weak_threshold_mp(ch, dps=20)
    dbl = ps.weak_threshold(ch)
    assert abs(float(est.value) - dbl.value) <= dbl.error + est.error
    with mpmath.workdps(40):
        v = mpmath.mpf(est.value)
        ref = _homotopy_alpha(1, 25)
        assert abs(v - ref) <= est.error <= 1e-20
        assert abs(mpmath.mpf(est.extra["unrounded"]) - ref) <= est.extra["error_unrounded"]


def test_implied_touching_row_gives_the_two_row_orthant():
    # h11 + h22 > 2 h12 is implied by h11 > h12, h22 > h12 and touches along their edge
    A = [[-1, 1, 0], [0, 1, -1], [-1, 2, -1]]
    cov = [[2, 0, 0], [0, 1, 0], [0, 0, 2]]
    mo = pm.polytope_moments_mp(A, [0, 0, 0], cov, dps=25)
    two = pm.polytope_moments_mp(A[:2], [0, 0], cov, dps=25)
    with mpmath.workdps(40):
        rho = mpmath.mpf(1) / 3  # Var = 3 each, Cov(h12 - h11, h12 - h22) = 1
        exact = mpmath.mpf(1) / 4 + mpmath.asin(rho) / (2 * mpmath.pi)
        assert mo.rank == 2
        assert abs(mo.mass - exact) <= mo.mass_error <= 1e-26
        assert abs(two.mass - exact) <= two.mass_error
        for g, ge, g2, ge2 in zip(mo.grad, mo.grad_error, two.grad, two.grad_error):
            assert abs(g - g2) <= ge + ge2 <= 1e-25


def test_shifted_two_row_wedge_against_plackett():
    # a wedge off the origin with a mean: P(h1 - 0.3 <= 0.5, 0.7 h1 + h2 <= -0.4) against Phi2
    A, b, mean = [[1, 0], [0.7, 1]], [0.5, -0.4], [0.3, -0.2]
    cov = [[1.5, -0.4], [-0.4, 0.8]]
    mo = pm.polytope_moments_mp(A, b, cov, dps=30, mean=mean)
    with mpmath.workdps(50):
        Am, Cm = mpmath.matrix(A), mpmath.matrix(cov)
        G = Am * Cm * Am.T
        c = [mpmath.mpf(b[i]) - mpmath.fsum(mpmath.mpf(A[i][k]) * mean[k] for k in range(2))
             for i in range(2)]
        s = [mpmath.sqrt(G[i, i]) for i in range(2)]
        rho = G[0, 1] / (s[0] * s[1])
        assert abs(mo.mass - mp_phi2(c[0] / s[0], c[1] / s[1], rho)) <= mo.mass_error <= 1e-31
        # dP/dmean by central differences of the Plackett form at step 1e-12 (error ~1e-24)
        h = mpmath.mpf("1e-12")
        for k in range(2):
            def P(d, k=k):
                cc = [c[i] - mpmath.mpf(A[i][k]) * d for i in range(2)]
                return mp_phi2(cc[0] / s[0], cc[1] / s[1], rho)
            fd = (P(h) - P(-h)) / (2 * h)
            assert abs(mo.grad[k] - fd) <= mo.grad_error[k] + mpmath.mpf("1e-22")


@pytest.mark.slow
def test_random_three_row_polytopes_against_the_homotopy_route():
    # seeded random rows, offsets and covariances (rounded to 3 decimals; taken exactly)
    rng = np.random.default_rng(1)
    for _ in range(2):
        A = rng.normal(size=(3, 3)).round(3).tolist()
        b = (1.5 * rng.normal(size=3)).round(3).tolist()
        M = rng.normal(size=(3, 3))
        cov = (M @ M.T + 0.3 * np.eye(3)).round(3).tolist()
        mo = pm.polytope_moments_mp(A, b, cov, dps=20)
        with mpmath.workdps(32):
            P, g = _homotopy_moments(A, b, cov)
            assert abs(mo.mass - P) <= mo.mass_error <= 1e-19
            for x, e, ex in zip(mo.grad, mo.grad_error, g):
                assert abs(x - ex) <= e <= 1e-20


def test_four_rows_of_rank_three_against_a_product_form():
    # {z1 <= .3, z2 <= .5, z1 + z2 <= .4, z3 <= -.2}, z ~ N(0, I): Phi(-.2) times a 2-D polygon
    A, b = [[1, 0, 0], [0, 1, 0], [1, 1, 0], [0, 0, 1]], [0.3, 0.5, 0.4, -0.2]
    mo = pm.polytope_moments_mp(A, b, [[1, 0, 0], [0, 1, 0], [0, 0, 1]], dps=25)
    with mpmath.workdps(45):
        a1, a2, c, a3 = (mpmath.mpf(x) for x in b)
        P2 = mpmath.quad(lambda x: mpmath.npdf(x) * mpmath.ncdf(min(a2, c - x)),
                         [-mpmath.inf, c - a2, a1])

        def band(lo, hi):  # int_lo^hi phi(x) phi(c - x) dx
            return (mpmath.exp(-c * c / 4) / (4 * mpmath.sqrt(mpmath.pi))
                    * (mpmath.erf(hi - c / 2) - mpmath.erf(lo - c / 2)))

        P3 = mpmath.ncdf(a3)
        grad = (-(mpmath.npdf(a1) * mpmath.ncdf(min(a2, c - a1)) + band(c - a2, a1)) * P3,
                -(mpmath.npdf(a2) * mpmath.ncdf(min(a1, c - a2)) + band(c - a1, a2)) * P3,
                -mpmath.npdf(a3) * P2)
        assert mo.rank == 3
        assert abs(mo.mass - P2 * P3) <= mo.mass_error <= 1e-26
        for x, e, ex in zip(mo.grad, mo.grad_error, grad):
            assert abs(x - ex) <= e <= 1e-26


def test_degenerate_and_bad_inputs():
    cov = [[1, 0], [0, 1]]
    # duplicate row (looser copy) and a zero row with b >= 0 change nothing
    one = pm.polytope_moments_mp([[1, 1]], [0.2], cov, dps=20)
    dup = pm.polytope_moments_mp([[1, 1], [2, 2], [0, 0]], [0.2, 0.9, 0.0], cov, dps=20)
    assert one.mass == dup.mass and one.grad == dup.grad and dup.rank == 1
    with mpmath.workdps(30):
        assert abs(one.mass - mpmath.ncdf(mpmath.mpf(0.2) / mpmath.sqrt(2))) <= one.mass_error
    # opposite rows leaving no interior, and a zero row with b < 0: empty
    for A, b in (([[1, 0], [-1, 0]], [0.3, -0.3]), ([[1, 0], [0, 0]], [1.0, -1e-3])):
        mo = pm.polytope_moments_mp(A, b, cov, dps=20)
        assert mo.mass == 0 and all(g == 0 for g in mo.grad)
    # no rows: the whole space
    assert pm.polytope_moments_mp([], [], cov, dps=20).mass == 1
    bad = [
        dict(A=[[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]], b=[0] * 4,
             cov=[[1 if i == j else 0 for j in range(4)] for i in range(4)]),  # rank 4
        dict(A=[[1, 0]], b=[0], cov=[[1, 2], [2, 1]]),          # not positive definite
        dict(A=[[1, 0]], b=[0], cov=[[1, 0.1], [0.2, 1]]),      # not symmetric
        dict(A=[[1, 0]], b=[0, 1], cov=cov),                    # one bound per row
        dict(A=[[1, float("nan")]], b=[0], cov=cov),            # finite
    ]
    for kw in bad:
        with pytest.raises(InputError):
            pm.polytope_moments_mp(kw["A"], kw["b"], kw["cov"], dps=20)
    with pytest.raises(InputError):
        pm.polytope_moments_mp([[1, 0]], [0], cov, dps=5)
    with pytest.raises(InputError):
        pm.weak_threshold_mp(_hardmax_t2(), dps=200)
    # an outcome of probability zero (its polytope has no interior) is refused in one line
    hm = _hardmax_t2()
    empty = (ps.Term(1.0, ((1.0, 0.0, 0.0), (-1.0, 0.0, 0.0)), (0.0, 0.0)),)
    ch = ps.PolyhedralOutput(outcomes=hm.outcomes + ("never",), terms=hm.terms + (empty,),
                             weights=WEIGHTS, basis=())
    with pytest.raises(InputError, match="Z_out > 0"):
        pm.weak_threshold_mp(ch, dps=15)


@pytest.mark.slow
@pytest.mark.parametrize("tau", [0, 1])
def test_example_threshold_to_30_digits(tau):
    est = pm.weak_threshold_mp(_example(float(tau)), dps=30)
    with mpmath.workdps(50):
        ref = _homotopy_alpha(tau, 40)
        assert abs(mpmath.mpf(est.value) - ref) <= est.error <= 1e-29
        assert abs(mpmath.mpf(est.extra["unrounded"]) - ref) <= est.extra["error_unrounded"]


def test_cli_threshold_many_digits(run_cli):
    """`threshold weak --small-width --channel-file F --digits 20` reaches the mpmath route:
    20 significant digits, inside the double-precision engine's bar, and its own bar below
    1e-19; more than 60 digits is refused in one line."""
    import json

    from aim_sym.numerics import polyhedral_se as ps

    from aim_sym.channel_file import from_file
    from aim_sym.models import AIM

    rc, out, err = run_cli(["threshold", "weak", "--small-width", "--channel-file", EXAMPLE,
                            "--digits", "20", "--json"])
    assert rc == 0, err
    o = json.loads(out)
    assert len(o["value"].replace(".", "").lstrip("0")) == 20
    assert o["error"] < 1e-19
    d = ps.weak_threshold(AIM(from_file(EXAMPLE, tokens=2)).polyhedral)
    assert abs(float(o["value"]) - d.value) <= d.error
    rc, _, err = run_cli(["threshold", "weak", "--small-width", "--channel-file", EXAMPLE,
                          "--digits", "80"])
    assert rc == 2 and "--digits" in err and len(err.strip().splitlines()) == 1
