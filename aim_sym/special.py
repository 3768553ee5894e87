"""Special functions that Gaussian integrals of channels produce, with exact derivatives.

``Phi`` is the standard normal CDF written through erfc (accurate in the lower tail);
``Phi2(a, b, r)`` is the bivariate standard normal CDF P(X <= a, Y <= b) at correlation r, a
sympy Function whose partial derivatives are known in closed form, so that g_out and its
Jacobian are derived exactly. Numeric implementations for numpy and mpmath live in the numeric
leaf module :mod:`aim_sym.numerics.special_functions` (lambdify's modules in :mod:`aim_sym.codegen`).
"""

from __future__ import annotations

import mpmath
import sympy as sp

from .numerics.special_functions import mp_phi2


class Phi(sp.Function):
    """Standard normal CDF Phi(x) = erfc(-x / sqrt 2) / 2, kept as one function so that no
    rewriting 1 - erfc(.) loses the lower tail in floating point."""

    nargs = 1

    @classmethod
    def eval(cls, x):
        if x.is_zero:
            return sp.Rational(1, 2)
        if x is sp.oo:
            return sp.Integer(1)
        if x is sp.S.NegativeInfinity:
            return sp.Integer(0)
        return None

    def fdiff(self, argindex=1):
        if argindex != 1:
            raise sp.ArgumentIndexError(self, argindex)
        return phi(self.args[0])

    def _eval_rewrite_as_erfc(self, x, **kwargs):
        return sp.erfc(-x / sp.sqrt(2)) / 2

    def _eval_evalf(self, prec):
        return self.rewrite(sp.erfc)._eval_evalf(prec)

    def _latex(self, printer, exp=None):
        base = rf"\Phi\left({printer._print(self.args[0])}\right)"
        return rf"{base}^{{{exp}}}" if exp else base


def phi(x: sp.Expr) -> sp.Expr:
    """Standard normal density."""
    return sp.exp(-(x**2) / 2) / sp.sqrt(2 * sp.pi)


class Phi2(sp.Function):
    """Bivariate standard normal CDF Phi_2(a, b; r) = P(X <= a, Y <= b), corr(X, Y) = r."""

    nargs = 3

    def _eval_evalf(self, prec):
        if not all(x.is_number for x in self.args):
            return None
        dps = mpmath.libmp.prec_to_dps(prec)
        with mpmath.workdps(dps + 10):
            a, b, r = (mpmath.mpf(str(sp.N(x, dps + 10))) for x in self.args)
            return sp.Float(mp_phi2(a, b, r), dps)

    @classmethod
    def eval(cls, a, b, r):
        if a.is_zero and b.is_zero:
            # Sheppard's formula for the orthant probability
            return sp.Rational(1, 4) + sp.asin(r) / (2 * sp.pi)
        if r.is_zero:
            return Phi(a) * Phi(b)
        return None

    def fdiff(self, argindex=1):
        a, b, r = self.args
        s = sp.sqrt(1 - r**2)
        if argindex == 1:
            return phi(a) * Phi((b - r * a) / s)
        if argindex == 2:
            return phi(b) * Phi((a - r * b) / s)
        if argindex == 3:
            return sp.exp(-(a**2 - 2 * r * a * b + b**2) / (2 * s**2)) / (2 * sp.pi * s)
        raise sp.ArgumentIndexError(self, argindex)

    def _latex(self, printer, exp=None):
        a, b, r = (printer._print(x) for x in self.args)
        base = rf"\Phi_2\left({a}, {b}; {r}\right)"
        return rf"{base}^{{{exp}}}" if exp else base
