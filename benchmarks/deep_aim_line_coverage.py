"""Do the line inner rule's bars cover at skip c < 1? A coverage study over seeds (issue 17;
docs/deep_aim.md section 4, "Inner rule at c < 1"; THEORY 1.6).

One SE step's output side, E_1, E_2 and the cross term E[g_1 . g_2] (``output_overlaps``, the
line rule, 2^m Sobol points x 8 scrambles, bars COVERAGE = 2.5 standard errors over scrambles + the
two-step rule difference), at fixed V = (V1, V2) (overlaps q_l = Q0_l - V_l), for many independent
seeds. For each quantity: the spread of the values over seeds divided by the RMS of the standard
errors each run reports over its scrambles (95 % chi-square interval), the normalised errors
(value - pooled mean) / standard error against Student t with scrambles - 1 degrees of freedom
(Kolmogorov-Smirnov), and the fraction of runs whose reported bar covers the pooled mean against
the Student-t coverage of 2.5 standard errors. Optionally the pooled mean against seeded plain
Monte Carlo of the same step (``se_step_mc`` at n and 4 n inner draws, extrapolated in 1/n as in
benchmarks/deep_aim_small_skip.py).

Collect (written atomically after every seed; rerunning skips the seeds already in the file):

    python benchmarks/deep_aim_line_coverage.py --v 0.1,0.03 --m 6 --seeds 0:40 --out cov.json

Summarise one or more files (merged by seed, same options required):

    python benchmarks/deep_aim_line_coverage.py --summary cov.json [more.json ...]

Monte Carlo of the same step (appended to the file as "mc"):

    python benchmarks/deep_aim_line_coverage.py --v 0.3,0.2 --mc --mc-samples 20000
        --mc-inner 2000 --mc-seed 31 --out cov.json

Timings in the records are upper bounds (shared machine).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

import numpy as np
from aim_sym.numerics import deep_aim_se as ds
from scipy import stats

QUANTITIES = ("E1", "E2", "cross")


def _pair(text: str) -> tuple[float, float]:
    """'a,b' -> (a, b)."""
    a, b = (float(s) for s in text.split(","))
    return a, b


def _seeds(text: str) -> range:
    """'a:b' -> range(a, b)."""
    a, b = (int(s) for s in text.split(":"))
    return range(a, b)


def one_seed(model: ds.DeepAimSE, v: tuple[float, float], *, m: int, scrambles: int,
             seed: int) -> dict:
    """The reported value, standard error, rule difference and bar of each of QUANTITIES at
    V = ``v`` for one seed, with the per-scramble values."""
    t0 = time.perf_counter()
    r = ds.output_overlaps(model, q1=model.q0[0] - v[0], q2=model.q0[1] - v[1], m=m,
                           scrambles=scrambles, seed=seed)
    rec = {"seed": seed, "seconds": time.perf_counter() - t0}
    for k in QUANTITIES:
        e = r[k]
        rec[k] = {"value": e.value, "error": e.error,
                  "standard_error": e.extra["standard_error"],
                  "rule_error": e.extra["rule_error"], "per_scramble": e.extra["per_scramble"]}
    return rec


def summarise(records: list[dict], scrambles: int, level: float = 0.95) -> dict:
    """Per quantity: n, pooled mean and its standard error (sd over seeds / sqrt n), sd over seeds,
    RMS reported standard error, their ratio with its chi-square interval at ``level`` (n - 1
    degrees of freedom) and its interval by resampling seeds (2000 times), the KS p-value of
    (value - pooled mean) / standard error against Student t(scrambles - 1), the fraction of bars
    covering the pooled mean (binomial standard error) against the Student-t coverage of COVERAGE
    standard errors, the RMS rule difference, the largest |normalised error|, the skewness and
    excess kurtosis of the per-scramble values (all seeds' scrambles are independent draws of one
    law) and the runs missing above and below."""
    out = {}
    dof = scrambles - 1
    nominal = 2.0 * stats.t.cdf(ds.COVERAGE, dof) - 1.0
    for k in QUANTITIES:
        v = np.array([r[k]["value"] for r in records])
        se = np.array([r[k]["standard_error"] for r in records])
        err = np.array([r[k]["error"] for r in records])
        rule = np.array([r[k]["rule_error"] for r in records])
        n = v.size
        mean, sd = float(v.mean()), float(v.std(ddof=1))
        rms = float(np.sqrt(np.mean(se**2)))
        ratio = sd / rms
        lo, hi = (math.sqrt((n - 1) / stats.chi2.ppf(p, n - 1))
                  for p in (1 - (1 - level) / 2, (1 - level) / 2))
        t = (v - mean) / se
        # resampling seeds: an interval for the ratio that does not assume normal values
        idx = np.random.default_rng(0).integers(0, n, size=(2000, n))
        boot = v[idx].std(axis=1, ddof=1) / np.sqrt(np.mean(se[idx] ** 2, axis=1))
        covered = float(np.mean(np.abs(v - mean) <= err))
        # the scrambles of all seeds are independent draws of one per-scramble law
        ps = np.array([r[k]["per_scramble"] for r in records]).ravel()
        out[k] = {"n": n, "pooled_mean": mean, "pooled_mean_se": sd / math.sqrt(n),
                  "sd_over_seeds": sd, "rms_standard_error": rms, "ratio": ratio,
                  "ratio_interval": [ratio * lo, ratio * hi],
                  "ratio_bootstrap_interval": [float(x) for x in
                                               np.quantile(boot, [(1 - level) / 2,
                                                                  (1 + level) / 2])],
                  "ks_p_student_t": float(stats.kstest(t, stats.t(dof).cdf).pvalue),
                  "max_abs_normalised": float(np.max(np.abs(t))),
                  "per_scramble_skewness": float(stats.skew(ps)),
                  "per_scramble_excess_kurtosis": float(stats.kurtosis(ps)),
                  "misses_above": int(np.sum(v - mean > err)),
                  "misses_below": int(np.sum(mean - v > err)),
                  "coverage": covered, "coverage_se": math.sqrt(covered * (1 - covered) / n),
                  "nominal_coverage": nominal,
                  "coverage_without_rule": float(np.mean(np.abs(v - mean) <= ds.COVERAGE * se)),
                  "rms_rule_error": float(np.sqrt(np.mean(rule**2))),
                  "mean_seconds": float(np.mean([r["seconds"] for r in records]))}
    return out


def _write(path: str, data: dict) -> None:
    """Write ``data`` as JSON atomically."""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(data, f, indent=1)
    os.replace(tmp, path)


def _mc(model: ds.DeepAimSE, v: tuple[float, float], *, samples: int, inner: int,
        seed: int) -> dict:
    """E_1, E_2, E12 by ``se_step_mc`` at ``inner`` and 4 ``inner`` draws (seeds seed, seed + 1),
    extrapolated (4 E(4 n) - E(n)) / 3 with the standard error of that combination."""
    q1, q2 = model.q0[0] - v[0], model.q0[1] - v[1]
    t0 = time.perf_counter()
    lo = ds.se_step_mc(model, alpha=1.0, q1=q1, q2=q2, samples=samples, inner=inner, seed=seed)
    hi = ds.se_step_mc(model, alpha=1.0, q1=q1, q2=q2, samples=samples, inner=4 * inner,
                       seed=seed + 1)
    out = {"samples": samples, "inner": inner, "seed": seed,
           "seconds": time.perf_counter() - t0}
    for k, key in (("E1", "E1"), ("E2", "E2"), ("cross", "E12")):
        out[k] = {"n": [lo[key].value, lo[key].error], "4n": [hi[key].value, hi[key].error],
                  "extrapolated": [(4 * hi[key].value - lo[key].value) / 3,
                                   math.hypot(4 * hi[key].error, lo[key].error) / 3]}
    return out


def main() -> None:
    """Command line (module docstring)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--skip", type=float, default=0.5)
    p.add_argument("--rho", type=_pair, default=(0.5, 0.5))
    p.add_argument("--beta", type=float, default=1.0)
    p.add_argument("--v", type=_pair, default=(0.1, 0.03), help="V1,V2")
    p.add_argument("--m", type=int, default=6, help="2^m Sobol points per scramble")
    p.add_argument("--scrambles", type=int, default=8)
    p.add_argument("--seeds", type=_seeds, default=range(0, 20), help="a:b, seeds a..b-1")
    p.add_argument("--out", help="JSON file (records, options, summary, mc)")
    p.add_argument("--summary", nargs="+", help="summarise these files")
    p.add_argument("--mc", action="store_true", help="seeded Monte Carlo of the same step")
    p.add_argument("--mc-samples", type=int, default=20000)
    p.add_argument("--mc-inner", type=int, default=2000)
    p.add_argument("--mc-seed", type=int, default=31)
    a = p.parse_args()
    if a.summary:
        recs, opts, mcs = {}, None, []
        for path in a.summary:
            with open(path) as f:
                d = json.load(f)
            if opts is not None and d["options"] != opts:
                sys.exit(f"--summary: {path} has options {d['options']}, not {opts}")
            opts = d["options"]
            recs.update({r["seed"]: r for r in d.get("records", [])})
            mcs += d.get("mc", [])
        res = {"options": opts, "summary": summarise(list(recs.values()), opts["scrambles"]),
               "mc": mcs}
        print(json.dumps(res, indent=1))
        return
    model = ds.DeepAimSE(skip=a.skip, rho1=a.rho[0], rho2=a.rho[1], beta=a.beta)
    opts = {"skip": a.skip, "rho": list(a.rho), "beta": a.beta, "v": list(a.v), "m": a.m,
            "scrambles": a.scrambles, "inner": model.inner, "coverage": ds.COVERAGE,
            "steps": list(ds.INNER_STEPS)}
    data = {"options": opts, "records": [], "mc": []}
    if a.out and os.path.exists(a.out):
        with open(a.out) as f:
            data = json.load(f)
        if data["options"] != opts:
            sys.exit(f"--out: {a.out} holds options {data['options']}, not {opts}")
    if a.mc:
        data["mc"].append(_mc(model, a.v, samples=a.mc_samples, inner=a.mc_inner,
                              seed=a.mc_seed))
        print(json.dumps(data["mc"][-1]), flush=True)
        if a.out:
            _write(a.out, data)
        return
    done = {r["seed"] for r in data["records"]}
    for s in a.seeds:
        if s in done:
            continue
        rec = one_seed(model, a.v, m=a.m, scrambles=a.scrambles, seed=s)
        data["records"].append(rec)
        print(json.dumps({"seed": s, "seconds": round(rec["seconds"], 2),
                          **{k: [rec[k]["value"], rec[k]["standard_error"]] for k in QUANTITIES}}),
              flush=True)
        if a.out:
            _write(a.out, data)
    if len(data["records"]) >= 3:
        data["summary"] = summarise(data["records"], a.scrambles)
        print(json.dumps(data["summary"], indent=1))
        if a.out:
            _write(a.out, data)


if __name__ == "__main__":
    main()
