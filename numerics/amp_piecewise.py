"""AMP views of the piecewise AIM channels: hardmax at T = 2..5, sparsemax at T = 2, 3 and
polyhedral channel files (THEORY 1.1, 1.4, 1.5; check 7 of THEORY 4).

:func:`aim_sym.numerics.amp.run_amp` needs, per channel, an object with ``name``, ``tokens``,
``weights`` (1 + delta_ab, flat order a <= b of :func:`aim_sym.numerics.amp.pairs`),
``g_dg(obs, omega, V)`` (g_out = d log Z_out / d omega per sample and the diagonal of its
Jacobian) and ``sample(h, rng)`` (the observation AMP sees). :class:`PiecewiseAmp` is that
object for channels whose Z_out is an integral (no sympy expression), built on the per-omega
engines the state evolution already uses; every g_dg call groups the samples by their observed
outcome (or support pattern) and calls the engine once per group, vectorised over its samples.

* hardmax (:func:`hardmax_amp`): the observation is the outcome index y (row-wise winners,
  lexicographic in {0..T-1}^T). Z_y and the centred first moments E[(h_ab - omega_ab) 1_y]
  come from the ordered-cone sweeps (:func:`aim_sym.numerics.hardmax_se.outcomes_moments` at
  T = 2, 3; :func:`aim_sym.numerics.hardmax_qmc.winner_moments` at T = 4, 5), so
  g_ab = E[(h_ab - omega_ab) 1_y] / (Z_y (1 + delta_ab) V). The engines have no second moments:
  the returned ``dg`` is the **Nishimori form** dg_ab = -g_ab^2 (THEORY 1.2: E[g g^T] =
  -E[dg / domega] at the Bayes-optimal point), so AMP's precision
  A = -(2 / D^2) sum_mu sum_ab (1 + delta_ab) dg_ab = (2 / D^2) sum (1 + delta_ab) g_ab^2
  has the same expectation as with the exact Jacobian (``dg_form`` says which form a view uses).
* sparsemax (:func:`sparsemax_amp`): the observation is the output matrix y (N x T^2, row a =
  sparsemax(beta h_a.)). T = 2: the derived closed-form pieces (``pieces``: the compiled
  :func:`aim_sym.sparsemax.compile_sparsemax`, passed in by the caller: this layer never
  touches sympy), one piece per pair of row states (low, mid, high), exact dg. T = 3:
  :func:`aim_sym.numerics.sparsemax_t3.z_out` (every support pattern; exact dg from the
  posterior covariance) on the rule :data:`T3_AMP_RULE`.
* polyhedral channel files (:func:`polyhedral_amp`): the observation is the outcome index;
  Z_y, g_y and dg_y by the Gaussian polytope engine
  (:func:`aim_sym.numerics.polyhedral_se.z_out`, order 2: exact dg) on :data:`POLYTOPE_AMP_RULE`,
  events of rank <= 3 only.

``draw_y(h, rng)`` gives the output as an (N, T^2) matrix (or the read-out vectors r_y of a
channel file) for AMP's test error (:func:`aim_sym.numerics.amp.test_error`, THEORY 1.5).
``log_z(obs, omega, V)`` is log Z_out of the observed outcome on the engines' default (finest)
rules, not the cheaper AMP rules: the identity tests take its central differences.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from . import hardmax_qmc, hardmax_se, polyhedral_se, sparsemax_t3
from . import polytope as pt
from .records import Estimate, require, standard_error
from .sparsemax_t3_se import sparsemax_matrix

#: token counts of the hardmax view (T = 2, 3: hardmax_se's sweep; T = 4, 5: the winner sweep)
HARDMAX_TOKENS = (2, 5)
#: token counts of the sparsemax view
SPARSEMAX_TOKENS = (2, 3)
#: the sparsemax T = 3 rule inside AMP: g_out within ~6e-5 of the SE's default rule (measured on
#: 200 seeded samples at V = 0.6, q = 0.9), about 2.5x cheaper; z_out's own bar (the difference
#: from the coarse rule) is larger (~3e-3) and conservative
T3_AMP_RULE = sparsemax_t3.T3Rule(nodes=7, coarse_nodes=5, hermite=12, coarse_hermite=8,
                                  panels=4)
#: the polytope rule inside AMP (g_out to ~1e-6 on three_halfspaces.py against the default rule,
#: three times cheaper than polyhedral_se.FAST_RULE)
POLYTOPE_AMP_RULE = pt.PolytopeRule(nodes=8, coarse_nodes=5, pieces=6)
#: Chebyshev nodes per unit length of the winner sweep (T = 4, 5) inside AMP: 1.5x the SE's,
#: moments to ~1e-10 relative (the SE's 3 per unit leaves ~5e-6 at T = 5)
WINNER_NODES_PER_UNIT = 4.5
#: Z_out below this is treated as underflow: g = 0 there (the sweeps integrate in linear scale)
Z_TINY = 1e-280
#: the largest polytope rank the deterministic engine integrates
MAX_RANK = polyhedral_se.DETERMINISTIC_RANK


@dataclass(frozen=True)
class PiecewiseAmp:
    """The AMP view of one piecewise channel (module docstring): what
    :func:`aim_sym.numerics.amp.run_amp` reads (``name, tokens, weights, g_dg, sample``), plus
    ``draw_y`` (the output for the test error; None without a read-out), ``log_z`` and
    ``dg_form`` ("exact" or "nishimori": dg = -g^2 per entry)."""

    name: str
    tokens: int
    weights: tuple[float, ...]
    g_dg: Callable
    sample: Callable
    log_z: Callable
    draw_y: Callable | None
    dg_form: str
    discrete: bool


def weights(T: int) -> tuple[float, ...]:
    """(1 + delta_ab) in the flat order a <= b (row-major)."""
    return tuple(2.0 if a == b else 1.0 for a in range(T) for b in range(a, T))


def symmetric(h: np.ndarray, T: int) -> np.ndarray:
    """(N, T(T+1)/2) flat entries a <= b -> (N, T, T) symmetric matrices."""
    h = np.asarray(h, dtype=float)
    H = np.empty((h.shape[0], T, T))
    k = 0
    for a in range(T):
        for b in range(a, T):
            H[:, a, b] = H[:, b, a] = h[:, k]
            k += 1
    return H


def _check_int(value, name: str, lo: int, hi: int) -> int:
    require(isinstance(value, (int, np.integer)) and not isinstance(value, bool)
            and lo <= value <= hi, name, f"an integer in {lo}..{hi}", value)
    return int(value)


def _check_omega(omega, n: int, N: int) -> np.ndarray:
    om = np.asarray(omega, dtype=float)
    require(om.shape == (N, n), "omega", f"an array ({N}, {n})", om.shape)
    return om


def _check_V(V) -> float:
    require(isinstance(V, (int, float, np.floating)) and math.isfinite(V) and V > 0, "V",
            "a finite real > 0", V)
    return float(V)


# ----------------------------------------------------------------------------- hardmax
def hardmax_amp(*, T: int) -> PiecewiseAmp:
    """Hardmax y_a = argmax_b h_ab at T = 2..5 tokens (THEORY 1, 1.4): g_out from the ordered-cone
    sweeps, dg in the Nishimori form -g^2 (module docstring)."""
    T = _check_int(T, "tokens", *HARDMAX_TOKENS)
    n = T * (T + 1) // 2
    W = np.array(weights(T))
    outcomes = list(itertools.product(range(T), repeat=T))
    place = T ** np.arange(T - 1, -1, -1)

    def sample(h, rng=None):
        H = symmetric(h, T)
        return np.argmax(H, axis=2) @ place  # lexicographic index of the row-wise winners

    def moments(obs, omega, V):
        obs = np.asarray(obs, dtype=int)
        om = _check_omega(omega, n, obs.shape[0])
        V = _check_V(V)
        require(obs.ndim == 1 and np.all((obs >= 0) & (obs < T ** T)), "obs",
                f"outcome indices in 0..{T ** T - 1}", "out of range")
        out = np.empty((obs.shape[0], 1 + n))
        for k in np.unique(obs):
            idx = np.nonzero(obs == k)[0]
            y = outcomes[int(k)]
            if T <= 3:
                out[idx] = hardmax_se.outcomes_moments([y], omega=om[idx], V=V)[0]
            else:
                w = om[idx] / math.sqrt(V)
                nodes = hardmax_qmc.winner_nodes(w, T, per_unit=WINNER_NODES_PER_UNIT)
                m = np.concatenate([hardmax_qmc.winner_moments([y], w[i:i + 256], nodes)[0]
                                    for i in range(0, idx.size, 256)])
                m[:, 1:] *= math.sqrt(V)
                out[idx] = m
        return out, V

    def g_dg(obs, omega, V):
        mom, V = moments(obs, omega, V)
        Z = mom[:, 0]
        ok = Z > Z_TINY
        g = np.where(ok[:, None], mom[:, 1:] / np.where(ok, Z, 1.0)[:, None], 0.0) / (W * V)
        return g, -g * g

    def log_z(obs, omega, V):
        mom, _ = moments(obs, omega, V)
        with np.errstate(divide="ignore"):
            return np.log(np.maximum(mom[:, 0], 0.0))

    def draw_y(h, rng=None):
        win = np.argmax(symmetric(h, T), axis=2)
        return np.eye(T)[win].reshape(win.shape[0], T * T)

    return PiecewiseAmp(name="hardmax", tokens=T, weights=weights(T), g_dg=g_dg, sample=sample,
                        log_z=log_z, draw_y=draw_y, dg_form="nishimori", discrete=True)


# ----------------------------------------------------------------------------- sparsemax
def sparsemax_rows(h, *, T: int, beta: float) -> np.ndarray:
    """y (N, T, T): row a the Euclidean projection of beta h_a. onto the simplex (Martins and
    Astudillo 2016); h (N, T(T+1)/2) flat a <= b."""
    return sparsemax_matrix(symmetric(h, T), beta=beta)


def _check_beta(beta) -> float:
    require(isinstance(beta, (int, float, np.floating)) and not isinstance(beta, bool)
            and math.isfinite(beta) and 0 < beta <= 1e8, "beta", "finite, in (0, 1e8]", beta)
    return float(beta)


def _t2_pieces(pieces):
    require(pieces is not None and hasattr(pieces, "pieces")
            and all(hasattr(p, a) for p in pieces.pieces for a in ("rows", "interior", "g", "dg",
                                                                     "log_z")),
            "pieces", "the compiled sparsemax T = 2 pieces (aim_sym.sparsemax.compile_sparsemax)",
            type(pieces).__name__)
    names = ("low", "mid", "high")
    return {(names.index(p.rows[0]), names.index(p.rows[1])): p for p in pieces.pieces}


def sparsemax_amp(*, T: int, beta: float, pieces=None) -> PiecewiseAmp:
    """Sparsemax attention y_a. = sparsemax(beta h_a.) at T = 2 (``pieces``: the compiled
    closed-form pieces, :func:`aim_sym.sparsemax.compile_sparsemax`) or T = 3
    (:func:`aim_sym.numerics.sparsemax_t3.z_out`); exact dg (THEORY 1.1, 1.4)."""
    T = _check_int(T, "tokens", *SPARSEMAX_TOKENS)
    beta = _check_beta(beta)
    n = T * (T + 1) // 2
    by_rows = _t2_pieces(pieces) if T == 2 else None

    def sample(h, rng=None):
        return sparsemax_rows(h, T=T, beta=beta).reshape(-1, T * T)

    def t2_eval(obs, omega, V, what):
        y = np.asarray(obs, dtype=float).reshape(-1, 2, 2)
        N = y.shape[0]
        om = _check_omega(omega, n, N)
        V = _check_V(V)
        require(np.all(np.isfinite(y)) and np.all((y >= 0) & (y <= 1 + 1e-9)), "obs",
                "sparsemax outputs (entries in [0, 1])", "out of range")
        yd = np.stack([y[:, 0, 0], y[:, 1, 1]], axis=1)
        yo = np.stack([y[:, 0, 1], y[:, 1, 0]], axis=1)
        # the projection's exact zeros mark the saturated rows (low: y_aa = 0, high: y_ab = 0)
        lab = np.where(yd <= 0.0, 0, np.where(yo <= 0.0, 2, 1))
        d = (yd - yo) / beta  # the observed d_a of the interior rows: y_aa - y_ab = beta d_a
        out = {"g": np.zeros((N, 3)), "dg": np.zeros((N, 3)), "log_z": np.zeros(N)}
        keys = lab[:, 0] * 3 + lab[:, 1]
        for k in np.unique(keys):
            idx = np.nonzero(keys == k)[0]
            p = by_rows[(int(k) // 3, int(k) % 3)]
            x0 = d[idx, 0] if 0 in p.interior else np.zeros(idx.size)
            x1 = d[idx, 1] if 1 in p.interior else np.zeros(idx.size)
            args = (x0, x1, om[idx, 0], om[idx, 1], om[idx, 2], V, beta)
            shape = (idx.size,)
            if what == "log_z":
                out["log_z"][idx] = np.broadcast_to(np.asarray(p.log_z(*args), dtype=float), shape)
                continue
            g = p.g(*args)
            dg = p.dg(*args)
            for i in range(3):
                out["g"][idx, i] = np.broadcast_to(np.asarray(g[i], dtype=float), shape)
                out["dg"][idx, i] = np.broadcast_to(np.asarray(dg[i][i], dtype=float), shape)
        return out

    def t3_eval(obs, omega, V):
        y = np.asarray(obs, dtype=float).reshape(-1, 3, 3)
        om = _check_omega(omega, n, y.shape[0])
        return sparsemax_t3.z_out(y, omega=om, V=_check_V(V), beta=beta, rule=T3_AMP_RULE,
                                  chunk=64)

    def g_dg(obs, omega, V):
        if T == 2:
            r = t2_eval(obs, omega, V, "g")
            return r["g"], r["dg"]
        z = t3_eval(obs, omega, V)
        return z.g, np.einsum("nii->ni", z.dg)

    def log_z(obs, omega, V):
        if T == 2:
            return t2_eval(obs, omega, V, "log_z")["log_z"]
        y = np.asarray(obs, dtype=float).reshape(-1, 3, 3)
        return sparsemax_t3.z_out(y, omega=_check_omega(omega, n, y.shape[0]), V=_check_V(V),
                                  beta=beta).log_z

    return PiecewiseAmp(name="sparsemax", tokens=T, weights=weights(T), g_dg=g_dg,
                        sample=sample, log_z=log_z, draw_y=sample, dg_form="exact",
                        discrete=False)


# ----------------------------------------------------------------------------- channel files
def _term_probabilities(out: polyhedral_se.PolyhedralOutput, h: np.ndarray) -> np.ndarray:
    """P(y | h) (N, Y) = sum_k w_k 1[A_k h <= b_k] of every outcome."""
    P = np.zeros((h.shape[0], len(out.outcomes)))
    for y, ts in enumerate(out.terms):
        for t in ts:
            if not t.A:
                P[:, y] += t.weight
                continue
            A, b = np.asarray(t.A, dtype=float), np.asarray(t.b, dtype=float)
            P[:, y] += t.weight * np.all(h @ A.T <= b, axis=1)
    return P


def polyhedral_amp(out, *, readout=None) -> PiecewiseAmp:
    """A polyhedral channel file's output side (``out``: its
    :class:`aim_sym.numerics.polyhedral_se.PolyhedralOutput`, ``aim_sym.models.AIM(...).polyhedral``)
    with events of rank <= 3; ``readout`` (Y x K, outcome y read as the vector r_y, THEORY 1.5)
    enables ``draw_y``. Exact dg from the engine's second derivatives."""
    require(isinstance(out, polyhedral_se.PolyhedralOutput), "polyhedral",
            "a PolyhedralOutput (aim_sym.models.AIM(channel).polyhedral)", type(out).__name__)
    rank = polyhedral_se.event_rank(out)
    require(rank <= MAX_RANK, "channel file", f"events of rank <= {MAX_RANK} for AMP (the "
            "deterministic polytope rule)", f"an event of rank {rank}")
    n = out.dim
    T = int(round((math.sqrt(8 * n + 1) - 1) / 2))
    require(T * (T + 1) // 2 == n and tuple(out.weights) == weights(T), "polyhedral",
            "an AIM output side (weights 1 + delta_ab over the pairs a <= b)", out.weights)
    R = None
    if readout is not None:
        R = np.asarray(readout, dtype=float)
        R = R.reshape(R.shape[0], -1)
        require(R.shape[0] == len(out.outcomes) and np.all(np.isfinite(R)), "readout",
                f"finite, one row per outcome ({len(out.outcomes)})", R.shape)
    subs = [polyhedral_se.PolyhedralOutput(outcomes=(o,), terms=(ts,), weights=out.weights,
                                           basis=out.basis, name=out.name)
            for o, ts in zip(out.outcomes, out.terms)]

    def sample(h, rng):
        P = _term_probabilities(out, np.asarray(h, dtype=float))
        cum = np.cumsum(P, axis=1)
        u = rng.random(P.shape[0]) * cum[:, -1]
        return np.minimum((u[:, None] >= cum).sum(axis=1), P.shape[1] - 1)

    def evaluate(obs, omega, V, order, rule=POLYTOPE_AMP_RULE):
        obs = np.asarray(obs, dtype=int)
        om = _check_omega(omega, n, obs.shape[0])
        V = _check_V(V)
        require(obs.ndim == 1 and np.all((obs >= 0) & (obs < len(subs))), "obs",
                f"outcome indices in 0..{len(subs) - 1}", "out of range")
        N = obs.shape[0]
        res = {"Z": np.zeros(N), "g": np.zeros((N, n)), "dg": np.zeros((N, n))}
        for k in np.unique(obs):
            idx = np.nonzero(obs == k)[0]
            z = polyhedral_se.z_out(subs[int(k)], omega=om[idx], V=V, order=order, rule=rule)
            res["Z"][idx] = z.Z[0]
            if order == 2:
                res["g"][idx] = z.g[0]
                res["dg"][idx] = np.einsum("nii->ni", z.dg[0])
        return res

    def g_dg(obs, omega, V):
        r = evaluate(obs, omega, V, 2)
        bad = r["Z"] <= Z_TINY
        r["g"][bad] = 0.0
        r["dg"][bad] = 0.0
        return r["g"], r["dg"]

    def log_z(obs, omega, V):
        with np.errstate(divide="ignore"):
            return np.log(np.maximum(evaluate(obs, omega, V, 0, pt.DEFAULT_RULE)["Z"], 0.0))

    draw_y = None
    if R is not None:
        def draw_y(h, rng):
            return R[sample(h, rng)]

    return PiecewiseAmp(name=out.name, tokens=T, weights=weights(T), g_dg=g_dg, sample=sample,
                        log_z=log_z, draw_y=draw_y, dg_form="exact", discrete=True)


# ----------------------------------------------------------------------------- plug-in error
def plugin_error_mc(view: PiecewiseAmp, *, q: float, V: float, samples: int = 200_000,
                    seed: int = 2026, batch: int = 50_000) -> Estimate:
    """The plug-in error E||y(h) - y(omega)||^2 at the SE point (q, V) (THEORY 1.5) by seeded
    Monte Carlo: omega ~ N(0, q (1 + delta_ab)), h = omega + sqrt(V (1 + delta_ab)) xi, y drawn
    by ``view.draw_y`` at h and at omega; error = 3 standard errors."""
    require(view.draw_y is not None, "readout", "given (the plug-in error needs y as numbers)",
            None)
    require(math.isfinite(q) and q >= 0, "q", "finite >= 0", q)
    require(math.isfinite(V) and V >= 0, "V", "finite >= 0", V)
    require(isinstance(samples, int) and samples >= 1000, "samples", "an integer >= 1000",
            samples)
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), 7]))
    w = np.asarray(view.weights, dtype=float)
    vals = []
    for i in range(0, samples, batch):
        m = min(batch, samples - i)
        om = np.sqrt(q * w) * rng.standard_normal((m, w.size))
        h = om + np.sqrt(V * w) * rng.standard_normal((m, w.size))
        vals.append(np.sum((view.draw_y(h, rng) - view.draw_y(om, rng)) ** 2, axis=1))
    v = np.concatenate(vals)
    return Estimate(float(v.mean()), 3 * standard_error(v),
                    f"seeded Monte Carlo, {samples} draws (seed {seed}); error = 3 standard errors")


__all__ = ["PiecewiseAmp", "hardmax_amp", "sparsemax_amp", "polyhedral_amp", "sparsemax_rows",
           "symmetric", "weights", "T3_AMP_RULE", "POLYTOPE_AMP_RULE", "HARDMAX_TOKENS",
           "SPARSEMAX_TOKENS", "plugin_error_mc"]
