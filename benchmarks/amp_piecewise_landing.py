"""Does finite-size AMP land on the SE for hardmax T = 4 and sparsemax T = 3? (issue 15, item 3;
docs/amp_piecewise.md; THEORY 1.1, 1.5 and check 7 of THEORY 4).

The SE is computed once per (channel, alpha) and AMP runs with ``se=False`` beside it:

* hardmax T = 4: ``hardmax_qmc.e_hat_curves`` on a short r = q/V window around the root
  (common random numbers, Chebyshev nodes), ``se_curve_qmc`` (mmse +- its 99% bar) with e_gen
  (trapezoid rule, bar = step-halving difference + |de/dmmse| x the mmse bar); independent
  check: seeded plain Monte Carlo of E_hat at the root (``hardmax_qmc.monte_carlo_e``) and the
  alpha it implies.
* sparsemax T = 3: ``Sparsemax(beta, rho, tokens=3).state_evolution`` (its own bars).

AMP: ``run_piecewise_amp`` at each D over ``--seeds`` seeds: mean final ||S_hat - S||_F^2 / D
+- standard error, Bayes-optimal test error +- standard error; D x excess = D (mse - mmse)
with the bar sqrt(se^2 + bar^2) x D.

    python benchmarks/amp_piecewise_landing.py --channel hardmax --tokens 4 --alpha 0.1 \
        --r-window 3.2 5.0 --dims 40 80 --seeds 4 --egen-own [--out h4.json]
    python benchmarks/amp_piecewise_landing.py --channel sparsemax --tokens 3 --alpha 0.05 \
        --dims 40 60 80 --seeds 4 --egen-own [--out s3.json]

A second batch of seeds at one D: ``--rng-seed 1 --se-json h4.json --out h4b.json``; the
table pools the batches of one D (exact pooled variance): ``--se-json h4.json --amp-json
h4.json h4b.json --skip-amp --egen-own``. The sparsemax SE is also checked independently by the
QMC route with control variates (``sparsemax_t3.output_e`` at the root and V +- 0.02, the alpha
it implies; not in this script).

Set OMP_NUM_THREADS=1 on a small shared machine.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from collections.abc import Callable

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from aim_sym.numerics import hardmax_qmc  # noqa: E402

from aim_sym.piecewise_amp import run_piecewise_amp  # noqa: E402
from aim_sym.sparsemax_model import Sparsemax  # noqa: E402


def se_hardmax(*, T: int, rho: float, alpha: float, r_window: tuple[float, float],
               points: int, scrambles: int, mc_samples: int, egen_step: float) -> dict:
    """The hardmax SE fixed point at alpha from QMC curves on ``r_window`` (module docstring)."""
    t0 = time.perf_counter()
    curves = hardmax_qmc.e_hat_curves(T=T, r_min=r_window[0], r_max=r_window[1], nodes=5,
                                      points=points, scrambles=scrambles)
    rows = hardmax_qmc.se_curve_qmc(rho=rho, alphas=[alpha], curves=curves, with_egen=True,
                                    egen_step=egen_step)
    if len(rows) != 1:
        raise SystemExit(f"{len(rows)} fixed points in the r window {r_window}: widen it")
    row = rows[0]
    out = {k: row.get(k) for k in ("mmse", "error", "error_propagated", "q", "r", "E_hat",
                                   "E_hat_error", "e_gen", "e_gen_error", "stable",
                                   "d_alpha_d_mmse")}
    V = row["mmse"]
    mc = hardmax_qmc.monte_carlo_e(T=T, q=1.0 + rho - V, V=V, samples=mc_samples, seed=7)
    # alpha = V / (2 Delta(V) E_hat): the alpha the Monte Carlo E_hat implies at the root
    out.update(E_hat_mc=mc.value * V, E_hat_mc_se=mc.error * V,
               alpha_mc=alpha * row["E_hat"] / (mc.value * V))
    # the root the Monte Carlo E_hat implies (linear in alpha; one standard error)
    slope = row["d_alpha_d_mmse"]
    out.update(mmse_mc=V + (alpha - out["alpha_mc"]) / slope,
               mmse_mc_se=out["alpha_mc"] * (mc.error / mc.value) / abs(slope),
               seconds=time.perf_counter() - t0)
    return out


def se_sparsemax(*, T: int, beta: float, rho: float, alpha: float) -> dict:
    t0 = time.perf_counter()
    r = Sparsemax(beta=beta, rho=rho, tokens=T).state_evolution(alpha=alpha)
    fps = r.details["fixed_points"]
    stable = [f for f in fps if f.get("stable", True)] or fps
    tracked = max(stable, key=lambda f: f["mmse"])  # the one AMP tracks from V = 1
    return {"mmse": tracked["mmse"], "error": tracked["error"], "e_gen": tracked.get("e_gen"),
            "e_gen_error": tracked.get("e_gen_error"), "n_fixed_points": len(fps),
            "bayes_optimal_mmse": r.value, "seconds": time.perf_counter() - t0}


def amp_row(*, channel: str, T: int, beta, rho: float, alpha: float, dim: int, seeds: int,
            max_iter: int, n_test: int, rng_seed: int = 0) -> dict:
    t0 = time.perf_counter()
    kw = {"beta": beta} if channel == "sparsemax" else {}
    r = run_piecewise_amp(channel=channel, tokens=T, rho=rho, alpha=alpha, dim=dim, seeds=seeds,
                          max_iter=max_iter, se=False, n_test=n_test, rng_seed=rng_seed,
                          **kw)
    d = r.details
    return {"dim": dim, "seeds": seeds, "rng_seed": rng_seed, "mse": r.value, "mse_se": r.error,
            "per_seed": [s.get("error") if isinstance(s, dict) else s for s in d["per_seed"]],
            "test_error": d["test_error"], "test_error_se": d["test_error_stderr"],
            "dampings": d.get("dampings"), "tail": d["per_iteration"][-5:],
            "seconds": time.perf_counter() - t0}


def _pm(v, e, digits=4) -> str:
    if v is None:
        return "-"
    return f"{v:.{digits}f} +- {e:.2g}" if e is not None else f"{v:.{digits}f}"


def _pool(parts: list[tuple[int, float, float]]) -> tuple[float, float]:
    """(mean, standard error) over the union of batches given as (n, mean, standard error):
    the exact pooled sample variance."""
    n = sum(p[0] for p in parts)
    mean = sum(k * m for k, m, _ in parts) / n
    ss = sum((k - 1) * (e * e * k) + k * (m - mean) ** 2 for k, m, e in parts)
    return mean, math.sqrt(ss / (n - 1) / n)


def pooled(rows: list[dict]) -> list[dict]:
    """The batches of one D (different --rng-seed) pooled into one row."""
    out = []
    for D in sorted({r["dim"] for r in rows}):
        batch = [r for r in rows if r["dim"] == D]
        n = sum(r["seeds"] for r in batch)
        mse = _pool([(r["seeds"], r["mse"], r["mse_se"]) for r in batch])
        test = _pool([(r["seeds"], r["test_error"], r["test_error_se"]) for r in batch])
        out.append({"dim": D, "seeds": n, "mse": mse[0], "mse_se": mse[1],
                    "test_error": test[0], "test_error_se": test[1]})
    return out


def egen_own(channel: str, T: int, beta: float, rho: float, mse: float) -> tuple[float, float]:
    """e_gen at AMP's own mse (q = Q0 - mse, V = mse): hardmax by the trapezoid rule (step 1.2,
    bar = step-halving difference), sparsemax T = 3 by seeded Monte Carlo (3 standard errors)."""
    Q0 = 1.0 + rho
    if channel == "hardmax":
        e = hardmax_qmc.egen_at(T=T, q=Q0 - mse, V=mse, step=1.2)
    else:
        from aim_sym.numerics.sparsemax_t3_se import generalisation_error_t3

        e = generalisation_error_t3(q=Q0 - mse, V=mse, beta=beta)
    return e.value, e.error


def table(channel: str, T: int, alpha: float, se: dict, rows: list[dict],
          own: Callable[[float], tuple[float, float]] | None = None) -> str:
    rows = pooled(rows)
    lines = ["| channel | alpha | D | seeds | AMP mse | SE mmse | test error | SE e_gen | "
             "D x excess |" + (" e_gen at AMP mse |" if own else ""),
             "|---|---|---|---|---|---|---|---|---|" + ("---|" if own else "")]
    for r in rows:
        ex = r["dim"] * (r["mse"] - se["mmse"])
        ex_bar = r["dim"] * math.hypot(r["mse_se"] or 0.0, se["error"])
        lines.append(f"| {channel} T = {T} | {alpha:g} | {r['dim']} | {r['seeds']} | "
                     f"{_pm(r['mse'], r['mse_se'])} | {_pm(se['mmse'], se['error'], 5)} | "
                     f"{_pm(r['test_error'], r['test_error_se'])} | "
                     f"{_pm(se['e_gen'], se['e_gen_error'], 5)} | {ex:.2f} +- {ex_bar:.2f} |"
                     + (f" {_pm(*own(r['mse']))} |" if own else ""))
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--channel", choices=("hardmax", "sparsemax"), default="hardmax")
    ap.add_argument("--tokens", type=int, default=4)
    ap.add_argument("--beta", type=float, default=1.0)
    ap.add_argument("--rho", type=float, default=0.5)
    ap.add_argument("--alpha", type=float, default=0.1)
    ap.add_argument("--dims", type=int, nargs="+", default=[40, 80])
    ap.add_argument("--seeds", type=int, default=6)
    ap.add_argument("--max-iter", type=int, default=100)
    ap.add_argument("--n-test", type=int, default=2000)
    ap.add_argument("--rng-seed", type=int, default=0,
                    help="AMP data streams SeedSequence([rng_seed, s]): a second batch of seeds")
    ap.add_argument("--r-window", type=float, nargs=2, default=[3.0, 5.0],
                    help="hardmax: the q/V window of the QMC curves (must hold the root)")
    ap.add_argument("--points", type=int, default=512)
    ap.add_argument("--scrambles", type=int, default=8)
    ap.add_argument("--mc-samples", type=int, default=20000)
    ap.add_argument("--egen-step", type=float, default=1.2)
    ap.add_argument("--se-json", default=None, help="reuse an SE dict written by --out")
    ap.add_argument("--skip-amp", action="store_true")
    ap.add_argument("--skip-se", action="store_true", help="AMP only (table from --amp-json later)")
    ap.add_argument("--amp-json", nargs="*", default=[],
                    help="AMP rows written by --out to put in the table beside the SE")
    ap.add_argument("--egen-own", action="store_true",
                    help="add e_gen at AMP's own mse to the table (hardmax T = 4: ~30 s per D)")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    se = None
    if a.skip_se:
        pass
    elif a.se_json:
        with open(a.se_json) as fh:
            se = json.load(fh)["se"]
    elif a.channel == "hardmax":
        se = se_hardmax(T=a.tokens, rho=a.rho, alpha=a.alpha, r_window=tuple(a.r_window),
                        points=a.points, scrambles=a.scrambles, mc_samples=a.mc_samples,
                        egen_step=a.egen_step)
    else:
        se = se_sparsemax(T=a.tokens, beta=a.beta, rho=a.rho, alpha=a.alpha)
    print("SE:", json.dumps(se), flush=True)
    record = {"args": vars(a), "se": se, "amp": []}
    for path in a.amp_json:
        with open(path) as fh:
            record["amp"].extend(json.load(fh)["amp"])
    if a.out:
        with open(a.out, "w") as fh:
            json.dump(record, fh, indent=1)
    for D in ([] if a.skip_amp else a.dims):
        row = amp_row(channel=a.channel, T=a.tokens, beta=a.beta, rho=a.rho, alpha=a.alpha,
                      dim=D, seeds=a.seeds, max_iter=a.max_iter, n_test=a.n_test,
                      rng_seed=a.rng_seed)
        record["amp"].append(row)
        print("AMP:", json.dumps(row), flush=True)
        if a.out:
            with open(a.out, "w") as fh:
                json.dump(record, fh, indent=1)
    if record["amp"] and se is not None:
        own = ((lambda m: egen_own(a.channel, a.tokens, a.beta, a.rho, m)) if a.egen_own
               else None)
        print(table(a.channel, a.tokens, a.alpha, se, record["amp"], own))


if __name__ == "__main__":
    main()
