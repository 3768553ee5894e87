"""Branch statistics and sequential thresholds of deep attention at any (L, M) by the
model-sampled branch kernel (numerics/smi_branch_qmc.py; THEORY 2.2, 2.5)."""

import math

import numpy as np
import pytest
from aim_sym.numerics import smi_branch_qmc as bq
from aim_sym.numerics import smi_weak
from aim_sym.numerics.records import ConvergenceError, InputError

SEQ_L2 = 0.71963568          # L = 2, M = 2, c = 1 (numerics.smi_sequential ladder, +- 4e-8)


# ----------------------------------------------------------------------------- plain Monte Carlo
def _forward(z_free, z_last, *, skip, beta):
    """``Mat = A_{L-1} .. A_1`` (..., M, M) written out from THEORY 2.1 (h^(1) = z_1, A_l =
    softmax_rows(beta h^(l) h^(l)T) + c I, h^(l+1) = A_l .. A_1 z_{l+1}) and ``h^(L)``."""
    m = z_free.shape[-1]
    mat = np.broadcast_to(np.eye(m), z_free.shape[:-2] + (m, m))
    h = z_free[..., 0, :]
    for l in range(z_free.shape[-2]):
        s = beta * h[..., :, None] * h[..., None, :]
        e = np.exp(s - s.max(-1, keepdims=True))
        mat = (e / e.sum(-1, keepdims=True) + skip * np.eye(m)) @ mat
        nxt = z_free[..., l + 1, :] if l + 1 < z_free.shape[-2] else z_last
        if nxt is not None:
            h = (mat @ nxt[..., None])[..., 0]
    return mat, h


def _adjugate(a):
    """Adjugate and determinant of (..., M, M) matrices, M = 2 or 3 (cofactors written out)."""
    if a.shape[-1] == 2:
        adj = np.stack([np.stack([a[..., 1, 1], -a[..., 0, 1]], -1),
                        np.stack([-a[..., 1, 0], a[..., 0, 0]], -1)], -2)
        return adj, a[..., 0, 0] * a[..., 1, 1] - a[..., 0, 1] * a[..., 1, 0]
    cof = np.empty_like(a)
    for i in range(3):
        for j in range(3):
            r, c = [k for k in range(3) if k != i], [k for k in range(3) if k != j]
            minor = (a[..., r[0], c[0]] * a[..., r[1], c[1]]
                     - a[..., r[0], c[1]] * a[..., r[1], c[0]])
            cof[..., i, j] = (-1) ** (i + j) * minor
    return np.swapaxes(cof, -1, -2), (a[..., 0, :] * cof[..., 0, :]).sum(-1)


def plain_branch_mc(q, *, layers, tokens, samples, inner, seed, skip=1.0, beta=1.0, blocks=2):
    """Seeded plain Monte Carlo on the branch Q = diag(0, .., 0, q), independent of the kernel:
    teacher z ~ N(0, I), xi ~ N(0, I), omega_L = q z_L + sqrt(q V) xi; per teacher its own iid
    prior draws of the free rows, weighted by N(s Mat^{-1} h; omega_L, V I) / det Mat (both signs,
    solved per draw), cut into ``blocks`` independent blocks (two halves by default): per-sample
    <C_a - I, C_b - I>_F of every free row and g_a . g_b, averaged over the block pairs a < b (no
    variance bias; the ratio bias is O(blocks / inner), so two block counts on the same draws
    measure it).  Returns (samples, L) arrays: mu_1 .. mu_{L-1}, K_L."""
    rng = np.random.default_rng(seed)
    m, v = tokens, 1.0 - q
    out = []
    step = max(1, 200_000 // inner)
    for s0 in range(0, samples, step):
        n = min(step, samples - s0)
        z = rng.standard_normal((n, layers, m))
        xi = rng.standard_normal((n, m))
        _, h = _forward(z[:, :-1], z[:, -1], skip=skip, beta=beta)
        om = q * z[:, -1] + math.sqrt(q * v) * xi
        zf = rng.standard_normal((n, inner, layers - 1, m))
        mat, _ = _forward(zf, None, skip=skip, beta=beta)
        adj, det = _adjugate(mat)
        u = np.einsum("niab,nb->nia", adj, h) / det[..., None]
        logdet = np.log(det)
        lp = -((u - om[:, None]) ** 2).sum(-1) / (2 * v) - logdet
        lm = -((u + om[:, None]) ** 2).sum(-1) / (2 * v) - logdet
        top = np.maximum(lp.max(1), lm.max(1))[:, None]
        wp, wm = np.exp(lp - top), np.exp(lm - top)
        res = []
        k = inner // blocks
        for part in (slice(j * k, (j + 1) * k) for j in range(blocks)):
            w, d = (wp + wm)[:, part], (wp - wm)[:, part]
            zz = np.einsum("nila,nilb->nlab", zf[:, part] * w[..., None, None],
                           zf[:, part]) / w.sum(1)[:, None, None, None]
            g = ((d[..., None] * u[:, part]).sum(1) / w.sum(1)[:, None] - om) / v
            res.append((zz - np.eye(m), g))
        pairs = [(a, b) for a in range(blocks) for b in range(a + 1, blocks)]
        out.append(sum(np.column_stack([(res[a][0] * res[b][0]).sum((2, 3)),
                                        (res[a][1] * res[b][1]).sum(1)])
                       for a, b in pairs) / len(pairs))
    return np.concatenate(out)


# ----------------------------------------------------------------------------- input checks
@pytest.mark.parametrize("kw", [dict(layers=6, tokens=2), dict(layers=4, tokens=3),
                                dict(layers=5, tokens=2, skip=0.5),
                                dict(layers=2, tokens=2, skip=0.1),
                                dict(layers=2, tokens=2, beta=3.0)])
def test_unsupported_inputs_are_refused(kw):
    with pytest.raises(InputError):
        bq.branch_stats_qmc(0.5, **kw)


@pytest.mark.parametrize("learned", [(1, 2), (2, 1, 3), (0, 3), [3.0], ()])
def test_learned_sets_without_the_last_layer_are_refused(learned):
    with pytest.raises(InputError, match="learned"):
        bq.check(layers=3, tokens=2, skip=1.0, beta=1.0, learned=learned)


def test_last_layer_branch_is_the_learned_set_of_the_last_layer():
    # learned = (L,) is the default branch: the same columns and the same numbers
    kw = dict(layers=3, tokens=2, skip=1.0, beta=1.0, log2_outer=7, log2_inner=8,
              replicates=4, seed=1)
    a = bq.replicate_samples([0.97], **kw)
    b = bq.replicate_samples([(0.97,)], **kw, learned=(3,))
    assert bq.sample_columns(3, 2) == bq.sample_columns(3, 2, (3,))
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("q", [0.0, 1.0, -0.2, float("nan")])
def test_overlap_outside_the_unit_interval_is_refused(q):
    with pytest.raises(InputError, match="q2"):
        bq.branch_stats_qmc(q, layers=2, tokens=2)


def test_rule_sizes_are_checked():
    with pytest.raises(InputError, match="replicates"):
        bq.branch_stats_qmc(0.5, layers=2, tokens=2, replicates=2)
    with pytest.raises(InputError, match="spacing"):
        bq.sequential_thresholds_qmc(layers=2, spacing=5.0)


def test_unbracketed_root_raises_convergence_error():
    # below the root (q2* = 0.974) the residual is negative at every scan point
    with pytest.raises(ConvergenceError, match="not bracketed"):
        bq.sequential_thresholds_qmc(layers=2, scan=(0.5, 0.6, 0.7), scan_rule=(8, 9, 4))


# ----------------------------------------------------------------------------- the kernel
@pytest.mark.parametrize("layers,tokens", [(2, 2), (2, 3), (4, 2), (3, 3)])
def test_identities_on_the_branch(layers, tokens):
    # E tr C_l = M (Nishimori), E g_L = 0 (sign symmetry), the Nishimori form of K_L
    st = bq.branch_stats_qmc(0.9, layers=layers, tokens=tokens, log2_outer=9, log2_inner=11,
                             replicates=8, seed=3)
    for l in range(1, layers):
        e = st[f"trace{l}"]
        assert abs(e["value"] - tokens) <= e["error"] and e["error"] < 0.05 * tokens
    for a in range(tokens):
        g = st[f"g{layers}_{a}"]
        assert abs(g["value"]) <= g["error"]
    nis, K = st[f"nishimori{layers}"], st[f"K{layers}"]
    assert abs(nis["value"]) <= nis["error"] and nis["error"] < 0.1 * K["value"]
    # teacher-paired and U-statistic forms share their mean
    for k in (*(f"mu{l}" for l in range(1, layers)), f"K{layers}"):
        a, b = st[k], st["u_" + k]
        assert abs(a["value"] - b["value"]) <= a["error"] + b["error"]


def test_three_layers_three_tokens_layer_one_goes_first():
    """(L, M) = (3, 3): the default scan brackets both roots (r_l < 0 at its first point, > 0
    at its last) and mu_1 > mu_2 by more than the bar of the paired difference across the roots
    (q3 = 0.93 .. 0.97), so r_1 crosses zero first: layer 1 is learned before layer 2."""
    scan = bq.SCANS[(3, 3)]
    _assert_layer_one_first([scan[0], 0.93, 0.95, 0.97, scan[-1]], inner=slice(1, 4), layers=3,
                            tokens=3, skip=1.0, rule=(9, 11, 8), seed=5)


def _assert_layer_one_first(qs, *, inner, layers, tokens, skip, rule, seed):
    """r_1 and r_2 below zero at ``qs[0]`` and above it at ``qs[-1]`` (each by more than its
    bar), and mu_1 - mu_2 (the paired difference of common random numbers) above its bar at the
    points ``qs[inner]``: r_1 = r_2 + (mu_1 - mu_2) crosses zero first."""
    names = bq.sample_columns(layers, tokens)
    f, h, c = bq.replicate_samples(qs, layers=layers, tokens=tokens, skip=skip, beta=1.0,
                                   log2_outer=rule[0], log2_inner=rule[1], replicates=rule[2],
                                   seed=seed)
    e = bq.estimates(f, h, c, names)
    for k in ("r1", "r2"):
        i = names.index(k)
        bar = e["t"] * e["se"][:, i] + e["bias"][:, i]
        assert e["value"][0, i] + bar[0] < 0 < e["value"][-1, i] - bar[-1]
    i1, i2 = names.index("mu1"), names.index("mu2")
    d = e["per"][:, :, i1] - e["per"][:, :, i2]                     # (replicates, points)
    bar = e["t"] * d.std(0, ddof=1) / math.sqrt(len(d)) + e["bias"][:, i1] + e["bias"][:, i2]
    assert np.all(d.mean(0)[inner] > bar[inner])


@pytest.mark.slow
def test_four_layers_skip_2_layer_one_goes_first():
    """(L, M) = (4, 2), c = 2 on the layer-4 branch: r_1 and r_2 are both below zero at
    q4 = 0.990 and above it at 0.995 (each by more than its bar), and mu_1 > mu_2 by more than
    the bar of the paired difference (common random numbers) at every point between, so r_1 =
    r_2 + (mu_1 - mu_2) crosses zero first: layer 1 is learned before layer 2 (their separate
    thresholds, 1.418 +- 0.068 and 1.480 +- 0.036 on the cheap rule, did not separate them;
    docs/smi_depth.md)."""
    _assert_layer_one_first([0.990, 0.9925, 0.995], inner=slice(None), layers=4, tokens=2,
                            skip=2.0, rule=(12, 14, 16), seed=3)


def test_small_overlap_limit_is_the_weak_coefficients():
    # q -> 0: mu_l -> lambda_l and K_L / q -> lambda_L (THEORY 2.2 linearisation); the O(q)
    # term is removed by the linear extrapolation 2 f(q) - f(2 q) (common random numbers)
    w = smi_weak.stability(layers=2, tokens=2, rule="gh")
    kw = dict(layers=2, tokens=2, log2_outer=11, log2_inner=11, replicates=8, seed=4)
    q = 0.01
    a, b = bq.branch_stats_qmc(q, **kw), bq.branch_stats_qmc(2 * q, **kw)
    mu = 2 * a["mu1"]["value"] - b["mu1"]["value"]
    mu_err = 2 * a["mu1"]["error"] + b["mu1"]["error"]
    assert abs(mu - w["lam1"].value) <= mu_err + w["lam1"].error
    k = 2 * a["K2"]["value"] / q - b["K2"]["value"] / (2 * q)
    k_err = 2 * a["K2"]["error"] / q + b["K2"]["error"] / (2 * q)
    assert abs(k - w["lam2"].value) <= k_err + w["lam2"].error
    assert mu_err < 0.1 * mu and k_err < 0.2 * k


def test_sequential_threshold_l2_matches_the_lattice_value():
    out = bq.sequential_thresholds_qmc(layers=2, tokens=2, log2_outer=10, log2_inner=11,
                                       replicates=8, scan_rule=(9, 10, 8),
                                       scan=(0.9, 0.95, 0.97, 0.98, 0.99))
    (r,) = out
    assert r["layer"] == 1 and r["kind"] == "sequential" and r["first"]
    assert abs(r["value"] - SEQ_L2) <= r["error"] and r["error"] < 0.05
    assert 0.96 < r["q2"] < 0.985


def test_plain_monte_carlo_agrees_with_the_kernel_l2():
    # the independent oracle itself, at L = 2 near the root q2* = 0.9738
    q = 0.974
    mc = plain_branch_mc(q, layers=2, tokens=2, samples=3000, inner=512, seed=9)
    st = bq.branch_stats_qmc(q, layers=2, tokens=2, log2_outer=10, log2_inner=12,
                             replicates=8, seed=9)
    for j, k in enumerate(("mu1", "K2")):
        se = mc[:, j].std(ddof=1) / math.sqrt(len(mc))
        assert abs(mc[:, j].mean() - st[k]["value"]) <= 3.5 * se + st[k]["error"]


@pytest.mark.slow
def test_plain_monte_carlo_confirms_the_l4_layer1_root():
    # the new L = 4 value: at the kernel's root q4* the plain Monte Carlo residual r_1 vanishes
    # and its mu_1 equals 1 / alpha_seq,1 (within 3.5 of its standard errors + the kernel's bar)
    out = bq.sequential_thresholds_qmc(layers=4, tokens=2, log2_outer=11, log2_inner=13,
                                       replicates=8)
    _assert_plain_mc_at_the_layer1_root(out, layers=4, seed=21)


def _assert_plain_mc_at_the_layer1_root(out: list, *, layers: int, seed: int) -> None:
    """At the kernel's layer-1 root q_L* the plain Monte Carlo residual r_1 vanishes and its mu_1
    equals 1 / alpha_seq,1 (6000 teachers x 2048 inner; within 3.5 of its standard errors + the
    kernel's bars)."""
    r1 = next(r for r in out if r["layer"] == 1)
    q = r1[f"q{layers}"]
    mc = plain_branch_mc(q, layers=layers, tokens=2, samples=6000, inner=2048, seed=seed)
    res = mc[:, 0] - (1 - q) / q * mc[:, layers - 1]
    se = res.std(ddof=1) / math.sqrt(len(res))
    slope = abs(r1["slope_r"]) / (1 - q)                 # d r_1 / d q
    assert abs(res.mean()) <= 3.5 * se + slope * r1[f"q{layers}_error"]
    se_mu = mc[:, 0].std(ddof=1) / math.sqrt(len(mc))
    assert abs(mc[:, 0].mean() - 1 / r1["value"]) <= 3.5 * se_mu + r1["error"] / r1["value"] ** 2


@pytest.mark.slow
def test_plain_monte_carlo_confirms_the_l5_layer1_root():
    # L = 5 (~20 s + ~50 s): the four roots are bracketed (layer 4's near q5 = 0.9995, on the
    # extended scan), layer 1 is first, and at its root the plain Monte Carlo residual r_1
    # vanishes and mu_1 equals 1 / alpha_seq,1 (within 3.5 standard errors + the kernel's bar)
    out = bq.sequential_thresholds_qmc(layers=5, tokens=2, log2_outer=11, log2_inner=13,
                                       replicates=8)
    assert [r["layer"] for r in out] == [1, 2, 3, 4]
    r1 = next(r for r in out if r["layer"] == 1)
    assert r1["first"]
    vals = [r["value"] for r in out]
    assert all(a + ea < b - eb for (a, ea), (b, eb) in
               zip(((r["value"], r["error"]) for r in out[:-1]),
                   ((r["value"], r["error"]) for r in out[1:])))
    assert vals == sorted(vals)
    _assert_plain_mc_at_the_layer1_root(out, layers=5, seed=43)


@pytest.mark.slow
def test_plain_monte_carlo_confirms_the_l3_m3_layer1_root():
    # (L, M) = (3, 3), a smaller rule than the default: layer 1 is first; at its root q3* the
    # plain Monte Carlo residual r_1 vanishes, its mu_1 equals 1 / alpha_seq,1 (within 3.5 of
    # its standard errors + the kernel's bars) and layer 2 is still stable (alpha mu_2 < 1).
    # The Monte Carlo's own ratio bias (about -3 % for mu_1 with halves of 1024 draws) is
    # removed by its 1/k law: 2 x (halves) - (quarters) on the same draws
    out = bq.sequential_thresholds_qmc(layers=3, tokens=3, log2_outer=11, log2_inner=13,
                                       replicates=8)
    assert [r["layer"] for r in out if r["first"]] == [1]
    r1 = out[0]
    q, a = r1["q3"], (1 - r1["q3"]) / r1["q3"]
    m2, m4 = (plain_branch_mc(q, layers=3, tokens=3, samples=4000, inner=2048, seed=31,
                              blocks=b) for b in (2, 4))
    mc = 2 * m2 - m4
    se = lambda x: x.std(ddof=1) / math.sqrt(len(x))  # noqa: E731
    res = mc[:, 0] - a * mc[:, 2]
    slope = abs(r1["slope_r"]) / (1 - q)                 # d r_1 / d q
    assert abs(res.mean()) <= 3.5 * se(res) + slope * r1["q3_error"]
    assert abs(mc[:, 0].mean() - 1 / r1["value"]) <= 3.5 * se(mc[:, 0]) + r1["error"] / r1["value"] ** 2
    assert (r1["value"] + r1["error"]) * (mc[:, 1].mean() + 3.5 * se(mc[:, 1])) < 1


@pytest.mark.slow
def test_branch_fixed_point_l2_against_the_lattice_se():
    """The last layer's branch point at L = 2, alpha = 0.5 by the kernel (a cheap rule, ~6 s)
    against the deterministic L = 2 SE of numerics/smi.py (Q2 = 0.77213 +- 0.0011 there, and
    layer 1's stability eigenvalue 0.19645): both within the kernel's bars."""
    from aim_sym.numerics import smi

    r = bq.branch_fixed_point(alpha=0.5, layers=2, tokens=2, log2_outer=10, log2_inner=12,
                               replicates=8)
    ref = smi.fixed_point(alpha=0.5)
    assert abs(r["q2"] - ref["Q"][1]) <= r["q2_error"] + ref["error"][1]
    st = r["stability"][1]
    assert st["stable"] is True
    assert abs(st["eigenvalue"] - ref["eigenvalue"]) <= st["error"]


def test_branch_fixed_point_below_the_weak_threshold_has_none():
    """Below the last layer's weak threshold (0.1855 at L = 2) only Q = 0 exists."""
    with pytest.raises(ConvergenceError):
        bq.branch_fixed_point(alpha=0.1, layers=2, tokens=2, log2_outer=8, log2_inner=10,
                               replicates=4, scan=(0.05, 0.3, 0.6, 0.9))


@pytest.mark.slow
def test_plain_monte_carlo_confirms_the_l3_m3_branch_fixed_point():
    """(L, M) = (3, 3), alpha = 0.3 (above layer 3's weak threshold 0.112, below layer 1's
    sequential one 0.5886): the kernel's fixed point q3 (a cheaper rule than the default, ~25 s)
    checked by the plain Monte Carlo oracle at that q3 (~50 s): alpha K_3 solves q3 / (1 - q3) =
    alpha K_3 and alpha mu_l (l = 1, 2) equals the reported stability eigenvalues, within the
    kernel's bars + 3.5 of the oracle's standard errors.  The oracle's own ratio bias is removed
    by its 1/k law (2 x halves - quarters of the same draws).  The default scan's point q3 = 0.6
    lies within the cheap scan's noise of the root: the cheap rule brackets it on (0.4, 0.6), the
    main rule on (0.6, 0.75) (before the neighbouring intervals were searched this raised)."""
    alpha = 0.3
    r = bq.branch_fixed_point(alpha=alpha, layers=3, tokens=3, log2_outer=11, log2_inner=13,
                               replicates=8)
    q = r["q3"]
    assert 0.5 < q < 0.7 and r["q3_error"] < 0.02
    assert abs(q / (1 - q) - r["q_hat3"]) < 1e-5                 # the root of the kernel's map
    m2, m4 = (plain_branch_mc(q, layers=3, tokens=3, samples=10000, inner=2048, seed=43,
                              blocks=b) for b in (2, 4))
    mc = 2 * m2 - m4
    se = lambda x: x.std(ddof=1) / math.sqrt(len(x))  # noqa: E731
    K, se_K = mc[:, 2].mean(), se(mc[:, 2])
    # the same q on both sides: q3 / (1 - q3) = alpha K_3 by the oracle
    assert abs(r["q_hat3"] - alpha * K) <= r["q_hat3_error"] + 3.5 * alpha * se_K
    # the fixed-point map q = alpha K / (1 + alpha K) returns q3 within q3's bar
    assert abs(alpha * K / (1 + alpha * K) - q) <= r["q3_error"] + 3.5 * alpha * se_K
    for l in (1, 2):
        st = r["stability"][l]
        assert st["stable"] is True
        mu = mc[:, l - 1]
        assert abs(alpha * mu.mean() - st["eigenvalue"]) <= st["error"] + 3.5 * alpha * se(mu)
        assert st["error"] < 0.1 * st["eigenvalue"]



def test_api_branch_point_is_one_result(monkeypatch):
    """aim_sym.thresholds.smi_branch_point: the kernel's branch point as a Result (the API's one
    result vocabulary): the kernel's q_L, its bar, q_hat_L and the stability pass through, the
    rule's keywords reach the kernel, and a wrong one is refused naming ``rule`` (the kernel's
    numbers themselves: test_branch_fixed_point_l2_against_the_lattice_se)."""
    from aim_sym.numerics.records import InputError

    from aim_sym.thresholds import smi_branch_point

    seen = {}

    def kernel(**kw):
        seen.update(kw)
        return {"q3": 0.61, "q3_error": 0.002, "q_hat3": 1.56, "q_hat3_error": 0.01,
                "stability": {1: {"eigenvalue": 0.4, "error": 0.01, "stable": True},
                              2: {"eigenvalue": 1.0, "error": 0.02, "stable": None}},
                "seconds": 1.0, "method": "stub"}

    monkeypatch.setattr(bq, "branch_fixed_point", kernel)
    res = smi_branch_point(alpha=0.5, layers=3, tokens=2, rule=dict(log2_inner=11, seed=4))
    assert (res.quantity, res.value, res.error, res.method) == ("q_3", 0.61, 0.002, "stub")
    assert res.details["q_hat_3"] == 1.56 and res.details["stability"][2]["stable"] is None
    assert seen["log2_inner"] == 11 and seen["seed"] == 4 and seen["layers"] == 3
    assert res.to_dict()["parameters"]["alpha"] == 0.5
    with pytest.raises(InputError, match="rule"):
        smi_branch_point(alpha=0.5, layers=2, rule={"order": 3})
