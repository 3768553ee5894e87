"""Noisy polyhedral channels through the public paths: the model object and the command line
(aim_sym/noisy_polyhedral_model.py; THEORY 1.2, 1.4; docs/polyhedral.md, "Noisy outputs")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from aim_sym.numerics.records import InputError
from click.testing import CliRunner

from aim_sym.channel_file import from_file
from aim_sym.cli import cli
from aim_sym.noisy_polyhedral_model import NoisyPolyhedralAIM

ROOT = Path(__file__).resolve().parents[1]
RELU = str(ROOT / "examples" / "channels" / "polyhedral" / "noisy_relu.py")


def run(*args):
    return CliRunner().invoke(cli, list(args))


@pytest.mark.slow
def test_threshold_cli_matches_scalar_route():
    """alpha_bar_c of noisy ReLU (T = 2, Delta = 0.1) on the command line, against the
    separable scalar route the helper measured (0.28064388, adaptive quadrature of the scalar
    channel max(h, 0) + noise): inside the reported bar."""
    r = run("threshold", "weak", "--small-width", "--channel-file", RELU, "--json")
    assert r.exit_code == 0, r.output
    o = json.loads(r.output)
    assert o["channel"] == "noisy-relu" and o["threshold"] == "alpha_bar_c"
    assert abs(float(o["value"]) - 0.28064388) <= o["error"]
    assert o["error"] < 1e-3


def test_check_cli_passes_and_fails_on_wrong_g():
    """The identity checks pass on the channel; the finite-difference check fails when g_out is
    shifted (the check can fail)."""
    r = run("check", "--channel-file", RELU, "--json")
    assert r.exit_code == 0, r.output
    o = json.loads(r.output)
    names = [c["name"] for c in o["checks"]]
    assert o["passed"] and any("central differences" in n for n in names)
    assert any(n.startswith("Nishimori") for n in names)

    m = NoisyPolyhedralAIM(from_file(RELU, tokens=2), rho=0.5)
    from aim_sym.numerics import noisy_polyhedral_se as nps

    real = nps.z_out

    def shifted(*a, **k):
        z = real(*a, **k)
        z.g[...] += 1e-3
        return z

    nps.z_out = shifted
    try:
        rows = m._finite_differences()
    finally:
        nps.z_out = real
    assert not rows[0]["passed"]


def test_refusals_of_the_model():
    """What the model does not serve is refused with InputError (the command-line refusals are
    cases of tests/test_bad_input.py)."""
    m = NoisyPolyhedralAIM(from_file(RELU, tokens=2), rho=0.5)
    with pytest.raises(InputError):
        m.threshold("perfect", small_width=True)
    with pytest.raises(InputError):
        m.state_evolution(alpha=0.5, digits=20)
    sign = NoisyPolyhedralAIM(from_file(RELU.replace("noisy_relu", "noisy_sign"), tokens=2),
                              rho=0.5)
    with pytest.raises(InputError):  # correlated rows: AMP's polytope rule is not validated
        sign.amp(alpha=0.5)


def test_derive_cli():
    r = run("derive", "--channel-file", RELU)
    assert r.exit_code == 0 and "piece 7" in r.output and "noisy polyhedral" in r.output


@pytest.mark.slow
def test_se_cli_matches_scalar_route():
    """se at rho = 0.5, alpha = 0.5 (about 20-60 s): mmse against the root of the separable
    scalar route's SE (0.08294949, measured by the helper with adaptive quadrature), e_gen
    against its closed form at that V (0.6926656), both within the reported bars."""
    r = run("se", "--channel-file", RELU, "--alpha", "0.5", "--json")
    assert r.exit_code == 0, r.output
    o = json.loads(r.output)
    assert abs(o["mmse"] - 0.08294949) <= o["error"]
    assert abs(o["e_gen"] - 0.6926656) <= o["e_gen_error"]
    assert o["e_gen"] < o["e_gen_plugin"] + o["e_gen_plugin_error"]
