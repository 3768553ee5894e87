"""Load a user's channel file: a small Python file that builds a channel with the builders of
:mod:`aim_sym.channels` (``discrete``, ``gaussian``, ``sign_channel``) and :func:`h_matrix`.

Loading a channel file RUNS THE USER'S OWN CODE. aim-sym loads a file only when it is named on
the command line (``--channel-file``) and never from a cache.

The file defines ``channel(tokens: int)`` returning the channel. :func:`from_file` is the API's
entry: it loads the file and binds parameter values, each checked against its domain.
"""

from __future__ import annotations

import os
import traceback

from .channels import (
    TOKENS_FILE,
    Channel,
    ChannelError,
    DiscreteChannel,
    GaussianChannel,
    with_values,
)
from .noisy_polyhedral import NoisyPiecewiseChannel, with_noisy_values


def from_file(path: str, *, tokens: int = 2, **params) -> Channel:
    """The channel of a channel file (RUNS THE FILE'S CODE) with parameter values bound:
    ``from_file("noisy_hardmax.py", tokens=2, eps=0.2)``. Values are checked against the
    parameters' domains (from their sympy assumptions); a Gaussian noise covariance must be
    positive semidefinite and discrete likelihoods non-negative at these values."""
    tokens = TOKENS_FILE.check(tokens)
    ch = load_channel_file(path, tokens=tokens)
    if params and isinstance(ch, NoisyPiecewiseChannel):
        return with_noisy_values(ch, params)
    return with_values(ch, params) if params else ch


def call_file_function(path: str, name: str, arg, *, error: type[Exception] = ChannelError,
                       hint: str = ""):
    """Execute the file at ``path`` (RUNS THE USER'S OWN CODE; only on the user's explicit
    request) and return ``name(arg)`` of its namespace. Every failure is ``error`` with a
    one-line message naming the file and, where possible, the line."""
    if not os.path.isfile(path):
        raise error(f"--channel-file: no such file {path!r}")
    with open(path) as fh:
        source = fh.read()
    try:
        code = compile(source, path, "exec")
    except SyntaxError as e:
        raise error(f"{path}:{e.lineno}: syntax error: {e.msg}") from None
    namespace: dict = {"__name__": "aim_sym_channel_file", "__file__": path}
    try:
        exec(code, namespace)  # the user's own code, loaded on their explicit request
        fn = namespace.get(name)
        if not callable(fn):
            raise error(f"the file must define {name}(tokens){hint}")
        return fn(arg)
    except error as e:
        raise error(f"{path}: {e}") from None
    except SystemExit as e:  # sys.exit() in the file ended the command silently with its code
        raise error(f"{path}:{_line(e, path)}: the file called sys.exit({e.code!r}) while being "
                    "loaded") from None
    except Exception as e:
        raise error(f"{path}:{_line(e, path)}: {type(e).__name__}: {e}") from None


def load_channel_file(path: str, *, tokens: int) -> Channel:
    """Execute ``path`` and call its ``channel(tokens)``; errors name the file and the line."""
    ch = call_file_function(path, "channel", tokens, hint=" returning a channel")
    if not isinstance(ch, (DiscreteChannel, GaussianChannel, NoisyPiecewiseChannel)):
        raise ChannelError(f"{path}: channel(tokens) returned {type(ch).__name__}, not a channel")
    check_z_out(ch, path)
    return ch


def _line(e: BaseException, path: str) -> str:
    frames = [f for f in traceback.extract_tb(e.__traceback__) if f.filename == path]
    return str(frames[-1].lineno) if frames else "?"


def check_z_out(ch: Channel, path: str) -> None:
    """Z_out must not vanish on outputs of positive probability (checked at omega = 0, V = 1)."""
    if not isinstance(ch, DiscreteChannel):
        return
    import sympy as sp

    from .output import derive, substitute_params
    from .symbols import V

    d = derive(ch)
    values = {s.name: (v if v is not None else "0.1") for s, v in ch.params}
    for y, p in zip(ch.outputs, ch.likelihood):
        if sp.simplify(p) == 0:
            raise ChannelError(f"{path}: output {y} has probability zero for every h; remove it")
    if getattr(d, "is_polyhedral", False):
        return  # Z_out is an integral: checked numerically at omega = 0 (models.AIM)
    for y, Z in zip(ch.outputs, d.Z_out):
        z0 = substitute_params(Z, ch, values).subs({w: 0 for w in d.omega}).subs(V, 1)
        val = sp.N(z0, 30)
        if not val > 1e-300:
            raise ChannelError(
                f"{path}: Z_out vanishes for output {y} (Z_out = {val} at omega = 0, V = 1): "
                "an output of positive probability must have Z_out > 0"
            )
