"""Command-line handlers for general SMI channels (``--model smi --channel-file F`` or a
built-in ``--channel``): plain functions of the parsed options returning JSON-able dicts, wired
into :mod:`aim_sym.cli` by its ``threshold``, ``se``, ``curve``, ``derive`` and ``check``
commands.

Each handler takes ``kw``, the click keyword dict (keys used: ``channel_file``, ``channel``,
``tokens``, ``beta``, ``skip``, ``noise``, ``rows``, ``param`` (a tuple of NAME=VALUE), ``seed``)
and raises InputError / DomainError (exit 2) on bad values.
"""

from __future__ import annotations

from .cli_common import fail, param_values
from .domains import DomainError
from .smi_channels import BUILTIN, SMIChannel

#: the built-in general SMI channels (``--channel``); ``deep-attention`` stays the noiseless
#: engine's
GENERAL_CHANNELS = tuple(BUILTIN)


def wants_general(kw: dict) -> bool:
    """True if the options name a general SMI channel: a channel file, a built-in general
    channel, or ``--noise`` (noisy deep attention)."""
    return bool(kw.get("channel_file") or kw.get("channel") in GENERAL_CHANNELS
                or kw.get("noise") is not None)


def channel_from_options(kw: dict) -> SMIChannel:
    """The general SMI channel named by the options, its parameter values bound and checked."""
    from . import smi_general_api as api

    try:
        if kw.get("channel_file"):
            if kw.get("channel"):
                fail("--channel", "omitted with --channel-file", kw["channel"])
            for key in ("beta", "skip", "noise", "rows"):
                if kw.get(key) is not None:
                    fail("--" + key, "omitted with --channel-file (use --param NAME=VALUE)",
                         kw[key])
            return api.smi_channel_from_file(kw["channel_file"], tokens=kw.get("tokens") or 2,
                                             **param_values(kw.get("param")))
        if kw.get("param"):
            fail("--param", "given only with --channel-file", kw["param"][0])
        name = kw.get("channel") or "noisy-deep-attention"
        if name == "deep-attention":
            name = "noisy-deep-attention"
        if name not in GENERAL_CHANNELS:
            fail("--channel", "one of " + ", ".join(GENERAL_CHANNELS) + " (general SMI)", name)
        tokens = kw.get("tokens")
        # options a built-in does not have are refused, never ignored
        unused = {"noisy-attention": ("skip", "rows", "layers"),
                  "noisy-deep-attention": ("rows",),
                  "sign-product": ("beta", "skip", "noise", "layers")}[name]
        for key in unused:
            if kw.get(key) is not None:
                fail("--" + key, f"omitted for the SMI channel {name} (it has no such "
                     "parameter)", kw[key])
        if name == "noisy-attention":
            args = {"tokens": tokens, "beta": kw.get("beta"), "noise": kw.get("noise")}
        elif name == "noisy-deep-attention":
            if tokens not in (None, 2):
                fail("--tokens", "2 for noisy-deep-attention", tokens)
            if kw.get("layers") not in (None, 2):
                fail("--layers", "2 for noisy-deep-attention (--noise)", kw["layers"])
            args = {"beta": kw.get("beta"), "skip": kw.get("skip"), "noise": kw.get("noise")}
        else:
            if tokens not in (None, 2):
                fail("--tokens", "2 for sign-product", tokens)
            args = {"rows": kw.get("rows")}
        return api.builtin_channel(name, **{k: v for k, v in args.items() if v is not None})
    except DomainError as e:
        raise e.relabel() from None


def _header(ch: SMIChannel) -> dict:
    return {"model": "smi", "channel": ch.name, "P": ch.P, "M": ch.M, "kind": ch.kind,
            "parameters": {k: v for k, v in ch.values().items()}}


def threshold_weak(kw: dict) -> dict:
    """``threshold weak --model smi --channel-file F`` (or a general built-in)."""
    from . import smi_general_api as api

    ch = channel_from_options(kw)
    table = api.weak_thresholds(ch, seed=kw.get("seed") or 0)
    rows = [{"block": r.details["block"], "rows": r.details["rows"], "value": r.value,
             "error": r.error, "lambda_max": r.details["lambda_max"],
             "lambda_error": r.details["lambda_error"], "method": r.method,
             "rules": r.details["rules"], "zero_mean": r.details["zero_mean"],
             "bound": r.details["bound"]} for r in table]
    return {**_header(ch), "thresholds": rows}


def se(kw: dict, *, alpha: float) -> dict:
    """``se --model smi --channel-file F --alpha A``: the fixed points from the uninformed and
    the informed start (``kw["start"]`` to solve from one only), the one of largest phi on top
    (Q, error, e_gen, e_gen_plugin, phi with errors), all of them under ``fixed_points``."""
    from . import smi_general_api as api

    ch = channel_from_options(kw)
    starts = (kw["start"],) if kw.get("start") else ("uninformed", "informed")
    table = api.fixed_points(ch, alpha=alpha, starts=starts, seed=kw.get("seed") or 0)
    points = [{"Q": r.value, "error": r.error, "method": r.method, **dict(r.details)}
              for r in table]
    best = next(p for p in points if p["largest_phi"])
    return {**_header(ch), "alpha": alpha, **best,
            "fixed_points": [{k: p[k] for k in ("Q", "error", "phi", "phi_error", "e_gen",
                                                "e_gen_error", "starts", "largest_phi")}
                             for p in points]}


def curve(kw: dict, grid, *, check_outputs) -> tuple[list[dict], list[str], str]:
    """``curve --model smi --channel-file F --alphas a:b:n``: (rows, plotted columns, title);
    ``check_outputs()`` refuses unwritable --out / --plot paths once the channel is valid.
    Progress on stderr per alpha."""
    from . import smi_general_api as api
    from .cli_common import progress_printer

    ch = channel_from_options(kw)
    check_outputs()
    rows = [dict(r) for r in api.curve(ch, alphas=list(grid), seed=kw.get("seed") or 0,
                                       progress=progress_printer)]
    ycols = [f"Q_{p + 1}{p + 1}" for p in range(ch.P)] + (
        ["e_gen"] if any(r["e_gen"] is not None for r in rows) else [])
    return rows, ycols, f"SMI {ch.name} (P={ch.P}, M={ch.M})"


def derive(kw: dict) -> dict:
    """``derive --model smi --channel-file F``: {"markdown": text}."""
    from . import smi_general_api as api

    ch = channel_from_options(kw)
    return {**_header(ch), "markdown": api.derive(ch)}


def check(kw: dict) -> dict:
    """``check --model smi --channel-file F``: {"passed": bool, "checks": [...]}."""
    from . import smi_general_api as api

    ch = channel_from_options(kw)
    rows = [dict(r) for r in api.check(ch, seed=kw.get("seed") or 0)]
    return {**_header(ch), "passed": all(r["passed"] for r in rows), "checks": rows}


__all__ = ["wants_general", "channel_from_options", "threshold_weak", "se", "curve", "derive",
           "check",
           "GENERAL_CHANNELS"]
