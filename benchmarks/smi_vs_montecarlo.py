"""Deep tied attention, L = 2, M = 2, c = 1, beta = 1: deterministic quadrature against seeded
Monte Carlo for (1) the stability coefficients at Q = 0, lambda_l = E_y ||Cov[z_l|y] - I||_F^2
(F of THEORY 2.2; plain Monte Carlo as in the literature: inner samples in a box or from the
prior), and (2) the sequential coefficient mu1 = E ||Cov[z_1|y, omega_2] - I||_F^2 on the
layer-2 branch at the sequential root q2* (two orders of the fibre-lattice engine,
numerics.smi_sequential.branch_stats, against Monte Carlo with two inner sizes).  Accuracy is
measured against the refined quadrature.
No assertions on time.  Run: python benchmarks/smi_vs_montecarlo.py [--no-branch]"""

import sys
import time
from pathlib import Path

from aim_sym.numerics import smi_route_a, smi_sequential

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # the Monte Carlo oracles
import smi_mc_oracles  # noqa: E402


def weak_part():
    t = time.perf_counter()
    ref = smi_route_a.q0_gauss_hermite(96, 128, c=1.0, beta=1.0)
    t_ref = time.perf_counter() - t
    rows = []
    for n_h, n_z in ((32, 40), (48, 64), (72, 96)):
        t = time.perf_counter()
        q = smi_route_a.q0_gauss_hermite(n_h, n_z, c=1.0, beta=1.0)
        dt = time.perf_counter() - t
        rows.append((f"quadrature {n_h}x{n_z}", dt, q["lam1"], q["lam2"], None, None))
    for R, K, box in ((1000, 1000, 4.0), (1000, 1000, None), (4000, 2000, None)):
        t = time.perf_counter()
        m = smi_mc_oracles.montecarlo_stability(samples=R, inner=K, seed=1, box=box)
        dt = time.perf_counter() - t
        name = f"MC {R}x{K}" + (f" box {box}" if box else " prior")
        rows.append((name, dt, m["lam1"].value, m["lam2"].value, m["lam1"].error,
                     m["lam2"].error))
    print(f"reference (96x128, {t_ref:.1f}s): lambda_1 = {ref['lam1']:.10f}, "
          f"lambda_2 = {ref['lam2']:.10f}")
    print(f"{'method':28s} {'time[s]':>8s} {'lambda_1':>14s} {'|err1|':>9s} {'SE1':>8s} "
          f"{'lambda_2':>14s} {'|err2|':>9s} {'SE2':>8s}")
    for name, dt, l1, l2, s1, s2 in rows:
        print(f"{name:28s} {dt:8.2f} {l1:14.10f} {abs(l1 - ref['lam1']):9.2e} "
              f"{(s1 or 0):8.1e} {l2:14.10f} {abs(l2 - ref['lam2']):9.2e} {(s2 or 0):8.1e}")


def branch_part(q2=0.974376):
    print(f"\nlayer-2 branch at q2 = {q2}: mu1, K2 and the relative Nishimori residual")
    print(f"{'method':40s} {'time[s]':>8s} {'mu1':>10s} {'SE':>8s} {'K2':>10s} {'SE':>8s} "
          f"{'nishimori':>10s}")
    for tau, dh, dz in smi_sequential.SEQ_ORDERS:
        t = time.perf_counter()
        s = smi_sequential.branch_stats(q2, n_w=tau, dh=dh, dz=dz)
        print(f"{'lattice ' + str((tau, dh, dz)):40s} {time.perf_counter() - t:8.1f} "
              f"{s['mu1']:10.5f} {'':8s} {s['K2']:10.4f} {'':8s} "
              f"{s['nishimori'] / s['K2']:10.1e}")
    for K in (200, 1600):
        t = time.perf_counter()
        m = smi_mc_oracles.montecarlo_branch(q2, samples=4000, inner=K, seed=1)
        print(f"{'MC 4000 x ' + str(K):40s} {time.perf_counter() - t:8.1f} "
              f"{m['mu1'].value:10.5f} {m['mu1'].error:8.4f} {m['K2'].value:10.4f} "
              f"{m['K2'].error:8.4f} {'':10s}")


def main():
    weak_part()
    if "--no-branch" not in sys.argv:
        branch_part()


if __name__ == "__main__":
    main()
