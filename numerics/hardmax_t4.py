"""Hardmax state evolution at T = 4 tokens: E_hat(r) and Psi_out(r) by randomised quasi-Monte
Carlo over omega, and the SE fixed points with bars (THEORY 1.1, 1.4, 1.5; docs/hardmax_se.md,
"T = 4").

E(q, V) = E_hat(q / V) / V with E_hat(r) = E_omega sum_y Z_y |g_y|_W^2 at V = 1,
omega ~ N(0, r (1 + delta_ab)) (THEORY 1.4 invariances). The integrand is shift-invariant, so
omega = sqrt(r) A z over the T(T+1)/2 - 1 shift-free directions (9 at T = 4), z ~ N(0, I);
the token permutations leave omega's law invariant, so sum_y becomes a sum over outcome orbits
(19 representatives of 256 outcomes at T = 4), each weighted by the orbit's size.

z comes from independently scrambled Sobol point sets (scipy.stats.qmc, inverse normal CDF):
each scramble gives an unbiased estimate, their spread the standard error (the control
variate E_omega sum_orbits Z = 1 cuts the point-wise variance 2.7x at r = 1 but about doubles
the scrambles' spread: QMC already integrates the part it removes), and the bar is
t_(J-1, 0.995) (the two-sided 99% Student quantile of J scrambles) times that error, plus the
Chebyshev sweep's own error (twice its rule's difference from one with 1.5 times the nodes
on the 8 points of widest spread).
The same points serve every r (common random numbers), so each scramble's E_hat is a smooth
function of r: the SE fixed point is solved per scramble and the fixed points' spread gives the
mmse bar directly.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from functools import lru_cache

import numpy as np
from scipy.special import ndtri
from scipy.stats import qmc
from scipy.stats import t as student_t

from . import wishart
from .hardmax import outcome_orbits, pairs
from .hardmax_se import (
    all_outcomes,
    delta_of_mmse,
    generalisation_error,
    outcomes_moments,
    sweep_nodes,
    weights,
)
from .records import ConvergenceError, Estimate, bayes_optimal, require, standard_error

#: token counts this module accepts (T = 3 for the check against the deterministic rule)
QMC_TOKENS = (3, 4)
#: two-sided coverage of the bar: t quantile of this level with J - 1 degrees of freedom
COVERAGE = 0.99
#: omega points per vectorised call of the sweep
BLOCK = 256


def _check(T: int, points: int, scrambles: int) -> None:
    require(isinstance(T, int) and not isinstance(T, bool) and T in QMC_TOKENS, "tokens",
            f"an integer in {QMC_TOKENS[0]}..{QMC_TOKENS[1]}", T)
    require(isinstance(points, int) and points >= 16 and points & (points - 1) == 0, "points",
            "a power of 2, >= 16", points)
    require(isinstance(scrambles, int) and scrambles >= 4, "scrambles", "an integer >= 4",
            scrambles)


@lru_cache(maxsize=4)
def shift_free_basis(T: int) -> np.ndarray:
    """A (n x (n - 1)): omega = sqrt(r) A z, z ~ N(0, I), has the law of
    omega ~ N(0, r (1 + delta_ab)) modulo the shift direction 1 (GLS projection, THEORY 1.4)."""
    Sig = np.diag(weights(T))
    one = np.ones(len(Sig))
    Cov = Sig - np.outer(one, one) / (one @ np.linalg.solve(Sig, one))
    lam, U = np.linalg.eigh(Cov)
    keep = lam > 1e-12
    return U[:, keep] * np.sqrt(lam[keep])


@lru_cache(maxsize=8)
def omega_points(*, T: int, points: int, scrambles: int, seed: int) -> np.ndarray:
    """Unit-r omega (V = 1 units, omega = A z): an array (scrambles, points, T(T+1)/2), scramble
    j from an independently scrambled Sobol set of the shift-free dimension (seeded)."""
    A = shift_free_basis(T)
    rng = np.random.default_rng(seed)
    out = np.empty((scrambles, points, A.shape[0]))
    for j in range(scrambles):
        u = qmc.Sobol(d=A.shape[1], scramble=True, seed=rng).random_base2(int(math.log2(points)))
        z = ndtri(np.clip(u, 1e-300, 1.0 - 1e-16))
        out[j] = z @ A.T
    out.setflags(write=False)
    return out


def outcome_set(T: int, outcomes: str) -> list[tuple[tuple[int, ...], int]]:
    """(y, weight) pairs of the outcome sum: "orbits" (one representative per permutation
    orbit, weight = the orbit's size; 19 at T = 4) or "all" (every y, weight 1; 256 at T = 4:
    13.5x the cost, the integrand symmetric and sum_y Z = 1 at every omega)."""
    require(outcomes in ("orbits", "all"), "outcomes", "orbits or all", outcomes)
    if outcomes == "orbits":
        return outcome_orbits(T)
    return [(y, 1) for y in all_outcomes(T)]


def orbit_integrands(T: int, omega: np.ndarray, nodes: int | None = None,
                     outcomes: str = "orbits") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per omega (rows, V = 1 units): the sums over :func:`outcome_set` of Z |g|_W^2, Z log Z
    and Z (each times its weight), from :func:`aim_sym.numerics.hardmax_se.outcomes_moments`."""
    W = weights(T)
    orbits = outcome_set(T, outcomes)
    e = np.zeros(omega.shape[0])
    psi = np.zeros(omega.shape[0])
    mass = np.zeros(omega.shape[0])
    for i in range(0, omega.shape[0], BLOCK):
        om = omega[i:i + BLOCK]
        moms = outcomes_moments([y for y, _ in orbits], omega=om, V=1.0, nodes=nodes)
        for (_, size), mom in zip(orbits, moms):
            z = mom[:, 0]
            pos = z > 1e-300
            zs = np.where(pos, z, 1.0)
            e[i:i + BLOCK] += size * np.where(pos, (mom[:, 1:] ** 2 / W).sum(axis=1) / zs, 0.0)
            psi[i:i + BLOCK] += size * np.where(pos, z * np.log(zs), 0.0)
            mass[i:i + BLOCK] += size * z
    return e, psi, mass


def _scramble_means(T: int, r: float, points: int, scrambles: int, seed: int,
                    outcomes: str = "orbits") -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """Per scramble (E_hat, Psi_out, orbit mass) at r, and the sweep error (the default sweep
    against 1.5 times its nodes on the 8 points of widest off-diagonal spread, doubled)."""
    om = math.sqrt(r) * omega_points(T=T, points=points, scrambles=scrambles, seed=seed)
    flat = om.reshape(-1, om.shape[-1])
    e, psi, mass = orbit_integrands(T, flat, outcomes=outcomes)
    shape = (scrambles, points)
    off = [k for k, (a, b) in enumerate(pairs(T)) if a != b]
    sub = flat[np.argsort(np.ptp(flat[:, off], axis=1))[-8:]]  # the widest spreads
    n_sweep = sweep_nodes(sub, T)
    e_fine, _, _ = orbit_integrands(T, sub, nodes=int(1.5 * n_sweep), outcomes=outcomes)
    e_def, _, _ = orbit_integrands(T, sub, nodes=n_sweep, outcomes=outcomes)
    # the coarse rule's error is the difference; doubled to cover the finer rule's own error
    sweep = 2.0 * float(np.max(np.abs(e_fine - e_def)))
    return (e.reshape(shape).mean(axis=1), psi.reshape(shape).mean(axis=1),
            mass.reshape(shape).mean(axis=1), sweep)


def coverage_factor(scrambles: int) -> float:
    """t_(J-1) quantile of two-sided :data:`COVERAGE` for J = ``scrambles``."""
    return float(student_t.ppf(0.5 + COVERAGE / 2, scrambles - 1))


def output_e_qmc(*, T: int = 4, q: float, V: float, points: int = 256, scrambles: int = 8,
                 seed: int = 2026, outcomes: str = "orbits") -> Estimate:
    """E(q, V) = E_hat(q / V) / V (THEORY 1.1, 1.4) by randomised QMC over the shift-free omega
    directions (module docstring), Psi_out(q, V) in ``extra``. Error = t_(J-1, 0.995) x the
    standard error over the J = ``scrambles`` scrambles of ``points`` Sobol points each + the
    sweep's error. ``extra``: E_hat, psi_out, psi_out_error, mass (E_omega sum_orbits Z, 1 up to
    its own standard error mass_error: a check), per_scramble, sweep_error, seconds."""
    _check(T, points, scrambles)
    require(np.isfinite(q) and q >= 0, "q", "finite >= 0", q)
    require(np.isfinite(V) and V > 0, "V", "finite > 0", V)
    t0 = time.perf_counter()
    r = q / V
    e, psi, mass, sweep = _scramble_means(T, r, points, scrambles, seed, outcomes)
    k = coverage_factor(scrambles)

    E_hat = float(e.mean())
    err = k * standard_error(e) + sweep + 1e-14 * abs(E_hat)
    return Estimate(E_hat / V, err / V,
                    f"ordered-cone recursion at each omega, randomised QMC over the "
                    f"{T * (T + 1) // 2 - 1} shift-free omega directions ({scrambles} scrambles "
                    f"x {points} Sobol points, {outcomes}); error = {k:.3g} x standard error + sweep error",
                    extra={"r": r, "E_hat": E_hat, "E_hat_error": err,
                           "psi_out": float(psi.mean()),
                           "psi_out_error": k * standard_error(psi) + sweep,
                           "mass": float(mass.mean()), "mass_error": standard_error(mass),
                           "per_scramble": e, "sweep_error": sweep, "coverage_factor": k,
                           "seconds": time.perf_counter() - t0})


def e_hat_curves(*, T: int = 4, r_max: float, r_min: float = 0.0, nodes: int = 9,
                 points: int = 256, scrambles: int = 8, seed: int = 2026,
                 outcomes: str = "orbits") -> dict:
    """Per scramble, E_hat(r) and Psi_out(r) on [r_min, r_max] as Chebyshev interpolants through
    ``nodes`` Chebyshev-Lobatto points (``nodes`` odd), common random numbers across r; the
    interpolants through every other node give the interpolation check. Keys: r_nodes,
    E_nodes / psi_nodes (scrambles x nodes), sweep_error (largest over the nodes), value(r)
    (scramble x len(r) array), coarse(r), psi(r), seconds."""
    _check(T, points, scrambles)
    require(np.isfinite(r_max) and 0 < r_max <= 50, "r_max", "in (0, 50]", r_max)
    require(np.isfinite(r_min) and 0 <= r_min < r_max, "r_min", f"in [0, {r_max:g})", r_min)
    require(isinstance(nodes, int) and nodes >= 5 and nodes % 2 == 1, "nodes",
            "an odd integer >= 5", nodes)
    t0 = time.perf_counter()
    x = np.cos(np.pi * np.arange(nodes) / (nodes - 1))
    r = r_min + 0.5 * (r_max - r_min) * (1 + x)
    E = np.empty((scrambles, nodes))
    P = np.empty((scrambles, nodes))
    sweep = 0.0
    for i, ri in enumerate(r):
        e, psi, _, sw = _scramble_means(T, float(ri), points, scrambles, seed, outcomes)
        E[:, i], P[:, i] = e, psi
        sweep = max(sweep, sw)
    cheb = np.polynomial.chebyshev.chebfit
    c_fine = cheb(x, E.T, nodes - 1)
    c_coarse = cheb(x[::2], E[:, ::2].T, nodes // 2)
    c_psi = cheb(x, P.T, nodes - 1)

    def xs(rr):
        rr = np.atleast_1d(np.asarray(rr, dtype=float))
        require(np.all((rr >= r_min - 1e-12) & (rr <= r_max + 1e-12)), "r",
                f"in [{r_min:g}, {r_max:g}]", rr)
        return 2 * (rr - r_min) / (r_max - r_min) - 1

    return {"T": T, "r_nodes": r, "E_nodes": E, "psi_nodes": P, "sweep_error": sweep,
            "r_min": r_min, "r_max": r_max, "scrambles": scrambles, "points": points,
            "value": lambda rr: np.polynomial.chebyshev.chebval(xs(rr), c_fine),
            "coarse": lambda rr: np.polynomial.chebyshev.chebval(xs(rr), c_coarse),
            "psi": lambda rr: np.polynomial.chebyshev.chebval(xs(rr), c_psi),
            "seconds": time.perf_counter() - t0}


def _root_near(fun, grid: np.ndarray, values: np.ndarray, i: int) -> float:
    """Brent's root of fun in the bracket of ``grid`` (sign change of ``values``) nearest the
    bracket [grid[i], grid[i + 1]]; ConvergenceError when ``values`` has no sign change."""
    from scipy.optimize import brentq

    cand = np.nonzero(values[:-1] * values[1:] <= 0)[0]
    if len(cand) == 0:
        raise ConvergenceError("a scramble's or the coarse interpolant's alpha(mmse) curve "
                               "misses this alpha (raise points or nodes)",
                               last_iterate=float(grid[i]))
    n = int(cand[np.argmin(np.abs(cand - i))])
    return float(brentq(fun, float(grid[n]), float(grid[n + 1]), xtol=1e-12, rtol=1e-12))


def _alpha(V: float, rho: float, e_hat: float) -> float:
    """alpha(V) = q_hat / (2 E(Q0 - V, V)) = V / (2 Delta(V) E_hat(r)) (THEORY 1.1)."""
    return V / (2 * delta_of_mmse(V, rho=rho) * e_hat)


def se_curve_qmc(*, rho: float, alphas: Sequence[float], curves: dict,
                 grid_points: int = 60, with_egen: bool = False,
                 egen_step: float = 0.6) -> list[dict]:
    """SE fixed points V = mmse at each alpha from :func:`e_hat_curves` (THEORY 1.1): alpha(V) =
    V / (2 Delta(V) E_hat((Q0 - V) / V)), Q0 = 1 + rho, Wishart mmse(Delta(V)) = V, on the mmse
    range whose r = (Q0 - V) / V the curves cover. Per alpha and per scramble j: every sign
    change of alpha_j(V) - alpha on a grid, Brent's root V_j; the fixed point is mean_j V_j,
    error = t_(J-1, 0.995) x their standard error + |root of the every-other-node interpolant
    - root| + (sweep error) |dV / dE_hat|. The propagated bar (E_hat's bar) / |d alpha / dV| x
    alpha / E_hat is reported as error_propagated. Rows (one per fixed point, the
    Bayes-optimal one flagged): alpha, mmse, error, error_propagated, q, r, E_hat, E_hat_error,
    psi_out, psi_out_error, phi, stable (alpha decreasing in mmse), d_alpha_d_mmse, bayes_optimal,
    n_fixed_points, seconds; with ``with_egen``, e_gen at the fixed point from
    :func:`aim_sym.numerics.hardmax_se.generalisation_error` (trapezoid step ``egen_step``),
    e_gen_error = its bar + its largest change at mmse +- error (three evaluations; at T = 4
    ~10 s each at r ~ 0.6, growing like r^1.5: off by default)."""
    require(np.isfinite(rho) and rho > 0, "rho", "finite > 0", rho)
    a_list = [float(a) for a in alphas]
    require(len(a_list) > 0 and all(np.isfinite(a) and a > 0 for a in a_list), "alphas",
            "finite values > 0", alphas)
    Q0 = 1.0 + rho
    J = curves["scrambles"]
    k = coverage_factor(J)
    v_lo = Q0 / (1 + curves["r_max"])
    v_hi = min(Q0 / (1 + curves["r_min"]), 0.999)
    require(v_lo < v_hi, "rho", f"such that the curves' r range [{curves['r_min']:g}, "
            f"{curves['r_max']:g}] holds mmse values below 1", rho)
    grid = np.geomspace(v_lo * (1 + 1e-9), v_hi, grid_points)

    def e_of(V: float, which: str = "value") -> np.ndarray:
        return curves[which]((Q0 - V) / V)[:, 0]

    def alpha_j(V: float, j: int | None, which: str = "value") -> float:
        e = e_of(V, which)
        return _alpha(V, rho, float(e.mean() if j is None else e[j]))

    deltas = np.array([delta_of_mmse(float(v), rho=rho) for v in grid])
    E_grid = curves["value"]((Q0 - grid) / grid)  # (J, grid)
    A_grid = grid / (2 * deltas * E_grid)
    A_mean = grid / (2 * deltas * E_grid.mean(axis=0))
    A_coarse = grid / (2 * deltas * curves["coarse"]((Q0 - grid) / grid).mean(axis=0))
    rows = []
    for alpha in a_list:
        t0 = time.perf_counter()
        f = A_mean - alpha
        fps = []
        for i in np.nonzero(f[:-1] * f[1:] <= 0)[0]:
            roots = np.array([_root_near(lambda v, j=j, a=alpha: alpha_j(v, j) - a,
                                         grid, A_grid[j] - alpha, i) for j in range(J)])
            V = _root_near(lambda v, a=alpha: alpha_j(v, None) - a, grid, f, i)
            v_c = _root_near(lambda v, a=alpha: alpha_j(v, None, "coarse") - a, grid,
                             A_coarse - alpha, i)
            dv = 1e-5 * V
            slope = (alpha_j(V + dv, None) - alpha_j(V - dv, None)) / (2 * dv)
            r = (Q0 - V) / V
            e_js = e_of(V)
            E_hat = float(e_js.mean())
            E_err = k * standard_error(e_js) + curves["sweep_error"]
            spread = k * standard_error(roots)
            sweep_part = alpha * curves["sweep_error"] / E_hat / max(abs(slope), 1e-12)
            err = spread + abs(v_c - V) + sweep_part
            delta = delta_of_mmse(V, rho=rho)
            q_hat = 1.0 / delta
            psi_js = curves["psi"](r)[:, 0]
            psi = float(psi_js.mean())
            phi = (-(Q0 - V) * q_hat / 4 + q_hat * Q0 / 4
                   - float(wishart.mutual_information(delta, rho=rho)) + alpha * psi)
            row = {"alpha": alpha, "mmse": V, "error": err,
                   "error_propagated": alpha * E_err / E_hat / max(abs(slope), 1e-12)
                   + abs(v_c - V),
                   "root_spread": spread, "q": Q0 - V, "r": r, "E_hat": E_hat,
                   "E_hat_error": E_err, "psi_out": psi,
                   "psi_out_error": k * standard_error(psi_js)
                   + curves["sweep_error"], "phi": phi,
                   "stable": bool(slope < 0), "d_alpha_d_mmse": slope}
            fps.append(row)
        if not fps:
            raise ConvergenceError(f"no SE fixed point at alpha = {alpha:g} on mmse in "
                                   f"[{v_lo:.4g}, {v_hi:.4g}] (raise r_max of the curves)",
                                   last_iterate=alpha, residual=float(A_mean.max()))
        best = bayes_optimal(fps) or fps[0]
        row = {**best, "bayes_optimal": best["stable"], "n_fixed_points": len(fps)}
        if with_egen:
            V, dV = row["mmse"], row["error"]
            g = generalisation_error(T=curves["T"], q=Q0 - V, V=V, step=egen_step)
            ends = [generalisation_error(T=curves["T"], q=Q0 - v, V=v, step=egen_step).value
                    for v in (V - dV, min(V + dV, 0.9999))]
            row.update(e_gen=g.value,
                       e_gen_error=g.error + max(abs(x - g.value) for x in ends))
        row["seconds"] = time.perf_counter() - t0
        rows.append(row)
    return rows


def se_curve(*, rho: float, alphas: Sequence[float], T: int = 4, r_max: float = 5.0,
             nodes: int = 9, points: int = 256, scrambles: int = 8, seed: int = 2026,
             with_egen: bool = False) -> list[dict]:
    """The Bayes-optimal SE fixed point per alpha at T tokens (rows of :func:`se_curve_qmc`):
    :func:`e_hat_curves` on [rho, r_max] (r = rho is the alpha -> 0 end, mmse = 1; r_max bounds
    the smallest mmse, Q0 / (1 + r_max)), then :func:`se_curve_qmc`. At rho = 0.5 the default
    reaches mmse 0.25 (alpha = 0.1 sits at mmse 0.30) in ~4 minutes on one core
    (docs/hardmax_se.md, "T = 4"); ConvergenceError for an alpha beyond."""
    require(np.isfinite(rho) and 0 < rho < r_max, "rho", f"finite, in (0, r_max = {r_max:g})",
            rho)
    curves = e_hat_curves(T=T, r_min=rho, r_max=r_max, nodes=nodes, points=points,
                          scrambles=scrambles, seed=seed)
    return se_curve_qmc(rho=rho, alphas=alphas, curves=curves, with_egen=with_egen)
