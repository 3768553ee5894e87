"""How the numeric layer receives compiled callables it does not build (docs/api.md, "Layers").

The numeric layer never imports the symbolic or compiled layers. Callables derived from sympy
reach it as arguments (the AIM engines take a compiled channel) or, for the SMI channel pieces
that many internal routines share, through a factory registered here by the package root
(``aim_sym/__init__.py`` registers :func:`aim_sym.lambdified.smi_functions`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

SMIFactory = Callable[[int, str], Mapping[str, Callable]]
_SMI_FACTORY: SMIFactory | None = None


def register_smi_functions(factory: SMIFactory) -> None:
    """Install the factory ``(layers, backend) -> {name: callable}`` of the SMI channel pieces."""
    global _SMI_FACTORY
    _SMI_FACTORY = factory


def smi_functions(layers: int = 2, backend: str = "numpy") -> Mapping[str, Callable]:
    """The compiled SMI channel pieces for ``layers`` and ``backend`` ("numpy" or "mpmath")."""
    if _SMI_FACTORY is None:
        raise RuntimeError("no compiled SMI functions registered (import aim_sym registers them)")
    return _SMI_FACTORY(layers, backend)
