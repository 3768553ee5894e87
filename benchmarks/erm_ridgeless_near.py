"""The ridgeless (lambda = 0) ERM curve between alpha_interp and 0.3 (issue 16, THEORY 3).

T = 2, kappa0 = Delta = 0.5, beta = beta0 = 1 (alpha_interp = 0.1534821).  Each point is a fixed
point of the SE with the piecewise output rule (``numerics.erm_output.output_moments_split``) at
outer orders 12 and 16, solved by Broyden's method, either at a given alpha
(``erm_ridgeless.solve_split``) or at a given Sigma with alpha the unknown
(``erm_ridgeless.solve_at_sigma``: near alpha_interp Sigma grows fast with 1/(alpha -
alpha_interp), so the curve is followed in Sigma).  Bars as ``ridgeless_se``'s: 3 x the 16/12
difference (``erm_se.split_factor``), norm-wise over (log q, m, log Sigma, log alpha, log hats)
for the order parameters, their own difference for alpha and the test error.  Independent route at
alpha = 0.25: the finite-lambda SE at small lambda, extrapolated to lambda = 0
(``erm_ridgeless.lambda_extrapolation``), both routes at outer order 12.

    B=benchmarks/erm_ridgeless_near.py
    python $B point --alpha 0.25 --order 12 --start 6.416 2.3225 67.5 > a12.json
    python $B point --alpha 0.25 --order 16 --from a12.json > a16.json
    python $B point --alpha 0.25 --order 12 --lam 5e-7 --from a12.json   # also 1.5e-6, 5e-6
    python $B point --sigma 86.2849697302828 --order 12 --start 6.71187738765573 \
        2.3571641942817494 0.25
    python $B point --sigma 400 --order 12 --start 6.6 2.2 0.2 > s400_12.json
    python $B point --sigma 400 --order 16 --from s400_12.json > s400_16.json
    #   likewise Sigma = 2000 (start 5.6 1.93 0.178), 1e4 (5.3 1.83 0.162),
    #   1e5 (5.05 1.77 0.1556), 1e6 (5.0 1.7566 0.15402)
    python $B check20 --from s400_16.json     # one order-20 Newton step from an order-16 point
    python $B report

``point`` prints one JSON object (``--start q m z``: z is Sigma with ``--alpha``, alpha with
``--sigma``; ``--from``: start and Broyden Jacobian from an earlier ``point`` output).
``report`` prints the table of :data:`MEASURED` (the outputs of the runs recorded in
docs/erm.md) with bars, the lambda -> 0 check and the fit of the approach to the interpolator's
test error 0.5010982710 (docs/erm_peak.md).  Each point took 3-6 minutes per order on 2 shared
cores at load 5-12 (upper bounds); ``python benchmarks/erm_ridgeless_near.py report`` itself
takes seconds.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time

import numpy as np
from aim_sym.numerics import erm_ridgeless as R
from aim_sym.numerics import erm_se as S
from aim_sym.numerics.erm_output import generalisation_error
from aim_sym.numerics.erm_se import split_factor

KAPPA0, DELTA = 0.5, 0.5
TEST_INTERP = 0.5010982710  # the interpolator's test error at alpha_interp (docs/erm_peak.md)

# (label, outer order, lambda, alpha, q, m, Sigma, q_hat, m_hat, Sigma_hat, test): fixed points
# (residual < 1e-8) of the ``point`` runs listed in docs/erm.md ("Near alpha_interp"), 2026-11-25
MEASURED: tuple = (
    ("alpha=0.25", 12, 0.0, 0.25, 6.867689697859738, 2.376533668582935, 89.04617682975127,
     2.7683693952235903e-04, 1.0772273698910305e-02, 7.31715385841231e-03, 0.4343152021276974),
    ("alpha=0.25", 16, 0.0, 0.25, 6.71187738765573, 2.3571641942817494, 86.2849697302828,
     2.861704465841039e-04, 1.1058341349368412e-02, 7.562494313555477e-03, 0.42965909437100236),
    ("alpha=0.25", 12, 5e-7, 0.25, 6.851831145494403, 2.3743660757888874, 88.79778648241549,
     2.7760456426623186e-04, 1.0794881138413369e-02, 7.338180053294034e-03, 0.4339134218798886),
    ("alpha=0.25", 12, 1.5e-6, 0.25, 6.82059612081454, 2.370088864380258, 88.30872233058876,
     2.7912837413670666e-04, 1.0839730828869514e-02, 7.379927936373793e-03, 0.43311893016062336),
    ("alpha=0.25", 12, 5e-6, 0.25, 6.716038415274245, 2.35569370562304, 86.67326167154732,
     2.8434674058044754e-04, 1.0993041556449127e-02, 7.52298724844645e-03, 0.4304286351913511),
    ("Sigma=86.28", 12, 0.0, 0.25151548138795726, 6.850748657828858, 2.3783136994430514,
     86.2849697302828, 2.9289604476026863e-04, 1.1144756214215606e-02, 7.558042970833612e-03,
     0.43257369782567634),
    ("Sigma=86.28", 16, 0.0, 0.25, 6.71187738765573, 2.3571641942817494, 86.2849697302828,
     2.861704465841039e-04, 1.1058341349368412e-02, 7.562494313555477e-03, 0.42965909437100236),
    ("Sigma=400", 12, 0.0, 0.19646011038345815, 6.2936777332104885, 2.122560213594407, 400.0,
     1.421372045902292e-05, 0.0020101190317910007, 0.001581283199876922, 0.4760634635109472),
    ("Sigma=400", 16, 0.0, 0.19620697425748823, 6.275837356353629, 2.117505507912102, 400.0,
     1.4193926582708716e-05, 0.0020034836961810476, 0.001580658934804414, 0.4764451835527842),
    ("Sigma=2000", 12, 0.0, 0.17125337192754675, 5.571677131725366, 1.9207106958721953, 2000.0,
     5.311454173414237e-07, 0.0003501017113274505, 0.00031134879054133354, 0.4897885184844878),
    ("Sigma=2000", 16, 0.0, 0.1716302945236466, 5.590607164802794, 1.9247514761902489, 2000.0,
     5.326761101603647e-07, 0.0003509825759710179, 0.0003113984581746614, 0.48987374164010444),
    ("Sigma=1e5", 12, 0.0, 0.15561181191486462, 5.067199227698687, 1.7754401014309025, 100000.0,
     2.0050230403956637e-10, 6.265490336104704e-06, 6.152162509611788e-06, 0.4996127371761197),
    ("Sigma=1e5", 16, 0.0, 0.15558751553158198, 5.059328830211606, 1.7739698025703015, 100000.0,
     2.002022711205971e-10, 6.259957925506306e-06, 6.152041996737906e-06, 0.49948081774395925),
    ("Sigma=1e6", 12, 0.0, 0.1539609904788633, 4.99762622925486, 1.7560461325455636, 1000000.0,
     1.9863710303546607e-12, 6.169988358808578e-07, 6.142615134458718e-07, 0.5006547806767566),
    ("Sigma=1e6", 16, 0.0, 0.15398378211755798, 4.998815135644104, 1.7562497387866718, 1000000.0,
     1.9868500640196833e-12, 6.170683803429962e-07, 6.142608123954138e-07, 0.5006817103332702),
    ("Sigma=1e4", 12, 0.0, 0.1613881690558262, 5.257887984431085, 1.8308542805900339, 10000.0,
     2.0516264089275266e-08, 6.545516264412782e-05, 6.181217770872582e-05, 0.4958555610684525),
    ("Sigma=1e4", 16, 0.0, 0.161138758799516, 5.249374759977172, 1.8291515591837542, 10000.0,
     2.048592182000759e-08, 6.538605228546296e-05, 6.180930728392663e-05, 0.4957622347152181),
)
# the same order-16 point as alpha=0.25, paired at fixed Sigma (the conditioning comparison of
# docs/erm.md): in the table, not in the fit
COMPARISON_ONLY = ("Sigma=86.28",)
# alpha = 0.3 as published (docs/data/erm_ridgeless_curve.csv): alpha, Sigma, test, test bar
ALPHA_0P3 = (0.3, 25.90505823681059, 0.3272646733466619, 0.003901976688172548)


def _point(args: argparse.Namespace) -> dict:
    if args.from_file:
        with open(args.from_file) as fh:
            prev = json.load(fh)
        jac = np.array(prev["jacobian"])
        start = (prev["q"], prev["m"], prev["sigma"] if args.alpha else prev["alpha"])
    else:
        jac, start = None, tuple(args.start)
    if args.start:
        start = tuple(args.start)
    t0 = time.time()
    if args.alpha is not None:
        p = S.ERMParams(alpha=args.alpha, kappa0=KAPPA0, Delta=DELTA, lam=args.lam)
        x, its, res, jac = R.solve_split(p, q=start[0], m=start[1], sigma=start[2],
                                         order=args.order, tol=args.tol, jacobian=jac)
        q, m, sigma, alpha = x[0], x[1], x[2], args.alpha
    else:
        p = S.ERMParams(alpha=start[2], kappa0=KAPPA0, Delta=DELTA, lam=args.lam)
        x, its, res, jac = R.solve_at_sigma(p, sigma=args.sigma, q=start[0], m=start[1],
                                            alpha=start[2], order=args.order, tol=args.tol,
                                            jacobian=jac)
        q, m, alpha, sigma = x[0], x[1], x[2], args.sigma
    return {"mode": "alpha" if args.alpha is not None else "sigma", "order": args.order,
            "lam": args.lam, "alpha": alpha, "q": q, "m": m, "sigma": sigma,
            "q_hat": x[3], "m_hat": x[4], "sigma_hat": x[5],
            "test": generalisation_error(q=q, m=m, Q0n=p.Q0n), "iterations": its,
            "residual": res, "jacobian": jac.tolist(), "seconds": round(time.time() - t0, 1)}


COLS = ("label", "order", "lam", "alpha", "q", "m", "sigma", "q_hat", "m_hat", "sigma_hat",
        "test")


def _rows() -> list[dict]:
    return [dict(zip(COLS, r, strict=True)) for r in MEASURED]


def _check20(path: str) -> dict:
    """The order-20 fixed point estimated by one Newton step from an order-16 ``point`` output,
    with its Broyden Jacobian (the map moves by ~1e-4 between orders 16 and 20, so the
    linearisation error is of second order)."""
    with open(path) as fh:
        d = json.load(fh)
    jac = np.array(d["jacobian"])
    p = S.ERMParams(alpha=d["alpha"], kappa0=KAPPA0, Delta=DELTA, lam=d["lam"])
    if d["mode"] == "alpha":
        x = np.array([math.log(d["q"]), d["m"], math.log(d["sigma"])])
        F = R._step(x, p, rule="split", order=20)[0]
    else:
        x = np.array([math.log(d["q"]), d["m"], math.log(d["alpha"])])
        F = R._step_at_sigma(x, p, d["sigma"], rule="split", order=20)[0]
    x20 = x - np.linalg.solve(jac, F)
    q, m, z = math.exp(x20[0]), float(x20[1]), math.exp(x20[2])
    out = {"order": 20, "residual_at_order_16_point": float(np.max(np.abs(F))), "q": q, "m": m,
           ("sigma" if d["mode"] == "alpha" else "alpha"): z,
           "test": generalisation_error(q=q, m=m, Q0n=p.Q0n)}
    out.update({f"moved_{k}": out[k] - d[k] for k in ("q", "m", "test")})
    key = "sigma" if d["mode"] == "alpha" else "alpha"
    out[f"moved_{key}"] = z - d[key]
    return out


def _pairs() -> list[dict]:
    """The lambda = 0 rows of MEASURED paired by label (outer orders 16 and 12): the order-16
    values with the bars of ``erm_ridgeless._split_errors`` (3 x the 16/12 difference,
    norm-wise over (log q, m, log Sigma or log alpha, log hats) for q, m, Sigma and the hats, as
    ``ridgeless_se``), own difference for alpha and the test error (order 20 moved them by 1/6 to
    1/30 of these bars at Sigma = 86 and 400); Sigma exact where it was given."""
    rows = _rows()
    out = []
    for label in dict.fromkeys(r["label"] for r in rows):
        pair = {r["order"]: r for r in rows if r["label"] == label and r["lam"] == 0.0}
        if 16 not in pair or 12 not in pair:
            continue
        hi, lo = pair[16], pair[12]
        grow = split_factor(16, 12)
        at_sigma = hi["sigma"] == lo["sigma"]  # solved at this Sigma: exact, alpha carries the bar
        x = "alpha" if at_sigma else "sigma"
        names = ("q", "m", x, "q_hat", "m_hat", "sigma_hat")
        err = R._split_errors(names, tuple(hi[k] for k in names), tuple(lo[k] for k in names),
                              {"test": hi["test"]}, {"test": lo["test"]}, grow)
        dx = max(abs(hi["m"] - lo["m"]),
                 *(abs(math.log(hi[k] / lo[k])) for k in names if k != "m"))
        err.update(alpha=grow * abs(hi["alpha"] - lo["alpha"]))
        if at_sigma:
            err["sigma"] = 0.0
        out.append({**hi, "errors": err, "dx": dx})
    return out


def _fit(alphas: np.ndarray, gaps: np.ndarray, sig: np.ndarray, a_i: float) -> tuple:
    """Weighted least squares of ln gap = ln A + gamma ln(alpha - alpha_interp): (gamma, its
    standard error, A, chi^2)."""
    x, y = np.log(alphas - a_i), np.log(gaps)
    M = np.vstack([np.ones_like(x), x]).T / sig[:, None]
    coef, *_ = np.linalg.lstsq(M, y / sig, rcond=None)
    cov = np.linalg.inv(M.T @ M)
    chi2 = float(np.sum((M @ coef - y / sig) ** 2))
    return float(coef[1]), math.sqrt(cov[1, 1]), math.exp(coef[0]), chi2


def _report() -> None:
    a_i = R.alpha_interp(kappa0=KAPPA0, Delta=DELTA)
    pts = sorted(_pairs(), key=lambda r: -r["alpha"])
    print(f"alpha_interp = {a_i:.10g}; outer orders 16/12, bars 3 x difference")
    print("| point | alpha | alpha/alpha_interp | Sigma | q | m | test | 0.5011 - test |")
    a3, s3, t3, e3 = ALPHA_0P3
    print(f"| alpha=0.3 (published) | 0.3 | {0.3 / a_i:.4g} | {s3:.4g} | | | {t3:.4f} +- "
          f"{e3:.2g} | {TEST_INTERP - t3:.4f} |")
    for r in pts:
        e = r["errors"]
        print(f"| {r['label']} | {r['alpha']:.6f} +- {e['alpha']:.2g} | {r['alpha'] / a_i:.4f} "
              f"| {r['sigma']:.5g} +- {e['sigma']:.2g} | {r['q']:.4f} +- {e['q']:.2g} "
              f"| {r['m']:.4f} +- {e['m']:.2g} | {r['test']:.5f} +- {e['test']:.2g} "
              f"| {TEST_INTERP - r['test']:.5f} |")
    lam_rows = sorted((r for r in _rows() if r["lam"] > 0), key=lambda r: r["lam"])
    if len(lam_rows) >= 3:
        base = next(r for r in _rows() if r["label"] == lam_rows[0]["label"]
                    and r["lam"] == 0.0 and r["order"] == lam_rows[0]["order"])
        lams = ", ".join(f"{r['lam']:g}" for r in lam_rows)
        print(f"lambda -> 0 at {base['label']} (outer order {base['order']}, both routes; "
              f"lambda = {lams}):")
        for k in ("q", "m", "sigma", "test"):
            v, e = R.lambda_extrapolation(lams=tuple(r["lam"] for r in lam_rows),
                                          values=tuple(r[k] for r in lam_rows),
                                          errors=(0.0,) * len(lam_rows))
            print(f"  {k}: extrapolated {v:.7g} +- {e:.2g}, lambda = 0: {base[k]:.7g} "
                  f"({(v - base[k]) / e:+.2f} bars; smallest lambda "
                  f"{(lam_rows[0][k] - base[k]) / e:+.0f} bars)")
    # the approach to the interpolator: 0.5010982710 - test = A (alpha - alpha_interp)^gamma,
    # each point's bar from its test and alpha bars (slope from the neighbouring points)
    pts = [r for r in pts if r["label"] not in COMPARISON_ONLY]
    al = np.array([a3] + [r["alpha"] for r in pts])
    te = np.array([t3] + [r["test"] for r in pts])
    o = np.argsort(al)
    al, te = al[o], te[o]
    et = np.array([e3] + [r["errors"]["test"] for r in pts])[o]
    ea = np.array([0.0] + [r["errors"]["alpha"] for r in pts])[o]
    slope = np.gradient(te, al)
    gap = TEST_INTERP - te
    sig = np.hypot(et, slope * ea) / gap
    print("local exponents d ln(0.5011 - test) / d ln(alpha - alpha_interp) between neighbours:",
          ", ".join(f"{x:.2f}" for x in np.diff(np.log(gap)) / np.diff(np.log(al - a_i))))
    print("test increases as alpha decreases (monotone):", bool(np.all(np.diff(te) < 0)))
    for name, sel in (("all points", slice(None)), ("three nearest alpha_interp", slice(0, 3))):
        g, ge, A, chi2 = _fit(al[sel], gap[sel], sig[sel], a_i)
        print(f"fit ({name}): gamma = {g:.3f} +- {ge:.3f}, A = {A:.3g}, chi^2 = {chi2:.1f} on "
              f"{al[sel].size - 2} dof")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    pt = sub.add_parser("point", help="one fixed point (JSON on stdout)")
    where = pt.add_mutually_exclusive_group(required=True)
    where.add_argument("--alpha", type=float)
    where.add_argument("--sigma", type=float)
    pt.add_argument("--order", type=int, default=12, choices=(12, 16, 20))
    pt.add_argument("--lam", type=float, default=0.0)
    pt.add_argument("--tol", type=float, default=1e-8)
    pt.add_argument("--start", type=float, nargs=3, metavar=("Q", "M", "Z"))
    pt.add_argument("--from", dest="from_file")
    c20 = sub.add_parser("check20", help="one order-20 Newton step from an order-16 point")
    c20.add_argument("--from", dest="from_file", required=True)
    sub.add_parser("report", help="the table, the lambda -> 0 check and the fit")
    args = ap.parse_args(argv)
    if args.cmd == "point":
        if not (args.start or args.from_file):
            ap.error("point: --start Q M Z or --from FILE is required")
        if args.lam < 0:
            ap.error(f"--lam must be >= 0, got {args.lam}")
        json.dump(_point(args), sys.stdout)
        print()
    elif args.cmd == "check20":
        json.dump(_check20(args.from_file), sys.stdout)
        print()
    else:
        _report()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
