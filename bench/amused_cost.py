"""What aMUSEd costs under cogrpo, measured in one run on one device (random weights, no download):

  P7   cogrpo's sampler ÷ diffusers' AmusedPipeline, same model, prompts, batch, steps and CFG (goal ≤ 1.0: the
       per-trajectory knobs must cost nothing). Both decode to images. Ours samples with the LoRA adapters off,
       as an exported model (adapters fused) does; lora_sampling_overhead is a training rollout's extra cost
       as it decodes (`Generator.sampling()`: adapters folded into fp32 weights; 16-bit weights keep them unfused),
       lora_unfused_overhead the same with peft's adapters beside their base layers (in fp32), and
       P7_training_rollout_over_pipeline is P7 times lora_sampling_overhead (goal ≤ 1.05).
  P1   FLOP/s the sampler achieves (torch's FlopCounterMode over one call) ÷ the device's GEMM FLOP/s in the same
       dtype, measured here (goal ≥ 0.5); with --compile also P1_compiled, the sampler as `model.compile: true`
       decodes (each whole step under torch.compile), its speed-up over eager and its first, compiling, call.
  update cost: one LoRA Co-GRPO update per trained step ÷ rollout per step; peak memory of each (CUDA).
  for estimates on devices not at hand: weights' size, GFLOP per trajectory of a rollout step and of an update's
       trained step (FlopCounterMode), and the update's activations kept for backward per trajectory and step.

    python bench/amused_cost.py                                     # tiny aMUSEd on the CPU
    python bench/amused_cost.py --size 256 --dtype fp32 bf16 --batch 32 --group 8 --micro-batch 4   # on a GPU
    python bench/amused_cost.py --size 256 --batch 2 --group 2 --steps 2 --repeats 3   # full size on 2 CPU cores (~6 min)
Writes reports/amused_cost_<size>.json.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import tempfile
import time
from pathlib import Path

import torch
from torch.utils.flop_counter import FlopCounterMode

from cogrpo.backbones.amused import AmusedGenerator
from cogrpo.backbones.clip_vq import DTYPES
from cogrpo.backbones.tiny_amused import make_tiny_amused
from cogrpo.config import ModelConfig, ScheduleConfig, TrainConfig
from cogrpo.core.batch import GroupedBatch
from cogrpo.core.sampler import sample
from cogrpo.core.schedule import base_knobs
from cogrpo.core.trainer import CoGRPO


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn, device, repeats: int) -> float:
    fn()  # warm-up
    _sync(device)
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    _sync(device)
    return (time.perf_counter() - start) / repeats


def interleaved(a, b, device: torch.device, repeats: int) -> tuple[float, float]:
    """Median seconds of a and of b, timed in turns (a, b, a, b, …) so that the machine's drifts hit both alike."""
    a(), b()  # warm-up
    times: tuple[list[float], list[float]] = ([], [])
    for _ in range(repeats):
        for fn, out in ((a, times[0]), (b, times[1])):
            _sync(device)
            start = time.perf_counter()
            fn()
            _sync(device)
            out.append(time.perf_counter() - start)
    return statistics.median(times[0]), statistics.median(times[1])


def gemm_flops(device: torch.device, dtype: torch.dtype, n: int) -> float:
    a, b = torch.randn(n, n, device=device, dtype=dtype), torch.randn(n, n, device=device, dtype=dtype)
    return 2 * n**3 / timed(lambda: a @ b, device, 20)


def saved_for_backward_gib(fn) -> float:
    """Bytes of the tensors autograd keeps for backward while fn runs (distinct storages): the activation memory
    of an update, measured the same way on any device (the update is one forward over its steps, then one
    backward, so all of them are alive at once)."""
    seen: set[int] = set()
    total = 0

    def pack(t: torch.Tensor) -> torch.Tensor:
        nonlocal total
        storage = t.untyped_storage()
        if storage.data_ptr() not in seen:
            seen.add(storage.data_ptr())
            total += storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return total / 2**30


def flops(fn) -> float:
    with FlopCounterMode(display=False) as counter:
        fn()
    return counter.get_total_flops()


def peak_gib(device: torch.device, fn) -> float | None:
    if device.type != "cuda":
        return None
    torch.cuda.reset_peak_memory_stats(device)
    fn()
    return torch.cuda.max_memory_allocated(device) / 2**30


def activations_per_trajectory_step(gen: AmusedGenerator, schedule: ScheduleConfig, prompts: list[str]) -> float:
    """Activations an update keeps per trajectory and trained step, read on one prompt × 2 trajectories updated in
    one slice (micro-batches free and reuse storage, which the distinct-storage count cannot tell apart)."""
    cfg = TrainConfig(mode="co", prompts_per_iter=1, group_size=2, lr_model=1e-4)
    trainer = CoGRPO(gen, base_knobs(schedule), cfg)
    batch = GroupedBatch(torch.arange(1), gen.encode(prompts[:1]), 2)
    ro = trainer.rollout(batch)
    trained_steps = max(1, math.ceil(cfg.step_fraction * schedule.steps)) * cfg.inner_epochs
    return saved_for_backward_gib(lambda: trainer.update(batch, ro, torch.rand(2))) / 2 / trained_steps


def measure(folder: Path, dtype: str, args) -> dict:
    from diffusers import AmusedPipeline

    cfg = ModelConfig(backbone="amused", pretrained=str(folder), dtype=dtype, lora_rank=args.lora_rank,
                      gradient_checkpointing=args.gradient_checkpointing)
    gen = AmusedGenerator(folder, cfg)
    device, prompts = gen.device, [f"a photo of object number {i}" for i in range(args.batch)]
    pipe = AmusedPipeline.from_pretrained(folder, torch_dtype=DTYPES[dtype]).to(device)
    pipe.set_progress_bar_config(disable=True)
    schedule = ScheduleConfig(steps=args.steps, ratio_curve="amused", remask_temperature=2.0, remask_anneal="to_zero",
                              cfg=10.0)
    knobs, seeds = base_knobs(schedule), torch.arange(args.batch)

    # P7 on the inference path: an exported model has its adapters fused (AmusedGenerator.export), which is the
    # pipeline's model with the adapters off; the adapters' own cost in a training rollout is read apart below
    plain = gen.reference() if gen.lora else gen

    def ours():
        with torch.no_grad():
            return gen.decode(sample(plain, gen.encode(prompts), knobs, seeds).tokens)

    def theirs():
        return pipe(prompts, num_inference_steps=args.steps, guidance_scale=10.0, output_type="np",
                    generator=torch.Generator(device).manual_seed(0)).images

    ours_s, theirs_s = interleaved(ours, theirs, device, args.repeats)
    cond = gen.encode(prompts)
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        sample(plain, cond, knobs, seeds)
    sampler_only_s = timed(lambda: sample(plain, cond, knobs, seeds), device, args.repeats)
    def rollout_sampling():  # as a training rollout decodes: adapters folded where the dtype allows (sampling())
        with gen.sampling():
            return sample(gen, cond, knobs, seeds)

    with_adapters_s, without_s = interleaved(rollout_sampling, lambda: sample(plain, cond, knobs, seeds), device,
                                             args.repeats)
    unfused_s, without_again_s = interleaved(lambda: sample(gen, cond, knobs, seeds),
                                             lambda: sample(plain, cond, knobs, seeds), device, args.repeats)
    gemm = gemm_flops(device, DTYPES[dtype], args.gemm_n)
    compiled = {}
    if args.compile:  # model.compile: each whole step under torch.compile; its first call compiles
        def sample_compiled():
            plain.compile_sampling = True
            try:
                return sample(plain, cond, knobs, seeds)
            finally:
                plain.compile_sampling = False

        start = time.perf_counter()
        sample_compiled()
        _sync(device)
        first_s = time.perf_counter() - start
        compiled_s, eager_s = interleaved(sample_compiled, lambda: sample(plain, cond, knobs, seeds), device,
                                          args.repeats)
        compiled = {"compiled_first_call_s": first_s, "compiled_speedup_over_eager": eager_s / compiled_s,
                    "P1_compiled": counter.get_total_flops() / compiled_s / gemm}

    # one Co-GRPO iteration at this batch: B prompts × G trajectories
    B = max(1, args.batch // args.group)
    train_cfg = TrainConfig(mode="co", prompts_per_iter=B, group_size=args.group, lr_model=1e-4,
                            micro_batch=args.micro_batch)
    trainer = CoGRPO(gen, base_knobs(schedule), train_cfg)
    batch = GroupedBatch(torch.arange(B), gen.encode(prompts[:B]), args.group)
    rewards = torch.rand(B * args.group)
    rollout_s = timed(lambda: trainer.rollout(batch), device, args.repeats)
    ro = trainer.rollout(batch)
    update_s = timed(lambda: trainer.update(batch, ro, rewards), device, args.repeats)
    trained_steps = max(1, math.ceil(train_cfg.step_fraction * args.steps)) * train_cfg.inner_epochs
    n_traj = B * args.group
    weights = sum(p.numel() * p.element_size() for m in (gen.transformer, gen.text_encoder, gen.vqvae)
                  for p in m.parameters())
    return {
        "dtype": dtype, "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__, "batch": args.batch, "group": args.group, "steps": args.steps,
        "gradient_checkpointing": args.gradient_checkpointing,
        "frozen_transformer_params": sum(p.numel() for p in gen.transformer.parameters() if not p.requires_grad),
        "trained_params": sum(p.numel() for p in gen.trainable_parameters()),
        "P7_sampler_over_pipeline": ours_s / theirs_s, "sampler_s": ours_s, "pipeline_s": theirs_s,
        "lora_sampling_overhead": with_adapters_s / without_s,
        "lora_unfused_overhead": unfused_s / without_again_s,
        "P7_training_rollout_over_pipeline": ours_s * with_adapters_s / without_s / theirs_s,
        "P1_achieved_over_gemm": counter.get_total_flops() / sampler_only_s / gemm,
        "sampler_tflops": counter.get_total_flops() / sampler_only_s / 1e12, "gemm_tflops": gemm / 1e12,
        "rollout_s_per_step": rollout_s / args.steps, "update_s_per_trained_step": update_s / trained_steps,
        "update_over_rollout_per_step": (update_s / trained_steps) / (rollout_s / args.steps),
        "weights_gib": weights / 2**30,
        "rollout_gflop_per_trajectory_step": flops(lambda: trainer.rollout(batch)) / n_traj / args.steps / 1e9,
        "update_gflop_per_trajectory_trained_step": flops(lambda: trainer.update(batch, ro, rewards)) / n_traj
        / trained_steps / 1e9,
        "update_activations_gib_per_trajectory_trained_step": activations_per_trajectory_step(gen, schedule, prompts),
        "micro_batch": args.micro_batch,
        "rollout_peak_gib": peak_gib(device, lambda: trainer.rollout(batch)),
        "update_peak_gib": peak_gib(device, lambda: trainer.update(batch, ro, rewards)),
    } | compiled


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", choices=["tiny", "256", "512"], default="tiny")
    ap.add_argument("--dtype", nargs="+", default=["fp32"], choices=list(DTYPES))
    ap.add_argument("--batch", type=int, default=16, help="images per sampler call (= B·G of the training batch)")
    ap.add_argument("--group", type=int, default=8, help="G: trajectories per prompt in the training batch")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--lora-rank", type=int, default=16)
    ap.add_argument("--gradient-checkpointing", action="store_true")
    ap.add_argument("--micro-batch", type=int, default=None, help="train.micro_batch of the update (None: all at once)")
    ap.add_argument("--gemm-n", type=int, default=2048)
    ap.add_argument("--compile", action="store_true", help="also time the sampler as model.compile decodes")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        torch.set_num_threads(2)
    out = Path(args.out or f"reports/amused_cost_{args.size}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    runs: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = make_tiny_amused(Path(tmp) / "amused", size=args.size)
        for dtype in args.dtype:  # written after each dtype: a time limit keeps what was measured
            runs.append(measure(folder, dtype, args))
            out.write_text(json.dumps({"size": args.size, "runs": runs}, indent=1) + "\n")
            print(json.dumps(runs[-1], indent=1), flush=True)


if __name__ == "__main__":
    main()
