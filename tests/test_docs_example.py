"""docs/example_api.py runs (fast) and prints the right numbers (checked against independent
values: the closed form of alpha_bar_c evaluated here with mpmath)."""

import os
import re
import subprocess
import sys

import mpmath

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(ROOT, "docs", "example_api.py")


def test_example_runs_and_prints_the_right_numbers():
    p = subprocess.run([sys.executable, EXAMPLE], capture_output=True, text=True, timeout=120,
                       cwd=ROOT)
    assert p.returncode == 0, p.stderr
    out = p.stdout
    # hardmax T = 2, small width: alpha_bar_c = 3 (pi^2 - 4 asin(1/3)^2) / (8 (3 pi - 2 asin(1/3)))
    with mpmath.workdps(40):
        a = mpmath.asin(mpmath.mpf(1) / 3)
        ref = 3 * (mpmath.pi**2 - 4 * a**2) / (8 * (3 * mpmath.pi - 2 * a))
        printed = mpmath.mpf(re.search(r"alpha_bar_c = ([0-9.]+)", out).group(1))
        assert abs(printed - ref) < mpmath.mpf(10) ** -29
    # SMI L = 2, c = 1: the layer-2 weak threshold (test_cli's value)
    lay2 = float(re.search(r"layer 2 weak threshold = ([0-9.]+)", out).group(1))
    assert abs(lay2 - 0.18547784) < 1e-7
    # the curve has 5 rows, mmse decreasing in alpha, inside (0, 1]
    rows = re.findall(r"^\s*(0\.\d+)\s+(0\.\d+)\s+\S+\s*$", out, flags=re.M)
    mm = [float(m) for _, m in rows]
    assert len(mm) == 5 and all(0 < x <= 1 for x in mm) and mm == sorted(mm, reverse=True)
    # mmse(Delta) of the prior lies in (0, Delta) and is printed to 30 digits
    v = re.search(r"mmse\(Delta=0.01; rho=0.2\) = ([0-9.]+)", out).group(1)
    assert 0 < float(v) < 0.01 and len(v.replace("0.", "", 1).lstrip("0")) == 30
