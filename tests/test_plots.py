"""The one CSV writer and the figures: format from the suffix, atomic files, one-line errors."""

import csv
import math
import os

import numpy as np
import pytest
from aim_sym.numerics.records import InputError

from aim_sym import plots
from aim_sym.tables import OutputError, check_writable, write_csv

ROWS = [{"alpha": a, "mmse": 1.0 - a, "mmse_error": 1e-3, "q": a, "error": 2e-3}
        for a in (0.1, 0.2, 0.3)]


def no_temporaries(folder) -> bool:
    return not [p for p in os.listdir(folder) if p.startswith(".tmp-")]


def test_write_csv_tidy_exact_and_atomic(tmp_path):
    path = tmp_path / "t.csv"
    rows = [{"a": 0.1, "b": float("nan"), "s": "x, \"y\""},
            {"a": np.float64(1 / 3), "c": np.int64(7), "d": True, "e": None}]
    write_csv(str(path), rows)
    t = list(csv.DictReader(open(path)))
    assert list(t[0]) == ["a", "b", "s", "c", "d", "e"]
    assert float(t[1]["a"]) == 1 / 3 and t[0]["b"] == "" and t[0]["s"] == "x, \"y\""
    assert t[1]["c"] == "7" and t[1]["d"] == "True" and t[1]["e"] == "" and t[1]["s"] == ""
    write_csv(str(path), rows, columns=["s", "a"])
    assert open(path).readline().strip() == "s,a"
    assert no_temporaries(tmp_path)


def test_unwritable_outputs_are_one_line_errors(tmp_path):
    (tmp_path / "file").write_text("a file, not a folder\n")
    bad = str(tmp_path / "file" / "t.csv")
    with pytest.raises(OutputError) as e:
        write_csv(bad, ROWS)
    assert bad in str(e.value) and "\n" not in str(e.value) and isinstance(e.value, InputError)
    with pytest.raises(OutputError, match="--out must be a path in a writable folder") as e:
        check_writable(bad)
    assert bad in str(e.value)
    with pytest.raises(OutputError, match="--plot must be a file path, not a folder"):
        check_writable(str(tmp_path), "--plot")
    check_writable(str(tmp_path / "new" / "sub" / "t.csv"))  # a folder that can be created
    assert no_temporaries(tmp_path / "new" / "sub")


@pytest.mark.parametrize("suffix,magic", [(".pdf", b"%PDF"), (".png", b"\x89PNG\r\n\x1a\n"),
                                          (".svg", b"<?xml")])
def test_curve_format_follows_the_suffix(tmp_path, suffix, magic):
    path = tmp_path / f"c{suffix}"
    old = os.umask(0o022)
    try:
        plots.plot_curve(ROWS, ["mmse", "q"], title="AIM", path=str(path))
    finally:
        os.umask(old)
    assert path.read_bytes().startswith(magic) and no_temporaries(tmp_path)
    assert path.stat().st_mode & 0o777 == 0o644  # not the temporary file's private 0o600


def test_unknown_suffix_is_refused(tmp_path):
    with pytest.raises(OutputError) as e:
        plots.plot_curve(ROWS, ["mmse"], title="AIM", path=str(tmp_path / "x.jpg2"))
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("--plot must be") and ".png" in msg
    assert "x.jpg2" in msg and not os.listdir(tmp_path)


def test_phase_and_amp_figures(tmp_path):
    nan = math.nan
    rows = [{"skip": c, "weak_layer2": 0.2 * c, "weak_layer2_error": 1e-9, "weak_layer1": 6 + c,
             "weak_layer1_error": 1e-8, "sequential_layer1": nan, "sequential_layer1_error": nan}
            for c in (2.0, 1.0)]
    plots.plot_phase(rows, str(tmp_path / "p.pdf"))
    assert (tmp_path / "p.pdf").read_bytes().startswith(b"%PDF")
    results = [{"alpha": 0.1, "mean": 0.5, "stderr": 0.01, "dim": 50},
               {"alpha": 0.2, "mean": float("inf"), "stderr": nan, "dim": 50}]
    plots.plot_amp_vs_se(results, ROWS, str(tmp_path / "a.png"), title="AMP",
                         reference=[{"alpha": 0.1, "mmse": 0.41, "mmse_std": 0.01}])
    plots.plot_amp_vs_se(results, ([0.1, 0.2], [0.5, 0.4]), str(tmp_path / "b.svg"), title=None)
    assert (tmp_path / "a.png").stat().st_size > 1000 and (tmp_path / "b.svg").exists()
    assert no_temporaries(tmp_path)
