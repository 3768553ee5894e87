"""Tests of the ERM model object (aim_sym.erm) and its command-line handlers (aim_sym.cli_erm)."""

from __future__ import annotations

import json

import pytest
from aim_sym.numerics.records import InputError

from aim_sym import cli_erm
from aim_sym.cli_common import OptionError
from aim_sym.domains import DomainError
from aim_sym.erm import ERM


def test_model_validates_every_parameter():
    with pytest.raises(DomainError, match="kappa0"):
        ERM(kappa0=0.0, delta=0.5, lam=0.01)
    with pytest.raises(DomainError, match="delta"):
        ERM(kappa0=0.5, delta=float("nan"), lam=0.01)
    with pytest.raises(DomainError, match="lam"):
        ERM(kappa0=0.5, delta=0.5, lam=-0.1)
    with pytest.raises(DomainError, match="beta"):
        ERM(kappa0=0.5, delta=0.5, lam=0.01, beta=0.0)
    with pytest.raises(DomainError, match="tokens"):
        ERM(kappa0=0.5, delta=0.5, lam=0.01, tokens=1)
    with pytest.raises(DomainError, match="tokens"):
        ERM(kappa0=0.5, delta=0.5, lam=0.01, tokens=7).state_evolution(alpha=0.5)
    with pytest.raises(DomainError, match="alpha"):
        ERM(kappa0=0.5, delta=0.5, lam=0.01).state_evolution(alpha=0.0)


def test_thresholds_through_the_api():
    m = ERM(kappa0=0.5, delta=0.5, lam=0.01)
    r = m.threshold("interpolation", digits=20)
    assert r.quantity == "alpha_interp"
    assert float(r.value) == pytest.approx(0.1534821, abs=5e-8)
    assert float(r.details["alpha_bar"]) == pytest.approx(2 * float(r.value), rel=1e-14)
    assert r.error < 1e-15
    p = m.threshold("perfect")
    assert float(p.details["alpha_bar"]) == pytest.approx(0.4221749821855057, rel=1e-14)
    assert float(m.threshold("perfect", direct=True).details["alpha_bar"]) == 0.5
    with pytest.raises(InputError, match="kind"):
        m.threshold("weak")
    with pytest.raises(DomainError, match="delta"):
        ERM(kappa0=0.5, delta=0.0, lam=0.01).threshold("interpolation")


def test_cli_handlers_threshold_json_and_relabelled_errors():
    out = cli_erm.threshold_json("interpolation", kappa0=0.5, delta=0.5, tokens=2, digits=20)
    json.dumps(out)
    assert out["quantity"] == "alpha_interp" and "alpha_bar" in out
    assert "0.1534821" in cli_erm.threshold_human(out)
    perf = cli_erm.threshold_json("perfect", kappa0=0.5, direct=True)
    assert perf["alpha"] == "0.25" and perf["direct"] is True
    with pytest.raises(DomainError, match="--kappa0"):
        cli_erm.threshold_json("perfect", kappa0=-1.0)
    with pytest.raises(DomainError, match="--alpha"):
        cli_erm.se_json(alpha=-1.0, kappa0=0.5, delta=0.5)
    with pytest.raises(OptionError, match="--kappa0"):
        cli_erm.se_json(alpha=0.5)


@pytest.mark.slow
def test_se_json_spectrum_and_curve(tmp_path):
    opts = {"kappa0": 0.5, "delta": 0.5, "lam": 0.01, "tokens": 2}
    out = cli_erm.se_json(alpha=0.5, **opts)
    json.dumps(out)
    for k in ("q", "m", "sigma", "q_hat", "m_hat", "sigma_hat", "train", "test", "mse", "rank"):
        assert out[f"{k}_error"] >= 0
    assert out["mse"] == pytest.approx(1.5 + out["q"] - 2 * out["m"])
    assert sum(f["global_minimum"] for f in out["fixed_points"]) == 1
    spec = cli_erm.spectrum_json(alpha=0.5, points=200, **opts)
    assert spec["rank"] == pytest.approx(out["rank"], rel=1e-12)
    cli_erm.spectrum_plot(spec, str(tmp_path / "spec.png"))
    assert (tmp_path / "spec.png").stat().st_size > 0
    rows = cli_erm.curve_rows(alphas=[0.4, 0.5], **opts)
    assert rows[-1]["q"] == pytest.approx(out["q"], abs=10 * out["q_error"] + 1e-8)


def test_output_rule_refusals():
    """rule= names the T = 2 output rule; anything else, or split where it does not apply, is
    refused before any quadrature."""
    m = ERM(kappa0=0.5, delta=0.5, lam=0.01)
    for kw, word in (({"rule": "trapezoid"}, "one of"), ({"rule": "split", "direct": True},
                                                          "direct")):
        with pytest.raises(InputError, match=word):
            m.fixed_points(alpha=0.5, **kw)
    with pytest.raises(InputError, match="tokens = 3"):
        ERM(kappa0=0.5, delta=0.5, lam=0.01, tokens=3).fixed_points(alpha=0.5, rule="split")
