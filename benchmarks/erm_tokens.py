"""ERM output side for T >= 3 tokens (THEORY 3): randomised quasi-Monte Carlo against plain Monte
Carlo of the same moments, side by side (issue 16; measured, not extrapolated).

At one (q, m, Sigma) the five output moments (:class:`numerics.erm_output.OutputMoments`) are
estimated by ``numerics.erm_output_tokens.output_moments`` with scrambled Sobol points
(``sampler="sobol"``) and with iid normals (``sampler="mc"``), R = 16 replicates of N points
each, for N = 2^7 ... 2^max.  For each sampler and N: wall time and standard error of each
moment (spread of the replicate means / sqrt(R)).  The time to reach a target relative standard
error is then read off the measured rows (the first N that reaches it; none: "not reached").

    python benchmarks/erm_tokens.py [--tokens 3] [--max-log2 11] [--target 1e-3] [--out f.json]
"""

from __future__ import annotations

import argparse
import json
import time

from aim_sym.numerics import erm_output_tokens as E

FIELDS = ("sq", "cross_m", "cross_s", "envelope", "loss")


def run(*, tokens: int, q: float, m: float, sigma: float, Q0n: float, max_log2: int,
        replicates: int) -> list[dict]:
    rows = []
    for log2 in range(7, max_log2 + 1):
        for sampler in ("sobol", "mc"):
            E.gaussian_points.cache_clear()
            t = time.perf_counter()
            r = E.output_moments(q=q, m=m, sigma=sigma, Q0n=Q0n, tokens=tokens,
                                 points=2**log2, replicates=replicates, seed=log2,
                                 sampler=sampler)
            sec = time.perf_counter() - t
            rows.append({"sampler": sampler, "points": 2**log2 * replicates, "seconds": sec,
                         **{k: getattr(r.mean, k) for k in FIELDS},
                         **{f"{k}_stderr": r.stderr[k] for k in FIELDS}})
            print(f"{sampler:5s} N = {2**log2 * replicates:7d}  {sec:7.2f} s  " + "  ".join(
                f"{k} {getattr(r.mean, k):.6g} +- {r.stderr[k]:.1e}" for k in FIELDS), flush=True)
    return rows


def time_to(rows: list[dict], target: float) -> dict:
    """Per sampler and moment: seconds of the first row whose relative standard error <= target."""
    out: dict = {}
    for sampler in ("sobol", "mc"):
        mine = [r for r in rows if r["sampler"] == sampler]
        out[sampler] = {}
        for k in FIELDS:
            hit = next((r for r in mine if r[f"{k}_stderr"] <= target * abs(r[k])), None)
            out[sampler][k] = None if hit is None else {"seconds": hit["seconds"],
                                                        "points": hit["points"]}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=3)
    ap.add_argument("--q", type=float, default=0.9)
    ap.add_argument("--m", type=float, default=0.8)
    ap.add_argument("--sigma", type=float, default=5.0)
    ap.add_argument("--Q0n", type=float, default=1.75)
    ap.add_argument("--max-log2", type=int, default=11)
    ap.add_argument("--replicates", type=int, default=16)
    ap.add_argument("--target", type=float, default=1e-3)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    rows = run(tokens=a.tokens, q=a.q, m=a.m, sigma=a.sigma, Q0n=a.Q0n, max_log2=a.max_log2,
               replicates=a.replicates)
    summary = time_to(rows, a.target)
    print(f"time to relative standard error {a.target:g}:")
    for k in FIELDS:
        cells = []
        for s in ("sobol", "mc"):
            h = summary[s][k]
            cells.append(f"{s} " + ("not reached" if h is None else
                                    f"{h['seconds']:.2f} s ({h['points']} points)"))
        print(f"  {k:9s} " + " | ".join(cells))
    if a.out:
        with open(a.out, "w") as fh:
            json.dump({"arguments": vars(a), "rows": rows, "time_to_target": summary}, fh,
                      indent=1)


if __name__ == "__main__":
    main()
