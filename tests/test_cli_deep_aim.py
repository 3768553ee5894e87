"""``--model aim --layers``: the two-layer AIM's per-layer small-width thresholds (THEORY 1.6)
through the command line, and ``--layers 1`` as the one-layer AIM exactly."""

from __future__ import annotations

import json

import pytest


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
        (["curve", *deep, "--alphas", "0:1:3"], "--alphas"),
        (["curve", *deep, "--alphas", "0.1:0.2:2", "--tol", "1e-3"], "--tol"),
        (["curve", *deep, "--alphas", "0.1:0.2:2", "--plot", "x.txt"], "--plot"),
        (["se", *deep, "--alpha", "0.1", "--skip", "-0.5"], "--skip"),
        (["check", *deep, "--skip", "0.5"], "--skip"),
        (["check", *deep, "--tokens", "3"], "--tokens"),
        (["se", *deep, "--alpha", "0.1", "--tokens", "3"], "--tokens"),
        (["se", *deep, "--alpha", "0.1", "--rho", "1,2,3"], "--rho"),
        (["se", *deep, "--alpha", "0.1", "--rho", "0.5,-1"], "--rho"),
        (["se", *deep, "--alpha", "0.1", "--small-width"], "--small-width"),
        (["se", *deep, "--alpha", "0", "--rho", "0.5,0.5"], "--alpha"),
        (["se", "--model", "aim", "--alpha", "0.1", "--rho", "0.5,0.5"], "--rho"),
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


@pytest.mark.slow
def test_two_layer_se_at_finite_width(run_cli):
    """`se --model aim --layers 2 --rho 0.5,0.5 --skip 1 --alpha 0.1`: all four starts reach one
    stable fixed point, layer 2 ahead of layer 1, and it agrees with the API's independent-seed
    fixed point within the bars (docs/deep_aim.md section 4; several minutes)."""
    from aim_sym.numerics import deep_aim_se as das

    rc, out, err = run_cli(["se", "--model", "aim", "--layers", "2", "--rho", "0.5,0.5",
                            "--skip", "1", "--alpha", "0.1", "--json"])
    assert rc == 0, err
    o = json.loads(out)
    fps = o["fixed_points"]
    assert len(fps) == 4 and all(f["stable"] and not f["perfect_recovery"] for f in fps)
    m1 = [f["layers"][0]["mmse"] for f in fps]
    m2 = [f["layers"][1]["mmse"] for f in fps]
    assert max(m1) - min(m1) < 1e-6 and max(m2) - min(m2) < 1e-6
    assert m2[0] + fps[0]["layers"][1]["mmse_error"] < m1[0] - fps[0]["layers"][0]["mmse_error"]
    other = das.fixed_point(das.DeepAimSE(skip=1.0, rho1=0.5, rho2=0.5), alpha=0.1,
                            v_init=(1.0, 1.0), m=9, seed=5)
    for k in range(2):
        a, b = fps[0]["layers"][k], other["layers"][k]
        assert abs(a["mmse"] - b["mmse"]) <= a["mmse_error"] + b["mmse_error"]


@pytest.mark.slow
def test_two_layer_check_command(run_cli):
    """`check --model aim --layers 2`: the seven identity checks pass at c = 1 (where the density
    of z is singular at 0) and c = 3 (~40 s)."""
    for skip in ("1", "3"):
        rc, out, err = run_cli(["check", "--model", "aim", "--layers", "2", "--skip", skip,
                                "--rho", "0.5,0.3", "--json"])
        assert rc == 0, err
        o = json.loads(out)
        assert o["passed"] and len(o["checks"]) == 7


def test_two_layer_noisy_small_width(run_cli):
    """`threshold weak --model aim --layers 2 --small-width --noise 0.1` (randomised QMC,
    numerics/deep_aim_noisy.py, ~10 s) against the independent seeded Monte Carlo of
    docs/deep_aim.md section 2 (c = 1, Delta = 0.1: 2.551 +- 0.023 and 0.4844 +- 0.0019, bars
    read there as about 2x optimistic, so 2 of its SE), and more noise gives less information."""
    rc, out, err = run_cli(["threshold", "weak", "--model", "aim", "--layers", "2",
                            "--small-width", "--noise", "0.1", "--json"])
    assert rc == 0, err
    t = {r["layer"]: r for r in json.loads(out)["thresholds"]}
    for layer, (mc, se) in {1: (2.551, 0.023), 2: (0.4844, 0.0019)}.items():
        assert abs(t[layer]["value"] - mc) <= t[layer]["error"] + 2 * se
    rc, out, err = run_cli(["threshold", "weak", "--model", "aim", "--layers", "2",
                            "--small-width", "--noise", "0.3", "--json"])
    assert rc == 0, err
    t3 = {r["layer"]: r for r in json.loads(out)["thresholds"]}
    assert t3[2]["value"] - t3[2]["error"] > t[2]["value"] + t[2]["error"]


@pytest.mark.slow
def test_two_layer_noisy_se(run_cli):
    """`se --model aim --layers 2 --noise 0.1 --alpha 0.1` (a few minutes): noise raises both
    mmses above the noiseless fixed point of docs/deep_aim.md (0.8210 +- 0.0042, 0.5563 +-
    0.0049), the point is stable, and e_gen includes the noise's 4 Delta."""
    rc, out, err = run_cli(["se", "--model", "aim", "--layers", "2", "--noise", "0.1",
                            "--alpha", "0.1", "--json"])
    assert rc == 0, err
    fp = json.loads(out)["fixed_points"][0]
    m1, m2 = (L["mmse"] - L["mmse_error"] for L in fp["layers"])
    assert m1 > 0.8210 + 0.0042 and m2 > 0.5563 + 0.0049
    assert fp["stable"] and fp["e_gen"] > 0.4


def test_design_option_reaches_the_model():
    """`--design independent` builds the independent-token SE for se / curve (shared by
    default); the other two-layer routes refuse it (tests/test_bad_input.py)."""
    from aim_sym import cli_aim_channels as ac

    kw = {"channel": None, "channel_file": None, "tokens": 2, "skip": None, "rho": None,
          "beta": None, "noise": None, "design": None}
    assert ac.deep_aim_se_model(kw, design_ok=True).design == "shared"
    assert ac.deep_aim_se_model({**kw, "design": "independent"},
                                design_ok=True).design == "independent"
