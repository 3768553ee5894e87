"""The cross-validated-lambda comparison of the ERM paper's figure: factorised (nuclear norm) against
direct (ridge) training of one tied attention layer (THEORY 3; issue 16 item 4).

T = 2, kappa0 = 0.05, Delta = 0.05, beta = beta0 = 1.  At each alpha, lambda* minimises the SE
test error over lambda in [1e-3, 1] (``aim_sym.erm.ERM.optimal_lambda``: search at Gauss-Hermite
order 8, lambda* re-solved at orders 24/17), for both parameterisations.

    python derivations/erm_crossval.py run --cache docs/data/erm_crossval.json [--budget 1100]
    python derivations/erm_crossval.py report --cache docs/data/erm_crossval.json --reference DIR \\
        --csv docs/data/erm_crossval.csv --plot docs/figures/erm_crossval.png

``run`` stops after ``--budget`` seconds (between points); run it again to continue (the cache
``docs/data/erm_crossval.json`` holds every point computed so far, search log included).  ``DIR`` is
the authors' ``cross_validation/`` folder (SE_L1/SE_L2: their SE with the cross-validated lambda,
GD_L1/GD_L2: Adam at the cross-validated lambda); ``report`` prints the table against their
nearest rows and draws the figure with their columns overlaid (GD error bars: the instance std).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import time
from pathlib import Path

import numpy as np

from aim_sym.erm import ERM

KAPPA0, DELTA = 0.05, 0.05
ALPHAS = (0.03, 0.05, 0.07, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5)
#: computed in this order: a coarse pass over the range first, then the points in between
ORDER = (0.03, 0.1, 0.2, 0.5, 0.05, 0.15, 0.3, 0.07, 0.4)
KINDS = ("factorised", "direct")
KEYS = ("q", "m", "sigma", "q_hat", "m_hat", "sigma_hat", "train", "mse", "rank")


def _key(kind: str, alpha: float) -> str:
    return f"{kind}:{alpha:g}"


def _load(path: Path) -> dict:
    return json.loads(path.read_text()) if path.exists() else {}


def _start(cache: dict, kind: str, alpha: float) -> tuple | None:
    """(q, m, Sigma) at lambda* of the nearest alpha done, else None (default starts)."""
    done = [v for v in cache.values() if v["kind"] == kind]
    if not done:
        return None
    v = min(done, key=lambda v: abs(math.log(v["alpha"] / alpha)))
    return (v["q"], v["m"], v["sigma"])


def run(cache_path: Path, budget: float) -> None:
    cache = _load(cache_path)
    model = ERM(kappa0=KAPPA0, delta=DELTA)
    t_start = time.perf_counter()
    for alpha in ORDER:
        for kind in KINDS:
            key = _key(kind, alpha)
            if key in cache:
                continue
            if time.perf_counter() - t_start > budget:
                print(f"budget of {budget:g} s spent; run again to continue", flush=True)
                return
            t0 = time.perf_counter()
            r = model.optimal_lambda(alpha=alpha, direct=(kind == "direct"),
                                     start=_start(cache, kind, alpha))
            d = dict(r.details)
            out = {"kind": kind, "alpha": alpha, "lam_opt": r.value, "lam_opt_error": r.error,
                   "seconds": time.perf_counter() - t0, "method": r.method}
            out.update({k: v for k, v in d.items() if k != "other_fixed_points"})
            out["other_fixed_points"] = len(d["other_fixed_points"])
            cache[key] = out
            cache_path.write_text(json.dumps(cache, indent=1))
            print(f"{kind:>10} alpha = {alpha:<5g} lambda* = {r.value:.4g} +- {r.error:.2g} "
                  f"test = {d['test']:.6f} +- {d['test_error']:.1e} (SE {d['test_se_error']:.1e},"
                  f" flatness {d['test_flatness']:.1e}) edge '{d['edge']}' "
                  f"{out['seconds']:.0f} s", flush=True)


def _reference(folder: Path, name: str) -> list[dict]:
    path = folder / name
    if not path.exists():
        return []
    with open(path) as fh:
        return [{k: float(v) for k, v in row.items()} for row in csv.DictReader(fh)]


def _nearest(rows: list[dict], alpha: float) -> dict | None:
    if not rows:
        return None
    r = min(rows, key=lambda r: abs(r["alpha"] - alpha))
    return r if abs(r["alpha"] / alpha - 1) < 0.08 else None


def report(cache_path: Path, reference: Path | None, csv_path: Path | None,
           plot: Path | None) -> None:
    cache = _load(cache_path)
    ref = {}
    if reference is not None:
        for kind, tag in (("factorised", "L1"), ("direct", "L2")):
            ref[kind] = {"SE": _reference(reference, f"SE_{tag}_kappa_0.05_noise_0.05.csv"),
                         "GD": _reference(reference, f"GD_{tag}_kappa_0.05_noise_0.05.csv")}
    rows = []
    for alpha in ALPHAS:
        row = {"alpha": alpha}
        for kind in KINDS:
            v = cache.get(_key(kind, alpha))
            if v is None:
                continue
            row.update({f"{kind}_lam_opt": v["lam_opt"],
                        f"{kind}_lam_opt_error": v["lam_opt_error"],
                        f"{kind}_edge": v["edge"], f"{kind}_test": v["test"],
                        f"{kind}_test_error": v["test_error"],
                        f"{kind}_test_se_error": v["test_se_error"],
                        f"{kind}_test_flatness": v["test_flatness"],
                        f"{kind}_mse": v["mse"], f"{kind}_mse_error": v["mse_error"],
                        f"{kind}_test_lambda_to_0": v.get("test_lambda_to_0", "")})
        if len(row) > 1:
            rows.append(row)
    fields = ["alpha"] + [f"{k}_{c}" for k in KINDS
                          for c in ("lam_opt", "lam_opt_error", "edge", "test", "test_error",
                                    "test_se_error", "test_flatness", "mse", "mse_error",
                                    "test_lambda_to_0")]
    if csv_path is not None:
        csv_path.parent.mkdir(parents=True, exist_ok=True)
        with open(csv_path, "w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=fields, restval="")
            w.writeheader()
            for r in rows:
                w.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in r.items()})
    print("| alpha | kind | lambda* (ours) | test (ours) | SE ref alpha | lambda* (SE ref) | "
          "test (SE ref) | GD alpha | lambda* (GD) | test (GD +- std) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        for kind in KINDS:
            if f"{kind}_test" not in r:
                continue
            se = _nearest(ref.get(kind, {}).get("SE", []), r["alpha"])
            gd = _nearest(ref.get(kind, {}).get("GD", []), r["alpha"])
            edge = f" ({r[f'{kind}_edge']} edge)" if r[f"{kind}_edge"] else ""
            lam = f"{r[f'{kind}_lam_opt']:.3g} +- {r[f'{kind}_lam_opt_error']:.2g}{edge}"
            cells = [f"{r['alpha']:g}", kind, lam,
                     f"{r[f'{kind}_test']:.5f} +- {r[f'{kind}_test_error']:.1e}"]
            cells += ([f"{se['alpha']:.4f}", f"{se['lreg']:.3g}" if "lreg" in se else "-",
                       f"{se['test']:.5f}"] if se else ["-", "-", "-"])
            cells += ([f"{gd['alpha']:.4f}", f"{gd['lambda_optimal']:.3g}",
                       f"{gd['test_err_mean_opt']:.5f} +- {gd['test_err_std_opt']:.4f}"]
                      if gd else ["-", "-", "-"])
            print("| " + " | ".join(cells) + " |")
    if plot is not None:
        _figure(rows, ref, plot)


def _figure(rows: list[dict], ref: dict, plot: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from aim_sym.numerics import erm_direct, erm_se, erm_thresholds

    colours = {"factorised": "C0", "direct": "C3"}
    # the lambda -> 0+ limits (minimum-norm interpolators) where the models interpolate
    a_int = float(erm_thresholds.interpolation_threshold(kappa0=KAPPA0, Delta=DELTA,
                                                         dps=None).value)
    limits = {
        "factorised": [(a, erm_se.interpolator_limit(alpha=a, kappa0=KAPPA0, Delta=DELTA).test)
                       for a in np.linspace(0.02, a_int, 24)],
        "direct": [(a, erm_direct.interpolator_limit(alpha=a, kappa0=KAPPA0, Delta=DELTA).test)
                   for a in np.linspace(0.02, 0.245, 24)]}
    labels = {"factorised": "factorised (nuclear norm, L1)", "direct": "direct (ridge, L2)"}
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4.2))
    for kind in KINDS:
        c = colours[kind]
        have = [r for r in rows if f"{kind}_test" in r]
        a = [r["alpha"] for r in have]
        ax.errorbar(a, [r[f"{kind}_test"] for r in have],
                    yerr=[r[f"{kind}_test_error"] for r in have], fmt="o-", color=c, ms=4,
                    capsize=2, label=f"{labels[kind]}: SE, ours")
        lam = [r[f"{kind}_lam_opt"] for r in have]
        err = [r[f"{kind}_lam_opt_error"] for r in have]
        lo = [min(e, 0.95 * v) for v, e in zip(lam, err, strict=True)]
        bx.errorbar(a, lam, yerr=[lo, err], fmt="o-", color=c, ms=4, capsize=2,
                    label=f"{labels[kind]}: ours")
        for r in have:
            if r[f"{kind}_edge"]:
                bx.plot(r["alpha"], r[f"{kind}_lam_opt"], "v", color=c, ms=9, mfc="none")
        ax.plot(*zip(*limits[kind]), "--", color=c, lw=1,
                label=f"{labels[kind]}: lambda -> 0+ (min-norm interpolator)")
        se, gd = ref.get(kind, {}).get("SE", []), ref.get(kind, {}).get("GD", [])
        if se:
            ax.plot([s["alpha"] for s in se], [s["test"] for s in se], "-", color=c, lw=0.8,
                    alpha=0.6, label=f"{labels[kind]}: authors' SE")
            if "lreg" in se[0]:
                bx.plot([s["alpha"] for s in se], [s["lreg"] for s in se], ".", color=c,
                        ms=3, alpha=0.6, label=f"{labels[kind]}: authors' SE")
        if gd:
            ax.errorbar([g["alpha"] for g in gd], [g["test_err_mean_opt"] for g in gd],
                        yerr=[g["test_err_std_opt"] for g in gd], fmt="s", color=c, ms=3,
                        mfc="none", capsize=1.5, alpha=0.7, label=f"{labels[kind]}: authors' GD")
            bx.plot([g["alpha"] for g in gd], [g["lambda_optimal"] for g in gd], "s", color=c,
                    ms=3, mfc="none", alpha=0.7, label=f"{labels[kind]}: authors' GD")
    ax.set_xlabel("alpha = N / d^2")
    ax.set_ylabel("test error at lambda*")
    ax.set_yscale("log")
    ax.set_title("cross-validated test error, kappa0 = Delta = 0.05, T = 2")
    ax.legend(fontsize=6, loc="upper right", framealpha=0.85)
    bx.set_xlabel("alpha")
    bx.set_ylabel("lambda* (triangle: edge of the range [1e-3, 1])")
    bx.set_yscale("log")
    bx.set_title("cross-validated lambda")
    bx.legend(fontsize=6, loc="lower right", framealpha=0.85)
    fig.tight_layout()
    plot.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(plot, dpi=130)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run")
    r.add_argument("--cache", type=Path, required=True)
    r.add_argument("--budget", type=float, default=1100.0)
    p = sub.add_parser("report")
    p.add_argument("--cache", type=Path, required=True)
    p.add_argument("--reference", type=Path)
    p.add_argument("--csv", type=Path)
    p.add_argument("--plot", type=Path)
    a = ap.parse_args()
    if a.command == "run":
        run(a.cache, a.budget)
    else:
        report(a.cache, a.reference, a.csv, a.plot)


if __name__ == "__main__":
    main()
