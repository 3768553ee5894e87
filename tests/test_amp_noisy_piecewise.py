"""AMP for noisy polyhedral channel files (numerics/amp_noisy_piecewise.py,
aim_sym/noisy_piecewise_amp.py; THEORY 1.1, 1.4, 1.5, check 7 of THEORY 4): g_out against
central differences of log Z_out, dg_out against differences of g_out, the noiseless scoring of
the test error against the noisy one, short seeded AMP runs, bad input, and (slow) AMP at D = 80
against the SE's mmse."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from aim_sym.numerics import amp
from aim_sym.numerics import amp_noisy_piecewise as anp
from aim_sym.numerics.records import InputError
from central_differences import column_differences, seeded_points

from aim_sym.channel_file import from_file
from aim_sym.noisy_piecewise_amp import amp_view, run_noisy_piecewise_amp
from aim_sym.noisy_polyhedral_model import NoisyPolyhedralAIM

ROOT = Path(__file__).resolve().parent.parent
RELU = ROOT / "examples" / "channels" / "polyhedral" / "noisy_relu.py"
MODEL = NoisyPolyhedralAIM(from_file(str(RELU), tokens=2), rho=0.5)
VIEW = amp_view(MODEL)


def test_g_is_log_z_gradient():
    """g_out = d log Z_out / d omega (THEORY 1.1) at 6 seeded (omega, y), every pair a <= b;
    and a g shifted by 1e-4 would fail the same comparison."""
    obs, om, V = seeded_points(VIEW, n=6, seed=11)
    g, dg = VIEW.g_dg(obs, om, V)
    assert g.shape == dg.shape == om.shape and np.all(np.isfinite(g))
    fd = column_differences(lambda o: VIEW.log_z(obs, o, V), om, 1e-4)
    for i in range(om.shape[1]):
        assert np.max(np.abs(fd[:, i] - g[:, i])) < 1e-6, i
        assert np.max(np.abs(fd[:, i] - (g[:, i] + 1e-4))) > 1e-6
    assert np.max(np.abs(g)) > 0.1  # not trivially zero


def test_dg_is_g_derivative():
    """Exact dg_out (dg_form "exact"): d g_ab / d omega_ab by central differences of g_out."""
    assert VIEW.dg_form == "exact"
    obs, om, V = seeded_points(VIEW, n=6, seed=5, q=0.5, V=0.3)
    _, dg = VIEW.g_dg(obs, om, V)
    fd = column_differences(lambda o: VIEW.g_dg(obs, o, V)[0], om, 1e-4)
    for i in range(om.shape[1]):
        assert np.max(np.abs(fd[:, i, i] - dg[:, i])) < 1e-6, i
    assert np.max(np.abs(dg)) > 0.1


def test_nishimori_sample_mean():
    """E_y g_out = 0 and E_y (g^2 + dg) = 0 per entry at one omega (THEORY 1.2), y drawn from the
    channel through the view's sampler (4000 seeded draws): within 4 standard errors."""
    rng = np.random.default_rng(2)
    om = np.tile([[0.4, -0.3, -0.5]], (4000, 1))
    V = 0.5
    h = om + np.sqrt(V * np.asarray(VIEW.weights)) * rng.standard_normal(om.shape)
    g, dg = VIEW.g_dg(VIEW.sample(h, rng), om, V)
    for x in (g, g * g + dg):
        se = x.std(axis=0, ddof=1) / np.sqrt(x.shape[0])
        assert np.all(np.abs(x.mean(axis=0)) < 4 * se)


def test_noiseless_scoring_matches_noisy():
    """The test error scored on f(h) + tr Delta (what run_noisy_piecewise_amp reports) against
    scoring the noisy y (draw_y) on the same S, S_hat and V (independent streams): the
    Bayes-optimal error agrees within 4 combined standard errors; the plug-in with draw_y carries
    one more noise draw at omega, tr Delta above (THEORY 1.5)."""
    rng = np.random.default_rng(4)
    D = 20
    S = amp.sample_target(D, 0.5, rng)
    S_hat = S + 0.3 * amp.sample_target(D, 0.5, rng) / np.sqrt(D)
    kw = {"S": S, "S_hat": S_hat, "V": 0.1, "weights": VIEW.weights, "tokens": 2,
          "n_test": 6000, "draws": 16}
    a = amp.test_error(VIEW.clean_y, rng=np.random.default_rng(7), **kw)
    b = amp.test_error(VIEW.draw_y, rng=np.random.default_rng(8), **kw)
    tr = VIEW.noise_trace
    assert tr == pytest.approx(0.5)  # Delta (1 + delta_ab) at Delta = 0.1
    for key, shift in (("bayes", 0.0), ("plugin", tr)):
        se = np.hypot(a[key + "_stderr"], b[key + "_stderr"])
        assert abs(a[key] + tr + shift - b[key]) < 4 * se, key


def test_short_run_deterministic_and_learns(tmp_path):
    """D = 24, alpha = 0.5, two seeds: finite, the same per seed on a rerun, far below the prior's
    error (1 at V = 1), none diverged; the SE skipped; the JSON written to ``out`` holds the
    reported test errors (tr Delta added)."""
    kw = {"alpha": 0.5, "dim": 24, "seeds": 2, "max_iter": 60, "se": False, "n_test": 200}
    path = tmp_path / "run.json"
    r = run_noisy_piecewise_amp(MODEL, out=str(path), **kw)
    again = run_noisy_piecewise_amp(MODEL, **{**kw, "seeds": 1})
    d = r.details
    assert np.all(np.isfinite(d["per_seed"])) and d["per_iteration"][0] > 0.9
    assert again.details["per_seed"][0] == d["per_seed"][0]
    assert d["per_seed"][0] != d["per_seed"][1]
    assert r.value < 0.2 and r.error is not None
    assert set(d["reasons"]) <= {"tol", "max_iter"} and d["dg_form"] == "exact"
    assert d["test_error"] > VIEW.noise_trace and np.isfinite(d["test_error_plugin"])
    assert d["se"] is None and d["se_prediction"] is None
    assert r.parameters["channel"] == "noisy-relu" and r.parameters["Delta"] == 0.1
    saved = json.loads(path.read_text())
    assert saved["test_error"] == pytest.approx(d["test_error"], rel=1e-12)
    assert saved["per_seed"] == d["per_seed"]


def test_bad_input():
    with pytest.raises(InputError):
        run_noisy_piecewise_amp("noisy_relu.py", alpha=0.5)
    with pytest.raises(InputError):
        run_noisy_piecewise_amp(MODEL, alpha=0.5, damping=1.5)
    with pytest.raises(InputError):
        run_noisy_piecewise_amp(MODEL, alpha=0.0)
    with pytest.raises(InputError):
        run_noisy_piecewise_amp(MODEL, alpha=0.5, dim=3)
    with pytest.raises(InputError):
        VIEW.g_dg(np.zeros((4, 2)), np.zeros((4, 3)), 0.5)
    with pytest.raises(InputError):
        VIEW.g_dg(np.zeros((4, 3)), np.zeros((4, 3)), -1.0)
    with pytest.raises(InputError):
        anp.noisy_piecewise_amp(MODEL)


@pytest.mark.slow
def test_relu_lands_on_se():
    """Noisy ReLU T = 2, Delta = 0.1, rho = alpha = 0.5 at D = 80, 4 seeds (~2 min): AMP's mse
    lies between the SE mmse and the SE mmse + c / D, c = 0.33 the excess measured at D = 40
    (0.0911 +- 0.0019 against 0.08293, 8 seeds), within 4 standard errors + the SE's bar; the
    test error between e_gen and e_gen + c' / sqrt(D), c' = 0.33 from its excess at D = 40
    (0.052: the diagonal pre-activations are chi-square-like at finite width, an O(D^-1/2)
    excess of the ReLU output's second moment, docs/amp_piecewise.md)."""
    r = run_noisy_piecewise_amp(MODEL, alpha=0.5, dim=80, seeds=4, max_iter=100, n_test=1000)
    d, se = r.details, r.details["se"]
    assert se["n_fixed_points"] == 1
    assert abs(se["mmse"] - 0.08294949) < se["error"]  # the scalar route (docs/polyhedral.md)
    slack = 4 * r.error + se["error"]
    assert se["mmse"] - slack < r.value < se["mmse"] + 0.33 / 80 + slack
    slack = 4 * d["test_error_stderr"] + d["e_gen_se_error"]
    assert d["e_gen_se"] - slack < d["test_error"] < d["e_gen_se"] + 0.33 / np.sqrt(80) + slack
