"""Sparsemax attention at T = 3 tokens: Z_out, g_out and dg_out on every support pattern, and the
small-width weak-recovery threshold (THEORY 1.1, 1.2, 1.4; docs/sparsemax.md, "T = 3").

Row a of the output is y_a. = sparsemax(beta h_a.), h symmetric 3 x 3, flat order
(0,0), (0,1), (0,2), (1,1), (1,2), (2,2), Var h_ab = V (1 + delta_ab). A *pattern* is the triple of
row supports S_a (7^3 = 343 patterns); on a pattern y is affine in h.

**Conditioning on the off-diagonals** (as for hardmax, THEORY 1.4). Given u = (h_01, h_02, h_12)
the rows are independent and the diagonal h_aa enters only row a. Row a, with o, s its other
indices, is of one of five types:

1. S_a = {a}: h_aa >= max(u_ab, u_ac) + 1/beta (a Phi factor, a kink at u_ab = u_ac);
2. S_a = {s}: h_aa <= u_as - 1/beta (Phi) and u_ao <= u_as - 1/beta (an interval);
3. S_a = {a, s}: observed delta_a = h_aa - u_as = (y_aa - y_as)/beta (a Gaussian factor) and
   u_ao <= u_as + delta_a/2 - 1/(2 beta) (an interval);
4. S_a = {b, c} (a excluded): observed e_a = u_ab - u_ac (b < c) and
   h_aa <= (u_ab + u_ac)/2 - 1/(2 beta) (Phi);
5. S_a = {0, 1, 2}: observed delta_a = h_aa - u_ab and e_a = u_ab - u_ac (b < c the others).

Every interval and kink is a condition on the row difference D_a = u_ab - u_ac (b < c):
D_0 = d_1, D_1 = d_2, D_2 = d_2 - d_1 with d_1 = u_01 - u_02, d_2 = u_01 - u_12. The observed
e_a fix some of the D_a; the three e_a of three rows of types 4-5 are linearly dependent
(e_2 = e_1 - e_0 up to signs: the statistics of all-full rows have rank 5, not 6), so only an
independent subset is kept (rows 0, 1 first). The reference measure of Z_out is Lebesgue measure
on the kept statistics (delta_a of rows of types 3, 5; the kept e_a) times counting measure on
the patterns: the map (m, d_1, d_2) -> u, m = mean of u, has Jacobian 1 and so has every choice
of two of the D_a, so Z_out is the joint density of those statistics on the pattern's event.
It differs from a density in y by a constant factor per pattern (beta/2 per delta, beta per e),
which changes neither g_out nor dg_out (nor the Fisher information).

**The integral.** The free coordinates (the unobserved row differences x, 0 to 2 of them, and m)
carry a Gaussian part (the prior of u and the Gaussian factors of types 3, 5), integrated in
closed form, times the Phi factors over the intervals. It is integrated as iterated Gaussian
expectations along the Cholesky factor of the Gaussian part: the differences by composite
Gauss-Legendre rules on |eta| <= ``window`` split at every interval end and kink (and, for the
outer one, at the points where the inner ends and kinks cross), m (smooth) by Gauss-Hermite.
The posterior moments of h follow from those of u and the truncated-normal moments of the
diagonals; g_out = Sigma^-1 (E[h | y] - omega), dg_out = Sigma^-1 Cov[h | y] Sigma^-1 - Sigma^-1.
Error bars: the difference between two rules.

**Small width.** S = E_{q=0}[sum (1 + delta_ab) g_ab^2] at V = 1, omega = 0, alpha_bar_c = 1/(2 S)
(THEORY 1.2). The 27 patterns without continuous statistics (rows of types 1, 2) have a
constant g_out: their part of S is a finite sum by the rule above. The rest is an expectation over
h by randomised QMC (Owen-scrambled Sobol replicates; the bar is 3 standard errors, statistical)
with six control variates of known mean (:func:`_controls`), and the rigorous bound
:func:`saturation_bound` where saturated rows are too rare to be sampled. Independent route:
:func:`monte_carlo_s`, seeded plain Monte Carlo with no quadrature at all (pairs of exact
posterior draws by rejection).

**Finite rho.** :func:`output_e` (E(q, V) by randomised QMC over (omega, h)),
:func:`monte_carlo_e` (its rejection Monte Carlo), :func:`se_curve_traced` (alpha(V) along
V = mmse, as at T = 2).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy.special import log_ndtr, ndtri

from .records import ConvergenceError, Estimate, require, standard_error

__all__ = ["T3Rule", "sparsemax_rows", "patterns_of", "statistics_of", "z_out", "ZOut",
           "small_width_s", "weak_threshold", "monte_carlo_s", "discrete_patterns",
           "WEIGHTS", "SOFTMAX_LIMIT", "HARDMAX_LIMIT", "row_type_probabilities",
           "posterior_draws", "statistic_matrix", "sample_outputs", "output_e", "monte_carlo_e",
           "se_curve_traced", "saturation_bound"]

#: variance weights 1 + delta_ab in the flat order
WEIGHTS = np.array([2.0, 1.0, 1.0, 2.0, 1.0, 2.0])
DIAG = (0, 3, 5)
OFF = (1, 2, 4)
#: (a, b) -> index of u_ab in u = (h_01, h_02, h_12)
_U = {(0, 1): 0, (1, 0): 0, (0, 2): 1, (2, 0): 1, (1, 2): 2, (2, 1): 2}
#: the other two indices of row a, increasing
_OTHERS = {0: (1, 2), 1: (0, 2), 2: (0, 1)}
#: u = m (1, 1, 1) + U_D (d_1, d_2)
_UD = np.array([[1 / 3, 1 / 3], [-2 / 3, 1 / 3], [1 / 3, -2 / 3]])
#: (D_0, D_1, D_2) = M_D (d_1, d_2)
_MD = np.array([[1.0, 0.0], [0.0, 1.0], [-1.0, 1.0]])
#: alpha_bar_c of softmax at T = 3 (beta -> 0) and of hardmax (beta -> infinity; docs/hardmax.md)
SOFTMAX_LIMIT = 0.1
HARDMAX_LIMIT = 0.1753925354475991849
BETA_MAX = 1e8
_LOG2PI = math.log(2 * math.pi)


@dataclass(frozen=True)
class T3Rule:
    """Quadrature of one pattern: ``nodes`` Gauss-Legendre points per panel on |eta| <= ``window``
    (``panels`` equal panels, split further at ends and kinks), ``hermite`` Gauss-Hermite points
    along m; the error bar is the difference from (``coarse_nodes``, ``coarse_hermite``)."""

    nodes: int = 8
    coarse_nodes: int = 6
    hermite: int = 16
    coarse_hermite: int = 12
    panels: int = 6
    window: float = 8.0

    def __post_init__(self) -> None:
        for name in ("nodes", "coarse_nodes", "hermite", "coarse_hermite", "panels"):
            v = getattr(self, name)
            require(isinstance(v, int) and not isinstance(v, bool) and v >= 2, name,
                    "an integer >= 2", v)
        require(self.coarse_nodes < self.nodes, "coarse_nodes", "< nodes", self.coarse_nodes)
        require(self.coarse_hermite < self.hermite, "coarse_hermite", "< hermite",
                self.coarse_hermite)
        require(math.isfinite(self.window) and 5.0 <= self.window <= 12.0, "window", "in [5, 12]",
                self.window)


DEFAULT_RULE = T3Rule()


def _check_beta(beta: float) -> None:
    require(np.isfinite(beta) and 0 < beta <= BETA_MAX, "beta", f"finite, in (0, {BETA_MAX:g}]",
            beta)


# ----------------------------------------------------------------------------- the channel
def symmetric(h: np.ndarray) -> np.ndarray:
    """(N, 6) flat entries -> (N, 3, 3) symmetric matrices."""
    h = np.atleast_2d(np.asarray(h, dtype=float))
    H = np.empty((h.shape[0], 3, 3))
    for k, (a, b) in enumerate(((0, 0), (0, 1), (0, 2), (1, 1), (1, 2), (2, 2))):
        H[:, a, b] = H[:, b, a] = h[:, k]
    return H


def sparsemax_rows(h, *, beta: float) -> np.ndarray:
    """y (N, 3, 3): row a is the Euclidean projection of beta h_a. onto the simplex (Martins and
    Astudillo 2016); h (N, 6) in the flat order."""
    _check_beta(beta)
    z = beta * symmetric(h)
    zs = -np.sort(-z, axis=-1)
    cs = np.cumsum(zs, axis=-1)
    k = np.arange(1, 4)
    kmax = np.sum(1 + k * zs > cs, axis=-1)
    tau = (np.take_along_axis(cs, kmax[..., None] - 1, axis=-1)[..., 0] - 1) / kmax
    return np.maximum(z - tau[..., None], 0.0)


def patterns_of(y: np.ndarray) -> np.ndarray:
    """Support bit masks (N, 3) of the rows of y (bit b set when y_ab > 0)."""
    y = np.asarray(y)
    return ((y[..., 0] > 0) * 1 + (y[..., 1] > 0) * 2 + (y[..., 2] > 0) * 4).astype(int)


def statistics_of(y: np.ndarray, *, beta: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Patterns (N, 3), delta (N, 3) and e (N, 3) of outputs y (N, 3, 3): delta_a =
    (y_aa - y_as)/beta (s the smallest other index in S_a; rows of types 3, 5), e_a =
    (y_ab - y_ac)/beta (b < c the others; rows of types 4, 5); nan where not observed."""
    _check_beta(beta)
    y = np.asarray(y, dtype=float).reshape(-1, 3, 3)
    pat = patterns_of(y)
    N = y.shape[0]
    delta = np.full((N, 3), np.nan)
    e = np.full((N, 3), np.nan)
    for a in range(3):
        b, c = _OTHERS[a]
        inb, inc = (pat[:, a] >> b) & 1, (pat[:, a] >> c) & 1
        ina = (pat[:, a] >> a) & 1
        s = np.where(inb == 1, b, c)
        ysel = np.take_along_axis(y[:, a, :], s[:, None], axis=1)[:, 0]
        has_d = (ina == 1) & ((inb + inc) >= 1)
        delta[:, a] = np.where(has_d, (y[:, a, a] - ysel) / beta, np.nan)
        has_e = (inb == 1) & (inc == 1)
        e[:, a] = np.where(has_e, (y[:, a, b] - y[:, a, c]) / beta, np.nan)
    return pat, delta, e


@dataclass(frozen=True)
class _Pattern:
    """The structure of one pattern (module docstring)."""

    masks: tuple[int, int, int]
    types: tuple[int, int, int]
    partner: tuple[int, int, int]        # s of types 2, 3 and 5 (-1 otherwise)
    fixed: tuple[int, ...]               # rows whose e_a is kept (independent)
    P: np.ndarray                        # (d_1, d_2) = P x + q(e)
    nd: int                              # number of free differences
    gauss_rows: tuple[int, ...]          # rows with an observed delta (types 3, 5)

    @property
    def continuous(self) -> bool:
        return bool(self.gauss_rows) or any(t == 4 for t in self.types)


@lru_cache(maxsize=512)
def _pattern(masks: tuple[int, int, int]) -> _Pattern:
    types, partner = [], []
    for a, mk in enumerate(masks):
        require(1 <= mk <= 7, "support", "a non-empty subset of {0, 1, 2}", mk)
        b, c = _OTHERS[a]
        ina, inb, inc = (mk >> a) & 1, (mk >> b) & 1, (mk >> c) & 1
        n = ina + inb + inc
        if n == 3:
            types.append(5)
            partner.append(b)
        elif n == 1 and ina:
            types.append(1)
            partner.append(-1)
        elif n == 1:
            types.append(2)
            partner.append(b if inb else c)
        elif ina:
            types.append(3)
            partner.append(b if inb else c)
        else:
            types.append(4)
            partner.append(-1)
    eq = [a for a in range(3) if types[a] in (4, 5)]
    fixed = tuple(eq[:2])
    if len(fixed) == 0:
        P = np.eye(2)
    elif len(fixed) == 1:
        P = {0: np.array([[0.0], [1.0]]), 1: np.array([[1.0], [0.0]]),
             2: np.array([[1.0], [1.0]])}[fixed[0]]
    else:
        P = np.zeros((2, 0))
    gauss = tuple(a for a in range(3) if types[a] in (3, 5))
    return _Pattern(tuple(masks), tuple(types), tuple(partner), fixed, P, P.shape[1], gauss)


def _q_of(pat: _Pattern, e: np.ndarray) -> np.ndarray:
    """(N, 2): the fixed part q of (d_1, d_2) from the kept e_a."""
    N = e.shape[0]
    q = np.zeros((N, 2))
    f = pat.fixed
    if f == (0,):
        q[:, 0] = e[:, 0]
    elif f == (1,):
        q[:, 1] = e[:, 1]
    elif f == (2,):
        q[:, 1] = e[:, 2]
    elif f == (0, 1):
        q[:, 0], q[:, 1] = e[:, 0], e[:, 1]
    elif f == (0, 2):
        q[:, 0], q[:, 1] = e[:, 0], e[:, 0] + e[:, 2]
    elif f == (1, 2):
        q[:, 0], q[:, 1] = e[:, 1] - e[:, 2], e[:, 1]
    return q


def _row_interval(pat: _Pattern, a: int, delta: np.ndarray, beta: float):
    """(lo, hi, kinks) of D_a for a free row (types 1-3); arrays (N,), (N,), (N, k)."""
    N = delta.shape[0]
    t, s = pat.types[a], pat.partner[a]
    lo, hi = np.full(N, -np.inf), np.full(N, np.inf)
    kinks = np.zeros((N, 0))
    if t == 1:
        kinks = np.zeros((N, 1))
    elif t in (2, 3):
        kappa = np.full(N, -1.0 / beta) if t == 2 else delta[:, a] / 2 - 0.5 / beta
        if s == _OTHERS[a][0]:
            lo = -kappa
        else:
            hi = kappa
    return lo, hi, kinks


# ----------------------------------------------------------------------------- quadrature
@lru_cache(maxsize=32)
def _gl(n: int) -> tuple[np.ndarray, np.ndarray]:
    return np.polynomial.legendre.leggauss(n)


@lru_cache(maxsize=32)
def _gh(n: int) -> tuple[np.ndarray, np.ndarray]:
    x, w = np.polynomial.hermite_e.hermegauss(n)
    return x, w / math.sqrt(2 * math.pi)


def _rule_on(lo, hi, bps, *, rule: T3Rule, nodes: int):
    """Nodes and weights (standard normal density included) of eta on [lo, hi] n [-W, W], split at
    ``panels`` equal panels and at the breakpoints ``bps`` (..., k; nan = none). Shapes: lo, hi
    (...), result (..., K)."""
    W = rule.window
    lo_e = np.maximum(lo, -W)
    hi_e = np.minimum(hi, W)
    hi_e = np.maximum(hi_e, lo_e)
    grid = np.linspace(-W, W, rule.panels + 1)[1:-1]
    shape = lo_e.shape
    parts = [lo_e[..., None], np.broadcast_to(grid, (*shape, grid.size)), bps, hi_e[..., None]]
    pts = np.concatenate([np.broadcast_to(p, (*shape, p.shape[-1])) for p in parts], axis=-1)
    pts = np.where(np.isnan(pts), lo_e[..., None], pts)
    pts = np.clip(pts, lo_e[..., None], hi_e[..., None])
    pts.sort(axis=-1)
    a, b = pts[..., :-1], pts[..., 1:]
    width = b - a
    keep = width > 0
    order = np.argsort(~keep, axis=-1, kind="stable")
    K = max(int(keep.sum(axis=-1).max()) if keep.size else 0, 1)
    a = np.take_along_axis(a, order, axis=-1)[..., :K]
    width = np.take_along_axis(width, order, axis=-1)[..., :K]
    t, w = _gl(nodes)
    x = a[..., None] + width[..., None] * (t + 1) / 2
    wx = width[..., None] * w / 2 * np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)
    return x.reshape(*shape, -1), wx.reshape(*shape, -1)


def _gaussian_part(pat: _Pattern, delta, q, omega, V):
    """The Gaussian part in zeta = (x, m) (exp(-|R zeta + r0|^2 / 2) with its normalisations):
    u = Bz zeta + u0, its mean mu (N, p), covariance Gamma (p, p) and log integral log C (N,)."""
    p = pat.nd + 1
    Bz = np.hstack([_UD @ pat.P, np.ones((3, 1))])     # u = Bz zeta + u0
    u0 = q @ _UD.T
    om_u = omega[:, list(OFF)]
    sd_u, sd_d = math.sqrt(V), math.sqrt(2 * V)
    rows = [Bz / sd_u]
    offs = [(u0 - om_u) / sd_u]
    log_norm = -3 * (0.5 * _LOG2PI + math.log(sd_u))
    for a in pat.gauss_rows:
        j = _U[(a, pat.partner[a])]
        rows.append(Bz[j:j + 1] / sd_d)
        offs.append(((u0[:, j] + delta[:, a] - omega[:, DIAG[a]]) / sd_d)[:, None])
        log_norm -= 0.5 * _LOG2PI + math.log(sd_d)
    R = np.vstack(rows)
    r0 = np.hstack(offs)
    RtR = R.T @ R
    Gam = np.linalg.inv(RtR)
    Rr = r0 @ R                                          # (N, p)
    mu = -Rr @ Gam
    quad = np.einsum("ni,ni->n", r0, r0) - np.einsum("ni,ij,nj->n", Rr, Gam, Rr)
    logC = log_norm + 0.5 * p * _LOG2PI - 0.5 * np.linalg.slogdet(RtR)[1] - 0.5 * quad
    return Bz, u0, mu, Gam, logC


def _diagonals(pat: _Pattern, u, delta, omega, beta, V):
    """At u (..., 3): the sum of the log Phi factors and the diagonals' conditional means and
    variances (lists over rows); delta, omega broadcast against u[..., 0]."""
    sd_d = math.sqrt(2 * V)
    logf = np.zeros(u.shape[:-1])
    means, varis = [], []
    for a in range(3):
        t, s = pat.types[a], pat.partner[a]
        om = omega[..., DIAG[a]]
        b, c = _OTHERS[a]
        if t in (3, 5):
            means.append(u[..., _U[(a, s)]] + delta[..., a])
            varis.append(np.zeros(u.shape[:-1]))
            continue
        if t == 1:
            alpha = (np.maximum(u[..., _U[(a, b)]], u[..., _U[(a, c)]]) + 1 / beta - om) / sd_d
            lp = log_ndtr(-alpha)
            lam = np.exp(-0.5 * alpha * alpha - 0.5 * _LOG2PI - lp)
            means.append(om + sd_d * lam)
            varis.append(sd_d ** 2 * np.maximum(1 + alpha * lam - lam * lam, 0.0))
        else:
            if t == 2:
                ub = u[..., _U[(a, s)]] - 1 / beta
            else:
                ub = 0.5 * (u[..., _U[(a, b)]] + u[..., _U[(a, c)]]) - 0.5 / beta
            bb = (ub - om) / sd_d
            lp = log_ndtr(bb)
            rho = np.exp(-0.5 * bb * bb - 0.5 * _LOG2PI - lp)
            means.append(om - sd_d * rho)
            varis.append(sd_d ** 2 * np.maximum(1 - bb * rho - rho * rho, 0.0))
        logf = logf + lp
    return logf, means, varis


def _finite(v):
    return np.where(np.isfinite(v), v, np.nan)


def _nodes(pat: _Pattern, delta, q, mu, Lc, beta, rule: T3Rule, nodes: int, hermite: int):
    """zeta nodes (N, G, p) and weights (N, G) of the iterated rule (module docstring)."""
    N, p = mu.shape
    gx, gw = _gh(hermite)
    if pat.nd == 0:
        z = mu[:, None, :] + Lc[0, 0] * gx[None, :, None]
        return z, np.broadcast_to(gw, (N, gx.size))
    if pat.nd == 1:
        c = (_MD @ pat.P)[:, 0]
        f = q @ _MD.T
        lo, hi = np.full(N, -np.inf), np.full(N, np.inf)
        bps = []
        for a in range(3):
            if c[a] == 0:
                continue
            la, ha, ka = _row_interval(pat, a, delta, beta)
            ends = np.sort(np.stack([(la - f[:, a]) / c[a], (ha - f[:, a]) / c[a]]), axis=0)
            lo, hi = np.maximum(lo, ends[0]), np.minimum(hi, ends[1])
            bps.append((ka - f[:, a:a + 1]) / c[a])
        s = Lc[0, 0]
        B = np.concatenate(bps, axis=1) if bps else np.zeros((N, 0))
        e1, w1 = _rule_on((lo - mu[:, 0]) / s, (hi - mu[:, 0]) / s, (B - mu[:, :1]) / s,
                          rule=rule, nodes=nodes)
        zx = mu[:, None, 0] + s * e1                                    # (N, K)
        zm = (mu[:, None, None, 1] + Lc[1, 0] * e1[..., None] + Lc[1, 1] * gx)  # (N, K, H)
        z = np.stack([np.broadcast_to(zx[..., None], zm.shape), zm], axis=-1)
        w = w1[..., None] * gw
        return z.reshape(N, -1, 2), w.reshape(N, -1)
    # two free differences: x = (d_1, d_2); D_0 = d_1, D_1 = d_2, D_2 = d_2 - d_1
    l0, h0, k0 = _row_interval(pat, 0, delta, beta)
    l1, h1, k1 = _row_interval(pat, 1, delta, beta)
    l2, h2, k2 = _row_interval(pat, 2, delta, beta)
    p1 = np.concatenate([_finite(l1)[:, None], _finite(h1)[:, None], k1], axis=1)
    p2 = np.concatenate([_finite(l2)[:, None], _finite(h2)[:, None], k2], axis=1)
    cross = (p1[:, :, None] - p2[:, None, :]).reshape(N, -1)
    s1 = Lc[0, 0]
    B1 = np.concatenate([k0, cross], axis=1)
    e1, w1 = _rule_on((l0 - mu[:, 0]) / s1, (h0 - mu[:, 0]) / s1, (B1 - mu[:, :1]) / s1,
                      rule=rule, nodes=nodes)                           # (N, K1)
    x1 = mu[:, None, 0] + s1 * e1
    base = mu[:, None, 1] + Lc[1, 0] * e1                               # x2 = base + L22 eta2
    s2 = Lc[1, 1]
    lo2 = np.maximum(l1[:, None], x1 + l2[:, None])
    hi2 = np.minimum(h1[:, None], x1 + h2[:, None])
    B2 = np.concatenate([np.broadcast_to(k1[:, None, :], (*x1.shape, k1.shape[1])),
                         x1[..., None] + k2[:, None, :]], axis=-1)
    e2, w2 = _rule_on((lo2 - base) / s2, (hi2 - base) / s2, (B2 - base[..., None]) / s2,
                      rule=rule, nodes=nodes)                           # (N, K1, K2)
    x2 = base[..., None] + s2 * e2
    zm = (mu[:, None, None, None, 2] + Lc[2, 0] * e1[:, :, None, None]
          + Lc[2, 1] * e2[..., None] + Lc[2, 2] * gx)                   # (N, K1, K2, H)
    shp = zm.shape
    z = np.stack([np.broadcast_to(x1[:, :, None, None], shp), np.broadcast_to(x2[..., None], shp),
                  zm], axis=-1)
    w = w1[:, :, None, None] * w2[..., None] * gw
    return z.reshape(N, -1, 3), w.reshape(N, -1)


def _moments(pat: _Pattern, delta, e, omega, *, V: float, beta: float, rule: T3Rule,
             nodes: int, hermite: int, second: bool = True):
    """log Z (N,), E[h | y] (N, 6) and E[h h^T | y] (N, 6, 6) (or None) on one pattern."""
    q = _q_of(pat, e)
    Bz, u0, mu, Gam, logC = _gaussian_part(pat, delta, q, omega, V)
    Lc = np.linalg.cholesky(Gam)
    z, w = _nodes(pat, delta, q, mu, Lc, beta, rule, nodes, hermite)
    u = z @ Bz.T + u0[:, None, :]
    logf, means, varis = _diagonals(pat, u, delta[:, None, :], omega[:, None, :], beta, V)
    with np.errstate(divide="ignore"):
        lw = np.log(w) + logf
    top = np.max(lw, axis=1, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    W = np.exp(lw - top)
    mass = W.sum(axis=1)
    with np.errstate(divide="ignore"):
        logZ = logC + top[:, 0] + np.log(mass)
    Wn = W / np.where(mass > 0, mass, 1.0)[:, None]
    hc = np.empty((*u.shape[:-1], 6))
    for k, j in enumerate(OFF):
        hc[..., j] = u[..., k]
    for a, j in enumerate(DIAG):
        hc[..., j] = means[a]
    Eh = np.einsum("ng,ngi->ni", Wn, hc)
    if not second:
        return logZ, Eh, None
    Ehh = np.einsum("ng,ngi,ngj->nij", Wn, hc, hc)
    for a, j in enumerate(DIAG):
        Ehh[:, j, j] += np.einsum("ng,ng->n", Wn, varis[a])
    return logZ, Eh, Ehh


# ----------------------------------------------------------------------------- Z_out, g_out
@dataclass(frozen=True)
class ZOut:
    """Z_out (density of the kept statistics on the pattern, module docstring), g_out (N, 6),
    dg_out (N, 6, 6) with their error bars (difference of two rules), E[h | y] (N, 6)."""

    Z: np.ndarray
    Z_error: np.ndarray
    g: np.ndarray
    g_error: np.ndarray
    dg: np.ndarray
    dg_error: np.ndarray
    log_z: np.ndarray
    patterns: np.ndarray


def _by_pattern(pat, fn):
    """Apply fn(masks, index array) on the groups of equal patterns."""
    keys = pat[:, 0] + 8 * pat[:, 1] + 64 * pat[:, 2]
    for k in np.unique(keys):
        idx = np.nonzero(keys == k)[0]
        fn((int(k % 8), int(k // 8 % 8), int(k // 64)), idx)


def _g_dg(Eh, Ehh, omega, V):
    s_inv = 1.0 / (V * WEIGHTS)
    g = (Eh - omega) * s_inv
    if Ehh is None:
        return g, None
    cov = Ehh - Eh[:, :, None] * Eh[:, None, :]
    dg = cov * s_inv[:, None] * s_inv[None, :] - np.diag(s_inv)
    return g, dg


def z_out(y, *, omega, V: float, beta: float, rule: T3Rule = DEFAULT_RULE,
          chunk: int = 8) -> ZOut:
    """Z_out(y; omega, V), g_out and dg_out at outputs y (N, 3, 3) (rows on the simplex) and
    omega (N, 6) or (6,) (THEORY 1.1, 1.4), every pattern, errors = |fine - coarse rule|."""
    _check_beta(beta)
    require(np.isfinite(V) and V > 0, "V", "finite > 0", V)
    y = np.asarray(y, dtype=float).reshape(-1, 3, 3)
    N = y.shape[0]
    require(np.all(np.isfinite(y)) and np.all(y >= 0) and np.allclose(y.sum(-1), 1.0, atol=1e-9),
            "y", "rows on the probability simplex", "a row off the simplex")
    om = np.broadcast_to(np.asarray(omega, dtype=float), (N, 6)).copy()
    require(np.all(np.isfinite(om)), "omega", "finite", "non-finite entries")
    pat, delta, e = statistics_of(y, beta=beta)
    three = np.all(np.isfinite(e), axis=1)
    require(np.all(np.abs(e[three, 2] - e[three, 1] + e[three, 0])
                   <= 1e-9 * (1 + np.abs(e[three]).max(axis=1, initial=0))),
            "y", "the output of a symmetric h (rows without their diagonal: e_2 = e_1 - e_0)",
            "inconsistent rows")
    out = {k: np.zeros(s) for k, s in (("Z", N), ("Ze", N), ("lz", N), ("g", (N, 6)),
                                        ("ge", (N, 6)), ("dg", (N, 6, 6)), ("dge", (N, 6, 6)))}

    def run(masks, idx):
        p = _pattern(masks)
        for s in range(0, idx.size, chunk):
            i = idx[s:s + chunk]
            res = []
            for n, h in ((rule.nodes, rule.hermite), (rule.coarse_nodes, rule.coarse_hermite)):
                lz, Eh, Ehh = _moments(p, delta[i], e[i], om[i], V=V, beta=beta, rule=rule,
                                       nodes=n, hermite=h)
                res.append((lz, *_g_dg(Eh, Ehh, om[i], V)))
            (lz, g, dg), (lz0, g0, dg0) = res
            out["lz"][i], out["Z"][i] = lz, np.exp(lz)
            out["Ze"][i] = np.abs(np.exp(lz) - np.exp(lz0))
            out["g"][i], out["ge"][i] = g, np.abs(g - g0)
            out["dg"][i], out["dge"][i] = dg, np.abs(dg - dg0)

    _by_pattern(pat, run)
    return ZOut(out["Z"], out["Ze"], out["g"], out["ge"], out["dg"], out["dge"], out["lz"], pat)


def sample_outputs(*, beta: float, n: int, seed: int, omega=None, V: float = 1.0):
    """n draws of h ~ N(omega, V diag(1 + delta_ab)) (omega (6,) or (n, 6), default 0) and their
    outputs y (n, 3, 3)."""
    rng = np.random.default_rng(seed)
    om = np.zeros(6) if omega is None else np.asarray(omega, dtype=float)
    h = om + np.sqrt(V * WEIGHTS) * rng.standard_normal((n, 6))
    return h, sparsemax_rows(h, beta=beta)


# ----------------------------------------------------------------------------- small width
def discrete_patterns() -> list[tuple[int, int, int]]:
    """The 27 patterns without continuous statistics (every row of type 1 or 2: one-hot rows)."""
    return [(1 << i, 1 << j, 1 << k) for i in range(3) for j in range(3) for k in range(3)]


def _shift_free_norm(h: np.ndarray) -> np.ndarray:
    """Q(h) = |h - t(h) 1|^2 in the metric Sigma^-1 (V = 1), t = 1^T Sigma^-1 h / 1^T Sigma^-1 1:
    g^T W g of an all-full pattern at omega = 0 (E Q = 5)."""
    wi = 1.0 / WEIGHTS
    t = (h @ wi) / wi.sum()
    r = h - t[:, None]
    return (r * r) @ wi


def discrete_part(*, beta: float, rule: T3Rule = DEFAULT_RULE) -> dict:
    """The one-hot patterns at q = 0, V = 1: their total probability P_d and their part S_d of S
    (each pattern's g_out is constant), with errors (two rules)."""
    pats = discrete_patterns()
    vals = []
    for n, hh in ((rule.nodes, rule.hermite), (rule.coarse_nodes, rule.coarse_hermite)):
        P = S = 0.0
        for mk in pats:
            p = _pattern(mk)
            nan = np.full((1, 3), np.nan)
            lz, Eh, _ = _moments(p, nan, nan, np.zeros((1, 6)), V=1.0, beta=beta, rule=rule,
                                 nodes=n, hermite=hh, second=False)
            pz = float(np.exp(lz[0]))
            P += pz
            S += pz * float((Eh[0] ** 2) @ (1.0 / WEIGHTS))
        vals.append((P, S))
    (P, S), (P0, S0) = vals
    return {"P": P, "P_error": abs(P - P0), "S": S, "S_error": abs(S - S0)}


def _g_sq(h: np.ndarray, *, beta: float, rule: T3Rule, nodes: int, hermite: int,
          chunk: int = 8) -> np.ndarray:
    """g^T W g at omega = 0, V = 1 for the outputs of h (N, 6) on continuous patterns (0 on the
    one-hot ones)."""
    y = sparsemax_rows(h, beta=beta)
    pat, delta, e = statistics_of(y, beta=beta)
    G = np.zeros(h.shape[0])
    wi = 1.0 / WEIGHTS

    def run(masks, idx):
        p = _pattern(masks)
        if not p.continuous:
            return
        for s in range(0, idx.size, chunk):
            i = idx[s:s + chunk]
            _, Eh, _ = _moments(p, delta[i], e[i], np.zeros((i.size, 6)), V=1.0, beta=beta,
                                rule=rule, nodes=nodes, hermite=hermite, second=False)
            G[i] = (Eh ** 2) @ wi

    _by_pattern(pat, run)
    return G


def _row_polytopes(beta: float):
    """(mask, A, b) for the 7 supports of one row (h_aa, h_ab, h_ac): y_ai > 0 on S, = 0 off S."""
    for mk in range(1, 8):
        S = [j for j in range(3) if mk >> j & 1]
        A, b = [], []
        for j in range(3):
            row = np.zeros(3)
            row[S] -= 1.0 / len(S)
            row[j] += 1.0
            if j not in S:
                A.append(row)
                b.append(-1.0 / (beta * len(S)))
            elif len(S) > 1:
                A.append(-row)
                b.append(1.0 / (beta * len(S)))
        yield mk, np.array(A), np.array(b)


def row_type_probabilities(*, beta: float) -> tuple[np.ndarray, np.ndarray]:
    """P(row a is of type k), k = 1..5 (module docstring), at q = 0, V = 1 (the same for every
    row), with errors: Gaussian polygon masses of (h_aa, h_ab, h_ac) ~ N(0, diag(2, 1, 1)) by
    :func:`aim_sym.numerics.polytope.gaussian_polytope` (rank 2: its deterministic rule)."""
    from .polytope import gaussian_polytope

    _check_beta(beta)
    P, E = np.zeros(5), np.zeros(5)
    for mk, A, b in _row_polytopes(beta):
        m = gaussian_polytope(A=A, b=b, omega=np.zeros((1, 3)), cov=np.diag([2.0, 1.0, 1.0]),
                              order=0)
        k = _pattern((mk, 1, 1)).types[0] - 1
        P[k] += float(m.mass[0])
        E[k] += float(m.mass_error[0])
    return P, E


def saturation_bound(*, beta: float) -> float:
    """B >= 5 - S >= 0 (q = 0, V = 1): on the all-full patterns g^T W g = Q(h), so
    5 - S = E[(Q - g^T W g) 1_sat] <= E[Q 1_sat] <= E[|h|^2_Sigma 1_sat] <= sum over rows of
    E[|h|^2_Sigma 1(row a saturated)] (1_sat: some row without full support); each term is the
    row's truncated second moment (:func:`gaussian_polytope`, order 2) plus 3 P(row saturated)
    for the three entries outside the row. Rigorous; used where too few saturated rows are
    sampled for a standard error (small beta)."""
    from .polytope import gaussian_polytope

    _check_beta(beta)
    cov = np.diag([2.0, 1.0, 1.0])
    total = 0.0
    for mk, A, b in _row_polytopes(beta):
        if mk == 7:
            continue
        m = gaussian_polytope(A=A, b=b, omega=np.zeros((1, 3)), cov=cov, order=2)
        Z = float(m.mass[0])
        if Z <= 0:
            continue
        g, dg = m.g_out[0], m.dg_out[0]
        M = Z * (cov @ (dg + np.outer(g, g)) @ cov + cov)      # E[h h^T 1]
        err = float(m.mass_error[0]) * 20 + Z * float(np.abs(m.dg_out_error[0]).sum()
                                                      + 4 * np.abs(m.g_out_error[0]).sum())
        total += float(np.trace(M) / 2 + M[1, 1] / 2 + M[2, 2] / 2) + 3 * Z + err
    return 3 * total


#: the rule of the small-width expectation (g^T W g to ~1e-8, the coarse one to ~1e-5; the bar is
#: measured: their mean difference on the first replicate)
S_RULE = T3Rule(nodes=8, coarse_nodes=6, hermite=14, coarse_hermite=10, panels=5, window=7.5)


#: fewer saturated samples expected than this: the bar takes :func:`saturation_bound`
RARE_EVENTS = 30


def _controls(h: np.ndarray, *, beta: float, p_disc: float, p_type: np.ndarray) -> np.ndarray:
    """Control variates of mean zero (N, 6): Q(h) - 5, 1[one-hot pattern] - P_d, and the number
    of rows of types 1..4 minus 3 P(type)."""
    y = sparsemax_rows(h, beta=beta)
    pat = patterns_of(y)
    disc = np.all((pat == 1) | (pat == 2) | (pat == 4), axis=1).astype(float)
    types = np.zeros(pat.shape, dtype=int)
    for a in range(3):
        for mk in range(1, 8):
            types[pat[:, a] == mk, a] = _pattern(tuple(mk if j == a else 7 for j in range(3)))\
                .types[a]
    cnt = np.stack([(types == k).sum(axis=1) - 3 * p_type[k - 1] for k in range(1, 5)], axis=1)
    return np.column_stack([_shift_free_norm(h) - 5.0, disc - p_disc, cnt])


def small_width_s(*, beta: float, points: int = 1 << 12, replicates: int = 8, seed: int = 2026,
                  pilot: int = 4096, rule: T3Rule = S_RULE) -> Estimate:
    """S = E_{q=0}[sum (1 + delta_ab) g_ab^2] at V = 1 (THEORY 1.2) at T = 3: the one-hot patterns
    by the rule (:func:`discrete_part`), the continuous ones by randomised QMC over h
    (``replicates`` Owen-scrambled Sobol sequences of ``points`` points, seeded) with the
    control variates of :func:`_controls` (coefficients fitted on ``pilot`` seeded plain draws,
    independent of the replicates, so the estimator stays unbiased). Error = 3 standard errors
    over the replicates + the rules' difference on the first replicate + the discrete part's
    and the control means' errors; ``extra`` keeps the pieces."""
    from scipy.stats import qmc

    _check_beta(beta)
    require(isinstance(points, int) and points >= 16 and points & (points - 1) == 0, "points",
            "a power of 2 >= 16", points)
    require(isinstance(replicates, int) and replicates >= 4, "replicates", "an integer >= 4",
            replicates)
    t0 = time.perf_counter()
    disc = discrete_part(beta=beta, rule=rule)
    p_type, p_type_err = row_type_probabilities(beta=beta)

    def controls(h):
        return _controls(h, beta=beta, p_disc=disc["P"], p_type=p_type)

    def g_sq(h, coarse=False):
        n, hh = (rule.coarse_nodes, rule.coarse_hermite) if coarse else (rule.nodes, rule.hermite)
        return _g_sq(h, beta=beta, rule=rule, nodes=n, hermite=hh)

    rng = np.random.default_rng(seed + 7919)
    hp = np.sqrt(WEIGHTS) * rng.standard_normal((pilot, 6))
    Xp = controls(hp)
    A = np.column_stack([np.ones(pilot), Xp])
    coef = np.linalg.lstsq(A, g_sq(hp), rcond=None)[0][1:]
    means, rule_diff = [], 0.0
    for r, child in enumerate(np.random.SeedSequence(seed).spawn(replicates)):
        u = qmc.Sobol(d=6, scramble=True, seed=np.random.default_rng(child)).random(points)
        h = np.sqrt(WEIGHTS) * ndtri(np.clip(u, 1e-16, 1 - 1e-16))
        G = g_sq(h)
        means.append(float((G - controls(h) @ coef).mean()))
        if r == 0:
            rule_diff = float(np.abs(G - g_sq(h, coarse=True)).mean())
    m = float(np.mean(means))
    se = float(standard_error(means))
    S = disc["S"] + m
    ctrl_err = abs(coef[1]) * disc["P_error"] + 3 * float(np.abs(coef[2:]) @ p_type_err[:4])
    err = 3 * se + rule_diff + disc["S_error"] + ctrl_err
    # saturated rows expected in the sample: below RARE_EVENTS the standard error does not see
    # them, so the rigorous bound 0 <= 5 - S <= B joins the bar
    expected_sat = replicates * points * min(1.0, 3 * (1 - p_type[4]))
    bound = saturation_bound(beta=beta) if expected_sat < RARE_EVENTS else None
    if bound is not None:
        err += bound
    # S <= 5 holds exactly (y is a function of the within-row differences, all of which softmax
    # sees: Fisher information only falls under a map): the interval is cut at 5, so that no
    # reported alpha_bar_c lies below softmax's 1/10 (seen at beta = 0.1: S = 5.0001 +- 2e-4)
    raw = S
    hi = min(S + err, 5.0)
    lo = min(S - err, hi)
    S, err = (lo + hi) / 2, (hi - lo) / 2
    return Estimate(S, err, f"one-hot patterns by the rule + randomised QMC ({replicates} x "
                    f"{points} scrambled Sobol points, seed {seed}, 6 control variates); "
                    "interval cut at the exact bound S <= 5",
                    extra={"standard_error": se, "rule_difference": rule_diff,
                           "discrete": disc, "control_coefficients": coef.tolist(),
                           "row_type_probabilities": p_type.tolist(),
                           "expected_saturated": expected_sat, "saturation_bound": bound,
                           "replicate_means": means, "unclipped": raw,
                           "seconds": time.perf_counter() - t0})


def weak_threshold(*, beta: float, tokens: int = 3, points: int = 1 << 12, replicates: int = 8,
                   seed: int = 2026, rule: T3Rule = S_RULE) -> Estimate:
    """alpha_bar_c(beta) = 1 / (2 S) of sparsemax attention at small width (THEORY 1.2, 1.4),
    T = 3 (T = 2: :mod:`aim_sym.numerics.sparsemax`); error propagated from S's."""
    require(tokens == 3, "tokens", "3 (T = 2 is aim_sym.numerics.sparsemax)", tokens)
    s = small_width_s(beta=beta, points=points, replicates=replicates, seed=seed, rule=rule)
    a = 1.0 / (2 * s.value)
    return Estimate(a, a * s.error / s.value, s.method,
                    extra={"S": s.value, "S_error": s.error, **s.extra})


# ----------------------------------------------------------------------------- independent route
_FLAT = {(0, 0): 0, (0, 1): 1, (1, 0): 1, (0, 2): 2, (2, 0): 2, (1, 1): 3, (1, 2): 4, (2, 1): 4,
         (2, 2): 5}


def statistic_matrix(masks: tuple[int, int, int]) -> np.ndarray:
    """C (k, 6): the kept statistics of a pattern as linear forms of h (delta_a = h_aa - h_as,
    e_a = h_ab - h_ac; module docstring); k = 0 for the one-hot patterns."""
    p = _pattern(tuple(masks))
    rows = []
    for a in p.gauss_rows:
        r = np.zeros(6)
        r[_FLAT[(a, a)]] += 1
        r[_FLAT[(a, p.partner[a])]] -= 1
        rows.append(r)
    for a in p.fixed:
        b, c = _OTHERS[a]
        r = np.zeros(6)
        r[_FLAT[(a, b)]] += 1
        r[_FLAT[(a, c)]] -= 1
        rows.append(r)
    return np.array(rows).reshape(-1, 6)


def posterior_draws(h: np.ndarray, *, beta: float, draws: int, rng: np.random.Generator,
                    omega=None, V: float = 1.0, max_rounds: int = 1_000_000) -> np.ndarray:
    """``draws`` exact draws from the posterior of h given y(h) (prior N(omega, V Sigma), omega
    (N, 6) or None = 0), for each row of h (N, 6) -> (draws, N, 6): h' from the prior
    conditioned on C h' = C h (the pattern's kept statistics), accepted when its pattern is
    that of h (then y(h') = y(h)); rejection, no quadrature."""
    pat = patterns_of(sparsemax_rows(h, beta=beta))
    N = h.shape[0]
    Sig = WEIGHTS
    Pm = np.zeros((N, 6, 6))      # h' = xi (I - Pm) + h Pm, Pm = C^T K^T

    def run(masks, idx):
        C = statistic_matrix(masks)
        if C.shape[0]:
            K = (Sig[:, None] * C.T) @ np.linalg.inv((C * Sig) @ C.T)
            Pm[idx] = C.T @ K.T

    _by_pattern(pat, run)
    hP = np.einsum("ni,nij->nj", h, Pm)
    out = np.empty((draws, N, 6))
    for d in range(draws):
        todo = np.arange(N)
        for _ in range(max_rounds):
            # r candidates per pending row (more once few are left): the first accepted one is
            # distributed as sequential rejection's
            r = max(1, min(4096, 16384 // todo.size))
            rows = np.repeat(todo, r)
            xi = np.sqrt(V * Sig) * rng.standard_normal((rows.size, 6))
            if omega is not None:
                xi = xi + omega[rows]
            xi = xi - np.einsum("ni,nij->nj", xi, Pm[rows]) + hP[rows]
            ok = np.all(patterns_of(sparsemax_rows(xi, beta=beta)) == pat[rows], axis=1)
            ok = ok.reshape(todo.size, r)
            hit = ok.any(axis=1)
            first = np.argmax(ok, axis=1)
            pick = np.arange(todo.size) * r + first
            out[d, todo[hit]] = xi[pick[hit]]
            todo = todo[~hit]
            if todo.size == 0:
                break
        else:
            raise ConvergenceError("posterior rejection sampler did not finish",
                                   last_iterate=max_rounds, residual=int(todo.size))
    return out


def monte_carlo_s(*, beta: float, n: int = 200_000, seed: int = 2026, draws: int = 2,
                  batch: int = 50_000) -> Estimate:
    """S at q = 0, V = 1 by seeded plain Monte Carlo with no quadrature (independent of
    :func:`small_width_s`): S = E[h^T Sigma^-1 h'] for h ~ N(0, Sigma) and h' an exact posterior
    draw given y(h) (:func:`posterior_draws`), averaged over the pairs of h and ``draws`` such
    draws; error = the standard error over the n draws of h."""
    _check_beta(beta)
    require(isinstance(n, int) and n >= 1000, "n", "an integer >= 1000", n)
    require(isinstance(draws, int) and draws >= 1, "draws", "an integer >= 1", draws)
    rng = np.random.default_rng(seed)
    vals = []
    wi = 1.0 / WEIGHTS
    for s in range(0, n, batch):
        m = min(batch, n - s)
        h = np.sqrt(WEIGHTS) * rng.standard_normal((m, 6))
        hp = posterior_draws(h, beta=beta, draws=draws, rng=rng)
        xs = [h, *hp]
        tot = np.zeros(m)
        npair = 0
        for i in range(len(xs)):
            for j in range(i + 1, len(xs)):
                tot += (xs[i] * xs[j]) @ wi
                npair += 1
        vals.append(tot / npair)
    v = np.concatenate(vals)
    return Estimate(float(v.mean()), standard_error(v),
                    f"seeded Monte Carlo, {n} draws of h, {draws} posterior draws each, seed {seed}")


# ----------------------------------------------------------------------------- finite rho
def _e_terms(omega: np.ndarray, h: np.ndarray, *, beta: float, V: float, rule: T3Rule,
             coarse: bool = False, chunk: int = 8) -> np.ndarray:
    """g^T W g at (y(h), omega) for each row (every pattern: omega differs per row)."""
    n, hh = (rule.coarse_nodes, rule.coarse_hermite) if coarse else (rule.nodes, rule.hermite)
    y = sparsemax_rows(h, beta=beta)
    pat, delta, e = statistics_of(y, beta=beta)
    G = np.zeros(h.shape[0])

    def run(masks, idx):
        p = _pattern(masks)
        for s in range(0, idx.size, chunk):
            i = idx[s:s + chunk]
            _, Eh, _ = _moments(p, delta[i], e[i], omega[i], V=V, beta=beta, rule=rule,
                                nodes=n, hermite=hh, second=False)
            G[i] = ((Eh - omega[i]) ** 2) @ (1.0 / WEIGHTS) / V ** 2

    _by_pattern(pat, run)
    return G


def _q_control(omega: np.ndarray, h: np.ndarray, V: float) -> np.ndarray:
    """|h - omega - t 1|^2_Sigma / V^2 - 5 / V: mean zero; g^T W g on the all-full patterns."""
    return _shift_free_norm(h - omega) / V ** 2 - 5.0 / V


def output_e(*, q: float, V: float, beta: float, points: int = 1 << 11, replicates: int = 8,
             seed: int = 2026, pilot: int = 256, rule: T3Rule = S_RULE) -> Estimate:
    """E(q, V) = E_omega sum_y Z g^T W g (THEORY 1.1) at T = 3: randomised QMC over (omega, h) in
    12 dimensions (omega ~ N(0, q W), h ~ N(omega, V W)), g_out by the rule, with six control
    variates of known mean: the all-full term (mean 5 / V) and, since h ~ N(0, (q + V) W), the
    one-hot indicator and the row-type counts of :func:`_controls` at beta sqrt(q + V), V = 1
    (coefficients fitted on ``pilot`` seeded plain draws). Error = 3 standard errors over the
    replicates + the rules' mean difference on the first one + the control means' errors."""
    from scipy.stats import qmc

    _check_beta(beta)
    require(np.isfinite(q) and q >= 0, "q", "finite >= 0", q)
    require(np.isfinite(V) and V > 0, "V", "finite > 0", V)
    require(isinstance(points, int) and points >= 16 and points & (points - 1) == 0, "points",
            "a power of 2 >= 16", points)
    require(isinstance(replicates, int) and replicates >= 4, "replicates", "an integer >= 4",
            replicates)
    t0 = time.perf_counter()
    Q0 = q + V
    b1 = beta * math.sqrt(Q0)           # h / sqrt(Q0) ~ N(0, W) and y(h; beta) = y(h / sqrt Q0; b1)
    _check_beta(b1)
    disc = discrete_part(beta=b1, rule=rule)
    p_type, p_type_err = row_type_probabilities(beta=b1)
    sq, sv = np.sqrt(q * WEIGHTS), np.sqrt(V * WEIGHTS)

    def controls(om, h):
        X = _controls(h / math.sqrt(Q0), beta=b1, p_disc=disc["P"], p_type=p_type)
        X[:, 0] = _q_control(om, h, V)
        return X

    rng = np.random.default_rng(seed + 7919)
    z = rng.standard_normal((pilot, 12))
    om, h = sq * z[:, :6], sq * z[:, :6] + sv * z[:, 6:]
    A = np.column_stack([np.ones(pilot), controls(om, h)])
    coef = np.linalg.lstsq(A, _e_terms(om, h, beta=beta, V=V, rule=rule), rcond=None)[0][1:]
    means, rule_diff = [], 0.0
    for r, child in enumerate(np.random.SeedSequence(seed).spawn(replicates)):
        u = qmc.Sobol(d=12, scramble=True, seed=np.random.default_rng(child)).random(points)
        z = ndtri(np.clip(u, 1e-16, 1 - 1e-16))
        om, h = sq * z[:, :6], sq * z[:, :6] + sv * z[:, 6:]
        G = _e_terms(om, h, beta=beta, V=V, rule=rule)
        means.append(float((G - controls(om, h) @ coef).mean()))
        if r == 0:
            rule_diff = float(np.abs(G - _e_terms(om, h, beta=beta, V=V, rule=rule,
                                                  coarse=True)).mean())
    se = float(standard_error(means))
    ctrl_err = abs(coef[1]) * disc["P_error"] + 3 * float(np.abs(coef[2:]) @ p_type_err[:4])
    return Estimate(float(np.mean(means)), 3 * se + rule_diff + ctrl_err,
                    f"randomised QMC over (omega, h) ({replicates} x {points} scrambled Sobol "
                    f"points, seed {seed}, 6 control variates)",
                    extra={"standard_error": se, "rule_difference": rule_diff,
                           "control_coefficients": coef.tolist(),
                           "seconds": time.perf_counter() - t0})


def monte_carlo_e(*, q: float, V: float, beta: float, n: int = 100_000, seed: int = 2026,
                  draws: int = 2, batch: int = 50_000) -> Estimate:
    """E(q, V) by seeded plain Monte Carlo without quadrature (independent of :func:`output_e`):
    E[(h - omega)^T (V Sigma)^-1 ... ] as the mean over pairs of h and exact posterior draws h'
    (:func:`posterior_draws`) of (h - omega)^T W^-1 (h' - omega) / V^2; error = standard error."""
    _check_beta(beta)
    require(isinstance(n, int) and n >= 1000, "n", "an integer >= 1000", n)
    rng = np.random.default_rng(seed)
    wi = 1.0 / WEIGHTS
    vals = []
    for s in range(0, n, batch):
        m = min(batch, n - s)
        om = np.sqrt(q * WEIGHTS) * rng.standard_normal((m, 6))
        h = om + np.sqrt(V * WEIGHTS) * rng.standard_normal((m, 6))
        xs = [h - om, *(hp - om for hp in posterior_draws(h, beta=beta, draws=draws, rng=rng,
                                                           omega=om, V=V))]
        tot = sum((xs[i] * xs[j]) @ wi for i in range(len(xs)) for j in range(i + 1, len(xs)))
        vals.append(tot / (len(xs) * (len(xs) - 1) / 2) / V ** 2)
    v = np.concatenate(vals)
    return Estimate(float(v.mean()), standard_error(v),
                    f"seeded Monte Carlo, {n} draws, {draws} posterior draws each, seed {seed}")


def se_curve_traced(*, rho: float, beta: float, mmses, points: int = 1 << 11,
                    replicates: int = 8, seed: int = 2026) -> list[dict]:
    """The SE at finite rho traced by the error V = mmse (THEORY 1.1):
    :func:`aim_sym.numerics.sparsemax.traced_rows` on :func:`output_e` (randomised QMC)."""
    from .sparsemax import traced_rows

    return traced_rows(lambda q, V: output_e(q=q, V=V, beta=beta, points=points,
                                             replicates=replicates, seed=seed),
                       rho=rho, mmses=mmses)


# ----------------------------------------------------------------------------- identity checks
#: omega of the identity checks (omega != 0, every kind of pattern reached)
CHECK_OMEGA = np.array([0.4, -0.3, 0.2, -0.5, 0.6, 0.1])


def _central(f, x: np.ndarray, k: int, step: float):
    e = np.zeros(6)
    e[k] = step
    return (f(x + e) - f(x - e)) / (2 * step)


def run_checks(*, beta: float, V: float = 0.7, pieces=None, n: int = 800,
               seed: int = 9) -> list[dict]:
    """The identity checks of the T = 3 channel (THEORY 1.2), each a dict (name, passed, detail),
    on ``n`` seeded outputs drawn at omega = :data:`CHECK_OMEGA`:

    * g_out and dg_out against central differences of log Z_out and g_out at steps 2e-3 and
      1e-3, on one output of every kind of pattern (one-hot, 0, 1, 2 free differences): within
      the rule's bar plus the two differences' gap;
    * Nishimori E_y[g g^T + dg] = 0: every entry within 4 standard errors;
    * with ``pieces`` (the derived pieces, :func:`aim_sym.sparsemax_pieces.piece_arrays` at this
      beta: supports, C, A, b), g_out and dg_out against the Gaussian polytope engine
      (:func:`aim_sym.numerics.polytope.observed_polytope`) on the derived polytope of each
      picked output's piece, within the two bars (g and dg do not depend on the piece's
      reference measure)."""
    from .polytope import observed_polytope

    _check_beta(beta)
    require(np.isfinite(V) and V > 0, "V", "finite > 0", V)
    omega = CHECK_OMEGA
    h, y = sample_outputs(beta=beta, n=n, seed=seed, omega=omega, V=V)
    pat, _, _ = statistics_of(y, beta=beta)
    picks: dict = {}
    for i in range(len(h)):
        p = _pattern(tuple(int(m) for m in pat[i]))
        picks.setdefault((p.nd, p.continuous), i)
    out = []
    excess, worst = -math.inf, 0.0
    for i in picks.values():
        yi = y[i:i + 1]
        o = z_out(yi, omega=omega, V=V, beta=beta)

        def log_z(om, yi=yi):
            return z_out(yi, omega=om, V=V, beta=beta).log_z[0]

        def g(om, yi=yi):
            return z_out(yi, omega=om, V=V, beta=beta).g[0]

        for k in range(6):
            d1, d2 = _central(log_z, omega, k, 2e-3), _central(log_z, omega, k, 1e-3)
            dev = abs(o.g[0, k] - d2)
            excess = max(excess, dev - o.g_error[0, k] - abs(d1 - d2))
            worst = max(worst, dev)
            j1, j2 = _central(g, omega, k, 2e-3), _central(g, omega, k, 1e-3)
            dev = np.abs(o.dg[0, :, k] - j2)
            excess = max(excess, float(np.max(dev - o.dg_error[0, :, k] - np.abs(j1 - j2))))
            worst = max(worst, float(dev.max()))
    out.append({"name": f"g_out, dg_out = derivatives of log Z_out, g_out ({len(picks)} kinds "
                        "of pattern, central differences)", "passed": bool(excess <= 0),
                "detail": f"largest deviation {worst:.1e}; largest (deviation - bar - gap) "
                          f"{excess:.1e} (must be <= 0)"})
    o = z_out(y, omega=omega, V=V, beta=beta)
    x = o.g[:, :, None] * o.g[:, None, :] + o.dg
    z = np.abs(x.mean(0)) / np.maximum(x.std(0, ddof=1) / math.sqrt(len(x)), 1e-300)
    out.append({"name": f"Nishimori E_y[g g^T + dg] = 0 ({n} seeded outputs, omega != 0)",
                "passed": bool(z.max() <= 4),
                "detail": f"largest |mean| / standard error {z.max():.2f} (tolerance 4)"})
    if pieces is not None:
        by_masks = {tuple(sum(1 << i for i in S) for S in p["supports"]): p for p in pieces}
        cov = np.diag(V * WEIGHTS)
        compared, excess = 0, -math.inf
        for i in picks.values():
            piece = by_masks[tuple(int(m) for m in pat[i])]
            C = piece["C"]
            if not 1 <= C.shape[0] < 6:
                continue
            ref = observed_polytope(A=piece["A"], b=piece["b"], C=C, y=C @ h[i], omega=omega,
                                    cov=cov)
            o1 = z_out(y[i:i + 1], omega=omega, V=V, beta=beta)
            excess = max(excess, float(np.max(np.abs(o1.g[0] - ref.g[0]) - o1.g_error[0]
                                              - ref.g_error[0])),
                         float(np.max(np.abs(o1.dg[0] - ref.dg[0]) - o1.dg_error[0]
                                      - ref.dg_error[0])))
            compared += 1
        out.append({"name": f"g_out, dg_out against the polytope engine on the derived pieces "
                            f"({compared} patterns)", "passed": bool(compared > 0 and excess <= 0),
                    "detail": f"largest (deviation - both bars) {excess:.1e} (must be <= 0)"})
    return out
