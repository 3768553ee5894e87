"""The model-sampled branch kernel (numerics/smi_branch_qmc.py) away from skip c = 1 (issue 14;
docs/smi_branch_skip.md), against the deterministic routes where they serve the same quantity.

    python benchmarks/smi_branch_skip.py seq --skips 0.5 2 [--seeds 0 1 2]  # L = 2 sequential
    python benchmarks/smi_branch_skip.py fixed --skips 0.5 2 --alpha 0.5   # L = 2 branch point
    python benchmarks/smi_branch_skip.py deep --layers 3 --skip 0.5        # L = 3 + Monte Carlo

``seq``: the kernel's layer-1 sequential threshold (default rule) beside the L = 2 lattice ladder
(``smi_sequential.sequential_thresholds(layers=2, skip=c)``, digits 4: the value of
``aim-sym threshold weak --model smi --layers 2 --skip c``).  ``z`` is the difference in units of
the kernel's standard error (its bar without the Student-t factor, ratio bias or fit term), ``bar
ratio`` the difference over the sum of both bars.  ``fixed``: the kernel's branch point q2 and
layer 1's stability eigenvalue alpha mu_1 beside ``smi.layer2_point`` (lattice SE).  ``deep``:
at depths / skips no deterministic route serves (the L = 3 lattice refuses c < 1), the kernel's
thresholds and, at each root q_L*, the seeded Monte Carlo of tests/smi_mc_oracles.py
(``montecarlo_branch``: its own prior + Laplace mixture sampler): its mu_l should equal 1 / alpha
and its residual r_l should vanish within its standard error (+ the kernel's q bar x slope).
Every row is printed as a table row and, with ``--out``, stored as JSON.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")   # the kernel is faster single-threaded

from scipy import stats  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

from aim_sym.numerics import smi, smi_sequential  # noqa: E402
from aim_sym.numerics import smi_branch_qmc as sbq  # noqa: E402
from smi_mc_oracles import montecarlo_branch  # noqa: E402


def compare(kernel: dict, det: dict) -> dict:
    """z (difference / kernel SE) and bar ratio (|difference| / (sum of bars))."""
    diff = kernel["value"] - det["value"]
    se = kernel["stat_error"] / stats.t.ppf(sbq.COVERAGE, kernel["replicates"] - 1)
    return dict(diff=diff, z=diff / se, bar_ratio=abs(diff) / (kernel["error"] + det["error"]))


def sequential_rows(c: float, *, seeds: list, rule: tuple | None) -> list:
    """One row per kernel seed at skip ``c``, the lattice ladder evaluated once."""
    lo, li, R = rule or sbq.DEFAULT_RULE[(2, 2)]
    t0 = time.perf_counter()
    (d,) = smi_sequential.sequential_thresholds(layers=2, skip=c)
    td = time.perf_counter() - t0
    det = dict(value=d["value"], error=d["error"], q2=d["q2"], q2_error=d["q2_error"],
               seconds=td)
    rows = []
    for seed in seeds:
        t0 = time.perf_counter()
        (k,) = sbq.sequential_thresholds_qmc(layers=2, tokens=2, skip=c, seed=seed,
                                             log2_outer=lo, log2_inner=li, replicates=R)
        tk = time.perf_counter() - t0
        kern = dict(value=k["value"], error=k["error"], stat_error=k["stat_error"],
                    ratio_bias=k["ratio_bias"], interpolation=k["interpolation"], q2=k["q2"],
                    q2_error=k["q2_error"], checks=k["checks"], seconds=tk, replicates=R,
                    rule=[lo, li, R], seed=seed)
        row = dict(skip=c, kernel=kern, deterministic=det, **compare(kern, det))
        print(f"| {c:g} | {seed} | {kern['value']:.5f} +- {kern['error']:.2g} | "
              f"{kern['q2']:.5f} +- {kern['q2_error']:.1g} | {det['value']:.6f} +- "
              f"{det['error']:.1g} | {det['q2']:.5f} | {row['z']:+.2f} | "
              f"{row['bar_ratio']:.2f} | {tk:.0f} / {td:.0f} |", flush=True)
        rows.append(row)
    return rows


def fixed_row(c: float, *, alpha: float, seed: int, rule: tuple | None) -> dict:
    lo, li, R = rule or sbq.DEFAULT_RULE[(2, 2)]
    t0 = time.perf_counter()
    k = sbq.branch_fixed_point(alpha=alpha, layers=2, tokens=2, skip=c, seed=seed,
                               log2_outer=lo, log2_inner=li, replicates=R)
    tk = time.perf_counter() - t0
    t0 = time.perf_counter()
    d = smi.layer2_point(alpha=alpha, skip=c)
    td = time.perf_counter() - t0
    st = k["stability"][1]
    row = dict(skip=c, alpha=alpha, rule=[lo, li, R], seed=seed,
               kernel=dict(q2=k["q2"], q2_error=k["q2_error"], eigenvalue=st["eigenvalue"],
                           eigenvalue_error=st["error"], stable=st["stable"], seconds=tk),
               deterministic=dict(q2=float(d["Q"][1]), q2_error=float(d["error"][1]),
                                  eigenvalue=float(d["eigenvalue"]), stable=bool(d["stable"]),
                                  seconds=td))
    kq, dq = row["kernel"], row["deterministic"]
    row["q2_bar_ratio"] = abs(kq["q2"] - dq["q2"]) / (kq["q2_error"] + dq["q2_error"])
    row["eigenvalue_bar_ratio"] = abs(kq["eigenvalue"] - dq["eigenvalue"]) / kq["eigenvalue_error"]
    print(f"| {c:g} | {alpha:g} | {kq['q2']:.5f} +- {kq['q2_error']:.1g} | {dq['q2']:.5f} +- "
          f"{dq['q2_error']:.1g} | {row['q2_bar_ratio']:.2f} | {kq['eigenvalue']:.4f} +- "
          f"{kq['eigenvalue_error']:.1g} | {dq['eigenvalue']:.4f} | "
          f"{row['eigenvalue_bar_ratio']:.2f} | {tk:.0f} / {td:.0f} |", flush=True)
    return row


def deep_rows(c: float, *, layers: int, seed: int, rule: tuple | None, samples: int,
              inner: int, mc_seed: int) -> list:
    lo, li, R = rule or sbq.DEFAULT_RULE[(layers, 2)]
    t0 = time.perf_counter()
    ks = sbq.sequential_thresholds_qmc(layers=layers, tokens=2, skip=c, seed=seed,
                                       log2_outer=lo, log2_inner=li, replicates=R)
    tk = time.perf_counter() - t0
    rows = []
    for k in ks:
        l, q = k["layer"], k[f"q{layers}"]
        t0 = time.perf_counter()
        mc = montecarlo_branch(q, layers=layers, skip=c, samples=samples, inner=inner,
                               seed=mc_seed)
        tm = time.perf_counter() - t0
        mu, res = mc[f"mu{l}"], mc[f"resid{l}"]
        slope_q = abs(k["slope_r"]) / (1 - q)               # d r_l / d q at the root
        row = dict(skip=c, layers=layers, layer=l, first=k["first"], rule=[lo, li, R], seed=seed,
                   kernel=dict(value=k["value"], error=k["error"], stat_error=k["stat_error"],
                               q=q, q_error=k[f"q{layers}_error"], checks=k["checks"],
                               seconds=tk),
                   montecarlo=dict(samples=samples, inner=inner, seed=mc_seed, mu=mu.value,
                                   mu_se=mu.error, resid=res.value, resid_se=res.error,
                                   nishimori=mc["nishimori"].value,
                                   nishimori_se=mc["nishimori"].error, seconds=tm))
        # mu_l at the root against 1 / alpha; r_l against 0 (the root's own bar moves it)
        row["mu_z"] = (mu.value - 1 / k["value"]) / math.hypot(mu.error,
                                                               k["error"] / k["value"] ** 2)
        row["resid_z"] = res.value / math.hypot(res.error, slope_q * k[f"q{layers}_error"])
        print(f"| {c:g} | {layers} | {l} | {k['value']:.4f} +- {k['error']:.2g} | {q:.5f} +- "
              f"{k[f'q{layers}_error']:.1g} | {1 / k['value']:.4f} | {mu.value:.4f} +- "
              f"{mu.error:.2g} | {row['mu_z']:+.2f} | {res.value:+.4f} +- {res.error:.2g} | "
              f"{row['resid_z']:+.2f} | {tk:.0f} / {tm:.0f} |", flush=True)
        rows.append(row)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=("seq", "fixed", "deep"))
    ap.add_argument("--skips", type=float, nargs="+", default=[0.5, 2.0])
    ap.add_argument("--alpha", type=float, default=0.5)
    ap.add_argument("--layers", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0], help="kernel seeds (seq)")
    ap.add_argument("--rule", type=int, nargs=3, default=None,
                    help="log2 outer, log2 inner, replicates (default: the kernel's)")
    ap.add_argument("--samples", type=int, default=6000, help="Monte Carlo outer draws (deep)")
    ap.add_argument("--inner", type=int, default=1500, help="Monte Carlo inner draws (deep)")
    ap.add_argument("--mc-seed", type=int, default=11)
    ap.add_argument("--out", default=None, help="JSON file for the rows")
    a = ap.parse_args()
    rule = tuple(a.rule) if a.rule else None
    rows = []
    if a.what == "seq":
        print("| c | seed | kernel alpha_seq | kernel q2* | lattice alpha_seq | lattice q2* | z |"
              " bar ratio | seconds (kernel / lattice) |\n|---|---|---|---|---|---|---|---|---|")
        for c in a.skips:
            rows += sequential_rows(c, seeds=a.seeds, rule=rule)
    elif a.what == "fixed":
        print("| c | alpha | kernel q2 | lattice q2 | bar ratio | kernel alpha mu_1 | lattice | "
              "bar ratio | seconds |\n|---|---|---|---|---|---|---|---|---|")
        rows = [fixed_row(c, alpha=a.alpha, seed=a.seed, rule=rule) for c in a.skips]
    else:
        print("| c | L | layer | kernel alpha_seq | q_L* | 1 / alpha | MC mu_l +- SE | z | "
              "MC r_l +- SE | z | seconds (kernel / MC) |\n|---|---|---|---|---|---|---|---|---|"
              "---|---|")
        for c in a.skips:
            rows += deep_rows(c, layers=a.layers, seed=a.seed, rule=rule, samples=a.samples,
                              inner=a.inner, mc_seed=a.mc_seed)
    if a.out:
        with open(a.out, "w") as f:
            json.dump(rows, f, indent=1, default=float)


if __name__ == "__main__":
    main()
