"""The AIM with a noisy polyhedral channel as a model object (THEORY 1.1, 1.2, 1.4, 1.5;
docs/polyhedral.md, "Noisy outputs"): ``NoisyPolyhedralAIM(from_file("noisy_relu.py"),
rho=0.5).state_evolution(alpha=0.5)``.

P(y | h) = sum_k 1[A_k h <= b_k] N(y; L_k h + l_k, Delta) with y continuous (a channel file
built with :func:`aim_sym.noisy_polyhedral.noisy_piecewise`). The same methods as
:class:`aim_sym.models.AIM` where they apply: ``state_evolution``, ``curve``, ``threshold``
("weak", small width), ``check``, ``derive``; ``amp`` and the small-width SE are refused.
Numbers: :mod:`aim_sym.numerics.noisy_polyhedral_se`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from .domains import ALPHA, RHO, THRESHOLD_DIGITS, check_grid
from .noisy_polyhedral import NoisyPiecewiseChannel, noisy_arrays, noisy_sheet
from .numerics.records import ConvergenceError, InputError
from .results import Result, ResultTable

#: what the command line and the API serve for a noisy polyhedral channel
SERVED = "se, curve, threshold weak --small-width, check, derive and amp"
#: Nishimori tolerance of :meth:`NoisyPolyhedralAIM.check`: |sample mean| <= NISHIMORI_SE
#: standard errors + the engine's bars
NISHIMORI_SE = 4.0


@dataclass(frozen=True)
class NoisyPolyhedralAIM:
    """The AIM (THEORY 1) whose channel is noisy polyhedral, at width ratio ``rho``."""

    channel: NoisyPiecewiseChannel
    rho: float = 0.5

    def __post_init__(self) -> None:
        if not isinstance(self.channel, NoisyPiecewiseChannel):
            raise InputError("channel must be a noisy polyhedral channel "
                             "(aim_sym.noisy_polyhedral.noisy_piecewise); got "
                             f"{type(self.channel).__name__}")
        object.__setattr__(self, "rho", RHO.check(self.rho))

    @property
    def values(self) -> dict:
        """The bound parameter values (symbol name -> value)."""
        return {s.name: v for s, v in self.channel.params}

    @cached_property
    def output(self):
        """The numbers of the channel (:class:`aim_sym.numerics.noisy_polyhedral_se.
        NoisyPolyhedralOutput`)."""
        from .numerics import noisy_polyhedral_se as nps

        return nps.noisy_output(noisy_arrays(self.channel, self.values))

    @property
    def compiled(self):
        raise InputError(f"channel {self.channel.name} is noisy polyhedral (THEORY 1.4): {SERVED} "
                         "serve it; amp and the small-width SE do not")

    def parameters(self, **extra) -> dict:
        return {"model": "aim", "channel": self.channel.name, "tokens": self.channel.tokens,
                "rho": self.rho, **{k: float(v) for k, v in self.values.items()}, **extra}

    # ------------------------------------------------------------------ state evolution
    def _egen(self, f: dict) -> dict:
        from .numerics import noisy_polyhedral_se as nps

        e = nps.generalisation_error_noisy(self.output, q=f["q"], V=f["mmse"],
                                           V_error=f["error"])
        return {"e_gen": e.value, "e_gen_error": e.error, "e_gen_plugin": e.extra["plugin"],
                "e_gen_plugin_error": e.extra["plugin_error"],
                "e_gen_method": e.method + "; |y - y_hat|^2 summed over the output vector as "
                "the channel file writes it; plug-in: " + e.extra["plugin_method"]}

    def state_evolution(self, *, alpha: float, digits: int | None = None,
                        tol: float | None = None) -> Result:
        """The SE fixed points with V in [0.05, 1] (THEORY 1.1), the Bayes-optimal one (largest
        phi among the stable) as the value, each with e_gen and the plug-in error (THEORY 1.5).
        ``digits`` and ``tol`` are refused (randomised QMC, about 1e-3 relative)."""
        from .numerics import noisy_polyhedral_se as nps

        if digits is not None:
            raise InputError(f"digits must be omitted for channel {self.channel.name} (its SE is "
                             f"randomised QMC, about 1e-3); got {digits!r}")
        if tol is not None and tol != 1e-13:
            raise InputError(f"tol must be omitted for channel {self.channel.name} (its error is "
                             f"the QMC's); got {tol!r}")
        alpha = ALPHA.check(alpha)
        if alpha == 0:
            fps = [{"q": self.rho, "q_hat": 0.0, "mmse": 1.0, "error": 0.0, "phi": 0.0,
                    "slope": 0.0, "stable": True, "bayes_optimal": True}]
        else:
            fps = nps.fixed_points_noisy(self.output, alpha=alpha, rho=self.rho)
        bo = next(f for f in fps if f["bayes_optimal"])
        egens = [self._egen(f) if alpha > 0 else
                 dict.fromkeys(("e_gen", "e_gen_error", "e_gen_plugin", "e_gen_plugin_error",
                                "e_gen_method")) for f in fps]
        rows = [{**{k: f[k] for k in ("q", "q_hat", "mmse", "error", "phi", "slope", "stable",
                                      "bayes_optimal")},
                 **{k: v for k, v in e.items() if k != "e_gen_method"}}
                for f, e in zip(fps, egens)]
        i = fps.index(bo)
        details = {"q": bo["q"], "q_hat": bo["q_hat"], "phi": bo["phi"], **egens[i],
                   "fixed_points": rows}
        return Result(quantity="mmse", value=bo["mmse"], error=bo["error"],
                      method="fixed points with V in [0.05, 1] (scan, Brent's method, one Newton "
                      "step on a finer rule): E(q, V) by " + bo.get("rule", "no rule (alpha = 0)")
                      + " and the Gaussian polytope engine, Wishart prior quadrature; error = the "
                      "Newton step + the propagated bars", precision=16,
                      parameters=self.parameters(alpha=alpha), details=details)

    def small_width_state_evolution(self, *, alpha_bar: float) -> Result:
        raise InputError(f"small_width must be omitted for se with channel {self.channel.name} "
                         f"({SERVED} serve it)")

    def curve(self, *, alphas, tol: float | None = None, method: str = "traced",
              progress=None, generalisation: bool = True) -> ResultTable:
        """One state evolution per alpha (about 30-60 s each on one core for ReLU-like
        channels); an alpha without a fixed point in V in [0.05, 1] gets a row with a note."""
        grid = check_grid(alphas, ALPHA, label="alphas")
        if method != "traced":
            raise InputError(f"method must be omitted for channel {self.channel.name} (each alpha "
                             f"is solved on its own); got {method!r}")
        rows = []
        for k, a in enumerate(grid):
            if progress:
                progress(k, len(grid), f"alpha = {a:g}")
            try:
                r = self.state_evolution(alpha=float(a), tol=tol)
            except ConvergenceError as e:
                rows.append({"alpha": float(a), "note": f"no fixed point resolved: {e}"})
                continue
            d = r.details
            rows.append({"alpha": float(a), "q": d["q"], "q_hat": d["q_hat"], "mmse": r.value,
                         "phi": d["phi"], "error": r.error,
                         "fixed_points": len(d["fixed_points"]),
                         **({k: d[k] for k in ("e_gen", "e_gen_error", "e_gen_plugin",
                                               "e_gen_plugin_error")} if generalisation else {})})
        if progress:
            progress(len(grid), len(grid), "done")
        return ResultTable(tuple(rows), self.parameters())

    # ------------------------------------------------------------------ thresholds, checks
    def threshold(self, kind: str = "weak", *, small_width: bool = False, digits: int = 16,
                  certified: bool = False) -> Result:
        """alpha_bar_c = 1 / (2 E(0, 1)) (THEORY 1.2), E by the tensor trapezoid rule over y."""
        from .numerics import noisy_polyhedral_se as nps

        if kind != "weak":
            raise InputError(f"kind must be weak for channel {self.channel.name}; got {kind!r}")
        if not small_width:
            raise InputError("small_width must be True for a weak-recovery threshold of the AIM "
                             "(at finite rho q > rho for every alpha > 0); got False")
        if certified:
            raise InputError("certified must be False for a noisy polyhedral channel (its "
                             "threshold is a quadrature); got True")
        digits = min(THRESHOLD_DIGITS.check(digits), 15)
        est = nps.weak_threshold_noisy(self.output)
        params = {k: v for k, v in self.parameters().items() if k != "rho"}
        return Result(quantity="alpha_bar_c", value=f"{est.value:.{digits}g}", error=est.error,
                      method=est.method, precision=digits, parameters=params,
                      details={"kind": "weak (small width)", "digits": digits,
                               "closed_form": "1 / (2 E(0, 1)), E = int dy |grad Z_out|_C^2 / "
                               "Z_out at omega = 0 (an integral)", "sympy": None,
                               "value_float": est.value})

    def check(self) -> ResultTable:
        """Nishimori identities E_y g_out = 0 and E_y (g g^T + dg) = 0 (THEORY 1.2) at omega = 0
        (V = 1) and at two seeded omega (V = 0.7), y drawn from the channel (2000 seeded draws
        each): each entry within :data:`NISHIMORI_SE` standard errors + the engine's bars."""
        import numpy as np

        from .numerics import noisy_polyhedral_se as nps

        out = self.output
        rng = np.random.default_rng(2026)
        c = np.sqrt(np.asarray(out.weights, dtype=float))
        cases = [(np.zeros(out.dim), 1.0)] + [(0.6 * rng.standard_normal(out.dim) * c, 0.7)
                                              for _ in range(2)]
        rows = []
        for j, (om, V) in enumerate(cases):
            r = nps.check_nishimori(out, omega=om, V=V, samples=2000, seed=j)
            for what, mean, se, bar in (("E g_out = 0", r["g_mean"], r["g_se"], r["g_error"]),
                                        ("E (g g^T + dg_out) = 0", r["second_mean"],
                                         r["second_se"], r["g_error"] + r["dg_error"])):
                mean, se = np.abs(np.asarray(mean)), np.asarray(se)
                z = float(np.max((mean - bar) / np.maximum(se, 1e-300)))
                rows.append({"name": f"Nishimori {what} at omega #{j} (V = {V:g}, 2000 seeded y)",
                             "passed": bool(np.all(mean <= NISHIMORI_SE * se + bar)),
                             "detail": f"largest |mean| {float(mean.max()):.2e}, at most "
                                       f"{max(z, 0.0):.2f} standard errors beyond the bars "
                                       f"(tolerance {NISHIMORI_SE:g})"})
        rows += self._finite_differences()
        return ResultTable(tuple(rows), self.parameters())

    def _finite_differences(self, *, step: float = 1e-4, tol: float = 1e-6) -> list[dict]:
        """g_out and dg_out against central differences of log Z_out and g_out in each entry of
        omega (step ``step``), at 3 seeded (omega, y) with y drawn from the channel, V = 0.7:
        relative to 1 + |value|, within ``tol`` + the engine's bars."""
        import numpy as np

        from .numerics import noisy_polyhedral_se as nps

        out, V = self.output, 0.7
        rng = np.random.default_rng(7)
        c = np.sqrt(np.asarray(out.weights, dtype=float))
        om = 0.6 * rng.standard_normal((3, out.dim)) * c
        h = om + np.sqrt(V) * rng.standard_normal((3, out.dim)) * c
        y = nps.clean_output(out, h) + rng.standard_normal((3, out.out_dim)) @ np.linalg.cholesky(
            np.asarray(out.Delta, dtype=float)).T
        z = nps.z_out(out, omega=om, y=y, V=V, order=2)
        worst_g = worst_dg = 0.0
        bar_g = float(z.g_error.max())
        bar_dg = float(z.dg_error.max())
        for k in range(out.dim):
            e = np.zeros(out.dim)
            e[k] = step
            up = nps.z_out(out, omega=om + e, y=y, V=V, order=1)
            dn = nps.z_out(out, omega=om - e, y=y, V=V, order=1)
            fd_g = (up.log_Z - dn.log_Z)[:, 0] / (2 * step)
            fd_dg = (up.g - dn.g)[:, 0] / (2 * step)
            g, dg = z.g[:, 0, k], z.dg[:, 0, :, k]
            worst_g = max(worst_g, float(np.max(np.abs(fd_g - g) / (1 + np.abs(g)))))
            worst_dg = max(worst_dg, float(np.max(np.abs(fd_dg - dg) / (1 + np.abs(dg)))))
        return [{"name": "g_out = d log Z_out / d omega (central differences, 3 seeded (omega, y))",
                 "passed": bool(worst_g <= tol + bar_g),
                 "detail": f"largest relative deviation {worst_g:.1e} (tolerance {tol:g} + bar "
                           f"{bar_g:.1e})"},
                {"name": "dg_out = d g_out / d omega (central differences, 3 seeded (omega, y))",
                 "passed": bool(worst_dg <= tol + bar_dg),
                 "detail": f"largest relative deviation {worst_dg:.1e} (tolerance {tol:g} + bar "
                           f"{bar_dg:.1e})"}]

    def amp(self, *, alpha: float, dim: int = 100, seeds: int = 4, max_iter: int = 100,
            damping: float | str = "auto", rng_seed: int = 0, progress=None,
            out: str | None = None) -> Result:
        """GAMP-RIE against the SE with AMP's test error beside e_gen
        (:func:`aim_sym.noisy_piecewise_amp.run_noisy_piecewise_amp`; pieces whose rows are
        closed forms only, docs/amp_piecewise.md)."""
        from .noisy_piecewise_amp import run_noisy_piecewise_amp

        return run_noisy_piecewise_amp(self, alpha=alpha, dim=dim, seeds=seeds,
                                       max_iter=max_iter, damping=damping, rng_seed=rng_seed,
                                       progress=progress, out=out)

    def expressions(self) -> dict:
        """Each piece's conditions (forms > 0) and output mean as sympy, and the noise."""
        import sympy as sp

        from .symbols import h_symbols

        hs = sp.Matrix(h_symbols(self.channel.tokens))
        out = {}
        for k, (forms, offsets, L, lv) in enumerate(self.channel.pieces):
            out[f"piece {k}: conditions"] = sp.And(*[sp.Matrix([f]).dot(hs) + o > 0
                                                     for f, o in zip(forms, offsets)])
            out[f"piece {k}: mean"] = sp.Matrix([sp.Matrix([r]).dot(hs) + o
                                                 for r, o in zip(L, lv)])
        out["Delta"] = self.channel.noise
        return out

    def derive(self, format: str = "markdown") -> str:
        """The channel's pieces, noise and what is an integral (markdown only)."""
        if format != "markdown":
            raise InputError(f"format must be markdown for a noisy polyhedral channel (its Z_out "
                             f"is an integral); got {format!r}")
        return noisy_sheet(self.channel)
