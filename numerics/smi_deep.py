"""Weak-recovery thresholds of deep tied attention with L = 2 or 3 layers (THEORY 2.2, 2.3).

At Q = 0 the stability operator F is block diagonal between layers (each row z_l can flip sign
alone: A_l depends on h^(l) h^(l)T, and y on h^(L) up to sign), so layer l has its own threshold
alpha_l = 1 / lambda_l with

    lambda_l = E_y || Cov[z_l | y] - I ||_F^2      (posterior under z ~ N(0, I), THEORY 2.2).

Fibre (THEORY 2.3): y fixes h = h^(L) up to sign; the rows z_1 .. z_{L-1} are free and
z_L = M^{-1} (+-h), M = A_{L-1} ... A_1, with Jacobian 1 / det M (det A_l >= c (1 + c) > 0). Both
signs carry the same weight, so the density of h (one sign) is

    Z(h) = E_{z_1..z_{L-1} ~ N(0, I)} [ N(M^{-1} h; 0, I) / det M ],

and every conditional moment is a ratio of such expectations. Rules (deterministic, no truncated
domain):

* inner: tensor Gauss-Hermite over the 2 (L - 1) free coordinates (weight N(0, I));
* outer: Gauss-Hermite for N(h; 0, sigma_h^2 I) on the half plane h_0 > 0 (h -> -h symmetry),
  applied to Z(h) F(h) / N(h; 0, sigma_h^2 I). The ratio decays because sigma_h^2 exceeds
  sup ||M||^2 <= s_max^(2 (L - 1)), where s_max^2 = sup_P ||P + c I||^2 over row-stochastic P is
  attained at an extreme point of that convex set (||.||^2 is convex): P = [[1, 0], [1, 0]].

The error of each lambda_l is the difference between two pairs of orders. The matrices M^{-1}
and det M come from the symbolic fibre (:func:`aim_sym.smi.compile_functions`): M^{-1} h is linear
in h, so its two columns are the fibre evaluated at h = e_0 and h = e_1.
"""

from __future__ import annotations

import math
import time

import numpy as np

from .records import Estimate, require
from .smi_fibre import (
    check,
    check_skip_floor,
    fibre_point,
    fibre_quadratics,
    functions,
    gh_tensor,
    inverse_columns,
    ratio_grid2,
)

SUPPORTED_LAYERS = (2, 3)
SIGMA_H_FACTOR = 1.4  # sigma_h^2 = factor * sup ||M||^2
# ((outer coarse, outer fine), inner orders): outer = (n_u, n_theta) polar rule, inner = n_z
# L = 3: inner orders 16, 20, 24 gave layer 2 8.7017, 8.6862, 8.6875 (a sign change the tail
# estimate read as converged, 8.6875 +- 0.0018); 24, 28, 32, 36 give 8.6875, 8.6915, 8.6945,
# 8.6963 (ratio ~0.6-0.75): from (24, 28, 32) 8.6945 +- 0.012, covering 36 and the Monte Carlo
ORDERS = {2: (((100, 24), (150, 32)), (48, 64, 80)), 3: (((90, 24), (120, 32)), (24, 28, 32))}
_CHUNK = 4_000_000
U_LO, U_HI = 16.0, 2.2  # log-radius window around log(sigma_h): below, the disc r < e^-16 sigma carries
# above, |h|^2 > e^3.2 sigma^2 = 24 sup ||M||^2 sigma-units: Gaussian tail < exp(-12 * 1.4)


def norm_bound(skip: float) -> float:
    """s_max^2 = max ||P + c I||_2^2 over row-stochastic 2x2 P (the extreme point P = [[1, 0],
    [1, 0]]; the permutations give (1 + c)^2, which is smaller)."""
    A = np.array([[1.0 + skip, 0.0], [1.0, skip]])
    return float(max(np.linalg.eigvalsh(A @ A.T).max(), (1.0 + skip) ** 2))


def _inner_grid(n: int, dims: int):
    """Tensor GH over the free rows; each row's sign flip z_l -> -z_l leaves M (hence every
    integrand) invariant, so only z_l0 > 0 is kept, with doubled weights."""
    require(n % 2 == 0, "n_z", "even", n)
    pts, W = gh_tensor(n, dims)
    keep = np.ones(W.size, dtype=bool)
    for l in range(0, dims, 2):
        keep &= pts[l] > 0
    return [p[keep] for p in pts], W[keep] * 2.0 ** (dims // 2)


def _polar_grid(n_u: int, n_theta: int, sigma: float):
    """Polar rule on the half plane theta in [0, pi) (doubled by h -> -h): h = r (cos, sin),
    r = exp(u), dh = r^2 du dtheta; trapezoid in u on [log(sigma) - U_LO, log(sigma) + U_HI] and
    in the periodic theta. Both trapezoids converge exponentially for analytic integrands decaying
    like r^2 (r -> 0) and like a Gaussian mixture (r -> infinity)."""
    u = np.linspace(math.log(sigma) - U_LO, math.log(sigma) + U_HI, n_u)
    du = u[1] - u[0]
    th = (np.arange(n_theta) + 0.5) * math.pi / n_theta
    U, TH = np.meshgrid(u, th, indexing="ij")
    r = np.exp(U.ravel())
    h0, h1 = r * np.cos(TH.ravel()), r * np.sin(TH.ravel())
    wh = 2.0 * du * (math.pi / n_theta) * r**2
    return h0, h1, wh


def lambdas(*, layers: int, skip: float, beta: float, n_h, n_z: int) -> dict:
    """``n_h``: an even GH order, or ``(n_u, n_theta)`` for the polar rule (the default route).
    lambda_l = E_y ||Cov[z_l | y] - I||_F^2 for l = 1..L, and the mass (should be 1)."""
    dims = 2 * (layers - 1)
    params, wz = _inner_grid(n_z, dims)
    Mi, jac = inverse_columns(params, layers, skip, beta)
    wi = wz * jac / (2 * math.pi)
    # |M^{-1} h|^2 = h^T B h; z_L z_L^T entries as quadratic forms in h
    B, _, quad = fibre_quadratics(Mi)
    mom = [wi]
    for l in range(layers - 1):
        z0, z1 = params[2 * l], params[2 * l + 1]
        mom += [wi * z0 * z0, wi * z0 * z1, wi * z1 * z1]
    mom += [wi * q for q in quad]
    Mz = np.stack(mom).T                                   # (N_in, 1 + 3 (L-1) + 9)
    sigma = math.sqrt(SIGMA_H_FACTOR * norm_bound(skip) ** (layers - 1))
    if isinstance(n_h, tuple):
        h0, h1, wh = _polar_grid(n_h[0], n_h[1], sigma)
    else:
        h0, h1, wh = ratio_grid2(n_h, sigma)
    acc = np.zeros(1 + layers)
    fro = np.array([1.0, 2.0, 1.0])
    eye = np.array([1.0, 0.0, 1.0])
    step = max(1, _CHUNK // wi.size)
    for s0 in range(0, h0.size, step):
        sl = slice(s0, s0 + step)
        hh = np.stack([h0[sl] ** 2, h0[sl] * h1[sl], h1[sl] ** 2]).T
        m = np.exp(-0.5 * (hh @ B)) @ Mz
        Z = m[:, 0]
        Zs = np.where(Z > 0, Z, 1.0)
        W = wh[sl] * Z
        acc[0] += W.sum()
        for l in range(layers - 1):
            G = m[:, 1 + 3 * l: 4 + 3 * l] / Zs[:, None] - eye
            acc[1 + l] += W @ ((G**2) @ fro)
        base = 1 + 3 * (layers - 1)
        CL = np.stack([(m[:, base + 3 * j: base + 3 * j + 3] * hh).sum(1) for j in range(3)],
                      1) / Zs[:, None]
        acc[layers] += W @ (((CL - eye) ** 2) @ fro)
    out = {"mass": float(acc[0])}
    for l in range(1, layers + 1):
        out[f"lam{l}"] = float(acc[l])
    return out


def _tail_estimate(v: list[float]) -> tuple[float, float]:
    """Value and error from three refinements v0, v1, v2: error = |d2| (1 + r / (1 - r)) with
    r = |d2 / d1|, the geometric tail of the remaining refinements; r >= 0.8 or a change of
    sign between d1 and d2 means the rule is not in its convergent regime and the whole spread
    (times 5) is reported instead."""
    d1, d2 = v[1] - v[0], v[2] - v[1]
    r = abs(d2) / abs(d1) if d1 != 0 else 0.0
    if r >= 0.8 or d1 * d2 < 0:
        return v[2], abs(v[2] - v[0]) * 5.0
    return v[2], abs(d2) * (1.0 + r / (1.0 - r))


def stability(*, layers: int = 3, tokens: int = 2, skip: float = 1.0, beta: float = 1.0,
              orders=None) -> dict:
    """lambda_l as Estimates from three inner orders at the finer outer rule (error: geometric
    tail of the refinements, :func:`_tail_estimate`) plus the outer-rule change plus the
    deviation of the mass from 1 times the value, and the mass.  Skip below
    :data:`aim_sym.numerics.smi_fibre.SKIP_FLOORS` is refused (the Gauss-Hermite fibre rule does
    not resolve det A -> c (1 + c) there)."""
    check(layers, tokens, skip, beta, supported=SUPPORTED_LAYERS)
    check_skip_floor(skip, "weak_l3" if layers == 3 else "weak_deep_l2")
    orders = ORDERS[layers] if orders is None else orders
    (outer_lo, outer_hi), inner = orders
    runs = [lambdas(layers=layers, skip=skip, beta=beta, n_h=outer_hi, n_z=n) for n in inner]
    coarse = lambdas(layers=layers, skip=skip, beta=beta, n_h=outer_lo, n_z=inner[-1])
    meth = (f"polar trapezoid over h (log-radius x angle) {outer_lo} vs {outer_hi} x tensor "
            f"Gauss-Hermite over {2 * (layers - 1)} fibre coordinates, orders {tuple(inner)}")
    out = {}
    dm = abs(runs[-1]["mass"] - 1.0)      # what the rules lose of the h-density (1e-4 at c = 0.5)
    for k in runs[-1]:
        v, e = _tail_estimate([r[k] for r in runs])
        out[k] = Estimate(v, e + abs(v - coarse[k]) + dm * abs(v), meth)
    return out


def weak_thresholds(*, layers: int = 3, tokens: int = 2, skip: float = 1.0, beta: float = 1.0,
                    orders=None, progress=None) -> list[dict]:
    """alpha_l = 1 / lambda_l per layer (THEORY 2.2): dicts layer, kind, value, error, method."""
    t = time.perf_counter()
    F = stability(layers=layers, tokens=tokens, skip=skip, beta=beta, orders=orders)
    dt = time.perf_counter() - t
    if progress:
        progress(1, 1, "weak thresholds")
    out = []
    for l in range(1, layers + 1):
        e = F[f"lam{l}"]
        out.append(dict(layer=l, kind="weak", value=1.0 / e.value, error=e.error / e.value**2,
                        method=e.method, seconds=dt))
    return out


def montecarlo_lambdas(*, layers: int = 3, skip: float = 1.0, beta: float = 1.0,
                       samples: int = 2000, inner: int = 4000, seed: int = 0) -> dict:
    """Independent route: true z ~ N(0, I), y = g(z); Cov[z_l | y] from `inner` prior samples of
    the free rows (self-normalised importance weights N(M^{-1} h) / det M). Returns, per layer,
    (mean, standard error) over the outer samples. The ratio estimator has an O(1/inner) bias."""
    check(layers, 2, skip, beta, supported=SUPPORTED_LAYERS)
    check_skip_floor(skip, "weak_l3" if layers == 3 else "weak_deep_l2")
    fwd = functions(layers)["forward"]
    rng = np.random.default_rng(seed)
    vals = np.zeros((samples, layers))
    for s in range(samples):
        z = rng.standard_normal(2 * layers)
        h0, h1 = (float(v) for v in fwd(*z, skip, beta)[:2])
        params = list(rng.standard_normal((2 * (layers - 1), inner)))
        Mi, jac = inverse_columns(params, layers, skip, beta)
        zl0, zl1 = fibre_point(Mi, h0, h1)
        logw = -0.5 * (zl0**2 + zl1**2) + np.log(jac)
        w = np.exp(logw - logw.max())
        w /= w.sum()
        rows = [(params[2 * l], params[2 * l + 1]) for l in range(layers - 1)] + [(zl0, zl1)]
        for l, (a, b) in enumerate(rows):
            c00 = w @ (a * a) - 1.0
            c01 = w @ (a * b)
            c11 = w @ (b * b) - 1.0
            vals[s, l] = c00**2 + 2 * c01**2 + c11**2
    mean = vals.mean(0)
    se = vals.std(0, ddof=1) / math.sqrt(samples)
    return {f"lam{l + 1}": (float(mean[l]), float(se[l])) for l in range(layers)}
