"""Noisy polyhedral channels (THEORY 1.1, 1.2, 1.4, 1.5; docs/polyhedral.md, "Noisy outputs"):
the channel-file builder, Z_out against the engine's own noisy route, E(q, V), the threshold,
e_gen and the SE against independent routes (a scalar closed form for the separable noisy ReLU,
the discrete sign channel as Delta -> 0, seeded Monte Carlo)."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import numpy as np
import pytest
import sympy as sp
from aim_sym.numerics import noisy_polyhedral_se as nps
from aim_sym.numerics import polyhedral_se as ps
from aim_sym.numerics import polytope as pt
from aim_sym.numerics import wishart
from aim_sym.numerics.records import InputError
from scipy import integrate
from scipy.optimize import brentq
from scipy.special import ndtr

from aim_sym.channel_file import call_file_function
from aim_sym.channels import ChannelError, discrete
from aim_sym.noisy_polyhedral import (
    noisy_arrays,
    noisy_piecewise,
    noisy_sheet,
    with_noisy_values,
)
from aim_sym.polyhedral import polyhedral_arrays
from aim_sym.symbols import h_matrix

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "channels" / "polyhedral"
C = np.array([2.0, 1.0, 2.0])


def example(name: str, **values):
    ch = call_file_function(str(EXAMPLES / f"{name}.py"), "channel", 2)
    if values:
        ch = with_noisy_values(ch, values)
    return nps.noisy_output(noisy_arrays(ch))


# ----------------------------------------------------------------------------- independent route
# The noisy ReLU with Delta (1 + delta_ab) is separable: Z_out is a product over the entries and
# each entry, rescaled by sqrt(1 + delta_ab), is the scalar channel y = max(h, 0) + N(0, delta),
# h ~ N(omega, V), omega ~ N(0, q): E(q, V) = 3 E_s(q, V), e_gen = sum_ab (1 + delta_ab) e_s.
def _npdf(x, m, v):
    return math.exp(-(x - m) ** 2 / (2 * v)) / math.sqrt(2 * math.pi * v)


def _scalar_z(y, w, V, d):
    """Z and dZ/domega of the scalar noisy ReLU in closed form."""
    s, tau = math.sqrt(V), math.sqrt(V * d / (V + d))
    mu = (w * d + y * V) / (V + d)
    z1 = ndtr(-w / s) * _npdf(y, 0, d)
    dz1 = -_npdf(w / s, 0, 1) / s * _npdf(y, 0, d)
    n2 = _npdf(y, w, V + d)
    z2 = n2 * ndtr(mu / tau)
    dz2 = n2 * (y - w) / (V + d) * ndtr(mu / tau) + n2 * _npdf(mu / tau, 0, 1) * d / (V + d) / tau
    return z1 + z2, dz1 + dz2


def _scalar_fisher(w, V, d):
    def f(y):
        Z, dZ = _scalar_z(y, w, V, d)
        return dZ * dZ / Z if Z > 1e-300 else 0.0
    lo = -12 * math.sqrt(d) - 1.0
    hi = abs(w) + 12 * math.sqrt(V + d) + 1.0
    return (integrate.quad(f, lo, 0.0, epsabs=1e-12, epsrel=1e-11, limit=200)[0]
            + integrate.quad(f, 0.0, hi, epsabs=1e-12, epsrel=1e-11, limit=200)[0])


def scalar_E(q, V, d):
    if q == 0:
        return _scalar_fisher(0.0, V, d)
    r = math.sqrt(q)
    return integrate.quad(lambda w: _npdf(w, 0, q) * _scalar_fisher(w, V, d), -9 * r, 9 * r,
                          epsabs=1e-10, epsrel=1e-10, limit=100, points=[0.0])[0]


def scalar_psi(q, V, d):
    """E_omega int dy Z log Z of the scalar channel (adaptive quadrature)."""
    def inner(w):
        def f(y):
            Z = _scalar_z(y, w, V, d)[0]
            return Z * math.log(Z) if Z > 1e-300 else 0.0
        lo = -12 * math.sqrt(d) - 1.0
        hi = abs(w) + 12 * math.sqrt(V + d) + 1.0
        return (integrate.quad(f, lo, 0.0, epsabs=1e-12, limit=200)[0]
                + integrate.quad(f, 0.0, hi, epsabs=1e-12, limit=200)[0])
    r = math.sqrt(q)
    return integrate.quad(lambda w: _npdf(w, 0, q) * inner(w), -9 * r, 9 * r, epsabs=1e-10,
                          limit=100, points=[0.0])[0]


def scalar_egen(q, V, d):
    """delta + E_omega Var[max(h, 0) | omega] (closed form per omega)."""
    s = math.sqrt(V)

    def var(w):
        a = w / s
        m1 = w * ndtr(a) + s * _npdf(a, 0, 1)
        m2 = (w * w + V) * ndtr(a) + w * s * _npdf(a, 0, 1)
        return m2 - m1 * m1
    if q == 0:
        return d + var(0.0)
    r = math.sqrt(q)
    return d + integrate.quad(lambda w: _npdf(w, 0, q) * var(w), -12 * r, 12 * r, epsabs=1e-13,
                              epsrel=1e-12, limit=200)[0]


# ----------------------------------------------------------------------------- builder
def test_relu_file_gives_the_engine_pieces():
    ch = example("noisy_relu")
    assert ch.Delta == ((0.2, 0.0, 0.0), (0.0, 0.1, 0.0), (0.0, 0.0, 0.2))
    assert ch.weights == (2.0, 1.0, 2.0)
    assert {(k.A, k.b, k.L, k.l) for k in ch.pieces} == {
        (k.A, k.b, k.L, k.l) for k in pt.noisy_relu_pieces(3)}
    assert example("noisy_relu", Delta=0.3).Delta[1][1] == pytest.approx(0.3, abs=0)
    sheet = noisy_sheet(call_file_function(str(EXAMPLES / "noisy_relu.py"), "channel", 2))
    assert "h_11 > 0 and h_12 > 0 and h_22 > 0; mean (h_11, h_12, h_22)" in sheet


def test_builder_refuses_bad_channels_with_one_line():
    h = h_matrix(2)
    x = sp.Symbol("x")
    good = [([h[0, 0] > 0], [h[0, 0]]), ([h[0, 0] < 0], [0])]
    noisy_piecewise(name="ok", tokens=2, pieces=good, noise=0.1)
    bad = {
        "not affine in h": [([h[0, 0] ** 2 > 1], [h[0, 0]]), ([h[0, 0] ** 2 < 1], [0])],
        "mean entry": [([h[0, 0] > 0], [h[0, 0] * h[0, 1]]), ([h[0, 0] < 0], [0])],
        "tile": [([h[0, 0] > 0], [h[0, 0]]), ([h[0, 1] < 0], [0])],
        "unknown symbol": [([h[0, 0] > x], [h[0, 0]]), ([h[0, 0] < x], [0])],
    }
    for what, pieces in bad.items():
        with pytest.raises(ChannelError, match=what) as e:
            noisy_piecewise(name="bad", tokens=2, pieces=pieces, noise=0.1)
        assert "\n" not in str(e.value)
    with pytest.raises(ChannelError, match="positive definite"):
        noisy_piecewise(name="bad", tokens=2, pieces=good, noise=-0.1)
    with pytest.raises(ChannelError, match="1 x 1"):
        noisy_piecewise(name="bad", tokens=2, pieces=good, noise=sp.eye(2))
    # Heaviside factors are conditions too
    hv = [(sp.Heaviside(h[0, 0]) * sp.Heaviside(h[1, 1]), [1]),
          (sp.Heaviside(h[0, 0]) * sp.Heaviside(-h[1, 1]), [0]),
          (sp.Heaviside(-h[0, 0]), [-1])]
    arr = noisy_arrays(noisy_piecewise(name="hv", tokens=2, pieces=hv, noise=0.2))
    assert arr["pieces"][0][0] == ((-1.0, 0.0, 0.0), (0.0, 0.0, -1.0))
    assert arr["pieces"][2][3] == (-1.0,)


def test_bad_numbers_raise_input_error():
    ch = example("noisy_relu")
    with pytest.raises(InputError):
        nps.z_out(ch, omega=np.zeros((1, 3)), y=np.zeros((1, 3)), V=0.0)
    with pytest.raises(InputError):
        nps.output_moments(ch, q=-1.0, V=0.5)
    with pytest.raises(InputError):
        nps.fixed_points_noisy(ch, alpha=float("nan"), rho=0.5)
    with pytest.raises(InputError):
        nps.NoisyPolyhedralOutput(pieces=ch.pieces, Delta=((1.0, 2.0), (2.0, 1.0)),
                                  weights=ch.weights)


# ----------------------------------------------------------------------------- Z_out
def test_z_out_equals_the_engine_noisy_route():
    """Grouping independent rows (and the one-row closed form) changes nothing: the engine's
    noisy_channel_z_out (no grouping) at random (y, omega), for the separable ReLU and for the
    correlated sign channel with a y-dependent mean added."""
    rng = np.random.default_rng(5)
    relu = example("noisy_relu", Delta=0.3)
    sign = example("noisy_sign", Delta=0.2)
    mixed = nps.NoisyPolyhedralOutput(
        pieces=tuple(pt.NoisyPiece(A=k.A, b=k.b, L=((0.5, 0.0, 0.2), (0.0, 0.0, 0.0),
                                                     (0.1, -0.3, 0.0)), l=k.l)
                     for k in sign.pieces), Delta=sign.Delta, weights=sign.weights)
    for ch, N in ((relu, 3), (mixed, 3)):
        om = 0.8 * rng.standard_normal((N, 3))
        y = rng.standard_normal((N, 3))
        V = 0.7
        mine = nps.z_out(ch, omega=om, y=y, V=V, order=2)
        ref = pt.noisy_channel_z_out(ch.pieces, y=y, omega=om, cov=V * np.diag(C),
                                     Delta=np.array(ch.Delta))
        assert np.all(np.abs(mine.log_Z[:, 0] - ref.log_Z)
                      <= mine.Z_relative_error[:, 0] + ref.Z_relative_error + 1e-13)
        assert np.all(np.abs(mine.g[:, 0] - ref.g) <= mine.g_error[:, 0] + ref.g_error + 1e-13)
        assert np.all(np.abs(mine.dg[:, 0] - ref.dg) <= mine.dg_error[:, 0] + ref.dg_error + 1e-12)
        assert mine.g_error.max() < 1e-3


def test_nishimori_noisy_relu():
    """E_y g = 0 and E_y (g g^T + dg) = 0 at one omega, y drawn from the channel (seeded)."""
    ch = example("noisy_relu")
    r = nps.check_nishimori(ch, omega=[0.3, -0.5, 0.8], V=0.6, samples=4000, seed=3)
    assert np.all(np.abs(r["g_mean"]) <= 4 * r["g_se"] + r["g_error"])
    assert np.all(np.abs(r["second_mean"]) <= 4 * r["second_se"] + r["dg_error"])
    assert r["g_se"].max() < 0.05
    sign = example("noisy_sign", Delta=0.2)  # correlated rows: the engine's iterated rule
    r = nps.check_nishimori(sign, omega=[0.3, -0.5, 0.8], V=0.6, samples=4000, seed=4)
    assert np.all(np.abs(r["g_mean"]) <= 4 * r["g_se"] + r["g_error"])
    assert np.all(np.abs(r["second_mean"]) <= 4 * r["second_se"] + r["dg_error"])
    assert r["g_se"].max() < 0.05


# ----------------------------------------------------------------------------- E(q, V), threshold
def test_threshold_noisy_relu_against_the_scalar_route():
    """alpha_bar_c = 1 / (2 E(0, 1)), E = 3 E_s(0, 1) (separable channel): coarse steps here
    (the default steps are in the slow test)."""
    ch = example("noisy_relu")
    est = nps.weak_threshold_noisy(ch, steps=(0.8, 0.7, 0.6))
    ref = 1.0 / (6.0 * scalar_E(0.0, 1.0, 0.1))
    assert abs(est.value - ref) <= est.error
    assert est.error < 0.05 * ref


@pytest.mark.slow
def test_threshold_noisy_relu_default_steps():
    ch = example("noisy_relu")
    est = nps.weak_threshold_noisy(ch)
    ref = 1.0 / (6.0 * scalar_E(0.0, 1.0, 0.1))
    assert abs(est.value - ref) <= est.error < 5e-4


def test_sign_threshold_tends_to_the_discrete_channel():
    """Delta -> 0: the noisy sign pattern's alpha_bar_c is the discrete sign channel's
    (polyhedral_se, three half-spaces per outcome); at Delta = 0.3 it is clearly larger."""
    import sys
    sys.path.insert(0, str(EXAMPLES))
    try:
        import noisy_sign
    finally:
        sys.path.remove(str(EXAMPLES))
    f = noisy_sign.forms(2)
    like = {s: sp.Mul(*[sp.Heaviside(si * e) for si, e in zip(s, f)])
            for s in itertools.product((1, -1), repeat=3)}
    a = polyhedral_arrays(discrete(name="sign3", tokens=2, likelihood=like), {})
    pc = ps.PolyhedralOutput(outcomes=a["outcomes"], weights=a["weights"], basis=a["basis"],
                             terms=tuple(tuple(ps.Term(w, A, b) for w, A, b in ts)
                                         for ts in a["terms"]))
    ref = ps.weak_threshold(pc)
    small = nps.weak_threshold_noisy(example("noisy_sign", Delta=0.01), steps=(1.0, 0.9, 0.8))
    assert abs(small.value - ref.value) <= small.error + ref.error
    assert small.error < 1e-3
    big = nps.weak_threshold_noisy(example("noisy_sign", Delta=0.3), steps=(1.0, 0.9, 0.8))
    assert big.value - ref.value > 5 * (big.error + ref.error)


def test_E_noisy_relu_qmc_against_scalar_route_and_monte_carlo():
    """E(q, V) by randomised QMC within its bar of 3 E_s(q, V), and a seeded plain Monte Carlo
    (omega, h, y drawn from the model, |g|_C^2 at each) within 4 standard errors."""
    ch = example("noisy_relu")
    q, V = 0.8, 0.7
    E, psi = nps.output_estimate(ch, q=q, V=V, points=(10, 8))
    ref = 3 * scalar_E(q, V, 0.1)
    assert abs(E.value - ref) <= E.error
    assert E.error < 0.02 * ref
    # Psi_out: a sum over the entries, each rescaled by sqrt(1 + delta_ab) (log 2 from the two
    # diagonal densities)
    assert abs(psi.value - (3 * scalar_psi(q, V, 0.1) - math.log(2.0))) <= psi.error < 0.05
    rng = np.random.default_rng(11)
    n = 20000
    om = math.sqrt(q) * rng.standard_normal((n, 3)) * np.sqrt(C)
    h = om + math.sqrt(V) * rng.standard_normal((n, 3)) * np.sqrt(C)
    y = np.maximum(h, 0) + math.sqrt(0.1) * rng.standard_normal((n, 3)) * np.sqrt(C)
    g = nps.z_out(ch, omega=om, y=y, V=V).g[:, 0]
    F = (g * g) @ C
    assert abs(F.mean() - E.value) <= 4 * F.std() / math.sqrt(n) + E.error


# ----------------------------------------------------------------------------- e_gen
def test_egen_noisy_relu_against_closed_form_and_two_draws():
    """e_gen = sum_ab (1 + delta_ab) e_s (Euclidean norm of (y_11, y_12, y_22)); on the
    Gauss-Hermite path (V = 0.5 q) and the face-rule path (V < 0.3 q); the two-draw identity
    E|y|^2 - E[y . y'] (h, h' two draws given omega) by seeded Monte Carlo."""
    ch = example("noisy_relu")
    for q, V in ((1.0, 0.5), (1.4, 0.1)):
        e = nps.generalisation_error_noisy(ch, q=q, V=V, plugin_samples=20_000)
        ref = 5 * scalar_egen(q, V, 0.1)
        assert abs(e.value - ref) <= e.error
        assert e.error < 1e-3
    rng = np.random.default_rng(7)
    n, q, V = 100_000, 1.0, 0.5
    sc = np.sqrt(C)
    om = math.sqrt(q) * rng.standard_normal((n, 3)) * sc
    ys = [np.maximum(om + math.sqrt(V) * rng.standard_normal((n, 3)) * sc, 0)
          + math.sqrt(0.1) * rng.standard_normal((n, 3)) * sc for _ in range(2)]
    x = (ys[0] ** 2).sum(axis=1) - (ys[0] * ys[1]).sum(axis=1)
    e = nps.generalisation_error_noisy(ch, q=q, V=V, plugin_samples=50_000)
    assert abs(x.mean() - e.value) <= 4 * x.std() / math.sqrt(n) + e.error
    # the plug-in (noiseless output at omega) is worse than the posterior-predictive mean
    assert e.extra["plugin"] - e.extra["plugin_error"] > e.value + e.error


# ----------------------------------------------------------------------------- SE
@pytest.mark.slow
def test_fixed_point_noisy_relu_against_the_scalar_route():
    """rho = 0.5, alpha = 0.5: the QMC fixed point against brentq on E = 3 E_s (adaptive
    quadrature), and e_gen there against the closed form."""
    ch = example("noisy_relu")
    fps = nps.fixed_points_noisy(ch, alpha=0.5, rho=0.5)
    assert len(fps) == 1 and fps[0]["stable"] and fps[0]["bayes_optimal"]
    f = fps[0]

    def res(V):
        E = 3 * scalar_E(1.5 - V, V, 0.1)
        return float(wishart.mmse(1.0 / E, rho=0.5)) - V
    ref = brentq(res, 0.06, 0.12, xtol=1e-9)
    assert abs(f["mmse"] - ref) <= f["error"]
    assert f["error"] < 5e-3
    e = nps.generalisation_error_noisy(ch, q=f["q"], V=f["mmse"], V_error=f["error"])
    assert abs(e.value - 5 * scalar_egen(1.5 - ref, ref, 0.1)) <= e.error
