"""aMUSEd through the generator interface, on a tiny random aMUSEd in the hub snapshot layout (made offline).

Parity with diffusers' own AmusedPipeline: with the token choice made greedy and the re-mask noise fixed to the same
values on both sides (each side's noise function replaced, nothing else), cogrpo's sampler and the pipeline hold the
same tokens after every step and decode the same images.
"""

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from cogrpo.backbones.amused import AmusedGenerator
from cogrpo.backbones.snapshot import snapshot_folder
from cogrpo.backbones.tiny_amused import make_tiny_amused
from tests.tiny import count_calls
from cogrpo.io import read_specs
from cogrpo.config import ModelConfig, ScheduleConfig, TrainConfig
from cogrpo.core import sampler as sampler_module
from cogrpo.core.batch import GroupedBatch
from cogrpo.core.sampler import sample, trajectory_logprobs
from cogrpo.core.schedule import apply_actions, base_knobs
from cogrpo.core.trainer import CoGRPO
from cogrpo.errors import InputError

PROMPTS = ["a red cube", "two blue dogs", "the green sky"]
ROOT = Path(__file__).resolve().parents[1]
AMUSED_DEFAULTS = ScheduleConfig(steps=12, ratio_curve="amused", temperature=1.0, remask_temperature=2.0,
                                 remask_anneal="to_zero", cfg=10.0)  # AmusedPipeline's defaults, as a base schedule


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return make_tiny_amused(tmp_path_factory.mktemp("hub") / "tiny-amused")


def _gen(folder, **kw) -> AmusedGenerator:
    torch.manual_seed(0)
    return AmusedGenerator(folder, ModelConfig(backbone="amused", pretrained=str(folder), device="cpu", **kw))


def _perturb_adapters(gen: AmusedGenerator, scale: float = 0.05) -> None:
    """LoRA starts as a no-op (B = 0); move every adapter so that trained and reference logits differ."""
    with torch.no_grad():
        for p in gen.trainable_parameters():
            p.add_(scale * torch.randn_like(p))


def test_sampler_decodes_like_amused_pipeline(tiny, monkeypatch):
    from diffusers import AmusedPipeline
    import diffusers.schedulers.scheduling_amused as amused_scheduler

    T, n = AMUSED_DEFAULTS.steps, len(PROMPTS)
    gen = _gen(tiny, lora_rank=0)
    noise = -torch.log(-torch.log(torch.rand(T, n, gen.n_tokens, generator=torch.Generator().manual_seed(1))))
    calls = {"pipeline": 0, "ours": 0}

    def fixed(side):
        calls[side] += 1
        return noise[calls[side] - 1]

    pipe = AmusedPipeline.from_pretrained(tiny)
    pipe.set_progress_bar_config(disable=True)
    states = []
    with monkeypatch.context() as m:  # the pipeline: greedy token choice, the fixed re-mask noise
        m.setattr(torch, "multinomial", lambda probs, k, generator=None: probs.argmax(-1, keepdim=True))
        m.setattr(amused_scheduler, "gumbel_noise", lambda t, generator=None: fixed("pipeline"))
        out = pipe(PROMPTS, num_inference_steps=T, guidance_scale=10.0, output_type="np",
                   callback=lambda i, t, latents: states.append(latents.flatten(1).clone()))
    with monkeypatch.context() as m:  # ours: no token noise, the same re-mask noise
        m.setattr(sampler_module, "_gumbel", lambda u: torch.zeros_like(u) if u.dim() == 3 else fixed("ours"))
        traj = sample(gen, gen.encode(PROMPTS), base_knobs(AMUSED_DEFAULTS), torch.arange(n))
    assert len(states) == T
    for t in range(T):
        ours = torch.where(traj.commit_step <= t, traj.tokens, gen.mask_id)
        assert torch.equal(ours, states[t]), f"step {t}"
    assert np.array_equal(gen.decode(traj.tokens), (out.images * 255).round().astype(np.uint8))


def test_exact_logprob_recompute_with_lora(tiny):
    gen = _gen(tiny, lora_rank=4)
    _perturb_adapters(gen)
    g = torch.Generator().manual_seed(0)
    knobs = apply_actions(base_knobs(AMUSED_DEFAULTS.model_copy(update={"steps": 6})), 0.3 * torch.randn(6, 6, 4, generator=g))
    cond = gen.encode(PROMPTS).repeat_interleave(2)
    traj = sample(gen, cond, knobs, torch.arange(6))
    assert torch.allclose(trajectory_logprobs(gen, traj, cond), traj.logp, atol=1e-5, rtol=0)
    assert not torch.allclose(trajectory_logprobs(gen.reference(), traj, cond), traj.logp, atol=1e-3)


def test_lora_trains_adapters_only_and_the_reference_is_the_base_without_a_copy(tiny):
    gen = _gen(tiny, lora_rank=4)
    base = _gen(tiny, lora_rank=0)
    trained = gen.trainable_parameters()
    assert trained and all(p.dtype == torch.float32 for p in trained)
    names = {n for n, p in gen.transformer.named_parameters() if any(p is q for q in trained)}
    assert names and all("lora_" in n for n in names) and any("to_q" in n for n in names)
    _perturb_adapters(gen)
    ref = gen.reference()
    assert ref.transformer is None and ref.gen is gen  # the generator's own modules, no second transformer
    tokens = torch.full((3, gen.n_tokens), gen.mask_id)
    cond, w = gen.encode(PROMPTS), torch.full((3,), 3.0)
    with torch.no_grad():
        assert torch.allclose(ref.guided_logits(tokens, cond, w), base.guided_logits(tokens, cond, w), atol=1e-5)
        assert not torch.allclose(gen.guided_logits(tokens, cond, w), base.guided_logits(tokens, cond, w), atol=1e-3)
        assert torch.allclose(ref.guided_logits(tokens, cond, w), base.guided_logits(tokens, cond, w), atol=1e-5)


def test_adapters_round_trip_and_the_export_loads_in_amused_pipeline(tiny, tmp_path):
    from diffusers import AmusedPipeline

    gen = _gen(tiny, lora_rank=4)
    _perturb_adapters(gen)
    gen.save_trained(tmp_path / "ckpt")
    assert {p.name for p in (tmp_path / "ckpt").iterdir()} == {"adapters.safetensors", "adapter.json"}
    again = _gen(tiny, lora_rank=4)
    again.load_trained(tmp_path / "ckpt")
    tokens = torch.full((3, gen.n_tokens), gen.mask_id)
    cond, w = gen.encode(PROMPTS), torch.full((3,), 3.0)
    with torch.no_grad():
        expected = gen.guided_logits(tokens, cond, w)
        assert torch.equal(again.guided_logits(tokens, cond, w), expected)
        gen.export(tmp_path / "export")
        pipe = AmusedPipeline.from_pretrained(tmp_path / "export")
        exported = _gen(tmp_path / "export", lora_rank=0)
        assert torch.allclose(exported.guided_logits(tokens, cond, w), expected, atol=1e-4)
        assert torch.equal(pipe.transformer.state_dict()["mlm_layer.conv1.weight"],
                           exported.transformer.state_dict()["mlm_layer.conv1.weight"])


@pytest.mark.parametrize("policy", ["per_step", "state"])
def test_one_co_grpo_update_moves_only_the_adapters_and_the_schedule(tiny, policy):
    gen = _gen(tiny, lora_rank=4)
    frozen = {n: p.clone() for n, p in gen.transformer.named_parameters() if "lora_" not in n}
    cfg = TrainConfig(mode="co", group_size=4, prompts_per_iter=3, lr_model=1e-2, schedule_policy=policy)
    trainer = CoGRPO(gen, base_knobs(AMUSED_DEFAULTS.model_copy(update={"steps": 4})), cfg)
    batch = GroupedBatch(torch.arange(3), gen.encode(PROMPTS), 4)
    before = [p.clone() for p in gen.trainable_parameters()]
    ro = trainer.rollout(batch)
    metrics = trainer.update(batch, ro, torch.arange(12.0) % 3)
    assert metrics["skipped"] == 0 and metrics["model/grad_norm"] > 0 and metrics["schedule/grad_norm"] > 0
    if policy == "state":  # CLIP's pooled features and aMUSEd's codebook through the same interface, exactly
        assert ro.features.shape == (12, 4, 9) and ro.features[:, 1:, 3:].abs().sum() > 0
        assert abs(metrics["schedule/ratio_mean"] - 1) < 1e-5
    assert any(not torch.equal(a, b) for a, b in zip(before, gen.trainable_parameters()))
    assert all(torch.equal(p, frozen[n]) for n, p in gen.transformer.named_parameters() if "lora_" not in n)


def test_missing_weights_fail_in_one_line_naming_the_param(tmp_path):
    with pytest.raises(InputError, match=r"model.pretrained = .*not an aMUSEd snapshot folder"):
        snapshot_folder(str(tmp_path / "nowhere"), "amused")
    (tmp_path / "half" / "transformer").mkdir(parents=True)
    with pytest.raises(InputError, match=r"missing vqvae, text_encoder, tokenizer, scheduler/"):
        snapshot_folder(str(tmp_path / "half"), "amused")
    with pytest.raises(InputError, match=r"model.pretrained = 'amused/amused-256'.*hf download"):
        snapshot_folder("amused/amused-256", "amused")  # offline (HF_HUB_OFFLINE=1 in tests): no retry loop


def test_transformer_weights_that_do_not_fit_the_config_stop_in_one_line(tiny, tmp_path):
    """The same check as Meissonic's, before anything loads (tests/test_meissonic.py has the details)."""
    import shutil

    from safetensors.torch import load_file, save_file

    folder = tmp_path / "broken"
    shutil.copytree(tiny, folder)
    file = folder / "transformer" / "diffusion_pytorch_model.safetensors"
    save_file({k: v for k, v in load_file(str(file)).items() if k != "mlm_layer.conv2.weight"}, str(file))
    with pytest.raises(InputError, match=rf"^model.pretrained = '{folder}': broken/transformer does not fit its "
                                         r"config.json: missing mlm_layer.conv2.weight$"):
        _gen(folder)


def test_the_negative_prompt_is_the_unconditional_branch(tiny):
    negative = "worst quality, low quality, blurry"
    plain, gen = _gen(tiny, lora_rank=0), _gen(tiny, lora_rank=0, negative_prompt=negative)
    assert torch.equal(gen.null_condition().tensors["hidden"], gen.encode([negative]).tensors["hidden"])
    assert not torch.allclose(gen.null_condition().tensors["pooled"], plain.null_condition().tensors["pooled"])


def test_adapter_file_is_json_describing_the_lora(tiny, tmp_path):
    gen = _gen(tiny, lora_rank=2, lora_alpha=4.0)
    gen.save_trained(tmp_path)
    assert json.loads((tmp_path / "adapter.json").read_text()) == {
        "pretrained": str(tiny), "lora_rank": 2, "lora_alpha": 4.0, "lora_targets": ["to_q", "to_k", "to_v"]}


@pytest.mark.slow  # suite time (40 s with its project); the README test runs dvc exp run with a tiny aMUSEd too
def test_the_pipeline_flow_runs_with_a_tiny_amused(tiny, tiny_project, capfd):
    """Every stage through the real flow with model.backbone = amused: the base model is a pointer to the snapshot,
    training trains LoRA adapters on colour_match, the evaluation loads base + adapters; the embedded world's
    pretraining anchor, where params set it, is off with one warning."""
    from flows.pipeline import pipeline

    amused = {"model.backbone": "amused", "model.pretrained": str(tiny), "model.lora_rank": 4,
              "train.rewards": [{"name": "colour_match", "weight": 1.0}], "train.lr_model": 1e-2,
              "train.anchor_coef": 0.1}
    result = pipeline(overrides=amused)
    assert "has no pretraining loss here; training without the anchor" in capfd.readouterr().err
    out = {name: Path(stage["out"]) for name, stage in result["stages"].items()}
    base = json.loads((out["pretrain"] / "generator.json").read_text())
    assert base["backbone"] == "amused" and base["pretrained"] == str(tiny) and len(base["sha256"]) == 64
    assert {"adapters.safetensors", "adapter.json", "schedule.json"} <= {p.name for p in out["train"].iterdir()}
    assert json.loads((out["train"] / "train.json").read_text())["iterations"] == 3
    for split in ("heldout", "seen"):
        assert 0 <= result["eval"][split]["geneval"]["overall"] <= 1
    # a longer run resumes from the 3-iteration checkpoint (adapters, policy, optimizers) and adds one iteration
    longer = pipeline(overrides=amused | {"train.iterations": 4})
    trained = Path(longer["stages"]["train"]["out"])
    history = json.loads((trained / "train.json").read_text())
    assert history["iterations"] == 4 and not longer["stages"]["train"]["cached"]
    assert (trained / "adapters.safetensors").read_bytes() != (out["train"] / "adapters.safetensors").read_bytes()
    import mlflow

    runs = mlflow.search_runs(experiment_names=["cogrpo"], filter_string="tags.stage = 'train'",
                              order_by=["attributes.start_time DESC"])
    assert runs.iloc[0]["tags.resumed_at_iteration"] == "3"


@pytest.mark.slow  # suite time; the same check at params load is in test_missing_weights_fail_in_one_line_naming_the_param
def test_a_stage_without_the_weights_stops_in_seconds_with_one_line(tmp_path):
    """Through the DVC entry point, offline, with model.pretrained naming nothing: exit 2, one line, before
    Prefect starts."""
    import subprocess
    import sys
    import time

    import yaml

    (tmp_path / "params.yaml").write_text(yaml.safe_dump({"model": {"backbone": "amused",
                                                                    "pretrained": "amused/amused-256"}}))
    root = Path(__file__).resolve().parents[1]
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "pipelines.stage", "pretrain"], cwd=tmp_path, capture_output=True,
                          text=True, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(root), "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 2 and time.monotonic() - start < 30
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "model.pretrained = 'amused/amused-256'" in lines[0] and "hf download" in lines[0]
    assert not (tmp_path / "runs").exists()


def test_adapters_that_do_not_match_the_params_are_refused(tiny, tmp_path):
    gen = _gen(tiny, lora_rank=4, lora_targets=["to_q"])
    gen.save_trained(tmp_path)
    with pytest.raises(InputError, match=r"adapter.json: adapters made with .*params ask for"):
        _gen(tiny, lora_rank=4).load_trained(tmp_path)  # to_k, to_v would silently stay at their zero init


def test_the_reference_pass_leaves_frozen_adapters_frozen(tiny):
    gen = _gen(tiny, lora_rank=4)
    for p in gen.trainable_parameters():
        p.requires_grad_(False)
    tokens = torch.full((3, gen.n_tokens), gen.mask_id)
    with torch.no_grad():
        gen.reference().guided_logits(tokens, gen.encode(PROMPTS), torch.full((3,), 3.0))
    assert not any(p.requires_grad for p in gen.trainable_parameters())


def test_low_precision_full_fine_tuning_is_refused():
    from cogrpo.config import ParamsError, parse_params

    with pytest.raises(ParamsError, match=r"full fine-tuning \(lora_rank 0\) in bf16"):
        parse_params({"model": {"backbone": "amused", "pretrained": "x", "lora_rank": 0, "dtype": "bf16"}})


@pytest.mark.parametrize("lora_rank", [4, 0])
def test_gradient_checkpointing_gives_the_same_gradients(tiny, lora_rank):
    """One policy-gradient step's gradients, with each transformer layer recomputed in backward and without."""
    grads = []
    for checkpointing in (False, True):
        gen = _gen(tiny, lora_rank=lora_rank, gradient_checkpointing=checkpointing)
        if lora_rank:
            _perturb_adapters(gen)
        cond = gen.encode(PROMPTS)
        traj = sample(gen, cond, base_knobs(AMUSED_DEFAULTS.model_copy(update={"steps": 4})), torch.arange(3))
        gen.train()
        counts = count_calls([layer.attn1 for layer in gen.transformer.transformer_layers])
        logp = trajectory_logprobs(gen, traj, cond).sum()
        forward = list(counts)
        logp.backward()
        assert min(forward) > 0 and counts == [(1 + checkpointing) * n for n in forward]
        grads.append(torch.cat([p.grad.flatten() for p in gen.trainable_parameters()]))
    assert grads[0].abs().sum() > 0 and torch.allclose(grads[0], grads[1], atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("mode", ["co", "model"])
def test_micro_batches_accumulate_the_same_gradient(tiny, mode):
    """train.micro_batch splits a model update into slices of trajectories (gradient accumulation, for GPU memory):
    the gradients and the logged losses are those of the whole batch in one pass, up to float rounding."""
    grads, logged = [], []
    for micro in (None, 5):  # 12 trajectories: slices of 5, 5 and 2
        gen = _gen(tiny, lora_rank=4)
        _perturb_adapters(gen)  # adapters off the reference: the KL term has a gradient too
        cfg = TrainConfig(mode=mode, group_size=4, prompts_per_iter=3, kl_beta=0.5, micro_batch=micro)
        trainer = CoGRPO(gen, base_knobs(AMUSED_DEFAULTS.model_copy(update={"steps": 4})), cfg)
        batch = GroupedBatch(torch.arange(3), gen.encode(PROMPTS), 4)
        metrics = trainer.update(batch, trainer.rollout(batch), torch.arange(12.0) % 3)
        grads.append([p.grad.clone() for p in gen.trainable_parameters()])
        logged.append([metrics[k] for k in ("model/loss", "model/kl", "model/grad_norm")])
    worst = max(((a - b).abs().max() / b.abs().max()).item() for a, b in zip(*grads))
    assert worst < 1e-4, worst  # relative to each tensor's largest entry
    assert logged[0] == pytest.approx(logged[1], rel=1e-4, abs=1e-7)  # the surrogate is ~0 at ratio 1


def test_the_export_carries_a_state_policy_that_decodes_the_exported_folder(tiny, tmp_path):
    """pipelines.export writes state_policy.safetensors beside schedule.json, and the exported folder decodes under it
    as docs/amused.md shows (adapters merged, the policy choosing each step's knobs from the canvas) as the trained
    model does: the same knobs and tokens."""
    import yaml

    from cogrpo.core.policy import (StateSchedulePolicy, decoding_schedule, load_conditioned_policy,
                                    save_conditioned_policy)
    from cogrpo.core.schedule import save_schedule
    from cogrpo.model_folder import ModelFolder
    from pipelines.export import main

    gen = _gen(tiny, lora_rank=4)
    _perturb_adapters(gen, 0.01)
    trained = ModelFolder(tmp_path / "trained")
    gen.save_trained(trained.path)
    policy = StateSchedulePolicy(base_knobs(AMUSED_DEFAULTS.model_copy(update={"steps": 4})), gen.prompt_feature_dim)
    with torch.no_grad():
        policy.net[-1].weight.normal_(0, 0.3, generator=torch.Generator().manual_seed(0))
    save_schedule(policy.deterministic_knobs(), trained.schedule)
    save_conditioned_policy(policy, trained.state_policy)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump({"model": {"backbone": "amused", "pretrained": str(tiny),
                                                                     "lora_rank": 4}}))
    out = main([str(trained.path), str(tmp_path / "export"), "--params", str(tmp_path / "params.yaml")])
    assert (out / "state_policy.safetensors").read_bytes() == trained.state_policy.read_bytes()
    assert (out / "schedule.json").is_file()

    def decode(generator, policy):
        cond = generator.encode(PROMPTS)
        knobs, choose = decoding_schedule(policy, generator.prompt_features(cond), policy.base)
        return sample(generator, cond, knobs, torch.arange(len(PROMPTS)), choose=choose)

    exported = _gen(out, lora_rank=0)
    mine, theirs = decode(gen, policy), decode(exported, load_conditioned_policy(out / "state_policy.safetensors"))
    assert torch.equal(mine.tokens, theirs.tokens) and torch.allclose(mine.knobs, theirs.knobs, atol=1e-4)
    assert not torch.allclose(mine.knobs[0], mine.knobs[1], atol=1e-3)  # prompts and canvases get their own knobs


@pytest.mark.parametrize("lora_rank", [4, 0])
def test_mix_update_scales_the_exported_update_toward_the_base(tiny, tmp_path, lora_rank):
    """train.export_mix's WiSE-FT on aMUSEd: the exported (merged) transformer of the mixed model is
    base + w · (trained − base), for LoRA (lora_B scaled) and full fine-tuning (weights interpolated)."""
    from safetensors.torch import load_file

    gen = _gen(tiny, lora_rank=lora_rank)
    ref = gen.reference()
    _perturb_adapters(gen, 0.05 if lora_rank else 0.01)
    gen.export(tmp_path / "trained")
    gen.mix_update(ref, 0.3)
    gen.export(tmp_path / "mixed")
    _gen(tiny, lora_rank=0).export(tmp_path / "base")
    base, trained, mixed = (load_file(next((tmp_path / m / "transformer").glob("*.safetensors")))
                            for m in ("base", "trained", "mixed"))
    moved = [k for k in base if not torch.equal(trained[k], base[k])]
    assert moved and all(torch.allclose(mixed[k], base[k] + 0.3 * (trained[k] - base[k]), atol=1e-6) for k in base)


def test_natural_language_training_prompts_train_a_real_backbone(tiny, tiny_project):
    """prompts.train_file: the prompts stage writes the file's prompts as train_natural.parquet and the train stage
    trains on them (its record says so); the embedded world's own prompt sets stay."""
    import shutil

    from flows.pipeline import pipeline

    Path("data/train_prompts").mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "data/train_prompts/examples.txt", "data/train_prompts/examples.txt")
    result = pipeline(overrides={
        "model.backbone": "amused", "model.pretrained": str(tiny), "model.lora_rank": 4,
        "prompts.train_file": "data/train_prompts/examples.txt", "benchmark.variants": ["trained-learned"],
        "train.rewards": [{"name": "colour_match", "weight": 1.0}], "train.lr_model": 1e-2,
        # the evaluating stages as small as they go: what this test reads is the prompts and the train stage
        "prompts.eval_per_tag": 1, "prompts.dpg_eval": 1, "eval.samples_per_prompt": 1, "sweep": [],
        "benchmark.steps": [4]})
    prompts = Path(result["stages"]["prompts"]["out"])
    natural = read_specs(prompts / "train_natural.parquet")
    lines = (ROOT / "data/train_prompts/examples.txt").read_text().splitlines()
    assert [s["prompt"] for s in natural] == lines and {s["tag"] for s in natural} == {"natural"}
    assert (prompts / "train.parquet").is_file()
    record = json.loads((Path(result["stages"]["train"]["out"]) / "train.json").read_text())
    assert record["train_prompts"] == f"train_natural.parquet: {len(lines)} prompts"


def test_natural_language_prompts_are_refused_where_nothing_can_read_or_score_them(tiny):
    from cogrpo.config import ParamsError, parse_params

    real = {"model": {"backbone": "amused", "pretrained": str(tiny)}, "prompts": {"train_file": "data/train_prompts/a.txt"}}
    with pytest.raises(ParamsError, match="prompts.train_file: natural-language prompts need a backbone"):
        parse_params({"prompts": {"train_file": "data/train_prompts/a.txt"}})
    with pytest.raises(ParamsError, match="no world spec for compositional to score"):
        parse_params(real)
    with pytest.raises(ParamsError, match="key 'prompts.train_file'"):
        parse_params(real | {"prompts": {"train_file": "elsewhere/a.txt"}})
    assert parse_params(real | {"train": {"rewards": [{"name": "clip"}]}}).prompts.train_file == "data/train_prompts/a.txt"


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_a_rollout_with_the_adapters_folded_has_the_adapters_on_log_probs(tiny, dtype):
    """issue 27: rollouts decode with W + ΔW in place of the LoRA branch (`sampling()`), the update recomputes with
    the adapters on: in fp32 the rollout's log-probs match that recompute within 1e-4 per step; bf16 weights are
    not folded (W + ΔW in bf16 is 0.54 off per step here), so they match exactly. The adapters visibly matter, and
    leaving restores every weight bit for bit."""
    gen = _gen(tiny, lora_rank=4, dtype=dtype)
    _perturb_adapters(gen, 0.2)
    before = {n: p.detach().clone() for n, p in gen.transformer.named_parameters()}
    cond, knobs = gen.encode(PROMPTS), base_knobs(AMUSED_DEFAULTS.model_copy(update={"steps": 4}))
    with gen.sampling():
        folded = sum(bool(m.merged_adapters) for m in gen.transformer.modules() if hasattr(m, "merged_adapters"))
        traj = sample(gen, cond, knobs, torch.arange(len(PROMPTS)))
    assert all(torch.equal(p, before[n]) for n, p in gen.transformer.named_parameters())
    assert not any(m.merged_adapters for m in gen.transformer.modules() if hasattr(m, "merged_adapters"))
    with torch.no_grad():
        on = trajectory_logprobs(gen, traj, cond)
        off = trajectory_logprobs(gen.reference(), traj, cond)
    err = (on - traj.logp).abs().max().item()
    if dtype == "fp32":
        lora_layers = sum(hasattr(m, "merged_adapters") for m in gen.transformer.modules())
        assert folded == lora_layers > 0 and 0 < err <= 1e-4, (folded, err)
    else:
        assert folded == 0 and err == 0
    assert (off - traj.logp).abs().max().item() > 0.1  # the adapters change the log-probs: the fold kept them
