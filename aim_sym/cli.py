"""The aim-sym command line: se, curve, threshold, check, sweep, mmse (``--json`` everywhere).

Bad values exit with status 2 and one line naming the option and its allowed range.
"""

from __future__ import annotations

import csv
import json
import os
import sys
import tempfile

import click
import numpy as np

from .cli_common import (
    MODELS,
    OptionError,
    _finite,
    emit,
    fail,
    parse_grid,
    progress_printer,
    smi_args,
)
from .cli_sweep import sweep
from .numerics.records import ConvergenceError, InputError, atomic_write


# ----------------------------------------------------------------------------- options
def model_options(f):
    opts = [
        click.option("--model", default="aim", show_default=True, help="aim or smi"),
        click.option("--channel", default=None, help="aim: linear, linear-noisy, softmax, "
                     "hardmax, noisy-hardmax; smi: deep-attention"),
        click.option("--channel-file", default=None, help="a Python file defining a channel "
                     "(runs the file's code)"),
        click.option("--tokens", type=int, default=2, show_default=True, help="T (aim) or M (smi)"),
        click.option("--rho", type=float, default=None, help="aim: width ratio rho > 0"),
        click.option("--beta", type=float, default=None, help="inverse temperature > 0"),
        click.option("--delta-out", type=float, default=None, help="aim linear-noisy: noise >= 0"),
        click.option("--epsilon", type=float, default=None, help="aim noisy-hardmax: flip prob"),
        click.option("--layers", type=int, default=None, help="smi deep-attention: depth L"),
        click.option("--skip", type=float, default=None, help="smi deep-attention: skip c >= 0"),
        click.option("--param", "param", multiple=True, help="channel-file parameter "
                     "NAME=VALUE (repeatable)"),
        click.option("--json", "as_json", is_flag=True, help="print JSON"),
    ]
    for o in reversed(opts):
        f = o(f)
    return f


AIM_ONLY = ("rho", "delta_out", "epsilon", "channel_file", "param")
SMI_ONLY = ("layers", "skip")


def check_model(kw: dict) -> str:
    model = kw["model"]
    if model not in MODELS:
        fail("--model", "one of aim, smi", model)
    bad = SMI_ONLY if model == "aim" else AIM_ONLY
    for name in bad:
        if kw.get(name) not in (None, ()):
            fail("--" + name.replace("_", "-"), f"not given with --model {model} (it does not apply)",
                 kw[name])
    if kw.get("beta") is not None and not kw["beta"] > 0:
        fail("--beta", "> 0", kw["beta"])
    return model


def aim_channel(kw: dict):
    """Build and compile the AIM channel named by the options."""
    from .channels import BUILTIN, builtin
    from .compiled import compile_channel

    T = kw["tokens"]
    if T < 2:
        fail("--tokens", "an integer >= 2", T)
    if kw.get("rho") is not None and not kw["rho"] > 0:
        fail("--rho", "> 0", kw["rho"])
    params = {}
    if kw.get("channel_file"):
        from .channel_file import load_channel_file

        if kw.get("channel"):
            fail("--channel", "omitted with --channel-file", kw["channel"])
        ch = load_channel_file(kw["channel_file"], tokens=T)
        params = {s.name: v for s, v in ch.params}
        for item in kw.get("param") or ():
            name, _, value = item.partition("=")
            if name not in params:
                fail("--param", f"NAME=VALUE with NAME one of {sorted(params) or 'none'}", item)
            try:
                float(value)
            except ValueError:
                fail("--param", "NAME=VALUE with a numeric VALUE", item)
            params[name] = value
    else:
        if kw.get("param"):
            fail("--param", "given only with --channel-file", kw["param"][0])
        name = kw.get("channel") or "hardmax"
        if name not in BUILTIN:
            fail("--channel", "one of " + ", ".join(BUILTIN), name)
        if name == "hardmax" and T > 2:
            fail("--tokens", "2 for hardmax (T >= 3 needs orthant probabilities in more than two "
                 "dimensions, not yet supported)", T)
        ch = builtin(name, T)
    if kw.get("beta") is not None:
        params["beta"] = kw["beta"]
    if ch.name == "linear-noisy":
        d = kw.get("delta_out")
        if d is None or not d >= 0:
            fail("--delta-out", ">= 0 (required for linear-noisy)", d)
        params["Delta_out"] = d
    elif kw.get("delta_out") is not None:
        fail("--delta-out", "given only with --channel linear-noisy", kw["delta_out"])
    if ch.name == "noisy-hardmax":
        e = kw.get("epsilon")
        if e is None or not 0 <= e < 0.5:
            fail("--epsilon", "in [0, 0.5) (required for noisy-hardmax)", e)
        params["epsilon"] = e
    elif kw.get("epsilon") is not None:
        fail("--epsilon", "given only with --channel noisy-hardmax", kw["epsilon"])
    return ch, compile_channel(ch, params), params


# ----------------------------------------------------------------------------- commands
@click.group()
@click.version_option(package_name="aim-sym")
def cli() -> None:
    """aim-sym: derive and solve Bayes-optimal learning of attention models."""


@cli.command()
@model_options
@click.option("--alpha", type=float, required=True, help="sample ratio alpha >= 0 (alpha_bar "
              "with --small-width)")
@click.option("--small-width", is_flag=True, help="the rho -> 0 limit, alpha = alpha_bar rho")
@click.option("--digits", type=int, default=None, help="also solve the Bayes-optimal fixed "
              "point to this many digits (5..200; closed-form output maps only)")
def se(alpha, small_width, digits, **kw):
    """Solve the state evolution at one alpha: all fixed points, the Bayes-optimal flagged."""
    model = check_model(kw)
    if not alpha >= 0:
        fail("--alpha", ">= 0", alpha)
    if model == "smi":
        from .numerics import smi

        if small_width:
            fail("--small-width", "used only with --model aim", True)
        if digits is not None:
            fail("--digits", "used only with --model aim", digits)
        res = smi.fixed_point(alpha=alpha, **smi_args(kw))
        emit(res, kw["as_json"])
        return
    from .numerics import aim_se

    ch, cc, _ = aim_channel(kw)
    if small_width:
        if kw.get("rho") is not None:
            fail("--rho", "omitted with --small-width (rho -> 0)", kw["rho"])
        fps = aim_se.small_width_fixed_points(cc, alpha_bar=alpha)
        stable = [f for f in fps if f["stable"]]
        best = max(stable, key=lambda f: f["q"]) if stable else fps[0]
        emit({"alpha_bar": alpha, "q": best["q"], "fixed_points": fps}, kw["as_json"])
        return
    rho = 0.5 if kw.get("rho") is None else kw["rho"]
    if digits is not None:
        if not 5 <= digits <= 200:
            fail("--digits", "in 5..200", digits)
        if cc.discrete:
            fail("--digits", "used with a channel whose output map is a closed form (linear, "
                 "linear-noisy, softmax, Gaussian channel files)", digits)
    fps = aim_se.fixed_points(cc, alpha=alpha, rho=rho)
    bo = aim_se.bayes_optimal(fps)
    out = {
        "model": "aim", "channel": ch.name, "tokens": ch.tokens, "rho": rho, "alpha": alpha,
        "q": bo.q, "q_hat": bo.q_hat, "mmse": bo.mmse, "phi": bo.phi, "error": bo.error,
        "method": ("closed-form output map" if not cc.discrete else
                   f"quadrature over omega, levels up to {bo.extra.get('level')}")
        + " + Wishart prior quadrature; error = difference of two refinement levels",
        "precision": 16,
        "fixed_points": [f.as_dict() for f in fps],
    }
    if digits is not None and bo.mmse > 0:
        est = aim_se.fixed_point_mp(cc, alpha=alpha, rho=rho, dps=digits, v0=bo.mmse)
        out["mmse_digits"] = {"value": est.value, "error": est.error, "method": est.method}
    emit(out, kw["as_json"], lambda o: (
        f"AIM {o['channel']} T={o['tokens']} rho={rho} alpha={alpha}: mmse = {o['mmse']:.15g} "
        f"+- {o['error']:.1e}, q = {o['q']:.15g}, q_hat = {o['q_hat']:.15g}, phi = {o['phi']}\n"
        f"fixed points: {len(fps)}"))


@cli.command()
@model_options
@click.option("--alphas", required=True, help="start:stop:num")
@click.option("--out", "out_path", default=None, help="CSV file")
@click.option("--plot", "plot_path", default=None, help="PNG file")
@click.option("--tol", type=float, default=1e-13, show_default=True,
              help="aim: target error of each fixed point (1e-15..1e-2); larger is faster")
@click.option("--method", type=click.Choice(["traced", "per-alpha"]), default="traced",
              show_default=True,
              help="aim: trace alpha(Delta) once for all alphas, or solve each alpha on its own")
def curve(alphas, out_path, plot_path, tol, method, **kw):
    """SE curve over an alpha grid (Bayes-optimal branch): CSV and a figure."""
    model = check_model(kw)
    grid = parse_grid(alphas, "--alphas")
    if np.any(grid < 0):
        fail("--alphas", "a grid of alpha >= 0", alphas)
    if model == "smi":
        from .numerics import smi

        rows = smi.se_curve(alphas=grid, progress=progress_printer, **smi_args(kw))
        flat = []
        for r in rows:
            d = {}
            for k, v in r.items():
                if isinstance(v, (list, tuple)):  # diagonal entries Q_11, Q_22, ...
                    d.update({f"{k}_{i + 1}{i + 1}": x for i, x in enumerate(v)})
                else:
                    d[k] = v
            flat.append(d)
        rows = flat
        ycols = [k for k in rows[0] if k.startswith("Q_")] + ["e_gen"]
        title = f"SMI deep attention L={smi_args(kw)['layers']}, c={smi_args(kw)['skip']}"
    else:
        from .numerics import aim_se

        ch, cc, _ = aim_channel(kw)
        rho = 0.5 if kw.get("rho") is None else kw["rho"]
        if not 1e-15 <= tol <= 1e-2:
            fail("--tol", "in [1e-15, 1e-2]", tol)
        rows = aim_se.curve(cc, alphas=grid, rho=rho, tol=tol, progress=progress_printer,
                            method=method)
        ycols = ["mmse"]
        title = f"AIM {ch.name}, T={ch.tokens}, rho={rho}"
    if out_path:
        write_csv(out_path, rows)
    if plot_path:
        plot_rows(plot_path, rows, ycols, title)
    emit({"rows": rows, "out": out_path, "plot": plot_path}, kw["as_json"],
         lambda o: "\n".join(",".join(f"{r[k]}" for k in r) for r in rows))


def write_csv(path: str, rows: list[dict]) -> None:
    import io

    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(rows[0]))
    w.writeheader()
    for r in rows:
        w.writerow(r)
    atomic_write(path, buf.getvalue())


def plot_rows(path: str, rows: list[dict], ycols: list[str], title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.6))
    x = [r["alpha"] for r in rows]
    for c in ycols:
        ax.plot(x, [r[c] for r in rows], label=c)
    ax.set_xlabel(r"$\alpha$")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=".png")
    os.close(fd)
    fig.savefig(tmp, dpi=130)
    plt.close(fig)
    os.replace(tmp, path)


@cli.command()
@click.argument("kind", type=click.Choice(["weak", "perfect"]))
@model_options
@click.option("--small-width", is_flag=True, help="the rho -> 0 limit, alpha = alpha_bar rho")
@click.option("--digits", type=int, default=16, show_default=True, help="1 to 1000; --model "
              "smi: digits asked of the sequential threshold, 1 to 9 (default there 4; times "
              "in benchmarks/RESULTS.md)")
@click.option("--certified", is_flag=True, help="add an interval enclosure (python-flint)")
@click.option("--no-sequential", is_flag=True, help="smi: weak thresholds only (seconds, not "
              "minutes)")
@click.option("--sequential-route", type=click.Choice(["lattice", "montecarlo"]),
              default="lattice", show_default=True, help="smi --layers 3: the sequential "
              "thresholds by the deterministic fibre lattice (error bar by refinement, ~10-20 "
              "min on 2 cores) or by seeded Monte Carlo (standard error, ~11 min)")
def threshold(kind, small_width, digits, certified, no_sequential, sequential_route, **kw):
    """Weak-recovery or perfect-recovery threshold (closed form where it exists)."""
    model = check_model(kw)
    if not 1 <= digits <= 1000:
        fail("--digits", "in 1..1000", digits)
    if model == "smi":
        if kind != "weak":
            fail("KIND", "weak for --model smi", kind)
        if certified:
            fail("--certified", "used only for closed-form thresholds (--model aim)", True)
        if small_width:
            fail("--small-width", "used only with --model aim", True)
        args = smi_args(kw)
        given = click.get_current_context().get_parameter_source("digits")
        seq_digits = 4 if given == click.core.ParameterSource.DEFAULT else digits
        if not 1 <= seq_digits <= 9:
            fail("--digits", "in 1..9 for --model smi (sequential threshold)", digits)
        if args["layers"] == 3:
            from .numerics import smi_deep

            res = smi_deep.weak_thresholds(progress=progress_printer, **args)
            note = "L = 3: weak thresholds of each layer at Q = 0"
            if not no_sequential:
                from .numerics import smi_deep_branch

                route = (smi_deep_branch.sequential_thresholds_l3_lattice
                         if sequential_route == "lattice"
                         else smi_deep_branch.sequential_thresholds_l3)
                seq = route(skip=args["skip"], beta=args["beta"], progress=progress_printer)
                res += [{k: d[k] for k in ("layer", "kind", "value", "error", "q3", "q3_error",
                                           "first", "method", "seconds")} for d in seq]
                how = ("deterministic fibre lattice, error bar by refinement"
                       if sequential_route == "lattice" else "seeded Monte Carlo")
                note += (f"; sequential: layers 1 and 2 once layer 3 is learned ({how}, --digits "
                         "does not apply); the smaller one ('first') is the next transition, the "
                         "other only an upper bound")
            emit({"model": "smi", **args, "thresholds": res, "note": note}, kw["as_json"])
            return
        from .numerics import smi

        if click.get_current_context().get_parameter_source("sequential_route") != \
                click.core.ParameterSource.DEFAULT:
            fail("--sequential-route", "used only with --layers 3", sequential_route)
        res = smi.weak_thresholds(progress=progress_printer, sequential=not no_sequential,
                                  digits=seq_digits, **args)
        emit({"model": "smi", **args, "thresholds": res}, kw["as_json"])
        return
    from . import thresholds

    if no_sequential:
        fail("--no-sequential", "used only with --model smi", True)
    if click.get_current_context().get_parameter_source("sequential_route") != \
            click.core.ParameterSource.DEFAULT:
        fail("--sequential-route", "used only with --model smi --layers 3", sequential_route)
    ch, cc, params = aim_channel(kw)
    if kind == "weak":
        if not small_width:
            fail("--small-width", "given for a weak-recovery threshold of the AIM (at finite rho "
                 "q > rho for every alpha > 0: no uninformative fixed point)", False)
        if kw.get("rho") is not None:
            fail("--rho", "omitted with --small-width (rho -> 0)", kw["rho"])
        t = thresholds.small_width_weak(ch, digits=digits, params=params)
        name = "alpha_bar_c"
    else:
        rho = None if small_width else (0.5 if kw.get("rho") is None else kw["rho"])
        if small_width and kw.get("rho") is not None:
            fail("--rho", "omitted with --small-width (rho -> 0)", kw["rho"])
        t = thresholds.perfect_recovery(ch, rho_value=rho, small_width=small_width,
                                        digits=digits, params=params)
        name = "alpha_bar_PR" if small_width else "alpha_PR"
    out = {"model": "aim", "channel": ch.name, "tokens": ch.tokens, "threshold": name,
           **t.as_dict()}
    if certified:
        from .certified import enclosure

        lo, hi, _ = enclosure(t.expr, digits=max(digits, 30))
        out["interval"] = [lo, hi]
        out["certified"] = "ball arithmetic (python-flint arb) on the closed form"
    emit(out, kw["as_json"], lambda o: (
        f"{name} ({ch.name}, T={ch.tokens}) = {o['value']}  (error {o['error']:.1e})\n"
        f"closed form: {o['closed_form']}\nmethod: {o['method']}"))


@cli.command()
@model_options
def check(**kw):
    """Run the identity checks on a channel; exit 1 if any fails."""
    model = check_model(kw)
    if model == "smi":
        from .numerics import smi

        results = smi.run_checks(**smi_args(kw))
    else:
        from .checks import run_checks

        ch, cc, params = aim_channel(kw)
        results = run_checks(ch, params=params)
    ok = all(r["passed"] for r in results)
    emit({"passed": ok, "checks": results}, kw["as_json"], lambda o: "\n".join(
        f"{'PASS' if r['passed'] else 'FAIL'}  {r['name']}: {r['detail']}" for r in results
    ) + f"\n{'all checks passed' if ok else 'SOME CHECKS FAILED'}")
    if not ok:
        sys.exit(1)


@cli.command()
@model_options
@click.option("--alpha", type=float, default=None, help="sample ratio alpha = N/D^2 > 0")
@click.option("--alphas", default=None, help="start:stop:num: run AMP at each (with --plot)")
@click.option("--dim", type=int, default=100, show_default=True, help="D, 10..2000")
@click.option("--seeds", type=int, default=4, show_default=True, help="1..1000")
@click.option("--max-iter", type=int, default=100, show_default=True)
@click.option("--damping", default="auto", show_default=True,
              help="in [0, 1), or 'auto': AIM tries 0.5, 0.7, 0.8, 0.9 until a run does not "
                   "diverge; SMI uses 0.3")
@click.option("--rng-seed", type=int, default=0, show_default=True)
@click.option("--out", "out_path", default=None, help="JSON file (written after every seed)")
@click.option("--plot", "plot_path", default=None, help="PNG: AMP points over the SE curve")
def amp(alpha, alphas, dim, seeds, max_iter, damping, rng_seed, out_path, plot_path, **kw):
    """Finite-size GAMP-RIE on synthetic data against the SE (mean, stderr, se_prediction)."""
    import os as _os

    _os.environ.setdefault("OMP_NUM_THREADS", "1")
    model = check_model(kw)
    if damping != "auto":
        try:
            damping = float(damping)
        except ValueError:
            fail("--damping", "a number in [0, 1) or 'auto'", damping)
    if model == "smi":
        damping = 0.3 if damping == "auto" else damping
        if alpha is None or alphas is not None or plot_path:
            fail("--alpha", "one value for --model smi (no --alphas/--plot)", alpha or alphas)
        if not alpha > 0:
            fail("--alpha", "> 0", alpha)
        if not 10 <= dim <= 10000:
            fail("--dim", "in 10..10000", dim)
        if not 1 <= seeds <= 1000:
            fail("--seeds", "in 1..1000", seeds)
        if not 0 <= damping < 1:
            fail("--damping", "in [0, 1)", damping)
        from .numerics import smi_amp

        r = smi_amp.run_smi_amp(alpha=alpha, dim=dim, seeds=seeds, max_iter=max_iter,
                                damping=damping, rng_seed=rng_seed, progress=progress_printer,
                                **smi_args(kw))
        keep = ("Q_mean", "Q_stderr", "Q_tail_mean", "Q_tail_stderr", "per_iteration",
                "converged_fraction",
                "se_prediction", "seconds")
        out = {"model": "smi", "alpha": alpha, "dim": dim, "seeds": seeds,
               **{k: r.get(k) for k in keep}}
        if out_path:
            atomic_write(out_path, json.dumps(_finite(out), indent=2))
        emit(out, kw["as_json"])
        return
    if (alpha is None) == (alphas is None):
        fail("--alpha", "given (or --alphas, not both)", alpha)
    grid = [alpha] if alpha is not None else list(parse_grid(alphas, "--alphas"))
    if any(not a > 0 for a in grid):
        fail("--alpha", "> 0", alpha if alpha is not None else alphas)
    if not 10 <= dim <= 2000:
        fail("--dim", "in 10..2000", dim)
    if not 1 <= seeds <= 1000:
        fail("--seeds", "in 1..1000", seeds)
    if damping != "auto" and not 0 <= damping < 1:
        fail("--damping", "in [0, 1) or 'auto'", damping)
    if max_iter < 1:
        fail("--max-iter", ">= 1", max_iter)
    from .numerics import aim_se
    from .numerics import amp as amp_mod

    ch, cc, params = aim_channel(kw)
    rho = 0.5 if kw.get("rho") is None else kw["rho"]
    results = []
    for i, a in enumerate(grid):
        r = amp_mod.run_amp(ch, cc, alpha=float(a), rho=rho, dim=dim, seeds=seeds,
                            max_iter=max_iter, damping=damping, rng_seed=rng_seed,
                            progress=progress_printer,
                            out=None if out_path is None else
                            (out_path if len(grid) == 1 else f"{out_path}.{i}.json"))
        results.append({"alpha": float(a), "dim": dim, "mean": r["mean"], "stderr": r["stderr"],
                        "se_prediction": r["se_prediction"], "per_seed": r["per_seed"],
                        "per_iteration": r["per_iteration"], "converged": r.get("converged"),
                        "dampings": r.get("dampings"),
                        "interrupted": r.get("interrupted", False)})
    if plot_path:
        top = max(grid) * 1.3
        curve_rows = aim_se.curve(cc, alphas=np.linspace(0, top, 41), rho=rho, tol=1e-8)
        amp_mod.plot_amp_vs_se(results, curve_rows, plot_path,
                               title=f"AIM {ch.name}, T={ch.tokens}, rho={rho}, D={dim}")
    out = results[0] if len(results) == 1 else {"points": results}
    if out_path and len(grid) > 1:
        atomic_write(out_path, json.dumps(_finite(out), indent=2))
    emit(out, kw["as_json"], lambda o: "\n".join(
        f"alpha={r['alpha']:.6g} D={dim}: AMP {r['mean']:.5f} +- {r['stderr']:.5f}  "
        f"SE {r['se_prediction']:.5f}" for r in results))


@cli.command()
@model_options
@click.option("--format", "fmt", type=click.Choice(["markdown", "latex", "python"]),
              default="markdown", show_default=True)
def derive(fmt, **kw):
    """Print a channel's equations: Z_out, g_out, dg_out, SE map, Psi_out, stability."""
    model = check_model(kw)
    if model == "smi":
        from .sheets import smi_sheet, strip_canonical

        layers = smi_args(kw)["layers"]
        click.echo(strip_canonical(smi_sheet(layers)))
        return
    from .codegen import numpy_source
    from .output import derive as derive_channel
    from .sheets import aim_expressions, aim_sheet, latex_document, strip_canonical

    ch, cc, params = aim_channel(kw)
    if fmt == "python":
        click.echo(numpy_source(derive_channel(ch), params, ch))
    elif fmt == "latex":
        click.echo(latex_document(aim_expressions(ch), ch.tokens))
    else:
        text = strip_canonical(aim_sheet(ch))
        if kw["as_json"]:
            import sympy as sp

            emit({k: sp.latex(v) for k, v in aim_expressions(ch).items()}, True)
            return
        click.echo(text)


def _positive_rational(text: str, option: str):
    from fractions import Fraction

    try:
        q = Fraction(text.strip())
    except (ValueError, ZeroDivisionError):
        q = None
    if q is None or not q > 0:
        fail(option, "a finite real number > 0 (decimal or p/q)", text)
    return q


@cli.command()
@click.option("--rho", required=True, help="width ratio rho > 0 (decimal or p/q, read exactly)")
@click.option("--delta", required=True, help="noise Delta > 0 (decimal or p/q, read exactly)")
@click.option("--digits", type=int, default=None, help="5..200: mpmath digits of the estimate, or "
              "significant digits of the --certified interval (default 20 there)")
@click.option("--certified", is_flag=True, help="a guaranteed interval by ball arithmetic "
              "(python-flint)")
@click.option("--json", "as_json", is_flag=True, help="print JSON")
def mmse(rho, delta, digits, certified, as_json):
    """mmse(Delta) of denoising the Wishart matrix S from S + sqrt(Delta) Z (THEORY 1.1)."""
    _positive_rational(rho, "--rho")
    _positive_rational(delta, "--delta")
    if digits is not None and not 5 <= digits <= 200:
        fail("--digits", "in 5..200", digits)
    if certified:
        from .numerics.certified_prior import mmse_enclosure

        enc = mmse_enclosure(rho=rho, delta=delta, digits=20 if digits is None else digits)
        out = {"rho": rho, "delta": delta, "value": enc.value, "error": enc.error,
               "interval": [enc.lo, enc.hi], "width": enc.width, "mid": enc.mid,
               "method": enc.method, "what_is_certified": enc.what_is_certified,
               "precision_bits": enc.precision, "support": enc.extra["support"],
               "support_masses": enc.extra["support_masses"]}
        emit(out, as_json, lambda o: (
            f"mmse(Delta={delta}; rho={rho}) in [{o['interval'][0]}, {o['interval'][1]}] "
            f"(width {o['width']:.1e}, certified)\nmethod: {o['method']}\n"
            f"certified: {o['what_is_certified']}"))
        return
    from .numerics import wishart

    est = wishart.mmse_estimate(delta, rho=rho, dps=digits)
    if digits is None:
        value = est.value
    else:
        import mpmath

        value = mpmath.nstr(est.value, digits)
    out = {"rho": rho, "delta": delta, "value": value, "error": est.error, "method": est.method,
           "precision": est.precision}
    emit(out, as_json, lambda o: (
        f"mmse(Delta={delta}; rho={rho}) = {o['value']} +- {o['error']:.1e}\nmethod: {o['method']}"))


cli.add_command(sweep)


def main() -> None:
    from .certified import NotCertifiable
    from .channels import ChannelError

    if len(sys.argv) == 1:
        sys.argv.append("--help")
    try:
        cli(standalone_mode=False)
    except (OptionError, InputError, ChannelError) as e:
        click.echo(f"aim-sym: error: {e}", err=True)
        sys.exit(2)
    except NotCertifiable as e:
        click.echo(f"aim-sym: error: --certified: {e}", err=True)
        sys.exit(2)
    except click.exceptions.Abort:
        click.echo("aim-sym: aborted", err=True)
        sys.exit(1)
    except click.ClickException as e:
        click.echo(f"aim-sym: error: {e.format_message()}", err=True)
        sys.exit(e.exit_code)
    except ConvergenceError as e:
        click.echo(f"aim-sym: no convergence: {e}", err=True)
        sys.exit(3)
