"""What Meissonic costs under cogrpo, on the published shapes with random weights (issue 25, item 4), in one run on
one device: no download, the snapshot is made by `cogrpo.backbones.tiny_meissonic --size published`.

  rollout step   one decoding step of one image with CFG (the guided pair: unconditional and conditional forward),
                 as cogrpo's sampler runs it: GFLOP (torch's FlopCounterMode, with the CPU attention kernels:
                 bench/flops.py) and seconds; the sampler with the adapters off (an exported model), and a training
                 rollout (CoGRPO.rollout, adapters on) per trajectory and step.
  trained step   one trajectory's share of a LoRA Co-GRPO update per trained step: the recomputed guided pair with
                 gradients, the reference pair (adapters off) for the KL, the backward; GFLOP and seconds, without
                 and with gradient checkpointing (model.gradient_checkpointing: each Flux block recomputed in
                 backward).
  activations    GiB autograd keeps for backward per trajectory and trained step (the guided pair), weights not
                 counted; read in a forward that drops each saved tensor as it is saved (nothing is held, so the
                 full-size figure is read in little memory; no backward runs). With checkpointing, what stays is
                 each checkpointed block's inputs, which this count does not see (torch keeps them itself): on CUDA
                 the update's peak memory gives the figure.
  weights        GiB of the transformer, the CLIP text tower and the VQ-GAN in the run's dtype; the adapters in fp32.
  P1             the sampler's FLOP/s ÷ the device's GEMM FLOP/s in the same dtype, measured in the same run
                 (bench/amused_cost.py's gemm_flops; goal ≥ 0.5).
  iteration      one Co-GRPO iteration of --prompts × --group trajectories at the first of --steps: its rollout's
                 seconds plus its update's (train.step_fraction 0.5 of the steps trained, train.micro_batch
                 --micro-batch); the sampler's seconds at each of --steps for --batch images.
  CUDA only      peak GiB allocated by the sampler, the training rollout and the update.

    python bench/meissonic_cost.py --config tiny            # the plumbing, seconds (tests/test_meissonic_cost.py)
    python bench/meissonic_cost.py --config published --dtype fp32 bf16   # full size on a 2-core CPU: 1 image,
        # 2 steps, B 1 × G 2: about 42 forwards of 1.49 TFLOP per dtype, 10-30 min each; peak ~12 GiB in fp32
    python bench/meissonic_cost.py --config published --device cuda --dtype bf16 --batch 32 --steps 48 12 16 32 64 \\
        --prompts 2 --group 8 --micro-batch 1 --checkpointing on   # issue 25's GPU figures: one GPU's share of
        # B 16 × G 8 on 8 GPUs (--prompts 16: all of it on one GPU, which by arithmetic needs more than 80 GB)
    python bench/meissonic_cost.py --estimate --prompts 16 --group 8 --steps 48   # the paper's run by arithmetic:
        # FLOPs counted on the meta device (seconds, no memory), times at --gpu-tflops × --mfu; the README's figures
Writes reports/meissonic_cost_<config>_<device>.json (--out), after each dtype: a time limit keeps what was measured;
--estimate writes reports/meissonic_cost_estimate_<config>.json. tests/test_meissonic_cost.py checks the estimate's
FLOP arithmetic against the FLOPs the measurement counts on the tiny config.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
import weakref
from pathlib import Path

import torch
from torch.utils.flop_counter import FlopCounterMode

from cogrpo.backbones.clip_vq import DTYPES, checkpoint_layers
from cogrpo.backbones.meissonic import MeissonicGenerator
from cogrpo.backbones.tiny_meissonic import SIZES, make_tiny_meissonic
from cogrpo.config import ModelConfig, ScheduleConfig, TrainConfig
from cogrpo.core.batch import GroupedBatch
from cogrpo.core.sampler import sample, trajectory_token_logprobs
from cogrpo.core.schedule import base_knobs
from cogrpo.core.trainer import CoGRPO

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.amused_cost import _sync, gemm_flops, timed  # noqa: E402
from bench.flops import CPU_ATTENTION  # noqa: E402

RESOLUTION = {"tiny": 16, "published": 1024}  # the published: the authors' pipeline's default image side


def counted_and_timed(fn, device: torch.device, repeats: int):
    """FLOPs of one call (counted as bench/flops.count_flops counts them), the mean seconds of `repeats` more calls
    after it (0: of that call itself; at full size a call is seconds to minutes, its warm-up noise), the peak GiB
    allocated over them (CUDA; None elsewhere) and the last call's result."""
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats(device)
    _sync(device)
    start = time.perf_counter()
    with FlopCounterMode(display=False, custom_mapping=CPU_ATTENTION) as counter:
        result = fn()
    _sync(device)
    seconds = time.perf_counter() - start
    if repeats:
        start = time.perf_counter()
        for _ in range(repeats):
            result = fn()
        _sync(device)
        seconds = (time.perf_counter() - start) / repeats
    peak = torch.cuda.max_memory_allocated(device) / 2**30 if cuda else None
    return counter.get_total_flops(), seconds, peak, result


def activations_gib(gen: MeissonicGenerator, fn) -> float:
    """GiB of the tensors autograd saves for backward while fn runs, distinct storages, weights (the parameters'
    storages) not counted, each dropped as it is saved (fn must not run backward). Counted as
    bench/amused_cost.saved_for_backward_gib counts, which keeps them (and counts the frozen weights a linear saves
    for its input's gradient); a storage freed and its address reused counts again, as it would be distinct."""
    params = {p.untyped_storage().data_ptr() for m in (gen.transformer, gen.text_encoder, gen.vqvae)
              for p in m.parameters()}
    live: dict[int, weakref.ref] = {}
    total = 0

    def pack(t: torch.Tensor) -> None:
        nonlocal total
        ptr = t.untyped_storage().data_ptr()
        if ptr in params or (ptr in live and live[ptr]() is not None):
            return None
        live[ptr] = weakref.ref(t if t._base is None else t._base)  # a view dies at once, its base lives on
        total += t.untyped_storage().nbytes()
        return None

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda _: None):
        fn()
    return total / 2**30


def gib(modules) -> float:
    return sum(p.numel() * p.element_size() for m in modules for p in m.parameters()) / 2**30


def measure(folder: Path, dtype: str, args) -> dict:
    cfg = ModelConfig(backbone="meissonic", pretrained=str(folder), dtype=dtype, lora_rank=args.lora_rank,
                      resolution=args.resolution, device=args.device)
    gen = MeissonicGenerator(folder, cfg)
    device, n, T0 = gen.device, args.batch, args.steps[0]
    prompts = [f"a photo of object number {i}" for i in range(max(n, args.prompts))]
    schedule = lambda T: ScheduleConfig(steps=T, ratio_curve="amused", remask_temperature=2.0,  # noqa: E731
                                        remask_anneal="to_zero", cfg=9.0)  # the authors' pipeline's defaults
    cond, seeds = gen.encode(prompts[:n]), torch.arange(n)
    gen.null_condition()  # encoded once and kept: not a cost of any step
    plain = gen.reference()  # the adapters off: what an exported (merged) model samples with

    # the sampler: FLOPs and seconds per step of n images, the guided pair each
    def decode(T: int):
        with torch.no_grad():
            return sample(plain, cond, base_knobs(schedule(T)), seeds)

    sampler_flops, sampler_s, sampler_peak, _ = counted_and_timed(lambda: decode(T0), device, args.repeats)
    gemm = gemm_flops(device, DTYPES[dtype], args.gemm_n)
    by_steps = {str(T0): sampler_s} | {str(T): timed(lambda T=T: decode(T), device, max(1, args.repeats))
                                       for T in args.steps[1:]}

    # a Co-GRPO iteration of B prompts × G trajectories at T0 steps
    B, G = args.prompts, args.group
    train_cfg = TrainConfig(mode="co", prompts_per_iter=B, group_size=G, lr_model=1e-4, micro_batch=args.micro_batch)
    trainer = CoGRPO(gen, base_knobs(schedule(T0)), train_cfg)
    batch = GroupedBatch(torch.arange(B), gen.encode(prompts[:B]), G)
    rewards = torch.rand(B * G, generator=torch.Generator().manual_seed(0))
    n_traj, trained = B * G, max(1, math.ceil(train_cfg.step_fraction * T0)) * train_cfg.inner_epochs
    rollout_flops, rollout_s, rollout_peak, ro = counted_and_timed(lambda: trainer.rollout(batch), device, args.repeats)

    def one_trajectory_forward():  # the update's forward of one trajectory at one trained step, with gradients
        gen.train()
        try:
            trajectory_token_logprobs(gen, ro.traj[0:1], batch.trajectory_cond()[0:1], torch.tensor([T0 // 2]))
        finally:
            gen.eval()

    adapters = sum(p.numel() * p.element_size() for p in gen.trainable_parameters()) / 2**30
    out = {"dtype": dtype, "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
           "torch": torch.__version__, "threads": torch.get_num_threads(), "resolution": gen.resolution,
           "tokens": gen.n_tokens, "batch": n, "steps": T0, "prompts": B, "group": G,
           "micro_batch": args.micro_batch, "lora_rank": args.lora_rank,
           "transformer_params": sum(p.numel() for n_, p in gen.transformer.named_parameters() if "lora_" not in n_),
           "trained_params": sum(p.numel() for p in gen.trainable_parameters()),
           "weights_gib": {"transformer": gib([gen.transformer]) - adapters, "adapters_fp32": adapters,
                           "text_encoder": gib([gen.text_encoder]), "vqvae": gib([gen.vqvae])},
           "rollout_gflop_per_image_step": sampler_flops / n / T0 / 1e9,
           "sampler_s_per_step": sampler_s / T0, "sampler_s_per_image_step": sampler_s / n / T0,
           "sampler_s_by_steps": by_steps,
           "P1_achieved_over_gemm": sampler_flops / sampler_s / gemm,
           "sampler_tflops": sampler_flops / sampler_s / 1e12, "gemm_tflops": gemm / 1e12,
           "training_rollout_gflop_per_trajectory_step": rollout_flops / n_traj / T0 / 1e9,
           "training_rollout_s_per_trajectory_step": rollout_s / n_traj / T0,
           "activations_gib_per_trajectory_trained_step": activations_gib(gen, one_trajectory_forward)}
    out |= {"sampler_peak_gib": sampler_peak, "training_rollout_peak_gib": rollout_peak}
    for ckpt in {"off": (False,), "on": (True,), "both": (False, True)}[args.checkpointing]:
        if ckpt:  # irreversible (the blocks' forwards are wrapped in place): measured last
            checkpoint_layers(gen.layers(gen.transformer))
        update_flops, update_s, update_peak, _ = counted_and_timed(lambda: trainer.update(batch, ro, rewards),
                                                                   device, args.repeats)
        tag = "_checkpointed" if ckpt else ""
        out |= {f"update{tag}_gflop_per_trajectory_trained_step": update_flops / n_traj / trained / 1e9,
                f"update{tag}_s_per_trajectory_trained_step": update_s / n_traj / trained,
                f"update{tag}_over_rollout_flop_per_step": update_flops / trained / (rollout_flops / T0),
                f"update{tag}_peak_gib": update_peak,
                # one Co-GRPO iteration of B × G at T0 steps: its rollout, then its update
                f"iteration{tag}_s": rollout_s + update_s}
    return out


def flop_model(resolution: int, lora_rank: int, **transformer) -> dict:
    """TFLOP per image of the parts of a Meissonic (MeissonicTransformer's defaults, i.e. the published config,
    unless `transformer` overrides fields), counted on the meta device (no memory, no compute; the counter reads
    shapes): the transformer's forward with LoRA adapters on the attention projections (and without them,
    `forward_folded`: what an fp32 rollout costs with the adapters folded), its backward with only
    the adapters trained (lora_rank 0: every weight), the Flux blocks' forward alone (what gradient checkpointing recomputes), the VQ-GAN's
    decoding of the token grid and the CLIP text tower (the published shapes' ones; the tiny's with --config tiny)."""
    from diffusers import VQModel
    from peft import LoraConfig
    from transformers import CLIPTextConfig, CLIPTextModelWithProjection

    from cogrpo.backbones.meissonic import TEXT_TOKENS
    from cogrpo.backbones.meissonic_transformer import MeissonicTransformer
    from cogrpo.backbones.tiny_amused import PUBLISHED_VQVAE, TINY_TEXT, TINY_VQVAE
    from cogrpo.backbones.tiny_meissonic import PUBLISHED_TEXT, TRANSFORMER

    tiny = transformer.pop("tiny", False)
    text_cfg, vq_cfg = (TINY_TEXT, TINY_VQVAE) if tiny else (PUBLISHED_TEXT, PUBLISHED_VQVAE)
    count = lambda fn: FlopCounterMode(display=False, custom_mapping=CPU_ATTENTION)  # noqa: E731
    with torch.device("meta"):
        # lora_rank 0: full fine-tuning, every weight trained (the backward computes their gradients too)
        model = MeissonicTransformer(**((TRANSFORMER if tiny else {}) | transformer)).requires_grad_(not lora_rank)
        if lora_rank:
            model.add_adapter(LoraConfig(r=lora_rank, lora_alpha=2 * lora_rank, target_modules=["to_q", "to_k", "to_v"]))
            for name, p in model.named_parameters():
                p.requires_grad_("lora_" in name)
        vqvae = VQModel(**vq_cfg)
        text = CLIPTextModelWithProjection(CLIPTextConfig(**text_cfg, max_position_embeddings=TEXT_TOKENS))
        scale = 2 ** (len(vq_cfg["block_out_channels"]) - 1)
        side, cfg = resolution // scale, model.config
        inputs = dict(hidden_states=torch.zeros(1, side, side, dtype=torch.long),
                      encoder_hidden_states=torch.zeros(1, TEXT_TOKENS, cfg.joint_attention_dim),
                      pooled_projections=torch.zeros(1, cfg.pooled_projection_dim), micro_conds=torch.zeros(1, 5),
                      timestep=torch.zeros(1))
        if lora_rank:  # a rollout in fp32 decodes with the adapters folded into the weights (Generator.sampling())
            model.disable_adapters()
            with count(None) as folded:
                model(**inputs)
            model.enable_adapters()
            for name, p in model.named_parameters():
                p.requires_grad_("lora_" in name)
        with count(None) as forward:
            logits = model(**inputs)
        with count(None) as backward:
            logits.float().sum().backward()
        with count(None) as decode:
            vqvae.decode(torch.zeros(1, side * side, dtype=torch.long), force_not_quantize=True,
                         shape=(1, side, side, vq_cfg["latent_channels"]))
        with count(None) as encode:
            text(torch.zeros(1, TEXT_TOKENS, dtype=torch.long), output_hidden_states=True)
    by_module = forward.get_flop_counts()
    blocks = sum(sum(ops.values()) for name, ops in by_module.items()
                 if name.count(".") == 2 and name.split(".")[1] in ("transformer_blocks", "single_transformer_blocks"))
    return {"forward": forward.get_total_flops() / 1e12, "backward": backward.get_total_flops() / 1e12,
            "forward_folded": (folded if lora_rank else forward).get_total_flops() / 1e12,
            "blocks_forward": blocks / 1e12, "vq_decode": decode.get_total_flops() / 1e12,
            "text_encode": encode.get_total_flops() / 1e12, "tokens": side * side}


def suite_images() -> dict[str, int]:
    """Images per (variant, step count) of each published suite: its prompts × benchmark.samples_per_prompt."""
    from cogrpo.benchmarks import specs
    from cogrpo.config import BenchmarkSamples
    from tasks.benchmark import BENCHMARK_FILES, PUBLISHED

    samples = BenchmarkSamples()
    return {name: len(getattr(specs, loader)(*(BENCHMARK_FILES / f for f in files))) * getattr(samples, name)
            for name, (loader, *files) in PUBLISHED.items()}


def estimate(args) -> dict:
    """Per-iteration and per-run FLOPs of the paper's run from flop_model's counts, and their time at an assumed
    throughput: --gpu-tflops (the GPU's dense bf16 peak) × --mfu (the fraction of it achieved)."""
    f = flop_model(args.resolution, args.lora_rank, tiny=args.config == "tiny",
                   **(dict(num_layers=args.layers[0], num_single_layers=args.layers[1]) if args.layers else {}))
    T, n = args.steps[0], args.prompts * args.group
    trained = max(1, math.ceil(0.5 * T))  # train.step_fraction's default
    # a rollout step of one trajectory: the guided pair, its LoRA adapters unfused in 16-bit weights, folded in fp32
    per_step = 2 * f["forward" if args.rollout_dtype != "fp32" else "forward_folded"]
    # a trained step of one trajectory: the guided pair with gradients (forward, backward), the reference pair
    # (adapters off: counted with them, a rounding), with checkpointing the blocks' forward again
    per_trained = 2 * (f["forward"] + f["backward"]) + 2 * f["forward"]
    per_trained_ckpt = per_trained + 2 * f["blocks_forward"]
    iteration = {"rollout": n * T * per_step, "decode": n * f["vq_decode"],
                 "update": n * trained * per_trained_ckpt}
    iteration_pflop = sum(iteration.values()) / 1e3
    achieved = args.gpu_tflops * args.mfu  # TFLOP/s per GPU
    images = suite_images()
    per_variant = sum(images.values()) * (sum(args.bench_steps) * per_step + len(args.bench_steps) * f["vq_decode"])
    return {"assumed": {"gpu_tflops_bf16_dense": args.gpu_tflops, "mfu": args.mfu, "achieved_tflops": achieved,
                        "prompts": args.prompts, "group": args.group, "steps": T, "trained_steps": trained,
                        "iterations": args.iterations, "benchmark_steps": args.bench_steps,
                        "benchmark_variants": args.bench_variants, "resolution": args.resolution},
            "tflop_per_image": f,
            "tflop_per_trajectory": {"rollout_step": per_step, "trained_step": per_trained,
                                     "trained_step_checkpointed": per_trained_ckpt},
            "pflop_per_iteration": {k: v / 1e3 for k, v in iteration.items()} | {"total": iteration_pflop},
            "iteration_s": {str(g): iteration_pflop * 1e3 / achieved / g for g in args.gpus},
            "run_gpu_hours": iteration_pflop * 1e3 / achieved * args.iterations / 3600,
            "run_hours": {str(g): iteration_pflop * 1e3 / achieved * args.iterations / 3600 / g for g in args.gpus},
            "benchmark_images_per_variant_and_steps": images,
            "benchmark_pflop_per_variant": per_variant / 1e3,
            "benchmark_gpu_hours": per_variant * args.bench_variants / achieved / 3600,
            "benchmark_hours": {str(g): per_variant * args.bench_variants / achieved / 3600 / g for g in args.gpus}}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", choices=SIZES, default="published",
                    help="the transformer, text tower and VQ-GAN: tiny_meissonic's tiny ones or the published shapes")
    ap.add_argument("--device", default="cpu", help="cpu, cuda or cuda:<i>")
    ap.add_argument("--dtype", nargs="+", default=["fp32", "bf16"], choices=list(DTYPES))
    ap.add_argument("--resolution", type=int, default=None, help="image side (default: 1024 published, 16 tiny)")
    ap.add_argument("--batch", type=int, default=1, help="images per sampler call (each a guided pair)")
    ap.add_argument("--steps", type=int, nargs="+", default=[2],
                    help="decoding steps; the first is the iteration's, the others time the sampler alone")
    ap.add_argument("--prompts", type=int, default=1, help="B of the iteration measured")
    ap.add_argument("--group", type=int, default=2, help="G of the iteration measured (≥ 2)")
    ap.add_argument("--micro-batch", type=int, default=1, help="train.micro_batch of the update")
    ap.add_argument("--lora-rank", type=int, default=16)
    ap.add_argument("--checkpointing", choices=["off", "on", "both"], default="both",
                    help="updates measured without and/or with gradient checkpointing (on a GPU at B 16 × G 8 only "
                    "'on' fits: without it a trajectory keeps T/2 steps of activations per micro-batch row)")
    ap.add_argument("--repeats", type=int, default=0,
                    help="timed calls after the FLOP-counted one (0: the counted call is the timed one)")
    ap.add_argument("--gemm-n", type=int, default=2048)
    ap.add_argument("--threads", type=int, default=2, help="torch's CPU threads")
    ap.add_argument("--layers", type=int, nargs=2, default=None, metavar=("DUAL", "SINGLE"),
                    help="fewer Flux blocks at the config's widths (per-block figures scale linearly)")
    ap.add_argument("--out", default=None)
    est = ap.add_argument_group("--estimate: the paper's run by arithmetic on FLOPs counted on the meta device "
                                "(seconds, no memory): --prompts × --group trajectories at the first of --steps")
    est.add_argument("--estimate", action="store_true")
    est.add_argument("--rollout-dtype", default="bf16", choices=list(DTYPES),
                     help="the weights' dtype of the estimated run: fp32 rollouts fold the adapters into the weights")
    est.add_argument("--gpu-tflops", type=float, default=989.0, help="dense bf16 peak per GPU (H100 SXM: 989)")
    est.add_argument("--mfu", type=float, default=0.3,
                     help="the fraction of it achieved (aMUSEd-256's sampler: 201 TFLOP/s bf16 on an H200, 0.2 of "
                     "989; Meissonic's 1101-token sequences should do better: reports/README.md)")
    est.add_argument("--gpus", type=int, nargs="+", default=[1, 8])
    est.add_argument("--iterations", type=int, default=100)
    est.add_argument("--bench-steps", type=int, nargs="+", default=[8, 12, 16, 24, 32, 48])
    est.add_argument("--bench-variants", type=int, default=4)
    args = ap.parse_args(argv)
    args.resolution = args.resolution or RESOLUTION[args.config]
    if args.estimate:
        report = estimate(args)
        out = Path(args.out or f"reports/meissonic_cost_estimate_{args.config}.json")
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=1) + "\n")
        print(json.dumps(report, indent=1))
        return report
    torch.set_num_threads(args.threads)
    device = "cuda" if args.device.startswith("cuda") else "cpu"
    out = Path(args.out or f"reports/meissonic_cost_{args.config}_{device}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    report: dict = {"config": args.config, "layers": args.layers, "argv": argv if argv is not None else sys.argv[1:],
                    "runs": []}
    overrides = dict(num_layers=args.layers[0], num_single_layers=args.layers[1]) if args.layers else {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = make_tiny_meissonic(Path(tmp) / "meissonic", size=args.config, **overrides)
        for dtype in args.dtype:
            report["runs"].append(measure(folder, dtype, args))
            out.write_text(json.dumps(report, indent=1) + "\n")
            print(json.dumps(report["runs"][-1], indent=1), flush=True)
    return report


if __name__ == "__main__":
    main()
