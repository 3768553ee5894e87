"""AIM GAMP-RIE at small alpha D: which damping converges (softmax and hardmax, T = 2, rho = 0.5).

Usage: python benchmarks/amp_damping_grid.py --out grid.json [--dim 100] [--seeds 8]
       [--alphas 0.02 0.03 0.04 0.05 0.0635 0.08] [--dampings 0.5 0.6 0.7 0.8 0.9 auto]

One process per (channel, alpha, damping); per seed the final error ||S_hat - S||_F^2 / D,
the stop reason (a fixed damping uses the same divergence bound as ``auto``) and, for
``auto``, the damping used; with the SE fixed point (numerics.amp.se_prediction).
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import multiprocessing as mp  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402


def _job(args):
    name, alpha, damping, dim, seeds, max_iter = args
    from aim_sym.numerics import amp

    from aim_sym.amp_functions import amp_functions
    from aim_sym.channels import hardmax, softmax
    from aim_sym.compiled import compile_channel

    ch = dict(softmax=softmax, hardmax=hardmax)[name](2)
    cc, fns = compile_channel(ch), amp_functions(ch)
    t = time.perf_counter()
    rows = []
    for s in range(seeds):
        rng = np.random.default_rng(np.random.SeedSequence([0, s]))
        data = amp.generate(fns, alpha=alpha, rho=0.5, dim=dim, rng=rng)
        if damping == "auto":
            r = amp.damped_run(fns, data, rho=0.5, damping="auto", max_iter=max_iter, tol=1e-8,
                               variance="divergence")
        else:
            r = amp.amp_iterations(fns, data, rho=0.5, max_iter=max_iter, tol=1e-8,
                                   damping=damping, blowup=amp.BLOWUP)
            r["damping"] = damping
        rows.append(dict(seed=s, error=r["error"][-1], reason=r["reason"],
                         damping=r["damping"], iterations=r["iterations"]))
    se = amp.se_prediction(cc, alpha=alpha, rho=0.5)["mmse"]
    return dict(channel=name, alpha=alpha, damping=damping, dim=dim, se=se, runs=rows,
                seconds=time.perf_counter() - t)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--dim", type=int, default=100)
    ap.add_argument("--seeds", type=int, default=8)
    ap.add_argument("--max-iter", type=int, default=80)
    ap.add_argument("--alphas", type=float, nargs="+",
                    default=[0.02, 0.03, 0.04, 0.05, 0.0635, 0.08])
    ap.add_argument("--dampings", nargs="+", default=["0.5", "0.6", "0.7", "0.8", "0.9", "auto"])
    ap.add_argument("--procs", type=int, default=os.cpu_count())
    a = ap.parse_args(argv)
    damps = [d if d == "auto" else float(d) for d in a.dampings]
    jobs = [(n, al, d, a.dim, a.seeds, a.max_iter) for d in damps for n in ("softmax", "hardmax")
            for al in a.alphas]
    out = []
    with mp.Pool(a.procs) as pool:
        for r in pool.imap_unordered(_job, jobs):
            out.append(r)
            ok = sum(x["reason"] in ("max_iter", "tol") or x["reason"].startswith("perfect")
                     for x in r["runs"])
            print(f"{r['channel']} alpha={r['alpha']:g} damping={r['damping']}: "
                  f"{ok}/{len(r['runs'])} finished (no divergence); SE {r['se']:.4f}; "
                  f"errors {[round(x['error'], 3) for x in r['runs']]} "
                  f"{[x['damping'] for x in r['runs']]} ({r['seconds']:.0f} s)", flush=True)
            with open(a.out, "w") as f:
                json.dump(out, f, default=float)
    return out


if __name__ == "__main__":
    main()
