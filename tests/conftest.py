"""Shared test fixtures."""

from __future__ import annotations

import sys

import pytest


@pytest.fixture
def run_cli(capsys, monkeypatch):
    """The command line in-process: ``run_cli([...]) -> (exit status, stdout, stderr)``."""
    from aim_sym.cli import main

    def run(args: list[str]) -> tuple[int, str, str]:
        monkeypatch.setattr(sys, "argv", ["aim-sym", *args])
        capsys.readouterr()
        try:
            main()
            rc = 0
        except SystemExit as e:
            rc = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        out = capsys.readouterr()
        return rc, out.out, out.err

    return run
