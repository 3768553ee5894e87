"""Finite-size Bayes-optimal GAMP with the RIE matrix denoiser (GAMP-RIE) for the AIM
(THEORY 1, 1.1, check 7 of THEORY 4).

The AIM is a generalised linear model in the symmetric matrix S: sample mu, pair a <= b,

    h_mu,ab = <Z_mu,ab, S>,   Z_mu,ab = (x_a x_b^T + x_b x_a^T) / (2 sqrt D) - delta_ab I / sqrt D,

so that Var h_ab = (1 + delta_ab) Tr(S^2)/D -> (1 + delta_ab) Q0. Writing GAMP over the entries
S_ij (i <= j) and using ||Z_ab||_F^2 ~ (1 + delta_ab) D / 2 (entrywise Z_ab,ij^2 ~ (1 + delta_ab)
(1 + delta_ij) / (2D)), every scalar of the algorithm collapses onto the SE's:

    omega^t_mu,ab = <Z_mu,ab, S_hat^t> - (1 + delta_ab) V^t g^{t-1}_mu,ab         (Onsager)
    g^t = g_out(y_mu, omega^t_mu, V^t),  dg^t_ab = d g_ab / d omega_ab             (derived)
    A^t = -(2 / D^2) sum_mu sum_ab (1 + delta_ab) dg^t_mu,ab                       (-> q_hat)
    R^t = S_hat^t + (2 / (D A^t)) sum_mu sum_ab g^t_mu,ab Z_mu,ab     (= S + sqrt(Delta) GOE)
    S_hat^{t+1} = xi(R^t),  xi = RIE eigenvalue denoiser at Delta^t = 1 / A^t
    V^{t+1} = (2 Delta^t / D^2) div xi(R^t)                                        (-> mmse)

with div xi = sum_k xi'(l_k) + (1/2) sum_{k != l} (xi(l_k) - xi(l_l)) / (l_k - l_l) over the
eigenvalues l of R^t (the divergence with respect to the D(D+1)/2 free entries), S_hat^0 =
sqrt(rho) I (the prior mean), V^0 = 1 (the prior variance), g^{-1} = 0. GOE here has
off-diagonal variance 1/D (semicircle of variance 1), as in :mod:`aim_sym.numerics.wishart`. The
pairs-by-pairs structure V C, C = diag(1 + delta_ab), is the SE's; so g_out is the same derived
function the SE integrates (:mod:`aim_sym.amp_functions`).

Damping (on the output messages g and A; see :func:`amp_iterations`; :func:`run_amp`'s default
"auto" is :func:`damped_run`: 0.5, then 0.7, 0.8, 0.9 on the same data while a run diverges,
i.e. its error exceeds 10 x the prior's mmse of 1, which happens within 2-15 iterations).
Measured at D = 100, T = 2, rho = 0.5, 8 seeds (benchmarks/amp_damping_grid.py, RESULTS.md):
softmax with damping 0.5 diverges for some seeds at alpha <= 0.0635 (all at 0.02), and "auto"
brings every seed down to alpha = 0.02 (damping 0.7-0.8); hardmax is different: at alpha <=
0.04 the same seeds diverge at every damping in 0, 0.2, ..., 0.9 (larger damping is worse for
hardmax: 0.7 already fails at alpha = 0.08, where 0.5 converges), so "auto" leaves those
seeds reported as diverged; they are a small-N (N = alpha D^2 <= 400) failure that damping does
not cure. Undamped,
the iteration diverges at D ~ 50-100: one sample's term (2 / (D A)) g Z_mu in R^t is a rank-one
(rank-two for a != b) spike of operator norm ~ 2 |g| / (A sqrt D), which at these sizes and small
A pops out of the bulk; the spectral denoiser's response to it is then far from the linear
response the Onsager term removes. The same iteration with GOE design matrices of the same
normalisation is stable undamped. With damping, AMP follows the equally damped SE iteration by
iteration and ends above the SE fixed point by a bias that shrinks like 1/D (about 3/D in
||S_hat - S||_F^2 / D for softmax and hardmax at T = 2, rho = 0.5; tests/test_amp.py). At very
small alpha D (e.g. D = 50, alpha = 0.05: N = 125 samples) damping 0.5 is not enough and some
runs diverge (reported, never hidden); see "auto" above.
At finite D the iterates keep fluctuating at the 1e-2 level instead of converging to ``tol``;
the reported error is the last iterate.

The D x D matrix sum g Z is formed as (X^T G X - (sum_a g_aa) I) / sqrt D with G_mu the T x T
symmetric matrix (G_aa = g_aa, G_ab = G_ba = g_ab / 2): the N x D x D tensor of Z's is never built.

The compiled callables: :func:`run_amp` takes ``fns``, the AMP view of a channel
(:func:`aim_sym.amp_functions.amp_functions`: g_out and its Jacobian diagonal, the sampler), and
``cc``, its :class:`aim_sym.compiled.CompiledChannel` for the SE prediction, both compiled by the
caller with the channel's parameter values: ``run_amp(fns=amp_functions(ch, params),
cc=compile_channel(ch, params), alpha=..., rho=..., dim=..., seeds=...)``. This module never
imports sympy nor the symbolic and compiled layers (docs/api.md, "Layers").
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Iterable

import numpy as np

from . import aim_se, wishart
from .records import InputError, atomic_write, mean_stderr, require, standard_error


def pairs(T: int) -> list[tuple[int, int]]:
    """Pairs (a, b), 0 <= a <= b < T, row-major: the order of the derivation's omega_ab."""
    return [(a, b) for a in range(T) for b in range(a, T)]


# ----------------------------------------------------------------------------- data
def sample_target(dim: int, rho: float, rng) -> np.ndarray:
    """S = W W^T / sqrt(R D), W in R^{D x R} iid N(0, 1), R = round(rho D) >= 1 (THEORY 1)."""
    R = max(1, int(round(rho * dim)))
    W = rng.standard_normal((dim, R))
    return W @ W.T / math.sqrt(R * dim)


def preactivations(X: np.ndarray, S: np.ndarray) -> np.ndarray:
    """h_mu,ab = (x_a^T S x_b - delta_ab Tr S) / sqrt D for the pairs a <= b: shape (N, n)."""
    N, T, D = X.shape
    H = np.einsum("nad,nbd->nab", X @ S, X)
    idx = pairs(T)
    h = np.stack([H[:, a, b] for a, b in idx], axis=1)
    diag = np.array([a == b for a, b in idx])
    h[:, diag] -= np.trace(S)
    return h / math.sqrt(D)


MAX_TOKEN_ENTRIES = 2**27  # float64 token entries of one data set (1 GiB)


def check_data_size(*, alpha: float, dim: int, samples: int, per_sample: int) -> None:
    """InputError naming ``alpha`` when one data set's tokens (``samples`` x ``per_sample``
    float64 entries) would exceed :data:`MAX_TOKEN_ENTRIES` (alpha = 1e6 at D = 20 asked for
    119 GiB and failed with a MemoryError)."""
    top = MAX_TOKEN_ENTRIES / (per_sample * samples / alpha)
    require(samples * per_sample <= MAX_TOKEN_ENTRIES, "alpha",
            f"at most {top:.4g} at dim = {dim} (one data set's tokens would take "
            f"{samples * per_sample * 8 / 2**30:.3g} GiB; at most {MAX_TOKEN_ENTRIES * 8 / 2**30:g})",
            alpha)


def generate(fns, *, alpha: float, rho: float, dim: int, rng) -> dict:
    """One data set of the AIM: tokens X (N, T, D), target S, pre-activations h (N, n) and the
    observations AMP sees (``fns.sample``), N = round(alpha D^2)."""
    T = fns.tokens
    N = max(1, int(round(alpha * dim * dim)))
    check_data_size(alpha=alpha, dim=dim, samples=N, per_sample=T * dim)
    S = sample_target(dim, rho, rng)
    X = rng.standard_normal((N, T, dim))
    h = preactivations(X, S)
    obs = fns.sample(h, rng)
    return {"X": X, "S": S, "h": h, "obs": obs, "N": N}


# ----------------------------------------------------------------------------- operators
def forward(X: np.ndarray, M: np.ndarray) -> np.ndarray:
    """<Z_mu,ab, M> for every sample and pair (M symmetric D x D)."""
    return preactivations(X, M)


def adjoint(X: np.ndarray, g: np.ndarray) -> np.ndarray:
    """sum_mu sum_ab g_mu,ab Z_mu,ab as a D x D matrix, via X^T G X (no N x D x D tensor)."""
    N, T, D = X.shape
    Y = np.zeros_like(X)
    tr = 0.0
    for k, (a, b) in enumerate(pairs(T)):
        if a == b:
            Y[:, a] += g[:, k, None] * X[:, a]
            tr += float(g[:, k].sum())
        else:
            Y[:, a] += (g[:, k, None] / 2) * X[:, b]
            Y[:, b] += (g[:, k, None] / 2) * X[:, a]
    M = X.reshape(-1, D).T @ Y.reshape(-1, D)
    M = (M + M.T) / 2
    M[np.diag_indices(D)] -= tr
    return M / math.sqrt(D)


# ----------------------------------------------------------------------------- denoiser
def rie_step(R: np.ndarray, *, delta: float, rho: float, fd: float = 1e-6):
    """S_hat = xi(R) (RIE at noise delta) and V = (2 delta / D^2) div xi(R)."""
    W = wishart
    D = R.shape[0]
    lam, U = np.linalg.eigh(R)
    xi = np.asarray(W.rie_denoiser(lam, rho=rho, delta=delta), dtype=float)
    dxi = (np.asarray(W.rie_denoiser(lam + fd, rho=rho, delta=delta), dtype=float)
           - np.asarray(W.rie_denoiser(lam - fd, rho=rho, delta=delta), dtype=float)) / (2 * fd)
    dl = lam[:, None] - lam[None, :]
    close = np.abs(dl) < 1e-9
    gam = np.where(close, (dxi[:, None] + dxi[None, :]) / 2,
                   (xi[:, None] - xi[None, :]) / np.where(close, 1.0, dl))
    off = gam.sum() - np.trace(gam)
    div = dxi.sum() + off / 2
    S_hat = (U * xi) @ U.T
    return (S_hat + S_hat.T) / 2, 2 * delta * div / D**2


# ----------------------------------------------------------------------------- AMP
def amp_iterations(fns, data: dict, *, rho: float, max_iter: int = 100, tol: float = 1e-8,
                   damping: float = 0.5, variance: str = "divergence", v_floor: float = 1e-13,
                   delta_floor: float = 1e-6, callback: Callable | None = None,
                   blowup: float = 1e6) -> dict:
    """Run GAMP-RIE on one data set; per-iteration error ||S_hat^t - S||_F^2 / D (t = 0 is the
    prior mean), V^t, A^t and the empirical effective noise ||R^t - S||_F^2 / D (-> 1/A^t).

    ``damping`` d damps the output messages: g^t <- (1 - d) g^t + d g^{t-1} and
    A^t <- (1 - d) A^t + d A^{t-1} (from t = 1; fixed points are unchanged). Undamped GAMP
    diverges at D ~ 100 for the token design (see the module docstring). Stops when
    ||S_hat^{t+1} - S_hat^t||_F^2 / D < tol, when V falls below ``v_floor`` or Delta = 1/A^t
    below ``delta_floor`` (perfect recovery; that last step denoises at ``delta_floor``), or
    after ``max_iter`` iterations, or as 'diverged' when the error exceeds ``blowup`` (the
    prior mean's error is mmse = 1, THEORY 1.1). ``variance``: 'divergence' (the AMP's own V^{t+1}) or 'se'
    (V^{t+1} = mmse(Delta^t) of the prior, THEORY 1.1).
    """
    require(variance in ("divergence", "se"), "variance", "'divergence' or 'se'", variance)
    require(0 <= damping < 1, "damping", "in [0, 1)", damping)
    X, S, obs = data["X"], data["S"], data["obs"]
    N, T, D = X.shape
    w = np.asarray(fns.weights, dtype=float)
    S_hat = math.sqrt(rho) * np.eye(D)
    V = 1.0
    g_prev = np.zeros((N, len(w)))
    A_prev = None
    err = [float(np.sum((S_hat - S) ** 2) / D)]
    Vs, As, noise = [V], [], []
    converged, reason = False, "max_iter"
    for t in range(max_iter):
        omega = forward(X, S_hat) - w * V * g_prev
        g, dg = fns.g_dg(obs, omega, V)
        if not (np.all(np.isfinite(g)) and np.all(np.isfinite(dg))):
            reason = "non-finite g_out"
            break
        A = float(-2.0 * np.sum(dg @ w) / D**2)
        if damping and A_prev is not None:
            g = (1 - damping) * g + damping * g_prev
            A = (1 - damping) * A + damping * A_prev
        if not A > 0:
            reason = f"A = {A} <= 0"
            break
        As.append(A)
        delta = 1.0 / A
        floor_hit = delta < delta_floor
        if floor_hit:
            # perfect-recovery regime: the prior side is evaluated at Delta >= delta_floor
            # (numerics.wishart resolves the spectrum down to ~1e-7); last step
            delta = delta_floor
        R = S_hat + (2.0 / (D * A)) * adjoint(X, g)
        noise.append(float(np.sum((R - S) ** 2) / D))
        new, Vnew = rie_step(R, delta=delta, rho=rho)
        if variance == "se":
            Vnew = float(wishart.mmse(delta, rho=rho))
        change = float(np.sum((new - S_hat) ** 2) / D)
        S_hat, V, g_prev, A_prev = new, float(Vnew), g, A
        err.append(float(np.sum((S_hat - S) ** 2) / D))
        Vs.append(V)
        if callback:
            callback(t + 1, err[-1], V, A)
        if not np.isfinite(err[-1]) or err[-1] > blowup:
            reason = "diverged"
            break
        if V < v_floor or floor_hit:
            converged, reason = True, "perfect recovery (V or Delta below floor)"
            break
        if change < tol:
            converged, reason = True, "tol"
            break
    return {"error": err, "V": Vs, "A": As, "noise": noise, "converged": converged,
            "reason": reason, "iterations": len(err) - 1, "S_hat": S_hat}


# ----------------------------------------------------------------------------- test error
def test_error(draw_y: Callable, *, S: np.ndarray, S_hat: np.ndarray, V: float,
               weights: np.ndarray, tokens: int, n_test: int, draws: int, rng) -> dict:
    """AMP's generalisation error on ``n_test`` fresh samples (THEORY 1.5): omega = <Z, S_hat>
    (a new sample carries no Onsager term), h | omega ~ N(omega, (1 + delta_ab) V) with AMP's
    final V. ``draw_y(h, rng)`` draws the output y (N x T^2, all entries) from P_out(. | h).

    * Bayes-optimal predictor y_hat = E[y | omega]: estimated by the mean of ``draws`` draws of
      y from h | omega; the finite-draw excess (the draws' variance / draws, unbiased) is
      subtracted per sample, so the mean is unbiased for E||y - E[y | omega]||^2;
    * plug-in: y drawn at h = omega.

    Returns the means and standard errors over the test samples."""
    D = S.shape[0]
    n = len(weights)
    X = rng.standard_normal((n_test, tokens, D))
    h = preactivations(X, S)
    omega = preactivations(X, S_hat)
    y = draw_y(h, rng)
    plug = np.sum((y - draw_y(omega, rng)) ** 2, axis=1)
    sd = np.sqrt(np.asarray(weights, dtype=float) * max(V, 0.0))
    hs = omega[None] + rng.standard_normal((draws, n_test, n)) * sd
    ys = draw_y(hs.reshape(-1, n), rng).reshape(draws, n_test, -1)
    excess = ys.var(axis=0, ddof=1).sum(axis=1) / draws
    bo = np.sum((y - ys.mean(axis=0)) ** 2, axis=1) - excess
    return {"bayes": float(bo.mean()), "bayes_stderr": standard_error(bo),
            "plugin": float(plug.mean()),
            "plugin_stderr": standard_error(plug)}


# ----------------------------------------------------------------------------- SE side
def se_trajectory(cc, *, alpha: float, rho: float, n_iter: int, damping: float = 0.0,
                  v_floor: float = 1e-13, delta_floor: float = 1e-6):
    """SE iterated from V^0 = 1 with the AMP's damping (q_hat^t <- (1 - d) q_hat(V^t) +
    d q_hat^{t-1}, V^{t+1} = mmse(1 / q_hat^t)): V^t and q_hat^t, which AMP's V^t and A^t
    track iteration by iteration (THEORY 1.1)."""
    se, W = aim_se, wishart
    Q0 = 1.0 + rho
    Vs, qh = [1.0], []
    for t in range(n_iter):
        if Vs[-1] < v_floor:
            Vs.append(0.0)
            qh.append(float("inf"))
            continue
        E, _, _ = se.output_moments(cc, q=Q0 - Vs[-1], V=Vs[-1])
        q = 2 * alpha * E
        if damping and t > 0:
            q = (1 - damping) * q + damping * qh[-1]
        qh.append(float(q))
        if q <= 0:
            Vs.append(1.0)
        elif 1.0 / q < delta_floor:  # perfect recovery: below the prior module's range
            Vs.append(0.0)
        else:
            Vs.append(float(W.mmse(1.0 / q, rho=rho)))
    return Vs, qh


def se_prediction(cc, *, alpha: float, rho: float, max_iter: int = 20000,
                  tol: float = 1e-13) -> dict:
    """The SE fixed point reached from V = 1 (the one AMP tracks), matched to
    :func:`aim_sym.numerics.aim_se.fixed_points` for its error; plus the Bayes-optimal one."""
    se = aim_se
    V = 1.0
    for _ in range(max_iter):
        if V < 1e-14:
            V = 0.0
            break
        Vn = float(se.se_map(cc, alpha=alpha, rho=rho, V=V)[0])
        if abs(Vn - V) < tol:
            V = Vn
            break
        V = Vn
    fps = se.fixed_points(cc, alpha=alpha, rho=rho)
    near = min(fps, key=lambda f: abs(f.mmse - V))
    bo = se.bayes_optimal(fps)
    return {"mmse": near.mmse, "error": near.error, "iterated": V,
            "bayes_optimal_mmse": bo.mmse, "n_fixed_points": len(fps)}


# ----------------------------------------------------------------------------- driver
DAMPING_SCHEDULE = (0.5, 0.7, 0.8, 0.9)
BLOWUP = 10.0


def damped_run(fns, data: dict, *, rho: float, damping, max_iter: int, tol: float,
               variance: str) -> dict:
    """:func:`amp_iterations` with a fixed ``damping``, or with ``damping="auto"``: the
    schedule :data:`DAMPING_SCHEDULE` tried in turn on the same data, moving on when a run
    diverges (error above :data:`BLOWUP` x the prior's mmse of 1, non-finite g_out or A <= 0).
    The small-alpha D failure of damping 0.5 (N = alpha D^2 ~ 300-600 at D = 100) is thus
    met by 0.7-0.9 without slowing the runs that converge at 0.5. The result carries
    ``damping`` (the one used) and ``attempts`` (damping, reason) of every try; when every
    damping fails, the last try is returned (reason says why), never hidden."""
    if damping != "auto":
        r = amp_iterations(fns, data, rho=rho, max_iter=max_iter, tol=tol, damping=damping,
                           variance=variance)
        return dict(r, damping=damping, attempts=[(damping, r["reason"])])
    attempts = []
    for d in DAMPING_SCHEDULE:
        r = amp_iterations(fns, data, rho=rho, max_iter=max_iter, tol=tol, damping=d,
                           variance=variance, blowup=BLOWUP)
        attempts.append((d, r["reason"]))
        if r["converged"] or r["reason"] == "max_iter":
            break
    return dict(r, damping=d, attempts=attempts)


def seeds_of(seeds) -> list[int]:
    if isinstance(seeds, (int, np.integer)):
        require(seeds >= 1, "seeds", "an integer >= 1 or a list of integers", seeds)
        return list(range(int(seeds)))
    out = [int(s) for s in seeds]
    require(len(out) >= 1, "seeds", "non-empty", seeds)
    return out


def _pad(rows: list[list[float]]) -> np.ndarray:
    L = max(len(r) for r in rows)
    return np.array([list(r) + [r[-1]] * (L - len(r)) for r in rows], dtype=float)


def _mean_rows(rows: list[list[float]]) -> list[float]:
    """Per-iteration mean over runs (finished runs held at their last value); [] if none."""
    rows = [r for r in rows if r]
    return _pad(rows).mean(axis=0).tolist() if rows else []


def _write_json(path: str, obj: dict) -> None:
    atomic_write(path, json.dumps(obj, indent=1, default=float))


def _is_amp_functions(fns) -> bool:
    return all(hasattr(fns, a) for a in ("g_dg", "sample", "weights", "tokens", "name"))


def _is_compiled_channel(cc) -> bool:
    return all(hasattr(cc, a) for a in ("discrete", "e_g2_q0", "weights", "S"))


def run_amp(*, fns, cc, alpha: float, rho: float, dim: int,
            seeds: int | Iterable[int] = 5, max_iter: int = 100, tol: float = 1e-8,
            progress: Callable | None = None, rng_seed: int = 0,
            damping: float | str = "auto", variance: str = "divergence", se: bool = True,
            out: str | None = None, draw_y: Callable | None = None, n_test: int = 2000,
            draws: int = 32) -> dict:
    """GAMP-RIE at dimension ``dim`` over several seeds, against the SE (THEORY 4, check 7).

    ``fns``: the channel's compiled AMP functions (:func:`aim_sym.amp_functions.amp_functions`);
    ``cc``: its compiled channel (:func:`aim_sym.compiled.compile_channel`) for the SE
    prediction, None allowed only with ``se=False``; both compiled by the caller with the same
    parameter values (InputError otherwise). Seed s draws its data from
    SeedSequence([rng_seed, s]), so each seed's run is reproducible on its own. Returns a dict:
    ``mean``, ``stderr`` (of the final ||S_hat - S||_F^2 / D over seeds; None for one seed,
    never NaN), ``per_seed``, ``per_iteration`` (mean error at each iteration, finished runs held
    at their last value), ``per_iteration_stderr`` (None for one seed), ``se_prediction`` (SE
    fixed point reached from V = 1, float), ``se`` (details), ``se_trajectory`` (SE V^t),
    ``V``/``A`` (mean AMP V^t, A^t), ``q_hat_se``, ``iterations``, ``converged``, ``time_s``,
    ``interrupted``. A KeyboardInterrupt stops the run and returns the finished seeds
    (``interrupted``: True); with ``out`` the dict is written as JSON (atomically) after every
    seed. Runs that blow up are kept (``reasons`` says 'diverged'), never dropped; ``mean`` is
    None if one of them ended non-finite. ``se=False`` skips the SE.
    ``damping``: a number in [0, 1), or "auto" (default; :func:`damped_run`: 0.5, and on
    divergence 0.7, 0.8, 0.9 on the same data; ``dampings`` lists the one each seed used,
    ``attempts`` every try; the SE trajectory is the one damped at 0.5).
    ``draw_y`` (the channel's output as N x T^2 from pre-activations): each seed's final
    estimate is also scored on ``n_test`` fresh samples (:func:`test_error`, its own stream
    SeedSequence([rng_seed, s, 1])): ``test_error`` (Bayes-optimal predictor, ``draws`` draws
    per sample) and ``test_error_plugin``, means and standard errors over seeds.
    """
    require(_is_amp_functions(fns), "fns",
            "the channel's compiled AMP functions (aim_sym.amp_functions.amp_functions)",
            type(fns).__name__)
    require(cc is None or _is_compiled_channel(cc), "cc",
            "a compiled channel (aim_sym.compiled.compile_channel) or None with se=False",
            type(cc).__name__)
    require(cc is not None or not se, "cc",
            "a compiled channel (aim_sym.compiled.compile_channel) when se=True", cc)
    require(np.isfinite(alpha) and alpha > 0, "alpha", "finite and > 0", alpha)
    require(np.isfinite(rho) and rho > 0, "rho", "finite and > 0", rho)
    require(isinstance(dim, (int, np.integer)) and dim >= 2, "dim", "an integer >= 2", dim)
    check_data_size(alpha=alpha, dim=dim, samples=max(1, int(round(alpha * dim * dim))),
                    per_sample=fns.tokens * dim)
    require(isinstance(max_iter, (int, np.integer)) and max_iter >= 1, "max_iter",
            "an integer >= 1", max_iter)
    require(damping == "auto" or (isinstance(damping, (int, float)) and 0 <= damping < 1),
            "damping", "'auto' or in [0, 1)", damping)
    seed_list = seeds_of(seeds)
    result: dict = {"channel": fns.name, "tokens": fns.tokens, "alpha": float(alpha),
                    "rho": float(rho), "dim": int(dim), "N": int(round(alpha * dim * dim)),
                    "rng_seed": int(rng_seed), "damping": damping, "variance": variance,
                    "se_prediction": None}
    if se:
        pred = se_prediction(cc, alpha=alpha, rho=rho)
        Vse, qh = se_trajectory(cc, alpha=alpha, rho=rho, n_iter=max_iter,
                                damping=DAMPING_SCHEDULE[0] if damping == "auto" else damping)
        result.update(se_prediction=pred["mmse"], se=pred, se_trajectory=Vse, q_hat_se=qh)
    runs: list[dict] = []
    done_seeds: list[int] = []
    t0 = time.perf_counter()
    interrupted = False

    def summarise() -> dict:
        finals = [r["error"][-1] for r in runs]
        m, s = mean_stderr(finals)
        res = dict(result, mean=m, stderr=s, per_seed=finals, seeds=list(done_seeds),
                   iterations=[r["iterations"] for r in runs],
                   converged=[r["converged"] for r in runs],
                   reasons=[r["reason"] for r in runs],
                   dampings=[r["damping"] for r in runs],
                   attempts=[r["attempts"] for r in runs],
                   time_s=time.perf_counter() - t0, interrupted=interrupted,
                   per_iteration=_mean_rows([r["error"] for r in runs]),
                   per_iteration_stderr=None,
                   V=_mean_rows([r["V"] for r in runs]),
                   A=_mean_rows([r["A"] for r in runs]),
                   noise=_mean_rows([r["noise"] for r in runs]))
        if draw_y is not None:
            for key, name in (("bayes", "test_error"), ("plugin", "test_error_plugin")):
                vals = [r["test"][key] for r in runs if r.get("test") is not None]
                res[name + "_per_seed"] = vals
                res[name], res[name + "_stderr"] = mean_stderr(vals)
                if len(vals) == 1:  # one seed: the test samples' own standard error
                    res[name + "_stderr"] = runs[0]["test"][key + "_stderr"]
        if len(runs) > 1:
            E = _pad([r["error"] for r in runs])
            res["per_iteration_stderr"] = (E.std(axis=0, ddof=1) / math.sqrt(len(runs))).tolist()
        return res

    try:
        for i, s in enumerate(seed_list):
            rng = np.random.default_rng(np.random.SeedSequence([int(rng_seed), int(s)]))
            data = generate(fns, alpha=alpha, rho=rho, dim=dim, rng=rng)
            r = damped_run(fns, data, rho=rho, damping=damping, max_iter=max_iter, tol=tol,
                           variance=variance)
            S_hat = r.pop("S_hat")
            if draw_y is not None:
                ok = np.all(np.isfinite(S_hat)) and np.isfinite(r["V"][-1])
                trng = np.random.default_rng(np.random.SeedSequence([int(rng_seed), int(s), 1]))
                r["test"] = test_error(draw_y, S=data["S"], S_hat=S_hat, V=float(r["V"][-1]),
                                       weights=fns.weights, tokens=fns.tokens, n_test=n_test,
                                       draws=draws, rng=trng) if ok else None
            runs.append(r)
            done_seeds.append(s)
            if progress:
                progress(i + 1, len(seed_list),
                         f"seed {s}: error {r['error'][-1]:.6g} after {r['iterations']} "
                         f"iterations ({r['reason']})")
            if out:
                _write_json(out, summarise())
    except KeyboardInterrupt:
        interrupted = True
    res = summarise()
    if out:
        _write_json(out, res)
    return res


__all__ = ["run_amp", "amp_iterations", "test_error", "generate", "forward", "adjoint", "rie_step",
           "se_prediction", "se_trajectory", "InputError"]
