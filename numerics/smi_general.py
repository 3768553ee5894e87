"""General SMI channels by quadrature: the stability operator F at Q = 0 and the state evolution
at any Q (THEORY 2.1, 2.2, 2.5). Numeric layer: receives a compiled channel (duck-typed, see
``aim_sym.smi_compiled.CompiledSMIChannel``: P, M, kind, K, forward, noise, layers, zero_mean),
never sympy.

z in R^{P x M} is flattened row by row (index p M + m); token columns are N(0, I_P). With
omega = Q^{1/2} xi per column, V = I - Q and z = omega + V^{1/2} u (u ~ N(0, I)),
g_out = V^{-1} (E[z | y, omega] - omega) = V^{-1/2} E[u | y, omega] (column by column), and
Q_hat = alpha E[sum_m g_m g_m^T], Q = Q_hat (I + Q_hat)^{-1} (THEORY 2.1).

Rules. Noisy channels (y = g(z) + sqrt(Delta) xi): the inner z integral is a tensor
Gauss-Hermite rule while its size allows; the posterior weights of all inner nodes for a batch of
outputs are one matrix product followed by exp. The outer integral over (z, xi) is tensor
Gauss-Hermite while its size allows, else scrambled Sobol points (randomised QMC) with a standard
error over independent scramblings. Discrete channels (indicator likelihoods) defeat Gauss-Hermite:
their inner integral is randomised QMC and the outer sum over the finitely many outputs is exact.
Every estimate is computed with two rule sizes; the difference (plus twice the standard error of
the randomised part) is its error bar.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np
from scipy.special import ndtri

from .records import ConvergenceError, InputError, require, standard_error
from .smi_fibre import gh_tensor

GH_CAP_INNER = 1_200_000     # nodes of a tensor inner rule
GH_CAP_OUTER = 120_000       # nodes of a tensor outer rule
Y_GRID_CAP = 40_000          # nodes of the output grid of a noisy channel
Y_TAIL_SD = 9.0              # the output grid reaches 9 noise sd beyond every inner output
CHUNK = 4_000_000            # entries of one posterior-weight block (memory ~32 MB)
ZERO_MEAN_TOL = 1e-6         # E|E[z | y]|^2 accepted as zero (beyond its error bar)


# ----------------------------------------------------------------------------- rules
@dataclass(frozen=True)
class Rule:
    """Nodes (N, dim) and weights (N,) summing to 1 for E over N(0, I_dim)."""

    nodes: np.ndarray
    weights: np.ndarray
    kind: str


def gauss_hermite(dim: int, n: int) -> Rule:
    """Tensor Gauss-Hermite rule (probabilists'), n nodes per axis."""
    if dim == 0:
        return Rule(np.zeros((1, 0)), np.ones(1), "empty")
    nodes, wts = gh_tensor(n, dim)
    keep = wts > 1e-300
    return Rule(nodes[keep], wts[keep] / wts[keep].sum(), f"gauss-hermite {n}^{dim}")


def sobol(dim: int, log2n: int, seed: int) -> Rule:
    """2^log2n scrambled Sobol points mapped to N(0, I_dim), equal weights."""
    from scipy.stats import qmc

    u = qmc.Sobol(dim, scramble=True, seed=np.random.default_rng(seed)).random_base2(log2n)
    u = np.clip(u, 1e-300, 1 - 1e-16)
    n = u.shape[0]
    return Rule(ndtri(u), np.full(n, 1.0 / n), f"sobol 2^{log2n} (seed {seed})")


@dataclass(frozen=True)
class Orders:
    """Rule sizes: Gauss-Hermite nodes per axis (inner z, outer omega, outer (z, xi) given
    omega), log2 of Sobol points (inner for discrete channels or beyond the tensor cap; outer
    beyond the tensor cap) and the number of independent scramblings."""

    inner_gh: int = 24
    outer_gh: int = 10
    y_gh: int = 6
    inner_log2: int = 14
    outer_log2: int = 10
    replicates: int = 8
    y_per_sd: float = 1.5
    sobol_inner: bool = False   # force a scrambled Sobol inner rule (an independent route)

    def refined(self) -> Orders:
        """The next rule sizes (x 1.5 Gauss-Hermite nodes per axis and output-grid density,
        x 2 Sobol points)."""
        return replace(self, inner_gh=math.ceil(1.5 * self.inner_gh), y_per_sd=1.5 * self.y_per_sd,
                       outer_gh=math.ceil(1.5 * self.outer_gh), y_gh=math.ceil(1.5 * self.y_gh),
                       inner_log2=self.inner_log2 + 1, outer_log2=self.outer_log2 + 1)

    def coarsened(self) -> Orders:
        """The previous rule sizes (the inverse of :meth:`refined`, up to rounding)."""
        return replace(self, inner_gh=max(4, round(self.inner_gh / 1.5)),
                       outer_gh=max(4, round(self.outer_gh / 1.5)),
                       y_gh=max(3, round(self.y_gh / 1.5)), y_per_sd=self.y_per_sd / 1.5,
                       inner_log2=max(6, self.inner_log2 - 1),
                       outer_log2=max(6, self.outer_log2 - 1))


def _inner_rule(ch, orders: Orders, seed: int) -> Rule:
    d = ch.P * ch.M
    if ch.kind == "noisy" and not orders.sobol_inner and orders.inner_gh ** d <= GH_CAP_INNER:
        return gauss_hermite(d, orders.inner_gh)
    return sobol(d, orders.inner_log2, seed)


def _tensor_or_sobol(dim: int, n: int, log2n: int, seed: int) -> Rule:
    if n ** dim <= GH_CAP_OUTER:
        return gauss_hermite(dim, n)
    return sobol(dim, log2n, seed)


# ----------------------------------------------------------------------------- posterior
def _sqrt_psd(A: np.ndarray) -> np.ndarray:
    w, U = np.linalg.eigh((A + A.T) / 2)
    return (U * np.sqrt(np.clip(w, 0.0, None))) @ U.T


def _apply_rows(S: np.ndarray, u: np.ndarray, P: int, M: int) -> np.ndarray:
    """S (P x P) applied to each token column of flattened z's (N, P M)."""
    return np.einsum("pq,nqm->npm", S, u.reshape(-1, P, M)).reshape(-1, P * M)


def posterior_noisy(G_in: np.ndarray, U: np.ndarray, w_in: np.ndarray, Y: np.ndarray,
                    noise: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Posterior moments of u given outputs Y (N, K) for y = G(u) + sqrt(noise) xi, u on the
    inner nodes U (N_in, d) with prior weights w_in and outputs G_in = G(U): returns
    (log Z (N,), E[u | y] (N, d), E[u u^T | y] (N, d, d))."""
    n_in, d = U.shape
    K = G_in.shape[1]
    rhs = np.concatenate([np.ones((n_in, 1)), U, (U[:, :, None] * U[:, None, :]).reshape(n_in, -1)],
                         axis=1)
    base = np.log(w_in) - 0.5 * (G_in ** 2).sum(1) / noise
    N = Y.shape[0]
    logZ, mean, second = np.empty(N), np.empty((N, d)), np.empty((N, d * d))
    step = max(1, CHUNK // n_in)
    for s in range(0, N, step):
        Yc = Y[s:s + step]
        E = Yc @ (G_in.T / noise) + base
        mx = E.max(axis=1, keepdims=True)
        S = np.exp(E - mx) @ rhs
        Z = S[:, 0]
        mean[s:s + step] = S[:, 1:1 + d] / Z[:, None]
        second[s:s + step] = S[:, 1 + d:] / Z[:, None]
        logZ[s:s + step] = (np.log(Z) + mx[:, 0] - 0.5 * (Yc ** 2).sum(1) / noise
                            - 0.5 * K * math.log(2 * math.pi * noise))
    return logZ, mean, second.reshape(N, d, d)


def posterior_discrete(L: np.ndarray, U: np.ndarray, w_in: np.ndarray
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For likelihoods L (N_in, K) = P(y = k | u_j): (Z_k (K,), E[u | k] (K, d),
    E[u u^T | k] (K, d, d)); labels with Z_k = 0 get zero moments."""
    WL = L * w_in[:, None]
    Z = WL.sum(0)
    safe = np.where(Z > 0, Z, 1.0)
    mean = (WL.T @ U) / safe[:, None]
    second = np.einsum("jk,ja,jb->kab", WL, U, U) / safe[:, None, None]
    return Z, mean, second


def y_grid(G_in: np.ndarray, noise: float, per_sd: float) -> tuple[np.ndarray, float] | None:
    """Trapezoid nodes (N, K) and cell volume over the outputs y of a noisy channel whose
    noiseless outputs are the rows of G_in: spacing sqrt(noise) / per_sd, reaching Y_TAIL_SD noise
    sd beyond the extreme rows (the Gaussian-mixture mass cut is below K 2e-19). The density
    Z(y) is a sum of Gaussians of width sqrt(noise): the trapezoid rule converges exponentially.
    None when the grid would exceed Y_GRID_CAP nodes."""
    sd = math.sqrt(noise)
    h = sd / per_sd
    lo = G_in.min(axis=0) - Y_TAIL_SD * sd
    hi = G_in.max(axis=0) + Y_TAIL_SD * sd
    n = np.ceil((hi - lo) / h).astype(int) + 1
    if float(np.prod(n.astype(float))) > Y_GRID_CAP:
        return None
    axes = [lo[k] + h * np.arange(n[k]) for k in range(G_in.shape[1])]
    grids = np.meshgrid(*axes, indexing="ij")
    return np.stack([g.ravel() for g in grids], axis=1), h ** G_in.shape[1]


def noisy_outputs(ch, omega: np.ndarray, Vh: np.ndarray, inner: Rule, ys: Rule,
                  per_sd: float) -> tuple:
    """Outputs y given omega for a noisy channel, as (weights (N,), E[u | y, omega] (N, d),
    E[u u^T | y, omega] (N, d, d), the outputs Y (N, K), sampled): on the output grid of
    :func:`y_grid` (weights Z(y) times the cell volume, Z from the inner rule) where it fits,
    else (``sampled``) y = g(omega + V^{1/2} u0) + sqrt(Delta) xi on the rule ``ys`` over
    (u0, xi)."""
    P, M, d = ch.P, ch.M, ch.P * ch.M
    G_in = ch.forward(omega[None, :] + _apply_rows(Vh, inner.nodes, P, M))
    grid = y_grid(G_in, ch.noise, per_sd)
    if grid is not None:
        Y, vol = grid
        logZ, mean, second = posterior_noisy(G_in, inner.nodes, inner.weights, Y, ch.noise)
        w = np.exp(logZ) * vol
        return w / w.sum(), mean, second, Y, False
    u0, xi = ys.nodes[:, :d], ys.nodes[:, d:]
    Y = ch.forward(omega[None, :] + _apply_rows(Vh, u0, P, M)) + math.sqrt(ch.noise) * xi
    _, mean, second = posterior_noisy(G_in, inner.nodes, inner.weights, Y, ch.noise)
    return ys.weights, mean, second, Y, True


def importance_weights(ch, omega: np.ndarray, Vinv: np.ndarray, logdetV: float,
                       inner: Rule) -> tuple[np.ndarray, np.ndarray]:
    """The inner nodes z_j ~ N(0, I) of a discrete channel at (omega, V) with the importance
    weights w_j r_j, r_j = N(z_j; omega, V) / N(z_j; 0, I) (bounded: V <= I), and the token
    columns z_j - omega (N, P, M)."""
    diff = (inner.nodes - omega[None, :]).reshape(-1, ch.P, ch.M)
    logr = (-0.5 * np.einsum("npm,pq,nqm->n", diff, Vinv, diff) - 0.5 * ch.M * logdetV
            + 0.5 * (inner.nodes ** 2).sum(1))
    return inner.weights * np.exp(logr), diff


def discrete_outputs(ch, omega: np.ndarray, Vinv: np.ndarray, logdetV: float, inner: Rule,
                     L: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, float]:
    """Discrete channel at (omega, V) on the fixed inner nodes with :func:`importance_weights`,
    so that every output's Z(y; omega) and E[z | y, omega] are smooth in omega and Q. Returns
    (Z_y / S (K,), E[z | y, omega] (K, d), S = sum_j w_j r_j, 1 up to the rule's error)."""
    wr, _ = importance_weights(ch, omega, Vinv, logdetV, inner)
    L = ch.forward(inner.nodes) if L is None else L
    WL = L * wr[:, None]
    Zy = WL.sum(0)
    keep = Zy > 0
    mean = (WL.T @ inner.nodes)[keep] / Zy[keep, None]
    S = float(wr.sum())
    return Zy[keep] / S, mean, S


# ----------------------------------------------------------------------------- Q = 0
@dataclass(frozen=True)
class Q0Moments:
    """Per outer point of one replicate: weights (N,), E[z | y] (N, d), Cov[z | y] (N, d, d)."""

    weights: np.ndarray
    mean: np.ndarray
    cov: np.ndarray
    randomised: bool = False


def q0_moments(ch, orders: Orders, seed: int) -> Q0Moments:
    """Posterior moments of z given y at Q = 0 (omega = 0, V = I), over the outer rule."""
    d = ch.P * ch.M
    inner = _inner_rule(ch, orders, seed)
    U = inner.nodes
    if ch.kind == "discrete":
        Z, mean, second = posterior_discrete(ch.forward(U), U, inner.weights)
        keep = Z > 0
        Z, mean, second = Z[keep], mean[keep], second[keep]
        cov = second - mean[:, :, None] * mean[:, None, :]
        return Q0Moments(Z / Z.sum(), mean, cov, True)
    outer = _tensor_or_sobol(d + ch.K, orders.outer_gh, orders.outer_log2, seed + 7919)
    w, mean, second = noisy_outputs(ch, np.zeros(d), np.eye(ch.P), inner, outer,
                                    orders.y_per_sd)[:3]
    cov = second - mean[:, :, None] * mean[:, None, :]
    on_grid = y_grid(ch.forward(U), ch.noise, orders.y_per_sd) is not None
    randomised = inner.kind.startswith("sobol") or (not on_grid and outer.kind.startswith("sobol"))
    return Q0Moments(w, mean, cov, randomised)


def _sym_basis(rows: tuple[int, ...], P: int) -> np.ndarray:
    """Orthonormal (Frobenius) basis of symmetric P x P matrices supported on rows x rows."""
    out = []
    for i, a in enumerate(rows):
        for b in rows[i:]:
            E = np.zeros((P, P))
            if a == b:
                E[a, a] = 1.0
            else:
                E[a, b] = E[b, a] = 1 / math.sqrt(2)
            out.append(E)
    return np.array(out)


@dataclass(frozen=True)
class StabilityData:
    """One replicate's stability operator and diagnostics (THEORY 2.2)."""

    F: np.ndarray                 # (P, P, P, P): F(X)_{pr} = sum_{qs} F[p, r, q, s] X_{qs}
    F_sym: np.ndarray             # on the orthonormal basis of symmetric P x P matrices
    lam_all: float                # largest eigenvalue over all symmetric modes
    lam_blocks: tuple[float, ...]  # largest eigenvalue within each layer block
    g_norm_blocks: tuple[float, ...]  # E ||Cov[z_l | y] - I||_F^2 for each layer block
    coupling: float               # largest |F_sym| entry between different layer blocks
    mean_sq: float                # E_y |E[z | y]|^2 (zero when Q = 0 is a fixed point)
    randomised: bool = False


def stability_data(ch, m: Q0Moments) -> StabilityData:
    P, M, d = ch.P, ch.M, ch.P * ch.M
    G = (m.cov - np.eye(d)).reshape(-1, P, M, P, M)
    F = np.einsum("n,npmqk,nrmsk->prqs", m.weights, G, G)
    B = _sym_basis(tuple(range(P)), P)
    F_sym = np.einsum("iab,abcd,jcd->ij", B, F, B)
    F_sym = (F_sym + F_sym.T) / 2
    lam_all = float(np.linalg.eigvalsh(F_sym)[-1])
    blocks = ch.layers
    lam_b, g_b, idx = [], [], []
    for rows in blocks:
        Bl = _sym_basis(tuple(rows), P)
        Fl = np.einsum("iab,abcd,jcd->ij", Bl, F, Bl)
        lam_b.append(float(np.linalg.eigvalsh((Fl + Fl.T) / 2)[-1]))
        sel = np.array(rows)
        Gl = G[:, sel][:, :, :, sel]
        g_b.append(float(np.einsum("n,npmqk->", m.weights, Gl ** 2)))
        idx.append([i for i, E in enumerate(B) if np.abs(E[np.ix_(sel, sel)]).sum() > 0
                    and np.abs(E).sum() == np.abs(E[np.ix_(sel, sel)]).sum()])
    coupling = 0.0
    for i, a in enumerate(idx):
        for b in idx[i + 1:]:
            if a and b:
                coupling = max(coupling, float(np.abs(F_sym[np.ix_(a, b)]).max()))
    mean_sq = float(np.einsum("n,ni,ni->", m.weights, m.mean, m.mean))
    return StabilityData(F, F_sym, lam_all, tuple(lam_b), tuple(g_b), coupling, mean_sq,
                         m.randomised)


@dataclass(frozen=True)
class Value:
    """A number with its error bar, from three rule sizes c0 < c < f (the value is f's):
    ``refinement`` = max(|f - c|, |c - c0|) (the larger of the last two changes, so that a
    convergence that oscillates is not caught at a lucky crossing), ``error`` = refinement + 2
    standard errors of the randomised rules."""

    value: float
    error: float
    refinement: float
    std_error: float


def _combine(levels: list[list[float]]) -> Value:
    means = [float(np.mean(v)) for v in levels]
    fine = levels[-1]
    se = standard_error(fine) if len(fine) > 1 else 0.0
    ref = max(abs(b - a) for a, b in zip(means, means[1:]))
    return Value(means[-1], ref + 2 * se, ref, se)


def _replicates(ch, orders: Orders, seed: int) -> list[StabilityData]:
    """One replicate for deterministic rules, ``orders.replicates`` independent scramblings
    where a rule is randomised."""
    first = stability_data(ch, q0_moments(ch, orders, seed))
    if not first.randomised:
        return [first]
    return [first] + [stability_data(ch, q0_moments(ch, orders, seed + 104729 * r))
                      for r in range(1, orders.replicates)]


@dataclass(frozen=True)
class StabilityEstimate:
    """The stability operator's eigenvalues with error bars, and the diagnostics."""

    lam_all: Value
    lam_blocks: tuple[Value, ...]
    g_norm_blocks: tuple[Value, ...]
    coupling: Value
    mean_sq: Value
    F_sym: np.ndarray
    rules: dict = field(default_factory=dict)


def stability(ch, *, orders: Orders = Orders(), seed: int = 0) -> StabilityEstimate:
    """F at Q = 0 with every eigenvalue estimated at ``orders.coarsened()``, ``orders`` and
    ``orders.refined()`` (the reported value is the refined one; :class:`Value`)."""
    levels = [_replicates(ch, orders.coarsened(), seed + 2), _replicates(ch, orders, seed),
              _replicates(ch, orders.refined(), seed + 1)]
    fine = levels[-1]
    nb = len(ch.layers)

    def comb(get):
        return _combine([[get(s) for s in level] for level in levels])

    return StabilityEstimate(
        lam_all=comb(lambda s: s.lam_all),
        lam_blocks=tuple(comb(lambda s, b=b: s.lam_blocks[b]) for b in range(nb)),
        g_norm_blocks=tuple(comb(lambda s, b=b: s.g_norm_blocks[b]) for b in range(nb)),
        coupling=comb(lambda s: s.coupling),
        mean_sq=comb(lambda s: s.mean_sq),
        F_sym=np.mean([s.F_sym for s in fine], axis=0),
        rules={"coarsest": _describe(ch, orders.coarsened()), "coarse": _describe(ch, orders),
               "fine": _describe(ch, orders.refined()),
               "randomised": fine[0].randomised, "replicates": len(fine)})


def _rule_text(n: int, log2n: int, dim: int, cap: int = GH_CAP_OUTER) -> str:
    return f"gauss-hermite {n}^{dim}" if n ** dim <= cap else f"sobol 2^{log2n}"


def _describe(ch, orders: Orders, se: bool = False) -> str:
    """The rules of :func:`stability` (``se``: of the SE map, :func:`se_rules`) in words."""
    d, D, noisy = ch.P * ch.M, ch.P * ch.M + ch.K, ch.kind == "noisy"
    text = "inner " + _rule_text(orders.inner_gh, orders.inner_log2, d,
                                 GH_CAP_INNER if noisy and not orders.sobol_inner else 0)
    if se:
        text += "; omega " + _rule_text(orders.outer_gh, orders.outer_log2, d)
        return text + (f"; y | omega: trapezoid grid at {orders.y_per_sd:g} nodes per noise sd "
                       "where it fits, else (u0, xi) "
                       + _rule_text(orders.y_gh, orders.outer_log2, D) if noisy else "")
    if not noisy:
        return f"{text}; outer exact sum over {ch.K} outputs"
    return (f"{text}; outputs: trapezoid grid in y at {orders.y_per_sd:g} nodes per noise sd "
            f"where it fits ({Y_GRID_CAP} nodes), else (z, xi) "
            + _rule_text(orders.outer_gh, orders.outer_log2, D))


def zero_mean_holds(ch, est: StabilityEstimate) -> bool:
    """E[z | y] = 0: proved symbolically (``ch.zero_mean``) or E_y |E[z | y]|^2 within
    ZERO_MEAN_TOL plus its error bar."""
    return bool(ch.zero_mean) or est.mean_sq.value <= ZERO_MEAN_TOL + est.mean_sq.error


def weak_thresholds(ch, *, orders: Orders = Orders(), seed: int = 0) -> dict:
    """alpha_c = 1 / lambda_max(F) for all symmetric modes and per layer block (THEORY 2.2),
    with error bars from two rule sizes. Refuses (InputError) when E[z | y] != 0."""
    est = stability(ch, orders=orders, seed=seed)
    if not zero_mean_holds(ch, est):
        raise InputError(
            f"channel {ch.name}: E[z | y] != 0 (E_y |E[z | y]|^2 = {est.mean_sq.value:.3g} "
            f"+- {est.mean_sq.error:.1g}), so Q = 0 is not a fixed point of the state evolution "
            "and there is no weak-recovery threshold; solve the SE instead")

    def alpha(v: Value) -> Value:
        require(v.value > 0, "stability eigenvalue", "> 0 (the channel carries information)",
                v.value)
        a = 1.0 / v.value
        return Value(a, v.error / (v.value - v.error) ** 2 if v.value > v.error else math.inf,
                     v.refinement / v.value ** 2, v.std_error / v.value ** 2)

    return {"all": (est.lam_all, alpha(est.lam_all)),
            "blocks": [(lam, alpha(lam)) for lam in est.lam_blocks],
            "estimate": est}


# ----------------------------------------------------------------------------- SE at any Q
def _g_out_group(ch, omega: np.ndarray, Vh: np.ndarray, Vmh: np.ndarray, inner: Rule,
                 ys: Rule | None, per_sd: float, L: np.ndarray | None = None
                 ) -> tuple[np.ndarray, np.ndarray]:
    """For one omega (d,): the outputs' weights (N_y,) and g_out (N_y, P, M) (``L``: the
    likelihoods of a discrete channel on the inner nodes, if already known)."""
    P, M = ch.P, ch.M
    if ch.kind == "discrete":
        Vinv = Vmh @ Vmh
        wy, mean_z, _ = discrete_outputs(ch, omega, Vinv, float(np.linalg.slogdet(Vh @ Vh)[1]),
                                         inner, L)
        return wy, np.einsum("pq,nqm->npm", Vinv, (mean_z - omega[None, :]).reshape(-1, P, M))
    wy, mean = noisy_outputs(ch, omega, Vh, inner, ys, per_sd)[:2]
    return wy, np.einsum("pq,nqm->npm", Vmh, mean.reshape(-1, P, M))


@dataclass(frozen=True)
class SERules:
    """The rules of one SE map: inner u, outer omega, outputs given omega (grid density
    ``per_sd`` or, beyond the grid cap, the rule ``ys`` over (u0, xi))."""

    inner: Rule
    outer: Rule
    ys: Rule | None
    per_sd: float
    joint: Rule | None = None   # discrete channels: (xi, u) for the plug-in error


def se_rules(ch, orders: Orders, seed: int) -> SERules:
    d = ch.P * ch.M
    inner = _inner_rule(ch, orders, seed)
    outer = _tensor_or_sobol(d, orders.outer_gh, orders.outer_log2, seed + 31)
    ys = None if ch.kind == "discrete" else _tensor_or_sobol(
        d + ch.K, orders.y_gh, orders.outer_log2, seed + 61)
    joint = sobol(2 * d, orders.inner_log2 + 4, seed + 97) if ch.kind == "discrete" else None
    return SERules(inner, outer, ys, orders.y_per_sd, joint)


def _matrices(Q: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    P = Q.shape[0]
    V = np.eye(P) - Q
    w, U = np.linalg.eigh((V + V.T) / 2)
    require(bool(w.min() > 1e-8), "Q", "a symmetric matrix with 0 <= Q < I (V = I - Q > 0)",
            Q.tolist())
    Vh = (U * np.sqrt(w)) @ U.T
    Vmh = (U / np.sqrt(w)) @ U.T
    return _sqrt_psd(Q), Vh, Vmh


def e_gg(ch, Q: np.ndarray, rules: SERules) -> np.ndarray:
    """E[sum_m g_m g_m^T] (P x P) at overlap Q (THEORY 2.1), so that Q_hat = alpha e_gg."""
    P, M = ch.P, ch.M
    Qh, Vh, Vmh = _matrices(np.asarray(Q, dtype=float))
    acc = np.zeros((P, P))
    omegas = _apply_rows(Qh, rules.outer.nodes, P, M)
    for w_o, om in zip(rules.outer.weights, omegas):
        wy, g = _g_out_group(ch, om, Vh, Vmh, rules.inner, rules.ys, rules.per_sd)
        acc += w_o * np.einsum("n,npm,nrm->pr", wy, g, g)
    return (acc + acc.T) / 2


def nishimori(ch, *, Q: np.ndarray, omega: np.ndarray, orders: Orders = Orders(),
              eps: float = 1e-4, seed: int = 0, with_error: bool = False) -> tuple:
    """At one omega (d,) and overlap Q: (E_y[sum_m g_m g_m^T], -E_y[sum_m dg_m / domega_m] + c),
    the derivative by central finite differences of g_out at fixed outputs y (THEORY 4.2: the
    two agree pointwise in omega, since int dy d^2 Z_out / domega^2 = 0). Noisy channels: c = 0
    (the output integral is a trapezoid grid, exact to exponentially small terms). Discrete
    channels: the importance-weighted rule has total mass S(omega) = sum_j w_j r_j(omega) = 1 up
    to its error, and the identity of the discretised model carries c = (d^2 S / domega^2) / S,
    computed in closed form. With ``with_error`` also the standard error of the difference
    over the outputs where they are sampled (noisy channels beyond the output grid), else 0."""
    P, M, d = ch.P, ch.M, ch.P * ch.M
    _, Vh, Vmh = _matrices(np.asarray(Q, dtype=float))
    Vinv = Vmh @ Vmh
    sampled = False
    rules = se_rules(ch, orders, seed)
    inner, ys = rules.inner, rules.ys
    omega = np.asarray(omega, dtype=float)
    corr = np.zeros((P, P))
    if ch.kind == "discrete":
        logdetV = float(np.linalg.slogdet(Vh @ Vh)[1])
        L = ch.forward(inner.nodes)

        def g_at(om):
            return _g_out_group(ch, om, Vh, Vmh, inner, None, 0.0, L)[1]

        wy, _, S = discrete_outputs(ch, omega, Vinv, logdetV, inner, L)
        wr, D = importance_weights(ch, omega, Vinv, logdetV, inner)
        corr = (Vinv @ np.einsum("n,npm,nqm->pq", wr, D, D) @ Vinv - M * wr.sum() * Vinv) / S
    else:
        wy, _, _, Y, sampled = noisy_outputs(ch, omega, Vh, inner, ys, orders.y_per_sd)

        def g_at(om):
            Zin = om[None, :] + _apply_rows(Vh, inner.nodes, P, M)
            _, mean, _ = posterior_noisy(ch.forward(Zin), inner.nodes, inner.weights, Y, ch.noise)
            return np.einsum("pq,nqm->npm", Vmh, mean.reshape(-1, P, M))

    g = g_at(omega)
    dgn = np.zeros((g.shape[0], P, P))
    for p2 in range(P):
        for m in range(M):
            e = np.zeros(d)
            e[p2 * M + m] = eps
            diff = (g_at(omega + e) - g_at(omega - e)) / (2 * eps)   # d g_{. m'} / d omega_{p2 m}
            dgn[:, :, p2] += diff[:, :, m]
    ggn = np.einsum("npm,nrm->npr", g, g)
    gg, dg = np.einsum("n,npr->pr", wy, ggn), np.einsum("n,npr->pr", wy, dgn)
    if not with_error:
        return gg, -dg + corr
    se = standard_error(ggn + dgn, axis=0) if sampled else np.zeros((P, P))
    return gg, -dg + corr, se


@dataclass(frozen=True)
class FixedPoint:
    """An SE fixed point: Q and Q_hat (P x P), iterations and the last step's size."""

    Q: np.ndarray
    Q_hat: np.ndarray
    iterations: int
    residual: float


def fixed_point(ch, *, alpha: float, rules, Q0: np.ndarray, damping: float = 1.0,
                tol: float = 1e-7, max_iter: int = 400) -> FixedPoint:
    """Damped iteration Q <- (1 - damping) Q + damping Q_hat (I + Q_hat)^{-1},
    Q_hat = alpha E[sum_m g_m g_m^T] (THEORY 2.1); ConvergenceError after ``max_iter`` steps."""
    require(alpha >= 0 and math.isfinite(alpha), "alpha", "a finite real >= 0", alpha)
    require(0 < damping <= 1, "damping", "in (0, 1]", damping)
    P = ch.P
    Q = np.array(Q0, dtype=float)
    res = math.inf
    for it in range(1, max_iter + 1):
        Qh = alpha * e_gg(ch, Q, rules)
        new = Qh @ np.linalg.inv(np.eye(P) + Qh)
        new = (new + new.T) / 2
        if not float(np.linalg.eigvalsh(new)[-1]) < 1 - 1e-8:
            raise ConvergenceError("SMI state evolution: Q reached I (V = I - Q singular); the "
                                   "inner rule cannot resolve the posterior there (refine it)",
                                   last_iterate=np.round(Q, 12).tolist(), residual=res)
        step = (1 - damping) * Q + damping * new
        res = float(np.abs(step - Q).max())
        Q = step
        if res < tol:
            return FixedPoint(Q, alpha * e_gg(ch, Q, rules), it, res)
        if not np.all(np.isfinite(Q)):
            break
    raise ConvergenceError(f"SMI state evolution did not converge in {max_iter} steps",
                           last_iterate=np.round(Q, 12).tolist(), residual=res)


def se_randomised(ch, rules: SERules) -> bool:
    """True if the SE map uses a scrambled Sobol rule (inner, omega, or outputs beyond the grid)."""
    if rules.inner.kind.startswith("sobol") or rules.outer.kind.startswith("sobol"):
        return True
    if ch.kind == "noisy" and rules.ys is not None and rules.ys.kind.startswith("sobol"):
        G = ch.forward(rules.inner.nodes)
        return y_grid(G, ch.noise, rules.per_sd) is None
    return False


@dataclass(frozen=True)
class ArrayValue:
    """An array estimate from three rule sizes c0 < c < f (value: f's): ``refinement`` =
    max(|f - c|, |c - c0|) entrywise; where a rule is randomised, ``spread`` is the standard
    deviation of one solve at the middle size over independent scramblings (an upper estimate of
    the finer solve's random error); ``error`` = refinement + 2 spread."""

    value: np.ndarray
    error: np.ndarray
    refinement: np.ndarray
    spread: np.ndarray


def three_levels(fn, ch, orders: Orders, seed: int) -> ArrayValue:
    """``fn(rules, start)`` -> (array, next start) at orders.coarsened(), orders, refined();
    plus ``orders.replicates - 1`` scramblings at ``orders`` when a rule is randomised."""
    seeds = (seed + 2, seed, seed + 1)
    levels = (orders.coarsened(), orders, orders.refined())
    vals, start = [], None
    for o, sd in zip(levels, seeds):
        v, start = fn(se_rules(ch, o, sd), start)
        vals.append(np.asarray(v, dtype=float))
    ref = np.maximum(np.abs(vals[2] - vals[1]), np.abs(vals[1] - vals[0]))
    spread = np.zeros_like(ref)
    if se_randomised(ch, se_rules(ch, orders, seed)) and orders.replicates > 1:
        reps = [vals[1]] + [np.asarray(fn(se_rules(ch, orders, seed + 104729 * r), start)[0])
                            for r in range(1, orders.replicates)]
        spread = np.std(reps, axis=0, ddof=1)
    return ArrayValue(vals[2], ref + 2 * spread, ref, spread)


def e_gg_estimate(ch, Q: np.ndarray, *, orders: Orders = Orders(), seed: int = 0) -> ArrayValue:
    """E[sum_m g_m g_m^T] at Q with its error bar (:func:`three_levels`)."""
    return three_levels(lambda rules, start: (e_gg(ch, Q, rules), None), ch, orders, seed)


def se_fixed_point(ch, *, alpha: float, Q0: np.ndarray, orders: Orders = Orders(),
                   seed: int = 0, damping: float = 1.0, tol: float = 1e-7,
                   max_iter: int = 400, values: bool = True
                   ) -> tuple[ArrayValue, FixedPoint, dict]:
    """The fixed point from ``Q0`` at three rule sizes (each solve warm-started from the previous
    one; fixed seeds, so each map is deterministic) and, for randomised rules, over independent
    scramblings: Q with its error bar (:class:`ArrayValue`), the finest solve, and the rules.
    With ``values``, ``info["values"]`` holds [psi, e_gen, e_plugin, phi] (:func:`point_values`)
    at each level's own fixed point, with its error bar from the same levels and scramblings."""
    solves = []
    P = ch.P

    def fn(rules, start):
        fp = fixed_point(ch, alpha=alpha, rules=rules, Q0=Q0 if start is None else start,
                         damping=damping, tol=tol, max_iter=max_iter)
        solves.append(fp)
        out = fp.Q.ravel()
        if values:
            out = np.concatenate([out, point_values(ch, fp, alpha=alpha, rules=rules)])
        return out, fp.Q if start is None or len(solves) <= 3 else start

    both = three_levels(fn, ch, orders, seed)

    def part(sl, shape):
        return ArrayValue(*(getattr(both, k)[sl].reshape(shape)
                            for k in ("value", "error", "refinement", "spread")))

    est = part(slice(0, P * P), (P, P))
    info = {"values": part(slice(P * P, None), (4,)) if values else None,
            "coarsest": _describe(ch, orders.coarsened(), True),
            "coarse": _describe(ch, orders, True), "fine": _describe(ch, orders.refined(), True),
            "randomised": se_randomised(ch, se_rules(ch, orders, seed)),
            "iterations": sum(fp.iterations for fp in solves)}
    return est, solves[2], info


# ----------------------------------------------------------------------------- at a fixed point
def label_values(ch) -> np.ndarray | None:
    """The outputs read as real vectors r_y (K, n) for e_gen: the labels of a discrete channel
    (numbers or tuples of numbers), None where they are not numbers."""
    try:
        R = np.array([np.atleast_1d(np.asarray(y, dtype=float)) for y in ch.labels], dtype=float)
    except (TypeError, ValueError):
        return None
    return R if R.ndim == 2 and np.all(np.isfinite(R)) else None


def functionals(ch, Q: np.ndarray, rules: SERules) -> dict:
    """Output-side functionals at overlap Q on the SE rules (THEORY 1.5, 2.1, 2.4):

    * ``psi``: Psi_out(Q) - Psi_out(0) = E log Z_out(y; omega, V) - E log Z_out(y; 0, I), the
      mutual information I(y; omega) (>= 0, free of the density convention of y);
    * ``e_gen``: the Bayes-optimal E||y - E[y | omega]||^2 = E_omega Var[y | omega] (the
      channel's own noise included);
    * ``e_plugin``: the plug-in E||y - y(omega)||^2, y(omega) the channel applied to omega with
      its own, independent noise (noiseless: E||g(z) - g(omega)||^2 of THEORY 2.4);
    e_gen entries are None where the outputs are not numbers."""
    P, M, d = ch.P, ch.M, ch.P * ch.M
    Qh, Vh, Vmh = _matrices(np.asarray(Q, dtype=float))
    omegas = _apply_rows(Qh, rules.outer.nodes, P, M)
    inner = rules.inner
    psi = e_bo = e_plug = 0.0
    if ch.kind == "discrete":
        R = label_values(ch)
        D2 = None if R is None else ((R[:, None, :] - R[None, :, :]) ** 2).sum(-1)
        r2 = None if R is None else (R ** 2).sum(1)
        V = Vh @ Vh
        Vinv, logdetV = Vmh @ Vmh, float(np.linalg.slogdet(V)[1])
        L = ch.forward(inner.nodes)
        Pbar = np.zeros(L.shape[1])
        ent = 0.0
        for w_o, om in zip(rules.outer.weights, omegas):
            wr, _ = importance_weights(ch, om, Vinv, logdetV, inner)
            S = float(wr.sum())
            if not (S > 0 and math.isfinite(S)):
                raise ConvergenceError("the importance-weighted inner rule of a discrete channel "
                                       "has no mass at this omega (Q too close to I)",
                                       last_iterate=np.round(Q, 12).tolist())
            p = (wr @ L) / S
            Pbar += w_o * p
            pos = p > 0
            ent += w_o * float((p[pos] * np.log(p[pos])).sum())
            if R is not None:
                e_bo += w_o * float(p @ r2 - ((p @ R) ** 2).sum())
        pos = Pbar > 0
        psi = ent - float((Pbar[pos] * np.log(Pbar[pos])).sum())
        if R is None:
            return {"psi": psi, "e_gen": None, "e_plugin": None}
        # plug-in: its integrand steps in omega as well as in z, so it is a joint scrambled
        # Sobol average over (xi, u) (omega = Q^1/2 xi, z = omega + V^1/2 u), not the omega rule
        J = rules.joint.nodes
        om = _apply_rows(Qh, J[:, :d], P, M)
        z = om + _apply_rows(Vh, J[:, d:], P, M)
        e_plug = float(rules.joint.weights @ np.einsum("nk,kl,nl->n", ch.forward(z), D2,
                                                       ch.forward(om)))
        return {"psi": psi, "e_gen": e_bo, "e_plugin": e_plug}
    K, noise = ch.K, ch.noise
    ys = rules.ys

    def psi_at(om, Vh_):
        """(E_{y | omega} log Z_out(y; omega, V), the inner outputs G): on the trapezoid grid of
        :func:`y_grid` (weights Z(y) times the cell volume) where it fits, else on the rule
        ``ys`` over (u0, xi) (y = g(omega + V^{1/2} u0) + sqrt(Delta) xi, its own weights)."""
        G = ch.forward(om[None, :] + _apply_rows(Vh_, inner.nodes, P, M))
        grid = y_grid(G, noise, rules.per_sd)
        if grid is not None:
            logZ = posterior_noisy(G, inner.nodes, inner.weights, grid[0], noise)[0]
            w = np.exp(logZ) * grid[1]
            return float((w * logZ).sum() / w.sum()), G
        Ys = (ch.forward(om[None, :] + _apply_rows(Vh_, ys.nodes[:, :d], P, M))
              + math.sqrt(noise) * ys.nodes[:, d:])
        return float(ys.weights @ posterior_noisy(G, inner.nodes, inner.weights, Ys, noise)[0]), G

    psi0 = psi_at(np.zeros(d), np.eye(P))[0]
    g_om = ch.forward(omegas)
    for w_o, om, g in zip(rules.outer.weights, omegas, g_om):
        psi_om, G = psi_at(om, Vh)
        psi += w_o * psi_om
        mean = inner.weights @ G
        e_bo += w_o * float(inner.weights @ (G ** 2).sum(1) - (mean ** 2).sum())
        e_plug += w_o * float(inner.weights @ ((G - g[None, :]) ** 2).sum(1))
    return {"psi": psi - psi0, "e_gen": e_bo + K * noise, "e_plugin": e_plug + 2 * K * noise}


def free_entropy(*, Q: np.ndarray, Q_hat: np.ndarray, alpha: float, psi: float) -> float:
    """Phi = -Tr(Q Q_hat)/2 + Tr(Q_hat)/2 - log det(I + Q_hat)/2 + alpha (Psi_out(Q) -
    Psi_out(0)) (THEORY 2.1, Gaussian prior), relative to the uninformative point: Phi = 0 at
    Q = Q_hat = 0; of several fixed points at one alpha, the largest Phi is the Bayes-optimal."""
    Q, Q_hat = np.asarray(Q, dtype=float), np.asarray(Q_hat, dtype=float)
    P = Q.shape[0]
    logdet = float(np.linalg.slogdet(np.eye(P) + Q_hat)[1])
    return float(-np.trace(Q @ Q_hat) / 2 + np.trace(Q_hat) / 2 - logdet / 2 + alpha * psi)


def stationarity(ch, *, Q: np.ndarray, direction: np.ndarray, rules: SERules,
                 step: float = 1e-4) -> tuple[float, float]:
    """(d/dt Psi_out(Q + t E) by a central difference, Tr(E E[sum_m g_m g_m^T]) / 2) for a
    symmetric direction E on one set of rules: dPhi/dQ = 0 at a fixed point is the identity
    dPsi_out/dQ = Q_hat / (2 alpha) (THEORY 2.1, 4.3)."""
    E = np.asarray(direction, dtype=float)
    Q = np.asarray(Q, dtype=float)
    hi = functionals(ch, Q + step * E, rules)["psi"]
    lo = functionals(ch, Q - step * E, rules)["psi"]
    return (hi - lo) / (2 * step), float(np.trace(E @ e_gg(ch, Q, rules))) / 2


def point_values(ch, fp: FixedPoint, *, alpha: float, rules: SERules) -> np.ndarray:
    """[psi, e_gen, e_plugin, phi] at a solved fixed point on its own rules (NaN for an e_gen
    the outputs do not define)."""
    f = functionals(ch, fp.Q, rules)
    phi = free_entropy(Q=fp.Q, Q_hat=fp.Q_hat, alpha=alpha, psi=f["psi"])
    nan = float("nan")
    return np.array([f["psi"], nan if f["e_gen"] is None else f["e_gen"],
                     nan if f["e_plugin"] is None else f["e_plugin"], phi])


# ----------------------------------------------------------------------------- Monte Carlo oracle
def stability_monte_carlo(ch, *, samples: int, seed: int, n_grid: int = 121,
                          box: float = 9.0) -> tuple[np.ndarray, np.ndarray]:
    """A test oracle for noisy channels (THEORY 4.6): seeded Monte Carlo outputs
    y = g(z) + sqrt(Delta) xi, each posterior by a rule independent of the engine's: a tensor
    trapezoid rule on [-box, box]^d (Gaussian weight explicit, the mass outside, < d 2e-19 at
    box 9, is negligible). Returns the mean and the standard error (over the outputs) of F on
    the orthonormal symmetric basis."""
    require(ch.kind == "noisy", "channel", "a noisy channel for the Monte Carlo oracle", ch.kind)
    P, M, d = ch.P, ch.M, ch.P * ch.M
    rng = np.random.default_rng(seed)
    require(n_grid ** d <= GH_CAP_INNER, "n_grid", f"with n_grid^{d} <= {GH_CAP_INNER}", n_grid)
    t = np.linspace(-box, box, n_grid)
    U = np.stack([g.ravel() for g in np.meshgrid(*([t] * d), indexing="ij")], axis=1)
    w = np.exp(-0.5 * (U ** 2).sum(1))
    keep = w > 1e-300
    U, w = U[keep], w[keep] / w[keep].sum()
    z0 = rng.standard_normal((samples, d))
    Y = ch.forward(z0) + math.sqrt(ch.noise) * rng.standard_normal((samples, ch.K))
    _, mean, second = posterior_noisy(ch.forward(U), U, w, Y, ch.noise)
    cov = second - mean[:, :, None] * mean[:, None, :]
    G = (cov - np.eye(d)).reshape(-1, P, M, P, M)
    B = _sym_basis(tuple(range(P)), P)
    Fn = np.einsum("npmqk,nrmsk->nprqs", G, G)
    per = np.einsum("iab,nabcd,jcd->nij", B, Fn, B)
    return per.mean(0), standard_error(per, axis=0)


__all__ = ["Rule", "Orders", "gauss_hermite", "sobol", "posterior_noisy", "posterior_discrete",
           "q0_moments", "stability_data", "stability", "StabilityEstimate", "Value",
           "weak_thresholds", "zero_mean_holds", "e_gg", "nishimori", "fixed_point",
           "se_fixed_point", "FixedPoint", "stability_monte_carlo", "e_gg_estimate",
           "ArrayValue", "three_levels", "se_rules", "SERules", "functionals", "free_entropy",
           "stationarity", "point_values", "label_values"]
