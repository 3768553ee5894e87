"""Weak-recovery thresholds of deep tied attention for any depth L and M tokens, one row per
layer (P_l = 1), at Q = 0 (THEORY 2.2, 2.3, 2.5).

Each row z_l can flip sign alone (A_l depends on h^(l) h^(l)T, y on h = h^(L) up to sign), so
F is block diagonal between layers and layer l has its own threshold alpha_l = 1 / lambda_l,

    lambda_l = E_y || Cov[z_l | y] - I_M ||_F^2.

Fibre (THEORY 2.5): y fixes h in R^M up to sign; z_1 .. z_{L-1} are free (weight N(0, I)) and
z_L = Mat^{-1} (+-h), Mat = A_{L-1} ... A_1 (column convention: h^(l+1) = A_l ... A_1 z_{l+1}),
with Jacobian 1 / det Mat.  Both signs give the same second moments, so with

    Z(h) = E_free[ N(Mat^{-1} h; 0, I) / det Mat ]     (the density of h),

E[z_l z_l^T | y] = E_free[ w z_l z_l^T ] / Z(h) (l < L; z_L = Mat^{-1} h for l = L) and
lambda_l = int dh Z(h) ||E[z_l z_l^T | h] - I||_F^2.  One kernel serves every (L, M): per inner
node the quadratic forms of Mat^{-1} h in h, then ``exp(-|Mat^{-1} h|^2 / 2)`` for all outer nodes
at once (a matrix product followed by exp).

Depth L = 1: lambda_1 = M (M + 1) in closed form (:func:`one_layer`), the equality case of the
Jensen bound lambda_l <= M (M + 1) that every layer obeys at Q = 0.

Rules:

* outer, h in R^M: h = r theta, r = e^u; trapezoid in u on a window around log(sigma), sigma^2 =
  1.4 sup ||Mat||^2 (bounded below); theta on the half sphere (h -> -h): the trapezoid in the
  angle for M = 2, Gauss-Legendre in cos(theta) x trapezoid in phi for M = 3.  The two cut
  pieces of the radius are bounded and added to the error.
* inner, z_free in R^{M (L-1)}: tensor Gauss-Hermite (``rule="gh"``, three orders, error from
  their differences) or ``R`` scrambled Sobol replicates (``rule="qmc"``, error = the Student-t
  99% factor x the standard error over replicates, plus the ratio bias measured as the gap
  between the mean of the replicate ratios and the pooled ratio).  ``rule="ray"`` (the
  default for L = 3 .. 6 with M = 2 and for L = 3, 4 with M = 3) is ``qmc`` with one independent
  scrambled Sobol set per outer ray (per ring of constant cos(theta) for M = 3) in each
  replicate (one set shared by all outer nodes makes their errors coherent).  Measurements
  of these rules, and of the adapted proposals that do not help: docs/smi_depth.md.

Every estimate also carries the change between two outer rules and |mass - 1| x value.

Served ranges beyond the defaults (:data:`SKIP_RANGE_BY_LAYERS`, :data:`BETA_RANGE_BY_LAYERS`,
:data:`RANGE_BY_CASE`): L = 5, 6 with M = 2 for c in [1, 4] (L = 6: beta in [0.25, 1.5]) and
L = 4, M = 3 for c in [1, 4] at beta = 1, where the sampling routes confirm the quadrature;
rules, timings and the route comparisons: docs/smi_depth.md.

Independent routes (seeded Monte Carlo test oracles in tests/smi_mc_oracles.py):
``montecarlo_lambdas`` (plain Monte Carlo), ``model_sampled_lambdas`` (h sampled from the model,
iid inner blocks, U-statistic) and ``montecarlo_inner_bias`` (the paired ratio bias of the Monte
Carlo route); docs/smi_depth.md.
"""

from __future__ import annotations

import itertools
import math
import time

import numpy as np
from scipy import special, stats
from scipy.stats import qmc

from .records import ConvergenceError, Estimate, require, standard_error
from .smi_fibre import gh_tensor

LAYERS = (1, 2, 3, 4, 5, 6)
TOKENS = (2, 3)
MAX_LAYERS = {2: 6, 3: 4}    # L = 5, M = 3 (12 free coordinates) and L = 7, M = 2: not served
SKIP_RANGE = (0.5, 4.0)      # M = 2: Monte Carlo at c = 0.5 and 1 (L = 4), c = 0.5 .. 4 (L = 3,
                             # the model-sampled route at c = 2, 4); M = 3: c >= 1
# depths validated on a narrower skip range than SKIP_RANGE: L = 5 against the model-sampled
# route at c = 1, 2, 4 (and a tail-weighted route at c = 1, 4); at c = 0.5 the sampling routes
# scatter beyond their SEs (model-sampled 2.3 SE low, tail-weighted within 1.6 SE) and the rule
# needs 736 angles (docs/smi_depth.md); L = 6 on the same routes at c = 1, 2, 4
SKIP_RANGE_BY_LAYERS = {5: (1.0, 4.0), 6: (1.0, 4.0)}
# (L, M) validated on narrower ranges still: L = 4, M = 3 (9 free coordinates) against the
# model-sampled route at c = 1, 2, 4 and beta = 1 only (docs/smi_depth.md, "L = 4, M = 3")
RANGE_BY_CASE = {(4, 3): {"skip": (1.0, 4.0), "beta": (1.0, 1.0)}}
BETA_RANGE = (0.25, 2.0)
# depths validated on a narrower beta range than BETA_RANGE: L = 6 against the model-sampled and
# tail-weighted routes at beta = 0.25, 1, 1.5 (c = 1; 12-40 runs each) and 0.25, 2 (c = 4); at
# c = 1, beta = 2 the routes (36 runs) pool 4.7 SE (0.30 %) below lambda_6, outside its bar
# (docs/smi_depth.md, "L = 6, M = 2")
BETA_RANGE_BY_LAYERS = {6: (0.25, 1.5)}
SIGMA_FACTOR = 1.4           # sigma^2 = factor * sup ||Mat||^2
U_LO = {2: 16.0, 3: 11.0}    # log-radius window [log sigma - U_LO[M], log sigma + U_HI]
U_HI = 2.2
COVERAGE = 0.995             # two-sided 99% Student-t factor for the QMC replicates
_CHUNK = 4_000_000

def default_outer(*, layers: int, tokens: int, skip: float = 1.0):
    """(coarse, fine) outer rules.  h concentrates near the diagonal with angular width
    ~ (c / (1 + c))^(L-1) (the off-diagonal stretch of Mat is >= c^(L-1), the diagonal one
    (1 + c)^(L-1)), so the angles scale with its inverse (measured changes: docs/smi_depth.md)."""
    if tokens == 2:
        fine = max(24, 8 * math.ceil(9 * ((1 + skip) / skip) ** (layers - 1) / 8))
        if layers >= 5:   # 90 radii suffice (L = 5, one shared set: 120 -> 90 radii change
            #               lambda_l by < 1e-6 at c = 1 and 0.5; ray cost ~ radii x angles)
            return (70, 8 * math.ceil(fine * 2 / 3 / 8)), (90, fine)
        return (100, 8 * math.ceil(fine * 2 / 3 / 8)), (120, fine)
    if layers >= 4:   # L = 4, M = 3, one shared set of 2^12 (docs/smi_depth.md, "L = 4, M = 3"):
        #               (72, (32, 64)) lies within 6e-5 of (96, (48, 96)) in every lambda_l and
        #               within 2e-6 in the mass; the default (56, (20, 40)) vs (72, (24, 48))
        #               of L <= 3 changes lambda_1 by 3e-4 against its true error 4.4e-4; at
        #               c = 2 and 4 (broader feature) (56, (20, 40)) already lies within 2.4e-6
        return ((56, (20, 40)), (72, (24, 48))) if skip >= 2 else ((72, (24, 48)), (72, (32, 64)))
    return (56, (4 + 4 * layers, 8 + 8 * layers)), (72, (8 + 4 * layers, 16 + 8 * layers))


# default inner rules: Gauss-Hermite orders, or (log2 n, replicates) for the Sobol sets
GH_ORDERS = {(2, 2): (40, 48, 56), (2, 3): (24, 28, 32)}
# per-replicate spread falls only like n^-0.5 (L = 4, M = 2: a plain Monte Carlo rate; 32
# replicates of 2^12 show no heavy tail, kurtosis |k| < 0.7), so replicates are as good as points
QMC = {(3, 2): (15, 16), (4, 2): (14, 16), (2, 3): (13, 16), (3, 3): (12, 16)}
# rule "ray" (the default where listed): (log2n, replicates), one set per outer ray; bars and
# timings against the shared sets: docs/smi_depth.md ("Accuracy against time" and per case)
RAY = {(3, 2): (15, 16), (4, 2): (13, 16), (3, 3): (13, 8), (5, 2): (14, 16), (6, 2): (14, 16),
       (4, 3): (13, 8)}


def check(*, layers: int, tokens: int, skip: float, beta: float) -> None:
    """InputError (one line naming the option) outside the supported and validated ranges."""
    require(isinstance(layers, (int, np.integer)) and layers in LAYERS, "layers",
            f"one of {LAYERS} for the weak thresholds of numerics.smi_weak", layers)
    require(isinstance(tokens, (int, np.integer)) and tokens in TOKENS, "tokens",
            f"one of {TOKENS} for the weak thresholds of numerics.smi_weak", tokens)
    require(layers <= MAX_LAYERS[tokens], "layers",
            f"at most {MAX_LAYERS[tokens]} for tokens = {tokens} (L = {MAX_LAYERS[tokens] + 1}, "
            f"M = {tokens} has {tokens * MAX_LAYERS[tokens]} free coordinates: not supported)",
            layers)
    require(tokens == 2 or layers == 1 or not skip < 1.0, "skip",
            ">= 1 for tokens = 3 (validated at c = 1 only)", skip)
    for name, (lo, hi) in RANGE_BY_CASE.get((layers, tokens), {}).items():
        value = {"skip": skip, "beta": beta}[name]
        require(np.isfinite(value) and lo <= value <= hi, name,
                (f"{lo:g}" if lo == hi else f"in [{lo:g}, {hi:g}]") + f" for layers = {layers}, "
                f"tokens = {tokens} (the validated range)", value)
    lo, hi = SKIP_RANGE_BY_LAYERS.get(layers, SKIP_RANGE)
    require(np.isfinite(skip) and lo <= skip <= hi, "skip",
            f"in [{lo:g}, {hi:g}] for the depth-{layers} weak thresholds "
            "(validated range; smaller c needs the rotated rules of L = 2)", skip)
    lo, hi = BETA_RANGE_BY_LAYERS.get(layers, BETA_RANGE)
    require(np.isfinite(beta) and lo <= beta <= hi, "beta",
            f"in [{lo:g}, {hi:g}] for the depth-{layers} weak thresholds (validated range)", beta)


# ----------------------------------------------------------------------------- the channel
def attention(h: np.ndarray, *, skip: float, beta: float) -> np.ndarray:
    """``A = softmax_rows(beta h h^T) + c I`` for rows ``h`` of shape (..., M): (..., M, M)."""
    S = beta * h[..., :, None] * h[..., None, :]
    S = np.exp(S - S.max(-1, keepdims=True))
    return S / S.sum(-1, keepdims=True) + skip * np.eye(h.shape[-1])


def scores(z: np.ndarray, *, skip: float, beta: float) -> np.ndarray:
    """Last-layer scores ``h = h^(L) = A_{L-1} ... A_1 z_L`` for ``z`` of shape (..., L, M)."""
    h = z[..., 0, :]
    prod = np.broadcast_to(np.eye(z.shape[-1]), z.shape[:-2] + (z.shape[-1],) * 2)
    for l in range(1, z.shape[-2]):
        prod = attention(h, skip=skip, beta=beta) @ prod
        h = np.einsum("...ab,...b->...a", prod, z[..., l, :])
    return h


def fibre_map(z_free: np.ndarray, *, skip: float, beta: float):
    """``Mat^{-1}`` (..., M, M) and ``log det Mat`` for the free rows ``z_free`` (..., L-1, M),
    ``Mat = A_{L-1} ... A_1`` (THEORY 2.5: ``z_L = Mat^{-1} h``, Jacobian ``1 / det Mat``).
    At L = 1 (no free rows) Mat = I."""
    if z_free.shape[-2] == 0:
        return _identity_map(z_free)
    prod = attention(z_free[..., 0, :], skip=skip, beta=beta)
    for l in range(1, z_free.shape[-2]):
        h = np.einsum("...ab,...b->...a", prod, z_free[..., l, :])
        prod = attention(h, skip=skip, beta=beta) @ prod
    sign, logdet = np.linalg.slogdet(prod)
    return np.linalg.inv(prod), logdet


def _fibre_map_two(z_free: np.ndarray, *, skip: float, beta: float):
    """:func:`fibre_map` for M = 2 in closed form (2 x 2 entries as arrays; 5-8 x faster):
    row a of softmax(beta h h^T) is (expit(-beta h_a (h_b - h_a)), its complement)."""
    if z_free.shape[-2] == 0:
        return _identity_map(z_free)

    def att(h0, h1):
        p00 = special.expit(-beta * h0 * (h1 - h0))
        p11 = special.expit(-beta * h1 * (h0 - h1))
        return p00 + skip, 1.0 - p00, 1.0 - p11, p11 + skip
    a, b, c, d = att(z_free[..., 0, 0], z_free[..., 0, 1])
    for l in range(1, z_free.shape[-2]):
        x0, x1 = z_free[..., l, 0], z_free[..., l, 1]
        e, f, g, k = att(a * x0 + b * x1, c * x0 + d * x1)
        a, b, c, d = e * a + f * c, e * b + f * d, g * a + k * c, g * b + k * d
    det = a * d - b * c
    inv = np.stack([np.stack([d, -b], -1), np.stack([-c, a], -1)], -2) / det[..., None, None]
    return inv, np.log(det)


def _identity_map(z_free: np.ndarray):
    """The fibre map at L = 1: no free rows, Mat = I, log det Mat = 0."""
    m = z_free.shape[-1]
    shape = z_free.shape[:-2]
    return np.broadcast_to(np.eye(m), shape + (m, m)).copy(), np.zeros(shape)


def norm_bound(*, tokens: int, skip: float) -> float:
    """``sup ||P + c I||_2^2`` over row-stochastic M x M matrices P: attained at an extreme point
    (||.||^2 is convex), i.e. each row a unit vector; all M^M of them are checked."""
    best = 0.0
    for cols in itertools.product(range(tokens), repeat=tokens):
        P = np.zeros((tokens, tokens))
        P[np.arange(tokens), cols] = 1.0
        best = max(best, np.linalg.norm(P + skip * np.eye(tokens), 2) ** 2)
    return float(best)


def det_floor(*, tokens: int, skip: float) -> float:
    """``det A >= c^(M-1) (1 + c)`` for ``A = P + c I``, ``P = softmax_rows(beta h h^T)``: P is
    similar to ``D^(-1/2) E D^(-1/2)`` with ``E = exp(beta h h^T)`` entrywise positive
    semidefinite (Schur), so its eigenvalues are real, in [0, 1], and one is 1."""
    return skip ** (tokens - 1) * (1.0 + skip)


# ----------------------------------------------------------------------------- rules
def pair_list(m: int):
    return [(a, b) for a in range(m) for b in range(a, m)]


def pair_products(h: np.ndarray) -> np.ndarray:
    """The pair products ``h_a h_b`` (a <= b, :func:`pair_list` order) per row of ``h``: (N, Q)."""
    return np.stack([h[:, a] * h[:, b] for a, b in pair_list(h.shape[1])], 1)


def pair_weights(m: int) -> tuple[np.ndarray, np.ndarray]:
    """Over :func:`pair_list`: ``fro``, ``eye`` with ``|C|_F^2 = C^2 . fro``, ``tr C = C . eye``."""
    diagonal = np.array([a == b for a, b in pair_list(m)])
    return np.where(diagonal, 1.0, 2.0), np.where(diagonal, 1.0, 0.0)


def fibre_gram(Mi: np.ndarray) -> np.ndarray:
    """``B`` (N, Q) with ``|Mat^{-1} h|^2 = B . pair_products(h)`` from ``Mi`` (N, M, M)."""
    return np.stack([(Mi[:, :, a] * Mi[:, :, b]).sum(1) * (1.0 if a == b else 2.0)
                     for a, b in pair_list(Mi.shape[-1])], 1)


def outer_rule(n_u: int, n_angle, *, tokens: int, sigma: float):
    """Rule for ``int_{R^M} dh f(h)``, f even: radial trapezoid in u = log r on
    [log sigma - U_LO[M], log sigma + U_HI] (weight r^M du) x half-sphere rule (weights doubled).
    ``n_angle``: n_theta for M = 2, (n_cos, n_phi) for M = 3.  Returns h (N, M) and w (N,)."""
    u = np.linspace(math.log(sigma) - U_LO[tokens], math.log(sigma) + U_HI, n_u)
    du = u[1] - u[0]
    wu = np.full(n_u, du)
    wu[[0, -1]] *= 0.5
    r = np.exp(u)
    if tokens == 2:
        th = (np.arange(n_angle) + 0.5) * math.pi / n_angle
        dirs = np.stack([np.cos(th), np.sin(th)], 1)
        wd = np.full(n_angle, 2.0 * math.pi / n_angle)
    else:
        n_cos, n_phi = n_angle
        t, wt = np.polynomial.legendre.leggauss(n_cos)
        t, wt = 0.5 * (t + 1.0), 0.5 * wt                     # cos(theta) in (0, 1)
        ph = (np.arange(n_phi) + 0.5) * 2.0 * math.pi / n_phi
        T, PH = np.meshgrid(t, ph, indexing="ij")
        s = np.sqrt(1.0 - T**2)
        dirs = np.stack([(s * np.cos(PH)).ravel(), (s * np.sin(PH)).ravel(), T.ravel()], 1)
        dirs = dirs @ _diagonal_frame().T      # pole along (1, 1, 1) / sqrt 3
        wd = 2.0 * np.outer(wt, np.full(n_phi, 2.0 * math.pi / n_phi)).ravel()
    h = (r[:, None, None] * dirs[None, :, :]).reshape(-1, tokens)
    w = np.outer(wu * r**tokens, wd).ravel()
    return h, w


def _diagonal_frame() -> np.ndarray:
    """Orthonormal 3 x 3 frame whose third column is (1, 1, 1) / sqrt 3: products of attention
    maps (row-stochastic + c I) push h towards the diagonal, where the GL nodes in cos(theta)
    cluster."""
    e = np.array([[1.0, -1.0, 0.0], [1.0, 1.0, -2.0], [1.0, 1.0, 1.0]])
    return (e / np.linalg.norm(e, axis=1, keepdims=True)).T


def cut_bound(*, layers: int, tokens: int, skip: float, sigma: float) -> float:
    """Mass of h cut by the radial window: below, |h| < r0 with density <= (2 pi)^(-M/2) /
    det_floor^(L-1); above, |h| > r1 needs |z_L| > r1 / sup||Mat|| (chi^2_M tail)."""
    r0 = sigma * math.exp(-U_LO[tokens])
    r1 = sigma * math.exp(U_HI)
    ball = math.pi ** (tokens / 2) / math.gamma(tokens / 2 + 1) * r0**tokens
    low = ball * (2 * math.pi) ** (-tokens / 2) / det_floor(tokens=tokens, skip=skip) ** (layers - 1)
    smax = math.sqrt(norm_bound(tokens=tokens, skip=skip)) ** (layers - 1)
    high = stats.chi2.sf((r1 / smax) ** 2, tokens)
    return float(low + high)


def sobol_inner(log2n: int, *, dims: int, seed, spread: float = 1.0):
    """Scrambled Sobol points (2^log2n) mapped to N(0, spread^2 I_dims), weighted for N(0, I):
    nodes and weights (equal for spread = 1).  The points are multiples of 2^-bits; they are
    moved to the centres of their cells, so that none is 0 (a coordinate 0 has probability
    2^-30 and made ndtri return -inf and the whole estimate nan, about once in 20-40 runs at
    L = 4)."""
    sobol = qmc.Sobol(d=dims, scramble=True, seed=seed)
    u = sobol.random_base2(log2n) + 2.0 ** -(sobol.bits + 1)
    x = spread * special.ndtri(u)
    logw = dims * math.log(spread) - 0.5 * (1.0 - spread**-2) * (x**2).sum(1)
    return x, np.exp(logw) / u.shape[0]


# ----------------------------------------------------------------------------- the kernel
def inner_moments(nodes: np.ndarray, weights: np.ndarray, *, layers: int, tokens: int,
                  skip: float, beta: float):
    """Per inner node: ``B`` (N, Q) with ``|Mat^{-1} h|^2 = B . hh`` (hh the Q = M(M+1)/2 products
    h_a h_b, a <= b) and the moment matrix ``Mz`` (N, K): weight, weight z_l z_l^T (pairs, l < L),
    weight x coefficients of (z_L z_L^T)_ab in hh."""
    m = tokens
    z_free = nodes.reshape(nodes.shape[0], layers - 1, m)
    Mi, logdet = (_fibre_map_two if m == 2 else fibre_map)(z_free, skip=skip, beta=beta)
    wi = weights * np.exp(-logdet) / (2 * math.pi) ** (m / 2)
    pairs = pair_list(m)
    B = fibre_gram(Mi)
    cols = [wi]
    for l in range(layers - 1):
        cols += [wi * z_free[:, l, a] * z_free[:, l, b] for a, b in pairs]
    for a, b in pairs:
        for c_, d in pairs:
            k = Mi[:, a, c_] * Mi[:, b, d]
            if c_ != d:
                k = k + Mi[:, a, d] * Mi[:, b, c_]
            cols.append(wi * k)
    return B, np.stack(cols, 1)


def outer_moments(B, Mz, h: np.ndarray, *, chunk: int = _CHUNK) -> np.ndarray:
    """``int d(inner) w exp(-|Mat^{-1} h|^2 / 2) (...)`` at every outer node: (N_h, K)."""
    hh = pair_products(h)
    out = np.empty((h.shape[0], Mz.shape[1]))
    step = max(1, chunk // B.shape[0])
    for s in range(0, h.shape[0], step):
        out[s:s + step] = np.exp(-0.5 * (hh[s:s + step] @ B.T)) @ Mz
    return out


def node_covariances(mom: np.ndarray, h: np.ndarray, *, layers: int) -> np.ndarray:
    """From outer-node moments (N, K): ``E[z_l z_l^T | h]`` as (N, L, Q) pair entries (a node
    of zero mass gives zeros)."""
    hh = pair_products(h)
    q = hh.shape[1]
    Z = mom[:, 0]
    Zs = np.where(Z > 0, Z, 1.0)[:, None]
    C = [mom[:, 1 + q * l: 1 + q * (l + 1)] / Zs for l in range(layers - 1)]
    base = 1 + q * (layers - 1)
    C.append(np.stack([(mom[:, base + q * j: base + q * (j + 1)] * hh).sum(1)
                       for j in range(q)], 1) / Zs)
    return np.stack(C, 1)


def reduce_lambdas(mom: np.ndarray, h: np.ndarray, wh: np.ndarray, *, layers: int) -> np.ndarray:
    """From the outer-node moments: [mass, lambda_1 .. lambda_L, tr E C_1 .. tr E C_L]."""
    fro, eye = pair_weights(h.shape[1])
    W = wh * mom[:, 0]
    C = node_covariances(mom, h, layers=layers)
    out = [W.sum()]
    traces = []
    for l in range(layers):
        out.append(W @ (((C[:, l] - eye) ** 2) @ fro))
        traces.append(W @ (C[:, l] @ eye))
    return np.array(out + traces)


# ----------------------------------------------------------------------------- estimates
def _tail(v: list[float]) -> tuple[float, float]:
    """Value and error from three refinements: |d2| (1 + r / (1 - r)), r = |d2 / d1|; r >= 0.8
    or a sign change means not converged: 5 x the spread."""
    d1, d2 = v[1] - v[0], v[2] - v[1]
    r = abs(d2) / abs(d1) if d1 != 0 else 0.0
    if r >= 0.8 or d1 * d2 < 0:
        return v[2], abs(v[2] - v[0]) * 5.0
    return v[2], abs(d2) * (1.0 + r / (1.0 - r))


def _outer_pair(layers, tokens, skip, outer):
    sigma = math.sqrt(SIGMA_FACTOR * norm_bound(tokens=tokens, skip=skip) ** (layers - 1))
    rules = [outer_rule(n_u, n_a, tokens=tokens, sigma=sigma) for n_u, n_a in outer]
    h = np.concatenate([r[0] for r in rules])
    return rules, h, sigma


def _outer_change(mom: np.ndarray, rules, layers: int) -> np.ndarray:
    """|lambdas on the coarse outer rule - on the fine one| from moments at both rules' nodes."""
    n0 = rules[0][0].shape[0]
    return np.abs(reduce_lambdas(mom[:n0], *rules[0], layers=layers)
                  - reduce_lambdas(mom[n0:], *rules[1], layers=layers))


def lambdas_gh(*, layers: int, tokens: int, skip: float, beta: float, orders, outer) -> dict:
    """Tensor Gauss-Hermite inner rule at three orders; (3, K) values at the fine outer rule
    and the change between the two outer rules at the finest inner order."""
    rules, h, sigma = _outer_pair(layers, tokens, skip, outer)
    n0 = rules[0][0].shape[0]
    fine = []
    for n in orders:
        # zero free coordinates (L = 1): the rule in no dimensions is one node of weight 1
        nodes, w = (gh_tensor(n, tokens * (layers - 1)) if layers > 1
                    else (np.zeros((1, 0)), np.ones(1)))
        B, Mz = inner_moments(nodes, w, layers=layers, tokens=tokens, skip=skip, beta=beta)
        mom = outer_moments(B, Mz, h)
        fine.append(reduce_lambdas(mom[n0:], *rules[1], layers=layers))
    return dict(fine=np.array(fine), outer_change=_outer_change(mom, rules, layers), sigma=sigma)


def lambdas_qmc(*, layers: int, tokens: int, skip: float, beta: float, log2n: int,
                replicates: int, seed: int, outer, spread: float = 1.0,
                per_ray: bool = False) -> dict:
    """``replicates`` scrambled Sobol inner rules: per-replicate values at the fine outer rule,
    the pooled value (moments summed over replicates before the ratios) and the change between
    the two outer rules on one shared set.  Each replicate is one shared set of 2^log2n points
    (the change measured on the first) or, with ``per_ray`` (rule "ray"), an independent set
    per outer direction group (:func:`ray_moments`; the change measured on one more shared set,
    since independent sets would add their inner noise to it)."""
    rules, h, sigma = _outer_pair(layers, tokens, skip, outer)
    n0 = rules[0][0].shape[0]
    kw = dict(layers=layers, tokens=tokens, skip=skip, beta=beta)
    seeds = np.random.SeedSequence(seed).spawn(replicates + int(per_ray))

    def shared(s, hs):     # outer-node moments at hs of one shared set seeded by s
        nodes, w = sobol_inner(log2n, dims=tokens * (layers - 1),
                               seed=np.random.default_rng(s), spread=spread)
        return outer_moments(*inner_moments(nodes, w, **kw), hs)

    per, pooled, change = [], None, None
    for i, s in enumerate(seeds[:replicates]):
        if per_ray:
            mom = ray_moments(outer[1][1], rules[1][0], seed=s, log2n=log2n, **kw)
        else:
            mom = shared(s, h if i == 0 else h[n0:])
            if i == 0:
                change = _outer_change(mom, rules, layers)
                mom = mom[n0:]
        pooled = mom if pooled is None else pooled + mom
        per.append(reduce_lambdas(mom, *rules[1], layers=layers))
    if per_ray:
        change = _outer_change(shared(seeds[-1], h), rules, layers)
    return dict(per=np.array(per), pooled=reduce_lambdas(pooled / replicates, *rules[1], layers=layers),
                outer_change=change, sigma=sigma)


def direction_groups(n_angle, *, tokens: int) -> list[np.ndarray]:
    """Outer directions that share one inner set under ``rule="ray"``: each angle for M = 2,
    each ring of constant cos(theta) for M = 3 (indices into the rule's direction list)."""
    if tokens == 2:
        return [np.array([j]) for j in range(n_angle)]
    n_cos, n_phi = n_angle
    return [np.arange(i * n_phi, (i + 1) * n_phi) for i in range(n_cos)]


def ray_moments(n_angle, h: np.ndarray, *, log2n: int, seed, layers: int, tokens: int,
                skip: float, beta: float, chunk: int = _CHUNK) -> np.ndarray:
    """Outer-node moments (N_h, K) with one independent scrambled Sobol set of 2^log2n points
    per direction group (:func:`direction_groups`), shared along the radius (the errors of one
    shared set are coherent across all outer nodes; docs/smi_depth.md).  Groups are batched
    through :func:`inner_moments` to keep the per-set overhead small."""
    groups = direction_groups(n_angle, tokens=tokens)
    n_dirs = sum(len(g) for g in groups)
    n_u = h.shape[0] // n_dirs
    dims = tokens * (layers - 1)
    hh = pair_products(h)
    seed = seed if isinstance(seed, np.random.SeedSequence) else np.random.SeedSequence(seed)
    seeds = seed.spawn(len(groups))
    idx = np.stack([(np.arange(n_u)[:, None] * n_dirs + g[None, :]).ravel() for g in groups])
    batch = max(1, chunk // (idx.shape[1] << log2n))
    out = None
    for s0 in range(0, len(groups), batch):
        sets = [sobol_inner(log2n, dims=dims, seed=np.random.default_rng(s))
                for s in seeds[s0:s0 + batch]]
        B, Mz = inner_moments(np.concatenate([x for x, _ in sets]),
                              np.concatenate([w for _, w in sets]), layers=layers,
                              tokens=tokens, skip=skip, beta=beta)
        g = len(sets)
        B, Mz = B.reshape(g, -1, B.shape[1]), Mz.reshape(g, -1, Mz.shape[1])
        if out is None:
            out = np.empty((h.shape[0], Mz.shape[2]))
        step = max(1, chunk >> log2n)
        for k, rows in enumerate(idx[s0:s0 + g]):
            Bt = np.ascontiguousarray(B[k].T)
            for r0 in range(0, rows.size, step):
                E = hh[rows[r0:r0 + step]] @ Bt
                E *= -0.5
                out[rows[r0:r0 + step]] = np.exp(E, out=E) @ Mz[k]
    return out


def one_layer(*, tokens: int) -> dict:
    """L = 1 in closed form (THEORY 2.3, 2.5): y = softmax_rows(beta z z^T) fixes h = z up to
    sign (the off-diagonal log-ratios give beta h_a (h_b - h_a), for any beta > 0), so there are
    no free rows, z = +-h and Cov[z | y] = E[z z^T | y] = h h^T.  With h = z ~ N(0, I_M),

        lambda_1 = E ||h h^T - I||_F^2 = E|h|^4 - 2 E|h|^2 + M = M (M + 2) - 2 M + M = M (M + 1),

    and alpha_1 = 1 / (M (M + 1)) (1/6 for M = 2, 1/12 for M = 3), exactly.  Neither the skip c
    (there is no attention map A_l below the last layer) nor beta enters.  It is the equality
    case of the Jensen bound lambda_l <= E|z_l|^4 - M = M (M + 1) that every layer obeys at
    Q = 0 (E_y C_l = I and tr C_l^2 <= E[|z_l|^4 | y]), i.e. alpha_l >= 1 / (M (M + 1)) at any
    depth.  Exact: error 0 (the values are integers, exact in floating point).  The kernel with
    zero free coordinates (``rule="gh"`` at L = 1) reproduces it through the outer rule."""
    m = tokens
    meth = ("closed form at L = 1: y fixes h = z up to sign, Cov[z | y] = h h^T, "
            f"lambda_1 = E|h|^4 - 2 E|h|^2 + M = M (M + 1) = {m * (m + 1)}")
    return {"mass": Estimate(1.0, 0.0, meth), "lam1": Estimate(float(m * (m + 1)), 0.0, meth),
            "trace1": Estimate(float(m), 0.0, meth)}


def stability(*, layers: int, tokens: int = 2, skip: float = 1.0, beta: float = 1.0,
              rule: str = "auto", orders=None, log2n: int | None = None,
              replicates: int | None = None, seed: int = 0, outer=None) -> dict:
    """lambda_l (``lam1`` .. ``lamL``), ``mass`` and ``trace1`` .. (E tr C_l, equal to M) as
    Estimates.  ``rule``: "gh" (three tensor Gauss-Hermite orders ``orders``), "qmc"
    (``replicates`` scrambled Sobol sets of 2^``log2n`` points), "ray" (``replicates`` times
    one independent set of 2^``log2n`` points per outer ray, :func:`ray_moments`) or "auto" (gh
    where a default order triple exists, else ray where :data:`RAY` lists (L, M), else qmc).
    At L = 1 "auto" and "exact" give the closed form (:func:`one_layer`, error 0) and "gh" the
    kernel with zero free coordinates; "qmc" and "ray" need free coordinates (L >= 2)."""
    check(layers=layers, tokens=tokens, skip=skip, beta=beta)
    require(rule in ("auto", "exact", "gh", "qmc", "ray"), "rule",
            "one of auto, exact, gh, qmc, ray", rule)
    require(rule in ("auto", "exact", "gh") if layers == 1 else rule != "exact", "rule",
            "auto, exact or gh at layers = 1 (no free coordinates); exact only at layers = 1",
            rule)
    if layers == 1 and rule in ("auto", "exact"):
        return one_layer(tokens=tokens)
    if rule == "auto":
        rule = ("gh" if (layers, tokens) in GH_ORDERS
                else "ray" if (layers, tokens) in RAY else "qmc")
    outer = (default_outer(layers=layers, tokens=tokens, skip=skip) if outer is None
             else outer)
    keys = (["mass"] + [f"lam{l}" for l in range(1, layers + 1)]
            + [f"trace{l}" for l in range(1, layers + 1)])
    sigma = math.sqrt(SIGMA_FACTOR * norm_bound(tokens=tokens, skip=skip) ** (layers - 1))
    cut = cut_bound(layers=layers, tokens=tokens, skip=skip, sigma=sigma)
    out = {}
    if rule == "gh":
        orders = GH_ORDERS.get((layers, tokens), (8, 10, 12)) if orders is None else orders
        require(len(orders) == 3 and max(orders) ** (tokens * (layers - 1)) <= 2_000_000,
                "orders", "three Gauss-Hermite orders with at most 2e6 inner nodes", orders)
        r = lambdas_gh(layers=layers, tokens=tokens, skip=skip, beta=beta, orders=orders,
                       outer=outer)
        meth = (f"radial x half-sphere outer rules {outer[0]} vs {outer[1]} x tensor "
                f"Gauss-Hermite over {tokens * (layers - 1)} fibre coordinates, orders "
                f"{tuple(orders)}")
        dm = abs(r["fine"][-1][0] - 1.0)
        for i, k in enumerate(keys):
            v, e = _tail(list(r["fine"][:, i]))
            out[k] = Estimate(v, e + r["outer_change"][i] + (dm + cut) * abs(v), meth,
                              extra=dict(orders=[float(x) for x in r["fine"][:, i]]))
        return out
    table = RAY if rule == "ray" else QMC
    log2n = table.get((layers, tokens), (12, 8))[0] if log2n is None else log2n
    replicates = table.get((layers, tokens), (12, 8))[1] if replicates is None else replicates
    top = 16 if rule == "ray" else 20
    require(isinstance(log2n, (int, np.integer)) and 6 <= log2n <= top, "log2n",
            f"in [6, {top}] for rule {rule}", log2n)
    require(isinstance(replicates, (int, np.integer)) and 4 <= replicates <= 64, "replicates",
            "in [4, 64]", replicates)
    r = lambdas_qmc(layers=layers, tokens=tokens, skip=skip, beta=beta, log2n=log2n,
                    replicates=replicates, seed=seed, outer=outer, per_ray=rule == "ray")
    if not (np.all(np.isfinite(r["per"])) and np.all(np.isfinite(r["pooled"]))):
        raise ConvergenceError("non-finite inner moments in the weak-threshold kernel",
                               last_iterate=r["pooled"].tolist())
    t = stats.t.ppf(COVERAGE, replicates - 1)
    sets = (f"independent scrambled Sobol sets of 2^{log2n} points per outer ray"
            if rule == "ray" else f"scrambled Sobol sets of 2^{log2n} points")
    meth = (f"radial x half-sphere outer rules {outer[0]} vs {outer[1]} x {replicates} "
            f"replicates of {sets} over {tokens * (layers - 1)} fibre "
            f"coordinates (error: {t:.2f} x standard error + ratio bias + outer change)")
    dm = abs(r["pooled"][0] - 1.0)
    for i, k in enumerate(keys):
        per = r["per"][:, i]
        se = standard_error(per)
        v = r["pooled"][i]
        bias = abs(per.mean() - v)
        err = t * se + bias + r["outer_change"][i] + (dm + cut) * abs(v)
        out[k] = Estimate(v, err, meth, extra=dict(se=float(se), ratio_bias=float(bias),
                                                   replicate_mean=float(per.mean()),
                                                   outer_change=float(r["outer_change"][i])))
    return out


def weak_thresholds(*, layers: int, tokens: int = 2, skip: float = 1.0, beta: float = 1.0,
                    rule: str = "auto", progress=None, **options) -> list[dict]:
    """alpha_l = 1 / lambda_l per layer (THEORY 2.2, 2.5): dicts layer, kind ("weak"), value,
    error, method, seconds, lam, lam_error.  ``options`` go to :func:`stability`."""
    t0 = time.perf_counter()
    F = stability(layers=layers, tokens=tokens, skip=skip, beta=beta, rule=rule, **options)
    dt = time.perf_counter() - t0
    if progress:
        progress(1, 1, "weak thresholds")
    out = []
    for l in range(1, layers + 1):
        e = F[f"lam{l}"]
        out.append(dict(layer=l, kind="weak", value=float(1.0 / e.value),
                        error=float(e.error / e.value**2), lam=float(e.value),
                        lam_error=float(e.error), method=e.method, seconds=dt))
    return out
