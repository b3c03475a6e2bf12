"""The prompt grammar and the split."""

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
