"""The cross-validated weight decay of the T = 2 ERM state evolution (THEORY 3; issue 16 item 4).

Cross-validation estimates the population test error of the trained student; at d -> infinity
that is the SE's test error at the fixed point, so the cross-validated lambda is

    lambda* = argmin_{lambda in [lo, hi]} test(lambda),

the factorised model (nuclear norm, :mod:`.erm_se`) or the direct one (ridge, :mod:`.erm_direct`).

Search (:func:`search`), in x = ln lambda, on the SE at a cheap Gauss-Hermite order (default 8):
a scan of ``scan`` points spaced evenly in x from lo to hi (each fixed point continued from the
previous one; the first from the default starts, lowest training loss), then golden-section
refinement of the scan's best bracket until it is narrower than ``tol``.  The best point b is
lambda*; it sits on an edge of the range when no interior point beats the end (then lambda* is
the end, ``edge`` says which, and the true optimum is at or beyond it).
Bars: a parabola through the stencil (b - h, b, b + h) (h = :data:`STENCIL`) at the search order
and at ``order_lo`` gives two vertices v, v_lo; the bar on x* is
max(tol / 2, |v - b|) + algebraic_factor(order, order_lo) |v - v_lo| (the location error of the
search plus the quadrature order's shift of the argmin, the same 1/n rule as the SE's bars).
The test error at b exceeds the minimum only at second order: by at most
(1/2) f'' (bar on x*)^2 with f'' = d^2 test / d x^2 from the parabola (``flatness``).

lambda -> 0+ below interpolation: the factorised limit is :func:`.erm_se.interpolator_limit`;
the direct one is closed (:func:`.erm_direct.interpolator_limit`, derived there).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from . import erm_direct, erm_se
from .erm_output import generalisation_error
from .erm_se import DEFAULT_INITS, ERMParams, algebraic_factor
from .records import ConvergenceError, require

__all__ = ["LambdaSearch", "search", "SEARCH_ORDER",
           "SEARCH_ORDER_LO", "SCAN_POINTS", "TOL", "STENCIL"]

SEARCH_ORDER = 8  # Gauss-Hermite order of the search (the final point is re-solved by the caller)
SEARCH_ORDER_LO = 6  # the coarser order of the argmin's quadrature bar
SCAN_POINTS = 7  # scan points over the range, evenly spaced in ln lambda
TOL = 0.1  # width of the final golden-section bracket in ln lambda (lambda* to ~5%)
STENCIL = 0.5  # half-width in ln lambda of the parabola stencil (curvature, order check)
_GOLD = (3.0 - math.sqrt(5.0)) / 2.0


@dataclass(frozen=True)
class LambdaSearch:
    """The SE's test-error minimum over lambda at the search order (module docstring).

    ``lam``: lambda*; ``log_lam_error``: bar on ln lambda* (0 at an edge); ``test``: test error
    at lambda* (search order); ``edge``: "", "lower" or "upper"; ``edge_confirmed``: the coarser
    order puts the minimum on the same edge; ``bracket``: final (lambda_a, lambda_c);
    ``curvature``: d^2 test / d(ln lambda)^2; ``flatness``: the second-order excess of test at
    lambda* over the minimum; ``vertex``, ``vertex_lo``: parabola vertices (lambda) at the two
    orders (None without a positive curvature); ``fixed_point``: (q, m, Sigma, q_hat, m_hat,
    Sigma_hat) at lambda*; ``train``: its training loss; ``other_fixed_points``: fixed points
    from the default starts at lambda* with a lower training loss than the followed branch
    (should be empty); ``evaluations``: every (lambda, test) in order (test = inf: no fixed
    point)."""

    lam: float
    log_lam_error: float
    test: float
    edge: str
    edge_confirmed: bool
    bracket: tuple[float, float]
    curvature: float
    flatness: float
    vertex: float | None
    vertex_lo: float | None
    fixed_point: tuple
    train: float
    other_fixed_points: tuple
    evaluations: tuple
    order: int
    order_lo: int
    tol: float


class _Evaluator:
    """test(x = ln lambda) at one order, each fixed point continued from the nearest one known."""

    def __init__(self, p: ERMParams, *, direct: bool, order: int, start: tuple | None):
        self.p, self.direct, self.order = p, direct, order
        self.prior = erm_direct.overlaps_from_hats if direct else None
        self.start = start
        self.points: dict[float, tuple] = {}  # x -> (test, fixed point)
        self.log: list[tuple[float, float]] = []

    def params(self, x: float) -> ERMParams:
        return replace(self.p, lam=math.exp(x))

    def train(self, x: float, fp: tuple) -> float:
        pot = erm_direct.potential if self.direct else erm_se.potential
        return pot(*fp, self.params(x), order=self.order)

    def solve_from(self, x: float, start: tuple) -> tuple:
        return erm_se.fixed_point(self.params(x), q=start[0], m=start[1], sigma=start[2],
                                  order=self.order, prior=self.prior, max_iter=200,
                                  label="direct ERM SE" if self.direct else "ERM SE")[0]

    def default_fixed_points(self, x: float) -> list[tuple]:
        """Fixed points from the default starts at x (deduplicated)."""
        p, out = self.params(x), []
        for qi, mi, si in DEFAULT_INITS:
            try:
                fp = self.solve_from(x, (qi * p.Q0, mi * p.Q0, si))
            except ConvergenceError:
                continue
            if not any(erm_se._close(fp, f, 1e-5) for f in out):
                out.append(fp)
        return out

    def test_of(self, fp: tuple) -> float:
        return generalisation_error(q=fp[0], m=fp[1], Q0n=self.p.Q0n, beta=self.p.beta,
                                    beta0=self.p.beta0)

    def __call__(self, x: float, start: tuple | None = None) -> float:
        if x in self.points:
            return self.points[x][0]
        fp = None
        if start is None and self.points:
            near = min(self.points, key=lambda k: (abs(k - x), self.points[k][0]))
            start = self.points[near][1]
            if not math.isfinite(self.points[near][0]):
                start = None
        if start is None and self.start is not None:
            start = self.start
        if start is not None:
            try:
                fp = self.solve_from(x, start)
            except ConvergenceError:
                fp = None
        if fp is None:  # the default starts (also when continuation fails); lowest training loss
            fps = self.default_fixed_points(x)
            if fps:
                fp = min(fps, key=lambda f: self.train(x, f))
        test = math.inf if fp is None else self.test_of(fp)
        self.points[x] = (test, fp)
        self.log.append((math.exp(x), test))
        return test


def _parabola(xs: tuple, fs: tuple) -> tuple[float, float | None]:
    """(second derivative, vertex) of the parabola through three points (vertex None unless
    the curvature is positive)."""
    a, b, _ = np.polyfit(np.asarray(xs), np.asarray(fs), 2)
    return 2.0 * a, (-b / (2.0 * a) if a > 0 else None)


def search(p: ERMParams, *, direct: bool = False, lam_range: tuple[float, float] = (1e-3, 1.0),
           tol: float = TOL, scan: int = SCAN_POINTS, order: int = SEARCH_ORDER,
           order_lo: int = SEARCH_ORDER_LO, start: tuple | None = None) -> LambdaSearch:
    """lambda* = argmin test(lambda) over ``lam_range`` for the SE at ``p`` (``p.lam`` is
    ignored), T = 2; ``start``: (q, m, Sigma) to continue from (e.g. the previous alpha's
    lambda*), else the default starts.  Raises :class:`ConvergenceError` when the scan's best
    point has a neighbour without a fixed point (the minimum is not bracketed)."""
    lo, hi = lam_range
    require(0 < lo < hi and math.isfinite(hi), "lam_range", "0 < low < high < infinity",
            lam_range)
    require(p.tokens == 2, "tokens", "2 (the cross-validated lambda uses the T = 2 SE)", p.tokens)
    require(isinstance(scan, int) and scan >= 3, "scan", "an integer >= 3", scan)
    require(0 < tol < 1, "tol", "in (0, 1) (ln lambda)", tol)
    require(2 <= order_lo < order, "order_lo", f"an integer in [2, {order})", order_lo)
    f = _Evaluator(p, direct=direct, order=order, start=start)
    xs = np.linspace(math.log(lo), math.log(hi), scan)
    xs = [float(x) for x in xs]
    vals = [f(x) for x in xs]
    if not any(math.isfinite(v) for v in vals):
        raise ConvergenceError("cross-validated lambda: no SE fixed point on the scan",
                               last_iterate=f.log, residual=None)
    i = int(np.argmin(vals))
    nb = [j for j in (i - 1, i + 1) if 0 <= j < scan]
    if any(not math.isfinite(vals[j]) for j in nb):
        raise ConvergenceError("cross-validated lambda: the scan's best point has a neighbour "
                               "without an SE fixed point", last_iterate=f.log, residual=None)
    a, b, c = xs[max(i - 1, 0)], xs[i], xs[min(i + 1, scan - 1)]
    fb = vals[i]
    while c - a > tol:
        if c - b >= b - a:
            x = b + _GOLD * (c - b)
            fx = f(x)
            if fx < fb:
                a, b, fb = b, x, fx
            else:
                c = x
        else:
            x = b - _GOLD * (b - a)
            fx = f(x)
            if fx < fb:
                c, b, fb = b, x, fx
            else:
                a = x
    edge = "lower" if b == xs[0] else "upper" if b == xs[-1] else ""
    h = STENCIL
    if edge == "lower":
        sten = (b, b + h, b + 2 * h)
    elif edge == "upper":
        sten = (b - 2 * h, b - h, b)
    else:
        sten = (max(b - h, xs[0]), b, min(b + h, xs[-1]))
    f_hi = tuple(f(x) for x in sten)
    if not all(math.isfinite(v) for v in f_hi):
        raise ConvergenceError("cross-validated lambda: no SE fixed point on the stencil",
                               last_iterate=f.log, residual=None)
    g = _Evaluator(p, direct=direct, order=order_lo, start=None)
    f_lo = tuple(g(x, start=f.points[x][1]) for x in sten)
    curv, v = _parabola(sten, f_hi)
    curv_lo, v_lo = _parabola(sten, f_lo)
    curv = max(curv, 0.0)
    if edge:
        k = 0 if edge == "lower" else 2
        edge_confirmed = f_lo[k] <= min(f_lo)
        log_err = 0.0
        flat = 0.5 * curv * tol * tol
    else:
        edge_confirmed = False
        if v is None or v_lo is None:
            log_err = h  # no positive curvature: the stencil itself bounds the location
        else:
            log_err = (max(tol / 2, abs(v - b))
                       + algebraic_factor(order, order_lo) * abs(v - v_lo))
        flat = 0.5 * curv * max(log_err, tol) ** 2
    fp = f.points[b][1]
    train = f.train(b, fp)
    others = tuple(o for o in f.default_fixed_points(b)
                   if not erm_se._close(o, fp, 1e-5) and f.train(b, o) < train - 1e-12)
    return LambdaSearch(
        lam=math.exp(b), log_lam_error=log_err, test=fb, edge=edge,
        edge_confirmed=bool(edge_confirmed), bracket=(math.exp(a), math.exp(c)),
        curvature=curv, flatness=flat,
        vertex=None if v is None else math.exp(v),
        vertex_lo=None if v_lo is None else math.exp(v_lo),
        fixed_point=tuple(fp), train=train, other_fixed_points=others,
        evaluations=tuple(f.log), order=order, order_lo=order_lo, tol=tol)
