"""Deep AIM (two tied layers, T = 2) state evolution at finite width (THEORY 1.6,
docs/deep_aim.md sections 4 and 5).

Fixed points (default mode): for each alpha the fixed points from (mmse_1, mmse_2) = (1, 1)
(uninformed, q_l = rho_l), (1e-3, 1e-3) (informed) and (1, 1e-3) (layer 2 informed), with phi,
e_gen and time per fixed point; then, at the uninformed fixed point's overlaps, E_l = E|g_l|^2 by
randomised QMC (numerics.deep_aim_se.output_overlaps) and by seeded plain Monte Carlo with
importance-sampled posterior means (se_step_mc), with their z-score.

    python benchmarks/deep_aim_se.py [--skip C] [--rho R1,R2] [--alphas A,B,..] [--m M]
                                     [--estimator variance|legacy] [--out results.json]

Accuracy (``--accuracy 8,9,10``): one fixed point per m (2^m Sobol points per scramble),
estimator (legacy mean-square form, posterior-variance form) and seed, from ``--v-init``: mmse,
bars and wall time (docs/deep_aim.md section 4, "Speed and accuracy").

    python benchmarks/deep_aim_se.py --accuracy 8,9,10 --alphas 0.1 --seeds 0,1

Curve (``--curve``): the branch from the uninformed start (numerics.deep_aim_se.curve), rows
appended to ``--out`` (JSON lines), warm-started from ``--v-init`` so that a long curve can be run
in pieces; ``--plot rows.jsonl --figure fig.png`` draws both mmses and e_gen against alpha with
their bars and the one-layer softmax AIM (T = 2) at rho_2 for comparison (matplotlib, Agg).

    python benchmarks/deep_aim_se.py --curve --alphas 0.05,0.1 --out rows.jsonl
    python benchmarks/deep_aim_se.py --curve --alphas 0.15 --v-init 0.7,0.4 --out rows.jsonl
    python benchmarks/deep_aim_se.py --plot rows.jsonl --figure docs/figures/deep_aim_se_curve.png
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
    p.add_argument("--estimator", default="variance", choices=ds.ESTIMATORS,
                   help="form of E_l: posterior variance (default) or the legacy mean square")
    p.add_argument("--mc-samples", type=int, default=20000)
    p.add_argument("--out", default=None)
    p.add_argument("--curve", action="store_true", help="the branch from the uninformed start")
    p.add_argument("--v-init", default="1,1", help="(mmse_1, mmse_2) to start the curve from")
    p.add_argument("--plot", default=None, help="JSON-lines file of curve rows to draw")
    p.add_argument("--accuracy", default=None,
                   help="m values (e.g. 8,9,10): one fixed point per m, estimator and seed, "
                        "accuracy against time")
    p.add_argument("--seeds", default="0,1")
    p.add_argument("--figure", default="deep_aim_se_curve.png")
    a = p.parse_args()
    rho1, rho2 = (float(x) for x in a.rho.split(","))
    model = ds.DeepAimSE(skip=a.skip, rho1=rho1, rho2=rho2)
    alphas = [float(x) for x in a.alphas.split(",")]
    if a.plot:
        plot(a.plot, a.figure)
    elif a.accuracy:
        accuracy(model, alphas, a)
    elif a.curve:
        run_curve(model, alphas, a)
    else:
        fixed_points(model, alphas, a, rho1, rho2)


def run_curve(model: ds.DeepAimSE, alphas: list[float], a) -> None:
    v = tuple(float(x) for x in a.v_init.split(","))

    def progress(k, n, text):
        print(f"[{k}/{n}] {text}", flush=True)

    t0 = time.perf_counter()
    for alpha in alphas:         # one at a time, so that each row is saved as it comes
        row = ds.curve(model, alphas=[alpha], m=a.m, scrambles=a.scrambles, v_init=v,
                       progress=progress, estimator=a.estimator)[0]
        row.update(skip=model.skip, rho=[model.rho1, model.rho2], m=a.m, scrambles=a.scrambles,
                   v_init=list(v))
        print(json.dumps(_short(row)), flush=True)
        if a.out:
            with open(a.out, "a") as fh:
                fh.write(json.dumps(row, default=str) + "\n")
        v = tuple(min(max(x["mmse"], 1e-4), 1.0) for x in row["layers"])
    print(f"total {time.perf_counter() - t0:.1f} s", flush=True)


def accuracy(model: ds.DeepAimSE, alphas: list[float], a) -> None:
    """Accuracy against time per fixed point: for each alpha, m in ``--accuracy``, estimator
    (legacy, variance) and seed in ``--seeds``, the fixed point from ``--v-init``; one JSON line
    each (mmse and bar per layer, wall seconds)."""
    v = tuple(float(x) for x in a.v_init.split(","))
    for alpha in alphas:
        for m in (int(x) for x in a.accuracy.split(",")):
            for est in ds.ESTIMATORS:
                for seed in (int(x) for x in a.seeds.split(",")):
                    t0 = time.perf_counter()
                    fp = ds.fixed_point(model, alpha=alpha, v_init=v, m=m, seed=seed,
                                        scrambles=a.scrambles, estimator=est)
                    row = {"alpha": alpha, "m": m, "estimator": est, "seed": seed,
                           "mmse": [(x["mmse"], x["mmse_error"]) for x in fp["layers"]],
                           "standard_error": fp["standard_error"],
                           "rule_error": fp["rule_error"],
                           "seconds": time.perf_counter() - t0}
                    print(json.dumps(row), flush=True)
                    if a.out:
                        with open(a.out, "a") as fh:
                            fh.write(json.dumps(row) + "\n")


def one_layer_mmse(alpha: float, rho: float) -> float:
    """One-layer softmax AIM at T = 2 (THEORY 1.2: q_hat = 4 alpha / V): V = mmse_rho(V/(4 alpha)),
    the uninformed branch (largest root, bracketed below 1)."""
    from aim_sym.numerics import wishart
    from scipy.optimize import brentq

    def f(v):
        return float(wishart.mmse(v / (4 * alpha), rho=rho)) - v

    if alpha >= (2 * rho - rho * rho if rho <= 1 else 1.0) / 4:
        return 0.0
    return brentq(f, 1e-9, 1.0, xtol=1e-13)


def plot(path: str, figure: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    rows = sorted((json.loads(x) for x in open(path) if x.strip()), key=lambda r: r["alpha"])
    al = np.array([r["alpha"] for r in rows])
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    for i, (name, col) in enumerate((("layer 1 (H1)", "C0"), ("layer 2 (H2)", "C1"))):
        ax1.errorbar(al, [r["layers"][i]["mmse"] for r in rows],
                     yerr=[r["layers"][i]["mmse_error"] for r in rows], fmt="o-", color=col,
                     capsize=3, label=f"two layers: {name}")
    rho2 = rows[0]["rho"][1]
    grid = np.linspace(0.005, max(al.max(), 0.45), 90)
    ax1.plot(grid, [one_layer_mmse(x, rho2) for x in grid], "k--", lw=1,
             label=f"one layer softmax, rho = {rho2:g}")
    model = ds.DeepAimSE(skip=rows[0]["skip"], rho1=rows[0]["rho"][0], rho2=rho2)
    for ax in (ax1, ax2):
        ax.axvline(ds.perfect_recovery_alpha(model), color="grey", lw=0.8, ls=":",
                   label="alpha_PR (two layers)")
    ax1.set_xlabel("alpha")
    ax1.set_ylabel("mmse")
    ax1.set_title(f"deep AIM SE, T = 2, c = {rows[0]['skip']:g}, rho = {tuple(rows[0]['rho'])}")
    ax1.legend(fontsize=8)
    ax2.errorbar(al, [r["e_gen"] for r in rows], yerr=[r["e_gen_error"] for r in rows],
                 fmt="o-", color="C2", capsize=3, label="e_gen (Bayes-optimal)")
    ax2.errorbar(al, [r["e_gen_plugin"] for r in rows],
                 yerr=[r["e_gen_plugin_error"] for r in rows], fmt="s--", color="C3", capsize=3,
                 label="plug-in error")
    ax2.set_xlabel("alpha")
    ax2.set_ylabel("||y - y_hat||_F^2")
    ax2.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(figure, dpi=120)
    print("wrote", figure)


def fixed_points(model: ds.DeepAimSE, alphas: list[float], a, rho1: float, rho2: float) -> None:
    rows = []
    for alpha in alphas:
        fps = []
        for init in ((1.0, 1.0), (1e-3, 1e-3), (1.0, 1e-3)):
            t0 = time.perf_counter()
            fp = ds.fixed_point(model, alpha=alpha, v_init=init, m=a.m, scrambles=a.scrambles,
                                estimator=a.estimator)
            fp["wall_seconds"] = time.perf_counter() - t0
            fps.append(fp)
            print(json.dumps(_short(fp)), flush=True)
        fps = ds.flag_bayes_optimal(fps)
        row = {"alpha": alpha, "alpha_PR": ds.perfect_recovery_alpha(model), "fixed_points": fps}
        first = fps[0]
        if not first["perfect_recovery"]:
            q1, q2 = (x["q"] for x in first["layers"])
            qmc_e = ds.output_overlaps(model, q1=q1, q2=q2, m=a.m + 1, scrambles=a.scrambles, seed=7,
                                       estimator=a.estimator)
            mc = ds.se_step_mc(model, alpha=alpha, q1=q1, q2=q2, samples=a.mc_samples, seed=11)
            row["step_check"] = {
                k: {"rqmc": qmc_e[k].value, "rqmc_error": qmc_e[k].error,
                    "mc": mc[k].value, "mc_error": mc[k].error,
                    "z": (qmc_e[k].value - mc[k].value)
                    / (qmc_e[k].error ** 2 + mc[k].error ** 2) ** 0.5}
                for k in ("E1", "E2")}
            row["step_check"]["other_forms"] = {
                k: [qmc_e[k].value, qmc_e[k].error]
                for k in ("nishimori_1", "nishimori_2", "mean_square_1", "mean_square_2",
                          "variance_1", "variance_2")}
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
            "phi": (fp.get("phi"), fp.get("phi_error")),
            "e_gen": (fp.get("e_gen"), fp.get("e_gen_error")),
            "e_gen_plugin": (fp.get("e_gen_plugin"), fp.get("e_gen_plugin_error")),
            "iterations": fp["iterations"], "seconds": fp.get("wall_seconds", fp["seconds"]),
            "estimator": fp.get("estimator")}


if __name__ == "__main__":
    main()
