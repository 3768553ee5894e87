"""Deep tied attention (issue 14): the weak-threshold engine numerics.smi_weak away from c = 1,
beta = 1, checked against seeded Monte Carlo (THEORY 2.2, 2.5; docs/smi_depth.md, "Ranges").

For each case (L, M, c, beta): lambda_l +- bar of the default rule (``smi_weak.stability``,
rule "auto": ray for L = 3, 4 with M = 2 and L = 3, M = 3, Gauss-Hermite for L = 2), its
seconds, mass and the identity E tr C_l = M, then the model-sampled route
(``model_sampled_lambdas`` of tests/smi_mc_oracles.py: h sampled from the model by scrambled
Sobol sets over the true z, iid prior samples of the free rows, block U-statistic) with its
standard error over replicates, and, with ``--plain``, plain Monte Carlo (``montecarlo_lambdas``).
``dev`` is (Monte Carlo - quadrature) / sqrt(SE_mc^2 + SE_q^2), SE_q = bar / t (t the bar's
Student-t 99% factor; 2.58 for Gauss-Hermite), i.e. in combined standard errors.

``--bias``: the ratio bias of the model-sampled route at its block size k, paired (the same h
and inner samples at blocks of k / 2: bias(k) = value(k / 2) - value(k), the 1 / k law); the
table then also shows the value corrected by it.

``--sequential L,M,c,beta``: the sequential threshold of the first layer on the last layer's
branch by the branch kernel (``smi_branch_qmc.sequential_thresholds_qmc``, rule ``--seq-rule``
log2 outer, log2 inner, replicates) and, at its root q_L*, the seeded plain Monte Carlo of
tests/test_smi_branch_qmc.py (``plain_branch_mc``, per-teacher iid inner draws; its ratio bias
removed by the 1/k law, 2 x halves - quarters of the same draws): the residual r_1 = mu_1 -
(1 - q) K_L / q must vanish there and mu_1 equal 1 / alpha_seq,1.

Run: python benchmarks/smi_weak_ranges.py [--cases 4,2,2,1;4,2,4,1] [--replicates 16]
     [--log2-outer 12] [--log2-inner 15] [--block 4096] [--seed 1] [--bias] [--plain 4000]
     python benchmarks/smi_weak_ranges.py --sequential 2,3,2,1 [--seq-rule 11,13,8]
     [--seq-samples 4000] [--seq-inner 2048]
"""

import argparse
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

# the brief of issue 14 (C3): L = 4, M = 2 and M = 3 at L = 2, 3, away from c = 1, beta = 1
CASES = ("4,2,2,1;4,2,4,1;4,2,1,0.25;4,2,1,2;4,2,0.5,2;"
         "2,3,2,1;2,3,4,1;2,3,1,2;2,3,1,0.25;3,3,2,1;3,3,4,1;3,3,1,2;3,3,1,0.25")


def quadrature_se(e) -> float:
    """Standard-error equivalent of a quadrature bar: bar / t(0.995, R - 1) for the Sobol rules,
    bar / 2.58 for the Gauss-Hermite refinements."""
    reps = e.method.split(" replicates of ")[0].split(" x ")[-1]
    t = stats.t.ppf(smi_weak.COVERAGE, int(reps) - 1) if reps.isdigit() else 2.576
    return e.error / t


def run_case(L, M, c, beta, a):
    t0 = time.perf_counter()
    F = smi_weak.stability(layers=L, tokens=M, skip=c, beta=beta, seed=a.quad_seed)
    dq = time.perf_counter() - t0
    print(f"\n## L = {L}, M = {M}, c = {c:g}, beta = {beta:g}")
    print(f"quadrature: {F['lam1'].method}; {dq:.1f} s")
    print(f"mass {F['mass'].value:.7f} +- {F['mass'].error:.1e}; " + ", ".join(
        f"E tr C_{l} - M = {F[f'trace{l}'].value - M:+.1e} +- {F[f'trace{l}'].error:.1e}"
        for l in range(1, L + 1)))
    t0 = time.perf_counter()
    kw = dict(layers=L, tokens=M, skip=c, beta=beta, log2_outer=a.log2_outer,
              log2_inner=a.log2_inner, replicates=a.replicates, seed=a.seed)
    ms = smi_mc_oracles.model_sampled_lambdas(block=a.block, **kw)
    dm = time.perf_counter() - t0
    print(f"model-sampled route: {a.replicates} x 2^{a.log2_outer} h, 2^{a.log2_inner} inner, "
          f"blocks of {a.block}, seed {a.seed}; {dm:.1f} s")
    bias = None
    if a.bias:
        t0 = time.perf_counter()
        half = smi_mc_oracles.model_sampled_lambdas(block=a.block // 2, **kw)
        d = half["per"] - ms["per"]
        bias = [(float(v.mean()), float(v.std(ddof=1) / np.sqrt(len(v)))) for v in d.T]
        print(f"  ratio bias at blocks of {a.block} (paired, blocks of {a.block // 2}); "
              f"{time.perf_counter() - t0:.1f} s")
    pl = None
    if a.plain:
        t0 = time.perf_counter()
        pl = smi_mc_oracles.montecarlo_lambdas(layers=L, tokens=M, skip=c, beta=beta,
                                               samples=a.plain, inner=a.plain_inner,
                                               seed=a.seed)
        print(f"plain Monte Carlo: {a.plain} x {a.plain_inner}, seed {a.seed}; "
              f"{time.perf_counter() - t0:.1f} s")
    print("| layer | lambda_l | alpha_l | model-sampled lambda | dev | "
          + ("ratio bias | corrected | dev | " if bias else "")
          + ("plain MC lambda | dev |" if pl else ""))
    rows = []
    for l in range(1, L + 1):
        e = F[f"lam{l}"]
        sq = quadrature_se(e)
        m, se = ms[f"lam{l}"]
        row = dict(layer=l, lam=e.value, bar=e.error, se_q=sq, ms=m, ms_se=se,
                   dev=(m - e.value) / np.hypot(se, sq))
        cells = [f"{l}", f"{e.value:.6g} +- {e.error:.1e}",
                 f"{1 / e.value:.6g} +- {e.error / e.value**2:.1e}", f"{m:.6g} +- {se:.1e}",
                 f"{row['dev']:+.1f}"]
        if bias:
            b, bse = bias[l - 1]
            mc, sc = m - b, np.hypot(se, bse)
            row.update(bias=b, bias_se=bse, corrected=mc, dev_corrected=(mc - e.value)
                       / np.hypot(sc, sq))
            cells += [f"{b:+.1e} +- {bse:.0e}", f"{mc:.6g} +- {sc:.1e}",
                      f"{row['dev_corrected']:+.1f}"]
        if pl:
            p, pse = pl[f"lam{l}"]
            row.update(plain=p, plain_se=pse, dev_plain=(p - e.value) / np.hypot(pse, sq))
            cells += [f"{p:.5g} +- {pse:.1e}", f"{row['dev_plain']:+.1f}"]
        print("| " + " | ".join(cells) + " |")
        rows.append(row)
    sys.stdout.flush()
    return dict(F=F, rows=rows, seconds_quadrature=dq, seconds_mc=dm)


def run_sequential(spec, a):
    """The branch kernel's first sequential threshold against plain Monte Carlo at its root."""
    from aim_sym.numerics import smi_branch_qmc
    from test_smi_branch_qmc import plain_branch_mc

    L, M, c, beta = (float(x) for x in spec.split(","))
    L, M = int(L), int(M)
    lo, li, R = (int(x) for x in a.seq_rule.split(","))
    t0 = time.perf_counter()
    out = smi_branch_qmc.sequential_thresholds_qmc(layers=L, tokens=M, skip=c, beta=beta,
                                                   log2_outer=lo, log2_inner=li, replicates=R,
                                                   seed=a.quad_seed)
    print(f"\n## sequential, L = {L}, M = {M}, c = {c:g}, beta = {beta:g}: branch kernel "
          f"{R} x 2^{lo} teachers x 2^{li} inner; {time.perf_counter() - t0:.1f} s")
    for r in out:
        print(f"layer {r['layer']}: alpha_seq = {r['value']:.5f} +- {r['error']:.1e}, q{L}* = "
              f"{r[f'q{L}']:.6f} +- {r[f'q{L}_error']:.1e}" + (" (first)" if r["first"] else ""))
    first = next(r for r in out if r["first"])
    layer, q = first["layer"], first[f"q{L}"]
    t0 = time.perf_counter()
    m2, m4 = (plain_branch_mc(q, layers=L, tokens=M, skip=c, beta=beta, samples=a.seq_samples,
                              inner=a.seq_inner, seed=a.seed, blocks=b) for b in (2, 4))
    mc = 2 * m2 - m4
    se = lambda x: float(x.std(ddof=1) / np.sqrt(len(x)))  # noqa: E731
    res = mc[:, layer - 1] - (1 - q) / q * mc[:, L - 1]
    slope = abs(first["slope_r"]) / (1 - q)
    mu, mu_bar = 1 / first["value"], first["error"] / first["value"] ** 2
    print(f"plain Monte Carlo at q{L} = {q:.6f}: {a.seq_samples} teachers x {a.seq_inner} draws, "
          f"seed {a.seed}, bias removed (2 x halves - quarters); {time.perf_counter() - t0:.1f} s")
    print(f"  r_{layer} = {res.mean():+.4f} +- {se(res):.4f} (SE; q's bar moves it by "
          f"{slope * first[f'q{L}_error']:.4f})")
    m, s_m = mc[:, layer - 1].mean(), se(mc[:, layer - 1])
    print(f"  mu_{layer} = {m:.4f} +- {s_m:.4f} against 1 / alpha_seq = {mu:.4f} +- {mu_bar:.4f}"
          f": {(m - mu) / s_m:+.1f} SE of the Monte Carlo, {abs(m - mu) / (mu_bar + 3.5 * s_m):.2f}"
          " of (bar + 3.5 SE)")
    raw = m2[:, layer - 1]
    print(f"  (uncorrected halves: mu_{layer} = {raw.mean():.4f} +- {se(raw):.4f}; K{L} = "
          f"{mc[:, L - 1].mean():.4f} +- {se(mc[:, L - 1]):.4f})")
    sys.stdout.flush()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", default=CASES, help="L,M,c,beta;...")
    ap.add_argument("--replicates", type=int, default=16)
    ap.add_argument("--log2-outer", type=int, default=12)
    ap.add_argument("--log2-inner", type=int, default=15)
    ap.add_argument("--block", type=int, default=4096)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--quad-seed", type=int, default=0)
    ap.add_argument("--bias", action="store_true")
    ap.add_argument("--plain", type=int, default=0, help="plain Monte Carlo samples")
    ap.add_argument("--plain-inner", type=int, default=4096)
    ap.add_argument("--sequential", default="", help="L,M,c,beta: the branch-kernel check")
    ap.add_argument("--seq-rule", default="11,13,8")
    ap.add_argument("--seq-samples", type=int, default=4000)
    ap.add_argument("--seq-inner", type=int, default=2048)
    a = ap.parse_args()
    if a.sequential:
        run_sequential(a.sequential, a)
        return
    for case in a.cases.split(";"):
        L, M, c, beta = case.split(",")
        run_case(int(L), int(M), float(c), float(beta), a)


if __name__ == "__main__":
    main()
