"""Branch statistics of deep tied attention on the last layer's SE branch with one shared
trapezoid fibre lattice, for every depth L (THEORY 2.2 sequential thresholds, 2.3 and 2.5
fibre), and the sequential thresholds on it (M = 2, P_l = 1): :func:`sequential_thresholds`
for every unlearned layer at a fixed (coarse, refined) pair of orders (L = 2, 3), and its L = 2
ladder :func:`sequential_threshold` (``digits``).  One kernel for every depth
(:func:`branch_stats`: lattice :func:`fibre_lattice` over the free rows, h rule
:func:`h_lattice` on the box of the vertex maps, :func:`fibre_moments` in node chunks), and
one threshold driver for every engine (:func:`sequential_driver`: this lattice, the branch
kernel of :mod:`.smi_branch_qmc`, the replicate bar of :mod:`.smi_cascade`).

On the branch ``Q = diag(0, .., 0, q)``, ``M = A_{L-1} .. A_1`` is invariant under each free
row's sign flip, so ``E z_l = 0``, the cross blocks of the posterior covariance vanish and each
unlearned layer has the stability coefficient ``mu_l = E ||Cov[z_l | y, omega_L] - I||_F^2``;
the sequential threshold of layer ``l`` is the root ``q*`` of ``r_l = mu_l - (1 - q) K_L / q``,
``alpha_seq,l = 1 / mu_l(q*)``; the smallest of them is the next transition, the others are
upper bounds only (once that layer is learned the branch changes).  At L = 3 the lattice is
anisotropic (``dz1`` in ``z_1``, ``dz2`` in ``z_2``), exponentials are float32 and omega_3
nodes of weight < :data:`LATTICE_WCUT` are dropped (bounded in the bar).  At ``Q = diag(0,
q2)`` the fibre integral over ``z_1'`` given ``(h, omega_2)`` is

    Z = int dz N(z; 0, I) sum_s N(A(z)^{-1} s h; omega_2, V I) / det A(z),   V = 1 - q2,

with an integrand that is even in ``z`` and analytic (entire up to the complex poles of the
logistic), concentrated near curves when V is small (which defeats Laplace rules); the
trapezoid rule on a square lattice converges geometrically there (error ~ ``exp(-2 pi w /
dz)``, ``w`` the analyticity width).  The lattice covers the half-disc ``z_0 >= 0, |z| <= R``
(evenness doubles it; the cut prior mass is ``exp(-R^2/2)``).

The lattice does not depend on the outer point, so everything node-dependent (``A^{-1}``, the
prior, ``det A``) is computed once and the exponent is a bilinear form in (outer features) x
(node features): one matrix product per cache-sized block (:data:`_BLOCK`), then a
row-shifted, clipped ``exp`` (:func:`fibre_sums`, :func:`_exp_shifted`).  Outer rules: h by
:func:`h_lattice` (the average over (true z_1, eta) given omega_2 is an integral over h weighted
by Z(h) itself), omega_2 by :func:`omega_rule`.  Checks at every run: the outer mass (1) and
the Nishimori identity at the refined order.  Measured values, costs and the convergence
study: benchmarks/RESULTS.md, docs/smi_depth.md.
"""

from __future__ import annotations

import itertools
import math
import time
from functools import lru_cache

import numpy as np

from .records import ConvergenceError, require, standard_error
from .smi_fibre import (
    check_skip_floor,
    fibre_point,
    fibre_quadratics,
    inverse_columns,
    rotated,
    sinh_nodes,
)

H_PAD = 6.0        # h-box padding in standard deviations of the blur sqrt(V) M eta
TRAP_R = 7.5       # L = 2 lattice radius: cut prior mass exp(-R^2/2) < 1e-12
COARSE_R = 6.0     # radius of the coarse L = 2 lattices (dz > 0.2, errors >> 1e-8): cut mass 1.5e-8
DEEP_R = 6.0       # radius of the deeper lattices (L >= 3, 4D and up)
_BLOCK = 1 << 16    # elements of one (outer x node) block: 512 kB (measured fastest with 2 processes)
_CHUNK = 8192       # fibre nodes per block at most (8 x 8192 x 8 B = 512 kB per work array)


def lattice_radius(dz: float, layers: int = 2) -> float:
    """Radius of the fibre lattice of spacing ``dz``: :data:`TRAP_R`, or :data:`COARSE_R` for the
    coarse L = 2 lattices ``dz > 0.2`` (the scan order), whose own error is far above the cut;
    :data:`DEEP_R` for ``layers >= 3``."""
    return DEEP_R if layers > 2 else COARSE_R if dz > 0.2 else TRAP_R


def tail_mass(radius: float, dims: int) -> float:
    """Prior mass of N(0, I_dims) (``dims`` even) outside the ball of the given radius."""
    x = 0.5 * radius**2
    return math.exp(-x) * sum(x**k / math.factorial(k) for k in range(dims // 2))


def _row_disc(d: float, radius: float):
    """One free row's half-disc lattice ``z_0 >= 0``: coordinates, squared norms and weights
    (x 2 by the row's sign symmetry, halved on the face ``z_0 = 0``)."""
    k = int(math.floor(radius / d))
    g = d * np.arange(-k, k + 1)
    a, b = np.meshgrid(g[g >= 0], g, indexing="ij")
    a, b = a.ravel(), b.ravel()
    keep = a * a + b * b <= radius**2
    a, b = a[keep], b[keep]
    return a, b, a * a + b * b, np.where(a == 0.0, 0.5, 1.0) * 2.0 * d * d


@lru_cache(maxsize=8)
def fibre_lattice(dz: float, c: float, beta: float, radius: float | None = None,
                  dz2: float | None = None, layers: int = 2) -> dict:
    """Node features of the trapezoid lattice over the free rows ``z_1 .. z_{L-1}`` (THEORY 2.3,
    2.5): spacing ``dz`` in ``z_1`` and ``dz2`` (default ``dz``) in the later rows, on the ball of
    ``radius`` (default :func:`lattice_radius`), each row's first coordinate ``>= 0`` (the
    integrand is even in every row: weights x 2 per row, halves on the faces).

    Returns ``B`` (3, n): ``|M^{-1} h|^2 = B . (h0^2, h0 h1, h1^2)``; ``Y`` (4, n): entries of
    ``M^{-1}`` (``omega^T M^{-1} h = Y . (o0 h0, o0 h1, o1 h0, o1 h1)``); ``logw`` (n,):
    log(weight x prior / det M); ``F`` (n, 4 + 3 rows): ``1``, ``z_l z_l^T`` of each free row,
    ``B``; ``Ai`` (n, 4); ``z`` (the coordinates), ``rows``, ``layers``, ``tail`` (prior mass
    outside the ball)."""
    rows = layers - 1
    dz2 = dz if dz2 is None else dz2
    require(0.005 <= dz <= 1.0, "dz", "in [0.005, 1]", dz)
    require(0.005 <= dz2 <= 1.0, "dz2", "in [0.005, 1]", dz2)
    radius = lattice_radius(dz, layers) if radius is None else radius
    a, b, R2, W = _row_disc(dz, radius)
    Z = [a, b]
    for _ in range(1, rows):              # append a row, keeping the nodes inside the ball
        a, b, r2, w = _row_disc(dz2, radius)
        m = max(1, 4_000_000 // r2.size)
        pairs = [np.nonzero(R2[s0:s0 + m, None] + r2 <= radius**2) for s0 in range(0, R2.size, m)]
        i = np.concatenate([p[0] + s0 for p, s0 in zip(pairs, range(0, R2.size, m), strict=True)])
        j = np.concatenate([p[1] for p in pairs])
        Z = [x[i] for x in Z] + [a[j], b[j]]
        R2, W = R2[i] + r2[j], W[i] * w[j]
    Mi, jac = inverse_columns(Z, layers, c, beta)
    require(bool(np.all(np.isfinite(jac) & (jac > 0))), "skip", "> 0 (finite det M)", c)
    B, Y, _ = fibre_quadratics(Mi)
    logw = np.log(W) - 0.5 * R2 - rows * math.log(2 * math.pi) + np.log(jac)
    zz = [f for l in range(rows) for f in (Z[2 * l] ** 2, Z[2 * l] * Z[2 * l + 1],
                                           Z[2 * l + 1] ** 2)]
    F = np.stack([np.ones_like(R2), *zz, *B], 1)
    return dict(B=B, Y=Y, logw=logw, F=F, Ai=Y.T.copy(), n=R2.size, z=tuple(Z), rows=rows,
                layers=layers, radius=radius, tail=tail_mass(radius, 2 * rows), dz=(dz, dz2))


EXP_FLOOR = -60.0   # exponents below (row max + EXP_FLOOR) are clipped there (no subnormals)
# relative effect of the float32 exponentials (_exp_shifted) on mu1, K2, psi and the mass:
# measured <= 4.3e-9 at orders (0.4, 1.9, 0.22) and (0.2, 0.7, 0.15) against float64 (numpy's
# float32 exp has a relative bias of -4.7e-9; benchmarks/RESULTS.md); sequential_threshold adds
# alpha x FLOAT32_REL to its bar
FLOAT32_REL = 1e-8


def _exp_shifted(A, shift, single: bool):
    """``A <- exp(A - shift)`` row-wise for exponents ``A - shift <= 0``, clipped below at
    :data:`EXP_FLOOR`.  ``single``: ``exp(a) = exp(a32) (1 + (a - a32))`` with ``a32`` the float32
    rounding of ``a`` and its exp taken in float32 (numpy's float64 exp costs ~5x more here, and
    is half the kernel); relative error per term ~1e-7 (the float32 exp's; the argument's
    rounding, up to 60 x 2^-24, is restored by the first-order factor), sums in float64.  A
    clipped entry carries ``(1 + a - EXP_FLOOR) e^EXP_FLOOR``: ``|.| <= |a| e^-60`` of the row
    maximum (which is 1)."""
    if single:
        a32 = _buffer("f32", A.shape, np.float32)   # reused: no fresh pages per block
        A -= (shift - 1.0)[:, None]                 # A = 1 + a
        np.subtract(A, 1.0, out=a32, casting="same_kind")
        np.maximum(a32, EXP_FLOOR, out=a32)
        A -= a32                                    # 1 + (a - a32)
        np.exp(a32, out=a32)
        A *= a32
    else:
        A -= shift[:, None]
        np.maximum(A, EXP_FLOOR, out=A)
        np.exp(A, out=A)


def fibre_sums(h0, h1, o0, o1, v2, lat: dict, single: bool = False):
    """Raw lattice sums for one cache-sized block of outer points: ``G`` (r, k) = ``sum_z S F``
    (``F`` = ``lat["F"]``, here ``(1, zz, B)``, k = 7) and ``Dd`` (r, 4) = ``sum_z D A^{-1}``
    (``lat["Ai"]``) with ``S, D = e+ +- e-``,
    ``e+- = exp(logw - |A^{-1} h -+ omega|^2 / (2V) - shift)`` (THEORY 2.3), and the row shift.

    The exponents are clipped at ``shift + EXP_FLOOR`` (every clipped term is ``<= e^-60`` of the
    row maximum: relative bias ``<= n e^-60``), and a sign whose row maximum is below that floor is
    not exponentiated at all (same bound): for ``|omega| >> sqrt V`` one sign dominates."""
    r, n = h0.size, lat["n"]
    P, X, M, T = (_buffer(k, (r, n)) for k in range(4))   # reused: no fresh pages per block
    hh = np.empty((r, 4))
    hh[:, 0], hh[:, 1], hh[:, 2] = h0 * h0, h0 * h1, h1 * h1
    hh[:, :3] *= -0.5 / v2
    hh[:, 3] = 1.0
    oh = np.empty((r, 4))
    oh[:, 0], oh[:, 1], oh[:, 2], oh[:, 3] = o0 * h0, o0 * h1, o1 * h0, o1 * h1
    if "B1" not in lat:     # rows of B and logw, built once per lattice dict
        lat["B1"] = np.vstack([lat["B"], lat["logw"]])
    # exponent without the per-row constant -|omega|^2 / (2V) (restored in log Z)
    np.matmul(hh, lat["B1"], out=P)
    oh *= 1.0 / v2
    np.matmul(oh, lat["Y"], out=X)
    np.subtract(P, X, out=M)                    # minus sign
    P += X                                      # plus sign
    mp, mm = P.max(1), M.max(1)
    shift = np.maximum(mp, mm)
    for A, mA in ((P, mp), (M, mm)):
        need = mA > shift + EXP_FLOOR
        if need.all():
            _exp_shifted(A, shift, single)
        elif need.any():
            idx = np.flatnonzero(need)
            sub = T[: idx.size]
            np.take(A, idx, axis=0, out=sub)
            _exp_shifted(sub, shift[idx], single)
            A[:] = 0.0
            A[idx] = sub
        else:
            A[:] = 0.0
    np.add(P, M, out=X)                          # S
    np.subtract(P, M, out=P)                     # D
    return X @ lat["F"], P @ lat["Ai"], shift


_BUFFERS: dict = {}


def _buffer(key, shape: tuple, dtype=np.float64) -> np.ndarray:
    """Work buffer ``key`` viewed with ``shape``, grown when needed and kept (per process)."""
    size = math.prod(shape)
    if key not in _BUFFERS or _BUFFERS[key].size < size:
        _BUFFERS[key] = np.empty(max(size, _BLOCK), dtype=dtype)
    return _BUFFERS[key][:size].reshape(shape)


def node_chunks(lat: dict, size: int) -> list:
    """The lattice split into contiguous chunks of at most ``size`` nodes (feature arrays copied:
    each chunk's work stays in cache), cached in ``lat``; ``[lat]`` when it fits."""
    if lat["n"] <= size:
        return [lat]
    key = ("chunks", size)
    if key not in lat:
        edges = np.linspace(0, lat["n"], -(-lat["n"] // size) + 1).astype(int)
        lat[key] = [dict(n=int(e1 - e0), **{k: np.ascontiguousarray(lat[k][..., e0:e1]) for k in
                                            ("B", "logw", "Y")},
                         **{k: np.ascontiguousarray(lat[k][e0:e1]) for k in ("F", "Ai")})
                    for e0, e1 in zip(edges[:-1], edges[1:], strict=True)]
    return lat[key]


def fibre_moments(h0, h1, o0, o1, v, lat: dict, single: bool = False) -> np.ndarray:
    """Posterior moments over the fibre for outer points (1D arrays ``h``, ``omega_L``), rows:
    ``Cov[z_l|.] - I`` (3 entries per free row; ``E z_l = 0`` by evenness), ``E z_L`` (2),
    ``E|z_L|^2`` and ``log Z`` (Z the fibre integral with the ``1/(2 pi V)`` of the last
    layer's Gaussian).  Blocks of at most :data:`_CHUNK` nodes x ``_BLOCK / nodes`` outer points
    (cache-sized; a one-row block would turn the products into slow matrix-vector ones): each
    node chunk's sums carry their own row shift and are rescaled to the largest."""
    h0, h1, o0, o1 = (np.broadcast_to(np.asarray(a, dtype=float), np.shape(h0))
                      for a in (h0, h1, o0, o1))
    chunks = node_chunks(lat, _CHUNK)
    step = max(1, _BLOCK // chunks[0]["n"])
    k = 1 + 3 * lat["rows"]
    out = np.empty((k + 3, h0.size))
    for s0 in range(0, h0.size, step):
        sl = slice(s0, s0 + step)
        a0, a1, b0, b1 = h0[sl], h1[sl], o0[sl], o1[sl]
        parts = [fibre_sums(a0, a1, b0, b1, v, ch, single) for ch in chunks]
        G, Dd, shift = parts[0]
        if len(parts) > 1:
            shift = np.max([p[2] for p in parts], axis=0)
            G = sum(p[0] * np.exp(p[2] - shift)[:, None] for p in parts)
            Dd = sum(p[1] * np.exp(p[2] - shift)[:, None] for p in parts)
        Z = G[:, 0]                 # moments: E z_L = E[s A^{-1}] h, z_L z_L^T a form in h
        out[:, sl] = [*(G[:, j] / Z if j % 3 == 2 else G[:, j] / Z - 1 for j in range(1, k)),
                      *fibre_point((Dd / Z[:, None]).T.reshape(2, 2, -1), a0, a1),
                      (G[:, k] * a0 * a0 + G[:, k + 1] * a0 * a1 + G[:, k + 2] * a1 * a1) / Z,
                      np.log(Z) + shift - (b0 * b0 + b1 * b1) / (2 * v)
                      - math.log(2 * math.pi * v)]
    return out


def map_jobs(task, jobs: list, workers: int) -> list:
    """``[task(j) for j in jobs]``, spread over ``workers`` forked processes when > 1 (the workers
    inherit the cached lattices: nothing large is pickled)."""
    if workers == 1:
        return [task(j) for j in jobs]
    import multiprocessing as mp

    with mp.get_context("fork").Pool(workers) as pool:
        return pool.map(task, jobs, chunksize=1)


@lru_cache(maxsize=16)
def vertex_maps(c: float, layers: int = 2) -> np.ndarray:
    """The ``4^(L-1)`` matrices ``M = A_{L-1} ... A_1`` with ``A_l = S_l + c I`` and 0/1 softmax
    entries: ``M omega`` is multilinear in the softmax entries, so its coordinates take their
    extremes there, and so do the (convex in each entry) row norms of ``M``."""
    mats = []
    for s in itertools.product((0.0, 1.0), repeat=2 * (layers - 1)):
        M = np.eye(2)
        for sa, sb in zip(s[::2], s[1::2], strict=True):
            M = np.array([[sa + c, 1 - sa], [1 - sb, sb + c]]) @ M
        mats.append(M)
    return np.array(mats)


def h_lattice(o0: float, o1: float, v: float, c: float, dh: float, pad_sd: float = H_PAD,
              layers: int = 2):
    """Outer rule in ``h`` given ``omega_L`` (trapezoid on the lattice ``dh Z^2``; ``dh`` is
    absolute here, :func:`branch_stats` takes it in units of ``sqrt(V)``, the blur scale).

    ``h = M (omega_L + sqrt(V) eta)``: ``M omega_L`` spans the axis-aligned box of its values at
    the vertex maps (:func:`vertex_maps`; at L = 2 ``(c o0 + o1 .. (1 + c) o0, o0 + c o1 ..
    (1 + c) o1)``), blurred by ``sqrt(V) M eta`` whose per-axis standard deviation is at most
    ``sqrt(V)`` x the largest row norm of ``M`` (``1 + c`` at L = 2).  Nodes: the lattice points
    of the box padded by ``pad_sd`` of those deviations.  The density of the pair ``{h, -h}`` is
    the fibre integral ``Z(h)``, and every statistic is even in ``h``, so the expectation over the
    whole plane is ``1/2 sum_{B u -B} dh^2 Z f = sum_{h in B} m(h) dh^2 Z f / 2`` with ``m = 2``
    when ``-h`` is not in ``B`` (else 1).  Returns ``(h0, h1, m dh^2 / 2)``."""
    Ms = vertex_maps(float(c), layers)
    img = Ms @ np.array([o0, o1])
    pad = pad_sd * math.sqrt(v) * float(np.sqrt((Ms**2).sum(2)).max())
    lo, hi = img.min(0) - pad, img.max(0) + pad
    i0 = np.arange(math.floor(lo[0] / dh), math.ceil(hi[0] / dh) + 1)
    i1 = np.arange(math.floor(lo[1] / dh), math.ceil(hi[1] / dh) + 1)
    I0, I1 = np.meshgrid(i0, i1, indexing="ij")
    I0, I1 = I0.ravel(), I1.ravel()
    # -h in B  <=>  -i0 in range(i0) and -i1 in range(i1)
    mirrored = (-I0 >= i0[0]) & (-I0 <= i0[-1]) & (-I1 >= i1[0]) & (-I1 <= i1[-1])
    m = np.where(mirrored, 1.0, 2.0)
    return dh * I0, dh * I1, 0.5 * m * dh * dh


# The h-lattice error is not uniform over omega_2.  Where |omega_2|_inf < 4.5 sqrt(V) the sign of
# h is not resolved and the posterior moments carry a tanh(omega^T A^{-1} h / V) whose complex
# poles sit ~ sqrt(V) from the real h plane: the error falls like exp(-10 / dh) (dh in units of
# sqrt V).  Elsewhere one sign dominates and the error falls faster, until dh ~ 2 (per-node
# errors: benchmarks/RESULTS.md).  Far nodes, which carry most of the h points at equal spacing,
# therefore get the coarser spacing :func:`far_spacing`.  A sharp switch would make the
# integrand of the omega_2 rule jump by the far error, so the two rules are blended by a smooth
# partition of unity in |omega_2| / sqrt(V) over NEAR_BAND (nodes in the band are evaluated with
# both).  The reported bar is still the difference of two orders, both refined.
NEAR_BAND = (6.5, 9.5)


def far_spacing(dh: float) -> float:
    """h-lattice spacing (units of sqrt V) at omega_2 nodes beyond :data:`NEAR_BAND`, with an
    error 5-20x below that of spacing ``dh`` at the near nodes (benchmarks/RESULTS.md)."""
    return min(dh + 0.35, max(dh, 0.5 * dh + 1.0))


def near_weight(rho):
    """Weight of the near rule at ``rho = |omega_2| / sqrt(V)``: 1 below ``NEAR_BAND[0]``, 0 above
    ``NEAR_BAND[1]``, C-infinity in between (``e^{-1/x}`` blend)."""
    r0, r1 = NEAR_BAND
    t = np.clip((np.asarray(rho, dtype=float) - r0) / (r1 - r0), 0.0, 1.0)
    with np.errstate(divide="ignore"):
        f0 = np.where(t < 1, np.exp(-1.0 / np.maximum(1.0 - t, 1e-300)), 0.0)
        f1 = np.where(t > 0, np.exp(-1.0 / np.maximum(t, 1e-300)), 0.0)
    return f0 / (f0 + f1)


OMEGA_KAPPA = 1.0    # sinh-map scale in units of sqrt(V) (the width of the omega features)
OMEGA_DMAX = 8.5     # range in units of sqrt(q2): cut Gaussian mass < 1e-16
OMEGA_WCUT = 1e-14   # omega_2 nodes of smaller weight are dropped (bound: branch_stats ``cut``)
#: below this q2 the prior N(0, q2 I) is narrower than the sinh scale kappa sqrt(V): the scale
#: is multiplied by sqrt(q2 / OMEGA_Q2_SCALED) (else the trapezoid's total weight is 2.65 at
#: q2 = 0.02 and 9.94 at 1e-3 instead of 1; docs/smi_small_skip.md, layer-2 point below 0.1)
OMEGA_Q2_SCALED = 0.1


@lru_cache(maxsize=32)
def omega_rule(tau: float, q2: float, kappa: float = OMEGA_KAPPA):
    """Rule for ``omega_2 ~ N(0, q2 I)`` in rotated coordinates ``s = (w0 + w1)/sqrt 2``,
    ``d = (w0 - w1)/sqrt 2``.  The integrand is even in ``s`` and in ``d`` (symmetries
    ``omega -> -omega`` and the token swap), analytic, with features of width ~ sqrt(V) at
    ``d = 0`` (layer-1 information ~ d^2/V) and at ``omega = 0`` (the sign of ``h`` is resolved
    only for ``|omega| >> sqrt(V)``).  Quadrant ``s, d >= 0`` (weights x4), each axis a
    trapezoid in ``t`` with ``x = kappa sqrt(V) sinh t``: the nearby complex singularities move
    to ``|Im t| >= pi/4``, so the error falls like ``exp(-pi^2 / (2 tau))``.  Below ``q2 =``
    :data:`OMEGA_Q2_SCALED` the default scale (``kappa = OMEGA_KAPPA``) is ``kappa sqrt(V)
    sqrt(q2 / OMEGA_Q2_SCALED)`` (the prior, sqrt(q2) wide, sets the resolution there); at and
    above it, and for a caller that sets its own ``kappa`` (the L-layer driver's
    ``min(1, sqrt(q / V))``), the rule is unchanged."""
    require(0.01 <= tau <= 1.0, "tau", "in [0.01, 1]", tau)
    k = kappa * math.sqrt(1.0 - q2)
    if q2 < OMEGA_Q2_SCALED and kappa == OMEGA_KAPPA:
        k *= math.sqrt(q2 / OMEGA_Q2_SCALED)
    # each axis: trapezoid (step tau) in t, x = k sinh t, t >= 0, for 2 N(x; 0, q2) dx on x >= 0
    x, w = sinh_nodes(k, OMEGA_DMAX * math.sqrt(q2), tau, half=True)
    w = w * np.exp(-0.5 * x**2 / q2) / math.sqrt(2 * math.pi * q2)
    return rotated(x, w, x, w)


def omega_task(args):
    """Weighted sums (mass, mu_l of each free row, K_L, trcov_L, psi) over the h lattice at one
    omega_L node; ``lat`` is the lattice dict or the key of the cached :func:`fibre_lattice`
    (inherited by forked workers: nothing large is pickled)."""
    o0, o1, wo, v, c, dh, lat, single = args
    if isinstance(lat, tuple):
        lat = fibre_lattice(*lat)
    H0, H1, Wh = h_lattice(o0, o1, v, c, dh, layers=lat["layers"])
    r = fibre_moments(H0, H1, o0, o1, v, lat, single)
    k = 3 * lat["rows"]
    w = Wh * np.exp(r[k + 3])
    acc = np.array([w.sum(), *(w @ (r[j] ** 2 + 2 * r[j + 1] ** 2 + r[j + 2] ** 2)
                               for j in range(0, k, 3)),
                    w @ (((r[k] - o0) ** 2 + (r[k + 1] - o1) ** 2) / v**2),
                    w @ (r[k + 2] - r[k] ** 2 - r[k + 1] ** 2), w @ r[k + 3]])
    return wo * acc, float(H0.size)


def branch_stats(q: float, *, c: float = 1.0, beta: float = 1.0, n_w: float = 0.2, dh: float = 1.5,
                 dz: float = 0.15, workers: int = 1, single: bool = True, layers: int = 2,
                 dz2: float | None = None, radius: float | None = None,
                 kappa: float = OMEGA_KAPPA, wcut: float = OMEGA_WCUT,
                 blend: bool = True) -> dict:
    """Statistics on the last layer's SE branch ``Q = diag(0, .., 0, q)`` (THEORY 2.2), ``V = 1 -
    q``: ``mu_l = E ||Cov[z_l|y, omega_L] - I||_F^2`` of each unlearned layer (``mu1`` ..),
    ``K_L = E sum_m g_Lm^2``, ``trcov_L = E tr Cov[z_L|.]``, ``psi = E log Z_out`` (THEORY 2.1
    free entropy; Z_out the density of the pair {h, -h} given omega_L, as in
    :mod:`aim_sym.numerics.smi`), the Nishimori residual ``K_L - (2 mass - trcov_L/V)/V``, the
    outer ``mass`` (should be 1) and ``cut`` (bounds on what the dropped omega nodes and the
    lattice's radius carry).  Rules: ``omega_L`` by :func:`omega_rule` (``n_w = tau``, sinh
    scale ``kappa``), nodes of weight < ``wcut`` dropped;
    ``h`` by :func:`h_lattice`, spacing ``dh sqrt(V)`` (the density of ``h`` is the attention
    image blurred on the scale sqrt(V)), and with ``blend`` ``far_spacing(dh) sqrt(V)`` at the
    omega nodes where the sign of h is resolved, blended by :func:`near_weight`; the fibre by
    :func:`fibre_lattice` (``dz``, ``dz2``, ``radius``); exponentials in float32
    (:func:`_exp_shifted`) unless ``single`` is false.  ``workers > 1`` spreads the omega nodes
    over forked processes."""
    require(0 < q < 1, f"q{layers}", "in (0, 1)", q)
    require(isinstance(workers, int) and workers >= 1, "workers", "a positive integer", workers)
    require(0.1 <= dh <= 4.0, "dh", f"in [0.1, 4] (units of sqrt(1 - q{layers}))", dh)
    require(radius is None or 3.0 <= radius <= 9.0, "radius", "in [3, 9]", radius)
    require(0 <= wcut <= 1e-6, "wcut", "in [0, 1e-6]", wcut)
    v = 1.0 - q
    key = (float(dz), float(c), float(beta), None if radius is None else float(radius),
           None if dz2 is None else float(dz2), layers)
    lat = fibre_lattice(*key)
    O0, O1, W = omega_rule(float(n_w), float(q), kappa)
    keep = W >= wcut
    w_cut = float(W[~keep].sum())
    sv = math.sqrt(v)
    # each node's h rule: spacing dh (weight chi) and far_spacing(dh) (weight 1 - chi)
    chi = (near_weight(np.hypot(O0, O1) / sv) if blend and far_spacing(dh) > dh
           else np.ones_like(O0))
    jobs = []
    for a, b, w, x in zip(O0[keep], O1[keep], W[keep], chi[keep], strict=True):
        for spacing, part in ((dh, x), (far_spacing(dh), 1.0 - x)):
            if part > 0:
                jobs.append((float(a), float(b), float(w * part), v, float(c),
                             float(spacing * sv), key, bool(single)))
    # largest h boxes first (load balance over the pool)
    jobs.sort(key=lambda j: -(abs(j[0]) + abs(j[1])))
    res = map_jobs(omega_task, jobs, workers)
    mass, *mus, K, trcov, psi = np.sum([r[0] for r in res], axis=0)
    npts = int(sum(r[1] for r in res))
    # per unit outer weight the integrands are bounded (mass 1, K_L <= 2/V by Nishimori,
    # mu_l <= 2 (R^2 - 1)^2 on the radius-R lattice): the dropped omega weight and the prior
    # mass outside the lattice ball are bounded by these times their weight
    mu_bound = 2.0 * (lat["radius"] ** 2 - 1) ** 2
    cut = dict(mass=w_cut, K=2.0 * w_cut / v, mu=mu_bound * w_cut, radius_tail=lat["tail"],
               mu_tail=mu_bound * lat["tail"], K_tail=2.0 * lat["tail"] / v,
               omega_nodes=int((~keep).sum()))
    return {"mass": float(mass), **{f"mu{l + 1}": float(m) for l, m in enumerate(mus)},
            f"K{layers}": float(K), f"trcov{layers}": float(trcov), "psi": float(psi),
            "nishimori": float(K - (2 * mass - trcov / v) / v), "cross": 0.0,
            "omega_weight": float(W.sum()), "outer_points": npts, "nodes": lat["n"],
            "pairs": npts * lat["n"], "cut": cut}


# ----------------------------------------------------------------------------- the driver
# One sequential-threshold driver for every engine (issue 14): :func:`sequential_driver` and its
# parts, used by the lattice's two drivers below, the branch kernel's
# (:func:`.smi_branch_qmc.sequential_thresholds_qmc`) and the cascade's replicate bar.


def scan_brackets(resid, grid, unlearned, *, rising: bool = False, attempts: int = 1,
                  lazy: bool = False, what: str = "the scan") -> tuple[dict, dict]:
    """The first sign change of each unlearned layer's residual ``r_l`` (THEORY 2.2) over the
    overlaps ``grid``. ``resid(qs)``: one residual vector (an entry per layer of ``unlearned``)
    per point of ``qs``. A change is ``r_a r_b <= 0`` between neighbours, or with ``rising``
    ``r_a < 0 <= r_b`` (r_l rises with q through its root). ``lazy``: the points are evaluated
    one at a time in the order given, until the first change of the first layer. ``attempts >
    1``: a layer without a change extends the grid by the scan's mean step in ``x = log(1 - q)``
    outwards (to larger q when its residuals are all negative), ``attempts - 1`` times at most.
    Returns ``{q: r}`` of the evaluated points and ``{l: (q_a, q_b)}``; raises
    :class:`ConvergenceError` when a root is not bracketed."""
    table: dict = {}

    def evaluate(qs):
        new = [q for q in qs if q not in table]
        if new:
            table.update(zip(new, resid(new), strict=True))

    def change(k):
        pts = sorted(table)
        r = [table[q][k] for q in pts]
        ok = [i for i in range(len(pts) - 1)
              if ((r[i] < 0 <= r[i + 1]) if rising else r[i] * r[i + 1] <= 0)]
        return pts, r, ((pts[ok[0]], pts[ok[0] + 1]) if ok else None)

    for q in grid if lazy else ():
        evaluate([q])
        if change(0)[2]:
            break
    if not lazy:
        evaluate(list(grid))
    brackets = {}
    for k, l in enumerate(unlearned):
        for attempt in range(attempts):
            pts, r, brackets[l] = change(k)
            if brackets[l]:
                break
            if attempt == attempts - 1:
                raise ConvergenceError(f"layer-{l} sequential root not bracketed by {what} in "
                                       "q", last_iterate=pts, residual=r)
            dx = float(np.mean(np.diff([math.log1p(-q) for q in grid])))   # < 0: q rises
            x = math.log1p(-pts[-1]) + dx if r[-1] < 0 else math.log1p(-pts[0]) - dx
            evaluate([-math.expm1(x)])
    return table, brackets


def fit_root(t, r, mu, t0: float, *, deg: int = 2, root_deg: int | None = None,
             within=None, near: float = 0.0, imag: float = 1e-12) -> dict | None:
    """Root of the residual ``r_l`` along a branch coordinate ``t`` (q or log(1 - q)): the
    least-squares polynomials of degree ``deg`` in ``t - t0`` of ``r`` (degree ``root_deg`` for
    the root itself, default ``deg``) and of ``mu``; their real root (imaginary part below
    ``imag``) within ``within`` (absolute, if given) nearest ``t0 + near``.  Returns ``t`` (the
    root), ``d`` (``t - t0`` there), ``mu`` and the slopes ``s_r``, ``s_mu`` there, the
    coefficients ``cr``, ``cm``; None without a root."""
    u = np.asarray(t, dtype=float) - t0
    cr, cm = np.polyfit(u, r, deg), np.polyfit(u, mu, deg)
    cs = cr if root_deg in (None, deg) else np.polyfit(u, r, root_deg)
    lo, hi = sorted(within) if within is not None else (-math.inf, math.inf)
    roots = [z.real for z in np.roots(cs)
             if abs(z.imag) < imag and lo - 1e-12 <= z.real + t0 <= hi + 1e-12]
    if not roots:
        return None
    d = min(roots, key=lambda z: abs(z - near))
    return dict(t=d + t0, d=d, mu=float(np.polyval(cm, d)), cr=cr, cm=cm,
                s_r=float(np.polyval(np.polyder(cr), d)),
                s_mu=float(np.polyval(np.polyder(cm), d)))


def shift_to_root(st: dict, r: float, mu: float, t_at: float, s_r: float, s_mu: float,
                  K: float, **extra) -> dict:
    """One order's statistics ``st`` (residual ``r``, ``mu_l``, ``K_L``) at ``t_at`` moved to
    that order's own root to first order with the slopes ``s_r``, ``s_mu``: ``t = t_at - r /
    s_r``, ``mu + s_mu (t - t_at)``, with the relative Nishimori residual ``nis``."""
    t = t_at - r / s_r
    return dict(extra, st=st, t=t, t_eval=t_at, mu=mu + s_mu * (t - t_at),
                nis=abs(st["nishimori"]) / K)


def lattice_bar(evs: list, *, q: float, curv: float, rel_slope: float, s_mu: float,
                single: bool, root_interp: float = 0.0) -> dict:
    """Bar of the refined value ``1 / evs[-1]["mu"]`` from a deterministic engine's orders
    (:func:`shift_to_root` records, coarse to refined, the last at overlap ``q``): the moduli of
    the steps between consecutive orders (their errors may cancel) + interpolation (the root
    fit's own ``root_interp``, the second-order remainder ``curv dt^2`` of each shift and the
    slope uncertainty ``rel_slope |s_mu dt|``, in mu, times alpha^2) + alpha x (relative
    Nishimori residual + :data:`FLOAT32_REL` if ``single``) + the cut bounds (:func:`_cut_alpha`)."""
    a_f = 1.0 / evs[-1]["mu"]
    steps = [abs(1.0 / e1["mu"] - 1.0 / e0["mu"]) for e0, e1 in zip(evs[:-1], evs[1:],
                                                                   strict=True)]
    interp = (root_interp + sum(curv * (o["t"] - o["t_eval"]) ** 2
                                + rel_slope * abs(s_mu * (o["t"] - o["t_eval"])) for o in evs)
              ) * a_f**2
    cut = _cut_alpha(evs[-1]["st"]["cut"], q, a_f)
    f32 = a_f * FLOAT32_REL if single else 0.0
    spread = sum(steps)
    return dict(error=spread + interp + a_f * evs[-1]["nis"] + f32 + cut, spread=spread,
                steps=steps, interpolation=interp, nishimori=evs[-1]["nis"], float32=f32, cut=cut)


def _cut_alpha(cut: dict, q: float, a: float) -> float:
    """The cut bounds of :func:`branch_stats` (dropped omega nodes, lattice ball) carried to
    ``alpha = 1 / mu`` at ``q`` through ``r = mu - (1 - q) K / q``: times ``alpha^2``."""
    return (cut["mu"] + cut["mu_tail"] + (1 - q) / q * (cut["K"] + cut["K_tail"])) * a**2


def replicate_se(solve, per: np.ndarray) -> np.ndarray:
    """Standard error of ``solve`` (a root and what comes with it, an array) over the replicates
    ``per`` (R, ...) of a sampled engine's statistics; the jackknife over the replicates where
    one replicate alone has no root (a non-finite solve)."""
    R = len(per)
    vals = np.array([solve(per[k]) for k in range(R)])
    if np.all(np.isfinite(vals)):
        return standard_error(vals, axis=0)
    vals = np.array([solve(np.delete(per, k, 0).mean(0)) for k in range(R)])
    return math.sqrt(R - 1) * vals.std(0)


def sequential_driver(resid, locate, *, unlearned, scan, rising: bool = False,
                      attempts: int = 1, what: str = "the scan") -> list[dict]:
    """Sequential thresholds of the ``unlearned`` layers on one SE branch (THEORY 2.2) for any
    engine, which gives its statistics as callables: :func:`scan_brackets` with the engine's
    residuals ``resid`` over ``scan``, then ``locate(l, table, (q_a, q_b))`` per layer (the
    engine's root, ``value = 1 / mu_l`` there and its bar, a record), built from
    :func:`fit_root` (polynomial fits of r_l and mu_l in q or x = log(1 - q)) and, for a
    deterministic engine, its orders shifted to their own roots (:func:`shift_to_root`,
    :func:`lattice_bar`), for a sampled one its replicates (:func:`replicate_se`).  Where the
    engines differ on purpose (the L = 2 ladder's lazy scan, regula falsi in q and 8-digit
    parabola; the kernel's common-random-number points and Student-t bar) the difference is a
    parameter or the engine's ``locate``.  Each record gets ``seconds`` (the whole run) and
    ``first`` (the smallest value: the next transition; the others are upper bounds only)."""
    t0 = time.perf_counter()
    table, brackets = scan_brackets(resid, scan, unlearned, rising=rising, attempts=attempts,
                                    what=what)
    out = [locate(l, table, brackets[l]) for l in unlearned]
    secs = time.perf_counter() - t0
    first = min(out, key=lambda d: d["value"])
    for d in out:
        d["seconds"] = secs
        d["first"] = d is first
    return out


# ----------------------------------------------------------------------------- threshold
# (tau, dh, dz): omega_2 rule step, h lattice spacing / sqrt(V) at the near omega_2 nodes (the far
# ones get far_spacing(dh)), fibre lattice spacing.  The near h lattice's error falls like
# exp(-10 / dh), the omega_2 rule's like exp(-pi^2 / (2 tau)), the fibre lattice's geometrically
# in 1 / dz (one-rule-at-a-time errors at q2 = 0.97365: benchmarks/RESULTS.md).  The top rungs
# (digits 8 and above) refine every rule, each to its cheapest setting with an error below ~1e-8.
SEQ_SCAN_ORDER = (0.5, 2.8, 0.25)
SEQ_LADDER = ((0.5, 2.8, 0.25), (0.5, 2.2, 0.25), (0.4, 1.9, 0.22), (0.3, 1.5, 0.2),
              (0.25, 1.1, 0.17), (0.28, 0.85, 0.17), (0.25, 0.7, 0.16), (0.2, 0.6, 0.14),
              (0.17, 0.5, 0.12))
SEQ_ORDERS = (SEQ_LADDER[2], SEQ_LADDER[3])
# digits asked -> ladder index k of the refined order (the coarse one is rung k - 1, whose
# error is the reported bar): bars measured in benchmarks/RESULTS.md
SEQ_DIGITS = {1: 1, 2: 1, 3: 2, 4: 3, 5: 4, 6: 5, 7: 6, 8: 7, 9: 8}
# from skip SEQ_LOW_SKIP on, these digits start the pair one rung lower (the loop in
# :func:`sequential_threshold` still climbs while the bar is above the target): the rungs'
# errors fall or level off as q2* -> 1 while their cost grows like 1 / (1 - q2*); the bars at
# c in [1.5, 4], beta = 1: benchmarks/RESULTS.md.
SEQ_LOW_SKIP = 1.5
SEQ_LOW_DIGITS = (5, 6)
# from this many digits the pair takes float64 exponentials (an order tagged "float64": the
# float32 bound alpha x FLOAT32_REL = 7e-9 would nearly fill a 1e-8 bar) and the root order is
# rung 4 (the shift terms from rung 3's root are ~8e-9 at digits 8)
FLOAT64_DIGITS = 9
SEQ_SCAN = (0.6, 0.8, 0.9, 0.95, 0.975, 0.99, 0.997)
SEQ_SCAN_START = 0.95


def _float64(order) -> bool:
    """An order ``(tau, dh, dz, "float64")`` takes float64 exponentials."""
    return tuple(order[3:]) == ("float64",)


def _resid(q2, c, beta, order, workers):
    """``r = mu1 - (1 - q2) K2 / q2`` (zero at the sequential threshold) and the statistics."""
    n_w, dh, dz = order[:3]
    st = branch_stats(q2, c=c, beta=beta, n_w=n_w, dh=dh, dz=dz, workers=workers,
                      single=not _float64(order))
    return st["mu1"] - (1 - q2) * st["K2"] / q2, st


def _bracket(skip, beta, scan_order, workers):
    """Lazy scan of :data:`SEQ_SCAN` (upwards from :data:`SEQ_SCAN_START`, then downwards) to
    the first sign change of ``r`` (:func:`scan_brackets`), then Illinois regula falsi in
    ``log(1 - q2)`` at ``scan_order`` until the step is below 1% of ``1 - q2``.  Returns the
    estimate and every evaluated ``(q2, r, mu1)``."""
    seen = []

    def resid(qs):
        r, st = _resid(qs[0], skip, beta, scan_order, workers)
        seen.append((qs[0], r, st["mu1"]))
        return [(r,)]

    up = [q for q in SEQ_SCAN if q >= SEQ_SCAN_START]
    down = [q for q in reversed(SEQ_SCAN) if q < SEQ_SCAN_START]
    table, br = scan_brackets(resid, up + down, (1,), lazy=True, what=f"the scan {SEQ_SCAN}")
    # regula falsi in x = log(1 - q2), in which r is close to linear (measured at c = 1: the
    # secant slopes over the scan differ by 13% in x, by a factor 2.3 in q2)
    (qa, qb), side = br[1], 0
    ra, rb = table[qa][0], table[qb][0]
    xa, xb = math.log1p(-qa), math.log1p(-qb)
    x0 = xa - ra * (xb - xa) / (rb - ra)
    for _ in range(12):
        rm = resid([-math.expm1(x0)])[0][0]
        if rm == 0.0:
            return -math.expm1(x0), seen
        if ra * rm <= 0:
            xb, rb = x0, rm
            if side == -1:
                ra /= 2
            side = -1
        else:
            xa, ra = x0, rm
            if side == 1:
                rb /= 2
            side = 1
        x1 = xa - ra * (xb - xa) / (rb - ra)
        done = abs(x1 - x0) < 0.01
        x0 = x1
        if done:
            return -math.expm1(x0), seen
    raise ConvergenceError("regula falsi at the scan order did not settle",
                           last_iterate=-math.expm1(x0), residual=[ra, rb])


def _parabola_root(q0, skip, beta, order, workers, tick, known=()):
    """Root of ``r`` at one order: secant through ``q0, q0 + eps``, a third evaluation at the
    secant root, the root of the parabola through the three (:func:`fit_root` in q; its
    interpolation error: the distance to the secant-type Newton step from the third point).
    ``known``: points ``(q, r, mu1)`` already evaluated at this order (the bracket's, when it ran
    at this order); those within ``0.05 (1 - q0)`` of ``q0`` replace the first two evaluations.
    Returns the root, ``mu1`` there (from the parabola of ``mu1``), the slopes ``dr/dq``,
    ``dmu1/dq`` and the curvatures."""
    eps = 0.002 * (1 - q0)
    near = sorted({p[0]: p for p in known if abs(p[0] - q0) < 0.05 * (1 - q0)}.values(),
                  key=lambda p: abs(p[0] - q0))
    pts = near[:2]
    for q in (q0, q0 + eps)[len(pts):]:
        r, st = _resid(q, skip, beta, order, workers)
        pts.append((q, r, st["mu1"]))
        tick("sequential threshold: root order")
    (qa, ra, _), (qb, rb, _) = pts
    qs = qa - ra * (qb - qa) / (rb - ra)
    if not abs(qs - q0) < 0.05 * (1 - q0):
        raise ConvergenceError("sequential root moved far from the scan estimate",
                               last_iterate=qs, residual=[ra, rb])
    r, st = _resid(qs, skip, beta, order, workers)
    pts.append((qs, r, st["mu1"]))
    tick("sequential threshold: root order")
    f = fit_root(*zip(*pts, strict=True), qs, imag=1e-14)
    if f is None:
        raise ConvergenceError("no real root of the residual parabola",
                               last_iterate=[p[0] for p in pts], residual=[p[1] for p in pts])
    return dict(q=f["t"], mu1=f["mu"], interp_q=abs(f["d"] - (-r / f["cr"][1])),
                slope_r=f["s_r"], slope_mu=f["s_mu"], curv_r=float(f["cr"][0]),
                curv_mu=float(f["cm"][0]), nishimori=abs(st["nishimori"]) / st["K2"],
                mass=float(st["mass"]), pairs=int(st["pairs"]), cut=st["cut"])


def _root_and_slope_check(skip, beta, root_order, scan_order, explicit, workers, tick):
    """The root at the root order (:func:`_bracket`, then :func:`_parabola_root`) and the
    relative uncertainty of its slope ratio ``dmu1/dr`` (see :func:`sequential_threshold`)."""
    # a root order at most rung 1 costs about as much as the scan order (the h boxes' padding
    # dominates both): bracket at the root order itself and reuse its points near the root
    if (not explicit and scan_order == SEQ_SCAN_ORDER
            and SEQ_LADDER.index(tuple(root_order)) <= 1):
        scan_order = root_order
    q_scan, seen = _bracket(skip, beta, scan_order, workers)
    tick("sequential threshold: bracket")
    try:
        root = _parabola_root(q_scan, skip, beta, root_order, workers, tick,
                              known=seen if scan_order == root_order else ())
    except ConvergenceError:
        if scan_order == root_order:
            raise
        # the scan order is too coarse here (small c: its root can lie 5% of 1 - q2 or more
        # from the root order's): bracket again at the root order itself
        q_scan, seen = _bracket(skip, beta, root_order, workers)
        root = _parabola_root(q_scan, skip, beta, root_order, workers, tick, known=seen)
    q_c, s_r, s_mu = root["q"], root["slope_r"], root["slope_mu"]
    # slope uncertainty: ratio dmu1/dr at the root order vs a secant at a cheaper order: the rung
    # below the root order at q_c +- eps, or (root order at most rung 1: low digits, where the
    # shifts are ~1e-3 of the bar) the two bracket points nearest the root (of the root order
    # itself when it bracketed: then the check sees the curvature between them only)
    rung = SEQ_LADDER.index(tuple(root_order)) if tuple(root_order) in SEQ_LADDER else 0
    if rung >= 2:
        eps = 0.002 * (1 - q_c)
        pts = [(q, *_resid(q, skip, beta, SEQ_LADDER[rung - 1], workers)) for q in
               (q_c - eps, q_c + eps)]
        (qa, ra, sa), (qb, rb, sb) = pts
        ma, mb = sa["mu1"], sb["mu1"]
    else:
        (qa, ra, ma), (qb, rb, mb) = sorted({p[0]: p for p in seen}.values(),
                                            key=lambda p: abs(p[0] - q_c))[:2]
    ratio_scan = (mb - ma) / (rb - ra)
    return root, abs(ratio_scan - s_mu / s_r) / abs(s_mu / s_r)


# processes over the omega_2 nodes when ``workers`` is not given: None means min(2, cpu_count).
# A sweep's pool workers set it to 1 (aim_sym.sweep), so that a sweep over 2 processes runs 2
# processes, not 2 x 2 on 2 cores.
DEFAULT_WORKERS: int | None = None


def sequential_threshold(*, skip: float = 1.0, beta: float = 1.0, digits: int = 4,
                         orders=None, scan_order=SEQ_SCAN_ORDER, workers: int | None = None,
                         progress=None) -> dict:
    """Threshold of layer 1 at the SE fixed point where layer 2 is learned (THEORY 2.2).

    On the layer-2 branch ``alpha(q2) = q2 / ((1 - q2) K2(q2))``; the unlearned direction has
    eigenvalue ``alpha mu1(q2)``, so the threshold solves ``r(q2) = mu1 - (1 - q2) K2 / q2 = 0``
    and ``alpha_seq = 1 / mu1(q2*)``.  Statistics from :func:`branch_stats`.

    Accuracy: ``digits`` picks the pair (coarse, refined) of consecutive rungs of
    :data:`SEQ_LADDER` from :data:`SEQ_DIGITS` (timings in benchmarks/RESULTS.md; one rung lower
    from ``skip >= SEQ_LOW_SKIP`` at :data:`SEQ_LOW_DIGITS`) and, while the bar exceeds
    ``5 x 10^-digits`` (the ladder is calibrated at c = 1, beta = 1), evaluates an order again
    at its own shifted root when the shift terms dominate the bar, or else moves the pair up
    one rung (``note`` says so if the top rung does not meet it); from
    :data:`FLOAT64_DIGITS` digits the pair takes float64 exponentials (orders tagged
    ``"float64"``); ``orders`` gives the pair explicitly instead (neither).  Root search:
    bracket and regula falsi at ``scan_order``; the root of a parabola through three points at
    the "root order" (the coarse order, at most rung 3 of the ladder, rung 4 from
    FLOAT64_DIGITS); the coarse order is evaluated once at that root, the refined one once at
    the coarse order's root, and each is shifted to its own root to first order with the
    root-order slopes.  ``value`` is the refined alpha; ``error``: :func:`lattice_bar` of the
    pair (interpolation: the parabola root while an order leans on the root-order position, the
    shifts' remainders, the slope uncertainty: root-order slope ratio vs a secant at a cheaper
    order).  Raises :class:`ConvergenceError` if the root is not bracketed.  ``workers``:
    processes over the omega_2 nodes (default :data:`DEFAULT_WORKERS`, else ``min(2,
    cpu_count)``)."""
    import os

    require(np.isfinite(skip) and skip > 0, "skip", "> 0", skip)
    check_skip_floor(skip, "sequential")
    require(np.isfinite(beta) and beta > 0, "beta", "> 0", beta)
    if orders is None:
        require(digits in SEQ_DIGITS, "digits", f"an integer in {min(SEQ_DIGITS)}.."
                f"{max(SEQ_DIGITS)}", digits)
        k = SEQ_DIGITS[digits] - (skip >= SEQ_LOW_SKIP and digits in SEQ_LOW_DIGITS)
        orders = (SEQ_LADDER[k - 1], SEQ_LADDER[k])
        root_order = SEQ_LADDER[min(k - 1, 3 if digits < FLOAT64_DIGITS else 4)]
        if digits >= FLOAT64_DIGITS:
            orders = tuple((*o, "float64") for o in orders)
        explicit = False
    else:
        explicit = True
        require(len(orders) == 2, "orders", "a pair (coarse, refined) of (n_w, dh, dz) or "
                "(n_w, dh, dz, 'float64')", orders)
        root_order = orders[0]
    if workers is None:
        workers = DEFAULT_WORKERS or min(2, os.cpu_count() or 1)
    t0 = time.perf_counter()
    nsteps = 5 if root_order == orders[0] else 6
    step = [0]

    def tick(msg):
        step[0] += 1
        if progress:
            progress(step[0], nsteps, msg)

    root, rel_slope = _root_and_slope_check(skip, beta, root_order, scan_order,
                                            explicit, workers, tick)
    q_c, s_r, s_mu = root["q"], root["slope_r"], root["slope_mu"]
    curv = abs(root["curv_mu"]) + abs(s_mu * root["curv_r"] / s_r)

    def at(order, q_at=None):
        """One order evaluated at ``q_at`` (default the root q_c) and shifted to its own root
        with the root-order slopes (:func:`shift_to_root`)."""
        q_at = q_c if q_at is None else q_at
        if order == root_order and q_at == q_c:
            return dict(order=order, t=q_c, t_eval=q_c, mu=root["mu1"],
                        nis=root["nishimori"], st=root)
        r, st = _resid(q_at, skip, beta, order, workers)
        tick("sequential threshold: order " + str(list(order)))
        return shift_to_root(st, r, st["mu1"], q_at, s_r, s_mu, st["K2"], order=order)

    def bar(out):
        # the root parabola's error counts while an order leans on the root-order position
        lean = any(o["t_eval"] == q_c for o in out)
        return lattice_bar(out, q=out[1]["t"], curv=curv, rel_slope=rel_slope, s_mu=s_mu,
                           single=not _float64(out[1]["order"]),
                           root_interp=abs(s_mu) * root["interp_q"] if lean else 0.0)

    # the refined order at the coarse order's shifted root: its own shift (the coarse-refined
    # root difference) and the interpolation terms that come with it are then tiny
    out = [at(orders[0])]
    out.append(at(orders[1], out[0]["t"]))
    b = bar(out)
    # the ladder is calibrated at c = 1, beta = 1; elsewhere the rules may converge more slowly,
    # so with ``digits`` the bar is brought below 5 x 10^-digits: where the shifts from q_c
    # dominate it (small c: the root order's root lies far from the others'), each order is
    # evaluated again at its own shifted root; otherwise the pair moves up the ladder, the new
    # order evaluated at the refined root
    target = None if explicit else 5.0 * 10.0 ** (-digits)
    recentred: set = set()
    while target is not None and b["error"] > target:
        todo = [i for i, o in enumerate(out) if o["order"] not in recentred and o["t"] != o["t_eval"]]
        if b["interpolation"] > 0.5 * b["error"] and todo:
            for i in todo:
                nsteps += 1
                recentred.add(out[i]["order"])
                out[i] = at(out[i]["order"], out[i]["t"])
        elif tuple(orders[1]) in SEQ_LADDER[:-1]:
            nxt = SEQ_LADDER[SEQ_LADDER.index(tuple(orders[1])) + 1]
            nsteps += 1
            orders, out = (orders[1], nxt), [out[1], at(nxt, out[1]["t"])]
        else:
            break
        b = bar(out)
    err = b["error"]
    a_c, a_f = 1.0 / out[0]["mu"], 1.0 / out[1]["mu"]
    q_f, st_f = out[1]["t"], out[1]["st"]
    note = ("" if target is None or err <= target else
            f"bar {err:.1e} above the target 5e-{digits} at the top of the ladder")
    return dict(value=a_f, error=err, q2=q_f, note=note,
                q2_error=abs(out[1]["t"] - out[0]["t"]) + root["interp_q"],
                values=[a_c, a_f], q2_values=[out[0]["t"], q_f], nishimori=[out[1]["nis"]],
                spread=b["spread"], interpolation=b["interpolation"], cut=b["cut"],
                float32=b["float32"],
                mass=float(st_f["mass"]), slope_r=s_r, slope_mu=s_mu,
                pairs=int(st_f["pairs"]), orders=[list(o) for o in orders],
                root_order=list(root_order), root_value=1.0 / root["mu1"], root_q2=q_c,
                seconds=time.perf_counter() - t0,
                method=("root in q2 of mu1 - (1-q2) K2/q2 on the layer-2 SE branch; "
                        "2D sinh-trapezoid omega_2 rule x h lattice (spacing far_spacing(dh) "
                        "where |omega_2| >> sqrt V, smooth blend) x fibre trapezoid lattice "
                        "(z_1), orders (tau, dh/sqrt V, dz) "
                        f"{[list(o) for o in orders]}; error = |alpha(refined) - "
                        "alpha(coarse)| + root interpolation + alpha x (relative Nishimori "
                        "residual + float32 exponentials' bound) + bounds on the omega_2 and "
                        "fibre-lattice cuts"))


# ----------------------------------------------------------------------------- any depth
# The fixed-pair driver: every unlearned layer l = 1 .. L-1 on the last layer's branch, one
# (coarse, refined) pair of orders (tau, dh, dz1, dz2, R); the L = 2 ladder above is its option
# with digits.  Defaults, L = 3 (tau, dh, dz1, dz2, R): omega_3 sinh-trapezoid step, h spacing /
# sqrt(V), fibre lattice spacings in z_1 and z_2, lattice radius, chosen from the one-rule-at-a-
# time errors at q3 = 0.98 (benchmarks/RESULTS.md).
LATTICE_ORDERS = ((0.5, 2.8, 0.6, 0.4, 6.0), (0.4, 2.2, 0.5, 0.3, 6.0))
LATTICE_SCAN = (0.975, 0.98, 0.985, 0.99)
# omega_3 nodes below this weight are dropped at the roots (bound on mu_l: 2 (R^2 - 1)^2 x the
# dropped weight, in the bar)
LATTICE_WCUT = 1e-8


def _check_order(order) -> tuple:
    """``(tau, dh, dz1, dz2, radius)`` as floats, each in its range (InputError otherwise)."""
    require(isinstance(order, (tuple, list)) and len(order) == 5
            and all(isinstance(x, (int, float)) and np.isfinite(x) for x in order), "orders",
            "pairs of (tau, dh, dz1, dz2, radius)", order)
    tau, dh, dz1, dz2, rad = (float(x) for x in order)
    require(0.01 <= tau <= 1.0, "tau", "in [0.01, 1]", tau)
    require(0.1 <= dh <= 4.0, "dh", "in [0.1, 4] (units of sqrt(1 - q))", dh)
    require(0.05 <= dz1 <= 1.0 and 0.05 <= dz2 <= 1.0, "dz", "in [0.05, 1]", (dz1, dz2))
    require(3.0 <= rad <= 9.0, "radius", "in [3, 9]", rad)
    return tau, dh, dz1, dz2, rad


def branch_point(q: float, order, *, layers: int = 3, skip: float = 1.0, beta: float = 1.0,
                 single: bool = False, workers: int = 1, wcut: float = OMEGA_WCUT) -> dict:
    """:func:`branch_stats` at ``Q = diag(0, .., 0, q)`` for one order ``(tau, dh, dz1, dz2,
    radius)`` (``dz1`` in ``z_1``, ``dz2`` in the later rows; omega_L sinh scale ``min(sqrt V,
    sqrt q)``: the omega features have width sqrt(V) as q -> 1, the Gaussian itself sqrt(q) as
    q -> 0; one h spacing at every omega node), with the residuals ``r_l = mu_l - (1 - q) K_L /
    q`` of the unlearned layers, ``q``, ``order`` and ``seconds``."""
    require(isinstance(skip, (int, float)) and np.isfinite(skip) and skip > 0, "skip",
            "> 0 (det A = c (1 + c) must not vanish)", skip)
    require(isinstance(beta, (int, float)) and np.isfinite(beta) and beta > 0, "beta", "> 0",
            beta)
    require(isinstance(q, (int, float)) and np.isfinite(q) and 0 < q < 1, f"q{layers}",
            "in (0, 1)", q)
    tau, dh, dz1, dz2, rad = _check_order(order)
    t0 = time.perf_counter()
    st = branch_stats(q, c=skip, beta=beta, n_w=tau, dh=dh, dz=dz1, workers=workers,
                      single=single, layers=layers, dz2=dz2, radius=rad,
                      kappa=min(1.0, math.sqrt(q / (1.0 - q))), wcut=wcut, blend=False)
    st["r"] = [st[f"mu{l}"] - (1 - q) * st[f"K{layers}"] / q for l in range(1, layers)]
    return st | dict(q=q, order=(tau, dh, dz1, dz2, rad), seconds=time.perf_counter() - t0)


def sequential_thresholds(*, layers: int = 3, skip: float = 1.0, beta: float = 1.0,
                           digits: int | None = None, orders=None, scan=LATTICE_SCAN,
                           single: bool = True, workers: int | None = None,
                           progress=None) -> list[dict]:
    """Sequential thresholds of every unlearned layer ``l = 1 .. L-1`` on the last layer's SE
    branch (THEORY 2.2), ``layers`` 2 or 3, by the deterministic rule :func:`branch_point`
    (anisotropic fibre lattice, float32 exponentials); its oracle is
    ``montecarlo_sequential_thresholds`` of tests/smi_mc_oracles.py.

    At L = 2 without ``orders`` (or with ``digits``, default 4): the ladder of refinements
    :func:`sequential_threshold` (its record with ``layer``, ``kind``, ``first``).  Otherwise
    one (coarse, refined) pair ``orders`` of ``(tau, dh, dz1, dz2, radius)``, default
    :data:`LATTICE_ORDERS` at L = 3 (calibrated there), as follows.

    Root search by :func:`sequential_driver`, in ``x = log(1 - q)`` (``r_l`` is close to linear
    in it): the coarse order ``orders[0]`` on ``scan`` (extended by one scan step outwards, at
    most twice, until both residuals change sign); per layer the parabola through the bracket
    and its nearer neighbour gives the root ``x_l``; the coarse order is evaluated at ``x_l``
    and shifted to its own root to first order with the parabola's slopes (``x_c``), the refined
    order ``orders[1]`` is evaluated at ``x_c`` and shifted likewise, and so is the split order
    between them (refined outer rules ``tau, dh``, coarse fibre lattice: the two rules' errors
    may cancel).  ``value = 1 / mu_l`` of the refined order; ``error``: :func:`lattice_bar` over
    the three (slope uncertainty: the parabola's slope ratio ``dmu/dr`` vs the bracket's secant).
    ``workers``: processes over the omega_3 nodes (default ``min(2, cpu_count)``). Returns
    records ``layer, kind="sequential", value, error, q3, q3_error, orders, method, seconds,
    first`` (and the parts of the bar); the smallest value is the next transition (the others
    are upper bounds only). Raises :class:`ConvergenceError` when a root is not bracketed."""
    import os

    require(layers in (2, 3), "layers", "2 or 3 (fibre lattices of at most 4 dimensions)",
            layers)
    if layers == 2 and (orders is None or digits is not None):
        require(orders is None, "orders", "omitted with digits (the L = 2 ladder)", orders)
        r = sequential_threshold(skip=skip, beta=beta, digits=4 if digits is None else digits,
                                 workers=workers, progress=progress)
        return [dict(r, layer=1, kind="sequential", first=True)]
    require(digits is None, "digits", "omitted for layers = 3 (a fixed pair of orders)", digits)
    orders = LATTICE_ORDERS if orders is None else orders
    require(isinstance(skip, (int, float)) and np.isfinite(skip) and skip > 0, "skip",
            "> 0 (det A = c (1 + c) must not vanish)", skip)
    check_skip_floor(skip, "sequential_l3" if layers == 3 else "sequential")
    require(isinstance(orders, (tuple, list)) and len(orders) == 2, "orders",
            "a pair (coarse, refined) of (tau, dh, dz1, dz2, radius)", orders)
    orders = tuple(_check_order(o) for o in orders)
    require(isinstance(scan, (tuple, list)) and len(scan) >= 3
            and all(isinstance(q, (int, float)) and 0 < q < 1 for q in scan)
            and list(scan) == sorted(set(scan)), "scan", "at least 3 increasing values in (0, 1)",
            scan)
    require(isinstance(single, bool), "single", "a bool", single)
    if workers is None:
        workers = min(2, os.cpu_count() or 1)
    require(isinstance(workers, int) and workers >= 1, "workers", "a positive integer", workers)
    tick = progress or (lambda *a: None)
    coarse, fine = orders
    seen: dict = {}

    def ev(q, order):
        q = round(float(q), 12)
        require(0 < q < 1, "scan", "brackets that stay in (0, 1)", q)
        if (q, order) not in seen:
            seen[(q, order)] = branch_point(q, order, layers=layers, skip=skip, beta=beta,
                                            single=single, workers=workers, wcut=LATTICE_WCUT)
            st = seen[(q, order)]
            tick(len(seen), 2 * layers - 2 + len(scan),
                 f"L = {layers} lattice: q{layers} = {q:.6f} order {list(order)}: r = ("
                 + ", ".join(f"{r:+.4e}" for r in st["r"]) + f"), {st['seconds']:.0f} s")
        return seen[(q, order)]

    def locate(l, table, bracket):
        """Layer l: the parabola through the bracket and its nearer neighbour in |r_l| (in x =
        log(1 - q)), then the orders shifted to their own roots."""
        qs = sorted(table)
        i = qs.index(bracket[0])
        pts = [(q, ev(q, coarse)) for q in qs]
        j = min([j for j in (i - 1, i + 2) if 0 <= j < len(pts)],
                key=lambda j: abs(pts[j][1]["r"][l - 1]))
        trio = sorted([pts[i], pts[i + 1], pts[j]])
        xa, xb = math.log1p(-pts[i][0]), math.log1p(-pts[i + 1][0])
        x = [math.log1p(-q) for q, _ in trio]
        x0 = float(np.mean(x))
        fit = fit_root(x, [st["r"][l - 1] for _, st in trio], [st[f"mu{l}"] for _, st in trio],
                       x0, within=(xa, xb), near=0.5 * (xa + xb) - x0)
        if fit is None:
            raise ConvergenceError(f"no root of the layer-{l} residual parabola in the bracket",
                                   last_iterate=[q for q, _ in trio],
                                   residual=[st["r"][l - 1] for _, st in trio])
        s_r, s_mu, cr = fit["s_r"], fit["s_mu"], fit["cr"]
        ra, rb = pts[i][1]["r"][l - 1], pts[i + 1][1]["r"][l - 1]
        ma, mb = pts[i][1][f"mu{l}"], pts[i + 1][1][f"mu{l}"]
        rel_slope = abs((mb - ma) / (rb - ra) - s_mu / s_r) / abs(s_mu / s_r)

        def shifted(order, x_at):
            st = ev(-math.expm1(x_at), order)
            return shift_to_root(st, st["r"][l - 1], st[f"mu{l}"], x_at, s_r, s_mu,
                                 st[f"K{layers}"])

        c = shifted(coarse, fit["t"])
        # split refinement: the outer rules (tau, dh) first, then the fibre lattice; the errors
        # of the two may have opposite signs, so the bar adds the two steps' moduli
        evs = [c] + [shifted(o, c["t"]) for o in (fine[:2] + coarse[2:], fine)]
        f = evs[-1]
        q_f = -math.expm1(f["t"])
        b = lattice_bar(evs, q=q_f, curv=abs(fit["cm"][0]) + abs(s_mu * cr[0] / s_r),
                        rel_slope=rel_slope, s_mu=s_mu, single=single)
        return dict(
            layer=l, kind="sequential", value=1.0 / f["mu"], **b, **{
                f"q{layers}": q_f,
                f"q{layers}_error": sum(abs(math.expm1(e1["t"]) - math.expm1(e0["t"]))
                                        for e0, e1 in zip(evs[:-1], evs[1:], strict=True))
                + (1 - q_f) * abs(cr[0] / s_r) * sum((o["t"] - o["t_eval"]) ** 2 for o in evs),
                f"q{layers}_values": [-math.expm1(e["t"]) for e in evs]},
            values=[1.0 / e["mu"] for e in evs],
            slope_r=s_r, slope_mu=s_mu, mass=f["st"]["mass"], pairs=int(f["st"]["pairs"]),
            orders=[list(o) for o in orders],
            scan=[(q, *st["r"], *(st[f"mu{k}"] for k in range(1, layers))) for q, st in pts],
            method=(f"root in q{layers} of mu_l - (1-q{layers}) K{layers}/q{layers} on the "
                    f"layer-{layers} SE branch; deterministic: omega_{layers} sinh-trapezoid x h "
                    f"lattice x {2 * layers - 2}D fibre trapezoid lattice (dz1 in z_1, dz2 in "
                    "later rows), orders (tau, "
                    f"dh/sqrt V, dz1, dz2, R) {[list(o) for o in orders]}"
                    + (", float32 exponentials" if single else "")
                    + "; error = |alpha(refined) - alpha(coarse)|"
                    + " (outer rules and fibre lattice refined in turn, moduli added)"
                    + " + root interpolation + alpha x "
                    "(relative Nishimori residual + float32 bound) + cut bounds"))

    out = sequential_driver(lambda qs: [ev(q, coarse)["r"] for q in qs], locate,
                            unlearned=range(1, layers), scan=list(scan), attempts=3,
                            what="the lattice scan")
    for d in out:
        d["evaluations"] = len(seen)
    return out
