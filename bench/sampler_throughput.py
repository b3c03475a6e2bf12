"""Sampler throughput: images/s and achieved model FLOP/s, beside fp32 matmul FLOP/s in the same process.

Model FLOPs are counted by torch's FlopCounterMode over one sampling call (bench/flops.py: the MDM forwards'
matrix products and attention, CFG included; the text encoder runs once per batch and is left out). The ratio
achieved / matmul (P1, issue 14) says how far the small-matrix, many-step sampler is from the machine's dense fp32
throughput. Each of --repeats rounds times every way of decoding once and the matmul right after (other tenants
change this machine's speed by a fifth within minutes): each ratio is the median of the rounds' ratios.

Why: every matrix product and attention call of one sampling call is replayed alone at its own shapes, called as
the model calls it (a transposed weight view, SDPA with a boolean mask), and timed (`kernels`).
`shape_ceiling` = the sampler's FLOPs ÷ the time those kernels take alone, ÷ matmul FLOP/s: the P1 a sampler
that spent no time outside them would reach; `outside_kernels` = the share of the sampler's time spent elsewhere
(activations, layer norms, concatenations, the sampling itself). The attention calls are also replayed on torch's
math backend (`kernels.attention.math_backend_seconds`): is the flash kernel the faster path at these shapes?
--compile times the sampler as `model.compile: true` decodes: each whole step (the guided forward, the knobs, the
Gumbel draws and the top-k commit) under torch.compile (inductor fuses the GELUs, layer norms, concatenations and the
sampling arithmetic around the GEMMs), after a warm-up that compiles it; the kernels are not replayed then. Not the
default: compiled kernels round differently, and the compilation costs seconds to minutes per process.
images_per_s_context_every_step: the eager sampler as it was before it computed the prompts' context keys and
values once per decoding (`Generator.decoding_condition`, issue 27 item 3), recomputing them at every step;
speedup_over_context_every_step = that time ÷ the measured one.
Usage: python bench/sampler_throughput.py [--model models/base] [--batch 256] [--steps 8] [--compile]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import ProfilerActivity, profile

from cogrpo.config import ModelConfig, ScheduleConfig
from cogrpo.backbones.embedded import EmbeddedGenerator
from cogrpo.backbones.mdm import MDM, MDMConfig
from cogrpo.core.generator import Condition
from cogrpo.core.sampler import sample
from cogrpo.core.schedule import base_knobs

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.flops import count_flops  # noqa: E402


def matmul_flops(n: int = 1024, repeats: int = 20) -> float:
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    start = time.perf_counter()
    for _ in range(repeats):
        a @ b
    return 2 * n**3 * repeats / (time.perf_counter() - start)


def _time(fn, repeats: int = 5) -> float:
    fn()
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    return (time.perf_counter() - start) / repeats


def kernels_alone(fn) -> dict:
    """fn's matrix products (addmm, mm, bmm) and attention calls, each shape replayed alone: their FLOPs and
    seconds, summed over calls."""
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        fn()
    out = {"gemm": [0.0, 0.0], "attention": [0.0, 0.0]}  # [flops, seconds]
    math_s = 0.0  # the attention calls on the math backend
    for e in prof.key_averages(group_by_input_shape=True):
        shapes = e.input_shapes
        if e.key in ("aten::addmm", "aten::mm", "aten::bmm"):
            a, b = (torch.randn(*s) for s in (shapes[1:3] if e.key == "aten::addmm" else shapes[:2]))
            b = torch.randn(*b.shape[:-2], b.shape[-1], b.shape[-2]).transpose(-1, -2)  # as nn.Linear passes W
            bias = torch.randn(*shapes[0]) if e.key == "aten::addmm" else None
            call = (lambda a=a, b=b, c=bias: torch.addmm(c, a, b)) if bias is not None else (lambda a=a, b=b: a @ b)
            flops, kind = 2 * a.numel() * b.shape[-1], "gemm"
        elif e.key == "aten::_scaled_dot_product_flash_attention_for_cpu":
            q, k, v = (torch.randn(*s) for s in shapes[:3])
            mask = torch.ones(*shapes[5], dtype=torch.bool) if len(shapes) > 5 and shapes[5] else None
            call = lambda q=q, k=k, v=v, m=mask: F.scaled_dot_product_attention(q, k, v, attn_mask=m)  # noqa: E731
            flops, kind = 4 * q.numel() * k.shape[-2], "attention"
            with sdpa_kernel(SDPBackend.MATH):
                math_s += _time(call) * e.count
        else:
            continue
        out[kind][0] += flops * e.count
        out[kind][1] += _time(call) * e.count
    kernels = {k: {"gflop": f / 1e9, "seconds": t, "gflops": f / t / 1e9} for k, (f, t) in out.items()}
    kernels["attention"]["math_backend_seconds"] = math_s
    return kernels


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="models/base", help="checkpoint folder; a random default model if absent")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--text-tokens", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--compile", action="store_true", help="each whole step under torch.compile (model.compile)")
    ap.add_argument("--out", default="reports/sampler_throughput.json")
    args = ap.parse_args()
    torch.set_num_threads(2)
    if Path(args.model, "config.json").is_file():
        model = MDM.load(args.model)
    else:
        m = ModelConfig()
        model = MDM(MDMConfig(4, 4, 6, m.text_encoder, 384, m.max_text_tokens, m.dim, m.layers, m.heads)).eval()
    text = torch.randn(args.batch, args.text_tokens, model.cfg.text_dim)
    mask = torch.ones(args.batch, args.text_tokens, dtype=torch.bool)
    cond, model = Condition({"text": text, "text_mask": mask}), EmbeddedGenerator(model, text=None, tokenizer=None)
    knobs, seeds = base_knobs(ScheduleConfig(steps=args.steps)), torch.arange(args.batch)
    flops = count_flops(lambda: sample(model, cond, knobs, seeds))

    def decode(context_every_step: bool = False, compiled: bool = False) -> None:
        model.compile_sampling = compiled  # model.compile: the whole step, as the pipeline decodes with it
        if context_every_step:  # before issue 27 item 3: the prompts' context keys and values at every step
            model.decoding_condition = lambda c: c  # shadows the method on this instance
        sample(model, cond, knobs, seeds)
        model.__dict__.pop("decoding_condition", None)

    ways = {"eager": decode, "context_every_step": lambda: decode(context_every_step=True)}
    if args.compile:
        ways["compiled"] = lambda: decode(compiled=True)
        compile_start = time.perf_counter()
        ways["compiled"]()
        compile_s = time.perf_counter() - compile_start
    # Each repeat times every way once and the matmul reference right after: other tenants change this machine's
    # speed by a fifth within minutes, so each ratio is the median over repeats of ratios measured together.
    times = {name: [] for name in [*ways, "matmul"]}
    for _ in range(args.repeats):
        for name, way in ways.items():
            start = time.perf_counter()
            way()
            times[name].append(time.perf_counter() - start)
        times["matmul"].append(1 / matmul_flops())
    med = statistics.median
    way = "compiled" if args.compile else "eager"
    seconds, peak = med(times[way]), 1 / med(times["matmul"])
    ratio = lambda a, b: med(x / y for x, y in zip(times[a], times[b]))  # noqa: E731
    report = {"images_per_s": args.batch / seconds, "model_gflop_per_image": flops / args.batch / 1e9,
              "achieved_gflops": flops / seconds / 1e9, "matmul_fp32_gflops": peak / 1e9,
              "ratio": flops * ratio("matmul", way), "batch": args.batch, "steps": args.steps,
              "repeats": args.repeats, "params": sum(p.numel() for p in model.parameters()),
              "images_per_s_context_every_step": args.batch / med(times["context_every_step"]),
              "speedup_over_context_every_step": ratio("context_every_step", way)}
    if args.compile:
        write(report | {"compiled": True, "first_call_seconds": compile_s,
                        "eager_ratio": flops * ratio("matmul", "eager"),
                        "speedup_over_eager": ratio("eager", "compiled")}, args.out)
        return
    kernels = kernels_alone(decode)
    kernel_s = sum(k["seconds"] for k in kernels.values())
    replayed = sum(k["gflop"] for k in kernels.values()) * 1e9
    if abs(replayed - flops) > 1e-6 * flops:  # a kernel the replay does not know (e.g. baddbmm) would hide here
        raise SystemExit(f"the replayed kernels do {replayed:.4g} FLOPs, the counter {flops:.4g}")
    write(report | {"kernels": kernels, "shape_ceiling": flops / kernel_s / peak,
                    "outside_kernels": 1 - kernel_s / seconds}, args.out)


def write(report: dict, out: str) -> None:
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
