"""Tests of numerics.wishart: spectrum, MMSE and mutual information of Wishart denoising
(THEORY 1.1)."""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
from aim_sym.numerics import wishart as W
from aim_sym.numerics.records import Estimate, InputError

ONE_INTERVAL = [(0.5, 1.0), (2.0, 0.1), (5.0, 1e4), (1.0, 1e-3)]
TWO_INTERVALS = [(0.2, 0.01), (0.05, 1e-4)]


def _limit_small_delta(rho: float) -> float:
    # parameter counting: 2 rho - rho^2 for rho <= 1, full rank (1) for rho >= 1
    return 2 * rho - rho**2 if rho <= 1 else 1.0


def test_support_counts_and_density_sign():
    assert len(W.support(0.2, 0.01)) == 2
    assert len(W.support(0.5, 1e-4)) == 2
    assert len(W.support(2.0, 0.1)) == 1
    assert len(W.support(0.2, 1.0)) == 1
    for rho, delta in ONE_INTERVAL + TWO_INTERVALS:
        ivs = W.support(rho, delta)
        for a, b in ivs:
            inner = np.linspace(a, b, 9)[1:-1]
            assert np.all(W.density(inner, rho=rho, delta=delta) > 0)
        outside = [ivs[0][0] - 1e-3, ivs[-1][1] + 1e-3]
        if len(ivs) == 2:
            outside.append(0.5 * (ivs[0][1] + ivs[1][0]))
        g = W.stieltjes(np.array(outside), rho=rho, delta=delta)
        assert np.all(g.imag == 0)
        assert np.all(W.density(np.array(outside), rho=rho, delta=delta) == 0)


@pytest.mark.parametrize("rho,delta", ONE_INTERVAL + TWO_INTERVALS + [(0.9, 1e-4), (0.3, 3.0)])
def test_moments(rho, delta):
    r = W._integrals(rho, delta, None)
    assert r["mass"] == pytest.approx(1.0, abs=1e-14)
    assert r["mean"] == pytest.approx(math.sqrt(rho), rel=1e-13, abs=1e-13)
    assert r["m2"] == pytest.approx(1 + rho + delta, rel=1e-13)


@pytest.mark.parametrize("rho,delta", [(0.2, 0.01), (0.5, 1.0), (2.0, 0.1), (0.05, 0.3)])
def test_mmse_stable_equals_literal(rho, delta):
    assert W.mmse(delta, rho=rho) == pytest.approx(W.mmse_literal(delta, rho=rho), rel=1e-13)


@pytest.mark.parametrize("rho,delta", [(0.2, 0.01), (0.05, 1e-4), (0.5, 1.0), (5.0, 1e4)])
def test_double_vs_mpmath(rho, delta):
    est = W.mmse_estimate(delta, rho=rho, dps=40)
    assert isinstance(est, Estimate) and est.precision == 40
    assert est.error < 1e-30
    assert abs(W.mmse(delta, rho=rho) - est.value) <= 1e-12 * est.value
    mi = W.mutual_information_estimate(delta, rho=rho, dps=40)
    assert mi.error < 1e-30
    assert abs(W.mutual_information(delta, rho=rho) - mi.value) <= 1e-12 * mi.value
    # the stable mutual information equals the literal Sigma/2 - log(Delta)/4 + 1/8
    with mpmath.workdps(40):
        sigma = W.log_energy(delta, rho=rho, dps=40)
        literal = sigma / 2 - mpmath.log(mpmath.mpf(delta)) / 4 + mpmath.mpf(1) / 8
        assert abs(literal - mi.value) < mpmath.mpf(10) ** -35
        lit = W.mmse_literal(delta, rho=rho, dps=40)
        assert abs(lit - est.value) < mpmath.mpf(10) ** -34


def test_double_estimate_small():
    est = W.mmse_estimate(0.3, rho=0.7)
    assert est.error < 1e-14 and est.precision == 16


def test_i_mmse_identity():
    """dI/d(1/Delta) = mmse/4 by an 8th-order central difference in s = 1/Delta at dps 40."""
    rho, s0 = 0.5, mpmath.mpf(2)
    with mpmath.workdps(40):
        h = mpmath.mpf("1e-3")
        coef = {1: mpmath.mpf(4) / 5, 2: -mpmath.mpf(1) / 5, 3: mpmath.mpf(4) / 105,
                4: -mpmath.mpf(1) / 280}
        deriv = mpmath.mpf(0)
        for k, c in coef.items():
            ip = W.mutual_information(1 / (s0 + k * h), rho=rho, dps=40)
            im = W.mutual_information(1 / (s0 - k * h), rho=rho, dps=40)
            deriv += c * (ip - im)
        deriv /= h
        target = W.mmse(1 / s0, rho=rho, dps=40) / 4
        assert abs(deriv - target) < mpmath.mpf(10) ** -18


@pytest.mark.parametrize("rho,delta", [(0.2, 0.05), (2.0, 0.5)])
def test_log_potential_against_quadrature(rho, delta):
    ivs = W.support(rho, delta)
    xs = [0.5 * (ivs[0][0] + ivs[0][1]), ivs[-1][1] + 0.7, ivs[0][0] - 0.3]
    if len(ivs) == 2:
        xs.append(0.5 * (ivs[0][1] + ivs[1][0]))
    with mpmath.workdps(15):
        for x in xs:
            def f(y, x=x):
                return mpmath.log(abs(x - y)) * float(W.density(float(y), rho=rho, delta=delta))

            total = mpmath.mpf(0)
            for a, b in ivs:
                pts = [a, x, b] if a < x < b else [a, b]
                total += mpmath.quad(f, pts)
            assert float(W.log_potential(x, rho=rho, delta=delta)) == pytest.approx(
                float(total), abs=1e-9
            )


def test_log_potential_mp_matches_double():
    x = 1.3
    v = W.log_potential(x, rho=0.4, delta=0.2, dps=30)
    assert float(v) == pytest.approx(float(W.log_potential(x, rho=0.4, delta=0.2)), abs=1e-13)


@pytest.mark.parametrize("rho", [0.2, 0.7, 1.5, 4.0])
def test_small_delta_limit(rho):
    lim = _limit_small_delta(rho)
    d1, d2 = 1e-4, 1e-6
    e1 = abs(W.mmse(d1, rho=rho) / d1 - lim)
    e2 = abs(W.mmse(d2, rho=rho) / d2 - lim)
    assert e2 < 3e-5
    assert e2 < e1


def test_large_delta_limit():
    for rho in (0.1, 1.0, 3.0):
        for d in (1e4, 1e6):
            assert abs(W.mmse(d, rho=rho) - 1) < 1.1 / d
    # Gaussian-like: mmse = Delta/(1+Delta) - O(1/Delta^2)
    assert W.mmse(1e4, rho=0.5) == pytest.approx(1e4 / (1 + 1e4), abs=1e-7)


def test_stieltjes_matches_quadrature_outside_support():
    rho, delta = 0.2, 0.01
    x, w, g = W._nodes_f(rho, delta, 24, 16.0)
    mu = g.imag / math.pi
    ivs = W.support(rho, delta)
    for z in (ivs[0][0] - 0.5, 0.5 * (ivs[0][1] + ivs[1][0]), ivs[1][1] + 2.0):
        ref = np.sum(w * mu / (z - x))
        assert W.stieltjes(z, rho=rho, delta=delta).real == pytest.approx(ref, rel=1e-12)


def test_rie_denoiser_and_mp_density():
    rho, delta = 0.5, 0.3
    xs = np.array([-0.5, 0.2, 1.0, 2.5, 6.0])
    xi = W.rie_denoiser(xs, rho=rho, delta=delta)
    g = W.stieltjes(xs, rho=rho, delta=delta)
    assert np.allclose(xi, xs - 2 * delta * g.real, rtol=0, atol=1e-15)
    for x in (0.2, 1.0, 2.5):
        d_mp = W.density(x, rho=rho, delta=delta, dps=30)
        assert float(d_mp) == pytest.approx(float(W.density(x, rho=rho, delta=delta)), rel=1e-13)
        r_mp = W.rie_denoiser(x, rho=rho, delta=delta, dps=30)
        assert float(r_mp) == pytest.approx(float(W.rie_denoiser(x, rho=rho, delta=delta)))
    ivs = W.support(rho, delta, dps=30)
    assert isinstance(ivs[0][0], mpmath.mpf)


def test_array_delta():
    deltas = np.array([[0.01, 0.1], [1.0, 10.0]])
    out = W.mmse(deltas, rho=0.3)
    assert out.shape == deltas.shape
    assert out[1, 0] == W.mmse(1.0, rho=0.3)
    assert np.all(np.diff(W.mmse(np.logspace(-3, 3, 13), rho=0.3)) > 0)


def test_near_merging_of_intervals_is_continuous():
    rho, lo, hi = 0.2, 0.1, 1.0
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if len(W.support(rho, mid)) == 2 else (lo, mid)
    below, above = W.mmse(lo, rho=rho), W.mmse(hi, rho=rho)
    assert abs(above - below) < 1e-13
    for d in (lo * (1 - 1e-6), hi * (1 + 1e-6)):
        est = W.mmse_estimate(d, rho=rho)
        assert est.error < 1e-13


@pytest.mark.parametrize(
    "kwargs,name",
    [
        ({"delta": 0.1, "rho": 0.0}, "rho"),
        ({"delta": 0.1, "rho": -1.0}, "rho"),
        ({"delta": 0.1, "rho": float("nan")}, "rho"),
        ({"delta": 0.0, "rho": 0.5}, "delta"),
        ({"delta": -2.0, "rho": 0.5}, "delta"),
        ({"delta": float("inf"), "rho": 0.5}, "delta"),
    ],
)
def test_bad_input(kwargs, name):
    with pytest.raises(InputError, match=name):
        W.mmse(kwargs["delta"], rho=kwargs["rho"])
    with pytest.raises(InputError, match=name):
        W.mutual_information(kwargs["delta"], rho=kwargs["rho"], dps=30)
    with pytest.raises(InputError, match=name):
        W.support(kwargs["rho"], kwargs["delta"])
    with pytest.raises(InputError, match=name):
        W.density(1.0, rho=kwargs["rho"], delta=kwargs["delta"])


def test_bad_dps():
    with pytest.raises(InputError, match="dps"):
        W.mmse(0.1, rho=0.5, dps=2)


@pytest.mark.parametrize("rho,delta", [(0.05, 1e-4), (0.2, 0.01), (0.5, 1.0), (2.0, 1e3)])
def test_closed_form_root_matches_mpmath(rho, delta):
    # the inside root (closed form, eigenvalue fallback, Newton) against mpmath's polyroots of
    # the same cubic at 30 digits, at nodes off the edges; where the closed form alone (before
    # Newton) reports itself reliable it starts Newton close to the root
    x, _, _ = W._nodes_f(rho, delta, 16, 12.0)
    x = x[:: max(1, x.size // 40)]
    s, m = 1 / math.sqrt(rho), math.sqrt(rho)
    g = W._inside_roots_f(x, s, m, delta)
    g0, ok = W._complex_root_f(x, s, delta)
    assert ok.mean() > 0.5
    with mpmath.workdps(30):
        for xi, gi, g0i, oki in zip(x, g, g0, ok):
            coeffs = [s * delta, -(s * xi + delta), xi + s - 1 / s, -1]
            ref = complex(max(mpmath.polyroots(coeffs, maxsteps=200, extraprec=200),
                              key=lambda r: mpmath.im(r)))
            if ref.imag > 1e-3 * abs(ref):
                assert abs(gi - ref) <= 1e-12 * abs(ref)
                if oki:
                    assert abs(g0i - ref) <= 1e-6 * abs(ref)


def test_integrals_many_is_the_single_rule():
    # one vectorised pass over Deltas with one and two support intervals gives each Delta's
    # own integrals (and its number of intervals)
    rho = 0.2
    deltas = [1e-4, 0.01, 0.1, 0.5, 3.0, 1e3]
    for coarse in (False, True):
        rows = W.integrals_many(deltas, rho=rho, coarse=coarse)
        for d, r in zip(deltas, rows):
            one = W._integrals(rho, d, None, coarse=coarse)
            for key in ("mass", "mean", "m2", "mmse", "mi", "sigma"):
                assert r[key] == pytest.approx(one[key], rel=1e-13, abs=1e-15)
            assert r["intervals"] == len(W.support(rho, d))
    assert {len(W.support(rho, d)) for d in deltas} == {1, 2}
    assert W.integrals_many([], rho=rho) == []
    with pytest.raises(InputError, match="delta"):
        W.integrals_many([0.1, -1.0], rho=rho)


def test_tiny_rho_is_refused_in_double_precision():
    # at rho = 1e-12 the double-precision route printed mmse(0.01) = -3.3e-4 (true: 2e-14):
    # below RHO_MIN_DOUBLE it is refused, naming rho and the way out (the mpmath route)
    for call in (lambda: W.mmse_estimate(0.01, rho=1e-12), lambda: W.mmse(1.0, rho=1e-8),
                 lambda: W.mutual_information(1.0, rho=5e-5),
                 lambda: W.integrals_many([0.1, 1.0], rho=1e-6)):
        with pytest.raises(InputError, match=r"rho must be in \[0\.0001, 1e\+16\] .*dps"):
            call()


@pytest.mark.parametrize("delta", [1e-10, 1e-6, 1e-2, 1.0])
def test_mmse_at_the_smallest_rho_is_in_range_and_accurate(delta):
    # 0 <= mmse <= Delta/(1 + Delta) (THEORY 1.1, stable form) and, at rho = RHO_MIN_DOUBLE, the
    # small-rho expansion 2 rho Delta - rho^2 Delta (1 + Delta) (for rho max(1, Delta) << 1; it
    # matched the mpmath route to 12 digits at rho <= 1e-6, Delta <= 1)
    rho = W.RHO_MIN_DOUBLE
    est = W.mmse_estimate(delta, rho=rho)
    assert 0 < est.value <= delta / (1 + delta)
    ref = 2 * rho * delta - rho**2 * delta * (1 + delta)
    assert est.value == pytest.approx(ref, rel=1e-6)


def test_negative_mmse_is_never_returned():
    from aim_sym.numerics.records import ConvergenceError

    W._check_mmse(0.0, 1.0)
    with pytest.raises(ConvergenceError, match="negative"):
        W._check_mmse(-3e-4, 0.01)
    with pytest.raises(ConvergenceError):
        W._check_mmse(float("nan"), 0.01)


@pytest.mark.parametrize("rho", [0.5, 3.0])
def test_large_delta_against_the_mpmath_route(rho):
    # The double route's quartic lost its digits at large Delta (ZeroDivisionError at Delta =
    # 1e14, bars 4-50x short from ~1e17; the mutual information's bars up to 5x short from
    # Delta ~ 1e3); above DELTA_SERIES it takes the series. Both sides of the switch, the former
    # failures, against the mpmath route (25 digits), within the bars;
    # and the series' Delta^-2 coefficient 1 - 1/rho read off the mpmath route at Delta = 1e6
    # (independent of the series code).
    mpmath.mp.dps = 30
    for d in (1e3, 1e8, 0.5 * W.DELTA_SERIES, 2 * W.DELTA_SERIES, 1e14, 1e20):
        for est, fn in ((W.mmse_estimate(d, rho=rho), W.mmse),
                        (W.mutual_information_estimate(d, rho=rho), W.mutual_information)):
            ref = fn(mpmath.mpf(d), rho=mpmath.mpf(rho), dps=25)
            assert abs(mpmath.mpf(est.value) - ref) <= est.error, (d, est, ref)
            assert est.error >= 4 * np.finfo(float).eps * abs(est.value)
    # far out (the mpmath route at 25 digits cannot go there): the leading terms
    assert W.mmse(1e300, rho=rho) == 1.0
    assert W.mutual_information(1e300, rho=rho) == pytest.approx(0.25e-300, rel=1e-15)
    D = mpmath.mpf(10) ** 6
    v = W.mmse(D, rho=mpmath.mpf(rho), dps=25)
    assert float((v - 1 + 1 / D) * D**2) == pytest.approx(1 - 1 / rho, abs=1e-5)


def test_huge_rho_is_refused_in_double_precision():
    # at rho = 1e30 the double route's bars were 25x short of its error (2.7e-3 at Delta = 1)
    with pytest.raises(InputError, match=r"rho must be in .*1e\+16"):
        W.mmse_estimate(1.0, rho=1e30)
