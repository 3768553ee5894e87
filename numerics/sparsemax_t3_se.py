"""Sparsemax attention at T = 3 tokens, finite rho: every state-evolution fixed point at a sample
ratio alpha, the Bayes-optimal generalisation error, the plug-in error and the free entropy phi
(THEORY 1.1, 1.5; docs/sparsemax.md, "State evolution at finite rho (T = 3)").

**E(q, V) with common random numbers.** E = E_omega sum_y Z g^T W g (THEORY 1.1) by seeded Monte
Carlo without quadrature: omega = sqrt(q W) z, h = omega + sqrt(V W) xi and one exact posterior
draw h' of h given y(h) (the prior N(omega, V W) conditioned on the pattern's kept statistics,
accepted when its pattern is that of h: :func:`aim_sym.numerics.sparsemax_t3.posterior_draws`'
construction). Since E[h' | y] = E[h | y], (h - omega)^T W^-1 (h' - omega) / V^2 is unbiased for
g^T W g. Three reductions, all exact:

* the common shift of h (h -> h + s 1, in the metric W^-1) does not change y, so its posterior is
  its prior, independent of everything: it is projected out of h - omega and h' - omega (r, r');
* h and h' are both posterior draws given y, independent given y, so each may be replaced by
  its conditional mean given its own off-diagonals and y (Rao-Blackwell): the free diagonals
  (rows whose support excludes a, or is {a}) by their truncated-normal means;
* the control variate Q = r^T W^-1 r / V^2 - 5 / V has mean zero (5 Gaussian directions of
  variance V in the metric (V W)^-1) and equals the summand minus 5 / V on the all-full patterns
  (there y fixes r): the estimate is mean(v - c Q), c fitted on the same draws (bias O(1/n)).

The standard normals z, xi and the rejection sampler's candidates are functions of (seed, draw
index, round) only (candidate k of draw i is the same at every (q, V)), so E(V) along the curve
is a smooth function of V up to jumps of O(1/n) where a draw's pattern or accepted candidate
changes, and alpha(V) - alpha has a well defined root. Error bar of E: 3 standard errors
(statistical, ~99.7% coverage; not a refinement bar).

**Fixed points.** alpha(V) = q_hat / (2 E(Q0 - V, V)), q_hat = 1 / Delta(V), mmse(Delta(V)) = V
(:func:`aim_sym.numerics.sparsemax.traced_rows`). Sign changes of alpha(V) - alpha on a V grid
(``bracket_n`` draws), each root by Brent's method on the ``n``-draw function; error of the mmse
= xtol + (alpha's bar) / |d alpha / dV| (slope by a central difference with the same draws).
Perfect recovery by parameter counting (:func:`perfect_recovery_alpha_t3`).

**e_gen** (THEORY 1.5, the normalisation of the T = 2 code: the squared Frobenius norm of the
T x T output): e_gen = E_omega tr Cov[y(h) | omega] by ``draws`` independent h per omega (the
unbiased sample variance), the plug-in E ||y(h) - y(omega)||^2 on the same draws.

**phi.** Psi_out = E_omega E_y log Z_out by Monte Carlo with Z_out from
:func:`aim_sym.numerics.sparsemax_t3.z_out`, whose reference measure is Lebesgue measure on the
pattern's kept statistics times counting measure on the patterns. It differs from a density in y
by a constant factor per pattern, and the patterns' probabilities do not depend on q
(h ~ N(0, Q0 W)), so Psi_out is shifted by the same constant at every q: phi ranks the fixed
points at one alpha correctly, but its absolute value is not the T = 2 code's (y-measure).
Check (slow test): the stationarity dPsi_out/dq = E / 2 along V = Q0 - q, paired draws.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from functools import lru_cache

import numpy as np
from scipy.special import log_ndtr

from . import sparsemax as t2
from . import sparsemax_t3 as t3
from . import wishart
from .records import ConvergenceError, Estimate, require, standard_error

__all__ = ["e_crn", "perfect_recovery_alpha_t3", "psi_out_t3", "generalisation_error_t3",
           "egen_at_fixed_point_t3", "se_fixed_points_t3", "se_curve_t3", "sparsemax_matrix",
           "support_masks", "PSI_RULE",
           "DEFAULT_GRID"]

WEIGHTS = t3.WEIGHTS
_WI = 1.0 / WEIGHTS
#: the V grid on which sign changes of alpha(V) - alpha are sought
DEFAULT_GRID = (0.02, 0.05, 0.1, 0.2, 0.35, 0.5, 0.65, 0.8, 0.9, 0.97, 0.995)
#: candidates per draw offered by the rejection sampler's rounds (then doubling, capped): the
#: first _SHARED rounds draw one block for the whole batch, later ones one stream per draw
_BLOCKS, _BLOCK_MAX, _SHARED, _MAX_ROUNDS = (4, 16), 8192, 2, 4000
#: (a, b) entries of the flat order making up row a of h
_ROWS = ((0, 1, 2), (1, 3, 4), (2, 4, 5))
#: statistical bars are this many standard errors
SIGMAS = 3.0
#: the rule of Psi_out's log Z_out: relative error ~1e-3 (in the bar), far below the
#: statistical error of log Z's mean, at a fifth of the default rule's cost
PSI_RULE = t3.T3Rule(nodes=6, coarse_nodes=4, hermite=10, coarse_hermite=8, panels=4, window=7.5)


def _check(*, beta: float, V: float, q: float) -> None:
    require(np.isfinite(beta) and 0 < beta <= t3.BETA_MAX, "beta",
            f"finite, in (0, {t3.BETA_MAX:g}]", beta)
    require(np.isfinite(V) and V > 0, "V", "finite > 0", V)
    require(np.isfinite(q) and q >= 0, "q", "finite >= 0", q)


def _check_count(name: str, v, lo: int) -> None:
    require(isinstance(v, int) and not isinstance(v, bool) and v >= lo, name,
            f"an integer >= {lo}", v)


# ----------------------------------------------------------------------------- E(q, V)
@lru_cache(maxsize=512)
def _projector(masks: tuple[int, int, int]) -> np.ndarray:
    """Pm (6, 6): x Pm is the W-orthogonal projection of x onto the pattern's kept statistics
    (x - x Pm + h Pm has the statistics of h)."""
    C = t3.statistic_matrix(masks)
    if C.shape[0] == 0:
        return np.zeros((6, 6))
    K = (WEIGHTS[:, None] * C.T) @ np.linalg.inv((C * WEIGHTS) @ C.T)
    return C.T @ K.T


def _posterior_crn(h: np.ndarray, omega: np.ndarray, *, beta: float, V: float,
                   key: tuple[int, ...]) -> np.ndarray:
    """One exact posterior draw of h given y(h) per row (prior N(omega, V W)), by rejection with
    candidate streams fixed by (key, round, row): rounds offer 4, 16, 32, 64, ... candidates per
    row (capped at 8192), the first accepted is kept."""
    pat = support_masks(h, beta=beta)
    keys = pat[:, 0] + 8 * pat[:, 1] + 64 * pat[:, 2]
    m = h.shape[0]
    Pm = np.empty((m, 6, 6))
    for k in np.unique(keys):
        Pm[keys == k] = _projector((int(k % 8), int(k // 8 % 8), int(k // 64)))
    hP = np.einsum("ni,nij->nj", h, Pm)
    sv = np.sqrt(V * WEIGHTS)
    out = np.empty((m, 6))
    todo = np.arange(m)
    for r in range(_MAX_ROUNDS):
        K = _BLOCKS[r] if r < len(_BLOCKS) else min(_BLOCKS[-1] << min(r - 1, 20), _BLOCK_MAX)
        if r < _SHARED:
            z = np.random.default_rng([*key, r]).standard_normal((m, K, 6))[todo]
        else:
            z = np.stack([np.random.default_rng([*key, r, int(i)]).standard_normal((K, 6))
                          for i in todo])
        xi = omega[todo, None, :] + sv * z
        xi = xi - np.einsum("nki,nij->nkj", xi, Pm[todo]) + hP[todo, None, :]
        got = support_masks(xi.reshape(-1, 6), beta=beta)
        ok = np.all(got.reshape(todo.size, K, 3) == pat[todo, None, :], axis=2)
        hit = ok.any(axis=1)
        first = np.argmax(ok, axis=1)
        out[todo[hit]] = xi[np.nonzero(hit)[0], first[hit]]
        todo = todo[~hit]
        if todo.size == 0:
            return out
    raise ConvergenceError("posterior rejection sampler did not finish", last_iterate=_MAX_ROUNDS,
                           residual=int(todo.size))


def support_masks(h: np.ndarray, *, beta: float) -> np.ndarray:
    """The pattern (N, 3) of sparsemax(beta h) (bit b of entry a set when y_ab > 0; h (N, 6) in
    the flat order), without forming y: with a >= b >= c the sorted entries of beta times a row,
    the support is the top k, k = 1 + [1 + b > a] + [1 + 2 c > a + b] (the projection's
    threshold condition; the second implies the first). Equals
    ``t3.patterns_of(t3.sparsemax_rows(h, beta=beta))`` (tests) at a fraction of its cost."""
    out = np.zeros((h.shape[0], 3), dtype=int)
    for a, idx in enumerate(_ROWS):
        z = [beta * h[:, j] for j in idx]
        hi = np.maximum(np.maximum(z[0], z[1]), z[2])
        lo = np.minimum(np.minimum(z[0], z[1]), z[2])
        mid = z[0] + z[1] + z[2] - hi - lo
        k = 1 + (1 + mid > hi) + (1 + 2 * lo > hi + mid)
        for j in range(3):
            rank = sum((z[i] > z[j]).astype(int) for i in range(3) if i != j)
            out[:, a] |= (rank < k).astype(int) << j
    return out


def _shift_free(x: np.ndarray) -> np.ndarray:
    """x minus its component along the common shift 1 in the metric W^-1."""
    return x - ((x @ _WI) / _WI.sum())[:, None]


def _free_diagonal_means(x: np.ndarray, omega: np.ndarray, pat: np.ndarray, *, beta: float,
                         V: float) -> np.ndarray:
    """x with each free diagonal x_aa replaced by its conditional mean given the off-diagonals and
    y (Rao-Blackwell): rows with a not in S_a have x_aa <= (sum_{j in S_a} u_aj - 1/beta) / |S_a|,
    rows with S_a = {a} have x_aa >= max_j u_aj + 1/beta (truncated N(omega_aa, 2 V)); in the
    other rows x_aa is fixed by u and the observed delta_a."""
    out = x.copy()
    sd = math.sqrt(2 * V)
    for a, idx in enumerate(_ROWS):
        d = idx[a]
        offs = [j for j in idx if j != d]
        others = [j for j in range(3) if j != a]
        mk = pat[:, a]
        size = sum((mk >> j) & 1 for j in range(3))
        excl = ((mk >> a) & 1) == 0
        alone = mk == (1 << a)
        upper = (sum(((mk >> j) & 1) * x[:, offs[k]] for k, j in enumerate(others))
                 - 1 / beta) / np.maximum(size, 1)
        lower = np.maximum(x[:, offs[0]], x[:, offs[1]]) + 1 / beta
        bu = (upper - omega[:, d]) / sd
        bl = (lower - omega[:, d]) / sd
        with np.errstate(over="ignore"):
            down = np.exp(-0.5 * bu * bu - 0.5 * math.log(2 * math.pi) - log_ndtr(bu))
            up = np.exp(-0.5 * bl * bl - 0.5 * math.log(2 * math.pi) - log_ndtr(-bl))
        out[:, d] = np.where(excl, omega[:, d] - sd * down,
                             np.where(alone, omega[:, d] + sd * up, x[:, d]))
    return out


def _e_draws(*, q: float, V: float, beta: float, n: int, seed: int,
             batch: int) -> tuple[np.ndarray, np.ndarray]:
    """The summands v = r^T W^-1 r' / V^2 (r, r' Rao-Blackwellised) and the controls Q (module
    docstring) of n draws."""
    vs, Qs = [], []
    sq, sv = np.sqrt(q * WEIGHTS), np.sqrt(V * WEIGHTS)
    for b, s in enumerate(range(0, n, batch)):
        m = min(batch, n - s)
        z = np.random.default_rng([seed, 1, b]).standard_normal((m, 12))
        om = sq * z[:, :6]
        h = om + sv * z[:, 6:]
        hp = _posterior_crn(h, om, beta=beta, V=V, key=(seed, 2, b))
        pat = support_masks(h, beta=beta)
        r = _shift_free(h - om)
        rb, rbp = (_shift_free(_free_diagonal_means(x, om, pat, beta=beta, V=V) - om)
                   for x in (h, hp))
        vs.append((rb * rbp) @ _WI / V ** 2)
        Qs.append((r * r) @ _WI / V ** 2 - 5.0 / V)
    return np.concatenate(vs), np.concatenate(Qs)


def e_crn(*, q: float, V: float, beta: float, n: int = 65536, seed: int = 2026,
          batch: int = 16384) -> Estimate:
    """E(q, V) = E_omega sum_y Z g^T W g at T = 3 (THEORY 1.1) by seeded Monte Carlo with common
    random numbers and one exact posterior draw per h (module docstring); error = 3 standard
    errors of the control-variate estimate (statistical)."""
    _check(beta=beta, V=V, q=q)
    _check_count("n", n, 256)
    _check_count("batch", batch, 256)
    v, Q = _e_draws(q=q, V=V, beta=beta, n=n, seed=seed, batch=batch)
    varQ = float(Q.var())
    c = float(np.mean((v - v.mean()) * (Q - Q.mean())) / varQ) if varQ > 0 else 0.0
    res = v - c * Q
    se = standard_error(res)
    return Estimate(float(res.mean()), SIGMAS * se,
                    f"seeded Monte Carlo with common random numbers ({n} draws, one exact "
                    f"posterior draw each, control variate, seed {seed}); bar = 3 standard errors",
                    extra={"standard_error": se, "control_coefficient": c,
                           "plain_mean": float(v.mean()), "plain_standard_error": standard_error(v)})


# ----------------------------------------------------------------------------- perfect recovery
def perfect_recovery_alpha_t3(*, rho: float, beta: float, n: int = 400_000,
                              seed: int = 2026) -> Estimate:
    """alpha_PR of noiseless sparsemax at T = 3 by parameter counting (THEORY 1.2's argument, as
    at T = 2): as V -> 0, V E(q, V) -> r = E[k(pattern of h)], h ~ N(0, Q0 W), k the number of
    kept statistics (rows of types 3 and 5 one delta each, rows of types 4-5 at most two
    independent e's), and mmse(Delta) / Delta -> 2 rho - rho^2 (rho <= 1) or 1, so
    alpha_PR = that / (2 r). r = 3 (P3 + P5) + 3 (P4 + P5) - P(three rows of types 4-5): the
    row-type probabilities are polygon masses (:func:`t3.row_type_probabilities`, at
    beta sqrt(Q0)), the joint probability is seeded Monte Carlo (bar 3 standard errors)."""
    require(np.isfinite(rho) and rho > 0, "rho", "finite > 0", rho)
    _check(beta=beta, V=1.0, q=0.0)
    _check_count("n", n, 1000)
    Q0 = 1.0 + rho
    b1 = beta * math.sqrt(Q0)
    require(b1 <= t3.BETA_MAX, "beta", f"at most {t3.BETA_MAX:g} / sqrt(1 + rho)", beta)
    P, P_err = t3.row_type_probabilities(beta=b1)
    rng = np.random.default_rng([seed, 5])
    hits = 0
    for s in range(0, n, 200_000):
        m = min(200_000, n - s)
        pat = t3.patterns_of(t3.sparsemax_rows(np.sqrt(WEIGHTS) * rng.standard_normal((m, 6)),
                                               beta=b1))
        both = np.ones(m, dtype=bool)
        for a in range(3):
            b, c = t3._OTHERS[a]
            both &= ((pat[:, a] >> b) & 1).astype(bool) & ((pat[:, a] >> c) & 1).astype(bool)
        hits += int(both.sum())
    p3 = hits / n
    p3_err = SIGMAS * math.sqrt(max(p3 * (1 - p3), 1.0 / n) / n)
    r = 3 * (P[2] + P[4]) + 3 * (P[3] + P[4]) - p3
    r_err = 3 * (P_err[2] + 2 * P_err[4] + P_err[3]) + p3_err
    c_rho = 2 * rho - rho * rho if rho <= 1 else 1.0
    a = c_rho / (2 * r)
    return Estimate(a, a * r_err / r, "parameter counting: r by polygon masses and seeded Monte "
                    f"Carlo ({n} draws, seed {seed})",
                    extra={"r": r, "r_error": r_err, "p_three_e_rows": p3})


# ----------------------------------------------------------------------------- Psi_out, phi
def psi_out_t3(*, q: float, V: float, beta: float, n: int = 2048, seed: int = 2026,
               rule: t3.T3Rule = PSI_RULE) -> Estimate:
    """Psi_out(q, V) = E_omega E_{y | omega} log Z_out(y; omega, V) (THEORY 1.1) by seeded Monte
    Carlo over (omega, h), Z_out by :func:`t3.z_out` (reference measure: module docstring);
    error = 3 standard errors + the mean rule error |Z_err / Z|."""
    _check(beta=beta, V=V, q=q)
    _check_count("n", n, 64)
    z = np.random.default_rng([seed, 4]).standard_normal((n, 12))
    om = np.sqrt(q * WEIGHTS) * z[:, :6]
    h = om + np.sqrt(V * WEIGHTS) * z[:, 6:]
    o = t3.z_out(t3.sparsemax_rows(h, beta=beta), omega=om, V=V, beta=beta, rule=rule)
    rule = float(np.mean(o.Z_error / o.Z))
    se = standard_error(o.log_z)
    return Estimate(float(o.log_z.mean()), SIGMAS * se + rule,
                    f"seeded Monte Carlo ({n} draws, seed {seed}), Z_out by the T = 3 rule",
                    extra={"standard_error": se, "rule_error": rule})


def _phi(*, q: float, q_hat: float, rho: float, alpha: float, psi: float) -> float:
    """phi = -q q_hat / 4 + q_hat Q0 / 4 - I(1 / q_hat) + alpha Psi_out (THEORY 1.1)."""
    Q0 = 1.0 + rho
    return (-q * q_hat / 4 + Q0 * q_hat / 4
            - float(wishart.mutual_information(1.0 / q_hat, rho=rho)) + alpha * psi)


# ----------------------------------------------------------------------------- e_gen
def sparsemax_matrix(H: np.ndarray, *, beta: float) -> np.ndarray:
    """Row-wise sparsemax of beta H (..., T, T): each row projected onto the simplex (Martins and
    Astudillo 2016), any T."""
    z = beta * np.asarray(H, dtype=float)
    T = z.shape[-1]
    zs = -np.sort(-z, axis=-1)
    cs = np.cumsum(zs, axis=-1)
    k = np.arange(1, T + 1)
    kmax = np.sum(1 + k * zs > cs, axis=-1)
    tau = (np.take_along_axis(cs, kmax[..., None] - 1, axis=-1)[..., 0] - 1) / kmax
    return np.maximum(z - tau[..., None], 0.0)


def _symmetric(flat: np.ndarray, T: int) -> np.ndarray:
    """(..., T (T + 1) / 2) entries a <= b in row order -> (..., T, T) symmetric."""
    iu = np.triu_indices(T)
    H = np.zeros((*flat.shape[:-1], T, T))
    H[..., iu[0], iu[1]] = flat
    H[..., iu[1], iu[0]] = flat
    return H


def generalisation_error_t3(*, q: float, V: float, beta: float, n: int = 20000,
                            seed: int = 2026, draws: int = 8, tokens: int = 3) -> Estimate:
    """Bayes-optimal e_gen = E_omega E_{h | omega} ||y(h) - E[y | omega]||_F^2 at the SE's
    (q, V) (THEORY 1.5), y the T x T sparsemax output (T = ``tokens``, 3; 2 for the comparison
    with :func:`aim_sym.numerics.sparsemax.generalisation_error`), with the plug-in error
    E ||y(h) - y(omega)||_F^2 in ``extra["plugin"]``, ``extra["plugin_error"]``. Seeded Monte
    Carlo: n omegas, ``draws`` h per omega; e_gen per omega is the unbiased sample variance
    (1 / (draws - 1)) sum_j ||y_j - mean y||^2. Errors: 3 standard errors over the omegas."""
    _check(beta=beta, V=V, q=q)
    _check_count("n", n, 100)
    _check_count("draws", draws, 2)
    require(tokens in (2, 3), "tokens", "2 or 3", tokens)
    T = tokens
    w = np.array([2.0 if a == b else 1.0 for a in range(T) for b in range(a, T)])
    p = w.size
    rng = np.random.default_rng([seed, 6, T])
    eg, pl = [], []
    for s in range(0, n, 8192):
        m = min(8192, n - s)
        z = rng.standard_normal((m, draws + 1, p))
        om = np.sqrt(q * w) * z[:, :1, :]
        h = om + np.sqrt(V * w) * z[:, 1:, :]
        y = sparsemax_matrix(_symmetric(h, T), beta=beta)            # (m, draws, T, T)
        y0 = sparsemax_matrix(_symmetric(om, T), beta=beta)          # (m, 1, T, T)
        ybar = y.mean(axis=1, keepdims=True)
        eg.append(((y - ybar) ** 2).sum(axis=(1, 2, 3)) / (draws - 1))
        pl.append(((y - y0) ** 2).sum(axis=(2, 3)).mean(axis=1))
    eg, pl = np.concatenate(eg), np.concatenate(pl)
    se, se_p = standard_error(eg), standard_error(pl)
    return Estimate(float(eg.mean()), SIGMAS * se,
                    f"seeded Monte Carlo ({n} omegas x {draws} draws of h, seed {seed}); "
                    "bar = 3 standard errors",
                    extra={"plugin": float(pl.mean()), "plugin_error": SIGMAS * se_p,
                           "standard_error": se, "plugin_standard_error": se_p})


def egen_at_fixed_point_t3(*, mmse: float, error: float, rho: float, beta: float,
                           n: int = 20000, seed: int = 2026) -> dict:
    """e_gen and the plug-in error at an SE fixed point V = mmse +- error (as
    :func:`aim_sym.numerics.sparsemax.egen_at_fixed_point`): the Monte Carlo bar plus the change
    over V +- error (the same draws at the three V). At V = 0 both are 0."""
    Q0 = 1.0 + rho
    keys = ("e_gen", "e_gen_error", "e_gen_plugin", "e_gen_plugin_error")
    if mmse <= 0 and error <= 0:
        return dict.fromkeys(keys, 0.0)
    at = []
    for v in (mmse, mmse - error, mmse + error):
        v = min(max(v, 0.0), Q0)
        if v == 0:
            at.append((0.0, 0.0, 0.0, 0.0))
            continue
        e = generalisation_error_t3(q=Q0 - v, V=v, beta=beta, n=n, seed=seed)
        at.append((e.value, e.error, e.extra["plugin"], e.extra["plugin_error"]))
    mid = at[0]
    spread = [max(abs(a[i] - mid[i]) + a[i + 1] for a in at) for i in (0, 2)]
    return {"e_gen": mid[0], "e_gen_error": mid[1] + spread[0],
            "e_gen_plugin": mid[2], "e_gen_plugin_error": mid[3] + spread[1]}


# ----------------------------------------------------------------------------- fixed points
class _Curve:
    """alpha(V) at fixed (rho, beta, seed), memoised per (V, n) (:func:`t2.traced_rows` rows)."""

    def __init__(self, *, rho: float, beta: float, seed: int, batch: int) -> None:
        self.rho, self.beta, self.seed, self.batch = rho, beta, seed, batch
        self.memo: dict = {}

    def row(self, V: float, n: int) -> dict:
        k = (float(V), n)
        if k not in self.memo:
            self.memo[k] = t2.traced_rows(
                lambda q, v: e_crn(q=q, V=v, beta=self.beta, n=n, seed=self.seed,
                                   batch=self.batch), rho=self.rho, mmses=[float(V)])[0]
        return self.memo[k]

    def alpha(self, V: float, n: int) -> float:
        return self.row(V, n)["alpha"]


def _note(progress: Callable[[str], None] | None, msg: str) -> None:
    if progress is not None:
        progress(msg)


def se_fixed_points_t3(*, alpha: float, rho: float, beta: float,
                       grid: Sequence[float] = DEFAULT_GRID, n: int = 65536,
                       bracket_n: int = 8192, seed: int = 2026, xtol: float = 1e-5,
                       egen_n: int = 20000, psi_n: int = 2048, batch: int = 16384,
                       progress: Callable[[str], None] | None = None,
                       _curve: _Curve | None = None, _pr: Estimate | None = None) -> list[dict]:
    """All SE fixed points V = mmse at sample ratio ``alpha``, T = 3 (THEORY 1.1), with the row
    format of :func:`aim_sym.numerics.sparsemax.se_fixed_points`: mmse, error, q, q_hat, stable
    (alpha(V) decreasing), d_alpha_d_mmse, phi, method, e_gen, e_gen_error, e_gen_plugin,
    e_gen_plugin_error, bayes_optimal (:func:`t2.flag_bayes_optimal`); also E, E_error,
    psi_out, psi_out_error.

    Sign changes of alpha(V) - alpha on ``grid`` with ``bracket_n`` draws (a prefix of the ``n``
    draws), each root by Brent's method with ``n`` draws (common random numbers: module
    docstring); error = xtol + alpha's bar (3 standard errors of E, and the prior's inversion)
    over |d alpha / dV| (central difference, step 1% of V, same draws). A grid interval whose
    sign change disappears at ``n`` draws is widened by one grid point on each side.

    Below the grid: for alpha above alpha_PR's interval (:func:`perfect_recovery_alpha_t3`) the
    fixed point V = 0 (perfect recovery) is listed; for alpha(grid[0]) < alpha below it, one
    fixed point lies in (0, grid[0]), listed as the bracket's midpoint with its half-width as
    error (and inside alpha_PR's interval, where the counting cannot decide, the same bracket is
    listed with that said in ``method``).

    Cost at the defaults (rho = 0.5, beta = 1): ~20 fits of E (11 at ``bracket_n``, ~9 at ``n``),
    ~22 s of one core per alpha; relative bar on the mmse 5e-4 to 6e-3 for alpha 0.01 to 0.05
    (it falls like 1 / sqrt(n)). ``_curve`` and ``_pr`` are :func:`se_curve_t3`'s shared curve
    and alpha_PR."""
    from scipy.optimize import brentq

    require(np.isfinite(alpha) and alpha > 0, "alpha", "finite > 0", alpha)
    require(np.isfinite(rho) and rho > 0, "rho", "finite > 0", rho)
    _check(beta=beta, V=1.0, q=0.0)
    _check_count("n", n, 256)
    _check_count("bracket_n", bracket_n, 256)
    require(bracket_n <= n, "bracket_n", f"<= n = {n}", bracket_n)
    grid = [float(v) for v in grid]
    require(len(grid) >= 2 and all(0 < v < 1 for v in grid)
            and all(a < b for a, b in zip(grid, grid[1:])), "grid",
            "at least two increasing mmse values in (0, 1)", grid)
    require(np.isfinite(xtol) and 0 < xtol < 0.01, "xtol", "in (0, 0.01)", xtol)
    curve = _curve or _Curve(rho=rho, beta=beta, seed=seed, batch=batch)
    Q0 = 1.0 + rho
    vals = []
    for v in grid:
        vals.append(curve.alpha(v, bracket_n) - alpha)
    _note(progress, f"alpha {alpha:g}: bracket grid done ({len(grid)} values of V)")
    out = []
    pr = _pr or perfect_recovery_alpha_t3(rho=rho, beta=beta, seed=seed)
    a_lo, a_hi = pr.value - pr.error, pr.value + pr.error
    v_min = grid[0]
    if alpha > a_hi:
        out.append({"mmse": 0.0, "error": 0.0, "q": Q0, "q_hat": None, "stable": True,
                    "method": f"perfect recovery: alpha > alpha_PR = {pr.value:.6g} +- "
                              f"{pr.error:.1g} (parameter counting)"})
    elif curve.alpha(v_min, n) < alpha:
        why = ("alpha is inside alpha_PR's interval: perfect recovery not decided"
               if alpha >= a_lo else f"alpha < alpha_PR = {pr.value:.6g} +- {pr.error:.1g}")
        out.append({"mmse": v_min / 2, "error": v_min / 2, "q": Q0 - v_min / 2, "q_hat": None,
                    "stable": True,
                    "method": f"bracket (0, {v_min:g}): alpha({v_min:g}) < alpha; {why}; "
                              f"below V = {v_min:g} not resolved"})

    def f(x: float) -> float:
        return curve.alpha(x, n) - alpha

    done: list[tuple[float, float]] = []
    for i in range(len(grid) - 1):
        if vals[i] * vals[i + 1] > 0:
            continue
        lo, hi = i, i + 1
        while f(grid[lo]) * f(grid[hi]) > 0 and (lo > 0 or hi < len(grid) - 1):
            lo, hi = max(lo - 1, 0), min(hi + 1, len(grid) - 1)
        v0, v1 = grid[lo], grid[hi]
        if f(v0) * f(v1) > 0 or any(a <= v0 < b or a < v1 <= b for a, b in done):
            continue
        done.append((v0, v1))
        v = brentq(f, v0, v1, xtol=xtol, rtol=1e-12)
        row = curve.row(v, n)
        dv = 0.01 * min(v, 1 - v)
        slope = (curve.alpha(v + dv, n) - curve.alpha(v - dv, n)) / (2 * dv)
        psi = psi_out_t3(q=Q0 - v, V=v, beta=beta, n=psi_n, seed=seed)
        q_hat = row["q_hat"]
        err = xtol + row["alpha_error"] / max(abs(slope), 1e-12)
        out.append({"mmse": v, "error": err, "q": Q0 - v, "q_hat": q_hat,
                    "stable": bool(slope < 0), "d_alpha_d_mmse": slope,
                    "phi": _phi(q=Q0 - v, q_hat=q_hat, rho=rho, alpha=alpha, psi=psi.value),
                    "phi_error": alpha * psi.error, "psi_out": psi.value,
                    "psi_out_error": psi.error, "E": row["E"], "E_error": row["E_error"],
                    "method": f"root of alpha(V) - alpha (Brent), E by Monte Carlo with common "
                              f"random numbers ({n} draws, seed {seed})"})
        _note(progress, f"alpha {alpha:g}: fixed point mmse {v:.6f} +- {err:.1g}")
    if not out:
        raise ConvergenceError("no SE fixed point in the mmse grid", last_iterate=alpha,
                               residual=vals)
    rows = [{**fp, **egen_at_fixed_point_t3(mmse=fp["mmse"], error=fp["error"], rho=rho,
                                             beta=beta, n=egen_n, seed=seed)} for fp in out]
    return t2.flag_bayes_optimal(rows)


def se_curve_t3(*, alphas: Sequence[float], rho: float, beta: float,
                progress: Callable[[str], None] | None = None, **options) -> list[dict]:
    """:func:`se_fixed_points_t3` at every alpha in ``alphas``: rows {alpha, fixed_points,
    seconds}. One memoised alpha(V) curve (the same draws) serves every alpha, so the bracket
    grid is evaluated once; ``options`` go to :func:`se_fixed_points_t3`; ``progress`` is
    called with a short string after each step."""
    require(len(alphas) >= 1, "alphas", "at least one value", alphas)
    seed = options.get("seed", 2026)
    curve = _Curve(rho=rho, beta=beta, seed=seed, batch=options.get("batch", 16384))
    require(np.isfinite(rho) and rho > 0, "rho", "finite > 0", rho)
    _check(beta=beta, V=1.0, q=0.0)
    pr = perfect_recovery_alpha_t3(rho=rho, beta=beta, seed=seed)
    rows = []
    for a in alphas:
        t0 = time.perf_counter()
        fps = se_fixed_points_t3(alpha=float(a), rho=rho, beta=beta, progress=progress,
                                 _curve=curve, _pr=pr, **options)
        rows.append({"alpha": float(a), "fixed_points": fps,
                     "seconds": time.perf_counter() - t0})
        _note(progress, f"alpha {float(a):g}: {len(fps)} fixed point(s), "
                        f"{rows[-1]['seconds']:.0f} s")
    return rows
