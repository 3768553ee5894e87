"""Finite-size training of one tied attention layer by full-batch gradient methods: the ERM
problem of THEORY 3 at dimension d, the finite-size check of its state evolution.

**Data** (THEORY 1 with d = D). Tokens x_1..x_T in R^d iid N(0, I_d), n = round(alpha d^2)
samples. Teacher S0 = W0 W0^T / sqrt(R d), W0 in R^{d x R} iid N(0, 1), R = round(kappa0 d),
so Tr S0^2 / d -> Q0 = 1 + kappa0. Pre-activations, centred as in THEORY 1.1,

    h_ab(S) = (x_a^T S x_b - delta_ab Tr S) / sqrt(d),     Var h_ab = (1 + delta_ab) Tr S^2 / d,

a symmetric T x T matrix. Labels y = softmax_beta0(h(S0) + xi) row-wise, xi symmetric with
Var xi_aa = Delta and Var xi_ab = Delta/2 (a != b), one draw per unordered pair.

**Why this matches the SE's output side.** THEORY 3 writes the SE per flat entry a <= b with
z_ab ~ N(0, Q) and puts sqrt(1 + delta_ab) inside the softmax, and its test error uses
Var z0 = Q0 + Delta/2. The natural pre-activation above already has h_ab = sqrt(1 + delta_ab) z_ab
with Var z_ab = Tr S^2/d, and a noise of variance Delta/2 on every z_ab is the noise
sqrt(1 + delta_ab) * N(0, Delta/2) on h_ab: Delta on the diagonal, Delta/2 off it. So at finite
size no extra rescaling is applied: softmax of the plain h, label noise (Delta, Delta/2). (The
authors' Adam code builds exactly this: centred h, symmetric noise with the off-diagonal scaled
by 1/sqrt 2.)

**Student.** S = W^T W / sqrt(p d), W in R^{p x d}, p = round(kappa d); output
f = softmax_beta(h(S)); total loss

    L(W) = sum_mu ||y_mu - f(x_mu)||_F^2 + lambda_W ||W||_F^2,   lambda_W = lambda_t / sqrt(kappa),

(all T^2 entries), i.e. lambda_t d Tr S = lambda_t d ||S||_* on the PSD S. Reported per d^2
(the SE's ``train``).

**Gradient.** With c = sqrt(p d), U_mu = X_mu W^T (T x p), A_mu = U_mu U_mu^T / c,
H_mu = (A_mu - (||W||_F^2 / c) I) / sqrt(d), f = softmax_beta(H) row-wise, E = 2 (f - y),
R = dL/dH = beta f o (E - rowsum(E o f)):

    dL/dW = (2 / (c sqrt d)) [ sum_mu (R_mu + R_mu^T)/2 U_mu ]^T X_mu  - (2 / (c sqrt d)) sum_mu tr(R_mu) W
            + 2 lambda_W W.

Equivalently dL/dW = (2/c) W M with M = G_s + lambda_t d I, G_s = sym(dL_data/dS): a
stationary point has S M = 0 (the nuclear-norm KKT condition on the live eigenvectors).

**Optimiser.** L-BFGS (scipy, strong-Wolfe line search; ``method="lbfgs"``, the default) or plain
gradient descent with an Armijo backtracking line search and a step that grows by 2 after each
accepted step (``method="gd"``). Both stop when the **relative gradient norm**
||grad L(W_k)||_F / ||grad L(W_0)||_F falls below ``tol`` (or at ``max_iter``: reported as not
converged, never hidden). The authors used Adam (lr 0.1, stop when the loss changes by less
than 1e-7); a stationary point does not depend on the optimiser, only the speed and the
convergence test do.

**Large lambda.** At W = 0 the gradient vanishes for every lambda (the factorisation); W = 0 is a
local minimum iff M(0) = G_s(0) + lambda_t d I is PSD, i.e. lambda_t >= lambda_zero =
max(0, lambda_max(-G_s(0))) / d (:func:`zero_solution_lambda`). At S = 0, f = 1/T, so
R = (2 beta / T)(1/T - y) and G_s(0) = sum_mu (X^T R_sym X - tr(R) I)/sqrt(d): the
subgradient condition 0 in dL_data(0) + lambda_t d dTr(0) of the nuclear norm on PSD matrices.

Everything here is numpy (+ scipy.optimize); no sympy, nothing from the symbolic layers.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .records import (
    ConvergenceError,
    is_finite_real,
    mean_stderr,
    require,
    require_reals,
    standard_error,
)

__all__ = ["GDProblem", "GDData", "TrainResult", "sample_teacher", "preactivations",
           "label_noise", "generate", "loss_and_gradient", "train", "evaluate",
           "zero_solution_lambda", "rank_of", "run_instances", "run_averaged", "RANK_THRESHOLD",
           "METRICS"]

# eigenvalues of S_hat counted in the rank: above RANK_THRESHOLD * (Tr S_hat / d) ... see rank_of
RANK_THRESHOLD = 1e-4
METRICS = ("train", "test", "test_clean", "mse", "rank", "q", "m", "trace")


# ----------------------------------------------------------------------------- specification
@dataclass(frozen=True, kw_only=True)
class GDProblem:
    """Teacher, noise and student of the finite-size ERM (THEORY 3): rank ratio ``kappa0``,
    pre-activation noise variance ``Delta``, weight decay ``lam`` (lambda_tilde), ``tokens`` T,
    inverse temperatures ``beta`` (student) and ``beta0`` (teacher), student width ``kappa``."""

    kappa0: float
    Delta: float
    lam: float
    tokens: int = 2
    beta: float = 1.0
    beta0: float = 1.0
    kappa: float = 1.0

    def __post_init__(self) -> None:
        require_reals(self, positive=("kappa0", "beta", "beta0", "kappa"),
                      nonnegative=("Delta", "lam"))
        require(isinstance(self.tokens, (int, np.integer)) and self.tokens >= 2, "tokens",
                "an integer >= 2", self.tokens)

    @property
    def Q0(self) -> float:
        return 1.0 + self.kappa0

    def lam_W(self) -> float:
        """lambda_W = lambda_t / sqrt(kappa), the weight decay on ||W||_F^2."""
        return self.lam / math.sqrt(self.kappa)



@dataclass(frozen=True)
class GDData:
    """One training set: tokens ``X`` (n, T, d), labels ``y`` (n, T, T), teacher ``S0``."""

    X: np.ndarray
    y: np.ndarray
    S0: np.ndarray

    @property
    def dim(self) -> int:
        return int(self.X.shape[2])


# ----------------------------------------------------------------------------- data
def sample_teacher(dim: int, kappa0: float, rng: np.random.Generator) -> np.ndarray:
    """S0 = W0 W0^T / sqrt(R d), W0 in R^{d x R} iid N(0, 1), R = max(1, round(kappa0 d))."""
    R = max(1, int(round(kappa0 * dim)))
    W0 = rng.standard_normal((dim, R))
    return W0 @ W0.T / math.sqrt(R * dim)


def preactivations(X: np.ndarray, S: np.ndarray) -> np.ndarray:
    """h_mu,ab = (x_a^T S x_b - delta_ab Tr S) / sqrt(d): shape (n, T, T), symmetric."""
    d = X.shape[2]
    H = np.matmul(X @ S, np.swapaxes(X, 1, 2))
    H -= np.trace(S) * np.eye(X.shape[1])
    return H / math.sqrt(d)


def label_noise(n: int, tokens: int, Delta: float, rng: np.random.Generator) -> np.ndarray:
    """Symmetric noise (n, T, T): variance Delta on the diagonal, Delta/2 off it."""
    Z = rng.standard_normal((n, tokens, tokens))
    iu = np.triu_indices(tokens, 1)
    Z[:, iu[1], iu[0]] = Z[:, iu[0], iu[1]]
    scale = np.full((tokens, tokens), math.sqrt(Delta / 2))
    np.fill_diagonal(scale, math.sqrt(Delta))
    return Z * scale


def softmax(H: np.ndarray, beta: float) -> np.ndarray:
    """Row-wise softmax of beta H over the last axis."""
    Z = beta * H
    Z = Z - Z.max(axis=-1, keepdims=True)
    np.exp(Z, out=Z)
    Z /= Z.sum(axis=-1, keepdims=True)
    return Z


def teacher_labels(X: np.ndarray, S0: np.ndarray, problem: GDProblem,
                   rng: np.random.Generator) -> np.ndarray:
    """y = softmax_beta0(h(S0) + xi), xi from :func:`label_noise`."""
    H = preactivations(X, S0)
    if problem.Delta > 0:
        H = H + label_noise(X.shape[0], X.shape[1], problem.Delta, rng)
    return softmax(H, problem.beta0)


def generate(problem: GDProblem, *, alpha: float, dim: int, rng: np.random.Generator,
             S0: np.ndarray | None = None) -> GDData:
    """A teacher (unless ``S0`` is given) and n = max(1, round(alpha d^2)) labelled samples."""
    require(is_finite_real(alpha) and alpha > 0, "alpha", "a finite real > 0", alpha)
    require(isinstance(dim, (int, np.integer)) and dim >= 2, "dim", "an integer >= 2", dim)
    if S0 is None:
        S0 = sample_teacher(dim, problem.kappa0, rng)
    n = max(1, int(round(alpha * dim * dim)))
    X = rng.standard_normal((n, problem.tokens, dim))
    return GDData(X=X, y=teacher_labels(X, S0, problem, rng), S0=S0)


# ----------------------------------------------------------------------------- loss
def student_width(problem: GDProblem, dim: int) -> int:
    """p = max(1, round(kappa d))."""
    return max(1, int(round(problem.kappa * dim)))


def student_matrix(W: np.ndarray) -> np.ndarray:
    """S = W^T W / sqrt(p d)."""
    p, d = W.shape
    return W.T @ W / math.sqrt(p * d)


def loss_and_gradient(W: np.ndarray, data: GDData, problem: GDProblem, *,
                      gradient: bool = True) -> tuple[float, np.ndarray | None, float]:
    """Total loss L(W) (data + lambda_W ||W||_F^2, not normalised), its gradient in W (None if
    ``gradient`` is False) and the data part alone. Vectorised over samples (module docstring)."""
    X, y = data.X, data.y
    n, T, d = X.shape
    p = W.shape[0]
    c = math.sqrt(p * d)
    sd = math.sqrt(d)
    U = (X.reshape(n * T, d) @ W.T).reshape(n, T, p)
    trS = float(np.sum(W * W)) / c
    H = np.matmul(U, np.swapaxes(U, 1, 2)) / c
    H -= trS * np.eye(T)
    H /= sd
    f = softmax(H, problem.beta)
    diff = f - y
    data_loss = float(np.sum(diff * diff))
    reg = problem.lam_W() * float(np.sum(W * W))
    if not gradient:
        return data_loss + reg, None, data_loss
    E = 2.0 * diff
    R = problem.beta * f * (E - np.sum(E * f, axis=-1, keepdims=True))
    Rs = 0.5 * (R + np.swapaxes(R, 1, 2))
    V = np.matmul(Rs, U)  # (n, T, p)
    grad = (2.0 / (c * sd)) * (V.reshape(n * T, p).T @ X.reshape(n * T, d))
    tr_R = float(np.einsum("naa->", R))
    grad -= (2.0 * tr_R / (c * sd)) * W
    grad += 2.0 * problem.lam_W() * W
    return data_loss + reg, grad, data_loss


def data_gradient_S(S: np.ndarray, data: GDData, problem: GDProblem) -> np.ndarray:
    """G_s = sym(dL_data/dS) at a symmetric S (d x d): sum_mu (X^T R_sym X - tr(R) I)/sqrt(d)."""
    X = data.X
    n, T, d = X.shape
    f = softmax(preactivations(X, S), problem.beta)
    E = 2.0 * (f - data.y)
    R = problem.beta * f * (E - np.sum(E * f, axis=-1, keepdims=True))
    Rs = 0.5 * (R + np.swapaxes(R, 1, 2))
    G = np.einsum("nad,nab,nbe->de", X, Rs, X, optimize=True)
    G -= float(np.einsum("naa->", R)) * np.eye(d)
    return G / math.sqrt(d)


def zero_solution_lambda(data: GDData, problem: GDProblem) -> float:
    """lambda_zero = max(0, lambda_max(-G_s(0))) / d: W = 0 is a local minimum of the trained
    loss iff lambda_t >= lambda_zero (the subgradient condition of lambda_t d ||S||_* at S = 0)."""
    d = data.dim
    G = data_gradient_S(np.zeros((d, d)), data, problem)
    return max(0.0, float(np.linalg.eigvalsh(-G)[-1])) / d


# ----------------------------------------------------------------------------- training
@dataclass(frozen=True)
class TrainResult:
    """The trained W, the loss per d^2 (regulariser included), the relative gradient norm
    reached, iterations, gradient evaluations, whether the stopping rule triggered, the
    snapshot of W when the relative gradient first fell below 10 tol (the refinement pair of
    :func:`run_instances`), and the loss history per d^2 (one entry per iteration)."""

    W: np.ndarray
    loss: float
    rel_grad: float
    iterations: int
    evaluations: int
    converged: bool
    W_coarse: np.ndarray
    history: tuple
    method: str


def init_student(problem: GDProblem, dim: int, rng: np.random.Generator, *,
                 scale: float = 1.0) -> np.ndarray:
    """W iid N(0, scale^2), shape (p, d) (the authors' initialisation is scale 1: S at the
    scale of a Wishart target)."""
    return scale * rng.standard_normal((student_width(problem, dim), dim))


def train(data: GDData, problem: GDProblem, W0: np.ndarray, *, method: str = "lbfgs",
          tol: float = 1e-6, max_iter: int = 20_000,
          callback: Callable[[int, float, float], None] | None = None) -> TrainResult:
    """Minimise L(W) from ``W0`` until ||grad L(W_k)|| <= tol ||grad L(W_0)|| (module docstring).
    ``method``: "lbfgs" (scipy L-BFGS-B without bounds, strong-Wolfe line search, memory 20)
    or "gd" (gradient descent, Armijo backtracking, step doubled after each accepted step).
    ``callback(iteration, loss_per_d2, rel_grad)`` after every iteration."""
    require(method in ("lbfgs", "gd"), "method", "'lbfgs' or 'gd'", method)
    require(is_finite_real(tol) and 0 < tol < 1, "tol", "a real in (0, 1)", tol)
    require(isinstance(max_iter, (int, np.integer)) and max_iter >= 1, "max_iter",
            "an integer >= 1", max_iter)
    d = data.dim
    norm = float(d * d)
    shape = W0.shape
    L0, g0, _ = loss_and_gradient(W0, data, problem)
    g0n = float(np.linalg.norm(g0))
    if g0n == 0.0:  # W0 = 0 or an exact stationary point: nothing to do
        return TrainResult(W=W0.copy(), loss=L0 / norm, rel_grad=0.0, iterations=0,
                           evaluations=1, converged=True, W_coarse=W0.copy(),
                           history=(L0 / norm,), method=method)
    state = {"evals": 1, "coarse": None, "last": (L0, g0, W0.ravel().copy())}
    history = [L0 / norm]

    def fun(w: np.ndarray) -> tuple[float, np.ndarray]:
        L, g, _ = loss_and_gradient(w.reshape(shape), data, problem)
        state["evals"] += 1
        state["last"] = (L, g, w.copy())
        return L, g.ravel()

    def record(L: float, g: np.ndarray, w: np.ndarray) -> float:
        rel = float(np.linalg.norm(g)) / g0n
        history.append(L / norm)
        if state["coarse"] is None and rel <= 10 * tol:
            state["coarse"] = w.reshape(shape).copy()
        if callback is not None:
            callback(len(history) - 1, L / norm, rel)
        return rel

    if method == "lbfgs":
        from scipy.optimize import minimize

        rel_box = [1.0]

        def cb(intermediate_result) -> None:
            L, g, w = state["last"]
            if not np.array_equal(w, intermediate_result.x):
                L, g = fun(intermediate_result.x)
                w = intermediate_result.x
            rel_box[0] = record(L, g, w)
            if rel_box[0] <= tol:
                raise StopIteration

        res = minimize(fun, W0.ravel().copy(), jac=True, method="L-BFGS-B", callback=cb,
                       options={"maxiter": int(max_iter), "maxcor": 20, "ftol": 0.0,
                                "gtol": 0.0, "maxfun": 10 * int(max_iter), "maxls": 50})
        w = res.x
        L, g, _ = loss_and_gradient(w.reshape(shape), data, problem)
        rel = float(np.linalg.norm(g)) / g0n
        iters = len(history) - 1
    else:
        w = W0.ravel().copy()
        L, g = L0, g0.ravel()
        step = 1.0 / g0n
        rel, iters = 1.0, 0
        while iters < max_iter and rel > tol:
            gg = float(g @ g)
            while True:
                w_new = w - step * g
                L_new, g_new = fun(w_new)
                if L_new <= L - 0.5 * step * gg or step < 1e-300:
                    break
                step *= 0.5
            w, L, g = w_new, L_new, g_new
            step *= 2.0
            iters += 1
            rel = record(L, g, w)
    W = w.reshape(shape)
    coarse = state["coarse"] if state["coarse"] is not None else W
    return TrainResult(W=W.copy(), loss=L / norm, rel_grad=rel, iterations=iters,
                       evaluations=state["evals"], converged=bool(rel <= tol),
                       W_coarse=coarse.copy(), history=tuple(history), method=method)


# ----------------------------------------------------------------------------- measurements
def rank_of(S: np.ndarray, *, threshold: float = RANK_THRESHOLD) -> float:
    """Fraction of eigenvalues of S above ``threshold`` x (largest eigenvalue): the learned
    rank mu_delta((eps, inf)) of THEORY 3 (see docs/erm_gd.md for the choice of threshold)."""
    ev = np.linalg.eigvalsh(S)
    top = float(ev[-1])
    if top <= 0:
        return 0.0
    return float(np.mean(ev > threshold * top))


def test_error(S: np.ndarray, S0: np.ndarray, problem: GDProblem, *, n_test: int,
               rng: np.random.Generator, batch: int = 4096) -> dict:
    """E sum_ab (y - f(x))^2 on ``n_test`` fresh samples, y the noisy teacher label (the SE's
    ``test``), and ``test_clean`` against the noiseless label softmax_beta0(h(S0)); means and
    their Monte Carlo standard errors ``test_mc_error``, ``test_clean_mc_error``."""
    d = S.shape[0]
    T = problem.tokens
    noisy, clean = [], []
    left = n_test
    while left > 0:
        m = min(batch, left)
        X = rng.standard_normal((m, T, d))
        H0 = preactivations(X, S0)
        y_clean = softmax(H0, problem.beta0)
        y = (softmax(H0 + label_noise(m, T, problem.Delta, rng), problem.beta0)
             if problem.Delta > 0 else y_clean)
        f = softmax(preactivations(X, S), problem.beta)
        noisy.append(np.sum((y - f) ** 2, axis=(1, 2)))
        clean.append(np.sum((y_clean - f) ** 2, axis=(1, 2)))
        left -= m
    out = {}
    for name, vals in (("test", noisy), ("test_clean", clean)):
        v = np.concatenate(vals)
        out[name] = float(v.mean())
        out[f"{name}_mc_error"] = standard_error(v)
    return out


def evaluate(W: np.ndarray, data: GDData, problem: GDProblem, *, n_test: int,
             rng: np.random.Generator, rank_threshold: float = RANK_THRESHOLD) -> dict:
    """The SE's quantities of a trained W: train (loss per d^2, regulariser included), test
    and test_clean (:func:`test_error`, with their Monte Carlo standard errors),
    mse = ||S - S0||_F^2 / d, rank (and rank_coarse at 10x the threshold), q = Tr S^2 / d,
    m = Tr S S0 / d, Q0_instance = Tr S0^2 / d, trace = Tr S / d."""
    d = data.dim
    S = student_matrix(W)
    L, _, data_loss = loss_and_gradient(W, data, problem, gradient=False)
    return {"train": L / (d * d), "train_data": data_loss / (d * d),
            **test_error(S, data.S0, problem, n_test=n_test, rng=rng),
            "mse": float(np.sum((S - data.S0) ** 2)) / d,
            "rank": rank_of(S, threshold=rank_threshold),
            "rank_coarse": rank_of(S, threshold=10 * rank_threshold),
            "q": float(np.sum(S * S)) / d, "m": float(np.sum(S * data.S0)) / d,
            "Q0_instance": float(np.sum(data.S0 * data.S0)) / d, "trace": float(np.trace(S)) / d}


def run_instances(problem: GDProblem, *, alpha: float, dim: int, seeds: int = 4,
                  rng_seed: int = 0, method: str = "lbfgs", tol: float = 1e-6,
                  max_iter: int = 20_000, n_test: int = 10_000, init_scale: float = 1.0,
                  progress: Callable[[int, dict], None] | None = None) -> dict:
    """Train ``seeds`` independent instances (each its own teacher, data, initialisation and
    test set, from SeedSequence([rng_seed, s])) and measure :data:`METRICS`.

    Returns ``per_seed`` (one dict per instance: the metrics, their values at the coarse stop
    10 tol under ``coarse``, iterations, converged, rel_grad, lambda_zero, time_s), ``mean`` and
    ``stderr`` (standard error over instances; None for one seed) of every metric, and
    ``optimisation_error``: the largest |metric(tol) - metric(10 tol)| over instances (the
    refinement estimate of the error left by stopping; the test error's shares one test set).
    """
    require(isinstance(seeds, (int, np.integer)) and seeds >= 1, "seeds", "an integer >= 1",
            seeds)
    require(isinstance(rng_seed, (int, np.integer)) and rng_seed >= 0, "rng_seed",
            "an integer >= 0", rng_seed)
    require(isinstance(n_test, (int, np.integer)) and n_test >= 2, "n_test", "an integer >= 2",
            n_test)
    require(is_finite_real(init_scale) and init_scale > 0, "init_scale", "a finite real > 0", init_scale)
    per_seed = []
    for s in range(int(seeds)):
        t0 = time.perf_counter()
        ss = np.random.SeedSequence([int(rng_seed), s])
        r_data, r_init, r_test = (np.random.default_rng(c) for c in ss.spawn(3))
        data = generate(problem, alpha=alpha, dim=dim, rng=r_data)
        W0 = init_student(problem, dim, r_init, scale=init_scale)
        tr = train(data, problem, W0, method=method, tol=tol, max_iter=max_iter)
        test_state = r_test.bit_generator.state
        row = evaluate(tr.W, data, problem, n_test=n_test, rng=r_test)
        r_test.bit_generator.state = test_state  # the same test set for the coarse iterate
        coarse = evaluate(tr.W_coarse, data, problem, n_test=n_test, rng=r_test)
        row.update(coarse={k: coarse[k] for k in METRICS}, iterations=tr.iterations,
                   evaluations=tr.evaluations, converged=tr.converged, rel_grad=tr.rel_grad,
                   lambda_zero=zero_solution_lambda(data, problem) if dim <= 400 else None,
                   n=int(data.X.shape[0]), time_s=time.perf_counter() - t0)
        per_seed.append(row)
        if progress is not None:
            progress(s, row)
    mean, stderr = {}, {}
    for k in (*METRICS, "train_data", "Q0_instance"):
        mean[k], stderr[k] = mean_stderr([r[k] for r in per_seed])
    opt = {k: max(abs(r[k] - r["coarse"][k]) for r in per_seed) for k in METRICS}
    if any(v is None for v in mean.values()):
        raise ConvergenceError("a training run ended with a non-finite loss",
                               last_iterate=mean, residual=None)
    return {"alpha": float(alpha), "dim": int(dim), "seeds": int(seeds),
            "rng_seed": int(rng_seed), "method": method, "tol": float(tol),
            "n_test": int(n_test), "per_seed": per_seed, "mean": mean, "stderr": stderr,
            "optimisation_error": opt,
            "converged": all(r["converged"] for r in per_seed)}


def run_averaged(problem: GDProblem, *, alpha: float, dim: int, seeds: int = 4,
                 students: int = 8, rng_seed: int = 0, method: str = "lbfgs", tol: float = 1e-6,
                 max_iter: int = 20_000, init_scale: float = 1.0) -> dict:
    """The AIM paper's gradient-descent comparison (THEORY 1): on each of ``seeds`` instances
    (own teacher and data), train ``students`` students from independent initialisations on the
    same data and average their S; the error ||mean_k S_k - S0||_F^2 / d against the
    Bayes-optimal mmse. Use it with Delta = 0, lam = 0 and kappa = kappa0 (the authors' student
    has the teacher's width). Returns ``per_seed`` (mse of the average, mean single-student
    mse, the running mse after 1, 2, 4, ... students, converged), ``mean``/``stderr`` of
    ``mse`` and ``mse_single`` over instances."""
    require(isinstance(students, (int, np.integer)) and students >= 1, "students",
            "an integer >= 1", students)
    require(isinstance(seeds, (int, np.integer)) and seeds >= 1, "seeds", "an integer >= 1",
            seeds)
    per_seed = []
    for s in range(int(seeds)):
        t0 = time.perf_counter()
        ss = np.random.SeedSequence([int(rng_seed), s, 2])
        r_data, *r_inits = (np.random.default_rng(c) for c in ss.spawn(1 + int(students)))
        data = generate(problem, alpha=alpha, dim=dim, rng=r_data)
        S_sum = np.zeros((dim, dim))
        singles, running, conv = [], {}, True
        for k, r in enumerate(r_inits, start=1):
            W0 = init_student(problem, dim, r, scale=init_scale)
            tr = train(data, problem, W0, method=method, tol=tol, max_iter=max_iter)
            conv = conv and tr.converged
            S = student_matrix(tr.W)
            S_sum += S
            singles.append(float(np.sum((S - data.S0) ** 2)) / dim)
            if k & (k - 1) == 0 or k == students:
                running[k] = float(np.sum((S_sum / k - data.S0) ** 2)) / dim
        per_seed.append({"mse": running[int(students)], "mse_single": float(np.mean(singles)),
                         "running": running, "converged": conv,
                         "time_s": time.perf_counter() - t0})
    mean, stderr = {}, {}
    for k in ("mse", "mse_single"):
        mean[k], stderr[k] = mean_stderr([r[k] for r in per_seed])
    return {"alpha": float(alpha), "dim": int(dim), "seeds": int(seeds),
            "students": int(students), "per_seed": per_seed, "mean": mean, "stderr": stderr,
            "converged": all(r["converged"] for r in per_seed)}
