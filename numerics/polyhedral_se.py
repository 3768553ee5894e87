"""Output side of polyhedral AIM channels by the Gaussian polytope engine (THEORY 1.1, 1.4).

A discrete channel whose likelihood terms are intersections of half-spaces of h (any number of
them) has, for each outcome y, P(y | h) = sum_k w_k 1[A_k h <= b_k] (the terms of
:func:`aim_sym.output.parse_events`; a term without rows is the constant w_k). With
h ~ N(omega, V C), C = diag(1 + delta_ab),

    Z_y = sum_k w_k P_k,   dZ_y/domega = sum_k w_k dP_k/domega,   d2Z_y/domega2 likewise,

each P_k and its derivatives by :func:`aim_sym.numerics.polytope.gaussian_polytope` (closed forms
up to two rows, the iterated Gauss-Legendre rule up to rank 3: ~1e-12 with an error bar). Then
g_y = dZ_y / Z_y and dg_y = d2Z_y / Z_y - g_y g_y^T.

The SE output expectation (THEORY 1.1)

    E(q, V) = E_omega sum_y |dZ_y|_C^2 / Z_y,   Psi_out(q, V) = E_omega sum_y Z_y log Z_y,

over omega ~ N(0, q C) is a tensor Gauss-Hermite rule in the K directions m = L omega the channel
sees (L the basis of its half-space normals, m ~ N(0, q L C L^T)); two orders give the error.
Below V_GH = 0.35 (V << q: the integrand varies on sqrt(V) across the faces, Gauss-Hermite
converges slowly) the face rule (:func:`face_estimate`): a trapezoid rule in face coordinates
graded to a spacing ~sqrt(V) across each face; two steps give the error.
At q = 0 it is one evaluation at omega = 0, and the small-width weak-recovery threshold is
alpha_bar_c = 1 / (2 E(0, 1)) (THEORY 1.2, 1.4).

The generalisation error (THEORY 1.5) of an outcome read as a real vector r_y:
e_gen = E||y||^2 - E_omega ||sum_y Z_y(omega) r_y||^2 on the same tensor Gauss-Hermite rule
(:func:`generalisation_error`); the plug-in error and an independent check of e_gen without
quadrature over omega come from joint outcome probabilities of (h, omega) or (h, h'), each a
Gaussian polytope in 2n dimensions (:func:`plugin_error`, :func:`joint_bayes_error`).

This module receives numbers only (the symbolic side is :mod:`aim_sym.polyhedral`).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy.optimize import brentq
from scipy.special import ndtri

from . import polytope as pt
from . import wishart
from .records import ConvergenceError, Estimate, require

__all__ = ["Term", "PolyhedralOutput", "OutputValues", "z_out", "output_moments",
           "output_estimate", "weak_threshold", "check_identities",
           "GH_ORDERS", "FAST_RULE", "fixed_points", "SE_ORDERS", "V_MIN", "V_GH",
           "face_frame", "face_moments", "face_estimate", "FACE_STEPS",
           "generalisation_error", "plugin_error", "plugin_estimate", "EGEN_ORDERS",
           "joint_bayes_error", "pair_probabilities", "likelihood_at_zero",
           "DETERMINISTIC_RANK", "CUBE_RULE", "event_rank", "check_identities_first_order"]

#: Gauss-Hermite orders per axis of the omega expectation (coarse, fine): the error is their
#: difference. Geometric convergence needs V >= q (the integrand varies on the scale sqrt(V),
#: the weight on sqrt(q)); at V < q it is slow (docs/polyhedral.md)
GH_ORDERS = (8, 12)
#: a cheaper polytope rule for the omega expectation: 10/7 Gauss points on 10 pieces, five times
#: faster than the default and within ~1e-9 of it (its own bar), far below the omega rule's error
FAST_RULE = pt.PolytopeRule(nodes=10, coarse_nodes=7, pieces=10)
#: the largest event rank the engine integrates by its deterministic iterated rule (~1e-12)
DETERMINISTIC_RANK = 3
#: the rule for channels with an event of rank > DETERMINISTIC_RANK (the cube rule, Genz's
#: separation of variables on 8 x 2^15 scrambled Sobol points; hardmax at T = 3: alpha_bar_c to
#: 2e-6, bar 2.9e-5, docs/polyhedral.md "Events of rank > 3")
CUBE_RULE = pt.PolytopeRule(points=1 << 15)


@dataclass(frozen=True)
class Term:
    """w 1[A h <= b]; ``A`` has zero rows for a constant term."""

    weight: float
    A: tuple[tuple[float, ...], ...]
    b: tuple[float, ...]


@dataclass(frozen=True)
class PolyhedralOutput:
    """A polyhedral channel's output side as numbers (THEORY 1.4): per outcome its terms;
    ``weights`` the variance weights 1 + delta_ab of h (flat order a <= b); ``basis`` (K rows of
    n) spans the half-space normals, so Z_y depends on omega only through basis . omega."""

    outcomes: tuple
    terms: tuple[tuple[Term, ...], ...]
    weights: tuple[float, ...]
    basis: tuple[tuple[float, ...], ...]
    name: str = "polyhedral"

    def __post_init__(self) -> None:
        n = len(self.weights)
        require(n >= 1 and all(math.isfinite(w) and w > 0 for w in self.weights), "weights",
                "finite reals > 0", self.weights)
        require(len(self.terms) == len(self.outcomes) >= 1, "terms", "one tuple per outcome",
                len(self.terms))
        for ts in self.terms:
            for t in ts:
                require(math.isfinite(t.weight) and len(t.A) == len(t.b)
                        and all(len(r) == n and all(math.isfinite(v) for v in r) for r in t.A)
                        and all(math.isfinite(v) for v in t.b), "terms",
                        f"finite weights, rows of {n} entries and one bound per row", t)
        require(all(len(r) == n for r in self.basis), "basis", f"rows of {n} entries",
                self.basis)

    @property
    def dim(self) -> int:
        return len(self.weights)


@dataclass(frozen=True)
class OutputValues:
    """Z (Y, N), dZ (Y, N, n) = dZ/domega (order >= 1), d2Z (Y, N, n, n) (order 2), their
    error bars, and
    g = dZ / Z, dg = d2Z / Z - g g^T with error bars (0 where Z <= 0)."""

    Z: np.ndarray
    Z_error: np.ndarray
    dZ: np.ndarray | None
    dZ_error: np.ndarray | None
    d2Z: np.ndarray | None
    d2Z_error: np.ndarray | None
    seconds: float

    @property
    def _pos(self) -> tuple[np.ndarray, np.ndarray]:
        pos = self.Z > 1e-300
        return pos, np.where(pos, self.Z, 1.0)

    @property
    def g(self) -> np.ndarray:
        pos, Z = self._pos
        return np.where(pos[..., None], self.dZ / Z[..., None], 0.0)

    @property
    def g_error(self) -> np.ndarray:
        pos, Z = self._pos
        e = (self.dZ_error + np.abs(self.g) * self.Z_error[..., None]) / Z[..., None]
        return np.where(pos[..., None], e, 0.0)

    @property
    def dg(self) -> np.ndarray:
        require(self.d2Z is not None, "order", "2 for dg_out", 1)
        pos, Z = self._pos
        g = self.g
        out = self.d2Z / Z[..., None, None] - g[..., :, None] * g[..., None, :]
        return np.where(pos[..., None, None], out, 0.0)

    @property
    def dg_error(self) -> np.ndarray:
        require(self.d2Z_error is not None, "order", "2 for dg_out", 1)
        pos, Z = self._pos
        g, ge = np.abs(self.g), self.g_error
        e = ((self.d2Z_error + np.abs(self.d2Z) * (self.Z_error / Z)[..., None, None])
             / Z[..., None, None] + ge[..., :, None] * g[..., None, :]
             + g[..., :, None] * ge[..., None, :])
        return np.where(pos[..., None, None], e, 0.0)


def z_out(ch: PolyhedralOutput, *, omega, V: float, order: int = 2,
          rule: pt.PolytopeRule = pt.DEFAULT_RULE) -> OutputValues:
    """Z_y, (order >= 1) dZ_y/domega and (order 2) d2Z_y/domega2 for every outcome at the rows of
    ``omega`` (N, n), h ~ N(omega, V C) (module docstring). Each distinct polytope is
    integrated once for all outcomes that share it (the engine drops its implied rows,
    :func:`aim_sym.numerics.polytope.irredundant_rows`)."""
    require(isinstance(V, (int, float)) and math.isfinite(V) and V > 0, "V", "a finite real > 0",
            V)
    require(order in (0, 1, 2), "order", "0, 1 or 2", order)
    t0 = time.perf_counter()
    n = ch.dim
    om = np.atleast_2d(np.asarray(omega, dtype=float))
    require(om.ndim == 2 and om.shape[1] == n and np.all(np.isfinite(om)), "omega",
            f"finite, {n} entries per row", om.shape)
    N, Y = om.shape[0], len(ch.outcomes)
    cov = V * np.diag(np.asarray(ch.weights, dtype=float))
    moments: dict = {}
    for ts in ch.terms:
        for t in ts:
            key = (t.A, t.b)
            if t.A and key not in moments:
                mo = pt.gaussian_polytope(A=t.A, b=t.b, omega=om, cov=cov, order=order, rule=rule)
                A = mo.A
                d1 = e1 = d2 = e2 = None
                if order >= 1:
                    d1 = -(mo.grad @ A)  # dP/domega = -A^T dP/dc
                    e1 = mo.grad_error @ np.abs(A)
                if order == 2:
                    d2 = np.einsum("ki,nkl,lj->nij", A, mo.hess, A)
                    e2 = np.einsum("ki,nkl,lj->nij", np.abs(A), mo.hess_error, np.abs(A))
                moments[key] = (mo.mass, mo.mass_error, d1, e1, d2, e2)
    Z = np.zeros((Y, N))
    Ze = np.zeros((Y, N))
    dZ = np.zeros((Y, N, n)) if order >= 1 else None
    dZe = np.zeros((Y, N, n)) if order >= 1 else None
    d2Z = np.zeros((Y, N, n, n)) if order == 2 else None
    d2Ze = np.zeros((Y, N, n, n)) if order == 2 else None
    for y, ts in enumerate(ch.terms):
        for t in ts:
            if not t.A:
                Z[y] += t.weight
                continue
            P, Pe, d1, e1, d2, e2 = moments[(t.A, t.b)]
            w, aw = t.weight, abs(t.weight)
            Z[y] += w * P
            Ze[y] += aw * Pe
            if order >= 1:
                dZ[y] += w * d1
                dZe[y] += aw * e1
            if order == 2:
                d2Z[y] += w * d2
                d2Ze[y] += aw * e2
    # cancellations between terms (1 - P) cost absolute, not relative, accuracy: add rounding
    Ze += 4 * np.finfo(float).eps * sum(abs(t.weight) for ts in ch.terms for t in ts)
    return OutputValues(Z=Z, Z_error=Ze, dZ=dZ, dZ_error=dZe, d2Z=d2Z, d2Z_error=d2Ze,
                        seconds=time.perf_counter() - t0)


# ----------------------------------------------------------------------------- omega expectation
@lru_cache(maxsize=32)
def _hermite(order: int) -> tuple[np.ndarray, np.ndarray]:
    """Gauss-Hermite nodes and weights for E over N(0, 1)."""
    x, w = np.polynomial.hermite_e.hermegauss(order)
    return x, w / w.sum()


def _nodes(ch: PolyhedralOutput, q: float, order: int) -> tuple[np.ndarray, np.ndarray]:
    """omega nodes (N, n) and weights for omega ~ N(0, q C) seen through m = L omega."""
    n = ch.dim
    if q == 0 or not ch.basis:
        return np.zeros((1, n)), np.ones(1)
    L = np.asarray(ch.basis, dtype=float)
    C = np.diag(np.asarray(ch.weights, dtype=float))
    S = L @ C @ L.T
    K = L.shape[0]
    x, w = _hermite(order)
    grids = np.meshgrid(*([x] * K), indexing="ij")
    xi = np.stack([g.ravel() for g in grids], axis=1)
    wt = np.ones(xi.shape[0])
    for g in np.meshgrid(*([w] * K), indexing="ij"):
        wt = wt * g.ravel()
    m = math.sqrt(q) * xi @ np.linalg.cholesky(S).T  # m ~ N(0, q S)
    # the conditional mean of omega given m: omega = C L^T S^-1 m (rows: m S^-1 L C), so that
    # L omega = m (a transposed solve here gave L omega the wrong law whenever K = n)
    omega = m @ np.linalg.solve(S, L @ C)
    return omega, wt


def _node_moments(ch: PolyhedralOutput, omega: np.ndarray, wt: np.ndarray, *, V: float,
                  rule: pt.PolytopeRule, screen: bool = False) -> tuple[float, float, float]:
    """sum over the nodes ``omega`` with weights ``wt`` of sum_y |dZ_y|_C^2 / Z_y and
    sum_y Z_y log Z_y, and the engine's bar on the first. With ``screen``, a term whose Z_y is
    below SCREEN times its bar (the engine's absolute accuracy, ~4e-15: far outside the polytope
    its volume and face masses lose relative accuracy, and their ratio is garbage) counts 0,
    with the Gaussian isoperimetric bound I(p)^2 / (V p), p = Z_y + bar, I = phi(Phi^-1) (a
    [0, 1]-valued function of h ~ N(omega, V C) has |grad_omega E|_C^2 <= I(E)^2 / V) in the
    bar."""
    out = z_out(ch, omega=omega, V=V, order=1, rule=rule)
    c = np.asarray(ch.weights, dtype=float)
    pos = out.Z > 1e-300
    screened = 0.0
    if screen:
        bad = out.Z <= SCREEN * out.Z_error
        p = np.minimum(np.where(bad, out.Z, 0.0) + out.Z_error, 0.5)
        iso = np.exp(-0.5 * ndtri(p) ** 2) / math.sqrt(2 * math.pi)
        screened = float(np.where(bad, iso ** 2 / (V * p), 0.0).sum(axis=0) @ wt)
        pos = pos & ~bad
    Z = np.where(pos, out.Z, 1.0)
    nrm = np.einsum("ynk,k->yn", out.dZ ** 2, c)
    # the y-sum is the C-weighted Fisher information of y about omega, at most that of h:
    # tr(C (V C)^-1) = n / V (data processing); clip to [0, n / V] and cap each node's bar there
    # (far nodes where Z underflows or 1 - P cancels lose relative accuracy, not this bound)
    cap = ch.dim / V
    e_node = np.clip(np.where(pos, nrm / Z, 0.0).sum(axis=0), 0.0, cap)
    psi_node = np.where(pos, out.Z * np.log(Z), 0.0).sum(axis=0)
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        err_node = np.where(pos, 2 * np.einsum("ynk,ynk,k->yn", np.abs(out.dZ), out.dZ_error, c)
                            / Z + nrm * out.Z_error / Z ** 2, 0.0).sum(axis=0)
    err_node = np.minimum(np.nan_to_num(err_node, nan=cap, posinf=cap), cap)
    return float(e_node @ wt), float(psi_node @ wt), float(err_node @ wt) + screened


def output_moments(ch: PolyhedralOutput, *, q: float, V: float, order: int,
                   rule: pt.PolytopeRule = pt.DEFAULT_RULE) -> tuple[float, float, float, int]:
    """(E(q, V), Psi_out(q, V), the polytope engine's error bar on E, nodes) at one
    Gauss-Hermite order (module docstring; THEORY 1.1)."""
    require(math.isfinite(q) and q >= 0, "q", "a finite real >= 0", q)
    omega, wt = _nodes(ch, q, order)
    e, psi, bar = _node_moments(ch, omega, wt, V=V, rule=rule)
    return e, psi, bar, len(wt)


def output_estimate(ch: PolyhedralOutput, *, q: float, V: float,
                    orders: tuple[int, int] = GH_ORDERS,
                    rule: pt.PolytopeRule = pt.DEFAULT_RULE) -> tuple[Estimate, Estimate]:
    """E(q, V) and Psi_out(q, V) with errors: |fine - coarse| Gauss-Hermite orders plus the
    polytope engine's bar (at q = 0: one evaluation, the engine's bar only)."""
    require(len(orders) == 2 and 2 <= orders[0] < orders[1] <= 40, "orders",
            "two increasing integers in 2..40", orders)
    e1, p1, b1, n1 = output_moments(ch, q=q, V=V, order=orders[1], rule=rule)
    if q == 0:
        method = "polytope engine at omega = 0 (one evaluation)"
        return Estimate(e1, b1, method), Estimate(p1, 0.0, method)
    e0, p0, _, _ = output_moments(ch, q=q, V=V, order=orders[0], rule=rule)
    method = (f"tensor Gauss-Hermite over omega, orders {orders[0]} and {orders[1]} "
              f"({n1} nodes), polytope engine per node")
    return Estimate(e1, abs(e1 - e0) + b1, method), Estimate(p1, abs(p1 - p0), method)


# ----------------------------------------------------------------------------- small V: face rule
#: the face-aligned mapped trapezoid rule over omega (V < V_GH): on each face coordinate z_k
#: (the face's normal scaled so that the face has width sqrt(V)) the nodes are
#: z_k = c_k + sqrt(V) x(t), x(t) = t + beta (t - s tanh(t / s)), t on a uniform grid of step h:
#: spacing h sqrt(V) across the face (|x| < s), h FACE_COARSE sqrt(q) far from it (beta from it)
FACE_TRANSITION = 4.0
FACE_COARSE = 1.0
#: steps h of the face rule (coarse, fine): the error is their difference (docs/polyhedral.md)
FACE_STEPS = (1.0, 0.8)
#: the window |z_k| <= FACE_WINDOW sqrt(q) of each face coordinate (z_k ~ N(0, q))
FACE_WINDOW = 6.0
#: nodes whose weight is below FACE_PRUNE of the largest are dropped (their total weight times
#: the bound n / V of the integrand is added to the error)
FACE_PRUNE = 1e-15
#: the face rule drops a term whose Z_y is below SCREEN times its error bar (see _node_moments)
SCREEN = 1e3


def face_frame(ch: PolyhedralOutput) -> tuple[np.ndarray, np.ndarray] | None:
    """The face coordinates of a channel: F (K, n), whose rows are the distinct half-space
    normals a / |a|_C of all its terms, and the offsets c (K,) of the faces along them (z = F h
    crosses face k at z_k = c_k, with width sqrt(V) when h ~ N(omega, V C)). None unless there
    are exactly K = len(basis) distinct normals, each with one offset (then every face is a
    coordinate plane of z and Z_y depends on omega through z = F omega only)."""
    K = len(ch.basis)
    if K == 0:
        return None
    C = np.asarray(ch.weights, dtype=float)
    normals: list[np.ndarray] = []
    offsets: list[set] = []
    for ts in ch.terms:
        for t in ts:
            for row, b in zip(t.A, t.b):
                a = np.asarray(row, dtype=float)
                s = math.sqrt(float(a * a @ C))
                if s == 0:
                    continue
                a, b = a / s, b / s
                j = int(np.flatnonzero(np.abs(a) > 1e-12)[0])
                if a[j] < 0:
                    a, b = -a, -b
                for k, f in enumerate(normals):
                    if np.max(np.abs(f - a)) < 1e-12:
                        offsets[k].add(round(float(b), 12))
                        break
                else:
                    normals.append(a)
                    offsets.append({round(float(b), 12)})
    if len(normals) != K or any(len(o) != 1 for o in offsets):
        return None
    F = np.array(normals)
    if np.linalg.matrix_rank(F) != K:
        return None
    return F, np.array([o.pop() for o in offsets])


def _face_nodes(ch: PolyhedralOutput, frame, q: float, V: float,
                step: float) -> tuple[np.ndarray, np.ndarray, float]:
    """omega nodes (N, n), weights and the pruned weight of the face rule of step ``step``:
    z ~ N(0, q R), R = F C F^T, on the tensor grid z_k = c_k + sqrt(V) x(t_k), t_k in step Z;
    omega = C F^T R^-1 z (the conditional mean given z: F omega = z)."""
    F, c = frame
    C = np.diag(np.asarray(ch.weights, dtype=float))
    R = F @ C @ F.T
    sv, s = math.sqrt(V), FACE_TRANSITION
    beta = max(FACE_COARSE * math.sqrt(q / V) - 1.0, 0.0)
    lim = FACE_WINDOW * math.sqrt(q)
    axes, wts = [], []
    for k in range(len(c)):
        # x(t) >= (1 + beta) t - beta s for t >= 0: these t cover the window on both sides
        hi = ((lim - c[k]) / sv + beta * s) / (1 + beta)
        lo = ((-lim - c[k]) / sv - beta * s) / (1 + beta)
        t = step * np.arange(math.floor(lo / step), math.ceil(hi / step) + 1)
        th = np.tanh(t / s)
        axes.append(c[k] + sv * (t + beta * (t - s * th)))
        wts.append(step * sv * (1.0 + beta * th * th))
    grids = np.meshgrid(*axes, indexing="ij")
    z = np.stack([g.ravel() for g in grids], axis=1)
    w = np.ones(z.shape[0])
    for g in np.meshgrid(*wts, indexing="ij"):
        w = w * g.ravel()
    cov = q * R
    _, logdet = np.linalg.slogdet(2 * np.pi * cov)
    w = w * np.exp(-0.5 * np.einsum("ni,ij,nj->n", z, np.linalg.inv(cov), z) - 0.5 * logdet)
    keep = w > FACE_PRUNE * w.max()
    omega = z[keep] @ np.linalg.solve(R, F @ C)
    return omega, w[keep], float(w[~keep].sum())


def face_moments(ch: PolyhedralOutput, *, q: float, V: float, step: float,
                 rule: pt.PolytopeRule = FAST_RULE) -> tuple[float, float, float, float, int]:
    """(E(q, V), Psi_out(q, V), bar on E, bar on Psi_out, nodes) on the face rule of step
    ``step`` (q > 0): the bars add (pruned weight + the Gaussian mass outside the window) times
    the integrands' bounds n / V and Y / e to the engine's bar."""
    frame = face_frame(ch)
    require(frame is not None, "channel", "one offset on each of K distinct face normals (the "
            "face rule over omega)", ch.name)
    require(math.isfinite(q) and q > 0, "q", "a finite real > 0", q)
    require(math.isfinite(V) and V > 0, "V", "a finite real > 0", V)
    omega, wt, pruned = _face_nodes(ch, frame, q, V, step)
    e, psi, bar = _node_moments(ch, omega, wt, V=V, rule=rule, screen=True)
    tail = len(frame[1]) * math.erfc(FACE_WINDOW / math.sqrt(2.0))
    lost = pruned + tail
    return e, psi, bar + lost * ch.dim / V, lost * len(ch.outcomes) / math.e, len(wt)


def face_estimate(ch: PolyhedralOutput, *, q: float, V: float,
                  steps: tuple[float, float] = FACE_STEPS,
                  rule: pt.PolytopeRule = FAST_RULE) -> tuple[Estimate, Estimate]:
    """E(q, V) and Psi_out(q, V) by the face rule (docs/polyhedral.md): the value of step
    ``steps[1]``, error = |difference from step ``steps[0]``| + the bars. Serves V << q, where
    tensor Gauss-Hermite over omega converges slowly (the integrand varies on sqrt(V) across the
    faces)."""
    require(len(steps) == 2 and 0 < steps[1] < steps[0] <= 2, "steps",
            "two decreasing steps in (0, 2]", steps)
    e1, p1, b1, c1, n1 = face_moments(ch, q=q, V=V, step=steps[1], rule=rule)
    e0, p0, _, _, _ = face_moments(ch, q=q, V=V, step=steps[0], rule=rule)
    method = (f"face-aligned graded trapezoid rule over omega, steps {steps[0]} and {steps[1]} "
              f"({n1} nodes), polytope engine per node")
    return (Estimate(e1, abs(e1 - e0) + b1, method),
            Estimate(p1, abs(p1 - p0) + c1, method))


def weak_threshold(ch: PolyhedralOutput, *, rule: pt.PolytopeRule = pt.DEFAULT_RULE) -> Estimate:
    """alpha_bar_c = 1 / (2 E(0, 1)) (THEORY 1.2, 1.4), one evaluation at omega = 0, V = 1."""
    E, _ = output_estimate(ch, q=0.0, V=1.0, rule=rule)
    require(E.value > 0, "channel", "informative at q = 0 (E[g^2] > 0)", E.value)
    a = 1.0 / (2.0 * E.value)
    err = E.error / (2.0 * E.value ** 2) + 4 * np.finfo(float).eps * a
    how = ("closed forms, iterated Gauss-Legendre up to rank 3" if event_rank(ch) <= 3 else
           f"cube rule for rank > 3: Genz's separation of variables, {rule.replicates} x "
           f"{rule.points} scrambled Sobol points, seed {rule.seed}")
    return Estimate(a, err, f"1 / (2 E(0, 1)), E by the Gaussian polytope engine at omega = 0 "
                    f"({how}); error = the engine's refinement bar, propagated")


def event_rank(ch: PolyhedralOutput) -> int:
    """The largest rank of a term's half-space normals (the dimension the engine integrates)."""
    return max((int(np.linalg.matrix_rank(np.asarray(t.A, dtype=float), tol=1e-10))
                for ts in ch.terms for t in ts if t.A), default=0)


# ----------------------------------------------------------------------------- identity checks
def check_identities(ch: PolyhedralOutput, *, omega, V: float, step: float = 1e-4,
                     rule: pt.PolytopeRule = pt.DEFAULT_RULE) -> list[dict]:
    """The identities of THEORY 1.2 at the rows of ``omega``: sum_y Z = 1; central finite
    differences (step ``step``) of log Z against g and of g against dg; Nishimori
    sum_y dZ = 0 and sum_y Z (dg + g g^T) = 0. Each row: name, passed, value (worst deviation),
    tolerance, detail. Tolerances: the engine's error bars (propagated), plus step^2 times a
    third-derivative scale for the finite differences."""
    om = np.atleast_2d(np.asarray(omega, dtype=float))
    n = ch.dim
    base = z_out(ch, omega=om, V=V, order=2, rule=rule)
    rows = []

    def row(name, value, tol, detail):
        rows.append({"name": name, "passed": bool(value <= tol), "value": float(value),
                     "tolerance": float(tol), "detail": f"{detail}: {value:.1e} (tol {tol:.1e})"})

    total = base.Z.sum(axis=0)
    row("probabilities sum to 1", float(np.max(np.abs(total - 1))),
        float(np.max(base.Z_error.sum(axis=0))) + 1e-13, "max |sum_y Z_out - 1|")
    live = base.Z > 1e-8
    fd_g = np.zeros_like(base.g)
    fd_dg = np.zeros_like(base.dg)
    fd_tol_g = np.zeros_like(base.g)
    fd_tol_dg = np.zeros_like(base.dg)
    for k in range(n):
        e = np.zeros(n)
        e[k] = step
        plus = z_out(ch, omega=om + e, V=V, order=2, rule=rule)
        minus = z_out(ch, omega=om - e, V=V, order=2, rule=rule)
        with np.errstate(divide="ignore", invalid="ignore"):
            lp = np.log(np.where(plus.Z > 0, plus.Z, 1.0))
            lm = np.log(np.where(minus.Z > 0, minus.Z, 1.0))
            fd_g[..., k] = (lp - lm) / (2 * step)
            fd_tol_g[..., k] = (plus.Z_error / np.abs(plus.Z) + minus.Z_error / np.abs(minus.Z)
                                ) / (2 * step)
        fd_dg[..., :, k] = (plus.g - minus.g) / (2 * step)
        fd_tol_dg[..., :, k] = (plus.g_error + minus.g_error) / (2 * step)
    curv = 1.0 + float(np.max(np.abs(base.dg[live]))) if live.any() else 1.0
    trunc = 10 * step ** 2 * curv ** 1.5
    dev_g = np.where(live[..., None], np.abs(fd_g - base.g) - fd_tol_g - base.g_error, -np.inf)
    row("finite differences of log Z_out vs g_out", float(max(np.max(dev_g), 0.0)), trunc,
        f"max excess of |FD - g_out| over the engine's bars (step {step:g})")
    dev_dg = np.where(live[..., None, None], np.abs(fd_dg - base.dg) - fd_tol_dg
                      - base.dg_error, -np.inf)
    row("finite differences of g_out vs dg_out", float(max(np.max(dev_dg), 0.0)), trunc * curv,
        f"max excess of |FD - dg_out| over the engine's bars (step {step:g})")
    row("Nishimori: sum_y Z g_out = 0", float(np.max(np.abs(base.dZ.sum(axis=0)))),
        float(np.max(base.dZ_error.sum(axis=0))) + 1e-13, "max |sum_y dZ_out/domega|")
    row("Nishimori: sum_y Z (dg_out + g g^T) = 0", float(np.max(np.abs(base.d2Z.sum(axis=0)))),
        float(np.max(base.d2Z_error.sum(axis=0))) + 1e-13, "max |sum_y d2Z_out/domega2|")
    return rows


def check_identities_first_order(ch: PolyhedralOutput, *, omega, V: float, direction,
                                 step: float = 0.05,
                                 rule: pt.PolytopeRule = pt.DEFAULT_RULE) -> list[dict]:
    """The first-order identities of THEORY 1.2 for events of rank > 3 (cube rule: the second
    order and n finite differences cost minutes): sum_y Z = 1, Nishimori sum_y dZ = 0, and the
    central difference of log Z along the unit ``direction`` against g . direction. The same
    seeded points at omega +- step u keep the difference smooth; its tolerance is the engine's
    bars over 2 step plus step^2 times a third-derivative scale (|g|^3 + 1)."""
    om = np.atleast_2d(np.asarray(omega, dtype=float))
    u = np.asarray(direction, dtype=float)
    require(u.shape == (ch.dim,) and np.all(np.isfinite(u)) and np.linalg.norm(u) > 0,
            "direction", f"a nonzero vector of {ch.dim} entries", u.shape)
    require(math.isfinite(step) and 0 < step <= 0.2, "step", "in (0, 0.2]", step)
    u = u / np.linalg.norm(u)
    base = z_out(ch, omega=om, V=V, order=1, rule=rule)
    plus = z_out(ch, omega=om + step * u, V=V, order=0, rule=rule)
    minus = z_out(ch, omega=om - step * u, V=V, order=0, rule=rule)
    rows = []

    def row(name, value, tol, detail):
        rows.append({"name": name, "passed": bool(value <= tol), "value": float(value),
                     "tolerance": float(tol), "detail": f"{detail}: {value:.1e} (tol {tol:.1e})"})

    row("probabilities sum to 1", float(np.max(np.abs(base.Z.sum(axis=0) - 1))),
        float(np.max(base.Z_error.sum(axis=0))) + 1e-13, "max |sum_y Z_out - 1|")
    live = (base.Z > 1e-3) & (plus.Z > 0) & (minus.Z > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        fd = (np.log(np.where(live, plus.Z, 1.0)) - np.log(np.where(live, minus.Z, 1.0))) / (
            2 * step)
        tol = (plus.Z_error / np.abs(plus.Z) + minus.Z_error / np.abs(minus.Z)) / (2 * step)
    g_u = base.g @ u
    g_u_err = base.g_error @ np.abs(u)
    scale = 1.0 + float(np.max(np.abs(base.g[live]))) if live.any() else 1.0
    trunc = step ** 2 * scale ** 3
    dev = np.where(live, np.abs(fd - g_u) - tol - g_u_err, -np.inf)
    row("finite differences of log Z_out vs g_out", float(max(np.max(dev), 0.0)), trunc,
        f"max excess of |FD - g_out . u| over the engine's bars (step {step:g}, one direction)")
    row("Nishimori: sum_y Z g_out = 0", float(np.max(np.abs(base.dZ.sum(axis=0)))),
        float(np.max(base.dZ_error.sum(axis=0))) + 1e-13, "max |sum_y dZ_out/domega|")
    return rows


# ----------------------------------------------------------------------------- SE fixed points
#: Gauss-Hermite orders of the SE (root on the first, corrected and checked on the second)
SE_ORDERS = (12, 16)
#: the smallest V the Gauss-Hermite rule over omega serves: below it V << q and it converges too
#: slowly for its order difference to bound its error (measured, docs/polyhedral.md); below it
#: the SE uses the face rule (:func:`face_estimate`)
V_GH = 0.35
#: the smallest error V the SE serves (the face rule, measured down to it: docs/polyhedral.md)
V_MIN = 0.05
#: the scan of V for sign changes of the SE residual (Gauss-Hermite order 6)
V_SCAN = (0.35, 0.45, 0.55, 0.7, 0.85, 1.0)
#: the scan below V_GH (face rule of step FACE_SCAN_STEP), when the residual at V_GH is negative
V_SCAN_LOW = (V_MIN, 0.1, 0.15, 0.2, 0.275, V_GH)
FACE_SCAN_STEP = 1.4


def _residual(ch, *, alpha: float, rho: float, V: float, rule, order: int | None = None,
              step: float | None = None) -> tuple:
    """mmse(1 / q_hat) - V with q_hat = 2 alpha E(Q0 - V, V) (THEORY 1.1); also q_hat, Psi_out,
    the bar on E (the engine's; the face rule's adds its pruned weight). E by Gauss-Hermite of
    ``order`` or by the face rule of ``step``."""
    q = 1.0 + rho - V
    if step is None:
        E, psi, bar, _ = output_moments(ch, q=q, V=V, order=order, rule=rule)
    else:
        E, psi, bar, _, _ = face_moments(ch, q=q, V=V, step=step, rule=rule)
    q_hat = 2 * alpha * E
    return float(wishart.mmse(1.0 / q_hat, rho=rho)) - V, q_hat, psi, bar


def _roots(ch, *, alpha: float, rho: float, grid, r_grid, coarse: dict, fine: dict, rule,
           xtol: float, t0: float, label: str) -> list:
    """Each sign change of ``r_grid`` on ``grid``: Brent's method on the ``coarse`` rule, one
    Newton step on the ``fine`` rule; error = that step + the bars over |1 - slope|."""
    out = []
    for (a, ra), (b, rb) in zip(zip(grid, r_grid), zip(grid[1:], r_grid[1:])):
        if ra * rb > 0:
            continue
        dr = (rb - ra) / (b - a)  # d residual / dV = slope - 1 (coarse)

        def f(v):
            return _residual(ch, alpha=alpha, rho=rho, V=v, rule=rule, **coarse)[0]

        fa, fb = f(a), f(b)
        if fa * fb > 0:
            raise ConvergenceError(f"the SE bracket [{a}, {b}] of the scan is lost on the "
                                   f"{label}", last_iterate=(a, b), residual=(fa, fb))
        v0 = brentq(f, a, b, xtol=xtol, rtol=1e-12)
        r1, q_hat, psi, bar = _residual(ch, alpha=alpha, rho=rho, V=v0, rule=rule, **fine)
        out.append({**newton_row(v0=v0, r1=r1, dr=dr, q_hat=q_hat, psi=psi, bar=bar,
                                 alpha=alpha, rho=rho, tol=xtol),
                    "rule": label, "seconds": time.perf_counter() - t0})
    return out


def newton_row(*, v0: float, r1: float, dr: float, q_hat: float, psi: float, bar: float,
               alpha: float, rho: float, tol: float) -> dict:
    """One SE fixed point from a root ``v0`` of the coarse rule's residual mmse(1/q_hat) - V
    and the fine rule's residual ``r1`` there (slope ``dr`` = d residual / dV): one Newton step
    v1 = v0 - r1 / dr; error = |v1 - v0| + (the bar ``bar`` of E through mmse + the prior's
    quadrature bar) / |dr| + ``tol``; phi = -q q_hat / 4 + q_hat Q0 / 4 - I(1/q_hat) + alpha
    Psi_out (THEORY 1.1). Keys q, q_hat, mmse, error, phi, slope, stable."""
    Q0 = 1.0 + rho
    v1 = v0 - r1 / dr
    E = q_hat / (2 * alpha)
    dE = 1e-6 * E
    dmmse = abs(float(wishart.mmse(1.0 / (2 * alpha * (E + dE)), rho=rho))
                - float(wishart.mmse(1.0 / q_hat, rho=rho))) / dE
    prior = wishart.mmse_estimate(1.0 / q_hat, rho=rho).error
    err = abs(v1 - v0) + (dmmse * bar + prior) / abs(dr) + tol
    q = Q0 - v1
    I_S = float(wishart.mutual_information(1.0 / q_hat, rho=rho))
    phi = -q * q_hat / 4 + q_hat * Q0 / 4 - I_S + alpha * psi
    return {"q": q, "q_hat": q_hat, "mmse": v1, "error": err, "phi": phi, "slope": dr + 1.0,
            "stable": bool(abs(dr + 1.0) < 1)}


def fixed_points(ch: PolyhedralOutput, *, alpha: float, rho: float,
                 orders: tuple[int, int] = SE_ORDERS, rule: pt.PolytopeRule = FAST_RULE) -> list:
    """The SE fixed points V = mmse(1 / (2 alpha E(Q0 - V, V))) with V in [V_MIN, 1] (THEORY
    1.1): sign changes on :data:`V_SCAN` (Gauss-Hermite order 6), Brent's method on
    ``orders[0]``, one Newton step on ``orders[1]``; error = that step + the engine's and the
    prior's bars over |1 - slope|. When the residual at V_GH is negative (a fixed point below
    it), the same on :data:`V_SCAN_LOW` with the face rule (scan step FACE_SCAN_STEP, Brent on
    FACE_STEPS[0], Newton on FACE_STEPS[1]). Each: q, q_hat, mmse, error, phi, slope, stable,
    orders, rule, seconds. A root below V_MIN (or below V_GH for a channel without a face
    frame, :func:`face_frame`) raises ConvergenceError."""
    require(math.isfinite(alpha) and alpha > 0, "alpha", "a finite real > 0", alpha)
    require(math.isfinite(rho) and rho > 0, "rho", "a finite real > 0", rho)
    t0 = time.perf_counter()
    r_scan = [_residual(ch, alpha=alpha, rho=rho, V=v, order=6, rule=rule)[0] for v in V_SCAN]
    out = []
    if r_scan[0] < 0:
        if face_frame(ch) is None:
            raise ConvergenceError(
                f"the SE residual is already negative at V = {V_GH}: a fixed point lies below "
                "it, where the Gauss-Hermite rule over omega does not serve (V << q) and this "
                "channel's faces are not coordinate planes of K face normals (no face rule)",
                last_iterate=V_GH, residual=r_scan[0])
        r_low = [_residual(ch, alpha=alpha, rho=rho, V=V_SCAN_LOW[0], step=FACE_SCAN_STEP,
                           rule=rule)[0]]
        if r_low[0] < 0:
            raise ConvergenceError(
                f"the SE residual is already negative at V = {V_MIN}: a fixed point lies below "
                "it, where the face rule over omega is not verified", last_iterate=V_MIN,
                residual=r_low[0])
        r_low += [_residual(ch, alpha=alpha, rho=rho, V=v, step=FACE_SCAN_STEP, rule=rule)[0]
                  for v in V_SCAN_LOW[1:]]
        out += _roots(ch, alpha=alpha, rho=rho, grid=V_SCAN_LOW, r_grid=r_low,
                      coarse={"step": FACE_STEPS[0]}, fine={"step": FACE_STEPS[1]}, rule=rule,
                      xtol=1e-7, t0=t0, label=f"face rule, steps {FACE_STEPS}")
    out += _roots(ch, alpha=alpha, rho=rho, grid=V_SCAN, r_grid=r_scan,
                  coarse={"order": orders[0]}, fine={"order": orders[1]}, rule=rule, xtol=1e-9,
                  t0=t0, label=f"Gauss-Hermite, orders {tuple(orders)}")
    for f in out:
        f["orders"] = list(orders)
    if not out:
        raise ConvergenceError(f"no SE fixed point bracketed in V in [{V_MIN}, 1]",
                               last_iterate=list(V_SCAN), residual=r_scan)
    return out


# ----------------------------------------------------------------------------- generalisation error
#: Gauss-Hermite orders of e_gen (coarse, fine): the omega-integrand sum_y Z_y |r_y|^2 -
#: |E[y | omega]|^2 is as smooth as the SE's, and orders 8 and 12 agree to ~1e-7 at V >= V_MIN
EGEN_ORDERS = GH_ORDERS
#: Gauss-Hermite order of the slope d e_gen / dV (a central difference: a few digits suffice)
EGEN_SLOPE_ORDER = 6
#: relative step of the plug-in's slope in V (joint route, same seeded cube points: smooth)
PLUGIN_SLOPE_STEP = 0.05


def readout_matrix(ch: PolyhedralOutput, readout) -> np.ndarray:
    """The read-out vectors r_y as rows (outcomes x components), checked."""
    R = np.asarray(readout, dtype=float)
    if R.ndim == 1:
        R = R[:, None]
    require(R.ndim == 2 and R.shape[0] == len(ch.outcomes) and np.all(np.isfinite(R)),
            "readout", f"{len(ch.outcomes)} finite rows (one vector r_y per outcome)", R.shape)
    return R


def _bayes_node_sum(ch: PolyhedralOutput, R: np.ndarray, *, q: float, V: float,
                    order: int | None = None, rule: pt.PolytopeRule,
                    step: float | None = None) -> tuple[float, float, int]:
    """E_omega [sum_y Z_y |r_y|^2 - |sum_y Z_y r_y|^2] on the Gauss-Hermite rule of ``order``
    (or the face rule of ``step``: its pruned weight times max |r_y|^2 joins the bar), the
    engine's bar on it (|d/dZ_y| x Z_error_y) and the number of nodes."""
    lost = 0.0
    if step is None:
        omega, wt = _nodes(ch, q, order)
    else:
        omega, wt, pruned = _face_nodes(ch, face_frame(ch), q, V, step)
        lost = (pruned + len(ch.basis) * math.erfc(FACE_WINDOW / math.sqrt(2.0))) * float(
            np.max((R * R).sum(axis=1)))
    out = z_out(ch, omega=omega, V=V, order=0, rule=rule)
    Z, Ze = out.Z, out.Z_error  # (Y, N)
    norm2 = (R * R).sum(axis=1)
    yhat = Z.T @ R  # (N, dim): E[y | omega]
    node = Z.T @ norm2 - (yhat * yhat).sum(axis=1)
    bar = (np.abs(norm2[:, None] - 2.0 * R @ yhat.T) * Ze).sum(axis=0)
    return float(node @ wt), float(bar @ wt) + lost, len(wt)


def _marginal(A, b, cov, rule) -> tuple[float, float]:
    mo = pt.gaussian_polytope(A=A, b=b, omega=np.zeros((1, cov.shape[0])), cov=cov, order=0,
                              rule=rule)
    return float(mo.mass[0]), float(mo.mass_error[0])


def likelihood_at_zero(ch: PolyhedralOutput, *,
                       rule: pt.PolytopeRule = pt.DEFAULT_RULE) -> tuple[np.ndarray, np.ndarray]:
    """P(y | h = 0) for every outcome, with error bars: lim_{V -> 0+} Z_y(omega = 0; V). A row
    with b > 0 holds, b < 0 fails; rows with b = 0 (h = 0 on their hyperplane) are tied and
    kept as the cone {A_tied h <= 0} under N(0, C): the tie broken by an infinitesimal Gaussian
    perturbation (Phi(0) = 1/2 for one row). Used by the plug-in error at q = 0."""
    C = np.diag(np.asarray(ch.weights, dtype=float))
    P = np.zeros(len(ch.outcomes))
    Pe = np.zeros(len(ch.outcomes))
    for y, ts in enumerate(ch.terms):
        for t in ts:
            if not t.A:
                P[y] += t.weight
                continue
            A, b = np.asarray(t.A, dtype=float), np.asarray(t.b, dtype=float)
            tol = 1e-12 * (1.0 + np.abs(A).sum(axis=1))
            if np.any(b < -tol):
                continue
            tied = np.abs(b) <= tol
            if not tied.any():
                P[y] += t.weight
                continue
            m, e = _marginal(A[tied], np.zeros(int(tied.sum())), C, rule)
            P[y] += t.weight * m
            Pe[y] += abs(t.weight) * e
    return P, Pe


def pair_probabilities(ch: PolyhedralOutput, *, q: float, V: float, second: str,
                       rule: pt.PolytopeRule = pt.DEFAULT_RULE) -> dict:
    """Joint outcome probabilities by one Gaussian polytope per pair of terms (THEORY 1.5):
    u ~ N(0, Q0 C) (a sample's h, Q0 = q + V) and a second vector u' sharing omega:
    ``second`` = "draw" (u' = omega + an independent sqrt(V) noise: h' ~ N(0, Q0 C)) or
    "omega" (u' = omega ~ N(0, q C)); Cov(u, u') = q C. Returns M (Y, Y') = E[P(y | u)
    P(y' | u')] with M_error, and the marginals P(y) = E P(y | u), P'(y') with errors. The
    pair {A_k u <= b_k, A_k' u' <= b_k'} lives in 2n dimensions (rank up to twice the
    channel's: the engine's cube rule, Monte-Carlo grade with a refinement bar, at rank >= 4).
    ``second`` = "omega" at q = 0 uses :func:`likelihood_at_zero`."""
    require(second in ("draw", "omega"), "second", "draw or omega", second)
    require(math.isfinite(q) and q >= 0 and math.isfinite(V) and V > 0, "q, V",
            "q >= 0 and V > 0, finite", (q, V))
    n = ch.dim
    C = np.diag(np.asarray(ch.weights, dtype=float))
    Q0 = q + V
    s = Q0 if second == "draw" else q
    cov_u, cov_s = Q0 * C, s * C
    Y = len(ch.outcomes)
    memo: dict = {}

    def marg(t, cov, tag):
        key = (tag, t.A, t.b)
        if key not in memo:
            memo[key] = (1.0, 0.0) if not t.A else _marginal(t.A, t.b, cov, rule)
        return memo[key]

    def probabilities(cov, tag):
        """P(y) = sum_k w_k P(A_k x <= b_k) per output and its error, x ~ N(0, cov)."""
        P, Pe = np.zeros(Y), np.zeros(Y)
        for y, ts in enumerate(ch.terms):
            for t in ts:
                m, e = marg(t, cov, tag)
                P[y] += t.weight * m
                Pe[y] += abs(t.weight) * e
        return P, Pe

    P, Pe = probabilities(cov_u, "u")
    if second == "omega" and q == 0:
        P2, P2e = likelihood_at_zero(ch, rule=rule)
        M = np.outer(P, P2)
        Me = np.outer(Pe, np.abs(P2)) + np.outer(np.abs(P), P2e)
        return {"M": M, "M_error": Me, "P": P, "P_error": Pe, "P2": P2, "P2_error": P2e}
    P2, P2e = probabilities(cov_s, "s")
    cov = np.block([[cov_u, q * C], [q * C, cov_s]])
    M = np.zeros((Y, Y))
    Me = np.zeros((Y, Y))
    for y, ts in enumerate(ch.terms):
        for y2, ts2 in enumerate(ch.terms):
            for t in ts:
                for t2 in ts2:
                    w = t.weight * t2.weight
                    if not t.A and not t2.A:
                        m, e = 1.0, 0.0
                    elif not t2.A:
                        m, e = marg(t, cov_u, "u")
                    elif not t.A:
                        m, e = marg(t2, cov_s, "s")
                    else:
                        key = ("pair", t.A, t.b, t2.A, t2.b)
                        if key not in memo:
                            A = np.zeros((len(t.A) + len(t2.A), 2 * n))
                            A[:len(t.A), :n] = t.A
                            A[len(t.A):, n:] = t2.A
                            memo[key] = _marginal(A, np.concatenate([t.b, t2.b]), cov, rule)
                        m, e = memo[key]
                    M[y, y2] += w * m
                    Me[y, y2] += abs(w) * e
    return {"M": M, "M_error": Me, "P": P, "P_error": Pe, "P2": P2, "P2_error": P2e}


def plugin_error(ch: PolyhedralOutput, readout, *, q: float, V: float,
                 rule: pt.PolytopeRule = pt.DEFAULT_RULE) -> Estimate:
    """e_plugin = E ||y(h) - y(omega)||^2 = sum_{y, y'} |r_y - r_y'|^2 E[P(y | h) P(y' | omega)]
    (the channel applied at omega, its noise drawn independently; THEORY 1.5) by
    :func:`pair_probabilities` (no quadrature over omega: the indicator of omega is part of the
    polytope). Error: the engine's bars, propagated."""
    R = readout_matrix(ch, readout)
    pp = pair_probabilities(ch, q=q, V=V, second="omega", rule=rule)
    norm2 = (R * R).sum(axis=1)
    D = np.maximum(norm2[:, None] + norm2[None, :] - 2.0 * R @ R.T, 0.0)
    value = float((D * pp["M"]).sum())
    err = float((D * pp["M_error"]).sum()) + 1e-15 * (1.0 + abs(value))
    return Estimate(max(value, 0.0), err, "sum_{y,y'} |r_y - r_y'|^2 P(y(h) = y, y(omega) = y') "
                    "by Gaussian polytopes in (h, omega) (2n dimensions)" + (
                        "; at q = 0, P(y | h = 0) with ties broken by an infinitesimal Gaussian "
                        "perturbation" if q == 0 else ""))


def plugin_estimate(ch: PolyhedralOutput, readout, *, q: float, V: float,
                    V_error: float = 0.0,
                    rule: pt.PolytopeRule = pt.DEFAULT_RULE) -> Estimate:
    """:func:`plugin_error` plus 2 |d e_plugin / dV| ``V_error`` (Q0 = q + V fixed; the slope by
    a central difference of step :data:`PLUGIN_SLOPE_STEP` V on the same seeded rule, one-sided
    at q = 0, doubled for its own error). extra: slope_V."""
    require(math.isfinite(V_error) and V_error >= 0, "V_error", "a finite real >= 0", V_error)
    plug = plugin_error(ch, readout, q=q, V=V, rule=rule)
    if V_error == 0:
        return Estimate(plug.value, plug.error, plug.method, extra={"slope_V": None})
    dp = min(PLUGIN_SLOPE_STEP * V, 0.5 * q) if q > 0 else PLUGIN_SLOPE_STEP * V
    up = min(dp, q)
    p_hi = plugin_error(ch, readout, q=q - up, V=V + up, rule=rule).value
    p_lo = plugin_error(ch, readout, q=q + dp, V=V - dp, rule=rule).value
    slope = abs(p_hi - p_lo) / (up + dp)
    return Estimate(plug.value, plug.error + 2 * slope * V_error, plug.method,
                    extra={"slope_V": slope})


def joint_bayes_error(ch: PolyhedralOutput, readout, *, q: float, V: float,
                      rule: pt.PolytopeRule = pt.DEFAULT_RULE) -> Estimate:
    """e_gen by a route without quadrature over omega (an independent check of
    :func:`generalisation_error`): E||y||^2 - E||E[y | omega]||^2 with
    E||E[y | omega]||^2 = sum_{y, y'} r_y . r_y' P(y(h) = y, y(h') = y'), h, h' two draws given
    omega (:func:`pair_probabilities`, second = "draw")."""
    R = readout_matrix(ch, readout)
    pp = pair_probabilities(ch, q=q, V=V, second="draw", rule=rule)
    norm2 = (R * R).sum(axis=1)
    G = R @ R.T
    value = float(norm2 @ pp["P"] - (G * pp["M"]).sum())
    err = float(norm2 @ pp["P_error"] + (np.abs(G) * pp["M_error"]).sum())
    return Estimate(value, err, "E||y||^2 - sum r_y . r_y' P(y(h) = y, y(h') = y') by Gaussian "
                    "polytopes in (h, h') (2n dimensions)")


def generalisation_error(ch: PolyhedralOutput, readout, *, q: float, V: float,
                         V_error: float = 0.0, orders: tuple[int, int] | None = None,
                         rule: pt.PolytopeRule = FAST_RULE,
                         plugin_rule: pt.PolytopeRule = pt.DEFAULT_RULE) -> Estimate:
    """e_gen = E||y||^2 - E_omega ||sum_y Z_y(omega) r_y||^2 (THEORY 1.5) of a polyhedral
    channel whose outcome y reads as the real vector ``readout[y]``, at (q, V): the SE's tensor
    Gauss-Hermite rule over omega (:func:`_nodes`), orders ``orders`` (error = their difference
    + the engine's bar; at q = 0 one evaluation at omega = 0; None: :data:`EGEN_ORDERS`; at
    V < V_GH the face rule instead, steps FACE_STEPS, where the channel has a face frame),
    plus 2 |d e_gen / dV| V_error
    (slope by a central difference at Q0 fixed on order :data:`EGEN_SLOPE_ORDER`, doubled for
    its own error). extra: plugin, plugin_error (:func:`plugin_error`, plus 2 |d e_plugin / dV|
    V_error), slope_V, plugin_slope_V, nodes."""
    require(math.isfinite(q) and q >= 0, "q", "a finite real >= 0", q)
    require(math.isfinite(V) and V > 0, "V", "a finite real > 0", V)
    require(math.isfinite(V_error) and V_error >= 0, "V_error", "a finite real >= 0", V_error)
    orders = EGEN_ORDERS if orders is None else orders
    require(len(orders) == 2 and 2 <= orders[0] < orders[1] <= 40, "orders",
            "two increasing integers in 2..40", orders)
    R = readout_matrix(ch, readout)
    # below V_GH tensor Gauss-Hermite converges slowly: the face rule where the channel has one
    face = q > 0 and V < V_GH and face_frame(ch) is not None
    fine = {"step": FACE_STEPS[1]} if face else {"order": orders[1]}
    coarse = {"step": FACE_STEPS[0]} if face else {"order": orders[0]}
    slope_rule = coarse if face else {"order": EGEN_SLOPE_ORDER}
    b1, bar1, n1 = _bayes_node_sum(ch, R, q=q, V=V, rule=rule, **fine)
    if q == 0:
        err = bar1
        method = "at q = 0 one evaluation at omega = 0"
    else:
        b0, _, _ = _bayes_node_sum(ch, R, q=q, V=V, rule=rule, **coarse)
        err = abs(b1 - b0) + bar1
        method = (f"face rule over omega, steps {FACE_STEPS[0]} and {FACE_STEPS[1]} ({n1} nodes)"
                  if face else f"tensor Gauss-Hermite over omega, orders {orders[0]} and "
                  f"{orders[1]} ({n1} nodes)")
    plug = plugin_estimate(ch, R, q=q, V=V, V_error=V_error, rule=plugin_rule)
    extra = {"plugin": plug.value, "plugin_error": plug.error, "nodes": n1,
             "plugin_slope_V": plug.extra["slope_V"]}
    if V_error > 0:
        # central differences at Q0 = q + V fixed (one-sided at q = 0)
        d = min(1e-3 * V, 0.5 * q) if q > 0 else 1e-3 * V
        up = min(d, q)
        hi = _bayes_node_sum(ch, R, q=q - up, V=V + up, rule=rule, **slope_rule)[0]
        lo = _bayes_node_sum(ch, R, q=q + d, V=V - d, rule=rule, **slope_rule)[0]
        slope = abs(hi - lo) / (up + d)
        err += 2 * slope * V_error
        extra["slope_V"] = slope
    return Estimate(max(b1, 0.0), err,
                    "E||y||^2 - E||E[y|omega]||^2, E[y|omega] = sum_y Z_y(omega) r_y by the "
                    f"Gaussian polytope engine, {method}; error = the orders' difference + the "
                    f"engine's bar", extra={**extra, "plugin_method": plug.method})
