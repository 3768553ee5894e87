"""The ERM test error against alpha as lambda -> 0+, both sides of alpha_interp (issue 16, THEORY 3).

T = 2, kappa0 = 0.5, Delta = 0.5, beta = beta0 = 1 (alpha_interp = 0.1534821).  Below and at
alpha_interp: the minimum-nuclear-norm interpolator (``numerics.erm_se.interpolator_limit``).
Above: the lambda = 0 SE (``numerics.erm_ridgeless.ridgeless_se``: Gauss-Hermite orders 24/17,
bar = difference x 17/7, where Sigma <= 5; the piecewise output rule 16/12 up to Sigma = 27).
Independent route: the finite-lambda SE (``numerics.erm_se.solve``) at lambda = 1e-2, 3e-3,
1e-3, extrapolated to lambda = 0 (``numerics.erm_ridgeless.lambda_extrapolation``); the
lambda = 1e-2 and 1e-3 points are also drawn as curves.

    python benchmarks/erm_ridgeless_curve.py run [--budget 600]      # resumable, appends rows
    python benchmarks/erm_ridgeless_curve.py report [--figure]

``run`` appends one row per (alpha, lambda) to docs/data/erm_ridgeless_curve.csv and stops
after ``--budget`` seconds (between points); run it again to continue.  ``report`` prints the
lambda = 0 table, the extrapolation check and (``--figure``) draws
docs/figures/erm_ridgeless_curve.png.
"""

from __future__ import annotations

import argparse
import csv
import time
from pathlib import Path

import numpy as np
from aim_sym.numerics import erm_ridgeless as R
from aim_sym.numerics import erm_se as S

KAPPA0, DELTA = 0.5, 0.5
ROOT = Path(__file__).resolve().parents[1]
CSV = ROOT / "docs" / "data" / "erm_ridgeless_curve.csv"
FIGURE = ROOT / "docs" / "figures" / "erm_ridgeless_curve.png"
KEYS = ("q", "m", "sigma", "q_hat", "m_hat", "sigma_hat", "train", "test", "mse", "rank")
CHECK = ("test", "train", "q", "m", "sigma")  # compared with the lambda -> 0 extrapolation
LAMS_CHECK = (1e-2, 3e-3, 1e-3)
# computed in this order: (alpha, lambda); lambda = 0 first at each alpha, finite lambda started
# from the nearest computed point at the same alpha.  alpha = 0.3 (1.95 alpha_interp, Sigma = 26):
# lambda = 0 by the piecewise output rule (ridgeless_se's "auto" rule there; Gauss-Hermite's fixed
# point moves by 20 % in q between orders 12 and 17); its lambda -> 0 check was run at outer
# order 12 on both routes (docs/erm.md), not here.  Below ~0.25 Sigma exceeds SIGMA_SPLIT
# (benchmarks/erm_ridgeless_near.py follows the curve further at fixed Sigma).
POINTS = ([(1.0, 0.0), (0.5, 0.0)]
          + [(a, lam) for a in (1.0, 0.5) for lam in (1e-3, 3e-3, 1e-2)]
          + [(2.0, 0.0)] + [(2.0, lam) for lam in (1e-3, 3e-3, 1e-2)] + [(0.3, 0.0)])
FULL_SEARCH = 0.5  # all of R.RIDGELESS_INITS at alpha >= this; below, the nearest point only
BELOW = (0.3, 0.5, 0.7, 0.8, 0.9, 0.95, 0.98, 0.99, 0.995, 0.999, 1.0)  # alpha / alpha_interp
FIELDS = ("alpha", "lam", "route", *KEYS, *(f"{k}_error" for k in KEYS), "fitted",
          "fitted_error", "reliable", "global_search", "iterations", "residual", "seconds")


def _load() -> list[dict]:
    if not CSV.exists():
        return []
    text = ("route", "reliable", "global_search")
    with CSV.open() as fh:
        return [{k: (v if k in text else float(v) if v != "" else float("nan"))
                 for k, v in row.items()} for row in csv.DictReader(fh)]


def _append(row: dict) -> None:
    new = not CSV.exists()
    CSV.parent.mkdir(parents=True, exist_ok=True)
    with CSV.open("a", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=FIELDS)
        if new:
            w.writeheader()
        w.writerow({k: row.get(k, "") for k in FIELDS})


def _warm(rows: list[dict], alpha: float, lam: float) -> tuple | None:
    """(q/Q0, m/Q0, Sigma) of the computed point nearest in lambda at this alpha, else in alpha
    at lambda = 0."""
    same = [r for r in rows if r["alpha"] == alpha]
    if same:
        r = min(same, key=lambda r: abs(r["lam"] - lam))
    else:
        zero = [r for r in rows if r["lam"] == 0.0]
        if not zero:
            return None
        r = min(zero, key=lambda r: abs(r["alpha"] - alpha))
    Q0 = 1 + KAPPA0
    return (r["q"] / Q0, r["m"] / Q0, r["sigma"])


def run(budget: float) -> None:
    t_end = time.time() + budget
    rows = _load()
    done = {(r["alpha"], r["lam"]) for r in rows}
    for alpha, lam in POINTS:
        if (alpha, lam) in done:
            continue
        if time.time() > t_end:
            print("budget spent; run again to continue")
            return
        t0 = time.time()
        warm = _warm(rows, alpha, lam)
        row = {"alpha": alpha, "lam": lam}
        if lam == 0.0:
            full = alpha >= FULL_SEARCH or warm is None
            inits = R.RIDGELESS_INITS if full else (warm,)
            pt = R.ridgeless_se(alpha=alpha, kappa0=KAPPA0, Delta=DELTA, inits=inits,
                                validated_only=False)
            fp = pt.fixed_point
            row.update(route="ridgeless" if pt.rule == "gh" else "ridgeless-split",
                       fitted=pt.fitted, fitted_error=fp.errors["fitted"],
                       reliable=pt.reliable, global_search=full)
        else:
            p = S.ERMParams(alpha=alpha, kappa0=KAPPA0, Delta=DELTA, lam=lam)
            fp = next(f for f in S.solve(p, inits=(warm,) if warm else None)
                      if f.global_minimum)
            row.update(route="se", reliable=fp.sigma <= R.SIGMA_RELIABLE, global_search=False)
        row.update({k: getattr(fp, k) for k in KEYS})
        row.update({f"{k}_error": fp.errors[k] for k in KEYS})
        row.update(iterations=fp.iterations, residual=fp.residual, seconds=time.time() - t0)
        _append(row)
        rows.append(row)
        print(f"alpha={alpha:g} lam={lam:g} test={fp.test:.6f}+-{fp.errors['test']:.1e} "
              f"Sigma={fp.sigma:.4g} q={fp.q:.5f} train={fp.train:.3e} "
              f"({row['seconds']:.0f} s)", flush=True)


def extrapolations(rows: list[dict]) -> list[dict]:
    """At each alpha with all of LAMS_CHECK and lambda = 0: extrapolated and direct values."""
    out = []
    for alpha in sorted({r["alpha"] for r in rows}):
        at = {r["lam"]: r for r in rows if r["alpha"] == alpha}
        if not (0.0 in at and all(lam in at for lam in LAMS_CHECK)):
            continue
        for k in CHECK:
            v, e = R.lambda_extrapolation(
                lams=LAMS_CHECK, values=tuple(at[lam][k] for lam in LAMS_CHECK),
                errors=tuple(at[lam][f"{k}_error"] for lam in LAMS_CHECK))
            # the same rule on both sides (its error is smooth in lambda): the truncation bar
            # alone is the sharp test
            _, trunc = R.lambda_extrapolation(
                lams=LAMS_CHECK, values=tuple(at[lam][k] for lam in LAMS_CHECK),
                errors=(0.0,) * len(LAMS_CHECK))
            d, de = at[0.0][k], at[0.0][f"{k}_error"]
            out.append({"alpha": alpha, "key": k, "extrapolated": v, "extrapolated_error": e,
                        "truncation": trunc, "lambda0": d, "lambda0_error": de,
                        "diff": v - d, "agree": abs(v - d) <= e + de,
                        "agree_sharp": abs(v - d) <= trunc})
    return out


def below_curve() -> list:
    a_i = R.alpha_interp(kappa0=KAPPA0, Delta=DELTA)
    return [S.interpolator_limit(alpha=f * a_i, kappa0=KAPPA0, Delta=DELTA) for f in BELOW]


def report(figure: bool) -> None:
    rows = _load()
    a_i = R.alpha_interp(kappa0=KAPPA0, Delta=DELTA)
    print(f"alpha_interp = {a_i:.10f}")
    print("| alpha | alpha/alpha_interp | test | train | q | m | Sigma | mse | rank | fitted |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in sorted((r for r in rows if r["lam"] == 0.0), key=lambda r: r["alpha"]):
        cells = " | ".join(f"{r[k]:.6g} +- {r[k + '_error']:.1e}"
                           for k in ("test", "train", "q", "m", "sigma", "mse", "rank", "fitted"))
        flag = "" if r["reliable"] == "True" else " (*)"
        print(f"| {r['alpha']:g} | {r['alpha'] / a_i:.4f} | {cells}{flag} |")
    print("\nfinite lambda:")
    for r in sorted((r for r in rows if r["lam"] > 0), key=lambda r: (r["alpha"], r["lam"])):
        print(f"  alpha={r['alpha']:g} lam={r['lam']:g} test={r['test']:.6f}+-"
              f"{r['test_error']:.1e} train={r['train']:.6g} q={r['q']:.6g} m={r['m']:.6g} "
              f"Sigma={r['sigma']:.6g}")
    print("\nlambda -> 0 extrapolation (1e-2, 3e-3, 1e-3) against lambda = 0:")
    for e in extrapolations(rows):
        print(f"  alpha={e['alpha']:g} {e['key']:6s} extrap {e['extrapolated']:.6g} +- "
              f"{e['extrapolated_error']:.1e}  lambda=0 {e['lambda0']:.6g} +- "
              f"{e['lambda0_error']:.1e}  diff {e['diff']:+.1e}  agree={e['agree']}  "
              f"truncation bar {e['truncation']:.1e} agree={e['agree_sharp']}")
    if figure:
        _figure(rows, below_curve(), a_i)


def _figure(rows: list[dict], below: list, a_i: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    xb = np.array([b.alpha for b in below])
    ax.plot(xb, [b.test for b in below], "k-", label=r"$\lambda\to0^+$: min-nuclear-norm "
            "interpolator")
    for lam, style in ((0.0, "ko"), (1e-3, "s"), (1e-2, "^")):
        pts = sorted((r for r in rows if r["lam"] == lam), key=lambda r: r["alpha"])
        if not pts:
            continue
        x = np.array([r["alpha"] for r in pts])
        y = np.array([r["test"] for r in pts])
        e = np.array([r["test_error"] for r in pts])
        label = r"$\lambda = 0$ SE" if lam == 0 else fr"$\lambda = {lam:g}$ SE"
        ax.errorbar(x, y, yerr=e, fmt=style + ("-" if lam == 0 else "--"), ms=4, capsize=2,
                    label=label)
    import erm_ridgeless_near as near  # the fixed-Sigma points (same folder)

    fixed = sorted((r for r in near._pairs() if r["label"].startswith("Sigma=")
                    and r["label"] not in near.COMPARISON_ONLY), key=lambda r: r["alpha"])
    ax.errorbar([r["alpha"] for r in fixed], [r["test"] for r in fixed],
                xerr=[r["errors"]["alpha"] for r in fixed],
                yerr=[r["errors"]["test"] for r in fixed], fmt="o", mfc="none", color="k",
                ms=4, capsize=2, label=r"$\lambda = 0$ SE at fixed $\Sigma$ (API only)")
    ax.axvline(a_i, color="0.6", lw=0.8, ls=":")
    zero = [r["alpha"] for r in rows if r["lam"] == 0.0] + [r["alpha"] for r in fixed]
    if zero:  # between alpha_interp and the first lambda = 0 point the SE was not resolved
        ax.axvspan(a_i, min(zero), color="0.9", label=r"$\lambda = 0$: not resolved (see text)")
    ax.plot([a_i], [below[-1].test], "r*", ms=10, label="peak 0.50110 (at alpha_interp)")
    ax.set_xscale("log")
    ax.set_xlabel(r"$\alpha$")
    ax.set_ylabel("test error (noisy label)")
    ax.set_title(r"ERM, T = 2, $\kappa_0 = \Delta = 0.5$: ridgeless curve")
    ax.legend(fontsize=7)
    fig.tight_layout()
    FIGURE.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(FIGURE, dpi=130)
    print(f"wrote {FIGURE}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", choices=("run", "report"))
    ap.add_argument("--budget", type=float, default=600.0)
    ap.add_argument("--figure", action="store_true")
    a = ap.parse_args()
    if a.mode == "run":
        run(a.budget)
    else:
        report(a.figure)


if __name__ == "__main__":
    main()
