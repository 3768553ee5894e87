"""The public Python API (docs/api.md): domains, the result vocabulary, model objects, and the
agreement of the API with the command line."""

import dataclasses
import json
import math
import os
import subprocess
import sys

import pytest

import aim_sym as am
from aim_sym.channels import deep_attention, hardmax, linear, noisy_hardmax, softmax
from aim_sym.domains import Domain, DomainError
from aim_sym.results import Result, ResultTable

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EX = os.path.join(ROOT, "examples", "channels")
INF, NAN = float("inf"), float("nan")


# ----------------------------------------------------------------------------- domains
def test_domain_messages_and_kinds():
    d = Domain(name="beta", option="--beta", low=0, low_open=True)
    assert d.check(2) == 2.0 and isinstance(d.check(2), float)
    for bad in (0, -1.0, INF, NAN, "1", True, None):
        with pytest.raises(am.InputError, match=r"^beta must be a finite real > 0; got "):
            d.check(bad)
    with pytest.raises(DomainError, match=r"^--beta must be a finite real > 0; got inf$"):
        d.check(INF, label="--beta")
    t = Domain(name="tokens", option="--tokens", kind="integer", low=2, high=8)
    assert t.check(3) == 3
    for bad in (1, 9, 2.0, 2.5, NAN):
        with pytest.raises(am.InputError, match=r"^tokens must be an integer in 2\.\.8; got "):
            t.check(bad)
    e = Domain(name="epsilon", option="--epsilon", low=0, high=0.5, high_open=True)
    assert e.allowed() == "a finite real in [0, 0.5)" and e.contains(0) and not e.contains(0.5)
    err = pytest.raises(DomainError, d.check, NAN).value
    assert str(err.relabel()) == "--beta must be a finite real > 0; got nan"


@pytest.mark.parametrize("build,name", [
    (lambda: softmax(tokens=2, beta=INF), "beta"),
    (lambda: softmax(tokens=2, beta=NAN), "beta"),
    (lambda: softmax(tokens=2, beta=0.0), "beta"),
    (lambda: softmax(tokens=100), "tokens"),
    (lambda: softmax(tokens=1), "tokens"),
    (lambda: hardmax(tokens=3), "tokens"),
    (lambda: linear(tokens=2, delta_out=1e300), "delta_out"),
    (lambda: linear(tokens=2, delta_out=-1.0), "delta_out"),
    (lambda: linear(tokens=2, delta_out=NAN), "delta_out"),
    (lambda: noisy_hardmax(tokens=2, epsilon=0.5), "epsilon"),
    (lambda: noisy_hardmax(tokens=2, epsilon=INF), "epsilon"),
    (lambda: am.channels.builtin("hardmax", tokens=2, beta=2.0), "beta"),
    (lambda: am.channels.builtin("linear", tokens=2, epsilon=0.1), "epsilon"),
    (lambda: deep_attention(layers=7), "layers"),
    (lambda: deep_attention(tokens=3), "tokens"),
    (lambda: deep_attention(skip=0.0), "skip"),
    (lambda: deep_attention(skip=INF), "skip"),
    (lambda: deep_attention(beta=NAN), "beta"),
    (lambda: am.AIM(hardmax(tokens=2), rho=0.0), "rho"),
    (lambda: am.AIM(hardmax(tokens=2), rho=INF), "rho"),
    (lambda: am.AIM(hardmax(tokens=2), rho=NAN), "rho"),
    (lambda: am.AIM(linear(tokens=2, noisy=True)), "delta_out"),
    (lambda: am.AIM(noisy_hardmax(tokens=2)), "epsilon"),
    (lambda: am.AIM(hardmax(tokens=2)).fixed_points(alpha=-1.0), "alpha"),
    (lambda: am.AIM(hardmax(tokens=2)).fixed_points(alpha=INF), "alpha"),
    (lambda: am.AIM(hardmax(tokens=2)).curve(alphas=[0.1, NAN]), "alphas"),
    (lambda: am.AIM(hardmax(tokens=2)).curve(alphas=[0.1] * 100_001), "alphas"),
    (lambda: am.AIM(hardmax(tokens=2)).threshold("weak", small_width=True, digits=0), "digits"),
    (lambda: am.AIM(hardmax(tokens=2)).amp(alpha=0.1, dim=5), "dim"),
    (lambda: am.AIM(hardmax(tokens=2)).amp(alpha=0.1, rng_seed=-1), "rng_seed"),
    (lambda: am.AIM(hardmax(tokens=2)).amp(alpha=0.1, max_iter=0), "max_iter"),
    (lambda: am.AIM(hardmax(tokens=2)).amp(alpha=0.1, damping=1.0), "damping"),
    (lambda: am.SMI(deep_attention()).thresholds(digits=10), "digits"),
    (lambda: am.SMI(deep_attention()).amp(alpha=0.5, seeds=0), "seeds"),
    (lambda: am.mmse(rho=INF, delta=0.1), "rho"),
    (lambda: am.mmse(rho=0.5, delta="nan"), "delta"),
    (lambda: am.mmse(rho=0.5, delta=0.1, digits=3), "digits"),
])
def test_bad_values_raise_input_error_naming_the_parameter(build, name):
    with pytest.raises(am.InputError) as info:
        build()
    msg = str(info.value)
    assert msg.startswith(f"{name} must be ") and "; got " in msg and "\n" not in msg


def test_channel_file_values_are_checked(tmp_path):
    ch = am.channel_from_file(os.path.join(EX, "noisy_hardmax.py"), tokens=2, eps=0.2)
    assert dict((s.name, v) for s, v in ch.params) == {"eps": 0.2}
    for bad in (-0.2, NAN, INF, 2.0):   # 2.0: probabilities (1 - eps) < 0
        with pytest.raises(am.InputError, match="^eps must be"):
            am.channel_from_file(os.path.join(EX, "noisy_hardmax.py"), tokens=2, eps=bad)
    with pytest.raises(am.InputError, match="^Delta must be"):
        am.channel_from_file(os.path.join(EX, "noisy_projection.py"), tokens=2, Delta=-1.0)
    # a noise covariance that is not positive semidefinite at the given values
    f = tmp_path / "indefinite.py"
    f.write_text("import sympy as sp\nfrom aim_sym.channels import gaussian, h_matrix\n"
                 "s = sp.Symbol('s')\n"
                 "def channel(tokens):\n    h = h_matrix(tokens)\n"
                 "    return gaussian(name='indef', tokens=tokens, statistics=[h[0, 1] - h[0, 0]],"
                 " noise=sp.Matrix([[s]]), params={s: 0.5})\n")
    assert am.channel_from_file(str(f), tokens=2, s=0.3).name == "indef"
    with pytest.raises(am.InputError, match="^s must be a value at which the noise covariance "
                       "is positive semidefinite; got -0.3"):
        am.channel_from_file(str(f), tokens=2, s=-0.3)
    with pytest.raises(am.InputError, match="^bogus must be omitted"):
        am.channel_from_file(os.path.join(EX, "noisy_hardmax.py"), tokens=2, bogus=1.0)


# ----------------------------------------------------------------------------- results
def test_result_round_trip_and_frames():
    r = Result(quantity="mmse", value=0.25, error=1e-12, method="quadrature", precision=16,
               parameters={"rho": 0.5, "alpha": 0.1}, details={"q": 1.25, "fps": [1, 2]})
    d = r.to_dict()
    assert Result(**d) == r and json.loads(json.dumps(d)) == d
    f = r.to_frame()
    assert len(f) == 1 and f.loc[0, "value"] == 0.25 and f.loc[0, "rho"] == 0.5
    assert f.loc[0, "q"] == 1.25 and "fps" not in f.columns      # scalar details only
    assert r["q"] == 1.25 and r["alpha"] == 0.1 and float(r) == 0.25
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.value = 1.0
    with pytest.raises(TypeError):
        r.details["q"] = 0.0
    t = ResultTable((r, r), {"channel": "hardmax"})
    assert len(t) == 2 and t[0] is r and list(t) == [r, r] and len(t[:1]) == 1
    ft = t.to_frame()
    assert list(ft["channel"]) == ["hardmax"] * 2 and list(ft["value"]) == [0.25, 0.25]
    assert t.to_dict()["entries"][1] == d
    rows = ResultTable(({"alpha": 0.1, "mmse": 0.9}, {"alpha": 0.2, "mmse": 0.8}), {"rho": 0.5})
    fr = rows.to_frame()
    assert list(fr.columns) == ["alpha", "mmse", "rho"] and rows.column("mmse") == [0.9, 0.8]


# ----------------------------------------------------------------------------- models
def test_models_are_frozen_and_validate_when_built():
    m = am.AIM(hardmax(tokens=2), rho=0.5)
    with pytest.raises(dataclasses.FrozenInstanceError):
        m.rho = 1.0
    s = am.SMI(deep_attention(layers=2, skip=0.5))
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.channel = deep_attention()
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.channel.skip = 2.0
    assert am.AIM(hardmax(tokens=2)) == am.AIM(hardmax(2), rho=0.5)
    with pytest.raises(am.InputError, match="^channel must be"):
        am.AIM(deep_attention())
    with pytest.raises(am.InputError, match="^small_width must be True"):
        m.threshold("weak")


def _cli(*args) -> dict:
    p = subprocess.run([sys.executable, "-m", "aim_sym", *args, "--json"], capture_output=True,
                       text=True, timeout=300, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def test_api_and_cli_agree_aim():
    m = am.AIM(softmax(tokens=2), rho=0.5)
    r = m.state_evolution(alpha=0.0132)
    cli = _cli("se", "--model", "aim", "--channel", "softmax", "--tokens", "2", "--rho", "0.5",
               "--alpha", "0.0132")
    assert r.value == cli["mmse"] and r.error == cli["error"] and r.details["q"] == cli["q"]
    assert [f["bayes_optimal"] for f in r.details["fixed_points"]] == \
        [f["bayes_optimal"] for f in cli["fixed_points"]]
    t = m.threshold("perfect")
    cli = _cli("threshold", "perfect", "--channel", "softmax", "--tokens", "2", "--rho", "0.5")
    assert t.value == cli["value"] == "0.1875000000000000" or t.value == cli["value"]
    assert t.quantity == cli["threshold"] == "alpha_PR"


def test_api_and_cli_agree_smi():
    s = am.SMI(deep_attention(layers=2, tokens=2, skip=1.0))
    api = {(r.details["layer"], r.details["kind"]): r for r in s.thresholds(sequential=False)}
    cli = _cli("threshold", "weak", "--model", "smi", "--layers", "2", "--skip", "1",
               "--no-sequential")
    assert len(api) == len(cli["thresholds"]) == 2
    for c in cli["thresholds"]:
        r = api[(c["layer"], c["kind"])]
        assert r.value == c["value"] and r.error == c["error"] and r.quantity == "alpha_weak"
    assert abs(api[(2, "weak")].value - 0.18547784) < 1e-7


def test_import_is_lazy():
    code = ("import sys, aim_sym, aim_sym.numerics.smi; "
            "assert 'sympy' not in sys.modules and 'pandas' not in sys.modules, 'eager'; "
            "aim_sym.Result; assert 'sympy' not in sys.modules; "
            "import aim_sym as am; am.AIM; print('ok')")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       cwd=ROOT)
    assert p.returncode == 0 and p.stdout.strip() == "ok", p.stderr


def test_mmse_reads_floats_as_decimals():
    a = am.mmse(rho=0.2, delta=0.01, digits=30)
    b = am.mmse(rho="0.2", delta="1/100", digits=30)
    assert a.value == b.value and a.parameters["rho"] == 0.2
    assert 0 < float(a.value) < 0.01 and not math.isnan(a.error)
