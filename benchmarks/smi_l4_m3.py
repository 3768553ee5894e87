"""Deep tied attention at L = 4, M = 3 (9 free coordinates): weak thresholds of every layer
(issue 14; THEORY 2.2, 2.5) by numerics.smi_weak (rule "ray", one scrambled Sobol set per ring
of constant cos(theta)), checked against the sampling routes of tests/smi_mc_oracles.py
(docs/smi_depth.md, "L = 4, M = 3").

Modes (each prints its seconds; timings on a shared machine are upper bounds):

* ``--outer``: the outer rule on one shared inner set (2^``--log2n`` points): lambda_l, mass and
  E tr C_l for several (radii, (cos, phi)) rules, the finest as reference;
* ``--table ray:13:8,ray:14:8``: accuracy against time of the kernel (value, bar, relative bar,
  standard error, measured ratio bias, outer change per layer; the identities mass = 1 and
  E tr C_l = 3 in units of their bars; the Jensen bound lambda_l <= 12); ``--outer-pair``
  replaces the default (coarse, fine) outer rules;
* ``--third R``: the model-sampled route (R x 2^``--log2-outer`` h sampled from the model,
  2^``--log2-inner`` iid prior samples of the free rows, blocks of ``--block``), raw, with
  dev / SE against the kernel's default rule when ``--against`` gives its values;
* ``--inner-bias N``: the ratio bias of that route at blocks of ``--block`` and of plain Monte
  Carlo at halves of ``--inner`` / 2, paired (montecarlo_inner_bias on N sampled h, 2^15
  samples per h, against halves of 16384; the bias at blocks of k is (1/k) / (1/k - 1/16384) x
  the measured difference, the 1/k law);
* ``--mc N``: plain Monte Carlo (N true z, ``--inner`` prior samples of the free rows).

Run: python benchmarks/smi_l4_m3.py --outer --log2n 12 --seed 5
     python benchmarks/smi_l4_m3.py --table ray:13:8,ray:13:16 --seed 3
     python benchmarks/smi_l4_m3.py --third 32 --log2-outer 12 --log2-inner 14 --seed 1
     python benchmarks/smi_l4_m3.py --inner-bias 300 --seed 2
     python benchmarks/smi_l4_m3.py --mc 3000 --inner 4096 --seed 5
"""

import argparse
import ast
import math
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")   # one BLAS thread: shared cores thrash

import numpy as np  # noqa: E402
from aim_sym.numerics import smi_weak  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # the oracles
import smi_mc_oracles  # noqa: E402

L, M = 4, 3
OUTER_RULES = ((56, (20, 40)), (72, (24, 48)), (72, (28, 56)), (72, (32, 64)), (96, (32, 64)),
               (96, (48, 96)))


def outer(a) -> None:
    """lambda_l, mass, E tr C_l on one shared inner set for the rules of OUTER_RULES."""
    t = time.perf_counter()
    nodes, w = smi_weak.sobol_inner(a.log2n, dims=M * (L - 1),
                                    seed=np.random.default_rng(a.seed))
    B, Mz = smi_weak.inner_moments(nodes, w, layers=L, tokens=M, skip=a.skip, beta=a.beta)
    sigma = math.sqrt(smi_weak.SIGMA_FACTOR
                      * smi_weak.norm_bound(tokens=M, skip=a.skip) ** (L - 1))
    print(f"outer rules on one Sobol set of 2^{a.log2n} (seed {a.seed}), c = {a.skip:g}: "
          "mass, lambda_1..4, E tr C_1..4")
    for n_u, n_a in OUTER_RULES:
        h, wh = smi_weak.outer_rule(n_u, n_a, tokens=M, sigma=sigma)
        v = smi_weak.reduce_lambdas(smi_weak.outer_moments(B, Mz, h), h, wh, layers=L)
        print(f"{str((n_u, n_a)):>16s} " + " ".join(f"{x:.7f}" for x in v)
              + f"  ({time.perf_counter() - t:.0f} s)")


def table(a) -> dict:
    """The kernel at each rule of ``--table``; returns the last run's Estimates."""
    F = None
    for spec in a.table.split(","):
        rule, log2n, reps = spec.split(":")
        t = time.perf_counter()
        outer = (ast.literal_eval(a.outer_pair) if a.outer_pair
                 else smi_weak.default_outer(layers=L, tokens=M, skip=a.skip))
        F = smi_weak.stability(layers=L, tokens=M, skip=a.skip, beta=a.beta, rule=rule,
                               log2n=int(log2n), replicates=int(reps), seed=a.seed, outer=outer)
        dt = time.perf_counter() - t
        print(f"{rule} {reps} x 2^{log2n}, seed {a.seed}, c = {a.skip:g}, beta = {a.beta:g}: "
              f"{dt:.1f} s; outer {outer}")
        for l in range(1, L + 1):
            e = F[f"lam{l}"]
            x = e.extra
            print(f"  lambda_{l} {e.value:.7f} +- {e.error:.1e} (rel {e.error / e.value:.1e}; SE "
                  f"{x['se']:.1e}, ratio bias {x['ratio_bias']:.1e}, outer {x['outer_change']:.1e})"
                  f"  alpha_{l} {1 / e.value:.6g} +- {e.error / e.value**2:.1e}"
                  f"  Jensen lambda + bar <= 12: {e.value + e.error <= 12}")
        dev = [abs(F["mass"].value - 1) / F["mass"].error] + [
            abs(F[f"trace{l}"].value - M) / F[f"trace{l}"].error for l in range(1, L + 1)]
        print("  |mass - 1| / bar, |E tr C_l - 3| / bar: " + ", ".join(f"{d:.2f}" for d in dev))
    return F


def route(name: str, r: dict, against) -> None:
    """One line per layer: a sampling route's lambda_l +- SE (and dev / SE against the kernel)."""
    print(name)
    for l in range(1, L + 1):
        m, se = r[f"lam{l}"]
        row = f"  lambda_{l} {m:.6f} +- {se:.1e} (SE)"
        if against is not None:
            row += f"  dev / SE {(m - against[l - 1]) / se:+.2f}"
        print(row)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--skip", type=float, default=1.0)
    ap.add_argument("--beta", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--log2n", type=int, default=12)
    ap.add_argument("--outer", action="store_true")
    ap.add_argument("--table", default="")
    ap.add_argument("--outer-pair", default="", help="(coarse, fine) outer rules for --table, "
                    "e.g. \"(56,(20,40)),(72,(24,48))\" (default: smi_weak.default_outer)")
    ap.add_argument("--third", type=int, default=0)
    ap.add_argument("--log2-outer", type=int, default=12)
    ap.add_argument("--log2-inner", type=int, default=14)
    ap.add_argument("--block", type=int, default=4096)
    ap.add_argument("--inner-bias", type=int, default=0)
    ap.add_argument("--mc", type=int, default=0)
    ap.add_argument("--inner", type=int, default=4096)
    ap.add_argument("--against", default="", help="lambda_1..4 of the kernel, comma-separated")
    a = ap.parse_args()
    against = [float(x) for x in a.against.split(",")] if a.against else None
    if a.outer:
        outer(a)
    if a.table:
        F = table(a)
        against = [F[f"lam{l}"].value for l in range(1, L + 1)]
    if a.third:
        t = time.perf_counter()
        r = smi_mc_oracles.model_sampled_lambdas(
            layers=L, tokens=M, skip=a.skip, beta=a.beta, log2_outer=a.log2_outer,
            log2_inner=a.log2_inner, block=a.block, replicates=a.third, seed=a.seed)
        route(f"model-sampled route, raw ({a.third} x 2^{a.log2_outer} h, 2^{a.log2_inner} "
              f"inner, blocks of {a.block}, seed {a.seed}; {time.perf_counter() - t:.1f} s)",
              r, against)
        print("  replicate values:", np.array2string(r["per"], precision=6))
    if a.inner_bias:
        sizes = tuple(sorted({a.block, a.inner // 2}))
        t = time.perf_counter()
        r = smi_mc_oracles.montecarlo_inner_bias(layers=L, tokens=M, skip=a.skip, beta=a.beta,
                                                 samples=a.inner_bias, log2n=15,
                                                 chunks=sizes, seed=a.seed)
        print(f"ratio bias ({a.inner_bias} h, 2^15 per h, seed {a.seed}; "
              f"{time.perf_counter() - t:.1f} s; ESS of 1024 at 0.1/1/10/50%: "
              + ", ".join(f"{x:.0f}" for x in r["ess"]) + ")")
        for k in sizes:
            scale = (1 / k) / (1 / k - 1 / (1 << 14))
            print(f" blocks (halves) of {k}: difference to halves of 16384, and x {scale:.3g}")
            for l in range(1, L + 1):
                d, se = r[f"lam{l}"][k]
                print(f"  lambda_{l}: {d:+.2e} +- {se:.1e}; bias {d * scale:+.2e} +- "
                      f"{se * scale:.1e}")
    if a.mc:
        t = time.perf_counter()
        r = smi_mc_oracles.montecarlo_lambdas(layers=L, tokens=M, skip=a.skip, beta=a.beta,
                                              samples=a.mc, inner=a.inner, seed=a.seed)
        route(f"plain Monte Carlo ({a.mc} x {a.inner}, seed {a.seed}; "
              f"{time.perf_counter() - t:.1f} s)", r, against)


if __name__ == "__main__":
    main()
