"""Seeded Monte Carlo oracles of the L = 2 SMI engine (deep tied attention, THEORY 2.1-2.3):
routes independent of every quadrature rule, used by the tests, the identity checks and the
benchmarks, never as an engine.

* :func:`montecarlo_stability`: the weak-threshold coefficients lambda_l at ``Q = 0``;
* :func:`cross_block_montecarlo`: the cross block of F at ``Q = 0`` (zero by symmetry);
* :func:`montecarlo_branch` (``Q = diag(0, q2)``: mu1, K2) and :func:`montecarlo_stats`
  (``Q = diag(q1, q2)``: K1, K2, K12) share one importance sampler over the fibre,
  :func:`fibre_importance` (prior + Laplace mixture at the true z_1, both signs of h).

Every fibre point is :func:`aim_sym.numerics.smi_fibre.fibre_point`.
"""

from __future__ import annotations

import math

import numpy as np

from .records import Estimate, mean_estimate, require
from .smi_fibre import attention_inverse, attention_matrix, check, fibre_point, laplace_proposal

MIX = (0.3, 0.35, 0.35)     # proposal weights: prior, Laplace at +z_1, Laplace at -z_1


def _teacher_q0(rng, samples: int, skip: float, beta: float):
    """Teachers at ``Q = 0``: ``z ~ N(0, I_4)`` (z_1 = z[:, :2], z_2 = z[:, 2:]) and
    ``h = A(z_1) z_2`` (THEORY 2.3)."""
    z = rng.standard_normal((samples, 4))
    return z, np.einsum("nab,nb->na", attention_matrix(z[:, 0], z[:, 1], skip, beta), z[:, 2:])


def _halves(wt: np.ndarray, inner: int) -> list:
    """The normalised weights of the two independent halves of the inner sample (products of
    posterior moments from different halves have no variance bias) and their slices."""
    half = inner // 2
    return [(wt[:, p] / wt[:, p].sum(1, keepdims=True), p)
            for p in (slice(0, half), slice(half, 2 * half))]


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
    check(2, 2, skip, beta)
    rng = np.random.default_rng(seed)
    z, h = _teacher_q0(rng, samples, skip, beta)
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


def cross_block_montecarlo(*, skip=1.0, beta=1.0, samples=400, inner=2000, seed=11) -> Estimate:
    """Seeded Monte Carlo of the cross block of F at Q = 0, E_y ||Cov[z_1, z_2 | y]||_F^2
    (zero by the sign symmetry z_2 -> -z_2).  The fibre is sampled without using the symmetry:
    ``z_1' ~ N(0, I)``, a random sign ``s``, ``z_2' = A(z_1')^{-1} s h`` (self-normalised
    weights); the square is estimated from two independent halves (unbiased in the inner noise)."""
    rng = np.random.default_rng(seed)
    z, h = _teacher_q0(rng, samples, skip, beta)
    y = rng.standard_normal((samples, inner, 2))
    sg = rng.choice([-1.0, 1.0], size=(samples, inner))
    Bi, det = attention_inverse(y[..., 0], y[..., 1], skip, beta)
    u, v = (sg * t for t in fibre_point(Bi, h[:, None, 0], h[:, None, 1]))
    lw = -0.5 * (u**2 + v**2) - np.log(det)
    w = np.exp(lw - lw.max(1, keepdims=True))
    half = inner // 2
    C = []
    for part in (slice(0, half), slice(half, 2 * half)):
        wp = w[:, part] / w[:, part].sum(1, keepdims=True)
        C.append(np.stack([(wp * y[:, part, a] * t[:, part]).sum(1)
                           for a in range(2) for t in (u, v)], 1))
    vals = (C[0] * C[1]).sum(1)
    return mean_estimate(vals, f"Monte Carlo {samples} x {inner}, seed {seed}")


def fibre_importance(rng, z, h, om1, v1: float, om2, v2: float, inner: int, skip: float,
                     beta: float, pis=MIX):
    """Self-normalised importance sampling over the fibre of ``h`` (THEORY 2.3) at
    ``Q = diag(q1, q2)`` for outer points ``z`` (true z_1), ``h``, ``omega_1 = om1``,
    ``omega_2 = om2`` (arrays (n, 2)): ``inner`` draws of ``z_1'`` per point from
    ``pis[0] N(omega_1, V1 I) + pis[1] N(+z_1, 2 P^-1) + pis[2] N(-z_1, 2 P^-1)``
    (``P = I / V1 + J^T J / V2`` at the true z_1, :func:`aim_sym.numerics.smi_fibre.laplace_proposal`);
    both signs of ``h`` are summed at every draw.  Returns the draws ``y`` (n, inner, 2), the
    fibre points ``(u, w) = A(y)^{-1} h``, ``th = tanh(omega_2^T A(y)^{-1} h / V2)`` (the sign
    average) and the unnormalised weights ``wt`` (row maximum 1)."""
    n = z.shape[0]
    S, L = laplace_proposal(z, h, v1, v2, skip, beta)
    comp = rng.choice(3, size=(n, inner), p=pis)
    x = rng.standard_normal((n, inner, 2))
    lx = np.einsum("nab,nkb->nka", L, x)
    sg = np.where(comp == 1, 1.0, -1.0)[..., None]
    y = np.where((comp == 0)[..., None], om1[:, None, :] + math.sqrt(v1) * x,
                 sg * z[:, None, :] + lx)
    Si = np.linalg.inv(S)
    ldet = np.log(np.linalg.det(S))[:, None]
    lq = [math.log(pis[0]) - ((y - om1[:, None, :]) ** 2).sum(-1) / (2 * v1)
          - math.log(2 * math.pi * v1)]
    for sgn, pk in ((1.0, pis[1]), (-1.0, pis[2])):
        d = y - sgn * z[:, None, :]
        lq.append(math.log(pk) - 0.5 * np.einsum("nka,nab,nkb->nk", d, Si, d)
                  - 0.5 * ldet - math.log(2 * math.pi))
    lq = np.logaddexp.reduce(np.stack(lq), axis=0)
    Bi, det = attention_inverse(y[..., 0], y[..., 1], skip, beta)
    u, w = fibre_point(Bi, h[:, None, 0], h[:, None, 1])
    o0, o1 = om2[:, None, 0], om2[:, None, 1]
    base = (-((y - om1[:, None, :]) ** 2).sum(-1) / (2 * v1)
            - ((u**2 + w**2) + (o0**2 + o1**2)) / (2 * v2) - np.log(det) - lq)
    xx = (u * o0 + w * o1) / v2
    with np.errstate(under="ignore", over="ignore"):
        lp = np.logaddexp(base + xx, base - xx)
        wt = np.exp(lp - lp.max(1, keepdims=True))
        th = np.tanh(xx)                                   # sum_s s e^{s x} / sum_s e^{s x}
    return y, u, w, th, wt


def montecarlo_branch(q2, *, skip=1.0, beta=1.0, samples=20000, inner=1000, seed=0) -> dict:
    """Seeded Monte Carlo of ``mu1 = E ||Cov[z_1 | y, omega_2] - I||_F^2`` and
    ``K2 = E sum_m g_2m^2`` at ``Q = diag(0, q2)``: a route independent of the quadrature.

    Outer: ``z_1, eta ~ N(0, I)``, ``omega_2 ~ N(0, q2 I)``, ``h = A(z_1)(omega_2 + sqrt(V) eta)``.
    Inner: :func:`fibre_importance` (``omega_1 = 0``, ``V1 = 1``); squares of posterior moments
    are estimated from two independent halves, so the only bias is the O(1/inner) ratio bias.
    Returns Estimates (error = standard error over the outer samples) for ``mu1``, ``K2`` and
    the sequential residual ``r = mu1 - (1 - q2) K2 / q2``."""
    check(2, 2, skip, beta)
    require(0 < q2 < 1, "q2", "in (0, 1)", q2)
    rng = np.random.default_rng(seed)
    v2 = 1.0 - q2
    vals = np.zeros((samples, 3))
    cvs = np.zeros((samples, 2))      # control variates with known mean 0
    step = max(1, 2_000_000 // inner)
    for s0 in range(0, samples, step):
        n = min(step, samples - s0)
        z = rng.standard_normal((n, 2))
        om = math.sqrt(q2) * rng.standard_normal((n, 2))
        eta = rng.standard_normal((n, 2))
        A = attention_matrix(z[:, 0], z[:, 1], skip, beta)
        h = np.einsum("nab,nb->na", A, om + math.sqrt(v2) * eta)
        y, u, w, th, wt = fibre_importance(rng, z, h, np.zeros((n, 2)), 1.0, om, v2, inner,
                                           skip, beta)
        G, M = [], []
        for wp, part in _halves(wt, inner):
            y0, y1 = y[:, part, 0], y[:, part, 1]
            G.append(np.stack([(wp * y0 * y0).sum(1) - 1, (wp * y0 * y1).sum(1),
                               (wp * y1 * y1).sum(1) - 1], 1))
            M.append(np.stack([(wp * th[:, part] * u[:, part]).sum(1) - om[:, 0],
                               (wp * th[:, part] * w[:, part]).sum(1) - om[:, 1]], 1) / v2)
        sl = slice(s0, s0 + n)
        r2 = (z**2).sum(1)
        cvs[sl, 0] = r2**2 - 2 * r2 + 2 - 6.0          # ||z_1 z_1^T - I||_F^2 - E[.]
        cvs[sl, 1] = ((eta**2).sum(1) - 2.0) / v2       # |z_2 - omega_2|^2 / V^2 - E[.]
        vals[sl, 0] = (G[0] * G[1]) @ np.array([1.0, 2.0, 1.0])
        vals[sl, 1] = (M[0] * M[1]).sum(1)
    vals[:, 2] = vals[:, 0] - (1 - q2) * vals[:, 1] / q2
    # control variates (regression coefficients from the same samples: O(1/samples) bias)
    X = cvs - cvs.mean(0)
    coef, *_ = np.linalg.lstsq(X, vals - vals.mean(0), rcond=None)
    adj = vals - cvs @ coef
    meth = (f"Monte Carlo, {samples} outer x {inner} inner (mixture proposal, control variates "
            f"||z z^T - I||^2 and |eta|^2), seed {seed}")
    return {k: mean_estimate(adj[:, i], meth) for i, k in enumerate(("mu1", "K2", "resid"))}


def montecarlo_stats(q1: float, q2: float, *, skip: float = 1.0, beta: float = 1.0,
                     samples: int = 4000, inner: int = 1000, seed: int = 0) -> dict:
    """Seeded Monte Carlo of ``K1, K2, K12`` at ``Q = diag(q1, q2)``, independent of the
    quadrature and of every symmetry reduction (so ``K12`` is a real test of ``Q_12 = 0``).

    Outer: ``z_1, xi, eta ~ N(0, I)``, ``omega_1 = q1 z_1 + sqrt(q1 V1) xi``,
    ``omega_2 ~ N(0, q2 I)``, ``z_2 = omega_2 + sqrt(V2) eta``, ``h = A(z_1) z_2``.  Inner:
    :func:`fibre_importance`.  Products of posterior means come from two independent inner
    halves (no variance bias).  Returns Estimates (error = standard error over outer samples)."""
    check(2, 2, skip, beta)
    require(0 <= q1 < 1 and 0 <= q2 < 1, "Q", "diag(q1, q2) with q1, q2 in [0, 1)", (q1, q2))
    rng = np.random.default_rng(seed)
    v1, v2 = 1.0 - q1, 1.0 - q2
    vals = np.zeros((samples, 3))
    step = max(1, 1_000_000 // inner)
    for s0 in range(0, samples, step):
        n = min(step, samples - s0)
        z = rng.standard_normal((n, 2))
        om1 = q1 * z + math.sqrt(q1 * v1) * rng.standard_normal((n, 2))
        om2 = math.sqrt(q2) * rng.standard_normal((n, 2))
        A = attention_matrix(z[:, 0], z[:, 1], skip, beta)
        h = np.einsum("nab,nb->na", A, om2 + math.sqrt(v2) * rng.standard_normal((n, 2)))
        y, u, w, th, wt = fibre_importance(rng, z, h, om1, v1, om2, v2, inner, skip, beta)
        G = []
        for wp, part in _halves(wt, inner):
            g1 = (np.einsum("nk,nka->na", wp, y[:, part]) - om1) / v1
            g2 = (np.stack([(wp * th[:, part] * u[:, part]).sum(1),
                            (wp * th[:, part] * w[:, part]).sum(1)], 1) - om2) / v2
            G.append((g1, g2))
        sl = slice(s0, s0 + n)
        vals[sl, 0] = (G[0][0] * G[1][0]).sum(1)
        vals[sl, 1] = (G[0][1] * G[1][1]).sum(1)
        vals[sl, 2] = 0.5 * ((G[0][0] * G[1][1]).sum(1) + (G[1][0] * G[0][1]).sum(1))
    meth = f"Monte Carlo, {samples} outer x {inner} inner (mixture proposal), seed {seed}"
    return {k: mean_estimate(vals[:, i], meth) for i, k in enumerate(("K1", "K2", "K12"))}
