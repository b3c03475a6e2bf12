"""params.yaml validation: one clear line naming the key, before anything is written."""

from pathlib import Path

import pytest

from cogrpo.config import ParamsError, load_params, parse_params

ROOT = Path(__file__).resolve().parents[1]


def test_repo_params_are_valid():
    p = load_params(ROOT / "params.yaml")
    assert p.schedule.steps <= p.world.grid**2


@pytest.mark.parametrize("raw, key, words", [
    ({"pretrain": {"stpes": 3}}, "pretrain.stpes", "unknown key"),
    ({"pretrain": {"lr": "fast"}}, "pretrain.lr", "valid number"),
    ({"pretrain": {"lr": -1.0}}, "pretrain.lr", "greater than 0"),
    ({"schedule": {"ratio_curve": "zigzag"}}, "schedule.ratio_curve", "'cosine'"),
    ({"bogus": 1}, "bogus", "unknown key"),
    ({"sweep": [{"name": "x", "cfg": 0}]}, "sweep.0.cfg", "greater than 0"),
    # cross-field rules of one section name their keys in the message (a traceback at the first update before)
    ({"train": {"sigma_floor": 0.15}}, "train", "train.sigma_floor = 0.15 must be below train.sigma_init = 0.15"),
    ({"train": {"group_size": 100000}}, "train", "train.group_size 100000 = 1600000 trajectories per process and "
     "iteration, above the bound of 4096"),
    ({"train": {"prompts_per_iter": 1289}}, "train", "train.prompts_per_iter 1289 ÷ train.processes 1 × "
     "train.group_size 8 = 10312 trajectories"),
])
def test_schema_errors_name_the_key(raw, key, words):
    with pytest.raises(ParamsError) as err:
        parse_params(raw, "params.yaml")
    msg = str(err.value)
    assert msg.startswith(f"params.yaml: key '{key}'") and words in msg and "\n" not in msg


def test_cross_field_rule():
    with pytest.raises(ParamsError, match="schedule.steps = 20 exceeds the 16 tokens"):
        parse_params({"schedule": {"steps": 20}})
    with pytest.raises(ParamsError, match="multiple of heads"):
        parse_params({"model": {"dim": 30, "heads": 4}})


def test_malformed_yaml_names_the_line(tmp_path):
    f = tmp_path / "params.yaml"
    f.write_text("pretrain:\n  steps: 3\n bad: [\n")
    with pytest.raises(ParamsError, match=r"params.yaml: line \d+ malformed YAML"):
        load_params(f)
    with pytest.raises(ParamsError, match="file not found"):
        load_params(tmp_path / "nope.yaml")


def test_every_field_is_documented():
    from cogrpo.config import Params

    def walk(model):
        for name, field in model.model_fields.items():
            ann = field.annotation
            sub = getattr(ann, "model_fields", None)
            if sub is not None:
                walk(ann)
            elif name != "sweep":
                assert field.description, f"{model.__name__}.{name} has no description"

    walk(Params)


def test_overrides_are_validated_like_the_file():
    from cogrpo.config import Params, ParamsError, with_overrides

    p = with_overrides(Params(), {"train.mode": "model", "schedule.steps": 4, "train.rewards": [{"name": "strict"}]})
    assert (p.train.mode, p.schedule.steps, p.train.rewards[0].name) == ("model", 4, "strict")
    with pytest.raises(ParamsError, match=r"^overrides: key 'train.lr': unknown key$"):
        with_overrides(Params(), {"train.lr": 1})
    with pytest.raises(ParamsError, match=r"^overrides: key 'train.mode': Input should be 'co', 'model', 'schedule' or 'alternate'"):
        with_overrides(Params(), {"train.mode": "both"})
    with pytest.raises(ParamsError, match=r"key 'schedule.steps.x': unknown key"):
        with_overrides(Params(), {"schedule.steps.x": 1})


def test_the_pretraining_anchor_does_not_stop_another_backbone():
    """params.yaml's anchor is the embedded world's: with another backbone the training warns and goes without it
    (tests/test_amused.py), so switching model.backbone alone is enough; here the missing weights are the error."""
    from cogrpo.errors import InputError
    from cogrpo.validate import load_params

    assert load_params("params.yaml", {"train.anchor_coef": 1.0}).train.anchor_coef == 1.0
    with pytest.raises(InputError, match=r"model.pretrained") as err:
        load_params("params.yaml", {"model.backbone": "amused", "model.pretrained": "nowhere", "train.anchor_coef": 1.0})
    assert "anchor" not in str(err.value)


def test_reward_aggregation_and_optional_terms_at_their_defaults_leave_params_hashes_alone():
    from cogrpo.config import TrainConfig

    default = TrainConfig().result_dump()
    assert "reward_aggregation" not in default and "required" not in default["rewards"][0]
    chosen = TrainConfig(reward_aggregation="advantage", rewards=[{"name": "compositional", "required": False}])
    assert chosen.result_dump()["reward_aggregation"] == "advantage"
    assert chosen.result_dump()["rewards"][0]["required"] is False
    with pytest.raises(ParamsError, match=r"key 'train.reward_aggregation': Input should be 'sum' or 'advantage'"):
        parse_params({"train": {"reward_aggregation": "mean"}})


def test_the_rollout_bound_counts_one_process_share():
    from cogrpo.config import MAX_ROLLOUT

    assert parse_params({"train": {"prompts_per_iter": 2 * MAX_ROLLOUT // 8, "processes": 2}}).train.group_size == 8
    with pytest.raises(ParamsError, match=f"= {MAX_ROLLOUT + 8} trajectories per process"):
        parse_params({"train": {"prompts_per_iter": 2 * MAX_ROLLOUT // 8 + 2, "processes": 2}})
