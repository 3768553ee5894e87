"""State evolution, stability thresholds and generalisation error of deep tied attention
(sequence multi-index model, THEORY 2), by deterministic quadrature on the fibre of ``y``.

Supported: ``layers = 2``, ``tokens = 2`` (one row per layer), ``beta > 0``, skip ``c`` in [1e-4, 100] for
the weak thresholds and ``c >= 0.5`` for the sequential threshold and the SE (validated floors).

Coordinates (all integrals are Gaussian-weighted and smooth in them):

* ``y`` is equivalent to ``h = A(z_1) z_2`` up to a global sign (``aim_sym.smi.inversion``), so
  ``Z_out`` is taken as the density of the pair ``{h, -h}``:
  ``Z_out(h; omega, V) = sum_s int dz_1 N(z_1; omega_1, v_1) N(A(z_1)^{-1} s h; omega_2, v_2)
  / det A(z_1)``.  It differs from the density of ``y`` by the Jacobian ``|dh/dy|(y)``, which does
  not depend on ``omega`` or ``Q``: ``g_out`` and ``Q_hat`` are unchanged and ``Psi_out`` moves by
  a ``Q``-independent constant (we report ``phi`` relative to ``Q = 0``, which is convention-free).
* weak thresholds (Q = 0, :func:`stability_matrix`): rotated coordinates ``s = (z0 + z1)/sqrt 2``,
  ``d = (z0 - z1)/sqrt 2`` for z_1 and for h.  There ``A`` is upper triangular,
  ``[[1 + c, tau], [0, kappa]]`` with ``kappa = det A / (1 + c) in [c, 1 + c)``; ``kappa -> c``
  where the two softmax rows coincide (near d = 0, where ``kappa ~ c + beta d^2 / 2``), so the
  fibre integrand varies in d on the scale ``sqrt(2 c / beta)`` and the density of h in ``h_d``
  on the scale c.  Gauss-Hermite in the sums and sinh-mapped trapezoids in the differences
  (:func:`aim_sym.numerics.smi_fibre.rotated_z1_rule`, ``rotated_h_rule``) resolve both at
  every skip; the earlier tensor Gauss-Hermite rules (:func:`_weak_stats`, ``h`` for
  ``N(0, SIGMA_H^2)``) never see them and are right for c >= 0.5 only.  Errors: the change
  over three refinements.
* ``omega_l``: tensor Gauss-Hermite for ``N(0, Q_ll)``.

The sign symmetries ``z_l -> -z_l``, ``h -> -h`` and the token swap are used to halve each outer
grid, and make ``E[z | y] = 0`` exactly in the rule (so ``Q = 0`` is a fixed point, THEORY 2.2).

The sequential threshold itself is computed by :mod:`aim_sym.numerics.smi_sequential` (trapezoid
lattices for the fibre and for h, geometric convergence), for skip >= 0.5 (the validated floor,
:data:`aim_sym.numerics.smi_fibre.SKIP_FLOORS`); the Laplace-mixture branch statistics below
remain as a cross-check of its branch quantities.

Layer-2 branch near q2 -> 1 (Laplace-mixture engine, :func:`_stats_branch_v2`): the layer-2
posterior concentrates (V2 = 1 - q2 ~ 0.026 at the threshold).  Outer 6D rule in
(omega_2, true z_1, eta) with omega_2 in rotated coordinates (sum s, difference d): the layer-1
information scales as d^2/V2, so the integrand varies on the scale d ~ sqrt(V2) near d = 0 and d
gets a graded Gauss-Legendre rule (:func:`aim_sym.numerics.smi_fibre.graded_omega_rule`); the
old isotropic omega_2 rule missed this (0.5% in mu1).  eta enters through sqrt(V2) eta, so 4
nodes per axis suffice.  Inner (fibre over z_1): deterministic balance-heuristic mixture of the
prior and Laplace Gaussians at the Gauss-Newton modes of the posterior for +h (started at the
true z_1), -h (started at the logit inversion ``A(z_1) omega_2 = h``, linear in the softmax
entries) and at the true z_1, each symmetrised in z_1 -> -z_1 (the integrand is even) so one node
set per component suffices;
Gauss-Newton uses the symbolic fibre Jacobian.  Tested against a converged trapezoid rule at
single outer points (``tests/test_smi.py::FIBRE_REFS``); the Nishimori residual
E g^2 + E dg/domega measures the remaining inner error and enters the reported error bar.

Overlaps are diagonal, ``Q = diag(q_1, q_2)`` (layer 1 = first attention layer, layer 2 = last):
the off-diagonal ``Q_hat_12`` vanishes by the sign symmetry ``z_2 -> -z_2``.

Imports (a DAG): :mod:`~aim_sym.numerics.smi_fibre` (checks, rules, compiled pieces, fibre
geometry), :mod:`~aim_sym.numerics.smi_route_a` (route A sums) and
:mod:`~aim_sym.numerics.smi_oracles` (the seeded Monte Carlo routes, re-exported here) are the
base; the engines (:mod:`~aim_sym.numerics.smi_sequential`, ``smi_learned``, ``smi_branches``,
``smi_deep_branch``) build on it; this module is the entry on top of them (and
:mod:`~aim_sym.numerics.smi_amp`, whose GAMP runs report :func:`fixed_point`, sits above it).
"""

from __future__ import annotations

import math
import os
import time
from functools import lru_cache

import numpy as np

from . import smi_branches, smi_sequential
from .records import ConvergenceError, Estimate, bayes_optimal, require
from .smi_fibre import (
    attention_image,
    attention_inverse,
    check,
    check_skip_floor,
    fibre_jacobian,
    fibre_point,
    functions,
    gauss_newton_mode,
    gauss_newton_precision,
    graded_omega_rule,
    grid2,
    ratio_grid2,
    rotated_h_rule,
    rotated_z1_rule,
)
from .smi_oracles import (  # noqa: F401  (public aliases of the Monte Carlo oracles)
    cross_block_montecarlo,
    montecarlo_branch,
    montecarlo_stability,
)
from .smi_route_a import CHUNK, SIGMA_H
from .smi_route_a import q0_sums as _weak_sums
from .smi_route_a import stats as route_a_stats
from .smi_sequential import sequential_threshold  # noqa: F401  (public alias)


# ----------------------------------------------------------------------------- core sums
def _weak_stats(*, c, beta, n_h, n_z):
    """:func:`_weak_sums` on tensor Gauss-Hermite rules (z_1: order n_z; h: order n_h, ratio to
    N(h; 0, SIGMA_H^2 I) on the half plane h_0 > 0).  Accurate for skip c >= 0.5 only: at small c
    the integrands have features of width sqrt(c) in z_1 and c in h that these rules never see
    (:func:`_weak_stats_rotated` resolves them)."""
    z = grid2(n_z, 1.0, False)
    return _weak_sums(z, ratio_grid2(n_h, SIGMA_H), c=c, beta=beta)


def _weak_stats_rotated(*, c, beta, order):
    """:func:`_weak_sums` on the rotated rules of :mod:`aim_sym.numerics.smi_fibre`
    (``order = (n_hs, dt_h, n_s, dt_z)``): sinh-mapped trapezoids in the difference coordinates
    resolve kappa(z_1) = det A / (1 + c) -> c (width sqrt(2 c / beta) in z_1, c in h)."""
    n_hs, dt_h, n_s, dt_z = order
    return _weak_sums(rotated_z1_rule(n_s, dt_z, c, beta), rotated_h_rule(n_hs, dt_h, c),
                      c=c, beta=beta)


MIX = (0.2, 0.4, 0.4)  # prior component, +z1 mode, -z1 mode


def _outer_tensor(w, a, e):
    """Flattened 6D tensor product of three 2D rules (omega_2, true z_1, eta): nodes and weights."""
    (w0, w1, ww), (a0, a1, wa), (e0, e1, we) = w, a, e
    na, ne, nw = a0.size, e0.size, w0.size
    O0, O1 = np.repeat(w0, na * ne), np.repeat(w1, na * ne)
    Z0, Z1 = np.tile(np.repeat(a0, ne), nw), np.tile(np.repeat(a1, ne), nw)
    E0, E1 = np.tile(e0, nw * na), np.tile(e1, nw * na)
    Wt = np.repeat(ww, na * ne) * np.tile(np.repeat(wa, ne), nw) * np.tile(we, nw * na)
    return O0, O1, Z0, Z1, E0, E1, Wt


def _stats_branch(q2, *, c, beta, n_w, n_z, n_e, n_in, progress=None):
    """Layer-2 branch Q = diag(0, q2): ``K2 = E sum_m g_2m^2`` and
    ``mu1 = E ||Cov[z_1 | y, omega_2] - I||_F^2``, robust as q2 -> 1.

    Outer: true ``z_1 ~ N(0, I)``, ``omega_2 ~ N(0, q2 I)``, ``z_2 = omega_2 + sqrt(1-q2) eta``,
    ``h = A(z_1) z_2`` (6D tensor Gauss-Hermite; smooth integrand).  Inner (fibre over z_1):
    deterministic mixture quadrature with components ``N(0, I)`` and ``N(+-z_1, P^{-1})``,
    ``P = I + J^T J / v_2`` (``J`` the symbolic fibre Jacobian ``dz_2/dz_1``), each by tensor
    Gauss-Hermite, weights ``pi_k w_i f / q_mix`` (balance heuristic): exact in the limit and
    adapted to the sharp posterior when layer 2 is nearly known.
    """
    v2 = 1.0 - q2
    w0, w1, ww = grid2(n_w, math.sqrt(q2), True)
    a0, a1, wa = grid2(n_z, 1.0, True)
    e0, e1, we = grid2(n_e, 1.0, False)
    x0, x1, wx = grid2(n_in, 1.0, False)
    # outer tensor
    O0, O1, Z0, Z1, E0, E1, Wt = _outer_tensor((w0, w1, ww), (a0, a1, wa), (e0, e1, we))
    acc = dict(K2=0.0, mu1=0.0, weight=0.0, trcov2=0.0)
    step = max(1, CHUNK // (3 * x0.size * 8))
    nchunks = -(-O0.size // step)
    for k, s0 in enumerate(range(0, O0.size, step)):
        sl = slice(s0, s0 + step)
        o0, o1, z0, z1 = O0[sl, None], O1[sl, None], Z0[sl, None], Z1[sl, None]
        t0 = o0 + math.sqrt(v2) * E0[sl, None]
        t1 = o1 + math.sqrt(v2) * E1[sl, None]
        h0, h1 = attention_image(z0, z1, t0, t1, c, beta)
        P00, P01, P11 = gauss_newton_precision(fibre_jacobian(z0, z1, h0, h1, c, beta), 1.0, v2)
        # Cholesky P = R^T R, R = [[r00, r01], [0, r11]]; nodes z = m + R^{-1} x
        r00 = np.sqrt(P00)
        r01 = P01 / r00
        r11 = np.sqrt(P11 - r01**2)
        detR = r00 * r11
        u1 = x1 / r11
        u0 = (x0 - r01 * u1) / r00
        n = x0.size
        y0 = np.concatenate([np.broadcast_to(x0, (z0.shape[0], n)), z0 + u0, -z0 + u0], 1)
        y1 = np.concatenate([np.broadcast_to(x1, (z0.shape[0], n)), z1 + u1, -z1 + u1], 1)
        wq = np.concatenate([MIX[0] * np.broadcast_to(wx, (z0.shape[0], n)),
                             MIX[1] * np.broadcast_to(wx, (z0.shape[0], n)),
                             MIX[2] * np.broadcast_to(wx, (z0.shape[0], n))], 1)
        # mixture density at the nodes (normalised 2D Gaussians)
        g = lambda d0, d1: np.exp(-0.5 * (d0**2 + d1**2)) / (2 * math.pi)  # noqa: E731
        qm = MIX[0] * g(y0, y1)
        for sgn in (1.0, -1.0):
            d0, d1 = y0 - sgn * z0, y1 - sgn * z1
            qm = qm + MIX[1] * detR * g(r00 * d0 + r01 * d1, r11 * d1)
        Bi, det = attention_inverse(y0, y1, c, beta)
        u, v = fibre_point(Bi, h0, h1)       # A(y)^{-1} h
        base = -0.5 * (y0**2 + y1**2) - ((u**2 + v**2) + (o0**2 + o1**2)) / (2 * v2)
        x = (u * o0 + v * o1) / v2
        with np.errstate(under="ignore"):
            ep, em = np.exp(base + x), np.exp(base - x)
        f = wq / (qm * det * (2 * math.pi) ** 2 * v2)
        Sp, Dm = f * (ep + em), f * (ep - em)
        Z = Sp.sum(1)
        c00 = (Sp * y0 * y0).sum(1) / Z - 1
        c01 = (Sp * y0 * y1).sum(1) / Z
        c11 = (Sp * y1 * y1).sum(1) / Z - 1
        g0 = (Dm * u).sum(1) / Z - o0[:, 0]
        g1 = (Dm * v).sum(1) / Z - o1[:, 0]
        W = Wt[sl]
        acc["K2"] += W @ ((g0**2 + g1**2) / v2**2)
        acc["mu1"] += W @ (c00**2 + 2 * c01**2 + c11**2)
        acc["weight"] += W.sum()
        m0, m1 = (Dm * u).sum(1) / Z, (Dm * v).sum(1) / Z
        acc["trcov2"] += W @ ((Sp * (u**2 + v**2)).sum(1) / Z - m0**2 - m1**2)
        if progress:
            progress(k + 1, nchunks, "layer-2 branch quadrature")
    return acc


# ----------------------------------------------------------------------------- public API
WEAK_ORDERS = ((72, 96), (96, 128))  # (n_h, n_z) of the Gauss-Hermite rules (c >= 0.5 only)
# (n_hs, dt_h, n_s, dt_z) of the rotated rules (:func:`_weak_stats_rotated`), three refinements
WEAK_ROTATED_ORDERS = ((80, 0.15, 80, 0.15), (96, 0.125, 96, 0.125), (128, 0.09375, 128, 0.09375))
WEAK_SKIP_MIN = 1e-4     # validated against Monte Carlo (benchmarks/smi_small_skip.py)
WEAK_SKIP_MAX = 100.0


def _rotated_order(n: int) -> tuple:
    return (n, 12.0 / n, n, 12.0 / n)


def check_weak_skip(skip: float) -> None:
    """InputError unless ``WEAK_SKIP_MIN <= skip <= WEAK_SKIP_MAX`` (the validated range)."""
    require(WEAK_SKIP_MIN <= skip <= WEAK_SKIP_MAX, "skip",
            f"in [{WEAK_SKIP_MIN:g}, {WEAK_SKIP_MAX:g}] for the L = 2 weak thresholds (the range "
            "validated against Monte Carlo)", skip)


def stability_matrix(*, layers=2, tokens=2, skip=1.0, beta=1.0, order=None) -> dict:
    """The linear map F of THEORY 2.2 at Q = 0, on symmetric M in the basis (M11, M22, M12):
    F(M)_11 = lam1 M11, F(M)_22 = lam2 M22, F(M)_12 = lam12 M12 (block diagonal between layers:
    the cross covariances Cov[z_1, z_2 | y] vanish by the sign symmetry). Values are Estimates.

    Rules: :func:`_weak_stats_rotated` (sinh-mapped trapezoids in the difference coordinates of
    z_1 and h, resolving det A(z_1) -> c (1 + c) at every skip c), three refinements (``order``
    n selects n, n + 16, n + 48 nodes, step 12 / nodes).  Value: the finest rule; error: the sum
    of the two changes (covers a non-monotone approach, seen at large beta) plus the deviation
    of the finest rule's mass from 1 times the value."""
    check(layers, tokens, skip, beta)
    check_weak_skip(skip)
    orders = (WEAK_ROTATED_ORDERS if order is None
              else tuple(_rotated_order(order + k) for k in (0, 16, 48)))
    runs = [_weak_stats_rotated(c=skip, beta=beta, order=o) for o in orders]
    meth = ("rotated rules (Gauss-Hermite in the sums, sinh-mapped trapezoid in the differences "
            f"of z_1 and h), orders {orders[0]}, {orders[1]}, {orders[2]}")
    hi = runs[-1]
    dm = abs(hi["mass"] - 1.0)
    out = {k: Estimate(hi[k], abs(hi[k] - runs[1][k]) + abs(runs[1][k] - runs[0][k])
                       + dm * abs(hi[k]), meth) for k in hi}
    out["matrix"] = np.diag([hi["lam1"], hi["lam2"], hi["lam12"]])
    return out


BRANCH_ORDERS = ((6, 8, 8, 8), (8, 10, 10, 10))  # (n_omega, n_z1, n_eta, n_inner)
# sequential threshold (branch engine v2): ((n_s, n_d) omega_2 rule, n_z1, n_eta, n_inner,
# n_prior).  eta is smooth on the scale 1/sqrt(V2), so n_eta stays low.
SEQ_ORDERS = (((4, 8), 8, 4, 8, 8), ((6, 12), 8, 4, 10, 10), ((6, 16), 10, 4, 12, 12))


def _branch(q2, c, beta, o):
    return _stats_branch(q2, c=c, beta=beta, n_w=o[0], n_z=o[1], n_e=o[2], n_in=o[3])


def _branch_v2(q2, c, beta, o):
    # eta enters through sqrt(V2) eta: 4 nodes per axis suffice for q2 >= 0.95 (checked: 6
    # moves mu1 by 6e-4 relative at q2 = 0.974); below, the eta rule is raised by 4
    n_e = o[2] if q2 >= 0.95 else o[2] + 4
    return _stats_branch_v2(q2, c=c, beta=beta, n_w=o[0], n_z=o[1], n_e=n_e, n_in=o[3],
                            n_p=o[4])


def weak_thresholds(*, layers: int = 2, tokens: int = 2, skip: float = 1.0, beta: float = 1.0,
                    order: int | None = None, progress=None,
                    sequential: bool = True, digits: int = 4) -> list[dict]:
    """Weak-recovery thresholds ``1/lambda_l`` of each layer at ``Q = 0`` and (unless
    ``sequential=False``) the sequential threshold of layer 1 once layer 2 is learned.  Each dict:
    layer, kind ("weak" or "sequential"), value, error, method, seconds (and, for sequential, q2
    at the threshold).  ``digits``: accuracy asked of the sequential threshold (1..8, see
    :data:`aim_sym.numerics.smi_sequential.SEQ_DIGITS`)."""
    check(layers, tokens, skip, beta)
    check_weak_skip(skip)
    if sequential:
        check_skip_floor(skip, "sequential")
    if order is not None:
        require(isinstance(order, (int, np.integer)) and 8 <= order <= 400 and order % 2 == 0,
                "order", "an even integer in [8, 400]", order)
    nsteps = 2 if sequential else 1
    t = time.perf_counter()
    F = stability_matrix(layers=layers, tokens=tokens, skip=skip, beta=beta, order=order)
    dt = time.perf_counter() - t
    if progress:
        progress(1, nsteps, "weak thresholds")
    out = []
    for layer, key in ((1, "lam1"), (2, "lam2")):
        e = F[key]
        out.append(dict(layer=layer, kind="weak", value=1.0 / e.value,
                        error=e.error / e.value**2, method=e.method, seconds=dt))
    if sequential:
        t = time.perf_counter()
        seq = smi_sequential.sequential_threshold(skip=skip, beta=beta, digits=digits)
        if progress:
            progress(2, 2, "sequential threshold")
        rec = dict(layer=1, kind="sequential", value=seq["value"], error=seq["error"],
                   method=seq["method"], q2=seq["q2"], seconds=time.perf_counter() - t)
        if seq.get("note"):
            rec["note"] = seq["note"]
        out.append(rec)
    return out


# ----------------------------------------------------------------------------- SE
def _psi_rel(q2, c, beta, order=(10, 32, 40)):
    """E log Z_out(Q = diag(0, q2)) - E log Z_out(Q = 0) (convention-free) and K2, route A.
    Accurate while the posterior is broad (3.5e-7 from the lattice rule at q2 = 0.1, 7e-5 at
    0.3) but biased at large q2 (1.799 against 1.659 at q2 = 0.92), like the K2 of the same
    rules: used below q2 = 0.1 only (:func:`_layer2_point_small`)."""
    s = route_a_stats(0.0, q2, c=c, beta=beta, n_w1=2, n_w2=order[0], n_h=order[1], n_z=order[2],
               want_psi=True)
    s0 = route_a_stats(0.0, 0.0, c=c, beta=beta, n_w1=2, n_w2=2, n_h=order[1], n_z=order[2],
                want_psi=True)
    return s["psi"] - s0["psi"], s


def fixed_point(*, alpha, layers=2, tokens=2, skip=1.0, beta=1.0, init=None,
                layer2=True, progress=None) -> dict:
    """Bayes-optimal SE fixed point (THEORY 2.1) over the whole alpha range.

    * ``alpha >= 1``: perfect recovery ``Q = I`` (:func:`aim_sym.numerics.smi_branches.recovery_point`;
      stable iff alpha > 1 by the small-V analysis);
    * else the layer-2 branch ``Q = diag(0, q2)`` (:func:`layer2_point`; ``Q = 0`` below the
      layer-2 weak threshold); if its layer-1 direction is unstable, the both-learned branch
      (:func:`aim_sym.numerics.smi_branches.learned_point`, Newton from ``init`` = (q1, q2), default a
      guess) and the stable point of largest ``phi`` is returned.  ``layer2=False`` skips the
      layer-2 point (for a caller that knows it is unstable: :func:`se_curve` above the first
      both-learned point).

    Record: alpha, Q (diagonal), Q_hat, error (per entry), e_gen (plug-in estimator, THEORY
    2.4), e_gen_error, phi (relative to Q = 0), phi_error, branch ("Q = 0", "layer 2 (q1 = 0)",
    "both learned", "perfect recovery"), stable, eigenvalue (the critical eigenvalue of the SE
    map's Jacobian: layer-1 direction on the layer-2 branch, largest |.| otherwise), note (why
    a value is NaN: phi at alpha = 1 exactly)."""
    check(layers, tokens, skip, beta, alpha)
    check_skip_floor(skip, "sequential")
    if init is not None:
        require(len(init) == 2 and all(0 < float(q) < 1 for q in init), "init",
                "a pair of overlaps in (0, 1)", init)
    if alpha >= 1:
        return smi_branches.recovery_point(alpha=alpha, skip=skip, beta=beta)
    if not layer2:
        require(init is not None, "init", "given when layer2=False", init)
        return smi_branches.learned_point(alpha=alpha, skip=skip, beta=beta, init=init,
                                          progress=progress)
    base = layer2_point(alpha=alpha, skip=skip, beta=beta)
    if base["stable"]:
        return base
    if init is None:
        init = (min(0.9, max(0.05, 2.5 * (alpha - 0.7))), max(base["Q"][1], 0.975))
    try:
        cand = [smi_branches.learned_point(alpha=alpha, skip=skip, beta=beta, init=init,
                                           progress=progress), base]
    except ConvergenceError as e:      # keep the (unstable) layer-2 point and say why
        base["note"] = f"both-learned branch not found: {e}"
        return base
    return bayes_optimal(cand) or cand[0]


def _layer2_point_small(*, alpha, skip, beta, lam2) -> dict:
    """Layer-2 point with q2 < 0.1 (posterior broad): Brent with the Gauss-Hermite branch rule
    :func:`_stats_branch`, error ``|q2 - T_refined(q2)| / (1 - slope)`` from the refined order."""
    lo = BRANCH_ORDERS[0]

    def resid(q):
        return q - (1 - q) * alpha * _branch(q, skip, beta, lo)["K2"]

    a, b = 1e-6, 0.15                 # 0.15: the two rules differ by ~0.2% near q2 = 0.1
    fa, fb = resid(a), resid(b)
    if fa * fb > 0:
        raise ConvergenceError("layer-2 point (q2 < 0.1) not bracketed", last_iterate=(a, b),
                               residual=(fa, fb))
    from scipy import optimize

    q2 = optimize.brentq(resid, a, b, xtol=1e-10, maxiter=60)
    s_lo, s_hi = _branch(q2, skip, beta, lo), _branch(q2, skip, beta, BRANCH_ORDERS[1])
    d = 1e-3 * q2
    slope = 1 - (resid(q2 + d) - resid(q2 - d)) / (2 * d)      # T'(q2), T(q) = q - resid(q)
    qh = alpha * s_hi["K2"]
    err = abs(q2 - qh / (1 + qh)) / max(abs(1 - slope), 1e-3)
    mu1, K2 = s_lo["mu1"], s_lo["K2"]
    qhat2 = alpha * K2
    psi, _ = _psi_rel(q2, skip, beta)
    psi_lo = _psi_rel(q2, skip, beta, order=(8, 24, 32))[0]
    phi = -q2 * qhat2 / 2 + qhat2 / 2 - math.log1p(qhat2) / 2 + alpha * psi
    e_gen, e_err = smi_branches.egen_estimate(0.0, q2, skip=skip, beta=beta, dq=(0.0, err))
    return dict(alpha=float(alpha), Q=[0.0, float(q2)], Q_hat=[0.0, float(qhat2)],
                error=[0.0, float(err)], e_gen=e_gen, e_gen_error=e_err, phi=float(phi),
                phi_error=float(alpha * abs(psi - psi_lo)), branch="layer 2 (q1 = 0)",
                stable=bool(alpha * mu1 < 1), eigenvalue=float(alpha * mu1),
                note="q2 < 0.1: Gauss-Hermite branch rule")


# lattice orders (tau, dh, dz) of numerics.smi_sequential.branch_stats: solve, refine (rungs 2
# and 3 of its SEQ_LADDER; at alpha = 0.6 q2 = 0.923709 +- 0.00017 in 18 s, the previous pair
# ((0.3, 1.9, 0.2), (0.2, 1.5, 0.15)) gave 0.923712 +- 0.00017 in 62 s)
LAYER2_ORDERS = ((0.4, 1.9, 0.22), (0.3, 1.5, 0.2))
LAYER2_SCAN = (0.1, 0.5, 0.8, 0.9, 0.95, 0.975, 0.99, 0.997)


def layer2_point(*, alpha, skip=1.0, beta=1.0, orders=LAYER2_ORDERS, workers=None) -> dict:
    """SE fixed point on the branch Q = diag(0, q2) (layer 1 unlearned).

    On the branch ``alpha(q2) = q2 / ((1 - q2) K2(q2))`` rises from ``1/lambda_2`` (THEORY 2.1);
    ``q2`` solves ``alpha(q2) = alpha`` (scan, then Brent's method) with the lattice quadrature of
    :mod:`aim_sym.numerics.smi_sequential` (trapezoid lattices in the fibre and in h, sinh rule in
    omega_2; every rule refined between the two orders). ``q2 = 0`` below the layer-2 weak
    threshold; roots below q2 = 0.1 use :func:`_layer2_point_small`. Error on q2: the shift of
    the root to the refined order (one evaluation, linearised with the secant slope of
    alpha(q2)) plus the Nishimori residual propagated the same way. The layer-1 direction is
    stable iff ``alpha mu1(q2) < 1`` (``eigenvalue``).
    Same record as :func:`fixed_point`."""
    check(2, 2, skip, beta, alpha)
    check_skip_floor(skip, "sequential")

    def stats(q, o):
        return smi_sequential.branch_stats(q, c=skip, beta=beta, n_w=o[0], dh=o[1], dz=o[2],
                                           workers=workers or min(2, os.cpu_count() or 1))

    lam2 = 1.0 / weak_threshold_layer(2, skip, beta)
    note = ""
    if alpha * lam2 <= 1.0:
        q2 = 0.0
        err = 0.0
        mu1 = stability_matrix(skip=skip, beta=beta)["lam1"].value
        K2 = 0.0
    else:
        seen: dict[float, tuple[float, dict]] = {}

        def f(q):
            st = stats(q, orders[0])
            la = math.log(q / ((1 - q) * st["K2"]))
            seen[q] = (la, st)
            return la - math.log(alpha)

        # the lattice rule needs q2 >= 0.1 (its outer mass drifts below); there the posterior is
        # broad and the Gauss-Hermite branch rule of :func:`_stats_branch` is accurate
        if f(LAYER2_SCAN[0]) > 0:
            return _layer2_point_small(alpha=alpha, skip=skip, beta=beta, lam2=lam2)
        lo, hi = LAYER2_SCAN[0], None
        for q in LAYER2_SCAN[1:]:
            if f(q) > 0:
                hi = q
                break
            lo = q
        if hi is None:
            raise ConvergenceError("layer-2 point above q2 = 0.997 (beyond the lattice rule)",
                                   last_iterate=lo, residual=seen[lo][0] - math.log(alpha))
        from scipy import optimize

        q2 = optimize.brentq(f, lo, hi, xtol=1e-7, rtol=1e-10, maxiter=60)
        if q2 not in seen:
            f(q2)
        la2 = seen[q2][0]
        near = sorted((abs(q - q2), q) for q in seen if q != q2)[0][1]
        slope = (seen[near][0] - la2) / (near - q2)               # d log alpha / d q2
        ref = stats(q2, orders[1])
        la_ref = math.log(q2 / ((1 - q2) * ref["K2"]))
        nish = abs(ref["nishimori"]) / ref["K2"]
        err = (abs(la_ref - la2) + nish) / abs(slope)
        mu1, K2 = ref["mu1"], ref["K2"]
        if abs(ref["mass"] - 1) > 1e-4:
            note = f"outer mass {ref['mass']:.6f}"
    qhat2 = alpha * K2
    psi = psi_lo = psi0_err = 0.0
    if q2 > 0:      # E log Z_out on the lattice rule, relative to Q = 0 (route A is exact there)
        psi0, psi0_err = smi_branches.psi_zero(skip, beta)
        psi, psi_lo = ref["psi"] - psi0, seen[q2][1]["psi"] - psi0
    phi = -q2 * qhat2 / 2 + qhat2 / 2 - math.log1p(qhat2) / 2 + alpha * psi
    e_gen, e_err = smi_branches.egen_estimate(0.0, q2, skip=skip, beta=beta, dq=(0.0, err))
    lam = float(alpha * (mu1 if q2 > 0 else max(mu1, lam2)))
    return dict(alpha=float(alpha), Q=[0.0, float(q2)], Q_hat=[0.0, float(qhat2)],
                error=[0.0, float(err)], e_gen=e_gen, e_gen_error=e_err, phi=float(phi),
                phi_error=float(alpha * (abs(psi - psi_lo) + psi0_err)),
                branch="layer 2 (q1 = 0)" if q2 > 0 else "Q = 0",
                stable=bool(alpha * mu1 < 1), eigenvalue=lam, note=note)


@lru_cache(maxsize=32)
def weak_threshold_layer(layer, skip, beta):
    F = stability_matrix(skip=skip, beta=beta)
    return 1.0 / F["lam1" if layer == 1 else "lam2"].value


def se_curve(*, alphas, layers=2, tokens=2, skip=1.0, beta=1.0, progress=None) -> list[dict]:
    """SE along ``alphas`` (see :func:`fixed_point`): per alpha its record plus ``seconds``.
    On the both-learned branch each Newton solve starts from the previous alpha's point."""
    check(layers, tokens, skip, beta)
    check_skip_floor(skip, "sequential")
    alphas = [float(a) for a in alphas]
    for a in alphas:
        require(np.isfinite(a) and a >= 0, "alpha", ">= 0", a)
    out, init, prev, last_q = [], None, None, None
    for k, a in enumerate(alphas):
        t = time.perf_counter()
        # above a stable both-learned point the layer-2 point stays unstable (alpha mu1 grows)
        l2 = not (init is not None and prev is not None and a > prev)
        try:
            r = fixed_point(alpha=a, layers=layers, tokens=tokens, skip=skip, beta=beta,
                            init=init, layer2=l2, progress=progress)
        except ConvergenceError:
            if l2:
                raise
            r = fixed_point(alpha=a, layers=layers, tokens=tokens, skip=skip, beta=beta,
                            progress=progress)      # from the default guess, with the layer-2 point
        r.pop("detail", None)
        r["seconds"] = time.perf_counter() - t
        learned = r["branch"] == "both learned" and r["stable"]
        if learned and prev is not None and init is not None and k + 1 < len(alphas):
            # secant predictor for the next Newton start: linear in q1, in log(1 - q2) (V2
            # shrinks geometrically towards alpha = 1; linear in q2 overshot at alpha = 0.95)
            t_ = (alphas[k + 1] - a) / (a - prev)
            q1n = r["Q"][0] + t_ * (r["Q"][0] - last_q[0])
            v2n = (1 - r["Q"][1]) * ((1 - r["Q"][1]) / (1 - last_q[1])) ** t_
            init = (float(np.clip(q1n, 0.01, 0.9999)), float(np.clip(1 - v2n, 0.01, 0.9999)))
        elif learned:
            init = tuple(r["Q"])
        else:
            init = None
        prev, last_q = (a, r["Q"]) if learned else (None, None)
        out.append(r)
        if progress:
            progress(k + 1, len(alphas), f"alpha = {a:g} done ({r['branch']}, "
                     f"{r['seconds']:.0f} s)")
    return out


def zout_mp(h, om, v, nodes, *, c=1.0, beta=1.0):
    """``Z_out`` and the posterior-mean formula for ``g_out`` at mpmath precision on a fixed
    z_1 rule ``nodes = [(z1_0, z1_1, weight), ...]`` (the identity g = d log Z / d omega is exact
    for any fixed rule).  ``om = (omega_1 (2), omega_2 (2))``, ``v = (V_11, V_22)``."""
    import mpmath as mp

    f = functions(2, "mpmath")["attention_inverse"]
    Z = mp.mpf(0)
    Ez = [mp.mpf(0)] * 4
    for z0, z1, w in nodes:
        a00, a01, a10, a11, det = f(z0, z1, c, beta)
        pr = mp.exp(-((z0 - om[0]) ** 2 + (z1 - om[1]) ** 2) / (2 * v[0])) / (2 * mp.pi * v[0])
        for s in (1, -1):
            u, t = (s * x for x in fibre_point(((a00, a01), (a10, a11)), h[0], h[1]))
            p = w * pr * mp.exp(-((u - om[2]) ** 2 + (t - om[3]) ** 2) / (2 * v[1])) / (
                2 * mp.pi * v[1] * det)
            Z += p
            for k, val in enumerate((z0, z1, u, t)):
                Ez[k] += p * val
    g = [(Ez[k] / Z - om[k]) / v[k // 2] for k in range(4)]
    return Z, g


def _check_gout_fd(*, skip, beta, dps=50) -> float:
    """Max |central FD of log Z_out (step 1e-20, 50 digits) - g_out| over omega entries."""
    import mpmath as mp

    with mp.workdps(dps):
        x = [mp.mpf(t) for t in (-2.2, -1.1, 0.0, 1.3, 2.4)]
        nodes = [(a, b, mp.mpf(1) / 25) for a in x for b in x]
        worst = mp.mpf(0)
        for h, om, v in [((0.7, -0.4), (0.3, -0.2, 0.5, 0.1), (0.8, 0.6)),
                         ((1.5, 0.9), (-0.6, 0.4, -0.2, 0.9), (0.5, 0.3))]:
            h, om, v = ([mp.mpf(t) for t in a] for a in (h, om, v))
            _, g = zout_mp(h, om, v, nodes, c=mp.mpf(skip), beta=mp.mpf(beta))
            eps = mp.mpf(10) ** -20
            for k in range(4):
                op, omn = list(om), list(om)
                op[k] += eps
                omn[k] -= eps
                fd = (mp.log(zout_mp(h, op, v, nodes, c=skip, beta=beta)[0])
                      - mp.log(zout_mp(h, omn, v, nodes, c=skip, beta=beta)[0])) / (2 * eps)
                worst = max(worst, abs(fd - g[k]))
        return float(worst)


CHECK_ORDER = (10, 32, 24)  # (n_omega2, n_h, n_z1) of route A for the Q != 0 identities


def nishimori_stationarity(q2=0.4, *, skip=1.0, beta=1.0, order=CHECK_ORDER, d=2e-3) -> dict:
    """Identities at ``Q = diag(0, q2)`` with route A
    (:func:`aim_sym.numerics.smi_route_a.stats`):

    * Nishimori ``E sum_m g_2m^2 = -E sum_m dg_2m/domega_2m = (2 - E tr Cov[z_2|y,omega]/V)/V``
      (pointwise in omega; exact for the discretised z_1 measure, so only the h rule limits it);
    * stationarity ``dPsi_out/dQ_22 = K2 / 2`` (central difference of ``E log Z_out`` in q2, step
      ``d``; limited by the omega and h rules).
    Returns relative residuals and the quantities."""
    f = lambda q: route_a_stats(0.0, q, c=skip, beta=beta, n_w1=2, n_w2=order[0],  # noqa: E731
                         n_h=order[1], n_z=order[2], want_psi=True)
    s = f(q2)
    v = 1 - q2
    nis = (2 - s["trcov2"] / v) / v
    fd = (f(q2 + d)["psi"] - f(q2 - d)["psi"]) / (2 * d)
    return dict(K2=s["K2"], K2_nishimori=nis, nishimori=abs(s["K2"] - nis) / s["K2"],
                dpsi=fd, stationarity=abs(fd - s["K2"] / 2) / (s["K2"] / 2), K1=s["K1"],
                K12=s["K12"], mass=s["mass"])


def run_checks(*, layers=2, tokens=2, skip=1.0, beta=1.0) -> list[dict]:
    """Identity checks of the SMI engine (THEORY 4), each a dict
    ``{name, passed, detail, value, tolerance}``; about 20-40 s."""
    check(layers, tokens, skip, beta)
    out = []

    def add(name, value, tol, detail):
        out.append(dict(name=name, passed=bool(abs(value) <= tol), detail=detail,
                        value=float(value), tolerance=float(tol)))

    fd = _check_gout_fd(skip=skip, beta=beta)
    add("g_out = d log Z_out / d omega", fd, 1e-25,
        f"max |central difference (step 1e-20, 50 digits) - g_out| = {fd:.1e}")
    s0 = route_a_stats(0.0, 0.0, c=skip, beta=beta, n_w1=2, n_w2=2, n_h=16, n_z=20)
    ns = nishimori_stationarity(0.4, skip=skip, beta=beta)
    ez = max(abs(s0["K2"]), abs(ns["K1"]), abs(ns["K12"]))
    add("E[z | y] = 0", ez, 1e-12,
        f"max(E|g_2|^2 at Q=0, E g_1 g_1, E g_1 g_2 at Q=diag(0,0.4)) = {ez:.1e}")
    add("Nishimori E g g^T = -E dg/domega", ns["nishimori"], 1e-4,
        f"layer 2 at Q=diag(0,0.4): E|g|^2 = {ns['K2']:.8f}, -E dg/domega = "
        f"{ns['K2_nishimori']:.8f}")
    add("free-entropy stationarity", ns["stationarity"], 0.015,
        f"dPsi/dQ22 = {ns['dpsi']:.6f} vs Qhat/(2 alpha) = {ns['K2'] / 2:.6f} at Q=diag(0,0.4) "
        f"(route A, orders {CHECK_ORDER}; residual is omega/h quadrature error)")
    cr = cross_block_montecarlo(skip=skip, beta=beta)
    add("F block diagonal (Cov[z_1, z_2 | y] = 0)", cr.value, 4 * cr.error,
        f"E_y ||Cov[z_1,z_2|y]||_F^2 = {cr.value:.2e} +- {cr.error:.1e} ({cr.method}); "
        "tolerance 4 SE")
    return out


# ----------------------------------------------------------------------------- branch engine v2
def _start_from_logits(h0, h1, o0, o1, c, beta, clip=0.02):
    """z_1 solving A(z_1) omega = h (linear in the softmax entries), clipped into the domain."""
    dl = o0 - o1
    dl = np.where(np.abs(dl) < 1e-9, 1e-9, dl)
    sa = np.clip((h0 - o1 - c * o0) / dl, clip, 1 - clip)
    sb = np.clip((h1 - o0 - c * o1) / (-dl), clip, 1 - clip)
    m = np.maximum(0.0, 1 + clip - sa - sb) / 2
    sa, sb = np.minimum(sa + m, 1 - clip), np.minimum(sb + m, 1 - clip)
    a, b = np.log(sa / (1 - sa)), np.log(sb / (1 - sb))
    d = np.sqrt((a + b) / beta)
    return a / (beta * d), -b / (beta * d)


def _inner_v2(h0, h1, o0, o1, zs0, zs1, v2, c, beta, n_in, n_p, pi0=0.2, at_truth=True):
    """Posterior moments of the fibre integral for a batch of outer points (1D arrays).

    Deterministic mixture (balance-heuristic) rule in z_1: the prior N(0, I) and, for each sign
    of h, the Laplace Gaussian N(z*, P^{-1}) at the Gauss-Newton mode z* (started from the true
    z_1 ``zs`` for +h and from the logit inversion for -h).  All densities are symmetrised in
    z_1 -> -z_1 (the integrand is even), so only one node set per component is needed.
    Returns Z-normalised ``(c00, c01, c11, m0, m1, n2)``: Cov[z_1] - I entries, E[z_2] and
    E|z_2|^2 under the posterior."""
    X0, X1, WX = grid2(n_in, 1.0, False)
    p0, p1, wp = grid2(n_p, 1.0, True)
    col = lambda a: a[:, None]  # noqa: E731
    comps = []
    starts = [(1.0, (zs0, zs1), 6), (-1.0, _start_from_logits(-h0, -h1, o0, o1, c, beta), 6)]
    if at_truth:
        starts.append((1.0, (zs0, zs1), 0))
    for sg, (s0, s1), its in starts:
        m0, m1, P00, P01, P11 = gauss_newton_mode(s0, s1, sg * h0, sg * h1, m1=(0.0, 0.0),
                                                  v1=1.0, m2=(o0, o1), r=0.0, v2=v2, c=c,
                                                  beta=beta, iters=its)
        # Cholesky of P = R^T R; nodes m + R^{-1} x
        r00 = np.sqrt(P00)
        r01 = P01 / r00
        r11 = np.sqrt(np.maximum(P11 - r01**2, 1e-300))
        comps.append((m0, m1, r00, r01, r11))
    n = h0.size
    Y0 = [np.broadcast_to(p0, (n, p0.size))]
    Y1 = [np.broadcast_to(p1, (n, p1.size))]
    WQ = [np.broadcast_to(pi0 * wp, (n, wp.size))]
    pk = (1 - pi0) / len(comps)
    for m0, m1, r00, r01, r11 in comps:
        u1 = X1 / col(r11)
        u0 = (X0 - col(r01) * u1) / col(r00)
        Y0.append(col(m0) + u0)
        Y1.append(col(m1) + u1)
        WQ.append(np.broadcast_to(pk * WX, (n, WX.size)))
    Y0, Y1, WQ = np.concatenate(Y0, 1), np.concatenate(Y1, 1), np.concatenate(WQ, 1)
    with np.errstate(under="ignore"):
        q = pi0 * np.exp(-0.5 * (Y0**2 + Y1**2)) / (2 * math.pi)
        for m0, m1, r00, r01, r11 in comps:
            dens = 0.0
            for sgz in (1.0, -1.0):
                d0, d1 = Y0 - sgz * col(m0), Y1 - sgz * col(m1)
                e0 = col(r00) * d0 + col(r01) * d1
                e1 = col(r11) * d1
                dens = dens + 0.5 * np.exp(-0.5 * (e0**2 + e1**2))
            q = q + pk * dens * col(r00 * r11) / (2 * math.pi)
    Bi, det = attention_inverse(Y0, Y1, c, beta)
    H0, H1, O0, O1 = col(h0), col(h1), col(o0), col(o1)
    u, w = fibre_point(Bi, H0, H1)
    base = -0.5 * (Y0**2 + Y1**2) - ((u**2 + w**2) + (O0**2 + O1**2)) / (2 * v2)
    x = (u * O0 + w * O1) / v2
    with np.errstate(under="ignore", over="ignore"):
        f = WQ / (q * det)
        ep, em = f * np.exp(base + x), f * np.exp(base - x)
    Sp, Dm = ep + em, ep - em
    Z = Sp.sum(1)
    c00 = (Sp * Y0 * Y0).sum(1) / Z - 1
    c01 = (Sp * Y0 * Y1).sum(1) / Z
    c11 = (Sp * Y1 * Y1).sum(1) / Z - 1
    m0 = (Dm * u).sum(1) / Z
    m1 = (Dm * w).sum(1) / Z
    n2 = (Sp * (u**2 + w**2)).sum(1) / Z
    return c00, c01, c11, m0, m1, n2


def _stats_branch_v2(q2, *, c, beta, n_w, n_z, n_e, n_in, n_p, progress=None):
    """Layer-2 branch Q = diag(0, q2) with the mode-adapted inner rule :func:`_inner_v2`.

    Outer: 6D tensor Gauss-Hermite in (omega_2, true z_1, eta) (each half-grid by the sign
    symmetries), ``z_2 = omega_2 + sqrt(V) eta``, ``h = A(z_1) z_2``.  Returns ``K2``, ``mu1``,
    ``trcov2`` (E tr Cov[z_2|y,omega]) and ``nishimori`` = ``K2 - (2 - trcov2/V)/V``."""
    v2 = 1.0 - q2
    w0, w1, ww = graded_omega_rule(n_w, q2)
    a0, a1, wa = grid2(n_z, 1.0, True)
    e0, e1, we = grid2(n_e, 1.0, False)
    O0, O1, Z0, Z1, E0, E1, Wt = _outer_tensor((w0, w1, ww), (a0, a1, wa), (e0, e1, we))
    H0, H1 = attention_image(Z0, Z1, O0 + math.sqrt(v2) * E0, O1 + math.sqrt(v2) * E1, c, beta)
    nodes = n_p * n_p // 2 + 3 * n_in * n_in
    step = max(1, CHUNK // (4 * nodes))
    acc = dict(K2=0.0, mu1=0.0, trcov2=0.0, weight=0.0)
    nch = -(-O0.size // step)
    for k, s0 in enumerate(range(0, O0.size, step)):
        sl = slice(s0, s0 + step)
        c00, c01, c11, m0, m1, n2 = _inner_v2(H0[sl], H1[sl], O0[sl], O1[sl], Z0[sl], Z1[sl],
                                              v2, c, beta, n_in, n_p)
        W = Wt[sl]
        acc["K2"] += W @ (((m0 - O0[sl]) ** 2 + (m1 - O1[sl]) ** 2) / v2**2)
        acc["mu1"] += W @ (c00**2 + 2 * c01**2 + c11**2)
        acc["trcov2"] += W @ (n2 - m0**2 - m1**2)
        acc["weight"] += W.sum()
        if progress:
            progress(k + 1, nch, "layer-2 branch quadrature")
    acc["nishimori"] = acc["K2"] - (2 - acc["trcov2"] / v2) / v2
    return acc
