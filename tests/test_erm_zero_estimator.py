"""The zero estimator S_hat = 0 and small alpha in the T = 2 ERM SE (THEORY 3; docs/erm.md "The
zero estimator and small alpha").

Before: `se --model erm --lam 10 --alpha 0.5` and `--lam 0.01 --alpha 0.01` (and below) exited 3:
the damped iteration in (log q, m, log Sigma) cannot represent q = 0 and left its domain.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from aim_sym.numerics import erm_se
from aim_sym.numerics.erm_output import zero_estimator_rates
from aim_sym.numerics.erm_output_tokens import generalisation_error as qmc_test_error
from aim_sym.numerics.erm_output_tokens import zero_estimator_rates as qmc_zero_rates
from aim_sym.numerics.erm_se import ERMParams, hats_from_overlaps
from aim_sym.numerics.wishart import support
from scipy.integrate import quad
from scipy.optimize import brentq


def _sigmoid(x: float) -> float:
    return 0.5 * (1.0 + math.tanh(0.5 * x))


def _gauss(f, var: float) -> float:
    s = math.sqrt(var)
    return quad(lambda t: f(s * t) * math.exp(-0.5 * t * t) / math.sqrt(2 * math.pi),
                -40, 40, epsabs=1e-14, epsrel=1e-12, limit=200)[0]


@pytest.mark.parametrize("beta,beta0,Q0n", [(1.0, 1.0, 1.75), (1.3, 0.7, 1.2)])
def test_rates_against_one_dimensional_forms(beta, beta0, Q0n):
    """Stein's lemma on each row (ell_i ~ N(0, 3 Q0n)): m_hat / alpha = 12 beta beta0
    E sigmoid'(beta0 ell); E loss(0) = 4 E (sigmoid(beta0 ell) - 1/2)^2; Sigma_hat / alpha =
    3 beta^2; q_hat / alpha = 2 beta^2 (6 E u^2 + 2 E u_1 u_2) needs the rows' correlation
    (Cov = Q0n), done here by a 1-d conditional: ell_2 | ell_1 ~ N(ell_1 / 3, 8 Q0n / 3)."""
    r = zero_estimator_rates(Q0n=Q0n, beta=beta, beta0=beta0)
    var = 3 * Q0n
    dsig = _gauss(lambda x: _sigmoid(beta0 * x) * (1 - _sigmoid(beta0 * x)), var)
    u2 = _gauss(lambda x: (_sigmoid(beta0 * x) - 0.5) ** 2, var)

    def cond(x1: float) -> float:  # E[u_2 | ell_1 = x1]
        return _gauss(lambda t: _sigmoid(beta0 * (x1 / 3 + t)) - 0.5, 8 * Q0n / 3)

    u12 = _gauss(lambda x: (_sigmoid(beta0 * x) - 0.5) * cond(x), var)
    assert r.m_hat_rate == pytest.approx(12 * beta * beta0 * dsig, rel=1e-11)
    assert r.loss == pytest.approx(4 * u2, rel=1e-11)
    assert r.sigma_hat_rate == 3 * beta * beta
    assert r.q_hat_rate == pytest.approx(2 * beta * beta * (6 * u2 + 2 * u12), rel=1e-9)
    for k, e in r.errors.items():
        assert 0 < e < 1e-11, k


def test_rates_are_the_output_sides_limit():
    """The full output side (prox by Newton, 4-d Gauss-Hermite) at (q, m, Sigma) -> 0 tends to
    alpha times the rates: at scale 1e-5 within its Gauss-Hermite error (~1e-4 relative)."""
    p = ERMParams(alpha=1.0, kappa0=0.5, Delta=0.5, lam=0.01)
    r = zero_estimator_rates(Q0n=p.Q0n)
    prev = None
    for t in (1e-3, 1e-5):
        q_hat, m_hat, sigma_hat, env = hats_from_overlaps(t, 0.3 * t, t, p)
        dev = (abs(q_hat / r.q_hat_rate - 1), abs(m_hat / r.m_hat_rate - 1),
               abs(sigma_hat / r.sigma_hat_rate - 1))
        if prev is not None:  # Sigma_hat approaches its rate like Sigma (the prox's I + Sigma H)
            assert dev[2] < 0.02 * prev[2]
        prev = dev
    assert max(prev) < 3e-4
    assert env == pytest.approx(r.loss, rel=3e-4)


def _alpha0(lam: float) -> float:
    """alpha below which S_hat = 0 is a fixed point: eps = 2 lam / m_hat at the right edge."""
    def gap(a: float) -> float:
        p = ERMParams(alpha=a, kappa0=0.5, Delta=0.5, lam=lam)
        q_hat, m_hat, _ = erm_se._zero_hats(p)
        d = math.sqrt(q_hat) / m_hat
        return 2 * lam / m_hat - support(0.5, d * d)[-1][1]
    return brentq(gap, 1e-7, 10.0, xtol=1e-18, rtol=1e-14)


def test_zero_estimator_is_a_fixed_point_only_beyond_the_edge():
    a0 = _alpha0(0.01)
    assert 5e-5 < a0 < 1e-4   # ~ 0.68 lam^2 from the semicircle edge 2 delta at large delta
    assert erm_se.zero_estimator(ERMParams(alpha=0.99 * a0, kappa0=0.5, Delta=0.5,
                                           lam=0.01)) is not None
    assert erm_se.zero_estimator(ERMParams(alpha=1.01 * a0, kappa0=0.5, Delta=0.5,
                                           lam=0.01)) is None
    p = ERMParams(alpha=0.5, kappa0=0.5, Delta=0.5, lam=10.0)
    z = erm_se.zero_estimator(p)
    assert (z.q, z.m, z.sigma, z.rank, z.mse) == (0.0, 0.0, 0.0, 0.0, p.Q0)
    assert z.train == pytest.approx(p.alpha * z.test, rel=1e-14)  # no regulariser at S_hat = 0
    # the potential's data term at the zero estimator: alpha E loss(0), the uniform output's loss
    assert z.test == pytest.approx(zero_estimator_rates(Q0n=p.Q0n).loss, rel=1e-15)
    assert erm_se.zero_estimator(replace_lam(p, 0.01)) is None


def replace_lam(p: ERMParams, lam: float) -> ERMParams:
    return ERMParams(alpha=p.alpha, kappa0=p.kappa0, Delta=p.Delta, lam=lam, tokens=p.tokens)


def test_spectral_root_agrees_with_the_damped_iteration():
    """Two solvers of the same map (order 12): where the damped iteration converges, the root
    in (log delta, log eps, log eta) lands on the same point."""
    p = ERMParams(alpha=0.5, kappa0=0.5, Delta=0.5, lam=0.01)
    damped, _, _ = erm_se.fixed_point(p, q=0.9, m=0.75, sigma=2.0, order=12)
    root, _, res = erm_se.spectral_fixed_point(p, hats=erm_se._zero_hats(p), order=12)
    assert res < 1e-9
    for a, b in zip(damped, root, strict=True):
        assert a == pytest.approx(b, rel=1e-7)


@pytest.mark.slow
def test_small_alpha_tends_continuously_to_the_zero_estimator():
    """Above alpha0 the nonzero fixed point's q falls to 0 as alpha -> alpha0+ (order 12)."""
    a0 = _alpha0(0.01)
    qs = []
    for f in (1.5, 1.2, 1.05):
        p = ERMParams(alpha=f * a0, kappa0=0.5, Delta=0.5, lam=0.01)
        params, _, _ = erm_se.spectral_fixed_point(p, hats=erm_se._zero_hats(p), order=12)
        qs.append(params[0])
    assert qs[0] > qs[1] > qs[2] > 0
    assert qs[2] < 0.2 * qs[1] and qs[2] < 1e-4


def test_solve_at_small_alpha_reports_one_point_with_bars():
    """solve() falls back to the spectral root when every start leaves the domain (orders 12/8
    here to keep it quick; the command line uses 24/17)."""
    p = ERMParams(alpha=1e-4, kappa0=0.5, Delta=0.5, lam=0.01)
    fps = erm_se.solve(p, order=12, order_lo=8)
    assert len(fps) == 1 and fps[0].global_minimum
    f = fps[0]
    assert 0 < f.q < 0.01 and 0 < f.rank < 0.01 and f.sigma > 0
    assert all(np.isfinite(v) and v > 0 for k, v in f.errors.items() if k != "rank")


def test_cli_zero_estimator(run_cli):
    code, out, err = run_cli(["se", "--model", "erm", "--tokens", "2", "--kappa0", "0.5",
                              "--delta", "0.5", "--lam", "10", "--alpha", "0.5", "--json"])
    assert code == 0, err
    o = json.loads(out)
    pts = o["fixed_points"] if "fixed_points" in o else o["rows"]
    assert len(pts) == 1
    assert pts[0]["q"] == 0 and pts[0]["rank"] == 0 and pts[0]["global_minimum"]


def test_rates_any_tokens_reduce_to_the_t2_form():
    """The QMC form (reduced coordinates B^T u, any T) at T = 2 against the trapezoidal form in
    the row coordinates A u: two different reductions of the same limit, within the QMC bars."""
    a = zero_estimator_rates(Q0n=1.75)
    b = qmc_zero_rates(Q0n=1.75, tokens=2)
    for k in ("q_hat_rate", "m_hat_rate", "loss"):
        assert abs(getattr(a, k) - getattr(b, k)) < b.errors[k] + a.errors[k], k
        assert b.errors[k] < 1e-4 * getattr(b, k)
    assert b.sigma_hat_rate == pytest.approx(3.0, rel=1e-12)  # E tr H = 3/2 beta^2 at T = 2


def test_zero_estimator_tokens_3():
    """T = 3, lam = 10, alpha = 0.5: S_hat = 0; its test error is the uniform output's, which
    the T >= 3 test-error route gives at q -> 0 independently (its own QMC points)."""
    p = ERMParams(alpha=0.5, kappa0=0.5, Delta=0.5, lam=10.0, tokens=3)
    fps = erm_se.solve(p)
    assert len(fps) == 1 and fps[0].q == 0 and fps[0].global_minimum
    z = fps[0]
    t = qmc_test_error(q=1e-14, m=0.0, Q0n=p.Q0n, tokens=3)
    assert abs(z.test - t.value) < z.errors["test"] + 3 * t.stderr
    assert erm_se.zero_estimator(replace_lam(p, 0.01)) is None


def test_beta_lambda_symmetry():
    """S -> beta S maps (beta, lam) onto (1, lam / beta): the same test error, q / beta^2 (the
    prox, the spectral side and both solvers at a nontrivial point; orders 12/8 for speed)."""
    a = erm_se.solve(ERMParams(alpha=0.5, kappa0=0.5, Delta=0.5, lam=1.0), order=12, order_lo=8)
    b = erm_se.solve(ERMParams(alpha=0.5, kappa0=0.5, Delta=0.5, lam=10.0, beta=10.0), order=12,
                     order_lo=8)
    a, b = a[0], b[0]
    assert a.q > 1e-3
    assert b.q * 100 == pytest.approx(a.q, rel=1e-6)
    assert b.m * 10 == pytest.approx(a.m, rel=1e-6)
    assert b.test == pytest.approx(a.test, rel=1e-8)
    assert b.rank == pytest.approx(a.rank, rel=1e-6)


# ---- next to alpha0 (docs/erm.md "Next to alpha0"; issue 16) ------------------------------
# Before: alpha = 1.002 alpha0 (lambda = 1) exited 3: the prox's Newton tolerance bounded the
# error of p by ~1e-12, the whole displacement p - z ~ Sigma there, and the Gauss-Hermite error
# of the q -> 0 hats (1e-4 relative at order 24) was as large as eps's distance from the edge.


def _asymptote(p: ERMParams) -> float:
    """Leading order next to alpha0: the prior side at the hats of S_hat = 0 (alpha x the exact
    rates); the output side's O(Sigma) corrections move q by O((alpha / alpha0 - 1)^(3/2))."""
    return erm_se.overlaps_from_hats(*erm_se._zero_hats(p), p)[0]


def test_root_next_to_alpha0_against_the_asymptote():
    """lambda = 1: the spectral root (order 8) at 1.002 and 1.01 alpha0 converges, q > 0 rises
    with alpha, and its distance from the asymptote falls as (alpha / alpha0 - 1)^(3/2) (the
    ratio 5^1.5 = 11.2 between the two, within 25 %)."""
    a0 = _alpha0(1.0)
    qs, devs = [], []
    for f in (1.002, 1.01):
        p = ERMParams(alpha=f * a0, kappa0=0.5, Delta=0.5, lam=1.0)
        params, _, res = erm_se.spectral_fixed_point(p, hats=erm_se._zero_hats(p), order=8)
        assert res < 1e-9
        qa = _asymptote(p)
        qs.append(params[0])
        devs.append(abs(params[0] / qa - 1))
    assert 0 < qs[0] < qs[1]
    assert devs[0] < 1e-3
    assert devs[1] / devs[0] == pytest.approx(5**1.5, rel=0.25)


@pytest.mark.slow
def test_cli_next_to_alpha0(run_cli):
    """The former failure: 1.002 alpha0 at lambda = 1 exits 0 with q > 0 and a bar that covers
    the asymptote plus its O((alpha / alpha0 - 1)^(3/2)) distance (below 1e-3 relative)."""
    a0 = _alpha0(1.0)
    alpha = 1.002 * a0
    code, out, err = run_cli(["se", "--model", "erm", "--tokens", "2", "--kappa0", "0.5",
                              "--delta", "0.5", "--lam", "1", "--alpha", repr(alpha), "--json"])
    assert code == 0, err
    o = json.loads(out)
    pts = o["fixed_points"] if "fixed_points" in o else o["rows"]
    nz = [f for f in pts if f["q"] > 0]
    assert len(nz) == 1 and nz[0]["global_minimum"]
    qa = _asymptote(ERMParams(alpha=alpha, kappa0=0.5, Delta=0.5, lam=1.0))
    assert abs(nz[0]["q"] - qa) < nz[0]["q_error"] + 1e-3 * qa
    assert nz[0]["q_error"] < 0.1 * nz[0]["q"]


def _alpha0_tokens(lam: float, tokens: int) -> float:
    """alpha0 at T >= 3 from the QMC zero rates (the same edge condition)."""
    r = qmc_zero_rates(Q0n=1.75, tokens=tokens)

    def gap(a: float) -> float:
        d = math.sqrt(a * r.q_hat_rate) / (a * r.m_hat_rate)
        return 2 * lam / (a * r.m_hat_rate) - support(0.5, d * d)[-1][1]
    return brentq(gap, 1e-6, 10.0, xtol=1e-15, rtol=1e-14)


def test_tokens_3_root_small_alpha_cheap():
    """T = 3 (few QMC points for speed): the spectral-coordinate root on the QMC map converges
    above alpha0, q > 0 rises with alpha, and at a point where the damped iteration also
    converges (from a start 2x off in q) both land on the same fixed point."""
    a0 = _alpha0_tokens(1.0, 3)
    qs = []
    for f in (1.3, 1.6):
        p = ERMParams(alpha=f * a0, kappa0=0.5, Delta=0.5, lam=1.0, tokens=3, qmc_points=128,
                      qmc_replicates=4)
        params, _, res = erm_se.spectral_fixed_point(p, hats=erm_se._zero_hats(p), order=0)
        assert res < 1e-9
        qs.append(params)
    assert 0 < qs[0][0] < qs[1][0]
    damped, _, _ = erm_se.fixed_point(p, q=2 * qs[1][0], m=1.5 * qs[1][1], sigma=qs[1][2],
                                      tol=1e-10, max_iter=200)
    for a, b in zip(damped, qs[1], strict=True):
        assert a == pytest.approx(b, rel=1e-6)


@pytest.mark.slow
def test_cli_tokens_3_small_alpha(run_cli):
    """The former failure at T = 3: lambda = 1, 1.1 alpha0 (default 16 x 2048 QMC points; 2-4
    minutes) exits 0 with q > 0, the replicate bar (3 standard errors) below q, flagged."""
    alpha = 1.1 * _alpha0_tokens(1.0, 3)
    code, out, err = run_cli(["se", "--model", "erm", "--tokens", "3", "--kappa0", "0.5",
                              "--delta", "0.5", "--lam", "1", "--alpha", repr(alpha), "--json"])
    assert code == 0, err
    o = json.loads(out)
    pts = o["fixed_points"] if "fixed_points" in o else o["rows"]
    assert len(pts) == 1 and pts[0]["global_minimum"]
    assert pts[0]["q"] > 0 and 0 < pts[0]["q_error"] < pts[0]["q"]
    assert 0 < pts[0]["rank"] < 0.05
