"""Deep tied attention, P_l = 1: weak thresholds of every layer for depth L and M tokens
(issue 14, THEORY 2.2, 2.5), by numerics.smi_weak, side by side with seeded plain Monte Carlo.

For each case: lambda_l and alpha_l = 1 / lambda_l with the bar of the quadrature route (tensor
Gauss-Hermite refinements, or scrambled Sobol replicates: Student-t 99% x standard error + ratio
bias + outer-rule change + |mass - 1|), the seconds it took, and the Monte Carlo route (true z,
importance sampling of the free rows from their prior, the half-split estimator
<C_a - I, C_b - I>) with its standard error.  ``E tr C_l`` must equal M (an identity).

A third route (``--third R``): h sampled from the model by R scrambled Sobol sets of 2^13 true z,
iid prior samples of the free rows (2^15 per set, shared by its h) and the block U-statistic
(model_sampled_lambdas of tests/smi_mc_oracles.py); ``--inner-bias N`` measures the ratio bias of the Monte
Carlo route at ``--inner`` on N sampled h (montecarlo_inner_bias, paired, 2^15 samples per h).

Run: python benchmarks/smi_weak_depth.py --case 4,2 [--log2n 15] [--replicates 8]
     [--samples 20000] [--inner 2048] [--seed 3] [--skip 1] [--no-mc] [--third 28]
     [--inner-bias 1500]
"""

import argparse
import sys
import time
from pathlib import Path

from aim_sym.numerics import smi_weak

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # the Monte Carlo oracles
import smi_mc_oracles  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--case", default="4,2", help="L,M")
    ap.add_argument("--rule", default="auto")
    ap.add_argument("--log2n", type=int, default=None)
    ap.add_argument("--replicates", type=int, default=None)
    ap.add_argument("--samples", type=int, default=20000)
    ap.add_argument("--inner", type=int, default=2048)
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--skip", type=float, default=1.0)
    ap.add_argument("--no-mc", action="store_true")
    ap.add_argument("--third", type=int, default=0, help="replicates of the third route")
    ap.add_argument("--inner-bias", type=int, default=0, help="sampled h for the bias check")
    a = ap.parse_args()
    L, M = (int(x) for x in a.case.split(","))
    opts = {k: v for k, v in (("log2n", a.log2n), ("replicates", a.replicates)) if v}
    t = time.perf_counter()
    F = smi_weak.stability(layers=L, tokens=M, skip=a.skip, rule=a.rule, **opts)
    dt = time.perf_counter() - t
    print(f"L = {L}, M = {M}, c = {a.skip:g}, beta = 1: {F['lam1'].method}; {dt:.1f} s")
    print(f"mass {F['mass'].value:.10f} +- {F['mass'].error:.1e}; "
          + ", ".join(f"E tr C_{l} {F[f'trace{l}'].value:.6f} +- {F[f'trace{l}'].error:.1e}"
                      for l in range(1, L + 1)))
    mc = None
    if not a.no_mc:
        t = time.perf_counter()
        mc = smi_mc_oracles.montecarlo_lambdas(layers=L, tokens=M, skip=a.skip, samples=a.samples,
                                         inner=a.inner, seed=a.seed)
        print(f"Monte Carlo: {a.samples} x {a.inner}, seed {a.seed}; "
              f"{time.perf_counter() - t:.1f} s")
    print(f"{'layer':>5s} {'lambda +- bar':>28s} {'alpha +- bar':>28s} {'Monte Carlo lambda':>24s}"
          f" {'dev/SE':>7s}")
    for l in range(1, L + 1):
        e = F[f"lam{l}"]
        row = (f"{l:5d} {e.value:16.8f} +- {e.error:8.1e} {1 / e.value:16.8f} +- "
               f"{e.error / e.value**2:8.1e}")
        if "se" in e.extra:
            row += f" (SE {e.extra['se']:.1e}, ratio bias {e.extra['ratio_bias']:.1e})"
        if mc:
            m, se = mc[f"lam{l}"]
            row += f" {m:12.6f} +- {se:8.1e} {(m - e.value) / se:7.2f}"
        print(row)
    if a.third:
        t = time.perf_counter()
        r = smi_mc_oracles.model_sampled_lambdas(layers=L, tokens=M, skip=a.skip, log2_outer=13,
                                           log2_inner=15, block=4096, replicates=a.third,
                                           seed=a.seed)
        print(f"third route ({a.third} x 2^13 model-sampled h, 2^15 iid inner, blocks of 4096;"
              f" {time.perf_counter() - t:.1f} s):")
        for l in range(1, L + 1):
            m, se = r[f"lam{l}"]
            v = F[f"lam{l}"].value
            print(f"{l:5d} {m:12.6f} +- {se:8.1e} (SE)  dev/SE {(m - v) / se:6.2f}")
    if a.inner_bias:
        half = a.inner // 2
        t = time.perf_counter()
        r = smi_mc_oracles.montecarlo_inner_bias(layers=L, tokens=M, skip=a.skip,
                                           samples=a.inner_bias, log2n=15, chunks=(half,),
                                           seed=a.seed)
        print(f"ratio bias of the Monte Carlo route at inner {a.inner} ({a.inner_bias} h; "
              f"{time.perf_counter() - t:.1f} s); ESS quantiles {r['ess']}:")
        for l in range(1, L + 1):
            d, se = r[f"lam{l}"][half]
            print(f"{l:5d} {d:+.2e} +- {se:.1e}")


if __name__ == "__main__":
    main()
