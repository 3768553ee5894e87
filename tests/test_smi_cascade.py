"""The L = 3 cascade of deep tied attention: layer 2's stability on the joint branch
Q = diag(q1, 0, q3) (numerics/smi_cascade.py; THEORY 2.1, 2.2, 2.5)."""

import math

import numpy as np
import pytest
from aim_sym.numerics import smi_branch_qmc as bq
from aim_sym.numerics import smi_cascade as sc
from aim_sym.numerics.records import ConvergenceError, InputError

SEQ2_LATTICE = (1.1358, 0.0044)   # layer 2 on the layer-3 branch, L = 3 (numerics.smi_sequential)
CHEAP = dict(log2_outer=10, log2_inner=12, replicates=8)


# ----------------------------------------------------------------------------- plain Monte Carlo
def _attention(h, *, skip, beta):
    """``softmax_rows(beta h h^T) + c I`` for rows ``h`` (..., 2) (THEORY 2.1)."""
    s = beta * h[..., :, None] * h[..., None, :]
    e = np.exp(s - s.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True) + skip * np.eye(2)


def _mat(z1, z2, *, skip, beta):
    """``Mat = A_2 A_1`` for rows ``z_1, z_2`` (..., 2): ``A_1 = A(z_1)``, ``A_2 = A(A_1 z_2)``."""
    a1 = _attention(z1, skip=skip, beta=beta)
    h2 = np.einsum("...ab,...b->...a", a1, z2)
    return _attention(h2, skip=skip, beta=beta) @ a1


def plain_cascade_mc(q1s, q3, *, samples, inner, seed, skip=1.0, beta=1.0):
    """Seeded plain Monte Carlo on Q = diag(q1, 0, q3) for each ``q1`` in ``q1s``, independent
    of the kernel: teacher z ~ N(0, I) (3 rows, 2 tokens), omega_l = q_l z_l + sqrt(q_l V_l)
    xi_l; per teacher its own iid draws z_1 ~ N(omega_1, V1 I) at the first ``q1`` (the z_1
    factor sampled; the other ``q1`` reweight the same draws by the ratio of their z_1 factors,
    common random numbers) and z_2 ~ N(0, I), weighted by N(s Mat^{-1} h; omega_3, V3 I) /
    det Mat (both signs, 2 x 2 inverse written out), cut into two independent halves: per sample
    <C_a - I, C_b - I>_F of z_2 and g_a . g_b of layers 1 and 3 (no variance bias; ratio bias
    O(1 / inner)).  Returns (len(q1s), samples, 3): mu2, K1, K3."""
    rng = np.random.default_rng(seed)
    v3 = 1.0 - q3
    out = []
    step = max(1, 200_000 // inner)
    for s0 in range(0, samples, step):
        n = min(step, samples - s0)
        z = rng.standard_normal((n, 3, 2))
        xi1, xi3 = rng.standard_normal((n, 2)), rng.standard_normal((n, 2))
        mt = _mat(z[:, 0], z[:, 1], skip=skip, beta=beta)
        h = np.einsum("nab,nb->na", mt, z[:, 2])
        om3 = q3 * z[:, 2] + math.sqrt(q3 * v3) * xi3
        oms = [q * z[:, 0] + math.sqrt(q * (1 - q)) * xi1 for q in q1s]
        z1 = oms[0][:, None] + math.sqrt(1 - q1s[0]) * rng.standard_normal((n, inner, 2))
        z2 = rng.standard_normal((n, inner, 2))
        m = _mat(z1, z2, skip=skip, beta=beta)
        det = m[..., 0, 0] * m[..., 1, 1] - m[..., 0, 1] * m[..., 1, 0]
        hb = h[:, None]
        u = np.stack([m[..., 1, 1] * hb[..., 0] - m[..., 0, 1] * hb[..., 1],
                      -m[..., 1, 0] * hb[..., 0] + m[..., 0, 0] * hb[..., 1]], -1) / det[..., None]
        lp = -((u - om3[:, None]) ** 2).sum(-1) / (2 * v3) - np.log(det)
        lm = -((u + om3[:, None]) ** 2).sum(-1) / (2 * v3) - np.log(det)

        def log_factor(q, om, z1=z1):
            return -((z1 - om[:, None]) ** 2).sum(-1) / (2 * (1 - q)) - math.log(1 - q)

        rows = []
        for q, om1 in zip(q1s, oms, strict=True):
            corr = log_factor(q, om1) - log_factor(q1s[0], oms[0])
            top = np.maximum((lp + corr).max(1), (lm + corr).max(1))[:, None]
            wp, wm = np.exp(lp + corr - top), np.exp(lm + corr - top)
            res = []
            for part in (slice(0, inner // 2), slice(inner // 2, inner)):
                w, d = (wp + wm)[:, part], (wp - wm)[:, part]
                zn = w.sum(1)[:, None]
                c2 = np.einsum("nia,nib->nab", z2[:, part] * w[..., None], z2[:, part])
                c2 = c2 / zn[..., None] - np.eye(2)
                g1 = ((w[..., None] * z1[:, part]).sum(1) / zn - om1) / (1 - q)
                g3 = ((d[..., None] * u[:, part]).sum(1) / zn - om3) / v3
                res.append((c2, g1, g3))
            (ca, g1a, g3a), (cb, g1b, g3b) = res
            rows.append(np.column_stack([(ca * cb).sum((1, 2)), (g1a * g1b).sum(1),
                                         (g3a * g3b).sum(1)]))
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


@pytest.mark.parametrize("kw,name", [(dict(step1=0.2), "step1"), (dict(step3=5.0), "step3"),
                                     (dict(center=(0.1,)), "center")])
def test_threshold_grid_options_are_checked(kw, name):
    with pytest.raises(InputError, match=name):
        sc.cascade_threshold(**{**CHEAP, **kw})


def test_root_outside_the_grid_raises_convergence_error():
    # at q3 near 0.9 mu2 < a3 everywhere (layer 2 stable, far from its threshold)
    with pytest.raises(ConvergenceError, match="outside"):
        sc.cascade_threshold(center=(0.3, 0.9), step1=0.1, step3=0.1, log2_outer=8,
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
    (mc,) = plain_cascade_mc((q1,), q3, samples=3000, inner=512, seed=11)
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
    r = sc.cascade_threshold(center=(0.3, 0.9865), **CHEAP, seed=2)
    assert r["center"][0] < 0.3
    ref = cheap
    assert abs(r["value"] - ref["value"]) <= r["error"] + ref["error"]
    assert abs(r["q1"] - ref["q1"]) <= r["q1_error"] + ref["q1_error"]


@pytest.mark.slow
def test_plain_monte_carlo_confirms_the_cascade_root():
    # at the kernel's root (q1*, q3*) the plain Monte Carlo has a1 = a3 = mu2 = 1 / alpha_casc
    r = sc.cascade_threshold(log2_outer=11, log2_inner=13, replicates=8, seed=5)
    q1, q3, alpha = r["q1"], r["q3"], r["value"]
    (mc,) = plain_cascade_mc((q1,), q3, samples=16000, inner=1024, seed=23)
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
        a, b = plain_cascade_mc(order, q3, samples=24000, inner=2048, seed=7)
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
    full, half, cv = sc._replicates(pts, skip=1.0, beta=1.0, log2_outer=11, log2_inner=13,
                                    replicates=16, seed=41)
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
