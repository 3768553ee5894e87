"""Deep tied attention (L = 2, M = 2): state evolution with both layers learned (THEORY 2.1).

The engine :func:`branch_stats` computes, at a general diagonal overlap ``Q = diag(q1, q2)``,

* ``K_l = E sum_m g_lm^2`` (so ``Q_hat_ll = alpha K_l``), ``K12 = E sum_m g_1m g_2m`` (zero by
  the sign symmetry ``z_2 -> -z_2``: ``Q`` stays diagonal),
* the Nishimori partners ``(2 - E tr Cov[z_l | y, omega] / V_l) / V_l`` (equal to ``K_l`` for the
  exact integrals: their difference measures the inner-rule error),
* ``psi = E log Z_out`` (``Z_out`` the density of the pair ``{h, -h}``, as in
  :mod:`numerics.smi`).

Outer rule (8D, all Gaussian, teacher side): true ``z_1 ~ N(0, I)`` (half grid by the sign
symmetry of layer 1), ``omega_1 = q1 z_1 + sqrt(q1 V1) xi``; ``omega_2 ~ N(0, q2 I)`` by a graded
rule in the token difference (the layer-1 information scales as ``(w0 - w1)^2 / V2``, see
:func:`omega2_rule`), ``z_2 = omega_2 + sqrt(V2) eta``; ``h = A(z_1) z_2``.  ``xi`` and ``eta``
enter on the posterior's own scale, so few nodes suffice.  Inner (the fibre over ``z_1'``):
deterministic balance-heuristic mixture of the prior ``N(omega_1, V1 I)`` and Laplace Gaussians
at the Gauss-Newton modes of the posterior (for ``+h`` started at ``+-z_1``, for ``-h`` at the
logit inversion ``A(z_1') omega_2 = -h`` and its mirror) and at ``+-`` the true ``z_1`` (the
set is mirror-symmetric, so ``E[z_1' | y, omega] = 0`` exactly at ``q1 = 0``); log-sum-exp
shifted, so nothing underflows as ``V -> 0``.

The SE map is ``T_l(Q) = alpha K_l / (1 + alpha K_l)`` (Gaussian prior).  :func:`solve_learned`
finds its fixed point with ``q1 > 0`` by Newton's method in ``log V_l`` (finite-difference
Jacobian at the coarse order, Broyden updates), then reports the residual at the refined order,
the 2x2 Jacobian's eigenvalues (stability) and ``phi`` relative to ``Q = 0``.

Small ``V`` (perfect recovery, :func:`recovery_kappa`): the posterior lives on the 2D fibre
``{A(z_1) z_2 = h}`` in 4D, so ``Cov -> D^{1/2} Pi D^{1/2}`` with ``Pi`` the tangent projector in
the metric ``D = diag(V1 I, V2 I)``; with ``J = dz_2/dz_1`` along the fibre and ``r = V1/V2``,
``V_l K_l -> kappa_l(r)``, ``kappa_1 = E tr[r J^T J (I + r J^T J)^{-1}]``, ``kappa_2 = 2 - kappa_1``.
The map becomes ``V_l -> V_l / (alpha kappa_l(r))``: ``Q = I`` is a fixed point for all alpha,
stable iff ``alpha > 1`` (at the ratio ``r*`` with ``kappa_1 = kappa_2 = 1``).
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from numerics.records import ConvergenceError, require
from numerics.smi import _attention_inverse, _check, _fibre_jacobian, _gh, _grid2, _omega_rule

# (n_z1, n_xi, (n_s, n_d), n_eta, n_inner, n_prior): coarse and refined
LEARNED_ORDERS = ((4, 3, (2, 6), 2, 6, 6), (6, 4, (4, 8), 3, 6, 6))
# Known systematic error, not in the error bars: at q1 = 0 these rules (Gauss-Hermite in
# omega_2's token sum s, Laplace-mixture fibre) give K2 = 20.40 at q2 = 0.92 where the lattice
# rule of numerics.smi_sequential and three Monte Carlo routes give 19.31 (+5.6%), and they put
# the sequential threshold at 0.708 where the lattice engine gives 0.71962 +- 0.00008.
PROVISIONAL = ("provisional: this branch's rules overestimate K2 by ~5% at q1 = 0, q2 = 0.92 "
               "(lattice rule and Monte Carlo: 19.31); its error bars do not include that bias")
_CHUNK = 2_000_000     # (outer x inner) elements per block
PI0 = 0.2              # mixture weight of the prior component


class UnresolvedError(ConvergenceError):
    """The two quadrature orders disagree too much for a fixed point to be reported."""


# ----------------------------------------------------------------------------- outer rules
@lru_cache(maxsize=64)
def omega2_rule(ns: int, nd: int, q2: float):
    """Rule for ``omega_2 ~ N(0, q2 I)``: the graded rule :func:`numerics.smi._omega_rule`
    (Gauss-Hermite in ``s = (w0 + w1)/sqrt 2``, Gauss-Legendre in ``u`` with ``d = sqrt(q2) D
    u^2`` on ``d > 0``, weight doubled), with its weights renormalised to total mass 1 (the
    Legendre rule alone misses ~1e-3 at nd = 8)."""
    o0, o1, W = _omega_rule((ns, nd), q2)
    return o0, o1, W / W.sum()


def _outer(q1, q2, order, half=True):
    """Flattened 8D outer rule: (z_1, omega_1, omega_2, eta) nodes and weights.  ``half``: use
    the sign symmetries of each layer to halve the z_1 and omega_2 grids (valid for integrands
    even in each layer's sign, i.e. not for ``K12``, which is odd in both)."""
    n_z, n_xi, (ns, nd), n_eta = order[:4]
    v1, v2 = 1.0 - q1, 1.0 - q2
    z0, z1, wz = _grid2(n_z, 1.0, half)                    # (z_1, omega_1) -> -(...) symmetry
    if q1 > 0 and v1 > 0:
        x0, x1, wx = _grid2(n_xi, 1.0, False)
    else:
        x0, x1, wx = np.zeros(1), np.zeros(1), np.ones(1)
    if q2 > 0:
        o0, o1, wo = omega2_rule(ns, nd, q2)
        if not half:
            o0, o1, wo = np.r_[o0, -o0], np.r_[o1, -o1], np.r_[wo, wo] / 2
    else:
        o0, o1, wo = np.zeros(1), np.zeros(1), np.ones(1)
    e0, e1, we = _grid2(n_eta, 1.0, False)
    grids = np.meshgrid(np.arange(z0.size), np.arange(x0.size), np.arange(o0.size),
                        np.arange(e0.size), indexing="ij")
    a, b, c, d = (g.ravel() for g in grids)
    s1 = math.sqrt(q1 * v1)
    return dict(z0=z0[a], z1=z1[a], w10=q1 * z0[a] + s1 * x0[b], w11=q1 * z1[a] + s1 * x1[b],
                o0=o0[c], o1=o1[c], t0=o0[c] + math.sqrt(v2) * e0[d],
                t1=o1[c] + math.sqrt(v2) * e1[d], W=wz[a] * wx[b] * wo[c] * we[d])


# ----------------------------------------------------------------------------- inner rule
def _gn_mode(s0, s1, h0, h1, a0, a1, o0, o1, v1, v2, c, beta, iters):
    """Mode over z of N(z; omega_1, V1) N(A(z)^{-1} h; omega_2, V2) by damped Gauss-Newton
    (step length <= 1); returns the mode and ``P = I/V1 + J^T J/V2`` there."""
    z0, z1 = s0, s1
    for it in range(iters + 1):
        Ai, _ = _attention_inverse(z0, z1, c, beta)
        j00, j01, j10, j11 = _fibre_jacobian(z0, z1, h0, h1, c, beta)
        P00 = 1 / v1 + (j00**2 + j10**2) / v2
        P01 = (j00 * j01 + j10 * j11) / v2
        P11 = 1 / v1 + (j01**2 + j11**2) / v2
        if it == iters:
            break
        r0 = Ai[0, 0] * h0 + Ai[0, 1] * h1 - o0
        r1 = Ai[1, 0] * h0 + Ai[1, 1] * h1 - o1
        g0 = (z0 - a0) / v1 + (j00 * r0 + j10 * r1) / v2
        g1 = (z1 - a1) / v1 + (j01 * r0 + j11 * r1) / v2
        det = P00 * P11 - P01**2
        d0, d1 = (P11 * g0 - P01 * g1) / det, (P00 * g1 - P01 * g0) / det
        f = np.minimum(1.0, 1.0 / np.maximum(np.hypot(d0, d1), 1e-300))
        z0, z1 = z0 - f * d0, z1 - f * d1
    ok = np.isfinite(z0) & np.isfinite(z1) & np.isfinite(P00 * P11 * P01)
    return (np.where(ok, z0, s0), np.where(ok, z1, s1), np.where(ok, P00, 1 / v1),
            np.where(ok, P01, 0.0), np.where(ok, P11, 1 / v1))


def _logit_start(t0, t1, o0, o1, c, beta, clip=0.02):
    """A z_1 with ``A(z_1) omega_2 ~ t`` (:func:`numerics.smi._start_from_logits`)."""
    from numerics.smi import _start_from_logits

    return _start_from_logits(t0, t1, o0, o1, c, beta, clip)


def _inner(p, v1, v2, c, beta, n_in, n_p):
    """Posterior moments over the fibre for a batch of outer points ``p`` (dict of 1D arrays).
    Returns ``log Z``, ``E z_1'`` (2), ``E |z_1'|^2``, ``E z_2'`` (2), ``E |z_2'|^2``."""
    A = np.linalg.inv(np.moveaxis(_attention_inverse(p["z0"], p["z1"], c, beta)[0], (0, 1),
                                  (-2, -1)))
    h0 = A[:, 0, 0] * p["t0"] + A[:, 0, 1] * p["t1"]
    h1 = A[:, 1, 0] * p["t0"] + A[:, 1, 1] * p["t1"]
    a0, a1, o0, o1 = p["w10"], p["w11"], p["o0"], p["o1"]
    l0, l1 = _logit_start(-h0, -h1, o0, o1, c, beta)
    starts = [(1.0, p["z0"], p["z1"], 6), (1.0, -p["z0"], -p["z1"], 6), (-1.0, l0, l1, 6),
              (-1.0, -l0, -l1, 6), (1.0, p["z0"], p["z1"], 0), (1.0, -p["z0"], -p["z1"], 0)]
    comps = []
    for sg, s0, s1, its in starts:
        m0, m1, P00, P01, P11 = _gn_mode(s0, s1, sg * h0, sg * h1, a0, a1, o0, o1, v1, v2, c,
                                         beta, its)
        r00 = np.sqrt(P00)
        r01 = P01 / r00
        r11 = np.sqrt(np.maximum(P11 - r01**2, 1e-300))
        comps.append((m0, m1, r00, r01, r11))
    col = lambda x: x[:, None]  # noqa: E731
    xg, wg = _gh(n_in)
    X0, X1, WX = np.repeat(xg, n_in), np.tile(xg, n_in), np.outer(wg, wg).ravel()
    xp, wp = _gh(n_p)
    P0, P1, WP = np.repeat(xp, n_p), np.tile(xp, n_p), np.outer(wp, wp).ravel()
    n, sv1 = h0.size, math.sqrt(v1)
    pk = (1 - PI0) / len(comps)
    Y0 = [col(a0) + sv1 * P0]
    Y1 = [col(a1) + sv1 * P1]
    WQ = [np.broadcast_to(PI0 * WP, (n, WP.size))]
    for m0, m1, r00, r01, r11 in comps:
        u1 = X1 / col(r11)
        Y0.append(col(m0) + (X0 - col(r01) * u1) / col(r00))
        Y1.append(col(m1) + u1)
        WQ.append(np.broadcast_to(pk * WX, (n, WX.size)))
    Y0, Y1, WQ = np.concatenate(Y0, 1), np.concatenate(Y1, 1), np.concatenate(WQ, 1)
    with np.errstate(under="ignore"):
        lprior = -((Y0 - col(a0)) ** 2 + (Y1 - col(a1)) ** 2) / (2 * v1)   # log N + log(2 pi V1)
        q = PI0 * np.exp(lprior) / (2 * math.pi * v1)
        for m0, m1, r00, r01, r11 in comps:
            d0, d1 = Y0 - col(m0), Y1 - col(m1)
            e0, e1 = col(r00) * d0 + col(r01) * d1, col(r11) * d1
            q = q + pk * np.exp(-0.5 * (e0**2 + e1**2)) * col(r00 * r11) / (2 * math.pi)
    Bi, det = _attention_inverse(Y0, Y1, c, beta)
    u = Bi[0, 0] * col(h0) + Bi[0, 1] * col(h1)
    w = Bi[1, 0] * col(h0) + Bi[1, 1] * col(h1)
    base = lprior - ((u**2 + w**2) + col(o0**2 + o1**2)) / (2 * v2) + np.log(WQ / (q * det))
    x = (u * col(o0) + w * col(o1)) / v2
    shift = np.max(base + np.abs(x), axis=1, keepdims=True)
    with np.errstate(under="ignore"):
        ep, em = np.exp(base + x - shift), np.exp(base - x - shift)
    Sp, Dm = ep + em, ep - em
    Z = Sp.sum(1)
    logZ = np.log(Z) + shift[:, 0] - math.log(2 * math.pi * v1) - math.log(2 * math.pi * v2)
    E1 = np.stack([(Sp * Y0).sum(1), (Sp * Y1).sum(1)], 1) / col(Z)
    S1 = (Sp * (Y0**2 + Y1**2)).sum(1) / Z
    E2 = np.stack([(Dm * u).sum(1), (Dm * w).sum(1)], 1) / col(Z)
    S2 = (Sp * (u**2 + w**2)).sum(1) / Z
    return logZ, E1, S1, E2, S2


# ----------------------------------------------------------------------------- statistics
def branch_stats(q1: float, q2: float, *, c: float = 1.0, beta: float = 1.0,
                 order=LEARNED_ORDERS[0], half=True, progress=None) -> dict:
    """Outer expectations at ``Q = diag(q1, q2)`` (module docstring; THEORY 2.1):
    ``K1, K2, K12``, Nishimori partners ``N1, N2``, ``psi = E log Z_out`` and ``weight``
    (the rule's total mass, 1 up to the cut tail).  ``K12`` is meaningful only with
    ``half=False`` (full sign grids: its integrand is odd under each layer's sign flip)."""
    require(0 <= q1 < 1, "q1", "in [0, 1)", q1)
    require(0 <= q2 < 1, "q2", "in [0, 1)", q2)
    v1, v2 = 1.0 - q1, 1.0 - q2
    P = _outer(q1, q2, order, half)
    n_in, n_p = order[4], order[5]
    step = max(1, _CHUNK // (n_p * n_p + 6 * n_in * n_in))
    N = P["W"].size
    acc = dict(K1=0.0, K2=0.0, K12=0.0, trcov1=0.0, trcov2=0.0, psi=0.0, weight=0.0)
    nch = -(-N // step)
    for k, s0 in enumerate(range(0, N, step)):
        p = {key: val[s0:s0 + step] for key, val in P.items()}
        logZ, E1, S1, E2, S2 = _inner(p, v1, v2, c, beta, n_in, n_p)
        g1 = (E1 - np.stack([p["w10"], p["w11"]], 1)) / v1
        g2 = (E2 - np.stack([p["o0"], p["o1"]], 1)) / v2
        W = p["W"]
        acc["K1"] += W @ (g1**2).sum(1)
        acc["K2"] += W @ (g2**2).sum(1)
        acc["K12"] += W @ (g1 * g2).sum(1)
        acc["trcov1"] += W @ (S1 - (E1**2).sum(1))
        acc["trcov2"] += W @ (S2 - (E2**2).sum(1))
        acc["psi"] += W @ logZ
        acc["weight"] += W.sum()
        if progress:
            progress(k + 1, nch, f"quadrature at Q = diag({q1:.4g}, {q2:.4g})")
    acc["N1"] = (2 - acc["trcov1"] / v1) / v1
    acc["N2"] = (2 - acc["trcov2"] / v2) / v2
    return acc


# ----------------------------------------------------------------------------- SE solver
def _log_residual(x, alpha, c, beta, order, progress=None):
    """``F(x) = x + log(1 + alpha K(q))`` with ``x_l = log V_l``: zero at an SE fixed point
    (``V_l = 1/(1 + Q_hat_ll)``, THEORY 2.1), and the statistics at ``q = 1 - exp(x)``."""
    q = 1.0 - np.exp(x)
    s = branch_stats(float(q[0]), float(q[1]), c=c, beta=beta, order=order, progress=progress)
    K = np.array([s["K1"], s["K2"]])
    return x + np.log1p(alpha * K), s


def _jacobian(x, F0, alpha, c, beta, order, step=0.02):
    """Forward-difference Jacobian dF/dx (the rule moves smoothly with q)."""
    J = np.empty((2, 2))
    for j in range(2):
        xp = x.copy()
        xp[j] += step
        J[:, j] = (_log_residual(xp, alpha, c, beta, order)[0] - F0) / step
    return J


def solve_learned(*, alpha: float, init=(0.5, 0.99), skip: float = 1.0, beta: float = 1.0,
                  orders=LEARNED_ORDERS, tol: float = 2e-4, accept: float = 0.03,
                  max_iter: int = 10, progress=None) -> dict:
    """SE fixed point with both layers learned (``q1 > 0``): Newton in ``x = log(1 - q)`` on
    ``F(x) = x + log(1 + alpha K(q))`` at the coarse order (forward-difference Jacobian,
    Broyden updates, steps capped at 0.7 in x; after a step without progress a fresh Jacobian,
    then backtracking by 1/3),
    stopped at ``max|F| < tol``; after ``max_iter`` steps the best iterate is kept if
    ``max|F| <= accept`` (the coarse rule's noise floor near Q = I).  Then at the refined
    order: one Newton correction with the refined residual gives the reported Q, and the
    correction's size (which contains any unsolved coarse residual; plus the Nishimori residual
    propagated the same way) is its error.

    Returns Q, Q_hat, error (per entry), eigenvalues of the SE map's 2x2 Jacobian ``dT/dQ``
    (``stable``: all |.| < 1), ``psi`` (``E log Z_out``, refined) and iteration info.  Raises
    :class:`ConvergenceError` if Newton fails or lands on ``q1 = 0`` (the layer-2 branch)."""
    _check(2, 2, skip, beta, alpha)
    require(len(init) == 2 and all(0 < float(q) < 1 for q in init), "init",
            "a pair of overlaps in (0, 1)", init)
    x = np.log(1.0 - np.asarray(init, dtype=float))
    F, s = _log_residual(x, alpha, skip, beta, orders[0])
    J = _jacobian(x, F, alpha, skip, beta, orders[0])
    hist = [float(np.abs(F).max())]
    best, lam, fresh = (hist[0], x, F, s), 1.0, True
    for it in range(max_iter):
        if best[0] < tol:
            break
        x, F = best[1], best[2]
        dx = -np.linalg.solve(J, F)
        dx *= lam * min(1.0, 0.7 / np.abs(dx).max())
        xn = np.minimum(x + dx, -1e-6)
        Fn, sn = _log_residual(xn, alpha, skip, beta, orders[0])
        J = J + np.outer(Fn - F - J @ (xn - x), xn - x) / ((xn - x) @ (xn - x))   # Broyden
        hist.append(float(np.abs(Fn).max()))
        if hist[-1] < best[0]:
            best, lam, fresh = (hist[-1], xn, Fn, sn), 1.0, False
        elif not fresh:                  # no progress with a secant Jacobian: a fresh one
            J = _jacobian(best[1], best[2], alpha, skip, beta, orders[0])
            fresh = True
        else:                            # no progress with a fresh Jacobian: backtrack
            lam /= 3
        if progress:
            progress(it + 1, max_iter, f"Newton alpha = {alpha:g}: max|F| = {hist[-1]:.1e}")
    _, x, F, s = best
    if best[0] > accept:
        raise ConvergenceError(f"learned-branch Newton did not converge at alpha = {alpha}",
                               last_iterate=(1 - np.exp(x)).tolist(), residual=F.tolist())
    q = 1.0 - np.exp(x)
    if q[0] < 1e-3:
        raise ConvergenceError("Newton reached the layer-2 branch q1 = 0", last_iterate=q.tolist(),
                               residual=F.tolist())
    J = _jacobian(x, F, alpha, skip, beta, orders[0])     # fresh, for stability and errors
    Fr, sr = _log_residual(x, alpha, skip, beta, orders[1], progress=progress)
    dx = -np.linalg.solve(J, Fr)
    Kr = np.array([sr["K1"], sr["K2"]])
    nis = np.abs(Kr - np.array([sr["N1"], sr["N2"]])) / Kr
    # error of F from the Nishimori residual: d log(1 + alpha K) = alpha K eps / (1 + alpha K)
    dxn = np.abs(np.linalg.solve(J, alpha * Kr * nis / (1 + alpha * Kr)))
    if not np.all(np.abs(dx) < 0.5):
        raise UnresolvedError(
            f"alpha = {alpha}: the refined-order correction to log(1 - q) is {dx.tolist()} "
            "(the orders disagree; near Q = I the SE map is nearly marginal and amplifies the "
            "quadrature error by 1/(1 - eigenvalue))", last_iterate=q.tolist(),
            residual=Fr.tolist())
    xr = x + dx
    qr = 1.0 - np.exp(xr)
    err = np.exp(xr) * (np.abs(dx) + dxn)
    eig = np.linalg.eigvals(np.eye(2) - J)           # dT/dQ is similar to dG/dx = I - dF/dx
    qhat = alpha * Kr
    return dict(alpha=float(alpha), Q=qr.tolist(), Q_hat=qhat.tolist(), error=err.tolist(),
                eigenvalues=[complex(e) if abs(e.imag) > 0 else float(e.real) for e in eig],
                stable=bool(np.all(np.abs(eig) < 1)), psi=float(sr["psi"]),
                psi_error=float(abs(sr["psi"] - s["psi"])), nishimori=nis.tolist(),
                newton_history=hist, q_coarse=q.tolist(),
                method=("Newton in log(1 - q) at order " + str(orders[0]) + ", refined-order "
                        "correction at " + str(orders[1]) + "; error = correction + Nishimori "
                        "residual, both through (dF/dx)^-1"))


# ----------------------------------------------------------------------------- perfect recovery
RECOVERY_ORDERS = ((8, 16), (16, 32))   # (n_s, n_d) of the graded rule for z_1 and for z_2


@lru_cache(maxsize=8)
def _fibre_singular_values(n, c, beta):
    """Squared singular values of ``J = dz_2/dz_1`` along the fibre at ``z ~ N(0, I_4)`` and
    the weights.  ``J`` vanishes on ``z_1,0 = z_1,1`` and ``z_2,0 = z_2,1`` (no token contrast),
    where ``kappa`` varies on the scale ``1/sqrt(r)``: both 2D factors use the graded rule
    :func:`omega2_rule` (``q = 1``, sum-difference coordinates)."""
    a0, a1, wa = omega2_rule(n[0], n[1], 1.0)
    i, j = (g.ravel() for g in np.meshgrid(np.arange(a0.size), np.arange(a0.size),
                                            indexing="ij"))
    z0, z1, t0, t1, W = a0[i], a1[i], a0[j], a1[j], wa[i] * wa[j]
    A = np.linalg.inv(np.moveaxis(_attention_inverse(z0, z1, c, beta)[0], (0, 1), (-2, -1)))
    h0, h1 = A[:, 0, 0] * t0 + A[:, 0, 1] * t1, A[:, 1, 0] * t0 + A[:, 1, 1] * t1
    j00, j01, j10, j11 = _fibre_jacobian(z0, z1, h0, h1, c, beta)
    tr = j00**2 + j01**2 + j10**2 + j11**2
    dt = (j00 * j11 - j01 * j10) ** 2
    disc = np.sqrt(np.maximum(tr**2 / 4 - dt, 0.0))
    return np.stack([tr / 2 + disc, np.maximum(tr / 2 - disc, 0.0)]), W


def recovery_kappa(r: float, *, skip: float = 1.0, beta: float = 1.0,
                   n=RECOVERY_ORDERS[0]) -> dict:
    """``kappa_1(r) = E tr[r J^T J (I + r J^T J)^{-1}]`` and ``a = r kappa_1'(r)`` (module
    docstring): the small-V limit ``V_l K_l -> kappa_l(V1/V2)``, ``kappa_2 = 2 - kappa_1``."""
    s2, W = _fibre_singular_values(n, skip, beta)
    k = W @ (r * s2 / (1 + r * s2)).sum(0)
    a = W @ (r * s2 / (1 + r * s2) ** 2).sum(0)
    return dict(kappa1=float(k), kappa2=float(2 - k), a=float(a))


def perfect_recovery(*, skip: float = 1.0, beta: float = 1.0, orders=RECOVERY_ORDERS) -> dict:
    """Leading small-V analysis of ``Q -> I`` (module docstring).  The SE map becomes
    ``V_l -> V_l / (alpha kappa_l(V1/V2))``; at the ratio ``r*`` with ``kappa_1 = kappa_2 = 1``
    the overall factor is ``1/alpha`` and the ratio multiplier ``1 - 2 a``, ``a = r kappa_1'``
    in (0, 1).  Hence ``Q = I`` is a fixed point for every alpha, stable iff ``alpha > 1``
    (parameter counting: 2 outputs per sample, 2 unknown rows).  Returns ``r*``, ``a`` and the
    multiplier, each as value/error from two orders of the 4D rule."""
    from scipy.optimize import brentq

    _check(2, 2, skip, beta)
    res = []
    for n in orders:
        lr = brentq(lambda t, n=n: recovery_kappa(math.exp(t), skip=skip, beta=beta, n=n)["kappa1"]
                    - 1,
                    -12.0, 12.0, xtol=1e-12)
        k = recovery_kappa(math.exp(lr), skip=skip, beta=beta, n=n)
        res.append((math.exp(lr), k["a"]))
    (r0, a0), (r1, a1) = res
    return dict(ratio=r1, ratio_error=abs(r1 - r0), a=a1, a_error=abs(a1 - a0),
                ratio_multiplier=1 - 2 * a1, contraction="1/alpha",
                method=f"4D graded rule in z (sum x difference), {orders[0]} vs {orders[1]}; "
                       "kappa_1(r*) = 1 by Brent in log r")


# ----------------------------------------------------------------------------- Monte Carlo route
def montecarlo_stats(q1: float, q2: float, *, skip: float = 1.0, beta: float = 1.0,
                     samples: int = 4000, inner: int = 1000, seed: int = 0) -> dict:
    """Seeded Monte Carlo of ``K1, K2, K12`` at ``Q = diag(q1, q2)``, independent of the
    quadrature and of every symmetry reduction (so ``K12`` is a real test of ``Q_12 = 0``).

    Outer: ``z_1, xi, eta ~ N(0, I)``, ``omega_1 = q1 z_1 + sqrt(q1 V1) xi``,
    ``omega_2 ~ N(0, q2 I)``, ``z_2 = omega_2 + sqrt(V2) eta``, ``h = A(z_1) z_2``.  Inner:
    self-normalised importance sampling of ``z_1'`` from ``0.3 N(omega_1, V1 I) +
    0.35 N(+-z_1, 2 P^{-1})`` (``P = I/V1 + J^T J/V2`` at the true ``z_1``); both signs of ``h``
    are summed at every draw.  Products of posterior means come from two independent inner
    halves (no variance bias).  Returns Estimates (error = standard error over outer samples)."""
    from numerics.records import Estimate

    _check(2, 2, skip, beta)
    require(0 <= q1 < 1 and 0 <= q2 < 1, "Q", "diag(q1, q2) with q1, q2 in [0, 1)", (q1, q2))
    rng = np.random.default_rng(seed)
    v1, v2 = 1.0 - q1, 1.0 - q2
    pis = (0.3, 0.35, 0.35)
    vals = np.zeros((samples, 3))
    step = max(1, 1_000_000 // inner)
    for s0 in range(0, samples, step):
        n = min(step, samples - s0)
        z = rng.standard_normal((n, 2))
        om1 = q1 * z + math.sqrt(q1 * v1) * rng.standard_normal((n, 2))
        om2 = math.sqrt(q2) * rng.standard_normal((n, 2))
        A = np.linalg.inv(np.moveaxis(_attention_inverse(z[:, 0], z[:, 1], skip, beta)[0],
                                      (0, 1), (-2, -1)))
        h = np.einsum("nab,nb->na", A, om2 + math.sqrt(v2) * rng.standard_normal((n, 2)))
        j00, j01, j10, j11 = _fibre_jacobian(z[:, 0], z[:, 1], h[:, 0], h[:, 1], skip, beta)
        P = np.empty((n, 2, 2))
        P[:, 0, 0] = 1 / v1 + (j00**2 + j10**2) / v2
        P[:, 0, 1] = P[:, 1, 0] = (j00 * j01 + j10 * j11) / v2
        P[:, 1, 1] = 1 / v1 + (j01**2 + j11**2) / v2
        S = 2.0 * np.linalg.inv(P)
        L = np.linalg.cholesky(S)
        comp = rng.choice(3, size=(n, inner), p=pis)
        x = rng.standard_normal((n, inner, 2))
        lx = np.einsum("nab,nkb->nka", L, x)
        sg = np.where(comp == 1, 1.0, -1.0)[..., None]
        y = np.where((comp == 0)[..., None], om1[:, None, :] + math.sqrt(v1) * x,
                     sg * z[:, None, :] + lx)
        Si = np.linalg.inv(S)
        ldet = np.log(np.linalg.det(S))[:, None]
        lq = [math.log(pis[0]) - ((y - om1[:, None, :]) ** 2).sum(-1) / (2 * v1)
              - math.log(2 * math.pi * v1)]
        for sgn in (1.0, -1.0):
            d = y - sgn * z[:, None, :]
            lq.append(math.log(pis[1]) - 0.5 * np.einsum("nka,nab,nkb->nk", d, Si, d)
                      - 0.5 * ldet - math.log(2 * math.pi))
        lq = np.logaddexp.reduce(np.stack(lq), axis=0)
        Bi, det = _attention_inverse(y[..., 0], y[..., 1], skip, beta)
        u = Bi[0, 0] * h[:, None, 0] + Bi[0, 1] * h[:, None, 1]
        w = Bi[1, 0] * h[:, None, 0] + Bi[1, 1] * h[:, None, 1]
        o0, o1 = om2[:, None, 0], om2[:, None, 1]
        base = (-((y - om1[:, None, :]) ** 2).sum(-1) / (2 * v1)
                - ((u**2 + w**2) + (o0**2 + o1**2)) / (2 * v2) - np.log(det) - lq)
        xx = (u * o0 + w * o1) / v2
        lp = np.logaddexp(base + xx, base - xx)
        wt = np.exp(lp - lp.max(1, keepdims=True))
        th = np.tanh(xx)                                   # sum_s s e^{s x} / sum_s e^{s x}
        half = inner // 2
        G = []
        for part in (slice(0, half), slice(half, 2 * half)):
            wp = wt[:, part] / wt[:, part].sum(1, keepdims=True)
            g1 = (np.einsum("nk,nka->na", wp, y[:, part]) - om1) / v1
            g2 = (np.stack([(wp * th[:, part] * u[:, part]).sum(1),
                            (wp * th[:, part] * w[:, part]).sum(1)], 1) - om2) / v2
            G.append((g1, g2))
        sl = slice(s0, s0 + n)
        vals[sl, 0] = (G[0][0] * G[1][0]).sum(1)
        vals[sl, 1] = (G[0][1] * G[1][1]).sum(1)
        vals[sl, 2] = 0.5 * ((G[0][0] * G[1][1]).sum(1) + (G[1][0] * G[0][1]).sum(1))
    mean, se = vals.mean(0), vals.std(0, ddof=1) / math.sqrt(samples)
    meth = f"Monte Carlo, {samples} outer x {inner} inner (mixture proposal), seed {seed}"
    return {k: Estimate(float(mean[i]), float(se[i]), meth)
            for i, k in enumerate(("K1", "K2", "K12"))}


# ----------------------------------------------------------------------------- records
PSI0_ORDERS = ((24, 32), (32, 40))   # (n_h, n_z) of route A at Q = 0


@lru_cache(maxsize=16)
def psi_zero(skip: float, beta: float) -> tuple[float, float]:
    """``E log Z_out`` at ``Q = 0`` (route A, :func:`numerics.smi._stats`): value and the
    difference of two orders."""
    from numerics import smi

    v = [smi._stats(0.0, 0.0, c=skip, beta=beta, n_w1=2, n_w2=2, n_h=a, n_z=b,
                    want_psi=True)["psi"] for a, b in PSI0_ORDERS]
    return float(v[1]), float(abs(v[1] - v[0]))


def free_entropy(q, qhat, alpha, psi, psi0) -> float:
    """``phi(Q) - phi(0)`` for diagonal ``Q``, THEORY 2.1:
    ``sum_l [-q_l qhat_l/2 + qhat_l/2 - log(1 + qhat_l)/2] + alpha (Psi_out(Q) - Psi_out(0))``."""
    q, qhat = np.asarray(q, dtype=float), np.asarray(qhat, dtype=float)
    return float(np.sum(-q * qhat / 2 + qhat / 2 - np.log1p(qhat) / 2) + alpha * (psi - psi0))


def egen_estimate(q1: float, q2: float, *, skip: float, beta: float, dq=(0.0, 0.0)):
    """e_gen (THEORY 2.4, plug-in estimator, :func:`numerics.smi._egen`) at two Gauss-Hermite
    orders (6, 8 for the 6D rule at q1 = 0; 5, 6 for the 8D rule), error = their difference +
    |de/dq| dq (central differences, lower order)."""
    from numerics import smi

    lo, hi = (6, 8) if q1 == 0 else (5, 6)       # 6D or 8D tensor rule
    e6 = smi._egen(q1, q2, c=skip, beta=beta, n=lo)
    e8 = smi._egen(q1, q2, c=skip, beta=beta, n=hi)
    err = abs(e8 - e6)
    for k, d in enumerate(dq):
        if d > 0:
            h = min(1e-3, 0.5 * (1 - max(q1, q2)))
            qp, qm = [q1, q2], [q1, q2]
            qp[k] += h
            qm[k] -= h
            de = (smi._egen(*qp, c=skip, beta=beta, n=lo)
                  - smi._egen(*qm, c=skip, beta=beta, n=lo)) / (2 * h)
            err += abs(de) * d
    return float(e8), float(err)


def learned_point(*, alpha: float, skip: float = 1.0, beta: float = 1.0, init=(0.5, 0.99),
                  orders=LEARNED_ORDERS, progress=None) -> dict:
    """Record of the both-learned fixed point (:func:`solve_learned`) in the format of
    :func:`numerics.smi.fixed_point`: alpha, Q, Q_hat, error (per entry), e_gen, e_gen_error,
    phi (relative to Q = 0), phi_error, branch, stable, eigenvalue (largest |.| of dT/dQ),
    note, detail (the solver's report).  If the two orders disagree beyond a Newton correction
    of 0.5 in log(1 - q) (:class:`UnresolvedError`), the values are NaN and ``note`` says why."""
    try:
        r = solve_learned(alpha=alpha, init=init, skip=skip, beta=beta, orders=orders,
                          progress=progress)
    except UnresolvedError as e:
        nan = math.nan
        return dict(alpha=float(alpha), Q=[nan, nan], Q_hat=[nan, nan], error=[nan, nan],
                    e_gen=nan, e_gen_error=nan, phi=nan, phi_error=nan,
                    branch="both learned", stable=False, eigenvalue=nan,
                    note=f"unresolved (NaN): {e}", detail={})
    p0, p0e = psi_zero(float(skip), float(beta))
    phi = free_entropy(r["Q"], r["Q_hat"], alpha, r["psi"], p0)
    eg, ege = egen_estimate(*r["Q"], skip=skip, beta=beta, dq=r["error"])
    V = 1.0 - np.asarray(r["Q"])
    note = ("" if np.all(np.asarray(r["error"]) < 0.5 * V) else
            "near Q = I the two quadrature orders disagree by more than half of 1 - q: the "
            "posterior is sharper than the rules resolve; the error bars say how much. ")
    note += PROVISIONAL
    return dict(alpha=float(alpha), Q=r["Q"], Q_hat=r["Q_hat"], error=r["error"], e_gen=eg,
                e_gen_error=ege, phi=phi, phi_error=float(alpha * (r["psi_error"] + p0e)),
                branch="both learned", stable=r["stable"],
                eigenvalue=float(max(abs(e) for e in r["eigenvalues"])), note=note, detail=r)


def recovery_point(*, alpha: float, skip: float = 1.0, beta: float = 1.0) -> dict:
    """``alpha >= 1``: the perfect-recovery fixed point ``Q = I`` (stable iff alpha > 1,
    :func:`perfect_recovery`); ``e_gen = 0``, ``phi = +inf`` (noiseless: with
    ``-log(1 + Q_hat_ll)/2 ~ log(V_l)/2`` and ``Psi_out ~ -log V`` (a 2D density of width
    ``sqrt(V)``), ``phi ~ (alpha - 1) log(1/V)`` as ``V -> 0``)."""
    require(alpha >= 1, "alpha", ">= 1 for the perfect-recovery point", alpha)
    pr = perfect_recovery(skip=skip, beta=beta)
    lam = max(1.0 / alpha, abs(pr["ratio_multiplier"]) / alpha)
    note = ("" if alpha > 1 else "alpha = 1: marginal (eigenvalue 1); phi is the finite limit "
            "alpha -> 1-, not computed (NaN)")
    return dict(alpha=float(alpha), Q=[1.0, 1.0], Q_hat=[math.inf, math.inf], error=[0.0, 0.0],
                e_gen=0.0, e_gen_error=0.0, phi=math.inf if alpha > 1 else math.nan,
                phi_error=0.0 if alpha > 1 else math.nan, branch="perfect recovery",
                stable=bool(alpha > 1), eigenvalue=float(lam), note=note, detail=pr)
