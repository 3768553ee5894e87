"""Equation sheet of the AIM with sparsemax attention at T = 2, the small-width threshold
alpha_bar_c(beta) and the SE curves at rho = 0.5 (THEORY 1.1, 1.2, 1.4; docs/sparsemax.md).

``python derivations/aim_sparsemax.py`` writes derivations/sheets/aim_sparsemax_T2.md and
aim_sparsemax_T3.md (the T = 3 pieces);
``--figure PATH`` also prints the threshold table (mpmath at two precisions beside seeded Monte
Carlo) and draws alpha_bar_c against beta with its two limits (docs/figures/sparsemax_threshold.png);
``--curves PATH`` prints and draws the SE curves mmse(alpha) at rho = 0.5 for beta in {0.5, 1, 2}
against softmax and hardmax (docs/figures/sparsemax_curves.png); ``--figure-t3 PATH`` the T = 3
threshold table (randomised QMC, 8 x 2^13 points per beta) and alpha_bar_c against beta for T = 2
and 3 with their limits (docs/figures/sparsemax_threshold_t3.png).
"""

import math
import sys
import time

from aim_sym import sparsemax
from aim_sym.sparsemax_sheet import expressions, expressions_t3, sheet, sheet_t3

BETAS = (0.1, 0.2, 0.3, 0.5, 1.0, 2.0, 3.0, 5.0, 10.0, 30.0, 100.0, 1000.0)
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


BETAS_T3 = (0.1, 0.3, 1.0, 3.0, 10.0, 30.0, 100.0, 1000.0)


def threshold_table_t3(betas=BETAS_T3, points: int = 1 << 13) -> list[dict]:
    """alpha_bar_c(beta) at T = 3 (numerics/sparsemax_t3: one-hot part by the rule + randomised QMC,
    8 replicates of ``points``, statistical bar), with the seconds of each."""
    from aim_sym.numerics import sparsemax_t3

    rows = []
    for beta in betas:
        t0 = time.perf_counter()
        e = sparsemax_t3.weak_threshold(beta=beta, points=points)
        rows.append({"beta": beta, "alpha": e.value, "error": e.error,
                     "seconds": time.perf_counter() - t0})
        print(f"T = 3, beta = {beta:g}: {e.value:.8f} +- {e.error:.1e} "
              f"({rows[-1]['seconds']:.0f} s)", file=sys.stderr)
    return rows


def draw_threshold_t3(rows: list[dict], path: str) -> None:
    """alpha_bar_c against beta at T = 2 (quadrature) and T = 3 (QMC, bars), with the limits."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    from aim_sym.numerics import hardmax
    from aim_sym.numerics import sparsemax as sm

    from aim_sym.plots import save_figure

    cs = sparsemax.compile_sparsemax("numpy")
    b = np.geomspace(0.05, 1e4, 60)
    fig, ax = plt.subplots(figsize=(5.6, 3.8))
    ax.plot(b, [sm.weak_threshold(cs, beta=x).value for x in b], "-", c="C0",
            label=r"$T = 2$ (quadrature)")
    ax.errorbar([r["beta"] for r in rows], [r["alpha"] for r in rows],
                yerr=[r["error"] for r in rows], fmt="o", ms=3, c="C1",
                label=r"$T = 3$ (randomised QMC, bars)")
    for T, c, soft in ((2, "C0", 0.25), (3, "C1", 0.1)):
        ax.axhline(soft, ls="--", c=c, lw=0.8)
        ax.axhline(float(hardmax.weak_threshold(T).value), ls=":", c=c, lw=0.8)
    ax.plot([], [], "k--", lw=0.8, label=r"softmax $1/(T^2+T-2)$ ($\beta \to 0$)")
    ax.plot([], [], "k:", lw=0.8, label=r"hardmax ($\beta \to \infty$)")
    ax.set_xscale("log")
    ax.set_xlabel(r"inverse temperature $\beta$")
    ax.set_ylabel(r"$\bar\alpha_c$ (small width)")
    ax.legend(fontsize=7)
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
    if "--figure-t3" in sys.argv:
        rows_t3 = threshold_table_t3()
        print("| beta | alpha_bar_c (T = 3) | bar | seconds |")
        print("|---|---|---|---|")
        for r in rows_t3:
            print(f"| {r['beta']:g} | {r['alpha']:.8f} | {r['error']:.1e} | {r['seconds']:.0f} |")
        draw_threshold_t3(rows_t3, sys.argv[sys.argv.index("--figure-t3") + 1])
    if "--curves" in sys.argv:
        data = curves()
        for name, rows in data.items():
            print(f"## {name}")
            print("| mmse | alpha | alpha error |")
            print("|---|---|---|")
            for r in rows:
                print(f"| {r['mmse']:.4f} | {r['alpha']:.10f} | {r['alpha_error']:.1e} |")
        draw_curves(data, sys.argv[sys.argv.index("--curves") + 1])
