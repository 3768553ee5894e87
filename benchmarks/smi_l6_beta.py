"""Deep tied attention (issue 14): the L = 6, M = 2 weak thresholds of numerics.smi_weak away from
beta = 1, checked against two independent sampling routes (THEORY 2.2, 2.5; docs/smi_depth.md,
"L = 6, M = 2").

Each part is one process writing one JSON file, so that many parts can run side by side:

* ``quad``: the default rule (``smi_weak.stability(layers=6, tokens=2, skip=c, beta=b)``, ray
  16 x 2^14): lambda_l, bar, the bar's parts, mass, E tr C_l, seconds; ``--quad-seed``,
  ``--log2n``/``--replicates`` (e.g. 2^16 x 8) and ``--outer-scale`` (1.5: 1.5 x the radii
  and angles of both outer rules) give the same rule at other seeds, sizes and outer rules;
* ``qmc``: one shared scrambled Sobol set per replicate (``smi_weak.lambdas_qmc``) with the
  inner proposal N(0, ``--spread``^2 I), reweighted: another inner rule;
* ``hmom``: the law of h alone: E|h|^2, E|h|^4, E|h|^6, E(h_1 - h_2)^2, E(h_1 - h_2)^4 by the
  fine outer rule x the density Z(h) of the ray inner rule (``--replicates`` x 2^``--log2n``,
  default 8 x 2^12; ``--angles`` replaces the fine rule's angle count) against 8 x 10^6 exact
  samples h = h^(6)(z), z ~ N(0, I);
* ``ms``: the model-sampled route (``model_sampled_lambdas`` of tests/smi_mc_oracles.py,
  16 x 2^12 h, 2^``--log2-inner`` iid inner, blocks of ``--block``);
* ``tw``: the tail-weighted route (``tail_weighted_lambdas``: z_L from N(0, ``--scale``^2 I),
  reweighted, 12 x 2^12 h, blocks of ``--block``).

A sampling run at blocks of 4096 (16384 at 2^17 inner) and the same seed at half the block give
its ratio bias, bias(k) = value(k / 2) - value(k) (the 1 / k law), which the report removes.
``--report DIR`` reads the JSON files and prints, per (c, beta), every layer's lambda_l and
alpha_l with bars, the other rules' values, each route's dev = (route - quadrature) /
sqrt(SE_route^2 + SE_q^2) (SE_q = bar / t(0.995, R - 1)) and the routes pooled (inverse
variance; chi^2 of their scatter).

Run: python benchmarks/smi_l6_beta.py --part quad --skip 4 --beta 0.25 --out DIR
     python benchmarks/smi_l6_beta.py --part ms --skip 4 --beta 0.25 --seed 1 --block 2048 --out DIR
     python benchmarks/smi_l6_beta.py --part tw --skip 4 --beta 0.25 --seed 41 --out DIR
     python benchmarks/smi_l6_beta.py --report DIR
(beta > 1.5 at L = 6 is refused by smi_weak.check since this study: add --beyond-served to re-run
those parts; one part per core; the 2026-11-26 study ran 16 at a time, each with one BLAS thread)
"""

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")   # one BLAS thread: shared cores thrash

import numpy as np  # noqa: E402
from aim_sym.numerics import smi_weak  # noqa: E402
from scipy import stats  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # the Monte Carlo oracles
import smi_mc_oracles  # noqa: E402

LAYERS = 6


def _name(a) -> str:
    if a.part == "quad":
        tail = ("" if (a.quad_seed, a.log2n, a.replicates, a.outer_scale) == (0, None, None, 1.0)
                else f"_q{a.quad_seed}_n{a.log2n or 14}x{a.replicates or 16}_o{a.outer_scale:g}")
    else:
        tail = (f"_s{a.seed}" + ("" if a.part == "tw" and a.block == 4096 else f"_b{a.block}")
                + ("" if a.part == "ms" or a.scale == 1.6 else f"_sc{a.scale:g}")
                + ("" if a.log2_inner == 15 else f"_i{a.log2_inner}"))
    if a.part == "qmc":
        tail = f"_q{a.quad_seed}_sp{a.spread:g}"
    if a.part in ("quad", "hmom") and a.angles:
        tail = f"_q{a.quad_seed}_n{a.log2n or 14}x{a.replicates or 16}_a{a.angles}"
    elif a.part == "hmom":
        tail = f"_q{a.quad_seed}"
    return f"{a.part}_c{a.skip:g}_beta{a.beta:g}{tail}.json"


def scaled_outer(skip: float, scale: float):
    """The default outer rules of L = 6 with ``scale`` x the radii and angles (a check of the
    outer rule beyond the change between the default pair)."""
    rules = smi_weak.default_outer(layers=LAYERS, tokens=2, skip=skip)
    return tuple((round(n_u * scale), 8 * math.ceil(n_a * scale / 8)) for n_u, n_a in rules)


def _outer(a):
    """The outer rules of a quadrature part: default, scaled, or another fine angle count."""
    if a.angles:
        coarse = smi_weak.default_outer(layers=LAYERS, tokens=2, skip=a.skip)[0]
        return coarse, (90, a.angles)
    return None if a.outer_scale == 1.0 else scaled_outer(a.skip, a.outer_scale)


def _h_functions(h: np.ndarray) -> np.ndarray:
    r2 = (h**2).sum(1)
    d2 = (h[:, 0] - h[:, 1]) ** 2
    return np.stack([np.ones_like(r2), r2, r2**2, r2**3, d2, d2**2], 1)


H_NAMES = ("mass", "E|h|^2", "E|h|^4", "E|h|^6", "E(h1-h2)^2", "E(h1-h2)^4")


def h_moments(a) -> dict:
    """The quadrature's law of h (outer rule x ray-rule density) against exact sampling."""
    outer = _outer(a) or smi_weak.default_outer(layers=LAYERS, tokens=2, skip=a.skip)
    sigma = math.sqrt(smi_weak.SIGMA_FACTOR
                      * smi_weak.norm_bound(tokens=2, skip=a.skip) ** (LAYERS - 1))
    h, w = smi_weak.outer_rule(*outer[1], tokens=2, sigma=sigma)
    vals = []
    for s in np.random.SeedSequence(a.quad_seed).spawn(a.replicates or 8):
        mom = smi_weak.ray_moments(outer[1][1], h, log2n=a.log2n or 12, seed=s, layers=LAYERS,
                                   tokens=2, skip=a.skip, beta=a.beta)
        vals.append((w * mom[:, 0]) @ _h_functions(h))
    rng = np.random.default_rng(a.seed)
    exact = [_h_functions(smi_weak.scores(rng.standard_normal((1_000_000, LAYERS, 2)),
                                          skip=a.skip, beta=a.beta)).mean(0) for _ in range(8)]
    q, e = np.array(vals), np.array(exact)
    out = dict(names=H_NAMES, quad=q.mean(0).tolist(),
               quad_se=(q.std(0, ddof=1) / math.sqrt(len(q))).tolist(), exact=e.mean(0).tolist(),
               exact_se=(e.std(0, ddof=1) / math.sqrt(len(e))).tolist(), outer=outer)
    for i, name in enumerate(H_NAMES):
        se = math.hypot(out["quad_se"][i], out["exact_se"][i])
        print(f"{name}: quadrature {out['quad'][i]:.6g} +- {out['quad_se'][i]:.1e}, sampled "
              f"{out['exact'][i]:.6g} +- {out['exact_se'][i]:.1e}"
              + (f" ({(out['quad'][i] - out['exact'][i]) / se:+.1f} SE)" if se > 0 else ""))
    return out


def run_part(a) -> dict:
    """One part at (skip, beta): the quadrature or one sampling run."""
    t0 = time.perf_counter()
    kw = dict(layers=LAYERS, skip=a.skip, beta=a.beta)
    if a.part == "hmom":
        out = h_moments(a)
    elif a.part == "quad":
        F = smi_weak.stability(tokens=2, seed=a.quad_seed, log2n=a.log2n,
                               replicates=a.replicates,
                               outer=_outer(a),
                               **kw)
        out = {k: dict(value=e.value, error=e.error, **e.extra) for k, e in F.items()}
        out["method"] = F["lam1"].method
    elif a.part == "qmc":      # one shared Sobol set per replicate, prior spread a.spread
        outer = smi_weak.default_outer(layers=LAYERS, tokens=2, skip=a.skip)
        r = smi_weak.lambdas_qmc(tokens=2, log2n=a.log2n or 14, replicates=a.replicates or 16,
                                 seed=a.quad_seed, outer=outer, spread=a.spread, **kw)
        out = dict(per=r["per"].tolist(), pooled=r["pooled"].tolist(),
                   outer_change=r["outer_change"].tolist())
    elif a.part == "ms":
        r = smi_mc_oracles.model_sampled_lambdas(tokens=2, log2_outer=12,
                                                 log2_inner=a.log2_inner,
                                                 block=a.block, replicates=16, seed=a.seed, **kw)
        out = dict(per=r["per"].tolist())
    else:
        r = smi_mc_oracles.tail_weighted_lambdas(scale=a.scale, log2_h=12, replicates=12,
                                                 seed=a.seed, log2_inner=a.log2_inner,
                                                 block=a.block,
                                                 **kw)
        out = dict(per=r["per"].tolist())
    out.update(part=a.part, skip=a.skip, beta=a.beta, seed=a.seed, block=a.block,
               quad_seed=a.quad_seed, log2n=a.log2n, replicates=a.replicates,
               outer_scale=a.outer_scale, scale=a.scale, log2_inner=a.log2_inner,
               spread=a.spread, angles=a.angles, seconds=time.perf_counter() - t0)
    return out


def _mean_se(per) -> tuple[np.ndarray, np.ndarray]:
    per = np.asarray(per)
    return per.mean(0), per.std(0, ddof=1) / np.sqrt(per.shape[0])


def _paired_routes(same: list, part: str, label: str, scale: float = 1.6,
                   inner: int = 15) -> list:
    """One entry per seed of ``part``: blocks of 4096 with the ratio bias removed where the same
    seed also ran at blocks of 2048 (bias(4096) = value(2048) - value(4096), the 1 / k law)."""
    runs = {(r["seed"], r["block"] >> (inner - 15)): r for r in same if r["part"] == part
            and r.get("scale", 1.6) == scale and r.get("log2_inner", 15) == inner}
    out = []
    for seed in sorted({s for s, _ in runs}):
        if (seed, 4096) not in runs:
            continue
        p4 = np.asarray(runs[seed, 4096]["per"])
        m, se = _mean_se(p4)
        sec = runs[seed, 4096]["seconds"]
        if (seed, 2048) in runs:
            bias, bias_se = _mean_se(np.asarray(runs[seed, 2048]["per"]) - p4)
            out.append((f"{label} ({seed}), bias removed", m - bias, np.hypot(se, bias_se),
                        bias, bias_se, sec + runs[seed, 2048]["seconds"]))
        else:
            out.append((f"{label} ({seed}), raw", m, se, None, None, sec))
    return out


def _quad_arrays(q: dict) -> tuple[np.ndarray, np.ndarray]:
    """lambda_l and the bar's standard-error equivalent bar / t(0.995, R - 1)."""
    reps = q.get("replicates") or 16
    t = stats.t.ppf(smi_weak.COVERAGE, reps - 1)
    lam = np.array([q[f"lam{l}"]["value"] for l in range(1, LAYERS + 1)])
    bar = np.array([q[f"lam{l}"]["error"] for l in range(1, LAYERS + 1)])
    return lam, bar / t


def report(folder: Path) -> None:
    """Tables per (skip, beta) from the JSON files in ``folder``."""
    runs = [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))]
    order = [LAYERS - 1] + list(range(LAYERS - 1))
    for q in (r for r in runs if r["part"] == "quad" and r.get("quad_seed", 0) == 0
              and r.get("log2n") is None and r.get("outer_scale", 1.0) == 1.0):
        c, b = q["skip"], q["beta"]
        same = [r for r in runs if r["skip"] == c and r["beta"] == b]
        print(f"\n## L = 6, M = 2, c = {c:g}, beta = {b:g}: quadrature {q['seconds']:.0f} s")
        print(f"{q['method']}")
        print(f"mass - 1 = {q['mass']['value'] - 1:+.1e} +- {q['mass']['error']:.1e}; " + ", ".join(
            f"tr {l}: {q[f'trace{l}']['value'] - 2:+.1e} +- {q[f'trace{l}']['error']:.1e}"
            for l in range(1, LAYERS + 1)))
        top = q[f"lam{LAYERS}"]
        print(f"Jensen: alpha_6 = {1 / top['value']:.6f}, lower end "
              f"{1 / (top['value'] + top['error']):.6f} >= 1/6: "
              f"{1 / (top['value'] + top['error']) >= 1 / 6}")
        lam, se_q = _quad_arrays(q)
        print("| layer | lambda_l | alpha_l | rel. bar | SE | ratio bias | outer change |")
        print("|---|---|---|---|---|---|---|")
        for l in [LAYERS] + list(range(1, LAYERS)):
            e = q[f"lam{l}"]
            print(f"| {l} | {e['value']:.6g} +- {e['error']:.1e} | {1 / e['value']:.6g} +- "
                  f"{e['error'] / e['value']**2:.1e} | {e['error'] / e['value']:.1e} | "
                  f"{e['se']:.1e} | {e['ratio_bias']:.1e} | {e['outer_change']:.1e} |")
        for v in (r for r in same if r["part"] == "quad" and r is not q):
            lv, sv = _quad_arrays(v)
            dev = (lv - lam) / np.hypot(sv, se_q)
            print(f"  other rule (seed {v['quad_seed']}, 2^{v['log2n'] or 14} x "
                  f"{v['replicates'] or 16}, outer x {v['outer_scale']:g}"
                  + (f", {v['angles']} angles" if v.get("angles") else "")
                  + f"; {v['seconds']:.0f} s): "
                  + ", ".join(f"{lv[i]:.6g} +- {v[f'lam{i + 1}']['error']:.1e} ({dev[i]:+.1f})"
                              for i in order))
        scales = sorted({r.get("scale", 1.6) for r in same if r["part"] == "tw"})
        routes = _paired_routes(same, "ms", "model-sampled")
        for v in (r for r in same if r["part"] == "qmc"):
            per, pooled = np.asarray(v["per"]), np.asarray(v["pooled"])[1:LAYERS + 1]
            se = per[:, 1:LAYERS + 1].std(0, ddof=1) / np.sqrt(per.shape[0])
            bias = per[:, 1:LAYERS + 1].mean(0) - pooled
            print(f"  qmc, one shared set per replicate, spread {v['spread']:g} (seed "
                  f"{v['quad_seed']}, {v['seconds']:.0f} s): " + ", ".join(
                      f"{pooled[i]:.6g} +- SE {se[i]:.1e} (ratio bias {bias[i]:+.0e}; "
                      f"{(pooled[i] - lam[i]) / np.hypot(se[i], se_q[i]):+.1f})" for i in order))
        big = _paired_routes(same, "ms", "model-sampled 2^17 inner", inner=17)
        if big:
            small = {r[0].split("(")[1].split(")")[0]: r for r in routes}
            for r in big:
                seed = r[0].split("(")[1].split(")")[0]
                if seed in small:
                    d = r[1] - small[seed][1]
                    print(f"  {r[0]} minus 2^15 inner (same h): " + ", ".join(
                        f"{d[i]:+.1e}" for i in order))
            routes += big
        for sc in scales:
            routes += _paired_routes(same, "tw", "tail-weighted" + ("" if sc == 1.6
                                                                    else f" s={sc:g}"), sc)
        print("| route (seed) | s | " + " | ".join(f"layer {i + 1}" for i in order) + " |")
        for label, m, se, _, _, sec in routes:
            dev = (m - lam) / np.hypot(se, se_q)
            print(f"| {label} | {sec:.0f} | " + " | ".join(f"{dev[i]:+.1f}" for i in order) + " |")
        for label, m, se, bias, bse, _ in routes:
            print(f"  {label}: " + ", ".join(f"{m[i]:.6g} +- {se[i]:.1e}" for i in order)
                  + ("" if bias is None else "; bias " + ", ".join(
                      f"{bias[i]:+.1e} +- {bse[i]:.0e}" for i in order)))
        for kind in ("", "model-sampled", "tail-weighted (", "tail-weighted s="):
            sel = [r for r in routes if r[0].startswith(kind)]
            if len(sel) < 1:
                continue
            w = np.array([1 / r[2] ** 2 for r in sel])
            ms_ = np.array([r[1] for r in sel])
            pm = (w * ms_).sum(0) / w.sum(0)
            ps = 1 / np.sqrt(w.sum(0))
            chi2 = (w * (ms_ - pm) ** 2).sum(0)
            dev = (pm - lam) / np.hypot(ps, se_q)
            print(f"pooled {kind or 'all routes'} ({len(sel)}): " + ", ".join(
                f"layer {i + 1}: {pm[i]:.6g} +- {ps[i]:.1e} ({dev[i]:+.1f} SE; chi2 {chi2[i]:.1f}"
                f" on {len(sel) - 1})" for i in order))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--part", choices=("quad", "qmc", "hmom", "ms", "tw"))
    ap.add_argument("--skip", type=float, default=4.0)
    ap.add_argument("--beta", type=float, default=0.25)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--quad-seed", type=int, default=0)
    ap.add_argument("--block", type=int, default=4096)
    ap.add_argument("--log2n", type=int, default=None, help="quadrature: points per ray")
    ap.add_argument("--replicates", type=int, default=None, help="quadrature: replicates")
    ap.add_argument("--outer-scale", type=float, default=1.0, help="quadrature: finer outer")
    ap.add_argument("--angles", type=int, default=0, help="quadrature: fine-rule angle count")
    ap.add_argument("--scale", type=float, default=1.6, help="tail-weighted: spread of z_L")
    ap.add_argument("--log2-inner", type=int, default=15, help="routes: iid inner samples")
    ap.add_argument("--spread", type=float, default=1.0, help="qmc: spread of the inner rule")
    ap.add_argument("--out", default=".")
    ap.add_argument("--report", default="")
    ap.add_argument("--beyond-served", action="store_true",
                    help="lift the L = 6 beta range of smi_weak.check (this study decided it)")
    a = ap.parse_args()
    if a.beyond_served:     # c = 1, beta = 2 is refused since this study; to re-run it
        smi_weak.BETA_RANGE_BY_LAYERS = {}
    if a.report:
        report(Path(a.report))
        return
    out = run_part(a)
    path = Path(a.out) / _name(a)
    path.write_text(json.dumps(out))
    print(f"{path}: {out['seconds']:.1f} s")


if __name__ == "__main__":
    main()
