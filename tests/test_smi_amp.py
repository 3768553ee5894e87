"""Finite-size GAMP for deep tied attention (numerics.smi_amp, THEORY 2).

Fast tests: data generation, the fibre-quadrature g_out and its Jacobian against finite
differences of the same quadrature's log Z_out, E[z | y] = 0 at Q = 0 (sign symmetry),
Nishimori, quadrature convergence at moderate V, reproducibility, input checks, the
convergence rule and the Monte Carlo branch SE. Slow tests (``pytest -m slow``): GAMP at
D = 2000, alpha = 0.6 against the Monte Carlo branch SE; D = 500, alpha = 1 against the
Monte Carlo SE.
"""

import math
import re

import numpy as np
import pytest
import smi_mc_oracles
from aim_sym.numerics import smi_amp
from aim_sym.numerics.records import InputError

V_MOD = np.array([[0.8, 0.15], [0.15, 0.5]])


def _sample(n, Q, seed):
    """(h, omega) from the SE's joint law at overlap Q (per token omega = Q^{1/2} xi)."""
    rng = np.random.default_rng(seed)
    w, U = np.linalg.eigh(Q)
    sq = U @ np.diag(np.sqrt(w)) @ U.T
    w2, U2 = np.linalg.eigh(np.eye(2) - Q)
    sv = U2 @ np.diag(np.sqrt(w2)) @ U2.T
    om = np.einsum("pq,nqm->npm", sq, rng.standard_normal((n, 2, 2)))
    z = om + np.einsum("pq,nqm->npm", sv, rng.standard_normal((n, 2, 2)))
    h, _ = smi_amp.forward(z)
    return h, om


def _quadrature_report(h, omega, V, *, orders):
    """The rms difference of g between two fibre-rule orders, g's scale and the change of the
    sample mean of sum_m dg (per entry)."""
    g_a, dg_a, _ = smi_amp.gout(h, omega, V, order=orders[0])
    g_b, dg_b, _ = smi_amp.gout(h, omega, V, order=orders[1])
    return dict(g_rms=float(np.sqrt(((g_a - g_b) ** 2).mean())),
                g_scale=float(np.sqrt((g_b**2).mean())),
                A_diff=(dg_a.sum(1).mean(0) - dg_b.sum(1).mean(0)).tolist())


# ----------------------------------------------------------------------------- data
def test_generate_statistics_and_inversion():
    d = smi_amp.generate(alpha=4.0, dim=200, rng=np.random.default_rng(3))
    assert d["X"].shape == (800, 200, 2) and d["z"].shape == (800, 2, 2)
    # token columns z_m = W x_m / sqrt(D): N(0, I_P) given ||W_l||^2 / D ~ 1 (up to O(D^-1/2))
    cols = d["z"].transpose(0, 2, 1).reshape(-1, 2)
    cov = np.cov(cols.T)
    nw = (d["W"] ** 2).sum(1) / 200
    assert np.allclose(np.diag(cov), nw, atol=0.12)
    assert abs(cov[0, 1] - d["W"][0] @ d["W"][1] / 200) < 0.12
    # the tokens are independent
    assert abs(np.mean(d["z"][:, 0, 0] * d["z"][:, 0, 1])) < 0.12
    # y -> h inversion recovers h up to a global sign
    err = np.min(np.abs(d["h_obs"][:, None, :] - np.stack([d["h"], -d["h"]], 1)), axis=1)
    assert err.max() < 1e-8
    assert np.all(d["h_obs"][:, 0] >= d["h_obs"][:, 1])


# ----------------------------------------------------------------------------- output channel
def test_gout_is_gradient_of_logZ():
    # the rule's g differs from d(rule's log Z)/d omega by the quadrature error (1.5e-4 at order
    # 24, 2e-6 at 48, 1e-7 at 96 here): at order 64 they agree to the finite-difference error
    h, om = _sample(6, np.eye(2) - V_MOD, 5)
    kw = dict(order=64, adaptive=False)
    g, dg, mo = smi_amp.gout(h, om, V_MOD, **kw)
    eps = 1e-5
    for p in range(2):
        for m in range(2):
            e = np.zeros((2, 2))
            e[p, m] = eps
            lp = smi_amp.output_moments(h, om + e, V_MOD, **kw)["logZ"]
            lm = smi_amp.output_moments(h, om - e, V_MOD, **kw)["logZ"]
            fd = (lp - lm) / (2 * eps)
            assert np.allclose(fd, g[:, p, m], rtol=1e-4, atol=1e-5)
            # dg_m = d g_m / d omega_m (same token); other token's block is the cross term
            gp, _, _ = smi_amp.gout(h, om + e, V_MOD, **kw)
            gm, _, _ = smi_amp.gout(h, om - e, V_MOD, **kw)
            fdg = (gp[:, :, m] - gm[:, :, m]) / (2 * eps)
            assert np.allclose(fdg, dg[:, m, :, p], rtol=1e-3, atol=1e-4)


def test_mean_zero_at_Q0():
    # Q = 0: omega = 0, V = I; E[z | y] = 0 by z_1 -> -z_1 (A is even) and the sign sum
    rng = np.random.default_rng(7)
    z = rng.standard_normal((50, 2, 2))
    h, _ = smi_amp.forward(z)
    om = np.zeros((50, 2, 2))
    g, _, _ = smi_amp.gout(h, om, np.eye(2), adaptive=False)
    assert np.abs(g).max() < 1e-12
    g, _, _ = smi_amp.gout(h, om, np.eye(2), adaptive=True)
    assert np.abs(g).max() < 1e-6


def test_nishimori_and_quadrature_convergence():
    # E[sum_m g g^T] = -E[sum_m dg] at the SE's joint law (Monte Carlo, 3 standard errors)
    Q = np.diag([0.3, 0.6])
    h, om = _sample(600, Q, 11)
    V = np.eye(2) - Q
    g, dg, _ = smi_amp.gout(h, om, V)
    gg = np.einsum("npm,nqm->npq", g, g)
    res = gg + dg.sum(1)
    se = res.std(0, ddof=1) / math.sqrt(len(res))
    assert np.all(np.abs(res.mean(0)) < 3 * se + 1e-3)
    rep = _quadrature_report(h, om, V, orders=(24, 32))
    assert rep["g_rms"] < 1e-3 * rep["g_scale"]


def test_sharp_posterior_adaptive_rule():
    # layer 2 nearly known (V_22 = 0.004): the prior rule alone is poor, the mixture converges
    # (measured at 200 samples: g rms difference 5% (16 vs 24), 3.6% (24 vs 40), 2.2% (40 vs 64)
    # of the g scale; A_22 ~ 250 moves by 1.1, 0.4, 0.3; the prior rule alone is off by 22%)
    Q = np.diag([0.2, 0.996])
    h, om = _sample(100, Q, 13)
    V = np.eye(2) - Q
    rep = _quadrature_report(h, om, V, orders=(24, 32))
    assert rep["g_rms"] < 0.05 * rep["g_scale"]
    assert abs(rep["A_diff"][1][1]) < 1.5 and abs(rep["A_diff"][0][0]) < 0.01


def test_reproducible_and_inputs():
    kw = dict(alpha=0.5, dim=40, seeds=2, max_iter=3, se=False)
    a = smi_amp.run_smi_amp(**kw)
    b = smi_amp.run_smi_amp(**kw)
    assert a["Q_mean"] == b["Q_mean"] and a["per_iteration"] == b["per_iteration"]
    c = smi_amp.run_smi_amp(**kw, rng_seed=1)
    assert c["Q_mean"] != a["Q_mean"]
    assert set(a) >= {"Q_mean", "Q_stderr", "per_iteration", "se_prediction", "per_seed"}
    assert len(a["per_iteration"]) == 3
    with pytest.raises(InputError):
        smi_amp.run_smi_amp(alpha=0.5, dim=40, seeds=1, skip=0.0)
    with pytest.raises(InputError):
        smi_amp.run_smi_amp(alpha=0.5, dim=40, seeds=1, layers=3)


@pytest.mark.parametrize("bad", [
    dict(max_iter=0), dict(max_iter=smi_amp.MAX_ITER + 1), dict(max_iter=2.5),
    dict(dim=1), dict(dim=40.0), dict(seeds=0), dict(seeds=True), dict(seeds=[]),
    dict(seeds=[0, -1]), dict(damping=1.0), dict(damping=-0.1), dict(damping=math.nan),
    dict(rng_seed=-1), dict(rng_seed=0.5), dict(alpha=math.inf)])
def test_run_inputs_name_the_parameter(bad):
    (name,) = bad
    with pytest.raises(InputError, match=name):
        smi_amp.run_smi_amp(**{**dict(alpha=0.5, dim=40, seeds=1, max_iter=2, se=False), **bad})


def test_one_seed_gives_no_stderr_and_no_nan():
    r = smi_amp.run_smi_amp(alpha=0.5, dim=40, seeds=1, max_iter=2, se=False)
    assert r["Q_stderr"] == [None, None] and r["Q_tail_stderr"] == [None, None]
    rows = [r["Q_mean"], r["Q_tail_mean"], r["Q_raw_mean"], r["self_mean"], r["mse_mean"],
            *r["per_iteration"]]
    assert all(isinstance(v, float) and math.isfinite(v) for row in rows for v in row)
    two = smi_amp.run_smi_amp(alpha=0.5, dim=40, seeds=[0, 3], max_iter=2, se=False)
    assert all(isinstance(v, float) and v >= 0 for v in two["Q_stderr"] + two["Q_tail_stderr"])
    data = smi_amp.generate(alpha=0.5, dim=10, rng=np.random.default_rng(0))
    with pytest.raises(InputError, match="max_iter"):
        smi_amp.amp_run(data, max_iter=0)


def test_cli_amp_smi_max_iter_zero_is_an_input_error():
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-m", "aim_sym", "amp", "--model", "smi", "--alpha", "0.5",
                        "--dim", "10", "--seeds", "1", "--max-iter", "0"],
                       capture_output=True, text=True, timeout=300)
    # the CLI or the library (whichever checks first) names the parameter; no traceback
    assert p.returncode == 2 and re.search("max[-_]iter", p.stderr), p.stderr
    assert "Traceback" not in p.stderr


def test_convergence_rule():
    flat = [dict(Q=[0.0, 0.5 + 1e-3 * (-1) ** t]) for t in range(12)]
    assert smi_amp.converged(flat)
    assert not smi_amp.converged(flat[:5])                  # too short to judge
    drift = [dict(Q=[0.0, 0.4 + 0.002 * t]) for t in range(12)]
    assert not smi_amp.converged(drift)                     # moved 0.018 over the window


# ----------------------------------------------------------------------------- agreement (slow)
# The SE reference for the branch Q = diag(0, q2) is numerics.smi.layer2_point (lattice rule of
# numerics.smi_sequential: K2(0.92) = 19.313, q2 = 0.92371 +- 0.00017 at alpha = 0.6), checked
# by test_layer2_point_matches_montecarlo_se below against the seeded Monte Carlo K2 of
# montecarlo_branch of tests/smi_mc_oracles.py (an independent inner rule; benchmarks/RESULTS.md:
# K2(0.92) = 19.31 +- 0.03 with the GAMP g_out vs 19.29 +- 0.09). The former Gauss-Hermite
# branch quadrature of numerics.smi.fixed_point gave K2 4-6% higher (q2 = 0.9417 at alpha =
# 0.6, 0.540 at 0.4).
#
# ALLOWANCE (measured with benchmarks/smi_amp_finite_size.py, rng_seed 0, 60-70 iterations;
# this test uses rng_seed 1): alpha = 0.6, AMP mean - SE (0.9235 +- 0.0007):
#   D = 1000: -0.0049 +- 0.0032 (16 seeds), D = 2000: -0.0004 +- 0.0023 (16),
#   D = 4000: -0.0006 +- 0.0017 (12), D = 8000: -0.0014 +- 0.0013 (6);
# seed sd 0.013, 0.009, 0.006, 0.003: the finite-size deviation is below 0.005 from
# D = 1000 on and the scatter shrinks like D^-1/2. At D = 2000 the allowance is 0.004
# (|deviation| + 1.5 stderr, rounded up). With 6 seeds (stderr ~0.0037) the tolerance is
# ~0.016, below the 0.018 gap to the former quadrature's 0.9417, so the test discriminates.
ALLOW_D2000 = 0.004


def _amp_seeds(seeds):
    r = smi_amp.run_smi_amp(alpha=0.6, dim=2000, seeds=seeds, max_iter=50, se=False,
                            rng_seed=1)
    return [(s["final"]["Q"], s["converged"]) for s in r["per_seed"]]


@pytest.mark.slow
def test_amp_vs_branch_se_alpha_06():
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(2) as ex:                    # 2 cores: 3 seeds each
        parts = list(ex.map(_amp_seeds, [[0, 1, 2], [3, 4, 5]]))
    finals = np.array([q for p in parts for q, _ in p])
    conv = [c for p in parts for _, c in p]
    from aim_sym.numerics import smi

    se = smi.layer2_point(alpha=0.6)
    q22 = finals[:, 1].mean()
    s22 = finals[:, 1].std(ddof=1) / math.sqrt(len(finals))
    msg = (q22, s22, se["Q"][1], se["error"][1], finals[:, 1].tolist())
    assert abs(q22 - se["Q"][1]) < 3 * math.hypot(s22, se["error"][1]) + ALLOW_D2000, msg
    assert finals[:, 0].max() < 0.01                      # layer 1 unlearned (SE: Q_11 = 0)
    assert np.mean(conv) >= 5 / 6                         # measured: 16/16 at D = 2000


@pytest.mark.slow
def test_amp_vs_montecarlo_se_alpha_1():
    # above the sequential threshold: both layers learned. alpha = 1 is marginal for
    # numerics.smi.fixed_point (the both-learned branch ends there), so the reference is the
    # Monte Carlo SE
    # (same g_out). alpha = 1 is the parameter-counting point (2 numbers per sample, 2 D
    # unknowns): the SE map is nearly the identity along a curve in (Q_11, Q_22) and Q_11 creeps
    # up in both the SE and GAMP (SE 0.73 after 40 iterations, 0.83 after 150; GAMP 0.89 after
    # 80, 0.95 after 150 at D = 500), so only Q_22 is compared quantitatively; for Q_11 the
    # test checks that layer 1 is learned.
    r = smi_amp.run_smi_amp(alpha=1.0, dim=500, seeds=3, max_iter=80, se=False)
    mc = smi_mc_oracles.se_montecarlo(alpha=1.0, samples=1000, iters=30)
    err = math.hypot(r["Q_stderr"][1], mc["Q_err"][1])
    assert abs(r["Q_mean"][1] - mc["Q_diag"][1]) < 3 * err + 0.01
    assert r["Q_mean"][0] > 0.5


@pytest.mark.slow
def test_layer2_point_matches_montecarlo_se():
    # two independent routes for the SE fixed point on the branch Q = diag(0, q2) at alpha = 0.6:
    # the lattice quadrature (numerics.smi.layer2_point, ~20 s on 2 cores) must solve
    # q2 / (1 - q2) = alpha K2(q2) with the seeded Monte Carlo K2 (smi_mc_oracles.montecarlo_branch)
    from aim_sym.numerics import smi

    lat = smi.layer2_point(alpha=0.6)
    q2, e2 = lat["Q"][1], lat["error"][1]
    assert e2 < 1e-3
    K2 = smi_mc_oracles.montecarlo_branch(q2, samples=6000, inner=800, seed=2)["K2"]
    lhs, rhs = q2 / (1 - q2), 0.6 * K2.value
    # d(lhs)/dq2 = 1 / (1 - q2)^2: the root's bar maps onto lhs with that factor
    assert abs(lhs - rhs) < 3 * math.hypot(0.6 * K2.error, e2 / (1 - q2) ** 2), (q2, e2, K2)
    assert abs(q2 - 0.9417) > 10 * e2          # the former Gauss-Hermite rule's value is excluded
