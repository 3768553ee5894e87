"""Output side of the ERM state evolution for any T (THEORY 3), by randomised quasi-Monte Carlo.

Flat entries a <= b (n = T(T+1)/2), (z0n_ab, z_ab) ~ N(0, [[Q0n, m], [m, q]]) independently,
Q0n = Q0 + Delta/2 (label noise folded into the teacher's field, as in :mod:`.erm_output`).
Labels y = softmax_beta0(sqrt(1 + delta_ab) z0n) row-wise; proximal point
p = argmin_u sum_{a<=b} (u_ab - z_ab)^2 / (2 Sigma) + sum_{a,b} (y_ab - softmax_beta(sqrt(1+delta) u)_ab)^2.

Reduction (derived here).  Row a of the softmax sees w_ab = sqrt(1 + delta_ab) u_ab only up to a
common shift c_a.  A symmetric u with sqrt(1 + delta_ab) u_ab = c_a for all b has, off the
diagonal, u_ab = c_a = c_b: all c_a equal.  So the invariant set is one line for every T,
u in span(e), e_aa = 1/sqrt2, e_ab = 1 (a < b), and the loss depends on u only through its
projection on the (n - 1)-dimensional complement, with an orthonormal basis B (n x (n-1)).
The quadratic term does not move z along e, so p - z = B d with
    d = argmin_d |d|^2 / (2 Sigma) + L(B (omega + d)),  omega = B^T z,  ell = B^T z0n,
and (ell_k, omega_k) ~ N(0, C), C = [[Q0n, m], [m, q]], iid over k = 1..n-1: the integral lives
in 2(n-1) dimensions (4 at T = 2: the reduction of :mod:`.erm_output`; 10 at T = 3).
Every SE moment is a contraction of d: sum (p - z)^2 = |d|^2,
sum (p - z)(q z0n - m z) = d . (q ell - m omega), sum (p - z)(Q0n z - m z0n) = d . (Q0n omega - m ell).

The step: damped Newton with the exact gradient and Hessian of L (softmax rows: gradient
-2 P (r - rbar), Hessian 2 [diag(a + P rbar) - a P^T - P a^T + (sum P^2 - 2 rbar) P P^T] in the
logits, r = y - P, rbar = r . P, a = P (P - r)), negative curvature mirrored (|eigenvalue|),
Armijo backtracking, vectorised over nodes and starts; starts: omega, the label-matching point
(beta0/beta) ell, their midpoint, and for each row a the mixtures taking the label-matching
values on the entries of row a (or on all others); the lowest objective wins.

Expectations: scrambled Sobol points (``replicates`` independent seeded scramblings of
``points`` each) mapped to N(0, I) by the inverse normal CDF; value = mean of the replicate
means, standard error = their standard deviation / sqrt(R).  :data:`COVER` standard errors
cover the error with probability ~ 0.99 (Student t with R - 1 = 15 degrees of freedom).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
from scipy.special import ndtri
from scipy.stats import qmc

from .erm_output import OutputMoments, ZeroEstimatorRates
from .records import ConvergenceError, require, standard_error

__all__ = ["TOKENS", "COVER", "TokenGeometry", "geometry", "loss_and_derivatives", "prox_step",
           "gaussian_points", "QMCMoments", "output_moments", "TestError",
           "generalisation_error", "zero_estimator_rates"]

TOKENS = (2, 3, 4, 5, 6)  # sequence lengths this route accepts
COVER = 3.0  # multiplier of the standard error for a bar that covers (t_15: P(|t| > 3) ~ 0.009)
_FIELDS = ("sq", "cross_m", "cross_s", "envelope", "loss")


@dataclass(frozen=True)
class TokenGeometry:
    """The flat-entry bookkeeping of T tokens: ``basis`` B (n, n-1), orthonormal, orthogonal to
    the shift direction e; ``A`` (T, T, n-1): logit w_ab / beta = sum_k A[a, b, k] x_k for the
    reduced coordinates x = B^T u; ``masks`` (2T, n-1, n-1): B^T M B for the row mixtures;
    ``W1`` (T^2, (n-1)^2) = A_abk A_abl and ``W2`` (T^3, (n-1)^2) = A_abk A_acl, which turn the
    Hessian's diagonal and pair terms into matrix products."""

    tokens: int
    n: int
    basis: np.ndarray
    A: np.ndarray
    masks: np.ndarray
    W1: np.ndarray
    W2: np.ndarray


@functools.lru_cache(maxsize=8)
def geometry(tokens: int) -> TokenGeometry:
    """The :class:`TokenGeometry` of ``tokens`` tokens (THEORY 3, the shift-invariance reduction)."""
    require(not isinstance(tokens, bool) and tokens in TOKENS, "tokens", f"one of {TOKENS}",
            tokens)
    T = int(tokens)
    pairs = [(a, b) for a in range(T) for b in range(a, T)]
    n = len(pairs)
    e = np.array([1 / math.sqrt(2) if a == b else 1.0 for a, b in pairs])
    e /= np.linalg.norm(e)
    # orthonormal complement of e: the eigenvectors of I - e e^T of eigenvalue 1
    _, vecs = np.linalg.eigh(np.eye(n) - np.outer(e, e))
    B = vecs[:, 1:]
    full = np.zeros((T, T, n))
    for k, (a, b) in enumerate(pairs):
        s = math.sqrt(2) if a == b else 1.0
        full[a, b, k] = s
        full[b, a, k] = s
    A = full @ B
    masks = []
    for a in range(T):
        M = np.diag([1.0 if a in pr else 0.0 for pr in pairs])
        masks.append(B.T @ M @ B)
        masks.append(B.T @ (np.eye(n) - M) @ B)
    for arr in (B, A):
        arr.setflags(write=False)
    k = n - 1
    W1 = np.einsum("abk,abl->abkl", A, A).reshape(T * T, k * k)
    W2 = np.einsum("abk,acl->abckl", A, A).reshape(T**3, k * k)
    out = np.array(masks), W1, W2
    for arr in out:
        arr.setflags(write=False)
    return TokenGeometry(tokens=T, n=n, basis=B, A=A, masks=out[0], W1=W1, W2=W2)


def _softmax(w: np.ndarray) -> np.ndarray:
    """Row softmax over the last (short) axis; the reductions run as T - 1 elementwise steps."""
    top = functools.reduce(np.maximum, [w[..., j] for j in range(w.shape[-1])])
    ex = np.exp(w - top[..., None])
    tot = functools.reduce(np.add, [ex[..., j] for j in range(w.shape[-1])])
    return ex / tot[..., None]


def loss_and_derivatives(x: np.ndarray, y: np.ndarray, *, geo: TokenGeometry, beta: float,
                         hessian: bool = True) -> tuple[np.ndarray, ...]:
    """L = sum_ab (y_ab - softmax_beta(sqrt(1+delta) u)_ab)^2 at reduced coordinates ``x``
    (N, n-1), labels ``y`` (N, T, T); returns (L, gradient (N, n-1), Hessian (N, n-1, n-1))."""
    T, N = geo.tokens, x.shape[0]
    A2 = geo.A.reshape(T * T, -1)
    P = _softmax(beta * (x @ A2.T).reshape(N, T, T))
    r = y - P
    L = np.einsum("nab,nab->n", r, r)
    rbar = np.einsum("nab,nab->na", r, P)
    gw = -2.0 * P * (r - rbar[..., None])
    grad = beta * (gw.reshape(N, T * T) @ A2)
    if not hessian:
        return L, grad
    a = P * (P - r)
    c = np.einsum("nab,nab->na", P, P) - 2.0 * rbar
    diag = 2.0 * (a + P * rbar[..., None])
    pair = np.einsum("nab,nac->nabc", a, P)
    pair = 2.0 * (np.einsum("na,nab,nac->nabc", c, P, P) - pair - pair.transpose(0, 1, 3, 2))
    H = diag.reshape(N, T * T) @ geo.W1 + pair.reshape(N, T**3) @ geo.W2
    H = H.reshape(N, x.shape[1], x.shape[1])
    return L, grad, beta * beta * H


def _newton_direction(H: np.ndarray, g: np.ndarray, floor: float) -> np.ndarray:
    """-H^-1 g where H (N, k, k) is safely positive definite (a vectorised Cholesky with every
    pivot above ``floor``), else -|H|^-1 g with eigenvalues mirrored and floored at ``floor``."""
    with np.errstate(all="ignore"):  # rows that fail a pivot are redone by eigh below
        step, ok = _cholesky_solve(H, g, floor)
    bad = np.nonzero(~ok)[0]
    if bad.size:
        lam, V = np.linalg.eigh(H[bad])
        lam = np.maximum(np.abs(lam), floor)  # negative curvature mirrored
        step[bad] = -np.einsum("nkl,nl->nk", V, np.einsum("nlk,nl->nk", V, g[bad]) / lam)
    return step


def _cholesky_solve(H: np.ndarray, g: np.ndarray, floor: float) -> tuple[np.ndarray, np.ndarray]:
    """-H^-1 g by a Cholesky factorisation vectorised over nodes, and where every pivot > floor."""
    N, k = g.shape
    Lc = np.zeros_like(H)
    ok = np.ones(N, dtype=bool)
    for j in range(k):
        piv = H[:, j, j] - np.einsum("ni,ni->n", Lc[:, j, :j], Lc[:, j, :j])
        ok &= piv > floor
        root = np.sqrt(np.where(ok, piv, 1.0))
        Lc[:, j, j] = root
        for i in range(j + 1, k):
            Lc[:, i, j] = (H[:, i, j] - np.einsum("nl,nl->n", Lc[:, i, :j], Lc[:, j, :j])) / root
    # forward and back substitution
    w = np.zeros_like(g)
    for j in range(k):
        w[:, j] = (g[:, j] - np.einsum("nl,nl->n", Lc[:, j, :j], w[:, :j])) / Lc[:, j, j]
    step = np.zeros_like(g)
    for j in reversed(range(k)):
        step[:, j] = (w[:, j] - np.einsum("nl,nl->n", Lc[:, j + 1:, j], step[:, j + 1:])) \
            / Lc[:, j, j]
    return -step, ok


def _objective(d, omega, y, geo, sigma, beta):
    return np.einsum("nk,nk->n", d, d) / (2 * sigma) + loss_and_derivatives(
        omega + d, y, geo=geo, beta=beta, hessian=False)[0]


def _newton(d, omega, y, geo, sigma, beta, tol, max_iter=200):
    """Damped Newton from ``d`` (N, n-1), vectorised; returns (d, objective, converged)."""
    d = d.copy()
    f = _objective(d, omega, y, geo, sigma, beta)
    active = np.ones(d.shape[0], dtype=bool)
    # gradient tolerance: tol (1/Sigma + beta) bounds the error of d by ~tol, the whole
    # displacement d ~ Sigma |grad| once Sigma < ~tol (next to alpha0); relative below Sigma = 1
    scale = min(1.0 / sigma, 1.0) + beta
    floor = 1e-3 / sigma
    eye = np.eye(d.shape[1]) / sigma
    for _ in range(max_iter):
        idx = np.nonzero(active)[0]
        if idx.size == 0:
            break
        dd, om, yy = d[idx], omega[idx], y[idx]
        _, gl, hl = loss_and_derivatives(om + dd, yy, geo=geo, beta=beta)
        g = dd / sigma + gl
        done = np.linalg.norm(g, axis=1) <= tol * scale
        step = _newton_direction(hl + eye, g, floor)
        big = np.linalg.norm(step, axis=1)
        step *= np.minimum(1.0, 30.0 / np.maximum(big, 1e-300))[:, None]
        slope = np.einsum("nk,nk->n", g, step)
        t = np.ones(idx.size)
        f0 = f[idx]
        for _ in range(40):
            new = dd + t[:, None] * step
            fn = _objective(new, om, yy, geo, sigma, beta)
            ok = (fn <= f0 + 1e-4 * t * slope + 1e-15 * (1.0 + np.abs(f0))) | done
            if np.all(ok):
                break
            t = np.where(ok, t, 0.5 * t)
        keep = ~done
        d[idx] = np.where(keep[:, None], new, dd)
        f[idx] = np.where(keep, fn, f0)
        active[idx] = keep
    return d, f, ~active


def _labels(ell: np.ndarray, geo: TokenGeometry, beta0: float) -> np.ndarray:
    return _softmax(beta0 * np.einsum("abk,nk->nab", geo.A, ell))


def prox_step(omega: np.ndarray, ell: np.ndarray, *, tokens: int, sigma: float,
              beta: float = 1.0, beta0: float = 1.0, tol: float = 1e-10,
              max_iter: int = 200) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Global minimiser d = B^T (p - z) (N, n-1), objective and loss L at p, for the student
    fields ``omega`` = B^T z and teacher fields ``ell`` = B^T z0n (both (N, n-1)).
    Raises :class:`ConvergenceError` when the lowest point found is not converged."""
    geo = geometry(tokens)
    y = _labels(ell, geo, beta0)
    match = (beta0 / beta) * ell
    starts = [omega, match, 0.5 * (omega + match)]
    starts += [omega + (match - omega) @ M.T for M in geo.masks]
    S, N = len(starts), omega.shape[0]
    d0 = np.concatenate([s - omega for s in starts])
    d, f, conv = _newton(d0, np.tile(omega, (S, 1)), np.tile(y, (S, 1, 1)), geo, sigma, beta,
                         tol, max_iter)
    f = f.reshape(S, N)
    best = np.argmin(f, axis=0)
    pick = best * N + np.arange(N)
    d, fmin, ok = d[pick], f[best, np.arange(N)], conv[pick]
    if not np.all(ok):
        i = int(np.nonzero(~ok)[0][0])
        raise ConvergenceError(
            f"proximal Newton iteration, T = {tokens} ({int((~ok).sum())} nodes; first: "
            f"omega = {omega[i].tolist()}, ell = {ell[i].tolist()}, Sigma = {sigma:.6g})",
            last_iterate=d[i].tolist(), residual=None)
    loss = fmin - np.einsum("nk,nk->n", d, d) / (2 * sigma)
    return d, fmin, loss


@functools.lru_cache(maxsize=32)
def gaussian_points(dim: int, points: int, replicates: int, seed: int,
                    sampler: str = "sobol") -> np.ndarray:
    """(replicates, points, dim) standard normal points: scrambled Sobol (one seeded
    scrambling per replicate) through the inverse normal CDF, or ``sampler="mc"``: iid."""
    require(points >= 2 and points & (points - 1) == 0, "points", "a power of 2 >= 2", points)
    require(replicates >= 2, "replicates", ">= 2", replicates)
    require(sampler in ("sobol", "mc"), "sampler", "'sobol' or 'mc'", sampler)
    seqs = np.random.SeedSequence(seed).spawn(replicates)
    if sampler == "mc":
        out = np.array([np.random.default_rng(s).standard_normal((points, dim)) for s in seqs])
    else:
        out = np.array([ndtri(qmc.Sobol(d=dim, scramble=True, seed=np.random.default_rng(s))
                              .random(points)) for s in seqs])
    out.setflags(write=False)
    return out


def _fields(xi: np.ndarray, *, q: float, m: float, Q0n: float) -> tuple[np.ndarray, np.ndarray]:
    """(ell, omega), each (N, n-1), from standard normals xi (N, 2(n-1))."""
    k = xi.shape[1] // 2
    g1, g2 = xi[:, :k], xi[:, k:]
    ell = math.sqrt(Q0n) * g1
    omega = (m / math.sqrt(Q0n)) * g1 + math.sqrt(q - m * m / Q0n) * g2
    return ell, omega


def _check(q: float, m: float, sigma: float, Q0n: float) -> None:
    require(np.isfinite(sigma) and sigma > 0, "Sigma", "a finite real number > 0", sigma)
    require(np.isfinite(q) and q > 0, "q", "a finite real number > 0", q)
    require(np.isfinite(m) and Q0n * q - m * m > 0, "m", "with m^2 < Q0n q", m)


@dataclass(frozen=True)
class QMCMoments:
    """The moments of :class:`~.erm_output.OutputMoments` by randomised QMC: ``mean`` (over the
    replicates used), ``stderr`` (standard error of that mean, per field; empty for a single
    replicate) and ``replicates`` (one OutputMoments per replicate)."""

    mean: OutputMoments
    stderr: dict
    replicates: tuple

    def bar(self, name: str) -> float:
        """A covering error bar: :data:`COVER` standard errors."""
        return COVER * self.stderr[name]


def _combine(reps: list[OutputMoments]) -> QMCMoments:
    vals = {k: np.array([getattr(r, k) for r in reps]) for k in _FIELDS}
    R = len(reps)
    mean = OutputMoments(**{k: float(v.mean()) for k, v in vals.items()},
                         nodes=sum(r.nodes for r in reps))
    se = {k: standard_error(v) for k, v in vals.items()} if R > 1 else {}
    return QMCMoments(mean=mean, stderr=se, replicates=tuple(reps))


def output_moments(*, q: float, m: float, sigma: float, Q0n: float, tokens: int,
                   beta: float = 1.0, beta0: float = 1.0, points: int = 2**12,
                   replicates: int = 16, seed: int = 0, sampler: str = "sobol",
                   only: int | None = None) -> QMCMoments:
    """The output-side expectations at (q, m, Sigma) for ``tokens`` tokens (THEORY 3) by
    randomised QMC in 2(n-1) dimensions; ``only``: use replicate ``only`` alone (its mean,
    no standard error)."""
    _check(q, m, sigma, Q0n)
    geo = geometry(tokens)
    xi_all = gaussian_points(2 * (geo.n - 1), points, replicates, seed, sampler)
    require(only is None or 0 <= only < replicates, "only", f"in [0, {replicates})", only)
    reps = []
    for r in range(replicates) if only is None else [only]:  # one replicate at a time
        ell, omega = _fields(xi_all[r], q=q, m=m, Q0n=Q0n)
        d, fmin, loss = prox_step(omega, ell, tokens=tokens, sigma=sigma, beta=beta,
                                  beta0=beta0)
        per = {"sq": np.einsum("nk,nk->n", d, d),
               "cross_m": np.einsum("nk,nk->n", d, q * ell - m * omega),
               "cross_s": np.einsum("nk,nk->n", d, Q0n * omega - m * ell),
               "envelope": fmin, "loss": loss}
        reps.append(OutputMoments(**{k: float(v.mean()) for k, v in per.items()}, nodes=points))
    return _combine(reps)


@dataclass(frozen=True)
class TestError:
    """Test error by randomised QMC: value, standard error, per-replicate means."""

    value: float
    stderr: float
    replicates: tuple

    def bar(self) -> float:
        return COVER * self.stderr


def generalisation_error(*, q: float, m: float, Q0n: float, tokens: int, beta: float = 1.0,
                         beta0: float = 1.0, points: int = 2**14, replicates: int = 16,
                         seed: int = 1, sampler: str = "sobol",
                         only: int | None = None) -> TestError:
    """E sum_ab [softmax_beta0(sqrt(1+delta) z0n) - softmax_beta(sqrt(1+delta) z)]^2 (THEORY 3,
    against a noisy label: Var z0n = Q0n) by randomised QMC in 2(n-1) dimensions."""
    _check(q, m, 1.0, Q0n)
    geo = geometry(tokens)
    xi_all = gaussian_points(2 * (geo.n - 1), points, replicates, seed, sampler)
    use = range(replicates) if only is None else [only]
    means = []
    for r in use:
        ell, omega = _fields(xi_all[r], q=q, m=m, Q0n=Q0n)
        diff = _labels(ell, geo, beta0) - _labels(omega, geo, beta)
        means.append(float(np.einsum("nab,nab->n", diff, diff).mean()))
    se = standard_error(means)
    return TestError(value=float(np.mean(means)), stderr=se, replicates=tuple(means))


def zero_estimator_rates(*, Q0n: float, tokens: int, beta: float = 1.0, beta0: float = 1.0,
                         points: int = 2**14, replicates: int = 16,
                         seed: int = 2) -> ZeroEstimatorRates:
    """The output side at S_hat = 0 (q = m = Sigma -> 0) per unit alpha, any T (the T = 2 form:
    :func:`.erm_output.zero_estimator_rates`): with g, H the gradient and Hessian of L at
    x = 0 and ell ~ N(0, Q0n I_(n-1)), q_hat_rate = 2 E|g|^2, m_hat_rate = -2 E[g . ell] / Q0n,
    sigma_hat_rate = 2 E tr H, loss = E L(0) (= the test error of the uniform output).  Randomised
    QMC; errors = :data:`COVER` standard errors over the replicates."""
    require(tokens in TOKENS, "tokens", f"one of {TOKENS}", tokens)
    geo = geometry(tokens)
    xi_all = gaussian_points(geo.n - 1, points, replicates, seed)
    reps = []
    for xi in xi_all:
        ell = math.sqrt(Q0n) * xi
        L, g, H = loss_and_derivatives(np.zeros_like(ell), _labels(ell, geo, beta0), geo=geo,
                                       beta=beta)
        reps.append((2 * float(np.einsum("nk,nk->n", g, g).mean()),
                     -2 * float(np.einsum("nk,nk->n", g, ell).mean()) / Q0n,
                     2 * float(np.trace(H, axis1=1, axis2=2).mean()), float(L.mean())))
    arr = np.array(reps)
    names = ("q_hat_rate", "m_hat_rate", "sigma_hat_rate", "loss")
    errors = {k: COVER * standard_error(arr[:, i]) for i, k in enumerate(names)}
    return ZeroEstimatorRates(*(float(v) for v in arr.mean(axis=0)), errors=errors)
