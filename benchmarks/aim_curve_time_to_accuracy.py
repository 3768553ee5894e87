"""Time to accuracy for the AIM hardmax SE curve (T = 2, rho = 0.5, 32 alphas): engine vs a
plain Monte Carlo SE, side by side (issue: measured speed).

Engine: ``aim_curve.curve`` (alpha(Delta) traced once for all alphas, roots interpolated or
Newton-polished; each point's error from two quadrature levels, two interpolation orders and
the prior's two orders), timed cold (the prior's and the quadrature's caches are cleared before
each run; compilation is not timed), median of ``--repeats`` runs; wall and CPU time of this
process (the CPU-time ratio is the one the machine's load disturbs least). The per-alpha route (a V scan
and Brent's method at each alpha) is timed once for comparison, and checks the engine's curves
at all 32 alphas (independent route, tol 1e-11).

Monte Carlo SE (as in the literature): q_hat estimated by sampling inside a damped iteration;
its fixed-point rms error at n samples per step is measured over seeds at one alpha, and the
samples needed for a target error eps follow the measured 1/sqrt(n) law: n(eps) = n0 (s0/eps)^2.
The Monte Carlo time to 1e-8 is therefore an extrapolation, stated as such.

    python benchmarks/aim_curve_time_to_accuracy.py [--out results.json]
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np
from aim_se_vs_montecarlo import mc_fixed_point  # benchmarks/ is on sys.path when run
from aim_sym.numerics import aim_curve, aim_se, gauss, wishart

from aim_sym.channels import hardmax
from aim_sym.compiled import compile_channel


def _cold() -> None:
    for f in (wishart._integrals_f, wishart._spectrum_f, wishart._nodes_f, gauss.sinh_rule):
        f.cache_clear()


def _timed(fn, repeats: int):
    """Median wall time, the wall times, the median CPU time of this process, the result."""
    times, cpu, out = [], [], None
    for _ in range(repeats):
        _cold()
        t0, c0 = time.perf_counter(), time.process_time()
        out = fn()
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return float(np.median(times)), times, float(np.median(cpu)), out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None)
    ap.add_argument("--seeds", type=int, default=6)
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()
    load0 = os.getloadavg()
    rho = 0.5
    alphas = np.linspace(0.01, 0.32, 32)
    cc = compile_channel(hardmax(2))
    aim_se.fixed_points(cc, alpha=0.1, rho=rho, tol=1e-4)  # compile / import (not timed)

    engine, per_alpha = {}, {}
    for eps in (1e-3, 1e-8):
        med, times, cpu, rows = _timed(
            lambda eps=eps: aim_curve.curve(cc, alphas=alphas, rho=rho, tol=eps), a.repeats)
        engine[eps] = {"time_s": med, "runs_s": times, "cpu_s": cpu, "rows": rows,
                       "max_error": max(r["error"] for r in rows)}
        # the former route (per-alpha V scan), tol 10x below eps as it was benchmarked before
        t, _, _, rows_pa = _timed(lambda eps=eps: aim_curve.curve(cc, alphas=alphas, rho=rho, tol=eps / 10,
                                                            method="per-alpha"), 1)
        per_alpha[eps] = {"time_s": t, "max_error": max(r["error"] for r in rows_pa)}
    ref = aim_curve.curve(cc, alphas=alphas, rho=rho, tol=1e-11, method="per-alpha")
    for e in engine.values():
        dev = [abs(r["mmse"] - rr["mmse"]) for r, rr in zip(e["rows"], ref)]
        e["max_deviation_from_per_alpha"] = float(max(dev))
        e["max_deviation_over_error"] = float(max(d / (r["error"] + rr["error"])
                                                  for d, r, rr in zip(dev, e["rows"], ref)))
        e["within_error"] = e["max_deviation_over_error"] <= 1

    a_mid = 0.16
    mmse_ref = aim_se.bayes_optimal(aim_se.fixed_points(cc, alpha=a_mid, rho=rho)).mmse
    n0 = 4000
    t0, c0 = time.perf_counter(), time.process_time()
    runs = [mc_fixed_point(cc, alpha=a_mid, rho=rho, n=n0, iters=40, seed=s)
            for s in range(a.seeds)]
    t_run = (time.perf_counter() - t0) / a.seeds
    c_run = (time.process_time() - c0) / a.seeds
    s0 = float(np.sqrt(np.mean([(r - mmse_ref) ** 2 for r in runs])))
    load1 = os.getloadavg()

    res = {"load_average_start": load0, "load_average_end": load1, "cpus": os.cpu_count(),
           "monte_carlo": {"n0": n0, "rms_error_at_n0": s0, "time_per_point_at_n0_s": t_run,
                           "cpu_per_point_at_n0_s": c_run},
           "engine": {}, "per_alpha_route": {}}
    print(f"hardmax T=2, rho={rho}, 32 alphas {alphas[0]:g}..{alphas[-1]:g}; load average "
          f"{load0[0]:.1f} (start) {load1[0]:.1f} (end) on {os.cpu_count()} cpus")
    for eps in (1e-3, 1e-8):
        e = engine[eps]
        n = n0 * (s0 / eps) ** 2
        t_mc = len(alphas) * t_run * n / n0
        tag = "measured scaling" if eps >= 1e-3 else "extrapolated by 1/sqrt(n)"
        res["engine"][f"{eps:g}"] = {k: v for k, v in e.items() if k != "rows"}
        res["per_alpha_route"][f"{eps:g}"] = per_alpha[eps]
        res["monte_carlo"][f"time_to_{eps:g}_s"] = t_mc
        res["monte_carlo"][f"samples_per_step_{eps:g}"] = n
        res[f"speedup_at_{eps:g}"] = t_mc / e["time_s"]
        res[f"cpu_speedup_at_{eps:g}"] = t_mc * (c_run / t_run) / e["cpu_s"]
        print(f"eps={eps:g}: engine {e['time_s']:.3f} s (median of {a.repeats}; runs "
              f"{', '.join(f'{x:.3f}' for x in e['runs_s'])}), max reported error "
              f"{e['max_error']:.1e}, max |deviation| from the per-alpha route at tol 1e-11 "
              f"{e['max_deviation_from_per_alpha']:.1e}, at most {e['max_deviation_over_error']:.2f} of "
              f"the reported errors")
        print(f"         per-alpha route (tol {eps / 10:g}) {per_alpha[eps]['time_s']:.2f} s; "
              f"Monte Carlo {n:.2e} samples per step, 32 points in {t_mc:.3g} s ({tag}); "
              f"engine is {t_mc / e['time_s']:.3g} x faster than Monte Carlo (CPU time: "
              f"engine {e['cpu_s']:.3f} s, ratio {res[f'cpu_speedup_at_{eps:g}']:.3g} x)")
    print(f"Monte Carlo: rms error {s0:.2e} at n0 = {n0} over {a.seeds} seeds at alpha = {a_mid}, "
          f"{t_run:.3f} s per point (40 damped steps; CPU {c_run:.3f} s)")
    if a.out:
        with open(a.out, "w") as fh:
            json.dump(res, fh, indent=2)


if __name__ == "__main__":
    main()
