"""Gaussian polytope masses and their mean gradients in mpmath, rank <= 3 (THEORY 1.2, 1.4).

For h ~ N(mean, Sigma) in R^n and a polytope {A h <= b} whose rows span at most 3 directions,
:func:`polytope_moments_mp` gives P = P(A h <= b) and dP/dmean to many digits;
:func:`weak_threshold_mp` uses them for the small-width threshold of a polyhedral channel,
alpha_bar_c = 1 / (2 E(0, 1)), E = sum_y |dZ_y/domega|_C^2 / Z_y at omega = 0, V = 1
(the double-precision route is :func:`aim_sym.numerics.polyhedral_se.weak_threshold`).

**Reduction.** Whiten h = mean + L z (Sigma = L L^T): row i reads n_i . z <= t_i with n_i the unit
vector of (A L)_i and t_i = (b_i - A_i mean) / |(A L)_i|. Exactly parallel rows keep the tighter
one; opposite rows with t_i + t_j <= 0 leave no interior (P = 0); the rows are projected onto
their span (rank r <= 3, else refused). The gradient is a sum over facets (Tallis):
dP/dt_i = phi(t_i) P(others | n_i . z = t_i), a mass in dimension r - 1, and
dP/dmean = -sum_i (A_i / |(A L)_i|) dP/dt_i.

**The mass** in dimension r (z ~ N(0, I_r)): r = 1 by erfc; r = 2, 3 by the integral over one
direction e of the mass of the slice {e . z = t}, recursively (r = 2: a 1-D integral of Phi
differences; r = 3: of rank-2 slice masses). The slice mass is analytic in t between the values
where the slice changes its combinatorial type: cut-offs of rows parallel to e, vertices of r
independent rows, and (r = 3) coincidences of two rows whose slices are parallel lines. Between
those points (and a fixed grid of length ``span`` over the integrand's scale) each piece is an
entire function, integrated by Gauss-Legendre with a node count proportional to the digits the
piece needs (its Gaussian mass over the tolerance). The window |t| <= L (erfc(L / sqrt 2) <=
tol) and the pieces below tol are bounded explicitly. Error: |fine - coarse| for two node counts
(``MpRule``) + the truncation bounds + a rounding gauge, at dps + 10 working digits. The
accuracy is absolute (tolerance 10^-(dps + 7), gauge 10^-(dps + 4)): a mass far in the tail keeps
fewer relative digits (the double engine carries those in logs; docs/polyhedral.md).

The direction e is chosen among the rows, their pairwise normals and a fixed set so that no row
is nearly parallel to it (the slopes of the slice's bounds in t stay small).
"""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass

import mpmath

from .records import Estimate, InputError, require

__all__ = ["MpRule", "MP_RULE", "MpMoments", "polytope_moments_mp", "weak_threshold_mp"]

#: extra working digits beyond the requested ``dps``
EXTRA_DIGITS = 10
#: the largest slope |alpha| / |beta| of a row against the chosen direction that is accepted
#: (rows nearly, but not exactly, parallel: ill-conditioned input)
SLOPE_MAX = 1e6


@dataclass(frozen=True)
class MpRule:
    """Gauss-Legendre nodes per piece: ``per_digit`` times the decimal digits the piece needs plus
    ``extra_nodes`` (fine rule), likewise ``coarse_*`` (coarse rule; the error bar is their
    difference); the longest piece ``span`` over the integrand's scale up to |t| = ``grade``, and
    ``span`` grade / |t| beyond (the Gaussian's own scale far out)."""

    per_digit: float = 0.5
    extra_nodes: int = 5
    coarse_per_digit: float = 0.45
    coarse_extra_nodes: int = 4
    span: float = 2.5
    grade: float = 3.0

    def __post_init__(self) -> None:
        require(0 < self.coarse_per_digit <= self.per_digit <= 5, "per_digit",
                "0 < coarse_per_digit <= per_digit <= 5", (self.coarse_per_digit, self.per_digit))
        require(isinstance(self.extra_nodes, int) and isinstance(self.coarse_extra_nodes, int)
                and 1 <= self.coarse_extra_nodes <= 50 and 1 <= self.extra_nodes <= 50
                and (self.coarse_per_digit, self.coarse_extra_nodes)
                < (self.per_digit, self.extra_nodes), "extra_nodes",
                "integers in 1..50, the fine rule above the coarse one",
                (self.coarse_extra_nodes, self.extra_nodes))
        require(0.1 <= self.span <= 10 and 0.5 <= self.grade <= 20, "span",
                "in [0.1, 10] (grade in [0.5, 20])", (self.span, self.grade))

    @property
    def fine(self) -> tuple[float, int]:
        return self.per_digit, self.extra_nodes

    @property
    def coarse(self) -> tuple[float, int]:
        return self.coarse_per_digit, self.coarse_extra_nodes


MP_RULE = MpRule()


@dataclass(frozen=True)
class MpMoments:
    """P(A h <= b) and dP/dmean (mpf at the working precision) with error bars; ``rank`` the
    dimension of the row space, ``rows`` the indices of the rows that bound (after merging
    exactly parallel rows)."""

    mass: mpmath.mpf
    mass_error: mpmath.mpf
    grad: tuple
    grad_error: tuple
    rank: int
    rows: tuple
    dps: int
    seconds: float


# ----------------------------------------------------------------------------- small helpers
_GL_CACHE: dict = {}


def _gauss_legendre(n: int) -> tuple[list, list]:
    """Gauss-Legendre nodes and weights on [-1, 1] at the current precision (Newton on P_n)."""
    key = (n, mpmath.mp.prec)
    if key in _GL_CACHE:
        return _GL_CACHE[key]
    with mpmath.extraprec(30):
        xs, ws = [], []
        eps = mpmath.mpf(2) ** (-mpmath.mp.prec + 20)
        for i in range((n + 1) // 2):
            x = mpmath.cos(mpmath.pi * (i + mpmath.mpf(3) / 4) / (n + mpmath.mpf(1) / 2))
            for _ in range(100):
                p0, p1 = mpmath.mpf(1), x
                for k in range(2, n + 1):
                    p0, p1 = p1, ((2 * k - 1) * x * p1 - (k - 1) * p0) / k
                dp = n * (x * p1 - p0) / (x * x - 1)
                dx = p1 / dp
                x -= dx
                if abs(dx) < eps:
                    break
            w = 2 / ((1 - x * x) * dp * dp)
            xs.append(x)
            ws.append(w)
        nodes = [-x for x in xs] + [x for x in reversed(xs[: n // 2])]
        weights = list(ws) + list(reversed(ws[: n // 2]))
    out = ([+x for x in nodes], [+w for w in weights])
    _GL_CACHE[key] = out
    return out


def _dot(u, v):
    return mpmath.fsum(a * b for a, b in zip(u, v))


def _norm(u):
    return mpmath.sqrt(_dot(u, u))


def _complement(e: list, dim: int) -> list[list]:
    """An orthonormal basis of e^perp in R^dim (Gram-Schmidt on the unit vectors)."""
    basis = [e]
    out = []
    for k in sorted(range(dim), key=lambda k: abs(e[k])):
        v = [mpmath.mpf(1) if j == k else mpmath.mpf(0) for j in range(dim)]
        for q in basis:
            d = _dot(v, q)
            v = [a - d * b for a, b in zip(v, q)]
        nv = _norm(v)
        if nv > mpmath.mpf("0.1"):
            v = [a / nv for a in v]
            basis.append(v)
            out.append(v)
        if len(out) == dim - 1:
            break
    return out


def _phi(t):
    return mpmath.exp(-t * t / 2) / mpmath.sqrt(2 * mpmath.pi)


def _phi_diff(lo, hi):
    """Phi(hi) - Phi(lo) (lo < hi; +-inf allowed) by erfc of the smaller tails."""
    r2 = mpmath.sqrt(2)
    if lo == -mpmath.inf:
        return mpmath.erfc(-hi / r2) / 2
    if hi == mpmath.inf:
        return mpmath.erfc(lo / r2) / 2
    if lo >= 0:
        return (mpmath.erfc(lo / r2) - mpmath.erfc(hi / r2)) / 2
    if hi <= 0:
        return (mpmath.erfc(-hi / r2) - mpmath.erfc(-lo / r2)) / 2
    return 1 - (mpmath.erfc(-lo / r2) + mpmath.erfc(hi / r2)) / 2


def _window(tol) -> mpmath.mpf:
    """L with erfc(L / sqrt 2) <= tol."""
    L = mpmath.sqrt(2 * mpmath.log(1 / tol))
    while mpmath.erfc(L / mpmath.sqrt(2)) > tol:
        L += mpmath.mpf("0.25")
    return L


def _fixed_directions(dim: int) -> list[list]:
    """A fixed set of unit directions (one of each +- pair) tried as slicing directions."""
    if dim == 2:
        return [[mpmath.cos(mpmath.pi * k / 24), mpmath.sin(mpmath.pi * k / 24)]
                for k in range(24)]
    out = []
    for v in itertools.product((-1, 0, 1, 2), repeat=3):
        if any(v) and next(x for x in v if x != 0) > 0:
            nv = mpmath.sqrt(sum(x * x for x in v))
            out.append([mpmath.mpf(x) / nv for x in v])
    return out


def _cross(u, v):
    return [u[1] * v[2] - u[2] * v[1], u[2] * v[0] - u[0] * v[2], u[0] * v[1] - u[1] * v[0]]


# ----------------------------------------------------------------------------- slices
class _Slicer:
    """Mass of {rows . z <= offsets} for z ~ N(0, I_dim), dim in 1..3, unit rows fixed and the
    offsets varying (module docstring): the direction, the slice's rows and the breakpoint maps
    (linear functionals of the offsets) are set up once."""

    def __init__(self, rows: list[list], dim: int):
        self.dim = dim
        self.m = len(rows)
        par = mpmath.mpf(10) ** (-mpmath.mp.dps + 10)
        if dim == 1:
            self.upper = [r[0] > 0 for r in rows]
            return
        e = self._direction(rows, dim, par)
        ne = _norm(e)  # unit at the working precision (a rounded e biases the slices)
        e = [x / ne for x in e]
        F = _complement(e, dim)
        self.cuts = []      # (j, a): a t <= o_j
        inner = []          # (j, inv, slope, unit inner row)
        for j, r in enumerate(rows):
            a = _dot(r, e)
            beta = [_dot(r, f) for f in F]
            nb = _norm(beta)
            if nb <= par:
                self.cuts.append((j, a))
            else:
                inner.append((j, 1 / nb, a / nb, [x / nb for x in beta]))
        self.inner_rows = inner
        self.slope = max([abs(s) for _, _, s, _ in inner], default=mpmath.mpf(0))
        if self.slope > SLOPE_MAX:
            raise InputError("polytope rows must not be nearly (but not exactly) parallel; got "
                             f"a slope {float(self.slope):.3g} against every slicing direction")
        self.inner = _Slicer([u for _, _, _, u in inner], dim - 1) if inner else None
        # breakpoint maps: t = sum_k coef_k o_{idx_k}
        maps = []
        for (j, ij, sj, uj), (k, ik, sk, uk) in itertools.combinations(inner, 2):
            if dim == 3 and abs(uj[0] * uk[1] - uj[1] * uk[0]) > par:
                continue  # slices are crossing lines: no coincidence
            sigma = 1 if _dot(uj, uk) > 0 else -1
            den = sigma * sk - sj
            if abs(den) > par:  # u_j(t) = sigma u_k(t), u(t) = o inv - slope t
                maps.append(((j, k), (-ij / den, sigma * ik / den)))
        if dim == 3:
            for S in itertools.combinations(range(self.m), 3):
                M = [rows[k] for k in S]
                Mm = mpmath.matrix(M)
                if abs(mpmath.det(Mm)) <= par:
                    continue
                # t = e . M^-1 o_S = (M^-T e) . o_S
                w = list(mpmath.lu_solve(Mm.T, mpmath.matrix(e)))
                maps.append((S, tuple(w)))
        self.maps = maps

    @staticmethod
    def _direction(rows: list[list], dim: int, par) -> list:
        """The slicing direction of least largest slope |r . e| / |r - (r . e) e| (rows exactly
        parallel to e are cut-offs and cost nothing)."""
        cands = []
        for r in rows:
            cands.append(list(r))
            if dim == 2:
                cands.append([-r[1], r[0]])
        if dim == 3:
            for r, s in itertools.combinations(rows, 2):
                c = _cross(r, s)
                nc = _norm(c)
                if nc > mpmath.mpf("1e-3"):
                    cands.append([x / nc for x in c])
        cands += _fixed_directions(dim)
        fr = [[float(x) for x in r] for r in rows]
        best, best_score = None, math.inf
        for e in cands:
            fe = [float(x) for x in e]
            score = 0.0
            for r in fr:
                a = sum(x * y for x, y in zip(r, fe))
                nb2 = max(1.0 - a * a, 0.0)
                if nb2 <= 1e-24:
                    continue
                score = max(score, abs(a) / math.sqrt(nb2))
            if score < best_score - 1e-9:
                best, best_score = e, score
        return best

    def mass(self, o: list, tol, nodes: tuple, rule: MpRule, L) -> mpmath.mpf:
        """The mass at offsets ``o`` to about ``tol`` (absolute), Gauss-Legendre with
        ``nodes`` = (nodes per needed digit, extra nodes) per piece."""
        if self.dim == 1:
            lo, hi = -mpmath.inf, mpmath.inf
            for up, oj in zip(self.upper, o):
                if up:
                    hi = min(hi, oj)
                else:
                    lo = max(lo, -oj)
            return _phi_diff(lo, hi) if hi > lo else mpmath.mpf(0)
        lo, hi = -L, L
        for j, a in self.cuts:
            if a > 0:
                hi = min(hi, o[j] / a)
            else:
                lo = max(lo, o[j] / a)
        if not lo < hi:
            return mpmath.mpf(0)
        pts = {lo, hi}
        for idx, coef in self.maps:
            t = mpmath.fsum(c * o[i] for c, i in zip(coef, idx))
            if lo < t < hi:
                pts.add(t)
        pts.update(p for p in _grid(L, rule.span / max(1.0, float(self.slope)), rule.grade)
                   if lo < p < hi)
        pts = sorted(pts)
        pieces = list(zip(pts[:-1], pts[1:]))
        skip = float(tol) / (10 * len(pieces))
        log_tol = float(mpmath.log10(tol))
        inner = self.inner
        # the slice's rows: u_j(t) = o_j inv_j - slope_j t; on a line (dim 2) they are +-1
        lines = [(o[j] * ij, sj) for j, ij, sj, _ in self.inner_rows]
        ups = inner.upper if inner is not None and inner.dim == 1 else None
        scale = _INV_SQRT_2PI()
        r2 = _INV_SQRT2()
        itol = tol / (2 * L * scale)
        exp, erfc, mpf0 = mpmath.exp, mpmath.erfc, mpmath.mpf(0)
        total = mpf0
        for a, b in pieces:
            af, bf = float(a), float(b)
            near = 0.0 if af <= 0 <= bf else min(abs(af), abs(bf))
            W = (bf - af) * math.exp(-near * near / 2) / math.sqrt(2 * math.pi)  # >= the mass
            if W <= skip:
                continue
            n = int(math.ceil(nodes[0] * (math.log10(W) - log_tol))) + nodes[1]
            xs, ws = _gauss_legendre(max(n, 2))
            half, mid = (b - a) / 2, (a + b) / 2
            acc = mpf0
            for x, w in zip(xs, ws):
                t = mid + half * x
                g = exp(-t * t / 2)
                if inner is None:
                    val = 1
                elif ups is not None:  # the slice is an interval: Phi(hi) - Phi(lo), inline
                    slo = shi = None
                    for (c, sl), up in zip(lines, ups):
                        u = c - sl * t
                        if up:
                            shi = u if shi is None or u < shi else shi
                        else:
                            u = -u
                            slo = u if slo is None or u > slo else slo
                    # beyond the window: Phi = 0 or 1 within tol (the truncation bound)
                    if shi is not None and shi >= L:
                        shi = None
                    if slo is not None and slo <= -L:
                        slo = None
                    if shi is None and slo is None:
                        val = 1
                    elif shi is None:
                        val = erfc(slo * r2) / 2
                    elif slo is None:
                        val = erfc(-shi * r2) / 2
                    elif shi <= slo:
                        val = mpf0
                    elif slo >= 0:
                        val = (erfc(slo * r2) - erfc(shi * r2)) / 2
                    elif shi <= 0:
                        val = (erfc(-shi * r2) - erfc(-slo * r2)) / 2
                    else:
                        val = 1 - (erfc(-slo * r2) + erfc(shi * r2)) / 2
                else:
                    u = [c - sl * t for c, sl in lines]
                    val = inner.mass(u, max(itol / g, tol), nodes, rule, L)
                acc += w * g * val
            total += half * acc
        return total * scale


_GRID_CACHE: dict = {}


def _grid(L, step: float, grade: float) -> list:
    """Fixed split points on [-L, L]: steps ``step`` up to |t| = ``grade``, then
    ``step`` grade / |t| (the Gaussian's scale far out)."""
    key = (L, step, grade, mpmath.mp.prec)
    if key not in _GRID_CACHE:
        pos, p = [], 0.0
        Lf = float(L)
        while p < Lf:
            p += step / max(1.0, p / grade)
            pos.append(mpmath.mpf(p))
        _GRID_CACHE[key] = [-x for x in reversed(pos)] + [mpmath.mpf(0)] + pos
    return _GRID_CACHE[key]


def _INV_SQRT_2PI():
    return 1 / mpmath.sqrt(2 * mpmath.pi)


def _INV_SQRT2():
    return 1 / mpmath.sqrt(2)


# ----------------------------------------------------------------------------- public entry
def _as_mp_matrix(x, name: str) -> list[list]:
    try:
        rows = [[mpmath.mpf(v) for v in r] for r in x]
    except (TypeError, ValueError) as err:
        raise InputError(f"{name} must be a table of real numbers; got {x!r}") from err
    require(all(mpmath.isfinite(v) for r in rows for v in r), name, "finite", x)
    return rows


def _prepare(A, b, cov, mean):
    """Whitened unit rows, offsets, scales, and the merge of parallel rows (module docstring).
    Returns (Arows, s, nrows, t, keep) or None for an empty polytope."""
    Arows = _as_mp_matrix(A, "A")
    m = len(Arows)
    C = _as_mp_matrix(cov, "cov")
    n = len(C)
    require(n >= 1 and all(len(r) == n for r in C), "cov", "a square matrix", (n,))
    require(all(len(r) == n for r in Arows), "A", f"rows of {n} entries (the size of cov)",
            [len(r) for r in Arows])
    bv = _as_mp_matrix([b], "b")[0]
    require(len(bv) == m, "b", f"one bound per row of A ({m})", len(bv))
    mu = [mpmath.mpf(0)] * n if mean is None else _as_mp_matrix([mean], "mean")[0]
    require(len(mu) == n, "mean", f"{n} entries", len(mu))
    require(all(C[i][j] == C[j][i] for i in range(n) for j in range(i)), "cov", "symmetric",
            "an asymmetric matrix")
    try:
        Lc = mpmath.cholesky(mpmath.matrix(C))
    except (ValueError, ZeroDivisionError) as err:
        raise InputError("cov must be positive definite; got a matrix that is not") from err
    B = [[mpmath.fsum(Arows[i][k] * Lc[k, j] for k in range(n)) for j in range(n)]
         for i in range(m)]
    c = [bv[i] - _dot(Arows[i], mu) for i in range(m)]
    live, s, nrows, t = [], [], [], []
    for i in range(m):
        if all(v == 0 for v in Arows[i]):
            if c[i] < 0:
                return None
            continue
        si = _norm(B[i])
        live.append(i)
        s.append(si)
        nrows.append([v / si for v in B[i]])
        t.append(c[i] / si)
    par = mpmath.mpf(10) ** (-mpmath.mp.dps + 10)
    keep = list(range(len(live)))
    for p, q in itertools.combinations(range(len(live)), 2):
        d_same = max(abs(x - y) for x, y in zip(nrows[p], nrows[q]))
        d_opp = max(abs(x + y) for x, y in zip(nrows[p], nrows[q]))
        if d_opp <= par and t[p] + t[q] <= 0:
            return None  # a slab of width <= 0: no interior
        if d_same <= par and p in keep and q in keep:
            keep.remove(q if t[q] >= t[p] else p)
    return Arows, [live[k] for k in keep], [s[k] for k in keep], [nrows[k] for k in keep], \
        [t[k] for k in keep]


def _basis(nrows: list[list]) -> list[list]:
    """An orthonormal basis of the span of the rows (Gram-Schmidt, exact dependence at the
    working precision)."""
    par = mpmath.mpf(10) ** (-mpmath.mp.dps + 10)
    Q = []
    for r in nrows:
        v = list(r)
        for _ in range(2):
            for q in Q:
                d = _dot(v, q)
                v = [a - d * b for a, b in zip(v, q)]
        nv = _norm(v)
        if nv > par:
            Q.append([a / nv for a in v])
    return Q


def polytope_moments_mp(A, b, cov, *, dps: int = 30, mean=None,
                        rule: MpRule = MP_RULE) -> MpMoments:
    """P(A h <= b) and dP/dmean for h ~ N(``mean``, ``cov``) (mean 0 by default) whose rows span at
    most 3 directions, at ``dps`` + 10 working digits (module docstring). Entries may be floats
    (taken exactly), integers, strings or mpf. Errors: |fine - coarse| rule + truncation +
    rounding gauge; a rank above 3, a covariance that is not positive definite, or rows nearly
    but not exactly parallel raise :class:`InputError`."""
    require(isinstance(dps, int) and 10 <= dps <= 100, "dps", "an integer in 10..100", dps)
    require(isinstance(rule, MpRule), "rule", "an MpRule", rule)
    t0 = time.perf_counter()
    with mpmath.workdps(dps + EXTRA_DIGITS):
        prep = _prepare(A, b, cov, mean)
        n = len(_as_mp_matrix(cov, "cov"))
        zero = mpmath.mpf(0)
        if prep is None:
            return MpMoments(zero, zero, (zero,) * n, (zero,) * n, 0, (), dps,
                             time.perf_counter() - t0)
        Arows, live, s, nrows, t = prep
        Q = _basis(nrows)
        r = len(Q)
        if r > 3:
            raise InputError(f"the rows of A must span at most 3 directions of h for the mpmath "
                             f"route; got rank {r}")
        tol = mpmath.mpf(10) ** (-(dps + 7))
        L = _window(tol)
        gauge = mpmath.mpf(10) ** (-(dps + EXTRA_DIGITS - 6))
        if r == 0:
            return MpMoments(mpmath.mpf(1), gauge, (zero,) * n, (zero,) * n, 0, (), dps,
                             time.perf_counter() - t0)
        R = [[_dot(row, q) for q in Q] for row in nrows]
        R = [[x / _norm(row) for x in row] for row in R]
        slicer = _Slicer(R, r)
        fine = slicer.mass(t, tol, rule.fine, rule, L)
        coarse = slicer.mass(t, tol, rule.coarse, rule, L)
        trunc = 2 * r * tol
        mass_err = abs(fine - coarse) + trunc + gauge
        # facets: dP/dt_i = phi(t_i) P(others | n_i . z = t_i), in dimension r - 1
        dPdt, dPdt_err = [], []
        par = mpmath.mpf(10) ** (-mpmath.mp.dps + 10)
        for i, ri in enumerate(R):
            F = _complement(ri, r)
            rows, offs, ok = [], [], True
            for j, rj in enumerate(R):
                if j == i:
                    continue
                beta = [_dot(rj, f) for f in F]
                nb = _norm(beta)
                off = t[j] - _dot(rj, ri) * t[i]
                if nb <= par:
                    if off < 0:
                        ok = False
                        break
                    continue
                rows.append([x / nb for x in beta])
                offs.append(off / nb)
            dens = _phi(t[i])
            if not ok or dens == 0:
                dPdt.append(zero)
                dPdt_err.append(zero)
                continue
            if r == 1 or not rows:
                dPdt.append(dens)
                dPdt_err.append(dens * gauge)
                continue
            sub = _Slicer(rows, r - 1)
            ftol = max(tol / dens, tol)
            mf = sub.mass(offs, ftol, rule.fine, rule, L)
            mc = sub.mass(offs, ftol, rule.coarse, rule, L)
            dPdt.append(dens * mf)
            dPdt_err.append(dens * (abs(mf - mc) + 2 * (r - 1) * ftol + gauge))
        grad, grad_err = [], []
        for k in range(n):
            grad.append(-mpmath.fsum(d * Arows[i][k] / si for d, i, si in zip(dPdt, live, s)))
            grad_err.append(mpmath.fsum(e * abs(Arows[i][k]) / si
                                        for e, i, si in zip(dPdt_err, live, s)))
        return MpMoments(fine, mass_err, tuple(grad), tuple(grad_err), r, tuple(live), dps,
                         time.perf_counter() - t0)


# ----------------------------------------------------------------------------- threshold
def weak_threshold_mp(ch, *, dps: int = 30, rule: MpRule = MP_RULE) -> Estimate:
    """alpha_bar_c = 1 / (2 E(0, 1)) of a polyhedral channel (``ch`` a
    :class:`aim_sym.numerics.polyhedral_se.PolyhedralOutput`) to ``dps`` digits (THEORY 1.2,
    1.4): E = sum_y sum_k C_k (dZ_y/domega_k)^2 / Z_y at omega = 0, h ~ N(0, C), C = diag of the
    channel's weights; Z_y = sum of the terms' weights times :func:`polytope_moments_mp` masses
    (each distinct polytope once). Error: the polytopes' bars propagated to first order, plus
    alpha |sum_y Z_y - 1| (a gauge of the quadrature where outcomes tile R^n), plus rounding, plus
    the rounding of the value to ``dps`` digits (``extra``: the unrounded value and its bar)."""
    require(isinstance(dps, int) and 10 <= dps <= 60, "dps", "an integer in 10..60", dps)
    t0 = time.perf_counter()
    wp = dps + EXTRA_DIGITS
    with mpmath.workdps(wp):
        C = [mpmath.mpf(w) for w in ch.weights]
        n = len(C)
        cov = [[C[i] if i == j else mpmath.mpf(0) for j in range(n)] for i in range(n)]
        cache: dict = {}
        Z, Ze, dZ, dZe = [], [], [], []
        for ts in ch.terms:
            z, ze = mpmath.mpf(0), mpmath.mpf(0)
            g, ge = [mpmath.mpf(0)] * n, [mpmath.mpf(0)] * n
            for term in ts:
                w = mpmath.mpf(term.weight)
                if not term.A:
                    z += w
                    continue
                key = (term.A, term.b)
                if key not in cache:
                    cache[key] = polytope_moments_mp(term.A, term.b, cov, dps=dps, rule=rule)
                mo = cache[key]
                z += w * mo.mass
                ze += abs(w) * mo.mass_error
                g = [gi + w * d for gi, d in zip(g, mo.grad)]
                ge = [gi + abs(w) * d for gi, d in zip(ge, mo.grad_error)]
            Z.append(z)
            Ze.append(ze + abs(z) * mpmath.mpf(10) ** (-wp + 5))
            dZ.append(g)
            dZe.append(ge)
        E, E_err = mpmath.mpf(0), mpmath.mpf(0)
        for y, z, ze, g, ge in zip(ch.outcomes, Z, Ze, dZ, dZe):
            require(z > 10 * ze, "channel", "an outcome with Z_out > 0 at omega = 0 (every "
                    "outcome possible)", f"{y}: Z = {mpmath.nstr(z, 5)} +- {mpmath.nstr(ze, 3)}")
            nrm = mpmath.fsum(c * gi * gi for c, gi in zip(C, g))
            E += nrm / z
            E_err += (2 * mpmath.fsum(c * abs(gi) * gei for c, gi, gei in zip(C, g, ge)) / z
                      + nrm * ze / (z * (z - ze)))
        require(E > 10 * E_err, "channel", "informative at q = 0 (E[g^2] > 0)", mpmath.nstr(E, 5))
        alpha = 1 / (2 * E)
        total = mpmath.fsum(Z)
        value = mpmath.nstr(alpha, dps)
        # the bar covers the printed value: its rounding to dps digits is added
        err = (E_err / (2 * E * (E - E_err)) + alpha * abs(total - 1)
               + alpha * mpmath.mpf(10) ** (-wp + 6) + abs(mpmath.mpf(value) - alpha))
        return Estimate(value, float(err),
                        f"Gaussian polytope masses and facet masses in mpmath at {wp} digits "
                        "(sliced Gauss-Legendre, rank <= 3); error = two node counts, "
                        "truncation and rounding, propagated", precision=dps,
                        extra={"E": mpmath.nstr(E, dps), "sum_Z": mpmath.nstr(total, dps),
                               "unrounded": mpmath.nstr(alpha, wp),
                               "error_unrounded": float(err - abs(mpmath.mpf(value) - alpha)),
                               "polytopes": len(cache), "seconds": time.perf_counter() - t0})
