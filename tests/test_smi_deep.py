"""Deep attention with L = 2, 3 layers: per-layer weak-recovery thresholds (numerics/smi_deep.py)."""

import json

import numpy as np
import pytest
from aim_sym.numerics import smi, smi_deep
from aim_sym.numerics.records import InputError
from click.testing import CliRunner

from aim_sym.cli import cli


def test_two_layer_route_agrees_with_the_two_layer_engine():
    # polar outer rule + half-space inner GH (smi_deep) vs GH outer rule (smi._weak_stats)
    a = smi_deep.lambdas(layers=2, skip=1.0, beta=1.0, n_h=(100, 24), n_z=64)
    b = smi._weak_stats(c=1.0, beta=1.0, n_h=72, n_z=96)
    assert abs(a["mass"] - 1) < 1e-10     # measured 5e-12 at these orders
    assert abs(a["lam1"] - b["lam1"]) < 1e-6
    assert abs(a["lam2"] - b["lam2"]) < 1e-6 * b["lam2"]


def test_three_layers_mass_and_ordering():
    r = smi_deep.lambdas(layers=3, skip=1.0, beta=1.0, n_h=(90, 24), n_z=16)
    r2 = smi_deep.lambdas(layers=3, skip=1.0, beta=1.0, n_h=(90, 24), n_z=20)
    # the inner 4D rule dominates the error of the mass; refining it brings the mass towards 1
    assert abs(r2["mass"] - 1) < abs(r["mass"] - 1) < 1e-5
    # the last layer is learned first, the middle layer last (c = 1, beta = 1)
    assert r["lam3"] > 10 * r["lam1"] > 10 * r["lam2"] > 0


def test_norm_bound_is_the_supremum():
    rng = np.random.default_rng(0)
    for c in (0.3, 1.0, 2.5):
        bound = smi_deep.norm_bound(c)
        p = np.vstack([rng.uniform(0, 1, (2000, 2)), [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]])
        P = np.stack([np.stack([p[:, 0], 1 - p[:, 0]], 1), np.stack([1 - p[:, 1], p[:, 1]], 1)], 1)
        A = P + c * np.eye(2)
        worst = np.linalg.norm(A, ord=2, axis=(1, 2)).max() ** 2
        assert worst <= bound + 1e-12
        assert abs(worst - bound) < 1e-12     # attained at P = [[1, 0], [1, 0]]


def test_tail_estimate():
    v, e = smi_deep._tail_estimate([1.0, 1.5, 1.75])   # geometric, ratio 1/2: limit 2
    assert v == 1.75 and abs(e - 0.5) < 1e-12
    v, e = smi_deep._tail_estimate([1.0, 1.1, 1.2])    # not converging: whole spread, inflated
    assert e >= 0.2


def test_bad_input():
    with pytest.raises(InputError, match="layers"):
        smi_deep.stability(layers=4)
    with pytest.raises(InputError, match="skip"):
        smi_deep.stability(layers=3, skip=0.0)
    with pytest.raises(InputError, match="n_z"):
        smi_deep.lambdas(layers=3, skip=1.0, beta=1.0, n_h=(20, 8), n_z=7)


@pytest.mark.slow
def test_three_layer_thresholds_cli_and_montecarlo():
    res = CliRunner().invoke(cli, ["threshold", "weak", "--model", "smi", "--channel",
                                   "deep-attention", "--layers", "3", "--tokens", "2", "--skip",
                                   "1", "--no-sequential", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output[res.output.index("{"):])
    th = {t["layer"]: t for t in out["thresholds"] if t["kind"] == "weak"}
    assert sorted(th) == [1, 2, 3]
    mc = smi_deep.montecarlo_lambdas(layers=3, samples=800, inner=3000, seed=3)
    for layer in (1, 2, 3):
        lam = 1.0 / th[layer]["value"]
        m, se = mc[f"lam{layer}"]
        assert abs(lam - m) < 4 * se + lam * th[layer]["error"] / th[layer]["value"]
        assert th[layer]["error"] < 0.01 * th[layer]["value"]
