"""Tests of numerics.erm_spectral: J(delta, eps), its exact derivatives, the rank and the learned
spectrum of the ERM (THEORY 3)."""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
from aim_sym.numerics import erm_spectral as E
from aim_sym.numerics import wishart as W
from aim_sym.numerics.records import InputError
from scipy.integrate import quad

# (kappa0, delta, eps): one interval, a cut inside it, two intervals (small delta, kappa0 < 1)
POINTS = [(0.5, 2.83, 3.3), (0.5, 0.3, 0.7), (0.2, 0.1, 0.0), (0.2, 0.1, 1.5), (2.0, 1.0, 0.4)]


@pytest.mark.parametrize("kappa0,delta", [(0.5, 0.3), (0.2, 0.1), (3.0, 2.0)])
def test_below_the_support_J_is_a_quadratic_in_the_moments(kappa0, delta):
    # eps below the support: J = m2 - 2 eps mean + eps^2 with mean sqrt(kappa0) and
    # m2 = Q0 + delta^2 (free convolution adds the semicircle's variance)
    eps = -10.0
    s = E.spectral_integrals(kappa0=kappa0, delta=delta, eps=eps)
    mean, m2 = math.sqrt(kappa0), 1 + kappa0 + delta**2
    assert s.J == pytest.approx(m2 - 2 * eps * mean + eps**2, rel=1e-14)
    assert s.dJ_ddelta == pytest.approx(2 * delta, rel=1e-12)
    assert s.dJ_deps == pytest.approx(-2 * (mean - eps), rel=1e-14)
    assert s.rank == pytest.approx(1.0, abs=1e-14)


@pytest.mark.parametrize("kappa0,delta,eps", POINTS[:3] + POINTS[4:])
def test_exact_derivatives_against_a_high_precision_finite_difference(kappa0, delta, eps):
    # the free heat equation form of d_delta J, and d_eps J, against central differences of J
    # at 30 digits (step 1e-9: truncation ~1e-18)
    dps = 30
    with mpmath.workdps(dps + 5):
        d, e, h = mpmath.mpf(delta), mpmath.mpf(eps), mpmath.mpf("1e-9")

        def J(dd, ee):
            return E.spectral_integrals(kappa0=kappa0, delta=dd, eps=ee, dps=dps).J

        fd_delta = (J(d + h, e) - J(d - h, e)) / (2 * h)
        fd_eps = (J(d, e + h) - J(d, e - h)) / (2 * h)
        s = E.spectral_integrals(kappa0=kappa0, delta=d, eps=e, dps=dps)
        assert abs(s.dJ_ddelta - fd_delta) < 1e-14 * (1 + abs(fd_delta))
        assert abs(s.dJ_deps - fd_eps) < 1e-14 * (1 + abs(fd_eps))


@pytest.mark.parametrize("kappa0,delta,eps", POINTS)
def test_double_precision_error_bars_cover_the_mpmath_values(kappa0, delta, eps):
    est = E.spectral_estimate(kappa0=kappa0, delta=delta, eps=eps)
    exact = E.spectral_integrals(kappa0=kappa0, delta=delta, eps=eps, dps=25)
    for key in ("J", "dJ_ddelta", "dJ_deps", "rank"):
        err = abs(est[key].value - float(getattr(exact, key)))
        assert err <= est[key].error + 4e-15 * (1 + abs(est[key].value)), key
        assert err < 1e-12


def test_mpmath_error_bar_covers_a_higher_precision():
    est = E.spectral_estimate(kappa0=0.5, delta=2.2928207, eps=0.5, dps=20)
    ref = E.spectral_integrals(kappa0=0.5, delta=2.2928207, eps=0.5, dps=35)
    for key in ("J", "dJ_ddelta", "dJ_deps", "rank"):
        with mpmath.workdps(40):
            assert abs(est[key].value - getattr(ref, key)) <= est[key].error
        assert est[key].error < 1e-12


def test_learned_spectrum_mass_and_second_moment():
    # eigenvalue density integrates to the rank, and its second moment is eta^2 J = q
    kappa0, delta, eps, eta = 0.5, 0.3, 0.7, 1.7
    s = E.spectral_integrals(kappa0=kappa0, delta=delta, eps=eps)
    top = eta * (W.support(kappa0, delta**2)[-1][1] - eps)

    def f(lam, k):
        return lam**k * float(E.learned_eigenvalue_density(np.array([lam]), kappa0=kappa0,
                                                           delta=delta, eps=eps, eta=eta)[0])

    mass = quad(f, 0, top, args=(0,), limit=200, epsabs=1e-12)[0]
    second = quad(f, 0, top, args=(2,), limit=200, epsabs=1e-12)[0]
    assert mass == pytest.approx(s.rank, abs=1e-8)
    assert second == pytest.approx(eta**2 * s.J, rel=1e-7)
    # singular values: the same mass
    smass = quad(lambda x: float(E.learned_singular_density(
        np.array([x]), kappa0=kappa0, delta=delta, eps=eps, eta=eta)[0]), 0, math.sqrt(top),
        limit=200, epsabs=1e-12)[0]
    assert smass == pytest.approx(s.rank, abs=1e-8)


def test_bad_input_is_named():
    with pytest.raises(InputError, match="delta"):
        E.spectral_integrals(kappa0=0.5, delta=-1.0, eps=0.0)
    with pytest.raises(InputError, match="kappa0"):
        E.spectral_integrals(kappa0=float("nan"), delta=1.0, eps=0.0)
    with pytest.raises(InputError, match="eta"):
        E.learned_eigenvalue_density([1.0], kappa0=0.5, delta=1.0, eps=0.0, eta=0.0)
