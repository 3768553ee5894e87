"""Deep AIM at small width: is layer 1 learned through a sequential threshold? (THEORY 1.2, 1.6;
docs/deep_aim_sequential.md.)

Small width: rho_1 = rho_2 = rho -> 0, alpha = alpha_bar rho, Q0_l -> 1, V_l = 1 - q_l. Per layer
(THEORY 1.2, t_l = rho / q_hat_l, q_hat_l = 2 alpha E_l(q1, q2)):

  q_l = max(1 - 1 / (2 alpha_bar E_l(q1, q2)), 0)^2,

with E_l = E[sum_{a<=b} (1 + delta_ab) (g^l_ab)^2] the output overlap of numerics/deep_aim_se.py
at V_l = 1 - q_l. Layer 2's branch with layer 1 unlearned (q1 = 0) is explicit in q2:

  alpha_bar_2(q2) = 1 / (2 (1 - sqrt q2) E_2(0, q2))        (branch; alpha_bar_2(0) = 1/(2 S_2)),

and q1 = 0 stays a fixed point exactly while 2 alpha_bar S_1(q2) <= 1, S_1(q2) = E_1(0, q2) (the
map sends q1 = 0 to (1 - 1/(2 alpha_bar S_1))^2 > 0 beyond). Along the branch layer 1 therefore
starts at the crossing of alpha_bar_2(q2) with

  alpha_bar_1(q2) = 1 / (2 S_1(q2)),    i.e.  S_1(q2*) = (1 - sqrt q2*) E_2(0, q2*),

alpha_bar_seq,1 = alpha_bar_1(q2*); at q2 = 0 it is the q = 0 threshold 1/(2 S_1(0)). The E_l are
randomised QMC averages (``deep_aim_se.output_overlaps``, rho = RHO); the crossing carries the
bars of both curves (the extreme crossings of the shifted curves) and an interpolation error.
"""

from __future__ import annotations

import math

import numpy as np

from .deep_aim_se import DeepAimSE, output_overlaps, se_step_mc
from .records import Estimate, require

#: the width used for "rho -> 0" (E_l depends on rho only through V_l = 1 + rho - q_l: O(RHO))
RHO = 1e-6


def _model(skip: float, beta: float) -> DeepAimSE:
    # rho -> 0: the tokens' common part sqrt(rho) u vanishes, so the small-width limit is the
    # independent-token law (docs/deep_aim.md, "Shared tokens"; its cross term is 0 at q = 0)
    return DeepAimSE(skip=skip, rho1=RHO, rho2=RHO, beta=beta, design="independent")


def _check_q2(q2: float) -> None:
    require(math.isfinite(q2) and 0.0 <= q2 < 1.0, "q2", "in [0, 1) (small width)", q2)


def branch_alpha(q2: float, e2: float) -> float:
    """alpha_bar on layer 2's small-width branch at overlap q2 (q1 = 0):
    1 / (2 (1 - sqrt q2) E_2(0, q2)) (THEORY 1.2 solved for alpha_bar)."""
    _check_q2(q2)
    require(e2 > 0, "E2", "> 0", e2)
    return 1.0 / (2.0 * (1.0 - math.sqrt(q2)) * e2)


def small_width_overlap(*, alpha_bar: float, e: float) -> float:
    """q = max(1 - 1/(2 alpha_bar E), 0)^2, the small-width prior side (THEORY 1.2)."""
    require(alpha_bar >= 0 and math.isfinite(alpha_bar), "alpha_bar", "a finite number >= 0",
            alpha_bar)
    if alpha_bar * e <= 0.5:
        return 0.0
    return (1.0 - 1.0 / (2.0 * alpha_bar * e)) ** 2


def branch_point(*, skip: float, q2: float, beta: float = 1.0, m: int = 10, scrambles: int = 8,
                 seed: int = 0) -> dict[str, Estimate]:
    """S_1(q2) = E_1(0, q2) and E_2(0, q2) at small width (V1 = 1, V2 = 1 - q2), with
    alpha_bar_1(q2) = 1/(2 S_1) and the branch alpha_bar_2(q2) = 1/(2 (1 - sqrt q2) E_2).
    Bars: those of ``output_overlaps`` (2.5 standard errors over scrambles + inner-rule
    difference), carried to the alphas by their relative size."""
    _check_q2(q2)
    r = output_overlaps(_model(skip, beta), q1=0.0, q2=q2, m=m, scrambles=scrambles, seed=seed)
    s1, e2 = r["E1"], r["E2"]
    out = {"S1": s1, "E2": e2, "nishimori_1": r["nishimori_1"], "nishimori_2": r["nishimori_2"]}
    if s1.value > 0:
        a1 = 1.0 / (2.0 * s1.value)
        err = a1 * s1.error / s1.value if s1.error < s1.value else math.inf
        out["alpha_bar_1"] = Estimate(a1, err, "1/(2 S_1(q2))", extra=dict(s1.extra))
    a2 = branch_alpha(q2, e2.value)
    out["alpha_bar_2"] = Estimate(a2, a2 * e2.error / e2.value, "1/(2 (1 - sqrt q2) E_2(0, q2))",
                                  extra=dict(e2.extra))
    return out


def branch_point_mc(*, skip: float, q2: float, beta: float = 1.0, samples: int = 20_000,
                    inner: int = 4000, batches: int = 20, seed: int = 0) -> dict[str, Estimate]:
    """S_1(q2) and E_2(0, q2) by the seeded plain Monte Carlo route (``se_step_mc``; errors are
    one standard error over batches): the independent check of :func:`branch_point`."""
    _check_q2(q2)
    r = se_step_mc(_model(skip, beta), alpha=1.0, q1=0.0, q2=q2, samples=samples, inner=inner,
                   batches=batches, seed=seed)
    return {"S1": r["E1"], "E2": r["E2"]}


def scan(*, skip: float, q2s, beta: float = 1.0, m: int = 10, scrambles: int = 8,
         seed: int = 0) -> list[dict]:
    """:func:`branch_point` on a grid of q2 (rows of plain numbers: value and bar per key)."""
    rows = []
    for q2 in q2s:
        p = branch_point(skip=skip, q2=float(q2), beta=beta, m=m, scrambles=scrambles, seed=seed)
        row = {"skip": skip, "q2": float(q2), "m": m, "scrambles": scrambles, "seed": seed}
        for k, e in p.items():
            row[k], row[k + "_error"] = float(e.value), float(e.error)
        row["seconds"] = float(p["S1"].extra.get("seconds", math.nan))
        rows.append(row)
    return rows


def _curves(rows: list[dict], s1_shift: float, e2_shift: float):
    q = np.array([r["q2"] for r in rows])
    s1 = np.array([r["S1"] + s1_shift * r["S1_error"] for r in rows])
    e2 = np.array([r["E2"] + e2_shift * r["E2_error"] for r in rows])
    a1 = np.where(s1 > 0, 1.0 / (2.0 * np.maximum(s1, 1e-300)), math.inf)
    a2 = 1.0 / (2.0 * (1.0 - np.sqrt(q)) * e2)
    return q, a1, a2


def _crossing(q, a1, a2, order: int = 1):
    """First q where a1 - a2 changes sign from + to - (layer 1's threshold falls below the branch),
    by interpolating a1 - a2 (in 1/alpha, smooth in S and E) with a polynomial of degree ``order``
    through the nearest order + 1 grid points; returns (q*, alpha*) or None."""
    d = 1.0 / a2 - 1.0 / a1                     # 2 (1 - sqrt q) E_2 - 2 S_1: decreasing through 0
    for i in range(len(q) - 1):
        if d[i] > 0 >= d[i + 1]:
            lo = max(0, min(i - (order - 1) // 2, len(q) - order - 1))
            idx = np.arange(lo, lo + order + 1)
            cd = np.polyfit(q[idx], d[idx], order)
            roots = [r.real for r in np.roots(cd) if abs(r.imag) < 1e-12
                     and q[i] - 1e-12 <= r.real <= q[i + 1] + 1e-12]
            qs = roots[0] if roots else q[i] + (q[i + 1] - q[i]) * d[i] / (d[i] - d[i + 1])
            inv1 = np.polyfit(q[idx], 1.0 / a1[idx], order)
            return float(qs), float(1.0 / np.polyval(inv1, qs))
    return None


def sequential_threshold(rows: list[dict]) -> dict[str, Estimate] | None:
    """The crossing q2* of alpha_bar_1(q2) = 1/(2 S_1(q2)) with the branch alpha_bar_2(q2) on the
    scan ``rows`` (sorted by q2, first row q2 = 0), and alpha_bar_seq,1 = alpha_bar_1(q2*).
    Bar: the extreme crossings over the four shifts S_1 +- bar, E_2 +- bar (every crossing the
    bars allow) plus the interpolation error |linear - quadratic| of the central crossing.
    None if the curves do not cross on the grid (layer 1 not started before max q2)."""
    require(len(rows) >= 3 and rows[0]["q2"] == 0.0, "rows", "a scan from q2 = 0 (>= 3 rows)",
            len(rows))
    q, a1, a2 = _curves(rows, 0.0, 0.0)
    mid = _crossing(q, a1, a2)
    if mid is None:
        return None
    quad = _crossing(q, a1, a2, order=2)
    interp_q = abs(quad[0] - mid[0]) if quad else math.inf
    interp_a = abs(quad[1] - mid[1]) if quad else math.inf
    ends = []
    for s1 in (-1.0, 1.0):
        for e2 in (-1.0, 1.0):
            c = _crossing(*_curves(rows, s1, e2))
            ends.append(c if c is not None else (math.nan, math.nan))
    qe, ae = np.array([e[0] for e in ends]), np.array([e[1] for e in ends])
    q_err = float(np.nanmax(np.abs(qe - mid[0]))) + interp_q if np.all(np.isfinite(qe)) \
        else math.inf
    a_err = float(np.nanmax(np.abs(ae - mid[1]))) + interp_a if np.all(np.isfinite(ae)) \
        else math.inf
    method = "crossing of 1/(2 S_1(q2)) with the layer-2 branch on the q2 grid"
    extra = {"interpolation_q2": interp_q, "interpolation_alpha": interp_a,
             "shifted_crossings": [list(e) for e in ends]}
    return {"q2": Estimate(mid[0], q_err, method, extra=extra),
            "alpha_bar_seq_1": Estimate(mid[1], a_err, method, extra=extra),
            "alpha_bar_c_1": Estimate(float(a1[0]), float(a1[0] * rows[0]["S1_error"]
                                                          / rows[0]["S1"])
                                      if rows[0]["S1"] > rows[0]["S1_error"] else math.inf,
                                      "1/(2 S_1(0)) (error infinite when S_1(0) is within its "
                                      "bar of 0, as at skip = 0 where S_1(0) = 0 exactly)"),
            "alpha_bar_c_2": Estimate(float(a2[0]), float(a2[0] * rows[0]["E2_error"]
                                                          / rows[0]["E2"]), "1/(2 S_2)")}
