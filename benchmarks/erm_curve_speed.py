"""ERM T = 2: time and accuracy of an alpha curve by three routes (issue 16, item 6).

Routes, each on the same alphas (kappa0 = Delta = 0.5, lambda = 0.01 unless given):

* ``gh``: the engine, ``numerics.erm_se.solve`` with the tensor Gauss-Hermite output side
  (orders 24/17, bar = difference x 17/7), continuation along alpha (each point started from
  the previous fixed point, as ``ERM.curve``).
* ``split``: the engine with the piecewise output rule (``rule="split"``, outer orders 16/12,
  bar = difference x split_factor), continuation along alpha.
* ``mc``: the authors' kind of Monte Carlo SE (``erm_se_vs_montecarlo.mc_fixed_point``): 1000
  fresh samples per iteration, damped iteration (damping 0.8), 100 iterations, from the middle
  start; test error at its (q, m) by the trapezoidal rule, training loss with a 1000-sample
  envelope.  Its error: the rms over ``--seeds`` seeds of the distance to the reference.

Reference at each alpha: the ``split`` value when that route runs, else the ``gh`` value.
Printed per route: seconds per point (and for the whole curve), and the largest relative
distance to the reference of test and train (and q), beside the route's own largest relative
bar.  All timings are wall-clock on whatever cores the machine gives one process.

    python benchmarks/erm_curve_speed.py --points 32 --routes gh,mc [--out f.json]
"""

from __future__ import annotations

import argparse
import json
import math
import time

import numpy as np
from aim_sym.numerics import erm_output, erm_se
from aim_sym.numerics.erm_spectral import spectral_integrals
from aim_sym.numerics.records import ConvergenceError
from erm_se_vs_montecarlo import mc_fixed_point

KEYS = ("q", "test", "train")


def engine_curve(alphas, base: dict, rule: str) -> list[dict]:
    """The global-minimum branch over ``alphas`` by continuation; per point its values, bars
    and seconds."""
    out, prev = [], None
    for a in alphas:
        p = erm_se.ERMParams(alpha=a, **base)
        t0 = time.perf_counter()
        inits = None if prev is None else ((prev.q / p.Q0, prev.m / p.Q0, prev.sigma),)
        try:
            fps = erm_se.solve(p, inits=inits, rule=rule)
        except ConvergenceError:
            fps = erm_se.solve(p, rule=rule)
        prev = next(f for f in fps if f.global_minimum)
        row = {"alpha": a, "seconds": time.perf_counter() - t0}
        row.update({k: getattr(prev, k) for k in KEYS})
        row.update({f"{k}_error": prev.errors[k] for k in KEYS})
        out.append(row)
        print(f"  {rule:5s} alpha = {a:.4f}: q = {prev.q:.7f} +- {prev.errors['q']:.1e}, test = "
              f"{prev.test:.7f} +- {prev.errors['test']:.1e}, train = {prev.train:.7f} +- "
              f"{prev.errors['train']:.1e} ({row['seconds']:.1f} s)", flush=True)
    return out


def mc_point(a: float, base: dict, seed: int, samples: int, iterations: int) -> dict:
    """One Monte Carlo SE run at ``a`` and its q, test error and training loss."""
    p = erm_se.ERMParams(alpha=a, **base)
    t0 = time.perf_counter()
    q, m, sigma, q_hat, m_hat, sigma_hat = mc_fixed_point(
        p, start=(0.6 * p.Q0, 0.5 * p.Q0, 2.0), samples=samples, iterations=iterations,
        damping=0.8, seed=seed)
    rng = np.random.default_rng(10_000 + seed)
    cov = np.kron(np.array([[p.Q0n, m], [m, q]]), erm_output._G)
    pts = np.linalg.cholesky(cov) @ rng.normal(size=(4, samples))
    _, fmin = erm_output.prox_step(pts[2:], erm_output._sigmoid(p.beta0 * pts[:2]), sigma=sigma,
                                   beta=p.beta, beta0=p.beta0)
    s = spectral_integrals(kappa0=p.kappa0, delta=math.sqrt(q_hat) / m_hat,
                                  eps=2 * p.lam / m_hat)
    train = ((q_hat * sigma - sigma_hat * q) / 4 + m_hat * m / 2 + p.alpha * float(fmin.mean())
             - m_hat * m_hat * s.J / (4 * sigma_hat))
    test = erm_output.generalisation_error(q=q, m=m, Q0n=p.Q0n, beta=p.beta, beta0=p.beta0)
    return {"q": q, "test": test, "train": train, "seconds": time.perf_counter() - t0}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--points", type=int, default=32)
    ap.add_argument("--alpha-min", type=float, default=0.2)
    ap.add_argument("--alpha-max", type=float, default=0.6)
    ap.add_argument("--kappa0", type=float, default=0.5)
    ap.add_argument("--Delta", type=float, default=0.5)
    ap.add_argument("--lam", type=float, default=0.01)
    ap.add_argument("--routes", default="gh,split,mc")
    ap.add_argument("--samples", type=int, default=1000)
    ap.add_argument("--iterations", type=int, default=100)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    alphas = np.linspace(a.alpha_min, a.alpha_max, a.points).tolist()
    base = {"kappa0": a.kappa0, "Delta": a.Delta, "lam": a.lam}
    routes = a.routes.split(",")
    res: dict = {"alphas": alphas, "parameters": base}
    for rule in ("gh", "split"):
        if rule in routes:
            print(f"engine, output rule {rule}:", flush=True)
            res[rule] = engine_curve(alphas, base, rule)
    if "mc" in routes:
        print(f"Monte Carlo SE ({a.samples} samples x {a.iterations} iterations, "
              f"{a.seeds} seeds):", flush=True)
        res["mc"] = [[mc_point(x, base, s, a.samples, a.iterations) for s in range(a.seeds)]
                     for x in alphas]
    ref_name = "split" if "split" in res else "gh"
    ref = res.get(ref_name)
    print(f"\nsummary ({a.points} points, alpha in [{a.alpha_min}, {a.alpha_max}]; reference: "
          f"{ref_name})")
    for name in ("gh", "split", "mc"):
        if name not in res:
            continue
        rows = res[name]
        if name == "mc":
            secs = sum(r["seconds"] for runs in rows for r in runs) / a.seeds
            dist = {k: max(math.sqrt(np.mean([(r[k] - ref[i][k]) ** 2 for r in runs]))
                           / abs(ref[i][k]) for i, runs in enumerate(rows)) if ref else math.nan
                    for k in KEYS}
            bars = {k: math.nan for k in KEYS}
        else:
            secs = sum(r["seconds"] for r in rows)
            dist = {k: max(abs(r[k] - ref[i][k]) / abs(ref[i][k]) for i, r in enumerate(rows))
                    for k in KEYS} if ref and name != ref_name else {k: math.nan for k in KEYS}
            bars = {k: max(r[f"{k}_error"] / abs(r[k]) for r in rows) for k in KEYS}
        res[f"{name}_summary"] = {"seconds": secs, "distance": dist, "bar": bars}
        print(f"  {name:5s} {secs:8.1f} s ({secs / a.points:.1f} s per point); largest relative "
              "distance to the reference / own bar: " + ", ".join(
                  f"{k} {dist[k]:.1e} / {bars[k]:.1e}" for k in KEYS))
    if a.out:
        with open(a.out, "w") as fh:
            json.dump(res, fh, indent=1)


if __name__ == "__main__":
    main()
