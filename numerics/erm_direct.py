"""ERM state evolution of the direct parameterisation: S trained element-wise with a ridge
penalty, T = 2 tokens (THEORY 3, "Direct parameterisation"; derived here).

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
with Sigma_hat -> Sigma_hat + 2 lam.  Training loss per d^2 (the potential, regulariser included):

    Phi = (q_hat Sigma - Sigma_hat q)/4 + m_hat m/2 + alpha E[min_u (...)] - (m_hat^2 Q0 + q_hat)/(4 c);

at a fixed point Phi = alpha E[loss at the proximal point] + (lam/2) q (checked in the tests).
The learned spectrum is mu_S0 boxplus semicircle, scaled by eta: no atom at 0, rank 1.
Fixed point, error bars (two output orders times :func:`numerics.erm_se.algebraic_factor`) and
the global-minimum choice are those of :mod:`numerics.erm_se`.
"""

from __future__ import annotations

from . import erm_se
from .erm_output import _ORDER, generalisation_error, output_moments
from .erm_se import (
    ERMParams,
    FixedPoint,
)
from .records import require

__all__ = ["overlaps_from_hats", "prior_value", "potential", "fixed_point", "solve"]


def _c(sigma_hat: float, p: ERMParams) -> float:
    return sigma_hat + 2.0 * p.lam


def overlaps_from_hats(q_hat: float, m_hat: float, sigma_hat: float,
                       p: ERMParams) -> tuple[float, float, float, float]:
    """(q, m, Sigma, eta) from the hats: the linear (ridge) prior side; ``p.lam`` is the ridge
    weight of (lam/2) d ||S||_F^2 (module docstring)."""
    require(q_hat >= 0 and m_hat > 0 and sigma_hat > 0, "hats", "q_hat >= 0, m_hat, Sigma_hat > 0",
            (q_hat, m_hat, sigma_hat))
    c = _c(sigma_hat, p)
    return (m_hat * m_hat * p.Q0 + q_hat) / (c * c), m_hat * p.Q0 / c, 1.0 / c, m_hat / c


def prior_value(q_hat: float, m_hat: float, sigma_hat: float, p: ERMParams) -> float:
    """E min_S (1/d)[(Sigma_hat/4 + lam/2) Tr S^2 - (1/2) Tr S (m_hat S0 + sqrt(q_hat) Z)]."""
    return -(m_hat * m_hat * p.Q0 + q_hat) / (4.0 * _c(sigma_hat, p))


def potential(q: float, m: float, sigma: float, q_hat: float, m_hat: float, sigma_hat: float,
              p: ERMParams, *, order: int = _ORDER) -> float:
    """The direct model's training-loss potential Phi (module docstring) at any six parameters."""
    env = output_moments(q=q, m=m, sigma=sigma, Q0n=p.Q0n, beta=p.beta, beta0=p.beta0,
                         order=order).envelope
    return ((q_hat * sigma - sigma_hat * q) / 4 + m_hat * m / 2 + p.alpha * env
            + prior_value(q_hat, m_hat, sigma_hat, p))


def fixed_point(p: ERMParams, **kw) -> tuple[tuple, int, float]:
    """Iterate the direct SE map from (q, m, Sigma): :func:`numerics.erm_se.fixed_point` with the
    linear prior :func:`overlaps_from_hats` (same keywords, returns and errors)."""
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


def solve(p: ERMParams, **kw) -> list[FixedPoint]:
    """All direct-model fixed points reached from the starts (``inits``, ``order``, ``order_lo``,
    ``tol`` as :func:`numerics.erm_se.solve`), deduplicated, with errors |x_order - x_order_lo|
    times the algebraic factor and the lowest training loss flagged ``global_minimum``;
    ``p.lam`` is the ridge weight (module docstring)."""
    return erm_se.solve(p, prior=overlaps_from_hats, derived=_derived, label="direct ERM SE",
                        **kw)
