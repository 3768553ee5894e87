"""Lattice engine of the SMI sequential threshold (numerics.smi_sequential, THEORY 2.2-2.3)."""

import math

import numpy as np
import pytest
from aim_sym.numerics import smi_sequential as seq
from aim_sym.numerics.records import InputError
from test_smi import FIBRE_REFS


def test_fibre_lattice_against_trapezoid_refs():
    # references: an independent trapezoid on [-9, 9]^2 with steps 0.004 / 0.002 (test_smi)
    h, om = (np.array([r[k] for r in FIBRE_REFS]) for k in range(2))
    ref = np.array([r[3] for r in FIBRE_REFS])
    lat = seq.fibre_lattice(0.09, 1.0, 1.0)
    c00, c01, c11, *_ = seq.fibre_moments(h[:, 0], h[:, 1], om[:, 0], om[:, 1], 0.025, lat)
    rel = np.abs(c00**2 + 2 * c01**2 + c11**2 - ref) / ref
    assert rel.max() < 1e-9          # measured 9e-11 (the Laplace-mixture rule: 1e-3 .. 1e-2)


def test_fibre_lattice_geometric_convergence():
    rng = np.random.default_rng(3)
    h = 2.0 * rng.standard_normal((12, 2))
    om = rng.standard_normal((12, 2))
    out = {}
    for dz in (0.15, 0.12, 0.09):
        out[dz] = np.array(seq.fibre_moments(h[:, 0], h[:, 1], om[:, 0], om[:, 1], 0.03,
                                             seq.fibre_lattice(dz, 1.0, 1.0))[:6])
    e1 = np.abs(out[0.15] - out[0.09]).max()
    e2 = np.abs(out[0.12] - out[0.09]).max()
    assert e2 < 1e-5 and e2 < 0.2 * e1


@pytest.mark.parametrize("omega", [(0.9, -0.6), (0.2, -0.1)])
def test_h_lattice_mass_and_nishimori(omega):
    # the h rule integrates the density of {h, -h} (mass 1) and satisfies the Nishimori
    # identity E|g|^2 = (2 - E tr Cov[z_2|.]/V)/V pointwise in omega; (0.2, -0.1): the box
    # overlaps its mirror image (multiplicity 1 nodes)
    v2 = 1 - 0.974376
    lat = seq.fibre_lattice(0.2, 1.0, 1.0)
    acc, _ = seq.omega_task((omega[0], omega[1], 1.0, v2, 1.0, 0.2, lat, False))
    mass, mu1, K2, trcov2, _ = acc
    assert abs(mass - 1) < 1e-9
    assert abs(K2 - (2 * mass - trcov2 / v2) / v2) < 1e-8 * K2
    assert mu1 > 0


def test_omega_box_contains_attention_image():
    o0, o1, c = 0.7, -0.4, 1.0
    H0, H1, W = seq.h_lattice(o0, o1, 0.02, c, 0.1)
    for sa, sb in ((0.0, 1.0), (1.0, 0.0), (1.0, 1.0), (0.6, 0.7)):
        A = np.array([[sa + c, 1 - sa], [1 - sb, sb + c]])
        h = A @ np.array([o0, o1])
        assert H0.min() < h[0] < H0.max() and H1.min() < h[1] < H1.max()
    assert np.all(W > 0) and math.isclose(W.max(), 0.1**2, rel_tol=1e-12)


def test_inputs():
    with pytest.raises(InputError, match="q2"):
        seq.branch_stats(1.0)
    with pytest.raises(InputError, match="dh"):
        seq.branch_stats(0.5, dh=0.05)
    with pytest.raises(InputError, match="skip"):
        seq.sequential_threshold(skip=0.0)
    with pytest.raises(InputError, match="dz"):
        seq.fibre_lattice(0.0, 1.0, 1.0)


def _model_resid(calls, q_star, refined):
    # model residual with known root and mu1; the refined order (and, when ``refined`` is a list,
    # every order in it) shifts the root by 1e-5 and has mu1 = 1.4 there; the other orders have
    # mu1 = 1.4002 at their root (a coarse-refined spread of 1e-4 in alpha)
    refined = refined if isinstance(refined, list) else [refined]

    def fake(q, c, beta, order, workers):
        calls.append((q, order))
        shift = 1e-5 if order in refined else 0.0
        x = q - q_star - shift
        r = 30.0 * x + 200.0 * x**2
        mu1 = 1.4 + 25.0 * x + 50.0 * x**2 + (0.0 if order in refined else 2e-4)
        return r, dict(mu1=mu1, K2=50.0, nishimori=0.0, mass=1.0, pairs=0,
                       cut=dict(mass=0.0, K=0.0, mu=0.0, K_tail=0.0, mu_tail=0.0))
    return fake


@pytest.mark.parametrize("q_star", [0.974, 0.7])
def test_threshold_root_search_on_a_model_residual(monkeypatch, q_star):
    # the reported error must cover the coarse-refined spread and the value is the refined one
    calls = []
    monkeypatch.setattr(seq, "_resid", _model_resid(calls, q_star, seq.SEQ_ORDERS[1]))
    r = seq.sequential_threshold(workers=1)
    exact = 1.0 / 1.4
    # second-order remainder of the first-order shift to the refined root: ~ mu'' dq^2
    assert abs(r["value"] - exact) < min(1e-8, r["error"])
    assert abs(r["q2"] - (q_star + 1e-5)) < 1e-9
    assert r["error"] >= abs(r["values"][0] - r["values"][1]) > 0
    assert calls[0] == (seq.SEQ_SCAN_START, seq.SEQ_SCAN_ORDER)


def test_threshold_digits_pick_the_ladder(monkeypatch):
    # most digits: refined = rung SEQ_DIGITS[top], coarse the rung below, root found at rung 3
    # (three points), slope check at rung 2 (two points); each expensive order is evaluated once.
    # The model's coarse-refined spread (1e-4) is above the target 5e-8, so the pair moves up
    # one rung, where the model has converged (same root): the bar then meets the target
    top = seq.FLOAT64_DIGITS - 1
    k = seq.SEQ_DIGITS[top]
    fine, coarse, up = seq.SEQ_LADDER[k], seq.SEQ_LADDER[k - 1], seq.SEQ_LADDER[k + 1]
    calls = []
    monkeypatch.setattr(seq, "_resid", _model_resid(calls, 0.974, [fine, up]))
    r = seq.sequential_threshold(workers=1, digits=top)
    orders = [o for _, o in calls]
    assert k >= 4 and orders.count(fine) == 1 and orders.count(coarse) == 1
    assert orders.count(up) == 1
    assert orders.count(seq.SEQ_LADDER[3]) == 3 and orders.count(seq.SEQ_LADDER[2]) == 2
    assert abs(r["value"] - 1 / 1.4) < 1e-8 and abs(r["q2"] - (0.974 + 1e-5)) < 1e-9
    assert r["orders"] == [list(fine), list(up)] and r["error"] < 5e-8 and not r["note"]
    with pytest.raises(InputError, match="digits"):
        seq.sequential_threshold(digits=max(seq.SEQ_DIGITS) + 1)


def test_threshold_float64_digits(monkeypatch):
    # from FLOAT64_DIGITS: the pair is tagged "float64", the root is found at rung 4 (three
    # points) with the slope check at rung 3 (two), and the bar carries no float32 term
    d = seq.FLOAT64_DIGITS
    k = seq.SEQ_DIGITS[d]
    fine, coarse = (*seq.SEQ_LADDER[k], "float64"), (*seq.SEQ_LADDER[k - 1], "float64")
    calls = []
    # every order of the run shares the model's root (no shifts): the bar meets 5e-9
    same = [fine, coarse, seq.SEQ_LADDER[4], seq.SEQ_LADDER[3], seq.SEQ_SCAN_ORDER]
    monkeypatch.setattr(seq, "_resid", _model_resid(calls, 0.974, same))
    r = seq.sequential_threshold(workers=1, digits=d)
    orders = [o for _, o in calls]
    assert orders.count(fine) == 1 and orders.count(coarse) == 1
    assert orders.count(seq.SEQ_LADDER[4]) == 3 and orders.count(seq.SEQ_LADDER[3]) == 2
    assert r["root_order"] == list(seq.SEQ_LADDER[4]) and r["float32"] == 0.0
    assert r["error"] < 5.0 * 10.0 ** -d and not r["note"]


def test_float64_tag_reaches_the_kernel(monkeypatch):
    seen = []

    def fake(q2, **kw):
        seen.append(kw["single"])
        return dict(mu1=1.4, K2=50.0)

    monkeypatch.setattr(seq, "branch_stats", fake)
    seq._resid(0.97, 1.0, 1.0, (0.5, 2.8, 0.25, "float64"), 1)
    seq._resid(0.97, 1.0, 1.0, (0.5, 2.8, 0.25), 1)
    assert seen == [False, True]


def test_omega_rule_even_moments():
    # the quadrant rule is exact for integrands even in s and in d separately
    q = 0.9744738
    o0, o1, w = seq.omega_rule(0.2, q)
    s, d = (o0 + o1) / math.sqrt(2), (o0 - o1) / math.sqrt(2)
    assert abs(w.sum() - 1) < 1e-9
    assert abs(w @ s**2 - q) < 1e-8 and abs(w @ (s * s * d * d) - q * q) < 1e-8
    assert abs(w @ d**4 - 3 * q * q) < 1e-7
    # and it resolves the sqrt(V) scale at the origin: E exp(-|omega|^2 / (2 V)) in closed form
    v = 1 - q
    exact = v / (v + q)
    assert abs(w @ np.exp(-(s**2 + d**2) / (2 * v)) - exact) < 1e-9


def test_fused_kernel_against_direct_sums():
    # the blocked kernel (clipped exponents, one-sign rows, fused passes) against the plain
    # per-point sums over the same lattice, at omega where one sign dominates and near 0
    lat = seq.fibre_lattice(0.25, 1.0, 1.0)
    z0, z1 = lat["z"]
    Ai = lat["Ai"]
    v2 = 0.03
    rng = np.random.default_rng(7)
    om = np.concatenate([3.0 * rng.standard_normal((6, 2)), 0.05 * rng.standard_normal((3, 2))])
    h = np.concatenate([om[:6] * 1.5, rng.standard_normal((3, 2))])
    got = np.array(seq.fibre_moments(h[:, 0], h[:, 1], om[:, 0], om[:, 1], v2, lat))
    for k in range(len(h)):
        u0 = Ai[:, 0] * h[k, 0] + Ai[:, 1] * h[k, 1]
        u1 = Ai[:, 2] * h[k, 0] + Ai[:, 3] * h[k, 1]
        le = np.stack([lat["logw"] - ((u0 - s * om[k, 0]) ** 2 + (u1 - s * om[k, 1]) ** 2)
                       / (2 * v2) for s in (1, -1)])
        top = le.max()
        e = np.exp(le - top)
        S, D = e.sum(0), e[0] - e[1]
        Z = S.sum()
        ref = [S @ (z0 * z0) / Z - 1, S @ (z0 * z1) / Z, S @ (z1 * z1) / Z - 1,
               D @ u0 / Z, D @ u1 / Z, S @ (u0 * u0 + u1 * u1) / Z,
               math.log(Z) + top - math.log(2 * math.pi * v2)]
        assert np.allclose(got[:, k], ref, rtol=1e-12, atol=1e-12), (k, got[:, k], ref)


def test_free_entropy_stationarity_on_the_lattice():
    # THEORY 2.1: on Q = diag(0, q2), dPsi_out/dq2 = K2/2 (free-entropy stationarity reproduces
    # the SE equation); psi and K2 come from different sums of the same lattice rule.  The old
    # route-A psi had a slope ~40% too large between q2 = 0.92 and 0.97.
    o, q, h = dict(n_w=0.3, dh=1.9, dz=0.2), 0.9, 0.004
    sp = seq.branch_stats(q + h, **o, workers=2)
    sm = seq.branch_stats(q - h, **o, workers=2)
    s0 = seq.branch_stats(q, **o, workers=2)
    fd = (sp["psi"] - sm["psi"]) / (2 * h)
    assert abs(fd - s0["K2"] / 2) < 1e-3 * s0["K2"] / 2


def test_threshold_low_digits_bracket_at_the_root_order(monkeypatch):
    # digits 3: the coarse rung (the root order, rung 1) brackets the root itself and its bracket
    # points near the root serve the parabola and the slope check: 4 coarse evaluations (scan
    # 0.95, 0.975, one regula falsi step, the parabola's third point) and the refined rung once,
    # against 3 scan + 3 coarse + 1 refined with a separate scan order
    k = seq.SEQ_DIGITS[3]
    fine, coarse = seq.SEQ_LADDER[k], seq.SEQ_LADDER[k - 1]
    calls = []
    monkeypatch.setattr(seq, "_resid", _model_resid(calls, 0.974, fine))
    r = seq.sequential_threshold(workers=1, digits=3)
    orders = [o for _, o in calls]
    assert orders.count(coarse) == 4 and orders.count(fine) == 1
    assert set(orders) == {coarse, fine}
    assert abs(r["root_q2"] - 0.974) < 1e-9      # the model residual is a parabola: found exactly
    assert abs(r["value"] - 1 / 1.4) < 1e-8 and r["error"] >= r["spread"]


def test_near_weight_is_a_smooth_partition():
    r0, r1 = seq.NEAR_BAND
    w = seq.near_weight(np.array([0.0, r0, 0.5 * (r0 + r1), r1, 2 * r1]))
    assert np.allclose(w, [1.0, 1.0, 0.5, 0.0, 0.0], atol=1e-15)
    x = np.linspace(r0, r1, 2001)
    d = np.diff(seq.near_weight(x))
    assert np.all(d <= 0) and abs(d[0]) < 1e-12 and abs(d[-1]) < 1e-12   # flat at both ends


def test_far_spacing_only_coarsens_where_the_sign_is_resolved(monkeypatch):
    # the blended rule (far nodes at far_spacing(dh)) against the uniform rule at the same dh:
    # mu1 and K2 differ by less than the uniform rule's own error at dh (uniform dh vs dh / 1.5);
    # the mass (entire integrand: super-geometric convergence on the uniform lattice) moves by
    # the far rule's error, 8e-8 here
    q2, o = 0.95, dict(n_w=0.5, dz=0.25)
    blend = seq.branch_stats(q2, dh=1.5, **o)
    monkeypatch.setattr(seq, "far_spacing", lambda dh: dh)
    uni = seq.branch_stats(q2, dh=1.5, **o)
    fine = seq.branch_stats(q2, dh=1.0, **o)
    assert blend["outer_points"] < 0.9 * uni["outer_points"]
    for key in ("mu1", "K2"):
        assert abs(blend[key] - uni[key]) < abs(uni[key] - fine[key]), key
    assert abs(blend["mass"] - uni["mass"]) < 1e-6


def test_single_precision_exponentials_against_double():
    # float32 exp with the argument's rounding restored: moments within ~1e-8 of the float64 path
    rng = np.random.default_rng(0)
    om = 0.9 * rng.standard_normal((600, 2))
    h = om * (1.5, 1.2) + 0.2 * rng.standard_normal((600, 2))
    lat = seq.fibre_lattice(0.2, 1.0, 1.0)
    args = (h[:, 0], h[:, 1], om[:, 0], om[:, 1], 0.0264, lat)
    d, s = np.array(seq.fibre_moments(*args)), np.array(seq.fibre_moments(*args, single=True))
    scale = np.abs(d).max(1, keepdims=True)
    assert np.all(np.abs(s - d) < 2e-8 * scale)      # measured <= 1e-8 relative to the scale
    assert np.any(s != d)


def test_float32_bound_covers_a_full_evaluation():
    # the bar's FLOAT32_REL against the float64 exponentials at one full evaluation near q2*
    # (measured: mu1, K2 and the mass move by ~4e-9 relative, numpy's float32 exp bias)
    o = dict(n_w=0.4, dh=1.9, dz=0.22, workers=2)
    s, d = seq.branch_stats(0.9736, **o), seq.branch_stats(0.9736, single=False, **o)
    for key in ("mu1", "K2", "mass"):
        assert 0 < abs(s[key] / d[key] - 1) < seq.FLOAT32_REL, key


def test_threshold_bar_above_target_at_the_top_is_reported(monkeypatch):
    # every rung disagrees with the next (a model that never converges): the pair climbs to the
    # top of the ladder and the record says that the target was not met
    calls = []

    def fake(q, c, beta, order, workers):
        calls.append((q, order))
        k = seq.SEQ_LADDER.index(order) if order in seq.SEQ_LADDER else 0
        x = q - 0.974 - 1e-4 * (k % 2)
        return 30.0 * x, dict(mu1=1.4 + 25.0 * x + 1e-4 * (k % 2), K2=50.0, nishimori=0.0, mass=1.0, pairs=0,
                              cut=dict(mass=0.0, K=0.0, mu=0.0, K_tail=0.0, mu_tail=0.0))

    monkeypatch.setattr(seq, "_resid", fake)
    r = seq.sequential_threshold(workers=1, digits=6)
    assert r["orders"][1] == list(seq.SEQ_LADDER[-1])
    assert r["error"] > 5e-6 and "above the target" in r["note"]


def test_threshold_rebrackets_when_the_scan_order_is_far_off(monkeypatch):
    # the scan order's root lies far from the others' (as at small c): the root order brackets
    # the root itself instead of failing
    calls = []
    model = _model_resid(calls, 0.974, seq.SEQ_ORDERS[1])

    def fake(q, c, beta, order, workers):
        if order == seq.SEQ_SCAN_ORDER:
            calls.append((q, order))
            x = q - 0.953
            return 30.0 * x, dict(mu1=1.4 + 25.0 * x, K2=50.0, nishimori=0.0, mass=1.0,
                                  pairs=0, cut=dict(mass=0.0, K=0.0, mu=0.0, K_tail=0.0, mu_tail=0.0))
        return model(q, c, beta, order, workers)

    monkeypatch.setattr(seq, "_resid", fake)
    r = seq.sequential_threshold(workers=1, digits=4)
    assert abs(r["value"] - 1 / 1.4) < 1e-8 and abs(r["q2"] - (0.974 + 1e-5)) < 1e-9


def test_threshold_recentres_an_order_whose_root_is_far(monkeypatch):
    # the refined order's root lies 3e-3 from the root order's: the first-order shift leaves a
    # curvature term above the digits-4 target, so the refined order is evaluated again at its
    # shifted root instead of climbing the ladder
    k = seq.SEQ_DIGITS[4]
    fine = seq.SEQ_LADDER[k]
    calls = []

    def fake(q, c, beta, order, workers):
        calls.append((q, order))
        x = q - 0.974 - (3e-3 if order == fine else 0.0)
        return 30.0 * x + 200.0 * x**2, dict(mu1=1.4 + 25.0 * x + 50.0 * x**2, K2=50.0,
                                             nishimori=0.0, mass=1.0, pairs=0,
                                             cut=dict(mass=0.0, K=0.0, mu=0.0, K_tail=0.0, mu_tail=0.0))

    monkeypatch.setattr(seq, "_resid", fake)
    r = seq.sequential_threshold(workers=1, digits=4)
    at_fine = [q for q, o in calls if o == fine]
    assert len(at_fine) == 2 and abs(at_fine[1] - 0.977) < 1e-4
    assert r["orders"][1] == list(fine) and r["error"] < 5e-4 and not r["note"]
    assert abs(r["value"] - 1 / 1.4) < r["error"] and abs(r["q2"] - 0.977) < 1e-6


@pytest.mark.parametrize("converged_at", [2, 3])
def test_threshold_large_skip_starts_one_rung_lower(monkeypatch, converged_at):
    # from SEQ_LOW_SKIP on, digits 5 starts with the pair one rung below SEQ_DIGITS (root found at
    # that pair's coarse rung, three points; slope check one rung below, two points).  The model's
    # rungs from ``converged_at`` on agree (mu1 = 1.4), the lower ones sit 1e-4 away in alpha: at
    # 2 the lower pair meets the target 5e-5 and rung SEQ_DIGITS[5] is never evaluated; at 3
    # the lower pair's spread (1e-4) is above it and the loop climbs to the usual pair
    d = 5
    assert d in seq.SEQ_LOW_DIGITS
    k = seq.SEQ_DIGITS[d] - 1
    lad = seq.SEQ_LADDER
    calls = []
    monkeypatch.setattr(seq, "_resid", _model_resid(calls, 0.985, list(lad[converged_at:])))
    r = seq.sequential_threshold(workers=1, digits=d, skip=seq.SEQ_LOW_SKIP)
    orders = [o for _, o in calls]
    assert r["root_order"] == list(lad[k - 1])
    assert orders.count(lad[k - 1]) == 3 and orders.count(lad[k - 2]) == 2
    assert orders.count(lad[k]) == 1
    assert orders.count(lad[k + 1]) == (converged_at == k)
    top = k if converged_at == k - 1 else k + 1
    assert r["orders"] == [list(lad[top - 1]), list(lad[top])]
    assert abs(r["value"] - 1 / 1.4) < r["error"] < 5e-5 and not r["note"]


def test_threshold_small_skip_keeps_the_calibrated_pair(monkeypatch):
    # below SEQ_LOW_SKIP the pair is SEQ_DIGITS's, calibrated at c = 1 (the model converged from
    # its coarse rung on, so the same pair would also serve one rung lower: it is not tried)
    k = seq.SEQ_DIGITS[5]
    calls = []
    monkeypatch.setattr(seq, "_resid", _model_resid(calls, 0.974, list(seq.SEQ_LADDER[k - 1:])))
    r = seq.sequential_threshold(workers=1, digits=5, skip=0.999 * seq.SEQ_LOW_SKIP)
    orders = [o for _, o in calls]
    assert r["orders"] == [list(seq.SEQ_LADDER[k - 1]), list(seq.SEQ_LADDER[k])]
    assert r["root_order"] == list(seq.SEQ_LADDER[k - 1])
    assert orders.count(seq.SEQ_LADDER[k - 1]) == 3 and orders.count(seq.SEQ_LADDER[k]) == 1


# c = 4, digits 5 before the skip rule (pair (3, 4), root order rung 3): docs/data/smi_phase32.csv
# as of commit 97173fa (the 32-skip run of benchmarks/RESULTS.md, fifteenth landing)
SEQ_C4_PAIR34 = (0.7209436934368149, 1.880956429243263e-07)


@pytest.mark.slow
def test_threshold_large_skip_lower_pair_against_the_higher_pair():
    # ~45 s of CPU: at c = 4 digits 5 stops at the pair (2, 3) (bar measured 1.8e-5) and lies
    # inside its bar plus the higher pair's of the value one rung up (measured 1.8e-7 apart)
    k = seq.SEQ_DIGITS[5] - 1
    r = seq.sequential_threshold(skip=4.0, digits=5)
    assert r["orders"] == [list(seq.SEQ_LADDER[k - 1]), list(seq.SEQ_LADDER[k])]
    assert r["error"] < 5e-5 and not r["note"]
    assert abs(r["value"] - SEQ_C4_PAIR34[0]) <= r["error"] + SEQ_C4_PAIR34[1]
