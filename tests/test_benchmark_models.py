"""benchmark.models (issue 25, item 5): snapshot folders benchmarked beside the variants, as '<folder name>-base',
on the tiny Meissonic; left out of the params dump while empty, so the default pipeline's keys do not move."""

import shutil

import numpy as np
import pytest
from PIL import Image

from cogrpo.backbones.loading import write_pretrained_pointer
from cogrpo.backbones.tiny_meissonic import make_tiny_meissonic
from cogrpo.config import ParamsError, parse_params, with_overrides
from cogrpo.errors import InputError
from tasks.benchmark import benchmark_cells, split_variant
from tasks.cells import generate_cells


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    root = tmp_path_factory.mktemp("hub")
    base = make_tiny_meissonic(root / "tiny-meissonic")
    shutil.copytree(base, root / "Co-GRPO-tiny")  # the same weights under a name with dashes
    make_tiny_meissonic(root / "other", seed=1)  # other weights
    return root


def meissonic_params(hub, **benchmark):
    return parse_params({
        "model": {"backbone": "meissonic", "pretrained": str(hub / "tiny-meissonic"), "resolution": 16,
                  "lora_rank": 4, "device": "cpu"},
        "schedule": {"steps": 2, "ratio_curve": "amused", "remask_temperature": 2.0, "remask_anneal": "to_zero",
                     "cfg": 9.0},
        "eval": {"batch_prompts": 2},
        "benchmark": {"suites": ["hpsv2"], "steps": [2], "variants": ["base-base"], "max_prompts": 2} | benchmark})


def test_an_empty_list_stays_out_of_the_params_dump_and_a_set_one_enters_it():
    from adapters.store import params_key

    default = parse_params({})
    assert "models" not in default.model_dump()["benchmark"]
    assert "models" not in params_key(default, ("benchmark",))["benchmark"]
    assert default.benchmark.all_variants() == default.benchmark.variants
    params = with_overrides(parse_params({"model": {"backbone": "meissonic", "pretrained": "x"}}),
                            {"benchmark.models": ["models/Co-GRPO-Meissonic-1B"]})
    assert params.model_dump()["benchmark"]["models"] == ["models/Co-GRPO-Meissonic-1B"]
    assert params.benchmark.external() == {"Co-GRPO-Meissonic-1B-base": "models/Co-GRPO-Meissonic-1B"}
    assert params.benchmark.all_variants()[-1] == "Co-GRPO-Meissonic-1B-base"
    assert split_variant("Co-GRPO-Meissonic-1B-base") == ("Co-GRPO-Meissonic-1B", "base")
    assert split_variant("trained-learned") == ("trained", "learned")


@pytest.mark.parametrize("models, message", [
    (["a/x", "b/x"], "distinct, not 'base' or 'trained' \\(clash: 'x'\\)"),
    (["models/trained"], "clash: 'trained'"),
])
def test_model_names_must_tell_the_variants_apart(models, message):
    with pytest.raises(ParamsError, match=message):
        parse_params({"model": {"backbone": "meissonic", "pretrained": "x"}, "benchmark": {"models": models}})


def test_models_need_a_backbone_that_loads_snapshots():
    with pytest.raises(ParamsError, match="benchmark.models: snapshot folders need a backbone"):
        parse_params({"benchmark": {"models": ["models/x"]}})


def _images(cell) -> list[np.ndarray]:
    return [np.asarray(Image.open(p)) for p in sorted((cell / "images").rglob("*.png"))]


def test_a_snapshot_folder_is_benchmarked_as_a_variant_of_its_own(hub, tmp_path):
    """The copy of model.pretrained decodes exactly as base-base (same weights, seeds and schedule); a snapshot with
    other weights decodes otherwise: each cell loads its own folder."""
    params = meissonic_params(hub, models=[str(hub / "Co-GRPO-tiny"), str(hub / "other")])
    inputs = {"prompts": tmp_path / "prompts", "tokenizer": tmp_path / "tokenizer", "base": tmp_path / "base",
              "trained": tmp_path / "trained"}
    write_pretrained_pointer(params.model, inputs["base"])
    state = tmp_path / "state"
    cells = benchmark_cells(params, inputs, state)
    assert [c.folder.relative_to(state / "cells").parts[0] for c in cells] == [
        "base-base", "Co-GRPO-tiny-base", "other-base"]
    assert [(c.model, c.snapshot) for c in cells] == [
        ("base", None), ("Co-GRPO-tiny", str(hub / "Co-GRPO-tiny")), ("other", str(hub / "other"))]
    ran = generate_cells(params, inputs, cells, root=state / "cells")
    assert all(n == 1 for n in ran.values()) and len(ran) == 3
    base, copy, other = (_images(c.folder) for c in cells)
    assert len(base) == 2 and all(np.array_equal(a, b) for a, b in zip(base, copy))
    assert not all(np.array_equal(a, b) for a, b in zip(base, other))


def test_a_missing_snapshot_fails_before_any_generation(hub, tmp_path):
    params = meissonic_params(hub, models=[str(tmp_path / "not-there")])
    with pytest.raises(InputError, match="not-there"):
        benchmark_cells(params, {"prompts": tmp_path, "trained": tmp_path}, tmp_path / "state")
    assert not (tmp_path / "state").exists()
