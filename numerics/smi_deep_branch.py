"""Sequential thresholds of deep tied attention with L = 3 layers (M = 2 tokens, P_l = 1),
THEORY 2.2 (subspace thresholds) and 2.3 (noiseless fibre).

At ``Q = 0`` the last layer is learned first (:mod:`aim_sym.numerics.smi_weak`).  On its SE branch
``Q = diag(0, 0, q3)``, ``V = 1 - q3``, the output channel given ``omega_3 ~ N(0, q3 I)`` is

    Z(h) = int dz_1 dz_2 N(z_1; 0, I) N(z_2; 0, I) sum_s N(M^{-1} s h; omega_3, V I) / det M,

``M = A_2 A_1`` (``A_1 = A(z_1)``, ``A_2 = A(A_1 z_2)``), the density of the pair ``{h, -h}``
that ``y`` fixes (THEORY 2.3).  ``M`` is invariant under ``z_1 -> -z_1`` and ``z_2 -> -z_2``,
so ``E z_l = 0`` and the (1, 2) block of the posterior covariance vanishes; the unlearned
directions decouple and layer ``l = 1, 2`` has the stability coefficient

    mu_l = E || Cov[z_l | y, omega_3] - I ||_F^2 .

The branch is ``alpha(q3) = q3 / ((1 - q3) K3)``, ``K3 = E sum_m g_3m^2``, ``g_3 = (E[z_3|.] -
omega_3) / V``, and the sequential threshold of layer ``l`` is the root ``q3*`` of
``r_l = mu_l - (1 - q3) K3 / q3`` with ``alpha_seq,l = 1 / mu_l(q3*)`` (THEORY 2.2: alpha times
the eigenvalue in the unlearned direction crosses 1).

Deterministic route (:func:`branch_stats_l3`): ``omega_3`` by the rotated sinh-trapezoid
:func:`aim_sym.numerics.smi_sequential.omega_rule`; ``h`` given ``omega_3`` by a trapezoid lattice of
spacing ``dh sqrt(V)`` on the attention image box of ``omega_3`` padded by ``H_PAD`` standard
deviations of the blur ``sqrt(V) M eta`` (:func:`h_lattice_l3`); the fibre over ``(z_1, z_2)``
by a 4D trapezoid lattice of spacings ``dz1`` (in ``z_1``) and ``dz2`` (in ``z_2``) on the ball
``|z| <= R`` restricted to ``z_1,0 >= 0, z_2,0 >= 0`` (weights x 4 by the two sign symmetries).
Node features (``M^{-1}`` from the symbolic fibre :func:`aim_sym.smi.compile_functions`, prior,
``det M``) are computed once; the exponent is a bilinear form (outer features) x (node
features), evaluated in cache-sized blocks of 8 outer points x 8192 nodes (each node chunk with
its own row shift) with float32 exponentials, and the omega_3 nodes are spread over forked
workers.  Monte Carlo route: :func:`montecarlo_branch_l3`.  Results: benchmarks/RESULTS.md.

Thresholds, two independent routes: the seeded Monte Carlo :func:`sequential_thresholds_l3`
(alpha_seq,1 = 0.979 +- 0.017, alpha_seq,2 = 1.134 +- 0.014, mean of two seeds) and the
deterministic :func:`sequential_thresholds_l3_lattice`: 0.9771 +- 0.0021 (q3* = 0.97828) and
1.1358 +- 0.0044 (q3* = 0.98714) at the orders (tau, dh, dz1, dz2, R) = (0.5, 2.8, 0.6, 0.4, 6)
-> (0.4, 2.2, 0.5, 0.3, 6), 0.1 combined SE from the Monte Carlo values, 10 evaluations in 21 min
on 2 cores (the refined order at the layer-2 root: 2.7e10 (outer x node) pairs, 7 min).
What made the lattice affordable at the roots (V = 0.022 and 0.013), measured at q3 = 0.98
(benchmarks/RESULTS.md):

- anisotropic lattice: ``mu_l`` is set by the ``z_2`` spacing, ``K3`` more by the ``z_1`` one;
  error of ``r_1`` against the reference 0.08939: dz2 0.5 / 0.4 / 0.3 / 0.25 -> 3.7e-3 / 1.9e-3 /
  6.2e-4 / 3.9e-4 (dz1 = 0.5), dz1 0.6 / 0.5 / 0.4 -> 1.0e-3 / 6.2e-4 / 3.3e-4 (dz2 = 0.3); the
  isotropic lattice 0.3 (3.5e-4) has 214k nodes, (0.5, 0.25) 113k, the refined (0.5, 0.3) 79k;
- blocks of 8 rows x 8192 nodes instead of 2 rows x all nodes (a 1-row block turns the
  products into matrix-vector ones: 140-280 ns per pair): 31.2 -> 19.4 ns per pair in one
  process, float32 exponentials -> 14.1, two forked workers -> 7.9 ns per pair of wall time;
- dropping omega_3 nodes of weight < 1e-8 (:data:`LATTICE_WCUT`; 18 of 99 nodes at q3 = 0.98,
  47% of the h points; bound 1.3e-5 on ``mu_l``, in the bar).

The earlier estimate (10-40 min per evaluation, "dz = 0.3 too coarse") assumed an isotropic
lattice of 1e5-2e5 nodes, all omega_3 nodes, and 30-90 ns per pair in one process.
"""

from __future__ import annotations

import itertools
import math
import time
from functools import lru_cache

import numpy as np

from . import smi_sequential
from .records import ConvergenceError, mean_estimate, require, standard_error
from .smi_fibre import check_skip_floor, fibre_quadratics, functions, inverse_columns

H_PAD = 6.0          # h-box padding in standard deviations of the blur sqrt(V) M eta
RADIUS = 6.0         # fibre lattice radius (4D); prior mass outside: (1 + R^2/2) exp(-R^2/2)
OMEGA_WCUT = 1e-14   # omega_3 nodes of smaller weight are dropped (bounded in ``cut``)
_ROWS = 8            # outer points per block
_CHUNK = 8192        # fibre nodes per block: 8 x 8192 x 8 B = 512 kB per work array


def _check_channel(skip: float, beta: float) -> None:
    require(isinstance(skip, (int, float)) and np.isfinite(skip) and skip > 0, "skip",
            "> 0 (det A = c (1 + c) must not vanish)", skip)
    check_skip_floor(skip, "sequential_l3")
    require(isinstance(beta, (int, float)) and np.isfinite(beta) and beta > 0, "beta", "> 0",
            beta)


def _check_q3(q3: float) -> None:
    require(isinstance(q3, (int, float)) and np.isfinite(q3) and 0 < q3 < 1, "q3", "in (0, 1)",
            q3)


def inverse_map(z10, z11, z20, z21, skip: float, beta: float):
    """Entries ``(a, b, c, d)`` of ``M^{-1}`` (row-major) and ``1 / det M`` at the nodes
    (:func:`aim_sym.numerics.smi_fibre.inverse_columns` at L = 3)."""
    ((m00, m01), (m10, m11)), jac = inverse_columns([z10, z11, z20, z21], 3, skip, beta)
    return (m00, m01, m10, m11), jac


def tail_mass_4d(radius: float) -> float:
    """Prior mass of N(0, I_4) outside the ball of the given radius."""
    x = 0.5 * radius**2
    return (1.0 + x) * math.exp(-x)


@lru_cache(maxsize=4)
def fibre_lattice(dz: float, skip: float, beta: float, radius: float = RADIUS,
                  dz2: float | None = None) -> dict:
    """Node features of the 4D lattice (spacing ``dz`` in ``z_1`` and ``dz2`` in ``z_2``, default
    ``dz``; ball of ``radius``; orthant ``z_1,0 >= 0, z_2,0 >= 0`` with weights x 4 and halves on
    the faces).

    ``B`` (3, n): ``|M^{-1} h|^2 = B . (h0^2, h0 h1, h1^2)``; ``Y`` (4, n): ``M^{-1}`` entries
    (``omega^T M^{-1} h = Y . (o0 h0, o0 h1, o1 h0, o1 h1)``); ``logw``: log(weight x prior /
    det M); ``F`` (n, 10): ``1, z_1 z_1^T (3), z_2 z_2^T (3), B (3)``; ``Ai`` (n, 4)."""
    dz2 = dz if dz2 is None else dz2
    require(0.05 <= dz <= 1.0, "dz", "in [0.05, 1]", dz)
    require(0.05 <= dz2 <= 1.0, "dz2", "in [0.05, 1]", dz2)
    g1 = dz * np.arange(-math.floor(radius / dz), math.floor(radius / dz) + 1)
    g2 = dz2 * np.arange(-math.floor(radius / dz2), math.floor(radius / dz2) + 1)
    g1p, g2p = g1[g1 >= 0], g2[g2 >= 0]
    parts = []
    B1, C0, C1 = np.meshgrid(g1, g2p, g2, indexing="ij")
    for a in g1p:                     # z_1,0 = a: one 3D slab at a time (memory)
        r2 = a * a + B1**2 + C0**2 + C1**2
        keep = r2 <= radius**2
        parts.append(np.stack([np.full(keep.sum(), a), B1[keep], C0[keep], C1[keep]]))
    z10, z11, z20, z21 = np.concatenate(parts, axis=1)
    w = 4.0 * dz**2 * dz2**2 * np.where(z10 == 0, 0.5, 1.0) * np.where(z20 == 0, 0.5, 1.0)
    Mi, jac = inverse_columns([z10, z11, z20, z21], 3, skip, beta)
    require(bool(np.all(np.isfinite(jac) & (jac > 0))), "skip", "> 0 (finite det M)", skip)
    B, Y, _ = fibre_quadratics(Mi)
    logw = (np.log(w) - 0.5 * (z10**2 + z11**2 + z20**2 + z21**2) - 2 * math.log(2 * math.pi)
            + np.log(jac))
    F = np.stack([np.ones_like(z10), z10 * z10, z10 * z11, z11 * z11, z20 * z20, z20 * z21,
                  z21 * z21, *B], 1)
    return dict(B=B, Y=Y, logw=logw, F=F, Ai=Y.T.copy(), n=z10.size, radius=radius,
                tail=tail_mass_4d(radius), z=(z10, z11, z20, z21), dz=(dz, dz2))


def _node_chunks(lat: dict, size: int) -> list:
    """The lattice split into contiguous chunks of at most ``size`` nodes (feature arrays copied:
    each chunk's work stays in cache), cached in ``lat``."""
    key = ("chunks", size)
    if key not in lat:
        n = lat["n"]
        k = max(1, -(-n // size))
        edges = np.linspace(0, n, k + 1).astype(int)
        lat[key] = [dict(n=int(e1 - e0),
                         B=np.ascontiguousarray(lat["B"][:, e0:e1]),
                         logw=np.ascontiguousarray(lat["logw"][e0:e1]),
                         Y=np.ascontiguousarray(lat["Y"][:, e0:e1]),
                         F=np.ascontiguousarray(lat["F"][e0:e1]),
                         Ai=np.ascontiguousarray(lat["Ai"][e0:e1]))
                    for e0, e1 in zip(edges[:-1], edges[1:], strict=True)]
    return lat[key]


def fibre_moments(h0, h1, o0, o1, v: float, lat: dict, single: bool = False) -> np.ndarray:
    """Posterior moments over the fibre at outer points (1D arrays ``h``, ``omega_3``), rows:
    ``c1 = Cov[z_1|.] - I`` (3 entries), ``c2`` (3), ``E z_3`` (2), ``E |z_3|^2``, ``log Z``
    (``Z`` with the ``1 / (2 pi V)`` of the layer-3 Gaussian).  ``single``: float32 exponentials
    (:func:`aim_sym.numerics.smi_sequential.fibre_sums`, relative bias <= ``FLOAT32_REL``).

    Blocks of :data:`_ROWS` outer points x :data:`_CHUNK` nodes (cache-sized; a one-row block
    would turn the matrix products into slow matrix-vector ones): each node chunk's sums carry
    their own row shift and are rescaled to the largest before they are added."""
    chunks = _node_chunks(lat, _CHUNK)
    step = _ROWS
    out = np.empty((10, h0.size))
    for s0 in range(0, h0.size, step):
        sl = slice(s0, s0 + step)
        a0, a1, b0, b1 = h0[sl], h1[sl], o0[sl], o1[sl]
        parts = [smi_sequential.fibre_sums(a0, a1, b0, b1, v, ch, single) for ch in chunks]
        shift = np.max([p[2] for p in parts], axis=0)
        G = sum(p[0] * np.exp(p[2] - shift)[:, None] for p in parts)
        Dd = sum(p[1] * np.exp(p[2] - shift)[:, None] for p in parts)
        out[:, sl] = smi_sequential.lattice_moments(G, Dd, shift, a0, a1, b0, b1, v, rows=2)
    return out


def _vertex_maps(skip: float) -> np.ndarray:
    """The 16 matrices ``(S_2 + c I)(S_1 + c I)`` with 0/1 softmax entries: ``M omega`` is
    multilinear in the four softmax entries, so its coordinates take their extremes there, and so
    do the (convex in each entry) row norms of ``M``."""
    mats = []
    for sa1, sb1, sa2, sb2 in itertools.product((0.0, 1.0), repeat=4):
        A1 = np.array([[sa1 + skip, 1 - sa1], [1 - sb1, sb1 + skip]])
        A2 = np.array([[sa2 + skip, 1 - sa2], [1 - sb2, sb2 + skip]])
        mats.append(A2 @ A1)
    return np.array(mats)


def h_lattice_l3(o0: float, o1: float, v: float, skip: float, dh: float,
                 pad_sd: float = H_PAD):
    """Trapezoid lattice ``dh Z^2`` (``dh`` absolute) on the box of ``M omega_3`` over all
    softmax entries, padded by ``pad_sd`` x ``sqrt(V)`` x (largest row norm of ``M``).  Every
    statistic is even in ``h`` and ``Z(h)`` is the density of ``{h, -h}``, so the expectation is
    ``sum_{h in box} m dh^2 Z f / 2`` with ``m = 2`` where ``-h`` is outside the box (else 1).
    Returns ``(h0, h1, m dh^2 / 2)``."""
    Ms = _vertex_maps(skip)
    img = Ms @ np.array([o0, o1])
    rho = float(np.sqrt((Ms**2).sum(2)).max())
    pad = pad_sd * math.sqrt(v) * rho
    lo, hi = img.min(0) - pad, img.max(0) + pad
    i0 = np.arange(math.floor(lo[0] / dh), math.ceil(hi[0] / dh) + 1)
    i1 = np.arange(math.floor(lo[1] / dh), math.ceil(hi[1] / dh) + 1)
    I0, I1 = np.meshgrid(i0, i1, indexing="ij")
    I0, I1 = I0.ravel(), I1.ravel()
    mirrored = (-I0 >= i0[0]) & (-I0 <= i0[-1]) & (-I1 >= i1[0]) & (-I1 <= i1[-1])
    m = np.where(mirrored, 1.0, 2.0)
    return dh * I0, dh * I1, 0.5 * m * dh * dh


def _omega_sums(o0, o1, wo, v, skip, dh_abs, lat, single=False):
    H0, H1, Wh = h_lattice_l3(o0, o1, v, skip, dh_abs)
    r = fibre_moments(H0, H1, np.full_like(H0, o0), np.full_like(H0, o1), v, lat, single)
    w = Wh * np.exp(r[9])
    fro = lambda a, b, c: a * a + 2 * b * b + c * c  # noqa: E731
    acc = np.array([w.sum(), w @ fro(r[0], r[1], r[2]), w @ fro(r[3], r[4], r[5]),
                    w @ (((r[6] - o0) ** 2 + (r[7] - o1) ** 2) / v**2),
                    w @ (r[8] - r[6] ** 2 - r[7] ** 2), w @ r[9]])
    return wo * acc, H0.size


def _omega_task(args):
    """:func:`_omega_sums` at one omega_3 node; ``key`` names the cached :func:`fibre_lattice`
    (forked workers inherit the cache: nothing large is pickled)."""
    o0, o1, wo, v, skip, dh_abs, key, single = args
    return _omega_sums(o0, o1, wo, v, skip, dh_abs, fibre_lattice(*key), single)


def branch_stats_l3(q3: float, *, skip: float = 1.0, beta: float = 1.0, tau: float = 0.5,
                    dh: float = 2.8, dz: float = 0.3, radius: float = RADIUS,
                    dz2: float | None = None, single: bool = False, workers: int = 1,
                    wcut: float = OMEGA_WCUT) -> dict:
    """Statistics at ``Q = diag(0, 0, q3)`` by the deterministic rule of the module docstring:
    ``mass`` (1), ``mu1``, ``mu2``, ``K3``, ``trcov3 = E tr Cov[z_3|.]``, ``psi = E log Z``, the
    Nishimori residual ``K3 - (2 mass - trcov3 / V) / V`` and ``cut`` (bounds on what the dropped
    omega_3 nodes and the lattice radius carry).  Orders: ``tau`` (omega_3 sinh-trapezoid step),
    ``dh`` (h spacing in units of sqrt(V)), ``dz`` (fibre lattice spacing in ``z_1``), ``dz2``
    (in ``z_2``, default ``dz``), ``radius``; omega_3 nodes of weight below ``wcut`` are dropped
    (bounded in ``cut``).  ``single``: float32 exponentials (relative bias
    <= :data:`aim_sym.numerics.smi_sequential.FLOAT32_REL`); ``workers > 1`` spreads the omega_3 nodes
    over forked processes.  The cross block ``Cov[z_1, z_2 | .]`` is zero by the sign symmetries
    the lattice uses (checked by :func:`montecarlo_branch_l3`)."""

    _check_q3(q3)
    _check_channel(skip, beta)
    require(0.1 <= dh <= 4.0, "dh", "in [0.1, 4] (units of sqrt(1 - q3))", dh)
    require(3.0 <= radius <= 9.0, "radius", "in [3, 9]", radius)
    require(isinstance(workers, int) and workers >= 1, "workers", "a positive integer", workers)
    require(0 <= wcut <= 1e-6, "wcut", "in [0, 1e-6]", wcut)
    v = 1.0 - q3
    key = (float(dz), float(skip), float(beta), float(radius),
           float(dz if dz2 is None else dz2))
    lat = fibre_lattice(*key)
    # sinh-map scale min(sqrt V, sqrt q3): the omega_3 features have width sqrt(V) (q3 -> 1),
    # the Gaussian itself width sqrt(q3) (q3 -> 0)
    O0, O1, W = smi_sequential.omega_rule(float(tau), float(q3), min(1.0, math.sqrt(q3 / v)))
    keep = W >= wcut
    w_cut = float(W[~keep].sum())
    jobs = [(float(a), float(b), float(w), v, float(skip), float(dh) * math.sqrt(v), key,
             bool(single)) for a, b, w in zip(O0[keep], O1[keep], W[keep], strict=True)]
    # largest h boxes first (load balance over the pool)
    jobs.sort(key=lambda j: -(abs(j[0]) + abs(j[1])))
    res = smi_sequential.map_jobs(_omega_task, jobs, workers)
    mass, mu1, mu2, K3, trcov3, psi = np.sum([r[0] for r in res], axis=0)
    npts = int(sum(r[1] for r in res))
    # per unit outer weight: mass 1, K3 <= 2/V (Nishimori), mu_l <= 2 (R^2 - 1)^2 on the lattice;
    # the prior mass outside the lattice ball (``radius_tail``) is bounded the same way
    mu_bound = 2.0 * (radius**2 - 1) ** 2
    cut = dict(mass=w_cut, K3=2.0 * w_cut / v, mu=mu_bound * w_cut, radius_tail=lat["tail"],
               mu_tail=mu_bound * lat["tail"], K3_tail=2.0 * lat["tail"] / v)
    return dict(mass=float(mass), mu1=float(mu1), mu2=float(mu2), K3=float(K3),
                trcov3=float(trcov3), psi=float(psi),
                nishimori=float(K3 - (2 * mass - trcov3 / v) / v), cross=0.0,
                outer_points=npts, nodes=lat["n"], pairs=npts * lat["n"], cut=cut,
                order=(tau, dh, dz, key[4], radius))


# ----------------------------------------------------------------------------- Monte Carlo
def _fibre_jacobian_fd(z, h, skip, beta, eps=1e-5):
    """``J = d z_3 / d (z_1, z_2)`` (n, 2, 4) along the fibre through ``h``, central
    differences of the symbolic fibre."""
    f = functions(3)["fibre"]
    J = np.empty((z.shape[0], 2, 4))
    for k in range(4):
        zp, zm = z.copy(), z.copy()
        zp[:, k] += eps
        zm[:, k] -= eps
        a = f(*zp.T, h[:, 0], h[:, 1], skip, beta)
        b = f(*zm.T, h[:, 0], h[:, 1], skip, beta)
        J[:, 0, k] = (np.asarray(a[0]) - np.asarray(b[0])) / (2 * eps)
        J[:, 1, k] = (np.asarray(a[1]) - np.asarray(b[1])) / (2 * eps)
    return J


MC_NAMES = ("mu1", "mu2", "K3", "cross", "trcov3", "nishimori", "resid1", "resid2")


def _mc_samples(q3: float, skip: float, beta: float, samples: int, inner: int, seed: int):
    """Per-outer-sample values of :data:`MC_NAMES` after the control-variate adjustment
    (``samples`` x 8).  The same ``seed`` draws the same standard normals at every ``q3``
    (common random numbers: differences across ``q3`` have a small variance)."""
    _check_q3(q3)
    _check_channel(skip, beta)
    require(isinstance(samples, int) and samples >= 10, "samples", "an integer >= 10", samples)
    require(isinstance(inner, int) and inner >= 20, "inner", "an integer >= 20", inner)
    f = functions(3)["fibre"]
    # outer draws first from their own stream, inner draws from another: the same teachers at
    # every q3 and every inner size (common random numbers)
    ro, ri = np.random.default_rng([seed, 0]), np.random.default_rng([seed, 1])
    Zt, Wt, Et = (ro.standard_normal((samples, k)) for k in (4, 2, 2))
    v = 1.0 - q3
    vals = np.zeros((samples, len(MC_NAMES)))
    cvs = np.zeros((samples, 3))
    flips = np.array([np.repeat([s1, s2], 2) for s1 in (1, -1) for s2 in (1, -1)], float)
    pis = (0.2, 0.2)
    step = max(1, 400_000 // inner)
    for s0 in range(0, samples, step):
        n = min(step, samples - s0)
        z, eta = Zt[s0:s0 + n], Et[s0:s0 + n]
        om = math.sqrt(q3) * Wt[s0:s0 + n]
        (m00, m01, m10, m11), _ = inverse_map(*z.T, skip, beta)
        Mi = np.stack([np.stack([m00, m01], -1), np.stack([m10, m11], -1)], -2)
        z3 = om + math.sqrt(v) * eta
        h = np.linalg.solve(Mi, z3[..., None])[..., 0]
        J = _fibre_jacobian_fd(z, h, skip, beta)
        P = np.eye(4) + np.einsum("nai,naj->nij", J, J) / v
        S = 2.0 * np.linalg.inv(P)
        S = 0.5 * (S + np.swapaxes(S, 1, 2))
        L = np.linalg.cholesky(S)
        Si = np.linalg.inv(S)
        logdetS = np.linalg.slogdet(S)[1]
        comp = ri.choice(5, size=(n, inner), p=(pis[0],) + (pis[1],) * 4)
        x = ri.standard_normal((n, inner, 4))
        lx = np.einsum("nab,nkb->nka", L, x)
        fl = flips[np.maximum(comp - 1, 0)]                    # (n, inner, 4)
        y = np.where((comp == 0)[..., None], x, fl * (z[:, None, :] + lx))
        logq = [math.log(pis[0]) - 0.5 * (y**2).sum(-1)]
        for d in flips:
            e = d * y - z[:, None, :]
            qf = np.einsum("nka,nab,nkb->nk", e, Si, e)
            logq.append(math.log(pis[1]) - 0.5 * qf - 0.5 * logdetS[:, None])
        logq = np.logaddexp.reduce(np.stack(logq), axis=0)
        a = f(y[..., 0], y[..., 1], y[..., 2], y[..., 3], h[:, None, 0], h[:, None, 1],
              skip, beta)
        u0, u1, jac = (np.asarray(t, float) for t in a)
        o0, o1 = om[:, None, 0], om[:, None, 1]
        base = (-0.5 * (y**2).sum(-1) - ((u0**2 + u1**2) + (o0**2 + o1**2)) / (2 * v)
                + np.log(jac))
        xx = (u0 * o0 + u1 * o1) / v
        with np.errstate(under="ignore", over="ignore"):
            lp = np.logaddexp(base + xx, base - xx) - logq
            wt = np.exp(lp - lp.max(1, keepdims=True))
            th = np.tanh(xx)
        half = inner // 2
        parts = []
        for part in (slice(0, half), slice(half, 2 * half)):
            wp = wt[:, part] / wt[:, part].sum(1, keepdims=True)
            yy = y[:, part]
            mom = lambda t, wp=wp: (wp * t).sum(1)  # noqa: E731
            c1 = np.stack([mom(yy[..., 0] ** 2) - 1, mom(yy[..., 0] * yy[..., 1]),
                           mom(yy[..., 1] ** 2) - 1], 1)
            c2 = np.stack([mom(yy[..., 2] ** 2) - 1, mom(yy[..., 2] * yy[..., 3]),
                           mom(yy[..., 3] ** 2) - 1], 1)
            cr = np.stack([mom(yy[..., i] * yy[..., j]) for i in (0, 1) for j in (2, 3)], 1)
            e3 = np.stack([mom(th[:, part] * u0[:, part]), mom(th[:, part] * u1[:, part])], 1)
            n3 = mom(u0[:, part] ** 2 + u1[:, part] ** 2)
            parts.append((c1, c2, cr, e3, n3))
        (c1a, c2a, cra, e3a, n3a), (c1b, c2b, crb, e3b, n3b) = parts
        fro = np.array([1.0, 2.0, 1.0])
        sl = slice(s0, s0 + n)
        vals[sl, 0] = (c1a * c1b) @ fro
        vals[sl, 1] = (c2a * c2b) @ fro
        vals[sl, 2] = ((e3a - om) * (e3b - om)).sum(1) / v**2
        vals[sl, 3] = (cra * crb).sum(1)
        vals[sl, 4] = 0.5 * (n3a + n3b) - (e3a * e3b).sum(1)
        r1 = (z[:, :2] ** 2).sum(1)
        r2 = (z[:, 2:] ** 2).sum(1)
        cvs[sl, 0] = r1**2 - 2 * r1 + 2 - 6.0
        cvs[sl, 1] = r2**2 - 2 * r2 + 2 - 6.0
        cvs[sl, 2] = ((eta**2).sum(1) - 2.0) / v
    vals[:, 5] = vals[:, 2] - (2.0 - vals[:, 4] / v) / v
    vals[:, 6] = vals[:, 0] - (1 - q3) * vals[:, 2] / q3
    vals[:, 7] = vals[:, 1] - (1 - q3) * vals[:, 2] / q3
    # control variates (regression coefficients from the same samples: O(1/samples) bias)
    X = cvs - cvs.mean(0)
    coef, *_ = np.linalg.lstsq(X, vals - vals.mean(0), rcond=None)
    return vals - cvs @ coef


def montecarlo_branch_l3(q3: float, *, skip: float = 1.0, beta: float = 1.0,
                         samples: int = 4000, inner: int = 2000, seed: int = 0) -> dict:
    """Seeded Monte Carlo at ``Q = diag(0, 0, q3)``, independent of every quadrature rule.

    Outer: teacher ``z_1, z_2, eta ~ N(0, I)``, ``omega_3 ~ N(0, q3 I)``, ``h = M (omega_3 +
    sqrt(V) eta)``.  Inner: self-normalised importance sampling over ``(z_1, z_2)`` with the
    mixture 0.2 N(0, I_4) + 0.2 x 4 sign-flipped copies of N(teacher, 2 (I + J^T J / V)^{-1})
    (``J`` the fibre Jacobian at the teacher).  Squares of posterior moments come from two
    independent halves (only the O(1/inner) ratio bias remains); control variates with known
    means reduce the variance.  Returns Estimates (error = standard error) for ``mu1``, ``mu2``,
    ``K3``, ``cross`` (``E ||E[z_1 z_2^T | .]||_F^2``, zero by symmetry), ``trcov3``, the
    Nishimori residual and ``resid1``, ``resid2`` (``r_l = mu_l - (1 - q3) K3 / q3``)."""
    adj = _mc_samples(q3, skip, beta, samples, inner, seed)
    meth = (f"Monte Carlo, {samples} outer x {inner} inner (prior + 4 sign-flipped Laplace "
            f"components, control variates), seed {seed}")
    return {k: mean_estimate(adj[:, i], meth) for i, k in enumerate(MC_NAMES)}


# ----------------------------------------------------------------------------- thresholds
SEQ_SCAN = (0.9, 0.95, 0.97, 0.98, 0.985, 0.99, 0.993, 0.996)


def _fit_root(qs, R, Mu, deg: int, strict: bool = True):
    """Root of the polynomial fit (degree ``deg``, in ``x = q - mean``) of ``R`` over ``qs``
    nearest their centre, and ``1 / mu`` there from the same fit of ``Mu``.  ``strict``: the
    root must lie within the points (else :class:`ConvergenceError`); otherwise the linear fit's
    root stands in when the quadratic has no real root (jackknife replicates)."""
    x0 = float(np.mean(qs))
    x = np.asarray(qs) - x0
    cr, cm = np.polyfit(x, R, deg), np.polyfit(x, Mu, deg)
    roots = [z.real for z in np.roots(cr) if abs(z.imag) < 1e-12]
    if strict:
        roots = [z for z in roots if x[0] - 1e-9 <= z <= x[-1] + 1e-9]
        if not roots:
            raise ConvergenceError("no root of the fitted residual within the refinement points",
                                   last_iterate=list(qs), residual=list(R))
    if not roots:
        return _fit_root(qs, R, Mu, 1, strict=False)
    xr = min(roots, key=lambda z: abs(z))
    return x0 + xr, 1.0 / float(np.polyval(cm, xr))


def sequential_thresholds_l3(*, skip: float = 1.0, beta: float = 1.0, samples: int = 6000,
                             inner: int = 1500, seed: int = 0, scan_samples: int = 2000,
                             scan=SEQ_SCAN, groups: int = 20, progress=None) -> list[dict]:
    """Sequential thresholds of layers 1 and 2 on the layer-3 branch (module docstring).

    Route (seeded Monte Carlo, :func:`montecarlo_branch_l3`; the deterministic route is
    :func:`sequential_thresholds_l3_lattice`, ~1e10 (outer x node) pairs per evaluation near
    the roots): a scan of ``scan`` with ``scan_samples`` outer
    draws brackets the sign change of each ``r_l``; four points spanning each bracket (widened
    by half its width on each side) are then evaluated with ``samples`` x ``inner`` draws and
    common random numbers (the same teachers at every q3); ``r_l`` and ``mu_l`` are fitted by
    quadratics, ``q3*`` is the root and ``alpha_seq,l = 1 / mu_l(q3*)``.  Error = delete-a-group
    jackknife standard error over ``groups`` groups of outer draws (all points together, so
    their correlation is kept) +
    ``|alpha(inner) - alpha(inner / 2)|`` (the O(1/inner) ratio bias, same teachers) +
    ``|quadratic - linear fit|`` (interpolation).  Returns records ``layer, kind="sequential",
    value, error, q3, q3_error, nishimori, method`` for layers 1 and 2; the smaller value is the
    next transition after layer 3 (the other is meaningful only as an upper bound)."""
    _check_channel(skip, beta)
    require(isinstance(samples, int) and samples >= 20 * groups, "samples",
            f">= 20 x groups = {20 * groups}", samples)
    require(isinstance(groups, int) and groups >= 5, "groups", "an integer >= 5", groups)
    require(len(scan) >= 2 and all(0 < q < 1 for q in scan) and list(scan) == sorted(scan),
            "scan", "increasing values in (0, 1)", scan)
    t0, c0 = time.perf_counter(), time.process_time()
    tick = progress or (lambda *a: None)
    rs = []
    for i, q in enumerate(scan):
        adj = _mc_samples(q, skip, beta, scan_samples, inner, seed + 7919)
        rs.append(adj[:, 6:8].mean(0))
        tick(i + 1, len(scan), f"sequential L = 3: scan q3 = {q}")
    rs = np.array(rs)
    brackets = {}
    for l in (1, 2):
        r = rs[:, l - 1]
        idx = [i for i in range(len(scan) - 1) if r[i] < 0 <= r[i + 1]]
        if not idx:
            raise ConvergenceError(f"sequential threshold of layer {l} not bracketed in q3",
                                   last_iterate=list(scan), residual=list(r))
        i = idx[0]
        qa, qb = scan[i], scan[i + 1]
        # four points over the bracket widened by half its width on each side (the scan is
        # noisier than the refined evaluations)
        w = qb - qa
        brackets[l] = [qa - 0.5 * w + 2 * w * k / 3 for k in range(4)]
    vals, half = {}, {}
    count = [0]

    def ensure(q):
        q = round(q, 12)
        require(0 < q < 1, "scan", "brackets whose refinement points stay in (0, 1)", q)
        if q not in vals:
            vals[q] = _mc_samples(q, skip, beta, samples, inner, seed)
            half[q] = _mc_samples(q, skip, beta, samples, max(20, inner // 2), seed)
            count[0] += 1
            tick(count[0], 8, f"sequential L = 3: q3 = {q:.5f}")
        return q

    for l in (1, 2):
        # the refined residual may change sign outside the (noisier) scan bracket: move the
        # window of four points by its spacing until it does (at most 3 moves)
        qs = [ensure(q) for q in brackets[l]]
        dq = qs[1] - qs[0]
        for _ in range(3):
            r = [vals[q][:, 5 + l].mean() for q in qs]
            if min(r) < 0 <= max(r):
                break
            qs = [ensure(q) for q in (qs[1:] + [qs[-1] + dq] if max(r) < 0
                                      else [qs[0] - dq] + qs[:-1])]
        brackets[l] = qs
    gid = np.arange(samples) * groups // samples
    out = []
    for l in (1, 2):
        qs = brackets[l]

        def est(data, mask=None, deg=2, qs=qs, l=l):
            sel = slice(None) if mask is None else mask
            R = [data[q][sel, 5 + l].mean() for q in qs]
            Mu = [data[q][sel, l - 1].mean() for q in qs]
            return _fit_root(qs, R, Mu, deg, strict=mask is None and deg == 2)

        q_star, a = est(vals)
        jk = np.array([est(vals, gid != g) for g in range(groups)])
        se = np.sqrt((groups - 1) / groups * ((jk - jk.mean(0)) ** 2).sum(0))
        q_h, a_h = est(half)
        q_l, a_l = est(vals, deg=1)
        slope = float(np.polyfit(qs, [vals[q][:, 5 + l].mean() for q in qs], 1)[0])
        near = min(qs, key=lambda q: abs(q - q_star))
        nis = vals[near][:, 5]
        K3 = vals[near][:, 2].mean()
        err = float(se[1] + abs(a - a_h) + abs(a - a_l))
        out.append(dict(
            layer=l, kind="sequential", value=float(a), error=err, q3=float(q_star),
            q3_error=float(se[0] + abs(q_star - q_h) + abs(q_star - q_l)),
            stat_error=float(se[1]), bias=float(abs(a - a_h)), interpolation=float(abs(a - a_l)),
            nishimori=(float(nis.mean() / K3), standard_error(nis) / K3),
            slope_r=slope, points=[float(q) for q in qs], seconds=time.perf_counter() - t0,
            cpu_seconds=time.process_time() - c0,
            method=(f"root in q3 of mu_{l} - (1-q3) K3/q3 on the layer-3 SE branch (Q = diag(0, 0, "
                    f"q3)); seeded Monte Carlo {samples} outer x {inner} inner at 4 points with "
                    f"common random numbers, quadratic fit; error = jackknife SE ({groups} groups)"
                    f" + |inner - inner/2| + |quadratic - linear|")))
    first = min(out, key=lambda d: d["value"])
    for d in out:
        d["first"] = d is first
    return out


# ----------------------------------------------------------------------------- lattice thresholds
# (tau, dh, dz1, dz2, R): omega_3 sinh-trapezoid step, h spacing / sqrt(V), fibre lattice spacings
# in z_1 and z_2, lattice radius.  Chosen from the one-rule-at-a-time errors measured at q3 = 0.98
# (module docstring, benchmarks/RESULTS.md): changes of r_1 from coarse to refined, one rule at a
# time: dh 2.8 -> 2.2 1.5e-3, tau 0.5 -> 0.4 1e-4 to 1.6e-4, fibre (0.6, 0.4) -> (0.5, 0.3)
# 1.6e-3; the refined fibre lattice is 6e-4 from the reference (0.5, 0.2) + (0.4, 0.3), radius 6
# vs 6.5: 1e-5.  Measured cost: 21 min on 2 cores (machine shared) for both layers.
LATTICE_ORDERS = ((0.5, 2.8, 0.6, 0.4, 6.0), (0.4, 2.2, 0.5, 0.3, 6.0))
LATTICE_SCAN = (0.975, 0.98, 0.985, 0.99)
# omega_3 nodes below this weight are dropped at the roots: at q3 = 0.98, tau = 0.5 it removes
# 18 of 99 nodes, which hold 47% of the h points and 5e-9 of the weight (bound on mu_l:
# 2 (R^2 - 1)^2 x 5e-9 = 1.3e-5 at R = 6, in the bar)
LATTICE_WCUT = 1e-8


def _check_order(order) -> tuple:
    require(isinstance(order, (tuple, list)) and len(order) == 5
            and all(isinstance(x, (int, float)) and np.isfinite(x) for x in order), "orders",
            "pairs of (tau, dh, dz1, dz2, radius)", order)
    tau, dh, dz1, dz2, rad = (float(x) for x in order)
    require(0.01 <= tau <= 1.0, "tau", "in [0.01, 1]", tau)
    require(0.1 <= dh <= 4.0, "dh", "in [0.1, 4] (units of sqrt(1 - q3))", dh)
    require(0.05 <= dz1 <= 1.0 and 0.05 <= dz2 <= 1.0, "dz", "in [0.05, 1]", (dz1, dz2))
    require(3.0 <= rad <= 9.0, "radius", "in [3, 9]", rad)
    return tau, dh, dz1, dz2, rad


def _lattice_point(q3, order, skip, beta, single, workers, wcut=LATTICE_WCUT) -> dict:
    """Statistics of one order at ``q3`` with the residuals ``r_l = mu_l - (1 - q3) K3 / q3``."""
    tau, dh, dz1, dz2, rad = order
    t0 = time.perf_counter()
    st = branch_stats_l3(q3, skip=skip, beta=beta, tau=tau, dh=dh, dz=dz1, dz2=dz2, radius=rad,
                         single=single, workers=workers, wcut=wcut)
    st["r"] = [st[f"mu{l}"] - (1 - q3) * st["K3"] / q3 for l in (1, 2)]
    st["q3"], st["seconds"] = q3, time.perf_counter() - t0
    return st


def _quad_root(pts, l: int, lo: float, hi: float):
    """Root in ``x = log(1 - q3)`` of the parabola through three ``(q3, stats)`` points for
    ``r_l``, within ``[lo, hi]`` (x values), with the parabolas' coefficients of ``r_l`` and
    ``mu_l``; the linear interpolation between the bracket ends is returned for comparison."""
    x = np.array([math.log1p(-q) for q, _ in pts])
    x0 = float(x.mean())
    R = [st["r"][l - 1] for _, st in pts]
    Mu = [st[f"mu{l}"] for _, st in pts]
    cr, cm = np.polyfit(x - x0, R, 2), np.polyfit(x - x0, Mu, 2)
    a, b = sorted((lo, hi))
    roots = [z.real + x0 for z in np.roots(cr) if abs(z.imag) < 1e-12
             and a - 1e-12 <= z.real + x0 <= b + 1e-12]
    if not roots:
        raise ConvergenceError(f"no root of the layer-{l} residual parabola in the bracket",
                               last_iterate=[q for q, _ in pts], residual=R)
    xr = min(roots, key=lambda z: abs(z - 0.5 * (a + b)))
    return xr, x0, cr, cm


def sequential_thresholds_l3_lattice(*, skip: float = 1.0, beta: float = 1.0,
                                     orders=LATTICE_ORDERS, scan=LATTICE_SCAN,
                                     single: bool = True, split: bool = True,
                                     workers: int | None = None, progress=None) -> list[dict]:
    """Sequential thresholds of layers 1 and 2 on the layer-3 branch by the deterministic rule
    :func:`branch_stats_l3` (anisotropic fibre lattice, float32 exponentials), an independent
    route next to the Monte Carlo :func:`sequential_thresholds_l3`.

    Root search in ``x = log(1 - q3)`` (``r_l`` is close to linear in it): the coarse order
    ``orders[0]`` on ``scan`` (extended by one scan step outwards, at most twice, until both
    residuals change sign); per layer the parabola through the bracket and its nearer neighbour
    gives the root ``x_l``; the coarse order is evaluated at ``x_l`` and shifted to its own root
    to first order with the parabola's slopes (``x_c``), the refined order ``orders[1]`` is
    evaluated at ``x_c`` and shifted likewise.  ``value = 1 / mu_l`` of the refined order;
    ``error = |alpha_refined - alpha_coarse|`` (``split``: the order with the refined outer rules
    ``tau, dh`` and the coarse fibre lattice is evaluated too, and the moduli of the two steps are
    added, since the rules' errors may cancel) + interpolation (second-order remainder of both
    shifts from the parabolas' curvatures + the slope uncertainty: parabola slope ratio
    ``dmu/dr`` vs the bracket's secant, times the shifts) + ``alpha`` x (relative Nishimori
    residual of the refined order + FLOAT32_REL if ``single``) + the cut bounds (omega_3 nodes
    dropped, prior mass outside the lattice ball) x ``alpha^2``.  ``workers``: processes over the
    omega_3 nodes (default ``min(2, cpu_count)``).  Returns records ``layer, kind="sequential",
    value, error, q3, q3_error, orders, method, seconds, first`` (and the parts of the bar); the
    smaller value is the next transition after layer 3 (the other is an upper bound only, module
    docstring).  Raises :class:`ConvergenceError` when a root is not bracketed."""
    import os

    _check_channel(skip, beta)
    require(isinstance(orders, (tuple, list)) and len(orders) == 2, "orders",
            "a pair (coarse, refined) of (tau, dh, dz1, dz2, radius)", orders)
    orders = tuple(_check_order(o) for o in orders)
    require(isinstance(scan, (tuple, list)) and len(scan) >= 3
            and all(isinstance(q, (int, float)) and 0 < q < 1 for q in scan)
            and list(scan) == sorted(set(scan)), "scan", "at least 3 increasing values in (0, 1)",
            scan)
    require(isinstance(single, bool), "single", "a bool", single)
    require(isinstance(split, bool), "split", "a bool", split)
    if workers is None:
        workers = min(2, os.cpu_count() or 1)
    require(isinstance(workers, int) and workers >= 1, "workers", "a positive integer", workers)
    t0 = time.perf_counter()
    tick = progress or (lambda *a: None)
    coarse, fine = orders
    seen: dict = {}

    def ev(q, order):
        q = round(float(q), 12)
        require(0 < q < 1, "scan", "brackets that stay in (0, 1)", q)
        if (q, order) not in seen:
            seen[(q, order)] = _lattice_point(q, order, skip, beta, single, workers)
            st = seen[(q, order)]
            tick(len(seen), 4 + len(scan),
                 f"L = 3 lattice: q3 = {q:.6f} order {list(order)}: r = ({st['r'][0]:+.4e}, "
                 f"{st['r'][1]:+.4e}), {st['seconds']:.0f} s")
        return seen[(q, order)]

    xs = [math.log1p(-q) for q in scan]
    dx = float(np.mean(np.diff(xs)))                     # negative: x falls as q3 rises
    grid = list(scan)
    for q in grid:
        ev(q, coarse)
    brackets = {}
    for l in (1, 2):
        for attempt in range(3):
            pts = sorted((q, ev(q, coarse)) for q in grid)
            r = [st["r"][l - 1] for _, st in pts]
            idx = [i for i in range(len(pts) - 1) if r[i] * r[i + 1] <= 0]
            if idx:
                brackets[l] = idx[0]
                break
            if attempt == 2:
                raise ConvergenceError(f"layer-{l} sequential root not bracketed by the lattice "
                                       "scan", last_iterate=[q for q, _ in pts], residual=r)
            # both residuals rise with q3 near the roots: all negative -> go up in q3
            xn = math.log1p(-pts[-1][0]) + dx if r[-1] < 0 else math.log1p(-pts[0][0]) - dx
            grid.append(-math.expm1(xn))
    out = []
    for l in (1, 2):
        pts = sorted((q, ev(q, coarse)) for q in grid)
        i = brackets[l]
        # the bracket and its nearer neighbour in |r_l|
        nb = [j for j in (i - 1, i + 2) if 0 <= j < len(pts)]
        j = min(nb, key=lambda j: abs(pts[j][1]["r"][l - 1]))
        trio = sorted([pts[i], pts[i + 1], pts[j]])
        xa, xb = math.log1p(-pts[i][0]), math.log1p(-pts[i + 1][0])
        xr, x0, cr, cm = _quad_root(trio, l, xa, xb)
        s_r = float(np.polyval(np.polyder(cr), xr - x0))
        s_mu = float(np.polyval(np.polyder(cm), xr - x0))
        ra, rb = pts[i][1]["r"][l - 1], pts[i + 1][1]["r"][l - 1]
        ma, mb = pts[i][1][f"mu{l}"], pts[i + 1][1][f"mu{l}"]
        rel_slope = abs((mb - ma) / (rb - ra) - s_mu / s_r) / abs(s_mu / s_r)
        curv = abs(cm[0]) + abs(s_mu * cr[0] / s_r)

        def shifted(order, x_at, l=l, s_r=s_r, s_mu=s_mu):
            st = ev(-math.expm1(x_at), order)
            x_o = x_at - st["r"][l - 1] / s_r
            return dict(st=st, x=x_o, x_eval=x_at, mu=st[f"mu{l}"] + s_mu * (x_o - x_at),
                        nis=abs(st["nishimori"]) / st["K3"])

        c = shifted(coarse, xr)
        # split refinement: the outer rules (tau, dh) first, then the fibre lattice; the errors
        # of the two may have opposite signs, so the bar adds the two steps' moduli
        evs = [c] + [shifted(o, c["x"]) for o in ((fine[:2] + coarse[2:]) if split else (),
                                                  fine) if o]
        f = evs[-1]
        a_f = 1.0 / f["mu"]
        steps = [abs(1.0 / e1["mu"] - 1.0 / e0["mu"]) for e0, e1 in zip(evs[:-1], evs[1:])]
        interp = sum((curv * (o["x"] - o["x_eval"]) ** 2
                      + rel_slope * abs(s_mu * (o["x"] - o["x_eval"]))) for o in evs) * a_f**2
        cut, q_f = f["st"]["cut"], -math.expm1(f["x"])
        cut_alpha = (cut["mu"] + cut["mu_tail"]
                     + (1 - q_f) / q_f * (cut["K3"] + cut["K3_tail"])) * a_f**2
        f32 = a_f * smi_sequential.FLOAT32_REL if single else 0.0
        spread = sum(steps)
        err = spread + interp + a_f * f["nis"] + f32 + cut_alpha
        out.append(dict(
            layer=l, kind="sequential", value=a_f, error=err, q3=q_f,
            q3_error=sum(abs(math.expm1(e1["x"]) - math.expm1(e0["x"]))
                         for e0, e1 in zip(evs[:-1], evs[1:]))
            + (1 - q_f) * abs(cr[0] / s_r) * sum((o["x"] - o["x_eval"]) ** 2 for o in evs),
            values=[1.0 / e["mu"] for e in evs], q3_values=[-math.expm1(e["x"]) for e in evs],
            spread=spread, steps=steps,
            interpolation=interp, nishimori=f["nis"], float32=f32, cut=cut_alpha,
            slope_r=s_r, slope_mu=s_mu, mass=f["st"]["mass"], pairs=int(f["st"]["pairs"]),
            orders=[list(o) for o in orders],
            scan=[(q, st["r"][0], st["r"][1], st["mu1"], st["mu2"]) for q, st in pts],
            seconds=0.0,
            method=("root in q3 of mu_l - (1-q3) K3/q3 on the layer-3 SE branch (Q = diag(0, 0, "
                    "q3)); deterministic: omega_3 sinh-trapezoid x h lattice x 4D fibre "
                    "trapezoid lattice (anisotropic: dz1 in z_1, dz2 in z_2), orders (tau, "
                    f"dh/sqrt V, dz1, dz2, R) {[list(o) for o in orders]}"
                    + (", float32 exponentials" if single else "")
                    + "; error = |alpha(refined) - alpha(coarse)|"
                    + (" (outer rules and fibre lattice refined in turn, moduli added)" if split
                       else "") + " + root interpolation + alpha x "
                    "(relative Nishimori residual + float32 bound) + cut bounds")))
    secs = time.perf_counter() - t0
    first = min(out, key=lambda d: d["value"])
    for d in out:
        d["seconds"] = secs
        d["evaluations"] = len(seen)
        d["first"] = d is first
    return out
