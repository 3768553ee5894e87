"""Tests of the deep tied-attention SMI engine (aim_sym.smi, numerics.smi); THEORY 2, 4."""

import math

import mpmath as mp
import numpy as np
import pytest
import smi_mc_oracles
from aim_sym.numerics import smi, smi_branches, smi_fibre, smi_route_a
from aim_sym.numerics.records import InputError

from aim_sym import smi as sym


def test_symbolic_softmax_inversion_fibre():
    assert sym.check_softmax_form()
    assert sym.check_inversion()
    assert sym.check_fibre(2, samples=2) < 1e-30


def test_compiled_inversion_numpy_and_mpmath():
    for backend in ("numpy", "mpmath"):
        f = sym.compile_functions(2, backend)
        out = f["forward"](0.3, -1.2, 0.5, 0.7, 1.0, 1.3)
        h = f["h_from_y"](*out[2:], 1.3)
        assert min(abs(h[0] - out[0]) + abs(h[1] - out[1]),
                   abs(h[0] + out[0]) + abs(h[1] + out[1])) < 1e-10


def test_gout_is_gradient_of_log_zout_mpmath():
    mp.mp.dps = 50
    x = [mp.mpf(t) for t in (-2.2, -1.1, 0.0, 1.3, 2.4)]
    nodes = [(a, b, mp.mpf(1) / 25) for a in x for b in x]   # fixed rule: identity is exact
    for h, om, v in [((0.7, -0.4), (0.3, -0.2, 0.5, 0.1), (0.8, 0.6)),
                     ((1.5, 0.9), (-0.6, 0.4, -0.2, 0.9), (0.5, 0.3))]:
        h = [mp.mpf(t) for t in h]
        om = [mp.mpf(t) for t in om]
        v = [mp.mpf(t) for t in v]
        _, g = smi.zout_mp(h, om, v, nodes)
        eps = mp.mpf(10) ** -20
        for k in range(4):
            op, omn = list(om), list(om)
            op[k] += eps
            omn[k] -= eps
            fd = (mp.log(smi.zout_mp(h, op, v, nodes)[0]) - mp.log(smi.zout_mp(h, omn, v, nodes)[0])) / (
                2 * eps)
            assert abs(fd - g[k]) < mp.mpf(10) ** -30
    mp.mp.dps = 15


def test_sign_symmetry_and_block_diagonality():
    s = smi_route_a.stats(0.0, 0.4, c=1.0, beta=1.0, n_w1=2, n_w2=6, n_h=16, n_z=20)
    assert abs(s["K1"]) < 1e-14 and abs(s["K12"]) < 1e-14  # E[z_1 | y, omega] = 0
    s0 = smi_route_a.stats(0.0, 0.0, c=1.0, beta=1.0, n_w1=2, n_w2=2, n_h=16, n_z=20)
    assert abs(s0["K2"]) < 1e-14                               # E[z | y] = 0: Q = 0 fixed point
    F = smi_route_a.q0_gauss_hermite(16, 20, c=1.0, beta=1.0)
    assert F["cross"] == 0.0


def test_weak_quadrature_converges():
    a = smi_route_a.q0_gauss_hermite(48, 64, c=1.0, beta=1.0)
    b = smi_route_a.q0_gauss_hermite(64, 80, c=1.0, beta=1.0)
    assert abs(a["mass"] - 1) < 1e-10
    assert abs(a["lam1"] - b["lam1"]) < 1e-6 and abs(a["lam2"] - b["lam2"]) < 1e-5
    assert abs(b["lam1"] - 0.1624184) < 2e-7 and abs(b["lam2"] - 5.391480) < 2e-6


def test_weak_quadrature_agrees_with_montecarlo():
    q = smi_route_a.q0_gauss_hermite(48, 64, c=1.0, beta=1.0)
    mc = smi_mc_oracles.montecarlo_stability(samples=1500, inner=1500, seed=3)
    for k in ("lam1", "lam2"):
        assert abs(mc[k].value - q[k]) < 4 * mc[k].error + 0.01 * q[k]


def test_nishimori_identity_route_a_tight():
    # exact for the discretised z_1 measure: only the h rule limits it (measured 1.4e-6)
    q2, v2 = 0.4, 0.6
    s = smi_route_a.stats(0.0, q2, c=1.0, beta=1.0, n_w1=2, n_w2=10, n_h=32, n_z=24)
    assert abs(s["mass"] - 1) < 1e-6
    assert abs(s["K2"] - (2 - s["trcov2"] / v2) / v2) < 1e-5 * s["K2"]


def test_free_entropy_stationarity():
    # dPhi/dQ_22 = -Qhat/2 + alpha dPsi/dQ = 0 with Qhat = alpha K2  <=>  dPsi/dQ = K2 / 2;
    # route A at orders (10, 32, 24): measured residual 0.93% (0.29% at (14, 48, 24), slow test)
    r = smi.nishimori_stationarity(0.4)
    assert r["nishimori"] < 1e-5
    assert r["stationarity"] < 0.012
    # dPhi/dQhat = -Q/2 + 1/2 - 1/(2(1 + Qhat)) = 0 at Q = Qhat/(1 + Qhat)
    qh = 0.7
    phi = lambda x, q=qh / (1 + qh): -q * x / 2 + x / 2 - math.log1p(x) / 2  # noqa: E731
    assert abs((phi(qh + 1e-5) - phi(qh - 1e-5)) / 2e-5) < 1e-8


# (h, omega_2, true z_1, reference ||Cov[z_1|y,omega_2] - I||_F^2) at q2 = 0.975, c = beta = 1;
# references by a trapezoid rule on [-9, 9]^2 with steps 0.004 and 0.002 (agree to 1e-15);
# used by test_smi_sequential
FIBRE_REFS = [
    ((0.7333518360437083, 0.7494988140289992), (0.35998639732542054, 0.29043256953911467),
     (-0.53695324, 0.5811181), 0.04950760829118134),
    ((-0.5377247372124383, 0.5590320806728866), (-0.4760546773927752, 0.5913132560049424),
     (-0.73645409, -0.16290995), 0.4685888275594874),
    ((-0.5386480129116761, 4.179678014375675), (-0.372855069527284, 2.0170753442465603),
     (2.11783876, -1.11202076), 9.691541277845038),
]


def test_omega_rule_moments():
    w0, w1, w = smi_fibre.graded_omega_rule((6, 16), 0.9)
    assert abs(w.sum() - 1) < 1e-7
    assert abs(w @ w0**2 - 0.9) < 1e-6 and abs(w @ (w0 * w1)) < 1e-6
    assert abs(w @ w0**4 - 3 * 0.81) < 1e-5


def test_symbolic_logit_chart():
    assert sym.check_logit_chart()
    f = sym.compile_functions(2, "numpy")
    z0, z1 = 0.7, -0.4
    a, b = z0 * (z0 - z1), z1 * (z1 - z0)
    inv = f["attention_inverse_ab"](a, b, 1.0)
    ref = f["attention_inverse"](z0, z1, 1.0, 1.0)
    assert max(abs(x - y) for x, y in zip(inv, ref, strict=True)) < 1e-14
    zz00, zz01, zz11, _ = f["logit_chart"](a, b, 1.0)
    assert abs(zz00 - z0**2) + abs(zz01 - z0 * z1) + abs(zz11 - z1**2) < 1e-14


def test_cross_block_montecarlo_small():
    e = smi.cross_block_montecarlo(samples=100, inner=400, seed=2)
    assert abs(e.value) < 4 * e.error + 1e-12


def test_egen_limits():
    # plug-in e_gen (THEORY 2.4): largest with nothing learned, smaller when layer 2 is known
    e0, d0 = smi_branches.egen_estimate(0.0, 0.0, skip=1.0, beta=1.0)
    e1, d1 = smi_branches.egen_estimate(0.0, 0.999999, skip=1.0, beta=1.0)
    assert e0 - d0 > e1 + d1 and e1 - d1 > 0


@pytest.mark.parametrize("kw", [dict(layers=3), dict(tokens=3), dict(skip=0.0),
                                dict(skip=-1.0), dict(beta=0.0)])
def test_bad_input(kw):
    with pytest.raises(InputError) as e:
        smi.weak_thresholds(**kw)
    assert list(kw)[0] in str(e.value)


def test_bad_alpha():
    with pytest.raises(InputError, match="alpha"):
        smi.fixed_point(alpha=-1.0)


@pytest.mark.slow
def test_weak_thresholds_full():
    out = smi.weak_thresholds()
    weak = {d["layer"]: d for d in out if d["kind"] == "weak"}
    assert abs(weak[2]["value"] - 0.185477) < 1e-5
    assert abs(weak[1]["value"] - 6.15693) < 1e-4
    assert all(np.isfinite(d["error"]) for d in out)


@pytest.mark.slow
def test_layer2_point_small_q2_bar_covers_a_converged_route_a():
    # q2 < 0.1 (just above the layer-2 weak threshold): the lattice below q2 = 0.1 (rungs 6, 7,
    # ladder to 8); route A on a converged h rule (scale 2.0: orders (96, 8) .. (128, 20) agree
    # to 1e-10 in K2 here, docs/smi_small_skip.md) is the oracle: its Newton step must sit
    # inside the bar (~2 min)
    alpha = 0.19
    r = smi.fixed_point(alpha=alpha)
    q, err = r["Q"][1], r["error"][1]
    assert 0 < q < 0.1 and r["branch"] == "layer 2 (q1 = 0)" and err < 1e-7

    def resid(x, n_h):
        s = smi_route_a.stats(0.0, x, c=1.0, beta=1.0, n_w1=1, n_w2=8, n_h=n_h, n_z=64,
                              sigma_h=2.0)
        return x - (1 - x) * alpha * s["K2"]

    d = 1e-3 * q
    shift = -resid(q, 96) / ((resid(q + d, 32) - resid(q - d, 32)) / (2 * d))
    assert abs(shift) <= err, (q, err, shift)


def test_weak_rule_order_is_capped_where_gauss_hermite_stays_finite():
    # the finest rotated rule has order + 48 Gauss-Hermite nodes; numpy's hermegauss returns
    # NaN weights from 372 nodes on, and order 384 returned NaN thresholds before the cap
    import numpy as np
    from aim_sym.numerics import smi
    from aim_sym.numerics.records import InputError

    assert np.isfinite(np.polynomial.hermite_e.hermegauss(320 + 48)[1]).all()
    for bad in (322, 384, 7, 9):
        with pytest.raises(InputError, match="order"):
            smi.stability_matrix(skip=1.0, beta=1.0, order=bad)
