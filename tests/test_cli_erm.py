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


ERM_LAM0 = ["se", "--model", "erm", "--kappa0", "0.5", "--delta", "0.5", "--lam", "0"]


def test_lam_zero_below_alpha_interp_serves_the_interpolator_limit(run_cli):
    """--lam 0 at or below alpha_interp: the lambda -> 0+ limit (closed form), labelled so."""
    from aim_sym.numerics.erm_spectral import spectral_integrals

    code, out, err = run_cli(ERM_LAM0 + ["--alpha", "0.1", "--json"])
    assert code == 0, err
    o = json.loads(out)
    assert o["limit"] == "lambda -> 0+" and "interpolator" in o["method"]
    assert o["lam"] == 0.0 and o["sigma"] == "inf" and o["train"] == 0.0
    assert 0 < o["rank"] < 1 and o["eps"] > 0 and o["alpha_interp"] > 0.1
    # the limit's closing equations (docs/erm_peak.md): Q0n = J - (delta/2) d_delta J - eps d_eps J,
    # alpha = d_delta J / (4 fac delta), q = J, at the reported spectral delta and eps
    s = spectral_integrals(kappa0=0.5, delta=o["delta_spec"], eps=o["eps"])
    assert s.J - o["delta_spec"] * s.dJ_ddelta / 2 - o["eps"] * s.dJ_deps == pytest.approx(
        1.75, abs=1e-9)
    assert s.dJ_ddelta / (8 * o["delta_spec"]) == pytest.approx(0.1, abs=1e-10)
    assert o["q"] == pytest.approx(s.J, abs=1e-9)
    assert o["mse"] == pytest.approx(1.5 + o["q"] - 2 * o["m"], abs=1e-12)
    # at alpha_interp itself: eps = 0 and the peak test error 0.5010982710 +- 2e-13 (erm_peak.md)
    code, out, _ = run_cli(ERM_LAM0 + ["--alpha", "0.1534821028590800675735", "--json"])
    assert code == 0
    o = json.loads(out)
    assert o["eps"] == 0.0 and abs(o["test"] - 0.5010982710) < 1e-10
    code, out, _ = run_cli(ERM_LAM0 + ["--alpha", "0.1"])
    assert code == 0 and "lambda -> 0+ limit" in out and "sigma" in out


@pytest.mark.parametrize("extra,word", [(["--tokens", "3"], "--lam"), (["--direct"], "--lam"),
                                        (["--alpha", "0.15348210286"], "--alpha")])
def test_lam_zero_refusals(run_cli, extra, word):
    """--lam 0 only for the factorised T = 2 model, and not just above alpha_interp: one line,
    exit 2, naming the option."""
    args = ERM_LAM0 + ["--alpha", "0.1"] + extra
    rc, _, err = run_cli(args)
    assert rc == 2 and word in err, err
    assert len(err.strip().splitlines()) == 1


def test_lam_zero_without_noise_is_refused(run_cli):
    rc, _, err = run_cli(["se", "--model", "erm", "--kappa0", "0.5", "--lam", "0", "--alpha",
                          "0.5"])
    assert rc == 2 and "--lam" in err and len(err.strip().splitlines()) == 1


def test_lam_zero_beyond_the_validated_range_exits_3(run_cli, monkeypatch):
    """A lambda = 0 fixed point beyond the checked range: exit 3 with the last iterate. Made
    cheap here: one start at the order-12 fixed point of alpha = 0.3 (Sigma = 19.8) and the
    piecewise rule's bound lowered to 5, so the early refusal (Sigma > 2 x bound at order 12)
    applies."""
    from aim_sym.numerics import erm_ridgeless as R

    monkeypatch.setattr(R, "RIDGELESS_INITS", ((3.7096673 / 1.5, 1.9365381 / 1.5, 19.83855),))
    monkeypatch.setattr(R, "SIGMA_SPLIT", 5.0)
    rc, out, err = run_cli(ERM_LAM0 + ["--alpha", "0.3", "--json"])
    assert rc == 3 and out == "", (out, err)
    assert "Sigma" in err and "last iterate" in err and "19.8" in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.slow
def test_lam_zero_above_alpha_interp_is_a_fixed_point_of_the_ridgeless_map(run_cli):
    """--lam 0 --alpha 0.5 (Sigma ~ 3.2, Gauss-Hermite 24/17; ~2 minutes): the reported point is
    a fixed point of the lambda = 0 SE map at order 24 and obeys the Sigma equation at eps = 0,
    Sigma Sigma_hat = d_delta J / (2 delta) (the degrees-of-freedom count, docs/erm.md)."""
    import math

    from aim_sym.numerics import erm_se as S
    from aim_sym.numerics.erm_spectral import spectral_integrals

    code, out, err = run_cli(ERM_LAM0 + ["--alpha", "0.5", "--json"])
    assert code == 0, err
    o = json.loads(out)
    assert o["rule"] == "gh" and "lambda = 0" in o["method"] and "limit" not in o
    assert 0 < o["fitted"] < 1 and o["train"] > 0 and o["sigma"] < 5
    p = S.ERMParams(alpha=0.5, kappa0=0.5, Delta=0.5, lam=0.0)
    hats = S.hats_from_overlaps(o["q"], o["m"], o["sigma"], p)[:3]
    new = S.overlaps_from_hats(*hats, p)[:3]
    for k, v in zip(("q", "m", "sigma"), new, strict=True):
        assert v == pytest.approx(o[k], rel=1e-8), k
    delta = math.sqrt(o["q_hat"]) / o["m_hat"]
    s = spectral_integrals(kappa0=0.5, delta=delta, eps=0.0)
    assert o["sigma"] * o["sigma_hat"] == pytest.approx(s.dJ_ddelta / (2 * delta), rel=1e-8)


def test_lam_zero_spectrum_below_alpha_interp(run_cli):
    """spectrum --lam 0 below alpha_interp: the interpolator's spectrum ReLU(S0 + delta Z - eps)
    (eta = 1); its eigenvalue density integrates to the rank (the atom at 0 apart)."""
    import numpy as np

    code, out, err = run_cli(["spectrum", "--model", "erm", "--kappa0", "0.5", "--delta", "0.5",
                              "--lam", "0", "--alpha", "0.1", "--points", "4000", "--json"])
    assert code == 0, err
    o = json.loads(out)
    assert o["eta"] == 1.0 and o["eps"] > 0 and o["atom"] == pytest.approx(1 - o["rank"])
    mass = np.trapezoid(o["eigenvalue_density"], o["eigenvalue"])
    assert mass == pytest.approx(o["rank"], abs=1e-3)


def test_lam_zero_curve_below_alpha_interp(run_cli):
    """curve --lam 0 goes through the same object method: below alpha_interp one limit row per
    alpha, the same numbers as se, the test error rising towards the peak near alpha_interp."""
    code, out, err = run_cli(["curve", "--model", "erm", "--kappa0", "0.5", "--delta", "0.5",
                              "--lam", "0", "--alphas", "0.05:0.15:3", "--json"])
    assert code == 0, err
    rows = json.loads(out)["rows"]
    assert [r["alpha"] for r in rows] == pytest.approx([0.05, 0.1, 0.15])
    assert all(r["limit"] == "lambda -> 0+" for r in rows)
    assert rows[1]["test"] < rows[2]["test"] < 0.5010982710
    _, out, _ = run_cli(ERM_LAM0 + ["--alpha", "0.1", "--json"])
    assert rows[1]["q"] == json.loads(out)["q"]
