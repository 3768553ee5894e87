"""The L = 3 cascade of deep tied attention (THEORY 2.1, 2.2, 2.5; issue 14): the stability of
layer 2 once layers 3 and 1 are both learned, on the joint SE branch ``Q = diag(q1, 0, q3)``.

SE on that branch (THEORY 2.1).  Each layer's rows flip sign alone, so ``E[g_1 g_3^T] = 0`` and
``Q_hat = alpha E[g g^T]`` is diagonal; ``Q = Q_hat (I + Q_hat)^{-1}`` gives per layer

    q_l = alpha K_l / (1 + alpha K_l),   K_l = E |g_l|^2   (l = 1, 3),

i.e. ``a_l := (1 - q_l) K_l / q_l = 1 / alpha`` for both.  At ``Q_22 = 0`` the Jacobian of the
update is block triangular (``Q_hat_22 = 0`` for every ``(q1, q3)`` by the layer-2 sign flip),
so layer 2 becomes unstable where ``alpha mu2 = 1``, ``mu2 = E ||Cov[z_2 | y, omega_1,
omega_3] - I||_F^2`` (THEORY 2.2).  The cascade threshold is the root ``(q1*, q3*)`` of
``a1 = a3`` and ``mu2 = a3``, with ``alpha_casc = 1 / a3``.

Kernel (as :mod:`.smi_branch_qmc`, whose helpers it uses).  Given ``(y, omega_1, omega_3)`` the
posterior weighs the free rows ``z_1, z_2`` (inner nodes: scrambled Sobol points of the prior
N(0, I)) and the sign ``s`` of ``z_3 = s Mat^{-1} h`` by

    N(z_1; omega_1, V1 I) / N(z_1; 0, I) x N(s Mat^{-1} h; omega_3, V3 I) / det Mat,

``V_l = 1 - q_l`` (THEORY 2.1: ``omega_l ~ N(0, q_l I)``, ``z_l | omega_l ~ N(omega_l, V_l I)``).
The exponent is ``logw - |z_1|^2 (1/V1 - 1) / 2 + omega_1 . z_1 / V1 - |Mat^{-1} h|^2 / (2 V3)
+- omega_3 . Mat^{-1} h / V3`` (outer-only terms dropped): two matrix products and an ``exp`` per
block.  Outer: the teacher ``(z_1, z_2, z_3, xi_1, xi_3)`` by scrambled Sobol points (10 dims),
``omega_l = q_l z_l + sqrt(q_l V_l) xi_l``; the same points serve every ``(q1, q3)`` (common
random numbers).  Estimators: teacher-paired (``<T_2 - I, C_2 - I>_F``, ``g_true . g``; the
teacher is a posterior sample) mixed with the two-halves U-statistics, control variates of known
mean; error = Student-t 99% x SE over replicates + the measured ratio bias (inner halves vs
whole), as in :mod:`.smi_branch_qmc`.  Identities: ``E g_1 = E g_3 = 0``, ``E tr C_1 = E tr C_2
= M``, ``K_l = (M - E tr Cov[z_l | .] / V_l) / V_l`` (Nishimori).

Scope: L = 3, M = 2 (``P_l = 1``).  The prior inner nodes lose efficiency like ``V1`` in the
``z_1`` plane (the posterior of ``z_1`` has width ``sqrt(V1)``); the ratio-bias bar measures it
(at the root ``V1 = 0.84``: no loss).

Measured (c = 1, beta = 1, one core): 32 replicates x 2^12 teachers x 2^14 inner nodes, 211 s:
``alpha_casc = 1.1258 +- 0.0060`` at ``q1* = 0.162 +- 0.010``, ``q3* = 0.98693 +- 0.00018``; by
the same points on the layer-3-only branch ``alpha_seq = 1.1373 +- 0.0052`` (lattice 1.1358 +-
0.0044), shift ``alpha_casc - alpha_seq = -0.0115 +- 0.0022``: layer 2 is learned earlier once
layer 1 is learned.  Lattice + shift: 1.1243 +- 0.0066.  Other seeds: 16 x 2^14 inner
1.1277 +- 0.0088 (shift -0.0128 +- 0.0032, 135 s); 16 x 2^13 1.1331 +- 0.0072 (shift -0.0121 +-
0.0035, 56 s).  Independent route (plain Monte Carlo, z_1 sampled from its factor, iid inner
draws; tests/test_smi_cascade.py) at the root: mu2 = 0.882 +- 0.012, a1 = 0.877 +- 0.017,
a3 = 0.905 +- 0.011 against 1 / alpha_casc = 0.888; the rise of ``r = mu2 - a3`` from q1 = 0 to
q1* at q3*: 0.0097 +- 0.0030 and 0.0057 +- 0.0025 (the two reweighting orders) against the
kernel's 0.0087 +- 0.0043.
"""

from __future__ import annotations

import math
import time

import numpy as np
from scipy import optimize

from .records import ConvergenceError, require, standard_error
from .smi_branch_qmc import (
    check,
    check_rule,
    estimates,
    gauss_sobol,
    pair_list,
    signed_sums,
)
from .smi_weak import fibre_map, scores

LAYERS, TOKENS = 3, 2
DEFAULT_RULE = (12, 14, 16)          # (log2 outer, log2 inner, replicates)

__all__ = ["DEFAULT_RULE", "branch_point", "cascade_samples", "cascade_stats",
           "cascade_threshold", "columns"]


def columns() -> tuple:
    """Names of the per-outer-sample columns of :func:`cascade_samples`."""
    m = TOKENS
    return ("mu2", "K1", "K3", "trace1", "trace2", "nishimori1", "nishimori3",
            *(f"g1_{a}" for a in range(m)), *(f"g3_{a}" for a in range(m)),
            "u_mu2", "u_K1", "u_K3")


# ----------------------------------------------------------------------------- inner rule
def inner_features(z_free: np.ndarray, *, skip: float, beta: float) -> dict:
    """Per inner node (free rows ``z_free`` (n, 2, M)): ``B`` (n, Q) with ``|Mat^{-1} h|^2 = B .
    hh``, ``Y`` (n, M^2) with ``omega_3^T Mat^{-1} h = Y . (omega_3 (x) h)``, ``z1`` (n, M),
    ``logw = -log det Mat``, sign-even features ``FS`` (1, z_1, z_1 z_1^T pairs, z_2 z_2^T pairs,
    B) and sign-odd ``FD`` (entries of ``Mat^{-1}``)."""
    m = TOKENS
    Mi, logdet = fibre_map(z_free, skip=skip, beta=beta)
    pairs = pair_list(m)
    B = np.stack([(Mi[:, :, a] * Mi[:, :, b]).sum(1) * (1.0 if a == b else 2.0)
                  for a, b in pairs], 1)
    Y = Mi.reshape(-1, m * m)
    z1 = z_free[:, 0]
    zz = [z_free[:, l, a] * z_free[:, l, b] for l in range(2) for a, b in pairs]
    FS = np.stack([np.ones(len(B)), *z1.T, *zz, *B.T], 1)
    return dict(B=B, Y=Y, z1=z1, r1=(z1**2).sum(1), logw=-logdet, FS=FS, FD=Y.copy(),
                n=len(B))


def posterior_sums(h, omega1, omega3, v1: float, v3: float, inner: dict, splits) -> list:
    """Inner-rule sums at outer points: for each slice of inner nodes in ``splits``, ``(sum S FS,
    sum D FD)`` with ``S, D = e+ +- e-``, ``e+- = exp(exponent(s = +-1) - shift)`` (module
    docstring), a common row shift for all slices."""
    m = TOKENS
    pairs = pair_list(m)
    hh = np.stack([h[:, a] * h[:, b] for a, b in pairs], 1)
    oh = (omega3[:, :, None] * h[:, None, :]).reshape(len(h), m * m)
    Pin = np.vstack([inner["B"].T, inner["z1"].T,
                     (inner["logw"] - 0.5 * (1.0 / v1 - 1.0) * inner["r1"])[None, :]])
    Pout = np.hstack([-0.5 / v3 * hh, omega1 / v1, np.ones((len(h), 1))])
    return signed_sums(Pout, Pin, oh / v3, inner, splits)


def _moments(sums, h):
    """``m1`` = E[z_1 | .], ``C1``, ``C2`` (pair entries of E[z_l z_l^T | .]), ``m3`` =
    E[z_3 | .], ``n3`` = E|z_3|^2 from one slice's sums."""
    S, D = sums
    m = TOKENS
    nq = m * (m + 1) // 2
    Z = S[:, 0:1]
    m1 = S[:, 1:1 + m] / Z
    C1 = S[:, 1 + m:1 + m + nq] / Z
    C2 = S[:, 1 + m + nq:1 + m + 2 * nq] / Z
    hh = np.stack([h[:, a] * h[:, b] for a, b in pair_list(m)], 1)
    n3 = (S[:, 1 + m + 2 * nq:] * hh).sum(1) / Z[:, 0]
    Mi = D.reshape(len(h), m, m) / Z[:, :, None]
    return dict(m1=m1, C1=C1, C2=C2, m3=np.einsum("nab,nb->na", Mi, h), n3=n3)


def cascade_samples(points, *, skip: float, beta: float, outer_pts, inner_pts) -> dict:
    """Per-outer-sample columns (:func:`columns`) at every ``(q1, q3)`` in ``points`` for one
    replicate: ``full`` (whole inner set), ``half`` (mean of its two halves), arrays (n_pts,
    n_outer, k), and control variates ``cv`` (n_pts, n_outer, 6) of known mean 0."""
    m = TOKENS
    pr = pair_list(m)
    fro = np.array([1.0 if a == b else 2.0 for a, b in pr])
    eye = np.array([1.0 if a == b else 0.0 for a, b in pr])
    inner = inner_features(inner_pts.reshape(-1, 2, m), skip=skip, beta=beta)
    z = outer_pts[:, :LAYERS * m].reshape(-1, LAYERS, m)
    xi1, xi3 = outer_pts[:, LAYERS * m:LAYERS * m + m], outer_pts[:, LAYERS * m + m:]
    h = scores(z, skip=skip, beta=beta)
    T2 = np.stack([z[:, 1, a] * z[:, 1, b] for a, b in pr], 1)
    r = (z**2).sum(2)                                                  # (n, 3)
    n = inner["n"]
    splits = (slice(0, n // 2), slice(n // 2, n))
    full, half, cvs = [], [], []
    for q1, q3 in points:
        v1, v3 = 1.0 - q1, 1.0 - q3
        om1 = q1 * z[:, 0] + math.sqrt(q1 * v1) * xi1
        om3 = q3 * z[:, 2] + math.sqrt(q3 * v3) * xi3
        gt1, gt3 = (z[:, 0] - om1) / v1, (z[:, 2] - om3) / v3
        sa, sb = posterior_sums(h, om1, om3, v1, v3, inner, splits)
        mo = {"f": _moments([sa[0] + sb[0], sa[1] + sb[1]], h), "a": _moments(sa, h),
              "b": _moments(sb, h)}
        a, b = mo["a"], mo["b"]
        u_mu = ((a["C2"] - eye) * (b["C2"] - eye) * fro).sum(1)
        u_K1 = (((a["m1"] - om1) / v1) * ((b["m1"] - om1) / v1)).sum(1)
        u_K3 = (((a["m3"] - om3) / v3) * ((b["m3"] - om3) / v3)).sum(1)
        est = []
        for key in ("f", "a", "b"):
            e = mo[key]
            # E tr Cov[z_l | .] from this set's own moments (its ratio bias is then measured)
            c1 = (e["C1"] * eye).sum(1) - (e["m1"] ** 2).sum(1)
            c3 = e["n3"] - (e["m3"] ** 2).sum(1)
            g1, g3 = (e["m1"] - om1) / v1, (e["m3"] - om3) / v3
            mu = ((T2 - eye) * (e["C2"] - eye) * fro).sum(1)
            K1, K3 = (gt1 * g1).sum(1), (gt3 * g3).sum(1)
            est.append(np.column_stack([
                mu, K1, K3, (e["C1"] * eye).sum(1), (e["C2"] * eye).sum(1),
                K1 - (m - c1 / v1) / v1, K3 - (m - c3 / v3) / v3, g1, g3, u_mu, u_K1, u_K3]))
        full.append(est[0])
        half.append(0.5 * (est[1] + est[2]))
        cvs.append(np.column_stack([r[:, 0] - m, r[:, 1] - m, r[:, 2] - m,
                                    r[:, 1]**2 - 2 * r[:, 1] + m - m * (m + 1),
                                    (gt1**2).sum(1) - m / v1, (gt3**2).sum(1) - m / v3]))
    return dict(full=np.array(full), half=np.array(half), cv=np.array(cvs))


def _replicates(points, *, skip, beta, log2_outer, log2_inner, replicates, seed):
    """:func:`cascade_samples` over independent scrambles (seeded): arrays (R, n_pts, n, k)."""
    m = TOKENS
    seeds = np.random.SeedSequence(seed).spawn(replicates)
    full, half, cv = [], [], []
    for s in seeds:
        ro, ri = (np.random.default_rng(x) for x in s.spawn(2))
        r = cascade_samples(points, skip=skip, beta=beta,
                            outer_pts=gauss_sobol(log2_outer, m * (LAYERS + 2), ro),
                            inner_pts=gauss_sobol(log2_inner, m * (LAYERS - 1), ri))
        full.append(r["full"])
        half.append(r["half"])
        cv.append(r["cv"])
    return np.array(full), np.array(half), np.array(cv)


def _rule(log2_outer, log2_inner, replicates):
    lo, li, R = (DEFAULT_RULE[0] if log2_outer is None else log2_outer,
                 DEFAULT_RULE[1] if log2_inner is None else log2_inner,
                 DEFAULT_RULE[2] if replicates is None else replicates)
    check_rule(lo, li, R)
    return lo, li, R


def _check_q(q1, q3) -> None:
    require(isinstance(q1, (int, float)) and np.isfinite(q1) and 0 <= q1 < 1, "q1",
            "in [0, 1)", q1)
    require(isinstance(q3, (int, float)) and np.isfinite(q3) and 0 < q3 < 1, "q3",
            "in (0, 1)", q3)


def _method(lo, li, R) -> str:
    return (f"cascade kernel on Q = diag(q1, 0, q3): {R} replicates of 2^{lo} scrambled Sobol "
            f"teacher draws (z_1..z_3, xi_1, xi_3; 10 dims) x 2^{li} scrambled Sobol prior nodes "
            "of (z_1, z_2) weighted by N(z_1; omega_1, V1) and N(s Mat^-1 h; omega_3, V3) "
            "(both signs), teacher-paired and two-halves estimators mixed by regression with "
            "control variates; error = Student-t 99% x SE over replicates + ratio bias "
            "(inner halves vs whole)")


def cascade_stats(q1: float, q3: float, *, skip: float = 1.0, beta: float = 1.0,
                  log2_outer: int | None = None, log2_inner: int | None = None,
                  replicates: int | None = None, seed: int = 0) -> dict:
    """``K1``, ``K3``, ``mu2`` on ``Q = diag(q1, 0, q3)`` (L = 3, M = 2) with bars (module
    docstring), the identities ``trace1, trace2`` (equal M), ``nishimori1, nishimori3`` (equal 0),
    ``g1_a, g3_a`` (equal 0), and the derived ``a1 = (1 - q1) K1 / q1`` (q1 > 0), ``a3``: a dict
    of ``{value, error, se, ratio_bias}`` per name, plus ``seconds`` and ``method``."""
    check(layers=LAYERS, tokens=TOKENS, skip=skip, beta=beta)
    _check_q(q1, q3)
    lo, li, R = _rule(log2_outer, log2_inner, replicates)
    t0 = time.perf_counter()
    full, half, cv = _replicates([(q1, q3)], skip=skip, beta=beta, log2_outer=lo,
                                 log2_inner=li, replicates=R, seed=seed)
    names = columns()
    e = estimates(full, half, cv, names)
    out = {}
    for i, k in enumerate(names):
        out[k] = dict(value=float(e["value"][0, i]),
                      error=float(e["t"] * e["se"][0, i] + e["bias"][0, i]),
                      se=float(e["se"][0, i]), ratio_bias=float(e["bias"][0, i]))
    for ql, k in ((q1, "1"), (q3, "3")):
        if ql > 0:
            f = (1.0 - ql) / ql
            out["a" + k] = {x: f * out["K" + k][x] for x in ("value", "error", "se",
                                                               "ratio_bias")}
    out["seconds"] = time.perf_counter() - t0
    out["method"] = _method(lo, li, R)
    return out


# ----------------------------------------------------------------------------- threshold
_US = (-1.0, 0.0, 1.0)                       # grid coordinates per axis
_U1 = np.array([u for u in _US for _ in _US])
_U3 = np.array([u for _ in _US for u in _US])
_GRID, _ZERO = slice(0, 9), slice(9, 12)     # 3 x 3 grid, then the column q1 = 0


def _design(u1, u3, deg: int) -> np.ndarray:
    """Polynomial design matrix in the grid coordinates (total degree 1 or 2)."""
    u1, u3 = np.broadcast_arrays(np.asarray(u1, float), np.asarray(u3, float))
    cols = [np.ones_like(u1), u1, u3]
    if deg == 2:
        cols += [u1 * u1, u1 * u3, u3 * u3]
    return np.stack(cols, -1)


def _fit(vals: np.ndarray, deg: int) -> list:
    """Least-squares coefficients of ``a1, a3, mu2`` over the 3 x 3 grid."""
    X = _design(_U1, _U3, deg)
    return [np.linalg.lstsq(X, vals[_GRID, i], rcond=None)[0] for i in range(3)]


def branch_point(coef: list, alpha: float) -> tuple:
    """The joint SE branch at ``alpha`` on the fitted surfaces (THEORY 2.1): ``(u1, u3)`` with
    ``a1 = a3 = 1 / alpha`` (i.e. ``q_l = alpha K_l / (1 + alpha K_l)``, l = 1, 3) and ``alpha
    mu2`` there (> 1: layer 2 unstable); nan where Newton fails."""
    def f(u):
        a1, a3, _ = (_design(u[0], u[1], 2 if len(c) == 6 else 1) @ c for c in coef)
        return [a1 - 1.0 / alpha, a3 - 1.0 / alpha]

    sol = optimize.root(f, [0.0, 0.0], method="hybr", options=dict(xtol=1e-12))
    if not sol.success:
        return float("nan"), float("nan"), float("nan")
    deg = 2 if len(coef[2]) == 6 else 1
    return float(sol.x[0]), float(sol.x[1]), alpha * float(_design(*sol.x, deg) @ coef[2])


def _solve(vals: np.ndarray, deg: int, start=(0.0, 0.0)):
    """From ``a1, a3, mu2`` (12, 3) on the grid (module order): the cascade root ``(u1, u3)`` of
    ``a1 = a3``, ``mu2 = a3`` on the fitted surfaces (degree ``deg``, Newton from the centre),
    ``alpha_casc = 1 / a3`` there, and layer 2's sequential threshold on the column ``q1 = 0``
    (root of ``mu2 - a3`` in ``u3``).  Newton starts at ``start``.  Returns ``(alpha, u1, u3,
    alpha_seq)`` (nan if lost)."""
    coef = _fit(vals, deg)

    def f(u):
        a1, a3, mu = (_design(u[0], u[1], deg) @ c for c in coef)
        return [a1 - a3, mu - a3]

    sol = optimize.root(f, list(start), method="hybr", options=dict(xtol=1e-12))
    u = sol.x if sol.success else np.array([np.nan, np.nan])
    alpha = 1.0 / float(_design(u[0], u[1], deg) @ coef[1])
    us = np.array(_US)
    c = np.polyfit(us, vals[_ZERO, 2] - vals[_ZERO, 1], deg)
    roots = [z.real for z in np.roots(c) if abs(z.imag) < 1e-12]
    if roots:
        x = min(roots, key=abs)
        alpha0 = 1.0 / float(np.polyval(np.polyfit(us, vals[_ZERO, 1], deg), x))
    else:
        alpha0 = float("nan")
    return alpha, float(u[0]), float(u[1]), alpha0


def _grid_values(e_vals: np.ndarray, pts) -> np.ndarray:
    """Columns ``a1, a3, mu2`` (n_pts, 3) from arrays (n_pts, k) of :func:`columns`
    (``a1`` is nan at ``q1 = 0``)."""
    n = columns()
    q1 = np.array([p[0] for p in pts])
    q3 = np.array([p[1] for p in pts])
    f1 = np.where(q1 > 0, (1 - q1) / np.where(q1 > 0, q1, 1.0), np.nan)
    return np.column_stack([f1 * e_vals[:, n.index("K1")],
                            (1 - q3) / q3 * e_vals[:, n.index("K3")],
                            e_vals[:, n.index("mu2")]])


def cascade_threshold(*, skip: float = 1.0, beta: float = 1.0, center=(0.12, 0.9865),
                      step1: float = 0.06, step3: float = 0.2,
                      log2_outer: int | None = None, log2_inner: int | None = None,
                      replicates: int | None = None, seed: int = 0,
                      attempts: int = 3) -> dict:
    """Layer 2's cascade threshold at L = 3, M = 2 (THEORY 2.2; module docstring): the root
    ``(q1*, q3*)`` of ``a1 = a3``, ``mu2 = a3`` on the joint branch ``Q = diag(q1, 0, q3)`` and
    ``alpha_casc = 1 / a3`` there.

    A 3 x 3 grid (``q1 = center[0] + step1 (-1, 0, 1)``, ``log(1 - q3) = log(1 - center[1]) +
    step3 (-1, 0, 1)``) and the column ``q1 = 0`` at the same ``q3`` (the layer-3-only branch:
    layer 2's sequential threshold ``alpha_seq`` by the same points) are evaluated with common
    random numbers; ``a1, a3, mu2`` are fitted by quadratics in ``(q1, log(1 - q3))``.  Error of
    ``alpha_casc``, ``alpha_seq`` and of the shift ``alpha_casc - alpha_seq`` = Student-t 99% x
    SE over the per-replicate roots + ratio bias (the root moved when one function's values are
    replaced by the mean of its inner halves, effects added over the functions, times the mixing
    factor ``|1 - beta| + 4 |beta|`` of :mod:`.smi_branch_qmc`) + |quadratic - linear fit|.
    When the root falls outside the grid, the grid is moved towards it (at most two steps per
    axis) and evaluated again, ``attempts`` times in all; then ConvergenceError.  The default
    ``center`` is the root at c = 1, beta = 1."""
    check(layers=LAYERS, tokens=TOKENS, skip=skip, beta=beta)
    require(isinstance(center, (tuple, list)) and len(center) == 2, "center",
            "a pair (q1, q3)", center)
    _check_q(center[0], center[1])
    require(isinstance(step1, (int, float)) and 0 < step1 < center[0]
            and center[0] + step1 < 1, "step1", "with 0 < q1 - step1 < q1 + step1 < 1", step1)
    require(isinstance(step3, (int, float)) and 0.02 <= step3 <= 1.0, "step3",
            "in [0.02, 1] (step in log(1 - q3))", step3)
    require(isinstance(attempts, int) and 1 <= attempts <= 5, "attempts",
            "an integer in [1, 5]", attempts)
    lo, li, R = _rule(log2_outer, log2_inner, replicates)
    t0 = time.perf_counter()
    names = columns()
    center = (float(center[0]), float(center[1]))
    for _attempt in range(attempts):
        c3 = math.log1p(-center[1])
        q3s = [-math.expm1(c3 + step3 * u) for u in _US]
        q1s = [center[0] + step1 * u for u in _US]
        pts = [(a, b) for a in q1s for b in q3s] + [(0.0, b) for b in q3s]
        full, half, cv = _replicates(pts, skip=skip, beta=beta, log2_outer=lo, log2_inner=li,
                                     replicates=R, seed=seed)
        e = estimates(full, half, cv, names)
        vals = _grid_values(e["value"], pts)
        alpha, u1, u3, alpha0 = _solve(vals, 2)
        inside = abs(u1) <= 1.0 + 1e-9 and abs(u3) <= 1.0 + 1e-9 and np.isfinite(alpha0)
        if inside or not (np.isfinite(u1) and np.isfinite(u3)):
            break
        # move the grid towards the extrapolated root (at most two steps per axis)
        lim = 1.05 * step1
        center = (min(max(center[0] + step1 * float(np.clip(u1, -2, 2)), lim), 1 - lim),
                  -math.expm1(c3 + step3 * float(np.clip(u3, -2, 2))))
    if not inside:
        raise ConvergenceError("cascade root outside the (q1, q3) grid",
                               last_iterate=[u1, u3, *center],
                               residual=[float(x) for x in vals.ravel()])
    t = e["t"]
    per = np.array([_solve(_grid_values(e["per"][k], pts), 2, start=(u1, u3))
                    for k in range(R)])
    if not np.all(np.isfinite(per)):
        raise ConvergenceError("a per-replicate cascade root was not found", last_iterate=None,
                               residual=[float(x) for x in per.ravel()])
    per = np.column_stack([per, per[:, 0] - per[:, 3]])
    se = standard_error(per, axis=0)
    best = np.array([alpha, u1, u3, alpha0, alpha - alpha0])
    # ratio bias, measured: one function at a time from the whole inner set to its halves
    raw_f, raw_h = _grid_values(e["full_raw"], pts), _grid_values(e["half_value"], pts)
    base = np.array(_solve(raw_f, 2, start=(u1, u3)))
    base = np.append(base, base[0] - base[3])
    mix = np.abs(1.0 - e["beta"]) + 4.0 * np.abs(e["beta"])
    factor = [mix[:, names.index(k)].max() for k in ("K1", "K3", "mu2")]
    bias = np.zeros(5)
    for i in range(3):
        v = raw_f.copy()
        v[:, i] = raw_h[:, i]
        moved = np.array(_solve(v, 2, start=(u1, u3)))
        bias += factor[i] * np.abs(np.append(moved, moved[0] - moved[3]) - base)
    lin = np.array(_solve(vals, 1, start=(u1, u3)))
    fit = np.abs(np.append(lin, lin[0] - lin[3]) - best)
    bar = t * se + bias + fit
    q1 = center[0] + step1 * u1
    q3 = -math.expm1(c3 + step3 * u3)
    j = 4                                                   # grid centre
    checks = {k: (float(e["value"][j, names.index(k)]),
                  float(t * e["se"][j, names.index(k)] + e["bias"][j, names.index(k)]))
              for k in ("trace1", "trace2", "nishimori1", "nishimori3",
                        *(f"g{l}_{a}" for l in (1, 3) for a in range(TOKENS)))}
    err = _grid_values(t * e["se"] + e["bias"], pts)
    coef = _fit(vals, 2)
    branch = []
    for a in alpha + np.array([-0.02, -0.01, 0.0, 0.01, 0.02]):
        b1, b3, stab = branch_point(coef, float(a))
        if abs(b1) <= 1.0 and abs(b3) <= 1.0:
            branch.append(dict(alpha=float(a), q1=center[0] + step1 * b1,
                               q3=-math.expm1(c3 + step3 * b3), alpha_mu2=stab))
    return {
        "layer": 2, "kind": "cascade", "value": float(alpha), "error": float(bar[0]),
        "stat_error": float(t * se[0]), "ratio_bias": float(bias[0]),
        "interpolation": float(fit[0]),
        "center": center, "q1": float(q1), "q1_error": float(step1 * bar[1]),
        "q3": float(q3), "q3_error": float((1 - q3) * step3 * bar[2]),
        "sequential": float(alpha0), "sequential_error": float(bar[3]),
        "shift": float(alpha - alpha0), "shift_error": float(bar[4]),
        "shift_parts": dict(stat=float(t * se[4]), ratio_bias=float(bias[4]),
                            interpolation=float(fit[4])),
        "points": pts, "a1": vals[:, 0].tolist(), "a3": vals[:, 1].tolist(),
        "mu2": vals[:, 2].tolist(), "errors": err.tolist(), "checks": checks,
        "branch": branch,
        "seconds": time.perf_counter() - t0,
        "method": ("root in (q1, q3) of a1 = a3 = mu2 (a_l = (1 - q_l) K_l / q_l) on the joint "
                   "branch Q = diag(q1, 0, q3), quadratic fits over a 3 x 3 grid with common "
                   "random numbers; " + _method(lo, li, R) + " + |quadratic - linear fit|")}
