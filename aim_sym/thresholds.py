"""Thresholds of the AIM in closed form where the SE allows it (THEORY 1.2).

* small-width weak recovery: alpha_bar_c = 1 / (2 E_{q=0}[sum (1 + delta_ab) g_ab^2]) at V = 1;
  at q = 0 omega = 0, so for discrete channels the expectation is a finite sum over outputs and
  the threshold is an exact sympy expression;
* perfect recovery: alpha_PR = c(rho) / (2 k), c = 2 rho - rho^2 for rho <= 1 and 1 above,
  k = lim_{V -> 0} V E(V)
  (parameter counting; the prior mmse(Delta) / Delta -> c(rho) as Delta -> 0), and
  alpha_bar_PR = 1 / k in the small-width limit. Channels with k = 0 (noisy, or discrete, where
  q_hat grows slower than 1/V) have no finite perfect-recovery threshold.
"""

from __future__ import annotations

from dataclasses import dataclass

import mpmath
import sympy as sp

from .channels import Channel, ChannelError
from .compiled import pr_constant, substitute_params
from .domains import Domain
from .output import derive
from .symbols import V, rho


@dataclass(frozen=True)
class ClosedFormThreshold:
    """A threshold as an exact expression, its decimal value and the refinement error."""

    kind: str
    expr: sp.Expr
    value: str
    error: float
    method: str
    digits: int

    @property
    def latex(self) -> str:
        return sp.latex(self.expr)

    def as_dict(self) -> dict:
        return {
            "kind": self.kind,
            "value": self.value,
            "error": self.error,
            "method": self.method,
            "digits": self.digits,
            "closed_form": self.latex,
            "sympy": sp.sstr(self.expr),
        }


def _evaluate(expr: sp.Expr, digits: int) -> tuple[str, float]:
    """Decimal string with ``digits`` significant digits; error = difference between
    evaluations at digits + 10 and digits + 25 working digits."""
    a = sp.N(expr, digits + 10)
    b = sp.N(expr, digits + 25)
    if not (a.is_real and b.is_real):
        raise ChannelError(f"threshold expression is not real: {expr}")
    with mpmath.workdps(digits + 30):
        err = abs(mpmath.mpf(str(a)) - mpmath.mpf(str(b)))
    # agreement below the resolution of the comparison is reported as that resolution
    return sp.sstr(sp.N(expr, digits)), max(float(err), 10.0 ** -(digits + 9))


def small_width_weak_expr(ch: Channel, params: dict | None = None) -> sp.Expr:
    """alpha_bar_c = 1 / (2 E_{q=0}[sum (1 + delta_ab) g_ab^2]) at V = 1 (THEORY 1.2)."""
    d = derive(ch)
    e0 = substitute_params(d.E_g2_at_q0, ch, params or {}).subs(V, 1)
    e0 = sp.simplify(e0)
    if e0 == 0:
        raise ChannelError("E[g^2] vanishes at q = 0: the channel carries no information there")
    return sp.simplify(1 / (2 * e0))


def small_width_weak(ch: Channel, *, digits: int = 16, params: dict | None = None):
    expr = small_width_weak_expr(ch, params)
    value, err = _evaluate(expr, digits)
    method = (
        "closed form: finite sum over outputs at q = 0"
        if d_is_discrete(ch)
        else "closed form: Gaussian channel"
    )
    return ClosedFormThreshold("weak (small width)", expr, value, err, method, digits)


def d_is_discrete(ch: Channel) -> bool:
    return derive(ch).discrete


def perfect_recovery_expr(ch: Channel, *, rho_value=None, small_width: bool = False,
                          params: dict | None = None) -> sp.Expr:
    k = pr_constant(ch, params)
    if k == 0:
        raise ChannelError(
            f"channel {ch.name} has no finite perfect-recovery threshold: q_hat V -> 0 as V -> 0"
        )
    if small_width:
        return 1 / k
    r = rho if rho_value is None else sp.Rational(str(rho_value))
    return sp.Piecewise((2 * r - r**2, r <= 1), (1, True)) / (2 * k)


def perfect_recovery(ch: Channel, *, rho_value=None, small_width: bool = False, digits: int = 16,
                     params: dict | None = None):
    expr = perfect_recovery_expr(ch, rho_value=rho_value, small_width=small_width, params=params)
    value, err = _evaluate(expr, digits)
    return ClosedFormThreshold(
        "perfect recovery" + (" (small width)" if small_width else ""),
        expr,
        value,
        err,
        "closed form: parameter counting, mmse(Delta)/Delta -> 2 rho - rho^2 (rho <= 1), 1 (rho >= 1)",
        digits,
    )


#: digits a double-precision quadrature can certify; more is refused for the numeric route
HARDMAX_DIGITS_MAX = 15


def hardmax_small_width_weak(*, tokens: int, digits: int = 15, nodes: int = 128):
    """alpha_bar_c of hardmax at small width for T = ``tokens`` (THEORY 1.4): T = 2 in closed
    form (:func:`small_width_weak`), T = 3..5 by the ordered-cone recursion of
    :mod:`aim_sym.numerics.hardmax` on two Chebyshev rules (error = their difference, a rounding
    gauge and the truncation bound). Returns a :class:`aim_sym.results.Result` ("alpha_bar_c"),
    value a decimal string of ``digits`` significant digits (at most 15 for T >= 3); details:
    kind, S, softmax (1/(T^2 + T - 2)), linear (1/(T(T + 1)), the lower bound), seconds."""
    from .channels import TOKENS_HARDMAX_WEAK, hardmax
    from .domains import THRESHOLD_DIGITS, DomainError
    from .numerics import hardmax as hm
    from .results import Result

    T = TOKENS_HARDMAX_WEAK.check(tokens)
    digits = THRESHOLD_DIGITS.check(digits)
    params = {"model": "aim", "channel": "hardmax", "tokens": T}
    comparison = {"softmax": 1.0 / (T * T + T - 2), "linear": 1.0 / (T * (T + 1))}
    if T == 2:
        t = small_width_weak(hardmax(2), digits=digits)
        d = t.as_dict()
        return Result(quantity="alpha_bar_c", value=t.value, error=t.error, method=t.method,
                      precision=digits, parameters=params,
                      details={**{k: d[k] for k in ("kind", "digits", "closed_form", "sympy")},
                               **comparison})
    if digits > HARDMAX_DIGITS_MAX:
        raise DomainError(THRESHOLD_DIGITS, digits, "digits",
                          allowed=f"an integer in 1..{HARDMAX_DIGITS_MAX} for hardmax with "
                          "T >= 3 (double-precision quadrature)")
    est = hm.weak_threshold(T, nodes=nodes)
    value = f"{est.value:.{digits}g}"
    if est.value < comparison["linear"]:
        raise ChannelError(f"hardmax alpha_bar_c({T}) = {value} is below the linear channel's "
                           f"1/(T(T+1)) = {comparison['linear']:.6g}: the quadrature is wrong")
    return Result(quantity="alpha_bar_c", value=value, error=est.error, method=est.method,
                  precision=digits, parameters=params,
                  details={"kind": "weak (small width)", "digits": digits, "S": est.extra["S"],
                           "probability_sum": est.extra["probability_sum"],
                           "orbits": est.extra["orbits"], "seconds": est.extra["seconds"],
                           **comparison})


SPARSEMAX_DIGITS_MAX = 60


def _rounding(value: str) -> float:
    """Half a unit in the last printed digit of the decimal string ``value``."""
    from decimal import Decimal

    return 0.5 * 10.0 ** Decimal(value).normalize().as_tuple().exponent if value else 0.0


def sparsemax_small_width_weak(*, beta: float = 1.0, digits: int = 15, tokens: int = 2):
    """alpha_bar_c of sparsemax attention at small width (THEORY 1.4; docs/sparsemax.md).

    T = 2: double precision for ``digits`` <= 15, else mpmath at two working precisions. T = 3:
    exact one-hot part plus randomised QMC with control variates (:mod:`aim_sym.numerics.
    sparsemax_t3`), a statistical bar (3 standard errors + the rule difference; a rigorous
    bound where saturation is too rare to sample), printed to 8 digits. The error adds the
    rounding of the printed value. Returns a :class:`aim_sym.results.Result` ("alpha_bar_c");
    details: kind, S, softmax (the beta -> 0 limit), hardmax (the beta -> infinity limit),
    seconds."""
    from .channels import BETA_DOMAIN
    from .domains import THRESHOLD_DIGITS, DomainError
    from .numerics import sparsemax as smx
    from .results import Result
    from .sparsemax import compile_sparsemax

    beta = BETA_DOMAIN.check(beta)
    if tokens == 3:
        import time

        from .numerics import hardmax, sparsemax_t3

        t0 = time.perf_counter()
        est = sparsemax_t3.weak_threshold(beta=beta)
        value = f"{est.value:.8g}"
        return Result(quantity="alpha_bar_c", value=value,
                      error=float(est.error) + _rounding(value),
                      method=est.method + "; error adds the rounding of the printed value",
                      precision=8,
                      parameters={"model": "aim", "channel": "sparsemax", "tokens": 3,
                                  "beta": beta},
                      details={"kind": "weak (small width)", "S": est.extra.get("S"),
                               "S_error": est.extra.get("S_error"),
                               "seconds": time.perf_counter() - t0, "softmax": 0.1,
                               "hardmax": float(hardmax.weak_threshold(3).value)})
    digits = THRESHOLD_DIGITS.check(digits)
    if digits > SPARSEMAX_DIGITS_MAX:
        raise DomainError(THRESHOLD_DIGITS, digits, "digits",
                          allowed=f"an integer in 1..{SPARSEMAX_DIGITS_MAX} for sparsemax")
    if digits <= 15:
        est = smx.weak_threshold(compile_sparsemax("numpy"), beta=beta)
        value = f"{est.value:.{digits}g}"
    else:
        est = smx.weak_threshold_mp(compile_sparsemax("mpmath"), beta=beta, dps=digits)
        value = str(est.value)
    return Result(quantity="alpha_bar_c", value=value, error=float(est.error) + _rounding(value),
                  method=est.method + "; error adds the rounding of the printed value",
                  precision=digits,
                  parameters={"model": "aim", "channel": "sparsemax", "tokens": 2, "beta": beta},
                  details={"kind": "weak (small width)", "digits": digits,
                           "S": est.extra.get("S"), "seconds": est.extra.get("seconds"),
                           "softmax": 0.25, "hardmax": 0.4034106290375993})


SKIP_DEEP_AIM = Domain(name="skip", option="--skip", low=0, high=1e3, default=1.0,
                       description="skip strength c of the two-layer AIM, in [0, 1000] "
                       "(c = 0 allowed: Z_out and S_l stay finite, docs/deep_aim.md)")


def deep_aim_small_width_weak(*, skip: float, beta: float = 1.0):
    """Per-layer small-width weak-recovery thresholds of the two-layer tied-attention AIM at
    T = 2, noiseless (THEORY 1.6; docs/deep_aim.md): alpha_bar_c,l = 1 / (2 S_l) for l = 1 (H1,
    the first layer) and l = 2 (H2, the last), by the reduced fibre quadrature of
    :mod:`aim_sym.numerics.deep_aim`. Error = the two-step difference + |mass - 1| x value
    (the rule's normalisation gauge). A layer with S_l = 0 (layer 1 at skip c = 0: no
    small-width threshold) has value None. Returns a ResultTable of two Results."""
    from .channels import BETA_DOMAIN
    from .numerics import deep_aim
    from .results import Result, ResultTable

    skip = SKIP_DEEP_AIM.check(skip)
    beta = BETA_DOMAIN.check(beta)
    est = deep_aim.small_width_overlaps(deep_aim.DeepAim(skip=skip, beta=beta))
    gauge = abs(est["mass"].value - 1.0) + abs(est["mean_xi1"].value)
    params = {"model": "aim", "layers": 2, "channel": "softmax", "tokens": 2, "skip": skip,
              "beta": beta}
    rows = []
    for layer in (1, 2):
        S = est[f"S{layer}"]
        none = S.value <= max(10 * S.error, 1e-12)   # S_l = 0 within its bar: no threshold
        a = est[f"alpha_bar_{layer}"]
        rows.append(Result(
            quantity="alpha_bar_c", value=None if none else a.value,
            error=None if none else a.error + gauge * a.value,
            method=f"{S.method}; error adds |mass - 1| + |E xi1| x value",
            precision=None, parameters=params,
            details={"layer": layer, "S": S.value, "S_error": S.error,
                     "mass": est["mass"].value, "mean_xi1": est["mean_xi1"].value,
                     "seconds": a.extra.get("seconds"),
                     "note": "S_l = 0: no small-width threshold for this layer" if none else ""}))
    return ResultTable(tuple(rows), params)


def smi_depth_weak(*, layers: int, tokens: int = 2, skip: float = 1.0, beta: float = 1.0,
                   progress=None):
    """Weak-recovery thresholds alpha_l = 1 / lambda_l of every layer of deep tied attention
    with one row per layer at Q = 0 (THEORY 2.2; docs/smi_depth.md) by the depth-L kernel of
    :mod:`aim_sym.numerics.smi_weak`: any (layers, tokens) it accepts, refused with one line
    outside its validated range. Returns a ResultTable, one Result per layer."""
    from .numerics import smi_weak
    from .results import Result, ResultTable

    rows = smi_weak.weak_thresholds(layers=layers, tokens=tokens, skip=skip, beta=beta,
                                    progress=progress)
    params = {"model": "smi", "channel": "deep-attention", "layers": layers, "tokens": tokens,
              "skip": skip, "beta": beta}
    return ResultTable(tuple(
        Result(quantity="alpha_weak", value=r["value"], error=r["error"], method=r["method"],
               precision=None, parameters=params,
               details={"layer": r["layer"], "kind": "weak", "lam": r["lam"],
                        "lam_error": r["lam_error"], "seconds": r["seconds"]})
        for r in rows), params)


def smi_depth_sequential(*, layers: int, tokens: int = 2, skip: float = 1.0, beta: float = 1.0,
                         progress=None):
    """Sequential thresholds of every shallower layer on the last layer's SE branch (THEORY 2.2,
    2.5; docs/smi_depth.md) by the model-sampled branch kernel of
    :mod:`aim_sym.numerics.smi_branch_qmc`, for any (layers, tokens) it supports: one Result
    per layer (quantity "alpha_sequential"; details layer, kind, q_L at the root with its bar,
    first: the smallest, the next transition; the others are upper bounds only)."""
    from .numerics import smi_branch_qmc
    from .results import Result, ResultTable

    rows = smi_branch_qmc.sequential_thresholds_qmc(layers=layers, tokens=tokens, skip=skip,
                                                    beta=beta, progress=progress)
    params = {"model": "smi", "channel": "deep-attention", "layers": layers, "tokens": tokens,
              "skip": skip, "beta": beta}
    return ResultTable(tuple(
        Result(quantity="alpha_sequential", value=r["value"], error=r["error"],
               method=r["method"], precision=None, parameters=params,
               details={"layer": r["layer"], "kind": "sequential", "first": r["first"],
                        f"q{layers}": r[f"q{layers}"], f"q{layers}_error": r[f"q{layers}_error"],
                        "seconds": r["seconds"]})
        for r in rows), params)


def smi_branch_point(*, alpha: float, layers: int, tokens: int = 2, skip: float = 1.0,
                     beta: float = 1.0, rule: dict | None = None, progress=None):
    """The SE fixed point on the last layer's branch Q = diag(0, .., 0, q_L) at ``alpha``
    (THEORY 2.1, 2.5; docs/smi_depth.md) by the branch kernel of
    :mod:`aim_sym.numerics.smi_branch_qmc`, for any (layers, tokens) it supports: a Result
    "q_L" (details q_hat_L with its error and, per shallower layer l, the stability eigenvalue
    alpha mu_l with its error and ``stable`` True / False / None (undecided within the bars)).
    Q = 0 is always a fixed point too; which of the two is Bayes-optimal is not decided here.
    ConvergenceError below the last layer's weak threshold (no such branch point). ``rule``:
    keywords of the kernel's rule (``log2_outer``, ``log2_inner``, ``replicates``, ``seed``);
    default the kernel's own per (L, M)."""
    from .numerics import smi_branch_qmc
    from .numerics.records import require
    from .results import Result

    rule = dict(rule or {})
    allowed = ("log2_outer", "log2_inner", "replicates", "seed")
    require(set(rule) <= set(allowed), "rule", f"keywords among {allowed}", sorted(rule))
    r = smi_branch_qmc.branch_fixed_point(alpha=alpha, layers=layers, tokens=tokens, skip=skip,
                                          beta=beta, progress=progress, **rule)
    L = layers
    params = {"model": "smi", "channel": "deep-attention", "layers": layers, "tokens": tokens,
              "skip": skip, "beta": beta, "alpha": alpha}
    return Result(quantity=f"q_{L}", value=r[f"q{L}"], error=r[f"q{L}_error"],
                  method=r["method"], precision=None, parameters=params,
                  details={f"q_hat_{L}": r[f"q_hat{L}"], f"q_hat_{L}_error": r[f"q_hat{L}_error"],
                           "branch": f"layer {L} learned, layers 1..{L - 1} at q = 0",
                           "stability": {int(k): dict(v) for k, v in r["stability"].items()},
                           "seconds": r["seconds"]})


def smi_cascade(*, layers: int = 3, learned: tuple[int, ...] | None = None, tokens: int = 2,
                skip: float = 1.0, beta: float = 1.0):
    """A cascade threshold of deep tied attention, M = 2 (or M = 3 at L = 3) tokens (THEORY 2.2;
    docs/smi_cascade.md): the alpha at which the next unlearned layer becomes unstable on the
    joint branch of the ``learned`` layers (increasing, ending with ``layers``; default (1, 3)
    at L = 3, (1, 4) at L = 4; (1, 2, 4) gives layer 3's), by
    :mod:`aim_sym.numerics.smi_cascade` (model-sampled QMC, about 2-6 minutes). A Result
    "alpha_cascade"; details: the learned overlaps q_l with errors, every other unlearned
    layer's eigenvalue alpha mu_j at the root (``stability``), the previous branch's value from
    the same points (``sequential``, ``sequential_branch``) and the shift. Validated at c = 1,
    beta = 1."""
    from .numerics import smi_cascade as sc
    from .results import Result

    r = sc.cascade_threshold(layers=layers, learned=learned, tokens=tokens, skip=skip, beta=beta)
    keys = ("layer", "learned", *(f"q{l}{e}" for l in r["learned"] for e in ("", "_error")),
            "stability", "sequential", "sequential_error", "sequential_branch", "shift",
            "shift_error", "stat_error", "ratio_bias", "interpolation", "seconds")
    return Result(quantity="alpha_cascade", value=r["value"], error=r["error"],
                  method=r["method"], precision=None,
                  parameters={"model": "smi", "channel": "deep-attention", "layers": layers,
                              "tokens": tokens, "skip": skip, "beta": beta,
                              "learned": list(r["learned"])},
                  details={k: r[k] for k in keys if k in r})
