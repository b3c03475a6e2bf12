"""Sampler throughput: images/s and achieved model FLOP/s, beside fp32 matmul FLOP/s in the same process.

Model FLOPs are counted by torch's FlopCounterMode over one sampling call (the MDM forwards, CFG
included; the text encoder runs once per batch and is left out). The ratio achieved / matmul says how
far the small-matrix, many-step sampler is from the machine's dense fp32 throughput.
Usage: python bench/sampler_throughput.py [--model models/base] [--batch 256] [--steps 8]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from torch.utils.flop_counter import FlopCounterMode

from cogrpo.config import ModelConfig, ScheduleConfig
from cogrpo.backbones.embedded import EmbeddedGenerator
from cogrpo.backbones.mdm import MDM, MDMConfig
from cogrpo.core.generator import Condition
from cogrpo.core.sampler import sample
from cogrpo.core.schedule import base_knobs


def matmul_flops(n: int = 1024, repeats: int = 20) -> float:
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    start = time.perf_counter()
    for _ in range(repeats):
        a @ b
    return 2 * n**3 * repeats / (time.perf_counter() - start)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="models/base", help="checkpoint folder; a random default model if absent")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--text-tokens", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=3)
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
    with FlopCounterMode(display=False) as counter:
        sample(model, cond, knobs, seeds)
    flops = counter.get_total_flops()
    peak = matmul_flops()
    start = time.perf_counter()
    for _ in range(args.repeats):
        sample(model, cond, knobs, seeds)
    seconds = (time.perf_counter() - start) / args.repeats
    achieved = flops / seconds
    report = {"images_per_s": args.batch / seconds, "model_gflop_per_image": flops / args.batch / 1e9,
              "achieved_gflops": achieved / 1e9, "matmul_fp32_gflops": peak / 1e9, "ratio": achieved / peak,
              "batch": args.batch, "steps": args.steps, "params": sum(p.numel() for p in model.parameters())}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
