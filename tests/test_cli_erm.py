"""The ERM commands (THEORY 3) through the real entry point: values, JSON keys, exit codes."""

from __future__ import annotations

import json

import pytest


def test_interpolation_threshold_json(run_cli):
    code, out, _ = run_cli(["threshold", "interpolation", "--model", "erm", "--kappa0", "0.5",
                        "--delta", "0.5", "--json"])
    assert code == 0
    o = json.loads(out)
    # THEORY 3 quotes delta_bar = 2.2928207, alpha_interp = 0.1534821 (kappa0 = Delta = 0.5, T = 2)
    assert abs(float(o["alpha"]) - 0.1534821) < 5e-8
    assert abs(float(o["delta_bar"]) - 2.2928207) < 5e-8
    assert o["error"] < 1e-20
    assert abs(float(o["alpha_bar"]) - 2 * float(o["alpha"])) < 1e-25  # (T^2 + T - 2)/2 = 2
    assert "lam" not in o and "beta" not in o      # options it does not depend on


@pytest.mark.parametrize("direct,alpha_bar", [(True, 0.5), (False, None)])
def test_perfect_recovery(run_cli, direct, alpha_bar):
    args = ["threshold", "perfect", "--model", "erm", "--kappa0", "0.5", "--json"]
    code, out, _ = run_cli(args + (["--direct"] if direct else []))
    assert code == 0
    o = json.loads(out)
    bayes = 0.5 - 0.5**2 / 2
    assert float(o["alpha_bar_bayes"]) == pytest.approx(bayes, abs=1e-15)
    if alpha_bar is not None:
        assert float(o["alpha_bar"]) == pytest.approx(alpha_bar, abs=1e-25)
    else:  # factorised: between the Bayes-optimal and the direct (Frobenius) threshold
        assert bayes < float(o["alpha_bar"]) < 0.5


def test_output_rule_refusals(run_cli):
    """--output-rule: erm only, split only for the factorised T = 2 model; one line, exit 2."""
    base = ["se", "--alpha", "0.5", "--output-rule", "split"]
    for extra, word in ((["--model", "erm", "--kappa0", "0.5", "--direct"], "--direct"),
                        (["--model", "erm", "--kappa0", "0.5", "--tokens", "3"], "--tokens"),
                        (["--model", "aim"], "--model erm")):
        rc, _, err = run_cli(base + extra)
        assert rc == 2 and "--output-rule" in err and word in err, err
        assert len(err.strip().splitlines()) == 1
