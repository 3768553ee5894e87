"""Finite-size Bayes-optimal GAMP for deep tied attention as a sequence multi-index model
(THEORY 2; check 7 of THEORY 4).

Model (L = 2 layers, one row per layer, M = 2 tokens, noiseless): x_mu in R^{D x M} iid N(0, 1),
W in R^{P x D} iid N(0, 1) (P = L = 2), z_mu = W x_mu / sqrt(D) in R^{P x M},
h = A(z_1) z_2 with A(z_1) = softmax_rows(beta z_1 z_1^T) + c I, y = softmax_rows(beta h h^T).

Output channel (the same density as the SE of :mod:`aim_sym.numerics.smi`, up to the omega-independent
Jacobian |dh/dy|): y fixes h up to sign (compiled ``h_from_y``), and

    Z_out(y; omega, V) = sum_{s = +-1} int_{R^2} dz_1 prod_m N((z_1m, z_2m); omega_m, V) / det A(z_1),
    z_2 = A(z_1)^{-1} (s h)            (compiled ``fibre``: z_2 and the Jacobian 1 / det A),

with V the P x P covariance shared by the tokens (rows coupled through V_12). Writing
N(z_m; omega_m, V) = N(z_1m; omega_1m, V_11) N(z_2m; omega_2m + r (z_1m - omega_1m), v_c),
r = V_12 / V_11, v_c = V_22 - V_12^2 / V_11, the z_1 integral is a tensor Gauss-Hermite rule for
N(omega_1, V_11 I) (``order`` nodes per axis) and the rest is the integrand. The posterior
moments E[z_m | y], Cov[z_m | y] (per token, P x P) are weighted sums over the same nodes
(a Laplace mixture where the posterior sharpens, :func:`output_moments`; the tests and the
benchmark report the difference of two orders on the actual GAMP inputs), and

    g_m  = V^{-1} (E[z_m | y] - omega_m)                          (= d log Z_out / d omega_m)
    dg_m = V^{-1} Cov[z_m | y] V^{-1} - V^{-1}                   (= d g_m / d omega_m)

GAMP (Gaussian prior N(0, I_P) on each column W_i, design x_mu,i,m / sqrt(D)):

    V^t       = C^t                            (all columns share C; ||x_mu,m||^2 / D -> 1)
    omega^t_mu = W_hat^t x_mu / sqrt(D) - V^t g^{t-1}_mu                       (Onsager)
    g^t_mu    = g_out(y_mu, omega^t_mu, V^t),   A^t = -(1/D) sum_mu sum_m dg^t_mu,m   (P x P)
    B^t       = (1/sqrt(D)) sum_mu sum_m g^t_mu,m x_mu,m^T + A^t W_hat^t           (P x D)
    W_hat^{t+1} = (I + A^t)^{-1} B^t,   C^{t+1} = (I + A^t)^{-1}

(the token cross terms x_mu,i,m x_mu,i,k, m != k, of the exact variance update have mean zero and
are dropped). The SE correspondence: A^t -> Q_hat = alpha E[g g^T], W_hat W^T / D -> Q =
Q_hat (I + Q_hat)^{-1}, C -> I - Q. ``a_update="gg"`` uses the Nishimori form
A = (1/D) sum_mu sum_m g g^T instead of -dg (equal in expectation; THEORY 1.2).

Damping (``damping`` = delta, default 0.3): g^t <- (1 - delta) g^t + delta g^{t-1} and
A^t <- (1 - delta) A^t + delta A^{t-1} (the AIM GAMP of :mod:`aim_sym.numerics.amp` does the same).

Initialisation: Q = 0 is a fixed point (sign symmetries W_l -> -W_l), so W_hat^0 =
q0 W + sqrt(q0 (1 - q0)) G (G iid N(0, 1)), C^0 = (1 - q0) I, g^{-1} = 0: the Bayes-consistent
estimate at overlap Q = q0 I (``init_overlap`` = q0, default 0.02, reported in the result).

Measured (tables in benchmarks/RESULTS.md; benchmarks/smi_amp_finite_size.py,
smi_branch_k2_routes.py): below the sequential threshold GAMP agrees with the SE on the branch
Q = diag(0, q2).  :func:`converged` is the convergence rule used in the tables (every Q_ll within
0.01 over the last 10 iterations; tol-based stopping is not reached at finite D).  At alpha = 1
the SE map is close to the identity along a curve in (Q_11, Q_22): final values there measure
the speed along a marginal direction, not a fixed point.

Overlaps: ``Q`` = |(W_hat W^T)_ll| / ||W_l||^2 (the teacher's own norm ||W_l||^2 / D = 1 +
O(D^{-1/2}) divided out, so a perfectly learned layer reads 1 and seeds scatter less; the
absolute value because W_l -> -W_l is an exact symmetry of the posterior: at small D the
initial overlap q0 is below the O(D^{-1/2}) chance overlap and a layer may be learned with
either sign), ``Q_raw`` = (W_hat W^T / D)_ll (signed), the self-overlap (W_hat W_hat^T / D)_ll (equal to
Q_raw at the Nishimori point) and the MSE per layer min_s ||W_hat_l - s W_l||^2 / D.
"""

from __future__ import annotations

import math
import time
from functools import lru_cache

import numpy as np

from . import smi
from .records import require, standard_error
from .smi_fibre import check, fibre_eval, functions, gauss_newton_mode, grid2

# iterations per GAMP run: the convergence rule needs CONV_WINDOW = 10 and the benchmarks use
# 60-150; a damped contraction of factor ``damping`` needs log(1e-6) / log(damping) iterations to
# reach tol = 1e-6 from O(1) (1.4e3 at damping 0.99, 1.4e4 at 0.999), and the returned history
# keeps one record (~1 kB) per iteration and seed: 10^5 (the CLI's range) bounds both
MAX_ITER = 100_000


def forward(z: np.ndarray, *, skip=1.0, beta=1.0):
    """Channel forward map on z of shape (n, P=2, M=2) -> (h (n, 2), y (n, 2, 2))."""
    f = functions()["forward"]
    with np.errstate(over="ignore"):
        out = f(z[:, 0, 0], z[:, 0, 1], z[:, 1, 0], z[:, 1, 1], skip, beta)
    n = z.shape[0]
    out = [np.asarray(o, dtype=float) * np.ones(n) for o in out]
    h = np.stack(out[:2], 1)
    y = np.stack(out[2:], 1).reshape(n, 2, 2)
    return h, y


def h_from_y(y: np.ndarray, *, beta=1.0) -> np.ndarray:
    """Inversion y -> h (sign with h_0 > h_1), compiled from :func:`aim_sym.smi.inversion`."""
    f = functions()["h_from_y"]
    with np.errstate(divide="ignore", invalid="ignore"):
        h0, h1 = f(y[:, 0, 0], y[:, 0, 1], y[:, 1, 0], y[:, 1, 1], beta)
    return np.stack([np.asarray(h0, float), np.asarray(h1, float)], 1)


def generate(*, alpha, dim, skip=1.0, beta=1.0, rng):
    """Teacher data: W (P x D), X (N x D x M), z (N x P x M), h (N x 2), y (N x 2 x 2), h_obs
    (h recovered from y, the only thing GAMP sees besides X)."""
    n = int(round(alpha * dim))
    require(n >= 1, "alpha * dim", ">= 1", alpha * dim)
    from .amp import check_data_size

    check_data_size(alpha=alpha, dim=dim, samples=n, per_sample=2 * dim)
    W = rng.standard_normal((2, dim))
    X = rng.standard_normal((n, dim, 2))
    z = np.einsum("pd,ndm->npm", W, X) / math.sqrt(dim)
    h, y = forward(z, skip=skip, beta=beta)
    return dict(W=W, X=X, z=z, h=h, y=y, h_obs=h_from_y(y, beta=beta))


# ----------------------------------------------------------------------------- fibre quadrature
@lru_cache(maxsize=16)
def _gh2(n: int):
    """Tensor probabilists' Gauss-Hermite rule for N(0, I_2) (:func:`aim_sym.numerics.smi_fibre.grid2`):
    nodes (K,), (K,), log weights."""
    X0, X1, W = grid2(n, 1.0, False)
    keep = W > 1e-300
    return X0[keep], X1[keep], np.log(W[keep])


def _log_integrand(z10, z11, h0, h1, o, r, vc, skip, beta):
    """log of [sum over signs of N(z_2; conditional mean, v_c I) / det A(z_1)] at nodes z_1,
    per sign: returns (lw_plus, lw_minus, u0, u1) with z_2 = +-(u0, u1)."""
    u0, u1, jac = fibre_eval(z10, z11, h0, h1, skip, beta)
    m20 = o[:, 1, 0, None] + r * (z10 - o[:, 0, 0, None])
    m21 = o[:, 1, 1, None] + r * (z11 - o[:, 0, 1, None])
    base = np.log(jac) - math.log(2 * math.pi * vc)
    lp = base - ((u0 - m20) ** 2 + (u1 - m21) ** 2) / (2 * vc)
    lm = base - ((u0 + m20) ** 2 + (u1 + m21) ** 2) / (2 * vc)
    return lp, lm, u0, u1


def _reduce(lw, lp, lm, Za, Zb, u0, u1, out, sl):
    """Posterior moments at the nodes z_1 = (Za, Zb) (b, K) of rule log weights lw, each with
    both fibre points z_2 = +-(u0, u1) of log integrands lp, lm (:func:`_log_integrand`)."""
    L = np.concatenate([lw + lp, lw + lm], 1)
    Za, Zb = np.concatenate([Za, Za], 1), np.concatenate([Zb, Zb], 1)
    z20, z21 = np.concatenate([u0, -u0], 1), np.concatenate([u1, -u1], 1)
    mx = L.max(1, keepdims=True)
    w = np.exp(L - mx)
    Zs = w.sum(1)
    out["logZ"][sl] = np.log(Zs) + mx[:, 0]
    p = w / Zs[:, None]
    out["ess"][sl] = 1.0 / (p**2).sum(1)
    zz = ((Za, Zb), (z20, z21))                         # zz[p][m]
    for m in range(2):
        e = [(p * zz[q][m]).sum(1) for q in range(2)]
        out["mean"][sl, 0, m], out["mean"][sl, 1, m] = e
        for a in range(2):
            for b in range(a, 2):
                cab = (p * (zz[a][m] - e[a][:, None]) * (zz[b][m] - e[b][:, None])).sum(1)
                out["cov"][sl, m, a, b] = cab
                out["cov"][sl, m, b, a] = cab


def _mixture_nodes(z10, z11, lp, lm, lw, hh0, hh1, o, v11, r, vc, skip, beta, lap_order, inflate,
                   gn_iters, pi_prior):
    """Nodes and log weights (w.r.t. Lebesgue measure times the prior density, i.e. weights for
    the integrand without the prior factor) of the mixture rule; see :func:`output_moments`."""
    y0, y1, lwl = _gh2(lap_order)
    comps = []
    for sgn, ll in ((1.0, lp), (-1.0, lm)):
        k = np.argmax(ll + lw[None], 1)
        b0 = np.take_along_axis(z10, k[:, None], 1)
        b1 = np.take_along_axis(z11, k[:, None], 1)
        for mir in (1.0, -1.0):
            comps.append(gauss_newton_mode(
                mir * b0, mir * b1, hh0, hh1, m1=(o[:, 0, 0, None], o[:, 0, 1, None]), v1=v11,
                m2=(o[:, 1, 0, None], o[:, 1, 1, None]), r=r, v2=vc, c=skip, beta=beta,
                iters=gn_iters, sgn=sgn))
    ncomp = len(comps)
    nodes0, nodes1, chol = [z10], [z11], []
    for m0, m1, P00, P01, P11 in comps:
        det = P00 * P11 - P01**2
        S00, S01, S11 = P11 / det, -P01 / det, P00 / det
        l00 = np.sqrt(S00)
        l10 = S01 / l00
        l11 = np.sqrt(np.maximum(S11 - l10**2, 1e-300))
        l00, l10, l11 = inflate * l00, inflate * l10, inflate * l11
        chol.append((m0, m1, l00, l10, l11))
        nodes0.append(m0 + l00 * y0[None])
        nodes1.append(m1 + l10 * y0[None] + l11 * y1[None])
    Z10, Z11 = np.concatenate(nodes0, 1), np.concatenate(nodes1, 1)
    lprior = (-((Z10 - o[:, 0, 0, None]) ** 2 + (Z11 - o[:, 0, 1, None]) ** 2) / (2 * v11)
              - math.log(2 * math.pi * v11))
    lq = [math.log(pi_prior) + lprior]
    pc = (1 - pi_prior) / ncomp
    for m0, m1, l00, l10, l11 in chol:
        e0 = (Z10 - m0) / l00
        e1 = (Z11 - m1 - l10 * e0) / l11
        lq.append(math.log(pc) - 0.5 * (e0**2 + e1**2) - np.log(2 * math.pi * l00 * l11))
    lqm = np.logaddexp.reduce(np.stack(lq, 0), 0)
    b = z10.shape[0]
    lwcomp = np.concatenate([np.broadcast_to(math.log(pi_prior) + lw[None], z10.shape)]
                            + [np.broadcast_to(math.log(pc) + lwl[None], (b, y0.size))] * ncomp, 1)
    return Z10, Z11, lwcomp + lprior - lqm


def output_moments(h, omega, V, *, skip=1.0, beta=1.0, order=24, adaptive="auto", lap_order=None,
                   inflate=1.3, gn_iters=8, pi_prior=0.3, ess_switch=0.4, chunk=300_000):
    """Posterior of z on the fibre of y (given as h, either sign) under prod_m N(z_m; omega_m, V).

    h: (n, 2); omega: (n, P=2, M=2); V: (2, 2) symmetric positive definite.
    Returns dict with ``logZ`` (n,), ``mean`` (n, 2, 2) = E[z | y] and ``cov`` (n, 2, 2, 2)
    = Cov[z_m | y] as [n, m, p, q] (per token), ``ess`` (Kish effective number of nodes of the
    rule used) and ``mixture`` (bool per sample: whether the adaptive rule was used).

    Prior rule: tensor Gauss-Hermite (``order`` nodes per axis) for z_1 ~ N(omega_1, V_11 I);
    spectrally accurate while the fibre posterior is not much narrower than the prior.
    Mixture rule (``adaptive=True`` for all samples; ``"auto"``: for the samples whose prior-rule
    Kish ESS is below ``ess_switch`` times the ESS of the rule's own weights (31 at order 24);
    ``False``: never): the prior rule plus Laplace components
    at the posterior modes (Gauss-Newton with the symbolic fibre Jacobian, started from the best
    prior node of each sign and its mirror z_1 -> -z_1; covariance = inverse GN precision times
    ``inflate``^2, ``lap_order`` nodes per axis, default ``order``), combined as a deterministic
    mixture (balance heuristic: node weight pi_k w_i / q_mix(node) times the integrand).  Needed
    when V is small (layer 2 nearly learned): the posterior is then much narrower than the prior.
    It is consistent as the orders grow but is less accurate than the prior rule when the
    posterior is broad, hence ``"auto"``.
    """
    require(adaptive in (True, False, "auto"), "adaptive", "True, False or 'auto'", adaptive)
    h = np.asarray(h, float)
    omega = np.asarray(omega, float)
    V = np.asarray(V, float)
    n = h.shape[0]
    lap_order = order if lap_order is None else lap_order
    v11 = V[0, 0]
    r = V[0, 1] / v11
    vc = V[1, 1] - V[0, 1] ** 2 / v11
    require(v11 > 0 and vc > 0, "V", "positive definite", V)
    sd1 = math.sqrt(v11)
    x0, x1, lw = _gh2(order)
    K = x0.size
    out = dict(logZ=np.empty(n), mean=np.empty((n, 2, 2)), cov=np.empty((n, 2, 2, 2)),
               ess=np.empty(n), mixture=np.zeros(n, bool))
    step = max(1, chunk // (12 * K))
    for s0 in range(0, n, step):
        sl = slice(s0, min(n, s0 + step))
        o = omega[sl]
        hh0, hh1 = h[sl, 0, None], h[sl, 1, None]
        z10 = o[:, 0, 0, None] + sd1 * x0[None]            # (b, K) prior nodes
        z11 = o[:, 0, 1, None] + sd1 * x1[None]
        lp, lm, u0, u1 = _log_integrand(z10, z11, hh0, hh1, o, r, vc, skip, beta)
        _reduce(lw[None], lp, lm, z10, z11, u0, u1, out, sl)
        if adaptive is False:
            continue
        idx = np.arange(sl.start, sl.stop)
        ess0 = 1.0 / np.exp(2 * lw).sum()
        sel = np.ones(idx.size, bool) if adaptive is True else out["ess"][sl] < ess_switch * ess0
        if not sel.any():
            continue
        idx = idx[sel]
        o = omega[idx]
        hh0, hh1 = h[idx, 0, None], h[idx, 1, None]
        Z10, Z11, lwt = _mixture_nodes(z10[sel], z11[sel], lp[sel], lm[sel], lw, hh0, hh1, o, v11,
                                       r, vc, skip, beta, lap_order, inflate, gn_iters, pi_prior)
        lp2, lm2, u0, u1 = _log_integrand(Z10, Z11, hh0, hh1, o, r, vc, skip, beta)
        _reduce(lwt, lp2, lm2, Z10, Z11, u0, u1, out, idx)
        out["mixture"][idx] = True
    return out


def gout(h, omega, V, *, skip=1.0, beta=1.0, order=24, adaptive="auto"):
    """g (n, P, M) = V^{-1}(E[z | y] - omega) and dg (n, M, P, P) = V^{-1} Cov V^{-1} - V^{-1}."""
    mo = output_moments(h, omega, V, skip=skip, beta=beta, order=order, adaptive=adaptive)
    Vi = np.linalg.inv(V)
    g = np.einsum("pq,nqm->npm", Vi, mo["mean"] - omega)
    dg = np.einsum("pa,nmab,bq->nmpq", Vi, mo["cov"], Vi) - Vi[None, None]
    return g, dg, mo


# ----------------------------------------------------------------------------- GAMP
def amp_run(data, *, skip=1.0, beta=1.0, max_iter=50, damping=0.3, order=24, init_overlap=0.02,
            a_update="dg", rng=None, tol=1e-6, progress=None, adaptive="auto"):
    """One GAMP run on ``data`` (from :func:`generate`). Returns per-iteration overlaps."""
    require(_is_int(max_iter) and 1 <= max_iter <= MAX_ITER, "max_iter",
            f"an integer in [1, {MAX_ITER}]", max_iter)
    require(0 <= damping < 1, "damping", "in [0, 1)", damping)
    require(0 < init_overlap < 1, "init_overlap", "in (0, 1)", init_overlap)
    require(a_update in ("dg", "gg"), "a_update", "'dg' or 'gg'", a_update)
    rng = np.random.default_rng(0) if rng is None else rng
    W, X, hobs = data["W"], data["X"], data["h_obs"]
    N, D, M = X.shape
    sq = math.sqrt(D)
    q0 = init_overlap
    What = q0 * W + math.sqrt(q0 * (1 - q0)) * rng.standard_normal(W.shape)
    C = (1 - q0) * np.eye(2)
    g_old = np.zeros((N, 2, M))
    A_old = None
    hist = []
    t0 = time.perf_counter()
    for it in range(max_iter):
        V = 0.5 * (C + C.T)
        omega = np.einsum("pd,ndm->npm", What, X) / sq - np.einsum("pq,nqm->npm", V, g_old)
        g, dg, mo = gout(hobs, omega, V, skip=skip, beta=beta, order=order, adaptive=adaptive)
        if a_update == "dg":
            A = -dg.sum(1).sum(0) / D
        else:
            A = np.einsum("npm,nqm->pq", g, g) / D
        A = 0.5 * (A + A.T)
        A_raw = A
        if damping > 0 and it > 0:
            g = (1 - damping) * g + damping * g_old
            A = (1 - damping) * A + damping * A_old
        B = np.einsum("npm,ndm->pd", g, X) / sq + A @ What
        Ci = np.eye(2) + A
        C_new = np.linalg.inv(Ci)
        W_new = C_new @ B
        diff = float(np.sqrt(((W_new - What) ** 2).mean()))
        What, C, g_old, A_old = W_new, C_new, g, A
        Q = What @ W.T / D
        S = What @ What.T / D
        nw = (W**2).sum(1) / D
        rec = dict(iter=it + 1, Q=[float(abs(Q[l, l]) / nw[l]) for l in range(2)],
                   Q_raw=[float(Q[0, 0]), float(Q[1, 1])], Q12=float(Q[0, 1]),
                   self=[float(S[0, 0]), float(S[1, 1])],
                   mse=[float(min(((What[l] - W[l]) ** 2).sum(), ((What[l] + W[l]) ** 2).sum()) / D)
                        for l in range(2)],
                   A=A.tolist(), A_raw=A_raw.tolist(), V=C.tolist(), step=diff,
                   ess_min=float(mo["ess"].min()),
                   mixture_fraction=float(mo["mixture"].mean()),
                   seconds=time.perf_counter() - t0)
        if "z" in data:
            # finite-size diagnostic: the SE assumes z - omega ~ N(0, V) per token column
            res = data["z"] - omega
            rec["resid_var"] = [float((res[:, l] ** 2).mean()) for l in range(2)]
            rec["V_used"] = [float(V[0, 0]), float(V[1, 1])]
        hist.append(rec)
        if progress:
            progress(it + 1, max_iter, f"Q = ({Q[0, 0]:.4f}, {Q[1, 1]:.4f})")
        if not np.isfinite(diff):
            break
        if diff < tol:
            break
    return dict(history=hist, W_hat=What, C=C, omega=omega, V=V)


CONV_WINDOW, CONV_RANGE = 10, 0.01


def converged(history, *, window=CONV_WINDOW, tol=CONV_RANGE) -> bool:
    """Convergence rule for finite D: every overlap Q_ll moved by less than ``tol`` (max - min)
    over the last ``window`` iterations. At finite D the iterates do not settle to machine
    precision: they keep a fluctuation of a few 1e-3 (see benchmarks/RESULTS.md)."""
    if len(history) < window:
        return False
    Q = np.array([r["Q"] for r in history[-window:]])
    return bool(np.all(Q.max(0) - Q.min(0) < tol))


def _is_int(x) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, bool)


def _finite_or_none(values) -> list:
    """``values`` as a list of floats, None where not finite (JSON has no NaN)."""
    return [float(v) if np.isfinite(v) else None for v in values]


def _se_prediction(alpha, layers, tokens, skip, beta):
    try:
        r = smi.fixed_point(alpha=alpha, layers=layers, tokens=tokens, skip=skip, beta=beta)
    except Exception as exc:  # pragma: no cover
        return dict(error=repr(exc))
    return dict(Q=r["Q"], error=r.get("error"), branch=r.get("branch"), stable=r.get("stable"),
                eigenvalue=r.get("eigenvalue"), note=r.get("note"))


def run_smi_amp(*, alpha, dim, seeds, layers=2, tokens=2, skip=1.0, beta=1.0, max_iter=50,
                damping=0.3, rng_seed=0, progress=None, order=24, init_overlap=0.02,
                a_update="dg", se=True, tol=1e-6, adaptive="auto") -> dict:
    """GAMP over ``seeds`` independent instances (teacher, data, initialisation); ``seeds`` is a
    count or a list of seed indices (instance k uses ``np.random.default_rng([rng_seed, k])``).

    Returns Q_mean, Q_stderr (last iterate's (W_hat W^T)_ll / ||W_l||^2 per layer, mean and
    standard error over seeds), Q_tail_mean / Q_tail_stderr (the same for each seed's average
    over its last 10 iterations, which smooths the O(D^{-1/2}) oscillation of the iterates),
    Q_raw_mean ((W_hat W^T / D)_ll), self_mean, mse_mean, per_iteration (mean Q_ll per
    iteration; runs that stopped early are carried at their last value), se_prediction (from
    :func:`aim_sym.numerics.smi.fixed_point`, or None), per_seed (history per seed), settings, seconds.
    Summary values that are not finite are None: the standard errors of a single seed, and the
    overlaps of a run that diverged.
    """
    check(layers, tokens, skip, beta)
    require(np.isfinite(alpha) and alpha > 0, "alpha", "finite and > 0", alpha)
    require(_is_int(dim) and dim >= 2, "dim", "an integer >= 2", dim)
    require(_is_int(max_iter) and 1 <= max_iter <= MAX_ITER, "max_iter",
            f"an integer in [1, {MAX_ITER}]", max_iter)
    require(isinstance(damping, (int, float, np.number)) and 0 <= damping < 1, "damping",
            "in [0, 1)", damping)
    require(_is_int(rng_seed) and rng_seed >= 0, "rng_seed", "an integer >= 0", rng_seed)
    allowed = "a count >= 1 or a non-empty list of integers >= 0"
    if np.ndim(seeds) == 0:
        require(_is_int(seeds) and seeds >= 1, "seeds", allowed, seeds)
        seed_list = list(range(int(seeds)))
    else:
        seed_list = list(seeds)
        require(len(seed_list) >= 1 and all(_is_int(k) and k >= 0 for k in seed_list), "seeds",
                allowed, seeds)
        seed_list = [int(k) for k in seed_list]
    seeds = len(seed_list)
    t0 = time.perf_counter()
    per_seed = []
    for j, k in enumerate(seed_list):
        rng = np.random.default_rng([rng_seed, k])
        data = generate(alpha=alpha, dim=dim, skip=skip, beta=beta, rng=rng)
        res = amp_run(data, skip=skip, beta=beta, max_iter=max_iter, damping=damping, order=order,
                      init_overlap=init_overlap, a_update=a_update, rng=rng, tol=tol,
                      adaptive=adaptive)
        per_seed.append(dict(seed=k, history=res["history"], final=res["history"][-1],
                             converged=converged(res["history"]),
                             h_recovery_error=float(np.min(np.abs(
                                 data["h_obs"][:, None, :] - np.stack([data["h"], -data["h"]], 1)),
                                 axis=1).max())))
        if progress:
            progress(j + 1, seeds, f"seed {k}: Q = {res['history'][-1]['Q']}")
    finals = np.array([s["final"]["Q"] for s in per_seed])
    tails = np.array([np.mean([r["Q"] for r in s["history"][-10:]], 0) for s in per_seed])
    raws = np.array([s["final"]["Q_raw"] for s in per_seed])
    selfs = np.array([s["final"]["self"] for s in per_seed])
    mses = np.array([s["final"]["mse"] for s in per_seed])
    T = max(len(s["history"]) for s in per_seed)
    traj = np.array([[s["history"][min(t, len(s["history"]) - 1)]["Q"] for t in range(T)]
                     for s in per_seed])
    def stderr(a):       # over seeds; undefined (None) for a single seed
        return (_finite_or_none(standard_error(a, axis=0)) if seeds > 1
                else [None] * 2)

    out = dict(alpha=float(alpha), dim=int(dim), N=int(round(alpha * dim)), seeds=seeds,
               Q_mean=_finite_or_none(finals.mean(0)), Q_stderr=stderr(finals),
               Q_tail_mean=_finite_or_none(tails.mean(0)), Q_tail_stderr=stderr(tails),
               Q_raw_mean=_finite_or_none(raws.mean(0)),
               self_mean=_finite_or_none(selfs.mean(0)), mse_mean=_finite_or_none(mses.mean(0)),
               per_iteration=[_finite_or_none(q) for q in traj.mean(0)],
               converged_fraction=float(np.mean([s["converged"] for s in per_seed])),
               se_prediction=_se_prediction(alpha, layers, tokens, skip, beta) if se else None,
               per_seed=per_seed,
               settings=dict(skip=skip, beta=beta, max_iter=max_iter, damping=damping, order=order,
                             init_overlap=init_overlap, a_update=a_update, rng_seed=rng_seed,
                             tol=tol, adaptive=adaptive),
               seconds=time.perf_counter() - t0)
    return out
