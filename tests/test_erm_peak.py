"""Tests of numerics.erm_se.interpolator_limit: the ERM SE as lambda -> 0+ at and below the
interpolation threshold (THEORY 3; docs/erm_peak.md)."""

from __future__ import annotations

import pytest
from aim_sym.numerics import erm_se as S
from aim_sym.numerics import erm_thresholds as TH
from aim_sym.numerics.erm_spectral import spectral_integrals
from aim_sym.numerics.records import InputError

KAPPA0, DELTA = 0.5, 0.5
ALPHA_INTERP = 0.1534821028590800675735  # docs/erm.md, 30 digits


@pytest.mark.parametrize("tokens", [2, 3])
def test_limit_at_the_threshold_is_the_threshold_root(tokens):
    # at alpha_interp the interpolator's eps vanishes and its delta is THEORY 3's delta_bar
    # (independent of T); then m = Q0 + Delta/2 exactly and q = J(delta_bar, 0).  eps grows
    # like 1.2 sqrt(1 - alpha/alpha_interp): a double-precision threshold (relative error
    # ~1e-14) leaves eps ~ 1e-7, and q, m, delta move by ~eps
    th = TH.interpolation_threshold(kappa0=KAPPA0, Delta=DELTA, tokens=tokens, dps=None)
    lim = S.interpolator_limit(alpha=float(th.value), kappa0=KAPPA0, Delta=DELTA, tokens=tokens)
    d_bar = float(th.extra["delta_bar"])
    assert lim.eps < 1e-6
    assert lim.delta == pytest.approx(d_bar, abs=2e-6)
    assert lim.m == pytest.approx(1 + KAPPA0 + DELTA / 2, abs=2e-6)
    J = spectral_integrals(kappa0=KAPPA0, delta=d_bar, eps=0.0).J
    assert lim.q == pytest.approx(J, abs=2e-6)
    assert lim.mse == pytest.approx(1 + KAPPA0 + lim.q - 2 * lim.m, abs=1e-12)
    assert 0 < lim.errors["test"] < (1e-6 if tokens == 2 else 5e-3)
    if tokens == 2:
        assert th.value == pytest.approx(ALPHA_INTERP, rel=1e-13)


def test_limit_is_a_fixed_point_of_the_se_map_as_sigma_grows():
    # one SE map evaluation (output side at order 12, spectral prior side) at the limit's
    # (q, m) with Sigma large and lambda = alpha fac eps / Sigma returns (q, m, Sigma) up to the
    # label-matching tails (prox != matching point where |ell| > ~log(Sigma)/2): measured
    # relative residuals ~1e-3 at Sigma = 1e6 and ~1e-4 at 1e8; a wrong limit (say m without
    # its eps term, a shift of 0.28) fails by orders of magnitude
    alpha = 0.95 * ALPHA_INTERP
    lim = S.interpolator_limit(alpha=alpha, kappa0=KAPPA0, Delta=DELTA)
    assert 0.1 < lim.eps < 1.0
    res = []
    for sigma in (1e6, 1e8):
        p = S.ERMParams(alpha=alpha, kappa0=KAPPA0, Delta=DELTA, lam=alpha * 2 * lim.eps / sigma)
        hats = S.hats_from_overlaps(lim.q, lim.m, sigma, p, order=12)[:3]
        q, m, s, _ = S.overlaps_from_hats(*hats, p)
        res.append(max(abs(q / lim.q - 1), abs(m / lim.m - 1), abs(s / sigma - 1)))
    assert res[1] < 3e-4
    assert res[1] < res[0] / 3


def test_limit_below_the_threshold_is_interpolating_and_smooth():
    # eps > 0 below alpha_interp, falling to 0 at it like sqrt(alpha_interp - alpha)
    eps = [S.interpolator_limit(alpha=f * ALPHA_INTERP, kappa0=KAPPA0, Delta=DELTA).eps
           for f in (0.99, 0.9999)]
    assert eps[0] > eps[1] > 0
    assert eps[0] / eps[1] == pytest.approx(10.0, rel=0.1)


def test_limit_rejects_alpha_above_the_threshold():
    with pytest.raises(InputError, match="alpha"):
        S.interpolator_limit(alpha=1.01 * ALPHA_INTERP, kappa0=KAPPA0, Delta=DELTA)
