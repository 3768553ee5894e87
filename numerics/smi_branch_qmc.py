"""Branch statistics and sequential thresholds of deep tied attention at any (L, M) in the
supported set of :mod:`.smi_weak` (THEORY 2.2 sequential thresholds, 2.5 depth and tokens), one
row per layer, by one model-sampled kernel.

On the last layer's SE branch ``Q = diag(0, .., 0, q)`` (``V = 1 - q``) the posterior given
``(y, omega_L)`` weighs the free rows ``z_1 .. z_{L-1}`` (prior N(0, I)) and the sign ``s`` of
``z_L = s Mat^{-1} h`` (``Mat = A_{L-1} ... A_1``, Jacobian ``1 / det Mat``) by
``N(s Mat^{-1} h; omega_L, V I)``, the SE convention of THEORY 2.1 (``omega_L ~ N(0, q I)``,
``z_L | omega_L ~ N(omega_L, V I)``; the same information as ``sqrt(q) z_L + sqrt(V) xi``).  The
exponent is quadratic in ``(h, omega_L)``: per inner node the quadratic form of ``Mat^{-1} h``
and the bilinear form ``omega^T Mat^{-1} h``, so the weights of all inner nodes at all outer
points are two matrix products followed by ``exp``.  As in :mod:`.smi_sequential`:

    mu_l = E ||Cov[z_l | y, omega_L] - I||_F^2   (l < L),     K_L = E |g_L|^2,
    g_L = (E[z_L | y, omega_L] - omega_L) / V,   r_l = mu_l - (1 - q) K_L / q,

and the sequential threshold of layer ``l`` is the root ``q*`` of ``r_l`` with
``alpha_seq,l = 1 / mu_l(q*)`` (on the branch ``alpha(q) = q / ((1 - q) K_L)``).  The same
kernel serves a joint branch (``learned``: the learned layers, L among them; :mod:`.smi_cascade`):
each learned free row adds ``N(z_l; omega_l, V_l I) / N(z_l; 0, I)`` to the inner weights, one
more column block of the same matrix product; ``learned = (L,)`` is the branch above.

Rules:

* outer: the teacher is sampled, ``(z_1 .. z_L, xi)`` by scrambled Sobol points mapped to
  N(0, I) (``M (L + 1)`` dimensions), ``omega_L = q z_L + sqrt(q V) xi``, ``h = h^(L)(z)``.  The
  same points serve every ``q`` (common random numbers: ``r_l(q)`` is smooth);
* inner: scrambled Sobol points over the ``M (L - 1)`` free coordinates (prior weights), both
  signs of ``z_L``.

Estimators without variance bias (Nishimori: the teacher is a posterior sample):
``<T_l - I, C_l - I>_F`` with ``T_l = z_l z_l^T`` of the teacher and ``C_l`` the inner rule's
posterior moment, ``g_true . g`` with ``g_true = (z_L - omega_L) / V``; their only bias is the
O(1/n) ratio bias of the self-normalised inner rule, measured by the two halves of each inner
set (``|estimate(n / 2) - estimate(n)|``, the bias at ``n`` for a 1/n law) and added to the bar.
The two-halves U-statistics ``<C_l^a - I, C_l^b - I>_F`` and ``g^a . g^b`` (no variance bias
either, ratio bias of n / 2 nodes: about 4x that of the paired form) have a lower outer variance
for ``mu_l``; each column is regressed on its difference to its U-statistic partner and on
control variates of known mean (``|z_l|^2 - M``, ``||T_l - I||^2 - M (M + 1)``,
``|g_true|^2 - M / V``, ``|z_L|^2 - M``), coefficients pooled over all replicates; the ratio
bias bar of a column given weight ``beta`` on its partner is ``(|1 - beta| + 4 |beta|)`` x the
measured one.  Error = Student-t 99% factor x standard error over the replicates (each an
independent scramble of both point sets) + that ratio-bias bar.

Identities checked at every point: ``E g_L = 0`` (sign symmetry), ``E tr C_l = M`` (Nishimori),
``K_L = (M - E tr Cov[z_L | .] / V) / V`` (Nishimori), each within its bar; the total outer
mass is 1 by construction (the outer points are draws of the model).  The ``u_`` columns (the
two-halves U-statistics alone) are diagnostics; their ratio bias is not measured separately.

Cost: about 20 ns per (outer, inner) pair on one core with single-threaded BLAS (set
``OPENBLAS_NUM_THREADS=1``; a threaded BLAS on 2 shared cores was 3-7x slower).  The bars are
dominated by the outer sampling (heavy-tailed estimators) and the ratio bias as q -> 1.
Measured values, timings and the plain Monte Carlo checks (tests/test_smi_branch_qmc.py):
docs/smi_depth.md, benchmarks/RESULTS.md.
"""

from __future__ import annotations

import math
import time

import numpy as np
from scipy import stats
from scipy.stats import qmc

from .records import ConvergenceError, require, standard_error
from .smi_sequential import fit_root, replicate_se, sequential_driver
from .smi_weak import fibre_gram, fibre_map, pair_list, pair_products, pair_weights, scores

SUPPORTED = ((2, 2), (3, 2), (4, 2), (5, 2), (2, 3), (3, 3))
SKIP_RANGE = (0.5, 4.0)
# (L, M) checked on a narrower skip range: L = 5 as its weak thresholds (numerics.smi_weak), with
# plain Monte Carlo at the layer-1 root at c = 1 (docs/smi_depth.md, "L = 5 on its branch")
SKIP_RANGE_BY_CASE = {(5, 2): (1.0, 4.0)}
BETA_RANGE = (0.25, 2.0)
# (skip, beta) ranges of one joint branch ``(L, M, learned)`` where they differ from the above:
# the L = 2 both-learned branch (numerics.smi_branches.learned_stats), K1, K2 checked against
# plain Monte Carlo at c = 8, 20 and beta = 0.1, 4, 10 (docs/smi_depth.md, "The L = 2 both-learned
# branch: its (skip, beta) range")
BRANCH_RANGES = {(2, 2, (1, 2)): dict(skip=(0.5, 20.0), beta=(0.1, 10.0))}
COVERAGE = 0.995             # two-sided 99% Student-t factor over the replicates
EXP_FLOOR = -80.0            # exponents below (row max + floor) are clipped (no subnormals)
_BLOCK = 1 << 17             # (outer x inner) entries per block

# (log2 outer, log2 inner, replicates) per (L, M)
DEFAULT_RULE = {(2, 2): (12, 13, 16), (3, 2): (12, 14, 16), (4, 2): (12, 14, 16),
                (5, 2): (12, 14, 16), (2, 3): (12, 14, 16), (3, 3): (12, 14, 16)}
# scans in q for the roots (coarse), per (L, M)
DEFAULT_SCAN = (0.9, 0.95, 0.97, 0.98, 0.985, 0.99, 0.994, 0.997, 0.9985, 0.9993)
# scans of their own: (3, 3) has its roots near q3 = 0.94 and 0.96 (cheap scan, 8 x 2^10 x 2^12)
SCANS = {(3, 3): (0.8, 0.85, 0.9, 0.93, 0.95, 0.97, 0.98, 0.99, 0.994, 0.997),
         # (5, 2): layer 4's root lies near q5 = 0.99945 at c = 1, beyond the default scan
         (5, 2): DEFAULT_SCAN + (0.99965, 0.99983, 0.99992)}


def check(*, layers: int, tokens: int, skip: float, beta: float, learned=None) -> None:
    """InputError (one line naming the option) outside the supported set; ``learned`` (the
    learned layers of a joint branch) must increase and end with the last layer."""
    require(isinstance(layers, (int, np.integer)) and isinstance(tokens, (int, np.integer))
            and (int(layers), int(tokens)) in SUPPORTED, "layers",
            f"with tokens one of {SUPPORTED} (layers, tokens) for the branch kernel",
            (layers, tokens))
    lo, hi = SKIP_RANGE_BY_CASE.get((int(layers), int(tokens)), SKIP_RANGE)
    blo, bhi = BETA_RANGE
    if isinstance(learned, (tuple, list)) and all(isinstance(x, (int, np.integer)) for x in learned):
        ranges = BRANCH_RANGES.get((int(layers), int(tokens), tuple(int(x) for x in learned)))
        if ranges:
            (lo, hi), (blo, bhi) = ranges["skip"], ranges["beta"]
    require(isinstance(skip, (int, float)) and np.isfinite(skip) and lo <= skip <= hi, "skip",
            f"in [{lo:g}, {hi:g}] for the branch kernel at layers = {layers}", skip)
    require(isinstance(beta, (int, float)) and np.isfinite(beta) and blo <= beta <= bhi, "beta",
            f"in [{blo:g}, {bhi:g}] for the branch kernel", beta)
    require(learned is None or (isinstance(learned, (tuple, list)) and len(learned) > 0
                                and all(isinstance(x, (int, np.integer)) for x in learned)
                                and list(learned) == sorted(set(learned)) and learned[0] >= 1
                                and learned[-1] == layers), "learned",
            f"increasing layers in 1..{layers} ending with the last layer {layers}", learned)


def check_rule(log2_outer, log2_inner, replicates) -> None:
    for name, x, lo, hi in (("log2_outer", log2_outer, 6, 18), ("log2_inner", log2_inner, 6, 18),
                            ("replicates", replicates, 4, 256)):
        require(isinstance(x, (int, np.integer)) and lo <= x <= hi, name,
                f"an integer in [{lo}, {hi}]", x)


def resolve_rule(log2_outer, log2_inner, replicates, default) -> tuple:
    """``(log2_outer, log2_inner, replicates)``, each taken from ``default`` where None, checked
    (:func:`check_rule`)."""
    rule = tuple(d if x is None else x for x, d in
                 zip((log2_outer, log2_inner, replicates), default[:3], strict=True))
    check_rule(*rule)
    return rule


def point_records(e: dict, names: tuple, j: int = 0) -> dict:
    """``{value, error, se, ratio_bias}`` per name at point ``j`` of :func:`estimates` ``e``
    (error = Student-t 99% x SE + ratio bias)."""
    return {k: dict(value=float(e["value"][j, i]),
                    error=float(e["t"] * e["se"][j, i] + e["bias"][j, i]),
                    se=float(e["se"][j, i]), ratio_bias=float(e["bias"][j, i]))
            for i, k in enumerate(names)}


def identity_checks(e: dict, names: tuple, j: int) -> dict:
    """``(value, error)`` of the identities (``E tr C_l = M``, the Nishimori form of ``K_l``,
    ``E g_l = 0``) at point ``j`` of :func:`estimates` ``e``."""
    return {k: (r["value"], r["error"]) for k, r in point_records(e, names, j).items()
            if k.startswith(("trace", "nishimori", "g"))}


def gauss_sobol(log2n: int, dims: int, rng) -> np.ndarray:
    """2^log2n scrambled Sobol points mapped to N(0, I_dims)."""
    u = qmc.Sobol(d=dims, scramble=True, seed=rng).random_base2(log2n)
    return stats.norm.ppf(u)


# ----------------------------------------------------------------------------- inner rule
def inner_features(z_free: np.ndarray, *, layers: int, tokens: int, skip: float, beta: float,
                   learned=None) -> dict:
    """Per inner node (free rows ``z_free`` (n, L-1, M)): ``B`` (n, Q) with ``|Mat^{-1} h|^2 =
    B . hh``, ``Y`` (n, M^2) with ``omega^T Mat^{-1} h = Y . (omega (x) h)``, ``logw =
    -log det Mat``, the rows ``zs`` of the learned free layers and their ``|z_l|^2`` (``r``), the
    sign-even moment features ``FS`` (1, learned z_l, z_l z_l^T pairs for l < L, B) and the
    sign-odd ones ``FD`` (entries of ``Mat^{-1}``)."""
    m = tokens
    Mi, logdet = fibre_map(z_free, skip=skip, beta=beta)
    pairs = pair_list(m)
    B = fibre_gram(Mi)
    Y = Mi.reshape(-1, m * m)                      # Y[a * m + b] = Mi[a, b]
    zs = [z_free[:, l - 1] for l in (learned or (layers,)) if l < layers]
    zz = [z_free[:, l, a] * z_free[:, l, b] for l in range(layers - 1) for a, b in pairs]
    FS = np.stack([np.ones(len(B)), *(c for z in zs for c in z.T), *zz, *B.T], 1)
    return dict(B=B, Y=Y, zs=zs, r=[(z**2).sum(1) for z in zs], logw=-logdet, FS=FS,
                FD=Y.copy(), n=len(B))


# ----------------------------------------------------------------------------- outer rule
def teacher(u: np.ndarray, *, layers: int, tokens: int, skip: float, beta: float) -> dict:
    """Teacher draws from Gaussian points ``u`` (n, M (L + k)): rows ``z`` (n, L, M), ``xi``
    (n, k, M) (one row per learned layer) and the last-layer scores ``h``."""
    z = u[:, :layers * tokens].reshape(-1, layers, tokens)
    xi = u[:, layers * tokens:].reshape(len(u), -1, tokens)
    return dict(z=z, xi=xi, h=scores(z, skip=skip, beta=beta))


def posterior_sums(h: np.ndarray, omegas: list, vs: list, inner: dict, splits: tuple,
                   shift_out: np.ndarray | None = None) -> list:
    """Inner-rule sums at outer points ``(h, omega_l)`` (one ``omega_l``, ``V_l`` per learned
    layer, the last one L's): for each slice of inner nodes in ``splits``, ``(sum S FS, sum D
    FD)`` with ``S, D = e+ +- e-``, ``e+- = exp(logw + sum_l [omega_l . z_l / V_l - |z_l|^2 (1 /
    V_l - 1) / 2] - |Mat^{-1} h|^2 / (2 V_L) +- omega_L^T Mat^{-1} h / V_L - shift)`` (the sum
    over the learned free rows), a common row shift for all slices."""
    m = h.shape[1]
    hh = pair_products(h)
    oh = (omegas[-1][:, :, None] * h[:, None, :]).reshape(len(h), m * m)
    logw = inner["logw"]
    for r, v in zip(inner["r"], vs, strict=False):
        logw = logw - 0.5 * (1.0 / v - 1.0) * r
    Pout = np.hstack([-0.5 / vs[-1] * hh, *(om / v for om, v in zip(omegas[:-1], vs, strict=False)),
                      np.ones((len(h), 1))])
    Pin = np.vstack([inner["B"].T, *(z.T for z in inner["zs"]), logw[None, :]])
    return signed_sums(Pout, Pin, oh / vs[-1], inner, splits, shift_out)


def signed_sums(Pout: np.ndarray, Pin: np.ndarray, X_out: np.ndarray, inner: dict,
                splits: tuple, shift_out: np.ndarray | None = None) -> list:
    """The block kernel of :func:`posterior_sums` (and of the cascade's): the sign-even exponent
    of outer row i and inner node j is ``(Pout @ Pin)_ij``, the sign-odd one ``(X_out @ Y^T)_ij``
    (``Y = inner["Y"]``); per slice of inner nodes in ``splits`` it returns
    ``(sum_j S_ij FS_j, sum_j D_ij FD_j)`` with ``S, D = e+ +- e-``, ``e+- = exp(even +- odd -
    shift_i)``, one row shift for all slices (float32 exponentials, :func:`exp32`), written to
    ``shift_out`` (n,) when given."""
    n = len(Pout)
    out = [[np.empty((n, inner["FS"].shape[1])), np.empty((n, inner["FD"].shape[1]))]
           for _ in splits]
    step = max(8, _BLOCK // inner["n"])
    Yt = inner["Y"].T
    FS32, FD32 = (np.asarray(inner[k], dtype=np.float32) for k in ("FS", "FD"))
    for s0 in range(0, n, step):
        sl = slice(s0, s0 + step)
        P = Pout[sl] @ Pin
        X = X_out[sl] @ Yt
        Ep = P + X
        mp = Ep.max(1)
        # the sign -1 matters only where omega . Mat^{-1} h is within ~80 V of 0
        need = P.max(1) - X.min(1) > mp + EXP_FLOOR
        shift = mp.copy()
        if need.any():
            Em = P[need] - X[need]
            shift[need] = np.maximum(mp[need], Em.max(1))
        if shift_out is not None:
            shift_out[sl] = shift
        S = exp32(Ep, shift)
        D = S.copy()
        if need.any():
            em = exp32(Em, shift[need])
            S[need] += em
            D[need] -= em
        for (oS, oD), part in zip(out, splits, strict=True):
            oS[sl] = S[:, part] @ FS32[part]
            oD[sl] = D[:, part] @ FD32[part]
    return out


def exp32(E: np.ndarray, shift: np.ndarray) -> np.ndarray:
    """``exp(E - shift)`` row-wise in float32 (relative error ~1e-7 per weight, far below the
    statistical bars; sums of the moment products in float32 blocks are accumulated per row),
    exponents clipped below at :data:`EXP_FLOOR`."""
    E -= shift[:, None]
    np.maximum(E, EXP_FLOOR, out=E)
    e = E.astype(np.float32)
    np.exp(e, out=e)
    return e


def _moments(sums, h: np.ndarray, *, layers: int, seen: int):
    """Posterior moments from one slice's sums: ``C`` (n, L-1, Q) pair entries of ``E[z_l z_l^T
    | .]``, ``means`` (``E[z_l | .]`` of the ``seen`` learned free rows, then of ``z_L``), ``n2``
    (n,) = ``E |z_L|^2``."""
    S, D = sums
    m = h.shape[1]
    q = m * (m + 1) // 2
    Z = S[:, 0]
    means = [S[:, 1 + m * i:1 + m * (i + 1)] / Z[:, None] for i in range(seen)]
    k = 1 + m * seen
    C = S[:, k:k + q * (layers - 1)].reshape(len(h), layers - 1, q) / Z[:, None, None]
    hh = pair_products(h)
    n2 = (S[:, k + q * (layers - 1):] * hh).sum(1) / Z
    Mi = D.reshape(len(h), m, m) / Z[:, None, None]
    return C, [*means, np.einsum("nab,nb->na", Mi, h)], n2


def sample_columns(layers: int, tokens: int, learned=None, psi: bool = False) -> tuple:
    """Names of the per-outer-sample columns of :func:`branch_samples`: ``mu_k`` and ``r_k = mu_k
    - (1 - q_L) K_L / q_L`` per unlearned layer k, ``K_l``, the Nishimori form and ``E g_l`` per
    learned layer l, ``E tr C_l`` per free row, the two-halves partners ``u_`` and (``psi``)
    ``log Z_out`` (THEORY 2.1)."""
    learned = tuple(learned or (layers,))
    unl = [k for k in range(1, layers) if k not in learned]
    return (*(f"mu{k}" for k in unl), *(f"K{l}" for l in learned), *(f"r{k}" for k in unl),
            *(f"trace{l}" for l in range(1, layers)), *(f"nishimori{l}" for l in learned),
            *(f"g{l}_{a}" for l in learned for a in range(tokens)),
            *(f"u_mu{k}" for k in unl), *(f"u_K{l}" for l in learned), *(f"u_r{k}" for k in unl),
            *(("psi",) if psi else ()))


def branch_samples(points, *, layers: int, tokens: int, skip: float, beta: float, outer_pts,
                   inner_pts, learned=None, psi: bool = False) -> dict:
    """Per-outer-sample values at every point of ``points`` (a ``q_L``, or a tuple of the learned
    layers' overlaps) for one replicate (teacher points ``outer_pts``, inner points ``inner_pts``
    (n, M (L-1)), common to every point): for the full inner set (``full``) and the mean of its
    two halves (``half``), arrays (n_pts, n_outer, columns of :func:`sample_columns`), and the
    control variates ``cv`` (n_pts, n_outer, k) (known mean 0).  ``psi``: a last column ``log
    Z_out`` (the density of ``h`` given the ``omega_l``, both signs, every Gaussian normalised)."""
    m, L = tokens, layers
    learned = tuple(learned or (L,))
    unl = [k for k in range(1, L) if k not in learned]
    fro, eye = pair_weights(m)
    inner = inner_features(inner_pts.reshape(-1, L - 1, m), layers=L, tokens=m, skip=skip,
                           beta=beta, learned=learned)
    t = teacher(outer_pts, layers=L, tokens=m, skip=skip, beta=beta)
    z, xi, h = t["z"], t["xi"], t["h"]
    T = {k: pair_products(z[:, k - 1]) for k in unl}
    r2 = (z**2).sum(2)                                                    # (n, L)
    n = inner["n"]
    splits = (slice(0, n // 2), slice(n // 2, n))
    full, half, cvs = [], [], []
    for qs in points:
        qs = np.atleast_1d(qs)
        vs = [1.0 - q for q in qs]
        oms = [q * z[:, l - 1] + math.sqrt(q * v) * xi[:, i]
               for i, (l, q, v) in enumerate(zip(learned, qs, vs, strict=True))]
        gts = [(z[:, l - 1] - om) / v for l, om, v in zip(learned, oms, vs, strict=True)]
        shift = np.empty(len(h))
        sa, sb = posterior_sums(h, oms, vs, inner, splits, shift)
        # log of the dropped normalisations: (2 pi V_L)^(-M/2), V_l^(-M/2) exp(-|omega_l|^2 / 2 V_l)
        const = shift - 0.5 * m * (math.log(2 * math.pi * vs[-1]) + sum(math.log(v) for v in vs[:-1]))
        const -= sum((om**2).sum(1) / (2 * v) for om, v in zip(oms, vs, strict=True))
        whole = [sa[0] + sb[0], sa[1] + sb[1]]
        mo = {k: _moments(s, h, layers=L, seen=len(learned) - 1)
              for k, s in (("f", whole), ("a", sa), ("b", sb))}
        aL = (1 - qs[-1]) / qs[-1]
        u_mu = [((mo["a"][0][:, k - 1] - eye) * (mo["b"][0][:, k - 1] - eye) * fro).sum(1)
                for k in unl]
        u_K = [(((ma - om) / v) * ((mb - om) / v)).sum(1) for ma, mb, om, v
               in zip(mo["a"][1], mo["b"][1], oms, vs, strict=True)]
        u_r = [u - aL * u_K[-1] for u in u_mu]
        est = []
        for key, S0 in (("f", whole[0][:, 0] / n), ("a", sa[0][:, 0] * 2 / n),
                        ("b", sb[0][:, 0] * 2 / n)):
            C, means, n2 = mo[key]
            gs = [(mz - om) / v for mz, om, v in zip(means, oms, vs, strict=True)]
            mu = [((T[k] - eye) * (C[:, k - 1] - eye) * fro).sum(1) for k in unl]
            K = [(gt * g).sum(1) for gt, g in zip(gts, gs, strict=True)]
            # E tr Cov[z_l | .] from this set's own moments (its ratio bias is then measured)
            cov = [(C[:, l - 1] * eye).sum(1) - (mz**2).sum(1)
                   for l, mz in zip(learned[:-1], means, strict=False)]
            cov.append(n2 - (means[-1] ** 2).sum(1))
            nis = [k - (m - c / v) / v for k, c, v in zip(K, cov, vs, strict=True)]
            est.append(np.column_stack([*mu, *K, *(x - aL * K[-1] for x in mu),
                                        *(C * eye).sum(2).T, *nis, *gs, *u_mu, *u_K, *u_r,
                                        *((np.log(S0) + const,) if psi else ())]))
        full.append(est[0])
        half.append(0.5 * (est[1] + est[2]))
        cvs.append(np.column_stack([r2[:, :-1] - m,
                                    *(r2[:, k - 1]**2 - 2 * r2[:, k - 1] + m - m * (m + 1)
                                      for k in unl),
                                    *((gt**2).sum(1) - m / v for gt, v in zip(gts, vs,
                                                                               strict=True)),
                                    r2[:, -1] - m]))
    return dict(full=np.array(full), half=np.array(half), cv=np.array(cvs))


def replicate_samples(points, *, layers, tokens, skip, beta, log2_outer, log2_inner, replicates,
                      seed, learned=None, psi: bool = False):
    """:func:`branch_samples` over independent scrambles (seeded): arrays (R, n_pts, n, k)."""
    k = len(learned or (layers,))
    dims_o, dims_i = tokens * (layers + k), tokens * (layers - 1)
    seeds = np.random.SeedSequence(seed).spawn(replicates)
    full, half, cv = [], [], []
    for s in seeds:
        ro, ri = (np.random.default_rng(x) for x in s.spawn(2))
        r = branch_samples(points, layers=layers, tokens=tokens, skip=skip, beta=beta,
                           outer_pts=gauss_sobol(log2_outer, dims_o, ro),
                           inner_pts=gauss_sobol(log2_inner, dims_i, ri), learned=learned,
                           psi=psi)
        full.append(r["full"])
        half.append(r["half"])
        cv.append(r["cv"])
    return np.array(full), np.array(half), np.array(cv)


def _partner(names: tuple) -> dict:
    """Column index -> index of its two-halves U-statistic partner (same mean up to ratio
    bias): ``mu_l``, ``K_L`` and ``r_l`` have one."""
    return {i: names.index("u_" + k) for i, k in enumerate(names) if "u_" + k in names}


def _adjust(vals: np.ndarray, cv: np.ndarray, partner: dict):
    """Control-variate adjusted per-replicate means (R, n_q, k) and the weight ``beta`` (n_q, k)
    given to the U-statistic partner: every column is regressed on the known-mean-zero variates
    (and on its difference to its partner, whose mean is only a ratio-bias difference),
    coefficients pooled over replicates per q."""
    R, nq, n, k = vals.shape
    out = np.empty((R, nq, k))
    beta = np.zeros((nq, k))
    for j in range(nq):
        X = cv[:, j].reshape(R * n, -1)
        Y = vals[:, j].reshape(R * n, k)
        for i in range(k):
            Xi = X if i not in partner else np.column_stack([X, Y[:, i] - Y[:, partner[i]]])
            Xc = Xi - Xi.mean(0)
            coef, *_ = np.linalg.lstsq(Xc, Y[:, i] - Y[:, i].mean(), rcond=None)
            out[:, j, i] = (Y[:, i] - Xi @ coef).reshape(R, n).mean(1)
            if i in partner:
                beta[j, i] = coef[-1]
    return out, beta


def estimates(full: np.ndarray, half: np.ndarray, cv: np.ndarray, names: tuple) -> dict:
    """Value, Student-t factor, standard error and ratio-bias bar of every column at every q.
    The ratio bias of a teacher-paired column at n inner nodes is ``delta = |mean(halves) -
    mean(whole)|`` (1/n law); its U-statistic partner (halves of n / 2) carries about 4 delta, so
    a column mixed with weight ``beta`` on its partner gets ``(|1 - beta| + 4 |beta|) delta``."""
    R = full.shape[0]
    partner = _partner(names)
    af, beta = _adjust(full, cv, partner)
    raw_f = full.mean(2)
    raw_h = half.mean(2)
    delta = np.abs(raw_f - raw_h).mean(0)
    bias = delta * (np.abs(1.0 - beta) + 4.0 * np.abs(beta))
    t = stats.t.ppf(COVERAGE, R - 1)
    return dict(per=af, value=af.mean(0), se=standard_error(af, axis=0), t=t, bias=bias,
                beta=beta, half_value=raw_h.mean(0), full_raw=raw_f.mean(0))


def branch_stats_qmc(q: float, *, layers: int, tokens: int = 2, skip: float = 1.0,
                     beta: float = 1.0, log2_outer: int | None = None,
                     log2_inner: int | None = None, replicates: int | None = None,
                     seed: int = 0) -> dict:
    """``K_L``, ``mu_l`` and ``r_l`` (l < L) on the last layer's SE branch at overlap ``q`` with
    bars (THEORY 2.2; module docstring), and the identities ``trace_l`` (E tr C_l, equals M),
    ``nishimori{L}`` (``K_L - (M - E tr Cov_L / V) / V``, equals 0), ``g{L}_a`` (E g_L, equal
    0): a dict of ``{value, error, se, ratio_bias}`` per name, plus ``seconds`` and ``method``."""
    check(layers=layers, tokens=tokens, skip=skip, beta=beta)
    require(isinstance(q, (int, float)) and np.isfinite(q) and 0 < q < 1, f"q{layers}",
            "in (0, 1)", q)
    lo, li, R = resolve_rule(log2_outer, log2_inner, replicates, DEFAULT_RULE[(layers, tokens)])
    t0 = time.perf_counter()
    full, half, cv = replicate_samples([q], layers=layers, tokens=tokens, skip=skip, beta=beta,
                                 log2_outer=lo, log2_inner=li, replicates=R, seed=seed)
    names = sample_columns(layers, tokens)
    out = point_records(estimates(full, half, cv, names), names)
    out["seconds"] = time.perf_counter() - t0
    out["method"] = _method(lo, li, R, layers, tokens)
    return out


def _method(lo, li, R, layers, tokens) -> str:
    return (f"model-sampled branch kernel: {R} replicates of 2^{lo} scrambled Sobol teacher "
            f"draws (z, xi; {tokens * (layers + 1)} dims) x 2^{li} scrambled Sobol fibre nodes "
            f"({tokens * (layers - 1)} free coordinates, both signs), teacher-paired and "
            "two-halves estimators mixed by regression with control variates; "
            "error = Student-t 99% x SE over replicates + ratio bias "
            "(inner halves vs whole)")


# ----------------------------------------------------------------------------- thresholds
def sequential_thresholds_qmc(*, layers: int, tokens: int = 2, skip: float = 1.0,
                              beta: float = 1.0, log2_outer: int | None = None,
                              log2_inner: int | None = None, replicates: int | None = None,
                              seed: int = 0, scan=None, scan_rule=(10, 12, 8),
                              points: int = 4, spacing: float = 0.2,
                              progress=None) -> list[dict]:
    """Sequential thresholds of every unlearned layer ``l = 1 .. L-1`` on the last layer's SE
    branch (THEORY 2.2): the root ``q*`` of ``r_l = mu_l - (1 - q) K_L / q``, ``alpha_seq,l =
    1 / mu_l(q*)``.

    By :func:`.smi_sequential.sequential_driver`: a cheap scan (``scan_rule`` = (log2 outer,
    log2 inner, replicates)) over ``scan`` (default :data:`SCANS` for (L, M), else
    :data:`DEFAULT_SCAN`) brackets each sign change; ``points``
    values of ``q``, ``spacing`` apart in ``x = log(1 - q)`` and centred on the scan's linear
    root (moved by their span, at most twice, until ``r_l`` changes sign among them), are
    evaluated with the main rule and common random numbers.  ``r_l`` and
    ``mu_l`` are fitted by quadratics in ``x``.  Error = Student-t 99% factor x SE of the
    per-replicate roots' alpha + ratio bias (the bars' bias terms of ``mu_l`` and ``r_l`` carried
    through the slopes) + |quadratic - linear fit|.  Records ``layer, kind="sequential", value, error,
    q{L}, q{L}_error, method, seconds, first`` and the identity checks at the nearest point."""
    check(layers=layers, tokens=tokens, skip=skip, beta=beta)
    lo, li, R = resolve_rule(log2_outer, log2_inner, replicates, DEFAULT_RULE[(layers, tokens)])
    check_rule(*scan_rule)
    if scan is None:
        scan = SCANS.get((int(layers), int(tokens)), DEFAULT_SCAN)
    require(isinstance(scan, (tuple, list)) and len(scan) >= 2
            and all(isinstance(x, (int, float)) and 0 < x < 1 for x in scan)
            and list(scan) == sorted(set(scan)), "scan", "increasing values in (0, 1)", scan)
    require(isinstance(points, int) and 3 <= points <= 8, "points", "an integer in [3, 8]",
            points)
    require(isinstance(spacing, (int, float)) and 0.02 <= spacing <= 1.0, "spacing",
            "in [0.02, 1] (step in log(1 - q))", spacing)
    tick = progress or (lambda *a: None)
    names = sample_columns(layers, tokens)
    free = range(1, layers)
    kw = dict(layers=layers, tokens=tokens, skip=skip, beta=beta)

    def resid(qs):
        sf, sh, sc = replicate_samples(qs, **kw, log2_outer=scan_rule[0],
                                       log2_inner=scan_rule[1], replicates=scan_rule[2],
                                       seed=seed + 7919)
        rs = estimates(sf, sh, sc, names)["value"]
        tick(1, 1 + layers - 1, "sequential (branch QMC): scan")
        return rs[:, [names.index(f"r{l}") for l in free]]

    def locate(l, table, bracket):
        """Layer l: ``points`` values of q around the scan's linear root, the main rule with
        common random numbers, quadratic fits in x = log(1 - q) (:func:`.fit_root`)."""
        (qa, qb), col = bracket, l - 1
        xa, xb = math.log1p(-qa), math.log1p(-qb)
        ra, rb = table[qa][col], table[qb][col]
        xc = xa + (xb - xa) * ra / (ra - rb)            # linear interpolation in the bracket
        for _attempt in range(3):
            xs = [xc + spacing * (k - 0.5 * (points - 1)) for k in range(points)]
            qs = [-math.expm1(x) for x in xs]
            require(all(0 < x < 1 for x in qs), "scan", "brackets whose points stay in (0, 1)",
                    qs)
            full, half, cv = replicate_samples(qs, **kw, log2_outer=lo, log2_inner=li,
                                               replicates=R, seed=seed)
            e = estimates(full, half, cv, names)
            rv = e["value"][:, names.index(f"r{l}")]
            if min(rv) < 0 < max(rv):
                break
            # r_l rises with q (falls with x): all negative -> the root lies at smaller x
            xc += (-1.0 if max(rv) < 0 else 1.0) * spacing * (points - 1)
        ir, im = names.index(f"r{l}"), names.index(f"mu{l}")
        x0 = float(np.mean(xs))

        def fit(v, deg=2):
            """Root and mu_l there (the linear root where the quadratic has none)."""
            return (fit_root(xs, v[:, ir], v[:, im], x0, deg=deg)
                    or fit_root(xs, v[:, ir], v[:, im], x0, deg=deg, root_deg=1))

        f, lin = fit(e["value"]), fit(e["value"], 1)
        xr, a, s_r, s_mu = f["t"], 1.0 / f["mu"], f["s_r"], f["s_mu"]
        if not min(xs) - 1e-12 <= xr <= max(xs) + 1e-12:
            raise ConvergenceError(f"layer-{l} root outside the refinement points",
                                   last_iterate=qs,
                                   residual=[float(x) for x in e["value"][:, ir]])

        def root_alpha(v):
            g = fit(v)
            return [g["t"], 1.0 / g["mu"]]

        se_x, se_a = replicate_se(root_alpha, e["per"])
        # ratio bias: shifts mu_l by up to b_mu and the root by up to b_r / |s_r|
        b_r, b_mu = float(e["bias"][:, ir].max()), float(e["bias"][:, im].max())
        bias_a = a**2 * (b_mu + abs(s_mu / s_r) * b_r)
        al = 1.0 / lin["mu"]
        err = e["t"] * se_a + bias_a + abs(a - al)
        q_star = -math.expm1(xr)
        q_err = (e["t"] * se_x + b_r / abs(s_r) + abs(xr - lin["t"])) * (1.0 - q_star)
        j = int(np.argmin([abs(x - xr) for x in xs]))
        tick(1 + l, 1 + layers - 1, f"sequential (branch QMC): layer {l}")
        return {
            "layer": l, "kind": "sequential", "value": float(a), "error": float(err),
            f"q{layers}": float(q_star), f"q{layers}_error": float(q_err),
            "stat_error": float(e["t"] * se_a), "ratio_bias": float(bias_a),
            "slope_r": s_r, "slope_mu": s_mu,
            "interpolation": float(abs(a - al)), "points": qs,
            "residuals": [float(x) for x in e["value"][:, ir]],
            "residual_errors": [float(e["t"] * s + b) for s, b in
                                zip(e["se"][:, ir], e["bias"][:, ir], strict=True)],
            f"K{layers}": float(e["value"][j, names.index(f"K{layers}")]),
            "checks": identity_checks(e, names, j),
            "method": (f"root in q{layers} of mu_{l} - (1-q{layers}) K{layers}/q{layers} on the "
                       f"layer-{layers} SE branch, quadratic fit in log(1 - q) over {points} "
                       "points with common random numbers; " + _method(lo, li, R, layers, tokens)
                       + " + |quadratic - linear fit|")}

    return sequential_driver(resid, locate, unlearned=free, scan=list(scan), rising=True,
                             what="the scan")


# ----------------------------------------------------------------------------- SE fixed point
#: overlaps q_L scanned (cheap rule) to bracket the last layer's fixed point
FIXED_POINT_SCAN = (0.05, 0.2, 0.4, 0.6, 0.75, 0.85, 0.9, 0.94, 0.97, 0.985, 0.993, 0.997)


def branch_fixed_point(*, alpha: float, layers: int, tokens: int = 2, skip: float = 1.0,
                       beta: float = 1.0, log2_outer: int | None = None,
                       log2_inner: int | None = None, replicates: int | None = None,
                       seed: int = 0, scan=FIXED_POINT_SCAN, scan_rule=(10, 12, 8),
                       progress=None) -> dict:
    """The SE fixed point on the last layer's branch Q = diag(0, .., 0, q) at ``alpha`` (THEORY
    2.1: q_hat = alpha K_L(q), q = q_hat / (1 + q_hat), i.e. q / (1 - q) = alpha K_L(q)): the
    cheap ``scan_rule`` brackets the root on ``scan``, Brent's method in x = log(1 - q) on the
    main rule (common random numbers: a smooth function of q). Error of q: the bar of K_L
    through the residual's slope + the root tolerance. At the root, each unlearned layer's
    stability eigenvalue alpha mu_l with its bar (the branch is stable in layer l when it is
    below 1 by more than its bar (that of mu_l plus mu_l's change over q's bar), unstable when
    above; otherwise undecided). Raises
    ConvergenceError when no sign change is found (alpha below the last layer's weak threshold
    gives only Q = 0, or the root lies beyond the scan)."""
    from scipy.optimize import brentq

    check(layers=layers, tokens=tokens, skip=skip, beta=beta)
    require(isinstance(alpha, (int, float)) and np.isfinite(alpha) and alpha > 0, "alpha",
            "a finite number > 0", alpha)
    t0 = time.perf_counter()
    tick = progress or (lambda *a: None)
    kw = dict(layers=layers, tokens=tokens, skip=skip, beta=beta)
    L = layers

    def resid(q, rule):
        st = branch_stats_qmc(q, **kw, log2_outer=rule[0], log2_inner=rule[1],
                              replicates=rule[2], seed=seed)
        return q / (1 - q) - alpha * st[f"K{L}"]["value"], st

    main = resolve_rule(log2_outer, log2_inner, replicates, DEFAULT_RULE[(layers, tokens)])
    rs = []
    for k, q in enumerate(scan):
        rs.append(resid(q, scan_rule)[0])
        tick(k + 1, len(scan) + 1, f"branch fixed point: scan q{L} = {q:g}")
        if k and rs[-2] < 0 <= rs[-1]:
            break
    idx = [i for i in range(len(rs) - 1) if rs[i] < 0 <= rs[i + 1]]
    if not idx:
        raise ConvergenceError(f"no fixed point on the layer-{L} branch in q{L} in "
                               f"[{scan[0]}, {scan[-1]}] at alpha = {alpha} (below the weak "
                               "threshold only Q = 0 exists)", last_iterate=list(scan[:len(rs)]),
                               residual=rs)
    i = idx[0]
    seen = {}

    def f(x):
        q = -math.expm1(x)
        if q not in seen:
            seen[q] = resid(q, main)
        return seen[q][0]

    # the cheap rule's bracket, else (a root next to a scan point, within the cheap rule's
    # noise) the first sign change of the main rule over the neighbouring scan intervals
    near = [i, *range(max(0, i - 1), min(len(scan) - 1, i + 2))]
    pairs = [(math.log1p(-scan[j]), math.log1p(-scan[j + 1])) for j in dict.fromkeys(near)]
    found = [(a, b) for a, b in pairs if f(a) * f(b) <= 0]
    if not found:
        raise ConvergenceError(f"the scan's bracket of the layer-{L} branch point is lost on the "
                               "main rule", last_iterate=(scan[max(0, i - 1)],
                                                          scan[min(len(scan) - 1, i + 2)]),
                               residual=[(f(a), f(b)) for a, b in pairs])
    xa, xb = found[0]
    x = brentq(f, xa, xb, xtol=1e-7, rtol=1e-10)
    q = -math.expm1(x)
    _, st = seen[q] if q in seen else resid(q, main)
    dx = 1e-3
    slope = (f(x + dx) - f(x - dx)) / (2 * dx)          # d resid / dx
    dq_dx = 1 - q
    q_err = alpha * st[f"K{L}"]["error"] / abs(slope) * dq_dx + 1e-7
    up, dn = seen[-math.expm1(x + dx)][1], seen[-math.expm1(x - dx)][1]
    stab = {}
    for l in range(1, L):
        mu = st[f"mu{l}"]
        dmu_dx = (up[f"mu{l}"]["value"] - dn[f"mu{l}"]["value"]) / (2 * dx)
        e = alpha * mu["value"]
        # the bar of mu_l at q plus the change of mu_l over q's own bar
        err = alpha * (mu["error"] + abs(dmu_dx) * q_err / dq_dx)
        stab[l] = {"eigenvalue": e, "error": err,
                   "stable": (True if e + err < 1 else False if e - err > 1 else None)}
    tick(len(scan) + 1, len(scan) + 1, "branch fixed point: done")
    K = st[f"K{L}"]
    return {"alpha": alpha, "layers": L, "tokens": tokens, f"q{L}": q, f"q{L}_error": q_err,
            f"q_hat{L}": alpha * K["value"], f"q_hat{L}_error": alpha * K["error"],
            "stability": stab, "seconds": time.perf_counter() - t0,
            "method": "root of q / (1 - q) = alpha K_L(q) in log(1 - q) (Brent), K_L by the "
                      + _method(*main, layers, tokens)}
