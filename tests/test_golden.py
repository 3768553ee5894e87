"""Golden outputs: the --json of a dozen fast commands, recorded before the house refactoring
(tests/data/README.md), must be reproduced within their own error bars.

Every numeric leaf is compared; its tolerance is twice the ``error`` of the nearest enclosing
record that carries one (the quantity's own refinement bar), plus 1e-12 relative; the bars
themselves must stay non-negative numbers (a bar may tighten or widen). Timings (``seconds``)
and wording (method strings) are not compared; keys present then must be present
now (the ``--json`` keys are part of the interface).
"""

from __future__ import annotations

import json
import os
import shlex
import sys

import pytest

from aim_sym.cli import main

HERE = os.path.join(os.path.dirname(__file__), "data", "golden")
COMMANDS = [line.split("|", 1) for line in open(os.path.join(HERE, "commands.txt")).read()
            .splitlines() if line.strip()]
SKIP_KEYS = {"seconds", "method", "note", "what_is_certified", "detail"}


def _number(x):
    if isinstance(x, bool):
        return None
    if isinstance(x, (int, float)):
        return float(x)
    if isinstance(x, str):
        try:
            return float(x)
        except ValueError:
            return None
    return None


def compare(old, new, path="", bar=0.0, problems=None):
    problems = [] if problems is None else problems
    if isinstance(old, dict):
        if not isinstance(new, dict):
            problems.append(f"{path}: was an object")
            return problems
        err = _number(old.get("error"))
        bar = max(bar, err) if err is not None else bar
        for k, v in old.items():
            if k in SKIP_KEYS:
                continue
            if k not in new:
                problems.append(f"{path}/{k}: key missing")
                continue
            compare(v, new[k], f"{path}/{k}", bar, problems)
    elif isinstance(old, list):
        if not isinstance(new, list) or len(new) != len(old):
            problems.append(f"{path}: list length {len(old)} -> "
                            f"{len(new) if isinstance(new, list) else type(new).__name__}")
            return problems
        for i, (a, b) in enumerate(zip(old, new)):
            compare(a, b, f"{path}[{i}]", bar, problems)
    else:
        a, b = _number(old), _number(new)
        if a is None:
            return problems
        if path.endswith("error") and b is not None:  # a bar may change; it stays a bar
            if not b >= 0:
                problems.append(f"{path}: {old!r} -> {new!r} (not a bar)")
            return problems
        if b is None:
            problems.append(f"{path}: {old!r} -> {new!r}")
        elif abs(a - b) > 2 * bar + 1e-12 * max(abs(a), abs(b)) + 1e-300:
            problems.append(f"{path}: {old!r} -> {new!r} (bar {bar:.1e})")
    return problems


@pytest.mark.parametrize("name,args", COMMANDS, ids=[c[0] for c in COMMANDS])
def test_golden_output(name, args, capsys, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["aim-sym", *shlex.split(args)])
    try:
        main()
    except SystemExit as e:
        assert e.code in (0, None), capsys.readouterr().err
    out = capsys.readouterr().out
    old = json.load(open(os.path.join(HERE, f"{name}.json")))
    problems = compare(old, json.loads(out))
    assert not problems, "\n".join(problems[:20])


def test_compare_fails_outside_the_bar():
    old = {"value": 1.0, "error": 1e-6, "rows": [{"q": 0.5}]}
    assert compare(old, {"value": 1.0 + 1e-6, "error": 1e-6, "rows": [{"q": 0.5}]}) == []
    assert compare(old, {"value": 1.0 + 1e-5, "error": 1e-6, "rows": [{"q": 0.5}]})
    assert compare(old, {"value": 1.0, "error": 1e-6, "rows": []})
    assert compare(old, {"error": 1e-6, "rows": [{"q": 0.5}]})
