"""Seeded Monte Carlo oracles of the SMI engine (deep tied attention, THEORY 2.1-2.3, 2.5):
routes independent of every quadrature rule, called only by the tests and the benchmarks
(``benchmarks/smi_*.py`` put this folder on ``sys.path``), never as an engine.  The one oracle
the engine runs itself (the cross block of F, an identity check of ``aim-sym check``) stays in
``aim_sym.numerics.smi`` (``cross_block_montecarlo``).

* :func:`montecarlo_lambdas`, :func:`montecarlo_inner_bias`, :func:`model_sampled_lambdas`,
  :func:`tail_weighted_lambdas` (M = 2): the weak-threshold coefficients of every layer at
  depth L, M tokens (the routes of docs/smi_depth.md beside :mod:`aim_sym.numerics.smi_weak`);
* :func:`montecarlo_stability`: lambda_1, lambda_2 at ``Q = 0``, L = 2, with a proposal that
  resolves small skip (beside :func:`aim_sym.numerics.smi.stability_matrix`);
* :func:`montecarlo_branch`: the last layer's branch ``Q = diag(0, .., 0, q)`` at any depth
  (mu_l, K_L, the sequential residuals; prior + sign-flipped Laplace mixture over the free rows);
* :func:`montecarlo_stats` (``Q = diag(q1, q2)``: K1, K2, K12), the same sampler with a learned
  free row;
* :func:`montecarlo_sequential_thresholds`: the sequential thresholds on that branch (the
  oracle of the lattice driver :mod:`aim_sym.numerics.smi_sequential`);
* :func:`se_montecarlo`: the L = 2 state evolution with a Monte Carlo outer expectation and the
  GAMP output function of :mod:`aim_sym.numerics.smi_amp`.
"""

from __future__ import annotations

import functools
import itertools
import math
import time

import numpy as np
from aim_sym.numerics import smi_fibre, smi_weak
from aim_sym.numerics.records import ConvergenceError, mean_estimate, require, standard_error
from aim_sym.numerics.smi import teacher_q0
from aim_sym.numerics.smi_amp import forward, gout
from aim_sym.numerics.smi_fibre import attention_inverse, fibre_point, functions, inverse_columns
from scipy import stats
from scipy.stats import qmc

CHUNK = 4_000_000    # entries of one (outer x inner) block of model_sampled_lambdas


# ----------------------------------------------------------------------------- depth L, M tokens
def montecarlo_lambdas(*, layers: int, tokens: int = 2, skip: float = 1.0, beta: float = 1.0,
                       samples: int = 2000, inner: int = 4096, seed: int = 0,
                       return_values: bool = False) -> dict:
    """Independent route (plain Monte Carlo): true z ~ N(0, I), h = h^(L)(z); the posterior of
    the free rows by self-normalised importance sampling from their prior (weights
    N(Mat^{-1} h) / det Mat) with ``inner`` samples split in two independent halves a, b; the
    estimator <C_a - I, C_b - I>_F has no variance bias (only the O(1/inner) ratio bias).
    Returns, per layer, (mean, standard error) over the outer samples (and, with
    ``return_values``, the per-sample values under ``"values"``).  The true z and the inner
    samples come from separate streams, so runs with one seed and two ``inner`` share the true z
    (paired differences measure the inner-sample bias)."""
    smi_weak.check(layers=layers, tokens=tokens, skip=skip, beta=beta)
    rng_true, rng = (np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(2))
    m = tokens
    vals = np.zeros((samples, layers))
    eye = np.eye(m)
    for s in range(samples):
        z = rng_true.standard_normal((layers, m))
        h = smi_weak.scores(z, skip=skip, beta=beta)
        zf = rng.standard_normal((inner, layers - 1, m))
        Mi, logdet = smi_weak.fibre_map(zf, skip=skip, beta=beta)
        zL = Mi @ h
        logw = -0.5 * (zL**2).sum(1) - logdet
        rows = np.concatenate([zf, zL[:, None, :]], 1)        # (inner, L, M)
        half = inner // 2
        C = []
        for part in (slice(0, half), slice(half, 2 * half)):
            w = np.exp(logw[part] - logw[part].max())
            w /= w.sum()
            C.append(np.einsum("n,nla,nlb->lab", w, rows[part], rows[part]) - eye)
        vals[s] = (C[0] * C[1]).sum((1, 2))
    out = {f"lam{l + 1}": (float(v.mean()), standard_error(v)) for l, v in enumerate(vals.T)}
    if return_values:
        out["values"] = vals
    return out


def montecarlo_inner_bias(*, layers: int, tokens: int = 2, skip: float = 1.0, beta: float = 1.0,
                          samples: int = 200, log2n: int = 15, chunks=(256, 1024, 4096),
                          seed: int = 0) -> dict:
    """Ratio bias of the Monte Carlo route's half-split estimator, paired (docs/smi_depth.md).
    Per true z (h sampled from the model) 2^``log2n`` prior samples of the free rows are cut
    into blocks of k samples; the U-statistic mean over ordered block pairs j != i of
    <C_i - I, C_j - I>_F has the expectation of :func:`montecarlo_lambdas` with halves of k
    (``inner`` = 2 k).  Its difference to the same statistic with two blocks of 2^(log2n-1),
    on the same samples, measures the bias at halves of k with little noise.  Returns
    ``"lam{l}"``: {k: (mean difference, standard error)}, ``"ref"``: per layer (mean, SE) of the
    two-block statistic, and ``"ess"``: the quantiles 0.1%, 1%, 10%, 50% of the effective sample
    size of the first block of 1024 (or fewer)."""
    smi_weak.check(layers=layers, tokens=tokens, skip=skip, beta=beta)
    require(isinstance(samples, (int, np.integer)) and samples >= 2, "samples", ">= 2", samples)
    require(isinstance(log2n, (int, np.integer)) and 4 <= log2n <= 18, "log2n", "in [4, 18]",
            log2n)
    n = 1 << log2n
    sizes = tuple(chunks) + (n // 2,)
    require(all(isinstance(k, (int, np.integer)) and 1 <= k <= n // 2 and n % k == 0
                and n // k >= 2 for k in sizes), "chunks",
            "block sizes dividing 2^log2n, at most 2^(log2n-1)", chunks)
    rng_true, rng = (np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(2))
    m = tokens
    a, b = np.triu_indices(m)
    fro = np.where(a == b, 1.0, 2.0)
    eye = (a == b).astype(float)
    vals = np.zeros((samples, len(sizes), layers))
    ess = np.zeros(samples)
    k0 = min(1024, n // 2)
    for s in range(samples):
        h = smi_weak.scores(rng_true.standard_normal((layers, m)), skip=skip, beta=beta)
        zf = rng.standard_normal((n, layers - 1, m))
        Mi, logdet = smi_weak.fibre_map(zf, skip=skip, beta=beta)
        zL = Mi @ h
        logw = -0.5 * (zL**2).sum(1) - logdet
        w = np.exp(logw - logw.max())
        rows = np.concatenate([zf, zL[:, None, :]], 1)
        wf = w[:, None] * (rows[:, :, a] * rows[:, :, b]).reshape(n, -1)
        for j, k in enumerate(sizes):
            C = ((wf.reshape(-1, k, wf.shape[1]).sum(1) / w.reshape(-1, k).sum(1)[:, None])
                 .reshape(-1, layers, len(fro)) - eye)
            blocks = C.shape[0]
            vals[s, j] = (((C.sum(0) ** 2) @ fro - ((C**2) @ fro).sum(0))
                          / (blocks * (blocks - 1)))
        ess[s] = w[:k0].sum() ** 2 / (w[:k0] ** 2).sum()
    out = {}
    for l in range(layers):
        d = vals[:, :-1, l] - vals[:, -1:, l]
        out[f"lam{l + 1}"] = {int(k): (float(d[:, j].mean()), standard_error(d[:, j]))
                              for j, k in enumerate(sizes[:-1])}
    out["ref"] = [(float(vals[:, -1, l].mean()), standard_error(vals[:, -1, l]))
                  for l in range(layers)]
    out["ess"] = [float(q) for q in np.quantile(ess, [0.001, 0.01, 0.1, 0.5])]
    return out


def model_sampled_lambdas(*, layers: int, tokens: int = 2, skip: float = 1.0, beta: float = 1.0,
                          log2_outer: int = 11, log2_inner: int = 15, block: int = 4096,
                          replicates: int = 16, seed: int = 0) -> dict:
    """Third route (docs/smi_depth.md), independent of the quadrature's outer rule and of its
    plain ratio: h sampled from the model by a scrambled Sobol set over the true z (2^log2_outer
    per replicate, h = h^(L)(z)); per replicate one set of 2^log2_inner iid prior samples of the
    free rows, cut into blocks of ``block``, shared by all h; ||C_l(h) - I||^2 by the U-statistic
    over ordered block pairs (no variance bias, ratio bias of halves of ``block``, see
    :func:`montecarlo_inner_bias`).  Returns ``"lam{l}"``: (mean over replicates, standard
    error over replicates) and ``"per"``: the (replicates, L) replicate values."""
    smi_weak.check(layers=layers, tokens=tokens, skip=skip, beta=beta)
    n = 1 << log2_inner
    require(isinstance(block, (int, np.integer)) and n % block == 0 and n // block >= 2,
            "block", "a divisor of 2^log2_inner, at most 2^(log2_inner-1)", block)
    require(isinstance(replicates, (int, np.integer)) and replicates >= 2, "replicates", ">= 2",
            replicates)
    m = tokens
    pairs = [(a, b) for a in range(m) for b in range(a, m)]
    fro = np.array([1.0 if a == b else 2.0 for a, b in pairs])
    eye = np.array([1.0 if a == b else 0.0 for a, b in pairs])
    per = np.zeros((replicates, layers))
    for r, s in enumerate(np.random.SeedSequence(seed).spawn(replicates)):
        s_out, s_in = s.spawn(2)
        u = qmc.Sobol(d=layers * m, scramble=True, seed=np.random.default_rng(s_out)) \
            .random_base2(log2_outer)
        h = smi_weak.scores(stats.norm.ppf(u).reshape(-1, layers, m), skip=skip, beta=beta)
        x = np.random.default_rng(s_in).standard_normal((n, (layers - 1) * m))
        B, Mz = smi_weak.inner_moments(x, np.full(n, 1.0 / n), layers=layers, tokens=m, skip=skip,
                              beta=beta)
        hh_all = np.stack([h[:, a] * h[:, b] for a, b in pairs], 1)
        step = max(1, CHUNK // n)
        acc = np.zeros(layers)
        for s0 in range(0, h.shape[0], step):
            hh = hh_all[s0:s0 + step]
            E = -0.5 * (hh @ B.T)
            E = np.exp(E - E.max(1, keepdims=True))
            Cs = np.stack([smi_weak.node_covariances(E[:, j:j + block] @ Mz[j:j + block],
                                                     h[s0:s0 + step], layers=layers) - eye
                           for j in range(0, n, block)])              # (blocks, H, L, Q)
            nb = Cs.shape[0]
            U = ((Cs.sum(0) ** 2) @ fro - ((Cs**2) @ fro).sum(0)) / (nb * (nb - 1))
            acc += U.sum(0)
        per[r] = acc / h.shape[0]
    out = {f"lam{l + 1}": (float(v.mean()), standard_error(v)) for l, v in enumerate(per.T)}
    out["per"] = per
    return out


def tail_weighted_lambdas(*, layers: int, skip: float = 1.0, beta: float = 1.0,
                          scale: float = 1.6, log2_h: int = 12, replicates: int = 12,
                          seed: int = 0, log2_inner: int = 15, block: int = 4096) -> dict:
    """Tail-weighted route, M = 2 (docs/smi_depth.md, "Settled" and "L = 5, M = 2"): the true
    last row z_L is drawn from N(0, scale^2 I) and reweighted to the prior (weights <= scale^2),
    so the large-|h| tail that carries the free rows' lambdas is sampled more often than by
    plain Monte Carlo; per replicate 2^log2_inner iid prior samples of the free rows serve all
    2^log2_h h, and ||C_l(h) - I||^2 comes from the U-statistic over blocks of ``block`` (no
    variance bias; the ratio bias of halves of ``block``, :func:`montecarlo_inner_bias`).
    Returns ``"lam{l}"``: (mean, standard error over replicates) and ``"per"``: the
    (replicates, L) replicate values."""
    smi_weak.check(layers=layers, tokens=2, skip=skip, beta=beta)
    require(layers >= 2, "layers", ">= 2 (free rows to weight)", layers)
    require(np.isfinite(scale) and scale >= 1.0, "scale", ">= 1 (bounded weights)", scale)
    n = 1 << log2_inner
    require(isinstance(block, (int, np.integer)) and n % block == 0 and n // block >= 2,
            "block", "a divisor of 2^log2_inner, at most 2^(log2_inner-1)", block)
    require(isinstance(replicates, (int, np.integer)) and replicates >= 2, "replicates", ">= 2",
            replicates)
    fro, eye = np.array([1.0, 2.0, 1.0]), np.array([1.0, 0.0, 1.0])
    per = np.zeros((replicates, layers))
    for r, ss in enumerate(np.random.SeedSequence(seed).spawn(replicates)):
        rng = np.random.default_rng(ss)
        z = rng.standard_normal((1 << log2_h, layers, 2))
        z[:, -1] *= scale
        wz = scale**2 * np.exp(-0.5 * (z[:, -1] ** 2).sum(1) * (1 - scale**-2))
        h = smi_weak.scores(z, skip=skip, beta=beta)
        B, Mz = smi_weak.inner_moments(rng.standard_normal((n, 2 * (layers - 1))),
                                       np.full(n, 1.0 / n), layers=layers, tokens=2, skip=skip,
                                       beta=beta)
        hh = np.stack([h[:, 0] ** 2, h[:, 0] * h[:, 1], h[:, 1] ** 2], 1)
        for s0 in range(0, h.shape[0], 128):
            E = -0.5 * (hh[s0:s0 + 128] @ B.T)
            E = np.exp(E - E.max(1, keepdims=True))
            Cs = np.stack([smi_weak.node_covariances(E[:, j:j + block] @ Mz[j:j + block],
                                                     h[s0:s0 + 128], layers=layers) - eye
                           for j in range(0, n, block)])
            nb = Cs.shape[0]
            U = ((Cs.sum(0) ** 2) @ fro - ((Cs**2) @ fro).sum(0)) / (nb * (nb - 1))
            per[r] += wz[s0:s0 + 128] @ U
        per[r] /= h.shape[0]
    out = {f"lam{l + 1}": (float(v.mean()), standard_error(v)) for l, v in enumerate(per.T)}
    out["per"] = per
    return out


# ----------------------------------------------------------------------------- L = 2, Q = 0
def montecarlo_stability(*, skip=1.0, beta=1.0, samples=4000, inner=4000, seed=0,
                         box=None, control=True) -> dict:
    """Independent (seeded) Monte Carlo estimate of lambda_l = E_y ||Cov[z_l | y] - I||_F^2.

    Outer: ``z ~ N(0, I)``, ``h = A(z_1) z_2``.  Inner: self-normalised importance sampling over
    the fibre, weight ``N(z_1') N(A(z_1')^{-1} h) / det A(z_1') / q(z_1')``, with ``q`` the
    mixture ``1/2 N(0, I) + 1/2 [s ~ N(0, 1), d = g sinh(t), t ~ N(0, 2.5^2)]`` in
    ``s = (z0 + z1)/sqrt 2``, ``d = (z0 - z1)/sqrt 2``, ``g = min(sqrt(2 c / beta), 1)``: the second
    component puts samples where det A -> c (1 + c) (d ~ sqrt(c)), which prior samples miss at
    small skip.  The square is estimated from two independent inner halves, <C_a - I, C_b - I>_F,
    which removes the O(1/K) variance bias of ||C - I||^2 (only the O(1/K) ratio bias remains).
    ``control``: regress on ``||z_l z_l^T - I||_F^2 - 6`` (mean 0; O(1/samples) bias).
    ``box``: if given, the inner samples are drawn uniformly in [-box, box]^2 instead (the
    literature's truncated scheme; biased by the cut mass).  Returns Estimates (error =
    standard error over the outer samples)."""
    smi_fibre.check(2, 2, skip, beta)
    rng = np.random.default_rng(seed)
    z, h = teacher_q0(rng, samples, skip, beta)
    gam, sig_t = min(math.sqrt(2 * skip / beta), 1.0), 2.5
    vals = np.zeros((samples, 2))
    step = max(1, 2_000_000 // inner)
    for s0 in range(0, samples, step):
        sl = slice(s0, s0 + step)
        n = h[sl].shape[0]
        if box is None:
            y = rng.standard_normal((n, inner, 2))
            t = sig_t * rng.standard_normal((n, inner))
            sd = np.stack([y[..., 0], gam * np.sinh(t)], -1)
            comp = rng.random((n, inner)) < 0.5
            y = np.where(comp[..., None], y, (sd @ np.array([[1.0, 1.0], [1.0, -1.0]]))
                         / math.sqrt(2))
            ss, dd = (y[..., 0] + y[..., 1]) / math.sqrt(2), (y[..., 0] - y[..., 1]) / math.sqrt(2)
            ta = np.arcsinh(dd / gam)
            q = 0.5 * np.exp(-0.5 * (ss**2 + dd**2)) / (2 * math.pi) + 0.5 * (
                np.exp(-0.5 * ss**2 - 0.5 * (ta / sig_t) ** 2) / (2 * math.pi * sig_t)
                / (gam * np.cosh(ta)))
            logq = -0.5 * (y**2).sum(-1) - np.log(q)
        else:
            y = rng.uniform(-box, box, (n, inner, 2))
            logq = -0.5 * (y**2).sum(-1)
        Bi, det = attention_inverse(y[..., 0], y[..., 1], skip, beta)
        u, v = fibre_point(Bi, h[sl, None, 0], h[sl, None, 1])
        lw = -0.5 * (u**2 + v**2) - np.log(det) + logq
        w = np.exp(lw - lw.max(1, keepdims=True))
        half = inner // 2
        G = []
        for part in (slice(0, half), slice(half, 2 * half)):
            wp = w[:, part]
            Zp = wp.sum(1)
            m = lambda a, b, wp=wp, Zp=Zp: (wp * a * b).sum(1) / Zp  # noqa: E731
            y0, y1, up, vp = y[:, part, 0], y[:, part, 1], u[:, part], v[:, part]
            G.append((np.stack([m(y0, y0) - 1, m(y0, y1), m(y1, y1) - 1], 1),
                      np.stack([m(up, up) - 1, m(up, vp), m(vp, vp) - 1], 1)))
        fro = np.array([1.0, 2.0, 1.0])
        vals[sl, 0] = (G[0][0] * G[1][0]) @ fro
        vals[sl, 1] = (G[0][1] * G[1][1]) @ fro
    if control:
        r1, r2 = (z[:, :2] ** 2).sum(1), (z[:, 2:] ** 2).sum(1)
        cv = np.stack([r1**2 - 2 * r1 + 2 - 6.0, r2**2 - 2 * r2 + 2 - 6.0], 1)
        for k in range(2):
            X = cv[:, k] - cv[:, k].mean()
            vals[:, k] = vals[:, k] - cv[:, k] * (X @ (vals[:, k] - vals[:, k].mean())) / (X @ X)
    meth = (f"Monte Carlo, {samples} outer x {inner} inner samples, seed {seed}"
            + (f", inner box {box}" if box is not None else ", small-skip mixture proposal")
            + (", control variates" if control else ""))
    return {"lam1": mean_estimate(vals[:, 0], meth), "lam2": mean_estimate(vals[:, 1], meth)}


# ----------------------------------------------------------------------------- SE branches
def branch_names(layers: int) -> tuple:
    """Columns of :func:`branch_samples`: ``mu_l`` of each unlearned layer, ``K_L``, ``cross``,
    ``trcov_L``, ``nishimori``, the sequential residuals ``resid_l``, then ``K_l = E |g_l|^2`` of
    the free rows and ``K_lL = E g_l . g_L``."""
    rows = range(1, layers)
    return (*(f"mu{l}" for l in rows), f"K{layers}", "cross", f"trcov{layers}", "nishimori",
            *(f"resid{l}" for l in rows), *(f"K{l}" for l in rows),
            *(f"K{l}{layers}" for l in rows))


def _fibre_jacobian(z, h, layers: int, skip: float, beta: float, eps: float = 1e-5):
    """``J = d z_L / d (z_1 .. z_{L-1})`` (n, 2, 2 (L - 1)) along the fibre through ``h``, central
    differences of the symbolic fibre."""
    f = functions(layers)["fibre"]
    J = np.empty((z.shape[0], 2, z.shape[1]))
    for k in range(z.shape[1]):
        zp, zm = z.copy(), z.copy()
        zp[:, k] += eps
        zm[:, k] -= eps
        a = f(*zp.T, h[:, 0], h[:, 1], skip, beta)
        b = f(*zm.T, h[:, 0], h[:, 1], skip, beta)
        J[:, 0, k] = (np.asarray(a[0]) - np.asarray(b[0])) / (2 * eps)
        J[:, 1, k] = (np.asarray(a[1]) - np.asarray(b[1])) / (2 * eps)
    return J


def _halves(wt: np.ndarray, inner: int) -> list:
    """The normalised weights of the two independent halves of the inner sample (products of
    posterior moments from different halves have no variance bias) and their slices."""
    half = inner // 2
    return [(wt[:, p] / wt[:, p].sum(1, keepdims=True), p)
            for p in (slice(0, half), slice(half, 2 * half))]


def branch_samples(q: float, *, layers: int, skip: float, beta: float, samples: int,
                   inner: int, seed: int, free: tuple = ()) -> np.ndarray:
    """Per-outer-sample values of :func:`branch_names` at ``Q = diag(q_1, .., q_{L-1}, q)``
    (``free`` = the overlaps ``q_l`` of the free rows, default 0) after the control-variate
    adjustment (``samples`` x columns); see :func:`montecarlo_branch`.  The same ``seed`` draws
    the same standard normals at every ``q`` and every inner size (common random numbers:
    differences across ``q`` have a small variance)."""
    require(isinstance(layers, int) and layers >= 2, "layers", "an integer >= 2", layers)
    require(np.isfinite(q) and 0 < q < 1, f"q{layers}", "in (0, 1)", q)
    require(np.isfinite(skip) and skip > 0, "skip", "> 0", skip)
    require(np.isfinite(beta) and beta > 0, "beta", "> 0", beta)
    require(isinstance(samples, int) and samples >= 10, "samples", "an integer >= 10", samples)
    require(isinstance(inner, int) and inner >= 20, "inner", "an integer >= 20", inner)
    rows, d = layers - 1, 2 * (layers - 1)
    free = tuple(float(x) for x in free) or (0.0,) * rows
    require(len(free) == rows and all(0 <= x < 1 for x in free), "Q",
            f"{rows} free-row overlaps in [0, 1)", free)
    qz = np.repeat(free, 2)                                   # per free coordinate
    vz = 1.0 - qz
    f = functions(layers)["fibre"]
    # outer draws from their own stream, inner draws from another
    ro, ri = np.random.default_rng([seed, 0]), np.random.default_rng([seed, 1])
    Zt, Wt, Et = (ro.standard_normal((samples, k)) for k in (d, 2, 2))
    # omega_l = q_l z_l + sqrt(q_l V_l) xi_l for the free rows (drawn only when some q_l > 0)
    Xi = ro.standard_normal((samples, d)) if any(free) else np.zeros((samples, d))
    v = 1.0 - q
    vals = np.zeros((samples, len(branch_names(layers))))
    cvs = np.zeros((samples, rows + 1))
    flips = np.array([np.repeat(s, 2) for s in itertools.product((1, -1), repeat=rows)], float)
    pis = (0.2, 0.8 / len(flips))
    pairs = [(i, j) for l, m in itertools.combinations(range(rows), 2)
             for i in (2 * l, 2 * l + 1) for j in (2 * m, 2 * m + 1)]
    fro = np.array([1.0, 2.0, 1.0])
    step = max(1, 400_000 // inner)
    for s0 in range(0, samples, step):
        n = min(step, samples - s0)
        z, eta = Zt[s0:s0 + n], Et[s0:s0 + n]
        om = math.sqrt(q) * Wt[s0:s0 + n]
        omf = qz * z + np.sqrt(qz * vz) * Xi[s0:s0 + n]     # omega of the free rows
        (m00, m01), (m10, m11) = inverse_columns(list(z.T), layers, skip, beta)[0]
        Mi = np.stack([np.stack([m00, m01], -1), np.stack([m10, m11], -1)], -2)
        zL = om + math.sqrt(v) * eta
        h = np.linalg.solve(Mi, zL[..., None])[..., 0]
        J = _fibre_jacobian(z, h, layers, skip, beta)
        S = 2.0 * np.linalg.inv(np.diag(1.0 / vz) + np.einsum("nai,naj->nij", J, J) / v)
        S = 0.5 * (S + np.swapaxes(S, 1, 2))
        L = np.linalg.cholesky(S)
        Si = np.linalg.inv(S)
        logdetS = np.linalg.slogdet(S)[1]
        comp = ri.choice(1 + len(flips), size=(n, inner), p=(pis[0],) + (pis[1],) * len(flips))
        x = ri.standard_normal((n, inner, d))
        lx = np.einsum("nab,nkb->nka", L, x)
        fl = flips[np.maximum(comp - 1, 0)]                    # (n, inner, d)
        y = np.where((comp == 0)[..., None], omf[:, None, :] + np.sqrt(vz) * x,
                     fl * (z[:, None, :] + lx))
        lprior = -0.5 * ((y - omf[:, None, :]) ** 2 / vz).sum(-1)    # free rows' prior
        logq = [math.log(pis[0]) + lprior - 0.5 * np.log(vz).sum()]
        for fd in flips:
            e = fd * y - z[:, None, :]
            qf = np.einsum("nka,nab,nkb->nk", e, Si, e)
            logq.append(math.log(pis[1]) - 0.5 * qf - 0.5 * logdetS[:, None])
        logq = np.logaddexp.reduce(np.stack(logq), axis=0)
        u0, u1, jac = (np.asarray(t, float) for t in f(*(y[..., k] for k in range(d)),
                                                          h[:, None, 0], h[:, None, 1], skip,
                                                          beta))
        o0, o1 = om[:, None, 0], om[:, None, 1]
        base = lprior - ((u0**2 + u1**2) + (o0**2 + o1**2)) / (2 * v) + np.log(jac)
        xx = (u0 * o0 + u1 * o1) / v
        with np.errstate(under="ignore", over="ignore"):
            lp = np.logaddexp(base + xx, base - xx) - logq
            wt = np.exp(lp - lp.max(1, keepdims=True))
            th = np.tanh(xx)
        parts = []
        for wp, part in _halves(wt, inner):
            yy = y[:, part]
            mom = lambda t, wp=wp: (wp * t).sum(1)  # noqa: E731
            cs = [np.stack([mom(yy[..., 2 * l] ** 2) - 1, mom(yy[..., 2 * l] * yy[..., 2 * l + 1]),
                            mom(yy[..., 2 * l + 1] ** 2) - 1], 1) for l in range(rows)]
            cr = np.stack([mom(yy[..., i] * yy[..., j]) for i, j in pairs] or [0 * wp[:, 0]], 1)
            eL = np.stack([mom(th[:, part] * u0[:, part]), mom(th[:, part] * u1[:, part])], 1)
            gf = (np.stack([mom(yy[..., k]) for k in range(d)], 1) - omf) / vz
            parts.append((cs, cr, eL, mom(u0[:, part] ** 2 + u1[:, part] ** 2), gf))
        (ca, cra, ea, na, ga), (cb, crb, eb, nb, gb) = parts
        gLa, gLb = (ea - om) / v, (eb - om) / v
        sl = slice(s0, s0 + n)
        for l in range(rows):
            vals[sl, l] = (ca[l] * cb[l]) @ fro
            r2 = (z[:, 2 * l:2 * l + 2] ** 2).sum(1)
            cvs[sl, l] = r2**2 - 2 * r2 + 2 - 6.0            # ||z_l z_l^T - I||_F^2 - E[.]
        vals[sl, rows] = (gLa * gLb).sum(1)
        for l in range(rows):
            a, b = ga[:, 2 * l:2 * l + 2], gb[:, 2 * l:2 * l + 2]
            vals[sl, 2 * rows + 4 + l] = (a * b).sum(1)
            vals[sl, 3 * rows + 4 + l] = 0.5 * ((a * gLb).sum(1) + (b * gLa).sum(1))
        vals[sl, rows + 1] = (cra * crb).sum(1)
        vals[sl, rows + 2] = 0.5 * (na + nb) - (ea * eb).sum(1)
        cvs[sl, rows] = ((eta**2).sum(1) - 2.0) / v           # |z_L - omega_L|^2 / V^2 - E[.]
    vals[:, rows + 3] = vals[:, rows] - (2.0 - vals[:, rows + 2] / v) / v
    for l in range(rows):
        vals[:, rows + 4 + l] = vals[:, l] - (1 - q) * vals[:, rows] / q
    # control variates (regression coefficients from the same samples: O(1/samples) bias)
    X = cvs - cvs.mean(0)
    coef, *_ = np.linalg.lstsq(X, vals - vals.mean(0), rcond=None)
    return vals - cvs @ coef


def montecarlo_branch(q, *, layers: int = 2, skip=1.0, beta=1.0, samples=20000, inner=1000,
                      seed=0) -> dict:
    """Seeded Monte Carlo on the last layer's SE branch ``Q = diag(0, .., 0, q)`` (THEORY 2.2),
    at any depth L, independent of every quadrature rule.

    Outer: teacher free rows ``z_1 .. z_{L-1}`` and ``eta ~ N(0, I)``, ``omega_L ~ N(0, q I)``,
    ``h = M (omega_L + sqrt(V) eta)``.  Inner: self-normalised importance sampling over the free
    rows with the mixture 0.2 N(0, I) + 0.8 spread over the ``2^(L-1)`` row-wise sign flips of
    N(teacher, 2 (I + J^T J / V)^{-1}) (``J`` the fibre Jacobian at the teacher, by central
    differences).  Squares of posterior moments come from two independent halves (only the
    O(1/inner) ratio bias remains); control variates with known means reduce the variance.
    Returns Estimates (error = standard error) for :func:`branch_names`: ``mu_l = E ||Cov[z_l |
    y, omega_L] - I||_F^2``, ``K_L = E sum_m g_Lm^2``, ``cross`` (``E ||E[z_l z_m^T | .]||_F^2``,
    zero by the sign symmetries), ``trcov_L``, the Nishimori residual and ``resid_l = mu_l - (1 -
    q) K_L / q`` (``resid`` too at L = 2)."""
    adj = branch_samples(q, layers=layers, skip=skip, beta=beta, samples=samples, inner=inner,
                         seed=seed)
    meth = (f"Monte Carlo, {samples} outer x {inner} inner (prior + sign-flipped Laplace "
            f"components, control variates), seed {seed}")
    out = {k: mean_estimate(adj[:, i], meth) for i, k in enumerate(branch_names(layers))}
    if layers == 2:
        out["resid"] = out["resid1"]
    return out


def montecarlo_stats(q1: float, q2: float, *, skip: float = 1.0, beta: float = 1.0,
                     samples: int = 4000, inner: int = 1000, seed: int = 0) -> dict:
    """Seeded Monte Carlo of ``K1, K2, K12`` at ``Q = diag(q1, q2)`` (L = 2), independent of the
    quadrature and of every symmetry reduction (so ``K12`` is a real test of ``Q_12 = 0``):
    :func:`branch_samples` with the free row's overlap ``q1`` (teacher ``omega_1 = q1 z_1 +
    sqrt(q1 V1) xi``, inner prior ``N(omega_1, V1 I)``).  Returns Estimates (error = standard
    error over the outer samples)."""
    smi_fibre.check(2, 2, skip, beta)
    require(0 <= q1 < 1 and 0 < q2 < 1, "Q", "diag(q1, q2) with q1 in [0, 1), q2 in (0, 1)",
            (q1, q2))
    adj = branch_samples(q2, layers=2, skip=skip, beta=beta, samples=samples, inner=inner,
                         seed=seed, free=(q1,))
    names = branch_names(2)
    meth = f"Monte Carlo, {samples} outer x {inner} inner (mixture proposal), seed {seed}"
    return {k: mean_estimate(adj[:, names.index(k)], meth) for k in ("K1", "K2", "K12")}


def _fit_root(qs, R, Mu, deg: int, strict: bool = True):
    """Root of the polynomial fit (degree ``deg``, in ``x = q - mean``) of ``R`` over ``qs``
    nearest their centre, and ``1 / mu`` there from the same fit of ``Mu``.  ``strict``: the
    root must lie within the points (else :class:`ConvergenceError`); otherwise the linear fit's
    root stands in when the quadratic has no real root (jackknife replicates)."""
    x0 = float(np.mean(qs))
    x = np.asarray(qs) - x0
    cr, cm = np.polyfit(x, R, deg), np.polyfit(x, Mu, deg)
    roots = [z.real for z in np.roots(cr) if abs(z.imag) < 1e-12]
    if strict:
        roots = [z for z in roots if x[0] - 1e-9 <= z <= x[-1] + 1e-9]
        if not roots:
            raise ConvergenceError("no root of the fitted residual within the refinement points",
                                   last_iterate=list(qs), residual=list(R))
    if not roots:
        return _fit_root(qs, R, Mu, 1, strict=False)
    xr = min(roots, key=lambda z: abs(z))
    return x0 + xr, 1.0 / float(np.polyval(cm, xr))


MC_SEQ_SCAN = (0.9, 0.95, 0.97, 0.98, 0.985, 0.99, 0.993, 0.996)


def montecarlo_sequential_thresholds(*, layers: int = 3, skip: float = 1.0, beta: float = 1.0,
                                     samples: int = 6000, inner: int = 1500, seed: int = 0,
                                     scan_samples: int = 2000, scan=MC_SEQ_SCAN,
                                     groups: int = 20, progress=None) -> list[dict]:
    """Seeded Monte Carlo oracle of the sequential thresholds of layers ``1 .. L-1`` on the
    last layer's SE branch (THEORY 2.2), independent of the lattice driver
    :func:`aim_sym.numerics.smi_sequential.sequential_thresholds`: root ``q*`` of ``r_l = mu_l -
    (1 - q) K_L / q`` (:func:`branch_samples`), ``alpha_seq,l = 1 / mu_l(q*)``.

    A scan of ``scan`` with ``scan_samples`` outer draws brackets each sign change; four points
    spanning the bracket (widened by half its width on each side, moved by their spacing at most
    3 times until the refined residual changes sign) are evaluated with ``samples`` x ``inner``
    draws and common random numbers; ``r_l`` and ``mu_l`` are fitted by quadratics.  Error =
    delete-a-group jackknife SE over ``groups`` groups of outer draws + ``|alpha(inner) -
    alpha(inner / 2)|`` (ratio bias) + ``|quadratic - linear fit|``.  Returns records ``layer,
    kind="sequential", value, error, q{L}, q{L}_error, nishimori, slope_r, first, method``."""
    require(isinstance(samples, int) and samples >= 20 * groups, "samples",
            f">= 20 x groups = {20 * groups}", samples)
    require(isinstance(groups, int) and groups >= 5, "groups", "an integer >= 5", groups)
    require(len(scan) >= 2 and all(0 < q < 1 for q in scan) and list(scan) == sorted(scan),
            "scan", "increasing values in (0, 1)", scan)
    names = branch_names(layers)
    free = range(1, layers)
    col_r = {l: names.index(f"resid{l}") for l in free}
    col_k, col_n = names.index(f"K{layers}"), names.index("nishimori")
    t0, c0 = time.perf_counter(), time.process_time()
    tick = progress or (lambda *a: None)
    draw = functools.partial(branch_samples, layers=layers, skip=skip, beta=beta)
    rs = []
    for i, q in enumerate(scan):
        adj = draw(q, samples=scan_samples, inner=inner, seed=seed + 7919)
        rs.append([adj[:, col_r[l]].mean() for l in free])
        tick(i + 1, len(scan), f"sequential (Monte Carlo): scan q = {q}")
    rs = np.array(rs)
    brackets = {}
    for l in free:
        r = rs[:, l - 1]
        idx = [i for i in range(len(scan) - 1) if r[i] < 0 <= r[i + 1]]
        if not idx:
            raise ConvergenceError(f"sequential threshold of layer {l} not bracketed in q",
                                   last_iterate=list(scan), residual=list(r))
        qa, qb = scan[idx[0]], scan[idx[0] + 1]
        w = qb - qa
        brackets[l] = [qa - 0.5 * w + 2 * w * k / 3 for k in range(4)]
    vals, half = {}, {}

    def ensure(q):
        q = round(q, 12)
        require(0 < q < 1, "scan", "brackets whose refinement points stay in (0, 1)", q)
        if q not in vals:
            vals[q], half[q] = (draw(q, samples=samples, inner=k, seed=seed)
                                for k in (inner, max(20, inner // 2)))
            tick(len(vals), 4 * len(free), f"sequential (Monte Carlo): q = {q:.5f}")
        return q

    for l in free:
        qs = [ensure(q) for q in brackets[l]]
        dq = qs[1] - qs[0]
        for _ in range(3):
            r = [vals[q][:, col_r[l]].mean() for q in qs]
            if min(r) < 0 <= max(r):
                break
            qs = [ensure(q) for q in (qs[1:] + [qs[-1] + dq] if max(r) < 0
                                      else [qs[0] - dq] + qs[:-1])]
        brackets[l] = qs
    gid = np.arange(samples) * groups // samples
    out = []
    for l in free:
        qs = brackets[l]

        def est(data, mask=None, deg=2, qs=qs, l=l):
            sel = slice(None) if mask is None else mask
            R = [data[q][sel, col_r[l]].mean() for q in qs]
            Mu = [data[q][sel, l - 1].mean() for q in qs]
            return _fit_root(qs, R, Mu, deg, strict=mask is None and deg == 2)

        q_star, a = est(vals)
        jk = np.array([est(vals, gid != g) for g in range(groups)])
        se = np.sqrt((groups - 1) / groups * ((jk - jk.mean(0)) ** 2).sum(0))
        q_h, a_h = est(half)
        q_l, a_l = est(vals, deg=1)
        slope = float(np.polyfit(qs, [vals[q][:, col_r[l]].mean() for q in qs], 1)[0])
        near = vals[min(qs, key=lambda q: abs(q - q_star))]
        K = near[:, col_k].mean()
        out.append(dict(
            layer=l, kind="sequential", value=float(a),
            error=float(se[1] + abs(a - a_h) + abs(a - a_l)), **{
                f"q{layers}": float(q_star),
                f"q{layers}_error": float(se[0] + abs(q_star - q_h) + abs(q_star - q_l))},
            stat_error=float(se[1]), bias=float(abs(a - a_h)), interpolation=float(abs(a - a_l)),
            nishimori=(float(near[:, col_n].mean() / K), standard_error(near[:, col_n]) / K),
            slope_r=slope, points=[float(q) for q in qs], seconds=time.perf_counter() - t0,
            cpu_seconds=time.process_time() - c0,
            method=(f"root in q of mu_{l} - (1-q) K{layers}/q on the layer-{layers} SE branch; "
                    f"seeded Monte Carlo {samples} outer x {inner} inner at 4 points with "
                    f"common random numbers, quadratic fit; error = jackknife SE ({groups} groups)"
                    f" + |inner - inner/2| + |quadratic - linear|")))
    first = min(out, key=lambda d: d["value"])
    for d in out:
        d["first"] = d is first
    return out


# ----------------------------------------------------------------------------- state evolution
def se_montecarlo(*, alpha, skip=1.0, beta=1.0, samples=2000, iters=40, init=(0.02, 0.02),
                  order=24, seed=0, a_update="gg", progress=None) -> dict:
    """State evolution of THEORY 2.1 with the expectation over (omega, y) by Monte Carlo (common
    random numbers across iterations) and g_out by the same fibre quadrature as GAMP:
    omega_m = Q^{1/2} xi_m, z_m = omega_m + (I - Q)^{1/2} eta_m, Q_hat = alpha E[sum_m g g^T]
    (``a_update="dg"``: alpha E[-sum_m dg]), Q = Q_hat (I + Q_hat)^{-1}, full 2 x 2 Q.
    Unlike :func:`aim_sym.numerics.smi.fixed_point` it is not restricted to the branch
    Q = diag(0, q2), so it gives the SE prediction above the sequential threshold (layer 1
    learned). Error bar: the standard error of Q_hat over the samples, propagated to Q (diagonal
    only), at the last iterate. Returns Q (2 x 2), Q_diag, Q_err, history."""
    rng = np.random.default_rng(seed)
    xi = rng.standard_normal((samples, 2, 2))
    eta = rng.standard_normal((samples, 2, 2))
    Q = np.diag(np.asarray(init, float))
    hist = []
    for it in range(iters):
        w, U = np.linalg.eigh(Q)
        sq = U @ np.diag(np.sqrt(np.clip(w, 0, None))) @ U.T
        w2, U2 = np.linalg.eigh(np.eye(2) - Q)
        sv = U2 @ np.diag(np.sqrt(np.clip(w2, 0, None))) @ U2.T
        omega = np.einsum("pq,nqm->npm", sq, xi)
        z = omega + np.einsum("pq,nqm->npm", sv, eta)
        h, _ = forward(z, skip=skip, beta=beta)
        V = np.eye(2) - Q
        g, dg, _ = gout(h, omega, V, skip=skip, beta=beta, order=order)
        if a_update == "gg":
            terms = np.einsum("npm,nqm->npq", g, g)
        else:
            terms = -dg.sum(1)
        Qh = alpha * terms.mean(0)
        Qh = 0.5 * (Qh + Qh.T)
        Q = Qh @ np.linalg.inv(np.eye(2) + Qh)
        Q = 0.5 * (Q + Q.T)
        dqh = alpha * standard_error(terms, axis=0)[[0, 1], [0, 1]]
        qerr = dqh / (1 + np.diag(Qh)) ** 2
        hist.append(dict(iter=it + 1, Q=Q.tolist(), Q_hat=Qh.tolist(), Q_err=qerr.tolist()))
        if progress:
            progress(it + 1, iters, f"Q = ({Q[0, 0]:.4f}, {Q[1, 1]:.4f})")
    return dict(alpha=float(alpha), Q=Q.tolist(), Q_diag=[float(Q[0, 0]), float(Q[1, 1])],
                Q_err=hist[-1]["Q_err"], history=hist,
                settings=dict(samples=samples, iters=iters, init=list(init), order=order,
                              seed=seed, a_update=a_update, skip=skip, beta=beta))
