"""Equation sheets of the AIM with the hardmax channel, T = 2 to 5, and the small-width
threshold table.

T = 2 is derived symbolically (its outputs are intersections of two half-spaces: Phi and Phi2).
For T >= 3 an output is an intersection of T (T - 1) half-spaces: the T = 3, 4, 5 sheets
(aim_sym.hardmax_sheet) writes the half-spaces, the integrals, the invariances and the orbits; the
integrals themselves are numeric (aim_sym.numerics.hardmax_se). The small-width threshold
alpha_bar_c(T) (THEORY 1.4) is computed for T = 2..5 by the ordered-cone recursion of
aim_sym.numerics.hardmax. ``python derivations/aim_hardmax.py`` writes the sheets; ``--figure
PATH`` also prints the threshold table (hardmax, softmax, linear) and draws it
(docs/figures/hardmax_threshold.png).
"""

import sys

from aim_sym.channels import hardmax
from aim_sym.hardmax_sheet import hardmax_expressions, hardmax_sheet
from aim_sym.sheets import aim_expressions, aim_sheet

SHEETS = {
    "aim_hardmax_T2.md": (lambda: aim_sheet(hardmax(2)), lambda: aim_expressions(hardmax(2))),
    "aim_hardmax_T3.md": (lambda: hardmax_sheet(3), lambda: hardmax_expressions(3)),
    "aim_hardmax_T4.md": (lambda: hardmax_sheet(4), lambda: hardmax_expressions(4)),
    "aim_hardmax_T5.md": (lambda: hardmax_sheet(5), lambda: hardmax_expressions(5)),
}


def threshold_table(tokens=(2, 3, 4, 5)) -> list[dict]:
    """alpha_bar_c(T) of hardmax with its error, beside softmax 1/(T^2 + T - 2) and the linear
    channel's 1/(T(T + 1)) (the lower bound of any channel y = g(h))."""
    from aim_sym.thresholds import hardmax_small_width_weak

    rows = []
    for T in tokens:
        r = hardmax_small_width_weak(tokens=T, digits=15)
        rows.append({"T": T, "hardmax": float(r.value), "error": float(r.error),
                     "softmax": 1 / (T * T + T - 2), "linear": 1 / (T * (T + 1))})
    return rows


def draw(rows: list[dict], path: str) -> None:
    """alpha_bar_c against T for the three channels, and the ratio hardmax / softmax."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from aim_sym.plots import save_figure

    T = [r["T"] for r in rows]
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(9, 3.6))
    ax.plot(T, [r["hardmax"] for r in rows], "o-", label="hardmax (this work)")
    ax.plot(T, [r["softmax"] for r in rows], "s--", label="softmax $1/(T^2+T-2)$")
    ax.plot(T, [r["linear"] for r in rows], "^:", label="linear $1/(T(T+1))$")
    ax.set_yscale("log")
    ax.set_xlabel("tokens $T$")
    ax.set_ylabel(r"$\bar\alpha_c$ (small width)")
    ax.set_xticks(T)
    ax.legend(fontsize=8)
    bx.plot(T, [r["hardmax"] / r["softmax"] for r in rows], "o-")
    bx.set_xlabel("tokens $T$")
    bx.set_ylabel(r"$\bar\alpha_c^{\rm hardmax} / \bar\alpha_c^{\rm softmax}$")
    bx.set_xticks(T)
    fig.tight_layout()
    save_figure(fig, path)


if __name__ == "__main__":
    from _sheets import write_all

    write_all({k: v[0] for k, v in SHEETS.items()})
    if "--figure" in sys.argv:
        rows = threshold_table()
        print("| T | hardmax alpha_bar_c | error | softmax | linear | hardmax / softmax |")
        print("|---|---|---|---|---|---|")
        for r in rows:
            print(f"| {r['T']} | {r['hardmax']:.15f} | {r['error']:.1e} | {r['softmax']:.15f} "
                  f"| {r['linear']:.15f} | {r['hardmax'] / r['softmax']:.12f} |")
        draw(rows, sys.argv[sys.argv.index("--figure") + 1])
