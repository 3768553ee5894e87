"""Finite-size GAMP for deep tied attention (L = 2, M = 2) against the state evolution.

Usage: python benchmarks/smi_amp_vs_se.py [--alphas 0.4 1.0] [--dims 500] [--seeds 4]
       [--max-iter 60] [--out results.json] [--mc-se]

Prints, per (alpha, D): GAMP final Q_11, Q_22 (mean +- standard error over seeds), the SE
prediction of :func:`numerics.smi.fixed_point` (branch Q = diag(0, q2)) and, with --mc-se, the
Monte Carlo state evolution ``se_montecarlo`` (tests/smi_mc_oracles.py) (not restricted to that
branch), and the wall time. Sets OMP_NUM_THREADS=1 before importing numpy.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import time  # noqa: E402

from aim_sym.numerics.smi_amp import run_smi_amp  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # the Monte Carlo oracles
from smi_mc_oracles import se_montecarlo  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--alphas", type=float, nargs="+", default=[0.4, 1.0])
    ap.add_argument("--dims", type=int, nargs="+", default=[500])
    ap.add_argument("--seeds", type=int, default=4)
    ap.add_argument("--max-iter", type=int, default=60)
    ap.add_argument("--damping", type=float, default=0.3)
    ap.add_argument("--order", type=int, default=24)
    ap.add_argument("--skip", type=float, default=1.0)
    ap.add_argument("--mc-se", action="store_true")
    ap.add_argument("--no-se", action="store_true", help="skip numerics.smi.fixed_point")
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    rows = []
    for alpha in a.alphas:
        mc = None
        if a.mc_se:
            t = time.perf_counter()
            mc = se_montecarlo(alpha=alpha, skip=a.skip, order=a.order)
            mc["seconds"] = time.perf_counter() - t
            print(f"alpha={alpha:g} MC-SE Q=({mc['Q_diag'][0]:.4f} +- {mc['Q_err'][0]:.4f}, "
                  f"{mc['Q_diag'][1]:.5f} +- {mc['Q_err'][1]:.5f}) [{mc['seconds']:.0f} s]",
                  flush=True)
        for dim in a.dims:
            t = time.perf_counter()
            r = run_smi_amp(alpha=alpha, dim=dim, seeds=a.seeds, skip=a.skip, max_iter=a.max_iter,
                            damping=a.damping, order=a.order, se=not a.no_se)
            se = r["se_prediction"]
            print(f"alpha={alpha:g} D={dim} seeds={a.seeds}: AMP Q11={r['Q_mean'][0]:.4f} +- "
                  f"{r['Q_stderr'][0]:.4f}, Q22={r['Q_mean'][1]:.4f} +- {r['Q_stderr'][1]:.4f}; "
                  f"SE(fixed_point)={se}; {r['seconds']:.0f} s", flush=True)
            for s in r["per_seed"]:
                s.pop("history", None)
            rows.append(dict(amp=r, mc_se=mc, seconds=time.perf_counter() - t))
            if a.out:
                with open(a.out, "w") as f:
                    json.dump(rows, f, indent=1, default=float)
    return rows


if __name__ == "__main__":
    main()
