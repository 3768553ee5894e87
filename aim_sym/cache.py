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


_FORMAT = "aim-sym-cache/1"


def cache_path(d: Path, kind: str, key: str) -> Path:
    """The file of entry (kind, key) in the cache folder ``d``."""
    name = hashlib.sha256(f"{kind}|{engine_hash()}|{key}".encode()).hexdigest()[:32]
    return d / f"{kind}-{name}.pickle"


def _load(path: Path, kind: str, key: str, expect: type | tuple[type, ...] | None) -> tuple[bool, object]:
    """(True, value) if ``path`` holds this entry: a complete pickle of the envelope written by
    :func:`cached` for the same (kind, key), its value an instance of ``expect`` when given;
    (False, None) for anything else (absent, empty, truncated, another format or entry)."""
    if not (path.exists() and _private(path)):
        return False, None
    try:
        with open(path, "rb") as fh:
            env = pickle.load(fh)  # our own file in our own private folder
    except Exception:
        return False, None
    if not (isinstance(env, dict) and env.get("format") == _FORMAT and env.get("kind") == kind
            and env.get("key") == key and "value" in env):
        return False, None
    value = env["value"]
    if expect is not None and not isinstance(value, expect):
        return False, None
    return True, value


def cached(kind: str, key: str, build: Callable[[], object], *,
           expect: type | tuple[type, ...] | None = None) -> object:
    """Return the cached object for (kind, key) or build, store and return it.

    What is read back is validated (:func:`_load`): an entry that is empty, truncated, not of
    this format, of another (kind, key) or, with ``expect``, not an instance of it, is rebuilt
    and overwritten, never returned."""
    d = usable_dir()
    if d is None:
        return build()
    path = cache_path(d, kind, key)
    ok, value = _load(path, kind, key, expect)
    if ok:
        return value
    obj = build()
    env = {"format": _FORMAT, "kind": kind, "key": key, "value": obj}
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(dir=d, prefix=".tmp-")
        with os.fdopen(fd, "wb") as fh:
            pickle.dump(env, fh, protocol=pickle.HIGHEST_PROTOCOL)
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except Exception:  # an unpicklable object or a full disk: the cache is only an optimisation
        if tmp is not None and os.path.exists(tmp):
            os.remove(tmp)
    return obj
