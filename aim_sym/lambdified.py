"""The SMI channel pieces as plain functions, without importing sympy in a warm process.

:func:`aim_sym.smi.compile_functions` lambdifies the derived expressions (explicit ``modules=``);
here the source that lambdify generates is kept in the derivation cache (:mod:`aim_sym.cache`,
keyed by the engine's source and sympy's version) and executed in the namespace lambdify would
give it.  A fresh process then skips importing sympy, loading the derivations and printing them:
about 1 s of every cold start of the SMI engine (benchmarks/RESULTS.md).  Each source is checked
against lambdify's own function when it is built; without a usable cache it is built every time.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping

# what sympy.lambdify puts in the namespace of generated code for each ``modules=`` value
_NAMESPACES = {
    "numpy": ("import numpy; from numpy import *; from numpy.linalg import *", {"I": 1j}),
    "mpmath": ("from mpmath import *", {}),
}


def _namespace(backend: str) -> dict:
    imports, defaults = _NAMESPACES[backend]
    ns: dict = {}
    exec(imports, ns)  # noqa: S102 - fixed import lines, no data
    ns.update(defaults)
    return ns


def _from_source(src: str, backend: str):
    ns = _namespace(backend)
    exec(src, ns)  # noqa: S102 - lambdify's own output, from our private cache or just built
    return ns["_lambdifygenerated"]


def _build(layers: int, name: str, backend: str) -> str:
    """lambdify's source for one entry, checked: the function rebuilt from it agrees with
    lambdify's at two points."""
    import inspect

    from . import smi

    f = smi.compile_functions(layers, backend)[name]
    src = inspect.getsource(f)
    g = _from_source(src, backend)
    nargs = f.__code__.co_argcount
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # the test points may leave an entry's domain: nan
        for k in range(2):
            x = [0.3 + 0.17 * k + 0.11 * i for i in range(nargs)]
            if str(f(*x)) != str(g(*x)):
                raise RuntimeError(f"rebuilt {name} ({backend}) differs from lambdify's function")
    return src


class SMIFunctions(Mapping):
    """Read-only mapping ``name -> function`` over the entries of
    :func:`aim_sym.smi.compile_functions` (same names, same call signatures), each built on first
    use from the cached source."""

    def __init__(self, layers: int, backend: str) -> None:
        if backend not in _NAMESPACES:
            raise ValueError(f"backend must be one of {sorted(_NAMESPACES)}, got {backend!r}")
        self._layers, self._backend, self._done = layers, backend, {}

    def __getitem__(self, name: str):
        if name not in self._done:
            from .cache import cached

            key = f"layers={self._layers}|{name}|{self._backend}"
            src = cached("smi-lambdified", key, lambda: _build(self._layers, name, self._backend))
            self._done[name] = _from_source(src, self._backend)
        return self._done[name]

    def _names(self) -> list:
        from .cache import cached

        return cached("smi-names", f"layers={self._layers}", lambda: _names(self._layers))

    def __iter__(self):
        return iter(self._names())

    def __len__(self) -> int:
        return len(self._names())


def _names(layers: int) -> list:
    from . import smi

    return list(smi.derived_functions(layers))


_FUNCTIONS: dict = {}


def smi_functions(layers: int = 2, backend: str = "numpy") -> SMIFunctions:
    """The (per-process) :class:`SMIFunctions` for ``layers`` and ``backend``."""
    key = (layers, backend)
    if key not in _FUNCTIONS:
        _FUNCTIONS[key] = SMIFunctions(layers, backend)
    return _FUNCTIONS[key]
