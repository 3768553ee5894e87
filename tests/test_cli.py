"""The command line, end to end (python -m aim_sym in a subprocess)."""

import csv
import json
import os
import subprocess
import sys

import pytest


def run(*args, check=True):
    p = subprocess.run([sys.executable, "-m", "aim_sym", *args], capture_output=True, text=True,
                       timeout=600)
    if check and p.returncode != 0:
        raise AssertionError(p.stderr)
    return p


def test_threshold_weak_small_width_digits():
    p = run("threshold", "weak", "--model", "aim", "--channel", "hardmax", "--tokens", "2",
            "--small-width", "--digits", "30", "--json")
    out = json.loads(p.stdout)
    assert out["value"].startswith("0.403410629037599304517470000631")
    assert len(out["value"].replace("0.", "", 1)) == 30
    assert "asin" in out["closed_form"] and out["error"] < 1e-30
    assert out["method"].startswith("closed form")


def test_threshold_perfect_softmax():
    out = json.loads(run("threshold", "perfect", "--model", "aim", "--channel", "softmax",
                         "--tokens", "2", "--rho", "0.5", "--json").stdout)
    assert out["value"].startswith("0.1875") and out["closed_form"] == "\\frac{3}{16}"


def test_se_json_keys():
    out = json.loads(run("se", "--model", "aim", "--channel", "softmax", "--tokens", "2",
                         "--rho", "0.5", "--alpha", "0.0132445882352941", "--json").stdout)
    for k in ("q", "q_hat", "mmse", "phi", "error", "fixed_points"):
        assert k in out
    assert abs(out["mmse"] - 0.941191595679965) < 1e-12
    assert sum(f["bayes_optimal"] for f in out["fixed_points"]) == 1


def test_curve_csv_and_plot(tmp_path):
    csv_path, png = tmp_path / "curve.csv", tmp_path / "curve.png"
    run("curve", "--model", "aim", "--channel", "softmax", "--tokens", "3", "--rho", "0.5",
        "--alphas", "0:0.08:5", "--out", str(csv_path), "--plot", str(png), "--json")
    rows = list(csv.DictReader(open(csv_path)))
    assert len(rows) == 5 and float(rows[0]["mmse"]) == 1.0
    assert os.path.getsize(png) > 1000


def test_check_command_passes_for_softmax():
    p = run("check", "--model", "aim", "--channel", "softmax", "--tokens", "2")
    assert "all checks passed" in p.stdout


@pytest.mark.parametrize(
    "args,option",
    [
        (["se", "--alpha", "0.1", "--rho", "-1"], "--rho"),
        (["se", "--alpha", "-0.1", "--rho", "0.5"], "--alpha"),
        (["se", "--alpha", "0.1", "--tokens", "1"], "--tokens"),
        (["se", "--alpha", "0.1", "--beta", "0", "--channel", "softmax"], "--beta"),
        (["threshold", "weak", "--small-width", "--digits", "0"], "--digits"),
        (["se", "--alpha", "0.1", "--layers", "3"], "--layers"),
        (["threshold", "weak", "--model", "smi", "--rho", "0.5"], "--rho"),
        (["threshold", "weak", "--model", "smi", "--digits", "10"], "--digits"),
        (["se", "--alpha", "0.1", "--channel", "nope"], "--channel"),
        (["curve", "--alphas", "0:1"], "--alphas"),
    ],
)
def test_bad_values_exit_2_with_one_line(args, option):
    p = run(*args, check=False)
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and option in lines[0], p.stderr


def test_amp_command(tmp_path):
    png = tmp_path / "amp.png"
    out = json.loads(run("amp", "--model", "aim", "--channel", "softmax", "--tokens", "2",
                         "--rho", "0.5", "--alpha", "0.13", "--dim", "40", "--seeds", "2",
                         "--max-iter", "30", "--plot", str(png), "--json").stdout)
    for k in ("mean", "stderr", "se_prediction"):
        assert k in out
    assert abs(out["se_prediction"] - 0.2212) < 1e-3
    assert 0 < out["mean"] < 1 and os.path.getsize(png) > 1000
    p = run("amp", "--alpha", "0.1", "--dim", "5", check=False)
    assert p.returncode == 2 and "--dim" in p.stderr


def test_smi_weak_thresholds_and_sweep(tmp_path):
    out = json.loads(run("threshold", "weak", "--model", "smi", "--channel", "deep-attention",
                         "--layers", "2", "--tokens", "2", "--skip", "1", "--no-sequential",
                         "--json").stdout)
    th = {(t["layer"], t["kind"]): t for t in out["thresholds"]}
    assert abs(th[(2, "weak")]["value"] - 0.18547784) < 1e-7 and th[(2, "weak")]["error"] < 1e-8
    assert abs(th[(1, "weak")]["value"] - 6.1569366) < 1e-6
    csv_path, png = tmp_path / "phase.csv", tmp_path / "phase.png"
    run("sweep", "skip", "--layers", "2", "--tokens", "2", "--skips", "1,2", "--no-sequential",
        "--out", str(csv_path), "--plot", str(png))
    rows = list(csv.DictReader(open(csv_path)))
    assert [float(r["skip"]) for r in rows] == [1.0, 2.0] and os.path.getsize(png) > 1000
    assert float(rows[1]["weak_layer2"]) < float(rows[0]["weak_layer2"])


def test_result_printed_when_output_cannot_be_written(tmp_path, monkeypatch, capsys):
    # the folder is writable when checked, the write fails afterwards: the rows are printed
    # and the command exits 2 naming --out
    from aim_sym import tables
    from aim_sym.cli import main

    def broken(path, rows, **kw):
        raise tables.OutputError(f"cannot write the table {path!r}: disk full")

    monkeypatch.setattr(tables, "write_csv", broken)
    monkeypatch.setattr(sys, "argv", ["aim-sym", "curve", "--channel", "softmax", "--alphas",
                                      "0:0.05:2", "--out", str(tmp_path / "c.csv"), "--json"])
    with pytest.raises(SystemExit) as e:
        main()
    out = capsys.readouterr()
    assert e.value.code == 2 and len(json.loads(out.out)["rows"]) == 2
    assert out.err.strip().splitlines()[-1].startswith("aim-sym: error: --out")


@pytest.mark.parametrize("args,option", [
    (["se", "--alpha", "0.1", "--channel", "hardmax", "--beta", "inf"], "--beta"),
    (["se", "--alpha", "0.1", "--channel", "linear", "--epsilon", "0.1"], "--epsilon"),
    (["se", "--alpha", "0.1", "--channel", "softmax", "--tokens", "100"], "--tokens"),
    (["se", "--model", "smi", "--alpha", "0.1", "--skip", "0"], "--skip"),
    (["curve", "--model", "smi", "--alphas", "0:1:3", "--method", "traced"], "--method"),
    (["amp", "--model", "smi", "--alpha", "0.5", "--dim", "20", "--max-iter", "0"], "--max-iter"),
])
def test_options_that_do_not_apply_or_overflow_are_refused(args, option):
    p = run(*args, check=False)
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1 and option in lines[0], p.stderr
