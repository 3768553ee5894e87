"""Deep tied attention (L = 2, M = 2): the SE branches above the sequential threshold
(THEORY 2.1, 2.2).

* Both layers learned (``q1 > 0``, alpha in ``(alpha_seq, 1)``): :func:`solve_branch`, Newton on
  the 2x2 SE map ``T_l(Q) = alpha K_l / (1 + alpha K_l)`` with ``K_l`` from the joint-branch
  kernel of every depth (:func:`aim_sym.numerics.smi_branch_qmc.branch_samples`, ``learned = (1,
  2)``: scrambled Sobol' teacher x scrambled Sobol' fibre nodes, common random numbers in Q);
  :func:`learned_point` adds ``phi`` and ``e_gen`` (earlier engines: docs/smi_depth.md).
* ``montecarlo_stats`` (tests/smi_mc_oracles.py): plain Monte Carlo of ``K1, K2, K12`` (outer
  and inner sampled, no quadrature, no symmetry reduction): the route the tests compare with.

Small ``V`` (perfect recovery, :func:`recovery_kappa`): the posterior lives on the 2D fibre
``{A(z_1) z_2 = h}`` in 4D, so ``Cov -> D^{1/2} Pi D^{1/2}`` with ``Pi`` the tangent projector in
the metric ``D = diag(V1 I, V2 I)``; with ``J = dz_2/dz_1`` along the fibre and ``r = V1/V2``,
``V_l K_l -> kappa_l(r)``, ``kappa_1 = E tr[r J^T J (I + r J^T J)^{-1}]``, ``kappa_2 = 2 - kappa_1``.
The map becomes ``V_l -> V_l / (alpha kappa_l(r))``: ``Q = I`` is a fixed point for all alpha,
stable iff ``alpha > 1`` (at the ratio ``r*`` with ``kappa_1 = kappa_2 = 1``).
"""

from __future__ import annotations

import math
import time
from functools import lru_cache

import numpy as np

from . import smi_branch_qmc as bq
from .records import ConvergenceError, require, standard_error
from .smi_fibre import (
    attention_image,
    check,
    check_skip_floor,
    fibre_jacobian,
    functions,
    graded_omega_rule,
)
from .smi_route_a import q0_rotated

# ----------------------------------------------------------------------------- perfect recovery
RECOVERY_ORDERS = ((8, 16), (16, 32))   # (n_s, n_d) of the graded rule for z_1 and for z_2


@lru_cache(maxsize=8)
def _fibre_singular_values(n, c, beta):
    """Squared singular values of ``J = dz_2/dz_1`` along the fibre at ``z ~ N(0, I_4)`` and
    the weights.  ``J`` vanishes on ``z_1,0 = z_1,1`` and ``z_2,0 = z_2,1`` (no token contrast),
    where ``kappa`` varies on the scale ``1/sqrt(r)``: both 2D factors use the normalised graded
    rule :func:`aim_sym.numerics.smi_fibre.graded_omega_rule` (``q = 1``, sum-difference
    coordinates)."""
    a0, a1, wa = graded_omega_rule(tuple(n), 1.0, True)
    i, j = (g.ravel() for g in np.meshgrid(np.arange(a0.size), np.arange(a0.size),
                                            indexing="ij"))
    z0, z1, t0, t1, W = a0[i], a1[i], a0[j], a1[j], wa[i] * wa[j]
    h0, h1 = attention_image(z0, z1, t0, t1, c, beta)
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


# ----------------------------------------------------------------------------- records
# (n_hs, dt_h, n_s, dt_z) of the rotated rules at Q = 0 (route A's Gauss-Hermite rules, (24, 32)
# vs (32, 40), gave -2.35614 +- 7e-3 at c = 0.5 against -2.367051098 from these)
PSI0_ORDERS = ((64, 0.1875, 64, 0.1875), (80, 0.15, 80, 0.15))


@lru_cache(maxsize=16)
def psi_zero(skip: float, beta: float) -> tuple[float, float]:
    """``E log Z_out`` at ``Q = 0`` (:func:`aim_sym.numerics.smi_route_a.q0_rotated`, which
    resolves det A -> c (1 + c)): value and the difference of two orders."""
    v = [q0_rotated(o, c=skip, beta=beta)["psi"] for o in PSI0_ORDERS]
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
    (:func:`normals`, :data:`EGEN_RULE`): value = their mean, error = 2
    standard errors + ``|de/dq| dq`` (central differences on the same points).  The integrand
    is bounded but has sharp softmax saturation fronts (hence no Gauss-Hermite rule:
    benchmarks/RESULTS.md)."""
    require(0 <= q1 <= 1 and 0 <= q2 <= 1, "q", "overlaps in [0, 1]", (q1, q2))
    g = normals(**(rule or EGEN_RULE))
    reps = _egen_replicates(q1, q2, g, skip=skip, beta=beta)
    val = float(reps.mean())
    err = 2.0 * standard_error(reps)
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


@lru_cache(maxsize=4)
def normals(m: int, replicates: int, seed: int) -> np.ndarray:
    """Normals (replicates, 2^m, 8): independently scrambled Sobol' points (one seeded scramble
    per replicate) mapped by the normal quantile; fixed per ``(m, replicates, seed)``."""
    from scipy.special import ndtri
    from scipy.stats import qmc

    require(isinstance(m, int) and 1 <= m <= 20, "m", "an integer in [1, 20] (2^m samples)", m)
    require(isinstance(replicates, int) and replicates >= 2, "replicates", "an integer >= 2",
            replicates)
    tiny = 2.0**-53
    out = np.empty((replicates, 2**m, 8))
    for r in range(replicates):
        u = qmc.Sobol(8, scramble=True, seed=np.random.default_rng([seed, r])).random_base2(m)
        out[r] = ndtri(np.clip(u, tiny, 1 - tiny))
    out.setflags(write=False)
    return out


# (log2 outer, log2 inner, replicates, seed) of the joint-branch kernel on the both-learned branch
LEARNED_RULE = (12, 13, 16, 0)
_NAMES = bq.sample_columns(2, 2, (1, 2), psi=True)


def check_learned_range(skip: float, beta: float) -> None:
    """InputError (one line naming ``skip`` or ``beta``) outside the (skip, beta) range where the
    joint-branch kernel serves the L = 2 both-learned branch (THEORY 2.1;
    :data:`aim_sym.numerics.smi_branch_qmc.BRANCH_RANGES`, checked against plain Monte Carlo at
    its corners; docs/smi_depth.md)."""
    r = bq.BRANCH_RANGES[(2, 2, (1, 2))]
    for name, v in (("skip", skip), ("beta", beta)):
        lo, hi = r[name]
        require(isinstance(v, (int, float)) and np.isfinite(v) and lo <= v <= hi, name,
                f"in [{lo:g}, {hi:g}] on the L = 2 both-learned branch (alpha in (alpha_seq, 1), "
                "the range its kernel is checked on)", v)


def learned_stats(points, *, skip: float = 1.0, beta: float = 1.0, rule=LEARNED_RULE) -> dict:
    """``K1, K2`` (and ``psi = E log Z_out``, the Nishimori forms, ``E tr C_1``) at the points
    ``(q1, q2)`` of ``points`` on the branch ``Q = diag(q1, q2)`` from one set of scrambles
    (common random numbers; :func:`aim_sym.numerics.smi_branch_qmc.estimates`): ``value``,
    ``per`` (R, n_pts, k) per replicate, ``t``, ``se``, ``bias`` (ratio bias), ``names``."""
    lo, li, R, seed = rule
    check_learned_range(skip, beta)
    bq.check(layers=2, tokens=2, skip=skip, beta=beta, learned=(1, 2))
    bq.check_rule(lo, li, R)
    for q1, q2 in points:
        require(0 < q1 < 1 and 0 < q2 < 1, "q", "overlaps in (0, 1)", (q1, q2))
    full, half, cv = bq.replicate_samples([tuple(p) for p in points], layers=2, tokens=2,
                                          skip=skip, beta=beta, log2_outer=lo, log2_inner=li,
                                          replicates=R, seed=seed, learned=(1, 2), psi=True)
    return dict(bq.estimates(full, half, cv, _NAMES), names=_NAMES)


def solve_branch(*, alpha: float, init=(0.3, 0.98), skip: float = 1.0, beta: float = 1.0,
                 rule=LEARNED_RULE, tol: float = 1e-5, max_iter: int = 12,
                 progress=None) -> dict:
    """SE fixed point with both layers learned (THEORY 2.1): root of ``F(x) = x + log(1 + alpha
    K(q))``, ``x = log(1 - q)``, by Newton in ``y = (q1, x_2)`` on ``(F_1 / q1, F_2)`` (no root
    at ``q1 = 0``; finite-difference Jacobian from the same scrambles, Broyden updates, capped
    steps, backtracking) to ``max|G| < tol``.  Errors per entry of Q through ``(dF/dx)^-1``:
    Student-t 99% x replicate standard error + ratio bias + unsolved residual.
    ``eigenvalues`` of ``dT/dQ`` (``I - dF/dx``), ``stable``: all |.| < 1.  Raises
    :class:`ConvergenceError` if Newton fails or lands on ``q1 = 0``."""
    require(np.isfinite(alpha) and 0 < alpha < 1, "alpha", "in (0, 1)", alpha)
    require(len(init) == 2 and all(0 < float(q) < 1 for q in init), "init",
            "a pair of overlaps in (0, 1)", init)
    t0 = time.process_time()
    iK = [_NAMES.index("K1"), _NAMES.index("K2")]

    def F(xs):
        """``F`` at the points ``xs`` (n, 2) of ``x``, per replicate, and the statistics."""
        st = learned_stats([tuple(1 - np.exp(x)) for x in xs], skip=skip, beta=beta, rule=rule)
        per = st["per"][:, :, iK]                                   # (R, n, 2)
        return xs + np.log1p(alpha * st["value"][:, iK]), xs + np.log1p(alpha * per), st

    def G(ys):
        xs = np.column_stack([np.log1p(-ys[:, 0]), ys[:, 1]])
        f = F(xs)[0]
        return np.column_stack([f[:, 0] / ys[:, 0], f[:, 1]])

    y = np.array([float(init[0]), math.log1p(-float(init[1]))])
    hs = (0.05 * y[0], 0.01)
    g3 = G(np.array([y, y + (hs[0], 0), y + (0, hs[1])]))
    Gy, J = g3[0], np.column_stack([(g3[1] - g3[0]) / hs[0], (g3[2] - g3[0]) / hs[1]])
    evals, hist, lam = 1, [float(np.abs(Gy).max())], 1.0
    for it in range(max_iter):
        if hist[-1] < tol:
            break
        dy = -np.linalg.solve(J, Gy) * lam
        dy[0] = float(np.clip(dy[0], -0.7 * y[0], 0.5))    # q1 stays positive
        dy[1] = float(np.clip(dy[1], -0.5, 0.5))
        yn = y + dy
        yn[0], yn[1] = min(yn[0], 0.999), min(yn[1], -1e-6)
        Gn = G(yn[None])[0]
        evals += 1
        s = yn - y
        J = J + np.outer(Gn - Gy - J @ s, s) / (s @ s)                # Broyden
        if np.abs(Gn).max() < np.abs(Gy).max():
            y, Gy, lam = yn, Gn, 1.0
        else:
            lam /= 3
        hist.append(float(np.abs(Gn).max()))
        if progress:
            progress(it + 1, max_iter, f"Newton alpha = {alpha:g}: max|G| = {hist[-1]:.1e}")
    x = np.array([math.log1p(-y[0]), y[1]])
    q = 1.0 - np.exp(x)
    if np.abs(Gy).max() >= max(tol, 1e-3):
        raise ConvergenceError(f"both-learned Newton did not converge at alpha = {alpha}",
                               last_iterate=q.tolist(), residual=Gy.tolist())
    if q[0] < 1e-3:
        raise ConvergenceError("Newton reached the layer-2 branch q1 = 0", last_iterate=q.tolist(),
                               residual=Gy.tolist())
    # at the root: F, its replicates and a one-sided Jacobian (negative steps: q up) together
    Fs, Fr, st = F(np.array([x, x + (-0.01, 0), x + (0, -0.01)]))
    evals += 1
    J = np.column_stack([(Fs[1] - Fs[0]) / -0.01, (Fs[2] - Fs[0]) / -0.01])
    Ji = np.linalg.inv(J)
    Fr0 = Fr[:, 0]
    R = Fr0.shape[0]
    V = np.exp(x)
    se_q = V * np.sqrt(np.diag(Ji @ np.cov(Fr0.T) @ Ji.T / R))
    dF = alpha * st["bias"][0, iK] / (1 + alpha * st["value"][0, iK])   # ratio bias of F
    bias_q = V * (np.abs(Ji) @ dF)
    res_q = V * np.abs(Ji @ Fs[0])
    eig = np.linalg.eigvals(np.eye(2) - J)
    K = st["value"][0, iK]
    rec = {k: dict(value=float(st["value"][0, i]), error=float(st["t"] * st["se"][0, i]
                                                              + st["bias"][0, i]))
           for i, k in enumerate(_NAMES)}
    lo, li, Rr, seed = rule
    return dict(alpha=float(alpha), Q=q.tolist(), Q_hat=(alpha * K).tolist(),
                error=(st["t"] * se_q + bias_q + res_q).tolist(), se=se_q.tolist(),
                ratio_bias=bias_q.tolist(), residual=res_q.tolist(), K=K.tolist(),
                K_error=[rec["K1"]["error"], rec["K2"]["error"]],
                eigenvalues=[complex(e) if abs(e.imag) > 0 else float(e.real) for e in eig],
                stable=bool(np.all(np.abs(eig) < 1)), psi=rec["psi"]["value"],
                psi_error=rec["psi"]["error"], nishimori=[rec["nishimori1"], rec["nishimori2"]],
                trace1=rec["trace1"], newton_history=hist, evaluations=evals,
                jacobian=J.tolist(),
                q_replicates=(1.0 - np.exp(x[None, :] - (Fr0 - Fs[0]) @ Ji.T)).tolist(),
                cpu_seconds=time.process_time() - t0, rule=rule,
                method=(f"Newton in log(1 - q) on K from the joint-branch kernel ({Rr} x 2^{lo} "
                        f"scrambled Sobol' teachers x 2^{li} fibre nodes, seed {seed}); error = "
                        "Student-t 99% x SE + ratio bias + residual, through (dF/dx)^-1"))


def learned_point(*, alpha: float, skip: float = 1.0, beta: float = 1.0, init=(0.3, 0.98),
                  rule: tuple | None = None, progress=None) -> dict:
    """Record of the both-learned fixed point (:func:`solve_branch`) in
    the format of :func:`aim_sym.numerics.smi.fixed_point`: alpha, Q, Q_hat, error (per entry), e_gen,
    e_gen_error, phi (relative to Q = 0), phi_error, branch, stable, eigenvalue (largest |.| of
    dT/dQ), note, detail (the solver's report).  Raises :class:`ConvergenceError` if Newton
    fails or reaches ``q1 = 0``, InputError outside :func:`check_learned_range`."""
    check(2, 2, skip, beta, alpha)
    check_skip_floor(skip, "sequential")
    check_learned_range(skip, beta)
    r = solve_branch(alpha=alpha, init=init, skip=skip, beta=beta, rule=rule or LEARNED_RULE,
                     progress=progress)
    p0, p0e = psi_zero(float(skip), float(beta))
    phi = free_entropy(r["Q"], r["Q_hat"], alpha, r["psi"], p0)
    eg, ege = egen_estimate(*r["Q"], skip=skip, beta=beta, dq=r["error"])
    V = 1.0 - np.asarray(r["Q"])
    note = ("" if np.all(np.asarray(r["error"]) < 0.5 * V) else
            "the error bars exceed half of 1 - q: the posterior is sharper than the fibre "
            "nodes or the outer sample resolve. ")
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
