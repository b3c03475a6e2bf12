"""File helpers: content hashes that cache keys rely on, and the one-owner folder lock."""

import pytest

from cogrpo.errors import InputError
from cogrpo.io import atomic_dir, content_hash, exclusive


def test_content_hash_follows_bytes_and_names_not_scratch(tmp_path):
    d = tmp_path / "model"
    with atomic_dir(d) as tmp:
        (tmp / "a.bin").write_bytes(b"\x00\x01")
        (tmp / "sub").mkdir()
        (tmp / "sub" / "b.json").write_text("{}")
    h = content_hash(d)
    (d / ".lock").write_text("123")  # scratch and locks do not count
    (d / ".x.tmp-9").mkdir()
    (d / ".x.tmp-9" / "half").write_text("partial")
    assert content_hash(d) == h
    (d / "a.bin").write_bytes(b"\x00\x02")
    assert content_hash(d) != h
    (d / "a.bin").write_bytes(b"\x00\x01")
    (d / "sub" / "b.json").rename(d / "sub" / "c.json")
    assert content_hash(d) != h
    assert content_hash(d / "a.bin") != content_hash(d / "sub" / "c.json")
    with pytest.raises(FileNotFoundError, match="missing: input not found"):
        content_hash(tmp_path / "missing")


def test_exclusive_refuses_a_second_owner_and_frees_on_exit(tmp_path):
    with exclusive(tmp_path / "run"):
        with pytest.raises(InputError, match=r"run: in use by another run \(pid \d+\)"):
            with exclusive(tmp_path / "run"):
                pass
    with exclusive(tmp_path / "run"):  # released
        pass
