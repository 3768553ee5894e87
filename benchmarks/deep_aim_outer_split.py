"""Deep AIM SE, output side (THEORY 1.6; docs/deep_aim.md section 4, "Estimator, accuracy and
speed (issue 17)"): can the outer average of E_l = E|g_l|^2 be made cheaper by splitting it at the
kink z1 = 0? A measured feasibility study (issue 17 item 6), not an engine change.

The engine (numerics.deep_aim_se.output_overlaps, ``estimator="variance"``) averages the
posterior-variance form f_l = (2 V_l - tr Cov_l[. | z]) / V_l^2 over 8 standard normals u by
scrambled Sobol, truths first: the truth x of layer 2 is sqrt(Q0_2) (u_0, u_1), so z1 = 0 exactly
where u_0 = 0. Along u_0 the integrand behaves as if singular there (as z1 -> 0 the fibre stops
suppressing the small-mu part of H1's posterior): on lines in u_0 at 4 random u_1..u_7 a
full-line Gauss-Hermite rule converges only like 1/n (E_1 errors 2.0e-2, 1.1e-2, 5.4e-3, 2.4e-3
at 8, 16, 32, 64 nodes on the first line), while the graded half-line rule below at step 0.18
(64 nodes) is within 3e-8 to 4e-5 of its step-0.125 value (``--lines``).
Estimators compared here, at the same inner trapezoid step (so the inner-rule error is
common and left out):

* ``sobol8``: the engine's estimator (its point sets, ``_sobol_normals``), one inner step.
* ``split``: u_0 by a deterministic half-line rule on each side of 0, graded in log |u_0|
  (u = exp(s - e^{-s}), trapezoid in s of step ``h_u``: double-exponential towards 0, Gaussian
  decay in s at infinity), the other 7 normals by scrambled Sobol (2^m points x scrambles). The
  estimate is unbiased for the half-line rule's integral; the rule error is |I(h_u) - I(2 h_u)| on
  the same points (the step-2 h_u rule is every other node: no extra cost).
* ``sobol8p``: the engine's points with the Sobol dimensions reordered (:data:`REORDER`).
* ``mapped``: 8-d scrambled Sobol with the first uniform coordinate mapped through the same graded
  map (v -> s = k logit(|2v - 1|), importance weight phi(u_0) du_0/dv): unbiased, same cost per
  point as ``sobol8``.

    python benchmarks/deep_aim_outer_split.py --estimators sobol8,split --m8 8,10 --m7 4,6
    python benchmarks/deep_aim_outer_split.py --profile 3   # f along u_0 at 3 random points
    python benchmarks/deep_aim_outer_split.py --lines 4     # u_0 rules on 4 single lines
    python benchmarks/deep_aim_outer_split.py --variance 400 --seed 11   # what u_0 carries

Timings are wall seconds on a shared machine: upper bounds.

Measured (2026-11-26, q = (0.679, 0.944), skip = 1, rho = (0.5, 0.5), seeds 0 and 1;
docs/deep_aim.md section 4): the split does not pay. At 2^10 x 8 Sobol points its 7-d average
has 2.7-3.7 times smaller standard errors than the engine's 8-d one, but each point costs 34
evaluations; at equal time its standard error is 2-5 times larger (3.0e-4, 2.5e-4 in 108-138 s
against 6.5e-5 to 9.8e-5 in 71-77 s for 2^14 x 8 engine points). The kink direction u_0 carries
about half (E_1) and three quarters (E_2) of the per-point variance; the remaining 7-d average
converges like n^-0.6 to n^-1.0 and alone keeps 1e-6 hours away.
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np
from aim_sym.numerics import deep_aim_se as ds
from aim_sym.numerics.records import standard_error
from scipy.special import ndtri
from scipy.stats import qmc

#: the half-line map u = exp(s - e^{-s}) is truncated to s in [S_MIN, S_MAX]: the Gaussian mass
#: left out is below 1e-12 (u(S_MIN) = 2.4e-13 near 0; u(S_MAX) = 7.6 in the tail)
S_MIN, S_MAX = -3.25, 2.15


def outer_integrand(model: ds.DeepAimSE, q1: float, q2: float, u: np.ndarray,
                    h_in: float, chunk: int = 256) -> np.ndarray:
    """The variance-form integrands (f_1, f_2) = ((2 V_l - tr Cov_l[. | z]) / V_l^2) at the outer
    points u (rows, 8 standard normals, truths first as in the engine's ``_outer_points``), inner
    trapezoid step ``h_in``. Shape (rows, 2)."""
    v1, v2 = model.q0[0] - q1, model.q0[1] - q2
    out = np.empty((u.shape[0], 2))
    for st in range(0, u.shape[0], chunk):
        a, b, e1, e2 = ds._outer_points(model, q1, q2, u[st:st + chunk], "variance")
        z1, z2 = ds.statistics(a[:, 0] + e1[:, 0], a[:, 1] + e1[:, 1], b[:, 0] + e2[:, 0],
                               b[:, 1] + e2[:, 1], skip=model.skip, beta=model.beta)
        p = ds.posterior(model, z1, z2, a[:, 0], a[:, 1], b[:, 0], b[:, 1], v1, v2, h_in)
        out[st:st + chunk, 0] = (2.0 * v1 - p["tr_cov_xi"]) / v1**2
        out[st:st + chunk, 1] = (2.0 * v2 - p["tr_cov_x"]) / v2**2
    return out


def half_line_rule(h_u: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Nodes and N(0, 1) weights of the split rule for u_0 on both half lines: u = +-exp(s -
    e^{-s}), s on a trapezoid of step h_u over [S_MIN, S_MAX], weights normalised to mass 1; also
    the weights of the step-2 h_u rule on the same nodes (every other node, zero elsewhere)."""
    s = S_MIN + h_u * np.arange(int(math.ceil((S_MAX - S_MIN) / h_u)) + 1)
    u = np.exp(s - np.exp(-s))
    dens = u * (1.0 + np.exp(-s)) * np.exp(-0.5 * u * u) / math.sqrt(2.0 * math.pi)
    w = h_u * dens
    w2 = np.where(np.arange(s.size) % 2 == 0, 2.0 * h_u * dens, 0.0)
    # normalised to total mass 1 (exact for constants; the truncation and step errors of the
    # mass, 2e-5 at h_u = 0.35 and 5e-3 at 0.7, would otherwise dominate the rule difference)
    w, w2 = w / (2.0 * w.sum()), w2 / (2.0 * w2.sum())
    return (np.concatenate([-u[::-1], u]), np.concatenate([w[::-1], w]),
            np.concatenate([w2[::-1], w2]))


def _uniform_sobol(d: int, m: int, scrambles: int, seed: int) -> np.ndarray:
    """(scrambles, 2^m, d) independently scrambled Sobol points in (0, 1)^d."""
    return np.stack([qmc.Sobol(d=d, scramble=True, seed=np.random.default_rng([seed, s, d, 7]))
                     .random_base2(m) for s in range(scrambles)])


#: ``sobol8p``: u_j is Sobol dimension REORDER[j], so that u_0, u_2, u_4 (x_1, xi_1, a_1: the
#: kink direction and the two largest main effects of the rest) get the first three dimensions
REORDER = (0, 3, 1, 4, 2, 5, 6, 7)


def run_sobol8(model: ds.DeepAimSE, q1: float, q2: float, *, m: int, scrambles: int, seed: int,
               h_in: float, reorder: bool = False) -> dict:
    """The engine's estimator: per-scramble means of (f_1, f_2) on its truths-first point sets
    (``reorder``: the same points with the Sobol dimensions permuted by REORDER)."""
    normals = ds._sobol_normals(m, scrambles, seed)
    if reorder:
        normals = normals[:, :, list(REORDER)]
    t0 = time.perf_counter()
    per = np.stack([outer_integrand(model, q1, q2, normals[k], h_in).mean(axis=0)
                    for k in range(scrambles)])
    return {"per": per, "rule": np.zeros(2), "secs": time.perf_counter() - t0,
            "evals": scrambles * 2**m}


def run_split(model: ds.DeepAimSE, q1: float, q2: float, *, m: int, scrambles: int, seed: int,
              h_in: float, h_u: float) -> dict:
    """u_0 by the half-line rule (:func:`half_line_rule`), u_1..u_7 by scrambled Sobol."""
    x, w, w2 = half_line_rule(h_u)
    uni = _uniform_sobol(7, m, scrambles, seed)
    t0 = time.perf_counter()
    per, per2 = np.zeros((scrambles, 2)), np.zeros((scrambles, 2))
    for k in range(scrambles):
        rest = ndtri(np.clip(uni[k], 1e-300, 1.0 - 2.0**-53))
        u = np.empty((rest.shape[0], x.size, 8))
        u[:, :, 0] = x[None, :]
        u[:, :, 1:] = rest[:, None, :]
        f = outer_integrand(model, q1, q2, u.reshape(-1, 8), h_in).reshape(rest.shape[0],
                                                                            x.size, 2)
        per[k] = np.einsum("pjl,j->l", f, w) / rest.shape[0]
        per2[k] = np.einsum("pjl,j->l", f, w2) / rest.shape[0]
    return {"per": per, "rule": np.abs(per.mean(0) - per2.mean(0)),
            "secs": time.perf_counter() - t0, "evals": scrambles * 2**m * x.size}


def run_mapped(model: ds.DeepAimSE, q1: float, q2: float, *, m: int, scrambles: int, seed: int,
               h_in: float, k: float = 1.0) -> dict:
    """8-d scrambled Sobol, the first coordinate mapped: w = |2 v - 1|, s = k log(w / (1 - w)),
    u_0 = sign(2 v - 1) exp(s - e^{-s}), weight phi(u_0) |du_0/dv| (unbiased)."""
    uni = _uniform_sobol(8, m, scrambles, seed)
    t0 = time.perf_counter()
    per = np.zeros((scrambles, 2))
    for j in range(scrambles):
        v = np.clip(uni[j], 1e-300, 1.0 - 2.0**-53)
        u = ndtri(v)
        wv = np.clip(np.abs(2.0 * v[:, 0] - 1.0), 1e-300, 1.0 - 2.0**-53)
        s = k * np.log(wv / (1.0 - wv))
        with np.errstate(over="ignore", under="ignore"):
            u0 = np.exp(s - np.exp(-s))
            jac = 2.0 * u0 * (1.0 + np.exp(-s)) * k / (wv * (1.0 - wv))
            wt = np.nan_to_num(np.exp(-0.5 * u0 * u0) / math.sqrt(2.0 * math.pi) * jac)
        u[:, 0] = np.sign(2.0 * v[:, 0] - 1.0) * np.nan_to_num(u0, posinf=40.0)
        keep = wt > 0
        f = np.zeros((v.shape[0], 2))
        f[keep] = outer_integrand(model, q1, q2, u[keep], h_in)
        per[j] = (f * wt[:, None]).mean(axis=0)
    return {"per": per, "rule": np.zeros(2), "secs": time.perf_counter() - t0,
            "evals": scrambles * 2**m}


def profile(model: ds.DeepAimSE, q1: float, q2: float, *, points: int, seed: int,
            h_in: float) -> None:
    """f_1, f_2 along u_0 in +-[1e-6, 3] at ``points`` random settings of u_1..u_7 (seeded)."""
    rng = np.random.default_rng(seed)
    us = np.logspace(-6, 0.5, 14)
    us = np.concatenate([-us[::-1], us])
    for _ in range(points):
        base = rng.standard_normal(8)
        u = np.tile(base, (us.size, 1))
        u[:, 0] = us
        f = outer_integrand(model, q1, q2, u, h_in)
        print("u_1..u_7 =", np.round(base[1:], 3).tolist())
        for x, (f1, f2) in zip(us, f):
            print(f"  u_0 = {x:+.2e}  f_1 = {f1:.8f}  f_2 = {f2:.8f}")


def variance_split(model: ds.DeepAimSE, q1: float, q2: float, *, points: int, seed: int,
                   h_in: float, h_u: float) -> None:
    """At ``points`` random settings of u_1..u_7 (plain Monte Carlo, seeded): Var f (per point, 8
    dimensions) = Var g + E Var(f | u_1..u_7), g the u_0-integral (the split rule at ``h_u``); the
    binned first-order shares of Var g per coordinate and the share a quadratic fit in the 7
    normals leaves."""
    x, w, _ = half_line_rule(h_u)
    rest = np.random.default_rng(seed).standard_normal((points, 7))
    u = np.empty((points, x.size, 8))
    u[:, :, 0] = x[None, :]
    u[:, :, 1:] = rest[:, None, :]
    f = outer_integrand(model, q1, q2, u.reshape(-1, 8), h_in).reshape(points, x.size, 2)
    g = np.einsum("pjl,j->pl", f, w)
    within = np.einsum("pjl,j->pl", (f - g[:, None, :]) ** 2, w).mean(axis=0)
    vg = g.var(axis=0, ddof=1)
    print(f"Var g = {vg.round(4).tolist()}, E Var(f | rest) = {within.round(4).tolist()}, "
          f"Var f = {(vg + within).round(4).tolist()}  (E_1, E_2)")
    for j in range(7):
        b = np.digitize(rest[:, j], [-1.0, -0.3, 0.3, 1.0])
        share = sum((b == k).sum() * (g[b == k].mean(axis=0) - g.mean(axis=0)) ** 2
                    for k in range(5) if (b == k).any()) / (points * g.var(axis=0))
        print(f"  u_{j + 1}: binned first-order share of Var g {np.round(share, 3).tolist()}")
    cols = [np.ones(points)] + [rest[:, i] for i in range(7)] + [
        rest[:, i] * rest[:, k] for i in range(7) for k in range(i, 7)]
    X = np.stack(cols, axis=-1)
    res = g - X @ np.linalg.lstsq(X, g, rcond=None)[0]
    left = (res.var(axis=0) / g.var(axis=0)).round(3).tolist()
    print(f"  quadratic fit ({X.shape[1]} terms) leaves {left} of Var g")


def lines(model: ds.DeepAimSE, q1: float, q2: float, *, points: int, seed: int,
          h_in: float) -> None:
    """The u_0-integral at ``points`` random settings of u_1..u_7: full-line Gauss-Hermite (8-64
    nodes) and the split rule (h_u 0.5-0.18) minus the split rule at h_u = 0.125."""
    rules = {f"Gauss-Hermite {n}": np.polynomial.hermite_e.hermegauss(n) for n in (8, 16, 32, 64)}
    rules = {k: (x, w / math.sqrt(2.0 * math.pi)) for k, (x, w) in rules.items()}
    rules.update({f"split h_u {h}": half_line_rule(h)[:2] for h in (0.5, 0.35, 0.25, 0.18, 0.125)})
    rng = np.random.default_rng(seed)
    for _ in range(points):
        base = rng.standard_normal(8)
        val = {}
        for name, (x, w) in rules.items():
            u = np.tile(base, (x.size, 1))
            u[:, 0] = x
            val[name] = w @ outer_integrand(model, q1, q2, u, h_in)
        ref = val["split h_u 0.125"]
        print("u_1..u_7 =", np.round(base[1:], 3).tolist())
        for name, v in val.items():
            print(f"  {name:18s} ({rules[name][0].size:3d} nodes): error (E_1, E_2) = "
                  f"{(v - ref)[0]:+.1e}, {(v - ref)[1]:+.1e}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--skip", type=float, default=1.0)
    p.add_argument("--rho", default="0.5,0.5", help="rho1,rho2")
    p.add_argument("--q", default="0.679,0.944", help="q1,q2 (the alpha = 0.1 fixed point)")
    p.add_argument("--estimators", default="sobol8,split,mapped")
    p.add_argument("--m8", default="8,10", help="log2 points per scramble, sobol8 and mapped")
    p.add_argument("--m7", default="4,6", help="log2 Sobol points per scramble, split")
    p.add_argument("--h-u", default="0.35", help="half-line rule steps in s (split)")
    p.add_argument("--map-k", default="1.0", help="grading constants k of the mapped estimator")
    p.add_argument("--scrambles", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--h-in", type=float, default=ds.INNER_STEPS[1], help="inner trapezoid step")
    p.add_argument("--profile", type=int, default=0, help="print f along u_0 at this many points")
    p.add_argument("--variance", type=int, default=0,
                   help="variance split Var f = Var g + E Var(f|rest) at this many points")
    p.add_argument("--lines", type=int, default=0,
                   help="u_0 rules (Gauss-Hermite, split) on this many single lines")
    a = p.parse_args()
    for opt, v, lo in (("--profile", a.profile, 0), ("--variance", a.variance, 0),
                       ("--lines", a.lines, 0)):
        if not lo <= v <= 100_000:
            p.error(f"{opt}: an integer in [{lo}, 100000], got {v}")
    if a.variance == 1:
        p.error("--variance: 0 or at least 2 points (a variance needs two), got 1")
    if a.scrambles < 2:
        p.error(f"--scrambles: at least 2 (the standard error needs two), got {a.scrambles}")
    for opt, vals, lo in (("--m8", a.m8, 1), ("--m7", a.m7, 1)):
        if not all(v.strip().isdigit() and lo <= int(v) <= 20 for v in vals.split(",")):
            p.error(f"{opt}: comma-separated integers in [1, 20], got {vals!r}")
    for opt, vals in (("--h-u", a.h_u), ("--map-k", a.map_k)):
        try:
            ok = all(0.05 <= float(v) <= 2.0 for v in vals.split(","))
        except ValueError:
            ok = False
        if not ok:
            p.error(f"{opt}: comma-separated numbers in [0.05, 2], got {vals!r}")
    try:
        rho1, rho2 = (float(x) for x in a.rho.split(","))
        q1, q2 = (float(x) for x in a.q.split(","))
        model = ds.DeepAimSE(skip=a.skip, rho1=rho1, rho2=rho2)
        ds._check_q(model, q1, q2)
    except ValueError as e:
        p.error(f"--skip/--rho/--q: {e}")
    if a.profile:
        profile(model, q1, q2, points=a.profile, seed=a.seed, h_in=a.h_in)
        return
    if a.variance:
        variance_split(model, q1, q2, points=a.variance, seed=a.seed, h_in=a.h_in,
                       h_u=float(a.h_u.split(",")[0]))
        return
    if a.lines:
        lines(model, q1, q2, points=a.lines, seed=a.seed, h_in=a.h_in)
        return
    print(f"skip = {a.skip}, rho = ({rho1}, {rho2}), q = ({q1}, {q2}), inner step {a.h_in}, "
          f"{a.scrambles} scrambles, seed {a.seed}; se = 1 standard error over scrambles; rule = "
          "|I(h_u) - I(2 h_u)| of the split rule")
    print("| estimator | points | f evals | seconds | E_1 +- se (rule) | E_2 +- se (rule) |")
    print("|---|---|---|---|---|---|")
    for est in a.estimators.split(","):
        if est == "split":
            runs = [(f"2^{m} x {a.scrambles} x {half_line_rule(float(h))[0].size} (h_u {h})",
                     lambda m=int(m), h=float(h): run_split(
                         model, q1, q2, m=m, scrambles=a.scrambles, seed=a.seed, h_in=a.h_in,
                         h_u=h))
                    for h in a.h_u.split(",") for m in a.m7.split(",")]
        elif est in ("sobol8", "sobol8p"):
            runs = [(f"2^{m} x {a.scrambles}", lambda m=int(m), r=est == "sobol8p": run_sobol8(
                model, q1, q2, m=m, scrambles=a.scrambles, seed=a.seed, h_in=a.h_in, reorder=r))
                for m in a.m8.split(",")]
        elif est == "mapped":
            runs = [(f"2^{m} x {a.scrambles} (k {k})", lambda m=int(m), k=float(k): run_mapped(
                model, q1, q2, m=m, scrambles=a.scrambles, seed=a.seed, h_in=a.h_in, k=k))
                for k in a.map_k.split(",") for m in a.m8.split(",")]
        else:
            p.error(f"--estimators: each one of sobol8, sobol8p, split, mapped, got {est!r}")
        for label, run in runs:
            r = run()
            val, se = r["per"].mean(axis=0), standard_error(r["per"], axis=0)
            cells = [f"{val[i]:.7f} +- {se[i]:.1e} ({r['rule'][i]:.1e})" for i in range(2)]
            print(f"| {est} | {label} | {r['evals']} | {r['secs']:.1f} | {cells[0]} | "
                  f"{cells[1]} |", flush=True)


if __name__ == "__main__":
    main()
