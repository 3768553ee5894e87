"""AMP view of the noisy polyhedral channels (THEORY 1.1, 1.4, 1.5; check 7 of THEORY 4).

P(y | h) = sum_k 1[A_k h <= b_k] N(y; L_k h + l_k, Delta), y in R^p continuous
(:class:`aim_sym.numerics.noisy_polyhedral_se.NoisyPolyhedralOutput`). What
:func:`aim_sym.numerics.amp.run_amp` reads (``name, tokens, weights, g_dg, sample``) comes from
:func:`aim_sym.numerics.noisy_polyhedral_se.z_out` at the observed y, vectorised over the
samples (no grouping: every sample has its own continuous y):

* ``g_dg(obs, omega, V)``: g_out = d log Z_out / d omega and the diagonal of its Jacobian, both
  from z_out at order 2 (the posterior's second moments): ``dg_form`` is "exact". Rows of a
  piece independent under its conditional law are closed forms (one half-space each); larger
  groups go to the Gaussian polytope engine on :data:`NOISY_AMP_RULE`.
* ``sample(h, rng)`` = ``draw_y``: y = f(h) + N(0, Delta), f the noiseless piecewise-affine
  output (N, p), the output vector as the channel file writes it.
* ``clean_y(h, rng)``: f(h) alone, and ``noise_trace`` = tr Delta. The test error of
  :func:`aim_sym.numerics.amp.test_error` run with ``clean_y`` plus ``noise_trace`` is the same
  expectation as with ``draw_y`` for the Bayes-optimal predictor (E[y | omega] = E[f(h) | omega],
  the noise independent of h), and is the SE's plug-in error E|y - f(omega)|^2 (THEORY 1.5)
  where ``draw_y`` would add a second noise draw at omega; it also has a smaller variance.
* ``log_z(obs, omega, V)``: log Z_out on the engine's default rule (the identity tests take its
  central differences).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from . import noisy_polyhedral_se as nps
from . import polytope as pt
from .amp_piecewise import POLYTOPE_AMP_RULE, weights
from .records import require

#: the polytope rule inside AMP for the pieces' groups of >= 2 correlated rows (the rule of the
#: noiseless channel files' AMP view: g_out to ~1e-6 of the default rule); single rows are
#: closed forms whatever the rule
NOISY_AMP_RULE = POLYTOPE_AMP_RULE
#: samples per z_out call (bounds the (pieces, N, n, n) arrays of order 2)
CHUNK = 4096


@dataclass(frozen=True)
class NoisyPiecewiseAmp:
    """The AMP view of one noisy polyhedral channel (module docstring): ``name, tokens, weights,
    g_dg, sample`` for :func:`aim_sym.numerics.amp.run_amp`, ``draw_y`` (= ``sample``),
    ``clean_y`` and ``noise_trace`` for the test error, ``log_z``, ``dg_form`` ("exact")."""

    name: str
    tokens: int
    weights: tuple[float, ...]
    g_dg: Callable
    sample: Callable
    draw_y: Callable
    clean_y: Callable
    noise_trace: float
    log_z: Callable
    dg_form: str
    discrete: bool
    out_dim: int


def _tokens(ch: nps.NoisyPolyhedralOutput) -> int:
    n = ch.dim
    T = int(round((math.sqrt(8 * n + 1) - 1) / 2))
    require(T * (T + 1) // 2 == n and tuple(ch.weights) == weights(T), "noisy channel",
            "an AIM output side (weights 1 + delta_ab over the pairs a <= b)", ch.weights)
    return T


def largest_group(ch: nps.NoisyPolyhedralOutput) -> int:
    """The most rows of one piece that are correlated under h's law given y (1: every row a
    closed form; more: the polytope engine)."""
    return max((len(g) for fr in nps._frames(ch, 1.0) for g in fr[10]), default=1)


def noisy_piecewise_amp(ch: nps.NoisyPolyhedralOutput, *,
                        rule: pt.PolytopeRule = NOISY_AMP_RULE) -> NoisyPiecewiseAmp:
    """The AMP view of ``ch`` (``aim_sym.noisy_polyhedral_model.NoisyPolyhedralAIM(...).output``):
    exact g_out and dg_out by :func:`aim_sym.numerics.noisy_polyhedral_se.z_out` (order 2) on
    ``rule`` (THEORY 1.1, 1.4)."""
    require(isinstance(ch, nps.NoisyPolyhedralOutput), "noisy channel",
            "a NoisyPolyhedralOutput (NoisyPolyhedralAIM(channel).output)", type(ch).__name__)
    require(isinstance(rule, pt.PolytopeRule), "rule", "a polytope.PolytopeRule",
            type(rule).__name__)
    require(largest_group(ch) == 1, "channel-file",
            "pieces whose rows are independent under h's law (closed forms) for AMP: a group of "
            "correlated rows needs the polytope engine, whose AMP rule was measured 0.05 off in "
            "g_out on noisy_sign.py (docs/amp_piecewise.md)",
            f"a group of {largest_group(ch)} correlated rows")
    T = _tokens(ch)
    n, p = ch.dim, ch.out_dim
    Delta = np.asarray(ch.Delta, dtype=float)
    chol = np.linalg.cholesky(Delta)

    def check(obs, omega, V):
        y = np.asarray(obs, dtype=float)
        require(y.ndim == 2 and y.shape[1] == p and np.all(np.isfinite(y)), "obs",
                f"finite outputs (N, {p})", y.shape)
        om = np.asarray(omega, dtype=float)
        require(om.shape == (y.shape[0], n) and np.all(np.isfinite(om)), "omega",
                f"finite, ({y.shape[0]}, {n})", om.shape)
        require(isinstance(V, (int, float, np.floating)) and math.isfinite(V) and V > 0, "V",
                "a finite real > 0", V)
        return y, om, float(V)

    def g_dg(obs, omega, V):
        y, om, V = check(obs, omega, V)
        g, dg = np.zeros((y.shape[0], n)), np.zeros((y.shape[0], n))
        for i in range(0, y.shape[0], CHUNK):
            z = nps.z_out(ch, omega=om[i:i + CHUNK], y=y[i:i + CHUNK], V=V, order=2, rule=rule)
            g[i:i + CHUNK] = z.g[:, 0]
            dg[i:i + CHUNK] = np.einsum("nii->ni", z.dg[:, 0])
        return g, dg

    def log_z(obs, omega, V):
        y, om, V = check(obs, omega, V)
        return nps.z_out(ch, omega=om, y=y, V=V, order=1).log_Z[:, 0]

    def clean_y(h, rng=None):
        h = np.asarray(h, dtype=float)
        require(h.ndim == 2 and h.shape[1] == n, "h", f"pre-activations (N, {n})", h.shape)
        return nps.clean_output(ch, h)

    def sample(h, rng):
        f = clean_y(h)
        return f + rng.standard_normal((f.shape[0], p)) @ chol.T

    return NoisyPiecewiseAmp(name=ch.name, tokens=T, weights=weights(T), g_dg=g_dg,
                             sample=sample, draw_y=sample, clean_y=clean_y,
                             noise_trace=float(np.trace(Delta)), log_z=log_z, dg_form="exact",
                             discrete=False, out_dim=p)


__all__ = ["NoisyPiecewiseAmp", "noisy_piecewise_amp", "NOISY_AMP_RULE", "CHUNK"]
