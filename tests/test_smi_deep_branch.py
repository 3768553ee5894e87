"""L = 3 deep attention on the layer-3 branch: statistics and sequential thresholds
(numerics/smi_deep_branch.py)."""

import math

import numpy as np
import pytest

from numerics import smi
from numerics import smi_deep_branch as db
from numerics.records import ConvergenceError, InputError

# Q = 0 stability coefficients of numerics.smi_deep (polar x Gauss-Hermite rule, an independent
# route; benchmarks/RESULTS.md): lambda_1 = 1/5.124 (+- 0.026), lambda_2 = 1/8.687 (+- 0.002)
LAM1, LAM1_ERR = 1 / 5.124, 0.026 / 5.124**2
LAM2, LAM2_ERR = 1 / 8.687, 0.002 / 8.687**2


def test_inverse_map_matches_the_product_of_layer_inverses():
    # symbolic 3-layer fibre vs M^{-1} = A_1^{-1} A_2^{-1} from the one-layer inverse of smi
    rng = np.random.default_rng(3)
    z = rng.standard_normal((4, 50)) * 2
    for c, beta in ((1.0, 1.0), (0.4, 2.5)):
        (a, b, cc, d), jac = db.inverse_map(*z, c, beta)
        A1i, det1 = smi._attention_inverse(z[0], z[1], c, beta)
        A1 = np.linalg.inv(np.moveaxis(A1i, (0, 1), (-2, -1)))
        h2 = np.einsum("nab,bn->na", A1, z[2:])
        A2i, det2 = smi._attention_inverse(h2[:, 0], h2[:, 1], c, beta)
        Mi = np.einsum("abn,bcn->nac", A1i, A2i)
        assert np.allclose(np.stack([a, b, cc, d], -1), Mi.reshape(-1, 4), atol=1e-12)
        assert np.allclose(jac, 1 / (det1 * det2), rtol=1e-12)


def test_bad_input_raises():
    for kw in (dict(q3=0.0), dict(q3=1.0), dict(q3=-0.2), dict(q3=float("nan"))):
        with pytest.raises(InputError, match="q3"):
            db.branch_stats_l3(**kw)
        with pytest.raises(InputError, match="q3"):
            db.montecarlo_branch_l3(**kw, samples=20, inner=40)
    with pytest.raises(InputError, match="skip"):
        db.branch_stats_l3(0.5, skip=0.0)
    with pytest.raises(InputError, match="beta"):
        db.montecarlo_branch_l3(0.5, beta=-1.0)
    with pytest.raises(InputError, match="skip"):
        db.sequential_thresholds_l3(skip=-1.0)
    with pytest.raises(InputError, match="dh"):
        db.branch_stats_l3(0.5, dh=10.0)
    with pytest.raises(InputError, match="samples"):
        db.sequential_thresholds_l3(samples=10)


def test_no_bracket_raises_convergence_error():
    # below q3 = 0.9 both residuals are negative (layer 3 not yet informative enough)
    with pytest.raises(ConvergenceError, match="not bracketed") as e:
        db.sequential_thresholds_l3(samples=400, inner=40, scan_samples=40, scan=(0.3, 0.5))
    assert e.value.residual is not None


def test_h_lattice_covers_the_attention_image():
    rng = np.random.default_rng(0)
    o = np.array([0.7, -1.3])
    v, dh = 0.05, 0.3 * math.sqrt(0.05)
    H0, H1, _ = db.h_lattice_l3(o[0], o[1], v, 1.0, dh)
    z = rng.standard_normal((4, 4000))
    (a, b, c, d), _ = db.inverse_map(*z, 1.0, 1.0)
    Mi = np.stack([np.stack([a, b], -1), np.stack([c, d], -1)], -2)
    h = np.linalg.solve(Mi, np.broadcast_to(o, (4000, 2))[..., None])[..., 0]
    assert H0.min() < h[:, 0].min() and h[:, 0].max() < H0.max()
    assert H1.min() < h[:, 1].min() and h[:, 1].max() < H1.max()


@pytest.fixture(scope="module")
def lattice_q03():
    # two orders of the deterministic rule at q3 = 0.3 (V = 0.7)
    return [db.branch_stats_l3(0.3, tau=t, dh=dh, dz=dz, radius=r)
            for t, dh, dz, r in ((0.8, 3.0, 0.6, 5.0), (0.6, 2.5, 0.5, 5.5))]


def test_lattice_mass_nishimori_and_refinement(lattice_q03):
    coarse, fine = lattice_q03
    assert abs(fine["mass"] - 1) < abs(coarse["mass"] - 1) + 1e-6
    assert abs(fine["mass"] - 1) < 2e-3
    # Nishimori: K3 = (2 mass - trcov3 / V) / V, a relation the rule does not impose
    assert abs(fine["nishimori"]) < 2e-3 * fine["K3"]
    for k in ("mu1", "mu2", "K3"):
        assert abs(fine[k] - coarse[k]) < 0.05 * fine[k]


def test_lattice_agrees_with_monte_carlo(lattice_q03):
    coarse, fine = lattice_q03
    mc = db.montecarlo_branch_l3(0.3, samples=600, inner=400, seed=11)
    for k in ("mu1", "mu2", "K3"):
        err = abs(fine[k] - coarse[k])
        assert abs(fine[k] - mc[k].value) < 3.5 * (mc[k].error + err), k
    # the cross block E ||E[z_1 z_2^T | .]||^2 vanishes by the sign symmetries
    assert abs(mc["cross"].value) < 3.5 * mc["cross"].error + 1e-3
    assert abs(mc["nishimori"].value) < 3.5 * mc["nishimori"].error


def test_small_q3_limit_is_the_weak_recovery_coefficient():
    # mu_l(q3 -> 0) -> lambda_l of numerics.smi_deep; linear extrapolation from q3 = 0.01, 0.02
    st = [db.branch_stats_l3(q, tau=0.8, dh=2.5, dz=0.5, radius=5.5) for q in (0.01, 0.02)]
    for k, lam, lam_err in (("mu1", LAM1, LAM1_ERR), ("mu2", LAM2, LAM2_ERR)):
        ext = 2 * st[0][k] - st[1][k]
        assert abs(ext - lam) < 3 * lam_err + 0.01 * lam, (k, ext, lam)
