"""The layers of aim-sym hold (docs/api.md, "Layers"): every import of every module of the package,
function-local ones included, read with ``ast`` (nothing is imported).

numeric <- symbolic <- compiled <- API <- presentation: a layer imports only from those below it
(symbolic and compiled only the two numeric leaf modules), and the module graph has no cycle.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "aim_sym"
NUMERIC = "aim_sym.numerics"
# source folder -> dotted package name (numerics/ is installed as aim_sym.numerics)
SOURCES = {ROOT / "aim_sym": PACKAGE, ROOT / "numerics": NUMERIC}

# The layer of every module: (modules, reason). Modules listed that do not exist yet are allowed;
# a new module must be placed here. The numeric layer is every module of aim_sym.numerics.
LAYERS: dict[str, tuple[tuple[str, ...], str]] = {
    "numeric": ((NUMERIC,),
                "quadrature, priors, SE solvers: numpy/scipy/mpmath only, receives compiled callables"),
    "symbolic": (("symbols", "channels", "special", "output", "smi", "sheets", "channel_file",
                  "certified", "cache", "domains", "smi_channels", "hardmax_sheet",
                  "deep_aim_sheet", "noisy_polyhedral"),
                 "sympy derivations and data; never runs a solver"),
    "compiled": (("codegen", "compiled", "lambdified", "amp_functions", "smi_compiled", "sparsemax",
                  "sparsemax_sheet",
                  "deep_aim", "polyhedral", "sparsemax_pieces"),
                 "lambdify the derivations into callables for the numeric layer"),
    "api": (("", "results", "models", "thresholds", "checks", "sweep", "api", "erm",
             "erm_gd_api", "smi_general_api", "smi_routes", "sparsemax_model", "noisy_polyhedral_model",
             "piecewise_amp", "noisy_piecewise_amp"),
            "the public API (package root included): may combine every layer below"),
    "presentation": (("cli", "cli_common", "cli_sweep", "cli_erm", "cli_gd", "cli_smi_general",
                      "cli_aim_channels", "plots",
                      "tables", "__main__"),
                     "CLI, tables and figures, on top of everything"),
}
ORDER = ("numeric", "symbolic", "compiled", "api", "presentation")
# the numeric modules the symbolic and compiled layers may import: errors/records and kernels
NUMERIC_LEAVES = (f"{NUMERIC}.records", f"{NUMERIC}.special_functions")


def modules() -> dict[str, Path]:
    """Dotted name -> file, for every module of the package."""
    out = {}
    for folder, pkg in SOURCES.items():
        for path in sorted(folder.rglob("*.py")):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join([pkg, *parts])] = path
    return out


MODULES = modules()


def layer_of(name: str) -> str | None:
    if name == NUMERIC or name.startswith(NUMERIC + "."):
        return "numeric"
    for layer, (names, _) in LAYERS.items():
        if layer != "numeric" and name in {PACKAGE if n == "" else f"{PACKAGE}.{n}" for n in names}:
            return layer
    return None


def imports(name: str, path: Path) -> list[tuple[str, int]]:
    """(imported name, line) for every import in the module, relative ones resolved; a
    ``from X import y`` names X.y where that is a module of the package, else X."""
    tree = ast.parse(path.read_text(), filename=str(path))
    is_pkg = path.name == "__init__.py"
    package = name.split(".") if is_pkg else name.split(".")[:-1]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                out.append((sub if sub in MODULES else target, node.lineno))
    return out


def internal(target: str) -> str | None:
    """The package module an import names (the longest known prefix), or None if external."""
    parts = target.split(".")
    if parts[0] != PACKAGE:
        return None
    for k in range(len(parts), 0, -1):
        cand = ".".join(parts[:k])
        if cand in MODULES:
            return cand
    return target  # a module of the package that does not exist: reported by the tests


GRAPH = {m: imports(m, p) for m, p in MODULES.items()}


def _where(m: str, line: int) -> str:
    return f"{MODULES[m].relative_to(ROOT)}:{line}"


def test_every_module_is_placed_in_a_layer():
    unplaced = sorted(m for m in MODULES if layer_of(m) is None)
    assert not unplaced, f"modules with no layer (add them to LAYERS): {unplaced}"
    assert all(layer_of(m) for m in NUMERIC_LEAVES if m in MODULES)


def test_numeric_layer_imports_no_sympy_and_nothing_above_it():
    bad = []
    for m, targets in GRAPH.items():
        if layer_of(m) != "numeric":
            continue
        for t, line in targets:
            top = t.split(".")[0]
            if top in ("sympy", "numerics"):
                bad.append(f"{_where(m, line)} imports {t}")
            elif top == PACKAGE and layer_of(internal(t) or t) != "numeric":
                bad.append(f"{_where(m, line)} imports {t} (not in {NUMERIC})")
    assert not bad, "numeric layer: " + "; ".join(bad)


def _violations(layers: tuple[str, ...], allowed: set[str], leaves: tuple[str, ...]) -> list[str]:
    bad = []
    for m, targets in GRAPH.items():
        if layer_of(m) not in layers:
            continue
        for t, line in targets:
            dep = internal(t)
            if dep is None or dep in leaves:
                continue
            if layer_of(dep) not in allowed:
                bad.append(f"{_where(m, line)} ({layer_of(m)}) imports {dep} ({layer_of(dep)})")
    return bad


def test_symbolic_and_compiled_layers_use_only_the_numeric_leaves():
    # symbolic: symbolic modules + the numeric leaves; compiled: also symbolic modules
    bad = _violations(("symbolic",), {"symbolic"}, NUMERIC_LEAVES)
    bad += _violations(("compiled",), {"symbolic", "compiled"}, NUMERIC_LEAVES)
    assert not bad, "; ".join(bad)


def test_api_layer_imports_no_presentation():
    bad = _violations(("api",), {"numeric", "symbolic", "compiled", "api"}, ())
    assert not bad, "; ".join(bad)


def test_imports_name_existing_modules():
    # within the package, and never the old top-level ``numerics`` (it is aim_sym.numerics)
    missing = sorted({f"{_where(m, line)} imports {t}" for m, targets in GRAPH.items()
                      for t, line in targets
                      if internal(t) not in (None, *MODULES) or t.split(".")[0] == "numerics"})
    assert not missing, "; ".join(missing)


def _cycles() -> list[list[str]]:
    """One cycle through each strongly connected component of more than one module, by Tarjan's
    algorithm on the graph of package imports."""
    edges = {m: sorted({d for t, _ in ts if (d := internal(t)) in MODULES and d != m})
             for m, ts in GRAPH.items()}
    index, low, stack, on, comps = {}, {}, [], set(), []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            strong(v)
    cycles = []
    for comp in comps:  # a shortest cycle from the component's first module, by BFS
        start, inside = comp[0], set(comp)
        prev, frontier, found = {start: None}, [start], None
        while frontier and found is None:
            nxt = []
            for v in frontier:
                for w in edges[v]:
                    if w == start:
                        found = v
                        break
                    if w in inside and w not in prev:
                        prev[w] = v
                        nxt.append(w)
                if found is not None:
                    break
            frontier = nxt
        path, v = [], found
        while v is not None:
            path.append(v)
            v = prev[v]
        cycles.append(path[::-1] + [start])
    return cycles


def test_no_import_cycles():
    cycles = _cycles()
    assert not cycles, "import cycles (function-local imports included): " + "; ".join(
        " -> ".join(c) for c in cycles)


def test_cycle_finder_finds_a_planted_cycle(monkeypatch):
    graph = dict(GRAPH)
    a, b = "aim_sym.numerics.records", "aim_sym.numerics.gauss"
    graph[a] = [*graph[a], (b, 1)]
    graph[b] = [*graph[b], (a, 1)]
    monkeypatch.setitem(globals(), "GRAPH", graph)
    assert [b, a, b] in _cycles() or [a, b, a] in _cycles()


def test_relative_imports_resolve():
    # a function-local relative import in the numeric layer, and one of a package module
    targets = {t for t, _ in GRAPH["aim_sym.numerics.aim_curve"]}
    assert "aim_sym.numerics.aim_se" in targets and "aim_sym.numerics.records" in targets
    assert "aim_sym.numerics.special_functions" in {t for t, _ in GRAPH["aim_sym.special"]}


def test_installed_distribution_has_no_top_level_numerics_package():
    text = (ROOT / "pyproject.toml").read_text()
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10: read the two keys by pattern
        dirs = dict(re.findall(r'"([\w.]+)"\s*=\s*"([\w./]+)"',
                               re.search(r"package-dir\s*=\s*\{([^}]*)\}", text).group(1)))
        packages = re.findall(r'"([\w.]+)"', re.search(r"packages\s*=\s*\[([^\]]*)\]",
                                                       text).group(1))
    else:
        setup = tomllib.loads(text)["tool"]["setuptools"]
        dirs, packages = setup["package-dir"], setup["packages"]
    assert dirs.get(NUMERIC) == "numerics", dirs
    assert "numerics" not in packages and NUMERIC in packages, packages
    assert "numerics" not in dirs, dirs
