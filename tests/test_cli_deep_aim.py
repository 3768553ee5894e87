"""``--model aim --layers``: the two-layer AIM's per-layer small-width thresholds (THEORY 1.6)
through the command line, and ``--layers 1`` as the one-layer AIM exactly."""

from __future__ import annotations

import json


def test_two_layer_thresholds_skip_2(run_cli):
    rc, out, err = run_cli(["threshold", "weak", "--model", "aim", "--layers", "2", "--skip", "2",
                            "--small-width", "--json"])
    assert rc == 0, err
    o = json.loads(out)
    by_layer = {t["layer"]: t for t in o["thresholds"]}
    # last layer first; both above the bound alpha_bar >= 1/4 (S_l <= 2, docs/deep_aim.md)
    assert 0.25 < by_layer[2]["value"] < by_layer[1]["value"]
    for t in o["thresholds"]:
        assert 0 < t["error"] < 1e-5
        assert abs(t["mass"] - 1) < 1e-6
    # the seeded Monte Carlo route of docs/deep_aim.md (1e5 truths): 1.6480 +- 0.0095, 0.2735 +- 0.0009
    assert abs(by_layer[1]["value"] - 1.6480) < 4 * 0.0095
    assert abs(by_layer[2]["value"] - 0.2735) < 4 * 0.0009


def test_layers_1_is_the_one_layer_aim(run_cli):
    base = ["threshold", "weak", "--model", "aim", "--channel", "hardmax", "--small-width",
            "--json"]
    rc1, out1, _ = run_cli(base)
    rc2, out2, _ = run_cli(base + ["--layers", "1"])
    assert rc1 == rc2 == 0 and json.loads(out1) == json.loads(out2)


def test_two_layer_refusals(run_cli):
    deep = ["--model", "aim", "--layers", "2"]
    for args, opt in (
        (["se", *deep, "--alpha", "0.1"], "--layers"),
        (["threshold", "weak", *deep], "--small-width"),
        (["threshold", "weak", *deep, "--small-width", "--skip", "-1"], "--skip"),
        (["threshold", "weak", *deep, "--small-width", "--channel", "hardmax"], "--channel"),
        (["threshold", "weak", *deep, "--small-width", "--tokens", "3"], "--tokens"),
        (["threshold", "weak", "--model", "aim", "--layers", "3", "--small-width"], "--layers"),
        (["threshold", "weak", "--model", "aim", "--layers", "1", "--skip", "1",
          "--small-width"], "--skip"),
    ):
        rc, _, err = run_cli(args)
        assert rc == 2 and opt in err and len(err.strip().splitlines()) == 1, (args, err)
