"""Tests of numerics.erm_thresholds: interpolation and perfect-recovery thresholds of the ERM
(THEORY 3)."""

from __future__ import annotations

import mpmath
import pytest
from aim_sym.numerics import erm_thresholds as T
from aim_sym.numerics.erm_spectral import spectral_integrals
from aim_sym.numerics.records import InputError


def test_interpolation_threshold_matches_theory_values():
    # THEORY 3 quotes delta_bar = 2.2928207, alpha_interp = 0.1534821 (kappa0 = Delta = 0.5, T = 2)
    est = T.interpolation_threshold(kappa0=0.5, Delta=0.5, tokens=2, dps=25)
    assert est.error < 1e-18
    assert float(est.value) == pytest.approx(0.1534821, abs=5e-8)
    assert float(est.extra["delta_bar"]) == pytest.approx(2.2928207, abs=5e-8)
    assert float(est.extra["alpha_bar"]) == pytest.approx(2 * float(est.value), rel=1e-15)
    # the double-precision route agrees within its own bar
    fast = T.interpolation_threshold(kappa0=0.5, Delta=0.5, dps=None)
    assert abs(fast.value - float(est.value)) <= fast.error + 1e-15
    # the defining condition holds at the root (identity), at 25 digits
    with mpmath.workdps(30):
        d = est.extra["delta_bar"]
        s = spectral_integrals(kappa0=0.5, delta=d, eps=0, dps=25)
        assert abs(s.J - d * s.dJ_ddelta / 2 - mpmath.mpf("1.75")) < 1e-20


def test_interpolation_tokens_scale_alpha_not_alpha_bar():
    a2 = T.interpolation_threshold(kappa0=0.3, Delta=0.2, tokens=2, dps=None)
    a3 = T.interpolation_threshold(kappa0=0.3, Delta=0.2, tokens=3, dps=None)
    assert a3.extra["alpha_bar"] == pytest.approx(a2.extra["alpha_bar"], rel=1e-14)
    assert a3.value == pytest.approx(a2.value * 4 / 10, rel=1e-14)


@pytest.mark.parametrize("kappa0", [0.2, 0.5])
def test_interpolation_small_noise_limit(kappa0):
    # alpha_bar_interp(Delta) = limit + C Delta^(1/3) + ... (measured exponent): Richardson
    # from Delta = 1e-5, 1e-6 must land on (1 + 2 kappa0 - kappa0^2)/4 far closer than either
    limit = T.interpolation_small_noise(kappa0=kappa0)
    a = [T.interpolation_threshold(kappa0=kappa0, Delta=D, dps=None).extra["alpha_bar"]
         for D in (1e-5, 1e-6)]
    r = 10 ** (-1 / 3)
    extrap = (a[1] - r * a[0]) / (1 - r)
    assert abs(a[1] - limit) > 1e-3
    assert abs(extrap - limit) < 0.05 * abs(a[1] - limit)


def test_sc_partial_moments_closed_forms_against_quadrature():
    with mpmath.workdps(30):
        for k in (0, 1, 2):
            for x in ("-1.3", "0.2", "1.9"):
                xm = mpmath.mpf(x)
                num = mpmath.quad(lambda t, k=k: t**k * mpmath.sqrt(4 - t * t),
                                  [-2, xm]) / (2 * mpmath.pi)
                assert abs(T.sc_partial_moment(k, xm) - num) < 1e-25


@pytest.mark.parametrize("kappa0", [0.05, 0.2, 0.5, 0.8, 0.99])
def test_perfect_recovery_factorised_two_routes(kappa0):
    est = T.perfect_recovery_threshold(kappa0=kappa0, tokens=2, dps=30)
    assert est.error < 1e-15
    ab = float(est.extra["alpha_bar"])
    # independent route: the variational form of the statistical dimension, no closed forms
    ab_var, c_var = T.statistical_dimension_variational(kappa0=kappa0)
    assert ab == pytest.approx(ab_var, abs=1e-11)
    assert float(est.extra["c"]) == pytest.approx(c_var, abs=1e-5)
    # ordering: Bayes-optimal <= factorised (nuclear norm) <= direct (1/2)
    bayes = float(T.perfect_recovery_threshold(kappa0=kappa0, kind="bayes").extra["alpha_bar"])
    assert bayes < ab < 0.5
    assert float(est.value) == pytest.approx(ab / 2, rel=1e-15)


def test_perfect_recovery_full_rank_and_direct():
    assert float(T.perfect_recovery_threshold(kappa0=1.5).extra["alpha_bar"]) == 0.5
    d = T.perfect_recovery_threshold(kappa0=0.3, kind="direct", tokens=3)
    assert float(d.extra["alpha_bar"]) == 0.5
    assert float(d.value) == pytest.approx(0.1, rel=1e-15)


def test_bad_input():
    with pytest.raises(InputError, match="tokens"):
        T.interpolation_threshold(kappa0=0.5, Delta=0.5, tokens=1)
    with pytest.raises(InputError, match="Delta"):
        T.interpolation_threshold(kappa0=0.5, Delta=0.0)
    with pytest.raises(InputError, match="kind"):
        T.perfect_recovery_threshold(kappa0=0.5, kind="other")
