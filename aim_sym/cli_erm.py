"""Command-line handlers of ``--model erm`` (THEORY 3): plain functions the click commands of
:mod:`aim_sym.cli` call with their parsed options; each returns the dict that ``emit`` prints
(or writes a figure).  API domain errors come back relabelled with the option's spelling
(``kappa0`` -> ``--kappa0``), so the command line prints one line and exits 2.

Options (the issue's names): --kappa0, --delta (noise variance Delta), --lam, --tokens, --beta,
--beta0, --alpha / --alphas, --direct, --digits, --points, --sigma (``se --lam 0``: the fixed
point at that Sigma, alpha an output), --sigmas (``curve --lam 0``: those points along a
log-spaced grid of Sigma, start:stop:num).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from .cli_common import relabel
from .domains import DomainError
from .erm import ERM

__all__ = ["ERM_OPTIONS", "erm_model", "se_json", "se_human", "se_sigma_json", "se_sigma_human",
           "check_sigma_options", "threshold_json",
           "threshold_human", "curve_rows", "CURVE_COLUMNS", "spectrum_json", "spectrum_plot",
           "sigma_grid", "check_sigma_curve_options", "sigma_curve", "sigma_curve_plot",
           "sigma_curve_human",
           "SIGMA_CURVE_STATE"]

#: the model options of --model erm and their defaults (None: required)
ERM_OPTIONS = {"kappa0": None, "delta": 0.0, "lam": 0.01, "tokens": 2, "beta": 1.0, "beta0": 1.0}
#: the columns of a curve a plot shows by default
CURVE_COLUMNS = ("test", "train", "mse")


def _relabelled(f: Callable) -> Callable:
    @functools.wraps(f)
    def wrapper(*args, **kwargs):
        try:
            return f(*args, **kwargs)
        except DomainError as e:
            raise relabel(e) from None

    return wrapper


def erm_model(**opts: Any) -> ERM:
    """The :class:`aim_sym.erm.ERM` of the options (unknown keys are ignored; None = default)."""
    kw = {k: (opts.get(k) if opts.get(k) is not None else d) for k, d in ERM_OPTIONS.items()}
    if kw["kappa0"] is None:
        from .cli_common import fail

        fail("--kappa0", "given with --model erm (a finite real >= 0.0001)", None)
    return ERM(**kw)


@_relabelled
def se_json(*, alpha: float, direct: bool = False, rule: str = "gh", **opts: Any) -> dict:
    """``aim-sym se --model erm [--direct] [--output-rule R]`` (``--direct``: T = 2..6, as the
    factorised SE): the six order parameters, train, test, mse, rank (each with ``*_error``) of
    the global-minimum fixed point, and every fixed point found.  ``--lam 0`` (factorised,
    T = 2): above alpha_interp the lambda = 0 SE (with ``fitted``, ``rule``; exit 3 where its
    bars are not validated), at or below it the lambda -> 0+ limit (``limit``, Sigma = inf)."""
    m = erm_model(**opts)
    table = m.state_evolution(alpha=alpha, direct=direct, rule=rule)
    out: dict = {**m.parameters(), "alpha": float(alpha)}
    for r in table:
        out[r.quantity] = r.value
        out[f"{r.quantity}_error"] = r.error
    first = table[0]
    out.update(method=first.method, precision=first.precision,
               fixed_points=first.details["fixed_points"])
    out.update({k: first.details[k] for k in ("limit", "rule", "alpha_interp")
                if k in first.details})
    return out


def se_human(o: dict) -> str:
    keys = ("q", "m", "sigma", "q_hat", "m_hat", "sigma_hat", "train", "test", "mse", "rank",
            "fitted", "delta_spec", "eps")
    limit = f" ({o['limit']} limit: the minimum-nuclear-norm interpolator)" if o.get(
        "limit") else ""
    lines = [f"ERM T={o['tokens']} kappa0={o['kappa0']} Delta={o['delta']} lambda={o['lam']} "
             f"alpha={o['alpha']}{limit}:"]
    lines += [f"  {k:10s} = {o[k]:.10g} +- {o[k + '_error']:.1e}" for k in keys if k in o]
    lines.append(f"fixed points: {len(o['fixed_points'])}")
    return "\n".join(lines)


def _refuse_beside_sigma(option: str, value: Any, conflicts: tuple, *, lam: float | None,
                         tokens: int | None) -> None:
    """Exit 2 naming ``option`` (--sigma or --sigmas) for a conflicting option given beside it
    (``conflicts``: (name, given) pairs), lam != 0 (the default 0.01 included) or tokens != 2."""
    from .cli_common import fail

    for opt, bad in conflicts:
        if bad:
            fail(option, f"given with --lam 0 and without {opt} (alpha is an output at fixed "
                 "Sigma; the piecewise rule on the factorised model)", value)
    if lam is None or lam != 0:
        fail(option, f"used only with --lam 0 (the ridgeless SE; got --lam "
             f"{0.01 if lam is None else lam:g})", value)
    if tokens is not None and tokens != 2:
        fail(option, f"used only with --tokens 2 (the lambda = 0 SE is T = 2 only; got "
             f"--tokens {tokens})", value)


def check_sigma_options(sigma: float, *, alpha: float | None, direct: bool,
                        output_rule: str | None, cross_validate: bool, lam: float | None,
                        tokens: int | None) -> None:
    """The options ``se --model erm --sigma`` refuses (exit 2, naming --sigma and what it needs):
    --alpha (alpha is the output), --direct, --output-rule gh, --cross-validate, lam != 0 (the
    default lam is 0.01, so --lam 0 must be given), tokens != 2; Sigma outside [25, 1e6] or not
    finite (the model method's domain)."""
    from .cli_common import fail
    from .erm import SIGMA_ERM

    _refuse_beside_sigma("--sigma", sigma, (("--alpha", alpha is not None), ("--direct", direct),
                                            ("--cross-validate", cross_validate),
                                            ("--output-rule gh", output_rule == "gh")),
                         lam=lam, tokens=tokens)
    if not SIGMA_ERM.contains(sigma):
        fail("--sigma", SIGMA_ERM.allowed() + " (where the 16/12 bars of the fixed-Sigma points "
             "were checked against outer order 20)", sigma)


@_relabelled
def se_sigma_json(*, sigma: float, **opts: Any) -> dict:
    """``aim-sym se --model erm --lam 0 --sigma S``: the lambda = 0 SE fixed point at that
    Sigma (T = 2), alpha an output with its bar (``alpha_error``), the six order parameters,
    train, test, mse, rank, fitted (each with ``*_error``), the orders and the residual."""
    m = erm_model(**opts)
    table = m.state_evolution_at_sigma(sigma=sigma)
    out: dict = dict(m.parameters())
    for r in table:
        out[r.quantity] = r.value
        out[f"{r.quantity}_error"] = r.error
    first = table[0]
    out.update(method=first.method, precision=first.precision, **first.details)
    return out


def se_sigma_human(o: dict) -> str:
    keys = ("q", "m", "sigma", "q_hat", "m_hat", "sigma_hat", "train", "test", "mse", "rank",
            "fitted")
    lines = [f"ERM T={o['tokens']} kappa0={o['kappa0']} Delta={o['delta']} lambda={o['lam']} "
             f"at fixed Sigma={o['sigma']:g} (alpha is an output; alpha_interp = "
             f"{o['alpha_interp']:.10g}):",
             f"  {'alpha':10s} = {o['alpha']:.10g} +- {o['alpha_error']:.1e}  (output)"]
    lines += [f"  {k:10s} = {o[k]:.10g} +- {o[k + '_error']:.1e}" for k in keys if k in o]
    lines.append(f"outer orders {o['orders'][0]}/{o['orders'][1]}, residual "
                 f"{o['residual']:.1e}")
    return "\n".join(lines)


@_relabelled
def threshold_json(kind: str, *, direct: bool = False, digits: int = 30, **opts: Any) -> dict:
    """``aim-sym threshold {interpolation,perfect} --model erm [--direct]``: alpha (a decimal
    string), its error, and alpha_bar = alpha (T^2 + T - 2)/2 beside it."""
    m = erm_model(**opts)
    r = m.threshold(kind, direct=direct, digits=digits)
    return {**dict(r.parameters), "kind": kind, "quantity": r.quantity, "alpha": r.value,
            "error": r.error, "method": r.method, "precision": r.precision, **dict(r.details)}


def threshold_human(o: dict) -> str:
    return (f"ERM {o['quantity']} = {o['alpha']} +- {o['error']:.1e} (alpha_bar = "
            f"{o['alpha_bar']} +- {o['alpha_bar_error']:.1e}; Bayes-optimal alpha_bar = "
            f"{o['alpha_bar_bayes']})")


@_relabelled
def optimal_lambda_json(*, alpha: float, direct: bool = False, **opts: Any) -> dict:
    """``aim-sym se --model erm --cross-validate [--direct]``: lambda* (lam_opt, its error, edge)
    and the SE at lambda* (test with its error and every order parameter)."""
    m = erm_model(**{**opts, "lam": None})
    r = m.optimal_lambda(alpha=alpha, direct=direct)
    d = dict(r.details)
    keep = {k: v for k, v in d.items() if k not in ("evaluations", "other_fixed_points")}
    return {**dict(r.parameters), "alpha": float(alpha), "lam_opt": r.value,
            "lam_opt_error": r.error, **keep, "method": r.method,
            "evaluations": d.get("evaluations")}


def optimal_lambda_human(o: dict) -> str:
    edge = f" (on the {o['edge']} edge of [1e-3, 1]: optimum at or beyond it)" if o["edge"] else ""
    return (f"ERM T={o['tokens']} kappa0={o['kappa0']} Delta={o['delta']} alpha={o['alpha']}"
            f"{' direct' if o.get('direct') else ''}: lambda* = {o['lam_opt']:.6g} +- "
            f"{o['lam_opt_error']:.2g}{edge}; test = {o['test']:.10g} +- {o['test_error']:.1e}")


@_relabelled
def cross_validated_rows(*, alphas, direct: bool = False, progress=None, **opts: Any
                         ) -> list[dict]:
    """``aim-sym curve --model erm --cross-validate``: one row per alpha (lam_opt, test, ...)."""
    m = erm_model(**{**opts, "lam": None})
    return [dict(r) for r in m.cross_validated_curve(alphas=list(alphas), direct=direct,
                                                     progress=progress)]


@_relabelled
def curve_rows(*, alphas, direct: bool = False, **opts: Any) -> list[dict]:
    """``aim-sym curve --model erm [--direct]``: one row per alpha (write with
    tables.write_csv and plot with plots.plot_curve(rows, CURVE_COLUMNS, ...)); ``direct``: the
    element-wise (ridge) parameterisation, any T the SE takes."""
    m = erm_model(**opts)
    return [dict(r) for r in m.curve(alphas=list(alphas), direct=direct)]


@_relabelled
def spectrum_json(*, alpha: float, points: int = 400, **opts: Any) -> dict:
    """``aim-sym spectrum --model erm``: the learned spectrum's densities (eigenvalues and
    singular values), rank, atom at 0 and support intervals."""
    m = erm_model(**opts)
    r = m.spectrum(alpha=alpha, points=points)
    return {**dict(r.parameters), "rank": r.value, "rank_error": r.error, **dict(r.details)}


def spectrum_plot(spec: dict, path: str, *, singular: bool = True) -> None:
    """Figure of :func:`spectrum_json`'s density (:func:`aim_sym.plots.plot_spectrum`)."""
    from .plots import plot_spectrum

    plot_spectrum(spec, path, singular=singular)


#: the suffix of ``curve --model erm --sigmas ... --out F``'s state file (F + suffix): the rows
#: finished so far, written atomically after each Sigma (``--resume`` continues from it)
SIGMA_CURVE_STATE = ".partial.json"


def sigma_grid(spec: str) -> list[float]:
    """``--sigmas start:stop:num``: ``num`` values of Sigma spaced evenly in log Sigma from
    ``start`` to ``stop`` (numpy.geomspace; the same start:stop:num form as ``--alphas``, which
    is linear), each in [25, 1e6]; exit 2 naming --sigmas otherwise."""
    import numpy as np

    from .cli_common import fail, parse_grid
    from .erm import SIGMA_ERM

    lin = parse_grid(spec, "--sigmas")
    a, b = float(lin[0]), float(lin[-1])
    if not (SIGMA_ERM.contains(a) and SIGMA_ERM.contains(b)):
        fail("--sigmas", "a grid start:stop:num (log-spaced) with start and stop in "
             f"[{SIGMA_ERM.low:g}, {SIGMA_ERM.high:g}] (where the 16/12 bars of the fixed-Sigma "
             "points were checked against outer order 20)", spec)
    # 15 significant digits: 25:1e4:3 gives 500, not 499.99999999999994 (CSV, progress, plots)
    grid = [float(f"{x:.15g}") for x in np.geomspace(a, b, len(lin))]
    grid[0], grid[-1] = a, b  # exact ends
    return grid


def check_sigma_curve_options(spec: str, *, alphas: str | None, direct: bool,
                              cross_validate: bool, aim_only: dict, **opts: Any) -> None:
    """The options ``curve --model erm --sigmas`` refuses (exit 2, naming --sigmas and what it
    needs): --alphas (alpha is an output), --direct, --cross-validate, lam != 0 (the default
    lam is 0.01, so --lam 0 must be given), tokens != 2, the options of ``aim_only``
    ({option: value} of the ones given: --tol, --method, --points), and a model outside
    ``AT_SIGMA_RANGE`` with beta = beta0 = 1, or grid ends outside its Sigma range there
    (``opts``: the model options; where the fixed-Sigma bars were checked against outer order
    20)."""
    from .cli_common import fail
    from .numerics.erm_ridgeless import AT_SIGMA_RANGE, at_sigma_checked, at_sigma_sigma_range, number_text

    lam, tokens = opts.get("lam"), opts.get("tokens")

    _refuse_beside_sigma("--sigmas", spec, (("--alphas", alphas is not None),
                                            ("--direct", direct),
                                            ("--cross-validate", cross_validate)),
                         lam=lam, tokens=tokens)
    for opt, value in aim_only.items():
        fail("--sigmas", f"given without {opt} (an option of --model aim)", value)
    model = {k: (opts.get(k) if opts.get(k) is not None else ERM_OPTIONS[k])
             for k in ("kappa0", "delta", "beta", "beta0")}
    if model["kappa0"] is not None and not at_sigma_checked(
            kappa0=model["kappa0"], Delta=model["delta"], beta=model["beta"],
            beta0=model["beta0"]):
        (a, b), (c, d) = AT_SIGMA_RANGE["kappa0"], AT_SIGMA_RANGE["Delta"]
        fail("--sigmas", f"used only with --kappa0 in [{a:g}, {b:g}], --delta in [{c:g}, {d:g}] "
             "and --beta, --beta0 at 1 (where the fixed-Sigma 16/12 bars were checked against "
             f"outer order 20 at the corners: docs/erm.md; got --kappa0 {model['kappa0']:g} "
             f"--delta {model['delta']:g} --beta {model['beta']:g} --beta0 "
             f"{model['beta0']:g})", spec)
    if model["kappa0"] is not None:
        lo, hi = at_sigma_sigma_range(kappa0=model["kappa0"], Delta=model["delta"])
        grid = sigma_grid(spec)
        if not (lo <= grid[0] <= hi and lo <= grid[-1] <= hi):
            fail("--sigmas", f"a grid with start and stop in [{number_text(lo)}, "
                 f"{number_text(hi)}] at --kappa0 "
                 f"{model['kappa0']:g} --delta {model['delta']:g} (where the fixed-Sigma 16/12 "
                 "bars were checked against outer order 20: docs/erm.md)", spec)


def _sigma_curve_key(m: ERM) -> dict:
    """The options a stored fixed-Sigma curve depends on (a resumed run must match them)."""
    return {"command": "curve --model erm --sigmas", "kappa0": m.kappa0, "delta": m.delta,
            "lam": m.lam, "tokens": m.tokens, "beta": m.beta, "beta0": m.beta0,
            "orders": [16, 12]}


@_relabelled
def sigma_curve(*, spec: str, out_path: str | None, plot_path: str | None, resume: bool,
                progress: Callable | None = None, **opts: Any) -> dict:
    """``aim-sym curve --model erm --lam 0 --sigmas start:stop:num``: the fixed-Sigma SE
    (:meth:`ERM.curve_at_sigma`) at each Sigma of the log-spaced grid, one row per Sigma (alpha,
    q, m, the hats, train, test, mse, rank, fitted, each with ``*_error``).  With ``out_path``
    each finished Sigma goes (atomically) to the CSV and to the state file ``out_path`` +
    :data:`SIGMA_CURVE_STATE`; ``resume`` reuses the leading rows stored there (same model
    options; a different grid reuses only the Sigma that match in order).  Returns the dict
    ``emit`` prints (rows, out, plot); the figure is written by :func:`sigma_curve_plot`."""
    from .cli_common import fail, read_resume_state, write_json
    from .tables import write_csv

    grid = sigma_grid(spec)
    m = erm_model(**opts)
    m._check_at_sigma(grid[0])
    if resume and not out_path:
        fail("--resume", "used with --out FILE (the CSV of an earlier run)", True)
    key = _sigma_curve_key(m)
    state = out_path + SIGMA_CURVE_STATE if out_path else None
    done: list[dict] = []
    if resume:
        stored = read_resume_state(state, key, f"state file (--out + {SIGMA_CURVE_STATE})")
        done = list((stored or {}).get("rows", []))

    def store(rows: list[dict]) -> None:
        write_json(state, {"options": key, "rows": rows})
        write_csv(out_path, rows)

    table = m.curve_at_sigma(sigmas=grid, progress=progress, done=done,
                             on_row=store if out_path else None)
    rows = [dict(r) for r in table]
    return {**m.parameters(), "sigmas": grid, "rows": rows, "out": out_path,
            "plot": plot_path, "alpha_interp": rows[0]["alpha_interp"]}


def sigma_curve_plot(o: dict, path: str) -> None:
    """Test error against alpha along a fixed-Sigma curve, bars in both (alpha and test carry
    their own), alpha_interp and the interpolator's test error at it marked (docs/erm.md)."""
    import math

    from .plots import _pyplot, save_figure

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5, 3.6))
    rows = o["rows"]
    ax.errorbar([r["alpha"] for r in rows], [r["test"] for r in rows],
                xerr=[r["alpha_error"] for r in rows], yerr=[r["test_error"] for r in rows],
                fmt="o-", ms=3, capsize=2, label="test error (fixed Sigma)")
    a_i = o["alpha_interp"]
    ax.axvline(a_i, color="k", ls="--", lw=0.8, label=rf"$\alpha_{{interp}}$ = {a_i:.6g}")
    for r in rows:
        if math.isfinite(r["alpha"]):
            ax.annotate(f"{r['sigma']:.3g}", (r["alpha"], r["test"]), fontsize=6,
                        xytext=(3, 3), textcoords="offset points")
    ax.set_xlabel(r"$\alpha$")
    ax.set_ylabel("test error")
    ax.set_title(f"ERM lambda=0, kappa0={o['kappa0']}, Delta={o['delta']}: points labelled "
                 "by Sigma", fontsize=8)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, path)


def sigma_curve_human(o: dict) -> str:
    lines = [f"ERM T={o['tokens']} kappa0={o['kappa0']} Delta={o['delta']} lambda=0 along Sigma "
             f"(alpha an output; alpha_interp = {o['alpha_interp']:.10g}):"]
    lines += [f"  Sigma={r['sigma']:<10.6g} alpha = {r['alpha']:.8g} +- {r['alpha_error']:.1e}, "
              f"test = {r['test']:.8g} +- {r['test_error']:.1e}, train = {r['train']:.6g} +- "
              f"{r['train_error']:.1e}, q = {r['q']:.6g} +- {r['q_error']:.1e}" for r in o["rows"]]
    return "\n".join(lines)
