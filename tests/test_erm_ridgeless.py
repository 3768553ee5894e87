"""Tests of numerics.erm_ridgeless: the ERM SE at lambda = 0 above alpha_interp (THEORY 3)."""

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
ALPHA_INTERP = 0.1534821028590800675735  # docs/erm.md, 30 digits
LAMS = (1e-2, 3e-3, 1e-3)


def test_alpha_interp_in_double_precision():
    assert R.alpha_interp(kappa0=KAPPA0, Delta=DELTA) == pytest.approx(ALPHA_INTERP, rel=1e-12)


@pytest.mark.parametrize("alpha", [0.5 * ALPHA_INTERP, ALPHA_INTERP, -1.0, math.nan])
def test_refuses_alpha_at_or_below_the_threshold(alpha):
    with pytest.raises(InputError, match="alpha"):
        R.ridgeless_se(alpha=alpha, kappa0=KAPPA0, Delta=DELTA)


def test_lambda_extrapolation_is_exact_on_quadratics_and_covers_a_cubic():
    def quad(x):
        return 0.3 - 2.0 * x + 5.0 * x * x

    v, e = R.lambda_extrapolation(lams=LAMS, values=tuple(quad(x) for x in LAMS),
                                  errors=(0.0,) * 3)
    assert v == pytest.approx(0.3, abs=1e-14)
    assert e < 1e-3  # only the linear-through-two truncation (5 * 1e-3 * 3e-3 = 1.5e-5)

    def cubic(x):
        return quad(x) + 400.0 * x**3

    v, e = R.lambda_extrapolation(lams=LAMS, values=tuple(cubic(x) for x in LAMS),
                                  errors=(1e-6,) * 3)
    assert abs(v - 0.3) <= e
    assert abs(v - 0.3) > 1e-8  # the cubic term is felt: the check is not vacuous
    # the points' own bars enter with the Lagrange weights (|w| sums to 2.43 here)
    _, e0 = R.lambda_extrapolation(lams=LAMS, values=(0.0,) * 3, errors=(1e-3,) * 3)
    assert e0 == pytest.approx(1e-3 * (3e-5 / 6.3e-5 * 0.1 + 10 / 14 + 5 / 3), rel=1e-12)


@pytest.mark.parametrize("bad", [dict(lams=(1e-2, 1e-3), values=(1, 2), errors=(0, 0)),
                                 dict(lams=(1e-2, 1e-2, 1e-3), values=(1, 2, 3),
                                      errors=(0, 0, 0)),
                                 dict(lams=(1e-2, 0.0, 1e-3), values=(1, 2, 3),
                                      errors=(0, 0, 0))])
def test_lambda_extrapolation_refuses_bad_input(bad):
    with pytest.raises(InputError):
        R.lambda_extrapolation(**bad)


def test_lambda_zero_fixed_point_is_the_limit_of_finite_lambda():
    # alpha = 2 (13 alpha_interp), output side at Gauss-Hermite order 10 on both routes (the
    # same rule: its error cancels); the finite-lambda fixed points at 1e-2, 3e-3, 1e-3,
    # extrapolated to 0, must land on the lambda = 0 one within the extrapolation's bar, and
    # that bar must be small (the lambda = 0 equations drop the lambda d_eps J term of m: a
    # wrong limit would miss by the O(lambda) slope ~ 5 times 1e-3 or more)
    alpha, order = 2.0, 10
    p0 = S.ERMParams(alpha=alpha, kappa0=KAPPA0, Delta=DELTA, lam=0.0)
    x0, _, _ = S.fixed_point(p0, q=0.9, m=0.75, sigma=2.0, order=order)
    train0 = S.potential(*x0, p0, order=order)
    pts = []
    for lam in LAMS:
        p = S.ERMParams(alpha=alpha, kappa0=KAPPA0, Delta=DELTA, lam=lam)
        x, _, _ = S.fixed_point(p, q=x0[0], m=x0[1], sigma=x0[2], order=order)
        pts.append((*x[:3], S.potential(*x, p, order=order)))
    for k, direct in enumerate((*x0[:3], train0)):
        v, e = R.lambda_extrapolation(lams=LAMS, values=tuple(t[k] for t in pts),
                                      errors=(0.0,) * 3)
        assert abs(v - direct) <= e
        assert e < 2e-4 * max(1.0, abs(direct))
        assert abs(pts[-1][k] - direct) > 3 * e or k == 3  # finite lambda differs visibly
    # no interpolation: positive training loss, a fraction < 1 of the output directions
    # fitted, and the Sigma equation at eps = 0: Sigma Sigma_hat = d_delta J / (2 delta)
    q, m, sigma, q_hat, m_hat, sigma_hat = x0
    assert train0 > 0.01
    delta = math.sqrt(q_hat) / m_hat
    s = spectral_integrals(kappa0=KAPPA0, delta=delta, eps=0.0)
    assert sigma * sigma_hat == pytest.approx(s.dJ_ddelta / (2 * delta), rel=1e-9)
    fitted = sigma * sigma_hat / (2 * alpha * 2)
    assert 0 < fitted < 1


@pytest.mark.slow
def test_ridgeless_se_at_alpha_one_agrees_with_the_finite_lambda_route():
    # full orders (24/17, bar x 17/7) on both routes; about 5-8 minutes on 2 shared cores
    alpha = 1.0
    pt = R.ridgeless_se(alpha=alpha, kappa0=KAPPA0, Delta=DELTA)
    fp = pt.fixed_point
    assert pt.reliable and fp.train > 0 and 0 < pt.fitted < 1
    start = ((fp.q / (1 + KAPPA0), fp.m / (1 + KAPPA0), fp.sigma),)
    rows = []
    for lam in LAMS:
        p = S.ERMParams(alpha=alpha, kappa0=KAPPA0, Delta=DELTA, lam=lam)
        rows.append(next(f for f in S.solve(p, inits=start) if f.global_minimum))
    for k in ("test", "train", "q", "m", "sigma"):
        v, e = R.lambda_extrapolation(lams=LAMS, values=tuple(getattr(r, k) for r in rows),
                                      errors=tuple(r.errors[k] for r in rows))
        assert abs(v - getattr(fp, k)) <= e + fp.errors[k]


@pytest.mark.slow
def test_unvalidated_gauss_hermite_fixed_point_is_refused():
    # alpha = 0.3 (1.95 alpha_interp): the lambda = 0 fixed point has Sigma ~ 20-27, where the
    # Gauss-Hermite orders were measured not to agree (module notes); with rule="gh" it is
    # refused with the last iterate unless asked for explicitly
    kw = dict(alpha=0.3, kappa0=0.5, Delta=0.5, order=12, order_lo=10, tol=1e-8, rule="gh")
    with pytest.raises(ConvergenceError, match="Sigma") as e:
        R.ridgeless_se(**kw)
    assert e.value.last_iterate[2] > R.SIGMA_RELIABLE
    pt = R.ridgeless_se(**kw, validated_only=False)
    assert not pt.reliable and pt.fixed_point.sigma > R.SIGMA_RELIABLE


def test_broyden_solver_finds_the_fixed_point_of_the_iteration():
    # solve_split's Broyden iteration (here on the Gauss-Hermite order-10 map, cheap) against
    # erm_se's Anderson-mixed iteration on the same map, at alpha = 0.3 where two eigenvalues of
    # the map's Jacobian are ~0.9 (the slow mode), in fewer map evaluations
    p = S.ERMParams(alpha=0.3, kappa0=KAPPA0, Delta=DELTA, lam=0.0)
    ref, n_anderson, _ = S.fixed_point(p, q=3.0, m=1.8, sigma=15.0, order=8, tol=1e-12)
    got, its, res, jac = R.solve_split(p, q=3.0, m=1.8, sigma=15.0, order=8, tol=1e-10,
                                       rule="gh", jacobian_order=8)
    assert res < 1e-10 and its < n_anderson
    for a, b in zip(got, ref, strict=True):
        assert a == pytest.approx(b, rel=1e-8)
    # the Jacobian estimate has the slow mode: dG/dx = jac + I with eigenvalues near 1
    assert max(abs(np.linalg.eigvals(jac + np.eye(3)))) > 0.85
    with pytest.raises(InputError, match="rule"):
        R.solve_split(p, q=3.0, m=1.8, sigma=15.0, rule="trapezoid")
    with pytest.raises(ConvergenceError):
        R.solve_split(p, q=3.0, m=1.8, sigma=15.0, order=8, rule="gh", max_iter=1,
                      jacobian_order=8)


def test_ridgeless_rule_option_is_checked():
    with pytest.raises(InputError, match="rule"):
        R.ridgeless_se(alpha=0.5, kappa0=KAPPA0, Delta=DELTA, rule="trapezoid")


@pytest.mark.slow
def test_piecewise_rule_settles_the_fixed_point_at_alpha_0p3():
    # alpha = 0.3 (1.95 alpha_interp, Sigma ~ 26): Gauss-Hermite's fixed point moves by 20 % in
    # q between orders 12 and 17 (the slow mode of the map amplifies its error ~14x); the
    # piecewise rule's fixed points at outer orders 12, 16 and 20 settle, and the 16/12 bar
    # (norm-wise, 3 x the largest difference of the logs) covers the order-20 fixed point, as does
    # the test error's own 16/12 bar.  About 12 minutes on 2 shared cores at load 5-9.
    pt = R.ridgeless_se(alpha=0.3, kappa0=KAPPA0, Delta=DELTA)
    fp = pt.fixed_point
    assert pt.rule == "split" and pt.reliable
    assert R.SIGMA_RELIABLE < fp.sigma <= R.SIGMA_SPLIT
    assert fp.train > 0 and 0 < pt.fitted < 1 and fp.residual < 1e-8
    p = S.ERMParams(alpha=0.3, kappa0=KAPPA0, Delta=DELTA, lam=0.0)
    # order 20 to residual 3e-4 (two Broyden steps; the fixed point then known to ~14 x that,
    # 1e-2 in q, far inside the bars): a third step hit a prox Newton failure at 4 nodes
    x20, _, res, _ = R.solve_split(p, q=fp.q, m=fp.m, sigma=fp.sigma, order=20, tol=3e-4)
    for k, v in zip(("q", "m", "sigma"), x20[:3], strict=True):
        assert abs(v - getattr(fp, k)) <= fp.errors[k], k
        assert fp.errors[k] < 0.05 * abs(getattr(fp, k)), k
    test20 = generalisation_error(q=x20[0], m=x20[1], Q0n=p.Q0n)
    assert abs(test20 - fp.test) <= fp.errors["test"] < 0.02 * fp.test


@pytest.mark.slow
def test_lambda_zero_at_alpha_0p3_is_the_limit_of_small_lambda():
    # alpha = 0.3 (Sigma = 26), both routes on the piecewise rule at outer order 12 (its error
    # cancels).  The finite-lambda fixed point moves fast here (q = 4.51, 4.45, 4.34, 4.06,
    # 3.58, 2.86 at lambda = 0, 1e-5, 3e-5, 1e-4, 3e-4, 1e-3: dq/dlambda ~ -6000 at 0, the slow
    # mode amplifying the eps-dependence of the prior ~14 times), so the extrapolation uses
    # lambda = 1e-5, 3e-5, 1e-4 (from 1e-4, 3e-4, 1e-3 it misses q(0) by 0.17, 4 bars).  About
    # 10 minutes at load 5-9 on 2 shared cores.
    assert_lambda_zero_is_the_limit(alpha=0.3, start=(4.5, 2.1, 25.9), lams=(1e-5, 3e-5, 1e-4),
                                    tol=1e-9)


def assert_lambda_zero_is_the_limit(*, alpha: float, start: tuple, lams: tuple,
                                    tol: float) -> None:
    """The lambda = 0 fixed point (piecewise rule, outer order 12) is the lambda -> 0
    extrapolation of the finite-lambda ones at ``lams`` (same rule: its error cancels) within the
    extrapolation's bar; the smallest lambda is visibly (10 bars) different; bars < 2e-3."""
    from dataclasses import replace

    p0 = S.ERMParams(alpha=alpha, kappa0=KAPPA0, Delta=DELTA, lam=0.0)
    x0, _, _, jac = R.solve_split(p0, q=start[0], m=start[1], sigma=start[2], order=12,
                                  tol=tol)
    pts = []
    for lam in lams:
        x, _, _, jac = R.solve_split(replace(p0, lam=lam), q=x0[0], m=x0[1], sigma=x0[2],
                                     order=12, tol=tol, jacobian=jac)
        pts.append(x)
    for k in range(3):  # q, m, Sigma
        v, e = R.lambda_extrapolation(lams=lams, values=tuple(x[k] for x in pts),
                                      errors=(0.0,) * 3)
        assert abs(v - x0[k]) <= e, k
        assert abs(pts[0][k] - x0[k]) > 10 * e, k
        assert e < 2e-3 * abs(x0[k]), k
