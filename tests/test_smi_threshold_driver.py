"""The one sequential-threshold driver's parts (numerics/smi_sequential.py, issue 14) on functions
with known roots: the scan and its brackets, the polynomial root, the replicate bar."""

import math

import numpy as np
import pytest
from aim_sym.numerics.records import ConvergenceError
from aim_sym.numerics.smi_sequential import (
    fit_root,
    replicate_se,
    scan_brackets,
    sequential_driver,
)


def test_fit_root_of_a_known_quadratic():
    # r = (t - 0.3)(t + 2) (roots 0.3 and -2, r' = 2t + 1.7), mu = 1 + t^2: exact at degree 2
    t = [0.0, 0.5, 1.0]
    r = [(x - 0.3) * (x + 2) for x in t]
    mu = [1 + x * x for x in t]
    f = fit_root(t, r, mu, 0.5, within=(0.0, 1.0))
    assert f["t"] == pytest.approx(0.3, abs=1e-12) and f["mu"] == pytest.approx(1.09, abs=1e-12)
    assert f["s_r"] == pytest.approx(2.3, abs=1e-12) and f["s_mu"] == pytest.approx(0.6, abs=1e-12)
    assert f["d"] == pytest.approx(-0.2, abs=1e-12)
    # without a window the root nearest t0 + near is taken
    assert fit_root(t, r, mu, 0.5, near=-2.5)["t"] == pytest.approx(-2.0, abs=1e-10)
    assert fit_root(t, r, mu, 0.5, within=(0.5, 1.0)) is None
    # r = t^2 + 1 has no real root, its linear fit has one (root_deg)
    r2 = [x * x + 1 for x in t]
    assert fit_root(t, r2, mu, 0.5) is None
    lin = np.polyfit(t, r2, 1)
    g = fit_root(t, r2, mu, 0.5, root_deg=1)
    assert g["t"] == pytest.approx(-lin[1] / lin[0], abs=1e-12)


def test_scan_brackets_extends_the_grid_and_names_the_layer():
    calls = []

    def resid(qs):
        calls.append(list(qs))
        return [(q - 0.62, q - 0.87) for q in qs]

    table, br = scan_brackets(resid, (0.5, 0.6, 0.7, 0.8), (1, 2), attempts=3)
    assert br[1] == (0.6, 0.7)
    qa, qb = br[2]
    assert qa < 0.87 <= qb and len(table) == 6          # layer 2 needed larger q: extended
    # one step of the scan's mean step in log(1 - q) beyond 0.8, twice at most
    dx = np.mean(np.diff(np.log1p(-np.array([0.5, 0.6, 0.7, 0.8]))))
    assert qb == pytest.approx(-math.expm1(math.log1p(-0.8) + 2 * dx), rel=1e-12)
    with pytest.raises(ConvergenceError, match="layer-2 sequential root not bracketed"):
        scan_brackets(resid, (0.5, 0.6, 0.7, 0.8), (1, 2), attempts=2)
    # rising: a falling residual has no bracket
    with pytest.raises(ConvergenceError, match="layer-1 sequential root not bracketed"):
        scan_brackets(lambda qs: [(0.62 - q,) for q in qs], (0.5, 0.6, 0.7), (1,), rising=True)
    # lazy: stops at the first sign change, in the order given
    calls.clear()

    def lazy(qs):
        calls.append(list(qs))
        return [(q - 0.92,) for q in qs]

    table, br = scan_brackets(lazy, (0.9, 0.95, 0.6, 0.5), (1,), lazy=True)
    assert br[1] == (0.9, 0.95) and calls == [[0.9], [0.95]] and set(table) == {0.9, 0.95}


def test_sequential_driver_marks_the_first_transition():
    def locate(l, table, bracket):
        qa, qb = bracket
        ra, rb = table[qa][l - 1], table[qb][l - 1]
        q = qa - ra * (qb - qa) / (rb - ra)
        return dict(layer=l, value=1.0 / (1.0 + q))

    out = sequential_driver(lambda qs: [(q - 0.62, q - 0.33) for q in qs], locate,
                            unlearned=(1, 2), scan=(0.2, 0.4, 0.6, 0.8))
    assert [d["layer"] for d in out] == [1, 2]
    assert out[0]["value"] == pytest.approx(1 / 1.62) and out[1]["value"] == pytest.approx(1 / 1.33)
    assert out[0]["first"] and not out[1]["first"] and out[0]["seconds"] >= 0


def test_replicate_se_jackknife_is_the_standard_error_for_a_mean():
    per = np.array([[1.0], [2.0], [3.0], [10.0]])
    se = replicate_se(lambda p: np.asarray(p, dtype=float), per)
    assert se[0] == pytest.approx(per[:, 0].std(ddof=1) / 2, rel=1e-14)
    # one replicate alone "has no root" (above 8): the jackknife over replicates, which for a
    # mean equals the standard error
    jk = replicate_se(lambda p: np.where(p < 8, p, np.nan), per)
    assert jk[0] == pytest.approx(per[:, 0].std(ddof=1) / 2, rel=1e-12)
