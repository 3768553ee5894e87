"""SMI sequential thresholds at any (L, M): the branch QMC kernel (numerics/smi_branch_qmc.py)
against seeded plain Monte Carlo of the same branch statistics, side by side in one run (issue
14; docs/smi_depth.md, "Sequential thresholds at any (L, M)").

    python benchmarks/smi_branch_qmc.py [--layers 2] [--tokens 2] [--all]

The kernel finds the sequential threshold of every shallower layer (time and bar). At layer 1's
root q* (with ``--all``: at every layer l's own root) both routes then estimate mu_l (whose
reciprocal is the threshold), a_L = (1 - q) K_L / q and r_l = mu_l - a_L (which vanishes at the
root): the kernel at its default rule, the plain Monte Carlo (per-teacher iid prior draws of the
free rows, two independent halves; tests/test_smi_branch_qmc.py) with a sample count scaled from
a pilot so that it spends about the kernel's seconds at that point.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

from aim_sym.numerics import smi_branch_qmc as sbq  # noqa: E402
from test_smi_branch_qmc import plain_branch_mc  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=2)
    ap.add_argument("--inner", type=int, default=2048)
    ap.add_argument("--all", action="store_true", help="every layer at its own root")
    a = ap.parse_args()
    L, M = a.layers, a.tokens
    t0 = time.perf_counter()
    rows = sbq.sequential_thresholds_qmc(layers=L, tokens=M)
    t_seq = time.perf_counter() - t0
    print(f"L = {L}, M = {M}: sequential thresholds in {t_seq:.0f} s")
    for r in rows:
        print(f"  layer {r['layer']}: {r['value']:.6g} +- {r['error']:.2g}, q{L}* = "
              f"{r[f'q{L}']:.6f}" + (" (first)" if r["first"] else ""))
    se = lambda x: float(np.std(x, ddof=1) / math.sqrt(len(x)))  # noqa: E731
    print("\n| layer | route | mu_l at q* | a_L at q* | r_l at q* | seconds |")
    print("|---|---|---|---|---|---|")
    for r in rows if a.all else rows[:1]:
        l, q = r["layer"], r[f"q{L}"]
        aL = (1 - q) / q
        t0 = time.perf_counter()
        k = sbq.branch_stats_qmc(q, layers=L, tokens=M)
        t_k = time.perf_counter() - t0
        t0 = time.perf_counter()
        plain_branch_mc(q, layers=L, tokens=M, samples=200, inner=a.inner, seed=1)
        per = (time.perf_counter() - t0) / 200
        n = max(200, int(t_k / per))
        t0 = time.perf_counter()
        mc = plain_branch_mc(q, layers=L, tokens=M, samples=n, inner=a.inner, seed=1 + l)
        t_mc = time.perf_counter() - t0
        mu, K = mc[:, l - 1], mc[:, L - 1]
        kK = k[f"K{L}"]
        print(f"| {l} | branch QMC kernel | {k[f'mu{l}']['value']:.5f} +- "
              f"{k[f'mu{l}']['error']:.2g} | {aL * kK['value']:.5f} +- {aL * kK['error']:.2g} | "
              f"{k[f'r{l}']['value']:+.5f} +- {k[f'r{l}']['error']:.2g} | {t_k:.0f} |")
        print(f"| {l} | plain Monte Carlo ({n} teachers x {a.inner}) | {mu.mean():.5f} +- "
              f"{3 * se(mu):.2g} (3 SE) | {aL * K.mean():.5f} +- {3 * aL * se(K):.2g} | "
              f"{(mu - aL * K).mean():+.5f} +- {3 * se(mu - aL * K):.2g} | {t_mc:.0f} |")


if __name__ == "__main__":
    main()
