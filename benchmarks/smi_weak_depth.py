"""Deep tied attention, P_l = 1: weak thresholds of every layer for depth L and M tokens
(issue 14, THEORY 2.2, 2.5), by numerics.smi_weak, side by side with seeded plain Monte Carlo.

For each case: lambda_l and alpha_l = 1 / lambda_l with the bar of the quadrature route (tensor
Gauss-Hermite refinements, or scrambled Sobol replicates, one shared set or one set per outer
ray: Student-t 99% x standard error + ratio bias + outer-rule change + |mass - 1|), the seconds
it took, and the Monte Carlo route (true z,
importance sampling of the free rows from their prior, the half-split estimator
<C_a - I, C_b - I>) with its standard error.  ``E tr C_l`` must equal M (an identity).

A third route (``--third R``): h sampled from the model by R scrambled Sobol sets of 2^13 true z,
iid prior samples of the free rows (2^15 per set, shared by its h) and the block U-statistic
(model_sampled_lambdas of tests/smi_mc_oracles.py); ``--inner-bias N`` measures the ratio bias of the Monte
Carlo route at ``--inner`` on N sampled h (montecarlo_inner_bias, paired, 2^15 samples per h).

A tail-weighted route (``--tail R``, M = 2): R replicates of 2^12 true z with z_L drawn from
N(0, 1.6^2 I) and reweighted, 2^15 iid inner per replicate, blocks of 4096
(tail_weighted_lambdas of tests/smi_mc_oracles.py); it samples the large-|h| tail that makes
plain Monte Carlo run low at L = 5 (docs/smi_depth.md, "L = 5, M = 2").

Depths: ``--case 1,2`` / ``1,3`` (closed form; with ``--rule gh`` the kernel with zero free
coordinates), ``--case 5,2`` (default rule ray 16 x 2^14, ~1-2 minutes; c in [1, 4]).

Accuracy against time (``--table``): each rule "rule:log2n:replicates" (rule ray = one
independent scrambled Sobol set per outer ray, qmc = one shared set per replicate) with its
seconds, lambda_l, bar and relative bar per layer, then plain Monte Carlo with its seconds.

Run: python benchmarks/smi_weak_depth.py --case 4,2 [--rule ray] [--log2n 15] [--replicates 8]
     [--samples 20000] [--inner 2048] [--seed 3] [--skip 1] [--no-mc] [--third 28]
     [--inner-bias 1500] [--tail 24]
     python benchmarks/smi_weak_depth.py --case 4,2 --table ray:12:16,ray:14:16,qmc:14:16
     [--samples 4000] [--inner 4096]
"""

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")   # one BLAS thread: shared cores thrash

from aim_sym.numerics import smi_weak

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # the Monte Carlo oracles
import smi_mc_oracles  # noqa: E402


def _print_route(r: dict, F: dict, L: int) -> None:
    """One line per layer: a sampling route's lambda_l +- SE and its deviation from the kernel."""
    for l in range(1, L + 1):
        m, se = r[f"lam{l}"]
        v = F[f"lam{l}"].value
        print(f"{l:5d} {m:12.6f} +- {se:8.1e} (SE)  dev/SE {(m - v) / se:6.2f}")


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
    ap.add_argument("--tail", type=int, default=0, help="replicates of the tail-weighted route")
    ap.add_argument("--table", default="", help="rule:log2n:replicates,... (accuracy vs time)")
    a = ap.parse_args()
    L, M = (int(x) for x in a.case.split(","))
    if a.table:
        table(L, M, a)
        return
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
        _print_route(r, F, L)
    if a.tail:
        t = time.perf_counter()
        r = smi_mc_oracles.tail_weighted_lambdas(layers=L, skip=a.skip, scale=1.6, log2_h=12,
                                                 replicates=a.tail, seed=a.seed)
        print(f"tail-weighted route ({a.tail} x 2^12 h, z_L ~ N(0, 1.6^2 I) reweighted, 2^15 "
              f"iid inner, blocks of 4096; {time.perf_counter() - t:.1f} s):")
        _print_route(r, F, L)
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


def table(L, M, a):
    """Accuracy against time: the rules of ``--table`` and plain Monte Carlo, side by side."""
    print(f"L = {L}, M = {M}, c = {a.skip:g}, beta = 1; seed {a.seed}")
    print(f"{'rule':>16s} {'seconds':>8s} " + " ".join(f"{f'lambda_{l} +- bar (rel)':>32s}"
                                                    for l in range(1, L + 1)))
    for spec in a.table.split(","):
        rule, log2n, reps = spec.split(":")
        t = time.perf_counter()
        F = smi_weak.stability(layers=L, tokens=M, skip=a.skip, rule=rule, log2n=int(log2n),
                               replicates=int(reps), seed=a.seed)
        dt = time.perf_counter() - t
        cells = [f"{F[f'lam{l}'].value:.7f} +- {F[f'lam{l}'].error:.1e} "
                 f"({F[f'lam{l}'].error / F[f'lam{l}'].value:.0e})" for l in range(1, L + 1)]
        ident = max(abs(F[f"trace{l}"].value - M) / F[f"trace{l}"].error for l in range(1, L + 1))
        print(f"{rule + ' ' + reps + ' x 2^' + log2n:>16s} {dt:8.1f} " + " ".join(
            f"{c:>32s}" for c in cells) + f"   |E tr C - M| / bar <= {ident:.2f}")
    if not a.no_mc:
        t = time.perf_counter()
        mc = smi_mc_oracles.montecarlo_lambdas(layers=L, tokens=M, skip=a.skip,
                                               samples=a.samples, inner=a.inner, seed=a.seed)
        dt = time.perf_counter() - t
        cells = [f"{mc[f'lam{l}'][0]:.5f} +- {mc[f'lam{l}'][1]:.1e} (SE)" for l in range(1, L + 1)]
        print(f"{'Monte Carlo':>16s} {dt:8.1f} " + " ".join(f"{c:>32s}" for c in cells)
              + f"   ({a.samples} x {a.inner})")


if __name__ == "__main__":
    main()
