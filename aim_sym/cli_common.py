"""Helpers shared by the command-line modules: one-line option errors, JSON output, grids."""

from __future__ import annotations

import json
import math
from collections.abc import Callable

import click
import numpy as np

from .domains import GRID_POINTS, DomainError

MODELS = ("aim", "smi", "erm")
#: API labels whose command-line option is not the domain's own spelling
OPTION_OF_LABEL = {"alphas": "--alphas", "alpha_bar": "--alpha"}


class OptionError(Exception):
    """A bad command-line value; printed as one line, exit status 2."""


def fail(option: str, allowed: str, value) -> None:
    raise OptionError(f"{option} must be {allowed}; got {value!r}")


def _finite(x):
    """``x`` made JSON-safe: NaN as None, infinities as "inf" / "-inf", numpy scalars as Python
    ones, complex numbers (e.g. Jacobian eigenvalues) as their real part where the imaginary part
    is 0, else [re, im]."""
    if isinstance(x, (complex, np.complexfloating)):
        z = complex(x)
        return _finite(z.real) if z.imag == 0 else [_finite(z.real), _finite(z.imag)]
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


def param_values(items) -> dict:
    """``--param NAME=VALUE`` items (repeatable) as {name: float}."""
    values = {}
    for item in items or ():
        name, eq, value = item.partition("=")
        if not eq or not name:
            fail("--param", "NAME=VALUE", item)
        try:
            values[name] = float(value)
        except ValueError:
            fail("--param", "NAME=VALUE with a numeric VALUE", item)
    return values


def progress_printer(done: int, total: int, message: str) -> None:
    click.echo(f"[{done}/{total}] {message}", err=True)


def given(name: str) -> bool:
    """True if the option was given on the command line (not its default)."""
    src = click.get_current_context().get_parameter_source(name)
    return src not in (None, click.core.ParameterSource.DEFAULT)


def relabel(e: DomainError) -> DomainError:
    """An API domain error renamed with its command-line option (``beta`` -> ``--beta``)."""
    return e.relabel(OPTION_OF_LABEL.get(e.label) or e.domain.option)


def parse_grid(spec: str, option: str) -> np.ndarray:
    """start:stop:num -> numpy.linspace(start, stop, num); finite ends, num in 1..MAX_GRID."""
    parts = spec.split(":")
    try:
        if len(parts) != 3:
            raise ValueError
        a, b, n = float(parts[0]), float(parts[1]), int(parts[2])
    except ValueError:
        fail(option, "start:stop:num (e.g. 0:0.08:41)", spec)
    if not (math.isfinite(a) and math.isfinite(b)):
        fail(option, "a grid start:stop:num with finite start and stop", spec)
    if not GRID_POINTS.contains(n):
        fail(option, f"a grid start:stop:num with num {GRID_POINTS.allowed()}", spec)
    return np.linspace(a, b, n)


def smi_channel(kw: dict):
    """The SMI deep-attention channel named by the options (validated by its domains)."""
    from .channels import DeepAttention

    ch = kw.get("channel") or "deep-attention"
    if ch != "deep-attention":
        fail("--channel", "deep-attention for --model smi", ch)
    given = {k: kw[k] for k in ("layers", "tokens", "skip", "beta") if kw.get(k) is not None}
    try:
        return DeepAttention(**given)
    except DomainError as e:
        raise relabel(e) from None


def smi_args(kw: dict) -> dict:
    """layers, tokens, skip, beta of the SMI channel named by the options."""
    return smi_channel(kw).as_dict()


def read_resume_state(path: str, key: dict, what: str) -> dict | None:
    """The JSON file a resumed run continues from (None if there is none); exit 2 (naming
    --resume) if it is unreadable or was written for other options."""
    import os

    if not os.path.exists(path):
        return None
    try:
        with open(path) as fh:
            stored = json.load(fh)
    except (OSError, ValueError) as e:
        fail("--resume", f"used with a readable {what} (delete it to start afresh)",
             f"{path} ({e})")
    got = stored.get("options") if isinstance(stored, dict) else None
    if not isinstance(got, dict) or got != key:
        diff = ", ".join(f"{k} {got.get(k)!r} stored, {v!r} asked" for k, v in key.items()
                         if got.get(k) != v) if isinstance(got, dict) else "no options stored"
        fail("--resume", f"used with a {what} written for the same options (delete it or choose "
             "another --out to start afresh)", f"{path}: {diff}")
    return stored


def write_json(path: str, out: dict) -> None:
    """Write ``out`` as JSON to ``path`` atomically (NaN as null, infinities as "inf" / "-inf"); exit 2 naming
    --out if the path is not writable."""
    from .numerics.records import atomic_write

    try:
        atomic_write(path, json.dumps(_finite(out), indent=2, default=float))
    except OSError as e:
        fail("--out", "a writable path", f"{path} ({e.strerror})")
