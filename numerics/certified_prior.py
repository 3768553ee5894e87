"""Certified enclosure of mmse(Delta) of the Wishart prior by ball arithmetic (THEORY 1.1).

mmse(Delta) = Delta - (4 pi^2/3) Delta^2 int mu_Delta(x)^3 dx = Delta - (4/(3 pi)) Delta^2 I,
I = int (Im g(x - i0))^3 dx, with g a root of the cubic of THEORY 1.1 (s = sqrt(kappa) = 1/sqrt(rho))

    P(g; x) = s Delta g^3 - (s x + Delta) g^2 + (x + s - 1/s) g - 1.

Every number below is a python-flint ball (arb/acb) and every step is a proof:

1. Inputs are exact rationals (a float is read as its shortest decimal, 0.1 = 1/10).
2. Real x where the cubic has a non-real pair are those where its discriminant D(x) < 0; D is a
   quartic in x with leading coefficient s^2 > 0 (:func:`_discriminant`). Its four roots are
   enclosed in disjoint discs, each holding exactly one root (:func:`_contracts`); discs centred
   on the real axis hold real roots (D is real). So {D < 0} is one or two open intervals.
3. mu_Delta > 0 forces g(x - i0) non-real, so supp mu_Delta is the closure of a non-empty union of
   those intervals; on each, g(x - i0) stays on one continuous root branch (the roots are distinct
   there), so an interval is wholly in the support or wholly out. With two candidates the choice
   is certified by the mass: the intervals in the support carry total mass exactly 1 and each
   candidate's upper-root mass is > 0, so at most one non-empty choice is consistent with the
   enclosures (:func:`_support`); if the enclosures cannot tell, ConvergenceError.
4. On each support interval the integrand is (Im g)^3 = (sqrt(W)/2)^3 with W = -(g1 - g2)^2 =
   4/(A r) - (Sigma - r)^2, r the real root of P, g1, g2 the pair, A = s Delta and Sigma the sum of
   the roots (:class:`_Cubic`). r is simple and stays away from the pair, also at the edges where
   g1, g2 coalesce; it is enclosed by a contraction test uniformly over a complex ball of x
   (:meth:`_Cubic.real_root`), and W is analytic where r is certified and Re W > 0. flint's
   rigorous Gauss-Legendre integrator (acb.integral: error bounds from |f| on Bernstein ellipses)
   does the rest, bisecting towards the edges.
5. Non-analytic calls (points and real sub-intervals) enclose the integrand by
   [0, sqrt(max(W, 0))/2]^3, and by [0, Delta^(-3/2)] if r is not certified (:func:`_density_bound`,
   a proof that mu <= 1/(pi sqrt(Delta))): the integrator multiplies such bounds by the length of
   the sliver next to an edge, so the cut-offs at the edges are bounded, not ignored. The path
   runs over [lo(a), hi(b)] of the edge balls; beyond the true edges the integrand is 0 (W <= 0)
   and is only ever bounded, so the edge balls' widths are covered.

Certified: the interval contains Delta - (4 pi^2/3) Delta^2 int mu^3 with mu_Delta defined by the
cubic of THEORY 1.1 for the exact rationals rho, Delta. Not certified (taken from the
literature/THEORY): that this formula is the MMSE of the matrix-denoising problem, the R-transform
of the Wishart spectrum, and the correctness of python-flint itself.
"""

from __future__ import annotations

import cmath
import math
from dataclasses import asdict, dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np

from .records import ConvergenceError, load_flint, require

__all__ = ["Enclosure", "mmse_enclosure", "moment_enclosure"]

_TRIES = 5  # radius updates tried by the contraction test


@dataclass(frozen=True)
class Enclosure:
    """A certified interval [lo, hi] (decimal strings rounded outward) for one quantity.

    ``mid``/``value`` is the ball's centre, ``width`` = hi - lo, ``error`` = width/2 (a rigorous
    bound on |value - exact|), ``method`` the route, ``what_is_certified`` the claim and its limits.
    """

    lo: str
    hi: str
    mid: str
    value: float
    width: float
    error: float
    method: str
    what_is_certified: str
    precision: int
    extra: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return asdict(self)

    @property
    def interval(self) -> tuple[str, str]:
        return (self.lo, self.hi)


# --------------------------------------------------------------------------------------------
# inputs
# --------------------------------------------------------------------------------------------


def _flint() -> Any:
    """python-flint (:func:`records.load_flint`: NotCertifiable with the install hint if absent)."""
    return load_flint()


def _exact(value: Any, name: str) -> Fraction:
    """``value`` as an exact positive rational; floats are read as their shortest decimal."""
    q = None
    if isinstance(value, bool):
        q = None
    elif isinstance(value, (int, Fraction)):
        q = Fraction(value)
    elif isinstance(value, (float, np.floating)):
        if math.isfinite(float(value)):
            q = Fraction(repr(float(value)))
    elif isinstance(value, str):
        try:
            q = Fraction(value.strip())
        except (ValueError, ZeroDivisionError):
            q = None
    require(q is not None and q > 0, name, "a finite real number > 0", value)
    return q


@dataclass(frozen=True)
class _Params:
    """Balls for s = 1/sqrt(rho), m = sqrt(rho), Delta at the current flint precision."""

    s: Any
    m: Any
    delta: Any
    rho: Any


def _params(rho: Fraction, delta: Fraction) -> _Params:
    flint = _flint()
    r = flint.arb(flint.fmpq(rho.numerator, rho.denominator))
    d = flint.arb(flint.fmpq(delta.numerator, delta.denominator))
    m = r.sqrt()
    return _Params(s=1 / m, m=m, delta=d, rho=r)


# --------------------------------------------------------------------------------------------
# the cubic and the contraction test
# --------------------------------------------------------------------------------------------


def _contracts(f: Any, df: Any, c: Any, r: Any) -> tuple[bool, Any]:
    """(True, r) if f has exactly one zero in the closed disc |g - c| <= r, and it is simple.

    Proof: with Y = 1/f'(c) rounded (any fixed non-zero number), N(g) = g - Y f(g). For g, g' in
    the disc, N(g) - N(g') = (1 - Y A)(g - g'), A the mean of f' on the segment [g', g], which lies
    in the disc; so |1 - Y A| <= L := sup over the disc's enclosing box of |1 - Y f'|. If L < 1 and
    |Y f(c)| + L r <= r, N maps the disc into itself and contracts, so it has exactly one fixed
    point there (Banach), i.e. f exactly one zero; |1 - Y f'| < 1 there gives f' != 0 (simple).
    ``f``, ``df`` may depend on parameter balls: the bounds then hold for every parameter value.
    On failure returns (False, a radius worth trying next, or None when none is).
    """
    flint = _flint()
    d = df(c).mid()
    if d == 0:
        return False, None
    y = (1 / d).mid()
    e = (y * f(c)).abs_upper()
    for _ in range(_TRIES):
        box = flint.acb(flint.arb(c.real, r), flint.arb(c.imag, r))
        lip = (1 - y * df(box)).abs_upper()
        if not lip < 1:
            return False, None
        if e + lip * r <= r:
            return True, r
        r = (2 * e / (1 - lip)).mid()
    return False, None


def _newton(f: Any, df: Any, c: Any, steps: int) -> Any:
    """Newton steps on exact midpoints (no claim; the contraction test certifies)."""
    for _ in range(steps):
        d = df(c).mid()
        if d == 0:
            break
        c = (c - f(c).mid() / d).mid()
    return c


def _cubic_roots_f(a: complex, b: complex, c: complex, d: complex) -> list[complex]:
    """The three roots of a g^3 + b g^2 + c g + d in double precision (Cardano, then Newton).

    Only a starting guess: every root used in a claim is certified by :func:`_contracts`.
    """
    B, C, E = b / a, c / a, d / a
    p = C - B * B / 3
    q = 2 * B**3 / 27 - B * C / 3 + E
    sq = cmath.sqrt(q * q / 4 + p**3 / 27)
    u3 = -q / 2 + sq if abs(-q / 2 + sq) >= abs(-q / 2 - sq) else -q / 2 - sq
    roots = []
    if u3 == 0:
        roots = [-B / 3] * 3
    else:
        u = u3 ** (1 / 3)
        for k in range(3):
            uk = u * _OMEGA[k]
            roots.append(uk - p / (3 * uk) - B / 3)
    out = []
    for g in roots:
        for _ in range(2):
            fg = ((g + B) * g + C) * g + E
            dg = (3 * g + 2 * B) * g + C
            if dg == 0 or not cmath.isfinite(fg / dg):
                break
            g = g - fg / dg
        out.append(g)
    return out


_OMEGA = (1.0, cmath.exp(2j * math.pi / 3), cmath.exp(-2j * math.pi / 3))


class _Cubic:
    """Certified enclosure of the real root r of P(.; x) for a ball x, and Im g from it.

    Write P = A (g - r)(g - g1)(g - g2), A = s Delta. Then g1 + g2 = Sigma - r with
    Sigma = (s x + Delta)/(s Delta) and g1 g2 = 1/(A r), so
        W := -(g1 - g2)^2 = 4/(A r) - (Sigma - r)^2.
    For real x with a non-real pair g1 = conj(g2), W = 4 (Im g1)^2 > 0 and Im g(x - i0) = sqrt(W)/2;
    where all roots are real W <= 0 and mu = 0. r is simple and far from the pair near the support
    edges (where g1, g2 coalesce), so it is certified on balls that reach close to the edges; the
    principal sqrt(W) is analytic wherever Re W > 0.
    """

    def __init__(self, p: _Params, prec: int):
        flint = _flint()
        self.p = p
        self.a3 = flint.acb(p.s * p.delta)
        self.a3x3 = 3 * self.a3
        self.smm = p.s - p.m
        self.p_f = (float(p.s.mid()), float(p.m.mid()), float(p.delta.mid()))
        self.steps = max(2, math.ceil(math.log2(max(prec, 53) / 48)) + 1)

    def _fns(self, x: Any) -> tuple[Any, Any]:
        """P(.; x) = s Delta g^3 - (s x + Delta) g^2 + (x + s - m) g - 1 and dP/dg (THEORY 1.1)."""
        a2 = -(self.p.s * x + self.p.delta)
        a1 = x + self.smm
        a3, a3x3, a2x2 = self.a3, self.a3x3, 2 * a2

        def f(g: Any) -> Any:
            return ((a3 * g + a2) * g + a1) * g - 1

        def df(g: Any) -> Any:
            return (a3x3 * g + a2x2) * g + a1

        return f, df

    def real_root(self, x: Any) -> tuple[Any, Any] | None:
        """Boxes centred on the real axis: (root at the centre of x, root over the ball x).

        With c the (Newton) root at the centre x_m, v = x - x_m and t ~ -P_x/P_g at (c, x_m), the
        root is sought as r = c + t v + delta. P is cubic in g and linear in x, so exactly
            P(c + u; x_m + v) = P0 + P_x v + (P_g + P_gx v) u + (P_gg/2 - s v) u^2 + A u^3,
        and with u = t v + delta the first-order term in v nearly cancels: the contraction test
        (:func:`_contracts`, in delta, uniformly in v over the ball) then works on much wider balls
        than a test on g itself. For real x the root is real (P is real and the disc for delta is
        centred on 0, c and t real); r is analytic on the ball (simple root). None if a test fails.
        """
        flint = _flint()
        xm = x.mid()
        s, m, delta = self.p_f
        xc = complex(xm)
        try:
            roots = _cubic_roots_f(s * delta, -(s * xc + delta), xc + s - m, -1.0)
        except (ZeroDivisionError, OverflowError):
            return None
        if not all(cmath.isfinite(z) for z in roots):
            return None
        iso = max(range(3), key=lambda i: min(abs(roots[i] - roots[j]) for j in range(3) if j != i))
        f_mid, df_mid = self._fns(xm)
        c = _newton(f_mid, df_mid, flint.acb(roots[iso].real), self.steps)
        c = flint.acb(c.real)
        p = self.p
        p0 = f_mid(c)
        pg = df_mid(c)
        if pg.mid() == 0:
            return None
        px = (1 - p.s * c) * c
        pgx = 1 - 2 * p.s * c
        pgg2 = 3 * self.a3 * c - (p.s * xm + p.delta)
        a3 = self.a3
        tiny = c.abs_upper() * flint.arb(2) ** (-flint.ctx.prec + 8)
        zero = flint.acb(0)

        def at_mid_f(dl: Any) -> Any:
            return p0 + ((a3 * dl + pgg2) * dl + pg) * dl

        def at_mid_df(dl: Any) -> Any:
            return (3 * a3 * dl + 2 * pgg2) * dl + pg

        e0 = (p0 / pg.mid()).abs_upper()
        ok, r0 = _contracts(at_mid_f, at_mid_df, zero, (4 * e0 + tiny).mid())
        if not ok:
            return None
        at_mid = flint.acb(flint.arb(c.real, r0), flint.arb(c.imag, r0))
        if x.real.rad() == 0 and x.imag.rad() == 0:
            return at_mid, at_mid, None
        t = (-px / pg.mid()).mid()
        v = x - xm
        # f(delta; v) = C0 + C1 v + C2 v^2 + C3 v^3, coefficients collected before v enters (so
        # the large cancelling terms at small Delta, where t ~ 1/Delta, cancel in the coefficients)
        lin1 = pg * t + px
        c2_0 = pgx * t + pgg2 * t * t
        c2_1 = 3 * a3 * t * t - 2 * p.s * t
        c3 = (a3 * t - p.s) * t * t
        c1_1 = pgx + 2 * pgg2 * t
        c1_2 = 3 * a3 * t - p.s

        def f(dl: Any) -> Any:
            c0 = p0 + ((a3 * dl + pgg2) * dl + pg) * dl
            c1 = lin1 + (c1_1 + c1_2 * dl) * dl
            c2 = c2_0 + c2_1 * dl
            return ((c3 * v + c2) * v + c1) * v + c0

        def df(dl: Any) -> Any:
            d0 = (3 * a3 * dl + 2 * pgg2) * dl + pg
            d1 = c1_1 + 2 * c1_2 * dl
            return (c2_1 * v + d1) * v + d0

        tv = t * v
        e = (f(zero) / pg.mid()).abs_upper()
        ok, r = _contracts(f, df, zero, (2 * e + r0).mid())
        if not ok:
            return None
        dl = flint.acb(flint.arb(0, r), flint.arb(0, r))
        return at_mid, c + tv + dl, (c, t, dl)

    def w(self, x: Any, boxes: tuple) -> Any:
        """Enclosure of W(x') = 4/(A r) - S^2 = -(g1 - g2)^2, S = Sigma - r = g1 + g2, over the ball x.

        Two valid enclosures, the narrower is returned. (i) Direct, with r = c + t v + delta and
        S = (Sigma_m - c) + (1/Delta - t) v - delta (Sigma = Sigma_m + v/Delta): r and Sigma both grow
        like x/Delta at small Delta and this form cancels them exactly. (ii) Centred: W(x') = W(x_m) +
        (average of the analytic total derivative W' over the segment, in the convex box of W'(ball))
        (x' - x_m), W' = -2 S S' - 4 r'/(A r^2), S' = 1/Delta - r', r' = -P_x/P_g.
        """
        at_mid, box, lin = boxes
        xm = x.mid()
        p = self.p
        a = self.a3
        sig_m = (p.s * xm + p.delta) / a
        w0 = 4 / (a * at_mid) - (sig_m - at_mid) ** 2
        if lin is None:
            return w0
        c, t, dl = lin
        v = x - xm
        inv_d = 1 / p.delta
        s_dir = (sig_m - c) + (inv_d - t) * v - dl
        w_dir = 4 / (a * box) - s_dir * s_dir
        sig = (p.s * x + p.delta) / a
        big_s = sig - box
        _, df = self._fns(x)
        r_prime = -((1 - p.s * box) * box) / df(box)
        dw = -2 * big_s * (inv_d - r_prime) - 4 * r_prime / (a * box * box)
        w_cen = w0 + dw * (x - xm)
        if not w_cen.is_finite():
            return w_dir
        if not w_dir.is_finite():
            return w_cen
        return w_dir if w_dir.real.rad() <= w_cen.real.rad() else w_cen

    def cauchy_bound(self, x: Any) -> Any:
        """Cauchy's bound 1 + max_k |a_k/a_3| on |g| for every root of P(.; x), x in the ball."""
        a2 = -(self.p.s * x + self.p.delta)
        a1 = x + self.smm
        big = max(((a2 / self.a3).abs_upper(), (a1 / self.a3).abs_upper(), (1 / self.a3).abs_upper()),
                  key=lambda v: float(v.mid()))  # exact upper bounds: comparing midpoints is safe
        return 1 + big


def _density_bound(delta: Any) -> Any:
    """Upper bound 1/sqrt(Delta) on Im g(x - i0) = pi mu_Delta(x) for real x.

    Proof (subordination, Biane): for Im z > 0, G(z) = G_S(w), w = z - Delta G(z). With
    J = int dmu_S(t)/|w - t|^2, Im G_S(w) = -Im(w) J, so Im w = Im z + Delta Im(w) J, i.e.
    Im w (1 - Delta J) = Im z > 0; as Im w >= Im z > 0, Delta J < 1. Cauchy-Schwarz:
    |G| <= int dmu_S/|w - t| <= J^(1/2) < Delta^(-1/2); the bound passes to the boundary values.
    Hence mu_Delta <= 1/(pi sqrt(Delta)) everywhere.
    """
    return 1 / delta.sqrt()


def _integrand(cub: _Cubic, k: int, bound: Any | None, weight: int = 0) -> Any:
    """f(x, analytic) for acb.integral: (sqrt(W)/2)^k = (Im g)^k (see :class:`_Cubic`).

    Analytic calls: the real root is certified on the ball and Re W > 0 there, so the principal
    sqrt is analytic; otherwise a non-finite ball. Non-analytic calls (flint makes them on real
    balls; the path is real): for real x the integrand is sqrt(W(x))/2 where W(x) > 0 and 0 where
    W(x) <= 0, so it lies in [0, sqrt(max(W, 0))/2]; if r is not certified, in [0, b] with b =
    ``bound`` (1/sqrt(Delta) on the support) or Cauchy's root bound (``bound`` None).
    ``weight`` j multiplies by x^j (moment checks).
    """
    flint = _flint()

    def f(x: Any, analytic: bool) -> Any:
        val = _f(x, analytic)
        return val * x**weight if weight else val

    def _f(x: Any, analytic: bool) -> Any:
        box = cub.real_root(x)
        if analytic:
            if box is None:
                return flint.acb("nan")
            w = cub.w(x, box)
            if not w.real > 0:
                return flint.acb("nan")
            return (w.sqrt() / 2) ** k
        w = cub.w(x, box).real if box is not None else None  # real x: W(x) is real
        if w is None or not w.is_finite():
            hi = cub.cauchy_bound(x) if bound is None else bound
            hi = hi**k
            return flint.acb(flint.arb(hi / 2, hi / 2))
        if w > 0:
            return flint.acb((w.sqrt() / 2) ** k)
        if w <= 0:
            return flint.acb(0)
        hi = (w.upper().sqrt() / 2) ** k
        return flint.acb(flint.arb(hi / 2, hi / 2))

    return f


# --------------------------------------------------------------------------------------------
# support
# --------------------------------------------------------------------------------------------


def _discriminant(p: _Params) -> Any:
    """D(x) = discriminant of P(.; x) as an arb_poly in x (degree 4, leading coefficient s^2).

    For a g^3 + b g^2 + c g + e: 18 a b c e - 4 b^3 e + b^2 c^2 - 4 a c^3 - 27 a^2 e^2.
    """
    flint = _flint()
    a = flint.arb_poly([p.s * p.delta])
    b = flint.arb_poly([-p.delta, -p.s])
    c = flint.arb_poly([p.s - p.m, 1])
    e = flint.arb_poly([-1])
    return 18 * a * b * c * e - 4 * b * b * b * e + b * b * c * c - 4 * a * c * c * c - 27 * a * a * e * e


def _real_roots_D(p: _Params) -> list:
    """Real roots of D as sorted arb balls; all four roots are certified in disjoint discs."""
    flint = _flint()
    d_poly = flint.acb_poly(_discriminant(p))
    dd_poly = d_poly.derivative()
    coeffs = [float(c.mid()) for c in _discriminant(p).coeffs()][::-1]
    approx = np.roots(coeffs)
    if len(approx) != 4 or not np.all(np.isfinite(approx)):
        raise ConvergenceError("roots of the discriminant", last_iterate=approx, residual=None)
    discs = []
    steps = max(2, math.ceil(math.log2(flint.ctx.prec / 40)) + 2)
    for z in approx:
        # a nearly real approximation is tried as a real root first, then as a complex one
        tries = (True, False) if abs(z.imag) <= 1e-4 * max(1.0, abs(z)) else (False,)
        for real in tries:
            c = flint.acb(float(z.real), 0.0 if real else float(z.imag))
            c = _newton(d_poly, dd_poly, c, steps)
            if real:
                c = flint.acb(c.real)
            r = ((d_poly(c).mid() / dd_poly(c).mid()).abs_upper() * 4).mid()
            r = (r + c.abs_upper() * flint.arb(2) ** (-flint.ctx.prec + 8)).mid()
            ok, r = _contracts(d_poly, dd_poly, c, r)
            if ok and (real or abs(c.imag) > r):
                break
        else:
            raise ConvergenceError(
                "could not isolate the support edges (a double root: two intervals touching?)",
                last_iterate=complex(z),
                residual=None,
            )
        discs.append((c, r, real))
    for i in range(4):
        for j in range(i):
            ci, ri, _ = discs[i]
            cj, rj, _ = discs[j]
            if not (ci - cj).abs_lower() > ri + rj:
                raise ConvergenceError("overlapping discriminant root discs", last_iterate=None)
    # a disc centred on the real axis holding exactly one root of a real polynomial holds a real root
    reals = sorted((flint.arb(c.real.mid(), r) for c, r, real in discs if real), key=lambda b: b.mid())
    return reals


# --------------------------------------------------------------------------------------------
# integration
# --------------------------------------------------------------------------------------------


def _integrate(
    cub: _Cubic, k: int, bound: Any | None, lo: Any, hi: Any, tol: Any, rel_tol: Any = None,
    eval_limit: int = 10**6, weight: int = 0,
) -> Any:
    """Rigorous enclosure of int_lo^hi (Im g)^k dx over the real segment (lo, hi exact).

    ``tol``/``rel_tol`` only steer the work (flint's goals); the returned ball is rigorous anyway.
    """
    flint = _flint()
    f = _integrand(cub, k, bound, weight)
    val = flint.acb.integral(
        f, flint.acb(lo), flint.acb(hi), abs_tol=tol, rel_tol=tol if rel_tol is None else rel_tol,
        eval_limit=eval_limit, depth_limit=4 * flint.ctx.prec,
    )
    if not val.is_finite():
        raise ConvergenceError("certified integral did not close", last_iterate=val)
    return val.real


def _candidates(p: _Params) -> list[tuple[Any, Any]]:
    """The intervals where D < 0 (edge balls)."""
    roots = _real_roots_D(p)
    if len(roots) not in (2, 4):
        raise ConvergenceError("no interval with a non-real root pair", last_iterate=roots)
    return [(roots[i], roots[i + 1]) for i in range(0, len(roots), 2)]


def _support(p: _Params, cub: _Cubic) -> tuple[list, list]:
    """Support intervals (edge balls) and, when there was a choice, the masses that decided it."""
    flint = _flint()
    cands = _candidates(p)
    if len(cands) == 1:
        return cands, []
    choices = [[0], [1], [0, 1]]
    old = flint.ctx.prec
    masses: list = []
    try:
        for prec, bits in ((64, 16), (80, 32), (112, 56)):
            flint.ctx.prec = max(prec, old)
            tol = flint.arb(2) ** -bits
            # capped work: a capped integral is still a rigorous (wider) ball
            masses = [
                _integrate(cub, 1, None, a.lower(), b.upper(), tol, tol, eval_limit=6000)
                / flint.arb.pi()
                for a, b in cands
            ]
            # the support T is the one non-empty choice whose masses sum to exactly 1: drop every
            # choice whose enclosed sum excludes 1
            fits = [ch for ch in choices if sum((masses[i] for i in ch), flint.arb(0)).contains(1)]
            if len(fits) == 1:
                return [cands[i] for i in fits[0]], masses
    finally:
        flint.ctx.prec = old
    raise ConvergenceError("could not decide the support by its mass", last_iterate=masses)


def _digits_ok(digits: Any) -> int:
    require(
        isinstance(digits, (int, np.integer)) and not isinstance(digits, bool) and 5 <= digits <= 200,
        "digits",
        "an integer in [5, 200]",
        digits,
    )
    return int(digits)


def _decimal(x: Any, decimals: int, up: bool) -> str:
    """x rounded outward (down if not ``up``) to ``decimals`` decimals, as a string."""
    flint = _flint()
    v = x * flint.fmpz(10) ** decimals
    n = (v.ceil() if up else v.floor()).unique_fmpz()
    if n is None:
        raise ConvergenceError("precision too low to round the endpoints", last_iterate=x)
    n = int(n)
    sign = "-" if n < 0 else ""
    t = str(abs(n)).rjust(decimals + 1, "0")
    return f"{sign}{t[:-decimals]}.{t[-decimals:]}"


def mmse_enclosure(*, rho: Any, delta: Any, digits: int = 20) -> Enclosure:
    """Certified [lo, hi] containing mmse(Delta) = Delta - (4 pi^2/3) Delta^2 int mu^3 (THEORY 1.1).

    ``rho``, ``delta``: exact rationals (int, Fraction, decimal string; a float means its shortest
    decimal, 0.1 = 1/10). ``digits``: significant digits aimed at and printed (the endpoints are
    rounded outward; the reached width is in the record). The module docstring has the proof
    outline and says what is and is not certified.
    """
    rho_q, delta_q = _exact(rho, "rho"), _exact(delta, "delta")
    digits = _digits_ok(digits)
    flint = _flint()
    d_f = float(delta_q)
    old = flint.ctx.prec
    try:
        # mmse = Delta - c Delta^2 I cancels by a factor ~ Delta/mmse; m_est (Delta -> 0 and
        # Delta -> infinity limits of THEORY 1.1, within a factor ~3) only steers precision and goals
        r_f = float(rho_q)
        m_est = min(d_f * (2 * r_f - r_f * r_f if r_f <= 1 else 1.0), 1.0) / 2
        cancel = max(1.0, d_f / m_est)
        extra = max(math.log10(cancel), 2 * math.log10(max(1.0, d_f)))
        flint.ctx.prec = int((digits + extra + 8) * 3.33) + 24
        p = _params(rho_q, delta_q)
        cub = _Cubic(p, flint.ctx.prec)
        support, masses = _support(p, cub)
        # aim the integral's error at 10^-(digits+4) mmse/Delta^2 per leaf (flint's goals are per
        # sub-interval; I ~ Delta/Delta^2, so the relative goal carries the cancellation factor)
        rel = flint.arb(10) ** (-(digits + 4))
        tol = rel * m_est / (d_f * d_f)
        bound = _density_bound(p.delta)
        total = flint.arb(0)
        for a, b in support:
            total += _integrate(cub, 3, bound, a.lower(), b.upper(), tol, rel / cancel)
        val = p.delta - 4 * p.delta * p.delta * total / (3 * flint.arb.pi())
        if not (val.is_finite() and val > 0):
            raise ConvergenceError("mmse enclosure not positive and finite", last_iterate=val)
        decimals = max(digits, digits - 1 - math.floor(math.log10(float(val.mid()))))
        lo, hi = _decimal(val.lower(), decimals, False), _decimal(val.upper(), decimals, True)
        width = float(Fraction(hi) - Fraction(lo))
        prec = flint.ctx.prec
        mid = val.mid().str(digits + 3, radius=False)
        radius = float(val.rad())
        sup = [[a.str(30, radius=False), b.str(30, radius=False)] for a, b in support]
        mass_s = [m.str(10) for m in masses]
    finally:
        flint.ctx.prec = old
    return Enclosure(
        lo=lo,
        hi=hi,
        mid=mid,
        value=float(Fraction(mid)),
        width=width,
        error=width / 2,
        method=(
            "ball arithmetic (python-flint arb/acb): certified discriminant roots for the support, "
            "contraction-certified real root of the cubic, W = -(g1 - g2)^2, rigorous Gauss-Legendre "
            "(acb.integral) of (sqrt(W)/2)^3 with edge slivers bounded"
        ),
        what_is_certified=(
            "[lo, hi] contains Delta - (4 pi^2/3) Delta^2 int mu_Delta(x)^3 dx for the exact rationals "
            f"rho = {rho_q}, Delta = {delta_q}, with mu_Delta = Im g(x - i0)/pi and g the Stieltjes "
            "root of the cubic of THEORY 1.1. Not certified: that this formula is the Bayes-optimal "
            "MMSE of the denoising problem and that the cubic is the free convolution of the Wishart "
            "spectrum with the semicircle (both from the literature), and python-flint itself."
        ),
        precision=prec,
        extra={
            "rho": str(rho_q),
            "delta": str(delta_q),
            "ball_radius": radius,
            "support": sup,
            "support_masses": mass_s,
        },
    )


def moment_enclosure(*, rho: Any, delta: Any, orders: tuple = (0, 1, 2), prec: int = 80) -> list:
    """Certified enclosures (arb) of int x^j mu_Delta(x) dx, j in ``orders``, over the support.

    A check of the whole chain (support, roots, integrator) against exact values: 1, sqrt(rho)
    and 1 + rho + Delta for j = 0, 1, 2 (free cumulants add; THEORY 1.1).
    """
    rho_q, delta_q = _exact(rho, "rho"), _exact(delta, "delta")
    require(all(j in (0, 1, 2, 3) for j in orders), "orders", "a tuple of 0, 1, 2, 3", orders)
    flint = _flint()
    old = flint.ctx.prec
    try:
        flint.ctx.prec = int(prec)
        p = _params(rho_q, delta_q)
        cub = _Cubic(p, flint.ctx.prec)
        support, _ = _support(p, cub)
        flint.ctx.prec = int(prec)
        bound = _density_bound(p.delta)
        tol = flint.arb(2) ** (-int(prec) + 16)
        out = []
        for j in orders:
            total = flint.arb(0)
            for a, b in support:
                total += _integrate(cub, 1, bound, a.lower(), b.upper(), tol, weight=j)
            out.append(total / flint.arb.pi())
        return out
    finally:
        flint.ctx.prec = old
