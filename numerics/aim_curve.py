"""AIM SE curves over many alphas: the fixed-point set traced once, shared by every alpha.

The output side E(q, V) of THEORY 1.1 does not depend on alpha. With q_hat = 1/Delta and
V = mmse(Delta), the fixed-point condition q_hat = 2 alpha E(Q0 - V, V) reads

    alpha(Delta) = 1 / (2 Delta E(Q0 - mmse(Delta), mmse(Delta))),

so the fixed points at alpha are the roots of alpha(Delta) = alpha. As mmse increases with
Delta, sign(mmse(1/q_hat(V)) - V) = sign(alpha(Delta) - alpha): a sign change on a grid in
t = ln Delta brackets a fixed point exactly as the V scan of :func:`aim_sym.numerics.aim_se.fixed_points`
does, but one grid serves all alphas. At a fixed point the SE map's slope is
1 + d ln alpha / d ln Delta and Phi = V / (4 Delta) - I(Delta) + alpha Psi_out (THEORY 1.1).

Each root is read off local interpolants in t (order 5, its error the sum of the differences
to orders 3 and 4); the grid is refined where that exceeds the target and near turning points of
alpha(Delta) (where fixed points appear in pairs). Errors, per fixed point and by refinement:
the root on the curves of two quadrature levels, the interpolation orders, the prior's two
orders. Nodes that no root's stencil uses (the scan's coverage down to V = 1e-6, on to
aim_se's V_MIN = 1e-13 while alpha(Delta) still rises towards the largest alpha, and up to
alpha < min alpha) carry one quadrature level only. Levels start at (-2, -1) (17 and 33 nodes
per axis) and are raised per stencil, once the grid is final, where a root needs it. The
trace is built to max(tol, 1e-4); roots it cannot give to ``tol`` are polished together by
Newton's method on ln alpha(t) = ln alpha (:func:`polish`):
one compiled call per step for all of them, then the next quadrature level at the converged
point gives the error. Where Newton fails the root falls back to
:func:`aim_sym.numerics.aim_se.solve_fixed_point` (Brent's method on the SE map).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from . import aim_se, wishart
from .gauss import TAIL_SD, gaussian_grid_many, tail_mass
from .records import ConvergenceError, require

_LN10 = float(np.log(10.0))
_V_FLOOR = 1e-6  # the lowest V the scan must reach (as aim_se's V grid)
_FOLD_STEP = 0.05  # grid step in ln Delta to which turning points of alpha(Delta) are resolved
_TRACE_TOL = 1e-4  # the trace's own target: tighter roots are polished by Newton
# quadrature levels (discrete channels; 2^(level+6) + 1 nodes per axis): the trace starts at
# levels (-2, -1) and raises them per stencil where a root needs it; Newton's polish starts at
# levels (-1, 0) or above. (Starting at (-3, -2) would save a third of the omega nodes, but that
# pair's difference, the reported error, came within a factor 1.3 of the level -2 curve's true
# error for noisy hardmax at rho = 0.5, alpha = 0.6: too close to trust as a bound.)
_TRACE_LEVEL = -2
_POLISH_LEVEL = -1


# ----------------------------------------------------------------------------- output side
def output_moments_many(cc, *, q, V, level: int, tail_sd: float = TAIL_SD
                        ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """E(q_i, V_i), Psi_out(q_i, V_i) and tail bounds for many points in one compiled call.

    The rule of :func:`aim_sym.numerics.aim_se.output_moments` (THEORY 1.1), vectorised over points,
    on the box |m_k| <= tail_sd sd_k: the mass cut off times the integrand's sup on the nodes
    is returned as the tail bound.
    """
    q = np.atleast_1d(np.asarray(q, dtype=float))
    V = np.atleast_1d(np.asarray(V, dtype=float))
    require(bool(np.all(V > 0)), "V", "> 0", V)
    require(bool(np.all(q >= 0)), "q", ">= 0", q)
    if not cc.discrete:
        E = np.array([float(cc.e_g2(v)) for v in V])
        psi = np.array([float(cc.psi_out(v)) for v in V])
        return E, psi, np.zeros_like(E)
    K = cc.K
    E, psi, tail = np.zeros(len(q)), np.zeros(len(q)), np.zeros(len(q))
    zero = q == 0  # the single node omega = 0, no tail
    if zero.any():
        E[zero], psi[zero] = aim_se.output_integrands(cc, np.zeros((int(zero.sum()), K)), V[zero])
    pos = ~zero
    if pos.any():
        M, W, counts, pruned = gaussian_grid_many(
            q[pos, None, None] * cc.S, np.sqrt(V[pos, None] * np.diag(cc.S)), level,
            tail_sd=tail_sd)
        e_int, psi_int = aim_se.output_integrands(cc, M, np.repeat(V[pos], counts))
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
        E[pos] = np.add.reduceat(e_int * W, starts)
        psi[pos] = np.add.reduceat(psi_int * W, starts)
        sup = np.maximum.reduceat(np.abs(e_int), starts)
        tail[pos] = (tail_mass(tail_sd, K) + pruned) * sup
    return E, psi, tail


# ----------------------------------------------------------------------------- the traced set
@dataclass
class _Trace:
    """alpha(Delta) and what a fixed point needs, on nodes t = ln Delta (increasing).

    Scan-only nodes carry one quadrature level (E[1] = E[0]) and no prior error (NaN); nodes
    that a root's interpolation stencil uses are made ``fine``: two levels and the prior's
    two orders.
    """

    t: np.ndarray
    V: np.ndarray  # mmse(Delta), fine prior order
    V_err: np.ndarray  # prior: |fine - coarse order| (NaN until the node is fine)
    mi: np.ndarray  # I(Delta)
    E: np.ndarray  # (2, n): E at quadrature levels L and L + 1
    psi: np.ndarray  # Psi_out at the finer level
    tail: np.ndarray
    lev: np.ndarray  # level L of E[0] per node
    fine: np.ndarray  # bool: E[1] is at level L + 1
    phase: np.ndarray  # number of intervals of the support of mu_Delta (mmse is not analytic
    # in Delta where it changes: no interpolation stencil may straddle that point)

    def __post_init__(self) -> None:
        self.update()
        self.roots: dict[float, list] = {}  # roots read at given alphas (set by trace)
        self.level, self.box = 0, TAIL_SD  # quadrature level L and box (set by trace)

    def update(self) -> None:
        with np.errstate(divide="ignore"):
            self.lna = -np.log(2.0 * self.E) - self.t  # ln alpha at both levels, (2, n)
        self.coef: dict[tuple[int, int], tuple] = {}  # local interpolants per (bracket, order)


_FIELDS = ("V", "V_err", "mi", "E", "psi", "tail", "lev", "fine", "phase")


def _prior(rho: float, t: np.ndarray, phase: np.ndarray | None = None
           ) -> tuple[np.ndarray, np.ndarray]:
    """mmse(Delta) and I(Delta) at Delta = exp(t), the prior's fine order (THEORY 1.1), all
    Delta in one vectorised pass; the number of support intervals of mu_Delta into ``phase``
    when given."""
    rows = wishart.integrals_many(np.exp(t), rho=rho)
    V = np.array([r["mmse"] for r in rows])
    mi = np.array([r["mi"] for r in rows])
    if phase is not None:
        phase[:] = [r["intervals"] for r in rows]
    if np.any(V <= 0) or np.any(V >= 1.0 + 1e-12):
        raise ConvergenceError("prior mmse outside (0, 1) on the traced grid", last_iterate=V,
                               residual=None)
    return np.minimum(V, 1.0), mi


def _prior_error(rho: float, t: np.ndarray, V: np.ndarray) -> np.ndarray:
    """|V - coarse order| of the prior's mmse at Delta = exp(t), V its fine order from
    :func:`_prior` (as :func:`aim_sym.numerics.wishart.mmse_estimate`)."""
    coarse = wishart.integrals_many(np.exp(t), rho=rho, coarse=True)
    return np.abs(V - np.array([c["mmse"] for c in coarse]))


def _trace_nodes(cc, *, rho: float, t: np.ndarray, level: int, tail_sd: float) -> _Trace:
    n = len(t)
    phase = np.zeros(n, dtype=int)
    V, mi = _prior(rho, t, phase)
    E, psi, tail = output_moments_many(cc, q=1.0 + rho - V, V=V, level=level, tail_sd=tail_sd)
    return _Trace(t, V, np.full(n, np.nan), mi, np.stack([E, E]), psi, tail,
                  np.full(n, level), np.zeros(n, dtype=bool), phase)


def _make_fine(cc, tr: _Trace, idx, *, rho: float, levels, tail_sd: float) -> None:
    """Give the nodes ``idx`` quadrature levels (L_i, L_i + 1), L_i = ``levels`` (one per node
    or one for all), and the prior's error. A value the node already has at L_i is kept (a
    fine node raised by one level keeps its finer value as the new coarser one)."""
    idx = np.asarray(idx, dtype=int)
    lv = np.broadcast_to(np.asarray(levels, dtype=int), idx.shape)
    for L in np.unique(lv):
        sel = idx[lv == L]
        V, q = tr.V[sel], 1.0 + rho - tr.V[sel]
        shift = tr.fine[sel] & (tr.lev[sel] + 1 == L)
        tr.E[0, sel[shift]] = tr.E[1, sel[shift]]
        redo = ~shift & (tr.lev[sel] != L)
        if redo.any():
            tr.E[0, sel[redo]] = output_moments_many(cc, q=q[redo], V=V[redo], level=int(L),
                                                     tail_sd=tail_sd)[0]
        E1, psi, tail = output_moments_many(cc, q=q, V=V, level=int(L) + 1, tail_sd=tail_sd)
        tr.E[1, sel], tr.psi[sel], tr.tail[sel] = E1, psi, tail
        tr.lev[sel], tr.fine[sel] = L, True
    miss = idx[np.isnan(tr.V_err[idx])]
    tr.V_err[miss] = _prior_error(rho, tr.t[miss], tr.V[miss])
    tr.update()


def _neighbour_levels(tr: _Trace, idx: np.ndarray, base: int) -> np.ndarray:
    """The level pair a new fine node starts at: the highest of its nearest fine neighbours'
    (so that refining where levels were raised does not repeat the raise), at least ``base``."""
    fine = np.nonzero(tr.fine)[0]
    out = np.full(idx.shape, base)
    if fine.size:
        k = np.searchsorted(fine, idx)
        left = tr.lev[fine[np.clip(k - 1, 0, fine.size - 1)]]
        right = tr.lev[fine[np.clip(k, 0, fine.size - 1)]]
        out = np.maximum(out, np.maximum(left, right))
    return out


def _merge(a: _Trace, b: _Trace) -> _Trace:
    t = np.concatenate([a.t, b.t])
    order = np.argsort(t, kind="stable")
    cat = {f: np.concatenate([getattr(a, f), getattr(b, f)], axis=-1)[..., order] for f in _FIELDS}
    return _Trace(t[order], **cat)


# ----------------------------------------------------------------------------- roots
@dataclass
class _Root:
    t: float
    V: float
    error: float
    interp_error: float
    quad_error: float
    slope: float
    phi: float
    bracket: int  # index j of the bracketing interval [t_j, t_j+1]
    dlnV: float  # d ln V / d ln Delta at the root (interpolant)


def _stencil(j: int, n: int, p: int) -> slice:
    lo = min(max(j - p // 2 + 1, 0), n - p)
    return slice(lo, lo + p)


def _polyval(C: np.ndarray, x: np.ndarray) -> np.ndarray:
    """sum_k C[i, k] x_i^k for coefficient rows C (m, p) at points x (m,) (x in [0, 1] here)."""
    return np.einsum("ik,ik->i", C, x[:, None] ** np.arange(C.shape[1]))


def _polyder(C: np.ndarray) -> np.ndarray:
    return C[:, 1:] * np.arange(1, C.shape[1])


def _root01(C: np.ndarray) -> np.ndarray:
    """A root in [0, 1] of each row polynomial C (m, p), where it changes sign there.

    Safeguarded Newton's method (a bisection step whenever Newton leaves the bracket), all rows
    at once, to a step of 1e-15 (as brentq at xtol = rtol = 1e-15). Rows without a sign change
    (the fit's rounding at a node where the polynomial is ~0) give the end nearer to a zero.
    """
    ylo, yhi = C[:, 0].copy(), C.sum(axis=1)
    x = np.where(np.abs(ylo) < np.abs(yhi), 0.0, 1.0)
    x[yhi == 0], x[ylo == 0] = 1.0, 0.0
    todo = (ylo * yhi < 0)
    if not todo.any():
        return x
    idx = np.nonzero(todo)[0]
    c, dc = C[idx], _polyder(C[idx])
    neg = np.where(ylo[idx] < 0, 0.0, 1.0)  # end of the bracket where the polynomial is < 0
    pos = 1.0 - neg
    with np.errstate(divide="ignore", invalid="ignore"):
        xi = ylo[idx] / (ylo[idx] - yhi[idx])  # secant start
    xi = np.where(np.isfinite(xi) & (xi > 0) & (xi < 1), xi, 0.5)
    active = np.ones(idx.size, dtype=bool)
    for _ in range(200):
        f = _polyval(c, xi)
        df = _polyval(dc, xi)
        neg = np.where(f < 0, xi, neg)
        pos = np.where(f > 0, xi, pos)
        with np.errstate(divide="ignore", invalid="ignore"):
            xn = xi - f / df
        lo, hi = np.minimum(neg, pos), np.maximum(neg, pos)
        bad = ~np.isfinite(xn) | (xn <= lo) | (xn >= hi)
        xn = np.where(bad, 0.5 * (lo + hi), xn)
        xn = np.where(active & (f != 0), xn, xi)
        active &= np.abs(xn - xi) > 1e-15 * (1.0 + np.abs(xi))
        xi = xn
        if not active.any():
            break
    else:
        raise ConvergenceError("interpolant root not converged", last_iterate=xi, residual=f)
    x[idx] = xi
    return x


def _coefficients(tr: _Trace, js: np.ndarray, p: int) -> np.ndarray:
    """Order-(p-1) interpolants in x = (t - t_j)/(t_j+1 - t_j) of ln alpha (levels L + 1 and
    L), ln V, I and Psi_out on the p nodes around each [t_j, t_j+1]: (len(js), 5, p) (cached
    per trace; one batched solve for the brackets not yet cached)."""
    new = sorted({int(j) for j in js if (int(j), p) not in tr.coef})
    if new:
        jn = np.array(new)
        lo = _stencil_start(jn, len(tr.t), p)
        s = lo[:, None] + np.arange(p)
        x_nodes = (tr.t[s] - tr.t[jn, None]) / (tr.t[jn + 1] - tr.t[jn])[:, None]
        rhs = np.stack([tr.lna[1][s], tr.lna[0][s], np.log(tr.V[s]), tr.mi[s], tr.psi[s]],
                       axis=2)
        vander = x_nodes[:, :, None] ** np.arange(p)
        coef = np.swapaxes(np.linalg.solve(vander, rhs), 1, 2)
        for k, j in enumerate(new):
            tr.coef[(j, p)] = coef[k]
    return np.stack([tr.coef[(int(j), p)] for j in js])


def _stencil_start(js: np.ndarray, n: int, p: int) -> np.ndarray:
    return np.clip(js - p // 2 + 1, 0, n - p)


def _read_roots(tr: _Trace, js: np.ndarray, ln_a: np.ndarray) -> dict:
    """Roots of the order-3, 4 and 5 interpolants of ln alpha(t) - ln a in [t_j, t_j+1] (one
    per (j, a) pair and order; all orders in one root search): V at each order and, at order
    5, the slope, Phi parts and the linearised shift of each root between the two quadrature
    levels."""
    m, p = js.size, 6
    C = np.concatenate([np.pad(_coefficients(tr, js, k), ((0, 0), (0, 0), (0, p - k)))
                        for k in (4, 5, 6)])  # (3m, 5, 6): orders 3 and 4 padded by zeros
    c1 = C[:, 0].copy()
    c1[:, 0] -= np.tile(ln_a, 3)
    x_all = _root01(c1)
    V_all = np.exp(_polyval(C[:, 2], x_all))
    C, c1, x, V = C[2 * m:], c1[2 * m:], x_all[2 * m:], V_all[2 * m:]
    t0, h = tr.t[js], tr.t[js + 1] - tr.t[js]
    dy = _polyval(_polyder(c1), x) / h
    dV = V * _polyval(_polyder(C[:, 2]), x) / h
    s = _stencil_start(js, len(tr.t), p)[:, None] + np.arange(p)
    tail = np.max(tr.tail[s] / tr.E[1][s], axis=1)
    quad_shift = (np.abs(_polyval(C[:, 1], x) - ln_a) + tail) / np.maximum(np.abs(dy), 1e-300)
    return {"V4": V_all[:m], "V5": V_all[m:2 * m], "t": t0 + h * x, "V": V, "slope": 1.0 + dy,
            "quad": np.abs(dV) * quad_shift, "prior": np.max(tr.V_err[s], axis=1),
            "dlnV": dV / V, "mi": _polyval(C[:, 3], x), "psi": _polyval(C[:, 4], x),
            "stencil": s}


def _roots_many(tr: _Trace, alphas) -> dict[float, list[_Root]]:
    """The roots at every alpha (bracketed by sign changes on the trace), read all at once:
    order-5 interpolants, the interpolation error the differences to orders 3 and 4."""
    alphas = np.array([float(a) for a in alphas])
    ln_as = np.log(alphas)
    y = tr.lna[1][None, :] - ln_as[:, None]
    ia, js = np.nonzero((y[:, :-1] == 0) | (y[:, :-1] * y[:, 1:] < 0))
    out: dict[float, list[_Root]] = {float(a): [] for a in alphas}
    if not js.size:
        return out
    ln_a = ln_as[ia]
    r6 = _read_roots(tr, js, ln_a)
    V4, V5, V6, slope = r6["V4"], r6["V5"], r6["V"], r6["slope"]
    # differences to both lower orders (one alone can be accidentally small); a stencil across a
    # change of the support's shape has no reliable error: polish that root
    interp = np.abs(V6 - V4) + np.abs(V6 - V5)
    ph = tr.phase[r6["stencil"]]
    interp = np.where(np.any(ph != ph[:, :1], axis=1), np.inf, interp)
    err = r6["quad"] + interp + r6["prior"] / np.maximum(np.abs(1 - slope), 1e-3)
    err = np.maximum(err, 4 * np.finfo(float).eps * V6)
    phi = V6 / (4 * np.exp(r6["t"])) - r6["mi"] + alphas[ia] * r6["psi"]
    for k in range(js.size):
        out[float(alphas[ia[k]])].append(_Root(
            float(r6["t"][k]), float(V6[k]), float(err[k]), float(interp[k]),
            float(r6["quad"][k]), float(slope[k]), float(phi[k]), int(js[k]),
            float(r6["dlnV"][k])))
    return out


def _roots_at(tr: _Trace, alpha: float) -> list[_Root]:
    return _roots_many(tr, [alpha])[float(alpha)]


# ----------------------------------------------------------------------------- driver
def _tail_sd(tol: float) -> float:
    """Box half-width (in sd) whose cut-off Gaussian mass is below tol * 1e-6 (at most 12)."""
    from scipy.special import erfcinv

    return float(min(max(np.sqrt(2.0) * erfcinv(min(tol * 1e-6, 1.0)), 6.0), TAIL_SD))


def trace(cc, *, rho: float, alphas: np.ndarray, tol: float, max_nodes: int = 400,
          max_level: int = 3) -> _Trace:
    """Trace alpha(Delta) on a grid in ln Delta covering every fixed point of ``alphas``.

    The grid is refined until each root's interpolation error is below tol / 2 (or
    ``max_nodes`` is reached) and turning points are resolved to a step of 0.05; the quadrature
    levels of a root's stencil nodes are raised (up to ``max_level``) until the two levels move
    that root by less than tol / 2. Scan-only nodes carry the base level.
    """
    require(tol > 0, "tol", "> 0", tol)
    level = _TRACE_LEVEL if cc.discrete else 0
    box = _tail_sd(tol)

    def nodes(t: np.ndarray) -> _Trace:
        return _trace_nodes(cc, rho=rho, t=t, level=level, tail_sd=box)

    a_min = float(np.min(alphas))
    tr = nodes(np.linspace(-4 * _LN10, 2 * _LN10, 13))
    # extend until alpha(Delta) < every alpha at the top end (alpha -> 0 as Delta -> inf) and
    # V reaches the scan floor at the bottom end
    while tr.lna[1][-1] >= np.log(a_min):
        tr = _merge(tr, nodes(tr.t[-1:] + _LN10 / 2))
    while tr.V[0] > _V_FLOOR:  # V ~ Delta as Delta -> 0 (THEORY 1.1): all the half-decade
        # steps that law asks for at once (at least one), then check again
        k = max(int(np.ceil(2 * np.log10(tr.V[0] / _V_FLOOR) - 1e-9)), 1)
        tr = _merge(tr, nodes(tr.t[0] - _LN10 / 2 * np.arange(k, 0, -1)))
    # below the floor, on while alpha(Delta) still rises towards the largest alpha (hardmax:
    # V ~ 1 / alpha^2 at large alpha), down to aim_se's V_MIN
    ln_a_max = float(np.log(np.max(alphas)))
    while (tr.V[0] > aim_se.V_MIN and tr.lna[1][0] < ln_a_max
           and tr.lna[1][0] > tr.lna[1][1]):
        tr = _merge(tr, nodes(tr.t[:1] - _LN10 / 2))
    target = tol / 2
    while True:
        # the nodes every root's stencils use get both levels and the prior's error
        need = set()
        for a in alphas:
            y = tr.lna[1] - np.log(a)
            for j in np.nonzero((y[:-1] == 0) | (y[:-1] * y[1:] < 0))[0]:
                need.update(range(*_stencil(int(j), len(tr.t), 6).indices(len(tr.t))))
        need = np.array(sorted(i for i in need if not tr.fine[i]), dtype=int)
        if need.size:
            _make_fine(cc, tr, need, rho=rho, levels=_neighbour_levels(tr, need, level),
                       tail_sd=box)
            continue
        refine: set[int] = set()
        tr.roots = _roots_many(tr, alphas)
        # turning points of alpha(Delta): fixed points appear or vanish in pairs there
        d = np.diff(tr.lna[1])
        for j in range(1, len(d)):
            if d[j - 1] * d[j] < 0:
                refine.update(i for i in (j - 1, j) if tr.t[i + 1] - tr.t[i] > _FOLD_STEP)
        raise_: set[int] = set()
        for roots in tr.roots.values():
            for r in roots:
                s = _stencil(r.bracket, len(tr.t), 6)
                if cc.discrete and r.quad_error > target:
                    raise_.update(i for i in range(s.start, s.stop) if tr.lev[i] < max_level)
                if target < r.interp_error < float("inf"):
                    refine.update(range(s.start, s.stop - 1))
        if refine and len(tr.t) + len(refine) <= max_nodes:  # the grid first: its final
            idx = np.array(sorted(refine))  # stencils are the ones whose levels matter
            tr = _merge(tr, nodes(0.5 * (tr.t[idx] + tr.t[idx + 1])))
            continue
        if raise_:  # those stencils' nodes at the next pair of levels; the prior is kept
            idx = np.array(sorted(raise_), dtype=int)
            _make_fine(cc, tr, idx, rho=rho, levels=tr.lev[idx] + 1, tail_sd=box)
            continue
        tr.level = int(np.max(tr.lev[tr.fine])) if tr.fine.any() else level
        tr.box = box
        return tr


def _fixed_point(rho: float, r: _Root, **extra) -> aim_se.FixedPoint:
    return aim_se.FixedPoint(1.0 + rho - r.V, float(np.exp(-r.t)), r.V, r.phi, abs(r.slope) < 1,
                             r.slope, r.error, extra=extra)


def polish(cc, tr: _Trace, *, rho: float, items: list[tuple[float, _Root]], tol: float,
           max_level: int = 3) -> list[aim_se.FixedPoint]:
    """Newton's method on ln alpha(t) = ln a for many roots at once (one compiled call per
    step), from the traced roots and slopes, the slope then updated by secants (the reported
    slope is the last secant's), at the trace's finer quadrature level; then the next level
    at the converged t moves each root by the linearised shift, which is its quadrature error.
    The level is raised for roots where that shift exceeds tol / 2. Reported: the finer
    level's root; error = level shift + last Newton step + prior error / |1 - slope|.
    Roots where Newton fails fall back to :func:`aim_sym.numerics.aim_se.solve_fixed_point`."""
    Q0 = 1.0 + rho
    n = len(items)
    out: list[aim_se.FixedPoint | None] = [None] * n
    ln_a = np.log([a for a, _ in items])
    t = np.array([r.t for _, r in items])
    dy = np.array([r.slope - 1.0 for _, r in items])
    dlnV = np.array([r.dlnV for _, r in items])
    lo = np.array([tr.t[max(r.bracket - 1, 0)] for _, r in items])
    hi = np.array([tr.t[min(r.bracket + 2, len(tr.t) - 1)] for _, r in items])
    t_prev, y_prev = np.full(n, np.nan), np.full(n, np.nan)
    pending = np.arange(n)
    level = max(tr.level + 1, _POLISH_LEVEL) if cc.discrete else 0
    box = _tail_sd(tol)
    while pending.size and level <= max_level:
        active, failed = pending, []
        t_prev[:] = np.nan  # secants within one level only
        for _ in range(12):
            if not active.size:
                break
            ta = t[active]
            V, mi = _prior(rho, ta)
            E, psi, _ = output_moments_many(cc, q=Q0 - V, V=V, level=level, tail_sd=box)
            y = -np.log(2.0 * E) - ta - ln_a[active]  # ln(alpha(t) / a)
            dt = ta - t_prev[active]
            sec = np.abs(dt) > 1e-9  # secant update of y' (and so of the slope) once possible
            dy[active[sec]] = (y[sec] - y_prev[active[sec]]) / dt[sec]
            t_prev[active], y_prev[active] = ta, y
            step = -y / dy[active]
            dVdt = V * dlnV[active]
            newton_err = np.abs(step * dVdt)
            done = newton_err <= tol / 20
            if done.any():
                k = active[done]
                if cc.discrete:
                    Ef, psif, tailf = output_moments_many(cc, q=Q0 - V[done], V=V[done],
                                                          level=level + 1, tail_sd=box)
                else:
                    Ef, psif, tailf = E[done], psi[done], np.zeros(int(done.sum()))
                t_coarse = ta[done] + step[done]
                t_fine = ta[done] + (np.log(2.0 * Ef) + ta[done] + ln_a[k]) / dy[k]
                quad = (np.abs(t_fine - t_coarse) + tailf / Ef / np.abs(dy[k])) \
                    * np.abs(dVdt[done])
                keep = quad <= tol / 2 if cc.discrete else np.ones(k.size, dtype=bool)
                V_err = np.full(k.size, np.nan)  # the prior's error where the root is kept
                V_err[keep] = _prior_error(rho, ta[done][keep], V[done][keep])
                for i, kk in enumerate(k):
                    if not keep[i]:
                        t[kk] = t_fine[i]
                        continue
                    slope = 1.0 + dy[kk]
                    Vr = V[done][i] + dVdt[done][i] * (t_fine[i] - ta[done][i])
                    err = quad[i] + newton_err[done][i] + V_err[i] / max(abs(1 - slope), 1e-3)
                    err = max(err, 4 * np.finfo(float).eps * Vr)
                    phi = V[done][i] / (4 * np.exp(ta[done][i])) - mi[done][i] \
                        + np.exp(ln_a[kk]) * psif[i]
                    root = _Root(float(t_fine[i]), float(Vr), float(err), 0.0, float(quad[i]),
                                 float(slope), float(phi), items[kk][1].bracket, float(dlnV[kk]))
                    out[kk] = _fixed_point(rho, root, method="traced + Newton", level=level + 1)
            t[active[~done]] = ta[~done] + step[~done]
            stray = (t[active] < lo[active]) | (t[active] > hi[active])
            failed += list(active[stray & ~done])
            active = active[~done & ~stray]
        failed += list(active)
        for kk in failed:  # robust route: Brent's method on the SE map at growing levels
            a, r = items[kk]
            out[kk] = aim_se.solve_fixed_point(cc, alpha=float(np.exp(ln_a[kk])), rho=rho,
                                               v0=r.V, tol=tol, max_level=max_level,
                                               first=min(max(20 * r.error / r.V, 1e-7), 1e-2))
        pending = np.array([kk for kk in range(n) if out[kk] is None], dtype=int)
        level += 1
    if pending.size:
        kk = int(pending[0])
        raise ConvergenceError(f"SE fixed point not converged to tol={tol} by quadrature level "
                               f"{max_level}", last_iterate=float(t[kk]), residual=None)
    return out


def fixed_points_traced(cc, tr: _Trace, *, alpha: float, rho: float, tol: float,
                        max_level: int = 3,
                        polished: dict | None = None) -> list[aim_se.FixedPoint]:
    """All fixed points at ``alpha`` from a trace (interpolated, or polished by Newton where the
    interpolated error exceeds ``tol``), V = 0 appended for noiseless channels, the
    Bayes-optimal one flagged (THEORY 1.1)."""
    if alpha == 0:
        return aim_se.fixed_points(cc, alpha=0.0, rho=rho)
    roots = tr.roots.get(alpha)
    roots = _roots_at(tr, alpha) if roots is None else roots
    if not roots and tr.V[0] <= aim_se.V_MIN and tr.lna[1][0] < np.log(alpha):
        apr = aim_se.perfect_recovery_alpha(cc, rho=rho) if cc.noiseless else None
        if apr is None or alpha < apr:  # the trace ended at V_MIN below this alpha's root
            raise aim_se.below_v_min(alpha=alpha, last_iterate=float(tr.V[0]), residual=None)
    if polished is None:
        todo = [(alpha, r) for r in roots if r.error > tol]
        polished = dict(zip([(a, r.bracket) for a, r in todo],
                            polish(cc, tr, rho=rho, items=todo, tol=tol, max_level=max_level)))
    fps = [polished[(alpha, r.bracket)] if r.error > tol else
           _fixed_point(rho, r, method="traced", level=tr.level + 1,
                        interp_error=r.interp_error, quad_error=r.quad_error)
           for r in roots]
    return aim_se._with_perfect_recovery(cc, alpha=alpha, rho=rho, fps=fps)


def _curve_traced(cc, *, alphas, rho: float, tol: float,
                  progress: Callable | None) -> list[dict]:
    """The traced route of :func:`curve`: one trace of alpha(Delta) shared by all alphas (to
    max(tol, 1e-4)), the roots it cannot give to ``tol`` polished together by Newton's method."""
    pos = alphas[alphas > 0]
    tr = trace(cc, rho=rho, alphas=pos, tol=max(tol, _TRACE_TOL)) if len(pos) else None
    todo = [] if tr is None else [(a, r) for a, roots in tr.roots.items() for r in roots
                                  if r.error > tol]
    polished = {} if tr is None else dict(zip(
        [(a, r.bracket) for a, r in todo], polish(cc, tr, rho=rho, items=todo, tol=tol)))
    rows = []
    for i, a in enumerate(alphas):
        fps = fixed_points_traced(cc, tr, alpha=float(a), rho=rho, tol=tol, polished=polished)
        bo = aim_se.bayes_optimal(fps)
        rows.append(_row(float(a), bo, len(fps)))
        if progress:
            progress(i + 1, len(alphas), f"alpha={float(a):.6g}")
    return rows


def _curve_per_alpha(cc, *, alphas, rho: float, tol: float,
                     progress: Callable | None) -> list[dict]:
    """The per-alpha route of :func:`curve`: :func:`aim_sym.numerics.aim_se.fixed_points` (a V
    scan) at each alpha."""
    rows = []
    for i, a in enumerate(alphas):
        fps = aim_se.fixed_points(cc, alpha=float(a), rho=rho, tol=tol)
        rows.append(_row(float(a), aim_se.bayes_optimal(fps), len(fps)))
        if progress:
            progress(i + 1, len(alphas), f"alpha={float(a):.6g}")
    return rows


def _row(alpha: float, bo: aim_se.FixedPoint, n: int) -> dict:
    return {"alpha": alpha, "q": bo.q, "q_hat": bo.q_hat, "mmse": bo.mmse, "phi": bo.phi,
            "error": bo.error, "n_fixed_points": n}


def curve(cc, *, alphas, rho: float, tol: float = 1e-13, progress: Callable | None = None,
          method: str = "traced") -> list[dict]:
    """The Bayes-optimal fixed point over an alpha grid (one tidy row per alpha; THEORY 1.1).

    ``method="traced"`` (default): alpha(Delta) traced once for all alphas, the roots it cannot
    give to ``tol`` polished by Newton's method; ``"per-alpha"``:
    :func:`aim_sym.numerics.aim_se.fixed_points` at each alpha (a V scan per alpha), the
    independent route the traced one is tested against.
    """
    require(method in ("traced", "per-alpha"), "method", "'traced' or 'per-alpha'", method)
    alphas = np.asarray(alphas, dtype=float).ravel()
    for a in alphas:
        aim_se._check(float(a), rho)
    require(tol > 0, "tol", "> 0", tol)
    route = _curve_traced if method == "traced" else _curve_per_alpha
    return route(cc, alphas=alphas, rho=rho, tol=tol, progress=progress)
