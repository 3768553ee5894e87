"""Hardmax at T = 3: the output side E(q, V) and the traced state evolution at finite rho
(THEORY 1.1, 1.4, 1.5), each value with its error bar and an independent route, side by side
with plain Monte Carlo of the same quantity.

1. E(q, V) at several r = q / V: the tensor Gauss-Hermite route (three rules, error from the
   last difference and its geometric tail), the Smolyak sparse-grid route (a different omega
   rule), and seeded Monte Carlo (its standard error), with wall times.
2. The small-width check: E(0, 1) = S of hardmax.py (alpha_bar_c = 1 / (2 S)) and the slope
   d E_hat / dr at r = 0, by a difference in r and by the heat-kernel identity
   d E_hat / dr (0) = tr(Sigma Hess F(0)) / 2 (finite differences of F at omega = 0); kappa =
   1 + E_hat'(0) / S is the slope of the small-width E(q, 1 - q) = S (1 + kappa q + ...).
3. The SE traced by V = mmse at rho = ``--rho``: alpha, mmse, e_gen, phi with errors and the
   time per point.
4. T = 2: the Bayes-optimal fixed point at 32 alphas in [0.01, 3] (rho = ``--rho``) on the
   wall-adapted rule, timed.
5. T = 3 table: E_hat(r) on 33 Chebyshev nodes in s = 1 / sqrt(r) (the shipped table, or
   ``--table-nodes`` computed into the resumable ``--table-json``: ~41 minutes of CPU for 33,
   in pieces of at most ~2 minutes of CPU each),
   then the tabulated SE at 32 alphas in [0.01, 3] (timed), E_hat between nodes against the
   tensor rule, and the direct fixed-point search at alpha = 0.03.
6. Large r: the leading law E_hat(r) = c0 / sqrt(r) + O(1 / r) against the T = 2 wall-adapted
   rule (r up to 1e6) and T = 3 seeded Monte Carlo (``--mc-large`` draws at r = 50, 500, 5000).

    OPENBLAS_NUM_THREADS=1 python benchmarks/hardmax_se.py [--points 8] [--mc 400000]
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # one BLAS thread: shared cores thrash
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
from aim_sym.numerics import hardmax  # noqa: E402
from aim_sym.numerics import hardmax_se as hs  # noqa: E402


def output_side(points, mc: int) -> list[dict]:
    rows = []
    for q, V in points:
        t0 = time.perf_counter()
        e = hs.output_e(T=3, q=q, V=V)
        t_e = time.perf_counter() - t0
        t0 = time.perf_counter()
        sg = hs.output_e_sparse(T=3, q=q, V=V, level=7)
        t_sg = time.perf_counter() - t0
        t0 = time.perf_counter()
        m = hs.monte_carlo_e(T=3, q=q, V=V, samples=mc, seed=2026)
        t_mc = time.perf_counter() - t0
        rows.append({"q": q, "V": V, "r": q / V, "E": e.value, "E_error": e.error,
                     "levels": e.extra["levels"], "seconds": t_e, "psi_out": e.extra["psi_out"],
                     "sparse": sg.value, "sparse_error": sg.error, "sparse_seconds": t_sg,
                     "mc": m.value, "mc_error": m.error, "mc_seconds": t_mc,
                     "mc_dev_sigma": (e.value - m.value) / m.error})
        print(json.dumps(rows[-1]), flush=True)
    return rows


def small_width() -> dict:
    S = hardmax.weak_threshold(3)
    e0 = hs.output_e(T=3, q=0.0, V=1.0, nodes=160)
    # slope in r: E_hat(r) on the tensor rule at two small r, Richardson
    vals = {r: hs.output_e(T=3, q=r, V=1.0) for r in (0.01, 0.02)}
    d1 = (vals[0.01].value - e0.value) / 0.01
    d2 = (vals[0.02].value - e0.value) / 0.02
    slope_r = 2 * d1 - d2
    slope_err = abs(d1 - d2) + 2 * (vals[0.01].error / 0.01 + vals[0.02].error / 0.02)
    # heat kernel: d/dr E_{N(0, r Sigma)} F = tr(Sigma_shift-free Hess F(0)) / 2
    A, _ = hs._shift_free_basis(3)
    h = 0.02
    lap = []
    for hh in (h, h / 2):
        acc = 0.0
        f0 = hs._integrands(3, np.zeros((1, 6)), 160)[0][0]
        for k in range(A.shape[1]):
            d = hh * A[:, k]
            fp = hs._integrands(3, d[None, :], 160)[0][0]
            fm = hs._integrands(3, -d[None, :], 160)[0][0]
            acc += (fp - 2 * f0 + fm) / hh**2
        lap.append(acc / 2)
    heat = (4 * lap[1] - lap[0]) / 3
    return {"S_recursion": S.extra["S"], "S_error": S.error / (2 * S.value**2),
            "E_0_1": e0.value, "E_0_1_error": e0.error,
            "alpha_bar_c": S.value, "alpha_bar_c_error": S.error,
            "slope_dE_dr": slope_r, "slope_error": slope_err,
            "slope_heat_kernel": heat, "slope_heat_kernel_error": abs(lap[1] - lap[0]),
            # small width (Q0 = 1): E(q, 1 - q) = E_hat(q / (1 - q)) / (1 - q) = S (1 + kappa q)
            "kappa": 1.0 + heat / e0.value}


def curve_t2(rho: float) -> dict:
    t0 = time.perf_counter()
    rows = hs.se_curve_fixed_points(T=2, rho=rho, alphas=np.geomspace(0.01, 3.0, 32))
    out = {"seconds": time.perf_counter() - t0,
           "max_error": max(r["error"] for r in rows),
           "rows": [{k: r[k] for k in ("alpha", "mmse", "error", "q", "e_gen", "phi",
                                       "n_fixed_points", "seconds")} for r in rows]}
    for r in out["rows"]:
        print(json.dumps(r), flush=True)
    print(f"T = 2 curve: 32 alphas in {out['seconds']:.1f} s, max error {out['max_error']:.2g}",
          flush=True)
    return out


def table_nodes(nodes: int, path: str | None) -> list[list[float]]:
    """The T = 3 table's node rows, as ``hs.table_node`` computes them, resumable in pieces: each
    node row (``node:r``) and each chamber-rule level (``c:r:step:sweep_factor``, ~15-110 s of
    CPU each) is written to the JSON file ``path`` when done; entries already there are reused,
    so a run can be stopped and restarted (or several run over disjoint parts)."""
    sk = 0.75 * (1 + np.cos(np.pi * np.arange(nodes - 1) / (nodes - 1)))
    done = {}
    if path and os.path.exists(path):
        with open(path) as fh:
            done = json.load(fh)

    def cached(key, compute):
        if key not in done:
            t0 = time.process_time()
            done[key] = list(compute())
            print(json.dumps({"piece": key, "value": done[key],
                              "cpu_seconds": time.process_time() - t0}), flush=True)
            if path:
                with open(path, "w") as fh:
                    json.dump(done, fh, indent=1)
        return done[key]

    def chamber_row(r):
        steps = hs.chamber_steps(r)
        levels = [cached(f"c:{r!r}:{h!r}:1.0", lambda h=h: hs._t3_adapted_level(r, h))
                  for h in steps]
        sweep = cached(f"c:{r!r}:{steps[0]!r}:1.5",
                       lambda: hs._t3_adapted_level(r, steps[0], sweep_factor=1.5))
        try:
            return hs._chamber_combine(levels, sweep, steps, r)
        except hs.ConvergenceError:  # as hs.table_node: the tensor rule two levels further
            if r > hs.T3_TABLE_FALLBACK_MAX:
                raise
            return hs._tensor_node(r, shift=hs.T3_TABLE_TENSOR_SHIFT + 2)

    rows = []
    for s in sk:
        r = float(1 / s ** 2)
        if r <= hs.T3_TABLE_TENSOR_MAX:
            rows.append(cached(f"node:{r!r}", lambda r=r: hs._tensor_node(r)))
        else:
            rows.append(cached(f"node:{r!r}", lambda r=r: chamber_row(r)))
    return rows


def curve_t3_table(rho: float, nodes: int, path: str | None, checks: bool = True) -> dict:
    """The tabulated T = 3 curve at 32 alphas: the shipped table (``nodes`` = its size and no
    ``path``) or one computed here; E_hat between nodes against the direct rules, and the
    direct fixed-point search at alpha = 0.03."""
    t0 = time.perf_counter()
    if nodes == len(hs.T3_TABLE_NODES) + 1 and path is None:
        tab = hs.t3_table()
    else:
        tab = hs.e_hat_table(T=3, nodes=nodes, node_values=table_nodes(nodes, path))
    t_table = time.perf_counter() - t0
    t0 = time.perf_counter()
    rows = hs.se_curve_tabulated(rho=rho, alphas=np.geomspace(0.01, 3.0, 32), table=tab)
    t_curve = time.perf_counter() - t0
    keys = ("alpha", "mmse", "error", "r", "E", "E_error", "phi", "n_fixed_points", "stable")
    out = {"table_seconds": t_table, "curve_seconds": t_curve,
           "node_values": tab["node_values"].tolist(), "r_nodes": tab["r_nodes"].tolist(),
           "rows": [{k: r[k] for k in keys} for r in rows]}
    for r in out["rows"]:
        print(json.dumps(r, default=float), flush=True)
    print(f"table {t_table:.2f} s, curve {t_curve:.2f} s, largest mmse bar "
          f"{max(r['error'] for r in rows):.2g}", flush=True)
    if not checks:
        return out
    out["between_nodes"] = []
    for r in (0.75, 1.4):
        d = hs.output_e(T=3, q=r, V=1.0)
        out["between_nodes"].append({"r": r, "table": float(tab["value"](r)),
                                     "table_error": float(tab["error"](r)),
                                     "direct": d.value, "direct_error": d.error})
        print(json.dumps(out["between_nodes"][-1]), flush=True)
    direct = hs.se_fixed_points(T=3, alpha=0.03, rho=rho)
    tabbed = hs.se_curve_tabulated(rho=rho, alphas=[0.03], table=tab)[0]
    out["check_alpha_0.03"] = {"direct": direct[0]["mmse"], "direct_error": direct[0]["error"],
                               "table": tabbed["mmse"], "table_error": tabbed["error"]}
    print(json.dumps(out["check_alpha_0.03"]), flush=True)
    return out


def large_r(mc: int) -> dict:
    c0 = {T: hs.e_hat_leading(T) for T in (2, 3)}
    out = {"kappa": hs.hyperplane_kappa(), "c0": c0, "t2": [], "t3": []}
    for r in (2.0, 10.0, 100.0, 1e3, 1e4, 1e5, 1e6):
        e = hs.output_e_t2_adapted(q=r, V=1.0)
        G = e.value * math.sqrt(r)
        out["t2"].append({"r": r, "E_hat": e.value, "error": e.error, "sqrt_r_E_hat": G,
                          "d": (G - c0[2]) * math.sqrt(r), "seconds": e.extra["seconds"]})
        print(json.dumps(out["t2"][-1]), flush=True)
    for r in (50.0, 500.0, 5000.0):
        t0 = time.perf_counter()
        m = hs.monte_carlo_e(T=3, q=r, V=1.0, samples=mc, seed=2026)
        G = m.value * math.sqrt(r)
        out["t3"].append({"r": r, "mc": m.value, "mc_error": m.error, "sqrt_r_E_hat": G,
                          "sqrt_r_error": m.error * math.sqrt(r),
                          "dev_sigma": (G - c0[3]) / (m.error * math.sqrt(r)),
                          "seconds": time.perf_counter() - t0})
        print(json.dumps(out["t3"][-1]), flush=True)
    return out


def curve(rho: float, points: int) -> list[dict]:
    Q0 = 1.0 + rho
    v_min = Q0 / (1 + hs.max_ratio(3))
    mmses = np.linspace(0.99, v_min * 1.0001, points)
    t0 = time.perf_counter()
    rows = hs.se_curve_traced(T=3, rho=rho, mmses=mmses)
    for r in rows:
        print(json.dumps(r), flush=True)
    print(f"curve: {points} points in {time.perf_counter() - t0:.1f} s", flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", type=int, default=8)
    ap.add_argument("--rho", type=float, default=0.5)
    ap.add_argument("--mc", type=int, default=400_000)
    ap.add_argument("--mc-large", type=int, default=40_000)
    ap.add_argument("--table-nodes", type=int, default=33)
    ap.add_argument("--table-json", default=None,
                    help="compute the T = 3 table's nodes here (resumable JSON) instead of "
                    "using the shipped table")
    ap.add_argument("--out", default=None)
    ap.add_argument("--skip", default="",
                    help="comma list of sections to skip: "
                    "output,small,curve,curve2,table3,table3checks,large")
    a = ap.parse_args()
    skip = set(a.skip.split(","))
    res = {}
    if "output" not in skip:
        res["output_side"] = output_side([(0.25, 1.0), (0.5, 1.0), (0.75, 0.75), (1.0, 0.5)],
                                         a.mc)
    if "small" not in skip:
        res["small_width"] = small_width()
        print(json.dumps(res["small_width"]), flush=True)
    if "curve" not in skip:
        res["curve"] = curve(a.rho, a.points)
    if "curve2" not in skip:
        res["curve_t2"] = curve_t2(a.rho)
    if "table3" not in skip:
        res["curve_t3_table"] = curve_t3_table(a.rho, a.table_nodes, a.table_json,
                                               checks="table3checks" not in skip)
    if "large" not in skip:
        res["large_r"] = large_r(a.mc_large)
    if a.out:
        with open(a.out, "w") as fh:
            json.dump(res, fh, indent=1, default=float)
    print("done", math.isfinite(0.0))


if __name__ == "__main__":
    main()
