"""Sweeps: one resumable engine (a state file per point, keyed by every parameter), tidy CSV,
failed points retried, damaged state named; the Dask path is the same code; the CLI refuses bad
input before computing and exits 3 when points failed."""

import csv
import json
import math
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from aim_sym.numerics.records import ConvergenceError, InputError

from aim_sym import sweep as sw
from aim_sym.sweep import MAX_POINTS, SweepStateError, grid, point_key, run_sweep, state_folder, task_identity
from aim_sym.tables import write_csv

CALLS: list = []


def square(p):
    CALLS.append(p["x"])
    if p["x"] == 3 and not os.environ.get("AIM_SYM_TEST_FIXED"):
        raise ValueError("bad point")
    return {"y": p["x"] ** 2, "error": 0.0, "method": "exact"}


def scaled(p):
    CALLS.append((p["beta"], p["x"]))
    return {"y": p["x"] * p["beta"], "y_error": 0.0, "method": "exact"}


def state_file(task, out, point):
    return os.path.join(state_folder(out), point_key({**task_identity(task), **point}) + ".json")


def table(path):
    with open(path) as fh:
        return list(csv.DictReader(fh))


def test_sweep_resumes_and_retries_failures(tmp_path, monkeypatch):
    CALLS.clear()
    out = str(tmp_path / "s.csv")
    rows = run_sweep(square, grid(x=[1, 2, 3]), out=out, workers=1)
    assert [r["status"] for r in rows][:2] == ["converged", "converged"]
    assert rows[2]["status"] == "failed: ValueError: bad point"
    assert CALLS == [1, 2, 3]
    # interrupted sweep: delete one stored point, add a new one; the failed point is retried
    os.remove(state_file(square, out, {"x": 1}))
    CALLS.clear()
    monkeypatch.setenv("AIM_SYM_TEST_FIXED", "1")
    progress = []
    rows = run_sweep(square, grid(x=[1, 2, 3, 4]), out=out, workers=1,
                     progress=lambda d, t, m: progress.append((d, t)))
    assert sorted(CALLS) == [1, 3, 4]
    assert progress == [(1, 4), (2, 4), (3, 4), (4, 4)]
    assert [r["status"] for r in rows] == ["converged"] * 4
    write_csv(out, rows)
    t = table(out)
    assert [int(r["x"]) for r in t] == [1, 2, 3, 4] and t[3]["y"] == "16"
    assert "traceback" not in t[0]
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".tmp-")]


def test_resume_with_another_parameter_keeps_points_apart(tmp_path):
    CALLS.clear()
    out = str(tmp_path / "b.csv")
    rows = run_sweep(scaled, grid(beta=[1.0], x=[1.0, 2.0]), out=out, workers=1)
    assert [r["y"] for r in rows] == [1.0, 2.0]
    rows = run_sweep(scaled, grid(beta=[2.0], x=[1.0, 2.0]), out=out, workers=1)
    assert [r["y"] for r in rows] == [2.0, 4.0] and CALLS[2:] == [(2.0, 1.0), (2.0, 2.0)]
    write_csv(out, rows)
    t = table(out)
    assert [(float(r["beta"]), float(r["y"])) for r in t] == [(2.0, 2.0), (2.0, 4.0)]
    CALLS.clear()
    rows = run_sweep(scaled, grid(beta=[1.0, 2.0], x=[2.0]), out=out, workers=1)
    assert CALLS == [] and [r["y"] for r in rows] == [2.0, 4.0]


def test_stored_file_for_other_parameters_is_recomputed(tmp_path):
    CALLS.clear()
    out = str(tmp_path / "m.csv")
    point = {"beta": 3.0, "x": 1.0}
    f = state_file(scaled, out, point)
    os.makedirs(os.path.dirname(f))
    wrong = {"point": {**task_identity(scaled), "beta": 1.0, "x": 1.0},
             "row": {"beta": 1.0, "x": 1.0, "y": 1.0, "status": "converged"}}
    with open(f, "w") as fh:
        json.dump(wrong, fh)
    rows = run_sweep(scaled, [point], out=out, workers=1)
    assert rows[0]["y"] == 3.0 and CALLS == [(3.0, 1.0)]
    assert json.load(open(f))["point"]["beta"] == 3.0


@pytest.mark.parametrize("content,why", [("", "empty"), ("{not json", "invalid JSON"),
                                         ("[1, 2]", "not an object")])
def test_damaged_state_file_is_named(tmp_path, content, why):
    out = str(tmp_path / "d.csv")
    run_sweep(scaled, grid(beta=[1.0], x=[1.0, 2.0]), out=out, workers=1)
    f = state_file(scaled, out, {"beta": 1.0, "x": 2.0})
    with open(f, "w") as fh:
        fh.write(content)
    with pytest.raises(SweepStateError) as e:
        run_sweep(scaled, grid(beta=[1.0], x=[1.0, 2.0]), out=out, workers=1)
    msg = str(e.value)
    assert f in msg and why in msg and "delete it" in msg and "\n" not in msg
    assert isinstance(e.value, InputError)


def test_grid_bound_and_task_identity():
    with pytest.raises(InputError, match=f"at most {MAX_POINTS} points; got 1000000"):
        grid(a=list(range(1000)), b=list(range(1000)))
    assert grid(a=[1, 2], b=["x"]) == [{"a": 1, "b": "x"}, {"a": 2, "b": "x"}]
    assert task_identity(sw.skip_point) == {"task": "skip_point", "task_version": "3"}


def lattice_workers(p):
    from aim_sym.numerics import smi_sequential
    return {"y": smi_sequential.DEFAULT_WORKERS}


def test_pool_workers_run_the_lattice_in_one_process(tmp_path):
    # a sweep over 2 processes fills 2 cores: each runs the sequential lattice with 1 process
    # (not 2 x 2); in this process the default (None: min(2, cpu_count)) is untouched
    rows = run_sweep(lattice_workers, grid(x=[1, 2]), out=str(tmp_path / "w.csv"), workers=2)
    assert [r["y"] for r in rows] == [1, 1]
    from aim_sym.numerics import smi_sequential
    assert smi_sequential.DEFAULT_WORKERS is None


def test_local_processes_match_in_process(tmp_path):
    pts = grid(beta=[1.0, 2.0], x=[1.0, 2.0, 3.0])
    a = run_sweep(scaled, pts, out=str(tmp_path / "p.csv"), workers=2)
    b = run_sweep(scaled, pts, out=str(tmp_path / "q.csv"), workers=1)
    assert a == b and [r["y"] for r in a] == [1.0, 2.0, 3.0, 2.0, 4.0, 6.0]


SLEEPER = """
import sys, time
from aim_sym.sweep import run_sweep

def sleepy(p):
    time.sleep(60)
    return {"y": 1.0}

if __name__ == "__main__":
    run_sweep(sleepy, [{"x": i} for i in range(4)], out=sys.argv[1], workers=2)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux")
def test_workers_do_not_outlive_a_killed_sweep(tmp_path):
    psutil = pytest.importorskip("psutil")
    script = tmp_path / "sleeper.py"
    script.write_text(textwrap.dedent(SLEEPER))
    proc = subprocess.Popen([sys.executable, str(script), str(tmp_path / "k.csv")])
    try:
        parent = psutil.Process(proc.pid)
        deadline = time.monotonic() + 6
        kids = []
        while time.monotonic() < deadline and len(kids) < 2:
            time.sleep(0.1)
            kids = [k for k in parent.children(recursive=True) if k.is_running()]
        assert len(kids) >= 2, "the sweep did not start its workers"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()

    def alive(k):
        try:
            return k.is_running() and k.status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    deadline = time.monotonic() + 3
    while time.monotonic() < deadline and any(alive(k) for k in kids):
        time.sleep(0.1)
    left = [k.pid for k in kids if alive(k)]
    for pid in left:  # do not leave them behind even when the test fails
        os.kill(pid, signal.SIGKILL)
    assert not left, f"worker processes {left} outlived the killed sweep"


def test_aim_sweep_on_a_local_dask_cluster(tmp_path):
    from distributed import LocalCluster

    out = str(tmp_path / "d.csv")
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, protocol="tcp://",
                      host="127.0.0.1", dashboard_address=None) as lc:
        p = subprocess.run([sys.executable, "-m", "aim_sym", "sweep", "grid", "--channel",
                            "softmax", "--alphas", "0.0132445882352941", "--out", out,
                            "--scheduler", lc.scheduler_address], capture_output=True, text=True,
                           timeout=300)
    assert p.returncode == 0, p.stderr
    row = table(out)[0]
    assert row["status"] == "converged"
    assert abs(float(row["mmse"]) - 0.941191595679965) < 1e-12


# ----------------------------------------------------------------------------- CLI
def run_cli(args, capsys, monkeypatch):
    from aim_sym.cli import main

    monkeypatch.setattr(sys, "argv", ["aim-sym", *args])
    code = 0
    try:
        main()
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_grid_refuses_an_unknown_channel(tmp_path, capsys, monkeypatch):
    out = tmp_path / "s.csv"
    code, _, err = run_cli(["sweep", "grid", "--channel", "bogus", "--alphas", "0.1", "--out",
                            str(out)], capsys, monkeypatch)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "--channel" in err and "softmax" in err and "hardmax" in err
    assert not out.exists() and not os.path.exists(state_folder(str(out)))


@pytest.mark.parametrize("args,option", [
    (["--channel", "hardmax", "--tokens", "3"], "--tokens"),
    (["--channel", "hardmax", "--betas", "2"], "--betas"),
    (["--channel", "noisy-hardmax"], "--epsilon"),
    (["--channel", "linear-noisy", "--delta-out", "inf"], "--delta-out"),
    (["--channel", "softmax", "--betas", "nan"], "--betas"),
    (["--rhos", "inf"], "--rhos"),
    (["--workers", "257"], "--workers"),
    (["--model", "smi", "--skips", "0"], "--skips"),
])
def test_cli_grid_checks_before_computing(tmp_path, capsys, monkeypatch, args, option):
    code, _, err = run_cli(["sweep", "grid", "--alphas", "0.1", "--out", str(tmp_path / "s.csv"),
                            *args], capsys, monkeypatch)
    assert code == 2 and len(err.strip().splitlines()) == 1 and option in err


def fake_thresholds(calls):
    def fake(*, layers, tokens, skip, beta, sequential, **kw):
        calls.append((skip, beta))
        if beta == 3.0:
            raise ConvergenceError("not bracketed", last_iterate=0.9, residual=0.1)
        return [dict(layer=1, kind="weak", value=6.0 * beta + skip, error=1e-8, method="m"),
                dict(layer=2, kind="weak", value=0.2 * skip * beta, error=1e-9, method="m")]
    return fake


def test_cli_skip_resume_with_another_beta_recomputes(tmp_path, capsys, monkeypatch):
    from aim_sym.numerics import smi

    calls = []
    monkeypatch.setattr(smi, "weak_thresholds", fake_thresholds(calls))
    out = str(tmp_path / "phase.csv")
    base = ["sweep", "skip", "--skips", "2,1", "--no-sequential", "--out", out, "--json"]
    code, stdout, _ = run_cli(base, capsys, monkeypatch)
    assert code == 0 and calls == [(1.0, 1.0), (2.0, 1.0)]
    res = json.loads(stdout)
    assert set(res) == {"out", "plot", "rows"} and [r["skip"] for r in res["rows"]] == [1.0, 2.0]
    code, stdout, _ = run_cli(base + ["--beta", "2"], capsys, monkeypatch)
    assert code == 0 and calls[2:] == [(1.0, 2.0), (2.0, 2.0)]
    t = table(out)
    assert list(t[0]) == list(sw.SKIP_COLUMNS)
    assert [float(r["weak_layer2"]) for r in t] == [0.4, 0.8]
    assert t[0]["sequential_layer1"] == "" and t[0]["status"] == "skipped sequential"
    # back to beta = 1: nothing recomputed, the old values come back
    code, stdout, _ = run_cli(base, capsys, monkeypatch)
    assert len(calls) == 4 and [r["weak_layer2"] for r in json.loads(stdout)["rows"]] == [0.2, 0.4]


def test_cli_skip_failed_points_exit_3_and_are_retried(tmp_path, capsys, monkeypatch):
    from aim_sym.numerics import smi

    calls = []
    monkeypatch.setattr(smi, "weak_thresholds", fake_thresholds(calls))
    out = str(tmp_path / "phase.csv")
    args = ["sweep", "skip", "--skips", "1", "--no-sequential", "--out", out, "--beta", "3"]
    code, _, err = run_cli(args, capsys, monkeypatch)
    assert code == 3 and "1 of 1 points failed" in err
    assert table(out)[0]["status"].startswith("failed: not bracketed")
    run_cli(args, capsys, monkeypatch)
    assert calls == [(1.0, 3.0), (1.0, 3.0)]


def test_sweep_skip_real_weak_thresholds(tmp_path):
    rows = sw.sweep_skip(skips=[1.0], out=str(tmp_path / "r.csv"), sequential=False)
    assert abs(rows[0]["weak_layer2"] - 0.18547784) < 1e-7 and rows[0]["weak_layer2_error"] < 1e-8
    assert abs(rows[0]["weak_layer1"] - 6.1569366) < 1e-6
    assert math.isnan(rows[0]["sequential_layer1"]) and rows[0]["status"] == "skipped sequential"


def test_sweep_skip_three_layers_and_bad_input(tmp_path, monkeypatch):
    from aim_sym.numerics import smi_weak

    def fake(*, layers, tokens, skip, beta):
        return [dict(layer=l, kind="weak", value=l * skip, error=1e-4, method="m")
                for l in range(1, layers + 1)]

    monkeypatch.setattr(smi_weak, "weak_thresholds", fake)
    out = str(tmp_path / "phase3.csv")
    rows = sw.sweep_skip(skips=[1.5, 0.5], layers=3, out=out)
    assert [list(r) for r in rows] == [list(sw.skip_columns(3))] * 2
    write_csv(out, rows)
    header = open(out).readline().strip().split(",")
    assert header == list(sw.skip_columns(3)) and "sequential_layer1" not in header
    assert [r["weak_layer3"] for r in rows] == [1.5, 4.5]
    assert rows[0]["status"].startswith("ok (weak only")
    with pytest.raises(InputError, match="layers"):
        sw.sweep_skip(skips=[1.0], layers=7, out=out)
    with pytest.raises(InputError, match="skip"):
        sw.sweep_skip(skips=[1.0, -1.0], out=out)
    for skips, beta in (([0.4], 1.0), ([5.0], 1.0), ([1.0], 3.0)):   # L = 3: validated range
        with pytest.raises(InputError, match="beta" if beta == 3.0 else "skip must be in"):
            sw.sweep_skip(skips=skips, layers=3, beta=beta, out=out)


def test_interrupted_skip_sweep_resumes(tmp_path, monkeypatch):
    """Moved from tests/test_smi.py (test_sweep_resume_and_plot), on the new engine."""
    from aim_sym.numerics import smi

    from aim_sym import plots

    calls = []

    def fake(*, layers, tokens, skip, beta, sequential, **kw):
        calls.append(skip)
        if skip == 2.0 and len(calls) == 2:
            raise KeyboardInterrupt  # simulated interruption after the first point
        return [dict(layer=1, kind="weak", value=6.0 + skip, error=1e-8, method="m"),
                dict(layer=2, kind="weak", value=0.2 * skip, error=1e-9, method="m"),
                dict(layer=1, kind="sequential", value=0.7 * skip, error=1e-3, method="m",
                     q2=0.97)]

    monkeypatch.setattr(smi, "weak_thresholds", fake)
    out = str(tmp_path / "phase.csv")
    with pytest.raises(KeyboardInterrupt):
        sw.sweep_skip(skips=[1.0, 2.0], out=out)
    assert len(os.listdir(state_folder(out))) == 1 and not os.path.exists(out)
    rows = sw.sweep_skip(skips=[1.0, 2.0], out=out)
    assert calls == [1.0, 2.0, 2.0]          # the finished point was not recomputed
    assert [r["skip"] for r in rows] == [1.0, 2.0]
    assert rows[1]["sequential_layer1"] == 1.4 and rows[0]["status"] == "ok"
    write_csv(out, rows)
    lines = open(out).read().splitlines()
    assert lines[0].split(",") == list(sw.SKIP_COLUMNS) and len(lines) == 3
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".tmp-")]
    png = tmp_path / "phase.png"
    plots.plot_phase(rows, str(png))
    assert png.stat().st_size > 1000


# L = 3 weak thresholds of the retired Gauss-Hermite engine (numerics/smi_deep.py, inner orders
# 24, 28, 32; benchmarks/RESULTS.md, docs/smi_small_skip.md), at its floor c = 0.5 and at c = 1
L3_WEAK = {0.5: {1: (2.39755, 0.0020), 2: (7.2175, 0.014), 3: (0.22959, 5.7e-4)},
           1.0: {1: (5.1352, 0.0101), 2: (8.6945, 0.0127), 3: (0.207191, 2.9e-5)}}


@pytest.mark.slow
def test_sweep_skip_three_layers_keeps_the_earlier_numbers(tmp_path):
    """The L = 3 skip sweep on numerics.smi_weak (~1 min on an idle machine): within bars of the
    earlier engine."""
    rows = sw.sweep_skip(skips=sorted(L3_WEAK), layers=3, out=str(tmp_path / "l3.csv"))
    for row in rows:
        for layer, (v, e) in L3_WEAK[row["skip"]].items():
            got, err = row[f"weak_layer{layer}"], row[f"weak_layer{layer}_error"]
            assert abs(got - v) <= err + e, (row["skip"], layer, got, err, v, e)
            assert err < 0.01 * got


def test_cli_skip_digits_reach_the_sequential_threshold(tmp_path, capsys, monkeypatch):
    from aim_sym.numerics import smi

    seen = []

    def fake(*, layers, tokens, skip, beta, sequential, **kw):
        seen.append(kw.get("digits"))
        return [dict(layer=1, kind="sequential", value=0.7196, error=1e-5, method="m", q2=0.97)]

    monkeypatch.setattr(smi, "weak_thresholds", fake)
    out = str(tmp_path / "phase.csv")
    code, _, _ = run_cli(["sweep", "skip", "--skips", "1", "--digits", "6", "--out", out],
                         capsys, monkeypatch)
    assert code == 0 and seen == [6] and float(table(out)[0]["sequential_layer1"]) == 0.7196
    for extra, option in ((["--digits", "6", "--no-sequential"], "--digits"),
                          (["--digits", "0"], "--digits"),
                          (["--digits", "5", "--layers", "3"], "--digits")):
        code, _, err = run_cli(["sweep", "skip", "--skips", "1", "--out", out, *extra], capsys,
                               monkeypatch)
        assert code == 2 and len(err.strip().splitlines()) == 1 and option in err


def test_sweep_skip_deeper_layers_use_the_depth_kernel(tmp_path, monkeypatch):
    from aim_sym.numerics import smi_weak

    def fake(*, layers, tokens, skip, beta):
        return [dict(layer=l, kind="weak", value=l + skip, error=1e-4, method="m")
                for l in range(1, layers + 1)]

    monkeypatch.setattr(smi_weak, "weak_thresholds", fake)
    rows = sw.sweep_skip(skips=[2.0, 1.0], layers=5, out=str(tmp_path / "p5.csv"))
    assert [r["skip"] for r in rows] == [1.0, 2.0] and list(rows[0]) == list(sw.skip_columns(5))
    assert [r["weak_layer5"] for r in rows] == [6.0, 7.0]
    with pytest.raises(InputError, match="skip must be in \\[1, 4\\]"):   # L = 5's own range
        sw.sweep_skip(skips=[0.5], layers=5, out=str(tmp_path / "p5.csv"))
