"""Shared base of the SMI engines (deep tied attention, THEORY 2): input checks, Gauss-Hermite
and omega_2 rules, the compiled channel pieces and the fibre geometry (THEORY 2.3).

Every ``numerics/smi*.py`` module builds on this one; it imports no other SMI module.  The
compiled pieces come from :func:`aim_sym.numerics.compiled_functions.smi_functions` (the factory
the package root registers).  ``A(z_1)`` is the layer-1 attention map, ``h = A z_2``, and
``z_2 = A(z_1)^{-1} h`` the fibre through ``h`` (:func:`fibre_point`; at depth L
:func:`inverse_columns`); :func:`gh` is the one Gauss-Hermite provider.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from functools import lru_cache

import numpy as np

from .compiled_functions import smi_functions
from .records import require


# ----------------------------------------------------------------------------- input checks
def check(layers, tokens, skip, beta, alpha=None) -> None:
    """Raise InputError unless ``layers == 2``, ``tokens == 2``, ``skip`` and ``beta`` are
    finite and > 0 and (if given) ``alpha`` is finite and >= 0 (depth L and M tokens:
    :func:`aim_sym.numerics.smi_weak.check`)."""
    require(isinstance(layers, (int, np.integer)) and layers == 2, "layers",
            "2 (the quadrature engine supports two tied attention layers)", layers)
    require(isinstance(tokens, (int, np.integer)) and tokens == 2, "tokens", "2", tokens)
    require(np.isfinite(skip) and skip > 0, "skip",
            "> 0 (c = 0 lets det A = c(1+c) degenerate; not supported)", skip)
    require(np.isfinite(beta) and beta > 0, "beta", "> 0", beta)
    if alpha is not None:
        require(np.isfinite(alpha) and alpha >= 0, "alpha", ">= 0", alpha)


# Validated skip floors (benchmarks/smi_small_skip.py): below them a rule's features of width
# sqrt(2 c / beta) (fibre) and c (h) are not resolved, so the quantity is refused, not printed.
SKIP_FLOORS = {
    "sequential": 0.5,      # L = 2 sequential threshold and SE points (trapezoid lattices)
    "sequential_l3": 1.0,   # L = 3 sequential thresholds (validated at c = 1 only)
}


def check_skip_floor(skip: float, what: str) -> None:
    """InputError unless ``skip >= SKIP_FLOORS[what]`` (one line naming ``skip``)."""
    floor = SKIP_FLOORS[what]
    label = {"sequential": "the L = 2 sequential threshold and SE",
             "sequential_l3": "the L = 3 sequential thresholds"}[what]
    require(skip >= floor, "skip", f">= {floor:g} for {label} (validated range)", skip)


# ----------------------------------------------------------------------------- rules
@lru_cache(maxsize=64)
def gh(n: int):
    """Probabilists' Gauss-Hermite: nodes, weights summing to 1 (rule for N(0, 1))."""
    x, w = np.polynomial.hermite_e.hermegauss(n)
    return x, w / w.sum()


def gh_tensor(n: int, dims: int):
    """Tensor product of :func:`gh` for N(0, I_dims): nodes (n^dims, dims), weights."""
    x, w = gh(n)
    nodes = np.stack([g.ravel() for g in np.meshgrid(*([x] * dims), indexing="ij")], 1)
    W = np.ones(nodes.shape[0])
    for g in np.meshgrid(*([w] * dims), indexing="ij"):
        W = W * g.ravel()
    return nodes, W


def ratio_grid2(n: int, sigma: float):
    """Rule for ``int dh f(h)`` over integrands even in h: :func:`grid2` for N(0, sigma^2 I) on
    the half plane h_0 > 0, weights divided by the Gaussian density.  Returns (h0, h1, w)."""
    h0, h1, wh = grid2(n, sigma, True)
    return h0, h1, wh * (2 * math.pi * sigma**2) * np.exp(0.5 * (h0**2 + h1**2) / sigma**2)


def grid2(n: int, scale: float, half: bool):
    """:func:`gh_tensor` for N(0, scale^2 I_2) as (X0, X1, W). ``half``: keep the first
    coordinate > 0 (weights doubled)."""
    nodes, W = gh_tensor(n, 2)
    X0, X1 = scale * nodes[:, 0], scale * nodes[:, 1]
    if half:
        require(n % 2 == 0, "order", "even", n)
        keep = X0 > 0
        X0, X1, W = X0[keep], X1[keep], 2.0 * W[keep]
    return X0, X1, W


def rotated(s, ws, d, wd):
    """Tensor rule of 1D rules ``(s, ws)`` and ``(d, wd)`` in the rotated coordinates
    ``s = (x0 + x1)/sqrt 2``, ``d = (x0 - x1)/sqrt 2``: (x0, x1, w)."""
    S, D = np.repeat(s, d.size), np.tile(d, s.size)
    W = np.repeat(ws, d.size) * np.tile(wd, s.size)
    return (S + D) / math.sqrt(2), (S - D) / math.sqrt(2), W


OMEGA_DELTA_MAX = 8.5  # in units of sqrt(q2): the cut Gaussian tail has mass < 1e-16


@lru_cache(maxsize=64)
def graded_omega_rule(n: tuple, q2: float, normalised: bool = False):
    """Rule for omega_2 ~ N(0, q2 I) in rotated coordinates ``s = (w0 + w1)/sqrt 2``,
    ``d = (w0 - w1)/sqrt 2``: Gauss-Hermite (n[0] nodes) in s; in d > 0 (weight doubled, by the
    symmetry omega -> -omega) Gauss-Legendre (n[1] nodes) in ``u`` with ``d = sqrt(q2) D u^2``,
    ``u in [0, 1]``, ``D = OMEGA_DELTA_MAX``: the layer-1 information scales as d^2/V, so the
    integrand varies on the scale d ~ sqrt(V) near d = 0, which this graded rule resolves.
    The cut tail d > D sqrt(q2) has Gaussian mass < 1e-16.  ``normalised``: weights divided by
    their sum (the Legendre rule alone misses ~1e-3 of the mass at n[1] = 8)."""
    ns, nd = n
    xs, ws = gh(ns)
    u, wu = np.polynomial.legendre.leggauss(nd)
    u, wu = 0.5 * (u + 1), 0.5 * wu
    x = OMEGA_DELTA_MAX * u**2
    wd = 2.0 * wu * 2 * OMEGA_DELTA_MAX * u * np.exp(-0.5 * x**2) / math.sqrt(2 * math.pi)
    w0, w1, W = rotated(xs * math.sqrt(q2), ws, x * math.sqrt(q2), wd)
    return w0, w1, W / W.sum() if normalised else W


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


def attention_matrix(z0, z1, c, beta):
    """``A(z_1)`` as an (..., 2, 2) array: the inverse of :func:`attention_inverse`."""
    return np.linalg.inv(np.moveaxis(attention_inverse(z0, z1, c, beta)[0], (0, 1), (-2, -1)))


def attention_image(z0, z1, t0, t1, c, beta):
    """``h = A(z_1) z_2`` (THEORY 2.3) at ``z_1 = (z0, z1)``, ``z_2 = (t0, t1)``: (h0, h1)."""
    A = attention_matrix(z0, z1, c, beta)
    return A[..., 0, 0] * t0 + A[..., 0, 1] * t1, A[..., 1, 0] * t0 + A[..., 1, 1] * t1


def fibre_point(Ai, h0, h1):
    """The fibre point ``z_L = A^{-1} h`` (THEORY 2.3, 2.5) from the entries ``Ai[a][b]`` of the
    inverse map (:func:`attention_inverse`, or :func:`inverse_columns` at depth L): (u, w)."""
    return Ai[0][0] * h0 + Ai[0][1] * h1, Ai[1][0] * h0 + Ai[1][1] * h1


def fibre_quadratics(Ai):
    """Coefficients of the fibre point's quadratic and bilinear forms in ``h`` (THEORY 2.3):
    ``B`` (3, ...) with ``|A^{-1} h|^2 = B . (h0^2, h0 h1, h1^2)``, ``Y`` (4, ...) with
    ``omega^T A^{-1} h = Y . (o0 h0, o0 h1, o1 h0, o1 h1)`` and ``K`` (9 entries) with
    ``(z_L z_L^T)_ab = K[3j:3j+3] . (h0^2, h0 h1, h1^2)`` for ab = 00, 01, 11 (j = 0, 1, 2)."""
    (a00, a01), (a10, a11) = Ai
    B = np.stack([a00**2 + a10**2, 2 * (a00 * a01 + a10 * a11), a01**2 + a11**2])
    K = []
    for a, b in (((a00, a01), (a00, a01)), ((a00, a01), (a10, a11)), ((a10, a11), (a10, a11))):
        K += [a[0] * b[0], a[0] * b[1] + a[1] * b[0], a[1] * b[1]]
    return B, np.stack([a00, a01, a10, a11]), K


def inverse_columns(params: list, layers: int, skip: float, beta: float):
    """``M^{-1}`` at depth ``layers`` (THEORY 2.5: ``z_L = M^{-1} h``, ``M = A_{L-1} ... A_1``) at
    the free coordinates ``params`` (z_1 .. z_{L-1}, 2 (L - 1) arrays): entries
    ``((m00, m01), (m10, m11))`` and ``1 / det M``.  The compiled fibre is linear in ``h``; its
    columns are the fibre at ``h = e_0, e_1``."""
    f = functions(layers)["fibre"]
    one, zero = np.ones_like(params[0]), np.zeros_like(params[0])
    with np.errstate(over="ignore", invalid="ignore"):
        c0 = f(*params, one, zero, skip, beta)
        c1 = f(*params, zero, one, skip, beta)
    m00, m10, jac = (np.asarray(t, dtype=float) * one for t in c0)
    m01, m11 = (np.asarray(t, dtype=float) * one for t in c1[:2])
    return ((m00, m01), (m10, m11)), jac


def fibre_jacobian(z0, z1, h0, h1, c, beta):
    """Entries ``(j00, j01, j10, j11)`` of ``J = dz_2/dz_1`` along the fibre through ``h``."""
    f = functions()["fibre_jacobian"]
    with np.errstate(over="ignore", invalid="ignore"):
        j = [np.asarray(t, dtype=float) * np.ones_like(z0) for t in f(z0, z1, h0, h1, c, beta)]
    return j


def gauss_newton_precision(j, v1, v2):
    """Entries (P00, P01, P11) of ``P = I / V1 + J^T J / V2``, ``J = (j00, j01, j10, j11)`` the
    fibre Jacobian: the Gauss-Newton (Laplace) precision of the fibre posterior over ``z_1``."""
    j00, j01, j10, j11 = j
    return (1 / v1 + (j00**2 + j10**2) / v2, (j00 * j01 + j10 * j11) / v2,
            1 / v1 + (j01**2 + j11**2) / v2)


def fibre_eval(z0, z1, h0, h1, c, beta):
    """The compiled L = 2 fibre (THEORY 2.3) broadcast to the common shape of ``z_1`` and ``h``:
    ``(u0, u1, jac)`` with ``(u0, u1) = A(z_1)^{-1} h`` and ``jac = 1 / det A(z_1)``."""
    with np.errstate(over="ignore"):
        u0, u1, jac = functions()["fibre"](z0, z1, h0, h1, c, beta)
    one = np.ones(np.broadcast_shapes(np.shape(z0), np.shape(h0)))
    return np.asarray(u0, float) * one, np.asarray(u1, float) * one, np.asarray(jac, float) * one


def gauss_newton_mode(z0, z1, h0, h1, *, m1, v1, m2, r, v2, c, beta, iters: int, sgn=1.0):
    """Mode over ``z_1`` of ``N(z_1; m1, v1 I) N(sgn A(z_1)^{-1} h; m2 + r (z_1 - m1), v2 I)``
    (the ``1/det A`` factor left out) by damped Gauss-Newton from ``(z0, z1)`` with the
    symbolic fibre Jacobian (THEORY 2.3), vectorised.  Returns the mode and the precision
    ``(P00, P01, P11)`` of :func:`gauss_newton_precision` for ``j = sgn J - r I`` there; points
    where it fails (not finite, P not positive definite) fall back to ``m1`` and ``I / v1``."""
    (m10, m11), (m20, m21) = m1, m2
    for it in range(iters + 1):
        u0, u1, _ = fibre_eval(z0, z1, h0, h1, c, beta)
        j00, j01, j10, j11 = (np.nan_to_num(j) for j in fibre_jacobian(z0, z1, h0, h1, c, beta))
        j00, j01, j10, j11 = j = sgn * j00 - r, sgn * j01, sgn * j10, sgn * j11 - r
        P00, P01, P11 = gauss_newton_precision(j, v1, v2)
        if it == iters:
            break
        r0 = sgn * u0 - m20 - r * (z0 - m10)
        r1 = sgn * u1 - m21 - r * (z1 - m11)
        g0 = (z0 - m10) / v1 + (j00 * r0 + j10 * r1) / v2
        g1 = (z1 - m11) / v1 + (j01 * r0 + j11 * r1) / v2
        det = P00 * P11 - P01**2
        s0 = (P11 * g0 - P01 * g1) / det
        s1 = (P00 * g1 - P01 * g0) / det
        f = np.minimum(1.0, 1.0 / np.maximum(np.hypot(s0, s1), 1e-300))
        z0, z1 = z0 - f * s0, z1 - f * s1
    ok = np.isfinite(z0) & np.isfinite(z1) & np.isfinite(P00 * P11) & (P00 * P11 - P01**2 > 0)
    return (np.where(ok, z0, m10), np.where(ok, z1, m11), np.where(ok, P00, 1 / v1),
            np.where(ok, P01, 0.0), np.where(ok, P11, 1 / v1))


# ----------------------------------------------------------------------------- small-skip rules
# Rotated coordinates s = (z0 + z1)/sqrt 2, d = (z0 - z1)/sqrt 2 (for z_1 and for h).  With
# kappa(z_1) = det A(z_1) / (1 + c) in [c, 1 + c), A acts on (s, d) as [[1 + c, tau], [0, kappa]]:
# h_d = kappa z2_d.  kappa -> c where both softmax rows coincide (near d = 0, kappa ~ c + beta d^2
# / 2), so the fibre integrand varies in d on the scale sqrt(2 c / beta) and the density of h in
# h_d on the scale c: both get a sinh-mapped trapezoid (exponential convergence on every scale).
Z1_TAIL = 9.0      # |d| <= 9: the cut Gaussian mass of z_1 is < 1e-18
H_TAIL = 9.0       # |h_d| <= 9 (1 + c) >= 9 sup kappa: the cut mass of h is < 1e-18


def sinh_nodes(gamma: float, extent: float, dt: float, half: bool):
    """Trapezoid in t, x = gamma sinh(t), |x| <= extent: nodes x and weights dx/dt dt (t >= 0
    only when ``half``, the t = 0 node counted once, the others twice)."""
    tmax = math.asinh(extent / gamma)
    k = np.arange(0 if half else -math.ceil(tmax / dt), math.ceil(tmax / dt) + 1)
    t = k * dt
    w = dt * gamma * np.cosh(t)
    if half:
        w = np.where(k == 0, w, 2.0 * w)
    return gamma * np.sinh(t), w


@lru_cache(maxsize=32)
def rotated_z1_rule(n_s: int, dt: float, c: float, beta: float):
    """Rule for z_1 ~ N(0, I) (weights sum to 1 up to the rule's error): Gauss-Hermite (n_s
    nodes) in s, the sinh-mapped trapezoid (step dt) in d with scale sqrt(2 c / beta) (capped at
    1), resolving kappa(z_1) -> c near d = 0.  Returns (z0, z1, w)."""
    xs, ws = gh(n_s)
    gamma = min(math.sqrt(2.0 * c / beta), 1.0)
    d, wd = sinh_nodes(gamma, Z1_TAIL, dt, half=False)
    return rotated(xs, ws, d, wd * np.exp(-0.5 * d**2) / math.sqrt(2 * math.pi))


@lru_cache(maxsize=32)
def rotated_h_rule(n_s: int, dt: float, c: float):
    """Outer rule for integrals ``int dh f(h)`` of integrands even in h_s and in h_d (h -> -h
    and the token swap): Gauss-Hermite ratio rule in h_s > 0 (n_s even, weights divided by the
    Gaussian density; its scale sigma, sigma^2 = 1.4 ((1 + c)^2 + 1), exceeds the conditional
    variance (1 + c)^2 + tau^2 of h_s given z_1 (|tau| <= 1), so the ratio decays), sinh-mapped
    trapezoid in h_d >= 0 with scale c (the width of the ridge h_d ~ kappa z2_d, kappa >= c).
    Weights carry the factor 4 of the quarter plane.  Returns (h0, h1, w)."""
    require(n_s % 2 == 0, "order", "even", n_s)
    sig = math.sqrt(1.4 * ((1.0 + c) ** 2 + 1.0))
    x, w = gh(n_s)
    keep = x > 0
    hs = sig * x[keep]
    ws = 2.0 * w[keep] * math.sqrt(2 * math.pi) * sig * np.exp(0.5 * x[keep] ** 2)
    return rotated(hs, ws, *sinh_nodes(min(c, 1.0), H_TAIL * (1.0 + c), dt, half=True))
