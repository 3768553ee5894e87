"""Tests of the cross-validated lambda of the ERM SE (numerics.erm_crossval, ERM.optimal_lambda;
THEORY 3, issue 16 item 4).  Low Gauss-Hermite orders: these test the search, not the SE's
accuracy (the SE's own tests do that)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from aim_sym.numerics import erm_crossval as X
from aim_sym.numerics import erm_direct as D
from aim_sym.numerics import erm_se as S
from aim_sym.numerics.records import InputError

from aim_sym.domains import DomainError
from aim_sym.erm import ERM

KAPPA0, DELTA = 0.05, 0.05
ORDER, ORDER_LO = 5, 4  # cheap orders: the search's logic, not the SE's accuracy


def _test_at(p: S.ERMParams, lam: float, start: tuple) -> tuple[float, tuple]:
    """The direct SE's test error at lambda (order ORDER), continued from ``start``."""
    fp = S.fixed_point(S.ERMParams(**{**p.__dict__, "lam": lam}), q=start[0], m=start[1],
                       sigma=start[2], order=ORDER, prior=D.overlaps_from_hats)[0]
    return S.generalisation_error(q=fp[0], m=fp[1], Q0n=p.Q0n), fp


def test_direct_lambda_star_is_a_minimum_and_agrees_with_a_dense_scan():
    p = S.ERMParams(alpha=0.3, kappa0=KAPPA0, Delta=DELTA, lam=0.01)
    r = X.search(p, direct=True, order=ORDER, order_lo=ORDER_LO, scan=5, tol=0.2)
    assert r.edge == "" and r.other_fixed_points == ()
    assert r.bracket[0] < r.lam < r.bracket[1] and math.log(r.bracket[1] / r.bracket[0]) <= 0.2
    # a minimum: test at lambda* x 1.5 and / 1.5 (same order, deterministic) lies above
    up, _ = _test_at(p, 1.5 * r.lam, r.fixed_point)
    down, _ = _test_at(p, r.lam / 1.5, r.fixed_point)
    assert r.test < up and r.test < down
    # the second-order flatness bound holds at these two points: f(x* +- h) - f(x*) is about
    # (1/2) f'' h^2 (h = ln 1.5), and the curvature the search reports predicts it
    h2 = math.log(1.5) ** 2
    # (stencils +-0.5 and +-0.405 in ln lambda: measured 1e-4 apart)
    assert (up + down - 2 * r.test) / h2 == pytest.approx(r.curvature, rel=0.05)
    # independent route: a dense scan over the whole range (spacing ln(1000)/12 = 0.58), the
    # parabola through its best point and neighbours.  The golden-section bracket (0.2 wide)
    # holds the argmin to 0.1; the parabola's own error on this smooth curve is measured by the
    # search's stencil (+-0.5), whose vertex lies 0.013 from lambda* here: allow 0.05
    grid = np.logspace(-3, 0, 13)
    vals, start = [], r.fixed_point
    for lam in grid:
        t, start = _test_at(p, float(lam), start if lam > grid[0] else r.fixed_point)
        vals.append(t)
    i = int(np.argmin(vals))
    assert 0 < i < len(grid) - 1
    x = np.log(grid[i - 1:i + 2])
    a, b, _ = np.polyfit(x, vals[i - 1:i + 2], 2)
    vertex = -b / (2 * a)
    assert abs(vertex - math.log(r.lam)) < 0.1 + 0.05
    assert min(vals) >= r.test - 1e-9


def test_direct_interpolator_limit_is_a_fixed_point_of_the_map():
    # alpha < 1/4: as lambda -> 0+ the direct SE tends to the closed form q = a (Q0n - a Q0)/(1 -
    # a), m = a Q0, lam Sigma = (1 - a)/2 (a = 4 alpha); one SE map evaluation at Sigma = 1e6
    # (Gauss-Hermite output side, the ridge prior) must return (q, m, Sigma)
    alpha = 0.1
    lim = D.interpolator_limit(alpha=alpha, kappa0=KAPPA0, Delta=DELTA)
    a = 4 * alpha
    assert lim.m == pytest.approx(a * (1 + KAPPA0), rel=1e-14)
    # (measured relative deviations 9e-4 at Sigma = 1e6 and 1.6e-5 at 1e8: labels with |ell|
    # beyond ~ln(Sigma)/2 are not matched at finite Sigma, docs/erm_peak.md)
    for sigma, rel in ((1e6, 2e-3), (1e8, 4e-5)):
        p = S.ERMParams(alpha=alpha, kappa0=KAPPA0, Delta=DELTA, lam=lim.lam_sigma / sigma)
        hats = S.hats_from_overlaps(lim.q, lim.m, sigma, p, order=10)[:3]
        q, m, sig, _ = D.overlaps_from_hats(*hats, p)
        assert (q, m, sig) == pytest.approx((lim.q, lim.m, sigma), rel=rel)
    assert lim.test_error < 1e-10
    with pytest.raises(InputError, match="alpha"):
        D.interpolator_limit(alpha=0.25, kappa0=KAPPA0, Delta=DELTA)


def test_search_refuses_bad_input():
    p = S.ERMParams(alpha=0.3, kappa0=KAPPA0, Delta=DELTA, lam=0.01)
    for kw in ({"lam_range": (0.1, 0.01)}, {"lam_range": (0.0, 1.0)}, {"tol": 0.0},
               {"scan": 2}, {"order": 6, "order_lo": 6}):
        with pytest.raises(InputError):
            X.search(p, direct=True, **kw)


def test_optimal_lambda_refuses_bad_input():
    m = ERM(kappa0=KAPPA0, delta=DELTA)
    bad = ({"lam_range": (1e-4, 1.0)}, {"lam_range": (0.5, 0.6)}, {"lam_range": (1.0, 0.1)},
           {"lam_range": "ab"}, {"lam_range": (1e-3, float("inf"))}, {"tol": 2.0},
           {"orders": (17, 24)}, {"orders": (24.0, 17)}, {"search_orders": (8,)})
    for kw in bad:
        with pytest.raises(InputError):
            m.optimal_lambda(alpha=0.1, **kw)
    with pytest.raises(DomainError, match="alpha"):
        m.optimal_lambda(alpha=-0.1)
    with pytest.raises(DomainError, match="tokens"):
        ERM(kappa0=KAPPA0, delta=DELTA, tokens=3).optimal_lambda(alpha=0.1)
    with pytest.raises(DomainError, match="alphas"):
        m.cross_validated_curve(alphas=[])


@pytest.mark.slow
def test_optimal_lambda_reports_an_edge_and_the_lambda_to_0_limit():
    # factorised, alpha = 0.1 < alpha_interp = 0.1321: the optimum (~0.009 at order 8) lies
    # below the range [0.03, 1], so lambda* is the lower end, flagged; the interpolator's
    # test error (lambda -> 0+) is reported beside it
    r = ERM(kappa0=KAPPA0, delta=DELTA).optimal_lambda(
        alpha=0.1, lam_range=(0.03, 1.0), tol=0.2, orders=(6, 5), search_orders=(ORDER, ORDER_LO))
    d = r.details
    assert r.quantity == "lam_opt" and r.value == pytest.approx(0.03, rel=1e-12)
    assert d["edge"] == "lower" and d["edge_confirmed"] and r.error == 0.0
    assert "lower edge" in r.method
    assert d["test_error"] == pytest.approx(d["test_se_error"] + d["test_flatness"], rel=1e-12)
    assert d["test_lambda_to_0"] > d["test"]  # (0.0438 against ~0.027)
    assert d["lambda_to_0_lower"] is False
    assert {"q", "m", "sigma", "q_hat", "m_hat", "sigma_hat", "mse", "rank"} <= set(d)


@pytest.mark.parametrize("args,option", [
    (["se", "--model", "erm", "--kappa0", "0.05", "--alpha", "0.2", "--cross-validate",
      "--lam", "0.1"], "--lam"),
    (["se", "--model", "aim", "--alpha", "0.2", "--cross-validate"], "--cross-validate"),
    (["se", "--model", "erm", "--kappa0", "0.05", "--alpha", "0.2", "--cross-validate",
      "--tokens", "3"], "--tokens"),
    (["curve", "--model", "aim", "--alphas", "0.1:0.2:2", "--direct"], "--direct"),
])
def test_cli_cross_validate_refusals(args, option):
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-m", "aim_sym", *args], capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 2 and option in p.stderr and len(p.stderr.splitlines()) == 1, p.stderr
