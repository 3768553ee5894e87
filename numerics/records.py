"""Tidy result records and the errors the numeric layer raises."""

from __future__ import annotations

import math
import os
import tempfile
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Estimate:
    """A number with its error estimate obtained by refinement.

    ``error`` is |value(refined) - value(coarse)| (two quadrature orders or two precisions);
    ``method`` names the route, ``precision`` the working precision in decimal digits.
    """

    value: Any
    error: float
    method: str
    precision: int = 16
    extra: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        d = asdict(self)
        d["value"] = _jsonable(self.value)
        d["error"] = float(self.error)
        return d


def _jsonable(x: Any) -> Any:
    try:
        return float(x)
    except (TypeError, ValueError):
        return str(x)


class InputError(ValueError):
    """Bad user input; the message names the parameter and the allowed range."""


class ConvergenceError(RuntimeError):
    """An iteration or root search did not converge; carries the last iterate and residual."""

    def __init__(self, message: str, *, last_iterate: Any = None, residual: Any = None):
        super().__init__(f"{message} (last iterate {last_iterate!r}, residual {residual!r})")
        self.last_iterate = last_iterate
        self.residual = residual


class NotCertifiable(ValueError):
    """A certified (ball-arithmetic) evaluation is not possible: python-flint is missing, or the
    expression holds something without a certified evaluation."""


def load_flint() -> Any:
    """The python-flint module, or :class:`NotCertifiable` with the install hint."""
    try:
        import flint
    except ImportError as e:
        raise NotCertifiable(
            "certified enclosures need python-flint: pip install 'aim-sym[certified]'"
        ) from e
    return flint


def require(condition: bool, name: str, allowed: str, value: Any) -> None:
    """Raise :class:`InputError` naming ``name`` and its allowed range unless ``condition``."""
    if not condition:
        raise InputError(f"{name} must be {allowed}; got {value!r}")


def is_finite_real(v: Any) -> bool:
    """True for a value that converts to a finite float."""
    try:
        return math.isfinite(float(v))
    except (TypeError, ValueError):
        return False


def require_reals(obj: Any, *, positive: tuple = (), nonnegative: tuple = ()) -> None:
    """:func:`require` that the named attributes of ``obj`` are finite reals, > 0 or >= 0."""
    for name in positive:
        v = getattr(obj, name)
        require(is_finite_real(v) and v > 0, name, "a finite real > 0", v)
    for name in nonnegative:
        v = getattr(obj, name)
        require(is_finite_real(v) and v >= 0, name, "a finite real >= 0", v)


def new_file_mode() -> int:
    """The mode a plainly created file gets (0o666 less the umask): given to atomically written
    results, whose temporary files start private (0o600)."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def atomic_write(path: str, text: str) -> None:
    """Write ``text`` to ``path`` atomically: a temporary file in the same folder, then rename
    (mode that of a plainly created file, :func:`new_file_mode`)."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-")
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.chmod(tmp, new_file_mode())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def standard_error(values: Any, axis: int | None = None) -> Any:
    """Standard error of the mean of ``values`` (sample std with ddof = 1 over sqrt n); nan for
    fewer than two values. ``axis``: the means along that axis of an array (an array of
    standard errors)."""
    v = np.asarray(values, dtype=float)
    if axis is not None:
        n = v.shape[axis]
        return v.std(axis=axis, ddof=1) / math.sqrt(n) if n > 1 else np.full(
            np.delete(v.shape, axis), np.nan)
    return float(v.std(ddof=1) / math.sqrt(v.size)) if v.size > 1 else float("nan")


def mean_stderr(vals: Any) -> tuple[float | None, float | None]:
    """Mean and standard error of per-seed values; None where there is no value (no seed, or a
    non-finite value among them: no NaN is reported) or no spread (one seed)."""
    a = np.asarray(vals, dtype=float)
    if a.size == 0 or not np.all(np.isfinite(a)):
        return None, None
    se = standard_error(a) if a.size > 1 else None
    return float(a.mean()), se


def bayes_optimal(fixed_points: Any) -> Any:
    """The stable fixed point of largest free entropy ``phi`` (THEORY 1.1): the Bayes-optimal
    one among coexisting SE fixed points (dicts with ``stable`` and ``phi``); None when none is
    stable. Ties go to the first."""
    stable = [f for f in fixed_points if f["stable"]]
    return max(stable, key=lambda f: f["phi"]) if stable else None


def refined_estimate(fine: Any, coarse: Any, *, coverage: float, method: str,
                     rule_key: str = "rule_error", **extra: Any) -> Estimate:
    """The mean of independent replicates ``fine`` (one per scramble) with error ``coverage``
    standard errors + |mean(fine) - mean(coarse)| (the same replicates on a coarser inner rule);
    extra: standard_error, ``rule_key`` (the rule difference), per_scramble and ``extra``."""
    f, c = np.asarray(fine, dtype=float), np.asarray(coarse, dtype=float)
    se = standard_error(f)
    rule = abs(float(f.mean() - c.mean()))
    return Estimate(float(f.mean()), coverage * se + rule, method,
                    extra={**extra, "standard_error": se, rule_key: rule,
                           "per_scramble": f.tolist()})


def mean_estimate(values: Any, method: str, **extra: Any) -> Estimate:
    """The mean of independent replicate ``values`` with its standard error as the error."""
    v = np.asarray(values, dtype=float)
    return Estimate(float(v.mean()), standard_error(v), method, extra=extra)
