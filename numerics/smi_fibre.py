"""Shared base of the SMI engines (deep tied attention, THEORY 2): input checks, Gauss-Hermite
and omega_2 rules, the compiled channel pieces and the fibre geometry (THEORY 2.3).

Every ``numerics/smi*.py`` module builds on this one; it imports no other SMI module.  The
compiled pieces come from :func:`aim_sym.numerics.compiled_functions.smi_functions` (the factory
the package root registers).

* ``A(z_1)`` is the layer-1 attention map, ``z_2 = A(z_1)^{-1} h`` the fibre through ``h``
  (:func:`attention_inverse`), ``J = dz_2/dz_1`` along it (:func:`fibre_jacobian`);
* :func:`laplace_proposal`: the Gaussian proposal of the Monte Carlo routes at the true ``z_1``;
* :func:`graded_omega_rule`: the graded rule for ``omega_2`` that resolves the width-``sqrt(V)``
  feature at ``d = w0 - w1 = 0``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from functools import lru_cache

import numpy as np

from .compiled_functions import smi_functions
from .records import require

TWO_LAYERS = (2,)


# ----------------------------------------------------------------------------- input checks
def check(layers, tokens, skip, beta, alpha=None, *, supported: tuple = TWO_LAYERS) -> None:
    """Raise InputError unless ``layers`` is in ``supported``, ``tokens == 2``, ``skip`` and
    ``beta`` are finite and > 0 and (if given) ``alpha`` is finite and >= 0."""
    allowed = ("2 (the quadrature engine supports two tied attention layers)"
               if tuple(supported) == TWO_LAYERS else f"one of {tuple(supported)}")
    require(isinstance(layers, (int, np.integer)) and layers in supported, "layers", allowed,
            layers)
    require(isinstance(tokens, (int, np.integer)) and tokens == 2, "tokens", "2", tokens)
    require(np.isfinite(skip) and skip > 0, "skip",
            "> 0 (c = 0 lets det A = c(1+c) degenerate; not supported)", skip)
    require(np.isfinite(beta) and beta > 0, "beta", "> 0", beta)
    if alpha is not None:
        require(np.isfinite(alpha) and alpha >= 0, "alpha", ">= 0", alpha)


# ----------------------------------------------------------------------------- rules
@lru_cache(maxsize=64)
def gh(n: int):
    """Probabilists' Gauss-Hermite: nodes, weights summing to 1 (rule for N(0, 1))."""
    x, w = np.polynomial.hermite_e.hermegauss(n)
    return x, w / w.sum()


def grid2(n: int, scale: float, half: bool):
    """2D tensor GH for N(0, scale^2 I). ``half``: keep first coordinate > 0 (weights doubled)."""
    x, w = gh(n)
    X0, X1 = np.meshgrid(scale * x, scale * x, indexing="ij")
    W = np.outer(w, w)
    X0, X1, W = X0.ravel(), X1.ravel(), W.ravel()
    if half:
        require(n % 2 == 0, "order", "even", n)
        keep = X0 > 0
        X0, X1, W = X0[keep], X1[keep], 2.0 * W[keep]
    return X0, X1, W


OMEGA_DELTA_MAX = 8.5  # in units of sqrt(q2): the cut Gaussian tail has mass < 1e-16


@lru_cache(maxsize=32)
def graded_omega_rule(n: tuple, q2: float):
    """Rule for omega_2 ~ N(0, q2 I) in rotated coordinates ``s = (w0 + w1)/sqrt 2``,
    ``d = (w0 - w1)/sqrt 2``: Gauss-Hermite (n[0] nodes) in s; in d > 0 (weight doubled, by the
    symmetry omega -> -omega) Gauss-Legendre (n[1] nodes) in ``u`` with ``d = sqrt(q2) D u^2``,
    ``u in [0, 1]``, ``D = OMEGA_DELTA_MAX``: the layer-1 information scales as d^2/V, so the
    integrand varies on the scale d ~ sqrt(V) near d = 0, which this graded rule resolves.
    The cut tail d > D sqrt(q2) has Gaussian mass < 1e-16."""
    ns, nd = n
    xs, ws = gh(ns)
    u, wu = np.polynomial.legendre.leggauss(nd)
    u, wu = 0.5 * (u + 1), 0.5 * wu
    x = OMEGA_DELTA_MAX * u**2
    wd = 2.0 * wu * 2 * OMEGA_DELTA_MAX * u * np.exp(-0.5 * x**2) / math.sqrt(2 * math.pi)
    S = np.repeat(xs, nd) * math.sqrt(q2)
    D = np.tile(x, ns) * math.sqrt(q2)
    W = np.repeat(ws, nd) * np.tile(wd, ns)
    return (S + D) / math.sqrt(2), (S - D) / math.sqrt(2), W


# ----------------------------------------------------------------------------- compiled pieces
@lru_cache(maxsize=8)
def functions(layers: int = 2, backend: str = "numpy") -> Mapping[str, Callable]:
    """The compiled SMI channel pieces (``forward``, ``fibre``, ``attention_inverse``, ...) for
    ``layers`` and ``backend`` ("numpy" or "mpmath"), cached."""
    return smi_functions(layers, backend)


# ----------------------------------------------------------------------------- fibre geometry
def attention_inverse(z0, z1, c, beta):
    """``A(z_1)^{-1}`` as a (2, 2, ...) array and ``det A(z_1)`` at ``z_1 = (z0, z1)``."""
    f = functions()["attention_inverse"]
    with np.errstate(over="ignore"):
        a00, a01, a10, a11, det = (np.asarray(t, dtype=float) * np.ones_like(z0)
                                   for t in f(z0, z1, c, beta))
    return np.array([[a00, a01], [a10, a11]]), det


def fibre_jacobian(z0, z1, h0, h1, c, beta):
    """Entries ``(j00, j01, j10, j11)`` of ``J = dz_2/dz_1`` along the fibre through ``h``."""
    f = functions()["fibre_jacobian"]
    with np.errstate(over="ignore", invalid="ignore"):
        j = [np.asarray(t, dtype=float) * np.ones_like(z0) for t in f(z0, z1, h0, h1, c, beta)]
    return j


def laplace_proposal(z, h, v1, v2, skip, beta):
    """Covariance ``S`` (n, 2, 2) and its Cholesky factor of the Laplace proposal for ``z_1'``
    at the points ``z`` of the fibre through ``h``: ``S = 2 P^-1``, ``P = I / V1 + J^T J / V2``
    (``J = dz_2/dz_1`` along the fibre, :func:`fibre_jacobian`), widened by 2 for the
    importance sampler's tails."""
    j00, j01, j10, j11 = fibre_jacobian(z[:, 0], z[:, 1], h[:, 0], h[:, 1], skip, beta)
    P = np.empty((z.shape[0], 2, 2))
    P[:, 0, 0] = 1 / v1 + (j00**2 + j10**2) / v2
    P[:, 0, 1] = P[:, 1, 0] = (j00 * j01 + j10 * j11) / v2
    P[:, 1, 1] = 1 / v1 + (j01**2 + j11**2) / v2
    S = 2.0 * np.linalg.inv(P)
    return S, np.linalg.cholesky(S)
