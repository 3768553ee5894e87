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
and the row mixtures of the three); the lowest objective wins.  Expectations, two rules:

* :func:`output_moments`: tensor Gauss-Hermite in the whitened coordinates, nodes of relative
  weight below 1e-16 dropped, error = difference of two orders.  The global minimiser jumps
  across surfaces (two minima of equal objective), so it converges only like 1/n.
* :func:`output_moments_split`: the piecewise rule.  On lines along omega's e+ = (1, 1)/sqrt2
  direction (which crosses every jump transversally) the jumps are located (grid, bisection,
  Newton on the objective difference of the two branches) and each smooth piece is integrated
  by its own rule; the other three whitened coordinates by tensor Gauss-Hermite.  What is left
  are weaker singularities of the line integrals in the outer coordinates (where a jump ends at
  a cusp, its size falling to 0): the outer error falls like n^-2.6 or faster (docs/erm.md).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

import numpy as np

from .records import ConvergenceError, require

__all__ = ["OutputMoments", "output_moments", "output_moments_split", "generalisation_error",
           "ZeroEstimatorRates", "zero_estimator_rates",
           "prox_step", "row_loss", "SPLIT_ORDER", "SPLIT_ORDER_LO"]

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
    # piecewise rule only: the inner (line) rule's error of each moment and the line counts
    errors: dict = field(default_factory=dict)


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
    # gradient tolerance: tol (1/Sigma + beta) bounds the error of v by ~tol, which is the whole
    # displacement p - z ~ Sigma |grad| once Sigma < ~tol (next to alpha0); below Sigma = 1 it
    # is tightened to relative accuracy, floored at the rounding of (v - w)/Sigma
    rnd = 1e-3 * (np.abs(w1) + np.abs(w2)) / sigma
    scale = np.minimum(1.0 / sigma, 1.0 + rnd) + beta
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
        done = np.hypot(g1, g2) <= tol * scale[idx]
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


@dataclass(frozen=True)
class ZeroEstimatorRates:
    """The output side at the zero estimator S_hat = 0 (q = m = Sigma -> 0), per unit alpha.

    The prox moves z by p - z = -Sigma grad loss(0) + o(Sigma), so the hats stay finite:
    q_hat = alpha q_hat_rate, etc. (THEORY 3; derivation in docs/erm.md "The zero estimator")."""

    q_hat_rate: float  # 2 E |grad_u loss(0)|^2 = 2 beta^2 E[u^T G u], u_i = y_i - 1/2
    m_hat_rate: float  # -2 E[grad_u loss(0) . z0n] / Q0n = 2 beta E[u . ell] / Q0n
    sigma_hat_rate: float  # 2 E tr Hess_u loss(0) = 2 (beta^2 / 4) tr G = 3 beta^2
    loss: float  # E loss(0) = 4 E[u_1^2]: the training loss per alpha, and the test error
    errors: dict = field(default_factory=dict)  # two trapezoidal steps


def _zero_rates(Q0n: float, beta: float, beta0: float, step: float) -> tuple[float, ...]:
    xi, wt = _trapezoid_nodes(step, 2)
    ell = np.linalg.cholesky(Q0n * _G) @ xi  # ell = A z0n ~ N(0, Q0n G)
    u = _sigmoid(beta0 * ell) - 0.5
    q_rate = 2 * beta * beta * float(wt @ np.einsum("in,ij,jn->n", u, _G, u))
    m_rate = 2 * beta * float(wt @ np.einsum("in,in->n", u, ell)) / Q0n
    loss = 2 * float(wt @ np.einsum("in,in->n", u, u))
    return q_rate, m_rate, 3 * beta * beta, loss


def zero_estimator_rates(*, Q0n: float, beta: float = 1.0,
                         beta0: float = 1.0) -> ZeroEstimatorRates:
    """The T = 2 output side's limit at S_hat = 0 (:class:`ZeroEstimatorRates`): two-dimensional
    trapezoidal rule in whitened coordinates (steps 0.2 and 0.25 for the error, floored at a
    few ulps)."""
    fine = _zero_rates(Q0n, beta, beta0, 0.2)
    coarse = _zero_rates(Q0n, beta, beta0, 0.25)
    names = ("q_hat_rate", "m_hat_rate", "sigma_hat_rate", "loss")
    errors = {k: max(abs(a - b), 8 * np.finfo(float).eps * abs(a))
              for k, a, b in zip(names, fine, coarse, strict=True)}
    return ZeroEstimatorRates(*fine, errors=errors)


# ---------------------------------------------------------------------------------------------
# Piecewise rule: the jumps of the proximal step located on lines, each smooth piece integrated
# by its own rule (THEORY 3; docs/erm.md "How good are our bars?").
#
# Coordinates: ell = sqrt(Q0n) (2 a e+ + sqrt2 b e-), omega = (m/Q0n) ell + sqrt(s) (2 t e+ +
# sqrt2 c e-), s = q - m^2/Q0n, e+- = (1, +-1)/sqrt2 (G's eigenvectors, eigenvalues 4 and 2) and
# (a, b, c, t) ~ N(0, I_4).  Outer (a, b, c): tensor Gauss-Hermite.  Inner t: omega moves along
# e+, across which every jump of the prox is transversal: along a branch b the objective's
# derivative is dF_b/dt = sqrt(s) e+ . (omega - v_b) / (2 Sigma) (G^-1 e+ = e+/4), so the jump
# function D = F_A - F_B has D' = sqrt(s) (sum v_B - sum v_A) / (2 sqrt2 Sigma), and the two
# minimisers of a jump differ in the same sign in both rows (measured: never opposite).
SPLIT_ORDER = 16  # outer Gauss-Hermite order of the piecewise rule
SPLIT_ORDER_LO = 12  # its coarser order (error estimate)
_SQ2 = math.sqrt(2.0)
_E_PLUS = np.array([1.0, 1.0]) / _SQ2
_E_MINUS = np.array([1.0, -1.0]) / _SQ2
_STEP = 0.25  # inner grid step (trapezoidal rule on lines without jumps)
_RADIUS = 8.5  # inner range: Gaussian mass outside below 2e-17
_LEVELS = 7  # bisections of a cell that fails the smoothness test before it is a jump cell
_SMOOTH_TOL = 1e-4  # |v_b - v_a - h (v'_a + v'_b) / 2| above this: the cell is bisected
_BLOCK = 1.0  # pieces of a line with jumps are cut into blocks of at most this length
_GL, _GL_LO = 10, 7  # Gauss-Legendre points per block (and the coarser rule of the estimate)
_LINE_PRUNE = 1e-17  # inner nodes of weight below this times the largest line weight dropped


def _follow(v: np.ndarray, omega: np.ndarray, y: np.ndarray, sigma: float,
            beta: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Newton from ``v`` (one start): the local minimiser of the branch there, its objective
    and convergence flags."""
    v1, v2, f, conv = _newton(v[0], v[1], omega[0], omega[1], y[0], y[1], sigma, beta, 1e-12)
    return np.stack([v1, v2]), f, conv


def _slope(v: np.ndarray, y: np.ndarray, sigma: float, beta: float,
           dw: np.ndarray) -> np.ndarray:
    """dv/dt along a branch of minimisers (implicit function theorem on grad F = 0):
    H dv/dt = G^-1 (d omega/dt) / Sigma, H the objective's Hessian."""
    h1 = row_loss(v[0], y[0], beta)[2]
    h2 = row_loss(v[1], y[1], beta)[2]
    a11, a12, a22 = _GINV[0, 0] / sigma + h1, _GINV[0, 1] / sigma, _GINV[1, 1] / sigma + h2
    r = _GINV @ dw / sigma
    det = a11 * a22 - a12 * a12
    return np.stack([(a22 * r[0] - a12 * r[1]) / det, (a11 * r[1] - a12 * r[0]) / det])


def _moment_terms(ell, omega, v, f, q, m, Q0n, sigma) -> np.ndarray:
    """The five integrands (sq, cross_m, cross_s, envelope, loss) at nodes, shape (5, N)."""
    d = v - omega
    w = _GINV @ d
    sq = np.einsum("in,in->n", d, w)
    return np.stack([sq, np.einsum("in,in->n", w, q * ell - m * omega),
                     np.einsum("in,in->n", w, Q0n * omega - m * ell), f, f - sq / (2 * sigma)])


@functools.lru_cache(maxsize=8)
def _outer_nodes(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Pruned tensor Gauss-Hermite nodes (3, N) and weights for N(0, I_3)."""
    return _gh_nodes(n, 3)


def _hermite(t, t0, v0, s0, t1, v1, s1):
    """Cubic Hermite interpolation of v between (t0, v0, v0') and (t1, v1, v1')."""
    h = t1 - t0
    with np.errstate(invalid="ignore", divide="ignore"):
        x = np.where(h > 0, (t - t0) / np.where(h > 0, h, 1.0), 0.0)
    h00, h10 = (1 + 2 * x) * (1 - x) ** 2, x * (1 - x) ** 2
    h01, h11 = x * x * (3 - 2 * x), x * x * (x - 1)
    return h00 * v0 + h10 * h * s0 + h01 * v1 + h11 * h * s1


def output_moments_split(*, q: float, m: float, sigma: float, Q0n: float, beta: float = 1.0,
                         beta0: float = 1.0, order: int = SPLIT_ORDER) -> OutputMoments:
    """The output-side expectations (as :func:`output_moments`) by the piecewise rule: outer
    tensor Gauss-Hermite of ``order`` in three whitened coordinates, and on each line along
    omega's e+ direction the jumps of the prox located (a grid of step 1/4 with the global
    minimiser, cells whose cubic-Hermite smoothness test fails bisected 7 times, then the jump
    point by safeguarded Newton on the objective difference of the two branches); lines
    without jumps by the trapezoidal rule, lines with jumps by Gauss-Legendre on blocks of
    length <= 1 between the jumps (each node by Newton from the Hermite interpolant of its
    own branch).  ``errors``: the inner rule's error per moment (|T_h - T_2h| on smooth lines,
    |GL_10 - GL_7| on blocks), and counts: ``lines``, ``jump_lines``, ``jumps``,
    ``unresolved`` (jump cells where a third minimiser is lower: their width times the jump is
    in the error), ``off_branch`` (block nodes whose Newton moved > 1e-2 from the interpolant:
    steep stretches; checked at orders 16 and 24: each ended at the nine-start minimum or lower).
    The outer rule's error: compare two orders (the caller)."""
    _check(q, m, sigma, Q0n)
    s = q - m * m / Q0n
    xi, wl = _outer_nodes(order)
    L = wl.size
    ell = math.sqrt(Q0n) * (2 * xi[0] * _E_PLUS[:, None] + _SQ2 * xi[1] * _E_MINUS[:, None])
    om0 = (m / Q0n) * ell + math.sqrt(s) * _SQ2 * xi[2] * _E_MINUS[:, None]
    dw = 2 * math.sqrt(s) * _E_PLUS
    y = _sigmoid(beta0 * ell)
    # inner range per line: the line weight times phi(t) above _LINE_PRUNE times the largest
    radius = np.sqrt(np.maximum(2 * np.log(wl / (_LINE_PRUNE * wl.max() * math.sqrt(2 * math.pi))),
                                0.0))
    K = int(round(_RADIUS / _STEP))
    tg = np.arange(-K, K + 1) * _STEP
    act = np.abs(tg)[None, :] <= np.minimum(radius, _RADIUS)[:, None] + 1e-12
    act[:, K] = True  # every line keeps t = 0
    li, ki = np.nonzero(act)
    n_grid = li.size

    def omega_at(lines, t):
        return om0[:, lines] + dw[:, None] * t

    # the global minimiser on the grid: nine starts, then each branch continued along the line
    # wherever it is lower (the nine starts miss the global minimum at some nodes)
    P_line, P_t = li, tg[ki]
    P_v, P_f = prox_step(omega_at(li, P_t), y[:, li], sigma=sigma, beta=beta, beta0=beta0)
    idx = np.full(act.shape, -1)
    idx[li, ki] = np.arange(n_grid)
    ia, ib = idx[:, :-1].ravel(), idx[:, 1:].ravel()
    ok = (ia >= 0) & (ib >= 0)
    ia, ib = ia[ok], ib[ok]
    _sweep(P_v, P_f, ia, ib, omega_at(li, P_t), y[:, li], sigma, beta)
    P_s = _slope(P_v, y[:, li], sigma, beta, dw)
    # smoothness test and bisection of the cells that fail it
    h_min = _STEP / 2**_LEVELS * (1 + 1e-9)
    jump_a, jump_b = [], []
    while ia.size:
        width = P_t[ib] - P_t[ia]
        e = np.max(np.abs(P_v[:, ib] - P_v[:, ia] - 0.5 * width * (P_s[:, ia] + P_s[:, ib])),
                   axis=0)
        sus = e > _SMOOTH_TOL
        ia, ib, width = ia[sus], ib[sus], width[sus]
        last = width <= h_min
        jump_a.append(ia[last])
        jump_b.append(ib[last])
        ia, ib = ia[~last], ib[~last]
        if not ia.size:
            break
        lines, tm = P_line[ia], 0.5 * (P_t[ia] + P_t[ib])
        om = omega_at(lines, tm)
        vm, fm = prox_step(om, y[:, lines], sigma=sigma, beta=beta, beta0=beta0)
        for end in (ia, ib):  # both ends' branches continued to the midpoint
            ve, fe, ce = _follow(P_v[:, end], om, y[:, lines], sigma, beta)
            better = ce & (fe < fm - 1e-13)
            vm[:, better], fm[better] = ve[:, better], fe[better]
        new = np.arange(P_t.size, P_t.size + tm.size)
        P_line, P_t = np.concatenate([P_line, lines]), np.concatenate([P_t, tm])
        P_v, P_f = np.concatenate([P_v, vm], axis=1), np.concatenate([P_f, fm])
        P_s = np.concatenate([P_s, _slope(vm, y[:, lines], sigma, beta, dw)], axis=1)
        ia, ib = np.concatenate([ia, new]), np.concatenate([new, ib])
    ja, jb = np.concatenate(jump_a), np.concatenate(jump_b)
    # the jump point: D = F_A - F_B = 0, branch A continued from the left end, B from the right
    jl = P_line[ja]
    lo, hi = P_t[ja].copy(), P_t[jb].copy()
    vA, vB = P_v[:, ja].copy(), P_v[:, jb].copy()
    tt = 0.5 * (lo + hi)
    c = math.sqrt(s) / (2 * _SQ2 * sigma)
    fA = fB = np.zeros(jl.size)
    for _ in range(60):
        om, yy = omega_at(jl, tt), y[:, jl]
        vA, fA, _ = _follow(vA, om, yy, sigma, beta)
        vB, fB, _ = _follow(vB, om, yy, sigma, beta)
        D = fA - fB
        dD = c * ((vB[0] + vB[1]) - (vA[0] + vA[1]))
        lo, hi = np.where(D < 0, tt, lo), np.where(D >= 0, tt, hi)
        with np.errstate(divide="ignore", invalid="ignore"):
            tn = tt - D / dD
        tn = np.where(np.isfinite(tn) & (tn > lo) & (tn < hi), tn, 0.5 * (lo + hi))
        done = (np.abs(D) < 1e-14) | (hi - lo < 1e-13)
        if np.all(done):
            break
        tt = np.where(done, tt, tn)
    # where branch following is not trustworthy (A and B merged: near a cusp, where a basin
    # is tiny; or a third minimiser lower at the root), bisect on the global minimiser itself
    om = omega_at(jl, tt)
    fg = prox_step(om, y[:, jl], sigma=sigma, beta=beta, beta0=beta0)[1]
    redo = (np.max(np.abs(vA - vB), axis=0) <= 1e-7) | (fg < np.minimum(fA, fB) - 1e-10)
    if np.any(redo):
        r = np.nonzero(redo)[0]
        tt[r], vA[:, r], fA[r], vB[:, r], fB[r] = _bisect_global(
            jl[r], P_t[ja[r]], P_t[jb[r]], P_v[:, ja[r]], P_v[:, jb[r]], omega_at, y, sigma,
            beta, beta0)
    real = np.max(np.abs(vA - vB), axis=0) > 1e-7
    ja, jb, jl, tt, vA, vB, fA, fB = (x[..., real] for x in (ja, jb, jl, tt, vA, vB, fA, fB))
    # a third minimiser still lower at the jump point: not resolved; the cell's width times
    # the jump of the integrand goes into the error
    om = omega_at(jl, tt)
    vg, fg = prox_step(om, y[:, jl], sigma=sigma, beta=beta, beta0=beta0)
    unres = fg < np.minimum(fA, fB) - 1e-10
    err = np.zeros((5, L))
    if np.any(unres):
        u = np.nonzero(unres)[0]
        dterm = np.abs(_moment_terms(ell[:, jl[u]], om[:, u], vg[:, u], fg[u], q, m, Q0n, sigma)
                       - _moment_terms(ell[:, jl[u]], om[:, u], vA[:, u], fA[u], q, m, Q0n,
                                       sigma))
        bar = dterm * (P_t[jb[u]] - P_t[ja[u]]) * np.exp(-0.5 * tt[u] ** 2) / math.sqrt(
            2 * math.pi)
        np.add.at(err.T, jl[u], bar.T)
    val = np.zeros((5, L))
    jline = np.zeros(L, dtype=bool)
    jline[jl] = True
    jline[P_line[n_grid:]] = True  # bisected cells: a steep stretch, graded blocks there
    # lines without jumps: trapezoidal rule on the grid (and its every-second-node check)
    g_line, g_t = P_line[:n_grid], P_t[:n_grid]
    smooth = ~jline[g_line]
    terms = _moment_terms(ell[:, g_line], omega_at(g_line, g_t), P_v[:, :n_grid], P_f[:n_grid],
                          q, m, Q0n, sigma)
    wt = _STEP * np.exp(-0.5 * g_t**2) / math.sqrt(2 * math.pi)
    np.add.at(val.T, g_line[smooth], (terms * wt).T[smooth])
    even = smooth & (ki % 2 == 0)
    coarse = np.zeros((5, L))
    np.add.at(coarse.T, g_line[even], (2 * terms * wt).T[even])
    err[:, ~jline] += np.abs(val - coarse)[:, ~jline]
    off_branch = 0
    if np.any(jline):
        off_branch = _jump_lines(
            val, err, jline, ell=ell, om0=om0, dw=dw, y=y, breaks=(jl, tt, vA, vB),
            known=(P_line, P_t, P_v, P_s, np.arange(P_t.size) >= n_grid), q=q, m=m, Q0n=Q0n,
            sigma=sigma, beta=beta)
    moments = val @ wl
    bars = err @ wl
    names = ("sq", "cross_m", "cross_s", "envelope", "loss")
    errors = {k: float(b) for k, b in zip(names, bars, strict=True)}
    errors.update(lines=int(L), jump_lines=int(np.unique(jl).size), jumps=int(jl.size),
                  block_lines=int(jline.sum()),
                  unresolved=int(unres.sum()), off_branch=int(off_branch))
    return OutputMoments(*(float(x) for x in moments), nodes=int(P_t.size), errors=errors)


def _sweep(v: np.ndarray, f: np.ndarray, ia: np.ndarray, ib: np.ndarray, omega: np.ndarray,
           y: np.ndarray, sigma: float, beta: float) -> None:
    """Continue each node's minimiser to its neighbours (pairs ``ia``-``ib``) and keep it where
    its objective is lower, until nothing changes (in place)."""
    src, dst = np.concatenate([ia, ib]), np.concatenate([ib, ia])
    for _ in range(4 * (int(_RADIUS / _STEP) + 1)):
        if not src.size:
            break
        vn, fn, cn = _follow(v[:, src], omega[:, dst], y[:, dst], sigma, beta)
        better = cn & (fn < f[dst] - 1e-13)
        src, dst, vn, fn = src[better], dst[better], vn[:, better], fn[better]
        # one winner per destination (the lowest)
        o = np.lexsort((fn, dst))
        keep = np.concatenate([[True], dst[o][1:] != dst[o][:-1]]) if o.size else o.astype(bool)
        win = o[keep]
        v[:, dst[win]], f[dst[win]] = vn[:, win], fn[win]
        changed = np.unique(dst[win])
        # the changed nodes pass their minimiser on to their neighbours
        nxt_src = np.concatenate([ia[np.isin(ia, changed)], ib[np.isin(ib, changed)]])
        nxt_dst = np.concatenate([ib[np.isin(ia, changed)], ia[np.isin(ib, changed)]])
        src, dst = nxt_src, nxt_dst


def _bisect_global(lines, lo, hi, vlo, vhi, omega_at, y, sigma, beta, beta0, steps=40):
    """Bisection of jump cells on the global minimiser (nine starts and both ends' branches at
    every midpoint): the half whose end minimiser is nearer the midpoint's is dropped.  Returns
    the jump point and both branches there (minimiser and objective, Newton from the bracketing
    minimisers)."""
    vlo, vhi = vlo.copy(), vhi.copy()
    yl = y[:, lines]
    for _ in range(steps):
        tm = 0.5 * (lo + hi)
        om = omega_at(lines, tm)
        vm, fm = prox_step(om, yl, sigma=sigma, beta=beta, beta0=beta0)
        for ve in (vlo, vhi):  # the bracketing branches continued: the lowest wins
            ve, fe, ce = _follow(ve, om, yl, sigma, beta)
            better = ce & (fe < fm - 1e-13)
            vm[:, better], fm[better] = ve[:, better], fe[better]
        left = np.max(np.abs(vm - vlo), axis=0) <= np.max(np.abs(vm - vhi), axis=0)
        lo, hi = np.where(left, tm, lo), np.where(left, hi, tm)
        vlo, vhi = np.where(left, vm, vlo), np.where(left, vhi, vm)
    tt = 0.5 * (lo + hi)
    om = omega_at(lines, tt)
    vA, fA, _ = _follow(vlo, om, yl, sigma, beta)
    vB, fB, _ = _follow(vhi, om, yl, sigma, beta)
    return tt, vA, fA, vB, fB


def _jump_lines(val: np.ndarray, err: np.ndarray, jline: np.ndarray, *, ell, om0, dw, y, breaks,
                known, q, m, Q0n, sigma, beta) -> int:
    """Lines ``jline`` (with jumps or bisected cells): Gauss-Legendre (10 and 7 points) on
    blocks of each piece between jump points, cut at multiples of _BLOCK and at every bisection
    point (graded towards jumps and steep stretches); adds the 10-point value to ``val`` and
    the difference to ``err`` (per line, in place).  Each node starts Newton from the cubic
    Hermite interpolant of its own piece's branch between the neighbouring known points (grid,
    bisection and jump points, the latter from both sides).  Returns the number of nodes whose
    minimiser left the interpolant by more than 1e-2 (expected 0)."""
    L = val.shape[1]
    jl, tt, vA, vB = breaks
    P_line, P_t, P_v, P_s, P_mid = known
    o = np.lexsort((tt, jl))
    bl, bt, vA, vB = jl[o], tt[o], vA[:, o], vB[:, o]
    sA = _slope(vA, y[:, bl], sigma, beta, dw)
    sB = _slope(vB, y[:, bl], sigma, beta, dw)
    nb = np.bincount(bl, minlength=L)
    first = np.concatenate([[0], np.cumsum(nb)[:-1]])  # first break of each line (sorted)
    offset = np.concatenate([[0], np.cumsum(np.where(jline, nb + 1, 0))[:-1]])
    on = jline[P_line]
    kl, kt, kv, ks, kmid = P_line[on], P_t[on], P_v[:, on], P_s[:, on], P_mid[on]
    key_b = bl * 64.0 + (bt + 16.0)
    seg = np.searchsorted(key_b, kl * 64.0 + (kt + 16.0)) - first[kl]
    r = np.arange(bl.size) - first[bl]
    gs = np.concatenate([offset[kl] + seg, offset[bl] + r, offset[bl] + r + 1])
    t = np.concatenate([kt, bt, bt])
    v = np.concatenate([kv, vA, vB], axis=1)
    sl = np.concatenate([ks, sA, sB], axis=1)
    line = np.concatenate([kl, bl, bl])
    mid = np.concatenate([kmid, np.zeros(2 * bl.size, dtype=bool)])
    key = gs * 64.0 + (t + 16.0)
    o = np.argsort(key, kind="stable")
    key, gs, t, v, sl, line, mid = key[o], gs[o], t[o], v[:, o], sl[:, o], line[o], mid[o]
    # pieces [a, b] (first and last known point of each segment), cut into blocks
    bounds = np.nonzero(np.diff(gs))[0]
    starts = np.concatenate([[0], bounds + 1])
    ends = np.concatenate([bounds, [gs.size - 1]])
    blk = []
    for i0, i1 in zip(starts, ends):
        a, b = t[i0], t[i1]
        if b - a <= 0:
            continue
        cuts = np.arange(math.ceil(a / _BLOCK), math.floor(b / _BLOCK) + 1) * _BLOCK
        cuts = np.union1d(cuts, t[i0:i1 + 1][mid[i0:i1 + 1]])
        e = np.concatenate([[a], cuts[(cuts > a + 1e-12) & (cuts < b - 1e-12)], [b]])
        blk.extend((gs[i0], line[i0], lo, hi) for lo, hi in zip(e[:-1], e[1:]))
    bg, bline, ba, bb = (np.array(col) for col in zip(*blk))
    off_branch = 0
    results = []
    for n in (_GL, _GL_LO):
        x, w = np.polynomial.legendre.leggauss(n)
        half = 0.5 * (bb - ba)
        tn = ((0.5 * (ba + bb))[:, None] + half[:, None] * x[None, :]).ravel()
        wn = (half[:, None] * w[None, :]).ravel() * np.exp(-0.5 * tn * tn) / math.sqrt(
            2 * math.pi)
        gn, ln = np.repeat(bg, n), np.repeat(bline, n)
        j = np.clip(np.searchsorted(key, gn * 64.0 + (tn + 16.0)), 1, key.size - 1)
        start = _hermite(tn, t[j - 1], v[:, j - 1], sl[:, j - 1], t[j], v[:, j], sl[:, j])
        om = om0[:, ln] + dw[:, None] * tn
        vn, fn, conv = _follow(start, om, y[:, ln], sigma, beta)
        if not np.all(conv):
            i = int(np.nonzero(~conv)[0][0])
            raise ConvergenceError(
                f"proximal Newton iteration on a piece ({int((~conv).sum())} nodes; first: "
                f"omega = ({om[0, i]:.6g}, {om[1, i]:.6g}), Sigma = {sigma:.6g})",
                last_iterate=(float(vn[0, i]), float(vn[1, i])), residual=None)
        off_branch += int(np.sum(np.max(np.abs(vn - start), axis=0) > 1e-2))
        acc = np.zeros((5, L))
        np.add.at(acc.T, ln, (_moment_terms(ell[:, ln], om, vn, fn, q, m, Q0n, sigma) * wn).T)
        results.append(acc)
    val[:, jline] += results[0][:, jline]
    err[:, jline] += np.abs(results[0] - results[1])[:, jline]
    return off_branch
