"""Tests of the ridgeless ERM curve near alpha_interp: the SE followed in Sigma (THEORY 3,
numerics.erm_ridgeless.solve_at_sigma)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from aim_sym.numerics import erm_ridgeless as R
from aim_sym.numerics import erm_se as S
from aim_sym.numerics.erm_output import generalisation_error
from aim_sym.numerics.erm_spectral import spectral_integrals
from aim_sym.numerics.records import ConvergenceError, InputError

KAPPA0, DELTA = 0.5, 0.5


def test_fixed_sigma_solve_returns_the_alpha_of_the_fixed_alpha_solve():
    # the same SE (Gauss-Hermite order 8, cheap) solved two ways: at alpha = 0.3 for Sigma, and
    # at that Sigma for alpha from a start 5 % off in q and alpha: both give one fixed point
    p = S.ERMParams(alpha=0.3, kappa0=KAPPA0, Delta=DELTA, lam=0.0)
    ref, _, res, _ = R.solve_split(p, q=3.0, m=1.8, sigma=15.0, order=8, tol=1e-11, rule="gh",
                                   jacobian_order=8)
    assert res < 1e-11
    got, its, res2, jac = R.solve_at_sigma(p, sigma=ref[2], q=1.05 * ref[0], m=ref[1],
                                           alpha=0.285, order=8, rule="gh", tol=1e-11,
                                           jacobian_order=8)
    assert res2 < 1e-11 and its < 30
    assert got[2] == pytest.approx(0.3, rel=1e-8)  # alpha
    for a, b in zip((got[0], got[1], *got[3:]), (ref[0], ref[1], *ref[3:]), strict=True):
        assert a == pytest.approx(b, rel=1e-7)
    assert np.all(np.isfinite(jac))


def test_fixed_sigma_solve_refuses_bad_input():
    p = S.ERMParams(alpha=0.3, kappa0=KAPPA0, Delta=DELTA, lam=0.0)
    with pytest.raises(InputError, match="sigma"):
        R.solve_at_sigma(p, sigma=-1.0, q=3.0, m=1.8, alpha=0.3)
    with pytest.raises(InputError, match="sigma"):
        R.solve_at_sigma(p, sigma=math.inf, q=3.0, m=1.8, alpha=0.3)
    with pytest.raises(InputError, match="rule"):
        R.solve_at_sigma(p, sigma=15.0, q=3.0, m=1.8, alpha=0.3, rule="trapezoid")
    with pytest.raises(InputError, match="q"):
        R.solve_at_sigma(p, sigma=15.0, q=0.0, m=1.8, alpha=0.3)
    with pytest.raises(InputError, match="alpha"):
        R.solve_at_sigma(p, sigma=15.0, q=3.0, m=1.8, alpha=-0.3)
    with pytest.raises(ConvergenceError):
        R.solve_at_sigma(p, sigma=15.0, q=3.0, m=1.8, alpha=0.3, order=8, rule="gh",
                         max_iter=1, jacobian_order=8)


@pytest.mark.slow
def test_fixed_sigma_point_near_alpha_interp_approaches_the_interpolator():
    # Sigma = 1e5 (the piecewise rule at outer order 12, from a start 3 % off): alpha lands just
    # above alpha_interp and (q, m, test) lie between the Sigma = 1e4 point and the closed-form
    # interpolator at alpha_interp (erm_se.interpolator_limit: q = J(delta_bar, 0), m = Q0n,
    # test 0.5010982710), on the side of the curve (test below the peak, q, m above their
    # limits).  Measured (docs/erm.md): alpha 0.155612, q 5.0672, m 1.77544, test 0.499613;
    # 68 s on 2 shared cores at load ~5 (an upper bound).
    a_i = R.alpha_interp(kappa0=KAPPA0, Delta=DELTA)
    lim = S.interpolator_limit(alpha=a_i, kappa0=KAPPA0, Delta=DELTA)
    p = S.ERMParams(alpha=0.16, kappa0=KAPPA0, Delta=DELTA, lam=0.0)
    x, _, res, _ = R.solve_at_sigma(p, sigma=1e5, q=5.2, m=1.8, alpha=0.16, order=12)
    q, m, alpha = x[:3]
    assert res < 1e-8
    assert a_i < alpha < 1.02 * a_i
    test = generalisation_error(q=q, m=m, Q0n=p.Q0n)
    assert 0 < lim.test - test < 3e-3
    assert 0 < q - lim.q < 0.15 and 0 < m - lim.m < 0.04
    # the Sigma equation at eps = 0: Sigma Sigma_hat = D(delta) = d_delta J / (2 delta)
    delta = math.sqrt(x[3]) / x[4]
    s = spectral_integrals(kappa0=KAPPA0, delta=delta, eps=0.0)
    assert 1e5 * x[5] == pytest.approx(s.dJ_ddelta / (2 * delta), rel=1e-6)


@pytest.mark.slow
def test_lambda_zero_at_alpha_0p25_is_the_limit_of_small_lambda():
    # alpha = 0.25 (Sigma = 89 at outer order 12), both routes on the piecewise rule at outer
    # order 12 (its error cancels).  dq/dlambda ~ -3e4 at 0 (at alpha = 0.3: -6000), so the
    # extrapolation uses lambda = 5e-7, 1.5e-6, 5e-6 (measured: within 0.06 of the bar; lambda =
    # 5e-7 itself 70-90 bars away).  7.4 minutes on 2 shared cores at load ~5 (an upper bound).
    from test_erm_ridgeless import assert_lambda_zero_is_the_limit

    assert_lambda_zero_is_the_limit(alpha=0.25, start=(6.416, 2.3225, 67.5),
                                    lams=(5e-7, 1.5e-6, 5e-6), tol=1e-8)
