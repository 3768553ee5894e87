"""Which engine serves deep-attention SMI at depth L and M tokens, per command (THEORY 2.5;
docs/smi_depth.md, "Ranges").

Two engines compute the same quantities:

* ``"lattice"``: the SMI model object (:class:`aim_sym.models.SMI`), a deterministic fibre
  lattice with error bars by refinement (digits on request), for (L, M) = (2, 2) and, for the
  thresholds, (3, 2);
* ``"kernel"``: the any-(L, M) kernels, :mod:`numerics.smi_weak` (weak thresholds at Q = 0) and
  :mod:`numerics.smi_branch_qmc` (branches, sequential thresholds, fixed points; Monte-Carlo-grade
  bars), at the (L, M) their own checks accept.

The served pairs are read from those modules' checks, so a depth or token count they learn to
serve reaches the command line without another table here.
"""

from __future__ import annotations

from .numerics import smi_branch_qmc, smi_cascade, smi_weak
from .numerics.records import InputError, require

__all__ = ["COMMANDS", "LATTICE", "engine", "served"]

#: the (L, M) the deterministic lattice serves, per command
LATTICE = {"threshold": ((2, 2), (3, 2)), "se": ((2, 2),), "cascade": ()}
COMMANDS = tuple(LATTICE)
_SCAN = [(L, M) for L in range(1, 9) for M in range(2, 7)]


def _accepts(check, layers: int, tokens: int) -> bool:
    try:
        check(layers=layers, tokens=tokens, skip=1.0, beta=1.0)
    except InputError:
        return False
    return True


def served(command: str) -> tuple[tuple[int, int], ...]:
    """The (layers, tokens) pairs ``command`` ("threshold", "se" or "cascade") serves."""
    require(command in COMMANDS, "command", f"one of {COMMANDS}", command)
    if command == "cascade":
        return tuple(smi_cascade.SUPPORTED)
    check = smi_weak.check if command == "threshold" else smi_branch_qmc.check
    kernel = [p for p in _SCAN if _accepts(check, *p)]
    return tuple(sorted(set(LATTICE[command]) | set(kernel)))


def engine(command: str, *, layers: int, tokens: int) -> str:
    """``"lattice"`` or ``"kernel"`` for ``command`` at (``layers``, ``tokens``); InputError
    naming ``layers`` (no served pair has this depth) or ``tokens`` (the depth is served with
    other token counts) otherwise."""
    pairs = served(command)
    if (layers, tokens) in pairs:
        return "lattice" if (layers, tokens) in LATTICE[command] else "kernel"
    depths = sorted({L for L, _ in pairs})
    what = {"threshold": "threshold weak", "se": "se", "cascade": "threshold weak --cascade"}
    require(layers in depths, "layers", f"one of {depths} for {what[command]} --model smi",
            layers)
    counts = sorted(M for L, M in pairs if L == layers)
    require(False, "tokens", f"one of {counts} at layers = {layers} for {what[command]} "
            "--model smi", tokens)
    raise AssertionError("unreachable")
