"""Psi_out(Q) - Psi_out(0) of a noisy SMI channel (THEORY 2.1) on both output rules of
:func:`aim_sym.numerics.smi_general.functionals`: the trapezoid grid in y and, beyond its cap,
the rule over (u0, xi) with its own weights (a tensor Gauss-Hermite rule at these sizes).
Independent checks: the two rules agree, and psi = I(y; omega) obeys the data-processing bound
I(y; omega) <= I(z; omega) = (P M / 2) log(1 / (1 - Q)) (Gaussian omega, z = omega + V^1/2 u)."""

from __future__ import annotations

import math

import numpy as np
from aim_sym.numerics import smi_general as engine

import aim_sym.smi_general_api as api
from aim_sym import smi_channels as sc


def test_psi_on_sampled_outputs_matches_the_grid(monkeypatch):
    z = sc.z_symbols(1, 2)
    cc = api.compiled(sc.noisy(name="product", P=1, M=2, output=[z[0] * z[1]], noise=0.5))
    q = 0.5
    rules = engine.se_rules(cc, engine.Orders(), 0)
    assert rules.ys.kind.startswith("gauss-hermite")        # unequal weights on (u0, xi)
    grid = engine.functionals(cc, np.array([[q]]), rules)["psi"]
    monkeypatch.setattr(engine, "Y_GRID_CAP", 1)             # no grid fits: sampled outputs
    sampled = engine.functionals(cc, np.array([[q]]), rules)["psi"]
    bound = cc.P * cc.M / 2 * math.log(1 / (1 - q))
    assert 0 < grid < bound and 0 < sampled < bound
    # measured difference 4e-3 at these sizes (the (u0, xi) rule of 6^3 nodes is the coarser)
    assert abs(sampled - grid) < 0.02
