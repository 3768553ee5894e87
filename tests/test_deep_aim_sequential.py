"""Deep AIM at small width: layer 1's threshold along layer 2's branch (THEORY 1.2, 1.6;
docs/deep_aim_sequential.md)."""

from __future__ import annotations

import math

import pytest
from aim_sym.numerics import deep_aim as da
from aim_sym.numerics import deep_aim_sequential as sq
from aim_sym.numerics.records import InputError


def test_branch_alpha_inverts_the_small_width_prior_side():
    """alpha_bar on the branch puts q2 back through q = max(1 - 1/(2 alpha_bar E), 0)^2."""
    for q2, e2 in ((0.0, 1.3), (0.25, 2.0), (0.81, 9.0)):
        a = sq.branch_alpha(q2, e2)
        assert sq.small_width_overlap(alpha_bar=a, e=e2) == pytest.approx(q2, abs=1e-14)
        assert sq.small_width_overlap(alpha_bar=0.99 * a, e=e2) < q2 or q2 == 0.0
    assert sq.small_width_overlap(alpha_bar=0.1, e=1.0) == 0.0
    with pytest.raises(InputError):
        sq.branch_alpha(1.0, 2.0)
    with pytest.raises(InputError):
        sq.branch_point(skip=1.0, q2=-0.1)


def test_s1_at_q2_zero_is_the_small_width_fibre_value():
    """At q2 = 0 the RQMC S_1 and S_2 agree with the deterministic fibre quadrature of
    numerics/deep_aim.py within the RQMC bar."""
    p = sq.branch_point(skip=2.0, q2=0.0, m=8)
    f = da.small_width_overlaps(da.DeepAim(skip=2.0), steps=((0.12, 0.5), (0.1, 0.4)))
    assert abs(p["S1"].value - f["S1"].value) <= p["S1"].error + f["S1"].error
    assert abs(p["E2"].value - f["S2"].value) <= p["E2"].error + f["S2"].error
    assert p["alpha_bar_2"].value == pytest.approx(f["alpha_bar_2"].value,
                                                   abs=p["alpha_bar_2"].error + 1e-6)


def test_s1_grows_with_q2_and_stays_below_two():
    """S_1(q2) increases along layer 2's overlap (c = 2) and respects S_l <= 2."""
    vals = [sq.branch_point(skip=2.0, q2=q2, m=6) for q2 in (0.0, 0.4, 0.8)]
    for lo, hi in zip(vals, vals[1:], strict=False):
        assert hi["S1"].value - lo["S1"].value > 3 * (hi["S1"].error + lo["S1"].error)
    assert all(v["S1"].value + v["S1"].error <= 2.0 for v in vals)


def test_no_skip_layer_one_is_seen_once_layer_two_is_learned():
    """c = 0: S_1(0) = 0 by the sign symmetry of H1, but knowing H2 (q2 > 0) breaks it."""
    p0 = sq.branch_point(skip=0.0, q2=0.0, m=6)
    p8 = sq.branch_point(skip=0.0, q2=0.8, m=6)
    assert abs(p0["S1"].value) <= p0["S1"].error
    assert p8["S1"].value > 5 * p8["S1"].error


def test_sequential_threshold_solves_its_equation():
    """c = 2: the crossing of 1/(2 S_1(q2)) with the branch, from a coarse scan, is below the q = 0
    threshold; direct evaluations (another seed) at q2* -+ twice its bar straddle the crossing
    (2 alpha_bar S_1 - 1 changes sign on the branch), and alpha_bar_seq,1 lies between the two
    curves at q2*."""
    rows = sq.scan(skip=2.0, q2s=(0.0, 0.8, 0.9, 0.95), m=6)
    t = sq.sequential_threshold(rows)
    assert t is not None
    q2s, a = t["q2"], t["alpha_bar_seq_1"]
    assert 0.8 < q2s.value < 0.95 and 0 < q2s.error < 0.05
    assert a.value + a.error < t["alpha_bar_c_1"].value - t["alpha_bar_c_1"].error
    assert a.value - a.error > t["alpha_bar_c_2"].value
    lo = sq.branch_point(skip=2.0, q2=q2s.value - 2 * q2s.error, m=6, seed=3)
    hi = sq.branch_point(skip=2.0, q2=q2s.value + 2 * q2s.error, m=6, seed=3)
    assert lo["alpha_bar_1"].value - lo["alpha_bar_1"].error > (lo["alpha_bar_2"].value
                                                                + lo["alpha_bar_2"].error)
    assert hi["alpha_bar_1"].value + hi["alpha_bar_1"].error < (hi["alpha_bar_2"].value
                                                                - hi["alpha_bar_2"].error)
    mid = sq.branch_point(skip=2.0, q2=q2s.value, m=6, seed=3)
    pair = sorted((mid["alpha_bar_1"].value, mid["alpha_bar_2"].value))
    slack = mid["alpha_bar_1"].error + mid["alpha_bar_2"].error + a.error
    assert pair[0] - slack <= a.value <= pair[1] + slack
    assert math.isfinite(a.error) and a.error < 0.1 * a.value


@pytest.mark.slow
def test_branch_point_against_monte_carlo():
    """The RQMC S_1(q2), E_2(0, q2) against the seeded plain Monte Carlo route (4 standard
    errors), c = 0.5 (the default inner rule, "line" since 2026-11-26) at q2 = 0.5."""
    p = sq.branch_point(skip=0.5, q2=0.5, m=8)
    mc = sq.branch_point_mc(skip=0.5, q2=0.5, samples=10_000, inner=4000, seed=5)
    for k in ("S1", "E2"):
        assert abs(p[k].value - mc[k].value) <= 4 * mc[k].error + p[k].error
