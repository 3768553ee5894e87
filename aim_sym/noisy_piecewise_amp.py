"""Finite-size AMP for noisy polyhedral channel files against their state evolution
(THEORY 1.1, 1.4, 1.5; check 7 of THEORY 4).

:func:`run_noisy_piecewise_amp` runs GAMP-RIE (:func:`aim_sym.numerics.amp.run_amp`) with the
channel's AMP view (:mod:`aim_sym.numerics.amp_noisy_piecewise`: exact g_out and dg_out by
:func:`aim_sym.numerics.noisy_polyhedral_se.z_out`) and puts beside its mean squared error and
test error the SE at the same (rho, alpha) from
:meth:`aim_sym.noisy_polyhedral_model.NoisyPolyhedralAIM.state_evolution` (randomised QMC,
~20-60 s per alpha for ReLU-like channels). AMP starts from V = 1 and tracks the SE iterated
from V = 1: the stable fixed point of largest mmse (``se_prediction``); the Bayes-optimal one
(largest phi) is reported beside it.

The test error is scored with the noiseless output f(h) and tr Delta added (module docstring
of :mod:`aim_sym.numerics.amp_noisy_piecewise`): the same expectation as scoring the noisy y
for the Bayes-optimal predictor, and the SE's plug-in error E|y - f(omega)|^2 for the plug-in.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from .domains import ALPHA_AMP, DIM_AIM, MAX_ITER, RNG_SEED, SEEDS
from .numerics import amp as amp_mod
from .numerics import amp_noisy_piecewise as anp
from .numerics.records import ConvergenceError, InputError, atomic_write, require
from .piecewise_amp import damping_option
from .results import Result

#: the test-error keys of run_amp that get tr Delta added
_TEST_KEYS = ("test_error", "test_error_plugin")


def amp_view(model) -> anp.NoisyPiecewiseAmp:
    """The AMP view (:func:`aim_sym.numerics.amp_noisy_piecewise.noisy_piecewise_amp`) of a
    noisy polyhedral model's channel at its parameter values."""
    if not (hasattr(model, "output") and hasattr(model, "state_evolution")
            and type(model).__name__ == "NoisyPolyhedralAIM"):
        raise InputError("model must be a NoisyPolyhedralAIM (a noisy polyhedral channel file, "
                         f"aim_sym.noisy_polyhedral.noisy_piecewise); got {type(model).__name__}")
    return anp.noisy_piecewise_amp(model.output)


def se_prediction(model, *, alpha: float) -> dict:
    """The SE side at (model.rho, alpha): mmse and error of the fixed point AMP tracks (the
    stable one of largest mmse), bayes_optimal_mmse, bayes_optimal_error, n_fixed_points, e_gen,
    e_gen_error, e_gen_plugin, e_gen_plugin_error (at the tracked point) and the fixed-point
    rows; ``note`` when no fixed point is resolved in V in [0.05, 1] (then the values are None)."""
    out = {"mmse": None, "error": None, "bayes_optimal_mmse": None, "bayes_optimal_error": None,
           "n_fixed_points": 0, "e_gen": None, "e_gen_error": None, "e_gen_plugin": None,
           "e_gen_plugin_error": None, "fixed_points": []}
    try:
        fps = [dict(f) for f in model.state_evolution(alpha=alpha).details["fixed_points"]]
    except ConvergenceError as e:
        return dict(out, note=f"no SE fixed point resolved: {e}")
    stable = [f for f in fps if f.get("stable", True)] or fps
    tracked = max(stable, key=lambda f: f["mmse"])
    bo = next((f for f in fps if f.get("bayes_optimal")), tracked)
    out.update(mmse=tracked["mmse"], error=tracked["error"], bayes_optimal_mmse=bo["mmse"],
               bayes_optimal_error=bo["error"], n_fixed_points=len(fps), fixed_points=fps,
               **{k: tracked.get(k) for k in ("e_gen", "e_gen_error", "e_gen_plugin",
                                              "e_gen_plugin_error")})
    return out


def run_noisy_piecewise_amp(model, *, alpha: float, dim: int = 100,
                            seeds: int = 4, max_iter: int = 100, damping: float | str = "auto",
                            rng_seed: int = 0, progress: Callable | None = None,
                            out: str | None = None, se: bool = True, n_test: int = 2000,
                            draws: int = 32) -> Result:
    """GAMP-RIE at dimension ``dim`` over ``seeds`` instances of a noisy polyhedral channel file
    (``model``: :class:`aim_sym.noisy_polyhedral_model.NoisyPolyhedralAIM`, its rho) against its
    SE (THEORY 1.1, 1.5; check 7 of THEORY 4).

    Quantity "mse": the mean final ||S_hat - S||_F^2 / D, error = standard error over seeds.
    Details as :func:`aim_sym.piecewise_amp.run_piecewise_amp`: se_prediction (the SE fixed point
    AMP tracks from V = 1), se (its error, the Bayes-optimal fixed point, every fixed point),
    test_error (Bayes-optimal predictor at AMP's omega, V) and test_error_plugin with standard
    errors (noiseless output scored, tr Delta added: module docstring), e_gen_se,
    e_gen_se_plugin with errors (at se_prediction), per_seed, per_iteration, converged, reasons,
    dampings, interrupted, dg_form ("exact"). ``se=False`` skips the SE (its details None).
    ``out``: run_amp's JSON after every seed (test errors of f(h) alone, tr Delta not yet added),
    rewritten at the end with the test errors as reported here and noise_trace."""
    view = amp_view(model)
    alpha = ALPHA_AMP.check(alpha)
    dim, seeds = DIM_AIM.check(dim), SEEDS.check(seeds)
    max_iter, rng_seed = MAX_ITER.check(max_iter), RNG_SEED.check(rng_seed)
    damping = damping_option(damping)
    require(isinstance(n_test, int) and not isinstance(n_test, bool) and n_test >= 10, "n_test",
            "an integer >= 10", n_test)
    require(isinstance(draws, int) and not isinstance(draws, bool) and draws >= 2, "draws",
            "an integer >= 2", draws)
    r = amp_mod.run_amp(fns=view, cc=None, se=False, alpha=alpha, rho=model.rho, dim=dim,
                        seeds=seeds, max_iter=max_iter, damping=damping, rng_seed=rng_seed,
                        progress=progress, out=out, draw_y=view.clean_y, n_test=n_test,
                        draws=draws)
    tests = {k: (None if r.get(k) is None else r[k] + view.noise_trace) for k in _TEST_KEYS}
    tests.update({k + "_stderr": r.get(k + "_stderr") for k in _TEST_KEYS})
    tests.update({k + "_per_seed": [v + view.noise_trace for v in r.get(k + "_per_seed", [])]
                  for k in _TEST_KEYS})
    if out:  # the checkpoints run_amp wrote score f(h) alone: the final file carries tr Delta
        atomic_write(out, json.dumps({**r, **tests, "noise_trace": view.noise_trace}, indent=1,
                                     default=float))
    pred = se_prediction(model, alpha=alpha) if se else None
    details = {"dim": dim, "se_prediction": pred["mmse"] if pred else None, "se": pred,
               "per_seed": r["per_seed"], "per_iteration": r["per_iteration"],
               "converged": r.get("converged"), "reasons": r.get("reasons"),
               "dampings": r.get("dampings"), "interrupted": r.get("interrupted", False),
               "dg_form": view.dg_form, **tests, "noise_trace": view.noise_trace,
               "e_gen_se": pred["e_gen"] if pred else None,
               "e_gen_se_error": pred["e_gen_error"] if pred else None,
               "e_gen_se_plugin": pred["e_gen_plugin"] if pred else None,
               "e_gen_se_plugin_error": pred["e_gen_plugin_error"] if pred else None}
    params = model.parameters(alpha=alpha, dim=dim, seeds=seeds, rng_seed=rng_seed)
    return Result(quantity="mse", value=r["mean"], error=r["stderr"],
                  method=f"GAMP-RIE at D = {dim}, {seeds} seeds, g_out and dg_out (exact) from "
                  "the noisy polyhedral z_out; test error on the noiseless output + tr Delta; "
                  "error = standard error over seeds", precision=16, parameters=params,
                  details=details)


__all__ = ["run_noisy_piecewise_amp", "amp_view", "se_prediction"]
