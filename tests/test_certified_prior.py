"""Certified enclosure of mmse(Delta) of the Wishart prior (numerics.certified_prior, THEORY 1.1).

The reference values come from an independent route: numerics.wishart at 40 mpmath digits
(theta-substituted Gauss-Legendre, stable form), with rho and Delta passed as decimal strings so
that both routes see the same exact rationals.
"""

from __future__ import annotations

import functools
import json
import random
import sys
from fractions import Fraction

import mpmath
import pytest

flint = pytest.importorskip("flint")

from aim_sym.numerics import certified_prior as C  # noqa: E402
from aim_sym.numerics import wishart as W  # noqa: E402
from aim_sym.numerics.records import InputError  # noqa: E402

# (rho, Delta): one interval, two intervals (rho < 1, small Delta), rho > 1, large Delta
CASES = [("0.5", "1"), ("0.2", "0.01"), ("2", "0.1"), ("5", "100"), ("0.05", "0.0001")]


@functools.cache
def _ref(rho: str, delta: str) -> Fraction:
    with mpmath.workdps(45):
        return Fraction(mpmath.nstr(W.mmse(delta, rho=rho, dps=40), 42))


@functools.cache
def _enc(rho: str, delta: str, digits: int) -> C.Enclosure:
    return C.mmse_enclosure(rho=rho, delta=delta, digits=digits)


@pytest.mark.parametrize("rho,delta", CASES)
def test_enclosure_contains_40_digit_mmse(rho, delta):
    enc = _enc(rho, delta, 16)
    ref = _ref(rho, delta)
    lo, hi = Fraction(enc.lo), Fraction(enc.hi)
    assert lo <= ref <= hi
    # target: 16 significant digits, and never wider than 1e-15 in absolute terms
    assert enc.width <= 1e-15 and enc.width <= 2e-16 * float(ref) * 10
    assert enc.error == enc.width / 2 and "python-flint" in enc.method
    assert "Not certified" in enc.what_is_certified


def test_support_count_and_edges_match_wishart():
    enc = _enc("0.2", "0.01", 16)
    ref = W.support("0.2", "0.01", dps=40)
    assert len(enc.extra["support"]) == len(ref) == 2
    with mpmath.workdps(40):
        for (a, b), (ra, rb) in zip(enc.extra["support"], ref):
            assert abs(mpmath.mpf(a) - ra) < 1e-20 and abs(mpmath.mpf(b) - rb) < 1e-20
    # rho > 1: one interval
    assert len(_enc("2", "0.1", 16).extra["support"]) == 1


def test_perturbed_delta_is_excluded():
    """Delta off by one part in 10^12 must give an interval that misses the true value."""
    ref = _ref("0.5", "1")
    enc = C.mmse_enclosure(rho="0.5", delta=Fraction(1) + Fraction(1, 10**12), digits=18)
    assert not Fraction(enc.lo) <= ref <= Fraction(enc.hi)


def test_corrupted_integrand_is_excluded(monkeypatch):
    """A wrong W (relative error 1e-9) must move the interval off the true value."""
    orig = C._Cubic.w

    def wrong(self, x, boxes):
        return orig(self, x, boxes) * (1 + flint.arb(10) ** -9)

    monkeypatch.setattr(C._Cubic, "w", wrong)
    enc = C.mmse_enclosure(rho="2", delta="0.1", digits=16)
    ref = _ref("2", "0.1")
    assert not Fraction(enc.lo) <= ref <= Fraction(enc.hi)


@pytest.mark.parametrize("rho,delta", [("0.2", "0.01"), ("2", "0.1")])
def test_moments_contain_exact_values(rho, delta):
    """int mu = 1, int x mu = sqrt(rho), int x^2 mu = 1 + rho + Delta, all certified."""
    r, d = Fraction(rho), Fraction(delta)
    exact = [flint.arb(1), flint.arb(flint.fmpq(r.numerator, r.denominator)).sqrt(),
             flint.arb(flint.fmpq((1 + r + d).numerator, (1 + r + d).denominator))]
    for m, ex in zip(C.moment_enclosure(rho=rho, delta=delta, orders=(0, 1, 2), prec=53), exact):
        assert m.overlaps(ex) and float(m.rad()) < 1e-9


def test_integrand_balls_contain_pointwise_values():
    """Ball evaluations (analytic and not) contain the integrand at random points inside.

    Pointwise truth from mpmath polyroots: Im g = the largest |Im| of the cubic's roots.
    """
    rho, delta = Fraction(1, 5), Fraction(1, 100)
    old = flint.ctx.prec
    flint.ctx.prec = 80
    try:
        p = C._params(rho, delta)
        cub = C._Cubic(p, 80)
        f = C._integrand(cub, 3, C._density_bound(p.delta))
        s, m, dl = (float(1 / p.m.mid()), float(p.m.mid()), float(delta))
        rng = random.Random(7)
        checked = 0
        for _ in range(60):
            xm = rng.uniform(-0.25, 4.8)
            half = 10 ** rng.uniform(-4, -1)
            re, im = rng.choice([(2.0, 3**0.5), (1.0, 0.0)])
            ball = flint.acb(flint.arb(xm, re * half), flint.arb(0, im * half))
            analytic = im > 0
            val = f(ball, analytic)
            if not val.is_finite():
                continue
            for _ in range(3):
                x = xm + rng.uniform(-1, 1) * re * half
                roots = mpmath.polyroots([s * dl, -(s * x + dl), x + s - m, -1], extraprec=60)
                true = max(abs(mpmath.im(z)) for z in roots) ** 3
                assert val.real.overlaps(flint.arb(mpmath.nstr(true, 20), 1e-18)), (xm, half, x)
                checked += 1
        assert checked > 60
    finally:
        flint.ctx.prec = old


def test_density_bound_holds_on_a_grid():
    """mu_Delta <= 1/(pi sqrt(Delta)) (the proof in _density_bound), checked numerically."""
    for rho, delta in [(0.2, 0.01), (2.0, 0.1), (0.5, 1.0)]:
        for a, b in W.support(rho, delta):
            xs = [a + (b - a) * k / 200 for k in range(1, 200)]
            mu = W.density(xs, rho=rho, delta=delta)
            assert max(mu) <= 1 / (mpmath.pi * mpmath.sqrt(delta))


def test_discriminant_matches_sympy():
    import sympy as sp

    g, x = sp.symbols("g x")
    s, dl = sp.sqrt(sp.Rational(5)), sp.Rational(1, 100)  # rho = 1/5
    cubic = s * dl * g**3 - (s * x + dl) * g**2 + (x + s - 1 / s) * g - 1
    ref = sp.Poly(sp.discriminant(cubic, g), x).all_coeffs()[::-1]
    old = flint.ctx.prec
    flint.ctx.prec = 80
    try:
        ours = C._discriminant(C._params(Fraction(1, 5), Fraction(1, 100))).coeffs()
        assert len(ours) == len(ref) == 5
        for a, b in zip(ours, ref):
            assert abs(float(a.mid()) - float(b)) <= 1e-12 * max(1.0, abs(float(b)))
    finally:
        flint.ctx.prec = old


@pytest.mark.parametrize(
    "kw,name",
    [({"rho": 0, "delta": 1}, "rho"), ({"rho": -0.5, "delta": 1}, "rho"),
     ({"rho": 0.5, "delta": 0}, "delta"), ({"rho": 0.5, "delta": "abc"}, "delta"),
     ({"rho": 0.5, "delta": float("nan")}, "delta"), ({"rho": True, "delta": 1}, "rho"),
     ({"rho": 0.5, "delta": 1, "digits": 3}, "digits")],
)
def test_bad_input_names_the_parameter(kw, name):
    with pytest.raises(InputError, match=name):
        C.mmse_enclosure(**kw)


def test_missing_flint_is_a_clear_error(monkeypatch):
    from aim_sym.certified import NotCertifiable

    monkeypatch.setitem(sys.modules, "flint", None)
    with pytest.raises(NotCertifiable, match="python-flint"):
        C.mmse_enclosure(rho=0.5, delta=1)


def _cli(capsys, monkeypatch, *args) -> tuple[int, str, str]:
    """Run ``aim-sym mmse ARGS`` in-process through the real entry point (exit-code mapping)."""
    from aim_sym.cli import main

    monkeypatch.setattr(sys, "argv", ["aim-sym", "mmse", *args])
    code = 0
    try:
        main()
    except SystemExit as e:
        code = int(e.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_cli_certified_json_and_estimate(capsys, monkeypatch):
    code, out, err = _cli(capsys, monkeypatch, "--rho", "0.2", "--delta", "0.01", "--certified",
                          "--digits", "10", "--json")
    assert code == 0, err
    res = json.loads(out)
    lo, hi = (Fraction(v) for v in res["interval"])
    assert lo <= _ref("0.2", "0.01") <= hi and len(res["support"]) == 2
    for key in ("value", "error", "width", "method", "what_is_certified"):
        assert key in res
    code, out, err = _cli(capsys, monkeypatch, "--rho", "0.2", "--delta", "0.01", "--json")
    est = json.loads(out)
    v = Fraction(est["value"])
    assert code == 0 and lo - Fraction(1, 10**13) <= v <= hi + Fraction(1, 10**13)
    assert 0 <= est["error"] < 1e-12


@pytest.mark.parametrize("args,option", [(("--rho", "-1", "--delta", "1"), "--rho"),
                                         (("--rho", "0.5", "--delta", "0", "--certified"), "--delta"),
                                         (("--rho", "0.5", "--delta", "1", "--digits", "2"), "--digits")])
def test_cli_bad_values_exit_2(capsys, monkeypatch, args, option):
    code, out, err = _cli(capsys, monkeypatch, *args)
    assert code == 2 and option in err and len(err.strip().splitlines()) == 1


@pytest.mark.slow
@pytest.mark.parametrize("rho,delta", CASES + [("1", "0.001"), ("0.9", "0.0001"), ("5", "10000"),
                                               ("0.5", "0.00000001"), ("10000", "1"),
                                               ("0.001", "0.01")])
def test_30_digit_enclosures_and_extremes(rho, delta):
    """30 significant digits against the 40-digit reference; tiny and huge rho and Delta."""
    enc = C.mmse_enclosure(rho=rho, delta=delta, digits=30)
    ref = _ref(rho, delta)
    assert Fraction(enc.lo) <= ref <= Fraction(enc.hi)
    assert enc.width <= 1e-29 * float(ref)
