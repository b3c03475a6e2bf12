"""GRPO math, the schedule policy, the freezing rule, and a bandit the schedule policy must solve."""

import math

import pytest
import torch

from cogrpo.config import ScheduleConfig, TrainConfig
from cogrpo.core.grpo import (aggregated_advantages, clipped_surrogate, group_advantages, k3_kl, schedule_policy_loss,
                              token_policy_loss, zero_std_fraction)
from cogrpo.backbones.embedded import EmbeddedGenerator
from cogrpo.backbones.mdm import MDM, MDMConfig
from cogrpo.core.generator import Condition
from cogrpo.core.policy import SchedulePolicy
from cogrpo.core.schedule import KNOBS, apply_actions, base_knobs, progress_weights
from cogrpo.core.batch import GroupedBatch
from cogrpo.core.trainer import CoGRPO


def test_group_advantages():
    r = torch.tensor([[1.0, 0.0, 0.0, 1.0], [0.5, 0.5, 0.5, 0.5]])
    a = group_advantages(r)
    assert torch.allclose(a[0], torch.tensor([1.0, -1.0, -1.0, 1.0]), atol=1e-3)
    assert torch.equal(a[1], torch.zeros(4))  # a zero-std group carries no signal
    assert torch.allclose(group_advantages(r, scale_by_std=False)[0], torch.tensor([0.5, -0.5, -0.5, 0.5]))
    assert zero_std_fraction(r) == 0.5


def test_a_term_constant_within_a_group_adds_nothing_to_its_advantages():
    """reward_aggregation 'advantage': a term with zero spread in a group has a zero group advantage there, whatever
    its level, and only there."""
    signal = torch.tensor([[1.0, 0.0, 0.0, 1.0], [0.0, 1.0, 1.0, 0.0]])
    flat = torch.tensor([[5.0, 5.0, 5.0, 5.0], [0.0, 3.0, 0.0, 3.0]])  # flat in group 0 only
    terms, weights = torch.stack([signal, flat], -1), torch.tensor([1.0, 2.0])
    for scale in (True, False):
        adv = aggregated_advantages(terms, weights, "advantage", scale)
        assert torch.equal(adv[0], group_advantages(signal, scale)[0])
        assert not torch.allclose(adv[1], group_advantages(signal, scale)[1])


@pytest.mark.parametrize("scale_by_std", [True, False])
def test_with_one_term_advantage_aggregation_is_the_sum(scale_by_std):
    r = torch.tensor([[1.0, 0.0, 0.3, 1.0], [0.5, 0.5, 0.5, 0.5], [2.0, -1.0, 0.0, 4.0]])[..., None]
    one = torch.ones(1)
    assert torch.allclose(aggregated_advantages(r, one, "advantage", scale_by_std),
                          aggregated_advantages(r, one, "sum", scale_by_std))
    assert torch.equal(aggregated_advantages(r, one, "sum", scale_by_std), group_advantages(r[..., 0], scale_by_std))


def test_two_terms_aggregated_by_advantage_by_hand():
    """One group of 4: term a in [0, 1] at weight 2, term b on a 100 times larger scale at weight 1. 'sum' ranks
    the samples as b alone does; 'advantage' weighs the two as their weights say."""
    a = torch.tensor([[1.0, 0.0, 1.0, 0.0]])  # mean 0.5, std 0.5: advantages ±1
    b = torch.tensor([[0.0, 100.0, 300.0, 200.0]])  # mean 150, std √12500 = 111.80
    terms, weights = torch.stack([a, b], -1), torch.tensor([2.0, 1.0])
    sb = 12500**0.5
    expected = 2 * torch.tensor([1.0, -1.0, 1.0, -1.0]) + torch.tensor([-150.0, -50.0, 150.0, 50.0]) / sb
    assert torch.allclose(aggregated_advantages(terms, weights, "advantage"), expected, atol=1e-3)
    total = torch.tensor([2.0, 100.0, 302.0, 200.0])  # 2a + b: mean 151, std 111.80…
    by_sum = (total - 151) / total.std(unbiased=False)
    assert torch.allclose(aggregated_advantages(terms, weights, "sum"), by_sum[None], atol=1e-3)
    unscaled = 2 * torch.tensor([0.5, -0.5, 0.5, -0.5]) + torch.tensor([-150.0, -50.0, 150.0, 50.0])
    assert torch.allclose(aggregated_advantages(terms, weights, "advantage", scale_by_std=False), unscaled[None])


def test_clipped_surrogate():
    old = torch.zeros(1, 4)
    new = torch.log(torch.tensor([[0.5, 1.0, 1.5, 1.1]]))
    adv = torch.tensor([[1.0, 1.0, 1.0, -1.0]])
    s = clipped_surrogate(new, old, adv, clip_eps=0.2)
    # min(ρA, clip(ρ)A): 0.5, 1.0, 1.2 (clipped), -1.1
    assert math.isclose(s.loss.item(), -(0.5 + 1.0 + 1.2 - 1.1) / 4, rel_tol=1e-6)
    assert s.clip_fraction == 0.5 and math.isclose(s.ratio_mean, (0.5 + 1 + 1.5 + 1.1) / 4, rel_tol=1e-6)
    new.requires_grad_(True)
    clipped_surrogate(new, old, adv, 0.2).loss.backward()
    assert new.grad[0, 2] == 0 and new.grad[0, 0] != 0  # no gradient through the clipped side


def test_k3_kl_is_an_unbiased_nonnegative_estimator():
    p = torch.distributions.Categorical(logits=torch.tensor([0.0, 1.0, 2.0]))
    q = torch.distributions.Categorical(logits=torch.tensor([0.5, 0.5, 1.0]))
    x = p.sample((200_000,), )
    est = k3_kl(p.log_prob(x), q.log_prob(x))
    assert (est >= 0).all()
    assert math.isclose(est.mean().item(), torch.distributions.kl_divergence(p, q).item(), rel_tol=0.03)
    assert k3_kl(torch.tensor(-1.0), torch.tensor(-1.0)) == 0


def test_slices_of_the_token_loss_add_up_to_the_whole_batch():
    """Each slice weighted by its share, the KL by the whole batch's committed cells: the gradients and metrics of
    the slices sum to the whole batch's, which is how micro-batches and ranks compute what one process does."""
    g = torch.Generator().manual_seed(0)
    n, S, N = 6, 3, 5
    logits = torch.randn(n, S, N, generator=g, requires_grad=True)
    ref, old = torch.randn(n, S, N, generator=g), torch.randn(n, S, generator=g)
    committed, adv = torch.rand(n, S, N, generator=g) < 0.4, torch.randn(n, 1, generator=g)
    cells = committed.sum()
    kwargs = dict(clip_eps=0.2, kl_beta=0.1, cells=cells)
    whole, whole_metrics = token_policy_loss(logits, ref, committed, old, adv, share=1.0, **kwargs)
    (whole_grad,) = torch.autograd.grad(whole, logits)
    parts = [token_policy_loss(logits[rows], ref[rows], committed[rows], old[rows], adv[rows], share=2 / n, **kwargs)
             for rows in (slice(0, 2), slice(2, 4), slice(4, 6))]
    (sliced_grad,) = torch.autograd.grad(sum(loss for loss, _ in parts), logits)
    assert torch.allclose(whole_grad, sliced_grad, atol=1e-6) and whole_grad.abs().sum() > 0
    for key, value in whole_metrics.items():
        assert math.isclose(sum(m[key] for _, m in parts), value, rel_tol=1e-5, abs_tol=1e-7), key
    kl = (k3_kl(logits, ref) * committed).sum() / cells
    assert math.isclose(whole_metrics["model/kl"], kl.item(), rel_tol=1e-6)
    schedule_whole, _ = schedule_policy_loss(old, old.detach(), adv, clip_eps=0.2, share=1.0)
    schedule_half, _ = schedule_policy_loss(old[:3], old[:3], adv[:3], clip_eps=0.2, share=0.5)
    assert math.isclose(schedule_half.item(), 0.5 * -adv[:3].mean().item(), rel_tol=1e-6)
    assert math.isclose(schedule_whole.item(), -adv.mean().item(), rel_tol=1e-6)


def test_an_untrained_cell_far_below_the_reference_leaves_the_kl_finite():
    """At a cell unmasked before the step the model's output is untrained; once it drifts 100 nats below the
    reference, exp(ref − π) overflows. Masking by multiplication made that inf · 0 = NaN in the KL and its gradient
    (the NaN KLs of the default run); the loss selects committed cells first."""
    committed = torch.tensor([[[True, False, True]]])
    logp = torch.tensor([[[-1.0, -200.0, -2.0]]], requires_grad=True)
    ref = torch.tensor([[[-1.5, -0.1, -2.5]]])
    assert torch.isnan((k3_kl(logp, ref) * committed).sum())  # the old masking
    loss, metrics = token_policy_loss(logp, ref, committed, torch.tensor([[-3.0]]), torch.ones(1, 1), clip_eps=0.2,
                                      kl_beta=0.1, share=1.0, cells=committed.sum())
    loss.backward()
    assert math.isfinite(metrics["model/kl"]) and torch.isfinite(logp.grad).all()
    expected = (k3_kl(logp[committed], ref[committed])).sum() / 2
    assert math.isclose(metrics["model/kl"], expected.item(), rel_tol=1e-6) and logp.grad[0, 0, 1] == 0


@pytest.mark.parametrize("mode", ["co", "model"])
def test_a_micro_batched_update_is_the_whole_batch_update(mode):
    """train.micro_batch changes memory, not the step: the same gradient and metrics up to float rounding (the
    gradient is compared, not the weights: Adam's first step is about lr·sign(g), which rounding flips where g ≈ 0)."""
    batch, r = _batch(), torch.tensor([1.0, 0, 0, 1, 0, 1, 1, 0])
    results = []
    for micro in (None, 3):
        tr = _tiny_trainer(mode, micro_batch=micro)
        metrics = tr.update(batch, tr.rollout(batch), r)
        results.append(([p.grad.clone() for p in tr.trained], metrics))
    (whole, m_whole), (sliced, m_sliced) = results
    assert all(torch.allclose(a, b, atol=1e-6, rtol=1e-4) for a, b in zip(whole, sliced))
    assert sum(g.abs().sum() for g in whole) > 0
    assert m_whole.keys() == m_sliced.keys()
    for key, value in m_whole.items():
        assert math.isclose(value, m_sliced[key], rel_tol=1e-4, abs_tol=1e-6), key


def test_policy_log_prob_matches_torch_distributions():
    torch.manual_seed(0)
    pol = SchedulePolicy(base_knobs(ScheduleConfig(steps=5)), sigma_init=0.4, sigma_floor=0.1)
    with torch.no_grad():
        pol.mean.normal_()
        pol.log_std.normal_()
    a = pol.sample(7)
    ref = torch.distributions.Normal(pol.mean, pol.std()).log_prob(a).sum(-1)
    assert torch.allclose(pol.log_prob(a), ref, atol=1e-5)
    assert (pol.std() >= 0.1).all()
    zero = SchedulePolicy(base_knobs(ScheduleConfig(steps=5)))
    assert torch.allclose(zero.deterministic_knobs()[:-1], base_knobs(ScheduleConfig(steps=5))[:-1], atol=1e-5)


def test_schedule_bandit_finds_the_best_knob():
    """One step, reward peaks at CFG = 5 (base 3): GRPO on φ alone must move the mean there."""
    torch.manual_seed(0)
    pol = SchedulePolicy(base_knobs(ScheduleConfig(steps=1)), sigma_init=0.5, sigma_floor=0.05)
    opt = torch.optim.Adam(pol.parameters(), lr=0.05)
    cfg_index = KNOBS.index("cfg")
    for _ in range(300):
        a = pol.sample(64)
        old = pol.log_prob(a).detach()
        reward = -(pol.knobs(a)[:, 0, cfg_index] - 5.0) ** 2
        adv = group_advantages(reward.view(4, 16)).flatten()[:, None]
        loss = clipped_surrogate(pol.log_prob(a), old, adv, 0.2).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert abs(pol.deterministic_knobs()[0, cfg_index].item() - 5.0) < 0.3


def _batch() -> GroupedBatch:
    """Two prompts × G = 4: the (B, G) layout the trainer groups rewards by."""
    return GroupedBatch(torch.arange(2), Condition({"text": torch.randn(2, 5, 16), "text_mask": torch.ones(2, 5, dtype=torch.bool)}), 4)


def test_grouped_batch_layout_is_prompt_major():
    text = torch.randn(2, 5, 16)
    b = GroupedBatch(torch.tensor([7, 3]), Condition({"text": text}), 3)
    assert b.trajectory_rows().tolist() == [7, 7, 7, 3, 3, 3] and b.trajectories == 6
    assert b.groups(torch.arange(6.0)).tolist() == [[0, 1, 2], [3, 4, 5]]
    assert torch.equal(b.trajectory_cond().tensors["text"][4], text[1])


def _tiny_trainer(mode, extra_steps=(), **train):
    torch.manual_seed(0)
    model = MDM(MDMConfig(grid=4, n_shapes=4, n_colors=6, text_encoder="tiny-random", text_dim=16,
                          max_text_tokens=8, dim=32, layers=1, heads=2)).eval()
    model = EmbeddedGenerator(model, text=None, tokenizer=None)  # the batches carry their conditions
    cfg = TrainConfig(mode=mode, group_size=4, prompts_per_iter=2, lr_model=1e-2, lr_schedule=1e-1,
                      extra_steps=list(extra_steps), **train)
    bases = {T: base_knobs(ScheduleConfig(steps=T)) for T in (4, *extra_steps)}
    return CoGRPO(model, bases, cfg)


@pytest.mark.parametrize("policy", ["per_step", "state"])
@pytest.mark.parametrize("mode", ["co", "model", "schedule"])
def test_freezing_rule(mode, policy):
    tr = _tiny_trainer(mode, schedule_policy=policy)
    batch = _batch()
    before_model = {k: v.clone() for k, v in tr.model.state_dict().items()}
    before_policy = {k: v.clone() for k, v in tr.policy.state_dict().items()}
    ro = tr.rollout(batch)
    if mode == "model":
        assert torch.equal(ro.actions, torch.zeros_like(ro.actions))  # deterministic base schedule
    else:
        assert ro.actions.abs().sum() > 0
    metrics = tr.update(batch, ro, torch.tensor([1.0, 0, 0, 1, 0, 1, 1, 0]))
    model_same = all(torch.equal(v, tr.model.state_dict()[k]) for k, v in before_model.items())
    policy_same = all(torch.equal(v, tr.policy.state_dict()[k]) for k, v in before_policy.items())
    assert model_same == (mode == "schedule")
    assert policy_same == (mode == "model")
    assert all(torch.equal(v, tr.ref.state_dict()[k]) for k, v in before_model.items())  # θ_ref never moves
    assert "schedule/step2/cfg" in metrics and metrics["skipped"] == 0


def test_the_update_takes_its_advantages_from_the_terms_as_reward_aggregation_says():
    """Per-term advantages from the trainer (reward_aggregation 'advantage') step as those advantages handed to it as
    the rewards, with only their (zero) group means taken off (Dr. GRPO's unscaled 'sum')."""
    batch = _batch()
    terms = torch.stack([torch.tensor([1.0, 0, 0, 1, 0, 1, 1, 0]), torch.tensor([0.0, 9, 3, 3, 5, 5, 5, 5])], -1)
    weights = torch.tensor([1.0, 0.5])
    adv = aggregated_advantages(batch.groups(terms), weights, "advantage").flatten()
    grads = []
    for tr, args in ((_tiny_trainer("model", reward_aggregation="advantage"), (terms, weights)),
                     (_tiny_trainer("model", scale_by_std=False), (adv,))):
        tr.update(batch, tr.rollout(batch), *args)
        grads.append([p.grad.clone() for p in tr.trained])
    assert all(torch.allclose(a, b, atol=1e-6, rtol=1e-4) for a, b in zip(*grads))
    assert sum(g.abs().sum() for g in grads[0]) > 0


@pytest.mark.parametrize("model_phase_schedule", ["sampled", "mean"])
def test_alternate_updates_the_model_and_the_schedule_in_turn(model_phase_schedule):
    """Two θ iterations (φ frozen), one φ iteration (θ frozen), repeated; at 'mean' a θ phase rolls out at π_φ's
    mean, a φ phase always samples."""
    tr = _tiny_trainer("alternate", alternate={"model_iterations": 2, "schedule_iterations": 1,
                                               "model_phase_schedule": model_phase_schedule})
    batch, r = _batch(), torch.tensor([1.0, 0, 0, 1, 0, 1, 1, 0])
    moved = []
    for _ in range(6):
        model = [p.detach().clone() for p in tr.trained]
        policy = [p.detach().clone() for p in tr.policies.parameters()]
        ro = tr.rollout(batch)
        at_mean = torch.allclose(ro.actions, tr.policy.mean.detach().expand_as(ro.actions))
        metrics = tr.update(batch, ro, r)
        moved.append((not all(torch.equal(a, b) for a, b in zip(model, tr.trained)),
                      not all(torch.equal(a, b) for a, b in zip(policy, tr.policies.parameters()))))
        assert metrics["alternate/model_phase"] == float(moved[-1][0])
        assert at_mean == (model_phase_schedule == "mean" and moved[-1][0])
    assert moved == [(True, False), (True, False), (False, True)] * 2


def test_a_prompt_read_out_moves_the_schedule_no_further_than_the_per_step_mean():
    """Adam moves each of the read-out's F weights by about the learning rate; at the per-step mean's rate the F of
    them would move a knob F times as far in one update (a full-size run collapsed so: reward 0.85 → 0.5)."""
    tr = _tiny_trainer("schedule", schedule_policy="prompt")
    batch = _batch()
    context = tr.model.prompt_features(batch.trajectory_cond())
    readout = lambda: (tr.policy.mean_for(context) - tr.policy.mean).detach()  # noqa: E731
    before = readout()
    tr.update(batch, tr.rollout(batch), torch.tensor([1.0, 0, 0, 1, 0, 1, 1, 0]))
    per_step_move = tr.policy.mean.detach().abs().max()
    assert 0 < (readout() - before).abs().max() <= 2 * per_step_move
    assert per_step_move == pytest.approx(0.1, rel=0.05)  # Adam's first step: the learning rate


def test_a_state_network_moves_the_schedule_no_further_than_the_per_step_mean():
    """Each layer of the state policy's network learns at lr_schedule ÷ its fan-in (as a prompt read-out does): one
    Adam step moves the mean of any state by no more than the per-step mean moves; the last layer starts at zero,
    so the first step moves it alone."""
    tr = _tiny_trainer("schedule", schedule_policy="state")
    assert [g["lr"] for g in tr.opt_sched.param_groups] == pytest.approx([0.1, 0.1 / (9 + 16), 0.1 / 32])
    batch = _batch()
    ro = tr.rollout(batch)
    first = tr.policy.net[0].weight.detach().clone()
    tr.update(batch, ro, torch.tensor([1.0, 0, 0, 1, 0, 1, 1, 0]))
    residual = tr.policy.state_residual(ro.context, ro.features).detach()
    per_step_move = tr.policy.mean.detach().abs().max()
    assert 0 < residual.abs().max() <= 2 * per_step_move
    assert torch.equal(first, tr.policy.net[0].weight)  # no gradient through a zero last layer yet


def test_first_update_is_on_policy_and_a_nan_reward_stops_the_update():
    tr = _tiny_trainer("co")
    batch = _batch()
    ro = tr.rollout(batch)
    m = tr.update(batch, ro, torch.tensor([1.0, 0, 0, 1, 0, 1, 1, 0]))
    assert abs(m["model/ratio_mean"] - 1) < 1e-4 and abs(m["schedule/ratio_mean"] - 1) < 1e-5
    assert m["model/kl"] < 1e-8
    state = {k: v.clone() for k, v in tr.model.state_dict().items()}
    with pytest.raises(ValueError, match=r"^iteration 2: 1 of 8 rewards are NaN or infinite; nothing was updated$"):
        tr.update(batch, tr.rollout(batch), torch.tensor([1.0, 0, 0, 1, float("nan"), 1, 1, 0]))
    assert tr.iteration == 1 and all(torch.equal(v, tr.model.state_dict()[k]) for k, v in state.items())


def test_extra_step_counts_cycle_and_each_trains_only_its_own_policy():
    tr = _tiny_trainer("co", extra_steps=(2,))
    batch = _batch()
    r = torch.tensor([1.0, 0, 0, 1, 0, 1, 1, 0])
    seen = []
    for _ in range(3):
        before = {T: p.mean.detach().clone() for T, p in tr.policies.items()}
        ro = tr.rollout(batch)
        m = tr.update(batch, ro, r)
        T = ro.traj.steps
        seen.append(T)
        assert m["steps"] == T and ro.actions.shape[1] == T
        assert not torch.equal(before[str(T)], tr.policies[str(T)].mean)
        assert all(torch.equal(v, tr.policies[k].mean) for k, v in before.items() if k != str(T))
    assert seen == [4, 2, 4]
    assert set(tr.learned_schedules()) == {4, 2} and list(tr.learned_schedules())[0] == 4
    assert "schedule/T2/step2/cfg" in m and "schedule/step4/cfg" in m


def test_a_shared_schedule_trains_one_policy_at_every_step_count():
    tr = _tiny_trainer("co", extra_steps=(2,), share_schedule=True)
    assert len(list(tr.policies.parameters())) == 2  # the main policy's mean and log_std, nothing more
    batch, r = _batch(), torch.tensor([1.0, 0, 0, 1, 0, 1, 1, 0])
    tr.update(batch, tr.rollout(batch), r)  # at 4 steps
    before = tr.policy.mean.detach().clone()
    ro = tr.rollout(batch)
    assert ro.traj.steps == 2
    tr.update(batch, ro, r)  # at 2 steps: moves the main policy
    assert not torch.equal(before, tr.policy.mean)
    at_2 = apply_actions(base_knobs(ScheduleConfig(steps=2)), progress_weights(4, 2) @ tr.policy.mean.detach())
    assert torch.allclose(tr.learned_schedules()[2], at_2)  # the main policy read at 2 steps, nothing of its own


@pytest.mark.parametrize("extra_steps,share,policy", [((), False, "per_step"), ((2,), False, "per_step"),
                                                      ((2,), True, "per_step"), ((2,), True, "state")])
def test_checkpoint_roundtrip(tmp_path, extra_steps, share, policy):
    tr = _tiny_trainer("co", extra_steps, share_schedule=share, schedule_policy=policy)
    batch = _batch()
    r = torch.tensor([1.0, 0, 0, 1, 0, 1, 1, 0])
    for _ in range(3):  # at 4, 2 and 4 steps: a state policy's network (both layers) has moved by then
        tr.update(batch, tr.rollout(batch), r)
    tr.save(tmp_path)
    again = _tiny_trainer("co", extra_steps, share_schedule=share, schedule_policy=policy)
    again.load(tmp_path)
    assert again.iteration == tr.iteration == 3
    assert all(torch.equal(v, again.policies.state_dict()[k]) for k, v in tr.policies.state_dict().items())
    a, b = tr.update(batch, tr.rollout(batch), r), \
        again.update(batch, again.rollout(batch), r)
    assert a == b


def test_a_skipped_update_names_its_cause_and_three_in_a_row_stop_the_run(monkeypatch):
    """A non-finite loss skips the update (the weights stay), says which metric was not finite, and a training that
    cannot update any more stops instead of exporting its last good model as finished."""
    from cogrpo.core import trainer as trainer_module
    from cogrpo.errors import InputError

    tr = _tiny_trainer("model")
    batch, r = _batch(), torch.tensor([1.0, 0, 0, 1, 0, 1, 1, 0])
    assert tr.update(batch, tr.rollout(batch), r)["skipped"] == 0 and tr.skip_reasons == []
    real = trainer_module.token_policy_loss

    def diverged(*args, **kwargs):
        loss, metrics = real(*args, **kwargs)
        return loss * float("nan"), metrics | {"model/kl": float("nan")}

    monkeypatch.setattr(trainer_module, "token_policy_loss", diverged)
    state = {k: v.clone() for k, v in tr.model.state_dict().items()}
    for _ in range(2):
        assert tr.update(batch, tr.rollout(batch), r)["skipped"] == 1 and tr.skip_reasons == ["model/kl"]
    assert all(torch.equal(v, tr.model.state_dict()[k]) for k, v in state.items())
    with pytest.raises(InputError, match=r"^iteration 4: no update in the last 3 iterations \(non-finite model/kl\): "
                                         r"the training diverged$"):
        tr.update(batch, tr.rollout(batch), r)


def test_mix_update_moves_the_weights_to_the_stated_point_between_base_and_trained():
    """WiSE-FT on the embedded generator: base + w · (trained − base), the reference untouched."""
    tr = _tiny_trainer("model")
    base = [p.clone() for p in tr.ref.parameters()]
    with torch.no_grad():
        for p in tr.model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    trained = [p.clone() for p in tr.model.parameters()]
    tr.model.mix_update(tr.ref, 0.3)
    assert all(torch.equal(r, b) for r, b in zip(tr.ref.parameters(), base))
    assert all(torch.allclose(p, b + 0.3 * (t - b), atol=1e-6) for p, b, t in zip(tr.model.parameters(), base, trained))


def test_step_selection_random_window_and_entropy():
    from cogrpo.core.grpo import select_steps

    gen, again = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    assert torch.equal(select_steps("random", 8, 3, gen, 0.4), torch.randperm(8, generator=again)[:3].sort().values)
    starts = [select_steps("window", 8, 3, gen, i / 40)[0].item() for i in range(40)]
    assert starts[0] == 0 and starts[-1] == 5 and starts == sorted(starts) and len(set(starts)) == 6  # early → late
    assert torch.equal(select_steps("window", 8, 3, gen, 0.99), torch.tensor([5, 6, 7]))
    entropy = torch.tensor([0.1, 2.0, 0.3, 1.5, 0.2, 1.9, 0.0, 0.4])
    assert select_steps("entropy", 8, 3, gen, 0.0, entropy).tolist() == [1, 3, 5]
    with pytest.raises(ValueError, match="entropy"):
        select_steps("entropy", 8, 3, gen, 0.0)


@pytest.mark.parametrize("how", ["window", "entropy"])
def test_an_update_trains_only_the_selected_steps(how, monkeypatch):
    """The trainer hands select_steps the batch's mean entropy per step and the training progress, and the model's
    loss is computed on exactly the steps it returns."""
    import cogrpo.core.trainer as trainer

    tr = _tiny_trainer("co", step_fraction=0.5, step_selection=how)
    seen, recomputed = {}, []
    real_select, real_recompute = trainer.select_steps, trainer.trajectory_token_logprobs

    def spy_select(*args):
        seen["steps"] = real_select(*args)
        seen["args"] = args
        return seen["steps"]

    monkeypatch.setattr(trainer, "select_steps", spy_select)
    monkeypatch.setattr(trainer, "trajectory_token_logprobs",
                        lambda gen, traj, cond, steps: recomputed.append(steps) or real_recompute(gen, traj, cond, steps))
    batch = _batch()
    ro = tr.rollout(batch)
    metrics = tr.update(batch, ro, torch.rand(8))
    how_, T, n, _, progress, entropy = seen["args"]
    assert (how_, T, n, progress) == (how, 4, 2, 0.0) and all(torch.equal(s, seen["steps"]) for s in recomputed)
    if how == "entropy":
        assert torch.allclose(entropy, ro.traj.entropy.mean(0)) and set(seen["steps"].tolist()) == set(
            ro.traj.entropy.mean(0).topk(2).indices.tolist())
    assert all(math.isfinite(v) for v in metrics.values())
