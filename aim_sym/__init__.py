"""aim-sym: derive, compile and solve Bayes-optimal learning of attention models.

Layers (docs/api.md, "Layers"): the symbolic layer (sympy: channels as data, derivations),
the compiled layer (lambdify to numpy and mpmath), the numeric layer :mod:`aim_sym.numerics`
(quadrature, priors, SE solvers; never touches sympy trees) and, on top, the public API and the
presentation (CLI, sweeps, tables, plots). Equations refer to THEORY.md.
"""

from __future__ import annotations

import importlib.util as _ilu
import sys as _sys
from pathlib import Path as _Path

__version__ = "0.1.0"


def _numerics_from_source_checkout() -> None:
    """Installed, the numeric layer is the subpackage ``aim_sym/numerics`` (pyproject's
    package-dir). In a source checkout its folder ``numerics/`` sits beside ``aim_sym/``: load
    that folder as ``aim_sym.numerics`` so that both import the same way."""
    here = _Path(__file__).resolve().parent
    name = __name__ + ".numerics"
    if (here / "numerics").is_dir() or name in _sys.modules:
        return
    init = here.parent / "numerics" / "__init__.py"
    if not init.is_file():
        return
    spec = _ilu.spec_from_file_location(name, init, submodule_search_locations=[str(init.parent)])
    module = _ilu.module_from_spec(spec)
    _sys.modules[name] = module
    spec.loader.exec_module(module)
    globals()["numerics"] = module


_numerics_from_source_checkout()


def _register_compiled_functions() -> None:
    """Hand the numeric layer the factory of compiled SMI pieces (no sympy import on a warm cache)."""
    from .lambdified import smi_functions
    from .numerics import compiled_functions

    compiled_functions.register_smi_functions(smi_functions)


_register_compiled_functions()


# ----------------------------------------------------------------------------- public API
# Exported lazily (PEP 562), so that ``import aim_sym.numerics.smi`` imports neither sympy nor
# pandas: the names resolve on first use. docs/api.md describes them.
_EXPORTS = {
    "AIM": "models",
    "SMI": "models",
    "mmse": "models",
    "ERM": "erm",
    "Sparsemax": "sparsemax_model",
    "Result": "results",
    "ResultTable": "results",
    "Domain": "domains",
    "DomainError": "domains",
    "InputError": "numerics.records",
    "ConvergenceError": "numerics.records",
    "ChannelError": "channels",
    "channel_from_file": ("channel_file", "from_file"),
}
_SUBMODULES = ("channels", "domains", "results", "models", "channel_file")

__all__ = ["__version__", *_EXPORTS, *_SUBMODULES]


def __getattr__(name: str):
    import importlib

    if name in _SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    if name in _EXPORTS:
        where = _EXPORTS[name]
        module, attr = where if isinstance(where, tuple) else (where, name)
        value = getattr(importlib.import_module(f"{__name__}.{module}"), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
