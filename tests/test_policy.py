"""The schedule policies: the prompt-conditioned one starts as the per-step one, its log-probs are a Gaussian's,
its read-out learns, and it round-trips through its export file."""

import torch
from torch.distributions import Normal

from cogrpo.config import ScheduleConfig
from cogrpo.core.policy import (ProgressSchedulePolicy, PromptSchedulePolicy, SchedulePolicy, load_prompt_policy,
                                prompt_knobs, save_prompt_policy)
from cogrpo.core.schedule import base_knobs, progress_weights, transfer

BASE = base_knobs(ScheduleConfig(steps=4))
F = 16


def _moved(policy: PromptSchedulePolicy) -> PromptSchedulePolicy:
    with torch.no_grad():
        for p in policy.parameters():
            p.add_(0.1 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())))
    return policy


def test_a_zero_read_out_is_the_per_step_policy_exactly():
    per_step, prompt = SchedulePolicy(BASE, 0.15, 0.03), PromptSchedulePolicy(BASE, F, 0.15, 0.03)
    context = torch.randn(6, F)
    noise = per_step.noise(6, torch.Generator().manual_seed(0))
    a, b = per_step.act(noise), prompt.act(noise, context)
    assert torch.equal(a, b)
    assert torch.equal(per_step.log_prob(a), prompt.log_prob(b, context))
    assert torch.equal(per_step.deterministic_knobs(), prompt.deterministic_knobs())


def test_log_probs_are_the_gaussian_of_a_prompt_dependent_mean():
    policy, context = _moved(PromptSchedulePolicy(BASE, F, 0.15, 0.03)), torch.randn(5, F)
    actions = policy.sample(5, torch.Generator().manual_seed(1), context)
    mean = policy.mean_for(context)
    assert mean.shape == (5, 4, 4) and not torch.allclose(mean[0], mean[1])  # prompts differ
    expected = Normal(mean, policy.std()).log_prob(actions).sum(-1)
    assert torch.allclose(policy.log_prob(actions, context), expected, atol=1e-5)
    knobs = policy.deterministic_knobs(context)
    assert knobs.shape == (5, 4, 4) and not torch.allclose(knobs[0], knobs[1])


def test_the_read_out_gets_the_gradient_of_a_policy_loss():
    policy, context = PromptSchedulePolicy(BASE, F, 0.15, 0.03), torch.randn(8, F)
    actions = policy.sample(8, torch.Generator().manual_seed(2), context)
    advantages = torch.randn(8, 1)
    (-(policy.log_prob(actions, context) * advantages).mean()).backward()
    assert policy.head.weight.grad.abs().sum() > 0 and policy.mean.grad.abs().sum() > 0


def test_the_export_file_round_trips(tmp_path):
    policy, context = _moved(PromptSchedulePolicy(BASE, F, 0.15, 0.03)), torch.randn(3, F)
    save_prompt_policy(policy, tmp_path / "schedule_policy.safetensors")
    loaded = load_prompt_policy(tmp_path / "schedule_policy.safetensors")
    assert torch.equal(loaded.deterministic_knobs(context), policy.deterministic_knobs(context))
    assert torch.equal(loaded.std(), policy.std())


def test_the_stages_train_and_evaluate_a_prompt_conditioned_schedule(built_project):
    """train.schedule_policy: prompt through the real stages: the export holds the policy beside schedule.json,
    its schedules differ between prompts, and the evaluate and benchmark stages decode each prompt under its own
    (the benchmark's cell at the trained step count is the evaluation, byte for byte)."""
    import json
    from pathlib import Path

    import yaml

    from cogrpo.backbones.loading import load_generator
    from cogrpo.validate import load_params
    from tests.tiny import TINY, run_stage

    Path("params.yaml").write_text(yaml.safe_dump(TINY | {"train": TINY["train"] | {"schedule_policy": "prompt"}}))
    try:
        for stage in ("train", "evaluate", "benchmark"):
            run_stage(stage)
        policy = load_prompt_policy("models/trained/schedule_policy.safetensors")
        params = load_params()
        gen = load_generator(params.model, {"model": Path("models/trained"), "tokenizer": Path("models/tokenizer")})
        means = policy.mean_for(gen.prompt_features(gen.encode(["a red circle", "two blue squares"])))
        assert (means[0] - means[1]).abs().max() > 1e-3  # the read-out moved: prompts get different schedules
        assert json.loads(Path("models/trained/schedule.json").read_text())["schedule"]  # its per-step part
        cell = Path("outputs/benchmark/trained-learned/steps_04/embedded")
        for name in ("results.jsonl", "00003/samples/0001.png"):
            mine = cell / ("images/" + name if name.endswith(".png") else name)
            assert mine.read_bytes() == (Path("outputs/eval") / name).read_bytes(), name
        assert (cell.parent.parent / "steps_02/embedded/results.jsonl").is_file()  # carried to another count
        prompted = {p: p.read_bytes() for p in Path("outputs/eval").rglob("*.png")}
        Path("models/trained/schedule_policy.safetensors").unlink()  # the same model under its per-step part only
        run_stage("evaluate")
        assert {p: p.read_bytes() for p in Path("outputs/eval").rglob("*.png")} != prompted  # the policy was used
    finally:
        Path("params.yaml").write_text(yaml.safe_dump(TINY))


def test_a_knob_left_out_stays_at_the_base_and_learns_nothing():
    free = ("ratio", "remask_temperature", "cfg")  # temperature held
    for policy, context in ((SchedulePolicy(BASE, 0.15, 0.03, free), None),
                            (_moved(PromptSchedulePolicy(BASE, F, 0.15, 0.03, free)), torch.randn(5, F))):
        actions = policy.sample(5, torch.Generator().manual_seed(2), context)
        assert (actions[..., 1] == 0).all() and (actions[..., [0, 2, 3]] != 0).all()
        assert torch.equal(policy.knobs(actions)[..., 1], BASE[:, 1].expand(5, -1))
        policy.zero_grad()
        policy.log_prob(actions, context).sum().backward()
        assert (policy.mean.grad[:, 1] == 0).all() and (policy.log_std.grad[:, 1] == 0).all()
        assert (policy.mean.grad[:, [0, 2, 3]] != 0).any()
        # the Gaussian of the moved knobs only
        mean, std = policy.mean_for(context), policy.std()
        expected = Normal(mean[..., [0, 2, 3]], std[:, [0, 2, 3]]).log_prob(actions[..., [0, 2, 3]]).sum(-1)
        assert torch.allclose(policy.log_prob(actions, context), expected, atol=1e-5)
        assert torch.equal(policy.deterministic_knobs(context)[..., 1], BASE[:, 1].expand_as(
            policy.deterministic_knobs(context)[..., 1]))


def test_schedule_knobs_and_sharing_are_checked_and_their_defaults_leave_params_hashes_alone():
    import pytest

    from cogrpo.config import TrainConfig

    assert "schedule_knobs" not in TrainConfig().model_dump() and "share_schedule" not in TrainConfig().model_dump()
    assert TrainConfig(schedule_knobs=["cfg"]).model_dump()["schedule_knobs"] == ["cfg"]
    for bad in (["cfg", "cfg"], [], ["gamma"]):
        with pytest.raises(ValueError):
            TrainConfig(schedule_knobs=bad)
    from cogrpo.config import parse_params

    with pytest.raises(ValueError, match="extra_steps names none"):
        parse_params({"train": {"share_schedule": True}})
    with pytest.raises(ValueError, match="needs share_schedule"):
        parse_params({"train": {"schedule_policy": "prompt", "extra_steps": [4]}})
    assert parse_params({"train": {"share_schedule": True, "extra_steps": [4]}}).train.share_schedule


def test_the_export_file_keeps_the_held_knobs_held(tmp_path):
    policy, context = PromptSchedulePolicy(BASE, F, 0.15, 0.03, ("ratio", "cfg")), torch.randn(3, F)
    with torch.no_grad():  # even a read-out that moved a held knob's rows cannot move that knob after export
        policy.head.bias.add_(0.5)
    save_prompt_policy(policy, tmp_path / "schedule_policy.safetensors")
    loaded = load_prompt_policy(tmp_path / "schedule_policy.safetensors")
    assert torch.equal(loaded.moves, policy.moves)
    knobs = loaded.deterministic_knobs(context)
    assert torch.equal(knobs, policy.deterministic_knobs(context))
    assert torch.equal(knobs[..., 1:3], BASE[:, 1:3].expand(3, -1, -1))


def test_a_progress_view_is_the_source_carried_to_its_step_count():
    """train.share_schedule: the policy at another step count is the source's mean and σ interpolated over decoding
    progress, so its deterministic schedule is the one `transfer` would carry there, its log-probs a Gaussian's, and
    its gradients land on the source."""
    source = _moved(SchedulePolicy(base_knobs(ScheduleConfig(steps=8)), 0.15, 0.03))
    for T in (4, 8, 16):
        view = ProgressSchedulePolicy(source, base_knobs(ScheduleConfig(steps=T)))
        carried = transfer(source.deterministic_knobs(), source.base, view.base)
        assert torch.allclose(view.deterministic_knobs(), carried, atol=1e-5)
    assert torch.equal(progress_weights(8, 8), torch.eye(8))
    assert torch.allclose(progress_weights(8, 3).sum(-1), torch.ones(3))
    view = ProgressSchedulePolicy(source, base_knobs(ScheduleConfig(steps=4)))
    assert list(view.parameters()) == [] and set(view.state_dict()) == {"base"}  # nothing of the source's twice
    actions = view.sample(6, torch.Generator().manual_seed(3))
    expected = Normal(progress_weights(8, 4) @ source.mean, progress_weights(8, 4) @ source.std()).log_prob(actions)
    assert torch.allclose(view.log_prob(actions), expected.sum(-1), atol=1e-5)
    (-view.log_prob(actions).mean()).backward()
    assert source.mean.grad.abs().sum() > 0 and source.log_std.grad.abs().sum() > 0


def test_a_prompt_policy_decodes_at_another_step_count_as_a_shared_schedule_trained_it():
    """prompt_knobs carries the mean actions, not the knob values: they differ where a knob saturates (here the last
    step's ratio, 0 in the base, pushed further down — which training at 16 steps does to a shared schedule)."""
    policy, context = _moved(PromptSchedulePolicy(base_knobs(ScheduleConfig(steps=8)), F, 0.15, 0.03)), torch.randn(3, F)
    with torch.no_grad():
        policy.mean[-1, 0] = -2.0
    at_16 = base_knobs(ScheduleConfig(steps=16))
    trained = ProgressSchedulePolicy(policy, at_16).deterministic_knobs(context)
    assert torch.equal(prompt_knobs(policy, context, at_16), trained)
    assert not torch.allclose(transfer(policy.deterministic_knobs(context), policy.base, at_16), trained, atol=1e-3)
    assert torch.equal(prompt_knobs(policy, context, policy.base), policy.deterministic_knobs(context))


def test_a_model_folder_decodes_at_a_trained_step_count_with_that_count_s_schedule(tmp_path):
    """train.extra_steps exports schedule_T<n>.json: evaluating at n uses it, not schedule.json carried to n."""
    from cogrpo.config import Params
    from cogrpo.core.schedule import save_schedule
    from cogrpo.model_folder import ModelFolder
    from tasks.cells import model_schedule

    params, folder = Params(), ModelFolder(tmp_path)
    assert folder.schedule_for(4) == (None, None) and not folder.learned  # a base model: the base schedule
    main = base_knobs(params.schedule).clone()
    main[:, 3] += 1.0
    at_4 = base_knobs(params.schedule.model_copy(update={"steps": 4})).clone()
    at_4[:, 3] += 7.0
    save_schedule(main, folder.schedule)
    save_schedule(at_4, folder.schedule_at(4))
    assert folder.schedule_for(4) == (tmp_path / "schedule_T4.json", None)
    assert folder.schedule_for(2) == (tmp_path / "schedule.json", None)
    assert folder.schedules() == [tmp_path / "schedule.json", tmp_path / "schedule_T4.json"]
    assert torch.allclose(model_schedule(params, tmp_path, 4)[0], at_4, atol=1e-5)
    assert torch.allclose(model_schedule(params, tmp_path)[0], main, atol=1e-5)
    carried = transfer(main, base_knobs(params.schedule), base_knobs(params.schedule.model_copy(update={"steps": 2})))
    assert torch.allclose(model_schedule(params, tmp_path, 2)[0], carried, atol=1e-5)
