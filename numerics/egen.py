"""Generalisation error of the AIM at an SE fixed point (THEORY 1.5).

At the fixed point (q, V = Q0 - q) a new sample's pre-activations are h = omega + sqrt(V) xi
entrywise (variance (1 + delta_ab) V), omega_ab ~ N(0, (1 + delta_ab) q). Two estimators of the
T x T output y (all T^2 entries counted):

* Bayes-optimal: y_hat(omega) = E[y | omega],
  e_gen = E ||y - y_hat(omega)||_F^2 = E ||y||^2 - E_omega ||y_hat(omega)||^2
  (the channel's own noise included for a stochastic channel);
* plug-in: the channel applied to omega (its noise drawn independently),
  e_plugin = E ||y(h) - y(omega)||_F^2.

Routes, each with an error by refinement:

* linear (+ noise Delta_out): e_gen = e_plugin = T (T + 1) (V + Delta_out), exact;
* Gaussian read-outs (channel files): y = L h + noise, noise ~ N(0, N) (L the statistics'
  coefficient matrix, K x n): y - E[y | omega] = L (h - omega) + noise, so
  e_gen = V tr(L C L^T) + tr(N), exact; the plug-in y(omega) = L omega + noise' carries a
  second, independent noise: e_plugin = e_gen + tr(N) (:func:`gaussian_readout`);
* discrete channels: each output label y read as a real vector r_y (one-hot rows for the
  argmax tuples of hardmax and noisy hardmax, the T x T output flattened; a number or a tuple
  of numbers for a channel file), y_hat = sum_y Z_y(omega) r_y on the omega quadrature of the
  SE output side (two levels); T = 2 hardmax has closed forms (:func:`hardmax_t2`), the test
  oracle. The plug-in needs P(y | h = omega): the compiled Z_y at V -> 0+ (V = 1e-200), which
  is the likelihood off the channel's hyperplanes and, on them (a null set of omega when
  q > 0), breaks the tie by an infinitesimal Gaussian perturbation (Phi(0) = 1/2 for one
  half-space); at q = 0 (omega = 0 on every hyperplane through 0) this keeps e_plugin
  continuous in q;
* polyhedral channels (a term of >= 3 half-spaces): the same read-out on the SE's
  Gauss-Hermite rule, in :func:`aim_sym.numerics.polyhedral_se.generalisation_error`;
* softmax, any T and beta: by rows. Row a depends on logits x_c = beta h_ac; with
  1/D = int dv e^v exp(-e^v D), s_b(x) s_b(x') = int dv dv' prod_c F_c and, the entries of a
  row being independent, E[s_b(x) s_b(x')] = int dv dv' A_d A_o^(T-2) B_o (b off the diagonal)
  or int B_d A_o^(T-1) (b = a), where for one entry's logit pair (x, x') = (mu + zeta, mu + zeta'),
  A(v, v') = E_mu[a(v + mu) a'(v' + mu)], a(u) = E exp(-e^(u + zeta)), and B likewise with
  b(u) = E e^(u + zeta) exp(-e^(u + zeta)). The v-integrals are trapezoid sums (the integrands
  are analytic in a strip of half-width pi/2: error ~ exp(-pi^2 / h)); mu and zeta by trapezoid
  sums on the same lattice (sd > 1) or Gauss-Hermite (sd <= 1). Two steps h give the error.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy.special import roots_hermitenorm

from .gauss import TAIL_MASS, gaussian_grid
from .records import Estimate, require

#: steps of the softmax v-lattice: coarse and fine (their difference is the error)
SOFTMAX_STEPS = (0.5, 0.25)
_GH_NODES = {1.0: 16, 0.5: 32, 0.25: 48}
#: rules for the slope d e_gen / dV only (a few digits suffice)
_SLOPE_STEP, _SLOPE_LEVEL = 1.0, -2
_SMALL_SD = 1.0
_TAIL = 10.0  # sd of a Gaussian kept on either side (mass outside < 2e-23)
#: largest logit scale beta sqrt(2 Q0) of the diagonal: the v-lattice grows like 20 x it / h
#: (1700 nodes at h = 0.25 and 20; memory and time grow with its square)
SOFTMAX_SCALE_MAX = 20.0


@dataclass(frozen=True)
class EgenChannel:
    """What e_gen needs of a channel beyond its compiled output side: ``kind`` ("linear",
    "softmax", "gaussian", "discrete"), tokens T, ``beta`` (softmax), ``delta_out`` (linear),
    ``readout`` (discrete: outputs x dim, the output y as a real vector r_y, one row per output
    in the compiled channel's output order: the flat T x T one-hot matrix for argmax labels),
    ``statistics`` (gaussian: the K x n coefficient matrix L of y = L h + noise, h in the flat
    order a <= b), ``noise`` (gaussian: the K x K noise covariance N) and ``weights`` (gaussian:
    Var h_ab / V = 1 + delta_ab)."""

    kind: str
    tokens: int
    beta: float = 1.0
    delta_out: float = 0.0
    readout: np.ndarray | None = None
    statistics: np.ndarray | None = None
    noise: np.ndarray | None = None
    weights: np.ndarray | None = None


# ----------------------------------------------------------------------------- linear
def linear(*, T: int, V: float, delta_out: float = 0.0) -> Estimate:
    """T (T + 1) (V + Delta_out): every entry's posterior variance, off-diagonals twice."""
    return Estimate(T * (T + 1) * (V + delta_out), 0.0, "closed form T (T + 1) (V + Delta_out)",
                    extra={"plugin": T * (T + 1) * (V + delta_out), "plugin_error": 0.0})


# ----------------------------------------------------------------------------- Gaussian read-outs
def gaussian_readout(*, statistics, noise, weights, V: float) -> Estimate:
    """y = L h + noise (THEORY 1.5, module docstring): e_gen = V tr(L C L^T) + tr(N) and
    e_plugin = e_gen + tr(N), exact (C = diag(``weights``)); extra slope_exact = tr(L C L^T)
    (d e_gen / dV)."""
    L = np.atleast_2d(np.asarray(statistics, dtype=float))
    N = np.atleast_2d(np.asarray(noise, dtype=float))
    c = np.asarray(weights, dtype=float)
    require(L.ndim == 2 and L.shape[1] == len(c) and np.all(np.isfinite(L)), "statistics",
            f"a finite (K, {len(c)}) matrix", L.shape)
    require(N.shape == (L.shape[0], L.shape[0]) and np.all(np.isfinite(N))
            and float(np.trace(N)) >= 0, "noise", f"a finite ({L.shape[0]}, {L.shape[0]}) "
            "covariance", N.shape)
    require(math.isfinite(V) and V >= 0, "V", "a finite real >= 0", V)
    slope = float(np.einsum("kn,n,kn->", L, c, L))
    tr_noise = float(np.trace(N))
    value = V * slope + tr_noise
    rounding = 4 * np.finfo(float).eps * (abs(value) + tr_noise)
    return Estimate(value, rounding, "closed form V tr(L C L^T) + tr(noise) (y = L h + noise)",
                    extra={"plugin": value + tr_noise, "plugin_error": 2 * rounding,
                           "slope_exact": slope})


# ----------------------------------------------------------------------------- discrete
def hardmax_t2(*, q: float, V: float, epsilon: float = 0.0) -> tuple[float, float]:
    """(e_gen, e_plugin) of (noisy) hardmax at T = 2 in closed form: each row's output is the
    sign of s = h_12 - h_aa (Var 3 Q0), flipped with probability epsilon. With r = q / Q0,
    e_gen = 1 - 2 (1 - 2 eps)^2 asin(r) / pi; the plug-in rows differ when the signs of s(h)
    and s(omega) differ (probability p = acos(sqrt r) / pi) xor exactly one flip:
    e_plugin = 4 [p ((1 - eps)^2 + eps^2) + (1 - p) 2 eps (1 - eps)]."""
    r = q / (q + V)
    e = 1.0 - 2.0 * (1 - 2 * epsilon) ** 2 * math.asin(r) / math.pi
    p = math.acos(math.sqrt(r)) / math.pi
    differ = p * ((1 - epsilon) ** 2 + epsilon**2) + (1 - p) * 2 * epsilon * (1 - epsilon)
    return e, 4.0 * differ


def hardmax_q0(T: int) -> float:
    """e_gen of hardmax at q = 0 (any V): each row's diagonal wins with probability
    p = E[Phi(sqrt 2 z)^(T - 1)], the others share 1 - p; e_gen = T (1 - p^2 - (1-p)^2/(T-1))."""
    require(isinstance(T, int) and T >= 2, "tokens", "an integer >= 2", T)
    z, w = roots_hermitenorm(80)
    from scipy.special import ndtr

    p = float(np.sum(w * ndtr(math.sqrt(2.0) * z) ** (T - 1)) / math.sqrt(2 * math.pi))
    return T * (1.0 - p * p - (1.0 - p) ** 2 / (T - 1))


def _discrete_level(cc, R: np.ndarray, *, q: float, V: float, level: int):
    K = cc.K
    pruned = 0.0
    if q == 0:
        m, w = np.zeros((1, K)), np.ones(1)
    else:
        m, w, pruned = gaussian_grid(q * cc.S, np.sqrt(V * np.diag(cc.S)), level)
    N = m.shape[0]
    Y = cc.n_outputs
    cols = [m[:, k] for k in range(K)]
    Z = np.stack([np.broadcast_to(np.asarray(z, float), (N,)) for z in cc.z_grad(*cols, V)[:Y]])
    # the channel at omega itself (V -> 0+): P(y | h = omega); at a tie it splits evenly
    Z0 = np.stack([np.broadcast_to(np.asarray(z, float), (N,))
                   for z in cc.z_grad(*cols, 1e-200)[:Y]])
    yhat = Z.T @ R  # (N, T^2)
    norm2 = (R * R).sum(axis=1)  # ||r_y||^2
    bo = Z.T @ norm2 - (yhat * yhat).sum(axis=1)
    dist = norm2[:, None] + norm2[None, :] - 2 * R @ R.T  # ||r_y - r_y'||^2
    plug = np.einsum("yN,yz,zN->N", Z, dist, Z0)
    tail = (TAIL_MASS + pruned) * float(np.max(norm2)) * 2 if q > 0 else 0.0
    return float(bo @ w), float(plug @ w), tail


def discrete(cc, readout: np.ndarray, *, q: float, V: float, level: int = 0) -> Estimate:
    """e_gen and the plug-in error of a discrete channel on the omega quadrature of the SE
    (levels ``level`` and ``level + 1``; error = difference + tail bound)."""
    R = np.asarray(readout, dtype=float)
    require(R.shape[0] == cc.n_outputs, "readout", f"{cc.n_outputs} rows (one per output)",
            R.shape)
    b0, p0, _ = _discrete_level(cc, R, q=q, V=V, level=level)
    b1, p1, tail = _discrete_level(cc, R, q=q, V=V, level=level + 1)
    return Estimate(max(b1, 0.0), abs(b1 - b0) + tail,
                    "E||y||^2 - E||E[y|omega]||^2, E[y|omega] = sum_y Z_y(omega) r_y, by "
                    "sinh-trapezoid quadrature over omega, two levels",
                    extra={"plugin": p1, "plugin_error": abs(p1 - p0) + tail,
                           "plugin_method": "the same quadrature with P(y | h = omega) = Z_y at "
                           "V -> 0+ (ties on the hyperplanes split as by an infinitesimal "
                           "Gaussian perturbation); its error bar assumes the steps of "
                           "P(y | omega) lie on nodes (hyperplanes m_k = 0: argmax, homogeneous "
                           "signs)"})


# ----------------------------------------------------------------------------- softmax
@lru_cache(maxsize=64)
def _rule(sd: float, h: float) -> tuple[np.ndarray, np.ndarray, bool]:
    """Nodes and weights of E over N(0, sd^2): one node (sd = 0), Gauss-Hermite (sd <= 1) or
    the trapezoid on the lattice h Z (sd > 1). The flag says whether nodes lie on the lattice."""
    if sd == 0:
        return np.zeros(1), np.ones(1), True
    if sd <= _SMALL_SD:
        z, w = roots_hermitenorm(_GH_NODES[h])
        return sd * z, w / math.sqrt(2 * math.pi), False
    k = int(math.ceil(_TAIL * sd / h))
    x = h * np.arange(-k, k + 1)
    return x, h * np.exp(-0.5 * (x / sd) ** 2) / (sd * math.sqrt(2 * math.pi)), True


def _ab(u: np.ndarray, sd: float, h: float) -> tuple[np.ndarray, np.ndarray]:
    """a(u) = E exp(-e^(u + zeta)), b(u) = E exp(u + zeta - e^(u + zeta)), zeta ~ N(0, sd^2)."""
    z, w, _ = _rule(sd, h)
    a = np.zeros(u.shape)
    b = np.zeros(u.shape)
    flat_u = u.ravel()
    step = max(1, 4_000_000 // len(z))
    fa, fb = a.ravel(), b.ravel()
    with np.errstate(over="ignore"):
        for i in range(0, len(flat_u), step):
            y = flat_u[i:i + step, None] + z[None, :]
            ey = np.exp(y)
            fa[i:i + step] = np.exp(-ey) @ w
            fb[i:i + step] = np.exp(y - ey) @ w
    return a, b


def _pair(v: np.ndarray, h: float, sd_mu: float, sd1: float, sd2: float):
    """A(v, v') and B(v, v') on the lattice v (x v) for one entry's logit pair
    (mu + zeta, mu + zeta'), sd(mu) = sd_mu, sd(zeta) = sd1, sd(zeta') = sd2."""
    mu, wmu, on_lattice = _rule(sd_mu, h)
    if on_lattice:
        k = np.rint(mu / h).astype(int)
        ext = v[0] + h * np.arange(k[0], len(v) + k[-1])  # every v_i + mu_k
        idx = np.arange(len(v))[:, None] + (k - k[0])[None, :]
        a1, b1 = _ab(ext, sd1, h)
        a2, b2 = (a1, b1) if sd2 == sd1 else _ab(ext, sd2, h)
        Ma1, Mb1, Ma2, Mb2 = a1[idx], b1[idx], a2[idx], b2[idx]
    else:
        pts = v[:, None] + mu[None, :]
        Ma1, Mb1 = _ab(pts, sd1, h)
        Ma2, Mb2 = (Ma1, Mb1) if sd2 == sd1 else _ab(pts, sd2, h)
    A = (Ma1 * wmu[None, :]) @ Ma2.T
    B = (Mb1 * wmu[None, :]) @ Mb2.T
    return A, B


@lru_cache(maxsize=256)
def _row_overlap(*, T: int, beta: float, c: float, V1: float, V2: float, h: float) -> float:
    """E[s(x) . s(x')] for one row's softmax, the pre-activation copies sharing the part of
    variance c (off-diagonal; 2c on the diagonal) plus independent parts V1, V2."""
    sd_max = beta * math.sqrt(2.0 * (c + max(V1, V2)))
    lo, hi = -(_TAIL * sd_max + 40.0), _TAIL * sd_max + 6.0
    v = lo + h * np.arange(int(math.ceil((hi - lo) / h)) + 1)
    A_o, B_o = _pair(v, h, beta * math.sqrt(c), beta * math.sqrt(V1), beta * math.sqrt(V2))
    A_d, B_d = _pair(v, h, beta * math.sqrt(2 * c), beta * math.sqrt(2 * V1),
                     beta * math.sqrt(2 * V2))
    off = float(np.sum(A_d * A_o ** (T - 2) * B_o)) * h * h
    diag = float(np.sum(B_d * A_o ** (T - 1))) * h * h
    return diag + (T - 1) * off


def _softmax_level(*, T: int, beta: float, q: float, V: float, h: float) -> tuple[float, float]:
    Q0 = q + V
    same = _row_overlap(T=T, beta=beta, c=Q0, V1=0.0, V2=0.0, h=h)
    bo = _row_overlap(T=T, beta=beta, c=q, V1=V, V2=V, h=h)
    at_omega = _row_overlap(T=T, beta=beta, c=q, V1=0.0, V2=0.0, h=h)
    cross = _row_overlap(T=T, beta=beta, c=q, V1=V, V2=0.0, h=h)
    return T * (same - bo), T * (same + at_omega - 2 * cross)


def softmax(*, T: int, beta: float, q: float, V: float) -> Estimate:
    """e_gen and the plug-in error of the row-wise softmax (THEORY 1.5) by the v-lattice
    representation of the module docstring at the two steps :data:`SOFTMAX_STEPS`; error =
    their difference (plus a floor for the double's resolution of the row sums). Refused
    (InputError) when beta sqrt(2 Q0) exceeds :data:`SOFTMAX_SCALE_MAX`."""
    require(isinstance(T, int) and T >= 2, "tokens", "an integer >= 2", T)
    require(math.isfinite(beta) and beta > 0, "beta", "finite > 0", beta)
    require(q >= 0 and V >= 0 and q + V > 0, "q, V", ">= 0 with q + V > 0", (q, V))
    require(beta * math.sqrt(2 * (q + V)) <= SOFTMAX_SCALE_MAX, "beta",
            f"at most {SOFTMAX_SCALE_MAX:g} / sqrt(2 Q0) for the softmax e_gen (the v-lattice "
            "resolves unit features over the logits' range)", beta)
    (b0, p0), (b1, p1) = (_softmax_level(T=T, beta=beta, q=q, V=V, h=h) for h in SOFTMAX_STEPS)
    floor = 1e-14 * T
    return Estimate(max(b1, 0.0), abs(b1 - b0) + floor,
                    f"row overlaps by the Laplace (v-lattice) representation, steps "
                    f"{SOFTMAX_STEPS[0]} and {SOFTMAX_STEPS[1]}",
                    extra={"plugin": max(p1, 0.0), "plugin_error": abs(p1 - p0) + floor})


# ----------------------------------------------------------------------------- dispatcher
def _bayes(spec: EgenChannel, cc, *, q: float, V: float, level: int) -> Estimate:
    T = spec.tokens
    if spec.kind == "linear":
        return linear(T=T, V=V, delta_out=spec.delta_out)
    if spec.kind == "gaussian":
        return gaussian_readout(statistics=spec.statistics, noise=spec.noise,
                                weights=spec.weights, V=V)
    if V == 0:
        require(bool(cc.noiseless), "V", "> 0 for a noisy channel", V)
        return Estimate(0.0, 0.0, "V = 0: y is known", extra={"plugin": 0.0, "plugin_error": 0.0})
    if spec.kind == "softmax":
        return softmax(T=T, beta=spec.beta, q=q, V=V)
    require(spec.kind == "discrete", "kind", "linear, softmax, gaussian or discrete", spec.kind)
    return discrete(cc, spec.readout, q=q, V=V, level=level)


def _coarse(spec: EgenChannel, cc, *, q: float, V: float, level: int) -> tuple[float, float]:
    """(e_gen, e_plugin) on a coarse rule (for the slopes in V only)."""
    if spec.kind == "linear":
        e = spec.tokens * (spec.tokens + 1) * (V + spec.delta_out)
        return e, e
    if spec.kind == "softmax":
        return _softmax_level(T=spec.tokens, beta=spec.beta, q=q, V=V, h=_SLOPE_STEP)
    b, p, _ = _discrete_level(cc, np.asarray(spec.readout, float), q=q, V=V, level=_SLOPE_LEVEL)
    return b, p


def generalisation_error(spec: EgenChannel, cc, *, q: float, V: float, V_error: float = 0.0,
                         level: int = 0) -> Estimate:
    """e_gen (Bayes-optimal) at the fixed point (q, V) with its error: the rule's refinement
    error plus 2 |d e_gen / dV| ``V_error`` (the fixed point's own error, Q0 = q + V fixed; the
    slope exact for the linear and Gaussian read-outs, else by a central difference on a coarse
    rule, doubled for its own error); the plug-in error likewise. extra: plugin, plugin_error,
    slope_V, plugin_slope_V."""
    require(V >= 0 and q >= 0, "q, V", ">= 0", (q, V))
    est = _bayes(spec, cc, q=q, V=V, level=level)
    if V_error > 0 and V > 0:
        if spec.kind == "linear":
            slope = plug_slope = spec.tokens * (spec.tokens + 1)
        elif spec.kind == "gaussian":
            slope = plug_slope = est.extra["slope_exact"]
        else:
            d = min(1e-3 * V, 0.5 * q) if q > 0 else 1e-3 * V
            b_hi, p_hi = _coarse(spec, cc, q=q - d, V=V + d, level=level)
            b_lo, p_lo = _coarse(spec, cc, q=q + d, V=V - d, level=level)
            slope = abs(b_hi - b_lo) / (2 * d)
            plug_slope = abs(p_hi - p_lo) / (2 * d)
        extra = dict(est.extra)
        extra["slope_V"] = slope
        extra["plugin_slope_V"] = plug_slope
        if extra.get("plugin_error") is not None:
            extra["plugin_error"] = extra["plugin_error"] + 2 * plug_slope * V_error
        est = Estimate(est.value, est.error + 2 * slope * V_error, est.method, extra=extra)
    return est
