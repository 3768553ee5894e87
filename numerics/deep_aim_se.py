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

The expectation (over a, b and the truth's deviations, 8 Gaussian dimensions) is a randomised
quasi-Monte Carlo average (scrambled Sobol, independent scrambles give the standard error); the
inner 2D integral over xi is a trapezoid rule in t = (xi - a)/sqrt(V1) for skip >= 1 (mu never
vanishes; step refined by sqrt(V2/V1) when V2 < V1, at most MAX_REFINE times) and, for
skip < 1, the rule of numerics/deep_aim.py graded towards det A = 0,
reweighted from N(0, I) to N(a, V1 I).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy.special import expit, ndtri
from scipy.stats import qmc

from . import wishart
from .deep_aim import _rule_cached
from .records import ConvergenceError, Estimate, require

SQRT2 = math.sqrt(2.0)
SQRT8 = math.sqrt(8.0)
#: the inner trapezoid keeps nodes with |t| <= INNER_RADIUS (Gaussian mass outside: 2.3e-11)
INNER_RADIUS = 7.0
#: bars are COVERAGE standard errors over scrambles (Student t with 7 degrees of freedom: ~96 %)
#: plus the deterministic rule differences
COVERAGE = 2.5
#: the inner step is refined by sqrt(V2/V1) when V2 < V1, by at most this factor
MAX_REFINE = 3.0
#: (coarse, fine) inner steps, in units of sqrt(V1) (skip >= 1) or of the graded rule (skip < 1)
INNER_STEPS = (0.35, 0.25)


@dataclass(frozen=True)
class DeepAimSE:
    """Two tied attention layers at T = 2 (THEORY 1.6): skip strength ``skip`` (c), rank ratios
    ``rho1``, ``rho2`` of the two targets, inverse temperature ``beta``; noiseless output."""

    skip: float
    rho1: float
    rho2: float
    beta: float = 1.0

    def __post_init__(self) -> None:
        require(math.isfinite(self.skip) and self.skip >= 0, "skip", "a finite number >= 0",
                self.skip)
        for name in ("rho1", "rho2", "beta"):
            v = getattr(self, name)
            require(math.isfinite(v) and v > 0, name, "a finite number > 0", v)

    @property
    def q0(self) -> tuple[float, float]:
        """(Q0_1, Q0_2) = (1 + rho1, 1 + rho2) (THEORY 1.1)."""
        return 1.0 + self.rho1, 1.0 + self.rho2


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


def _nodes(model: DeepAimSE, a1, a2, v1: float, v2: float, h_in: float):
    """Per outer point (rows) the inner nodes xi (columns), their log-weights for N(a, V1 I) and
    (mu, kappa)."""
    c, beta = model.skip, model.beta
    a1, a2 = np.asarray(a1, float)[:, None], np.asarray(a2, float)[:, None]
    s = math.sqrt(v1)
    if c >= 1.0:
        # the fibre likelihood has width ~ sqrt(V2) in xi: refine the step when V2 < V1 (at most
        # MAX_REFINE times; beyond, the two-step rule error grows and shows in the bars)
        t1, t2, w = _trapezoid_t(h_in * max(min(1.0, math.sqrt(v2 / v1)), 1.0 / MAX_REFINE))
        xi1, xi2 = a1 + s * t1[None, :], a2 + s * t2[None, :]
        logw = np.broadcast_to(np.log(w)[None, :], xi1.shape)
        mu, kappa = layer1_weights(xi1, xi2, skip=c, beta=beta)
        return xi1, xi2, logw, mu, kappa
    # skip < 1: nodes of the graded (mu, kappa) rule, whose weights carry N(xi; 0, I2);
    # reweight to N(xi; a, V1 I2)
    mu0, kappa0, x1, x2, w0 = _rule_cached("tanh-sinh-mu", h_in, c, beta)
    xi1, xi2 = np.broadcast_to(x1[None, :], (a1.shape[0], x1.size)), \
        np.broadcast_to(x2[None, :], (a1.shape[0], x1.size))
    logw = (np.log(w0)[None, :] + 0.5 * (x1**2 + x2**2)[None, :]
            - ((xi1 - a1) ** 2 + (xi2 - a2) ** 2) / (2.0 * v1) - math.log(v1))
    mu = np.broadcast_to(mu0[None, :], xi1.shape)
    kappa = np.broadcast_to(kappa0[None, :], xi1.shape)
    return xi1, xi2, logw, mu, kappa


def _posterior(model: DeepAimSE, z1, z2, a1, a2, b1, b2, v1: float, v2: float, h_in: float):
    """log Z_out and the posterior means E[xi - a | z], E[x* - b | z] for rows of outer points."""
    xi1, xi2, logw, mu, kappa = _nodes(model, a1, a2, v1, v2, h_in)
    a1, a2 = np.asarray(a1, float)[:, None], np.asarray(a2, float)[:, None]
    z1, z2 = np.asarray(z1, float)[:, None], np.asarray(z2, float)[:, None]
    b1, b2 = np.asarray(b1, float)[:, None], np.asarray(b2, float)[:, None]
    x1, x2 = fibre_point(mu, kappa, z1, z2, skip=model.skip)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        logl = (logw - ((x1 - b1) ** 2 + (x2 - b2) ** 2) / (2.0 * v2) - 3.0 * np.log(np.abs(mu))
                - math.log(2.0 * math.pi * v2 * 4.0 * SQRT2 * (1.0 + model.skip)))
    logl = np.where(np.isfinite(logl), logl, -np.inf)
    top = logl.max(axis=1, keepdims=True)
    e = np.exp(logl - top)
    n = e.sum(axis=1)
    x1, x2 = np.nan_to_num(x1), np.nan_to_num(x2)

    def mean(f):
        return (f * e).sum(axis=1) / n

    return {"log_z_out": np.log(n) + top[:, 0],
            "d_xi": np.stack([mean(xi1) - a1[:, 0], mean(xi2) - a2[:, 0]], axis=-1),
            "d_x": np.stack([mean(x1) - b1[:, 0], mean(x2) - b2[:, 0]], axis=-1)}


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
    p = _posterior(model, z1, z2, a[:, 0], a[:, 1], b[:, 0], b[:, 1], v1, v2, h_in)
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
    return Estimate(float(f.mean()), float(f.std(ddof=1) / math.sqrt(samples)),
                    "monte carlo over xi (standard error)", extra={"samples": samples, "seed": seed})


# ---------------------------------------------------------------- output side of the SE

def _sobol_normals(m: int, scrambles: int, seed: int) -> np.ndarray:
    """(scrambles, 2^m, 8) standard normals from independently scrambled Sobol sequences."""
    out = []
    for s in range(scrambles):
        u = qmc.Sobol(d=8, scramble=True, seed=np.random.default_rng([seed, s])).random_base2(m)
        out.append(ndtri(np.clip(u, 1e-300, 1.0 - 2.0**-53)))
    return np.stack(out)


def _output_sums(model: DeepAimSE, q1: float, q2: float, h_in: float, normals: np.ndarray,
                 chunk: int = 256) -> np.ndarray:
    """Per scramble: the RQMC means of |E[xi - a|z]|^2/V1^2, |E[x* - b|z]|^2/V2^2 (E|g_l|^2) and of
    the Nishimori forms (xi_true - a).E[xi - a|z]/V1^2, (x_true - b).E[x* - b|z]/V2^2."""
    v1, v2 = model.q0[0] - q1, model.q0[1] - q2
    r, n, _ = normals.shape
    out = np.zeros((r, 4))
    s1, s2, r1, r2 = math.sqrt(q1), math.sqrt(q2), math.sqrt(v1), math.sqrt(v2)
    for k in range(r):
        acc = np.zeros(4)
        for st in range(0, n, chunk):
            u = normals[k, st:st + chunk]
            a, b = s1 * u[:, 0:2], s2 * u[:, 2:4]
            e1, e2 = r1 * u[:, 4:6], r2 * u[:, 6:8]
            z1, z2 = statistics(a[:, 0] + e1[:, 0], a[:, 1] + e1[:, 1], b[:, 0] + e2[:, 0],
                                b[:, 1] + e2[:, 1], skip=model.skip, beta=model.beta)
            p = _posterior(model, z1, z2, a[:, 0], a[:, 1], b[:, 0], b[:, 1], v1, v2, h_in)
            acc += [np.sum(p["d_xi"] ** 2), np.sum(p["d_x"] ** 2),
                    np.sum(e1 * p["d_xi"]), np.sum(e2 * p["d_x"])]
        out[k] = acc / n / np.array([v1 * v1, v2 * v2, v1 * v1, v2 * v2])
    return out


def output_overlaps(model: DeepAimSE, *, q1: float, q2: float, m: int = 10, scrambles: int = 8,
                    seed: int = 0, steps: tuple[float, float] = INNER_STEPS) -> dict[str, Estimate]:
    """E_l = E|g_l|^2 = E[sum_{a<=b} (1 + delta_ab) (g^l_ab)^2] for l = 1, 2 at overlaps (q1, q2)
    (THEORY 1.6), randomised QMC over 8 dimensions (2^m points x ``scrambles``). Error = COVERAGE
    standard errors over scrambles + |fine - coarse| of the inner rule (``steps``, same points). Also
    ``nishimori_l`` = E[(h_true - omega).g_l]/V_l, equal to E_l for the exact posterior."""
    _check_q(model, q1, q2)
    normals = _sobol_normals(m, scrambles, seed)
    t0 = time.perf_counter()
    coarse = _output_sums(model, q1, q2, steps[0], normals)
    fine = _output_sums(model, q1, q2, steps[1], normals)
    secs = time.perf_counter() - t0
    out = {}
    for i, name in enumerate(("E1", "E2", "nishimori_1", "nishimori_2")):
        f = fine[:, i]
        se = float(f.std(ddof=1) / math.sqrt(f.size)) if f.size > 1 else float("nan")
        rule = abs(float(f.mean() - coarse[:, i].mean()))
        out[name] = Estimate(float(f.mean()), COVERAGE * se + rule,
                             "randomised QMC (scrambled Sobol) + inner trapezoid, two steps",
                             extra={"standard_error": se, "rule_error": rule,
                                    "per_scramble": f.tolist(), "points": 2**m,
                                    "scrambles": scrambles, "seconds": secs})
    return out


def _check_q(model: DeepAimSE, q1: float, q2: float) -> None:
    for name, q, q0 in (("q1", q1, model.q0[0]), ("q2", q2, model.q0[1])):
        require(math.isfinite(q) and 0 <= q < q0, name, f"in [0, Q0 = {q0:g})", q)


# ---------------------------------------------------------------- the SE map and fixed points

def _prior_step(q_hat: float, rho: float) -> float:
    """mmse_rho(1/q_hat) (THEORY 1.1); 1 at q_hat = 0."""
    return 1.0 if q_hat <= 0 else float(wishart.mmse(1.0 / q_hat, rho=rho))


def se_map(model: DeepAimSE, *, alpha: float, q1: float, q2: float, m: int = 10,
           scrambles: int = 8, seed: int = 0, h_in: float = INNER_STEPS[1]) -> dict[str, np.ndarray]:
    """One SE step (THEORY 1.6) per scramble: q_hat_l = 2 alpha E|g_l|^2 and the new mmse_l; arrays
    over scrambles (their mean is the RQMC estimate)."""
    _check_alpha(alpha)
    _check_q(model, q1, q2)
    sums = _output_sums(model, q1, q2, h_in, _sobol_normals(m, scrambles, seed))
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


def _map_mean(model, alpha, v, normals, h_in):
    q1, q2 = model.q0[0] - v[0], model.q0[1] - v[1]
    sums = _output_sums(model, q1, q2, h_in, normals)
    e = sums[:, :2].mean(axis=0)
    p = _prior_side(model, alpha, [e[0]], [e[1]])
    return np.array([p["mmse1"][0], p["mmse2"][0]]), sums


def fixed_point(model: DeepAimSE, *, alpha: float, v_init: tuple[float, float], m: int = 10,
                scrambles: int = 8, seed: int = 0, tol: float = 1e-7, max_iter: int = 60,
                v_floor: float = 1e-7, steps: tuple[float, float] = INNER_STEPS) -> dict:
    """The SE fixed point (V1, V2) = (mmse_1, mmse_2) reached from ``v_init`` (THEORY 1.6), with
    the RQMC point set held fixed (so the map is deterministic): plain iteration until the step is
    below 5 % of V, or both V_l shrink by steady factors below 1 (geometric approach to V = 0),
    or 12 steps, then chord-Newton steps on V - F(V) (Jacobian by central
    differences, refreshed every 4 steps). Both V_l below ``v_floor`` is reported as the
    perfect-recovery fixed point V = 0 (stable iff alpha > alpha_PR). Errors:
    COVERAGE RQMC standard errors over scrambles and the inner-rule difference, each propagated
    through (I - J)^-1, plus the last step. Returns a plain dict: per layer q, q_hat, mmse and their
    errors, stability (Jacobian eigenvalues), iterations, seconds."""
    _check_alpha(alpha)
    for v in v_init:
        require(0 < v <= 1, "v_init", "pairs in (0, 1]", v_init)
    t0 = time.perf_counter()
    normals = _sobol_normals(m, scrambles, seed)
    h = steps[1]
    v = np.array(v_init, float)
    apr = perfect_recovery_alpha(model)
    history, jac, since, plain = [], None, 0, True
    step = np.ones(2)
    for _ in range(max_iter):
        fv, _ = _map_mean(model, alpha, v, normals, h)
        history.append(v.tolist())
        step = fv - v
        if plain and (np.all(np.abs(step) < 0.05 * v) or len(history) >= 12
                      or _geometric_to_zero(history + [fv.tolist()])):
            plain = False
        if plain:
            vn = np.clip(fv, 1e-300, 1.0)
        else:
            if jac is None or since >= 4:
                jac, since = _jacobian(model, alpha, v, normals, h, fv), 0
            since += 1
            try:
                dv = np.linalg.solve(np.eye(2) - jac, step)
            except np.linalg.LinAlgError:
                dv = step
            vn = np.clip(v + dv, 0.05 * v, np.minimum(1.0, 2.0 * v))
        if np.all(vn < v_floor):
            return _pr_result(model, alpha, apr, v_init, history + [vn.tolist()],
                              time.perf_counter() - t0)
        done = np.max(np.abs(vn - v)) < tol
        v = vn
        if done:
            break
    else:
        raise ConvergenceError("deep AIM SE did not converge", last_iterate=v.tolist(),
                               residual=float(np.max(np.abs(step))))
    return _finite_result(model, alpha, v, normals, steps, v_init, len(history), t0)


def _geometric_to_zero(history: list, rel: float = 0.03) -> bool:
    """The last three plain steps shrink both V_l by factors below 1 that agree within ``rel``."""
    if len(history) < 4:
        return False
    h = np.array(history[-4:])
    f = h[1:] / h[:-1]
    return bool(np.all(f < 1) and np.all(np.abs(f[1:] - f[:-1]) < rel * f[1:]))


def _jacobian(model, alpha, v, normals, h, fv, rel: float = 1e-4):
    jac = np.zeros((2, 2))
    for j in range(2):
        d = rel * v[j]
        vp, vm = v.copy(), v.copy()
        vp[j] += d
        vm[j] -= d
        jac[:, j] = (_map_mean(model, alpha, vp, normals, h)[0]
                     - _map_mean(model, alpha, vm, normals, h)[0]) / (2 * d)
    return jac


def _finite_result(model, alpha, v, normals, steps, v_init, iterations, t0) -> dict:
    fv, sums = _map_mean(model, alpha, v, normals, steps[1])
    _, sums_c = _map_mean(model, alpha, v, normals, steps[0])
    jac = _jacobian(model, alpha, v, normals, steps[1], fv)
    inv = np.linalg.inv(np.eye(2) - jac)
    # each scramble's map value at v, minus the mean: the RQMC noise of F, propagated
    per = _prior_side(model, alpha, sums[:, 0], sums[:, 1])
    dev = np.stack([per["mmse1"], per["mmse2"]], axis=1) - fv[None, :]
    se = np.sqrt(((dev @ inv.T) ** 2).sum(axis=0) / (dev.shape[0] * (dev.shape[0] - 1)))
    fc = _prior_side(model, alpha, [sums_c[:, 0].mean()], [sums_c[:, 1].mean()])
    rule = np.abs(inv @ (np.array([fc["mmse1"][0], fc["mmse2"][0]]) - fv))
    err = COVERAGE * se + rule + np.abs(fv - v)
    e = sums[:, :2].mean(axis=0)
    e_se = sums[:, :2].std(axis=0, ddof=1) / math.sqrt(sums.shape[0])
    eig = np.linalg.eigvals(jac)
    layers = []
    for i in range(2):
        q_hat = 2 * alpha * e[i]
        layers.append({"q": model.q0[i] - v[i], "q_error": float(err[i]), "mmse": float(v[i]),
                       "mmse_error": float(err[i]), "q_hat": float(q_hat),
                       "q_hat_error": float(2 * alpha * (COVERAGE * e_se[i]
                                                         + abs(e[i] - sums_c[:, i].mean()))),
                       "rho": (model.rho1, model.rho2)[i]})
    return {"alpha": alpha, "layers": layers, "perfect_recovery": False,
            "stable": bool(np.max(np.abs(eig)) < 1), "jacobian_eigenvalues": eig.tolist(),
            "init_mmse": list(v_init), "iterations": iterations,
            "standard_error": se.tolist(), "rule_error": rule.tolist(),
            "seconds": time.perf_counter() - t0}


def _pr_result(model, alpha, apr, v_init, history, secs) -> dict:
    layers = [{"q": q0, "q_error": 0.0, "mmse": 0.0, "mmse_error": 0.0, "q_hat": math.inf,
               "q_hat_error": 0.0, "rho": rho}
              for q0, rho in zip(model.q0, (model.rho1, model.rho2))]
    return {"alpha": alpha, "layers": layers, "perfect_recovery": True, "stable": alpha > apr,
            "alpha_PR": apr, "init_mmse": list(v_init), "iterations": len(history),
            "last_mmse": history[-1], "seconds": secs}


def fixed_points(model: DeepAimSE, *, alpha: float,
                 inits: tuple[tuple[float, float], ...] = ((1.0, 1.0), (1e-3, 1e-3), (1e-3, 1.0),
                                                           (1.0, 1e-3)),
                 **kw) -> list[dict]:
    """Fixed points of the deep AIM SE from several initial (mmse_1, mmse_2): uninformed (1, 1),
    i.e. q_l = rho_l, informed (1e-3, 1e-3) and one layer informed; all are returned (THEORY 1.6)."""
    return [fixed_point(model, alpha=alpha, v_init=init, **kw) for init in inits]


# ---------------------------------------------------------------- Monte Carlo route

def se_step_mc(model: DeepAimSE, *, alpha: float, q1: float, q2: float, samples: int = 20_000,
               inner: int = 4000, batches: int = 20, seed: int = 0) -> dict[str, Estimate]:
    """One SE step by seeded plain Monte Carlo (independent route): truths (a, xi, b, x) from the
    Gaussian laws, posterior means by self-normalised importance sampling from xi ~ N(a, V1 I) in two
    independent halves (their product has no squared-noise bias), standard error over batches.
    Returns E1, E2 and q_hat_l = 2 alpha E_l."""
    _check_alpha(alpha)
    _check_q(model, q1, q2)
    require(samples >= batches >= 2, "samples", f">= batches (= {batches}) >= 2", samples)
    require(inner >= 4 and inner % 2 == 0, "inner", "an even integer >= 4", inner)
    rng = np.random.default_rng(seed)
    v1, v2 = model.q0[0] - q1, model.q0[1] - q2
    per = samples // batches
    res = {"E1": [], "E2": []}
    t0 = time.perf_counter()
    for _ in range(batches):
        u = rng.standard_normal((8, per))
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
    secs = time.perf_counter() - t0
    out = {}
    for k, vals in res.items():
        vals = np.asarray(vals)
        out[k] = Estimate(float(vals.mean()), float(vals.std(ddof=1) / math.sqrt(vals.size)),
                          "monte carlo (standard error)",
                          extra={"samples": per * batches, "inner": inner, "seed": seed,
                                 "seconds": secs})
    for i in (1, 2):
        e = out[f"E{i}"]
        out[f"q_hat{i}"] = Estimate(2 * alpha * e.value, 2 * alpha * e.error, e.method, extra=e.extra)
    return out
