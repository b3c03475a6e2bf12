"""The schedule policies: the prompt- and state-conditioned ones start as the per-step one, their log-probs are a
Gaussian's (a state policy's recomputed exactly from the rollout's record), they learn, and they round-trip through
their export files."""

import pytest
import torch
from torch.distributions import Normal

from cogrpo.config import ScheduleConfig
from cogrpo.core.policy import (ProgressSchedulePolicy, PromptSchedulePolicy, SchedulePolicy, StateSchedulePolicy,
                                decoding_schedule, load_conditioned_policy, save_conditioned_policy)
from cogrpo.core.sampler import sample, step_logprobs
from cogrpo.core.schedule import base_knobs, progress_weights, transfer
from cogrpo.core.state import STATE_FEATURES, state_features
from tests.test_grpo import _batch, _tiny_trainer

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
    save_conditioned_policy(policy, tmp_path / "schedule_policy.safetensors")
    loaded = load_conditioned_policy(tmp_path / "schedule_policy.safetensors")
    assert torch.equal(loaded.deterministic_knobs(context), policy.deterministic_knobs(context))
    assert torch.equal(loaded.std(), policy.std())


@pytest.mark.parametrize("kind,file", [  # suite time: the prompt read-out is slow, the paper's state policy stays
    pytest.param("prompt", "schedule_policy.safetensors", marks=pytest.mark.slow),
    ("state", "state_policy.safetensors")])
def test_the_stages_train_and_evaluate_a_conditioned_schedule(built_project, kind, file):
    """train.schedule_policy: prompt or state through the real stages: the export holds the policy beside
    schedule.json (its per-step part), what it reads moved it (a prompt read-out: prompts get different schedules; a
    state network: its zero last layer learned), and the evaluate and benchmark stages decode with it (the
    benchmark's cell at the trained step count is the evaluation, byte for byte; without the file they differ)."""
    import json
    from pathlib import Path

    import yaml

    from cogrpo.backbones.loading import load_generator
    from cogrpo.validate import load_params
    from tests.tiny import TINY, run_stage

    Path("params.yaml").write_text(yaml.safe_dump(TINY | {"train": TINY["train"] | {"schedule_policy": kind}}))
    try:
        for stage in ("train", "evaluate", "benchmark"):
            run_stage(stage)
        trained = Path("models/trained")
        policy = load_conditioned_policy(trained / file)
        assert {p.name for p in trained.glob("*_policy.safetensors")} == {file}
        if kind == "state":
            assert isinstance(policy, StateSchedulePolicy) and policy.net[-1].weight.abs().max() > 0
        else:
            gen = load_generator(load_params().model, {"model": trained, "tokenizer": Path("models/tokenizer")})
            means = policy.mean_for(gen.prompt_features(gen.encode(["a red circle", "two blue squares"])))
            assert (means[0] - means[1]).abs().max() > 1e-3  # the read-out moved: prompts get different schedules
        assert json.loads((trained / "schedule.json").read_text())["schedule"]  # its per-step part
        cell = Path("outputs/benchmark/trained-learned/steps_04/embedded")
        for name in ("results.jsonl", "00003/samples/0001.png"):
            mine = cell / ("images/" + name if name.endswith(".png") else name)
            assert mine.read_bytes() == (Path("outputs/eval") / name).read_bytes(), name
        assert (cell.parent.parent / "steps_02/embedded/results.jsonl").is_file()  # carried to another count
        conditioned = {p: p.read_bytes() for p in Path("outputs/eval").rglob("*.png")}
        (trained / file).unlink()  # the same model under its per-step part only
        run_stage("evaluate")
        assert {p: p.read_bytes() for p in Path("outputs/eval").rglob("*.png")} != conditioned  # the policy was used
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
    save_conditioned_policy(policy, tmp_path / "schedule_policy.safetensors")
    loaded = load_conditioned_policy(tmp_path / "schedule_policy.safetensors")
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
    """decoding_schedule carries the mean actions, not the knob values: they differ where a knob saturates (here the
    last step's ratio, 0 in the base, pushed further down — which training at 16 steps does to a shared schedule)."""
    policy, context = _moved(PromptSchedulePolicy(base_knobs(ScheduleConfig(steps=8)), F, 0.15, 0.03)), torch.randn(3, F)
    with torch.no_grad():
        policy.mean[-1, 0] = -2.0
    at_16 = base_knobs(ScheduleConfig(steps=16))
    trained = ProgressSchedulePolicy(policy, at_16).deterministic_knobs(context)
    assert torch.equal(decoding_schedule(policy, context, at_16)[0], trained)
    assert not torch.allclose(transfer(policy.deterministic_knobs(context), policy.base, at_16), trained, atol=1e-3)
    assert torch.equal(decoding_schedule(policy, context, policy.base)[0], policy.deterministic_knobs(context))


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


# ---- the state-conditioned policy (train.schedule_policy: state) ---------------------------------------------------
REWARDS = torch.tensor([1.0, 0, 0, 1, 0, 1, 1, 0])


def _move_network(policy: StateSchedulePolicy, scale: float = 0.3) -> StateSchedulePolicy:
    """A trained-looking network: its zero last layer set to random weights, so the state moves the schedule."""
    with torch.no_grad():
        policy.net[-1].weight.copy_(scale * torch.randn(policy.net[-1].weight.shape,
                                                        generator=torch.Generator().manual_seed(7)))
    return policy


def _decode(gen, policy, cond, target_base):
    """Deterministic decoding of cond's rows under a conditioned policy at target_base's step count (as the
    evaluation stages decode)."""
    knobs, choose = decoding_schedule(policy, gen.prompt_features(cond), target_base)
    return sample(gen, cond, knobs, torch.arange(len(cond)), choose=choose)


def test_a_fresh_state_policy_rolls_out_and_decodes_as_the_per_step_policy():
    """The network's last layer starts at zero: the same actions, trajectories and log-probs as train.schedule_policy:
    per_step from the same seeds, and the same tokens at the mean as the per-step schedule; once it has moved, it
    decodes otherwise."""
    per_step, state = _tiny_trainer("co"), _tiny_trainer("co", schedule_policy="state")
    batch = _batch()
    a, b = per_step.rollout(batch), state.rollout(batch)
    assert torch.equal(a.actions, b.actions) and torch.equal(a.sched_logp, b.sched_logp)
    assert torch.equal(a.traj.tokens, b.traj.tokens) and torch.equal(a.traj.knobs, b.traj.knobs)
    gen, cond = state.model, batch.trajectory_cond()
    fixed = sample(gen, cond, per_step.policy.deterministic_knobs(), torch.arange(len(cond)))
    fresh = _decode(gen, state.policy, cond, state.policy.base)
    assert torch.equal(fresh.tokens, fixed.tokens) and torch.equal(fresh.knobs, fixed.knobs.expand_as(fresh.knobs))
    moved = _decode(gen, _move_network(state.policy), cond, state.policy.base)
    assert not torch.allclose(moved.knobs, fresh.knobs, atol=1e-3)  # states now get their own knobs
    assert not torch.equal(moved.tokens, fresh.tokens)


def test_the_update_recomputes_a_state_policy_s_rollout_log_probs_from_the_record():
    """The rollout records each step's state features; they are the state the sampler held before that step (rebuilt
    here from the trajectory record with one forward per step), and the policy's log-prob of the recorded actions
    at them is the rollout's. Features of the wrong step would not be."""
    from cogrpo.core.trainer import iteration_generator

    tr = _tiny_trainer("co", schedule_policy="state")
    _move_network(tr.policy)
    batch = _batch()
    ro = tr.rollout(batch)
    T = ro.traj.steps
    assert ro.features.shape == (8, T, STATE_FEATURES)
    noise = tr.policy.noise(8, iteration_generator(tr.cfg.seed, 0, 1))  # the rollout's, drawn up front
    assert torch.allclose(tr.policy.act(noise, ro.context, ro.features), ro.actions, atol=1e-6)  # drawn at them
    assert torch.allclose(tr.policy.log_prob(ro.actions, ro.context, ro.features), ro.sched_logp, atol=1e-5, rtol=0)
    shifted = torch.cat([ro.features[:, :1], ro.features[:, :-1]], 1)  # each step reading the step before's state
    assert not torch.allclose(tr.policy.log_prob(ro.actions, ro.context, shifted), ro.sched_logp, atol=1e-3)
    gen, cond, commit = tr.model, batch.trajectory_cond(), ro.traj.commit_step
    for t in range(T):
        lp = was_masked = None
        if t:
            was_masked = commit >= t - 1
            canvas = torch.where(was_masked, gen.mask_id, ro.traj.tokens)
            with torch.no_grad():
                lp = step_logprobs(gen, canvas, cond, ro.traj.knobs[:, t - 1])
        again = state_features(t, T, commit >= t, lp, was_masked)
        assert torch.allclose(again, ro.features[:, t], atol=1e-5), t
    metrics = tr.update(batch, ro, REWARDS)
    assert abs(metrics["schedule/ratio_mean"] - 1) < 1e-5  # the first update is on-policy


def test_a_state_policy_s_log_probs_are_the_gaussian_of_a_state_dependent_mean_and_held_knobs_stay_held():
    free = ("ratio", "remask_temperature", "cfg")  # temperature held
    policy = _move_network(StateSchedulePolicy(BASE, F, 0.15, 0.03, free))
    context, features = torch.randn(5, F), torch.rand(5, 4, STATE_FEATURES)
    mean = policy.mean_for(context, features)
    assert mean.shape == (5, 4, 4) and not torch.allclose(mean[0], mean[1])
    actions = policy.act(policy.noise(5, torch.Generator().manual_seed(1)), context, features)
    assert (actions[..., 1] == 0).all() and (actions[..., [0, 2, 3]] != 0).all()
    expected = Normal(mean[..., [0, 2, 3]], policy.std()[:, [0, 2, 3]]).log_prob(actions[..., [0, 2, 3]]).sum(-1)
    assert torch.allclose(policy.log_prob(actions, context, features), expected, atol=1e-5)
    policy.log_prob(actions, context, features).sum().backward()
    assert (policy.mean.grad[:, 1] == 0).all() and (policy.net[-1].weight.grad[1] == 0).all()
    assert policy.net[-1].weight.grad.abs().sum() > 0 and policy.net[0].weight.grad.abs().sum() > 0
    assert torch.equal(policy.mean_for(context), policy.mean)  # without states: its per-step part (schedule.json)


def test_a_state_policy_exports_and_decodes_the_same_at_its_own_and_other_step_counts(tmp_path):
    """state_policy.safetensors holds the whole policy: loaded, it decodes every prompt as the trained one does, at
    the trained step count and carried to others (the per-step part by decoding progress, the network at that
    count's own states)."""
    tr = _tiny_trainer("co", schedule_policy="state")
    policy = _move_network(tr.policy)
    with torch.no_grad():
        policy.mean.add_(0.2 * torch.randn(policy.mean.shape, generator=torch.Generator().manual_seed(3)))
    save_conditioned_policy(policy, tmp_path / "state_policy.safetensors")
    loaded = load_conditioned_policy(tmp_path / "state_policy.safetensors")
    assert isinstance(loaded, StateSchedulePolicy) and torch.equal(loaded.std(), policy.std())
    gen, cond = tr.model, _batch().trajectory_cond()
    for T in (4, 2, 8):
        target = base_knobs(ScheduleConfig(steps=T))
        mine, again = _decode(gen, policy, cond, target), _decode(gen, loaded, cond, target)
        assert mine.steps == T and torch.equal(mine.tokens, again.tokens) and torch.equal(mine.knobs, again.knobs)
    held = StateSchedulePolicy(BASE, F, 0.15, 0.03, ("ratio", "cfg"))
    save_conditioned_policy(held, tmp_path / "held.safetensors")
    assert torch.equal(load_conditioned_policy(tmp_path / "held.safetensors").moves, held.moves)
    prompt = PromptSchedulePolicy(BASE, F, 0.15, 0.03)  # the one loader tells the kinds apart
    save_conditioned_policy(prompt, tmp_path / "prompt.safetensors")
    assert type(load_conditioned_policy(tmp_path / "prompt.safetensors")) is PromptSchedulePolicy


def test_state_policy_with_extra_steps_needs_a_shared_schedule():
    from cogrpo.config import parse_params

    with pytest.raises(ValueError, match="state with extra_steps needs share_schedule"):
        parse_params({"train": {"schedule_policy": "state", "extra_steps": [4]}})
    assert parse_params({"train": {"schedule_policy": "state", "extra_steps": [4], "share_schedule": True}})

