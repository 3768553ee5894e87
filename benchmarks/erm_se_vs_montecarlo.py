"""ERM state evolution (T = 2, THEORY 3): the deterministic engine against the authors' kind of
Monte Carlo SE, side by side at a few alphas (issue 16, item 6; measured, not extrapolated).

Engine: ``numerics.erm_se.solve`` (tensor Gauss-Hermite output side, orders 24/17, exact
spectral derivatives; error = difference of the two orders), all default starts.
Monte Carlo route (as in the authors' code): the same SE map with the output expectations
replaced by ``--samples`` fresh Gaussian samples per iteration, a damped iteration
(new = (1 - damping) map + damping old, damping 0.8) for ``--iterations`` steps; its accuracy is
its distance to the engine's fixed point (whose own bar is printed beside it).  With
``--reference DIR`` (the authors' SE folder) their published values are printed too.

    python benchmarks/erm_se_vs_montecarlo.py --alphas 0.2,0.5 [--reference DIR] [--out f.json]
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import time

import numpy as np
from aim_sym.numerics import erm_output, erm_se

KEYS = ("q", "m", "sigma", "q_hat", "m_hat", "sigma_hat")


def mc_hats(q, m, sigma, p, rng, samples):
    """The output side by Monte Carlo: (ell, omega) ~ N(0, C kron G), ``samples`` draws."""
    cov = np.kron(np.array([[p.Q0n, m], [m, q]]), erm_output._G)
    pts = np.linalg.cholesky(cov) @ rng.normal(size=(4, samples))
    ell, omega = pts[:2], pts[2:]
    v, _ = erm_output.prox_step(omega, erm_output._sigmoid(p.beta0 * ell), sigma=sigma,
                                beta=p.beta, beta0=p.beta0)
    d = v - omega
    w = erm_output._GINV @ d
    den = sigma * (p.Q0n * q - m * m)
    return (2 * p.alpha * np.mean(np.einsum("in,in->n", d, w)) / sigma**2,
            2 * p.alpha * np.mean(np.einsum("in,in->n", w, q * ell - m * omega)) / den,
            -2 * p.alpha * np.mean(np.einsum("in,in->n", w, p.Q0n * omega - m * ell)) / den)


def mc_fixed_point(p, *, start, samples, iterations, damping, seed):
    rng = np.random.default_rng(seed)
    q, m, sigma = start
    for _ in range(iterations):
        hats = mc_hats(q, m, sigma, p, rng, samples)
        nq, nm, ns, _ = erm_se.overlaps_from_hats(*hats, p)
        q = (1 - damping) * nq + damping * q
        m = (1 - damping) * nm + damping * m
        sigma = (1 - damping) * ns + damping * sigma
        m = max(min(m, 0.999 * math.sqrt(p.Q0n * q)), -0.999 * math.sqrt(p.Q0n * q))
    return (q, m, sigma, *hats)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--alphas", default="0.2,0.5")
    ap.add_argument("--kappa0", type=float, default=0.5)
    ap.add_argument("--Delta", type=float, default=0.5)
    ap.add_argument("--lam", type=float, default=0.01)
    ap.add_argument("--samples", type=int, default=1000)
    ap.add_argument("--iterations", type=int, default=100)
    ap.add_argument("--seeds", type=int, default=4)
    ap.add_argument("--reference", default=None, help="folder of the authors' SE_*.csv files")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    ref = {}
    if a.reference:
        name = f"SE_kappa_{a.kappa0:g}_lreg_{a.lam:g}_noise_{a.Delta:g}.csv"
        with open(os.path.join(a.reference, name)) as fh:
            ref = {float(r["alpha"]): r for r in csv.DictReader(fh)}
    out = []
    for alpha in (float(x) for x in a.alphas.split(",")):
        p = erm_se.ERMParams(alpha=alpha, kappa0=a.kappa0, Delta=a.Delta, lam=a.lam)
        t0 = time.perf_counter()
        fp = next(f for f in erm_se.solve(p) if f.global_minimum)
        t_engine = time.perf_counter() - t0
        eng = [getattr(fp, k) for k in KEYS]
        runs, t_mc = [], 0.0
        for seed in range(a.seeds):
            t0 = time.perf_counter()
            runs.append(mc_fixed_point(p, start=(0.6 * p.Q0, 0.5 * p.Q0, 2.0),
                                       samples=a.samples, iterations=a.iterations,
                                       damping=0.8, seed=seed))
            t_mc += time.perf_counter() - t0
        runs = np.array(runs)
        row = {"alpha": alpha, "engine_s": t_engine, "mc_s_per_run": t_mc / a.seeds}
        for i, k in enumerate(KEYS):
            row[k] = eng[i]
            row[f"{k}_error"] = fp.errors[k]
            row[f"{k}_mc_rms_rel"] = float(np.sqrt(np.mean((runs[:, i] - eng[i]) ** 2))
                                           / abs(eng[i]))
        near = min(ref, key=lambda x: abs(x - alpha)) if ref else None
        if near is not None and abs(near - alpha) < 1e-9:
            row.update({f"{k}_reference": float(ref[near][k]) for k in KEYS})
        out.append(row)
        print(f"alpha = {alpha}: engine {t_engine:.1f} s, Monte Carlo {t_mc / a.seeds:.1f} s "
              f"per run ({a.samples} samples x {a.iterations} iterations)")
        for k in KEYS:
            extra = f"  reference {row[k + '_reference']:.6g}" if k + "_reference" in row else ""
            print(f"  {k:9s} {row[k]:.6g} +- {row[k + '_error']:.1e}   Monte Carlo rms "
                  f"{row[k + '_mc_rms_rel']:.1e} relative{extra}")
    if a.out:
        with open(a.out, "w") as fh:
            json.dump(out, fh, indent=1)


if __name__ == "__main__":
    main()
