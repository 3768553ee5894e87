"""Shared driver for the derivation scripts: build named sheets and write them."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

HERE = os.path.dirname(os.path.abspath(__file__))
SHEETS_DIR = os.path.join(HERE, "sheets")


def write_all(sheets: dict[str, Callable[[], str]]) -> None:
    """Write each sheet (atomically) into derivations/sheets/ and name it on stdout."""
    os.makedirs(SHEETS_DIR, exist_ok=True)
    for name, build in sheets.items():
        path = os.path.join(SHEETS_DIR, name)
        tmp = path + ".tmp"
        with open(tmp, "w") as fh:
            fh.write(build())
        os.replace(tmp, path)
        print(os.path.relpath(path, os.getcwd()), file=sys.stdout)
