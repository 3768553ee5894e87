"""Certified enclosures of closed-form thresholds with interval arithmetic (python-flint arb).

A sympy expression built from integers, rationals, pi, E and the elementary functions below is
evaluated in ball arithmetic; the result is a ball guaranteed to contain the exact value, and
:func:`enclosure` prints it as a pair of decimal strings rounded outward. Needs the optional extra
``aim-sym[certified]``. Certified: closed forms (small-width weak recovery of discrete and
Gaussian channels, perfect recovery). Not certified here: anything computed by quadrature (SE
fixed points, SMI thresholds); mmse(Delta) of the Wishart prior has its own certified route,
:mod:`aim_sym.numerics.certified_prior`.
"""

from __future__ import annotations

import sympy as sp

from .numerics.records import NotCertifiable, load_flint

__all__ = ["NotCertifiable", "to_arb", "enclosure"]

_FUNCS = {
    sp.asin: "asin", sp.acos: "acos", sp.atan: "atan", sp.sin: "sin", sp.cos: "cos",
    sp.exp: "exp", sp.log: "log", sp.sqrt: "sqrt",
}


def to_arb(expr: sp.Expr):
    """Evaluate ``expr`` as a flint arb ball at the current flint precision."""
    flint = load_flint()
    arb = flint.arb
    e = sp.sympify(expr)
    if e.is_Integer:
        return arb(int(e))
    if e.is_Rational:
        return arb(int(e.p)) / arb(int(e.q))
    if e is sp.pi:
        return arb.pi()
    if e is sp.E:
        return arb(1).exp()
    if isinstance(e, sp.Float):
        raise NotCertifiable(f"floating-point constant {e} in a certified expression")
    if e.is_Add:
        out = arb(0)
        for a in e.args:
            out += to_arb(a)
        return out
    if e.is_Mul:
        out = arb(1)
        for a in e.args:
            out *= to_arb(a)
        return out
    if e.is_Pow:
        base, ex = e.args
        b = to_arb(base)
        if ex.is_Integer:
            return b ** int(ex)
        if ex == sp.Rational(1, 2):
            return b.sqrt()
        if ex == -sp.Rational(1, 2):
            return 1 / b.sqrt()
        return (to_arb(ex) * b.log()).exp()
    if isinstance(e, sp.Piecewise):
        for val, cond in e.args:
            c = sp.simplify(cond)
            if c is sp.true:
                return to_arb(val)
            if c is not sp.false:
                raise NotCertifiable(f"undecided condition {cond}")
        raise NotCertifiable("no branch of the Piecewise applies")
    for f, name in _FUNCS.items():
        if isinstance(e, f) or e.func == f:
            return getattr(to_arb(e.args[0]), name)()
    raise NotCertifiable(f"no certified evaluation for {type(e).__name__}: {e}")


def enclosure(expr: sp.Expr, *, digits: int = 30) -> tuple[str, str, float]:
    """[lo, hi] as decimal strings with ``digits`` decimals, rounded outward, containing expr."""
    flint = load_flint()
    old = flint.ctx.prec
    try:
        flint.ctx.prec = int(digits * 3.33) + 64
        x = to_arb(expr)
        if not x.is_finite():
            raise NotCertifiable(f"ball is not finite: {x}")
        scale = flint.fmpz(10) ** digits
        lo = (x.lower() * scale).floor().unique_fmpz()
        hi = (x.upper() * scale).ceil().unique_fmpz()
        if lo is None or hi is None:
            raise NotCertifiable("precision too low to round the endpoints")
        return _dec(int(lo), digits), _dec(int(hi), digits), float(x.rad())
    finally:
        flint.ctx.prec = old


def _dec(n: int, digits: int) -> str:
    sign = "-" if n < 0 else ""
    s = str(abs(n)).rjust(digits + 1, "0")
    return f"{sign}{s[:-digits]}.{s[-digits:]}"
