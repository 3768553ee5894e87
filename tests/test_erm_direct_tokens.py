"""Tests of numerics.erm_direct at T >= 3 tokens (randomised QMC output side) and of its two
closed-form limits, lam -> 0+ (the minimum-Frobenius-norm interpolator) and lam -> infinity
(S_hat -> 0), derived in the module docstring (THEORY 3, "Direct parameterisation")."""

from __future__ import annotations

import math

import numpy as np
import pytest
from aim_sym.numerics import erm_direct as D
from aim_sym.numerics import erm_output as O
from aim_sym.numerics import erm_output_tokens as Q
from aim_sym.numerics import erm_se as S
from aim_sym.numerics.records import InputError
from scipy.integrate import quad


def _small(**kw) -> S.ERMParams:
    """T = 3 parameters with a light QMC rule (the tests' cost, not the defaults')."""
    base = dict(kappa0=0.5, Delta=0.5, tokens=3, qmc_points=2**9, qmc_replicates=4)
    return S.ERMParams(**{**base, **kw})


def test_fixed_point_is_stationary_and_its_potential_is_the_training_loss_T3():
    # the pooled QMC map is deterministic and its hats are the pathwise derivatives of the
    # pooled envelope (Stein's form coincides with them in the coordinates of erm_output_tokens),
    # so its fixed point is a stationary point of the pooled potential; and there
    # Phi = alpha E[loss at the prox] + (lam/2) q (the ridge-penalised training loss per d^2)
    p = _small(alpha=0.15, lam=0.05, qmc_points=2**8)
    x, _, res = D.fixed_point(p, q=0.6 * p.Q0, m=0.5 * p.Q0, sigma=2.0)
    assert res < S.QMC_TOL
    phi = D.potential(*x, p)
    o = Q.output_moments(q=x[0], m=x[1], sigma=x[2], Q0n=p.Q0n, tokens=3, points=p.qmc_points,
                         replicates=p.qmc_replicates, seed=p.qmc_seed).mean
    assert phi == pytest.approx(p.alpha * o.loss + p.lam / 2 * x[0], rel=1e-8)
    for i in range(6):
        h = 1e-4 * abs(x[i])
        xp, xm = list(x), list(x)
        xp[i] += h
        xm[i] -= h
        grad = (D.potential(*xp, p) - D.potential(*xm, p)) / (2 * h)
        assert abs(grad) * abs(x[i]) < 1e-5 * abs(phi), i


def test_ridge_limit_against_the_T2_quadrature_and_a_one_dimensional_integral():
    # the lam -> infinity closed form (trapezoidal rule on one row) against the T = 2 SE with
    # its deterministic Gauss-Hermite output side at lam = 1e4, and its test error against
    # 4 E[(sigmoid(ell) - 1/2)^2], ell ~ N(0, 3 Q0n), by adaptive quad
    lim = D.ridge_limit(alpha=0.3, kappa0=0.5, Delta=0.5, tokens=2)
    s2 = 3 * 1.75
    test0 = quad(lambda t: 4 * (O._sigmoid(t) - 0.5) ** 2 * math.exp(-t * t / (2 * s2))
                 / math.sqrt(2 * math.pi * s2), -np.inf, np.inf, epsabs=1e-14)[0]
    assert lim.test == pytest.approx(test0, rel=1e-11)
    assert max(lim.errors.values()) < 1e-12
    # one map evaluation at the limit's overlaps for lam = 1e4 (Gauss-Hermite 24) returns the
    # limit's hats up to their O(1/lam) shift: relative 1.6/lam (q_hat), 0.42/lam, 0.26/lam
    # (measured at lam = 1e2, 1e3, 1e4 with order 40), plus the rule's 1.5e-4
    lam = 1e4
    p = S.ERMParams(alpha=0.3, kappa0=0.5, Delta=0.5, lam=lam)
    hats = S.hats_from_overlaps(*lim.overlaps(lam=lam, Q0=p.Q0), p)[:3]
    for v, name in zip(hats, ("q_hat", "m_hat", "sigma_hat"), strict=True):
        assert v == pytest.approx(getattr(lim, name), rel=5e-4), name
    # and the hats' shift is first order in 1/lam (sigma_hat: 2.6e-5 at lam = 1e4)
    assert abs(hats[2] / lim.sigma_hat - 1) > 1e-5


@pytest.mark.slow
def test_large_ridge_T3_reaches_the_closed_form_limit():
    # lam -> infinity at T = 3: the QMC fixed point's hats, overlaps, test error and training
    # loss against the closed forms (independent route: a three-dimensional trapezoidal rule,
    # no prox, no QMC). Sigma_hat's QMC estimate is noisy here (the Stein form divides by
    # sqrt(Q0n q - m^2) ~ 1/lam) but enters only through Sigma_hat + 2 lam
    lam = 1e4
    lim = D.ridge_limit(alpha=0.1, kappa0=0.5, Delta=0.5, tokens=3)
    # 8 replicates: at large lam the Stein forms of m_hat and Sigma_hat carry the QMC noise of
    # E[grad L(0; y) . g] (g independent of y, zero in expectation) with an O(1) (m_hat) or
    # O(lam) (Sigma_hat) factor, and 4 replicates under-estimate it (t with 3 degrees of freedom)
    p = _small(alpha=0.1, lam=lam, qmc_points=2**10, qmc_replicates=8)
    q, m, sigma = lim.overlaps(lam=lam, Q0=p.Q0)
    (f,) = D.solve(p, inits=((q / p.Q0, m / p.Q0, sigma),))
    assert f.global_minimum and f.rank == 1.0
    # the O(1/lam) shift of the hats: relative < 3/lam (1.6/lam for q_hat at T = 2; T = 3 at
    # lam = 1e3: 6e-4, inside its QMC bar)
    for name in ("q_hat", "m_hat"):
        assert abs(getattr(f, name) - getattr(lim, name)) <= (
            f.errors[name] + 3e-4 * getattr(lim, name)), name
    assert f.errors["sigma_hat"] > 0
    assert f.m == pytest.approx(m, rel=3 * f.errors["m_hat"] / f.m_hat + 1e-3)
    assert f.sigma == pytest.approx(1 / (2 * lam), rel=1e-2)
    # test error -> E sum y^2 - 1 (uniform output); train -> alpha x that (S_hat = 0 fits the
    # uniform output to the noisy labels), both up to O(m) ~ 1e-5
    assert abs(f.test - lim.test) <= f.errors["test"] + 1e-4
    assert abs(f.train - p.alpha * lim.test) <= f.errors["train"] + 1e-5
    assert f.errors["test"] < 1e-3 * f.test and f.errors["train"] < 1e-2 * f.train


def test_interpolation_threshold_is_alpha_bar_one_half():
    assert D.interpolation_threshold(2) == 0.25
    assert D.interpolation_threshold(3) == 0.1
    assert D.interpolation_threshold(5) == pytest.approx(1 / 28)
    for T in (2, 3, 5):
        assert D.interpolation_threshold(T) * (T * T + T - 2) / 2 == pytest.approx(0.5)
    with pytest.raises(InputError, match="threshold"):
        D.interpolator_limit(alpha=0.1, kappa0=0.5, Delta=0.5, tokens=3)
    with pytest.raises(InputError, match="tokens"):
        D.interpolation_threshold(7)


@pytest.mark.parametrize("tokens,beta", [(2, 1.0), (2, 1.6), (3, 1.0),
                                         pytest.param(4, 1.0, marks=pytest.mark.slow)])
def test_interpolator_limit_is_a_fixed_point_of_the_map(tokens, beta):
    # at Sigma = 1e10 and lam = (1 - a)/(2 Sigma) one SE map evaluation returns the closed-form
    # lam -> 0+ limit (q, m, Sigma), up to the slow approach of the prox to label matching
    # (saturated labels make the loss flat; T = 2, kappa0 = Delta = 0.5: relative deviation of
    # q 2.2e-3, 1.1e-4, 3.3e-6 at Sigma = 1e6, 1e8, 1e10, Gauss-Hermite 10 and 17 alike) and, at
    # T = 3, 4, the QMC error (3 standard errors of the single-replicate maps); beta != beta0
    # checks the factor r = beta0/beta (q, m of the limit scale as r^2, r)
    alpha = 0.8 * D.interpolation_threshold(tokens)
    lim = D.interpolator_limit(alpha=alpha, kappa0=0.5, Delta=0.5, tokens=tokens, beta=beta)
    sigma = 1e10
    p = _small(alpha=alpha, lam=lim.lam_sigma / sigma, tokens=tokens, beta=beta,
               qmc_replicates=8)

    def map_once(replicate=None):
        hats = S.hats_from_overlaps(lim.q, lim.m, sigma, p, order=10,
                                    replicate=replicate)[:3]
        return np.array(D.overlaps_from_hats(*hats, p)[:3])

    new = map_once()
    bars = np.zeros(3)
    if tokens >= 3:
        reps = np.array([map_once(r) for r in range(p.qmc_replicates)])
        bars = Q.COVER * reps.std(axis=0, ddof=1) / math.sqrt(p.qmc_replicates)
        assert np.all(bars < 1e-2 * np.abs(new))
    assert np.all(np.abs(new - [lim.q, lim.m, sigma]) <= bars + 1e-5 * np.abs(new))
    assert lim.train_over_lam == pytest.approx(lim.q / 2)
    assert lim.mse == pytest.approx(p.Q0 + lim.q - 2 * lim.m)
    assert 0 <= lim.test_error < 1e-2 * lim.test


def test_T3_options_and_bad_input():
    p = _small(alpha=0.15, lam=0.05)
    with pytest.raises(InputError, match="keywords"):
        D.solve(p, order=12)
    with pytest.raises(InputError, match="tokens"):
        D.ridge_limit(alpha=0.1, kappa0=0.5, Delta=0.5, tokens=4)
    with pytest.raises(InputError, match="hats"):
        D.overlaps_from_hats(0.1, 0.2, -0.2, S.ERMParams(alpha=0.1, kappa0=0.5, Delta=0.5,
                                                           lam=0.05))


def test_api_accepts_the_direct_model_at_T3_and_its_threshold():
    from aim_sym.erm import ERM

    m = ERM(kappa0=0.5, delta=0.5, lam=0.01, tokens=3)
    p = m._params(0.1, direct=True)  # no longer refused at T = 3
    assert p.tokens == 3 and p.lam == 0.01
    r = m.threshold("interpolation", direct=True, digits=20)
    assert r.value == "0.1" and r.error == 0.0 and r.details["alpha_bar"] == "0.5"
    assert r.parameters["direct"] is True
    r5 = ERM(kappa0=0.5, tokens=5).threshold("interpolation", direct=True, digits=20)
    assert float(r5.value) == pytest.approx(1 / 28, rel=1e-15)
    # the noiseless perfect-recovery threshold of the direct model is the same alpha_bar = 1/2
    perf = ERM(kappa0=0.5, tokens=3).threshold("perfect", direct=True, digits=20)
    assert float(perf.details["alpha_bar"]) == float(r.details["alpha_bar"])


@pytest.mark.slow
def test_cli_handler_direct_T3_at_large_ridge():
    # the command-line handler end to end (default QMC rule), against the lam -> infinity
    # closed form (see test_large_ridge_T3_reaches_the_closed_form_limit)
    from aim_sym import cli_erm

    lam = 1e3
    out = cli_erm.se_json(alpha=0.1, kappa0=0.5, delta=0.5, lam=lam, tokens=3, direct=True)
    lim = D.ridge_limit(alpha=0.1, kappa0=0.5, Delta=0.5, tokens=3)
    assert out["rank"] == 1.0 and "direct" in out["method"]
    for name in ("q_hat", "m_hat"):
        assert abs(out[name] - getattr(lim, name)) <= out[f"{name}_error"] + 3 / lam * getattr(
            lim, name), name
    assert abs(out["test"] - lim.test) <= out["test_error"] + 1e-3
    rows = cli_erm.curve_rows(alphas=[0.1], kappa0=0.5, delta=0.5, lam=lam, tokens=3,
                              direct=True)
    assert rows[0]["q"] == pytest.approx(out["q"], rel=1e-9)


@pytest.mark.slow
def test_direct_does_not_beat_the_factorised_model_on_a_low_rank_target_T3():
    # kappa0 = Delta = 0.05 (rank ratio 5%), alpha = 0.08 at T = 3 (alpha_bar = 0.4, below the
    # direct threshold 1/2), lam = 0.01: the nuclear norm exploits the low rank, the ridge
    # cannot; the direct model's lam -> 0+ limit (its best lambda here) is worse too. Defaults
    # (2^11 x 16): factorised 0.02385 +- 2e-4, direct 0.2204 +- 2e-4, limit 0.1991 (docs/erm.md)
    kw = dict(alpha=0.08, kappa0=0.05, Delta=0.05, lam=0.01, tokens=3, qmc_points=2**9,
              qmc_replicates=8)
    start = (S.DEFAULT_INITS[1],)
    fac = next(f for f in S.solve(S.ERMParams(**kw), inits=start) if f.global_minimum)
    dirf = next(f for f in D.solve(S.ERMParams(**kw), inits=start) if f.global_minimum)
    lim = D.interpolator_limit(alpha=0.08, kappa0=0.05, Delta=0.05, tokens=3)
    assert fac.test + fac.errors["test"] < dirf.test - dirf.errors["test"]
    assert fac.test + fac.errors["test"] < lim.test - lim.test_error
    assert fac.mse + fac.errors["mse"] < dirf.mse - dirf.errors["mse"]
    assert dirf.rank == 1.0 and fac.rank < 0.5


def _ridge_limit_any_T(*, alpha: float, tokens: int, step: float, kappa0: float = 0.5,
                       Delta: float = 0.5) -> np.ndarray:
    """(q_hat, m_hat, Sigma_hat, test) of the lam -> infinity limit at any T (beta = beta0 = 1):
    the formulas of erm_direct.ridge_limit (which takes T = 2, 3) on its T-dimensional
    trapezoidal row rule; checked against ridge_limit at T = 3 below."""
    Q0n = 1 + kappa0 + Delta / 2
    e_gg, e_hh, e_zg, e_H, e_yy = D._row_expectations(tokens, Q0n, 1.0, step, 9.0)
    T, a = tokens, 2.0 * alpha
    return np.array([a * (T * e_gg + T * (T - 1) * e_hh), -a * T * e_zg / Q0n, a * T * e_H,
                     T * e_yy - 1.0])


def test_ridge_limit_formulas_at_T4():
    # the any-T form of the closed lam -> infinity limit reproduces erm_direct.ridge_limit at
    # T = 3, and at T = 4 its trapezoidal rule has settled (steps 0.5 and 0.625)
    lim3 = D.ridge_limit(alpha=0.1, kappa0=0.5, Delta=0.5, tokens=3, step=0.5)
    got3 = _ridge_limit_any_T(alpha=0.1, tokens=3, step=0.5)
    assert np.allclose(got3, [lim3.q_hat, lim3.m_hat, lim3.sigma_hat, lim3.test], rtol=1e-14)
    fine = _ridge_limit_any_T(alpha=0.05, tokens=4, step=0.5)
    coarse = _ridge_limit_any_T(alpha=0.05, tokens=4, step=0.625)
    assert np.all(np.abs(fine - coarse) < 1e-7 * np.abs(fine))
    assert np.all(fine[:3] > 0) and 0 < fine[3] < 1


@pytest.mark.slow
def test_large_ridge_T4_reaches_the_closed_form_limit():
    # lam -> infinity at T = 4 (alpha = 0.05, below the direct threshold 1/18): the QMC fixed
    # point against the closed form (trapezoidal rule on one row, no prox, no QMC), as at T = 3
    lam = 1e4
    lim = _ridge_limit_any_T(alpha=0.05, tokens=4, step=0.5)
    q_hat, m_hat, sigma_hat, test = lim
    p = _small(alpha=0.05, lam=lam, tokens=4, qmc_points=2**10, qmc_replicates=8)
    c = sigma_hat + 2 * lam
    q, m, sigma = (m_hat**2 * p.Q0 + q_hat) / c**2, m_hat * p.Q0 / c, 1 / c
    (f,) = D.solve(p, inits=((q / p.Q0, m / p.Q0, sigma),))
    assert f.global_minimum and f.rank == 1.0
    for name, v in (("q_hat", q_hat), ("m_hat", m_hat)):
        assert abs(getattr(f, name) - v) <= f.errors[name] + 3e-4 * v, name
    assert f.m == pytest.approx(m, rel=3 * f.errors["m_hat"] / f.m_hat + 1e-3)
    assert f.sigma == pytest.approx(1 / (2 * lam), rel=1e-2)
    assert abs(f.test - test) <= f.errors["test"] + 1e-4
    assert abs(f.train - p.alpha * test) <= f.errors["train"] + 1e-5
    assert f.errors["test"] < 1e-3 * f.test and f.errors["train"] < 1e-2 * f.train
