"""Seeded Monte Carlo oracles of the SMI engine (deep tied attention, THEORY 2.1-2.3): routes
independent of every quadrature rule, never an engine.

Here only what the engine itself runs: :func:`cross_block_montecarlo` (the cross block of F at
``Q = 0``, zero by symmetry), an identity check of :func:`aim_sym.numerics.smi.run_checks`, and
its teacher sampler :func:`teacher_q0`.  The oracles that only the tests and the benchmarks call
(the weak-threshold coefficients, the last layer's branch at any depth, ``Q = diag(q1, q2)``,
the sequential thresholds, the Monte Carlo state evolution) are in tests/smi_mc_oracles.py.
"""

from __future__ import annotations

import numpy as np

from .records import Estimate, mean_estimate
from .smi_fibre import attention_inverse, attention_matrix, fibre_point


def teacher_q0(rng, samples: int, skip: float, beta: float):
    """Teachers at ``Q = 0``: ``z ~ N(0, I_4)`` (z_1 = z[:, :2], z_2 = z[:, 2:]) and
    ``h = A(z_1) z_2`` (THEORY 2.3)."""
    z = rng.standard_normal((samples, 4))
    return z, np.einsum("nab,nb->na", attention_matrix(z[:, 0], z[:, 1], skip, beta), z[:, 2:])


def cross_block_montecarlo(*, skip=1.0, beta=1.0, samples=400, inner=2000, seed=11) -> Estimate:
    """Seeded Monte Carlo of the cross block of F at Q = 0, E_y ||Cov[z_1, z_2 | y]||_F^2
    (zero by the sign symmetry z_2 -> -z_2).  The fibre is sampled without using the symmetry:
    ``z_1' ~ N(0, I)``, a random sign ``s``, ``z_2' = A(z_1')^{-1} s h`` (self-normalised
    weights); the square is estimated from two independent halves (unbiased in the inner noise)."""
    rng = np.random.default_rng(seed)
    z, h = teacher_q0(rng, samples, skip, beta)
    y = rng.standard_normal((samples, inner, 2))
    sg = rng.choice([-1.0, 1.0], size=(samples, inner))
    Bi, det = attention_inverse(y[..., 0], y[..., 1], skip, beta)
    u, v = (sg * t for t in fibre_point(Bi, h[:, None, 0], h[:, None, 1]))
    lw = -0.5 * (u**2 + v**2) - np.log(det)
    w = np.exp(lw - lw.max(1, keepdims=True))
    half = inner // 2
    C = []
    for part in (slice(0, half), slice(half, 2 * half)):
        wp = w[:, part] / w[:, part].sum(1, keepdims=True)
        C.append(np.stack([(wp * y[:, part, a] * t[:, part]).sum(1)
                           for a in range(2) for t in (u, v)], 1))
    vals = (C[0] * C[1]).sum(1)
    return mean_estimate(vals, f"Monte Carlo {samples} x {inner}, seed {seed}")
