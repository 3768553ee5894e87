"""The equation sheets of sparsemax attention in the AIM: T = 2 (closed forms per piece) and
T = 3 (the pieces, verified by sympy; Z_out an integral on each) (THEORY 1.1, 1.4;
docs/sparsemax.md). Written by derivations/aim_sparsemax.py and printed by ``aim-sym derive
--channel sparsemax --tokens 2|3``."""

from __future__ import annotations

import sympy as sp

from . import sparsemax, sparsemax_pieces
from .sheets import canonical_block


def sheet() -> str:
    """The pieces, log Z_out and g_out of every piece, in paper notation."""
    lines = [
        "# AIM, sparsemax attention, T = 2",
        "",
        "Channel: $y_{a\\cdot} = \\mathrm{sparsemax}(\\beta h_{a\\cdot})$ row-wise (Martins and "
        "Astudillo 2016). With $d_0 = h_{00} - h_{01}$, $d_1 = h_{11} - h_{01}$: "
        "$y_{aa} = \\mathrm{clip}((1 + \\beta d_a)/2, 0, 1)$, $y_{a,1-a} = 1 - y_{aa}$.",
        "",
        "Conventions (THEORY 1.1): $h_{ab} \\sim \\mathcal N(\\omega_{ab}, (1+\\delta_{ab}) V)$, so "
        "$d \\sim \\mathcal N(m, V C_0)$, $m = (\\omega_{00} - \\omega_{01}, \\omega_{11} - "
        "\\omega_{01})$, $C_0 = \\begin{pmatrix} 3 & 1 \\\\ 1 & 3 \\end{pmatrix}$ (correlation 1/3). "
        "Pieces per row: low ($\\beta d_a \\le -1$), mid (observed $d_a = x_a$), high "
        "($\\beta d_a \\ge 1$). $Z_{\\rm out}$ is a density in the y-measure (point masses at "
        "$y_{aa} \\in \\{0, 1\\}$, Lebesgue on $(0, 1)$): each interior row carries $2/\\beta$. "
        "$g_{ab} = \\partial_{\\omega_{ab}} \\log Z_{\\rm out}$; $\\Phi$, $\\Phi_2$ the normal CDFs. "
        "Indices are 0-based here.",
        "",
    ]
    for label, expr in sparsemax.equations():
        lines.append(f"- {label}: $${sp.latex(expr)}$$")
    lines += ["", "Everything above is closed form; the expectations over the interior "
              "(one or two observed $d_a$) are integrals (aim_sym.numerics.sparsemax).", ""]
    return "\n".join(lines) + "\n" + canonical_block(expressions())


def expressions() -> dict:
    """The sheet's named expressions (compared by tests/test_sheets.py when listed there)."""
    return dict(sparsemax.equations())


def sheet_t3() -> str:
    """The T = 3 pieces: row formulas (verified by sympy), the piece classes, Z_out and g_out."""
    T = 3
    lines = [
        "# AIM, sparsemax attention, T = 3",
        "",
        "Channel: $y_{a\\cdot} = \\mathrm{sparsemax}(\\beta h_{a\\cdot})$ row-wise, $v = \\beta "
        "h_{a\\cdot}$, $y = (v - \\tau)_+$ with $\\sum_i y_i = 1$ (aim_sym/sparsemax_pieces.py). "
        "On the piece where row $a$ has support $S$: $\\tau = (\\sum_{i \\in S} v_i - 1)/|S|$, "
        "$y_i = v_i - \\tau$ on $S$, 0 off it; the piece is $\\{v_i > \\tau\\ (i \\in S),\\ v_j "
        "\\le \\tau\\ (j \\notin S)\\}$ and $y$ reveals the $|S| - 1$ differences $v_i - v_k$ "
        "($i, k \\in S$). Indices are 0-based; $h$ is symmetric, flat order "
        "$h_{00}, h_{01}, h_{02}, h_{11}, h_{12}, h_{22}$, $h \\sim \\mathcal N(\\omega, V W)$, "
        "$W = \\mathrm{diag}(1 + \\delta_{ab})$.",
        "",
        "## Row 0 on each support (rows 1, 2 by relabelling the tokens)",
        "",
    ]
    for label, expr in sparsemax_pieces.equations(T):
        lines.append(f"- {label}: $${sp.latex(expr)}$$")
    checks = [(a, S, sparsemax_pieces.verify_row_piece(sparsemax_pieces.row_piece(T, a, S)))
              for a in range(T) for S in sparsemax_pieces.supports(T)]
    failed = [c for c in checks if c[2]]
    lines += [
        "",
        f"Verified by sympy for all {len(checks)} (row, support) pairs: $\\sum y = 1$; $y = (v - "
        "\\tau)_+$ on the piece (the projection's KKT conditions are the piece's conditions); $y$ "
        "affine in $h$ and fixed by the observed differences. Failures: "
        f"{len(failed)}.",
        "",
        "## Pieces of the channel (one support per row), up to relabelling the tokens",
        "",
        "$r$: rank of the stacked observed differences (the dimension of $y$ on the piece); "
        "$m$: conditions $A h \\le b$; interior: decided by an exact rational linear programme "
        "(empty pieces carry no probability).",
        "",
        "| supports (rows 0, 1, 2) | pieces in class | differences | r | m | interior |",
        "|---|---|---|---|---|---|",
    ]
    n_all = n_empty = 0
    for ss, size in sparsemax_pieces.orbits(T):
        p = sparsemax_pieces.piece(T, ss)
        inside = sparsemax_pieces.has_interior(T, ss)
        n_all += size
        n_empty += 0 if inside else size
        lines.append(f"| {p.name} | {size} | {p.C.rows} | {p.rank} | {p.A.rows} | "
                     f"{'yes' if inside else 'empty'} |")
    lines += [
        "",
        f"{n_all} pieces in {len(sparsemax_pieces.orbits(T))} classes; {n_empty} are empty. Where "
        "$r$ is below the number of differences (every row with full support: 6 differences of rank "
        "5; the cycle {1,2} / {0,2} / {0,1}), $y$ satisfies a linear relation and lies on a "
        "lower-dimensional set.",
        "",
        "## Z_out and g_out on a piece",
        "",
        "With $C_I$ an independent subset of the observed differences (rank $r$) and the conditions "
        "$A h \\le b$:",
        "",
        "$$Z_{\\rm out}(y) = \\mathcal N(y_I; C_I \\omega, V C_I W C_I^T)\\, P(A h \\le b \\mid "
        "C_I h = y_I),$$",
        "$$g_{\\rm out} = (V W)^{-1} E[h - \\omega \\mid y], \\qquad \\partial_\\omega g_{\\rm "
        "out} = (V W)^{-1} \\mathrm{Cov}[h \\mid y] (V W)^{-1} - (V W)^{-1},$$",
        "",
        "because $\\partial_\\omega \\log \\mathcal N(h; \\omega, V W) = (V W)^{-1}(h - \\omega)$ "
        "and the piece does not depend on $\\omega$. The conditional polytope probability and the "
        "moments of $h$ given $y$ are integrals (Gaussian polytope moments, "
        "aim_sym.numerics.polytope); the rest is exact.",
        "",
    ]
    return "\n".join(lines) + "\n" + canonical_block(expressions_t3())


def expressions_t3() -> dict:
    """The T = 3 sheet's named expressions: tau and y of row 0 on every support."""
    return dict(sparsemax_pieces.equations(3))


def sparsemax_sheet(tokens: int) -> str:
    """The sheet at T = ``tokens`` (2 or 3)."""
    return sheet() if tokens == 2 else sheet_t3()


def sparsemax_expressions(tokens: int) -> dict:
    """The named expressions of the sheet at T = ``tokens`` (2 or 3)."""
    return expressions() if tokens == 2 else expressions_t3()
