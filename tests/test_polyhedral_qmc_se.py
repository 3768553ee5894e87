"""The SE of polyhedral channels with events of rank > 3 by drawn outcomes
(numerics/polyhedral_qmc_se.py; docs/polyhedral_rank.md), against the project's deterministic
hardmax T = 3 route (numerics/hardmax_se.py) and closed forms."""

import itertools
import math
import os

import numpy as np
import pytest
from aim_sym.numerics import polyhedral_qmc_se as pq
from aim_sym.numerics import polyhedral_se as ps
from aim_sym.numerics import polytope as pt
from aim_sym.numerics.records import InputError
from polyhedral_fixtures import hardmax_t3

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOP2 = os.path.join(ROOT, "examples", "channels", "polyhedral", "top2_t3.py")

# References from the deterministic hardmax T = 3 route (numerics/hardmax_se.py, error bars
# ~1e-5 or better), recorded 2026-11-25:
#: alpha_bar_c (`aim-sym threshold weak --small-width --channel hardmax --tokens 3`), so
#: E(0, 1) = 1 / (2 alpha_bar_c)
HARDMAX_T3 = 0.175392535447599
#: `hardmax_se.output_e(T=3, q=0.5, V=0.7)`: 3.2617509896309542 +- 5.8e-6
E_05_07 = 3.2617509896309542
#: `aim-sym se --channel hardmax --tokens 3 --rho 0.5 --alpha 0.05 --json`: the fixed point
#: (mmse +- 2.0e-6), its Psi_out, phi and e_gen (+- 1e-13)
FP_005 = {"mmse": 0.709819213947638, "q": 0.790180786052362, "psi_out": -2.173869340868306,
          "phi": -0.11885882614164683, "e_gen": 1.3553901437481686}


def hardmax_output(T=3):
    """Hardmax as numbers (numerics/polytope.hardmax_channel): one term per outcome (the two
    cyclic outcomes of T = 3 have empty polytopes and are never drawn)."""
    ch = pt.hardmax_channel(T)
    return ps.PolyhedralOutput(
        outcomes=tuple(p.y for p in ch.pieces),
        terms=tuple((ps.Term(1.0, p.A, p.b),) for p in ch.pieces),
        weights=ch.weights, basis=(), name="hardmax")


def one_hot(out, T=3):
    R = np.zeros((len(out.outcomes), T * T))
    for i, y in enumerate(out.outcomes):
        for a, c in enumerate(y):
            R[i, T * a + c] = 1.0
    return R


def z_score(est, ref):
    """|est - ref| in units of the bar (a 99% bar: 1 means 2.6-3.5 standard errors)."""
    return abs(est.value - ref) / est.error


def test_e_at_q0_is_the_hardmax_threshold():
    out = hardmax_output()
    est = pq.output_e_qmc(out, q=0.0, V=1.0, points=1 << 11, scrambles=8)
    ref = 1 / (2 * HARDMAX_T3)
    assert z_score(est, ref) <= 1, (est, ref)
    assert est.error < 0.03 * ref


def test_e_against_the_hardmax_route():
    out = hardmax_output()
    est = pq.output_e_qmc(out, q=0.5, V=0.7, points=1 << 11, scrambles=8, seed=3)
    assert z_score(est, E_05_07) <= 1, est
    assert est.error < 0.03 * E_05_07
    # one rejection sample instead of two: another unbiased estimator of the same number
    assert pq.auto_extra(out) == 2
    one = pq.output_e_qmc(out, q=0.5, V=0.7, points=1 << 11, scrambles=8, extra=1, seed=4)
    assert z_score(one, E_05_07) <= 1, one


def noisy_two_signs(eps=0.15):
    """y = (s_1, s_2), s_k = sign(f_k . h) flipped with probability eps (T = 2, n = 3):
    P(y | h) = prod_k (eps + (1 - 2 eps) 1[s_k f_k . h > 0]), four terms per outcome with a
    constant one: fractional weights, the stochastic branch of the sampler."""
    f = [(1.0, -0.5, 0.3), (-0.2, 1.0, 0.7)]
    outcomes, terms = [], []
    for s in itertools.product((1, -1), repeat=2):
        rows = [tuple(-sk * c for c in fk) for sk, fk in zip(s, f)]
        ts = [ps.Term(eps * eps, (), ())]
        for k in range(2):
            ts.append(ps.Term(eps * (1 - 2 * eps), (rows[k],), (0.0,)))
        ts.append(ps.Term((1 - 2 * eps) ** 2, tuple(rows), (0.0, 0.0)))
        outcomes.append(s)
        terms.append(tuple(ts))
    return ps.PolyhedralOutput(outcomes=tuple(outcomes), terms=tuple(terms),
                               weights=(2.0, 1.0, 2.0), basis=tuple(f), name="noisy-signs")


def test_stochastic_channel_against_gauss_hermite():
    """Rank 2: the deterministic route of numerics/polyhedral_se (Phi2, Gauss-Hermite over
    omega, orders 16 and 24) is the reference."""
    out = noisy_two_signs()
    ref, _ = ps.output_estimate(out, q=0.4, V=1.0, orders=(16, 24))
    assert ref.error < 1e-6
    est = pq.output_e_qmc(out, q=0.4, V=1.0, points=1 << 12, scrambles=8)
    assert z_score(est, ref.value) <= 1, (est, ref)
    assert est.error < 0.05 * ref.value


def orthant_output(K=4):
    """y = 1 iff K entries of h (T = 3, weights 2, 1, 2, 1) are positive: rank K, P(y = 1)
    ~ 2^-K (a rare outcome)."""
    A = tuple(tuple(-1.0 if j == k else 0.0 for j in range(6)) for k in range(K))
    one = (ps.Term(1.0, A, (0.0,) * K),)
    zero = (ps.Term(1.0, (), ()), ps.Term(-1.0, A, (0.0,) * K))
    return ps.PolyhedralOutput(outcomes=(1, 0), terms=(one, zero),
                               weights=(2.0, 1.0, 1.0, 2.0, 1.0, 2.0), basis=A, name="orthant")


def orthant_e(q, V, K=4, order=24):
    """E(q, V) of :func:`orthant_output` by tensor Gauss-Hermite over the K entries' omega,
    with Z_1 = prod Phi(omega_k / s_k) and |grad Z_1|_C^2 (1 / Z_1 + 1 / (1 - Z_1)) in closed
    form (the entries are independent)."""
    from scipy.special import ndtr

    w = np.array([2.0, 1.0, 1.0, 2.0][:K])
    x, wt = np.polynomial.hermite_e.hermegauss(order)
    wt = wt / wt.sum()
    grids = np.meshgrid(*([x] * K), indexing="ij")
    om = np.stack([g.ravel() for g in grids], axis=1) * np.sqrt(q * w)
    W = np.ones(om.shape[0])
    for g in np.meshgrid(*([wt] * K), indexing="ij"):
        W = W * g.ravel()
    s = np.sqrt(V * w)
    Phi = ndtr(om / s)
    phi = np.exp(-0.5 * (om / s) ** 2) / np.sqrt(2 * np.pi) / s
    Z = Phi.prod(axis=1)
    dZ = phi * Z[:, None] / Phi
    return float((((dZ ** 2) * w).sum(axis=1) * (1 / Z + 1 / (1 - Z))) @ W)


def test_rank_four_orthant_against_its_closed_form_integrand():
    """A rank-4 channel that is not hardmax, with a rare outcome (and E << K / V: the default
    draws 24 rejection samples per point): Gauss-Hermite of orders 24 and 16 of the
    closed-form integrand as the reference."""
    ref, ref_coarse = orthant_e(0.4, 0.9), orthant_e(0.4, 0.9, order=16)
    assert abs(ref - ref_coarse) < 1e-6
    assert pq.auto_extra(orthant_output()) == 24
    est = pq.output_e_qmc(orthant_output(), q=0.4, V=0.9, points=1 << 12, scrambles=8)
    assert z_score(est, ref) <= 1 and est.error < 0.05 * ref, (est, ref)


def test_psi_out_by_thermodynamic_integration():
    out = hardmax_output()
    q = FP_005["q"]
    est = pq.psi_out_qmc(out, q=q, V=1.5 - q, points=1 << 11, scrambles=8)
    assert z_score(est, FP_005["psi_out"]) <= 1, est
    assert est.error < 0.02


def test_egen_at_q0_closed_form_and_plugin():
    """At q = 0 (omega = 0) each row's argmax: the diagonal wins with probability
    p = 1/4 + asin(2/3) / (2 pi), so e_gen = 3 - 3 (p^2 + (1 - p)^2 / 2); the plug-in
    (ties at omega = 0 broken as a Gaussian perturbation would) is twice e_gen."""
    out = hardmax_output()
    p = 0.25 + math.asin(2 / 3) / (2 * math.pi)
    exact = 3 - 3 * (p * p + (1 - p) ** 2 / 2)
    est = pq.generalisation_error_qmc(out, one_hot(out), q=0.0, V=1.5, points=1 << 11,
                                      scrambles=8)
    assert z_score(est, exact) <= 1 and est.error < 0.02, est
    plug = est.extra["plugin"]
    assert abs(plug - 2 * exact) <= est.extra["plugin_error"], est.extra


def test_egen_against_the_hardmax_route():
    out = hardmax_output()
    q = FP_005["q"]
    est = pq.generalisation_error_qmc(out, one_hot(out), q=q, V=1.5 - q, points=1 << 11,
                                      scrambles=8)
    assert z_score(est, FP_005["e_gen"]) <= 1 and est.error < 0.02, est


@pytest.mark.parametrize("kwargs", [
    {"q": -0.1, "V": 0.5}, {"q": 0.3, "V": 0.0}, {"q": float("nan"), "V": 0.5},
    {"q": 0.3, "V": 0.5, "points": 1000}, {"q": 0.3, "V": 0.5, "scrambles": 2},
    {"q": 0.3, "V": 0.5, "extra": 0}])
def test_bad_input_raises_input_error(kwargs):
    with pytest.raises(InputError):
        pq.output_e_qmc(hardmax_output(), **kwargs)


def test_bad_input_of_fixed_points_and_egen():
    out = hardmax_output()
    with pytest.raises(InputError):
        pq.fixed_points_qmc(out, alpha=0.0, rho=0.5)
    with pytest.raises(InputError):
        pq.fixed_points_qmc(out, alpha=0.1, rho=-1.0)
    with pytest.raises(InputError):
        pq.generalisation_error_qmc(out, np.zeros((3, 9)), q=0.5, V=0.5)
    with pytest.raises(InputError):
        pq.generalisation_error_qmc(out, one_hot(out), q=0.5, V=0.5, V_error=-1.0)


def test_a_broken_tiling_is_refused():
    """A channel whose probabilities do not sum to 1 (one hardmax outcome dropped)."""
    out = hardmax_output()
    broken = ps.PolyhedralOutput(outcomes=out.outcomes[1:], terms=out.terms[1:],
                                 weights=out.weights, basis=(), name="broken")
    with pytest.raises(InputError):
        pq.output_e_qmc(broken, q=0.5, V=0.5, points=1 << 10, scrambles=4)


@pytest.mark.slow
def test_fixed_point_of_the_hardmax_file_and_top2():
    """The channel files (rank-5 events) at rho = 0.5, alpha = 0.05: the fixed point, Psi_out
    and phi against the hardmax route; top-2 at T = 3 has the same SE (h -> -h with
    omega -> -omega maps it onto hardmax at every q). ~40 s each."""
    from aim_sym.channel_file import from_file
    from aim_sym.models import AIM

    for ch in (hardmax_t3(), from_file(TOP2, tokens=3)):
        out = AIM(ch).polyhedral
        assert ps.event_rank(out) == 5
        (fp,) = pq.fixed_points_qmc(out, alpha=0.05, rho=0.5)
        assert abs(fp["mmse"] - FP_005["mmse"]) <= fp["error"] < 0.01, fp
        assert abs(fp["psi_out"] - FP_005["psi_out"]) <= fp["psi_out_error"] < 0.02, fp
        assert abs(fp["phi"] - FP_005["phi"]) <= fp["phi_error"], fp
        assert fp["stable"] and fp["bayes_optimal"]
