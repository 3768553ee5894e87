"""The lambda = 0 ERM SE along a grid of Sigma, alpha an output (issue 16; THEORY 3; docs/erm.md
"A curve in Sigma"): :meth:`aim_sym.erm.ERM.curve_at_sigma` and ``aim-sym curve --model erm
--lam 0 --sigmas start:stop:num``.

One fixed-Sigma point takes minutes at the command line's outer orders 16/12, so the default
tests run the plumbing (grid, warm starts, CSV after each Sigma, --resume, the figure) on a
stand-in for :func:`numerics.erm_ridgeless.ridgeless_at_sigma` whose values are a known
function of Sigma; the ``slow`` test solves two Sigma at low outer orders (4/3) and checks the
curve's rows against the single-point solver."""

from __future__ import annotations

import csv
import json
import math
import os

import numpy as np
import pytest
from aim_sym.numerics import erm_ridgeless as R
from aim_sym.numerics import erm_se as S
from aim_sym.numerics.records import ConvergenceError, InputError

from aim_sym import cli
from aim_sym.erm import ERM

KAPPA0, DELTA = 0.5, 0.5
A_I = 0.1534821028590800675735  # alpha_interp at kappa0 = Delta = 0.5 (docs/erm.md "Numbers")
CURVE = ["curve", "--model", "erm", "--tokens", "2", "--kappa0", "0.5", "--delta", "0.5",
         "--lam", "0"]


def _fake_point(sigma: float, start: tuple) -> R.RidgelessPoint:
    """A stand-in fixed point: alpha = alpha_interp (1 + 1/sqrt(Sigma)), q = 5 + 1/log Sigma,
    bars 1e-3 of each value; ``start`` is recorded in ``iterations`` (0: the default start)."""
    alpha = A_I * (1 + 1 / math.sqrt(sigma))
    q = 5 + 1 / math.log(sigma)
    vals = {"q": q, "m": 1.8, "sigma": sigma, "q_hat": 1.0, "m_hat": 0.5, "sigma_hat": 0.01,
            "train": 1 / sigma, "test": 0.5 - 0.1 / math.log(sigma), "mse": 1.5 + q - 3.6,
            "rank": 0.6}
    errors = {k: 1e-3 * abs(v) for k, v in vals.items()}
    errors.update(sigma=0.0, fitted=1e-3)
    fp = S.FixedPoint(**vals, iterations=0 if start is None else 1, residual=1e-10,
                      errors=errors, global_minimum=True)
    return R.RidgelessPoint(alpha=alpha, alpha_interp=A_I, fixed_point=fp, delta=2.0,
                            fitted=0.5, reliable=True, all_fixed_points=(fp,), rule="split",
                            given="sigma", alpha_error=1e-4, orders=(16, 12))


@pytest.fixture
def fake(monkeypatch):
    """Replace the solver; ``calls`` lists (sigma, start); ``fail_at`` makes that Sigma raise."""
    state = {"calls": [], "fail_at": None}

    def solver(*, sigma, start=None, **kw):
        state["calls"].append((sigma, start))
        if state["fail_at"] is not None and sigma == state["fail_at"]:
            raise ConvergenceError("stand-in: not converged", last_iterate=(1.0, 1.0, 0.2),
                                   residual=1.0)
        return _fake_point(sigma, start)

    monkeypatch.setattr(R, "ridgeless_at_sigma", solver)
    return state


def test_sigma_grid_is_log_spaced_with_exact_ends():
    from aim_sym.cli_erm import sigma_grid

    g = sigma_grid("25:1e4:8")
    assert len(g) == 8 and g[0] == 25.0 and g[-1] == 1e4
    want = [25.0 * 400.0 ** (k / 7) for k in range(8)]  # (1e4 / 25)^(k / 7)
    assert g == pytest.approx(want, rel=1e-13)
    assert sigma_grid("1e3:1e3:1") == [1e3]
    assert sigma_grid("25:1e4:3")[1] == 500.0  # printed as 500, not 499.99999999999994


def test_start_carries_the_previous_points_ratio_to_the_table():
    """At the table's own point the corrected start is the table's; a previous point 10 % above
    the table in q and 20 % further from alpha_interp moves the next start by the same factors."""
    a_i = R.alpha_interp(kappa0=KAPPA0, Delta=DELTA)
    t400 = R.at_sigma_start(400.0, kappa0=KAPPA0, Delta=DELTA)
    t1e4 = R.at_sigma_start(1e4, kappa0=KAPPA0, Delta=DELTA)
    assert t400 == pytest.approx((4.184 * 1.5, 1.4117 * 1.5, 1.2784 * a_i), rel=1e-12)
    same = R.at_sigma_start(1e4, kappa0=KAPPA0, Delta=DELTA, previous=(400.0, t400))
    assert same == pytest.approx(t1e4, rel=1e-12)
    moved = (1.1 * t400[0], t400[1], a_i + 1.2 * (t400[2] - a_i))
    q, m, a = R.at_sigma_start(1e4, kappa0=KAPPA0, Delta=DELTA, previous=(400.0, moved))
    assert q == pytest.approx(1.1 * t1e4[0], rel=1e-12) and m == pytest.approx(t1e4[1])
    assert a - a_i == pytest.approx(1.2 * (t1e4[2] - a_i), rel=1e-12)


def test_api_rows_warm_starts_and_done(fake):
    m = ERM(kappa0=KAPPA0, delta=DELTA, lam=0.0)
    seen = []
    t = m.curve_at_sigma(sigmas=[100.0, 1e3, 1e4], progress=lambda k, n, s: seen.append((k, n)),
                         on_row=lambda rows: seen.append(len(rows)))
    rows = [dict(r) for r in t]
    assert [r["sigma"] for r in rows] == [100.0, 1e3, 1e4]
    for r in rows:
        assert r["alpha"] == pytest.approx(A_I * (1 + r["sigma"] ** -0.5), rel=1e-14)
        assert r["alpha_error"] == 1e-4 and r["sigma_error"] == 0.0
        assert (r["order"], r["order_lo"]) == (16, 12) and r["alpha_interp"] == A_I
        for k in ("q", "m", "train", "test", "mse", "rank", "fitted"):
            assert math.isfinite(r[k]) and math.isfinite(r[f"{k}_error"]), k
    # every point given a start: the first the table's, the next ones corrected by the last point
    starts = [c[1] for c in fake["calls"]]
    assert starts[0] == pytest.approx(R.at_sigma_start(100.0, kappa0=KAPPA0, Delta=DELTA))
    prev = (100.0, (rows[0]["q"], rows[0]["m"], rows[0]["alpha"]))
    assert starts[1] == pytest.approx(R.at_sigma_start(1e3, kappa0=KAPPA0, Delta=DELTA,
                                                       previous=prev))
    assert seen.count(1) == 1 and seen.count(3) == 1  # on_row after each row
    # rows of an earlier run are reused while their Sigma match the grid in order
    fake["calls"].clear()
    t2 = m.curve_at_sigma(sigmas=[100.0, 1e3, 1e5], done=rows)
    assert [c[0] for c in fake["calls"]] == [1e5]
    assert [dict(r) for r in t2][:2] == rows[:2]


def test_api_refusals():
    m = ERM(kappa0=KAPPA0, delta=DELTA, lam=0.0)
    for bad in ([10.0, 100.0], [100.0, 2e6], [100.0, math.nan], []):
        with pytest.raises(InputError, match="sigmas"):
            m.curve_at_sigma(sigmas=bad)
    for kw in ({"lam": 0.01}, {"lam": 0.0, "tokens": 3}, {"lam": 0.0, "delta": 0.0},
               {"lam": 0.0, "kappa0": 0.3}, {"lam": 0.0, "delta": 0.1},
               {"lam": 0.0, "beta0": 2.0}):
        with pytest.raises(InputError, match="sigma"):
            ERM(**{"kappa0": KAPPA0, "delta": DELTA, **kw}).curve_at_sigma(sigmas=[100.0])


def _run(args: list[str], monkeypatch, capsys) -> tuple[int, str, str]:
    """``aim-sym ARGS`` through the real entry point (exit 2 / 3 as a user sees them)."""
    monkeypatch.setattr("sys.argv", ["aim-sym", *args])
    try:
        cli.main()
        code = 0
    except SystemExit as e:
        code = e.code or 0
    out = capsys.readouterr()
    return code, out.out, out.err


def _csv(path: str) -> list[dict]:
    with open(path) as fh:
        return list(csv.DictReader(fh))


def test_cli_csv_after_each_sigma_resume_and_plot(fake, tmp_path, monkeypatch, capsys):
    """A run that fails at the third Sigma (exit 3) leaves the first two in the CSV and the
    state file; --resume solves only the third; the figure is written; other options refuse
    to resume (exit 2, --resume)."""
    out, png = str(tmp_path / "c.csv"), str(tmp_path / "c.png")
    args = [*CURVE, "--sigmas", "25:2500:3", "--out", out, "--plot", png, "--json"]
    fake["fail_at"] = 2500.0
    code, _, err = _run(args, monkeypatch, capsys)
    assert code == 3 and "no convergence" in err, err
    rows = _csv(out)
    assert [float(r["sigma"]) for r in rows] == pytest.approx([25.0, 250.0], rel=1e-14)
    assert os.path.exists(out + ".partial.json") and not os.path.exists(png)
    fake["fail_at"], fake["calls"] = None, []
    code, out_text, err = _run([*args, "--resume"], monkeypatch, capsys)
    assert code == 0, err
    assert [c[0] for c in fake["calls"]] == [2500.0]
    o = json.loads(out_text)
    assert [r["sigma"] for r in o["rows"]] == pytest.approx([25.0, 250.0, 2500.0], rel=1e-14)
    assert o["alpha_interp"] == A_I and o["sigmas"][-1] == 2500.0
    rows = _csv(out)
    assert len(rows) == 3 and float(rows[2]["alpha"]) == pytest.approx(A_I * 1.02, rel=1e-14)
    for k in ("alpha_error", "test_error", "train_error", "q_error", "m_error"):
        assert k in rows[0]
    assert os.path.getsize(png) > 1000
    # a state file written for other options (here: other orders) is refused, not reused
    with open(out + ".partial.json") as fh:
        stored = json.load(fh)
    stored["options"]["orders"] = [20, 16]
    with open(out + ".partial.json", "w") as fh:
        json.dump(stored, fh)
    code, _, err = _run([*args, "--resume"], monkeypatch, capsys)
    assert code == 2 and "--resume" in err and "orders" in err, err


def test_cli_text_output_and_progress(fake, monkeypatch, capsys):
    code, out, err = _run([*CURVE, "--sigmas", "100:1e4:3"], monkeypatch, capsys)
    assert code == 0, err
    assert "alpha an output" in out and out.count("Sigma=") == 3
    assert "[3/3] Sigma = 10000" in err


@pytest.mark.slow
def test_curve_rows_are_the_single_point_fixed_points(monkeypatch):
    """Two Sigma (1e4, 1e5) at outer orders 4/3 (Jacobian from Gauss-Hermite 6; ~1 min): each
    row equals :func:`ridgeless_at_sigma` solved on its own from the table's start (the curve
    starts the second point from the first), alpha falls towards alpha_interp and the test
    error rises, and the fixed-alpha map at the row's alpha returns the row's Sigma."""
    low = {"order": 4, "order_lo": 3, "jacobian_order": 6}
    full = R.ridgeless_at_sigma
    monkeypatch.setattr(R, "ridgeless_at_sigma", lambda **kw: full(**{**kw, **low}))
    rows = [dict(r) for r in
            ERM(kappa0=KAPPA0, delta=DELTA, lam=0.0).curve_at_sigma(sigmas=[1e4, 1e5])]
    for r in rows:
        own = full(sigma=r["sigma"], kappa0=KAPPA0, Delta=DELTA, **low)
        for k in ("q", "m", "test", "train"):
            assert r[k] == pytest.approx(getattr(own.fixed_point, k), rel=1e-6), k
        assert r["alpha"] == pytest.approx(own.alpha, rel=1e-7)
        p = S.ERMParams(alpha=r["alpha"], kappa0=KAPPA0, Delta=DELTA, lam=0.0)
        F, _ = R._step(R._to_x(r["q"], r["m"], r["sigma"]), p, rule="split", order=4)
        assert float(np.max(np.abs(F))) < 1e-7
    assert A_I < rows[1]["alpha"] < rows[0]["alpha"]
    assert rows[0]["test"] < rows[1]["test"] < 0.5010982710
