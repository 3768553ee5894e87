"""K2(q2) = E sum_m g_2m^2 on the SE branch Q = diag(0, q2) of deep attention (L = 2, M = 2,
c = 1, beta = 1) by independent routes, and the SE maps and fixed points they imply.

Usage: python benchmarks/smi_branch_k2_routes.py --out k2.json [--procs 16] [--samples 40000]
       [--amp-dims 16000 --amp-seeds 4 --amp-alpha 0.4]

Routes per q2 (one process per job, OMP_NUM_THREADS=1):
  lattice_lo, lattice_hi    : numerics.smi_sequential.branch_stats (the fibre-lattice engine of
                            the sequential threshold) at SEQ_ORDERS[0], SEQ_ORDERS[1] (the tensor
                            Gauss-Hermite and v2 mixture engines this script once compared were
                            retired on 2026-11-25; their rows in benchmarks/RESULTS.md are history);
  mc_branch                : montecarlo_branch of tests/smi_mc_oracles.py (Monte Carlo outer and inner);
  mc_gout                  : Monte Carlo outer, inner by the GAMP fibre rule numerics.smi_amp.gout
                            (both E[sum g^2] and E[-sum dg]; their agreement is Nishimori).
The SE map is T(q2) = alpha K2 / (1 + alpha K2); a fixed point solves q2 / (1 - q2) = alpha K2.
Optionally also runs GAMP jobs (numerics.smi_amp.amp_run) at large D alongside.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import multiprocessing as mp  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # the Monte Carlo oracles
import smi_mc_oracles  # noqa: E402

Q_GRID = (0.02, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.65, 0.7,
          0.75, 0.8, 0.85, 0.88, 0.9, 0.91, 0.92, 0.93, 0.94, 0.95)
QUAD_Q = (0.45, 0.5, 0.55, 0.91, 0.92, 0.93)


def mc_gout(q2, *, samples, order=24, seed=0):
    """Monte Carlo outer, GAMP fibre rule inner: K2 = E sum_m g_2m^2 and E -sum_m dg_22."""
    from aim_sym.numerics import smi_amp

    rng = np.random.default_rng([seed, int(round(q2 * 1e4))])
    om = np.zeros((samples, 2, 2))
    om[:, 1] = math.sqrt(q2) * rng.standard_normal((samples, 2))
    z = om + np.stack([rng.standard_normal((samples, 2)),
                       math.sqrt(1 - q2) * rng.standard_normal((samples, 2))], 1)
    h, _ = smi_amp.forward(z)
    V = np.diag([1.0, 1 - q2])
    g, dg, _ = smi_amp.gout(h, om, V, order=order)
    gg = (g[:, 1, :] ** 2).sum(1)
    mdg = -dg[:, :, 1, 1].sum(1)
    n = math.sqrt(samples)
    return dict(K2=float(gg.mean()), K2_err=float(gg.std(ddof=1) / n), K2_dg=float(mdg.mean()),
                K2_dg_err=float(mdg.std(ddof=1) / n), samples=samples, order=order)


def _job(args):
    kind, q2, kw = args
    t = time.perf_counter()
    from aim_sym.numerics import smi

    if kind == "mc_gout":
        out = mc_gout(q2, **kw)
    elif kind in ("lattice_lo", "lattice_hi"):
        from aim_sym.numerics import smi_sequential

        o = smi_sequential.SEQ_ORDERS[0 if kind == "lattice_lo" else 1]
        s = smi_sequential.branch_stats(q2, n_w=o[0], dh=o[1], dz=o[2])
        out = dict(K2=float(s["K2"]), mu1=float(s["mu1"]), nishimori=float(s["nishimori"]),
                   orders=list(o))
    elif kind == "mc_branch":
        s = smi_mc_oracles.montecarlo_branch(q2, **kw)
        out = dict(K2=s["K2"].value, K2_err=s["K2"].error, mu1=s["mu1"].value)
    elif kind == "fixed_point":
        out = smi.fixed_point(alpha=q2)
    elif kind == "amp":
        from aim_sym.numerics import smi_amp

        rng = np.random.default_rng([0, kw["seed"]])
        data = smi_amp.generate(alpha=kw["alpha"], dim=kw["dim"], rng=rng)
        res = smi_amp.amp_run(data, max_iter=kw["max_iter"], rng=rng, tol=0.0)
        keep = ("iter", "Q", "A", "A_raw", "V", "step", "resid_var")
        out = dict(history=[{k: r[k] for k in keep if k in r} for r in res["history"]], **kw)
    else:
        raise ValueError(kind)
    return dict(kind=kind, q2=q2, seconds=time.perf_counter() - t, **out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--procs", type=int, default=os.cpu_count())
    ap.add_argument("--samples", type=int, default=40000)
    ap.add_argument("--routes", nargs="+",
                    default=["mc_gout", "lattice_lo", "lattice_hi", "mc_branch", "fixed_point"])
    ap.add_argument("--amp-dims", type=int, nargs="*", default=[])
    ap.add_argument("--amp-seeds", type=int, default=4)
    ap.add_argument("--amp-alpha", type=float, default=0.4)
    ap.add_argument("--amp-iter", type=int, default=60)
    a = ap.parse_args(argv)
    jobs = [("amp", 0.0, dict(alpha=a.amp_alpha, dim=d, seed=100 + s, max_iter=a.amp_iter))
            for d in a.amp_dims for s in range(a.amp_seeds)]
    r = set(a.routes)
    jobs += [("lattice_hi", q, {}) for q in QUAD_Q if "lattice_hi" in r]
    jobs += [("fixed_point", al, {}) for al in (0.4, 0.6) if "fixed_point" in r]
    jobs += [("mc_branch", q, dict(samples=20000, inner=1000)) for q in QUAD_Q
             if "mc_branch" in r]
    jobs += [("lattice_lo", q, {}) for q in Q_GRID if "lattice_lo" in r]
    jobs += [("mc_gout", q, dict(samples=a.samples)) for q in Q_GRID if "mc_gout" in r]
    jobs += [("mc_gout", q, dict(samples=a.samples, order=48)) for q in (0.5, 0.92)
             if "mc_gout" in r]
    rows = []
    t0 = time.perf_counter()
    with mp.Pool(a.procs) as pool:
        for res in pool.imap_unordered(_job, jobs):
            rows.append(res)
            print(f"[{time.perf_counter() - t0:5.0f} s] {res['kind']} {res['q2']:g}: "
                  f"K2={res.get('K2', res.get('Q'))} ({res['seconds']:.0f} s)", flush=True)
            with open(a.out, "w") as f:
                json.dump(rows, f, default=float)
    return rows


if __name__ == "__main__":
    main()
