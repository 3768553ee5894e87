"""The L = 3 cascade of deep tied attention: layer 2's stability on the joint branch
Q = diag(q1, 0, q3) (numerics/smi_cascade.py; THEORY 2.1, 2.2, 2.5)."""

import math

import numpy as np
import pytest
from aim_sym.numerics import smi_branch_qmc as bq
from aim_sym.numerics import smi_cascade as sc
from aim_sym.numerics.records import ConvergenceError, InputError
from test_smi_branch_qmc import _adjugate, _forward

SEQ2_LATTICE = (1.1358, 0.0044)   # layer 2 on the layer-3 branch, L = 3 (numerics.smi_sequential)
CASC_L3 = (1.1258, 0.0060)        # L = 3 cascade, 32 x 2^12 x 2^14, seed 2 (docs/smi_cascade.md)
SEQ_L4 = {2: (1.434, 0.022), 3: (2.069, 0.033)}   # layers 2, 3 on the layer-4 branch (branch QMC)
CHEAP = dict(log2_outer=10, log2_inner=12, replicates=8)


# ----------------------------------------------------------------------------- plain Monte Carlo
def plain_cascade_mc(points, *, samples, inner, seed, layers=3, learned=(1, 3), skip=1.0,
                     beta=1.0, tokens=2, blocks=2):
    """Seeded plain Monte Carlo on the joint branch of the ``learned`` layers (M = ``tokens``) at each
    point of ``points`` (the learned layers' overlaps; q_L common to all), independent of the
    kernel: teacher z ~ N(0, I) (L rows), omega_l = q_l z_l + sqrt(q_l V_l) xi_l; per teacher its
    own iid draws of the free rows, each learned one from its factor N(omega_l, V_l I) at the
    first point (the other points reweight the same draws by the ratio of their factors, common
    random numbers), the others from N(0, I), weighted by N(s Mat^{-1} h; omega_L, V_L I) /
    det Mat (both signs, adjugate written out), cut into ``blocks`` independent blocks (two
    halves by default): per sample <C_a - I, C_b - I>_F of every unlearned row and g_a . g_b of
    every learned layer averaged over the block pairs a < b (no variance bias; ratio bias
    O(blocks / inner), so two block counts on the same draws measure it).  Returns (len(points),
    samples, k): mu_k (unlearned k), then K_l (learned l)."""
    rng = np.random.default_rng(seed)
    m, L = tokens, layers
    seen = [l for l in learned if l < L]
    unl = [k for k in range(1, L) if k not in learned]
    q_last = points[0][-1]
    assert all(p[-1] == q_last for p in points)
    v_last = 1.0 - q_last
    out = []
    step = max(1, 200_000 // inner)
    for s0 in range(0, samples, step):
        n = min(step, samples - s0)
        z = rng.standard_normal((n, L, m))
        xi = rng.standard_normal((n, len(learned), m))
        _, h = _forward(z[:, :-1], z[:, -1], skip=skip, beta=beta)
        oms = [[q * z[:, l - 1] + math.sqrt(q * (1 - q)) * xi[:, i]
                for i, (l, q) in enumerate(zip(learned, p, strict=True))] for p in points]
        zf = rng.standard_normal((n, inner, L - 1, m))
        for i, l in enumerate(seen):
            zf[:, :, l - 1] = oms[0][i][:, None] + math.sqrt(1 - points[0][i]) * zf[:, :, l - 1]
        mat, _ = _forward(zf, None, skip=skip, beta=beta)
        adj, det = _adjugate(mat)
        u = np.einsum("niab,nb->nia", adj, h) / det[..., None]
        om_last = oms[0][-1][:, None]
        lp = -((u - om_last) ** 2).sum(-1) / (2 * v_last) - np.log(det)
        lm = -((u + om_last) ** 2).sum(-1) / (2 * v_last) - np.log(det)

        def log_factor(q, om, zl):
            return -((zl - om[:, None]) ** 2).sum(-1) / (2 * (1 - q)) - math.log(1 - q)

        rows = []
        for p, om in zip(points, oms, strict=True):
            corr = sum(log_factor(p[i], om[i], zf[:, :, l - 1])
                       - log_factor(points[0][i], oms[0][i], zf[:, :, l - 1])
                       for i, l in enumerate(seen))
            top = np.maximum((lp + corr).max(1), (lm + corr).max(1))[:, None]
            wp, wm = np.exp(lp + corr - top), np.exp(lm + corr - top)
            res = []
            kb = inner // blocks
            for part in (slice(j * kb, (j + 1) * kb) for j in range(blocks)):
                w, d = (wp + wm)[:, part], (wp - wm)[:, part]
                zn = w.sum(1)[:, None]
                zp = zf[:, part]
                cs = [np.einsum("nia,nib->nab", zp[:, :, k - 1] * w[..., None], zp[:, :, k - 1])
                      / zn[..., None] - np.eye(m) for k in unl]
                gs = [((w[..., None] * zp[:, :, l - 1]).sum(1) / zn - om[i]) / (1 - p[i])
                      for i, l in enumerate(seen)]
                gs.append(((d[..., None] * u[:, part]).sum(1) / zn - om[-1]) / v_last)
                res.append((cs, gs))
            pairs = [(a, b) for a in range(blocks) for b in range(a + 1, blocks)]
            rows.append(sum(np.column_stack(
                [*((x * y).sum((1, 2)) for x, y in zip(res[a][0], res[b][0], strict=True)),
                 *((x * y).sum(1) for x, y in zip(res[a][1], res[b][1], strict=True))])
                for a, b in pairs) / len(pairs))
        out.append(np.array(rows))
    return np.concatenate(out, 1)


def _mean_se(x):
    return float(x.mean()), float(x.std(ddof=1) / math.sqrt(len(x)))


# ----------------------------------------------------------------------------- input checks
@pytest.mark.parametrize("q1,q3,name", [(-0.1, 0.98, "q1"), (1.0, 0.98, "q1"),
                                        (0.2, 0.0, "q3"), (0.2, float("nan"), "q3")])
def test_overlaps_outside_their_ranges_are_refused(q1, q3, name):
    with pytest.raises(InputError, match=name):
        sc.cascade_stats(q1, q3, **CHEAP)


@pytest.mark.parametrize("kw,name", [(dict(skip=0.1), "skip"), (dict(beta=3.0), "beta"),
                                     (dict(replicates=2), "replicates"),
                                     (dict(log2_inner=30), "log2_inner")])
def test_unsupported_parameters_are_refused(kw, name):
    with pytest.raises(InputError, match=name):
        sc.cascade_stats(0.2, 0.98, **{**CHEAP, **kw})


@pytest.mark.parametrize("kw,name", [(dict(steps=(0.2, 0.2)), "steps"),
                                     (dict(steps=(0.06, 5.0)), "steps"),
                                     (dict(center=(0.1,)), "center"),
                                     (dict(layer=1), "layer"), (dict(layer=3), "layer"),
                                     (dict(layers=4, learned=(1, 4), layer=4), "layer"),
                                     (dict(layers=4, learned=(1, 3)), "learned"),
                                     (dict(layers=4, learned=(4,)), "learned"),
                                     (dict(layers=4, learned=(1, 2, 3, 4)), "learned"),
                                     (dict(layers=4, learned=(4, 1)), "learned"),
                                     (dict(layers=2, learned=(1, 2)), "layers"),
                                     (dict(layers=5, learned=(1, 5)), "layers")])
def test_threshold_options_are_checked(kw, name):
    # the learned set must contain the last layer and leave one layer unlearned; L in {3, 4}
    with pytest.raises(InputError, match=name):
        sc.cascade_threshold(**{**CHEAP, **kw})


@pytest.mark.parametrize("qs,kw,name", [((0.2,), {}, "q"), ((0.2, 0.3, 0.98), {}, "q"),
                                        ((0.2, 0.3, 0.0), dict(layers=4, learned=(1, 2, 4)),
                                         "q4"),
                                        ((0.2, 0.98), dict(layers=4, learned=(2, 3)),
                                         "learned")])
def test_overlaps_per_learned_layer(qs, kw, name):
    with pytest.raises(InputError, match=name):
        sc.cascade_stats(*qs, **kw, **CHEAP)


def test_root_outside_the_grid_raises_convergence_error():
    # at q3 near 0.9 mu2 < a3 everywhere (layer 2 stable, far from its threshold)
    with pytest.raises(ConvergenceError, match="outside"):
        sc.cascade_threshold(center=(0.3, 0.9), steps=(0.1, 0.1), log2_outer=8,
                             log2_inner=10, replicates=4)


# ----------------------------------------------------------------------------- the kernel
def test_q1_zero_is_the_layer3_branch_kernel():
    # q1 = 0: the z_1 factor is 1, the kernel is smi_branch_qmc's (independent points)
    q3 = 0.98
    a = sc.cascade_stats(0.0, q3, **CHEAP, seed=1)
    b = bq.branch_stats_qmc(q3, layers=3, **CHEAP, seed=2)
    for k in ("mu2", "K3", "trace1", "trace2"):
        assert abs(a[k]["value"] - b[k]["value"]) <= a[k]["error"] + b[k]["error"]
    assert a["mu2"]["error"] < 0.06 * a["mu2"]["value"]
    # no information on z_1: g_1 = 0, K1 = 0
    assert abs(a["K1"]["value"]) <= a["K1"]["error"] < 0.01


def test_identities_on_the_joint_branch():
    st = sc.cascade_stats(0.4, 0.985, **CHEAP, seed=3)
    for k in ("trace1", "trace2"):
        assert abs(st[k]["value"] - 2.0) <= st[k]["error"] < 0.1
    for k in ("nishimori1", "nishimori3"):
        K = st["K" + k[-1]]["value"]
        assert abs(st[k]["value"]) <= st[k]["error"] < 0.1 * K
    for k in ("g1_0", "g1_1", "g3_0", "g3_1"):
        assert abs(st[k]["value"]) <= st[k]["error"]
    for k in ("mu2", "K1", "K3"):
        a, b = st[k], st["u_" + k]
        assert abs(a["value"] - b["value"]) <= a["error"] + b["error"]
    assert st["a1"]["value"] == pytest.approx(0.6 / 0.4 * st["K1"]["value"])


def test_plain_monte_carlo_agrees_with_the_kernel():
    # independent route: z_1 sampled from its factor per teacher, iid inner draws
    q1, q3 = 0.3, 0.985
    (mc,) = plain_cascade_mc([(q1, q3)], samples=3000, inner=512, seed=11)
    st = sc.cascade_stats(q1, q3, **CHEAP, seed=11)
    for j, k in enumerate(("mu2", "K1", "K3")):
        m, se = _mean_se(mc[:, j])
        assert abs(m - st[k]["value"]) <= 3.5 * se + st[k]["error"]
        assert se < 0.1 * m


@pytest.fixture(scope="module")
def cheap():
    return sc.cascade_threshold(**CHEAP, seed=2)


def test_cascade_threshold_cheap_rule(cheap):
    r = cheap
    assert r["layer"] == 2 and r["kind"] == "cascade"
    # the q1 = 0 column is layer 2's sequential threshold on the layer-3 branch (lattice)
    assert abs(r["sequential"] - SEQ2_LATTICE[0]) <= r["sequential_error"] + SEQ2_LATTICE[1]
    assert 0.06 <= r["q1"] <= 0.18 and 0.9835 <= r["q3"] <= 0.989
    assert r["error"] < 0.05 and r["shift_error"] < r["error"]
    # the generic joint-branch path reproduces the L = 3 cascade of the production rule
    assert abs(r["value"] - CASC_L3[0]) <= r["error"] + CASC_L3[1]
    # the 2-D SE fixed point q_l = alpha K_l / (1 + alpha K_l) at alpha_casc is the root, where
    # alpha mu2 = 1; below it layer 2 is stable (alpha mu2 < 1), above unstable
    at = {round(b["alpha"] - r["value"], 6): b for b in r["branch"]}
    b = at[0.0]
    assert b["q1"] == pytest.approx(r["q1"], abs=1e-6)
    assert b["q3"] == pytest.approx(r["q3"], abs=1e-8)
    assert b["alpha_mu2"] == pytest.approx(1.0, abs=1e-9)
    if -0.01 in at:
        assert at[-0.01]["alpha_mu2"] < 1.0 and at[-0.01]["q1"] < r["q1"]
    for k in ("trace1", "trace2"):
        v, e = r["checks"][k]
        assert abs(v - 2.0) <= e
    for k in ("nishimori1", "nishimori3", "g1_0", "g3_0"):
        v, e = r["checks"][k]
        assert abs(v) <= e


def test_grid_moves_to_the_root(cheap):
    # started two steps away in q1, the grid is moved once and brackets the same root
    r = sc.cascade_threshold(center=(0.3, 0.9865), log2_outer=9, log2_inner=11, replicates=8,
                             seed=2)
    assert r["center"][0] < 0.3
    ref = cheap
    assert abs(r["value"] - ref["value"]) <= r["error"] + ref["error"]
    assert abs(r["q1"] - ref["q1"]) <= r["q1_error"] + ref["q1_error"]


# ----------------------------------------------------------------------------- depth 4
@pytest.mark.parametrize("learned,qs,li", [((1, 4), (0.2, 0.988), 12),
                                           ((1, 2, 4), (0.6, 0.4, 0.995), 14)])
def test_identities_at_depth_4(learned, qs, li):
    # E tr C_l = M (Nishimori), E g_l = 0 (sign symmetry), the Nishimori form of every K_l; two
    # learned free rows (posteriors of width sqrt(V_l) under prior nodes) need more inner nodes.
    # Coverage of these 99% bars at (1, 4), 20 seeds x 9 checks: 178 of 180 inside
    st = sc.cascade_stats(*qs, layers=4, learned=learned, log2_outer=10, log2_inner=li,
                          replicates=8, seed=0)
    for l in (1, 2, 3):
        e = st[f"trace{l}"]
        assert abs(e["value"] - 2.0) <= e["error"] < 0.1
    for l in learned:
        nis, K = st[f"nishimori{l}"], st[f"K{l}"]
        assert abs(nis["value"]) <= nis["error"] < 0.25 * K["value"]
        for a in (0, 1):
            assert abs(st[f"g{l}_{a}"]["value"]) <= st[f"g{l}_{a}"]["error"]
        assert st[f"a{l}"]["value"] == pytest.approx((1 - qs[learned.index(l)])
                                                     / qs[learned.index(l)] * K["value"])


def test_q1_zero_is_the_layer4_branch_kernel():
    # at L = 4 with q1 = 0 the joint branch of layers 1 and 4 is the last layer's (independent
    # points): mu_2, mu_3 and K_4 agree within the two bars; K_1 vanishes
    q4 = 0.988
    a = sc.cascade_stats(0.0, q4, layers=4, learned=(1, 4), **CHEAP, seed=1)
    b = bq.branch_stats_qmc(q4, layers=4, **CHEAP, seed=2)
    for k in ("mu2", "mu3", "K4", "trace1"):
        assert abs(a[k]["value"] - b[k]["value"]) <= a[k]["error"] + b[k]["error"], k
    assert abs(a["K1"]["value"]) <= a["K1"]["error"] < 0.02


def test_plain_monte_carlo_agrees_with_the_kernel_l4():
    # independent route at L = 4 on the joint branch of layers 1 and 4 near the cascade root
    q1, q4 = 0.17, 0.988
    (mc,) = plain_cascade_mc([(q1, q4)], layers=4, learned=(1, 4), samples=1500, inner=512,
                             seed=13)
    st = sc.cascade_stats(q1, q4, layers=4, learned=(1, 4), **CHEAP, seed=13)
    for j, k in enumerate(("mu2", "mu3", "K1", "K4")):
        m, se = _mean_se(mc[:, j])
        assert abs(m - st[k]["value"]) <= 3.5 * se + st[k]["error"], k
        assert se < 0.15 * m


@pytest.mark.slow
def test_l4_cascade_layer2_first_and_plain_monte_carlo_at_its_root():
    """L = 4, layers 4 and 1 learned: layer 2's cascade threshold lies below its layer-4-branch
    value's upper end, layer 3 is stable there (alpha mu_3 < 1 by more than its bar), and at
    the root the plain Monte Carlo has mu_2 = a_1 = a_4 = 1 / alpha_casc, alpha mu_3 < 1."""
    r = sc.cascade_threshold(layers=4, learned=(1, 4), log2_outer=11, log2_inner=13,
                             replicates=8, seed=3)
    alpha = r["value"]
    assert r["layer"] == 2 and r["error"] < 0.06
    assert abs(r["sequential"] - SEQ_L4[2][0]) <= r["sequential_error"] + SEQ_L4[2][1]
    st3 = r["stability"][3]
    assert st3["eigenvalue"] + st3["error"] < 1.0
    q1, q4 = r["q1"], r["q4"]
    # the plain Monte Carlo's a_4 carries a ratio bias of about +0.03 at 1024 draws (V_4 ~ 0.012;
    # docs/smi_cascade.md): 4096 draws per teacher
    (mc,) = plain_cascade_mc([(q1, q4)], layers=4, learned=(1, 4), samples=3000, inner=4096,
                             seed=29)
    q = np.array(r["points"][:9])
    s4 = abs((r["a4"][3] - r["a4"][5]) / (q[3, 1] - q[5, 1]))
    s1 = abs((r["a1"][1] - r["a1"][7]) / (q[1, 0] - q[7, 0]))
    for x, slope in ((mc[:, 0], 0.0), ((1 - q1) / q1 * mc[:, 2], s1 * r["q1_error"]),
                     ((1 - q4) / q4 * mc[:, 3], s4 * r["q4_error"])):
        m, se = _mean_se(x)
        assert abs(m - 1 / alpha) <= 3.5 * se + r["error"] / alpha**2 + slope
    m, se = _mean_se(mc[:, 1])
    assert alpha * (m + 3.5 * se) < 1.0


@pytest.mark.slow
def test_l4_next_step_layer3_on_the_branch_of_layers_1_2_4():
    """L = 4, layers 4, 1, 2 learned: layer 3's cascade threshold, above layer 2's and below
    its layer-4-branch value; the reference (q2 = 0) is layer 3 on the branch of 1 and 4."""
    r = sc.cascade_threshold(layers=4, learned=(1, 2, 4), log2_outer=10, log2_inner=14,
                             replicates=8, seed=1)
    assert r["layer"] == 3 and r["sequential_branch"] == [1, 4]
    assert 1.5 < r["value"] - r["error"] and r["value"] + r["error"] < SEQ_L4[3][0]
    for k, (v, e) in r["checks"].items():
        assert abs(v - (2.0 if k.startswith("trace") else 0.0)) <= e, k


@pytest.mark.slow
def test_plain_monte_carlo_confirms_the_cascade_root():
    # at the kernel's root (q1*, q3*) the plain Monte Carlo has a1 = a3 = mu2 = 1 / alpha_casc
    r = sc.cascade_threshold(log2_outer=11, log2_inner=13, replicates=8, seed=5)
    q1, q3, alpha = r["q1"], r["q3"], r["value"]
    (mc,) = plain_cascade_mc([(q1, q3)], samples=16000, inner=1024, seed=23)
    a1 = (1 - q1) / q1 * mc[:, 1]
    a3 = (1 - q3) / q3 * mc[:, 2]
    m, se = _mean_se(mc[:, 0])
    assert abs(m - 1 / alpha) <= 3.5 * se + r["error"] / alpha**2
    # slopes of a3 in q3 and of a1 in q1 across the grid carry the root's own bars
    q = np.array(r["points"][:9])
    s3 = abs((r["a3"][3] - r["a3"][5]) / (q[3, 1] - q[5, 1]))
    s1 = abs((r["a1"][1] - r["a1"][7]) / (q[1, 0] - q[7, 0]))
    m, se = _mean_se(a3)
    assert abs(m - 1 / alpha) <= 3.5 * se + r["error"] / alpha**2 + s3 * r["q3_error"]
    m, se = _mean_se(a1)
    assert abs(m - 1 / alpha) <= 3.5 * se + r["error"] / alpha**2 + s1 * r["q1_error"]


@pytest.mark.slow
def test_layer2_is_learned_earlier_once_layer1_is_learned():
    # common random numbers: the joint branch's threshold minus the layer-3-only one (same
    # points) is negative beyond its bar, and the two routes to alpha_casc agree
    r = sc.cascade_threshold(log2_outer=12, log2_inner=13, replicates=16, seed=1)
    assert r["shift"] + r["shift_error"] < 0
    assert abs(r["sequential"] - SEQ2_LATTICE[0]) <= r["sequential_error"] + SEQ2_LATTICE[1]
    combined = SEQ2_LATTICE[0] + r["shift"]
    assert abs(r["value"] - combined) <= r["error"] + r["shift_error"] + SEQ2_LATTICE[1]
    assert r["error"] < 0.01


@pytest.mark.slow
def test_plain_monte_carlo_sees_layer1_raise_layer2_residual():
    # the sign of the shift, by the independent route: at fixed q3 = q3*, learning layer 1
    # (q1 = q1*) raises r = mu2 - a3 (layer 2 closer to instability).  The plain Monte Carlo
    # samples z_1 at one q1 and reweights to the other; each order carries the reweighted side's
    # ratio bias with opposite sign, so the two orders are averaged (bound: fully correlated)
    q1, q3 = 0.1621, 0.98693
    f3 = (1 - q3) / q3
    d, se = [], []
    for order in ((q1, 0.0), (0.0, q1)):
        a, b = plain_cascade_mc([(q, q3) for q in order], samples=24000, inner=2048, seed=7)
        if order[0] == 0.0:
            a, b = b, a
        m, s = _mean_se((a[:, 0] - b[:, 0]) - f3 * (a[:, 2] - b[:, 2]))
        d.append(m)
        se.append(s)
    dr, dse = 0.5 * (d[0] + d[1]), 0.5 * (se[0] + se[1])
    assert dr > 2.0 * dse
    # the kernel's difference at the same points (common random numbers): per-replicate
    # differences, and the ratio bias of the difference measured as whole vs halves
    pts = [(q1, q3), (0.0, q3)]
    full, half, cv = bq.replicate_samples(pts, layers=3, tokens=2, skip=1.0, beta=1.0,
                                          log2_outer=11, log2_inner=13, replicates=16, seed=41,
                                          learned=(1, 3))
    e = bq.estimates(full, half, cv, sc.columns())
    n = sc.columns()

    def r(v):
        return v[..., n.index("mu2")] - f3 * v[..., n.index("K3")]

    per = r(e["per"][:, 0]) - r(e["per"][:, 1])
    dk, sk = _mean_se(per)
    bias = abs((r(e["half_value"][0]) - r(e["half_value"][1]))
               - (r(e["full_raw"][0]) - r(e["full_raw"][1])))
    mix = (np.abs(1 - e["beta"]) + 4 * np.abs(e["beta"])).max()
    dk_err = e["t"] * sk + mix * bias
    assert dk > dk_err
    assert abs(dr - dk) <= 3.5 * dse + dk_err


@pytest.mark.slow
def test_cli_cascade():
    """`threshold weak --model smi --layers 3 --cascade --json` (~2-4 min): the command's value
    is the numeric module's at its default rule, inside (0.977, 1.1358 + 0.0044) (after layer 1's
    sequential threshold, not after the layer-3-only bound), and refusals are one line."""
    import json

    from click.testing import CliRunner

    from aim_sym.cli import cli

    r = CliRunner().invoke(cli, ["threshold", "weak", "--model", "smi", "--layers", "3",
                                 "--cascade", "--json"])
    assert r.exit_code == 0, r.output
    o = json.loads(r.output[r.output.index("{"):])
    assert o["threshold"] == "alpha_cascade"
    assert 0.977 < o["value"] - o["error"] and o["value"] + o["error"] < 1.1358 + 0.0044
    assert o["shift"] + o["shift_error"] < 0


@pytest.mark.slow
def test_cli_cascade_four_layers():
    """`threshold weak --model smi --layers 4 --cascade --json` (~3-6 min): layer 2 once layers 4
    and 1 are learned, after layer 1's sequential threshold 1.171 +- 0.019 and before the
    layer-4-only bound it also reports (the shift is negative); layer 3 stays stable there."""
    import json

    from click.testing import CliRunner

    from aim_sym.cli import cli

    r = CliRunner().invoke(cli, ["threshold", "weak", "--model", "smi", "--layers", "4",
                                 "--cascade", "--json"])
    assert r.exit_code == 0, r.output
    o = json.loads(r.output[r.output.index("{"):])
    assert o["layer"] == 2 and o["learned"] == [1, 4] and o["sequential_branch"] == [4]
    assert 1.171 + 0.019 < o["value"] - o["error"] and o["value"] < o["sequential"]
    assert o["shift"] + o["shift_error"] < 0
    s3 = o["stability"]["3"]
    assert s3["eigenvalue"] + s3["error"] < 1


# ----------------------------------------------------------------------------- M = 3 tokens
SEQ_L3_M3 = {1: (0.5886, 0.0137), 2: (0.6673, 0.0147)}   # layer-3 branch, M = 3 (branch QMC)


@pytest.mark.parametrize("kw", [dict(tokens=4), dict(layers=4, learned=(1, 4), tokens=3),
                                dict(tokens=2.5), dict(layers=4, tokens=3)])
def test_unsupported_tokens_are_refused(kw):
    # the cascade driver serves (L, M) = (3, 2), (4, 2), (3, 3)
    with pytest.raises(InputError, match="tokens"):
        sc.cascade_threshold(**{**CHEAP, **kw})
    with pytest.raises(InputError, match="tokens"):
        sc.cascade_stats(0.2, *((0.3,) if kw.get("layers") == 4 else ()), 0.98, **kw, **CHEAP)


def test_identities_on_the_joint_branch_three_tokens():
    # (L, M) = (3, 3) on Q = diag(q1, 0, q3) near the cascade root: E tr C_l = M, the Nishimori
    # form of K_1 and K_3, E g_l = 0, and the two-halves partners agree
    st = sc.cascade_stats(0.1, 0.959, tokens=3, log2_outer=10, log2_inner=13, replicates=8,
                          seed=4)
    for k in ("trace1", "trace2"):
        assert abs(st[k]["value"] - 3.0) <= st[k]["error"] < 0.1
    for k in ("nishimori1", "nishimori3"):
        # K_1 ~ 0.16 at q1 = 0.1: its Nishimori form (from Cov[z_1 | .] / V_1^2) has a bar of
        # about 0.3 K_1 at this rule
        K = st["K" + k[-1]]["value"]
        assert abs(st[k]["value"]) <= st[k]["error"] < 0.5 * K
    for k in (f"g{l}_{a}" for l in (1, 3) for a in range(3)):
        assert abs(st[k]["value"]) <= st[k]["error"], k
    for k in ("mu2", "K1", "K3"):
        a, b = st[k], st["u_" + k]
        assert abs(a["value"] - b["value"]) <= a["error"] + b["error"], k
    assert st["a3"]["value"] == pytest.approx(0.041 / 0.959 * st["K3"]["value"])
    assert "M = 3" in st["method"]


def test_q1_zero_is_the_layer3_branch_kernel_three_tokens():
    # q1 = 0 at M = 3: the kernel of smi_branch_qmc on the layer-3 branch (independent points)
    q3 = 0.959
    a = sc.cascade_stats(0.0, q3, tokens=3, **CHEAP, seed=1)
    b = bq.branch_stats_qmc(q3, layers=3, tokens=3, **CHEAP, seed=2)
    for k in ("mu2", "K3", "trace1", "trace2"):
        assert abs(a[k]["value"] - b[k]["value"]) <= a[k]["error"] + b[k]["error"], k
    assert abs(a["K1"]["value"]) <= a["K1"]["error"] < 0.02


@pytest.mark.slow
def test_l3_m3_cascade_layer2_and_plain_monte_carlo_at_its_root():
    """(L, M) = (3, 3), layers 3 and 1 learned (~1-2 min): layer 2's cascade threshold lies
    after layer 1's sequential one, its same-points layer-3-only value is the branch kernel's
    layer-2 value, and at the root the plain Monte Carlo has mu_2 = a_1 = a_3 = 1 / alpha_casc.
    The Monte Carlo's own ratio bias (V_3 ~ 0.04, 6 free coordinates) is removed by its 1/k
    law: 2 x (halves) - (quarters) of the same draws."""
    r = sc.cascade_threshold(tokens=3, log2_outer=11, log2_inner=13, replicates=8, seed=3)
    alpha = r["value"]
    assert r["layer"] == 2 and r["tokens"] == 3 and r["error"] < 0.03
    assert SEQ_L3_M3[1][0] + SEQ_L3_M3[1][1] < alpha - r["error"]
    assert abs(r["sequential"] - SEQ_L3_M3[2][0]) <= r["sequential_error"] + SEQ_L3_M3[2][1]
    assert alpha - r["error"] < SEQ_L3_M3[2][0] + SEQ_L3_M3[2][1]
    for k, (v, e) in r["checks"].items():
        assert abs(v - (3.0 if k.startswith("trace") else 0.0)) <= e, k
    q1, q3 = r["q1"], r["q3"]
    m2, m4 = (plain_cascade_mc([(q1, q3)], tokens=3, samples=4000, inner=2048, seed=31,
                               blocks=b)[0] for b in (2, 4))
    mc = 2 * m2 - m4
    q = np.array(r["points"][:9])
    s3 = abs((r["a3"][3] - r["a3"][5]) / (q[3, 1] - q[5, 1]))
    s1 = abs((r["a1"][1] - r["a1"][7]) / (q[1, 0] - q[7, 0]))
    for x, slope in ((mc[:, 0], 0.0), ((1 - q1) / q1 * mc[:, 1], s1 * r["q1_error"]),
                     ((1 - q3) / q3 * mc[:, 2], s3 * r["q3_error"])):
        m, se = _mean_se(x)
        assert abs(m - 1 / alpha) <= 3.5 * se + r["error"] / alpha**2 + slope
        assert se < 0.1 * m


@pytest.mark.slow
def test_cli_cascade_three_tokens():
    """`threshold weak --model smi --layers 3 --tokens 3 --cascade --json` (~3-5 min): layer 2
    once layers 3 and 1 are learned, after layer 1's sequential threshold 0.5886 +- 0.0137 at
    M = 3; the same-points layer-3-only value agrees with the branch kernel's 0.6673 +- 0.0147."""
    import json

    from click.testing import CliRunner

    from aim_sym.cli import cli

    r = CliRunner().invoke(cli, ["threshold", "weak", "--model", "smi", "--layers", "3",
                                 "--tokens", "3", "--cascade", "--json"])
    assert r.exit_code == 0, r.output
    o = json.loads(r.output[r.output.index("{"):])
    assert o["tokens"] == 3 and o["layer"] == 2 and o["learned"] == [1, 3]
    assert 0.5886 + 0.0137 < o["value"] - o["error"]
    assert abs(o["sequential"] - 0.6673) < o["sequential_error"] + 0.0147
