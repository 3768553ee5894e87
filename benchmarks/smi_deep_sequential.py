"""Sequential thresholds of deep tied attention with L = 3 (M = 2, P_l = 1): layers 1 and 2 on
the SE branch where layer 3 is learned, Q = diag(0, 0, q3) (numerics/smi_sequential.py:
branch_point, sequential_thresholds; the Monte Carlo oracles in tests/smi_mc_oracles.py).

Usage:
  python benchmarks/smi_deep_sequential.py thresholds [--skip 1] [--beta 1] [--samples 6000]
         [--inner 1500] [--seed 0] [--out res.json]   # the seeded Monte Carlo oracle
  python benchmarks/smi_deep_sequential.py check Q3 [--orders tau,dh,dz,R ...] [--samples N]
         [--inner N] [--seed 0]      # deterministic lattice (two orders or more) vs Monte Carlo
  python benchmarks/smi_deep_sequential.py lattice Q3 --orders tau,dh,dz1,dz2,R ... [--workers 2]
         [--double]                  # lattice statistics and cost, one order per line
  python benchmarks/smi_deep_sequential.py lattice-thresholds [--orders C R] [--scan q ...]
         [--workers 2] [--out res.json]   # deterministic thresholds (two orders)
  python benchmarks/smi_deep_sequential.py kernel-speed [Q3] [--order tau,dh,dz1,dz2,R]
                                     # lattice kernel variants: blocks, float32, workers

``thresholds`` and ``check`` run in one process (CPU time by time.process_time), ``lattice`` and
``lattice-thresholds`` over ``--workers`` forked processes (wall time); the load average
(uptime) is printed, since the machine may be shared.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # the Monte Carlo oracles
import smi_mc_oracles  # noqa: E402


def _load() -> str:
    return "load average {:.2f} {:.2f} {:.2f}".format(*os.getloadavg())


def thresholds(args) -> None:

    print(_load(), flush=True)
    t0, c0 = time.perf_counter(), time.process_time()
    res = smi_mc_oracles.montecarlo_sequential_thresholds(
        skip=args.skip, beta=args.beta, samples=args.samples, inner=args.inner, seed=args.seed,
        progress=lambda i, n, m: print(f"  [{time.process_time() - c0:7.1f} s cpu] {m}",
                                       flush=True))
    for d in res:
        print(f"layer {d['layer']}: alpha_seq = {d['value']:.4f} +- {d['error']:.4f} "
              f"(stat {d['stat_error']:.4f}, inner bias {d['bias']:.4f}, interp "
              f"{d['interpolation']:.4f}); q3* = {d['q3']:.5f} +- {d['q3_error']:.5f}; "
              f"Nishimori (K3 - (2 - trcov3/V)/V)/K3 = {d['nishimori'][0]:+.4f} +- "
              f"{d['nishimori'][1]:.4f}; first = {d['first']}")
    print(f"wall {time.perf_counter() - t0:.1f} s, cpu {time.process_time() - c0:.1f} s; "
          + _load())
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(res, fh, indent=1)


def check(args) -> None:
    from aim_sym.numerics import smi_sequential as ss

    print(_load(), flush=True)
    for o in args.orders:
        tau, dh, dz, R = (float(x) for x in o.split(","))
        c0 = time.process_time()
        st = ss.branch_point(args.q3, (tau, dh, dz, dz, R), skip=args.skip, beta=args.beta)
        print(f"lattice {o}: mass {st['mass']:.7f} mu1 {st['mu1']:.6f} mu2 {st['mu2']:.6f} "
              f"K3 {st['K3']:.6f} trcov3 {st['trcov3']:.6f} psi {st['psi']:.6f} Nishimori "
              f"{st['nishimori']:+.2e}; {st['pairs']:.2e} pairs, "
              f"{time.process_time() - c0:.1f} s cpu", flush=True)
    c0 = time.process_time()
    mc = smi_mc_oracles.montecarlo_branch(args.q3, layers=3, skip=args.skip, beta=args.beta,
                                       samples=args.samples, inner=args.inner, seed=args.seed)
    print("Monte Carlo: " + ", ".join(f"{k} {e.value:.5f} +- {e.error:.5f}"
                                      for k, e in mc.items())
          + f"; {time.process_time() - c0:.1f} s cpu")
    print(_load())


def _order(text: str) -> tuple:
    return tuple(float(x) for x in text.split(","))


def lattice(args) -> None:
    from aim_sym.numerics import smi_sequential as ss

    print(_load(), flush=True)
    for o in args.orders:
        tau, dh, dz1, dz2, R = _order(o)
        t0 = time.perf_counter()
        st = ss.branch_point(args.q3, (tau, dh, dz1, dz2, R), skip=args.skip, beta=args.beta,
                             single=not args.double, workers=args.workers, wcut=args.wcut)
        r = st["r"]
        print(f"lattice {o}: mass {st['mass']:.8f} mu1 {st['mu1']:.7f} mu2 {st['mu2']:.7f} "
              f"K3 {st['K3']:.6f} cut(mu) {st['cut']['mu'] + st['cut']['mu_tail']:.1e} "
              f"r1 {r[0]:+.7f} r2 {r[1]:+.7f} Nishimori/K3 "
              f"{st['nishimori'] / st['K3']:+.2e}; {st['outer_points']} h x {st['nodes']} nodes"
              f" = {st['pairs']:.2e} pairs, {time.perf_counter() - t0:.1f} s wall; " + _load(),
              flush=True)


def lattice_thresholds(args) -> None:
    from aim_sym.numerics import smi_sequential as ss

    print(_load(), flush=True)
    t0 = time.perf_counter()
    kw = {}
    if args.orders:
        kw["orders"] = tuple(_order(o) for o in args.orders)
    if args.scan:
        kw["scan"] = tuple(args.scan)
    res = ss.sequential_thresholds(
        layers=3, skip=args.skip, beta=args.beta, workers=args.workers, single=not args.double,
        progress=lambda i, n, m: print(f"  [{time.perf_counter() - t0:7.1f} s] {m}",
                                       flush=True), **kw)
    for d in res:
        print(f"layer {d['layer']}: alpha_seq = {d['value']:.5f} +- {d['error']:.5f} (spread "
              f"{d['spread']:.1e}, interp {d['interpolation']:.1e}, Nishimori {d['nishimori']:.1e}"
              f", cut {d['cut']:.1e}); coarse {d['values'][0]:.5f}; q3* = {d['q3']:.6f} +- "
              f"{d['q3_error']:.6f}; mass {d['mass']:.7f}; first = {d['first']}")
    print(f"wall {time.perf_counter() - t0:.1f} s; " + _load())
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(res, fh, indent=1)


def kernel_speed(args) -> None:
    from aim_sym.numerics import smi_sequential as ss

    print(_load(), flush=True)
    tau, dh, dz1, dz2, R = _order(args.order)
    kw = dict(skip=args.skip, beta=args.beta, wcut=1e-8)
    # the block sizes of the shared fibre-lattice kernel (numerics.smi_sequential)
    for name, block, chunk, single, workers in (
            ("blocks of 2^20 elements, float64, 1 process", 1 << 20, 1 << 30, False, 1),
            ("blocks of 2^16 x 8192 nodes, float64, 1 process", 1 << 16, 8192, False, 1),
            ("blocks of 2^16 x 8192 nodes, float32, 1 process", 1 << 16, 8192, True, 1),
            ("blocks of 2^16 x 8192 nodes, float32, 2 processes", 1 << 16, 8192, True, 2)):
        ss._BLOCK, ss._CHUNK = block, chunk
        t = time.perf_counter()
        st = ss.branch_point(args.q3, (tau, dh, dz1, dz2, R), single=single, workers=workers,
                             **kw)
        dt = time.perf_counter() - t
        print(f"{name}: {dt:.1f} s wall, {dt / st['pairs'] * 1e9:.1f} ns/pair; mu1 "
              f"{st['mu1']:.10f} K3 {st['K3']:.8f}; " + _load(), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("thresholds")
    a.add_argument("--samples", type=int, default=6000)
    a.add_argument("--inner", type=int, default=1500)
    a.add_argument("--out", default="")
    b = sub.add_parser("check")
    b.add_argument("q3", type=float)
    b.add_argument("--orders", nargs="+", default=["0.5,2.0,0.6,5", "0.4,1.5,0.5,5.5"])
    b.add_argument("--samples", type=int, default=4000)
    b.add_argument("--inner", type=int, default=1000)
    c = sub.add_parser("lattice")
    c.add_argument("q3", type=float)
    c.add_argument("--orders", nargs="+", required=True)
    c.add_argument("--wcut", type=float, default=1e-8, help="omega_3 weight cut")
    d = sub.add_parser("lattice-thresholds")
    d.add_argument("--orders", nargs=2, default=None)
    d.add_argument("--scan", nargs="+", type=float, default=None)
    d.add_argument("--out", default="")
    e = sub.add_parser("kernel-speed")
    e.add_argument("q3", type=float, nargs="?", default=0.98)
    e.add_argument("--order", default="1.0,2.8,0.5,0.3,6")
    for p in (c, d):
        p.add_argument("--workers", type=int, default=2)
        p.add_argument("--double", action="store_true", help="float64 exponentials")
    for p in (a, b, c, d, e):
        p.add_argument("--skip", type=float, default=1.0)
        p.add_argument("--beta", type=float, default=1.0)
        p.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    {"thresholds": thresholds, "check": check, "lattice": lattice,
     "lattice-thresholds": lattice_thresholds, "kernel-speed": kernel_speed}[args.cmd](args)


if __name__ == "__main__":
    main()
