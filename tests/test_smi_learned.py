"""Tests of the both-learned SMI engine (numerics.smi_learned; THEORY 2.1, 2.3)."""

import math

import numpy as np
import pytest
import smi_mc_oracles
from aim_sym.numerics import smi_learned as sl
from aim_sym.numerics import smi_sequential as ss
from aim_sym.numerics.records import InputError

Q_TEST = (0.3, 0.983)            # near the both-learned fixed point at alpha ~ 0.85


def test_lattice_integrates_the_prior():
    # trapezoid on the full disc: mass 1 and E|u|^2 = 2 for N(0, I) at both spacings
    lat = sl.disc_lattice(0.25)
    p = np.exp(lat["logp"])
    for o in (0, 4):
        assert abs(p @ lat["F"][:, o] - 1) < 1e-10
        assert abs(p @ lat["F"][:, o + 3] - 2) < 1e-9
        assert abs(p @ lat["F"][:, o + 1]) < 1e-14


def test_fibre_reduces_to_layer2_lattice_at_q1_zero():
    # at q1 = 0 the nodes are the lattice of numerics.smi_sequential (there halved by evenness)
    g = np.random.default_rng(5).standard_normal((40, 8))
    p = sl.teacher(0.0, 0.95, g)
    m = sl.fibre_moments(p["h0"], p["h1"], p["a0"], p["a1"], p["o0"], p["o1"], v1=1.0,
                         v2=0.05, lat=sl.disc_lattice(0.2))
    c00, _, c11, m0, m1, n2, logZ = ss.fibre_moments(p["h0"], p["h1"], p["o0"], p["o1"], 0.05,
                                                     ss.fibre_lattice(0.2, 1.0, 1.0))
    assert np.allclose(m["logZ"][0], logZ, rtol=0, atol=1e-12)
    assert np.allclose(m["s1"][0], c00 + c11 + 2, rtol=1e-12)
    assert np.allclose(m["m2"][0], np.stack([m0, m1]), rtol=1e-10, atol=1e-12)
    assert np.allclose(m["s2"][0], n2, rtol=1e-12)
    assert np.abs(m["m1"][0]).max() < 1e-13              # E z_1' = 0 by evenness


def test_fibre_lattice_converges_off_the_layer2_branch():
    # q1 > 0: the dz = 0.1 value refines the dz = 0.2 one by far less than 0.2 differs from 0.4
    g = np.random.default_rng(6).standard_normal((30, 8))
    p = sl.teacher(*Q_TEST, g)
    args = (p["h0"], p["h1"], p["a0"], p["a1"], p["o0"], p["o1"])
    kw = dict(v1=1 - Q_TEST[0], v2=1 - Q_TEST[1])
    m2 = sl.fibre_moments(*args, lat=sl.disc_lattice(0.2), **kw)
    m1 = sl.fibre_moments(*args, lat=sl.disc_lattice(0.1), **kw)
    for k in ("m1", "m2", "s2"):
        fine = np.abs(m1[k][0] - m2[k][0]).max()
        coarse = np.abs(m2[k][0] - m2[k][1]).max()
        assert fine < 0.05 * coarse and fine < 1e-3 * np.abs(m1[k][0]).max()


def test_nishimori_and_k12_small_sample():
    st = sl.learned_stats(*Q_TEST, m=8, replicates=4, seed=2)
    for ll in (1, 2):
        d = st[f"K{ll}_raw"]["replicates"] - st[f"N{ll}"]["replicates"]
        assert abs(d.mean()) < 4 * d.std(ddof=1) / 2 + st[f"K{ll}"]["lattice"]
    assert abs(st["K12"]["value"]) < 4 * st["K12"]["se"]


def test_against_plain_montecarlo_small():
    st = sl.learned_stats(*Q_TEST, m=9, replicates=4, seed=1)
    mc = smi_mc_oracles.montecarlo_stats(*Q_TEST, samples=1000, inner=400, seed=3)
    for k in ("K1", "K2"):
        tol = 4 * math.hypot(mc[k].error, st[k]["se"]) + st[k]["lattice"]
        assert abs(mc[k].value - st[k]["value"]) < tol


def test_common_random_numbers():
    g = sl.normals(6, 3, 0)
    assert g.shape == (3, 64, 8) and np.array_equal(g, sl.normals(6, 3, 0))
    assert not np.allclose(g[0], g[1])
    assert abs(g.mean()) < 0.05 and abs(g.var() - 1) < 0.05


def test_bad_input():
    with pytest.raises(InputError, match="q1"):
        sl.learned_stats(1.0, 0.5, m=4, replicates=2)
    with pytest.raises(InputError, match="dz"):
        sl.learned_stats(0.3, 0.5, m=4, replicates=2, dz=0.001)
    with pytest.raises(InputError, match="replicates"):
        sl.learned_stats(0.3, 0.5, m=4, replicates=1)
    with pytest.raises(InputError, match="alpha"):
        sl.solve_branch(alpha=1.2)


@pytest.mark.slow
def test_layer2_limit_matches_lattice_engine():
    # q1 = 0, q2 = 0.92: the deterministic lattice engine (independent outer rule: h lattice x
    # sinh rule in omega_2) gives 19.313; this engine must agree within its errors
    ref = ss.branch_stats(0.92, n_w=0.3, dh=1.9, dz=0.2)
    st = sl.learned_stats(0.0, 0.92, m=13, replicates=8, seed=1)
    assert abs(st["K2"]["value"] - ref["K2"]) < 4 * st["K2"]["se"] + st["K2"]["lattice"]
    assert abs(st["K1"]["value"]) < 1e-12


@pytest.mark.slow
def test_branch_point_is_a_fixed_point_of_the_montecarlo_map():
    # alpha = 0.85: the SE map evaluated at the solver's Q by plain Monte Carlo (no lattice,
    # no quasi-random outer) returns Q within the combined errors
    r = sl.solve_branch(alpha=0.85, init=(0.375, 0.9906))
    q = np.array(r["Q"])
    assert r["stable"] and q[0] > 0.2
    mc = smi_mc_oracles.montecarlo_stats(*q, samples=40000, inner=1000, seed=8)
    for ll, k in enumerate(("K1", "K2")):
        qh = 0.85 * mc[k].value
        t = qh / (1 + qh)
        dt = 4 * 0.85 * mc[k].error / (1 + qh) ** 2
        assert abs(t - q[ll]) < dt + r["error"][ll]
