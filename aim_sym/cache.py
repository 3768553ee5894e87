"""On-disk cache of derivations, keyed by a hash of the channel and of the engine's code.

Derivations are stored as pickles in the user's cache directory ($AIM_SYM_CACHE_DIR, else
$XDG_CACHE_HOME/aim-sym, else ~/.cache/aim-sym). Reading a pickle executes code, so the cache is
read only when the folder and the file belong to the current user and neither is writable by
group or others; otherwise it is ignored (and not written). Set AIM_SYM_NO_CACHE=1 to disable.
Channel files are never loaded from the cache: only derived expressions are stored.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import stat
import tempfile
import warnings
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path


def cache_dir() -> Path:
    env = os.environ.get("AIM_SYM_CACHE_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "aim-sym"


def _private(path: Path) -> bool:
    """Owned by us and not writable by group or others."""
    try:
        st = path.stat()
    except OSError:
        return False
    return st.st_uid == os.getuid() and not (st.st_mode & (stat.S_IWGRP | stat.S_IWOTH))


def usable_dir() -> Path | None:
    """The cache folder if it is safe to use (created private if absent), else None."""
    if os.environ.get("AIM_SYM_NO_CACHE"):
        return None
    d = cache_dir()
    try:
        d.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError:
        return None
    if not _private(d):
        warnings.warn(f"aim-sym cache {d} is writable by others or not ours: not used",
                      stacklevel=3)
        return None
    return d


def _sympy_version() -> str:
    """sympy's version without importing it (the warm SMI path never needs sympy itself)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("sympy")
    except PackageNotFoundError:
        import sympy

        return sympy.__version__


@lru_cache(maxsize=1)
def engine_hash() -> str:
    """Hash of the engine's source and versions: a change invalidates every entry."""
    here = Path(__file__).parent
    h = hashlib.sha256(_sympy_version().encode())
    for name in ("channels.py", "output.py", "special.py", "symbols.py", "cache.py", "compiled.py",
                 "smi.py", "lambdified.py"):
        h.update((here / name).read_bytes())
    return h.hexdigest()[:16]


def cached(kind: str, key: str, build: Callable[[], object]) -> object:
    """Return the cached object for (kind, key) or build, store and return it."""
    d = usable_dir()
    if d is None:
        return build()
    name = hashlib.sha256(f"{kind}|{engine_hash()}|{key}".encode()).hexdigest()[:32]
    path = d / f"{kind}-{name}.pickle"
    if path.exists() and _private(path):
        try:
            with open(path, "rb") as fh:
                return pickle.load(fh)  # our own file in our own private folder
        except Exception:
            pass
    obj = build()
    try:
        fd, tmp = tempfile.mkstemp(dir=d, prefix=".tmp-")
        with os.fdopen(fd, "wb") as fh:
            pickle.dump(obj, fh, protocol=pickle.HIGHEST_PROTOCOL)
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except Exception:
        pass
    return obj
