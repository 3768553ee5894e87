"""Finite-size AMP for the piecewise AIM channels against their state evolution (THEORY 1.1,
1.4, 1.5; check 7 of THEORY 4): hardmax at T = 2..5, sparsemax at T = 2, 3 and polyhedral
channel files.

:func:`run_piecewise_amp` runs GAMP-RIE (:func:`aim_sym.numerics.amp.run_amp`) with the channel's
AMP view (:mod:`aim_sym.numerics.amp_piecewise`) and puts beside its mean squared error and
test error the SE prediction at the same (rho, alpha), from the channel's own SE engine:

* hardmax T = 2, 3: :func:`aim_sym.numerics.hardmax_se.se_fixed_points` (mmse >= Q0/3 at T = 3)
  and, at T = 3 below Q0/3, the E_hat table (:func:`~aim_sym.numerics.hardmax_se.se_curve_tabulated`,
  rho >= 4/9), e_gen by :func:`~aim_sym.numerics.hardmax_se.generalisation_error`; T = 4, 5:
  randomised QMC (:func:`aim_sym.numerics.hardmax_qmc.se_curve`, minutes). The hardmax plug-in
  error is seeded Monte Carlo (:func:`aim_sym.numerics.amp_piecewise.plugin_error_mc`).
* sparsemax: :meth:`aim_sym.sparsemax_model.Sparsemax.state_evolution` (every fixed point with
  e_gen and the plug-in error).
* channel files: :meth:`aim_sym.models.AIM.state_evolution` (the polytope engine, ~50 s).

AMP starts from V = 1 and tracks the SE iterated from V = 1: the fixed point of largest mmse
(``se_prediction``); the Bayes-optimal one (largest free entropy) is reported beside it.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from .channels import BETA_DOMAIN, Channel
from .domains import ALPHA_AMP, DIM_AIM, MAX_ITER, RHO, RNG_SEED, SEEDS
from .numerics import amp as amp_mod
from .numerics import amp_piecewise as ap
from .numerics.records import ConvergenceError, InputError, require
from .results import Result

CHANNELS = ("hardmax", "sparsemax", "file")
#: the QMC settings of the hardmax SE at T = 4, 5 (points, scrambles), as the command line's
HARDMAX_QMC = {4: (256, 8), 5: (4096, 8)}
#: q/V reached by the T = 4, 5 hardmax curves (mmse >= Q0 / (1 + R_MAX))
HARDMAX_QMC_R_MAX = 5.0
#: samples of the hardmax plug-in error's Monte Carlo
PLUGIN_SAMPLES = 200_000


def damping_option(value) -> float | str:
    """'auto' or a damping in [0, 1) (InputError otherwise)."""
    if value == "auto":
        return value
    require(isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value) and 0 <= value < 1, "damping", "a number in [0, 1) or 'auto'",
            value)
    return float(value)


# ----------------------------------------------------------------------------- the SE side
def _tracked(fps: list[dict]) -> tuple[dict | None, dict | None]:
    """(the fixed point AMP tracks from V = 1: the largest mmse, stable ones first; the
    Bayes-optimal one) among SE rows with mmse, stable, bayes_optimal."""
    if not fps:
        return None, None
    stable = [f for f in fps if f.get("stable", True)] or fps
    tracked = max(stable, key=lambda f: f["mmse"])
    bo = next((f for f in fps if f.get("bayes_optimal")), None)
    return tracked, bo


def _hardmax_egen(T: int, rho: float, row: dict) -> dict:
    """e_gen at a T <= 3 fixed point: the rule's error + |de/dmmse| x the mmse error (one-sided
    difference, as the command line's)."""
    from .numerics import hardmax_se as hse

    Q0, v, dv = 1.0 + rho, row["mmse"], max(row["error"], 1e-7)
    e = hse.generalisation_error(T=T, q=Q0 - v, V=v)
    e2 = hse.generalisation_error(T=T, q=Q0 - v - dv, V=v + dv)
    slope = abs(e2.value - e.value) / dv
    return {"e_gen": e.value, "e_gen_error": e.error + e2.error + slope * row["error"]}


def _se_hardmax(T: int, rho: float, alpha: float) -> list[dict]:
    from .numerics import hardmax_qmc
    from .numerics import hardmax_se as hse
    from .numerics.records import bayes_optimal

    if T >= 4:
        points, scrambles = HARDMAX_QMC[T]
        rows = hardmax_qmc.se_curve(rho=rho, alphas=[alpha], T=T, r_max=HARDMAX_QMC_R_MAX,
                                    points=points, scrambles=scrambles, with_egen=True)
        return [{**r, "method": f"randomised QMC ({scrambles} x {points} points)"} for r in rows]
    t = None
    if T == 3:
        # the E_hat table (rho >= 4/9) reaches every mmse at the cost of an interpolant; its
        # Bayes-optimal row is the only one when it reports one fixed point (else the
        # deterministic rule searches mmse >= Q0/3 for the others, minutes)
        table = hse.t3_table()
        if rho >= 1 / table["s_max"] ** 2:
            t = hse.se_curve_tabulated(rho=rho, alphas=[alpha], table=table)[0]
            if t["n_fixed_points"] == 1:
                fps = [{k: t[k] for k in ("mmse", "error", "q", "phi", "stable")}
                       | {"bayes_optimal": True, "method": "E_hat table"}]
                fps[0].update(_hardmax_egen(T, rho, fps[0]))
                return fps
    try:
        fps = [{**f, "method": "deterministic outer rule"}
               for f in hse.se_fixed_points(T=T, alpha=alpha, rho=rho)]
    except ConvergenceError:
        fps = []
    if t is not None and t["mmse"] < hse.min_mmse(3, rho):
        fps.append({k: t[k] for k in ("mmse", "error", "q", "phi", "stable")}
                   | {"method": "E_hat table"})
        best = bayes_optimal(fps)
        for f in fps:
            f["bayes_optimal"] = f is best
    for f in fps:
        f.update(_hardmax_egen(T, rho, f))
    return fps


def _se_rows(channel: str, view, *, T: int, beta, model, rho: float, alpha: float) -> list[dict]:
    if channel == "hardmax":
        return _se_hardmax(T, rho, alpha)
    if channel == "sparsemax":
        from .sparsemax_model import Sparsemax

        return list(Sparsemax(beta=beta, rho=rho, tokens=T).state_evolution(
            alpha=alpha).details["fixed_points"])
    return [dict(f) for f in model.state_evolution(alpha=alpha).details["fixed_points"]]


def se_prediction(channel: str, view, *, T: int, beta, model, rho: float,
                  alpha: float) -> dict:
    """The SE side at (rho, alpha) (module docstring): mmse (the tracked fixed point), error,
    bayes_optimal_mmse, bayes_optimal_error, n_fixed_points, e_gen, e_gen_error, e_gen_plugin,
    e_gen_plugin_error (the hardmax plug-in by Monte Carlo) and the fixed-point rows."""
    fps = _se_rows(channel, view, T=T, beta=beta, model=model, rho=rho, alpha=alpha)
    tracked, bo = _tracked(fps)
    out = {"mmse": None, "error": None, "bayes_optimal_mmse": None, "bayes_optimal_error": None,
           "n_fixed_points": len(fps), "e_gen": None, "e_gen_error": None,
           "e_gen_plugin": None, "e_gen_plugin_error": None, "fixed_points": fps}
    if tracked is None:
        return out
    out.update(mmse=tracked["mmse"], error=tracked["error"],
               e_gen=tracked.get("e_gen"), e_gen_error=tracked.get("e_gen_error"),
               e_gen_plugin=tracked.get("e_gen_plugin"),
               e_gen_plugin_error=tracked.get("e_gen_plugin_error"))
    if bo is not None:
        out.update(bayes_optimal_mmse=bo["mmse"], bayes_optimal_error=bo["error"])
    if out["e_gen_plugin"] is None and view.draw_y is not None and channel == "hardmax":
        V = tracked["mmse"]
        est = ap.plugin_error_mc(view, q=1.0 + rho - V, V=V, samples=PLUGIN_SAMPLES)
        out.update(e_gen_plugin=est.value, e_gen_plugin_error=est.error)
    return out


# ----------------------------------------------------------------------------- the view
def _file_model(polyhedral, rho: float, tokens):
    from .models import AIM

    if isinstance(polyhedral, AIM):
        model = AIM(polyhedral.channel, rho=rho)
    elif isinstance(polyhedral, Channel):
        model = AIM(polyhedral, rho=rho)
    else:
        raise InputError("polyhedral must be a channel file's channel (aim_sym.channel_file."
                         f"from_file) or an AIM on it; got {type(polyhedral).__name__}")
    if model.polyhedral is None:
        raise InputError(f"channel {model.channel.name} is not polyhedral (no term of >= 3 "
                         "half-spaces): its AMP is AIM(channel).amp")
    if tokens is not None and tokens != model.channel.tokens:
        raise InputError(f"tokens must be {model.channel.tokens} (the channel's) for this "
                         f"channel file; got {tokens!r}")
    return model


def amp_view(*, channel: str, tokens=None, beta=None, polyhedral=None, rho: float = 0.5):
    """(view, T, beta, model): the channel's :class:`aim_sym.numerics.amp_piecewise.PiecewiseAmp`
    with its token count, inverse temperature (sparsemax) and AIM model (channel files)."""
    require(channel in CHANNELS, "channel", "one of " + ", ".join(CHANNELS), channel)
    if channel != "sparsemax" and beta is not None:
        raise InputError(f"beta must be omitted for channel {channel}; got {beta!r}")
    if channel != "file" and polyhedral is not None:
        raise InputError(f"polyhedral must be omitted for channel {channel}")
    if channel == "hardmax":
        return ap.hardmax_amp(T=tokens), tokens, None, None
    if channel == "sparsemax":
        T = 2 if tokens is None else tokens
        beta = BETA_DOMAIN.check(1.0 if beta is None else beta)
        pieces = None
        if T == 2:
            from .sparsemax import compile_sparsemax

            pieces = compile_sparsemax("numpy")
        return ap.sparsemax_amp(T=T, beta=beta, pieces=pieces), T, beta, None
    if polyhedral is None:
        raise InputError("polyhedral must be given for channel file (aim_sym.channel_file."
                         "from_file(path, tokens=T))")
    model = _file_model(polyhedral, rho, tokens)
    spec = model.egen_channel
    readout = spec.readout if spec is not None and spec.kind == "discrete" else None
    return ap.polyhedral_amp(model.polyhedral, readout=readout), model.channel.tokens, None, model


# ----------------------------------------------------------------------------- the run
def run_piecewise_amp(*, channel: str, tokens: int | None = None, beta: float | None = None,
                      polyhedral=None, rho: float = 0.5, alpha: float, dim: int = 100,
                      seeds: int = 4, max_iter: int = 100, damping: float | str = "auto",
                      rng_seed: int = 0, progress: Callable | None = None,
                      out: str | None = None, se: bool = True, n_test: int = 2000,
                      draws: int = 32) -> Result:
    """GAMP-RIE at dimension ``dim`` over ``seeds`` instances of a piecewise channel against
    its SE (THEORY 1.1, 1.5; check 7 of THEORY 4).

    ``channel``: "hardmax" (``tokens`` 2..5), "sparsemax" (``tokens`` 2 or 3, default 2;
    ``beta`` > 0, default 1) or "file" (``polyhedral``: a polyhedral channel file's channel,
    :func:`aim_sym.channel_file.from_file`, or an AIM on it; events of rank <= 3).
    Quantity "mse": the mean final ||S_hat - S||_F^2 / D, error = standard error over seeds.
    Details as :meth:`aim_sym.models.AIM.amp`: se_prediction (the SE fixed point AMP tracks from
    V = 1), se (its error, the Bayes-optimal fixed point, every fixed point), test_error
    (Bayes-optimal predictor at AMP's omega, V) and test_error_plugin with standard errors,
    e_gen_se, e_gen_se_plugin with errors (at se_prediction), per_seed, per_iteration,
    converged, dampings, interrupted, dg_form. ``se=False`` skips the SE (details None)."""
    alpha = ALPHA_AMP.check(alpha)
    rho = RHO.check(rho)
    dim, seeds = DIM_AIM.check(dim), SEEDS.check(seeds)
    max_iter, rng_seed = MAX_ITER.check(max_iter), RNG_SEED.check(rng_seed)
    damping = damping_option(damping)
    view, T, beta, model = amp_view(channel=channel, tokens=tokens, beta=beta,
                                    polyhedral=polyhedral, rho=rho)
    r = amp_mod.run_amp(fns=view, cc=None, se=False, alpha=alpha, rho=rho, dim=dim, seeds=seeds,
                        max_iter=max_iter, damping=damping, rng_seed=rng_seed,
                        progress=progress, out=out, draw_y=view.draw_y, n_test=n_test,
                        draws=draws)
    pred = (se_prediction(channel, view, T=T, beta=beta, model=model, rho=rho, alpha=alpha)
            if se else None)
    details = {"dim": dim, "se_prediction": pred["mmse"] if pred else None,
               "se": pred, "per_seed": r["per_seed"], "per_iteration": r["per_iteration"],
               "converged": r.get("converged"), "reasons": r.get("reasons"),
               "dampings": r.get("dampings"), "interrupted": r.get("interrupted", False),
               "dg_form": view.dg_form}
    if view.draw_y is not None:
        details.update({k: r.get(k) for k in ("test_error", "test_error_stderr",
                                              "test_error_plugin", "test_error_plugin_stderr")})
        details.update({"e_gen_se": pred["e_gen"] if pred else None,
                        "e_gen_se_error": pred["e_gen_error"] if pred else None,
                        "e_gen_se_plugin": pred["e_gen_plugin"] if pred else None,
                        "e_gen_se_plugin_error": pred["e_gen_plugin_error"] if pred else None})
    params = {"model": "aim", "channel": view.name if channel == "file" else channel,
              "tokens": T, "rho": rho, "alpha": alpha, "dim": dim, "seeds": seeds,
              "rng_seed": rng_seed, **({"beta": beta} if beta is not None else {})}
    return Result(quantity="mse", value=r["mean"], error=r["stderr"],
                  method=f"GAMP-RIE at D = {dim}, {seeds} seeds, g_out from the "
                  f"{view.name} engine (dg: {view.dg_form}); error = standard error",
                  precision=16, parameters=params, details=details)


__all__ = ["run_piecewise_amp", "amp_view", "se_prediction", "CHANNELS"]
