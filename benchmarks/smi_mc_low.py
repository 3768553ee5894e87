"""Why plain Monte Carlo runs low on the free rows at L >= 4 (issue 14, THEORY 2.2, 2.5;
docs/smi_depth.md, "Why plain Monte Carlo runs low at L >= 4").

Measurements on ``montecarlo_lambdas`` of tests/smi_mc_oracles.py (plain Monte Carlo: true z ~
N(0, I), the free rows by self-normalised importance sampling from their prior, two independent
halves), M = 2, c = 1, beta = 1:

* ``run``: per-teacher values of one seed at several ``--inner`` (runs with one seed share the
  true z, so differences between inner sizes are paired), or of several seeds at one inner; each
  run is saved as ``<out>/L{L}_s{seed}_i{inner}_n{samples}.npz`` with the values (samples, L)
  and |h| of every teacher;
* ``report``: per saved run and pooled over the seeds of one (L, inner) the mean, SE and
  deviation from the kernel in SE; the paired differences between inner sizes with a
  1 / inner fit; the Hill estimate of the tail index of the per-teacher values (top k), the share
  of the sum in the top 0.1 % and 1 %; the deficit by |h| bin against the kernel's own integrand
  (``--kernel``: rule ray, its per-node contributions binned by |h|);
* ``decompose``: each run's deviation split at its own teachers into the h part (the kernel's
  inner rule, one scrambled Sobol set of 2^16 per seed cut in halves, at the sampled h, minus the
  kernel) and the inner part (plain values minus that, paired), per seed and pooled; and how a
  run's t follows its count of teachers in the law's top 1 % (with ``report --kernel`` run first);
* ``hlaw``: the kernel's law of h (mass of its outer nodes) against 4e6 exact samples,
  E|h|^2, E|h|^4, E|h|^6;
* the kernel's reference lambdas (:data:`KERNEL`) are the default rule's values of
  docs/smi_depth.md.

Run (each line 1-4 minutes on one core):
    python benchmarks/smi_mc_low.py run --layers 4 --seeds 31 --inner 1024,4096,16384 \
        --samples 6000 --out DIR
    python benchmarks/smi_mc_low.py run --layers 5 --seeds 7-16 --inner 2048 --samples 6000 \
        --out DIR
    python benchmarks/smi_mc_low.py report --layers 5 --out DIR [--kernel]
    python benchmarks/smi_mc_low.py decompose --layers 5 --out DIR
    python benchmarks/smi_mc_low.py hlaw --layers 5 --out DIR
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")   # one BLAS thread: shared cores thrash

import numpy as np  # noqa: E402
from aim_sym.numerics import smi_weak  # noqa: E402
from aim_sym.numerics.records import standard_error  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # the Monte Carlo oracles
import smi_mc_oracles  # noqa: E402

# the kernel (rule ray, the defaults), c = 1, beta = 1, M = 2 (docs/smi_depth.md)
KERNEL = {4: (0.21427, 0.12918, 0.07030, 4.37899),
          5: (0.225307, 0.138020, 0.075467, 0.031755, 4.09650)}
BINS = (0.0, 3.0, 6.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 80.0, 1e9)


def true_scores(*, layers: int, samples: int, seed: int) -> np.ndarray:
    """h of the teachers of ``montecarlo_lambdas(seed=seed)`` (the same stream, redrawn)."""
    rng_true = np.random.default_rng(np.random.SeedSequence(seed).spawn(2)[0])
    z = np.stack([rng_true.standard_normal((layers, 2)) for _ in range(samples)])
    return smi_weak.scores(z, skip=1.0, beta=1.0)


def quadrature_at(h: np.ndarray, *, layers: int, log2n: int, seed) -> np.ndarray:
    """||E[z_l z_l^T | h] - I||_F^2 at the given h (N, L) by the kernel's inner rule: one
    scrambled Sobol set of 2^log2n prior points cut in two halves a, b and <C_a - I, C_b - I>
    (no variance bias; the ratio bias of halves of 2^(log2n-1))."""
    x, w = smi_weak.sobol_inner(log2n, dims=2 * (layers - 1), seed=np.random.default_rng(seed))
    B, Mz = smi_weak.inner_moments(x, w, layers=layers, tokens=2, skip=1.0, beta=1.0)
    half = B.shape[0] // 2
    eye = np.array([1.0, 0.0, 1.0])
    C = [smi_weak.node_covariances(smi_weak.outer_moments(B[p], Mz[p], h), h, layers=layers)
         - eye for p in (slice(0, half), slice(half, None))]
    return (C[0] * C[1]) @ np.array([1.0, 2.0, 1.0])


def hill(v: np.ndarray, k: int) -> float:
    """Hill estimate of the tail index from the top ``k`` positive values."""
    x = np.sort(v[v > 0])[::-1][:k + 1]
    return float(1.0 / np.mean(np.log(x[:k] / x[k])))


def top_share(v: np.ndarray, frac: float) -> float:
    """Share of the sum carried by the top ``frac`` of the values."""
    x = np.sort(v)[::-1]
    return float(x[:max(1, int(round(frac * x.size)))].sum() / x.sum())


def kernel_radial(layers: int, log2n: int, replicates: int, seed: int) -> dict:
    """The kernel's own integrand (rule ray, the fine outer rule, moments pooled over
    ``replicates``), summed over the angles per radial node: ``r`` (n_u,), the log-radius step
    ``du``, the mass of h per node ``mass`` (n_u,) and the contribution to lambda_l per node
    ``lam`` (L, n_u); ``node_w`` and ``node_g`` (L, N): the weight W = Z(h) dh of every outer
    node and its value ||E[z_l z_l^T | h] - I||_F^2 (the law of one plain Monte Carlo sample
    without inner noise)."""
    outer = smi_weak.default_outer(layers=layers, tokens=2)
    rules, _, _ = smi_weak._outer_pair(layers, 2, 1.0, outer)
    h, wh = rules[1]
    n_u, n_a = outer[1]
    mom = None
    for s in np.random.SeedSequence(seed).spawn(replicates):
        m = smi_weak.ray_moments(n_a, h, seed=s, log2n=log2n, layers=layers, tokens=2,
                                 skip=1.0, beta=1.0)
        mom = m if mom is None else mom + m
    mom /= replicates
    C = smi_weak.node_covariances(mom, h, layers=layers)
    fro, eye = np.array([1.0, 2.0, 1.0]), np.array([1.0, 0.0, 1.0])
    W = wh * mom[:, 0]
    g = np.stack([((C[:, l] - eye) ** 2) @ fro for l in range(layers)])
    r = np.linalg.norm(h, axis=1).reshape(n_u, n_a)[:, 0]
    return dict(r=r, du=float(np.log(r[1] / r[0])), mass=W.reshape(n_u, n_a).sum(1),
                lam=(W * g).reshape(layers, n_u, n_a).sum(2), node_w=W, node_g=g)


def snapped_edges(r: np.ndarray, du: float) -> np.ndarray:
    """:data:`BINS` moved to the nearest cell boundary of the radial trapezoid rule (node k
    stands for log|h| in [u_k - du/2, u_k + du/2]), so kernel and Monte Carlo bins coincide."""
    cells = np.exp(np.log(r) + du / 2)
    inner = [cells[np.argmin(abs(cells - b))] for b in BINS[1:-1]]
    return np.array([0.0] + inner + [np.inf])


def cmd_run(a) -> None:
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    for seed in a.seeds:
        r = np.linalg.norm(true_scores(layers=a.layers, samples=a.samples, seed=seed), axis=1)
        for inner in a.inner:
            t0 = time.process_time()
            res = smi_mc_oracles.montecarlo_lambdas(layers=a.layers, samples=a.samples,
                                                    inner=inner, seed=seed, return_values=True)
            dt = time.process_time() - t0
            np.savez(out / f"L{a.layers}_s{seed}_i{inner}_n{a.samples}.npz",
                     values=res["values"], radius=r, cpu=dt)
            dev = [(res[f"lam{l}"][0] - KERNEL[a.layers][l - 1]) / res[f"lam{l}"][1]
                   for l in range(1, a.layers + 1)]
            print(f"L={a.layers} seed={seed} inner={inner} n={a.samples} cpu={dt:.0f}s dev/SE "
                  + " ".join(f"{d:+.2f}" for d in dev), flush=True)


def _load(out: Path, layers: int):
    runs = {}
    for f in sorted(out.glob(f"L{layers}_s*_i*_n*.npz")):
        s, i, n = (int(p[1:]) for p in f.stem.split("_")[1:])
        d = np.load(f)
        runs[(s, i, n)] = (d["values"], d["radius"])
    return runs


def _kernel(out: Path, L: int, log2n: int, replicates: int) -> dict:
    """:func:`kernel_radial`, cached in ``out``."""
    f = out / f"kernel_L{L}_{log2n}_{replicates}.npz"
    if not f.exists():
        np.savez(f, **kernel_radial(L, log2n, replicates, 1))
    d = dict(np.load(f))
    d["du"] = float(d["du"])
    return d


def node_law_t(k: dict, n: int, runs: int, seed: int = 0) -> np.ndarray:
    """Student statistics (mean - lambda) / SE of ``runs`` runs of ``n`` draws from the
    kernel's node law (node k with probability W_k, value g_k; no inner noise): (runs, L)."""
    rng = np.random.default_rng(seed)
    p = k["node_w"] / k["node_w"].sum()
    lam = k["node_g"] @ p
    t = np.zeros((runs, lam.size))
    for i in range(runs):
        v = k["node_g"][:, rng.choice(p.size, size=n, p=p)]
        t[i] = (v.mean(1) - lam) / (v.std(1, ddof=1) / np.sqrt(n))
    return t


def cmd_report(a) -> None:
    L = a.layers
    out = Path(a.out)
    kern = np.array(KERNEL[L])
    runs = _load(out, L)
    print(f"## L = {L}: kernel lambdas {kern.tolist()}")
    print("\nrun (seed, inner, samples): mean per layer | dev / SE per layer")
    for key, (v, _) in runs.items():
        m, se = v.mean(0), standard_error(v, axis=0)
        print(key, " ".join(f"{x:.5f}" for x in m), "|",
              " ".join(f"{d:+.2f}" for d in (m - kern) / se))
    k = _kernel(out, L, a.kernel_log2n, a.kernel_replicates) if a.kernel else None
    edges = np.array(BINS) if k is None else snapped_edges(k["r"], k["du"])
    if k is not None:
        p = k["node_w"] / k["node_w"].sum()
        g = k["node_g"]
        mu = g @ p
        sd = np.sqrt(((g - mu[:, None]) ** 2) @ p)
        skew = (((g - mu[:, None]) ** 3) @ p) / sd**3
        print(f"\nkernel node law (ray 2^{a.kernel_log2n} x {a.kernel_replicates}): lambda "
              + " ".join(f"{x:.5f}" for x in mu) + "; per-sample SD "
              + " ".join(f"{x:.3f}" for x in sd) + "; skewness " + " ".join(f"{x:.1f}" for x in skew))
        for n in a.sim_n:
            t = node_law_t(k, n, a.sim_runs)
            print(f"  runs of {n} from the node law ({a.sim_runs} runs), layer 1..L: "
                  "mean t " + " ".join(f"{x:+.2f}" for x in t.mean(0))
                  + "; P(t <= -2) " + " ".join(f"{x:.3f}" for x in (t <= -2).mean(0))
                  + "; P(t <= -2.5) " + " ".join(f"{x:.3f}" for x in (t <= -2.5).mean(0)))
    by_inner = {}
    for (s, i, _n), (v, r) in runs.items():
        by_inner.setdefault(i, []).append((s, v, r))
    print("\npooled over seeds, per inner")
    for i, lst in sorted(by_inner.items()):
        V = np.concatenate([v for _, v, _ in lst])
        m, se = V.mean(0), standard_error(V, axis=0)
        print(f"inner {i}: {len(lst)} seeds {[s for s, _, _ in lst]}, {V.shape[0]} samples")
        for l in range(L):
            print(f"  layer {l + 1}: {m[l]:.6f} +- {se[l]:.2e}  dev {m[l] - kern[l]:+.2e} "
                  f"= {(m[l] - kern[l]) / se[l]:+.2f} SE")
        if len(lst) >= 3:
            ms = np.array([v.mean(0) for _, v, _ in lst])
            ses = np.array([standard_error(v, axis=0) for _, v, _ in lst])
            t = (ms - kern) / ses
            print("  per-seed t, layer 1:", " ".join(f"{x:+.2f}" for x in t[:, 0]))
            print("  mean per-seed t per layer:", " ".join(f"{x:+.2f}" for x in t.mean(0)))
            print("  seed-to-seed SD / rms SE per layer:",
                  " ".join(f"{ms[:, l].std(ddof=1) / np.sqrt((ses[:, l]**2).mean()):.2f}"
                           for l in range(L)))
            print("  corr(mean, SE) per layer:",
                  " ".join(f"{np.corrcoef(ms[:, l], ses[:, l])[0, 1]:+.2f}" for l in range(L)))
        for l in range(L):
            x = V[:, l]
            ks = [kk for kk in (30, 100, 300, 1000) if kk < x.size // 10]
            print(f"  layer {l + 1} tail: Hill "
                  + ", ".join(f"k={kk}: {hill(x, kk):.2f}" for kk in ks)
                  + f"; top 0.1% {top_share(x, 1e-3):.3f}, top 1% {top_share(x, 1e-2):.3f}")
        R = np.concatenate([r for _, _, r in lst])
        idx = np.digitize(R, edges) - 1
        print("  by |h| bin: P(bin) MC [kernel]; per layer the bin's share of lambda_l, "
              "MC +- SE [kernel] (dev/SE)")
        for b in range(len(edges) - 1):
            sel = idx == b
            line = f"   [{edges[b]:5.1f}, {edges[b + 1]:5.1f}): {sel.mean():.4f}"
            if k is not None:
                kb = (k["r"] >= edges[b]) & (k["r"] < edges[b + 1])
                line += f" [{k['mass'][kb].sum():.4f}]"
            for l in range(L):
                x = np.where(sel, V[:, l], 0.0)
                e = x.std(ddof=1) / np.sqrt(x.size)
                line += f" | {x.mean():.5f}+-{e:.1e}"
                if k is not None:
                    kv = k["lam"][l][kb].sum()
                    line += f" [{kv:.5f}] ({(x.mean() - kv) / e if e > 0 else 0:+.1f})"
            print(line)
    print("\npaired differences (seed, samples): inner_a - inner_b per layer, mean +- SE")
    keys = sorted(runs)
    for (s, i, n) in keys:
        for (s2, i2, n2) in keys:
            if s2 == s and n2 == n and i2 > i:
                d = runs[(s, i, n)][0] - runs[(s2, i2, n2)][0]
                print(f" seed {s} n {n}: {i} - {i2}: "
                      + " ".join(f"{x:+.2e}+-{e:.1e}" for x, e in
                                 zip(d.mean(0), standard_error(d, axis=0))))
    # 1 / inner fit of the paired differences to the largest inner, extrapolated to inner -> oo
    for (s, n) in sorted({(s, n) for s, _, n in keys}):
        inn = sorted(i for s2, i, n2 in keys if s2 == s and n2 == n)
        if len(inn) < 3:
            continue
        top = runs[(s, inn[-1], n)][0]
        x = 1.0 / np.array(inn[:-1], float) - 1.0 / inn[-1]
        D = np.stack([runs[(s, i, n)][0] - top for i in inn[:-1]])

        def slope(D, x=x):
            w = D.shape[1] / D.var(1, ddof=1)
            return (x[:, None] * D.mean(1) * w).sum(0) / ((x[:, None] ** 2) * w).sum(0)
        b = slope(D)
        grp = np.arange(n) % 20
        jk = np.array([slope(D[:, grp != j]) for j in range(20)])
        bse = np.sqrt(19 / 20 * ((jk - jk.mean(0)) ** 2).sum(0))
        vinf = top.mean(0) - b / inn[-1]
        se = standard_error(top, axis=0)
        print(f" seed {s}: slope b of v(inner) = v_oo + b / inner: "
              + " ".join(f"{x:+.2f}+-{e:.2f}" for x, e in zip(b, bse))
              + "; bias at 2048 (b / 2048): " + " ".join(f"{x:+.1e}" for x in b / 2048)
              + "; v_oo - kernel: " + " ".join(f"{d:+.2f}" for d in (vinf - kern) / se) + " SE")


def cmd_decompose(a) -> None:
    """Split each run's deviation from the kernel into the sampled h (the quadrature's inner
    rule at the same h, :func:`quadrature_at`, minus the kernel) and the plain route's inner
    estimator (its per-teacher values minus the quadrature at the same h, paired)."""
    L = a.layers
    out = Path(a.out)
    kern = np.array(KERNEL[L])
    rows = []
    for (s, i, n), (v, _) in sorted(_load(out, L).items()):
        if i != a.inner:
            continue
        f = out / f"quad_L{L}_s{s}_n{n}_q{a.log2n}.npz"
        if not f.exists():
            h = true_scores(layers=L, samples=n, seed=s)
            np.savez(f, g=quadrature_at(h, layers=L, log2n=a.log2n, seed=1000 + s))
        g = np.load(f)["g"]
        d = v - g
        rows.append((s, v, g))
        print(f"seed {s} (n {n}): h part (mean g - kernel) / SE_g "
              + " ".join(f"{x:+.2f}" for x in (g.mean(0) - kern) / standard_error(g, axis=0))
              + " | inner part mean(v - g) "
              + " ".join(f"{x:+.1e}+-{e:.0e}" for x, e in
                         zip(d.mean(0), standard_error(d, axis=0))), flush=True)
    if not rows:
        return
    V = np.concatenate([v for _, v, _ in rows])
    G = np.concatenate([g for _, _, g in rows])
    D = V - G
    kf = sorted(out.glob(f"kernel_L{L}_*.npz"))
    if kf:   # the mechanism: a run's mean follows its count of draws in the law's top 1 %
        k = np.load(kf[-1])
        p = k["node_w"] / k["node_w"].sum()
        for l in range(L):
            o = np.argsort(-k["node_g"][l])
            q = k["node_g"][l][o][np.searchsorted(np.cumsum(p[o]), 0.01)]
            share = p[o][:np.searchsorted(np.cumsum(p[o]), 0.01)] @ k["node_g"][l][o][
                :np.searchsorted(np.cumsum(p[o]), 0.01)] / (p @ k["node_g"][l])
            cnt = np.array([(g[:, l] > q).mean() for _, _, g in rows])
            t = np.array([(v[:, l].mean() - kern[l]) / standard_error(v[:, l])
                          for _, v, _ in rows])
            print(f"  layer {l + 1}: kernel's top 1 % of h (g > {q:.3g}) carries {share:.3f} "
                  f"of lambda; per-seed fraction of teachers there {cnt.mean():.4f} (SD "
                  f"{cnt.std(ddof=1):.4f}, Poisson {np.sqrt(0.01 / rows[0][1].shape[0]):.4f});"
                  f" corr(fraction, t) {np.corrcoef(cnt, t)[0, 1]:+.2f}")
    print(f"\npooled, {len(rows)} seeds, {V.shape[0]} teachers, inner {a.inner}, quadrature "
          f"2 x 2^{a.log2n - 1} per seed (one set per seed)")
    for l in range(L):
        ms = np.array([(v[:, l] - g[:, l]).mean() for _, v, g in rows])
        gs = np.array([g[:, l].mean() for _, _, g in rows])
        print(f"  layer {l + 1}: MC - kernel {V[:, l].mean() - kern[l]:+.2e} +- "
              f"{standard_error(V[:, l]):.1e} | h part {G[:, l].mean() - kern[l]:+.2e} +- "
              f"{standard_error(G[:, l]):.1e} (seed scatter {standard_error(gs):.1e}) | "
              f"inner part {D[:, l].mean():+.2e} +- {standard_error(D[:, l]):.1e} "
              f"(seed scatter {standard_error(ms):.1e})")


def cmd_hlaw(a) -> None:
    """The kernel's law of h (mass Z(h) dh of its outer nodes, cached by ``report --kernel``)
    against exact samples h = h^(L)(z), z ~ N(0, I): E|h|^2, E|h|^4, E|h|^6."""
    L = a.layers
    k = _kernel(Path(a.out), L, a.kernel_log2n, a.kernel_replicates)
    rn = np.repeat(k["r"], k["node_w"].size // k["r"].size)
    rng = np.random.default_rng(a.seed)
    R = np.concatenate([np.linalg.norm(smi_weak.scores(rng.standard_normal((500_000, L, 2)),
                                                       skip=1.0, beta=1.0), axis=1)
                        for _ in range(a.batches)])
    print(f"L = {L}: {R.size} exact samples; kernel mass {k['node_w'].sum():.7f}")
    for p in (2, 4, 6):
        m, se, km = (R**p).mean(), standard_error(R**p), k["node_w"] @ rn**p
        print(f"  E|h|^{p}: sampled {m:.6g} +- {se:.2g}, kernel {km:.6g} ({(km - m) / se:+.1f} SE)")


def _ints(s: str) -> list[int]:
    out = []
    for part in s.split(","):
        lo, _, hi = part.partition("-")
        out += list(range(int(lo), int(hi) + 1)) if hi else [int(lo)]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--layers", type=int, choices=(4, 5), default=4)
    r.add_argument("--seeds", type=_ints, default=[31])
    r.add_argument("--inner", type=_ints, default=[1024, 4096, 16384])
    r.add_argument("--samples", type=int, default=6000)
    r.add_argument("--out", required=True)
    p = sub.add_parser("report")
    p.add_argument("--layers", type=int, choices=(4, 5), default=4)
    p.add_argument("--out", required=True)
    p.add_argument("--kernel", action="store_true")
    p.add_argument("--kernel-log2n", type=int, default=14)
    p.add_argument("--kernel-replicates", type=int, default=16)
    p.add_argument("--sim-n", type=_ints, default=[6000])
    p.add_argument("--sim-runs", type=int, default=400)
    d = sub.add_parser("decompose")
    d.add_argument("--layers", type=int, choices=(4, 5), default=4)
    d.add_argument("--out", required=True)
    d.add_argument("--inner", type=int, default=2048)
    d.add_argument("--log2n", type=int, default=16)
    w = sub.add_parser("hlaw")
    w.add_argument("--layers", type=int, choices=(4, 5), default=5)
    w.add_argument("--out", required=True)
    w.add_argument("--kernel-log2n", type=int, default=14)
    w.add_argument("--kernel-replicates", type=int, default=16)
    w.add_argument("--batches", type=int, default=8)
    w.add_argument("--seed", type=int, default=123)
    a = ap.parse_args()
    {"run": cmd_run, "report": cmd_report, "decompose": cmd_decompose, "hlaw": cmd_hlaw}[a.cmd](a)


if __name__ == "__main__":
    main()
