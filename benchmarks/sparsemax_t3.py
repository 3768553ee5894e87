"""Sparsemax T = 3 small-width threshold: the engine (exact one-hot part + randomised QMC with
control variates, numerics/sparsemax_t3.weak_threshold) against plain seeded Monte Carlo of the
same S (exact posterior draws, no quadrature: sparsemax_t3.monte_carlo_s), side by side in one
run: time and achieved error of each (issue 15; docs/sparsemax.md, "Small-width threshold at
T = 3").

    python benchmarks/sparsemax_t3.py [--betas 1 10 100] [--points 4096]

Plain Monte Carlo gets the engine's wall time: its sample count is scaled from a pilot so that
both routes spend about the same seconds. Errors: the engine's bar (3 standard errors + rule
difference) and Monte Carlo's 3 standard errors, both in alpha_bar_c.
"""

from __future__ import annotations

import argparse
import time

from aim_sym.numerics import sparsemax_t3 as t3


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--betas", type=float, nargs="+", default=[1.0, 10.0, 100.0])
    ap.add_argument("--points", type=int, default=1 << 12)
    args = ap.parse_args()
    print("| beta | engine alpha_bar_c | engine bar | engine s | MC alpha_bar_c | MC 3 SE | MC s |"
          " MC draws | (MC - engine) / MC SE |")
    print("|---|---|---|---|---|---|---|---|---|")
    for beta in args.betas:
        t0 = time.perf_counter()
        e = t3.weak_threshold(beta=beta, points=args.points)
        t_engine = time.perf_counter() - t0
        t0 = time.perf_counter()
        t3.monte_carlo_s(beta=beta, n=4000, seed=1)
        per_draw = (time.perf_counter() - t0) / 4000
        n = max(4000, int(t_engine / per_draw) // 1000 * 1000)
        t0 = time.perf_counter()
        mc = t3.monte_carlo_s(beta=beta, n=n, seed=11)
        t_mc = time.perf_counter() - t0
        a_mc = 1 / (2 * mc.value)
        se = a_mc * mc.error / mc.value
        print(f"| {beta:g} | {e.value:.7f} | {e.error:.1e} | {t_engine:.0f} | {a_mc:.7f} | "
              f"{3 * se:.1e} | {t_mc:.0f} | {n} | {(a_mc - e.value) / se:+.2f} |", flush=True)


if __name__ == "__main__":
    main()
