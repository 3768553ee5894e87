"""Equation sheet of the AIM with sparsemax attention at T = 2, the small-width threshold
alpha_bar_c(beta) and the SE curves at rho = 0.5 (THEORY 1.1, 1.2, 1.4; docs/sparsemax.md).

``python derivations/aim_sparsemax.py`` writes derivations/sheets/aim_sparsemax_T2.md and
aim_sparsemax_T3.md (the T = 3 pieces);
``--figure PATH`` also prints the threshold table (mpmath at two precisions beside seeded Monte
Carlo) and draws alpha_bar_c against beta with its two limits (docs/figures/sparsemax_threshold.png);
``--curves PATH`` prints and draws the SE curves mmse(alpha) at rho = 0.5 for beta in {0.5, 1, 2}
against softmax and hardmax (docs/figures/sparsemax_curves.png).
"""

import math
import sys
import time

import sympy as sp

from aim_sym import sparsemax, sparsemax_pieces
from aim_sym.sheets import canonical_block

BETAS = (0.1, 0.2, 0.3, 0.5, 1.0, 2.0, 3.0, 5.0, 10.0, 30.0, 100.0, 1000.0)


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


SHEETS = {"aim_sparsemax_T2.md": (sheet, expressions),
          "aim_sparsemax_T3.md": (sheet_t3, expressions_t3)}


def hardmax_T2() -> float:
    A = math.asin(1 / 3)
    return 3 * (math.pi**2 - 4 * A**2) / (8 * (3 * math.pi - 2 * A))


def threshold_table(betas=BETAS, dps: int = 20, n_mc: int = 2_000_000) -> list[dict]:
    """alpha_bar_c(beta): mpmath at dps + 5 and dps + 15 digits (value, bar), seeded Monte
    Carlo of S (alpha = 1/(2S) with its propagated standard error), seconds of the mpmath route."""
    from aim_sym.numerics import sparsemax as sm

    cs, cm = sparsemax.compile_sparsemax("numpy"), sparsemax.compile_sparsemax("mpmath")
    rows = []
    for beta in betas:
        t0 = time.perf_counter()
        e = sm.weak_threshold_mp(cm, beta=beta, dps=dps)
        sec = time.perf_counter() - t0
        mc = sm.monte_carlo_s(cs, beta=beta, n=n_mc, seed=2026)
        a_mc = 1 / (2 * mc.value)
        rows.append({"beta": beta, "alpha": e.value, "error": e.error, "mc": a_mc,
                     "mc_error": mc.error / (2 * mc.value**2), "seconds": sec})
    return rows


def draw_threshold(rows: list[dict], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    from aim_sym.numerics import sparsemax as sm

    from aim_sym.plots import save_figure

    cs = sparsemax.compile_sparsemax("numpy")
    b = np.geomspace(0.05, 1e4, 80)
    a = [sm.weak_threshold(cs, beta=x).value for x in b]
    fig, ax = plt.subplots(figsize=(5.6, 3.8))
    ax.plot(b, a, "-", label="sparsemax (quadrature)")
    ax.errorbar([r["beta"] for r in rows], [r["mc"] for r in rows],
                yerr=[r["mc_error"] for r in rows], fmt="o", ms=3, label="Monte Carlo")
    ax.axhline(0.25, ls="--", c="gray", label=r"softmax $1/4$ ($\beta \to 0$)")
    ax.axhline(hardmax_T2(), ls=":", c="k", label=r"hardmax ($\beta \to \infty$)")
    ax.set_xscale("log")
    ax.set_xlabel(r"inverse temperature $\beta$")
    ax.set_ylabel(r"$\bar\alpha_c$ (small width, $T = 2$)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path)


def curves(rho: float = 0.5, betas=(0.5, 1.0, 2.0), n: int = 16) -> dict:
    """SE curves traced by the mmse V (alpha(V) per V) for sparsemax at each beta, softmax
    (alpha = V / (4 Delta(V))) and hardmax (alpha = 1 / (2 Delta E_hardmax))."""
    import numpy as np
    from aim_sym.numerics import aim_se
    from aim_sym.numerics import sparsemax as sm

    from aim_sym.channels import hardmax
    from aim_sym.compiled import compile_channel

    cs = sparsemax.compile_sparsemax("numpy")
    Vs = np.concatenate([np.linspace(0.98, 0.3, n - 4), np.linspace(0.25, 0.1, 4)])
    out = {}
    for beta in betas:
        out[f"sparsemax beta={beta:g}"] = sm.se_curve_traced(cs, rho=rho, beta=beta, mmses=Vs)
    cc = compile_channel(hardmax(2))
    hard, soft = [], []
    for v in Vs:
        d = sm.delta_of_mmse(float(v), rho=rho)
        e, _ = aim_se.output_estimate(cc, q=1 + rho - v, V=float(v))
        hard.append({"alpha": 1 / (2 * d * e.value), "alpha_error": e.error / e.value / (2 * d
                     * e.value), "mmse": float(v)})
        soft.append({"alpha": float(v) / (4 * d), "alpha_error": 0.0, "mmse": float(v)})
    out["hardmax"] = hard
    out["softmax (any beta)"] = soft
    return out


def draw_curves(data: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from aim_sym.plots import save_figure

    fig, ax = plt.subplots(figsize=(5.6, 3.8))
    for name, rows in data.items():
        style = "--" if "softmax" in name else ":" if "hardmax" in name else "-"
        ax.plot([r["alpha"] for r in rows], [r["mmse"] for r in rows], style, label=name)
    ax.set_xlabel(r"$\alpha$")
    ax.set_ylabel("mmse")
    ax.set_title(r"AIM, $T = 2$, $\rho = 0.5$")
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path)


if __name__ == "__main__":
    from _sheets import write_all

    write_all({k: v[0] for k, v in SHEETS.items()})
    if "--figure" in sys.argv:
        rows = threshold_table()
        print("| beta | alpha_bar_c | bar | Monte Carlo | SE | (MC - quad) / SE | seconds |")
        print("|---|---|---|---|---|---|---|")
        for r in rows:
            dev = (r["mc"] - float(r["alpha"])) / r["mc_error"]
            print(f"| {r['beta']:g} | {r['alpha']} | {r['error']:.0e} | {r['mc']:.6f} | "
                  f"{r['mc_error']:.1e} | {dev:+.2f} | {r['seconds']:.2f} |")
        draw_threshold(rows, sys.argv[sys.argv.index("--figure") + 1])
    if "--curves" in sys.argv:
        data = curves()
        for name, rows in data.items():
            print(f"## {name}")
            print("| mmse | alpha | alpha error |")
            print("|---|---|---|")
            for r in rows:
                print(f"| {r['mmse']:.4f} | {r['alpha']:.10f} | {r['alpha_error']:.1e} |")
        draw_curves(data, sys.argv[sys.argv.index("--curves") + 1])
