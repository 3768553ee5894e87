"""Tidy tables: the one CSV writer of the project, and the early check that an output is writable.

Every command that writes a table goes through :func:`write_csv`: one row per record, the
columns given or the union of the rows' keys in first-seen order, floats written with ``repr``
(so that they read back exactly), NaN and missing values as empty cells, written atomically
(a temporary file in the same folder, then ``os.replace``).
"""

from __future__ import annotations

import csv
import io
import math
import numbers
import os
import tempfile

from .numerics.records import InputError, atomic_write


class OutputError(InputError):
    """An output path that cannot be written; the message names the path and the OS reason."""


def _reason(e: OSError) -> str:
    return e.strerror or type(e).__name__


def check_writable(path: str, option: str = "--out") -> None:
    """Raise :class:`OutputError` unless ``path`` can be written: its folder exists (or can be
    created) and accepts a new file, and ``path`` is not a folder. Called before a long
    computation, so that a finished result is never lost for want of a place to put it."""
    if not path:
        raise OutputError(f"{option} must be a file path; got {path!r}")
    if os.path.isdir(path):
        raise OutputError(f"{option} must be a file path, not a folder; got {path!r}")
    folder = os.path.dirname(os.path.abspath(path))
    try:
        os.makedirs(folder, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-check-")
        os.close(fd)
        os.remove(tmp)
    except OSError as e:
        raise OutputError(f"{option} must be a path in a writable folder; got {path!r} "
                          f"({_reason(e)})") from None


def cell(x: object) -> str:
    """One CSV cell: floats by ``repr`` (NaN and None empty), integers and strings as they are."""
    if x is None:
        return ""
    if isinstance(x, bool) or isinstance(x, str):
        return str(x)
    if isinstance(x, numbers.Integral):
        return str(int(x))
    if isinstance(x, numbers.Real):
        f = float(x)
        return "" if math.isnan(f) else repr(f)
    return str(x)


def columns_of(rows: list[dict]) -> list[str]:
    """The union of the rows' keys, in first-seen order."""
    cols: dict[str, None] = {}
    for r in rows:
        for k in r:
            cols.setdefault(k, None)
    return list(cols)


def write_csv(path: str, rows: list[dict], *, columns: list[str] | None = None) -> None:
    """Write ``rows`` to the CSV file ``path`` atomically (see the module docstring); keys of a
    row not in ``columns`` are left out, columns missing from a row are empty cells.

    Raises :class:`OutputError` (naming the path and the OS reason) if it cannot be written."""
    cols = list(columns) if columns is not None else columns_of(rows)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(cols)
    for r in rows:
        w.writerow([cell(r.get(k)) for k in cols])
    try:
        atomic_write(path, buf.getvalue())
    except OSError as e:
        raise OutputError(f"cannot write the table {path!r}: {_reason(e)}") from None


__all__ = ["OutputError", "cell", "check_writable", "columns_of", "write_csv"]
