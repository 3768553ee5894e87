"""The ``aim-sym sweep`` commands: resumable sweeps over grids and over the skip strength."""

from __future__ import annotations

import math

import click

from .cli_common import MODELS, emit, fail, parse_grid, progress_printer, smi_args


@click.group()
def sweep() -> None:
    """Resumable sweeps (local cores, or a Dask cluster with --scheduler)."""


def _list(spec: str | None, option: str, cast=float) -> list | None:
    if spec is None:
        return None
    if ":" in spec:
        return [cast(x) for x in parse_grid(spec, option)]
    try:
        return [cast(x) for x in spec.split(",")]
    except ValueError:
        fail(option, "a list a,b,c or a grid start:stop:num", spec)


@sweep.command("grid")
@click.option("--model", default="aim", show_default=True)
@click.option("--channel", default=None, help="aim: a built-in channel (default hardmax)")
@click.option("--alphas", required=True, help="start:stop:num or a,b,c")
@click.option("--rhos", default=None, help="aim: list of rho (default 0.5)")
@click.option("--tokens", "tokens_", default="2", show_default=True, help="list of T")
@click.option("--betas", default=None, help="list of beta")
@click.option("--skips", default=None, help="smi: list of skip strengths c (default 1)")
@click.option("--layers", type=int, default=2, show_default=True, help="smi: depth L")
@click.option("--out", "out_path", required=True)
@click.option("--workers", type=int, default=None, help="local processes (default: all cores)")
@click.option("--scheduler", default=None, help="Dask scheduler ADDRESS")
@click.option("--json", "as_json", is_flag=True)
def sweep_grid(model, channel, alphas, rhos, tokens_, betas, skips, layers, out_path, workers,
               scheduler, as_json):
    """SE over a grid of (alpha, rho, T, beta) for the AIM or (alpha, c, beta) for the SMI:
    one tidy CSV row per point."""
    from .numerics.sweep import aim_point, grid, run_sweep, smi_point

    if model not in MODELS:
        fail("--model", "one of aim, smi", model)
    a = _list(alphas, "--alphas")
    ts = _list(tokens_, "--tokens", int)
    if any(x < 0 for x in a):
        fail("--alphas", "values >= 0", alphas)
    if workers is not None and workers < 1:
        fail("--workers", ">= 1", workers)
    bs = None if betas is None else _list(betas, "--betas")
    if bs is not None and any(b <= 0 for b in bs):
        fail("--betas", "values > 0", betas)
    if model == "aim":
        for opt, val in (("--skips", skips),):
            if val is not None:
                fail(opt, "not given with --model aim (it does not apply)", val)
        r = _list(rhos or "0.5", "--rhos")
        if any(x <= 0 for x in r):
            fail("--rhos", "values > 0", rhos)
        if any(t < 2 for t in ts):
            fail("--tokens", "values >= 2", tokens_)
        axes = {"channel": [channel or "hardmax"], "tokens": ts, "rho": r, "alpha": a}
        if bs is not None:
            axes["beta"] = bs
        task = aim_point
    else:
        for opt, val in (("--rhos", rhos), ("--channel", channel)):
            if val is not None:
                fail(opt, "not given with --model smi (it does not apply)", val)
        cs = _list(skips or "1", "--skips")
        if any(c <= 0 for c in cs):
            fail("--skips", "values > 0", skips)
        if layers != 2:
            fail("--layers", "2 (the SMI SE is implemented for L = 2)", layers)
        if ts != [2]:
            fail("--tokens", "2 for --model smi", tokens_)
        axes = {"layers": [layers], "tokens": ts, "skip": cs, "beta": bs or [1.0], "alpha": a}
        task = smi_point
    rows = run_sweep(task, grid(**axes), out=out_path, workers=workers, scheduler=scheduler,
                     progress=progress_printer)
    emit({"out": out_path, "points": len(rows),
          "failed": sum(not str(r_["status"]).startswith("converged") for r_ in rows)}, as_json)


@sweep.command("skip")
@click.option("--layers", type=int, default=2, show_default=True)
@click.option("--tokens", type=int, default=2, show_default=True)
@click.option("--beta", type=float, default=1.0, show_default=True)
@click.option("--skips", required=True, help="start:stop:num or a,b,c")
@click.option("--out", "out_path", required=True)
@click.option("--plot", "plot_path", default=None)
@click.option("--no-sequential", is_flag=True, help="weak thresholds only (fast)")
@click.option("--json", "as_json", is_flag=True)
def sweep_skip(layers, tokens, beta, skips, out_path, plot_path, no_sequential, as_json):
    """SMI deep attention: weak and sequential thresholds against the skip strength c
    (L = 3: the weak thresholds of the three layers)."""
    from .numerics import smi

    args = smi_args({"channel": None, "layers": layers, "skip": 1.0, "beta": beta,
                     "tokens": tokens})
    cs = _list(skips, "--skips")
    if any(c <= 0 for c in cs):
        fail("--skips", "values > 0", skips)
    rows = smi.sweep_skip(skips=cs, layers=args["layers"], tokens=tokens, beta=args["beta"],
                          out=out_path, progress=progress_printer, sequential=not no_sequential)
    if plot_path:
        smi.plot_phase(rows, plot_path)
    keys = [f"weak_layer{l}" for l in range(args["layers"], 0, -1)]
    if args["layers"] == 2:
        keys.append("sequential_layer1")
    emit({"out": out_path, "plot": plot_path, "rows": rows}, as_json, lambda o: "\n".join(
        [f"{'c':>6s} " + " ".join(f"{k.replace('_', ' '):>22s}" for k in keys)]
        + [f"{r['skip']:6.3g} " + " ".join(_pm(r, k) for k in keys) + f"  {r['status']}"
           for r in rows]
        + [f"CSV: {out_path}" + (f", plot: {plot_path}" if plot_path else "")]))


def _pm(row: dict, key: str) -> str:
    v, e = row.get(key), row.get(f"{key}_error")
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return f"{'-':>22s}"
    return f"{v:>12.9g} +- {e:7.1e}"
