"""The deep AIM SE branch with alpha as an output (:func:`branch_point`; THEORY 1.6,
docs/deep_aim.md section 4, "The branch with alpha as an output"). Fast: a stand-in output side
(``_output_sums`` replaced by a known function of V with a known root, built from the forward
prior map only) checks alpha, V2, that the bars cover and that they are not inflated; bad input.
Slow: the branch point at c = 0.5, v1 = the alpha = 0.3 fixed point's mmse_1 reproduces that
fixed point's alpha and mmse_2 within the combined bars."""

from __future__ import annotations

import math

import numpy as np
import pytest
from aim_sym.numerics import deep_aim_se as ds
from aim_sym.numerics.records import ConvergenceError, InputError

MODEL = ds.DeepAimSE(skip=0.5, rho1=0.5, rho2=0.5)
ALPHA0 = 0.37
Q_HAT0 = (6.0, 30.0)
#: the stand-in's target: V0_l = mmse_rho(1/q_hat0_l) by the forward prior map
V0 = tuple(ds._prior_step(q, 0.5) for q in Q_HAT0)
KAPPA = (-3.0, 25.0)
#: relative inner-rule effect of the stand-in at the coarse step (zero at the fine step)
RULE = 2e-3


def _stand_in(noise: np.ndarray):
    """_output_sums replaced: E_l(V) = q_hat0_l / (2 ALPHA0) exp(KAPPA_l (V2 - V0_2)) times
    (V0_1 / V1) for layer 1, times per-scramble factors (1 + noise[k, l]) and (1 + RULE) at the
    coarse inner step. At V1 = V0_1 the fixed point is V2 = V0_2, alpha = ALPHA0 without noise:
    alpha_1 = ALPHA0 exp(-KAPPA_1 d), alpha_2 = ALPHA0 q_hat*_2(V2)/q_hat0_2 exp(-KAPPA_2 d)."""
    def sums(model, q1, q2, h_in, normals, chunk=256, estimator="variance"):
        v1, v2 = model.q0[0] - q1, model.q0[1] - q2
        d = v2 - V0[1]
        e = np.array([Q_HAT0[0] / (2 * ALPHA0) * math.exp(KAPPA[0] * d) * V0[0] / v1,
                      Q_HAT0[1] / (2 * ALPHA0) * math.exp(KAPPA[1] * d)])
        rule = 1.0 + (RULE if h_in == ds.INNER_STEPS[0] else 0.0)
        out = np.zeros((normals.shape[0], 12))
        out[:, :2] = e[None, :] * (1.0 + noise[: normals.shape[0]]) * rule
        return out
    return sums


def test_branch_point_finds_the_known_root_and_its_bars_cover(monkeypatch):
    rng = np.random.default_rng(3)
    noise = 0.01 * rng.standard_normal((8, 2))
    monkeypatch.setattr(ds, "_output_sums", _stand_in(noise))
    r = ds.branch_point(MODEL, v1=V0[0], m=2, e_gen=False)
    v2, v2_err = r["layers"][1]["mmse"], r["layers"][1]["mmse_error"]
    # the exact root of the noisy stand-in (the scramble means shift E_l by (1 + mean noise)),
    # by bisection in V2 on the closed forms (forward prior map only)
    shift = 1.0 + noise.mean(axis=0)

    def gap(x):
        d = x - V0[1]
        lo, hi = 1e-3, 1e4                          # q_hat_2 with mmse_rho(1/q_hat) = x
        for _ in range(200):
            q2 = math.sqrt(lo * hi)
            lo, hi = (q2, hi) if ds._prior_step(q2, 0.5) > x else (lo, q2)
        a1 = ALPHA0 * math.exp(-KAPPA[0] * d) / shift[0]
        a2 = ALPHA0 * q2 / Q_HAT0[1] * math.exp(-KAPPA[1] * d) / shift[1]
        return math.log(a1 / a2), a1
    lo, hi = 0.5 * V0[1], 2.0 * V0[1]
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (lo, mid) if gap(mid)[0] > 0 else (mid, hi)
    v2_exact, alpha_exact = mid, gap(mid)[1]
    assert abs(r["alpha"] - alpha_exact) < 1e-5 * alpha_exact
    assert abs(v2 - v2_exact) < 1e-3 * v2_exact
    # the noise moved the root; the bars (2.5 SE + rule + root) cover the noiseless target ...
    assert abs(r["alpha"] - ALPHA0) <= r["alpha_error"]
    assert abs(v2 - V0[1]) <= v2_err
    # ... and are not inflated: the rule part is the coarse step's shift propagated, here
    # RULE times |d log alpha/d log E_1 + d log alpha/d log E_2| (both E_l scaled alike)
    sens = np.array(r["sensitivity"])
    assert r["alpha_rule_error"] == pytest.approx(r["alpha"] * abs(sens[0].sum())
                                                  * math.log1p(RULE), rel=1e-6)
    assert r["alpha_error"] < 4 * ds.COVERAGE * r["alpha_standard_error"] + 2 * r[
        "alpha_rule_error"] + 1e-6
    # the fixed point condition by the forward map at the returned alpha
    for i, rho in enumerate((0.5, 0.5)):
        lay = r["layers"][i]
        assert ds._prior_step(lay["q_hat"], rho) == pytest.approx(lay["mmse"], rel=1e-3)


def test_branch_point_noiseless_stand_in_is_exact(monkeypatch):
    monkeypatch.setattr(ds, "_output_sums", _stand_in(np.zeros((8, 2))))
    r = ds.branch_point(MODEL, v1=V0[0], m=2, e_gen=False, xtol=1e-10)
    assert r["alpha"] == pytest.approx(ALPHA0, rel=1e-8)
    assert r["layers"][1]["mmse"] == pytest.approx(V0[1], rel=1e-7)
    assert r["alpha_standard_error"] == 0.0


def test_prior_q_hat_inverts_the_prior_step():
    for q in (1e-3, 0.7, 12.0, 3e4):
        assert ds.prior_q_hat(ds._prior_step(q, 0.5), 0.5) == pytest.approx(q, rel=1e-8)
    assert ds.prior_q_hat(1.0, 0.5) == 0.0


@pytest.mark.parametrize("kw, option", [
    ({"v1": 0.0}, "v1"), ({"v1": 1.5}, "v1"), ({"v1": float("nan")}, "v1"),
    ({"v1": 0.1, "v2_bracket": (0.05, 0.01)}, "v2_bracket"),
    ({"v1": 0.1, "v2_bracket": (0.0, 0.1)}, "v2_bracket"),
    ({"v1": 0.1, "estimator": "nope"}, "estimator"), ({"v1": 0.1, "jac_rel": 0.0}, "jac_rel"),
])
def test_branch_point_bad_input(kw, option):
    with pytest.raises(InputError, match=option):
        ds.branch_point(MODEL, **kw)


def test_branch_point_without_sign_change_is_a_convergence_error(monkeypatch):
    monkeypatch.setattr(ds, "_output_sums", _stand_in(np.zeros((8, 2))))
    with pytest.raises(ConvergenceError) as exc:
        ds.branch_point(MODEL, v1=V0[0], m=2, e_gen=False,
                        v2_bracket=(2 * V0[1], 4 * V0[1]))
    assert exc.value.last_iterate[0] == V0[0]


@pytest.mark.slow
def test_branch_point_reproduces_the_fixed_point_at_c05():
    """c = 0.5, alpha = 0.3: fixed_point (2^5 x 8, seed 0, no cross-overlap term) and the branch
    point at its mmse_1. Same point set: the same map, so alpha = 0.3 and the same mmse_2 up to
    the iteration's and the root's tolerances. Independent scrambles (seed 1): within the summed
    bars, fixed_point's mmse_1 bar carried to alpha by the branch's slope d alpha/d V1 (from the
    two branch points 10 % apart in v1)."""
    fp = ds.fixed_point(MODEL, alpha=0.3, v_init=(0.215, 0.07), m=5, cross_term=False)
    v1, v2 = fp["layers"][0]["mmse"], fp["layers"][1]["mmse"]
    r = ds.branch_point(MODEL, v1=v1, m=5, e_gen=False)
    assert abs(r["alpha"] - 0.3) < 1e-4
    assert abs(r["layers"][1]["mmse"] - v2) < 1e-3 * v2
    other = ds.branch_point(MODEL, v1=v1, m=5, seed=1, e_gen=False)
    near = ds.branch_point(MODEL, v1=0.9 * v1, m=5, seed=1, e_gen=False)
    slope = abs(other["alpha"] - near["alpha"]) / (0.1 * v1)
    assert abs(other["alpha"] - 0.3) <= other["alpha_error"] + slope * fp["layers"][0][
        "mmse_error"]
    assert abs(other["layers"][1]["mmse"] - v2) <= (other["layers"][1]["mmse_error"]
                                                    + fp["layers"][1]["mmse_error"])


@pytest.mark.slow
def test_fixed_point_jacobian_step_at_small_skip_is_above_the_line_rules_jumps():
    """The Jacobian of the map at the c = 0.1, alpha = 0.35 fixed point (line rule, 2^5 x 8):
    the default step (FIXED_POINT_JAC_REL) must agree with a 2.5 x smaller and a 2.5 x larger
    step on dF_2/dV_2 (within 0.05), where the old step 1e-4 gave 0.436 against ~0.80 (the
    line rule's small jumps in V2; docs/deep_aim.md "The Jacobian step at skip < 1")."""
    model = ds.DeepAimSE(skip=0.1, rho1=0.5, rho2=0.5)
    normals = ds._sobol_normals(5, 8, 0)
    v = np.array([0.0589, 0.0196])
    h = ds.INNER_STEPS[1]
    fv = ds._map_mean(model, 0.35, v, normals, h)[0]
    rel = ds.FIXED_POINT_JAC_REL[0]
    j22 = [ds._jacobian(model, 0.35, v, normals, h, fv, rel=r)[1, 1]
           for r in (rel / 2.5, None, rel * 2.5 if rel * 2.5 <= 0.2 else 0.2)]
    assert max(j22) - min(j22) < 0.05, j22
    assert 0.6 < j22[1] < 1.0, j22
