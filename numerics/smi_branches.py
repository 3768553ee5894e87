"""Deep tied attention (L = 2, M = 2): the SE branches above the sequential threshold
(THEORY 2.1, 2.2).

* Both layers learned (``q1 > 0``, alpha in ``(alpha_seq, 1)``): :func:`learned_point` wraps
  :func:`aim_sym.numerics.smi_learned.solve_branch` (fibre trapezoid lattice in the layer-1 prior's
  coordinates x scrambled Sobol' teacher outer with common random numbers; Newton on the 2x2 SE
  map ``T_l(Q) = alpha K_l / (1 + alpha K_l)``) and adds ``phi`` and ``e_gen``.  An earlier rule
  here (Gauss-Hermite in omega_2, Laplace-mixture fibre) overestimated K2 by ~5% and was
  removed; benchmarks/RESULTS.md has the comparison.
* :func:`montecarlo_stats`: plain Monte Carlo of ``K1, K2, K12`` (outer and inner sampled, no
  quadrature, no symmetry reduction): the independent route the tests compare with.

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

from . import smi_learned
from .records import Estimate, require
from .smi_fibre import (
    attention_inverse,
    check,
    check_skip_floor,
    fibre_jacobian,
    functions,
    graded_omega_rule,
    laplace_proposal,
    rotated_h_rule,
    rotated_z1_rule,
)
from .smi_route_a import q0_sums


@lru_cache(maxsize=64)
def omega2_rule(ns: int, nd: int, q2: float):
    """Rule for ``omega_2 ~ N(0, q2 I)``: the graded rule
    :func:`aim_sym.numerics.smi_fibre.graded_omega_rule`
    (Gauss-Hermite in ``s = (w0 + w1)/sqrt 2``, Gauss-Legendre in ``u`` with ``d = sqrt(q2) D
    u^2`` on ``d > 0``, weight doubled), with its weights renormalised to total mass 1 (the
    Legendre rule alone misses ~1e-3 at nd = 8)."""
    o0, o1, W = graded_omega_rule((ns, nd), q2)
    return o0, o1, W / W.sum()


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
    A = np.linalg.inv(np.moveaxis(attention_inverse(z0, z1, c, beta)[0], (0, 1), (-2, -1)))
    h0, h1 = A[:, 0, 0] * t0 + A[:, 0, 1] * t1, A[:, 1, 0] * t0 + A[:, 1, 1] * t1
    j00, j01, j10, j11 = fibre_jacobian(z0, z1, h0, h1, c, beta)
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

    check(2, 2, skip, beta)
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
    check(2, 2, skip, beta)
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
        A = np.linalg.inv(np.moveaxis(attention_inverse(z[:, 0], z[:, 1], skip, beta)[0],
                                      (0, 1), (-2, -1)))
        h = np.einsum("nab,nb->na", A, om2 + math.sqrt(v2) * rng.standard_normal((n, 2)))
        S, L = laplace_proposal(z, h, v1, v2, skip, beta)
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
        Bi, det = attention_inverse(y[..., 0], y[..., 1], skip, beta)
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
# (n_hs, dt_h, n_s, dt_z) of the rotated rules at Q = 0 (route A's Gauss-Hermite rules, (24, 32)
# vs (32, 40), gave -2.35614 +- 7e-3 at c = 0.5 against -2.367051098 from these)
PSI0_ORDERS = ((64, 0.1875, 64, 0.1875), (80, 0.15, 80, 0.15))


@lru_cache(maxsize=16)
def psi_zero(skip: float, beta: float) -> tuple[float, float]:
    """``E log Z_out`` at ``Q = 0`` (:func:`aim_sym.numerics.smi_route_a.q0_sums` on the rotated
    rules, which resolve det A -> c (1 + c)): value and the difference of two orders."""
    v = [q0_sums(rotated_z1_rule(o[2], o[3], skip, beta), rotated_h_rule(o[0], o[1], skip),
                 c=skip, beta=beta)["psi"] for o in PSI0_ORDERS]
    return float(v[1]), float(abs(v[1] - v[0]))


def free_entropy(q, qhat, alpha, psi, psi0) -> float:
    """``phi(Q) - phi(0)`` for diagonal ``Q``, THEORY 2.1:
    ``sum_l [-q_l qhat_l/2 + qhat_l/2 - log(1 + qhat_l)/2] + alpha (Psi_out(Q) - Psi_out(0))``."""
    q, qhat = np.asarray(q, dtype=float), np.asarray(qhat, dtype=float)
    return float(np.sum(-q * qhat / 2 + qhat / 2 - np.log1p(qhat) / 2) + alpha * (psi - psi0))


EGEN_RULE = dict(m=14, replicates=8, seed=3)   # scrambled Sobol' sample of the e_gen integral


def _egen_replicates(q1: float, q2: float, g: np.ndarray, *, skip: float, beta: float):
    """Per-replicate means of ``||y(z) - y(omega)||_F^2`` (THEORY 2.4, plug-in estimator) over
    normals ``g`` (R, n, 8): ``z = g[..., :4]`` (z_1, z_2 per token), ``omega_l = q_l z_l +
    sqrt(q_l V_l) g[..., 4:]`` (so Cov(z, omega) = [[1, q], [q, q]] per entry)."""
    fwd = functions()["forward"]
    qs = (q1, q1, q2, q2)
    x = g.reshape(-1, 8)
    zs = [x[:, k] for k in range(4)]
    om = [q * zs[k] + math.sqrt(q * (1 - q)) * x[:, 4 + k] for k, q in enumerate(qs)]
    with np.errstate(over="ignore"):
        yz = np.array(fwd(*zs, skip, beta)[2:])
        yo = np.array(fwd(*om, skip, beta)[2:])
    return ((yz - yo) ** 2).sum(0).reshape(g.shape[0], -1).mean(1)


def egen_estimate(q1: float, q2: float, *, skip: float, beta: float, dq=(0.0, 0.0),
                  rule: dict | None = None):
    """e_gen (THEORY 2.4, plug-in estimator) by independently scrambled Sobol' replicates
    (:func:`aim_sym.numerics.smi_learned.normals`, :data:`EGEN_RULE`): value = their mean, error = 2
    standard errors + ``|de/dq| dq`` (central differences on the same points).  The integrand
    is bounded but has sharp softmax saturation fronts, so the former 8D Gauss-Hermite rule
    (5 vs 6 nodes) had errors of 0.01-0.03 that its order difference did not always bound
    (0.1049 +- 0.011 against 0.0923 +- 0.0004 at Q = diag(0, 0.9237))."""
    require(0 <= q1 <= 1 and 0 <= q2 <= 1, "q", "overlaps in [0, 1]", (q1, q2))
    g = smi_learned.normals(**(rule or EGEN_RULE))
    reps = _egen_replicates(q1, q2, g, skip=skip, beta=beta)
    val = float(reps.mean())
    err = 2.0 * float(reps.std(ddof=1)) / math.sqrt(reps.size)
    for k, d in enumerate(dq):
        if d > 0:
            h = min(1e-3, 0.5 * (1 - max(q1, q2)))
            qp, qm = [q1, q2], [q1, q2]
            qp[k] = min(1.0, qp[k] + h)
            qm[k] = max(0.0, qm[k] - h)
            de = (_egen_replicates(*qp, g, skip=skip, beta=beta).mean()
                  - _egen_replicates(*qm, g, skip=skip, beta=beta).mean()) / (qp[k] - qm[k])
            err += abs(de) * d
    return val, float(err)


def learned_point(*, alpha: float, skip: float = 1.0, beta: float = 1.0, init=(0.3, 0.98),
                  rule: dict | None = None, progress=None) -> dict:
    """Record of the both-learned fixed point (:func:`aim_sym.numerics.smi_learned.solve_branch`) in
    the format of :func:`aim_sym.numerics.smi.fixed_point`: alpha, Q, Q_hat, error (per entry), e_gen,
    e_gen_error, phi (relative to Q = 0), phi_error, branch, stable, eigenvalue (largest |.| of
    dT/dQ), note, detail (the solver's report).  Raises :class:`ConvergenceError` if Newton
    fails or reaches ``q1 = 0``."""
    check(2, 2, skip, beta, alpha)
    check_skip_floor(skip, "sequential")
    r = smi_learned.solve_branch(alpha=alpha, init=init, c=skip, beta=beta, rule=rule,
                                 progress=progress)
    p0, p0e = psi_zero(float(skip), float(beta))
    phi = free_entropy(r["Q"], r["Q_hat"], alpha, r["psi"], p0)
    eg, ege = egen_estimate(*r["Q"], skip=skip, beta=beta, dq=r["error"])
    V = 1.0 - np.asarray(r["Q"])
    note = ("" if np.all(np.asarray(r["error"]) < 0.5 * V) else
            "the error bars exceed half of 1 - q: the posterior is sharper than the fibre "
            "lattice or the outer sample resolves. ")
    return dict(alpha=float(alpha), Q=r["Q"], Q_hat=r["Q_hat"], error=r["error"], e_gen=eg,
                e_gen_error=ege, phi=phi, phi_error=float(alpha * (r["psi_error"] + p0e)),
                branch="both learned", stable=r["stable"],
                eigenvalue=float(max(abs(e) for e in r["eigenvalues"])), note=note.strip(),
                detail=r)


def recovery_point(*, alpha: float, skip: float = 1.0, beta: float = 1.0) -> dict:
    """``alpha >= 1``: the perfect-recovery fixed point ``Q = I`` (stable iff alpha > 1,
    :func:`perfect_recovery`); ``e_gen = 0``, ``phi = +inf`` (noiseless: with
    ``-log(1 + Q_hat_ll)/2 ~ log(V_l)/2`` and ``Psi_out ~ -log V`` (a 2D density of width
    ``sqrt(V)``), ``phi ~ (alpha - 1) log(1/V)`` as ``V -> 0``)."""
    require(alpha >= 1, "alpha", ">= 1 for the perfect-recovery point", alpha)
    check_skip_floor(skip, "sequential")
    pr = perfect_recovery(skip=skip, beta=beta)
    lam = max(1.0 / alpha, abs(pr["ratio_multiplier"]) / alpha)
    note = ("" if alpha > 1 else "alpha = 1: marginal (eigenvalue 1); phi is the finite limit "
            "alpha -> 1-, not computed (NaN)")
    return dict(alpha=float(alpha), Q=[1.0, 1.0], Q_hat=[math.inf, math.inf], error=[0.0, 0.0],
                e_gen=0.0, e_gen_error=0.0, phi=math.inf if alpha > 1 else math.nan,
                phi_error=0.0 if alpha > 1 else math.nan, branch="perfect recovery",
                stable=bool(alpha > 1), eigenvalue=float(lam), note=note, detail=pr)
