"""The output-noise tables of docs/deep_aim.md (section 5, "Output noise at finite width")
recomputed with shared tokens and the neglected cross-overlap's first-order term in the bars
(THEORY 1.1, 1.5, 1.6; numerics/deep_aim_noisy.py): rho = (0.5, 0.5), c = 1, beta = 1.

Fixed points (Delta = 0.1, uninformed start, 2^9 x 8 points), one per call, one JSON line on
stdout (append it to a file of your choice):

    python benchmarks/deep_aim_noisy_shared.py fixed-point --alpha 0.1 --seed 0 >> fp.jsonl

``--design independent`` gives the law of one token copy per layer (the published rows).

The noiseless limit: E_1, E_2 at (q, V) = ((0.6, 0.9), (0.9, 0.6)) for Delta = 0.1 ... 0.003
with both token laws on the same points (2^10 x 8 and K = 2^13 at Delta >= 0.03, 2^9 x 8 and
K = 2^15 below), and the noiseless engine's values (2^10 x 8):

    python benchmarks/deep_aim_noisy_shared.py limit >> limit.jsonl

Independent route: one SE step at a fixed point's overlaps by seeded plain Monte Carlo
(``output_e_noisy_mc``: iid truths, the common token part drawn explicitly, two halves of iid
prior draws inside) at two inner sizes, mapped through the prior side; q_hat_12 = 2 alpha
E[g_1 . g_2] from the two halves:

    python benchmarks/deep_aim_noisy_shared.py check fp.jsonl --alpha 0.1 --seed 0 >> checks.jsonl

Markdown tables from those files (the published independent-token values beside):

    python benchmarks/deep_aim_noisy_shared.py table fp.jsonl limit.jsonl checks.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from aim_sym.numerics import deep_aim_noisy as dn
from aim_sym.numerics import deep_aim_se as ds
from aim_sym.numerics import wishart

RHO = (0.5, 0.5)
SKIP = 1.0
DELTA = 0.1
#: published independent-token rows of docs/deep_aim.md (before 2026-11-25; 2^9 x 8, seeds 0, 1):
#: (alpha, seed) -> (mmse_1, err, mmse_2, err, q_hat_1, q_hat_2, e_gen clean, err)
PUBLISHED = {
    (0.1, 0): (0.95745, 0.00083, 0.80017, 0.00110, 0.04110, 0.19092, 0.31559, 0.0016),
    (0.1, 1): (0.95895, 0.00091, 0.80072, 0.00099, 0.03969, 0.19036, 0.31457, 0.0021),
    (0.3, 0): (0.84815, 0.0033, 0.47653, 0.0026, 0.1432, 0.7287, 0.22431, 0.0024),
    (0.3, 1): (0.84927, 0.0044, 0.47591, 0.0028, 0.1421, 0.7304, 0.22276, 0.0026),
}
#: the noiseless-limit point (q, V), the noises and per noise the rule (m, inner sizes): smaller
#: noises need the larger inner set (the ratio bias grows as the posterior narrows)
LIMIT_Q = (0.6, 0.9)
LIMIT_RULES = {0.1: (10, (2**11, 2**13)), 0.03: (10, (2**11, 2**13)),
               0.01: (9, (2**13, 2**15)), 0.003: (9, (2**13, 2**15))}
#: published independent-token E_1, E_2 (value, error) per Delta at LIMIT_Q
PUBLISHED_LIMIT = {0.1: ((0.2225, 0.0051), (1.0948, 0.0063)),
                   0.03: ((0.4180, 0.0050), (1.5144, 0.0108)),
                   0.01: ((0.5410, 0.0040), (1.7718, 0.0090)),
                   0.003: ((0.6236, 0.0077), (1.9746, 0.0073))}


def _plain(x):
    """JSON-safe copy (Estimates as value/error pairs, complex numbers as their real part)."""
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if isinstance(x, complex):
        return x.real
    if hasattr(x, "value") and hasattr(x, "error"):
        return {"value": x.value, "error": x.error}
    return x


def fixed_point(args) -> dict:
    fp = dn.fixed_point_noisy(alpha=args.alpha, rho=RHO, Delta=DELTA, skip=SKIP, m=args.m,
                              seed=args.seed, design=args.design)
    return {"kind": "fixed_point", "seed": args.seed, **_plain(fp)}


def limit(args) -> dict:
    q, v = LIMIT_Q, tuple(1.0 + r - x for r, x in zip(RHO, LIMIT_Q))
    rows = []
    for delta, (m, sizes) in LIMIT_RULES.items():
        row = {"Delta": delta, "m": m, "sizes": sizes}
        for design in ("shared", "independent"):
            e = dn.output_e_noisy(q1=q[0], q2=q[1], V1=v[0], V2=v[1], Delta=delta, skip=SKIP,
                                  m=m, sizes=sizes, rho=RHO, design=design)
            row[design] = {k: _plain(e[k]) for k in ("E1", "E2", "cross")}
        rows.append(row)
    clean = {}
    for design in ("shared", "independent"):
        model = ds.DeepAimSE(skip=SKIP, rho1=RHO[0], rho2=RHO[1], design=design)
        e = ds.output_overlaps(model, q1=q[0], q2=q[1], m=args.m)
        clean[design] = {k: _plain(e[k]) for k in ("E1", "E2", "cross")}
    return {"kind": "limit", "q": q, "V": v, "m": args.m, "rows": rows, "noiseless": clean}


def check(args) -> dict:
    fp = next(r for r in _read(args.files) if r.get("kind") == "fixed_point"
              and r["alpha"] == args.alpha and r["seed"] == args.seed
              and r["design"] == args.design)
    q = [x["q"] for x in fp["layers"]]
    v = [x["mmse"] for x in fp["layers"]]
    out = {"kind": "check", "alpha": args.alpha, "seed": args.seed, "design": args.design,
           "runs": []}
    for inner, samples, seed in ((4000, 20_000, 11), (16_000, 20_000, 12)):
        t0 = time.perf_counter()
        mc = dn.output_e_noisy_mc(q1=q[0], q2=q[1], V1=v[0], V2=v[1], Delta=DELTA, skip=SKIP,
                                  samples=samples, inner=inner, batches=20, seed=seed, rho=RHO,
                                  design=args.design)
        run = {"inner": inner, "samples": samples, "seed": seed,
               "seconds": time.perf_counter() - t0}
        for i, key in ((0, "E1"), (1, "E2")):
            e = mc[key]
            # one SE step: mmse_rho(1/(2 alpha E)) and its 1-SE range
            run[key] = (e.value, e.error)
            run[f"mmse_{i + 1}"] = [float(wishart.mmse(1.0 / (2 * args.alpha * x), rho=RHO[i]))
                                    for x in (e.value, e.value + e.error, e.value - e.error)]
        run["q_hat_12"] = (2 * args.alpha * mc["E12"].value, 2 * args.alpha * mc["E12"].error)
        out["runs"].append(run)
    return out


def _read(files):
    for name in files:
        with open(name) as fh:
            for line in fh:
                if line.strip():
                    yield json.loads(line)


def _pm(value, error, digits=5):
    return f"{value:.{digits}f} +- {error:.2g}"


def table(args) -> str:
    rows = list(_read(args.files))
    out = ["| alpha | seed | mmse_1 | (indep.) | mmse_2 | (indep.) | cross-overlap term | "
           "q_hat_1 | q_hat_2 | q_hat_12 | loop gain | e_gen, clean | (indep.) | s |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in sorted((r for r in rows if r.get("kind") == "fixed_point"
                     and r["design"] == "shared"), key=lambda r: (r["alpha"], r["seed"])):
        L, co = r["layers"], r["cross_overlap"]
        p = PUBLISHED.get((r["alpha"], r["seed"]))
        ind = [_pm(p[0], p[1]), _pm(p[2], p[3]), _pm(p[6], p[7])] if p else ["", "", ""]
        out.append(
            f"| {r['alpha']:g} | {r['seed']} | {_pm(L[0]['mmse'], L[0]['mmse_error'])} | {ind[0]} "
            f"| {_pm(L[1]['mmse'], L[1]['mmse_error'])} | {ind[1]} "
            f"| {co['term'][0]:.1e}, {co['term'][1]:.1e} "
            f"| {_pm(L[0]['q_hat'], L[0]['q_hat_error'], 4)} "
            f"| {_pm(L[1]['q_hat'], L[1]['q_hat_error'], 4)} "
            f"| {_pm(r['q_hat_12'], r['q_hat_12_error'])} | {co['loop_gain']:.2f} "
            f"| {_pm(r['e_gen_clean'], r['e_gen_clean_error'])} | {ind[2]} "
            f"| {r['seconds']:.0f} |")
    for r in rows:
        if r.get("kind") == "limit":
            out += ["", "| Delta | E_1 shared | E_1 indep. (same points) | E_1 published | "
                    "E_2 shared | E_2 indep. (same points) | E_2 published | E[g_1 . g_2] shared |",
                    "|---|---|---|---|---|---|---|---|"]
            for x in r["rows"]:
                pub = PUBLISHED_LIMIT.get(x["Delta"])
                cells = []
                for i, key in enumerate(("E1", "E2")):
                    cells += [_pm(x["shared"][key]["value"], x["shared"][key]["error"], 4),
                              _pm(x["independent"][key]["value"],
                                  x["independent"][key]["error"], 4),
                              _pm(*pub[i], 4) if pub else ""]
                c = x["shared"]["cross"]
                out.append(f"| {x['Delta']:g} | " + " | ".join(cells)
                           + f" | {_pm(c['value'], c['error'], 4)} |")
            for design, e in r["noiseless"].items():
                out.append(f"\nnoiseless engine, {design}: E_1 = {_pm(**e['E1'], digits=4)}, "
                           f"E_2 = {_pm(**e['E2'], digits=4)}, "
                           f"E[g_1 . g_2] = {_pm(**e['cross'], digits=4)}")
        if r.get("kind") == "check":
            for run in r["runs"]:
                out.append(f"\ncheck alpha = {r['alpha']:g}, seed {r['seed']}: inner "
                           f"{run['inner']}, {run['samples']} truths: E_1 = "
                           f"{_pm(*run['E1'], 4)}, E_2 = {_pm(*run['E2'], 4)} -> mmse = "
                           f"{run['mmse_1'][0]:.5f} [{run['mmse_1'][1]:.5f}, "
                           f"{run['mmse_1'][2]:.5f}], {run['mmse_2'][0]:.5f} "
                           f"[{run['mmse_2'][1]:.5f}, {run['mmse_2'][2]:.5f}]; q_hat_12 = "
                           f"{_pm(*run['q_hat_12'])} ({run['seconds']:.0f} s)")
    return "\n".join(out)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    f = sub.add_parser("fixed-point")
    f.add_argument("--alpha", type=float, required=True)
    f.add_argument("--seed", type=int, default=0)
    f.add_argument("--m", type=int, default=9)
    f.add_argument("--design", choices=ds.DESIGNS, default="shared")
    lim = sub.add_parser("limit")
    lim.add_argument("--m", type=int, default=10, help="noiseless engine: 2^m x 8 points")
    c = sub.add_parser("check")
    c.add_argument("files", nargs="+")
    c.add_argument("--alpha", type=float, required=True)
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("--design", choices=ds.DESIGNS, default="shared")
    t = sub.add_parser("table")
    t.add_argument("files", nargs="+")
    args = p.parse_args(argv)
    if args.command == "table":
        print(table(args))
        return
    res = {"fixed-point": fixed_point, "limit": limit, "check": check}[args.command](args)
    json.dump(res, sys.stdout, default=float)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
