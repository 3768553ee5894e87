"""The deep AIM SE branch between a finite fixed point and perfect recovery, parametrised by
mmse_1 = v1 with alpha an output (THEORY 1.6; docs/deep_aim.md section 4, "The branch with alpha
as an output"): :func:`branch_point` per v1, one CSV row per point (appended after each point,
so a long study can be split over calls), the figure alpha against mmse_1 with alpha_PR marked.

    python benchmarks/deep_aim_branch.py --skip 0.5 --v1 0.2,0.12,0.067 --m 6 --seed 0 \
        --out docs/data/deep_aim_branch.csv
    python benchmarks/deep_aim_branch.py --figure docs/data/deep_aim_branch.csv \
        --fig-out docs/figures/deep_aim_branch.png

rho = (0.5, 0.5), beta = 1, shared tokens and the line inner rule (the defaults) unless given.
Timings are wall seconds on shared cores (upper bounds).
"""

from __future__ import annotations

import argparse
import csv
import os

from aim_sym.numerics import deep_aim_se as ds
from aim_sym.numerics.records import ConvergenceError

COLUMNS = ("skip", "rho1", "rho2", "m", "scrambles", "seed", "v1", "v2", "v2_error", "alpha",
           "alpha_error", "alpha_standard_error", "alpha_rule_error", "alpha_PR",
           "alpha_minus_PR", "eig_1", "eig_2", "stable", "v1E1_v2E2", "e_gen", "e_gen_error",
           "seconds", "note")


def row(model: ds.DeepAimSE, v1: float, m: int, seed: int, e_gen: bool) -> dict:
    """One branch point as a CSV row (a ConvergenceError becomes a row with its note)."""
    base = {"skip": model.skip, "rho1": model.rho1, "rho2": model.rho2, "m": m, "scrambles": 8,
            "seed": seed, "v1": v1}
    try:
        r = ds.branch_point(model, v1=v1, m=m, seed=seed, e_gen=e_gen)
    except ConvergenceError as exc:
        return {**base, "note": f"ConvergenceError: {exc} (last {exc.last_iterate})"}
    eig = sorted(abs(complex(x)) for x in r["jacobian_eigenvalues"])
    return {**base, "v2": r["layers"][1]["mmse"], "v2_error": r["layers"][1]["mmse_error"],
            "alpha": r["alpha"], "alpha_error": r["alpha_error"],
            "alpha_standard_error": r["alpha_standard_error"],
            "alpha_rule_error": r["alpha_rule_error"], "alpha_PR": r["alpha_PR"],
            "alpha_minus_PR": r["alpha_minus_PR"], "eig_1": eig[0], "eig_2": eig[1],
            "stable": r["stable"], "v1E1_v2E2": r["v1_E1_plus_v2_E2"],
            "e_gen": r.get("e_gen", ""), "e_gen_error": r.get("e_gen_error", ""),
            "seconds": r["seconds"], "note": ""}


def figure(path: str, out: str) -> None:
    """Left: alpha against mmse_1 (linear axes) with bars, one series per (skip, m, seed), alpha_PR
    dashed; right: (alpha_PR - alpha) / mmse_1 against mmse_1 (log axis), constant for a linear
    approach to alpha_PR."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    with open(path) as f:
        rows = [r for r in csv.DictReader(f) if r["alpha"]]
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(10, 4))
    keys = sorted({(r["skip"], r["m"], r["seed"]) for r in rows})
    for k in keys:
        rs = sorted((r for r in rows if (r["skip"], r["m"], r["seed"]) == k),
                    key=lambda r: float(r["v1"]))
        v1 = [float(r["v1"]) for r in rs]
        lab = f"c = {k[0]}, 2^{k[1]} x 8, seed {k[2]}"
        ax.errorbar(v1, [float(r["alpha"]) for r in rs],
                    yerr=[float(r["alpha_error"]) for r in rs], marker="o", ms=3, capsize=2,
                    label=lab)
        bx.errorbar(v1, [-float(r["alpha_minus_PR"]) / v for r, v in zip(rs, v1)],
                    yerr=[float(r["alpha_error"]) / v for r, v in zip(rs, v1)], marker="o", ms=3,
                    capsize=2, label=lab)
    for apr in sorted({float(r["alpha_PR"]) for r in rows}):
        ax.axhline(apr, ls="--", c="k", lw=0.8)
    ax.set_xlim(left=0)
    ax.set_xlabel("mmse_1 = V1")
    ax.set_ylabel("alpha on the branch")
    ax.set_title("branch, rho = (0.5, 0.5); dashed: alpha_PR", fontsize=9)
    ax.legend(fontsize=7)
    bx.set_xscale("log")
    bx.set_ylim(-1.0, 2.0)
    bx.axhline(0.0, c="k", lw=0.8)
    bx.set_xlabel("mmse_1 = V1")
    bx.set_ylabel("(alpha_PR - alpha) / V1")
    bx.set_title("> 0: below alpha_PR; < 0 at small V1: first order", fontsize=9)
    fig.tight_layout()
    fig.savefig(out, dpi=120)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--skip", type=float, default=0.5)
    p.add_argument("--rho", default="0.5,0.5")
    p.add_argument("--v1", default="0.2,0.12,0.067,0.03,0.01,0.003,0.001")
    p.add_argument("--m", type=int, default=6)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--e-gen", action="store_true", help="also e_gen and Phi (slower)")
    p.add_argument("--out", default="docs/data/deep_aim_branch.csv")
    p.add_argument("--figure", help="draw the figure from this CSV and stop")
    p.add_argument("--fig-out", default="docs/figures/deep_aim_branch.png")
    a = p.parse_args()
    if a.figure:
        figure(a.figure, a.fig_out)
        return
    rho1, rho2 = (float(x) for x in a.rho.split(","))
    model = ds.DeepAimSE(skip=a.skip, rho1=rho1, rho2=rho2)
    new = not os.path.exists(a.out)
    for v1 in (float(x) for x in a.v1.split(",")):
        r = row(model, v1, a.m, a.seed, a.e_gen)
        print({k: r.get(k, "") for k in ("skip", "v1", "v2", "v2_error", "alpha", "alpha_error",
                                          "alpha_minus_PR", "eig_2", "seconds", "note")},
              flush=True)
        with open(a.out, "a", newline="") as f:
            w = csv.DictWriter(f, fieldnames=COLUMNS)
            if new:
                w.writeheader()
                new = False
            w.writerow({k: r.get(k, "") for k in COLUMNS})


if __name__ == "__main__":
    main()
