"""Deep AIM, two tied attention layers at T = 2 and finite width: Z_out and g_out at any
(omega_1, omega_2, V_1, V_2), and the state evolution with one overlap per layer (THEORY 1.1, 1.6;
derivation in docs/deep_aim.md, section "Finite width").

Whitened coordinates. For a symmetric 2 x 2 matrix with entries of variance (1 + delta_ab) V, the
three combinations (h11 + h22 - 2 h12)/sqrt 8, (h11 - h22)/2, (h11 + h22 + 2 h12)/sqrt 8 are
independent with variance V, and sum_{a<=b} (1 + delta_ab) g_ab^2 is the squared Euclidean norm of
the gradient in these coordinates. For H1 the first two are (xi1, xi2) of numerics/deep_aim.py
(H1 enters y only through them); for H2 they are (X/sqrt 8, Y/2), the seen part of H2. Write
a = (a1, a2) and b = (b1, b2) for the whitened means of the seen parts (from omega_1, omega_2).
Given H1 and z = (z1, z2) the seen part of H2 is fixed (the fibre), x* = (X*/sqrt 8, Y*/2) with
X* = z1/mu^2, Y* = (z2/mu - kappa z1/mu^2)/(1 + skip), and

  Z_out(z) = E_{xi ~ N(a, V1 I)}[ N(x*(xi, z); b, V2 I) / (4 sqrt 2 (1 + skip) |mu|^3) ],
  g_1 = grad_a log Z_out = E[xi - a | z]/V1,    g_2 = grad_b log Z_out = E[x* - b | z]/V2,

the posterior over xi having density proportional to the integrand. (a, b) = 0, V = 1 is the
small-width fibre of numerics/deep_aim.py. SE (THEORY 1.6, the one-layer normalisation of
numerics/aim_se.py per index): a ~ N(0, q1 I2), b ~ N(0, q2 I2), V_l = Q0_l - q_l, Q0_l = 1 + rho_l,

  q_hat_l = 2 alpha E|g_l|^2,   q_l = Q0_l - mmse_{rho_l}(1 / q_hat_l).

Shared tokens (``design="shared"``, the default; docs/deep_aim.md, "Shared tokens"). Both layers
read the same tokens, and S_l = sqrt(rho_l) I + F_l, so h^l = sqrt(rho_l) u + k^l with u = <Z, I>
common to the layers (computable from the tokens, whitened c ~ N(0, I2)) and k^l the parts of the
independent fluctuations F_l. Then the truths and the means share c: xi = sqrt(rho_1) c + k^1,
a = sqrt(rho_1) c + kappa^1 (kappa^1 the posterior mean of k^1, variance q_1 - rho_1), and the same
for (x, b), so Cov(xi_k, x_k) = Cov(a_k, b_k) = Cov(xi_k, b_k) = Cov(a_k, x_k) = sqrt(rho_1 rho_2)
per whitened coordinate, while the deviations xi - a, x - b stay independent of each other and of
(a, b) (so Z_out and the inner posterior are unchanged). This needs q_l >= rho_l. It neglects
the cross-overlap q'_12 = Tr(F_hat_1 F_hat_2)/D of the fluctuating parts, whose conjugate
q_hat_12 = 2 alpha E[g_1 . g_2] is not zero with shared tokens: :func:`fixed_point` reports it
(``q_hat_12``, ``cross_correlation``) as the size of what is neglected, and
:func:`cross_overlap_effect` estimates its first-order effect on mmse,
:func:`cross_overlap_output_effect` on e_gen (the output side at q'_12) and Phi (second order,
q_hat_12 q'_12 / 4); :func:`fixed_point` adds all three to the bars. ``design="independent"``
is the law of one token copy per layer (the law of this module before 2026-11-25).

The expectation (over a, b and the truth's deviations, 8 Gaussian dimensions) is a randomised
quasi-Monte Carlo average (scrambled Sobol, independent scrambles give the standard error) of the
posterior-variance form E|g_l|^2 = (2 V_l - E tr Cov_l[. | z]) / V_l^2 (law of total variance), on
points drawn truths first (xi ~ N(0, Q0_1 I), x ~ N(0, Q0_2 I), then the means given them): 3 to
10 times smaller standard errors than the mean-square form |E[. | z]|^2 / V_l^2 on points drawn means first
(``estimator="legacy"``, kept for comparison). Deterministic outer rules (Smolyak Gauss-Hermite in
the 8 dimensions, product rules in (a, b, z)) fail at skip = 1: the integrand has a kink where
z1 = 0 (x_1 = 0), where the small-mu part of H1 stops being suppressed (docs/deep_aim.md). The
inner 2D integral over xi is a trapezoid rule in t = (xi - a)/sqrt(V1) for skip >= 1 (mu never
vanishes; step refined by sqrt(V2/V1) when V2 < V1, at most MAX_REFINE times) and, for
skip < 1, by default (``inner="line"``) the trapezoid in t with lines xi2 = const graded in log
distance towards det A = 0, which follows a posterior of width sqrt(V) as V -> 0 (docs/deep_aim.md,
section 4, "Inner rule at c < 1"), or (``inner="graded"``, the default before 2026-11-26) the rule
of numerics/deep_aim.py graded towards det A = 0, reweighted from N(0, I) to N(a, V1 I), refused
below min(V1, V2) = GRADED_V_MIN, where its nodes no longer follow the posterior.

Free entropy (THEORY 1.1, 1.6): Phi = sum_l [-q_l q_hat_l/4 + Psi_S(q_hat_l; rho_l)] + alpha Psi_out,
Psi_S(q_hat) = q_hat Q0/4 - I(1/q_hat), Psi_out = E log Z_out(z) on the SE's point sets; the
Bayes-optimal generalisation error (THEORY 1.5) by a 12-dimensional randomised QMC over two
conditionally independent replicas; the curve along the uninformed branch (docs/deep_aim.md,
section 5).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy.optimize import brentq
from scipy.special import expit, ndtri
from scipy.stats import qmc

from . import wishart
from .deep_aim import _rule_cached
from .records import (
    ConvergenceError,
    Estimate,
    mean_estimate,
    refined_estimate,
    require,
    standard_error,
)

SQRT2 = math.sqrt(2.0)
SQRT8 = math.sqrt(8.0)
#: the inner trapezoid keeps nodes with |t| <= INNER_RADIUS (Gaussian mass outside: 2.3e-11)
INNER_RADIUS = 7.0
#: bars are COVERAGE standard errors over scrambles (Student t with 7 degrees of freedom: ~96 %)
#: plus the deterministic rule differences. Measured (issue 17, alpha = 0.1 point of skip = 1,
#: rho = (0.5, 0.5)): sd over seeds / reported standard error = 1.01 [0.97, 1.05] for e_gen
#: (1000 seeds, 2^14 x 8) and 0.71-1.03 for E_1, E_2 (120 seeds at 2^8 x 8, 24 at 2^10 x 8);
#: the 2.5-SE bar covers the pooled mean in 94.6 +- 0.7 % of e_gen runs
#: (tests/test_deep_aim_coverage.py)
COVERAGE = 2.5
#: the inner step is refined by sqrt(V2/V1) when V2 < V1, by at most this factor
MAX_REFINE = 3.0
#: (coarse, fine) inner steps, in units of sqrt(V1) (skip >= 1, and the line rule at skip < 1)
#: or of the graded rule (skip < 1, ``inner="graded"``)
INNER_STEPS = (0.35, 0.25)
#: the token designs: "shared" (one token set read by both layers, THEORY 1.6) and "independent"
#: (one token copy per layer)
DESIGNS = ("shared", "independent")
#: the inner rules for skip < 1 (docs/deep_aim.md, section 4, "Inner rule at c < 1"): "line": per
#: outer point the trapezoid in t = (xi - a)/sqrt(V1) of skip >= 1, and on the outer points whose
#: disc |t| <= INNER_RADIUS + LINE_MARGIN meets the curve det A = 0 a rule graded along each line
#: xi2 = const towards its crossing xi1*(xi2) (:func:`singular_crossing`), in log |distance| with a
#: step ~ sqrt(V2), so it follows a posterior of width sqrt(V) as V -> 0 (the default since
#: 2026-11-26); "graded" (the default before, kept selectable so that the c < 1 rows published
#: with it reproduce): the fixed rule of numerics/deep_aim.py graded towards det A = 0 and
#: reweighted from N(0, I) to N(a, V1 I), which does not follow a narrow posterior and is refused
#: below GRADED_V_MIN. skip >= 1 always uses the trapezoid (``inner`` is ignored there).
INNER_RULES = ("line", "graded")
#: the graded rule (skip < 1) is refused below this min(V1, V2) (:func:`graded_rule_resolves`)
GRADED_V_MIN = 0.05
#: the line rule grades each line down to this distance (in t) from its crossing of det A = 0
LINE_GRADE_MIN = 1e-7
#: outer points whose disc |t| <= INNER_RADIUS + LINE_MARGIN meets det A = 0 get the graded lines
LINE_MARGIN = 2.0
#: the step in log |d| near the crossing is min(step in t / 2, LINE_LOG_STEP h_in sqrt(V2)): the
#: fibre x1* = z1 / (sqrt 8 mu^2) gives the posterior a relative width ~ sqrt(V2) / (2 |x1|) in mu
LINE_LOG_STEP = 1.1
#: ... but not below this (the cost per outer point near det A = 0 grows like 1/step)
LINE_LOG_STEP_MIN = 0.004
#: the graded lines are built for blocks of outer points of about this many nodes in all
LINE_BLOCK = 2_000_000


@dataclass(frozen=True)
class DeepAimSE:
    """Two tied attention layers at T = 2 (THEORY 1.6): skip strength ``skip`` (c), rank ratios
    ``rho1``, ``rho2`` of the two targets, inverse temperature ``beta``; noiseless output.
    ``design``: "shared" (both layers read the same tokens, the deep attention of THEORY 1.6) or
    "independent" (one token copy per layer); it sets the outer law of every expectation (module
    docstring). ``inner``: the inner rule over H1's seen part at skip < 1 (:data:`INNER_RULES`;
    "line" by default, "graded" for the rows published with it; numerics only, the model is the
    same; ignored at skip >= 1)."""

    skip: float
    rho1: float
    rho2: float
    beta: float = 1.0
    design: str = "shared"
    inner: str = "line"

    def __post_init__(self) -> None:
        require(math.isfinite(self.skip) and self.skip >= 0, "skip", "a finite number >= 0",
                self.skip)
        for name in ("rho1", "rho2", "beta"):
            v = getattr(self, name)
            require(math.isfinite(v) and v > 0, name, "a finite number > 0", v)
        require(self.design in DESIGNS, "design", f"one of {DESIGNS}", self.design)
        require(self.inner in INNER_RULES, "inner", f"one of {INNER_RULES}", self.inner)

    @property
    def q0(self) -> tuple[float, float]:
        """(Q0_1, Q0_2) = (1 + rho1, 1 + rho2) (THEORY 1.1)."""
        return 1.0 + self.rho1, 1.0 + self.rho2

    @property
    def cross(self) -> float:
        """Covariance of the two layers' whitened truths (and means) per seen coordinate:
        sqrt(rho1 rho2) with shared tokens (the common part sqrt(rho_l) u), 0 otherwise."""
        return math.sqrt(self.rho1 * self.rho2) if self.design == "shared" else 0.0

    @property
    def q_min(self) -> tuple[float, float]:
        """The smallest overlaps the outer law admits: (rho1, rho2) with shared tokens (the mean
        carries the common part), (0, 0) otherwise."""
        return (self.rho1, self.rho2) if self.design == "shared" else (0.0, 0.0)


# ---------------------------------------------------------------- whitened coordinates

def whiten(omega: np.ndarray) -> np.ndarray:
    """(omega11, omega12, omega22) (last axis) -> the whitened seen pair
    ((o11 + o22 - 2 o12)/sqrt 8, (o11 - o22)/2)."""
    o = np.asarray(omega, dtype=float)
    return np.stack([(o[..., 0] + o[..., 2] - 2.0 * o[..., 1]) / SQRT8,
                     (o[..., 0] - o[..., 2]) / 2.0], axis=-1)


def unwhiten_gradient(g: np.ndarray) -> np.ndarray:
    """Gradient in the whitened seen pair -> (g11, g12, g22) = d log Z_out / d omega_ab (the
    unseen third whitened coordinate has zero gradient)."""
    g = np.asarray(g, dtype=float)
    return np.stack([g[..., 0] / SQRT8 + g[..., 1] / 2.0, -2.0 * g[..., 0] / SQRT8,
                     g[..., 0] / SQRT8 - g[..., 1] / 2.0], axis=-1)


def layer1_weights(xi1, xi2, *, skip: float, beta: float):
    """(mu, kappa) = (skip + p + r - 1, p - r) from H1's whitened seen coordinates
    (d1 = sqrt 2 xi1 + xi2, d2 = sqrt 2 xi1 - xi2; p, r the diagonal softmax weights)."""
    p = expit(beta * (SQRT2 * xi1 + xi2))
    r = expit(beta * (SQRT2 * xi1 - xi2))
    return skip + p + r - 1.0, p - r


def statistics(xi1, xi2, x1, x2, *, skip: float, beta: float):
    """z = (mu^2 X, mu ((1 + skip) Y + kappa X)) with X = sqrt 8 x1, Y = 2 x2."""
    mu, kappa = layer1_weights(xi1, xi2, skip=skip, beta=beta)
    x, y = SQRT8 * x1, 2.0 * x2
    return mu**2 * x, mu * ((1.0 + skip) * y + kappa * x)


def fibre_point(mu, kappa, z1, z2, *, skip: float):
    """The seen part of H2 fixed by H1 and z, whitened: x* = (z1/(sqrt 8 mu^2),
    (z2/mu - kappa z1/mu^2)/(2 (1 + skip)))."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        x = z1 / mu**2
        y = (z2 / mu - kappa * x) / (1.0 + skip)
    return x / SQRT8, y / 2.0


# ---------------------------------------------------------------- inner rule over xi

@lru_cache(maxsize=8)
def _trapezoid_t(h: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """2D trapezoid nodes t (|t| <= INNER_RADIUS) with N(0, I2) weights."""
    x = np.arange(-INNER_RADIUS, INNER_RADIUS + 0.5 * h, h)
    t1, t2 = (v.ravel() for v in np.meshgrid(x, x, indexing="ij"))
    keep = t1**2 + t2**2 <= INNER_RADIUS**2
    t1, t2 = t1[keep], t2[keep]
    return t1, t2, h * h * np.exp(-0.5 * (t1**2 + t2**2)) / (2.0 * math.pi)


def singular_crossing(xi2, *, skip: float, beta: float) -> np.ndarray:
    """xi1*(xi2), the point of the line xi2 = const where det A = 0 (mu = 0), skip in [0, 1):
    mu = skip + p + r - 1 increases with xi1, and with e = exp(beta sqrt 2 xi1), w = 2 cosh(beta xi2)
    the condition p + r = 1 - skip reads (1 + skip) e^2 + skip w e - (1 - skip) = 0, so
    e = 2 (1 - skip) / (skip w + sqrt(skip^2 w^2 + 4 (1 - skip^2))) (docs/deep_aim.md, step 1)."""
    c = skip
    w = 2.0 * np.cosh(np.clip(beta * np.asarray(xi2, float), -300.0, 300.0))
    e = 2.0 * (1.0 - c) / (c * w + np.sqrt((c * w) ** 2 + 4.0 * (1.0 - c * c)))
    return np.log(e) / (beta * SQRT2)


@lru_cache(maxsize=8)
def _line_offsets(ht: float, hu: float) -> tuple[np.ndarray, np.ndarray]:
    """Signed offsets d from a line's crossing and their weights: d = +-lam softplus(u/lam'),
    written d = +-lam log(1 + e^u) with lam = ht/hu, u on a trapezoid of step hu from
    d = LINE_GRADE_MIN to 2 INNER_RADIUS + LINE_MARGIN: spacing ht far from the crossing (the
    trapezoid in t) and hu in log |d| near it."""
    lam = ht / hu
    lo = math.log(LINE_GRADE_MIN / lam)
    hi = math.log(math.expm1((2.0 * INNER_RADIUS + LINE_MARGIN) / lam))
    u = np.arange(lo, hi + 0.5 * hu, hu)
    d, dd = lam * np.log1p(np.exp(u)), lam * hu * expit(u)
    return np.concatenate([-d[::-1], d]), np.concatenate([dd[::-1], dd])


def _inner_step(h_in: float, v1: float, v2: float) -> float:
    """The step in t: h_in refined by sqrt(V2/V1) when V2 < V1 (the fibre likelihood has width
    ~ sqrt(V2) in xi), at most MAX_REFINE times (beyond, the two-step rule error grows and shows
    in the bars)."""
    return h_in * max(min(1.0, math.sqrt(v2 / v1)), 1.0 / MAX_REFINE)


def _nodes(model: DeepAimSE, a1, a2, v1: float, v2: float, h_in: float):
    """Yields groups (rows, xi1, xi2, logw, mu, kappa): for the outer points ``rows`` (indices) the
    inner nodes xi (columns), their log-weights for N(a, V1 I) and (mu, kappa). skip >= 1: one
    group, the trapezoid in t = (xi - a)/sqrt(V1). skip < 1, ``model.inner`` "line": the
    trapezoid for outer points whose disc |t| <= INNER_RADIUS + LINE_MARGIN stays clear of
    det A = 0, the graded lines (:func:`_line_nodes`) for the others; "graded": the fixed rule
    of numerics/deep_aim.py, reweighted."""
    c, beta = model.skip, model.beta
    a1, a2 = np.asarray(a1, float), np.asarray(a2, float)
    s = math.sqrt(v1)
    ht = _inner_step(h_in, v1, v2)
    rows = np.arange(a1.size)
    if c < 1.0 and model.inner == "graded":
        # nodes of the graded (mu, kappa) rule, whose weights carry N(xi; 0, I2); reweight to
        # N(xi; a, V1 I2)
        mu0, kappa0, x1, x2, w0 = _rule_cached("tanh-sinh-mu", h_in, c, beta)
        xi1 = np.broadcast_to(x1[None, :], (a1.size, x1.size))
        xi2 = np.broadcast_to(x2[None, :], (a1.size, x1.size))
        logw = (np.log(w0)[None, :] + 0.5 * (x1**2 + x2**2)[None, :]
                - ((xi1 - a1[:, None]) ** 2 + (xi2 - a2[:, None]) ** 2) / (2.0 * v1)
                - math.log(v1))
        mu = np.broadcast_to(mu0[None, :], xi1.shape)
        kappa = np.broadcast_to(kappa0[None, :], xi1.shape)
        yield rows, xi1, xi2, logw, mu, kappa
        return
    near = np.zeros(a1.size, bool)
    if c < 1.0:
        # lines xi2 = const at the unrefined step: the posterior's width along det A = 0 is set
        # by x2 (kappa), wide on this scale; across, the offsets resolve it (:func:`_line_nodes`)
        t2 = np.arange(-INNER_RADIUS, INNER_RADIUS + 0.5 * h_in, h_in)
        t1s = (singular_crossing(a2[:, None] + s * t2[None, :], skip=c, beta=beta)
               - a1[:, None]) / s
        near = np.any(t1s**2 + t2[None, :] ** 2 <= (INNER_RADIUS + LINE_MARGIN) ** 2, axis=1)
        hu = max(min(0.5 * ht, LINE_LOG_STEP * h_in * math.sqrt(v2)), LINE_LOG_STEP_MIN)
        idx = rows[near]
        per = t2.size * _line_offsets(ht, hu)[0].size
        block = max(1, int(LINE_BLOCK // per))
        # blocks of outer points (memory: about LINE_BLOCK nodes per block), made when needed
        for st in range(0, idx.size, block):
            sl = idx[st:st + block]
            yield _line_nodes(model, a1[sl], a2[sl], t1s[sl], t2, s, ht, sl, hu)
    if not near.all():
        t1, t2, w = _trapezoid_t(ht)
        far = rows[~near]
        xi1 = a1[far, None] + s * t1[None, :]
        xi2 = a2[far, None] + s * t2[None, :]
        logw = np.broadcast_to(np.log(w)[None, :], xi1.shape)
        mu, kappa = layer1_weights(xi1, xi2, skip=c, beta=beta)
        yield far, xi1, xi2, logw, mu, kappa


def _line_nodes(model: DeepAimSE, a1, a2, t1s, t2, s: float, ht: float, rows,
               hu: float | None = None) -> tuple:
    """The graded-line rule (skip < 1): on each line t2 = const of the trapezoid in t, nodes
    t1 = t1*(t2) + d at the offsets of :func:`_line_offsets` (step ht) from the line's crossing
    t1* of det A = 0 (clipped to |t1*| <= INNER_RADIUS + 1), kept inside |t| <= INNER_RADIUS
    (the others get weight 0). mu vanishes linearly across the crossing (d mu / d xi1 =
    beta sqrt 2 (p (1 - p) + r (1 - r)) >= beta sqrt 2 c (1 - c) on p + r = 1 - c), so the walls
    exp(-z1^2/(16 mu^4)) of the fibre are resolved at every scale down to LINE_GRADE_MIN."""
    d, dd = _line_offsets(ht, 0.5 * ht if hu is None else hu)
    t1c = np.clip(t1s, -INNER_RADIUS - 1.0, INNER_RADIUS + 1.0)
    t1 = (t1c[:, :, None] + d[None, None, :]).reshape(a1.size, -1)
    tt2 = np.broadcast_to(t2[None, :, None], (a1.size, t2.size, d.size)).reshape(a1.size, -1)
    r2 = t1**2 + tt2**2
    with np.errstate(divide="ignore"):
        logw = np.where(r2 <= INNER_RADIUS**2,
                        np.log((t2[1] - t2[0]) * np.tile(dd, t2.size))[None, :] - 0.5 * r2
                        - math.log(2.0 * math.pi), -np.inf)
    xi1, xi2 = a1[:, None] + s * t1, a2[:, None] + s * tt2
    mu, kappa = layer1_weights(xi1, xi2, skip=model.skip, beta=model.beta)
    return rows, xi1, xi2, logw, mu, kappa


def posterior(model: DeepAimSE, z1, z2, a1, a2, b1, b2, v1: float, v2: float, h_in: float,
              c12: float = 0.0):
    """log Z_out, the posterior means E[xi - a | z], E[x* - b | z], the traces of the posterior
    covariances of xi and of x* and of their cross-covariance, for rows of outer points.
    ``c12``: covariance of the two layers' deviations per whitened coordinate (0 in the SE with
    one overlap per layer; -q'_12 with a cross-overlap, :func:`cross_overlap_effect`): given xi,
    x ~ N(b + (c12/V1)(xi - a), V2 - c12^2/V1)."""
    k, v2c = c12 / v1, v2 - c12 * c12 / v1
    require(v2c > 0, "c12", "c12^2 < V1 V2", c12)
    args = [np.asarray(x, float) for x in (z1, z2, a1, a2, b1, b2)]
    out: dict[str, np.ndarray] = {}
    for rows, *nodes in _nodes(model, args[2], args[3], v1, v2, h_in):
        part = _posterior_rows(model, *(x[rows] for x in args), nodes, k, v2c)
        for key, val in part.items():
            if key not in out:
                out[key] = np.empty((args[2].size,) + val.shape[1:])
            out[key][rows] = val
    if not out:                              # no outer points
        out = {key: np.zeros((0, 2) if key in ("d_xi", "d_x") else 0)
               for key in ("log_z_out", "d_xi", "d_x", "tr_cov_xi", "tr_cov_x", "tr_cov_cross")}
    return out


def _posterior_rows(model: DeepAimSE, z1, z2, a1, a2, b1, b2, nodes, k: float,
                    v2c: float) -> dict[str, np.ndarray]:
    """:func:`posterior` on one group of outer points with their inner nodes (:func:`_nodes`);
    ``k`` = c12/V1, ``v2c`` = V2 - c12^2/V1."""
    xi1, xi2, logw, mu, kappa = nodes
    a1, a2 = a1[:, None], a2[:, None]
    z1, z2 = z1[:, None], z2[:, None]
    b1, b2 = b1[:, None], b2[:, None]
    x1, x2 = fibre_point(mu, kappa, z1, z2, skip=model.skip)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        c1, c2 = (b1 + k * (xi1 - a1), b2 + k * (xi2 - a2)) if k else (b1, b2)
        logl = (logw - ((x1 - c1) ** 2 + (x2 - c2) ** 2) / (2.0 * v2c) - 3.0 * np.log(np.abs(mu))
                - math.log(2.0 * math.pi * v2c * 4.0 * SQRT2 * (1.0 + model.skip)))
    logl = np.where(np.isfinite(logl), logl, -np.inf)
    top = logl.max(axis=1, keepdims=True)
    e = np.exp(logl - top)
    n = e.sum(axis=1)
    x1, x2 = np.nan_to_num(x1), np.nan_to_num(x2)

    def mean(f):
        return (f * e).sum(axis=1) / n

    m = [mean(xi1), mean(xi2), mean(x1), mean(x2)]

    def var(f, mf):
        return mean((f - mf[:, None]) ** 2)

    def cov(f, mf, g, mg):
        return mean((f - mf[:, None]) * (g - mg[:, None]))

    return {"log_z_out": np.log(n) + top[:, 0],
            "d_xi": np.stack([m[0] - a1[:, 0], m[1] - a2[:, 0]], axis=-1),
            "d_x": np.stack([m[2] - b1[:, 0], m[3] - b2[:, 0]], axis=-1),
            "tr_cov_xi": var(xi1, m[0]) + var(xi2, m[1]),
            "tr_cov_x": var(x1, m[2]) + var(x2, m[3]),
            "tr_cov_cross": cov(xi1, m[0], x1, m[2]) + cov(xi2, m[1], x2, m[3])}


def z_out(z1, z2, *, model: DeepAimSE, a, b, v1: float, v2: float,
          h_in: float = INNER_STEPS[1]) -> dict[str, np.ndarray]:
    """Z_out(z | a, b, V1, V2) (the density of z) and g_1 = grad_a log Z_out, g_2 = grad_b log Z_out
    in whitened coordinates (shape (n, 2)); ``a``, ``b``: arrays (n, 2) or (2,) of whitened means
    of the seen parts of H1 and H2 (see :func:`whiten`). THEORY 1.6; module docstring."""
    require(v1 > 0 and math.isfinite(v1), "V1", "a finite number > 0", v1)
    require(v2 > 0 and math.isfinite(v2), "V2", "a finite number > 0", v2)
    z1, z2 = np.atleast_1d(np.asarray(z1, float)), np.atleast_1d(np.asarray(z2, float))
    n = max(z1.size, z2.size)
    a = np.broadcast_to(np.asarray(a, float), (n, 2))
    b = np.broadcast_to(np.asarray(b, float), (n, 2))
    z1, z2 = np.broadcast_to(z1, (n,)), np.broadcast_to(z2, (n,))
    p = posterior(model, z1, z2, a[:, 0], a[:, 1], b[:, 0], b[:, 1], v1, v2, h_in)
    return {"z_out": np.exp(p["log_z_out"]), "log_z_out": p["log_z_out"],
            "g1": p["d_xi"] / v1, "g2": p["d_x"] / v2}


def z_out_mc(z1: float, z2: float, *, model: DeepAimSE, a, b, v1: float, v2: float,
             samples: int = 200_000, seed: int = 0) -> Estimate:
    """Z_out(z) by seeded plain Monte Carlo over xi ~ N(a, V1 I) (independent route), with its
    standard error."""
    rng = np.random.default_rng(seed)
    s = rng.standard_normal((2, samples))
    xi1, xi2 = a[0] + math.sqrt(v1) * s[0], a[1] + math.sqrt(v1) * s[1]
    mu, kappa = layer1_weights(xi1, xi2, skip=model.skip, beta=model.beta)
    x1, x2 = fibre_point(mu, kappa, z1, z2, skip=model.skip)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        f = (np.exp(-((x1 - b[0]) ** 2 + (x2 - b[1]) ** 2) / (2.0 * v2))
             / (2.0 * math.pi * v2 * 4.0 * SQRT2 * (1.0 + model.skip) * np.abs(mu) ** 3))
    f = np.nan_to_num(f, nan=0.0, posinf=0.0)
    return mean_estimate(f, "monte carlo over xi (standard error)", samples=samples, seed=seed)


# ---------------------------------------------------------------- output side of the SE

def _sobol_normals(m: int, scrambles: int, seed: int, d: int = 8) -> np.ndarray:
    """(scrambles, 2^m, d) standard normals from independently scrambled Sobol sequences."""
    out = []
    for s in range(scrambles):
        key = [seed, s] if d == 8 else [seed, s, d]
        u = qmc.Sobol(d=d, scramble=True, seed=np.random.default_rng(key)).random_base2(m)
        out.append(ndtri(np.clip(u, 1e-300, 1.0 - 2.0**-53)))
    return np.stack(out)


#: the estimators of E_l = E|g_l|^2 (docs/deep_aim.md, "Finite width"): "variance" (default):
#: (2 V_l - E tr Cov_l[. | z]) / V_l^2 on points drawn truths first; "legacy": |E[. | z]|^2 / V_l^2
#: on points drawn means first (the estimator before issue 17)
ESTIMATORS = ("variance", "legacy")


def psd_cholesky(cov: np.ndarray) -> np.ndarray:
    """Lower-triangular L with L L^T = cov for a positive semi-definite cov (a zero pivot, up to
    rounding, gives a zero column: degenerate laws such as q_l = rho_l with shared tokens)."""
    cov = np.asarray(cov, dtype=float)
    n = cov.shape[0]
    L = np.zeros_like(cov)
    scale = max(float(np.max(np.abs(np.diag(cov)))), 1e-300)
    for j in range(n):
        d = cov[j, j] - L[j, :j] @ L[j, :j]
        require(d >= -1e-10 * scale, "overlaps", "a positive semi-definite outer law", d)
        if d <= 1e-13 * scale:
            continue
        L[j, j] = math.sqrt(d)
        L[j + 1:, j] = (cov[j + 1:, j] - L[j + 1:, :j] @ L[j, :j]) / L[j, j]
    return L


def mean_pair_cholesky(*, q1: float, q2: float, cross: float) -> np.ndarray:
    """The 2 x 2 square root of the law of one whitened coordinate of the means (a_k, b_k):
    variances q1, q2, covariance ``cross`` (sqrt(rho1 rho2) with shared tokens)."""
    return psd_cholesky(np.array([[q1, cross], [cross, q2]]))


def outer_covariance(model: DeepAimSE, *, q1: float, q2: float, q12: float = 0.0) -> np.ndarray:
    """The 4 x 4 covariance of one whitened seen coordinate of (x, xi, a, b) (truths of layer 2
    and 1, then the means) at overlaps (q1, q2): Var = (Q0_2, Q0_1, q1, q2), Cov(xi, a) = q1,
    Cov(x, b) = q2, every cross-layer covariance ``model.cross`` (module docstring). The two
    coordinates are independent and identically distributed. ``q12``: a cross-overlap q'_12 of
    the fluctuating parts (neglected by the SE; :func:`cross_overlap_effect`) adds q12 to the
    cross-layer covariances that involve a mean (Nishimori), so the deviations xi - a, x - b
    get covariance -q12."""
    (qa, qb), r = model.q0, model.cross
    s = r + q12
    return np.array([[qb, r, s, q2], [r, qa, q1, s], [s, q1, q1, s], [q2, s, s, q2]])


def _outer_points(model: DeepAimSE, q1: float, q2: float, u: np.ndarray, estimator: str,
                  q12: float = 0.0):
    """Standard normals (rows, 8) -> whitened means a, b and the truth's deviations e1 = xi - a,
    e2 = x - b. "variance": truths first, the Cholesky factor of :func:`outer_covariance` in the
    order (x, xi, a, b), column k (0, 1) of x, xi, a, b from normals k, 2 + k, 4 + k, 6 + k (with
    independent tokens: x ~ N(0, Q0_2 I), xi ~ N(0, Q0_1 I), a = (q1/Q0_1) xi + N(0, q1 V1/Q0_1 I),
    b likewise; an orthogonal rotation of the "legacy" columns: same law). It puts the kink of the
    integrand at x_1 = 0 (z1 = 0, where the small-mu part of H1 is no longer suppressed) on one
    coordinate axis. "legacy": means first, (a, b) from :func:`mean_pair_cholesky` on normals
    0-3, deviations sqrt(V_l) times normals 4-7."""
    (v1, v2) = (model.q0[0] - q1, model.q0[1] - q2)
    if estimator == "legacy":
        L = mean_pair_cholesky(q1=q1, q2=q2, cross=model.cross)
        a = L[0, 0] * u[:, 0:2]
        b = L[1, 0] * u[:, 0:2] + L[1, 1] * u[:, 2:4]
        return a, b, math.sqrt(v1) * u[:, 4:6], math.sqrt(v2) * u[:, 6:8]
    L = psd_cholesky(outer_covariance(model, q1=q1, q2=q2, q12=q12))
    w = [u[:, 2 * j:2 * j + 2] for j in range(4)]
    x, xi, a, b = (sum(L[i, j] * w[j] for j in range(i + 1)) for i in range(4))
    return a, b, xi - a, x - b


def _output_sums(model: DeepAimSE, q1: float, q2: float, h_in: float, normals: np.ndarray,
                 chunk: int = 256, estimator: str = "variance") -> np.ndarray:
    """Per scramble (rows) the RQMC means of: columns 0, 1 the chosen estimator of E_l = E|g_l|^2;
    2, 3 the Nishimori forms (xi_true - a).E[xi - a|z]/V1^2, (x_true - b).E[x* - b|z]/V2^2;
    4 log Z_out(z) (Psi_out, THEORY 1.1); 5, 6 the mean-square forms |E[xi - a|z]|^2/V1^2,
    |E[x* - b|z]|^2/V2^2; 7, 8 the variance forms (2 V_l - tr Cov_l[.|z])/V_l^2. All three forms
    have the mean E_l (law of total variance: E|truth - mean|^2 = 2 V_l); the variance form has
    10 to 35 times less variance per point (the posterior variance is bounded and smooth in z).
    Columns 9-11: the cross term E[g_1 . g_2] in three forms, -E tr Cov[xi, x* | z]/(V1 V2)
    (variance form: the truth's deviations are independent across layers), the symmetrised
    Nishimori form ((xi_true - a).E[x* - b|z] + (x_true - b).E[xi - a|z])/(2 V1 V2) and the mean
    square E[xi - a|z].E[x* - b|z]/(V1 V2)."""
    require(estimator in ESTIMATORS, "estimator", f"one of {ESTIMATORS}", estimator)
    v1, v2 = model.q0[0] - q1, model.q0[1] - q2
    r, n, _ = normals.shape
    out = np.zeros((r, 12))
    for k in range(r):
        acc = np.zeros(12)
        for st in range(0, n, chunk):
            a, b, e1, e2 = _outer_points(model, q1, q2, normals[k, st:st + chunk], estimator)
            z1, z2 = statistics(a[:, 0] + e1[:, 0], a[:, 1] + e1[:, 1], b[:, 0] + e2[:, 0],
                                b[:, 1] + e2[:, 1], skip=model.skip, beta=model.beta)
            p = posterior(model, z1, z2, a[:, 0], a[:, 1], b[:, 0], b[:, 1], v1, v2, h_in)
            ms = [np.sum(p["d_xi"] ** 2), np.sum(p["d_x"] ** 2)]
            var = [np.sum(2.0 * v1 - p["tr_cov_xi"]), np.sum(2.0 * v2 - p["tr_cov_x"])]
            cross = [-np.sum(p["tr_cov_cross"]),
                     0.5 * (np.sum(e1 * p["d_x"]) + np.sum(e2 * p["d_xi"])),
                     np.sum(p["d_xi"] * p["d_x"])]
            acc += [*(var if estimator == "variance" else ms), np.sum(e1 * p["d_xi"]),
                    np.sum(e2 * p["d_x"]), np.sum(p["log_z_out"]), *ms, *var, *cross]
        out[k] = acc / n / np.array([v1 * v1, v2 * v2, v1 * v1, v2 * v2, 1.0,
                                     v1 * v1, v2 * v2, v1 * v1, v2 * v2, v1 * v2, v1 * v2,
                                     v1 * v2])
    return out


#: the names of the columns of :func:`_output_sums`
OUTPUT_COLUMNS = ("E1", "E2", "nishimori_1", "nishimori_2", "psi_out", "mean_square_1",
                  "mean_square_2", "variance_1", "variance_2", "cross", "cross_nishimori",
                  "cross_mean_square")


def output_overlaps(model: DeepAimSE, *, q1: float, q2: float, m: int = 10, scrambles: int = 8,
                    seed: int = 0, steps: tuple[float, float] = INNER_STEPS,
                    estimator: str = "variance") -> dict[str, Estimate]:
    """E_l = E|g_l|^2 = E[sum_{a<=b} (1 + delta_ab) (g^l_ab)^2] for l = 1, 2 at overlaps (q1, q2)
    (THEORY 1.6), randomised QMC over 8 dimensions (2^m points x ``scrambles``) of the estimator
    ``estimator`` (:data:`ESTIMATORS`). Error = COVERAGE standard errors over scrambles +
    |fine - coarse| of the inner rule (``steps``, same points). Also the other unbiased forms of
    E_l on the same points, ``mean_square_l`` = E|E[h - omega|z]|^2/V_l^2, ``variance_l`` =
    (2 V_l - E tr Cov_l)/V_l^2 and ``nishimori_l`` = E[(h_true - omega).g_l]/V_l, all equal to E_l
    for the exact posterior, and
    ``psi_out`` = Psi_out(q1, q2) = E log Z_out(z) (THEORY 1.1; Z_out the density of z, see
    :func:`free_entropy`); the cross term E[g_1 . g_2] (2 alpha times it is q_hat_12, the conjugate
    of the neglected cross-overlap; module docstring) in its three forms, ``cross`` (variance
    form), ``cross_nishimori`` and ``cross_mean_square``."""
    _check_q(model, q1, q2)
    _check_inner(model, q1, q2)
    normals = _sobol_normals(m, scrambles, seed)
    t0 = time.perf_counter()
    coarse = _output_sums(model, q1, q2, steps[0], normals, estimator=estimator)
    fine = _output_sums(model, q1, q2, steps[1], normals, estimator=estimator)
    secs = time.perf_counter() - t0
    return {name: refined_estimate(
        fine[:, i], coarse[:, i], coverage=COVERAGE,
        method="randomised QMC (scrambled Sobol) + inner trapezoid, two steps", points=2**m,
        scrambles=scrambles, seconds=secs, estimator=estimator)
        for i, name in enumerate(OUTPUT_COLUMNS)}


def _check_q(model: DeepAimSE, q1: float, q2: float, closed: bool = False) -> None:
    """q_l in [q_min_l, Q0_l) (``closed``: Q0_l allowed); q_min_l = rho_l with shared tokens, up
    to 1e-12 (the mean carries the common part), else 0."""
    for name, q, q0, lo in (("q1", q1, model.q0[0], model.q_min[0]),
                            ("q2", q2, model.q0[1], model.q_min[1])):
        inside = lo - 1e-12 <= q <= q0 if closed else lo - 1e-12 <= q < q0
        require(math.isfinite(q) and inside, name,
                f"in [{lo:g}, Q0 = {q0:g}{']' if closed else ')'}"
                + (" (shared tokens: q_l >= rho_l)" if lo > 0 else ""), q)


def graded_rule_resolves(model: DeepAimSE, v1: float, v2: float) -> bool:
    """False where the graded inner rule (skip < 1, ``inner="graded"``) is refused: min(V1, V2)
    below GRADED_V_MIN, where its nodes, fixed in xi, no longer follow the posterior
    (docs/deep_aim.md section 4, "Inner rule at c < 1"). Always True for skip >= 1 or the line
    rule."""
    return model.skip >= 1.0 or model.inner != "graded" or min(v1, v2) >= GRADED_V_MIN


def _check_inner(model: DeepAimSE, q1: float, q2: float) -> None:
    """Refuse the graded inner rule below its resolved range (:func:`graded_rule_resolves`)."""
    v1, v2 = model.q0[0] - q1, model.q0[1] - q2
    require(graded_rule_resolves(model, v1, v2), "inner",
            f"'line' at skip < 1 when min(V1, V2) < {GRADED_V_MIN:g} (the graded rule does not "
            f"follow a narrow posterior; here V = ({v1:.3g}, {v2:.3g}))", model.inner)


# ---------------------------------------------------------------- the SE map and fixed points

def _prior_step(q_hat: float, rho: float) -> float:
    """mmse_rho(1/q_hat) (THEORY 1.1); 1 at q_hat = 0."""
    return 1.0 if q_hat <= 0 else float(wishart.mmse(1.0 / q_hat, rho=rho))


def se_map(model: DeepAimSE, *, alpha: float, q1: float, q2: float, m: int = 10,
           scrambles: int = 8, seed: int = 0, h_in: float = INNER_STEPS[1],
           estimator: str = "variance") -> dict[str, np.ndarray]:
    """One SE step (THEORY 1.6) per scramble: q_hat_l = 2 alpha E|g_l|^2 and the new mmse_l; arrays
    over scrambles (their mean is the RQMC estimate)."""
    _check_alpha(alpha)
    _check_q(model, q1, q2)
    _check_inner(model, q1, q2)
    sums = _output_sums(model, q1, q2, h_in, _sobol_normals(m, scrambles, seed),
                        estimator=estimator)
    return _prior_side(model, alpha, sums[:, 0], sums[:, 1])


def _prior_side(model, alpha, e1, e2):
    qh1, qh2 = 2.0 * alpha * np.asarray(e1), 2.0 * alpha * np.asarray(e2)
    m1 = np.array([_prior_step(v, model.rho1) for v in np.atleast_1d(qh1)])
    m2 = np.array([_prior_step(v, model.rho2) for v in np.atleast_1d(qh2)])
    return {"q_hat1": qh1, "q_hat2": qh2, "mmse1": m1, "mmse2": m2}


def _check_alpha(alpha: float) -> None:
    require(math.isfinite(alpha) and alpha > 0, "alpha", "a finite number > 0", alpha)


def perfect_recovery_alpha(model: DeepAimSE) -> float:
    """alpha_PR = (c(rho1) + c(rho2)) / 4, c(rho) = 2 rho - rho^2 (rho <= 1) or 1: the alpha above
    which V1 = V2 = 0 is a stable fixed point (docs/deep_aim.md, "Finite width": near V = 0 the
    fibre is linear, V1 E_1 + V2 E_2 = 2, and mmse_rho(Delta) ~ c(rho) Delta)."""
    def c(rho):
        return 2.0 * rho - rho * rho if rho <= 1 else 1.0
    return (c(model.rho1) + c(model.rho2)) / 4.0


def _map_mean(model, alpha, v, normals, h_in, estimator="variance"):
    q1, q2 = model.q0[0] - v[0], model.q0[1] - v[1]
    sums = _output_sums(model, q1, q2, h_in, normals, estimator=estimator)
    e = sums[:, :2].mean(axis=0)
    p = _prior_side(model, alpha, [e[0]], [e[1]])
    return np.array([p["mmse1"][0], p["mmse2"][0]]), sums


def fixed_point(model: DeepAimSE, *, alpha: float, v_init: tuple[float, float], m: int = 10,
                scrambles: int = 8, seed: int = 0, tol: float = 1e-7, max_iter: int = 60,
                v_floor: float = 1e-7, steps: tuple[float, float] = INNER_STEPS,
                estimator: str = "variance", cross_term: bool = True,
                progress: Callable[[int, list[float], float], None] | None = None) -> dict:
    """The SE fixed point (V1, V2) = (mmse_1, mmse_2) reached from ``v_init`` (THEORY 1.6), with
    the RQMC point set held fixed (so the map is deterministic): plain iteration until the step is
    below 5 % of V, or both V_l shrink by steady factors below 1 (geometric approach to V = 0),
    or 12 steps, then chord-Newton steps on V - F(V) (Jacobian by central
    differences, refreshed every 4 steps). Both V_l below ``v_floor`` is reported as the
    perfect-recovery fixed point V = 0 (stable iff alpha > alpha_PR). Errors:
    COVERAGE RQMC standard errors over scrambles and the inner-rule difference, each propagated
    through (I - J)^-1, plus the distance to the root (I - J)^-1 (F(V) - V). With the line rule at
    skip < 1 the chord-Newton steps stop below ``tol`` or :data:`FIXED_POINT_TOL_REL` x V.
    ``estimator``: the form of E_l (:data:`ESTIMATORS`;
    "variance" by default, 6 to 9 times smaller bars at equal cost). Returns a plain dict: per
    layer q, q_hat, mmse and their errors, stability (Jacobian eigenvalues), iterations, seconds;
    ``phi``, ``psi_out`` (free entropy, :func:`free_entropy`), ``e_gen`` and ``e_gen_plugin``
    (:func:`generalisation_error`, the fixed point's error propagated), each with ``_error``. At
    perfect recovery phi is None (``phi_limit`` "+inf" when stable) and e_gen = 0. Finite
    points also carry ``q_hat_12`` = 2 alpha E[g_1 . g_2] (variance form; ``q_hat_12_nishimori``,
    ``q_hat_12_mean_square`` beside it) and ``cross_correlation`` = q_hat_12 / sqrt(q_hat_1
    q_hat_2), each with ``_error``: the conjugate of the cross-overlap the SE neglects, zero for
    independent tokens and not for shared ones (module docstring; :func:`cross_overlap_effect`),
    the map's ``jacobian`` and the ``design``. ``cross_term`` (shared tokens only): add the
    cross-overlap's first-order term to the mmse, q, e_gen and Phi bars
    (:func:`add_cross_overlap_term`, reported under ``cross_overlap``). ``progress(k, v,
    residual)``, if given, is called after each map evaluation of the iteration (k = 1, 2, ...;
    v the current (V1, V2), residual max |F(V) - V|): a hook for long runs (c < 1)."""
    _check_alpha(alpha)
    for v in v_init:
        require(0 < v <= 1, "v_init", "pairs in (0, 1]", v_init)
    require(graded_rule_resolves(model, *v_init), "v_init",
            f"pairs >= {GRADED_V_MIN:g} with the graded inner rule at skip < 1 (or inner='line')",
            v_init)
    require(estimator in ESTIMATORS, "estimator", f"one of {ESTIMATORS}", estimator)
    t0 = time.perf_counter()
    normals = _sobol_normals(m, scrambles, seed)
    h = steps[1]
    v = np.array(v_init, float)
    apr = perfect_recovery_alpha(model)
    history, jac, since, plain = [], None, 0, True
    step = np.ones(2)
    rel_tol = FIXED_POINT_TOL_REL if model.skip < 1.0 and model.inner == "line" else 0.0
    for _ in range(max_iter):
        fv, _ = _map_mean(model, alpha, v, normals, h, estimator)
        history.append(v.tolist())
        step = fv - v
        if progress is not None:
            progress(len(history), v.tolist(), float(np.max(np.abs(step))))
        if plain and (np.all(np.abs(step) < 0.05 * v) or len(history) >= 12
                      or _geometric_to_zero(history + [fv.tolist()])):
            plain = False
        if plain:
            vn = np.clip(fv, 1e-300, 1.0)
        else:
            if jac is None or since >= 4:
                jac, since = _jacobian(model, alpha, v, normals, h, fv, estimator=estimator), 0
            since += 1
            try:
                dv = np.linalg.solve(np.eye(2) - jac, step)
            except np.linalg.LinAlgError:
                dv = step
            vn = np.clip(v + dv, 0.05 * v, np.minimum(1.0, 2.0 * v))
        if not graded_rule_resolves(model, *vn):
            raise ConvergenceError(
                f"deep AIM SE at skip < 1 left the graded inner rule's range (min V >= "
                f"{GRADED_V_MIN:g}); use DeepAimSE(inner='line'), the default",
                last_iterate=vn.tolist(),
                residual=float(np.max(np.abs(step))))
        if np.all(vn < v_floor):
            return _pr_result(model, alpha, apr, v_init, history + [vn.tolist()],
                              time.perf_counter() - t0)
        done = bool(np.all(np.abs(vn - v) < np.maximum(tol, (not plain) * rel_tol * v)))
        v = vn
        if done:
            break
    else:
        raise ConvergenceError("deep AIM SE did not converge", last_iterate=v.tolist(),
                               residual=float(np.max(np.abs(step))))
    res = _finite_result(model, alpha, v, normals, steps, v_init, len(history), t0, seed,
                         estimator)
    if cross_term and model.design == "shared":
        res = add_cross_overlap_term(model, res, m=m, scrambles=scrambles, seed=seed)
    return res


def _geometric_to_zero(history: list, rel: float = 0.03) -> bool:
    """The last three plain steps shrink both V_l by factors below 1 that agree within ``rel``."""
    if len(history) < 4:
        return False
    h = np.array(history[-4:])
    f = h[1:] / h[:-1]
    return bool(np.all(f < 1) and np.all(np.abs(f[1:] - f[:-1]) < rel * f[1:]))


#: the relative step of :func:`branch_point`'s Jacobian differences. At V ~ 1e-3 the line rule's
#: map jumps in V2 on small scales (its log step follows sqrt(V2)): at c = 0.1, V = (0.003,
#: 0.00085), 2^5 x 8, dF_2/dV_2 is -1.35 with the step 1e-4 of :func:`fixed_point`, 0.81, 0.84,
#: 0.82 with 3e-3, 2e-2, 5e-2 (docs/deep_aim.md, "The branch with alpha as an output")
BRANCH_JAC_REL = 0.05

#: the relative step of the central differences of the map's Jacobian in :func:`fixed_point`
#: and its bars: (the line rule at skip < 1, otherwise). At skip < 1 the line rule's map jumps in V2 on small
#: scales (its inner step follows sqrt(V2)), so 1e-4 gave wrong derivatives there: at c = 0.1,
#: alpha = 0.35, V = (0.0589, 0.0196) (2^5 x 8) dF_2/dV_2 = 0.436 at 1e-4 against 0.839, 0.802,
#: 0.797 at 3e-3, 2e-2, 5e-2, and the larger eigenvalue 0.80 against 0.93-0.94, so the bars,
#: propagated through (I - J)^-1, were 2-3 times too small (docs/deep_aim.md, "The Jacobian step
#: at skip < 1"). At c = 1, alpha = 0.3 the steps 1e-4 and 3e-3 agree to 1e-3.
FIXED_POINT_JAC_REL = (BRANCH_JAC_REL, 1e-4)
#: the relative step below which :func:`fixed_point` stops with the line rule at skip < 1 (else
#: ``tol`` alone): the map's small jumps in V2, amplified by (I - J)^-1, keep the chord-Newton
#: iterates in a box instead of converging (c = 0.1, alpha = 0.35, 2^5 x 8: mmse_1 wandered in
#: [0.05880, 0.05918] for 40 iterations, steps 3e-7 to 3.7e-4, against the bar 0.0092). The
#: remaining distance to the root, (I - J)^-1 (F(V) - V), is in the bar.
FIXED_POINT_TOL_REL = 1e-3


def _jacobian(model, alpha, v, normals, h, fv, rel: float | None = None, estimator="variance"):
    if rel is None:
        rel = FIXED_POINT_JAC_REL[not (model.skip < 1.0 and model.inner == "line")]
    jac = np.zeros((2, 2))
    for j in range(2):
        d = rel * v[j]
        vp, vm = v.copy(), v.copy()
        vp[j] = min(v[j] + d, 1.0)          # mmse <= 1 (q_l >= rho_l, needed by shared tokens)
        vm[j] -= d
        jac[:, j] = (_map_mean(model, alpha, vp, normals, h, estimator)[0]
                     - _map_mean(model, alpha, vm, normals, h, estimator)[0]) / (vp[j] - vm[j])
    return jac


def _finite_result(model, alpha, v, normals, steps, v_init, iterations, t0, seed,
                   estimator="variance", pre=None, v_error=None) -> dict:
    """The result dict of a finite fixed point (:func:`fixed_point`). ``pre``: the (fv, sums,
    sums_c, jac) already computed at v (:func:`branch_point`); ``v_error``: the mmse bars to use
    instead of the fixed-alpha propagation through (I - J)^-1 (with ``standard_error`` and
    ``rule_error`` the pair (se, rule) it is made of)."""
    if pre is None:
        fv, sums = _map_mean(model, alpha, v, normals, steps[1], estimator)
        _, sums_c = _map_mean(model, alpha, v, normals, steps[0], estimator)
        jac = _jacobian(model, alpha, v, normals, steps[1], fv, estimator=estimator)
    else:
        fv, sums, sums_c, jac = pre
    if v_error is None:
        inv = np.linalg.inv(np.eye(2) - jac)
        # each scramble's map value at v, minus the mean: the RQMC noise of F, propagated
        per = _prior_side(model, alpha, sums[:, 0], sums[:, 1])
        dev = np.stack([per["mmse1"], per["mmse2"]], axis=1) - fv[None, :]
        se = np.sqrt(((dev @ inv.T) ** 2).sum(axis=0) / (dev.shape[0] * (dev.shape[0] - 1)))
        fc = _prior_side(model, alpha, [sums_c[:, 0].mean()], [sums_c[:, 1].mean()])
        rule = np.abs(inv @ (np.array([fc["mmse1"][0], fc["mmse2"][0]]) - fv))
        err = COVERAGE * se + rule + np.abs(inv @ (fv - v))  # + the distance to the root
    else:
        err, (se, rule) = np.asarray(v_error[0], float), v_error[1]
    e = sums[:, :2].mean(axis=0)
    e_se = standard_error(sums[:, :2], axis=0)
    eig = np.linalg.eigvals(jac)
    layers = []
    for i in range(2):
        q_hat = 2 * alpha * e[i]
        layers.append({"q": model.q0[i] - v[i], "q_error": float(err[i]), "mmse": float(v[i]),
                       "mmse_error": float(err[i]), "q_hat": float(q_hat),
                       "q_hat_error": float(2 * alpha * (COVERAGE * e_se[i]
                                                         + abs(e[i] - sums_c[:, i].mean()))),
                       "rho": (model.rho1, model.rho2)[i]})
    q = [x["q"] for x in layers]
    psi = _estimate_columns(sums[:, 4:5], sums_c[:, 4:5])[0]
    cross = _cross_term(alpha, layers, _estimate_columns(sums[:, 9:12], sums_c[:, 9:12]))
    cross["jacobian"] = jac.tolist()
    phi = _phi_estimate(model, alpha=alpha, layers=layers, psi_out=psi)
    gen = _egen_at(model, q=q, q_error=[float(x) for x in err], m=14,
                   scrambles=normals.shape[0], seed=seed)
    return {"alpha": alpha, "layers": layers, "perfect_recovery": False,
            "stable": bool(np.max(np.abs(eig)) < 1), "jacobian_eigenvalues": eig.tolist(),
            "init_mmse": list(v_init), "iterations": iterations,
            "standard_error": se.tolist(), "rule_error": rule.tolist(), "estimator": estimator,
            "phi": phi.value, "phi_error": phi.error,
            "psi_out": psi.value, "psi_out_error": psi.error,
            "e_gen": gen["e_gen"].value, "e_gen_error": gen["e_gen"].error,
            "e_gen_plugin": gen["e_gen_plugin"].value,
            "e_gen_plugin_error": gen["e_gen_plugin"].error, **cross,
            "design": model.design, "seconds": time.perf_counter() - t0}


def _cross_term(alpha: float, layers: list[dict], est: list[Estimate]) -> dict:
    """q_hat_12 = 2 alpha E[g_1 . g_2] (variance form; the Nishimori and mean-square forms beside
    it) and cross_correlation = q_hat_12 / sqrt(q_hat_1 q_hat_2), each with its bar (COVERAGE
    standard errors + inner-rule difference; the correlation's adds the q_hat_l bars to first
    order). The SE neglects the cross-overlap of the two layers' fluctuating parts; q_hat_12 is
    its conjugate, so these measure the size of what is neglected (module docstring)."""
    out = {}
    for e, key in zip(est, ("q_hat_12", "q_hat_12_nishimori", "q_hat_12_mean_square")):
        out[key], out[key + "_error"] = 2 * alpha * e.value, 2 * alpha * e.error
    qh = [x["q_hat"] for x in layers]
    qe = [x["q_hat_error"] for x in layers]
    norm = math.sqrt(qh[0] * qh[1]) if qh[0] > 0 and qh[1] > 0 else math.inf
    cc = out["q_hat_12"] / norm
    out["cross_correlation"] = cc
    out["cross_correlation_error"] = (out["q_hat_12_error"] / norm
                                      + 0.5 * abs(cc) * sum(e / q for e, q in zip(qe, qh)
                                                            if q > 0))
    return out


def _pr_result(model, alpha, apr, v_init, history, secs) -> dict:
    layers = [{"q": q0, "q_error": 0.0, "mmse": 0.0, "mmse_error": 0.0, "q_hat": math.inf,
               "q_hat_error": 0.0, "rho": rho}
              for q0, rho in zip(model.q0, (model.rho1, model.rho2))]
    # Phi -> (alpha - alpha_PR) log(1/V) as V -> 0 (docs/deep_aim.md, section 5): +infinity
    # exactly when this point is stable; e_gen = 0 exactly (h = omega)
    return {"alpha": alpha, "layers": layers, "perfect_recovery": True, "stable": alpha > apr,
            "alpha_PR": apr, "init_mmse": list(v_init), "iterations": len(history),
            "last_mmse": history[-1], "phi": None, "phi_error": None,
            "phi_limit": "+inf" if alpha > apr else "-inf", "psi_out": None, "design": model.design,
            "psi_out_error": None, "e_gen": 0.0, "e_gen_error": 0.0, "e_gen_plugin": 0.0,
            "e_gen_plugin_error": 0.0, "seconds": secs}


def prior_q_hat(v: float, rho: float) -> float:
    """The inverse of the prior side (THEORY 1.1): the q_hat with mmse_rho(1/q_hat) = v, for v in
    (0, 1] (0 at v = 1): 1 / :func:`wishart.delta_of_mmse`."""
    require(math.isfinite(v) and 0 < v <= 1, "v", "in (0, 1]", v)
    return 0.0 if v >= 1.0 else 1.0 / wishart.delta_of_mmse(v, rho=rho)


def _branch_sensitivity(model: DeepAimSE, alpha: float, v: np.ndarray, e: np.ndarray,
                        jac: np.ndarray) -> tuple[np.ndarray, float, float]:
    """The 2 x 2 matrix d(log alpha, V2)/d(log E_1, log E_2) at a branch point (V1 held; E_l
    shifted by constants, the RQMC and rule errors): the root of r(V2) = log q_hat_1*(V1) -
    log E_1 - log q_hat_2*(V2) + log E_2 moves by dV2 = (dlog E_1 - dlog E_2) / r'(V2), and
    log alpha = log q_hat_1* - log E_1 - log 2 by -dlog E_1 - s_1 dV2, s_l = dlog E_l / dV2. s_l
    from the map's Jacobian at fixed alpha, J_lj = m_l'(q_hat_l) 2 alpha dE_l/dV_j (m_l(q_hat) =
    mmse_rho_l(1/q_hat)), m_l' by central differences; dlog q_hat_2*/dV2 = 1/(q_hat_2
    m_2'(q_hat_2)), the inverse function's slope. Rows: log alpha, V2; also s_1 and r'(V2)."""
    qh = 2.0 * alpha * e
    mp = []
    for i, rho in enumerate((model.rho1, model.rho2)):
        d = 1e-4 * qh[i]
        mp.append((_prior_step(qh[i] + d, rho) - _prior_step(qh[i] - d, rho)) / (2 * d))
    s = [jac[i, 1] / (mp[i] * 2.0 * alpha * e[i]) for i in range(2)]
    p2 = 1.0 / (qh[1] * mp[1])
    rp = -s[0] - p2 + s[1]
    dv2 = np.array([1.0, -1.0]) / rp
    dla = np.array([-1.0, 0.0]) - s[0] * dv2
    return np.stack([dla, dv2]), float(s[0]), float(rp)


def branch_point(model: DeepAimSE, *, v1: float, m: int = 6, scrambles: int = 8, seed: int = 0,
                 steps: tuple[float, float] = INNER_STEPS, estimator: str = "variance",
                 v2_bracket: tuple[float, float] | None = None, xtol: float = 1e-6,
                 jac_rel: float = BRANCH_JAC_REL, e_gen: bool = True) -> dict:
    """The SE fixed point on the finite-V branch at a given mmse_1 = ``v1``, alpha an output
    (THEORY 1.6; docs/deep_aim.md section 4, "The branch with alpha as an output"). At a fixed
    point V_l = mmse_rho_l(1/q_hat_l) with q_hat_l = 2 alpha E_l(V), and E_l does not depend on
    alpha, so with q_hat_l*(V_l) the inverse of the prior side (:func:`prior_q_hat`) a fixed
    point needs alpha_1(V) = q_hat_1*(V1)/(2 E_1(V)) = alpha_2(V) = q_hat_2*(V2)/(2 E_2(V)): a
    1-d root in log V2 (Brent, relative tolerance ``xtol``) on a fixed RQMC point set (2^m x
    ``scrambles``, key ``seed``), nothing iterated in alpha, so the map's near-neutrality close
    to alpha_PR does not matter. ``v2_bracket``: (lo, hi) with a sign change of
    log(alpha_1/alpha_2); by default a geometric search from (0.1 v1, 0.5 v1). Returns the keys
    of :func:`fixed_point` (jacobian eigenvalues of the map at fixed alpha: the larger above 1 is
    an unstable point; Phi, e_gen unless ``e_gen`` is False) plus ``alpha_error``, ``alpha_PR``,
    ``alpha_minus_PR``, the branch's ``sensitivity`` and ``root``. Bars: COVERAGE RQMC standard
    errors (per scramble, through the 2 x 2 sensitivity of (log alpha, V2) to (log E_1, log E_2),
    :func:`_branch_sensitivity`) + the inner-rule difference (``steps``) propagated the same way
    + the root tolerance; V1 is exact. ``jac_rel``: the relative step of the central differences
    of the map's Jacobian (:data:`BRANCH_JAC_REL`)."""
    require(isinstance(v1, (int, float)) and math.isfinite(v1) and 0 < v1 <= 1, "v1",
            "in (0, 1]", v1)
    require(estimator in ESTIMATORS, "estimator", f"one of {ESTIMATORS}", estimator)
    require(math.isfinite(jac_rel) and 0 < jac_rel <= 0.2, "jac_rel", "in (0, 0.2]", jac_rel)
    if v2_bracket is not None:
        require(len(v2_bracket) == 2 and all(math.isfinite(x) and 0 < x <= 1 for x in v2_bracket)
                and v2_bracket[0] < v2_bracket[1], "v2_bracket", "(lo, hi) with 0 < lo < hi <= 1",
                v2_bracket)
    t0 = time.perf_counter()
    normals = _sobol_normals(m, scrambles, seed)
    h = steps[1]
    qh1 = prior_q_hat(v1, model.rho1)
    cache: dict[float, np.ndarray] = {}

    def sums_at(v2: float) -> np.ndarray:
        if v2 not in cache:
            cache[v2] = _output_sums(model, model.q0[0] - v1, model.q0[1] - v2, h, normals,
                                     estimator=estimator)
        return cache[v2]

    def log_ratio(t: float) -> float:
        v2 = math.exp(t)
        e = sums_at(v2)[:, :2].mean(axis=0)
        return math.log(qh1 / e[0]) - math.log(prior_q_hat(v2, model.rho2) / e[1])

    lo, hi = v2_bracket if v2_bracket is not None else (0.1 * v1, min(0.5 * v1, 1.0))
    tl, th = math.log(lo), math.log(hi)
    fl, fh = log_ratio(tl), log_ratio(th)
    for _ in range(0 if v2_bracket is not None else 6):
        if fl * fh <= 0:
            break
        # expand towards the side where |log ratio| is smaller
        if abs(fl) < abs(fh):
            tl -= math.log(3.0)
            fl = log_ratio(tl)
        elif th < -1e-12:
            th = min(th + math.log(3.0), 0.0)
            fh = log_ratio(th)
        else:
            break
    if fl * fh > 0:
        raise ConvergenceError(
            "deep AIM branch: no sign change of log(alpha_1/alpha_2) in the V2 bracket; pass "
            "v2_bracket", last_iterate=[v1, math.exp(tl), math.exp(th)],
            residual=[fl, fh])
    t = brentq(log_ratio, tl, th, xtol=xtol, rtol=xtol) if fl * fh < 0 else (
        tl if fl == 0 else th)
    v2 = math.exp(t)
    v = np.array([v1, v2])
    sums = sums_at(v2)
    e = sums[:, :2].mean(axis=0)
    a = np.array([qh1 / (2 * e[0]), prior_q_hat(v2, model.rho2) / (2 * e[1])])
    alpha = float(math.sqrt(a[0] * a[1]))
    sums_c = _output_sums(model, model.q0[0] - v1, model.q0[1] - v2, steps[0], normals,
                          estimator=estimator)
    fv = _prior_side(model, alpha, [e[0]], [e[1]])
    fv = np.array([fv["mmse1"][0], fv["mmse2"][0]])
    jac = _jacobian(model, alpha, v, normals, h, fv, rel=jac_rel, estimator=estimator)
    sens, s1, rp = _branch_sensitivity(model, alpha, v, e, jac)
    dlog = sums[:, :2] / e[None, :] - 1.0                     # per scramble dlog E_l
    dev = dlog @ sens.T                                       # (dlog alpha, dV2) per scramble
    n = dev.shape[0]
    se = np.sqrt((dev ** 2).sum(axis=0) / (n * (n - 1)))
    rule = np.abs(sens @ np.log(sums_c[:, :2].mean(axis=0) / e))
    # root tolerance: Brent's bracket width in V2 plus the Newton distance |r| / |r'| left at
    # the returned point, carried to log alpha along the branch (s_1), plus half the gap
    gap = abs(math.log(a[0] / a[1]))
    dv2_root = xtol * v2 * (1.0 + abs(t)) + gap / abs(rp)
    root = np.array([abs(s1) * dv2_root + gap / 2, dv2_root])
    err = COVERAGE * se + rule + root                         # on (log alpha, V2)
    alpha_err = alpha * float(err[0])
    v_err = np.array([0.0, float(err[1])])
    v_se = np.array([0.0, float(se[1])])
    v_rule = np.array([0.0, float(rule[1])])
    pre = (fv, sums, sums_c, jac)
    if e_gen:
        res = _finite_result(model, alpha, v, normals, steps, [v1, v2], len(cache), t0, seed,
                             estimator, pre=pre, v_error=(v_err, (v_se, v_rule)))
    else:
        eig = np.linalg.eigvals(jac)
        res = {"alpha": alpha, "layers": [
            {"q": model.q0[i] - v[i], "q_error": float(v_err[i]), "mmse": float(v[i]),
             "mmse_error": float(v_err[i]), "q_hat": float(2 * alpha * e[i]),
             "rho": (model.rho1, model.rho2)[i]} for i in range(2)],
            "perfect_recovery": False, "stable": bool(np.max(np.abs(eig)) < 1),
            "jacobian_eigenvalues": eig.tolist(), "jacobian": jac.tolist(),
            "standard_error": v_se.tolist(), "rule_error": v_rule.tolist(),
            "estimator": estimator, "design": model.design}
    apr = perfect_recovery_alpha(model)
    res.update({
        "alpha": alpha, "alpha_error": alpha_err,
        "alpha_standard_error": alpha * float(se[0]), "alpha_rule_error": alpha * float(rule[0]),
        "alpha_root_error": alpha * float(root[0]), "alpha_PR": apr,
        "alpha_minus_PR": alpha - apr, "alpha_per_layer": a.tolist(),
        "E": e.tolist(), "sensitivity": sens.tolist(), "jac_rel": jac_rel,
        "root": {"v2_bracket": [math.exp(tl), math.exp(th)], "xtol": xtol,
                 "evaluations": len(cache)},
        "v1_E1_plus_v2_E2": float(v1 * e[0] + v2 * e[1]),
        "points": 2**m, "scrambles": scrambles, "seed": seed,
        "seconds": time.perf_counter() - t0})
    return res


def fixed_points(model: DeepAimSE, *, alpha: float,
                 inits: tuple[tuple[float, float], ...] = ((1.0, 1.0), (1e-3, 1e-3), (1e-3, 1.0),
                                                           (1.0, 1e-3)),
                 **kw) -> list[dict]:
    """Fixed points of the deep AIM SE from several initial (mmse_1, mmse_2): uninformed (1, 1),
    i.e. q_l = rho_l, informed (1e-3, 1e-3) and one layer informed; all are returned, the
    Bayes-optimal one(s) flagged (:func:`flag_bayes_optimal`; THEORY 1.1, 1.6)."""
    return flag_bayes_optimal([fixed_point(model, alpha=alpha, v_init=init, **kw)
                               for init in inits])


# ---------------------------------------------------------------- the neglected cross-overlap

def _matrix_sums(model: DeepAimSE, q1: float, q2: float, q12: float, h_in: float,
                 normals: np.ndarray, chunk: int = 256) -> np.ndarray:
    """Per scramble: (G_11, G_22, G_12) of G = E[g g^T] (summed over the two whitened
    coordinates) at a cross-overlap q12, g = Sigma^-1 E[deviation | z], Sigma = [[V1, -q12],
    [-q12, V2]]: G = 2 Sigma^-1 - Sigma^-1 K Sigma^-1, K the mean posterior covariance (the
    variance form; law of total variance); column 3: Psi_out = E log Z_out(z) at q12."""
    v1, v2 = model.q0[0] - q1, model.q0[1] - q2
    sig_inv = np.linalg.inv(np.array([[v1, -q12], [-q12, v2]]))
    r, n, _ = normals.shape
    out = np.zeros((r, 4))
    for k in range(r):
        acc = np.zeros(4)
        for st in range(0, n, chunk):
            a, b, e1, e2 = _outer_points(model, q1, q2, normals[k, st:st + chunk], "variance",
                                         q12=q12)
            z1, z2 = statistics(a[:, 0] + e1[:, 0], a[:, 1] + e1[:, 1], b[:, 0] + e2[:, 0],
                                b[:, 1] + e2[:, 1], skip=model.skip, beta=model.beta)
            p = posterior(model, z1, z2, a[:, 0], a[:, 1], b[:, 0], b[:, 1], v1, v2, h_in,
                          c12=-q12)
            acc += [np.sum(p["tr_cov_xi"]), np.sum(p["tr_cov_x"]), np.sum(p["tr_cov_cross"]),
                    np.sum(p["log_z_out"])]
        kk = acc / n
        g = 2.0 * sig_inv - sig_inv @ np.array([[kk[0], kk[2]], [kk[2], kk[1]]]) @ sig_inv
        out[k] = g[0, 0], g[1, 1], g[0, 1], kk[3]
    return out


def cross_overlap_effect(model: DeepAimSE, *, fp: dict, m: int = 10, scrambles: int = 8,
                         seed: int = 0, dq12: float = 0.01,
                         h_in: float = INNER_STEPS[1]) -> dict:
    """First-order effect on mmse_l of the cross-overlap q'_12 = Tr(F_hat_1 F_hat_2)/D that the SE
    with one overlap per layer neglects, at a finite fixed point ``fp`` (a dict of
    :func:`fixed_point`, which carries q_hat_12 and the Jacobian J of the map).

    q'_12 from the linear response of the joint denoiser of two independent matrices seen with
    noise of precision [[q_hat_1, q_hat_12], [q_hat_12, q_hat_2]]: to first order in q_hat_12,
    q'_12 = q_hat_12 E Tr(C_1 C_2)/n with C_l the two (independent) posterior covariance
    operators, whose rotation average is mmse_l Id plus a rank-one trace part, so q'_12 ~
    q_hat_12 mmse_1 mmse_2 (exact for Gaussian priors; for rotation-invariant ones to leading
    order in 1/D, an argument not checked numerically; beyond first order this is the open 2 x 2
    SE). The output side at a cross-overlap
    is exact (:func:`outer_covariance` with q12, the inner posterior with correlated deviations):
    dE_l/dq'_12 by central differences (+- dq12 and +- 2 dq12, one point set); error COVERAGE
    standard errors of the paired differences + |D(dq12) - D(2 dq12)|. Then
    delta mmse = (I - J)^-1 (d mmse_l / d q_hat_l) 2 alpha (dE_l/dq'_12) q'_12 (the prior side's
    per-layer mmse moves only at second order in q_hat_12). Returns dE_dq12 (two Estimates),
    q12 (Estimate), delta_mmse and delta_mmse_error (lists), below_bars (|delta| + error below
    the fixed point's mmse bars, per layer); dE12_dq12, loop_gain = 2 alpha mmse_1 mmse_2
    dE12/dq12 and q12_self_consistent = q12/(1 - loop_gain) (q_hat_12 fed by q'_12 itself, same
    first-order approximation); dpsi_dq12, the central difference of Psi_out in q'_12 (equal to
    E[g_1 . g_2] = q_hat_12 / (2 alpha) by stationarity, :func:`cross_overlap_output_effect`)."""
    require(not fp.get("perfect_recovery") and "q_hat_12" in fp, "fp",
            "a finite fixed point of fixed_point", fp.get("perfect_recovery"))
    alpha = fp["alpha"]
    q = [x["q"] for x in fp["layers"]]
    v = [x["mmse"] for x in fp["layers"]]
    require(math.isfinite(dq12) and 0 < 2 * dq12 < 0.5 * min(v), "dq12",
            "in (0, min(V)/4)", dq12)
    normals = _sobol_normals(m, scrambles, seed)
    diffs = []
    for d in (dq12, 2 * dq12):
        up = _matrix_sums(model, q[0], q[1], d, h_in, normals)
        dn = _matrix_sums(model, q[0], q[1], -d, h_in, normals)
        diffs.append((up - dn) / (2 * d))
    slopes = []
    for i in range(4):
        d1, d2 = diffs[0][:, i], diffs[1][:, i]
        se = standard_error(d1)
        slopes.append(Estimate(float(d1.mean()), COVERAGE * se + abs(float(d1.mean() - d2.mean())),
                               "central difference in q12 of the RQMC E_l, one point set",
                               extra={"standard_error": se, "dq12": dq12}))
    q12 = fp["q_hat_12"] * v[0] * v[1]
    q12_err = fp["q_hat_12_error"] * v[0] * v[1]
    # q_hat_12 grows with q'_12 itself (dG_12/dq12): loop gain of the first-order 2 x 2 map
    gain = 2 * alpha * v[0] * v[1] * slopes[2].value
    dmmse = []
    for x, rho in zip(fp["layers"], (model.rho1, model.rho2)):
        h = 1e-4 * x["q_hat"]
        dmmse.append((_prior_step(x["q_hat"] + h, rho) - _prior_step(x["q_hat"] - h, rho))
                     / (2 * h))
    inv = np.linalg.inv(np.eye(2) - np.array(fp["jacobian"]))
    df = np.array([dmmse[i] * 2 * alpha * slopes[i].value for i in range(2)])
    df_err = np.array([abs(dmmse[i]) * 2 * alpha * slopes[i].error for i in range(2)])
    delta = inv @ df * q12
    err = np.abs(inv) @ (df_err * abs(q12) + np.abs(df) * q12_err)
    return {"dE_dq12": slopes[:2], "dE12_dq12": slopes[2], "dpsi_dq12": slopes[3],
            "q12": Estimate(q12, q12_err, "q_hat_12 mmse_1 mmse_2 (first-order response)"),
            "loop_gain": gain, "q12_self_consistent": q12 / (1 - gain) if gain < 1 else math.inf,
            "delta_mmse": delta.tolist(), "delta_mmse_error": err.tolist(),
            "below_bars": [bool(abs(delta[i]) + err[i] < fp["layers"][i]["mmse_error"])
                           for i in range(2)]}


#: above this loop gain the first-order estimate of the cross-overlap is not trusted: its term is
#: taken at this gain and the fixed point is flagged (``cross_overlap["trusted"]`` False)
CROSS_GAIN_MAX = 0.8


def add_cross_overlap_term(model: DeepAimSE, fp: dict, *, m: int = 10, scrambles: int = 8,
                           seed: int = 0) -> dict:
    """The fixed point ``fp`` with the neglected cross-overlap's first-order effect
    (:func:`cross_overlap_effect`) added to each layer's mmse and q bars: |delta mmse_l| + its
    error, divided by 1 - loop gain (q_hat_12 fed back by q'_12; gain capped at
    :data:`CROSS_GAIN_MAX`); and its effect on e_gen, the plug-in error and Phi
    (:func:`cross_overlap_output_effect`, |delta| + its error) added to their bars. The SE
    with one overlap per layer is exact only without cross-overlap (independent tokens); with
    shared tokens this term is the model error it carries (docs/deep_aim.md, "Shared tokens").
    ``fp["cross_overlap"]``: the term per layer, delta_mmse, loop_gain, trusted, q12, and the
    e_gen / Phi pieces of :func:`cross_overlap_output_effect`."""
    dq12 = cross_step(model, fp)
    if dq12 <= 1e-9:
        # q_l at q_min_l (the uninformed point): no cross-overlap fits the law, q_hat_12 ~ 0
        co = {"term": [0.0, 0.0], "loop_gain": 0.0, "trusted": True, "q12": 0.0,
              "method": "q at the uninformed point: no cross-overlap term"}
        return {**fp, "layers": [{**x, "cross_overlap_term": 0.0} for x in fp["layers"]],
                "cross_overlap": co}
    eff = cross_overlap_effect(model, fp=fp, m=m, scrambles=scrambles, seed=seed, dq12=dq12)
    out, oe = cross_term_in_bars(model, fp, eff, seed=seed, method=(
        "first-order response of the cross-overlap q'_12 = q_hat_12 mmse_1 mmse_2, output side "
        "exact at q'_12 (central differences), divided by 1 - loop gain; added to the bars"))
    out["e_gen_error"] = fp["e_gen_error"] + oe["e_gen_term"]
    out["e_gen_plugin_error"] = fp["e_gen_plugin_error"] + oe["e_gen_plugin_term"]
    return out


def cross_term_in_bars(model: DeepAimSE, fp: dict, eff: dict, *, seed: int, method: str,
                       extra: dict | None = None) -> tuple[dict, dict]:
    """``fp`` with the cross-overlap response ``eff`` (delta_mmse, its error, loop_gain, q12)
    added to each layer's mmse and q bars, (|delta mmse_l| + error) / (1 - loop gain) (gain
    capped at :data:`CROSS_GAIN_MAX`), ``fp["cross_overlap"]`` recorded (with ``extra``), and
    the Phi bar grown by :func:`cross_overlap_output_effect`'s term; returns the new fixed point
    and that output effect (the caller adds its e_gen terms to the bars it reports)."""
    gain = float(eff["loop_gain"])
    scale = 1.0 / (1.0 - min(max(gain, 0.0), CROSS_GAIN_MAX))
    terms = [scale * (abs(d) + e) for d, e in zip(eff["delta_mmse"], eff["delta_mmse_error"])]
    layers = [{**x, "mmse_error": x["mmse_error"] + t, "q_error": x["q_error"] + t,
               "cross_overlap_term": t} for x, t in zip(fp["layers"], terms)]
    co = {"term": terms, "delta_mmse": eff["delta_mmse"],
          "delta_mmse_error": eff["delta_mmse_error"], "loop_gain": gain,
          "trusted": gain < CROSS_GAIN_MAX, "q12": eff["q12"].value, "q12_error": eff["q12"].error,
          **(extra or {}), "method": method}
    out = {**fp, "layers": layers, "cross_overlap": co}
    oe = cross_overlap_output_effect(model, fp=out, seed=seed)
    co.update(oe)
    out["phi_error"] = fp["phi_error"] + oe["phi_term"]
    return out, oe


def cross_step(model: DeepAimSE, fp: dict) -> float:
    """The central-difference step in q'_12: 0.01, at most a tenth of the smaller V_l and a fifth
    of sqrt((q1 - q_min_1)(q2 - q_min_2)) (the fluctuating parts' overlap must stay inside its
    Cauchy-Schwarz range, :func:`_check_q12`, at +- 2 steps)."""
    q = [x["q"] for x in fp["layers"]]
    v = [x["mmse"] for x in fp["layers"]]
    room = math.sqrt(max(q[0] - model.q_min[0], 0.0) * max(q[1] - model.q_min[1], 0.0))
    return min(0.01, 0.1 * min(v), 0.2 * room)


def cross_overlap_output_effect(model: DeepAimSE, *, fp: dict, m: int = 14, scrambles: int = 8,
                                seed: int = 0) -> dict:
    """First-order effect of the neglected cross-overlap q'_12 on e_gen, the plug-in error and
    Phi at a fixed point ``fp`` that carries ``cross_overlap`` (:func:`add_cross_overlap_term`:
    delta_mmse, its error, the loop gain, q12 = q_hat_12 mmse_1 mmse_2).

    e_gen (THEORY 1.5): the output side at (q_l - delta mmse_l, q'_12) against (q_l, 0),
    delta e = -sum_l (d e/d q_l) delta mmse_l + (d e/d q'_12) q'_12, divided by 1 - loop gain
    (capped as in :func:`add_cross_overlap_term`); the law at q'_12 is :func:`_egen_sums`'s.
    Derivatives by central differences on one 12-dimensional RQMC point set (2^m x
    ``scrambles``); error: COVERAGE standard errors of the paired differences, |D(d) - D(2 d)|,
    and the errors of delta mmse and q'_12, propagated.

    Phi (THEORY 1.1, 1.6, with the 2 x 2 overlap -Tr(Q Q_hat)/4 = ... - q'_12 q_hat_12/2): the SE
    point (q'_12 = q_hat_12 = 0 in the 2 x 2 Phi) has zero gradient except d Phi/d q'_12 = alpha
    d Psi_out/d q'_12 = alpha E[g_1 . g_2] = q_hat_12/2 (checked numerically by
    :func:`cross_overlap_effect`'s ``dpsi_dq12``), so to second order (Phi quadratic near its
    stationary point, f(x*) - f(x0) = g.(x* - x0)/2) the 2 x 2 fixed point has
    delta Phi = q_hat_12 q'_12 / 4 with the self-consistent q'_12 = q12 / (1 - loop gain); error
    from the bars of q_hat_12 and q12. Cubic terms are not bounded: like the mmse term this is
    an order of magnitude of the model error, not a bound.

    Returns delta_e_gen, delta_e_gen_plugin, delta_phi with ``_error`` and the bar terms
    e_gen_term, e_gen_plugin_term, phi_term (|delta| + error)."""
    co = fp.get("cross_overlap")
    require(not fp.get("perfect_recovery") and co is not None and "q_hat_12" in fp, "fp",
            "a finite fixed point carrying cross_overlap (add_cross_overlap_term)", co)
    q = [x["q"] for x in fp["layers"]]
    v = [x["mmse"] for x in fp["layers"]]
    gain = float(co["loop_gain"])
    scale = 1.0 / (1.0 - min(max(gain, 0.0), CROSS_GAIN_MAX))
    q12 = co.get("q12", fp["q_hat_12"] * v[0] * v[1])
    q12_err = co.get("q12_error", fp["q_hat_12_error"] * v[0] * v[1])
    normals = _sobol_normals(m, scrambles, seed, d=12)

    def slope(i: int, d: float) -> np.ndarray:
        """Per scramble the central difference of (e_gen, plug-in) in q1, q2 (i = 0, 1) or q12."""
        lo, hi = [q[0], q[1], 0.0], [q[0], q[1], 0.0]
        lo[i] -= d
        hi[i] += d
        return (_egen_sums(model, *hi[:2], normals, q12=hi[2])
                - _egen_sums(model, *lo[:2], normals, q12=lo[2])) / (2 * d)

    dq12 = cross_step(model, fp)
    ests = []
    for i in range(3):
        d = dq12 if i == 2 else 1e-3 * min(q[i] - model.q_min[i], model.q0[i] - q[i])
        if d <= 1e-12:
            ests.append((np.zeros(2), np.zeros(2)))
            continue
        d1, d2 = slope(i, d), slope(i, 2 * d)
        ests.append((d1.mean(axis=0), COVERAGE * standard_error(d1, axis=0)
                     + np.abs(d1.mean(axis=0) - d2.mean(axis=0))))
    dm = np.asarray(co["delta_mmse"], float)
    dm_err = np.asarray(co["delta_mmse_error"], float)
    delta = scale * (-ests[0][0] * dm[0] - ests[1][0] * dm[1] + ests[2][0] * q12)
    error = scale * (sum(np.abs(ests[i][0]) * dm_err[i] + ests[i][1] * abs(dm[i])
                         for i in range(2))
                     + np.abs(ests[2][0]) * q12_err + ests[2][1] * abs(q12))
    qh12, qh12_err = fp["q_hat_12"], fp["q_hat_12_error"]
    dphi = qh12 * q12 * scale / 4.0
    dphi_err = (abs(qh12_err * q12) + abs(qh12) * q12_err) * scale / 4.0
    return {"delta_e_gen": float(delta[0]), "delta_e_gen_error": float(error[0]),
            "delta_e_gen_plugin": float(delta[1]), "delta_e_gen_plugin_error": float(error[1]),
            "de_gen_dq12": float(ests[2][0][0]), "de_gen_dq12_error": float(ests[2][1][0]),
            "delta_phi": float(dphi), "delta_phi_error": float(dphi_err),
            "e_gen_term": float(abs(delta[0]) + error[0]),
            "e_gen_plugin_term": float(abs(delta[1]) + error[1]),
            "phi_term": float(abs(dphi) + dphi_err)}


# ---------------------------------------------------------------- free entropy

def prior_potential(q_hat: float, *, rho: float) -> Estimate:
    """Psi_S(q_hat; rho) = q_hat Q0/4 - I(1/q_hat), Q0 = 1 + rho (THEORY 1.1; the one-layer
    convention of numerics/aim_se.py); 0 at q_hat = 0. Error: the mutual information's two-order
    difference."""
    require(math.isfinite(q_hat) and q_hat >= 0, "q_hat", "a finite number >= 0", q_hat)
    if q_hat == 0:
        return Estimate(0.0, 0.0, "q_hat = 0")
    mi = wishart.mutual_information_estimate(1.0 / q_hat, rho=rho)
    return Estimate(q_hat * (1.0 + rho) / 4.0 - float(mi.value), float(mi.error), mi.method)


def free_entropy(model: DeepAimSE, *, alpha: float, q1: float, q2: float, q_hat1: float,
                 q_hat2: float, psi_out: float) -> float:
    """Phi = sum_l [-q_l q_hat_l/4 + Psi_S(q_hat_l; rho_l)] + alpha Psi_out (THEORY 1.1, 1.6).

    Psi_out = E log Z_out(z) with Z_out the density of z = (l^T M l, l^T M 1) (module docstring;
    :func:`output_overlaps`). Any other choice of coordinates for y changes log Z_out by a
    function of y alone, whose mean is the same at every (q1, q2) (y's law is the prior
    predictive, q_l + V_l = Q0_l): Phi shifts by alpha times a constant, which changes neither
    its stationary points nor the ranking of fixed points at one alpha."""
    phi = alpha * psi_out
    for q, q_hat, rho in ((q1, q_hat1, model.rho1), (q2, q_hat2, model.rho2)):
        phi += -q * q_hat / 4.0 + prior_potential(q_hat, rho=rho).value
    return float(phi)


def psi_out_bound(model: DeepAimSE, *, q2: float, nodes: tuple[int, int] = (80, 120)) -> Estimate:
    """-1 - log(2 pi V2) - E log J, J = 4 sqrt 2 (1 + skip) |mu|^3 (xi ~ N(0, Q0_1 I2), the prior
    of H1's seen part), by tensor Gauss-Hermite (error: two orders). Exact identity (z = J-linear
    image of H2's seen part x given xi): Psi_out(q1, q2) = bound - I(xi; z | omega), the second
    term >= 0 the information z carries on H1's seen part given omega; it vanishes as skip ->
    infinity (layer 2 alone: -1 - log(2 pi V2) is the one-layer softmax Psi_out in whitened
    coordinates, docs/deep_aim.md section 5). Needs skip >= 1 (log|mu| is smooth)."""
    require(model.skip >= 1, "skip", ">= 1 (log|mu| singular below)", model.skip)
    require(math.isfinite(q2) and 0 <= q2 < model.q0[1], "q2", f"in [0, {model.q0[1]:g})", q2)
    vals = []
    for n in nodes:
        x, w = np.polynomial.hermite_e.hermegauss(n)
        x = math.sqrt(model.q0[0]) * x
        x1, x2 = np.meshgrid(x, x, indexing="ij")
        mu, _ = layer1_weights(x1, x2, skip=model.skip, beta=model.beta)
        vals.append(float((np.outer(w, w) * np.log(np.abs(mu))).sum() / (2.0 * math.pi)))
    const = -1.0 - math.log(2.0 * math.pi * (model.q0[1] - q2)) \
        - math.log(4.0 * SQRT2 * (1.0 + model.skip))
    return Estimate(const - 3.0 * vals[1], 3.0 * abs(vals[1] - vals[0]),
                    "tensor Gauss-Hermite over xi, two orders", extra={"nodes": nodes})


def _estimate_columns(fine: np.ndarray, coarse: np.ndarray) -> list[Estimate]:
    """Per column: mean over scrambles, error COVERAGE standard errors + |fine - coarse|."""
    out = []
    for i in range(fine.shape[1]):
        f = fine[:, i]
        se = standard_error(f)
        rule = abs(float(f.mean() - coarse[:, i].mean()))
        out.append(Estimate(float(f.mean()), COVERAGE * se + rule,
                            "randomised QMC (scrambled Sobol) + inner rule, two steps",
                            extra={"standard_error": se, "rule_error": rule}))
    return out


def _phi_estimate(model: DeepAimSE, *, alpha: float, layers: list[dict],
                  psi_out: Estimate) -> Estimate:
    """Phi at a fixed point with its error: alpha times Psi_out's error, the mutual informations'
    errors, and the second-order effect of the fixed point's own error (Phi is stationary there:
    sum_l q_error_l q_hat_error_l / 4)."""
    q = [x["q"] for x in layers]
    qh = [x["q_hat"] for x in layers]
    phi = free_entropy(model, alpha=alpha, q1=q[0], q2=q[1], q_hat1=qh[0], q_hat2=qh[1],
                       psi_out=psi_out.value)
    err = alpha * psi_out.error
    for x, rho in zip(layers, (model.rho1, model.rho2)):
        err += prior_potential(x["q_hat"], rho=rho).error + x["q_error"] * x["q_hat_error"] / 4.0
    return Estimate(phi, err, "Phi = sum_l [-q q_hat/4 + Psi_S] + alpha Psi_out (RQMC)")


def stationarity(model: DeepAimSE, *, q1: float, q2: float, dq: float = 0.02, m: int = 9,
                 scrambles: int = 8, seed: int = 0,
                 h_in: float = INNER_STEPS[1], estimator: str = "variance") -> dict[str, Estimate]:
    """The check d Psi_out / d q_l = E_l / 2, i.e. stationarity of Phi in q_l reproduces
    q_hat_l = 2 alpha E_l (THEORY 1.1, 1.6). The derivative is the central difference of the RQMC
    estimate of Psi_out on one point set (q_l +- dq, the other overlap held); error: COVERAGE
    standard errors of the paired differences over scrambles + |D(dq) - D(2 dq)| (the step's own
    error, Richardson). Returns dpsi_dq1, dpsi_dq2 and half_E1, half_E2 (E_l/2 at (q1, q2), bars
    of :func:`output_overlaps` without the rule term, the same inner step)."""
    _check_q(model, q1, q2)
    _check_inner(model, q1, q2)
    require(math.isfinite(dq) and dq > 0, "dq", "a finite number > 0", dq)
    for q, q0, lo in zip((q1, q2), model.q0, model.q_min):
        require(q - 2 * dq >= lo and q + 2 * dq < q0, "dq",
                f"q_l +- 2 dq inside [{lo:g}, Q0 = {q0:g})", dq)
    normals = _sobol_normals(m, scrambles, seed)
    base = _output_sums(model, q1, q2, h_in, normals, estimator=estimator)
    out = {}
    for i in range(2):
        q = [q1, q2]
        diffs = []
        for step in (dq, 2 * dq):
            qp, qm = list(q), list(q)
            qp[i] += step
            qm[i] -= step
            up = _output_sums(model, qp[0], qp[1], h_in, normals, estimator=estimator)[:, 4]
            dn = _output_sums(model, qm[0], qm[1], h_in, normals, estimator=estimator)[:, 4]
            diffs.append((up - dn) / (2 * step))
        d1, d2 = diffs
        se = standard_error(d1)
        out[f"dpsi_dq{i + 1}"] = Estimate(
            float(d1.mean()), COVERAGE * se + abs(float(d1.mean() - d2.mean())),
            "central difference of RQMC Psi_out, one point set",
            extra={"standard_error": se, "dq": dq})
        e = base[:, i] / 2.0
        se_e = standard_error(e)
        out[f"half_E{i + 1}"] = Estimate(float(e.mean()), COVERAGE * se_e, "RQMC E_l / 2",
                                         extra={"standard_error": se_e})
    return out


def flag_bayes_optimal(fps: list[dict]) -> list[dict]:
    """Copies of the fixed points (dicts of :func:`fixed_point`) with ``bayes_optimal``: the stable
    one of largest Phi (THEORY 1.1). A stable perfect-recovery point (alpha > alpha_PR, where
    Phi -> +infinity as V -> 0) wins over any finite one. Points that coincide with the winner
    (another start landing on it: both mmse within the combined bars) are flagged too; with no
    stable point none is flagged."""
    stable = [f for f in fps if f.get("stable")]
    pr = [f for f in stable if f["perfect_recovery"]]
    finite = [f for f in stable if not f["perfect_recovery"] and f.get("phi") is not None]
    best = pr[0] if pr else (max(finite, key=lambda f: f["phi"]) if finite else None)

    def same(f: dict) -> bool:
        if best is None or not f.get("stable") or f["perfect_recovery"] != best["perfect_recovery"]:
            return False
        return all(abs(a["mmse"] - b["mmse"]) <= a["mmse_error"] + b["mmse_error"]
                   for a, b in zip(f["layers"], best["layers"]))

    return [{**f, "bayes_optimal": same(f)} for f in fps]


# ---------------------------------------------------------------- generalisation error

def _diagonal_outputs(xi1, xi2, x1, x2, *, model: DeepAimSE):
    """(y_11, y_22) = sigmoid(beta u_a), u_1 = M11 - M12 = (z1 + z2)/2, u_2 = M22 - M12 =
    (z1 - z2)/2 (T = 2: y_ab = 1 - y_aa, so ||y - y'||_F^2 = 2 sum_a (y_aa - y'_aa)^2)."""
    z1, z2 = statistics(xi1, xi2, x1, x2, skip=model.skip, beta=model.beta)
    return expit(model.beta * (z1 + z2) / 2.0), expit(model.beta * (z1 - z2) / 2.0)


def _egen_sums(model: DeepAimSE, q1: float, q2: float, normals: np.ndarray,
               q12: float = 0.0) -> np.ndarray:
    """Per scramble: the RQMC means of ||y(h) - y(h')||_F^2 / 2 (h, h' two draws given omega: its
    mean is the Bayes e_gen) and of ||y(h) - y(omega)||_F^2 (plug-in), over 12 dimensions; the
    means (a, b) correlated across layers with shared tokens (:func:`mean_pair_cholesky`), the
    deviations independent given them. ``q12``: a cross-overlap q'_12 (neglected by the SE;
    :func:`cross_overlap_output_effect`) adds q12 to Cov(a_k, b_k) and gives each replica's two
    deviations covariance -q12 (the law of :func:`outer_covariance`)."""
    v1, v2 = model.q0[0] - q1, model.q0[1] - q2
    u = normals
    L = mean_pair_cholesky(q1=q1, q2=q2, cross=model.cross + q12)
    a, b = L[0, 0] * u[..., 0:2], L[1, 0] * u[..., 0:2] + L[1, 1] * u[..., 2:4]
    D = psd_cholesky(np.array([[max(v1, 0.0), -q12], [-q12, max(v2, 0.0)]]))
    ys = []
    for k in (4, 8):
        e1, e2 = u[..., k:k + 2], u[..., k + 2:k + 4]
        xi, x = a + D[0, 0] * e1, b + D[1, 0] * e1 + D[1, 1] * e2
        ys.append(_diagonal_outputs(xi[..., 0], xi[..., 1], x[..., 0], x[..., 1], model=model))
    y0 = _diagonal_outputs(a[..., 0], a[..., 1], b[..., 0], b[..., 1], model=model)
    (p1, p2), (r1_, r2_) = ys
    bayes = (p1 - r1_) ** 2 + (p2 - r2_) ** 2
    plug = ((p1 - y0[0]) ** 2 + (p2 - y0[1]) ** 2 + (r1_ - y0[0]) ** 2 + (r2_ - y0[1]) ** 2)
    return np.stack([bayes.mean(axis=1), plug.mean(axis=1)], axis=1)


def generalisation_error(model: DeepAimSE, *, q1: float, q2: float, m: int = 14,
                         scrambles: int = 8, seed: int = 0,
                         q12: float = 0.0) -> dict[str, Estimate]:
    """Bayes-optimal e_gen = E_omega E_{h|omega} ||y(h) - E[y|omega]||_F^2 (THEORY 1.5) at overlaps
    (q1, q2), estimated as E||y(h) - y(h')||_F^2 / 2 with h, h' independent given omega (no inner
    integral), and the plug-in error E||y(h) - y(omega)||_F^2 (a different quantity, larger),
    both by randomised QMC in 12 dimensions (scrambled Sobol, 2^m points x ``scrambles``);
    error COVERAGE standard errors over scrambles. q_l = Q0_l gives 0 exactly. ``q12``: a
    cross-overlap q'_12 of the fluctuating parts (0 in the SE; :func:`cross_overlap_output_effect`),
    with |q12| < sqrt(V1 V2)."""
    _check_q(model, q1, q2, closed=True)
    _check_q12(model, q1, q2, q12)
    sums = _egen_sums(model, q1, q2, _sobol_normals(m, scrambles, seed, d=12), q12=q12)
    out = {}
    for i, name in enumerate(("e_gen", "e_gen_plugin")):
        f = sums[:, i]
        se = standard_error(f)
        out[name] = Estimate(float(f.mean()), COVERAGE * se,
                             "randomised QMC (scrambled Sobol, 12 dimensions)",
                             extra={"standard_error": se, "points": 2**m, "scrambles": scrambles})
    return out


def _check_q12(model: DeepAimSE, q1: float, q2: float, q12: float) -> None:
    """q12 = 0, or |q12| < sqrt(V1 V2) and q12^2 <= (q1 - q_min_1)(q2 - q_min_2): the 2 x 2 laws
    of the deviations and of the means' fluctuating parts stay positive semi-definite."""
    v1, v2 = model.q0[0] - q1, model.q0[1] - q2
    lo = model.q_min
    require(math.isfinite(q12) and (q12 == 0 or (q12 * q12 < v1 * v2 and q12 * q12
                                                  <= (q1 - lo[0]) * (q2 - lo[1]))),
            "q12", "0, or |q12| < sqrt(V1 V2) and <= sqrt((q1 - q_min_1)(q2 - q_min_2))", q12)


def _egen_at(model: DeepAimSE, *, q: list[float], q_error: list[float], m: int, scrambles: int,
             seed: int) -> dict[str, Estimate]:
    """e_gen at a fixed point: :func:`generalisation_error` plus |d e_gen / d q_l| q_error_l
    (central differences on the same point set)."""
    normals = _sobol_normals(m, scrambles, seed, d=12)
    slope = []
    for i in range(2):
        d = 1e-3 * min(q[i] - model.q_min[i], model.q0[i] - q[i])
        if d <= 0:
            slope.append(np.zeros(2))
            continue
        qp, qm = list(q), list(q)
        qp[i] += d
        qm[i] -= d
        slope.append((_egen_sums(model, qp[0], qp[1], normals).mean(axis=0)
                      - _egen_sums(model, qm[0], qm[1], normals).mean(axis=0)) / (2 * d))
    est = generalisation_error(model, q1=q[0], q2=q[1], m=m, scrambles=scrambles, seed=seed)
    out = {}
    for j, name in enumerate(("e_gen", "e_gen_plugin")):
        prop = float(sum(abs(slope[i][j]) * q_error[i] for i in range(2)))
        e = est[name]
        out[name] = Estimate(e.value, e.error + prop, e.method,
                             extra={**e.extra, "from_fixed_point_error": prop})
    return out


def generalisation_error_mc(model: DeepAimSE, *, q1: float, q2: float, outer: int = 4000,
                            inner: int = 64, seed: int = 0,
                            q12: float = 0.0) -> dict[str, Estimate]:
    """Independent route for :func:`generalisation_error`: nested seeded Monte Carlo on the
    matrices themselves (no whitening, no reduction to z): omega^l_ab ~ N(0, (1 + delta_ab) q_l)
    (shared tokens: omega^l = sqrt(rho_l) U + sqrt(q_l - rho_l) N^l with U common to the layers),
    ``inner`` draws H^l = omega^l + N(0, (1 + delta_ab) V_l) per omega, A = c I + softmax_beta(H1),
    y = softmax_beta(A H2 A^T) row-wise; e_gen = E_omega of the unbiased sample variance summed over
    the entries of y; plug-in E||y(H) - y(omega)||_F^2. Standard error over omega. ``q12``: a
    cross-overlap, drawn entrywise: the fluctuating parts of omega^1, omega^2 get covariance
    q12 (1 + delta_ab), the two deviations H^l - omega^l covariance -q12 (1 + delta_ab)."""
    require(outer >= 2 and inner >= 2, "outer, inner", "integers >= 2", (outer, inner))
    rng = np.random.default_rng(seed)
    c, beta = model.skip, model.beta

    def sym(v):
        return np.stack([np.stack([v[..., 0], v[..., 1]], -1),
                         np.stack([v[..., 1], v[..., 2]], -1)], -2)

    def row_softmax(mat):
        e = np.exp(beta * (mat - mat.max(axis=-1, keepdims=True)))
        return e / e.sum(axis=-1, keepdims=True)

    def output(h1, h2):
        a = c * np.eye(2) + row_softmax(sym(h1))
        return row_softmax(a @ sym(h2) @ np.swapaxes(a, -1, -2))

    scale = np.sqrt(np.array([2.0, 1.0, 2.0]))
    v1, v2 = model.q0[0] - q1, model.q0[1] - q2
    _check_q(model, q1, q2, closed=True)
    _check_q12(model, q1, q2, q12)
    lo = model.q_min if model.design == "shared" else (0.0, 0.0)
    # the fluctuating parts of the means (variances q_l - rho_l or q_l, covariance q12) and the
    # deviations (variances V_l, covariance -q12), each a 2 x 2 law per entry
    F = psd_cholesky(np.array([[max(q1 - lo[0], 0.0), q12], [q12, max(q2 - lo[1], 0.0)]]))
    G = psd_cholesky(np.array([[max(v1, 0.0), -q12], [-q12, max(v2, 0.0)]]))
    f = scale * rng.standard_normal((2, outer, 1, 3))
    om1, om2 = F[0, 0] * f[0], F[1, 0] * f[0] + F[1, 1] * f[1]
    if model.design == "shared":
        common = scale * rng.standard_normal((outer, 1, 3))
        om1 = math.sqrt(model.rho1) * common + om1
        om2 = math.sqrt(model.rho2) * common + om2
    g = scale * rng.standard_normal((2, outer, inner, 3))
    h1 = om1 + G[0, 0] * g[0]
    h2 = om2 + G[1, 0] * g[0] + G[1, 1] * g[1]
    y = output(h1, h2)
    bayes = y.var(axis=1, ddof=1).sum(axis=(-1, -2))
    plug = ((y - output(om1, om2)) ** 2).sum(axis=(-1, -2)).mean(axis=1)
    return {name: mean_estimate(f, "nested monte carlo on the matrices (standard error)",
                                outer=outer, inner=inner, seed=seed)
            for name, f in (("e_gen", bayes), ("e_gen_plugin", plug))}


# ---------------------------------------------------------------- curve

def curve(model: DeepAimSE, *, alphas, m: int = 9, progress=None,
          v_init: tuple[float, float] = (1.0, 1.0), done: Sequence[dict] = (),
          on_row: Callable[[list[dict]], None] | None = None,
          progress_iter: Callable[[int, list[float], float], None] | None = None,
          **kw) -> list[dict]:
    """The SE branch from the uninformed start (THEORY 1.6): the fixed point at each alpha in
    the given order, each warm-started from the previous alpha's (mmse_1, mmse_2) (floored at
    1e-4; the first from ``v_init``). One row per alpha: the dict of :func:`fixed_point` (alpha,
    per layer q, q_hat, mmse with errors, phi, e_gen, e_gen_plugin, perfect_recovery, stable).
    ``progress(k, n, text)`` is called before each alpha and at the end. Resuming: ``done``,
    rows of an earlier call with the same model and points, is reused for the leading alphas it
    matches in order (the warm start continues from its last row); ``on_row(rows)`` is called
    after each newly computed row with all rows so far (e.g. to store them); ``progress_iter``
    goes to :func:`fixed_point` as its per-iteration ``progress``."""
    alphas = [float(a) for a in alphas]
    require(len(alphas) > 0, "alphas", "a non-empty list", alphas)
    for a in alphas:
        _check_alpha(a)
    rows, v, reuse = [], tuple(v_init), True
    for k, alpha in enumerate(alphas):
        reuse = reuse and k < len(done) and done[k].get("alpha") == alpha
        if reuse:
            row = done[k]
            if progress is not None:
                progress(k, len(alphas), f"alpha = {alpha:g} (resumed: stored row)")
            rows.append(row)
        else:
            if progress is not None:
                progress(k, len(alphas), f"alpha = {alpha:g}")
            row = fixed_point(model, alpha=alpha, v_init=v, m=m, progress=progress_iter, **kw)
            rows.append(row)
            if on_row is not None:
                on_row(list(rows))
        v = tuple(min(max(x["mmse"], 1e-4), 1.0) for x in row["layers"])
    if progress is not None:
        progress(len(alphas), len(alphas), "done")
    return rows


# ---------------------------------------------------------------- Monte Carlo route

def se_step_mc(model: DeepAimSE, *, alpha: float, q1: float, q2: float, samples: int = 20_000,
               inner: int = 4000, batches: int = 20, seed: int = 0) -> dict[str, Estimate]:
    """One SE step by seeded plain Monte Carlo (independent route): truths (a, xi, b, x) from the
    Gaussian laws, posterior means by self-normalised importance sampling from xi ~ N(a, V1 I) in two
    independent halves (their product has no squared-noise bias), standard error over batches.
    With shared tokens the means carry an explicitly drawn common part (not the Cholesky factor
    of the RQMC route). Returns E1, E2, the cross term E12 = E[g_1 . g_2] and q_hat_l =
    2 alpha E_l."""
    _check_alpha(alpha)
    _check_q(model, q1, q2)
    require(samples >= batches >= 2, "samples", f">= batches (= {batches}) >= 2", samples)
    require(inner >= 4 and inner % 2 == 0, "inner", "an even integer >= 4", inner)
    rng = np.random.default_rng(seed)
    v1, v2 = model.q0[0] - q1, model.q0[1] - q2
    per = samples // batches
    res = {"E1": [], "E2": [], "E12": []}
    t0 = time.perf_counter()
    for _ in range(batches):
        u = rng.standard_normal((8, per))
        if model.design == "shared":
            # explicit common part: a = sqrt(rho1) c + N(0, q1 - rho1), b = sqrt(rho2) c + ...
            c = rng.standard_normal((2, per))
            a = math.sqrt(model.rho1) * c + math.sqrt(max(q1 - model.rho1, 0.0)) * u[0:2]
            b = math.sqrt(model.rho2) * c + math.sqrt(max(q2 - model.rho2, 0.0)) * u[2:4]
        else:
            a = math.sqrt(q1) * u[0:2]
            b = math.sqrt(q2) * u[2:4]
        xt, yt = a + math.sqrt(v1) * u[4:6], b + math.sqrt(v2) * u[6:8]
        z1, z2 = statistics(xt[0], xt[1], yt[0], yt[1], skip=model.skip, beta=model.beta)
        halves = []
        for _h in range(2):
            s = rng.standard_normal((2, inner // 2, 1))
            xi1, xi2 = a[0][None, :] + math.sqrt(v1) * s[0], a[1][None, :] + math.sqrt(v1) * s[1]
            mu, kappa = layer1_weights(xi1, xi2, skip=model.skip, beta=model.beta)
            x1, x2 = fibre_point(mu, kappa, z1[None, :], z2[None, :], skip=model.skip)
            with np.errstate(divide="ignore", invalid="ignore"):
                logw = (-((x1 - b[0][None, :]) ** 2 + (x2 - b[1][None, :]) ** 2) / (2.0 * v2)
                        - 3.0 * np.log(np.abs(mu)))
            logw = np.where(np.isfinite(logw), logw, -np.inf)
            e = np.exp(logw - logw.max(axis=0))
            n = e.sum(axis=0)
            x1, x2 = np.nan_to_num(x1), np.nan_to_num(x2)
            halves.append((((xi1 * e).sum(0) / n - a[0]) / v1, ((xi2 * e).sum(0) / n - a[1]) / v1,
                           ((x1 * e).sum(0) / n - b[0]) / v2, ((x2 * e).sum(0) / n - b[1]) / v2))
        h1, h2 = halves
        res["E1"].append(np.mean(h1[0] * h2[0] + h1[1] * h2[1]))
        res["E2"].append(np.mean(h1[2] * h2[2] + h1[3] * h2[3]))
        res["E12"].append(np.mean(0.5 * (h1[0] * h2[2] + h1[1] * h2[3] + h2[0] * h1[2]
                                         + h2[1] * h1[3])))
    secs = time.perf_counter() - t0
    out = {}
    for k, vals in res.items():
        out[k] = mean_estimate(vals, "monte carlo (standard error)", samples=per * batches,
                               inner=inner, seed=seed, seconds=secs)
    for i in (1, 2):
        e = out[f"E{i}"]
        out[f"q_hat{i}"] = Estimate(2 * alpha * e.value, 2 * alpha * e.error, e.method, extra=e.extra)
    return out


# ---------------------------------------------------------------- identity checks
def run_checks(model: DeepAimSE, *, seed: int = 4) -> list[dict]:
    """The identity checks of THEORY 4 for two tied attention layers at finite width
    (``aim-sym check --model aim --layers 2``): g_out of each layer against central differences
    of log Z_out in every omega entry; Z_out a normalised density of z; omega = 0, V = 1 against
    the small-width fibre of :mod:`.deep_aim`; Nishimori per layer and stationarity of Phi in
    each overlap (RQMC, within twice the combined bars). Each row: name, passed, detail."""
    from .deep_aim import posterior_means

    rows = []
    z1 = np.array([0.5, 1e-2, 3.0, -2.0, 7.0])
    z2 = np.array([0.3, 1e-2, -1.0, 4.0, -6.0])
    rng = np.random.default_rng(seed)
    om1, om2 = 0.6 * rng.standard_normal(3), 0.6 * rng.standard_normal(3)
    v1, v2 = 0.7, 0.45

    def logz(o1, o2):
        return z_out(z1, z2, model=model, a=whiten(o1), b=whiten(o2), v1=v1, v2=v2,
                     h_in=0.1)["log_z_out"]

    r = z_out(z1, z2, model=model, a=whiten(om1), b=whiten(om2), v1=v1, v2=v2, h_in=0.1)
    g = (unwhiten_gradient(r["g1"]), unwhiten_gradient(r["g2"]))
    worst, h = 0.0, 1e-5
    for k in range(3):
        e = np.zeros(3)
        e[k] = h
        fd = ((logz(om1 + e, om2) - logz(om1 - e, om2)) / (2 * h),
              (logz(om1, om2 + e) - logz(om1, om2 - e)) / (2 * h))
        worst = max(worst, float(np.max(np.abs(g[0][:, k] - fd[0]))),
                    float(np.max(np.abs(g[1][:, k] - fd[1]))))
    rows.append({"name": "g_out = d log Z_out / d omega (both layers)", "passed": bool(worst < 1e-6),
                 "detail": f"max |g - central difference| = {worst:.1e} over 5 z x 6 entries "
                           "(step 1e-5, tol 1e-6)"})
    # the density of z is singular at z = 0 where det A can vanish (c <= 1): a sinh map of
    # scale 0.3 puts nodes down to |z| ~ 1e-2 and out to 0.3 sinh(10) ~ 3e3, row by row
    t = np.arange(-10.0, 10.0 + 1e-9, 0.07)
    zz, w = 0.3 * np.sinh(t), 0.07 * 0.3 * np.cosh(t)
    mass = sum(w[i] * float(w @ z_out(np.full(zz.size, zz[i]), zz, model=model, a=[0.4, -0.3],
                                      b=[0.2, 0.5], v1=0.5, v2=0.6, h_in=0.25)["z_out"])
               for i in range(zz.size))
    rows.append({"name": "Z_out is a density of z", "passed": bool(abs(mass - 1) < 1e-4),
                 "detail": f"integral over the z plane = {mass:.8f} (sinh-mapped trapezoid, "
                           "tol 1e-4)"})
    r0 = z_out(z1, z2, model=model, a=[0.0, 0.0], b=[0.0, 0.0], v1=1.0, v2=1.0, h_in=0.1)
    d0 = posterior_means(z1, z2, skip=model.skip, beta=model.beta, h_in=0.1)
    err = float(np.max(np.abs(r0["z_out"] - d0["z_out"]) / d0["z_out"]))
    rows.append({"name": "omega = 0, V = 1 is the small-width fibre", "passed": bool(err < 1e-6),
                 "detail": f"max relative |Z_out - deep_aim's| = {err:.1e} (tol 1e-6)"})
    q1, q2 = model.rho1 + 0.3, model.rho2 + 0.6        # V = (0.7, 0.4), q_l > rho_l
    ov = output_overlaps(model, q1=q1, q2=q2, m=8, scrambles=6, steps=(0.45, 0.35))
    for i in (1, 2):
        e, n = ov[f"E{i}"], ov[f"nishimori_{i}"]
        tol = 2 * math.hypot(e.error, n.error)
        rows.append({"name": f"nishimori, layer {i}", "passed": bool(abs(e.value - n.value) < tol),
                     "detail": f"E|g_{i}|^2 = {e.value:.5f} against E[(h - omega).g_{i}]/V = "
                               f"{n.value:.5f} (tol {tol:.1e}: twice the combined bars)"})
    st = stationarity(model, q1=q1, q2=q2, m=8, scrambles=6)
    for i in (1, 2):
        d, hE = st[f"dpsi_dq{i}"], st[f"half_E{i}"]
        tol = 2 * math.hypot(d.error, hE.error)
        rows.append({"name": f"stationarity in q_{i}", "passed": bool(abs(d.value - hE.value) < tol),
                     "detail": f"d Psi_out / d q_{i} = {d.value:.4f} against E_{i}/2 = "
                               f"{hE.value:.4f} (tol {tol:.1e})"})
    return rows
