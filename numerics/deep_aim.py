"""Deep AIM with two tied attention layers at T = 2: the noiseless fibre and the per-layer
small-width quantities S_l (THEORY 1.6, checked here; 1.2 and 1.4 for S and alpha_bar_c).

Model at q = 0, V = 1 (small width): H1, H2 symmetric 2 x 2, h_ab ~ N(0, 1 + delta_ab);
A = skip I + softmax_beta(H1) row-wise; M = A H2 A^T; y = softmax_beta(M) row-wise.

Reduction (derived in docs/deep_aim.md, each step a test). With l = (1, -1):
- A 1 = (1 + skip) 1 and l^T A = mu l^T, mu = skip + p + r - 1, p = A_11 - skip, r = A_22 - skip,
  so det A = (1 + skip) mu.
- y is equivalent to z = (z1, z2) = (l^T M l, l^T M 1) = (M11 + M22 - 2 M12, M11 - M22); the
  invisible direction is M + t 1 1^T (row shifts that keep M symmetric).
- z1 = mu^2 X, z2 = mu ((1 + skip) Y + kappa X), kappa = p - r, with X = l^T H2 l ~ N(0, 8),
  Y = l^T H2 1 ~ N(0, 4) independent, and W = 1^T H2 1 independent of (X, Y, H1): unseen.
- H1 enters only through d1 = h11 - h12, d2 = h22 - h12; whitened, xi1 = (d1 + d2)/sqrt 8,
  xi2 = (d1 - d2)/2 (iid N(0, 1)); the third whitened direction of H1 is unseen.
Given H1 and z, H2's seen part is fixed: X = z1/mu^2, Y = (z2/mu - kappa z1/mu^2)/(1 + skip). So
Z_out(z) = E_H1[(1 + skip)^-1 |mu|^-3 N(z1/mu^2; 0, 8) N(Y; 0, 4)] (a 2D Gaussian integral), and

  S_1 = E_z[E[xi1|z]^2 + E[xi2|z]^2],   S_2 = E_z[E[X|z]^2/8 + E[Y|z]^2/4],

each <= 2 (posterior covariance: the unseen whitened direction keeps variance 1), so
alpha_bar_c,l = 1/(2 S_l) >= 1/4, approached by layer 2 as skip -> infinity (one-layer softmax).
At skip = 0, (mu, kappa) -> (-mu, -kappa) is H1 -> -H1 and leaves the law of z | H1 unchanged:
S_1 = 0 exactly. With output noise delta on every entry of y the sufficient statistics are
s_a = tanh(beta u_a / 2) + N(0, 2 delta), u_a = M_aa - M_ab (Monte Carlo route only).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from .records import Estimate, mean_estimate, require

SQRT2 = math.sqrt(2.0)
SQRT8 = math.sqrt(8.0)
#: half-width of the trapezoid rule in units of the standard deviation (tail mass < 1e-17)
TRAPEZOID_HALF_WIDTH = 8.5
#: the outer rule starts at |z| = exp(-LOG_Z_MIN)
LOG_Z_MIN = 40.0
#: tanh-sinh parameter range [-T, T]
TANH_SINH_T = 4.0
#: the inner rule resolves |mu| down to exp(-LOG_MU_MAX) times the piece's end
LOG_MU_MAX = 46.0


@dataclass(frozen=True)
class DeepAim:
    """Two tied attention layers at T = 2: skip strength ``skip`` (c), inverse temperature ``beta``,
    output noise ``delta`` (0: noiseless) on every entry of y."""

    skip: float
    beta: float = 1.0
    delta: float = 0.0

    def __post_init__(self) -> None:
        require(math.isfinite(self.skip) and self.skip >= 0, "skip", "a finite number >= 0", self.skip)
        require(math.isfinite(self.beta) and self.beta > 0, "beta", "a finite number > 0", self.beta)
        require(math.isfinite(self.delta) and self.delta >= 0, "delta", "a finite number >= 0",
                self.delta)


# ---------------------------------------------------------------- the model, literally

def softmax_rows(m: np.ndarray, *, beta: float) -> np.ndarray:
    """Row-wise softmax of beta m (last two axes are the T x T matrix)."""
    x = beta * m
    x = x - x.max(axis=-1, keepdims=True)
    e = np.exp(x)
    return e / e.sum(axis=-1, keepdims=True)


def attention_matrix(h1: np.ndarray, *, skip: float, beta: float) -> np.ndarray:
    """A = skip I + softmax_beta(H1) row-wise."""
    return skip * np.eye(h1.shape[-1]) + softmax_rows(h1, beta=beta)


def output(h1: np.ndarray, h2: np.ndarray, *, skip: float, beta: float) -> np.ndarray:
    """y = softmax_beta(A H2 A^T) row-wise (noiseless)."""
    a = attention_matrix(h1, skip=skip, beta=beta)
    return softmax_rows(a @ h2 @ np.swapaxes(a, -1, -2), beta=beta)


def statistics_from_output(y: np.ndarray, *, beta: float) -> tuple[np.ndarray, np.ndarray]:
    """(z1, z2) = (u1 + u2, u1 - u2), u_a = M_aa - M_ab = logit(y_aa)/beta (T = 2)."""
    u1 = np.log(y[..., 0, 0] / y[..., 0, 1]) / beta
    u2 = np.log(y[..., 1, 1] / y[..., 1, 0]) / beta
    return u1 + u2, u1 - u2


def congruence_jacobian(a: np.ndarray) -> np.ndarray:
    """The 3 x 3 matrix of H -> A H A^T on symmetric 2 x 2 matrices, coordinates (h11, h12, h22)."""
    basis = [np.array([[1.0, 0.0], [0.0, 0.0]]), np.array([[0.0, 1.0], [1.0, 0.0]]),
             np.array([[0.0, 0.0], [0.0, 1.0]])]
    cols = []
    for e in basis:
        m = a @ e @ a.T
        cols.append([m[0, 0], m[0, 1], m[1, 1]])
    return np.array(cols).T


# ---------------------------------------------------------------- the reduced fibre

def layer1_weights(xi1: np.ndarray, xi2: np.ndarray, *, skip: float, beta: float
                   ) -> tuple[np.ndarray, np.ndarray]:
    """(mu, kappa) of H1 given its whitened seen coordinates (xi1, xi2)."""
    d1 = SQRT2 * xi1 + xi2
    d2 = SQRT2 * xi1 - xi2
    p = 0.5 * (1.0 + np.tanh(0.5 * beta * d1))
    r = 0.5 * (1.0 + np.tanh(0.5 * beta * d2))
    return skip + p + r - 1.0, p - r


def statistics(xi1, xi2, x, y, *, skip: float, beta: float) -> tuple[np.ndarray, np.ndarray]:
    """z = (mu^2 X, mu ((1 + skip) Y + kappa X)) from the seen coordinates of H1 and H2."""
    mu, kappa = layer1_weights(xi1, xi2, skip=skip, beta=beta)
    return mu**2 * x, mu * ((1.0 + skip) * y + kappa * x)


def _log_fibre(mu, kappa, z1, z2, skip):
    """log of |mu|^-3 N(X; 0, 8) N(Y; 0, 4) / (1 + skip) at the fibre point, and (X, Y)."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        x = z1 / mu**2
        y = (z2 / mu - kappa * x) / (1.0 + skip)
        logw = (-3.0 * np.log(np.abs(mu)) - x**2 / 16.0 - y**2 / 8.0
                - math.log(1.0 + skip) - math.log(2.0 * math.pi * 4.0 * SQRT2))
    logw = np.where(np.isfinite(logw), logw, -np.inf)
    return logw, np.nan_to_num(x), np.nan_to_num(y)


def _inner_rule_xi(h_in: float, skip: float, beta: float) -> tuple[np.ndarray, ...]:
    """2D trapezoid rule over the whitened seen coordinates of H1 (nodes beyond radius L dropped:
    their prior mass is below exp(-L^2/2)). Resolves mu only on the scale h_in: fine for
    skip >= 1, where mu = 0 is never crossed."""
    t, w = _trapezoid(h_in)
    a1, a2 = (v.ravel() for v in np.meshgrid(t, t, indexing="ij"))
    wt = np.outer(w, w).ravel()
    keep = a1**2 + a2**2 <= TRAPEZOID_HALF_WIDTH**2
    a1, a2, wt = a1[keep], a2[keep], wt[keep]
    mu, kappa = layer1_weights(a1, a2, skip=skip, beta=beta)
    return mu, kappa, a1, a2, wt


def _tanh_sinh(h: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Nodes s = expit(2u), 1 - s, u = (pi/2) sinh t, and ds/dt, trapezoid in t on
    [-TANH_SINH_T, TANH_SINH_T] (endpoints approached to 1e-37)."""
    t = np.arange(-TANH_SINH_T, TANH_SINH_T + 0.5 * h, h)
    u = 0.5 * math.pi * np.sinh(t)
    s = 1.0 / (1.0 + np.exp(-2.0 * u))
    sc = 1.0 / (1.0 + np.exp(2.0 * u))
    return s, sc, h * 2.0 * s * sc * 0.5 * math.pi * np.cosh(t)


def _inner_rule_mu(h_in: float, skip: float, beta: float) -> tuple[np.ndarray, ...]:
    """2D tanh-sinh rule in (mu, kappa), where the singular set mu = 0 of det A is a line:
    mu in (skip - 1, skip + 1) split at skip and, when skip < 1, at 0 (log-uniform panels down to
    |mu| ~ 1e-20 next to mu = 0, tanh-sinh elsewhere), kappa (tanh-sinh) in
    |kappa| < 1 - |mu - skip|. Weights carry H1's prior density in these coordinates,
    phi_2(d1, d2) / (2 beta^2 p (1 - p) r (1 - r)), d = logit(p, r)/beta."""
    s, sc, ds = _tanh_sinh(h_in)
    lo, hi = skip - 1.0, skip + 1.0
    # split at mu = skip too: the kappa range 1 - |mu - skip| has a kink there
    if lo >= 0:
        pieces = [(lo, skip), (skip, hi)]
    elif skip == 0:
        pieces = [(lo, 0.0), (0.0, hi)]
    else:
        pieces = [(lo, 0.0), (0.0, skip), (skip, hi)]
    mus, dmus = [], []
    for a, b in pieces:
        if a == 0.0 or b == 0.0:
            # log-uniform towards mu = 0 on the inner half (|mu| = |end| e^-w), tanh-sinh on the
            # outer half, where the support may end (p or r -> 0 or 1)
            far = b if a == 0.0 else a
            end = 0.5 * far
            w, dw = _log_panels(h_in)
            mus += [end * np.exp(-w), end + (far - end) * s]
            dmus += [abs(end) * np.exp(-w) * dw, abs(far - end) * ds]
        else:
            mus.append(a + (b - a) * s)
            dmus.append(abs(b - a) * ds)
    mu, dmu = np.concatenate(mus), np.concatenate(dmus)
    half = 1.0 - np.abs(mu - skip)
    tk = 2.0 * s - 1.0                            # kappa / half
    m, k = (v.ravel() for v in np.meshgrid(mu, tk, indexing="ij"))
    h2 = np.repeat(half, tk.size)
    kappa = h2 * k
    wt = np.outer(dmu * half, ds * 2.0).ravel()
    sp = 0.5 * (m + 1.0 - skip)                   # (p + r)/2
    p, r = sp + 0.5 * kappa, sp - 0.5 * kappa
    with np.errstate(divide="ignore", invalid="ignore"):
        d1 = np.log(p / (1.0 - p)) / beta
        d2 = np.log(r / (1.0 - r)) / beta
        logf = (-(3.0 * d1**2 - 2.0 * d1 * d2 + 3.0 * d2**2) / 16.0
                - np.log(2.0 * math.pi * SQRT8 * 2.0 * beta**2 * p * (1.0 - p) * r * (1.0 - r)))
        wt = wt * np.exp(logf)
    keep = np.isfinite(wt) & (wt > 0)
    d1, d2 = d1[keep], d2[keep]
    return m[keep], kappa[keep], (d1 + d2) / SQRT8, (d1 - d2) / 2.0, wt[keep]


def _log_panels(h: float) -> tuple[np.ndarray, np.ndarray]:
    """Composite 8-point Gauss-Legendre on w in [0, LOG_MU_MAX], panels of width 2.5 h: w = -log
    of |mu| over the piece's end, so the walls exp(-z1^2/(16 mu^4)) are resolved at every scale."""
    x, wx = np.polynomial.legendre.leggauss(8)
    width = 2.5 * h
    edges = np.arange(0.0, LOG_MU_MAX, width)
    nodes = (edges[:, None] + 0.5 * width * (x[None, :] + 1.0)).ravel()
    return nodes, np.tile(0.5 * width * wx, edges.size)


INNER_RULES = {"trapezoid-xi": _inner_rule_xi, "tanh-sinh-mu": _inner_rule_mu}


def posterior_means(z1: np.ndarray, z2: np.ndarray, *, skip: float, beta: float,
                    h_in: float = 0.25, rule: str = "tanh-sinh-mu") -> dict[str, np.ndarray]:
    """Z_out(z) (density of z) and the posterior means E[xi1|z], E[xi2|z], E[X|z]/sqrt 8,
    E[Y|z]/2 of the noiseless fibre, by an inner rule of step h_in over H1's seen part."""
    mu, kappa, a1, a2, wt = _rule_cached(rule, h_in, skip, beta)
    z1, z2 = np.atleast_1d(z1), np.atleast_1d(z2)
    logw, x, y = _log_fibre(mu[:, None], kappa[:, None], z1[None, :], z2[None, :], skip)
    top = logw.max(axis=0)
    e = wt[:, None] * np.exp(logw - top[None, :])
    norm = e.sum(axis=0)
    return {"xi1": (a1 @ e) / norm, "xi2": (a2 @ e) / norm,
            "x": (x * e).sum(axis=0) / norm / SQRT8, "y": (y * e).sum(axis=0) / norm / 2.0,
            "z_out": norm * np.exp(top)}


@lru_cache(maxsize=8)
def _rule_cached(rule: str, h_in: float, skip: float, beta: float) -> tuple[np.ndarray, ...]:
    return INNER_RULES[rule](h_in, skip, beta)


def _trapezoid(h: float, half_width: float = TRAPEZOID_HALF_WIDTH) -> tuple[np.ndarray, np.ndarray]:
    """Trapezoid nodes of step h on [-L, L] with N(0, 1) weights: geometric convergence in 1/h for
    integrands analytic in a strip (the logistic functions of H1), unlike Gauss-Hermite."""
    x = np.arange(-half_width, half_width + 0.5 * h, h)
    return x, h * np.exp(-0.5 * x**2) / math.sqrt(2.0 * math.pi)


def _outer_rule(skip: float, h_out: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Nodes and weights on the quadrant z1, z2 > 0 (the integrands are even in z1 and in z2:
    H2 -> -H2 and the token swap), each coordinate z = exp(sinh t), trapezoid in t: double
    exponential at both ends, so the peak of Z_out at z = 0 (skip <= 1) and the Gaussian tail are
    both resolved. t runs from z = exp(-LOG_Z_MIN) (the strips below have probability
    O(exp(-LOG_Z_MIN / 2)) ~ 2e-9: |z1| < eps needs mu^2 or |X| below eps, |z2| < eps needs |mu|
    or |(1 + skip) Y + kappa X| below eps) up to 14 standard deviations of the widest conditional
    law of z."""
    sd = (1.0 + skip) ** 2 * SQRT8 + (1.0 + skip) * (2.0 * (1.0 + skip) + SQRT8)
    t_lo, t_hi = math.asinh(-LOG_Z_MIN), math.asinh(math.log(14.0 * sd))
    t = np.arange(t_lo, t_hi + 0.5 * h_out, h_out)
    z = np.exp(np.sinh(t))
    w = 2.0 * h_out * z * np.cosh(t)      # 2: the mirror half-line
    t1, t2 = (v.ravel() for v in np.meshgrid(z, z, indexing="ij"))
    return t1, t2, np.outer(w, w).ravel()


#: (h_out, h_in) of the coarse and fine rules
DEFAULT_STEPS = {"trapezoid-xi": ((0.06, 0.35), (0.04, 0.25)),
                 "tanh-sinh-mu": ((0.08, 0.25), (0.06, 0.2))}


def _overlaps_fibre(skip: float, beta: float, h_out: float, h_in: float, rule: str,
                    chunk: int = 512):
    z1, z2, wz = _outer_rule(skip, h_out)
    sums = dict.fromkeys(("xi1", "xi2", "x", "y", "mass", "mean_xi1"), 0.0)
    for s in range(0, wz.size, chunk):
        m = posterior_means(z1[s:s + chunk], z2[s:s + chunk], skip=skip, beta=beta, h_in=h_in,
                            rule=rule)
        ww = wz[s:s + chunk] * m["z_out"]
        for k in ("xi1", "xi2", "x", "y"):
            sums[k] += float(ww @ m[k] ** 2)
        sums["mass"] += float(ww.sum())
        sums["mean_xi1"] += float(ww @ m["xi1"])
    return {"S1": sums["xi1"] + sums["xi2"], "S2": sums["x"] + sums["y"], "mass": sums["mass"],
            "mean_xi1": sums["mean_xi1"]}


def small_width_overlaps(model: DeepAim, *,
                         steps: tuple[tuple[float, float], tuple[float, float]] | None = None,
                         rule: str | None = None) -> dict[str, Estimate]:
    """S_1, S_2 and alpha_bar_c,l = 1/(2 S_l) of the noiseless channel (THEORY 1.2, 1.6):
    S = integral dz Z_out(z) E[.|z]^2, outer trapezoid in sinh-mapped z, inner trapezoid over H1's
    seen part (the fibre): "trapezoid-xi" for skip >= 1, "tanh-sinh-mu" (graded at det A = 0) for
    skip < 1. Error = |fine - coarse| over the two (h_out, h_in) steps; ``mass`` is
    integral Z_out dz (must be 1) and ``mean_xi1`` is E_y E[xi1|y] (must be 0)."""
    require(model.delta == 0, "delta", "0 for the fibre rule (use small_width_overlaps_mc)",
            model.delta)
    if rule is None:
        rule = "trapezoid-xi" if model.skip >= 1 else "tanh-sinh-mu"
    require(rule in INNER_RULES, "rule", f"one of {sorted(INNER_RULES)}", rule)
    if steps is None:
        steps = DEFAULT_STEPS[rule]
    t0 = time.perf_counter()
    coarse, fine = (_overlaps_fibre(model.skip, model.beta, *st, rule) for st in steps)
    secs = time.perf_counter() - t0
    out = {}
    for k in ("S1", "S2", "mass", "mean_xi1"):
        err = abs(fine[k] - coarse[k])
        out[k] = Estimate(fine[k], err, f"fibre quadrature ({rule}), two steps",
                          extra={"steps": steps, "seconds": secs})
    for k in ("S1", "S2"):
        a = 1.0 / (2.0 * fine[k])
        out["alpha_bar_" + k[1]] = Estimate(a, a * out[k].error / fine[k], "1/(2 S)",
                                            extra={"seconds": secs})
    return out


# ---------------------------------------------------------------- Monte Carlo route

def small_width_overlaps_mc(model: DeepAim, *, samples: int = 20000, inner: int = 4000,
                            batches: int = 20, seed: int = 0) -> dict[str, Estimate]:
    """S_1, S_2 by seeded Monte Carlo: truth (H1, H2) and, for noise, its noisy output drawn from
    the prior; posterior means by self-normalised importance sampling from the prior with two
    independent halves of ``inner`` draws (the product of the halves removes the squared-noise
    bias). Noiseless: the inner draws are H1 only (the fibre fixes H2's seen part); with noise
    delta on every entry of y: (H1, X, Y), and the sufficient statistics are
    s_a = tanh(beta u_a / 2) + N(0, 2 delta). Error = standard error over ``batches`` batches,
    each with fresh inner draws."""
    require(samples >= batches >= 2, "samples", f">= batches (= {batches}) >= 2", samples)
    require(inner >= 4 and inner % 2 == 0, "inner", "an even integer >= 4", inner)
    rng = np.random.default_rng(seed)
    c, beta, delta = model.skip, model.beta, model.delta
    per = samples // batches
    res = {k: [] for k in ("S1", "S2", "mean_xi1")}
    t0 = time.perf_counter()
    for _ in range(batches):
        t = rng.standard_normal((4, per))
        z1, z2 = statistics(t[0], t[1], SQRT8 * t[2], 2.0 * t[3], skip=c, beta=beta)
        if delta > 0:
            o1, o2 = _clean_obs(z1, z2, beta)
            sd = math.sqrt(2.0 * delta)
            obs = (o1 + sd * rng.standard_normal(per), o2 + sd * rng.standard_normal(per))
        halves = []
        for _h in range(2):
            s = rng.standard_normal((4, inner // 2))
            mu, kappa = layer1_weights(s[0], s[1], skip=c, beta=beta)
            if delta == 0:
                logw, x, y = _log_fibre(mu[:, None], kappa[:, None], z1[None, :], z2[None, :], c)
                x, y = x / SQRT8, y / 2.0
            else:
                w1, w2 = statistics(s[0], s[1], SQRT8 * s[2], 2.0 * s[3], skip=c, beta=beta)
                pred = np.stack(_clean_obs(w1, w2, beta))
                logw = -((obs[0][None, :] - pred[0][:, None]) ** 2
                         + (obs[1][None, :] - pred[1][:, None]) ** 2) / (4.0 * delta)
                x = np.broadcast_to(s[2][:, None], logw.shape)
                y = np.broadcast_to(s[3][:, None], logw.shape)
            e = np.exp(logw - logw.max(axis=0))
            n = e.sum(axis=0)
            halves.append({"xi1": (s[0] @ e) / n, "xi2": (s[1] @ e) / n,
                           "x": (x * e).sum(axis=0) / n, "y": (y * e).sum(axis=0) / n})
        h1, h2 = halves
        res["S1"].append(np.mean(h1["xi1"] * h2["xi1"] + h1["xi2"] * h2["xi2"]))
        res["S2"].append(np.mean(h1["x"] * h2["x"] + h1["y"] * h2["y"]))
        res["mean_xi1"].append(np.mean(0.5 * (h1["xi1"] + h2["xi1"])))
    secs = time.perf_counter() - t0
    out = {}
    for k, v in res.items():
        out[k] = mean_estimate(v, "monte carlo (standard error)", samples=per * batches,
                               inner=inner, seed=seed, seconds=secs)
    for k in ("S1", "S2"):
        s = out[k]
        a = 1.0 / (2.0 * s.value)
        out["alpha_bar_" + k[1]] = Estimate(a, a * s.error / s.value, "1/(2 S) monte carlo",
                                            extra=s.extra)
    return out


def _clean_obs(z1, z2, beta):
    u1, u2 = 0.5 * (z1 + z2), 0.5 * (z1 - z2)
    return np.tanh(0.5 * beta * u1), np.tanh(0.5 * beta * u2)


# ---------------------------------------------------------------- integrability (item 1)

def z_out_cutoff(z1: float, z2: float, *, model: DeepAim, cutoff: float,
                 h_in: float = 0.15) -> float:
    """Z_out(z) (the density of z) with the set |mu| < cutoff of H1 removed (mu = det A/(1 + skip)),
    on the inner rule graded towards mu = 0 (THEORY 1.6 integrability check)."""
    require(model.delta == 0, "delta", "0 (the fibre is the noiseless channel)", model.delta)
    require(cutoff >= 0, "cutoff", ">= 0", cutoff)
    mu, kappa, _, _, wt = _rule_cached("tanh-sinh-mu", h_in, model.skip, model.beta)
    keep = np.abs(mu) >= cutoff
    logw, _, _ = _log_fibre(mu[keep], kappa[keep], z1, z2, model.skip)
    return float(wt[keep] @ np.exp(logw))
