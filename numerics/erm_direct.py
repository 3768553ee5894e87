"""ERM state evolution of the direct parameterisation: S trained element-wise with a ridge
penalty, T = 2..6 tokens (THEORY 3, "Direct parameterisation"; derived here).

Model.  The student S is a symmetric d x d matrix (no factorisation, no PSD constraint), output
softmax_beta(h(S)) as in the factorised model, loss sum_mu ||y_mu - f(x_mu)||_F^2 plus the ridge
penalty (lam / 2) d ||S||_F^2.  Per d^2, as every term of the factorised training loss (THEORY 3,
where lambda_t d ||S||_* becomes lam (1/d) Tr S), the penalty is (lam / 2) (1/d) Tr S^2: both are
O(1) per d^2 for eigenvalues of order one, and the factor 1/2 is the authors' (their direct SE
data obey Sigma = 1 / (Sigma_hat + 2 lam) with lam their ``lreg``; a penalty lam d ||S||_F^2 is
this module at 2 lam).

Prior side.  The output side and the quadratic terms of the potential are those of the factorised
SE (:mod:`numerics.erm_se`); only the minimisation over S changes.  With B = m_hat S0 + sqrt(q_hat) Z
(Z GOE, (1/d) Tr Z^2 = 1), the factorised prior minimises (1/d) [(Sigma_hat/4) Tr S^2 - (1/2) Tr SB
+ lam Tr S] over PSD S (giving eta ReLU(S0 + delta Z - eps I)); here it minimises
(1/d) [(Sigma_hat/4 + lam/2) Tr S^2 - (1/2) Tr SB] over all symmetric S, a linear denoiser:

    S_hat = B / c = eta (S0 + delta Z),   c = Sigma_hat + 2 lam,   eta = m_hat / c,
    delta = sqrt(q_hat) / m_hat,   min value -(m_hat^2 Q0 + q_hat) / (4 c),

using (1/d) Tr S0^2 = Q0 = 1 + kappa0 and (1/d) Tr S0 Z -> 0.  Differentiating the min value
(q = 4 d/dSigma_hat, m = -2 d/dm_hat, Sigma = -4 d/dq_hat of it, as in THEORY 3):

    q = (m_hat^2 Q0 + q_hat) / c^2,   m = m_hat Q0 / c,   Sigma = 1 / c,

i.e. the factorised prior side without the ReLU (J = Q0 + delta^2, d_delta J = 2 delta, eps = 0)
with Sigma_hat -> Sigma_hat + 2 lam.  The prior side does not depend on T.  Training loss per
d^2 (the potential, regulariser included):

    Phi = (q_hat Sigma - Sigma_hat q)/4 + m_hat m/2 + alpha E[min_u (...)] - (m_hat^2 Q0 + q_hat)/(4 c);

at a fixed point Phi = alpha E[loss at the proximal point] + (lam/2) q (checked in the tests).
The learned spectrum is mu_S0 boxplus semicircle, scaled by eta: no atom at 0, rank 1.

Output side, error bars, global minimum: those of :mod:`numerics.erm_se`.  T = 2: Gauss-Hermite
at two orders, bar = their difference times :func:`numerics.erm_se.algebraic_factor`.  T >= 3:
randomised QMC (:mod:`numerics.erm_output_tokens`); the value is the fixed point of the pooled
map, the bar COVER (= 3) x the standard error of the R single-replicate fixed points started from
it (:func:`numerics.erm_se.solve_tokens` with this prior side).  Of several fixed points
the one of lowest training loss is flagged ``global_minimum``.

Limits (derived here, any T; fac = (T^2 + T - 2)/2 seen directions per sample, r = beta0/beta):
- lam -> 0+ (:func:`interpolator_limit`): with Sigma -> infinity the prox matches the labels,
  d = r ell - omega, so m_hat = r Sigma_hat = 2 alpha fac r / Sigma and q_hat = 2 alpha fac
  (r^2 Q0n - 2 r m + q) / Sigma^2.  With a = 2 alpha fac = 2 alpha_bar the prior gives
  lam Sigma = (1 - a)/2, m = a r Q0, q = r^2 a (Q0n - a Q0)/(1 - a) and train / lam -> q/2 (the
  minimum-Frobenius-norm interpolator), for a < 1: the direct interpolation threshold is
  alpha_bar = 1/2, alpha = 1/(T^2 + T - 2) (:func:`interpolation_threshold`), for every
  kappa0, Delta, beta, beta0 (THEORY 3's direct alpha_bar = 1/2).
- lam -> infinity (:func:`ridge_limit`): Sigma -> 0, d = -Sigma grad_u L(0; y) + O(Sigma^2), and
  by Stein's lemma the hats tend to q_hat = 2 alpha E|grad_u L|^2, m_hat = -(2 alpha/Q0n)
  E[z0n . grad_u L], Sigma_hat = 2 alpha E[tr Hess_u L], all at u = 0 (uniform student output),
  so m ~ m_hat Q0 / (2 lam), q ~ (m_hat^2 Q0 + q_hat)/(4 lam^2), and the test error tends to
  E sum_ab y_ab^2 - 1 (the error of the uniform output 1/T).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from . import erm_output_tokens as qmc_route
from . import erm_se
from .erm_output import _ORDER, generalisation_error
from .erm_se import DEFAULT_INITS_TOKENS, QMC_TOL, ERMParams, FixedPoint, hats_from_overlaps
from .records import require

__all__ = ["overlaps_from_hats", "prior_value", "potential", "fixed_point", "solve",
           "interpolation_threshold", "InterpolatorLimit", "interpolator_limit", "RidgeLimit",
           "ridge_limit"]

_NAMES = ("q", "m", "sigma", "q_hat", "m_hat", "sigma_hat")


def _c(sigma_hat: float, p: ERMParams) -> float:
    return sigma_hat + 2.0 * p.lam


def overlaps_from_hats(q_hat: float, m_hat: float, sigma_hat: float,
                       p: ERMParams) -> tuple[float, float, float, float]:
    """(q, m, Sigma, eta) from the hats: the linear (ridge) prior side; ``p.lam`` is the ridge
    weight of (lam/2) d ||S||_F^2 (module docstring)."""
    c = _c(sigma_hat, p)
    # Sigma_hat > 0 in exact arithmetic; only c matters here (at large lam the QMC estimate of
    # Sigma_hat is noisy, its noise growing like lam, while c ~ 2 lam stays far from 0)
    require(q_hat >= 0 and m_hat > 0 and c > 0, "hats", "q_hat >= 0, m_hat > 0, "
            "Sigma_hat + 2 lam > 0", (q_hat, m_hat, sigma_hat))
    return (m_hat * m_hat * p.Q0 + q_hat) / (c * c), m_hat * p.Q0 / c, 1.0 / c, m_hat / c


def prior_value(q_hat: float, m_hat: float, sigma_hat: float, p: ERMParams) -> float:
    """E min_S (1/d)[(Sigma_hat/4 + lam/2) Tr S^2 - (1/2) Tr S (m_hat S0 + sqrt(q_hat) Z)]."""
    return -(m_hat * m_hat * p.Q0 + q_hat) / (4.0 * _c(sigma_hat, p))


def potential(q: float, m: float, sigma: float, q_hat: float, m_hat: float, sigma_hat: float,
              p: ERMParams, *, order: int = _ORDER, replicate: int | None = None,
              points: int | None = None) -> float:
    """The direct model's training-loss potential Phi (module docstring) at any six parameters;
    the output side as :func:`numerics.erm_se.hats_from_overlaps` (T = 2: Gauss-Hermite of
    ``order``; T >= 3: QMC, all replicates pooled or only ``replicate``, ``points`` each)."""
    env = hats_from_overlaps(q, m, sigma, p, order=order, replicate=replicate,
                             points=points)[3]
    return ((q_hat * sigma - sigma_hat * q) / 4 + m_hat * m / 2 + p.alpha * env
            + prior_value(q_hat, m_hat, sigma_hat, p))


def fixed_point(p: ERMParams, **kw) -> tuple[tuple, int, float]:
    """Iterate the direct SE map from (q, m, Sigma): :func:`numerics.erm_se.fixed_point` with the
    linear prior :func:`overlaps_from_hats` (same keywords, returns and errors; at T >= 3 the
    default ``tol`` is :data:`numerics.erm_se.QMC_TOL`)."""
    kw.setdefault("tol", 1e-11 if p.tokens == 2 else QMC_TOL)
    return erm_se.fixed_point(p, prior=overlaps_from_hats, label="direct ERM SE", **kw)


def _derived(p: ERMParams, params: tuple, order: int) -> dict:
    q, m, sigma, q_hat, m_hat, sigma_hat = params
    return {
        "train": potential(q, m, sigma, q_hat, m_hat, sigma_hat, p, order=order),
        "test": generalisation_error(q=q, m=m, Q0n=p.Q0n, beta=p.beta, beta0=p.beta0,
                                     step=0.2 if order >= _ORDER else 0.25),
        "mse": p.Q0 + q - 2 * m,
        "rank": 1.0,  # eta (S0 + delta Z) has no atom at 0
    }


def _derived_tokens(p: ERMParams, params: tuple, replicate: int | None) -> dict:
    """train, test, mse, rank at a T >= 3 fixed point with the pooled QMC points or those of
    one replicate (the test error on its own, independent points, as in :mod:`.erm_se`)."""
    q, m, sigma, q_hat, m_hat, sigma_hat = params
    test = qmc_route.generalisation_error(
        q=q, m=m, Q0n=p.Q0n, tokens=p.tokens, beta=p.beta, beta0=p.beta0,
        points=4 * p.qmc_points, replicates=p.qmc_replicates, seed=p.qmc_seed + 1,
        only=replicate).value
    return {"train": potential(q, m, sigma, q_hat, m_hat, sigma_hat, p, replicate=replicate),
            "test": test, "mse": p.Q0 + q - 2 * m, "rank": 1.0}


def solve(p: ERMParams, *, inits: tuple | None = None, **kw) -> list[FixedPoint]:
    """All direct-model fixed points reached from the starts, deduplicated, the lowest training
    loss flagged ``global_minimum``; ``p.lam`` is the ridge weight (module docstring).
    T = 2: :func:`numerics.erm_se.solve` (``inits``, ``order``, ``order_lo``, ``tol``), errors
    |x_order - x_order_lo| times the algebraic factor.  T >= 3: randomised QMC
    (:func:`numerics.erm_se.solve_tokens`; default starts :data:`numerics.erm_se.DEFAULT_INITS_TOKENS`, no
    other keyword), errors 3 standard errors of the replicate fixed points."""
    if p.tokens == 2:
        return erm_se.solve(p, inits=inits, prior=overlaps_from_hats, derived=_derived,
                            label="direct ERM SE", **kw)
    require(not kw, "keywords", "only inits for T >= 3 (orders are T = 2's)", sorted(kw))
    return erm_se.solve_tokens(p, inits=DEFAULT_INITS_TOKENS if inits is None else inits,
                               label="direct ERM SE", prior=overlaps_from_hats,
                               derived=_derived_tokens)


# ------------------------------------------------------------------------------------ limits
def _fac(tokens: int) -> int:
    require(not isinstance(tokens, bool) and tokens in qmc_route.TOKENS, "tokens",
            f"one of {qmc_route.TOKENS}", tokens)
    return (tokens * tokens + tokens - 2) // 2


def interpolation_threshold(tokens: int) -> float:
    """The direct model's interpolation threshold alpha = 1/(T^2 + T - 2) (alpha_bar = 1/2: as
    many seen constraints as the d^2/2 entries of S; module docstring), any kappa0, Delta,
    beta, beta0."""
    return 1.0 / (2 * _fac(tokens))


@dataclass(frozen=True)
class InterpolatorLimit:
    """The direct SE as lam -> 0+ below its threshold (the minimum-Frobenius-norm interpolator):
    q, m, mse, lim lam Sigma, lim train / lam = q/2, the test error and its bar."""

    alpha: float
    tokens: int
    q: float
    m: float
    mse: float
    lam_sigma: float
    train_over_lam: float
    test: float
    test_error: float


def interpolator_limit(*, alpha: float, kappa0: float, Delta: float, tokens: int = 2,
                       beta: float = 1.0, beta0: float = 1.0) -> InterpolatorLimit:
    """lam -> 0+ of the direct SE at alpha < :func:`interpolation_threshold` (module docstring):
    with a = 2 alpha fac, r = beta0/beta, lam Sigma = (1 - a)/2, m = a r Q0,
    q = r^2 a (Q0n - a Q0)/(1 - a).  Test error: T = 2 trapezoidal rule (bar: the difference to
    the coarser step), T >= 3 randomised QMC (bar: 3 standard errors)."""
    p = ERMParams(alpha=alpha, kappa0=kappa0, Delta=Delta, lam=0.0, beta=beta, beta0=beta0,
                  tokens=tokens)
    a, r = 2.0 * p.alpha * _fac(p.tokens), p.beta0 / p.beta
    require(a < 1.0, "alpha", f"< 1/{2 * _fac(p.tokens)} (the direct model's interpolation "
            f"threshold at T = {p.tokens})", alpha)
    q = r * r * a * (p.Q0n - a * p.Q0) / (1.0 - a)
    m = a * r * p.Q0
    if p.tokens == 2:
        test = generalisation_error(q=q, m=m, Q0n=p.Q0n, beta=beta, beta0=beta0)
        err = abs(test - generalisation_error(q=q, m=m, Q0n=p.Q0n, beta=beta, beta0=beta0,
                                              step=0.25))
    else:
        t = qmc_route.generalisation_error(q=q, m=m, Q0n=p.Q0n, tokens=p.tokens, beta=beta,
                                           beta0=beta0)
        test, err = t.value, t.bar()
    return InterpolatorLimit(alpha=p.alpha, tokens=p.tokens, q=q, m=m, mse=p.Q0 + q - 2 * m,
                             lam_sigma=(1.0 - a) / 2.0, train_over_lam=q / 2.0, test=test,
                             test_error=err)


@dataclass(frozen=True)
class RidgeLimit:
    """The direct SE as lam -> infinity (module docstring): the limiting hats, the test error of
    the uniform output E sum y^2 - 1, and ``errors`` (difference of two trapezoidal steps)."""

    q_hat: float
    m_hat: float
    sigma_hat: float
    test: float
    errors: dict

    def overlaps(self, *, lam: float, Q0: float) -> tuple[float, float, float]:
        """(q, m, Sigma) of the prior side at the limiting hats and ridge weight ``lam``."""
        c = self.sigma_hat + 2.0 * lam
        return (self.m_hat**2 * Q0 + self.q_hat) / c**2, self.m_hat * Q0 / c, 1.0 / c


def _row_expectations(T: int, Q0n: float, beta0: float, step: float, R: float) -> np.ndarray:
    """Per-row expectations at u = 0 (module docstring, ridge limit), by the T-dimensional
    trapezoidal rule of ``step`` on [-R, R]^T in standard normal coordinates: returns
    (E sum_b s_b^2 g_b^2, E[h(z)^2], E sum_b s_b z_b g_b, E sum_b s_b^2 H_bb, E sum_b y_b^2) with
    row logits beta0 s_b z_b (s = sqrt2 on the diagonal b = 0), g_b = -(2/T)(y_b - 1/T) the
    gradient and H_bb = 2[(T-1)/T^3 - (1/T)(1 - 2/T)(y_b - 1/T)] the Hessian diagonal of
    sum_b (y_b - softmax(w)_b)^2 in w at w = 0, h(z) = E[g_1 | z_1 = z]."""
    x = np.arange(-R, R + step / 2, step)
    w1 = step * np.exp(-x * x / 2) / math.sqrt(2 * math.pi)
    grids = np.meshgrid(*([x] * T), indexing="ij")
    wt = _outer([w1] * T)
    s = np.array([math.sqrt(2.0)] + [1.0] * (T - 1))
    z = np.stack(grids, axis=-1) * math.sqrt(Q0n)
    v = beta0 * s * z
    v -= v.max(axis=-1, keepdims=True)
    y = np.exp(v)
    y /= y.sum(axis=-1, keepdims=True)
    g = -(2.0 / T) * (y - 1.0 / T)
    H = 2.0 * ((T - 1) / T**3 - (1.0 / T) * (1.0 - 2.0 / T) * (y - 1.0 / T))
    e_gg = np.sum(wt * np.sum(s * s * g * g, axis=-1))
    # h(z) = E[g_1 | z_1]: sum over every axis but axis 1 (the first off-diagonal entry)
    axes = tuple(i for i in range(T) if i != 1)
    h = np.sum(wt * g[..., 1], axis=axes) / w1
    e_hh = float(np.sum(w1 * h * h))
    e_zg = np.sum(wt * np.sum(s * z * g, axis=-1))
    e_H = np.sum(wt * np.sum(s * s * H, axis=-1))
    e_yy = np.sum(wt * np.sum(y * y, axis=-1))
    return np.array([e_gg, e_hh, e_zg, e_H, e_yy])


def _outer(ws: list[np.ndarray]) -> np.ndarray:
    """The outer product of the 1-d weight vectors ``ws`` (a tensor rule's weights)."""
    out = ws[0]
    for w in ws[1:]:
        out = np.multiply.outer(out, w)
    return out


def ridge_limit(*, alpha: float, kappa0: float, Delta: float, tokens: int = 2,
                beta: float = 1.0, beta0: float = 1.0, step: float = 0.2) -> RidgeLimit:
    """lam -> infinity of the direct SE (module docstring), T = 2 or 3: the hats
    q_hat = 2 alpha beta^2 [T E_row sum s^2 g^2 + T (T - 1) E h^2],
    m_hat = -(2 alpha beta / Q0n) T E_row sum s z g, Sigma_hat = 2 alpha beta^2 T E_row sum s^2 H
    and the test error T E_row sum y^2 - 1, every row expectation by the trapezoidal rule
    (independent of the QMC route); errors: the difference to ``step`` x 1.25."""
    p = ERMParams(alpha=alpha, kappa0=kappa0, Delta=Delta, lam=0.0, beta=beta, beta0=beta0,
                  tokens=tokens)
    T = p.tokens
    require(T in (2, 3), "tokens", "2 or 3 (a T-dimensional tensor rule)", tokens)
    require(0.05 <= step <= 0.5, "step", "in [0.05, 0.5]", step)

    def values(h: float) -> np.ndarray:
        e_gg, e_hh, e_zg, e_H, e_yy = _row_expectations(T, p.Q0n, p.beta0, h, 9.0)
        a = 2.0 * p.alpha
        return np.array([a * p.beta**2 * (T * e_gg + T * (T - 1) * e_hh),
                         -a * p.beta * T * e_zg / p.Q0n,
                         a * p.beta**2 * T * e_H,
                         T * e_yy - 1.0])

    fine, coarse = values(step), values(1.25 * step)
    names = ("q_hat", "m_hat", "sigma_hat", "test")
    return RidgeLimit(*fine, errors={k: float(abs(a - b))
                                     for k, a, b in zip(names, fine, coarse, strict=True)})
