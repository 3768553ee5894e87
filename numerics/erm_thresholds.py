"""Thresholds of the ERM for one tied attention layer (THEORY 3).

alpha_bar = alpha (T^2 + T - 2)/2 counts the effective scalar measurements per d^2.

- Interpolation (lambda -> 0+): delta_bar solves Q0 + Delta/2 = J(delta_bar, 0) -
  (delta_bar/2) d_delta J(delta_bar, 0), then alpha_interp = d_delta J(delta_bar, 0) /
  (2 delta_bar (T^2 + T - 2)); as Delta -> 0+, alpha_bar_interp -> (1 + 2 kappa0 - kappa0^2)/4.
- Perfect recovery, factorised (minimum nuclear norm on PSD matrices): alpha_bar is half the
  statistical dimension (per d^2/2) of the descent cone of trace + PSD constraint at a rank
  kappa0 d matrix,
      F(c) = 1 - (1 - kappa0)^2 + kappa0 (1 - kappa0) c^2 + (1 - kappa0)^2 E_sc[(x - c)_+^2],
  minimised over c (x standard semicircle on [-2, 2]); its stationarity is
  c = (1 - kappa0)(c P_0(c) - P_1(c)) and then F/2 = 1/2 - (1/2)(1 - kappa0)^2 (P_2(c) - c P_1(c)),
  with P_k(x) = (1/2 pi) int_{-2}^x t^k sqrt(4 - t^2) dt (closed forms through x = 2 sin(phi)).
  Direct (element-wise S, Frobenius penalty): alpha_bar = 1/2.  Bayes-optimal (THEORY 1.2):
  alpha_bar = kappa0 - kappa0^2/2 (kappa0 <= 1), 1/2 beyond.
"""

from __future__ import annotations

import math
from typing import Any

import mpmath

from .erm_spectral import spectral_integrals
from .records import ConvergenceError, Estimate, require

__all__ = [
    "alpha_bar_factor",
    "interpolation_threshold",
    "interpolation_small_noise",
    "perfect_recovery_threshold",
    "sc_partial_moment",
    "statistical_dimension_variational",
]


def alpha_bar_factor(tokens: int) -> int:
    """(T^2 + T - 2)/2: alpha_bar = alpha * this (THEORY 3)."""
    require(isinstance(tokens, int) and tokens >= 2, "tokens", "an integer >= 2", tokens)
    return (tokens * tokens + tokens - 2) // 2


def _check_kappa0(kappa0: Any) -> None:
    require(_pos(kappa0), "kappa0", "a finite real number > 0", kappa0)


def _pos(v: Any) -> bool:
    try:
        return math.isfinite(float(v)) and float(v) > 0
    except (TypeError, ValueError):
        return False


def _interp_residual(delta: Any, kappa0: Any, Delta: Any, dps: int | None,
                     coarse: bool) -> Any:
    s = spectral_integrals(kappa0=kappa0, delta=delta, eps=0, dps=dps, coarse=coarse)
    return s.J - delta * s.dJ_ddelta / 2 - (1 + kappa0 + Delta / 2), s


def delta_bracket(f, *, what: str) -> tuple[float, float]:
    """(lo, hi) with f(lo) <= 0 <= f(hi) for a residual f(delta) negative as delta -> 0 and
    positive at large delta: doubling up from 1, quartering down from 1e-3; ConvergenceError
    naming ``what`` if no sign change is found in [1e-12, 1e6]."""
    lo, hi = 1e-3, 1.0
    while f(hi) < 0:
        lo, hi = hi, 2 * hi
        if hi > 1e6:
            raise ConvergenceError(f"no bracket for {what}", last_iterate=hi)
    while f(lo) > 0:
        lo /= 4
        if lo < 1e-12:
            raise ConvergenceError(f"no bracket for {what}", last_iterate=lo)
    return lo, hi


def _delta_bar(kappa0: Any, Delta: Any, dps: int | None, coarse: bool) -> tuple[Any, Any]:
    """Root of the interpolation condition: a bracket in double precision (the residual is
    -Delta/2 at delta -> 0), bisection, then secant at ``dps`` digits."""
    k0, D = float(kappa0), float(Delta)

    def f(d: float) -> float:
        return float(_interp_residual(d, k0, D, None, coarse)[0])

    lo, hi = delta_bracket(f, what="delta_bar")
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if f(mid) < 0:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-13 * hi:
            break
    root = 0.5 * (lo + hi)
    if dps is None:
        return root, _interp_residual(root, k0, D, None, coarse)[1]
    with mpmath.workdps(dps + 5):
        k0m, Dm = mpmath.mpf(kappa0), mpmath.mpf(Delta)
        try:
            r = mpmath.findroot(lambda d: _interp_residual(d, k0m, Dm, dps, coarse)[0],
                                (mpmath.mpf(lo), mpmath.mpf(hi)), solver="secant",
                                tol=mpmath.mpf(10) ** (-2 * dps))
        except ValueError as e:
            raise ConvergenceError("secant for delta_bar", last_iterate=root) from e
        return r, _interp_residual(r, k0m, Dm, dps, coarse)[1]


def interpolation_threshold(*, kappa0: Any, Delta: Any, tokens: int = 2,
                            dps: int | None = 30) -> Estimate:
    """alpha_interp (lambda -> 0+) with delta_bar and alpha_bar in ``extra`` (THEORY 3).

    Error: |difference between the roots with the fine and the coarse spectral rule| (at
    ``dps``: the coarse rule has two thirds of the digits)."""
    _check_kappa0(kappa0)
    require(_pos(Delta), "Delta", "a finite real number > 0", Delta)
    fac = alpha_bar_factor(tokens)
    out = []
    with mpmath.workdps(16 if dps is None else dps + 5):
        for coarse in (False, True):
            d, s = _delta_bar(kappa0, Delta, dps, coarse)
            out.append((d, s.dJ_ddelta / (2 * d * 2 * fac)))
        (d, a), (dc, ac) = out
        err, d_err = float(abs(a - ac)), float(abs(d - dc))
        ab = a * fac
    return Estimate(
        value=a, error=err,
        method="root of Q0 + Delta/2 = J - (delta/2) d_delta J, exact derivatives, two rules",
        precision=16 if dps is None else int(dps),
        extra={"delta_bar": d, "delta_bar_error": d_err, "alpha_bar": ab,
               "alpha_bar_error": err * fac, "kappa0": kappa0, "Delta": Delta,
               "tokens": tokens})


def interpolation_small_noise(*, kappa0: Any) -> Any:
    """Delta -> 0+ limit alpha_bar_interp = (1 + 2 kappa0 - kappa0^2)/4 (kappa0 < 1), 1/2 beyond."""
    _check_kappa0(kappa0)
    return (1 + 2 * kappa0 - kappa0**2) / 4 if kappa0 < 1 else 0.5


def sc_partial_moment(k: int, x: Any) -> Any:
    """P_k(x) = (1/2 pi) int_{-2}^x t^k sqrt(4 - t^2) dt for k = 0, 1, 2 (closed forms, mpmath)."""
    x = mpmath.mpf(x)
    if x <= -2:
        return mpmath.mpf(0)
    if x >= 2:
        return (mpmath.mpf(1), mpmath.mpf(0), mpmath.mpf(1))[k]
    phi = mpmath.asin(x / 2)
    if k == 0:
        return (phi + mpmath.pi / 2 + mpmath.sin(2 * phi) / 2) / mpmath.pi
    if k == 1:
        return -4 * mpmath.cos(phi) ** 3 / (3 * mpmath.pi)
    if k == 2:
        return (phi + mpmath.pi / 2 - mpmath.sin(4 * phi) / 4) / mpmath.pi
    raise ValueError(k)


def _perfect_factorised(kappa0: Any, dps: int) -> tuple[Any, Any]:
    """(alpha_bar, c) from the stationarity form at ``dps`` digits."""
    with mpmath.workdps(dps + 10):
        k0 = mpmath.mpf(kappa0)
        if k0 >= 1:
            return mpmath.mpf(1) / 2, mpmath.mpf(0)
        P = sc_partial_moment

        def h(c: Any) -> Any:
            return c - (1 - k0) * (c * P(0, c) - P(1, c))

        # h(0) = (1 - k0) P_1(0) < 0, h(2) = 2 > 0, and h is increasing on [0, 2]
        c = mpmath.findroot(h, (mpmath.mpf(0), mpmath.mpf(2)), solver="anderson",
                            tol=mpmath.mpf(10) ** (-2 * dps))
        ab = mpmath.mpf(1) / 2 - (1 - k0) ** 2 * (P(2, c) - c * P(1, c)) / 2
    with mpmath.workdps(dps):
        return +ab, +c


def statistical_dimension_variational(*, kappa0: float) -> tuple[float, float]:
    """Independent route for the factorised perfect-recovery alpha_bar: min_c F(c)/2 with
    E_sc[(x - c)_+^2] by adaptive quadrature of the semicircle density (no closed forms) and a
    bounded scalar minimisation; returns (alpha_bar, c)."""
    import warnings

    from scipy.integrate import IntegrationWarning, quad
    from scipy.optimize import minimize_scalar

    k0 = float(kappa0)

    def tail2(c: float) -> float:
        with warnings.catch_warnings():  # the 1e-15 request is below what double reaches
            warnings.simplefilter("ignore", IntegrationWarning)
            v, _ = quad(lambda x: (x - c) ** 2 * math.sqrt(4 - x * x) / (2 * math.pi), c, 2,
                        epsabs=1e-15, epsrel=1e-14, limit=200)
        return v

    def F(c: float) -> float:
        return 1 - (1 - k0) ** 2 + k0 * (1 - k0) * c * c + (1 - k0) ** 2 * tail2(c)

    r = minimize_scalar(F, bounds=(0.0, 2.0), method="bounded", options={"xatol": 1e-10})
    return r.fun / 2, r.x


def perfect_recovery_threshold(*, kappa0: Any, tokens: int = 2, kind: str = "factorised",
                               dps: int = 30) -> Estimate:
    """Perfect-recovery threshold in alpha (alpha_bar in ``extra``), noiseless (THEORY 3).

    ``kind``: "factorised" (minimum nuclear norm), "direct" (Frobenius, 1/2) or "bayes"
    (kappa0 - kappa0^2/2).  Error of the factorised value: difference between ``dps`` and
    ``dps``/2 + 5 digits."""
    _check_kappa0(kappa0)
    require(kind in ("factorised", "direct", "bayes"), "kind",
            "one of factorised, direct, bayes", kind)
    require(isinstance(dps, int) and 15 <= dps <= 200, "dps", "an integer in [15, 200]", dps)
    fac = alpha_bar_factor(tokens)
    extra: dict = {"kappa0": kappa0, "tokens": tokens, "kind": kind}
    with mpmath.workdps(dps):
        k0 = mpmath.mpf(kappa0)
        if kind == "direct":
            ab, err, method = mpmath.mpf(1) / 2, 0.0, "closed form (parameter counting)"
        elif kind == "bayes":
            ab = k0 - k0 * k0 / 2 if k0 < 1 else mpmath.mpf(1) / 2
            err, method = 0.0, "closed form (THEORY 1.2)"
        else:
            ab, c = _perfect_factorised(kappa0, dps)
            ab_lo, _ = _perfect_factorised(kappa0, dps // 2 + 5)
            err = float(abs(ab - ab_lo))
            method = "c = (1 - kappa0)(c P_0(c) - P_1(c)), closed-form P_k, two precisions"
            extra["c"] = c
        a = ab / fac
    extra.update(alpha_bar=ab, alpha_bar_error=err)
    return Estimate(value=a, error=err / fac, method=method, precision=dps, extra=extra)
