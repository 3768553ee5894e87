"""The ERM test error at the interpolation threshold as lambda -> 0+ (issue 16 item 3, THEORY 3).

T = 2, kappa0 = 0.5, Delta = 0.5, beta = beta0 = 1: alpha_interp = 0.1534821028590800675735.
For alpha = f alpha_interp (f = 0.95, 1, 1.05) and lambda = 1e-1 ... 1e-5 the SE fixed point
(``numerics.erm_se.solve``: Gauss-Hermite orders 24/17, bar = difference x 17/7) is computed by
continuation in lambda (each point started from the previous lambda's fixed point).  Against it:
the lambda -> 0+ limit below and at the threshold, the minimum-nuclear-norm interpolator
(``numerics.erm_se.interpolator_limit``, spectral equations only), and at f = 1.02, 1.05 the
lambda = 0 SE (least squares, no interpolation).

    python benchmarks/erm_peak.py run --cache peak.json [--budget 200]   # resumable
    python benchmarks/erm_peak.py report --cache peak.json [--figure docs/figures/erm_peak.png]

``run`` stops after ``--budget`` seconds (between points) so that each process stays short on a
shared machine; run it again to continue.  ``report`` prints the table, the fits at
alpha_interp (test_0 - test = b lambda^p with test_0 the interpolator limit; test = A + B
log10(1/lambda)) and the local exponents between neighbouring lambdas.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import numpy as np
from aim_sym.numerics import erm_se as S

ALPHA_INTERP = 0.1534821028590800675735
KAPPA0, DELTA = 0.5, 0.5
FACTORS = (0.95, 1.0, 1.02, 1.05)
# computed in this order (continuation in lambda at each alpha)
POINTS = ([(1.0, lam) for lam in (1e-1, 3e-2, 1e-2, 3e-3, 1e-3, 3e-4, 1e-4)]
          + [(f, lam) for lam in (1e-2, 1e-3) for f in (0.95, 1.05)]
          + [(0.95, 1e-4), (1.05, 1e-4), (1.0, 3e-5), (1.05, 0.0), (1.02, 0.0), (1.0, 1e-5)])
RISING = 3e-3  # at alpha_interp the test error rises towards its limit for lambda <= this
KEYS = ("q", "m", "sigma", "q_hat", "m_hat", "sigma_hat", "train", "test", "mse", "rank")


def _key(f: float, lam: float) -> str:
    return f"{f:g}:{lam:g}"


def _load(path: Path) -> dict:
    return json.loads(path.read_text()) if path.exists() else {}


def _init(cache: dict, f: float, lam: float) -> tuple:
    """The fixed point at the same alpha and the nearest larger lambda, else the defaults."""
    prev = [(v["lam"], v) for v in cache.values() if v["factor"] == f and v["lam"] > lam]
    if not prev:  # the nearest alpha at the same lambda, else the defaults
        prev = [(abs(v["factor"] - f), v) for v in cache.values() if v["lam"] == lam]
    if not prev:
        return S.DEFAULT_INITS
    v = min(prev, key=lambda t: t[0])[1]
    Q0 = 1 + KAPPA0
    return ((v["q"] / Q0, v["m"] / Q0, v["sigma"]),)


def run(cache_path: Path, budget: float, only: str | None = None) -> None:
    cache = _load(cache_path)
    t0 = time.perf_counter()
    for f, lam in POINTS:
        if _key(f, lam) in cache or (only is not None and _key(f, lam) != only):
            continue
        if time.perf_counter() - t0 > budget:
            print("budget spent; run again to continue", flush=True)
            return
        p = S.ERMParams(alpha=f * ALPHA_INTERP, kappa0=KAPPA0, Delta=DELTA, lam=lam)
        t = time.perf_counter()
        fps = S.solve(p, inits=_init(cache, f, lam))
        best = next(x for x in fps if x.global_minimum)
        row = {"factor": f, "lam": lam, "alpha": p.alpha, "seconds": time.perf_counter() - t,
               "fixed_points": len(fps), **best.as_dict()}
        cache[_key(f, lam)] = row
        cache_path.write_text(json.dumps(cache, indent=1))
        print(f"f = {f:g}, lambda = {lam:g}: test {row['test']:.6f} +- {row['test_error']:.1e}"
              f", mse {row['mse']:.5f}, Sigma {row['sigma']:.4g}  ({row['seconds']:.0f} s)",
              flush=True)


CHECK_ORDER = 30


def check(cache_path: Path, only: str) -> None:
    """The fixed point of row ``only`` again at Gauss-Hermite order 30 (started from the
    order-24 one): stored as ``check30``; :func:`bar` then uses it."""
    cache = _load(cache_path)
    v = cache[only]
    p = S.ERMParams(alpha=v["alpha"], kappa0=KAPPA0, Delta=DELTA, lam=v["lam"])
    x, its, _ = S.fixed_point(p, q=v["q"], m=v["m"], sigma=v["sigma"], order=CHECK_ORDER)
    d = S._derived(p, x, CHECK_ORDER)
    v["check30"] = {"q": x[0], "m": x[1], "sigma": x[2], **d}
    cache_path.write_text(json.dumps(cache, indent=1))
    print(only, {k: (v[k], v["check30"][k]) for k in ("test", "mse", "sigma")}, flush=True)


def bar(row: dict, key: str) -> float:
    """The SE bar of ``key``: orders 24/17 (x 17/7); where the order-30 fixed point exists, at
    least 5 |x_30 - x_24| (the order-24 error if it falls as 1/n from 24 to 30): at
    lambda = 1e-4 the order-30 point moved the test error by 2.3 order-24/17 bars."""
    b = row[f"{key}_error"]
    if "check30" in row:
        b = max(b, 5 * abs(row["check30"][key] - row[key]))
    return b


def fit_power(lam: np.ndarray, test: np.ndarray, err: np.ndarray, test0: float) -> dict:
    """test0 - test = b lambda^p by least squares in logs; the parameter errors are
    the spread of the fits over the data moved by +-1 bar (each point alone) and over dropping
    one point (the model's local inadequacy)."""
    def one(x, y):
        A = np.vstack([np.log(x), np.ones_like(x)]).T
        (pw, lb), *_ = np.linalg.lstsq(A, np.log(y), rcond=None)
        return pw, math.exp(lb)

    y = test0 - test  # the gap to the limit (> 0 on the rising branch)
    p, b = one(lam, y)
    alts = []
    for i in range(len(lam)):
        for s in (-1, 1):
            yy = y.copy()
            yy[i] += s * err[i]
            if np.all(yy > 0):
                alts.append(one(lam, yy))
        keep = np.arange(len(lam)) != i
        if keep.sum() >= 2:
            alts.append(one(lam[keep], y[keep]))
    dp = max(abs(a[0] - p) for a in alts)
    db = max(abs(a[1] - b) for a in alts)
    return {"p": p, "p_error": dp, "b": b, "b_error": db}


def fit_log(lam: np.ndarray, test: np.ndarray, err: np.ndarray) -> dict:
    """test = A + B log10(1/lambda) by least squares; the parameter errors are the largest
    change over moving each point by +-1 bar and over dropping one point."""
    x = np.log10(1 / lam)

    def one(xx, yy):
        B, A = np.polyfit(xx, yy, 1)
        return B, A

    B, A = one(x, test)
    alts = []
    for i in range(len(x)):
        for s in (-1, 1):
            yy = test.copy()
            yy[i] += s * err[i]
            alts.append(one(x, yy))
        keep = np.arange(len(x)) != i
        if keep.sum() >= 2:
            alts.append(one(x[keep], test[keep]))
    resid = float(np.max(np.abs(test - (A + B * x)) / err))
    return {"B": B, "B_error": max(abs(a[0] - B) for a in alts), "A": A,
            "A_error": max(abs(a[1] - A) for a in alts), "max_residual_in_bars": resid}


def report(cache_path: Path, figure: Path | None) -> None:
    cache = _load(cache_path)
    rows = sorted(cache.values(), key=lambda r: (r["factor"], -r["lam"]))
    print("| alpha / alpha_interp | lambda | test | mse | Sigma | q | rank | lambda -> 0+ test |")
    print("|---|---|---|---|---|---|---|---|")
    limits = {}
    for f in FACTORS:
        if f <= 1:
            lim = S.interpolator_limit(alpha=f * ALPHA_INTERP, kappa0=KAPPA0, Delta=DELTA)
            limits[f] = (lim.test, lim.errors["test"], lim.mse)
    for r in rows:
        lim = limits.get(r["factor"])
        print(f"| {r['factor']:g} | {r['lam']:g} | {r['test']:.5f} +- {bar(r, 'test'):.1e} | "
              f"{r['mse']:.4f} +- {bar(r, 'mse'):.1e} | {r['sigma']:.4g} +- "
              f"{bar(r, 'sigma'):.1e} | {r['q']:.4f} | {r['rank']:.4f} | "
              + (f"{lim[0]:.6f}" if lim else "-") + " |")
    for f, (t0, e0, mse0) in limits.items():
        print(f"interpolator limit f = {f:g}: test {t0:.10f} +- {e0:.1e}, mse {mse0:.8f}")
    at = [r for r in rows if r["factor"] == 1.0 and 0 < r["lam"] <= RISING]
    if len(at) >= 3:
        lam = np.array([r["lam"] for r in at])
        fit = fit_power(lam, np.array([r["test"] for r in at]),
                        np.array([bar(r, "test") for r in at]), limits[1.0][0])
        print(f"fit at alpha_interp: test = {limits[1.0][0]:.6f} - ({fit['b']:.4f} +- "
              f"{fit['b_error']:.4f}) lambda^({fit['p']:.4f} +- {fit['p_error']:.4f})")
        fitm = fit_power(lam, np.array([r["mse"] for r in at]),
                         np.array([bar(r, "mse") for r in at]), limits[1.0][2])
        print(f"fit at alpha_interp: mse = {limits[1.0][2]:.6f} - ({fitm['b']:.4f} +- "
              f"{fitm['b_error']:.4f}) lambda^({fitm['p']:.4f} +- {fitm['p_error']:.4f})")
        fl = fit_log(lam, np.array([r["test"] for r in at]),
                     np.array([bar(r, "test") for r in at]))
        print(f"log fit at alpha_interp: test = ({fl['A']:.4f} +- {fl['A_error']:.4f}) + "
              f"({fl['B']:.4f} +- {fl['B_error']:.4f}) log10(1/lambda); largest residual "
              f"{fl['max_residual_in_bars']:.1f} bars; reaches the limit at lambda ~ 10^-"
              f"{(limits[1.0][0] - fl['A']) / fl['B']:.1f}")
        for a, b in zip(at[:-1], at[1:], strict=True):
            pe, pe_err = local_exponent(a, b, limits[1.0][0])
            print(f"local exponent lambda {a['lam']:g} -> {b['lam']:g}: "
                  f"{pe:.4f} +- {pe_err:.4f}")
    if figure is not None:
        _figure(rows, limits, figure)


def local_exponent(a: dict, b: dict, test0: float) -> tuple[float, float]:
    """p = d ln(test0 - test) / d ln(lambda) between two rows, with the bar from the two test
    bars added in quadrature (linearised)."""
    ga, gb = test0 - a["test"], test0 - b["test"]
    ln = math.log(a["lam"] / b["lam"])
    p = math.log(ga / gb) / ln
    return p, math.hypot(bar(a, "test") / ga, bar(b, "test") / gb) / ln


def _figure(rows: list, limits: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    for f, c in zip(FACTORS, ("C0", "C3", "C1", "C2"), strict=True):
        rr = [r for r in rows if r["factor"] == f and r["lam"] > 0]
        if not rr:
            continue
        lam = np.array([r["lam"] for r in rr])
        ax1.errorbar(lam, [r["test"] for r in rr], yerr=[bar(r, "test") for r in rr],
                     fmt="o-", color=c, label=f"alpha = {f:g} alpha_interp")
        zero = [r for r in rows if r["factor"] == f and r["lam"] == 0]
        lim = limits[f][0] if f in limits else (zero[0]["test"] if zero else None)
        if lim is not None:
            ax1.axhline(lim, color=c, ls=":", lw=1)
            d = np.abs(np.array([r["test"] for r in rr]) - lim)
            ax2.loglog(lam, d, "o-", color=c, label=f"f = {f:g}")
    ax1.set_xscale("log")
    ax1.set_xlabel("lambda")
    ax1.set_ylabel("test error")
    ax1.set_title("SE test error; dotted: lambda -> 0+ limit")
    ax1.legend(fontsize=8)
    ax2.set_xlabel("lambda")
    ax2.set_ylabel("|test - limit|")
    ax2.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", choices=("run", "check", "report"))
    ap.add_argument("--cache", type=Path, required=True)
    ap.add_argument("--budget", type=float, default=200.0)
    ap.add_argument("--figure", type=Path, default=None)
    ap.add_argument("--only", default=None, help="run only this point, 'factor:lambda'")
    a = ap.parse_args()
    if a.mode == "run":
        run(a.cache, a.budget, a.only)
    elif a.mode == "check":
        check(a.cache, a.only)
    else:
        report(a.cache, a.figure)


if __name__ == "__main__":
    main()
