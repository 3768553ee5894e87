"""Sparsemax attention in the AIM at T = 2 tokens: the output pieces, Z_out per piece in closed
form, g_out = d log Z_out / d omega and its Jacobian derived with sympy, compiled with lambdify
(THEORY 1.1, 1.4; Martins and Astudillo 2016).

Row a of y is sparsemax(beta h_a.), the Euclidean projection of beta h_a. onto the simplex. For
two entries it is y_aa = clip((1 + beta d_a) / 2, 0, 1), y_ab = 1 - y_aa, with

    d_0 = h_00 - h_01,   d_1 = h_11 - h_01   (row 1 is (h_01, h_11): h is symmetric).

So y depends on h only through d = (d_0, d_1) ~ N(m, V C0), m = (omega_00 - omega_01,
omega_11 - omega_01), C0 = [[3, 1], [1, 3]] (Var h_aa = 2V, Var h_01 = V; correlation 1/3).
Each row is in one of three pieces: ``low`` (beta d_a <= -1, y_aa = 0), ``mid`` (|beta d_a| < 1,
d_a observed exactly) or ``high`` (beta d_a >= 1, y_aa = 1). Z_out is a density with respect to
the y-measure (a point mass at y_aa = 0 and at 1 plus Lebesgue measure on (0, 1), per row), as a
function of the observed d_a of the interior rows (y_aa = (1 + beta d_a) / 2, dy = beta/2 dd):

* mid, mid: (2/beta)^2 times the bivariate Gaussian density of d;
* mid, saturated: (2/beta) times the density of the observed d times a conditional Phi;
* saturated, saturated: an orthant probability Phi2 at correlation +-1/3.

This module is compiled-layer code (it lambdifies through :mod:`aim_sym.codegen`); the numbers
are :mod:`aim_sym.numerics.sparsemax`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import sympy as sp

from .codegen import compile_expr
from .special import Phi, Phi2

#: the three pieces of one row, with the sign s of the saturated ones (y_aa = (1 + s) / 2)
ROW_PIECES: dict[str, int] = {"low": -1, "mid": 0, "high": 1}

x0, x1 = sp.symbols("x_0 x_1", real=True)               # observed d_a of the interior rows
w00, w01, w11 = sp.symbols("omega_00 omega_01 omega_11", real=True)
V = sp.Symbol("V", positive=True)
beta = sp.Symbol("beta", positive=True)
#: argument order of every compiled function
ARGS: tuple[sp.Symbol, ...] = (x0, x1, w00, w01, w11, V, beta)
OMEGA: tuple[sp.Symbol, ...] = (w00, w01, w11)
#: the weights (1 + delta_ab) of (g_00, g_01, g_11) in q_hat = 2 alpha E[sum (1 + delta_ab) g_ab^2]
WEIGHTS: tuple[int, ...] = (2, 1, 2)


@dataclass(frozen=True)
class Piece:
    """One output piece: the pieces of rows 0 and 1, the interior rows, and log Z_out there."""

    rows: tuple[str, str]
    interior: tuple[int, ...]
    log_z: sp.Expr

    @property
    def name(self) -> str:
        return f"{self.rows[0]}-{self.rows[1]}"


def _log_z(rows: tuple[str, str]) -> sp.Expr:
    """log Z_out of one piece (module docstring), written as a sum of logs so that g_out is a
    sum of Gaussian scores and Mills ratios."""
    b = 1 / beta
    m = (w00 - w01, w11 - w01)
    x = (x0, x1)
    sd = sp.sqrt(3 * V)                  # sd of d_a
    sdc = sp.sqrt(sp.Rational(8, 3) * V)  # sd of d_other given d_a (regression slope 1/3)
    s = tuple(ROW_PIECES[r] for r in rows)
    if s == (0, 0):
        z = (x[0] - m[0], x[1] - m[1])
        quad = (3 * z[0] ** 2 - 2 * z[0] * z[1] + 3 * z[1] ** 2) / (8 * V)   # z^T (V C0)^-1 z
        return 2 * sp.log(2 / beta) - quad / 2 - sp.log(2 * sp.pi * sp.sqrt(8) * V)
    if 0 in s:
        a = s.index(0)                    # the interior row
        o, so = 1 - a, s[1 - a]
        za = x[a] - m[a]
        mu_c = m[o] + za / 3
        return (sp.log(2 / beta) - za**2 / (6 * V) - sp.log(sp.sqrt(2 * sp.pi) * sd)
                + sp.log(Phi(so * (mu_c - so * b) / sdc)))
    # both saturated: P(s_0 d_0 >= b, s_1 d_1 >= b)
    return sp.log(Phi2((s[0] * m[0] - b) / sd, (s[1] * m[1] - b) / sd,
                       sp.Rational(s[0] * s[1], 3)))


@cache
def pieces() -> tuple[Piece, ...]:
    """The nine pieces (3 per row), in the order (low, mid, high) x (low, mid, high)."""
    out = []
    for r0 in ROW_PIECES:
        for r1 in ROW_PIECES:
            rows = (r0, r1)
            interior = tuple(a for a, r in enumerate(rows) if r == "mid")
            out.append(Piece(rows, interior, _log_z(rows)))
    return tuple(out)


@dataclass(frozen=True)
class Derived:
    """Z_out, g_out (3: omega_00, omega_01, omega_11) and dg_out / domega (3 x 3) of one piece."""

    piece: Piece
    z: sp.Expr
    g: sp.Matrix
    dg: sp.Matrix


@cache
def derive() -> tuple[Derived, ...]:
    """g_out = d log Z_out / d omega and its Jacobian for every piece (exact, by sympy)."""
    out = []
    for p in pieces():
        g = sp.Matrix([sp.diff(p.log_z, w) for w in OMEGA])
        dg = g.jacobian(sp.Matrix(OMEGA))
        out.append(Derived(p, sp.exp(p.log_z), g, dg))
    return tuple(out)


m_row = sp.Symbol("m", real=True)       # mean of one row's d_a given omega


@cache
def row_output_moments() -> tuple[sp.Expr, sp.Expr, sp.Expr]:
    """(y(m), E[y | m], E[y^2 | m]) of one row's y_aa = clip((1 + beta d) / 2, 0, 1) with
    d ~ N(m, 3 V) (THEORY 1.5: the Bayes predictor and the posterior variance of a new sample's
    output). Derived by sympy: with d = m + sqrt(3 V) z, y = c0 + c1 z on the window
    a < z < b (a, b = (-+1/beta - m) / sqrt(3 V)) and y = 1 above it, so
    E[y^k] = sum_j binom(k, j) c0^(k-j) c1^j int_a^b z^j phi(z) dz + P(z > b)."""
    z, a, b = sp.symbols("z a b", real=True)
    phi = sp.exp(-z**2 / 2) / sp.sqrt(2 * sp.pi)
    moments = [sp.integrate(z**j * phi, (z, a, b)) for j in range(3)]
    s = sp.sqrt(3 * V)
    c0, c1 = (1 + beta * m_row) / 2, beta * s / 2
    upper = (1 - sp.erf(b / sp.sqrt(2))) / 2
    E = [sum(sp.binomial(k, j) * c0**(k - j) * c1**j * moments[j] for j in range(k + 1)) + upper
         for k in (1, 2)]
    lims = {a: (-1 / beta - m_row) / s, b: (1 / beta - m_row) / s}
    return (y_of_d(m_row),) + tuple(e.subs(lims) for e in E)


def y_of_d(d: sp.Expr) -> sp.Expr:
    """The diagonal output y_aa of one row as a function of d_a (sparsemax of two entries)."""
    return sp.Min(sp.Max((1 + beta * d) / 2, 0), 1)


@dataclass(frozen=True)
class CompiledPiece:
    """Callables of ``ARGS`` = (x_0, x_1, omega_00, omega_01, omega_11, V, beta) for one piece:
    z (Z_out in the y-measure), log_z, g (3 values) and dg (3 x 3 nested lists)."""

    rows: tuple[str, str]
    interior: tuple[int, ...]
    z: object
    log_z: object
    g: object
    dg: object


@dataclass(frozen=True)
class CompiledSparsemax:
    """The sparsemax T = 2 output channel as plain callables (what the numeric layer reads)."""

    pieces: tuple[CompiledPiece, ...]
    weights: tuple[int, ...] = WEIGHTS
    backend: str = "numpy"
    #: (m, V, beta) -> [y(m), E[y | m], E[y^2 | m]] of one row (:func:`row_output_moments`)
    row_moments: object = None


@cache
def compile_sparsemax(backend: str = "numpy") -> CompiledSparsemax:
    """lambdify every piece's Z_out, log Z_out, g_out and dg_out (``modules=`` set by
    :func:`aim_sym.codegen.compile_expr`); ``backend`` is ``"numpy"`` or ``"mpmath"``."""
    out = []
    for d in derive():
        out.append(CompiledPiece(
            d.piece.rows, d.piece.interior,
            compile_expr(d.z, ARGS, backend=backend),
            compile_expr(d.piece.log_z, ARGS, backend=backend),
            compile_expr(list(d.g), ARGS, backend=backend),
            compile_expr(d.dg.tolist(), ARGS, backend=backend),
        ))
    moments = compile_expr(list(row_output_moments()), (m_row, V, beta), backend=backend)
    return CompiledSparsemax(tuple(out), backend=backend, row_moments=moments)


def equations() -> list[tuple[str, sp.Expr]]:
    """(label, expression) pairs for the equation sheet: y(d), log Z_out and g_out per piece."""
    rows = [("y_00(d_0)", y_of_d(sp.Symbol("d_0")))]
    for d in derive():
        rows.append((f"log Z_out [{d.piece.name}]", d.piece.log_z))
        for k, w in enumerate(("00", "01", "11")):
            rows.append((f"g_{w} [{d.piece.name}]", sp.simplify(d.g[k])))
    return rows


__all__ = ["ARGS", "OMEGA", "WEIGHTS", "ROW_PIECES", "Piece", "Derived", "CompiledPiece",
           "CompiledSparsemax", "pieces", "derive", "compile_sparsemax", "equations", "y_of_d",
           "row_output_moments"]
