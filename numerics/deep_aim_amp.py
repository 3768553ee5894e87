"""Finite-size GAMP-RIE for the deep AIM, two tied attention layers at T = 2 (THEORY 1.1, 1.6;
check 7 of THEORY 4; docs/deep_aim.md, section "Finite-size GAMP-RIE").

Data: two independent symmetric targets S_l = W_l W_l^T / sqrt(R_l D) (widths rho_l), the SAME
tokens x_mu for both, pre-activations H^l_mu,ab = <Z_mu,ab, S_l> (:mod:`.amp`'s design), and the
deep attention output y_mu = softmax_beta(A H^2 A^T), A = skip I + softmax_beta(H^1)
(:func:`.deep_aim.output`), of which AMP sees the sufficient statistic z = (z1, z2)
(:func:`.deep_aim.statistics_from_output`).

GAMP over the stacked parameter (S_1, S_2): the design of index l touches only the block S_l, so
every cross-index term of GAMP's variances vanishes and the iteration is :mod:`.amp`'s, run once per
index with a joint output function:

    omega^l_mu,ab = <Z_mu,ab, S_hat_l> - (1 + delta_ab) V_l g^{l,t-1}_mu,ab          (Onsager)
    g^l = grad_{omega^l} log Z_out(z; omega^1, omega^2, V_1, V_2)
        = (E[H^l | z, omega, V] - omega^l) / V_l            (both layers' omega enter)
    A_l = -(2 / D^2) sum_mu sum_ab (1 + delta_ab) dg^l_ab / d omega^l_ab              (-> q_hat_l)
    R_l = S_hat_l + (2 / (D A_l)) sum_mu sum_ab g^l_mu,ab Z_mu,ab,
    S_hat_l, V_l <- amp.rie_step(R_l, delta = 1 / A_l, rho = rho_l)                    (-> mmse_l)

The posterior is the SE's own quadrature (:func:`.deep_aim_se.posterior`: the inner trapezoid over
H^1's seen part, H^2's fixed by the fibre; at skip < 1 the model's inner rule, the line rule by
default, which follows a narrow posterior), in the whitened coordinates of
:func:`.deep_aim_se.whiten`. The Onsager/variance term A_l comes from the **posterior covariance**,
not from the Nishimori identity: in whitened coordinates d g^l / d omega^l = (Cov_l[. | z] - V_l I)
/ V_l^2, and since C = diag(1 + delta_ab) is diagonal and whitening satisfies L C L^T = I,
sum_ab (1 + delta_ab) dg_ab / d omega_ab = tr(L C L^T J) = (tr Cov_l - 2 V_l) / V_l^2 exactly (the
unseen third whitened coordinate has Cov = V_l and contributes 0). Averaged over the data this is
minus the SE's "variance" estimator of E|g_l|^2, so A_l -> q_hat_l = 2 alpha E|g_l|^2.

Damping as in :mod:`.amp` (on g and A of each index; "auto" = :data:`.amp.DAMPING_SCHEDULE` on
the same data while a run diverges). The reported error per index is the last iterate's
||S_hat_l - S_l||_F^2 / D, the normalisation of the SE's mmse_l (1 at S_hat = sqrt(rho_l) I).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable

import numpy as np

from . import amp, wishart
from .deep_aim import output, statistics_from_output
from .deep_aim_se import INNER_STEPS, DeepAimSE, posterior, se_map, unwhiten_gradient, whiten
from .records import mean_stderr, require

#: samples per chunk of the posterior quadrature (rows x ~3e3-2e4 inner nodes)
CHUNK = 256
#: smallest skip c served: c >= 1 (the trapezoid) and c in [0.5, 1) with the SE's line inner rule
#: (``DeepAimSE(inner="line")``, the default), whose g_out and Onsager identity were checked at
#: c = 0.5 and 0 and whose AMP was compared with the SE at c = 0.5 (docs/deep_aim.md section 6,
#: "c = 0.5"); below 0.5 AMP is not measured
SKIP_MIN = 0.5
#: a run whose error exceeds this (the prior's mmse is 1) is 'diverged' (as :data:`.amp.BLOWUP`)
BLOWUP = amp.BLOWUP


def _symmetric(h: np.ndarray) -> np.ndarray:
    """(N, 3) entries (h11, h12, h22) -> (N, 2, 2) symmetric matrices."""
    return np.stack([np.stack([h[:, 0], h[:, 1]], -1), np.stack([h[:, 1], h[:, 2]], -1)], -2)


# ----------------------------------------------------------------------------- data
def generate(model: DeepAimSE, *, alpha: float, dim: int, rng) -> dict:
    """One data set: tokens X (N, 2, D), targets S1, S2, pre-activations h1, h2 (N, 3; pairs
    (11, 12, 22)), outputs y (N, 2, 2) = deep_aim.output(H1, H2) and the statistics z1, z2 AMP
    uses; N = round(alpha D^2) (THEORY 1, 1.6)."""
    N = max(1, int(round(alpha * dim * dim)))
    amp.check_data_size(alpha=alpha, dim=dim, samples=N, per_sample=2 * dim)
    S1 = amp.sample_target(dim, model.rho1, rng)
    S2 = amp.sample_target(dim, model.rho2, rng)
    X = rng.standard_normal((N, 2, dim))
    h1, h2 = amp.preactivations(X, S1), amp.preactivations(X, S2)
    y = output(_symmetric(h1), _symmetric(h2), skip=model.skip, beta=model.beta)
    with np.errstate(divide="ignore", invalid="ignore"):
        z1, z2 = statistics_from_output(y, beta=model.beta)
    require(bool(np.all(np.isfinite(z1)) and np.all(np.isfinite(z2))), "beta",
            "small enough that y = softmax(beta M) does not saturate in double precision",
            model.beta)
    return {"X": X, "S1": S1, "S2": S2, "h1": h1, "h2": h2, "y": y, "z1": z1, "z2": z2, "N": N}


# ----------------------------------------------------------------------------- output function
def g_out(model: DeepAimSE, *, z1, z2, omega1, omega2, v1: float, v2: float,
          h_in: float = INNER_STEPS[1], chunk: int = CHUNK) -> dict[str, np.ndarray]:
    """Per sample: g^l_ab = d log Z_out / d omega^l_ab (shape (N, 3), pairs (11, 12, 22)),
    ``div_l`` = sum_ab (1 + delta_ab) d g^l_ab / d omega^l_ab = (tr Cov_l - 2 V_l) / V_l^2 (the
    posterior-covariance form, module docstring) and ``log_z_out``, by the SE's posterior
    quadrature (:func:`.deep_aim_se.posterior`, inner step ``h_in``)."""
    require(math.isfinite(v1) and v1 > 0, "V1", "a finite number > 0", v1)
    require(math.isfinite(v2) and v2 > 0, "V2", "a finite number > 0", v2)
    z1, z2 = np.asarray(z1, float), np.asarray(z2, float)
    a, b = whiten(omega1), whiten(omega2)
    n = z1.size
    g1, g2 = np.zeros((n, 2)), np.zeros((n, 2))
    div1, div2, logz = np.zeros(n), np.zeros(n), np.zeros(n)
    for s in range(0, n, chunk):
        sl = slice(s, s + chunk)
        with np.errstate(over="ignore", invalid="ignore"):
            p = posterior(model, z1[sl], z2[sl], a[sl, 0], a[sl, 1], b[sl, 0], b[sl, 1], v1, v2,
                           h_in)
        g1[sl], g2[sl] = p["d_xi"] / v1, p["d_x"] / v2
        div1[sl] = (p["tr_cov_xi"] - 2.0 * v1) / (v1 * v1)
        div2[sl] = (p["tr_cov_x"] - 2.0 * v2) / (v2 * v2)
        logz[sl] = p["log_z_out"]
    return {"g1": unwhiten_gradient(g1), "g2": unwhiten_gradient(g2), "div1": div1, "div2": div2,
            "log_z_out": logz}


# ----------------------------------------------------------------------------- AMP
def amp_iterations(model: DeepAimSE, data: dict, *, max_iter: int = 40, tol: float = 1e-8,
                   damping: float = 0.5, h_in: float = INNER_STEPS[1], v_floor: float = 1e-10,
                   delta_floor: float = 1e-6, blowup: float = 1e6,
                   callback: Callable | None = None) -> dict:
    """GAMP-RIE on one data set (module docstring). Returns per index l = 1, 2 the per-iteration
    error ``error{l}`` = ||S_hat_l^t - S_l||_F^2 / D (t = 0: the prior mean sqrt(rho_l) I),
    ``V{l}``, ``A{l}``, and ``converged``, ``reason``, ``iterations``, ``S_hat1``, ``S_hat2``.
    ``damping`` d: g^t <- (1 - d) g^t + d g^{t-1}, A^t <- (1 - d) A^t + d A^{t-1} from t = 1
    (as :func:`.amp.amp_iterations`). Stops at ``max_iter``, when both estimates move by less
    than ``tol`` (in ||.||_F^2 / D), when a V_l falls below ``v_floor`` or 1/A_l below
    ``delta_floor`` (perfect recovery), or as 'diverged' when an error exceeds ``blowup``."""
    require(0 <= damping < 1, "damping", "in [0, 1)", damping)
    require(isinstance(max_iter, (int, np.integer)) and max_iter >= 1, "max_iter",
            "an integer >= 1", max_iter)
    X = data["X"]
    N, T, D = X.shape
    w = np.array([2.0, 1.0, 2.0])
    rhos = (model.rho1, model.rho2)
    S = (data["S1"], data["S2"])
    S_hat = [math.sqrt(r) * np.eye(D) for r in rhos]
    V = [1.0, 1.0]
    g_prev = [np.zeros((N, 3)), np.zeros((N, 3))]
    A_prev: list[float | None] = [None, None]
    hist: dict[str, list[float]] = {k: [] for k in ("error1", "error2", "V1", "V2", "A1", "A2")}
    for i in range(2):
        hist[f"error{i + 1}"].append(float(np.sum((S_hat[i] - S[i]) ** 2) / D))
        hist[f"V{i + 1}"].append(1.0)
    converged, reason = False, "max_iter"
    for t in range(max_iter):
        omega = [amp.forward(X, S_hat[i]) - w * V[i] * g_prev[i] for i in range(2)]
        out = g_out(model, z1=data["z1"], z2=data["z2"], omega1=omega[0], omega2=omega[1],
                    v1=V[0], v2=V[1], h_in=h_in)
        gs, As = [out["g1"], out["g2"]], [float(-2.0 * np.sum(out[f"div{i + 1}"]) / D**2)
                                          for i in range(2)]
        if not all(np.all(np.isfinite(x)) for x in (*gs, *As)):
            reason = "non-finite g_out or Onsager term"
            break
        if damping and A_prev[0] is not None:
            gs = [(1 - damping) * gs[i] + damping * g_prev[i] for i in range(2)]
            As = [(1 - damping) * As[i] + damping * A_prev[i] for i in range(2)]
        if not all(A > 0 for A in As):
            reason = f"A = {As} has an entry <= 0"
            break
        change, floor_hit = 0.0, False
        for i in range(2):
            hist[f"A{i + 1}"].append(As[i])
            delta = 1.0 / As[i]
            if delta < delta_floor:
                delta, floor_hit = delta_floor, True
            R = S_hat[i] + (2.0 / (D * As[i])) * amp.adjoint(X, gs[i])
            new, v_new = amp.rie_step(R, delta=delta, rho=rhos[i])
            change = max(change, float(np.sum((new - S_hat[i]) ** 2) / D))
            S_hat[i], V[i] = new, float(v_new)
            hist[f"error{i + 1}"].append(float(np.sum((new - S[i]) ** 2) / D))
            hist[f"V{i + 1}"].append(V[i])
        g_prev, A_prev = gs, As
        errs = (hist["error1"][-1], hist["error2"][-1])
        if callback:
            callback(t + 1, errs, tuple(V), tuple(As))
        if not all(np.isfinite(e) and e <= blowup for e in errs):
            reason = "diverged"
            break
        if min(V) < v_floor or floor_hit:
            converged, reason = True, "perfect recovery (V or Delta below floor)"
            break
        if not min(V) > 0:
            reason = f"V = {V} not > 0"
            break
        if change < tol:
            converged, reason = True, "tol"
            break
    return dict(hist, converged=converged, reason=reason,
                iterations=len(hist["error1"]) - 1, S_hat1=S_hat[0], S_hat2=S_hat[1])


def damped_run(model: DeepAimSE, data: dict, *, damping, max_iter: int, tol: float = 1e-8,
               h_in: float = INNER_STEPS[1]) -> dict:
    """:func:`amp_iterations` at a fixed ``damping``, or ``"auto"``: :data:`.amp.DAMPING_SCHEDULE`
    in turn on the same data while a run diverges (error above :data:`BLOWUP`, non-finite g_out,
    A <= 0), as :func:`.amp.damped_run`. Carries ``damping`` (used) and ``attempts``."""
    if damping != "auto":
        r = amp_iterations(model, data, damping=damping, max_iter=max_iter, tol=tol, h_in=h_in)
        return dict(r, damping=damping, attempts=[(damping, r["reason"])])
    attempts = []
    for d in amp.DAMPING_SCHEDULE:
        r = amp_iterations(model, data, damping=d, max_iter=max_iter, tol=tol, h_in=h_in,
                           blowup=BLOWUP)
        attempts.append((d, r["reason"]))
        if r["converged"] or r["reason"] == "max_iter":
            break
    return dict(r, damping=d, attempts=attempts)


# ----------------------------------------------------------------------------- SE side
def se_trajectory(model: DeepAimSE, *, alpha: float, n_iter: int, damping: float = 0.0,
                  m: int = 8, scrambles: int = 4, seed: int = 0) -> dict[str, list[float]]:
    """The deep SE iterated from the uninformed start (mmse 1, 1) with AMP's damping on q_hat
    (q_hat^t <- (1 - d) q_hat(V^t) + d q_hat^{t-1}): mmse_l^t, which AMP's error_l^t tracks
    (THEORY 1.6). One map is :func:`.deep_aim_se.se_map` on 2^m x ``scrambles`` RQMC points (mean
    over scrambles); its RQMC error is that of the SE (docs/deep_aim.md), a few 1e-3 at m = 8."""
    q0 = model.q0
    V, qh_prev = [1.0, 1.0], None
    traj: dict[str, list[float]] = {"mmse1": [1.0], "mmse2": [1.0], "q_hat1": [], "q_hat2": []}
    for _ in range(n_iter):
        r = se_map(model, alpha=alpha, q1=q0[0] - V[0], q2=q0[1] - V[1], m=m, scrambles=scrambles,
                   seed=seed)
        qh = [float(np.mean(r["q_hat1"])), float(np.mean(r["q_hat2"]))]
        if damping and qh_prev is not None:
            qh = [(1 - damping) * qh[i] + damping * qh_prev[i] for i in range(2)]
        qh_prev = qh
        V = [float(wishart.mmse(1.0 / qh[i], rho=rho)) if qh[i] > 0 else 1.0
             for i, rho in enumerate((model.rho1, model.rho2))]
        V = [min(max(v, 1e-12), 1.0) for v in V]
        for i in range(2):
            traj[f"q_hat{i + 1}"].append(qh[i])
            traj[f"mmse{i + 1}"].append(V[i])
    return traj


# ----------------------------------------------------------------------------- driver
def prior_error_mean(*, dim: int, rho: float) -> float:
    """E ||sqrt(rho) I - S||_F^2 / D for S = W W^T / sqrt(R D) (:func:`.amp.sample_target`,
    R = round(rho D)): (D + R + 1)/D - 2 sqrt(rho R / D) + rho, from E Tr (W W^T)^2 = R D (D + R + 1)
    and E Tr W W^T = R D; 1 + 1/D when rho D is an integer. The control variate of
    :func:`run_deep_amp`."""
    R = max(1, int(round(rho * dim)))
    return (dim + R + 1) / dim - 2.0 * math.sqrt(rho * R / dim) + rho


def _control_variate(y, x, mean_x: float) -> tuple[float | None, float | None]:
    """Mean of y with the control variate x (known mean ``mean_x``): y - b (x - mean_x),
    b = cov(y, x) / var(x) fitted on the same seeds; standard error from the residuals (n - 2
    degrees of freedom). None below 3 seeds or for non-finite values."""
    y, x = np.asarray(y, float), np.asarray(x, float)
    if y.size < 3 or not (np.all(np.isfinite(y)) and np.all(np.isfinite(x))) or np.var(x) == 0:
        return None, None
    b = float(np.cov(y, x)[0, 1] / np.var(x, ddof=1))
    adj = y - b * (x - mean_x)
    res = y - y.mean() - b * (x - x.mean())
    return float(adj.mean()), float(math.sqrt(np.sum(res**2) / (y.size - 2) / y.size))


def _mean_rows(rows: list[list[float]]) -> list[float]:
    """Per-iteration mean over runs (finished runs held at their last value)."""
    rows = [r for r in rows if r]
    if not rows:
        return []
    L = max(len(r) for r in rows)
    return np.array([list(r) + [r[-1]] * (L - len(r)) for r in rows]).mean(axis=0).tolist()


def run_deep_amp(*, alpha: float, rho1: float, rho2: float, skip: float, dim: int,
                 seeds: int | Iterable[int] = 4, max_iter: int = 40,
                 damping: float | str = "auto", beta: float = 1.0, tol: float = 1e-8,
                 rng_seed: int = 0, h_in: float = INNER_STEPS[1], tail: int = 10,
                 se: bool = False, se_m: int = 8, progress: Callable | None = None) -> dict:
    """Deep-AIM GAMP-RIE at dimension ``dim`` over several seeds (THEORY 1.6, 4 check 7). Seed s
    draws its data from SeedSequence([rng_seed, s]). Returns a dict: per layer l = 1, 2 ``mean{l}``,
    ``stderr{l}`` (final ||S_hat_l - S_l||_F^2 / D over seeds; stderr None for one seed; mean None
    if a run ended non-finite), ``per_seed{l}``, ``initial_per_seed{l}`` (the prior mean's error
    ||sqrt(rho_l) I - S_l||_F^2 / D, whose expectation is 1 + 1/D exactly), ``per_iteration{l}``
    (mean error per iteration),
    ``V{l}``, ``A{l}`` (mean over seeds); ``tail_mean{l}``, ``tail_stderr{l}``, ``tail_per_seed{l}``
    (each seed's error averaged over its last ``tail`` iterates: at finite D the iterates keep
    fluctuating around AMP's fixed point); ``failed_seeds`` (runs that diverged at every damping
    tried, or ended on a non-finite g_out or A <= 0: kept in the means above, never hidden) and
    ``mean_ok{l}``, ``stderr_ok{l}``, ``tail_mean_ok{l}``, ``tail_stderr_ok{l}`` over the other
    seeds only; ``cv_mean{l}``, ``cv_stderr{l}``: the tail means over those seeds with the prior
    mean's error as control variate (its expectation :func:`prior_error_mean` is exact; it
    removes the seed-to-seed spread of ||S_l||_F, which dominates at D <= 100), None below three
    seeds; ``iterations``, ``converged``, ``reasons``,
    ``dampings``, ``attempts``, ``time_s``, ``N``. With ``se=True`` also ``se_trajectory`` (the
    equally damped SE, :func:`se_trajectory` on 2^``se_m`` x 4 points; 0.5 for "auto").
    ``progress(k, n, text)`` after each seed."""
    model = DeepAimSE(skip=skip, rho1=rho1, rho2=rho2, beta=beta)
    require(math.isfinite(alpha) and alpha > 0, "alpha", "a finite number > 0", alpha)
    require(isinstance(dim, (int, np.integer)) and dim >= 2, "dim", "an integer >= 2", dim)
    require(damping == "auto" or (isinstance(damping, (int, float)) and 0 <= damping < 1),
            "damping", "'auto' or in [0, 1)", damping)
    require(isinstance(tail, (int, np.integer)) and 1 <= tail <= max_iter, "tail",
            "an integer in [1, max_iter]", tail)
    require(model.skip >= SKIP_MIN, "skip", f">= {SKIP_MIN:g} (below 1 the SE's line inner rule; "
            f"AMP is compared with the SE at c = {SKIP_MIN:g} and c >= 1 only)", skip)
    seed_list = amp.seeds_of(seeds)
    t0 = time.perf_counter()
    runs = []
    for k, s in enumerate(seed_list):
        rng = np.random.default_rng(np.random.SeedSequence([int(rng_seed), int(s)]))
        data = generate(model, alpha=alpha, dim=dim, rng=rng)
        r = damped_run(model, data, damping=damping, max_iter=max_iter, tol=tol, h_in=h_in)
        r.pop("S_hat1")
        r.pop("S_hat2")
        runs.append(r)
        if progress:
            progress(k + 1, len(seed_list),
                     f"seed {s}: errors {r['error1'][-1]:.4f}, {r['error2'][-1]:.4f} after "
                     f"{r['iterations']} iterations ({r['reason']})")
    res: dict = {"alpha": float(alpha), "rho1": float(rho1), "rho2": float(rho2),
                 "skip": float(skip), "beta": float(beta), "dim": int(dim),
                 "N": int(max(1, round(alpha * dim * dim))), "seeds": seed_list,
                 "rng_seed": int(rng_seed), "damping": damping,
                 "iterations": [r["iterations"] for r in runs],
                 "converged": [r["converged"] for r in runs],
                 "reasons": [r["reason"] for r in runs],
                 "dampings": [r["damping"] for r in runs],
                 "attempts": [r["attempts"] for r in runs]}
    ok = [r["converged"] or r["reason"] == "max_iter" for r in runs]
    res["failed_seeds"] = [s for s, good in zip(seed_list, ok) if not good]
    for i in (1, 2):
        finals = [r[f"error{i}"][-1] for r in runs]
        res[f"mean_ok{i}"], res[f"stderr_ok{i}"] = mean_stderr([f for f, g in zip(finals, ok) if g])
        res[f"per_seed{i}"] = finals
        res[f"initial_per_seed{i}"] = [r[f"error{i}"][0] for r in runs]
        res[f"mean{i}"], res[f"stderr{i}"] = mean_stderr(finals)
        tails = [float(np.mean(r[f"error{i}"][1:][-tail:])) for r in runs]
        res[f"tail_per_seed{i}"] = tails
        res[f"tail_mean{i}"], res[f"tail_stderr{i}"] = mean_stderr(tails)
        res[f"tail_mean_ok{i}"], res[f"tail_stderr_ok{i}"] = mean_stderr(
            [f for f, g in zip(tails, ok) if g])
        res[f"cv_mean{i}"], res[f"cv_stderr{i}"] = _control_variate(
            [f for f, g in zip(tails, ok) if g],
            [f for f, g in zip(res[f"initial_per_seed{i}"], ok) if g],
            prior_error_mean(dim=dim, rho=(rho1, rho2)[i - 1]))
        for key in ("error", "V", "A"):
            name = "per_iteration" if key == "error" else key
            res[f"{name}{i}"] = _mean_rows([r[f"{key}{i}"] for r in runs])
    if se:
        d = amp.DAMPING_SCHEDULE[0] if damping == "auto" else damping
        res["se_trajectory"] = se_trajectory(model, alpha=alpha, n_iter=max_iter, damping=d,
                                             m=se_m)
    res["time_s"] = time.perf_counter() - t0
    return res


__all__ = ["SKIP_MIN", "run_deep_amp", "prior_error_mean", "amp_iterations", "damped_run", "g_out",
           "generate", "se_trajectory"]
