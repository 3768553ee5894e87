"""Parameter domains as data (docs/api.md, "Parameter domains").

A :class:`Domain` names one parameter, its command-line spelling, its kind (real or integer),
its bounds (each end open or closed), whether it must be finite, its default and a one-line
description. ``Domain.check`` is the one place a value is validated: the API calls it with the
parameter's name as the label (``beta``), the command line relabels the same error with the
option (``--beta``), so both refuse the same values with the same range.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, replace
from typing import Any

from .numerics.records import InputError


class DomainError(InputError):
    """A value outside its :class:`Domain`; carries the domain and the value so that a front end
    can relabel the message (``relabel``) with its own spelling of the parameter."""

    def __init__(self, domain: Domain, value: Any, label: str, *, allowed: str | None = None):
        super().__init__(f"{label} must be {allowed or domain.allowed()}; got {_show(value)}")
        self.domain = domain
        self.value = value
        self.label = label
        self.allowed = allowed

    def relabel(self, label: str | None = None) -> DomainError:
        """The same error naming ``label`` (default: the domain's command-line option)."""
        return DomainError(self.domain, self.value, label or self.domain.option,
                           allowed=self.allowed)


def _show(value: Any) -> str:
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return repr(value)


def _num(x: float) -> str:
    if isinstance(x, int) or (isinstance(x, float) and x.is_integer() and abs(x) < 1e6):
        return str(int(x))
    return f"{x:g}".replace("e+0", "e").replace("e+", "e").replace("e-0", "e-")


@dataclass(frozen=True, kw_only=True)
class Domain:
    """The allowed values of one parameter.

    ``kind``: "real" or "integer"; ``low``/``high``: bounds (None: unbounded), closed unless
    ``low_open``/``high_open``; ``finite``: inf and nan refused (always for integers);
    ``choices``: an explicit finite set instead of bounds; ``note``: why the range stops where it
    does, appended to the message (keep it short); ``description``: one line for help and docs.
    """

    name: str
    option: str
    kind: str = "real"
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    finite: bool = True
    choices: tuple | None = None
    default: Any = None
    description: str = ""
    note: str = ""

    def __post_init__(self) -> None:
        if self.kind not in ("real", "integer"):
            raise ValueError(f"Domain kind must be 'real' or 'integer'; got {self.kind!r}")

    # ------------------------------------------------------------------ text
    def allowed(self) -> str:
        """The allowed range in words, e.g. "a finite real > 0", "an integer in 2..8"."""
        if self.choices is not None:
            text = "one of " + ", ".join(map(str, self.choices))
        elif self.kind == "integer":
            lo, hi = self.low, self.high
            if lo is not None and hi is not None:
                text = f"the integer {_num(lo)}" if lo == hi else f"an integer in {_num(lo)}..{_num(hi)}"
            elif lo is not None:
                text = f"an integer >= {_num(lo)}"
            elif hi is not None:
                text = f"an integer <= {_num(hi)}"
            else:
                text = "an integer"
        else:
            what = "a finite real" if self.finite else "a real"
            lo, hi = self.low, self.high
            if lo is not None and hi is not None:
                text = (f"{what} in {'(' if self.low_open else '['}{_num(lo)}, {_num(hi)}"
                        f"{')' if self.high_open else ']'}")
            elif lo is not None:
                text = f"{what} {'>' if self.low_open else '>='} {_num(lo)}"
            elif hi is not None:
                text = f"{what} {'<' if self.high_open else '<='} {_num(hi)}"
            else:
                text = what
        return f"{text} ({self.note})" if self.note else text

    # ------------------------------------------------------------------ checking
    def contains(self, value: Any) -> bool:
        if self.choices is not None:
            if self.kind == "integer" and not isinstance(value, numbers.Integral):
                return False
            return not isinstance(value, bool) and value in self.choices
        if self.kind == "integer":
            if isinstance(value, bool) or not isinstance(value, numbers.Integral):
                return False
            x = int(value)
        else:
            if isinstance(value, bool) or not isinstance(value, numbers.Real):
                return False
            x = float(value)
            if math.isnan(x) or (self.finite and math.isinf(x)):
                return False
        if self.low is not None and (x < self.low or (self.low_open and x == self.low)):
            return False
        if self.high is not None and (x > self.high or (self.high_open and x == self.high)):
            return False
        return True

    def check(self, value: Any, *, label: str | None = None):
        """``value`` (an int for integer domains, a float for real ones) if it lies in the
        domain; else :class:`DomainError` (an ``InputError``) naming ``label`` (default: the
        parameter's name) and the allowed range."""
        if not self.contains(value):
            raise DomainError(self, value, label or self.name)
        if self.choices is not None:
            return value
        return int(value) if self.kind == "integer" else float(value)

    def with_(self, **changes) -> Domain:
        """A copy with some fields changed (e.g. a channel's own upper bound on tokens)."""
        return replace(self, **changes)


# ----------------------------------------------------------------------------- model parameters
# Channel parameters (beta, Delta_out, epsilon, tokens) are declared next to the channels in
# aim_sym.channels; the SMI deep-attention ones there too. These are the models' own.
MAX_GRID = 100_000

RHO_MIN = 1e-4
RHO = Domain(name="rho", option="--rho", low=RHO_MIN, default=0.5,
             description="width ratio rho = r / D (THEORY 1), finite >= 1e-4: below, the "
             "double-precision Wishart prior quadrature loses its accuracy (measured: 4 digits "
             "at 1e-5, none at 1e-8, negative mmse at 1e-12; the same floor as "
             "aim_sym.numerics.wishart.RHO_MIN_DOUBLE; the small-width limit rho -> 0 is its "
             "own route, --small-width)")
ALPHA = Domain(name="alpha", option="--alpha", low=0, default=None,
               description="sample ratio alpha = N / D^2 (AIM) or N / D (SMI), >= 0")
ALPHA_AMP = ALPHA.with_(low_open=True, description="sample ratio of an AMP run, > 0 (N >= 1)")
ALPHA_BAR = Domain(name="alpha_bar", option="--alpha", low=0,
                   description="small-width sample ratio alpha_bar = alpha / rho, >= 0 (THEORY 1.2)")
TOL = Domain(name="tol", option="--tol", low=1e-15, high=1e-2, default=1e-13,
             description="target error of each AIM fixed point; below 1e-15 doubles cannot "
             "resolve it, above 1e-2 the curve is meaningless")
GRID_POINTS = Domain(name="num", option="--alphas", kind="integer", low=1, high=MAX_GRID,
                     description=f"points of an alpha grid, 1..{MAX_GRID} (each point is a solve)")
SE_DIGITS = Domain(name="digits", option="--digits", kind="integer", low=5, high=200,
                   description="digits of the many-digit AIM fixed point (mpmath cost grows "
                   "like digits^2 per step)")
THRESHOLD_DIGITS = Domain(name="digits", option="--digits", kind="integer", low=1, high=1000,
                          default=16, description="digits of a closed-form threshold")
SEQUENTIAL_DIGITS = Domain(name="digits", option="--digits", kind="integer", low=1, high=9,
                           default=4, note="the SMI sequential threshold",
                           description="accuracy asked of the SMI sequential threshold (the "
                           "lattice refinement cost grows steeply)")
MMSE_DIGITS = Domain(name="digits", option="--digits", kind="integer", low=5, high=200,
                     description="digits of mmse(Delta) (mpmath estimate or certified interval)")
DIM_AIM = Domain(name="dim", option="--dim", kind="integer", low=10, high=2000, default=100,
                 description="AMP dimension D (memory and time grow like D^4 alpha)")
DIM_SMI = DIM_AIM.with_(high=10_000, description="SMI AMP dimension D (time grows like D^2)")
SEEDS = Domain(name="seeds", option="--seeds", kind="integer", low=1, high=1000, default=4,
               description="independent AMP instances")
MAX_ITER = Domain(name="max_iter", option="--max-iter", kind="integer", low=1, high=100_000,
                  default=100, description="AMP iterations per run")
DAMPING = Domain(name="damping", option="--damping", low=0, high=1, high_open=True,
                 description="AMP damping in [0, 1) (or 'auto')")
RNG_SEED = Domain(name="rng_seed", option="--rng-seed", kind="integer", low=0, high=2**63 - 1,
                  default=0, description="root of the seed sequence (numpy needs it >= 0)")


def check_grid(values, domain: Domain, *, label: str | None = None) -> tuple[float, ...]:
    """Every value of an alpha grid in ``domain``, and at most :data:`MAX_GRID` of them."""
    values = tuple(values)
    GRID_POINTS.check(len(values), label=label or domain.name + "s")
    for v in values:
        domain.check(float(v) if isinstance(v, numbers.Real) else v, label=label)
    return tuple(float(v) for v in values)


__all__ = ["Domain", "DomainError", "check_grid", "MAX_GRID", "RHO", "ALPHA", "ALPHA_AMP",
           "ALPHA_BAR", "TOL", "GRID_POINTS", "SE_DIGITS", "THRESHOLD_DIGITS",
           "SEQUENTIAL_DIGITS", "MMSE_DIGITS", "DIM_AIM", "DIM_SMI", "SEEDS", "MAX_ITER",
           "DAMPING", "RNG_SEED"]
