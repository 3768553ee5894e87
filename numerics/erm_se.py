"""State evolution of ERM for one tied attention layer, T = 2 to 6 tokens (THEORY 3).

Six order parameters: (q, m, Sigma) on the student side, (q_hat, m_hat, Sigma_hat) conjugate.

Output side (:mod:`numerics.erm_output`), with Q0n = Q0 + Delta/2 (label noise folded in):
    q_hat = 2 alpha E[sum (p - z)^2] / Sigma^2,
    m_hat = 2 alpha E[sum (p - z)(q z0n - m z)] / (Sigma (Q0n q - m^2)),
    Sigma_hat = -2 alpha E[sum (p - z)(Q0n z - m z0n)] / (Sigma (Q0n q - m^2)).
Prior side (:mod:`numerics.erm_spectral`), delta = sqrt(q_hat)/m_hat, eps = 2 lambda/m_hat,
eta = m_hat/Sigma_hat:
    q = eta^2 J,  m = eta J - sqrt(q_hat)/(2 Sigma_hat) d_delta J - (lambda/Sigma_hat) d_eps J,
    Sigma = m_hat d_delta J / (2 sqrt(q_hat) Sigma_hat).
Training loss per d^2 (regulariser included), the potential whose stationary points are the
fixed points (each equation above is d Phi = 0 in one parameter; checked in the tests):
    Phi = (q_hat Sigma - Sigma_hat q)/4 + m_hat m/2 + alpha E[min_u (...)] - m_hat^2 J/(4 Sigma_hat).
Test error against a noisy label and matrix error Q0 + q - 2m; rank mu_delta((eps, inf)).

The fixed point is found by a damped iteration with Anderson mixing on (log q, m, log Sigma);
the error of each quantity is the difference between the fixed points at two Gauss-Hermite
orders n_lo < n of the output side, times n_lo / (n - n_lo): the rule converges only
algebraically (the proximal step switches minimiser across a surface), and this is the error
of the order-n value if it falls at least as 1/n (:func:`algebraic_factor`).  ``rule="split"``
(T = 2): the output side by the piecewise rule (:func:`.erm_output.output_moments_split`: the
prox's jumps located on lines, outer Gauss-Hermite orders 16/12), same bar factor.

T >= 3 (:mod:`numerics.erm_output_tokens`): the output side by randomised QMC, R scrambled
Sobol replicates of ``qmc_points`` each (common random numbers: the map is deterministic).  The
value is the fixed point of the pooled map; its error bar is COVER (= 3) times the standard error
of the R fixed points of the single-replicate maps, each started from the pooled one, so the QMC
error is carried through the fixed point without linearisation (:func:`solve_tokens`).
Default starts: :data:`DEFAULT_INITS` (T = 2), :data:`DEFAULT_INITS_TOKENS` (T >= 3, with a
large-Sigma start for the interpolating phase).

lambda -> 0+ at alpha <= alpha_interp (:func:`interpolator_limit`): the minimum-nuclear-norm
interpolator, closed on the spectral (delta, eps) (derivation in docs/erm_peak.md).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np
from scipy.optimize import brentq, root

from . import erm_output_tokens as qmc_route
from .erm_output import (
    _ORDER,
    _ORDER_LO,
    SPLIT_ORDER,
    SPLIT_ORDER_LO,
    generalisation_error,
    output_moments,
    output_moments_split,
    zero_estimator_rates,
)
from .erm_spectral import spectral_integrals
from .erm_thresholds import delta_bracket
from .records import ConvergenceError, require, require_reals
from .wishart import support

__all__ = ["ERMParams", "FixedPoint", "hats_from_overlaps", "overlaps_from_hats",
           "potential", "fixed_point", "solve", "solve_tokens", "DEFAULT_INITS", "DEFAULT_INITS_TOKENS",
           "InterpolatorLimit", "interpolator_limit", "map_jacobian", "zero_estimator",
           "spectral_fixed_point", "spectral_fixed_point_tokens", "ChordFixedPoint",
           "chord_iterate", "chord_fixed_point"]

# (q/Q0, m/Q0, Sigma) starting points: a weak, a middle and a strong overlap
DEFAULT_INITS = ((0.2, 0.1, 20.0), (0.6, 0.5, 2.0), (0.95, 0.9, 0.2))
# T >= 3 adds a large-Sigma start: below the interpolation threshold the fixed point has
# Sigma ~ 1/lambda and the middle start can diverge (alpha = 0.02, Delta = 0.5; alpha = 0.049,
# Delta = 0, T = 3).  A start that reaches an earlier one's fixed point costs only the cheap stage.
DEFAULT_INITS_TOKENS = (*DEFAULT_INITS, (0.6, 0.5, 200.0))
_START_ORDER = 12  # Gauss-Hermite order of the first, cheap approach to a fixed point
MIN_DAMPING = 0.02  # the smallest damping the iteration halves down to when a step leaves the domain


@dataclass(frozen=True)
class ERMParams:
    """Parameters of the ERM SE (THEORY 3); Delta is the pre-activation noise variance."""

    alpha: float
    kappa0: float
    Delta: float
    lam: float
    beta: float = 1.0
    beta0: float = 1.0
    tokens: int = 2
    qmc_points: int = 2**11  # T >= 3: scrambled Sobol points per replicate (a power of 2)
    qmc_replicates: int = 16  # T >= 3: independent scramblings (standard error from their spread)
    qmc_seed: int = 0

    def __post_init__(self) -> None:
        require_reals(self, positive=("alpha", "kappa0", "beta", "beta0"),
                      nonnegative=("Delta", "lam"))
        require(not isinstance(self.tokens, bool) and self.tokens in qmc_route.TOKENS, "tokens",
                f"one of {qmc_route.TOKENS} (T = 2: deterministic quadrature; T >= 3: "
                "randomised quasi-Monte Carlo)", self.tokens)
        object.__setattr__(self, "tokens", int(self.tokens))
        require(self.kappa0 >= 1e-4, "kappa0", ">= 1e-4", self.kappa0)
        require(isinstance(self.qmc_points, int) and self.qmc_points >= 2**7
                and self.qmc_points & (self.qmc_points - 1) == 0, "qmc_points",
                "a power of 2 >= 128", self.qmc_points)
        require(isinstance(self.qmc_replicates, int) and 4 <= self.qmc_replicates <= 256,
                "qmc_replicates", "an integer in [4, 256]", self.qmc_replicates)
        require(isinstance(self.qmc_seed, int) and self.qmc_seed >= 0, "qmc_seed",
                "an integer >= 0", self.qmc_seed)

    @property
    def Q0(self) -> float:
        return 1.0 + self.kappa0

    @property
    def Q0n(self) -> float:
        return 1.0 + self.kappa0 + self.Delta / 2



@dataclass(frozen=True)
class FixedPoint:
    """One SE fixed point with its derived quantities."""

    q: float
    m: float
    sigma: float
    q_hat: float
    m_hat: float
    sigma_hat: float
    train: float
    test: float
    mse: float
    rank: float
    iterations: int
    residual: float
    errors: dict = field(default_factory=dict)
    global_minimum: bool = False

    def as_dict(self) -> dict:
        keys = ("q", "m", "sigma", "q_hat", "m_hat", "sigma_hat", "train", "test", "mse", "rank")
        out = {k: getattr(self, k) for k in keys}
        out.update({f"{k}_error": self.errors.get(k, float("nan")) for k in keys})
        out.update(iterations=self.iterations, residual=self.residual,
                   global_minimum=self.global_minimum)
        return out


RULES = ("gh", "split")  # T = 2 output rules: tensor Gauss-Hermite, or the piecewise rule


def _moments(q: float, m: float, sigma: float, p: ERMParams, *, order: int,
             replicate: int | None, points: int | None, rule: str = "gh"):
    """Output moments: T = 2 Gauss-Hermite of ``order`` (``rule="gh"``) or the piecewise rule
    of outer ``order`` (``rule="split"``, :func:`.erm_output.output_moments_split`); T >= 3
    randomised QMC (:mod:`.erm_output_tokens`) with ``points`` per replicate (default
    ``p.qmc_points``), all replicates pooled or only ``replicate``."""
    if p.tokens == 2 and rule == "split":
        return output_moments_split(q=q, m=m, sigma=sigma, Q0n=p.Q0n, beta=p.beta,
                                    beta0=p.beta0, order=order)
    if p.tokens == 2:
        return output_moments(q=q, m=m, sigma=sigma, Q0n=p.Q0n, beta=p.beta, beta0=p.beta0,
                              order=order)
    return qmc_route.output_moments(
        q=q, m=m, sigma=sigma, Q0n=p.Q0n, tokens=p.tokens, beta=p.beta, beta0=p.beta0,
        points=points or p.qmc_points, replicates=p.qmc_replicates, seed=p.qmc_seed,
        only=replicate).mean


def hats_from_overlaps(q: float, m: float, sigma: float, p: ERMParams, *,
                       order: int = _ORDER, replicate: int | None = None,
                       points: int | None = None,
                       rule: str = "gh") -> tuple[float, float, float, float]:
    """(q_hat, m_hat, Sigma_hat, E min) from (q, m, Sigma): the output side (THEORY 3).
    ``replicate``, ``points``: T >= 3 only; ``rule``: T = 2 only (see :func:`_moments`)."""
    o = _moments(q, m, sigma, p, order=order, replicate=replicate, points=points, rule=rule)
    den = sigma * (p.Q0n * q - m * m)
    return (2 * p.alpha * o.sq / sigma**2, 2 * p.alpha * o.cross_m / den,
            -2 * p.alpha * o.cross_s / den, o.envelope)


def overlaps_from_hats(q_hat: float, m_hat: float, sigma_hat: float,
                       p: ERMParams) -> tuple[float, float, float, object]:
    """(q, m, Sigma, spectral integrals) from the hats: the prior side (THEORY 3)."""
    require(q_hat > 0 and m_hat > 0 and sigma_hat > 0, "hats", "all > 0",
            (q_hat, m_hat, sigma_hat))
    delta, eps, eta = math.sqrt(q_hat) / m_hat, 2 * p.lam / m_hat, m_hat / sigma_hat
    s = spectral_integrals(kappa0=p.kappa0, delta=delta, eps=eps)
    q = eta * eta * s.J
    m = eta * s.J - math.sqrt(q_hat) / (2 * sigma_hat) * s.dJ_ddelta - p.lam / sigma_hat * s.dJ_deps
    sigma = m_hat * s.dJ_ddelta / (2 * math.sqrt(q_hat) * sigma_hat)
    return q, m, sigma, s


def potential(q: float, m: float, sigma: float, q_hat: float, m_hat: float, sigma_hat: float,
              p: ERMParams, *, order: int = _ORDER, replicate: int | None = None,
              points: int | None = None, rule: str = "gh") -> float:
    """The training-loss potential Phi (THEORY 3) at any six order parameters."""
    env = _moments(q, m, sigma, p, order=order, replicate=replicate, points=points,
                   rule=rule).envelope
    s = spectral_integrals(kappa0=p.kappa0, delta=math.sqrt(q_hat) / m_hat,
                           eps=2 * p.lam / m_hat)
    return ((q_hat * sigma - sigma_hat * q) / 4 + m_hat * m / 2 + p.alpha * env
            - m_hat * m_hat * s.J / (4 * sigma_hat))


def _to_x(q: float, m: float, sigma: float) -> np.ndarray:
    return np.array([math.log(q), m, math.log(sigma)])


def _from_x(x: np.ndarray) -> tuple[float, float, float]:
    return math.exp(x[0]), float(x[1]), math.exp(x[2])


def fixed_point(p: ERMParams, *, q: float, m: float, sigma: float, order: int = _ORDER,
                tol: float = 1e-11, max_iter: int = 400, damping: float = 0.5,
                anderson: int = 4, prior: Callable | None = None,
                label: str = "ERM SE", replicate: int | None = None,
                points: int | None = None, rule: str = "gh") -> tuple[tuple, int, float]:
    """Iterate the SE map from (q, m, Sigma) to a fixed point.

    ``prior`` maps (q_hat, m_hat, Sigma_hat, p) to the overlaps (default: the factorised
    :func:`overlaps_from_hats`; :mod:`~aim_sym.numerics.erm_direct` passes its linear one).
    Returns ((q, m, Sigma, q_hat, m_hat, Sigma_hat), iterations, residual); raises
    :class:`ConvergenceError` (with the last iterate) when the change does not fall below ``tol``.
    ``replicate``, ``points``: the QMC output side of T >= 3 (:func:`hats_from_overlaps`); the
    map is deterministic for fixed points (common random numbers).  ``rule``: the T = 2 output
    rule, ``"gh"`` or ``"split"`` (:data:`RULES`).
    """
    require(rule in RULES, "rule", f"one of {RULES}", rule)
    prior = overlaps_from_hats if prior is None else prior
    x = _to_x(q, m, sigma)
    xs: list[np.ndarray] = []
    fs: list[np.ndarray] = []
    res = math.inf
    hats = (math.nan,) * 3
    good: np.ndarray | None = None  # the last iterate at which the map was defined
    for it in range(1, max_iter + 1):
        qq, mm, ss = _from_x(x)
        # keep the iterate admissible (m^2 < Q0n q)
        lim = 0.999 * math.sqrt(p.Q0n * qq)
        mm = max(min(mm, lim), -lim)
        try:
            hats = hats_from_overlaps(qq, mm, ss, p, order=order, replicate=replicate,
                                      points=points, rule=rule)[:3]
            new = prior(*hats, p)[:3]
            gx = _to_x(*new) if new[0] > 0 and new[2] > 0 else None
        except (ValueError, FloatingPointError):
            gx = None
        if gx is None or not np.all(np.isfinite(gx)):
            # a step left the map's domain: back to the last good iterate with half the
            # damping and no Anderson history (small alpha: the first steps overshoot)
            if good is None or damping < MIN_DAMPING:
                raise ConvergenceError(f"{label} map left its domain",
                                       last_iterate=(qq, mm, ss), residual=res)
            damping /= 2
            x, xs, fs = good + damping * fs[-1], xs[-1:], fs[-1:]
            continue
        good = x.copy()
        f = gx - x
        res = float(np.max(np.abs(f)))
        if res < tol:
            return (*new, *hats), it, res
        xs.append(x.copy())
        fs.append(f)
        xs, fs = xs[-(anderson + 1):], fs[-(anderson + 1):]
        x_next = x + damping * f
        if anderson and len(fs) > 1:
            dF = np.array([fs[k + 1] - fs[k] for k in range(len(fs) - 1)]).T
            dX = np.array([xs[k + 1] - xs[k] for k in range(len(xs) - 1)]).T
            try:
                gamma = np.linalg.lstsq(dF, f, rcond=None)[0]
                cand = x + damping * f - (dX + damping * dF) @ gamma
                if np.all(np.isfinite(cand)) and np.max(np.abs(cand - x)) < 2.0:
                    x_next = cand
            except np.linalg.LinAlgError:
                pass
        x = x_next
    raise ConvergenceError(f"{label} fixed point", last_iterate=_from_x(x), residual=res)


def _derived(p: ERMParams, params: tuple, order: int, rule: str = "gh") -> dict:
    q, m, sigma, q_hat, m_hat, sigma_hat = params
    s = spectral_integrals(kappa0=p.kappa0, delta=math.sqrt(q_hat) / m_hat,
                           eps=2 * p.lam / m_hat)
    fine = order >= (SPLIT_ORDER if rule == "split" else _ORDER)
    return {
        "train": potential(q, m, sigma, q_hat, m_hat, sigma_hat, p, order=order, rule=rule),
        "test": generalisation_error(q=q, m=m, Q0n=p.Q0n, beta=p.beta, beta0=p.beta0,
                                     step=0.2 if fine else 0.25),
        "mse": p.Q0 + q - 2 * m,
        "rank": s.rank,
    }


def algebraic_factor(order: int, order_lo: int) -> float:
    """n_lo / (n - n_lo): the error of the order-n value is |x_n - x_lo| times this when the
    error falls as C / n (slower than the measured rate between orders 24, 30 and 36)."""
    return order_lo / (order - order_lo)


def split_factor(order: int, order_lo: int) -> float:
    """The bar factor of the piecewise rule: n_lo / (n - n_lo), the same as
    :func:`algebraic_factor` (error ~ C / n).  Measured steps between outer orders 12, 16, 20,
    24 fall like n^-2.6 at Sigma = 3 but only like n^-1 at Sigma ~ 10 (docs/erm.md)."""
    return algebraic_factor(order, order_lo)


def solve(p: ERMParams, *, inits: tuple | None = None, order: int | None = None,
          order_lo: int | None = None, tol: float = 1e-11, prior: Callable | None = None,
          derived: Callable | None = None, label: str = "ERM SE",
          rule: str = "gh") -> list[FixedPoint]:
    """All fixed points reached from ``inits`` ((q/Q0, m/Q0, Sigma) triples), deduplicated,
    each with errors from the fixed point at ``order_lo``; the one of lowest training loss is
    flagged ``global_minimum``.  Raises ConvergenceError when no start converges.  Each start
    is iterated at order 12 first, then at ``order_lo``, then at ``order``.  ``prior`` (see
    :func:`fixed_point`) and ``derived`` ((p, params, order) -> train, test, mse, rank) default
    to the factorised model's.  ``inits=None``: :data:`DEFAULT_INITS` at T = 2,
    :data:`DEFAULT_INITS_TOKENS` (with a large-Sigma start) at T >= 3.
    ``rule="split"`` (T = 2, factorised model): the output side by the piecewise rule
    (:func:`.erm_output.output_moments_split`) at outer orders ``order``/``order_lo`` (default
    16/12), started from the Gauss-Hermite fixed points (orders 12 and 17); bar = the
    difference times :func:`split_factor`."""
    require(rule in RULES, "rule", f"one of {RULES}", rule)
    if rule == "split":
        require(p.tokens == 2 and prior is None and derived is None, "rule",
                "'gh' for T >= 3 or a custom prior side (the piecewise rule is T = 2, "
                "factorised)", rule)
        order = SPLIT_ORDER if order is None else order
        order_lo = SPLIT_ORDER_LO if order_lo is None else order_lo
    order = _ORDER if order is None else order
    order_lo = _ORDER_LO if order_lo is None else order_lo
    if inits is None:
        inits = DEFAULT_INITS if p.tokens == 2 else DEFAULT_INITS_TOKENS
    if p.tokens != 2:
        require(prior is None and derived is None, "tokens",
                "2 for a custom prior side (T >= 3 is the factorised model only)", p.tokens)
        fps = []
        zero = zero_estimator(p)
        try:
            fps = solve_tokens(p, inits=inits, label=label)
        except ConvergenceError as e:
            if zero is None and p.lam > 0:
                # small alpha: the root in the prior side's coordinates, as at T = 2
                fps = flag_global_minimum([spectral_fixed_point_tokens(p, label=label,
                                                                      failure=e)])
            elif zero is None:
                raise
        if zero is None:
            return fps
        return flag_global_minimum([*fps, zero])
    zero = zero_estimator(p) if prior is None and derived is None else None
    if derived is None:
        def derived(p, params, order):
            return _derived(p, params, order, rule)
    kw = {"tol": tol, "prior": prior, "label": label}
    split = {"rule": rule}
    names = ("q", "m", "sigma", "q_hat", "m_hat", "sigma_hat")
    found: list[FixedPoint] = []
    failures = []
    cheap: list[tuple] = []

    def add(params: tuple, lo: tuple, its: int, res: float) -> None:
        if any(_close(params, (f.q, f.m, f.sigma)) for f in found):
            return
        d_hi, d_lo = derived(p, params, order), derived(p, lo, order_lo)
        # Gauss-Hermite converges only algebraically here (the prox switches minimiser across
        # a surface): orders 24/30/36 move q by nearly equal steps.  The bar of the order-n
        # value assumes error ~ C / n (first order at least), i.e. |x_n - x_lo| n_lo / (n - n_lo).
        grow = (split_factor if rule == "split" else algebraic_factor)(order, order_lo)
        errors = {k: grow * abs(a - b) for k, a, b in zip(names, params, lo, strict=True)}
        errors.update({k: grow * abs(d_hi[k] - d_lo[k]) for k in d_hi})
        found.append(FixedPoint(*params, **d_hi, iterations=its, residual=res, errors=errors))

    for qi, mi, si in inits:
        if qi <= 0 or si <= 0:  # the zero estimator (a previous point of a curve) as a start
            continue
        # a cheap order first, then the two orders of the error estimate, each started from
        # the previous fixed point
        start = (qi * p.Q0, mi * p.Q0, si)
        try:
            first, _, _ = fixed_point(p, q=start[0], m=start[1], sigma=start[2],
                                      order=min(_START_ORDER, order_lo), **kw)
            if any(_close(first, c) for c in cheap):
                continue  # the same fixed point as an earlier start
            cheap.append(first[:3])
            if rule == "split":  # the Gauss-Hermite fixed point first (cheap, ~1e-3 close)
                first, _, _ = fixed_point(p, q=first[0], m=first[1], sigma=first[2],
                                          order=_ORDER_LO, **kw)
            lo, _, _ = fixed_point(p, q=first[0], m=first[1], sigma=first[2], order=order_lo,
                                   **kw, **split)
            params, its, res = fixed_point(p, q=lo[0], m=lo[1], sigma=lo[2], order=order, **kw,
                                           **split)
        except ConvergenceError as e:
            failures.append(e)
            continue
        add(params, lo, its, res)
    if not found and zero is None and p.tokens == 2 and prior is None and p.lam > 0:
        # small alpha: the damped iteration leaves its domain; the root in the prior side's
        # coordinates, started from the hats at S_hat = 0, does not
        try:
            first = spectral_fixed_point(p, hats=_zero_hats(p), order=_ORDER_LO if
                                         rule == "split" else min(_START_ORDER, order_lo))
            lo = spectral_fixed_point(p, hats=first[0][3:], order=order_lo, rule=rule)[0]
            params, its, res = spectral_fixed_point(p, hats=lo[3:], order=order, rule=rule)
            if params[0] > 0:
                add(params, lo, its, res)
        except ConvergenceError as e:
            failures.append(e)
    if zero is not None:
        found.append(zero)
    if not found:
        hint = (" (the spectral-coordinate root did not converge either: next to alpha0, "
                "where q -> 0 continuously, try a slightly larger alpha)"
                if p.lam > 0 and prior is None else "")
        raise ConvergenceError(f"no {label} start converged{hint}", last_iterate=[
            f.last_iterate for f in failures], residual=[f.residual for f in failures])
    return flag_global_minimum(found)


def flag_global_minimum(found: list) -> list:
    """The fixed points with ``global_minimum`` set on the one of lowest training loss."""
    best = min(range(len(found)), key=lambda i: found[i].train)
    return [replace(f, global_minimum=(i == best)) for i, f in enumerate(found)]


def _zero_hats(p: ERMParams) -> tuple[float, float, float]:
    """The hats at S_hat = 0: alpha times the q -> 0 rates (T = 2: trapezoidal, 1e-11; T >= 3:
    randomised QMC, :func:`.erm_output_tokens.zero_estimator_rates`)."""
    if p.tokens == 2:
        r = zero_estimator_rates(Q0n=p.Q0n, beta=p.beta, beta0=p.beta0)
    else:
        r = qmc_route.zero_estimator_rates(Q0n=p.Q0n, tokens=p.tokens, beta=p.beta,
                                           beta0=p.beta0)
    return p.alpha * r.q_hat_rate, p.alpha * r.m_hat_rate, p.alpha * r.sigma_hat_rate


ZERO_PROBE = 1e-12  # (q, Sigma) at which the output side is taken at its q -> 0 limit
ZERO_BLEND = 3e-3  # J scale over which the T = 2 zero-limit offset fades (exp(-J / ZERO_BLEND);
# J = q / eta^2 is invariant under the beta-lambda symmetry, q is not)


def _zero_limit(p: ERMParams, *, order: int, rule: str = "gh", replicate: int | None = None,
                points: int | None = None) -> np.ndarray:
    """The output side's own hats at q = Sigma = ZERO_PROBE, m = 0: its q -> 0 limit (the
    O(Sigma) corrections are ~1e-12 relative there)."""
    return np.array(hats_from_overlaps(ZERO_PROBE, 0.0, ZERO_PROBE, p, order=order,
                                       replicate=replicate, points=points, rule=rule)[:3])


def spectral_fixed_point(p: ERMParams, *, hats: tuple, order: int = _ORDER, tol: float = 1e-9,
                         rule: str = "gh", replicate: int | None = None,
                         zero_offset: bool = True) -> tuple[tuple, int, float]:
    """The fixed point as a root in the prior side's coordinates y = log(delta, eps, eta)
    (delta = sqrt(q_hat)/m_hat, eps = 2 lambda/m_hat, eta = m_hat/Sigma_hat), lambda > 0,
    factorised, started from ``hats``.

    Where S_hat = 0 (eps beyond the edge of mu_delta) the output side takes its q -> 0 limit,
    so the map is defined everywhere; the damped iteration in (log q, m, log Sigma) is not (it
    leaves its domain at small alpha, where a step in eps crosses the edge).  Powell's hybrid
    method (MINPACK hybrd) on G(y) - y.

    T = 2 (``rule``: the output rule, :data:`RULES`): with ``zero_offset`` the quadrature's own
    error at q -> 0 is replaced by the exact rates (:func:`.erm_output.zero_estimator_rates`,
    1e-11): the hats get alpha x rates - (the rule's q -> 0 limit), faded as exp(-J / ZERO_BLEND).
    Next to alpha0 (alpha / alpha0 - 1 ~ 1e-3) that error (1e-4 relative in q_hat at order 24)
    is comparable with the distance of eps from the edge and would shift alpha0 itself; further
    up it is inside the bar of the orders.  T >= 3: the QMC output side of ``replicate`` (None:
    pooled); beyond the edge the QMC rates of :func:`_zero_hats` (docs/erm.md "Next to
    alpha0").
    Returns what :func:`fixed_point` returns; raises :class:`ConvergenceError`."""
    require(p.lam > 0, "lam", "> 0 for the spectral-coordinate solver", p.lam)
    if p.tokens == 2:
        own = _zero_limit(p, order=order, rule=rule)
        exact = np.array(_zero_hats(p))
        zero = tuple(exact)
        offset = exact - own if zero_offset else np.zeros(3)
    else:
        zero = _zero_hats(p)
        offset = np.zeros(3)

    def coords(h: tuple) -> np.ndarray:
        return np.log([math.sqrt(h[0]) / h[1], 2 * p.lam / h[1], h[1] / h[2]])

    def hats_of(y: np.ndarray) -> tuple[float, float, float]:
        delta, eps, eta = np.exp(y)
        m_hat = 2 * p.lam / eps
        return (delta * m_hat) ** 2, m_hat, m_hat / eta

    def step(y: np.ndarray) -> np.ndarray:
        q, m, sigma, s = overlaps_from_hats(*hats_of(y), p)
        if not (q > 0 and sigma > 0):
            return coords(zero)
        lim = 0.999 * math.sqrt(p.Q0n * q)
        h = np.array(hats_from_overlaps(q, max(min(m, lim), -lim), sigma, p, order=order,
                                        rule=rule, replicate=replicate)[:3])
        return coords(tuple(h + offset * math.exp(-s.J / ZERO_BLEND)))

    def residual(y: np.ndarray) -> np.ndarray:
        try:
            r = step(y) - y
        except (ValueError, FloatingPointError, ConvergenceError):
            return np.full(3, 1e3)
        return r if np.all(np.isfinite(r)) else np.full(3, 1e3)

    sol = root(residual, coords(hats), method="hybr", options={"xtol": 1e-13})
    y = sol.x
    res = float(np.max(np.abs(residual(y))))
    if not res < tol:
        raise ConvergenceError("ERM SE fixed point (spectral coordinates)",
                               last_iterate=tuple(np.exp(y)), residual=res)
    h = hats_of(y)
    q, m, sigma = overlaps_from_hats(*h, p)[:3]
    return (q, m, sigma, *h), int(sol.nfev), res


def spectral_fixed_point_tokens(p: ERMParams, *, label: str = "ERM SE",
                                failure: ConvergenceError | None = None) -> FixedPoint:
    """T >= 3, lambda > 0: the fixed point as the root of :func:`spectral_fixed_point` on the
    pooled QMC map, started from the hats at S_hat = 0, with the bar rule of
    :func:`solve_tokens`: COVER x the standard error of the R single-replicate roots, each
    started from the pooled one.  ``failure``: the damped iteration's error, chained into
    the one raised here when the root does not converge either."""
    names = ("q", "m", "sigma", "q_hat", "m_hat", "sigma_hat")
    try:
        params, its, res = spectral_fixed_point(p, hats=_zero_hats(p), order=0)
        reps = [spectral_fixed_point(p, hats=params[3:], order=0, replicate=r)[0]
                for r in range(p.qmc_replicates)]
    except ConvergenceError as e:
        raise ConvergenceError(
            f"no {label} start converged (T = {p.tokens}; the spectral-coordinate root neither: "
            "next to alpha0, where q -> 0 continuously, try a slightly larger alpha)",
            last_iterate=e.last_iterate, residual=e.residual) from (failure or e)
    vals = {**dict(zip(names, params, strict=True)), **_derived_tokens(p, params, None)}
    rep_vals = [{**dict(zip(names, c, strict=True)), **_derived_tokens(p, c, r)}
                for r, c in enumerate(reps)]
    errors: dict = {}
    R = p.qmc_replicates
    for k in vals:
        arr = np.array([rv[k] for rv in rep_vals])
        se = float(arr.std(ddof=1) / math.sqrt(R))
        errors[k] = qmc_route.COVER * se
        errors[f"{k}_stderr"] = se
        errors[f"{k}_bias"] = float(arr.mean() - vals[k])
    errors["switching_replicates"] = 0
    errors["switching_pooled"] = 0
    return FixedPoint(**vals, iterations=its, residual=res, errors=errors)


def zero_estimator(p: ERMParams) -> FixedPoint | None:
    """The zero estimator S_hat = 0 as a fixed point (factorised model; docs/erm.md "The zero
    estimator and small alpha"), or None where it is not one.

    At q = m = Sigma -> 0 the hats are alpha times the rates of
    :func:`.erm_output.zero_estimator_rates` (T >= 3: the QMC form in
    :mod:`.erm_output_tokens`, bars 3 standard errors); the prior side returns S_hat = 0 exactly when
    eps = 2 lambda / m_hat lies at or beyond the right edge of mu_delta, delta = sqrt(q_hat) /
    m_hat (then J = d J = 0 and q = m = Sigma = 0).  The log-q iteration cannot reach this
    point (q = 0), so it is tested directly.  Errors: the rates' two trapezoidal steps; q, m,
    Sigma, mse and rank are exact there.  None also when the edge test is within those errors
    of the boundary (the caller's iteration decides)."""
    if p.lam == 0:
        return None
    if p.tokens == 2:
        r = zero_estimator_rates(Q0n=p.Q0n, beta=p.beta, beta0=p.beta0)
    else:
        r = qmc_route.zero_estimator_rates(Q0n=p.Q0n, tokens=p.tokens, beta=p.beta,
                                           beta0=p.beta0)
    q_hat, m_hat, sigma_hat = (p.alpha * r.q_hat_rate, p.alpha * r.m_hat_rate,
                               p.alpha * r.sigma_hat_rate)
    if not m_hat > 0:
        return None
    delta, eps = math.sqrt(q_hat) / m_hat, 2 * p.lam / m_hat
    edge = support(p.kappa0, delta * delta)[-1][1]
    rel = r.errors["m_hat_rate"] / r.m_hat_rate + r.errors["q_hat_rate"] / r.q_hat_rate
    if eps <= edge * (1 + 10 * rel + 1e-12):
        return None
    errors = {"q": 0.0, "m": 0.0, "sigma": 0.0, "mse": 0.0, "rank": 0.0,
              "q_hat": p.alpha * r.errors["q_hat_rate"],
              "m_hat": p.alpha * r.errors["m_hat_rate"],
              "sigma_hat": p.alpha * r.errors["sigma_hat_rate"],
              "train": p.alpha * r.errors["loss"], "test": r.errors["loss"]}
    return FixedPoint(0.0, 0.0, 0.0, q_hat, m_hat, sigma_hat, train=p.alpha * r.loss,
                      test=r.loss, mse=p.Q0, rank=0.0, iterations=0, residual=0.0,
                      errors=errors)


def _close(a: tuple, b: tuple, rel: float = 1e-6) -> bool:
    return all(abs(x - y) <= rel * (1 + abs(y)) for x, y in zip(a[:3], b[:3], strict=True))


def _derived_tokens(p: ERMParams, params: tuple, replicate: int | None) -> dict:
    """train, test, mse, rank at a T >= 3 fixed point, with the pooled QMC points or those of
    one replicate (the test error uses its own, independent points)."""
    q, m, sigma, q_hat, m_hat, sigma_hat = params
    s = spectral_integrals(kappa0=p.kappa0, delta=math.sqrt(q_hat) / m_hat,
                           eps=2 * p.lam / m_hat)
    test = qmc_route.generalisation_error(
        q=q, m=m, Q0n=p.Q0n, tokens=p.tokens, beta=p.beta, beta0=p.beta0,
        points=4 * p.qmc_points, replicates=p.qmc_replicates, seed=p.qmc_seed + 1,
        only=replicate).value
    return {"train": potential(q, m, sigma, q_hat, m_hat, sigma_hat, p, replicate=replicate),
            "test": test, "mse": p.Q0 + q - 2 * m, "rank": s.rank}


QMC_TOL = 1e-9  # fixed-point tolerance of the T >= 3 iteration (the QMC map is deterministic)
QMC_MAX_ITER = 60  # damped Anderson steps on the full point set before the chord fallback
JACOBIAN_STEP = 2e-3  # central-difference step of the pooled map's Jacobian (log q, m, log Sigma)


def _map_residual(p: ERMParams, x: np.ndarray, *, prior: Callable | None,
                  replicate: int | None, points: int | None = None) -> tuple[np.ndarray, tuple]:
    """F(x) = G(x) - x for the SE map G in x = (log q, m, log Sigma) (THEORY 3), and the six
    order parameters (G's overlaps, the hats at x)."""
    prior = overlaps_from_hats if prior is None else prior
    q, m, sigma = _from_x(x)
    hats = hats_from_overlaps(q, m, sigma, p, replicate=replicate, points=points)[:3]
    new = prior(*hats, p)[:3]
    if not (new[0] > 0 and new[2] > 0):
        raise ConvergenceError("ERM SE map left its domain", last_iterate=(q, m, sigma),
                               residual=None)
    return _to_x(*new) - x, (*new, *hats)


def map_jacobian(p: ERMParams, *, q: float, m: float, sigma: float, prior: Callable | None = None,
                 replicate: int | None = None, step: float = JACOBIAN_STEP) -> np.ndarray:
    """Central-difference Jacobian (3 x 3) of F = G - id in (log q, m, log Sigma) at (q, m,
    Sigma).  The QMC map jumps where a node's proximal minimiser switches branch (jumps of
    order 1/nodes), so the step is wide (:data:`JACOBIAN_STEP`): the Jacobian only drives the
    chord iteration of :func:`chord_fixed_point`, whose answer does not depend on it."""
    x0 = _to_x(q, m, sigma)
    cols = []
    for k in range(3):
        e = np.zeros(3)
        e[k] = step
        fp = _map_residual(p, x0 + e, prior=prior, replicate=replicate)[0]
        fm = _map_residual(p, x0 - e, prior=prior, replicate=replicate)[0]
        cols.append((fp - fm) / (2 * step))
    return np.array(cols).T


@dataclass(frozen=True)
class ChordFixedPoint:
    """A fixed point of a (piecewise-smooth) QMC SE map: ``params`` (q, m, Sigma, q_hat, m_hat,
    Sigma_hat); ``ends``: empty when F(x) = 0 was met to the tolerance, else the six parameters
    at each point of the cycle the chord iteration settled into (the map jumps across a
    switching surface between them, so no exact fixed point exists; ``params`` is the cycle's
    mean and the generalised fixed point lies in the cycle's hull); ``residual`` max |F| at
    the last point."""

    params: tuple
    iterations: int
    residual: float
    ends: tuple = ()

    def width(self) -> np.ndarray:
        """Per parameter, the spread (max - min) over the cycle: 0 for an exact fixed point."""
        if not self.ends:
            return np.zeros(6)
        arr = np.array(self.ends)
        return arr.max(axis=0) - arr.min(axis=0)


def chord_iterate(residual: Callable, x0: np.ndarray, jacobian: np.ndarray, *,
                  tol: float = QMC_TOL, max_iter: int = 60, max_step: float = 0.5,
                  label: str = "chord") -> tuple[np.ndarray, int, float, object, list]:
    """The chord method x <- x - J^-1 F(x) for a piecewise-smooth F: ``residual(x)`` returns
    (F(x), extra).  Returns (x, iterations, max |F(x)|, extra at x, cycle): ``cycle`` is empty when
    max |F| < ``tol``, else the list of (x, extra) of a cycle the iteration settled into (a point
    repeating an earlier one to ``tol``): near a switching surface where F jumps, the root of
    each side's smooth branch lies on the other side and the iteration alternates between them;
    the generalised root (where a convex combination of the two one-sided limits of F
    vanishes) lies on the segment between them, to first order in their distance.  Steps are
    capped at ``max_step`` per coordinate.  Raises :class:`ConvergenceError` otherwise."""
    x = np.array(x0, dtype=float)
    hist: list[tuple[np.ndarray, object]] = []
    res = math.inf
    for it in range(1, max_iter + 1):
        F, extra = residual(x)
        res = float(np.max(np.abs(F)))
        if res < tol:
            return x, it, res, extra, []
        for j in range(len(hist) - 1, -1, -1):
            if np.max(np.abs(hist[j][0] - x)) < tol:
                return x, it, res, extra, hist[j:]
        hist.append((x.copy(), extra))
        step = np.linalg.solve(jacobian, F)
        x = x - step * min(1.0, max_step / float(np.max(np.abs(step))))
    raise ConvergenceError(label, last_iterate=x.tolist(), residual=res)


def chord_fixed_point(p: ERMParams, *, q: float, m: float, sigma: float, jacobian: np.ndarray,
                      prior: Callable | None = None, replicate: int | None = None,
                      tol: float = QMC_TOL, max_iter: int = 60,
                      label: str = "ERM SE") -> ChordFixedPoint:
    """Solve F(x) = G(x) - x = 0 in (log q, m, log Sigma) by :func:`chord_iterate` with a fixed
    ``jacobian`` (:func:`map_jacobian` of the pooled map).  The T >= 3 QMC map is piecewise
    smooth: at each node the prox's global minimiser can switch branch, and F jumps by
    O(1/nodes) there (docs/erm.md, T = 3 threshold section).  A cycle across a switching surface
    is returned as its mean (the hats recomputed there) with the cycle in ``ends``."""
    lim = 0.999 * math.sqrt(p.Q0n * q)
    x0 = _to_x(q, max(min(m, lim), -lim), sigma)

    def residual(x: np.ndarray) -> tuple[np.ndarray, tuple]:
        try:
            return _map_residual(p, x, prior=prior, replicate=replicate)
        except (ValueError, FloatingPointError) as e:
            raise ConvergenceError(f"{label} map left its domain (chord)",
                                   last_iterate=_from_x(x), residual=None) from e

    try:
        x, its, res, params, cycle = chord_iterate(
            residual, x0, jacobian, tol=tol, max_iter=max_iter,
            label=f"{label} fixed point (chord)")
    except ConvergenceError as e:
        raise ConvergenceError(str(e).split(" (last")[0], last_iterate=_from_x(
            np.array(e.last_iterate)), residual=e.residual) from e
    if not cycle:
        return ChordFixedPoint(params=params, iterations=its, residual=res)
    xm = np.mean([c[0] for c in cycle], axis=0)
    qm, mm, sm = _from_x(xm)
    hats = hats_from_overlaps(qm, mm, sm, p, replicate=replicate)[:3]
    ends = tuple((*_from_x(c[0]), *c[1][3:]) for c in cycle)
    return ChordFixedPoint(params=(qm, mm, sm, *hats), iterations=its, residual=res, ends=ends)


def solve_tokens(p: ERMParams, *, inits: tuple, label: str, prior: Callable | None = None,
                 derived: Callable | None = None) -> list[FixedPoint]:
    """T >= 3: the fixed points of the pooled QMC map (all replicates), each with the error bar
    COVER x the standard error of the R fixed points of the single-replicate maps (started from
    the pooled one): the QMC error propagated through the fixed point without linearising.
    ``errors`` also holds ``*_stderr`` and ``*_bias`` (mean of the replicate fixed points minus
    the pooled one: a nonlinearity check, expected well inside the standard error).  ``prior``
    (:func:`fixed_point`) and ``derived`` ((p, params, replicate) -> train, test, mse, rank)
    default to the factorised model's; a cheap pass with 1/16 of the points comes first.

    The QMC maps are piecewise smooth (a node's prox minimiser switches branch across a
    surface; one node moves a single-replicate map by ~1e-4 above alpha_interp), so a map can
    have no exact fixed point.  Where the Anderson iteration does not reach :data:`QMC_TOL`
    (:data:`QMC_MAX_ITER` steps on the pooled map, 40 on a replicate), the chord iteration
    with the pooled map's Jacobian takes over (:func:`chord_fixed_point`); a cycle across a
    switching surface is replaced by its mean, and its spread (``*_floor``: the pooled one
    added to the bar as is; the replicates' as their effect on the standard error,
    sqrt(sum_r w_r^2 / (R (R - 1)))) widens the bar; ``errors["switching_replicates"]`` and
    ``errors["switching_pooled"]`` count the maps solved as cycles."""
    names = ("q", "m", "sigma", "q_hat", "m_hat", "sigma_hat")
    derived = _derived_tokens if derived is None else derived
    R = p.qmc_replicates
    kw = {"tol": QMC_TOL, "label": label, "prior": prior}
    found: list[FixedPoint] = []
    failures = []
    cheap: list[tuple] = []
    for qi, mi, si in inits:
        try:
            first, _, _ = fixed_point(p, q=qi * p.Q0, m=mi * p.Q0, sigma=si, max_iter=300,
                                      points=max(p.qmc_points // 16, 2**5), **kw)
            if any(_close(first, c, 1e-3) for c in cheap):
                continue
            cheap.append(first[:3])
            jac = None
            try:
                params, its, res = fixed_point(p, q=first[0], m=first[1], sigma=first[2],
                                               max_iter=QMC_MAX_ITER, **kw)
                pooled = ChordFixedPoint(params=params, iterations=its, residual=res)
            except ConvergenceError as e:
                start = e.last_iterate
                jac = map_jacobian(p, q=start[0], m=start[1], sigma=start[2], prior=prior)
                pooled = chord_fixed_point(p, q=start[0], m=start[1], sigma=start[2],
                                           jacobian=jac, **kw)
            params = pooled.params
            if any(_close(params, (f.q, f.m, f.sigma)) for f in found):
                continue
            reps: list[ChordFixedPoint] = []
            for r in range(R):
                try:
                    x, its_r, res_r = fixed_point(p, q=params[0], m=params[1], sigma=params[2],
                                                  replicate=r, max_iter=40, **kw)
                    reps.append(ChordFixedPoint(params=x, iterations=its_r, residual=res_r))
                except ConvergenceError:
                    if jac is None:
                        jac = map_jacobian(p, q=params[0], m=params[1], sigma=params[2],
                                           prior=prior)
                    reps.append(chord_fixed_point(p, q=params[0], m=params[1],
                                                  sigma=params[2], jacobian=jac, replicate=r,
                                                  **kw))
        except ConvergenceError as e:
            failures.append(e)
            continue

        def spread(cfp: ChordFixedPoint, r: int | None) -> dict:
            """Per quantity, the spread over the cycle (0 for an exact fixed point)."""
            if not cfp.ends:
                return {}
            ds = [{**dict(zip(names, e, strict=True)), **derived(p, e, r)} for e in cfp.ends]
            return {k: max(d[k] for d in ds) - min(d[k] for d in ds) for k in ds[0]}

        vals = {**dict(zip(names, params, strict=True)), **derived(p, params, None)}
        floor_pooled = spread(pooled, None)
        rep_vals = [{**dict(zip(names, c.params, strict=True)), **derived(p, c.params, r)}
                    for r, c in enumerate(reps)]
        rep_spread = [spread(c, r) for r, c in enumerate(reps)]
        errors: dict = {}
        for k in vals:
            arr = np.array([rv[k] for rv in rep_vals])
            se = float(arr.std(ddof=1) / math.sqrt(R))
            w = np.array([s.get(k, 0.0) for s in rep_spread])
            floor_se = float(math.sqrt(np.sum(w * w) / (R * (R - 1))))
            floor = floor_pooled.get(k, 0.0)
            errors[k] = qmc_route.COVER * (se + floor_se) + floor
            errors[f"{k}_stderr"] = se
            errors[f"{k}_bias"] = float(arr.mean() - vals[k])
            errors[f"{k}_floor"] = floor + floor_se
        errors["switching_replicates"] = sum(bool(c.ends) for c in reps)
        errors["switching_pooled"] = int(bool(pooled.ends))
        found.append(FixedPoint(**vals, iterations=pooled.iterations, residual=pooled.residual,
                                errors=errors))
    if not found:
        raise ConvergenceError(f"no {label} start converged (T = {p.tokens})", last_iterate=[
            f.last_iterate for f in failures], residual=[f.residual for f in failures])
    return flag_global_minimum(found)


@dataclass(frozen=True)
class InterpolatorLimit:
    """The lambda -> 0+ limit of the SE at alpha <= alpha_interp (the minimum-nuclear-norm
    interpolator): spectral (delta, eps), overlaps (q, m), rank, test error, each with the
    difference of the fine and coarse spectral rules in ``errors``."""

    alpha: float
    delta: float
    eps: float
    q: float
    m: float
    mse: float
    rank: float
    test: float
    errors: dict


def _interp_eqs(ds: float, eps: float, kappa0: float, Q0n: float, coarse: bool):
    s = spectral_integrals(kappa0=kappa0, delta=ds, eps=eps, coarse=coarse)
    return s.J - ds * s.dJ_ddelta / 2 - eps * s.dJ_deps - Q0n, s


def _interp_delta(eps: float, kappa0: float, Q0n: float, coarse: bool) -> float:
    """delta solving Q0n = J - (delta/2) d_delta J - eps d_eps J at fixed eps (bracketed)."""
    def f(d: float) -> float:
        return _interp_eqs(d, eps, kappa0, Q0n, coarse)[0]

    lo, hi = delta_bracket(f, what="delta in the interpolator limit")
    return brentq(f, lo, hi, xtol=1e-15, rtol=1e-15, maxiter=200)


def _interp_limit(alpha: float, kappa0: float, Q0n: float, fac: int, coarse: bool) -> tuple:
    def alpha_of(eps: float) -> tuple[float, float]:
        d = _interp_delta(eps, kappa0, Q0n, coarse)
        return _interp_eqs(d, eps, kappa0, Q0n, coarse)[1].dJ_ddelta / (4 * fac * d), d

    a0, _ = alpha_of(0.0)
    require(alpha <= a0 * (1 + 1e-12), "alpha", f"<= alpha_interp = {a0:.12g} (interpolation "
            "regime)", alpha)
    if alpha >= a0:
        eps = 0.0
    else:
        hi = 0.1
        while alpha_of(hi)[0] > alpha:
            hi *= 2
            if hi > 1e4:
                raise ConvergenceError("interpolator limit: no bracket in eps", last_iterate=hi)
        eps = brentq(lambda e: alpha_of(e)[0] - alpha, 0.0, hi, xtol=1e-15, rtol=1e-15,
                     maxiter=200)
    d = alpha_of(eps)[1]
    s = _interp_eqs(d, eps, kappa0, Q0n, coarse)[1]
    q, m = s.J, s.J - d * s.dJ_ddelta / 2 - eps * s.dJ_deps / 2
    return d, eps, q, m, s.rank


def interpolator_limit(*, alpha: float, kappa0: float, Delta: float, tokens: int = 2,
                       beta: float = 1.0, beta0: float = 1.0) -> InterpolatorLimit:
    """The SE as lambda -> 0+ at alpha <= alpha_interp (THEORY 3, derived in docs/erm_peak.md).

    With Sigma -> infinity the proximal point is the label-matching point, every output moment
    is fac = (T^2 + T - 2)/2 times a Gaussian closed form, m_hat = Sigma_hat = 2 alpha fac /
    Sigma, eta = 1, and lambda Sigma = alpha fac eps stays finite; the prior side then closes on
    (delta, eps):
        Q0 + Delta/2 = J - (delta/2) d_delta J - eps d_eps J,   alpha = d_delta J / (4 fac delta),
    q = J, m = J - (delta/2) d_delta J - (eps/2) d_eps J.  At alpha = alpha_interp, eps = 0 and
    delta = delta_bar (THEORY 3's threshold equations).  Test error (T = 2: trapezoidal rule;
    T >= 3: randomised QMC, bar 3 standard errors) at (q, m)."""
    p = ERMParams(alpha=alpha, kappa0=kappa0, Delta=Delta, lam=0.0, beta=beta, beta0=beta0,
                  tokens=tokens)
    fac = (p.tokens * p.tokens + p.tokens - 2) // 2
    fine = _interp_limit(p.alpha, p.kappa0, p.Q0n, fac, False)
    coarse = _interp_limit(p.alpha, p.kappa0, p.Q0n, fac, True)
    names = ("delta", "eps", "q", "m", "rank")
    errors = {k: abs(a - b) for k, a, b in zip(names, fine, coarse, strict=True)}
    d, eps, q, m, rank = fine

    def test_at(qq: float, mm: float) -> tuple[float, float]:
        if p.tokens == 2:
            t = generalisation_error(q=qq, m=mm, Q0n=p.Q0n, beta=beta, beta0=beta0)
            return t, abs(t - generalisation_error(q=qq, m=mm, Q0n=p.Q0n, beta=beta,
                                                   beta0=beta0, step=0.25))
        r = qmc_route.generalisation_error(q=qq, m=mm, Q0n=p.Q0n, tokens=p.tokens, beta=beta,
                                           beta0=beta0)
        return r.value, r.bar()

    test, t_err = test_at(q, m)
    # the spectral rules' error carried into the test error
    errors["test"] = t_err + abs(test - test_at(coarse[2], coarse[3])[0])
    errors["mse"] = errors["q"] + 2 * errors["m"]
    return InterpolatorLimit(alpha=p.alpha, delta=d, eps=eps, q=q, m=m, mse=p.Q0 + q - 2 * m,
                             rank=rank, test=test, errors=errors)
