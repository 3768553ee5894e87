"""State evolution of the attention-indexed model (THEORY 1.1, 1.2).

Consumes a compiled channel (:class:`aim_sym.compiled.CompiledChannel`, duck-typed: this module
never imports sympy) and the Wishart prior of :mod:`aim_sym.numerics.wishart`.

* output side: E(q, V) = E[sum_ab (1 + delta_ab) g_ab^2] and Psi_out(q, V);
* the SE map on the error V = Q0 - q: V -> mmse(1 / q_hat), q_hat = 2 alpha E(Q0 - V, V);
* all fixed points in V in [0, 1] (q in [rho, Q0]), their stability and free entropy
  Phi = -q q_hat / 4 + q_hat Q0 / 4 - I(1 / q_hat) + alpha Psi_out;
* the small-width limit (alpha = alpha_bar rho): q -> max(1 - t, 0)^2, t = 1 / q_hat_bar.

Curves over many alphas (the traced route and the per-alpha route built on this module's
:func:`fixed_points`) are :func:`aim_sym.numerics.aim_curve.curve`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import brentq

from . import wishart
from .gauss import TAIL_MASS, gaussian_grid
from .records import ConvergenceError, Estimate, InputError, require


# ----------------------------------------------------------------------------- output side
def _flat_eval(fn: Callable, args, n: int) -> list[np.ndarray]:
    out = fn(*args)
    return [np.broadcast_to(np.asarray(o, dtype=float), (n,)) for o in out]


def output_integrands(cc, m: np.ndarray, V) -> tuple[np.ndarray, np.ndarray]:
    """Per node omega = m (rows): sum_y |grad Z_y|_C^2 / Z_y and sum_y Z_y log Z_y (THEORY 1.1);
    ``V`` a scalar or one value per node."""
    N = m.shape[0]
    flat = _flat_eval(cc.z_grad, [m[:, k] for k in range(cc.K)] + [V], N)
    Y, n = cc.n_outputs, cc.n_pairs
    Z = np.stack(flat[:Y])
    G = np.stack(flat[Y:]).reshape(Y, n, N)
    wg2 = np.einsum("ynN,n->yN", G * G, cc.weights)
    pos = Z > 0
    safe = np.where(pos, Z, 1.0)
    e_int = np.where(pos, wg2 / safe, 0.0).sum(axis=0)
    psi_int = np.where(pos, Z * np.log(safe), 0.0).sum(axis=0)
    return e_int, psi_int


def output_moments(cc, *, q: float, V: float, level: int = 0) -> tuple[float, float, float]:
    """(E(q, V), Psi_out(q, V), tail bound) by quadrature over omega (THEORY 1.1).

    Discrete channels: E = E_omega sum_y |grad Z_y|_C^2 / Z_y, Psi = E_omega sum_y Z_y log Z_y.
    Gaussian channels: closed forms, independent of q.
    """
    require(V > 0, "V", "> 0", V)
    require(q >= 0, "q", ">= 0", q)
    if not cc.discrete:
        return float(cc.e_g2(V)), float(cc.psi_out(V)), 0.0
    K = cc.K
    pruned = 0.0
    if q == 0:
        m = np.zeros((1, K))
        w = np.ones(1)
    else:
        m, w, pruned = gaussian_grid(q * cc.S, np.sqrt(V * np.diag(cc.S)), level)
    e_int, psi_int = output_integrands(cc, m, V)
    tail = (TAIL_MASS + pruned) * float(np.max(np.abs(e_int))) if q > 0 else 0.0
    return float(e_int @ w), float(psi_int @ w), tail


def output_estimate(cc, *, q: float, V: float, level: int = 0) -> tuple[Estimate, Estimate]:
    """E(q, V) and Psi_out with errors from two quadrature levels (plus the tail bound)."""
    e0, p0, _ = output_moments(cc, q=q, V=V, level=level)
    e1, p1, tail = output_moments(cc, q=q, V=V, level=level + 1)
    method = "closed form" if not cc.discrete else "sinh-trapezoid quadrature over omega"
    if cc.discrete and q == 0:
        method = "finite sum over outputs"
    return (
        Estimate(e1, abs(e1 - e0) + tail, method),
        Estimate(p1, abs(p1 - p0) + tail, method),
    )


# ----------------------------------------------------------------------------- SE
@dataclass(frozen=True)
class FixedPoint:
    """One SE fixed point (THEORY 1.1): q, q_hat, mmse = Q0 - q, Phi, stability."""

    q: float
    q_hat: float
    mmse: float
    phi: float | None
    stable: bool
    slope: float
    error: float
    bayes_optimal: bool = False
    extra: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {
            "q": self.q,
            "q_hat": self.q_hat,
            "mmse": self.mmse,
            "phi": self.phi,
            "stable": self.stable,
            "slope": self.slope,
            "error": self.error,
            "bayes_optimal": self.bayes_optimal,
        }


def _check(alpha: float, rho: float) -> None:
    require(np.isfinite(alpha) and alpha >= 0, "alpha", ">= 0", alpha)
    require(np.isfinite(rho) and rho > 0, "rho", "> 0", rho)


def se_map(cc, *, alpha: float, rho: float, V: float, level: int = 0) -> tuple[float, float]:
    """One SE step on the error: V -> (mmse(1 / q_hat), q_hat), q = Q0 - V (THEORY 1.1)."""
    Q0 = 1.0 + rho
    E, _, _ = output_moments(cc, q=Q0 - V, V=V, level=level)
    q_hat = 2 * alpha * E
    if q_hat <= 0:
        return 1.0, 0.0
    return float(wishart.mmse(1.0 / q_hat, rho=rho)), q_hat


def free_entropy(cc, *, alpha: float, rho: float, V: float, q_hat: float, level: int = 0) -> float:
    """Phi(q, q_hat) = -q q_hat/4 + q_hat Q0/4 - I(1/q_hat) + alpha Psi_out(q) (THEORY 1.1)."""
    Q0 = 1.0 + rho
    q = Q0 - V
    _, psi, _ = output_moments(cc, q=q, V=V, level=level)
    I = float(wishart.mutual_information(1.0 / q_hat, rho=rho)) if q_hat > 0 else 0.0
    return -q * q_hat / 4 + q_hat * Q0 / 4 - I + alpha * psi


def _roots(f: Callable[[float], float], grid: np.ndarray, xtol: float = 1e-14) -> list[float]:
    vals = [f(x) for x in grid]
    roots = []
    for (x0, f0), (x1, f1) in zip(zip(grid, vals), zip(grid[1:], vals[1:])):
        if f0 == 0:
            roots.append(x0)
        elif f0 * f1 < 0:
            roots.append(brentq(f, x0, x1, xtol=xtol, rtol=1e-15, maxiter=200))
    if vals[-1] == 0:
        roots.append(grid[-1])
    return roots


def _polish(f: Callable[[float], float], v: float, xtol: float = 1e-16,
            first: float = 1e-4) -> float:
    """Root of f near v: bracket by widening around v (from ``first``), then Brent's method."""
    for rel in (first, 1e-4, 1e-2, 0.3, 0.9):
        lo, hi = max(v * (1 - rel) - 1e-12, 1e-14), min(v * (1 + rel) + 1e-12, 1.0)
        flo, fhi = f(lo), f(hi)
        if flo == 0:
            return lo
        if fhi == 0:
            return hi
        if flo * fhi < 0:
            return brentq(f, lo, hi, xtol=xtol, rtol=1e-15, maxiter=200)
    raise ConvergenceError("could not bracket an SE fixed point", last_iterate=v, residual=f(v))


V_SCAN = 1e-6   # the V grid's lower end; below it the scan goes on in decades (hardmax: V ~ 1/alpha^2)
V_MIN = 1e-13   # the lowest V searched for a fixed point (q = Q0 - V keeps ~3 digits of V there)


def _v_grid(n: int = 48) -> np.ndarray:
    return np.unique(np.concatenate([np.geomspace(V_SCAN, 0.05, n // 2),
                                     np.linspace(0.05, 1, n // 2)]))


def _low_roots(f: Callable[[float], float], *, alpha: float, perfect_stable: bool) -> list[float]:
    """Fixed points below the V grid (large alpha): decades from V_SCAN down to V_MIN on a finer
    quadrature level than the grid's (level -2 misses features of width sqrt(V) there), stopping
    at the first sign change (the map rises above V below the lowest fixed point). None if the
    map stays below V and V = 0 is stable (perfect recovery takes over)."""
    hi, f_hi = V_SCAN, f(V_SCAN)
    while f_hi < 0 and hi > V_MIN * 1.5:
        lo = max(hi / 10, V_MIN)
        f_lo = f(lo)
        if f_lo >= 0:
            return [brentq(f, lo, hi, xtol=1e-6 * lo, rtol=1e-12, maxiter=200)]
        hi, f_hi = lo, f_lo
    if f_hi < 0 and not perfect_stable:
        raise below_v_min(alpha=alpha, last_iterate=hi, residual=f_hi)
    return []


def below_v_min(*, alpha: float, last_iterate: float,
                residual: float | None) -> ConvergenceError:
    """The error for a fixed point below :data:`V_MIN` (alpha too large for double precision)."""
    return ConvergenceError(f"at alpha = {alpha:g} the SE map stays below V down to V = "
                            f"{V_MIN:g}: the fixed point lies beyond double precision",
                            last_iterate=last_iterate, residual=residual)


def fixed_points(cc, *, alpha: float, rho: float, tol: float = 1e-13,
                 max_level: int = 3) -> list[FixedPoint]:
    """All SE fixed points with V = Q0 - q in [0, 1], the Bayes-optimal one flagged.

    Sign changes of mmse(1/q_hat(V)) - V are bracketed on a grid with a coarse quadrature rule;
    each root is then solved by Brent's method on successively finer rules (levels -1, 0, 1, ..)
    until two successive levels agree within ``tol``: their difference (plus the prior's own
    refinement error) is the reported error. V = 0 (perfect recovery) is a fixed point of every
    noiseless channel; it is stable iff alpha >= alpha_PR (THEORY 1.2); its free entropy is not
    finite and is reported as None.
    """
    _check(alpha, rho)
    require(tol > 0, "tol", "> 0", tol)
    if alpha == 0:
        return [FixedPoint(rho, 0.0, 1.0, 0.0, True, 0.0, 0.0, True)]
    coarse = _roots(lambda v: se_map(cc, alpha=alpha, rho=rho, V=v, level=-2)[0] - v,
                    _v_grid(), xtol=1e-6)
    if not (coarse and min(coarse) < 10 * V_SCAN):
        apr = perfect_recovery_alpha(cc, rho=rho) if cc.noiseless else None
        coarse += _low_roots(lambda v: se_map(cc, alpha=alpha, rho=rho, V=v, level=0)[0] - v,
                             alpha=alpha, perfect_stable=apr is not None and alpha >= apr)
    out = [solve_fixed_point(cc, alpha=alpha, rho=rho, v0=vc, tol=tol, max_level=max_level)
           for vc in coarse]
    return _with_perfect_recovery(cc, alpha=alpha, rho=rho, fps=out)


def solve_fixed_point(cc, *, alpha: float, rho: float, v0: float, tol: float,
                      max_level: int = 3, first: float = 1e-4) -> FixedPoint:
    """The SE fixed point near ``v0`` (THEORY 1.1), with stability, Phi and its error.

    Brent's method on mmse(1/q_hat(V)) - V at quadrature levels -1, 0, 1, .. (bracketed by
    widening around the previous root, from the relative half-width ``first``) until two
    successive levels agree within ``tol``; the error is their difference plus the prior's own
    refinement error amplified by 1/|1 - slope|.
    """
    Q0 = 1.0 + rho
    xtol = max(min(tol / 10, 1e-6), 1e-16)
    prev, lev = None, -1
    while True:
        def f(v, lev=lev):
            return se_map(cc, alpha=alpha, rho=rho, V=v, level=lev)[0] - v

        v1 = _polish(f, v0 if prev is None else prev, xtol,
                     first=first if prev is None else 1e-7)
        if not cc.discrete or (prev is not None and abs(v1 - prev) <= tol):
            break
        if lev >= max_level:
            raise ConvergenceError(f"SE fixed point not converged to tol={tol} by quadrature "
                                   f"level {max_level}", last_iterate=v1, residual=abs(v1 - prev))
        prev, lev = v1, lev + 1
    level = lev
    mm, q_hat = se_map(cc, alpha=alpha, rho=rho, V=v1, level=level)
    dv = max(1e-7 * v1, 1e-13)
    slope = (
        se_map(cc, alpha=alpha, rho=rho, V=v1 + dv, level=level)[0]
        - se_map(cc, alpha=alpha, rho=rho, V=v1 - dv, level=level)[0]
    ) / (2 * dv)
    prior_err = wishart.mmse_estimate(1.0 / q_hat, rho=rho).error
    err = (0.0 if prev is None else abs(v1 - prev)) + prior_err / max(abs(1 - slope), 1e-3)
    err = max(err, 4 * np.finfo(float).eps * v1, xtol)  # resolution of a double / the solve
    phi = free_entropy(cc, alpha=alpha, rho=rho, V=v1, q_hat=q_hat, level=level)
    return FixedPoint(Q0 - v1, q_hat, v1, phi, abs(slope) < 1, slope, err, extra={"level": level})


def _with_perfect_recovery(cc, *, alpha: float, rho: float,
                           fps: list[FixedPoint]) -> list[FixedPoint]:
    """Append V = 0 for noiseless channels (stable iff alpha >= alpha_PR) and flag the
    Bayes-optimal fixed point."""
    out = list(fps)
    if cc.noiseless:
        apr = perfect_recovery_alpha(cc, rho=rho)
        stable0 = apr is not None and alpha >= apr
        out.append(FixedPoint(1.0 + rho, float("inf"), 0.0, None, stable0, float("nan"), 0.0))
    return _flag_bayes_optimal(out)


def _flag_bayes_optimal(fps: list[FixedPoint]) -> list[FixedPoint]:
    stable = [f for f in fps if f.stable]
    if not stable:
        raise ConvergenceError("no stable SE fixed point found", last_iterate=fps, residual=None)
    finite = [f for f in stable if f.phi is not None]
    best = max(finite, key=lambda f: f.phi) if finite else stable[0]
    return [
        FixedPoint(**{**f.__dict__, "bayes_optimal": f is best}) for f in fps
    ]


def bayes_optimal(fps: list[FixedPoint]) -> FixedPoint:
    return next(f for f in fps if f.bayes_optimal)


def perfect_recovery_alpha(cc, *, rho: float) -> float | None:
    """alpha_PR = c(rho) / (2 k), k = lim V E(V), c = 2 rho - rho^2 for rho <= 1, else 1
    (THEORY 1.2); None if k = 0."""
    k = cc.pr_constant
    if k is None or float(k) == 0:
        return None
    return (2 * rho - rho**2 if rho <= 1 else 1.0) / (2 * float(k))


# ----------------------------------------------------------------------------- small width
def small_width_map(cc, *, alpha_bar: float, q: float, level: int = 0) -> float:
    """q -> max(1 - t, 0)^2, t = 1 / (2 alpha_bar E(q, 1 - q)) (THEORY 1.2, rho -> 0)."""
    V = 1.0 - q
    if V <= 0:
        return 1.0
    E, _, _ = output_moments(cc, q=q, V=V, level=level)
    if E <= 0:
        return 0.0
    t = 1.0 / (2 * alpha_bar * E)
    return max(1.0 - t, 0.0) ** 2


def small_width_fixed_points(cc, *, alpha_bar: float, level: int = 0) -> list[dict]:
    """All fixed points q in [0, 1] of the small-width SE (THEORY 1.2), with stability.

    q = 0 is a fixed point iff 2 alpha_bar E(0, 1) <= 1 (then t >= 1 and the map is flat at 0);
    q = 1 is a fixed point of every noiseless channel, stable iff alpha_bar k > 1 where
    k = lim V E (Gaussian channels; k = 0, never stable, for discrete ones).
    """
    require(np.isfinite(alpha_bar) and alpha_bar >= 0, "alpha_bar", ">= 0", alpha_bar)

    def f(x):
        return small_width_map(cc, alpha_bar=alpha_bar, q=x, level=level) - x

    res = []
    if 2 * alpha_bar * float(cc.e_g2_q0(1.0)) <= 1:
        res.append({"q": 0.0, "stable": True, "slope": 0.0})
    grid = np.unique(np.concatenate([np.linspace(1e-9, 1 - 1e-9, 41),
                                     1 - np.geomspace(1e-9, 0.02, 12)]))
    for r in _roots(f, grid):
        d = 1e-7 * max(min(r, 1 - r), 1e-3)
        s = (f(r + d) - f(r - d)) / (2 * d) + 1
        res.append({"q": r, "stable": bool(abs(s) < 1), "slope": s})
    if cc.noiseless:
        k = 0.0 if cc.pr_constant is None else float(cc.pr_constant)
        res.append({"q": 1.0, "stable": bool(alpha_bar * k > 1),
                    "slope": 1.0 / (alpha_bar * k) if alpha_bar * k > 0 else float("inf")})
    return res


# ----------------------------------------------------------------------------- many digits
def fixed_point_mp(cc, *, alpha, rho, dps: int, v0: float) -> Estimate:
    """The SE fixed point V = mmse(1 / (2 alpha E(V))) to ``dps`` digits (Gaussian channels,
    whose output map E(V) is a closed form), by the secant method from ``v0`` at two working
    precisions (dps + 5 and dps + 15): their difference is the error."""
    import mpmath

    if cc.discrete:
        raise InputError("many-digit SE needs a closed-form output map (a Gaussian channel)")
    require(5 <= dps <= 200, "dps", "in 5..200", dps)
    vals = []
    for work in (dps + 5, dps + 15):
        with mpmath.workdps(work):
            a, r = mpmath.mpf(str(alpha)), mpmath.mpf(str(rho))

            def f(v, a=a, r=r, work=work):
                q_hat = 2 * a * cc.e_g2_mp(v)
                return wishart.mmse(1 / q_hat, rho=r, dps=work) - v

            x0 = mpmath.mpf(v0)
            vals.append(mpmath.findroot(f, (x0, x0 * (1 + mpmath.mpf(10) ** -8)),
                                        solver="secant", tol=mpmath.mpf(10) ** (-2 * work)))
    with mpmath.workdps(dps + 15):
        err = abs(vals[1] - vals[0])
        return Estimate(mpmath.nstr(vals[1], dps), float(err), "secant on the closed-form output "
                        "map with the mpmath prior", precision=dps)
