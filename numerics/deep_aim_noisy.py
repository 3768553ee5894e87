"""Deep AIM, two tied attention layers at T = 2, with Gaussian output noise at finite width
(THEORY 1.1, 1.6; docs/deep_aim.md, "Output noise" and "Finite width").

Model: y = softmax_beta(A H2 A^T) + sqrt(Delta) N(0, I) on every entry of y, A = skip I +
softmax_beta(H1). For T = 2 the clean rows are (s_a, 1 - s_a) up to order, so the sufficient
statistics are o_a = y_aa - y_ab = tanh(beta u_a / 2) + N(0, 2 Delta), u_1 = (z1 + z2)/2,
u_2 = (z1 - z2)/2 with z = (mu^2 X, mu ((1 + skip) Y + kappa X)) (numerics/deep_aim.py); the
sums y_aa + y_ab carry no information on H. H1 and H2 enter only through their whitened seen
parts xi = (xi1, xi2) and x = (X/sqrt 8, Y/2) (numerics/deep_aim_se.py), so with a, b their means
and V1, V2 their variances

  Z_out(o | a, b, V1, V2) = E_{xi ~ N(a, V1 I2), x ~ N(b, V2 I2)} N(o1; s1, 2 Delta) N(o2; s2, 2 Delta),

a bounded smooth density of o for every skip (no fibre, no singular set), and
g_1 = E[xi - a | o]/V1, g_2 = E[x - b | o]/V2. The output overlaps are
E_l = E|g_l|^2 = (2 V_l - E tr Cov_l[. | o]) / V_l^2 (law of total variance, the "variance form"
of deep_aim_se), with the mean-square form E|E[. - omega | o]|^2 / V_l^2 and the Nishimori form
E[(truth - omega) . g_l] / V_l on the same points.

Rules. Outer: randomised QMC over the 10 Gaussian dimensions (a, b, the truth's deviations, the
two noises), scrambled Sobol, 2^m points x ``scrambles`` independent scrambles (standard error
over scrambles). Inner (4 dimensions): self-normalised importance sampling from the prior
N(a, V1 I) x N(b, V2 I) on a scrambled Sobol set of K points, a fresh scramble per outer
scramble (so its random error is part of the standard error). Its ratio bias (O(1/K) or faster
for RQMC) is bounded by computing every quantity also on the first K/4 points of the same set
(a nested Sobol net): the bar is COVERAGE standard errors + |value(K) - value(K/4)|, which
covers the K-point bias whenever the bias falls at least like 1/K. Tensor Gauss-Hermite inner
rules were tried and converge only algebraically (tanh(beta u / 2) saturates on a scale of
t much smaller than the prior's: u has a prior standard deviation up to ~10 at skip = 1).

Shared tokens (deep_aim_se module docstring): both layers read the same tokens, so the means
(a, b) and the truths share the common part sqrt(rho_l) u; per whitened coordinate Cov(a_k, b_k) =
Cov(xi_k, x_k) = sqrt(rho1 rho2) (``design="shared"``, the default, with the widths ``rho``), the
deviations staying independent. The cross term E[g_1 . g_2] (q_hat_12 / (2 alpha), the conjugate
of the neglected cross-overlap) is reported in three forms beside E_l, and the first-order effect
of that cross-overlap q'_12 is added to the fixed point's bars (:func:`add_cross_overlap_term_noisy`:
the noisy output side at q'_12, :func:`_cross_sums`, in the generic response
:func:`cross_overlap_response`; e_gen and Phi through deep_aim_se.cross_overlap_output_effect),
as deep_aim_se does for the noiseless engine.

SE (THEORY 1.6): q_hat_l = 2 alpha E_l, mmse_l = mmse_{rho_l}(1/q_hat_l), V_l = mmse_l,
q_l = Q0_l - V_l, solved with the point sets held fixed (a deterministic map) by plain iteration
and chord-Newton steps, the bars propagated through (I - J)^-1 as in deep_aim_se.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import numpy as np
from scipy.special import expit, ndtri
from scipy.stats import qmc

from . import wishart
from .deep_aim_se import (
    DESIGNS,
    DeepAimSE,
    cross_step,
    cross_term_in_bars,
    generalisation_error,
    mean_pair_cholesky,
    prior_potential,
    psd_cholesky,
)
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
#: bars: COVERAGE standard errors over scrambles (Student t, 7 degrees of freedom: ~96 %) plus
#: the inner-size difference
COVERAGE = 2.5
#: inner importance-sampling sizes (coarse, fine); the coarse set is the head of the fine one
INNER_SIZES = (2**11, 2**13)
#: names of the per-point quantities (columns of the sums)
QUANTITIES = ("E1", "E2", "mean_square_1", "mean_square_2", "nishimori_1", "nishimori_2",
              "psi_out", "cross", "cross_mean_square", "cross_nishimori")



def _prefix_weights(ll: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Self-normalised importance weights of the first ``k`` inner points from their
    log-likelihoods ``ll`` (rows: outer points): exp(ll - row max), its row sums, and the log of
    the mean likelihood (log Z up to the likelihood's constant)."""
    lk = ll[:, :k]
    top = lk.max(axis=1, keepdims=True)
    e = np.exp(lk - top)
    n = e.sum(axis=1)
    return e, n, np.log(n / k) + top[:, 0]

def _check_inputs(q1, q2, V1, V2, Delta, skip, beta) -> None:
    for name, v in (("q1", q1), ("q2", q2)):
        require(math.isfinite(v) and v >= 0, name, "a finite number >= 0", v)
    for name, v in (("V1", V1), ("V2", V2), ("Delta", Delta), ("beta", beta)):
        require(math.isfinite(v) and v > 0, name, "a finite number > 0", v)
    require(math.isfinite(skip) and skip >= 0, "skip", "a finite number >= 0", skip)


def clean_observations(xi1, xi2, x1, x2, *, skip: float, beta: float):
    """(s1, s2) = (tanh(beta u_1/2), tanh(beta u_2/2)) = y_aa - y_ab of the clean output, from the
    whitened seen parts xi of H1 and x of H2 (u_a = M_aa - M_ab; module docstring)."""
    p = expit(beta * (SQRT2 * xi1 + xi2))
    r = expit(beta * (SQRT2 * xi1 - xi2))
    mu, kappa = skip + p + r - 1.0, p - r
    big_x, big_y = SQRT8 * x1, 2.0 * x2
    z1 = mu * mu * big_x
    z2 = mu * ((1.0 + skip) * big_y + kappa * big_x)
    return np.tanh(0.25 * beta * (z1 + z2)), np.tanh(0.25 * beta * (z1 - z2))


def _sobol_normals(m: int, d: int, key: list[int]) -> np.ndarray:
    """(2^m, d) standard normals from one scrambled Sobol net seeded by ``key``."""
    u = qmc.Sobol(d=d, scramble=True, seed=np.random.default_rng(key)).random_base2(m)
    return ndtri(np.clip(u, 1e-300, 1.0 - 2.0**-53))


def _posterior_sums(o1, o2, a, b, V1, V2, t, *, skip, beta, Delta, sizes, u_true):
    """For each inner size K in ``sizes`` (heads of the inner set t, shape (4, K_max)): per outer
    point the quantities of :data:`QUANTITIES`, summed over the outer points of this chunk."""
    s1, s2 = math.sqrt(V1), math.sqrt(V2)
    xi1 = a[:, 0:1] + s1 * t[0][None, :]
    xi2 = a[:, 1:2] + s1 * t[1][None, :]
    x1 = b[:, 0:1] + s2 * t[2][None, :]
    x2 = b[:, 1:2] + s2 * t[3][None, :]
    c1, c2 = clean_observations(xi1, xi2, x1, x2, skip=skip, beta=beta)
    ll = -((o1[:, None] - c1) ** 2 + (o2[:, None] - c2) ** 2) / (4.0 * Delta)
    out = []
    for k in sizes:
        e, n, log_mean = _prefix_weights(ll, k)
        tk = t[:, :k]
        mean = (e @ tk.T) / n[:, None]                    # E[t | o], (chunk, 4)
        second = (e @ (tk * tk).T) / n[:, None]
        var = second - mean**2
        mixed = (e @ np.stack([tk[0] * tk[2], tk[1] * tk[3]]).T) / n[:, None]
        cov12 = mixed[:, 0] - mean[:, 0] * mean[:, 2] + mixed[:, 1] - mean[:, 1] * mean[:, 3]
        s12 = math.sqrt(V1 * V2)
        ms12 = (mean[:, 0] * mean[:, 2] + mean[:, 1] * mean[:, 3]) / s12
        ni12 = 0.5 * (u_true[:, 0] * mean[:, 2] + u_true[:, 1] * mean[:, 3]
                      + u_true[:, 2] * mean[:, 0] + u_true[:, 3] * mean[:, 1]) / s12
        tr1, tr2 = V1 * (var[:, 0] + var[:, 1]), V2 * (var[:, 2] + var[:, 3])
        ms1 = (mean[:, 0] ** 2 + mean[:, 1] ** 2) / V1
        ms2 = (mean[:, 2] ** 2 + mean[:, 3] ** 2) / V2
        ni1 = (u_true[:, 0] * mean[:, 0] + u_true[:, 1] * mean[:, 1]) / V1
        ni2 = (u_true[:, 2] * mean[:, 2] + u_true[:, 3] * mean[:, 3]) / V2
        log_z = log_mean - math.log(4.0 * math.pi * Delta)
        out.append([np.sum(2.0 * V1 - tr1) / V1**2, np.sum(2.0 * V2 - tr2) / V2**2,
                    ms1.sum(), ms2.sum(), ni1.sum(), ni2.sum(), log_z.sum(),
                    -np.sum(cov12) / s12, ms12.sum(), ni12.sum()])
    return np.array(out)


def _output_sums(*, q1, q2, V1, V2, Delta, skip, beta, m, scrambles, seed, sizes,
                 chunk: int = 32, cross: float = 0.0) -> np.ndarray:
    """(len(sizes), scrambles, len(QUANTITIES)): per inner size and outer scramble the RQMC means
    of the per-point quantities. Outer point, per whitened coordinate: (a, b) = L (u, u'), L the
    square root of [[q1, cross], [cross, q2]] (``cross`` = sqrt(rho1 rho2) with shared tokens),
    truth = mean + sqrt(V) u'', o = clean(truth) + sqrt(2 Delta) u3."""
    res = np.zeros((len(sizes), scrambles, len(QUANTITIES)))
    L = mean_pair_cholesky(q1=q1, q2=q2, cross=cross)
    kmax = max(sizes)
    for s in range(scrambles):
        u = _sobol_normals(m, 10, [seed, s])
        t = _sobol_normals(int(round(math.log2(kmax))), 4, [seed, s, 4]).T
        n = u.shape[0]
        for st in range(0, n, chunk):
            w = u[st:st + chunk]
            a = L[0, 0] * w[:, 0:2]
            b = L[1, 0] * w[:, 0:2] + L[1, 1] * w[:, 2:4]
            xi, x = a + math.sqrt(V1) * w[:, 4:6], b + math.sqrt(V2) * w[:, 6:8]
            c1, c2 = clean_observations(xi[:, 0], xi[:, 1], x[:, 0], x[:, 1], skip=skip, beta=beta)
            sd = math.sqrt(2.0 * Delta)
            o1, o2 = c1 + sd * w[:, 8], c2 + sd * w[:, 9]
            res[:, s] += _posterior_sums(o1, o2, a, b, V1, V2, t, skip=skip, beta=beta,
                                         Delta=Delta, sizes=sizes, u_true=w[:, 4:8])
        res[:, s] /= n
    return res


def _cross(rho, design: str, q1: float, q2: float) -> float:
    """sqrt(rho1 rho2) with shared tokens (needs q_l >= rho_l), 0 with independent ones."""
    require(design in DESIGNS, "design", f"one of {DESIGNS}", design)
    require(len(rho) == 2 and all(math.isfinite(r) and r >= 0 for r in rho), "rho",
            "two finite numbers >= 0", rho)
    if design == "independent":
        return 0.0
    for name, q, r in (("q1", q1, rho[0]), ("q2", q2, rho[1])):
        require(q >= r - 1e-12, name, f">= rho = {r:g} (shared tokens)", q)
    return math.sqrt(rho[0] * rho[1])


def output_e_noisy(*, q1: float, q2: float, V1: float, V2: float, Delta: float, skip: float,
                   beta: float = 1.0, m: int = 9, scrambles: int = 8, seed: int = 0,
                   sizes: tuple[int, int] = INNER_SIZES, rho: tuple[float, float] = (0.0, 0.0),
                   design: str = "shared") -> dict[str, Estimate]:
    """E_l = E|g_out,l|^2 = E[sum_{a<=b} (1 + delta_ab) (g^l_ab)^2] of the noisy deep AIM channel
    at means of variance q_l and posterior variances V_l (THEORY 1.1, 1.6; the SE has
    V_l = Q0_l - q_l, small width q = 0, V = 1). Keys: E1, E2 (variance form), mean_square_l,
    nishimori_l (other unbiased forms, equal to E_l for the exact posterior) and psi_out =
    E log Z_out(o) (o = (y_11 - y_12, y_22 - y_21), the informative statistics). Randomised QMC
    outside (2^m x ``scrambles``), importance sampling from the prior inside (``sizes`` = (K/4, K)
    nested Sobol sets); error = COVERAGE standard errors over scrambles + |value(K) - value(K/4)|
    (the ratio bias; module docstring). ``rho``, ``design``: the widths and the token design that
    set the outer law (shared tokens: Cov(a_k, b_k) = sqrt(rho1 rho2); rho = (0, 0), the default,
    is the small-width law); the cross term E[g_1 . g_2] in three forms: ``cross`` (variance form,
    -E tr Cov[xi, x | o]/(V1 V2)), ``cross_mean_square``, ``cross_nishimori``."""
    _check_inputs(q1, q2, V1, V2, Delta, skip, beta)
    cross = _cross(rho, design, q1, q2)
    require(isinstance(m, int) and 2 <= m <= 16, "m", "an integer in [2, 16]", m)
    require(isinstance(scrambles, int) and scrambles >= 2, "scrambles", "an integer >= 2",
            scrambles)
    require(len(sizes) == 2 and sizes[0] < sizes[1]
            and all(k >= 16 and k & (k - 1) == 0 for k in sizes), "sizes",
            "two increasing powers of 2 >= 16", sizes)
    t0 = time.perf_counter()
    res = _output_sums(q1=q1, q2=q2, V1=V1, V2=V2, Delta=Delta, skip=skip, beta=beta, m=m,
                       scrambles=scrambles, seed=seed, sizes=tuple(sizes), cross=cross)
    secs = time.perf_counter() - t0
    return _estimates(res, extra={"points": 2**m, "scrambles": scrambles, "sizes": tuple(sizes),
                                  "seconds": secs, "seed": seed})


def _estimates(res: np.ndarray, extra: dict) -> dict[str, Estimate]:
    coarse, fine = res[0], res[-1]
    return {name: refined_estimate(
        fine[:, i], coarse[:, i], coverage=COVERAGE, rule_key="inner_size_error",
        method="randomised QMC outside, prior importance sampling inside (two sizes)", **extra)
        for i, name in enumerate(QUANTITIES)}


def small_width_noisy(*, Delta: float, skip: float, beta: float = 1.0, **kw) -> dict[str, Estimate]:
    """S_l = E_l at q = 0, V = 1 and alpha_bar_c,l = 1/(2 S_l) (THEORY 1.2) of the noisy channel:
    the small-width weak-recovery thresholds of docs/deep_aim.md section 2 (noisy rows)."""
    e = output_e_noisy(q1=0.0, q2=0.0, V1=1.0, V2=1.0, Delta=Delta, skip=skip, beta=beta, **kw)
    out = {"S1": e["E1"], "S2": e["E2"]}
    for l in ("1", "2"):
        s = e["E" + l]
        ab = 1.0 / (2.0 * s.value)
        out["alpha_bar_" + l] = Estimate(ab, ab * s.error / (s.value - s.error)
                                         if s.value > s.error else math.inf,
                                         "1/(2 S)", extra=s.extra)
    return out


# ---------------------------------------------------------------- the SE and its fixed point

def _prior_step(q_hat: float, rho: float) -> float:
    """mmse_rho(1/q_hat) (THEORY 1.1); 1 at q_hat = 0."""
    return 1.0 if q_hat <= 0 else float(wishart.mmse(1.0 / q_hat, rho=rho))


class _NoisyMap:
    """The SE map V -> (mmse_1, mmse_2) with the outer and inner point sets held fixed."""

    def __init__(self, *, alpha, rho, Delta, skip, beta, m, scrambles, seed, sizes, design):
        self.alpha, self.rho, self.delta, self.skip, self.beta = alpha, rho, Delta, skip, beta
        self.cross = math.sqrt(rho[0] * rho[1]) if design == "shared" else 0.0
        self.m, self.scrambles, self.seed, self.sizes = m, scrambles, seed, tuple(sizes)
        self.q0 = (1.0 + rho[0], 1.0 + rho[1])
        self.calls = 0

    def sums(self, v: np.ndarray, sizes=None) -> np.ndarray:
        self.calls += 1
        return _output_sums(q1=self.q0[0] - v[0], q2=self.q0[1] - v[1], V1=float(v[0]),
                            V2=float(v[1]), Delta=self.delta, skip=self.skip, beta=self.beta,
                            m=self.m, scrambles=self.scrambles, seed=self.seed,
                            sizes=sizes or self.sizes[1:], cross=self.cross)

    def prior(self, e1: float, e2: float) -> np.ndarray:
        return np.array([_prior_step(2.0 * self.alpha * e1, self.rho[0]),
                         _prior_step(2.0 * self.alpha * e2, self.rho[1])])

    def __call__(self, v: np.ndarray) -> np.ndarray:
        e = self.sums(v)[-1][:, :2].mean(axis=0)
        return self.prior(e[0], e[1])

    def jacobian(self, v: np.ndarray, rel: float = 1e-4) -> np.ndarray:
        jac = np.zeros((2, 2))
        for j in range(2):
            d = rel * v[j]
            vp, vm = v.copy(), v.copy()
            vp[j] = min(v[j] + d, 1.0)      # mmse <= 1 (q_l >= rho_l, needed by shared tokens)
            vm[j] -= d
            jac[:, j] = (self(vp) - self(vm)) / (vp[j] - vm[j])
        return jac


def fixed_point_noisy(*, alpha: float, rho: tuple[float, float], Delta: float, skip: float,
                      beta: float = 1.0, init: tuple[float, float] = (1.0, 1.0), m: int = 9,
                      scrambles: int = 8, seed: int = 0, sizes: tuple[int, int] = INNER_SIZES,
                      tol: float = 1e-7, max_iter: int = 40, e_gen: bool = True,
                      design: str = "shared", cross_term: bool = True) -> dict:
    """The SE fixed point (V1, V2) = (mmse_1, mmse_2) of the noisy deep AIM reached from ``init``
    (THEORY 1.1, 1.6): plain iteration until the step is below 5 % of V (or 10 steps), then
    chord-Newton steps on V - F(V), on point sets held fixed. Errors (per layer): COVERAGE
    standard errors over scrambles of the map and its inner-size difference (K/4 against K),
    each propagated through (I - J)^-1, plus the last step. Returns per layer q, q_hat, mmse with
    errors, the Jacobian's eigenvalues, psi_out, the free entropy phi (its Psi_out is that of the
    density of o: it ranks fixed points at one alpha and Delta) and, with ``e_gen``, the Bayes generalisation
    error of the noisy output (clean part + 4 Delta, THEORY 1.5) and the clean part alone.
    ``design``: "shared" (both layers read the same tokens; default) or "independent" (module
    docstring). Also q_hat_12 = 2 alpha E[g_1 . g_2] (three forms) and cross_correlation =
    q_hat_12 / sqrt(q_hat_1 q_hat_2), the size of the neglected cross-overlap, and the map's
    ``jacobian``. ``cross_term``: add the cross-overlap's first-order term to the mmse, q, e_gen
    and Phi bars (:func:`add_cross_overlap_term_noisy`, reported under ``cross_overlap``; 0 for
    independent tokens)."""
    require(math.isfinite(alpha) and alpha > 0, "alpha", "a finite number > 0", alpha)
    require(len(rho) == 2 and all(math.isfinite(r) and r > 0 for r in rho), "rho",
            "two finite numbers > 0", rho)
    _check_inputs(0.0, 0.0, 1.0, 1.0, Delta, skip, beta)
    require(len(init) == 2 and all(0 < v <= 1 for v in init), "init", "two numbers in (0, 1]",
            init)
    require(design in DESIGNS, "design", f"one of {DESIGNS}", design)
    t0 = time.perf_counter()
    f = _NoisyMap(alpha=alpha, rho=tuple(rho), Delta=Delta, skip=skip, beta=beta, m=m,
                  scrambles=scrambles, seed=seed, sizes=sizes, design=design)
    v = np.array(init, float)
    jac, plain, step = None, True, np.ones(2)
    for it in range(max_iter):
        fv = f(v)
        step = fv - v
        if plain and (np.all(np.abs(step) < 0.05 * v) or it >= 10):
            plain = False
        if plain:
            vn = np.clip(fv, 1e-6, 1.0)
        else:
            if jac is None:
                jac = f.jacobian(v)
            dv = np.linalg.solve(np.eye(2) - jac, step)
            vn = np.clip(v + dv, 0.1 * v, np.minimum(1.0, 2.0 * v))
        done = np.max(np.abs(vn - v)) < tol
        v = vn
        if done:
            break
    else:
        raise ConvergenceError("noisy deep AIM SE did not converge", last_iterate=v.tolist(),
                               residual=float(np.max(np.abs(step))))
    res = f.sums(v, sizes=f.sizes)
    fine, coarse = res[-1], res[0]
    e, ec = fine[:, :2].mean(axis=0), coarse[:, :2].mean(axis=0)
    fv = f.prior(*e)
    jac = f.jacobian(v)
    inv = np.linalg.inv(np.eye(2) - jac)
    per = np.array([f.prior(*row) for row in fine[:, :2]])
    dev = per - per.mean(axis=0)
    se = np.sqrt(((dev @ inv.T) ** 2).sum(axis=0) / (dev.shape[0] * (dev.shape[0] - 1)))
    bias = np.abs(inv @ (f.prior(*ec) - fv))
    err = COVERAGE * se + bias + np.abs(fv - v)
    e_se = standard_error(fine[:, :2], axis=0)
    layers = []
    for i in range(2):
        layers.append({"q": f.q0[i] - float(v[i]), "q_error": float(err[i]), "mmse": float(v[i]),
                       "mmse_error": float(err[i]), "q_hat": float(2 * alpha * e[i]),
                       "q_hat_error": float(2 * alpha * (COVERAGE * e_se[i] + abs(e[i] - ec[i]))),
                       "E": float(e[i]), "rho": rho[i]})
    est = _estimates(res, {})
    psi = est["psi_out"]
    cross = {}
    for key, name in (("q_hat_12", "cross"), ("q_hat_12_mean_square", "cross_mean_square"),
                      ("q_hat_12_nishimori", "cross_nishimori")):
        cross[key], cross[key + "_error"] = 2 * alpha * est[name].value, 2 * alpha * est[name].error
    norm = math.sqrt(layers[0]["q_hat"] * layers[1]["q_hat"])
    cc = cross["q_hat_12"] / norm
    cross["cross_correlation"] = cc
    cross["cross_correlation_error"] = (cross["q_hat_12_error"] / norm + 0.5 * abs(cc) * sum(
        x["q_hat_error"] / x["q_hat"] for x in layers))
    # Phi = sum_l [-q_l q_hat_l / 4 + Psi_S(q_hat_l; rho_l)] + alpha Psi_out (THEORY 1.1, 1.6);
    # Psi_out is E log of the density of o (fixed alpha and Delta: ranks fixed points only)
    phi, phi_err = alpha * psi.value, alpha * psi.error
    for x in layers:
        ps = prior_potential(x["q_hat"], rho=x["rho"])
        phi += -x["q"] * x["q_hat"] / 4.0 + ps.value
        phi_err += ps.error + x["q_error"] * x["q_hat_error"] / 4.0
    out = {"alpha": alpha, "Delta": Delta, "skip": skip, "beta": beta, "layers": layers,
           "stable": bool(np.max(np.abs(np.linalg.eigvals(jac))) < 1),
           "jacobian_eigenvalues": np.linalg.eigvals(jac).tolist(), "jacobian": jac.tolist(),
           "init_mmse": list(init),
           "iterations": it + 1, "map_calls": f.calls, "standard_error": se.tolist(),
           "inner_size_error": bias.tolist(), "psi_out": psi.value, "psi_out_error": psi.error,
           "phi": phi, "phi_error": phi_err, **cross, "design": design,
           "points": 2**m, "scrambles": scrambles, "sizes": tuple(sizes), "seed": seed}
    if e_gen:
        out.update(_egen_noisy(q=[x["q"] for x in layers], q_error=[x["q_error"] for x in layers],
                               rho=tuple(rho), Delta=Delta, skip=skip, beta=beta, seed=seed,
                               design=design))
    if cross_term:
        out = add_cross_overlap_term_noisy(out, rho=tuple(rho), design=design, m=m,
                                           scrambles=scrambles, seed=seed, sizes=tuple(sizes))
    out["seconds"] = time.perf_counter() - t0
    return out


def _egen_noisy(*, q, q_error, rho, Delta, skip, beta, seed, m: int = 14,
                design: str = "shared") -> dict:
    """Bayes e_gen of the noisy output at overlaps q (THEORY 1.5): E||y - E[y | omega]||_F^2 =
    the clean part (deep_aim_se.generalisation_error; the noise is independent of omega) + 4 Delta
    (four noisy entries), with |d e_gen/d q_l| q_error_l added (central differences, same points)."""
    model = DeepAimSE(skip=skip, rho1=rho[0], rho2=rho[1], beta=beta, design=design)
    g = generalisation_error(model, q1=q[0], q2=q[1], m=m, seed=seed)
    prop = {"e_gen": 0.0, "e_gen_plugin": 0.0}
    for i in range(2):
        d = 1e-3 * min(q[i] - model.q_min[i], model.q0[i] - q[i])
        if d <= 0:
            continue
        qp, qm = list(q), list(q)
        qp[i] += d
        qm[i] -= d
        gp = generalisation_error(model, q1=qp[0], q2=qp[1], m=m, seed=seed)
        gm = generalisation_error(model, q1=qm[0], q2=qm[1], m=m, seed=seed)
        for k in prop:
            prop[k] += abs(gp[k].value - gm[k].value) / (2 * d) * q_error[i]
    clean = g["e_gen"].value
    err = g["e_gen"].error + prop["e_gen"]
    return {"e_gen": clean + 4.0 * Delta, "e_gen_error": err, "e_gen_clean": clean,
            "e_gen_clean_error": err, "e_gen_plugin_clean": g["e_gen_plugin"].value,
            "e_gen_plugin_clean_error": g["e_gen_plugin"].error + prop["e_gen_plugin"]}


# ---------------------------------------------------------------- the neglected cross-overlap

#: the columns of :func:`_cross_sums`: G = E[g g^T] (g = Sigma^-1 E[deviation | o], summed over
#: the two whitened coordinates) in the variance form, Psi_out, then the mean-square and
#: Nishimori forms of G
CROSS_COLUMNS = ("G11", "G22", "G12", "psi_out", "mean_square_11", "mean_square_22",
                 "mean_square_12", "nishimori_11", "nishimori_22", "nishimori_12")


def _cross_sums(*, q1, q2, V1, V2, q12, Delta, skip, beta, m, scrambles, seed, sizes, cross,
                chunk: int = 32) -> np.ndarray:
    """(len(sizes), scrambles, len(CROSS_COLUMNS)) at a cross-overlap q12 of the fluctuating
    parts (neglected by the SE; docs/deep_aim.md section 4, "What the SE neglects"): per whitened
    coordinate the means (a, b) have covariance [[q1, cross + q12], [cross + q12, q2]] and the
    truth's deviations Sigma = [[V1, -q12], [-q12, V2]] (the law of deep_aim_se.outer_covariance:
    the truths keep Cov(xi, x) = cross), and the inner posterior samples the correlated prior
    N((a, b), Sigma). G = 2 Sigma^-1 - Sigma^-1 K Sigma^-1, K the mean posterior covariance of
    the deviations (law of total variance); at q12 = 0, (G11, G22, G12) are :func:`_output_sums`'s
    (E1, E2, cross) on the same points. Point sets as :func:`_output_sums` (same ``seed``)."""
    L = mean_pair_cholesky(q1=q1, q2=q2, cross=cross + q12)
    D = psd_cholesky(np.array([[V1, -q12], [-q12, V2]]))
    s_inv = np.linalg.inv(np.array([[V1, -q12], [-q12, V2]]))
    kmax = max(sizes)
    res = np.zeros((len(sizes), scrambles, len(CROSS_COLUMNS)))
    sd = math.sqrt(2.0 * Delta)
    for s in range(scrambles):
        u = _sobol_normals(m, 10, [seed, s])
        t = _sobol_normals(int(round(math.log2(kmax))), 4, [seed, s, 4]).T
        # inner deviations per coordinate k: d1_k = D00 t_k, d2_k = D10 t_k + D11 t_{k+2}
        d_in = np.stack([D[0, 0] * t[0], D[0, 0] * t[1], D[1, 0] * t[0] + D[1, 1] * t[2],
                         D[1, 0] * t[1] + D[1, 1] * t[3]])
        acc = np.zeros((len(sizes), 3 + 1 + 3 + 3))
        n = u.shape[0]
        for st in range(0, n, chunk):
            w = u[st:st + chunk]
            a = L[0, 0] * w[:, 0:2]
            b = L[1, 0] * w[:, 0:2] + L[1, 1] * w[:, 2:4]
            e1 = D[0, 0] * w[:, 4:6]
            e2 = D[1, 0] * w[:, 4:6] + D[1, 1] * w[:, 6:8]
            c1, c2 = clean_observations(a[:, 0] + e1[:, 0], a[:, 1] + e1[:, 1], b[:, 0] + e2[:, 0],
                                        b[:, 1] + e2[:, 1], skip=skip, beta=beta)
            o1, o2 = c1 + sd * w[:, 8], c2 + sd * w[:, 9]
            d1, d2 = clean_observations(a[:, 0:1] + d_in[0], a[:, 1:2] + d_in[1],
                                        b[:, 0:1] + d_in[2], b[:, 1:2] + d_in[3], skip=skip,
                                        beta=beta)
            ll = -((o1[:, None] - d1) ** 2 + (o2[:, None] - d2) ** 2) / (4.0 * Delta)
            true = np.stack([e1[:, 0], e1[:, 1], e2[:, 0], e2[:, 1]], axis=1)
            for j, k in enumerate(sizes):
                e, nk, log_mean = _prefix_weights(ll, k)
                dk = d_in[:, :k]
                mean = (e @ dk.T) / nk[:, None]            # E[deviation | o], (chunk, 4)
                prods = np.stack([dk[0] ** 2 + dk[1] ** 2, dk[2] ** 2 + dk[3] ** 2,
                                  dk[0] * dk[2] + dk[1] * dk[3]])
                second = (e @ prods.T) / nk[:, None]
                k11 = second[:, 0] - mean[:, 0] ** 2 - mean[:, 1] ** 2
                k22 = second[:, 1] - mean[:, 2] ** 2 - mean[:, 3] ** 2
                k12 = second[:, 2] - mean[:, 0] * mean[:, 2] - mean[:, 1] * mean[:, 3]
                ms = [np.sum(mean[:, 0:2] ** 2), np.sum(mean[:, 2:4] ** 2),
                      np.sum(mean[:, 0:2] * mean[:, 2:4])]
                ni = [np.sum(true[:, 0:2] * mean[:, 0:2]), np.sum(true[:, 2:4] * mean[:, 2:4]),
                      0.5 * (np.sum(true[:, 0:2] * mean[:, 2:4])
                             + np.sum(true[:, 2:4] * mean[:, 0:2]))]
                log_z = log_mean - math.log(4.0 * math.pi * Delta)
                acc[j] += [k11.sum(), k22.sum(), k12.sum(), log_z.sum(), *ms, *ni]
        acc /= n
        for j in range(len(sizes)):
            kk, msm, nim = (np.array([[x[0], x[2]], [x[2], x[1]]])
                            for x in (acc[j, 0:3], acc[j, 4:7], acc[j, 7:10]))
            g = 2.0 * s_inv - s_inv @ kk @ s_inv
            gm = s_inv @ msm @ s_inv
            gn = s_inv @ nim @ s_inv
            res[j, s] = [g[0, 0], g[1, 1], g[0, 1], acc[j, 3], gm[0, 0], gm[1, 1], gm[0, 1],
                         gn[0, 0], gn[1, 1], gn[0, 1]]
    return res


def cross_overlap_response(*, fp: dict, rho: tuple[float, float],
                           sums: Callable[[float], np.ndarray], dq12: float) -> dict:
    """First-order effect on mmse_l of the neglected cross-overlap q'_12 at a finite fixed point
    ``fp`` (carrying alpha, layers with q_hat and mmse, q_hat_12 with its error and the map's
    ``jacobian``), for any output side given as ``sums``: q12 -> array (rules, scrambles, >= 3)
    whose columns 0-2 are (G_11, G_22, G_12) of G = E[g g^T] at the cross-overlap q12 (rules:
    inner rules or sizes, the last the finest, all on one point set). The method of
    deep_aim_se.cross_overlap_effect (docs/deep_aim.md section 4): q'_12 = q_hat_12 mmse_1 mmse_2,
    dG/dq'_12 by central differences (+- dq12 and +- 2 dq12), error COVERAGE standard errors of
    the paired differences + |D(dq12) - D(2 dq12)| + |D_fine - D_coarsest|; delta mmse =
    (I - J)^-1 (d mmse_l/d q_hat_l) 2 alpha (dG_ll/dq'_12) q'_12; loop gain = 2 alpha mmse_1
    mmse_2 dG_12/dq'_12. Returns dE_dq12 (two Estimates), dE12_dq12, q12 (Estimates), loop_gain,
    delta_mmse, delta_mmse_error, and the slopes of every further column (``slopes``)."""
    alpha = fp["alpha"]
    v = [x["mmse"] for x in fp["layers"]]
    require(math.isfinite(dq12) and 0 < 2 * dq12 < 0.5 * min(v), "dq12", "in (0, min(V)/4)",
            dq12)
    diffs = [(sums(d) - sums(-d)) / (2 * d) for d in (dq12, 2 * dq12)]
    slopes = []
    for i in range(diffs[0].shape[2]):
        d1 = diffs[0][-1, :, i]
        rule = abs(float(d1.mean() - diffs[0][0, :, i].mean()))
        step = abs(float(d1.mean() - diffs[1][-1, :, i].mean()))
        se = standard_error(d1)
        slopes.append(Estimate(float(d1.mean()), COVERAGE * se + step + rule,
                               "central difference in q12, one point set (two steps, rules)",
                               extra={"standard_error": se, "step_error": step,
                                      "rule_error": rule, "dq12": dq12}))
    q12 = fp["q_hat_12"] * v[0] * v[1]
    q12_err = fp["q_hat_12_error"] * v[0] * v[1]
    gain = 2 * alpha * v[0] * v[1] * slopes[2].value
    dmmse = []
    for x, r in zip(fp["layers"], rho):
        h = 1e-4 * x["q_hat"]
        dmmse.append((_prior_step(x["q_hat"] + h, r) - _prior_step(x["q_hat"] - h, r)) / (2 * h))
    inv = np.linalg.inv(np.eye(2) - np.array(fp["jacobian"]))
    df = np.array([dmmse[i] * 2 * alpha * slopes[i].value for i in range(2)])
    df_err = np.array([abs(dmmse[i]) * 2 * alpha * slopes[i].error for i in range(2)])
    delta = inv @ df * q12
    err = np.abs(inv) @ (df_err * abs(q12) + np.abs(df) * q12_err)
    return {"dE_dq12": slopes[:2], "dE12_dq12": slopes[2], "slopes": slopes,
            "q12": Estimate(q12, q12_err, "q_hat_12 mmse_1 mmse_2 (first-order response)"),
            "loop_gain": gain, "delta_mmse": delta.tolist(), "delta_mmse_error": err.tolist()}


def add_cross_overlap_term_noisy(fp: dict, *, rho: tuple[float, float], design: str,
                                 m: int, scrambles: int, seed: int,
                                 sizes: tuple[int, int] = INNER_SIZES) -> dict:
    """The noisy fixed point ``fp`` with the neglected cross-overlap's first-order effect in its
    bars, as deep_aim_se.add_cross_overlap_term does for the noiseless engine (docs/deep_aim.md
    section 5, "Output noise"): (|delta mmse_l| + error) / (1 - loop gain) (gain capped at
    deep_aim_se.CROSS_GAIN_MAX) added to each layer's mmse and q bars, delta mmse from
    :func:`cross_overlap_response` on the noisy output side at q'_12 (:func:`_cross_sums`, the
    map's point set and inner sizes); the e_gen and Phi terms from
    deep_aim_se.cross_overlap_output_effect (the noise adds 4 Delta to e_gen whatever q'_12, so
    the clean output's law is the one that moves; Phi: delta Phi = q_hat_12 q'_12 / 4 from
    stationarity d Psi_out/d q'_12 = E[g_1 . g_2], which holds for the density of o too, see
    ``dpsi_dq12``; measured at the alpha = 0.1 fixed point: 0.01348 +- 0.00092 against
    0.01284 +- 0.00200, tests/test_deep_aim_noisy_stationarity.py). Independent tokens:
    q_hat_12 = 0 exactly by symmetry, the term is 0."""
    model = DeepAimSE(skip=fp["skip"], rho1=rho[0], rho2=rho[1], beta=fp["beta"], design=design)
    dq12 = cross_step(model, fp)
    if design == "independent" or dq12 <= 1e-9:
        why = ("independent tokens: q_hat_12 = 0 by symmetry, no cross-overlap"
               if design == "independent" else
               "q at the uninformed point: no cross-overlap fits the law, no term")
        co = {"term": [0.0, 0.0], "loop_gain": 0.0, "trusted": True, "q12": 0.0,
              "e_gen_term": 0.0, "phi_term": 0.0, "method": why}
        return {**fp, "layers": [{**x, "cross_overlap_term": 0.0} for x in fp["layers"]],
                "cross_overlap": co}
    q = [x["q"] for x in fp["layers"]]
    v = [x["mmse"] for x in fp["layers"]]

    def sums(q12: float) -> np.ndarray:
        return _cross_sums(q1=q[0], q2=q[1], V1=v[0], V2=v[1], q12=q12, Delta=fp["Delta"],
                           skip=fp["skip"], beta=fp["beta"], m=m, scrambles=scrambles, seed=seed,
                           sizes=tuple(sizes), cross=model.cross)

    eff = cross_overlap_response(fp=fp, rho=rho, sums=sums, dq12=dq12)
    sl = eff["slopes"]
    extra = {"dq12": dq12, "dE_dq12": [x.value for x in sl[:2]],
             "dE_dq12_error": [x.error for x in sl[:2]], "dE12_dq12": sl[2].value,
             "dE12_dq12_error": sl[2].error, "dpsi_dq12": sl[3].value,
             "dpsi_dq12_error": sl[3].error}
    out, oe = cross_term_in_bars(model, fp, eff, seed=seed, extra=extra, method=(
        "first-order response of the cross-overlap q'_12 = q_hat_12 mmse_1 mmse_2, noisy output "
        "side exact at q'_12 (central differences), divided by 1 - loop gain; added to the bars"))
    if "e_gen_error" in fp:
        for key in ("e_gen_error", "e_gen_clean_error"):
            out[key] = fp[key] + oe["e_gen_term"]
        out["e_gen_plugin_clean_error"] = fp["e_gen_plugin_clean_error"] + oe["e_gen_plugin_term"]
    return out


# ---------------------------------------------------------------- Monte Carlo route

def output_e_noisy_mc(*, q1: float, q2: float, V1: float, V2: float, Delta: float, skip: float,
                      beta: float = 1.0, samples: int = 20_000, inner: int = 4000,
                      batches: int = 20, seed: int = 0, rho: tuple[float, float] = (0.0, 0.0),
                      design: str = "shared") -> dict[str, Estimate]:
    """E_1, E_2 by seeded plain Monte Carlo (independent route to :func:`output_e_noisy`): outer
    points from numpy's generator, posterior means by self-normalised importance sampling from
    the prior with two independent halves of ``inner`` iid draws; E_l = E[g_l^(1) . g_l^(2)]
    (the product of the halves has no squared-noise bias; the ratio bias is O(1/inner)).
    Error = standard error over ``batches``, each with fresh inner draws. Shared tokens: the means
    are sqrt(rho_l) c + sqrt(q_l - rho_l) n_l with c drawn explicitly (not the Cholesky factor of
    the QMC route); also the cross term E12 = E[g_1 . g_2]."""
    _check_inputs(q1, q2, V1, V2, Delta, skip, beta)
    shared = _cross(rho, design, q1, q2) > 0
    require(samples >= batches >= 2, "samples", f">= batches (= {batches}) >= 2", samples)
    require(inner >= 4 and inner % 2 == 0, "inner", "an even integer >= 4", inner)
    rng = np.random.default_rng(seed)
    per = samples // batches
    res = {"E1": [], "E2": [], "E12": []}
    t0 = time.perf_counter()
    for _ in range(batches):
        w = rng.standard_normal((per, 10))
        if shared:
            c = rng.standard_normal((per, 2))
            a = math.sqrt(rho[0]) * c + math.sqrt(max(q1 - rho[0], 0.0)) * w[:, 0:2]
            b = math.sqrt(rho[1]) * c + math.sqrt(max(q2 - rho[1], 0.0)) * w[:, 2:4]
        else:
            a, b = math.sqrt(q1) * w[:, 0:2], math.sqrt(q2) * w[:, 2:4]
        xi, x = a + math.sqrt(V1) * w[:, 4:6], b + math.sqrt(V2) * w[:, 6:8]
        c1, c2 = clean_observations(xi[:, 0], xi[:, 1], x[:, 0], x[:, 1], skip=skip, beta=beta)
        o1, o2 = c1 + math.sqrt(2 * Delta) * w[:, 8], c2 + math.sqrt(2 * Delta) * w[:, 9]
        halves = []
        for _h in range(2):
            t = rng.standard_normal((4, inner // 2))
            g = []
            for st in range(0, per, 64):
                sl = slice(st, st + 64)
                xi1 = a[sl, 0:1] + math.sqrt(V1) * t[0][None, :]
                xi2 = a[sl, 1:2] + math.sqrt(V1) * t[1][None, :]
                x1 = b[sl, 0:1] + math.sqrt(V2) * t[2][None, :]
                x2 = b[sl, 1:2] + math.sqrt(V2) * t[3][None, :]
                d1, d2 = clean_observations(xi1, xi2, x1, x2, skip=skip, beta=beta)
                ll = -((o1[sl, None] - d1) ** 2 + (o2[sl, None] - d2) ** 2) / (4.0 * Delta)
                e = np.exp(ll - ll.max(axis=1, keepdims=True))
                g.append((e @ t.T) / e.sum(axis=1)[:, None])
            mean = np.concatenate(g)
            halves.append((mean[:, 0:2] / math.sqrt(V1), mean[:, 2:4] / math.sqrt(V2)))
        (g1a, g2a), (g1b, g2b) = halves
        res["E1"].append(np.mean(np.sum(g1a * g1b, axis=1)))
        res["E2"].append(np.mean(np.sum(g2a * g2b, axis=1)))
        res["E12"].append(np.mean(0.5 * np.sum(g1a * g2b + g1b * g2a, axis=1)))
    secs = time.perf_counter() - t0
    return {k: mean_estimate(v, "monte carlo, two halves of iid prior draws (standard error)",
                             samples=per * batches, inner=inner, seed=seed, seconds=secs)
            for k, v in res.items()}
