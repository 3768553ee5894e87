"""Empirical risk minimisation of one tied attention layer (THEORY 3): the :class:`ERM` model.

``ERM(kappa0=0.5, delta=0.5, lam=0.01)`` is the teacher (an AIM of rank ratio kappa0 with
pre-activation noise of variance ``delta`` = Delta on the diagonal, Delta/2 off it, softmax of
inverse temperature ``beta0``) and the student (tied S = W^T W / sqrt(p d), softmax of ``beta``,
square loss, weight decay ``lam`` = lambda_tilde, i.e. lambda_tilde d ||S||_*).  ``delta`` is the
label-noise *variance* (the command line's --delta), not the spectral delta = sqrt(q_hat)/m_hat
of the SE.  Methods call :mod:`aim_sym.numerics.erm_se`, :mod:`~aim_sym.numerics.erm_spectral`
and :mod:`~aim_sym.numerics.erm_thresholds` and return :class:`~aim_sym.results.Result` /
:class:`~aim_sym.results.ResultTable`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

import mpmath
import numpy as np

from .domains import ALPHA, Domain, DomainError, check_grid
from .numerics.records import ConvergenceError, InputError
from .results import Result, ResultTable

KAPPA0 = Domain(name="kappa0", option="--kappa0", low=1e-4, default=0.5,
                description="rank ratio kappa0 of the teacher S0 (THEORY 3), >= 1e-4 (the floor "
                "of the double-precision spectral quadrature, as for rho)")
NOISE = Domain(name="delta", option="--delta", low=0, default=0.0,
               description="variance Delta of the noise on the teacher's pre-activations "
               "(diagonal; Delta/2 off it), >= 0")
LAM = Domain(name="lam", option="--lam", low=0, default=0.01,
             description="weight decay lambda_tilde (nuclear-norm penalty lambda_tilde d ||S||_*)")
BETA_ERM = Domain(name="beta", option="--beta", low=0, low_open=True, default=1.0,
                  description="inverse temperature of the student's softmax, > 0")
BETA0 = Domain(name="beta0", option="--beta0", low=0, low_open=True, default=1.0,
               description="inverse temperature of the teacher's softmax, > 0")
TOKENS_ERM = Domain(name="tokens", option="--tokens", kind="integer", low=2, high=64, default=2,
                    description="sequence length T (the SE takes T = 2..6; thresholds any T)")
ALPHA_ERM = ALPHA.with_(low_open=True, description="sample ratio alpha = N / d^2, > 0")
THRESHOLD_DIGITS_ERM = Domain(name="digits", option="--digits", kind="integer", low=15,
                              high=100, default=30,
                              description="working digits of an ERM threshold (mpmath)")
SPECTRUM_POINTS = Domain(name="points", option="--points", kind="integer", low=10,
                         high=100_000, default=400, description="grid points of a spectrum")
SIGMA_ERM = Domain(name="sigma", option="--sigma", low=25.0, high=1e6,
                   description="Sigma of the lambda = 0 SE solved at fixed Sigma (alpha an "
                   "output), in [25, 1e6]: where its 16/12 bars were checked against outer "
                   "order 20 (docs/erm.md)")
THRESHOLD_KINDS = ("interpolation", "perfect")
#: what the fixed-Sigma SE needs of the model (numerics.erm_ridgeless.AT_SIGMA_RANGE; the range
#: is appended where the message is built)
AT_SIGMA_ONLY = ("used only with {range}, where its 16/12 bars were checked against outer order "
                 "20 (docs/erm.md)")
#: smallest lambda of the SE: at 1e-3 a higher quadrature order stays inside the bar, at 1e-4
#: (Sigma ~ 960) it moves the test error by 2.3 bars (docs/erm_peak.md)
LAM_SE_MIN = 1e-3


@dataclass(frozen=True, kw_only=True)
class ERM:
    """ERM of single-head tied attention (THEORY 3); ``delta`` is the noise variance Delta."""

    kappa0: float
    delta: float = 0.0
    lam: float = 0.01
    tokens: int = 2
    beta: float = 1.0
    beta0: float = 1.0

    def __post_init__(self) -> None:
        for name, dom in (("kappa0", KAPPA0), ("delta", NOISE), ("lam", LAM),
                          ("beta", BETA_ERM), ("beta0", BETA0)):
            object.__setattr__(self, name, dom.check(getattr(self, name)))
        object.__setattr__(self, "tokens", TOKENS_ERM.check(self.tokens))

    # ------------------------------------------------------------------ plumbing
    def parameters(self, **extra) -> dict:
        return {"model": "erm", "tokens": self.tokens, "kappa0": self.kappa0, "delta": self.delta,
                "lam": self.lam, "beta": self.beta, "beta0": self.beta0, **extra}

    def _params(self, alpha: float, *, direct: bool = False):
        from .numerics.erm_output_tokens import TOKENS
        from .numerics.erm_se import ERMParams

        if self.tokens not in TOKENS:
            raise DomainError(TOKENS_ERM, self.tokens, "tokens",
                              allowed=f"{TOKENS[0]}..{TOKENS[-1]} for the ERM state evolution "
                              "(thresholds take up to 64)")
        if self.lam < LAM_SE_MIN:
            raise DomainError(LAM, self.lam, "lam",
                              allowed=f"0 or >= {LAM_SE_MIN:g} for the state evolution (at "
                              "lambda = 1e-4 the quadrature's bar was measured not to cover; lam "
                              "= 0: factorised, T = 2, the ridgeless SE or the lambda -> 0+ "
                              "limit, docs/erm.md)")
        return ERMParams(alpha=alpha, kappa0=self.kappa0, Delta=self.delta, lam=self.lam,
                         beta=self.beta, beta0=self.beta0, tokens=self.tokens)

    # ------------------------------------------------------------------ state evolution
    def fixed_points(self, *, alpha: float, direct: bool = False,
                     rule: str = "gh") -> ResultTable:
        """Every SE fixed point reached from the default starts (THEORY 3): one row each with
        q, m, sigma, q_hat, m_hat, sigma_hat, train, test, mse, rank, their ``*_error`` (two
        quadrature orders) and ``global_minimum`` (lowest training loss). ``direct``: the
        element-wise (ridge) parameterisation, penalty (lam/2) d ||S||_F^2 as the authors'
        ``lreg`` (:mod:`aim_sym.numerics.erm_direct`, any T the factorised SE takes); rank is
        then 1. ``rule``: the T = 2 output rule, "gh" (tensor Gauss-Hermite) or "split" (the
        prox's jumps located on lines, bars 3-10x smaller, ~1.5x the time; factorised model
        only; docs/erm.md)."""
        from .numerics import erm_direct, erm_se

        alpha = ALPHA_ERM.check(alpha)
        if rule not in erm_se.RULES:
            raise InputError(f"rule must be one of {', '.join(erm_se.RULES)}; got {rule!r}")
        if rule != "gh" and (direct or self.tokens != 2):
            where = "the direct parameterisation" if direct else f"tokens = {self.tokens}"
            raise InputError(f"rule must be 'gh' for {where} (the split rule: T = 2, "
                             f"factorised); got {rule!r}")
        if self.lam == 0:
            rows, _ = self._lambda_zero(alpha, direct=direct, rule=rule)
            return ResultTable(tuple(rows), self.parameters(alpha=alpha))
        p = self._params(alpha, direct=direct)
        fps = erm_direct.solve(p) if direct else erm_se.solve(p, rule=rule)
        return ResultTable(tuple(dict(f.as_dict(), alpha=alpha) for f in fps),
                           self.parameters(alpha=alpha))

    def _lambda_zero(self, alpha: float, *, direct: bool, rule: str,
                     start: tuple | None = None) -> tuple[list[dict], str]:
        """lam = 0 (factorised, T = 2; THEORY 3, docs/erm.md "The ridgeless curve"): above
        alpha_interp the lambda = 0 SE (:func:`~aim_sym.numerics.erm_ridgeless.ridgeless_se`,
        Gauss-Hermite where its bars were validated, Sigma <= 5, the piecewise output rule up to
        Sigma = 90; beyond: ConvergenceError with the last iterate; kappa0, Delta outside
        ``erm_ridgeless.FIXED_ALPHA_RANGE``: refused), at or below it the lambda
        -> 0+ limit (:func:`~aim_sym.numerics.erm_se.interpolator_limit`, the
        minimum-nuclear-norm interpolator: Sigma = infinity, train = 0).  Returns (rows, method);
        ``rule`` "split" forces the piecewise rule.  ``start``: (q, m, Sigma) to start from."""
        from .numerics import erm_ridgeless, erm_se
        from .numerics.erm_output_tokens import TOKENS

        if self.tokens not in TOKENS:
            self._params(alpha)  # tokens outside the SE's range: refused naming --tokens
        if direct or self.tokens != 2:
            where = "--direct" if direct else f"tokens = {self.tokens}"
            raise DomainError(LAM, self.lam, "lam", allowed=f">= {LAM_SE_MIN:g} for {where} "
                              "(lam = 0: the factorised model at T = 2 only)")
        if self.delta <= 0:
            raise DomainError(LAM, self.lam, "lam", allowed=f">= {LAM_SE_MIN:g} without label "
                              "noise (lam = 0 needs delta > 0: alpha_interp is defined by it)")
        a_i = erm_ridgeless.alpha_interp(kappa0=self.kappa0, Delta=self.delta)
        if alpha <= a_i * (1 + 1e-12):  # within rounding of alpha_interp: at it
            lim = erm_se.interpolator_limit(alpha=alpha, kappa0=self.kappa0,
                                            Delta=self.delta, beta=self.beta, beta0=self.beta0)
            row = {"limit": "lambda -> 0+", "alpha": alpha, "alpha_interp": a_i,
                   "train": 0.0, "train_error": 0.0, "sigma": math.inf, "sigma_error": 0.0,
                   "global_minimum": True}
            for k in ("q", "m", "mse", "rank", "test", "delta", "eps"):
                row[k] = getattr(lim, k)
                row[f"{k}_error"] = lim.errors[k]
            row["delta_spec"], row["delta_spec_error"] = row.pop("delta"), row.pop("delta_error")
            method = ("lambda -> 0+ limit of the ERM SE at alpha <= alpha_interp (THEORY 3, "
                      "docs/erm_peak.md): the minimum-nuclear-norm interpolator, closed on the "
                      "spectral (delta, eps) with Sigma = infinity and train = 0 "
                      "(numerics.erm_se.interpolator_limit); error = two spectral rules")
            return [row], method
        if alpha <= a_i * (1 + 1e-9):
            raise DomainError(ALPHA_ERM, alpha, "alpha", allowed=f"<= alpha_interp = {a_i:.12g} "
                              "or > alpha_interp (1 + 1e-9) at lam = 0 (just above it Sigma is "
                              "beyond every quadrature)")
        inits = None if start is None else ((start[0] / (1 + self.kappa0),
                                             start[1] / (1 + self.kappa0), start[2]),)
        pt = erm_ridgeless.ridgeless_se(alpha=alpha, kappa0=self.kappa0, Delta=self.delta,
                                        beta=self.beta, beta0=self.beta0, inits=inits,
                                        rule="split" if rule == "split" else "auto")
        extra = {"alpha": alpha, "alpha_interp": a_i, "fitted": pt.fitted,
                 "fitted_error": pt.fixed_point.errors["fitted"], "rule": pt.rule}
        rows = [dict(f.as_dict(), **extra) for f in pt.all_fixed_points]
        for r, f in zip(rows, pt.all_fixed_points, strict=True):
            if f.global_minimum:
                r.update(fitted=pt.fitted, fitted_error=pt.fixed_point.errors["fitted"])
            else:
                r.pop("fitted"), r.pop("fitted_error")
        if pt.rule == "split":
            method = ("ERM SE at lambda = 0 (THEORY 3; PSD projection prior, eps = 0): T = 2 "
                      "proximal step followed along lines across its jumps (piecewise rule, "
                      "Broyden solve); error = 3 x the difference of outer orders 16 and 12 "
                      "(q, m, Sigma and the hats norm-wise; test, mse, rank: 3 x the largest of "
                      "their own difference and each variable's term), checked against outer "
                      "orders 20-28 at Sigma 6-86 over kappa0 in [0.3, 0.7], Delta in [0.1, 0.5] "
                      "(docs/erm.md)")
        else:
            method = ("ERM SE at lambda = 0 (THEORY 3; PSD projection prior, eps = 0): T = 2 "
                      "proximal step by Newton, tensor Gauss-Hermite; error = difference of "
                      "orders 24 and 17 x 17/7 (validated for Sigma <= 5)")
        return rows, method

    def state_evolution(self, *, alpha: float, direct: bool = False,
                        rule: str = "gh") -> ResultTable:
        """The global-minimum fixed point at ``alpha``: one Result per quantity (q, m, sigma,
        q_hat, m_hat, sigma_hat, train, test, mse, rank); every fixed point found is in each
        Result's details (``fixed_points``). ``direct``, ``rule``: see :meth:`fixed_points`."""
        if self.lam == 0:
            alpha = ALPHA_ERM.check(alpha)
            if rule not in ("gh", "split"):
                raise InputError(f"rule must be one of gh, split; got {rule!r}")
            rows, method = self._lambda_zero(alpha, direct=direct, rule=rule)
            best = next(r for r in rows if r["global_minimum"])
            params = self.parameters(alpha=float(alpha), direct=bool(direct),
                                     **({"rule": rule} if rule != "gh" else {}))
            keys = [k for k in (*_QUANTITIES, "fitted", "delta_spec", "eps") if k in best]
            return ResultTable(tuple(
                Result(quantity=k, value=best[k], error=best[f"{k}_error"], method=method,
                       precision=16, parameters=params,
                       details={"fixed_points": rows, "iterations": best.get("iterations"),
                                **{x: best[x] for x in ("limit", "rule", "alpha_interp")
                                   if x in best}})
                for k in keys), params)
        table = self.fixed_points(alpha=alpha, direct=direct, rule=rule)
        rows = [dict(r) for r in table]
        best = next(r for r in rows if r["global_minimum"])
        params = self.parameters(alpha=float(alpha), direct=bool(direct),
                                 **({"rule": rule} if rule != "gh" else {}))
        prior = ("direct (element-wise) S with ridge penalty (lam/2) d ||S||_F^2: linear "
                 "denoiser" if direct else "exact spectral derivatives")
        if self.tokens == 2 and rule == "split":
            method = (f"ERM SE (THEORY 3): {prior}, T = 2 proximal step followed along lines "
                      "across its jumps (located and integrated piecewise), Gauss-Hermite in the "
                      "other three directions; error = difference of orders 16 and 12 x 3")
        elif self.tokens == 2:
            method = (f"ERM SE (THEORY 3): {prior}, T = 2 proximal step by Newton, tensor "
                      "Gauss-Hermite; error = difference of orders 24 and 17 x 17/7 (the error of "
                      "order 24 if it falls as 1/n: the rule converges algebraically)")
        else:
            method = (f"ERM SE (THEORY 3): {prior}, T = {self.tokens} proximal step by Newton "
                      "in the n - 1 seen directions, randomised QMC (16 scrambled Sobol "
                      "replicates x 2048 points); error = 3 x standard error of the replicate "
                      "fixed points")
        return ResultTable(tuple(
            Result(quantity=k, value=best[k], error=best[f"{k}_error"], method=method,
                   precision=16, parameters=params,
                   details={"fixed_points": rows, "iterations": best["iterations"]})
            for k in _QUANTITIES), params)

    def state_evolution_at_sigma(self, *, sigma: float, start: tuple | None = None,
                                 orders: tuple | None = None) -> ResultTable:
        """The lambda = 0 SE at a given Sigma, alpha an output (THEORY 3; docs/erm.md "Between
        alpha_interp and 0.3"): :func:`~aim_sym.numerics.erm_ridgeless.ridgeless_at_sigma`,
        the piecewise output rule at outer orders 16 and 12, values at 16, bars 3 x the 16/12
        difference (alpha, train: their own; q, m and the hats: norm-wise over the logs; test
        and mse (of q, m) and rank (of the hats): the largest of their own and of each
        variable's term in their change, erm_ridgeless._cancellation_bar; Sigma exact). One
        Result per quantity: alpha first, then q, m, sigma, the hats, train, test, mse, rank,
        fitted. Needs lam = 0, T = 2, (kappa0, delta) in ``erm_ridgeless.AT_SIGMA_RANGE``,
        beta = beta0 = 1 and Sigma in [25, 1e6] at kappa0 = delta = 0.5, in [1e3, 1e4]
        elsewhere: where the bars were checked against order 20 (docs/erm.md). ``start``: (q,
        m, alpha); ``orders``: (order, order_lo), default (16, 12)."""
        from .numerics import erm_ridgeless

        sigma = self._check_at_sigma(sigma)
        order, order_lo = _orders(orders, "orders") if orders is not None else (16, 12)
        pt = erm_ridgeless.ridgeless_at_sigma(sigma=sigma, kappa0=self.kappa0, Delta=self.delta,
                                              beta=self.beta, beta0=self.beta0, start=start,
                                              order=order, order_lo=order_lo)
        fp = pt.fixed_point
        params = self.parameters(sigma=sigma)
        method = ("ERM SE at lambda = 0 solved at fixed Sigma, alpha the unknown (THEORY 3; PSD "
                  "projection prior, eps = 0): T = 2 proximal step followed along lines across "
                  "its jumps (piecewise rule, Broyden solve); error = difference of outer orders "
                  f"{order} and {order_lo} x {erm_ridgeless.erm_se.split_factor(order, order_lo):g} "
                  "(Sigma exact; checked against order 20 for Sigma = 26 ... 1e6)")
        details = {"alpha_interp": pt.alpha_interp, "rule": pt.rule, "given": "sigma",
                   "orders": list(pt.orders), "iterations": fp.iterations,
                   "residual": fp.residual, "delta_spec": pt.delta}
        values = {"alpha": (pt.alpha, pt.alpha_error),
                  **{k: (getattr(fp, k), fp.errors[k]) for k in _QUANTITIES},
                  "fitted": (pt.fitted, fp.errors["fitted"])}
        return ResultTable(tuple(
            Result(quantity=k, value=v, error=e, method=method, precision=16,
                   parameters=params, details=details) for k, (v, e) in values.items()), params)

    def curve_at_sigma(self, *, sigmas, orders: tuple | None = None,
                       progress: Callable[[int, int, str], None] | None = None,
                       done: list | tuple = (),
                       on_row: Callable[[list], None] | None = None) -> ResultTable:
        """The lambda = 0 SE along a grid of Sigma, alpha an output at each (THEORY 3; docs/erm.md
        "A curve in Sigma"): :meth:`state_evolution_at_sigma` at every Sigma of ``sigmas`` (each in
        [25, 1e6]), each point started from the table of docs/erm.md "Points" corrected by the
        previous point's ratio to it (:func:`~aim_sym.numerics.erm_ridgeless.at_sigma_start`).
        One row per Sigma: sigma, alpha, q, m, the hats, train, test, mse, rank, fitted (each
        with ``*_error``: 3 x the 16/12 difference, Sigma exact), alpha_interp, order, order_lo,
        residual.
        ``done``: rows of an earlier run of the same grid, reused while their Sigma matches the
        grid in order; ``on_row(rows)`` after each new row (the rows so far); ``progress(k, n,
        text)`` before and after each point.  Same requirements as :meth:`state_evolution_at_sigma`
        (lam = 0, T = 2, the model and Sigma in ``erm_ridgeless.AT_SIGMA_RANGE``); a point that
        does not converge raises :class:`ConvergenceError` (the rows before it went to ``on_row``)."""
        from .numerics import erm_ridgeless

        grid = check_grid(sigmas, SIGMA_ERM, label="sigmas")
        self._check_at_sigma(grid[0])
        self._check_at_sigma(grid[-1])
        rows: list[dict] = []
        for d, s in zip(done, grid):
            if not isinstance(d, dict) or d.get("sigma") != s:
                break
            rows.append(dict(d))
        n = len(grid)
        if progress is not None and rows:
            progress(len(rows), n, f"{len(rows)} Sigma reused from the earlier run")
        prev = None
        if rows:
            r = rows[-1]
            prev = (r["sigma"], (r["q"], r["m"], r["alpha"]))
        for k in range(len(rows), n):
            s = grid[k]
            start = erm_ridgeless.at_sigma_start(s, kappa0=self.kappa0, Delta=self.delta,
                                                 previous=prev)
            if progress is not None:
                progress(k, n, f"Sigma = {s:g}: solving (alpha an output; start alpha = "
                               f"{start[2]:.6g})")
            try:
                table = self.state_evolution_at_sigma(sigma=s, start=start, orders=orders)
            except ConvergenceError:
                if prev is None:
                    raise
                if progress is not None:
                    progress(k, n, f"Sigma = {s:g}: not converged from the previous point; "
                                   "again from the table's start")
                table = self.state_evolution_at_sigma(sigma=s, orders=orders)
            details = table[0].details
            row: dict = {"sigma": s, "sigma_error": 0.0}
            for r in table:
                row[r.quantity] = r.value
                row[f"{r.quantity}_error"] = r.error
            row.update(alpha_interp=details["alpha_interp"], order=details["orders"][0],
                       order_lo=details["orders"][1], residual=details["residual"])
            rows.append(row)
            prev = (s, (row["q"], row["m"], row["alpha"]))
            if on_row is not None:
                on_row(list(rows))
            if progress is not None:
                progress(k + 1, n, f"Sigma = {s:g}: alpha = {row['alpha']:.6g} +- "
                                   f"{row['alpha_error']:.1e}, test = {row['test']:.6g} +- "
                                   f"{row['test_error']:.1e}")
        return ResultTable(tuple(rows), self.parameters())

    def _check_at_sigma(self, sigma: float) -> float:
        """Sigma in [25, 1e6] and the model one the fixed-Sigma SE serves (lam = 0, T = 2,
        delta > 0): :class:`DomainError` naming sigma otherwise."""
        sigma = SIGMA_ERM.check(sigma)
        if self.lam != 0:
            raise DomainError(SIGMA_ERM, sigma, "sigma", allowed=f"used only with lam = 0 (the "
                              f"ridgeless SE; got lam = {self.lam:g})")
        if self.tokens != 2:
            raise DomainError(SIGMA_ERM, sigma, "sigma", allowed="used only with tokens = 2 "
                              f"(the lambda = 0 SE is T = 2 only; got tokens = {self.tokens})")
        if self.delta <= 0:
            raise DomainError(SIGMA_ERM, sigma, "sigma", allowed="used only with delta > 0 "
                              "(alpha_interp is defined by the label noise)")
        from .numerics import erm_ridgeless as er

        allowed = AT_SIGMA_ONLY.format(range=er.at_sigma_range_text().replace("Delta", "delta"))
        if not er.at_sigma_checked(kappa0=self.kappa0, Delta=self.delta, beta=self.beta,
                                   beta0=self.beta0):
            raise DomainError(SIGMA_ERM, sigma, "sigma", allowed=allowed + f" (got "
                              f"kappa0 = {self.kappa0:g}, delta = {self.delta:g}, beta = "
                              f"{self.beta:g}, beta0 = {self.beta0:g})")
        lo, hi = er.at_sigma_sigma_range(kappa0=self.kappa0, Delta=self.delta)
        if not lo <= sigma <= hi:
            raise DomainError(SIGMA_ERM, sigma, "sigma", allowed=f"in [{er.number_text(lo)}, "
                              f"{er.number_text(hi)}] at kappa0 = {self.kappa0:g}, delta = "
                              f"{self.delta:g}; " + allowed)
        return sigma

    def curve(self, *, alphas, direct: bool = False) -> ResultTable:
        """The global-minimum branch over ``alphas``, each point started from the previous one
        (and from the default starts where that fails): one row per alpha. ``direct``: the
        element-wise (ridge) parameterisation (see :meth:`fixed_points`)."""
        from .numerics import erm_direct, erm_se

        grid = check_grid(alphas, ALPHA_ERM, label="alphas")
        if self.lam == 0:
            rows, start = [], None
            for a in grid:
                fps, _ = self._lambda_zero(a, direct=direct, rule="gh", start=start)
                best = next(r for r in fps if r["global_minimum"])
                if "limit" not in best:
                    start = (best["q"], best["m"], best["sigma"])
                rows.append(dict(best, fixed_points=len(fps)))
            return ResultTable(tuple(rows), self.parameters())
        solve = erm_direct.solve if direct else erm_se.solve
        rows = []
        prev = None
        for a in grid:
            p = self._params(a, direct=direct)
            inits = None if prev is None else (
                (prev.q / p.Q0, prev.m / p.Q0, prev.sigma),)
            try:
                fps = solve(p, inits=inits)
            except ConvergenceError:
                if prev is None:
                    raise
                fps = solve(p)
            prev = next(f for f in fps if f.global_minimum)
            rows.append(dict(prev.as_dict(), alpha=a, fixed_points=len(fps)))
        params = self.parameters(direct=True) if direct else self.parameters()
        return ResultTable(tuple(rows), params)

    def optimal_lambda(self, *, alpha: float, direct: bool = False,
                       lam_range: tuple[float, float] = (LAM_SE_MIN, 1.0), tol: float = 0.1,
                       start: tuple | None = None, orders: tuple[int, int] = (24, 17),
                       search_orders: tuple[int, int] = (8, 6)) -> Result:
        """The cross-validated weight decay at ``alpha`` (T = 2; ``self.lam`` is ignored):
        lambda* minimising the SE test error over ``lam_range`` (the population test error is
        what cross-validation estimates; :mod:`aim_sym.numerics.erm_crossval`).  Search at
        Gauss-Hermite order 8 (scan, then golden section to ``tol`` in ln lambda), lambda*
        re-solved at the default orders 24/17.  Result quantity "lam_opt": value lambda*, error
        from the search's location bar and the order-8/6 shift of the argmin (0 on an edge);
        details: test and test_error (the SE bar at lambda* plus the second-order flatness
        part), ``edge`` ("lower"/"upper" when the minimum is the range's end: the optimum is at
        or beyond it), every order parameter with its ``*_error``, the lambda -> 0+ limit's
        test error where the model interpolates (``test_lambda_to_0``), the search log.
        ``start``: (q, m, Sigma) to continue from. ``direct``: the ridge parameterisation.
        ``orders``, ``search_orders``: Gauss-Hermite (order, coarser order) of the final point
        and of the search (lower ones only to test the logic quickly)."""
        from .numerics import erm_crossval, erm_direct, erm_se, erm_thresholds

        alpha = ALPHA_ERM.check(alpha)
        lo, hi = _lam_range(lam_range)
        tol = _CV_TOL.check(tol)
        order, order_lo = _orders(orders, "orders")
        s_order, s_order_lo = _orders(search_orders, "search_orders")
        if self.tokens != 2:
            raise DomainError(TOKENS_ERM, self.tokens, "tokens",
                              allowed="2 for the cross-validated lambda (T = 2 SE)")
        p = replace(self, lam=lo)._params(alpha, direct=direct)
        s = erm_crossval.search(p, direct=direct, lam_range=(lo, hi), tol=tol, start=start,
                                order=s_order, order_lo=s_order_lo)
        p_opt = replace(p, lam=s.lam)
        q, m, sigma = s.fixed_point[:3]
        fps = (erm_direct.solve if direct else erm_se.solve)(
            p_opt, inits=((q / p.Q0, m / p.Q0, sigma),), order=order, order_lo=order_lo)
        best = dict(fps[0].as_dict())
        test_se = best["test_error"]
        details = {k: best[k] for k in (*_QUANTITIES, *(f"{k}_error" for k in _QUANTITIES))}
        details.update(
            test_error=test_se + s.flatness, test_se_error=test_se, test_flatness=s.flatness,
            test_search=s.test, edge=s.edge, edge_confirmed=s.edge_confirmed,
            lam_range=[lo, hi], tol=tol, log_lam_error=s.log_lam_error,
            bracket=list(s.bracket), curvature=s.curvature, vertex=s.vertex,
            vertex_lo=s.vertex_lo, iterations=best["iterations"],
            other_fixed_points=[list(f) for f in s.other_fixed_points],
            evaluations=[list(e) for e in s.evaluations])
        limit = None
        if direct and alpha < 0.25:
            limit = erm_direct.interpolator_limit(
                alpha=alpha, kappa0=self.kappa0, Delta=self.delta, beta=self.beta,
                beta0=self.beta0)
            limit = (limit.test, limit.test_error)
        elif not direct and self.delta > 0:
            a_int = erm_thresholds.interpolation_threshold(kappa0=self.kappa0, Delta=self.delta,
                                                           dps=None).value
            if alpha <= float(a_int):
                lim = erm_se.interpolator_limit(alpha=alpha, kappa0=self.kappa0,
                                                Delta=self.delta, beta=self.beta,
                                                beta0=self.beta0)
                limit = (lim.test, lim.errors["test"])
        if limit is not None:
            details.update(test_lambda_to_0=limit[0], test_lambda_to_0_error=limit[1],
                           lambda_to_0_lower=bool(limit[0] + limit[1]
                                                  < best["test"] - details["test_error"]))
        lam_err = 0.0 if s.edge else s.lam * math.expm1(s.log_lam_error)
        prior = "direct (ridge, (lam/2) d ||S||_F^2)" if direct else "factorised (nuclear norm)"
        method = (f"cross-validated lambda of the ERM SE (THEORY 3), {prior}: argmin of the SE "
                  f"test error over lambda in [{lo:g}, {hi:g}]; search at Gauss-Hermite order "
                  f"{s.order} ({erm_crossval.SCAN_POINTS}-point scan in ln lambda, golden "
                  f"section to {tol:g}), lambda* re-solved at orders {order}/{order_lo}; "
                  "error of lambda*: "
                  f"search location + {s.order_lo}/{s.order - s.order_lo} x the order "
                  f"{s.order}/{s.order_lo} shift of the "
                  "argmin (0 on an edge); test_error: SE bar at lambda* + (1/2) f'' "
                  "(ln-lambda bar)^2 (the flatness part, second order)")
        if s.edge:
            method += f"; minimum on the {s.edge} edge of the range: optimum at or beyond it"
        return Result(quantity="lam_opt", value=s.lam, error=lam_err, method=method,
                      precision=16,
                      parameters={k: v for k, v in self.parameters(
                          alpha=alpha, direct=bool(direct)).items() if k != "lam"},
                      details=details)

    def cross_validated_curve(self, *, alphas, direct: bool = False,
                              lam_range: tuple[float, float] = (LAM_SE_MIN, 1.0),
                              tol: float = 0.1, orders: tuple[int, int] = (24, 17),
                              search_orders: tuple[int, int] = (8, 6),
                              progress: Callable[[int, int, str], None] | None = None
                              ) -> ResultTable:
        """:meth:`optimal_lambda` at every alpha (each search continued from the previous
        alpha's lambda*): one row per alpha with alpha, lam_opt, lam_opt_error, test,
        test_error, edge and the order parameters with their errors."""
        grid = check_grid(alphas, ALPHA_ERM, label="alphas")
        rows, start = [], None
        for i, a in enumerate(grid):
            r = self.optimal_lambda(alpha=a, direct=direct, lam_range=lam_range, tol=tol,
                                    start=start, orders=orders, search_orders=search_orders)
            d = dict(r.details)
            start = (d["q"], d["m"], d["sigma"])
            row = {"alpha": a, "lam_opt": r.value, "lam_opt_error": r.error}
            row.update({k: v for k, v in d.items() if not isinstance(v, (list, tuple))})
            rows.append(row)
            if progress is not None:
                progress(i + 1, len(grid), f"alpha = {a:g}: lambda* = {r.value:.4g}, "
                         f"test = {d['test']:.6g} +- {d['test_error']:.2g}")
        params = {k: v for k, v in self.parameters(direct=bool(direct)).items() if k != "lam"}
        return ResultTable(tuple(rows), params)

    def spectrum(self, *, alpha: float, points: int = 400) -> Result:
        """The learned spectrum at ``alpha`` (THEORY 3): S_hat ~ eta ReLU(S0 + delta Z - eps I).
        Result quantity "rank" (mu_delta((eps, inf))); details: the eigenvalue grid
        ``eigenvalue``/``eigenvalue_density`` (the atom 1 - rank at 0 apart), the singular-value
        grid ``singular_value``/``singular_density``, ``atom``, ``eta``, ``delta_spec``, ``eps``,
        ``intervals`` (support intervals of mu_delta above eps: one or two bulks)."""
        from .numerics import erm_spectral, wishart

        points = SPECTRUM_POINTS.check(points)
        table = self.state_evolution(alpha=alpha)
        res = {r.quantity: r for r in table}
        if "limit" in res["q"].details:  # lam = 0 at or below alpha_interp: eta = 1
            d_spec, eps, eta = res["delta_spec"].value, res["eps"].value, 1.0
        else:
            q_hat, m_hat, s_hat = res["q_hat"].value, res["m_hat"].value, res["sigma_hat"].value
            d_spec, eps, eta = math.sqrt(q_hat) / m_hat, 2 * self.lam / m_hat, m_hat / s_hat
        ivs = [(max(a, eps), b) for a, b in wishart.support(self.kappa0, d_spec**2) if b > eps]
        top = eta * (ivs[-1][1] - eps) if ivs else 1.0
        lam_grid = np.linspace(0, top, points + 1)[1:]
        s_grid = np.linspace(0, math.sqrt(top), points + 1)[1:]
        kw = {"kappa0": self.kappa0, "delta": d_spec, "eps": eps, "eta": eta}
        return Result(
            quantity="rank", value=res["rank"].value, error=res["rank"].error,
            method="mu_kappa0 boxplus semicircle(delta^2) through the SE fixed point",
            precision=16, parameters=self.parameters(alpha=float(alpha)),
            details={"eigenvalue": lam_grid.tolist(),
                     "eigenvalue_density": erm_spectral.learned_eigenvalue_density(
                         lam_grid, **kw).tolist(),
                     "singular_value": s_grid.tolist(),
                     "singular_density": erm_spectral.learned_singular_density(
                         s_grid, **kw).tolist(),
                     "atom": 1 - res["rank"].value, "eta": eta, "delta_spec": d_spec,
                     "eps": eps, "intervals": [[eta * (a - eps), eta * (b - eps)]
                                               for a, b in ivs]})

    # ------------------------------------------------------------------ thresholds
    def threshold(self, kind: str = "interpolation", *, direct: bool = False,
                  digits: int = 30) -> Result:
        """``"interpolation"``: alpha_interp (lambda -> 0+; factorised: needs delta > 0;
        ``direct``: 1/(T^2 + T - 2), alpha_bar = 1/2, closed form for every kappa0, delta,
        beta, beta0, :func:`aim_sym.numerics.erm_direct.interpolation_threshold`); ``"perfect"``:
        noiseless perfect recovery, factorised (nuclear norm) or ``direct`` (Frobenius).
        ``value``: alpha as a decimal string; details: alpha_bar = alpha (T^2 + T - 2)/2 and its
        error, the Bayes-optimal alpha_bar for comparison, delta_bar (interpolation)."""
        from .numerics import erm_thresholds as th

        if kind not in THRESHOLD_KINDS:
            raise InputError(f"kind must be one of {', '.join(THRESHOLD_KINDS)}; got {kind!r}")
        digits = THRESHOLD_DIGITS_ERM.check(digits)
        bayes = th.perfect_recovery_threshold(kappa0=self.kappa0, tokens=self.tokens,
                                              kind="bayes", dps=digits)
        details: dict = {"kind": kind, "alpha_bar_bayes": _s(bayes.extra["alpha_bar"], digits)}
        if kind == "interpolation" and direct:
            fac = (self.tokens * self.tokens + self.tokens - 2) // 2
            with mpmath.workdps(digits + 5):
                value = mpmath.mpf(1) / (2 * fac)
            details.update(alpha_bar=_s(value * fac, digits), alpha_bar_error=0.0)
            return Result(
                quantity="alpha_interp", value=_s(value, digits), error=0.0,
                method="direct (ridge) ERM SE as lambda -> 0+: the minimum-Frobenius-norm "
                "interpolator exists for 2 alpha_bar < 1, alpha = 1/(T^2 + T - 2) (closed form, "
                "numerics.erm_direct)", precision=digits,
                parameters=self.parameters(direct=True), details=details)
        if kind == "interpolation":
            if self.delta <= 0:
                raise DomainError(NOISE, self.delta, "delta", allowed="> 0 for the "
                                  "interpolation threshold (Delta -> 0+: alpha_bar -> "
                                  "(1 + 2 kappa0 - kappa0^2)/4)")
            est = th.interpolation_threshold(kappa0=self.kappa0, Delta=self.delta,
                                             tokens=self.tokens, dps=digits)
            details.update(delta_bar=_s(est.extra["delta_bar"], digits),
                           delta_bar_error=est.extra["delta_bar_error"])
            params = self.parameters()
            name = "alpha_interp"
        else:
            est = th.perfect_recovery_threshold(kappa0=self.kappa0, tokens=self.tokens,
                                                kind="direct" if direct else "factorised",
                                                dps=digits)
            if "c" in est.extra:
                details["c"] = _s(est.extra["c"], digits)
            params = {k: v for k, v in self.parameters(direct=bool(direct)).items()
                      if k not in ("delta", "lam")}
            name = "alpha_perfect"
        details.update(alpha_bar=_s(est.extra["alpha_bar"], digits),
                       alpha_bar_error=est.extra["alpha_bar_error"])
        return Result(quantity=name, value=_s(est.value, digits), error=est.error,
                      method=est.method, precision=digits, parameters=params, details=details)


_QUANTITIES = ("q", "m", "sigma", "q_hat", "m_hat", "sigma_hat", "train", "test", "mse", "rank")
_CV_TOL = Domain(name="tol", option="--tol", low=1e-3, high=1.0, default=0.1,
                 description="width in ln lambda of the cross-validated lambda's final bracket")
LAM_RANGE_MAX = 100.0


def _orders(orders, name: str) -> tuple[int, int]:
    """(order, order_lo) of Gauss-Hermite: integers with 2 <= order_lo < order <= 40."""
    try:
        hi, lo = orders
        ok = all(isinstance(v, int) and not isinstance(v, bool) for v in (hi, lo))
    except (TypeError, ValueError):
        ok = False
    if not ok or not 2 <= lo < hi <= 40:
        raise InputError(f"{name} must be two integers (order, order_lo) with 2 <= order_lo < "
                         f"order <= 40; got {orders!r}")
    return hi, lo


def _lam_range(lam_range) -> tuple[float, float]:
    """(low, high) of a lambda search: LAM_SE_MIN <= low < high <= LAM_RANGE_MAX."""
    try:
        lo, hi = (float(v) for v in lam_range)
    except (TypeError, ValueError):
        raise InputError(f"lam_range must be two numbers (low, high); got {lam_range!r}") from None
    if not (math.isfinite(lo) and math.isfinite(hi) and LAM_SE_MIN <= lo < hi <= LAM_RANGE_MAX
            and hi / lo >= 2.0):
        raise InputError(f"lam_range must be (low, high) with {LAM_SE_MIN:g} <= low, high <= "
                         f"{LAM_RANGE_MAX:g} and high >= 2 low (below {LAM_SE_MIN:g} the SE's "
                         f"bar does not cover: docs/erm.md); got {lam_range!r}")
    return lo, hi


def _s(x, digits: int) -> str:
    """A decimal string of ``digits`` significant digits."""
    with mpmath.workdps(digits + 5):
        return mpmath.nstr(mpmath.mpf(x), digits)


__all__ = ["ERM", "KAPPA0", "NOISE", "LAM", "BETA_ERM", "BETA0", "TOKENS_ERM", "ALPHA_ERM",
           "THRESHOLD_DIGITS_ERM", "SPECTRUM_POINTS", "THRESHOLD_KINDS"]
