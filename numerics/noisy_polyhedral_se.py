"""Output side of noisy polyhedral AIM channels (THEORY 1.1, 1.2, 1.4, 1.5; docs/polyhedral.md,
"Noisy outputs").

A channel P(y | h) = sum_k 1[A_k h <= b_k] N(y; L_k h + l_k, Delta), y in R^p continuous, the
pieces {A_k h <= b_k} tiling R^n. With h ~ N(omega, V C), C = diag(1 + delta_ab), Z_out, g_out
and dg_out come from :func:`aim_sym.numerics.polytope.noisy_channel_z_out`'s decomposition
(here re-run piece by piece so that rows independent under a piece's conditional law are
integrated one group at a time: log P is then a sum, and so are g_P and dg_P).

The SE output expectation (THEORY 1.1)

    E(q, V) = E_omega int dy Z_out |g_out|_C^2,   Psi_out(q, V) = E_omega int dy Z_out log Z_out,

omega ~ N(0, q C), is written piece by piece: with y = L_k omega + l_k + S_k^(1/2) u
(S_k = L_k V C L_k^T + Delta, u ~ N(0, I_p)),

    int dy Z_out F(y) = sum_k E_u[ P_k(y, omega) F(y) ],

P_k the Gaussian mass of piece k under h's law given y within piece k: a smooth integrand in
(omega, u). Over (omega, u) in R^(n + p) (6 dimensions at T = 2) a randomised quasi-Monte Carlo
rule (scrambled Sobol, independent scrambles give the standard error; the bar is 3 standard
errors plus the engine's); at q = 0 only u remains and a tensor trapezoid rule in p
dimensions serves (two steps give the bar). The small-width threshold is
alpha_bar_c = 1 / (2 E(0, 1)) as :func:`aim_sym.numerics.polyhedral_se.weak_threshold`.

The generalisation error (THEORY 1.5) is the mean-square error of the posterior-predictive mean
y_hat(omega) = E[y | omega] = sum_k E[1_k(h) (L_k h + l_k) | omega], which needs only the
noiseless polytopes' masses and gradients at omega (E[h 1_k] = P_k omega + V C grad P_k):
e_gen = E_omega [ E[|y|^2 | omega] - |y_hat(omega)|^2 ] (tensor Gauss-Hermite over omega); the
plug-in error uses the noiseless output at omega as the estimate of y (seeded Monte Carlo).

This module receives numbers only (the symbolic side is :mod:`aim_sym.noisy_polyhedral`).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy.optimize import brentq
from scipy.special import log_ndtr, ndtri
from scipy.stats import chi2, qmc

from . import polyhedral_se as ps
from . import polytope as pt
from . import wishart
from .records import ConvergenceError, Estimate, require

__all__ = ["NoisyPolyhedralOutput", "noisy_output", "z_out", "output_moments",
           "output_estimate", "weak_threshold_noisy", "check_nishimori", "fixed_points_noisy",
           "generalisation_error_noisy", "QMC_POINTS", "Q0_STEPS", "FAST_RULE", "V_SCAN",
           "SE_POINTS", "NoisyValues", "face_channel"]

#: a cheaper polytope rule per node (10/7 Gauss points on 10 pieces, as polyhedral_se.FAST_RULE)
FAST_RULE = pt.PolytopeRule(nodes=10, coarse_nodes=7, pieces=10)
#: randomised QMC over (omega, u): (log2 points per scramble, scrambles)
QMC_POINTS = (11, 8)
#: trapezoid steps per axis of u at q = 0 (coarse, middle, fine), in units of the features'
#: width (:func:`_step_scale`): the u-integrand is analytic near the real axis, so the rule
#: converges geometrically once the step is below that width; at Delta = 0.1 (noisy ReLU, V = 1)
#: steps 0.4, 0.3, 0.25 are off by 1.5e-3, 1.1e-4, 4e-7 (relative 8e-4, 6e-5, 2e-7) of the
#: adaptive one-dimensional reference; steps 0.7, 0.6, 0.5 are not yet geometric (the last
#: difference, 7.6e-3, does not bound the error of 0.5, 1.0e-2). Bar: the sum of both differences
Q0_STEPS = (0.35, 0.3, 0.25)
#: the features of the u-integrand have width ~ sqrt(Delta / (V L C L^T)) (generalised
#: eigenvalue); the steps are scaled by min(1, sqrt(that / STEP_REFERENCE)), measured at 0.1
STEP_REFERENCE = 0.1
#: half-width of the trapezoid window (N(0, 1) weight e^(-36) at its edge)
TRAP_WINDOW = 8.5
#: the scramble seed of every QMC rule here (fixed: E(q, V) is then a smooth function of (q, V))
SEED = 2026
#: bar = NSE standard errors of the scrambles' mean
NSE = 3.0


@dataclass(frozen=True)
class NoisyPolyhedralOutput:
    """A noisy polyhedral channel as numbers (THEORY 1.4): ``pieces`` (NoisyPiece: A, b, L, l
    in the flat order of h, a <= b), the noise covariance ``Delta`` (p x p), the variance weights
    ``weights`` = 1 + delta_ab of h."""

    pieces: tuple
    Delta: tuple[tuple[float, ...], ...]
    weights: tuple[float, ...]
    name: str = "noisy-polyhedral"

    def __post_init__(self) -> None:
        n = len(self.weights)
        require(n >= 1 and all(math.isfinite(w) and w > 0 for w in self.weights), "weights",
                "finite reals > 0", self.weights)
        D = np.asarray(self.Delta, dtype=float)
        p = D.shape[0] if D.ndim == 2 else 0
        ok = p >= 1 and D.shape == (p, p) and bool(np.all(np.isfinite(D))) and np.allclose(D, D.T)
        if ok:
            ok = bool(np.all(np.linalg.eigvalsh(D) > 0))
        require(ok, "Delta", "a finite symmetric positive definite (p, p) matrix", D.shape)
        require(len(self.pieces) >= 1 and all(isinstance(k, pt.NoisyPiece) for k in self.pieces),
                "pieces", "a non-empty tuple of NoisyPiece", type(self.pieces).__name__)
        for k in self.pieces:
            A = np.asarray(k.A, dtype=float).reshape(len(k.A), -1) if k.A else np.zeros((0, n))
            ok = (A.shape[1] == n and len(k.b) == A.shape[0]
                  and np.asarray(k.L, dtype=float).shape == (p, n) and len(k.l) == p
                  and all(np.all(np.isfinite(np.asarray(x, dtype=float)))
                          for x in (A, k.b, k.L, k.l)))
            require(ok, "pieces", f"finite A (m, {n}), b (m,), L ({p}, {n}), l ({p},)", k)

    @property
    def dim(self) -> int:
        return len(self.weights)

    @property
    def out_dim(self) -> int:
        return len(self.Delta)


def noisy_output(arrays: dict) -> NoisyPolyhedralOutput:
    """The numeric channel from the dict of :func:`aim_sym.noisy_polyhedral.noisy_arrays`
    (pieces as (A, b, L, l) tuples, Delta, weights, name)."""
    return NoisyPolyhedralOutput(
        pieces=tuple(pt.NoisyPiece(A=A, b=b, L=L, l=lv) for A, b, L, lv in arrays["pieces"]),
        Delta=arrays["Delta"], weights=arrays["weights"], name=arrays.get("name", "noisy"))


# ----------------------------------------------------------------------------- Z_out, g, dg
def _groups(A: np.ndarray, cov: np.ndarray) -> list[np.ndarray]:
    """Rows of A in groups independent under N(., cov) (connected components of A cov A^T)."""
    m = A.shape[0]
    G = A @ cov @ A.T
    s = np.sqrt(np.maximum(np.diag(G), 1e-300))
    link = np.abs(G) > 1e-13 * np.outer(s, s)
    label = -np.ones(m, dtype=int)
    for i in range(m):
        if label[i] >= 0:
            continue
        stack, label[i] = [i], i
        while stack:
            j = stack.pop()
            for k in np.nonzero(link[j] & (label < 0))[0]:
                label[k] = i
                stack.append(k)
    return [np.nonzero(label == g)[0] for g in np.unique(label)]


@lru_cache(maxsize=64)
def _frames(ch: NoisyPolyhedralOutput, V: float) -> tuple:
    """Per piece, at h ~ N(omega, V C): (A, b, L, l, S^-1, chol S, log det 2 pi S, K, M, the
    conditional covariance, the independent row groups, L == 0)."""
    n = ch.dim
    Sig = V * np.diag(np.asarray(ch.weights, dtype=float))
    Dl = np.asarray(ch.Delta, dtype=float)
    out = []
    for k in ch.pieces:
        A = np.asarray(k.A, dtype=float).reshape(len(k.A), n) if k.A else np.zeros((0, n))
        b = np.asarray(k.b, dtype=float)
        L = np.asarray(k.L, dtype=float)
        lv = np.asarray(k.l, dtype=float)
        S = L @ Sig @ L.T + Dl
        S = 0.5 * (S + S.T)
        Si = np.linalg.inv(S)
        K = Sig @ L.T @ Si
        cond = Sig - K @ L @ Sig
        cond = 0.5 * (cond + cond.T)
        groups = _groups(A, cond) if A.shape[0] else []
        out.append((A, b, L, lv, Si, np.linalg.cholesky(S), np.linalg.slogdet(2 * math.pi * S)[1],
                    K, np.eye(n) - K @ L, cond, groups, not np.any(L)))
    return tuple(out)


@dataclass(frozen=True)
class NoisyValues:
    """At N omegas and M outputs y each: log Z (N, M), g (N, M, n), dg (N, M, n, n) (order 2),
    their bars (g_error, dg_error; Z_relative_error on Z), and each piece's polytope log-mass
    log_P (K, N, M) with its relative bar P_relative_error."""

    log_Z: np.ndarray
    Z_relative_error: np.ndarray
    g: np.ndarray
    g_error: np.ndarray
    dg: np.ndarray | None
    dg_error: np.ndarray | None
    log_P: np.ndarray
    P_relative_error: np.ndarray
    seconds: float


def _one_row(a, b, omega, cov, order):
    """A single half-space {a . h <= b}: log P = log Phi(t), t = (b - a . omega) / s, s^2 = a cov a;
    g_P = -a lambda / s, dg_P = -(a a^T / s^2) lambda (t + lambda), lambda = phi(t) / Phi(t); bars:
    1e-15 relative plus the rounding of t (THEORY 1.4, closed form)."""
    s = math.sqrt(float(a @ cov @ a))
    t = (b - omega @ a) / s
    logP = log_ndtr(t)
    lam = np.exp(-0.5 * t * t - logP) / math.sqrt(2 * math.pi)
    dt = 4 * np.finfo(float).eps * (abs(b) + np.abs(omega) @ np.abs(a)) / s
    rel = 1e-15 + lam * dt
    g = -np.outer(lam / s, a)
    ge = np.abs(g) * (1e-14 + (1.0 + np.abs(t) + lam)[:, None] * dt[:, None])
    dg = dge = None
    if order == 2:
        k = lam * (t + lam)
        dg = -k[:, None, None] * np.outer(a, a)[None] / (s * s)
        dge = np.abs(dg) * (1e-13 + (2.0 + np.abs(t) + 2 * lam)[:, None, None]
                            * dt[:, None, None] / np.maximum(k, 1e-300)[:, None, None])
    return logP, rel, g, ge, dg, dge


def _polytope(A, b, groups, omega, cov, order, rule):
    """log P, g_P, dg_P (order 2) and bars of {A h <= b}, h ~ N(omega, cov), group by group
    (one row: closed form; more: the polytope engine)."""
    N, n = omega.shape
    logP, rel = np.zeros(N), np.zeros(N)
    gP, ge = np.zeros((N, n)), np.zeros((N, n))
    dgP = dge = None
    if order == 2:
        dgP, dge = np.zeros((N, n, n)), np.zeros((N, n, n))
    for idx in groups:
        if len(idx) == 1:
            lp, rl, g1, e1, d1, de1 = _one_row(A[idx[0]], float(b[idx[0]]), omega, cov, order)
            logP, rel, gP, ge = logP + lp, rel + rl, gP + g1, ge + e1
            if order == 2:
                dgP, dge = dgP + d1, dge + de1
            continue
        mo = pt.gaussian_polytope(A=A[idx], b=b[idx], omega=omega, cov=cov, order=order,
                                  rule=rule)
        logP = logP + mo.log_mass
        rel = rel + mo.mass_relative_error
        gP = gP + mo.g_out
        ge = ge + mo.g_out_error
        if order == 2:
            dgP = dgP + mo.dg_out
            dge = dge + mo.dg_out_error
    return logP, rel, gP, ge, dgP, dge


def z_out(ch: NoisyPolyhedralOutput, *, omega, y, V: float, order: int = 1,
          rule: pt.PolytopeRule = pt.DEFAULT_RULE) -> NoisyValues:
    """log Z_out, g_out and (order 2) dg_out at omega (N, n) and y (N, M, p) (or (N, p): M = 1),
    h ~ N(omega, V C) (module docstring; the formulas of
    :func:`aim_sym.numerics.polytope.noisy_channel_z_out`). Pieces whose output does not move
    with h (L = 0) integrate their polytope once per omega."""
    require(isinstance(V, (int, float)) and math.isfinite(V) and V > 0, "V", "a finite real > 0",
            V)
    require(order in (1, 2), "order", "1 or 2", order)
    t0 = time.perf_counter()
    n, p = ch.dim, ch.out_dim
    om = np.atleast_2d(np.asarray(omega, dtype=float))
    require(om.ndim == 2 and om.shape[1] == n and np.all(np.isfinite(om)), "omega",
            f"finite, {n} entries per row", om.shape)
    Y = np.asarray(y, dtype=float)
    if Y.ndim == 2:
        Y = Y[:, None, :]
    N = om.shape[0]
    require(Y.ndim == 3 and Y.shape[0] == N and Y.shape[2] == p and np.all(np.isfinite(Y)), "y",
            f"finite, (N, M, {p}) or (N, {p}) with N = {N}", Y.shape)
    M = Y.shape[1]
    logs, gs, ges, dgs, dges, rels, logPs = [], [], [], [], [], [], []
    for A, b, L, lv, Si, _, logdet, K, Mk, cond, groups, fixed in _frames(ch, float(V)):
        r = Y - (om @ L.T)[:, None, :] - lv  # (N, M, p)
        log_n = -0.5 * np.einsum("nmi,ij,nmj->nm", r, Si, r) - 0.5 * logdet
        g_k = np.einsum("nmi,ij,jk->nmk", r, Si, L)
        dg_k = np.broadcast_to(-L.T @ Si @ L, (N, M, n, n)) if order == 2 else None
        logP = np.zeros((N, M))
        rel = np.zeros((N, M))
        ge_k = np.zeros((N, M, n))
        dge_k = np.zeros((N, M, n, n)) if order == 2 else None
        if groups:
            if fixed:  # the conditional law of h does not depend on y: once per distinct omega
                uniq, inv = np.unique(om, axis=0, return_inverse=True)
                inv = inv.reshape(-1)
                lp, rl, gP, ge, dgP, dge = _polytope(A, b, groups, uniq, cond, order, rule)
                lp, rl = lp[inv, None], rl[inv, None]
                gP, ge = gP[inv, None, :], ge[inv, None, :]
                if order == 2:
                    dgP, dge = dgP[inv, None], dge[inv, None]
            else:
                mean = (om[:, None, :] + r @ K.T).reshape(N * M, n)
                lp, rl, gP, ge, dgP, dge = _polytope(A, b, groups, mean, cond, order, rule)
                lp, rl = lp.reshape(N, M), rl.reshape(N, M)
                gP, ge = gP.reshape(N, M, n), ge.reshape(N, M, n)
                if order == 2:
                    dgP, dge = dgP.reshape(N, M, n, n), dge.reshape(N, M, n, n)
            logP = logP + lp
            rel = rel + rl
            g_k = g_k + gP @ Mk
            aM = np.abs(Mk)
            ge_k = ge_k + ge @ aM
            if order == 2:
                dg_k = dg_k + np.einsum("ai,nmab,bj->nmij", Mk, dgP, Mk)
                dge_k = dge_k + np.einsum("ai,nmab,bj->nmij", aM, dge, aM)
        logs.append(log_n + logP)
        logPs.append(np.broadcast_to(logP, (N, M)))
        rels.append(np.broadcast_to(rel, (N, M)))
        gs.append(g_k)
        ges.append(np.broadcast_to(ge_k, (N, M, n)))
        if order == 2:
            dgs.append(dg_k)
            dges.append(np.broadcast_to(dge_k, (N, M, n, n)))
    logs = np.array(logs)  # (K, N, M)
    top = logs.max(axis=0)
    live = np.isfinite(top)
    top = np.where(live, top, 0.0)
    wts = np.exp(logs - top)
    tot = wts.sum(axis=0)
    with np.errstate(divide="ignore"):
        log_Z = np.where(live, top + np.log(np.where(live, tot, 1.0)), -np.inf)
    pi = np.where(live, wts / np.where(live, tot, 1.0), 0.0)
    gs, ges = np.array(gs), np.array(ges)
    rels = np.where(pi > 0, np.array(rels), 0.0)
    g = np.einsum("knm,knmi->nmi", pi, gs)
    g_err = np.einsum("knm,knmi->nmi", pi, ges + np.abs(gs - g) * rels[..., None])
    eps = np.finfo(float).eps
    dg = dg_err = None
    if order == 2:
        dgs, dges = np.array(dgs), np.array(dges)
        second = dgs + gs[..., :, None] * gs[..., None, :]
        T = np.einsum("knm,knmij->nmij", pi, second)
        dg = T - g[..., :, None] * g[..., None, :]
        ag = np.abs(gs)
        T_err = np.einsum("knm,knmij->nmij", pi, dges + ges[..., :, None] * ag[..., None, :]
                          + ag[..., :, None] * ges[..., None, :]
                          + np.abs(second - T) * rels[..., None, None])
        a = np.abs(g)
        dg_err = (T_err + g_err[..., :, None] * a[..., None, :] + a[..., :, None] * g_err[..., None, :]
                  + 4 * eps * (np.abs(T) + a[..., :, None] * a[..., None, :]))
    rel = np.einsum("knm,knm->nm", pi, rels) + 4 * eps * len(ch.pieces)
    return NoisyValues(log_Z=log_Z, Z_relative_error=rel, g=g, g_error=g_err, dg=dg,
                       dg_error=dg_err, log_P=np.array(logPs),
                       P_relative_error=np.array(rels) + 4 * eps,
                       seconds=time.perf_counter() - t0)


# ----------------------------------------------------------------------------- rules over (omega, u)
@lru_cache(maxsize=16)
def _sobol_normals(dim: int, m: int, scrambles: int, seed: int) -> np.ndarray:
    """(scrambles, 2^m, dim) standard normals from independently scrambled Sobol sequences."""
    out = []
    for s in range(scrambles):
        u = qmc.Sobol(d=dim, scramble=True, seed=np.random.default_rng([seed, s, dim])
                      ).random_base2(m)
        out.append(ndtri(np.clip(u, 1e-300, 1.0 - 2.0 ** -53)))
    return np.stack(out)


@lru_cache(maxsize=8)
def _trapezoid_tensor(dim: int, step: float) -> tuple[np.ndarray, np.ndarray, float]:
    """Tensor trapezoid nodes of ``step`` on [-TRAP_WINDOW, TRAP_WINDOW]^dim with weights
    N(x; 0, I) step^dim, nodes of weight below 1e-17 of the largest dropped; also the weight
    dropped (window and pruning: the N(0, I) mass outside the kept ball, bounded by a chi^2
    tail)."""
    k = int(math.floor(TRAP_WINDOW / step))
    x = np.arange(-k, k + 1) * step
    w = np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi) * step
    grids = np.meshgrid(*([x] * dim), indexing="ij")
    r2 = sum(g.ravel() ** 2 for g in grids)
    keep = r2 <= 2 * math.log(1e17)
    wt = np.ones(int(keep.sum()))
    for g in np.meshgrid(*([w] * dim), indexing="ij"):
        wt = wt * g.ravel()[keep]
    lost = float(chi2.sf(2 * math.log(1e17), dim))
    return np.stack([g.ravel()[keep] for g in grids], axis=1), wt, lost


@lru_cache(maxsize=16)
def _hermite_tensor(dim: int, order: int) -> tuple[np.ndarray, np.ndarray]:
    """Tensor Gauss-Hermite nodes (order^dim, dim) and weights for E over N(0, I_dim)."""
    x, w = np.polynomial.hermite_e.hermegauss(order)
    w = w / w.sum()
    grids = np.meshgrid(*([x] * dim), indexing="ij")
    wg = np.meshgrid(*([w] * dim), indexing="ij")
    wt = np.ones(order ** dim)
    for g in wg:
        wt = wt * g.ravel()
    keep = wt > 1e-18 * wt.max()
    return np.stack([g.ravel() for g in grids], axis=1)[keep], wt[keep]


def _piece_sums(ch: NoisyPolyhedralOutput, omega: np.ndarray, u: np.ndarray, *, V: float,
                rule: pt.PolytopeRule) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per node (omega_i, u_i): sum_k P_k |g|_C^2, sum_k P_k log Z at y = L_k omega + l_k +
    S_k^(1/2) u (module docstring), and the engine's bar on the first."""
    frames = _frames(ch, float(V))
    Y = np.stack([omega @ L.T + lv + u @ cS.T for _, _, L, lv, _, cS, *_ in frames], axis=1)
    out = z_out(ch, omega=omega, y=Y, V=V, order=1, rule=rule)
    k = np.arange(len(frames))
    logP = out.log_P[k, :, k].T  # (N, K): piece k's mass at its own y
    relP = out.P_relative_error[k, :, k].T
    P = np.exp(logP)
    c = np.asarray(ch.weights, dtype=float)
    F = np.einsum("nki,i->nk", out.g ** 2, c)
    Fe = 2 * np.einsum("nki,nki,i->nk", np.abs(out.g), out.g_error, c)
    logZ = np.where(P > 0, out.log_Z, 0.0)
    e = (P * F).sum(axis=1)
    psi = (P * logZ).sum(axis=1)
    bar = (P * (Fe + relP * F)).sum(axis=1)
    return e, psi, bar


def output_moments(ch: NoisyPolyhedralOutput, *, q: float, V: float,
                   points: tuple[int, int] = QMC_POINTS, seed: int = SEED,
                   rule: pt.PolytopeRule = FAST_RULE) -> dict:
    """E(q, V) and Psi_out(q, V) by randomised QMC over (omega, u) in R^(n + p) (2^points[0]
    points in each of points[1] scrambles, seeded): the scrambles' mean, its standard error
    (E_se, psi_se) and the engine's bar on E (engine_bar); at q = 0 the same over u only."""
    require(math.isfinite(q) and q >= 0, "q", "a finite real >= 0", q)
    require(isinstance(V, (int, float)) and math.isfinite(V) and V > 0, "V", "a finite real > 0",
            V)
    require(len(points) == 2 and 4 <= points[0] <= 16 and 2 <= points[1] <= 64, "points",
            "(log2 points in 4..16, scrambles in 2..64)", points)
    n, p = ch.dim, ch.out_dim
    dim = p if q == 0 else n + p
    z = _sobol_normals(dim, points[0], points[1], seed)
    R, N = z.shape[:2]
    flat = z.reshape(R * N, dim)
    if q == 0:
        omega, u = np.zeros((R * N, n)), flat
    else:
        omega = math.sqrt(q) * flat[:, :n] * np.sqrt(np.asarray(ch.weights, dtype=float))
        u = flat[:, n:]
    e, psi, bar = _piece_sums(ch, omega, u, V=V, rule=rule)
    e_r, psi_r = e.reshape(R, N).mean(axis=1), psi.reshape(R, N).mean(axis=1)
    return {"E": float(e_r.mean()), "E_se": float(e_r.std(ddof=1) / math.sqrt(R)),
            "psi": float(psi_r.mean()), "psi_se": float(psi_r.std(ddof=1) / math.sqrt(R)),
            "engine_bar": float(bar.mean()), "nodes": R * N}


def _step_scale(ch: NoisyPolyhedralOutput, V: float) -> float:
    """min(1, sqrt(lambda / STEP_REFERENCE)), lambda the smallest generalised eigenvalue of Delta
    against L V C L^T over the pieces (restricted to the range of L; pieces with L = 0 do not
    count): the features of the u-integrand are ~sqrt(lambda) wide."""
    D = np.asarray(ch.Delta, dtype=float)
    Sig = V * np.diag(np.asarray(ch.weights, dtype=float))
    lam = math.inf
    for k in ch.pieces:
        L = np.asarray(k.L, dtype=float)
        if not np.any(L):
            continue
        U, sv, _ = np.linalg.svd(L @ Sig @ L.T)
        U = U[:, sv > 1e-12 * sv.max()]
        G = U.T @ L @ Sig @ L.T @ U
        Dr = U.T @ D @ U
        Gi = np.linalg.cholesky(G)
        X = np.linalg.solve(Gi, np.linalg.solve(Gi, Dr).T)
        lam = min(lam, float(np.linalg.eigvalsh(0.5 * (X + X.T)).min()))
    return min(1.0, math.sqrt(lam / STEP_REFERENCE)) if math.isfinite(lam) else 1.0


def _trapezoid_moments(ch: NoisyPolyhedralOutput, *, V: float, step: float,
                       rule: pt.PolytopeRule) -> tuple[float, float, float, int]:
    """E(0, V), Psi_out(0, V), the engine's bar (+ the dropped weight times the largest node
    value) by the tensor trapezoid rule of ``step`` over u, and the number of nodes."""
    x, w, lost = _trapezoid_tensor(ch.out_dim, float(step))
    e, psi, bar = _piece_sums(ch, np.zeros((len(w), ch.dim)), x, V=V, rule=rule)
    return float(e @ w), float(psi @ w), float(bar @ w) + lost * float(np.max(np.abs(e))), len(w)


def output_estimate(ch: NoisyPolyhedralOutput, *, q: float, V: float,
                    points: tuple[int, int] = QMC_POINTS, steps: tuple = Q0_STEPS,
                    rule: pt.PolytopeRule = FAST_RULE) -> tuple[Estimate, Estimate]:
    """E(q, V) and Psi_out(q, V) with error bars: at q = 0 the tensor trapezoid rule over u,
    three steps ``steps`` (scaled by :func:`_step_scale`; bar = the sum of the two differences
    + the engine's bar); at q > 0 randomised QMC (bar =
    3 standard errors + the engine's bar; extra: se)."""
    if q == 0:
        require(len(steps) == 3 and 0.05 <= steps[2] < steps[1] < steps[0] <= 1.0, "steps",
                "three decreasing steps in [0.05, 1]", steps)
        w = _step_scale(ch, V)
        runs = [_trapezoid_moments(ch, V=V, step=st * w, rule=rule) for st in steps]
        (e0, p0, _, _), (e1, p1, _, _), (e2, p2, b2, n2) = runs
        # the aliasing error oscillates with the step before the rule is geometric (steps
        # 0.7, 0.6, 0.5 at Delta = 0.1: differences 2.8e-2, 7.6e-3, error of 0.5 1.0e-2), so
        # the bar is the sum of both differences, not the last one
        bar = abs(e1 - e0) + abs(e2 - e1) + b2
        pbar = abs(p1 - p0) + abs(p2 - p1)
        method = (f"tensor trapezoid rule over y (p = {ch.out_dim} directions), steps "
                  f"{', '.join(f'{st * w:.3g}' for st in steps)} ({n2} nodes), piece by piece, "
                  "polytope engine per node; error = the sum of the two differences + the "
                  "engine's bar")
        return (Estimate(e2, bar, method, extra={"steps": [e0, e1, e2]}),
                Estimate(p2, pbar, method, extra={"steps": [p0, p1, p2]}))
    mo = output_moments(ch, q=q, V=V, points=points, rule=rule)
    method = (f"randomised QMC over (omega, y) (scrambled Sobol, {points[1]} x 2^{points[0]} "
              f"points, seed {SEED}), piece by piece; error = {NSE:g} standard errors + the "
              "engine's bar")
    return (Estimate(mo["E"], NSE * mo["E_se"] + mo["engine_bar"], method,
                     extra={"se": mo["E_se"]}),
            Estimate(mo["psi"], NSE * mo["psi_se"], method, extra={"se": mo["psi_se"]}))


def weak_threshold_noisy(ch: NoisyPolyhedralOutput, *, steps: tuple = Q0_STEPS,
                         rule: pt.PolytopeRule = pt.DEFAULT_RULE) -> Estimate:
    """alpha_bar_c = 1 / (2 E(0, 1)) (THEORY 1.2, 1.4; the convention of
    :func:`aim_sym.numerics.polyhedral_se.weak_threshold`): E at omega = 0, V = 1 by tensor
    trapezoid rule over y; error = the steps' difference + the engine's bar, propagated."""
    E, _ = output_estimate(ch, q=0.0, V=1.0, steps=steps, rule=rule)
    require(E.value > 0, "channel", "informative at q = 0 (E[g^2] > 0)", E.value)
    a = 1.0 / (2.0 * E.value)
    err = E.error / (2.0 * E.value ** 2) + 4 * np.finfo(float).eps * a
    return Estimate(a, err, "1 / (2 E(0, 1)), E = int dy |grad Z_out|_C^2 / Z_out at omega = 0 "
                    f"by the tensor trapezoid rule over y (steps {steps} x the features' width), "
                    "piece by piece with the Gaussian polytope engine; error = the steps' differences "
                    "+ the engine's bar, propagated", extra={"E": E.value, "E_error": E.error})


def check_nishimori(ch: NoisyPolyhedralOutput, *, omega, V: float, samples: int = 2000,
                    seed: int = 0, rule: pt.PolytopeRule = pt.DEFAULT_RULE) -> dict:
    """Nishimori at one omega (THEORY 1.2): y drawn from the channel (seeded), the sample means
    of g and of g g^T + dg (both 0 in expectation) and their standard errors."""
    om = np.asarray(omega, dtype=float).reshape(1, ch.dim)
    rng = np.random.default_rng(seed)
    c = np.asarray(ch.weights, dtype=float)
    h = om + math.sqrt(V) * rng.standard_normal((samples, ch.dim)) * np.sqrt(c)
    y = clean_output(ch, h) + rng.standard_normal((samples, ch.out_dim)) @ np.linalg.cholesky(
        np.asarray(ch.Delta, dtype=float)).T
    out = z_out(ch, omega=np.repeat(om, samples, axis=0), y=y, V=V, order=2, rule=rule)
    g = out.g[:, 0]
    s = (out.dg + out.g[..., :, None] * out.g[..., None, :])[:, 0]
    return {"g_mean": g.mean(axis=0), "g_se": g.std(axis=0, ddof=1) / math.sqrt(samples),
            "second_mean": s.mean(axis=0),
            "second_se": s.std(axis=0, ddof=1) / math.sqrt(samples),
            "g_error": float(out.g_error.max()), "dg_error": float(out.dg_error.max())}


def clean_output(ch: NoisyPolyhedralOutput, h: np.ndarray) -> np.ndarray:
    """The noiseless output L_k h + l_k of the piece containing each row of h."""
    out = np.full((h.shape[0], ch.out_dim), np.nan)
    for k in ch.pieces:
        A = np.asarray(k.A, dtype=float).reshape(len(k.A), ch.dim) if k.A else np.zeros((0, ch.dim))
        inside = np.all(h @ A.T <= np.asarray(k.b, dtype=float), axis=1)
        out[inside] = h[inside] @ np.asarray(k.L, dtype=float).T + np.asarray(k.l, dtype=float)
    require(bool(np.all(np.isfinite(out))), "pieces", "a tiling of R^n (every h in a piece)",
            int(np.sum(~np.isfinite(out[:, 0]))))
    return out


# ----------------------------------------------------------------------------- SE fixed points
#: the scan of V for sign changes of the SE residual
V_SCAN = (0.05, 0.1, 0.2, 0.35, 0.5, 0.7, 0.85, 1.0)
#: QMC points of the SE: (scan and Brent's method, the Newton step that checks it). Noisy ReLU
#: T = 2, Delta = 0.1, rho = alpha = 0.5 against the scalar route's V = 0.08294949: 2^9/2^11
#: 0.0831494 +- 8.2e-4, 2^10/2^12 0.0830844 +- 6.0e-4, 2^11/2^13 0.0829350 +- 4.2e-4 (14 s CPU)
SE_POINTS = ((11, 8), (13, 8))


def _residual(ch, *, alpha: float, rho: float, V: float, points, rule) -> tuple:
    """mmse(1 / q_hat) - V with q_hat = 2 alpha E(Q0 - V, V) (THEORY 1.1); also q_hat, Psi_out
    and the bar on E (3 standard errors + the engine's)."""
    mo = output_moments(ch, q=1.0 + rho - V, V=V, points=points, rule=rule)
    q_hat = 2 * alpha * mo["E"]
    bar = NSE * mo["E_se"] + mo["engine_bar"]
    return float(wishart.mmse(1.0 / q_hat, rho=rho)) - V, q_hat, mo["psi"], bar


def fixed_points_noisy(ch: NoisyPolyhedralOutput, *, alpha: float, rho: float,
                       points: tuple = SE_POINTS, rule: pt.PolytopeRule = FAST_RULE) -> list:
    """The SE fixed points V = mmse(1 / (2 alpha E(Q0 - V, V))) with V in [0.05, 1] (THEORY 1.1):
    sign changes on :data:`V_SCAN`, Brent's method with E on the QMC rule ``points[0]`` (fixed
    scrambles: a smooth function of V), one Newton step on ``points[1]``; error = that step +
    the bars of E (3 standard errors + engine) and of the prior, over |1 - slope|. Rows as
    :func:`aim_sym.numerics.polyhedral_se.fixed_points`: q, q_hat, mmse, error, phi, slope,
    stable, rule, seconds; bayes_optimal marks the stable one of largest phi."""
    require(math.isfinite(alpha) and alpha > 0, "alpha", "a finite real > 0", alpha)
    require(math.isfinite(rho) and rho > 0, "rho", "a finite real > 0", rho)
    t0 = time.perf_counter()
    coarse, fine = points
    r_scan = [_residual(ch, alpha=alpha, rho=rho, V=v, points=coarse, rule=rule)[0]
              for v in V_SCAN]
    if r_scan[0] < 0:
        raise ConvergenceError(f"the SE residual is already negative at V = {V_SCAN[0]}: a fixed "
                               "point lies below the resolved range", last_iterate=V_SCAN[0],
                               residual=r_scan[0])
    out = []
    for (a, ra), (b, rb) in zip(zip(V_SCAN, r_scan), zip(V_SCAN[1:], r_scan[1:])):
        if ra * rb > 0:
            continue

        def f(v):
            return _residual(ch, alpha=alpha, rho=rho, V=v, points=coarse, rule=rule)[0]

        v0 = brentq(f, a, b, xtol=1e-9, rtol=1e-12)
        r1, q_hat, psi, bar = _residual(ch, alpha=alpha, rho=rho, V=v0, points=fine, rule=rule)
        # the local slope on the coarse rule (a secant over 1e-3)
        dv = 1e-3 * min(v0, 1.0)
        dr = (f(v0 + dv) - f(v0 - dv)) / (2 * dv)
        out.append({**ps.newton_row(v0=v0, r1=r1, dr=dr, q_hat=q_hat, psi=psi, bar=bar,
                                    alpha=alpha, rho=rho, tol=1e-9),
                    "rule": f"randomised QMC over (omega, y), 2^{coarse[0]} and 2^{fine[0]} "
                    f"points x {fine[1]} scrambles",
                    "seconds": time.perf_counter() - t0})
    if not out:
        raise ConvergenceError(f"no SE fixed point bracketed in V in [{V_SCAN[0]}, 1]",
                               last_iterate=list(V_SCAN), residual=r_scan)
    stable = [f for f in out if f["stable"]] or out
    best = max(stable, key=lambda f: f["phi"])
    for f in out:
        f["bayes_optimal"] = f is best
    return out


# ----------------------------------------------------------------------------- generalisation error
#: Gauss-Hermite orders over omega of e_gen (coarse, fine): the integrand varies on sqrt(V)
#: against the weight's sqrt(q), so small V needs high orders (their difference is the bar)
EGEN_ORDERS = (24, 32)
#: below V = EGEN_FACE_BELOW q the face rule over omega (polyhedral_se.FACE_STEPS) instead,
#: where the pieces have a face frame spanning omega
EGEN_FACE_BELOW = 0.3
#: Monte Carlo samples of the plug-in error
PLUGIN_SAMPLES = 400_000


def _second_moments(ch: NoisyPolyhedralOutput, omega: np.ndarray, *, V: float, metric,
                    rule) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per omega: y_hat = E[f(h) | omega], E[|f(h)|_W^2 | omega] (f the noiseless output) and
    the engine's bar on E[|f|^2] - |y_hat|^2, from each piece's mass P, E[h 1_k] = P omega +
    Sigma grad P and E[h h^T 1_k] = P omega omega^T + ... (Sigma = V C; THEORY 1.5)."""
    n = ch.dim
    Sig = V * np.diag(np.asarray(ch.weights, dtype=float))
    W = np.diag(np.asarray(metric, dtype=float))
    N = omega.shape[0]
    yhat = np.zeros((N, ch.out_dim))
    second = np.zeros(N)
    bar = np.zeros(N)
    for k in ch.pieces:
        A = np.asarray(k.A, dtype=float).reshape(len(k.A), n) if k.A else np.zeros((0, n))
        L, lv = np.asarray(k.L, dtype=float), np.asarray(k.l, dtype=float)
        if A.shape[0]:
            logP, rel, gP, ge, dgP, dge = _polytope(A, np.asarray(k.b, dtype=float),
                                                    _groups(A, Sig), omega, Sig, 2, rule)
            P = np.exp(logP)
            Pe = P * rel
            mean = omega + gP @ Sig  # E[h | piece]
            # Cov[h | piece] = Sigma + Sigma dg_out Sigma
            cov = Sig + np.einsum("ij,njk,kl->nil", Sig, dgP, Sig)
            me = ge @ Sig
            ce = np.einsum("ij,njk,kl->nil", Sig, dge, Sig)
        else:
            P, Pe = np.ones(N), np.zeros(N)
            mean, cov = omega, np.broadcast_to(Sig, (N, n, n))
            me, ce = np.zeros((N, n)), np.zeros((N, n, n))
        fy = mean @ L.T + lv
        LWL = L.T @ W @ L
        s2 = np.einsum("ni,ij,nj->n", fy, W, fy) + np.einsum("ij,nji->n", LWL, cov)
        yhat += P[:, None] * fy
        second += P * s2
        dfy = me @ np.abs(L).T
        bar += (Pe * s2 + P * (2 * np.einsum("ni,ij,nj->n", np.abs(fy), np.abs(W), dfy)
                               + np.einsum("ij,nji->n", np.abs(LWL), ce)))
    return yhat, second, bar


@lru_cache(maxsize=16)
def face_channel(ch: NoisyPolyhedralOutput) -> ps.PolyhedralOutput:
    """The pieces' polytopes as a (noiseless) polyhedral channel, one outcome per piece: its
    face frame (:func:`aim_sym.numerics.polyhedral_se.face_frame`) gives the face rule over
    omega."""
    terms, basis = [], []
    for k in ch.pieces:
        terms.append((ps.Term(1.0, tuple(map(tuple, k.A)), tuple(k.b)),))
        for row in k.A:
            if np.linalg.matrix_rank(np.array(basis + [list(row)]), tol=1e-10) > len(basis):
                basis.append(list(row))
    return ps.PolyhedralOutput(outcomes=tuple(range(len(ch.pieces))), terms=tuple(terms),
                               weights=ch.weights, basis=tuple(map(tuple, basis)), name=ch.name)


def _face_ok(ch: NoisyPolyhedralOutput) -> bool:
    """The face rule over omega serves e_gen when the pieces' normals are n distinct directions
    with one offset each (then z = F omega determines omega)."""
    fc = face_channel(ch)
    return len(fc.basis) == ch.dim and ps.face_frame(fc) is not None


def _egen_sum(ch, *, q: float, V: float, order: int | None = None, metric, rule,
              step: float | None = None) -> tuple[float, float]:
    """E_omega [E[|f(h)|_W^2 | omega] - |y_hat(omega)|_W^2] over omega ~ N(0, q C) by tensor
    Gauss-Hermite of ``order`` per axis (or the face rule of ``step``), and the engine's bar
    (with the face rule's dropped weight times the largest node value)."""
    lost = 0.0
    if q == 0:
        omega, w = np.zeros((1, ch.dim)), np.ones(1)
    elif step is not None:
        fc = face_channel(ch)
        omega, w, pruned = ps._face_nodes(fc, ps.face_frame(fc), q, V, step)
        lost = pruned + ch.dim * math.erfc(ps.FACE_WINDOW / math.sqrt(2.0))
    else:
        x, w = _hermite_tensor(ch.dim, order)
        omega = math.sqrt(q) * x * np.sqrt(np.asarray(ch.weights, dtype=float))
    yhat, second, bar = _second_moments(ch, omega, V=V, metric=metric, rule=rule)
    node = second - np.einsum("ni,i,ni->n", yhat, np.asarray(metric, dtype=float), yhat)
    return float(node @ w), float(bar @ w) + lost * float(np.max(np.abs(node)))


def generalisation_error_noisy(ch: NoisyPolyhedralOutput, *, q: float, V: float,
                               V_error: float = 0.0, metric=None,
                               orders: tuple[int, int] = EGEN_ORDERS,
                               rule: pt.PolytopeRule = FAST_RULE,
                               plugin_samples: int = PLUGIN_SAMPLES, seed: int = 0) -> Estimate:
    """e_gen = E |y - E[y | omega]|_W^2 (THEORY 1.5: the Bayes-optimal predictor is the
    posterior-predictive mean; |v|_W^2 = sum_i metric_i v_i^2, metric default 1) at (q, V):
    tr(W Delta) + E_omega [E[|f(h)|_W^2 | omega] - |E[f(h) | omega]|_W^2], f the noiseless
    output, on tensor Gauss-Hermite over omega (orders ``orders``; below V = 0.3 q the face rule of
    polyhedral_se where the pieces have a face frame spanning omega): error = their difference +
    the engine's bar) plus 2 |d e_gen / dV| V_error (central difference at Q0 fixed). extra:
    plugin (E |y - f(omega)|_W^2: the noiseless output at omega used as the prediction) by
    seeded Monte Carlo, plugin_error (3 standard errors + 2 |slope| V_error)."""
    require(math.isfinite(q) and q >= 0, "q", "a finite real >= 0", q)
    require(math.isfinite(V) and V > 0, "V", "a finite real > 0", V)
    require(math.isfinite(V_error) and V_error >= 0, "V_error", "a finite real >= 0", V_error)
    p = ch.out_dim
    metric = np.ones(p) if metric is None else np.asarray(metric, dtype=float)
    require(metric.shape == (p,) and np.all(np.isfinite(metric)) and np.all(metric >= 0),
            "metric", f"{p} finite reals >= 0", metric.shape)
    noise = float(np.trace(np.diag(metric) @ np.asarray(ch.Delta, dtype=float)))
    face = q > 0 and V < EGEN_FACE_BELOW * q and _face_ok(ch)
    fine = {"step": ps.FACE_STEPS[1]} if face else {"order": orders[1]}
    coarse = {"step": ps.FACE_STEPS[0]} if face else {"order": orders[0]}
    b1, bar1 = _egen_sum(ch, q=q, V=V, metric=metric, rule=rule, **fine)
    b0, _ = _egen_sum(ch, q=q, V=V, metric=metric, rule=rule, **coarse)
    err = abs(b1 - b0) + bar1
    slope = None
    if V_error > 0:
        d = min(1e-3 * V, 0.5 * q) if q > 0 else 1e-3 * V
        up = min(d, q)
        hi = _egen_sum(ch, q=q - up, V=V + up, metric=metric, rule=rule, **coarse)[0]
        lo = _egen_sum(ch, q=q + d, V=V - d, metric=metric, rule=rule, **coarse)[0]
        slope = abs(hi - lo) / (up + d)
        err += 2 * slope * V_error
    plug, plug_se = _plugin_mc(ch, q=q, V=V, metric=metric, samples=plugin_samples, seed=seed)
    plug_slope = 0.0
    if V_error > 0:
        d = min(0.05 * V, 0.5 * q) if q > 0 else 0.05 * V
        up = min(d, q)
        hi = _plugin_mc(ch, q=q - up, V=V + up, metric=metric, samples=plugin_samples, seed=seed)[0]
        lo = _plugin_mc(ch, q=q + d, V=V - d, metric=metric, samples=plugin_samples, seed=seed)[0]
        plug_slope = abs(hi - lo) / (up + d)
    return Estimate(b1 + noise, err,
                    "tr(W Delta) + E_omega Var[f(h) | omega] (posterior-predictive mean), "
                    + (f"face rule over omega, steps {ps.FACE_STEPS}" if face else
                       f"tensor Gauss-Hermite over omega, orders {orders[0]} and {orders[1]}")
                    + ", Gaussian polytope masses and moments per node; error = the two rules' "
                    "difference + the engine's bar (+ 2 |slope| V_error)",
                    extra={"plugin": plug, "plugin_error": NSE * plug_se + 2 * plug_slope * V_error,
                           "plugin_method": f"seeded Monte Carlo ({plugin_samples} samples) of "
                           "|y - f(omega)|_W^2, f the noiseless output; error = 3 standard errors",
                           "slope_V": slope, "noise": noise})


def _plugin_mc(ch, *, q: float, V: float, metric, samples: int, seed: int) -> tuple[float, float]:
    """E |y - f(omega)|_W^2 by seeded Monte Carlo (omega ~ N(0, q C), h | omega ~ N(omega, V C),
    y = f(h) + noise), and its standard error."""
    rng = np.random.default_rng(seed)
    c = np.sqrt(np.asarray(ch.weights, dtype=float))
    omega = math.sqrt(q) * rng.standard_normal((samples, ch.dim)) * c
    h = omega + math.sqrt(V) * rng.standard_normal((samples, ch.dim)) * c
    y = clean_output(ch, h) + rng.standard_normal((samples, ch.out_dim)) @ np.linalg.cholesky(
        np.asarray(ch.Delta, dtype=float)).T
    d = ((y - clean_output(ch, omega)) ** 2) @ metric
    return float(d.mean()), float(d.std(ddof=1) / math.sqrt(samples))
