"""Deep AIM at finite width (THEORY 1.6, docs/deep_aim.md "Finite width"): Z_out and g_out at any
(omega, V), and the state evolution with one overlap per layer."""

from __future__ import annotations

import math

import numpy as np
import pytest
from aim_sym.numerics import aim_se, amp, wishart
from aim_sym.numerics import deep_aim as da
from aim_sym.numerics import deep_aim_se as ds
from aim_sym.numerics.records import InputError
from scipy.optimize import brentq

from aim_sym.channels import softmax
from aim_sym.compiled import compile_channel

Z1 = np.array([0.5, 1e-2, 3.0, -2.0, 7.0])
Z2 = np.array([0.3, 1e-2, -1.0, 4.0, -6.0])


@pytest.mark.parametrize("skip, rule, h_ref, tol", [(2.0, "trapezoid-xi", 0.2, 1e-8),
                                                    (0.5, "tanh-sinh-mu", 0.05, 1e-8)])
def test_reduces_to_the_small_width_fibre(skip, rule, h_ref, tol):
    """omega = 0, V = 1: Z_out and the posterior means (default inner rule, step 0.2) are those of
    numerics/deep_aim.py (another rule) at step ``h_ref``. At c = 0.5 the reference is the graded
    fibre rule at step 0.05, converged: it agrees with step 0.035 to 1e-12 (at step 0.2 it is
    itself 1.6e-5 off, so it cannot judge a 1e-8 agreement)."""
    m = ds.DeepAimSE(skip=skip, rho1=0.5, rho2=0.5)
    r = ds.z_out(Z1, Z2, model=m, a=[0.0, 0.0], b=[0.0, 0.0], v1=1.0, v2=1.0, h_in=0.2)
    d = da.posterior_means(Z1, Z2, skip=skip, beta=1.0, h_in=h_ref, rule=rule)
    if skip < 1.0:
        finer = da.posterior_means(Z1, Z2, skip=skip, beta=1.0, h_in=0.7 * h_ref, rule=rule)
        for key in ("z_out", "xi1", "xi2", "x", "y"):
            np.testing.assert_allclose(d[key], finer[key], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(r["z_out"], d["z_out"], rtol=tol)
    for got, key in ((r["g1"][:, 0], "xi1"), (r["g1"][:, 1], "xi2"), (r["g2"][:, 0], "x"),
                     (r["g2"][:, 1], "y")):
        np.testing.assert_allclose(got, d[key], atol=tol)


@pytest.mark.parametrize("skip", [2.0, 0.5])
def test_g_out_is_the_gradient_of_log_z_out(skip):
    """g^l_ab = d log Z_out / d omega^l_ab, by central differences in every entry of both layers."""
    m = ds.DeepAimSE(skip=skip, rho1=0.5, rho2=0.3)
    rng = np.random.default_rng(4)
    om1, om2 = 0.6 * rng.standard_normal(3), 0.6 * rng.standard_normal(3)
    assert_g_out_is_the_gradient(m, Z1, Z2, om1, om2, (0.7, 0.45), h_in=0.2, h=1e-5, atol=2e-7)


def assert_g_out_is_the_gradient(m, z1, z2, om1, om2, v, *, h_in: float, h: float,
                                 atol: float, rtol: float = 0.0) -> None:
    """g^l of ``ds.z_out`` against central differences (step ``h``) of log Z_out in every entry
    of omega^1 = ``om1`` and omega^2 = ``om2`` (flat (11, 12, 22)) at V = ``v``."""
    def logz(o1, o2):
        return ds.z_out(z1, z2, model=m, a=ds.whiten(o1), b=ds.whiten(o2), v1=v[0], v2=v[1],
                        h_in=h_in)["log_z_out"]

    r = ds.z_out(z1, z2, model=m, a=ds.whiten(om1), b=ds.whiten(om2), v1=v[0], v2=v[1],
                 h_in=h_in)
    g1, g2 = ds.unwhiten_gradient(r["g1"]), ds.unwhiten_gradient(r["g2"])
    for k in range(3):
        e = np.zeros(3)
        e[k] = h
        fd1 = (logz(om1 + e, om2) - logz(om1 - e, om2)) / (2 * h)
        fd2 = (logz(om1, om2 + e) - logz(om1, om2 - e)) / (2 * h)
        np.testing.assert_allclose(g1[:, k], fd1, rtol=rtol, atol=atol)
        np.testing.assert_allclose(g2[:, k], fd2, rtol=rtol, atol=atol)


def test_z_out_against_monte_carlo():
    """Z_out(z) at omega != 0, V != 1 against seeded Monte Carlo over H1 (4 standard errors)."""
    m = ds.DeepAimSE(skip=1.5, rho1=0.5, rho2=0.5)
    a, b = np.array([0.3, -0.4]), np.array([-0.5, 0.7])
    r = ds.z_out(Z1, Z2, model=m, a=a, b=b, v1=0.6, v2=0.4)
    for k in range(Z1.size):
        e = ds.z_out_mc(Z1[k], Z2[k], model=m, a=a, b=b, v1=0.6, v2=0.4, samples=100_000, seed=k)
        assert abs(r["z_out"][k] - e.value) < 4 * e.error, (k, r["z_out"][k], e)


def test_z_out_is_a_normalised_density():
    """integral Z_out(z) dz = 1 at omega != 0, V != 1 (sinh-mapped trapezoid over the z plane)."""
    m = ds.DeepAimSE(skip=2.0, rho1=0.5, rho2=0.5)
    t = np.arange(-5.0, 5.0 + 1e-9, 0.15)
    z, w = 4.0 * np.sinh(t), 0.15 * 4.0 * np.cosh(t)
    z1, z2 = (v.ravel() for v in np.meshgrid(z, z, indexing="ij"))
    mass = np.outer(w, w).ravel() @ ds.z_out(z1, z2, model=m, a=[0.4, -0.3], b=[0.2, 0.5],
                                             v1=0.5, v2=0.6, h_in=0.35)["z_out"]
    assert abs(mass - 1.0) < 1e-6


def test_small_width_expectations_match_deep_aim():
    """q = 0, V = 1 (rho -> 0): E|g_l|^2 is S_l of numerics/deep_aim.py (c = 2: S1 = 0.30327571,
    S2 = 1.83592158, docs/deep_aim.md, deterministic fibre quadrature), within the bar (the
    posterior-variance form; the legacy mean-square form's bar is about 5 times wider)."""
    m = ds.DeepAimSE(skip=2.0, rho1=1e-12, rho2=1e-12)
    r = ds.output_overlaps(m, q1=0.0, q2=0.0, m=8, scrambles=6, steps=(0.45, 0.35))
    for key, ref in (("E1", 0.30327571), ("E2", 1.83592158)):
        assert abs(r[key].value - ref) < r[key].error, (key, r[key], ref)
        assert r[key].error < 0.003


def test_nishimori_per_layer():
    """E|g_l|^2 = E[(h_true - omega).g_l]/V_l at finite (q1, q2), per layer (THEORY 1.2)."""
    m = ds.DeepAimSE(skip=1.0, rho1=0.5, rho2=0.5)
    r = ds.output_overlaps(m, q1=0.8, q2=1.1, m=8, scrambles=6, steps=(0.45, 0.35))
    for i in (1, 2):
        e, n = r[f"E{i}"], r[f"nishimori_{i}"]
        assert abs(e.value - n.value) < 2 * math.hypot(e.error, n.error), (i, e, n)


def test_posterior_variance_form_agrees_and_is_tighter():
    """E_l = (2 V_l - E tr Cov_l[.|z])/V_l^2 (law of total variance) agrees with the mean-square and
    Nishimori forms on the same points and with the legacy estimator (means-first points, an
    independent point set), and its standard error over scrambles is at least 3 times smaller
    (skip = 1, where the integrand has a kink at z1 = 0)."""
    m = ds.DeepAimSE(skip=1.0, rho1=0.5, rho2=0.5)
    r = ds.output_overlaps(m, q1=0.68, q2=0.94, m=8, scrambles=6, steps=(0.45, 0.35))
    old = ds.output_overlaps(m, q1=0.68, q2=0.94, m=8, scrambles=6, steps=(0.45, 0.35),
                             estimator="legacy")
    assert old["E1"].value == old["mean_square_1"].value
    for i in (1, 2):
        e = r[f"E{i}"]
        assert e.value == r[f"variance_{i}"].value
        for other in (r[f"mean_square_{i}"], r[f"nishimori_{i}"], old[f"E{i}"]):
            assert abs(e.value - other.value) < e.error + other.error, (i, e, other)
        assert 3 * e.extra["standard_error"] < old[f"E{i}"].extra["standard_error"]
        assert 3 * e.extra["standard_error"] < r[f"mean_square_{i}"].extra["standard_error"]


def test_information_sum_near_perfect_recovery():
    """Near V = 0 the fibre is linear and V1 E1 + V2 E2 = 2 (two observed numbers per sample):
    the identity behind alpha_PR = (c(rho1) + c(rho2))/4."""
    m = ds.DeepAimSE(skip=1.0, rho1=0.5, rho2=0.5)
    v1, v2 = 1e-4, 2e-4
    normals = ds._sobol_normals(8, 6, 3)
    s = ds._output_sums(m, m.q0[0] - v1, m.q0[1] - v2, 0.35, normals)
    tot = v1 * s[:, 0] + v2 * s[:, 1]
    se = tot.std(ddof=1) / math.sqrt(tot.size)
    assert abs(tot.mean() - 2.0) < 4 * se and se < 0.03
    assert ds.perfect_recovery_alpha(m) == pytest.approx(0.375)


def test_large_skip_layer_two_is_one_layer_softmax():
    """skip -> infinity: y = softmax(skip^2 H2) and E2 -> 2/V2 (one-layer softmax T = 2), E1 -> 0.
    At skip = 100 the posterior-variance estimator resolves the remaining O(1/skip^2) deficit
    (6.1e-4 against a bar of 1e-5; its 1/skip^2 law: test_large_skip_map_offset_is_inverse_square)."""
    m = ds.DeepAimSE(skip=100.0, rho1=0.5, rho2=0.5)
    q1, q2 = 0.6, 1.0
    r = ds.output_overlaps(m, q1=q1, q2=q2, m=8, scrambles=6, steps=(0.45, 0.35))
    deficit = 2.0 / (m.q0[1] - q2) - r["E2"].value
    assert 10 * r["E2"].error < deficit < 1e-3
    assert abs(r["E1"].value) < 1e-3 + r["E1"].error


def test_se_step_against_plain_monte_carlo():
    """One SE step: RQMC + trapezoid against seeded Monte Carlo with importance-sampled posterior
    means (independent route): within 2 bars / 4 standard errors combined."""
    m = ds.DeepAimSE(skip=2.0, rho1=0.5, rho2=0.5)
    q1, q2 = 0.7, 0.9
    r = ds.output_overlaps(m, q1=q1, q2=q2, m=8, scrambles=6, steps=(0.45, 0.35))
    mc = ds.se_step_mc(m, alpha=0.3, q1=q1, q2=q2, samples=4000, inner=2000, batches=10, seed=5)
    for k in ("E1", "E2"):
        assert abs(r[k].value - mc[k].value) < math.hypot(2 * r[k].error, 4 * mc[k].error), (k, r[k], mc[k])
        assert mc[f"q_hat{k[1]}"].value == pytest.approx(0.6 * mc[k].value)
    # the cross term E[g_1 . g_2] (shared tokens; the Monte Carlo draws the common part itself)
    c, mc12 = r["cross"], mc["E12"]
    assert abs(c.value - mc12.value) < math.hypot(2 * c.error, 4 * mc12.error), (c, mc12)


def test_bad_input():
    with pytest.raises(InputError):
        ds.DeepAimSE(skip=-1.0, rho1=0.5, rho2=0.5)
    with pytest.raises(InputError):
        ds.DeepAimSE(skip=1.0, rho1=0.0, rho2=0.5)
    m = ds.DeepAimSE(skip=1.0, rho1=0.5, rho2=0.5)
    with pytest.raises(InputError):
        ds.output_overlaps(m, q1=1.5, q2=0.5)
    with pytest.raises(InputError):
        ds.fixed_point(m, alpha=0.0, v_init=(1.0, 1.0))
    with pytest.raises(InputError):
        ds.fixed_point(m, alpha=0.1, v_init=(0.0, 1.0))
    with pytest.raises(InputError):
        ds.z_out(Z1, Z2, model=m, a=[0, 0], b=[0, 0], v1=0.0, v2=1.0)
    with pytest.raises(InputError):
        ds.fixed_point(m, alpha=0.1, v_init=(1.0, 1.0), estimator="sparse grid")
    with pytest.raises(InputError):
        ds.output_overlaps(m, q1=0.5, q2=0.5, estimator="mean")
    with pytest.raises(InputError):
        ds.DeepAimSE(skip=1.0, rho1=0.5, rho2=0.5, design="tied")
    with pytest.raises(InputError):       # shared tokens: the mean carries sqrt(rho) u, q >= rho
        ds.output_overlaps(m, q1=0.4, q2=0.9)
    with pytest.raises(InputError):
        ds.generalisation_error(m, q1=0.4, q2=0.9)
    ind = ds.DeepAimSE(skip=1.0, rho1=0.5, rho2=0.5, design="independent")
    assert ds.output_overlaps(ind, q1=0.4, q2=0.9, m=4, scrambles=2)["E1"].value > 0


# ---------------------------------------------------------------- shared tokens (2026-11-25)

def test_shared_token_law_against_matrices():
    """The outer law of the SE against the model itself: one token set X read by two targets
    S_l = W W^T / sqrt(R D) (D = 150, 8000 samples) and estimates S_hat_l = sqrt(rho_l) I +
    q'_l F_l + sqrt(q'_l (1 - q'_l)) G_l (G_l GOE: overlaps q_l, q'_12 = 0). The empirical
    covariance of the whitened (x, xi, a, b) matches the law that `_outer_points` samples (each
    entry within 4 standard errors plus 2/D: at finite D, Tr F^2/D = Tr G^2/D = 1 + 1/D on average);
    the independent-token law misses the cross-layer entries sqrt(rho1 rho2) = 0.42 by more than
    20 standard errors."""
    rho, q, dim, n = (0.3, 0.6), (0.8, 1.2), 150, 8000
    rng = np.random.default_rng(7)
    X = rng.standard_normal((n, 2, dim))
    cols = []
    for r, ql in zip(rho, q):
        S = amp.sample_target(dim, r, rng)
        F = S - math.sqrt(r) * np.eye(dim)
        A = rng.standard_normal((dim, dim))
        G = (A + A.T) / math.sqrt(2 * dim)
        qp = ql - r
        S_hat = math.sqrt(r) * np.eye(dim) + qp * F + math.sqrt(qp * (1 - qp)) * G
        cols.append((ds.whiten(amp.preactivations(X, S)), ds.whiten(amp.preactivations(X, S_hat))))
    (xi, a), (x, b) = cols

    def cov(vs):
        return np.cov(np.stack([np.concatenate([v[:, 0], v[:, 1]]) for v in vs]))

    emp = cov((x, xi, a, b))
    se = np.sqrt((np.outer(np.diag(emp), np.diag(emp)) + emp**2) / (2 * n))
    u = ds._sobol_normals(12, 1, 0)[0]
    worst = {}
    for design in ds.DESIGNS:
        model = ds.DeepAimSE(skip=1.0, rho1=rho[0], rho2=rho[1], design=design)
        aa, bb, e1, e2 = ds._outer_points(model, q[0], q[1], u, "variance")
        law = cov((bb + e2, aa + e1, aa, bb))
        assert np.max(np.abs(law - ds.outer_covariance(model, q1=q[0], q2=q[1]))) < 0.01
        worst[design] = float(np.max((np.abs(emp - law) - 2.0 / dim) / se))
    assert worst["shared"] < 4 and worst["independent"] > 20, worst


def test_designs_agree_at_small_rho_and_differ_at_finite_rho():
    """The two token designs on one point set (paired, at V = (0.82, 0.56)): at rho = 0.01 the
    common part sqrt(rho) u is negligible, E_l shift far below their bars; at rho = 0.5 they
    differ: E_2 by more than 3 paired standard errors, and the cross term E[g_1 . g_2] is zero for
    independent tokens (exactly, by the symmetry (x, b) -> (-x, -b), z -> -z, which the shared
    law breaks) and positive for shared ones (more than 5 bars)."""
    normals = ds._sobol_normals(8, 6, 0)
    for rho in (0.01, 0.5):
        q1, q2 = rho + 0.18, rho + 0.44
        res = {}
        for design in ds.DESIGNS:
            m = ds.DeepAimSE(skip=1.0, rho1=rho, rho2=rho, design=design)
            res[design] = ds._output_sums(m, q1, q2, 0.35, normals)
        d = res["shared"] - res["independent"]
        se_d = d.std(axis=0, ddof=1) / math.sqrt(d.shape[0])
        bar = {k: ds.COVERAGE * v.std(axis=0, ddof=1) / math.sqrt(v.shape[0]) for k, v in res.items()}
        ind, sh = res["independent"].mean(axis=0), res["shared"].mean(axis=0)
        assert abs(ind[9]) < bar["independent"][9]
        if rho == 0.01:
            assert np.all(np.abs(d.mean(axis=0)[:2]) < 0.05 * bar["shared"][:2])
            assert abs(sh[9]) < bar["shared"][9]
        else:
            assert abs(d.mean(axis=0)[1]) > 3 * se_d[1], (d.mean(axis=0), se_d)
            assert sh[9] > 5 * bar["shared"][9], (sh[9], bar["shared"][9])


def test_cross_term_forms_agree_with_and_without_cross_overlap():
    """E[g g^T] (2 x 2, whitened) in its variance, mean-square and Nishimori forms agree with
    shared tokens at q'_12 = 0 (the SE) and at q'_12 = 0.12 (outer law with the cross-overlap,
    inner posterior with correlated deviations): the output side of the 2 x 2 SE is consistent;
    q'_12 = 0 reproduces the SE's own columns."""
    model = ds.DeepAimSE(skip=1.0, rho1=0.5, rho2=0.5)
    q1, q2 = 0.68, 0.94
    v1, v2 = 1.5 - q1, 1.5 - q2
    normals = ds._sobol_normals(7, 6, 2)
    base = ds._output_sums(model, q1, q2, 0.35, normals)
    np.testing.assert_allclose(ds._matrix_sums(model, q1, q2, 0.0, 0.35, normals),
                               base[:, [0, 1, 9, 4]], rtol=1e-10)
    q12 = 0.12
    s_inv = np.linalg.inv(np.array([[v1, -q12], [-q12, v2]]))
    ms, ni = [], []
    for k in range(normals.shape[0]):
        a, b, e1, e2 = ds._outer_points(model, q1, q2, normals[k], "variance", q12=q12)
        z1, z2 = ds.statistics(*(a + e1).T, *(b + e2).T, skip=1.0, beta=1.0)
        p = ds.posterior(model, z1, z2, *a.T, *b.T, v1, v2, 0.35, c12=-q12)
        g = np.einsum("ij,njk->nik", s_inv, np.stack([p["d_xi"], p["d_x"]], axis=1))
        gt = np.einsum("ij,njk->nik", s_inv, np.stack([e1, e2], axis=1))
        ms.append([np.mean(np.sum(g[:, i] * g[:, j], 1)) for i, j in ((0, 0), (1, 1), (0, 1))])
        ni.append([np.mean(np.sum(gt[:, i] * g[:, j], 1)) for i, j in ((0, 0), (1, 1), (0, 1))])
    var = ds._matrix_sums(model, q1, q2, q12, 0.35, normals)[:, :3]
    for other in (np.array(ms), np.array(ni)):
        d = var - other
        se = d.std(axis=0, ddof=1) / math.sqrt(d.shape[0])
        assert np.all(np.abs(d.mean(axis=0)) < 4 * se + 1e-3), (d.mean(axis=0), se)
    # the cross-overlap moves E_12 (teeth: the assertion above is not trivially satisfied)
    assert var[:, 2].mean() - base[:, 9].mean() > 0.05


def _one_layer_v(alpha: float, rho: float = 0.5) -> float:
    """The one-layer softmax SE fixed point at T = 2, V = mmse_rho(V/(4 alpha)) (THEORY 1.2)."""
    return brentq(lambda v: float(wishart.mmse(v / (4 * alpha), rho=rho)) - v, 1e-3, 1.0,
                  xtol=1e-14)


def _large_skip_map_offset(skip: float, alpha: float, v_one: float) -> tuple[float, float]:
    """One SE map step from (mmse_1, mmse_2) = (1, v_one): layer 2's new mmse minus v_one, with
    its standard error over scrambles."""
    m = ds.DeepAimSE(skip=skip, rho1=0.5, rho2=0.5)
    d = ds.se_map(m, alpha=alpha, q1=0.5, q2=1.5 - v_one, m=7, scrambles=6)["mmse2"] - v_one
    return float(d.mean()), float(d.std(ddof=1) / math.sqrt(d.size))


def test_large_skip_map_offset_is_inverse_square():
    """skip -> infinity: from the one-layer fixed point V2 = v_one the two-layer map moves layer 2
    by delta(skip) = k/skip^2 (k = 0.518 at alpha = 0.1: the same at skip = 100 and 300 within
    4 standard errors, which are about 1 % of k; a 1/skip law would differ by 3 times)."""
    alpha = 0.1
    v_one = _one_layer_v(alpha)
    (d1, e1), (d3, e3) = (_large_skip_map_offset(c, alpha, v_one) for c in (100.0, 300.0))
    assert d1 > 0 and d3 > 0 and e1 < 0.02 * d1
    assert abs(d1 * 100.0**2 - d3 * 300.0**2) < 4 * math.hypot(e1 * 100.0**2, e3 * 300.0**2)


@pytest.mark.slow
def test_large_skip_fixed_point_is_one_layer_softmax():
    """skip = 100, alpha = 0.1: layer 2's fixed point is the one-layer softmax SE of rho = 0.5
    (V = mmse(V/(4 alpha))) plus the O(1/skip^2) offset delta/(1 - J) (delta: one map step from
    the one-layer point, J = d mmse(V/(4 alpha))/dV there), within twice the bar plus 4 standard
    errors of delta; layer 1 stays near mmse = 1."""
    alpha = 0.1
    v_one = _one_layer_v(alpha)
    model = ds.DeepAimSE(skip=100.0, rho1=0.5, rho2=0.5)
    fp = ds.fixed_point(model, alpha=alpha, v_init=(1.0, 1.0), m=9)
    l1, l2 = fp["layers"]
    delta, delta_se = _large_skip_map_offset(100.0, alpha, v_one)
    h = 1e-5
    jac = (float(wishart.mmse((v_one + h) / (4 * alpha), rho=0.5))
           - float(wishart.mmse((v_one - h) / (4 * alpha), rho=0.5))) / (2 * h)
    expected = v_one + delta / (1 - jac)
    assert abs(l2["mmse"] - expected) < 2 * l2["mmse_error"] + 4 * delta_se / (1 - jac), \
        (l2, expected, v_one)
    assert 0.999 < l1["mmse"] <= 1.0
    # Phi: the one-layer softmax Phi (aim_se, coordinates beta (h_ab - h_aa)) plus alpha times the
    # change of coordinates to z, log(2 sqrt 2) - E log J (layer 1 contributes O(q_hat_1^2))
    one = aim_se.bayes_optimal(aim_se.fixed_points(compile_channel(softmax(2)), alpha=alpha,
                                                   rho=0.5))
    assert one.mmse == pytest.approx(v_one, abs=1e-9)
    bound = ds.psi_out_bound(model, q2=l2["q"])
    e_log_j = -1 - math.log(2 * math.pi * l2["mmse"]) - bound.value
    expected = one.phi + alpha * (math.log(2 * math.sqrt(2)) - e_log_j)
    assert abs(fp["phi"] - expected) < fp["phi_error"] + alpha * bound.error, (fp["phi"], expected)
    assert 0 < fp["e_gen"] < fp["e_gen_plugin"]


@pytest.mark.slow
def test_fixed_point_seeds_agree_and_perfect_recovery():
    """c = 1, rho = (0.5, 0.5): the alpha = 0.1 fixed point from two independent scramble seeds
    agrees within the combined bars; at alpha = 1 > alpha_PR = 0.375 the informed start reaches
    V = 0."""
    m = ds.DeepAimSE(skip=1.0, rho1=0.5, rho2=0.5)
    a = ds.fixed_point(m, alpha=0.1, v_init=(1.0, 1.0), m=9, seed=0)
    b = ds.fixed_point(m, alpha=0.1, v_init=(1.0, 1.0), m=9, seed=1)
    for la, lb in zip(a["layers"], b["layers"]):
        assert abs(la["mmse"] - lb["mmse"]) < 1.5 * math.hypot(la["mmse_error"], lb["mmse_error"])
    assert a["layers"][1]["mmse"] < a["layers"][0]["mmse"]      # layer 2 learned first
    pr = ds.fixed_point(m, alpha=1.0, v_init=(1e-3, 1e-3), m=8)
    assert pr["perfect_recovery"] and pr["stable"]


@pytest.mark.slow
def test_fixed_point_designs_differ_and_cross_term():
    """c = 1, rho = (0.5, 0.5), alpha = 0.1, 2^9 x 8 points: shared tokens move the fixed point
    (mmse_1 up, mmse_2 down beyond the combined bars; at 2^11 x 8: +0.0014, -0.0023); the
    cross term q_hat_12 is zero within its bar for independent tokens and positive (more than 5
    bars) for shared ones, and its three forms agree; the first-order effect of the neglected
    cross-overlap on mmse_2 is below the bar."""
    fps = {d: ds.fixed_point(ds.DeepAimSE(skip=1.0, rho1=0.5, rho2=0.5, design=d), alpha=0.1,
                             v_init=(1.0, 1.0), m=9) for d in ds.DESIGNS}
    sh, ind = fps["shared"], fps["independent"]
    (s1, s2), (i1, i2) = sh["layers"], ind["layers"]
    assert s1["mmse"] > i1["mmse"]        # paired point sets: the sign is resolved
    assert i2["mmse"] - s2["mmse"] > s2["mmse_error"] + i2["mmse_error"]
    assert abs(ind["q_hat_12"]) < ind["q_hat_12_error"]
    assert sh["q_hat_12"] > 5 * sh["q_hat_12_error"] and sh["cross_correlation"] > 0
    for key in ("q_hat_12_nishimori", "q_hat_12_mean_square"):
        assert abs(sh[key] - sh["q_hat_12"]) < sh[key + "_error"] + sh["q_hat_12_error"]
    eff = ds.cross_overlap_effect(ds.DeepAimSE(skip=1.0, rho1=0.5, rho2=0.5), fp=sh, m=8)
    assert eff["below_bars"][1] and eff["delta_mmse"][1] < 0


# ---------------------------------------------------------------- free entropy, e_gen, curve

def test_free_entropy_is_stationary_in_each_overlap():
    """d Psi_out/d q_l (central difference of the RQMC Psi_out, one point set) = E_l/2: the
    stationarity of Phi in q_l reproduces q_hat_l = 2 alpha E_l (THEORY 1.1, 1.6), per layer."""
    m = ds.DeepAimSE(skip=1.0, rho1=0.5, rho2=0.5)
    r = ds.stationarity(m, q1=0.68, q2=0.94, dq=0.02, m=8, scrambles=6)
    for i in (1, 2):
        d, h = r[f"dpsi_dq{i}"], r[f"half_E{i}"]
        assert abs(d.value - h.value) < d.error + h.error, (i, d, h)
        assert d.error < 0.2 * h.value       # teeth: a factor 2 (E_l instead of E_l/2) fails


def test_prior_potential_i_mmse():
    """Psi_S(q_hat) = q_hat Q0/4 - I(1/q_hat): d Psi_S/d q_hat = (Q0 - mmse(1/q_hat))/4 (so the
    stationarity of Phi in q_hat gives q = Q0 - mmse), and Psi_S ~ rho q_hat/4 as q_hat -> 0."""
    rho, qh, d = 0.5, 1.7, 1e-4
    fd = (ds.prior_potential(qh + d, rho=rho).value
          - ds.prior_potential(qh - d, rho=rho).value) / (2 * d)
    assert fd == pytest.approx((1.5 - float(wishart.mmse(1 / qh, rho=rho))) / 4, abs=1e-7)
    assert ds.prior_potential(1e-6, rho=rho).value == pytest.approx(rho * 1e-6 / 4, rel=1e-4)
    assert ds.prior_potential(0.0, rho=rho).value == 0.0


def test_psi_out_one_layer_limit_and_layer_one_information():
    """Psi_out = bound - I(xi; z | omega) with bound = -1 - log(2 pi V2) - E log J: at skip = 100
    the information vanishes and Psi_out is the one-layer softmax Psi_out (aim_se, statistics
    beta (h_ab - h_aa)) + log(2 sqrt 2) - E log J; at skip = 1 the information is > 0."""
    cc = compile_channel(softmax(2))
    q1, q2 = 0.6, 1.0
    _, psi_one, _ = aim_se.output_moments(cc, q=q2, V=1.5 - q2)
    m = ds.DeepAimSE(skip=100.0, rho1=0.5, rho2=0.5)
    r = ds.output_overlaps(m, q1=q1, q2=q2, m=8, scrambles=6, steps=(0.45, 0.35))["psi_out"]
    bound = ds.psi_out_bound(m, q2=q2)
    v2 = 1.5 - q2
    e_log_j = -1 - math.log(2 * math.pi * v2) - bound.value
    # the one-layer Psi_out is in the coordinates u = beta (h_ab - h_aa): |det d u/d x| = 2 sqrt 2
    assert psi_one == pytest.approx(-1 - math.log(2 * math.pi * v2) - math.log(2 * math.sqrt(2)),
                                    rel=1e-12)
    one_layer = psi_one + math.log(2 * math.sqrt(2)) - e_log_j
    assert abs(r.value - one_layer) < r.error + bound.error and r.error < 0.02
    m1 = ds.DeepAimSE(skip=1.0, rho1=0.5, rho2=0.5)
    r1 = ds.output_overlaps(m1, q1=q1, q2=q2, m=8, scrambles=6, steps=(0.45, 0.35))["psi_out"]
    assert ds.psi_out_bound(m1, q2=q2).value - r1.value > 10 * r1.error


@pytest.mark.parametrize("skip, beta", [(1.0, 1.0), (0.5, 2.0)])
def test_e_gen_against_nested_monte_carlo_on_matrices(skip, beta):
    """Bayes e_gen (RQMC, h and h' independent given omega, whitened statistics) and the plug-in
    error against nested Monte Carlo on the matrices themselves (A = c I + softmax(beta H1),
    y = softmax(beta A H2 A^T)), at an informed and at the uninformed (q_l = rho_l, alpha = 0)
    overlaps (THEORY 1.5)."""
    m = ds.DeepAimSE(skip=skip, rho1=0.5, rho2=0.3, beta=beta)
    for k, (q1, q2) in enumerate(((0.68, 0.94), (0.5, 0.3))):
        r = ds.generalisation_error(m, q1=q1, q2=q2, m=12)
        mc = ds.generalisation_error_mc(m, q1=q1, q2=q2, outer=3000, inner=32, seed=k)
        for key in ("e_gen", "e_gen_plugin"):
            assert abs(r[key].value - mc[key].value) < r[key].error + 4 * mc[key].error, \
                (key, r[key], mc[key])
        assert r["e_gen"].value < r["e_gen_plugin"].value


def test_e_gen_limits():
    """q = 0 (rho -> 0, alpha = 0): e_gen is the prior predictive variance sum_ab Var(y_ab)
    (direct Monte Carlo of y from the prior); V -> 0: e_gen -> 0 linearly, and 0 at V = 0."""
    m = ds.DeepAimSE(skip=1.0, rho1=1e-12, rho2=1e-12)
    r = ds.generalisation_error(m, q1=0.0, q2=0.0)["e_gen"]
    mc = ds.generalisation_error_mc(m, q1=0.0, q2=0.0, outer=2, inner=100_000, seed=3)["e_gen"]
    assert abs(r.value - mc.value) < r.error + 4 * mc.error and r.error < 3e-3
    m = ds.DeepAimSE(skip=1.0, rho1=0.5, rho2=0.5)
    small = [ds.generalisation_error(m, q1=1.5 - v, q2=1.5 - v)["e_gen"].value for v in (1e-6, 1e-5)]
    assert 0 < small[0] < 1e-5 and small[1] / small[0] == pytest.approx(10, rel=0.05)
    assert ds.generalisation_error(m, q1=1.5, q2=1.5)["e_gen"].value == 0.0


def _fp(phi, mmse, stable=True, pr=False, err=1e-3):
    return {"phi": phi, "stable": stable, "perfect_recovery": pr,
            "layers": [{"mmse": x, "mmse_error": err} for x in mmse]}


def test_flag_bayes_optimal():
    """The stable fixed point of largest Phi is flagged, with any start that landed on it; a stable
    perfect-recovery point (Phi -> +infinity) wins; unstable points are never flagged."""
    fps = [_fp(1.0, (0.8, 0.5)), _fp(1.2, (0.3, 0.1)), _fp(1.0 + 1e-9, (0.8, 0.5 + 1e-4)),
           _fp(5.0, (0.6, 0.6), stable=False)]
    assert [f["bayes_optimal"] for f in ds.flag_bayes_optimal(fps)] == [False, True, False, False]
    fps[1]["phi"] = 0.5
    assert [f["bayes_optimal"] for f in ds.flag_bayes_optimal(fps)] == [True, False, True, False]
    fps.append(_fp(None, (0.0, 0.0), pr=True, err=0.0))
    assert [f["bayes_optimal"] for f in ds.flag_bayes_optimal(fps)] == [False] * 4 + [True]


def test_curve_bad_input():
    m = ds.DeepAimSE(skip=1.0, rho1=0.5, rho2=0.5)
    with pytest.raises(InputError):
        ds.curve(m, alphas=[])
    with pytest.raises(InputError):
        ds.curve(m, alphas=[0.1, -0.2])
    with pytest.raises(InputError):
        ds.generalisation_error(m, q1=1.6, q2=0.5)
    with pytest.raises(InputError):
        ds.stationarity(m, q1=0.01, q2=0.5, dq=0.02)
    with pytest.raises(InputError):
        ds.psi_out_bound(ds.DeepAimSE(skip=0.5, rho1=0.5, rho2=0.5), q2=0.5)


@pytest.mark.slow
def test_curve_follows_the_uninformed_branch():
    """curve: each row is the fixed point from the uninformed start (warm start changes nothing
    beyond the bars); along the branch dPhi/dalpha = Psi_out (envelope: stationarity), mmse and
    e_gen fall, and the plug-in error exceeds e_gen (c = 2, rho = (0.5, 0.5), 2^8 x 8 points)."""
    m = ds.DeepAimSE(skip=2.0, rho1=0.5, rho2=0.5)
    calls = []
    rows = ds.curve(m, alphas=[0.08, 0.12], m=8, progress=lambda k, n, t: calls.append(k))
    assert calls == [0, 1, 2] and [r["alpha"] for r in rows] == [0.08, 0.12]
    cold = ds.fixed_point(m, alpha=0.12, v_init=(1.0, 1.0), m=8)
    for a, b in zip(rows[1]["layers"], cold["layers"]):
        assert abs(a["mmse"] - b["mmse"]) < a["mmse_error"]
    a, b = rows
    slope = (b["phi"] - a["phi"]) / 0.04
    assert abs(slope - (a["psi_out"] + b["psi_out"]) / 2) < (a["phi_error"] + b["phi_error"]) / 0.04
    assert b["phi_error"] / 0.04 < 0.1 * abs(slope)
    for r in rows:
        assert r["stable"] and not r["perfect_recovery"]
        assert 0 < r["e_gen"] < r["e_gen_plugin"] and r["e_gen_error"] < 0.02 * r["e_gen"]
    assert b["e_gen"] + b["e_gen_error"] < a["e_gen"] - a["e_gen_error"]
    assert all(lb["mmse"] < la["mmse"] for la, lb in zip(a["layers"], b["layers"]))


def test_cross_overlap_effect_at_a_given_point():
    """cross_overlap_effect on a point shaped like the alpha = 0.1 shared-token fixed point
    (c = 1, rho = (0.5, 0.5)): the cross-overlap raises the cross term (dE_12/dq'_12 about 1.2,
    many bars from 0) and E_2; q'_12 = q_hat_12 mmse_1 mmse_2; delta mmse = (I - J)^-1 dF/dq'_12
    q'_12 (checked against the returned pieces); a perfect-recovery point
    is refused."""
    model = ds.DeepAimSE(skip=1.0, rho1=0.5, rho2=0.5)
    layers = [{"q": 0.6765, "mmse": 0.8235, "mmse_error": 3.2e-4, "q_hat": 0.1673},
              {"q": 0.9439, "mmse": 0.5561, "mmse_error": 3.7e-4, "q_hat": 0.5383}]
    fp = {"alpha": 0.1, "layers": layers, "perfect_recovery": False, "q_hat_12": 0.008,
          "q_hat_12_error": 2.4e-4, "jacobian": [[0.137, 0.068], [0.033, 0.397]]}
    r = ds.cross_overlap_effect(model, fp=fp, m=7, scrambles=4)
    d12 = r["dE12_dq12"]
    assert d12.value > 10 * d12.error and 0.8 < d12.value < 1.6, d12
    assert r["dE_dq12"][1].value > 2 * r["dE_dq12"][1].error
    assert r["q12"].value == pytest.approx(0.008 * 0.8235 * 0.5561)
    assert r["delta_mmse"][1] < 0 and abs(r["delta_mmse"][1]) < 3.7e-4
    assert r["loop_gain"] == pytest.approx(2 * 0.1 * 0.8235 * 0.5561 * d12.value)
    dmmse = [(ds._prior_step(x["q_hat"] * (1 + 1e-4), 0.5) - ds._prior_step(x["q_hat"] * (1 - 1e-4), 0.5))
             / (2e-4 * x["q_hat"]) for x in layers]
    df = [dmmse[i] * 0.2 * r["dE_dq12"][i].value for i in range(2)]
    expected = np.linalg.solve(np.eye(2) - np.array(fp["jacobian"]), df) * r["q12"].value
    np.testing.assert_allclose(r["delta_mmse"], expected, rtol=1e-9)
    with pytest.raises(InputError):
        ds.cross_overlap_effect(model, fp={**fp, "perfect_recovery": True})


def test_cross_overlap_term_is_added_to_the_bars():
    """add_cross_overlap_term (called by fixed_point for shared tokens): each layer's mmse and q
    bars grow by (|delta mmse| + its error) / (1 - loop gain), reported per layer."""
    model = ds.DeepAimSE(skip=1.0, rho1=0.5, rho2=0.5)
    layers = [{"q": 0.6765, "q_error": 3.2e-4, "mmse": 0.8235, "mmse_error": 3.2e-4,
               "q_hat": 0.1673},
              {"q": 0.9439, "q_error": 3.7e-4, "mmse": 0.5561, "mmse_error": 3.7e-4,
               "q_hat": 0.5383}]
    fp = {"alpha": 0.1, "layers": layers, "perfect_recovery": False, "q_hat_12": 0.008,
          "q_hat_12_error": 2.4e-4, "jacobian": [[0.137, 0.068], [0.033, 0.397]],
          "e_gen_error": 6e-4, "e_gen_plugin_error": 7e-4, "phi_error": 5e-4}
    out = ds.add_cross_overlap_term(model, fp, m=7, scrambles=4)
    co = out["cross_overlap"]
    # e_gen and Phi bars carry the cross-overlap too (cross_overlap_output_effect)
    for key, term in (("e_gen", "e_gen_term"), ("e_gen_plugin", "e_gen_plugin_term"),
                      ("phi", "phi_term")):
        assert out[f"{key}_error"] == pytest.approx(fp[f"{key}_error"] + co[term]) and co[term] > 0
    assert co["delta_phi"] == pytest.approx(
        0.008 * co["q12"] / (1 - co["loop_gain"]) / 4, rel=1e-12)
    assert co["q12"] == pytest.approx(0.008 * 0.8235 * 0.5561)
    assert co["trusted"] and 0 < co["loop_gain"] < 0.5
    for x, y, d, e, t in zip(layers, out["layers"], co["delta_mmse"], co["delta_mmse_error"],
                             co["term"]):
        assert t == pytest.approx((abs(d) + e) / (1 - co["loop_gain"]))
        assert y["mmse_error"] == pytest.approx(x["mmse_error"] + t) and t > 0
        assert y["cross_overlap_term"] == t
