"""The interpolation threshold of ERM at the SE level for T >= 3 tokens (THEORY 3; issue 16).

alpha_interp(T) = 2 alpha_bar_interp / (T^2 + T - 2) is a closed-form root (lambda -> 0+,
:func:`numerics.erm_thresholds.interpolation_threshold`).  Here the T = 3 state evolution
(randomised QMC output side, :func:`numerics.erm_se.solve`) is solved at small lambda on both
sides of it: below alpha_interp the training loss (regulariser included) must vanish as
lambda -> 0+ (train = O(lambda), Sigma ~ 1/lambda), above it stay O(1).  Two lambdas per alpha
show train / lambda.  Independent route below the threshold: the closed lambda -> 0+ limit of
the SE (:func:`numerics.erm_se.interpolator_limit`: q, m, rank, lambda Sigma = alpha fac eps),
which the finite-lambda SE must approach.

The alpha_bar scaling: at the same alpha_bar = alpha (T^2 + T - 2)/2 below alpha_bar_interp the
T = 2 and T = 3 SE at the same lambda are compared in q, m, lambda Sigma, train / lambda and
rank (alpha_bar-only as lambda -> 0+; at finite lambda they differ by O(lambda)).

    python benchmarks/erm_interp_tokens.py [--ratios 0.8,1.2] [--lams 1e-3,1e-4] [--scaling]
        [--seed 0] [--out results.json]

Above the threshold a single-replicate QMC map can have no exact fixed point (one node's prox
switches branch across it); :func:`numerics.erm_se.solve_tokens` then solves it as a cycle of
the chord iteration and widens the bar by the cycle's spread (``*_floor``,
``switching_replicates``).  ``loss`` is the training loss without the regulariser (train =
loss + lambda N, :func:`split_train`): an upper bound on train(lambda -> 0+).

Each T = 3 point is started from one point only (the interpolator limit below the threshold,
the SE's middle start above), to keep the cost at one QMC fixed point (2-5 minutes on two
shared cores); the other fixed points the default starts might reach are not searched.
"""

from __future__ import annotations

import argparse
import json
import math
import time

from aim_sym.numerics import erm_se
from aim_sym.numerics.erm_spectral import spectral_integrals
from aim_sym.numerics.erm_thresholds import alpha_bar_factor, interpolation_threshold
from aim_sym.numerics.records import ConvergenceError

KAPPA0, DELTA = 0.5, 0.5
KEYS = ("q", "m", "sigma", "q_hat", "m_hat", "sigma_hat", "train", "test", "mse", "rank")


def alpha_interp(tokens: int, *, kappa0: float = KAPPA0, Delta: float = DELTA) -> float:
    """alpha_interp(T) from the closed-form root (double precision)."""
    return float(interpolation_threshold(kappa0=kappa0, Delta=Delta, tokens=tokens,
                                         dps=None).value)


def start_point(*, tokens: int, alpha: float, lam: float, kappa0: float = KAPPA0,
                Delta: float = DELTA) -> tuple[float, float, float]:
    """(q/Q0, m/Q0, Sigma) to start from: the lambda -> 0+ limit below alpha_interp (Sigma =
    alpha fac eps / lambda), the SE's middle default start above."""
    if alpha < alpha_interp(tokens, kappa0=kappa0, Delta=Delta):
        lim = erm_se.interpolator_limit(alpha=alpha, kappa0=kappa0, Delta=Delta, tokens=tokens)
        Q0 = 1 + kappa0
        fac = alpha_bar_factor(tokens)
        return lim.q / Q0, lim.m / Q0, max(alpha * fac * lim.eps / lam, 10.0)
    return erm_se.DEFAULT_INITS[1]


def se_point(*, tokens: int, alpha: float, lam: float, kappa0: float = KAPPA0,
             Delta: float = DELTA, qmc_points: int = 2**11, qmc_replicates: int = 16,
             qmc_seed: int = 0, inits: tuple | None = None) -> dict:
    """The SE fixed point (global minimum of the starts) at one (T, alpha, lambda): every
    quantity with its ``*_error`` (T >= 3: 3 QMC standard errors; T = 2: orders 24/17), plus
    ``seconds``, ``alpha_bar``, ``lam_sigma`` and ``train_over_lam`` with their bars, the
    switching floor ``*_floor`` inside each bar and ``switching_replicates`` (T >= 3: replicate
    maps with no exact fixed point, solved as a cycle across a switching surface)."""
    p = erm_se.ERMParams(alpha=alpha, kappa0=kappa0, Delta=Delta, lam=lam, tokens=tokens,
                         qmc_points=qmc_points, qmc_replicates=qmc_replicates, qmc_seed=qmc_seed)
    if inits is None:
        inits = (start_point(tokens=tokens, alpha=alpha, lam=lam, kappa0=kappa0, Delta=Delta),)
    t = time.perf_counter()
    fps = erm_se.solve(p, inits=inits)
    sec = time.perf_counter() - t
    fp = next(f for f in fps if f.global_minimum)
    best = fp.as_dict()
    row = {"tokens": tokens, "alpha": alpha, "alpha_bar": alpha * alpha_bar_factor(tokens),
           "lam": lam, "seed": qmc_seed, "seconds": sec, "fixed_points": len(fps),
           "residual": fp.residual,
           "switching_replicates": fp.errors.get("switching_replicates", 0),
           "switching_pooled": fp.errors.get("switching_pooled", 0),
           **{k: best[k] for k in KEYS}, **{f"{k}_error": best[f"{k}_error"] for k in KEYS},
           **{f"{k}_floor": fp.errors.get(f"{k}_floor", 0.0) for k in KEYS}}
    row.update(lam_sigma=lam * best["sigma"], lam_sigma_error=lam * best["sigma_error"],
               train_over_lam=best["train"] / lam, train_over_lam_error=best["train_error"] / lam)
    row.update(split_train(row, kappa0=kappa0))
    return row


def nuclear_norm(q_hat: float, m_hat: float, sigma_hat: float, *, lam: float,
                 kappa0: float = KAPPA0) -> float:
    """||S_hat||_* / d = eta int (x - eps)_+ dmu_delta (THEORY 3, learned spectrum)."""
    s = spectral_integrals(kappa0=kappa0, delta=math.sqrt(q_hat) / m_hat, eps=2 * lam / m_hat)
    return m_hat / sigma_hat * float(s.first)


def split_train(row: dict, *, kappa0: float = KAPPA0) -> dict:
    """The training loss split as train = loss + lambda N (THEORY 3: the data term alpha E[L]
    at the prox and the regulariser lambda ||S||_* / d; the identity holds at a fixed point,
    checked to 1e-12 at T = 3).  N from the hats, its bar the hats' bars carried linearly
    (sum of |dN/dh| err_h, central differences); loss = train - lambda N with bar
    train_error + lambda N_error.  lambda -> 0+: loss is nondecreasing and N nonincreasing in
    lambda, so train(0+) <= loss(lambda) at every lambda."""
    lam = row["lam"]
    h = [row["q_hat"], row["m_hat"], row["sigma_hat"]]
    nuc = nuclear_norm(*h, lam=lam, kappa0=kappa0)
    err = 0.0
    for k, name in enumerate(("q_hat", "m_hat", "sigma_hat")):
        step = 1e-4 * h[k]
        up, dn = list(h), list(h)
        up[k] += step
        dn[k] -= step
        slope = (nuclear_norm(*up, lam=lam, kappa0=kappa0)
                 - nuclear_norm(*dn, lam=lam, kappa0=kappa0)) / (2 * step)
        err += abs(slope) * row[f"{name}_error"]
    return {"nuclear": nuc, "nuclear_error": err, "loss": row["train"] - lam * nuc,
            "loss_error": row["train_error"] + lam * err}


def limit_point(*, tokens: int, alpha: float, kappa0: float = KAPPA0,
                Delta: float = DELTA) -> dict:
    """The lambda -> 0+ limit (independent route): q, m, rank, lam_sigma = alpha fac eps."""
    lim = erm_se.interpolator_limit(alpha=alpha, kappa0=kappa0, Delta=Delta, tokens=tokens)
    fac = alpha_bar_factor(tokens)
    return {"tokens": tokens, "alpha": alpha, "q": lim.q, "q_error": lim.errors["q"],
            "m": lim.m, "m_error": lim.errors["m"], "rank": lim.rank,
            "rank_error": lim.errors["rank"], "test": lim.test, "test_error": lim.errors["test"],
            "lam_sigma": alpha * fac * lim.eps, "lam_sigma_error": alpha * fac * lim.errors["eps"]}


def _fmt(row: dict, k: str) -> str:
    return f"{row[k]:.6g} +- {row.get(k + '_error', 0.0):.2g}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=3)
    ap.add_argument("--ratios", default="0.8,1.2", help="alpha / alpha_interp(T), comma-separated")
    ap.add_argument("--lams", default="1e-3,1e-4", help="weight decays, comma-separated")
    ap.add_argument("--scaling", action="store_true",
                    help="also T = 2 at the same alpha_bar (ratios < 1, lambda = 1e-3 only)")
    ap.add_argument("--seed", type=int, default=0, help="QMC seed of the T >= 3 points")
    ap.add_argument("--out", default=None, help="write every row as JSON")
    a = ap.parse_args()
    rows = []
    ratios = [float(r) for r in a.ratios.split(",")]
    lams = [float(v) for v in a.lams.split(",")]
    a_int = alpha_interp(a.tokens)
    print(f"alpha_interp(T = {a.tokens}) = {a_int:.7f}", flush=True)
    print("T  alpha/a_int  alpha  lambda  train  loss  test  train/lambda  lambda*Sigma  "
          "switching  seconds")
    for r in ratios:
        for lam in lams:
            try:
                row = se_point(tokens=a.tokens, alpha=r * a_int, lam=lam, qmc_seed=a.seed)
            except ConvergenceError as e:
                print(f"{a.tokens}  {r:g}  {lam:g}  no fixed point: {e}", flush=True)
                continue
            row["ratio"] = r
            rows.append(row)
            print(f"{a.tokens}  {r:g}  {row['alpha']:.6g}  {lam:g}  {_fmt(row, 'train')}  "
                  f"{_fmt(row, 'loss')}  {_fmt(row, 'test')}  {_fmt(row, 'train_over_lam')}  "
                  f"{_fmt(row, 'lam_sigma')}  {row['switching_replicates']}  "
                  f"{row['seconds']:.0f}", flush=True)
        if r < 1:
            lim = limit_point(tokens=a.tokens, alpha=r * a_int)
            lim.update(ratio=r, lam=0.0)
            rows.append(lim)
            print(f"{a.tokens}  {r:g}  lambda -> 0+ limit: q {_fmt(lim, 'q')}, m {_fmt(lim, 'm')},"
                  f" lambda*Sigma {_fmt(lim, 'lam_sigma')}, test {_fmt(lim, 'test')}", flush=True)
    if a.scaling:
        a2 = alpha_interp(2)
        for r in (r for r in ratios if r < 1):
            row = se_point(tokens=2, alpha=r * a2, lam=1e-3)
            row["ratio"] = r
            rows.append(row)
            print(f"2  {r:g}  {row['alpha']:.6g}  1e-3  {_fmt(row, 'train')}  "
                  f"{_fmt(row, 'test')}  {_fmt(row, 'train_over_lam')}  "
                  f"{_fmt(row, 'lam_sigma')}  {row['seconds']:.0f}", flush=True)
    if a.out:
        with open(a.out, "w") as fh:
            json.dump(rows, fh, indent=1)


if __name__ == "__main__":
    main()
