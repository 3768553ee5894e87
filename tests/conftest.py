"""Shared test fixtures."""

from __future__ import annotations

import os
import sys

# one BLAS thread per process, set before numpy loads: the test machines have two cores, and a
# threaded BLAS made the SMI kernel tests 3-18 times slower under load (docs/smi_branch_skip.md)
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import pytest  # noqa: E402


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
