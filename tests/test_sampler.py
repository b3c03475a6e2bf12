"""The sampler: per-step knobs, determinism, and exact log-prob recompute from the trajectory record."""

import pytest
import torch

from cogrpo.config import ScheduleConfig
from cogrpo.backbones.embedded import EmbeddedGenerator
from cogrpo.backbones.mdm import MDM, MDMConfig
from cogrpo.core.generator import Condition
from cogrpo.core.sampler import sample, trajectory_logprobs
from cogrpo.core.schedule import apply_actions, base_knobs, load_schedule, masked_counts, save_schedule

N_TRAJ, L, D = 12, 7, 32


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    m = MDM(MDMConfig(grid=4, n_shapes=4, n_colors=6, text_encoder="tiny-random", text_dim=D, max_text_tokens=16,
                      dim=32, layers=2, heads=2))
    with torch.no_grad():  # sharpen the random logits so that knobs visibly matter
        m.head.weight.mul_(50)
    return EmbeddedGenerator(m.eval(), text=None, tokenizer=None)  # conditions are given directly below


@pytest.fixture(scope="module")
def text():
    g = torch.Generator().manual_seed(0)
    emb = torch.randn(N_TRAJ, L, D, generator=g)
    mask = torch.arange(L)[None] < torch.randint(2, L + 1, (N_TRAJ, 1), generator=g)
    return emb, mask


def C(emb, mask) -> Condition:
    return Condition({"text": emb, "text_mask": mask})


def _knobs(steps=8, seed=0):
    """Per-trajectory knobs: the base schedule moved by random residual actions."""
    g = torch.Generator().manual_seed(seed)
    return apply_actions(base_knobs(ScheduleConfig(steps=steps)), 0.5 * torch.randn(N_TRAJ, steps, 4, generator=g))


def test_masked_counts_rules():
    ratios = torch.tensor([[0.99, 0.99, 0.99, 0.5], [0.0, 0.0, 0.9, 0.9], [0.9, 0.7, 0.3, 0.0]])
    counts = masked_counts(ratios, 16)
    assert counts.tolist() == [[15, 14, 13, 0], [3, 2, 1, 0], [14, 11, 4, 0]]
    assert (masked_counts(torch.full((1, 16), 0.5), 16) == torch.arange(15, -1, -1)).all()
    with pytest.raises(ValueError):
        masked_counts(torch.zeros(1, 17), 16)


def test_same_seed_same_images_whatever_the_batch(model, text):
    emb, mask = text
    knobs, seeds = _knobs(), torch.arange(N_TRAJ) + 100
    a = sample(model, C(emb, mask), knobs, seeds)
    b = sample(model, C(emb, mask), knobs, seeds)
    assert torch.equal(a.tokens, b.tokens) and torch.equal(a.logp, b.logp)
    part = sample(model, C(emb[3:7], mask[3:7]), knobs[3:7], seeds[3:7])
    assert torch.equal(part.tokens, a.tokens[3:7])
    assert torch.allclose(part.logp, a.logp[3:7], atol=1e-5)
    other = sample(model, C(emb, mask), knobs, seeds + 1)
    assert not torch.equal(other.tokens, a.tokens)


def test_every_cell_committed_once_on_schedule(model, text):
    emb, mask = text
    knobs = _knobs()
    traj = sample(model, C(emb, mask), knobs, torch.arange(N_TRAJ))
    assert (traj.tokens < model.codebook_size).all() and (traj.commit_step < traj.steps).all()
    counts = masked_counts(knobs[..., 0], model.n_tokens)
    committed = torch.stack([(traj.commit_step == t).sum(1) for t in range(traj.steps)], 1)
    before = torch.cat([torch.full((N_TRAJ, 1), model.n_tokens), counts[:, :-1]], 1)
    assert torch.equal(committed, before - counts)


def test_recomputed_logprobs_match_rollout(model, text):
    emb, mask = text
    traj = sample(model, C(emb, mask), _knobs(), torch.arange(N_TRAJ))
    again = trajectory_logprobs(model, traj, C(emb, mask))
    assert torch.allclose(again, traj.logp, atol=1e-5, rtol=0), (again - traj.logp).abs().max()
    steps = torch.tensor([1, 5])
    assert torch.allclose(trajectory_logprobs(model, traj, C(emb, mask), steps), traj.logp[:, steps], atol=1e-5, rtol=0)
    changed = model.reference()
    with torch.no_grad():
        changed.model.head.bias.add_(0.3)
    assert not torch.allclose(trajectory_logprobs(changed, traj, C(emb, mask)), traj.logp, atol=1e-3)


def test_the_recompute_computes_the_prompts_context_once_per_trajectory_not_per_step(model, text, monkeypatch):
    """The update's forward shares each trajectory's context keys and values over its S steps (a third of the
    embedded MDM's update FLOPs), with the gradient of the per-step recompute."""
    emb, mask = text
    traj = sample(model, C(emb, mask), _knobs(), torch.arange(N_TRAJ))
    shared = trajectory_logprobs(model, traj, C(emb, mask))
    shared.sum().backward()
    grads = {n: p.grad.clone() for n, p in model.model.named_parameters()}
    model.model.zero_grad(set_to_none=True)
    rows, context = [], model.model.context
    monkeypatch.setattr(model.model, "context", lambda text, *a, **k: rows.append(len(text)) or context(text, *a, **k))
    assert torch.equal(trajectory_logprobs(model, traj, C(emb, mask)), shared)
    assert rows == [2 * N_TRAJ]  # one CFG pair per trajectory: before, one per trajectory and step (2 · 12 · 8)
    monkeypatch.setattr(EmbeddedGenerator, "decoding_condition", lambda self, cond: cond)  # the context per row
    per_step = trajectory_logprobs(model, traj, C(emb, mask))
    assert torch.equal(per_step, shared)
    per_step.sum().backward()
    for n, p in model.model.named_parameters():
        torch.testing.assert_close(p.grad, grads[n], atol=1e-5, rtol=1e-4, msg=n)
    model.model.zero_grad(set_to_none=True)


def test_trajectory_save_load(model, text, tmp_path):
    emb, mask = text
    traj = sample(model, C(emb, mask), _knobs(), torch.arange(N_TRAJ))
    traj.save(tmp_path / "t.safetensors")
    again = type(traj).load(tmp_path / "t.safetensors")
    assert torch.equal(again.tokens, traj.tokens) and torch.equal(again.commit_step, traj.commit_step)
    assert torch.allclose(trajectory_logprobs(model, again, C(emb, mask)), traj.logp, atol=1e-5)


def test_explicit_schedule_file_equals_base(model, text, tmp_path):
    emb, mask = text
    cfg = ScheduleConfig(steps=6, cfg=2.0)
    save_schedule(base_knobs(cfg), tmp_path / "schedule.json")
    table = load_schedule(tmp_path / "schedule.json")
    seeds = torch.arange(N_TRAJ)
    a = sample(model, C(emb, mask), base_knobs(cfg), seeds)
    b = sample(model, C(emb, mask), table, seeds)
    assert torch.equal(a.tokens, b.tokens)
    zero = apply_actions(base_knobs(cfg), torch.zeros(6, 4))
    assert torch.allclose(zero[:-1], base_knobs(cfg)[:-1], atol=1e-5)  # the last ratio is clamped off 0


def test_knobs_change_the_samples(model, text):
    emb, mask = text
    seeds = torch.arange(N_TRAJ)
    base = sample(model, C(emb, mask), base_knobs(ScheduleConfig()), seeds).tokens
    for change in ({"temperature": 3.0}, {"cfg": 8.0}, {"ratio_curve": "linear"}):
        other = sample(model, C(emb, mask), base_knobs(ScheduleConfig(**change)), seeds).tokens
        assert not torch.equal(other, base), change


def test_bad_schedule_file(tmp_path):
    from cogrpo.errors import InputError

    f = tmp_path / "s.json"
    f.write_text('{"schedule": [{"ratio": 0.5}]}')
    with pytest.raises(InputError, match="s.json: not a schedule file"):
        load_schedule(f)


def test_transfer_keeps_the_schedule_at_equal_steps_and_maps_residuals():
    from cogrpo.core.schedule import apply_actions, transfer

    base8, base4 = base_knobs(ScheduleConfig(steps=8)), base_knobs(ScheduleConfig(steps=4))
    learned = apply_actions(base8, torch.full((8, 4), 0.5))
    assert torch.allclose(transfer(learned, base8, base8)[:-1], learned[:-1], atol=1e-4)
    moved = transfer(learned, base8, base4)
    assert torch.allclose(moved[:-1], apply_actions(base4, torch.full((4, 4), 0.5))[:-1], atol=1e-4)
    assert torch.allclose(transfer(base8, base8, base4)[:-1], base4[:-1], atol=1e-4)


def test_each_steps_entropy_is_the_mean_over_the_cells_masked_before_it(model, text):
    """The rollout records, per step, the mean entropy of the step's sampling distribution (guided, tempered) over
    the cells still masked: what step_selection 'entropy' ranks steps by; re-derived here from the record."""
    from cogrpo.core.sampler import countdown, step_logprobs

    emb, mask = text
    knobs = _knobs()
    traj = sample(model, C(emb, mask), knobs, torch.arange(N_TRAJ))
    for t in (0, 3, 7):
        x = torch.where(traj.commit_step < t, traj.tokens, model.mask_id)
        lp = step_logprobs(model, x, C(emb, mask), knobs[:, t], countdown(t, 8).expand(N_TRAJ))
        cell = -(lp.exp() * lp).sum(-1)
        masked = x == model.mask_id
        expected = (cell * masked).sum(1) / masked.sum(1)
        assert torch.allclose(traj.entropy[:, t], expected, atol=1e-5), t
    assert (traj.entropy[:, 0] > traj.entropy[:, -1]).float().mean() > 0.5 and (traj.entropy >= 0).all()


def test_compiled_step_decodes_as_eager(model, text):
    """model.compile: the whole decoding step under torch.compile commits eager's tokens at eager's steps, with the
    log-probs within float rounding (inductor fuses the log-softmax and sums in another order)."""
    from torch._dynamo.utils import counters

    emb, mask = text
    knobs, seeds = _knobs(), torch.arange(N_TRAJ) + 7
    eager = sample(model, C(emb, mask), knobs, seeds)
    compiled_frames = counters["frames"]["ok"]
    model.compile_sampling = True
    try:
        compiled = sample(model, C(emb, mask), knobs, seeds)
    finally:
        model.compile_sampling = False
    assert counters["frames"]["ok"] > compiled_frames  # the step did run compiled
    assert torch.equal(compiled.tokens, eager.tokens) and torch.equal(compiled.commit_step, eager.commit_step)
    torch.testing.assert_close(compiled.logp, eager.logp, atol=1e-4, rtol=0)
    torch.testing.assert_close(compiled.entropy, eager.entropy, atol=1e-4, rtol=0)


def test_a_decodings_prepared_context_gives_the_same_logits(model, text):
    """The sampler computes the prompts' keys and values once per decoding (decoding_condition): each prompt keeps
    its own and its null prompt's, so every step's guided logits are bit for bit those of the full forward."""
    emb, mask = text
    cond, w = C(emb, mask), torch.linspace(1.0, 5.0, N_TRAJ)
    tokens = sample(model, cond, _knobs(), torch.arange(N_TRAJ)).tokens
    tokens[:, ::3] = model.mask_id  # a partly decoded state
    prepared = model.decoding_condition(cond)
    assert torch.equal(model.guided_logits(tokens, prepared, w), model.guided_logits(tokens, cond, w))
    for key in ("context_kv", "context_mask"):  # another prompt's context, the null prompt's mask
        wrong = Condition(prepared.tensors | {key: prepared.tensors[key].roll(1, dims=0 if key == "context_kv" else 1)})
        assert not torch.allclose(model.guided_logits(tokens, wrong, w), model.guided_logits(tokens, cond, w))
