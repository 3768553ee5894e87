"""Cascade thresholds of deep tied attention on a joint SE branch at L = 3 and L = 4 (issue 14;
docs/smi_cascade.md): the joint-branch kernel (numerics/smi_cascade.py on
numerics/smi_branch_qmc.py) against seeded plain Monte Carlo of the same quantities at its root,
side by side with their times.

    python benchmarks/smi_cascade_depth.py --layers 4 --learned 1,4 [--rule 12,14,16] [--seed 0]
    python benchmarks/smi_cascade_depth.py --layers 4 --learned 1,2,4        # rule 10,15,8
    python benchmarks/smi_cascade_depth.py --layers 3 --learned 1,3          # the L = 3 cascade

The kernel finds the root of ``a_l = a_L = mu_k`` (``a_l = (1 - q_l) K_l / q_l``, k the target
layer) and ``alpha_casc = 1 / a_L``, each other unlearned layer's ``alpha mu_j`` there and the
previous branch's threshold from the same points.  At the root the plain Monte Carlo
(tests/test_smi_cascade.py: per teacher iid draws, the learned free rows from their Gaussian
factors, two independent halves) estimates ``mu_k``, ``a_l`` (all should equal ``1 /
alpha_casc``) and ``alpha mu_j`` with standard errors; ``--samples`` teachers x ``--inner``
draws.  Set ``OPENBLAS_NUM_THREADS=1`` (the kernel's products are faster single-threaded).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

from aim_sym.numerics import smi_cascade as sc  # noqa: E402
from test_smi_cascade import plain_cascade_mc  # noqa: E402


def _ints(text: str) -> tuple:
    return tuple(int(x) for x in text.split(","))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--learned", type=_ints, default=(1, 4))
    ap.add_argument("--rule", type=_ints, default=(None, None, None),
                    help="log2 outer, log2 inner, replicates (default: smi_cascade.DEFAULTS)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--samples", type=int, default=4000)
    ap.add_argument("--inner", type=int, default=8192,
                    help="draws per teacher (1024 leaves a ratio bias of a_L ~ +4% at L = 4)")
    a = ap.parse_args()
    L, learned = a.layers, a.learned
    if a.rule[0] is None and (L, learned) in sc.DEFAULTS:
        a.rule = sc.DEFAULTS[(L, learned)][3]
    t0 = time.perf_counter()
    r = sc.cascade_threshold(layers=L, learned=learned, log2_outer=a.rule[0],
                             log2_inner=a.rule[1], replicates=a.rule[2], seed=a.seed)
    t_k = time.perf_counter() - t0
    k, alpha = r["layer"], r["value"]
    qs = tuple(r[f"q{l}"] for l in learned)
    print(f"L = {L}, learned {list(learned)}, rule {a.rule}, seed {a.seed}: layer {k} cascade "
          f"alpha = {alpha:.5f} +- {r['error']:.4f} (stat {r['stat_error']:.4f}, ratio bias "
          f"{r['ratio_bias']:.4f}, fit {r['interpolation']:.4f}) in {t_k:.0f} s")
    print("  root: " + ", ".join(f"q{l} = {r[f'q{l}']:.5f} +- {r[f'q{l}_error']:.5f}"
                                 for l in learned))
    print(f"  same points, branch of {r['sequential_branch']}: {r['sequential']:.5f} +- "
          f"{r['sequential_error']:.4f}; shift {r['shift']:+.5f} +- {r['shift_error']:.4f}")
    for j, s in r["stability"].items():
        if j != k:
            print(f"  layer {j} at the root: alpha mu_{j} = {s['eigenvalue']:.4f} +- "
                  f"{s['error']:.4f}")
    print("  checks at the grid centre: " + ", ".join(f"{n} {v:+.4f} +- {e:.4f}"
                                                     for n, (v, e) in r["checks"].items()))
    t0 = time.perf_counter()
    (mc,) = plain_cascade_mc([qs], layers=L, learned=learned, samples=a.samples,
                             inner=a.inner, seed=a.seed + 101)
    t_mc = time.perf_counter() - t0
    unl = [j for j in range(1, L) if j not in learned]

    def mean_se(x):
        return float(x.mean()), float(x.std(ddof=1) / math.sqrt(len(x)))

    print(f"\n| quantity at the root | kernel | plain Monte Carlo ({a.samples} x {a.inner}, "
          f"{t_mc:.0f} s) +- SE | (MC - kernel) / SE |")
    print("|---|---|---|---|")
    for i, j in enumerate(unl):
        m, se = mean_se(alpha * mc[:, i])
        kv = r["stability"][j]
        print(f"| alpha mu_{j} | {kv['eigenvalue']:.4f} +- {kv['error']:.4f} | {m:.4f} +- "
              f"{se:.4f} | {(m - kv['eigenvalue']) / se:+.2f} |")
    for i, (l, q) in enumerate(zip(learned, qs, strict=True)):
        m, se = mean_se(alpha * (1 - q) / q * mc[:, len(unl) + i])
        print(f"| alpha a_{l} | 1 | {m:.4f} +- {se:.4f} | {(m - 1) / se:+.2f} |")
    print(f"\nkernel {t_k:.0f} s, plain Monte Carlo {t_mc:.0f} s (its SEs exclude the kernel's "
          "own bar at the root: alpha's bar moves the targets by about error / alpha)")


if __name__ == "__main__":
    main()
