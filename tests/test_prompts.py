"""The prompt grammar and the split."""

import pytest

from cogrpo.world.prompts import GENEVAL_TAGS, involves


def test_every_tag_and_geneval_shape(prompt_sets):
    """Specs use the keys of GenEval's evaluation_metadata.jsonl rows (as in ../shared/geneval_sample.jsonl)."""
    sets, _ = prompt_sets
    for name, specs in sets.items():
        assert {s["tag"] for s in specs} == set(GENEVAL_TAGS) | {"dpg"}, name
        for s in specs:
            assert set(s) <= {"tag", "include", "exclude", "prompt"}
            for j, inc in enumerate(s["include"]):
                assert set(inc) <= {"class", "count", "color", "position"}
                if "position" in inc:  # GenEval refers to an earlier include entry
                    assert inc["position"][1] < j


def test_heldout_combinations_never_in_training(prompt_sets):
    sets, held = prompt_sets
    assert not any(involves(s, held) for s in sets["train"])
    for tag in GENEVAL_TAGS[1:] + ("dpg",):
        tagged = [s for s in sets["eval_heldout"] if s["tag"] == tag]
        assert tagged and all(involves(s, held) for s in tagged), tag
    train_prompts = {s["prompt"] for s in sets["train"]}
    assert all(s["prompt"] in train_prompts for s in sets["eval_seen"])


def test_dpg_prompts_are_dense(prompt_sets):
    sets, _ = prompt_sets
    dpg = [s for s in sets["train"] if s["tag"] == "dpg"]
    assert len(dpg) == 200
    for s in dpg:
        assert len(s["include"]) >= 3 and all("color" in i for i in s["include"])
        assert any("position" in i for i in s["include"])


def test_natural_prompt_files_are_read_or_refused_in_one_line_naming_file_and_line(tmp_path):
    from cogrpo.errors import InputError
    from tasks.data import read_natural_prompts

    txt, jsonl = tmp_path / "a.txt", tmp_path / "b.jsonl"
    txt.write_text("a red bicycle\n\n  two cats on a sofa  \n")
    jsonl.write_text('{"prompt": "a lighthouse"}\n{"prompt": "a fox in snow"}\n')
    assert read_natural_prompts(txt) == ["a red bicycle", "two cats on a sofa"]
    assert read_natural_prompts(jsonl) == ["a lighthouse", "a fox in snow"]
    for path, text, message in ((jsonl, '{"prompt": "ok"}\n{"text": "no"}\n', "b.jsonl:2: not a JSON object"),
                                (jsonl, '{"prompt": 3}\n', "b.jsonl:1: the prompt is not a non-empty string"),
                                (txt, "\n \n", "a.txt: no prompts"), (tmp_path / "c.txt", None, "c.txt: training prompt file not found")):
        if text is not None:
            path.write_text(text)
        with pytest.raises(InputError, match=message):
            read_natural_prompts(path)
