"""The aim-sym command line: se, curve, threshold, check, amp, derive, sweep, mmse (``--json``).

A thin layer over the public API (docs/api.md): parse the options, build the model
(:class:`aim_sym.AIM` or :class:`aim_sym.SMI`; every value is validated by the parameter
domains, whose errors are relabelled here with the option's spelling), call one method, emit.
Bad values exit with status 2 and one line naming the option and its allowed range.
"""

from __future__ import annotations

import json
import math
import sys

import click
import numpy as np

from . import cli_aim_channels as aim_channels
from . import cli_smi_general as general
from .cli_common import (
    MODELS,
    OptionError,
    _finite,
    emit,
    fail,
    given,
    param_values,
    parse_grid,
    progress_printer,
    relabel,
    smi_channel,
)
from .cli_gd import gd
from .cli_sweep import sweep
from .domains import TOL, DomainError
from .numerics.records import ConvergenceError, InputError, atomic_write


# ----------------------------------------------------------------------------- options
class RhoOption(click.ParamType):
    """``--rho``: one number, or ``r1,r2`` (the two layers of ``--model aim --layers 2``)."""

    name = "rho"

    def convert(self, value, param, ctx):
        if isinstance(value, (float, tuple)):
            return value
        try:
            parts = tuple(float(v) for v in str(value).split(","))
        except ValueError:
            self.fail(f"must be a number or r1,r2; got {value!r}", param, ctx)
        if len(parts) > 2:
            self.fail(f"must be a number or r1,r2; got {value!r}", param, ctx)
        return parts[0] if len(parts) == 1 else parts


RHO_OPTION = RhoOption()


def model_options(f):
    opts = [
        click.option("--model", default="aim", show_default=True, help="aim, smi or erm"),
        click.option("--channel", default=None, help="aim: linear, linear-noisy, softmax, "
                     "hardmax, noisy-hardmax, sparsemax; smi: deep-attention, noisy-deep-attention, "
                     "noisy-attention, sign-product"),
        click.option("--channel-file", default=None, help="a Python file defining a channel "
                     "(runs the file's code)"),
        click.option("--tokens", type=int, default=2, show_default=True, help="T (aim) or M (smi)"),
        click.option("--rho", type=RHO_OPTION, default=None, help="aim: width ratio rho > 0 "
                     "(--layers 2: r1,r2 per layer, or one value for both)"),
        click.option("--beta", type=float, default=None, help="inverse temperature > 0"),
        click.option("--delta-out", type=float, default=None, help="aim linear-noisy: noise >= 0"),
        click.option("--epsilon", type=float, default=None, help="aim noisy-hardmax: flip prob"),
        click.option("--layers", type=int, default=None, help="smi deep-attention: depth L"),
        click.option("--skip", type=float, default=None, help="smi deep-attention: skip c >= 0"),
        click.option("--param", "param", multiple=True, help="channel-file parameter "
                     "NAME=VALUE (repeatable)"),
        click.option("--noise", type=float, default=None, help="smi: Gaussian output noise "
                     "variance Delta (noisy channels; with deep-attention: its noisy version)"),
        click.option("--design", type=click.Choice(["shared", "independent"]), default=None,
                     help="aim --layers 2, se and curve: the tokens the two layers see, shared "
                     "(deep attention; default) or independent (one copy per layer)"),
        click.option("--rows", type=int, default=None, help="smi sign-product: rows P"),
        click.option("--seed", type=int, default=None, help="smi general channels: seed of the "
                     "scrambled Sobol rules (default 0)"),
        click.option("--kappa0", type=float, default=None, help="erm: the target's rank ratio"),
        click.option("--delta", type=float, default=None, help="erm: label noise variance Delta "
                     ">= 0 (default 0)"),
        click.option("--lam", type=float, default=None, help="erm: weight decay lambda: 0 "
                     "(factorised, T = 2) or >= 1e-3 for the SE (default 0.01)"),
        click.option("--beta0", type=float, default=None, help="erm: the teacher's inverse "
                     "temperature > 0 (default 1)"),
        click.option("--json", "as_json", is_flag=True, help="print JSON"),
    ]
    for o in reversed(opts):
        f = o(f)
    return f


AIM_ONLY = ("rho", "delta_out", "epsilon")
SMI_ONLY = ("layers", "skip", "noise", "rows", "seed")
ERM_ONLY = ("kappa0", "delta", "lam", "beta0")
NOT_WITH = {"aim": SMI_ONLY + ERM_ONLY, "smi": AIM_ONLY + ERM_ONLY,
            "erm": ("channel", "channel_file", "param") + AIM_ONLY + SMI_ONLY}


def check_model(kw: dict, allowed: tuple = ("aim", "smi"), *, deep_aim: bool = False) -> str:
    """The --model, after refusing the options that do not apply to it. ``--model aim
    --layers 1`` is the one-layer AIM; ``--layers 2`` (two tied attention layers, THEORY 1.6)
    only where ``deep_aim`` (threshold weak --small-width)."""
    model = kw["model"]
    if model not in MODELS:
        fail("--model", "one of " + ", ".join(MODELS), model)
    if model not in allowed:
        fail("--model", "one of " + ", ".join(allowed) + " for this command", model)
    skip_ok = ()
    if model == "aim" and kw.get("layers") is not None:
        if kw["layers"] == 1:
            if kw.get("skip") is not None:
                fail("--skip", "omitted with --model aim --layers 1 (one layer has no skip)",
                     kw["skip"])
            kw["layers"] = None                      # the one-layer AIM, exactly as without it
        elif kw["layers"] != 2:
            fail("--layers", "1 or 2 for --model aim", kw["layers"])
        elif kw["layers"] == 2 and not deep_aim:
            fail("--layers", "1 for this command (--model aim --layers 2 serves threshold weak "
                 "--small-width, se, curve and derive)", kw["layers"])
        elif kw["layers"] == 2:
            skip_ok = ("layers", "skip", "noise")
    if isinstance(kw.get("rho"), tuple) and not (model == "aim" and kw.get("layers") == 2):
        fail("--rho", "one number > 0 (two, r1,r2, only with --model aim --layers 2)",
             ",".join(map(str, kw["rho"])))
    if kw.get("design") is not None and not (model == "aim" and kw.get("layers") == 2):
        fail("--design", "used only with --model aim --layers 2 (se and curve)", kw["design"])
    for name in (n for n in NOT_WITH[model] if n not in skip_ok):
        if kw.get(name) not in (None, ()):
            fail("--" + name.replace("_", "-"), f"not given with --model {model} (it does not apply)",
                 kw[name])
    return model


def erm_opts(kw: dict) -> dict:
    """The ERM model options (kappa0, delta, lam, tokens, beta, beta0) of the command line."""
    return {k: kw.get(k) for k in ("kappa0", "delta", "lam", "tokens", "beta", "beta0")}


def aim_channel(kw: dict):
    """The AIM channel named by the options, its parameter values bound (domain-checked)."""
    from . import channels

    values = {k: kw[k] for k in ("beta", "delta_out", "epsilon") if kw.get(k) is not None}
    if kw.get("channel_file"):
        from .channel_file import from_file

        if kw.get("channel"):
            fail("--channel", "omitted with --channel-file", kw["channel"])
        return from_file(kw["channel_file"], tokens=kw["tokens"],
                         **param_values(kw.get("param")), **values)
    if kw.get("param"):
        fail("--param", "given only with --channel-file", kw["param"][0])
    name = kw.get("channel") or "hardmax"
    if name == "sparsemax":
        fail("--channel", "sparsemax used with se, curve, check (T = 2), derive and threshold "
             "weak --small-width; amp is not implemented for it", name)
    if name not in channels.BUILTIN:
        fail("--channel", "one of " + ", ".join(channels.BUILTIN), name)
    return channels.builtin(name, tokens=kw["tokens"], **values)


def aim_model(kw: dict, *, small_width: bool = False):
    """The :class:`aim_sym.AIM` named by the options (rho defaults to 0.5; refused with
    ``small_width``, where rho -> 0)."""
    from .models import AIM

    if small_width and kw.get("rho") is not None:
        fail("--rho", "omitted with --small-width (rho -> 0)", kw["rho"])
    ch = aim_channel(kw)
    from .noisy_polyhedral import NoisyPiecewiseChannel

    if isinstance(ch, NoisyPiecewiseChannel):
        from .noisy_polyhedral_model import NoisyPolyhedralAIM

        model = NoisyPolyhedralAIM
    else:
        model = AIM
    return model(ch) if kw.get("rho") is None else model(ch, rho=kw["rho"])


def _smi_layers(kw: dict) -> int:
    """--layers of deep-attention SMI, 2 when not given (0 is passed on, to be refused)."""
    return 2 if kw.get("layers") is None else kw["layers"]


def smi_model(kw: dict):
    """The noiseless deep-attention SMI of the options; a general channel's options (a channel
    file, --noise, a general built-in) reach here only in commands that do not serve them."""
    from .models import SMI

    if general.wants_general(kw):
        opt = ("--channel-file" if kw.get("channel_file") else "--noise"
               if kw.get("noise") is not None else "--channel")
        fail(opt, "used with threshold weak, se, curve, derive or check for a general SMI channel "
             "(this command serves the noiseless deep-attention engine)",
             kw.get("channel_file") or kw.get("noise") or kw.get("channel"))
    for name in ("param", "rows", "seed"):
        if kw.get(name) not in (None, ()):
            fail("--" + name, "used only with a general SMI channel", kw[name])
    return SMI(smi_channel(kw))


def _check_outputs(out_path: str | None, plot_path: str | None) -> None:
    """Refuse unwritable --out / --plot paths before computing anything."""
    from .tables import check_writable

    if out_path:
        check_writable(out_path, "--out")
    if plot_path:
        from .plots import check_plot_path

        check_plot_path(plot_path, "--plot")
        check_writable(plot_path, "--plot")


class _Deferred:
    """Output files written after the computation: a failure is remembered, the result is
    printed anyway, and the command then exits 2 naming the option."""

    def __init__(self) -> None:
        self.error: str | None = None

    def run(self, option: str, write) -> None:
        try:
            write()
        except (InputError, OSError) as e:
            if self.error is None:
                self.error = f"{option}: {e}"

    def finish(self) -> None:
        if self.error:
            click.echo(f"aim-sym: error: {self.error}", err=True)
            sys.exit(2)


def _dashed(check, *args, **kwargs):
    """Run a numeric layer's input ``check`` (or any call that names a parameter in its
    InputError) and return its value; the InputError names the parameter without the dashes of
    the option, so they are added."""
    try:
        return check(*args, **kwargs)
    except InputError as e:
        raise InputError("--" + str(e)) from None


def smi_depth_weak_cli(kw: dict, *, digits: int, sequential: bool = True) -> None:
    """``threshold weak --model smi`` at the (L, M) the kernels serve (aim_sym.smi_routes: L = 1,
    4, 5, 6 or M = 3): weak thresholds of every layer (numerics.smi_weak) and, where the branch
    kernel serves (L, M) and ``sequential``, the sequential ones on the last layer's branch
    (numerics.smi_branch_qmc)."""
    from .numerics import smi_branch_qmc
    from .thresholds import smi_depth_sequential, smi_depth_weak

    if kw.get("channel") not in (None, "deep-attention"):
        fail("--channel", "deep-attention for --layers 1, 4, 5, 6 or --tokens 3", kw["channel"])
    if given("digits"):
        fail("--digits", "omitted for --layers 1, 4, 5, 6 or --tokens 3 (L = 1 is exact; the "
             "others are Monte-Carlo-grade rules)", digits)
    for name in ("param", "rows", "seed"):
        if kw.get(name) not in (None, ()):
            fail("--" + name, "used only with a general SMI channel", kw[name])
    from .numerics import smi_weak

    args = {"layers": _smi_layers(kw), "tokens": kw["tokens"],
            "skip": 1.0 if kw.get("skip") is None else kw["skip"],
            "beta": 1.0 if kw.get("beta") is None else kw["beta"]}
    _dashed(smi_weak.check, **args)
    table = smi_depth_weak(**args, progress=progress_printer)
    served = (args["layers"], args["tokens"]) in smi_branch_qmc.SUPPORTED
    seq = (smi_depth_sequential(**args, progress=progress_printer)
           if sequential and served else ())
    res = [{"layer": r.details["layer"], "kind": r.details["kind"], "value": r.value,
            "error": r.error, "method": r.method,
            **{k: v for k, v in r.details.items() if k not in ("layer", "kind")}}
           for r in (*table, *seq)]
    if seq:
        note = ("weak thresholds of each layer at Q = 0; sequential: every shallower layer on the "
                f"layer-{args['layers']} branch (branch QMC, ~1% bars); the smallest ('first') "
                "is the next transition, the others are upper bounds only (docs/smi_depth.md)")
    elif args["layers"] == 1:
        note = ("L = 1: alpha = 1 / (M (M + 1)) exactly (y fixes z up to sign; skip and beta do "
                "not enter); one layer has "
                "no sequential threshold (docs/smi_depth.md)")
    elif sequential:
        note = ("weak thresholds of each layer at Q = 0; sequential thresholds are not computed "
                f"for L = {args['layers']}, M = {args['tokens']} (docs/smi_depth.md)")
    else:
        note = "weak thresholds of each layer at Q = 0 (--no-sequential)"
    out = {**dict(table.parameters), "thresholds": res, "note": note}
    emit(out, kw["as_json"], smi_thresholds_text)


def _with_error(value: float, error: float) -> str:
    """``value +- error`` with the value's digits down to the error's first digit (4 to 15)."""
    v, e = abs(float(value)), abs(float(error))
    digits = 15 if e == 0 or v == 0 else math.floor(math.log10(v)) - math.floor(math.log10(e)) + 1
    return f"{float(value):.{min(max(digits, 4), 15)}g} +- {e:.1e}"


def smi_thresholds_text(o: dict) -> str:
    """The human form of ``threshold weak --model smi`` (deep attention): one line per layer."""
    return "\n".join(
        [f"SMI deep attention L={o['layers']} M={o['tokens']} skip={o['skip']} "
         f"beta={o['beta']}: thresholds"]
        + [f"  layer {t['layer']} {t['kind']}: alpha = {_with_error(t['value'], t['error'])}"
           + (" (first)" if t.get("first") else "") for t in o["thresholds"]]
        + ([o["note"]] if o.get("note") else []))


def _learned_option(text: str, layers: int) -> tuple[int, ...]:
    """``--learned 1,4``: increasing layer indices ending with the last layer."""
    try:
        vals = tuple(int(x) for x in text.split(","))
    except ValueError:
        vals = ()
    if not vals or vals[-1] != layers or list(vals) != sorted(set(vals)) or vals[0] < 1:
        fail("--learned", f"increasing layer indices in 1..{layers} ending with {layers}, "
             "comma-separated (e.g. 1,4)", text)
    return vals


def _smi_cascade_cli(kind: str, kw: dict, learned: str | None, **flags) -> None:
    """``threshold weak --model smi --layers 3|4 [--tokens 3] --cascade [--learned 1,4]``: the
    next layer's cascade threshold on a joint branch (aim_sym.thresholds.smi_cascade;
    docs/smi_cascade.md)."""
    from . import smi_routes
    from .numerics import smi_cascade as sc
    from .thresholds import smi_cascade

    layers, tokens = _smi_layers(kw), kw["tokens"]
    depths = sorted({L for L, _ in sc.SUPPORTED})
    if kw["model"] != "smi" or layers not in depths:
        fail("--cascade", f"used with --model smi --layers one of {depths}", True)
    _dashed(smi_routes.engine, "cascade", layers=layers, tokens=tokens)
    if kind != "weak":
        fail("KIND", "weak with --cascade", kind)
    for opt, value in flags.items():
        if given(opt):
            fail("--" + opt.replace("_", "-"), "omitted with --cascade", value)
    if kw.get("channel") not in (None, "deep-attention") or general.wants_general(kw):
        fail("--channel", "deep-attention with --cascade",
             kw.get("channel") or kw.get("channel_file") or kw.get("noise"))
    skip = 1.0 if kw.get("skip") is None else kw["skip"]
    beta = 1.0 if kw.get("beta") is None else kw["beta"]
    from .numerics import smi_branch_qmc

    sets = [k[1] for k in sc.DEFAULTS_BY_TOKENS[tokens] if k[0] == layers]
    chosen = sets[0] if learned is None else _learned_option(learned, layers)
    if chosen not in sets:
        fail("--learned", "one of " + ", ".join(",".join(map(str, s)) for s in sets)
             + f" at --layers {layers}", learned)
    _dashed(smi_branch_qmc.check, layers=layers, tokens=tokens, skip=skip, beta=beta,
            learned=chosen)
    names = ", ".join(map(str, chosen))
    progress_printer(0, 1, f"L = {layers} cascade: joint branch of layers {names} (QMC grid)")
    r = smi_cascade(layers=layers, learned=chosen, tokens=tokens, skip=skip, beta=beta)
    progress_printer(1, 1, "done")
    d = r.details
    out = {**r.parameters, "threshold": r.quantity, "value": r.value, "error": r.error,
           "method": r.method, **d,
           "note": f"layer {d['layer']}'s stability on the joint branch of layers {names}; "
                   "'sequential' is the same layer on the branch without the newest learned "
                   "layer, from the same points (docs/smi_cascade.md)"}

    def text(o: dict) -> str:
        qs = ", ".join(f"q{l} = {o[f'q{l}']:.6g}" for l in o["learned"])
        lines = [f"SMI deep attention L={layers} M={tokens} skip={skip} beta={beta}: cascade "
                 f"(layer {o['layer']} once layers {names} are learned) alpha = {o['value']:.6g} +- "
                 f"{o['error']:.1e} at {qs}",
                 f"  branch of layers {', '.join(map(str, o['sequential_branch']))}, same "
                 f"points: {o['sequential']:.6g} +- {o['sequential_error']:.1e}; shift "
                 f"{o['shift']:+.4g} +- {o['shift_error']:.1e}"]
        lines += [f"  layer {j}: alpha mu = {s['eigenvalue']:.4g} +- {s['error']:.1e} at the "
                  "root" for j, s in o["stability"].items() if int(j) != o["layer"]]
        return "\n".join(lines)

    emit(out, kw["as_json"], text)


def _smi_branch_se(kw: dict, alpha: float) -> None:
    """``se --model smi --layers 3|4`` or ``--tokens 3``: the fixed point on the last layer's
    branch and each unlearned layer's stability there (numerics.smi_branch_qmc, ~1 % bars);
    Q = 0 is always a fixed point (its stability: threshold weak)."""
    from .numerics import smi_branch_qmc
    from .numerics.records import ConvergenceError

    if kw.get("channel") not in (None, "deep-attention"):
        fail("--channel", "deep-attention for se with --layers 3, 4 or --tokens 3", kw["channel"])
    for name in ("param", "rows", "seed"):
        if kw.get(name) not in (None, ()):
            fail("--" + name, "used only with a general SMI channel", kw[name])
    if not (isinstance(alpha, float) and alpha > 0 and alpha < float("inf")):
        fail("--alpha", "a finite number > 0", alpha)
    args = {"layers": _smi_layers(kw), "tokens": kw["tokens"],
            "skip": 1.0 if kw.get("skip") is None else kw["skip"],
            "beta": 1.0 if kw.get("beta") is None else kw["beta"]}
    _dashed(smi_branch_qmc.check, **args)
    L = args["layers"]
    out = {"model": "smi", "channel": "deep-attention", **args, "alpha": alpha,
           "fixed_points": [{"branch": "Q = 0", "note": "always a fixed point; stable below "
                             "every layer's weak threshold (threshold weak)"}]}
    try:
        r = smi_branch_qmc.branch_fixed_point(alpha=alpha, **args, progress=progress_printer)
        out["fixed_points"].append({"branch": f"layer {L} learned", **r,
                                    "stability": {str(k): v for k, v in
                                                  r["stability"].items()}})
    except ConvergenceError as e:
        out["fixed_points"].append({"branch": f"layer {L} learned", "note": str(e)})
    emit(out, kw["as_json"], lambda o: "\n".join(
        [f"SMI deep attention L={L} M={args['tokens']} skip={args['skip']} alpha={alpha}:"]
        + [f"  {f['branch']}: " + (f"q{L} = {f[f'q{L}']:.5g} +- {f[f'q{L}_error']:.1e}; "
                                  + "; ".join(f"layer {k}: alpha mu = {v['eigenvalue']:.4g} +- "
                                              f"{v['error']:.1e} ("
                                              + {True: "stable", False: "unstable",
                                                 None: "undecided"}[v["stable"]] + ")"
                                              for k, v in f["stability"].items())
                                  if f"q{L}" in f else f["note"]) for f in o["fixed_points"]]))


# ----------------------------------------------------------------------------- commands
@click.group()
@click.version_option(package_name="aim-sym")
def cli() -> None:
    """aim-sym: derive and solve Bayes-optimal learning of attention models."""


@cli.command()
@model_options
@click.option("--alpha", type=float, default=None, help="sample ratio alpha >= 0 (alpha_bar "
              "with --small-width); required unless --sigma")
@click.option("--sigma", type=float, default=None, help="erm --lam 0 (T = 2, kappa0 = Delta = "
              "0.5): solve at this Sigma in [25, 1e6] instead, alpha an output (between "
              "alpha_interp and ~0.25)")
@click.option("--small-width", is_flag=True, help="the rho -> 0 limit, alpha = alpha_bar rho")
@click.option("--digits", type=int, default=None, help="also solve the Bayes-optimal fixed "
              "point to this many digits (5..200; closed-form output maps only)")
@click.option("--direct", is_flag=True, help="erm: the direct (element-wise, ridge penalty "
              "(lam/2) d ||S||_F^2) parameterisation")
@click.option("--output-rule", type=click.Choice(["gh", "split"]), default=None,
              help="erm T = 2: the output side's rule, gh (tensor Gauss-Hermite, default) or "
              "split (the prox's jumps located on lines: bars 3-10x smaller, ~1.5x the time)")
@click.option("--cross-validate", is_flag=True, help="erm T = 2: lambda chosen to minimise the "
              "SE test error over [1e-3, 1] (what cross-validation estimates; replaces --lam)")
@click.option("--starts", default=None, help="aim --layers 2: the starts, a comma list of "
              "uninformed, informed, layer1, layer2 (default all four)")
@click.option("--out", "out_path", default=None, help="aim --layers 2: JSON file, written after "
              "each finished start")
@click.option("--resume", is_flag=True, help="aim --layers 2: skip the starts already in --out "
              "(same options)")
@click.option("--points", type=int, default=None, help="aim --layers 2: log2 of the Sobol points "
              "per scramble, 5..12 (default 9; fewer: quicker, larger bars)")
@click.option("--mmse1", type=float, default=None, help="aim --layers 2: solve on the finite "
              "branch at this mmse_1 in (0, 1] instead, alpha an output (up to alpha_PR; "
              "replaces --alpha)")
def se(alpha, sigma, small_width, digits, direct, output_rule, cross_validate, starts, out_path,
       resume, points, mmse1, **kw):
    """Solve the state evolution at one alpha: all fixed points, the Bayes-optimal flagged."""
    model = check_model(kw, ("aim", "smi", "erm"), deep_aim=True)
    if not (model == "aim" and kw.get("layers") == 2):
        for opt, value in (("starts", starts), ("out_path", out_path), ("resume", resume),
                           ("points", points), ("mmse1", mmse1)):
            if given(opt):
                fail("--" + opt.replace("_path", ""), "used only with --model aim --layers 2",
                     value)
    if mmse1 is not None and alpha is not None:
        fail("--mmse1", "given without --alpha (alpha is its output: exactly one of --alpha and "
             "--mmse1)", mmse1)
    if sigma is not None:
        if model != "erm":
            fail("--sigma", "used only with --model erm --lam 0", sigma)
        from . import cli_erm

        cli_erm.check_sigma_options(sigma, alpha=alpha, direct=direct, output_rule=output_rule,
                                    cross_validate=cross_validate, lam=kw.get("lam"),
                                    tokens=kw.get("tokens"))
        for opt, value in (("small_width", small_width), ("digits", digits)):
            if given(opt):
                fail("--" + opt.replace("_", "-"), "used only with --model aim", value)
        emit(cli_erm.se_sigma_json(sigma=sigma, **erm_opts(kw)), kw["as_json"],
             cli_erm.se_sigma_human)
        return
    if alpha is None and mmse1 is None:
        fail("--alpha", "given (a sample ratio alpha >= 0; or --sigma with --model erm --lam 0, "
             "or --mmse1 with --model aim --layers 2)", None)
    if output_rule is not None and model != "erm":
        fail("--output-rule", "used only with --model erm", output_rule)
    if cross_validate:
        _cross_validate_options(model, kw, output_rule=output_rule)
        from . import cli_erm

        emit(cli_erm.optimal_lambda_json(alpha=alpha, direct=direct, **erm_opts(kw)),
             kw["as_json"], cli_erm.optimal_lambda_human)
        return
    if model == "aim" and kw.get("layers") == 2:
        for opt, value in (("small_width", small_width), ("digits", digits), ("direct", direct)):
            if given(opt):
                fail("--" + opt.replace("_", "-"), "omitted for --model aim --layers 2", value)
        if mmse1 is not None:
            aim_channels.deep_aim_branch_se(kw, mmse1, starts=starts, out_path=out_path,
                                            resume=resume, points=points)
            return
        aim_channels.deep_aim_se(kw, alpha, starts=starts, out_path=out_path, resume=resume,
                                 points=points)
        return
    if model == "erm":
        if small_width:
            fail("--small-width", "used only with --model aim", True)
        if digits is not None:
            fail("--digits", "used only with --model aim", digits)
        from . import cli_erm

        if output_rule == "split" and (direct or kw["tokens"] != 2):
            fail("--output-rule", "gh for --direct and for --tokens 3..6 (split: T = 2, "
                 "factorised)", output_rule)
        if output_rule == "gh" and kw.get("lam") == 0:
            fail("--output-rule", "split or omitted with --lam 0 (omitted: Gauss-Hermite where "
                 "its bars were validated, Sigma <= 5, the piecewise rule beyond)", output_rule)
        emit(cli_erm.se_json(alpha=alpha, direct=direct, rule=output_rule or "gh",
                             **erm_opts(kw)), kw["as_json"], cli_erm.se_human)
        return
    if direct:
        fail("--direct", "used only with --model erm", True)
    if model == "smi":
        if small_width:
            fail("--small-width", "used only with --model aim", True)
        if digits is not None:
            fail("--digits", "used only with --model aim", digits)
        if general.wants_general(kw):
            emit(general.se(kw, alpha=alpha), kw["as_json"])
            return
        from . import smi_routes

        if _dashed(smi_routes.engine, "se", layers=_smi_layers(kw),
                   tokens=kw["tokens"]) == "kernel":
            _smi_branch_se(kw, alpha)
            return
        r = smi_model(kw).fixed_point(alpha=alpha)
        emit({"alpha": alpha, "Q": list(r.value), "error": list(r.error), **r.details},
             kw["as_json"])
        return
    if ((kw.get("channel") or "hardmax") == "hardmax" and kw["tokens"] >= 3
            and not small_width and not kw.get("channel_file")):
        if digits is not None:
            fail("--digits", "omitted for channel hardmax --tokens 3", digits)
        aim_channels.hardmax_se(kw, alpha)
        return
    if kw.get("channel") == "sparsemax" and not small_width:
        if digits is not None:
            fail("--digits", "omitted for channel sparsemax", digits)
        aim_channels.sparsemax_se(kw, alpha)
        return
    m = aim_model(kw, small_width=small_width)
    if small_width:
        r = m.small_width_state_evolution(alpha_bar=alpha)
        emit({"alpha_bar": alpha, "q": r.value, "fixed_points": r.details["fixed_points"]},
             kw["as_json"])
        return
    from .noisy_polyhedral_model import NoisyPolyhedralAIM

    if digits is not None and not isinstance(m, NoisyPolyhedralAIM) and m.compiled.discrete:
        fail("--digits", "used with a channel whose output map is a closed form (linear, "
             "linear-noisy, softmax, Gaussian channel files)", digits)
    r = m.state_evolution(alpha=alpha, digits=digits)
    d = r.details
    out = {"model": "aim", "channel": m.channel.name, "tokens": m.channel.tokens, "rho": m.rho,
           "alpha": alpha, "q": d["q"], "q_hat": d["q_hat"], "mmse": r.value, "phi": d["phi"],
           "error": r.error, "method": r.method, "precision": r.precision,
           **{k: d[k] for k in ("e_gen", "e_gen_error", "e_gen_plugin", "e_gen_plugin_error",
                                "e_gen_method")},
           "fixed_points": d["fixed_points"]}
    if "mmse_digits" in d:
        out["mmse_digits"] = d["mmse_digits"]
    emit(out, kw["as_json"], lambda o: (
        f"AIM {o['channel']} T={o['tokens']} rho={m.rho} alpha={alpha}: mmse = {o['mmse']:.15g} "
        f"+- {o['error']:.1e}, q = {o['q']:.15g}, q_hat = {o['q_hat']:.15g}, phi = {o['phi']}\n"
        + (f"e_gen (Bayes-optimal) = {o['e_gen']:.12g} +- {o['e_gen_error']:.1e}, plug-in = "
           f"{o['e_gen_plugin']:.12g} +- {o['e_gen_plugin_error']:.1e}\n"
           if o["e_gen"] is not None else "")
        + f"fixed points: {len(o['fixed_points'])}"))


@cli.command()
@model_options
@click.option("--alphas", default=None, help="start:stop:num (linear); required unless --sigmas")
@click.option("--sigmas", default=None, help="erm --lam 0 (T = 2, kappa0 = Delta = 0.5): "
              "start:stop:num, num values of Sigma log-spaced in [25, 1e6], alpha an output at "
              "each (between alpha_interp and ~0.25; ~5-8 min per Sigma)")
@click.option("--out", "out_path", default=None, help="CSV file")
@click.option("--plot", "plot_path", default=None, help="figure (.png, .pdf or .svg)")
@click.option("--tol", type=float, default=1e-13, show_default=True,
              help="aim: target error of each fixed point (1e-15..1e-2); larger is faster")
@click.option("--method", type=click.Choice(["traced", "per-alpha"]), default="traced",
              show_default=True,
              help="aim: trace alpha(Delta) once for all alphas, or solve each alpha on its own")
@click.option("--direct", is_flag=True, help="erm: the direct (element-wise, ridge penalty) "
              "parameterisation")
@click.option("--cross-validate", is_flag=True, help="erm T = 2: at each alpha the lambda "
              "minimising the SE test error (replaces --lam; ~1-3 min per alpha)")
@click.option("--resume", is_flag=True, help="aim --layers 2, erm --sigmas: reuse the alphas "
              "(Sigmas) finished by an earlier run with the same --out and options (state file "
              "OUT.partial.json)")
@click.option("--points", type=int, default=None, help="aim --layers 2: log2 of the Sobol points "
              "per scramble, 5..12 (default 9; fewer: quicker, larger bars)")
def curve(alphas, sigmas, out_path, plot_path, tol, method, direct, cross_validate, resume,
          points, **kw):
    """SE curve over an alpha grid (Bayes-optimal branch): CSV and a figure."""
    model = check_model(kw, ("aim", "smi", "erm"), deep_aim=True)
    if sigmas is not None:
        if model != "erm":
            fail("--sigmas", "used only with --model erm --lam 0", sigmas)
        _erm_sigma_curve(kw, sigmas, alphas=alphas, out_path=out_path, plot_path=plot_path,
                         direct=direct, cross_validate=cross_validate, resume=resume,
                         aim_only={"--" + o: v for o, v in (("tol", tol), ("method", method),
                                                            ("points", points)) if given(o)})
        return
    if alphas is None:
        fail("--alphas", "given (start:stop:num; or --sigmas with --model erm --lam 0)", None)
    if not (model == "aim" and kw.get("layers") == 2):
        for opt, value in (("resume", resume), ("points", points)):
            if given(opt):
                fail("--" + opt, "used only with --model aim --layers 2", value)
    grid = parse_grid(alphas, "--alphas")
    if not np.all(grid >= 0):
        fail("--alphas", "a grid of alpha >= 0", alphas)
    if direct and model != "erm":
        fail("--direct", "used only with --model erm", True)
    if cross_validate:
        _cross_validate_options(model, kw)
        for opt, value in (("tol", tol), ("method", method)):
            if given(opt):
                fail("--" + opt, "used only with --model aim", value)
    deep = model == "aim" and kw.get("layers") == 2
    hardmax3 = (model == "aim" and not deep and (kw.get("channel") or "hardmax") == "hardmax"
                and kw["tokens"] >= 3 and not kw.get("channel_file"))
    sparse = model == "aim" and not deep and kw.get("channel") == "sparsemax"
    if deep or hardmax3 or sparse:
        what = ("--model aim --layers 2" if deep else "--channel sparsemax" if sparse
                else "--channel hardmax --tokens 3")
        for opt, value in (("tol", tol), ("method", method)):
            if given(opt):
                fail("--" + opt, f"omitted for {what}", value)
        _check_outputs(out_path, plot_path)
        if deep:
            aim_channels.deep_aim_curve(kw, grid, out_path, plot_path, resume=resume,
                                        points=points)
        elif sparse:
            aim_channels.sparsemax_curve(kw, grid, out_path, plot_path)
        else:
            aim_channels.hardmax_curve(kw, grid, out_path, plot_path)
        return
    if model == "erm":
        for opt, value in (("tol", tol), ("method", method)):
            if given(opt):
                fail("--" + opt, "used only with --model aim", value)
        from . import cli_erm

        opts = erm_opts(kw)
        cli_erm.erm_model(**opts)  # validate before any output file is touched
        _check_outputs(out_path, plot_path)
        if cross_validate:
            rows = cli_erm.cross_validated_rows(alphas=grid, direct=direct,
                                                progress=progress_printer, **opts)
            ycols = ["test", "lam_opt"]
            title = (f"ERM kappa0={kw['kappa0']}, Delta={kw['delta'] or 0}, cross-validated "
                     f"lambda ({'direct' if direct else 'factorised'})")
        else:
            rows = cli_erm.curve_rows(alphas=grid, direct=direct, **opts)
            ycols = list(cli_erm.CURVE_COLUMNS)
            title = f"ERM kappa0={kw['kappa0']}, Delta={kw['delta'] or 0}, lambda={kw['lam']}"
    elif model == "smi":
        for opt, value in (("tol", tol), ("method", method)):
            if given(opt):
                fail("--" + opt, "used only with --model aim", value)
        if general.wants_general(kw):
            rows, ycols, title = general.curve(
                kw, grid, check_outputs=lambda: _check_outputs(out_path, plot_path))
        else:
            m = smi_model(kw)
            _check_outputs(out_path, plot_path)
            rows = [dict(r) for r in m.curve(alphas=grid, progress=progress_printer)]
            ycols = [k for k in rows[0] if k.startswith("Q_")] + ["e_gen"]
            title = f"SMI deep attention L={m.layers}, c={m.channel.skip}"
    else:
        m = aim_model(kw)
        TOL.check(tol)
        _check_outputs(out_path, plot_path)
        rows = [dict(r) for r in m.curve(alphas=grid, tol=tol, method=method,
                                         progress=progress_printer)]
        ycols = ["mmse"]
        title = f"AIM {m.channel.name}, T={m.channel.tokens}, rho={m.rho}"
    later = _Deferred()
    if out_path:
        from .tables import write_csv

        later.run("--out", lambda: write_csv(out_path, rows))
    if plot_path:
        from .plots import plot_curve

        later.run("--plot", lambda: plot_curve(
            [r for r in rows if all(r.get(c) is not None for c in ycols)], ycols, title=title,
            path=plot_path))
    from .tables import cell

    cols = list(dict.fromkeys(k for r in rows for k in r))  # a header; NaN and None empty
    emit({"rows": rows, "out": out_path, "plot": plot_path}, kw["as_json"],
         lambda o: "\n".join([",".join(cols)]
                             + [",".join(cell(r.get(k)) for k in cols) for r in rows]))
    later.finish()


def _erm_sigma_curve(kw: dict, spec: str, *, alphas: str | None, out_path: str | None,
                     plot_path: str | None, direct: bool, cross_validate: bool, resume: bool,
                     aim_only: dict) -> None:
    """``curve --model erm --lam 0 --sigmas start:stop:num``: the fixed-Sigma SE along a
    log-spaced Sigma grid (:func:`cli_erm.sigma_curve`); CSV written after each Sigma, figure
    of the test error against alpha at the end, progress on stderr."""
    from . import cli_erm

    cli_erm.check_sigma_curve_options(spec, alphas=alphas, direct=direct,
                                      cross_validate=cross_validate, aim_only=aim_only,
                                      **erm_opts(kw))
    cli_erm.sigma_grid(spec)  # refuse a bad grid before any file is touched
    cli_erm.erm_model(**erm_opts(kw))
    _check_outputs(out_path, plot_path)
    o = cli_erm.sigma_curve(spec=spec, out_path=out_path, plot_path=plot_path, resume=resume,
                            progress=progress_printer, **erm_opts(kw))
    later = _Deferred()
    if plot_path:
        later.run("--plot", lambda: cli_erm.sigma_curve_plot(o, plot_path))
    emit(o, kw["as_json"], cli_erm.sigma_curve_human)
    later.finish()


@cli.command()
@click.argument("kind")
@model_options
@click.option("--small-width", is_flag=True, help="aim: rho -> 0 (required for weak)")
@click.option("--digits", type=int, default=16, show_default=True, help="aim: digits of the "
              "closed form (1..1000); smi: accuracy of the sequential threshold (1..9, "
              "default 4)")
@click.option("--certified", is_flag=True, help="aim: a guaranteed interval by ball "
              "arithmetic (python-flint)")
@click.option("--no-sequential", is_flag=True, help="smi: weak thresholds only")
@click.option("--cascade", is_flag=True, help="smi --layers 3 or 4: the next layer's threshold "
              "on a joint branch (default: layers 1 and L learned; ~2-6 min)")
@click.option("--learned", default=None, help="smi --cascade: the learned layers, e.g. 1,4 or "
              "1,2,4 at --layers 4 (1,3 at --layers 3)")
@click.option("--direct", is_flag=True, help="erm perfect: the direct (element-wise, "
              "Frobenius) parameterisation instead of the factorised one")
def threshold(kind, small_width, digits, certified, no_sequential, cascade, learned, direct,
              **kw):
    """Weak-recovery or perfect-recovery threshold (closed form where it exists); for
    --model erm the interpolation or perfect-recovery threshold (THEORY 3)."""
    model = check_model(kw, ("aim", "smi", "erm"), deep_aim=True)
    if cascade:
        _smi_cascade_cli(kind, kw, learned, no_sequential=no_sequential, digits=digits,
                         certified=certified, small_width=small_width, direct=direct)
        return
    if learned is not None:
        fail("--learned", "used with --cascade", learned)
    if model == "aim" and kw.get("layers") == 2:
        if kw.get("design") is not None:
            fail("--design", "omitted for threshold --model aim --layers 2 (the small-width "
                 "limit has no common token part)", kw["design"])
        aim_channels.deep_aim_weak(kw, kind, small_width, certified, no_sequential, direct)
        return
    if model == "erm":
        for opt, value in (("small_width", small_width), ("certified", certified),
                           ("no_sequential", no_sequential)):
            if given(opt):
                fail("--" + opt.replace("_", "-"), "used only with --model aim or smi", value)
        if kind not in ("interpolation", "perfect"):
            fail("KIND", "interpolation or perfect for --model erm", kind)
        # lambda -> 0+ and the output temperatures do not enter; perfect recovery is noiseless
        unused = ("lam", "beta", "beta0") + (("delta",) if kind == "perfect" else ())
        for name in unused:
            if kw.get(name) is not None:
                fail("--" + name, f"omitted for the ERM {kind} threshold (it does not depend on "
                     "it)", kw[name])
        from . import cli_erm

        out = cli_erm.threshold_json(kind, direct=direct,
                                     digits=digits if given("digits") else 30, **erm_opts(kw))
        for name in unused:
            out.pop(name, None)
        emit(out, kw["as_json"], cli_erm.threshold_human)
        return
    if direct:
        fail("--direct", "used only with --model erm", True)
    if kind not in ("weak", "perfect"):
        fail("KIND", "weak or perfect", kind)
    if not 1 <= digits <= 1000:
        fail("--digits", "in 1..1000", digits)
    if model == "smi":
        if kind != "weak":
            fail("KIND", "weak for --model smi", kind)
        if certified:
            fail("--certified", "used only for closed-form thresholds (--model aim)", True)
        if small_width:
            fail("--small-width", "used only with --model aim", True)
        if general.wants_general(kw):
            for opt, value in (("no_sequential", no_sequential), ("digits", digits)):
                if given(opt):
                    fail("--" + opt.replace("_", "-"), "omitted for a general SMI channel (its "
                         "weak thresholds only)", value)
            emit(general.threshold_weak(kw), kw["as_json"], lambda o: "\n".join(
                [f"SMI {o['channel']} (P={o['P']}, M={o['M']}, {o['kind']}) {o['parameters']}"]
                + [f"weak threshold, rows {t['rows']}: alpha_c = {t['value']:.10g} +- "
                   f"{t['error']:.1e}  ({t['method']})" for t in o["thresholds"]]))
            return
        layers, tokens = _smi_layers(kw), kw["tokens"]
        from . import smi_routes

        if _dashed(smi_routes.engine, "threshold", layers=layers, tokens=tokens) == "kernel":
            smi_depth_weak_cli(kw, digits=digits, sequential=not no_sequential)
            return
        m = smi_model(kw)
        seq_digits = digits if given("digits") else 4
        if not 1 <= seq_digits <= 9:
            fail("--digits", "in 1..9 for --model smi (sequential threshold)", digits)
        table = m.thresholds(digits=seq_digits, sequential=not no_sequential,
                             progress=progress_printer)
        res = [{"layer": r.details["layer"], "kind": r.details["kind"], "value": float(r.value),
                "error": float(r.error), "method": r.method,
                **{k: v for k, v in r.details.items() if k not in ("layer", "kind")}}
               for r in table]
        out = {"model": "smi", **m.channel.as_dict(), "thresholds": res}
        if m.layers == 3:
            note = "L = 3: weak thresholds of each layer at Q = 0"
            if not no_sequential:
                note += ("; sequential: layers 1 and 2 once layer 3 is learned (deterministic "
                         "fibre lattice, error bar by refinement; --digits "
                         "does not apply); the smaller one ('first') is the next transition, the "
                         "other only an upper bound")
            out["note"] = note
        emit(out, kw["as_json"], smi_thresholds_text)
        return
    if no_sequential:
        fail("--no-sequential", "used only with --model smi", True)
    if kind == "weak" and not small_width:
        fail("--small-width", "given for a weak-recovery threshold of the AIM (at finite rho "
             "q > rho for every alpha > 0: no uninformative fixed point)", False)
    if (kind == "weak" and (kw.get("channel") or "hardmax") == "hardmax"
            and not kw.get("channel_file") and kw["tokens"] != 2):
        aim_channels.hardmax_weak(kw, digits, certified)
        return
    if kw.get("channel") == "sparsemax" and kind == "weak":
        aim_channels.sparsemax_weak(kw, digits, certified)
        return
    m = aim_model(kw, small_width=small_width)
    r = m.threshold(kind, small_width=small_width, digits=digits, certified=certified)
    out = {"model": "aim", "channel": m.channel.name, "tokens": m.channel.tokens,
           "threshold": r.quantity, "kind": r.details["kind"], "value": r.value, "error": r.error,
           "method": r.method, **{k: v for k, v in r.details.items() if k != "kind"}}
    emit(out, kw["as_json"], lambda o: (
        f"{r.quantity} ({m.channel.name}, T={m.channel.tokens}) = {o['value']}  "
        f"(error {o['error']:.1e})\nclosed form: {o['closed_form']}\nmethod: {o['method']}"))


@cli.command()
@model_options
def check(**kw):
    """Run the identity checks on a channel; exit 1 if any fails."""
    model = check_model(kw, deep_aim=True)
    if model == "smi" and general.wants_general(kw):
        out = general.check(kw)
        emit(out, kw["as_json"], lambda o: "\n".join(
            f"{'PASS' if r['passed'] else 'FAIL'}  {r['name']}: {r.get('detail', '')}"
            for r in o["checks"]) + f"\n{'all checks passed' if o['passed'] else 'SOME CHECKS FAILED'}")
        if not out["passed"]:
            sys.exit(1)
        return
    if model == "aim" and kw.get("layers") == 2:
        from .numerics import deep_aim_se

        results = deep_aim_se.run_checks(aim_channels.deep_aim_se_model(kw))
    elif (model == "aim" and (kw.get("channel") or "hardmax") == "hardmax" and kw["tokens"] >= 3
            and not kw.get("channel_file")):
        from .numerics import hardmax_qmc, hardmax_se

        if kw["tokens"] > 5:
            fail("--tokens", "2..5 for check --channel hardmax", kw["tokens"])
        for name in ("rho", "beta", "delta_out", "epsilon"):
            if kw.get(name) is not None:
                fail("--" + name.replace("_", "-"), "omitted for check --channel hardmax "
                     "--tokens 3..5", kw[name])
        results = (hardmax_qmc.run_checks(T=5) if kw["tokens"] == 5
                   else hardmax_se.run_checks(T=kw["tokens"]))
    elif model == "aim" and kw.get("channel") == "sparsemax":
        results = aim_channels.sparsemax_check(kw)
    else:
        m = smi_model(kw) if model == "smi" else aim_model(kw)
        results = [dict(r) for r in m.check()]
    ok = all(r["passed"] for r in results)
    emit({"passed": ok, "checks": results}, kw["as_json"], lambda o: "\n".join(
        f"{'PASS' if r['passed'] else 'FAIL'}  {r['name']}: {r['detail']}" for r in results
    ) + f"\n{'all checks passed' if ok else 'SOME CHECKS FAILED'}")
    if not ok:
        sys.exit(1)


def _damping_option(damping: str):
    if damping == "auto":
        return damping
    try:
        return float(damping)
    except ValueError:
        fail("--damping", "a number in [0, 1) or 'auto'", damping)


@cli.command()
@model_options
@click.option("--alpha", type=float, default=None, help="sample ratio alpha = N/D^2 > 0")
@click.option("--alphas", default=None, help="start:stop:num: run AMP at each (with --plot)")
@click.option("--dim", type=int, default=100, show_default=True, help="D: aim 10..2000, "
              "smi 10..10000")
@click.option("--seeds", type=int, default=4, show_default=True, help="1..1000")
@click.option("--max-iter", type=int, default=100, show_default=True, help="1..100000")
@click.option("--damping", default="auto", show_default=True,
              help="in [0, 1), or 'auto': AIM tries 0.5, 0.7, 0.8, 0.9 until a run does not "
                   "diverge; SMI uses 0.3")
@click.option("--rng-seed", type=int, default=0, show_default=True, help="an integer >= 0")
@click.option("--out", "out_path", default=None, help="JSON file (written after every seed)")
@click.option("--plot", "plot_path", default=None, help="figure: AMP points over the SE curve")
def amp(alpha, alphas, dim, seeds, max_iter, damping, rng_seed, out_path, plot_path, **kw):
    """Finite-size GAMP-RIE on synthetic data against the SE (mean, stderr, se_prediction)."""
    import os as _os

    _os.environ.setdefault("OMP_NUM_THREADS", "1")
    model = check_model(kw, deep_aim=True)
    damping = _damping_option(damping)
    settings = dict(dim=dim, seeds=seeds, max_iter=max_iter, rng_seed=rng_seed)
    if model == "aim" and kw.get("layers") == 2:
        if alpha is None or alphas is not None or plot_path:
            fail("--alpha", "one value for --model aim --layers 2 (no --alphas/--plot)",
                 alpha or alphas)
        _check_outputs(out_path, None)
        aim_channels.deep_aim_amp(kw, alpha=alpha, damping=damping, out_path=out_path,
                                  **settings)
        return
    if model == "smi":
        damping = 0.3 if damping == "auto" else damping
        if alpha is None or alphas is not None or plot_path:
            fail("--alpha", "one value for --model smi (no --alphas/--plot)", alpha or alphas)
        m = smi_model(kw)
        _check_outputs(out_path, None)
        r = m.amp(alpha=alpha, damping=damping, progress=progress_printer, **settings)
        d = r.details
        out = {"model": "smi", "alpha": alpha, "dim": dim, "seeds": seeds,
               "Q_mean": list(r.value), "Q_stderr": list(r.error),
               **{k: d[k] for k in ("Q_tail_mean", "Q_tail_stderr", "per_iteration",
                                    "converged_fraction", "se_prediction", "seconds")}}
        later = _Deferred()
        if out_path:
            later.run("--out", lambda: atomic_write(out_path, json.dumps(_finite(out), indent=2)))
        emit(out, kw["as_json"])
        later.finish()
        return
    if (alpha is None) == (alphas is None):
        fail("--alpha", "given (or --alphas, not both)", alpha)
    m = aim_model(kw) if kw.get("channel_file") else None  # built once for every route below
    if hasattr(m, "output") and (alphas is not None or plot_path):  # noisy piecewise
        fail("--alpha", "one value for a noisy piecewise channel file (no --alphas/--plot)",
             alpha or alphas)
    poly = m if getattr(m, "polyhedral", None) is not None else None
    if aim_channels.wants_piecewise_amp(kw) or poly is not None:
        if alpha is None or plot_path:
            fail("--alpha", "one value for a piecewise channel (no --alphas/--plot)",
                 alpha or alphas)
        _check_outputs(out_path, None)
        aim_channels.piecewise_amp(kw, alpha=alpha, damping=damping, out_path=out_path,
                                   model=poly, **settings)
        return
    grid = [alpha] if alpha is not None else [float(a) for a in parse_grid(alphas, "--alphas")]
    m = m or aim_model(kw)
    _check_outputs(out_path, plot_path)
    results = []
    for i, a in enumerate(grid):
        r = m.amp(alpha=a, damping=damping, progress=progress_printer,
                  out=None if out_path is None else
                  (out_path if len(grid) == 1 else f"{out_path}.{i}.json"), **settings)
        d = r.details
        results.append({"alpha": float(a), "dim": dim, "mean": r.value, "stderr": r.error,
                        "se_prediction": d["se_prediction"], "per_seed": d["per_seed"],
                        "per_iteration": d["per_iteration"], "converged": d["converged"],
                        "dampings": d["dampings"], "interrupted": d["interrupted"],
                        **{k: d[k] for k in (
                            "test_error", "test_error_stderr", "test_error_plugin",
                            "test_error_plugin_stderr", "e_gen_se", "e_gen_se_error",
                            "e_gen_se_plugin", "e_gen_se_plugin_error") if k in d}})
    later = _Deferred()
    if plot_path:
        from .plots import plot_amp_vs_se

        top = max(grid) * 1.3
        curve_rows = [dict(r) for r in m.curve(alphas=np.linspace(0, top, 41), tol=1e-8,
                                               generalisation=False)]
        later.run("--plot", lambda: plot_amp_vs_se(
            results, curve_rows, plot_path,
            title=f"AIM {m.channel.name}, T={m.channel.tokens}, rho={m.rho}, D={dim}"))
    out = results[0] if len(results) == 1 else {"points": results}
    if out_path and len(grid) > 1:
        later.run("--out", lambda: atomic_write(out_path, json.dumps(_finite(out), indent=2)))
    emit(out, kw["as_json"], lambda o: "\n".join(
        f"alpha={r['alpha']:.6g} D={dim}: AMP {_fmt(r['mean'])} +- {_fmt(r['stderr'])}  "
        f"SE {_fmt(r['se_prediction'])}" for r in results))
    later.finish()


def _cross_validate_options(model: str, kw: dict, *, output_rule: str | None = None) -> None:
    """--cross-validate: ERM at T = 2 only, and not with the options it replaces."""
    if model != "erm":
        fail("--cross-validate", "used only with --model erm", True)
    if kw.get("lam") is not None:
        fail("--lam", "omitted with --cross-validate (lambda is what it chooses)", kw["lam"])
    if kw["tokens"] != 2:
        fail("--tokens", "2 with --cross-validate (the T = 2 SE)", kw["tokens"])
    if output_rule is not None:
        fail("--output-rule", "omitted with --cross-validate (its search uses gh)", output_rule)


def _derive_deep_aim(fmt: str, kw: dict) -> None:
    """``derive --model aim --layers 2``: the deep AIM sheet (THEORY 1.6), symbolic in c and
    beta, every reduction step verified by sympy as it is written."""
    from .deep_aim_sheet import deep_aim_expressions, deep_aim_sheet
    from .sheets import strip_canonical

    if kw.get("channel") not in (None, "softmax") or kw.get("channel_file"):
        fail("--channel", "softmax for --model aim --layers 2 (two tied attention layers)",
             kw.get("channel") or kw.get("channel_file"))
    if kw["tokens"] != 2:
        fail("--tokens", "2 for derive --model aim --layers 2", kw["tokens"])
    for name in ("skip", "beta"):
        if kw.get(name) is not None:
            fail("--" + name, "omitted for derive --layers 2 (the sheet is symbolic in c and "
                 "beta)", kw[name])
    if fmt != "markdown":
        fail("--format", "markdown for --model aim --layers 2", fmt)
    if kw["as_json"]:
        import sympy as sp

        emit({k: sp.latex(v) for k, v in deep_aim_expressions().items()}, True)
    else:
        click.echo(strip_canonical(deep_aim_sheet()))


def _derive_sparsemax(fmt: str, kw: dict) -> None:
    """``derive --channel sparsemax --tokens 2|3``: the equation sheet (T = 2: closed forms per
    piece; T = 3: the pieces, Z_out an integral on each)."""
    from .sheets import strip_canonical
    from .sparsemax_sheet import sparsemax_expressions, sparsemax_sheet

    if kw["tokens"] not in (2, 3):
        fail("--tokens", "2 or 3 for derive --channel sparsemax", kw["tokens"])
    if fmt != "markdown":
        fail("--format", "markdown for sparsemax (its sheet lists pieces)", fmt)
    for name in ("beta", "rho", "delta_out", "epsilon"):
        if kw.get(name) is not None:
            fail("--" + name.replace("_", "-"), "omitted for derive --channel sparsemax (the "
                 "sheet is symbolic in beta)", kw[name])
    if kw["as_json"]:
        import sympy as sp

        emit({k: sp.latex(v) for k, v in sparsemax_expressions(kw["tokens"]).items()}, True)
    else:
        click.echo(strip_canonical(sparsemax_sheet(kw["tokens"])))


@cli.command()
@model_options
@click.option("--format", "fmt", type=click.Choice(["markdown", "latex", "python"]),
              default="markdown", show_default=True)
def derive(fmt, **kw):
    """Print a channel's equations: Z_out, g_out, dg_out, SE map, Psi_out, stability."""
    model = check_model(kw, deep_aim=True)
    if model == "aim" and kw.get("layers") == 2:
        if kw.get("noise") is not None:
            fail("--noise", "omitted for derive --model aim --layers 2 (the sheet is the "
                 "noiseless channel's)", kw["noise"])
        if kw.get("design") is not None:
            fail("--design", "omitted for derive --model aim --layers 2", kw["design"])
        _derive_deep_aim(fmt, kw)
        return
    if model == "smi" and general.wants_general(kw):
        out = general.derive(kw)
        if kw["as_json"]:
            emit(out, True)
        else:
            click.echo(out["markdown"])
        return
    if model == "smi":
        click.echo(smi_model(kw).derive())
        return
    if kw.get("channel") == "sparsemax":
        _derive_sparsemax(fmt, kw)
        return
    if kw.get("channel") == "hardmax" and kw.get("tokens") in (3, 4, 5):
        from .hardmax_sheet import hardmax_expressions, hardmax_sheet
        from .sheets import strip_canonical

        if fmt != "markdown":
            fail("--format", "markdown for hardmax at T >= 3 (its sheet is half symbolic, "
                 "half integrals)", fmt)
        if kw["as_json"]:
            import sympy as sp

            emit({k: sp.latex(v) for k, v in hardmax_expressions(kw["tokens"]).items()}, True)
        else:
            click.echo(strip_canonical(hardmax_sheet(kw["tokens"])))
        return
    m = aim_model(kw)
    if fmt == "markdown" and kw["as_json"]:
        import sympy as sp

        emit({k: sp.latex(v) for k, v in m.expressions().items()}, True)
        return
    click.echo(m.derive(fmt))


@cli.command()
@model_options
@click.option("--alpha", type=float, required=True, help="sample ratio alpha > 0")
@click.option("--points", type=int, default=400, show_default=True,
              help="points of the density grid")
@click.option("--plot", "plot_path", default=None, help="figure of the singular-value density "
              "(.png, .pdf or .svg)")
def spectrum(alpha, points, plot_path, **kw):
    """ERM: the learned spectrum of S_hat, eta ReLU(S0 + delta Z - eps I) (THEORY 3): densities
    of eigenvalues and singular values, rank, atom at 0."""
    check_model(kw, ("erm",))
    from . import cli_erm

    opts = erm_opts(kw)
    cli_erm.erm_model(**opts)
    _check_outputs(None, plot_path)
    spec = cli_erm.spectrum_json(alpha=alpha, points=points, **opts)
    later = _Deferred()
    if plot_path:
        later.run("--plot", lambda: cli_erm.spectrum_plot(spec, plot_path))
    emit(spec, kw["as_json"], lambda o: (
        f"ERM learned spectrum at alpha={alpha}: rank = {o['rank']:.10g} +- "
        f"{o['rank_error']:.1e}, atom at 0 = {o['atom']:.10g}"))
    later.finish()


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
    from .models import mmse as mmse_api

    r = mmse_api(rho=rho, delta=delta, digits=digits, certified=certified)
    if certified:
        out = {"rho": rho, "delta": delta, "value": r.value, "error": r.error,
               "interval": r.details["interval"], "width": r.details["width"],
               "mid": r.details["mid"], "method": r.method,
               "what_is_certified": r.details["what_is_certified"],
               "precision_bits": r.details["precision_bits"], "support": r.details["support"],
               "support_masses": r.details["support_masses"]}
        emit(out, as_json, lambda o: (
            f"mmse(Delta={delta}; rho={rho}) in [{o['interval'][0]}, {o['interval'][1]}] "
            f"(width {o['width']:.1e}, certified)\nmethod: {o['method']}\n"
            f"certified: {o['what_is_certified']}"))
        return
    out = {"rho": rho, "delta": delta, "value": r.value, "error": r.error, "method": r.method,
           "precision": r.precision}
    emit(out, as_json, lambda o: (
        f"mmse(Delta={delta}; rho={rho}) = {o['value']} +- {o['error']:.1e}\nmethod: {o['method']}"))


cli.add_command(sweep)
cli.add_command(gd)


def _fmt(x) -> str:
    """A number to 5 decimals, or n/a (one seed has no standard error; a diverged run no mean)."""
    return "n/a" if x is None else f"{x:.5f}"


def main() -> None:
    from .certified import NotCertifiable
    from .channels import ChannelError

    if len(sys.argv) == 1:
        sys.argv.append("--help")
    try:
        cli(standalone_mode=False)
    except DomainError as e:
        click.echo(f"aim-sym: error: {relabel(e)}", err=True)
        sys.exit(2)
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
