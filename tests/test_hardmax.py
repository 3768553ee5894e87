"""Hardmax at small width for T = 2..5 (THEORY 1.4): the ordered-cone recursion against the
T = 2 closed form, seeded Monte Carlo, Genz orthant probabilities and the linear-channel bound."""

import itertools
import json
import math

import numpy as np
import pytest
from aim_sym.numerics import hardmax as hm
from scipy.stats import multivariate_normal

from aim_sym.domains import DomainError
from aim_sym.thresholds import hardmax_small_width_weak


def closed_form_T2() -> float:
    A = math.asin(1.0 / 3.0)
    return 3 * (math.pi**2 - 4 * A**2) / (8 * (3 * math.pi - 2 * A))


def test_recursion_reproduces_T2_closed_form():
    e = hm.weak_threshold(2)
    assert abs(e.value - closed_form_T2()) < max(e.error, 1e-15)
    assert e.error < 1e-14
    # a coarse rule is visibly off: the comparison can fail
    assert abs(1 / (2 * hm.small_width_sum(2, nodes=32)["S"]) - closed_form_T2()) > 1e-9


@pytest.mark.parametrize("T", [3, 4])
def test_threshold_converged_with_honest_bar(T):
    e = hm.weak_threshold(T)
    assert e.error < 1e-12  # >= 12 digits
    other = hm.weak_threshold(T, nodes=112)  # a third pair of rules
    assert abs(other.value - e.value) <= e.error + other.error
    assert abs(e.extra["probability_sum"] - 1) < 1e-13
    # hardmax is a function of h: F <= the linear channel's T(T+1), alpha_bar_c >= 1/(T(T+1));
    # it forgets more than softmax does, alpha_bar_c > 1/(T^2 + T - 2)
    assert e.value > 1 / (T * T + T - 2) > 1 / (T * (T + 1))
    if T == 3:
        assert e.extra["seconds"] < 10


def test_orbits_cover_all_outcomes():
    for T in (2, 3, 4):
        orbits = hm.outcome_orbits(T)
        assert sum(size for _, size in orbits) == T**T


def test_first_moments_sum_to_zero_over_all_outcomes():
    # sum_y E[h_ab 1_y] = E[h_ab] = 0 for every entry: checks each moment channel, T = 3
    T = 3
    total = np.zeros(1 + T * (T + 1) // 2)
    for y in itertools.product(range(T), repeat=T):
        total += hm.outcome_moments(y, nodes=96)
    assert abs(total[0] - 1) < 1e-13
    assert np.max(np.abs(total[1:])) < 1e-13
    # a cyclic outcome (row 1 -> 2, 2 -> 3, 3 -> 1) is impossible
    assert np.all(hm.outcome_moments((1, 2, 0), nodes=64) == 0)


def _event_matrix(y, T):
    """Rows of A with y <=> A h > 0 (h flat over a <= b), the argmax inequalities."""
    flat = hm.pairs(T)
    idx = {p: i for i, p in enumerate(flat)}

    def at(a, b):
        return idx[(min(a, b), max(a, b))]

    rows = []
    for a, b in enumerate(y):
        for c in range(T):
            if c != b:
                r = np.zeros(len(flat))
                r[at(a, b)] += 1
                r[at(a, c)] -= 1
                rows.append(r)
    return np.array(rows)


def test_outcome_probabilities_against_genz():
    # an independent route for P(y): Genz's quasi-Monte Carlo orthant probability of A h > 0
    T = 3
    var = np.array([2.0 if a == b else 1.0 for a, b in hm.pairs(T)])
    for y, _ in hm.outcome_orbits(T):
        p = hm.outcome_moments(y, nodes=96)[0]
        if p == 0:
            continue
        A = _event_matrix(y, T)
        cov = A @ np.diag(var) @ A.T
        genz = multivariate_normal.cdf(np.zeros(len(A)), mean=np.zeros(len(A)), cov=cov,
                                       allow_singular=True, maxpts=2_000_000, abseps=1e-6,
                                       releps=0, rng=np.random.default_rng(7))
        # P(A h > 0) = P(-A h < 0) = cdf at 0 of the same (symmetric) law
        assert abs(genz - p) < 1e-5, (y, p, genz)


@pytest.mark.parametrize("T,samples", [(3, 400_000), (4, 400_000)])
def test_monte_carlo_agrees(T, samples):
    mc = hm.monte_carlo_sum(T, samples=samples, seed=11, batches=16)
    S = hm.weak_threshold(T).extra["S"]
    assert abs(mc.value - S) < 4 * mc.error
    assert mc.error < 0.01 * S


@pytest.mark.slow
def test_T5_threshold_and_monte_carlo():
    e = hm.weak_threshold(5)
    assert e.error < 1e-12
    assert e.value > 1 / 28 > 1 / 30
    mc = hm.monte_carlo_sum(5, samples=4_000_000, seed=5, batches=32)
    assert abs(mc.value - e.extra["S"]) < 4 * mc.error


def test_api_result_and_ranges():
    r = hardmax_small_width_weak(tokens=3)
    assert r.quantity == "alpha_bar_c" and float(r.value) == pytest.approx(
        hm.weak_threshold(3).value, abs=1e-14)
    assert r.error < 1e-12 and r.details["softmax"] == pytest.approx(0.1)
    r2 = hardmax_small_width_weak(tokens=2, digits=20)
    assert abs(float(r2.value) - closed_form_T2()) < 1e-15 and "closed_form" in r2.details
    with pytest.raises(DomainError, match="2..5"):
        hardmax_small_width_weak(tokens=6)
    with pytest.raises(DomainError, match="1..15"):
        hardmax_small_width_weak(tokens=3, digits=20)




def test_cli_hardmax_T3_json_and_refusals(run_cli):
    base = ["threshold", "weak", "--channel", "hardmax", "--small-width"]
    rc, out, err = run_cli(base + ["--tokens", "3", "--json"])
    assert rc == 0, err
    out = json.loads(out)
    assert out["tokens"] == 3 and out["threshold"] == "alpha_bar_c"
    assert abs(float(out["value"]) - hm.weak_threshold(3).value) < 1e-14
    assert out["error"] < 1e-12 and "Chebyshev" in out["method"]
    rc, _, err = run_cli(base + ["--tokens", "6"])
    assert rc == 2 and "--tokens" in err and "2..5" in err
    assert len(err.strip().splitlines()) == 1
    rc, _, err = run_cli(base + ["--tokens", "3", "--certified"])
    assert rc == 2 and "--certified" in err
    rc, _, err = run_cli(base + ["--tokens", "3", "--digits", "30"])
    assert rc == 2 and "--digits" in err


@pytest.mark.slow
def test_many_digit_route_agrees_T3():
    # mpmath at 30 working digits, Chebyshev 160 / 224 nodes (~1 min): the double route's
    # value lies within its own bar of the many-digit one
    e = hm.weak_threshold_mp(3, dps=20, nodes=160)
    d = hm.weak_threshold(3)
    assert e.error < 1e-19
    assert abs(float(e.value) - d.value) <= d.error
