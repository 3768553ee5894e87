"""Cascade thresholds of deep tied attention on a joint SE branch, (L, M) in {(3, 2), (4, 2),
(3, 3)} (THEORY 2.1, 2.2, 2.5; issue 14; docs/smi_cascade.md): the stability of an unlearned layer k
once the layers of a set ``learned`` (containing L) are learned, ``Q = diag(q_l, l in
learned)``.

SE on that branch (THEORY 2.1).  Each layer's rows flip sign alone, so ``E[g_l g_l'^T] = 0``
and ``Q_hat = alpha E[g g^T]`` is diagonal; ``Q = Q_hat (I + Q_hat)^{-1}`` gives per learned
layer ``q_l = alpha K_l / (1 + alpha K_l)``, ``K_l = E |g_l|^2``, i.e. ``a_l := (1 - q_l) K_l /
q_l = 1 / alpha`` for every learned l.  At ``Q_kk = 0`` the Jacobian of the update is block
triangular (``Q_hat_kk = 0`` for every learned ``q`` by the layer-k sign flip), so layer k
becomes unstable where ``alpha mu_k = 1``, ``mu_k = E ||Cov[z_k | y, omega] - I||_F^2``
(THEORY 2.2).  The cascade threshold is the root of ``a_l = a_L`` (l learned, l < L) and
``mu_k = a_L``, ``alpha_casc = 1 / a_L`` there; at the root every other unlearned layer j gets
its eigenvalue ``alpha mu_j`` (below 1: stable, layer k goes first).

Kernel: :func:`.smi_branch_qmc.branch_samples` with the learned set (each learned free row adds
``N(z_l; omega_l, V_l I) / N(z_l; 0, I)`` to the inner weights; ``learned = (L,)`` is the last
layer's branch), so one kernel serves the sequential and the cascade thresholds at every depth.
The root is found on a ``3^d`` grid (``d = |learned|``) in ``(q_l (linear), log(1 - q_L))``
fitted by quadratics; the ``3^(d-1)`` reference points with the newest learned layer at ``q =
0`` give the threshold of the previous branch from the same points and the shift between the
two (common random numbers).  Error = Student-t 99% x SE over the per-replicate roots (the
jackknife over replicates where one replicate alone has no root; the sequential driver's
:func:`.smi_sequential.replicate_se`) + the measured ratio bias
(inner halves vs whole) + |quadratic - linear fit|.  Identities: ``E g_l = 0``, ``E tr C_l =
M``, the Nishimori form of ``K_l``.  At M = 3 (``tokens=3``) only L = 3 is supported
(:data:`DEFAULTS_M3`).  Measured values: docs/smi_cascade.md.
"""

from __future__ import annotations

import itertools
import math
import time

import numpy as np
from scipy import optimize

from .records import ConvergenceError, require
from .smi_branch_qmc import (
    check,
    estimates,
    identity_checks,
    point_records,
    replicate_samples,
    resolve_rule,
    sample_columns,
)
from .smi_sequential import replicate_se

TOKENS = 2                           # the default M
SUPPORTED = ((3, 2), (4, 2), (3, 3))  # (layers, tokens) of the cascade driver
DEFAULT_RULE = (12, 14, 16)          # (log2 outer, log2 inner, replicates)
#: (layers, learned) -> (target layer, grid centre (q_l per learned layer), steps, rule); the
#: centres are the roots at c = 1, beta = 1; 3^3 + 9 points at (1, 2, 4): a smaller outer rule
DEFAULTS = {(3, (1, 3)): (2, (0.12, 0.9865), (0.06, 0.2), DEFAULT_RULE),
            (4, (1, 4)): (2, (0.20, 0.9884), (0.08, 0.2), DEFAULT_RULE),
            (4, (1, 2, 4)): (3, (0.59, 0.40, 0.9949), (0.10, 0.12, 0.2), (10, 15, 8))}
#: the same at M = 3 tokens (L = 3 only): the root at c = 1, beta = 1 (q1* ~ 0.09, q3* ~ 0.958)
DEFAULTS_M3 = {(3, (1, 3)): (2, (0.10, 0.959), (0.08, 0.2), DEFAULT_RULE)}
DEFAULTS_BY_TOKENS = {2: DEFAULTS, 3: DEFAULTS_M3}
_US = (-1.0, 0.0, 1.0)               # grid coordinates per axis

__all__ = ["DEFAULTS", "DEFAULTS_BY_TOKENS", "DEFAULTS_M3", "DEFAULT_RULE", "SUPPORTED",
           "TOKENS", "cascade_stats", "cascade_threshold", "columns"]


def columns(layers: int = 3, learned=None, tokens: int = TOKENS) -> tuple:
    """Names of the per-outer-sample columns (:func:`.smi_branch_qmc.sample_columns`)."""
    return sample_columns(layers, tokens, _learned(layers, learned, tokens))


def _learned(layers, learned, tokens=TOKENS) -> tuple:
    """The learned set (default: the first in :data:`DEFAULTS_BY_TOKENS` at this (L, M)),
    checked; (L, M) outside :data:`SUPPORTED` is refused naming ``tokens`` (or ``layers``)."""
    require(isinstance(tokens, (int, np.integer)) and int(tokens) in (2, 3), "tokens",
            "2 or 3 for the cascade kernel", tokens)
    require(isinstance(layers, (int, np.integer)) and int(layers) in (3, 4), "layers",
            "3 or 4 for the cascade kernel", layers)
    require((int(layers), int(tokens)) in SUPPORTED, "tokens",
            "2 at layers 3 or 4, 3 at layers 3 only, for the cascade kernel", (layers, tokens))
    if learned is None:
        learned = next(k[1] for k in DEFAULTS_BY_TOKENS[int(tokens)] if k[0] == layers)
    check(layers=layers, tokens=tokens, skip=1.0, beta=1.0, learned=learned)
    require(len(learned) >= 2 and len(learned) < layers, "learned",
            f"at least one layer below {layers} learned and one unlearned", learned)
    return tuple(int(x) for x in learned)


def _check_q(qs, learned) -> None:
    for q, l in zip(qs, learned, strict=True):
        lo = 0 if l < learned[-1] else 1e-300
        require(isinstance(q, (int, float)) and np.isfinite(q) and lo <= q < 1, f"q{l}",
                "in [0, 1)" if lo == 0 else "in (0, 1)", q)


def _method(lo, li, R, layers, learned, tokens) -> str:
    return (f"cascade kernel on Q = diag(q_l, l in {list(learned)}), L = {layers}, M = {tokens}: "
            f"{R} replicates of 2^{lo} scrambled Sobol teacher draws (z, xi; "
            f"{tokens * (layers + len(learned))} dims) x 2^{li} scrambled Sobol prior nodes of "
            "the free rows weighted by N(z_l; omega_l, V_l) and N(s Mat^-1 h; omega_L, V_L) "
            "(both signs), teacher-paired and two-halves estimators mixed by regression with "
            "control variates; error = Student-t 99% x SE over replicates + ratio bias "
            "(inner halves vs whole)")


def cascade_stats(*qs: float, layers: int = 3, learned=None, tokens: int = TOKENS,
                  skip: float = 1.0, beta: float = 1.0, log2_outer: int | None = None,
                  log2_inner: int | None = None, replicates: int | None = None,
                  seed: int = 0) -> dict:
    """``K_l`` (and ``a_l = (1 - q_l) K_l / q_l``, q_l > 0) per learned layer and ``mu_k`` per
    unlearned layer at overlaps ``qs`` (one per learned layer, increasing layer order) with bars,
    and the identities ``trace_l`` (equal M), ``nishimori_l`` (equal 0), ``g_l_a`` (equal 0): a
    dict of ``{value, error, se, ratio_bias}`` per name, plus ``seconds`` and ``method``.  At
    L = 3 ``cascade_stats(q1, q3)`` is the branch ``Q = diag(q1, 0, q3)`` (``tokens=3``: M = 3)."""
    learned = _learned(layers, learned, tokens)
    check(layers=layers, tokens=tokens, skip=skip, beta=beta)
    require(len(qs) == len(learned), "q", f"one overlap per learned layer {learned}", qs)
    _check_q(qs, learned)
    lo, li, R = resolve_rule(log2_outer, log2_inner, replicates, DEFAULT_RULE)
    t0 = time.perf_counter()
    full, half, cv = replicate_samples([tuple(qs)], layers=layers, tokens=tokens, skip=skip,
                                       beta=beta, log2_outer=lo, log2_inner=li, replicates=R,
                                       seed=seed, learned=learned)
    names = columns(layers, learned, tokens)
    out = point_records(estimates(full, half, cv, names), names)
    for q, l in zip(qs, learned, strict=True):
        if q > 0:
            out[f"a{l}"] = {x: (1.0 - q) / q * out[f"K{l}"][x] for x in out[f"K{l}"]}
    out["seconds"] = time.perf_counter() - t0
    out["method"] = _method(lo, li, R, layers, learned, tokens)
    return out


# ----------------------------------------------------------------------------- threshold
def _design(U: np.ndarray, deg: int) -> np.ndarray:
    """Polynomial design matrix (total degree 1 or 2) in the grid coordinates ``U`` (n, d)."""
    U = np.atleast_2d(U)
    d = U.shape[1]
    cols = [np.ones(len(U)), *U.T]
    if deg == 2:
        cols += [U[:, i] * U[:, j] for i in range(d) for j in range(i, d)]
    return np.stack(cols, -1)


def _surfaces(vals: np.ndarray, U: np.ndarray, deg: int):
    """Least-squares fits of every column of ``vals`` over the grid ``U``: u -> values."""
    coef = np.linalg.lstsq(_design(U, deg), vals, rcond=None)[0]
    return lambda u: (_design(np.asarray(u, float)[None], deg) @ coef)[0]


def _root(vals, U, deg: int, k: int, start) -> np.ndarray:
    """On the fitted surfaces of ``vals`` (columns ``a_l`` per learned layer, the last one
    ``a_L``, then ``mu_j`` per unlearned layer): the root ``u`` of ``a_l = a_L``, ``mu_k = a_L``
    (``k``: column index of the target) by Newton from ``start``; returns ``[alpha, u..., alpha
    mu_j...]`` (nan if lost)."""
    d = U.shape[1]
    f = _surfaces(vals, U, deg)

    def eqs(u):
        v = f(u)
        return [*(v[:d - 1] - v[d - 1]), v[k] - v[d - 1]]

    u = np.full(d, np.nan)
    for x0 in (start, np.zeros(d)):                 # Newton from start, else from the centre
        sol = optimize.root(eqs, list(x0), method="hybr", options=dict(xtol=1e-12))
        if sol.success or np.max(np.abs(sol.fun)) < 1e-12:    # converged, or at the root
            u = sol.x
            break
    v = f(u)
    return np.array([1.0 / v[d - 1], *u, *(v[d:] / v[d - 1])])


def _surface_branch(vals, U, deg: int, alpha: float) -> np.ndarray:
    """The joint SE branch at ``alpha`` on the fitted surfaces (THEORY 2.1): ``u`` with ``a_l =
    1 / alpha`` for every learned l, then ``alpha mu_j`` per unlearned j (> 1: unstable); nan
    where Newton fails."""
    d = U.shape[1]
    f = _surfaces(vals, U, deg)
    sol = optimize.root(lambda u: f(u)[:d] - 1.0 / alpha, np.zeros(d), method="hybr",
                        options=dict(xtol=1e-12))
    if not (sol.success or np.max(np.abs(sol.fun)) < 1e-12):
        return np.full(len(vals[0]), np.nan)
    return np.array([*sol.x, *(alpha * f(sol.x)[d:])])


def _values(e_vals, pts, layers, learned, tokens=TOKENS) -> np.ndarray:
    """Columns ``a_l`` (learned l; nan at q_l = 0) and ``mu_j`` (unlearned j) (n_pts, .) from
    arrays (n_pts, k) of :func:`columns`."""
    n = columns(layers, learned, tokens)
    q = np.array(pts, float)
    f = np.where(q > 0, (1 - q) / np.where(q > 0, q, 1.0), np.nan)
    a = f * e_vals[:, [n.index(f"K{l}") for l in learned]]
    return np.column_stack([a, e_vals[:, [i for i, x in enumerate(n) if x.startswith("mu")]]])


def _solve(vals, layout, deg, start) -> np.ndarray:
    """The cascade root on the grid and on the reference points (newest learned layer at q = 0)
    from ``vals`` of every point: ``[alpha, u..., alpha mu_j..., u_ref..., alpha_ref, alpha -
    alpha_ref]``."""
    U, Ur, k, new = layout
    g = len(U)
    main = _root(vals[:g], U, deg, k, start)
    keep = [i for i in range(vals.shape[1]) if i != new]
    ref = _root(vals[g:][:, keep], Ur, deg, k - 1, np.delete(start, new))
    return np.array([*main, *ref[1:len(U[0])], ref[0], main[0] - ref[0]])


def cascade_threshold(*, layers: int = 3, learned=None, tokens: int = TOKENS,
                      layer: int | None = None, skip: float = 1.0, beta: float = 1.0, center=None, steps=None,
                      log2_outer: int | None = None, log2_inner: int | None = None,
                      replicates: int | None = None, seed: int = 0, attempts: int = 3) -> dict:
    """Layer ``layer``'s cascade threshold on the joint branch of the ``learned`` layers
    (THEORY 2.2; module docstring): the root of ``a_l = a_L``, ``mu_k = a_L`` and ``alpha_casc =
    1 / a_L`` there (defaults per (layers, learned): :data:`DEFAULTS`; at L = 3 layer 2 on
    ``Q = diag(q1, 0, q3)``; ``tokens=3`` at L = 3: M = 3, :data:`DEFAULTS_M3`).

    A ``3^d`` grid (``q_l = center_l + steps_l (-1, 0, 1)`` for the learned l < L, ``log(1 - q_L)
    = log(1 - center_L) + steps_L (-1, 0, 1)``) and the reference points (the newest learned
    layer, the largest l < L, at q = 0: the previous branch's threshold ``sequential`` from the
    same points) are evaluated with common random numbers and fitted by quadratics.  Error of
    ``alpha_casc``, of ``sequential``, of the ``shift`` between them and of each other unlearned
    layer's eigenvalue ``alpha mu_j`` at the root (``stability``) = Student-t 99% x SE over the
    per-replicate roots + ratio bias (the root moved when one function's values are replaced by
    the mean of its inner halves, effects added over the functions, times the mixing factor of
    :func:`.smi_branch_qmc.estimates`) + |quadratic - linear fit|.  When the root falls outside
    the grid, the grid is moved towards it (at most two steps per axis), ``attempts`` times in
    all; then ConvergenceError."""
    learned = _learned(layers, learned, tokens)
    check(layers=layers, tokens=tokens, skip=skip, beta=beta)
    unl = [j for j in range(1, layers) if j not in learned]
    d = len(learned)
    dflt = DEFAULTS_BY_TOKENS[int(tokens)].get((layers, learned))
    layer = dflt[0] if layer is None and dflt else layer
    require(layer in unl, "layer", f"an unlearned layer, one of {unl}", layer)
    center = dflt[1] if center is None and dflt else center
    steps = dflt[2] if steps is None and dflt else steps
    require(isinstance(center, (tuple, list)) and len(center) == d, "center",
            f"one overlap per learned layer {learned}", center)
    _check_q(center, learned)
    require(isinstance(steps, (tuple, list)) and len(steps) == d
            and all(isinstance(s, (int, float)) and 0 < s < c and c + s < 1
                    for s, c in zip(steps[:-1], center, strict=False))
            and isinstance(steps[-1], (int, float)) and 0.02 <= steps[-1] <= 1.0, "steps",
            "per learned layer 0 < q - step < q + step < 1, and for the last layer a step in "
            "[0.02, 1] in log(1 - q)", steps)
    require(isinstance(attempts, int) and 1 <= attempts <= 5, "attempts",
            "an integer in [1, 5]", attempts)
    lo, li, R = resolve_rule(log2_outer, log2_inner, replicates, dflt[3] if dflt else DEFAULT_RULE)
    t0 = time.perf_counter()
    names = columns(layers, learned, tokens)
    new = d - 2                                         # index of the newest learned layer
    U = np.array(list(itertools.product(_US, repeat=d)))
    Ur = np.delete(U[U[:, new] == 0.0], new, axis=1)
    layout = (U, Ur, d + unl.index(layer), new)
    center = [float(c) for c in center]

    def point(u, c):
        return tuple([*(c[i] + steps[i] * u[i] for i in range(d - 1)),
                      -math.expm1(math.log1p(-c[-1]) + steps[-1] * u[-1])])

    for _attempt in range(attempts):
        pts = [point(u, center) for u in U]
        pts += [tuple(0.0 if i == new else x for i, x in enumerate(p))
                for p, u in zip(pts, U, strict=True) if u[new] == 0.0]
        full, half, cv = replicate_samples(pts, layers=layers, tokens=tokens, skip=skip,
                                           beta=beta, log2_outer=lo, log2_inner=li,
                                           replicates=R, seed=seed, learned=learned)
        e = estimates(full, half, cv, names)
        vals = _values(e["value"], pts, layers, learned, tokens)
        best = _solve(vals, layout, 2, np.zeros(d))
        u = best[1:1 + d]
        inside = bool(np.all(np.abs(u) <= 1.0 + 1e-9)) and np.isfinite(best[-2])
        if inside or not np.all(np.isfinite(u)):
            break
        # move the grid towards the extrapolated root (at most two steps per axis)
        w = np.clip(u, -2, 2)
        center = [*(min(max(center[i] + steps[i] * w[i], 1.05 * steps[i]), 1 - 1.05 * steps[i])
                    for i in range(d - 1)), point(w, center)[-1]]
    if not inside:
        raise ConvergenceError("cascade root outside the grid of the learned overlaps",
                               last_iterate=[*u, *center],
                               residual=[float(x) for x in vals.ravel()])
    t = e["t"]
    # per-replicate roots (the jackknife where a replicate alone has no root)
    se = replicate_se(lambda p: _solve(_values(p, pts, layers, learned, tokens), layout, 2, u),
                      e["per"])
    if not np.all(np.isfinite(se)):
        raise ConvergenceError("a per-replicate cascade root was not found", last_iterate=None,
                               residual=[float(x) for x in se.ravel()])
    # ratio bias, measured: one function at a time from the whole inner set to its halves
    raw_f = _values(e["full_raw"], pts, layers, learned, tokens)
    raw_h = _values(e["half_value"], pts, layers, learned, tokens)
    base = _solve(raw_f, layout, 2, u)
    mix = np.abs(1.0 - e["beta"]) + 4.0 * np.abs(e["beta"])
    bias = np.zeros(len(best))
    for i, key in enumerate([*(f"K{l}" for l in learned), *(f"mu{j}" for j in unl)]):
        v = raw_f.copy()
        v[:, i] = raw_h[:, i]
        bias += mix[:, names.index(key)].max() * np.abs(_solve(v, layout, 2, u) - base)
    fit = np.abs(_solve(vals, layout, 1, u) - best)
    bar = t * se + bias + fit
    if not np.all(np.isfinite(bar)):    # a surface moved by its ratio bias (or linear) lost the root
        raise ConvergenceError("the cascade root's bar was not found (the root is lost when the "
                               "ratio bias or the linear fit moves a surface: a larger rule)",
                               last_iterate=[*u, *center],
                               residual=[float(x) for x in bar])
    alpha = best[0]
    j0 = len(U) // 2                                    # grid centre
    branch = []
    for a in alpha + np.array([-0.02, -0.01, 0.0, 0.01, 0.02]):
        b = _surface_branch(vals[:len(U)], U, 2, float(a))
        if np.all(np.abs(b[:d]) <= 1.0):
            branch.append(dict(alpha=float(a), **{f"q{l}": float(point(b[:d], center)[i])
                                                  for i, l in enumerate(learned)},
                               **{f"alpha_mu{j}": float(x) for j, x in zip(unl, b[d:],
                                                                           strict=True)}))
    q = point(u, center)
    out = {"layer": layer, "kind": "cascade", "layers": layers, "tokens": int(tokens),
           "learned": list(learned),
           "value": float(alpha), "error": float(bar[0]), "stat_error": float(t * se[0]),
           "ratio_bias": float(bias[0]), "interpolation": float(fit[0]), "center": center}
    for i, l in enumerate(learned):
        out[f"q{l}"] = q[i]
        out[f"q{l}_error"] = float(steps[i] * bar[1 + i] * (1 - q[i] if l == layers else 1))
    ref = [x for x in learned if x != learned[new]]
    u_ref = np.insert(best[-1 - d:-2], new, 0.0)
    out.update({
        "sequential_point": {f"q{l}": (0.0 if l == learned[new] else float(x)) for l, x
                             in zip(learned, point(u_ref, center), strict=True)},
        "sequential_inside": bool(np.all(np.abs(u_ref) <= 1.0 + 1e-9)),
        "stability": {j: {"eigenvalue": float(best[1 + d + i]),
                          "error": float(bar[1 + d + i])} for i, j in enumerate(unl)},
        "sequential": float(best[-2]), "sequential_error": float(bar[-2]),
        "sequential_branch": ref,
        "shift": float(best[-1]), "shift_error": float(bar[-1]),
        "shift_parts": dict(stat=float(t * se[-1]), ratio_bias=float(bias[-1]),
                            interpolation=float(fit[-1])),
        "points": pts, **{f"a{l}": vals[:, i].tolist() for i, l in enumerate(learned)},
        **{f"mu{j}": vals[:, d + i].tolist() for i, j in enumerate(unl)},
        "errors": _values(t * e["se"] + e["bias"], pts, layers, learned, tokens).tolist(),
        "checks": identity_checks(e, names, j0), "branch": branch,
        "seconds": time.perf_counter() - t0,
        "method": (f"root of a_l = a_{layers} = mu_{layer} (a_l = (1 - q_l) K_l / q_l) on the "
                   f"joint branch of layers {list(learned)}, quadratic fits over a 3^{d} grid "
                   "with common random numbers; " + _method(lo, li, R, layers, learned, tokens)
                   + " + |quadratic - linear fit|")})
    return out
