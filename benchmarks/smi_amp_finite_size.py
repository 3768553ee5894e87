"""Finite-size study of the deep-attention GAMP (numerics.smi_amp) against the state evolution.

Usage: python benchmarks/smi_amp_finite_size.py --alphas 0.4 0.6 --dims 1000 2000 4000
       --seeds 8 [--variant name:key=value,key=value ...] [--procs 16] [--max-iter 80]
       --out results.json

One process per (variant, alpha, D, seed) job (OMP_NUM_THREADS=1). Per job it stores the
per-iteration history of :func:`numerics.smi_amp.amp_run` without the large arrays (overlaps,
undamped and damped A, the residual variance Var(z - omega) against V, step sizes), so that the
AMP trajectory can be compared with the SE trajectory from the same initial overlap afterwards.
Variants: ``base`` (the defaults) plus any ``name:key=value,...`` over the keyword arguments
of amp_run (damping, order, init_overlap, a_update, adaptive).
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import multiprocessing as mp  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
from aim_sym.numerics import smi_amp  # noqa: E402

KEEP = ("iter", "Q", "Q_raw", "Q12", "self", "A", "A_raw", "V", "step", "resid_var",
        "mixture_fraction", "ess_min")


def _parse_variant(text: str) -> tuple[str, dict]:
    name, _, body = text.partition(":")
    kw = {}
    for item in filter(None, body.split(",")):
        k, _, v = item.partition("=")
        try:
            kw[k] = int(v) if v.isdigit() else float(v)
        except ValueError:
            kw[k] = v
    return name, kw


def _job(args):
    variant, kw, alpha, dim, seed, max_iter, rng_seed = args
    t = time.perf_counter()
    rng = np.random.default_rng([rng_seed, seed])
    data = smi_amp.generate(alpha=alpha, dim=dim, rng=rng)
    res = smi_amp.amp_run(data, max_iter=max_iter, rng=rng, tol=0.0, **kw)
    hist = [{k: r[k] for k in KEEP if k in r} for r in res["history"]]
    return dict(variant=variant, settings=kw, alpha=alpha, dim=dim, seed=seed, history=hist,
                seconds=time.perf_counter() - t)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--alphas", type=float, nargs="+", default=[0.4])
    ap.add_argument("--dims", type=int, nargs="+", default=[1000])
    ap.add_argument("--seeds", type=int, nargs="+", default=[8],
                    help="seed count per D (one value, or one per --dims entry)")
    ap.add_argument("--variant", nargs="*", default=["base:"])
    ap.add_argument("--max-iter", type=int, default=80)
    ap.add_argument("--rng-seed", type=int, default=0)
    ap.add_argument("--procs", type=int, default=os.cpu_count())
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    seeds = a.seeds * len(a.dims) if len(a.seeds) == 1 else a.seeds
    jobs = []
    for v in a.variant:
        name, kw = _parse_variant(v)
        for alpha in a.alphas:
            for dim, ns in zip(a.dims, seeds):
                jobs += [(name, kw, alpha, dim, s, a.max_iter, a.rng_seed) for s in range(ns)]
    jobs.sort(key=lambda j: -j[3] * j[2])          # largest first
    rows = []
    t0 = time.perf_counter()
    with mp.Pool(a.procs) as pool:
        for r in pool.imap_unordered(_job, jobs):
            rows.append(r)
            q = r["history"][-1]["Q"]
            print(f"[{time.perf_counter() - t0:6.0f} s] {r['variant']} alpha={r['alpha']:g} "
                  f"D={r['dim']} seed={r['seed']}: Q=({q[0]:.4f}, {q[1]:.4f}) "
                  f"{r['seconds']:.0f} s", flush=True)
            with open(a.out, "w") as f:
                json.dump(rows, f)
    return rows


if __name__ == "__main__":
    main()
