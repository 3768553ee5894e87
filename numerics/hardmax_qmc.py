"""Hardmax state evolution at T = 3, 4, 5 tokens by randomised quasi-Monte Carlo over omega:
E_hat(r), Psi_out(r), e_gen and the SE fixed points with bars (THEORY 1.1, 1.4, 1.5;
docs/hardmax_se.md, "T = 4" and "T = 5"). The token count is a parameter.

E(q, V) = E_hat(q / V) / V with E_hat(r) = E_omega sum_y Z_y |g_y|_W^2 at V = 1,
omega ~ N(0, r (1 + delta_ab)) (THEORY 1.4 invariances). The integrand is shift-invariant, so
omega = sqrt(r) A z over the T(T+1)/2 - 1 shift-free directions (9 at T = 4, 14 at T = 5),
z ~ N(0, I); the token permutations leave omega's law invariant, so sum_y becomes a sum over
outcome orbits (19 representatives of 256 outcomes at T = 4, 47 of 3125 at T = 5), each
weighted by the orbit's size. At each omega, Z_y and the centred moments come from the
ordered-cone recursion over the row winners (:func:`winner_moments`: 2^T subsets instead of
the 2^(T(T-1)/2) of the off-diagonal recursion; checked against it).

Two estimators (``estimator``): "orbits" sums the orbit representatives at each omega (the
default at T <= 4); "draws" (the default at T = 5, where orbit sizes up to 120 make the orbit
sum's per-point variance ~40x larger at r = 5, and about equal at r = 0.5, for 47x the cost)
draws one y per point as the row-wise argmax of
h = omega + xi and averages |g_y(omega)|_W^2 (:func:`drawn_terms`).
z (and xi) come from independently scrambled Sobol point sets (scipy.stats.qmc, inverse normal
CDF): each scramble gives an unbiased estimate, their spread the standard error (the control
variate E_omega sum_orbits Z = 1 cuts the point-wise variance 2.7x at r = 1 but about doubles
the scrambles' spread: QMC already integrates the part it removes), and the bar is
t_(J-1, 0.995) (the two-sided 99% Student quantile of J scrambles) times that error, plus the
Chebyshev sweep's own error (twice its rule's difference from one with 1.5 times the nodes
on the 8 points of widest spread).
The same points serve every r (common random numbers), so each scramble's E_hat is a smooth
function of r (piecewise, with small jumps where a drawn y changes, for "draws"; the Chebyshev
interpolant in r smooths them): the SE fixed point is solved per scramble and the fixed points'
spread gives the mmse bar directly.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from functools import lru_cache

import numpy as np
from scipy.special import ndtr, ndtri
from scipy.stats import qmc
from scipy.stats import t as student_t

from . import wishart
from .hardmax import chebyshev_tail_rule, outcome_orbits, pairs
from .hardmax_se import (
    TAIL_L,
    all_outcomes,
    delta_of_mmse,
    generalisation_error,
    outcomes_moments,
    weights,
    zero_omega_row,
)
from .records import ConvergenceError, Estimate, bayes_optimal, require, standard_error

#: token counts this module accepts (T = 3 for the check against the deterministic rule)
QMC_TOKENS = (3, 5)
#: Chebyshev nodes of the winner sweep per unit length (V = 1 units) and their floor
NODES_PER_UNIT = 3.0
MIN_NODES = 48
#: estimators of E_hat: every orbit representative at each omega, or one outcome y drawn per
#: omega (h = omega + xi from the same Sobol point)
ESTIMATORS = ("orbits", "draws")
#: the draws estimator is the default from this T on (at T = 5 its per-point variance is ~1/40
#: of the orbit sum's at r = 5, about equal at r = 0.5, for 1/47 of the cost: the orbit sum
#: weights the 47 representatives by orbit sizes up to 120)
DRAWS_FROM = 5
#: two-sided coverage of the bar: t quantile of this level with J - 1 degrees of freedom
COVERAGE = 0.99
#: omega points per vectorised call of the sweep
BLOCK = 256


def _check(T: int, points: int, scrambles: int) -> None:
    require(isinstance(T, int) and not isinstance(T, bool)
            and QMC_TOKENS[0] <= T <= QMC_TOKENS[1], "tokens",
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


def winner_nodes(omega_unit: np.ndarray, T: int, *, L: float = TAIL_L,
                 per_unit: float = NODES_PER_UNIT) -> int:
    """Chebyshev nodes of :func:`winner_moments` for these omega (V = 1 units): ``per_unit`` per
    unit length of the widest [min(omega - L sd), max(omega + L sd)], at least MIN_NODES."""
    sd = np.sqrt(weights(T))
    om = np.atleast_2d(omega_unit)
    width = float(np.max((om + L * sd).max(axis=1) - (om - L * sd).min(axis=1)))
    return max(MIN_NODES, int(math.ceil(per_unit * width)))


def moments(T: int, ys: Sequence[tuple[int, ...]], omega: np.ndarray, nodes: int | None = None,
            kernel: str = "winner") -> np.ndarray:
    """Z_y and the centred moments at V = 1 (rows of ``omega``): (len(ys), N, 1 + n) by
    :func:`winner_moments` (``kernel="winner"``) or by the off-diagonal subset recursion of
    :mod:`aim_sym.numerics.hardmax_se` (``"recursion"``: the check; ~0.8 s per omega for the
    47 orbits at T = 5)."""
    require(kernel in ("winner", "recursion"), "kernel", "winner or recursion", kernel)
    if kernel == "recursion":
        if T <= 4:
            return outcomes_moments(ys, omega=omega, V=1.0, nodes=nodes)
        from .hardmax_se import moments_unit, sweep_nodes

        return moments_unit([tuple(y) for y in ys], omega,
                             sweep_nodes(omega, T) if nodes is None else nodes, TAIL_L)
    if nodes is None:
        nodes = winner_nodes(omega, T)
    return winner_moments(ys, omega, nodes)


def orbit_terms(T: int, omega: np.ndarray, nodes: int | None = None,
                outcomes: str = "orbits", kernel: str = "winner"
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per outcome of :func:`outcome_set` and per omega (rows, V = 1 units): weight x Z |g|_W^2
    and weight x Z (arrays (outcomes, N)), and the summed weight x Z log Z (N,), from
    :func:`moments`."""
    W = weights(T)
    orbits = outcome_set(T, outcomes)
    size = np.array([float(k) for _, k in orbits])[:, None]
    e = np.zeros((len(orbits), omega.shape[0]))
    mass = np.zeros((len(orbits), omega.shape[0]))
    psi = np.zeros(omega.shape[0])
    for i in range(0, omega.shape[0], BLOCK):
        om = omega[i:i + BLOCK]
        mom = moments(T, [y for y, _ in orbits], om, nodes=nodes, kernel=kernel)
        z = mom[:, :, 0]
        pos = z > 1e-300
        zs = np.where(pos, z, 1.0)
        e[:, i:i + BLOCK] = size * np.where(pos, (mom[:, :, 1:] ** 2 / W).sum(axis=2) / zs, 0.0)
        psi[i:i + BLOCK] = (size * np.where(pos, z * np.log(zs), 0.0)).sum(axis=0)
        mass[:, i:i + BLOCK] = size * z
    return e, psi, mass


def orbit_integrands(T: int, omega: np.ndarray, nodes: int | None = None,
                     outcomes: str = "orbits", kernel: str = "winner"
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per omega (rows, V = 1 units): the sums over :func:`outcome_set` of Z |g|_W^2, Z log Z
    and Z (each times its weight), from :func:`moments`."""
    e, psi, mass = orbit_terms(T, omega, nodes, outcomes, kernel)
    return e.sum(axis=0), psi, mass.sum(axis=0)


@lru_cache(maxsize=8)
def orbit_probabilities(T: int, outcomes: str = "orbits") -> np.ndarray:
    """weight x P(y) per outcome of :func:`outcome_set`: the law of y does not depend on r
    (h ~ N(0, (1 + r) W) and the argmax is scale-invariant), so these are the q = 0
    probabilities (:func:`winner_moments` at omega = 0 on 256 nodes; their sum is 1 to 1e-12):
    the means of the control variates weight x Z_y(omega)."""
    orbits = outcome_set(T, outcomes)
    p = winner_moments([y for y, _ in orbits], np.zeros((1, T * (T + 1) // 2)), 256)[:, 0, 0]
    out = np.array([k for _, k in orbits], dtype=float) * p
    out.setflags(write=False)
    return out


def controlled_means(e: np.ndarray, mass: np.ndarray, means: np.ndarray, scrambles: int
                     ) -> np.ndarray:
    """Per scramble, the mean of sum_O (e_O - beta_O (mass_O - means_O)) over its points, with
    each orbit's regression coefficient beta_O fitted on the other scrambles' points (so that
    it is independent of the scramble it corrects). e, mass: (orbits, scrambles x points)."""
    O = e.shape[0]
    e3 = e.reshape(O, scrambles, -1)
    c3 = mass.reshape(O, scrambles, -1) - means[:, None, None]
    out = np.empty(scrambles)
    for j in range(scrambles):
        keep = np.arange(scrambles) != j
        eo = e3[:, keep].reshape(O, -1)
        co = c3[:, keep].reshape(O, -1)
        ec = eo - eo.mean(axis=1, keepdims=True)
        cc = co - co.mean(axis=1, keepdims=True)
        var = (cc * cc).sum(axis=1)
        beta = np.where(var > 1e-300, (ec * cc).sum(axis=1) / np.where(var > 1e-300, var, 1.0),
                        0.0)
        out[j] = float((e3[:, j] - beta[:, None] * c3[:, j]).sum(axis=0).mean())
    return out


def _scramble_means(T: int, r: float, points: int, scrambles: int, seed: int,
                    outcomes: str = "orbits", control: bool = False, estimator: str = "orbits"
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """Per scramble (E_hat, Psi_out, orbit mass; nan for draws) at r, and the sweep error (the
    default sweep against 1.5 times its nodes on the 8 points of widest sweep, doubled).
    ``estimator``: "orbits" (every orbit representative at each omega; ``control``: with the
    per-orbit control variates of :func:`controlled_means`) or "draws" (:func:`drawn_terms`)."""
    require(estimator in ESTIMATORS, "estimator", " or ".join(ESTIMATORS), estimator)
    shape = (scrambles, points)
    if estimator == "draws":
        om0, xi = draw_points(T=T, points=points, scrambles=scrambles, seed=seed)
        flat = math.sqrt(r) * om0.reshape(-1, om0.shape[-1])
        e_pts, psi = drawn_terms(T, flat, xi.reshape(flat.shape))
        e = e_pts.reshape(shape).mean(axis=1)
        mass_o = np.full((1, flat.shape[0]), np.nan)
    else:
        om = math.sqrt(r) * omega_points(T=T, points=points, scrambles=scrambles, seed=seed)
        flat = om.reshape(-1, om.shape[-1])
        e_o, psi, mass_o = orbit_terms(T, flat, outcomes=outcomes)
        e = e_o.sum(axis=0).reshape(shape).mean(axis=1)
        if control:
            e = controlled_means(e_o, mass_o, orbit_probabilities(T, outcomes), scrambles)
    sd = np.sqrt(weights(T))
    width = (flat + TAIL_L * sd).max(axis=1) - (flat - TAIL_L * sd).min(axis=1)
    sub = flat[np.argsort(width)[-8:]]  # the widest sweeps, resolved the coarsest
    n_sweep = winner_nodes(sub, T)
    e_fine, _, _ = orbit_integrands(T, sub, nodes=int(1.5 * n_sweep), outcomes=outcomes)
    e_def, _, _ = orbit_integrands(T, sub, nodes=n_sweep, outcomes=outcomes)
    # the coarse rule's error is the difference; doubled to cover the finer rule's own error
    sweep = 2.0 * float(np.max(np.abs(e_fine - e_def)))
    return (e, psi.reshape(shape).mean(axis=1), mass_o.sum(axis=0).reshape(shape).mean(axis=1),
            sweep)


@lru_cache(maxsize=4)
def orbit_index(T: int) -> tuple[np.ndarray, np.ndarray]:
    """For every outcome y (code sum_a y_a T^(T-1-a)): the index of its orbit representative in
    :func:`aim_sym.numerics.hardmax.outcome_orbits` and the column map ``take`` with
    F(y, omega) = F(rep, omega[take]) (y = p rep, omega[take] = p^-1 omega: Z, g and |g|_W^2
    are equivariant under the token permutations)."""
    import itertools

    flat = pairs(T)
    idx = {p: i for i, p in enumerate(flat)}
    code_w = T ** np.arange(T)[::-1]
    rep_of = np.full(T ** T, -1)
    take = np.zeros((T ** T, len(flat)), dtype=np.int64)
    for i, (y, _) in enumerate(outcome_orbits(T)):
        for p in itertools.permutations(range(T)):
            z = [0] * T
            for a in range(T):
                z[p[a]] = p[y[a]]
            code = int(np.dot(z, code_w))
            if rep_of[code] < 0:
                rep_of[code] = i
                take[code] = [idx[(min(p[a], p[b]), max(p[a], p[b]))] for a, b in flat]
    return rep_of, take


@lru_cache(maxsize=4)
def draw_points(*, T: int, points: int, scrambles: int, seed: int
                ) -> tuple[np.ndarray, np.ndarray]:
    """Unit-r omega (as :func:`omega_points`) and the noise xi ~ N(0, W) of h = omega + xi:
    arrays (scrambles, points, T(T+1)/2), scramble j from an independently scrambled Sobol set
    of dimension (T(T+1)/2 - 1) + T(T+1)/2 (seeded)."""
    A = shift_free_basis(T)
    n = A.shape[0]
    sd = np.sqrt(weights(T))
    rng = np.random.default_rng(seed)
    om = np.empty((scrambles, points, n))
    xi = np.empty((scrambles, points, n))
    for j in range(scrambles):
        u = qmc.Sobol(d=A.shape[1] + n, scramble=True, seed=rng).random_base2(
            int(math.log2(points)))
        z = ndtri(np.clip(u, 1e-300, 1.0 - 1e-16))
        om[j] = z[:, :A.shape[1]] @ A.T
        xi[j] = z[:, A.shape[1]:] * sd
    om.setflags(write=False)
    xi.setflags(write=False)
    return om, xi


def drawn_terms(T: int, omega: np.ndarray, xi: np.ndarray, nodes: int | None = None,
                kernel: str = "winner") -> tuple[np.ndarray, np.ndarray]:
    """Per draw (rows, V = 1 units): y = the row-wise argmax of h = omega + xi and the
    unbiased terms |g_y(omega)|_W^2 (mean: E_hat) and log Z_y(omega) (mean: Psi_out), each
    evaluated at the orbit representative of y on the permuted omega (:func:`orbit_index`)."""
    flat = pairs(T)
    W = weights(T)
    h = omega + xi
    H = np.empty((h.shape[0], T, T))
    for k, (a, b) in enumerate(flat):
        H[:, a, b] = h[:, k]
        H[:, b, a] = h[:, k]
    codes = np.argmax(H, axis=2) @ (T ** np.arange(T)[::-1])
    rep_of, take = orbit_index(T)
    reps = [y for y, _ in outcome_orbits(T)]
    om_rep = np.take_along_axis(omega, take[codes], axis=1)
    e = np.zeros(h.shape[0])
    psi = np.zeros(h.shape[0])
    for i in np.unique(rep_of[codes]):
        sel = np.nonzero(rep_of[codes] == i)[0]
        for k in range(0, len(sel), BLOCK):
            part = sel[k:k + BLOCK]
            mom = moments(T, [reps[i]], om_rep[part], nodes=nodes, kernel=kernel)[0]
            z = np.maximum(mom[:, 0], 1e-300)
            e[part] = (mom[:, 1:] ** 2 / W).sum(axis=1) / (z * z)
            psi[part] = np.log(z)
    return e, psi


def coverage_factor(scrambles: int) -> float:
    """t_(J-1) quantile of two-sided :data:`COVERAGE` for J = ``scrambles``."""
    return float(student_t.ppf(0.5 + COVERAGE / 2, scrambles - 1))


def _estimator(T: int, estimator: str | None) -> str:
    return ("draws" if T >= DRAWS_FROM else "orbits") if estimator is None else estimator


def output_e_qmc(*, T: int = 4, q: float, V: float, points: int = 256, scrambles: int = 8,
                 seed: int = 2026, outcomes: str = "orbits", control: bool = False,
                 estimator: str | None = None) -> Estimate:
    """E(q, V) = E_hat(q / V) / V (THEORY 1.1, 1.4) by randomised QMC over the shift-free omega
    directions (module docstring), Psi_out(q, V) in ``extra``. Error = t_(J-1, 0.995) x the
    standard error over the J = ``scrambles`` scrambles of ``points`` Sobol points each + the
    sweep's error. ``extra``: E_hat, psi_out, psi_out_error, mass (E_omega sum_orbits Z, 1 up to
    its own standard error mass_error: a check; None for the drawn-y estimator), per_scramble,
    sweep_error, seconds. ``estimator``: "orbits" or "draws" (module docstring; default: draws
    from T = 5 on)."""
    _check(T, points, scrambles)
    require(np.isfinite(q) and q >= 0, "q", "finite >= 0", q)
    require(np.isfinite(V) and V > 0, "V", "finite > 0", V)
    t0 = time.perf_counter()
    r = q / V
    estimator = _estimator(T, estimator)
    e, psi, mass, sweep = _scramble_means(T, r, points, scrambles, seed, outcomes, control,
                                          estimator)
    k = coverage_factor(scrambles)

    E_hat = float(e.mean())
    err = k * standard_error(e) + sweep + 1e-14 * abs(E_hat)
    return Estimate(E_hat / V, err / V,
                    f"ordered-cone recursion at each omega, randomised QMC over the "
                    f"{T * (T + 1) // 2 - 1} shift-free omega directions ({scrambles} scrambles "
                    f"x {points} Sobol points, "
                    f"{'y drawn per point' if estimator == 'draws' else outcomes}"
                    f"{', per-orbit control variates' if control else ''}); error = "
                    f"{k:.3g} x standard error + sweep error",
                    extra={"r": r, "E_hat": E_hat, "E_hat_error": err,
                           "psi_out": float(psi.mean()),
                           "psi_out_error": k * standard_error(psi) + sweep,
                           "mass": None if estimator == "draws" else float(mass.mean()),
                           "mass_error": None if estimator == "draws" else standard_error(mass),
                           "per_scramble": e, "sweep_error": sweep, "coverage_factor": k,
                           "seconds": time.perf_counter() - t0})


def monte_carlo_e(*, T: int, q: float, V: float, samples: int, seed: int = 2026,
                  kernel: str = "winner") -> Estimate:
    """E(q, V) by seeded plain Monte Carlo (independent of the Sobol points, the orbits and the
    control variates): omega and h drawn, y = the row-wise argmax of h, |g_y(omega)|_W^2 from
    :func:`moments` (``kernel``) at the drawn y; error = standard error of the mean."""
    require(isinstance(T, int) and not isinstance(T, bool)
            and QMC_TOKENS[0] <= T <= QMC_TOKENS[1], "tokens",
            f"an integer in {QMC_TOKENS[0]}..{QMC_TOKENS[1]}", T)
    require(isinstance(samples, int) and samples >= 100, "samples", "an integer >= 100",
            samples)
    require(np.isfinite(q) and q >= 0, "q", "finite >= 0", q)
    require(np.isfinite(V) and V > 0, "V", "finite > 0", V)
    rng = np.random.default_rng(seed)
    flat = pairs(T)
    W = weights(T)
    sd = np.sqrt(W)
    om = math.sqrt(q / V) * sd * rng.standard_normal((samples, len(flat)))  # V = 1 units
    h = om + sd * rng.standard_normal((samples, len(flat)))
    H = np.empty((samples, T, T))
    for k, (a, b) in enumerate(flat):
        H[:, a, b] = h[:, k]
        H[:, b, a] = h[:, k]
    Y = np.argmax(H, axis=2)
    codes = Y @ (T ** np.arange(T)[::-1])
    vals = np.zeros(samples)
    for code in np.unique(codes):
        sel = np.nonzero(codes == code)[0]
        y = tuple(int(c) for c in Y[sel[0]])
        mom = moments(T, [y], om[sel], kernel=kernel)[0]
        g = mom[:, 1:] / mom[:, :1] / W
        vals[sel] = (W * g * g).sum(axis=1) / V
    return Estimate(float(vals.mean()), standard_error(vals),
                    f"seeded Monte Carlo ({samples} draws of omega and h, seed {seed}, "
                    f"{kernel} kernel); error = standard error", extra={"samples": samples})


def generalisation_error_qmc(*, T: int, q: float, V: float, points: int = 2048,
                             scrambles: int = 8, seed: int = 2026) -> Estimate:
    """Bayes-optimal e_gen = T (1 - E_omega sum_b P(y_0 = b | omega)^2) of hardmax (THEORY 1.5;
    the row rule of :func:`aim_sym.numerics.hardmax_se.generalisation_error`) with the omega
    expectation over row 0's T - 1 whitened shift-free directions by randomised QMC (the
    trapezoid rule there costs (2 x 8.5 / h)^(T - 1) points: 4 dimensions at T = 5). Error =
    t_(J-1, 0.995) x the standard error over the scrambles + 1e-10 (the row probabilities'
    Gauss-Legendre rule: 4e-12 off egen.hardmax_q0(5) at q = 0). The same seed gives the same
    points at every (q, V)."""
    from .hardmax_se import argmax_row_basis, argmax_row_probabilities

    _check(T, points, scrambles)
    require(np.isfinite(q) and q >= 0, "q", "finite >= 0", q)
    require(np.isfinite(V) and V > 0, "V", "finite > 0", V)
    r = q / V
    A = argmax_row_basis(T)
    sd = np.sqrt(np.array([2.0] + [1.0] * (T - 1)))
    rng = np.random.default_rng(seed)
    vals = np.empty(scrambles)
    for j in range(scrambles):
        u = qmc.Sobol(d=A.shape[1], scramble=True, seed=rng).random_base2(int(math.log2(points)))
        mu = math.sqrt(r) * ndtri(np.clip(u, 1e-300, 1.0 - 1e-16)) @ A.T
        P = argmax_row_probabilities(mu, sd)
        vals[j] = T * (1.0 - float((P * P).sum(axis=1).mean()))
    k = coverage_factor(scrambles)
    return Estimate(float(vals.mean()), k * standard_error(vals) + 1e-10,
                    f"row argmax probabilities under randomised QMC over the row's {T - 1} "
                    f"whitened shift-free directions ({scrambles} scrambles x {points} Sobol "
                    f"points); error = {k:.3g} x standard error",
                    extra={"per_scramble": vals})


def egen_at(*, T: int, q: float, V: float, step: float = 0.6) -> Estimate:
    """e_gen at (q, V): the trapezoid row rule of :mod:`aim_sym.numerics.hardmax_se` (step
    ``step``) at T <= 4, :func:`generalisation_error_qmc` at T = 5."""
    if T <= 4:
        return generalisation_error(T=T, q=q, V=V, step=step)
    return generalisation_error_qmc(T=T, q=q, V=V)


def e_hat_curves(*, T: int = 4, r_max: float, r_min: float = 0.0, nodes: int = 9,
                 points: int = 256, scrambles: int = 8, seed: int = 2026,
                 outcomes: str = "orbits", control: bool = False,
                 estimator: str | None = None) -> dict:
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
        e, psi, _, sw = _scramble_means(T, float(ri), points, scrambles, seed, outcomes,
                                        control, _estimator(T, estimator))
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
    n_fixed_points, seconds; with ``with_egen``, e_gen at the fixed point from :func:`egen_at`
    (T <= 4: trapezoid step ``egen_step``; T = 5: randomised QMC), e_gen_error = its bar + its
    largest change at mmse +- error (three evaluations; at T = 4 ~10 s each at r ~ 0.6, growing
    like r^1.5; at T = 5 ~0.5 s each: off by default)."""
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
            g = egen_at(T=curves["T"], q=Q0 - V, V=V, step=egen_step)
            ends = [egen_at(T=curves["T"], q=Q0 - v, V=v, step=egen_step).value
                    for v in (V - dV, min(V + dV, 0.9999))]
            row.update(e_gen=g.value,
                       e_gen_error=g.error + max(abs(x - g.value) for x in ends))
        row["seconds"] = time.perf_counter() - t0
        rows.append(row)
    return rows


def alpha_max(*, T: int, rho: float, r_max: float, points: int, scrambles: int = 8,
              seed: int = 2026) -> Estimate:
    """The alpha whose SE fixed point sits at q/V = r_max (mmse V = Q0 / (1 + r_max)):
    V / (2 Delta(V) E_hat(r_max)) (THEORY 1.1), E_hat by :func:`output_e_qmc`; alpha(V) grows
    as V falls on the computed range (every curve of docs/hardmax_se.md), so larger alphas need
    r beyond r_max. Error: E_hat's relative bar."""
    require(np.isfinite(rho) and 0 < rho < r_max, "rho", f"finite, in (0, r_max = {r_max:g})",
            rho)
    V = (1.0 + rho) / (1.0 + r_max)
    e = output_e_qmc(T=T, q=r_max, V=1.0, points=points, scrambles=scrambles, seed=seed)
    a = _alpha(V, rho, e.value)
    return Estimate(a, a * e.error / e.value, f"alpha at q/V = {r_max:g}; E_hat: {e.method}",
                    extra={"mmse": V, "E_hat": e.value, "E_hat_error": e.error})


def se_curve(*, rho: float, alphas: Sequence[float], T: int = 4, r_max: float = 5.0,
             nodes: int = 9, points: int = 256, scrambles: int = 8, seed: int = 2026,
             with_egen: bool = False, estimator: str | None = None) -> list[dict]:
    """The Bayes-optimal SE fixed point per alpha at T tokens (rows of :func:`se_curve_qmc`):
    :func:`e_hat_curves` on [rho, r_max] (r = rho is the alpha -> 0 end, mmse = 1; r_max bounds
    the smallest mmse, Q0 / (1 + r_max)), then :func:`se_curve_qmc`. At rho = 0.5 and T = 4 the
    default reaches mmse 0.25 (alpha = 0.1 sits at mmse 0.30; docs/hardmax_se.md, "T = 4"); at
    T = 5 the command line uses points=4096 with the drawn-y estimator (alpha = 0.08 at mmse
    0.26; "T = 5"); ConvergenceError for an alpha beyond."""
    require(np.isfinite(rho) and 0 < rho < r_max, "rho", f"finite, in (0, r_max = {r_max:g})",
            rho)
    curves = e_hat_curves(T=T, r_min=rho, r_max=r_max, nodes=nodes, points=points,
                          scrambles=scrambles, seed=seed, estimator=estimator)
    return se_curve_qmc(rho=rho, alphas=alphas, curves=curves, with_egen=with_egen)


# ----------------------------------------------------------------------------- winner kernel
@lru_cache(maxsize=1024)
def _winner_structure(y: tuple[int, ...]) -> tuple:
    """The ordered-cone recursion over row winners of outcome y (docs/hardmax_se.md, "T = 5"):
    the winner entries (one variable each, a mutual pair shares one), per variable the mask of
    variables it must stay below, and per feasible step (S, j) the non-winner entries whose
    smallest row winner is the newly added largest variable j."""
    T = len(y)
    flat = pairs(T)
    idx = {p: i for i, p in enumerate(flat)}
    win = [idx[(min(a, y[a]), max(a, y[a]))] for a in range(T)]
    ents = sorted(set(win))
    var = {e: j for j, e in enumerate(ents)}
    row_var = [var[win[a]] for a in range(T)]
    k = len(ents)
    below = [0] * k  # below[j]: variables that X_j must stay below
    for j, e in enumerate(ents):
        for b in set(flat[e]):
            if row_var[b] != j:
                below[j] |= 1 << row_var[b]
    under = [sum(1 << i for i in range(k) if below[i] >> j & 1) for j in range(k)]
    others = [(e, (1 << row_var[a]) | (1 << row_var[c])) for e, (a, c) in enumerate(flat)
              if e not in var]
    levels: list[list[tuple[int, list[tuple[int, int, tuple[int, ...]]]]]] = []
    for size in range(1, k + 1):
        level = []
        for S in range(1 << k):
            if bin(S).count("1") != size:
                continue
            terms = []
            for j in range(k):
                R = S ^ (1 << j)
                if not S >> j & 1 or below[j] & R or under[j] & ~R:
                    continue
                settled = tuple(e for e, m in others if m >> j & 1 and not m & R)
                terms.append((R, j, settled))
            if terms:
                level.append((S, terms))
        levels.append(level)
    return tuple(ents), levels, k


def winner_moments(ys: Sequence[tuple[int, ...]], w: np.ndarray, nodes: int,
                   L: float = TAIL_L) -> np.ndarray:
    """[Z_y, E[(h_ab - w_ab) 1_y] for (a, b) in pairs] at V = 1 for means w (N x n), every y
    in ``ys``: an array (len(ys), N, 1 + n). Given the row winners' values X_j, every other
    entry only has to stay below the smallest winner of its rows, a one-variable factor once
    the X_j are ordered; the upward sweep runs over the <= T winner variables (2^T subsets
    instead of the 2^(T(T-1)/2) of the generic recursion), on a Chebyshev-Lobatto grid of
    [min(w - L sd), max(w + L sd)] with ``nodes`` points."""
    T = len(ys[0])
    n = T * (T + 1) // 2
    sd = np.sqrt(weights(T))
    N = w.shape[0]
    K = 1 + n
    lo = (w - L * sd).min(axis=1)
    hi = (w + L * sd).max(axis=1)
    half = 0.5 * (hi - lo)
    x, C1 = chebyshev_tail_rule(nodes, 1.0)
    s = 0.5 * (hi + lo)[:, None] + half[:, None] * x[None, :]  # (N, nodes), hi down to lo
    up = np.ascontiguousarray((C1[-1][None, :] - C1).T)  # g @ up: int_lo^t on [-1, 1]
    top = up[:, 0]
    zs = (s[:, None, :] - w[:, :, None]) / sd[None, :, None]  # (N, n, nodes)
    cdf = ndtr(zs)
    pdf = np.exp(-0.5 * zs * zs) / math.sqrt(2 * math.pi)
    dens = pdf / sd[None, :, None]  # the entry's density at s
    dmom = -sd[None, :, None] * pdf  # E[(h - w) 1(h < s)]
    out = np.zeros((len(ys), N, K))
    for iy, y in enumerate(ys):
        ents, levels, k = _winner_structure(tuple(int(c) for c in y))
        G: dict[int, np.ndarray] = {0: np.ones((N, K, nodes))}
        for size, level in enumerate(levels, start=1):
            new = {}
            for S, terms in level:
                acc = None
                for R, j, settled in terms:
                    GR = G.get(R)
                    if GR is None:
                        continue
                    e = ents[j]
                    base = dens[:, e].copy()
                    for f in settled:
                        base *= cdf[:, f]
                    term = base[:, None, :] * GR
                    # the winner's own channel: its density times (s - w_e)
                    term[:, 1 + e] *= zs[:, e] * sd[e]
                    for f in settled:
                        mod = dens[:, e] * dmom[:, f]
                        for g in settled:
                            if g != f:
                                mod = mod * cdf[:, g]
                        term[:, 1 + f] = mod * GR[:, 1 + f]
                    acc = term if acc is None else acc + term
                if acc is not None:
                    new[S] = acc
            if size == k:
                full = (1 << k) - 1
                if full in new:
                    out[iy] = (new[full] @ top) * half[:, None]
                break
            G = {S: (acc.reshape(-1, nodes) @ up).reshape(acc.shape) * half[:, None, None]
                 for S, acc in new.items()}
    return out


def _z_out_t(T: int, omega: np.ndarray, V: float, nodes: int) -> tuple[np.ndarray, np.ndarray]:
    """Z_y and g_y (every outcome, rows of ``omega``) at variance V by :func:`winner_moments`."""
    W = weights(T)
    mom = winner_moments(all_outcomes(T), np.atleast_2d(omega) / math.sqrt(V), nodes)
    Z = mom[:, :, 0]
    pos = Z > 1e-300
    G = np.where(pos[..., None], mom[:, :, 1:] * math.sqrt(V)
                 / np.where(pos, Z, 1.0)[..., None], 0.0) / (W * V)
    return Z, G


def run_checks(*, T: int = 5, seed: int = 2026, nodes: int = 160) -> list[dict]:
    """The identity checks of THEORY 4 for hardmax at T tokens by the winner kernel (``aim-sym
    check --channel hardmax --tokens 5``; T = 3, 4 are checked in full by
    :func:`aim_sym.numerics.hardmax_se.run_checks`). At T = 5 the 3125 outcomes cost ~10 s per
    omega, so the derivative identities are taken along one seeded direction d: normalisation
    sum_y Z_y = 1 and the first Nishimori identity sum_y Z_y g_y = 0 at two seeded omega (V = 0.7);
    g_y . d against the Richardson-extrapolated central difference of log Z_y along d; the
    second Nishimori identity along d, sum_y Z_y ((g_y . d)^2 + d^T dg_y d) = 0 (d^T dg d by
    central differences of g . d); and omega = 0, V = 1 against the q = 0 recursion of
    :mod:`.hardmax` (S). Each row: name, passed, detail."""
    _check(T, 16, 4)
    rng = np.random.default_rng(seed)
    n = T * (T + 1) // 2
    W = weights(T)
    om = 0.6 * rng.standard_normal((2, n)) * np.sqrt(W)
    d = rng.standard_normal(n)
    d /= np.linalg.norm(d)
    V = 0.7
    Z, G = _z_out_t(T, om, V, nodes)
    rows = []
    err = float(np.max(np.abs(Z.sum(axis=0) - 1)))
    rows.append({"name": "normalisation", "passed": err < 1e-9,
                 "detail": f"max |sum_y Z - 1| = {err:.1e} at 2 seeded omega over {len(Z)} "
                           "outcomes (tol 1e-9)"})
    err = float(np.max(np.abs(np.einsum("yn,ynk->nk", Z, G))))
    rows.append({"name": "nishimori (first)", "passed": err < 1e-8,
                 "detail": f"max |sum_y Z g| = {err:.1e} (tol 1e-8)"})
    o, Z0, g0 = om[0], Z[:, 0], G[:, 0]
    live = Z0 > 1e-8
    zs = {h: _z_out_t(T, np.stack([o + h * d, o - h * d]), V, nodes) for h in (2e-3, 1e-3)}
    with np.errstate(divide="ignore", invalid="ignore"):
        fd = [(np.log(zs[h][0][:, 0]) - np.log(zs[h][0][:, 1])) / (2 * h) for h in (2e-3, 1e-3)]
    fd_r = (4 * fd[1] - fd[0]) / 3
    err = float(np.max(np.abs(fd_r[live] - (g0 @ d)[live])))
    rows.append({"name": "g_out . d = d log Z_out / d omega along d", "passed": err < 1e-6,
                 "detail": f"max |g.d - finite difference| = {err:.1e} over {int(live.sum())} "
                           "outcomes (one seeded direction; Richardson, steps 2e-3, 1e-3; "
                           "tol 1e-6)"})
    h = 1e-3
    gp, gm = zs[h][1][:, 0] @ d, zs[h][1][:, 1] @ d
    ddg = (gp - gm) / (2 * h)
    gd2 = (g0 @ d) ** 2
    err = abs(float(Z0 @ (gd2 + ddg)))
    rows.append({"name": "nishimori (second, along d)", "passed": err < 1e-5,
                 "detail": f"|sum_y Z ((g.d)^2 + d^T dg d)| = {err:.1e} against sum_y Z "
                           f"(g.d)^2 = {float(Z0 @ gd2):.4g} (central differences, tol 1e-5)"})
    Zq, Gq = _z_out_t(T, np.zeros((1, n)), 1.0, nodes)
    rows.append(zero_omega_row(T, Zq[:, 0], Gq[:, 0]))
    return rows
