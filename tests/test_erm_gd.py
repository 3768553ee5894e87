"""Finite-size ERM training of one tied attention layer (THEORY 3): aim_sym.numerics.erm_gd and
aim_sym.erm_gd_api. Gradient by finite differences and by the S-space formula, the data and noise
conventions, the stopping rule, the nuclear-norm threshold for S = 0, seeded reproducibility."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np
import pytest
from aim_sym.numerics import erm_gd as g
from aim_sym.numerics.records import InputError

from aim_sym import erm_gd_api

DATA = Path(__file__).parent / "data" / "erm_gd"


def _instance(*, dim=10, alpha=0.4, tokens=2, beta=1.3, beta0=0.8, kappa=1.0, lam=0.02,
              Delta=0.5, seed=1):
    P = g.GDProblem(kappa0=0.5, Delta=Delta, lam=lam, tokens=tokens, beta=beta, beta0=beta0,
                    kappa=kappa)
    rng = np.random.default_rng(seed)
    data = g.generate(P, alpha=alpha, dim=dim, rng=rng)
    return P, data, g.init_student(P, dim, rng)


@pytest.mark.parametrize("tokens,kappa", [(2, 1.0), (3, 0.5)])
def test_gradient_matches_finite_differences(tokens, kappa):
    P, data, W = _instance(tokens=tokens, kappa=kappa)
    L, G, _ = g.loss_and_gradient(W, data, P)
    rng = np.random.default_rng(7)
    for _ in range(3):
        V = rng.standard_normal(W.shape)
        V /= np.linalg.norm(V)
        exact = float(np.sum(G * V))
        fd = []
        for h in (1e-3, 5e-4):
            lp = g.loss_and_gradient(W + h * V, data, P, gradient=False)[0]
            lm = g.loss_and_gradient(W - h * V, data, P, gradient=False)[0]
            fd.append((lp - lm) / (2 * h))
        richardson = (4 * fd[1] - fd[0]) / 3  # removes the h^2 term
        assert abs(richardson - exact) <= 1e-7 * (abs(exact) + np.linalg.norm(G))
        assert abs(fd[1] - exact) <= abs(fd[0] - exact)  # the central difference converges


def test_gradient_is_2_W_M_over_c():
    """dL/dW = (2/c) W (G_s + lambda_t d I): the W-gradient against the S-space gradient
    computed by an independent einsum over the samples."""
    P, data, W = _instance(dim=12, kappa=0.75)
    _, G, _ = g.loss_and_gradient(W, data, P)
    p, d = W.shape
    M = g.data_gradient_S(g.student_matrix(W), data, P) + P.lam * d * np.eye(d)
    np.testing.assert_allclose(G, 2 / math.sqrt(p * d) * W @ M, rtol=0, atol=1e-10 * np.abs(G).max())


def test_preactivations_and_noise_follow_theory_3():
    """Var h_ab = (1 + delta_ab) Tr S^2 / d (centred, THEORY 1.1) and the label noise has
    variance Delta on the diagonal and Delta/2 off it, symmetric: the finite-size form of the
    SE's sqrt(1 + delta_ab) rescaling."""
    rng = np.random.default_rng(3)
    d, n = 40, 40_000
    S = g.sample_teacher(d, 0.5, rng)
    X = rng.standard_normal((n, 3, d))
    H = g.preactivations(X, S)
    Q = np.sum(S * S) / d
    np.testing.assert_allclose(H, np.swapaxes(H, 1, 2))
    for (a, b), target in (((0, 0), 2 * Q), ((1, 1), 2 * Q), ((0, 1), Q), ((1, 2), Q)):
        v = H[:, a, b]
        se_var = np.sqrt(2 / n) * target * 1.2  # Gaussian-ish; quadratic forms have heavier tails
        assert abs(v.var() - target) < 4 * se_var
        assert abs(v.mean()) < 4 * np.sqrt(target / n)
    Z = g.label_noise(n, 3, 0.5, rng)
    np.testing.assert_array_equal(Z, np.swapaxes(Z, 1, 2))
    for (a, b), target in (((0, 0), 0.5), ((2, 2), 0.5), ((0, 1), 0.25), ((0, 2), 0.25)):
        assert abs(Z[:, a, b].var() - target) < 4 * np.sqrt(2 / n) * target


def test_teacher_normalisation():
    rng = np.random.default_rng(4)
    S0 = g.sample_teacher(200, 0.5, rng)
    assert abs(np.sum(S0 * S0) / 200 - 1.5) < 0.05  # Q0 = 1 + kappa0 (+ O(1/d))
    assert abs(np.trace(S0) / 200 - math.sqrt(0.5)) < 0.01  # Tr S0 / d = sqrt(kappa0)
    assert np.linalg.matrix_rank(S0) == 100


@pytest.mark.parametrize("method,tol", [("lbfgs", 1e-6), ("gd", 1e-4)])
def test_training_decreases_the_loss_and_stops(method, tol):
    P, data, W0 = _instance(dim=20, alpha=0.5, beta=1.0, beta0=1.0, lam=0.01)
    tr = g.train(data, P, W0, method=method, tol=tol, max_iter=20_000)
    assert tr.converged and tr.rel_grad <= tol
    h = np.array(tr.history)
    assert np.all(np.diff(h) <= 1e-12 * h[0])  # Armijo / Wolfe: every step decreases the loss
    assert h[-1] < 0.5 * h[0]
    L_end = g.loss_and_gradient(tr.W, data, P, gradient=False)[0] / 400
    assert L_end == pytest.approx(tr.loss, rel=1e-12)


def test_both_optimisers_reach_the_same_minimiser():
    P, data, W0 = _instance(dim=16, alpha=0.5, beta=1.0, beta0=1.0, lam=0.02)
    a = g.train(data, P, W0, method="lbfgs", tol=1e-8)
    b = g.train(data, P, W0, method="gd", tol=1e-5, max_iter=50_000)
    assert a.converged and b.converged
    Sa, Sb = g.student_matrix(a.W), g.student_matrix(b.W)
    assert a.loss == pytest.approx(b.loss, rel=1e-6)
    assert np.linalg.norm(Sa - Sb) < 1e-3 * np.linalg.norm(Sa)


def test_large_weight_decay_gives_S_zero():
    """lambda_zero = lambda_max(-G_s(0)) / d: above it W = 0 is a minimum and training ends at
    S = 0, below it S = 0 is a saddle and training leaves it. Checked independently by the loss
    along the top eigenvector of -G_s(0): L(t V) - L(0) = t^2 v^T M v / c + O(t^4)."""
    P, data, W0 = _instance(dim=20, alpha=0.5, beta=1.0, beta0=1.0, lam=0.01)
    lam0 = g.zero_solution_lambda(data, P)
    assert lam0 > 0
    d = data.dim
    G = g.data_gradient_S(np.zeros((d, d)), data, P)
    v = np.linalg.eigh(-G)[1][:, -1]
    for factor, sign in ((1.02, 1), (0.98, -1)):
        Pf = g.GDProblem(kappa0=0.5, Delta=0.5, lam=factor * lam0)
        V = np.zeros((d, d))
        V[0] = v
        t = 1e-3
        dL = (g.loss_and_gradient(t * V, data, Pf, gradient=False)[0]
              - g.loss_and_gradient(0 * V, data, Pf, gradient=False)[0])
        assert sign * dL > 0
    above = g.train(data, g.GDProblem(kappa0=0.5, Delta=0.5, lam=1.25 * lam0), W0, tol=1e-6)
    below = g.train(data, g.GDProblem(kappa0=0.5, Delta=0.5, lam=0.75 * lam0), W0, tol=1e-6)
    assert above.converged and below.converged
    assert np.trace(g.student_matrix(above.W)) / d < 1e-8
    assert np.trace(g.student_matrix(below.W)) / d > 1e-3


def test_rank_counts_eigenvalues_above_the_relative_threshold():
    S = np.diag([3.0, 1.0, 0.01, 1e-6, 1e-9, 0.0, -1e-12, 0.0])
    assert g.rank_of(S) == 3 / 8
    assert g.rank_of(S, threshold=1e-2) == 2 / 8
    assert g.rank_of(np.zeros((4, 4))) == 0.0


def test_runs_are_seeded_and_instances_independent():
    P = g.GDProblem(kappa0=0.5, Delta=0.5, lam=0.01)
    kw = dict(alpha=0.3, dim=14, seeds=2, n_test=500, tol=1e-5)
    a = g.run_instances(P, rng_seed=5, **kw)
    b = g.run_instances(P, rng_seed=5, **kw)
    c = g.run_instances(P, rng_seed=6, **kw)
    assert a["mean"] == b["mean"] and a["per_seed"][1]["test"] == b["per_seed"][1]["test"]
    assert a["mean"]["mse"] != c["mean"]["mse"]
    assert a["per_seed"][0]["Q0_instance"] != a["per_seed"][1]["Q0_instance"]  # own teachers
    assert all(r["converged"] for r in a["per_seed"])
    for k in g.METRICS:
        assert a["stderr"][k] is not None and a["optimisation_error"][k] >= 0


def test_api_returns_results_with_error_bars():
    t = erm_gd_api.gd(kappa0=0.5, delta=0.5, lam=0.01, alpha=0.3, dim=12, seeds=3, tol=1e-5,
                      n_test=400)
    assert [r.quantity for r in t] == list(erm_gd_api.QUANTITIES)
    for r in t:
        assert math.isfinite(r.value) and r.error >= r.details["stderr"] > 0
        assert len(r.details["per_seed"]) == 3
        assert r.value == pytest.approx(np.mean(r.details["per_seed"]))
    s = erm_gd_api.summary(t)
    assert s["dim"] == 12 and s["converged"] is True and "mse_error" in s
    assert t.to_frame().shape[0] == len(erm_gd_api.QUANTITIES)
    one = erm_gd_api.gd(kappa0=0.5, delta=0.0, lam=0.01, alpha=0.2, dim=8, seeds=1, n_test=50)
    assert one[0].error is None


@pytest.mark.parametrize("kw,name", [
    ({"dim": 2}, "dim"), ({"alpha": 0.0}, "alpha"), ({"alpha": float("nan")}, "alpha"),
    ({"lam": -1.0}, "lam"), ({"delta": -0.1}, "delta"), ({"method": "adam"}, "method"),
    ({"seeds": 0}, "seeds"), ({"tol": 0.0}, "tol"), ({"kappa0": 0.0}, "kappa0"),
    ({"tokens": 1}, "tokens"), ({"kappa": 0.0}, "kappa"), ({"n_test": 1}, "n_test"),
])
def test_api_refuses_bad_input(kw, name):
    base = dict(kappa0=0.5, delta=0.5, lam=0.01, alpha=0.3, dim=8, seeds=1)
    with pytest.raises(InputError, match=name):
        erm_gd_api.gd(**{**base, **kw})


def test_averaging_students_lowers_the_error():
    """AIM comparison (no noise, no weight decay, student width = teacher width): the error of
    the average of k students is below the mean single-student error (convexity of the
    squared error: ||mean S_k - S0||^2 <= mean ||S_k - S0||^2), with equality only if all
    students agree."""
    P = g.GDProblem(kappa0=0.5, Delta=0.0, lam=0.0, kappa=0.5)
    r = g.run_averaged(P, alpha=0.08, dim=16, seeds=2, students=4, tol=1e-5)
    for row in r["per_seed"]:
        assert row["mse"] < row["mse_single"]
        assert set(row["running"]) == {1, 2, 4}
    assert r["stderr"]["mse"] is not None
    t = erm_gd_api.gd_averaged(rho=0.5, alpha=0.08, dim=16, seeds=2, students=4, tol=1e-5)
    assert t.value == pytest.approx(r["mean"]["mse"])  # same seeds, same numbers
    with pytest.raises(InputError, match="students"):
        erm_gd_api.gd_averaged(rho=0.5, alpha=0.08, dim=16, students=0)


def test_fixtures_hold_the_reference_runs():
    with open(DATA / "GD_kappa_0.5_lreg_0.01_noise_0.5.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 64 and {"alpha", "test_error_mean", "loss_mean"} <= set(rows[0])


@pytest.mark.slow
def test_d100_matches_the_authors_adam_run_at_alpha_0_28():
    """lambda = 0.01, alpha = 0.28 (a row of their file): ours at d = 100 (8 instances) against
    their Adam mean; the bars add in quadrature (theirs std/sqrt(8))."""
    t = {r.quantity: r for r in erm_gd_api.gd(kappa0=0.5, delta=0.5, lam=0.01, alpha=0.28,
                                               dim=100, seeds=8)}
    with open(DATA / "GD_kappa_0.5_lreg_0.01_noise_0.5.csv") as fh:
        row = next(r for r in csv.DictReader(fh) if abs(float(r["alpha"]) - 0.28) < 1e-6)
    for q, col, std in (("test", "test_error_mean", "test_err_std"),
                        ("train", "loss_mean", "loss_std")):
        bar = math.hypot(t[q].error, float(row[std]) / math.sqrt(8))
        assert abs(t[q].value - float(row[col])) < 4 * bar


def test_rank_bar_keeps_its_resolution():
    """Identical rank counts over instances give a standard error of 0; the reported bar keeps
    the resolution 1/(d sqrt(seeds)) of a mean of counts / d."""
    from aim_sym.erm_gd_api import gd

    t = gd(kappa0=0.5, delta=0.5, lam=2.0, alpha=0.3, dim=12, seeds=2, n_test=200)
    rank = next(r for r in t if r.quantity == "rank")
    assert rank.error >= 1.0 / (12 * 2**0.5)
