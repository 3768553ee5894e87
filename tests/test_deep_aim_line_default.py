"""Deep AIM at skip c < 1 (THEORY 1.6; docs/deep_aim.md section 4, "Inner rule at c < 1"): the line
inner rule is the default, the graded rule stays selectable, c >= 1 is unchanged, and the command
line keeps c < 1 with the API (one fixed point at its 2^9 x 8 points takes minutes)."""

from __future__ import annotations

import numpy as np
import pytest
from aim_sym.numerics import deep_aim_se as ds
from aim_sym.numerics.records import InputError

#: c = 0.5, rho = (0.5, 0.5), alpha = 0.3: the graded-rule row of docs/deep_aim.md section 5
#: ("The branch at c = 0.5"; 2^9 x 8 points, seed 0, cross-overlap term in the bars)
GRADED_ROW_ALPHA_03 = ((0.215, 0.019), (0.070, 0.011))


def _model(skip: float, **kw) -> ds.DeepAimSE:
    return ds.DeepAimSE(skip=skip, rho1=0.5, rho2=0.5, **kw)


def test_line_is_the_default_and_serves_small_v_at_small_skip():
    """At c = 0.5 the default rule is "line": it serves min(V1, V2) below GRADED_V_MIN (where
    "graded", still selectable, is refused) and gives exactly what inner="line" gives."""
    assert _model(0.5).inner == "line"
    v = (0.3, 0.5 * ds.GRADED_V_MIN)
    q1, q2 = 1.5 - v[0], 1.5 - v[1]
    got = ds.output_overlaps(_model(0.5), q1=q1, q2=q2, m=2, scrambles=2)
    ref = ds.output_overlaps(_model(0.5, inner="line"), q1=q1, q2=q2, m=2, scrambles=2)
    for key in ("E1", "E2"):
        assert got[key].value == ref[key].value and np.isfinite(got[key].value)
    with pytest.raises(InputError, match="inner"):
        ds.output_overlaps(_model(0.5, inner="graded"), q1=q1, q2=q2, m=2, scrambles=2)
    # above GRADED_V_MIN the graded rule still runs, and is a different rule (other nodes)
    g = ds.output_overlaps(_model(0.5, inner="graded"), q1=0.9, q2=0.9, m=2, scrambles=2)
    d = ds.output_overlaps(_model(0.5), q1=0.9, q2=0.9, m=2, scrambles=2)
    assert g["E2"].value != d["E2"].value


def test_skip_at_least_one_ignores_the_inner_rule():
    """c >= 1 (mu never vanishes): one group, the trapezoid in t, whatever ``inner`` says."""
    for skip in (1.0, 2.0):
        a = ds.output_overlaps(_model(skip, inner="line"), q1=0.9, q2=1.1, m=2, scrambles=2)
        b = ds.output_overlaps(_model(skip, inner="graded"), q1=0.9, q2=1.1, m=2, scrambles=2)
        for key in ("E1", "E2", "psi_out"):
            assert a[key].value == b[key].value and a[key].error == b[key].error


@pytest.mark.parametrize("command", [
    ["se", "--model", "aim", "--layers", "2", "--rho", "0.5,0.5", "--skip", "-0.5", "--alpha",
     "0.3", "--json"],
    ["curve", "--model", "aim", "--layers", "2", "--rho", "0.5,0.5", "--skip", "-0.5", "--alphas",
     "0.1:0.3:3"],
])
def test_command_line_refuses_a_negative_skip(run_cli, command):
    """se/curve --model aim --layers 2 serve c < 1 since 2026-11-26 (line rule, minutes per fixed
    point: tests/test_deep_aim_cli_resume.py runs one); below 0: exit 2, one line naming --skip
    and its range [0, 1000]."""
    rc, out, err = run_cli(command)
    assert rc == 2 and out == ""
    assert len(err.strip().splitlines()) == 1
    assert "--skip" in err and "[0, 1000]" in err


def test_other_two_layer_commands_do_not_point_to_the_api(run_cli):
    """check and the noisy se refuse c < 1 without naming the noiseless SE's API route."""
    deep = ["--model", "aim", "--layers", "2", "--skip", "0.5"]
    for args in (["check", *deep], ["se", *deep, "--alpha", "0.1", "--noise", "0.1"]):
        rc, _, err = run_cli(args)
        assert rc == 2 and "--skip" in err and "[1, 1000]" in err, (args, err)
        assert "DeepAimSE" not in err and len(err.strip().splitlines()) == 1


@pytest.mark.slow
def test_default_fixed_point_at_alpha_03_covers_the_graded_row():
    """c = 0.5, alpha = 0.3, default (line) rule, 2^6 x 8 points from near the branch: the fixed
    point lies within the combined bars of the graded rule's published row (another inner rule,
    2^9 x 8 points), and its two-step rule difference is below 1e-3, against 1.3e-2 on mmse_1
    for the graded rule there (docs/deep_aim.md section 4; ~30 s)."""
    fp = ds.fixed_point(_model(0.5), alpha=0.3, v_init=(0.2, 0.07), m=6, cross_term=False)
    assert fp["stable"] and not fp["perfect_recovery"]
    for layer, (ref, ref_err) in zip(fp["layers"], GRADED_ROW_ALPHA_03, strict=True):
        assert abs(layer["mmse"] - ref) <= layer["mmse_error"] + ref_err, (layer, ref, ref_err)
        assert layer["mmse_error"] < 0.5 * layer["mmse"]
    assert max(fp["rule_error"]) < 1e-3
