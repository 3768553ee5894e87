"""Golden outputs of the L = 2 SMI engines at small, fast orders (issue 14): the key numbers of
numerics/smi.py and the modules under it, printed as JSON, so that a refactoring can be checked
to keep every number (bit-identical or within 1e-12 relative, compared by ``--compare``).

Run: python benchmarks/smi_golden.py > before.json; (edit); python benchmarks/smi_golden.py
--compare before.json.  The script imports the checkout it sits in (its parent folder goes first
on the import path), not whichever aim_sym is installed: run from another clone, it tests that
clone's code.  docs/data/smi_golden.json is the output before the 2026-11-25 merges of
the L = 2 modules (smi_oracles into smi, the rotated rules, the Q = 0 sums into smi_route_a);
after them every case agreed to 1e-10 relative (the differences are rounding: a cross term of
3e-17 and a Newton residual of 5e-8 move in their last digits).  learned_stats, solve_branch and
learned_point changed by design on 2026-11-26 (the fibre-lattice engine smi_learned replaced by
the joint-branch kernel; the comparison against its bars is in benchmarks/RESULTS.md).
"""

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's aim_sym
from aim_sym.numerics import (  # noqa: E402
    smi,
    smi_amp,
    smi_branches,
    smi_fibre,
    smi_general,
    smi_route_a,
    smi_sequential,
    smi_weak,
)

from aim_sym import smi_channels as sc  # noqa: E402
from aim_sym import smi_general_api as api  # noqa: E402


def _plain(x):
    """JSON-ready floats (NaN/inf as strings) from nested records."""
    if isinstance(x, dict):
        return {str(k): _plain(v) for k, v in x.items() if k not in ("detail", "seconds", "method")}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if isinstance(x, np.ndarray):
        return _plain(x.tolist())
    if isinstance(x, (bool, np.bool_)):
        return bool(x)
    if isinstance(x, (int, np.integer)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        v = float(x)
        return v if math.isfinite(v) else repr(v)
    if hasattr(x, "value") and hasattr(x, "error"):
        return [_plain(x.value), _plain(x.error)]
    return x if isinstance(x, (str, type(None))) else repr(x)


def cases():
    """Name -> thunk of every golden number (each fast at these orders)."""
    cc = api.compiled(api.builtin_channel("noisy-attention", noise=0.1))
    rng = np.random.default_rng(5)
    data = smi_amp.generate(alpha=0.5, dim=60, rng=rng)
    omega = 0.3 * rng.standard_normal((data["h_obs"].shape[0], 2, 2))
    V = np.array([[0.8, 0.15], [0.15, 0.5]])
    return {
        "weak_gh": lambda: smi_route_a.q0_gauss_hermite(24, 32, c=1.0, beta=1.0),
        "stability_matrix_c1": lambda: smi.stability_matrix(skip=1.0, beta=1.0, order=24),
        "stability_matrix_c0.05": lambda: smi.stability_matrix(skip=0.05, beta=2.0, order=24),
        "weak_thresholds_c1": lambda: smi.weak_thresholds(skip=1.0, order=24, sequential=False),
        "route_a_q0.3": lambda: smi_route_a.stats(0.0, 0.3, c=1.0, beta=1.0, n_w1=2, n_w2=8,
                                                  n_h=16, n_z=20, want_psi=True),
        "route_a_graded": lambda: smi_route_a.stats(0.2, 0.5, c=0.7, beta=1.3, n_w1=6,
                                                    n_w2=(6, 8), n_h=12, n_z=12),
        "nishimori_stationarity": lambda: smi.nishimori_stationarity(0.4, order=(8, 16, 16)),
        "psi_zero": lambda: smi_branches.psi_zero(1.0, 1.0),
        "branch_stats_coarse": lambda: smi_sequential.branch_stats(
            0.95, c=1.0, beta=1.0, n_w=0.5, dh=2.8, dz=0.25, workers=1),
        "branch_stats_f64": lambda: smi_sequential.branch_stats(
            0.9, c=0.8, beta=1.2, n_w=0.6, dh=3.0, dz=0.3, workers=1, single=False),
        "branch_point_L3": lambda: smi_sequential.branch_point(
            0.98, (1.0, 4.0, 1.0, 1.0, 4.0), layers=3, workers=1),
        "sequential_threshold_d1": lambda: smi_sequential.sequential_threshold(digits=1,
                                                                               workers=1),
        "layer2_point_c1": lambda: smi.layer2_point(
            alpha=0.6, skip=1.0, orders=(smi_sequential.SEQ_LADDER[0],
                                         smi_sequential.SEQ_LADDER[1]), workers=1),
        "layer2_point_c0.5": lambda: smi.layer2_point(
            alpha=0.5, skip=0.5, orders=(smi_sequential.SEQ_LADDER[0],
                                         smi_sequential.SEQ_LADDER[1]), workers=1),
        "layer2_point_small": lambda: smi.layer2_point(alpha=0.3, skip=1.0),
        "layer2_point_q0": lambda: smi.layer2_point(alpha=0.1, skip=1.0),
        "sequential_thresholds_L2": lambda: smi_sequential.sequential_thresholds(
            layers=2, orders=((0.6, 3.0, 0.3, 0.3, 6.0), (0.5, 2.8, 0.25, 0.25, 6.0)),
            workers=1),
        "egen": lambda: smi_branches.egen_estimate(0.2, 0.9, skip=1.0, beta=1.0,
                                                   dq=(0.01, 0.02),
                                                   rule=dict(m=8, replicates=4, seed=3)),
        "recovery": lambda: smi_branches.perfect_recovery(orders=((6, 10), (8, 14))),
        "learned_stats": lambda: {k: v for k, v in smi_branches.learned_stats(
            [(0.3, 0.9)], rule=(7, 8, 4, 0)).items() if k in ("value", "se", "bias")},
        "cross_block": lambda: smi.cross_block_montecarlo(samples=40, inner=200),
        "zout_mp": lambda: smi.zout_mp((0.7, -0.4), (0.3, -0.2, 0.5, 0.1), (0.8, 0.6),
                                       [(a, b, 1 / 9) for a in (-1.0, 0.0, 1.0)
                                        for b in (-1.0, 0.5, 1.5)]),
        "graded_omega_rule": lambda: [float(np.sum(w * f)) for w, f in [
            (r[2], r[0] ** 2 + r[1] ** 4) for r in [smi_fibre.graded_omega_rule((8, 12), 0.7)]]],
        "rotated_rules": lambda: [float(np.sum(r[2] * np.cos(r[0]) * r[1] ** 2)) for r in (
            smi_fibre.rotated_z1_rule(16, 0.3, 0.2, 1.0), smi_fibre.rotated_h_rule(16, 0.3, 0.2))],
        "gauss_newton_mode": lambda: smi_fibre.gauss_newton_mode(
            np.array([0.1, -0.4]), np.array([0.3, 0.2]), np.array([0.5, 1.2]),
            np.array([-0.2, 0.4]), m1=(0.0, 0.1), v1=0.7, m2=(0.2, -0.1), r=0.1, v2=0.05,
            c=1.0, beta=1.0, iters=6),
        "general_F_q0": lambda: smi_general.stability(cc, orders=smi_general.Orders(inner_gh=12)),
        "general_sign_egg": lambda: smi_general.e_gg_estimate(
            api.compiled(sc.sign_product()), np.array([[0.5]]),
            orders=smi_general.Orders(inner_log2=9, outer_gh=6, replicates=3)),
        "amp_gout": lambda: smi_amp.gout(data["h_obs"], omega, V, order=12)[:2],
        "amp_gout_mixture": lambda: smi_amp.gout(data["h_obs"], omega,
                                                 np.array([[0.3, 0.05], [0.05, 0.02]]),
                                                 order=10, adaptive=True)[:2],
        "general_sign_fixed_point": lambda: smi_general.se_fixed_point(
            api.compiled(sc.sign_product()), alpha=2.5, Q0=np.array([[0.5]]),
            orders=smi_general.Orders(inner_log2=8, outer_gh=6, replicates=2), tol=1e-5),
        "general_weak": lambda: smi_general.weak_thresholds(cc, orders=smi_general.Orders(
            inner_gh=10))["all"],
        "general_nishimori": lambda: smi_general.nishimori(
            cc, Q=np.array([[0.4]]), omega=np.array([0.3, -0.2]),
            orders=smi_general.Orders(inner_gh=16)),
        "general_mc": lambda: smi_general.stability_monte_carlo(cc, samples=200, seed=3,
                                                                n_grid=31),
        "solve_branch": lambda: {k: v for k, v in smi_branches.solve_branch(
            alpha=0.85, init=(0.4, 0.98), rule=(8, 9, 4, 0)).items()
            if k not in ("cpu_seconds", "rule", "method")},
        "learned_point": lambda: smi_branches.learned_point(
            alpha=0.85, init=(0.4, 0.98), rule=(8, 9, 4, 0)),
        "recovery_point": lambda: smi.fixed_point(alpha=1.5),
        "layer2_point_default": lambda: smi.layer2_point(alpha=0.6, workers=1),
        "run_checks": lambda: smi.run_checks(),
        "run_smi_amp": lambda: {k: v for k, v in smi_amp.run_smi_amp(
            alpha=0.5, dim=40, seeds=2, max_iter=3, order=10, se=False).items()
            if k not in ("per_seed",)},
        "weak_depth_qmc": lambda: smi_weak.stability(layers=3, tokens=2, rule="qmc", log2n=10,
                                                     replicates=4, seed=1),
        "weak_depth_ray": lambda: smi_weak.stability(layers=3, tokens=2, rule="ray", log2n=8,
                                                     replicates=4, seed=2),
        "weak_depth_m3_ray": lambda: smi_weak.stability(layers=2, tokens=3, rule="ray", log2n=9,
                                                        replicates=4, seed=3),
        "weak_depth_l4_skip": lambda: smi_weak.stability(layers=4, tokens=2, rule="qmc", log2n=9,
                                                         replicates=4, seed=5, skip=1.5, beta=0.7),
        "amp_run": lambda: [r["Q"] + r["Q_raw"] for r in smi_amp.amp_run(
            data, max_iter=3, order=10, rng=np.random.default_rng(1))["history"]],
    }


def rel_diff(a, b, path=""):
    """Largest relative difference between two golden trees and where."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = (0.0, path)
        for k in set(a) | set(b):
            if k not in a or k not in b:
                return (math.inf, f"{path}.{k} missing")
            out = max(out, rel_diff(a[k], b[k], f"{path}.{k}"))
        return out
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return (math.inf, f"{path} length")
        return max([rel_diff(x, y, f"{path}[{i}]") for i, (x, y) in enumerate(zip(a, b))],
                   default=(0.0, path))
    if isinstance(a, float) and isinstance(b, float):
        d = abs(a - b) / max(abs(a), abs(b), 1e-300) if a != b else 0.0
        return (d, path)
    return (0.0 if a == b else math.inf, path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--compare", help="golden JSON to compare with")
    ap.add_argument("--only", nargs="*", help="case names")
    a = ap.parse_args()
    out = {}
    for name, f in cases().items():
        if a.only and name not in a.only:
            continue
        t = time.perf_counter()
        out[name] = _plain(f())
        print(f"{name}: {time.perf_counter() - t:.1f} s", file=sys.stderr)
    if a.compare:
        ref = json.load(open(a.compare))
        worst = 0.0
        for k, v in out.items():
            d, where = rel_diff(ref[k], v, k)
            worst = max(worst, d)
            print(f"{k:28s} max rel diff {d:.2e} {where if d else ''}")
        print(f"worst {worst:.2e}: {'OK' if worst <= 1e-12 else 'DIFFERS'}")
    else:
        print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
