"""The AIM output side: derived closed forms, identities, and the numeric quadrature."""

import math

import mpmath
import numpy as np
import pytest
import sympy as sp
from aim_sym.numerics.aim_se import output_estimate, output_moments
from aim_sym.numerics.special_functions import mp_phi2, np_phi2, np_phi2_from_kernel, np_phi2_kernel

from aim_sym import checks
from aim_sym.channels import ChannelError, hardmax, linear, noisy_hardmax, softmax
from aim_sym.compiled import compile_channel
from aim_sym.output import derive
from aim_sym.symbols import V
from aim_sym.thresholds import perfect_recovery, small_width_weak


@pytest.mark.parametrize("T", [2, 3, 4])
def test_softmax_and_linear_closed_forms(T):
    # THEORY 1.2: q_hat = (T^2+T-2) alpha / V (softmax), T(T+1) alpha / V (linear)
    assert sp.simplify(derive(softmax(T)).q_hat_map / sp.Symbol("alpha", nonnegative=True)
                       - sp.Rational(T * T + T - 2) / V) == 0
    assert sp.simplify(derive(linear(T)).E_g2 - sp.Rational(T * (T + 1), 2) / V) == 0


def test_noisy_linear_output_map():
    d = derive(linear(2, noisy=True))
    assert sp.simplify(d.E_g2 - 3 / (V + sp.Symbol("Delta_out", nonnegative=True))) == 0


@pytest.mark.parametrize("T", [2, 3])
def test_softmax_small_width_threshold(T):
    t = small_width_weak(softmax(T))
    assert t.expr == sp.Rational(1, T * T + T - 2)


def test_hardmax_small_width_threshold_closed_form():
    # oracle written by hand (test only): at omega = 0 the two row statistics
    # u1 = h12 - h11, u2 = h12 - h22 have correlation 1/3; Sheppard's formula gives the
    # orthant probabilities and E = (4/3)(3 pi - 2a)/(pi^2 - 4a^2), a = asin(1/3).
    with mpmath.workdps(45):
        a = mpmath.asin(mpmath.mpf(1) / 3)
        E = mpmath.mpf(4) / 3 * (3 * mpmath.pi - 2 * a) / (mpmath.pi**2 - 4 * a**2)
        t = small_width_weak(hardmax(2), digits=35)
        assert abs(mpmath.mpf(t.value) - 1 / (2 * E)) < mpmath.mpf(10) ** -34
    assert t.error < 1e-33


def test_noisy_hardmax_reduces_to_hardmax_at_zero_noise():
    a = small_width_weak(noisy_hardmax(2), params={"epsilon": 0}).expr
    b = small_width_weak(hardmax(2)).expr
    assert sp.simplify(a - b) == 0
    # noise destroys information: the threshold grows with epsilon
    t1 = float(small_width_weak(noisy_hardmax(2), params={"epsilon": "0.1"}).value)
    assert t1 > float(sp.N(b))


def test_perfect_recovery_softmax():
    t = perfect_recovery(softmax(2), rho_value=0.5)
    assert t.expr == sp.Rational(3, 16)  # (2 rho - rho^2)/(T^2+T-2)
    t = perfect_recovery(softmax(3), rho_value=2)
    assert t.expr == sp.Rational(1, 10)
    with pytest.raises(ChannelError, match="no finite perfect-recovery"):
        perfect_recovery(hardmax(2), rho_value=0.5)


@pytest.mark.parametrize(
    "a,b,r",
    [(0.3, -1.2, -1 / 3), (2.0, 1.0, 1 / 3), (-5.0, -4.0, -1 / 3), (-8.0, -7.5, -1 / 3),
     (-3.0, 6.0, 1 / 3), (-1.5, -1.2, -1 / 3), (0.0, 0.0, 0.5)],
)
def test_phi2_numpy_against_mpmath(a, b, r):
    with mpmath.workdps(40):
        ref = mp_phi2(a, b, mpmath.mpf(r))
        val = np_phi2(np.array([a]), np.array([b]), r)[0]
        # relative accuracy limited by the conditioning ~ (a^2 + b^2) eps
        assert abs(val - ref) <= (1e-14 + 1e-15 * (a * a + b * b)) * abs(ref)


def _phi2_by_conditioning(a, b, r, dps=60):
    """Independent route: Phi2 = int_{-inf}^a phi(x) Phi((b - r x)/sqrt(1 - r^2)) dx, scaled."""
    with mpmath.workdps(dps):
        a, b, r = map(mpmath.mpf, (a, b, r))
        s = mpmath.sqrt(1 - r * r)

        def g(x):
            return -x * x / 2 + mpmath.log(mpmath.ncdf((b - r * x) / s))

        gm = max(g(a - mpmath.mpf(k) / 8) for k in range(200))
        pts = [mpmath.mpf(0)] + [mpmath.mpf(2) ** k for k in range(-8, 6)] + [mpmath.inf]
        val = mpmath.quad(lambda u: mpmath.exp(g(a - u) - gm), pts)
        return val * mpmath.exp(gm) / mpmath.sqrt(2 * mpmath.pi)


@pytest.mark.parametrize(
    "a,b,r",
    [(-15.198, -19.647, -1 / 3), (-8.0, -7.5, -1 / 3), (1.0, -1.0, -0.999), (2.0, 2.0, 0.999),
     (3.0, -3.0001, -0.5), (-20.0, 15.0, 0.3), (0.3, -1.2, -1 / 3)],
)
def test_mp_phi2_against_conditioning(a, b, r):
    # deep joint lower tail at r < 0 (the form from r = 0 lost all digits there: 1.5e-141 for
    # 1.1e-203), |r| -> 1, and a ~ -b, all to the working precision
    with mpmath.workdps(40):
        val = mp_phi2(a, b, mpmath.mpf(r))
    ref = _phi2_by_conditioning(a, b, r)
    assert abs(val - ref) <= mpmath.mpf(10) ** -38 * ref


def test_phi2_sheppard():
    from aim_sym.special import Phi2

    assert Phi2(0, 0, sp.Rational(1, 3)) == sp.Rational(1, 4) + sp.asin(sp.Rational(1, 3)) / (2 * sp.pi)


@pytest.mark.parametrize("factory", [lambda: softmax(2), lambda: linear(2, noisy=True)])
def test_identity_checks_gaussian(factory):
    ch = factory()
    params = {"Delta_out": "0.3"} if ch.name == "linear-noisy" else {}
    res = checks.run_checks(ch, params=params)
    assert res and all(r["passed"] for r in res), res


def test_identity_checks_hardmax():
    res = checks.run_checks(hardmax(2))
    names = {r["name"].split(":")[0] for r in res}
    assert {"finite differences", "Nishimori", "free-entropy stationarity"} <= names
    assert all(r["passed"] for r in res), res


def test_checks_detect_a_wrong_denoiser(monkeypatch):
    # a check that cannot fail is no check: corrupt g_out and watch the FD check fail
    import dataclasses

    d = derive(hardmax(2))
    bad = dataclasses.replace(d, g_out=tuple(g * (1 + sp.Rational(1, 10**6)) for g in d.g_out))
    monkeypatch.setattr(checks, "derive", lambda ch: bad)
    res = checks.check_gradients(hardmax(2), n=1)
    assert not res[0]["passed"]


def test_hardmax_quadrature_against_monte_carlo():
    # independent route: a seeded Monte Carlo over (omega, h, y) of sum (1+delta) g^2 uses the
    # generative model directly; it must agree with the quadrature within 4 standard errors
    cc = compile_channel(hardmax(2))
    q, Vv = 0.9, 0.6
    e, _ = output_estimate(cc, q=q, V=Vv)
    rng = np.random.default_rng(7)
    n = 200_000
    w = np.array([2.0, 1.0, 2.0])
    omega = rng.standard_normal((n, 3)) * np.sqrt(q * w)
    h = omega + rng.standard_normal((n, 3)) * np.sqrt(Vv * w)
    # outputs: argmax of each row -> index into channel.outputs ((1,1),(1,2),(2,1),(2,2))
    r1 = np.where(h[:, 0] > h[:, 1], 1, 2)
    r2 = np.where(h[:, 1] > h[:, 2], 1, 2)
    idx = (r1 - 1) * 2 + (r2 - 1)
    m = np.stack([omega[:, 0] - omega[:, 1], omega[:, 1] - omega[:, 2]], axis=1)
    flat = [np.broadcast_to(np.asarray(f, float), (n,)) for f in cc.z_grad(m[:, 0], m[:, 1], Vv)]
    Z = np.stack(flat[:4])[idx, np.arange(n)]
    G = np.stack(flat[4:]).reshape(4, 3, n)[idx, :, np.arange(n)]
    samples = (G * G) @ w / (Z * Z)
    mc, se = samples.mean(), samples.std() / math.sqrt(n)
    assert abs(mc - e.value) < 4 * se
    assert e.error < 1e-10


def test_output_quadrature_refines():
    cc = compile_channel(hardmax(2))
    e, p = output_estimate(cc, q=1.4, V=0.1)
    assert e.error < 1e-10 and p.error < 1e-10
    e0, _, _ = output_moments(cc, q=0.0, V=1.0)
    assert e0 == pytest.approx(float(cc.e_g2_q0(1.0)), rel=1e-14)


def test_bad_channels():
    with pytest.raises(ChannelError, match="tokens"):
        softmax(1)
    from aim_sym.output import parse_events

    with pytest.raises(ChannelError, match="not affine"):
        parse_events(sp.Heaviside(sp.Symbol("h_11", real=True) ** 2), 2)


def test_certified_enclosures():
    from aim_sym.certified import enclosure
    from aim_sym.thresholds import small_width_weak_expr

    lo, hi, _ = enclosure(small_width_weak_expr(hardmax(2)), digits=40)
    with mpmath.workdps(60):
        a = mpmath.asin(mpmath.mpf(1) / 3)
        exact = 3 * (mpmath.pi**2 - 4 * a**2) / (8 * (3 * mpmath.pi - 2 * a))
        assert mpmath.mpf(lo) <= exact <= mpmath.mpf(hi)
        assert mpmath.mpf(hi) - mpmath.mpf(lo) < mpmath.mpf(10) ** -25
    lo, hi, _ = enclosure(sp.Rational(3, 16), digits=30)
    assert lo == hi == "0.187500000000000000000000000000"


def test_phi2_orthants_share_one_kernel():
    # Phi2(+-a, +-b; +-r) with sign(r) a b fixed: one kernel, each orthant as np_phi2 and as
    # mpmath, the four summing to 1; the compiled hardmax code evaluates the kernel once
    import inspect

    from scipy.special import ndtr

    from aim_sym.compiled import compile_channel

    a = np.array([0.3, -1.2, 2.0, -5.0, -7.5, 0.0])
    b = np.array([-1.2, 0.4, 1.0, -4.0, -8.0, 0.0])
    r = -1 / 3
    K = np_phi2_kernel(a * a + b * b, np.sign(r) * a * b, abs(r))
    total = 0
    for sa, sb, sr in ((1, 1, 1), (1, -1, -1), (-1, 1, -1), (-1, -1, 1)):
        head = ndtr(sa * a) * ndtr(sb * b)
        val = np_phi2_from_kernel(sa * a, sb * b, sr * r, head, K)
        np.testing.assert_allclose(val, np_phi2(sa * a, sb * b, sr * r), rtol=1e-13, atol=0)
        with mpmath.workdps(30):
            ref = [float(mp_phi2(sa * x, sb * y, mpmath.mpf(sr * r))) for x, y in zip(a, b)]
        np.testing.assert_allclose(val, ref, rtol=1e-12, atol=1e-300)
        total = total + val
    np.testing.assert_allclose(total, 1.0, rtol=0, atol=4e-16)
    src = inspect.getsource(compile_channel(hardmax(2)).z_grad)
    assert src.count("Phi2Kernel(") == 1 and src.count("Phi2FromKernel(") == 4


@pytest.mark.parametrize("r", [-0.05, -1 / 3, -0.5, -0.75, -0.9])
def test_phi2_lower_tail_rule_converged(r):
    # the joint lower tail at negative r (a, b < -1, a^2 + b^2 > 40): the rule in use against
    # 160 Gauss-Legendre nodes on the same positive integrand, to the rounding level
    from aim_sym.numerics.special_functions import _gl01, _lower_tail
    from scipy.special import log_ndtr

    rng = np.random.default_rng(0)
    a, b = -rng.uniform(1, 25, 2000), -rng.uniform(1, 25, 2000)
    keep = a * a + b * b > 40
    a, b = a[keep], b[keep]
    val = _lower_tail(a, b, r)
    x, w = _gl01(160)
    lo, hi, s = np.minimum(a, b), np.maximum(a, b), np.sqrt(1 - r * r)
    U = lo + np.sqrt(lo * lo + 90.0)
    xx = lo[:, None] - U[:, None] * x
    logf = -0.5 * xx * xx - 0.5 * np.log(2 * np.pi) + log_ndtr((hi[:, None] - r * xx) / s)
    ref = U * (np.exp(logf) @ w)
    ok = ref > 1e-290
    assert ok.sum() > 200
    np.testing.assert_allclose(val[ok], ref[ok], rtol=5e-12, atol=0)
