"""Deep AIM (two tied layers, T = 2) state evolution at finite width: fixed points from several
initial conditions, with time per fixed point, and one SE step against plain Monte Carlo.

For each alpha: the fixed points from (mmse_1, mmse_2) = (1, 1) (uninformed, q_l = rho_l),
(1e-3, 1e-3) (informed) and (1, 1e-3) (layer 2 informed); then, at the uninformed fixed point's overlaps,
E_l = E|g_l|^2 by randomised QMC (numerics.deep_aim_se.output_overlaps) and by seeded plain
Monte Carlo with importance-sampled posterior means (se_step_mc), with their z-score.

    python benchmarks/deep_aim_se.py [--skip C] [--rho R1,R2] [--alphas A,B,..] [--m M]
                                     [--out results.json]
"""

from __future__ import annotations

import argparse
import json
import time

from aim_sym.numerics import deep_aim_se as ds


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--skip", type=float, default=1.0)
    p.add_argument("--rho", default="0.5,0.5")
    p.add_argument("--alphas", default="0.1,0.5,1")
    p.add_argument("--m", type=int, default=9, help="2^m Sobol points per scramble")
    p.add_argument("--scrambles", type=int, default=8)
    p.add_argument("--mc-samples", type=int, default=20000)
    p.add_argument("--out", default=None)
    a = p.parse_args()
    rho1, rho2 = (float(x) for x in a.rho.split(","))
    model = ds.DeepAimSE(skip=a.skip, rho1=rho1, rho2=rho2)
    rows = []
    for alpha in (float(x) for x in a.alphas.split(",")):
        fps = []
        for init in ((1.0, 1.0), (1e-3, 1e-3), (1.0, 1e-3)):
            t0 = time.perf_counter()
            fp = ds.fixed_point(model, alpha=alpha, v_init=init, m=a.m, scrambles=a.scrambles)
            fp["wall_seconds"] = time.perf_counter() - t0
            fps.append(fp)
            print(json.dumps(_short(fp)), flush=True)
        row = {"alpha": alpha, "alpha_PR": ds.perfect_recovery_alpha(model), "fixed_points": fps}
        first = fps[0]
        if not first["perfect_recovery"]:
            q1, q2 = (x["q"] for x in first["layers"])
            qmc_e = ds.output_overlaps(model, q1=q1, q2=q2, m=a.m + 1, scrambles=a.scrambles, seed=7)
            mc = ds.se_step_mc(model, alpha=alpha, q1=q1, q2=q2, samples=a.mc_samples, seed=11)
            row["step_check"] = {
                k: {"rqmc": qmc_e[k].value, "rqmc_error": qmc_e[k].error,
                    "mc": mc[k].value, "mc_error": mc[k].error,
                    "z": (qmc_e[k].value - mc[k].value)
                    / (qmc_e[k].error ** 2 + mc[k].error ** 2) ** 0.5}
                for k in ("E1", "E2")}
            row["step_check"]["nishimori"] = {k: [qmc_e[k].value, qmc_e[k].error]
                                              for k in ("nishimori_1", "nishimori_2")}
            print(json.dumps(row["step_check"]), flush=True)
        rows.append(row)
    if a.out:
        with open(a.out, "w") as fh:
            json.dump({"skip": a.skip, "rho": [rho1, rho2], "m": a.m, "scrambles": a.scrambles,
                       "rows": rows}, fh, indent=1, default=str)


def _short(fp: dict) -> dict:
    return {"alpha": fp["alpha"], "init": fp["init_mmse"], "PR": fp["perfect_recovery"],
            "stable": fp["stable"],
            "mmse": [(x["mmse"], x["mmse_error"]) for x in fp["layers"]],
            "q_hat": [(x["q_hat"], x["q_hat_error"]) for x in fp["layers"]],
            "iterations": fp["iterations"], "seconds": fp["wall_seconds"]}


if __name__ == "__main__":
    main()
