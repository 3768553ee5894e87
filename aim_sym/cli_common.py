"""Helpers shared by the command-line modules: one-line option errors, JSON output, grids."""

from __future__ import annotations

import json
import math
from collections.abc import Callable

import click
import numpy as np

MODELS = ("aim", "smi")


class OptionError(Exception):
    """A bad command-line value; printed as one line, exit status 2."""


def fail(option: str, allowed: str, value) -> None:
    raise OptionError(f"{option} must be {allowed}; got {value!r}")


def _finite(x):
    if isinstance(x, float) and not math.isfinite(x):
        return None if math.isnan(x) else ("inf" if x > 0 else "-inf")
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    if isinstance(x, (np.floating, np.integer)):
        return _finite(x.item())
    if isinstance(x, np.bool_):
        return bool(x)
    return x


def emit(obj: dict, as_json: bool, human: Callable[[dict], str] | None = None) -> None:
    if as_json:
        click.echo(json.dumps(_finite(obj), indent=2))
    else:
        click.echo(human(obj) if human else "\n".join(f"{k}: {v}" for k, v in obj.items()))


def progress_printer(done: int, total: int, message: str) -> None:
    click.echo(f"[{done}/{total}] {message}", err=True)


def parse_grid(spec: str, option: str) -> np.ndarray:
    """start:stop:num -> numpy.linspace(start, stop, num)."""
    parts = spec.split(":")
    try:
        if len(parts) != 3:
            raise ValueError
        a, b, n = float(parts[0]), float(parts[1]), int(parts[2])
    except ValueError:
        fail(option, "start:stop:num (e.g. 0:0.08:41)", spec)
    if n < 1:
        fail(option, "a grid with num >= 1", spec)
    return np.linspace(a, b, n)



def smi_args(kw: dict) -> dict:
    ch = kw.get("channel") or "deep-attention"
    if ch != "deep-attention":
        fail("--channel", "deep-attention for --model smi", ch)
    layers = 2 if kw.get("layers") is None else kw["layers"]
    if layers not in (2, 3):
        fail("--layers", "2 or 3", layers)
    skip = 1.0 if kw.get("skip") is None else kw["skip"]
    if not skip >= 0:
        fail("--skip", ">= 0", skip)
    beta = 1.0 if kw.get("beta") is None else kw["beta"]
    if kw["tokens"] != 2:
        fail("--tokens", "2 for --model smi", kw["tokens"])
    return {"layers": layers, "tokens": kw["tokens"], "skip": skip, "beta": beta}
