"""Tests of numerics.erm_output_tokens (the ERM output side for any T by randomised QMC) and of
the T >= 3 route of numerics.erm_se (THEORY 3)."""

from __future__ import annotations

import csv
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from aim_sym.numerics import erm_output as O
from aim_sym.numerics import erm_output_tokens as E
from aim_sym.numerics import erm_se as S
from aim_sym.numerics.records import ConvergenceError, InputError
from scipy.optimize import minimize

FIELDS = ("sq", "cross_m", "cross_s", "envelope", "loss")
GD_T3 = Path(__file__).parent / "data" / "erm" / "GD_more_tokens_T3_Delta0.5_rows.csv"


def _full_loss(u: np.ndarray, u0: np.ndarray, T: int, beta: float, beta0: float) -> float:
    """sum over all T^2 entries of (softmax_beta0(s U0) - softmax_beta(s U))^2 with U, U0 the
    symmetric matrices of the flat entries (a <= b, row-major) and s = sqrt(1 + delta_ab)."""
    def mat(v):
        M = np.zeros((T, T))
        k = 0
        for a in range(T):
            for b in range(a, T):
                M[a, b] = M[b, a] = v[k] * (math.sqrt(2) if a == b else 1.0)
                k += 1
        return M

    def soft(W):
        ex = np.exp(W - W.max(axis=1, keepdims=True))
        return ex / ex.sum(axis=1, keepdims=True)

    return float(np.sum((soft(beta0 * mat(u0)) - soft(beta * mat(u))) ** 2))


@pytest.mark.parametrize("T", [2, 3, 5])
def test_gradient_and_hessian_against_finite_differences(T):
    geo = E.geometry(T)
    k = geo.n - 1
    rng = np.random.default_rng(T)
    x = rng.normal(size=(6, k)) * 2
    y = E._labels(rng.normal(size=(6, k)) * 2, geo, 0.7)
    L, g, H = E.loss_and_derivatives(x, y, geo=geo, beta=1.3)
    h = 1e-5
    for j in range(k):
        e = np.zeros(k)
        e[j] = h
        Lp, gp = E.loss_and_derivatives(x + e, y, geo=geo, beta=1.3, hessian=False)
        Lm, gm = E.loss_and_derivatives(x - e, y, geo=geo, beta=1.3, hessian=False)
        assert np.allclose(g[:, j], (Lp - Lm) / (2 * h), atol=1e-8)
        assert np.allclose(H[:, :, j], (gp - gm) / (2 * h), atol=1e-8)
    assert np.allclose(H, H.transpose(0, 2, 1))


@pytest.mark.parametrize("T", [2, 3, 4])
def test_the_loss_sees_u_only_through_the_complement_of_the_shift_direction(T):
    # the derived reduction: L(u) = L(u + c e) and L depends on B^T u alone
    geo = E.geometry(T)
    n = geo.n
    B = geo.basis
    assert np.allclose(B.T @ B, np.eye(n - 1))
    e = np.array([1 / math.sqrt(2) if a == b else 1.0 for a in range(T) for b in range(a, T)])
    assert np.allclose(B.T @ e, 0)
    rng = np.random.default_rng(7)
    for _ in range(5):
        u, u0 = rng.normal(size=n) * 2, rng.normal(size=n) * 2
        y = E._labels((B.T @ u0)[None], geo, 0.8)
        L = E.loss_and_derivatives((B.T @ u)[None], y, geo=geo, beta=1.2, hessian=False)[0][0]
        assert L == pytest.approx(_full_loss(u, u0, T, 1.2, 0.8), abs=1e-13)
        assert _full_loss(u + 3.7 * e, u0 - 1.1 * e, T, 1.2, 0.8) == pytest.approx(L, abs=1e-13)


def test_T2_prox_is_never_above_the_deterministic_reduction():
    # at T = 2 the general route solves the same problem as erm_output's 2-d reduction
    # (ell = A z0n, omega = A z, A B invertible); it may find a lower minimum, never a higher one
    A = np.array([[math.sqrt(2), -1, 0], [0, -1, math.sqrt(2)]])
    B = E.geometry(2).basis
    M = np.linalg.inv(A @ B)
    rng = np.random.default_rng(3)
    z, z0 = rng.normal(size=(3, 600)) * 1.5, rng.normal(size=(3, 600)) * 1.5
    for sigma in (0.7, 5.0, 40.0):
        _, f_det = O.prox_step(A @ z, O._sigmoid(A @ z0), sigma=sigma)
        d, f, loss = E.prox_step((M @ A @ z).T, (M @ A @ z0).T, tokens=2, sigma=sigma)
        assert np.all(f <= f_det + 1e-12)
        assert np.mean(np.abs(f - f_det) < 1e-10) > 0.97
        assert np.allclose(loss + np.sum(d * d, axis=1) / (2 * sigma), f)


def test_T3_prox_is_the_global_minimum_of_the_full_problem():
    # against BFGS from many random starts in the full n = 6 flat coordinates (no reduction)
    T, sigma, beta, beta0 = 3, 8.0, 1.0, 1.0
    B = E.geometry(T).basis
    rng = np.random.default_rng(11)
    z, z0 = rng.normal(size=(8, 6)) * 1.5, rng.normal(size=(8, 6)) * 1.5
    d, fmin, _ = E.prox_step(z @ B, z0 @ B, tokens=T, sigma=sigma, beta=beta, beta0=beta0)
    for i in range(len(z)):
        def obj(u, i=i):
            return np.sum((u - z[i]) ** 2) / (2 * sigma) + _full_loss(u, z0[i], T, beta, beta0)

        best = min((minimize(obj, z[i] + s, method="BFGS", options={"gtol": 1e-9})
                    for s in rng.normal(size=(6, 6)) * 3), key=lambda r: r.fun)
        assert fmin[i] <= best.fun + 1e-9
        assert obj(z[i] + B @ d[i]) == pytest.approx(fmin[i], abs=1e-12)


def test_unconverged_prox_raises_with_last_iterate():
    xi = E.gaussian_points(4, 64, 2, 0)[0]
    ell, omega = E._fields(xi * 3, q=1.0, m=0.5, Q0n=1.5)
    with pytest.raises(ConvergenceError) as err:
        E.prox_step(omega, ell, tokens=2, sigma=50.0, max_iter=1)
    assert err.value.last_iterate is not None


def test_T2_qmc_agrees_with_deterministic_quadrature():
    # bar: 3 QMC standard errors plus the deterministic route's own bar (orders 24/17 x 17/7)
    q, m, sigma, Q0n = 1.46, 1.38, 2.4, 1.75
    r = E.output_moments(q=q, m=m, sigma=sigma, Q0n=Q0n, tokens=2, points=2**9,
                         replicates=16, seed=5)
    hi = O.output_moments(q=q, m=m, sigma=sigma, Q0n=Q0n, order=24)
    lo = O.output_moments(q=q, m=m, sigma=sigma, Q0n=Q0n, order=17)
    for k in FIELDS:
        det_bar = 17 / 7 * abs(getattr(hi, k) - getattr(lo, k))
        assert abs(getattr(r.mean, k) - getattr(hi, k)) <= r.bar(k) + det_bar, k
        assert r.stderr[k] < 5e-3 * abs(getattr(hi, k))


def test_T3_qmc_agrees_with_plain_monte_carlo():
    # one map step by two samplers (scrambled Sobol / iid normals, different seeds)
    kw = {"q": 0.9, "m": 0.8, "sigma": 5.0, "Q0n": 1.75, "tokens": 3, "beta": 1.2, "beta0": 0.9}
    a = E.output_moments(points=2**9, replicates=8, seed=2, **kw)
    b = E.output_moments(points=2**9, replicates=8, seed=3, sampler="mc", **kw)
    for k in FIELDS:
        diff = getattr(a.mean, k) - getattr(b.mean, k)
        assert abs(diff) <= E.COVER * math.hypot(a.stderr[k], b.stderr[k]), k
    # randomised QMC beats plain Monte Carlo at equal points on the smooth moments
    assert a.stderr["cross_m"] < b.stderr["cross_m"]


def test_T2_test_error_agrees_with_deterministic_trapezoid():
    kw = {"q": 1.2, "m": 1.0, "Q0n": 1.75, "beta": 1.0, "beta0": 1.0}
    det = O.generalisation_error(**kw)
    r = E.generalisation_error(tokens=2, points=2**12, replicates=16, **kw)
    assert abs(r.value - det) <= r.bar()
    assert r.stderr < 1e-3 * det


def test_small_sigma_limit_is_the_gradient_at_z():
    # Sigma -> 0: d = -Sigma grad L(omega) + O(Sigma^2), so E|d|^2 / Sigma^2 -> E|grad L|^2
    T, sigma = 3, 1e-4
    geo = E.geometry(T)
    xi = E.gaussian_points(2 * (geo.n - 1), 2**10, 4, 9)
    r = E.output_moments(q=1.0, m=0.7, sigma=sigma, Q0n=1.5, tokens=T, points=2**10,
                         replicates=4, seed=9)
    ell, omega = E._fields(np.concatenate(list(xi)), q=1.0, m=0.7, Q0n=1.5)
    g = E.loss_and_derivatives(omega, E._labels(ell, geo, 1.0), geo=geo, beta=1.0,
                               hessian=False)[1]
    assert r.mean.sq / sigma**2 == pytest.approx(np.mean(np.sum(g * g, axis=1)), rel=1e-3)


def test_large_lambda_limit_of_the_test_error():
    # S -> 0 (q, m -> 0): the student outputs 1/T everywhere; the test error is then
    # E sum_ab (softmax(s z0n)_ab - 1/T)^2, here against iid normals through the full matrix
    T, Q0n = 3, 1.75
    r = E.generalisation_error(q=1e-14, m=0.0, Q0n=Q0n, tokens=T, points=2**11, replicates=8)
    rng = np.random.default_rng(0)
    u0 = rng.normal(size=(20000, 6)) * math.sqrt(Q0n)
    vals = np.array([_full_loss(np.zeros(6), v, T, 1.0, 1.0) for v in u0[:4000]])
    assert abs(r.value - vals.mean()) <= E.COVER * math.hypot(r.stderr,
                                                              vals.std() / math.sqrt(vals.size))


def test_params_accept_three_to_six_tokens_and_name_bad_input():
    for T in (3, 6):
        assert S.ERMParams(alpha=0.1, kappa0=0.5, Delta=0.5, lam=0.01, tokens=T).tokens == T
    for bad in ({"tokens": 7}, {"tokens": 1}, {"qmc_points": 1000}, {"qmc_replicates": 2},
                {"qmc_seed": -1}):
        with pytest.raises(InputError, match=next(iter(bad))):
            S.ERMParams(alpha=0.1, kappa0=0.5, Delta=0.5, lam=0.01, **bad)
    with pytest.raises(InputError, match="points"):
        E.gaussian_points(4, 100, 4, 0)
    with pytest.raises(InputError, match="m"):
        E.output_moments(q=1.0, m=2.0, sigma=1.0, Q0n=1.5, tokens=3)


@pytest.mark.slow
def test_T3_fixed_point_bars_cover_an_independent_scrambling():
    # the SE at T = 3: the bar (3 standard errors of the replicate fixed points) is small, the
    # replicate mean sits on the pooled fixed point, and a solve with other scramblings
    # (qmc_seed = 1) lands within the two bars
    p = S.ERMParams(alpha=0.19, kappa0=0.5, Delta=0.5, lam=0.001, tokens=3)
    (fp,) = S.solve(p, inits=((1.26, 1.03, 5.0),))
    (fp1,) = S.solve(replace(p, qmc_seed=1), inits=((fp.q / p.Q0, fp.m / p.Q0, fp.sigma),))
    assert fp.global_minimum
    for k in ("q", "m", "sigma", "q_hat", "m_hat", "sigma_hat", "train", "test", "mse"):
        assert 0 < fp.errors[k] < 0.02 * abs(getattr(fp, k)), k
        assert abs(fp.errors[f"{k}_bias"]) < fp.errors[k], k
        assert abs(getattr(fp, k) - getattr(fp1, k)) <= math.hypot(fp.errors[k],
                                                                   fp1.errors[k]), k
    assert fp.mse == pytest.approx(p.Q0 + fp.q - 2 * fp.m)


@pytest.mark.slow
def test_T3_test_error_against_the_authors_gradient_descent():
    # the authors' Adam runs (d = 100, lambda = 0.001: the rows' value; T = 3, Delta = 0.5) at
    # alpha_bar = 0.97: the SE's test error and matrix error lie within two instance standard
    # deviations of their mean (where a single d = 100 instance lands)
    with open(GD_T3) as fh:
        rows = [{k: float(v) for k, v in r.items()} for r in csv.DictReader(fh)]
    row = rows[-1]
    p = S.ERMParams(alpha=row["alpha"], kappa0=0.5, Delta=0.5, lam=0.001, tokens=3)
    fp = next(f for f in S.solve(p, inits=(S.DEFAULT_INITS[1],)) if f.global_minimum)
    gd, spread = row["test_err_mean_noise"] / 2000, row["test_err_std_noise"] / 2000
    assert abs(fp.test - gd) <= fp.errors["test"] + 2 * spread
    assert abs(fp.mse - row["MSE_mean"]) <= fp.errors["mse"] + 2 * row["MSE_std"]


@pytest.mark.parametrize("T", [2, 3, pytest.param(5, marks=pytest.mark.slow)])
def test_interpolation_limit_depends_on_T_only_through_n_minus_1(T):
    # Sigma -> infinity (the interpolating phase, lambda -> 0+), beta = beta0: the prox goes to
    # the label-matching point d = ell - omega, so per reduced coordinate (n - 1 of them)
    # E|d|^2 = Q0n + q - 2m, E d.(q ell - m omega) = Q0n q - m^2 = -E d.(Q0n omega - m ell):
    # the SE sees alpha only through alpha (n - 1) = alpha (T^2 + T - 2)/2 = alpha_bar
    # (saturated rows make L flat along some directions: the limit needs Sigma >> their inverse
    # curvature; at T = 3, sq / (n - 1) = 1.0547, 1.0940, 1.0971, 1.0972 at Sigma = 1e4, 1e6,
    # 1e8, 1e10)
    q, m, Q0n, sigma = 1.0, 0.7, 1.5, 1e10
    r = E.output_moments(q=q, m=m, sigma=sigma, Q0n=Q0n, tokens=T, points=2**9,
                         replicates=4, seed=4)
    k = (T * T + T - 2) / 2
    exact = {"sq": Q0n + q - 2 * m, "cross_m": Q0n * q - m * m, "cross_s": m * m - Q0n * q}
    for name, val in exact.items():
        assert getattr(r.mean, name) / k == pytest.approx(val, abs=E.COVER * r.stderr[name] / k
                                                          + 1e-4 * abs(val)), name
    assert r.mean.loss < 1e-8


def test_T3_default_starts_include_a_large_sigma_start():
    # solve() at T >= 3 defaults to DEFAULT_INITS_TOKENS: the T = 2 starts and Sigma = 200
    assert S.DEFAULT_INITS_TOKENS[:len(S.DEFAULT_INITS)] == S.DEFAULT_INITS
    assert max(s for _, _, s in S.DEFAULT_INITS_TOKENS) >= 100


@pytest.mark.slow
def test_T3_below_the_threshold_the_large_sigma_start_converges():
    # alpha = 0.02 < alpha_interp(T = 3) = 0.061, Delta = 0.5, lambda = 0.001: the fixed point
    # has Sigma ~ 250; the middle start (Sigma = 2) leaves the map's domain, the Sigma = 200
    # start converges (in fewer iterations than the weak start) to the weak start's fixed point
    p = S.ERMParams(alpha=0.02, kappa0=0.5, Delta=0.5, lam=0.001, tokens=3)
    kw = {"tol": S.QMC_TOL, "max_iter": 300, "points": p.qmc_points // 16}
    with pytest.raises(ConvergenceError):
        S.fixed_point(p, q=0.6 * p.Q0, m=0.5 * p.Q0, sigma=2.0, **kw)
    big, its_big, _ = S.fixed_point(p, q=0.6 * p.Q0, m=0.5 * p.Q0, sigma=200.0, **kw)
    weak, its_weak, _ = S.fixed_point(p, q=0.2 * p.Q0, m=0.1 * p.Q0, sigma=20.0, **kw)
    assert big[2] > 100
    assert big[:3] == pytest.approx(weak[:3], rel=1e-6)
    assert its_big < its_weak
