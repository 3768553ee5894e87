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

Deterministic route (:func:`branch_stats_l3`): the depth-general lattice kernel
:func:`aim_sym.numerics.smi_sequential.branch_stats` at ``layers = 3``: ``omega_3`` by the
rotated sinh-trapezoid :func:`aim_sym.numerics.smi_sequential.omega_rule`; ``h`` given
``omega_3`` by a trapezoid lattice of spacing ``dh sqrt(V)`` on the attention image box of
``omega_3`` padded by ``H_PAD`` standard deviations of the blur ``sqrt(V) M eta``
(:func:`aim_sym.numerics.smi_sequential.h_lattice`); the fibre over ``(z_1, z_2)`` by a 4D
trapezoid lattice of spacings ``dz1`` (in ``z_1``) and ``dz2`` (in ``z_2``) on the ball
``|z| <= R`` restricted to ``z_1,0 >= 0, z_2,0 >= 0`` (weights x 4 by the two sign symmetries).
Node features (``M^{-1}`` from the symbolic fibre, prior, ``det M``) are computed once; the
exponent is a bilinear form (outer features) x (node features), evaluated in cache-sized
blocks of 8 outer points x 8192 nodes (each node chunk with its own row shift) with float32
exponentials, and the omega_3 nodes are spread over forked workers.  Monte Carlo route:
:func:`montecarlo_branch_l3`.  Results: benchmarks/RESULTS.md.

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

import math
import time

import numpy as np

from . import smi_oracles, smi_sequential
from .records import ConvergenceError, require, standard_error
from .smi_fibre import check_skip_floor, inverse_columns

RADIUS = smi_sequential.DEEP_R   # 4D fibre lattice radius: prior mass (1 + R^2/2) exp(-R^2/2) outside


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


def branch_stats_l3(q3: float, *, skip: float = 1.0, beta: float = 1.0, tau: float = 0.5,
                    dh: float = 2.8, dz: float = 0.3, radius: float = RADIUS,
                    dz2: float | None = None, single: bool = False, workers: int = 1,
                    wcut: float = smi_sequential.OMEGA_WCUT) -> dict:
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
    require(3.0 <= radius <= 9.0, "radius", "in [3, 9]", radius)
    # sinh-map scale min(sqrt V, sqrt q3): the omega_3 features have width sqrt(V) (q3 -> 1),
    # the Gaussian itself width sqrt(q3) (q3 -> 0)
    st = smi_sequential.branch_stats(
        q3, c=skip, beta=beta, n_w=float(tau), dh=dh, dz=dz, workers=workers, single=single,
        layers=3, dz2=dz if dz2 is None else dz2, radius=radius,
        kappa=min(1.0, math.sqrt(q3 / (1.0 - q3))), wcut=wcut, blend=False)
    return st | dict(order=(tau, dh, dz, dz if dz2 is None else dz2, radius))


# ----------------------------------------------------------------------------- Monte Carlo
def montecarlo_branch_l3(q3: float, *, skip: float = 1.0, beta: float = 1.0,
                         samples: int = 4000, inner: int = 2000, seed: int = 0) -> dict:
    """Seeded Monte Carlo at ``Q = diag(0, 0, q3)``: :func:`aim_sym.numerics.smi_oracles.
    montecarlo_branch` at ``layers = 3`` (``mu1``, ``mu2``, ``K3``, ``cross``, ``trcov3``,
    ``nishimori``, ``resid1``, ``resid2``), with this module's input checks."""
    _check_channel(skip, beta)
    return smi_oracles.montecarlo_branch(q3, layers=3, skip=skip, beta=beta, samples=samples,
                                         inner=inner, seed=seed)


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
        adj = smi_oracles.branch_samples(q, layers=3, skip=skip, beta=beta, samples=scan_samples,
                                         inner=inner, seed=seed + 7919)
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
            vals[q], half[q] = (smi_oracles.branch_samples(q, layers=3, skip=skip, beta=beta,
                                                           samples=samples, inner=k, seed=seed)
                                for k in (inner, max(20, inner // 2)))
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
                     + (1 - q_f) / q_f * (cut["K"] + cut["K_tail"])) * a_f**2
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
