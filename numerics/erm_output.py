"""Output side of the ERM state evolution, T = 2 tokens (THEORY 3).

Per flat entry a <= b, (z0_ab, z_ab) ~ N(0, [[Q0, m], [m, q]]); the label noise (variance Delta/2
on every flat entry once the sqrt(1 + delta_ab) is taken inside the softmax) is folded into the
teacher's field: y depends only on z0n = z0 + noise, and (z0n, z) ~ N(0, C), C = [[Q0n, m], [m, q]],
Q0n = Q0 + Delta/2.  The SE derivatives in q and m hold with (Q0, z0) -> (Q0n, z0n) (the
parameterisation z = (m/Q0n) z0n + sqrt(q - m^2/Q0n) xi gives them by Stein's lemma).

For T = 2 the row softmax only sees the two combinations v = A u, A = [[sqrt2, -1, 0],
[0, -1, sqrt2]] (row a: sqrt2 u_aa - u_01), so with G = A A^T = [[3, 1], [1, 3]], omega = A z,
ell = A z0n, labels y_i = sigmoid(beta0 ell_i) and student rows sigmoid(beta v_i), the
three-dimensional proximal step reduces to a two-dimensional one:

    v* = argmin_v  (v - omega)^T G^-1 (v - omega) / (2 Sigma) + sum_i 2 (y_i - sigmoid(beta v_i))^2,
    p - z = A^T G^-1 (v* - omega)   (the minimiser moves z only along the range of A^T),

and (ell, omega) ~ N(0, C kron G) is four-dimensional.  The loss is not convex in v: the step is
a damped (eigenvalue-shifted) Newton iteration with backtracking, vectorised over all quadrature
nodes, from nine starts (omega, the label-matching point v_i = (beta0/beta) ell_i, their midpoint
and the row mixtures of the three); the lowest objective wins.  Expectations: tensor
Gauss-Hermite in the whitened coordinates, nodes of relative weight below 1e-16 dropped, error =
difference of two orders.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from .records import ConvergenceError, require

__all__ = ["OutputMoments", "output_moments", "generalisation_error", "prox_step", "row_loss"]

_G = np.array([[3.0, 1.0], [1.0, 3.0]])
_GINV = np.linalg.inv(_G)
_ORDER = 24  # Gauss-Hermite points per dimension (fine)
_ORDER_LO = 17  # the coarser order of the error estimate
_PRUNE = 1e-16  # drop tensor nodes of weight below this times the largest


@dataclass(frozen=True)
class OutputMoments:
    """E over (ell, omega) of the quantities the SE needs (per sample, flat entries summed)."""

    sq: float  # E sum (p - z)^2
    cross_m: float  # E sum (p - z)(q z0n - m z)
    cross_s: float  # E sum (p - z)(Q0n z - m z0n)
    envelope: float  # E min_u [...]: the Moreau envelope of the loss
    loss: float  # E of the loss at the proximal point (training loss without the quadratic)
    nodes: int


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))


def row_loss(v: np.ndarray, y: np.ndarray, beta: float) -> tuple[np.ndarray, ...]:
    """Loss 2 (y - sigmoid(beta v))^2 of one row and its first two derivatives in v."""
    s = _sigmoid(beta * v)
    ds = s * (1.0 - s)
    r = y - s
    f = 2.0 * r * r
    f1 = -4.0 * beta * r * ds
    f2 = 4.0 * beta * beta * ds * (ds - r * (1.0 - 2.0 * s))
    return f, f1, f2


def _objective(v1, v2, w1, w2, y1, y2, sigma, beta):
    d1, d2 = v1 - w1, v2 - w2
    quad = (_GINV[0, 0] * d1 * d1 + 2 * _GINV[0, 1] * d1 * d2 + _GINV[1, 1] * d2 * d2) / (2 * sigma)
    return quad + row_loss(v1, y1, beta)[0] + row_loss(v2, y2, beta)[0]


def _newton(v1, v2, w1, w2, y1, y2, sigma, beta, tol, max_iter=200):
    """Damped Newton from (v1, v2), vectorised; returns the last iterate, the objective there
    and where it converged (gradient below ``tol``)."""
    k11, k12, k22 = _GINV[0, 0] / sigma, _GINV[0, 1] / sigma, _GINV[1, 1] / sigma
    v1, v2 = v1.copy(), v2.copy()
    f = _objective(v1, v2, w1, w2, y1, y2, sigma, beta)
    active = np.ones(v1.shape, dtype=bool)
    scale = 1.0 / sigma + beta
    for _ in range(max_iter):
        idx = np.nonzero(active)[0]
        if idx.size == 0:
            break
        a1, a2 = v1[idx], v2[idx]
        _, g1l, h1l = row_loss(a1, y1[idx], beta)
        _, g2l, h2l = row_loss(a2, y2[idx], beta)
        d1, d2 = a1 - w1[idx], a2 - w2[idx]
        g1 = k11 * d1 + k12 * d2 + g1l
        g2 = k12 * d1 + k22 * d2 + g2l
        done = np.hypot(g1, g2) <= tol * scale
        h11, h12, h22 = k11 + h1l, k12 * np.ones_like(a1), k22 + h2l
        # a Hessian that is not safely positive definite is shifted (negative curvature mirrored)
        tr, det = h11 + h22, h11 * h22 - h12 * h12
        lam_min = 0.5 * tr - np.sqrt(np.maximum(0.25 * tr * tr - det, 0.0))
        kmin = min(k11, k22)
        shift = np.where(lam_min > 1e-3 * kmin, 0.0, 2.0 * np.abs(lam_min) + 1e-3 * kmin)
        h11, h22 = h11 + shift, h22 + shift
        det = h11 * h22 - h12 * h12
        s1 = -(h22 * g1 - h12 * g2) / det
        s2 = -(h11 * g2 - h12 * g1) / det
        t = np.ones_like(a1)
        f0 = f[idx]
        slope = g1 * s1 + g2 * s2
        for _ in range(40):
            n1, n2 = a1 + t * s1, a2 + t * s2
            fn = _objective(n1, n2, w1[idx], w2[idx], y1[idx], y2[idx], sigma, beta)
            # Armijo, up to rounding of f (near the minimum the full step is taken)
            ok = (fn <= f0 + 1e-4 * t * slope + 1e-15 * (1.0 + np.abs(f0))) | done
            if np.all(ok):
                break
            t = np.where(ok, t, 0.5 * t)
        keep = ~done
        v1[idx] = np.where(keep, n1, a1)
        v2[idx] = np.where(keep, n2, a2)
        f[idx] = np.where(keep, fn, f0)
        active[idx] = keep
    return v1, v2, f, ~active


def _starts(w1, w2, m1, m2) -> tuple:
    """The Newton starts: omega, the label-matching point, their midpoint, and per row the
    mixtures taking omega, the match or the midpoint there and omega or the match in the other
    row (nine in all: four missed the global minimum at ~3% of nodes of large fields)."""
    h1, h2 = 0.5 * (w1 + m1), 0.5 * (w2 + m2)
    return ((w1, w2), (m1, m2), (w1, m2), (m1, w2), (h1, h2),
            (h1, w2), (w1, h2), (h1, m2), (m1, h2))


def prox_step(omega: np.ndarray, y: np.ndarray, *, sigma: float, beta: float = 1.0,
              beta0: float = 1.0, tol: float = 1e-12) -> tuple[np.ndarray, np.ndarray]:
    """Global minimiser v* (shape (2, N)) and objective of the reduced proximal problem.

    ``omega``, ``y``: (2, N) arrays (student fields A z, labels).  Nine Newton starts per node
    (:func:`_starts`); the lowest converged objective wins.
    """
    w1, w2 = omega
    y1, y2 = y
    with np.errstate(over="ignore"):
        m1 = np.log(np.clip(y1, 1e-300, None)) - np.log(np.clip(1 - y1, 1e-300, None))
        m2 = np.log(np.clip(y2, 1e-300, None)) - np.log(np.clip(1 - y2, 1e-300, None))
    m1, m2 = m1 / beta, m2 / beta  # label-matching points (sigmoid(beta v) = y)
    best = None
    for s1, s2 in _starts(w1, w2, m1, m2):
        v1, v2, f, conv = _newton(s1, s2, w1, w2, y1, y2, sigma, beta, tol)
        if best is None:
            best = [v1, v2, f, conv]
        else:
            better = f < best[2]
            for k, arr in enumerate((v1, v2, f, conv)):
                best[k] = np.where(better, arr, best[k])
    bad = ~best[3]
    if np.any(bad):  # the lowest point found is not a converged minimum
        i = int(np.nonzero(bad)[0][0])
        raise ConvergenceError(
            f"proximal Newton iteration ({int(bad.sum())} nodes; first: omega = "
            f"({w1[i]:.6g}, {w2[i]:.6g}), y = ({y1[i]:.6g}, {y2[i]:.6g}), Sigma = {sigma:.6g})",
            last_iterate=(float(best[0][i]), float(best[1][i])), residual=None)
    return np.stack(best[:2]), best[2]


@functools.lru_cache(maxsize=16)
def _gh_nodes(n: int, dim: int) -> tuple[np.ndarray, np.ndarray]:
    """Pruned tensor Gauss-Hermite nodes (dim, N) and weights for N(0, I_dim)."""
    x, w = np.polynomial.hermite_e.hermegauss(n)
    w = w / math.sqrt(2 * math.pi)
    grids = np.meshgrid(*([x] * dim), indexing="ij")
    wgrid = functools.reduce(np.multiply.outer, [w] * dim)
    keep = wgrid >= _PRUNE * wgrid.max()
    nodes = np.stack([g[keep] for g in grids])
    weights = wgrid[keep]
    nodes.setflags(write=False)
    weights.setflags(write=False)
    return nodes, weights


def _check(q: float, m: float, sigma: float, Q0n: float) -> None:
    require(np.isfinite(sigma) and sigma > 0, "Sigma", "a finite real number > 0", sigma)
    require(np.isfinite(q) and q > 0, "q", "a finite real number > 0", q)
    require(np.isfinite(m) and Q0n * q - m * m > 0, "m", "with m^2 < Q0n q", m)


def output_moments(*, q: float, m: float, sigma: float, Q0n: float, beta: float = 1.0,
                   beta0: float = 1.0, order: int = _ORDER) -> OutputMoments:
    """The output-side expectations at (q, m, Sigma), T = 2 (THEORY 3), by tensor Gauss-Hermite
    of ``order`` points per dimension in (ell, omega) ~ N(0, C kron G)."""
    _check(q, m, sigma, Q0n)
    xi, wt = _gh_nodes(order, 4)
    cov = np.kron(np.array([[Q0n, m], [m, q]]), _G)
    chol = np.linalg.cholesky(cov)
    pts = chol @ xi
    ell, omega = pts[:2], pts[2:]
    y = _sigmoid(beta0 * ell)
    v, fmin = prox_step(omega, y, sigma=sigma, beta=beta, beta0=beta0)
    d = v - omega
    w = _GINV @ d  # p - z = A^T w
    sq = np.einsum("in,in->n", d, w)  # |A^T w|^2 = d^T G^-1 d
    cross_m = np.einsum("in,in->n", w, q * ell - m * omega)
    cross_s = np.einsum("in,in->n", w, Q0n * omega - m * ell)
    loss = fmin - sq / (2 * sigma)
    return OutputMoments(sq=float(wt @ sq), cross_m=float(wt @ cross_m),
                         cross_s=float(wt @ cross_s), envelope=float(wt @ fmin),
                         loss=float(wt @ loss), nodes=int(wt.size))


@functools.lru_cache(maxsize=16)
def _trapezoid_nodes(h: float, dim: int, radius: float = 8.6) -> tuple[np.ndarray, np.ndarray]:
    """Trapezoidal (sinc) rule of step ``h`` for N(0, I_dim), nodes within ``radius`` (the
    dropped Gaussian mass is below 1e-15): for integrands analytic in a strip |Im| < d it
    converges like exp(-2 pi d / h)."""
    k = np.arange(-int(radius / h), int(radius / h) + 1) * h
    grids = np.meshgrid(*([k] * dim), indexing="ij")
    r2 = sum(g * g for g in grids)
    keep = r2 <= radius * radius
    nodes = np.stack([g[keep] for g in grids])
    weights = np.exp(-0.5 * r2[keep]) * (h / math.sqrt(2 * math.pi)) ** dim
    nodes.setflags(write=False)
    weights.setflags(write=False)
    return nodes, weights


def generalisation_error(*, q: float, m: float, Q0n: float, beta: float = 1.0, beta0: float = 1.0,
                         step: float = 0.2) -> float:
    """E sum_ab [softmax_beta0(sqrt(1+delta) z0n) - softmax_beta(sqrt(1+delta) z)]^2, T = 2
    (THEORY 3): 4 E[(sigmoid(beta0 ell) - sigmoid(beta omega))^2], (ell, omega) ~ N(0, 3 C),
    by the two-dimensional trapezoidal rule of ``step`` in whitened coordinates (the sigmoid's
    poles at i pi/beta make Gauss-Hermite converge slowly; the trapezoidal rule converges
    geometrically in 1/step)."""
    _check(q, m, 1.0, Q0n)
    xi, wt = _trapezoid_nodes(step, 2)
    chol = np.linalg.cholesky(3.0 * np.array([[Q0n, m], [m, q]]))
    ell, omega = chol @ xi
    diff = _sigmoid(beta0 * ell) - _sigmoid(beta * omega)
    return float(4.0 * (wt @ (diff * diff)))
