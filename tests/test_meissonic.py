"""Meissonic through the generator interface, on the tiny random snapshot in the published layout (made offline).

Parity: the authors' pipeline and scheduler are re-derived here step by step from their rules (recorded in
docs/meissonic.md), calling the snapshot's parts directly, not cogrpo's generator
or sampler; both sides share one source of randomness: the uniforms cogrpo's sampler draws, redrawn from the same
per-trajectory seeds. The authors' multinomial token draw is realised on them as a Gumbel-max (an exact sample of
the same distribution), their re-mask Gumbel noise from the last uniform of each cell.
"""

import json
import math
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from cogrpo.backbones.meissonic import MeissonicGenerator
from cogrpo.backbones.meissonic_transformer import MeissonicTransformer
from cogrpo.backbones.snapshot import snapshot_folder
from cogrpo.backbones.tiny_meissonic import make_tiny_meissonic
from cogrpo.config import ModelConfig, ScheduleConfig, TrainConfig
from cogrpo.core.batch import GroupedBatch
from cogrpo.core.sampler import countdown, sample, trajectory_logprobs
from cogrpo.core.schedule import apply_actions, base_knobs, masked_counts
from cogrpo.core.trainer import CoGRPO
from cogrpo.errors import InputError
from tests.tiny import count_calls

PROMPTS = ["a red cube", "two blue dogs", "the green sky"]
MEISSONIC_DEFAULTS = ScheduleConfig(steps=48, ratio_curve="amused", temperature=1.0, remask_temperature=2.0,
                                    remask_anneal="to_zero", cfg=9.0)  # the authors' pipeline defaults, as a base
SHORT = MEISSONIC_DEFAULTS.model_copy(update={"steps": 4})


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return make_tiny_meissonic(tmp_path_factory.mktemp("hub") / "tiny-meissonic")


def _gen(folder, resolution: int = 16, **kw) -> MeissonicGenerator:
    torch.manual_seed(0)
    return MeissonicGenerator(folder, ModelConfig(backbone="meissonic", pretrained=str(folder), device="cpu",
                                                  resolution=resolution, **kw))


def _perturb_adapters(gen: MeissonicGenerator, scale: float = 0.05) -> None:
    """LoRA starts as a no-op (B = 0); move every adapter so that trained and reference logits differ."""
    with torch.no_grad():
        for p in gen.trainable_parameters():
            p.add_(scale * torch.randn_like(p))


def _logits(gen, tokens, cond, t: int = 3, T: int = 4):
    return gen.guided_logits(tokens, cond, torch.full((len(tokens),), 3.0), countdown(t, T).expand(len(tokens)))


# ---- the authors' pipeline and scheduler, from their rules ------------------------------------------------
def _gumbel(u: torch.Tensor) -> torch.Tensor:
    return -torch.log((-torch.log(u.clamp(1e-20))).clamp(1e-20))  # the scheduler's gumbel_noise


def authors_decode(folder, prompts, steps: int, guidance: float, resolution: int, seeds) -> tuple[list, np.ndarray]:
    """Each step's tokens (B, N) and the final images, as src/pipeline.py with its scheduler computes them."""
    from diffusers import VQModel
    from transformers import CLIPTextModelWithProjection, CLIPTokenizer

    tokenizer = CLIPTokenizer.from_pretrained(folder / "tokenizer")
    text = CLIPTextModelWithProjection.from_pretrained(folder / "text_encoder").eval()
    model = MeissonicTransformer.from_pretrained(folder / "transformer").eval()
    vqvae = VQModel.from_pretrained(folder / "vqvae").eval()
    mask_id = json.loads((folder / "scheduler" / "scheduler_config.json").read_text())["mask_token_id"]
    B, V = len(prompts), model.config.codebook_size
    side = resolution // 2 ** (len(vqvae.config.block_out_channels) - 1)
    N = side * side

    def encode(texts):
        ids = tokenizer(texts, return_tensors="pt", padding="max_length", truncation=True, max_length=77).input_ids
        out = text(ids, return_dict=True, output_hidden_states=True)
        return out.text_embeds, out.hidden_states[-2]

    with torch.no_grad():
        pooled, hidden = encode(prompts)
        neg_pooled, neg_hidden = encode([""] * B)  # negative_prompt None → "" per prompt
        pooled, hidden = torch.cat([neg_pooled, pooled]), torch.cat([neg_hidden, hidden])
        micro = torch.tensor([resolution, resolution, 0, 0, 6], dtype=hidden.dtype)[None].expand(2 * B, -1)
        x = torch.full((B, side, side), mask_id, dtype=torch.long)
        timesteps = torch.arange(steps).flip(0)  # set_timesteps(steps, temperature=(2, 0))
        temperatures = torch.linspace(2, 0, steps)
        # the ids of the pipeline's 1024-px branch, written out: (0, row, col) over the grid halved (the
        # transformer's downsampled grid), row-major
        half = side // 2
        img_ids = torch.tensor([[0, row, col] for row in range(half) for col in range(half)], dtype=torch.float32)
        txt_ids = torch.zeros(hidden.shape[1], 3)
        rngs = [torch.Generator().manual_seed(int(s)) for s in seeds]
        states = []
        for i, timestep in enumerate(timesteps):
            out = model(hidden_states=torch.cat([x] * 2), micro_conds=micro, pooled_projections=pooled,
                        encoder_hidden_states=hidden, img_ids=img_ids, txt_ids=txt_ids,
                        timestep=torch.tensor([timestep], dtype=torch.long))
            uncond, cond = out.chunk(2)
            out = uncond + guidance * (cond - uncond)
            # scheduler.step(out, timestep, x)
            sample_ = x.reshape(B, N)
            logits = out.reshape(B, V, N).permute(0, 2, 1)
            unknown = sample_ == mask_id
            probs = logits.softmax(-1)
            u = torch.stack([torch.rand(N, V + 1, generator=g) for g in rngs])
            pred = (torch.log(probs) + _gumbel(u[..., :V])).argmax(-1)  # multinomial(probs), on the shared uniforms
            pred = torch.where(unknown, pred, sample_)
            if timestep == 0:
                new = pred
            else:
                step_idx = (timesteps == timestep).nonzero()[0]
                mask_ratio = torch.cos((step_idx + 1) / len(timesteps) * math.pi / 2)  # "cosine"
                mask_len = (N * mask_ratio).floor()
                mask_len = torch.min(unknown.sum(-1, keepdim=True) - 1, mask_len)
                mask_len = torch.max(torch.tensor([1]), mask_len)
                selected = torch.gather(probs, -1, pred[:, :, None])[:, :, 0]
                selected = torch.where(unknown, selected, torch.finfo(selected.dtype).max)
                confidence = torch.log(selected.clamp(1e-20)) + temperatures[step_idx] * _gumbel(u[..., V])
                cut = torch.gather(torch.sort(confidence, -1).values, 1, mask_len.long())
                new = torch.where(confidence < cut, mask_id, pred)
            states.append(new.clone())
            x = new.reshape(B, side, side)
        image = vqvae.decode(x, force_not_quantize=True, shape=(B, side, side, vqvae.config.latent_channels))
    pixels = (image.sample.clip(0, 1).permute(0, 2, 3, 1).numpy() * 255).round().astype(np.uint8)
    return states, pixels


@pytest.mark.parametrize("resolution,steps", [(32, 48), (16, 64)])
def test_every_step_commits_the_tokens_of_the_authors_scheduler(tiny, resolution, steps):
    """The README's Meissonic base schedule at 48 and 64 steps: the same tokens after every step, the same images."""
    gen = _gen(tiny, resolution=resolution, lora_rank=0)
    seeds = torch.tensor([3, 11, 2024])
    knobs = base_knobs(MEISSONIC_DEFAULTS.model_copy(update={"steps": steps}))
    traj = sample(gen, gen.encode(PROMPTS), knobs, seeds)
    states, images = authors_decode(tiny, PROMPTS, steps, 9.0, resolution, seeds)
    assert len(states) == steps
    for t in range(steps):
        ours = torch.where(traj.commit_step <= t, traj.tokens, gen.mask_id)
        assert torch.equal(ours, states[t]), f"step {t}"
    assert np.array_equal(gen.decode(traj.tokens), images)


@pytest.mark.parametrize("steps", [12, 16, 32, 48, 64])
def test_the_masked_counts_are_the_authors_on_the_published_grid(steps):
    """cogrpo's count rule (floor in float64, one token per remaining step) and the scheduler's (floor in float32,
    at least 1) give the same counts on the published 64×64 grid."""
    N, unknown, theirs = 64 * 64, torch.tensor([64 * 64]), []
    for i in range(steps):
        mask_len = torch.floor(N * torch.cos((torch.tensor([i]) + 1) / steps * math.pi / 2))
        unknown = torch.zeros(1) if i == steps - 1 else torch.max(torch.tensor([1]), torch.min(unknown - 1, mask_len))
        theirs.append(int(unknown))
    ratios = base_knobs(MEISSONIC_DEFAULTS.model_copy(update={"steps": steps}))[:, 0]
    assert masked_counts(ratios[None], N)[0].tolist() == theirs


def test_the_step_reaches_the_transformer_and_the_recompute_is_exact(tiny):
    gen = _gen(tiny, lora_rank=4)
    _perturb_adapters(gen)
    tokens, cond = torch.full((3, gen.n_tokens), gen.mask_id), gen.encode(PROMPTS)
    with torch.no_grad():
        assert not torch.allclose(_logits(gen, tokens, cond, 0), _logits(gen, tokens, cond, 3), atol=1e-4)
    with pytest.raises(ValueError, match="timestep"):
        gen.guided_logits(tokens, cond, torch.full((3,), 3.0))
    g = torch.Generator().manual_seed(0)
    knobs = apply_actions(base_knobs(SHORT.model_copy(update={"steps": 6})), 0.3 * torch.randn(6, 6, 4, generator=g))
    cond = cond.repeat_interleave(2)
    traj = sample(gen, cond, knobs, torch.arange(6))
    assert torch.allclose(trajectory_logprobs(gen, traj, cond), traj.logp, atol=1e-5, rtol=1e-5)
    assert torch.allclose(trajectory_logprobs(gen, traj, cond, torch.tensor([1, 4])), traj.logp[:, [1, 4]],
                          atol=1e-5, rtol=1e-5)
    assert not torch.allclose(trajectory_logprobs(gen.reference(), traj, cond), traj.logp, atol=1e-3)


def test_conditioning_is_the_pipeline_s(tiny):
    """77 CLIP tokens, the empty prompt as null, the image side from model.resolution (1024 by default)."""
    gen = _gen(tiny, lora_rank=0)
    cond = gen.encode(PROMPTS)
    assert gen.tokenizer.model_max_length == 64  # so that the 77 below is the pipeline's, not the tokenizer's
    assert cond.tensors["hidden"].shape == (3, 77, 32) and cond.tensors["pooled"].shape == (3, 32)
    assert torch.equal(gen.null_condition().tensors["pooled"], gen.encode([""]).tensors["pooled"])
    assert (gen.side, gen.n_tokens, gen.mask_id, gen.codebook_size) == (8, 64, 64, 64)
    assert gen.prompt_features(cond).shape == (3, 32)
    default = MeissonicGenerator(tiny, ModelConfig(backbone="meissonic", pretrained=str(tiny), device="cpu"))
    assert default.resolution == 1024 and default.side == 512


def test_the_negative_prompt_is_the_unconditional_branch(tiny):
    negative = "worst quality, low quality, blurry"
    plain, gen = _gen(tiny, lora_rank=0), _gen(tiny, lora_rank=0, negative_prompt=negative)
    for key in ("hidden", "pooled"):
        assert torch.equal(gen.null_condition().tensors[key], gen.encode([negative]).tensors[key])
        assert not torch.allclose(gen.null_condition().tensors[key], plain.null_condition().tensors[key])
    tokens, cond = torch.full((3, gen.n_tokens), gen.mask_id), gen.encode(PROMPTS)
    with torch.no_grad():
        assert not torch.allclose(_logits(gen, tokens, cond), _logits(plain, tokens, cond), atol=1e-4)


def test_a_token_grid_the_transformer_cannot_halve_is_refused(tiny):
    """18 px: a 9×9 VQ grid, which the transformer's 2×2 stride-2 conv and its transpose cannot bring back."""
    with pytest.raises(InputError, match=r"^model.resolution = 18: must be a multiple of 4, 2× the VQ-GAN's scale 2"):
        _gen(tiny, resolution=18)


def test_bf16_logits_are_the_fp32_ones_up_to_rounding(tiny):
    """The parity test runs in fp32; in bf16 (adapters at their no-op init) the guided logits (CFG 3) stay within
    0.1 of fp32's on the tiny model, whose logits span about ±2.3 (0.055 at most when written; bf16 keeps 8 bits
    of mantissa)."""
    fp32, bf16 = _gen(tiny, lora_rank=4), _gen(tiny, lora_rank=4, dtype="bf16")
    state = torch.full((3, fp32.n_tokens), fp32.mask_id)
    state[:, ::3] = torch.arange(state[:, ::3].numel()).view(3, -1) % fp32.codebook_size  # a part-decoded canvas
    with torch.no_grad():
        exact, rounded = _logits(fp32, state, fp32.encode(PROMPTS)), _logits(bf16, state, bf16.encode(PROMPTS))
    assert rounded.dtype == torch.float32 and (rounded - exact).abs().max() < 0.1


def test_lora_on_the_attention_projections_and_the_reference_is_the_base(tiny):
    gen, base = _gen(tiny, lora_rank=4), _gen(tiny, lora_rank=0)
    trained = gen.trainable_parameters()
    assert trained and all(p.dtype == torch.float32 for p in trained)
    names = {n for n, p in gen.transformer.named_parameters() if any(p is q for q in trained)}
    assert all("lora_" in n for n in names)
    for where in ("transformer_blocks.0.attn.to_q", "single_transformer_blocks.1.attn.to_v"):
        assert any(n.startswith(where + ".lora_") for n in names), where
    _perturb_adapters(gen)
    ref, tokens, cond = gen.reference(), torch.full((3, gen.n_tokens), gen.mask_id), gen.encode(PROMPTS)
    assert ref.transformer is None and ref.gen is gen  # the generator's own modules, no second transformer
    with torch.no_grad():
        assert torch.allclose(_logits(ref, tokens, cond), _logits(base, tokens, cond), atol=1e-5)
        assert not torch.allclose(_logits(gen, tokens, cond), _logits(base, tokens, cond), atol=1e-3)


def test_bf16_weights_with_fp32_adapters_train(tiny):
    gen = _gen(tiny, lora_rank=4, dtype="bf16")
    frozen = [p for n, p in gen.transformer.named_parameters() if "lora_" not in n]
    assert {p.dtype for p in frozen} == {torch.bfloat16}
    assert {p.dtype for p in gen.trainable_parameters()} == {torch.float32}
    trainer = CoGRPO(gen, base_knobs(SHORT), TrainConfig(mode="model", group_size=4, prompts_per_iter=3,
                                                         lr_model=1e-2))
    batch = GroupedBatch(torch.arange(3), gen.encode(PROMPTS), 4)
    before = [p.clone() for p in gen.trainable_parameters()]
    metrics = trainer.update(batch, trainer.rollout(batch), torch.arange(12.0) % 3)
    assert metrics["skipped"] == 0 and math.isfinite(metrics["model/grad_norm"]) and metrics["model/grad_norm"] > 0
    assert any(not torch.equal(a, b) for a, b in zip(before, gen.trainable_parameters()))


@pytest.mark.parametrize("policy", ["per_step", "prompt", "state"])
def test_grpo_updates_move_only_the_adapters_and_the_schedule(tiny, policy):
    """A few Co-GRPO iterations on colour_match: the adapters and the schedule move, the base weights do not."""
    from cogrpo.rewards.pixels import colour_match

    gen = _gen(tiny, lora_rank=4)
    frozen = {n: p.clone() for n, p in gen.transformer.named_parameters() if "lora_" not in n}
    cfg = TrainConfig(mode="co", group_size=4, prompts_per_iter=3, lr_model=1e-2, schedule_policy=policy)
    trainer, reward = CoGRPO(gen, base_knobs(SHORT), cfg), colour_match()
    batch = GroupedBatch(torch.arange(3), gen.encode(PROMPTS), 4)
    prompts = [PROMPTS[r] for r in batch.trajectory_rows().tolist()]
    before = [p.clone() for p in gen.trainable_parameters()]
    for _ in range(3):
        ro = trainer.rollout(batch)
        metrics = trainer.update(batch, ro, reward(gen.decode(ro.traj.tokens), prompts, []))
        assert metrics["skipped"] == 0 and metrics["model/grad_norm"] > 0 and metrics["schedule/grad_norm"] > 0
    if policy == "state":  # CLIP's pooled features and the canvas, through the same interface
        assert ro.features.shape == (12, 4, 9) and ro.features[:, 1:, 3:].abs().sum() > 0
    assert all(not torch.equal(a, b) for a, b in zip(before, gen.trainable_parameters()))
    assert all(torch.equal(p, frozen[n]) for n, p in gen.transformer.named_parameters() if "lora_" not in n)


def test_full_fine_tuning_trains_the_transformer_against_a_frozen_copy(tiny, tmp_path):
    gen = _gen(tiny, lora_rank=0)
    trainer = CoGRPO(gen, base_knobs(SHORT), TrainConfig(mode="model", group_size=4, prompts_per_iter=3,
                                                         lr_model=1e-3))
    frozen = trainer.ref.transformer
    assert frozen is not None and not any(p.requires_grad for p in frozen.parameters())
    batch = GroupedBatch(torch.arange(3), gen.encode(PROMPTS), 4)
    before = gen.transformer.state_dict()["mlm_layer.conv2.weight"].clone()
    trainer.update(batch, trainer.rollout(batch), torch.arange(12.0) % 3)
    assert not torch.equal(before, gen.transformer.state_dict()["mlm_layer.conv2.weight"])
    gen.save_trained(tmp_path)
    again = _gen(tiny, lora_rank=0)
    again.load_trained(tmp_path)
    tokens, cond = torch.full((3, gen.n_tokens), gen.mask_id), gen.encode(PROMPTS)
    with torch.no_grad():
        assert torch.equal(_logits(again, tokens, cond), _logits(gen, tokens, cond))


@pytest.mark.parametrize("lora_rank", [4, 0])
def test_gradient_checkpointing_gives_the_same_gradients(tiny, lora_rank):
    """Every dual- and single-stream block is recomputed in backward, and the gradients are those without."""
    grads = []
    for checkpointing in (False, True):
        gen = _gen(tiny, lora_rank=lora_rank, gradient_checkpointing=checkpointing)
        if lora_rank:
            _perturb_adapters(gen)
        cond = gen.encode(PROMPTS)
        traj = sample(gen, cond, base_knobs(SHORT), torch.arange(3))
        gen.train()
        counts = count_calls([b.attn for b in (*gen.transformer.transformer_blocks,
                                                *gen.transformer.single_transformer_blocks)])
        logp = trajectory_logprobs(gen, traj, cond).sum()
        forward = list(counts)
        logp.backward()
        assert min(forward) > 0 and counts == [(1 + checkpointing) * n for n in forward]
        grads.append(torch.cat([p.grad.flatten() for p in gen.trainable_parameters()]))
    assert grads[0].abs().sum() > 0 and torch.allclose(grads[0], grads[1], atol=1e-6, rtol=1e-5)


def test_micro_batches_accumulate_the_same_gradient(tiny):
    grads = []
    for micro in (None, 5):  # 12 trajectories: slices of 5, 5 and 2
        gen = _gen(tiny, lora_rank=4)
        _perturb_adapters(gen)
        cfg = TrainConfig(mode="model", group_size=4, prompts_per_iter=3, kl_beta=0.5, micro_batch=micro)
        trainer = CoGRPO(gen, base_knobs(SHORT), cfg)
        batch = GroupedBatch(torch.arange(3), gen.encode(PROMPTS), 4)
        trainer.update(batch, trainer.rollout(batch), torch.arange(12.0) % 3)
        grads.append([p.grad.clone() for p in gen.trainable_parameters()])
    worst = max(((a - b).abs().max() / b.abs().max()).item() for a, b in zip(*grads))
    assert worst < 1e-4, worst


def test_a_resumed_training_continues_as_the_uninterrupted_one(tiny, tmp_path):
    """CoGRPO.save after one iteration, loaded into a fresh generator and trainer: the second iteration's adapters
    and schedule are those of the run that never stopped."""
    cfg = TrainConfig(mode="co", group_size=4, prompts_per_iter=3, lr_model=1e-2)

    def trainer_and_batch():
        gen = _gen(tiny, lora_rank=4)
        return CoGRPO(gen, base_knobs(SHORT), cfg), GroupedBatch(torch.arange(3), gen.encode(PROMPTS), 4)

    def iterate(trainer, batch):
        trainer.update(batch, trainer.rollout(batch), torch.arange(12.0) % 3)

    first, batch = trainer_and_batch()
    iterate(first, batch)
    first.save(tmp_path)
    iterate(first, batch)
    resumed, batch = trainer_and_batch()
    resumed.load(tmp_path)
    assert resumed.iteration == 1
    iterate(resumed, batch)
    for a, b in zip(first.model.trainable_parameters(), resumed.model.trainable_parameters()):
        assert torch.allclose(a, b, atol=1e-6, rtol=0)
    assert torch.allclose(first.policy.deterministic_knobs(), resumed.policy.deterministic_knobs(), atol=1e-6)


def test_the_export_is_a_published_snapshot_with_the_adapters_merged(tiny, tmp_path):
    """pipelines.export: transformer/ loads in MeissonicTransformer.from_pretrained under the published class name,
    and cogrpo reads the folder back as a base model that decodes like the trained one."""
    import yaml

    from pipelines.export import main

    gen = _gen(tiny, lora_rank=4)
    _perturb_adapters(gen, 0.02)
    gen.save_trained(tmp_path / "trained")
    (tmp_path / "params.yaml").write_text(yaml.safe_dump({"model": {
        "backbone": "meissonic", "pretrained": str(tiny), "lora_rank": 4, "resolution": 16, "device": "cpu"}}))
    out = main([str(tmp_path / "trained"), str(tmp_path / "export"), "--params", str(tmp_path / "params.yaml")])
    assert snapshot_folder(str(out), "meissonic") == out and (out / "model_index.json").is_file()
    assert json.loads((out / "transformer" / "config.json").read_text())["_class_name"] == "Transformer2DModel"
    merged = MeissonicTransformer.from_pretrained(out / "transformer")
    assert not any("lora" in k for k in merged.state_dict())
    exported = _gen(out, lora_rank=0)
    tokens, cond = torch.full((3, gen.n_tokens), gen.mask_id), gen.encode(PROMPTS)
    with torch.no_grad():
        assert torch.allclose(_logits(exported, tokens, cond), _logits(gen, tokens, cond), atol=1e-4)
    seeds = torch.arange(3)
    assert torch.equal(sample(exported, cond, base_knobs(SHORT), seeds).tokens,
                       sample(gen, cond, base_knobs(SHORT), seeds).tokens)


def test_weights_that_do_not_fit_the_config_stop_in_one_line(tiny, tmp_path):
    from safetensors.torch import load_file, save_file

    folder = tmp_path / "broken"
    shutil.copytree(tiny, folder)
    file = folder / "transformer" / "diffusion_pytorch_model.safetensors"
    state = load_file(str(file))
    del state["transformer_blocks.1.attn.to_q.weight"], state["cond_embed.linear_1.weight"]
    state["embed.embeddings.weight"] = torch.zeros(3, 32)
    save_file(state, str(file))
    with pytest.raises(InputError) as err:
        _gen(folder)
    message = str(err.value)
    assert "\n" not in message and f"model.pretrained = '{folder}'" in message
    assert "missing cond_embed.linear_1.weight, transformer_blocks.1.attn.to_q.weight" in message
    assert "misshapen embed.embeddings.weight (3, 32) (config: (65, 32))" in message

    shutil.copy(tiny / "transformer" / "diffusion_pytorch_model.safetensors", file)
    save_file(load_file(str(file)) | {"controlnet.extra.weight": torch.zeros(2)}, str(file))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gen = _gen(folder, lora_rank=0)
    assert any("controlnet.extra.weight" in str(w.message) for w in caught)
    reference = _gen(tiny, lora_rank=0)
    assert all(torch.equal(a, b) for a, b in zip(gen.transformer.state_dict().values(),
                                                 reference.transformer.state_dict().values()))


def test_a_torn_weight_file_or_an_unreadable_mask_id_stops_in_one_line(tiny, tmp_path):
    folder = tmp_path / "torn"
    shutil.copytree(tiny, folder)
    file = folder / "transformer" / "diffusion_pytorch_model.safetensors"
    for kept in (100, file.stat().st_size // 2):  # inside the header; inside the tensors
        file.write_bytes((tiny / "transformer" / file.name).read_bytes()[:kept])
        with pytest.raises(InputError, match=rf"^model.pretrained = '{folder}': torn/transformer cannot be read "
                                             r"\(SafetensorError: [^\n]*$"):
            _gen(folder)
    shutil.copy(tiny / "transformer" / file.name, file)
    config = folder / "scheduler" / "scheduler_config.json"
    config.write_text(json.dumps({"masking_schedule": "cosine"}))
    with pytest.raises(InputError, match=rf"^{config}: no integer mask_token_id \(KeyError: [^\n]*$"):
        _gen(folder)
    config.unlink()
    with pytest.raises(InputError, match=rf"^{config}: no integer mask_token_id \(FileNotFoundError"):
        _gen(folder)


def test_missing_snapshot_fails_in_one_line_naming_the_param(tmp_path):
    from cogrpo.config import ParamsError, parse_params

    with pytest.raises(InputError, match=r"model.pretrained = .*not a Meissonic snapshot folder.*MeissonFlow/"):
        snapshot_folder(str(tmp_path / "nowhere"), "meissonic")
    with pytest.raises(InputError, match=r"model.pretrained = 'MeissonFlow/Meissonic'.*hf download"):
        snapshot_folder("MeissonFlow/Meissonic", "meissonic")  # offline (HF_HUB_OFFLINE=1 in tests)
    with pytest.raises(ParamsError, match=r"model.pretrained is required with model.backbone: meissonic"):
        parse_params({"model": {"backbone": "meissonic"}})
    with pytest.raises(ParamsError, match=r"full fine-tuning \(lora_rank 0\) in bf16"):
        parse_params({"model": {"backbone": "meissonic", "pretrained": "x", "lora_rank": 0, "dtype": "bf16"}})


@pytest.mark.slow  # suite time (a minute with its project), as test_amused's flow test
def test_the_pipeline_flow_runs_with_a_tiny_meissonic(tiny, tiny_project):
    """Every stage through the real flow with model.backbone = meissonic: the base model is a pointer to the
    snapshot, training trains LoRA adapters on colour_match, the evaluation loads base + adapters."""
    from flows.pipeline import pipeline

    meissonic = {"model.backbone": "meissonic", "model.pretrained": str(tiny), "model.resolution": 16,
                 "model.lora_rank": 4, "train.rewards": [{"name": "colour_match", "weight": 1.0}],
                 "train.lr_model": 1e-2}
    result = pipeline(overrides=meissonic)
    out = {name: Path(stage["out"]) for name, stage in result["stages"].items()}
    base = json.loads((out["pretrain"] / "generator.json").read_text())
    assert base["backbone"] == "meissonic" and base["pretrained"] == str(tiny) and len(base["sha256"]) == 64
    assert {"adapters.safetensors", "adapter.json", "schedule.json"} <= {p.name for p in out["train"].iterdir()}
    for split in ("heldout", "seen"):
        assert 0 <= result["eval"][split]["geneval"]["overall"] <= 1
