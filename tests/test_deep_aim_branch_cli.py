"""``se --model aim --layers 2 --mmse1 V``: the deep AIM SE branch point with alpha as an output
through the command line (numerics.deep_aim_se.branch_point; THEORY 1.6, docs/deep_aim.md
section 4, "The branch with alpha as an output"). Fast: the options reach ``branch_point`` and
its result is what is printed (a stand-in result). Slow (the real point, 2^5 x 8, c = 1): an
independent ``branch_point`` call gives the printed alpha, the forward prior map at the printed
q_hat_l gives back mmse_l, and ``fixed_point`` at the printed alpha from the uninformed start
reaches mmse_1 = V within its bar. Bad input: tests/test_bad_input.py (deep-mmse1-*)."""

from __future__ import annotations

import json

import pytest
from aim_sym.numerics import deep_aim_se as das

#: the smallest point set (2^5 x 8) at c = 1 (no line rule: ~4 s per point)
ARGS = ["se", "--model", "aim", "--layers", "2", "--rho", "0.5,0.5", "--skip", "1",
        "--points", "5", "--mmse1", "0.05"]


def test_mmse1_options_reach_branch_point_and_are_printed(run_cli, monkeypatch, tmp_path):
    """The options reach ``branch_point`` (model, v1, points, 8 scrambles, seed 0) and its
    result is what is printed: alpha +- bar, alpha_PR, alpha - alpha_PR, mmse_1 exact, mmse_2 +-
    bar, phi, e_gen and the Jacobian eigenvalues (a stand-in result: the wiring only)."""
    fake = {"alpha": 0.3567, "alpha_error": 2.2e-3, "alpha_PR": 0.375,
            "alpha_minus_PR": 0.3567 - 0.375, "perfect_recovery": False, "stable": True,
            "jacobian_eigenvalues": [0.58, complex(0.9, 0.1)], "phi": -1.38, "phi_error": 0.06,
            "e_gen": 0.0079, "e_gen_error": 4e-4,
            "layers": [{"mmse": 0.05, "mmse_error": 0.0, "q_hat": 13.7, "rho": 0.5},
                       {"mmse": 0.00546, "mmse_error": 6.8e-4, "q_hat": 136.2, "rho": 0.5}]}
    calls = []

    def stand_in(model, **kw):
        calls.append((model, kw))
        return dict(fake)

    monkeypatch.setattr(das, "branch_point", stand_in)
    rc, out, err = run_cli(ARGS)
    assert rc == 0, err
    assert "[0/1] branch point at mmse_1 = 0.05" in err and "[1/1] done" in err
    (model, kw), = calls
    assert (model.skip, model.rho1, model.rho2, model.beta, model.design) == (
        1.0, 0.5, 0.5, 1.0, "shared")
    assert kw == {"v1": 0.05, "m": 5, "scrambles": 8, "seed": 0}
    assert "mmse_1=0.05 (alpha an output; alpha_PR = 0.375)" in out
    assert "alpha = 0.3567 +- 2.2e-03, alpha - alpha_PR = -0.0183 +- 2.2e-03" in out
    assert "layer 1: mmse = 0.05 (exact)" in out and "layer 2: mmse = 0.00546 +- 6.8e-04" in out
    assert "phi = -1.38 +- 6.0e-02, e_gen = 0.0079 +- 4.0e-04" in out
    assert "|Jacobian eigenvalues| = 0.58, 0.9055, stable = True" in out
    rc, out, err = run_cli([*ARGS, "--skip", "0.5", "--json"])
    assert rc == 0, err
    assert "expected cost at skip 0.5 < 1" in err and calls[-1][0].skip == 0.5
    o = json.loads(out)
    assert (o["mmse1"], o["alpha"], o["alpha_error"]) == (0.05, 0.3567, 2.2e-3)
    assert o["fixed_points"][0]["jacobian_eigenvalues"] == [0.58, [0.9, 0.1]]
    path = tmp_path / "branch.json"
    rc, out, err = run_cli([*ARGS, "--out", str(path)])
    assert rc == 0, err
    stored = json.loads(path.read_text())
    assert stored["complete"] and stored["alpha"] == 0.3567
    assert stored["options"]["mmse1"] == 0.05 and stored["options"]["points"] == 5


@pytest.mark.slow
def test_mmse1_alpha_is_where_fixed_point_has_that_mmse1(run_cli):
    """The real point (2^5 x 8, seed 0, c = 1): an independent ``branch_point`` call gives the
    printed alpha; the forward prior map at the printed q_hat_l gives back mmse_l (the route
    inverts that map); ``fixed_point`` at the printed alpha, same points, from the uninformed
    start, reaches mmse_1 = 0.05 within its bar and mmse_2 within the summed bars (~50 s on shared
    cores)."""
    rc, out, err = run_cli([*ARGS, "--json"])
    assert rc == 0, err
    o = json.loads(out)
    f, = o["fixed_points"]
    model = das.DeepAimSE(skip=1.0, rho1=0.5, rho2=0.5)
    assert das.branch_point(model, v1=0.05, m=5, e_gen=False)["alpha"] == f["alpha"] == o["alpha"]
    assert o["alpha_PR"] == das.perfect_recovery_alpha(model)
    assert f["layers"][0]["mmse"] == 0.05 and f["layers"][0]["mmse_error"] == 0.0
    assert f["phi"] is not None and f["e_gen_error"] > 0
    # V_l = mmse_rho(1/q_hat_l) by the forward prior map; q_hat_l = 2 alpha E_l with alpha the
    # geometric mean of alpha_1, alpha_2, so each q_hat_l is off the inverse by at most the
    # root's share of the bar, |log(alpha_1/alpha_2)|/2 <= alpha_root_error / alpha, and
    # |d mmse / d log q_hat| <= mmse
    rel = f["alpha_root_error"] / f["alpha"]
    for L in f["layers"]:
        assert abs(das._prior_step(L["q_hat"], L["rho"]) - L["mmse"]) <= L["mmse"] * rel + 1e-12
    fp = das.fixed_point(model, alpha=f["alpha"], v_init=(1.0, 1.0), m=5, seed=0,
                         cross_term=False)
    a, b = fp["layers"], f["layers"]
    assert not fp["perfect_recovery"]
    assert abs(a[0]["mmse"] - 0.05) <= a[0]["mmse_error"]
    assert abs(a[1]["mmse"] - b[1]["mmse"]) <= a[1]["mmse_error"] + b[1]["mmse_error"]


def test_mmse1_no_root_exits_3_with_the_last_iterate(run_cli, monkeypatch):
    """No sign change of log(alpha_1/alpha_2) in the V2 bracket: exit 3, the bracket named."""
    from aim_sym.numerics.records import ConvergenceError

    def no_root(model, **kw):
        raise ConvergenceError("deep AIM branch: no sign change", last_iterate=[0.05, 1e-4, 0.02],
                               residual=[0.1, 0.2])

    monkeypatch.setattr(das, "branch_point", no_root)
    rc, out, err = run_cli(ARGS)
    assert rc == 3 and "last iterate [0.05, 0.0001, 0.02]" in err and out == ""


def test_json_sanitiser_writes_complex_eigenvalues_as_pairs():
    """cli_common._finite (used by every --json and --out): a complex number with imaginary part
    0 becomes its real part, any other [re, im]; numpy complex scalars alike (deep AIM's
    ``fixed_point`` and ``branch_point`` return eigenvalues of a non-symmetric 2 x 2 map)."""
    import numpy as np

    from aim_sym.cli_common import _finite

    eig = np.linalg.eigvals(np.array([[0.5, -0.4], [0.4, 0.5]]))
    assert _finite(eig.tolist()) == [[0.5, 0.4], [0.5, -0.4]]
    assert _finite([np.complex128(0.25 + 0j), complex(float("nan"), 1.0)]) == [0.25, [None, 1.0]]
    json.dumps(_finite({"e": list(eig)}))
