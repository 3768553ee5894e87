"""Deep AIM at small width: layer 1's sequential threshold along layer 2's branch
(docs/deep_aim_sequential.md; numerics/deep_aim_sequential.py). The scans behind the page are
shipped in docs/data/deep_aim_sequential/ (one JSON line per point, appended as they finish, so
a stopped scan resumes by running the rest of its grid).

  python benchmarks/deep_aim_sequential.py scan C M Q2,Q2,... [--seed S] [--data DIR]
  python benchmarks/deep_aim_sequential.py mc C Q2 SAMPLES INNER [--data DIR]
  python benchmarks/deep_aim_sequential.py figure PATH [--data DIR]
  python benchmarks/deep_aim_sequential.py thresholds [--data DIR]
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import time

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "docs", "data",
                    "deep_aim_sequential")
SKIPS = (0.0, 0.5, 1.0, 2.0)


def _append(path: str, row: dict) -> None:
    with open(path, "a") as f:
        f.write(json.dumps(row) + "\n")


def scan(a) -> None:
    from aim_sym.numerics.deep_aim_sequential import scan as run

    t = time.time()
    for q in (float(x) for x in a.q2s.split(",")):
        r = run(skip=a.c, q2s=[q], m=a.m, seed=a.seed)[0]
        _append(os.path.join(a.data, f"scan_c{a.c}_m{a.m}_s{a.seed}.jsonl"), r)
        print(a.c, q, r["S1"], r["S1_error"], r["E2"], r["E2_error"], round(time.time() - t, 1),
              flush=True)


def mc(a) -> None:
    from aim_sym.numerics.deep_aim_sequential import branch_alpha, branch_point_mc

    t = time.time()
    r = branch_point_mc(skip=a.c, q2=a.q2, samples=a.samples, inner=a.inner, seed=11)
    s1, e2 = r["S1"], r["E2"]
    a1, a2 = 1 / (2 * s1.value), branch_alpha(a.q2, e2.value)
    row = dict(c=a.c, q2=a.q2, samples=a.samples, inner=a.inner, S1=s1.value, S1_se=s1.error,
               E2=e2.value, E2_se=e2.error, A1=a1, A1_se=a1 * s1.error / s1.value, A2=a2,
               A2_se=a2 * e2.error / e2.value, secs=time.time() - t)
    print(json.dumps(row), flush=True)
    _append(os.path.join(a.data, "mc.jsonl"), row)


def load(data: str, c: float) -> list[dict]:
    """The scan rows of skip c, the finest m kept per q2, sorted by q2."""
    d: dict = {}
    for fn in sorted(glob.glob(os.path.join(data, f"scan_c{c}_m*_s0.jsonl"))):
        for line in open(fn):
            r = json.loads(line)
            if r["q2"] not in d or r["m"] > d[r["q2"]]["m"]:
                d[r["q2"]] = r
    return [d[k] for k in sorted(d)]


def thresholds(a) -> None:
    from aim_sym.numerics.deep_aim_sequential import sequential_threshold

    for c in SKIPS:
        t = sequential_threshold(load(a.data, c))
        if t is None:
            print(f"c = {c:g}: no crossing on the grid")
            continue
        print(f"c = {c:g}: " + ", ".join(f"{k} = {v.value:.6g} +- {v.error:.2g}"
                                         for k, v in t.items()))


def figure(a) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    for i, c in enumerate(SKIPS):
        rows = load(a.data, c)
        q = np.array([r["q2"] for r in rows])
        s1 = np.array([r["S1"] for r in rows])
        e = np.array([r["S1_error"] for r in rows])
        e2 = np.array([r["E2"] for r in rows])
        ax1.errorbar(q, s1, yerr=e, marker="o", ms=3, color=f"C{i}", label=f"c = {c:g}",
                     capsize=2)
        ok = s1 > 3 * e
        ax2.plot(q, 1 / (2 * (1 - np.sqrt(q)) * e2), "-", color=f"C{i}",
                 label=f"branch alpha_bar_2(q2), c = {c:g}")
        ax2.plot(q[ok], 1 / (2 * s1[ok]), "--", color=f"C{i}", label=f"1/(2 S_1(q2)), c = {c:g}")
    ax1.axhline(2, color="k", lw=0.5)
    ax1.set_xlabel("q2 (layer 2's overlap; q1 = 0)")
    ax1.set_ylabel("S_1(q2) = E_1(0, q2)")
    ax1.set_title("Layer 1's small-width signal along layer 2's overlap")
    ax1.legend()
    ax2.set_xlabel("q2")
    ax2.set_ylabel("alpha_bar")
    ax2.set_ylim(0, 2.5)
    ax2.set_title("Sequential threshold: where the curves cross")
    ax2.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(a.path, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=DATA)
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("scan")
    s.add_argument("c", type=float)
    s.add_argument("m", type=int)
    s.add_argument("q2s")
    s.add_argument("--seed", type=int, default=0)
    s = sub.add_parser("mc")
    s.add_argument("c", type=float)
    s.add_argument("q2", type=float)
    s.add_argument("samples", type=int)
    s.add_argument("inner", type=int)
    s = sub.add_parser("figure")
    s.add_argument("path")
    sub.add_parser("thresholds")
    a = ap.parse_args()
    {"scan": scan, "mc": mc, "figure": figure, "thresholds": thresholds}[a.cmd](a)


if __name__ == "__main__":
    main()
