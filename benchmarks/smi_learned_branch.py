"""Both-learned SE branch of deep tied attention (L = 2, M = 2, c = 1, beta = 1) with
numerics.smi_branches.solve_branch (joint-branch kernel of numerics.smi_branch_qmc: scrambled Sobol'
teachers x scrambled Sobol' fibre nodes), by continuation in alpha.

Usage: python benchmarks/smi_learned_branch.py --out branch.json [--alphas 0.85,0.8,0.75]
       [--init 0.375,0.9906] [--previous earlier.json ...]
Each point: Q with its error parts, eigenvalues of dT/dQ, Nishimori checks, CPU time.
The file is rewritten after every point.  Finally the onset: the root of the parabola
q1(alpha) through the three smallest alphas (line through two: extrapolation error), to be
compared with the sequential threshold of numerics.smi_sequential (0.71963566 +- 1.4e-7,
benchmarks/RESULTS.md).
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np
from aim_sym.numerics import smi_branches
from aim_sym.numerics.records import atomic_write


def onset(points: list[dict]) -> dict:
    """Root of q1(alpha) extrapolated from the three smallest alphas: parabola (value) and the
    line through the two smallest (the difference is the extrapolation error); the statistical
    part moves each q1 by its standard error, one at a time, and adds the root shifts."""
    pts = sorted(points, key=lambda p: p["alpha"])[:3]
    a = np.array([p["alpha"] for p in pts])
    q = np.array([p["Q"][0] for p in pts])
    se = np.array([p["se"][0] + _bias(p) + p["residual"][0] for p in pts])

    def line(qq):
        return a[0] - qq[0] * (a[1] - a[0]) / (qq[1] - qq[0])

    def parab(qq):
        c = np.polyfit(a, qq, 2)
        r = [z.real for z in np.roots(c) if abs(z.imag) < 1e-12]
        return float(min(r, key=lambda z: abs(z - line(qq)))) if r else float("nan")

    out = {}
    if len(pts) >= 2:
        out["line"] = float(line(q))
    if len(pts) == 3:
        v = parab(q)
        if all("q_replicates" in p for p in pts):
            # common random numbers: the replicate roots of all alphas share each scramble
            qr = np.array([[r[0] for r in p["q_replicates"]] for p in pts])      # (3, R)
            roots = np.array([parab(qr[:, j]) for j in range(qr.shape[1])])
            stat = float(roots.std(ddof=1) / np.sqrt(roots.size))
            lat = sum(abs(parab(q + (_bias(p) + p["residual"][0]) * np.eye(3)[i]) - v)
                      for i, p in enumerate(pts))
            out.update(replicate_roots=roots.tolist(), lattice=float(lat))
        else:
            stat = sum(abs(parab(q + se[i] * np.eye(3)[i]) - v) for i in range(3))
            lat = 0.0
        out.update(value=v, stat=float(stat), model=abs(v - out["line"]),
                   error=float(2 * stat + lat + abs(v - out["line"])), alphas=a.tolist())
    return out


def _bias(p: dict) -> float:
    """Deterministic error part of q1: the ratio bias (the lattice part of points from the former
    fibre-lattice engine)."""
    return p["ratio_bias"][0] if "ratio_bias" in p else p["lattice"][0]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--alphas", default="0.85,0.8,0.75,0.9,0.95")
    ap.add_argument("--init", default="0.375,0.9906")
    ap.add_argument("--previous", nargs="*", default=[],
                    help="JSON files of earlier runs whose points join the output and onset")
    args = ap.parse_args()
    alphas = [float(t) for t in args.alphas.split(",")]
    init = tuple(float(t) for t in args.init.split(","))
    done: list[dict] = []
    for f in args.previous:
        with open(f) as fh:
            done += json.load(fh)["points"]
    with open("/proc/loadavg") if os.path.exists("/proc/loadavg") else open(os.devnull) as fh:
        load = fh.read().split()[:3]
    for al in alphas:
        if al in [p["alpha"] for p in done]:
            continue
        if len(done) >= 2:                       # linear continuation from the nearest two
            near = sorted(done, key=lambda p: abs(p["alpha"] - al))[:2]
            (a0, q0), (a1, q1) = ((p["alpha"], np.array(p["Q"])) for p in near)
            t = (al - a0) / (a1 - a0)                 # linear in q1, in log(1 - q2)
            g1 = q0[0] + (q1[0] - q0[0]) * t
            g2 = 1 - (1 - q0[1]) * ((1 - q1[1]) / (1 - q0[1])) ** t
            init = (float(np.clip(g1, 0.01, 0.95)), float(np.clip(g2, 0.5, 0.9995)))
        elif done:
            init = tuple(done[-1]["Q"])
        t = time.perf_counter()
        r = smi_branches.solve_branch(alpha=al, init=init)
        r["wall_seconds"] = time.perf_counter() - t
        r["eigenvalues"] = [str(z) if isinstance(z, complex) else z for z in r["eigenvalues"]]
        done.append(r)
        print(f"alpha {al}: Q = {r['Q']} +- {r['error']}, eig {r['eigenvalues']}, "
              f"{r['wall_seconds']:.0f} s", flush=True)
        atomic_write(args.out, json.dumps(dict(points=done, onset=onset(done),
                                               loadavg_at_start=load), indent=1))


if __name__ == "__main__":
    main()
