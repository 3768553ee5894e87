"""State evolution of polyhedral channels whose events have rank > 3, by drawn outcomes and
randomised quasi-Monte Carlo (THEORY 1.1, 1.4, 1.5; docs/polyhedral_rank.md).

The SE output expectation of a discrete channel P(y | h) = sum_k w_k 1[A_k h <= b_k], with
h ~ N(omega, V C), C = diag(1 + delta_ab), omega ~ N(0, q C), is an expectation over the model:

    E(q, V) = E_omega sum_y Z_y |g_y|_C^2 = E_{omega, h, y} |g_y(omega)|_C^2,   y ~ P(. | h),

and g_y = (V C)^-1 (E[h | y, omega] - omega), so (Nishimori: sum_y Z_y Cov(h | y, omega) +
Cov_y E[h | y, omega] = V C)

    |g_y|_C^2 = n / V - tr(C^-1 Cov(h | y, omega)) / V^2      summed against Z_y.

Only the K directions the channel sees matter (in whitened coordinates (h - omega) / sqrt(C),
the span U of the rows' normals times sqrt(C)): the rest of h is independent of y, so n and
the covariance are replaced by K and the covariance of the projection onto U (less noise).

The drawn h is itself a sample of h given (y, omega); ``extra`` more are drawn by rejection
(h' ~ N(omega, V C), kept with probability P(y | h'); 1 / Z_y(omega) draws per sample, on
average over y the number of outcomes). The unbiased sample covariance of these 1 + extra
samples gives an unbiased estimate of the term above at each point: no inner quadrature, no
ratio bias. (omega, h, the uniform that picks y) come from independently scrambled Sobol sets,
the rejection draws from a seeded generator per scramble; each scramble's mean is unbiased,
and the error is t_(J-1, 0.995) times the standard error over the J scrambles (COVERAGE).

Psi_out(q, V) = E_omega sum_y Z_y log Z_y by thermodynamic integration along Q0 = q + V fixed
(d Psi_out / dq = E / 2 there, THEORY 1.1: the stationarity of Phi in q):
Psi_out(q) = Psi_out(0) + (q / 2) E_{s ~ U(0, q)} E(s, Q0 - s), the s-average one more Sobol
coordinate of the same drawn-outcome estimator, Psi_out(0) = sum_y Z_y log Z_y at omega = 0 by
the polytope engine (one evaluation).

e_gen (THEORY 1.5) of outcomes read as vectors r_y: E|r_y|^2 - E[r_y(h) . r_y(h')], h and h'
two draws given omega (both from the Sobol set); the plug-in E|r_y(h) - r_y(omega)|^2 with
y(omega) averaged over P(. | omega) exactly.

This module receives numbers only (:class:`aim_sym.numerics.polyhedral_se.PolyhedralOutput`).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
from scipy.optimize import brentq
from scipy.special import ndtri
from scipy.stats import qmc
from scipy.stats import t as student_t

from . import polyhedral_se as ps
from . import polytope as pt
from . import wishart
from .records import ConvergenceError, Estimate, bayes_optimal, require, standard_error

__all__ = ["Likelihood", "compile_likelihood", "output_e_qmc", "psi_out_qmc", "fixed_points_qmc",
           "generalisation_error_qmc", "coverage_factor", "auto_extra", "controlled_means",
           "POINTS", "SCRAMBLES", "EXTRA", "COVERAGE", "V_SCAN_QMC"]

#: Sobol points per scramble and scrambles of the served estimate (a power of 2; >= 4)
POINTS = 1 << 13
SCRAMBLES = 16
#: conditional samples drawn by rejection per point, beside the drawn h, by default
#: EXTRA_BUDGET // (number of outcomes) within [2, 32]: a kept sample costs about as many draws
#: as there are outcomes, so this keeps the cost per point about fixed (hardmax at T = 3,
#: (q, V) = (0.5, 0.7), covariance form: per-point standard deviation 3.0, 2.2, 1.6, 1.2 for 1,
#: 2, 4, 8 extra samples, 0.7 in the limit, ~36 draws per kept sample: 2 is near optimal;
#: channels with E << K / V need more: rank-4 orthant, E = 0.17: bar 0.036, 0.012, 0.0075
#: for 2, 8, 32)
EXTRA = 2
EXTRA_BUDGET = 48
#: two-sided coverage of the bars (Student t over the scrambles)
COVERAGE = 0.99
#: largest batch of rejection draws per point and round (batches double from EXTRA)
MAX_BATCH = 1 << 12
#: rejection draws allowed per point before giving up (a drawn y has Z_y(omega) > 0)
MAX_TRIALS = 1 << 24
#: the V scan of the fixed-point search (residual sign changes)
V_SCAN_QMC = (0.05, 0.1, 0.2, 0.35, 0.5, 0.7, 0.85, 1.0)
#: (points, scrambles) of the scan and of Brent's method on the residual
SCAN_SIZE = (1 << 10, 4)
BRENT_SIZE = (1 << 12, 4)
BRENT_XTOL = 2e-4
#: half-width of the three-point stencil of served estimates around Brent's root
STENCIL = 0.02
#: stencils at most (a new one centred on the root when it falls outside the last)
STENCILS = 2


@dataclass(frozen=True)
class Likelihood:
    """P(y | h) = sum_k w_k 1[A_k h <= b_k] as arrays: per outcome a tuple of (w, A, b)."""

    terms: tuple
    dim: int
    #: orthonormal basis (n, K) of the whitened directions the rows see
    seen: np.ndarray

    def of(self, h: np.ndarray, y: int) -> np.ndarray:
        """P(y | h) at the rows of ``h`` (N, n)."""
        p = np.zeros(h.shape[0])
        for w, A, b in self.terms[y]:
            p += w if A.shape[0] == 0 else w * np.all(h @ A.T <= b, axis=1)
        return p

    def all(self, h: np.ndarray) -> np.ndarray:
        """P(y | h) for every outcome: (N, Y)."""
        return np.stack([self.of(h, y) for y in range(len(self.terms))], axis=1)


def compile_likelihood(ch: ps.PolyhedralOutput) -> Likelihood:
    """The channel's likelihood as arrays (:class:`Likelihood`)."""
    n = ch.dim
    terms = tuple(tuple((float(t.weight), np.asarray(t.A, dtype=float).reshape(-1, n),
                         np.asarray(t.b, dtype=float)) for t in ts) for ts in ch.terms)
    sd = np.sqrt(np.asarray(ch.weights, dtype=float))
    rows = [A * sd for ts in terms for _, A, _ in ts if A.shape[0]]
    if rows:
        _, sv, Vt = np.linalg.svd(np.vstack(rows), full_matrices=False)
        seen = Vt[sv > 1e-10 * sv[0]].T
    else:
        seen = np.zeros((n, 0))
    require(seen.shape[1] >= 1, "channel", "at least one half-space (an informative channel)",
            0)
    return Likelihood(terms=terms, dim=n, seen=seen)


def coverage_factor(scrambles: int) -> float:
    """t_(J-1) quantile of two-sided :data:`COVERAGE` for J = ``scrambles``."""
    return float(student_t.ppf(0.5 + COVERAGE / 2, scrambles - 1))


def auto_extra(ch: ps.PolyhedralOutput) -> int:
    """The default number of rejection samples per point (:data:`EXTRA_BUDGET`)."""
    return int(min(32, max(EXTRA, EXTRA_BUDGET // max(len(ch.outcomes), 1))))


def _check_size(points: int, scrambles: int, extra: int) -> None:
    require(isinstance(points, int) and not isinstance(points, bool) and points >= 16
            and points & (points - 1) == 0, "points", "a power of 2, >= 16", points)
    require(isinstance(scrambles, int) and not isinstance(scrambles, bool) and scrambles >= 4,
            "scrambles", "an integer >= 4", scrambles)
    require(isinstance(extra, int) and not isinstance(extra, bool) and 1 <= extra <= 64,
            "extra", "an integer in 1..64", extra)


def _check_qv(q: float, V: float) -> None:
    require(isinstance(q, (int, float)) and math.isfinite(q) and q >= 0, "q",
            "a finite real >= 0", q)
    require(isinstance(V, (int, float)) and math.isfinite(V) and V > 0, "V", "a finite real > 0",
            V)


def _sobol(dim: int, points: int, rng: np.random.Generator) -> np.ndarray:
    return qmc.Sobol(d=dim, scramble=True, seed=rng).random_base2(int(math.log2(points)))


def _normal(u: np.ndarray) -> np.ndarray:
    return ndtri(np.clip(u, 1e-300, 1.0 - 1e-16))


def _draw_outcomes(lik: Likelihood, h: np.ndarray, u: np.ndarray) -> np.ndarray:
    """y ~ P(. | h) by the uniforms ``u`` (inverse CDF over the outcomes)."""
    P = np.clip(lik.all(h), 0.0, 1.0)
    tot = P.sum(axis=1)
    bad = np.abs(tot - 1.0) > 1e-9  # ties on a hyperplane (a null set) or a broken tiling
    require(int(bad.sum()) <= max(1, h.shape[0] // 1000), "channel",
            "probabilities that sum to 1 at almost every h", float(np.max(np.abs(tot - 1.0))))
    cum = np.cumsum(P, axis=1)
    y = (cum <= (u * tot)[:, None]).sum(axis=1)
    return np.minimum(y, P.shape[1] - 1)


def _conditional_sums(lik: Likelihood, omega: np.ndarray, y: np.ndarray, V: np.ndarray,
                      sd: np.ndarray, extra: int, rng: np.random.Generator):
    """For each row i, ``extra`` or more samples of h ~ N(omega_i, V_i C) given y_i by
    rejection (``sd`` = sqrt of C's diagonal). Returns S (N, K), the sum of the kept
    (h - omega) / sd projected on ``lik.seen``, Q (N,) the sum of their squared norms, c (N,)
    the counts, and the number of draws. The stopping rule looks at counts only, so the kept
    samples are iid given the counts (each from the law of h given y_i, omega_i)."""
    N, n = omega.shape
    U = lik.seen
    S = np.zeros((N, U.shape[1]))
    Q = np.zeros(N)
    c = np.zeros(N, dtype=np.int64)
    tried = np.zeros(N, dtype=np.int64)
    root_v = np.sqrt(V)
    for yy in np.unique(y):
        active = np.nonzero(y == yy)[0]
        batch = max(2, extra)
        while active.size:
            k = active.size
            xs = rng.standard_normal((k, batch, n)) * root_v[active, None, None]
            h = omega[active, None, :] + xs * sd
            p = lik.of(h.reshape(-1, n), int(yy)).reshape(k, batch)
            if np.all((p == 0.0) | (p == 1.0)):
                acc = p > 0.5
            else:
                acc = rng.random((k, batch)) < p
            xp = xs @ U  # the seen directions only
            S[active] += np.einsum("kbn,kb->kn", xp, acc)
            Q[active] += np.einsum("kbn,kbn,kb->k", xp, xp, acc)
            c[active] += acc.sum(axis=1)
            tried[active] += batch
            if int(tried[active].max()) > MAX_TRIALS:
                raise ConvergenceError(f"the rejection sampler needs more than {MAX_TRIALS} "
                                       "draws at a point (Z_y(omega) ~ 0)",
                                       last_iterate=int(yy), residual=None)
            active = active[c[active] < extra]
            batch = min(2 * batch, MAX_BATCH)
    return S, Q, c, int(tried.sum())


def _point_terms(lik: Likelihood, weights: np.ndarray, *, q: np.ndarray, V: np.ndarray,
                 u: np.ndarray, extra: int, rng: np.random.Generator
                 ) -> tuple[np.ndarray, np.ndarray, int]:
    """Two unbiased per-point estimates of E(q_i, V_i) from the rows of ``u`` (N, 2 n + 1:
    omega's normals, h's noise, the uniform that picks y) and the 1 + c samples x_k of
    (h - omega) / sqrt(C) given (y, omega), projected on the K seen directions: the
    covariance form K / V - tr(sample covariance) / V^2 (module docstring), and the
    difference D of the pair form (sum_{k != l} x_k . x_l / (m (m - 1)) / V^2, an unbiased
    |g_y|_C^2) minus it: a control variate of mean 0. The
    first is better where E ~ K / V (informative channels), the second where E << K / V.
    Returns (covariance form, D, draws)."""
    n = lik.dim
    sd = np.sqrt(weights)
    z = _normal(u[:, :2 * n])
    omega = np.sqrt(q)[:, None] * sd * z[:, :n]
    x0 = np.sqrt(V)[:, None] * z[:, n:]  # (h - omega) / sd
    y = _draw_outcomes(lik, omega + x0 * sd, u[:, 2 * n])
    S, Q, c, tried = _conditional_sums(lik, omega, y, V, sd, extra, rng)
    x0 = x0 @ lik.seen
    n = lik.seen.shape[1]
    S += x0
    Q += (x0 * x0).sum(axis=1)
    m = c + 1.0
    S2 = (S * S).sum(axis=1)
    trace = (Q - S2 / m) / (m - 1.0)  # unbiased tr(C^-1 Cov(h | y, omega))
    cov_form = n / V - trace / V ** 2
    pair_form = (S2 - Q) / (m * (m - 1.0)) / V ** 2
    return cov_form, pair_form - cov_form, tried


def controlled_means(e: np.ndarray, d: np.ndarray) -> np.ndarray:
    """Per scramble j (rows), the mean of e + lambda_j d with lambda_j = -Cov(e, d) / Var(d)
    fitted on the other scrambles' points (independent of scramble j, so each mean stays
    unbiased: d has mean 0)."""
    J = e.shape[0]
    out = np.empty(J)
    for j in range(J):
        keep = np.arange(J) != j
        eo, do = e[keep].ravel(), d[keep].ravel()
        dc = do - do.mean()
        var = float(dc @ dc)
        lam = -float((eo - eo.mean()) @ dc) / var if var > 1e-300 else 0.0
        out[j] = float((e[j] + lam * d[j]).mean())
    return out


def _scrambles(ch: ps.PolyhedralOutput, *, q, V, points: int, scrambles: int, extra: int,
               seed: int, s_dim: bool = False) -> tuple[np.ndarray, int]:
    """Per scramble the mean of the per-point terms (:func:`controlled_means` of the two forms
    of :func:`_point_terms`); with ``s_dim`` q is the upper end of the
    thermodynamic integration and each point's (q, V) = (s, Q0 - s), s = q u_s, Q0 = q + V."""
    lik = compile_likelihood(ch)
    w = np.asarray(ch.weights, dtype=float)
    n = ch.dim
    rng = np.random.default_rng([int(seed), 2026])
    e = np.empty((scrambles, points))
    d = np.empty((scrambles, points))
    tried = 0
    for j in range(scrambles):
        u = _sobol(2 * n + 1 + int(s_dim), points, rng)
        if s_dim:
            s = q * u[:, -1]
            qq, vv = s, (q + V) - s
        else:
            qq, vv = np.full(points, float(q)), np.full(points, float(V))
        e[j], d[j], t = _point_terms(lik, w, q=qq, V=vv, u=u[:, :2 * n + 1], extra=extra,
                                     rng=rng)
        tried += t
    return controlled_means(e, d), tried


def output_e_qmc(ch: ps.PolyhedralOutput, *, q: float, V: float, points: int = POINTS,
                 scrambles: int = SCRAMBLES, extra: int | None = None,
                 seed: int = 0) -> Estimate:
    """E(q, V) = E_omega sum_y Z_y |g_y|_C^2 (THEORY 1.1) by drawn outcomes (module
    docstring): ``scrambles`` scrambled Sobol sets of ``points`` (omega, h, y) each, ``extra``
    rejection samples of h given (y, omega) per point (None: :func:`auto_extra`).
    Error = t_(J-1, 0.995) x the standard error over the scrambles (no bias to add: every
    term is unbiased). extra: per_scramble, draws (rejection draws per point),
    coverage_factor, seconds."""
    _check_qv(q, V)
    extra = auto_extra(ch) if extra is None else extra
    _check_size(points, scrambles, extra)
    t0 = time.perf_counter()
    means, tried = _scrambles(ch, q=float(q), V=float(V), points=points, scrambles=scrambles,
                              extra=extra, seed=seed)
    k = coverage_factor(scrambles)
    value = float(means.mean())
    return Estimate(value, k * standard_error(means) + 1e-14 * abs(value),
                    f"drawn outcomes: randomised QMC over (omega, h, y), {scrambles} scrambles x "
                    f"{points} Sobol points, {extra} rejection samples of h given (y, omega) per "
                    f"point, covariance and pair forms combined (control variate fitted on the "
                    f"other scrambles); error = {k:.3g} x standard error "
                    f"({COVERAGE:.0%} Student t)",
                    extra={"per_scramble": means.tolist(), "draws": tried / (points * scrambles),
                           "coverage_factor": k, "seconds": time.perf_counter() - t0})


def psi_out_qmc(ch: ps.PolyhedralOutput, *, q: float, V: float, points: int = POINTS,
                scrambles: int = SCRAMBLES, extra: int | None = None, seed: int = 0,
                rule=pt.DEFAULT_RULE) -> Estimate:
    """Psi_out(q, V) = E_omega sum_y Z_y log Z_y (THEORY 1.1) by thermodynamic integration at
    Q0 = q + V fixed (module docstring): Psi_out(0) at omega = 0 by the polytope engine
    (``rule``), plus (q / 2) E_{s ~ U(0, q)} E(s, Q0 - s) by drawn outcomes, s one more
    Sobol coordinate. Error: the engine's bar propagated (|log Z_y + 1| Z_error_y) + t x the
    standard error over the scrambles. extra: psi_0, psi_0_error, seconds."""
    _check_qv(q, V)
    extra = auto_extra(ch) if extra is None else extra
    _check_size(points, scrambles, extra)
    t0 = time.perf_counter()
    Q0 = float(q) + float(V)
    z = ps.z_out(ch, omega=np.zeros((1, ch.dim)), V=Q0, order=0, rule=rule)
    Z, Ze = z.Z[:, 0], z.Z_error[:, 0]
    pos = Z > 1e-300
    logZ = np.log(np.where(pos, Z, 1.0))
    psi0 = float(np.where(pos, Z * logZ, 0.0).sum())
    psi0_err = float(np.where(pos, np.abs(logZ + 1.0) * Ze, 0.0).sum())
    if q == 0:
        return Estimate(psi0, psi0_err, "sum_y Z_y log Z_y at omega = 0 (polytope engine)",
                        extra={"psi_0": psi0, "psi_0_error": psi0_err,
                               "seconds": time.perf_counter() - t0})
    means, _ = _scrambles(ch, q=float(q), V=float(V), points=points, scrambles=scrambles,
                          extra=extra, seed=seed, s_dim=True)
    k = coverage_factor(scrambles)
    half = 0.5 * float(q)
    value = psi0 + half * float(means.mean())
    return Estimate(value, psi0_err + half * k * standard_error(means) + 1e-14 * abs(value),
                    "thermodynamic integration at Q0 fixed: Psi_out(0) by the polytope engine "
                    "+ (q / 2) E_s E(s, Q0 - s) by drawn outcomes "
                    f"({scrambles} scrambles x {points} Sobol points); error = engine bar + "
                    f"{k:.3g} x standard error",
                    extra={"psi_0": psi0, "psi_0_error": psi0_err,
                           "seconds": time.perf_counter() - t0})


def _residual(ch, *, alpha: float, rho: float, V: float, points: int, scrambles: int,
              extra: int, seed: int) -> tuple[float, Estimate]:
    """mmse(1 / q_hat) - V with q_hat = 2 alpha E(Q0 - V, V) (THEORY 1.1), and E."""
    E = output_e_qmc(ch, q=1.0 + rho - V, V=V, points=points, scrambles=scrambles, extra=extra,
                     seed=seed)
    require(E.value > 0, "channel", "informative (E > 0)", E.value)
    return float(wishart.mmse(1.0 / (2 * alpha * E.value), rho=rho)) - V, E


def fixed_points_qmc(ch: ps.PolyhedralOutput, *, alpha: float, rho: float,
                     points: int = POINTS, scrambles: int = SCRAMBLES, extra: int | None = None,
                     seed: int = 0, psi: bool = True) -> list[dict]:
    """The SE fixed points V = mmse(1 / (2 alpha E(Q0 - V, V))), V in [0.05, 1] (THEORY 1.1),
    E by drawn outcomes (:func:`output_e_qmc`): sign changes of the residual on
    :data:`V_SCAN_QMC` (SCAN_SIZE points), Brent's method on a fixed-seed estimate of
    BRENT_SIZE points (a root v0), then the served estimate (``points`` x ``scrambles``) at
    v0 - STENCIL, v0, v0 + STENCIL and the root of the least-squares line through the three
    residuals (:func:`_stencil_root`; error = the residuals' bars propagated through the
    line's root + the distance to the quadratic's root). phi = -q q_hat / 4 + q_hat Q0 / 4
    - I(1/q_hat) + alpha Psi_out with Psi_out from :func:`psi_out_qmc` at the root (``psi``;
    None otherwise).
    Each: q, q_hat, mmse, error, E, E_error, psi_out, psi_out_error, phi, phi_error, slope,
    stable, bayes_optimal, rule, seconds. ConvergenceError when no sign change is found."""
    require(isinstance(alpha, (int, float)) and math.isfinite(alpha) and alpha > 0, "alpha",
            "a finite real > 0", alpha)
    require(isinstance(rho, (int, float)) and math.isfinite(rho) and rho > 0, "rho",
            "a finite real > 0", rho)
    extra = auto_extra(ch) if extra is None else extra
    _check_size(points, scrambles, extra)
    t0 = time.perf_counter()
    kw = {"alpha": float(alpha), "rho": float(rho), "extra": extra}
    r_scan = [_residual(ch, V=v, points=SCAN_SIZE[0], scrambles=SCAN_SIZE[1], seed=seed + 1,
                        **kw)[0] for v in V_SCAN_QMC]
    out = []
    lost = []
    for (a, ra), (b, rb) in zip(zip(V_SCAN_QMC, r_scan), zip(V_SCAN_QMC[1:], r_scan[1:])):
        if ra * rb > 0:
            continue

        def f(v):
            return _residual(ch, V=v, points=BRENT_SIZE[0], scrambles=BRENT_SIZE[1],
                             seed=seed + 2, **kw)[0]

        fa, fb = f(a), f(b)
        if fa * fb > 0:  # a sign change of the scan's noise, not of the residual
            lost.append((a, b))
            continue
        v = brentq(f, a, b, xtol=BRENT_XTOL, rtol=1e-10)
        row = _stencil_root(ch, v=v, points=points, scrambles=scrambles, seed=seed, psi=psi,
                            lo=V_SCAN_QMC[0], **kw)
        row.update({"rule": f"drawn outcomes, {scrambles} x {points} Sobol points, "
                            f"{extra} rejection samples per point",
                    "seconds": time.perf_counter() - t0})
        out.append(row)
    if not out:
        raise ConvergenceError("no SE fixed point bracketed in V in "
                               f"[{V_SCAN_QMC[0]}, {V_SCAN_QMC[-1]}]",
                               last_iterate=list(V_SCAN_QMC), residual=r_scan)
    best = bayes_optimal(out) if psi else None
    for row in out:
        row["bayes_optimal"] = (row is best) if psi else None
        row["brackets_lost"] = lost
    return out


def _stencil_root(ch, *, v: float, alpha: float, rho: float, points: int, scrambles: int,
                  extra: int, seed: int, psi: bool, lo: float) -> dict:
    """The SE fixed point near ``v`` from served estimates on a three-point stencil (at most
    STENCILS of them, each centred on the last root). With residuals r_i +- e_i (e_i: E's
    bar through mmse, + the prior's quadrature bar) at v_c + (-d, 0, d): the least-squares
    line r = a + b (x - v_c), root v1 = v_c - a / b, error = sqrt(e^2 / 3 + (v1 - v_c)^2
    e^2 / (2 d^2)) / |b| (the bars of a and b, independent estimates) + |v1 - the quadratic's
    root nearest v1| (curvature) + BRENT_XTOL^2."""
    Q0 = 1.0 + rho
    for k in range(STENCILS):
        d = min(STENCIL, 0.5 * (v - 0.5 * lo), 0.5 * (1.0 - v) + 1e-3)
        xs = np.array([v - d, v, v + d])
        rs, es, Es = [], [], []
        for i, x in enumerate(xs):
            r, E = _residual(ch, V=float(x), alpha=alpha, rho=rho, points=points,
                             scrambles=scrambles, extra=extra, seed=seed + 10 * k + i)
            q_hat = 2 * alpha * E.value
            dE = 1e-6 * E.value
            dmmse = abs(float(wishart.mmse(1.0 / (2 * alpha * (E.value + dE)), rho=rho))
                        - float(wishart.mmse(1.0 / q_hat, rho=rho))) / dE
            prior = wishart.mmse_estimate(1.0 / q_hat, rho=rho).error
            rs.append(r)
            es.append(dmmse * E.error + prior)
            Es.append(E)
        rs = np.asarray(rs)
        a_fit, b_fit = float(rs.mean()), float((rs[2] - rs[0]) / (2 * d))
        v1 = v - a_fit / b_fit
        if abs(v1 - v) <= d or k == STENCILS - 1:
            break
        v = float(np.clip(v1, 0.5 * lo, 1.0))
    e = float(max(es))
    err = math.sqrt(e * e / 3 + (v1 - v) ** 2 * e * e / (2 * d * d)) / abs(b_fit)
    c2 = float((rs[2] - 2 * rs[1] + rs[0]) / (2 * d * d))  # quadratic r = r_1 + b t + c2 t^2
    if c2 != 0.0:
        disc = b_fit ** 2 - 4 * c2 * float(rs[1])
        if disc >= 0:
            roots = v + (-b_fit + np.array([1.0, -1.0]) * math.sqrt(disc)) / (2 * c2)
            err += float(np.min(np.abs(roots - v1)))
        else:
            err += abs(v1 - v)
    err += BRENT_XTOL ** 2
    # E and Psi_out at the root: E linear on the stencil
    E_vals = np.array([E.value for E in Es])
    E1 = float(E_vals[1] + (E_vals[2] - E_vals[0]) / (2 * d) * (v1 - v))
    E1_err = float(max(E.error for E in Es)) * (1.0 + abs(v1 - v) / d)
    q_hat = 2 * alpha * E1
    q = Q0 - v1
    row = {"q": q, "q_hat": q_hat, "mmse": v1, "error": err, "E": E1, "E_error": E1_err,
           "slope": b_fit + 1.0, "stable": bool(abs(b_fit + 1.0) < 1), "stencil": xs.tolist(),
           "residuals": rs.tolist(), "residual_errors": es, "psi_out": None,
           "psi_out_error": None, "phi": None, "phi_error": None}
    if psi:
        p = psi_out_qmc(ch, q=q, V=v1, points=points, scrambles=scrambles, extra=extra,
                        seed=seed + 3)
        I_S = float(wishart.mutual_information(1.0 / q_hat, rho=rho))
        row.update({"psi_out": p.value, "psi_out_error": p.error,
                    "phi": -q * q_hat / 4 + q_hat * Q0 / 4 - I_S + alpha * p.value,
                    # phi is stationary at the fixed point: its error is alpha x Psi_out's,
                    # plus the first-order terms of q_hat's bar (the cancellation not relied on)
                    "phi_error": alpha * p.error + 2 * alpha * E1_err * (
                        abs(Q0 - q) / 4 + float(wishart.mmse(1.0 / q_hat, rho=rho)) / 4)})
    return row


def _egen_scrambles(ch, R: np.ndarray, *, q: float, V: float, points: int, scrambles: int,
                    seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Per scramble the means of |r_y|^2 - r_y . r_y' (y, y' from two draws h, h' given omega)
    and of sum_y' P(y' | omega) |r_y - r_y'|^2 (the plug-in; at q = 0 P(. | 0) with ties
    broken as in :func:`polyhedral_se.likelihood_at_zero`)."""
    lik = compile_likelihood(ch)
    n = ch.dim
    sd = np.sqrt(np.asarray(ch.weights, dtype=float))
    norm2 = (R * R).sum(axis=1)
    D = np.maximum(norm2[:, None] + norm2[None, :] - 2.0 * R @ R.T, 0.0)
    P0 = ps.likelihood_at_zero(ch)[0] if q == 0 else None
    rng = np.random.default_rng([int(seed), 1995])
    e = np.empty(scrambles)
    plug = np.empty(scrambles)
    for j in range(scrambles):
        u = _sobol(3 * n + 2, points, rng)
        z = _normal(u[:, :3 * n])
        omega = math.sqrt(q) * sd * z[:, :n]
        y1 = _draw_outcomes(lik, omega + math.sqrt(V) * sd * z[:, n:2 * n], u[:, 3 * n])
        y2 = _draw_outcomes(lik, omega + math.sqrt(V) * sd * z[:, 2 * n:], u[:, 3 * n + 1])
        e[j] = float((norm2[y1] - (R[y1] * R[y2]).sum(axis=1)).mean())
        P = np.tile(P0, (points, 1)) if P0 is not None else np.clip(lik.all(omega), 0.0, 1.0)
        plug[j] = float((P * D[y1]).sum(axis=1).mean())
    return e, plug


def generalisation_error_qmc(ch: ps.PolyhedralOutput, readout, *, q: float, V: float,
                             V_error: float = 0.0, points: int = POINTS,
                             scrambles: int = SCRAMBLES, seed: int = 0) -> Estimate:
    """e_gen = E||y||^2 - E_omega ||E[y | omega]||^2 (THEORY 1.5) of outcomes read as the
    vectors ``readout[y]``, by two draws h, h' given omega (module docstring), randomised QMC;
    error = t x standard error over the scrambles + 2 |d e_gen / dV| ``V_error`` (a central
    difference at Q0 fixed on the same points, step 0.05 V, one-sided at q = 0, doubled).
    extra: plugin (E||y(h) - y(omega)||^2, y(omega) averaged over P(. | omega)),
    plugin_error, slope_V, plugin_slope_V, seconds."""
    _check_qv(q, V)
    _check_size(points, scrambles, EXTRA)
    require(isinstance(V_error, (int, float)) and math.isfinite(V_error) and V_error >= 0,
            "V_error", "a finite real >= 0", V_error)
    t0 = time.perf_counter()
    R = ps.readout_matrix(ch, readout)
    kw = {"points": points, "scrambles": scrambles, "seed": seed}
    e, plug = _egen_scrambles(ch, R, q=float(q), V=float(V), **kw)
    k = coverage_factor(scrambles)
    err_e = k * standard_error(e) + 1e-14
    err_p = k * standard_error(plug) + 1e-14
    slope = slope_p = None
    if V_error > 0:
        d = min(0.05 * V, 0.5 * q) if q > 0 else 0.05 * V
        up = min(d, q)
        e_hi, p_hi = _egen_scrambles(ch, R, q=q - up, V=V + up, **kw)
        e_lo, p_lo = _egen_scrambles(ch, R, q=q + d, V=V - d, **kw)
        slope = abs(float(e_hi.mean() - e_lo.mean())) / (up + d)
        slope_p = abs(float(p_hi.mean() - p_lo.mean())) / (up + d)
        err_e += 2 * slope * V_error
        err_p += 2 * slope_p * V_error
    method = (f"E||y||^2 - E[r_y(h) . r_y(h')], h, h' two draws given omega, randomised QMC "
              f"({scrambles} scrambles x {points} Sobol points); error = {k:.3g} x standard "
              "error" + (" + 2 |d e_gen / dV| V_error" if V_error > 0 else ""))
    return Estimate(max(float(e.mean()), 0.0), err_e, method,
                    extra={"plugin": float(plug.mean()), "plugin_error": err_p,
                           "plugin_method": "sum_y' P(y' | omega) |r_y(h) - r_y'|^2, randomised "
                           "QMC over (omega, h)", "slope_V": slope, "plugin_slope_V": slope_p,
                           "seconds": time.perf_counter() - t0})
