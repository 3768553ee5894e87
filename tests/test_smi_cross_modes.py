"""The off-diagonal stability directions on the SMI branches (docs/smi_cascade.md, "Off-diagonal
directions"): at L = 2 on the last layer's branch Q = diag(0, q), seeded Monte Carlo written here
from THEORY 2.1-2.2 (independent of the kernels), of

    mu_1 = E ||C_1 - I||^2,   nu = E <C_1 - I, C_2 - V I> / V,   lam_22 = alpha E ||C_2 - V I||^2 / V^2,

C_l = Cov[z_l | y, omega_2] (the 2 x 2 token covariance of row l), V = 1 - q.  The Jacobian of
the P x P SE at a Nishimori point is M -> alpha V E[dg M dg^T] V (dg = d g / d omega = V^-1 (Cov
- V) V^-1); its eigenvalue in the cross direction Q_12 is alpha nu, bounded by Cauchy-Schwarz by
sqrt(alpha mu_1 lam_22) (lam_22: the branch's own slope, < 1 where it is stable)."""

import math

import numpy as np
import pytest


def _attention(z: np.ndarray, skip: float, beta: float) -> np.ndarray:
    S = beta * z[..., :, None] * z[..., None, :]
    S = np.exp(S - S.max(-1, keepdims=True))
    return S / S.sum(-1, keepdims=True) + skip * np.eye(2)


def branch_moments(q: float, *, skip: float = 1.0, beta: float = 1.0, teachers: int = 1000,
                   inner: int = 2048, seed: int = 0) -> np.ndarray:
    """Per-teacher columns (mu_1, nu, lam_22 / alpha, K_2 = |g_2|^2) at L = 2, M = 2 on
    Q = diag(0, q): teacher (z_1, z_2) ~ N(0, I), omega_2 = q z_2 + sqrt(q V) xi; inner: the free
    row from its prior, z_2 = +-A(z_1)^-1 h with weight N(z_2; omega_2, V I) / |det A(z_1)|;
    squares from two independent halves of the inner sample (no variance bias)."""
    rng = np.random.default_rng(seed)
    v = 1.0 - q
    z1, z2, xi = (rng.standard_normal((teachers, 2)) for _ in range(3))
    om = q * z2 + math.sqrt(q * v) * xi
    h = np.einsum("nab,nb->na", _attention(z1, skip, beta), z2)
    cols, block = [], 50
    for t0 in range(0, teachers, block):
        sl = slice(t0, t0 + block)
        n = len(om[sl])
        x = rng.standard_normal((n, inner, 2))
        A = _attention(x, skip, beta)
        u = np.einsum("nkab,nb->nka", np.linalg.inv(A), h[sl])
        o = om[sl][:, None, :]
        xx = (u * o).sum(-1) / v
        lw = (-((u**2).sum(-1) + (o**2).sum(-1)) / (2 * v) - np.log(np.abs(np.linalg.det(A)))
              + np.logaddexp(xx, -xx))
        w = np.exp(lw - lw.max(1, keepdims=True))
        halves = []
        for p in (slice(0, inner // 2), slice(inner // 2, inner)):
            wp = w[:, p] / w[:, p].sum(1, keepdims=True)
            c1 = np.einsum("nk,nka,nkb->nab", wp, x[:, p], x[:, p]) - np.eye(2)
            m2 = np.einsum("nk,nk,nka->na", wp, np.tanh(xx[:, p]), u[:, p])
            c2 = (np.einsum("nk,nka,nkb->nab", wp, u[:, p], u[:, p])
                  - m2[:, :, None] * m2[:, None, :] - v * np.eye(2))
            halves.append((c1, c2, (m2 - om[sl]) / v))
        (a1, a2, ga), (b1, b2, gb) = halves

        def dot(P, Q):
            return (P * Q).sum((1, 2))
        cols.append(np.stack([dot(a1, b1), 0.5 * (dot(a1, b2) + dot(b1, a2)) / v,
                              dot(a2, b2) / v**2, (ga * gb).sum(1)], 1))
    return np.concatenate(cols)


def _mean(d):
    return d.mean(0), d.std(0, ddof=1) / math.sqrt(len(d))


def test_cross_mode_is_far_below_the_diagonal_mode_near_the_sequential_threshold():
    q = 0.95                                   # the branch at alpha ~ 0.65 (alpha_seq = 0.7196)
    m, e = _mean(branch_moments(q, teachers=800, inner=2048, seed=3))
    alpha = q / ((1 - q) * m[3])
    mu1, nu, lam22 = alpha * m[0], alpha * m[1], alpha * m[2]
    assert 0.5 < alpha < 0.8
    assert 0.45 < mu1 < 0.85                   # the diagonal mode approaching 1
    assert lam22 < 1.0                         # the branch is stable along itself (0.87)
    # the cross direction Q_12: |alpha nu| <= sqrt(alpha mu_1 lam_22) < 1 (Cauchy-Schwarz)
    assert abs(nu) < math.sqrt(mu1 * lam22) and abs(nu) + 3.5 * alpha * e[1] < 0.15


@pytest.mark.slow
def test_branch_slope_is_the_jacobian_formula():
    """lam_22 / alpha = E ||C_2 - V I||^2 / V^2 is V^2 dK_2/dq (the slope of the branch map
    q -> alpha K / (1 + alpha K)), by central differences with common random numbers."""
    q, dq = 0.9, 0.01
    kp, km = (branch_moments(x, teachers=3000, inner=4096, seed=5)[:, 3] for x in (q + dq, q - dq))
    fd, fd_e = _mean((kp - km) / (2 * dq))
    m, e = _mean(branch_moments(q, teachers=3000, inner=4096, seed=6))
    v = 1 - q
    direct, direct_e = m[2] / v**2, e[2] / v**2
    assert abs(fd - direct) < 3.5 * math.hypot(fd_e, direct_e)
    assert fd_e < 0.05 * fd
