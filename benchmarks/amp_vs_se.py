"""Finite-size GAMP-RIE against the AIM state evolution (THEORY 4, check 7).

For each alpha and each dimension D, runs :func:`aim_sym.numerics.amp.run_amp` over several seeds and
prints the final error ||S_hat - S||_F^2 / D (mean +- standard error), the SE prediction, the
deviation and the wall time; the deviation at two or more sizes shows the finite-size trend.
Optionally plots the points over the SE curve, with published AMP measurements (a CSV with
columns alpha, mmse, mmse_std) drawn alongside for comparison (not fitted).

    python benchmarks/amp_vs_se.py --channel softmax --alphas 0.05,0.1,0.15 --dims 50,100 \
        --seeds 8 [--damping 0.5] [--out amp.json] [--plot amp.png] [--reference AMP.csv]

Set OMP_NUM_THREADS=1 on a small shared machine: the D x D linear algebra is faster
single-threaded there than oversubscribed.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402
from aim_sym.numerics import aim_curve  # noqa: E402
from aim_sym.numerics.amp import run_amp  # noqa: E402

from aim_sym.amp_functions import amp_functions  # noqa: E402
from aim_sym.channels import builtin  # noqa: E402
from aim_sym.compiled import compile_channel  # noqa: E402
from aim_sym.plots import plot_amp_vs_se  # noqa: E402


def read_reference(path: str) -> list[dict]:
    with open(path) as fh:
        return [{k: float(v) for k, v in row.items() if k} for row in csv.DictReader(fh)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--channel", default="softmax")
    ap.add_argument("--tokens", type=int, default=2)
    ap.add_argument("--rho", type=float, default=0.5)
    ap.add_argument("--alphas", default="0.05,0.1,0.15")
    ap.add_argument("--dims", default="50,100")
    ap.add_argument("--seeds", type=int, default=8)
    ap.add_argument("--max-iter", type=int, default=80)
    ap.add_argument("--damping", type=float, default=0.5)
    ap.add_argument("--rng-seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="JSON with every run (written after each)")
    ap.add_argument("--plot", default=None, help="PNG of AMP points over the SE curve")
    ap.add_argument("--reference", default=None, help="CSV alpha,mmse,mmse_std to draw along")
    a = ap.parse_args()
    ch = builtin(a.channel, a.tokens)
    cc = compile_channel(ch)
    alphas = [float(x) for x in a.alphas.split(",")]
    dims = [int(x) for x in a.dims.split(",")]
    rows = []
    print(f"GAMP-RIE vs SE: {a.channel}, T = {a.tokens}, rho = {a.rho}, seeds = {a.seeds}, "
          f"damping = {a.damping}, max_iter = {a.max_iter}")
    print(f"{'alpha':>8s} {'D':>5s} {'AMP mean':>10s} {'stderr':>8s} {'SE':>10s} "
          f"{'AMP - SE':>10s} {'dev/se':>7s} {'conv':>5s} {'time [s]':>9s}")
    try:
        for alpha in alphas:
            for D in dims:
                r = run_amp(fns=amp_functions(ch), cc=cc, alpha=alpha, rho=a.rho, dim=D, seeds=a.seeds,
                            max_iter=a.max_iter, damping=a.damping, rng_seed=a.rng_seed)
                dev = r["mean"] - r["se_prediction"]
                se_ = r["stderr"] or float("nan")  # one seed: no standard error
                print(f"{alpha:8.4f} {D:5d} {r['mean']:10.5f} {se_:8.5f} "
                      f"{r['se_prediction']:10.5f} {dev:+10.5f} {dev / se_:+7.2f} "
                      f"{sum(r['converged']):2d}/{len(r['converged']):<2d} {r['time_s']:9.1f}",
                      flush=True)
                rows.append(r)
                if a.out:
                    with open(a.out, "w") as fh:
                        json.dump(rows, fh, indent=1, default=float)
    except KeyboardInterrupt:
        print("interrupted: keeping the finished points", file=sys.stderr)
    if a.plot and rows:
        grid = np.linspace(0, max(alphas) * 1.3, 40)
        curve = aim_curve.curve(cc, alphas=grid, rho=a.rho)
        ref = read_reference(a.reference) if a.reference else None
        plot_amp_vs_se(rows, curve, a.plot, reference=ref,
                       title=f"{a.channel}, T = {a.tokens}, rho = {a.rho}")


if __name__ == "__main__":
    t0 = time.perf_counter()
    main()
    print(f"total {time.perf_counter() - t0:.1f} s")
