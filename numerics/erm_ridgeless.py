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
point is the lambda -> 0+ limit and the finite-lambda SE approaches it linearly in lambda on
the scale eps ~ 1, i.e. lambda << m_hat / 2 (:func:`lambda_extrapolation` checks this).

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

**Approach to alpha_interp+ (expected).**  f -> fac forces Sigma -> infinity; the fixed
point should then tend to the Sigma = infinity equations at eps = 0, i.e. the interpolator
at its threshold (delta_bar, q = J(delta_bar, 0), m = Q0n, test error 0.5010982710).  The
deficit fac - f(Sigma) comes from the labels that a finite Sigma does not match: row i (field
ell_i ~ N(0, s^2), s^2 = 3 Q0n) is matched where Sigma sigma'(ell_i)^2 >> 1, i.e. |ell_i| <
~ln(Sigma)/2, so fac - f ~ P(|ell| > ln(Sigma)/2), a log-normal tail, as long as ln(Sigma)/2 <
2 s^2 (Sigma < ~e^21); only beyond does the deficit become e^(2 s^2)/Sigma.  Hence
alpha - alpha_interp ~ P(|ell| > ln(Sigma)/2): over every Sigma the SE can reach, Sigma grows
like exp(2 s sqrt(2 ln(1/(alpha - alpha_interp)))), slower than any power of
1/(alpha - alpha_interp) (a simple pole only for alpha - alpha_interp below ~1e-6), the same
log-slowness as the lambda -> 0+ approach at alpha_interp (docs/erm_peak.md).  This is
derived, not measured: the SE could not be followed below ~3 alpha_interp (next paragraph),
so neither the Sigma law nor the rate at which the test error joins the interpolator's
0.5010982710 is confirmed.

Numerics: :func:`erm_se.solve` at lambda = 0 (Gauss-Hermite orders 24/17, bar = difference x
17/7).  Measured (kappa0 = Delta = 0.5, T = 2): at alpha = 2, 1, 0.5 (Sigma = 0.35, 0.86, 3.2)
the fixed points converge to 1e-11 and agree with the lambda -> 0 extrapolation of the
finite-lambda SE; at alpha = 0.3 (1.95 alpha_interp) the fixed point moves from q = 3.71 to
4.53 between orders 12 and 17 (Sigma 19.8, 27.1) and the order-24 iteration stalls at residual
6e-5 (q ~ 4.84): the slow mode of the map (Sigma -> infinity) amplifies the output side's
quadrature error, so the 24/17 bar is not trustworthy there; at 1.3 alpha_interp even order 12
does not converge (300 steps, Sigma ~ 430).  :data:`SIGMA_RELIABLE` flags the points beyond
the measured range.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from . import erm_se
from .erm_thresholds import alpha_bar_factor, interpolation_threshold
from .records import ConvergenceError, require

__all__ = ["RidgelessPoint", "ridgeless_se", "alpha_interp", "lambda_extrapolation",
           "SIGMA_RELIABLE", "RIDGELESS_INITS"]

SIGMA_RELIABLE = 5.0  # measured: bars verified up to Sigma = 3.2, not at Sigma ~ 20-30
# (q/Q0, m/Q0, Sigma) starts: erm_se's three and a large-Sigma one (near alpha_interp)
RIDGELESS_INITS = (*erm_se.DEFAULT_INITS, (2.0, 1.2, 200.0))


def alpha_interp(*, kappa0: float, Delta: float, tokens: int = 2) -> float:
    """alpha_interp in double precision (THEORY 3; :func:`erm_thresholds.interpolation_threshold`)."""
    return float(interpolation_threshold(kappa0=kappa0, Delta=Delta, tokens=tokens,
                                         dps=None).value)


@dataclass(frozen=True)
class RidgelessPoint:
    """The lambda = 0 SE fixed point (the global minimum of the training loss among those
    found) with the degrees-of-freedom diagnostics of the module docstring: ``fitted`` =
    D(delta) / (2 alpha fac) = f / fac (< 1 above alpha_interp), ``delta`` = sqrt(q_hat)/m_hat,
    ``alpha_interp``; ``errors`` as in :class:`erm_se.FixedPoint` (plus ``fitted``)."""

    alpha: float
    alpha_interp: float
    fixed_point: erm_se.FixedPoint
    delta: float
    fitted: float
    reliable: bool
    all_fixed_points: tuple

    def as_dict(self) -> dict:
        out = {"alpha": self.alpha, "alpha_interp": self.alpha_interp, "delta": self.delta,
               "fitted": self.fitted, "reliable": self.reliable}
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


def ridgeless_se(*, alpha: float, kappa0: float, Delta: float, beta: float = 1.0,
                 beta0: float = 1.0, inits: tuple | None = None, order: int | None = None,
                 order_lo: int | None = None, tol: float = 1e-11,
                 validated_only: bool = True) -> RidgelessPoint:
    """The ERM SE at lambda = 0 for alpha > alpha_interp, T = 2 (module docstring; THEORY 3).

    Refuses alpha <= alpha_interp (there the lambda -> 0+ limit is the interpolator,
    :func:`erm_se.interpolator_limit`, and the lambda = 0 SE has Sigma = infinity).  ``inits``
    ((q/Q0, m/Q0, Sigma) triples; default :data:`RIDGELESS_INITS`), ``order``/``order_lo`` as
    in :func:`erm_se.solve` (default 24/17; bar = their difference x 17/7).  ``tol``: the
    fixed-point tolerance on (log q, m, log Sigma), as in :func:`erm_se.solve` (at alpha = 0.3
    the order-24 iteration stalls at 6e-5: :class:`ConvergenceError`, see the module notes).
    ``validated_only``: a fixed point with Sigma > :data:`SIGMA_RELIABLE` (where the bars were
    measured not to settle between orders) raises :class:`ConvergenceError` with it as the last
    iterate instead of being returned (``False``: returned with ``reliable=False``)."""
    a_i = alpha_interp(kappa0=kappa0, Delta=Delta)
    require(isinstance(alpha, (int, float)) and math.isfinite(alpha) and alpha > a_i * (1 + 1e-9),
            "alpha", f"> alpha_interp = {a_i:.10g} at lambda = 0 (at or below it use lambda > 0 "
            "or the lambda -> 0+ interpolator limit)", alpha)
    p = erm_se.ERMParams(alpha=float(alpha), kappa0=kappa0, Delta=Delta, lam=0.0, beta=beta,
                         beta0=beta0)
    found = erm_se.solve(p, inits=RIDGELESS_INITS if inits is None else inits, order=order,
                         order_lo=order_lo, tol=tol, label="ERM SE at lambda = 0")
    best = next(f for f in found if f.global_minimum)
    if validated_only and best.sigma > SIGMA_RELIABLE:
        raise ConvergenceError(
            f"the lambda = 0 SE at alpha = {alpha:g} has Sigma = {best.sigma:.3g} > "
            f"{SIGMA_RELIABLE:g}, where its quadrature bars were measured not to cover (validated "
            "for alpha >= 0.5 at kappa0 = Delta = 0.5)", last_iterate=[best.q, best.m, best.sigma],
            residual=best.residual)
    fitted, fitted_err = _fitted(best, p)
    best = replace(best, errors={**best.errors, "fitted": fitted_err})
    delta = math.sqrt(best.q_hat) / best.m_hat
    return RidgelessPoint(alpha=float(alpha), alpha_interp=a_i, fixed_point=best, delta=delta,
                          fitted=fitted, reliable=best.sigma <= SIGMA_RELIABLE,
                          all_fixed_points=tuple(found))


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
