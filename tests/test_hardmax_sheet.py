"""The hardmax sheet at T >= 3 (aim_sym.hardmax_sheet): its half-spaces and integrals describe
the channel the numerics integrate (THEORY 1.1, 1.4)."""

import numpy as np
import pytest
import sympy as sp
from aim_sym.numerics import hardmax_se

from aim_sym.hardmax_sheet import half_spaces, hardmax_expressions, invariances_hold, orbits
from aim_sym.symbols import V, h_symbols, omega_symbols, weights


@pytest.mark.parametrize("T, count", [(3, 7), (4, 19)])
def test_orbits_partition_the_outcomes(T, count):
    reps = orbits(T)
    assert len(reps) == count
    assert sum(size for _, size in reps) == T ** T
    assert all(half_spaces(y).shape == (T * (T - 1), T * (T + 1) // 2) for y, _ in reps)


def test_invariances_hold_at_T3():
    assert invariances_hold(3)


def test_sheet_integrals_match_the_numeric_polytope_moments():
    # seeded Monte Carlo of the sheet's own integrands (likelihood x density) against the
    # ordered-cone recursion of numerics.hardmax_se, at one omega, for every orbit representative
    T = 3
    ex = hardmax_expressions(T)
    hs, ws = h_symbols(T), omega_symbols(T)
    rng = np.random.default_rng(11)
    omega = np.array([0.3, -0.2, 0.5, -0.4, 0.1, 0.2])
    v = 0.7
    h = omega + rng.standard_normal((200_000, 6)) * np.sqrt(v * np.array(weights(T)))
    for y, _ in orbits(T):
        tag = "".join(map(str, y))
        Z = ex[f"Z_out[{tag}]"]
        integrand = Z.function
        steps = sp.Mul(*[f for f in sp.Mul.make_args(integrand) if isinstance(f, sp.Heaviside)])
        assert len(sp.Mul.make_args(steps)) == T * (T - 1)
        indicator = sp.lambdify(hs, steps, modules=[
            {"Heaviside": lambda x, h0=0.5: np.heaviside(x, h0)}, "numpy"])
        ind = indicator(*h.T) * np.ones(len(h))
        mom = hardmax_se.outcome_moments(tuple(c - 1 for c in y), omega=omega, V=v)[0]
        se = ind.std(ddof=1) / np.sqrt(len(ind))
        assert abs(ind.mean() - mom[0]) < 4 * se + 1e-12
        # g_11 = E[(h11 - omega11) 1_y] / (2 V Z): the sheet's numerator is that moment
        g = ex[f"g_out[{tag}][{ws[0].name}]"]
        assert sp.simplify(g * 2 * V * Z - Z.func((hs[0] - ws[0]) * integrand, *Z.limits)) == 0
        first = (h[:, 0] - omega[0]) * ind
        se1 = first.std(ddof=1) / np.sqrt(len(first))
        assert abs(first.mean() - mom[1]) < 4 * se1 + 1e-12


def test_sheet_refuses_tokens_outside_its_range():
    with pytest.raises(ValueError, match="T in"):
        hardmax_expressions(2)


def test_cli_derive_hardmax_t3():
    import json
    import subprocess
    import sys

    def run(*args):
        return subprocess.run([sys.executable, "-m", "aim_sym", "derive", "--channel", "hardmax",
                               *args], capture_output=True, text=True, timeout=300)

    p = run("--tokens", "3")
    assert p.returncode == 0 and "7 orbits, sizes summing to 27" in p.stdout
    assert "canonical sympy forms" not in p.stdout
    p = run("--tokens", "3", "--json")
    assert p.returncode == 0 and json.loads(p.stdout)["orbit_size[111]"] == "3"
    p = run("--tokens", "3", "--format", "python")
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "--format" in p.stderr
