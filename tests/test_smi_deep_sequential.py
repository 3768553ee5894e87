"""L = 3 deep attention on the layer-3 branch: statistics and sequential thresholds by the
depth-general driver (numerics/smi_sequential.py: branch_point, sequential_thresholds) and its
Monte Carlo oracles (tests/smi_mc_oracles.py)."""

import math

import numpy as np
import pytest
import smi_mc_oracles
from aim_sym.numerics import smi_fibre
from aim_sym.numerics import smi_sequential as seq
from aim_sym.numerics.records import ConvergenceError, InputError

# Q = 0 stability coefficients of numerics.smi_weak (radial x angle outer rule x 16 scrambled
# Sobol sets of 2^15 points, an independent route; docs/smi_depth.md): lambda_l = 1 / alpha_l,
# alpha_1 = 5.1497 +- 0.0050, alpha_2 = 8.6947 +- 0.0088, alpha_3 = 0.207177 +- 5.7e-6 (the
# retired Gauss-Hermite engine gave 5.124 +- 0.026, 8.687 +- 0.002, 0.20722 +- 1e-4)
LAM1, LAM1_ERR = 1 / 5.1497, 0.0050 / 5.1497**2
LAM2, LAM2_ERR = 1 / 8.6947, 0.0088 / 8.6947**2
LAM3 = 1 / 0.207177
ORDER = (0.5, 2.8, 0.3, 0.3, 6.0)     # (tau, dh, dz1, dz2, radius)


def test_inverse_map_matches_the_product_of_layer_inverses():
    # symbolic 3-layer fibre vs M^{-1} = A_1^{-1} A_2^{-1} from the one-layer inverse of smi
    rng = np.random.default_rng(3)
    z = rng.standard_normal((4, 50)) * 2
    for c, beta in ((1.0, 1.0), (0.4, 2.5)):
        ((a, b), (cc, d)), jac = smi_fibre.inverse_columns(list(z), 3, c, beta)
        A1i, det1 = smi_fibre.attention_inverse(z[0], z[1], c, beta)
        A1 = np.linalg.inv(np.moveaxis(A1i, (0, 1), (-2, -1)))
        h2 = np.einsum("nab,bn->na", A1, z[2:])
        A2i, det2 = smi_fibre.attention_inverse(h2[:, 0], h2[:, 1], c, beta)
        Mi = np.einsum("abn,bcn->nac", A1i, A2i)
        assert np.allclose(np.stack([a, b, cc, d], -1), Mi.reshape(-1, 4), atol=1e-12)
        assert np.allclose(jac, 1 / (det1 * det2), rtol=1e-12)


def test_bad_input_raises():
    for kw in (dict(q3=0.0), dict(q3=1.0), dict(q3=-0.2), dict(q3=float("nan"))):
        with pytest.raises(InputError, match="q3"):
            seq.branch_point(kw["q3"], ORDER)
        with pytest.raises(InputError, match="q3"):
            smi_mc_oracles.montecarlo_branch(kw["q3"], layers=3, samples=20, inner=40)
    with pytest.raises(InputError, match="skip"):
        seq.branch_point(0.5, ORDER, skip=0.0)
    with pytest.raises(InputError, match="beta"):
        smi_mc_oracles.montecarlo_branch(0.5, layers=3, beta=-1.0)
    with pytest.raises(InputError, match="skip"):
        smi_mc_oracles.montecarlo_sequential_thresholds(skip=-1.0)
    with pytest.raises(InputError, match="dh"):
        seq.branch_point(0.5, (0.5, 10.0, 0.3, 0.3, 6.0))
    with pytest.raises(InputError, match="samples"):
        smi_mc_oracles.montecarlo_sequential_thresholds(samples=10)


def test_no_bracket_raises_convergence_error():
    # below q3 = 0.9 both residuals are negative (layer 3 not yet informative enough)
    with pytest.raises(ConvergenceError, match="not bracketed") as e:
        smi_mc_oracles.montecarlo_sequential_thresholds(samples=400, inner=40, scan_samples=40,
                                                     scan=(0.3, 0.5))
    assert e.value.residual is not None


def test_h_lattice_covers_the_attention_image():
    rng = np.random.default_rng(0)
    o = np.array([0.7, -1.3])
    v, dh = 0.05, 0.3 * math.sqrt(0.05)
    H0, H1, _ = seq.h_lattice(o[0], o[1], v, 1.0, dh, layers=3)
    z = rng.standard_normal((4, 4000))
    ((a, b), (c, d)), _ = smi_fibre.inverse_columns(list(z), 3, 1.0, 1.0)
    Mi = np.stack([np.stack([a, b], -1), np.stack([c, d], -1)], -2)
    h = np.linalg.solve(Mi, np.broadcast_to(o, (4000, 2))[..., None])[..., 0]
    assert H0.min() < h[:, 0].min() and h[:, 0].max() < H0.max()
    assert H1.min() < h[:, 1].min() and h[:, 1].max() < H1.max()


def test_monte_carlo_symmetry_and_nishimori():
    mc = smi_mc_oracles.montecarlo_branch(0.3, layers=3, samples=400, inner=300, seed=4)
    # the cross block E ||E[z_1 z_2^T | .]||^2 vanishes by the sign symmetries (a squared
    # posterior moment from two independent halves: a nonzero block would show as > 0)
    assert abs(mc["cross"].value) < 3.5 * mc["cross"].error
    assert abs(mc["nishimori"].value) < 3.5 * mc["nishimori"].error
    # same teachers at every inner size (common random numbers): the estimates move little
    mc2 = smi_mc_oracles.montecarlo_branch(0.3, layers=3, samples=400, inner=150, seed=4)
    assert abs(mc2["K3"].value - mc["K3"].value) < 2 * mc["K3"].error


def test_lattice_coarse_mass_and_nishimori():
    # one coarse order at q3 = 0.3 (V = 0.7); the Nishimori identity K3 = (2 mass -
    # trcov3 / V) / V is not imposed by the rule
    st = seq.branch_point(0.3, (0.5, 2.0, 0.6, 0.6, 5.0))
    assert abs(st["mass"] - 1) < 2e-3
    assert abs(st["nishimori"]) < 5e-3 * st["K3"]
    assert st["cross"] == 0.0 and st["cut"]["mass"] < 1e-12


@pytest.fixture(scope="module")
def lattice_q03():
    # two orders of the deterministic rule at q3 = 0.3 (V = 0.7)
    return [seq.branch_point(0.3, (t, dh, dz, dz, r))
            for t, dh, dz, r in ((0.5, 2.0, 0.6, 5.0), (0.4, 1.5, 0.5, 5.5))]


@pytest.mark.slow
def test_lattice_mass_nishimori_and_refinement(lattice_q03):
    coarse, fine = lattice_q03
    assert abs(fine["mass"] - 1) < 2e-4
    assert abs(fine["nishimori"]) < 2e-4 * fine["K3"]
    for k in ("mu1", "mu2", "K3"):
        assert abs(fine[k] - coarse[k]) < 0.02 * fine[k]


@pytest.mark.slow
def test_lattice_agrees_with_monte_carlo(lattice_q03):
    coarse, fine = lattice_q03
    mc = smi_mc_oracles.montecarlo_branch(0.3, layers=3, samples=4000, inner=1000, seed=11)
    for k in ("mu1", "mu2", "K3"):
        err = abs(fine[k] - coarse[k])
        assert abs(fine[k] - mc[k].value) < 3 * (mc[k].error + err), k


@pytest.mark.slow
def test_small_q3_limit_is_the_weak_recovery_coefficient():
    # mu_l(q3 -> 0) -> lambda_l of numerics.smi_weak; linear extrapolation from q3 = 0.01, 0.02
    st = [seq.branch_point(q, (0.5, 2.0, 0.5, 0.5, 5.5)) for q in (0.01, 0.02)]
    for k, lam, lam_err in (("mu1", LAM1, LAM1_ERR), ("mu2", LAM2, LAM2_ERR)):
        ext = 2 * st[0][k] - st[1][k]
        assert abs(ext - lam) < 3 * lam_err + 0.01 * lam, (k, ext, lam)
    # and K3 / q3 -> lambda_3: the layer-3 weak-recovery coefficient
    ext = 2 * st[0]["K3"] / 0.01 - st[1]["K3"] / 0.02
    assert abs(ext - LAM3) < 0.01 * LAM3, ext


@pytest.mark.slow
def test_sequential_roots_are_roots_for_another_seed():
    # the Monte Carlo oracle's roots are roots of another seed's residuals
    res = smi_mc_oracles.montecarlo_sequential_thresholds(samples=800, inner=600, scan_samples=800,
                                                       seed=2)
    assert [d["layer"] for d in res] == [1, 2]
    first = [d for d in res if d["first"]]
    assert len(first) == 1 and first[0]["layer"] == 1   # layer 1 is learned before layer 2
    for d in res:
        mc = smi_mc_oracles.montecarlo_branch(d["q3"], layers=3, samples=3000, inner=1000, seed=9)
        r = mc[f"resid{d['layer']}"]
        assert abs(r.value) < 3 * (r.error + abs(d["slope_r"]) * d["q3_error"]), (d, r)
        assert abs(1 / mc[f"mu{d['layer']}"].value - d["value"]) < 3 * (
            d["error"] + mc[f"mu{d['layer']}"].error * d["value"] ** 2)


def test_cli_l3_reports_sequential_unless_disabled(monkeypatch):
    # wiring only (the engines are stubbed; their numbers are tested above and in test_smi_weak);
    # the L = 3 sequential thresholds come from the lattice driver alone
    import json

    from aim_sym.numerics import smi_weak
    from click.testing import CliRunner

    from aim_sym.cli import cli

    weak = [dict(layer=l, kind="weak", value=v, error=1e-3, method="stub", seconds=0.0)
            for l, v in ((1, 5.1), (2, 8.7), (3, 0.2))]
    seen = {}

    def stub(**kw):
        seen.update(kw)
        return [dict(layer=l, kind="sequential", value=v, error=0.01, q3=q, q3_error=1e-3,
                     first=l == 1, method="stub", seconds=0.0, extra=1)
                for l, v, q in ((1, 0.97, 0.976), (2, 1.16, 0.989))]

    monkeypatch.setattr(smi_weak, "weak_thresholds", lambda **kw: [dict(d) for d in weak])
    base = ["threshold", "weak", "--model", "smi", "--channel", "deep-attention", "--layers", "3",
            "--tokens", "2", "--skip", "0.5", "--json"]
    monkeypatch.setattr(seq, "sequential_thresholds", stub)
    res = CliRunner().invoke(cli, base)
    assert res.exit_code == 0, res.output
    out = json.loads(res.output[res.output.index("{"):])
    kinds = [(t["layer"], t["kind"]) for t in out["thresholds"]]
    assert kinds == [(1, "weak"), (2, "weak"), (3, "weak"), (1, "sequential"), (2, "sequential")]
    assert seen["skip"] == 0.5 and seen["layers"] == 3 and "extra" not in out["thresholds"][-1]
    assert out["thresholds"][3]["q3"] == 0.976 and "lattice" in out["note"]
    res = CliRunner().invoke(cli, base + ["--no-sequential"])
    out = json.loads(res.output[res.output.index("{"):])
    assert [t["kind"] for t in out["thresholds"]] == ["weak"] * 3


# ----------------------------------------------------------------------------- lattice route
def test_node_chunks_and_float32_agree_with_the_plain_kernel(monkeypatch):
    # a root-like q3 (V = 0.02) on a small anisotropic lattice: node chunks with their own
    # shifts reproduce the one-chunk sums; float32 exponentials stay within FLOAT32_REL
    v = 0.02
    lat = seq.fibre_lattice(0.9, 1.0, 1.0, 4.0, 0.45, 3)
    H0, H1, _ = seq.h_lattice(0.3, -0.5, v, 1.0, 2.8 * math.sqrt(v), layers=3)
    sel = slice(0, None, max(1, H0.size // 40))
    h0, h1 = H0[sel], H1[sel]
    o0, o1 = np.full_like(h0, 0.3), np.full_like(h0, -0.5)
    monkeypatch.setattr(seq, "_CHUNK", 1 << 22)
    one = seq.fibre_moments(h0, h1, o0, o1, v, lat)
    monkeypatch.setattr(seq, "_CHUNK", 700)
    assert len(seq.node_chunks(lat, 700)) > 3
    many = seq.fibre_moments(h0, h1, o0, o1, v, lat)
    f32 = seq.fibre_moments(h0, h1, o0, o1, v, lat, single=True)
    scale = 1 + np.abs(one)
    assert np.abs(many - one).max(initial=0) < 1e-11 * scale.max()
    assert np.all(np.abs(f32 - one) <= 10 * seq.FLOAT32_REL * scale)


def test_anisotropic_lattice_and_workers():
    # q3 = 0.5: the isotropic lattice dz = 0.6 and the anisotropic one (dz1, dz2) = (0.8, 0.6)
    # (58% of the nodes) against the finer isotropic 0.5: the coarser z_1 spacing costs no more
    # than the error of the isotropic rule it replaces (measured: mu1 6.3e-4 vs 7.3e-4, K3 1.8e-4
    # vs 3.0e-4); two forked workers give the same sums
    iso = seq.branch_point(0.5, (0.7, 2.5, 0.6, 0.6, 5.0))
    ani = seq.branch_point(0.5, (0.7, 2.5, 0.8, 0.6, 5.0), workers=2)
    ani1 = seq.branch_point(0.5, (0.7, 2.5, 0.8, 0.6, 5.0))
    ref = seq.branch_point(0.5, (0.7, 2.5, 0.5, 0.5, 5.0))
    assert ani["nodes"] < 0.6 * iso["nodes"]
    for k in ("mu1", "mu2", "K3"):
        assert abs(ani[k] - ani1[k]) < 1e-12 * abs(ani1[k])
        assert abs(ani[k] - ref[k]) < 1.5 * abs(iso[k] - ref[k]) + 2e-5 * abs(ref[k]), k


def _synthetic_point(shift):
    # r_l, mu_l smooth in x = log(1 - q3) with known roots x_l* (+ an order-dependent shift)
    xs = {1: math.log(0.022), 2: math.log(0.013)}

    def point(q3, order, *, layers, skip, beta, single, workers, wcut):
        x = math.log1p(-q3)
        d = shift if order[0] < 0.45 else 0.0
        st = dict(K3=1.0, nishimori=1e-6, mass=1.0, pairs=1, seconds=0.0, q3=q3,
                  cut=dict(mu=0.0, mu_tail=1e-6, K=0.0, K_tail=0.0))
        st["r"] = [0.8 * (xs[l] + d - x) + 0.3 * (xs[l] + d - x) ** 2 for l in (1, 2)]
        for l in (1, 2):
            st[f"mu{l}"] = 1.0 / (0.98 + 0.15 * (l - 1)) + 0.2 * (x - xs[l] - d)
        return st
    return point


def test_lattice_thresholds_root_search_on_a_synthetic_branch(monkeypatch):
    monkeypatch.setattr(seq, "branch_point", _synthetic_point(0.01))
    res = seq.sequential_thresholds(scan=(0.96, 0.97, 0.975, 0.98))  # extended twice
    assert [d["layer"] for d in res] == [1, 2] and res[0]["first"]
    for d, a, v in ((res[0], 0.98, 0.022), (res[1], 1.13, 0.013)):
        # the refined order's root lies 0.01 (in x) from the coarse one's: the first-order shift
        # leaves a second-order remainder, which the interpolation term bounds
        assert abs(d["value"] - a) < d["interpolation"] < 1e-3
        assert abs(d["q3"] - (1 - v * math.exp(0.01))) < d["q3_error"] < 1e-3
        assert d["spread"] < d["error"] and d["values"][0] != d["values"][1]
        assert d["evaluations"] == 12 and len(d["steps"]) == 2 and "deterministic" in d["method"]


def test_lattice_thresholds_bad_input_and_no_bracket(monkeypatch):
    for kw, name in ((dict(orders=((0.5, 2.8, 0.6, 0.3),) * 2), "orders"),
                     (dict(orders=((0.5, 2.8, 0.6, 0.3, 6.0),)), "orders"),
                     (dict(orders=((0.5, 9.0, 0.6, 0.3, 6.0),) * 2), "dh"),
                     (dict(orders=((0.5, 2.8, 0.01, 0.3, 6.0),) * 2), "dz"),
                     (dict(scan=(0.98, 0.97, 0.99)), "scan"), (dict(scan=(0.98,)), "scan"),
                     (dict(workers=0), "workers"), (dict(skip=0.0), "skip"),
                     (dict(single=1), "single"), (dict(layers=4), "layers")):
        with pytest.raises(InputError, match=name):
            seq.sequential_thresholds(**kw)
    monkeypatch.setattr(seq, "branch_point", _synthetic_point(0.0))
    with pytest.raises(ConvergenceError, match="not bracketed"):
        seq.sequential_thresholds(scan=(0.5, 0.52, 0.54))


# Monte Carlo thresholds (benchmarks/RESULTS.md, mean of seeds 0 and 1): value, error
MC_SEQ = {1: (0.979, 0.017), 2: (1.134, 0.014)}
CHEAP_ORDERS = ((0.5, 2.8, 0.6, 0.6, 6.0), (0.4, 2.2, 0.6, 0.4, 6.0))


@pytest.mark.slow
def test_lattice_thresholds_agree_with_monte_carlo():
    # the deterministic route at its cheapest pair of orders (~6 min on 2 cores) against the
    # seeded Monte Carlo thresholds: within the combined bars
    res = seq.sequential_thresholds(orders=CHEAP_ORDERS)
    assert [d["layer"] for d in res] == [1, 2] and res[0]["first"]
    for d in res:
        mc, mc_err = MC_SEQ[d["layer"]]
        assert abs(d["value"] - mc) < 2 * math.hypot(d["error"], mc_err), (d, mc)
        assert d["error"] < 0.01 and abs(d["mass"] - 1) < 1e-3
        assert d["spread"] >= abs(d["values"][-1] - d["values"][0])


# ----------------------------------------------------------------------------- L = 2, same driver
# the L = 2 ladder (sequential_threshold, digits 8; issue 14's golden value): 0.71963568 +- 4e-8
LADDER_L2 = 0.71963568


def test_depth_general_driver_at_two_layers_agrees_with_the_ladder():
    # the fixed-pair driver at L = 2 (its own root search, one h spacing at every omega_2 node)
    # against the ladder's value: inside its bar (measured 0.7195668 +- 2.6e-3, 7 s)
    res = seq.sequential_thresholds(layers=2, orders=((0.5, 2.8, 0.25, 0.25, 7.5),
                                                      (0.4, 1.9, 0.22, 0.22, 7.5)),
                                    scan=(0.96, 0.97, 0.975, 0.98))
    assert len(res) == 1 and res[0]["layer"] == 1 and res[0]["first"]
    d = res[0]
    assert abs(d["value"] - LADDER_L2) < d["error"] < 5e-3
    assert abs(d["q2"] - 0.97365) < 2e-4 and d["spread"] >= abs(d["values"][-1] - d["values"][0])


@pytest.mark.slow
def test_depth_general_driver_at_two_layers_refined():
    # one rung finer (measured 0.7196193 +- 1.2e-4, 24 s): the bar shrinks 20x and still covers
    res = seq.sequential_thresholds(layers=2, orders=((0.4, 1.9, 0.22, 0.22, 7.5),
                                                      (0.3, 1.5, 0.2, 0.2, 7.5)),
                                    scan=(0.96, 0.97, 0.975, 0.98))
    assert abs(res[0]["value"] - LADDER_L2) < res[0]["error"] < 3e-4


def test_two_layers_without_orders_take_the_ladder(monkeypatch):
    # wiring: at L = 2 the driver's default is the ladder (digits), whose numbers
    # test_smi_sequential.py and test_smi_slow.py check
    seen = {}

    def ladder(**kw):
        seen.update(kw)
        return dict(value=0.7196, error=1e-4, q2=0.9737, method="ladder")

    monkeypatch.setattr(seq, "sequential_threshold", ladder)
    (d,) = seq.sequential_thresholds(layers=2, digits=5, workers=1)
    assert seen["digits"] == 5 and d["layer"] == 1 and d["first"] and d["q2"] == 0.9737
    assert seq.sequential_thresholds(layers=2)[0]["kind"] == "sequential" and seen["digits"] == 4
    with pytest.raises(InputError, match="digits"):
        seq.sequential_thresholds(layers=3, digits=4)
    with pytest.raises(InputError, match="orders"):
        seq.sequential_thresholds(layers=2, digits=4, orders=CHEAP_ORDERS)
