"""Sweeps: resumable, atomic per point, tidy CSV; the Dask path is the same code."""

import csv
import os
import subprocess
import sys

from aim_sym.numerics.sweep import grid, point_key, run_sweep


def square(p):
    if p["x"] == 3:
        raise ValueError("bad point")
    return {"y": p["x"] ** 2, "error": 0.0, "method": "exact"}


def test_sweep_resumes_and_records_failures(tmp_path):
    out = str(tmp_path / "s.csv")
    pts = grid(x=[1, 2, 3])
    rows = run_sweep(square, pts, out=out, workers=1)
    assert [r["status"] for r in rows][:2] == ["converged", "converged"]
    assert rows[2]["status"].startswith("failed: ValueError")
    # interrupted sweep: delete one stored point, add one new point; only those two run
    os.remove(os.path.join(out + ".partial", point_key({"x": 1}) + ".json"))
    calls = []

    def spy(p):
        calls.append(p["x"])
        return square(p)

    run_sweep(spy, grid(x=[1, 2, 3, 4]), out=out, workers=1)
    assert sorted(calls) == [1, 4]
    table = list(csv.DictReader(open(out)))
    assert [int(r["x"]) for r in table] == [1, 2, 3, 4] and table[3]["y"] == "16"


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
    row = list(csv.DictReader(open(out)))[0]
    assert row["status"] == "converged"
    assert abs(float(row["mmse"]) - 0.941191595679965) < 1e-12
