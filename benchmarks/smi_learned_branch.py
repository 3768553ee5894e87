"""Both-learned SE branch of deep tied attention (L = 2, M = 2, c = 1, beta = 1) with
numerics.smi_learned (fibre lattice x scrambled Sobol' teacher outer), by continuation in alpha.

Usage: python benchmarks/smi_learned_branch.py --out branch.json [--alphas 0.85,0.8,0.75]
       [--init 0.375,0.9906]
Each point: Q with its error parts, eigenvalues of dT/dQ, K12 and Nishimori checks, CPU time.
The file is rewritten after every point.  Finally the onset: q1(alpha) fitted by a straight
line through the two smallest alphas (and a parabola through three, the difference being the
extrapolation error) and its root compared with the sequential threshold of
numerics.smi_sequential (0.71962 +- 0.00008, benchmarks/RESULTS.md).
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np

from numerics import smi_learned
from numerics.records import atomic_write


def onset(points: list[dict]) -> dict:
    """Root of q1(alpha) extrapolated from the smallest alphas (weighted line; parabola check)."""
    pts = sorted(points, key=lambda p: p["alpha"])
    a = np.array([p["alpha"] for p in pts])
    q = np.array([p["Q"][0] for p in pts])
    e = np.array([p["error"][0] for p in pts])
    out = {}
    if len(pts) >= 2:
        s = (q[1] - q[0]) / (a[1] - a[0])
        root = a[0] - q[0] / s
        # error: the two points' errors moved independently (first-order)
        d0 = abs((1 + (a[0] - root) / (a[1] - a[0])) * e[0] / s)
        d1 = abs((a[0] - root) / (a[1] - a[0]) * e[1] / s)
        out["line"] = dict(value=float(root), error=float(d0 + d1), alphas=a[:2].tolist())
    if len(pts) >= 3:
        c = np.polyfit(a[:3], q[:3], 2)
        r = [z.real for z in np.roots(c) if abs(z.imag) < 1e-12]
        if r:
            out["parabola"] = float(min(r, key=lambda z: abs(z - out["line"]["value"])))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--alphas", default="0.85,0.8,0.75,0.9,0.95")
    ap.add_argument("--init", default="0.375,0.9906")
    args = ap.parse_args()
    alphas = [float(t) for t in args.alphas.split(",")]
    init = tuple(float(t) for t in args.init.split(","))
    done: list[dict] = []
    with open("/proc/loadavg") if os.path.exists("/proc/loadavg") else open(os.devnull) as fh:
        load = fh.read().split()[:3]
    for al in alphas:
        if len(done) >= 2:                       # linear continuation from the nearest two
            near = sorted(done, key=lambda p: abs(p["alpha"] - al))[:2]
            (a0, q0), (a1, q1) = ((p["alpha"], np.array(p["Q"])) for p in near)
            g = q0 + (q1 - q0) * (al - a0) / (a1 - a0)
            init = (float(np.clip(g[0], 0.01, 0.95)), float(np.clip(g[1], 0.5, 0.9995)))
        elif done:
            init = tuple(done[-1]["Q"])
        t = time.perf_counter()
        r = smi_learned.solve_branch(alpha=al, init=init)
        r["wall_seconds"] = time.perf_counter() - t
        r["eigenvalues"] = [str(z) if isinstance(z, complex) else z for z in r["eigenvalues"]]
        done.append(r)
        print(f"alpha {al}: Q = {r['Q']} +- {r['error']}, eig {r['eigenvalues']}, "
              f"{r['wall_seconds']:.0f} s", flush=True)
        atomic_write(args.out, json.dumps(dict(points=done, onset=onset(done),
                                               loadavg_at_start=load), indent=1))


if __name__ == "__main__":
    main()
