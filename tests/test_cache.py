"""The derivation cache: used only from a private folder, invalidated by key."""

import os
import pickle

import pytest

from aim_sym import cache


@pytest.fixture
def private_cache(tmp_path, monkeypatch):
    """A private cache folder and a counted builder: (folder, build, calls)."""
    d = tmp_path / "c"
    monkeypatch.setenv("AIM_SYM_CACHE_DIR", str(d))
    monkeypatch.delenv("AIM_SYM_NO_CACHE", raising=False)
    calls = []

    def build():
        calls.append(1)
        return {"x": 1}

    return d, build, calls


def test_private_cache_roundtrip(private_cache):
    d, build, calls = private_cache

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


@pytest.mark.parametrize("content", [
    b"",                                                     # zero bytes
    pickle.dumps({"format": "aim-sym-cache/1", "kind": "t", "key": "k",
                  "value": {"x": 1}})[:-7],                  # truncated
    pickle.dumps(["a", "list"]),                             # a valid pickle of another type
    pickle.dumps({"x": 2}),                                  # the right type, not an envelope
    pickle.dumps({"format": "aim-sym-cache/1", "kind": "t", "key": "other",
                  "value": {"x": 2}}),                       # another entry's envelope
    pickle.dumps({"format": "aim-sym-cache/1", "kind": "t", "key": "k",
                  "value": ["wrong type"]}),                 # this entry, not of the expected type
])
def test_bad_cache_file_is_rebuilt(private_cache, content):
    d, build, calls = private_cache
    assert cache.cached("t", "k", build, expect=dict) == {"x": 1}
    path = cache.cache_path(d, "t", "k")
    path.write_bytes(content)
    os.chmod(path, 0o600)
    assert cache.cached("t", "k", build, expect=dict) == {"x": 1}
    assert len(calls) == 2
    # rebuilt and overwritten: the next call reads it back
    assert cache.cached("t", "k", build, expect=dict) == {"x": 1}
    assert len(calls) == 2 and sorted(p.name for p in d.iterdir()) == [path.name]


def test_derivation_from_a_corrupt_cache_is_rebuilt(tmp_path, monkeypatch):
    # the real consumer: output.derive with its cache entry replaced by a pickle of a string
    from aim_sym import output
    from aim_sym.channels import softmax

    d = tmp_path / "c"
    monkeypatch.setenv("AIM_SYM_CACHE_DIR", str(d))
    monkeypatch.delenv("AIM_SYM_NO_CACHE", raising=False)
    output.derive.cache_clear()
    ref = output.derive(softmax(2))
    files = [p for p in d.iterdir() if p.name.startswith("derive-")]
    assert len(files) == 1
    files[0].write_bytes(pickle.dumps("not a derivation"))
    output.derive.cache_clear()
    again = output.derive(softmax(2))
    assert isinstance(again, output.OutputDerivation) and again.g_out == ref.g_out
    output.derive.cache_clear()
