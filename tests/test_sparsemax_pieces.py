"""The sparsemax pieces at any T (aim_sym/sparsemax_pieces.py; THEORY 1.1, 1.4): the row formulas
against an independent sort-based sparsemax, the tiling of h-space, the empty pieces against a
exact certificates of the empty pieces, and the T = 2 reduction."""

import itertools

import numpy as np
import pytest
import sympy as sp

from aim_sym import sparsemax
from aim_sym import sparsemax_pieces as smp


def sparsemax_sorted(v: np.ndarray) -> np.ndarray:
    """Sparsemax of one vector by sorting (Martins and Astudillo 2016, Algorithm 1)."""
    z = np.sort(v)[::-1]
    cs = np.cumsum(z)
    k = np.arange(1, len(v) + 1)
    kmax = k[1 + k * z > cs][-1]
    tau = (cs[kmax - 1] - 1) / kmax
    return np.maximum(v - tau, 0.0)


@pytest.mark.parametrize("T", [2, 3, 4])
def test_row_pieces_verify(T):
    for a in range(T):
        for S in smp.supports(T):
            assert smp.verify_row_piece(smp.row_piece(T, a, S)) == []


def test_verification_detects_a_wrong_piece():
    rp = smp.row_piece(3, 0, (0, 1))
    wrong_tau = smp.RowPiece(rp.T, rp.row, rp.support, rp.tau + sp.Rational(1, 7),
                             tuple(e - sp.Rational(1, 7) if e != 0 else e for e in rp.y),
                             rp.stats, rp.conditions)
    assert "sum y != 1" in smp.verify_row_piece(wrong_tau)
    missing = smp.RowPiece(rp.T, rp.row, rp.support, rp.tau, rp.y, rp.stats, rp.conditions[:-1])
    assert any("missing" in b for b in smp.verify_row_piece(missing))


@pytest.mark.parametrize("beta", [0.5, 2.0])
def test_pieces_tile_h_and_reproduce_sparsemax(beta):
    T = 3
    arrays = smp.piece_arrays(T, beta_value=beta)
    interior = {ss: smp.has_interior(T, ss) for ss in (p["supports"] for p in arrays)}
    rows = {(a, S): sp.lambdify(smp.h_symbols(T), [e.subs(smp.beta, beta) for e in
                                                   smp.row_piece(T, a, S).y], modules="numpy")
            for a in range(T) for S in smp.supports(T)}
    rng = np.random.default_rng(7)
    hits = set()
    for h in rng.normal(scale=1.2 / beta, size=(400, 6)):
        inside = [p for p in arrays if np.all(p["A"] @ h <= p["b"] + 1e-12)]
        assert len(inside) == 1
        p = inside[0]
        assert interior[p["supports"]]
        hits.add(p["supports"])
        H = np.zeros((T, T))
        for k, (a, b) in enumerate(smp.pairs(T)):
            H[a, b] = H[b, a] = h[k]
        for a, S in enumerate(p["supports"]):
            want = sparsemax_sorted(beta * H[a])
            got = np.array(rows[(a, S)](*h), dtype=float)
            assert np.max(np.abs(got - want)) < 1e-12
            assert set(np.flatnonzero(want > 0)) == set(S)
        # the observed statistics are differences of the outputs on the supports
        y_diff = []
        for a, S in enumerate(p["supports"]):
            want = sparsemax_sorted(beta * H[a])
            y_diff += [want[S[0]] - want[i] for i in S[1:]]
        if y_diff:
            C_all = np.array(smp.piece(T, p["supports"]).C.subs(smp.beta, beta).tolist(), float)
            assert np.max(np.abs(C_all @ h - np.array(y_diff))) < 1e-12
            assert np.linalg.matrix_rank(p["C"]) == p["C"].shape[0] == smp.piece(
                T, p["supports"]).rank
    assert len(hits) > 60          # most classes of pieces are visited by 400 draws


def test_interior_certificates_hold_in_exact_arithmetic():
    """Each piece's answer is proved: an interior point (A h < b) or Gordan-Motzkin weights
    (u >= 0, sum u = 1, u^T A = 0, u^T b <= 0), checked here with sympy rationals."""
    T = 3
    classes = smp.orbits(T)
    assert sum(n for _, n in classes) == (2**T - 1) ** T
    n_empty = 0
    for ss, size in classes:
        p = smp.piece(T, ss)
        A, b = p.A.subs(smp.beta, 1), p.b.subs(smp.beta, 1)
        inside, cert = smp.interior_certificate(T, ss)
        c = sp.Matrix([sp.Rational(x.numerator, x.denominator) for x in cert])
        if inside:
            assert all(v < 0 for v in (A * c - b))
        else:
            n_empty += size
            assert all(v >= 0 for v in c) and sum(c) == 1
            assert (c.T * A).is_zero_matrix and (c.T * b)[0] <= 0
    # the cyclic singletons are empty; the all-diagonal piece is not
    assert not smp.has_interior(T, ((1,), (2,), (0,)))
    assert smp.has_interior(T, ((0,), (1,), (2,)))
    assert 0 < n_empty < 343


def test_orbits_are_closed_under_relabelling():
    T = 3
    reps = {ss for ss, _ in smp.orbits(T)}
    for ss in itertools.product(smp.supports(T), repeat=T):
        images = {smp._relabel(ss, p) for p in itertools.permutations(range(T))}
        assert len(images & reps) == 1


def test_two_tokens_reduce_to_the_clip_formula():
    h00, h01 = smp.h_symbols(2)[:2]
    mid = smp.row_piece(2, 0, (0, 1)).y[0]
    d = sp.Symbol("d_0")
    clip_mid = sparsemax.y_of_d(d).args  # Min(Max((1 + beta d)/2, 0), 1)
    inner = [a for a in clip_mid if a != 1][0].args
    formula = [a for a in inner if a != 0][0].subs({sparsemax.beta: smp.beta, d: h00 - h01})
    assert sp.simplify(mid - formula) == 0


def test_numeric_t3_statistics_span_the_derived_ones():
    """numerics/sparsemax_t3 builds its kept statistics from support masks by hand; on every
    non-empty piece they span the same space as the sympy-derived observed differences (bit b of
    row a's mask: token b in the support)."""
    from aim_sym.numerics import sparsemax_t3

    for p in smp.piece_arrays(3, beta_value=1.0):
        if not smp.has_interior(3, p["supports"]):
            continue
        masks = tuple(sum(1 << i for i in S) for S in p["supports"])
        C = sparsemax_t3.statistic_matrix(masks)
        r = p["C"].shape[0]
        assert C.shape[0] == r
        if r:
            assert np.linalg.matrix_rank(np.vstack([C, p["C"]])) == r
