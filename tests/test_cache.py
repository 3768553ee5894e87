"""The derivation cache: used only from a private folder, invalidated by key."""

import os
import pickle

import pytest

from aim_sym import cache


def test_private_cache_roundtrip(tmp_path, monkeypatch):
    d = tmp_path / "c"
    monkeypatch.setenv("AIM_SYM_CACHE_DIR", str(d))
    monkeypatch.delenv("AIM_SYM_NO_CACHE", raising=False)
    calls = []

    def build():
        calls.append(1)
        return {"x": 1}

    assert cache.cached("t", "k", build) == {"x": 1}
    assert cache.cached("t", "k", build) == {"x": 1}
    assert len(calls) == 1
    assert oct(d.stat().st_mode & 0o777) == "0o700"
    files = list(d.iterdir())
    assert len(files) == 1 and oct(files[0].stat().st_mode & 0o777) == "0o600"
    cache.cached("t", "other", build)
    assert len(calls) == 2


def test_cache_in_a_folder_others_can_write_is_never_read(tmp_path, monkeypatch):
    d = tmp_path / "shared"
    d.mkdir()
    os.chmod(d, 0o777)
    monkeypatch.setenv("AIM_SYM_CACHE_DIR", str(d))
    monkeypatch.delenv("AIM_SYM_NO_CACHE", raising=False)
    # a planted pickle must not be loaded
    (d / "planted.pickle").write_bytes(pickle.dumps("planted"))
    with pytest.warns(UserWarning, match="writable by others"):
        assert cache.cached("t", "k", lambda: "built") == "built"
    assert sorted(p.name for p in d.iterdir()) == ["planted.pickle"]
