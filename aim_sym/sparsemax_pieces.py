"""Sparsemax attention at any number of tokens T: the channel's pieces, derived with sympy
(THEORY 1.1, 1.4; Martins and Astudillo 2016).

Row a of the output is y_a. = sparsemax(v), v = beta h_a. (h symmetric T x T, so row a reads
h_{min(a,j) max(a,j)}): the Euclidean projection of v onto the simplex, y = (v - tau)_+ with tau
fixed by sum y = 1. On the piece where row a has support S (a non-empty subset of the tokens),

    tau = (sum_{i in S} v_i - 1) / |S|,   y_i = v_i - tau (i in S),   y_j = 0 (j not in S),

and the piece is the polyhedron {v_i - tau > 0 (i in S), v_j - tau <= 0 (j not in S)}: y is
affine in h there, and it reveals exactly the |S| - 1 differences v_i - v_k (i, k in S). A piece
of the whole channel picks one support per row (7^3 = 343 at T = 3); it observes the stacked
differences of its rows, which can be linearly dependent across rows (at T = 3 with full support
in every row, 6 differences of rank 5: y then lies on a lower-dimensional set).

On a piece P with observed statistics C h (an independent subset C_I of rank r) and conditions
A h <= b, with h ~ N(omega, V W) (W = diag(1 + delta_ab)):

    Z_out(y) = N(y_I; C_I omega, V C_I W C_I^T) P(A h <= b | C_I h = y_I)   (a density in y_I),
    g_out = (V W)^-1 E[h - omega | y],   dg_out = (V W)^-1 Cov[h | y] (V W)^-1 - (V W)^-1,

the second line because d/domega log N(h; omega, V W) = (V W)^-1 (h - omega) and the piece does
not depend on omega. The conditional polytope probability is an integral (polytope moments,
:mod:`aim_sym.numerics.polytope`); everything else here is exact. :func:`piece_arrays` hands
the pieces to the numeric layer as arrays.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from functools import cache

import numpy as np
import sympy as sp

beta = sp.Symbol("beta", positive=True)


def pairs(T: int) -> tuple[tuple[int, int], ...]:
    """The flat order of h: (0, 0), (0, 1), ..., (T-1, T-1) (a <= b), as in the AIM channels."""
    return tuple((a, b) for a in range(T) for b in range(a, T))


@cache
def h_symbols(T: int) -> tuple[sp.Symbol, ...]:
    """h_ab (a <= b) in the flat order of :func:`pairs`."""
    return tuple(sp.Symbol(f"h_{a}{b}", real=True) for a, b in pairs(T))


def h_entry(T: int, a: int, b: int) -> sp.Symbol:
    """h_ab of the symmetric matrix (either order of the indices)."""
    return h_symbols(T)[pairs(T).index((min(a, b), max(a, b)))]


def supports(T: int) -> tuple[tuple[int, ...], ...]:
    """The 2^T - 1 non-empty supports of one row, by size then lexicographically."""
    return tuple(S for k in range(1, T + 1) for S in itertools.combinations(range(T), k))


@dataclass(frozen=True)
class RowPiece:
    """Row ``row`` on support ``support``: its outputs ``y`` (T entries, affine in h), the
    observed statistics ``stats`` (v_{S_0} - v_{S_k}, k >= 1) and the ``conditions`` e <= 0 that
    define the piece (the strict ones, -y_i < 0, differ from e <= 0 by a null set)."""

    T: int
    row: int
    support: tuple[int, ...]
    tau: sp.Expr
    y: tuple[sp.Expr, ...]
    stats: tuple[sp.Expr, ...]
    conditions: tuple[sp.Expr, ...]


@cache
def row_piece(T: int, row: int, support: tuple[int, ...]) -> RowPiece:
    """The closed form of sparsemax(beta h_row.) on one support (module docstring)."""
    v = [beta * h_entry(T, row, j) for j in range(T)]
    S = tuple(support)
    tau = (sum(v[i] for i in S) - 1) / len(S)
    y = tuple(sp.expand(v[j] - tau) if j in S else sp.Integer(0) for j in range(T))
    stats = tuple(sp.expand(v[S[0]] - v[i]) for i in S[1:])
    conditions = tuple([sp.expand(-(v[i] - tau)) for i in S if len(S) > 1]
                       + [sp.expand(v[j] - tau) for j in range(T) if j not in S])
    return RowPiece(T, row, S, sp.expand(tau), y, stats, conditions)


def verify_row_piece(rp: RowPiece) -> list[str]:
    """Symbolic checks that ``rp`` is the projection on its piece; returns the failures.

    (i) sum y = 1; (ii) y = (v - tau)_+ on the piece: y_i = v_i - tau on the support, and the
    conditions say v_i - tau > 0 there and v_j - tau <= 0 off it (KKT of the projection);
    (iii) y is affine in h and every y_i is determined by the statistics (y_i - y_k = v_i - v_k)."""
    T, hs = rp.T, h_symbols(rp.T)
    v = [beta * h_entry(T, rp.row, j) for j in range(T)]
    bad = []
    if sp.simplify(sum(rp.y) - 1) != 0:
        bad.append("sum y != 1")
    for j in range(T):
        want = v[j] - rp.tau if j in rp.support else 0
        if sp.simplify(rp.y[j] - want) != 0:
            bad.append(f"y_{j} is not (v - tau)_+ on the piece")
        if j not in rp.support and sp.simplify(v[j] - rp.tau) not in rp.conditions:
            bad.append(f"condition v_{j} <= tau missing")
    for i in rp.support:
        if len(rp.support) > 1 and sp.expand(-(v[i] - rp.tau)) not in rp.conditions:
            bad.append(f"condition y_{i} > 0 missing")
    if any(sp.diff(e, h, 2) != 0 for e in rp.y for h in hs):
        bad.append("y not affine in h")
    S = rp.support
    for k, i in enumerate(S[1:]):
        if sp.simplify((rp.y[S[0]] - rp.y[i]) - rp.stats[k]) != 0:
            bad.append(f"y_{S[0]} - y_{i} is not the statistic v_{S[0]} - v_{i}")
    return bad


@dataclass(frozen=True)
class Piece:
    """One piece of the whole channel: a support per row, the stacked statistics ``C`` (rows
    of coefficients of h, entries in beta), their rank, and the conditions A h <= b."""

    supports: tuple[tuple[int, ...], ...]
    C: sp.Matrix
    rank: int
    A: sp.Matrix
    b: sp.Matrix

    @property
    def name(self) -> str:
        return " / ".join("{" + ",".join(map(str, S)) + "}" for S in self.supports)


def _coefficients(exprs, hs) -> tuple[sp.Matrix, sp.Matrix]:
    """Rows of coefficients of h and the constants: e = M h + k."""
    M = sp.Matrix([[sp.diff(e, h) for h in hs] for e in exprs]) if exprs else sp.zeros(0, len(hs))
    k = sp.Matrix([sp.expand(e - sum(M[r, c] * hs[c] for c in range(len(hs))))
                   for r, e in enumerate(exprs)]) if exprs else sp.zeros(0, 1)
    return M, k


@cache
def piece(T: int, row_supports: tuple[tuple[int, ...], ...]) -> Piece:
    """The piece with support ``row_supports[a]`` in row a."""
    hs = h_symbols(T)
    rps = [row_piece(T, a, S) for a, S in enumerate(row_supports)]
    C, _ = _coefficients([s for rp in rps for s in rp.stats], hs)
    A, k = _coefficients([e for rp in rps for e in rp.conditions], hs)
    rank = C.subs(beta, 1).rank() if C.rows else 0
    return Piece(tuple(row_supports), C, rank, A, -k)


@cache
def interior_certificate(T: int, row_supports: tuple[tuple[int, ...], ...]) -> tuple[bool, tuple]:
    """Whether the piece has an interior point (positive probability), with an exact certificate.

    A floating-point linear programme proposes the answer; it is then proved in rational
    arithmetic (the conditions do not depend on beta up to scaling, so beta = 1): either a point
    h with A h < b in every row, or (Gordan-Motzkin) weights u >= 0 with sum u = 1, u^T A = 0 and
    u^T b <= 0, which no interior point can satisfy. Returns (True, h) or (False, u); raises
    ``RuntimeError`` if the proposal cannot be proved (never a silent answer). Cyclic singletons
    ({1} / {2} / {0} at T = 3: v_01 > v_02 + 1 > v_12 + 2 > v_01 + 3) are empty."""
    from fractions import Fraction

    from scipy.optimize import linprog

    p = piece(T, row_supports)
    A = [[Fraction(str(sp.nsimplify(x))) for x in row] for row in p.A.subs(beta, 1).tolist()]
    b = [Fraction(str(sp.nsimplify(x))) for x in p.b.subs(beta, 1)]
    m, d = len(A), len(A[0])
    Af, bf = np.array(A, dtype=float), np.array(b, dtype=float)
    res = linprog(np.r_[np.zeros(d), -1.0], A_ub=np.c_[Af, np.ones(m)], b_ub=bf,
                  bounds=[(None, None)] * d + [(None, 1.0)], method="highs")
    if res.status == 0 and -res.fun > 1e-9:
        h = [Fraction(x).limit_denominator(10**6) for x in res.x[:d]]
        if all(sum(A[r][c] * h[c] for c in range(d)) < b[r] for r in range(m)):
            return True, tuple(h)
    else:
        far = linprog(bf, A_eq=np.r_[Af.T, np.ones((1, m))], b_eq=np.r_[np.zeros(d), 1.0],
                      bounds=[(0, None)] * m, method="highs")
        if far.status == 0:
            u = [Fraction(x).limit_denominator(10**4) for x in far.x]
            if (all(x >= 0 for x in u) and sum(u) == 1
                    and all(sum(u[r] * A[r][c] for r in range(m)) == 0 for c in range(d))
                    and sum(u[r] * b[r] for r in range(m)) <= 0):
                return False, tuple(u)
    raise RuntimeError(f"could not certify the interior of piece {p.name}")


def has_interior(T: int, row_supports: tuple[tuple[int, ...], ...]) -> bool:
    """Whether the piece carries probability (:func:`interior_certificate`)."""
    return interior_certificate(T, row_supports)[0]


def pieces(T: int) -> tuple[Piece, ...]:
    """All (2^T - 1)^T pieces."""
    return tuple(piece(T, ss) for ss in itertools.product(supports(T), repeat=T))


def _relabel(ss: tuple[tuple[int, ...], ...], perm: tuple[int, ...]) -> tuple:
    """The pattern of supports after renaming token t as perm[t] (rows and columns together)."""
    out = [None] * len(ss)
    for a, S in enumerate(ss):
        out[perm[a]] = tuple(sorted(perm[i] for i in S))
    return tuple(out)


def orbits(T: int) -> list[tuple[tuple[tuple[int, ...], ...], int]]:
    """Classes of pieces under relabelling the tokens (the channel is symmetric under it):
    (representative, class size), in the order of :func:`pieces`."""
    seen, out = set(), []
    for ss in itertools.product(supports(T), repeat=T):
        if ss in seen:
            continue
        cls = {_relabel(ss, p) for p in itertools.permutations(range(T))}
        seen |= cls
        out.append((ss, len(cls)))
    return out


def piece_arrays(T: int, *, beta_value: float) -> list[dict]:
    """Every piece as numeric arrays for the numeric layer: ``supports``, ``C`` (independent
    rows only, r x d), ``A`` (m x d) and ``b`` (m) with A h <= b, at ``beta = beta_value``."""
    out = []
    for p in pieces(T):
        C = np.array(p.C.subs(beta, beta_value).tolist(), dtype=float).reshape(p.C.rows, p.A.cols)
        keep: list[int] = []
        for r in range(C.shape[0]):
            if np.linalg.matrix_rank(C[keep + [r]]) > len(keep):
                keep.append(r)
        out.append({"supports": p.supports, "C": C[keep],
                    "A": np.array(p.A.subs(beta, beta_value).tolist(), dtype=float),
                    "b": np.array(p.b.subs(beta, beta_value).tolist(), dtype=float).ravel()})
    return out


def equations(T: int) -> list[tuple[str, sp.Expr]]:
    """(label, expression) pairs for the sheet: tau and y of row 0 on each support (the other
    rows follow by relabelling the tokens)."""
    rows = []
    for S in supports(T):
        rp = row_piece(T, 0, S)
        tag = "{" + ",".join(map(str, S)) + "}"
        rows.append((f"tau [row 0, S = {tag}]", rp.tau))
        for j in S:
            rows.append((f"y_0{j} [row 0, S = {tag}]", rp.y[j]))
    return rows


__all__ = ["beta", "pairs", "h_symbols", "h_entry", "supports", "RowPiece", "row_piece",
           "verify_row_piece", "Piece", "piece", "pieces", "interior_certificate", "has_interior",
           "orbits", "piece_arrays", "equations"]
