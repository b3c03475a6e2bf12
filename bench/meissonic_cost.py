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
        # 2 steps, B 1 × G 2: about 42 forwards of 1.48 TFLOP per dtype, 20-40 min each; peak ~13 GiB in fp32
    python bench/meissonic_cost.py --config published --device cuda --dtype bf16 --batch 32 --steps 48 12 16 32 64 \\
        --prompts 16 --group 8 --micro-batch 1 --checkpointing on   # issue 25's GPU figures (B 16 × G 8, 48 steps)
Writes reports/meissonic_cost_<config>_<device>.json (--out), after each dtype: a time limit keeps what was measured.
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
        live[ptr] = weakref.ref(t)
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
    args = ap.parse_args(argv)
    args.resolution = args.resolution or RESOLUTION[args.config]
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
