"""Channel files whose events span more than 3 directions of h (issue 15; docs/polyhedral.md,
"Events of rank > 3"): threshold and check by the engine's cube rule, the SE by randomised QMC
over the model (tests/test_polyhedral_qmc_se.py)."""

import json
import math
import os

import pytest
import sympy as sp
from aim_sym.numerics import polyhedral_se as ps
from polyhedral_fixtures import FOUR, hardmax_t3

from aim_sym.channel_file import from_file
from aim_sym.channels import ChannelError, discrete, h_matrix
from aim_sym.models import AIM

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOP2 = os.path.join(ROOT, "examples", "channels", "polyhedral", "top2_t3.py")
#: hardmax at T = 3 (`aim-sym threshold weak --small-width --channel hardmax --tokens 3`, the
#: project's own route numerics/hardmax_se.py, 15 digits)
HARDMAX_T3 = 0.175392535447599


def orthant(K: int):
    """y = 1 iff K distinct entries of h (T = 3) are positive: independent half-spaces."""
    h = h_matrix(3)
    entries = [h[0, 0], h[0, 1], h[1, 1], h[0, 2], h[1, 2], h[2, 2]][:K]
    e = sp.Mul(*[sp.Heaviside(x) for x in entries])
    return discrete(name=f"orthant-{K}", tokens=3, likelihood={1: e, 0: 1 - e})


@pytest.mark.parametrize("K", [4, 6])
def test_orthant_threshold_against_its_closed_form(K):
    """At omega = 0 the K entries are independent: Z_1 = 2^-K, |grad Z_1|_C^2 =
    K 4^(1 - K) / (2 pi), E = |grad Z_1|_C^2 (1 / Z_1 + 1 / (1 - Z_1)), alpha = 1 / (2 E)."""
    p = 2.0 ** -K
    E = K * 4.0 ** (1 - K) / (2 * math.pi) * (1 / p + 1 / (1 - p))
    m = AIM(orthant(K))
    assert ps.event_rank(m.polyhedral) == K
    r = m.threshold("weak", small_width=True)
    assert abs(r.details["value_float"] - 1 / (2 * E)) <= r.error, (r.details, 1 / (2 * E))
    assert r.error < 1e-4 * r.details["value_float"]


@pytest.mark.slow
def test_hardmax_file_default_rule_against_the_hardmax_route():
    """The engine's default cube rule (8 x 2^13 points): within its bar, bar < 1e-4."""
    out = AIM(hardmax_t3()).polyhedral
    assert ps.event_rank(out) == 5
    est = ps.weak_threshold(out)
    assert abs(est.value - HARDMAX_T3) <= est.error and est.error < 1e-4, est


@pytest.mark.slow
def test_hardmax_file_served_threshold_and_top2_example():
    """The served rule (CUBE_RULE, 8 x 2^15) on hardmax and on the top-2 example (equal to
    hardmax at omega = 0 by h -> -h), ~30 s each."""
    r = AIM(hardmax_t3()).threshold("weak", small_width=True)
    assert abs(r.details["value_float"] - HARDMAX_T3) <= r.error and r.error < 5e-5, r
    t = AIM(from_file(TOP2, tokens=3)).threshold("weak", small_width=True)
    assert abs(t.details["value_float"] - HARDMAX_T3) <= t.error and t.error < 5e-5, t


@pytest.mark.slow
def test_top2_check_passes():
    rows = AIM(from_file(TOP2, tokens=3)).check()
    assert len(rows) == 6 and all(row["passed"] for row in rows), rows


def test_first_order_check_catches_a_wrong_gradient(monkeypatch):
    """The finite-difference row fails when g_out is off (dZ scaled by 1.5 in one outcome)."""
    out = AIM(orthant(4)).polyhedral
    u = [1.0, 0.5, -0.3, 0.2, 0.0, 0.0]
    good = ps.check_identities_first_order(out, omega=[[0.0] * 6], V=1.0, direction=u)
    assert all(r["passed"] for r in good), good
    z_out = ps.z_out

    def wrong(ch, **kw):
        o = z_out(ch, **kw)
        if o.dZ is not None:
            o.dZ[1] *= 1.5
        return o

    monkeypatch.setattr(ps, "z_out", wrong)
    bad = ps.check_identities_first_order(out, omega=[[0.0] * 6], V=1.0, direction=u)
    fd = [r for r in bad if r["name"].startswith("finite differences")]
    assert fd and not fd[0]["passed"], bad


def test_digits_refused_in_one_line(tmp_path, run_cli):
    f = tmp_path / "four.py"
    f.write_text(FOUR)
    rc, out, err = run_cli(["threshold", "weak", "--small-width", "--digits", "30",
                            "--channel-file", str(f), "--tokens", "3"])
    assert rc == 2 and err.count("\n") == 1 and "digits" in err, err


def _four_orthant_fixed_point(alpha: float, rho: float, n: int) -> float:
    """The SE fixed point of FOUR from its closed-form output side: Z_1 = prod_i Phi(t_i),
    t_i = omega_i / sqrt(c_i V), so E(q, V) = E_omega[Z_1 / (1 - Z_1) sum_i phi(t_i)^2 /
    (Phi(t_i)^2 V)] with t_i = sqrt(q / V) x_i, x_i iid N(0, 1) (four-dimensional Gauss-Hermite
    of order n); V = mmse_rho(1 / (2 alpha E(Q0 - V, V))) (THEORY 1.1) by Brent's method."""
    import numpy as np
    from aim_sym.numerics import wishart
    from scipy.optimize import brentq
    from scipy.special import log_ndtr

    x, w = np.polynomial.hermite_e.hermegauss(n)
    w = w / w.sum()

    def E(q, V):
        t = math.sqrt(q / V) * x
        lP = log_ndtr(t)
        r = np.exp(2 * (-t * t / 2 - 0.5 * math.log(2 * math.pi) - lP)) / V
        grid = np.ix_(range(n), range(n), range(n), range(n))
        L = sum(lP[g] for g in grid)
        S = sum(r[g] for g in grid)
        W = w[grid[0]] * w[grid[1]] * w[grid[2]] * w[grid[3]]
        den = -np.expm1(L)
        ok = den > 0
        return float(np.sum(np.where(ok, W * np.exp(L) * S / np.where(ok, den, 1.0), 0.0)))

    return brentq(lambda V: wishart.mmse(1 / (2 * alpha * E(1 + rho - V, V)), rho=rho) - V,
                  0.05, 0.995, xtol=1e-12)


@pytest.mark.slow
def test_cli_se_of_a_rank_four_file_against_its_closed_form(tmp_path, run_cli):
    """`se --channel-file` of a rank-4 event (randomised QMC over the model, numerics/
    polyhedral_qmc_se.py) lands on the fixed point of the closed-form output side within its
    bar (the two Gauss-Hermite orders of the reference agree to 1e-9)."""
    f = tmp_path / "four.py"
    f.write_text(FOUR)
    ref = _four_orthant_fixed_point(1.0, 0.5, 40)
    assert abs(ref - _four_orthant_fixed_point(1.0, 0.5, 56)) < 1e-9
    rc, out, err = run_cli(["se", "--channel-file", str(f), "--tokens", "3", "--rho", "0.5",
                            "--alpha", "1", "--json"])
    assert rc == 0, err
    o = json.loads(out)
    assert 0 < o["mmse"] < 1 and abs(o["mmse"] - ref) <= o["error"], (o["mmse"], o["error"], ref)


def test_cli_threshold_and_check_of_a_rank_four_file(tmp_path, run_cli):
    """y = 1 iff four independent entries of h are positive: alpha_bar_c in closed form."""
    f = tmp_path / "four.py"
    f.write_text(FOUR)
    rc, out, err = run_cli(["threshold", "weak", "--small-width", "--channel-file", str(f),
                            "--tokens", "3", "--json"])
    assert rc == 0, err
    o = json.loads(out)
    p = 1 / 16
    exact = 1 / (2 * 4 * 4.0 ** -3 / (2 * math.pi) * (1 / p + 1 / (1 - p)))
    assert abs(float(o["value"]) - exact) <= o["error"] + 10.0 ** -(o["digits"] - 1)
    rc, out, err = run_cli(["check", "--channel-file", str(f), "--tokens", "3"])
    assert rc == 0 and "all checks passed" in out and out.count("PASS") == 6, (out, err)


def test_rank_seven_event_at_four_tokens_is_refused():
    h = h_matrix(4)
    e = sp.Mul(*[sp.Heaviside(h[a, b]) for a, b in
                 ((0, 0), (0, 1), (1, 1), (0, 2), (1, 2), (2, 2), (0, 3))])
    with pytest.raises(ChannelError, match="spans 7 directions"):
        _ = AIM(discrete(name="seven", tokens=4, likelihood={1: e, 0: 1 - e})).polyhedral
