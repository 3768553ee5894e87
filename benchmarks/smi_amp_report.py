"""Tables for benchmarks/RESULTS.md from the outputs of smi_amp_finite_size.py and
smi_branch_k2_routes.py: AMP final overlaps per (alpha, D) with standard errors and the
convergence fraction, the SE fixed point from the Monte Carlo K2 curve (and from the quadrature
of numerics.smi.fixed_point), the SE map's slope, and AMP vs the damped SE trajectory.

Usage: python benchmarks/smi_amp_report.py --amp base.json [variants.json ...] --k2 k2.json
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict

import numpy as np
from scipy.interpolate import CubicSpline
from scipy.optimize import brentq

CONV_WINDOW, CONV_RANGE = 10, 0.01   # converged: max - min of Q_ll over the last 10 iterations


def k2_curve(rows, form="K2_dg"):
    """Cubic spline of log K2(q2) through the mc_gout grid (order 24) and its relative error."""
    pts = sorted((r["q2"], r[form], r[form + "_err"]) for r in rows
                 if r["kind"] == "mc_gout" and r.get("order", 24) == 24)
    q, k, e = (np.array(x) for x in zip(*pts))
    return CubicSpline(q, np.log(k)), CubicSpline(q, e / k)


def se_fixed_point(alpha, lk, rel):
    """q2 solving q2 / (1 - q2) = alpha K2(q2), its error from K2's, and the slope T'(q2*)."""
    f = lambda q: np.log(alpha) + lk(q) - np.log(q / (1 - q))  # noqa: E731
    qs = np.linspace(0.2, 0.95, 200)
    v = f(qs)
    i = np.where(np.sign(v[:-1]) != np.sign(v[1:]))[0][-1]
    q = brentq(f, qs[i], qs[i + 1])
    dfdq = lk(q, 1) - 1 / (q * (1 - q))
    err = abs(float(rel(q)) / dfdq)
    slope = alpha * np.exp(lk(q)) * lk(q, 1) * (1 - q) ** 2
    return q, err, float(slope)


def se_trajectory(alpha, lk, q0, n, damping):
    """The SE iterated with the AMP's damping on Q_hat (see numerics.smi_amp.amp_run)."""
    q, qh, out = q0, None, []
    for _ in range(n):
        new = alpha * float(np.exp(lk(max(q, 0.02))))
        qh = new if qh is None else (1 - damping) * new + damping * qh
        q = qh / (1 + qh)
        out.append(q)
    return np.array(out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--amp", nargs="+", required=True)
    ap.add_argument("--k2", required=True)
    a = ap.parse_args(argv)
    k2 = json.load(open(a.k2))
    lk, rel = k2_curve(k2)
    lk_gg, rel_gg = k2_curve(k2, "K2")
    rows = [r for p in a.amp for r in json.load(open(p))]
    amp16 = [r for r in k2 if r["kind"] == "amp"]
    for r in amp16:
        rows.append(dict(variant="base", alpha=r["alpha"], dim=r["dim"], seed=r["seed"],
                         history=r["history"], seconds=r["seconds"]))
    fp = {r["q2"]: r for r in k2 if r["kind"] == "fixed_point"}
    G = defaultdict(list)
    for r in rows:
        G[(r["variant"], r["alpha"], r["dim"])].append(r)
    print("| variant | alpha | D | seeds | Q_22 final (mean +- stderr) | seed sd | converged "
          "| Q_11 max | SE (MC K2, dg) | SE (MC K2, gg) | SE fixed_point (quadrature) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for key in sorted(G):
        v, al, D = key
        rs = G[key]
        Q = np.array([[h["Q"][1] for h in r["history"]] for r in rs])
        fin = Q[:, -1]
        rng = Q[:, -CONV_WINDOW:].max(1) - Q[:, -CONV_WINDOW:].min(1)
        q1 = max(r["history"][-1]["Q"][0] for r in rs)
        n = len(rs)
        q, e, s = se_fixed_point(al, lk, rel)
        qg, eg, _ = se_fixed_point(al, lk_gg, rel_gg)
        f = fp.get(al)
        ftxt = f"{f['Q'][1]:.4f} +- {f['error']:.4f}" if f else "-"
        print(f"| {v} | {al:g} | {D} | {n} | {fin.mean():.4f} +- {fin.std(ddof=1) / n**.5:.4f} "
              f"| {fin.std(ddof=1):.3f} | {(rng < CONV_RANGE).sum()}/{n} | {q1:.1e} "
              f"| {q:.4f} +- {e:.4f} (slope {s:.2f}) | {qg:.4f} +- {eg:.4f} | {ftxt} |")
    print()
    print("AMP mean Q_22 per iteration vs the damped SE trajectory (MC K2 curve, damping 0.3, "
          "Q_22^0 = 0.02):")
    its = [1, 2, 3, 5, 10, 15, 20, 30, 40, 60]
    print("| alpha | D | " + " | ".join(f"t={t}" for t in its) + " |")
    print("|---|---|" + "---|" * len(its))
    for al in sorted({k[1] for k in G}):
        se = se_trajectory(al, lk, 0.02, 70, 0.3)
        print(f"| {al:g} | SE | " + " | ".join(f"{se[t - 1]:.3f}" for t in its) + " |")
        for D in sorted({k[2] for k in G if k[0] == "base" and k[1] == al}):
            rs = G[("base", al, D)]
            L = min(len(r["history"]) for r in rs)
            Q = np.array([[h["Q"][1] for h in r["history"][:L]] for r in rs])
            m, sd = Q.mean(0), Q.std(0, ddof=1) / np.sqrt(len(rs))
            print(f"| {al:g} | {D} | " + " | ".join(
                f"{m[t - 1]:.3f}+-{sd[t - 1]:.3f}" if t <= L else "-" for t in its) + " |")


if __name__ == "__main__":
    main()
