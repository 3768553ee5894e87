"""Sparsemax attention in the AIM as a model object (THEORY 1.1, 1.2, 1.4, 1.5;
docs/sparsemax.md): ``Sparsemax(beta=2.0, rho=0.5).state_evolution(alpha=0.3)``.

y_a. = sparsemax(beta h_a.) row-wise. Unlike softmax its SE depends on beta; it runs from
softmax (beta -> 0) to hardmax (beta -> infinity). T = 2: the SE (every fixed point, phi, the
Bayes-optimal one flagged, e_gen and the plug-in error), curves, the identity checks and the
small-width threshold to many digits. T = 3: the same SE quantities by seeded Monte Carlo with
common random numbers (:mod:`aim_sym.numerics.sparsemax_t3_se`, about 1e-3 relative), the
small-width threshold by randomised QMC, the identity checks and the equation sheet.
Numbers: :mod:`aim_sym.numerics.sparsemax`, :mod:`aim_sym.numerics.sparsemax_t3`;
derivations: :mod:`aim_sym.sparsemax`, :mod:`aim_sym.sparsemax_pieces`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from .channels import BETA_DOMAIN
from .domains import ALPHA, RHO, check_grid
from .numerics.records import InputError
from .results import Result, ResultTable

#: what each number of tokens serves
SERVED = {2: "state_evolution, curve, check, threshold, derive",
          3: "state_evolution, curve (seeded Monte Carlo, about 1e-3), threshold (small width), "
             "check and derive"}


@dataclass(frozen=True, kw_only=True)
class Sparsemax:
    """The AIM with sparsemax attention at inverse temperature ``beta``, width ratio ``rho``
    and ``tokens`` = 2 or 3 (see :data:`SERVED`). Frozen; validated when built."""

    beta: float = 1.0
    rho: float = 0.5
    tokens: int = 2

    def __post_init__(self) -> None:
        object.__setattr__(self, "beta", BETA_DOMAIN.check(self.beta))
        object.__setattr__(self, "rho", RHO.check(self.rho))
        if self.tokens not in SERVED:
            raise InputError(f"tokens must be 2 or 3 for sparsemax; got {self.tokens!r}")

    def parameters(self, **extra) -> dict:
        return {"model": "aim", "channel": "sparsemax", "tokens": self.tokens,
                "beta": self.beta, "rho": self.rho, **extra}

    @cached_property
    def compiled(self):
        """The T = 2 pieces lambdified for numpy (:func:`aim_sym.sparsemax.compile_sparsemax`)."""
        from .sparsemax import compile_sparsemax

        return compile_sparsemax("numpy")

    def state_evolution(self, *, alpha: float) -> Result:
        """The Bayes-optimal SE fixed point at ``alpha`` (T = 2 or 3): mmse with q, q_hat, phi,
        e_gen, e_gen_error, e_gen_plugin, e_gen_plugin_error and all ``fixed_points`` in
        details (each with ``stable`` and ``bayes_optimal``: the stable one of largest phi,
        perfect recovery for alpha >= alpha_PR)."""
        alpha = ALPHA.with_(low_open=True).check(alpha)
        fps = self._fixed_points(alpha)
        best = next((f for f in fps if f["bayes_optimal"]), None)
        keys = ("q", "q_hat", "phi", "e_gen", "e_gen_error", "e_gen_plugin",
                "e_gen_plugin_error")
        details = {**({k: best.get(k) for k in keys} if best else {}), "fixed_points": fps}
        if best is None:
            details["note"] = "no fixed point can be flagged Bayes-optimal (see fixed_points)"
        return Result(quantity="mmse", value=None if best is None else best["mmse"],
                      error=None if best is None else best["error"],
                      method=(best or fps[0])["method"], precision=16,
                      parameters=self.parameters(alpha=alpha), details=details)

    def _fixed_points(self, alpha: float) -> list[dict]:
        """Every SE fixed point at ``alpha``: T = 2 by the derived pieces' quadrature, T = 3 by
        seeded Monte Carlo with common random numbers (bars: 3 standard errors, propagated)."""
        if self.tokens == 3:
            from .numerics import sparsemax_t3_se as s3

            return s3.se_fixed_points_t3(alpha=alpha, rho=self.rho, beta=self.beta)
        from .numerics import sparsemax as smx

        return smx.se_fixed_points(self.compiled, alpha=alpha, rho=self.rho, beta=self.beta)

    def curve(self, *, alphas, progress=None) -> ResultTable:
        """The Bayes-optimal fixed point at every alpha of the grid: rows alpha, mmse,
        mmse_error, q, phi, e_gen (+ error), e_gen_plugin (+ error), bayes_optimal,
        fixed_points (how many), all_mmse, method."""
        grid = [float(a) for a in check_grid(alphas, ALPHA.with_(low_open=True),
                                             label="alphas")]
        if self.tokens == 3:
            from .numerics import sparsemax_t3_se as s3

            def note(msg: str) -> None:
                if progress is not None:
                    progress(0, len(grid), msg)

            per_alpha = [r["fixed_points"] for r in s3.se_curve_t3(
                alphas=grid, rho=self.rho, beta=self.beta, progress=note)]
        else:
            per_alpha = None
        rows = []
        for k, a in enumerate(grid):
            if progress is not None:
                progress(k, len(grid), f"alpha = {a:g}")
            fps = per_alpha[k] if per_alpha is not None else self._fixed_points(a)
            best = next((f for f in fps if f["bayes_optimal"]),
                        min(fps, key=lambda f: f["mmse"]))
            rows.append({"alpha": a, "mmse": best["mmse"], "mmse_error": best["error"],
                         "q": best["q"], "phi": best.get("phi"), "e_gen": best["e_gen"],
                         "e_gen_error": best["e_gen_error"],
                         "e_gen_plugin": best["e_gen_plugin"],
                         "e_gen_plugin_error": best["e_gen_plugin_error"],
                         "bayes_optimal": best["bayes_optimal"], "fixed_points": len(fps),
                         "all_mmse": ";".join(f"{f['mmse']:.10g}" for f in fps),
                         "method": best["method"]})
        return ResultTable(tuple(rows), self.parameters())

    def check(self) -> ResultTable:
        """The identity checks. T = 2: normalisation and Nishimori at three omegas, g_out and
        dg_out against mpmath finite differences at 40 digits. T = 3: g_out and dg_out against
        central differences, Nishimori by seeded Monte Carlo, and both against the Gaussian
        polytope engine on the pieces derived by :mod:`aim_sym.sparsemax_pieces`."""
        if self.tokens == 3:
            from .numerics import sparsemax_t3
            from .sparsemax_pieces import piece_arrays

            rows = sparsemax_t3.run_checks(beta=self.beta,
                                           pieces=piece_arrays(3, beta_value=self.beta))
            return ResultTable(tuple(rows), self.parameters())
        from .numerics import sparsemax as smx
        from .sparsemax import compile_sparsemax

        rows = smx.run_checks(self.compiled, compile_sparsemax("mpmath"), beta=self.beta)
        return ResultTable(tuple(rows), self.parameters())

    def threshold(self, kind: str = "weak", *, small_width: bool = True,
                  digits: int = 15) -> Result:
        """alpha_bar_c at small width (``kind="weak"``, ``small_width=True``): T = 2 to
        ``digits`` digits (mpmath beyond 15), T = 3 by randomised QMC (about 4 digits)."""
        from .thresholds import sparsemax_small_width_weak

        if kind != "weak" or not small_width:
            raise InputError("kind must be 'weak' with small_width=True for sparsemax (its "
                             f"only threshold); got kind={kind!r}, small_width={small_width}")
        return sparsemax_small_width_weak(beta=self.beta, digits=digits, tokens=self.tokens)

    def derive(self) -> str:
        """The equation sheet (markdown): T = 2 closed forms per piece, T = 3 the pieces."""
        from .sheets import strip_canonical
        from .sparsemax_sheet import sparsemax_sheet

        return strip_canonical(sparsemax_sheet(self.tokens))


__all__ = ["Sparsemax", "SERVED"]
