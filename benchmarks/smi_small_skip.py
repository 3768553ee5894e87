"""Deep tied attention, L = 2, M = 2, beta = 1: weak thresholds at small skip c (issue 14).

For each c: the earlier tensor Gauss-Hermite engine (numerics.smi_route_a.q0_gauss_hermite, orders (72, 96)
vs (96, 128): never sees the width-sqrt(c) feature where det A(z_1) -> c (1 + c)), the rotated
rules now used by numerics.smi.stability_matrix (three refinements), and seeded Monte Carlo
(montecarlo_stability of tests/smi_mc_oracles.py: inner importance sampling with a proposal resolving the
feature, control variates), as thresholds alpha_l = 1 / lambda_l with their bars, seconds per
call, and the outer mass of each rule (exactly 1 for a correct rule).  The bound alpha_l >= 1/6
(THEORY 2.2, M = 2) holds for the new values; the old ones break it at c <= 0.01.

Run: python benchmarks/smi_small_skip.py [--samples R] [--inner K] [--seed S]
"""

import argparse
import sys
import time
from pathlib import Path

from aim_sym.numerics import smi, smi_route_a

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # the Monte Carlo oracles
import smi_mc_oracles  # noqa: E402

SKIPS = (1.0, 0.5, 0.2, 0.1, 0.01, 1e-3, 1e-4)
GH_ORDERS = ((72, 96), (96, 128))  # (n_h, n_z) of the Gauss-Hermite rules (c >= 0.5 only)


def _thr(lam, err):
    return 1.0 / lam, err / lam**2


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=20000)
    ap.add_argument("--inner", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=7)
    a = ap.parse_args()
    print(f"{'c':>7s} {'layer':>5s} {'old (GH) +- bar':>26s} {'old mass':>9s} "
          f"{'new (rotated) +- bar':>30s} {'s':>5s} {'Monte Carlo +- SE':>22s}")
    for c in SKIPS:
        lo, hi = (smi_route_a.q0_gauss_hermite(*o, c=c, beta=1.0) for o in GH_ORDERS)
        t = time.perf_counter()
        F = smi.stability_matrix(skip=c)
        dt = time.perf_counter() - t
        mc = smi_mc_oracles.montecarlo_stability(skip=c, samples=a.samples, inner=a.inner, seed=a.seed)
        for layer in (2, 1):
            k = f"lam{layer}"
            o = _thr(hi[k], abs(hi[k] - lo[k]))
            n = _thr(F[k].value, F[k].error)
            m = _thr(mc[k].value, mc[k].error)
            print(f"{c:7.0e} {layer:5d} {o[0]:14.8f} +- {o[1]:8.1e} {hi['mass']:9.6f} "
                  f"{n[0]:16.11f} +- {n[1]:8.1e} {dt:5.2f} {m[0]:11.5f} +- {m[1]:7.5f}")


if __name__ == "__main__":
    main()
