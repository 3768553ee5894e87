"""One result vocabulary for the API (docs/api.md, "Results").

:class:`Result` is one computed quantity: its value, its error bar (by refinement, a standard
error, or a certified half-width; ``method`` says which), the route, the working precision, the
parameters it was computed at and route-specific ``details``. :class:`ResultTable` is a tuple of
Results or of tidy row dicts (a curve, a list of checks) with the same two exits: ``to_dict()``
and ``to_frame()`` (pandas, one row per entry).
"""

from __future__ import annotations

import numbers
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any


def _plain(x: Any) -> Any:
    """Mapping proxies and tuples back to plain dicts and lists (for to_dict / JSON)."""
    if isinstance(x, Mapping):
        return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    return x


def _scalar(x: Any) -> bool:
    return x is None or isinstance(x, (str, bool, numbers.Number))


@dataclass(frozen=True, kw_only=True)
class Result:
    """One computed quantity (e.g. ``quantity="mmse"``) with its error bar.

    ``value``: a float, a decimal string (many digits) or a tuple (one entry per layer);
    ``error``: same shape, an upper estimate of |value - exact| (``method`` names how);
    ``precision``: working precision in decimal digits; ``parameters``: the inputs;
    ``details``: everything else the route reports (fixed-point overlaps, stability, ...).
    """

    quantity: str
    value: Any
    error: Any
    method: str
    precision: int | None
    parameters: Mapping[str, Any]
    details: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "parameters", MappingProxyType(dict(self.parameters)))
        object.__setattr__(self, "details", MappingProxyType(dict(self.details)))

    def __getitem__(self, key: str) -> Any:
        """``r["q"]``: a field, else a detail, else a parameter."""
        if key in ("quantity", "value", "error", "method", "precision"):
            return getattr(self, key)
        if key in self.details:
            return self.details[key]
        return self.parameters[key]

    def to_dict(self) -> dict:
        """Plain nested dict; ``Result(**r.to_dict()) == r``."""
        return {"quantity": self.quantity, "value": _plain(self.value), "error": _plain(self.error),
                "method": self.method, "precision": self.precision,
                "parameters": _plain(self.parameters), "details": _plain(self.details)}

    def row(self) -> dict:
        """One flat row: quantity, value, error, method, precision, the parameters, then the
        scalar details (a detail that clashes with a parameter's name is prefixed ``detail_``)."""
        out = {"quantity": self.quantity, "value": self.value, "error": self.error,
               "method": self.method, "precision": self.precision}
        out.update({k: v for k, v in self.parameters.items() if _scalar(v)})
        for k, v in self.details.items():
            if _scalar(v):
                out[k if k not in out else f"detail_{k}"] = v
        return out

    def to_frame(self):
        """A one-row pandas DataFrame (:meth:`row`)."""
        import pandas as pd

        return pd.DataFrame([self.row()])

    def __float__(self) -> float:
        return float(self.value)


@dataclass(frozen=True)
class ResultTable:
    """A tuple of :class:`Result` or of row dicts, with table-wide ``parameters`` (added as
    columns by :meth:`to_frame` where a row lacks them). Iterable, sized, indexable."""

    entries: tuple
    parameters: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        rows = tuple(e if isinstance(e, Result) else MappingProxyType(dict(e)) for e in self.entries)
        object.__setattr__(self, "entries", rows)
        object.__setattr__(self, "parameters", MappingProxyType(dict(self.parameters)))

    def __iter__(self) -> Iterator:
        return iter(self.entries)

    def __len__(self) -> int:
        return len(self.entries)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return ResultTable(self.entries[i], self.parameters)
        return self.entries[i]

    def rows(self) -> list[dict]:
        """One flat dict per entry (Results through :meth:`Result.row`), table parameters added
        where missing."""
        out = []
        for e in self.entries:
            r = e.row() if isinstance(e, Result) else dict(e)
            for k, v in self.parameters.items():
                if _scalar(v):
                    r.setdefault(k, v)
            out.append(r)
        return out

    def to_dict(self) -> dict:
        return {"entries": [e.to_dict() if isinstance(e, Result) else _plain(e) for e in self.entries],
                "parameters": _plain(self.parameters)}

    def to_frame(self):
        """A pandas DataFrame, one row per entry; list-valued cells are kept as lists."""
        import pandas as pd

        return pd.DataFrame(self.rows())

    def column(self, key: str) -> list:
        """One column: ``[r[key] for r in table]``."""
        return [e[key] for e in self.entries]


__all__ = ["Result", "ResultTable"]
