"""Checkpoints with a manifest written last: a torn or edited checkpoint is detected and skipped, a crash while
saving leaves the previous one intact, non-finite weights are refused."""

import json

import pytest
import torch

from cogrpo.core import checkpoints
from cogrpo.errors import InputError
from cogrpo.io import verify_manifest


def _fill(value: float):
    def fill(folder):
        (folder / "state.json").write_text(json.dumps({"value": value}))
        (folder / "sub").mkdir()
        (folder / "sub/weights.bin").write_bytes(bytes(range(256)) * 16)
    return fill


def test_save_keeps_the_newest_two_and_later_ones(tmp_path):
    for it in (3, 6, 9):
        checkpoints.save(tmp_path, it, _fill(it))
    checkpoints.save(tmp_path / "other", 12, _fill(12))
    assert [p.name for p in checkpoints.numbered(tmp_path)] == ["000009", "000006"]
    checkpoints.save(tmp_path, 4, _fill(4))  # a shorter run: 6 and 9 belong to a longer one and stay
    assert [p.name for p in checkpoints.numbered(tmp_path)] == ["000009", "000006", "000004"]
    assert checkpoints.latest_good(tmp_path, 5, print).name == "000004"


@pytest.mark.parametrize("damage", ["truncate", "overwrite", "manifest", "missing"])
def test_a_damaged_checkpoint_is_skipped_with_a_line_naming_it(tmp_path, damage):
    for it in (3, 6):
        checkpoints.save(tmp_path, it, _fill(it))
    newest = tmp_path / "000006"
    weights = newest / "sub/weights.bin"
    if damage == "truncate":
        weights.write_bytes(weights.read_bytes()[:100])
    elif damage == "overwrite":  # same size, different bytes: only the hash can tell
        data = bytearray(weights.read_bytes())
        data[1000:1100] = b"\xff" * 100
        weights.write_bytes(bytes(data))
    elif damage == "manifest":
        (newest / "manifest.json").write_text('{"state.json": "ab')
    else:
        (newest / "state.json").unlink()
    warnings = []
    assert checkpoints.latest_good(tmp_path, 10, warnings.append) == tmp_path / "000003"
    assert len(warnings) == 1 and str(newest) in warnings[0]
    with pytest.raises(InputError):
        verify_manifest(newest)


def test_a_crash_while_saving_leaves_the_previous_checkpoint(tmp_path):
    checkpoints.save(tmp_path, 3, _fill(3))

    def crash(folder):
        _fill(6)(folder)
        raise KeyboardInterrupt  # as if killed half-way

    with pytest.raises(KeyboardInterrupt):
        checkpoints.save(tmp_path, 6, crash)
    assert [p.name for p in checkpoints.numbered(tmp_path)] == ["000003"]
    assert checkpoints.latest_good(tmp_path, 10, print) == tmp_path / "000003"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no scratch left


def test_non_finite_weights_are_refused():
    good = {"w": torch.ones(3)}
    checkpoints.require_finite(good.items(), "model")
    with pytest.raises(InputError, match="model: tensor 'w' has 1 non-finite values"):
        checkpoints.require_finite({"w": torch.tensor([1.0, float("nan"), 2.0])}.items(), "model")


def test_a_manifest_names_a_missing_changed_or_added_file(tmp_path):
    from cogrpo.errors import InputError
    from cogrpo.io import write_manifest

    (tmp_path / "a.bin").write_bytes(b"1234")
    write_manifest(tmp_path)
    verify_manifest(tmp_path)
    (tmp_path / "b.bin").write_bytes(b"new")
    with pytest.raises(InputError, match="b.bin: not in the manifest"):
        verify_manifest(tmp_path, contents=False)
    (tmp_path / "b.bin").unlink()
    (tmp_path / "a.bin").write_bytes(b"4321")
    verify_manifest(tmp_path, contents=False)  # the file list alone cannot see a change of contents
    with pytest.raises(InputError, match="a.bin: contents differ"):
        verify_manifest(tmp_path)
