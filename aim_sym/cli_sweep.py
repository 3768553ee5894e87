"""The ``aim-sym sweep`` commands: resumable sweeps over grids and over the skip strength.

Every option is checked before any computation (a refused value is one line, exit 2), the output
paths included, so a finished sweep is never lost for want of a place to write it. Points that
failed are kept as rows (in the CSV and the state folder ``OUT.partial/``) and the command exits
with status 3; running it again computes only those.
"""

from __future__ import annotations

import math
import sys

import click

from .channels import (
    BETA_DOMAIN,
    BUILTIN,
    DELTA_OUT_DOMAIN,
    EPSILON_DOMAIN,
    SKIP_DOMAIN,
    TOKENS_ARGMAX,
    TOKENS_GAUSSIAN,
)
from .cli_common import MODELS, emit, fail, parse_grid, progress_printer, smi_args
from .domains import RHO, Domain
from .numerics.records import InputError
from .numerics.smi_fibre import SKIP_FLOORS
from .numerics.smi_sequential import SEQ_DIGITS
from .plots import check_plot_path, plot_phase
from .sweep import (
    MAX_POINTS,
    SKIP_LAYERS,
    aim_point,
    check_skip_sweep,
    failed,
    grid,
    run_sweep,
    skip_columns,
    smi_point,
)
from .sweep import sweep_skip as run_skip_sweep
from .tables import check_writable, write_csv

MAX_WORKERS = 256
ARGMAX_CHANNELS = ("hardmax", "noisy-hardmax")
"""Built-in channels whose token count follows ``TOKENS_ARGMAX`` (the others: ``TOKENS_GAUSSIAN``),
the domains declared next to the channels (aim_sym/channels.py)."""


@click.group()
def sweep() -> None:
    """Resumable sweeps (local cores, or a Dask cluster with --scheduler)."""


def _list(spec: str | None, option: str, cast=float) -> list | None:
    """``a,b,c`` or ``start:stop:num`` as a list (at most MAX_POINTS values)."""
    if spec is None:
        return None
    if ":" in spec:
        return [cast(x) for x in parse_grid(spec, option)]
    try:
        values = [cast(x) for x in spec.split(",")]
    except ValueError:
        fail(option, "a list a,b,c or a grid start:stop:num", spec)
    if len(values) > MAX_POINTS:
        fail(option, f"a list of at most {MAX_POINTS} values", spec)
    return values


def _each(values: list[float], domain: Domain, option: str) -> None:
    """Every value of a list option in the parameter's declared domain (aim_sym.domains)."""
    for v in values:
        if not domain.contains(v):
            fail(option, f"a list of values, each {domain.allowed()}", v)


def _check_workers(workers: int | None) -> None:
    if workers is not None and not 1 <= workers <= MAX_WORKERS:
        fail("--workers", f"an integer in 1..{MAX_WORKERS}", workers)


def _check_scheduler(scheduler: str | None) -> None:
    if scheduler is None:
        return
    try:
        import distributed  # noqa: F401
    except ImportError:
        fail("--scheduler", "used with Dask installed (pip install 'aim-sym[dask]')", scheduler)


def _finish(rows: list[dict], out_path: str) -> None:
    """Exit 3 (after the output) if some points failed; their rows stay in the CSV."""
    n = failed(rows)
    if n:
        click.echo(f"aim-sym: {n} of {len(rows)} points failed (rows kept in {out_path}; run the "
                   "same command again to retry them)", err=True)
        sys.exit(3)


def _aim_axes(channel, rhos, ts, tokens_, bs, betas, epsilon, delta_out, skips) -> dict:
    if skips is not None:
        fail("--skips", "not given with --model aim (it does not apply)", skips)
    name = channel or "hardmax"
    if name not in BUILTIN:
        fail("--channel", "one of " + ", ".join(BUILTIN), name)
    domain = TOKENS_ARGMAX if name in ARGMAX_CHANNELS else TOKENS_GAUSSIAN
    for t in ts:
        domain.check(t, label="--tokens")
    r = _list(rhos or "0.5", "--rhos")
    _each(r, RHO, "--rhos")
    axes: dict = {"channel": [name], "tokens": ts, "rho": r}
    if bs is not None:
        if name != "softmax":
            fail("--betas", "given only with --channel softmax", betas)
        axes["beta"] = bs
    if name == "noisy-hardmax":
        if epsilon is None:
            fail("--epsilon", f"{EPSILON_DOMAIN.allowed()} (required for noisy-hardmax)", epsilon)
        EPSILON_DOMAIN.check(epsilon, label="--epsilon")
        axes["epsilon"] = [epsilon]
    elif epsilon is not None:
        fail("--epsilon", "given only with --channel noisy-hardmax", epsilon)
    if name == "linear-noisy":
        if delta_out is None:
            fail("--delta-out", f"{DELTA_OUT_DOMAIN.allowed()} (required for linear-noisy)",
                 delta_out)
        DELTA_OUT_DOMAIN.check(delta_out, label="--delta-out")
        axes["delta_out"] = [delta_out]
    elif delta_out is not None:
        fail("--delta-out", "given only with --channel linear-noisy", delta_out)
    return axes


@sweep.command("grid")
@click.option("--model", default="aim", show_default=True)
@click.option("--channel", default=None, help="aim: a built-in channel (default hardmax)")
@click.option("--alphas", required=True, help="start:stop:num or a,b,c")
@click.option("--rhos", default=None, help="aim: list of rho (default 0.5)")
@click.option("--tokens", "tokens_", default="2", show_default=True, help="list of T")
@click.option("--betas", default=None, help="list of beta (aim: softmax only)")
@click.option("--epsilon", type=float, default=None, help="aim: noisy-hardmax flip probability")
@click.option("--delta-out", type=float, default=None, help="aim: linear-noisy output noise")
@click.option("--skips", default=None, help="smi: list of skip strengths c (default 1)")
@click.option("--layers", type=int, default=2, show_default=True, help="smi: depth L")
@click.option("--out", "out_path", required=True)
@click.option("--workers", type=int, default=None, help="local processes, 1..256 (default: all "
              "cores)")
@click.option("--scheduler", default=None, help="Dask scheduler ADDRESS")
@click.option("--json", "as_json", is_flag=True)
def sweep_grid(model, channel, alphas, rhos, tokens_, betas, epsilon, delta_out, skips, layers,
               out_path, workers, scheduler, as_json):
    """SE over a grid of (alpha, rho, T, beta) for the AIM or (alpha, c, beta) for the SMI:
    one tidy CSV row per point."""
    if model not in MODELS:
        fail("--model", "one of " + ", ".join(MODELS), model)
    _check_workers(workers)
    a = _list(alphas, "--alphas")
    if not all(math.isfinite(x) and x >= 0 for x in a):
        fail("--alphas", "finite values >= 0", alphas)
    ts = _list(tokens_, "--tokens", int)
    bs = None if betas is None else _list(betas, "--betas")
    if bs is not None:
        _each(bs, BETA_DOMAIN, "--betas")
    if model == "aim":
        axes = _aim_axes(channel, rhos, ts, tokens_, bs, betas, epsilon, delta_out, skips)
        task = aim_point
    else:
        for opt, val in (("--rhos", rhos), ("--channel", channel), ("--epsilon", epsilon),
                         ("--delta-out", delta_out)):
            if val is not None:
                fail(opt, "not given with --model smi (it does not apply)", val)
        cs = _list(skips or "1", "--skips")
        _each(cs, SKIP_DOMAIN, "--skips")
        floor = SKIP_FLOORS["sequential"]
        for c in cs:
            if c < floor:
                fail("--skips", f"values >= {floor:g} for the SMI SE (the validated range)", c)
        if layers != 2:
            fail("--layers", "2 (the SMI SE is implemented for L = 2)", layers)
        if ts != [2]:
            fail("--tokens", "2 for --model smi", tokens_)
        axes = {"layers": [layers], "tokens": ts, "skip": cs, "beta": bs or [1.0]}
        task = smi_point
    axes["alpha"] = a
    size = math.prod(len(v) for v in axes.values())
    if size > MAX_POINTS:
        fail("--alphas", f"a grid of at most {MAX_POINTS} points with the other axes "
             f"({size} requested)", alphas)
    _check_scheduler(scheduler)
    check_writable(out_path, "--out")
    rows = run_sweep(task, grid(**axes), out=out_path, workers=workers, scheduler=scheduler,
                     progress=progress_printer)
    write_csv(out_path, rows)
    emit({"out": out_path, "points": len(rows), "failed": failed(rows)}, as_json)
    _finish(rows, out_path)


@sweep.command("skip")
@click.option("--layers", type=int, default=2, show_default=True)
@click.option("--tokens", type=int, default=2, show_default=True)
@click.option("--beta", type=float, default=1.0, show_default=True)
@click.option("--skips", required=True, help="start:stop:num or a,b,c")
@click.option("--out", "out_path", required=True)
@click.option("--plot", "plot_path", default=None, help="figure: .png, .pdf or .svg")
@click.option("--no-sequential", is_flag=True, help="weak thresholds only (fast)")
@click.option("--digits", type=int, default=None, help="L = 2: digits of the sequential "
              "threshold (bar below 5 x 10^-digits; default 4)")
@click.option("--workers", type=int, default=1, show_default=True, help="local processes, 1..256")
@click.option("--json", "as_json", is_flag=True)
def sweep_skip(layers, tokens, beta, skips, out_path, plot_path, no_sequential, digits, workers,
               as_json):
    """SMI deep attention: weak and sequential thresholds against the skip strength c
    (L = 3: the weak thresholds of the three layers)."""
    if layers in (2, 3):
        args = smi_args({"channel": None, "layers": layers, "skip": 1.0, "beta": beta,
                         "tokens": tokens})
    else:   # L = 4, 5: the depth-L kernel's own check (per c, in check_skip_sweep)
        if layers not in SKIP_LAYERS:
            fail("--layers", f"one of {list(SKIP_LAYERS)} for sweep skip", layers)
        args = {"layers": layers, "beta": beta}
    cs = _list(skips, "--skips")
    _each(cs, SKIP_DOMAIN, "--skips")
    try:    # the engines' own ranges (per depth), named by the options
        check_skip_sweep(skips=cs, layers=layers, tokens=tokens, beta=args["beta"])
    except InputError as e:
        name = str(e).split(" must", 1)[0]
        raise InputError("--" + {"skip": "skips"}.get(name, name) + str(e)[len(name):]) from None
    _check_workers(workers)
    if plot_path:
        check_plot_path(plot_path, "--plot")
        check_writable(plot_path, "--plot")
    if digits is not None and (no_sequential or args["layers"] != 2):
        fail("--digits", "used only for the L = 2 sequential threshold (not with "
             "--no-sequential or --layers 3)", digits)
    if digits is not None and digits not in SEQ_DIGITS:
        fail("--digits", f"an integer in {min(SEQ_DIGITS)}..{max(SEQ_DIGITS)}", digits)
    check_writable(out_path, "--out")
    rows = run_skip_sweep(skips=cs, layers=args["layers"], tokens=tokens, beta=args["beta"],
                          out=out_path, progress=progress_printer, sequential=not no_sequential,
                          workers=workers, digits=4 if digits is None else digits)
    write_csv(out_path, rows, columns=list(skip_columns(args["layers"])))
    if plot_path:
        plot_phase(rows, plot_path)
    keys = [f"weak_layer{l}" for l in range(args["layers"], 0, -1)]
    if args["layers"] == 2:
        keys.append("sequential_layer1")
    emit({"out": out_path, "plot": plot_path, "rows": rows}, as_json, lambda o: "\n".join(
        [f"{'c':>6s} " + " ".join(f"{k.replace('_', ' '):>22s}" for k in keys)]
        + [f"{r['skip']:6.3g} " + " ".join(_pm(r, k) for k in keys) + f"  {r['status']}"
           for r in rows]
        + [f"CSV: {out_path}" + (f", plot: {plot_path}" if plot_path else "")]))
    _finish(rows, out_path)


def _pm(row: dict, key: str) -> str:
    v, e = row.get(key), row.get(f"{key}_error")
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return f"{'-':>22s}"
    e = e if isinstance(e, (int, float)) and math.isfinite(e) else math.nan
    return f"{v:>12.9g} +- {e:7.1e}"
