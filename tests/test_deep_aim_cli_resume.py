"""The long runs of ``se``/``curve --model aim --layers 2`` at c < 1 (docs/deep_aim.md section 4,
"the command line at c < 1"; THEORY 1.6): --starts, --points, progress per start and iteration,
the atomically written --out file and --resume. The plumbing tests replace the fixed point by a
stand-in that records its calls (fast); the slow test runs the real engine at 2^5 x 8 points."""

from __future__ import annotations

import json

import pytest
from aim_sym.numerics import deep_aim_se as das
from aim_sym.numerics.records import ConvergenceError

DEEP = ["--model", "aim", "--layers", "2", "--rho", "0.5,0.5"]


def _stand_in(calls: list, fail_at: float | None = None):
    """A fixed point that records (alpha, v_init, m), reports one iteration and returns a point
    whose mmse depends on its inputs (so a reused result is told from a recomputed one)."""

    def fixed_point(model, *, alpha, v_init, m, progress=None, **kw):
        calls.append((alpha, tuple(v_init), m))
        if alpha == fail_at:
            raise ConvergenceError("stand-in stops", last_iterate=list(v_init), residual=1.0)
        if progress is not None:
            progress(1, list(v_init), 0.5)
        layers = [{"q": 1.5 - v, "q_error": 1e-3, "mmse": v, "mmse_error": 1e-3,
                   "q_hat": 1.0, "q_hat_error": 1e-3, "rho": 0.5}
                  for v in (0.5 * v_init[0] / (1 + alpha), 0.25 * v_init[1] / (1 + alpha))]
        return {"alpha": alpha, "layers": layers, "perfect_recovery": False, "stable": True,
                "phi": -alpha - v_init[0], "phi_error": 1e-3, "e_gen": 0.1, "e_gen_error": 1e-3,
                "e_gen_plugin": 0.1, "e_gen_plugin_error": 1e-3, "seconds": 0.0}

    return fixed_point


def test_se_writes_each_start_and_resume_skips_it(run_cli, tmp_path, monkeypatch):
    calls: list = []
    monkeypatch.setattr(das, "fixed_point", _stand_in(calls))
    out = tmp_path / "se.json"
    base = ["se", *DEEP, "--skip", "0.5", "--alpha", "0.3", "--points", "5", "--out", str(out),
            "--json"]
    rc, stdout, err = run_cli(base + ["--starts", "uninformed,informed"])
    assert rc == 0, err
    assert [c[1] for c in calls] == [(1.0, 1.0), (1e-3, 1e-3)] and {c[2] for c in calls} == {5}
    assert "expected cost at skip 0.5 < 1" in err
    assert "[0/2] uninformed: iteration 1" in err and "[1/2] informed: iteration 1" in err
    stored = json.loads(out.read_text())
    assert stored["complete"] and [f["start"] for f in stored["fixed_points"]] == [
        "uninformed", "informed"]
    assert json.loads(stdout)["fixed_points"] == stored["fixed_points"]

    # resume with one more start: only that one is computed; the others come from the file
    calls.clear()
    rc, stdout, err = run_cli(base + ["--starts", "uninformed,informed,layer1", "--resume"])
    assert rc == 0, err
    assert calls == [(0.3, (1e-3, 1.0), 5)]
    assert "start uninformed: resumed" in err and "start informed: resumed" in err
    fps = json.loads(stdout)["fixed_points"]
    assert [f["start"] for f in fps] == ["uninformed", "informed", "layer 1 informed"]
    assert fps[:2] == [{**f, "bayes_optimal": g["bayes_optimal"]}
                       for f, g in zip(stored["fixed_points"], fps[:2])]

    # a file written for other options is refused, naming --resume and what differs
    calls.clear()
    rc, _, err = run_cli([a if a != "0.3" else "0.31" for a in base] + ["--resume"])
    assert rc == 2 and "--resume" in err and "alpha 0.3 stored, 0.31 asked" in err
    assert len(err.strip().splitlines()) == 1 and calls == []


def test_se_writes_the_file_after_each_start(run_cli, tmp_path, monkeypatch):
    """A run stopped in its second start leaves the first in --out; --resume computes only the
    second."""
    calls: list = []
    inner = _stand_in(calls)

    def stops_informed(model, *, alpha, v_init, m, **kw):
        if v_init == (1e-3, 1e-3):
            raise ConvergenceError("stand-in stops", last_iterate=list(v_init), residual=1.0)
        return inner(model, alpha=alpha, v_init=v_init, m=m, **kw)

    monkeypatch.setattr(das, "fixed_point", stops_informed)
    out = tmp_path / "se.json"
    args = ["se", *DEEP, "--skip", "2", "--alpha", "0.3", "--points", "6", "--starts",
            "uninformed,informed", "--out", str(out)]
    rc, _, err = run_cli(args)
    assert rc == 3, err
    assert "expected cost" not in err          # c >= 1: no cost line
    stored = json.loads(out.read_text())
    assert not stored["complete"] and [f["start"] for f in stored["fixed_points"]] == [
        "uninformed"]
    monkeypatch.setattr(das, "fixed_point", inner)
    calls.clear()
    rc, _, err = run_cli(args + ["--resume"])
    assert rc == 0, err
    assert calls == [(0.3, (1e-3, 1e-3), 6)]
    assert json.loads(out.read_text())["complete"]


def test_curve_resume_reuses_the_finished_alphas(run_cli, tmp_path, monkeypatch):
    """curve --out F writes F and F.partial.json after each alpha; after a stop at the third
    alpha, --resume computes only it, warm-started from the stored second row."""
    calls: list = []
    monkeypatch.setattr(das, "fixed_point", _stand_in(calls, fail_at=0.3))
    out = tmp_path / "c.csv"
    args = ["curve", *DEEP, "--skip", "0.5", "--alphas", "0.1:0.3:3", "--points", "5", "--out",
            str(out)]
    rc, _, err = run_cli(args)
    assert rc == 3, err
    state = json.loads((tmp_path / "c.csv.partial.json").read_text())
    assert [r["alpha"] for r in state["rows"]] == [0.1, 0.2]
    assert len(out.read_text().strip().splitlines()) == 3          # header + two alphas
    second = tuple(x["mmse"] for x in state["rows"][1]["layers"])

    monkeypatch.setattr(das, "fixed_point", _stand_in(calls))
    calls.clear()
    rc, stdout, err = run_cli(args + ["--resume", "--json"])
    assert rc == 0, err
    assert calls == [(0.3, second, 5)]
    assert "resumed: stored row" in err and "[2/3] alpha = 0.3: iteration 1" in err
    rows = json.loads(stdout)["rows"]
    assert [r["alpha"] for r in rows] == [0.1, 0.2, 0.3]
    assert len(out.read_text().strip().splitlines()) == 4

    # other options (here --points): refused, the stored rows untouched
    calls.clear()
    rc, _, err = run_cli([a if a != "5" else "6" for a in args] + ["--resume"])
    assert rc == 2 and "--resume" in err and "points 5 stored, 6 asked" in err and calls == []


@pytest.mark.slow
def test_se_at_skip_one_half_matches_the_api(run_cli):
    """`se --skip 0.5 --starts uninformed --points 5` (line inner rule, ~1-2 min) returns the API's
    fixed_point at the same settings (same seed: identical), with 0 < mmse_l < 1 (V_l = Q0_l -
    q_l, q_l >= rho_l with shared tokens) and a bar below the value; and it agrees within the
    combined bars with the 2^9 x 8 point of docs/deep_aim.md section 4 (another point set):
    (0.2130 +- 0.0098, 0.0689 +- 0.0041)."""
    rc, out, err = run_cli(["se", *DEEP, "--skip", "0.5", "--alpha", "0.3", "--starts",
                            "uninformed", "--points", "5", "--json"])
    assert rc == 0, err
    fps = json.loads(out)["fixed_points"]
    assert len(fps) == 1 and fps[0]["start"] == "uninformed" and fps[0]["stable"]
    api = das.fixed_point(das.DeepAimSE(skip=0.5, rho1=0.5, rho2=0.5), alpha=0.3,
                          v_init=(1.0, 1.0), m=5)
    for a, b, ref in zip(fps[0]["layers"], api["layers"], ((0.2130, 0.0098), (0.0689, 0.0041))):
        assert a["mmse"] == b["mmse"] and a["mmse_error"] == b["mmse_error"]
        assert 0 < a["mmse_error"] < a["mmse"] < 1
        assert abs(a["mmse"] - ref[0]) <= a["mmse_error"] + ref[1]
    assert fps[0]["phi"] == api["phi"] and fps[0]["e_gen"] == api["e_gen"]
