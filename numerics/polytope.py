"""Gaussian polytope moments: the numeric core of piecewise (polyhedral) channels (THEORY 1.1, 1.4).

For h ~ N(omega, Sigma) in R^d and a polytope {h : A h <= b} (m rows) this module computes

    Z = P(A h <= b),   g_out = d log Z / d omega,   dg_out = d g_out / d omega,

and with them the truncated moments E[(h - omega) 1] = Sigma g Z and
E[(h - omega)(h - omega)^T 1] = Sigma (dg + g g^T) Z Sigma + Z Sigma.

**Reduction to masses of faces (Tallis).** Whiten h = omega + L z (Sigma = L L^T): the polytope is
{B z <= c}, B = A L, c = b - A omega. With P(c) = P(B z <= c), its gradient and Hessian in c are
masses of the faces of codimension 1 and 2,

    dP/dc_i        = N(c_i; 0, |b_i|^2) P(B z <= c | b_i z = c_i),
    d2P/dc_i dc_j  = N((c_i, c_j); 0, G_ij) P(B z <= c | b_i z = c_i, b_j z = c_j)   (i != j),
    d2P/dc_i^2     = -(c_i / |b_i|^2) dP/dc_i - sum_{j != i} (b_i . b_j / |b_i|^2) d2P/dc_i dc_j,

(G_ij the Gram matrix of b_i, b_j; parallel pairs give 0), and since d/domega = -A^T d/dc,

    g_out = -A^T grad P / P,    dg_out = A^T Hess P A / P - g_out g_out^T.

Every face is again a Gaussian polytope (in dimension d - 1 or d - 2), so one routine, the mass,
serves everything. Rows that vanish on a face are indicators 1[c_k >= 0]; where c_k = 0
identically (a row implied by two others on their common face, e.g. hardmax's cycles) the tie is
broken by a fixed symbolic perturbation of c carried through every face, so that all faces see
the same perturbed polytope (simulation of simplicity) and the moments are its limit.

**The mass.** After dropping vanishing rows and projecting onto the row space of B (rank r):
- r <= 1: an interval, Phi(hi) - Phi(lo), closed form;
- r = 2 with two rows (correlation |rho| <= 0.9): Phi2 (:func:`special_functions.np_phi2`), so m <= 2
  reproduces the closed forms Phi and Phi2 to ~1e-15;
- r <= ``rule.nested_max_rank`` (default 3): iterated Gauss-Legendre. The mass of the slice at z_1
  is analytic in z_1 between the critical values where {z_1 = t} contains a face of the polytope
  (t = lambda^T c_S for every independent row set S whose span contains e_1), so z_1 is integrated
  on [-L, L] split at those values and at a fixed grid, ``nodes`` Gauss points per piece, and
  the slice recursively. Error: |fine - coarse| (two node counts) + the tail mass outside
  [-L, L] per level;
- larger r: Genz's separation of variables (LQ of B with the rows in Genz and Bretz's priority
  order at the median c: one row per variable, the others on the last) on the unit cube with
  Owen-scrambled Sobol points, seeded; the last ``inner_rank`` variables (default 1) are
  integrated exactly (closed form, or the iterated rule for 2-3).
  Error: |fine - coarse| (4x more points) + 3 standard errors of the fine mean over the
  replicates. This is Monte-Carlo-grade (~1e-6 at the defaults; hardmax at T = 3 has r = 5: use
  :mod:`aim_sym.numerics.hardmax_se` where speed or 1e-10 matter).

**Far outside** (docs/polyhedral.md, "Far outside a polytope"): every mass is carried as
exp(s) v with s = -|z*|^2 / 2 at the whitened polytope's point z* nearest 0, the iterated rule's
window follows z* (graded towards it), closed forms use erfcx and the cube rule works in logs, so
Z (as ``log_mass``), g_out and dg_out keep their relative accuracy, with relative bars, at any
distance (tested to 38 standard deviations; log Z down to -13000).

**Noisy outputs**: :func:`noisy_channel_z_out` serves P(y | h) = sum_k 1[A_k h <= b_k]
N(y; L_k h + l_k, Delta) with the same machinery under the conditional law of h given y.

**Noiseless polyhedral channel as data** (:class:`PolyhedralChannel`): a tuple of pieces, one per
discrete outcome y, each listing its polytope (A_y, b_y) in h (``A`` as rows of floats), and the
per-entry variance weights w (Var h_k = V w_k; the AIM uses w_ab = 1 + delta_ab). P(y | h) =
1[A_y h <= b_y]; the pieces must tile R^d up to measure zero (checked numerically by
sum_y Z_y = 1). :func:`channel_z_out` returns Z_out(y; omega, V), g_out and dg_out with errors.
Built-ins: :func:`hardmax_channel` (T = 2..4), :func:`sign_pattern_channel` (any half-spaces).
See docs/polyhedral.md for the measured accuracy and cost.
"""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy.special import erfcx, log_ndtr, ndtr, ndtri_exp

from .records import require, standard_error
from .special_functions import np_phi2

__all__ = ["PolytopeRule", "PolytopeMoments", "gaussian_polytope", "polytope_mass", "Piece",
           "PolyhedralChannel", "ChannelOutput", "channel_z_out", "hardmax_channel",
           "sign_pattern_channel", "aim_pairs", "PieceOutput", "observed_polytope",
           "relu_z_out", "polytope_log_mass", "NoisyPiece", "noisy_relu_pieces",
           "noisy_channel_z_out"]

#: a row is "zero" below this fraction of the largest row norm; rank cut of the singular values
ROW_TOL = 1e-10
RANK_TOL = 1e-10
#: |c_k| below this (times 1 + max |c|) on a vanishing row is a tie, broken by the perturbation
TIE_TOL = 1e-11
#: closed forms (Phi, Phi2): error bar (Phi2 is accurate to ~1e-16 absolute for |rho| <= 0.9)
CLOSED_FORM_ERROR = 1e-15
#: rows of the inner arrays of the iterated rule per block (memory ~ 8 m bytes each)
BLOCK = 1 << 18
#: Phi2 serves a wedge (|rho| <= 0.9) whose point nearest 0 lies within this radius (its mass is
#: then >= ~1e-2, so Phi2's absolute 1e-16 is relative too); beyond, the iterated rule
PHI2_RADIUS = 1.5
#: the iterated rule grades its pieces towards the polytope's nearest point beyond this radius
GRADE_RADIUS = 3.0
#: exponents are capped here before exp (an empty face times a large factor stays 0)
EXP_MAX = 700.0
SQRT2 = math.sqrt(2.0)
SQRT2PI = math.sqrt(2.0 * math.pi)
LOG_SQRT2PI = 0.5 * math.log(2.0 * math.pi)


@dataclass(frozen=True)
class PolytopeRule:
    """The quadrature rules of the mass (module docstring). ``nodes``/``coarse_nodes``: Gauss
    points per piece of the iterated rule; ``pieces``: fixed pieces of [-L, L]; ``points``: Sobol
    points per replicate of the fine cube rule (coarse: points / 4), ``replicates`` scrambles
    seeded from ``seed``."""

    nodes: int = 16
    coarse_nodes: int = 12
    pieces: int = 16
    L: float = 8.5
    nested_max_rank: int = 3
    inner_rank: int = 1
    points: int = 1 << 13
    replicates: int = 8
    seed: int = 2026

    def __post_init__(self) -> None:
        for name, lo in (("nodes", 2), ("coarse_nodes", 1), ("pieces", 1), ("nested_max_rank", 1),
                         ("replicates", 2), ("points", 16), ("inner_rank", 1)):
            v = getattr(self, name)
            require(isinstance(v, int) and not isinstance(v, bool) and v >= lo, name,
                    f"an integer >= {lo}", v)
        require(self.inner_rank <= self.nested_max_rank, "inner_rank", "<= nested_max_rank",
                self.inner_rank)
        require(self.coarse_nodes < self.nodes, "coarse_nodes", "< nodes", self.coarse_nodes)
        require(self.points & (self.points - 1) == 0, "points", "a power of 2", self.points)
        require(math.isfinite(self.L) and 5.0 <= self.L <= 40.0, "L", "in [5, 40]", self.L)


DEFAULT_RULE = PolytopeRule()


def _tail(L: float) -> float:
    """P(|N(0,1)| > L)."""
    return float(2.0 * ndtr(-L))


@lru_cache(maxsize=32)
def _gauss01(n: int) -> tuple[np.ndarray, np.ndarray]:
    x, w = np.polynomial.legendre.leggauss(n)
    return (x + 1) / 2, w / 2


# ----------------------------------------------------------------------------- reduction
def _reduce(B: np.ndarray, c: np.ndarray, eps: np.ndarray):
    """Drop vanishing rows (their indicators, ties broken by ``eps``) and project onto the row
    space of B. Returns (B_r (m' x r), c (N x m'), eps (m'), indicator (N))."""
    N = c.shape[0]
    ind = np.ones(N)
    if B.shape[0] == 0:
        return B.reshape(0, 0), c[:, :0], eps[:0], ind
    norms = np.linalg.norm(B, axis=1)
    scale = norms.max()
    zero = norms <= ROW_TOL * scale if scale > 0 else np.ones(len(norms), dtype=bool)
    if zero.any():
        tol = TIE_TOL * (1.0 + np.abs(c).max(axis=1))
        for k in np.flatnonzero(zero):
            ck = c[:, k]
            ok = np.where(np.abs(ck) > tol, ck > 0, eps[k] >= 0)
            ind = ind * ok
        B, c, eps = B[~zero], c[:, ~zero], eps[~zero]
    if B.shape[0] == 0:
        return B.reshape(0, 0), c, eps, ind
    U, s, _ = np.linalg.svd(B, full_matrices=False)
    r = int(np.sum(s > RANK_TOL * s[0]))
    if r < B.shape[1]:
        B = U[:, :r] * s[:r]
    return B, c, eps, ind


def _interval(B: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """P(B z <= c) for z ~ N(0, 1), B a column of nonzero entries, as (s, v): mass = exp(s) v,
    s = -t^2 / 2 at the end t of [lo, hi] nearest 0 (0 if it contains 0). With erfcx,
    Phi(-t) exp(t^2 / 2) = erfcx(t / sqrt 2) / 2, so v keeps its relative accuracy at any
    distance (no underflow, no cancellation beyond that of hi - lo)."""
    b = B[:, 0]
    N = c.shape[0]
    lo = np.full(N, -np.inf)
    hi = np.full(N, np.inf)
    t = c / b
    if np.any(b > 0):
        hi = t[:, b > 0].min(axis=1)
    if np.any(b < 0):
        lo = t[:, b < 0].max(axis=1)
    ok = hi > lo
    far = ok & ((lo > 0) | (hi < 0))
    v = np.zeros(N)
    s = np.zeros(N)
    mid = ok & ~far
    v[mid] = ndtr(hi[mid]) - ndtr(lo[mid])
    if far.any():
        # mirror the lower tail onto the upper one: the interval [a, e] with a > 0
        up = lo[far] > 0
        a = np.where(up, lo[far], -hi[far])
        e = np.where(up, hi[far], -lo[far])
        with np.errstate(over="ignore", invalid="ignore"):
            v[far] = 0.5 * (erfcx(a / SQRT2) - erfcx(e / SQRT2) * np.exp(-0.5 * (e - a) * (e + a)))
        s[far] = -0.5 * a * a
    return s, np.maximum(v, 0.0)


@lru_cache(maxsize=256)
def _projectors_cached(key: bytes, m: int, r: int) -> tuple:
    B = np.frombuffer(key).reshape(m, r)
    out = []
    for k in range(1, min(m, r) + 1):
        for S in itertools.combinations(range(m), k):
            BS = B[list(S)]
            sv = np.linalg.svd(BS, compute_uv=False)
            if sv[-1] <= RANK_TOL * sv[0]:
                continue
            out.append((list(S), BS.T @ np.linalg.inv(BS @ BS.T)))
    return tuple(out)


def _nearest(B: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The point z* of {B z <= c} nearest the origin, per row of c (N, r), and whether the
    polytope is non-empty (N,). z* is the projection of 0 onto the affine hull of the face
    holding it in its relative interior, so the feasible projection of least norm over the
    independent row sets is z*."""
    N, m = c.shape
    r = B.shape[1]
    nrm = np.linalg.norm(B, axis=1)
    Bn, cn = B / nrm[:, None], c / nrm
    z = np.zeros((N, r))
    best = np.where(np.all(cn >= 0, axis=1), 0.0, np.inf)
    out = np.flatnonzero(best > 0)
    if len(out):
        co = cn[out]
        tol = 1e-9 * (1.0 + np.abs(co).max(axis=1))
        bo = best[out]
        zo = z[out]
        key = np.ascontiguousarray(Bn)
        for S, P in _projectors_cached(key.tobytes(), m, r):
            zs = co[:, S] @ P.T
            ok = np.all(zs @ Bn.T <= co + tol[:, None], axis=1)
            n2 = np.einsum("ij,ij->i", zs, zs)
            better = ok & (n2 < bo)
            zo[better] = zs[better]
            bo[better] = n2[better]
        z[out] = zo
        best[out] = bo
    return z, np.isfinite(best)


def _phi2_ok(B: np.ndarray) -> bool:
    if B.shape != (2, 2):
        return False
    n = np.linalg.norm(B, axis=1)
    return abs(float(B[0] @ B[1]) / (n[0] * n[1])) <= 0.9


def _phi2(B: np.ndarray, c: np.ndarray) -> np.ndarray:
    n = np.linalg.norm(B, axis=1)
    rho = float(B[0] @ B[1]) / (n[0] * n[1])
    return np.clip(np.asarray(np_phi2(c[:, 0] / n[0], c[:, 1] / n[1], rho)), 0.0, 1.0)


def _phi2_near(B: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Rows where Phi2 (absolute accuracy ~1e-16) is also relatively accurate: the wedge's
    point nearest 0 within PHI2_RADIUS (its mass is then >= ~1e-2 for |rho| <= 0.9)."""
    z, feas = _nearest(B, c)
    return feas & (np.einsum("ij,ij->i", z, z) <= PHI2_RADIUS ** 2)


@lru_cache(maxsize=256)
def _critical_maps_cached(key: bytes, m: int, r: int) -> np.ndarray:
    B = np.frombuffer(key).reshape(m, r)
    e1 = np.zeros(r)
    e1[0] = 1.0
    rows = []
    for k in range(1, min(m, r) + 1):
        for S in itertools.combinations(range(m), k):
            BS = B[list(S)]
            sv = np.linalg.svd(BS, compute_uv=False)
            if sv[-1] <= RANK_TOL * sv[0]:
                continue  # dependent rows: the same affine hull as an independent subset
            lam, *_ = np.linalg.lstsq(BS.T, e1, rcond=None)
            if np.linalg.norm(BS.T @ lam - e1) > 1e-9:
                continue  # z_1 not constant on this face
            full = np.zeros(m)
            full[list(S)] = lam
            if not any(np.allclose(full, q, atol=1e-12) for q in rows):
                rows.append(full)
    return np.array(rows).reshape(len(rows), m)


def _critical_maps(B: np.ndarray) -> np.ndarray:
    """Matrix Lambda (K x m): the critical values of z_1 are Lambda c (module docstring)."""
    B = np.ascontiguousarray(B, dtype=float)
    return _critical_maps_cached(B.tobytes(), B.shape[0], B.shape[1])


def _outer_rotation(B: np.ndarray) -> np.ndarray:
    """B in coordinates whose first axis is the direction least aligned with the rows (the last
    right singular vector of the normalised rows): in two dimensions the slice masses then vary
    slowly in z_1 even for nearly parallel rows (|rho| -> 1). Measured to hurt in three
    dimensions (1e-7 instead of 1e-10 on the 3-half-space tests), so used at r = 2 only."""
    Bn = B / np.linalg.norm(B, axis=1)[:, None]
    _, _, Vt = np.linalg.svd(Bn, full_matrices=True)
    Q, _ = np.linalg.qr(np.column_stack([Vt[-1], Vt[:-1].T]))
    return B @ Q


def _nested(B: np.ndarray, c: np.ndarray, eps: np.ndarray, rule: PolytopeRule,
            n: int) -> tuple[np.ndarray, np.ndarray]:
    """Iterated Gauss-Legendre in z_1 (split at the critical values) of the slice masses, as
    (s, v) (mass = exp(s) v). The window [z*_1 - L, z*_1 + L] follows the polytope's point z*
    nearest 0, and s = -|z*|^2 / 2: on the polytope |z|^2 >= |z*|^2 + |z - z*|^2 (projection
    onto a convex set), so every weight exp(-x^2 / 2 + s_slice - s) is <= 1 and the mass cut
    off outside the window is at most exp(s) P(|N(0, 1)| > L) per level (a relative bound).
    Where |z*| >= GRADE_RADIUS the fixed pieces are graded geometrically towards z*_1, down
    to ~1 / |z*| (the integrand's scale there)."""
    N, m = c.shape
    gx, gw = _gauss01(n)
    L = rule.L
    if B.shape[1] == 2:
        B = _outer_rotation(B)
    zs, feas = _nearest(B, c)
    s = np.where(feas, -0.5 * np.einsum("ij,ij->i", zs, zs), 0.0)
    Lam = _critical_maps(B)
    h0 = 2 * L / rule.pieces
    R = np.sqrt(-2.0 * s)
    J = np.where(R >= GRADE_RADIUS, np.ceil(np.log2(h0 * (1.0 + R))), 0).astype(int)
    J = np.minimum(J, 16)
    out = np.zeros(N)
    b1 = B[:, 0]
    Bin = B[:, 1:]
    for j in np.unique(J[feas]):
        base = np.linspace(-L, L, rule.pieces + 1)
        if j:
            off = h0 * 0.5 ** np.arange(1, j + 1)
            base = np.concatenate([base, off, -off])
        segs = len(base) - 1 + Lam.shape[0]
        step = max(1, BLOCK // (segs * n))
        rows = np.flatnonzero(feas & (J == j))
        for i in range(0, len(rows), step):
            idx = rows[i:i + step]
            cc = c[idx]
            k = cc.shape[0]
            ctr = zs[idx, 0][:, None]
            crit = np.clip(cc @ Lam.T, ctr - L, ctr + L)
            pts = np.sort(np.concatenate([ctr + base, crit], axis=1), axis=1)
            lo, hi = pts[:, :-1], pts[:, 1:]
            x = lo[..., None] + (hi - lo)[..., None] * gx  # (k, segs, n)
            cin = cc[:, None, None, :] - x[..., None] * b1
            s_in, v_in = _value(Bin, cin.reshape(-1, m), eps, rule, n=n)
            s_in, v_in = s_in.reshape(x.shape), v_in.reshape(x.shape)
            expo = np.where(v_in > 0, -0.5 * x * x + s_in - s[idx][:, None, None], -np.inf)
            w = (hi - lo)[..., None] * gw * np.exp(np.minimum(expo, EXP_MAX)) / SQRT2PI
            out[idx] = np.einsum("kj,kj->k", w.reshape(k, -1), v_in.reshape(k, -1))
    return s, out


def _value(B: np.ndarray, c: np.ndarray, eps: np.ndarray, rule: PolytopeRule, *,
           n: int) -> tuple[np.ndarray, np.ndarray]:
    """The mass as (s, v), mass = exp(s) v, by a deterministic rule (closed forms or the
    iterated rule with ``n`` nodes)."""
    B, c, eps, ind = _reduce(B, c, eps)
    N = c.shape[0]
    if B.shape[0] == 0:
        return np.zeros(N), ind
    r = B.shape[1]
    if r == 1:
        s, v = _interval(B, c)
        return s, ind * v
    s, v = np.zeros(N), np.zeros(N)
    near = _phi2_near(B, c) if _phi2_ok(B) else np.zeros(N, dtype=bool)
    if near.any():
        v[near] = _phi2(B, c[near])
    if not near.all():
        s[~near], v[~near] = _nested(B, c[~near], eps, rule, n)
    return s, ind * np.clip(v, 0.0, 1.0)


# ----------------------------------------------------------------------------- cube rule (Genz)
@lru_cache(maxsize=64)
def _sobol(dim: int, points: int, seed: int) -> np.ndarray:
    from scipy.stats import qmc

    return qmc.Sobol(d=dim, scramble=True, seed=seed).random(points)


def _priority_rows(B: np.ndarray, c0: np.ndarray) -> list[int]:
    """Genz-Bretz ordering at the right-hand side c0: each step takes the row of smallest
    conditional probability, then fixes its whitened variable at the truncated mean."""
    Bw = B.copy()
    cres = c0.astype(float).copy()
    sel: list[int] = []
    for _ in range(B.shape[1]):
        norms = np.linalg.norm(Bw, axis=1)
        ok = norms > ROW_TOL * np.linalg.norm(B, axis=1).max()
        ok[sel] = False
        if not ok.any():
            break
        bnd = np.where(ok, cres / np.where(ok, norms, 1.0), np.inf)
        i = int(np.argmin(bnd))
        e = Bw[i] / norms[i]
        t = bnd[i]
        ybar = -math.sqrt(2 / math.pi) / float(erfcx(-t / SQRT2))  # -phi(t) / Phi(t), stably
        proj = Bw @ e
        cres = cres - proj * ybar
        Bw = Bw - np.outer(proj, e)
        sel.append(i)
    return sel


def _sov_prepare(B: np.ndarray, c0: np.ndarray):
    """LQ of B in the Genz-Bretz order of the rows at c0: rotated rows M = B Q, and for each
    row the variable it bounds (its last nonzero entry)."""
    sel = _priority_rows(B, c0)
    Q, _ = np.linalg.qr(B[sel].T)  # B[sel] Q = R^T, lower triangular
    M = B @ Q
    tol = ROW_TOL * np.abs(M).max()
    last = np.array([int(np.flatnonzero(np.abs(row) > tol)[-1]) for row in M])
    return M, last


def _sov_mean(M: np.ndarray, last: np.ndarray, c: np.ndarray, eps: np.ndarray, x: np.ndarray,
              rule: PolytopeRule) -> np.ndarray:
    """log of the mean of Genz's integrand over the first k = r - inner_rank variables (one
    pivot row each) times the exact mass of the remaining slice (:func:`_value`), over the
    cube points x (P x k), per row of c. In logs throughout (log_ndtr, ndtri_exp): the widths
    and samples keep their relative accuracy however far the polytope lies."""
    N = c.shape[0]
    k_out = x.shape[1]
    P = x.shape[0]
    u = np.zeros((N, P, k_out))
    logp = np.zeros((N, P))
    with np.errstate(divide="ignore", invalid="ignore"):
        lx, l1x = np.log(x), np.log1p(-x)
        for k in range(k_out):
            lo = np.full((N, P), -np.inf)
            hi = np.full((N, P), np.inf)
            for i in np.flatnonzero(last == k):
                t = (c[:, i:i + 1] - u[:, :, :k] @ M[i, :k]) / M[i, k]
                if M[i, k] > 0:
                    hi = np.minimum(hi, t)
                else:
                    lo = np.maximum(lo, t)
            upper = lo > 0  # mirrored onto the lower tail there (no cancellation)
            a_lo, a_hi = np.where(upper, -hi, lo), np.where(upper, -lo, hi)
            la, lb = log_ndtr(a_lo), log_ndtr(a_hi)
            logp += np.where(a_hi > a_lo, lb + np.log(-np.expm1(la - lb)), -np.inf)
            lq = np.clip(np.logaddexp(l1x[:, k] + la, lx[:, k] + lb), -1e4, -1e-16)
            v = ndtri_exp(lq)
            u[:, :, k] = np.where(upper, -v, v)
    rows = np.flatnonzero(last >= k_out)
    cin = c[:, None, rows] - u @ M[rows, :k_out].T  # (N, P, m')
    s_in, v_in = _value(M[rows][:, k_out:], cin.reshape(-1, len(rows)), eps[rows], rule,
                        n=rule.nodes)
    with np.errstate(divide="ignore"):
        lf = np.where((v_in > 0).reshape(N, P), logp + (s_in + np.log(v_in)).reshape(N, P),
                      -np.inf)
    top = lf.max(axis=1)
    top = np.where(np.isfinite(top), top, 0.0)
    with np.errstate(divide="ignore"):
        return top + np.log(np.exp(lf - top[:, None]).mean(axis=1))


def _sov(B: np.ndarray, c: np.ndarray, eps: np.ndarray, rule: PolytopeRule,
         points: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(s, mean, standard error) over the scrambled replicates, mass = exp(s) mean; s is the
    largest replicate's log."""
    M, last = _sov_prepare(B, np.median(c, axis=0))
    r = B.shape[1]
    k_out = r - rule.inner_rank
    reps = []
    step = max(1, (1 << 12) // points)
    for j in range(rule.replicates):
        x = _sobol(k_out, points, rule.seed + 7919 * j)
        v = np.empty(c.shape[0])
        for i in range(0, c.shape[0], step):
            v[i:i + step] = _sov_mean(M, last, c[i:i + step], eps, x, rule)
        reps.append(v)
    reps = np.array(reps)
    s = reps.max(axis=0)
    s = np.where(np.isfinite(s), s, 0.0)
    vals = np.exp(reps - s)
    return s, vals.mean(axis=0), standard_error(vals, axis=0)


# ----------------------------------------------------------------------------- mass with error
def _mass(B: np.ndarray, c: np.ndarray, eps: np.ndarray,
          rule: PolytopeRule) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """P(B z <= c), z ~ N(0, I), for every row of c, as (s, v, e): mass = exp(s) v, its error
    bar exp(s) e (relative accuracy at any distance of the polytope; module docstring)."""
    Br, cr, er, ind = _reduce(B, c, eps)
    N = c.shape[0]
    if Br.shape[0] == 0:
        return np.zeros(N), ind, np.zeros(N)
    r = Br.shape[1]
    if r == 1:
        s, v = _interval(Br, cr)
        return s, ind * v, ind * CLOSED_FORM_ERROR
    if r <= rule.nested_max_rank:
        s, v, e = np.zeros(N), np.zeros(N), np.zeros(N)
        near = _phi2_near(Br, cr) if _phi2_ok(Br) else np.zeros(N, dtype=bool)
        if near.any():
            v[near] = _phi2(Br, cr[near])
            e[near] = CLOSED_FORM_ERROR
        far = ~near
        if far.any():
            s[far], fine = _nested(Br, cr[far], er, rule, rule.nodes)
            _, coarse = _nested(Br, cr[far], er, rule, rule.coarse_nodes)
            v[far] = np.clip(fine, 0.0, 1.0)
            e[far] = np.abs(fine - coarse) + r * _tail(rule.L) + 1e-15
        return s, ind * v, ind * e
    s, fine, se = _sov(Br, cr, er, rule, rule.points)
    sc, coarse, _ = _sov(Br, cr, er, rule, rule.points // 4)
    coarse = coarse * np.exp(np.minimum(sc - s, EXP_MAX))
    err = np.abs(fine - coarse) + 3.0 * se + 1e-15
    return s, ind * np.maximum(fine, 0.0), ind * err


def polytope_mass(*, B, c, rule: PolytopeRule = DEFAULT_RULE) -> tuple[np.ndarray, np.ndarray]:
    """P(B z <= c) for z ~ N(0, I_d) (whitened form), c of shape (N, m) or (m,): the mass and
    its error bar, arrays of shape (N,) (they underflow to 0 beyond ~38 standard deviations:
    :func:`polytope_log_mass` keeps the log)."""
    s, v, e = polytope_log_mass(B=B, c=c, rule=rule)
    f = np.exp(s)
    return f * v, f * e


def polytope_log_mass(*, B, c, rule: PolytopeRule = DEFAULT_RULE
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(s, v, e) with P(B z <= c) = exp(s) v and its error bar exp(s) e, s = -|z*|^2 / 2 at the
    polytope's point z* nearest 0 (the cube rule: the largest replicate's log), so v and e
    keep their relative accuracy however far the polytope lies."""
    B = np.asarray(B, dtype=float)
    require(B.ndim == 2 and B.shape[0] >= 1 and np.all(np.isfinite(B)), "B",
            "a finite (m, d) matrix", B.shape)
    c = np.atleast_2d(np.asarray(c, dtype=float))
    require(c.shape[1] == B.shape[0] and np.all(np.isfinite(c)), "c",
            f"finite, {B.shape[0]} entries per row", c.shape)
    return _mass(B, c, _perturbation(B.shape[0]), rule)


def _perturbation(m: int) -> np.ndarray:
    """The fixed symbolic perturbation of c (only its signs after linear maps are used)."""
    k = np.arange(1, m + 1)
    return np.sqrt(k + 1.0) * 1e-3 * (1.0 + 0.1 * np.sin(7.0 * k))


def _face(B: np.ndarray, c: np.ndarray, eps: np.ndarray, S: tuple[int, ...]):
    """The Gaussian on {B_S z = c_S}: the log of its density there and the polytope of the
    other rows in an orthonormal basis of the complement: (log density (N), B', c', eps')."""
    BS = B[list(S)]
    G = BS @ BS.T
    Gi = np.linalg.inv(G)
    cS = c[:, list(S)]
    log_dens = -0.5 * np.einsum("ni,ij,nj->n", cS, Gi, cS) - (
        len(S) * LOG_SQRT2PI + 0.5 * math.log(np.linalg.det(G)))
    rest = [k for k in range(B.shape[0]) if k not in S]
    # orthonormal complement of the span of B_S
    U, _, _ = np.linalg.svd(BS.T, full_matrices=True)
    Qc = U[:, len(S):]
    coef = B[rest] @ BS.T @ Gi  # c'_k = c_k - b_k . z0, z0 = B_S^T G^-1 c_S
    cp = c[:, rest] - cS @ coef.T
    ep = eps[rest] - coef @ eps[list(S)]
    return log_dens, B[rest] @ Qc, cp, ep


def _rescaled(log_factor: np.ndarray, *values: np.ndarray) -> tuple[np.ndarray, ...]:
    """exp(log_factor) * value for each value, 0 where the value is 0 (an empty face carries
    the scale 0 by convention, whatever the factor)."""
    f = np.exp(np.minimum(log_factor, EXP_MAX))
    return tuple(np.where(v != 0, f * v, 0.0) for v in values)


@dataclass(frozen=True)
class PolytopeMoments:
    """P(c) = P(A h <= b), its gradient and Hessian in c = b - A omega, with error bars, for
    N means omega (THEORY 1.1, 1.4), stored relative to the common factor exp(``log_scale``)
    (N,): P = exp(log_scale) ``scaled_mass`` and so on (``log_scale`` = -|z*|^2 / 2 at the
    whitened polytope's point nearest omega, so the scaled numbers neither underflow nor lose
    relative accuracy far outside). ``A`` (m, d); ``scaled_mass`` (N,); ``scaled_grad`` (N, m);
    ``scaled_hess`` (N, m, m); ``*_error`` the same shapes; ``seconds`` the wall time. The
    properties ``mass``, ``grad``, ``hess`` (and errors) are the unscaled values (they
    underflow to 0 beyond ~38 standard deviations; g_out and dg_out do not)."""

    A: np.ndarray
    log_scale: np.ndarray
    scaled_mass: np.ndarray
    scaled_mass_error: np.ndarray
    scaled_grad: np.ndarray | None = None
    scaled_grad_error: np.ndarray | None = None
    scaled_hess: np.ndarray | None = None
    scaled_hess_error: np.ndarray | None = None
    seconds: float = 0.0

    def _unscaled(self, v: np.ndarray | None) -> np.ndarray | None:
        if v is None:
            return None
        return np.exp(self.log_scale).reshape((-1,) + (1,) * (v.ndim - 1)) * v

    @property
    def mass(self) -> np.ndarray:
        return self._unscaled(self.scaled_mass)

    @property
    def mass_error(self) -> np.ndarray:
        return self._unscaled(self.scaled_mass_error)

    @property
    def grad(self) -> np.ndarray | None:
        return self._unscaled(self.scaled_grad)

    @property
    def grad_error(self) -> np.ndarray | None:
        return self._unscaled(self.scaled_grad_error)

    @property
    def hess(self) -> np.ndarray | None:
        return self._unscaled(self.scaled_hess)

    @property
    def hess_error(self) -> np.ndarray | None:
        return self._unscaled(self.scaled_hess_error)

    @property
    def log_mass(self) -> np.ndarray:
        """log P (-inf where P = 0)."""
        with np.errstate(divide="ignore"):
            return self.log_scale + np.log(self.scaled_mass)

    @property
    def mass_relative_error(self) -> np.ndarray:
        """The mass's error bar over the mass (inf where the mass is 0)."""
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(self.scaled_mass > 0, self.scaled_mass_error / self.scaled_mass,
                            np.inf)

    def _safe(self, order: int = 1) -> tuple[np.ndarray, np.ndarray]:
        have = self.scaled_grad is not None and (order < 2 or self.scaled_hess is not None)
        require(have, "order", f">= {order} in gaussian_polytope for this quantity", order - 1)
        pos = self.scaled_mass > 0
        return pos, np.where(pos, self.scaled_mass, 1.0)

    @property
    def g_out(self) -> np.ndarray:
        """d log Z / d omega = -A^T grad P / P, (N, d) (0 where P = 0)."""
        pos, Z = self._safe()
        return np.where(pos[:, None], -(self.scaled_grad @ self.A) / Z[:, None], 0.0)

    @property
    def g_out_error(self) -> np.ndarray:
        pos, Z = self._safe()
        e = (self.scaled_grad_error @ np.abs(self.A)) / Z[:, None] + np.abs(self.g_out) * (
            self.scaled_mass_error / Z)[:, None]
        return np.where(pos[:, None], e, 0.0)

    @property
    def dg_out(self) -> np.ndarray:
        """d g_out / d omega = A^T Hess P A / P - g g^T, (N, d, d)."""
        pos, Z = self._safe(2)
        g = self.g_out
        J = np.einsum("ki,nkl,lj->nij", self.A, self.scaled_hess, self.A) / Z[:, None, None]
        return np.where(pos[:, None, None], J - g[:, :, None] * g[:, None, :], 0.0)

    @property
    def dg_out_error(self) -> np.ndarray:
        pos, Z = self._safe(2)
        aA = np.abs(self.A)
        J = np.abs(np.einsum("ki,nkl,lj->nij", self.A, self.scaled_hess, self.A)) / Z[:, None, None]
        e = (np.einsum("ki,nkl,lj->nij", aA, self.scaled_hess_error, aA) / Z[:, None, None]
             + J * (self.scaled_mass_error / Z)[:, None, None])
        g, ge = np.abs(self.g_out), self.g_out_error
        # rounding of the cancellation J - g g^T (|g|^2 ~ t^2 far outside)
        e = e + ge[:, :, None] * g[:, None, :] + g[:, :, None] * ge[:, None, :] + (
            4 * np.finfo(float).eps * (J + g[:, :, None] * g[:, None, :]))
        return np.where(pos[:, None, None], e, 0.0)


def _as_inputs(A, b, omega, cov):
    A = np.asarray(A, dtype=float)
    require(A.ndim == 2 and A.shape[0] >= 1 and A.shape[1] >= 1 and np.all(np.isfinite(A)),
            "A", "a finite (m, d) matrix with m, d >= 1", np.shape(A))
    m, d = A.shape
    b = np.asarray(b, dtype=float).reshape(-1)
    require(b.shape == (m,) and np.all(np.isfinite(b)), "b", f"{m} finite entries", b.shape)
    om = np.atleast_2d(np.asarray(omega, dtype=float))
    require(om.ndim == 2 and om.shape[1] == d and np.all(np.isfinite(om)), "omega",
            f"finite, {d} entries per row", om.shape)
    cov = np.asarray(cov, dtype=float)
    require(cov.shape == (d, d) and np.all(np.isfinite(cov)) and np.allclose(cov, cov.T),
            "cov", f"a finite symmetric ({d}, {d}) matrix", cov.shape)
    try:
        Lc = np.linalg.cholesky(cov)
    except np.linalg.LinAlgError:
        Lc = None
    require(Lc is not None, "cov", "positive definite", "not positive definite")
    return A, b, om, Lc


def _c_moments(B: np.ndarray, c: np.ndarray, eps: np.ndarray, order: int, rule: PolytopeRule):
    """P(B z <= c), z ~ N(0, I), its gradient and Hessian in c (module docstring), with errors,
    all relative to exp(s): (s, mass, mass_err, grad, grad_err, hess, hess_err). Each face's
    log density and log scale join in one exponent (<= ~0: a face's nearest point is no
    nearer than the polytope's), so the ratios grad / mass keep their relative accuracy."""
    m = B.shape[0]
    s, mass, mass_err = _mass(B, c, eps, rule)
    N = c.shape[0]
    grad = grad_err = hess = hess_err = None
    norms = np.linalg.norm(B, axis=1)
    live = norms > ROW_TOL * norms.max() if norms.max() > 0 else np.zeros(m, dtype=bool)

    def face(S):
        log_dens, Bf, cf, ef = _face(B, c, eps, S)
        if Bf.shape[0]:
            sf, v, e = _mass(Bf, cf, ef, rule)
        else:
            sf, v, e = np.zeros(N), np.ones(N), np.zeros(N)
        v, e = _rescaled(log_dens + sf - s, v, e)
        # rounding of the exponent, a sum of terms of size |z*|^2 / 2
        return v, e + np.abs(v) * 8 * np.finfo(float).eps * (
            1.0 + np.abs(log_dens) + np.abs(sf) + np.abs(s))

    if order >= 1:
        grad = np.zeros((N, m))
        grad_err = np.zeros((N, m))
        for i in np.flatnonzero(live):  # a constant row: P is piecewise constant in c_i
            grad[:, i], grad_err[:, i] = face((i,))
    if order >= 2:
        hess = np.zeros((N, m, m))
        hess_err = np.zeros((N, m, m))
        for i, j in itertools.combinations(np.flatnonzero(live), 2):
            cos = float(B[i] @ B[j]) / (norms[i] * norms[j])
            if 1.0 - abs(cos) <= 1e-12:
                continue  # parallel rows: no joint density (0 almost everywhere)
            v, e = face((i, j))
            hess[:, i, j] = hess[:, j, i] = v
            hess_err[:, i, j] = hess_err[:, j, i] = e
        for i in np.flatnonzero(live):
            n2 = norms[i] ** 2
            w = (B @ B[i]) / n2
            w[i] = 0.0
            t1 = -(c[:, i] / n2) * grad[:, i]
            t2 = hess[:, i] @ w
            hess[:, i, i] = t1 - t2
            hess_err[:, i, i] = (np.abs(c[:, i] / n2) * grad_err[:, i]
                                 + hess_err[:, i] @ np.abs(w)
                                 + 4 * np.finfo(float).eps * (np.abs(t1) + np.abs(hess[:, i]) @ np.abs(w)))
    return s, mass, mass_err, grad, grad_err, hess, hess_err


def irredundant_rows(A: np.ndarray, b: np.ndarray) -> tuple[list[int], bool]:
    """Indices of the rows of {A h <= b} not implied by the others (one linear programme per
    row: row k goes when max A_k h over the remaining rows is <= b_k), and whether the polytope
    is empty. Implied rows change no indicator; dropping them spares the face bookkeeping the
    faces that touch the polytope only in lower dimension, where the Hessian was measured wrong
    (a row implied along an edge: dg_out off by 1e-2 under a 1e-14 bar)."""
    A, b = np.asarray(A, dtype=float), np.asarray(b, dtype=float)
    keep, empty = _irredundant_cached(A.shape, A.tobytes(), b.tobytes())
    return list(keep), empty


@lru_cache(maxsize=512)
def _irredundant_cached(shape: tuple, A_bytes: bytes, b_bytes: bytes) -> tuple[tuple, bool]:
    """:func:`irredundant_rows` once per polytope (the engine is called at many omega)."""
    from scipy.optimize import linprog

    A = np.frombuffer(A_bytes).reshape(shape)
    b = np.frombuffer(b_bytes)
    rows = list(range(A.shape[0]))
    if not rows:
        return (), False
    feas = linprog(np.zeros(A.shape[1]), A_ub=A, b_ub=b, bounds=(None, None), method="highs")
    if feas.status == 2:
        return (), True
    for k in list(rows):
        others = [i for i in rows if i != k]
        if not others:
            break
        res = linprog(-A[k], A_ub=A[others], b_ub=b[others], bounds=(None, None),
                      method="highs")
        scale = 1.0 + abs(b[k]) + float(np.abs(A[k]).sum())
        if res.status == 0 and -res.fun <= b[k] + 1e-12 * scale:
            rows = others
    return tuple(rows), False


def gaussian_polytope(*, A, b, omega, cov, order: int = 2,
                      rule: PolytopeRule = DEFAULT_RULE) -> PolytopeMoments:
    """Mass (order 0), gradient (1) and Hessian (2) in c of P(A h <= b), h ~ N(omega, cov),
    for each row of ``omega`` (module docstring; THEORY 1.1, 1.4)."""
    require(order in (0, 1, 2), "order", "0, 1 or 2", order)
    t0 = time.perf_counter()
    A, b, om, Lc = _as_inputs(A, b, omega, cov)
    keep, empty = irredundant_rows(A, b)
    N, m = om.shape[0], A.shape[0]
    if empty or not keep:
        zero = np.zeros(N)
        full = np.ones(N) if not empty else zero
        g0 = np.zeros((N, m)) if order >= 1 else None
        h0 = np.zeros((N, m, m)) if order >= 2 else None
        return PolytopeMoments(A=A, log_scale=zero, scaled_mass=full, scaled_mass_error=zero,
                               scaled_grad=g0, scaled_grad_error=g0, scaled_hess=h0,
                               scaled_hess_error=h0, seconds=time.perf_counter() - t0)
    k = np.asarray(keep)
    B = A[k] @ Lc
    c = b[None, k] - om @ A[k].T
    s, mass, mass_err, g_k, ge_k, h_k, he_k = _c_moments(
        B, c, _perturbation(B.shape[0]), order, rule)
    # rounding of c = b - A omega moves log P by |d log P / dc| dc (~ |z*| dc / |B_i| far out)
    dc = 4 * np.finfo(float).eps * (np.abs(b[k])[None, :] + np.abs(om) @ np.abs(A[k]).T)
    with np.errstate(divide="ignore", invalid="ignore"):
        if order >= 1:
            rel = np.where(mass > 0, (np.abs(g_k) * dc).sum(axis=1) / mass, 0.0)
        else:
            rel = (np.sqrt(-2 * np.minimum(s, 0.0)) + 1.0) * (dc / np.linalg.norm(B, axis=1)).sum(axis=1)
    mass_err = mass_err + rel * mass
    if order >= 1:
        ge_k = ge_k + rel[:, None] * np.abs(g_k)
    if order >= 2:
        he_k = he_k + rel[:, None, None] * np.abs(h_k)
    # implied rows: the mass does not move with their offsets (a row touching the polytope
    # only along a lower-dimensional face cuts O(eps^2)), so their derivatives are zero
    grad = grad_err = hess = hess_err = None
    if order >= 1:
        grad, grad_err = np.zeros((N, m)), np.zeros((N, m))
        grad[:, k], grad_err[:, k] = g_k, ge_k
    if order >= 2:
        hess, hess_err = np.zeros((N, m, m)), np.zeros((N, m, m))
        hess[:, k[:, None], k[None, :]] = h_k
        hess_err[:, k[:, None], k[None, :]] = he_k
    return PolytopeMoments(A=A, log_scale=s, scaled_mass=mass, scaled_mass_error=mass_err,
                           scaled_grad=grad, scaled_grad_error=grad_err, scaled_hess=hess,
                           scaled_hess_error=hess_err, seconds=time.perf_counter() - t0)


@dataclass(frozen=True)
class PieceOutput:
    """Z_out (N,), g_out (N, d), dg_out (N, d, d) of one piece, with their error bars; log Z
    and the relative bar on Z (Z itself underflows far outside, its log and g, dg do not)."""

    Z: np.ndarray
    Z_error: np.ndarray
    g: np.ndarray
    g_error: np.ndarray
    dg: np.ndarray
    dg_error: np.ndarray
    log_Z: np.ndarray | None = None
    Z_relative_error: np.ndarray | None = None


def observed_polytope(*, A, b, C, y, omega, cov, rule: PolytopeRule = DEFAULT_RULE) -> PieceOutput:
    """A piece on which k linear statistics are seen exactly (THEORY 1.4, "y linear in h"):
    Z = N(y; C omega, C cov C^T) P(A h <= b | C h = y), h ~ N(omega, cov), with g_out and dg_out.
    ``C`` (k, d) of full row rank; ``y`` (k,) or (N, k). The conditional polytope is the face
    {C z = y - C omega} of the whitened system, so the same face masses give the derivatives:
    with u = (y - C omega, b - A omega) and c' = c - K c_C the face's right-hand side,
    log Z = log N(c_C; 0, G) + log P(c') and d/domega = -[C; A]^T d/du."""
    A, b, om, Lc = _as_inputs(A, b, omega, cov)
    C = np.asarray(C, dtype=float)
    d = A.shape[1]
    require(C.ndim == 2 and C.shape[1] == d and 1 <= C.shape[0] < d and np.all(np.isfinite(C))
            and np.linalg.matrix_rank(C) == C.shape[0], "C",
            f"a finite (k, {d}) matrix of full row rank, 1 <= k < {d}", np.shape(C))
    k = C.shape[0]
    Y = np.atleast_2d(np.asarray(y, dtype=float))
    require(Y.shape[1] == k and Y.shape[0] in (1, om.shape[0]) and np.all(np.isfinite(Y)), "y",
            f"finite, {k} entries per row", Y.shape)
    m = A.shape[0]
    Bfull = np.vstack([C @ Lc, A @ Lc])
    u = np.hstack([np.broadcast_to(Y, (om.shape[0], k)) - om @ C.T, b[None, :] - om @ A.T])
    eps = np.concatenate([np.zeros(k), _perturbation(m)])
    S = tuple(range(k))
    log_dens, Bf, cf, ef = _face(Bfull, u, eps, S)
    CL = C @ Lc
    G = CL @ CL.T
    Gi = np.linalg.inv(G)
    K = (A @ Lc) @ CL.T @ Gi  # c' = c - K c_C
    sP, P, Pe, gr, gre, H, He = _c_moments(Bf, cf, ef, 2, rule)
    pos = P > 0
    Ps = np.where(pos, P, 1.0)
    Mmap = np.hstack([-K, np.eye(m)])  # c' = Mmap u
    lg = gr / Ps[:, None]  # d log P / dc'
    lg_e = gre / Ps[:, None] + np.abs(lg) * (Pe / Ps)[:, None]
    du = np.hstack([-(u[:, :k] @ Gi), np.zeros((len(P), m))]) + lg @ Mmap
    du_e = lg_e @ np.abs(Mmap)
    LH = H / Ps[:, None, None] - lg[:, :, None] * lg[:, None, :]
    LH_e = (He / Ps[:, None, None] + np.abs(H) * (Pe / Ps ** 2)[:, None, None]
            + lg_e[:, :, None] * np.abs(lg)[:, None, :] + np.abs(lg)[:, :, None] * lg_e[:, None, :])
    d2u = np.einsum("ia,nij,jb->nab", Mmap, LH, Mmap)
    d2u[:, :k, :k] -= Gi
    d2u_e = np.einsum("ia,nij,jb->nab", np.abs(Mmap), LH_e, np.abs(Mmap))
    D = np.vstack([C, A])
    g = -du @ D
    dg = np.einsum("ai,nab,bj->nij", D, d2u, D)
    aD = np.abs(D)
    g_e = du_e @ aD
    dg_e = np.einsum("ai,nab,bj->nij", aD, d2u_e, aD)
    log_Z = np.where(pos, log_dens + sP + np.log(Ps), -np.inf)
    f = np.exp(log_dens + sP)
    ok = pos[:, None]
    return PieceOutput(Z=f * P, Z_error=f * Pe, g=np.where(ok, g, 0.0), g_error=np.where(ok, g_e, 0.0),
                       dg=np.where(ok[..., None], dg, 0.0), dg_error=np.where(ok[..., None], dg_e, 0.0),
                       log_Z=log_Z, Z_relative_error=np.where(pos, Pe / Ps, np.inf))


def relu_z_out(*, y, omega, V: float, weights, rule: PolytopeRule = DEFAULT_RULE) -> PieceOutput:
    """y_k = max(h_k, 0) entrywise, h ~ N(omega, V diag(weights)) (THEORY 1.4): on the support
    S = {y_k > 0} the entries are seen exactly, the others satisfy h_k <= 0. ``y`` and ``omega``
    are (N, d); samples are grouped by their support."""
    Y = np.atleast_2d(np.asarray(y, dtype=float))
    om = np.atleast_2d(np.asarray(omega, dtype=float))
    w = np.asarray(weights, dtype=float).reshape(-1)
    d = len(w)
    require(Y.shape == om.shape and Y.shape[1] == d and np.all(np.isfinite(Y)) and np.all(Y >= 0),
            "y", f"finite reals >= 0, the shape of omega, {d} per row", Y.shape)
    require(isinstance(V, (int, float)) and math.isfinite(V) and V > 0, "V", "a finite real > 0", V)
    require(np.all(np.isfinite(w)) and np.all(w > 0), "weights", "finite reals > 0", weights)
    cov = V * np.diag(w)
    N = Y.shape[0]
    out = {name: np.zeros(shape) for name, shape in (
        ("Z", (N,)), ("Z_error", (N,)), ("g", (N, d)), ("g_error", (N, d)),
        ("dg", (N, d, d)), ("dg_error", (N, d, d)), ("log_Z", (N,)), ("Z_relative_error", (N,)))}
    supports = Y > 0
    for pattern in np.unique(supports, axis=0):
        rows = np.flatnonzero(np.all(supports == pattern, axis=1))
        seen = np.flatnonzero(pattern)
        free = np.flatnonzero(~pattern)
        A = np.eye(d)[free]
        if len(seen) == 0:
            mo = gaussian_polytope(A=A, b=np.zeros(d), omega=om[rows], cov=cov, rule=rule)
            res = PieceOutput(mo.mass, mo.mass_error, mo.g_out, mo.g_out_error, mo.dg_out,
                              mo.dg_out_error, mo.log_mass, mo.mass_relative_error)
        elif len(free) == 0:
            sd2 = V * w
            r = Y[rows] - om[rows]
            lz = np.sum(-0.5 * r * r / sd2 - 0.5 * np.log(2 * math.pi * sd2), axis=1)
            z = np.exp(lz)
            dg = np.broadcast_to(-np.diag(1.0 / sd2), (len(rows), d, d)).copy()
            res = PieceOutput(z, 1e-15 * z, r / sd2, np.zeros_like(r), dg, np.zeros_like(dg), lz,
                              np.full(len(rows), 1e-15))
        else:
            res = observed_polytope(A=A, b=np.zeros(len(free)), C=np.eye(d)[seen],
                                    y=Y[rows][:, seen], omega=om[rows], cov=cov, rule=rule)
        for name in out:
            out[name][rows] = getattr(res, name)
    return PieceOutput(**out)


# ----------------------------------------------------------------------------- channels as data
@dataclass(frozen=True)
class Piece:
    """One outcome ``y`` of a noiseless polyhedral channel: P(y | h) = 1[A h <= b]."""

    y: tuple
    A: tuple[tuple[float, ...], ...]
    b: tuple[float, ...]


@dataclass(frozen=True)
class PolyhedralChannel:
    """A noiseless channel with discrete outputs given piecewise over polyhedra of h
    (THEORY 1.4): one :class:`Piece` per outcome; Var h_k = V ``weights[k]`` (AIM: 1 + delta_ab
    in the flat order of :func:`aim_pairs`)."""

    pieces: tuple[Piece, ...]
    weights: tuple[float, ...]
    name: str = "polyhedral"

    def __post_init__(self) -> None:
        d = len(self.weights)
        require(d >= 1 and all(math.isfinite(w) and w > 0 for w in self.weights), "weights",
                "finite reals > 0, one per entry of h", self.weights)
        require(len(self.pieces) >= 1, "pieces", "at least one outcome", len(self.pieces))
        for p in self.pieces:
            A = np.asarray(p.A, dtype=float)
            require(A.ndim == 2 and A.shape[1] == d and A.shape[0] == len(p.b) >= 1
                    and np.all(np.isfinite(A)) and all(math.isfinite(v) for v in p.b),
                    "pieces", f"finite rows of {d} entries with one bound each", p.y)

    @property
    def dim(self) -> int:
        return len(self.weights)

    @property
    def outcomes(self) -> list:
        return [p.y for p in self.pieces]


@dataclass(frozen=True)
class ChannelOutput:
    """Z_out (Y, N), g_out (Y, N, d), dg_out (Y, N, d, d) with their errors, per outcome ``y``;
    ``log_Z`` (Y, N) where Z underflows."""

    y: list
    Z: np.ndarray
    Z_error: np.ndarray
    g: np.ndarray
    g_error: np.ndarray
    dg: np.ndarray | None
    dg_error: np.ndarray | None
    seconds: float
    log_Z: np.ndarray | None = None


def channel_z_out(channel: PolyhedralChannel, *, omega, V: float, order: int = 2,
                  rule: PolytopeRule = DEFAULT_RULE) -> ChannelOutput:
    """Z_out(y; omega, V) = P(A_y h <= b_y), g_out and (order 2) dg_out for every outcome
    (THEORY 1.1): h ~ N(omega, V diag(weights))."""
    require(isinstance(V, (int, float)) and math.isfinite(V) and V > 0, "V", "a finite real > 0", V)
    require(order in (1, 2), "order", "1 or 2", order)
    t0 = time.perf_counter()
    cov = V * np.diag(np.asarray(channel.weights, dtype=float))
    Zs, Ze, gs, ge, ds, de, lz = [], [], [], [], [], [], []
    for p in channel.pieces:
        mo = gaussian_polytope(A=p.A, b=p.b, omega=omega, cov=cov, order=order, rule=rule)
        lz.append(mo.log_mass)
        Zs.append(mo.mass)
        Ze.append(mo.mass_error)
        gs.append(mo.g_out)
        ge.append(mo.g_out_error)
        if order == 2:
            ds.append(mo.dg_out)
            de.append(mo.dg_out_error)
    return ChannelOutput(y=channel.outcomes, Z=np.array(Zs), Z_error=np.array(Ze), g=np.array(gs),
                         g_error=np.array(ge), dg=np.array(ds) if ds else None,
                         dg_error=np.array(de) if de else None,
                         seconds=time.perf_counter() - t0, log_Z=np.array(lz))


def aim_pairs(T: int) -> tuple[tuple[int, int], ...]:
    """The entries h_ab, a <= b, in row-major order (the flat order of the AIM modules)."""
    return tuple((a, b) for a in range(T) for b in range(a, T))


def hardmax_channel(T: int) -> PolyhedralChannel:
    """y_a = argmax_b h_ab row-wise (h symmetric): outcome y in {0..T-1}^T has the rows
    h_ab - h_{a y_a} <= 0 for every a and b != y_a (T(T - 1) rows)."""
    require(isinstance(T, int) and not isinstance(T, bool) and 2 <= T <= 4, "tokens",
            "an integer in 2..4", T)
    flat = aim_pairs(T)
    col = {p: i for i, p in enumerate(flat)}

    def idx(a: int, b: int) -> int:
        return col[(min(a, b), max(a, b))]

    pieces = []
    for y in itertools.product(range(T), repeat=T):
        rows = []
        for a in range(T):
            for b in range(T):
                if b == y[a]:
                    continue
                row = [0.0] * len(flat)
                row[idx(a, b)] += 1.0
                row[idx(a, y[a])] -= 1.0
                rows.append(tuple(row))
        pieces.append(Piece(y=tuple(y), A=tuple(rows), b=(0.0,) * len(rows)))
    weights = tuple(2.0 if a == b else 1.0 for a, b in flat)
    return PolyhedralChannel(pieces=tuple(pieces), weights=weights, name=f"hardmax T={T}")


def sign_pattern_channel(W, *, thresholds=None, weights=None) -> PolyhedralChannel:
    """y_k = sign(w_k . h - t_k) for the rows w_k of ``W`` (k half-spaces): outcome
    y in {-1, +1}^k has the rows -y_k (w_k . h) <= -y_k t_k."""
    W = np.asarray(W, dtype=float)
    require(W.ndim == 2 and 1 <= W.shape[0] <= 8 and W.shape[1] >= 1 and np.all(np.isfinite(W))
            and np.all(np.linalg.norm(W, axis=1) > 0), "W",
            "a finite (k, d) matrix, 1 <= k <= 8, no zero row", np.shape(W))
    k, d = W.shape
    t = np.zeros(k) if thresholds is None else np.asarray(thresholds, dtype=float).reshape(-1)
    require(t.shape == (k,) and np.all(np.isfinite(t)), "thresholds", f"{k} finite reals", t.shape)
    w = (1.0,) * d if weights is None else tuple(float(v) for v in weights)
    pieces = []
    for y in itertools.product((-1, 1), repeat=k):
        s = np.array(y, dtype=float)
        pieces.append(Piece(y=tuple(y), A=tuple(map(tuple, -s[:, None] * W)),
                            b=tuple(-s * t)))
    return PolyhedralChannel(pieces=tuple(pieces), weights=w, name=f"sign pattern k={k}")


# ----------------------------------------------------------------------------- noisy outputs
@dataclass(frozen=True)
class NoisyPiece:
    """One piece of a noisy piecewise-linear channel (THEORY 1.4): on {A h <= b} the output is
    y = L h + l + N(0, Delta). ``A`` may have no rows (the whole space); ``L`` is (p, d)."""

    A: tuple[tuple[float, ...], ...]
    b: tuple[float, ...]
    L: tuple[tuple[float, ...], ...]
    l: tuple[float, ...]


def noisy_relu_pieces(d: int) -> tuple[NoisyPiece, ...]:
    """y = max(h, 0) + N(0, Delta) entrywise, h in R^d: one piece per sign pattern (2^d), the
    active entries seen through L = diag(pattern)."""
    require(isinstance(d, int) and not isinstance(d, bool) and 1 <= d <= 6, "d",
            "an integer in 1..6", d)
    pieces = []
    for pattern in itertools.product((0, 1), repeat=d):
        A = tuple(tuple((-1.0 if on else 1.0) if j == i else 0.0 for j in range(d))
                  for i, on in enumerate(pattern))
        L = tuple(tuple(float(on) if j == i else 0.0 for j in range(d))
                  for i, on in enumerate(pattern))
        pieces.append(NoisyPiece(A=A, b=(0.0,) * d, L=L, l=(0.0,) * d))
    return tuple(pieces)


def _check_pieces(pieces, d: int, p: int) -> list:
    require(isinstance(pieces, (tuple, list)) and len(pieces) >= 1
            and all(isinstance(q, NoisyPiece) for q in pieces), "pieces",
            "a non-empty sequence of NoisyPiece", type(pieces).__name__)
    out = []
    for q in pieces:
        try:
            A = np.asarray(q.A, dtype=float) if len(q.A) else np.zeros((0, d))
            b = np.asarray(q.b, dtype=float)
            L = np.asarray(q.L, dtype=float)
            lv = np.asarray(q.l, dtype=float)
        except (TypeError, ValueError):
            A = b = L = lv = np.zeros(0)
        require(A.shape == (len(b), d) and b.ndim == 1 and L.shape == (p, d) and lv.shape == (p,)
                and all(np.all(np.isfinite(x)) for x in (A, b, L, lv)), "pieces",
                f"finite A (m, {d}), b (m,), L ({p}, {d}), l ({p},)", (A.shape, L.shape))
        out.append((A, b, L, lv))
    return out


def noisy_channel_z_out(pieces, *, y, omega, cov, Delta,
                        rule: PolytopeRule = DEFAULT_RULE) -> PieceOutput:
    """Z_out(y; omega, Sigma) of P(y | h) = sum_k 1[A_k h <= b_k] N(y; L_k h + l_k, Delta)
    (THEORY 1.4, "seen through Gaussian noise"), with g_out = d log Z / d omega, dg_out and
    their error bars. Per piece, with S = L Sigma L^T + Delta and r = y - L omega - l,

        Z_k = N(r; 0, S) P(A h' <= b),  h' ~ N(omega + K r, Sigma - K L Sigma),  K = Sigma L^T S^-1,

    the second factor a Gaussian polytope under the conditional law of h given y (mean linear
    in omega: d/domega = M^T d/dm, M = I - K L), so g_k = L^T S^-1 r + M^T g_P and
    dg_k = -L^T S^-1 L + M^T dg_P M. Z = sum_k Z_k in logs (``log_Z``), g and dg the
    Z_k-weighted mixtures. ``y`` (N, p) or (p,), ``omega`` (N, d) or (d,), ``cov`` Sigma and
    ``Delta`` positive definite."""
    om = np.atleast_2d(np.asarray(omega, dtype=float))
    require(om.ndim == 2 and om.shape[1] >= 1 and np.all(np.isfinite(om)), "omega",
            "finite, (N, d)", om.shape)
    d = om.shape[1]
    Dl = np.atleast_2d(np.asarray(Delta, dtype=float))
    p = Dl.shape[0]
    ok_delta = Dl.shape == (p, p) and np.all(np.isfinite(Dl)) and np.allclose(Dl, Dl.T)
    if ok_delta:
        try:
            np.linalg.cholesky(Dl)
        except np.linalg.LinAlgError:
            ok_delta = False
    require(ok_delta, "Delta", "a finite symmetric positive definite (p, p) matrix", Dl.shape)
    Y = np.atleast_2d(np.asarray(y, dtype=float))
    require(Y.shape[1] == p and np.all(np.isfinite(Y)) and (
        Y.shape[0] == om.shape[0] or 1 in (Y.shape[0], om.shape[0])), "y",
        f"finite, {p} entries per row, one row or as many as omega", Y.shape)
    N = max(Y.shape[0], om.shape[0])
    Y = np.broadcast_to(Y, (N, p))
    om = np.broadcast_to(om, (N, d))
    Sig = np.asarray(cov, dtype=float)
    _as_inputs(np.zeros((1, d)), [0.0], om[:1], Sig)  # validates cov
    parts = _check_pieces(pieces, d, p)
    logs, gs, dgs, ges, dges, rels = [], [], [], [], [], []
    for A, b, L, lv in parts:
        S = L @ Sig @ L.T + Dl
        Si = np.linalg.inv(S)
        r = Y - om @ L.T - lv
        _, logdet = np.linalg.slogdet(2 * math.pi * S)
        log_n = -0.5 * np.einsum("ni,ij,nj->n", r, Si, r) - 0.5 * logdet
        K = Sig @ L.T @ Si
        M = np.eye(d) - K @ L
        g_k = r @ Si @ L  # L^T S^-1 r, rows
        dg_k = np.broadcast_to(-L.T @ Si @ L, (N, d, d)).copy()
        ge_k = np.zeros((N, d))
        dge_k = np.zeros((N, d, d))
        rel = np.zeros(N)
        if A.shape[0]:
            cond = Sig - K @ L @ Sig
            cond = 0.5 * (cond + cond.T)
            mo = gaussian_polytope(A=A, b=b, omega=om + r @ K.T, cov=cond, order=2, rule=rule)
            log_n = log_n + mo.log_mass
            g_k = g_k + mo.g_out @ M
            dg_k = dg_k + np.einsum("ai,nab,bj->nij", M, mo.dg_out, M)
            aM = np.abs(M)
            ge_k = mo.g_out_error @ aM
            dge_k = np.einsum("ai,nab,bj->nij", aM, mo.dg_out_error, aM)
            rel = mo.mass_relative_error
        logs.append(log_n)
        gs.append(g_k)
        dgs.append(dg_k)
        ges.append(ge_k)
        dges.append(dge_k)
        rels.append(rel)
    logs = np.array(logs)  # (K, N)
    top = logs.max(axis=0)
    live = np.isfinite(top)
    top = np.where(live, top, 0.0)
    wts = np.exp(logs - top)
    tot = wts.sum(axis=0)
    with np.errstate(divide="ignore"):
        log_Z = np.where(live, top + np.log(np.where(live, tot, 1.0)), -np.inf)
    pi = np.where(live, wts / np.where(live, tot, 1.0), 0.0)  # (K, N)
    gs, dgs, ges, dges = np.array(gs), np.array(dgs), np.array(ges), np.array(dges)
    rels = np.where(pi > 0, np.array(rels), 0.0)
    g = np.einsum("kn,kni->ni", pi, gs)
    second = dgs + gs[..., :, None] * gs[..., None, :]
    T = np.einsum("kn,knij->nij", pi, second)
    dg = T - g[:, :, None] * g[:, None, :]
    g_err = np.einsum("kn,kni->ni", pi, ges + np.abs(gs - g) * rels[..., None])
    ag = np.abs(gs)
    T_err = np.einsum("kn,knij->nij", pi, dges + ges[..., :, None] * ag[..., None, :]
                      + ag[..., :, None] * ges[..., None, :]
                      + np.abs(second - T) * rels[..., None, None])
    dg_err = (T_err + g_err[:, :, None] * np.abs(g)[:, None, :] + np.abs(g)[:, :, None] * g_err[:, None, :]
              + 4 * np.finfo(float).eps * (np.abs(T) + np.abs(g)[:, :, None] * np.abs(g)[:, None, :]))
    rel = np.einsum("kn,kn->n", pi, rels) + 4 * np.finfo(float).eps * len(parts)
    Z = np.exp(log_Z)
    return PieceOutput(Z=Z, Z_error=Z * rel, g=g, g_error=g_err, dg=dg, dg_error=dg_err,
                       log_Z=log_Z, Z_relative_error=rel)
