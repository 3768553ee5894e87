"""The deep AIM sheet (aim_sym.deep_aim_sheet, THEORY 1.6): every symbolic step holds, the checks
can fail, and the derived Z_out and g_out agree with the hand-written numeric engine
(aim_sym.numerics.deep_aim_se) integrated by an independent rule (scipy's adaptive quadrature)."""

import math
import subprocess
import sys

import numpy as np
import pytest
import sympy as sp
from aim_sym.numerics import deep_aim_se
from scipy import integrate

from aim_sym import deep_aim_sheet as d


def test_every_reduction_step_is_verified():
    steps = d.verified_steps()
    assert len(steps) == 12
    assert all(steps.values()), [k for k, v in steps.items() if not v]


def test_density_check_can_fail():
    generic, fibre = d.z_density()
    assert d._same_density(generic, fibre)
    assert not d._same_density(generic, fibre * sp.Rational(101, 100))
    assert not d._same_density(generic, fibre.subs(d.b1, d.b1 + sp.Rational(1, 10)))


def test_gaussian_channel_stationarity():
    assert d.gaussian_check()


def test_k1_limit_and_se_form(ex):
    assert ex["K=1 limit: z1/c^2"] == sp.Symbol("X")
    assert ex["K=1 limit: z2/c^2"] == sp.Symbol("Y")
    assert sp.simplify(ex["qhat_1"] - 4 * d.alpha * sp.Derivative(
        sp.Function("Psi_out")(d.q1, d.q2), d.q1)) == 0


POINT = {"c": 1.5, "beta": 1.0, "V1": 0.7, "V2": 0.9, "a": (0.3, -0.2), "b": (0.4, 0.1),
         "z": (1.1, -0.6)}


@pytest.fixture(scope="module")
def ex():
    return d.deep_aim_expressions()


def _integrand(ex, name):
    e = ex[name]
    inner = e.args[0] if isinstance(e, sp.Integral) else e.as_numer_denom()[0].args[0]
    P = POINT
    vals = {d.c: P["c"], d.beta: P["beta"], d.V1: P["V1"], d.V2: P["V2"], d.a1: P["a"][0],
            d.a2: P["a"][1], d.b1: P["b"][0], d.b2: P["b"][1], d.z1: P["z"][0],
            d.z2: P["z"][1]}
    return sp.lambdify((d.xi1, d.xi2), inner.subs(vals), modules="numpy")


def _quad(f):
    # the Gaussian factor in xi is centred at a with sd sqrt(V1): 9 sd is beyond double precision
    s = 9 * math.sqrt(POINT["V1"])
    a = POINT["a"]
    val, err = integrate.dblquad(lambda y, x: f(x, y), a[0] - s, a[0] + s, a[1] - s, a[1] + s,
                                 epsabs=1e-13, epsrel=1e-10)
    return val, err


@pytest.fixture(scope="module")
def engine():
    P = POINT
    model = deep_aim_se.DeepAimSE(skip=P["c"], rho1=0.5, rho2=0.5, beta=P["beta"])
    coarse = deep_aim_se.z_out(P["z"][0], P["z"][1], model=model, a=P["a"], b=P["b"], v1=P["V1"],
                               v2=P["V2"], h_in=deep_aim_se.INNER_STEPS[0])
    fine = deep_aim_se.z_out(P["z"][0], P["z"][1], model=model, a=P["a"], b=P["b"], v1=P["V1"],
                             v2=P["V2"])
    return coarse, fine


def test_sheet_z_out_matches_the_engine(ex, engine):
    coarse, fine = engine
    Z, err = _quad(_integrand(ex, "Z_out"))
    bar = abs(fine["z_out"][0] - coarse["z_out"][0]) + 1e-12
    assert abs(Z - fine["z_out"][0]) <= 4 * bar + 2 * err, (Z, fine["z_out"][0], bar)
    assert abs(Z - fine["z_out"][0]) < 1e-6 * Z


@pytest.mark.parametrize("name,key,i", [("g_out[1][a1]", "g1", 0), ("g_out[1][a2]", "g1", 1),
                                        ("g_out[2][b1]", "g2", 0), ("g_out[2][b2]", "g2", 1)])
def test_sheet_g_out_matches_the_engine(ex, engine, name, key, i):
    coarse, fine = engine
    Z, _ = _quad(_integrand(ex, "Z_out"))
    num, _ = _quad(_integrand(ex, name))
    g = num / Z
    bar = abs(fine[key][0, i] - coarse[key][0, i]) + 1e-10
    assert abs(g - fine[key][0, i]) <= 4 * bar + 1e-8, (g, fine[key][0, i], bar)
    assert np.isfinite(g)


@pytest.mark.slow
def test_cli_derive_layers_2():
    run = [sys.executable, "-m", "aim_sym", "derive", "--model", "aim", "--layers", "2"]
    p = subprocess.run(run, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    assert "| det A = (1 + c) mu | yes |" in p.stdout and "NO |" not in p.stdout
    for bad, option in ((["--skip", "1"], "--skip"), (["--tokens", "3"], "--tokens"),
                        (["--channel", "hardmax"], "--channel")):
        p = subprocess.run(run + bad, capture_output=True, text=True, timeout=600)
        assert p.returncode == 2 and option in p.stderr and len(p.stderr.splitlines()) == 1, \
            p.stderr
