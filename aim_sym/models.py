"""Model objects of the public API (docs/api.md): :class:`AIM`, :class:`SMI` and :func:`mmse`.

A model is a frozen specification (a channel with its parameter values, and the model's own
parameters), validated when built through the parameter domains (:mod:`aim_sym.domains`,
declared next to the channels). Its methods call the numeric engines exactly as the command
line does and return :class:`aim_sym.results.Result` / :class:`aim_sym.results.ResultTable`.
Depth is a parameter of the SMI channel (``layers=``), never a module choice.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from . import channels as _channels
from .channels import Channel, DeepAttention, DiscreteChannel, GaussianChannel
from .domains import (
    ALPHA,
    ALPHA_AMP,
    ALPHA_BAR,
    DAMPING,
    DIM_AIM,
    DIM_SMI,
    MAX_ITER,
    MMSE_DIGITS,
    RHO,
    RNG_SEED,
    SE_DIGITS,
    SEEDS,
    SEQUENTIAL_DIGITS,
    THRESHOLD_DIGITS,
    TOL,
    Domain,
    DomainError,
    check_grid,
)
from .numerics.records import InputError, bayes_optimal
from .results import Result, ResultTable

Progress = Callable[[int, int, str], None] | None

CURVE_METHODS = ("traced", "per-alpha")
_L3_SEQUENTIAL_KEYS = ("layer", "kind", "value", "error", "q3", "q3_error", "first", "method",
                       "seconds")


def _damping(value) -> float | str:
    if value == "auto":
        return value
    if isinstance(value, str):
        raise DomainError(DAMPING, value, DAMPING.name, allowed="a number in [0, 1) or 'auto'")
    return DAMPING.check(value)


def _choice(value, name: str, allowed: tuple) -> str:
    if value not in allowed:
        raise InputError(f"{name} must be one of {', '.join(allowed)}; got {value!r}")
    return value


# ----------------------------------------------------------------------------- AIM
@dataclass(frozen=True)
class AIM:
    """The attention-indexed model (THEORY 1): ``AIM(am.channels.hardmax(tokens=2), rho=0.5)``.

    ``channel``: a channel of :mod:`aim_sym.channels` (built-in or from a file) with its
    parameter values bound; ``rho``: the width ratio. Frozen; validated when built.
    """

    channel: Channel
    rho: float = 0.5

    def __post_init__(self) -> None:
        ch = self.channel
        if not isinstance(ch, (GaussianChannel, DiscreteChannel)):
            raise InputError("channel must be an AIM channel (e.g. am.channels.hardmax(tokens=2)); "
                             f"got {type(ch).__name__}")
        _channels.tokens_domain(ch).check(ch.tokens)
        domains = _channels.parameter_domains(ch)
        for sym, value in ch.params:
            dom = domains[sym.name]
            if value is not None:
                dom.check(value)
            elif dom.default is None and sym.name in dict(ch.domains):
                raise DomainError(dom, None, dom.name,
                                  allowed=f"given for channel {ch.name} ({dom.allowed()})")
        object.__setattr__(self, "rho", RHO.check(self.rho))

    # ------------------------------------------------------------------ plumbing
    @property
    def values(self) -> dict:
        """The channel's bound parameter values (symbol name -> value)."""
        return _channels.values_of(self.channel)

    @cached_property
    def compiled(self):
        """The compiled channel (:class:`aim_sym.compiled.CompiledChannel`) the engines consume."""
        from .compiled import compile_channel

        if self.polyhedral is not None:
            raise InputError(f"channel {self.channel.name} is polyhedral (a term of >= 3 "
                             "half-spaces, THEORY 1.4): check, threshold weak --small-width, se "
                             "and curve serve it; amp and the small-width SE do not yet")
        return compile_channel(self.channel, self.values)

    @cached_property
    def polyhedral(self):
        """The channel's output side as numbers for the polytope engine
        (:class:`aim_sym.numerics.polyhedral_se.PolyhedralOutput`) when the channel has a term of
        >= 3 half-spaces (THEORY 1.4; docs/polyhedral.md), else None."""
        return _polyhedral_output(self.channel, self.values)

    def parameters(self, **extra) -> dict:
        return {"model": "aim", "channel": self.channel.name, "tokens": self.channel.tokens,
                "rho": self.rho, **self.values, **extra}

    @cached_property
    def _egen(self) -> tuple:
        """(spec, reason): what the generalisation error needs of the channel (THEORY 1.5) as an
        :class:`aim_sym.numerics.egen.EgenChannel`, or (None, why not)."""
        import numpy as np

        from .numerics.egen import EgenChannel

        ch, T = self.channel, self.channel.tokens
        if isinstance(ch, GaussianChannel):
            if ch.name in ("linear", "linear-noisy") and ch.observation is not None:
                return EgenChannel("linear", T, delta_out=float(self.values.get("Delta_out",
                                                                                0.0))), None
            if ch.name == "softmax" and ch.observation is not None:
                beta = self.values.get("beta")
                return EgenChannel("softmax", T, beta=float(_channels.BETA_DOMAIN.default
                                                            if beta is None else beta)), None
            return _gaussian_readout_spec(ch, self.values)
        R, reason = _label_readout(ch.outputs, T)
        if R is None:
            return None, reason
        return EgenChannel("discrete", T, readout=np.asarray(R)), None

    @cached_property
    def _pair_events(self):
        """A discrete channel file's events as numbers
        (:class:`aim_sym.numerics.polyhedral_se.PolyhedralOutput`) for the plug-in error by pair
        polytopes (THEORY 1.5), or None (argmax labels keep the omega quadrature, whose nodes
        lie on their hyperplanes; Gaussian and polyhedral channels have their own routes)."""
        ch, spec = self.channel, self._egen[0]
        if (not isinstance(ch, DiscreteChannel) or spec is None or spec.kind != "discrete"
                or _is_argmax(ch.outputs, ch.tokens) or self.polyhedral is not None):
            return None
        return _event_arrays(ch, self.values)

    @property
    def egen_channel(self):
        """What the generalisation error needs of the channel (THEORY 1.5), or None where the
        output y cannot be read as a real vector: built-in matrices (linear, softmax), Gaussian
        read-outs y = L h + noise, and discrete labels read as vectors r_y (argmax tuples as
        one-hot T x T matrices, numbers and tuples of numbers as themselves)."""
        return self._egen[0]

    def generalisation_error(self, *, q: float, V: float, V_error: float = 0.0,
                             method: bool = False) -> dict:
        """e_gen (Bayes-optimal, E||y - E[y | omega]||^2 over the entries of y read as a real
        vector: all T^2 entries of a T x T output) at the SE point (q, V) and the plug-in error
        E||y(h) - y(omega)||^2 beside it (THEORY 1.5), each with its error: keys e_gen,
        e_gen_error, e_gen_plugin, e_gen_plugin_error (None where the channel's y cannot be read
        as numbers, see :attr:`egen_channel`); with ``method`` also e_gen_method (the route, and
        beta for a softmax; or why not computed)."""
        from .numerics import egen

        spec, reason = self._egen
        none = {"e_gen": None, "e_gen_error": None, "e_gen_plugin": None,
                "e_gen_plugin_error": None}
        if spec is None:
            return {**none, "e_gen_method": f"not computed: {reason}"} if method else none
        try:
            if self.polyhedral is not None:
                from .numerics import polyhedral_se as ps

                if _polyhedral_high_rank(self.polyhedral):  # randomised QMC over the model
                    from .numerics import polyhedral_qmc_se as pq

                    est = pq.generalisation_error_qmc(self.polyhedral, spec.readout, q=float(q),
                                                      V=float(V), V_error=float(V_error))
                else:
                    est = ps.generalisation_error(self.polyhedral, spec.readout, q=float(q),
                                                  V=float(V), V_error=float(V_error))
            else:
                est = egen.generalisation_error(spec, self.compiled, q=float(q), V=float(V),
                                                V_error=float(V_error), level=-1)
                pair = self._pair_events
                if pair is not None and V > 0 and est.extra.get("plugin") is not None:
                    # the plug-in's integrand steps where P(y | omega) does: off the nodes of
                    # the omega rule in general, so it comes from pair polytopes in (h, omega)
                    from .numerics import polyhedral_se as ps
                    from .numerics.records import Estimate

                    plug = ps.plugin_estimate(pair, spec.readout, q=float(q), V=float(V),
                                              V_error=float(V_error))
                    est = Estimate(est.value, est.error, est.method,
                                   extra={**est.extra, "plugin": plug.value,
                                          "plugin_error": plug.error,
                                          "plugin_method": plug.method})
        except InputError as e:  # a parameter beyond the e_gen engine (softmax at large beta)
            return {**none, "e_gen_method": f"not computed: {e}"} if method else none
        out = {"e_gen": est.value, "e_gen_error": est.error,
               "e_gen_plugin": est.extra.get("plugin"),
               "e_gen_plugin_error": est.extra.get("plugin_error")}
        if method:
            note = ""
            if spec.kind == "softmax":
                note = (f"; beta = {spec.beta:g}" + (" (default: beta is not bound)"
                                                      if "beta" not in self.values else ""))
            if spec.kind == "discrete":
                note = "; " + _readout_note(self.channel.outputs, self.channel.tokens)
            plug = est.extra.get("plugin_method")
            out["e_gen_method"] = ("Bayes-optimal E||y - E[y|omega]||^2 (plug-in "
                                   "E||y(h) - y(omega)||^2 beside it): " + est.method + note
                                   + (f"; plug-in: {plug}" if plug else "")
                                   + "; errors add |de/dV| x the fixed point's error")
        return out

    def _method(self, fp) -> str:
        return (("closed-form output map" if not self.compiled.discrete else
                 f"quadrature over omega, levels up to {fp.extra.get('level')}")
                + " + Wishart prior quadrature; error = difference of two refinement levels")

    # ------------------------------------------------------------------ state evolution
    def fixed_points(self, *, alpha: float, tol: float = 1e-13) -> ResultTable:
        """All SE fixed points at ``alpha`` (THEORY 1.1), the Bayes-optimal one flagged: one
        Result (quantity "mmse") each, details q, q_hat, phi, stable, slope, bayes_optimal,
        e_gen, e_gen_error, e_gen_plugin, e_gen_plugin_error (THEORY 1.5)."""
        from .numerics import aim_se

        alpha, tol = ALPHA.check(alpha), TOL.check(tol)
        fps = aim_se.fixed_points(self.compiled, alpha=alpha, rho=self.rho, tol=tol)
        params = self.parameters(alpha=alpha)
        return ResultTable(tuple(
            Result(quantity="mmse", value=f.mmse, error=f.error, method=self._method(f),
                   precision=16, parameters=params,
                   details={**{k: v for k, v in f.as_dict().items() if k not in ("mmse", "error")},
                            **self.generalisation_error(q=f.q, V=f.mmse, V_error=f.error)})
            for f in fps), params)

    def state_evolution(self, *, alpha: float, digits: int | None = None,
                        tol: float = 1e-13) -> Result:
        """The Bayes-optimal fixed point at ``alpha``: mmse with q, q_hat, phi, the
        generalisation errors (e_gen, e_gen_error, e_gen_plugin, e_gen_plugin_error; THEORY 1.5)
        and all ``fixed_points`` (each with its e_gen) in details; ``digits`` (5..200,
        closed-form output maps only) adds ``mmse_digits`` (value, error, method) by the
        many-digit solver."""
        from .numerics import aim_se

        alpha, tol = ALPHA.check(alpha), TOL.check(tol)
        if self.polyhedral is not None:
            if tol != 1e-13:
                raise DomainError(TOL, tol, "tol", allowed="omitted for a polyhedral channel "
                                  "(its error is the quadrature's, about 1e-6)")
            return _polyhedral_state_evolution(self, alpha=alpha, digits=digits)
        if digits is not None:
            digits = SE_DIGITS.check(digits)
            if self.compiled.discrete:
                raise DomainError(SE_DIGITS, digits, "digits", allowed="omitted for a channel "
                                  "without a closed-form output map (discrete channels)")
        fps = aim_se.fixed_points(self.compiled, alpha=alpha, rho=self.rho, tol=tol)
        bo = aim_se.bayes_optimal(fps)
        egens = [self.generalisation_error(q=f.q, V=f.mmse, V_error=f.error, method=True)
                 for f in fps]
        details = {"q": bo.q, "q_hat": bo.q_hat, "phi": bo.phi,
                   **egens[fps.index(bo)],
                   "fixed_points": [{**f.as_dict(), **{k: v for k, v in e.items()
                                                       if k != "e_gen_method"}}
                                    for f, e in zip(fps, egens)]}
        if digits is not None and bo.mmse > 0:
            est = aim_se.fixed_point_mp(self.compiled, alpha=alpha, rho=self.rho, dps=digits,
                                        v0=bo.mmse)
            details["mmse_digits"] = {"value": est.value, "error": est.error, "method": est.method}
        return Result(quantity="mmse", value=bo.mmse, error=bo.error, method=self._method(bo),
                      precision=16, parameters=self.parameters(alpha=alpha), details=details)

    def small_width_state_evolution(self, *, alpha_bar: float) -> Result:
        """The small-width limit rho -> 0 at alpha = alpha_bar rho (THEORY 1.2): the largest
        stable overlap q (quantity "q"), all fixed points in details (``rho`` is not used)."""
        from .numerics import aim_se

        alpha_bar = ALPHA_BAR.check(alpha_bar)
        fps = aim_se.small_width_fixed_points(self.compiled, alpha_bar=alpha_bar)
        stable = [f for f in fps if f["stable"]]
        best = max(stable, key=lambda f: f["q"]) if stable else fps[0]
        params = {k: v for k, v in self.parameters(alpha_bar=alpha_bar).items() if k != "rho"}
        return Result(quantity="q", value=best["q"], error=None,
                      method="small-width SE map: roots on a grid, Brent", precision=16,
                      parameters=params, details={"fixed_points": fps})

    def curve(self, *, alphas, tol: float = 1e-13, method: str = "traced",
              progress: Progress = None, generalisation: bool = True) -> ResultTable:
        """The Bayes-optimal branch over an alpha grid: one row per alpha (alpha, q, q_hat,
        mmse, phi, error, ..., e_gen, e_gen_error, e_gen_plugin, e_gen_plugin_error).
        ``method``: "traced" (alpha(Delta) traced once) or "per-alpha";
        ``generalisation=False`` leaves the e_gen columns out (faster)."""
        from .numerics import aim_curve

        grid = check_grid(alphas, ALPHA, label="alphas")
        tol = TOL.check(tol)
        _choice(method, "method", CURVE_METHODS)
        if self.polyhedral is not None:
            return _polyhedral_curve(self, alphas=list(grid), tol=tol, method=method,
                                     progress=progress, generalisation=generalisation)
        rows = aim_curve.curve(self.compiled, alphas=list(grid), rho=self.rho, tol=tol,
                               progress=progress, method=method)
        if generalisation:
            rows = [{**r, **self.generalisation_error(q=r["q"], V=r["mmse"], V_error=r["error"])}
                    for r in rows]
        return ResultTable(tuple(rows), self.parameters())

    # ------------------------------------------------------------------ thresholds
    def threshold(self, kind: str = "weak", *, small_width: bool = False, digits: int = 16,
                  certified: bool = False) -> Result:
        """A closed-form threshold (THEORY 1.2): ``"weak"`` (small width only: alpha_bar_c) or
        ``"perfect"`` (alpha_PR, or alpha_bar_PR with ``small_width``). ``value`` is a decimal
        string of ``digits`` digits; details: closed_form (LaTeX), sympy, and with
        ``certified`` an ``interval`` by ball arithmetic."""
        from . import thresholds

        _choice(kind, "kind", ("weak", "perfect"))
        digits = THRESHOLD_DIGITS.check(digits)
        if self.polyhedral is not None:
            return _polyhedral_threshold(self, kind, small_width=small_width, digits=digits,
                                         certified=certified)
        if kind == "weak":
            if not small_width:
                raise InputError("small_width must be True for a weak-recovery threshold of the "
                                 "AIM (at finite rho q > rho for every alpha > 0: no uninformative "
                                 "fixed point); got False")
            t = thresholds.small_width_weak(self.channel, digits=digits, params=self.values)
            name = "alpha_bar_c"
        else:
            t = thresholds.perfect_recovery(self.channel, rho_value=None if small_width else self.rho,
                                            small_width=small_width, digits=digits,
                                            params=self.values)
            name = "alpha_bar_PR" if small_width else "alpha_PR"
        d = t.as_dict()
        details = {k: d[k] for k in ("kind", "digits", "closed_form", "sympy")}
        if certified:
            from .certified import enclosure

            lo, hi, _ = enclosure(t.expr, digits=max(digits, 30))
            details["interval"] = [lo, hi]
            details["certified"] = "ball arithmetic (python-flint arb) on the closed form"
        params = self.parameters()
        if small_width:
            params.pop("rho")
        return Result(quantity=name, value=t.value, error=t.error, method=t.method,
                      precision=digits, parameters=params, details=details)

    def threshold_expr(self, kind: str = "weak", *, small_width: bool = True):
        """The threshold as a sympy expression (see :meth:`threshold`)."""
        from . import thresholds

        _choice(kind, "kind", ("weak", "perfect"))
        if kind == "weak":
            return thresholds.small_width_weak_expr(self.channel, self.values)
        return thresholds.perfect_recovery_expr(self.channel, rho_value=None if small_width
                                                else self.rho, small_width=small_width,
                                                params=self.values)

    # ------------------------------------------------------------------ checks, AMP, equations
    def check(self) -> ResultTable:
        """The identity checks of the derivation (THEORY 4): one row per check (name, passed,
        detail, value, tolerance)."""
        from .checks import run_checks

        if self.polyhedral is not None:
            return ResultTable(tuple(_polyhedral_checks(self.polyhedral)), self.parameters())
        return ResultTable(tuple(run_checks(self.channel, params=self.values)), self.parameters())

    def amp(self, *, alpha: float, dim: int = 100, seeds: int = 4, max_iter: int = 100,
            damping: float | str = "auto", rng_seed: int = 0, progress: Progress = None,
            out: str | None = None) -> Result:
        """GAMP-RIE at dimension ``dim`` over ``seeds`` instances against the SE (THEORY 4):
        quantity "mse" (mean final ||S_hat - S||_F^2 / D, error = standard error over seeds);
        details se_prediction, per_seed, per_iteration, converged, dampings, interrupted, and
        (channels with a known output matrix, THEORY 1.5) the test error of the final estimate
        on fresh samples, test_error (Bayes-optimal predictor at AMP's omega, V) and
        test_error_plugin with their standard errors, beside the SE's e_gen_se and
        e_gen_se_plugin at the SE prediction. ``out``: a JSON file rewritten after every seed."""
        from .amp_functions import amp_functions
        from .numerics import amp as amp_mod

        alpha = ALPHA_AMP.check(alpha)
        dim, seeds = DIM_AIM.check(dim), SEEDS.check(seeds)
        max_iter, rng_seed = MAX_ITER.check(max_iter), RNG_SEED.check(rng_seed)
        damping = _damping(damping)
        fns = amp_functions(self.channel, self.values)
        kw = dict(alpha=alpha, rho=self.rho, dim=dim, seeds=seeds, max_iter=max_iter,
                  damping=damping, rng_seed=rng_seed, progress=progress, out=out,
                  draw_y=self._draw_y(fns))
        r = amp_mod.run_amp(fns=fns, cc=self.compiled, **kw)
        details = {"dim": dim, "se_prediction": r["se_prediction"], "per_seed": r["per_seed"],
                   "per_iteration": r["per_iteration"], "converged": r.get("converged"),
                   "dampings": r.get("dampings"), "interrupted": r.get("interrupted", False)}
        if kw["draw_y"] is not None:
            se = r.get("se") or {}
            V_se = r["se_prediction"]
            e = (self.generalisation_error(q=1.0 + self.rho - V_se, V=V_se,
                                           V_error=se.get("error", 0.0))
                 if V_se is not None else {})
            details.update({k: r.get(k) for k in (
                "test_error", "test_error_stderr", "test_error_plugin",
                "test_error_plugin_stderr")})
            details.update({"e_gen_se": e.get("e_gen"), "e_gen_se_error": e.get("e_gen_error"),
                            "e_gen_se_plugin": e.get("e_gen_plugin"),
                            "e_gen_se_plugin_error": e.get("e_gen_plugin_error")})
        return Result(quantity="mse", value=r["mean"], error=r["stderr"],
                      method=f"GAMP-RIE at D = {dim}, {seeds} seeds; error = standard error",
                      precision=16, parameters=self.parameters(alpha=alpha, dim=dim, seeds=seeds,
                                                               rng_seed=rng_seed),
                      details=details)

    def _draw_y(self, fns):
        """y (N x dim: all T^2 entries of a matrix output, else the read-out vector) drawn from
        P_out(. | h) for AMP's test error, or None where the output is not a known vector
        (:attr:`egen_channel`)."""
        import numpy as np

        spec = self.egen_channel
        if spec is None:
            return None
        T = spec.tokens
        if spec.kind == "softmax":
            if fns.observe is None:
                return None
            return lambda h, rng: fns.observe(h).reshape(h.shape[0], T * T)
        if spec.kind == "discrete":
            R = spec.readout
            return lambda h, rng: R[np.asarray(fns.sample(h, rng), dtype=int)]
        if spec.kind == "gaussian":  # y = L h + noise: what the sampler returns
            return lambda h, rng: np.asarray(fns.sample(h, rng), dtype=float).reshape(
                h.shape[0], -1)
        idx = [(a, b) for a in range(T) for b in range(a, T)]

        def linear(h, rng):
            u = fns.sample(h, rng)  # the pairs a <= b (+ noise)
            Y = np.empty((h.shape[0], T, T))
            for k, (a, b) in enumerate(idx):
                Y[:, a, b] = Y[:, b, a] = u[:, k]
            return Y.reshape(h.shape[0], T * T)

        return linear

    def expressions(self) -> dict:
        """The channel's equations as sympy expressions (Z_out, g_out, SE map, ...); for a
        polyhedral channel its likelihoods P(y | h) (Z_out is an integral)."""
        from .sheets import aim_expressions

        if self.polyhedral is not None:
            return {f"P(y={y} | h)": p for y, p in zip(self.channel.outputs,
                                                       self.channel.likelihood)}

        return aim_expressions(self.channel)

    def derive(self, format: str = "markdown") -> str:
        """The channel's equations as text: "markdown", "latex" or "python" (numpy code)."""
        _choice(format, "format", ("markdown", "latex", "python"))
        if self.polyhedral is not None:
            from .polyhedral import polyhedral_sheet

            if format != "markdown":
                raise InputError(f"format must be markdown for a polyhedral channel (its Z_out is "
                                 f"an integral, not an expression); got {format!r}")
            return polyhedral_sheet(self.channel)
        if format == "python":
            from .codegen import numpy_source
            from .output import derive as derive_channel

            return numpy_source(derive_channel(self.channel), self.values, self.channel)
        from .sheets import aim_expressions, aim_sheet, latex_document, strip_canonical

        if format == "latex":
            return latex_document(aim_expressions(self.channel), self.channel.tokens)
        return strip_canonical(aim_sheet(self.channel))


# ----------------------------------------------------------------------------- AIM, e_gen read-outs
def _is_argmax(outputs, T: int) -> bool:
    return all(isinstance(y, tuple) and len(y) == T
               and all(isinstance(b, int) and not isinstance(b, bool) and 1 <= b <= T for b in y)
               for y in outputs)


def _real(x) -> float | None:
    """A label entry as a finite real, or None (strings, complex numbers, symbols, ...)."""
    import math
    import numbers

    import sympy as sp

    if isinstance(x, numbers.Real):
        v = float(x)
    elif isinstance(x, sp.Basic) and x.is_number and x.is_real:
        v = float(x)
    else:
        return None
    return v if math.isfinite(v) else None


def _label_readout(outputs, T: int) -> tuple:
    """(R, None) with R (outputs x dim) the labels read as real vectors r_y (THEORY 1.5), or
    (None, why not). Argmax tuples (length T, entries 1..T) are one-hot T x T matrices, as for
    hardmax; a number is a 1-vector; a tuple or list of numbers is itself."""
    if _is_argmax(outputs, T):
        R = [[0.0] * (T * T) for _ in outputs]
        for i, y in enumerate(outputs):
            for a, b in enumerate(y):
                R[i][a * T + b - 1] = 1.0
        return R, None
    rows = []
    for y in outputs:
        entries = list(y) if isinstance(y, (tuple, list)) else [y]
        vals = [_real(x) for x in entries]
        if not entries or any(v is None for v in vals):
            return None, (f"the output label {y!r} cannot be read as a number or a tuple of "
                          "numbers (e_gen needs the output y as a real vector)")
        rows.append(vals)
    if len({len(r) for r in rows}) != 1:
        return None, ("the output labels are tuples of different lengths (e_gen needs every "
                      "output y as a real vector of one dimension)")
    return rows, None


def _readout_note(outputs, T: int) -> str:
    if _is_argmax(outputs, T):
        return "y read as the one-hot T x T matrix of each row's argmax"
    return "y read as its label (a number or a tuple of numbers) as a real vector"


def _event_arrays(ch: DiscreteChannel, values: dict):
    """P(y | h) = sum_k w_k 1[A_k h <= b_k] per output as numbers (the events of
    :func:`aim_sym.output.parse_events`, parameter values bound: 1[f . h + o > 0] gives
    A = -f, b = o), as a :class:`aim_sym.numerics.polyhedral_se.PolyhedralOutput`."""
    import sympy as sp

    from .numerics import polyhedral_se as ps
    from .output import parse_events, substitute_params
    from .symbols import weights

    def num(e) -> float:
        return float(sp.N(substitute_params(sp.sympify(e), ch, values), 20))

    terms = []
    for p in ch.likelihood:
        out = []
        for ev in parse_events(p, ch.tokens):
            w = num(ev.weight)
            if w != 0:
                out.append(ps.Term(w, tuple(tuple(-num(c) for c in f) for f in ev.forms),
                                   tuple(num(o) for o in ev.offsets)))
        terms.append(tuple(out))
    return ps.PolyhedralOutput(outcomes=tuple(ch.outputs), terms=tuple(terms),
                               weights=tuple(float(w) for w in weights(ch.tokens)), basis=(),
                               name=ch.name)


def _gaussian_readout_spec(ch: GaussianChannel, values: dict) -> tuple:
    """EgenChannel("gaussian") for y = L h + noise (L = the channel's statistics, the basis the
    SE uses), or (None, why not)."""
    import numpy as np
    import sympy as sp

    from .numerics.egen import EgenChannel
    from .output import substitute_params
    from .symbols import weights

    try:
        L = sp.Matrix(substitute_params(sp.Matrix(ch.statistics), ch, values))
        N = sp.Matrix(substitute_params(sp.Matrix(ch.noise), ch, values))
    except _channels.ChannelError as e:
        return None, str(e)
    free = sorted(str(s) for s in (L.free_symbols | N.free_symbols))
    if free:
        return None, (f"the statistics or noise of channel {ch.name} keep unbound symbols "
                      f"{free}")
    return EgenChannel("gaussian", ch.tokens, statistics=np.array(L.evalf(), dtype=float),
                       noise=np.array(N.evalf(), dtype=float),
                       weights=np.array([float(w) for w in weights(ch.tokens)])), None


# ----------------------------------------------------------------------------- AIM, polyhedral
def _polyhedral_output(ch: Channel, values: dict):
    """The numeric output side of a polyhedral channel (THEORY 1.4), or None; every outcome must
    have Z_out > 0 at omega = 0, V = 1 (checked beyond the engine's error bar)."""
    if not isinstance(ch, DiscreteChannel):
        return None
    from .polyhedral import is_polyhedral, polyhedral_arrays

    if not is_polyhedral(ch):
        return None
    import numpy as np

    from .numerics import polyhedral_se as ps

    a = polyhedral_arrays(ch, values)
    out = ps.PolyhedralOutput(
        outcomes=a["outcomes"], weights=a["weights"], basis=a["basis"], name=a["name"],
        terms=tuple(tuple(ps.Term(w, A, b) for w, A, b in ts) for ts in a["terms"]))
    z = ps.z_out(out, omega=np.zeros((1, out.dim)), V=1.0, order=1)
    for y, Z, e in zip(out.outcomes, z.Z[:, 0], z.Z_error[:, 0]):
        if not Z > e:
            raise _channels.ChannelError(
                f"channel {ch.name}: Z_out vanishes for output {y} (Z_out = {Z:.3g} +- {e:.1e} "
                "at omega = 0, V = 1): remove outputs of probability zero")
    return out


def _polyhedral_high_rank(out) -> bool:
    """Whether an event spans more than 3 directions of h (the engine's cube rule,
    Monte-Carlo-grade; docs/polyhedral.md "Events of rank > 3")."""
    from .numerics import polyhedral_se as ps

    return ps.event_rank(out) > ps.DETERMINISTIC_RANK


def _polyhedral_checks(out) -> list[dict]:
    """Identity checks of a polyhedral channel at omega = 0 (V = 1) and at three seeded omega
    (V = 0.7) (THEORY 1.2; numerics/polyhedral_se.check_identities). With an event of rank > 3
    (cube rule) the first-order identities and one seeded finite-difference direction
    (numerics/polyhedral_se.check_identities_first_order)."""
    import numpy as np

    from .numerics import polyhedral_se as ps

    rng = np.random.default_rng(2026)
    omega = 0.6 * rng.standard_normal((3, out.dim)) * np.sqrt(np.asarray(out.weights))
    high = _polyhedral_high_rank(out)
    direction = rng.standard_normal(out.dim)
    rows = []
    for om, V in ((np.zeros((1, out.dim)), 1.0), (omega, 0.7)):
        checks = (ps.check_identities_first_order(out, omega=om, V=V, direction=direction)
                  if high else ps.check_identities(out, omega=om, V=V))
        for r in checks:
            rows.append({**r, "name": f"{r['name']} (V = {V:g}, {len(om)} omega)"})
    return rows


def _polyhedral_threshold(m: AIM, kind: str, *, small_width: bool, digits: int,
                          certified: bool) -> Result:
    """alpha_bar_c = 1 / (2 E(0, 1)) of a polyhedral channel (THEORY 1.2, 1.4); an event of rank
    > 3 goes to the engine's cube rule (numerics/polyhedral_se.CUBE_RULE)."""
    import numpy as np

    from .numerics import polyhedral_se as ps

    if kind != "weak":
        raise InputError("kind must be weak for a polyhedral channel (a discrete channel has "
                         "q_hat V -> 0 as V -> 0: no finite perfect-recovery threshold); got "
                         f"{kind!r}")
    if not small_width:
        raise InputError("small_width must be True for a weak-recovery threshold of the AIM (at "
                         "finite rho q > rho for every alpha > 0: no uninformative fixed point); "
                         "got False")
    if certified:
        raise InputError("certified must be False for a polyhedral channel: its threshold is a "
                         "quadrature (error bar by refinement), not a closed form; got True")
    params = {k: v for k, v in m.parameters().items() if k != "rho"}
    high = _polyhedral_high_rank(m.polyhedral)
    if digits > 16:  # mpmath route (numerics/polytope_mp.py), rank <= 3, 17..60 digits (the
        # default 16 keeps the double-precision route, capped at 15 digits)
        from .numerics import polytope_mp as pmp

        if high:
            raise DomainError(THRESHOLD_DIGITS, digits, "digits",
                              allowed="at most 16 for a channel file with an event of rank > 3 "
                              "(its cube rule gives about 5 digits)")

        if digits > 60:
            raise DomainError(THRESHOLD_DIGITS, digits, "digits",
                              allowed="at most 60 for a polyhedral channel (its mpmath route)")
        est = pmp.weak_threshold_mp(m.polyhedral, dps=digits)
        return Result(quantity="alpha_bar_c", value=est.value, error=est.error,
                      method=est.method, precision=digits, parameters=params,
                      details={"kind": "weak (small width)", "digits": digits,
                               "closed_form": "1 / (2 E(0, 1)), E = sum_y |grad Z_y|_C^2 / Z_y "
                               "at omega = 0: Gaussian polytope integrals in mpmath (no closed "
                               "form)", "sympy": None})
    digits = min(digits, 15)  # double precision: at most 15 significant digits
    est = (ps.weak_threshold(m.polyhedral, rule=ps.CUBE_RULE) if high
           else ps.weak_threshold(m.polyhedral))
    if high:  # the cube rule: the digits its bar supports, and one guard digit
        digits = max(2, min(digits, 2 + int(-np.log10(est.error / abs(est.value)))))
    return Result(quantity="alpha_bar_c", value=f"{est.value:.{digits}g}", error=est.error,
                  method=est.method, precision=digits, parameters=params,
                  details={"kind": "weak (small width)", "digits": digits,
                           "closed_form": "1 / (2 E(0, 1)), E = sum_y |grad Z_y|_C^2 / Z_y at "
                           "omega = 0: Gaussian polytope integrals (no closed form)",
                           "sympy": None, "value_float": est.value})


def _polyhedral_state_evolution(m: AIM, *, alpha: float, digits: int | None,
                                generalisation: bool = True) -> Result:
    """The SE fixed points of a polyhedral channel with V >= V_MIN (THEORY 1.1;
    numerics/polyhedral_se.fixed_points), the Bayes-optimal one (largest phi among the stable)
    flagged, each with e_gen and the plug-in error (THEORY 1.5;
    numerics/polyhedral_se.generalisation_error); about 40 s per fixed point on two cores, and
    about 10 s more for its e_gen. Channels with an event of rank > 3 go to randomised QMC over
    the model itself (numerics/polyhedral_qmc_se.py, docs/polyhedral_rank.md: V >= 0.05, bars
    about 1e-3 in mmse)."""
    from .numerics import polyhedral_se as ps

    if digits is not None:
        raise DomainError(SE_DIGITS, digits, "digits", allowed="omitted for a channel without a "
                          "closed-form output map (polyhedral channels)")
    high = _polyhedral_high_rank(m.polyhedral)
    if alpha == 0:
        fps = [{"q": m.rho, "q_hat": 0.0, "mmse": 1.0, "error": 0.0, "phi": 0.0, "stable": True,
                "slope": 0.0}]
    elif high:
        from .numerics import polyhedral_qmc_se as pq

        fps = pq.fixed_points_qmc(m.polyhedral, alpha=alpha, rho=m.rho)
    else:
        fps = ps.fixed_points(m.polyhedral, alpha=alpha, rho=m.rho)
    bo = bayes_optimal(fps) or max(fps, key=lambda f: f["phi"])
    # e_gen (THEORY 1.5) on the SE's Gauss-Hermite omega rule, ~10 s per fixed point
    none = {"e_gen": None, "e_gen_error": None, "e_gen_plugin": None, "e_gen_plugin_error": None,
            "e_gen_method": "not computed (generalisation=False)"}
    egens = [m.generalisation_error(q=f["q"], V=f["mmse"], V_error=f["error"], method=True)
             if generalisation else none for f in fps]
    rows = [{**{k: f[k] for k in ("q", "q_hat", "mmse", "phi", "stable", "slope", "error")},
             "bayes_optimal": f is bo, **{k: v for k, v in e.items() if k != "e_gen_method"}}
            for f, e in zip(fps, egens)]
    details = {"q": bo["q"], "q_hat": bo["q_hat"], "phi": bo["phi"],
               **egens[[f is bo for f in fps].index(True)], "fixed_points": rows}
    if high:
        method = ("fixed points with V >= 0.05 (scan, Brent's method, a line through three "
                  "served residuals): output side by randomised QMC over the model (omega, h "
                  "and rejection draws of h given (y, omega); Nishimori form of |g|^2, phi by "
                  "thermodynamic integration) + Wishart prior quadrature; error = Student-t "
                  "99% bars over scrambles carried through the root")
        return Result(quantity="mmse", value=bo["mmse"], error=bo["error"], method=method,
                      precision=16, parameters=m.parameters(alpha=alpha), details=details)
    return Result(quantity="mmse", value=bo["mmse"], error=bo["error"],
                  method=f"fixed points with V >= {ps.V_MIN} (scan, Brent's method): output "
                  "side over omega by the " + bo.get(
                      "rule", f"Gauss-Hermite, orders {tuple(ps.SE_ORDERS)}")
                  + f" rule (the face rule below V = {ps.V_GH})"
                  " of the Gaussian polytope engine + Wishart prior "
                  "quadrature; error = the Newton step between the two rules + propagated bars",
                  precision=16, parameters=m.parameters(alpha=alpha),
                  details=details)


def _polyhedral_curve(m: AIM, *, alphas: list, tol: float, method: str,
                      progress: Progress, generalisation: bool = True) -> ResultTable:
    """The Bayes-optimal branch of a polyhedral channel, one state evolution per alpha (about
    40 s each on two cores); an alpha whose fixed points lie below V_MIN gets a row with a note
    (THEORY 1.1, 1.4)."""
    from .numerics import polyhedral_se as ps
    from .numerics.records import ConvergenceError

    if tol != 1e-13:
        raise DomainError(TOL, tol, "tol", allowed="omitted for a polyhedral channel (its error "
                          "is the quadrature's, about 1e-6)")
    if method != "traced":
        raise InputError(f"method must be omitted for a polyhedral channel (each alpha is "
                         f"solved on its own); got {method!r}")
    rows = []
    for k, a in enumerate(alphas):
        if progress:
            progress(k, len(alphas), f"alpha = {a:g}")
        try:
            r = _polyhedral_state_evolution(m, alpha=a, digits=None,
                                            generalisation=generalisation)
        except ConvergenceError:
            rows.append({"alpha": a, "note": f"no fixed point with V >= {ps.V_MIN} (beyond the "
                         "resolved range)"})
            continue
        d = r.details
        rows.append({"alpha": a, "q": d["q"], "q_hat": d["q_hat"], "mmse": r.value,
                     "phi": d["phi"], "error": r.error, "fixed_points": len(d["fixed_points"]),
                     **({k: d[k] for k in ("e_gen", "e_gen_error", "e_gen_plugin",
                                           "e_gen_plugin_error")} if generalisation else {})})
    if progress:
        progress(len(alphas), len(alphas), "done")
    return ResultTable(tuple(rows), m.parameters())


# ----------------------------------------------------------------------------- SMI
@dataclass(frozen=True)
class SMI:
    """The sequence multi-index model with deep attention (THEORY 2):
    ``SMI(am.channels.deep_attention(layers=2, tokens=2, skip=1.0))``."""

    channel: DeepAttention = DeepAttention()

    def __post_init__(self) -> None:
        if not isinstance(self.channel, DeepAttention):
            raise InputError("channel must be am.channels.deep_attention(...) for the SMI; got "
                             f"{type(self.channel).__name__}")

    @property
    def layers(self) -> int:
        return self.channel.layers

    def _args(self) -> dict:
        return self.channel.as_dict()

    def parameters(self, **extra) -> dict:
        return {"model": "smi", **self._args(), **extra}

    def _require_layers(self, what: str, allowed: tuple = (2,)) -> None:
        if self.layers not in allowed:
            raise DomainError(_channels.LAYERS_DOMAIN, self.layers, "layers",
                              allowed=f"{' or '.join(map(str, allowed))} for {what}")

    def thresholds(self, *, digits: int = 4, sequential: bool = True,
                   progress: Progress = None) -> ResultTable:
        """Weak-recovery thresholds of each layer at Q = 0 and (unless ``sequential=False``)
        the sequential ones (THEORY 2.2): one Result each, quantity "alpha_weak" or
        "alpha_sequential", details layer, kind, seconds (and q2, or q3 and ``first`` at L = 3).
        ``digits``: accuracy of the L = 2 sequential threshold (1..9); at L = 3 the sequential
        thresholds come from the deterministic fibre lattice (error bar by refinement)."""
        digits = SEQUENTIAL_DIGITS.check(digits)
        args = self._args()
        if self.layers == 3:
            from .numerics import smi_weak

            res = smi_weak.weak_thresholds(progress=progress, **args)
            if sequential:
                from .numerics import smi_sequential

                seq = smi_sequential.sequential_thresholds(
                    layers=3, skip=args["skip"], beta=args["beta"], progress=progress)
                res += [{k: d[k] for k in _L3_SEQUENTIAL_KEYS} for d in seq]
        else:
            from .numerics import smi

            res = smi.weak_thresholds(progress=progress, sequential=sequential, digits=digits,
                                      **args)
        params = self.parameters()
        return ResultTable(tuple(
            Result(quantity=f"alpha_{d['kind']}", value=d["value"], error=d["error"],
                   method=d["method"], precision=None, parameters=params,
                   details={k: v for k, v in d.items() if k not in ("value", "error", "method")})
            for d in res), params)

    def fixed_point(self, *, alpha: float) -> Result:
        """The Bayes-optimal SE fixed point (THEORY 2.1): quantity "Q" (the diagonal overlaps,
        one per layer), error per entry; details Q_hat, e_gen, phi, branch, stable, ..."""
        from .numerics import smi

        self._require_layers("the SMI state evolution")
        alpha = ALPHA.check(alpha)
        r = smi.fixed_point(alpha=alpha, **self._args())
        return Result(quantity="Q", value=tuple(r["Q"]), error=tuple(r["error"]),
                      method=r.get("method", "SMI state evolution (THEORY 2.1), branch "
                                   f"{r.get('branch')}"),
                      precision=16, parameters=self.parameters(alpha=alpha),
                      details={k: v for k, v in r.items() if k not in ("Q", "error", "alpha")})

    def curve(self, *, alphas, progress: Progress = None) -> ResultTable:
        """The SE along an alpha grid: one flat row per alpha (alpha, Q_11, Q_22, ..., e_gen,
        branch, ...)."""
        from .numerics import smi

        self._require_layers("the SMI state evolution")
        grid = check_grid(alphas, ALPHA, label="alphas")
        rows = smi.se_curve(alphas=list(grid), progress=progress, **self._args())
        flat = []
        for r in rows:
            d = {}
            for k, v in r.items():
                if isinstance(v, (list, tuple)):  # diagonal entries Q_11, Q_22, ...
                    d.update({f"{k}_{i + 1}{i + 1}": x for i, x in enumerate(v)})
                else:
                    d[k] = v
            flat.append(d)
        return ResultTable(tuple(flat), self.parameters())

    def check(self) -> ResultTable:
        """Identity checks of the SMI engine (THEORY 4): one row per check."""
        from .numerics import smi

        self._require_layers("the SMI checks")
        return ResultTable(tuple(smi.run_checks(**self._args())), self.parameters())

    def amp(self, *, alpha: float, dim: int = 100, seeds: int = 4, max_iter: int = 100,
            damping: float = 0.3, rng_seed: int = 0, progress: Progress = None) -> Result:
        """GAMP on synthetic data (THEORY 2.4): quantity "Q" (mean final overlaps per layer,
        error = standard error over seeds); details Q_tail_mean, Q_tail_stderr,
        per_iteration, converged_fraction, se_prediction, seconds."""
        from .numerics import smi_amp

        self._require_layers("SMI AMP")
        alpha = ALPHA_AMP.check(alpha)
        dim, seeds = DIM_SMI.check(dim), SEEDS.check(seeds)
        max_iter, rng_seed = MAX_ITER.check(max_iter), RNG_SEED.check(rng_seed)
        damping = DAMPING.check(damping)
        r = smi_amp.run_smi_amp(alpha=alpha, dim=dim, seeds=seeds, max_iter=max_iter,
                                damping=damping, rng_seed=rng_seed, progress=progress,
                                **self._args())
        keep = ("Q_tail_mean", "Q_tail_stderr", "per_iteration", "converged_fraction",
                "se_prediction", "seconds")
        return Result(quantity="Q", value=tuple(r["Q_mean"]), error=tuple(r["Q_stderr"]),
                      method=f"GAMP at D = {dim}, {seeds} seeds; error = standard error",
                      precision=16, parameters=self.parameters(alpha=alpha, dim=dim, seeds=seeds,
                                                               rng_seed=rng_seed),
                      details={k: r.get(k) for k in keep})

    def derive(self) -> str:
        """The SMI equations (fibre, inverse attention, SE) as a markdown sheet."""
        from .sheets import smi_sheet, strip_canonical

        return strip_canonical(smi_sheet(self.layers))


# ----------------------------------------------------------------------------- the prior alone
def _exact_positive(value: Any, domain: Domain):
    """A positive finite real read exactly (str, int, Fraction or float) -> Fraction."""
    from fractions import Fraction

    q = None
    if isinstance(value, str):
        try:
            q = Fraction(value.strip())
        except (ValueError, ZeroDivisionError):
            q = None
    elif not isinstance(value, bool) and domain.contains(value):
        q = Fraction(repr(float(value))) if isinstance(value, float) else Fraction(value)
    if q is None or not q > 0 or not domain.contains(float(q)):
        raise DomainError(domain, value, domain.name,
                          allowed=f"{domain.allowed()} (decimal or p/q)")
    return q


def _engine_number(value: Any, q, digits: int | None):
    """What the prior's engine reads: a float as its shortest decimal (0.2 = 1/5, as the
    command line reads it), p/q (``q``, as :func:`_exact_positive` read it) as an mpmath
    number at the working precision."""
    import mpmath

    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str) and "/" in value:
        with mpmath.workdps((digits or 16) + 30):
            return mpmath.mpf(q.numerator) / q.denominator
    return value


MMSE_RHO = RHO.with_(description=f"Wishart aspect ratio rho (read exactly), finite >= {RHO.low:g}: "
                     "below, the double-precision prior quadrature loses its accuracy")
MMSE_DELTA = Domain(name="delta", option="--delta", low=0, low_open=True, default=None,
                    description="noise variance Delta > 0 (read exactly)")


def mmse(*, rho, delta, digits: int | None = None, certified: bool = False) -> Result:
    """mmse(Delta) of denoising the Wishart matrix S from S + sqrt(Delta) Z (THEORY 1.1).

    ``rho``, ``delta``: positive reals (decimal strings read exactly, a float as its shortest
    decimal: 0.2 means 1/5); ``digits``: mpmath
    digits of the estimate (5..200; value then a decimal string), or significant digits of the
    ``certified`` interval (default 20), found by ball arithmetic (python-flint)."""
    exact = {"rho": _exact_positive(rho, MMSE_RHO), "delta": _exact_positive(delta, MMSE_DELTA)}
    if digits is not None:
        digits = MMSE_DIGITS.check(digits)
    params = {"rho": rho, "delta": delta}
    if certified:
        from .numerics.certified_prior import mmse_enclosure

        enc = mmse_enclosure(rho=rho, delta=delta, digits=20 if digits is None else digits)
        return Result(quantity="mmse", value=enc.value, error=enc.error, method=enc.method,
                      precision=enc.precision, parameters=params,
                      details={"interval": [enc.lo, enc.hi], "width": enc.width, "mid": enc.mid,
                               "what_is_certified": enc.what_is_certified,
                               "precision_bits": enc.precision, "support": enc.extra["support"],
                               "support_masses": enc.extra["support_masses"]})
    from .numerics import wishart

    engine = {k: _engine_number(v, exact[k], digits) for k, v in params.items()}
    est = wishart.mmse_estimate(engine["delta"], rho=engine["rho"], dps=digits)
    error = est.error
    if digits is None:
        value = est.value
    else:
        import mpmath

        value = mpmath.nstr(est.value, digits)
        # the printed value is rounded to ``digits`` significant digits: its bar covers that
        # rounding too (two rules that agree to the working precision gave error 0 before)
        with mpmath.workdps(digits + 20):
            exact = mpmath.mpf(est.value)
            rounding = abs(mpmath.mpf(value) - exact)
            unit = mpmath.mpf(10) ** (mpmath.floor(mpmath.log10(abs(exact))) + 1 - digits) / 2
            error = float(max(mpmath.mpf(error), rounding, unit))
    return Result(quantity="mmse", value=value, error=error, method=est.method,
                  precision=est.precision, parameters=params)


__all__ = ["AIM", "SMI", "mmse"]
