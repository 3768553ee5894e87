"""Tests of numerics.erm_ridgeless: the ERM SE at lambda = 0 above alpha_interp (THEORY 3)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from aim_sym.numerics import erm_ridgeless as R
from aim_sym.numerics import erm_se as S
from aim_sym.numerics.erm_output import generalisation_error
from aim_sym.numerics.erm_spectral import spectral_integrals
from aim_sym.numerics.records import ConvergenceError, InputError

KAPPA0, DELTA = 0.5, 0.5
ALPHA_INTERP = 0.1534821028590800675735  # docs/erm.md, 30 digits
LAMS = (1e-2, 3e-3, 1e-3)


def test_alpha_interp_in_double_precision():
    assert R.alpha_interp(kappa0=KAPPA0, Delta=DELTA) == pytest.approx(ALPHA_INTERP, rel=1e-12)


@pytest.mark.parametrize("alpha", [0.5 * ALPHA_INTERP, ALPHA_INTERP, -1.0, math.nan])
def test_refuses_alpha_at_or_below_the_threshold(alpha):
    with pytest.raises(InputError, match="alpha"):
        R.ridgeless_se(alpha=alpha, kappa0=KAPPA0, Delta=DELTA)


def test_lambda_extrapolation_is_exact_on_quadratics_and_covers_a_cubic():
    def quad(x):
        return 0.3 - 2.0 * x + 5.0 * x * x

    v, e = R.lambda_extrapolation(lams=LAMS, values=tuple(quad(x) for x in LAMS),
                                  errors=(0.0,) * 3)
    assert v == pytest.approx(0.3, abs=1e-14)
    assert e < 1e-3  # only the linear-through-two truncation (5 * 1e-3 * 3e-3 = 1.5e-5)

    def cubic(x):
        return quad(x) + 400.0 * x**3

    v, e = R.lambda_extrapolation(lams=LAMS, values=tuple(cubic(x) for x in LAMS),
                                  errors=(1e-6,) * 3)
    assert abs(v - 0.3) <= e
    assert abs(v - 0.3) > 1e-8  # the cubic term is felt: the check is not vacuous
    # the points' own bars enter with the Lagrange weights (|w| sums to 2.43 here)
    _, e0 = R.lambda_extrapolation(lams=LAMS, values=(0.0,) * 3, errors=(1e-3,) * 3)
    assert e0 == pytest.approx(1e-3 * (3e-5 / 6.3e-5 * 0.1 + 10 / 14 + 5 / 3), rel=1e-12)


@pytest.mark.parametrize("bad", [dict(lams=(1e-2, 1e-3), values=(1, 2), errors=(0, 0)),
                                 dict(lams=(1e-2, 1e-2, 1e-3), values=(1, 2, 3),
                                      errors=(0, 0, 0)),
                                 dict(lams=(1e-2, 0.0, 1e-3), values=(1, 2, 3),
                                      errors=(0, 0, 0))])
def test_lambda_extrapolation_refuses_bad_input(bad):
    with pytest.raises(InputError):
        R.lambda_extrapolation(**bad)


def test_lambda_zero_fixed_point_is_the_limit_of_finite_lambda():
    # alpha = 2 (13 alpha_interp), output side at Gauss-Hermite order 10 on both routes (the
    # same rule: its error cancels); the finite-lambda fixed points at 1e-2, 3e-3, 1e-3,
    # extrapolated to 0, must land on the lambda = 0 one within the extrapolation's bar, and
    # that bar must be small (the lambda = 0 equations drop the lambda d_eps J term of m: a
    # wrong limit would miss by the O(lambda) slope ~ 5 times 1e-3 or more)
    alpha, order = 2.0, 10
    p0 = S.ERMParams(alpha=alpha, kappa0=KAPPA0, Delta=DELTA, lam=0.0)
    x0, _, _ = S.fixed_point(p0, q=0.9, m=0.75, sigma=2.0, order=order)
    train0 = S.potential(*x0, p0, order=order)
    pts = []
    for lam in LAMS:
        p = S.ERMParams(alpha=alpha, kappa0=KAPPA0, Delta=DELTA, lam=lam)
        x, _, _ = S.fixed_point(p, q=x0[0], m=x0[1], sigma=x0[2], order=order)
        pts.append((*x[:3], S.potential(*x, p, order=order)))
    for k, direct in enumerate((*x0[:3], train0)):
        v, e = R.lambda_extrapolation(lams=LAMS, values=tuple(t[k] for t in pts),
                                      errors=(0.0,) * 3)
        assert abs(v - direct) <= e
        assert e < 2e-4 * max(1.0, abs(direct))
        assert abs(pts[-1][k] - direct) > 3 * e or k == 3  # finite lambda differs visibly
    # no interpolation: positive training loss, a fraction < 1 of the output directions
    # fitted, and the Sigma equation at eps = 0: Sigma Sigma_hat = d_delta J / (2 delta)
    q, m, sigma, q_hat, m_hat, sigma_hat = x0
    assert train0 > 0.01
    delta = math.sqrt(q_hat) / m_hat
    s = spectral_integrals(kappa0=KAPPA0, delta=delta, eps=0.0)
    assert sigma * sigma_hat == pytest.approx(s.dJ_ddelta / (2 * delta), rel=1e-9)
    fitted = sigma * sigma_hat / (2 * alpha * 2)
    assert 0 < fitted < 1


@pytest.mark.slow
def test_ridgeless_se_at_alpha_one_agrees_with_the_finite_lambda_route():
    # full orders (24/17, bar x 17/7) on both routes; about 5-8 minutes on 2 shared cores
    alpha = 1.0
    pt = R.ridgeless_se(alpha=alpha, kappa0=KAPPA0, Delta=DELTA)
    fp = pt.fixed_point
    assert pt.reliable and fp.train > 0 and 0 < pt.fitted < 1
    start = ((fp.q / (1 + KAPPA0), fp.m / (1 + KAPPA0), fp.sigma),)
    rows = []
    for lam in LAMS:
        p = S.ERMParams(alpha=alpha, kappa0=KAPPA0, Delta=DELTA, lam=lam)
        rows.append(next(f for f in S.solve(p, inits=start) if f.global_minimum))
    for k in ("test", "train", "q", "m", "sigma"):
        v, e = R.lambda_extrapolation(lams=LAMS, values=tuple(getattr(r, k) for r in rows),
                                      errors=tuple(r.errors[k] for r in rows))
        assert abs(v - getattr(fp, k)) <= e + fp.errors[k]


@pytest.mark.slow
def test_unvalidated_gauss_hermite_fixed_point_is_refused():
    # alpha = 0.3 (1.95 alpha_interp): the lambda = 0 fixed point has Sigma ~ 20-27, where the
    # Gauss-Hermite orders were measured not to agree (module notes); with rule="gh" it is
    # refused with the last iterate unless asked for explicitly
    kw = dict(alpha=0.3, kappa0=0.5, Delta=0.5, order=12, order_lo=10, tol=1e-8, rule="gh")
    with pytest.raises(ConvergenceError, match="Sigma") as e:
        R.ridgeless_se(**kw)
    assert e.value.last_iterate[2] > R.SIGMA_RELIABLE
    pt = R.ridgeless_se(**kw, validated_only=False)
    assert not pt.reliable and pt.fixed_point.sigma > R.SIGMA_RELIABLE


def test_broyden_solver_finds_the_fixed_point_of_the_iteration():
    # solve_split's Broyden iteration (here on the Gauss-Hermite order-10 map, cheap) against
    # erm_se's Anderson-mixed iteration on the same map, at alpha = 0.3 where two eigenvalues of
    # the map's Jacobian are ~0.9 (the slow mode), in fewer map evaluations
    p = S.ERMParams(alpha=0.3, kappa0=KAPPA0, Delta=DELTA, lam=0.0)
    ref, n_anderson, _ = S.fixed_point(p, q=3.0, m=1.8, sigma=15.0, order=8, tol=1e-12)
    got, its, res, jac = R.solve_split(p, q=3.0, m=1.8, sigma=15.0, order=8, tol=1e-10,
                                       rule="gh", jacobian_order=8)
    assert res < 1e-10 and its < n_anderson
    for a, b in zip(got, ref, strict=True):
        assert a == pytest.approx(b, rel=1e-8)
    # the Jacobian estimate has the slow mode: dG/dx = jac + I with eigenvalues near 1
    assert max(abs(np.linalg.eigvals(jac + np.eye(3)))) > 0.85
    with pytest.raises(InputError, match="rule"):
        R.solve_split(p, q=3.0, m=1.8, sigma=15.0, rule="trapezoid")
    with pytest.raises(ConvergenceError):
        R.solve_split(p, q=3.0, m=1.8, sigma=15.0, order=8, rule="gh", max_iter=1,
                      jacobian_order=8)


def test_ridgeless_rule_option_is_checked():
    with pytest.raises(InputError, match="rule"):
        R.ridgeless_se(alpha=0.5, kappa0=KAPPA0, Delta=DELTA, rule="trapezoid")


@pytest.mark.slow
def test_piecewise_rule_settles_the_fixed_point_at_alpha_0p3():
    # alpha = 0.3 (1.95 alpha_interp, Sigma ~ 26): Gauss-Hermite's fixed point moves by 20 % in
    # q between orders 12 and 17 (the slow mode of the map amplifies its error ~14x); the
    # piecewise rule's fixed points at outer orders 12, 16 and 20 settle, and the 16/12 bar
    # (norm-wise, 3 x the largest difference of the logs) covers the order-20 fixed point, as does
    # the test error's own 16/12 bar.  About 12 minutes on 2 shared cores at load 5-9.
    pt = R.ridgeless_se(alpha=0.3, kappa0=KAPPA0, Delta=DELTA)
    fp = pt.fixed_point
    assert pt.rule == "split" and pt.reliable
    assert R.SIGMA_RELIABLE < fp.sigma <= R.SIGMA_SPLIT
    assert fp.train > 0 and 0 < pt.fitted < 1 and fp.residual < 1e-8
    p = S.ERMParams(alpha=0.3, kappa0=KAPPA0, Delta=DELTA, lam=0.0)
    # order 20 to residual 3e-4 (two Broyden steps; the fixed point then known to ~14 x that,
    # 1e-2 in q, far inside the bars): a third step hit a prox Newton failure at 4 nodes
    x20, _, res, _ = R.solve_split(p, q=fp.q, m=fp.m, sigma=fp.sigma, order=20, tol=3e-4)
    for k, v in zip(("q", "m", "sigma"), x20[:3], strict=True):
        assert abs(v - getattr(fp, k)) <= fp.errors[k], k
        assert fp.errors[k] < 0.05 * abs(getattr(fp, k)), k
    test20 = generalisation_error(q=x20[0], m=x20[1], Q0n=p.Q0n)
    assert abs(test20 - fp.test) <= fp.errors["test"] < 0.02 * fp.test


@pytest.mark.slow
def test_lambda_zero_at_alpha_0p3_is_the_limit_of_small_lambda():
    # alpha = 0.3 (Sigma = 26), both routes on the piecewise rule at outer order 12 (its error
    # cancels).  The finite-lambda fixed point moves fast here (q = 4.51, 4.45, 4.34, 4.06,
    # 3.58, 2.86 at lambda = 0, 1e-5, 3e-5, 1e-4, 3e-4, 1e-3: dq/dlambda ~ -6000 at 0, the slow
    # mode amplifying the eps-dependence of the prior ~14 times), so the extrapolation uses
    # lambda = 1e-5, 3e-5, 1e-4 (from 1e-4, 3e-4, 1e-3 it misses q(0) by 0.17, 4 bars).  About
    # 10 minutes at load 5-9 on 2 shared cores.
    assert_lambda_zero_is_the_limit(alpha=0.3, start=(4.5, 2.1, 25.9), lams=(1e-5, 3e-5, 1e-4),
                                    tol=1e-9)


def assert_lambda_zero_is_the_limit(*, alpha: float, start: tuple, lams: tuple,
                                    tol: float) -> None:
    """The lambda = 0 fixed point (piecewise rule, outer order 12) is the lambda -> 0
    extrapolation of the finite-lambda ones at ``lams`` (same rule: its error cancels) within the
    extrapolation's bar; the smallest lambda is visibly (10 bars) different; bars < 2e-3."""
    from dataclasses import replace

    p0 = S.ERMParams(alpha=alpha, kappa0=KAPPA0, Delta=DELTA, lam=0.0)
    x0, _, _, jac = R.solve_split(p0, q=start[0], m=start[1], sigma=start[2], order=12,
                                  tol=tol)
    pts = []
    for lam in lams:
        x, _, _, jac = R.solve_split(replace(p0, lam=lam), q=x0[0], m=x0[1], sigma=x0[2],
                                     order=12, tol=tol, jacobian=jac)
        pts.append(x)
    for k in range(3):  # q, m, Sigma
        v, e = R.lambda_extrapolation(lams=lams, values=tuple(x[k] for x in pts),
                                      errors=(0.0,) * 3)
        assert abs(v - x0[k]) <= e, k
        assert abs(pts[0][k] - x0[k]) > 10 * e, k
        assert e < 2e-3 * abs(x0[k]), k


# Order sequences of the fixed-alpha lambda = 0 fixed point, piecewise rule, outer orders 12,
# 16, 20, each solved from the previous one with its Broyden Jacobian
# (erm_ridgeless.split_order_sequence; source: docs/erm.md "The fixed-alpha bars away from
# kappa0 = Delta = 0.5", full precision): (kappa0, Delta, alpha) -> (order, q, m, Sigma, q_hat,
# m_hat, Sigma_hat, train, test, rank)
FIXED_ALPHA_SEQUENCES = {
    (0.3, 0.1, 0.3134): (
        (12, 1.4811070138492803, 1.3329447570142148, 7.209762903573721, 0.00157368631692979,
         0.09896489522676641, 0.09672538318061942, 0.001200134775967275, 0.05440363385821574,
         0.6258456657188673),
        (16, 1.4819709990919605, 1.333239247881816, 7.212271544624965, 0.0015760948017892146,
         0.09894537237496297, 0.09668548009810708, 0.0011992918394036767, 0.05447743318148986,
         0.6258239888503274),
        (20, 1.4821453124598125, 1.3332994385927823, 7.213623285803388, 0.0015761891783834853,
         0.09892995415556559, 0.09666615414426061, 0.0011991172829802638, 0.05449180367038332,
         0.6258198005163573)),
    (0.3, 0.5, 0.2871): (
        (12, 3.65888339535861, 1.7475056132122884, 17.038248691139344, 0.0030124048606782194,
         0.04866315749226677, 0.03726963370098406, 0.00408972910977589, 0.3182065961820918,
         0.5923396225449624),
        (16, 3.665406449844566, 1.7481243102898927, 17.004442409963236, 0.003035170326778956,
         0.04876222006192685, 0.037336596471603485, 0.004100362388700068, 0.31877094656240446,
         0.592268103258746),
        (20, 3.674798356988583, 1.749736236586432, 17.036491120080285, 0.0030350912957499213,
         0.04870541294308806, 0.037261617744643434, 0.004103501001272693, 0.31926958089391744,
         0.5922204540199025)),
    (0.7, 0.1, 0.3698): (
        (12, 1.9391475523339021, 1.7531367013364028, 10.4362978779945, 0.0010520607216139323,
         0.08256940749368061, 0.08031110239270813, 0.0009620478524983503, 0.053626937587143736,
         0.7500844923092649),
        (16, 1.9418949483781964, 1.7541379180712169, 10.449559824171232, 0.0010546730100061642,
         0.08249104141799235, 0.08019050284310633, 0.00096004970081464, 0.053796222544775216,
         0.7499299005721749),
        (20, 1.9423189121751925, 1.754293607513947, 10.456740230233226, 0.0010540192919468133,
         0.08243864054875721, 0.080132662603842, 0.000959559827137732, 0.05382159844952447,
         0.7499069113857942)),
    (0.7, 0.5, 0.3238): (
        (12, 4.701208044667402, 2.3486459480019795, 27.258916217762398, 0.0015386279338834516,
         0.035194190493279986, 0.026503830819500217, 0.002857697049495487, 0.30374749146877095,
         0.6631783892026191),
        (16, 4.745892897364556, 2.3575403923838163, 27.222448900558476, 0.0015632410827502888,
         0.03533956996774651, 0.02652181936279058, 0.002867593683746235, 0.30536924016803296,
         0.6628321184823773),
        (20, 4.744973089229728, 2.357485663172436, 27.13704561841099, 0.0015723371504881727,
         0.03545270403300198, 0.026606647495518502, 0.0028698463237070634, 0.305287429384988,
         0.6628589368774969)),
    (0.5, 0.5, 0.3991): (
        (12, 2.526557519719333, 1.729670336555523, 6.204283432469864, 0.010555511238009328,
         0.13176880354454573, 0.11612875305094077, 0.008589402436918206, 0.20231714478499208,
         0.6557507603499914),
        (16, 2.509032227164224, 1.7243974223757557, 6.175614011469925, 0.010548370640929757,
         0.13202982835283839, 0.11670418497975449, 0.008599256798082974, 0.20151600660860297,
         0.6558987207777477),
        (20, 2.503001714310215, 1.7225953099169953, 6.165794554170122, 0.010544929995310285,
         0.13212143219028297, 0.11690348806578255, 0.008602435124879612, 0.20123103615557253,
         0.6559533942695374)),
    (0.3, 0.1, 0.2508): (
        (12, 1.6048010540082083, 1.3522685264880687, 17.42262256696379, 0.0004601870743783423,
         0.040616486849488855, 0.03922110003476377, 0.0004754355614071601, 0.07874613405586053,
         0.6189139872240983),
        (16, 1.6041297322372943, 1.3520723708557478, 17.48653608254921, 0.0004562368489556047,
         0.04046422513740835, 0.039079484477497796, 0.00047504071359323954, 0.07867825592988242,
         0.6189294097189243),
        (20, 1.6034581734493953, 1.351866624712261, 17.489481066932914, 0.0004555347151935723,
         0.040453094245435604, 0.039074454492515655, 0.0004751925914619551, 0.07861635664949002,
         0.6189431662011071)),
    (0.7, 0.1, 0.2959): (
        (12, 2.0713671863533087, 1.7760075897314187, 27.52839631800359, 0.00024369817962036436,
         0.0306884108387263, 0.02955124085456161, 0.0003283098638426612, 0.07564699442811751,
         0.7308432610069181),
        (16, 2.0694057152426812, 1.7753875586525125, 27.747972680769543, 0.00023914447611171792,
         0.030440579950804354, 0.029322235349940027, 0.0003276481265243776, 0.07549431997722242,
         0.730946641553384),
        (20, 2.067474481679581, 1.774740154610161, 27.748258494534745, 0.0002385189290089366,
         0.03043379703979259, 0.029325908056649936, 0.00032800884706295566, 0.07536476603600281,
         0.7310315375037183)),
    (0.3, 0.1, 0.2116): (
        (12, 1.7664185118900073, 1.3669481920010955, 49.314625422969115, 9.384215987168448e-05,
         0.014120979726412356, 0.013547434271252675, 0.00015372384818761967, 0.11372140719346549,
         0.6109615270605983),
        (16, 1.7632784250141205, 1.3661201585815577, 48.860936656801734, 9.519712271052546e-05,
         0.014246164992805763, 0.013675318312003856, 0.0001545049697597948, 0.11340895220522801,
         0.6110162283067085),
        (20, 1.7647454649865373, 1.3665186534519196, 48.79373233604158, 9.563821227991029e-05,
         0.014268763160651291, 0.01369323612494761, 0.0001544595905744661, 0.1135479554960514,
         0.6109922761761196)),
    (0.7, 0.1, 0.2496): (
        (12, 2.1945949748249682, 1.784840565432938, 86.68207236976886, 3.576521316443566e-05,
         0.009477114962821307, 0.00912028973534914, 8.785894266294652e-05, 0.10140783496062254,
         0.7133900944537728),
        (16, 2.190509581077993, 1.7835621241165938, 85.12021923530382, 3.693377180421087e-05,
         0.00964676632840708, 0.009289809997348174, 8.877591416590024e-05, 0.1011278629762557,
         0.7135294890590369),
        (20, 2.1936400008906443, 1.784533197397363, 84.94367815650138, 3.720943131323921e-05,
         0.009669965837530879, 0.00930739819912398, 8.867553135600333e-05, 0.10134719160782432,
         0.7134194888367272)),
}
FIXED_ALPHA_KEYS = ("q", "m", "sigma", "q_hat", "m_hat", "sigma_hat", "train", "test", "mse",
                    "rank", "fitted")


def _fixed_alpha_rows(model: tuple) -> tuple[S.ERMParams, dict]:
    """The model's parameters and {order: {quantity: value}} (mse, fitted from the record)."""
    kappa0, Delta, alpha = model
    p = S.ERMParams(alpha=alpha, kappa0=kappa0, Delta=Delta, lam=0.0)
    rows = {}
    for o, q, m, sigma, qh, mh, sh, train, test, rank in FIXED_ALPHA_SEQUENCES[model]:
        rows[o] = dict(q=q, m=m, sigma=sigma, q_hat=qh, m_hat=mh, sigma_hat=sh, train=train,
                       test=test, mse=p.Q0 + q - 2 * m, rank=rank,
                       fitted=sigma * sh / (2 * alpha * 2))  # fac = 2 at T = 2
    return p, rows


def _served_fixed_alpha_errors(p: S.ERMParams, rows: dict) -> dict:
    """The bars ridgeless_se (rule "split") serves from the 16/12 pair of a record."""
    six = ("q", "m", "sigma", "q_hat", "m_hat", "sigma_hat")
    hi, lo = (tuple(rows[o][k] for k in six) for o in (16, 12))
    d_hi, d_lo = ({k: rows[o][k] for k in ("train", "test", "mse", "rank")} for o in (16, 12))
    errors = R._fixed_alpha_errors(p, hi, lo, d_hi, d_lo, S.split_factor(16, 12), 16)
    fp = S.FixedPoint(*hi, **d_hi, iterations=0, residual=0.0, errors=errors)
    fitted, errors["fitted"] = R._fitted(fp, p)
    assert fitted == pytest.approx(rows[16]["fitted"], rel=1e-12)
    return errors


@pytest.mark.parametrize("model", list(FIXED_ALPHA_SEQUENCES))
def test_fixed_alpha_records_are_the_formulas_at_the_recorded_overlaps(model):
    """The recorded test and rank are the test-error formula at the recorded (q, m) (outer order
    12: its coarser step 0.25, as _split_point) and the spectral rank at the recorded delta =
    sqrt(q_hat) / m_hat: the record is one consistent computation."""
    p, rows = _fixed_alpha_rows(model)
    for o, r in rows.items():
        t = generalisation_error(q=r["q"], m=r["m"], Q0n=p.Q0n, step=0.2 if o >= 16 else 0.25)
        assert t == pytest.approx(r["test"], abs=1e-12), o
        rank = spectral_integrals(kappa0=p.kappa0, delta=math.sqrt(r["q_hat"]) / r["m_hat"],
                                  eps=0.0).rank
        assert rank == pytest.approx(r["rank"], abs=1e-12), o


@pytest.mark.parametrize("model", list(FIXED_ALPHA_SEQUENCES))
def test_fixed_alpha_bars_cover_outer_order_20(model):
    """The served 16/12 bars of every quantity (q, m, Sigma, hats norm-wise; train its own
    difference; test, mse, rank the largest of the own difference and each variable's term;
    fitted from Sigma's and Sigma_hat's) cover the step to outer order 20 at the four corners
    of kappa0 in [0.3, 0.7], Delta in [0.1, 0.5] (alpha = 2 alpha_interp; at Delta = 0.1 also
    1.6 and 1.35 alpha_interp, Sigma up to 85) and at the centre."""
    p, rows = _fixed_alpha_rows(model)
    errors = _served_fixed_alpha_errors(p, rows)
    for k in FIXED_ALPHA_KEYS:
        step = abs(rows[20][k] - rows[16][k])
        assert 0 < step < errors[k], (k, step, errors[k])


def test_fixed_alpha_test_bar_is_not_shrunk_by_cancelling_terms():
    """At kappa0 = 0.7, Delta = 0.1 (alpha = 0.3698) the test error's step from outer order 12 to
    16 is the sum of T_q dq = +7.6e-4 and T_m dm = -5.9e-4: it moved 1.7e-4, a quarter of the
    larger term.  The served bar (R._cancellation_bar) keeps the larger term; the
    own-difference rule (served before) is 4.5 times smaller.  Likewise for the mse."""
    model = (0.7, 0.1, 0.3698)
    p, rows = _fixed_alpha_rows(model)
    errors = _served_fixed_alpha_errors(p, rows)
    grow = S.split_factor(16, 12)
    own = {k: grow * abs(rows[16][k] - rows[12][k]) for k in ("test", "mse")}

    def test_of(q: float, m: float) -> float:
        return generalisation_error(q=q, m=m, Q0n=p.Q0n, step=0.2)

    q, m, h = rows[16]["q"], rows[16]["m"], 1e-5
    t_q = (test_of(q + h, m) - test_of(q - h, m)) / (2 * h)
    t_m = (test_of(q, m + h) - test_of(q, m - h)) / (2 * h)
    term_q, term_m = t_q * (q - rows[12]["q"]), t_m * (m - rows[12]["m"])
    assert term_q * term_m < 0  # opposite signs
    assert abs(rows[16]["test"] - rows[12]["test"]) < 0.3 * max(abs(term_q), abs(term_m))
    assert errors["test"] > 4 * own["test"]
    assert errors["test"] == pytest.approx(grow * max(abs(term_q), abs(term_m)), rel=1e-3)
    assert errors["mse"] > 3 * own["mse"]


@pytest.mark.parametrize("model", [(0.2, 0.5, 1.0, 1.0), (0.8, 0.5, 1.0, 1.0),
                                   (0.5, 0.05, 1.0, 1.0), (0.5, 1.0, 1.0, 1.0),
                                   (0.5, 0.5, 2.0, 1.0), (0.5, 0.5, 1.0, 0.5)])
def test_fixed_alpha_models_outside_the_checked_range_are_refused(model):
    """docs/erm.md "The fixed-alpha bars away from kappa0 = Delta = 0.5": the lambda = 0 bars
    were checked at the corners of kappa0 in [0.3, 0.7], Delta in [0.1, 0.5], beta = beta0 = 1
    and at the centre; outside, ridgeless_se refuses before any solve, naming kappa0 and the
    command line's options."""
    kappa0, Delta, beta, beta0 = model
    assert not R.fixed_alpha_checked(kappa0=kappa0, Delta=Delta, beta=beta, beta0=beta0)
    a_i = R.alpha_interp(kappa0=kappa0, Delta=Delta)
    with pytest.raises(InputError, match="kappa0") as e:
        R.ridgeless_se(alpha=3 * a_i, kappa0=kappa0, Delta=Delta, beta=beta, beta0=beta0)
    assert "kappa0 in [0.3, 0.7], Delta in [0.1, 0.5]" in str(e.value)
    assert "--kappa0" in str(e.value) and "\n" not in str(e.value)
    for k, d in ((0.5, 0.5), (0.3, 0.1), (0.3, 0.5), (0.7, 0.1), (0.7, 0.5)):
        assert R.fixed_alpha_checked(kappa0=k, Delta=d), (k, d)


def test_fixed_alpha_rank_bar_is_not_shrunk_by_cancelling_terms():
    """The rank, a function of delta = sqrt(q_hat) / m_hat: at kappa0 = 0.7, Delta = 0.1, alpha =
    0.2959 (1.6 alpha_interp, Sigma = 27.7) the terms of q_hat and m_hat cancel from outer order
    12 to 16 (+7.4e-4 and -6.4e-4; the rank moved 1.0e-4), and the rank then moved 8.5e-5 more to
    order 20: the own-difference bar (3.1e-4) is 7 times smaller than the served one (2.2e-3),
    which is the larger term x 3."""
    model = (0.7, 0.1, 0.2959)
    p, rows = _fixed_alpha_rows(model)
    errors = _served_fixed_alpha_errors(p, rows)
    grow = S.split_factor(16, 12)
    own = grow * abs(rows[16]["rank"] - rows[12]["rank"])

    def rank_of(qh: float, mh: float) -> float:
        return spectral_integrals(kappa0=p.kappa0, delta=math.sqrt(qh) / mh, eps=0.0).rank

    qh, mh = rows[16]["q_hat"], rows[16]["m_hat"]
    r_q = (rank_of(qh * (1 + 1e-4), mh) - rank_of(qh * (1 - 1e-4), mh)) / (2e-4 * qh)
    r_m = (rank_of(qh, mh * (1 + 1e-4)) - rank_of(qh, mh * (1 - 1e-4))) / (2e-4 * mh)
    term_q, term_m = r_q * (qh - rows[12]["q_hat"]), r_m * (mh - rows[12]["m_hat"])
    assert term_q * term_m < 0
    assert abs(rows[16]["rank"] - rows[12]["rank"]) < 0.2 * max(abs(term_q), abs(term_m))
    assert errors["rank"] > 5 * own
    assert abs(rows[20]["rank"] - rows[16]["rank"]) < errors["rank"]


def test_split_order_sequence_refuses_bad_orders():
    for orders in ((), (16, 12), (12, 12), (1, 4)):
        with pytest.raises(InputError, match="orders"):
            R.split_order_sequence(alpha=0.3, kappa0=0.5, Delta=0.5, orders=orders)


@pytest.mark.slow
def test_split_order_sequence_starts_with_the_served_pair():
    """:func:`R.split_order_sequence` (the check of the fixed-alpha bars at higher orders) at
    outer orders 3, 4 reproduces :func:`R.ridgeless_se`'s pair at 4/3 (rule "split"): the same
    fixed point (to the solver's tolerance) and its bars from the two entries (~1 min)."""
    kw = dict(alpha=0.3134, kappa0=0.3, Delta=0.1)
    seq = R.split_order_sequence(**kw, orders=(3, 4))
    pt = R.ridgeless_se(**kw, rule="split", order=4, order_lo=3)
    fp = pt.fixed_point
    assert [s["order"] for s in seq] == [3, 4] and seq[-1]["residual"] < 1e-8
    for k in ("q", "m", "sigma", "train", "test", "rank"):
        assert seq[-1][k] == pytest.approx(getattr(fp, k), rel=1e-6), k
    assert seq[-1]["fitted"] == pytest.approx(pt.fitted, rel=1e-6)
    six = ("q", "m", "sigma", "q_hat", "m_hat", "sigma_hat")
    p = S.ERMParams(alpha=kw["alpha"], kappa0=0.3, Delta=0.1, lam=0.0)
    d = [{k: s[k] for k in ("train", "test", "mse", "rank")} for s in seq]
    errors = R._fixed_alpha_errors(p, tuple(seq[1][k] for k in six),
                                   tuple(seq[0][k] for k in six), d[1], d[0],
                                   S.split_factor(4, 3), 4)
    for k in ("q", "test", "mse", "rank"):
        assert errors[k] == pytest.approx(fp.errors[k], rel=1e-3), k
