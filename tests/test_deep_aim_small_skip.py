"""Deep AIM at skip c < 1 towards small mmse (THEORY 1.6; docs/deep_aim.md section 4, "Inner rule
at c < 1"): the line rule graded towards det A = 0 that follows a posterior of width sqrt(V), and
the refusal of the graded rule where it no longer does."""

from __future__ import annotations

import math

import numpy as np
import pytest
from aim_sym.numerics import deep_aim as da
from aim_sym.numerics import deep_aim_se as ds
from aim_sym.numerics.records import ConvergenceError, InputError
from test_deep_aim_se import assert_g_out_is_the_gradient

Z1 = np.array([0.5, 1e-2, 3.0, -2.0, 7.0])
Z2 = np.array([0.3, 1e-2, -1.0, 4.0, -6.0])


def _line(skip: float = 0.5) -> ds.DeepAimSE:
    return ds.DeepAimSE(skip=skip, rho1=0.5, rho2=0.5, inner="line")


@pytest.mark.parametrize("skip", [0.0, 0.25, 0.5, 0.9])
def test_singular_crossing_is_where_det_a_vanishes(skip):
    """The closed-form xi1*(xi2) of the line rule puts mu = c + p + r - 1 (det A / (1 + c)) at 0,
    and mu changes sign across it (mu increases with xi1)."""
    xi2 = np.linspace(-6.0, 6.0, 41)
    x1 = ds.singular_crossing(xi2, skip=skip, beta=1.3)
    mu, _ = ds.layer1_weights(x1, xi2, skip=skip, beta=1.3)
    assert np.max(np.abs(mu)) < 1e-12
    lo, _ = ds.layer1_weights(x1 - 1e-3, xi2, skip=skip, beta=1.3)
    hi, _ = ds.layer1_weights(x1 + 1e-3, xi2, skip=skip, beta=1.3)
    assert np.all(lo < 0) and np.all(hi > 0)


def test_line_rule_reduces_to_the_small_width_fibre():
    """omega = 0, V = 1: the line rule at step 0.2 against numerics/deep_aim.py's graded fibre rule
    at step 0.05 (another rule, converged): Z_out and all four posterior means to 1e-8 (the graded
    rule at step 0.2 is itself off by 1.6e-5 here)."""
    m = _line()
    r = ds.z_out(Z1, Z2, model=m, a=[0.0, 0.0], b=[0.0, 0.0], v1=1.0, v2=1.0, h_in=0.2)
    d = da.posterior_means(Z1, Z2, skip=0.5, beta=1.0, h_in=0.05, rule="tanh-sinh-mu")
    np.testing.assert_allclose(r["z_out"], d["z_out"], rtol=1e-8)
    for got, key in ((r["g1"][:, 0], "xi1"), (r["g1"][:, 1], "xi2"), (r["g2"][:, 0], "x"),
                     (r["g2"][:, 1], "y")):
        np.testing.assert_allclose(got, d[key], atol=1e-8)


def _draws(model: ds.DeepAimSE, v: tuple[float, float], n: int, seed: int):
    """Outer points (a, b) and z drawn from the SE's law at V = v (truths first)."""
    q1, q2 = model.q0[0] - v[0], model.q0[1] - v[1]
    u = np.random.default_rng(seed).standard_normal((n, 8))
    a, b, e1, e2 = ds._outer_points(model, q1, q2, u, "variance")
    z1, z2 = ds.statistics(a[:, 0] + e1[:, 0], a[:, 1] + e1[:, 1], b[:, 0] + e2[:, 0],
                           b[:, 1] + e2[:, 1], skip=model.skip, beta=model.beta)
    return a, b, z1, z2


def test_line_rule_z_out_at_small_v_against_monte_carlo():
    """V = (0.05, 0.015), c = 0.5, outer points drawn from the SE's law: Z_out by the line rule
    against seeded plain Monte Carlo over xi ~ N(a, V1 I) (4 standard errors), and stable to 1e-6
    (relative) between steps 0.25 and 0.12."""
    m, v = _line(), (0.05, 0.015)
    a, b, z1, z2 = _draws(m, v, 6, seed=5)
    fine = ds.z_out(z1, z2, model=m, a=a, b=b, v1=v[0], v2=v[1], h_in=0.12)["z_out"]
    coarse = ds.z_out(z1, z2, model=m, a=a, b=b, v1=v[0], v2=v[1], h_in=0.25)["z_out"]
    np.testing.assert_allclose(coarse, fine, rtol=1e-6)
    for k in range(z1.size):
        e = ds.z_out_mc(z1[k], z2[k], model=m, a=a[k], b=b[k], v1=v[0], v2=v[1],
                        samples=200_000, seed=k)
        assert abs(fine[k] - e.value) < 4 * e.error, (k, fine[k], e)


def test_line_rule_g_out_is_the_gradient_at_small_v():
    """g^l = d log Z_out / d omega^l by central differences in every entry, line rule, c = 0.5,
    V = (0.05, 0.015) (the posterior far narrower than the graded rule's nodes)."""
    m, v = _line(), (0.05, 0.015)
    rng = np.random.default_rng(2)
    om1, om2 = 0.6 * rng.standard_normal(3), 0.6 * rng.standard_normal(3)
    a0, b0 = ds.whiten(om1), ds.whiten(om2)
    # observations drawn near these means
    x_true = a0 + math.sqrt(v[0]) * rng.standard_normal((4, 2))
    y_true = b0 + math.sqrt(v[1]) * rng.standard_normal((4, 2))
    z1, z2 = ds.statistics(x_true[:, 0], x_true[:, 1], y_true[:, 0], y_true[:, 1], skip=0.5,
                           beta=1.0)
    assert_g_out_is_the_gradient(m, z1, z2, om1, om2, v, h_in=0.25, h=1e-6, rtol=1e-5,
                                 atol=1e-4)


def test_line_rule_matches_the_trapezoid_where_det_a_is_far():
    """Outer points whose disc stays clear of det A = 0 get the trapezoid in t (the skip >= 1
    rule); points near it the graded lines: both give the same Z_out where both apply (c = 0.5,
    V small, a far from the curve: the two rules at step 0.25 agree to 1e-9)."""
    m = _line()
    v = (1e-3, 5e-4)
    a = np.array([[1.5, 0.2]])          # mu(a) = 0.5 + 2 expit(~2.1) - 1 ~ 1.3, far from 0
    b = np.array([[0.4, -0.3]])
    z1, z2 = ds.statistics(a[:, 0], a[:, 1], b[:, 0], b[:, 1], skip=0.5, beta=1.0)
    groups = list(ds._nodes(m, a[:, 0], a[:, 1], v[0], v[1], 0.25))
    assert len(groups) == 1 and groups[0][1].shape[1] == ds._trapezoid_t(
        ds._inner_step(0.25, *v))[0].size
    # force the graded lines on the same point: margin large enough to call it near
    saved = ds.LINE_MARGIN
    try:
        ds.LINE_MARGIN = 1e6
        near = ds.z_out(z1, z2, model=m, a=a, b=b, v1=v[0], v2=v[1], h_in=0.25)["log_z_out"]
    finally:
        ds.LINE_MARGIN = saved
    far = ds.z_out(z1, z2, model=m, a=a, b=b, v1=v[0], v2=v[1], h_in=0.25)["log_z_out"]
    assert abs(near[0] - far[0]) < 1e-9


def test_graded_rule_is_refused_below_its_range():
    """The graded rule at skip < 1 is refused (InputError naming inner / v_init) where
    min(V1, V2) < GRADED_V_MIN, and a fixed-point iteration that enters that range stops with a
    ConvergenceError; the line rule and skip >= 1 are not affected."""
    g = ds.DeepAimSE(skip=0.5, rho1=0.5, rho2=0.5, inner="graded")
    lo = 0.5 * ds.GRADED_V_MIN
    with pytest.raises(InputError, match="inner"):
        ds.output_overlaps(g, q1=1.5 - 0.3, q2=1.5 - lo, m=2, scrambles=2)
    with pytest.raises(InputError, match="inner"):
        ds.se_map(g, alpha=0.1, q1=1.5 - lo, q2=1.2, m=2, scrambles=2)
    with pytest.raises(InputError, match="v_init"):
        ds.fixed_point(g, alpha=0.3, v_init=(lo, 0.5), m=2, scrambles=2)
    with pytest.raises(ConvergenceError, match="inner='line'"):
        ds.fixed_point(g, alpha=0.6, v_init=(0.06, 0.06), m=3, scrambles=2, cross_term=False)
    with pytest.raises(InputError, match="inner"):
        ds.DeepAimSE(skip=0.5, rho1=0.5, rho2=0.5, inner="trapezoid")
    assert ds.graded_rule_resolves(_line(), lo, lo)
    assert ds.graded_rule_resolves(ds.DeepAimSE(skip=1.0, rho1=0.5, rho2=0.5, inner="graded"),
                                   lo, lo)


def _line_map_against_mc(m, v, *, points: int, samples: int) -> dict:
    """E_1, E_2 of one SE step by the line rule (RQMC 2^points x 8) against plain Monte Carlo at
    2000 and 8000 inner samples (``samples`` truths, seeds 11, 12) extrapolated in 1/n: within
    the bar plus 2.5 Monte Carlo standard errors. Returns the line rule's overlaps."""
    q1, q2 = 1.5 - v[0], 1.5 - v[1]
    o = ds.output_overlaps(m, q1=q1, q2=q2, m=points)
    lo = ds.se_step_mc(m, alpha=1.0, q1=q1, q2=q2, samples=samples, inner=2000, seed=11)
    hi = ds.se_step_mc(m, alpha=1.0, q1=q1, q2=q2, samples=samples, inner=8000, seed=12)
    for key in ("E1", "E2"):
        ref = (4 * hi[key].value - lo[key].value) / 3
        se = math.hypot(4 * hi[key].error, lo[key].error) / 3
        assert abs(o[key].value - ref) < o[key].error + ds.COVERAGE * se, (key, o[key], ref, se)
    return o


@pytest.mark.slow
def test_line_rule_map_at_small_v_against_extrapolated_monte_carlo():
    """c = 0.5, V = (0.05, 0.015): E_1, E_2 by the line rule (RQMC 2^7 x 8, bars 2.5 SE + rule
    difference) against plain Monte Carlo at 2000 and 8000 inner samples extrapolated in 1/n
    (the self-normalised posterior means are biased ~ 1/n), within the bar plus 2.5 MC standard
    errors; the line rule's bar on E_2 is at least 4 times smaller than the graded rule's."""
    m, v = _line(), (0.05, 0.015)
    q1, q2 = 1.5 - v[0], 1.5 - v[1]
    o = _line_map_against_mc(m, v, points=7, samples=20000)
    saved, ds.GRADED_V_MIN = ds.GRADED_V_MIN, 0.0
    try:
        og = ds.output_overlaps(ds.DeepAimSE(skip=0.5, rho1=0.5, rho2=0.5, inner="graded"),
                                q1=q1, q2=q2, m=7)
    finally:
        ds.GRADED_V_MIN = saved
    assert og["E2"].error > 4 * o["E2"].error


def _near_curve(model: ds.DeepAimSE, a: np.ndarray, v: tuple[float, float],
                h_in: float) -> list[int]:
    """Indices of the outer points that the line rule serves with the lines graded towards
    det A = 0 (the rest get the trapezoid in t)."""
    rows = []
    for group in ds._nodes(model, a[:, 0], a[:, 1], v[0], v[1], h_in):
        if group[1].shape[1] != ds._trapezoid_t(ds._inner_step(h_in, *v))[0].size:
            rows.extend(int(k) for k in group[0])
    return sorted(rows)


@pytest.mark.parametrize("skip", [0.1, 0.375])
def test_line_rule_posterior_near_det_a_zero_against_monte_carlo(skip):
    """c = 0.1 and 0.375 (between the skips of the published table), V = (0.05, 0.015): at outer
    points drawn from the SE's law whose disc meets det A = 0 (served by the graded lines), Z_out
    and the posterior mean of xi (g_1 V1 + a) by the line rule against seeded plain Monte Carlo
    over xi ~ N(a, V1 I) (Z_out: mean of the fibre density; the mean: its self-normalised
    average, standard error by the delta method), within 4 standard errors."""
    m, v, n_mc = _line(skip), (0.05, 0.015), 200_000
    a, b, z1, z2 = _draws(m, v, 12, seed=7)
    near = _near_curve(m, a, v, 0.25)[:4]
    assert len(near) >= 2, near
    r = ds.z_out(z1[near], z2[near], model=m, a=a[near], b=b[near], v1=v[0], v2=v[1], h_in=0.25)
    for j, k in enumerate(near):
        e = ds.z_out_mc(z1[k], z2[k], model=m, a=a[k], b=b[k], v1=v[0], v2=v[1], samples=n_mc,
                        seed=k)
        assert abs(r["z_out"][j] - e.value) < 4 * e.error, (k, r["z_out"][j], e)
        # the same draws as z_out_mc (seed k): xi ~ N(a, V1 I), weights = the fibre density
        s = np.random.default_rng(k).standard_normal((2, n_mc))
        xi = a[k][:, None] + math.sqrt(v[0]) * s
        mu, kappa = ds.layer1_weights(xi[0], xi[1], skip=skip, beta=1.0)
        x1, x2 = ds.fibre_point(mu, kappa, z1[k], z2[k], skip=skip)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            f = np.exp(-((x1 - b[k, 0]) ** 2 + (x2 - b[k, 1]) ** 2) / (2.0 * v[1])) \
                / np.abs(mu) ** 3
        f = np.nan_to_num(f, nan=0.0, posinf=0.0)
        for i in range(2):
            mean = np.sum(f * xi[i]) / np.sum(f)
            se = math.sqrt(np.sum((f * (xi[i] - mean)) ** 2)) / np.sum(f)
            got = a[k, i] + v[0] * r["g1"][j, i]
            assert abs(got - mean) < 4 * se, (k, i, got, mean, se)


@pytest.mark.slow
@pytest.mark.parametrize("skip", [0.1, 0.375])
def test_line_rule_map_between_the_table_skips_against_extrapolated_monte_carlo(skip):
    """c = 0.1 and 0.375, V = (0.05, 0.015) (docs/deep_aim.md section 4, "The command line at
    c < 1", the table of the line rule against plain Monte Carlo): E_1, E_2 by the line rule (RQMC
    2^6 x 8, bars 2.5 SE + rule difference) against plain Monte Carlo at 2000 and 8000 inner
    samples (1e4 truths) extrapolated in 1/n, within the bar plus 2.5 MC standard errors."""
    _line_map_against_mc(_line(skip), (0.05, 0.015), points=6, samples=10000)
