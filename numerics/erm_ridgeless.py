"""The ERM SE at lambda = 0 above the interpolation threshold: the ridgeless curve (THEORY 3).

**Which equations hold at lambda = 0.**  All of :mod:`numerics.erm_se`, with eps = 2 lambda /
m_hat = 0: the prior side's proximal step becomes the projection onto the PSD cone (the learned
spectrum is eta ReLU(S0 + delta Z)), and the prior-side equations lose their lambda term,

    q = eta^2 J(delta, 0),  m = eta J - sqrt(q_hat)/(2 Sigma_hat) d_delta J,
    Sigma = m_hat d_delta J / (2 sqrt(q_hat) Sigma_hat),        (delta = sqrt(q_hat)/m_hat),

(d_eps J = -2 int_0^inf x dmu_delta is finite: the lambda d_eps J term of m simply vanishes);
the output side is unchanged, and the training loss Phi is the mean squared loss itself.  At
lambda > 0 every term is smooth in lambda (eps = 0 lies inside the support of mu_delta, where
J is C^infinity in eps), so wherever the lambda = 0 Jacobian is regular, the lambda = 0 fixed
point is the lambda -> 0+ limit and the finite-lambda SE approaches it linearly in lambda
(:func:`lambda_extrapolation` checks this).  The linear range shrinks as the map's slow mode
nears 1: lambda << m_hat / 2 far above alpha_interp, but at alpha = 0.3 (eigenvalues 0.93, the
response amplified ~14 times, m_hat = 0.035) q falls from 4.51 to 4.06 already at lambda = 1e-4.

**Why Sigma is finite above alpha_interp: a count of degrees of freedom.**  With
delta = sqrt(q_hat)/m_hat the Sigma equation reads Sigma Sigma_hat = D(delta), D = d_delta J /
(2 delta) = mu_delta((0, inf)) + int_0 x Re g dmu (the divergence of the PSD projection: the
fraction of the d^2 directions the estimator can move in).  On the output side Stein's lemma
turns the Sigma_hat equation into Sigma Sigma_hat = 2 alpha f(Sigma), f(Sigma) = E tr[(I +
Sigma H)^-1 Sigma H] (H: the loss Hessian at the proximal point) the number of output degrees
of freedom fitted per sample, f < fac = (T^2 + T - 2)/2 at finite Sigma and f -> fac as
Sigma -> infinity (the label-matching point).  So every fixed point obeys

    2 alpha f(Sigma) = D(delta)          (fitted fraction  f / fac = D(delta) / (2 alpha fac)).

The interpolator (Sigma = infinity, f = fac) exists only while 2 alpha fac <= D(delta) with
delta fixed by the interpolation constraint; at eps = 0 this is alpha <= alpha_interp
(THEORY 3: alpha_interp = D(delta_bar) / (2 fac)).  Above it the data carry more constraints
than the PSD cone has free directions: f(Sigma) < fac is forced, Sigma is finite, the minimiser
is unique without a regulariser and the training loss is > 0.

**Approach to alpha_interp+.**  f -> fac forces Sigma -> infinity; the fixed
point should then tend to the Sigma = infinity equations at eps = 0, i.e. the interpolator
at its threshold (delta_bar, q = J(delta_bar, 0), m = Q0n, test error 0.5010982710).  The
deficit fac - f(Sigma) comes from the labels that a finite Sigma does not match: row i (field
ell_i ~ N(0, s^2), s^2 = 3 Q0n) is matched where Sigma sigma'(ell_i)^2 >> 1, i.e. |ell_i| <
~ln(Sigma)/2, so fac - f ~ P(|ell| > ln(Sigma)/2), a log-normal tail, as long as ln(Sigma)/2 <
2 s^2 (Sigma < ~e^21); only beyond does the deficit become e^(2 s^2)/Sigma.  Hence
alpha - alpha_interp ~ P(|ell| > ln(Sigma)/2): over every Sigma the SE can reach, Sigma grows
like exp(2 s sqrt(2 ln(1/(alpha - alpha_interp)))), slower than any power of
1/(alpha - alpha_interp) (a simple pole only for alpha - alpha_interp below ~1e-6), the same
log-slowness as the lambda -> 0+ approach at alpha_interp (docs/erm_peak.md).  Measured
(last paragraph, Sigma = 26 ... 1e6, alpha - alpha_interp = 0.15 ... 5.0e-4): the local power
d ln Sigma / d ln(1/(alpha - alpha_interp)) falls, 1.9, 1.9, 1.9, 1.8, 1.6 from Sigma = 86 on,
as the log-normal law wants, while ln Sigma against sqrt(ln(1/(alpha - alpha_interp))) has
slopes 6.2-8.4 (derived: 2 s sqrt2 = 6.5, up to the order-one factors of the derivation).  The
test error rises monotonically to the interpolator's 0.5010982710; 0.5010982710 - test over
alpha - alpha_interp is 0.58, 0.62, 0.70, 0.77, 0.83 at Sigma = 400 ... 1e6 (a local exponent
0.86-0.95; fit over the three nearest points 0.93 +- 0.09): a linear approach with a slowly
growing slope, no overshoot.

Numerics (kappa0 = Delta = 0.5, T = 2; docs/erm.md "The ridgeless curve").  Where the
order-12 fixed point has Sigma <= :data:`SIGMA_RELIABLE`: :func:`erm_se.solve` (Gauss-Hermite
24/17, bar = difference x 17/7); at alpha = 2, 1, 0.5 (Sigma = 0.35, 0.86, 3.2) the fixed points
agree with the lambda -> 0 extrapolation of the finite-lambda SE.  At larger Sigma the
Gauss-Hermite fixed point moves between orders (alpha = 0.3: q = 3.71, 4.53, ~4.84 at 12, 17,
24).  Diagnosis: not the prior side and not a missing fixed point, but the output side's
quadrature error amplified by the map's slow mode: dG/dx on x = (log q, m, log Sigma) has a
complex pair of eigenvalues 0.93 +- 0.03i there (amplification 1/|1 - lambda| ~ 14), while the
map itself, at a fixed (q, m, Sigma), moves by only 2 % between Gauss-Hermite orders 12 and 17
and by 1e-3 (q) and 3e-3 (Sigma) between the piecewise rule's orders 12 and 16; and the
Gauss-Hermite map jumps wherever a node crosses a jump of the prox, which stalls the order-24
iteration.  There the piecewise rule (:func:`.erm_output.output_moments_split`: continuous in
the parameters) is solved by Broyden's method (:func:`solve_split`, Jacobian started from the
Gauss-Hermite map; converges to 1e-10 in 5-7 evaluations where Anderson mixing needs tens) at
outer orders 16/12, bar = 3 x the largest difference of (log q, m, log Sigma, log hats) for the
six order parameters (one component's difference can cross zero: Sigma moved 0.011 from 12 to
16, 0.10 from 16 to 20), 3 x its own difference for train, and for test, mse (functions of
(q, m)) and rank (of (q_hat, m_hat)) 3 x the largest of the own difference and each
variable's term (:func:`_cancellation_bar`: the two terms partly cancel between orders 12 and
16, the test moving a quarter of the larger term at kappa0 = 0.7, Delta = 0.1).  Checked at
alpha = 0.3 (Sigma = 25.9) against outer order 20 and, off the centre, at the corners of
:data:`FIXED_ALPHA_RANGE` (docs/erm.md "The fixed-alpha bars away from kappa0 = Delta = 0.5";
other models refused); :data:`SIGMA_SPLIT` bounds the checked range (beyond:
:class:`ConvergenceError`, before the costly orders when the order-12 Sigma is already > 2 x
SIGMA_SPLIT).

**Near alpha_interp (Sigma = 26 ... 1e6; docs/erm.md "Between alpha_interp and 0.3").** Why the
fixed point degrades as Sigma grows.  (i) The amplification, more than the output rule: the
piecewise map moves by ~1e-3 (relative; new q, m, Sigma) between outer orders 12 and 16 at Sigma
= 20, 89 and 400 alike, while the slow pair of dG/dx on (log q, m, log Sigma) nears 1: 0.927 +-
0.030i at alpha = 0.3 (Gauss-Hermite-17 differences at the piecewise fixed point), 0.953 +-
0.031i at 0.25 (Broyden estimate), 0.985 +- 0.026i at 0.22 (Gauss-Hermite 12, where d log Sigma
/ d log alpha ~ -33): amplification 1/|1 - lambda| ~ 13, 18, 33.  The 16/12 difference of the
fixed point triples from alpha = 0.3 to 0.25 (1.1 % to 3.3 %, largest over the logs), more than
the estimated amplification alone accounts for (the two Jacobian estimates differ in kind).
Following the curve in Sigma (:func:`solve_at_sigma`, alpha the unknown: the output moments do
not depend on alpha) removes the divergent d log Sigma / d log alpha; its slow eigenvalue
recedes as Sigma grows (0.962, 0.946, 0.937 at Sigma = 400, 2000, 1e4) and the largest 16/12
difference of the logs falls from 2.3 % (Sigma = 86) to 0.5 % (400), 0.17 % (1e4) and 0.02 %
(1e6), whereas at a fixed alpha the slow pair nears 1 as alpha falls (above).  (ii) The outer
Gauss-Hermite rule's step from order 16 to 20 varies with Sigma: the map moves by ~1e-4 at Sigma
= 86, ~4e-4 at 400, ~9e-4 at 1e4, ~5e-4 at 1e5 and ~6e-5 at 1e6 (12 to 16: ~1e-3 at 20 ... 400).
The jumps along the rule's lines do not cause it (the jump points stay at |t| ~ 1-1.5 from Sigma
= 26 to 1e4, so a split scaled with Sigma is not needed); a candidate, not tested, is the
matched/unmatched crossover of the rows at |ell_i| ~ ln(Sigma)/2, which crosses the outer
(label) coordinates' nodes as Sigma grows.  The 16/12 bars (3 x the difference) covered order 20
at every point: Sigma = 86 (alpha = 0.25; test moved 1.3e-4 against its bar 1.4e-2), 400 (alpha
1.2e-4 against 7.6e-4, test 2.0e-4 against 1.1e-3), 1e4 (alpha 8.9e-5 / 7.5e-4, test 1.4e-4 /
2.8e-4, the tightest), 1e5 (1.5e-5 / 7.3e-5, 6.4e-5 / 4.0e-4), 1e6 (3e-6 / 6.8e-5, 7e-6 /
8.1e-5); an order-20 point is one Newton step with the order-16 Broyden Jacobian.
:data:`SIGMA_SPLIT` = 90 (alpha down to ~0.25 at kappa0 = Delta = 0.5): there the bars cover
order 20 by a wide margin and the lambda = 0 fixed point is the lambda -> 0+ limit (outer order
12 on both routes, lambda = 5e-7, 1.5e-6, 5e-6: q, m, Sigma, test within 0.06 of the
extrapolation's bar).  Points at larger Sigma (benchmarks/erm_ridgeless_near.py, fixed Sigma =
400 ... 1e6) carry 16/12 bars checked against order 20 as above but no lambda -> 0 check; they
are not served by :func:`ridgeless_se` but by :func:`ridgeless_at_sigma` (Sigma given, alpha an
output with its bar; :data:`SIGMA_AT_RANGE`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from . import erm_se
from .erm_output import SPLIT_ORDER, SPLIT_ORDER_LO, generalisation_error
from .erm_spectral import spectral_integrals
from .erm_thresholds import alpha_bar_factor, interpolation_threshold
from .records import ConvergenceError, require

__all__ = ["RidgelessPoint", "ridgeless_se", "alpha_interp", "lambda_extrapolation",
           "SIGMA_RELIABLE", "SIGMA_SPLIT", "RIDGELESS_INITS", "RULES", "solve_split",
           "solve_at_sigma", "ridgeless_at_sigma", "SIGMA_AT_RANGE", "at_sigma_start",
           "AT_SIGMA_RANGE", "at_sigma_checked", "at_sigma_sigma_range", "at_sigma_order_sequence",
           "split_order_sequence", "FIXED_ALPHA_RANGE", "fixed_alpha_checked"]

SIGMA_RELIABLE = 5.0  # Gauss-Hermite 24/17: bars verified up to Sigma = 3.2, not at Sigma ~ 20-30
SIGMA_SPLIT = 90.0  # the piecewise rule (outer orders 16/12): bars checked against order 20 at
# Sigma = 25.9 (alpha = 0.3) and 86.3 (alpha = 0.25; docstring "Near alpha_interp")
# (q/Q0, m/Q0, Sigma) starts: erm_se's three and a large-Sigma one (near alpha_interp)
RIDGELESS_INITS = (*erm_se.DEFAULT_INITS, (2.0, 1.2, 200.0))
RULES = ("auto", "gh", "split")
#: the Sigma range of :func:`ridgeless_at_sigma`: from the alpha = 0.3 point (Sigma = 25.9) to
#: Sigma = 1e6, where its 16/12 bars were checked against outer order 20 (docs/erm.md "Points")
SIGMA_AT_RANGE = (25.0, 1e6)
#: the models :func:`ridgeless_at_sigma` serves: kappa0 and Delta in these closed ranges, beta =
#: beta0 = 1, Sigma in "sigma" (at kappa0 = Delta = 0.5 in all of :data:`SIGMA_AT_RANGE`), where
#: its 16/12 bars (test and mse by :func:`_cancellation_bar`) were checked against outer orders
#: 20 (and 24) at the corners, in between and at the Sigma ends, and covered them (docs/erm.md
#: "The fixed-Sigma bars away from kappa0 = Delta = 0.5"); elsewhere refused
AT_SIGMA_RANGE = {"kappa0": (0.3, 0.7), "Delta": (0.1, 0.5), "sigma": (1e3, 1e4)}
#: the models :func:`ridgeless_se` serves (beta = beta0 = 1): the piecewise rule's 16/12 bars
#: (test, mse, rank by :func:`_cancellation_bar`) were checked against outer order 20 (some 24,
#: 28) at the four corners (alpha = 1.35-2 alpha_interp, Sigma = 7-85) and at kappa0 = Delta = 0.5
#: (Sigma = 6-86), Gauss-Hermite 24/17 against order 32 at (0.3, 0.1) and (0.7, 0.5) (Sigma =
#: 2.1, 3.1) and at the centre (docs/erm.md "The fixed-alpha bars away from kappa0 = Delta =
#: 0.5"); elsewhere refused
FIXED_ALPHA_RANGE = {"kappa0": (0.3, 0.7), "Delta": (0.1, 0.5)}
# starts of :func:`ridgeless_at_sigma`, interpolated in log Sigma: (Sigma, q/Q0, m/Q0,
# alpha/alpha_interp) of the order-16 fixed points at kappa0 = Delta = 0.5 (docs/erm.md "Points";
# Q0 = 1.5, alpha_interp = 0.1534821); elsewhere only a guess
_AT_SIGMA_STARTS = ((25.9, 3.03, 1.406, 1.955), (86.28, 4.475, 1.5714, 1.6289),
                    (400.0, 4.184, 1.4117, 1.2784), (2000.0, 3.727, 1.2832, 1.1183),
                    (1e4, 3.4996, 1.2194, 1.0499), (1e5, 3.3729, 1.1826, 1.01372),
                    (1e6, 3.3325, 1.1708, 1.00329))
_CHEAP_ORDER = 12  # Gauss-Hermite order of the first pass (which rule, which starts)
_JACOBIAN_ORDER = 17  # Gauss-Hermite order of the starting Jacobian of the split solve


def alpha_interp(*, kappa0: float, Delta: float, tokens: int = 2) -> float:
    """alpha_interp in double precision (THEORY 3; :func:`erm_thresholds.interpolation_threshold`)."""
    return float(interpolation_threshold(kappa0=kappa0, Delta=Delta, tokens=tokens,
                                         dps=None).value)


@dataclass(frozen=True)
class RidgelessPoint:
    """The lambda = 0 SE fixed point (the global minimum of the training loss among those
    found) with the degrees-of-freedom diagnostics of the module docstring: ``fitted`` =
    D(delta) / (2 alpha fac) = f / fac (< 1 above alpha_interp), ``delta`` = sqrt(q_hat)/m_hat,
    ``alpha_interp``; ``errors`` as in :class:`erm_se.FixedPoint` (plus ``fitted``).  ``given``:
    which of alpha and Sigma was fixed ("sigma": :func:`ridgeless_at_sigma`, alpha an output with
    its bar ``alpha_error``); ``orders``: (order, order_lo) of the piecewise rule there."""

    alpha: float
    alpha_interp: float
    fixed_point: erm_se.FixedPoint
    delta: float
    fitted: float
    reliable: bool
    all_fixed_points: tuple
    rule: str = "gh"
    given: str = "alpha"
    alpha_error: float = 0.0
    orders: tuple = ()

    def as_dict(self) -> dict:
        out = {"alpha": self.alpha, "alpha_error": self.alpha_error,
               "alpha_interp": self.alpha_interp, "delta": self.delta, "fitted": self.fitted,
               "reliable": self.reliable, "rule": self.rule, "given": self.given,
               "orders": list(self.orders)}
        out.update(self.fixed_point.as_dict())
        out["fitted_error"] = self.fixed_point.errors.get("fitted", float("nan"))
        return out


def _fitted(fp: erm_se.FixedPoint, p: erm_se.ERMParams) -> tuple[float, float]:
    """(fitted, its bar): Sigma Sigma_hat / (2 alpha fac) (= D(delta) / (2 alpha fac) at a
    fixed point, the Sigma equation), bar from those of Sigma and Sigma_hat."""
    fac2 = 2 * p.alpha * alpha_bar_factor(p.tokens)
    err = (fp.errors.get("sigma", 0.0) * fp.sigma_hat
           + fp.errors.get("sigma_hat", 0.0) * fp.sigma) / fac2
    return fp.sigma * fp.sigma_hat / fac2, err


def _to_x(q: float, m: float, sigma: float) -> np.ndarray:
    return np.array([math.log(q), m, math.log(sigma)])


def _step(x: np.ndarray, p: erm_se.ERMParams, *, rule: str,
          order: int) -> tuple[np.ndarray, tuple]:
    """F(x) = G(x) - x for the SE map G on x = (log q, m, log Sigma), and the output side's
    (q_hat, m_hat, Sigma_hat, E min) at x."""
    q, m, sigma = math.exp(x[0]), float(x[1]), math.exp(x[2])
    out = erm_se.hats_from_overlaps(q, m, sigma, p, order=order, rule=rule)
    new = erm_se.overlaps_from_hats(*out[:3], p)[:3]
    if not (new[0] > 0 and new[2] > 0):
        raise ConvergenceError("lambda = 0 SE map left its domain", last_iterate=(q, m, sigma),
                               residual=None)
    return _to_x(*new) - x, out


def _jacobian(step, x: np.ndarray, *, h: float = 1e-3) -> np.ndarray:
    """dF/dx by central differences of step h of F(x) = ``step(x)[0]`` (the cheap Gauss-Hermite
    map at fixed alpha or at fixed Sigma)."""
    cols = []
    for k in range(3):
        e = np.zeros(3)
        e[k] = h
        cols.append((step(x + e)[0] - step(x - e)[0]) / (2 * h))
    return np.array(cols).T


def _broyden(step, x: np.ndarray, B: np.ndarray, *, tol: float,
             max_iter: int) -> tuple[np.ndarray, tuple, int, float, np.ndarray, bool]:
    """Broyden's method on F(x) = ``step(x)[0]`` from ``x`` with the starting Jacobian ``B``
    (steps capped at 0.5 in every coordinate); returns (x, the step's output at x, iterations,
    max|F|, the last Jacobian, whether max|F| < ``tol``).  Errors of ``step`` propagate."""
    F, out = step(x)
    res = float(np.max(np.abs(F)))
    for it in range(1, max_iter + 1):
        if res < tol:
            return x, out, it, res, B, True
        try:
            dx = -np.linalg.solve(B, F)
        except np.linalg.LinAlgError:
            break
        dx *= min(1.0, 0.5 / float(np.max(np.abs(dx))))  # at most a factor e^0.5 per step
        xn = x + dx
        Fn, out_n = step(xn)
        B = B + np.outer(Fn - F - B @ dx, dx) / float(dx @ dx)  # Broyden's update
        x, F, out = xn, Fn, out_n
        res = float(np.max(np.abs(F)))
    return x, out, max_iter, res, B, False


def solve_split(p: erm_se.ERMParams, *, q: float, m: float, sigma: float,
                order: int = SPLIT_ORDER, tol: float = 1e-8, max_iter: int = 30,
                jacobian: np.ndarray | None = None, rule: str = "split",
                jacobian_order: int = _JACOBIAN_ORDER) -> tuple[tuple, int, float, np.ndarray]:
    """The SE fixed point with the piecewise output rule (:func:`.erm_output.output_moments_split`,
    outer ``order``; ``rule="gh"``: Gauss-Hermite of ``order`` instead) from (q, m, Sigma), by
    Broyden's method on F = G - x, x = (log q, m, log Sigma), started from the Jacobian of the
    Gauss-Hermite map (order ``jacobian_order``) unless ``jacobian`` (dF/dx) is given.  Plain or Anderson
    iteration is slow here: near alpha_interp two eigenvalues of dG/dx approach 1 (0.93 at
    alpha = 0.3).  Any lambda >= 0 (``p.lam``).  Returns ((q, m, Sigma, q_hat, m_hat,
    Sigma_hat), iterations, residual max|F|, the last Jacobian estimate);
    :class:`ConvergenceError` with the last iterate when max|F| does not fall below ``tol``."""
    require(rule in erm_se.RULES, "rule", f"one of {erm_se.RULES}", rule)
    x = _to_x(q, m, sigma)
    B = (_jacobian(lambda z: _step(z, p, rule="gh", order=jacobian_order), x)
         if jacobian is None else np.array(jacobian, dtype=float))
    x, out, it, res, B, ok = _broyden(lambda z: _step(z, p, rule=rule, order=order), x, B,
                                      tol=tol, max_iter=max_iter)
    if not ok:
        raise ConvergenceError("lambda = 0 SE (piecewise output rule) fixed point",
                               last_iterate=(math.exp(x[0]), float(x[1]), math.exp(x[2])),
                               residual=res)
    return (math.exp(x[0]), float(x[1]), math.exp(x[2]), *out[:3]), it, res, B


def _step_at_sigma(x: np.ndarray, p: erm_se.ERMParams, sigma: float, *, rule: str,
                   order: int) -> tuple[np.ndarray, tuple]:
    """F at a fixed Sigma with alpha free: x = (log q, m, log alpha), F = (log q' - log q,
    m' - m, log Sigma' - log Sigma) for the SE map at (q, m, Sigma) and that alpha (the
    output moments do not depend on alpha: the hats are alpha times them)."""
    pa = replace(p, alpha=math.exp(x[2]))
    q, m = math.exp(x[0]), float(x[1])
    out = erm_se.hats_from_overlaps(q, m, sigma, pa, order=order, rule=rule)
    new = erm_se.overlaps_from_hats(*out[:3], pa)[:3]
    if not (new[0] > 0 and new[2] > 0):
        raise ConvergenceError("lambda = 0 SE map left its domain", last_iterate=(q, m, sigma),
                               residual=None)
    return np.array([math.log(new[0]) - x[0], new[1] - x[1], math.log(new[2] / sigma)]), out


def solve_at_sigma(p: erm_se.ERMParams, *, sigma: float, q: float, m: float, alpha: float,
                   order: int = SPLIT_ORDER, rule: str = "split", tol: float = 1e-8,
                   max_iter: int = 30, jacobian: np.ndarray | None = None,
                   jacobian_order: int = _JACOBIAN_ORDER,
                   h: float = 1e-3) -> tuple[tuple, int, float, np.ndarray]:
    """The lambda = 0 (or ``p.lam``) SE fixed point at a given ``sigma``, alpha the unknown
    (``p.alpha`` ignored): Broyden on x = (log q, m, log alpha) from (q, m, alpha), Jacobian
    started from central differences of the Gauss-Hermite map of ``jacobian_order`` unless
    ``jacobian`` is given (central differences of step ``h``).  Near alpha_interp d log Sigma /
    d log alpha is large (~ -33 at alpha = 0.22, Gauss-Hermite 12) and the fixed-alpha map's slow
    pair nears 1, while at a fixed Sigma the slow eigenvalue recedes as Sigma grows (0.96 at
    Sigma = 400, 0.94 at 1e4): the curve is followed in Sigma (module docstring, "Near
    alpha_interp").  Returns ((q, m, alpha, q_hat, m_hat, Sigma_hat), iterations, max|F|, the
    last Jacobian); :class:`ConvergenceError` with the last (q, m, alpha) otherwise."""
    require(rule in erm_se.RULES, "rule", f"one of {erm_se.RULES}", rule)
    require(math.isfinite(sigma) and sigma > 0, "sigma", "a finite real number > 0", sigma)
    require(math.isfinite(q) and q > 0, "q", "a finite real number > 0", q)
    require(math.isfinite(alpha) and alpha > 0, "alpha", "a finite real number > 0", alpha)
    x = np.array([math.log(q), float(m), math.log(alpha)])
    B = (_jacobian(lambda z: _step_at_sigma(z, p, sigma, rule="gh", order=jacobian_order), x,
                   h=h) if jacobian is None else np.array(jacobian, dtype=float))
    x, out, it, res, B, ok = _broyden(
        lambda z: _step_at_sigma(z, p, sigma, rule=rule, order=order), x, B, tol=tol,
        max_iter=max_iter)
    if not ok:
        raise ConvergenceError(f"lambda = 0 SE at Sigma = {sigma:g} (alpha free)",
                               last_iterate=(math.exp(x[0]), float(x[1]), math.exp(x[2])),
                               residual=res)
    return (math.exp(x[0]), float(x[1]), math.exp(x[2]), *out[:3]), it, res, B


def _split_point(p: erm_se.ERMParams, params: tuple, envelope_order: int) -> dict:
    """train, test, mse, rank at a fixed point of the piecewise rule (as erm_se's)."""
    q, m, sigma, q_hat, m_hat, sigma_hat = params
    s = spectral_integrals(kappa0=p.kappa0, delta=math.sqrt(q_hat) / m_hat, eps=0.0)
    fine = envelope_order >= SPLIT_ORDER
    return {"train": erm_se.potential(*params, p, order=envelope_order, rule="split"),
            "test": generalisation_error(q=q, m=m, Q0n=p.Q0n, beta=p.beta, beta0=p.beta0,
                                         step=0.2 if fine else 0.25),
            "mse": p.Q0 + q - 2 * m, "rank": s.rank}


def _solve_split_all(p: erm_se.ERMParams, starts: list, order: int, order_lo: int,
                     tol: float) -> list[erm_se.FixedPoint]:
    """Each start solved at the piecewise rule's ``order_lo`` then ``order``; bars =
    :func:`erm_se.split_factor` x the difference, for q, m, Sigma and the hats the largest
    difference of (log q, m, log Sigma, log hats) times the value (m: times 1), for train its
    own difference, for test, mse, rank :func:`_derived_errors` (the larger of the own
    difference and each variable's term, as at fixed Sigma)."""
    found, failures = [], []
    grow = erm_se.split_factor(order, order_lo)
    for q, m, sigma in starts:
        try:
            lo, _, _, B = solve_split(p, q=q, m=m, sigma=sigma, order=order_lo, tol=tol)
            hi, its, res, _ = solve_split(p, q=lo[0], m=lo[1], sigma=lo[2], order=order,
                                          tol=tol, jacobian=B)
        except ConvergenceError as e:
            failures.append(e)
            continue
        if any(_close(hi, (f.q, f.m, f.sigma)) for f in found):
            continue
        d_hi, d_lo = _split_point(p, hi, order), _split_point(p, lo, order_lo)
        errors = _fixed_alpha_errors(p, hi, lo, d_hi, d_lo, grow, order)
        found.append(erm_se.FixedPoint(*hi, **d_hi, iterations=its, residual=res,
                                       errors=errors))
    if not found:
        raise ConvergenceError("no lambda = 0 SE start converged (piecewise output rule)",
                               last_iterate=[f.last_iterate for f in failures],
                               residual=[f.residual for f in failures])
    return erm_se.flag_global_minimum(found)


def _fixed_alpha_errors(p: erm_se.ERMParams, hi: tuple, lo: tuple, d_hi: dict, d_lo: dict,
                        grow: float, order: int) -> dict:
    """The bars :func:`ridgeless_se` (rule "split") serves from the fixed points ``hi`` (outer
    ``order``) and ``lo`` = (q, m, Sigma, q_hat, m_hat, Sigma_hat) and their derived quantities
    ``d_hi``, ``d_lo``: :func:`_split_errors` (the six norm-wise, train its own difference),
    then test, mse, rank by :func:`_derived_errors` (docs/erm.md "The fixed-alpha bars away
    from kappa0 = Delta = 0.5")."""
    errors = _split_errors(("q", "m", "sigma", "q_hat", "m_hat", "sigma_hat"), hi, lo, d_hi,
                           d_lo, grow)
    errors.update(_derived_errors(p, hi, lo, d_hi, d_lo, grow, order))
    return errors


def _split_errors(names: tuple, hi: tuple, lo: tuple, d_hi: dict, d_lo: dict,
                  grow: float) -> dict:
    """Bars of a two-order pair of the piecewise rule (module docstring): ``grow`` x the largest
    difference over (log q, m, and the logs of the other four ``names``: Sigma or alpha, the
    hats) times each value (m: times 1), or its own difference if larger; ``d_hi``/``d_lo``
    (train, test, mse, rank, ...): ``grow`` x their own difference.  Norm-wise: the slow mode moves
    the parameters together, and one component's difference can cross zero between two orders
    (alpha = 0.3: Sigma moved 0.011 from outer order 12 to 16 but 0.10 from 16 to 20)."""
    dx = max(abs(hi[1] - lo[1]), *(abs(math.log(hi[k] / lo[k])) for k in (0, 2, 3, 4, 5)))
    errors = {k: grow * max(abs(a - b), dx * (1.0 if k == "m" else abs(a)))
              for k, a, b in zip(names, hi, lo, strict=True)}
    errors.update({k: grow * abs(d_hi[k] - d_lo[k]) for k in d_hi})
    return errors


def _at_sigma_start(sigma: float, p: erm_se.ERMParams, a_i: float) -> tuple[float, float, float]:
    """(q, m, alpha) to start :func:`solve_at_sigma` from: :data:`_AT_SIGMA_STARTS`
    interpolated linearly in log Sigma (held constant beyond its ends)."""
    ls = [math.log(r[0]) for r in _AT_SIGMA_STARTS]
    x = min(max(math.log(sigma), ls[0]), ls[-1])
    q, m, a = (float(np.interp(x, ls, [r[k] for r in _AT_SIGMA_STARTS])) for k in (1, 2, 3))
    return q * p.Q0, m * p.Q0, a * a_i


def at_sigma_checked(*, kappa0: float, Delta: float, beta: float = 1.0, beta0: float = 1.0,
                     sigma: float | None = None) -> bool:
    """Whether (kappa0, Delta) lie in :data:`AT_SIGMA_RANGE` (ends within 1e-12) with beta =
    beta0 = 1 (to 1e-12) and, if given, ``sigma`` in its Sigma range (:data:`SIGMA_AT_RANGE`
    at kappa0 = Delta = 0.5): the models :func:`ridgeless_at_sigma` serves."""
    inside = all(lo - 1e-12 <= v <= hi + 1e-12 for v, (lo, hi) in
                 ((kappa0, AT_SIGMA_RANGE["kappa0"]), (Delta, AT_SIGMA_RANGE["Delta"])))
    if not (inside and abs(beta - 1.0) <= 1e-12 and abs(beta0 - 1.0) <= 1e-12):
        return False
    if sigma is None:
        return True
    lo, hi = at_sigma_sigma_range(kappa0=kappa0, Delta=Delta)
    return lo <= sigma <= hi


def at_sigma_sigma_range(*, kappa0: float, Delta: float) -> tuple[float, float]:
    """The Sigma range served at (kappa0, Delta): :data:`SIGMA_AT_RANGE` at kappa0 = Delta = 0.5
    (to 1e-12), ``AT_SIGMA_RANGE["sigma"]`` elsewhere."""
    centre = abs(kappa0 - 0.5) <= 1e-12 and abs(Delta - 0.5) <= 1e-12
    return SIGMA_AT_RANGE if centre else AT_SIGMA_RANGE["sigma"]


def number_text(x: float) -> str:
    """1e4 as '1e4', 0.3 as '0.3' (for messages)."""
    return f"{x:.0e}".replace("e+0", "e").replace("e+", "e") if x >= 1e3 else f"{x:g}"


def at_sigma_range_text() -> str:
    """The served models in words (for refusals)."""
    (a, b), (c, d), (s, t) = (AT_SIGMA_RANGE[k] for k in ("kappa0", "Delta", "sigma"))
    lo, hi = SIGMA_AT_RANGE
    return (f"kappa0 in [{a:g}, {b:g}], Delta in [{c:g}, {d:g}], beta = beta0 = 1, Sigma in "
            f"[{number_text(s)}, {number_text(t)}] (in [{number_text(lo)}, {number_text(hi)}] at "
            "kappa0 = Delta = 0.5)")


def _cancellation_bar(f, q: float, m: float, dq: float, dm: float, d_own: float,
                      grow: float, h: float = 1e-4) -> float:
    """Bar of a quantity f(q, m) at the higher order's point (q, m) from a two-order pair:
    ``grow`` x the largest of |its own difference| ``d_own``, |df/dq dq| and |df/dm dm| (partials
    by central differences of relative step ``h``; dq, dm the pair's differences).  The step of
    f between two orders is the sum of the two terms; where they cancel (kappa0 = 0.3, Delta =
    0.5, Sigma = 1e3: +7.8e-4 and -8.3e-4 from 12 to 16, test moved 4.9e-5, then 3.6e-4 from 16
    to 20) its own difference is small by accident, the larger term is not (docs/erm.md "The
    fixed-Sigma bars away from kappa0 = Delta = 0.5"; THEORY 3).  The rank, a function of
    delta = sqrt(q_hat) / m_hat, gets the same rule in (q_hat, m_hat) (kappa0 = 0.7, Delta =
    0.5: delta moved little from 12 to 16, the rank 1.1e-5, then 7.7e-5 from 16 to 20)."""
    fq = (f(q * (1 + h), m) - f(q * (1 - h), m)) / (2 * h * q)
    fm = (f(q, m * (1 + h)) - f(q, m * (1 - h))) / (2 * h * m)
    return grow * max(abs(d_own), abs(fq * dq), abs(fm * dm))


def _derived_errors(p: erm_se.ERMParams, hi: tuple, lo: tuple, d_hi: dict, d_lo: dict,
                    grow: float, order: int) -> dict:
    """Bars of test, mse (functions of (q, m)) and rank (of (q_hat, m_hat)) from a two-order
    pair of the piecewise rule, ``hi``/``lo`` = (q, m, Sigma or alpha, q_hat, m_hat,
    Sigma_hat), ``p`` the model at the higher order: :func:`_cancellation_bar` (mse: partials 1
    and -2 exactly), so that the two variables' terms cancelling between the orders cannot
    shrink the bar (docs/erm.md "The fixed-Sigma bars away from kappa0 = Delta = 0.5" and "The
    fixed-alpha bars away from kappa0 = Delta = 0.5"; THEORY 3).  Used at fixed Sigma and at
    fixed alpha alike."""
    dq, dm = hi[0] - lo[0], hi[1] - lo[1]

    def test_of(q: float, m: float) -> float:
        return generalisation_error(q=q, m=m, Q0n=p.Q0n, beta=p.beta, beta0=p.beta0,
                                    step=0.2 if order >= SPLIT_ORDER else 0.25)  # as _split_point

    def rank_of(q_hat: float, m_hat: float) -> float:
        return spectral_integrals(kappa0=p.kappa0, delta=math.sqrt(q_hat) / m_hat, eps=0.0).rank

    return {"test": _cancellation_bar(test_of, hi[0], hi[1], dq, dm,
                                      d_hi["test"] - d_lo["test"], grow),
            "rank": _cancellation_bar(rank_of, hi[3], hi[4], hi[3] - lo[3], hi[4] - lo[4],
                                      d_hi["rank"] - d_lo["rank"], grow),
            "mse": grow * max(abs(d_hi["mse"] - d_lo["mse"]), abs(dq), abs(2 * dm))}


def at_sigma_start(sigma: float, *, kappa0: float, Delta: float,
                   previous: tuple | None = None) -> tuple[float, float, float]:
    """(q, m, alpha) to start :func:`ridgeless_at_sigma` from at ``sigma``: the table
    (:data:`_AT_SIGMA_STARTS`, kappa0 = Delta = 0.5) interpolated in log Sigma and scaled by Q0 and
    alpha_interp; with ``previous`` = (Sigma', (q', m', alpha')), a solved point of the same
    (kappa0, Delta), corrected by that point's ratio to the table at Sigma' (q and m
    multiplicatively, alpha - alpha_interp multiplicatively), so that a curve in Sigma carries
    what it learned at other (kappa0, Delta) from point to point."""
    a_i = alpha_interp(kappa0=kappa0, Delta=Delta)
    p = erm_se.ERMParams(alpha=a_i, kappa0=kappa0, Delta=Delta, lam=0.0)
    q, m, a = _at_sigma_start(float(sigma), p, a_i)
    if previous is None:
        return q, m, a
    s1, (q1, m1, a1) = previous
    qt, mt, at = _at_sigma_start(float(s1), p, a_i)
    ok = q1 > 0 and m1 > 0 and mt > 0 and a1 > a_i and at > a_i
    if not ok:
        return q, m, a
    return q * q1 / qt, m * m1 / mt, a_i + (a - a_i) * (a1 - a_i) / (at - a_i)


def ridgeless_at_sigma(*, sigma: float, kappa0: float, Delta: float, beta: float = 1.0,
                       beta0: float = 1.0, tokens: int = 2, start: tuple | None = None,
                       order: int = SPLIT_ORDER, order_lo: int = SPLIT_ORDER_LO,
                       tol: float = 1e-8, max_iter: int = 30,
                       jacobian_order: int = _JACOBIAN_ORDER,
                       validated_only: bool = True) -> RidgelessPoint:
    """The lambda = 0 SE fixed point at a given Sigma, alpha an output (T = 2; THEORY 3, module
    docstring "Near alpha_interp"; docs/erm.md "Between alpha_interp and 0.3"): the piecewise
    output rule solved at outer orders ``order_lo`` then ``order`` by :func:`solve_at_sigma`
    (the second from the first with its Broyden Jacobian), values at ``order``, bars
    :func:`erm_se.split_factor` x the difference (:func:`_split_errors`: alpha, train their
    own difference, the other parameters norm-wise over the logs; Sigma exact; test and mse,
    functions of (q, m), and rank, of (q_hat, m_hat), by :func:`_cancellation_bar`), as the
    table of docs/erm.md ("Points", benchmarks/erm_ridgeless_near.py; its test bars are the
    older own-difference ones). ``start``: (q, m, alpha), default interpolated from that
    table in log Sigma. ``validated_only``: Sigma outside :data:`SIGMA_AT_RANGE`, or a model
    outside :data:`AT_SIGMA_RANGE` (where the bars were checked against order 20), is
    refused.
    Returns a :class:`RidgelessPoint` with ``given="sigma"``, ``alpha_error``, the orders and the
    residual (max|F| at ``order``); :class:`ConvergenceError` with the last (q, m, alpha)."""
    lo_s, hi_s = SIGMA_AT_RANGE if validated_only else (0.0, math.inf)
    require(isinstance(sigma, (int, float)) and math.isfinite(sigma) and sigma > 0
            and lo_s <= sigma <= hi_s, "sigma",
            f"a finite real in [{lo_s:g}, {hi_s:g}] (where the 16/12 bars of the fixed-Sigma "
            "points were checked against outer order 20)" if validated_only
            else "a finite real > 0", sigma)
    require(tokens == 2, "tokens", "2 for the lambda = 0 SE at fixed Sigma", tokens)
    if validated_only:
        require(at_sigma_checked(kappa0=kappa0, Delta=Delta, beta=beta, beta0=beta0), "kappa0",
                f"in the served range: {at_sigma_range_text()} (where the fixed-Sigma 16/12 "
                "bars were checked against outer order 20 and covered it; validated_only=False "
                "for others, bars unchecked)", (kappa0, Delta, beta, beta0))
        lo_m, hi_m = at_sigma_sigma_range(kappa0=kappa0, Delta=Delta)
        require(lo_m <= sigma <= hi_m, "sigma", f"in [{number_text(lo_m)}, {number_text(hi_m)}] "
                f"at kappa0 = "
                f"{kappa0:g}, Delta = {Delta:g} (served: {at_sigma_range_text()}; where the "
                "fixed-Sigma 16/12 bars were checked against outer order 20)", sigma)
    require(isinstance(order, int) and isinstance(order_lo, int) and 2 <= order_lo < order,
            "order", "an integer > order_lo >= 2", (order, order_lo))
    a_i = alpha_interp(kappa0=kappa0, Delta=Delta)
    p = erm_se.ERMParams(alpha=a_i, kappa0=kappa0, Delta=Delta, lam=0.0, beta=beta,
                         beta0=beta0)
    q0, m0, al0 = _at_sigma_start(float(sigma), p, a_i) if start is None else start
    lo, _, _, B = solve_at_sigma(p, sigma=float(sigma), q=q0, m=m0, alpha=al0, order=order_lo,
                                 tol=tol, max_iter=max_iter, jacobian_order=jacobian_order)
    hi, its, res, _ = solve_at_sigma(p, sigma=float(sigma), q=lo[0], m=lo[1], alpha=lo[2],
                                     order=order, tol=tol, max_iter=max_iter, jacobian=B)
    p_hi, p_lo = replace(p, alpha=hi[2]), replace(p, alpha=lo[2])

    def as_fp(x: tuple) -> tuple:  # (q, m, alpha, hats) -> (q, m, Sigma, hats)
        return (x[0], x[1], float(sigma), *x[3:])

    d_hi, d_lo = _split_point(p_hi, as_fp(hi), order), _split_point(p_lo, as_fp(lo), order_lo)
    grow = erm_se.split_factor(order, order_lo)
    errors = _split_errors(("q", "m", "alpha", "q_hat", "m_hat", "sigma_hat"), hi, lo, d_hi,
                           d_lo, grow)
    errors.pop("alpha")  # alpha, like train, carries its own difference (docs/erm.md "Points")
    errors.update(_derived_errors(p_hi, hi, lo, d_hi, d_lo, grow, order))
    alpha_error = grow * abs(hi[2] - lo[2])
    errors["sigma"] = 0.0  # given
    fp = erm_se.FixedPoint(*as_fp(hi), **d_hi, iterations=its, residual=res, errors=errors,
                           global_minimum=True)
    fitted, fitted_err = _fitted(fp, p_hi)
    # alpha's own bar enters fitted = Sigma Sigma_hat / (2 alpha fac) too
    fp = replace(fp, errors={**errors, "fitted": fitted_err + fitted * alpha_error / hi[2]})
    return RidgelessPoint(alpha=hi[2], alpha_interp=a_i, fixed_point=fp,
                          delta=math.sqrt(fp.q_hat) / fp.m_hat, fitted=fitted, reliable=True,
                          all_fixed_points=(fp,), rule="split", given="sigma",
                          alpha_error=alpha_error, orders=(order, order_lo))


def at_sigma_order_sequence(*, sigma: float, kappa0: float, Delta: float,
                            orders: tuple = (12, 16, 20), beta: float = 1.0,
                            beta0: float = 1.0, start: tuple | None = None,
                            tol: float = 1e-8,
                            jacobian_order: int = _JACOBIAN_ORDER) -> list[dict]:
    """The fixed-Sigma lambda = 0 fixed point at each outer order of ``orders`` (increasing),
    each solved by :func:`solve_at_sigma` from the previous one with its Broyden Jacobian, the
    first from ``start`` (default :func:`at_sigma_start`) with the Gauss-Hermite Jacobian of
    ``jacobian_order`` (17):
    for orders (12, 16, ...) the first two are exactly :func:`ridgeless_at_sigma`'s pair, the
    later ones the check of its bars (docs/erm.md "The fixed-Sigma bars away from kappa0 =
    Delta = 0.5").  Any (kappa0, Delta): this is the check, not the served value.  One dict per
    order: order, q, m, alpha, the hats, train, test, iterations, residual."""
    require(len(orders) >= 1 and all(isinstance(o, int) and o >= 2 for o in orders)
            and list(orders) == sorted(set(orders)), "orders",
            "increasing integers >= 2", orders)
    a_i = alpha_interp(kappa0=kappa0, Delta=Delta)
    p = erm_se.ERMParams(alpha=a_i, kappa0=kappa0, Delta=Delta, lam=0.0, beta=beta,
                         beta0=beta0)
    x = at_sigma_start(sigma, kappa0=kappa0, Delta=Delta) if start is None else start
    B, out = None, []
    for o in orders:
        r, its, res, B = solve_at_sigma(p, sigma=float(sigma), q=x[0], m=x[1], alpha=x[2],
                                        order=o, tol=tol, jacobian=B,
                                        jacobian_order=jacobian_order)
        d = _split_point(replace(p, alpha=r[2]), (r[0], r[1], float(sigma), *r[3:]), o)
        out.append({"order": o, "q": r[0], "m": r[1], "alpha": r[2], "q_hat": r[3],
                    "m_hat": r[4], "sigma_hat": r[5], "train": d["train"], "test": d["test"],
                    "iterations": its, "residual": res})
        x = r
    return out


def split_order_sequence(*, alpha: float, kappa0: float, Delta: float,
                         orders: tuple = (12, 16, 20), beta: float = 1.0, beta0: float = 1.0,
                         start: tuple | None = None, tol: float = 1e-8,
                         jacobian_order: int = _JACOBIAN_ORDER) -> list[dict]:
    """The fixed-alpha lambda = 0 fixed point of the piecewise rule at each outer order of
    ``orders`` (increasing), each solved by :func:`solve_split` from the previous one with its
    Broyden Jacobian, the first from ``start`` = (q, m, Sigma) (default: the Gauss-Hermite
    order-12 fixed point from the first start of :data:`RIDGELESS_INITS` that converges) with
    the Gauss-Hermite Jacobian of ``jacobian_order``: for orders (12, 16, ...) the first two are
    :func:`ridgeless_se`'s pair (rule "split"), the later ones the check of its bars (docs/erm.md
    "The fixed-alpha bars away from kappa0 = Delta = 0.5"; THEORY 3).  Any model: this is the
    check, not the served value.  One dict per order: order, q, m, Sigma, the hats, train,
    test, mse, rank, fitted, iterations, residual."""
    require(len(orders) >= 1 and all(isinstance(o, int) and o >= 2 for o in orders)
            and list(orders) == sorted(set(orders)), "orders",
            "increasing integers >= 2", orders)
    p = erm_se.ERMParams(alpha=float(alpha), kappa0=kappa0, Delta=Delta, lam=0.0, beta=beta,
                         beta0=beta0)
    if start is None:
        for qi, mi, si in RIDGELESS_INITS:
            try:
                start = erm_se.fixed_point(p, q=qi * p.Q0, m=mi * p.Q0, sigma=si,
                                           order=_CHEAP_ORDER, tol=1e-10,
                                           label="ERM SE at lambda = 0")[0][:3]
                break
            except ConvergenceError:
                continue
        if start is None:
            raise ConvergenceError("no lambda = 0 SE start converged (Gauss-Hermite order 12)",
                                   last_iterate=None, residual=None)
    x, B, out = start, None, []
    fac2 = 2 * p.alpha * alpha_bar_factor(p.tokens)
    for o in orders:
        r, its, res, B = solve_split(p, q=x[0], m=x[1], sigma=x[2], order=o, tol=tol,
                                     jacobian=B, jacobian_order=jacobian_order)
        d = _split_point(p, r, o)
        out.append({"order": o, "q": r[0], "m": r[1], "sigma": r[2], "q_hat": r[3],
                    "m_hat": r[4], "sigma_hat": r[5], **d, "fitted": r[2] * r[5] / fac2,
                    "iterations": its, "residual": res})
        x = r
    return out


def fixed_alpha_checked(*, kappa0: float, Delta: float, beta: float = 1.0,
                        beta0: float = 1.0) -> bool:
    """Whether :func:`ridgeless_se` serves the model: (kappa0, Delta) in
    :data:`FIXED_ALPHA_RANGE` (ends within 1e-12), beta = beta0 = 1 (to 1e-12)."""
    return (all(lo - 1e-12 <= v <= hi + 1e-12 for v, (lo, hi) in
                ((kappa0, FIXED_ALPHA_RANGE["kappa0"]), (Delta, FIXED_ALPHA_RANGE["Delta"])))
            and abs(beta - 1.0) <= 1e-12 and abs(beta0 - 1.0) <= 1e-12)


def _close(a: tuple, b: tuple, rel: float = 1e-4) -> bool:
    return all(abs(x - y) <= rel * (1 + abs(y)) for x, y in zip(a[:3], b[:3], strict=True))


def ridgeless_se(*, alpha: float, kappa0: float, Delta: float, beta: float = 1.0,
                 beta0: float = 1.0, inits: tuple | None = None, order: int | None = None,
                 order_lo: int | None = None, tol: float | None = None,
                 validated_only: bool = True, rule: str = "auto") -> RidgelessPoint:
    """The ERM SE at lambda = 0 for alpha > alpha_interp, T = 2 (module docstring; THEORY 3).

    Refuses alpha <= alpha_interp (there the lambda -> 0+ limit is the interpolator,
    :func:`erm_se.interpolator_limit`, and the lambda = 0 SE has Sigma = infinity).  ``inits``:
    (q/Q0, m/Q0, Sigma) triples (default :data:`RIDGELESS_INITS`), each first iterated at
    Gauss-Hermite order 12.  ``rule``: ``"gh"``: :func:`erm_se.solve` (orders 24/17, bar =
    difference x 17/7; ``tol`` default 1e-11); ``"split"``: the piecewise output rule solved by
    :func:`solve_split` (outer orders 16/12, bars :func:`_fixed_alpha_errors`; ``tol`` default
    1e-8);
    ``"auto"``: Gauss-Hermite where the order-12 fixed points have Sigma <= :data:`SIGMA_RELIABLE`
    (and the order-24 one too), the piecewise rule otherwise.  ``order``/``order_lo``: those of
    the rule used.  ``validated_only``: a fixed point beyond the rule's validated range (Sigma >
    :data:`SIGMA_RELIABLE` for Gauss-Hermite, > :data:`SIGMA_SPLIT` for the piecewise rule)
    raises :class:`ConvergenceError` with it as the last iterate instead of being returned
    (``False``: returned with ``reliable=False``), and a model outside
    :data:`FIXED_ALPHA_RANGE` (beta = beta0 = 1), where no bar was checked, is refused."""
    a_i = alpha_interp(kappa0=kappa0, Delta=Delta)
    require(isinstance(alpha, (int, float)) and math.isfinite(alpha) and alpha > a_i * (1 + 1e-9),
            "alpha", f"> alpha_interp = {a_i:.10g} at lambda = 0 (at or below it use lambda > 0 "
            "or the lambda -> 0+ interpolator limit)", alpha)
    require(rule in RULES, "rule", f"one of {RULES}", rule)
    if validated_only:
        (a, b), (c, d) = FIXED_ALPHA_RANGE["kappa0"], FIXED_ALPHA_RANGE["Delta"]
        require(fixed_alpha_checked(kappa0=kappa0, Delta=Delta, beta=beta, beta0=beta0),
                "kappa0", f"in the checked range kappa0 in [{a:g}, {b:g}], Delta in [{c:g}, "
                f"{d:g}], beta = beta0 = 1 (--kappa0, --delta, --beta, --beta0), where the "
                "lambda = 0 bars were checked against higher orders (validated_only=False for "
                "others, bars unchecked)", (kappa0, Delta, beta, beta0))
    p = erm_se.ERMParams(alpha=float(alpha), kappa0=kappa0, Delta=Delta, lam=0.0, beta=beta,
                         beta0=beta0)
    starts, failures = [], []
    for qi, mi, si in RIDGELESS_INITS if inits is None else inits:
        try:
            x, _, _ = erm_se.fixed_point(p, q=qi * p.Q0, m=mi * p.Q0, sigma=si,
                                         order=_CHEAP_ORDER, tol=1e-10,
                                         label="ERM SE at lambda = 0")
        except ConvergenceError as e:
            try:  # Anderson mixing stalls where the map's slow mode nears 1: Broyden from there
                x = solve_split(p, q=e.last_iterate[0], m=e.last_iterate[1],
                                sigma=e.last_iterate[2], order=_CHEAP_ORDER, tol=1e-9,
                                rule="gh")[0]
            except (ConvergenceError, TypeError, IndexError, ValueError) as e2:
                failures.append(e2)
                continue
        if not any(_close(x, s) for s in starts):
            starts.append(tuple(x[:3]))
    if not starts:
        raise ConvergenceError("no lambda = 0 SE start converged (Gauss-Hermite order 12)",
                               last_iterate=[f.last_iterate for f in failures],
                               residual=[f.residual for f in failures])
    lowest = min(starts, key=lambda s: s[2])
    if validated_only and rule != "gh" and lowest[2] > 2 * SIGMA_SPLIT:
        # far beyond the checked range already at order 12 (which underestimates Sigma: 19.8
        # against 25.9 at alpha = 0.3): refused before the costly orders
        raise ConvergenceError(
            f"the lambda = 0 SE at alpha = {alpha:g} has Sigma ~ {lowest[2]:.3g} (Gauss-Hermite "
            f"order 12) > 2 x {SIGMA_SPLIT:g}, beyond the range where the bars of the piecewise "
            "output rule were checked to cover", last_iterate=list(lowest),
            residual=None)
    use_gh = rule == "gh" or (rule == "auto"
                              and max(s[2] for s in starts) <= SIGMA_RELIABLE)
    found = None
    if use_gh:
        found = erm_se.solve(p, inits=tuple((q / p.Q0, m / p.Q0, s) for q, m, s in starts),
                             order=order, order_lo=order_lo,
                             tol=1e-11 if tol is None else tol, label="ERM SE at lambda = 0")
        best = next(f for f in found if f.global_minimum)
        if rule == "auto" and best.sigma > SIGMA_RELIABLE:
            found, use_gh = None, False
    if found is None:
        found = _solve_split_all(p, starts, SPLIT_ORDER if order is None else order,
                                 SPLIT_ORDER_LO if order_lo is None else order_lo,
                                 1e-8 if tol is None else tol)
    best = next(f for f in found if f.global_minimum)
    bound, what = ((SIGMA_RELIABLE, "Gauss-Hermite 24/17") if use_gh
                   else (SIGMA_SPLIT, "the piecewise output rule 16/12"))
    if validated_only and best.sigma > bound:
        raise ConvergenceError(
            f"the lambda = 0 SE at alpha = {alpha:g} has Sigma = {best.sigma:.3g} > {bound:g}, "
            f"beyond the range where the bars of {what} were checked to cover",
            last_iterate=[best.q, best.m, best.sigma], residual=best.residual)
    fitted, fitted_err = _fitted(best, p)
    best = replace(best, errors={**best.errors, "fitted": fitted_err})
    delta = math.sqrt(best.q_hat) / best.m_hat
    return RidgelessPoint(alpha=float(alpha), alpha_interp=a_i, fixed_point=best, delta=delta,
                          fitted=fitted, reliable=best.sigma <= bound,
                          all_fixed_points=tuple(found), rule="gh" if use_gh else "split")


def lambda_extrapolation(*, lams: tuple, values: tuple, errors: tuple) -> tuple[float, float]:
    """(value, error) at lambda = 0 from values at >= 3 lambdas (THEORY 3, module docstring:
    smooth in lambda above alpha_interp).  Value: the interpolating polynomial through all
    points at 0; error: |that - the polynomial through all but the largest lambda| (the
    truncation, by refinement) + sum |Lagrange weight at 0| x error (the points' own bars)."""
    lam = np.asarray(lams, dtype=float)
    val = np.asarray(values, dtype=float)
    err = np.asarray(errors, dtype=float)
    require(lam.ndim == 1 and lam.size >= 3 and lam.size == val.size == err.size, "lams",
            "a sequence of >= 3 lambdas with as many values and errors", lams)
    require(bool(np.all(lam > 0)) and np.unique(lam).size == lam.size, "lams",
            "distinct lambdas > 0", lams)
    require(bool(np.all(np.isfinite(val)) and np.all(err >= 0)), "values",
            "finite values with errors >= 0", values)

    def weights(x: np.ndarray) -> np.ndarray:
        return np.array([np.prod([-x[j] / (x[i] - x[j]) for j in range(x.size) if j != i])
                         for i in range(x.size)])

    w = weights(lam)
    full = float(w @ val)
    keep = np.argsort(lam)[:-1]
    lower = float(weights(lam[keep]) @ val[keep])
    return full, abs(full - lower) + float(np.abs(w) @ err)
