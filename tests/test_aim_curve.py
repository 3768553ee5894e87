"""The traced SE curve (aim_curve.curve) against its per-alpha route (aim_se.fixed_points)."""

from types import SimpleNamespace

import numpy as np
import pytest
from aim_sym.numerics import aim_curve, aim_se
from aim_sym.numerics.records import InputError

from aim_sym.channels import hardmax, linear, softmax
from aim_sym.compiled import compile_channel


@pytest.fixture(scope="module")
def hm2():
    return compile_channel(hardmax(2))


def test_output_moments_many_is_the_scalar_rule(hm2):
    q, V = np.array([1.2, 0.7, 0.05]), np.array([0.3, 0.8, 0.45])
    E, psi, tail = aim_curve.output_moments_many(hm2, q=q, V=V, level=-1)
    for i in range(3):
        e1, p1, t1 = aim_se.output_moments(hm2, q=q[i], V=V[i], level=-1)
        assert E[i] == pytest.approx(e1, rel=1e-13) and psi[i] == pytest.approx(p1, rel=1e-13)
        assert tail[i] == pytest.approx(t1, rel=1e-12)
    # a smaller box changes the value by less than the tail bound it reports
    Eb, _, tb = aim_curve.output_moments_many(hm2, q=q, V=V, level=0, tail_sd=6.0)
    E0, _, _ = aim_curve.output_moments_many(hm2, q=q, V=V, level=0)
    assert np.all(np.abs(Eb - E0) <= tb + 1e-12 * E0) and np.all(tb > 0)


HM_ALPHAS = [0.002, 0.12, 0.6, 2.0]


@pytest.fixture(scope="module")
def hm2_reference(hm2):
    return aim_curve.curve(hm2, alphas=HM_ALPHAS, rho=0.5, tol=1e-11, method="per-alpha")


@pytest.mark.parametrize("tol", [1e-3, 1e-9])
def test_hardmax_traced_agrees_with_per_alpha(hm2, hm2_reference, tol):
    # small alpha (mmse near 1, the weak-recovery side), middle, and large alpha (mmse near 0,
    # towards perfect recovery): each traced value lies within its reported error (plus the
    # reference's) of the per-alpha route at tol 1e-11, and that error meets the target
    rows = aim_curve.curve(hm2, alphas=HM_ALPHAS, rho=0.5, tol=tol)
    ref = hm2_reference
    for r, rr in zip(rows, ref):
        assert r["error"] <= tol
        assert abs(r["mmse"] - rr["mmse"]) <= r["error"] + rr["error"], (r, rr)
        assert r["n_fixed_points"] == rr["n_fixed_points"] == 2  # and the unstable V = 0
    assert rows[0]["mmse"] > 0.99 and rows[-1]["mmse"] < 0.1


def test_softmax_perfect_recovery_traced():
    # alpha_PR = 3/16: mmse ~ 4 (alpha_PR - alpha) below it, V = 0 is Bayes-optimal above it
    cc = compile_channel(softmax(2))
    apr = aim_se.perfect_recovery_alpha(cc, rho=0.5)
    alphas = [apr - 2e-3, apr - 1e-3, apr + 1e-3]
    rows = aim_curve.curve(cc, alphas=alphas, rho=0.5, tol=1e-12)
    ref = aim_curve.curve(cc, alphas=alphas, rho=0.5, tol=1e-12, method="per-alpha")
    for r, rr, a in zip(rows[:2], ref, alphas):
        eps = apr - a
        assert r["mmse"] / (4 * eps) == pytest.approx(1, abs=30 * eps)
        assert abs(r["mmse"] - rr["mmse"]) <= r["error"] + rr["error"]
    assert rows[2]["mmse"] == 0 and rows[2]["n_fixed_points"] == ref[2]["n_fixed_points"] == 1


@pytest.mark.parametrize("name", ["softmax", "linear-noisy"])
def test_interpolated_errors_bound_the_deviation(name):
    # Gaussian channels (closed-form output map): at tol 1e-3 the roots are interpolated; each
    # deviation from the per-alpha route stays within the reported error, including alphas
    # whose stencil would straddle the Delta where the support of mu_Delta changes from two
    # intervals to one (rho = 0.3: near Delta = 0.12, alpha = 0.6 for linear-noisy)
    if name == "softmax":
        cc, rho, alphas = compile_channel(softmax(2)), 0.5, [0.025, 0.05, 0.1, 0.175]
    else:
        cc = compile_channel(linear(2, noisy=True), {"Delta_out": 0.5})
        rho, alphas = 0.3, [0.02, 0.412, 0.608, 0.804]
    rows = aim_curve.curve(cc, alphas=alphas, rho=rho, tol=1e-3)
    ref = aim_curve.curve(cc, alphas=alphas, rho=rho, tol=1e-12, method="per-alpha")
    for r, rr in zip(rows, ref):
        assert r["error"] <= 1e-3
        assert abs(r["mmse"] - rr["mmse"]) <= r["error"] + rr["error"], (r, rr)


def _fold_channel(b=0.4, V0=0.5, w=0.07):
    """A Gaussian-type output map with a bump in E(V): alpha(Delta) has two turning points,
    near alpha = 0.0586 and 0.0650 at rho = 0.5, with three fixed points between them."""
    return SimpleNamespace(discrete=False, noiseless=False, pr_constant=None, name="fold",
                           e_g2=lambda V: (2.0 / V) * (1 + b * np.exp(-((V - V0) / w) ** 2)),
                           psi_out=lambda V: -0.5 * np.log(V))


def test_fold_three_fixed_points_as_per_alpha():
    cc = _fold_channel()
    alphas = [0.05, 0.06, 0.062, 0.07]
    tr = aim_curve.trace(cc, rho=0.5, alphas=np.array(alphas), tol=1e-4)
    for a, n in zip(alphas, (1, 3, 3, 1)):
        fps = [f for f in aim_curve.fixed_points_traced(cc, tr, alpha=a, rho=0.5, tol=1e-10)]
        ref = aim_se.fixed_points(cc, alpha=a, rho=0.5, tol=1e-12)
        assert len(fps) == len(ref) == n
        for f, g in zip(fps, ref):
            assert abs(f.mmse - g.mmse) <= f.error + g.error + 1e-15
            assert f.stable == g.stable and f.bayes_optimal == g.bayes_optimal
            assert f.slope == pytest.approx(g.slope, abs=1e-5)
            assert f.phi == pytest.approx(g.phi, abs=1e-12)
        if n == 3:
            assert [f.stable for f in fps] == [True, False, True]


def test_interpolated_roots_carry_their_errors(hm2):
    # at tol 1e-3 the roots come from the trace alone (no Newton step); their errors are the
    # two interpolation orders and two quadrature levels, and they bound the true deviation
    alphas = np.array([0.03, 0.2])
    tr = aim_curve.trace(hm2, rho=0.5, alphas=alphas, tol=1e-3)
    for a in alphas:
        (r,) = tr.roots[float(a)]
        assert r.error <= 1e-3 and r.interp_error > 0 and r.quad_error > 0
        ref = aim_se.bayes_optimal(aim_se.fixed_points(hm2, alpha=float(a), rho=0.5, tol=1e-10))
        assert abs(r.V - ref.mmse) <= r.error
        assert abs(r.slope - ref.slope) < 1e-2


def test_bad_input(hm2):
    with pytest.raises(InputError, match="alpha"):
        aim_curve.curve(hm2, alphas=[0.1, -1], rho=0.5)
    with pytest.raises(InputError, match="tol"):
        aim_curve.curve(hm2, alphas=[0.1], rho=0.5, tol=0)
    with pytest.raises(InputError, match="method"):
        aim_curve.curve(hm2, alphas=[0.1], rho=0.5, method="fast")
    with pytest.raises(InputError, match="rho"):
        aim_curve.curve(hm2, alphas=[0.1], rho=-0.5)
    rows = aim_curve.curve(hm2, alphas=[0.0, 0.05], rho=0.5, tol=1e-6)
    assert rows[0]["mmse"] == 1.0 and 0 < rows[1]["mmse"] < 1


def test_cli_curve_methods_agree(tmp_path):
    import csv
    import subprocess
    import sys

    out = {}
    for method in ("traced", "per-alpha"):
        path = tmp_path / f"{method}.csv"
        p = subprocess.run([sys.executable, "-m", "aim_sym", "curve", "--model", "aim", "--channel",
                            "hardmax", "--tokens", "2", "--rho", "0.5", "--alphas", "0.05:0.25:3",
                            "--tol", "1e-6", "--method", method, "--out", str(path), "--json"],
                           capture_output=True, text=True, timeout=600)
        assert p.returncode == 0, p.stderr
        out[method] = list(csv.DictReader(open(path)))
    for r, rr in zip(out["traced"], out["per-alpha"]):
        assert float(r["error"]) <= 1e-6
        assert abs(float(r["mmse"]) - float(rr["mmse"])) <= float(r["error"]) + float(rr["error"])
    p = subprocess.run([sys.executable, "-m", "aim_sym", "curve", "--model", "aim", "--alphas",
                        "0:1:3", "--method", "fast"], capture_output=True, text=True, timeout=600)
    assert p.returncode == 2 and "--method" in p.stderr


def test_interpolant_roots_all_at_once():
    # rows (x - r)(x + 2)(x - 3) (1 + x^2/5): one root r in [0, 1] each, near both ends too;
    # a row without a sign change gives the end nearer to a zero
    r = np.array([0.0, 1e-12, 0.3, 0.5, 0.999999, 1.0])
    C = []
    for ri in r:
        p = np.polynomial.polynomial.polyfromroots([ri, -2.0, 3.0])
        C.append(np.polynomial.polynomial.polymul(p, [1.0, 0.0, 0.2]))
    C.append(np.array([0.1, 0.3, 0.0, 0.0, 0.0, 0.0]))  # 0.1 + 0.3 x > 0 on [0, 1]
    x = aim_curve._root01(np.array(C))
    np.testing.assert_allclose(x[:-1], r, rtol=0, atol=1e-14)
    assert x[-1] == 0.0
