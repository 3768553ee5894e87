"""Symbolic regression tests: the committed equation sheets match a fresh derivation.

The comparison is mathematical (canonical sympy forms in each sheet's last block), not textual.
Regenerate with `python derivations/<script>.py` when a derivation changes on purpose.
"""

import importlib.util
import os

import pytest

from aim_sym.sheets import compare_canonical, read_canonical

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DERIV = os.path.join(ROOT, "derivations")
SCRIPTS = ["aim_linear", "aim_softmax", "aim_hardmax", "smi_deep_attention", "erm", "aim_sparsemax",
           "aim_deep_attention"]


def load(script):
    spec = importlib.util.spec_from_file_location(script, os.path.join(DERIV, f"{script}.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


CASES = [(s, name) for s in SCRIPTS for name in load(s).SHEETS]


@pytest.mark.parametrize("script,name", CASES)
def test_sheet_is_current(script, name):
    path = os.path.join(DERIV, "sheets", name)
    assert os.path.exists(path), f"missing sheet {name}: run python derivations/{script}.py"
    with open(path) as fh:
        stored = read_canonical(fh.read())
    fresh = load(script).SHEETS[name][1]()
    bad = compare_canonical(stored, fresh)
    assert not bad, f"{name}: derivation changed for {bad[:5]}; regenerate the sheet"


def test_comparison_detects_a_change():
    stored = {"x": "2*V", "y": "alpha"}
    import sympy as sp

    V = sp.Symbol("V", positive=True)
    assert compare_canonical(stored, {"x": 2 * V, "y": sp.Symbol("alpha", nonnegative=True)}) == []
    assert compare_canonical(stored, {"x": 3 * V, "y": sp.Symbol("alpha", nonnegative=True)}) == ["x"]
