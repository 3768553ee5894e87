"""Finite-size GAMP-RIE for the AIM (numerics.amp) against its own identities and the SE.

Fast tests: data generation statistics, the operators, the denoiser's divergence, one
iteration's normalisation, reproducibility, interruption, no NaN, the plot (aim_sym.plots). Slow tests
(``pytest -m slow``): agreement of AMP with the SE for softmax and hardmax, T = 2, rho = 0.5.
"""

import math

import numpy as np
import pytest
from aim_sym.numerics import aim_se, amp, wishart
from aim_sym.numerics.records import InputError, mean_stderr

from aim_sym.amp_functions import amp_functions
from aim_sym.channels import hardmax, softmax
from aim_sym.compiled import compile_channel

RHO = 0.5


@pytest.fixture(scope="module")
def soft():
    ch = softmax(2)
    return ch, compile_channel(ch), amp_functions(ch)


@pytest.fixture(scope="module")
def hard():
    ch = hardmax(2)
    return ch, compile_channel(ch), amp_functions(ch)


# ----------------------------------------------------------------------------- data
def test_preactivation_variance(soft):
    # Var h_ab = (1 + delta_ab) Tr(S^2)/D given S (THEORY 1), Tr(S^2)/D -> Q0 = 1 + rho
    _, _, fns = soft
    D = 80
    rng = np.random.default_rng(1)
    d = amp.generate(fns, alpha=0.5, rho=RHO, dim=D, rng=rng)
    h, S, N = d["h"], d["S"], d["N"]
    assert h.shape == (N, 3) and N == 3200
    q0_emp = np.sum(S * S) / D
    # Tr(S^2)/D fluctuates by O(1/D) around Q0 (its variance is 2(1 + 4 rho + rho^2)/(rho D^2))
    assert abs(q0_emp - (1 + RHO)) < 5 * math.sqrt(2 * (1 + 4 * RHO + RHO**2) / RHO) / D
    w = np.array([2.0, 1.0, 2.0])
    var = (h * h).mean(axis=0) / w
    # sample variance of N Gaussians: relative standard deviation sqrt(2/N); 5 sigma
    assert np.all(np.abs(var / q0_emp - 1) < 5 * math.sqrt(2 / N)), var
    assert np.all(np.abs(h.mean(axis=0)) < 5 * np.sqrt(w * q0_emp / N))


def test_softmax_statistics_from_observation(soft):
    # AMP sees u = A h, read off the log-ratios of y = softmax(beta h); A = [[1,0,-1],[0,1,-1]]
    _, _, fns = soft
    rng = np.random.default_rng(2)
    h = rng.standard_normal((50, 3)) * 2
    y = fns.observe(h)
    assert np.allclose(y.sum(axis=2), 1)
    u = fns.sample(h, rng)
    assert np.allclose(u, np.c_[h[:, 0] - h[:, 2], h[:, 1] - h[:, 2]], atol=1e-12)


def test_hardmax_sampling_is_argmax(hard):
    _, _, fns = hard
    rng = np.random.default_rng(3)
    h = rng.standard_normal((1000, 3))
    y = fns.sample(h, rng)
    r1 = np.where(h[:, 0] > h[:, 1], 0, 1)  # row 1: argmax of (h11, h12)
    r2 = np.where(h[:, 1] > h[:, 2], 0, 1)  # row 2: argmax of (h21 = h12, h22)
    assert np.array_equal(y, 2 * r1 + r2)


def test_g_out_is_the_derived_one(hard):
    # g_dg against the CompiledChannel's Z_y and dZ_y/domega (the SE's own functions), and the
    # Jacobian diagonal against finite differences of g
    _, cc, fns = hard
    rng = np.random.default_rng(4)
    om = rng.standard_normal((20, 3))
    V = 0.7
    obs = rng.integers(0, 4, size=20)
    g, dg = fns.g_dg(obs, om, V)
    m1, m2 = om[:, 0] - om[:, 1], om[:, 1] - om[:, 2]  # m = basis . omega (hardmax T = 2)
    flat = [np.broadcast_to(np.asarray(f, float), (20,)) for f in cc.z_grad(m1, m2, V)]
    Z = np.stack(flat[:4])
    G = np.stack(flat[4:]).reshape(4, 3, 20)
    ref = (G[obs, :, np.arange(20)] / Z[obs, np.arange(20)][:, None])
    assert np.allclose(g, ref, rtol=1e-10, atol=1e-12)
    eps = 1e-6
    for k in range(3):
        e = np.zeros(3)
        e[k] = eps
        fd = (fns.g_dg(obs, om + e, V)[0][:, k] - fns.g_dg(obs, om - e, V)[0][:, k]) / (2 * eps)
        assert np.allclose(dg[:, k], fd, rtol=1e-5, atol=1e-6)


def test_linear_noisy_sampling():
    # u = h + noise of covariance Delta_out C (the channel's own noise matrix)
    from aim_sym.channels import linear

    fns = amp_functions(linear(2, noisy=True), {"Delta_out": 0.5})
    rng = np.random.default_rng(9)
    h = rng.standard_normal((40000, 3))
    u = fns.sample(h, rng)
    var = ((u - h) ** 2).mean(axis=0) / fns.weights
    assert np.all(np.abs(var / 0.5 - 1) < 5 * math.sqrt(2 / 40000)), var


# ----------------------------------------------------------------------------- operators
def test_adjoint_is_transpose_of_forward():
    # <adjoint(X, g), M>_F = sum_mu,ab g_mu,ab <Z_mu,ab, M> for symmetric M
    rng = np.random.default_rng(5)
    X = rng.standard_normal((30, 3, 12))
    M = rng.standard_normal((12, 12))
    M = M + M.T
    g = rng.standard_normal((30, 6))
    lhs = np.sum(amp.adjoint(X, g) * M)
    rhs = np.sum(g * amp.forward(X, M))
    assert lhs == pytest.approx(rhs, rel=1e-12)
    A = amp.adjoint(X, g)
    assert A.shape == (12, 12) and np.allclose(A, A.T)


def test_rie_divergence_matches_finite_difference():
    # V = (2 Delta / D^2) div xi, div = sum_{i <= j} d xi(R)_ij / d R_ij (the spectral formula
    # in rie_step), against a Hutchinson estimate by finite differences: for E symmetric with
    # iid N(0, 1) entries on and above the diagonal, E[sum_{i<=j} E_ij (dxi[E])_ij] = div
    rng = np.random.default_rng(6)
    D, delta = 60, 0.8
    S = amp.sample_target(D, RHO, rng)
    G = rng.standard_normal((D, D))
    R = S + math.sqrt(delta) * (G + G.T) / math.sqrt(2 * D)
    S_hat, V = amp.rie_step(R, delta=delta, rho=RHO)
    lam, U = np.linalg.eigh(R)
    xi = wishart.rie_denoiser(lam, rho=RHO, delta=delta)
    assert np.allclose(S_hat, (U * xi) @ U.T)
    eps = 1e-6
    est = []
    for _ in range(12):
        E = np.triu(rng.standard_normal((D, D)))
        E = E + np.triu(E, 1).T
        fd = (amp.rie_step(R + eps * E, delta=delta, rho=RHO)[0]
              - amp.rie_step(R - eps * E, delta=delta, rho=RHO)[0]) / (2 * eps)
        est.append(np.sum(np.triu(E * fd)))
    est = np.array(est) * 2 * delta / D**2
    assert abs(est.mean() - V) < 4 * est.std(ddof=1) / math.sqrt(est.size) + 1e-6
    # and V tracks the prior mmse at this size (finite-D fluctuation, O(1/D))
    assert V == pytest.approx(wishart.mmse(delta, rho=RHO), abs=0.05)


def test_first_iteration_normalisation(soft, hard):
    # A^0 (the AMP's q_hat) at V = 1: softmax exactly 4 alpha N/(alpha D^2) (closed form,
    # THEORY 1.2); hardmax within sampling error of the SE's q_hat
    for (_, cc, fns), exact in ((soft, True), (hard, False)):
        rng = np.random.default_rng(7)
        D, alpha = 60, 0.1
        d = amp.generate(fns, alpha=alpha, rho=RHO, dim=D, rng=rng)
        r = amp.amp_iterations(fns, d, rho=RHO, max_iter=1)
        _, q_hat = aim_se.se_map(cc, alpha=alpha, rho=RHO, V=1.0)
        A0 = r["A"][0]
        if exact:
            assert A0 == pytest.approx(4 * d["N"] / D**2, rel=1e-12)
            assert q_hat == pytest.approx(4 * alpha, rel=1e-12)
        else:
            assert A0 == pytest.approx(q_hat, rel=0.1)
        assert len(r["error"]) == 2 and len(r["V"]) == 2
        assert r["error"][0] == pytest.approx(1.0, abs=0.15)  # prior mean: error 1
        assert r["error"][1] < r["error"][0]


def test_one_iteration_shapes(soft):
    _, _, fns = soft
    rng = np.random.default_rng(8)
    D = 20
    d = amp.generate(fns, alpha=0.2, rho=RHO, dim=D, rng=rng)
    N = d["N"]
    assert d["X"].shape == (N, 2, D) and d["obs"].shape == (N, 2) and d["S"].shape == (D, D)
    S0 = math.sqrt(RHO) * np.eye(D)
    om = amp.forward(d["X"], S0)
    g, dg = fns.g_dg(d["obs"], om, 1.0)
    assert om.shape == g.shape == dg.shape == (N, 3)
    r = amp.amp_iterations(fns, d, rho=RHO, max_iter=3)
    assert r["S_hat"].shape == (D, D) and np.allclose(r["S_hat"], r["S_hat"].T)
    assert r["iterations"] == 3 and len(r["A"]) == 3 and len(r["noise"]) == 3


# ----------------------------------------------------------------------------- driver
def test_run_amp_reproducible_and_keys(soft):
    _, cc, fns = soft
    kw = dict(alpha=0.1, rho=RHO, dim=24, seeds=[0, 1], max_iter=5, se=False)
    a = amp.run_amp(fns=fns, cc=cc, **kw)
    b = amp.run_amp(fns=fns, cc=cc, **kw)
    c = amp.run_amp(fns=fns, cc=cc, **{**kw, "rng_seed": 1})
    for key in ("mean", "stderr", "per_seed", "per_iteration"):
        assert key in a
    assert a["per_seed"] == b["per_seed"] and a["per_iteration"] == b["per_iteration"]
    assert a["per_seed"] != c["per_seed"]
    # a seed's run does not depend on which other seeds run with it
    d = amp.run_amp(fns=fns, cc=cc, **{**kw, "seeds": [1]})
    assert d["per_seed"][0] == a["per_seed"][1]
    assert len(a["per_iteration"]) == 6
    assert a["mean"] == pytest.approx(np.mean(a["per_seed"]))
    assert a["stderr"] == pytest.approx(np.std(a["per_seed"], ddof=1) / math.sqrt(2))


def test_run_amp_se_prediction(soft):
    _, cc, fns = soft
    r = amp.run_amp(fns=fns, cc=cc, alpha=0.1, rho=RHO, dim=16, seeds=1, max_iter=3)
    bo = aim_se.bayes_optimal(aim_se.fixed_points(cc, alpha=0.1, rho=RHO))
    assert r["se_prediction"] == pytest.approx(bo.mmse, abs=1e-10)
    assert len(r["se_trajectory"]) == 4 and r["se_trajectory"][0] == 1.0


def test_run_amp_interrupt_returns_partial(soft, tmp_path):
    _, cc, fns = soft
    calls = []

    def progress(done, total, message):
        calls.append((done, total, message))
        if done == 2:
            raise KeyboardInterrupt

    out = tmp_path / "amp.json"
    r = amp.run_amp(fns=fns, cc=cc, alpha=0.1, rho=RHO, dim=16, seeds=4, max_iter=3, se=False,
                    progress=progress, out=str(out))
    assert r["interrupted"] and len(r["per_seed"]) == 2 and r["seeds"] == [0, 1]
    assert calls[0][:2] == (1, 4)
    import json

    saved = json.loads(out.read_text())
    assert saved["interrupted"] and len(saved["per_seed"]) == 2


def test_run_amp_input_errors(soft):
    _, cc, fns = soft
    with pytest.raises(InputError, match="alpha"):
        amp.run_amp(fns=fns, cc=cc, alpha=-1, rho=RHO, dim=10, seeds=1)
    with pytest.raises(InputError, match="dim"):
        amp.run_amp(fns=fns, cc=cc, alpha=0.1, rho=RHO, dim=1, seeds=1)
    with pytest.raises(InputError, match="damping"):
        amp.run_amp(fns=fns, cc=cc, alpha=0.1, rho=RHO, dim=10, seeds=1, damping=1.0, se=False)


def test_run_amp_needs_the_compiled_objects(soft):
    # the numeric layer compiles nothing: the caller passes fns and cc (keyword-only)
    ch, cc, fns = soft
    kw = dict(alpha=0.1, rho=RHO, dim=10, seeds=1, max_iter=2)
    with pytest.raises(TypeError):
        amp.run_amp(ch, cc, **kw)  # positional: refused
    with pytest.raises(InputError, match="fns must be"):
        amp.run_amp(fns=ch, cc=cc, **kw)  # a channel, not its compiled AMP functions
    with pytest.raises(InputError, match="cc must be"):
        amp.run_amp(fns=fns, cc=None, **kw)  # se=True needs the compiled channel
    with pytest.raises(InputError, match="cc must be"):
        amp.run_amp(fns=fns, cc=ch, **kw)
    r = amp.run_amp(fns=fns, cc=None, se=False, **kw)
    assert r["se_prediction"] is None and len(r["per_seed"]) == 1


@pytest.mark.parametrize("max_iter", [1, 2, 3])
def test_run_amp_one_seed_short_runs_report_no_nan(soft, max_iter):
    # one seed has no standard error: None (shown as n/a), never NaN; every number is finite
    _, cc, fns = soft
    r = amp.run_amp(fns=fns, cc=cc, alpha=0.1, rho=RHO, dim=12, seeds=1, max_iter=max_iter)
    assert r["stderr"] is None and r["per_iteration_stderr"] is None
    assert math.isfinite(r["mean"]) and r["mean"] == r["per_seed"][0]
    assert len(r["per_iteration"]) == r["iterations"][0] + 1 <= max_iter + 1
    for key in ("per_iteration", "V", "A", "noise", "se_trajectory", "q_hat_se"):
        assert all(math.isfinite(x) for x in r[key]), key
    assert math.isfinite(r["se_prediction"])
    two = amp.run_amp(fns=fns, cc=cc, alpha=0.1, rho=RHO, dim=12, seeds=2, max_iter=max_iter)
    assert math.isfinite(two["stderr"]) and all(map(math.isfinite, two["per_iteration_stderr"]))
    with pytest.raises(InputError, match="max_iter"):
        amp.run_amp(fns=fns, cc=cc, alpha=0.1, rho=RHO, dim=12, seeds=1, max_iter=0)


def test_mean_se_never_nan():
    assert mean_stderr([]) == (None, None)
    assert mean_stderr([0.5]) == (0.5, None)
    assert mean_stderr([0.5, float("nan")]) == (None, None)
    m, s = mean_stderr([0.4, 0.6])
    assert m == pytest.approx(0.5) and s == pytest.approx(0.1)


def test_auto_damping_small_alpha_D(soft):
    # softmax, D = 100, alpha = 0.03 (N = 300): damping 0.5 diverges within a few iterations
    # for seed 0 (and for 7 of 8 seeds; benchmarks/amp_damping_grid.py); "auto" retries the
    # same data with 0.7 and converges; seed 3 converges at 0.5 and keeps it.
    _, cc, fns = soft
    kw = dict(alpha=0.03, rho=RHO, dim=100, seeds=[0, 3], max_iter=40, se=False)
    fixed = amp.run_amp(fns=fns, cc=cc, damping=0.5, **kw)
    assert fixed["reasons"][0] == "diverged"
    auto = amp.run_amp(fns=fns, cc=cc, **kw)
    assert "diverged" not in auto["reasons"], auto["reasons"]
    assert auto["dampings"][0] > 0.5 and auto["dampings"][1] == 0.5
    assert auto["attempts"][0][0] == (0.5, "diverged")
    assert max(auto["per_seed"]) < 1.0          # below the prior's mmse: something was learned
    with pytest.raises(InputError, match="damping"):
        amp.run_amp(fns=fns, cc=cc, damping="fast", **kw)


def test_plot(tmp_path):
    # the figure lives in the presentation layer (aim_sym.plots); one seed's stderr is None
    from aim_sym.plots import plot_amp_vs_se

    pts = [{"alpha": 0.05, "mean": 0.7, "stderr": 0.02, "dim": 50},
           {"alpha": 0.1, "mean": 0.4, "stderr": float("nan"), "dim": 100},
           {"alpha": 0.15, "mean": 0.3, "stderr": None, "dim": 100}]
    curve = ([0.0, 0.05, 0.1], [1.0, 0.72, 0.39])
    path = tmp_path / "amp.png"
    plot_amp_vs_se(pts, curve, str(path), reference=[{"alpha": 0.1, "mmse": 0.41,
                                                      "mmse_std": 0.05}])
    assert path.stat().st_size > 1000
    assert not hasattr(amp, "plot_amp_vs_se")


# ----------------------------------------------------------------------------- slow
# Agreement with the SE (THEORY 4, check 7).
#
# ALLOWANCE. GAMP-RIE at finite D ends above the SE fixed point by a bias that shrinks with D.
# Measured with benchmarks/amp_vs_se.py (rng_seed 0, 8 seeds, damping 0.5, 80 iterations; the
# tests below use rng_seed 1 and 2, so their data are independent of the measurement),
# AMP mean - SE (+- standard error):
#   softmax alpha = 0.10: 0.032 +- 0.021 (D = 50), 0.031 +- 0.009 (D = 100), 0.013 +- 0.003 (200)
#   softmax alpha = 0.15: 0.026 +- 0.010 (D = 50), 0.013 +- 0.003 (D = 100)
#   hardmax alpha = 0.05: 0.038 +- 0.019 (D = 100), 0.017 +- 0.008 (D = 200)
#   hardmax alpha = 0.10: 0.023 +- 0.018 (D = 50), 0.025 +- 0.012 (D = 100), 0.013 +- 0.007 (200)
#   hardmax alpha = 0.20: 0.013 +- 0.012 (D = 50), 0.021 +- 0.006 (D = 100)
# i.e. D x deviation between 0.6 and 3.8: the allowance is FINITE_SIZE_C / D with
# FINITE_SIZE_C = 4 (the largest seen, rounded up). Its source is the rank-one (token) design:
# one sample's term in R^t is a spike of strength ~ 2 |g| / (A sqrt D) whose effect on the
# spectral denoiser the linear-response Onsager term does not remove (see numerics/amp.py).
FINITE_SIZE_C = 4.0
SLOW_CASES = [
    ("softmax", 0.10), ("softmax", 0.13), ("softmax", 0.15),
    ("hardmax", 0.10), ("hardmax", 0.15), ("hardmax", 0.20),
]


@pytest.fixture(scope="module")
def channels(soft, hard):
    return {"softmax": soft, "hardmax": hard}


@pytest.mark.slow
@pytest.mark.parametrize("name,alpha", SLOW_CASES)
def test_amp_agrees_with_se(channels, name, alpha):
    _, cc, fns = channels[name]
    D = 100
    r = amp.run_amp(fns=fns, cc=cc, alpha=alpha, rho=RHO, dim=D, seeds=12, max_iter=80, rng_seed=1)
    msg = (r["mean"], r["stderr"], r["se_prediction"], r["reasons"])
    assert all(np.isfinite(r["per_seed"])) and max(r["per_seed"]) < 2, msg
    assert abs(r["mean"] - r["se_prediction"]) < 3 * r["stderr"] + FINITE_SIZE_C / D, msg


@pytest.mark.slow
@pytest.mark.parametrize("name,alpha", [("softmax", 0.10), ("hardmax", 0.10)])
def test_finite_size_deviation_shrinks(channels, name, alpha):
    # two sizes, D = 50 and D = 200: the deviation from the SE does not grow (within one
    # combined standard error) and at D = 200 it is within 3 stderr + FINITE_SIZE_C / 200
    _, cc, fns = channels[name]
    r50 = amp.run_amp(fns=fns, cc=cc, alpha=alpha, rho=RHO, dim=50, seeds=32, max_iter=80, rng_seed=2)
    r200 = amp.run_amp(fns=fns, cc=cc, alpha=alpha, rho=RHO, dim=200, seeds=8, max_iter=80,
                       rng_seed=2)
    se = r200["se_prediction"]
    d50, d200 = r50["mean"] - se, r200["mean"] - se
    s50, s200 = r50["stderr"], r200["stderr"]
    msg = (d50, s50, d200, s200)
    assert abs(d200) < 3 * s200 + FINITE_SIZE_C / 200, msg
    assert abs(d200) < abs(d50) + math.hypot(s50, s200), msg


@pytest.mark.slow
def test_amp_tracks_se_per_iteration(soft):
    # the order-1 quantities of AMP follow the (equally damped) SE iteration by iteration,
    # D = 200, 2 seeds, first 10 iterations. Measured (rng_seed 1): |A^t / q_hat^t - 1| <= 0.037,
    # |V^t - V_SE^t| <= 0.021, |error^t - V_SE^t| <= 0.037 (largest at t = 1, where the t = 0
    # effective noise exceeds 1/A^0 by O(1/D)); tolerances 0.05, 0.03, 0.05.
    _, cc, fns = soft
    r = amp.run_amp(fns=fns, cc=cc, alpha=0.1, rho=RHO, dim=200, seeds=2, max_iter=10, rng_seed=1)
    for t in range(1, 11):
        assert r["A"][t - 1] == pytest.approx(r["q_hat_se"][t - 1], rel=0.05), t
        assert r["V"][t] == pytest.approx(r["se_trajectory"][t], abs=0.03), t
        assert r["per_iteration"][t] == pytest.approx(r["se_trajectory"][t], abs=0.05), t



# Small alpha D with damping "auto" (softmax; hardmax's small-N failures are not cured by any
# damping, see numerics/amp.py). ALLOWANCE measured with benchmarks/amp_damping_grid.py
# (rng_seed 0, 8 seeds, 80 iterations, D = 100): AMP mean - SE = 0.059 +- 0.013 (alpha = 0.03),
# 0.045 +- 0.009 (alpha = 0.05), larger than FINITE_SIZE_C / D at these N = 300-640 samples;
# allowance SMALL_N_C / D with SMALL_N_C = 8 (|deviation| + 1.5 stderr, rounded up). These
# tests use rng_seed 1. At alpha = 0.03 "auto" rescues all 8 seeds of rng_seed 0 but one of
# the 12 seeds of rng_seed 1 diverges at every damping 0.5-0.9 (reported as diverged).
SMALL_N_C = 8.0


@pytest.mark.slow
@pytest.mark.parametrize("alpha", [0.04, 0.05, 0.0635])
def test_auto_damping_agrees_with_se_small_alpha(soft, alpha):
    _, cc, fns = soft
    D = 100
    r = amp.run_amp(fns=fns, cc=cc, alpha=alpha, rho=RHO, dim=D, seeds=12, max_iter=80, rng_seed=1)
    msg = (r["mean"], r["stderr"], r["se_prediction"], r["reasons"], r["dampings"])
    assert "diverged" not in r["reasons"], msg
    assert abs(r["mean"] - r["se_prediction"]) < 3 * r["stderr"] + SMALL_N_C / D, msg


@pytest.mark.slow
def test_auto_damping_reduces_divergence_alpha_003(soft):
    _, cc, fns = soft
    kw = dict(alpha=0.03, rho=RHO, dim=100, seeds=12, max_iter=80, rng_seed=1, se=False)
    fixed = amp.run_amp(fns=fns, cc=cc, damping=0.5, **kw)["reasons"].count("diverged")
    auto = amp.run_amp(fns=fns, cc=cc, **kw)["reasons"].count("diverged")
    assert auto < fixed and auto <= 3, (auto, fixed)
