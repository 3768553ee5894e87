"""Time to accuracy for the AIM hardmax SE curve (T = 2, rho = 0.5, 32 alphas): engine vs a
plain Monte Carlo SE, side by side (issue: measured speed).

The engine solves every fixed point at two quadrature levels (error = their difference). The
Monte Carlo SE (as in the literature) estimates q_hat by sampling inside a damped iteration; its
fixed-point error at n samples per step is measured over seeds at one alpha, and the samples
needed for a target error eps follow the measured 1/sqrt(n) law: n(eps) = n0 (s0 / eps)^2. The
Monte Carlo time to 1e-8 is therefore an extrapolation, stated as such.

    python benchmarks/aim_curve_time_to_accuracy.py [--out results.json]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
from aim_se_vs_montecarlo import mc_fixed_point  # benchmarks/ is on sys.path when run

from aim_sym.channels import hardmax
from aim_sym.compiled import compile_channel
from numerics import aim_se


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None)
    ap.add_argument("--seeds", type=int, default=6)
    a = ap.parse_args()
    rho = 0.5
    alphas = np.linspace(0.01, 0.32, 32)
    cc = compile_channel(hardmax(2))
    aim_se.fixed_points(cc, alpha=0.1, rho=rho)  # warm caches (compilation is not timed)
    engine = {}
    for eps, tol in ((1e-3, 1e-4), (1e-8, 1e-10)):
        t0 = time.perf_counter()
        rows = aim_se.curve(cc, alphas=alphas, rho=rho, tol=tol)
        engine[eps] = (time.perf_counter() - t0, max(r["error"] for r in rows))

    a_mid = 0.16
    ref = aim_se.bayes_optimal(aim_se.fixed_points(cc, alpha=a_mid, rho=rho)).mmse
    n0 = 4000
    t0 = time.perf_counter()
    runs = [mc_fixed_point(cc, alpha=a_mid, rho=rho, n=n0, iters=40, seed=s)
            for s in range(a.seeds)]
    t_run = (time.perf_counter() - t0) / a.seeds
    s0 = float(np.sqrt(np.mean([(r - ref) ** 2 for r in runs])))
    res = {"engine": {f"time_to_{e:g}_s": t for e, (t, _) in engine.items()},
           "monte_carlo": {"n0": n0, "rms_error_at_n0": s0, "time_per_point_at_n0_s": t_run}}
    for eps, (t, err) in engine.items():
        res["engine"][f"max_error_at_{eps:g}"] = err
        print(f"engine to {eps:g}: 32-point hardmax curve in {t:.2f} s, max refinement error "
              f"{err:.1e}")
    for eps in (1e-3, 1e-8):
        t_engine = engine[eps][0]
        n = n0 * (s0 / eps) ** 2
        t_mc = 32 * t_run * n / n0
        res["monte_carlo"][f"time_to_{eps:g}_s"] = t_mc
        res[f"speedup_at_{eps:g}"] = t_mc / t_engine
        tag = "measured scaling" if eps >= 1e-3 else "extrapolated by 1/sqrt(n)"
        print(f"Monte Carlo to {eps:g}: {n:.2e} samples per step, 32 points in {t_mc:.3g} s "
              f"({tag}); engine is {t_mc / t_engine:.3g} x faster")
    if a.out:
        with open(a.out, "w") as fh:
            json.dump(res, fh, indent=2)


if __name__ == "__main__":
    main()
