"""The two-layer AIM at skip c < 1 towards small mmse (THEORY 1.6; docs/deep_aim.md section 4,
"Inner rule at c < 1", and section 5, "The branch at c = 0.5"): the inner rule over H1's seen part
("graded", the fixed rule graded towards det A = 0 and reweighted, against "line", the trapezoid
in t = (xi - a)/sqrt(V1) graded along lines towards det A = 0), checked against seeded plain
Monte Carlo of one SE step (``se_step_mc``: truths drawn, posterior means by importance sampling
from N(a, V1 I), no quadrature), and the branch towards perfect recovery with the line rule.

One JSON line per point on stdout.

The map at fixed (V1, V2) (the overlaps q_l = Q0_l - V_l), both rules against the Monte Carlo
(at n and 4 n inner samples, extrapolated in 1/n: its bias is several per cent of E_2 at small V):

    python benchmarks/deep_aim_small_skip.py --map --skip 0.5 --v 0.05,0.015 [--m 7]
        [--mc-samples 20000] [--mc-inner 2000] [--rules line,graded]

The fixed point at alpha (line rule, shared tokens, the cross-overlap term in the bars):

    python benchmarks/deep_aim_small_skip.py --fixed --skip 0.5 --alpha 0.33 --v-init 0.2,0.07

Each call is one to a few minutes on two shared cores (timings are upper bounds).
"""

from __future__ import annotations

import argparse
import json
import math
import time

from aim_sym.numerics import deep_aim_se as ds
from aim_sym.numerics.records import ConvergenceError


def mc_extrapolated(model: ds.DeepAimSE, q1: float, q2: float, *, samples: int, inner: int,
                    seed: int) -> dict[str, list[float]]:
    """E_1, E_2 by plain Monte Carlo (``se_step_mc``) at ``inner`` and 4 ``inner`` importance
    samples per outer point (independent seeds), and the Richardson extrapolation
    (4 E(4 n) - E(n)) / 3: the self-normalised posterior means carry a bias ~ 1/n, which at small V
    (heavy importance weights near det A = 0) reaches several per cent of E_2 at n = 4000."""
    lo = ds.se_step_mc(model, alpha=1.0, q1=q1, q2=q2, samples=samples, inner=inner, seed=seed)
    hi = ds.se_step_mc(model, alpha=1.0, q1=q1, q2=q2, samples=samples, inner=4 * inner,
                       seed=seed + 1)
    out = {}
    for key in ("E1", "E2"):
        out[f"mc_{key}_n"] = [lo[key].value, lo[key].error]
        out[f"mc_{key}_4n"] = [hi[key].value, hi[key].error]
        out[f"mc_{key}"] = [(4 * hi[key].value - lo[key].value) / 3,
                            math.hypot(4 * hi[key].error, lo[key].error) / 3]
    return out


def map_point(skip: float, v: tuple[float, float], *, m: int, mc_samples: int, rules: list[str],
              rho: tuple[float, float] = (0.5, 0.5), seed: int = 0, mc_seed: int = 11,
              mc_inner: int = 2000) -> dict:
    """E_1, E_2 (the SE map's output side) at V = ``v`` by the RQMC engine with each inner rule
    (2^m x 8 points, bars: 2.5 standard errors + the two-step rule difference) and by plain Monte
    Carlo extrapolated in the inner sample count (:func:`mc_extrapolated`, 1 standard error);
    z = (engine - MC) / sqrt((engine standard error)^2 + (rule difference)^2 + MC standard
    error^2), and whether the engine's bar plus 2.5 MC standard errors covers the difference."""
    q1, q2 = 1.0 + rho[0] - v[0], 1.0 + rho[1] - v[1]
    out = {"skip": skip, "rho": list(rho), "V": list(v), "m": m, "mc_samples": mc_samples,
           "mc_inner": [mc_inner, 4 * mc_inner]}
    t0 = time.perf_counter()
    mc = mc_extrapolated(ds.DeepAimSE(skip=skip, rho1=rho[0], rho2=rho[1]), q1, q2,
                         samples=mc_samples, inner=mc_inner, seed=mc_seed)
    out.update(mc)
    out["mc_seconds"] = time.perf_counter() - t0
    for rule in rules:
        model = ds.DeepAimSE(skip=skip, rho1=rho[0], rho2=rho[1], inner=rule)
        t0 = time.perf_counter()
        # measure the graded rule where the engine refuses it (GRADED_V_MIN): lift the guard here
        saved, ds.GRADED_V_MIN = ds.GRADED_V_MIN, 0.0
        try:
            o = ds.output_overlaps(model, q1=q1, q2=q2, m=m, scrambles=8, seed=seed)
        finally:
            ds.GRADED_V_MIN = saved
        out[f"{rule}_seconds"] = time.perf_counter() - t0
        for key in ("E1", "E2"):
            e = o[key]
            se, rd = e.extra["standard_error"], e.extra["rule_error"]
            ref, ref_se = mc[f"mc_{key}"]
            diff = e.value - ref
            out[f"{rule}_{key}"] = {
                "value": e.value, "error": e.error, "standard_error": se, "rule_error": rd,
                "z": diff / math.sqrt(se**2 + rd**2 + ref_se**2),
                "covered": bool(abs(diff) <= e.error + ds.COVERAGE * ref_se)}
        out[f"{rule}_VE_sum"] = v[0] * o["E1"].value + v[1] * o["E2"].value
    return out


def fixed(skip: float, alpha: float, v_init: tuple[float, float], *, m: int,
          rho: tuple[float, float] = (0.5, 0.5), rule: str = "line",
          cross_term: bool = True) -> dict:
    """The fixed point at ``alpha`` from ``v_init`` (``deep_aim_se.fixed_point``), or the
    ConvergenceError it raised."""
    model = ds.DeepAimSE(skip=skip, rho1=rho[0], rho2=rho[1], inner=rule)
    t0 = time.perf_counter()
    try:
        r = ds.fixed_point(model, alpha=alpha, v_init=v_init, m=m, cross_term=cross_term)
    except ConvergenceError as e:
        return {"skip": skip, "alpha": alpha, "rule": rule, "error": str(e),
                "seconds": time.perf_counter() - t0}
    keep = ("alpha", "perfect_recovery", "stable", "jacobian_eigenvalues", "iterations",
            "standard_error", "rule_error", "e_gen", "e_gen_error", "phi", "phi_error",
            "alpha_PR", "last_mmse", "cross_overlap")
    out = {k: r[k] for k in keep if k in r}
    out.update({"skip": skip, "rule": rule, "m": m, "init": list(v_init),
                "mmse": [x["mmse"] for x in r["layers"]],
                "mmse_error": [x["mmse_error"] for x in r["layers"]],
                "q_hat": [x["q_hat"] for x in r["layers"]],
                "seconds": time.perf_counter() - t0})
    if isinstance(out.get("cross_overlap"), dict):
        co = out["cross_overlap"]
        out["cross_overlap"] = {k: co[k] for k in ("term", "loop_gain", "trusted") if k in co}
    return out


def _pair(text: str) -> tuple[float, float]:
    a, b = (float(x) for x in text.split(","))
    return a, b


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--map", action="store_true", help="the map at fixed V, rules against MC")
    p.add_argument("--fixed", action="store_true", help="one fixed point (line rule)")
    p.add_argument("--skip", type=float, default=0.5)
    p.add_argument("--v", type=_pair, help="V1,V2 for --map")
    p.add_argument("--alpha", type=float)
    p.add_argument("--v-init", type=_pair, default=(1.0, 1.0))
    p.add_argument("--m", type=int, default=8)
    p.add_argument("--mc-samples", type=int, default=20000)
    p.add_argument("--mc-inner", type=int, default=2000)
    p.add_argument("--rules", default="line,graded")
    p.add_argument("--rule", default="line")
    p.add_argument("--no-cross-term", action="store_true")
    a = p.parse_args()
    if a.map:
        print(json.dumps(map_point(a.skip, a.v, m=a.m, mc_samples=a.mc_samples,
                                   rules=a.rules.split(","), mc_inner=a.mc_inner)), flush=True)
    if a.fixed:
        print(json.dumps(fixed(a.skip, a.alpha, a.v_init, m=a.m, rule=a.rule,
                               cross_term=not a.no_cross_term)), flush=True)


if __name__ == "__main__":
    main()
