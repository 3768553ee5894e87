"""Stationarity of the noisy two-layer AIM's Psi_out in the neglected cross-overlap q'_12:
d Psi_out / d q'_12 = E[g_1 . g_2] (the relation behind delta Phi = q_hat_12 q'_12 / 4 in the
cross-overlap term of the noisy engine; docs/deep_aim.md section 5, "Output noise at finite
width"; THEORY 1.1 and 1.6).

The engine's own central difference (points drawn means first, deep_aim_noisy._cross_sums) moves
the observation o with q'_12 and is too noisy to test this (0.037 +- 0.10 against 0.013). Here the
points are drawn truths first: the truths (x, xi) and the output noise, hence o, are common to
every q'_12 (the truths' law does not depend on it), and only the means (a, b) and the prior of
the deviations move. At the alpha = 0.1 shared-token fixed point this gives a standard error of
0.0009 at 2^14 x 8 points (0.0026 at 2^12 x 8)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from aim_sym.numerics import deep_aim_noisy as dn
from aim_sym.numerics import deep_aim_se as ds

#: the Delta = 0.1, alpha = 0.1, rho = (0.5, 0.5), c = 1 shared-token fixed point of
#: docs/deep_aim.md section 5 ("Output noise", seed 0: mmse = (0.95889, 0.80039)), rounded
Q1, Q2, DELTA = 0.54111, 0.69961, 0.1
MODEL = ds.DeepAimSE(skip=1.0, rho1=0.5, rho2=0.5)


def psi_out_truths_first(model: ds.DeepAimSE, *, q1: float, q2: float, q12s: list[float],
                         delta: float, m: int, scrambles: int, seed: int,
                         sizes: tuple[int, ...], chunk: int = 64) -> np.ndarray:
    """Psi_out = E log Z_out(o | a, b) of the noisy channel at cross-overlaps ``q12s`` on one
    point set, shape (len(q12s), len(sizes), scrambles): per scramble the RQMC mean. Outer law per
    whitened coordinate: the Cholesky factor of deep_aim_se.outer_covariance in the order
    (x, xi, a, b), so (x, xi) and the noise of o use the same normals at every q'_12; inner:
    importance sampling from the deviations' prior N(0, [[V1, -q12], [-q12, V2]]) on nested
    Sobol heads of sizes ``sizes`` (the rule of deep_aim_noisy)."""
    v1, v2 = model.q0[0] - q1, model.q0[1] - q2
    chol = [ds.psd_cholesky(ds.outer_covariance(model, q1=q1, q2=q2, q12=q)) for q in q12s]
    dev = [ds.psd_cholesky(np.array([[v1, -q], [-q, v2]])) for q in q12s]
    kmax = max(sizes)
    out = np.zeros((len(q12s), len(sizes), scrambles))
    sd = math.sqrt(2.0 * delta)
    for s in range(scrambles):
        u = dn._sobol_normals(m, 10, [seed, s])
        t = dn._sobol_normals(int(round(math.log2(kmax))), 4, [seed, s, 4]).T
        for st in range(0, u.shape[0], chunk):
            w = u[st:st + chunk]
            cols = [w[:, 2 * j:2 * j + 2] for j in range(4)]
            lt = chol[0]                       # the truths' rows do not depend on q12
            x = lt[0, 0] * cols[0]
            xi = lt[1, 0] * cols[0] + lt[1, 1] * cols[1]
            c1, c2 = dn.clean_observations(xi[:, 0], xi[:, 1], x[:, 0], x[:, 1],
                                           skip=model.skip, beta=model.beta)
            o1, o2 = c1 + sd * w[:, 8], c2 + sd * w[:, 9]
            for i, (lc, dc) in enumerate(zip(chol, dev)):
                a = sum(lc[2, j] * cols[j] for j in range(3))
                b = sum(lc[3, j] * cols[j] for j in range(4))
                d_in = np.stack([dc[0, 0] * t[0], dc[0, 0] * t[1],
                                 dc[1, 0] * t[0] + dc[1, 1] * t[2],
                                 dc[1, 0] * t[1] + dc[1, 1] * t[3]])
                d1, d2 = dn.clean_observations(a[:, 0:1] + d_in[0], a[:, 1:2] + d_in[1],
                                               b[:, 0:1] + d_in[2], b[:, 1:2] + d_in[3],
                                               skip=model.skip, beta=model.beta)
                ll = -((o1[:, None] - d1) ** 2 + (o2[:, None] - d2) ** 2) / (4.0 * delta)
                for j, k in enumerate(sizes):
                    log_mean = dn._prefix_weights(ll, k)[2]
                    out[i, j, s] += np.sum(log_mean - math.log(4.0 * math.pi * delta))
        out[:, :, s] /= u.shape[0]
    return out


def test_truths_first_psi_out_is_the_engines():
    """At q'_12 = 0 the truths-first Psi_out is the engine's (output_e_noisy, points drawn means
    first: the same law, independent points) within the two bars."""
    r = psi_out_truths_first(MODEL, q1=Q1, q2=Q2, q12s=[0.0], delta=DELTA, m=6, scrambles=8,
                             seed=5, sizes=(2**9, 2**11))
    fine, coarse = r[0, 1], r[0, 0]
    mine = fine.mean()
    bar = 2.5 * fine.std(ddof=1) / math.sqrt(fine.size) + abs(mine - coarse.mean())
    eng = dn.output_e_noisy(q1=Q1, q2=Q2, V1=1.5 - Q1, V2=1.5 - Q2, Delta=DELTA, skip=1.0, m=6,
                            seed=6, sizes=(2**9, 2**11), rho=(0.5, 0.5),
                            design="shared")["psi_out"]
    assert abs(mine - eng.value) < bar + eng.error, (mine, bar, eng.value, eng.error)
    # teeth: the bars are below the likelihood's constant log(4 pi Delta) = 0.23 (a missing or
    # doubled constant, or another outer law, would fail)
    assert bar + eng.error < 0.2


@pytest.mark.slow
def test_noisy_psi_out_is_stationary_in_the_cross_overlap():
    """d Psi_out / d q'_12 (central difference, dq12 = 0.02, truths first, 2^14 x 8 points,
    K = 2^11 inner points; 2.4 minutes at load 12) against the engine's E[g_1 . g_2] at q'_12 = 0
    (variance form, 2^10 x 8 other points): agreement within 2.5 standard errors + the inner-size
    term (|K - K/4|) + the engine's bar (measured: 0.01348 +- 0.00092 against 0.01303 +- 0.00265;
    the step term, |D(0.02) - D(0.04)| = 4e-5 at 2^12 x 8, is left out); the derivative is
    resolved from 0, and a relation with a factor 2 either way fails."""
    d = 0.02
    r = psi_out_truths_first(MODEL, q1=Q1, q2=Q2, q12s=[d, -d], delta=DELTA, m=14, scrambles=8,
                             seed=1, sizes=(2**9, 2**11))
    fine = (r[0, 1] - r[1, 1]) / (2 * d)
    coarse = (r[0, 0] - r[1, 0]) / (2 * d)
    dpsi = fine.mean()
    se = fine.std(ddof=1) / math.sqrt(fine.size)
    bar = 2.5 * se + abs(dpsi - coarse.mean())
    e12 = dn.output_e_noisy(q1=Q1, q2=Q2, V1=1.5 - Q1, V2=1.5 - Q2, Delta=DELTA, skip=1.0,
                            m=10, seed=3, rho=(0.5, 0.5), design="shared")["cross"]
    tol = bar + e12.error
    assert abs(dpsi - e12.value) < tol, (dpsi, bar, e12.value, e12.error)
    assert dpsi > 4 * se                                   # resolved from 0
    for factor in (2.0, 0.5):                              # teeth: a wrong factor fails
        assert abs(dpsi - factor * e12.value) > tol, (factor, dpsi, e12.value, tol)
