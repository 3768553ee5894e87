"""Hardmax at any (omega, V): Z_out, g_out, and the AIM state evolution at finite rho
(THEORY 1.1, 1.4, 1.5).

Output side. h_ab ~ N(omega_ab, V (1 + delta_ab)) independently (a <= b), y_a = argmax_b h_ab.
Hardmax is invariant under h -> c h (c > 0) and h -> h + c 1 (every entry shifted), so

  Z_y(omega; V) = Z_y(omega / sqrt V; 1),   E[(h - omega) 1_y](omega; V) = sqrt V x (the same at V = 1),

and the output side depends on (q, V) only through r = q / V:
E(q, V) = E_omega sum_y Z_y |g_y|_W^2 = E_hat(r) / V, |g|_W^2 = sum_{a<=b} (1 + delta_ab) g_ab^2.
At V = 1 the ordered-cone recursion of :mod:`aim_sym.numerics.hardmax` still applies with
per-entry means: every factor stays a one-variable function (u_v's own density phi(s - omega_v),
row a's diagonal tail Phi(+-(omega_aa - s) / sqrt 2)); only the grid moves with omega
(Chebyshev-Lobatto on [min omega_v - L, max omega_v + L], L = tail cut). The recursion carries
P(y) and the centred first moments E[(h_ab - omega_ab) 1_y], so
g_ab = E[(h_ab - omega_ab) 1_y] / (Z_y (1 + delta_ab) V) (THEORY 1.1).

Outer expectation over omega ~ N(0, q (1 + delta_ab)): the shift invariance removes the
direction 1 (5 dimensions left at T = 3); the token permutations leave omega's law invariant,
so E_omega sum_y f(y, omega) = sum_orbits |orbit| E_omega f(y_rep, omega) (7 orbits at T = 3).
The 5-dimensional expectation is a tensor Gauss-Hermite rule; three rules (k, k + 2, k + 4
nodes per axis, k ~ 4 r) give the error (:func:`output_e`); a Smolyak sparse grid
(:func:`output_e_sparse`) and seeded Monte Carlo (:func:`monte_carlo_e`) are independent routes.
The rule needs ~(4 r)^5 nodes: at T = 3 it stops at r = 2 (:func:`max_ratio`). Wall-adapted
rules reach any r (:func:`output_e_t2_adapted`; at T = 3 :func:`output_e_t3_adapted`, one ordering
chamber of the off-diagonal means in coordinates whose walls are coordinate hyperplanes); the
large-r law is E_hat(r) = c0 / sqrt(r) + O(1 / r) (:func:`e_hat_leading`), and
:func:`e_hat_table` tabulates E_hat in s = 1 / sqrt(r) for :func:`se_curve_tabulated`
(docs/hardmax_se.md "Large r").

The generalisation error needs only one row: by the permutation symmetry
e_gen = T (1 - E_omega sum_b P(y_0 = b | omega)^2) (THEORY 1.5), a row's argmax probabilities
being one-dimensional integrals and the row's law two-dimensional after its shift.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from functools import lru_cache

import numpy as np
from scipy.special import ndtr, roots_hermitenorm

from . import wishart
from .hardmax import chebyshev_tail_rule, off_diagonal_pairs, outcome_orbits, pairs, settle_rows
from .records import ConvergenceError, Estimate, bayes_optimal, mean_estimate, require
from .wishart import delta_of_mmse

SQRT2 = math.sqrt(2.0)
#: token counts of the output side at any omega (the recursion runs over 2^(T(T-1)/2) subsets)
TOKENS_RANGE = (2, 4)
#: token counts of the state evolution (the omega expectation has T(T+1)/2 - 1 dimensions)
SE_TOKENS = (2, 3)
#: tail cut of the sweep, in standard deviations of the off-diagonal entries
TAIL_L = 8.0
#: Chebyshev nodes of the sweep per unit length (at V = 1) and their floor
NODES_PER_UNIT = 3.0
MIN_NODES = 48
#: omega points per vectorised block (its (CHUNK, nodes) temporaries stay below ~200 kB)
CHUNK = 384


def _check_tokens(T: int, allowed: tuple[int, int] = TOKENS_RANGE) -> None:
    require(isinstance(T, int) and not isinstance(T, bool) and allowed[0] <= T <= allowed[1],
            "tokens", f"an integer in {allowed[0]}..{allowed[1]}", T)


def weights(T: int) -> np.ndarray:
    """(1 + delta_ab) in the flat order of :func:`aim_sym.numerics.hardmax.pairs`."""
    return np.array([2.0 if a == b else 1.0 for a, b in pairs(T)])


def _npdf(x: np.ndarray) -> np.ndarray:
    return np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)


def _rows_matmul(X: np.ndarray, M: np.ndarray) -> np.ndarray:
    """X @ M for a tall X in row blocks small enough that OpenBLAS stays on one thread (its
    threads thrash on small products on a shared machine: 10x slower)."""
    out = np.empty((X.shape[0], M.shape[1]))
    b = max(1, 200_000 // (M.shape[0] * M.shape[1]))
    for i in range(0, X.shape[0], b):
        np.matmul(X[i:i + b], M, out=out[i:i + b])
    return out


# ----------------------------------------------------------------------------- output side
def moments_unit(ys: Sequence[tuple[int, ...]], w: np.ndarray, nodes: int,
                  L: float) -> np.ndarray:
    """[P(y), E[(h_ab - w_ab) 1_y] for (a, b) in pairs] at V = 1 for the means w (N x n_pairs),
    for every y in ``ys``: an array (len(ys), N, 1 + n_pairs).

    Upward sweep: G_S(t) = int over {u_S < t} of the factors, the newly revealed v the largest of
    S, settling the rows of v that no coordinate outside S touches. The lowest coordinate settles
    no row (T >= 3), so G_{v}(t) = Phi(t - w_v) in closed form (channel v: -phi(t - w_v)); the
    last level needs only the value at the top of the grid."""
    T = len(ys[0])
    off = off_diagonal_pairs(T)
    m = len(off)
    flat = pairs(T)
    K = 1 + len(flat)
    N = w.shape[0]
    idx_off = [flat.index(v) for v in off]
    chan_off = [1 + i for i in idx_off]
    chan_diag = [1 + flat.index((a, a)) for a in range(T)]
    mu = w[:, idx_off]  # (N, m)
    nu = w[:, [flat.index((a, a)) for a in range(T)]]  # (N, T)
    lo = mu.min(axis=1) - L
    hi = mu.max(axis=1) + L
    half = 0.5 * (hi - lo)
    x, C1 = chebyshev_tail_rule(nodes, 1.0)
    s = 0.5 * (hi + lo)[:, None] + half[:, None] * x[None, :]  # (N, n), from hi down to lo
    up = (C1[-1][None, :] - C1).T  # g @ up: int_{lo}^{t_j} on the unit interval
    top = up[:, 0]  # the full integral (t = hi, the first node)
    full = (1 << m) - 1
    # one-row pieces: Phi of the diagonal against s, and the diagonal's centred moment
    zs = (nu[:, :, None] - s[:, None, :]) / SQRT2  # (N, T, n)
    p_self = ndtr(zs)
    p_off = ndtr(-zs)
    d_self = SQRT2 * _npdf(zs)
    dens = [_npdf(s - mu[:, v:v + 1]) for v in range(m)]
    touched = []
    for mask in range(1 << m):
        r = 0
        for v in range(m):
            if mask >> v & 1:
                r |= (1 << off[v][0]) | (1 << off[v][1])
        touched.append(r)
    base_step: dict[int, np.ndarray] = {}

    def dens_factor(v: int) -> np.ndarray:
        if v not in base_step:
            f = np.repeat(dens[v][:, None, :], K, axis=1)
            f[:, chan_off[v]] *= s - mu[:, v:v + 1]
            base_step[v] = f
        return base_step[v]

    out = np.zeros((len(ys), N, K))
    for iy, y in enumerate(ys):
        def row_factor(a: int, c: int, y=y) -> np.ndarray | None:
            if y[a] == a:
                base, diag = p_self[:, a], d_self[:, a]
            elif y[a] == c:
                base, diag = p_off[:, a], -d_self[:, a]
            else:
                return None
            f = np.repeat(base[:, None, :], K, axis=1)
            f[:, chan_diag[a]] = diag
            return f

        row_fac = {(a, c): row_factor(a, c) for a in range(T) for c in range(T) if a != c}
        step: dict[tuple[int, int], np.ndarray | None] = {}

        def step_factor(v: int, settled: int, step=step, row_fac=row_fac) -> np.ndarray | None:
            key = (v, settled)
            if key not in step:
                step[key] = settle_rows(dens_factor(v), off[v], settled, row_fac)
            return step[key]

        G: dict[int, np.ndarray] = {}
        for v in range(m):
            a, b = off[v]
            if ((1 << a) | (1 << b)) & ~touched[full ^ (1 << v)]:
                G = {}
                break  # T = 2: the only coordinate settles its rows; handled below
            g = np.repeat(ndtr(s - mu[:, v:v + 1])[:, None, :], K, axis=1)
            g[:, chan_off[v]] = -dens[v]
            G[1 << v] = g
        if not G:
            G = {0: np.ones((N, K, nodes))}
            start = 1
        else:
            start = 2
        for k in range(start, m + 1):
            new = {}
            for S in range(1, 1 << m):
                if bin(S).count("1") != k:
                    continue
                acc = None
                for v in range(m):
                    if not S >> v & 1:
                        continue
                    R = S ^ (1 << v)
                    if R not in G:
                        continue
                    a, b = off[v]
                    f = step_factor(v, ((1 << a) | (1 << b)) & ~touched[full ^ S])
                    if f is None:
                        continue
                    acc = f * G[R] if acc is None else acc + f * G[R]
                if acc is not None:
                    new[S] = acc
            G = {S: (acc @ top * half[:, None] if k == m
                     else _rows_matmul(acc.reshape(-1, nodes), up).reshape(acc.shape)
                     * half[:, None, None])
                 for S, acc in new.items()}
            if not G:
                break
        if full in G:
            out[iy] = G[full]
    return out


def _row_c_factor(kind: int, fc, dc, dens, ds, cdf, i2: int, i3: int, rows: int,
                  nodes: int) -> tuple[np.ndarray, np.ndarray]:
    """The T = 3 sweep's B factor of row c (the row settled by the two upper off-diagonals
    v2, v3) and its three moment channels (v2, v3, diagonal of c): kind 0, row c's diagonal
    wins; 1, v2's entry wins; 2, v3's entry wins. ``fc``, ``dc``: row c's diagonal tail
    factor and centred diagonal moment; ``dens``, ``ds``, ``cdf``: the per-entry densities,
    centred sweep offsets and cumulative factors."""
    X = np.zeros((rows, 3, nodes))
    B0 = np.zeros((rows, nodes))
    if kind in (0, 1):
        t = dens[i2] * fc
        B0 += t * cdf[i3]
        X[:, 0] += ds[i2] * t * cdf[i3]
        X[:, 1] -= t * dens[i3]
        X[:, 2] += dens[i2] * dc * cdf[i3]
    if kind in (0, 2):
        t = dens[i3] * fc
        B0 += t * cdf[i2]
        X[:, 1] += ds[i3] * t * cdf[i2]
        X[:, 0] -= t * dens[i2]
        X[:, 2] += dens[i3] * dc * cdf[i2]
    return X, B0


def _moments_t3(ys: Sequence[tuple[int, ...]], w: np.ndarray, nodes: int,
                L: float) -> np.ndarray:
    """:func:`moments_unit` at T = 3 with the integrals shared between outcomes.

    With v1 the largest off-diagonal (it settles its rows a, b) and S = {v2, v3} the other two
    (the larger settles the third row c, the lower is free: Phi(s - w_v) in closed form),
    Z = int ds A(s) int_{s' < s} B(s') ds', A = phi_v1 R_a R_b,
    B = phi_v2 R_c^(v2) Phi_v3 + phi_v3 R_c^(v3) Phi_v2. A depends on y through the kinds of
    R_a, R_b (diagonal wins or v1 wins: 4 variants per v1), B through row c's winner (3). A moment
    channel modifies one factor, in A or in B: one dot with cum B or with the adjoint cumulative
    of A. Two matrix-vector products per variant serve every outcome."""
    flat = pairs(3)
    off = off_diagonal_pairs(3)
    N = w.shape[0]
    col = {p: i for i, p in enumerate(flat)}
    mu = w[:, [col[v] for v in off]]
    nu = w[:, [col[(a, a)] for a in range(3)]]
    lo = mu.min(axis=1) - L
    hi = mu.max(axis=1) + L
    half = (0.5 * (hi - lo))[:, None]
    x, C1 = chebyshev_tail_rule(nodes, 1.0)
    s = 0.5 * (hi + lo)[:, None] + half * x[None, :]
    up = (C1[-1][None, :] - C1).T
    top = up[:, 0]
    ds = [s - mu[:, v:v + 1] for v in range(3)]
    dens = [_npdf(d) for d in ds]
    cdf = [ndtr(d) for d in ds]
    zs = [(nu[:, a:a + 1] - s) / SQRT2 for a in range(3)]
    # R[a][kind] = (factor, centred diagonal moment); kind True: the diagonal wins row a
    R = [{True: (ndtr(z), SQRT2 * _npdf(z)), False: (ndtr(-z), -SQRT2 * _npdf(z))} for z in zs]
    A_var: dict = {}
    B_var: dict = {}

    def a_variant(i1: int, ka: bool, kb: bool):
        key = (i1, ka, kb)
        if key not in A_var:
            a, b = off[i1]
            (fa, da), (fb, db) = R[a][ka], R[b][kb]
            X = np.empty((N, 4, nodes))
            dfb = dens[i1] * fb
            X[:, 0] = dfb * fa  # A0
            X[:, 1] = X[:, 0] * ds[i1]  # channel v1
            X[:, 2] = dfb * da  # diagonal of row a
            X[:, 3] = dens[i1] * fa * db  # diagonal of row b
            A_var[key] = X
        return A_var[key]

    def b_variant(i1: int, kind: int):
        """kind 0: row c's diagonal wins; 1: v2's entry wins row c; 2: v3's entry wins."""
        key = (i1, kind)
        if key not in B_var:
            a, b = off[i1]
            c = 3 - a - b
            i2, i3 = [i for i in range(3) if i != i1]
            fc, dc = R[c][kind == 0]
            B_var[key] = _row_c_factor(kind, fc, dc, dens, ds, cdf, i2, i3, N, nodes)
        return B_var[key]

    # every variant the outcomes need, then two batched products (one BLAS call each)
    a_keys, b_keys = [], []
    for y in ys:
        for i1, (a, b) in enumerate(off):
            if y[a] not in (a, b) or y[b] not in (a, b):
                continue
            c = 3 - a - b
            i2 = [i for i in range(3) if i != i1][0]
            kind = 0 if y[c] == c else (1 if y[c] in off[i2] else 2)
            for keys, k in ((a_keys, (i1, y[a] == a, y[b] == b)), (b_keys, (i1, kind))):
                if k not in keys:
                    keys.append(k)
    if not a_keys:
        return np.zeros((len(ys), N, 1 + len(flat)))
    XA = {k: a_variant(*k) for k in a_keys}
    XB = {k: b_variant(*k) for k in b_keys}
    abar = _rows_matmul((np.stack([XA[k][:, 0] for k in a_keys]) * top).reshape(-1, nodes),
                        np.ascontiguousarray(up.T))
    cumb = _rows_matmul(np.stack([XB[k][1] for k in b_keys]).reshape(-1, nodes), up) * top
    abar = abar.reshape(len(a_keys), N, nodes)
    cumb = cumb.reshape(len(b_keys), N, nodes)
    A_var = {k: (XA[k], abar[i]) for i, k in enumerate(a_keys)}
    B_var = {k: (XB[k][0], cumb[i]) for i, k in enumerate(b_keys)}

    combo: dict = {}
    out = np.zeros((len(ys), N, 1 + len(flat)))
    for iy, y in enumerate(ys):
        o = out[iy]
        for i1, (a, b) in enumerate(off):
            if y[a] not in (a, b) or y[b] not in (a, b):
                continue
            c = 3 - a - b
            i2, i3 = [i for i in range(3) if i != i1]
            kind = 0 if y[c] == c else (1 if y[c] in off[i2] else 2)
            key = (i1, y[a] == a, y[b] == b, kind)
            if key not in combo:
                xa, Abar = A_var[(i1, y[a] == a, y[b] == b)]
                xb, cumBt = B_var[(i1, kind)]
                combo[key] = (np.einsum("nkj,nj->nk", xa, cumBt),
                              np.einsum("nkj,nj->nk", xb, Abar))
            ca, cb = combo[key]
            o[:, 0] += ca[:, 0]
            o[:, 1 + col[off[i1]]] += ca[:, 1]
            o[:, 1 + col[(a, a)]] += ca[:, 2]
            o[:, 1 + col[(b, b)]] += ca[:, 3]
            o[:, 1 + col[off[i2]]] += cb[:, 0]
            o[:, 1 + col[off[i3]]] += cb[:, 1]
            o[:, 1 + col[(c, c)]] += cb[:, 2]
    return out * (half[None, :, :] ** 2)


def sweep_nodes(omega_unit: np.ndarray, T: int, *, L: float = TAIL_L,
                per_unit: float = NODES_PER_UNIT) -> int:
    """Chebyshev nodes for the sweep over [min omega_v - L, max omega_v + L] (V = 1 units):
    ``per_unit`` per unit length, at least :data:`MIN_NODES`."""
    off = [pairs(T).index(v) for v in off_diagonal_pairs(T)]
    spread = float(np.max(np.ptp(omega_unit[:, off], axis=1))) if omega_unit.size else 0.0
    return max(MIN_NODES, int(math.ceil(per_unit * (2 * L + spread))))


def outcome_moments(y: Sequence[int], *, omega, V: float = 1.0, nodes: int | None = None,
                    L: float = TAIL_L) -> np.ndarray:
    """Z_y(omega; V) and the centred moments E[(h_ab - omega_ab) 1_y] at many omega (rows of an
    (N, T(T+1)/2) array, flat order of :func:`pairs`): an (N, 1 + T(T+1)/2) array (THEORY 1.4).
    ``nodes`` defaults to :func:`sweep_nodes`."""
    y = tuple(int(c) for c in y)
    return outcomes_moments([y], omega=omega, V=V, nodes=nodes, L=L)[0]


def outcomes_moments(ys: Sequence[Sequence[int]], *, omega, V: float = 1.0,
                     nodes: int | None = None, L: float = TAIL_L,
                     fast: bool = True) -> np.ndarray:
    """:func:`outcome_moments` for several outcomes of one T at once: (len(ys), N, 1 + n).
    ``fast``: the shared-integral kernel at T = 3 (False: the generic subset recursion)."""
    ys = [tuple(int(c) for c in y) for y in ys]
    require(len(ys) > 0, "y", "at least one outcome", ys)
    T = len(ys[0])
    _check_tokens(T)
    require(all(len(y) == T and all(0 <= c < T for c in y) for y in ys), "y",
            f"winners in 0..{T - 1}, {T} per outcome", ys)
    require(np.isfinite(V) and V > 0, "V", "finite > 0", V)
    om = np.atleast_2d(np.asarray(omega, dtype=float))
    n = T * (T + 1) // 2
    require(om.ndim == 2 and om.shape[1] == n and np.all(np.isfinite(om)), "omega",
            f"finite, {n} entries per row (a <= b)", om.shape)
    w = om / math.sqrt(V)
    if nodes is None:
        nodes = sweep_nodes(w, T, L=L)
    out = np.empty((len(ys), w.shape[0], 1 + n))
    for i in range(0, w.shape[0], CHUNK):
        kernel = _moments_t3 if T == 3 and fast else moments_unit
        out[:, i:i + CHUNK] = kernel(ys, w[i:i + CHUNK], nodes, L)
    out[:, :, 1:] *= math.sqrt(V)
    return out


def all_outcomes(T: int) -> list[tuple[int, ...]]:
    """Every y in {0..T-1}^T (row-wise winners), lexicographic."""
    import itertools

    return [tuple(y) for y in itertools.product(range(T), repeat=T)]


def z_out(*, T: int, omega, V: float = 1.0, nodes: int | None = None) -> dict:
    """Z_out, g_out for every outcome at many omega (THEORY 1.1): ``Z`` (Y, N), ``g`` (Y, N, n)
    with g_ab = E[(h_ab - omega_ab) 1_y] / (Z (1 + delta_ab) V) (0 where Z underflows), and the
    outcome list ``y``."""
    _check_tokens(T)
    ys = all_outcomes(T)
    W = weights(T)
    mom = outcomes_moments(ys, omega=omega, V=V, nodes=nodes)
    Z = mom[:, :, 0]
    pos = Z > 1e-300
    G = np.where(pos[..., None], mom[:, :, 1:] / np.where(pos, Z, 1.0)[..., None], 0.0) / (W * V)
    return {"y": ys, "Z": Z, "g": G}


# ----------------------------------------------------------------------------- omega rule
@lru_cache(maxsize=8)
def _shift_free_basis(T: int) -> tuple[np.ndarray, np.ndarray]:
    """A (n x (n - 1)) with omega = sqrt(r) A z, z ~ N(0, I), having the law of omega ~
    N(0, r (1 + delta)) modulo the shift direction 1 (the GLS projection removes it), and the
    projection's covariance eigenvalues (for checks)."""
    Sig = np.diag(weights(T))
    one = np.ones(len(Sig))
    si1 = np.linalg.solve(Sig, one)
    Cov = Sig - np.outer(one, one) / (one @ si1)
    lam, U = np.linalg.eigh(Cov)
    keep = lam > 1e-12
    return U[:, keep] * np.sqrt(lam[keep]), lam


#: tensor nodes of relative weight below this are dropped; their total weight times the bound
#: F <= T(T+1)/2 (the output's Fisher information is below the pre-activations') is added to the
#: error
PRUNE = 1e-12


@lru_cache(maxsize=32)
def _gh_tensor(dim: int, n: int) -> tuple[np.ndarray, np.ndarray, float]:
    z, w = roots_hermitenorm(n)
    w = w / math.sqrt(2 * math.pi)
    grids = np.meshgrid(*([z] * dim), indexing="ij")
    wg = np.meshgrid(*([w] * dim), indexing="ij")
    Z = np.stack([g.ravel() for g in grids], axis=1)
    Wt = np.ones(Z.shape[0])
    for g in wg:
        Wt = Wt * g.ravel()
    keep = Wt > PRUNE * Wt.max()
    return Z[keep], Wt[keep], float(Wt[~keep].sum())


def omega_rule(*, T: int, r: float, n: int) -> tuple[np.ndarray, np.ndarray, float]:
    """Nodes omega (V = 1 units), weights and the dropped weight of E over
    omega ~ N(0, r (1 + delta_ab)) for shift-invariant integrands: tensor Gauss-Hermite, ``n``
    nodes per axis of the T(T+1)/2 - 1 shift-free directions (relative weights below
    :data:`PRUNE` dropped)."""
    A, _ = _shift_free_basis(T)
    z, w, dropped = _gh_tensor(A.shape[1], n)
    return math.sqrt(r) * z @ A.T, w, dropped


def _integrands(T: int, om: np.ndarray, nodes: int | None):
    """Per omega node (V = 1 units): the orbit sums of Z |g|_W^2, Z log Z and Z (each orbit's
    representative times the orbit's size)."""
    W = weights(T)
    e = np.zeros(om.shape[0])
    psi = np.zeros(om.shape[0])
    mass = np.zeros(om.shape[0])
    orbits = outcome_orbits(T)
    moms = outcomes_moments([y for y, _ in orbits], omega=om, V=1.0, nodes=nodes)
    for (_, size), mom in zip(orbits, moms):
        z = mom[:, 0]
        pos = z > 1e-300
        zs = np.where(pos, z, 1.0)
        e += size * np.where(pos, (mom[:, 1:] ** 2 / W).sum(axis=1) / zs, 0.0)
        psi += size * np.where(pos, z * np.log(zs), 0.0)
        mass += size * z
    return e, psi, mass


def _outer_level(T: int, r: float, n: int, nodes: int | None) -> tuple[float, float, float]:
    """(E_hat(r), Psi_out(r), |E_omega sum_y Z - 1| + the dropped weight) on the
    n-point-per-axis rule."""
    dropped = 0.0
    if r == 0:
        om, wt = np.zeros((1, T * (T + 1) // 2)), np.ones(1)
    else:
        om, wt, dropped = omega_rule(T=T, r=r, n=n)
    e, psi, mass = _integrands(T, om, nodes)
    # the orbit sum of Z is 1 only on average over omega (the rule is not permutation-invariant)
    return float(wt @ e), float(wt @ psi), float(abs(wt @ mass - 1.0)) + dropped


def _geometric_bar(values: Sequence[float]) -> tuple[float, float]:
    """Error bar of the last of three successive rules: d = |Q_n - Q_(n-2)| times
    max(2, rho / (1 - rho)), rho = d / |Q_(n-2) - Q_(n-4)| (the geometric tail of the further
    differences); inf when the differences do not shrink (rho >= 0.9). The floor 2 (not 1):
    the Gauss-Hermite differences can stall for a level before falling, and the bare last
    difference then fell 5% short of the actual error (r = 0.444: 4.8e-8 against 4.6e-8;
    r = 0.480: 8.5e-8 against 8.0e-8, measured against rules continued by 4-8 nodes)."""
    d_prev = abs(values[1] - values[0])
    d = abs(values[2] - values[1])
    tiny = 1e-12 * max(abs(v) for v in values)
    if d <= tiny:  # converged to the rounding of the sums
        return tiny, 0.0
    rho = d / d_prev if d_prev > 0 else float("inf")
    if rho >= 0.9:
        return float("inf"), rho
    return d * max(2.0, rho / (1.0 - rho)), rho


#: most Gauss-Hermite nodes per axis of the omega rule (T = 3: 15^5 = 759375 points)
MAX_RULE = {2: 81, 3: 15}


def rule_levels(T: int, r: float) -> tuple[int, int, int]:
    """The three Gauss-Hermite rules (nodes per axis) for E_hat(r): the coarsest resolves the
    integrand's unit-scale features, k = max(5, ceil(4 r + 3)) (calibrated at T = 2 against the
    exact route of the compiled channel: fewer nodes give non-monotone errors that fool the bar);
    T = 3 uses (k, k + 2, k + 4), T = 2 (two dimensions, cheap) (2k + 5, 2k + 9, 2k + 13)."""
    k = max(5, math.ceil(4 * r + 3))
    if T == 2:
        return 2 * k + 5, 2 * k + 9, 2 * k + 13
    return k, k + 2, k + 4


def max_ratio(T: int) -> float:
    """The largest r = q / V the deterministic rule accepts at T (finest rule <= MAX_RULE)."""
    k_max = (MAX_RULE[T] - 13) // 2 if T == 2 else MAX_RULE[T] - 4
    return (k_max - 3) / 4


def output_e(*, T: int, q: float, V: float, nodes: int | None = None,
             rule: str = "auto") -> Estimate:
    """E(q, V) = E_omega sum_y Z_y |g_y|_W^2 = E_hat(q / V) / V (THEORY 1.1, 1.4) with
    Psi_out(q, V) = E_omega sum_y Z_y log Z_y in ``extra``: tensor Gauss-Hermite over the
    shift-free omega directions on the three rules of :func:`rule_levels`; error = the last
    difference with its geometric tail (:func:`_geometric_bar`) + the orbit-mass gauge
    |E_omega sum_y Z - 1| E + the sweep's own error (its rule against one with 1.5 times the
    nodes, on the coarsest omega rule). ``rule``: "auto" (T = 2 at r > 0: the wall-adapted
    rule :func:`output_e_t2_adapted`, exponentially convergent at any r; otherwise the tensor
    rule), "tensor" or "adapted" (T = 2 only). ConvergenceError beyond r = :func:`max_ratio`
    on the tensor rule (T = 3: use :func:`monte_carlo_e`) or when its rules do not converge."""
    require(rule in ("auto", "tensor", "adapted"), "rule", "auto, tensor or adapted", rule)
    _check_tokens(T, SE_TOKENS)
    require(np.isfinite(q) and q >= 0, "q", "finite >= 0", q)
    require(np.isfinite(V) and V > 0, "V", "finite > 0", V)
    t0 = time.perf_counter()
    r = q / V
    if rule == "adapted" or (rule == "auto" and T == 2 and r > 0 and nodes is None):
        require(T == 2, "rule", "adapted only at T = 2", rule)
        return output_e_t2_adapted(q=q, V=V)
    if r > max_ratio(T):
        raise ConvergenceError(f"r = q / V = {r:g} needs more than {MAX_RULE[T]} Gauss-Hermite "
                               f"nodes per axis at T = {T}; the deterministic rule stops at "
                               f"r = {max_ratio(T):g} (use monte_carlo_e)", last_iterate=r)
    if r == 0:
        e1, p1, dm = _outer_level(T, 0.0, 1, nodes)
        e_fine, _, _ = _outer_level(T, 0.0, 1, None if nodes is None else int(1.5 * nodes))
        bar, pbar, rho, levels = 0.0, 0.0, 0.0, (1,)
        sweep = abs(e_fine - e1)
    else:
        levels = rule_levels(T, r)
        vals = [_outer_level(T, r, k, nodes) for k in levels]
        e1, p1, dm = vals[-1]
        bar, rho = _geometric_bar([v[0] for v in vals])
        pbar, _ = _geometric_bar([v[1] for v in vals])
        om, _, _ = omega_rule(T=T, r=r, n=levels[0])
        n_sweep = sweep_nodes(om, T) if nodes is None else nodes
        e_fine, _, _ = _outer_level(T, r, levels[0], int(1.5 * n_sweep))
        sweep = abs(e_fine - vals[0][0])
    # dm: orbit-mass gauge + dropped weight; F <= T(T+1)/2 bounds the dropped nodes' share
    err = bar + dm * max(abs(e1), T * (T + 1) / 2) + sweep + 1e-14 * abs(e1)
    if not math.isfinite(err):
        raise ConvergenceError(f"the omega rules {levels} do not converge at r = q / V = {r:g}",
                               last_iterate=e1 / V, residual=rho)
    return Estimate(e1 / V, err / V,
                    f"ordered-cone recursion at each omega, tensor Gauss-Hermite over the "
                    f"{T * (T + 1) // 2 - 1} shift-free omega directions ({levels} per axis); "
                    "error = last difference with its geometric tail + orbit-mass gauge + "
                    "sweep error",
                    extra={"psi_out": p1,
                           "psi_out_error": pbar + dm * T * math.log(T) + sweep, "r": r,
                           "E_hat": e1, "ratio": rho, "sweep_error": sweep / V,
                           "levels": levels, "seconds": time.perf_counter() - t0})


# ----------------------------------------------------------------------------- large r
def hyperplane_kappa(*, nodes: int = 400, half_width: float = 30.0) -> float:
    """kappa = int phi(x)^2 / (Phi(x) Phi(-x)) dx = 1.80639457113726...: the Fisher information
    of one tie h_i - h_j ~ N(delta, sigma^2) across its wall, integrated over delta / sigma
    (docs/hardmax_se.md, "Large r"). Gauss-Legendre on [-half_width, half_width] in logs (the
    integrand decays like |x| phi(x))."""
    from scipy.special import log_ndtr

    gx, gw = np.polynomial.legendre.leggauss(nodes)
    x = half_width * gx
    log_f = -x * x - math.log(2 * math.pi) - log_ndtr(x) - log_ndtr(-x)
    return float(half_width * (gw @ np.exp(log_f)))


def e_hat_leading(T: int) -> float:
    """c0 of the large-r law E_hat(r) = c0 / sqrt(r) + O(1 / r) (THEORY 1.4; derivation in
    docs/hardmax_se.md): each wall h_i = h_j between two entries of one row contributes
    kappa P(the pair is on top of its row | tie) / sqrt(2 pi r), independently of the entries'
    variances. T = 2: 2 walls, the pair always on top; T = 3: 9 walls, on top with probability
    1/2 (the third entry of the row is independent of the tie and centred)."""
    _check_tokens(T, SE_TOKENS)
    walls, on_top = (2, 1.0) if T == 2 else (9, 0.5)
    return walls * on_top * hyperplane_kappa() / math.sqrt(2 * math.pi)


#: T = 2 wall-adapted coordinates x_a = omega_aa - omega_01 (the walls are x_a = 0): their
#: covariance per unit r (Var omega_aa = 2 r, Var omega_01 = r)
_T2_SIGMA = np.array([[3.0, 1.0], [1.0, 3.0]])


def _t2_adapted_level(r: float, h: float,
                      nodes: int | None = None) -> tuple[float, float, float]:
    """(E_hat(r), Psi_out(r), mass) at T = 2 on the trapezoid rule of step h in t, x = sinh(t),
    in each wall coordinate x_a = omega_aa - omega_01 (the output side depends on omega only
    through them: shift invariance). The map (unit min(1, sqrt r)) resolves the O(1) layer at
    the walls and the sqrt(r) spread of the Gaussian with ~log(sqrt r) / h nodes per axis, at
    any r > 0."""
    X = 10.0 * math.sqrt(3.0 * r) + 14.0
    a = min(1.0, math.sqrt(r))  # the map's unit: the density's scale when r < 1
    n = int(math.ceil(math.asinh(X / a) / h))
    t = h * np.arange(-n, n + 1)
    x, wx = a * np.sinh(t), h * a * np.cosh(t)
    X0, X1 = np.meshgrid(x, x, indexing="ij")
    C = np.stack([X0.ravel(), X1.ravel()], axis=1)
    S = r * _T2_SIGMA
    quad_form = np.einsum("ni,ij,nj->n", C, np.linalg.inv(S), C)
    pw = np.outer(wx, wx).ravel() * np.exp(-0.5 * quad_form) / (
        2 * math.pi * math.sqrt(np.linalg.det(S)))
    keep = pw > 1e-20 * pw.max()
    om = np.stack([C[keep, 0], np.zeros(int(keep.sum())), C[keep, 1]], axis=1)
    W = weights(2)
    mom = outcomes_moments(all_outcomes(2), omega=om, V=1.0, nodes=nodes)
    z = mom[:, :, 0]
    pos = z > 1e-300
    zs = np.where(pos, z, 1.0)
    e = np.where(pos, (mom[:, :, 1:] ** 2 / W).sum(axis=2) / zs, 0.0).sum(axis=0)
    psi = np.where(pos, z * np.log(zs), 0.0).sum(axis=0)
    return float(pw[keep] @ e), float(pw[keep] @ psi), float(pw[keep].sum())


def output_e_t2_adapted(*, q: float, V: float, step: float = 0.2) -> Estimate:
    """E(q, V) at T = 2 and any r = q / V (THEORY 1.1, 1.4): trapezoid rules of steps
    ``step`` and ``step`` / 2 in the wall-adapted coordinates of :func:`_t2_adapted_level`
    (sinh map); error = their difference + |mass - 1| E + the sweep's own error (the coarser
    rule with 1.5 times the sweep nodes) + 1e-14 E (the rule converges exponentially in
    1 / step, so the coarser rule's error bounds the finer one's)."""
    require(np.isfinite(q) and q > 0, "q", "finite > 0", q)
    require(np.isfinite(V) and V > 0, "V", "finite > 0", V)
    require(np.isfinite(step) and 0.02 <= step <= 0.5, "step", "in [0.02, 0.5]", step)
    t0 = time.perf_counter()
    r = q / V
    e0, p0, _ = _t2_adapted_level(r, step)
    e1, p1, mass = _t2_adapted_level(r, step / 2)
    e_s, p_s, _ = _t2_adapted_level(r, step, nodes=int(1.5 * MIN_NODES))
    sweep, psweep = abs(e_s - e0), abs(p_s - p0)
    err = abs(e1 - e0) + abs(mass - 1.0) * abs(e1) + sweep + 1e-14 * abs(e1)
    return Estimate(e1 / V, err / V,
                    f"T = 2 wall-adapted coordinates (x_a = omega_aa - omega_01, sinh map), "
                    f"trapezoid steps {step:g}, {step / 2:g}; error = their difference + mass "
                    "defect + sweep error",
                    extra={"psi_out": p1,
                           "psi_out_error": abs(p1 - p0) + abs(mass - 1.0) + psweep,
                           "r": r, "E_hat": e1, "levels": (step, step / 2),
                           "sweep_error": sweep / V,
                           "seconds": time.perf_counter() - t0})


def _t3_diagonal_tensor(mu3: np.ndarray, nus: Sequence[np.ndarray],
                        nodes: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """T = 3 at one triple of off-diagonal means ``mu3`` (order of off_diagonal_pairs) and every
    triple of diagonal means from ``nus`` (three 1-D arrays): (F, Psi, sum_y Z), each of shape
    (len(nus[0]), len(nus[1]), len(nus[2])), F = sum_y |grad Z_y|_W^2 / Z_y, Psi = sum_y Z log Z
    (V = 1). The :func:`_moments_t3` sweep with the diagonals batched: the A side depends on two
    diagonals, the B side on one, so each moment is one matrix product over all triples."""
    flat = pairs(3)
    off = off_diagonal_pairs(3)
    col = {p: i for i, p in enumerate(flat)}
    W = weights(3)
    ys = all_outcomes(3)
    lo, hi = float(np.min(mu3)) - TAIL_L, float(np.max(mu3)) + TAIL_L
    half = 0.5 * (hi - lo)
    x, C1 = chebyshev_tail_rule(nodes, 1.0)
    s = 0.5 * (hi + lo) + half * x
    up = (C1[-1][None, :] - C1).T
    top = up[:, 0]
    upT = np.ascontiguousarray(up.T)
    ds = [s - mu3[v] for v in range(3)]
    dens = [_npdf(d) for d in ds]
    cdf = [ndtr(d) for d in ds]
    R = []
    for a in range(3):
        z = (np.asarray(nus[a], dtype=float)[:, None] - s[None, :]) / SQRT2
        R.append({True: (ndtr(z), SQRT2 * _npdf(z)), False: (ndtr(-z), -SQRT2 * _npdf(z))})
    n = [len(v) for v in nus]
    out = np.zeros((len(ys), n[0], n[1], n[2], 1 + len(flat)))
    for i1, (a, b) in enumerate(off):
        c = 3 - a - b
        i2, i3 = [i for i in range(3) if i != i1]
        XA, AB = {}, {}
        for ka in (True, False):
            for kb in (True, False):
                (fa, da), (fb, db) = R[a][ka], R[b][kb]
                X = np.empty((n[a], n[b], 4, nodes))
                X[:, :, 0] = dens[i1] * fa[:, None, :] * fb[None, :, :]
                X[:, :, 1] = X[:, :, 0] * ds[i1]
                X[:, :, 2] = dens[i1] * da[:, None, :] * fb[None, :, :]
                X[:, :, 3] = dens[i1] * fa[:, None, :] * db[None, :, :]
                XA[(ka, kb)] = X
                AB[(ka, kb)] = (X[:, :, 0] * top) @ upT
        XB, CB = {}, {}
        for kind in (0, 1, 2):
            fc, dc = R[c][kind == 0]
            X, B0 = _row_c_factor(kind, fc, dc, dens, ds, cdf, i2, i3, n[c], nodes)
            XB[kind] = X
            CB[kind] = (B0 @ up) * top
        perm = tuple(int(k) for k in np.argsort([a, b, c]))
        combo: dict = {}
        for iy, y in enumerate(ys):
            if y[a] not in (a, b) or y[b] not in (a, b):
                continue
            kind = 0 if y[c] == c else (1 if y[c] in off[i2] else 2)
            key = (y[a] == a, y[b] == b, kind)
            if key not in combo:
                ca = (XA[key[:2]].reshape(-1, nodes) @ CB[kind].T).reshape(n[a], n[b], 4, n[c])
                cb = (AB[key[:2]].reshape(-1, nodes)
                      @ XB[kind].transpose(2, 0, 1).reshape(nodes, -1)).reshape(
                          n[a], n[b], n[c], 3)
                combo[key] = (ca.transpose(0, 1, 3, 2).transpose(*perm, 3),
                              cb.transpose(*perm, 3))
            ca, cb = combo[key]
            o = out[iy]
            o[..., 0] += ca[..., 0]
            o[..., 1 + col[off[i1]]] += ca[..., 1]
            o[..., 1 + col[(a, a)]] += ca[..., 2]
            o[..., 1 + col[(b, b)]] += ca[..., 3]
            o[..., 1 + col[off[i2]]] += cb[..., 0]
            o[..., 1 + col[off[i3]]] += cb[..., 1]
            o[..., 1 + col[(c, c)]] += cb[..., 2]
    out *= half * half
    Z = out[..., 0]
    pos = Z > 1e-300
    zs = np.where(pos, Z, 1.0)
    F = np.where(pos, (out[..., 1:] ** 2 / W).sum(axis=-1) / zs, 0.0).sum(axis=0)
    psi = np.where(pos, Z * np.log(zs), 0.0).sum(axis=0)
    return F, psi, Z.sum(axis=0)


#: T = 3 chamber e01 > e02 > e12 of the off-diagonal means: c = (g1, g2, x0, x1, x2) = M omega
#: with g1 = w02 - w12, g2 = w01 - w02 (>= 0), x0 = w00 - w01, x1 = w11 - w01, x2 = w22 - w02
#: (each row's diagonal against its top off-diagonal); flat order (00, 01, 02, 11, 12, 22)
_T3_M = np.array([[0, 0, 1, 0, -1, 0], [0, 1, -1, 0, 0, 0], [1, -1, 0, 0, 0, 0],
                  [0, -1, 0, 1, 0, 0], [0, 0, -1, 0, 0, 1]], dtype=float)
#: window half-widths of the wall coordinates beyond which F is at its limit (to ~1e-10:
#: Phi(-9 / sqrt 3), Phi(-9 / sqrt 2)) and the far points standing for the limits
T3_WINDOW = 9.0
_T3_FAR = {"g": 14.0, "x": 16.0}


def _t3_axis(kind: str, r: float, var: float, h: float):
    """One wall coordinate's trapezoid rule in t (x = sinh t on the line, g = exp(t - e^-t)
    on the half-line): nodes, weights, each node's evaluation class (window node k, or the
    limit below / above) and the classes' evaluation points."""
    X = 10.0 * math.sqrt(r * var) + 14.0
    if kind == "x":
        k = int(math.ceil(math.asinh(X) / h))
        t = h * np.arange(-k, k + 1)
        x, w = np.sinh(t), h * np.cosh(t)
    else:
        k = int(math.ceil((math.log(X) + 4.2) / h))
        t = -3.7 + h * np.arange(k + 1)
        e = np.exp(-t)
        x = np.exp(t - e)
        w = h * x * (1 + e)
    win = np.abs(x) <= T3_WINDOW
    m = int(win.sum())
    cls = np.where(win, np.cumsum(win) - 1, np.where(x < 0, m, m + (kind == "x")))
    far = _T3_FAR[kind]
    pts = np.concatenate([x[win], [-far] if kind == "x" else [], [far]])
    return x, w, cls, pts


def _t3_class_weights(r: float, h: float) -> tuple[np.ndarray, list[np.ndarray], float]:
    """The chamber's Gaussian weights N(c; 0, r M W M^T) summed per evaluation class on the
    tensor trapezoid rule, the classes' points per axis, and the rule's mass (6 chambers)."""
    Sig = _T3_M @ np.diag(weights(3)) @ _T3_M.T
    axes = [_t3_axis(k, r, Sig[j, j], h) for j, k in enumerate("ggxxx")]
    npts = [len(a[3]) for a in axes]
    Si = np.linalg.inv(r * Sig)
    norm = 1.0 / math.sqrt((2 * math.pi) ** 5 * np.linalg.det(r * Sig))
    strides = np.cumprod([1] + npts[::-1][:-1])[::-1]
    mesh = [np.meshgrid(*[a[i] for a in axes[1:]], indexing="ij") for i in range(3)]
    rest = np.stack([g.ravel() for g in mesh[0]], axis=1)
    wrest = np.prod(np.stack([g.ravel() for g in mesh[1]], axis=1), axis=1)
    crest = (np.stack([g.ravel() for g in mesh[2]], axis=1) * strides[1:]).sum(axis=1)
    qrest = np.einsum("ni,ij,nj->n", rest, Si[1:, 1:], rest)
    lin = rest @ Si[0, 1:]
    wclass = np.zeros(int(np.prod(npts)))
    mass = 0.0
    for x0, w0, c0 in zip(*axes[0][:3]):
        p = w0 * wrest * np.exp(-0.5 * (Si[0, 0] * x0 * x0 + 2 * x0 * lin + qrest)) * norm
        mass += float(p.sum())
        wclass += np.bincount(crest + c0 * strides[0], weights=p, minlength=len(wclass))
    return wclass.reshape(npts), [a[3] for a in axes], 6 * mass


def _t3_adapted_level(r: float, h: float,
                      sweep_factor: float = 1.0) -> tuple[float, float, float, float]:
    """(E_hat(r), Psi_out(r), mass, max |sum_y Z - 1|) at T = 3 on the chamber rule of step h
    (docs/hardmax_se.md, "Large r"): 6 chambers of the off-diagonal order (token permutations),
    wall coordinates of :data:`_T3_M`, F evaluated at the window nodes and the limits only."""
    wc, pts, mass = _t3_class_weights(r, h)
    e = psi = 0.0
    zdev = 0.0
    for i, g1 in enumerate(pts[0]):
        for j, g2 in enumerate(pts[1]):
            w = wc[i, j]
            if not np.any(w > 0):
                continue
            mu3 = np.array([g1 + g2, g1, 0.0])  # means of e01, e02, e12
            nodes = max(MIN_NODES, int(math.ceil(sweep_factor * NODES_PER_UNIT
                                                 * (2 * TAIL_L + g1 + g2))))
            F, P, zs = _t3_diagonal_tensor(mu3, [pts[2] + g1 + g2, pts[3] + g1 + g2,
                                                 pts[4] + g1], nodes)
            e += float((w * F).sum())
            psi += float((w * P).sum())
            zdev = max(zdev, float(np.abs(zs - 1).max()))
    return 6 * e, 6 * psi, mass, zdev


def output_e_t3_adapted(*, q: float, V: float, steps: tuple[float, float] = (0.4, 0.3)
                        ) -> Estimate:
    """E(q, V) at T = 3 and any r = q / V (THEORY 1.1, 1.4) on the wall-adapted chamber rule
    (:func:`_t3_adapted_level`) of the two trapezoid steps; error = their difference + |mass -
    1| E + max |sum_y Z - 1| E + the sweep's error (the coarser rule with 1.5 times the sweep
    nodes). The cost does not grow with r (~1 minute at the default steps on 2 cores)."""
    require(np.isfinite(q) and q > 0, "q", "finite > 0", q)
    require(np.isfinite(V) and V > 0, "V", "finite > 0", V)
    require(len(steps) == 2 and 0.2 <= steps[1] < steps[0] <= 0.8, "steps",
            "two steps in [0.2, 0.8], decreasing", steps)
    t0 = time.perf_counter()
    r = q / V
    e0, p0, _, _ = _t3_adapted_level(r, steps[0])
    e1, p1, mass, zdev = _t3_adapted_level(r, steps[1])
    e_s, p_s, _, _ = _t3_adapted_level(r, steps[0], sweep_factor=1.5)
    sweep = abs(e_s - e0)
    err = abs(e1 - e0) + (abs(mass - 1.0) + zdev) * abs(e1) + sweep + 1e-14 * abs(e1)
    return Estimate(e1 / V, err / V,
                    f"T = 3 wall-adapted chamber rule (trapezoid steps {steps[0]:g}, "
                    f"{steps[1]:g}); error = their difference + mass defect + sweep error",
                    extra={"psi_out": p1,
                           "psi_out_error": abs(p1 - p0) + abs(mass - 1.0) + zdev
                           + abs(p_s - p0),
                           "r": r, "E_hat": e1, "coarse": e0 / V, "mass": mass,
                           "sweep_error": sweep / V, "levels": tuple(steps),
                           "seconds": time.perf_counter() - t0})


@lru_cache(maxsize=16)
def _smolyak(dim: int, level: int) -> tuple[np.ndarray, np.ndarray]:
    """Smolyak's combination of one-dimensional Gauss-Hermite rules of 2 l - 1 nodes
    (l = 1..level) in ``dim`` dimensions: nodes and (signed) weights, coincident nodes merged."""
    import itertools
    from math import comb

    pts: dict = {}
    for ls in itertools.product(range(1, level + 1), repeat=dim):
        s = sum(ls)
        if not level <= s <= level + dim - 1:
            continue
        c = (-1) ** (level + dim - 1 - s) * comb(dim - 1, level + dim - 1 - s)
        rules = []
        for lv in ls:
            z, w = roots_hermitenorm(2 * lv - 1)
            rules.append((z, w / math.sqrt(2 * math.pi)))
        for idx in itertools.product(*[range(len(r[0])) for r in rules]):
            x = tuple(round(float(rules[k][0][i]), 13) for k, i in enumerate(idx))
            pts[x] = pts.get(x, 0.0) + c * math.prod(rules[k][1][i] for k, i in enumerate(idx))
    X = np.array(list(pts.keys()))
    Wt = np.array(list(pts.values()))
    keep = np.abs(Wt) > 1e-16 * np.abs(Wt).max()
    return X[keep], Wt[keep]


def output_e_sparse(*, T: int, q: float, V: float, level: int = 7) -> Estimate:
    """E(q, V) on Smolyak sparse grids of Gauss-Hermite rules (levels ``level`` - 1 and
    ``level``; error = their difference): a second omega rule, independent of the tensor rule
    of :func:`output_e` (same integrand)."""
    _check_tokens(T, SE_TOKENS)
    require(np.isfinite(q) and q >= 0 and np.isfinite(V) and V > 0, "q, V",
            "finite, q >= 0, V > 0", (q, V))
    require(isinstance(level, int) and 2 <= level <= 8, "level", "an integer in 2..8", level)
    A, _ = _shift_free_basis(T)
    vals = []
    for lv in (level - 1, level):
        X, Wt = _smolyak(A.shape[1], lv)
        e, _, _ = _integrands(T, math.sqrt(q / V) * X @ A.T, None)
        vals.append(float(Wt @ e) / V)
    return Estimate(vals[1], abs(vals[1] - vals[0]),
                    f"Smolyak sparse grids of Gauss-Hermite rules, levels {level - 1}, {level}",
                    extra={"coarse": vals[0]})


# ----------------------------------------------------------------------------- e_gen
def argmax_row_probabilities(mu: np.ndarray, sd: np.ndarray, *, nodes: int = 96,
                             L: float = 9.0) -> np.ndarray:
    """P(argmax_b x_b = b) for independent x_b ~ N(mu_b, sd_b^2) (N x k arrays): the winner's
    density against the others' CDFs, Gauss-Legendre on its window +- L sd_b."""
    gx, gw = np.polynomial.legendre.leggauss(nodes)
    N, k = mu.shape
    P = np.zeros((N, k))
    for b in range(k):
        s = mu[:, b:b + 1] + L * sd[b] * gx[None, :]
        f = _npdf((s - mu[:, b:b + 1]) / sd[b]) / sd[b]
        for c in range(k):
            if c != b:
                f = f * ndtr((s - mu[:, c:c + 1]) / sd[c])
        P[:, b] = L * sd[b] * (f @ gw)
    return P


@lru_cache(maxsize=8)
def argmax_row_basis(T: int) -> np.ndarray:
    """Row 0's entries (diagonal first) modulo the row's shift: A with omega_row = sqrt(r) A z."""
    sd2 = np.array([2.0] + [1.0] * (T - 1))
    one = np.ones(T)
    Cov = np.diag(sd2) - np.outer(one, one) / (one @ (one / sd2))
    lam, U = np.linalg.eigh(Cov)
    keep = lam > 1e-12
    return U[:, keep] * np.sqrt(lam[keep])


def _egen_level(T: int, r: float, h: float, z_max: float = 8.5) -> float:
    """T (1 - E sum_b P(y_0 = b | omega)^2) on the trapezoid rule of step h in the row's
    whitened shift-free coordinates z (|z_k| <= z_max)."""
    sd = np.sqrt(np.array([2.0] + [1.0] * (T - 1)))
    if r == 0:
        mu, wt = np.zeros((1, T)), np.ones(1)
    else:
        A = argmax_row_basis(T)
        k = int(math.ceil(z_max / h))
        z1 = h * np.arange(-k, k + 1)
        w1 = h * _npdf(z1)
        grids = np.meshgrid(*([z1] * A.shape[1]), indexing="ij")
        Z = np.stack([g.ravel() for g in grids], axis=1)
        wt = np.ones(Z.shape[0])
        for g in np.meshgrid(*([w1] * A.shape[1]), indexing="ij"):
            wt = wt * g.ravel()
        keep = wt > 1e-20
        mu, wt = math.sqrt(r) * Z[keep] @ A.T, wt[keep]
    acc = 0.0
    for i in range(0, mu.shape[0], 1 << 14):
        P = argmax_row_probabilities(mu[i:i + (1 << 14)], sd)
        acc += float(wt[i:i + (1 << 14)] @ (P * P).sum(axis=1))
    return float(T * (1.0 - acc))


def generalisation_error(*, T: int, q: float, V: float, step: float = 0.3) -> Estimate:
    """Bayes-optimal e_gen = E||y - E[y | omega]||_F^2 of hardmax at (q, V) (THEORY 1.5):
    T (1 - E_omega sum_b P(y_0 = b | omega)^2) over row 0's T - 1 shift-free directions
    (whitened), trapezoid rules of steps h and h / 2, h = ``step`` / max(1, sqrt(3 q / V)) (the
    row probabilities vary on the scale sqrt V); error = their difference + 1e-13 (the row
    probabilities' Gauss-Legendre rule) + the Gaussian mass outside |z| <= 8.5."""
    _check_tokens(T, (2, 4))
    require(np.isfinite(q) and q >= 0, "q", "finite >= 0", q)
    require(np.isfinite(V) and V >= 0 and q + V > 0, "V", "finite >= 0 with q + V > 0", V)
    if V == 0:
        return Estimate(0.0, 0.0, "V = 0: y is known")
    r = q / V
    h = step / max(1.0, math.sqrt(3 * r))
    e0 = _egen_level(T, r, h)
    e1 = _egen_level(T, r, h / 2) if r > 0 else e0
    return Estimate(e1, abs(e1 - e0) + 1e-13 + T * 1e-16,
                    f"row argmax probabilities (Gauss-Legendre) under trapezoid rules (steps "
                    f"{h:.3g}, {h / 2:.3g}) over the row's {T - 1} whitened shift-free directions")


# ----------------------------------------------------------------------------- state evolution
def se_curve_traced(*, T: int, rho: float, mmses: Sequence[float],
                    with_egen: bool = True) -> list[dict]:
    """The SE traced by V = mmse (THEORY 1.1): each V is a fixed point at
    alpha(V) = q_hat / (2 E(Q0 - V, V)), q_hat = 1 / Delta(V), Wishart mmse(Delta(V)) = V.
    Rows: alpha, alpha_error (E's relative error plus the prior's), mmse, q, q_hat, E, E_error,
    psi_out, phi (free entropy Phi = -q q_hat / 4 + q_hat Q0 / 4 - I(1/q_hat) + alpha Psi_out
    at that alpha), e_gen, e_gen_error, seconds."""
    _check_tokens(T, SE_TOKENS)
    require(np.isfinite(rho) and rho > 0, "rho", "finite > 0", rho)
    Q0 = 1.0 + rho
    rows = []
    for v in mmses:
        v = float(v)
        require(0 < v < 1, "mmse", "in (0, 1)", v)
        t0 = time.perf_counter()
        delta = delta_of_mmse(v, rho=rho)
        q = Q0 - v
        e = output_e(T=T, q=q, V=v)
        alpha = 1.0 / (2 * delta * e.value)
        prior = wishart.mmse_estimate(delta, rho=rho).error
        dmdd = (float(wishart.mmse(delta * 1.001, rho=rho))
                - float(wishart.mmse(delta * 0.999, rho=rho))) / (0.002 * delta)
        err = alpha * (e.error / e.value + prior / max(dmdd * delta, 1e-300))
        q_hat = 1.0 / delta
        psi = e.extra["psi_out"]
        phi = (-q * q_hat / 4 + q_hat * Q0 / 4
               - float(wishart.mutual_information(delta, rho=rho)) + alpha * psi)
        row = {"alpha": alpha, "alpha_error": err, "mmse": v, "q": q, "q_hat": q_hat,
               "E": e.value, "E_error": e.error, "psi_out": psi, "phi": phi}
        if with_egen:
            g = generalisation_error(T=T, q=q, V=v)
            row.update(e_gen=g.value, e_gen_error=g.error)
        row["seconds"] = time.perf_counter() - t0
        rows.append(row)
    return rows


def e_hat_interpolant(*, T: int, r_max: float, nodes: int = 9) -> dict:
    """E_hat(r) = V E(q, V) on [0, r_max] (it depends on r = q / V only) as the Chebyshev
    interpolant through ``nodes`` Chebyshev-Lobatto points (``nodes`` odd), each from
    :func:`output_e`. ``value(r)`` and ``error(r)``: the interpolant and its bar = the
    largest node bar times the Lebesgue constant bound (2 / pi) log(nodes) + 1, plus the
    difference from the interpolant through every other node (a much coarser one, so the
    difference bounds the finer one's interpolation error)."""
    _check_tokens(T, SE_TOKENS)
    require(np.isfinite(r_max) and 0 < r_max <= max_ratio(T), "r_max",
            f"in (0, {max_ratio(T):g}]", r_max)
    require(isinstance(nodes, int) and nodes >= 5 and nodes % 2 == 1, "nodes",
            "an odd integer >= 5", nodes)
    t0 = time.perf_counter()
    k = np.arange(nodes)
    x = np.cos(np.pi * k / (nodes - 1))
    r = 0.5 * r_max * (1 + x)
    ests = [output_e(T=T, q=float(ri), V=1.0) for ri in r]
    vals = np.array([e.value for e in ests])
    node_err = max(e.error for e in ests) * (2 / np.pi * math.log(nodes) + 1)

    def cheb_fit(xs, ys):
        return np.polynomial.chebyshev.Chebyshev.fit(xs, ys, len(xs) - 1, domain=[-1, 1])

    fine = cheb_fit(x, vals)
    coarse = cheb_fit(x[::2], vals[::2])

    def value(rr):
        return fine(2 * np.asarray(rr, dtype=float) / r_max - 1)

    def error(rr):
        xx = 2 * np.asarray(rr, dtype=float) / r_max - 1
        return np.abs(fine(xx) - coarse(xx)) + node_err

    return {"value": value, "error": error, "r_nodes": r, "E_hat_nodes": vals,
            "node_errors": np.array([e.error for e in ests]),
            "seconds": time.perf_counter() - t0}


def se_curve_interpolated(*, T: int, rho: float, mmses: Sequence[float],
                          nodes: int = 9) -> list[dict]:
    """:func:`se_curve_traced` for many V at the cost of ``nodes`` output-side evaluations:
    E(Q0 - V, V) = E_hat(r) / V from :func:`e_hat_interpolant` on [0, max r of the curve]
    (rows as there, without e_gen and phi; E_error from the interpolant's bar)."""
    _check_tokens(T, SE_TOKENS)
    require(np.isfinite(rho) and rho > 0, "rho", "finite > 0", rho)
    Q0 = 1.0 + rho
    vs = [float(v) for v in mmses]
    require(len(vs) > 0 and all(0 < v < 1 for v in vs), "mmse", "values in (0, 1)", vs)
    r_max = max((Q0 - v) / v for v in vs)
    it = e_hat_interpolant(T=T, r_max=r_max, nodes=nodes)
    rows = []
    for v in vs:
        delta = delta_of_mmse(v, rho=rho)
        r = (Q0 - v) / v
        E, E_err = float(it["value"](r)) / v, float(it["error"](r)) / v
        alpha = 1.0 / (2 * delta * E)
        prior = wishart.mmse_estimate(delta, rho=rho).error
        dmdd = (float(wishart.mmse(delta * 1.001, rho=rho))
                - float(wishart.mmse(delta * 0.999, rho=rho))) / (0.002 * delta)
        rows.append({"alpha": alpha,
                     "alpha_error": alpha * (E_err / E + prior / max(dmdd * delta, 1e-300)),
                     "mmse": v, "q": Q0 - v, "q_hat": 1.0 / delta, "E": E, "E_error": E_err})
    return rows


def alpha_of_mmse(*, T: int, rho: float, V: float, n: int) -> float:
    """alpha(V) = 1 / (2 Delta(V) E(Q0 - V, V)) on one rule (a smooth function of V for the
    root search; errors come from :func:`output_e`): T = 3, the Gauss-Hermite rule of ``n``
    nodes per axis; T = 2, the wall-adapted rule of step 0.2 (``n`` unused)."""
    q = 1.0 + rho - V
    if T == 2 and q > 0:
        e_hat = _t2_adapted_level(q / V, 0.2)[0]  # wall-adapted rule (~1e-10 relative)
    else:
        e_hat, _, _ = _outer_level(T, q / V, n, None)
    return V / (2 * delta_of_mmse(V, rho=rho) * e_hat)


#: smallest mmse the T = 2 state evolution searches (the wall-adapted rule has no r limit;
#: the floor keeps the Wishart inversion in its tested range)
MIN_MMSE_T2 = 1e-4


def min_mmse(T: int, rho: float) -> float:
    """Smallest V = mmse at which the SE has a deterministic output rule: T = 3, r <=
    :func:`max_ratio` (V >= Q0 / (1 + max_ratio)); T = 2, :data:`MIN_MMSE_T2`."""
    _check_tokens(T, SE_TOKENS)
    return MIN_MMSE_T2 if T == 2 else (1.0 + rho) / (1.0 + max_ratio(T))


def se_fixed_points(*, T: int, alpha: float, rho: float,
                    grid: Sequence[float] | None = None, xtol: float = 1e-8) -> list[dict]:
    """All SE fixed points V = mmse at sample ratio ``alpha`` within the grid's range
    (THEORY 1.1): sign changes of alpha(V) - alpha on ``grid`` (default: 8 points from
    max(:func:`min_mmse`, 1e-3) to 0.995; each on its coarsest rule), each root by Brent's
    method on the finest rule of its bracket;
    error = xtol + (the traced row's alpha error + |alpha(V*) - alpha|) / |d alpha / dV|.
    Rows: those of :func:`se_curve_traced` plus error, stable (alpha(V) decreasing),
    d_alpha_d_mmse and bayes_optimal (the stable one of largest phi). Fixed points below the
    grid's range are not searched: say so when reporting."""
    require(np.isfinite(alpha) and alpha > 0, "alpha", "finite > 0", alpha)
    require(np.isfinite(rho) and rho > 0, "rho", "finite > 0", rho)
    grid, vals = _alpha_grid(T, rho, grid)
    return _fixed_points_on_grid(T, alpha, rho, grid, vals, xtol)


def se_curve_fixed_points(*, T: int, rho: float, alphas: Sequence[float],
                          grid: Sequence[float] | None = None,
                          xtol: float = 1e-8) -> list[dict]:
    """:func:`se_fixed_points` for many alphas, alpha(V) on the grid computed once: per alpha
    the Bayes-optimal row, with n_fixed_points (how many fixed points the grid's range holds)
    and seconds."""
    require(np.isfinite(rho) and rho > 0, "rho", "finite > 0", rho)
    a_list = [float(a) for a in alphas]
    require(len(a_list) > 0 and all(np.isfinite(a) and a > 0 for a in a_list), "alphas",
            "finite values > 0", alphas)
    grid, vals = _alpha_grid(T, rho, grid)
    rows = []
    for a in a_list:
        t0 = time.perf_counter()
        fps = _fixed_points_on_grid(T, a, rho, grid, vals, xtol)
        best = [r for r in fps if r["bayes_optimal"]] or fps
        rows.append({**best[0], "n_fixed_points": len(fps),
                     "seconds": time.perf_counter() - t0})
    return rows


def _alpha_grid(T: int, rho: float,
                grid: Sequence[float] | None) -> tuple[list[float], list[float]]:
    """The mmse grid of the fixed-point search and alpha(V) on it (coarsest rule)."""
    _check_tokens(T, SE_TOKENS)
    Q0 = 1.0 + rho
    v_min = min_mmse(T, rho)
    if grid is None:
        grid = np.geomspace(max(v_min, 1e-3) * 1.0001, 0.995, 8)
    grid = [float(v) for v in grid]
    require(all(v_min <= v < 1 for v in grid), "grid", f"mmse values in [{v_min:.4g}, 1)", grid)
    vals = [alpha_of_mmse(T=T, rho=rho, V=v, n=rule_levels(T, (Q0 - v) / v)[0]) for v in grid]
    return grid, vals


def _fixed_points_on_grid(T: int, alpha: float, rho: float, grid: list[float],
                          alpha_vals: list[float], xtol: float) -> list[dict]:
    from scipy.optimize import brentq

    Q0 = 1.0 + rho
    vals = [a - alpha for a in alpha_vals]
    out = []
    for (v0, f0), (v1, f1) in zip(zip(grid, vals), zip(grid[1:], vals[1:])):
        if f0 * f1 > 0:
            continue
        n = rule_levels(T, (Q0 - v0) / v0)[-1]
        v = brentq(lambda x, n=n: alpha_of_mmse(T=T, rho=rho, V=x, n=n) - alpha, v0, v1,
                   xtol=xtol, rtol=1e-12)
        row = se_curve_traced(T=T, rho=rho, mmses=[v])[0]
        dv = 1e-4 * v
        slope = (alpha_of_mmse(T=T, rho=rho, V=v + dv, n=n)
                 - alpha_of_mmse(T=T, rho=rho, V=v - dv, n=n)) / (2 * dv)
        phi = (-row["q"] * row["q_hat"] / 4 + row["q_hat"] * Q0 / 4
               - float(wishart.mutual_information(1 / row["q_hat"], rho=rho))
               + alpha * row["psi_out"])
        out.append({**row, "alpha_traced": row["alpha"], "alpha": alpha, "phi": phi,
                    "error": xtol + (row["alpha_error"] + abs(row["alpha"] - alpha))
                    / max(abs(slope), 1e-12),
                    "stable": bool(slope < 0), "d_alpha_d_mmse": slope})
    if not out:
        raise ConvergenceError("no SE fixed point in the mmse grid", last_iterate=alpha,
                               residual=vals)
    best = bayes_optimal(out)
    for r in out:
        r["bayes_optimal"] = r is best
    return out


#: trapezoid steps of the T = 3 table's chamber-rule nodes (:func:`table_node`) up to
#: r = :data:`T3_TABLE_FINE_MAX`: the value is the last, its bar the last difference with its
#: geometric tail (:func:`_geometric_bar`); the first also runs with 1.5 times the sweep nodes
#: for the sweep's error. At r = 16/9 the steps 0.3, 0.25, 0.2 give differences 3.5e-6 and
#: 1.3e-8 (the error falls like exp(-c / h)): the bar of (0.4, 0.3, 0.25) was 3.6e-6, this 4e-8
T3_TABLE_STEPS = (0.3, 0.25, 0.2)
#: chamber nodes beyond this r use the cheaper :data:`T3_TABLE_STEPS_FAR` (E_hat ~ 3.2 / sqrt r
#: is small there and so are those bars: <= 1.1e-6 at r >= 9, below 3e-7 on the curve's mmse)
T3_TABLE_FINE_MAX = 8.0
T3_TABLE_STEPS_FAR = (0.4, 0.3, 0.25)
#: T = 3 table nodes with r at most this use the continued tensor Gauss-Hermite rule
#: (:func:`_tensor_node`: cheaper there, bar <= 4e-7), the others the chamber rule (the tensor
#: rule's bar grows to 7.2e-7 at r = 1.24, where the chamber rule's is 2.8e-8, and 2.4e-6 at
#: r = 1.47; at r = 1.07 the chamber steps 0.3, 0.25, 0.2 differ by 2.8e-7, 2.1e-7: bar 7e-7)
T3_TABLE_TENSOR_MAX = 1.1
#: the continued tensor rules of the table: k + shift, k + shift + 2, k + shift + 4 nodes per
#: axis, k = :func:`rule_levels`' first (beyond :data:`MAX_RULE`: r <= 1.1 needs at most 17^5)
T3_TABLE_TENSOR_SHIFT = 4
#: where the chamber rule's step differences do not shrink (r = 1.47: 4.7e-8, then 1.6e-7), a
#: node with r at most this uses the tensor rule continued two levels further (shift + 2; at
#: r = 1.47, 15, 17, 19 nodes per axis: bar 5.5e-7, the chamber value at step 0.2 7e-8 off)
T3_TABLE_FALLBACK_MAX = 1.5


def _tensor_node(r: float, shift: int = T3_TABLE_TENSOR_SHIFT
                 ) -> tuple[float, float, float, float]:
    """(E_hat, error, Psi_out, error) at r on the continued T = 3 tensor rules k + shift,
    k + shift + 2, k + shift + 4 (the :func:`output_e` bar: last difference with its geometric
    tail + orbit-mass gauge + the sweep's error on the first of them)."""
    k = rule_levels(3, r)[0] + shift
    levels = (k, k + 2, k + 4)
    vals = [_outer_level(3, r, m, None) for m in levels]
    e, p, dm = vals[-1]
    bar, rho = _geometric_bar([v[0] for v in vals])
    pbar, _ = _geometric_bar([v[1] for v in vals])
    if not (math.isfinite(bar) and math.isfinite(pbar)):
        raise ConvergenceError(f"the omega rules {levels} do not converge at r = {r:g}",
                               last_iterate=e, residual=rho)
    om, _, _ = omega_rule(T=3, r=r, n=k)
    e_s, p_s, _ = _outer_level(3, r, k, int(1.5 * sweep_nodes(om, 3)))
    return (e, bar + dm * max(abs(e), 6.0) + abs(e_s - vals[0][0]) + 1e-14 * abs(e),
            p, pbar + dm * 3 * math.log(3) + abs(p_s - vals[0][1]) + 1e-14 * abs(p))


def chamber_steps(r: float) -> tuple[float, float, float]:
    """The T = 3 table's chamber-rule steps at r (:data:`T3_TABLE_STEPS` up to
    :data:`T3_TABLE_FINE_MAX`, :data:`T3_TABLE_STEPS_FAR` beyond)."""
    return T3_TABLE_STEPS if r <= T3_TABLE_FINE_MAX else T3_TABLE_STEPS_FAR


def _chamber_combine(levels: Sequence[Sequence[float]], sweep_level: Sequence[float],
                     steps: Sequence[float], r: float) -> tuple[float, float, float, float]:
    """(E_hat, error, Psi_out, error) from the chamber rule's levels (each (E_hat, Psi_out,
    mass, max |sum_y Z - 1|) of :func:`_t3_adapted_level`, coarse to fine) and the first step
    rerun with 1.5 times the sweep nodes: error = the last difference with its geometric tail +
    (|mass - 1| + max |sum_y Z - 1|) E + the sweep's error + 1e-14 E."""
    e, p, mass, zdev = levels[-1]
    bar, rho = _geometric_bar([v[0] for v in levels])
    pbar, _ = _geometric_bar([v[1] for v in levels])
    if not (math.isfinite(bar) and math.isfinite(pbar)):
        raise ConvergenceError(f"the chamber rules {tuple(steps)} do not converge at r = {r:g}",
                               last_iterate=e, residual=rho)
    gauge = abs(mass - 1.0) + zdev
    return (e, bar + gauge * abs(e) + abs(sweep_level[0] - levels[0][0]) + 1e-14 * abs(e),
            p, pbar + gauge * max(1.0, abs(p)) + abs(sweep_level[1] - levels[0][1])
            + 1e-14 * abs(p))


def _chamber_node(r: float, steps: Sequence[float] | None = None
                  ) -> tuple[float, float, float, float]:
    """(E_hat, error, Psi_out, error) at r on the T = 3 chamber rule of three trapezoid steps
    (default :func:`chamber_steps`; bar of :func:`_chamber_combine`)."""
    steps = chamber_steps(r) if steps is None else tuple(steps)
    levels = [_t3_adapted_level(r, h) for h in steps]
    return _chamber_combine(levels, _t3_adapted_level(r, steps[0], sweep_factor=1.5), steps, r)


def table_node(*, T: int, r: float) -> tuple[float, float, float, float]:
    """(E_hat, error, Psi_out, error) at r for :func:`e_hat_table`: T = 3, the continued
    tensor rule (:func:`_tensor_node`, 5-30 s of CPU) up to :data:`T3_TABLE_TENSOR_MAX`, the
    wall-adapted chamber rule at the steps :func:`chamber_steps` beyond (:func:`_chamber_node`,
    about 3 minutes of CPU at r <= 8, 1 minute beyond), or where its differences do not shrink
    (r <= :data:`T3_TABLE_FALLBACK_MAX`) the tensor rule two levels further; T = 2, the
    wall-adapted rule."""
    _check_tokens(T, SE_TOKENS)
    require(np.isfinite(r) and r > 0, "r", "finite > 0", r)
    if T == 3:
        if r <= T3_TABLE_TENSOR_MAX:
            return _tensor_node(r)
        try:
            return _chamber_node(r)
        except ConvergenceError:
            if r > T3_TABLE_FALLBACK_MAX:
                raise
            return _tensor_node(r, shift=T3_TABLE_TENSOR_SHIFT + 2)
    e = output_e_t2_adapted(q=r, V=1.0)
    return e.value, e.error, e.extra["psi_out"], e.extra["psi_out_error"]


def _lagrange_abs_sum(x_nodes: np.ndarray, x: np.ndarray, eps: np.ndarray) -> np.ndarray:
    """sum_k |l_k(x)| eps_k for the Lagrange basis l_k of the Chebyshev-Lobatto nodes
    ``x_nodes`` (x_k = cos(pi k / (n - 1))): the largest change of the interpolant at x when
    each node value moves by at most eps_k (barycentric weights (-1)^k, halved at the ends)."""
    n = len(x_nodes)
    w = (-1.0) ** np.arange(n)
    w[0] *= 0.5
    w[-1] *= 0.5
    x = np.atleast_1d(np.asarray(x, dtype=float))
    d = x[:, None] - x_nodes[None, :]
    hit = np.isclose(d, 0.0, atol=1e-15)
    d = np.where(hit, 1.0, d)
    t = w[None, :] / d
    lk = t / t.sum(axis=1, keepdims=True)
    on = hit.any(axis=1)
    lk[on] = hit[on].astype(float)
    return np.abs(lk) @ eps


def e_hat_table(*, T: int = 3, nodes: int = 9, s_max: float = 1.5,
                node_values: Sequence[Sequence[float]] | None = None) -> dict:
    """E_hat(r) and Psi_out(r) on r >= 1 / s_max^2 (all r up to infinity) as Chebyshev
    interpolants in s = 1 / sqrt(r) on [0, s_max] (docs/hardmax_se.md, "Large r"):
    G(s) = sqrt(r) E_hat(r) with the exact end value G(0) = :func:`e_hat_leading`, and
    P(s) = Psi_out(r) with P(0) = 0 (y is determined by omega as r -> infinity). The other
    ``nodes`` - 1 Chebyshev-Lobatto nodes come from :func:`table_node`, or from
    ``node_values`` (rows
    (E_hat, error, Psi_out, error) in node order k = 0.., s_k = s_max (1 + cos(pi k /
    (nodes - 1))) / 2). ``value(r)``, ``error(r)``, ``psi(r)``, ``psi_error(r)``: the
    interpolants and their bars = the node bars propagated through the Lagrange basis at r
    (sum_k |l_k| bar_k, at most the largest bar times the Lebesgue constant), plus the
    difference from the interpolant through every other node."""
    _check_tokens(T, SE_TOKENS)
    require(isinstance(nodes, int) and nodes >= 5 and nodes % 2 == 1, "nodes",
            "an odd integer >= 5", nodes)
    require(np.isfinite(s_max) and 0.2 <= s_max <= 2.0, "s_max", "in [0.2, 2]", s_max)
    t0 = time.perf_counter()
    k = np.arange(nodes)
    x = np.cos(np.pi * k / (nodes - 1))
    sk = 0.5 * s_max * (1 + x)
    if node_values is None:
        node_values = [table_node(T=T, r=float(1 / si ** 2)) for si in sk[:-1]]
    vals = np.array([list(v) for v in node_values], dtype=float)
    require(vals.shape == (nodes - 1, 4) and np.all(np.isfinite(vals)), "node_values",
            f"{nodes - 1} rows (E_hat, error, Psi_out, error)", vals.shape)
    G = np.append(vals[:, 0] / sk[:-1], e_hat_leading(T))
    G_err = np.append(vals[:, 1] / sk[:-1], 1e-13)
    P = np.append(vals[:, 2], 0.0)
    P_err = np.append(vals[:, 3], 0.0)

    def fit(xs, ys):
        return np.polynomial.chebyshev.Chebyshev.fit(xs, ys, len(xs) - 1, domain=[-1, 1])

    g_fine, g_coarse = fit(x, G), fit(x[::2], G[::2])
    p_fine, p_coarse = fit(x, P), fit(x[::2], P[::2])

    def xs_of(rr):
        rr = np.asarray(rr, dtype=float)
        return 2 / (s_max * np.sqrt(rr)) - 1

    def check(rr):
        require(np.all(np.asarray(rr) >= 1 / s_max ** 2 * (1 - 1e-12)), "r",
                f">= {1 / s_max ** 2:.4g} (the table's range)", rr)

    def value(rr):
        check(rr)
        return g_fine(xs_of(rr)) / np.sqrt(rr)

    def error(rr):
        check(rr)
        xx = xs_of(rr)
        prop = _lagrange_abs_sum(x, np.ravel(xx), G_err).reshape(np.shape(xx))
        return (np.abs(g_fine(xx) - g_coarse(xx)) + prop) / np.sqrt(rr)

    def psi(rr):
        check(rr)
        return p_fine(xs_of(rr))

    def psi_error(rr):
        check(rr)
        xx = xs_of(rr)
        prop = _lagrange_abs_sum(x, np.ravel(xx), P_err).reshape(np.shape(xx))
        return np.abs(p_fine(xx) - p_coarse(xx)) + prop

    return {"T": T, "value": value, "error": error, "psi": psi, "psi_error": psi_error,
            "s_nodes": sk, "r_nodes": 1 / sk[:-1] ** 2, "G_nodes": G, "node_values": vals,
            "s_max": s_max, "seconds": time.perf_counter() - t0}


#: T = 3 table nodes for :func:`e_hat_table` (nodes = 33, s_max = 1.5): rows (E_hat, error,
#: Psi_out, error) at the 32 Chebyshev-Lobatto nodes s_k = 0.75 (1 + cos(pi k / 32)),
#: r = 1 / s_k^2 from 0.4444 (k = 0) to 76672 (k = 31), computed once by :func:`table_node`
#: (benchmarks/hardmax_se.py, section table3, resumable in pieces: about 41 minutes of CPU);
#: k <= 13 (r <= 1.07) the continued tensor rule, k = 15 (r = 1.47) its fallback two levels
#: further, the others the chamber rule. The even rows are the 17-node table's nodes (rows k <= 12
#: and k = 22, 24, .., 30 unchanged from it). tests/test_hardmax_se.py recomputes node 17 (slow)
#: and checks the table against the direct rule between nodes (fast)
T3_TABLE_NODES: tuple[tuple[float, float, float, float], ...] = (
    (2.4562452497634784, 3.4732448201445778e-09, -2.605017626980813, 9.340143982796837e-10),
    (2.45471052290746, 6.530210152322729e-09, -2.6031933467500807, 1.5443815627201794e-09),
    (2.4500714899351825, 3.983949792225206e-09, -2.5976819402180498, 1.0200827662611033e-09),
    (2.442222613125935, 8.917198412171915e-09, -2.5883668181047743, 1.982231399905273e-09),
    (2.4309847481066824, 6.241030123840867e-09, -2.5750507365986444, 1.4415319530334904e-09),
    (2.416100358299455, 4.496614778922183e-09, -2.557451574348958, 5.194188831163414e-10),
    (2.3972270361214587, 3.818231018649363e-09, -2.5351968168565855, 4.803566474737982e-10),
    (2.373929691189722, 1.2699365724252366e-08, -2.507817286897118, 1.0945519372449774e-09),
    (2.3456720584687267, 1.286599570681756e-08, -2.474741030218184, 1.2220785746734452e-09),
    (2.3118086924319448, 5.409015945054908e-08, -2.43528882473679, 4.559044384579065e-09),
    (2.271579365357372, 6.431919222430154e-08, -2.3886735766624385, 6.258554816458897e-09),
    (2.2241088530431887, 1.0889242491717037e-07, -2.334006927027931, 1.0755778155598574e-09),
    (2.168416644322554, 1.625556835299156e-07, -2.270317691651069, 5.153887843060526e-09),
    (2.1034425856622123, 3.981183700318921e-07, -2.196588070441104, 1.9916134883774696e-08),
    (2.028095786649798, 2.7555176675234185e-08, -2.111814446053782, 9.324635338849704e-08),
    (1.9413361705091867, 5.489228713513365e-07, -2.0150994875671726, 7.897267601691497e-08),
    (1.8422940670145727, 4.0178857184439435e-08, -1.905779279375425, 7.153157644739194e-08),
    (1.7304292506181072, 6.568540614786168e-08, -1.7835828358963974, 7.876348998119317e-08),
    (1.6057216853468796, 6.215565154051394e-08, -1.6488108943295954, 1.290039500861402e-08),
    (1.4688670534770325, 1.221282043770939e-07, -1.5025060429078425, 8.001967173022621e-08),
    (1.3214375515792205, 7.760649617563045e-08, -1.3465740548636702, 5.4736698658509385e-08),
    (1.165957129829657, 3.101591558673357e-08, -1.1838116512559917, 2.896196161713434e-08),
    (1.005847398299891, 1.0714048721137814e-06, -1.0178076536136644, 9.794569069176658e-07),
    (0.8452270426922048, 1.7836997490680066e-07, -0.852713824987031, 9.840113577359958e-08),
    (0.6885885188323905, 5.395955058576681e-07, -0.6929199735537265, 4.0709760511655563e-07),
    (0.5404154598341121, 6.541992284102394e-07, -0.5426997222873269, 3.2150147187626713e-07),
    (0.4048235774172402, 3.080735320104819e-07, -0.4059014475740419, 1.5645222107400515e-07),
    (0.2852981007569681, 7.504134061220141e-07, -0.2857410483645372, 5.041089337340116e-07),
    (0.18456620684201383, 9.628396054962873e-08, -0.18471795194009671, 1.6539071238987235e-08),
    (0.10460047974007293, 1.7190329030664556e-07, -0.10464040851595043, 7.612352716792282e-08),
    (0.04671608370948148, 7.134642458686119e-08, -0.04672274945619238, 6.218993287242637e-08),
    (0.011710825143993842, 1.810665148156513e-08, -0.0117111943377046, 2.5065941564578266e-08),
)


@lru_cache(maxsize=1)
def t3_table() -> dict:
    """The T = 3 :func:`e_hat_table` from the shipped :data:`T3_TABLE_NODES` (33 nodes,
    r >= 4/9)."""
    return e_hat_table(T=3, nodes=len(T3_TABLE_NODES) + 1, s_max=1.5,
                       node_values=T3_TABLE_NODES)


def se_curve_tabulated(*, rho: float, alphas: Sequence[float], table: dict,
                       grid_points: int = 400, xtol: float = 1e-12) -> list[dict]:
    """SE fixed points at many alphas from an :func:`e_hat_table` (THEORY 1.1), parametrised by
    the prior's noise Delta: alpha(Delta) = 1 / (2 Delta E(Q0 - m, m)), m = Wishart mmse(Delta),
    E = E_hat(r) / m. Per alpha: every sign change on a log-Delta grid, Brent's root, error on
    mmse = (the table's relative error of E) alpha / |d alpha / d mmse| + xtol, stable when
    alpha decreases with mmse, phi (free entropy) and the Bayes-optimal flag (stable, largest
    phi). Rows: alpha, mmse, error, q, r, E, E_error, psi_out, phi, stable, bayes_optimal,
    n_fixed_points, e_gen omitted (see :func:`generalisation_error`)."""
    from scipy.optimize import brentq

    require(np.isfinite(rho) and rho > 0, "rho", "finite > 0", rho)
    a_list = [float(a) for a in alphas]
    require(len(a_list) > 0 and all(np.isfinite(a) and a > 0 for a in a_list), "alphas",
            "finite values > 0", alphas)
    Q0 = 1.0 + rho
    r_min = 1 / table["s_max"] ** 2

    def state(logd: float) -> tuple[float, float, float, float]:
        d = math.exp(logd)
        m = float(wishart.mmse(d, rho=rho))
        r = max((Q0 - m) / m, r_min)
        E = float(table["value"](r)) / m
        return 1.0 / (2 * d * E), m, r, E

    lo, hi = math.log(1e-7), math.log(1e3)
    m_hi = float(wishart.mmse(math.exp(hi), rho=rho))
    require((Q0 - m_hi) / m_hi >= r_min, "rho",
            f"at least about {r_min:.3g}: q/V -> rho as alpha -> 0 and the table starts at "
            f"q/V = {r_min:.3g}", rho)
    grid = np.linspace(lo, hi, grid_points)
    a_grid = np.array([state(t)[0] for t in grid])
    rows = []
    for alpha in a_list:
        t0 = time.perf_counter()
        f = a_grid - alpha
        fps = []
        for i in np.nonzero(f[:-1] * f[1:] <= 0)[0]:
            t = brentq(lambda u, a=alpha: state(u)[0] - a, grid[i], grid[i + 1], xtol=xtol,
                       rtol=1e-14)
            a_t, m, r, E = state(t)
            dt = 1e-5
            (a_p, m_p, _, _), (a_m, m_m, _, _) = state(t + dt), state(t - dt)
            slope = (a_p - a_m) / (m_p - m_m)  # d alpha / d mmse
            E_err = float(table["error"](r)) / m
            q_hat = math.exp(-t)
            psi = float(table["psi"](r))
            phi = (-(Q0 - m) * q_hat / 4 + q_hat * Q0 / 4
                   - float(wishart.mutual_information(math.exp(t), rho=rho)) + alpha * psi)
            fps.append({"alpha": alpha, "mmse": m, "q": Q0 - m, "r": r, "E": E,
                        "E_error": E_err, "psi_out": psi,
                        "psi_out_error": float(table["psi_error"](r)), "phi": phi,
                        "error": alpha * E_err / E / max(abs(slope), 1e-12)
                        + abs(m_p - m_m) / (2 * dt) * xtol,
                        "stable": bool(slope < 0), "d_alpha_d_mmse": slope})
        require(len(fps) > 0, "alpha",
                f"in [{a_grid.min():.4g}, {a_grid.max():.4g}] (the table's curve, Delta in "
                "[1e-7, 1e3])", alpha)
        best = bayes_optimal(fps) or fps[0]
        rows.append({**best, "bayes_optimal": best["stable"], "n_fixed_points": len(fps),
                     "seconds": time.perf_counter() - t0})
    return rows


# ----------------------------------------------------------------------------- Monte Carlo
def monte_carlo_e(*, T: int, q: float, V: float, samples: int, seed: int = 2026,
                  nodes: int | None = None) -> Estimate:
    """E(q, V) by seeded Monte Carlo (independent of the omega rule and of the orbits): omega
    and h drawn, y = row-wise argmax of h, g_out from :func:`outcome_moments` at (y, omega);
    error = standard error of the mean of |g|_W^2. Any T of :data:`TOKENS_RANGE` (T = 4: the
    generic recursion; no deterministic omega rule there)."""
    _check_tokens(T)
    require(isinstance(samples, int) and samples >= 100, "samples", "an integer >= 100",
            samples)
    rng = np.random.default_rng(seed)
    flat = pairs(T)
    W = weights(T)
    n = len(flat)
    om = math.sqrt(q) * np.sqrt(W) * rng.standard_normal((samples, n))
    h = om + math.sqrt(V) * np.sqrt(W) * rng.standard_normal((samples, n))
    H = np.empty((samples, T, T))
    for k, (a, b) in enumerate(flat):
        H[:, a, b] = h[:, k]
        H[:, b, a] = h[:, k]
    Y = np.argmax(H, axis=2)
    vals = np.zeros(samples)
    codes = Y @ (T ** np.arange(T)[::-1])
    for code in np.unique(codes):
        sel = codes == code
        y = tuple(int(c) for c in Y[np.argmax(sel)])
        mom = outcome_moments(y, omega=om[sel], V=V, nodes=nodes)
        g = mom[:, 1:] / mom[:, :1] / (W * V)
        vals[sel] = (W * g * g).sum(axis=1)
    return mean_estimate(vals, f"seeded Monte Carlo ({samples} draws of omega and h, seed "
                         f"{seed}); error = standard error")


# ----------------------------------------------------------------------------- identity checks
def run_checks(*, T: int = 3, seed: int = 2026) -> list[dict]:
    """The identity checks of THEORY 4 for hardmax at T tokens (``aim-sym check --channel hardmax
    --tokens T``): normalisation sum_y Z_y = 1, the first Nishimori identity sum_y Z_y g_y = 0,
    g_out against central differences of log Z_out (two steps, Richardson), the traced second
    Nishimori identity sum_y Z (|g|_W^2 + tr_W dg) = 0, and omega = 0, V = 1 against the q = 0
    recursion of :mod:`.hardmax` (S). Each row: name, passed, detail."""
    _check_tokens(T)
    rng = np.random.default_rng(seed)
    n = T * (T + 1) // 2
    W = weights(T)
    om = rng.standard_normal((3, n)) * np.sqrt(W)
    V = 0.7
    out = z_out(T=T, omega=om, V=V, nodes=140)
    rows = []
    err = float(np.max(np.abs(out["Z"].sum(axis=0) - 1)))
    rows.append({"name": "normalisation", "passed": err < 1e-10,
                 "detail": f"max |sum_y Z - 1| = {err:.1e} at 3 random omega (tol 1e-10)"})
    err = float(np.max(np.abs(np.einsum("yn,ynk->nk", out["Z"], out["g"]))))
    rows.append({"name": "nishimori (first)", "passed": err < 1e-8,
                 "detail": f"max |sum_y Z g| = {err:.1e} (tol 1e-8)"})
    # g against Richardson-extrapolated central differences of log Z, at the first omega
    o, Z0, g0 = om[0], out["Z"][:, 0], out["g"][:, 0]
    live = Z0 > 1e-8
    fd = np.zeros((len(Z0), n))
    for k in range(n):
        d = []
        for h in (2e-3, 1e-3):
            e = np.zeros(n)
            e[k] = h
            zp = z_out(T=T, omega=(o + e)[None, :], V=V, nodes=140)["Z"][:, 0]
            zm = z_out(T=T, omega=(o - e)[None, :], V=V, nodes=140)["Z"][:, 0]
            with np.errstate(divide="ignore", invalid="ignore"):
                d.append((np.log(zp) - np.log(zm)) / (2 * h))
        fd[:, k] = (4 * d[1] - d[0]) / 3
    err = float(np.max(np.abs(fd[live] - g0[live])))
    rows.append({"name": "g_out = d log Z_out / d omega", "passed": err < 1e-6,
                 "detail": f"max |g - finite difference| = {err:.1e} over {int(live.sum())} "
                           "outcomes (Richardson, steps 2e-3, 1e-3; tol 1e-6)"})
    trace_dg = np.zeros(len(Z0))
    h = 1e-4
    for k in range(n):
        e = np.zeros(n)
        e[k] = h
        gp = z_out(T=T, omega=(o + e)[None, :], V=V, nodes=140)["g"][:, 0, k]
        gm = z_out(T=T, omega=(o - e)[None, :], V=V, nodes=140)["g"][:, 0, k]
        trace_dg += W[k] * (gp - gm) / (2 * h)
    gg = (W * g0 * g0).sum(axis=1)
    err = abs(float(Z0 @ (gg + trace_dg)))
    rows.append({"name": "nishimori (second, traced)", "passed": err < 1e-5,
                 "detail": f"|sum_y Z (|g|^2_W + tr_W dg)| = {err:.1e} against sum_y Z |g|^2_W = "
                           f"{float(Z0 @ gg):.4g} (central differences, tol 1e-5)"})
    if T <= 5:
        zero = z_out(T=T, omega=np.zeros((1, n)), V=1.0, nodes=200)
        rows.append(zero_omega_row(T, zero["Z"][:, 0], zero["g"][:, 0]))
    return rows


def zero_omega_row(T: int, Z: np.ndarray, g: np.ndarray) -> dict:
    """The check row "omega = 0, V = 1 against the q = 0 recursion": S = sum_y Z_y |g_y|_W^2
    from every outcome's Z (Y,) and g (Y, n) at omega = 0, V = 1 against
    :func:`aim_sym.numerics.hardmax.weak_threshold`'s S (tolerance 1e-10 + its bar)."""
    from .hardmax import weak_threshold

    S = float(np.einsum("y,yk,k->", Z, g ** 2, weights(T)))
    ref = weak_threshold(T)
    S_ref, S_err = ref.extra["S"], 2 * ref.extra["S"] ** 2 * ref.error
    err = abs(S - S_ref)
    return {"name": "omega = 0, V = 1 against the q = 0 recursion", "passed": err < 1e-10 + S_err,
            "detail": f"S = {S:.15g} against {S_ref:.15g} (tol 1e-10 + its bar)"}
